"""Config files at any size (issue 40), the audit's side: a consumerOffset.json holding more offsets than memory
holds whole (``store_format.config.offsets_limit()``) is no longer skipped: the audit streams it into Parquet in
the run's staging (jobs.audit.context.AuditContext.consumer_offset_parts) and its families read it a batch at a
time -- the lag table written a part at a time, its per-(group, topic) figures kept as aggregates.  Both paths give
the same outputs (an audit forced through the spilled one equals the in-memory one), and the spilled one audits a
file under an address-space limit (``resource.setrlimit`` in a subprocess) the whole-table path cannot fit."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import jobs.audit.context as X
from store_format import config as C
from store_format.config import dumps_fastjson

from .conftest import FIXTURES, fixture_store

REPO = Path(__file__).resolve().parent.parent


def _audit_pin():
    import importlib.util

    spec = importlib.util.spec_from_file_location("tools_audit_pin", REPO / "tools" / "audit_pin.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _audit(spark, store: Path, out: Path):
    from jobs.audit import build_parser, run

    return run(spark, build_parser().parse_args(["--store", str(store), "--out", str(out), "--no-report"]))


@pytest.mark.spark
@pytest.mark.parametrize("fixture", ["rocketmq-4.9.7/broker", "rocketmq-5.3.3/v5-lmq", "rocketmq-5.3.3/v5-default"])
def test_an_audit_forced_through_the_spilled_offsets_equals_the_in_memory_one(spark, tmp_path, monkeypatch, fixture):
    """Every output (findings, metrics, every table, the summary) of the audit of a fixture whose consumerOffset.json
    is spilled -- the threshold at 0, the stream's batches of one map, the stream taken for a file of any size --
    equals the in-memory audit's."""
    pin = _audit_pin()
    store = FIXTURES.parent / fixture
    plain = _audit(spark, store, tmp_path / "memory")
    monkeypatch.setattr(X, "SPILL_OFFSETS", 0)
    monkeypatch.setattr(C, "OFFSET_BATCH_ROWS", 1)
    monkeypatch.setattr(X, "SPILL_READ_ROWS", 1)  # read back a row at a time: a map's rows in several batches
    monkeypatch.setattr(C, "_FAST_MIN", 0)
    spilled = _audit(spark, store, tmp_path / "spilled")
    parts = list((tmp_path / "spilled" / "partials" / "consumer_offsets").glob("*.parquet"))
    has_offsets = (next(store.rglob("config")) / "consumerOffset.json").exists()
    assert bool(parts) == has_offsets  # the spilled path was taken where there is a file
    a = pin.normalize_run(tmp_path / "memory", store, plain)
    b = pin.normalize_run(tmp_path / "spilled", store, spilled)
    b["summary"] = json.loads(json.dumps(b["summary"]).replace("/spilled", "/memory"))
    assert a["tables"] == b["tables"] and a["schemas"] == b["schemas"]
    assert a["summary"] == b["summary"]


def _offsets_file(maps: int, topics: int) -> str:
    """consumerOffset.json as a broker writes it (fastjson: tabs, bare Integer keys): ``maps`` maps of 2-6 queues
    over ``topics`` topics, every offset 0 (nothing for the lag checks to flag: the figures are the reading's)."""
    body = ",\n".join(f'\t\t"T{m % topics}@g{m}":{{' + ",".join(f"{q}:0" for q in range((2, 4, 4, 6)[m % 4]))
                      + "\n\t\t}" for m in range(maps))
    return '{\n\t"offsetTable":{\n' + body + '\n\t},\n\t"dataVersion":{\n\t\t"counter":1,\n\t\t"timestamp":1\n\t}\n}'


def _big_store(tmp_path: Path, maps: int, topics: int = 300) -> tuple[Path, int]:
    root = tmp_path / "store"
    shutil.copytree(fixture_store("basic"), root)
    for p in [root, *root.rglob("*")]:
        p.chmod(0o755 if p.is_dir() else 0o644)
    config = root / "config"
    (config / "topics.json").write_text(dumps_fastjson({"topicConfigTable": {
        f"T{i}": {"topicName": f"T{i}", "readQueueNums": 8, "writeQueueNums": 8, "perm": 6} for i in range(topics)}}))
    (config / "consumerOffset.json").write_text(_offsets_file(maps, topics))
    return root, sum((2, 4, 4, 6)[m % 4] for m in range(maps))


