"""consumerOffset.json streamed (issue 40, "config files at any size"): the maps found in one compiled pass that keeps
nothing per offset (decoding.compiled.offset_table_maps), the rows read a batch of maps at a time (offset_map_rows),
as store_format.config.offset_batches / decoding.metadata.offset_table_batches give them -- the same rows in the same
order as the in-memory path (offset_columns, the consumer_offsets table) on the fixture and on generated files, and
within an address-space limit (``resource.setrlimit`` in a subprocess) that the in-memory path exceeds."""
from __future__ import annotations

import json
import random
import shutil
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from store_format import config as C
from store_format.config import dumps_fastjson
from decoding.kernels import scan_offset_table
from decoding.metadata import offset_table_batches, scan_offset_stream, spill_offset_table, table_batch

from .conftest import FIXTURES, fixture_store

REPO = Path(__file__).resolve().parent.parent


def _offsets_file(maps: dict) -> str:
    """consumerOffset.json as a broker writes it (fastjson's layout), with 5.x's dataVersion after the table."""
    return dumps_fastjson({"offsetTable": maps, "dataVersion": {"counter": 3, "timestamp": 17}}, 0)


def _store(tmp_path: Path, text: str, name: str = "consumerOffset.json") -> Path:
    root = tmp_path / "store"
    shutil.copytree(fixture_store("basic"), root)
    (root / "config" / "consumerOffset.json").unlink(missing_ok=True)
    (root / "config" / name).write_text(text, encoding="utf-8")
    return root


def _streamed(root: Path, batch_rows: int) -> pa.Table:
    got = offset_table_batches("b", str(root), batch_rows)
    assert got is not None
    return pa.Table.from_batches(list(got[3]), schema=table_batch("consumer_offsets", "b", str(root)).schema)


def test_the_fixtures_offsets_stream_as_the_scanner_reads_them():
    """The 4.9.7 broker fixture's consumerOffset.json (what a broker wrote): the streamed scan's rows, a map per
    batch, are the one-pass scanner's rows (the in-memory path's columns), names and order included."""
    raw = (FIXTURES / "broker" / "store" / "config" / "consumerOffset.json").read_bytes()
    scanned = scan_offset_table(raw)
    whole = scanned.rows
    assert whole is not None and len(whole[3])
    maps, entries, others, batches = scan_offset_stream(raw, 1)
    batches = list(batches)
    assert (maps, entries) == (len(whole[1]), len(whole[3]))
    assert others == list(zip(scanned.other_lo.tolist(), scanned.other_hi.tolist()))
    topics = [t for b in batches for t in b["topics"].take(pa.array(b["map"])).to_pylist()]
    groups = [g for b in batches for g in b["groups"].take(pa.array(b["map"])).to_pylist()]
    index = pa.array(whole[0])
    assert topics == whole[1].take(index).to_pylist() and groups == whole[2].take(index).to_pylist()
    assert [q for b in batches for q in b["queue_id"].tolist()] == whole[3].tolist()
    assert [o for b in batches for o in b["offset"].tolist()] == whole[4].tolist()


def _generated(seed: int, maps: int) -> dict:
    """Maps in a hash map's order (shuffled), non-ASCII names, empty maps, offsets of up to 18 digits (the scanner's
    bound: longer ones are the exact parser's)."""
    rng = random.Random(seed)
    names = [f"T{rng.randrange(40)}{'é' if m % 5 == 0 else ''}@g{m}{'中' if m % 7 == 0 else ''}" for m in range(maps)]
    rng.shuffle(names)
    out = {}
    for i, n in enumerate(names):
        queues = sorted(rng.sample(range(64), rng.choice([0, 1, 3, 8, 17])))
        out[n] = {q: rng.choice([0, -1, rng.randrange(1 << 40), 10**18 - 1, -(10**18 - 1)]) for q in queues}
    return out


@pytest.mark.parametrize("seed, batch_rows", [(1, 1), (2, 7), (3, 1000), (4, 1 << 20)])
def test_streamed_rows_are_the_in_memory_tables_rows(tmp_path, seed, batch_rows):
    """Generated files past the fast path's 64 KiB: the streamed table (any batch size, a map never split) is the
    consumer_offsets table the in-memory path builds, row for row."""
    root = _store(tmp_path, _offsets_file(_generated(seed, 3000)))
    whole = table_batch("consumer_offsets", "b", str(root))
    assert whole.num_rows > 10_000 and whole.column("error").null_count == whole.num_rows
    got = offset_table_batches("b", str(root), batch_rows)
    batches = list(got[3])
    assert got[0] == str(root / "config" / "consumerOffset.json") and got[2] == whole.num_rows
    assert pa.Table.from_batches(batches, schema=whole.schema).equals(whole)
    if batch_rows < 20:
        assert max(b.num_rows for b in batches) <= max(batch_rows, 17)  # whole maps, each at most 17 queues


def test_the_bak_streams_when_the_main_file_is_missing_and_the_spill_is_the_table(tmp_path):
    root = _store(tmp_path, _offsets_file(_generated(5, 3000)), "consumerOffset.json.bak")
    whole = table_batch("consumer_offsets", "b", str(root))
    assert set(whole.column("source").to_pylist()) == {str(root / "config" / "consumerOffset.json.bak")}
    assert _streamed(root, 500).equals(whole)
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    path, source, size, rows = spill_offset_table("b", str(root), scratch, 500)
    assert Path(path).parent == scratch and rows == whole.num_rows and source.endswith(".bak")
    assert pq.read_table(path).equals(whole)


