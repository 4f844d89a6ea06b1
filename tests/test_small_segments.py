"""Thousands of small segments (issue 40, "wide and many"): consecutive small ranges run as one task
(jobs/audit/scan.py CommitlogRun) that reads the routed entries of their joint span once and checks contiguous whole
segments as one context, and the audit says exactly what a task per range says; a range that fails is that range's
failure, its neighbours' findings stand."""
from __future__ import annotations

import json

import pyarrow.parquet as pq
import pytest

from jobs.audit import scan as S
from store_format.write.generate import TrafficConfig, generate_store
from store_format.write.writer import WriterConfig


class _Range:
    def __init__(self, n):
        self.n = n

    def cost(self):
        return self.n


def test_small_ranges_go_in_runs_and_large_ones_alone():
    small, big = S.SMALL_RANGE // 4, S.SMALL_RANGE
    ranges = [_Range(small)] * 3 + [_Range(big)] + [_Range(small)] + [_Range(8192)] * (S.RUN_RANGES + 1)
    tasks = S.in_runs(ranges)
    kinds = [(type(t).__name__, len(t.ranges)) if isinstance(t, S.CommitlogRun) else ("one", t.cost())
             for t in tasks]
    assert kinds == [("CommitlogRun", 3), ("one", big), ("CommitlogRun", S.RUN_RANGES), ("CommitlogRun", 2)]
    assert sum(t.cost() for t in tasks) == sum(r.cost() for r in ranges)


def _rows(out, name):
    t = pq.read_table(out / name)
    t = t.drop([c for c in ("run_id", "run_time") if c in t.column_names])
    return sorted(json.dumps(r, sort_keys=True, default=str) for r in t.to_pylist())


@pytest.mark.spark
def test_runs_find_what_a_task_per_range_finds(spark, tmp_path, monkeypatch):
    from jobs.audit import job as audit_job

    store = tmp_path / "store"
    generate_store(store, TrafficConfig(messages=1500, topics=3, queues=2, seed=5),
                   WriterConfig(mappedFileSizeCommitLog=16384))
    segments = len(list((store / "commitlog").iterdir()))
    assert segments > 30

    def audit(out):
        args = audit_job.build_parser().parse_args(["--store", str(store), "--out", str(out), "--no-report"])
        audit_job.run(spark, args)
        return {n: _rows(out, n) for n in ("findings", "tables/segments", "tables/lag", "tables/transactions")}

    runs = audit(tmp_path / "runs")
    monkeypatch.setattr(S, "SMALL_RANGE", 0)  # every range its own task, as before
    alone = audit(tmp_path / "alone")
    assert runs == alone and len(runs["tables/segments"]) == segments

    # one range failing inside a run (a family's hook, on a context holding it: the run's joint context, then
    # that range alone): its failure, every other range's findings kept
    from jobs.audit.checks import integrity

    monkeypatch.setattr(S, "SMALL_RANGE", 4 << 20)
    real = integrity._segment_parts
    victim = sorted(p.name for p in (store / "commitlog").iterdir())[5]

    def failing(rc, spans):
        if any(p.segment == victim for p in rc.parts):
            raise RuntimeError("a planted failure")
        return real(rc, spans)

    monkeypatch.setattr(integrity, "_segment_parts", failing)
    out = tmp_path / "failing"
    args = audit_job.build_parser().parse_args(["--store", str(store), "--out", str(out), "--no-report"])
    audit_job.run(spark, args)
    findings = pq.read_table(out / "findings").to_pylist()
    failed = [f for f in findings if "planted failure" in json.dumps(f, default=str)]
    assert len(failed) == 1 and victim in json.dumps(failed[0], default=str)
    lo, hi = int(victim), int(victim) + 16384
    kept = {(f["check"], f["physical_offset"]) for f in findings}
    expected = {(f["check"], f["physical_offset"]) for f in pq.read_table(tmp_path / "runs" / "findings").to_pylist()
                if f["physical_offset"] is None or not lo <= f["physical_offset"] < hi}
    assert len(expected) > 5 and expected <= kept
