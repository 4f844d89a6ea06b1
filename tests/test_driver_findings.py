"""The families' findings on the driver (issue 40: driver memory never in proportion to the messages): a family whose
findings grow with the messages writes them as it makes them (AuditContext.findings_writer) and the job copies them
into findings/part-driver.parquet a batch at a time, counted as they are written, in the families' order."""
from __future__ import annotations

import datetime as dt

import pyarrow as pa
import pyarrow.parquet as pq

from jobs.audit import findings as FD
from jobs.audit.checks import load_all
from jobs.audit.context import AuditContext
from jobs.audit.job import _write_driver_findings
from jobs.audit.tasks import RunInfo
from store_format.fs import resolve


def _findings(check_id: str, brokers: list[str]) -> pa.Table:
    return FD.finding_table(check_id, len(brokers), broker=pa.array(brokers), physical_offset=pa.array(
        range(len(brokers)), pa.int64()), values={"topic": "T", "producer_group": "g", "age_seconds": 1,
                                                  "check_times": 0})


def test_spooled_findings_are_copied_among_the_others_in_order_and_counted(tmp_path):
    load_all()
    ctx = AuditContext.__new__(AuditContext)
    ctx.partials_dir, ctx.closing = resolve(str(tmp_path / "partials")), []
    spool = ctx.findings_writer("transactions.open")
    parts = [_findings("transactions.open", [f"b{i}"] * 3) for i in range(4)]
    for p in parts:
        spool.write(p)
    spooled = spool.close()
    ctx.tables_closed()  # the file closed beside, as the job waits for it after the families
    assert spooled.rows == 12 and len(spooled.paths) == 1
    assert resolve(spooled.paths[0]).local_path.startswith(str(tmp_path / "partials" / "_findings"))
    before = _findings("transactions.commit_without_op", ["a", "b"])
    after = FD.empty_findings()
    run = RunInfo(resolve(str(tmp_path / "findings")), "run-1", dt.datetime(2026, 12, 3, tzinfo=dt.timezone.utc))

    counts = _write_driver_findings([before, spooled, after], run)

    got = pq.read_table(tmp_path / "findings" / "part-driver.parquet")
    want = FD.as_written(pa.concat_tables([before] + parts), run.run_id, run.run_time)
    assert got.drop(["run_time"]).equals(want.drop(["run_time"]).cast(got.drop(["run_time"]).schema))
    assert sorted((r["check"], r["count"]) for r in counts) == [("transactions.commit_without_op", 2),
                                                                 ("transactions.open", 12)]


def test_no_findings_still_write_a_file_with_the_findings_schema(tmp_path):
    run = RunInfo(resolve(str(tmp_path / "findings")), "run-1", dt.datetime(2026, 12, 3, tzinfo=dt.timezone.utc))
    assert _write_driver_findings([FD.empty_findings()], run) == []
    t = pq.read_table(tmp_path / "findings" / "part-driver.parquet")
    assert t.num_rows == 0 and t.schema.names == FD.FINDINGS_FILE_SCHEMA.names


def test_without_a_run_the_findings_writer_keeps_its_batches_as_a_table():
    load_all()
    ctx = AuditContext.__new__(AuditContext)
    ctx.partials_dir, ctx.closing = None, []
    w = ctx.findings_writer("retries.dlq_message")
    w.write(_findings("transactions.open", ["a"]))
    t = w.close()
    assert isinstance(t, pa.Table) and t.num_rows == 1 and ctx.findings_spool is None


def test_making_findings_leaves_no_reference_cycle_holding_their_columns():
    """A finding's columns are freed when its table is: a cycle (a closure calling itself) kept them until Python's
    cyclic collector ran, which counts objects, not the Arrow bytes they hold (4 GiB of log: ~80 MB held)."""
    import gc

    load_all()
    assert FD.render("a [b {x}] c {y|?}", 2, {"x": pa.array([1, None]), "y": "z"}).to_pylist() == ["a b 1 c z",
                                                                                                  "a  c z"]
    gc.collect()
    gc.disable()
    try:
        table = _findings("transactions.open", ["b0", "b1"])
        FD.render("a [b {x}] c", 2, {"x": pa.array([1, None])})
        del table
        assert gc.collect() == 0
    finally:
        gc.enable()
