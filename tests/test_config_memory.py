"""Config files too big for memory (store_format.config.CONFIG_MEMORY_LIMIT): past the limit a file is never parsed
into Python objects -- consumerOffset.json in the broker's layout is read as columns, anything else is a TOO_LARGE
error naming the file and its size, which the audit reports as a finding while it checks the rest -- and the
audit's own handling of consumer offsets stays in memory proportional to the rows.  The limit is lowered here
(``limit=``, or ``ROCKETMQ_CONFIG_MEMORY_LIMIT`` for a subprocess) so that small files stand for big ones."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from store_format import config as C
from store_format.config import CONFIG_MEMORY_LIMIT_ENV, dumps_fastjson, offset_columns, read_config
from store_format.errors import ConfigError, ErrorKind, WriterError
from decoding.kernels import scan_offset_table
from decoding.metadata import is_too_large, table_batch

from .conftest import fixture_manifest, fixture_store
from .support.writer_support import fixture_config

REPO = Path(__file__).resolve().parent.parent


def offsets_text(maps: int, queues: int = 8, value=lambda m, q: 1000 * m + q) -> str:
    """consumerOffset.json as a broker writes it (fastjson: tabs, bare Integer keys)."""
    return dumps_fastjson({"offsetTable": {f"T{m % 7}@g{m}": {q: value(m, q) for q in range(queues)}
                                           for m in range(maps)}})


def write(d: Path, name: str, text: str) -> Path:
    d.mkdir(parents=True, exist_ok=True)
    (d / name).write_text(text, encoding="utf-8")
    return d / name


def test_a_file_past_the_limit_is_too_large_never_parsed_and_not_replaced_by_its_bak(tmp_path):
    d = tmp_path / "config"
    topics = {"topicConfigTable": {f"T{i}": {"topicName": f"T{i}", "readQueueNums": 4, "writeQueueNums": 4}
                                   for i in range(200)}}
    path = write(d, "topics.json", dumps_fastjson(topics))
    write(d, "topics.json.bak", dumps_fastjson({"topicConfigTable": {}}))
    size = path.stat().st_size
    assert read_config(d, "topics.json", limit=size).data == topics  # at the limit: parsed
    cfg = read_config(d, "topics.json", limit=size - 1)
    assert cfg.data is None and cfg.source is None
    (e,) = cfg.errors
    assert e.kind is ErrorKind.TOO_LARGE and e.file == str(path)
    assert e.message == f"too large to parse within memory: {size} bytes (the limit is {size - 1}, CONFIG_MEMORY_LIMIT)"
    assert C.too_large_size(str(e)) == size and is_too_large(str(e))


def test_the_limit_comes_from_the_environment_and_is_checked(tmp_path, monkeypatch):
    d = tmp_path / "config"
    write(d, "delayOffset.json", '{"offsetTable":{1:5,2:7}}')
    monkeypatch.setenv(CONFIG_MEMORY_LIMIT_ENV, "10")
    assert [e.kind for e in read_config(d, "delayOffset.json").errors] == [ErrorKind.TOO_LARGE]
    monkeypatch.setenv(CONFIG_MEMORY_LIMIT_ENV, "lots")
    with pytest.raises(ConfigError, match=CONFIG_MEMORY_LIMIT_ENV):
        read_config(d, "delayOffset.json")
    monkeypatch.delenv(CONFIG_MEMORY_LIMIT_ENV)
    assert C.memory_limit() == C.CONFIG_MEMORY_LIMIT == 256 << 20


def test_consumer_offsets_past_the_limit_are_read_as_columns_and_only_so(tmp_path):
    """The broker's layout past the limit: the same columns as within it (the scanner's), while the dict path says
    too large; the same content in another layout (quoted queue ids) cannot be streamed: too large everywhere,
    and the metadata table's one error row."""
    d = tmp_path / "store" / "config"
    path = write(d, "consumerOffset.json", offsets_text(1000))  # past the fast paths' 64 KiB
    limit = path.stat().st_size // 3
    within, past = [], []
    a = offset_columns(d, within, offset_scan=scan_offset_table)
    b = offset_columns(d, past, offset_scan=scan_offset_table, limit=limit)
    assert a is not None and b is not None and not within and not past
    for k in ("map", "queue_id", "offset"):
        assert b[1][k].tolist() == a[1][k].tolist()
    assert b[1]["topics"].equals(a[1]["topics"]) and len(b[1]["offset"]) == 1000 * 8
    assert [e.kind for e in read_config(d, "consumerOffset.json", limit=limit).errors] == [ErrorKind.TOO_LARGE]

    quoted = {"offsetTable": {f"T{m % 7}@g{m}": {str(q): 1000 * m + q for q in range(8)} for m in range(1000)}}
    path.write_text(json.dumps(quoted, indent=1))
    limit = path.stat().st_size // 3
    assert offset_columns(d, [], offset_scan=scan_offset_table, limit=limit) is None
    assert read_config(d, "consumerOffset.json").data == quoted  # within the limit: the dict path reads it
    assert [e.kind for e in read_config(d, "consumerOffset.json", limit=limit).errors] == [ErrorKind.TOO_LARGE]
    os.environ[CONFIG_MEMORY_LIMIT_ENV] = str(limit)
    try:
        t = table_batch("consumer_offsets", "b", tmp_path / "store")
    finally:
        del os.environ[CONFIG_MEMORY_LIMIT_ENV]
    assert t.num_rows == 1 and is_too_large(t.column("error")[0].as_py())
    assert str(path) in t.column("error")[0].as_py()


