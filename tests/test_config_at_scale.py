"""Config files at any size (issue 40): whether the broker can load a consumerOffset.json of any size is judged in
one compiled pass over a read-only map of it that keeps nothing per map or offset (decoding.compiled.offset_table_check),
never by building its rows -- the recovery prediction's load of a 1 GiB file ran out of memory there.  Checked
under an address-space limit (``resource.setrlimit`` in a subprocess) that the check passes and building the
columns does not, and against the columns' own judgement on smaller files."""
from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from store_format import config as C
from store_format.config import dumps_fastjson
from decoding.kernels import scan_offset_table

from .conftest import fixture_store

REPO = Path(__file__).resolve().parent.parent
_INT = "[-2147483648, 2147483647]"


def big_offsets(maps: int, last: str = "") -> str:
    """consumerOffset.json as a broker writes it (fastjson: tabs, bare Integer keys), ``maps`` maps of 4 queues,
    then ``last`` (a map's text) as its last map: ~58 bytes a map, made in a second for 700 000."""
    body = ",\n".join([f'\t\t"T{m % 300}@g{m}":{{0:{m},1:{m + 1},2:{m + 2},3:{m + 3}\n\t\t}}' for m in range(maps)]
                      + ([last] if last else []))
    return '{\n\t"offsetTable":{\n' + body + '\n\t},\n\t"dataVersion":{\n\t\t"counter":7,\n\t\t"timestamp":1\n\t}\n}'


_LOAD_UNDER_A_LIMIT = r"""
import json, resource, sys
from pathlib import Path
from store_format.recovery import config_load_problems
from decoding.kernels import scan_offset_table

config, budget = Path(sys.argv[1]), int(sys.argv[2])
scan_offset_table(b'{"offsetTable":{"a@b":{0:1}}}', check_only=True)  # the compiled passes loaded before the limit
scan_offset_table(b'{"offsetTable":{"a@b":{0:1}}}')
size = next(int(l.split()[1]) for l in open("/proc/self/status") if l.startswith("VmSize:")) * 1024
resource.setrlimit(resource.RLIMIT_AS, (size + budget, size + budget))
try:
    print(json.dumps(config_load_problems(config, ["consumerOffset.json"], offset_scan=scan_offset_table)))
except MemoryError as e:
    print(json.dumps({"memory_error": str(e)}))
"""