_AUDIT_UNDER_A_LIMIT = r"""
import json, os, resource, sys
from pathlib import Path
import pyarrow.parquet as pq
from jobs.audit.checks import lag, metadata
from jobs.audit.context import AuditContext, AuditOptions
from jobs.audit.plan import plan_broker
from runtime.stores import resolve_stores
from decoding.kernels import scan_offset_table
from decoding.metadata import scan_offset_stream

root, out, budget = Path(sys.argv[1]), Path(sys.argv[2]), int(sys.argv[3])
scan_offset_table(b'{"offsetTable":{"a@b":{0:1}}}', check_only=True)  # the compiled passes loaded before the limit
scan_offset_stream(b'{"offsetTable":{"a@b":{0:1}}}', 10)
import pyarrow as pa, pyarrow.dataset as ds  # the thread pools started before the limit (a thread's stack and arena)
ds.dataset(pa.table({"a": [1, 2]})).to_table().group_by("a").aggregate([])
stores = resolve_stores([str(root)])
ctx = AuditContext(None, stores, {s.name: plan_broker(s) for s in stores}, AuditOptions(families=("lag", "metadata")))
ctx.tables_dir, ctx.partials_dir = str(out / "tables"), str(out / "partials")
size = next(int(l.split()[1]) for l in open("/proc/self/status") if l.startswith("VmSize:")) * 1024
resource.setrlimit(resource.RLIMIT_AS, (size + budget, size + budget))
try:
    found, checked = lag.FAMILY.on_driver(ctx), metadata.FAMILY.on_driver(ctx)
except MemoryError as e:
    print(json.dumps({"memory_error": str(e)}))
    sys.exit(0)
t = found.tables["lag"]
rows = t.num_rows if hasattr(t, "num_rows") else sum(pq.read_metadata(str(p)).num_rows for p in t.paths)
print(json.dumps({"lag_rows": rows, "findings": sorted({r for f in found.findings + checked.findings
                                                          for r in f.column("check").to_pylist()})}))
"""


def _under_a_limit(root: Path, out: Path, offsets_limit: int, budget: int) -> dict:
    env = {**os.environ, C.CONFIG_OFFSETS_LIMIT_ENV: str(offsets_limit), "PYTHONPATH": str(REPO),
           "MALLOC_ARENA_MAX": "2"}  # an arena per thread would take the address space the limit counts
    r = subprocess.run([sys.executable, "-c", _AUDIT_UNDER_A_LIMIT, str(root), str(out), str(budget)], cwd=REPO,
                       capture_output=True, text=True, timeout=600, env=env)
    assert r.returncode == 0, r.stderr[-3000:]
    return json.loads(r.stdout.strip().splitlines()[-1])


def test_a_consumer_offsets_file_past_what_memory_holds_is_audited_within_a_memory_limit(tmp_path):
    """3 M offsets (750 000 maps, 29 MB) with the offsets limit lowered to 100 000 (what memory holds whole): the
    lag and metadata families run within an address space of 128 MiB above what the process had mapped, the lag
    table complete (a row per offset) and no file skipped.  The whole-table path (the limit raised past the file)
    runs out of memory under the same limit; main skipped the file at the lowered limit (metadata.config_too_large,
    an empty lag table)."""
    root, offsets = _big_store(tmp_path, 750_000)
    budget = 128 << 20
    got = _under_a_limit(root, tmp_path / "spilled", 100_000, budget)
    assert got == {"lag_rows": offsets, "findings": ["metadata.config_missing", "metadata.topic_not_in_config"]}, got
    whole = _under_a_limit(root, tmp_path / "whole", 10**12, budget)
    assert "memory_error" in whole, whole


def test_a_spill_that_fails_is_the_files_config_too_large_naming_its_size_and_offsets(tmp_path, monkeypatch):
    """No room for the spill (an OSError writing it): the file's finding metadata.config_too_large names it, its size
    and its offsets, and the rest runs (an empty lag table) -- never an unnamed error."""
    import errno

    import runtime.output as O
    from jobs.audit.checks import lag, metadata
    from jobs.audit.context import AuditContext, AuditOptions
    from jobs.audit.plan import plan_broker
    from runtime.stores import resolve_stores

    root, offsets = _big_store(tmp_path, 2000)
    size = (root / "config" / "consumerOffset.json").stat().st_size

    def full(*args, **kw):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(X, "SPILL_OFFSETS", 0)
    monkeypatch.setattr(O, "out_parquet_writer", full)
    stores = resolve_stores([str(root)])
    ctx = AuditContext(None, stores, {s.name: plan_broker(s) for s in stores}, AuditOptions(families=("lag",
                                                                                                      "metadata")))
    try:
        found, checked = lag.FAMILY.on_driver(ctx), metadata.FAMILY.on_driver(ctx)
    finally:
        ctx.release()
    assert found.tables["lag"].num_rows == 0
    big = [r for t in checked.findings for r in t.to_pylist() if r["check"] == "metadata.config_too_large"]
    assert [(r["file"], dict(r["details"])["size"]) for r in big] == [("config/consumerOffset.json", str(size))]
    error = dict(big[0]["details"])["error"]
    assert f"{size} bytes holding {offsets} offsets" in error and "No space left on device" in error, error


