"""Many scheduled messages (issue 40, "Driver memory in proportion to brokers, queues and groups, never to
messages"): the delays family joins every pending delayed message with the record the scan found for it and with
the delivered copies of its key.  Held whole on the driver as Python dicts that cost ~1.5 KB a pending message; here
the family's driver step runs on generated spilled partials (as the survey's and scan's tasks write them) in a
subprocess under an address-space limit (``resource.setrlimit``) that the bucketed join passes and the whole-table
one (main before this change: ``MemoryError``) does not."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent

_UNDER_A_LIMIT = r"""
import json, os, resource, sys
import numpy as np, pyarrow as pa, pyarrow.compute as pc
from jobs.audit.checks import delays as D
from jobs.audit.tasks import Emitter, Outputs, RunInfo

folder, n, budget = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])


def stages(folder, n):
    # n pending messages of broker b over 18 levels, each found by the scan as the record u<i> for topic T, due one
    # ms apart from 10,000 (the dump time 10,004: the first five are due); u2 and u7 were delivered
    run = RunInfo(os.path.join(folder, "findings"), "run", None, partials_dir=os.path.join(folder, "partials"))
    i = np.arange(n, dtype=np.int64)
    keys = pc.binary_join_element_wise("u", pa.array(i).cast(pa.string()), "")
    pending = pa.table({"broker": pa.repeat(pa.scalar("b"), n), "level": pa.array((i % 18 + 1).astype(np.int32)),
                        "queue_offset": pa.array(i // 18), "physical_offset": pa.array(i * 100),
                        "deliver_time": pa.array(10_000 + i), "uniq_key": keys,
                        "real_topic": pa.repeat(pa.scalar("T"), n)}, schema=D.PENDING)
    found = pa.table({"broker": pa.repeat(pa.scalar("b"), n), "physical_offset": pa.array(i * 100), "uniq_key": keys,
                      "real_topic": pa.repeat(pa.scalar("T"), n),
                      "segment": pa.repeat(pa.scalar("00000000000000000000"), n), "file_position": pa.array(i * 100),
                      "store_timestamp": pa.array(i)}, schema=D.FOUND)
    delivered = pa.table({"broker": ["b", "b"], "real_topic": ["T", "T"], "uniq_key": ["u2", "u7"]}, schema=D.DELIVERED)
    out = []
    for stage, parts in (("survey", [("delays.pending", pending)]),
                         ("scan", [("delays.found", found), ("delays.delivered", delivered)])):
        rows = []
        step = -(-n // 4)
        for k in range(4):  # a part per task, as the tasks spill them
            e = Emitter()
            for name, t in parts:
                if name != "delays.delivered" or k == 0:
                    e.spill(name, t.slice(k * step, step))
            e.write_findings(run, f"part-{stage}{k:05d}.parquet")
            rows.append(e.partials["_spilled"][0])
        out.append(Outputs({"_spilled": pa.concat_tables(rows)}))
    return out


class Ctx:
    def __init__(self, survey, scan):
        self.survey, self.scan, self.as_of = survey, scan, {"b": 10_004}
        self.queue_bounds = pa.table({"broker": ["b"] * 18, "topic": ["SCHEDULE_TOPIC_XXXX"] * 18,
                                      "queue_id": list(range(18)), "min_offset": [0] * 18, "max_offset": [10**6] * 18})
        # the partials as the driver held them before they were spilled (Arrow, loaded before the limit)
        self.whole = {"delays.pending": survey.dataset("delays.pending", D.PENDING).to_table(),
                      "delays.found": scan.dataset("delays.found", D.FOUND).to_table(),
                      "delays.delivered": scan.dataset("delays.delivered", D.DELIVERED).to_table()}

    def metadata(self, name):
        return pa.table({"broker": ["b"], "delay_level": [1], "offset": [0], "error": pa.nulls(1, pa.string())})

    def partial(self, name, schema=None):
        return self.whole[name]

    survey_partial = partial

    def partial_dataset(self, name, schema):
        return self.scan.dataset(name, schema)

    def partial_batches(self, name, schema, columns=None):
        return self.scan.batches(name, schema, columns)

    def survey_partial_batches(self, name, schema, columns=None):
        return self.survey.batches(name, schema, columns)

    def survey_partial_parts(self, name):
        return self.survey.parts(name)

    def findings_writer(self, name):  # kept in memory, as a family run on its own keeps them
        from jobs.audit.context import TableWriter
        from jobs.audit.findings import FINDING_SCHEMA

        return TableWriter(None, FINDING_SCHEMA)


def findings(ctx):
    res = D.on_driver(ctx)
    return [(f["check"], f["queue_offset"], dict(f["details"]).get("uniq_key")) for t in res.findings
            for f in t.to_pylist()], sum(res.tables["delays"].column("pending").to_pylist())


# the code paths loaded and their pools started before the limit, on a small input
findings(Ctx(*stages(os.path.join(folder, "warm"), 40)))
ctx = Ctx(*stages(os.path.join(folder, "big"), n))
size = next(int(l.split()[1]) for l in open("/proc/self/status") if l.startswith("VmSize:")) * 1024
resource.setrlimit(resource.RLIMIT_AS, (size + budget, size + budget))
try:
    got, pending = findings(ctx)
    print(json.dumps({"findings": got, "pending": pending}))
except MemoryError as e:
    print(json.dumps({"memory_error": str(e)}))
"""


def test_many_pending_delayed_messages_are_joined_within_a_memory_limit(tmp_path):
    """400,000 pending delayed messages, five due and two of them delivered: the findings and the per-level counts
    within 160 MiB of address space above what the process had (it passes within 96); main's dicts of every pending
    message and its record failed within 400 MiB and passed within 700."""
    env = {**os.environ, "PYTHONPATH": str(REPO), "MALLOC_ARENA_MAX": "2"}
    done = subprocess.run([sys.executable, "-c", _UNDER_A_LIMIT, str(tmp_path), "400000", str(160 << 20)],
                          capture_output=True, text=True, env=env, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    got = json.loads(done.stdout.strip().splitlines()[-1])
    assert got == {"findings": [["delays.overdue", 0, "u0"], ["delays.overdue", 0, "u1"],
                                ["delays.overdue", 0, "u3"], ["delays.overdue", 0, "u4"],
                                ["delays.delivered_offset_behind", 0, "u2"],
                                ["delays.delivered_offset_behind", 0, "u7"]], "pending": 400_000}, got


def test_each_brokers_pending_probe_from_batches_of_many_brokers():
    """delays._pending_probes over batches that hold many brokers' rows (a fleet's small parts gathered: tasks.Outputs
    .batches) gives each broker the probe a mask a broker gave: its pending offsets and the hashes of its (real
    topic, uniq key) pairs, rows without a broker or a key left out, a broker with none None."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc

    from jobs.audit.buckets import key_hash
    from jobs.audit.checks import delays as D

    rng = np.random.default_rng(5)
    n = 4_000
    brokers = [None if x == 0 else f"b{x:02d}" for x in rng.integers(0, 20, n)]
    table = pa.table({"broker": pa.array(brokers, pa.string()),
                      "physical_offset": pa.array(rng.integers(0, 1 << 30, n), pa.int64()),
                      "real_topic": pa.array([None if x == 0 else f"T{x}" for x in rng.integers(0, 6, n)], pa.string()),
                      "uniq_key": pa.array([None if x == 0 else f"U{x}" for x in rng.integers(0, 900, n)],
                                           pa.string())})

    class Ctx:
        plans = {f"b{x:02d}": None for x in range(22)}  # b20, b21: no pending message

        def survey_partial_batches(self, name, schema, columns=None):
            return [table.slice(0, 1_500), table.slice(1_500, 1), table.slice(1_501)]

    got = D._pending_probes(Ctx())
    for b in Ctx.plans:  # the per-broker masks it replaces
        mine = table.filter(pc.equal(table.column("broker"), b))
        if not mine.num_rows:
            assert got[b] is None
            continue
        keyed = mine.filter(pc.and_(pc.is_valid(mine.column("real_topic")), pc.is_valid(mine.column("uniq_key"))))
        assert np.array_equal(got[b]["physical_offsets"], np.unique(mine.column("physical_offset").to_numpy()))
        assert np.array_equal(got[b]["copies"], np.unique(key_hash(keyed.column("real_topic"),
                                                                   keyed.column("uniq_key"))))
    assert sum(v is None for v in got.values()) == 3  # b00 (the rows without a broker), b20, b21
