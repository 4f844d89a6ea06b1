"""The audit engine's own promises (jobs/audit/), beside what it finds (tests/test_audit.py, the pin): few Spark jobs
whatever the checks, every core busy on a dump of one big segment and a partly written one, and a broker whose
audit fails (a task, its recovery, a family) is that broker's finding, not the end of the run."""
from __future__ import annotations

import argparse
import json
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from jobs.audit import job as audit_job
from store_format.write.generate import TrafficConfig, generate_store
from store_format.write.writer import WriterConfig

from .conftest import FIXTURES, fixture_store


def audit_args(stores, out, *extra) -> argparse.Namespace:
    return audit_job.build_parser().parse_args(["--store", *map(str, stores), "--out", str(out), "--no-report",
                                                *extra])


def findings(out: Path) -> list[dict]:
    return pq.read_table(out / "findings").to_pylist()


class FailingTask:
    """A scan task that fails the way a bug or an unforeseen file would."""

    def __init__(self, broker: str):
        self.broker = broker

    def describe(self) -> str:
        return f"{self.broker}: a task that fails"

    def cost(self) -> int:
        return 1

    def run(self, out) -> None:
        raise ValueError("no check foresaw this")


def test_a_failing_task_is_that_brokers_finding_and_the_others_are_whole(spark, tmp_path, monkeypatch):
    plain = audit_job.scan_tasks

    def with_a_failure(ctx, segments, **options):
        return plain(ctx, segments, **options) + [FailingTask("broker")]

    stores = [fixture_store("basic"), fixture_store("broker")]
    clean = audit_job.run(spark, audit_args(stores, tmp_path / "clean"))
    monkeypatch.setattr(audit_job, "scan_tasks", with_a_failure)
    result = audit_job.run(spark, audit_args(stores, tmp_path / "failed"))
    assert clean.exit_code == 0 and result.exit_code == 1
    [failed] = [f for f in findings(tmp_path / "failed") if f["check"] == "broker.audit_failed"]
    details = dict(failed["details"])
    assert failed["broker"] == "broker" and failed["severity"] == "error"
    assert details["error"] == "ValueError: no check foresaw this" and "a task that fails" in details["what"]
    assert details["where"].startswith("audit/tasks.py:")  # the innermost frame of the project's code
    # the other broker's results, and the failing broker's other tasks', are all there
    key = lambda f: (f["check"], f["broker"], f["physical_offset"], f["message"])  # noqa: E731
    assert sorted(map(key, findings(tmp_path / "clean"))) == sorted(
        key(f) for f in findings(tmp_path / "failed") if f["check"] != "broker.audit_failed")


@pytest.mark.parametrize("name", ["lag", "transactions"])  # one run in turn, one beside the others
def test_a_failing_family_is_a_finding_for_every_broker(spark, tmp_path, monkeypatch, name):
    from dataclasses import replace
    from importlib import import_module

    module = import_module(f"jobs.audit.checks.{name}")

    def broken(ctx):
        raise KeyError("offset")

    monkeypatch.setattr(module, "FAMILY", replace(module.FAMILY, on_driver=broken))
    result = audit_job.run(spark, audit_args([fixture_store("basic"), fixture_store("broker")], tmp_path / "out",
                                             "--checks", f"{name},metadata"))
    rows = findings(tmp_path / "out")
    failed = [f for f in rows if f["check"] == "broker.audit_failed"]
    assert result.exit_code == 1 and sorted(f["broker"] for f in failed) == ["basic", "broker"]
    assert all(dict(f["details"])["what"] == f"the {name} checks" for f in failed)
    assert any(f["check"].startswith("metadata.") for f in rows)  # the other family ran


