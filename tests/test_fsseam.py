"""The file-system seam (issue 23): every read of a dump goes through store_format.fs, so a dump on a file system
that is not local (here tests/support/remotefs.py: a PyFileSystem under the custom scheme ``elsewhere://``, whose paths are
no valid local paths, so a stray open()/os.stat()/mmap fails) is audited as the same dump read locally."""
from __future__ import annotations

import json
import os
import pickle
from collections import Counter
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from store_format import fs
from store_format.errors import StoreFormatError
from store_format.recovery import predict_recovery
from store_format.store import Store

from .support import remotefs
from .conftest import AUDIT_STAMPS, FIXTURES, fixture_store, parquet_rows


@pytest.fixture
def elsewhere():
    """``serve(tag, folder)`` -> ``elsewhere://<tag>/``; every registration is undone afterwards."""
    before = dict(remotefs.ROOTS)
    remotefs.OPENS.clear()
    yield remotefs.register
    remotefs.ROOTS.clear()
    remotefs.ROOTS.update(before)


def test_a_store_path_is_not_a_local_path(elsewhere, tmp_path):
    (tmp_path / "f").write_bytes(b"abc")
    p = fs.as_path(elsewhere("t", tmp_path) + "f")
    assert isinstance(p, fs.StorePath) and str(p).startswith(remotefs.PREFIX)
    with pytest.raises(TypeError):
        open(p, "rb")  # no __fspath__: nothing reads it around the seam
    with pytest.raises(TypeError):
        os.stat(p)
    assert fs.read_bytes(p) == b"abc" and remotefs.OPENS == [str(p)]
    assert p.stat().st_size == 3 and p.is_file() and not p.is_dir() and p.parent.is_dir()
    assert [e.name for e in fs.entries(p.parent)] == ["f"]
    assert pickle.loads(pickle.dumps(p.loc)).read_range(1, 5) == b"bc"
    with fs.map_range(fs.resolve(p)) as m:  # no mmap off the local file system: the bytes, read through it
        assert bytes(m.buf) == b"abc" and m.written_length() == 3
    with fs.map_range(fs.resolve(tmp_path / "f")) as m:  # a small local file: its bytes read (fs.maps.READ_UP_TO)
        assert m.buf == b"abc" and m.fileno() is not None
    (tmp_path / "g").write_bytes(bytes(fs.maps.READ_UP_TO + 1))
    with fs.map_range(fs.resolve(tmp_path / "g")) as m:  # a bigger one: mapped
        assert type(m.buf).__name__ == "_FileMap"


def test_a_small_local_file_is_read_not_mapped_and_says_the_same(tmp_path):
    """Up to fs.maps.READ_UP_TO bytes a local file is read into bytes (a map and its unmapping cost more than the
    copy: thousands of 8 KiB segments), with its descriptor kept for the hole search: the same bytes and written
    length as the mapped file one byte longer."""
    data = b"x" * 5000 + bytes(3000)
    small, big = tmp_path / "small", tmp_path / "big"
    small.write_bytes(data + bytes(fs.maps.READ_UP_TO - len(data)))
    big.write_bytes(data + bytes(fs.maps.READ_UP_TO + 1 - len(data)))
    with fs.ReadOnlyMap(small) as a, fs.ReadOnlyMap(big) as b:
        assert type(a.buf) is bytes and type(b.buf).__name__ == "_FileMap"
        assert a.buf == bytes(b.buf)[:-1] and a.written_length() == b.written_length() == 5000
        assert os.fstat(a.fileno()).st_size == fs.maps.READ_UP_TO
    empty = tmp_path / "empty"
    empty.write_bytes(b"")
    with fs.ReadOnlyMap(empty) as m:
        assert m.buf == b"" and m.written_length() == 0