def test_a_memory_error_while_parsing_names_the_file_and_the_operation(tmp_path, monkeypatch):
    d = tmp_path / "store" / "config"
    path = write(d, "consumerOffset.json", offsets_text(3000))

    def exhausted(*args, **kwargs):
        raise MemoryError()

    monkeypatch.setattr(C, "_scan", exhausted)
    cfg = read_config(d, "consumerOffset.json")
    (e,) = cfg.errors
    assert cfg.data is None and e.kind is ErrorKind.TOO_LARGE and e.file == str(path)
    assert e.message == f"ran out of memory parsing it ({path.stat().st_size} bytes)"
    monkeypatch.setattr(C, "_scanned_offset_columns", exhausted)
    with pytest.raises(ConfigError) as raised:
        offset_columns(d, [], offset_scan=scan_offset_table)
    assert raised.value.kind is ErrorKind.TOO_LARGE and raised.value.file == str(path)
    assert raised.value.message == f"ran out of memory building its offset columns ({path.stat().st_size} bytes)"
    from decoding import metadata

    streamed = metadata.scan_offset_stream
    monkeypatch.setattr(metadata, "scan_offset_stream", lambda *a: None)  # the columns' path: the stream steps aside
    t = table_batch("consumer_offsets", "b", tmp_path / "store")  # the metadata source: the file's error row
    assert t.num_rows == 1 and "building its offset columns" in t.column("error")[0].as_py()
    monkeypatch.setattr(metadata, "scan_offset_stream", streamed)
    monkeypatch.setattr(metadata, "constant_column", exhausted)  # building the streamed table: the file's error row too
    t = table_batch("consumer_offsets", "b", tmp_path / "store")
    assert t.num_rows == 1 and t.column("source")[0].as_py() == str(path)
    assert t.column("error")[0].as_py() == (f"TOO_LARGE {path}: ran out of memory streaming its offsets "
                                            f"({path.stat().st_size} bytes)")


def test_appending_to_a_store_whose_offsets_are_too_large_is_refused(tmp_path, monkeypatch):
    """The writer would rewrite consumerOffset.json from what it loaded: a file it cannot parse is refused, not
    emptied."""
    from store_format.write.writer import StoreWriter

    root = tmp_path / "s"
    shutil.copytree(fixture_store("broker"), root)
    for p in [root, *root.rglob("*")]:
        p.chmod(0o755 if p.is_dir() else 0o644)
    path = write(root / "config", "consumerOffset.json", offsets_text(400))  # the largest of the config files
    config = fixture_config(fixture_manifest("broker"))
    StoreWriter(root, config, append=True).close()  # within the limit: it reopens
    before = path.read_bytes()
    monkeypatch.setenv(CONFIG_MEMORY_LIMIT_ENV, str(len(before) - 1))
    with pytest.raises(WriterError, match="consumerOffset.json") as raised:
        StoreWriter(root, config, append=True)
    assert raised.value.kind is ErrorKind.TOO_LARGE and "without its entries" in raised.value.message
    assert path.read_bytes() == before


def test_dump_of_a_config_past_the_limit_is_its_error_row_and_exit_2(tmp_path):
    root = tmp_path / "s"
    (root / "commitlog").mkdir(parents=True)
    path = write(root / "config", "topics.json", dumps_fastjson({"topicConfigTable": {"T": {"perm": 6}}}))
    write(root / "config", "delayOffset.json", '{"offsetTable":{1:5}}')
    r = subprocess.run([sys.executable, "-m", "store_format", "dump", root, "--what", "config"], cwd=REPO,
                       capture_output=True, text=True, env={**os.environ, CONFIG_MEMORY_LIMIT_ENV: "24"})
    assert r.returncode == 2, r.stderr
    rows = {row["name"]: row for row in map(json.loads, r.stdout.splitlines())}
    assert rows["delayOffset.json"]["data"] == {"offsetTable": {"1": 5}}  # the others are read
    (e,) = rows["topics.json"]["errors"]
    assert e["kind"] == "TOO_LARGE" and e["file"] == str(path) and str(path.stat().st_size) in e["message"]
    assert r.stderr.strip().splitlines()[-1] == "2 config file(s); damage found; 1 file(s) could not be read"


# ---- the audit's side --------------------------------------------------------------------------------------

