"""Index files of any geometry: maxHashSlotNum and maxIndexNum are two broker settings, and every reader takes
them from the file itself (store_format.indexfile.infer_geometry), from --config broker.conf or from
--hash-slots/--index-num.  Writer-built stores of five geometries are read, queried and audited clean without
being told theirs; RocketMQ's own files still infer; an undecidable file is a positioned error listing the
candidates; a given geometry the file contradicts is refused; hostile bytes never give a wrong geometry; an
unreadable file is one finding plus one summarized finding in the audit, exit 2 from dump, and a scan of the
commitlog for query's keys (a notice; the answer stays complete)."""
from __future__ import annotations

import io
import json
import random
import struct
import time
from collections import Counter
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from jobs import audit, query
from store_format import layout as L
from store_format.__main__ import main as store_main
from store_format.brokerconf import BrokerConfError, parse_properties, read_geometry, read_properties
from store_format.write.damage import copy_store
from store_format.errors import ErrorKind, IndexFileError
from store_format.write.generate import TrafficConfig, generate_store
from store_format.indexfile import IndexFile, data_end, infer_geometry, length_candidates, list_index_files
from store_format.javahash import index_key, index_key_hash
from store_format.store import Store
from store_format.write.writer import IndexFileWriter, WriterConfig

from .conftest import FIXTURES, fixture_manifest, fixture_store

# (slots, entries): two small ones, a 1:2 ratio, a pair with no common ratio, and RocketMQ's 1:4
GEOMETRIES = ((48, 150), (100, 300), (1000, 2000), (97, 411), (500, 2000))


def _name(geometry) -> str:
    return f"g{geometry[0]}x{geometry[1]}"


@pytest.fixture(scope="module")
def geometry_stores(tmp_path_factory) -> dict[str, tuple[Path, tuple[int, int]]]:
    """One writer-built store per geometry, in one folder (for a single audit run)."""
    base = tmp_path_factory.mktemp("geometries") / "stores"
    out = {}
    for i, (slots, entries) in enumerate(GEOMETRIES):
        root = base / _name((slots, entries))
        generate_store(root, TrafficConfig(messages=300, topics=2, queues=2, seed=i),
                       WriterConfig(maxHashSlotNum=slots, maxIndexNum=entries, mappedFileSizeCommitLog=256 * 1024))
        out[root.name] = (root, (slots, entries))
    return out


def indexed_keys(store: Store):
    """(topic, key, physical offset) of every key the broker indexes (UNIQ_KEY and each of KEYS; not ROLLBACK)."""
    for m in store.messages():
        if m.sys_flag & L.TRANSACTION_MASK == L.TRANSACTION_ROLLBACK_TYPE:
            continue
        for key in dict.fromkeys(([m.uniq_key] if m.uniq_key else []) + list(m.keys)):
            yield m.topic, key, m.physical_offset


def ask_store(*argv) -> tuple[int, list[dict], str]:
    """python -m store_format, in this process: (exit code, JSON lines, stderr)."""
    import contextlib

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = store_main([str(a) for a in argv])
    return code, [json.loads(x) for x in out.getvalue().splitlines()], err.getvalue()


def ask_query(*argv) -> tuple[int, list[dict], str]:
    """jobs.query (a point lookup: no Spark), in this process: (exit code, message lines, stderr)."""
    out, err = io.StringIO(), io.StringIO()
    code = query.run(None, query.build_parser().parse_args([str(a) for a in argv]), out=out, err=err).exit_code
    return code, [json.loads(x) for x in out.getvalue().splitlines() if json.loads(x)["kind"] == "message"], \
        err.getvalue()


# --------------------------------------------------------------------------------------------------
# Writer-built stores of five geometries, read and queried without being told theirs


def test_every_index_file_infers_its_writers_geometry(geometry_stores):
    for name, (root, geometry) in geometry_stores.items():
        paths = list_index_files(root / "index")
        assert paths, name
        for path in paths:
            with IndexFile(path) as f:
                assert (f.hash_slot_num, f.index_num) == geometry, path
        assert len(paths) > 1 or geometry[1] >= 2000, name  # the small geometries roll over several files