def test_the_families_beside_run_while_the_others_do_and_their_results_keep_the_families_order():
    """Each family that runs beside the others runs in a thread of its own at once: here the first waits for what
    the last family run in turn does (were they run one after the other, it would wait in vain), and the results
    are in the families' order all the same."""
    import threading
    from types import SimpleNamespace

    from jobs.audit.contract import Family, FamilyResult

    started, told = threading.Event(), threading.Event()

    def waits(ctx):
        started.set()
        assert told.wait(30), "a family beside the others ran after them"
        return FamilyResult(metrics=["waits"])

    def tells(ctx):
        assert started.wait(30)
        told.set()
        return FamilyResult(metrics=["tells"])

    families = [Family("waits", "", on_driver=waits, beside=True),
                Family("plain", "", on_driver=lambda ctx: FamilyResult(metrics=["plain"])),
                Family("also", "", on_driver=lambda ctx: FamilyResult(metrics=["also"]), beside=True),
                Family("tells", "", on_driver=tells)]
    ctx = SimpleNamespace(families=families, failures=[], stores=[], plans={}, tables_closed=lambda: None)
    results = audit_job._finish(ctx)
    assert [r.metrics for r in results[:-1]] == [["waits"], ["plain"], ["also"], ["tells"]]


def test_an_interrupt_stops_a_family_beside_at_its_next_batch():
    """A signal reaches the main thread only: a family run beside the others stops at its next batch (its table's
    write checks), so the run ends with the interrupt, not when the family would have ended (here: never)."""
    import signal
    import threading
    import time
    from types import SimpleNamespace

    import pyarrow as pa

    from jobs.audit.context import TableWriter
    from jobs.audit.contract import Family, FamilyResult
    from store_format import interrupts

    wrote, batches = threading.Event(), []
    schema = pa.schema([("n", pa.int64())])

    def endless(ctx):
        writer, deadline = TableWriter(None, schema), time.monotonic() + 60
        while time.monotonic() < deadline:  # without the check: a minute, then the test fails
            writer.write(pa.table({"n": [len(batches)]}, schema=schema))
            batches.append(1)
            wrote.set()
        return FamilyResult()

    def signalled(ctx):  # the main thread's family when the signal comes
        assert wrote.wait(30)
        raise interrupts.Interrupted(signal.SIGINT)

    families = [Family("endless", "", on_driver=endless, beside=True), Family("signalled", "", on_driver=signalled)]
    ctx = SimpleNamespace(families=families, failures=[], stores=[], plans={}, tables_closed=lambda: None)
    t0 = time.monotonic()
    with pytest.raises(interrupts.Interrupted):
        audit_job._finish(ctx)
    assert time.monotonic() - t0 < 30 and batches
    interrupts.check_beside()  # outside the families beside: nothing to stop


def _jobs_of_an_audit(spark, out: Path, executor: str) -> int:
    sc = spark.sparkContext

    def job_id(group: str) -> int:  # Spark numbers jobs in order: one RDD action's id marks a point in time
        sc.setJobGroup(group, group)
        try:
            sc.parallelize([1], 1).count()
        finally:
            sc.setJobGroup("", "")
        [i] = sc.statusTracker().getJobIdsForGroup(group)
        return i

    before = job_id(f"before-{out.name}")
    audit_job.run(spark, audit_args([fixture_store("basic"), fixture_store("broker"),
                                     FIXTURES / "recovered-zero-page" / "input" / "store"], out,
                                    "--executor", executor))
    return job_id(f"after-{out.name}") - before - 1


def test_an_audit_is_two_spark_jobs_or_none_in_the_driver(spark, tmp_path):
    """--executor spark: the survey and the scan are two Spark jobs, whatever the number of checks and files (the
    report and every output are written without Spark); --executor driver (auto's choice in local mode): both run
    in the driver's threads, with the same findings and summary."""
    assert _jobs_of_an_audit(spark, tmp_path / "spark", "spark") == 2
    assert _jobs_of_an_audit(spark, tmp_path / "local", "driver") == 0
    key = lambda f: (f["check"], f["broker"], f["file"] or "", f["file_position"] or -1)  # noqa: E731
    drop = {"run_id", "run_time"}
    spark_findings, local_findings = ([{k: v for k, v in f.items() if k not in drop} for f in findings(tmp_path / d)]
                                      for d in ("spark", "local"))
    assert sorted(spark_findings, key=key) == sorted(local_findings, key=key) and spark_findings
    summary = lambda d: json.loads((tmp_path / d / "summary.json").read_text())  # noqa: E731
    assert summary("spark")["counts"] == summary("local")["counts"]
    assert [b["recovery"] for b in summary("spark")["brokers"]] == [b["recovery"] for b in summary("local")["brokers"]]