_DRIVER = r"""
import json, resource, sys
from runtime.stores import resolve_stores
from jobs.audit.plan import plan_broker
from jobs.audit.context import AuditContext, AuditOptions
from jobs.audit.checks import lag, metadata

def peak():
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024

stores = resolve_stores([sys.argv[1]])
ctx = AuditContext(None, stores, {s.name: plan_broker(s) for s in stores}, AuditOptions(families=("lag", "metadata")))
rows = ctx.metadata("consumer_offsets").num_rows  # the file's rows, as the metadata source builds them
before = peak()
found = lag.FAMILY.on_driver(ctx)
checked = metadata.FAMILY.on_driver(ctx)
checks = {}
for t in found.findings + checked.findings:
    for c in t.column("check").to_pylist():
        checks[c] = checks.get(c, 0) + 1
print(json.dumps({"rows": rows, "before": before, "after": peak(), "lag_rows": found.tables["lag"].num_rows,
                  "checks": checks}))
"""


def _big_offsets_store(root: Path, maps: int, queues: int = 24) -> int:
    """The basic fixture with a consumerOffset.json of ``maps`` topic@group maps of ``queues`` queues (offset 0:
    nothing to find) over 7 topics that topics.json configures; returns the file's size."""
    shutil.copytree(fixture_store("basic"), root)
    for p in [root, *root.rglob("*")]:
        p.chmod(0o755 if p.is_dir() else 0o644)
    topics = {"topicConfigTable": {f"T{i}": {"topicName": f"T{i}", "readQueueNums": queues,
                                             "writeQueueNums": queues, "perm": 6} for i in range(7)}}
    write(root / "config", "topics.json", dumps_fastjson(topics))
    write(root / "config", "subscriptionGroup.json",
          dumps_fastjson({"subscriptionGroupTable": {f"g{m}": {"groupName": f"g{m}"} for m in range(maps)}}))
    path = write(root / "config", "consumerOffset.json", offsets_text(maps, queues, lambda m, q: 0))
    return path.stat().st_size


def test_the_audits_consumer_offsets_take_memory_proportional_to_their_rows(tmp_path):
    """The lag and metadata families over 1.2 M committed offsets (a 6 MB consumerOffset.json) in a process of
    their own: the growth of its peak memory while they run stays under 250 bytes a row, a Python object per
    offset (a dict a row) costs several times that."""
    root = tmp_path / "big"
    _big_offsets_store(root, 50_000)
    r = subprocess.run([sys.executable, "-c", _DRIVER, str(root)], cwd=REPO, capture_output=True, text=True,
                       timeout=900)
    assert r.returncode == 0, r.stderr[-3000:]
    got = json.loads(r.stdout.strip().splitlines()[-1])
    assert got["rows"] == got["lag_rows"] == 50_000 * 24
    assert got["checks"] == {"metadata.topic_not_in_config": 15}  # the fixture's own topics: no offset is wrong
    per_row = (got["after"] - got["before"]) / got["rows"]
    assert per_row < 250, f"{per_row:.0f} bytes a row"


@pytest.mark.spark
def test_the_audit_reports_a_config_too_large_and_checks_the_rest(spark, tmp_path, monkeypatch):
    """topics.json past the (lowered) limit is the finding metadata.config_too_large, naming the file and its
    size; consumerOffset.json past it too, in the broker's layout, is still read (the lag table); the rest of the
    audit runs: the same other findings as an audit with the default limit."""
    from jobs.audit import job as audit

    from .test_audit import audit_args, rows

    root = tmp_path / "dump" / "store"
    _big_offsets_store(root, 3000, 8)
    topics = root / "config" / "topics.json"
    limit = min(topics.stat().st_size, (root / "config" / "subscriptionGroup.json").stat().st_size) - 1
    whole = audit.run(spark, audit_args([root], tmp_path / "whole", no_report=True))
    monkeypatch.setenv(CONFIG_MEMORY_LIMIT_ENV, str(limit))
    result = audit.run(spark, audit_args([root], tmp_path / "out", no_report=True))
    findings = rows(tmp_path / "out", "findings")
    big = [f for f in findings if f["check"] == "metadata.config_too_large"]
    assert {f["file"] for f in big} == {"config/topics.json", "config/subscriptionGroup.json"}
    top = next(f for f in big if f["file"] == "config/topics.json")
    assert top["severity"] == "warning" and top["details"]["size"] == str(topics.stat().st_size)
    assert f"({topics.stat().st_size} bytes)" in top["message"]
    assert len(rows(tmp_path / "out", "tables/lag")) == 3000 * 8  # the offsets, past the limit too, are read
    def others(found):  # what neither config file decides
        return sorted((f["check"], f["file"], f["topic"], f["file_position"]) for f in found
                      if not f["check"].startswith(("metadata.", "lag.")))

    assert others(findings) == others(rows(tmp_path / "whole", "findings")) and others(findings)
    assert result.exit_code == whole.exit_code