def test_every_key_is_found_without_a_geometry(geometry_stores):
    for name, (root, geometry) in geometry_stores.items():
        store = Store(root)
        keys = list(indexed_keys(store))
        assert len(keys) > 200, name
        for topic, key, offset in keys:
            assert offset in {m.physical_offset for m in store.query_key(topic, key)}, (name, topic, key)
        # the command lines: python -m store_format query and jobs.query, for a sample of keys
        for topic, key, offset in keys[:: len(keys) // 4]:
            code, lines, err = ask_store("query", root, "--topic", topic, "--key", key)
            assert code == 0 and offset in {x["physical_offset"] for x in lines}, err
            code, msgs, err = ask_query("--store", root, "--topic", topic, "--key", key)
            assert code == 0 and offset in {x["physical_offset"] for x in msgs}, err


def test_dump_prints_each_files_geometry(geometry_stores):
    root, geometry = geometry_stores[_name(GEOMETRIES[3])]
    code, lines, err = ask_store("dump", root, "--what", "index")
    headers = [x for x in lines if x["kind"] == "header"]
    assert code == 0 and headers and {(h["hash_slot_num"], h["index_num"]) for h in headers} == {geometry}
    assert sum(x["kind"] == "entry" for x in lines) == sum(h["index_count"] - 1 for h in headers)


def test_the_index_data_source_reads_every_geometry(spark, geometry_stores):
    folder = next(iter(geometry_stores.values()))[0].parent
    rows = (spark.read.format("rocketmq-index").load(str(folder))
            .groupBy("broker", "kind", "hash_slot_num", "index_num").count().collect())
    assert not [r for r in rows if r["kind"] == "corrupt"]
    for name, (root, geometry) in geometry_stores.items():
        headers = [r for r in rows if r["broker"] == name and r["kind"] == "header"]
        assert [(r["hash_slot_num"], r["index_num"], r["count"]) for r in headers] == \
            [(*geometry, len(list_index_files(root / "index")))]
        [entries] = [r["count"] for r in rows if r["broker"] == name and r["kind"] == "entry"]
        assert entries == sum(IndexFile(p).header.index_count - 1 for p in list_index_files(root / "index"))


# --------------------------------------------------------------------------------------------------
# RocketMQ's own files


def test_the_fixtures_index_files_still_infer_and_answer():
    for name in ("basic", "broker"):
        cfg = fixture_manifest(name)["storeConfig"]
        store = Store(fixture_store(name))
        for path in store.index_paths():
            with store.open_index(path) as f:
                assert (f.hash_slot_num, f.index_num) == (cfg["maxHashSlotNum"], cfg["maxIndexNum"]) == (512, 2048)
        for q in fixture_manifest(name)["indexQueries"]:
            assert sorted(store.index_candidates(q["topic"], q["key"])) == sorted(q["queryMessageOffsets"]), q
    damaged = FIXTURES / "recovered-zero-page"
    manifest = json.loads((damaged / "manifest.json").read_text())
    store = Store(damaged / "input" / "store")
    assert len(store.index_paths()) == 8
    for path in store.index_paths():
        with store.open_index(path) as f:
            assert (f.hash_slot_num, f.index_num) == (128, 512)
    for q in manifest["indexQueriesForDroppedMessages"]:  # the lookups RocketMQ answered before the damage
        assert sorted(set(store.index_candidates(q["topic"], q["key"]))) == sorted(set(q["offsetsBeforeDamage"]))


# --------------------------------------------------------------------------------------------------
# The rule: undecidable, contradicted, hostile


def _index_file(path: Path, slots: int, entries: int, keys: int, seed: int = 0) -> list[tuple[str, int]]:
    """An index file of the writer's IndexFile.putKey with ``keys`` random keys: [(key, offset)]."""
    rnd = random.Random(seed)
    f = IndexFileWriter(path, slots, entries, create=True)
    put = []
    for i in range(keys):
        key = f"T#{rnd.randrange(10**9)}"
        assert f.put(index_key_hash(key), 1000 + 97 * i, 1_700_000_000_000 + 10 * i)
        put.append((key, 1000 + 97 * i))
    f.close()
    return put


def test_an_empty_index_is_a_positioned_error_listing_the_candidates(tmp_path):
    path = tmp_path / "20240101000000000"
    _index_file(path, 100, 300, 0)
    with pytest.raises(IndexFileError) as e:
        IndexFile(path)
    err = e.value
    assert err.kind == ErrorKind.BAD_GEOMETRY and err.file == str(path) and err.position == 36
    assert "6440 bytes" in err.message and "indexCount 0: no entry is written" in err.message  # as created
    assert "319 (slots x entries) pair(s) fit 6440 bytes: 1595 x 1, 1590 x 2, 1585 x 3, ..." in err.message
    assert "--hash-slots/--index-num or --config broker.conf" in err.message
    # given, it is read as given (the length fits; no content says otherwise)
    with IndexFile(path, 100, 300) as f:
        assert (f.hash_slot_num, f.index_num, list(f.entries())) == (100, 300, [])
    with IndexFile(path, hash_slot_num=100) as f:  # the other half from the length
        assert f.index_num == 300
    # a length only one pair fits needs no content
    tiny = tmp_path / "20240101000000001"
    tiny.write_bytes(bytes(L.index_file_size(2, 1)))
    assert (IndexFile(tiny).hash_slot_num, IndexFile(tiny).index_num) == (2, 1)


def test_a_given_geometry_that_contradicts_the_file_is_refused(tmp_path):
    path = tmp_path / "20240101000000000"
    _index_file(path, 100, 300, 40)
    with IndexFile(path) as f:
        assert (f.hash_slot_num, f.index_num) == (100, 300)
    # the length: 6440 bytes
    for given, kind in (((100, 301), ErrorKind.TRUNCATED), ((100, 299), ErrorKind.BAD_GEOMETRY),
                        ((101, None), ErrorKind.BAD_GEOMETRY), ((None, 7), ErrorKind.BAD_GEOMETRY)):
        with pytest.raises(IndexFileError) as e:
            IndexFile(path, *given)
        assert e.value.kind == kind and e.value.file == str(path) and "6440 bytes" in e.value.message, given
        assert "pair(s) fit 6440 bytes" in e.value.message
    # the content: the same length, another split
    for given in ((95, 301), (105, 299), (1595, 1)):
        with pytest.raises(IndexFileError) as e:
            IndexFile(path, *given)
        assert e.value.kind == ErrorKind.BAD_GEOMETRY and "the file's content says 100 x 300" in e.value.message
    # through a store
    (tmp_path / "commitlog").mkdir()
    with pytest.raises(IndexFileError, match="content says 100 x 300"):
        Store(tmp_path, hash_slot_num=95, index_num=301).open_index(path)


def test_broker_conf_geometry_on_the_command_line(tmp_path, capsys):
    root = tmp_path / "store"
    generate_store(root, TrafficConfig(messages=60, topics=1, queues=1),
                   WriterConfig(maxHashSlotNum=100, maxIndexNum=300))
    [path] = list_index_files(root / "index")
    msg = next(iter(Store(root).messages()))
    # an undecidable (empty) index file beside it: only a geometry given reads it
    empty = root / "index" / "29990101000000000"
    _index_file(empty, 100, 300, 0)
    conf = tmp_path / "broker.conf"
    conf.write_text("brokerName=b\nmaxHashSlotNum = 100\nmaxIndexNum:300\n")
    code, lines, err = ask_store("dump", root, "--what", "index")
    assert code == 2 and [x["file"] for x in lines if x["kind"] == "error"] == [str(empty)], err
    for extra in (["--config", conf], ["--hash-slots", 100, "--index-num", 300], ["--index-num", 300]):
        code, lines, err = ask_store("dump", root, "--what", "index", *extra)
        assert code == 0, err
        assert {(x["file"], x["hash_slot_num"], x["index_num"]) for x in lines if x["kind"] == "header"} == \
            {(path.name, 100, 300), (empty.name, 100, 300)}
        code, msgs, err = ask_query("--store", root, "--topic", msg.topic, "--uniq-key", msg.uniq_key, *extra)
        assert code == 0 and [m["physical_offset"] for m in msgs] == [msg.physical_offset], err
    # a broker.conf the files contradict: a clear error naming the file, its length and the candidates
    conf.write_text("maxHashSlotNum=95\nmaxIndexNum=301\n")
    code, lines, err = ask_store("query", root, "--topic", msg.topic, "--key", msg.uniq_key, "--config", conf)
    assert code == 2 and f"{path}" in err and "6440 bytes" in err and "content says 100 x 300" in err
    code = query.main(["--store", str(root), "--topic", msg.topic, "--key", msg.uniq_key, "--config", str(conf)])
    err = capsys.readouterr().err
    assert code == 2 and f"{path}" in err and "content says 100 x 300" in err, err  # not a scan around it
    # flags override the file
    code, _, err = ask_store("dump", root, "--what", "index", "--config", conf, "--hash-slots", 100, "--index-num", 300)
    assert code == 0, err
    # a value the broker would not have used
    conf.write_text("maxHashSlotNum=100 \n")
    code, _, err = ask_store("dump", root, "--what", "index", "--config", conf)
    assert code == 2 and "maxHashSlotNum='100 ' is not an int" in err


def test_rule_4_each_fact_is_checked(tmp_path):
    path = tmp_path / "20240101000000000"
    _index_file(path, 100, 300, 40)
    raw = path.read_bytes()
    base = L.INDEX_HEADER_SIZE + 100 * L.INDEX_SLOT_SIZE
    last = base + 40 * L.INDEX_ENTRY_SIZE
    key_hash = struct.unpack_from(">i", raw, last)[0]

    def infer(patches: dict) -> tuple[int, int] | str:
        b = bytearray(raw)
        for at, value in patches.items():
            b[at:at + len(value)] = value
        try:
            return infer_geometry(bytes(b))
        except IndexFileError as e:
            return e.message

    assert infer({}) == (100, 300)
    assert "entry 0 (never written) is not zeros" in infer({base + 3: b"\x01"})
    slot_at = L.INDEX_HEADER_SIZE + (key_hash % 100) * L.INDEX_SLOT_SIZE
    assert "does not head its slot's chain" in infer({slot_at: struct.pack(">i", 7)})
    prev_at = last + L.INDEX_ENTRY.offset("prev_index")
    assert "prevIndex 40 does not point back" in infer({prev_at: struct.pack(">i", 40)})
    assert "negative keyHash" in infer({last: struct.pack(">i", -5)})
    # one of the header's offsets may disagree (the audit's index.header_mismatch); not both
    assert infer({24: struct.pack(">q", 1)}) == (100, 300) == infer({16: struct.pack(">q", 1)})
    assert "neither beginPhyOffset" in infer({16: struct.pack(">q", 1), 24: struct.pack(">q", 1)})
    # a wrong indexCount puts entry indexCount-1 elsewhere: no pair holds
    for count in (2, 30, 40, 42, 290, 300):
        assert isinstance(infer({36: struct.pack(">i", count)}), str), count
    assert "no pair has entries >= indexCount 400" in infer({36: struct.pack(">i", 400)})
    assert "hashSlotCount -1 is negative" in infer({32: struct.pack(">i", -1)})


def test_many_entries_are_found_by_strided_probes(tmp_path):
    """4000 entries: the unwritten tail is probed every 3999 entries (80 KB), not read byte by byte."""
    path = tmp_path / "20240101000000000"
    put = _index_file(path, 1000, 9000, 4000)
    with IndexFile(path) as f:
        assert (f.hash_slot_num, f.index_num) == (1000, 9000)
        for key, offset in put[::400]:
            assert offset in f.select_phy_offsets(key)
    full = tmp_path / "20240101000000001"
    _index_file(full, 7, 40, 39)  # full: the last entry is the file's last 20 bytes
    assert (IndexFile(full).hash_slot_num, IndexFile(full).index_num) == (7, 40)


def test_a_sparse_files_hole_is_not_read(tmp_path):
    """A preallocated file the broker wrote the start of: the data ends early, and the zeros after it are
    known without reading them (where the file system keeps holes)."""
    path = tmp_path / "20240101000000000"
    _index_file(path, 20_000, 800_000, 3)  # 16 MB, nearly all unwritten
    with open(path, "rb") as f:
        end = data_end(f.fileno(), path.stat().st_size)
    assert L.INDEX_HEADER_SIZE + 20_000 * L.INDEX_SLOT_SIZE + 4 * L.INDEX_ENTRY_SIZE <= end <= path.stat().st_size
    start = time.monotonic()
    with IndexFile(path) as f:
        assert (f.hash_slot_num, f.index_num) == (20_000, 800_000)
    assert time.monotonic() - start < 2


def test_hostile_bytes_never_give_a_wrong_geometry(tmp_path):
    """Every truncation and a flipped bit at every position of three real files (non-full, full, one entry),
    and random files: an error, the right geometry, or -- a file cut inside its unwritten tail by a multiple of
    20 bytes, which is a smaller file with the same slots -- the right slots; quickly."""
    files = {}
    for name, (slots, entries, keys) in {"partial": (97, 411, 150), "full": (48, 150, 149),
                                         "one": (100, 300, 1)}.items():
        _index_file(tmp_path / name, slots, entries, keys, seed=len(name))
        files[name] = ((tmp_path / name).read_bytes(), (slots, entries), keys)
    outcome = Counter()
    rnd = random.Random(3)
    start = time.monotonic()
    for name, (raw, truth, keys) in files.items():
        written_end = L.index_file_size(*truth) - (truth[1] - keys - 1) * L.INDEX_ENTRY_SIZE
        for cut in range(len(raw)):
            try:
                got = infer_geometry(raw[:cut])
            except IndexFileError as e:
                assert e.position is not None
                outcome["cut: error"] += 1
                continue
            assert got[0] == truth[0] and cut >= written_end and (len(raw) - cut) % L.INDEX_ENTRY_SIZE == 0, \
                (name, cut, got)
            outcome["cut: same slots, fewer entries"] += 1
        for pos in range(len(raw)):
            b = bytearray(raw)
            b[pos] ^= 1 << rnd.randrange(8)
            try:
                got = infer_geometry(bytes(b))
            except IndexFileError:
                outcome["flip: error"] += 1
                continue
            assert got == truth, (name, pos, got)
            outcome["flip: right"] += 1
    for _ in range(3000):
        n = rnd.randrange(41, 5000)
        try:
            got = infer_geometry(rnd.randbytes(n))
        except IndexFileError:
            outcome["random: error"] += 1
            continue
        assert len(length_candidates(n)) == 1, (n, got)  # random content never decides: only a length can
    assert time.monotonic() - start < 120
    # a flip in the slots or the entries is mostly harmless; one in the unwritten tail breaks rule 3 (an error)
    assert outcome["flip: right"] > 0 and outcome["flip: error"] > 0 and outcome["cut: same slots, fewer entries"] > 0


# --------------------------------------------------------------------------------------------------
# broker.conf: java.util.Properties, and the geometry it sets


def test_broker_conf_is_read_as_java_properties(tmp_path):
    text = ("# comment\n! also a comment \\\n  maxIndexNum=1\n"
            "brokerName = b\\u00e9\\\n    -1\n"
            "brokerClusterName:C\\=1\n"
            "deleteWhen 04\n"
            "\tflushDiskType\t=\tSYNC_FLUSH   \n"
            "namesrvAddr\n"
            "storePathRootDir=C:\\\\store\n"
            "maxHashSlotNum=1\nmaxHashSlotNum=+100\n"
            "maxIndexNum=300\r\nmappedFileSizeConsumeQueue=1001\rmessageDelayLevel=1s 2s\n"
            "mappedFileSizeCommitLog=1048576\\\n")
    values = parse_properties(text)
    assert values == {"brokerName": "bé-1", "brokerClusterName": "C=1", "deleteWhen": "04",
                      "flushDiskType": "SYNC_FLUSH   ", "namesrvAddr": "", "storePathRootDir": "C:\\store",
                      "maxHashSlotNum": "+100", "maxIndexNum": "300", "mappedFileSizeConsumeQueue": "1001",
                      "messageDelayLevel": "1s 2s", "mappedFileSizeCommitLog": "1048576"}
    conf = tmp_path / "broker.conf"
    conf.write_bytes(text.encode("iso-8859-1"))
    assert read_properties(conf) == values
    g = read_geometry(conf)
    assert (g.segment_size, g.consume_queue_file_size, g.hash_slot_num, g.index_num, g.message_delay_level) == \
        (1048576, 1020, 100, 300, "1s 2s")
    # the writer reads the same file the same way
    w = WriterConfig.from_file(conf)
    assert (w.brokerName, w.maxHashSlotNum, w.maxIndexNum, w.flushDiskType) == ("bé-1", 100, 300, "SYNC_FLUSH")
    for bad, says in (("maxIndexNum=3e2", "is not an int"), ("maxIndexNum=0", "must be positive"),
                      ("maxHashSlotNum=99999999999", "is not an int"), ("messageDelayLevel=1x", "messageDelayLevel"),
                      ("k=\\u12", "malformed \\uxxxx")):
        conf.write_text(bad + "\n")
        with pytest.raises(BrokerConfError, match=says.replace("\\", "\\\\")):
            read_geometry(conf)
    with pytest.raises(BrokerConfError) as e:
        read_geometry(tmp_path / "missing.conf")
    assert e.value.kind == ErrorKind.MISSING


def test_every_command_takes_the_same_geometry_options(geometry_stores, tmp_path):
    """audit, query, extract, compare and python -m store_format: --config, --hash-slots, --index-num (and
    --segment-size where a command has it), handed to the Store objects and the index data source."""
    from datasources.indexfile import IndexReader
    from jobs import compare, extract
    from jobs.audit.inputs import StoreRef
    from store_format import fs
    from jobs.audit.plan import plan_broker
    from runtime.stores import resolve_stores
    from store_format.__main__ import build_parser as store_parser
    from store_format.brokerconf import geometry_from_args

    root, geometry = geometry_stores[_name(GEOMETRIES[1])]
    conf = tmp_path / "broker.conf"
    conf.write_text("mappedFileSizeCommitLog=262144\nmaxHashSlotNum=100\nmaxIndexNum=300\n")
    parsers = {"audit": lambda a: audit.build_parser().parse_args(["--store", str(root), "--out", "o", *a]),
               "query": lambda a: query.build_parser().parse_args(["--store", str(root), *a]),
               "extract": lambda a: extract.build_parser().parse_args(["--store", str(root), "--out", "o", *a]),
               "compare": lambda a: compare.build_parser().parse_args(["--store", str(root), "--store", "x", *a]),
               "store_format": lambda a: store_parser().parse_args(["dump", str(root), "--what", "index", *a])}
    for name, parse in parsers.items():
        for argv in (["--config", str(conf)], ["--hash-slots", "100", "--index-num", "300"]):
            g = geometry_from_args(parse(argv))
            assert (g.hash_slot_num, g.index_num) == geometry, (name, argv)
            # broker.conf's segment size only where the command takes --segment-size
            assert g.segment_size == (262144 if name in ("audit", "store_format") and "--config" in argv else None)
        assert geometry_from_args(parse(["--config", str(conf), "--index-num", "7"])).index_num == 7  # flags win
    [ref] = resolve_stores([str(root)], files=True,
                           geometry=geometry_from_args(parsers["query"](["--config", str(conf)])))
    assert (ref.open().hash_slot_num, ref.open().index_num) == geometry
    plan = plan_broker(StoreRef("b", fs.resolve(str(root)), str(root)),
                       geometry_from_args(parsers["audit"](["--config", str(conf)])))
    assert plan.store.segment_size == 262144 and plan.store.index_num == 300
    assert plan.index_files and all((p.hash_slot_num, p.index_num) == (100, 300) for p in plan.index_files)
    # the data source: a given geometry is checked against every file
    from .test_safety import read_in_process

    def rows_of(reader):
        return [r for part in reader.partitions() for b in reader.read(part) for r in b.to_pylist()]

    rows = rows_of(IndexReader({"path": str(root), "hashSlotNum": "100", "indexNum": "300"}))
    assert rows and not [r for r in rows if r["kind"] == "corrupt"]
    rows = rows_of(IndexReader({"path": str(root), "hashSlotNum": "95", "indexNum": "301"}))
    assert {r["kind"] for r in rows} == {"corrupt"} and all("content says 100 x 300" in r["detail"] for r in rows)
    assert all(r["begin_phy_offset"] is not None for r in rows)  # the header, for the audit's ranges
    assert read_in_process(IndexReader({"path": str(root)})) > 300


# --------------------------------------------------------------------------------------------------
# An unreadable index file: exit 2 from dump; query scans the commitlog for the key instead


def _unreadable_copy(src: Path, dst: Path) -> tuple[Path, Path]:
    """A copy of ``src`` whose second index file is cut to 30 bytes; (root, that file)."""
    root = copy_store(src, dst)
    victim = list_index_files(root / "index")[1]
    victim.write_bytes(victim.read_bytes()[:30])
    return root, victim


def test_dump_and_query_agree_on_an_unreadable_index_file(geometry_stores, tmp_path):
    src, _ = geometry_stores[_name(GEOMETRIES[0])]
    root, victim = _unreadable_copy(src, tmp_path / "s")
    store = Store(src)
    served = {(t, k): o for t, k, o in indexed_keys(store)}
    with IndexFile(list_index_files(src / "index")[0]) as first:  # a key the first (readable) file serves
        offset = first.entry(1).physical_offset
    topic, key = next(tk for tk, o in served.items() if o == offset)
    code, lines, err = ask_store("dump", root, "--what", "index")
    assert code == 2 and [x["file"] for x in lines if x["kind"] == "error"] == [str(victim)]
    assert "TRUNCATED" in json.dumps(lines) and "could not be read" in err
    assert len([x for x in lines if x["kind"] == "header"]) == len(list_index_files(root / "index")) - 1
    code, lines, err = ask_store("dump", root, "--what", "index", "--strict")
    assert code == 2
    code, lines, err = ask_store("query", root, "--topic", topic, "--key", key)
    assert code == 0 and [x["physical_offset"] for x in lines] == [offset]  # found; the scan kept it complete
    assert f"index file {victim} cannot be used (TRUNCATED" in err and "scanning the commitlog" in err
    code, msgs, err = ask_query("--store", root, "--topic", topic, "--key", key)
    assert code == 0 and [m["physical_offset"] for m in msgs] == [offset] and str(victim) in err
    # a key only the unreadable file served: the index cannot give it, the scan does (exit 0, not 2)
    with IndexFile(list_index_files(src / "index")[1]) as second:
        lost = second.entry(1).physical_offset
    topic, key = next(tk for tk, o in served.items() if o == lost)
    code, lines, err = ask_store("query", root, "--topic", topic, "--key", key)
    assert code == 0 and lost in [x["physical_offset"] for x in lines], err
    code, msgs, err = ask_query("--store", root, "--topic", topic, "--key", key)
    assert code == 0 and lost in [m["physical_offset"] for m in msgs] and "scanned" in err
    # the pristine store: 0, and 1 when nothing matches
    assert ask_store("dump", src, "--what", "index")[0] == 0
    assert ask_store("query", src, "--topic", topic, "--key", "no-such-key")[0] == 1


# --------------------------------------------------------------------------------------------------
# The audit: every geometry clean, and an unreadable file summarized, in one run


def _keys_only_in(root: Path, victim_name: str) -> tuple[int, set[int]]:
    """How many (message, key) pairs have an entry (physical offset, key hash) only in the index file
    ``victim_name`` of the pristine store ``root``, and the offsets of those messages."""
    elsewhere, only = set(), set()
    for path in list_index_files(root / "index"):
        with IndexFile(path) as f:
            pairs = {(e.physical_offset, e.key_hash) for e in f.entries()}
        (only if path.name == victim_name else elsewhere).update(pairs)
    n, offsets = 0, set()
    for topic, key, offset in indexed_keys(Store(root)):
        pair = (offset, index_key_hash(index_key(topic, key)))
        if pair in only and pair not in elsewhere:
            n += 1
            offsets.add(offset)
    return n, offsets


@pytest.fixture(scope="module")
def geometry_audit(spark, geometry_stores, tmp_path_factory):
    folder = next(iter(geometry_stores.values()))[0].parent
    src, _ = geometry_stores[_name(GEOMETRIES[0])]
    copies = tmp_path_factory.mktemp("unreadable")
    damaged = {}
    # cut to 30 bytes: no header, so its range is the gap between its readable neighbours
    _, victim = _unreadable_copy(src, copies / "cut")
    damaged["cut"] = (victim.name, "neighbours")
    # entry 0 written over: the header is intact, so its range is the header's begin..end
    root = copy_store(src, copies / "entry0")
    victim = list_index_files(root / "index")[2]
    raw = bytearray(victim.read_bytes())
    raw[L.INDEX_HEADER_SIZE + 48 * L.INDEX_SLOT_SIZE] = 1
    victim.write_bytes(bytes(raw))
    damaged["entry0"] = (victim.name, "header")
    out = tmp_path_factory.mktemp("geometry-audit") / "out"
    stores = [str(folder), str(copies / "cut"), str(copies / "entry0")]
    args = audit.build_parser().parse_args(["--store", *stores, "--out", str(out), "--no-report"])
    result = audit.run(spark, args)
    findings = pq.read_table(out / "findings").to_pylist()
    for f in findings:
        f["details"] = dict(f["details"] or [])
    return result, findings, damaged, src


def test_every_geometry_audits_clean_in_one_run(geometry_audit, geometry_stores):
    result, findings, _, _ = geometry_audit
    assert {b["name"] for b in result.summary_data["brokers"]} == set(geometry_stores) | {"cut", "entry0"}
    for name in geometry_stores:
        errors = [(f["check"], f["message"]) for f in findings if f["broker"] == name and f["severity"] == "error"]
        assert errors == [], name
        assert not [f for f in findings if f["broker"] == name and f["check"].startswith("index.")
                    and f["check"] != "index.duplicate_entries"], name


@pytest.mark.parametrize("broker", ["cut", "entry0"])
def test_an_unreadable_index_file_is_one_finding_and_one_summary(geometry_audit, broker):
    result, findings, damaged, src = geometry_audit
    victim, basis = damaged[broker]
    mine = [f for f in findings if f["broker"] == broker]
    errors = [(f["check"], f["file"]) for f in mine if f["severity"] == "error"]
    assert errors == [("index.corrupt_file", victim)]
    assert not [f for f in mine if f["check"] in ("index.key_missing", "index.not_yet_indexed")]
    [summary] = [f for f in mine if f["check"] == "index.keys_unverifiable"]
    n, offsets = _keys_only_in(src, victim)
    assert n > 0 and summary["severity"] == "warning" and summary["file"] == victim
    assert summary["message"].startswith(f"{n} keys not verifiable: index file {victim} unreadable ")
    d = summary["details"]
    assert (int(d["keys"]), int(d["messages"]), d["range_basis"]) == (n, len(offsets), basis)
    assert (int(d["first_physical_offset"]), int(d["last_physical_offset"])) == (min(offsets), max(offsets))
    assert summary["physical_offset"] == min(offsets)
    with IndexFile(list_index_files(src / "index")[[p.name for p in list_index_files(src / "index")].index(victim)]) as f:
        if basis == "header":
            assert (int(d["range_from"]), int(d["range_to"])) == (f.header.begin_phy_offset, f.header.end_phy_offset)
    assert result.exit_code == 1  # the corrupt files are errors


def test_the_last_written_block_is_found_wherever_it_lies():
    """indexfile._first_nonzero (rule 3's search, back a block at a time) against the definition, a block at a time
    from k_lo: zeros, one byte set at the edges of blocks and of the search's own steps, dense entries."""
    import numpy as np

    from store_format.indexfile import _first_nonzero

    size = L.INDEX_ENTRY_SIZE
    rng = random.Random(7)
    length = 40 + size * 40_000

    def reference(arr, k_lo, k_hi):
        for k in range(k_lo, k_hi + 1):
            if arr[length - size * k:length - size * (k - 1)].any():
                return k
        return None

    for case in range(60):
        arr = np.zeros(length, np.uint8)
        if case % 3 == 1:  # one byte anywhere, the search's step boundaries included
            arr[rng.choice([length - 1, length - (1 << 18), length - (1 << 18) - 1, rng.randrange(length)])] = 1
        elif case % 3 == 2:  # a run of written entries ending anywhere
            end = rng.randrange(40, length)
            arr[max(40, end - size * rng.randrange(1, 30_000)):end] = rng.randrange(1, 256)
        k_lo = rng.randrange(1, 200)
        k_hi = rng.choice([40_000, rng.randrange(k_lo, 40_001)])
        assert _first_nonzero(arr, length, k_lo, k_hi) == reference(arr, k_lo, k_hi), case