def test_a_big_remote_file_is_staged_and_mapped_not_held(elsewhere, tmp_path, monkeypatch):
    """Above fs.maps.STAGE_ABOVE a file read through the seam is copied into an unlinked temp file and mapped (a full
    index file is 420 MB: a task's memory must not grow with it); zero chunks stay holes; the bytes are the file's."""
    monkeypatch.setattr(fs.maps, "STAGE_ABOVE", 1 << 16)
    monkeypatch.setattr(fs.maps, "_STAGE_CHUNK", 1 << 12)
    data = bytes(range(256)) * 300 + bytes(50_000) + b"end" + bytes(5_000)  # data, a zero run, data, a zero tail
    (tmp_path / "big").write_bytes(data)
    (tmp_path / "small").write_bytes(data[:1000])
    staging = tmp_path / "staging"
    staging.mkdir()
    monkeypatch.setenv("TMPDIR", str(staging))
    monkeypatch.setattr("tempfile.tempdir", None)
    base = elsewhere("t", tmp_path)
    with fs.ReadOnlyMap(base + "big") as m:
        assert type(m.buf).__name__ == "_FileMap" and bytes(m.buf) == data
        assert m.written_length() == len(data) - 5_000
        assert list(staging.iterdir()) == []  # unlinked already: nothing left behind, whatever happens
        assert os.fstat(m.fileno()).st_blocks * 512 < len(data) - 40_000  # the zero run is a hole
    with fs.ReadOnlyMap(base + "small") as m:
        assert m.buf == data[:1000] and m.fileno() is None  # small: in memory
    assert (tmp_path / "big").read_bytes() == data  # the input is only read


def test_the_index_source_over_a_staged_remote_file_equals_the_local_read(elsewhere, monkeypatch):
    """The broker fixture's 420 MB index file (mostly holes) read through the seam, staged: the rows of the local read."""
    from datasources.indexfile import IndexReader

    monkeypatch.setattr(fs.maps, "STAGE_ABOVE", 1 << 16)

    def rows(path):
        reader = IndexReader({"path": path})
        return [r for p in reader.partitions() for b in reader.read(p) for r in b.to_pylist()]

    local = rows(str(fixture_store("broker")))
    assert local and rows(elsewhere("fx", FIXTURES) + "broker/store") == local


def test_the_audit_plans_a_remote_store_as_a_local_one(elsewhere):
    """The newest segment's written end is probed through the seam too (ranged reads): a remote store's data bytes,
    and so its split and ranges, are the local one's, not its zero tail read as data."""
    from runtime import stores
    from jobs.audit.plan import plan_broker
    from store_format.plan import segment_data

    def data_bytes(plan) -> int:
        return sum(segment_data([(plan.name, s) for s in plan.segments]).values())

    for name in ("broker", "basic"):
        local = plan_broker(stores.resolve_stores([str(FIXTURES / name / "store")])[0])
        remote = plan_broker(stores.resolve_stores([elsewhere("fx", FIXTURES) + f"{name}/store"])[0])
        assert data_bytes(remote) == data_bytes(local) < sum(s.length for s in local.segments), name


def test_local_paths_keep_the_hostile_input_checks(tmp_path):
    os.mkfifo(tmp_path / "fifo")
    loc = fs.resolve(tmp_path / "fifo")
    with pytest.raises(fs.UnreadableError, match="FIFO"):
        loc.read_range(0, 4)  # refused without blocking on a writer
    with pytest.raises(fs.UnreadableError, match="FIFO"):
        loc.open_input()
    assert isinstance(fs.as_path(tmp_path), Path) and isinstance(fs.as_path(f"file://{tmp_path}"), Path)


def test_an_unknown_scheme_is_a_positioned_error():
    with pytest.raises(StoreFormatError, match="register_filesystem"):
        fs.resolve("nosuchscheme://x/store")