@pytest.mark.parametrize("change", ["not topic@group", "escaped name", "descending", "queue id outside int",
                                    "invalid utf-8"])
def test_what_brokers_do_not_write_is_not_streamed(tmp_path, change):
    """Anything but the broker's layout steps aside (None): the in-memory path reads it and names its problems."""
    maps = {f"T{m % 7}@g{m}": {q: m for q in range(8)} for m in range(2000)}
    extra = {"not topic@group": {"plain": {0: 1}}, "escaped name": {'T1@g"x': {0: 1}},
             "queue id outside int": {"T1@g1": {2**31: 4}}}.get(change, {})
    raw = _offsets_file({**maps, **extra}).encode()
    if change == "descending":
        raw = raw.replace(b'"T0@g0":{0:0,1:0', b'"T0@g0":{1:0,0:0', 1)
    elif change == "invalid utf-8":
        raw = raw.replace(b'"T0@g0"', b'"T0@g\xff"', 1)
    root = _store(tmp_path, "")
    (root / "config" / "consumerOffset.json").write_bytes(raw)
    assert scan_offset_stream(raw, 100) is None
    assert offset_table_batches("b", str(root)) is None and C.offset_batches(root / "config", scan_offset_stream) is None
    assert table_batch("consumer_offsets", "b", str(root)).num_rows  # the in-memory path still reads it


_UNDER_A_LIMIT = r"""
import json, resource, sys
import numpy as np
from decoding.metadata import offset_table_batches, table_batch, scan_offset_stream

root, budget, mode = sys.argv[1], int(sys.argv[2]), sys.argv[3]
# the compiled passes and Arrow loaded before the limit (a small store of the same layout)
warm = sys.argv[4]
list(offset_table_batches("b", warm, 1000)[3]); table_batch("consumer_offsets", "b", warm)
size = next(int(l.split()[1]) for l in open("/proc/self/status") if l.startswith("VmSize:")) * 1024
resource.setrlimit(resource.RLIMIT_AS, (size + budget, size + budget))
try:
    if mode == "streamed":
        rows = total = 0
        for batch in offset_table_batches("b", root, 1 << 16)[3]:
            rows += batch.num_rows
            total += int(np.asarray(batch.column("offset")).sum())
        print(json.dumps({"rows": rows, "sum": total}))
    else:
        t = table_batch("consumer_offsets", "b", root)
        errors = [e for e in t.column("error").to_pylist() if e]
        print(json.dumps({"rows": t.num_rows - len(errors), "errors": errors[:1]}))
except MemoryError as e:
    print(json.dumps({"memory_error": str(e)}))
"""


def test_a_big_file_streams_within_a_memory_limit_the_in_memory_path_exceeds(tmp_path):
    """36 MB, 120 000 maps of 32 queues (3.84 M offsets): streamed within an address space of the file's size plus
    48 MiB (the map of the file, ~100 bytes a map, one batch), where the in-memory table (~90 bytes an offset, and
    the scanner's arrays) runs out and says so in its error row."""
    maps = 120_000
    body = ",\n".join(f'\t\t"T{m % 300}@g{m}":{{' + ",".join(f"{q}:{m + q}" for q in range(32)) + "\n\t\t}"
                      for m in range(maps))
    text = '{\n\t"offsetTable":{\n' + body + '\n\t}\n}'
    root = _store(tmp_path, text)
    warm = _store(tmp_path / "warm", _offsets_file({f"T@g{m}": {q: q for q in range(8)} for m in range(2000)}))
    budget = len(text) + (48 << 20)
    got = {}
    for mode in ("streamed", "in-memory"):
        r = subprocess.run([sys.executable, "-c", _UNDER_A_LIMIT, str(root), str(budget), mode, str(warm)], cwd=REPO,
                           capture_output=True, text=True, timeout=600)
        assert r.returncode == 0, r.stderr[-3000:]
        got[mode] = json.loads(r.stdout.strip().splitlines()[-1])
    assert got["streamed"] == {"rows": maps * 32, "sum": sum(32 * m + 496 for m in range(maps))}
    assert got["in-memory"]["rows"] == 0 and "ran out of memory" in got["in-memory"]["errors"][0], got["in-memory"]


def test_a_stream_closed_before_its_first_batch_unmaps_the_file(tmp_path, monkeypatch):
    """The table's path closes a stream it does not read (past the offsets limit): the file's map is closed then,
    not left to the garbage collector; and the file is the limit's TOO_LARGE row, as before streaming."""
    from store_format.fs import maps

    closed = []
    real = maps.ReadOnlyMap.close
    monkeypatch.setattr(maps.ReadOnlyMap, "close", lambda self: (closed.append(str(self.path)), real(self)))
    root = _store(tmp_path, _offsets_file(_generated(6, 3000)))
    got = offset_table_batches("b", str(root), 100)
    got[3].close()
    assert closed == [str(root / "config" / "consumerOffset.json")]
    monkeypatch.setenv(C.CONFIG_OFFSETS_LIMIT_ENV, "10")
    t = table_batch("consumer_offsets", "b", str(root))
    assert t.num_rows == 1 and "more than the limit of 10 offsets" in t.column("error")[0].as_py()
    assert closed[1] == str(root / "config" / "consumerOffset.json")