def test_the_newest_segment_is_split_over_its_data(tmp_path):
    """One full segment and a partly written one, fewer than the cores want: both are cut into ranges, the
    newest only over its written data (its zero tail is the last range's)."""
    from jobs.audit.inputs import StoreRef
    from store_format import fs
    from jobs.audit.plan import plan_broker, plan_segments
    from store_format.plan import written_end

    root = tmp_path / "store"
    segment = 4 << 20
    generate_store(root, TrafficConfig(messages=12_000, topics=2, queues=2, seed=5),
                   WriterConfig(mappedFileSizeCommitLog=segment, maxHashSlotNum=1000, maxIndexNum=4000))
    plan = plan_broker(StoreRef("b", fs.resolve(str(root)), str(root)))
    segs = plan.segments
    assert len(segs) == 2
    # 8 cores want ~24 ranges: the size is the floor (32 MiB), one range a segment; 1 MiB ranges for the test
    assert [len(sp.ranges) for sp in plan_segments({"b": plan}, 8, None, False)] == [1, 1]
    ranges = {sp.segment.name: sp.ranges for sp in plan_segments({"b": plan}, 8, 1 << 20, False)}
    newest = ranges[segs[1].name]
    data = written_end(segs[1].loc, segs[1].length)
    assert len(ranges[segs[0].name]) == 4
    assert 0 < data < segment and len(newest) == -(-data // (1 << 20))
    assert newest[-1].end == segment and newest[-1].last and all(not r.last for r in newest[:-1])
    assert all(a.end == b.start for a, b in zip(newest, newest[1:]))  # the ranges tile the segment


def test_an_index_counter_past_its_entries_is_one_finding(spark, tmp_path):
    """One cause, one finding (issue 22): a header whose indexCount runs 1,830 entries past the last written one
    is reported once, where the zeros start; the zeros are not checked as 1,830 broken, unreachable, mismatched
    or duplicate entries."""
    import shutil
    import struct

    from store_format import layout as L
    from store_format.indexfile import IndexFile, list_index_files

    store = tmp_path / "store"
    shutil.copytree(fixture_store("basic"), store)
    path = list_index_files(store / "index")[0]
    with IndexFile(path) as f:
        slots, entries, written = f.hash_slot_num, f.index_num, f.header.index_count
    audit_job.run(spark, audit_args([store], tmp_path / "clean", "--hash-slots", str(slots),
                              "--index-num", str(entries)))
    raw = bytearray(path.read_bytes())
    struct.pack_into(">i", raw, L.INDEX_HEADER.offset("index_count"), 2000)
    path.write_bytes(bytes(raw))
    audit_job.run(spark, audit_args([store], tmp_path / "out", "--hash-slots", str(slots), "--index-num", str(entries)))
    index = [f for f in findings(tmp_path / "out") if f["check"].startswith("index.")]
    before = [f for f in findings(tmp_path / "clean") if f["check"].startswith("index.")]
    [unwritten] = [f for f in index if f["check"] == "index.unwritten_entries"]
    assert unwritten["file_position"] == 40 + slots * 4 + written * 20
    assert dict(unwritten["details"]) == {"index_count": "2000", "written_entries": str(written - 1)}
    assert f"counts {2000 - written} entries past the last written one, entry {written - 1}" in unwritten["message"]
    assert sorted(f["message"] for f in index if f is not unwritten) == sorted(f["message"] for f in before)


def test_routing_buckets_in_one_pass_are_the_sorted_ones():
    """Buckets.of_offsets (one compiled pass) gives what bucket_of then Buckets.of (a sort) give: offsets below
    the commitlog, past its end and inside it, entries in any order, rows given or counted from a base."""
    import numpy as np

    from jobs.audit.plan import Buckets, bucket_of

    rng = np.random.default_rng(7)
    for n, shift, end in ((0, 10, 0), (1, 4, 100), (5_000, 12, 1 << 22), (20_000, 20, 3 << 30)):
        phys = rng.integers(-(1 << 12), end + (1 << 14), n, dtype=np.int64)
        rows = rng.permutation(n * 3)[:n].astype(np.int64)
        for given, expected_rows in ((rows, rows), (5, np.arange(5, 5 + n, dtype=np.int64))):
            want = Buckets.of(bucket_of(phys, shift, end), expected_rows)
            got = Buckets.of_offsets(phys, given, shift, end)
            for a, b in ((got.buckets, want.buckets), (got.first, want.first), (got.last, want.last)):
                assert np.array_equal(a, b)


def test_a_config_read_from_its_backup_is_named_for_its_broker_only(spark, tmp_path):
    """metadata.config_from_backup comes from each broker's first source of a config table (the file the rows were
    read from): of three brokers, the one whose topics.json is gone (its topics.json.bak read) is named, once, and
    the others are not, whatever their order."""
    import shutil

    stores = []
    for name in ("a", "b", "c"):
        root = tmp_path / name / "store"
        shutil.copytree(fixture_store("broker"), root)
        stores.append(root)
    (stores[1] / "config" / "topics.json").unlink()
    out = tmp_path / "out"
    audit_job.run(spark, audit_args([f"{n}={s}" for n, s in zip("abc", stores)], out, "--checks", "metadata"))
    backup = [(f["broker"], f["file"]) for f in findings(out) if f["check"] == "metadata.config_from_backup"]
    assert backup == [("b", "config/topics.json")]


def test_groups_missing_from_the_config_found_in_one_grouping_are_the_per_broker_ones():
    """metadata.groups_not_in_config (every broker's committed offsets grouped once) finds the (broker, group) pairs
    the per-broker masks found: of the brokers asked only, null groups and groups configured for another broker
    told apart, a broker without a subscriptionGroup.json row missing every group."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc

    from jobs.audit.checks.metadata import groups_not_in_config

    def per_broker(t, groups, brokers):  # the walk it replaces: a mask over every broker's offsets a broker
        found = set()
        for b in brokers:
            mine = t.filter(pc.and_(pc.equal(t.column("broker"), b), pc.is_valid(t.column("group"))))
            missing = mine.filter(pc.invert(pc.is_in(mine.column("group"), pa.array(groups.get(b, []), pa.string()))))
            found.update((b, g) for g in pc.unique(missing.column("group")).to_pylist())
        return found

    rng = np.random.default_rng(11)
    names = [f"b{i:02d}" for i in range(12)]
    for n in (0, 1, 50, 3_000):
        brokers = [names[i] for i in rng.integers(0, 12, n)]
        group = [None if x == 0 else f"g{x}" if x < 9 else "" for x in rng.integers(0, 12, n)]
        t = pa.table({"broker": pa.array(brokers, pa.string()), "topic": pa.array(["t"] * n, pa.string()),
                      "group": pa.array(group, pa.string())})
        groups = {b: [f"g{x}" for x in rng.integers(1, 9, 4)] + ([""] if i % 3 == 0 else [])
                  for i, b in enumerate(names[:9])}  # b09..b11: no configured group
        asked = names[1:11]
        got = groups_not_in_config(t, groups, asked)
        assert got == per_broker(t, groups, asked)
        assert n < 1_000 or len(got) > 10