def test_a_scheme_registered_by_the_environment(monkeypatch, tmp_path):
    """Another process (a data source's planner, an executor, spark-submit) registers through the environment."""
    remotefs.ROOTS["env"] = str(tmp_path)
    (tmp_path / "x").write_bytes(b"1")
    monkeypatch.setattr(fs.remote, "_SCHEMES", {})
    monkeypatch.setenv(fs.FILESYSTEMS_ENV, f"other=os:path, {remotefs.SCHEME}=tests.support.remotefs:from_uri")
    assert fs.resolve("elsewhere://env/x").read_range(0, 1) == b"1"
    monkeypatch.setenv(fs.FILESYSTEMS_ENV, "broken=tests.support.remotefs:no_such_factory")
    with pytest.raises(StoreFormatError, match="no_such_factory"):
        fs.resolve("broken://x")


def test_uri_below_keeps_the_options():
    import pyarrow.fs as pafs

    base = fs.Location(pafs.LocalFileSystem(), "bucket/dumps")
    below = fs.Location(base.fs, "bucket/dumps/b1/store")
    assert fs.uri_below("s3://bucket/dumps?region=eu-west-1", base, below) == \
        "s3://bucket/dumps/b1/store?region=eu-west-1"
    assert fs.uri_below("s3://bucket/dumps/", base, base) == "s3://bucket/dumps/"


@pytest.mark.parametrize("name", ["broker", "basic", "recovered-zero-page/input"])
def test_the_store_reads_the_same_through_the_seam(elsewhere, name):
    """Store (listings, segments, queues, index, checkpoint, config) and the recovery model over the seam."""
    local = Store(FIXTURES / name / "store")
    remote = Store(elsewhere("fx", FIXTURES) + f"{name}/store")
    assert isinstance(remote.root, fs.StorePath)
    assert [(s.name, s.length) for s in remote.segments] == [(s.name, s.length) for s in local.segments]
    assert sorted(remote.queues) == sorted(local.queues)
    assert list(remote.messages()) == list(local.messages())
    assert remote.checkpoint() == local.checkpoint() and remote.markers() == local.markers()
    assert [remote.config(n).data for n in remote.config_names()] == [local.config(n).data for n in local.config_names()]
    assert [p.name for p in remote.index_paths()] == [p.name for p in local.index_paths()]
    assert repr(predict_recovery(remote)) == repr(predict_recovery(local))
    assert remotefs.OPENS  # read through the handler


def _same_rows(mine: Path, reference: Path, name: str, paths) -> None:
    def plain(counter: Counter) -> Counter:
        return Counter({paths(k): v for k, v in counter.items()})

    assert plain(parquet_rows(mine / name, AUDIT_STAMPS)) == parquet_rows(reference / name, AUDIT_STAMPS), name


@pytest.mark.spark
def test_the_audit_over_a_custom_scheme_equals_the_local_run(spark, elsewhere, damaged_store, local_audit,
                                                              tmp_path):
    """The Done-when of issue 23's storage item: the audit of the ``broker`` fixture and a damaged writer-built
    store, given as ``elsewhere://`` URIs, equals the local run of the same stores (findings, metrics, every
    table, the summary's counts, brokers and inputs, the exit code), paths aside."""
    from jobs import audit

    reference, code = local_audit
    fixtures = fixture_store("broker").parent.parent
    damaged_base = damaged_store.parent.parent
    stores = [elsewhere("fx", fixtures) + "broker/store", elsewhere("dmg", damaged_base) + "damaged/store"]
    out = tmp_path / "audit"
    result = audit.run(spark, audit.build_parser().parse_args(["--store", *stores, "--out", str(out)]))
    assert result.exit_code == code
    assert any("/commitlog/" in p for p in remotefs.OPENS)

    swaps = [("elsewhere://fx/", f"{fixtures}/"), ("elsewhere://dmg/", f"{damaged_base}/"),
             (f"{remotefs.PREFIX}/fx", str(fixtures)), (f"{remotefs.PREFIX}/dmg", str(damaged_base))]

    def paths(text: str) -> str:
        for a, b in swaps:
            text = text.replace(a, b)
        return text

    # the damaged store's dropped damaged record is described from its bytes, read through the scheme
    lost = [dict(r["details"]) for r in pq.read_table(out / "findings").to_pylist()
            if r["check"] == "recovery.message_lost"]
    assert any(d["state"] == "damaged" for d in lost)
    for name in ("findings", "metrics", *(f"tables/{t.name}" for t in (reference / "tables").iterdir())):
        _same_rows(out, reference, name, paths)
    # the verdicts' commands name each run's own output folder (where they copy messages out to)
    mine, ref = (json.loads((d / "summary.json").read_text().replace(str(d), "<out>")) for d in (out, reference))
    mine = json.loads(paths(json.dumps(mine)))
    assert mine["counts"] == ref["counts"] and mine["brokers"] == ref["brokers"]
    # the summary lists inputs in path order, and the URIs sort apart from the local paths they stand for

    def inputs(summary):
        return sorted(({k: v for k, v in i.items() if k != "mtime_ns"} for i in summary["inputs"]),
                      key=lambda i: i["path"])

    assert inputs(mine) == inputs(ref)