def test_the_brokers_load_of_a_big_consumer_offsets_file_is_judged_within_a_memory_limit(tmp_path):
    """A 40 MB consumerOffset.json (2.8 M offsets) and its .bak whose last map holds a queue id past Java's int: the
    broker cannot load either, and the recovery prediction says so within an address space of the file's size plus
    64 MiB above what the process had mapped (the maps of the two files, one at a time, and a few counters).
    Building the file's columns took ~9 times the file's size there (the bytes read, and arrays a colon each)."""
    config = tmp_path / "store" / "config"
    shutil.copytree(fixture_store("basic") / "config", config)
    text = big_offsets(700_000, '\t\t"T1@g-bad":{0:1,2147483648:9\n\t\t}')
    (config / "consumerOffset.json").write_text(text)
    (config / "consumerOffset.json.bak").write_text(text)
    budget = len(text) + (64 << 20)
    r = subprocess.run([sys.executable, "-c", _LOAD_UNDER_A_LIMIT, str(config), str(budget)], cwd=REPO,
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    why = ("does not decode (offsetTable/T1@g-bad/2147483648: 2147483648: queue id is outside Java's int range "
           f"{_INT})")
    assert json.loads(r.stdout.strip().splitlines()[-1]) == [[
        "config/consumerOffset.json", f"config/consumerOffset.json {why}, and consumerOffset.json.bak {why}: "
        "ConfigManager.load() falls back to the .bak and loadBak() fails, so the broker does not start"]]


_MAPS = {f"T{m % 7}@g{m}": {q: 10 * m + q for q in range(8)} for m in range(2000)}  # past the fast path's 64 KiB


@pytest.mark.parametrize("change, expected", [
    ({}, None),
    ({"plain": {0: 1}}, 'offsetTable/plain: "plain": not topic@group'),
    ({"T5@g5": {**_MAPS["T5@g5"], 2**31: 1}, "plain": {0: 1}},
     f"offsetTable/T5@g5/2147483648: 2147483648: queue id is outside Java's int range {_INT}"),
    ({"T5@g5": {**_MAPS["T5@g5"], -2**31 - 1: 1}},
     f"offsetTable/T5@g5/-2147483649: -2147483649: queue id is outside Java's int range {_INT}"),
    ({"x@y": {2**40: 1, 3: 1, 1: 2}}, f"offsetTable/x@y/1099511627776: 1099511627776: queue id is outside Java's "
                                      f"int range {_INT}"),  # queue ids out of order: the general columns
    ({"nog": {}, "x@y": {2**40: 1}}, 'offsetTable/nog: "nog": not topic@group'),
])
def test_the_one_pass_check_judges_as_the_columns_do(tmp_path, monkeypatch, change, expected):
    config = tmp_path / "config"
    config.mkdir()
    text = dumps_fastjson({"offsetTable": {**_MAPS, **change}, "dataVersion": {"counter": 1}})
    (config / "consumerOffset.json").write_text(text)
    path = config / "consumerOffset.json"
    check = C._decode_failure(path, "consumerOffset.json", None, scan_offset_table)
    monkeypatch.setattr(C, "_offsets_load_check", lambda *args: C._NOT_CHECKED)  # the columns alone
    columns = C._decode_failure(path, "consumerOffset.json", None, scan_offset_table)
    assert check == columns == (None if expected is None else f"does not decode ({expected})")


def test_the_check_counts_what_the_scan_reads_and_steps_aside_where_it_does(tmp_path):
    text = dumps_fastjson({"offsetTable": _MAPS, "dataVersion": {"counter": 1}}).encode()
    check, scan = scan_offset_table(text, check_only=True), scan_offset_table(text)
    assert (check.maps, check.entries, check.escaped_names, check.problem) == (2000, 16000, 0, None)
    assert check.maps == len(scan.name_lo) and check.entries == len(scan.keys)
    assert [text[lo:hi] for lo, hi in check.others] == [text[lo:hi] for lo, hi in zip(scan.other_lo, scan.other_hi)]
    for bad in (text.replace(b"0:0,", b"0:0,,", 1), text[:-1], text.replace(b'"T0@g0"', b'"T0@g\\u0030"'),
                text.replace(b"1:1,", b'"1":1,', 1)):
        got = scan_offset_table(bad, check_only=True)
        assert (got is None) == (scan_offset_table(bad) is None)
        assert got is None or got.escaped_names == 1  # an escaped name: the columns judge it


def test_running_out_of_memory_building_a_config_table_is_its_error_row_naming_the_file_and_its_size(
        tmp_path, monkeypatch):
    """Whatever runs out of memory while a config file's table is built, the table is the file's one TOO_LARGE row
    naming it and its size (which the metadata family's config_too_large finding reports), not a MemoryError."""
    import decoding.metadata as M

    config = tmp_path / "store" / "config"
    config.mkdir(parents=True)
    (config / "topics.json").write_text(dumps_fastjson({"topicConfigTable": {"T": {"perm": 6}}}))
    (config / "consumerOffset.json").write_text(dumps_fastjson({"offsetTable": _MAPS}))

    def exhausted(*args, **kwargs):
        raise MemoryError()

    monkeypatch.setattr(M, "_config_columns", exhausted)
    monkeypatch.setattr(M, "_offset_table", exhausted)
    monkeypatch.setattr(M, "constant_column", exhausted)  # the streamed table's
    for table, name, building in (("topics", "topics.json", "building its table"),
                                  ("consumer_offsets", "consumerOffset.json", "streaming its offsets")):
        t = M.table_batch(table, "b", tmp_path / "store")
        (error,) = t.column("error").to_pylist()
        size = (config / name).stat().st_size
        assert error == f"TOO_LARGE {config / name}: ran out of memory {building} ({size} bytes)"
        assert M.is_too_large(error) and C.too_large_size(error) == size
    assert C.too_large_size("TOO_LARGE x: ran out of memory reading it") is None


def test_a_file_holding_more_offsets_than_the_limit_is_a_whole_table_error_and_the_audit_spills_it(tmp_path,
                                                                                                  monkeypatch):
    """Past ROCKETMQ_CONFIG_OFFSETS_LIMIT (lowered here; 32 M offsets by default) consumerOffset.json's columns are
    never built: the metadata table is the file's one TOO_LARGE row naming it, its size and counts (the .bak is not
    read: the broker loads this file), compare and replay get that error; the audit's driver streams it into
    Parquet and reads it a batch at a time (issue 40): its lag table complete, no metadata.config_too_large (main
    skipped it with that finding and an empty lag table)."""
    from jobs.audit.checks import lag, metadata
    from jobs.audit.context import AuditContext, AuditOptions
    from jobs.audit.plan import plan_broker
    from runtime.stores import resolve_stores
    from store_format.errors import ConfigError, ErrorKind
    import decoding.metadata as M

    root = tmp_path / "store"
    shutil.copytree(fixture_store("basic"), root)
    for p in [root, *root.rglob("*")]:
        p.chmod(0o755 if p.is_dir() else 0o644)
    path = root / "config" / "consumerOffset.json"
    path.write_text(dumps_fastjson({"offsetTable": _MAPS}))
    (root / "config" / "consumerOffset.json.bak").write_text(dumps_fastjson({"offsetTable": {"T0@g0": {0: 0}}}))
    size = path.stat().st_size
    monkeypatch.setenv(C.CONFIG_OFFSETS_LIMIT_ENV, "15999")
    message = (f"too large to read within memory: {size} bytes holding 16000 offsets in 2000 maps, more than the "
               "limit of 15999 offsets (CONFIG_OFFSETS_LIMIT): its offsets are skipped")
    (error,) = M.table_batch("consumer_offsets", "b", root).column("error").to_pylist()
    assert error == f"TOO_LARGE {path}: {message}" and C.too_large_size(error) == size
    with pytest.raises(ConfigError) as raised:
        C.read_consumer_offsets(root / "config", offset_scan=scan_offset_table)
    assert raised.value.kind is ErrorKind.TOO_LARGE and raised.value.file == str(path)

    stores = resolve_stores([str(root)])
    ctx = AuditContext(None, stores, {s.name: plan_broker(s) for s in stores}, AuditOptions(families=("lag", "metadata")))
    try:
        found, checked = lag.FAMILY.on_driver(ctx), metadata.FAMILY.on_driver(ctx)
        assert [s.rows for s in ctx.spilled_offsets] == [16000]
    finally:
        ctx.release()
    assert found.tables["lag"].num_rows == 16000
    assert sorted(zip(*(found.tables["lag"].column(c).to_pylist() for c in ("topic", "group", "queue_id", "offset")))) \
        == sorted((k.split("@")[0], k.split("@")[1], q, o) for k, queues in _MAPS.items() for q, o in queues.items())
    assert not [r for t in checked.findings for r in t.to_pylist() if r["check"] == "metadata.config_too_large"]
    monkeypatch.setenv(C.CONFIG_OFFSETS_LIMIT_ENV, "16000")  # at the limit: read
    assert M.table_batch("consumer_offsets", "b", root).num_rows == 16000
