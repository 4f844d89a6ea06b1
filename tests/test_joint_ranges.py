"""A CommitlogRun's contiguous whole segments checked as one context (jobs/audit/scan.py ``check_jointly``: one
decode, each family's ``in_range`` once) say exactly what each range checked on its own says: every output of the
audit (findings with their ids, metrics, tables, summary) of damaged stores in 8 KiB segments, both ways."""
from __future__ import annotations

import json
import struct
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from jobs.audit import scan as S
from store_format import layout as L
from store_format.write import damage as D
from store_format.write.generate import Traffic5Config, TrafficConfig, config_5x, generate_store
from store_format.write.writer import WriterConfig

SEGMENT = 8192
# the scan's partials that stay a row per range however the ranges are checked (the others, summed on the driver,
# may be fewer rows of a joint context: the outputs made of them are compared)
PER_RANGE = ("scan.ranges", "integrity.segments", "integrity.forced_refusal")


def _damaged_4x(tmp: Path) -> Path:
    """A 4.x store in 8 KiB segments with damage of every kind the scan reports per range: a bad CRC, a wrong
    size, a bad magic and a zeroed page in the middle (stale records after the first stop of their segment), a
    torn tail, a stale index entry, consume-queue units pointing into a record and past the data's end."""
    src = tmp / "clean"
    generate_store(src, TrafficConfig(messages=1500, topics=3, queues=2, seed=5, cover=True),
                   WriterConfig(mappedFileSizeCommitLog=SEGMENT))
    frames = D._messages(src)
    at = [frames[len(frames) * k // 10].physical_offset for k in (2, 4, 6, 8)]
    steps = [lambda a, b: D.bad_crc(a, b, at[0]), lambda a, b: D.size_mismatch(a, b, at[1]),
             lambda a, b: D.bad_magic(a, b, at[2]), lambda a, b: D.zero_page(a, b, at[3]),
             lambda a, b: D.stale_index_entry(a, b), lambda a, b: D.torn_tail(a, b)]
    store = src
    for k, step in enumerate(steps):
        step(store, tmp / f"d{k}")
        store = tmp / f"d{k}"
    cq = sorted((store / "consumequeue" / "Topic000" / "0").iterdir())[0]
    data = bytearray(cq.read_bytes())
    for unit, move in ((3, lambda p: p + 5), (4, lambda p: p + (1 << 30))):  # into a record; past the data's end
        pos = unit * L.CQ_STORE_UNIT_SIZE
        phys = struct.unpack_from(">q", data, pos)[0]
        struct.pack_into(">q", data, pos, move(phys))
    cq.write_bytes(bytes(data))
    return store


def _damaged_5x(tmp: Path) -> Path:
    """A 5.x store (timers, LMQ, POP, batch queues, __CRC32#) in 8 KiB segments, a body bit flipped, a
    ``__CRC32#`` that is not digits and a torn tail."""
    src = tmp / "clean5"
    generate_store(src, Traffic5Config(messages=700, seed=3),
                   config_5x(WriterConfig(mappedFileSizeCommitLog=SEGMENT, mappedFileSizeTimerLog=8192)))
    frames = D._messages(src)
    mid = frames[len(frames) // 2].physical_offset
    store = src
    for k, step in enumerate((lambda a, b: D.flip_body_bit(a, b, mid), lambda a, b: D.crc_property_non_digit(a, b),
                              lambda a, b: D.torn_tail(a, b))):
        step(store, tmp / f"e{k}")
        store = tmp / f"e{k}"
    return store


def _outputs(out: Path) -> dict:
    """Every file the audit wrote, as sorted rows (Parquet: the task parts' order is the executor's) or text."""
    got = {}
    for f in sorted(out.rglob("*")):
        if not f.is_file() or f.name.startswith((".", "_")):
            continue
        rel = str(f.relative_to(out))
        if f.suffix == ".parquet":
            t = pq.read_table(f)
            t = t.drop([c for c in ("run_id", "run_time") if c in t.column_names])
            got.setdefault(str(f.parent.relative_to(out)), []).extend(
                json.dumps(r, sort_keys=True, default=str) for r in t.to_pylist())
        elif f.suffix == ".json":
            got[rel] = _without_run(json.loads(f.read_text().replace(str(out), "OUT")))
    return {k: sorted(v) if isinstance(v, list) else v for k, v in got.items()}


def _without_run(doc):
    """summary.json without what differs between two runs of the same audit (its id, time, folders, timings)."""
    if isinstance(doc, dict):
        return {k: _without_run(v) for k, v in doc.items()
                if k not in ("run_id", "run_time", "elapsed_seconds", "out", "timings", "profile")}
    if isinstance(doc, list):
        return [_without_run(v) for v in doc]
    return doc


@pytest.mark.spark
@pytest.mark.parametrize("build", [_damaged_4x, _damaged_5x], ids=["4x", "5x"])
def test_joint_context_says_what_each_range_says(spark, tmp_path, monkeypatch, build):
    from jobs.audit import job as audit_job
    from jobs.audit.tasks import Emitter

    store = build(tmp_path)
    rows: dict[str, list] = {}
    real_partial = Emitter.partial

    def partial(self, name, table):
        if name in PER_RANGE:
            rows.setdefault(name, []).extend(json.dumps(r, sort_keys=True) for r in table.to_pylist())
        return real_partial(self, name, table)

    monkeypatch.setattr(Emitter, "partial", partial)
    assert len(list((store / "commitlog").iterdir())) > 40
    joint = []
    real = S.check_jointly
    monkeypatch.setattr(S, "check_jointly", lambda *a: joint.append(real(*a)) or joint[-1])

    def audit(out):
        rows.clear()
        args = audit_job.build_parser().parse_args(["--store", str(store), "--out", str(out), "--no-report"])
        audit_job.run(spark, args)
        return {**_outputs(out), **{f"partial {name}": sorted(r) for name, r in rows.items()}}

    together = audit(tmp_path / "joint")
    assert joint and all(joint)  # the runs' segments were checked jointly, none fell back
    monkeypatch.setattr(S, "JOINT", False)
    alone = audit(tmp_path / "alone")
    assert together.keys() == alone.keys()
    for name in together:
        assert together[name] == alone[name], name
    assert len(together["partial scan.ranges"]) == len(list((store / "commitlog").iterdir()))
    if build is _damaged_4x:  # every range's first walked record lacks __CRC32#: a forced refusal per range
        assert len(together["partial integrity.forced_refusal"]) > 40
    findings = {json.loads(r)["check"] for r in together["findings"]}
    assert {"integrity.bad_crc", "integrity.stale_records"} <= findings or "integrity.damaged_message" in findings