@pytest.mark.spark
@pytest.mark.parametrize("rename", [True, False], ids=["out-with-rename", "out-without-rename"])
def test_the_audit_with_store_and_output_on_a_custom_scheme_equals_the_local_run(spark, elsewhere, damaged_store,
                                                                               local_audit, tmp_path, rename):
    """Issue 30 item 4 / issue 33: --out through the fs seam too.  The store AND the output on ``elsewhere://``
    (a writable folder, with an atomic rename of folders like HDFS, or without one like an object store): the
    tasks write their findings through store_format.fs (nothing made at a local path), the run is staged beside
    the output and committed, and the output equals the local run's."""
    from jobs import audit

    reference, code = local_audit
    fixtures = fixture_store("broker").parent.parent
    damaged_base = damaged_store.parent.parent
    stores = [elsewhere("fx", fixtures) + "broker/store", elsewhere("dmg", damaged_base) + "damaged/store"]
    remotefs.WRITES.clear()
    out_uri = elsewhere("outs", tmp_path, writable=True, rename=rename) + "audit"
    result = audit.run(spark, audit.build_parser().parse_args(["--store", *stores, "--out", out_uri]))
    assert result.exit_code == code
    out = tmp_path / "audit"
    assert remotefs.no_local_path_used() and any("/findings/" in w for w in remotefs.WRITES)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["audit"]  # committed: no staging, no claim left
    mark = json.loads((out / "_ROCKETMQ_FORENSICS").read_text())
    assert mark["state"] == "committed" and (out / "findings" / "_SUCCESS").exists()
    swaps = [("elsewhere://fx/", f"{fixtures}/"), ("elsewhere://dmg/", f"{damaged_base}/"),
             (f"{remotefs.PREFIX}/fx", str(fixtures)), (f"{remotefs.PREFIX}/dmg", str(damaged_base))]

    def paths(text: str) -> str:
        for a, b in swaps:
            text = text.replace(a, b)
        return text

    for name in ("findings", "metrics", *(f"tables/{t.name}" for t in (reference / "tables").iterdir())):
        _same_rows(out, reference, name, paths)
    mine = json.loads(paths((out / "summary.json").read_text().replace(out_uri, "<out>")))
    ref = json.loads((reference / "summary.json").read_text().replace(str(reference), "<out>"))
    assert mine["counts"] == ref["counts"] and mine["brokers"] == ref["brokers"]
    assert (out / "report.html").exists()


# ---- the other jobs over the seam --------------------------------------------------------------------------

@pytest.fixture
def remote_sources(spark, elsewhere):
    """``elsewhere://`` resolvable in the data sources' own Python processes too: the scheme's registration and
    its folders in the environment the sources are registered with (SparkContext.environment, as
    spark.executorEnv.* gives it), the sources registered again, and everything undone afterwards."""
    import datasources

    env = spark.sparkContext.environment
    before = dict(env)

    def serve(tag, folder) -> str:
        uri = elsewhere(tag, folder)
        env.update(remotefs.environment())
        datasources.register(spark)
        return uri

    yield serve
    env.clear()
    env.update(before)
    datasources.register(spark)