def test_a_lag_family_that_fails_midway_leaves_no_part_of_its_table(tmp_path, monkeypatch):
    """The lag table written a batch at a time and its family failing after the first batch (here a forced error;
    at scale, memory): the half-written file is removed, so the outputs hold no incomplete lag table."""
    from jobs.audit.checks import lag
    from jobs.audit.context import AuditContext, AuditOptions
    from jobs.audit.plan import plan_broker
    from runtime.stores import resolve_stores

    root, _ = _big_store(tmp_path, 2000)
    monkeypatch.setattr(X, "SPILL_OFFSETS", 0)
    monkeypatch.setattr(C, "OFFSET_BATCH_ROWS", 100)
    monkeypatch.setattr(X, "SPILL_READ_ROWS", 100)
    real, calls = lag._flags, []

    def failing(*args):
        calls.append(1)
        if len(calls) > 1:
            raise MemoryError("forced")
        return real(*args)

    monkeypatch.setattr(lag, "_flags", failing)
    stores = resolve_stores([str(root)])
    ctx = AuditContext(None, stores, {s.name: plan_broker(s) for s in stores}, AuditOptions(families=("lag",)))
    ctx.tables_dir, ctx.partials_dir = str(tmp_path / "out" / "tables"), str(tmp_path / "out" / "partials")
    with pytest.raises(MemoryError):
        lag.FAMILY.on_driver(ctx)
    assert len(calls) == 2 and not list((tmp_path / "out" / "tables").rglob("*.parquet"))


_FAMILIES_PEAK = r"""
import json, sys
from pathlib import Path
import jobs.audit.context as X
from jobs.audit.checks import lag, metadata
from jobs.audit.context import AuditContext, AuditOptions
from jobs.audit.plan import plan_broker
from runtime.stores import resolve_stores

root, out = Path(sys.argv[1]), Path(sys.argv[2])
lag._METRIC_SLICE = 1 << 16  # slices of 64 Ki maps (1 Mi in an audit), as the batches read back: per map shows
X.SPILL_OFFSETS = 0
peak = lambda: next(int(l.split()[1]) for l in open("/proc/self/status") if l.startswith("VmHWM:")) >> 10
stores = resolve_stores([str(root)])
ctx = AuditContext(None, stores, {s.name: plan_broker(s) for s in stores}, AuditOptions(families=("lag", "metadata")))
ctx.tables_dir, ctx.partials_dir = str(out / "tables"), str(out / "partials")
ctx.spilled_offsets
spilled = peak()
found, checked = lag.FAMILY.on_driver(ctx), metadata.FAMILY.on_driver(ctx)
metrics = found.metrics[0]
print(json.dumps({"spill_peak_mib": spilled, "families_peak_mib": peak(), "lag_rows": found.tables["lag"].rows,
                  "metric_rows": metrics.rows if hasattr(metrics, "rows") else metrics.num_rows}))
"""


def test_many_maps_of_one_queue_cost_the_lag_family_little_beyond_the_spill(tmp_path):
    """1 M topic@group maps of one queue each (30 MB), spilled, read in batches of 64 Ki rows: the lag and metadata
    families raise the driver's peak resident memory by less than 120 MiB above the spill's (~60 here: the
    per-(group, topic) runs, ~35 bytes a map, their sort, a batch), every offset in the lag table and two group
    metrics per map written.  Main held the group metrics whole (two rows a map, ~70 bytes each), a broker name per
    run and the spilled file decoded ahead of the family: +360 MiB at this size, and past 8 GiB for the 26 M maps
    of a 1 GiB file."""
    maps = 1_000_000
    root = tmp_path / "store"
    shutil.copytree(fixture_store("basic"), root)
    for p in [root, *root.rglob("*")]:
        p.chmod(0o755 if p.is_dir() else 0o644)
    (root / "config" / "topics.json").write_text(dumps_fastjson({"topicConfigTable": {  # nothing flagged per row
        f"T{i}": {"topicName": f"T{i}", "readQueueNums": 8, "writeQueueNums": 8, "perm": 6} for i in range(300)}}))
    (root / "config" / "consumerOffset.json").write_text('{\n\t"offsetTable":{\n' + ",\n".join(
        f'\t\t"T{m % 300}@g{m}":{{0:0\n\t\t}}' for m in range(maps)) + '\n\t}\n}')
    r = subprocess.run([sys.executable, "-c", _FAMILIES_PEAK, str(root), str(tmp_path / "out")], cwd=REPO,
                       capture_output=True, text=True, timeout=600, env={**os.environ, "PYTHONPATH": str(REPO)})
    assert r.returncode == 0, r.stderr[-3000:]
    got = json.loads(r.stdout.strip().splitlines()[-1])
    assert (got["lag_rows"], got["metric_rows"]) == (maps, 2 * maps), got
    assert got["families_peak_mib"] - got["spill_peak_mib"] < 120, got


