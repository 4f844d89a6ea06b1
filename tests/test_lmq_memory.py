"""LMQ dispatch lists at scale (issue 40, "Bad input at scale"): records whose dispatch lists name many %LMQ% queues
each.  The driver predicts every unit the dispatch writes and compares it with the queues' units; held whole that
cost ~1.6 KB of driver memory a unit (1,000 records x 2,400 queues peaked at 3.9 GB).  Here the lmq family's driver
step runs on generated spilled partials (as the scan's tasks write them) in a subprocess under an address-space
limit (``resource.setrlimit``) that the bucketed comparison passes and the whole-table one (main before this
change: ``MemoryError``) does not."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent

_UNDER_A_LIMIT = r"""
import json, os, resource, sys
from types import SimpleNamespace
import numpy as np, pyarrow as pa, pyarrow.compute as pc
from jobs.audit.checks import lmq
from jobs.audit.tasks import Emitter, Outputs, RunInfo

folder, records, queues, budget = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])


def partials(folder, records, queues, drop):
    # records at offsets 1000 i, each naming every queue at its offset i; every queue holds a unit per record but
    # ``drop`` (queue, record)
    run = RunInfo(os.path.join(folder, "findings"), "run", None, partials_dir=os.path.join(folder, "partials"))
    names = ",".join(f"%LMQ%q{j}" for j in range(queues))
    phys = np.arange(records, dtype=np.int64) * 1000
    recs = pa.table({
        "broker": ["b"] * records, "physical_offset": phys, "store_size": pa.array([500] * records, pa.int32()),
        "topic": ["LmqParent"] * records, "queue_id": pa.array([0] * records, pa.int32()), "queue_offset": phys // 1000,
        "sys_flag": pa.array([0] * records, pa.int32()), "tags_code": pa.array([0] * records, pa.int64()),
        "names": [names] * records, "offsets": [",".join([str(i)] * queues) for i in range(records)],
        "kept": [True] * records, "pending": [False] * records, "stalls": [False] * records,
        "uniq_key": [f"u{i}" for i in range(records)], "file": ["00000000000000000000"] * records,
        "file_position": phys}, schema=lmq.RECORDS)
    q = np.repeat(np.arange(queues), records)
    i = np.tile(np.arange(records), queues)
    keep = ~((q == drop[0]) & (i == drop[1]))
    q, i = q[keep], i[keep]
    topics = pa.array([f"%LMQ%q{j}" for j in range(queues)])
    units = pa.table({
        "broker": pa.repeat(pa.scalar("b"), len(q)), "topic": topics.take(pa.array(q)),
        "queue_id": pa.array(np.zeros(len(q), np.int32)), "queue_offset": pa.array(i.astype(np.int64)),
        "physical_offset": pa.array(i.astype(np.int64) * 1000),
        "file": pc.binary_join_element_wise(topics.take(pa.array(q)), "/0/00000000000000000000", ""),
        "file_position": pa.array(i.astype(np.int64) * 20), "at_message": pa.array(np.ones(len(q), bool)),
        "message_topic": pa.repeat(pa.scalar("LmqParent"), len(q))}, schema=lmq.UNITS)
    rows = []
    step = max(1, len(q) // 4)
    for n, at in enumerate(range(0, len(q), step)):  # a part per scan task, as the tasks spill them
        out = Emitter()
        if n == 0:
            out.spill("lmq.records", recs)
        out.spill("lmq.units", units.slice(at, step))
        out.write_findings(run, f"part-{n:05d}.parquet")
        rows.append(out.partials["_spilled"][0])
    return Outputs({"_spilled": pa.concat_tables(rows)})


class Ctx:
    def __init__(self, scan):
        self.scan, self.recovery, self.reput_stalls, self.resend_damaged = scan, {}, {}, []
        store = SimpleNamespace(consume_queue_file_size=300_000 * 20, segments=[SimpleNamespace(base_offset=0)])
        self.plans = {"b": SimpleNamespace(geometry=SimpleNamespace(consume_queue_file_size=None), store=store,
                                           queue_files=[])}
        # the partials as the driver held them before they were spilled (Arrow, loaded before the limit)
        self.whole = {n: scan.dataset(n, s).to_table() for n, s in (("lmq.records", lmq.RECORDS),
                                                                     ("lmq.units", lmq.UNITS))}

    def partial(self, name, schema=None):
        return self.whole[name] if name in self.whole else self.scan.get(name, schema)

    def partial_dataset(self, name, schema):
        return self.scan.dataset(name, schema)


def findings(ctx):
    return [(f["check"], f["topic"], f["queue_offset"]) for t in lmq.on_driver(ctx).findings for f in t.to_pylist()]


# the code paths loaded and their pools started before the limit, on a small input
assert findings(Ctx(partials(os.path.join(folder, "warm"), 20, 30, (3, 7)))) == [("lmq.missing_unit", "%LMQ%q3", 7)]
ctx = Ctx(partials(os.path.join(folder, "big"), records, queues, (5, 11)))
size = next(int(l.split()[1]) for l in open("/proc/self/status") if l.startswith("VmSize:")) * 1024
resource.setrlimit(resource.RLIMIT_AS, (size + budget, size + budget))
try:
    print(json.dumps({"findings": findings(ctx)}))
except MemoryError as e:
    print(json.dumps({"memory_error": str(e)}))
"""


def test_thousands_of_lmq_queues_per_record_are_compared_within_a_memory_limit(tmp_path):
    """150 records each naming 2,000 LMQ queues (300,000 predicted units, one missing): the comparison finds the
    missing unit within 192 MiB of address space above what the process had; holding every unit as a Python
    object on the driver needed ~480 MB."""
    env = {**os.environ, "PYTHONPATH": str(REPO), "MALLOC_ARENA_MAX": "2"}
    done = subprocess.run([sys.executable, "-c", _UNDER_A_LIMIT, str(tmp_path), "150", "2000", str(192 << 20)],
                          capture_output=True, text=True, env=env, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    got = json.loads(done.stdout.strip().splitlines()[-1])
    assert got == {"findings": [["lmq.missing_unit", "%LMQ%q5", 11]]}, got