def test_point_queries_through_the_seam(elsewhere):
    """query --msg-id and --key (no Spark: the index and the records read on the driver through the seam)."""
    from .test_query import ask

    manifest = json.loads((FIXTURES / "broker" / "manifest.json").read_text())
    uri = elsewhere("fx", FIXTURES) + "broker/store"
    for exp in manifest["messages"][:5]:
        code, msgs, _, _ = ask("--store", uri, "--msg-id", exp["msgId"])
        assert code == 0 and [m["physical_offset"] for m in msgs] == [exp["commitLogOffset"]]
        assert msgs[0]["body"] == exp["body"]
    for q in manifest["indexQueries"][:5]:
        code, msgs, _, _ = ask("--store", uri, "--topic", q["topic"], "--key", q["key"])
        assert code == 0 and sorted(m["physical_offset"] for m in msgs) == sorted(set(q["expectedOffsets"]))
    assert any("/index/" in p for p in remotefs.OPENS)


@pytest.mark.spark
def test_time_range_query_and_extract_through_the_seam(spark, remote_sources, tmp_path):
    """query --from/--to (segments chosen by their first records, then the commitlog source in its workers) and
    extract give the local run's rows."""
    from jobs import extract

    from .test_query import ask

    manifest = json.loads((FIXTURES / "basic" / "manifest.json").read_text())
    uri = remote_sources("fx", FIXTURES) + "basic/store"
    ts = sorted(m["storeTimestamp"] for m in manifest["messages"])
    lo, hi = ts[10], ts[40]
    code, msgs, _, _ = ask("--store", uri, "--from", lo, "--to", hi, spark=spark)
    assert code == 0 and [m["physical_offset"] for m in msgs] == [
        m["commitLogOffset"] for m in manifest["messages"] if lo <= m["storeTimestamp"] <= hi]

    outs = {}
    for name, store in (("local", FIXTURES / "basic" / "store"), ("remote", uri)):
        outs[name] = tmp_path / name
        args = extract.build_parser().parse_args(["--store", str(store), "--out", str(outs[name]), "--format",
                                                  "parquet"])
        assert extract.run(spark, args).exit_code == 0
    assert parquet_rows(outs["remote"]) == parquet_rows(outs["local"])


@pytest.mark.spark
def test_compare_through_the_seam(spark, remote_sources, tmp_path):
    """compare of a store on the custom scheme with its local self: identical (exit 0), as two local copies."""
    from jobs import compare

    uri = remote_sources("fx", FIXTURES) + "broker/store"
    args = compare.build_parser().parse_args(["--store", uri, "--store", str(FIXTURES / "broker" / "store"),
                                              "--out", str(tmp_path / "cmp")])
    assert compare.run(spark, args).exit_code == 0


@pytest.mark.spark
def test_decode_and_repair_through_the_seam(spark, remote_sources, damaged_store, tmp_path):
    """decode exports the local run's rows; replay --repair of the damaged writer-built store, read through the
    scheme, writes a store whose messages and consumer offsets are the local repair's."""
    from jobs import decode, replay

    uri = remote_sources("dmg", damaged_store.parent.parent) + "damaged/store"
    outs = {}
    for name, store in (("local", damaged_store), ("remote", uri)):
        outs[name] = tmp_path / f"decode-{name}"
        args = decode.build_parser().parse_args(["--store", str(store), "--out", str(outs[name]), "--format",
                                                 "parquet"])
        assert decode.run(spark, args).exit_code == 0
    assert parquet_rows(outs["remote"]) == parquet_rows(outs["local"])

    repaired = {}
    for name, store in (("local", damaged_store), ("remote", uri)):
        repaired[name] = tmp_path / f"repair-{name}"
        args = replay.build_parser().parse_args(["--repair", str(store), "--out", str(repaired[name])])
        assert replay.run(spark, args).exit_code == 0
    a, b = Store(repaired["remote"]), Store(repaired["local"])
    assert [(m.topic, m.queue_id, m.queue_offset, m.body) for m in a.messages()] == \
        [(m.topic, m.queue_id, m.queue_offset, m.body) for m in b.messages()]
    assert a.config("consumerOffset.json").data == b.config("consumerOffset.json").data