def test_the_per_topic_rows_a_slice_at_a_time_are_the_whole_ones():
    """lag's per-(broker, group, topic) rows taken a slice at a time (a spilled file's row per map) are the rows
    taken whole, the runs of one key merged across batches and slices: the lags summed, the largest lag_ms."""
    import random

    import pyarrow as pa

    from jobs.audit.checks import lag

    rng = random.Random(7)
    rows = [dict(broker=rng.choice("ba"), group=f"g{rng.randrange(5)}", topic=f"T{rng.randrange(3)}",
                 lag=rng.randrange(4), lag_ms=rng.choice([None, rng.randrange(1000)])) for _ in range(300)]
    schema = pa.schema([("broker", pa.string()), ("group", pa.string()), ("topic", pa.string()),
                        ("lag", pa.int64()), ("lag_ms", pa.int64())])

    def runs() -> dict:
        out: dict = {}
        for lo in range(0, len(rows), 40):  # batches of lag rows, a key's rows in several
            for broker, r in lag._runs(pa.Table.from_pylist(rows[lo:lo + 40], schema)).items():
                out.setdefault(broker, []).append(r)
        return out

    want: dict = {}
    for r in rows:
        lag_sum, ms = want.get((r["broker"], r["group"], r["topic"]), (0, None))
        want[(r["broker"], r["group"], r["topic"])] = (lag_sum + r["lag"], ms if r["lag_ms"] is None else
                                                      max(r["lag_ms"], ms if ms is not None else r["lag_ms"]))
    expected = [dict(broker=b, group=g, topic=t, lag=s, lag_ms=m) for (b, g, t), (s, m) in sorted(want.items())]
    for slice_rows in (None, 1, 2, 3, 7, 1000):
        got = pa.concat_tables(list(lag._per_topic(runs(), slice_rows)))
        assert got.to_pylist() == expected, slice_rows


def test_metrics_a_family_wrote_to_a_file_are_copied_in_the_families_order(tmp_path):
    """The job's metrics: a family's part file (lag's group metrics of a spilled file) copied between the other
    families' tables, in their order, stamped as they are; the tables held come back for the summary."""
    import datetime

    import pyarrow as pa
    import pyarrow.parquet as pq

    from jobs.audit import findings as FD
    from jobs.audit.contract import WrittenTable
    from jobs.audit.job import _write_metrics
    from runtime.output import write_parquet_file

    def metrics(broker: str, n: int) -> pa.Table:
        return FD.metric_table("group", {"lag_messages": list(range(n))}, broker=broker,
                               group=[f"g{i}" for i in range(n)], topic="T")

    first, spilled, last = metrics("a", 3), metrics("b", 70_000), metrics("c", 2)
    spilled_at = str(tmp_path / "lag_metrics" / "part-00000.parquet")
    write_parquet_file(spilled, spilled_at)
    stamp = {"run_id": "r1", "run_time": datetime.datetime(2026, 1, 2, tzinfo=datetime.timezone.utc)}
    held = _write_metrics([first, WrittenTable((spilled_at,), 70_000), last], stamp, str(tmp_path / "metrics"))
    got = pq.read_table(tmp_path / "metrics" / "part-00000.parquet")
    assert got.drop_columns(["run_id", "run_time"]).to_pylist() == pa.concat_tables([first, spilled, last]).to_pylist()
    assert set(got.column("run_id").to_pylist()) == {"r1"} and got.column("run_time")[0].as_py() == stamp["run_time"]
    assert held.to_pylist() == pa.concat_tables([first, last]).to_pylist()
    assert (tmp_path / "metrics" / "_SUCCESS").exists()