def test_a_blocks_written_bytes_end_at_its_last_non_zero_byte():
    """fs.hostile.written_in (every zero search's test of one block: pieces of zeros by one memcmp each, the piece
    the data ends in halved down to a rstrip) is ``len(block.rstrip(b"\\0"))`` on blocks of zeros and of data ending
    anywhere: at either end, on and beside word, page and piece edges, a piece from the end or more."""
    from store_format.fs.hostile import _ZEROS, written_in

    piece = len(_ZEROS)
    for n in (0, 1, 7, 8, 9, 4095, 4096, 4097, 65_536, piece - 1, piece, piece + 1, piece + 4097, 3 * piece + 5):
        assert written_in(bytes(n)) == 0, n
        for at in sorted({0, 1, 7, 8, n // 3, 4095, 4096, n - piece - 1, n - piece, n - piece + 1, n - 9, n - 8,
                          n - 1}):
            if 0 <= at < n:
                block = bytearray(n)
                block[at] = 0x5A
                assert written_in(bytes(block)) == len(bytes(block).rstrip(b"\0")) == at + 1, (n, at)
                block[at // 3] = block[max(0, at - 65)] = 0x01  # data, zeros between, then its last byte
                assert written_in(bytes(block)) == at + 1, (n, at)


@pytest.mark.parametrize("block", [1 << 18, 1 << 12])
def test_read_written_is_the_maps_written_bytes(tmp_path, elsewhere, monkeypatch, block):
    """fs.read_written (pread of the data extents, no map: the consume-queue readers) gives the bytes a map gives up
    to ReadOnlyMap.written_length, rounded up to a whole unit within the file, and the file's length: sparse files
    with holes before, between and after their data, zeros written out, nothing written, a partial last unit, data
    ending on a search block's edge, a last unit that runs past its data extent into a hole; a file through the
    seam the same; anything but a regular file refused."""
    monkeypatch.setattr(fs.hostile, "_ZERO_SCAN_BLOCK", block)
    files = {"empty": [], "zeros": [(0, bytes(70_000))], "one": [(0, b"\x01")], "tail": [(0, b"ab" * 30)],
             "edge": [(0, b"\x07" * block)], "hole_first": [(50_000, b"xyz"), (60_000, bytes(0))],
             "two_extents": [(0, b"a" * 5000), (900_000, b"b" * 17), (2_000_000, bytes(0))],
             "zeros_after": [(0, b"q" * 21), (21, bytes(300_000))], "partial_unit": [(0, b"u" * 47)],
             "last_byte": [(1_048_575, b"z")],
             "unit_past_extent": [(0, b"e" * 4095), (100_000, bytes(0))]}  # its last unit runs into the hole
    for name, writes in files.items():
        with open(tmp_path / name, "wb") as f:
            for at, data in writes:
                f.seek(at)
                f.write(data)
            f.truncate(max([at + len(data) for at, data in writes], default=0))
    base = elsewhere("t", tmp_path)
    for name in files:
        with fs.ReadOnlyMap(tmp_path / name) as m:
            for unit in (1, 20):
                end = min(len(m), -(-m.written_length() // unit) * unit)
                want = (bytes(m.buf[:end]), len(m))
                for where in (tmp_path / name, str(tmp_path / name), base + name):
                    got = fs.read_written(where, unit)
                    assert (bytes(got[0]), got[1]) == want, (name, unit, where)
    os.mkfifo(tmp_path / "fifo")
    with pytest.raises(fs.UnreadableError, match="FIFO"):
        fs.read_written(tmp_path / "fifo")
