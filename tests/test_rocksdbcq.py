"""The RocksDB consume queue (store_format/rocksdbcq.py) against the store RocketMQ 5.3.3 wrote with
``storeType=defaultRocksDB`` (fixture ``rocketmq-5.3.3/rocksdb-cq``): every unit, every bound and every raw row as
RocketMQ's own read-back and rocksdbjni listed them in the manifest; every unit points at its record in the
CommitLog; the database is never written (hashes and listings before and after, and a copy with no write bit);
rows in the write-ahead log are read; a deleted key is a missing unit; malformed rows are positioned errors; and
whatever cannot be read is ``RocksDBQueueUnreadable`` with the reason, never a crash."""
from __future__ import annotations

import hashlib
import json
import os
import shutil
import stat
import tempfile
from pathlib import Path

import pyarrow.fs as pafs
import pytest

from store_format import fs
from store_format import rocksdbcq as R
from store_format.commitlog import list_segments, walk_segment
from store_format.errors import ErrorKind, StoreFormatError

from .conftest import FIXTURES, FIXTURES_5X

STORE = FIXTURES_5X / "rocksdb-cq" / "store"
DB = STORE / "consumequeue"


@pytest.fixture(scope="module")
def manifest() -> dict:
    return json.loads((FIXTURES_5X / "rocksdb-cq" / "manifest.json").read_text(encoding="utf-8"))


@pytest.fixture(scope="module")
def messages() -> list:
    return [f.message for s in list_segments(STORE / "commitlog") for f in walk_segment(s) if f.kind == "message"]


def folder_state(folder: Path) -> dict:
    """Every entry of the folder (name -> mode, size, mtime, sha256 of a file) and the folder's own mtime."""
    out = {".": (folder.stat().st_mode, folder.stat().st_mtime_ns)}
    for p in sorted(folder.iterdir()):
        st = p.lstat()
        out[p.name] = (st.st_mode, st.st_size, st.st_mtime_ns,
                       hashlib.sha256(p.read_bytes()).hexdigest() if p.is_file() else None)
    return out


def read_everything(store) -> dict:
    """Every call of the reader, as plain data."""
    with R.RocksDBQueues(store) as q:
        queues = q.queues()
        return {"queues": queues, "units": {k: q.units(*k).rows() for k in queues},
                "bounds": {k: q.bounds(*k) for k in queues}, "checkpoint": q.checkpoint(),
                "problems": q.scan_problems()}


def store_copy(tmp_path: Path) -> Path:
    """A writable copy of the fixture's consumequeue/ under a store root of its own."""
    root = tmp_path / "store"
    shutil.copytree(DB, root / "consumequeue")
    for p in [root / "consumequeue", *(root / "consumequeue").iterdir()]:
        p.chmod(p.stat().st_mode | stat.S_IWUSR)
    return root


def open_for_writing(root: Path):
    """The binding's own read-write open of a copy (never of the fixture): raw keys, both families."""
    import rocksdict

    return rocksdict.Rdict(str(root / "consumequeue"), options=rocksdict.Options(raw_mode=True),
                           column_families={R.OFFSET_CF: rocksdict.Options(raw_mode=True)})


# --------------------------------------------------------------------------------------------------
# As RocketMQ read it

def test_every_unit_and_bound_as_rocketmq_read_them(manifest):
    read = read_everything(STORE)
    queues = manifest["readBack"]["consumeQueues"]
    assert len(queues) == 27
    # the queues with a key or an offset row: the 12 with units (15 SCHEDULE_TOPIC_XXXX queues were only asked)
    assert read["queues"] == sorted((q["topic"], q["queueId"]) for q in queues if q["entries"])
    with R.RocksDBQueues(STORE) as q:
        for want in queues:
            key = (want["topic"], want["queueId"])
            units = q.units(*key)
            assert units.rows() == want["entries"], key
            assert [R.unit_value(*v).hex() for v in zip(units.physical_offset.tolist(), units.size.tolist(),
                                                         units.tags_code.tolist(),
                                                         units.store_timestamp.tolist())] == want["rawValuesHex"]
            b = q.bounds(*key)
            assert (b.min_offset, b.max_offset) == (want["min"], want["max"]), key
            assert (b.first_unit, b.last_unit) == ((0, want["max"] - 1) if want["entries"] else (None, None))
            assert b.min_row is None  # RocketMQ writes min rows only once asked: the fixture predates the asking
        table = manifest["readBack"]["rocksdbOffsetTable"]
        assert q.checkpoint() == table["maxPhyOffsetCheckpoint"] == 497836
        for row in table["perQueue"]:  # getMaxCqOffset / getMaxPhyOffset (null: no max row)
            max_row = q.offset_rows(row["topic"], row["queueId"]).get(R.MAX)
            assert (max_row.queue_offset if max_row else -1) == row["getMaxCqOffset"]
            assert (max_row.physical_offset if max_row else None) == row["getMaxPhyOffset"]
    assert read["problems"] == []


def test_every_raw_row_decodes_as_rocksdbjni_listed_it(manifest):
    """The manifest's rocksdbRaw (rocksdbjni alone, no RocketMQ class): each key and value through the decoders,
    the reader's units and rows the same ones."""
    raw = manifest["rocksdbRaw"]
    assert raw["columnFamilies"] == [R.DEFAULT_CF, R.OFFSET_CF]
    units, rows = {}, {}
    for kv in raw["keyValues"][R.DEFAULT_CF]:
        key, value = bytes.fromhex(kv["keyHex"]), bytes.fromhex(kv["valueHex"])
        k = R.decode_unit_key(key)
        R.check_unit_value(key, value)
        assert R.unit_key(k.topic, k.queue_id, k.queue_offset) == key
        units.setdefault((k.topic, k.queue_id), []).append([k.queue_offset, *R.UNIT_VALUE.unpack(value)[:3]])
    for kv in raw["keyValues"][R.OFFSET_CF]:
        key, value = bytes.fromhex(kv["keyHex"]), bytes.fromhex(kv["valueHex"])
        k = R.decode_offset_key(key)
        assert R.offset_key(k.topic, k.queue_id, k.marker) == key
        rows[(k.topic, k.queue_id, k.marker)] = R.decode_offset_value(k, key, value)
    assert sum(map(len, units.values())) == 302 and len(rows) == 13
    assert rows.pop((R.CHECKPOINT_TOPIC, 0, R.MAX)) == 497836
    with R.RocksDBQueues(STORE) as q:
        assert {k: q.units(*k).rows() for k in units} == units
        assert {(t, i, m): r for (t, i) in q.queues() for m, r in q.offset_rows(t, i).items()} == rows
    long_topic = [k for k in units if len(k[0]) == 150]  # the V2 retry topic sorts last: the length comes first
    assert long_topic and max(units, key=lambda k: R.queue_prefix(*k)) == long_topic[0]


def test_every_unit_points_at_its_record_in_the_commitlog(messages):
    by_offset = {m.physical_offset: m for m in messages}
    expected = R.expected_units(messages)
    assert len(expected) == 302
    with R.RocksDBQueues(STORE) as q:
        for topic, qid in q.queues():
            u = q.units(topic, qid)
            for qo, phys, size in zip(u.queue_offset.tolist(), u.physical_offset.tolist(), u.size.tolist()):
                m = by_offset[phys]
                assert (m.topic, m.queue_id, m.queue_offset, m.store_size) == (topic, qid, qo, size)
        r = R.reconcile(q, expected)
    assert r.missing == [] and r.mismatched == []


def test_min_offset_follows_the_brokers_search(tmp_path):
    """getMinOffsetInQueue with the CommitLog's first segment dropped: the first unit at or after the new min
    physical offset (binarySearchInCQ), max + 1 when the whole queue lies below it, a min row when it is still
    valid, and 0 for a queue without a max row."""
    root = store_copy(tmp_path)
    db = open_for_writing(root)
    db.get_column_family(R.OFFSET_CF)[R.offset_key("TopicB", 1, R.MIN)] = R.OFFSET_VALUE.pack(300000, 30)
    db.close()
    with R.RocksDBQueues(root) as q:
        u = q.units("TopicA", 0)
        m = 262144
        first = int(u.queue_offset[(u.physical_offset >= m).argmax()])
        assert 0 < first < 25 and q.bounds("TopicA", 0, m).min_offset == first
        assert q.bounds("TopicA", 0, int(u.physical_offset[first])).min_offset == first  # an exact hit
        assert q.bounds("TopicA", 0, 10**9).min_offset == 26  # every unit below: max + 1
        b = q.bounds("TopicB", 1, m)
        assert b.min_row == R.OffsetRow(300000, 30) and b.min_offset == 30  # the min row is still valid
        assert q.bounds("TopicB", 1, 300001).min_offset != 30  # ... and not once the log starts past it
        assert q.bounds("NoSuchTopic", 3, m) == R.QueueBounds("NoSuchTopic", 3, None, None, 0, 0, None, None)


# --------------------------------------------------------------------------------------------------
# Never written

def test_reading_writes_nothing_and_leaves_no_scratch_folder(tmp_path, manifest, monkeypatch):
    before = folder_state(DB)
    shadows = set(Path(tempfile.gettempdir()).glob("rocketmq-forensics-rocksdb-*"))
    removed = {}  # scratch folder -> what it held when it was removed
    rmtree = R.shutil.rmtree
    monkeypatch.setattr(R.shutil, "rmtree",
                        lambda p, **kw: (removed.setdefault(p, set(os.listdir(p))), rmtree(p, **kw)))
    q = R.RocksDBQueues(STORE)  # not closed: a Spark worker is killed with its databases open
    [(shadow, held)] = removed.items()
    assert not Path(shadow).exists() and "CURRENT" in held and not (held & {"LOCK", "LOG"})
    assert set(Path(tempfile.gettempdir()).glob("rocketmq-forensics-rocksdb-*")) <= shadows  # none left behind
    q.queues(), q.scan_problems(), q.bounds("TopicA", 0), q.units("TopicC", 0)  # the table files are open already
    assert len(q.units("TopicA", 0).physical_offset) > 0
    q.close()
    read_everything(STORE)
    assert folder_state(DB) == before
    assert {f["path"]: f["sha256"] for f in manifest["files"] if f["path"].startswith("store/consumequeue/")} == \
        {f"store/consumequeue/{n}": s[3] for n, s in before.items() if n != "."}


def test_a_copy_without_write_bits_reads_the_same(tmp_path):
    root = store_copy(tmp_path)
    for p in (root / "consumequeue").iterdir():
        p.chmod(0o444)
    (root / "consumequeue").chmod(0o555)
    try:
        before = folder_state(root / "consumequeue")
        assert read_everything(root) == read_everything(STORE)
        assert folder_state(root / "consumequeue") == before
    finally:
        (root / "consumequeue").chmod(0o755)


# --------------------------------------------------------------------------------------------------
# The write-ahead log, a deleted key, malformed rows

def test_rows_only_in_the_write_ahead_log_are_read(tmp_path, messages):
    """RocketMQ 5.3.3 writes with the WAL off (its WAL stays empty), but a database whose rows are still only in
    the WAL -- copied while the writer had them in memory -- reads with them."""
    root = store_copy(tmp_path)
    db = open_for_writing(root)
    db[R.unit_key("TopicC", 0, 70)] = R.unit_value(497836, 600, 7, 1796160999999)
    wal = [p for p in (root / "consumequeue").glob("*.log") if p.stat().st_size]
    assert wal  # the put is in a write-ahead log, and in no table file yet
    live = root.parent / "live"
    shutil.copytree(root, live)  # the files as a crash would leave them
    del db
    with R.RocksDBQueues(live) as q:
        u = q.units("TopicC", 0)
        assert len(u) == 71 and u.rows()[-1] == [70, 497836, 600, 7]
        assert R.missing_units(q, R.expected_units(messages)) == []


def test_a_deleted_key_is_a_missing_unit(tmp_path, messages):
    root = store_copy(tmp_path)
    db = open_for_writing(root)
    del db[R.unit_key("TopicA", 1, 5)]
    db.close()
    expected = R.expected_units(messages)
    with R.RocksDBQueues(root) as q:
        [missing] = R.missing_units(q, expected)
        assert (missing.topic, missing.queue_id, missing.queue_offset) == ("TopicA", 1, 5)
        assert q.bounds("TopicA", 1).max_offset == 28 and len(q.units("TopicA", 1)) == 27
        assert R.reconcile(q, expected).mismatched == []


def test_malformed_rows_are_positioned_errors_and_left_out(tmp_path, messages):
    root = store_copy(tmp_path)
    bad_rows = {
        R.unit_key("TopicB", 0, 3)[:-1]: (ErrorKind.BAD_LENGTH, 0, "key.topic_length"),  # one byte short
        R.queue_prefix("TopicB", 0)[:-1] + b"\x09" + bytes(8): (ErrorKind.BAD_MAGIC, 16, "key.separator"),
        R.unit_key("TopicB", 0, -1): (ErrorKind.OUT_OF_RANGE, 17, "key.queue_offset"),
        b"\x00\x00\x00\x02\x01\xff\xfe\x01" + bytes(4) + b"\x01" + bytes(8): (ErrorKind.BAD_UTF8, 5, "key.topic"),
        b"\x00\x01": (ErrorKind.TRUNCATED, 2, "key"),
    }
    db = open_for_writing(root)
    for key in bad_rows:
        db[key] = R.unit_value(1, 2, 3, 4)
    db[R.unit_key("TopicB", 0, 7)] = b"\x00" * 20  # a 20-byte (flat-queue) value
    offsets = db.get_column_family(R.OFFSET_CF)
    offsets[R.offset_key("TopicB", 0, "mid")] = R.OFFSET_VALUE.pack(1, 1)
    offsets[R.offset_key("TopicC", 0, R.MAX)] = b"\x00" * 8
    db.close()
    with R.RocksDBQueues(root) as q:
        assert q.queues() == read_everything(STORE)["queues"]
        rows = q.units("TopicB", 0).rows()
        assert len(rows) == 42 and 7 not in [r[0] for r in rows] and rows[0][0] == 0
        assert q.offset_rows("TopicC", 0) == {}  # its max row is 8 bytes: left out, the units remain
        problems = {(e.column_family, e.key): e for e in q.scan_problems()}
    for key, (kind, position, field) in bad_rows.items():
        e = problems.pop((R.DEFAULT_CF, key))
        assert (e.kind, e.position, e.field) == (kind, position, field), key.hex()
        assert isinstance(e, StoreFormatError) and "consumequeue column family 'default' key 0x" in str(e)
    value = problems.pop((R.DEFAULT_CF, R.unit_key("TopicB", 0, 7)))
    assert (value.kind, value.field, value.position) == (ErrorKind.BAD_LENGTH, "value", 20)
    marker = problems.pop((R.OFFSET_CF, R.offset_key("TopicB", 0, "mid")))
    assert (marker.kind, marker.field) == (ErrorKind.BAD_MAGIC, "key.marker")
    short = problems.pop((R.OFFSET_CF, R.offset_key("TopicC", 0, R.MAX)))
    assert (short.kind, short.field) == (ErrorKind.BAD_LENGTH, "value")
    assert problems == {}


# --------------------------------------------------------------------------------------------------
# Detection and what cannot be read

def test_detection_from_the_files_alone(tmp_path):
    assert R.is_rocksdb_queue_folder(DB)
    assert R.is_rocksdb_queue_folder(fs.Location(pafs.SubTreeFileSystem(str(STORE), pafs.LocalFileSystem()),
                                                 "consumequeue"))  # a remote file system too
    flat = FIXTURES / "basic" / "store" / "consumequeue"
    assert flat.is_dir() and not R.is_rocksdb_queue_folder(flat)
    assert not R.is_rocksdb_queue_folder(STORE / "commitlog") and not R.is_rocksdb_queue_folder(tmp_path / "none")
    odd = tmp_path / "odd"
    odd.mkdir()
    (odd / "CURRENT").write_text("not a manifest name\n")
    (odd / "000001.sst").write_bytes(b"")
    assert not R.is_rocksdb_queue_folder(odd)


def test_what_cannot_be_read_is_unreadable_with_the_reason(tmp_path, monkeypatch):
    shadows = set(Path(tempfile.gettempdir()).glob("rocketmq-forensics-rocksdb-*"))
    remote = fs.Location(pafs.SubTreeFileSystem(str(STORE.parent), pafs.LocalFileSystem()), "store")
    with pytest.raises(R.RocksDBQueueUnreadable, match="local disk"):
        R.RocksDBQueues(remote)
    with pytest.raises(R.RocksDBQueueUnreadable, match="not a RocksDB database"):
        R.RocksDBQueues(FIXTURES / "basic" / "store")

    broken = store_copy(tmp_path / "a")
    manifest_file = next((broken / "consumequeue").glob("MANIFEST-*"))
    manifest_file.write_bytes(b"\xff" * manifest_file.stat().st_size)
    with pytest.raises(R.RocksDBQueueUnreadable, match="RocksDB will not open it read-only") as e:
        R.RocksDBQueues(broken)
    assert e.value.kind == ErrorKind.UNREADABLE and e.value.file == str(broken / "consumequeue")

    fifo = store_copy(tmp_path / "b")
    (fifo / "consumequeue" / "000009.sst").unlink()
    os.mkfifo(fifo / "consumequeue" / "000009.sst")  # would block a reader that opened it
    with pytest.raises(R.RocksDBQueueUnreadable, match="a FIFO, not a regular file"):
        R.RocksDBQueues(fifo)

    gone = store_copy(tmp_path / "c")
    (gone / "consumequeue" / "000009.sst").unlink()
    with pytest.raises(R.RocksDBQueueUnreadable, match="000009.sst"):
        R.RocksDBQueues(gone)

    monkeypatch.setattr(R, "_binding", lambda: (None, ImportError("No module named 'rocksdict'")))
    with pytest.raises(R.RocksDBQueueUnreadable, match=r"no RocksDB binding could be loaded .*pip install rocksdict"):
        R.RocksDBQueues(STORE)
    assert set(Path(tempfile.gettempdir()).glob("rocketmq-forensics-rocksdb-*")) <= shadows  # none left behind


# --------------------------------------------------------------------------------------------------
# The audit and the source, through the queue model's rocksdb backend (store_format/queues.py)

def whole_store_copy(tmp_path: Path) -> Path:
    """A writable copy of the whole fixture store (commitlog and database) to seed."""
    root = tmp_path / "store"
    shutil.copytree(STORE, root)
    for p in [root, *root.rglob("*")]:
        p.chmod(p.stat().st_mode | stat.S_IWUSR)
    return root


def test_the_audit_reads_the_database_as_rocketmq_does(spark, tmp_path, manifest):
    from .test_v5_audit import audit

    before = folder_state(DB)
    found = audit(spark, [STORE], tmp_path / "out")
    assert folder_state(DB) == before  # nothing written
    assert found["exit"] == 0
    assert [f for f in found["findings"] if f["severity"] != "info"] == []  # no false finding
    after_load = manifest["readBack"]["afterLoad"]
    recovery = found["summary"]["brokers"][0]["recovery"]
    # RocketMQ's recovery takes the checkpoint row as the queues' max physical offset
    assert recovery["max_cq_physical_offset"] == after_load["maxPhyOffsetInConsumeQueue"] == 497836
    served = {(q["topic"], q["queueId"]): (q["min"], q["max"]) for q in manifest["readBack"]["consumeQueues"]
              if q["entries"]}
    assert {(r["topic"], r["queue_id"]): (r["min_offset"], r["max_offset"])
            for r in found["tables"]["queues"]} == served
    assert sum(r["entries"] for r in found["tables"]["queues"]) == 302
    # the delayed messages pending in the database's SCHEDULE_TOPIC_XXXX queues (no delayOffset.json: all of them)
    assert {(r["queue_id"], r["pending"]) for r in found["tables"]["delays"]} == {
        (q["queueId"], len(q["entries"])) for q in manifest["readBack"]["consumeQueues"]
        if q["topic"] == "SCHEDULE_TOPIC_XXXX" and q["entries"]}


def test_a_deleted_key_and_a_wrong_unit_are_found_by_the_consume_queue_checks(spark, tmp_path):
    from .test_v5_audit import audit

    root = whole_store_copy(tmp_path)
    with R.RocksDBQueues(root) as q:
        size_of = q.unit("TopicB", 0, 3)
    db = open_for_writing(root)
    try:
        del db[R.unit_key("TopicA", 1, 5)]
        db[R.unit_key("TopicB", 0, 3)] = R.unit_value(size_of[0], size_of[1] + 1, size_of[2], size_of[3])
        db.flush()
    finally:
        db.close()
    (root / "config").mkdir()
    (root / "config" / "consumerOffset.json").write_text(json.dumps({"offsetTable": {"TopicA@cg": {"1": 3}}}))
    found = audit(spark, [root], tmp_path / "out")
    # the lag reads the database: the max offset the broker serves, the store time of the first unconsumed unit's
    [lag] = found["tables"]["lag"]
    with R.RocksDBQueues(STORE) as q:
        third, max_offset = q.units("TopicA", 1, 3, 4), q.bounds("TopicA", 1).max_offset
    assert (lag["topic"], lag["queue_id"], lag["max_offset"], lag["lag"]) == ("TopicA", 1, max_offset, max_offset - 3)
    assert lag["first_unconsumed_store_time"] == int(third.store_timestamp[0])
    missing = [f for f in found["findings"] if f["check"] == "consumequeue.missing_entry"]
    assert [(f["topic"], f["queue_id"], f["queue_offset"]) for f in missing] == [("TopicA", 1, 5)]
    wrong = [f for f in found["findings"] if f["check"] == "consumequeue.size_mismatch"]
    assert [(f["topic"], f["queue_id"], f["queue_offset"], f["physical_offset"]) for f in wrong] == [
        ("TopicB", 0, 3, size_of[0])]
    assert {f["check"] for f in found["findings"] if f["severity"] != "info"} == {
        "consumequeue.missing_entry", "consumequeue.size_mismatch"}


def test_the_source_gives_the_databases_units_with_backend_rocksdb(spark, manifest):
    rows = spark.read.format("rocketmq-consumequeue").load(str(STORE)).collect()
    assert {r["backend"] for r in rows} == {"rocksdb"} and {r["kind"] for r in rows} == {"entry"}
    got = sorted((r["topic"], r["queue_id"], r["queue_offset"], r["physical_offset"], r["size"], r["tags_code"])
                 for r in rows)
    want = sorted((q["topic"], q["queueId"], *e) for q in manifest["readBack"]["consumeQueues"] for e in q["entries"])
    assert got == want and len(got) == 302
    assert {r["length"] for r in rows} == {28}


def test_a_database_that_will_not_open_is_one_finding_and_the_rest_of_the_audit_runs(spark, tmp_path):
    from .test_v5_audit import audit

    root = whole_store_copy(tmp_path)
    (root / "consumequeue" / "CURRENT").write_text("MANIFEST-000099\n")  # names a MANIFEST that is not there
    found = audit(spark, [root], tmp_path / "out")
    [f] = [f for f in found["findings"] if f["check"] == "consumequeue.backend_unreadable"]
    assert f["file"] == "consumequeue" and "RocksDB will not open it" in dict(f["details"])["reason"]
    assert "MANIFEST-000099" in dict(f["details"])["reason"]
    assert found["summary"]["brokers"][0]["recovery"]["predicted_max_physical_offset"] == 497836  # the rest ran
    assert found["tables"]["queues"] == []


def test_a_queue_the_files_and_the_database_both_hold_is_reconciled(spark, tmp_path):
    """A store migrating (flat files beside the database): TopicA/1 also as a 20-byte-unit file, a copy of the
    database's units but for one size; the broker reads the file, so its unit is also a size mismatch."""
    import struct

    from store_format import queues as Q

    from .test_v5_audit import audit

    root = whole_store_copy(tmp_path)
    with R.RocksDBQueues(root) as q:
        units = q.units("TopicA", 1)
    sizes = units.size.copy()
    sizes[7] += 1
    data = b"".join(struct.pack(">qiq", p, s, t) for p, s, t in zip(units.physical_offset.tolist(), sizes.tolist(),
                                                                     units.tags_code.tolist()))
    folder = root / "consumequeue" / "TopicA" / "1"
    folder.mkdir(parents=True)
    (folder / ("0" * 20)).write_bytes(data + bytes(2000 - len(data)))

    [(first, other)] = Q.shared_queues(Q.group_queues(Q.list_queue_files(root)))
    assert (first.backend, other.backend, first.key) == (Q.FILE, Q.ROCKSDB, ("TopicA", 1))
    d = Q.disagreements(first, other, window=4)  # windows smaller than the queue
    assert (d["count"], d["queue_offset"], d["compared"]) == (1, 7, (0, len(units)))
    assert d["units"]["rocksdb"][1] + 1 == d["units"]["file"][1]

    found = audit(spark, [root], tmp_path / "out")
    [f] = [f for f in found["findings"] if f["check"] == "consumequeue.backends_disagree"]
    assert (f["topic"], f["queue_id"], f["queue_offset"]) == ("TopicA", 1, 7)
    wrong = [f for f in found["findings"] if f["check"] == "consumequeue.size_mismatch"]
    assert [(f["topic"], f["queue_id"], f["queue_offset"]) for f in wrong] == [("TopicA", 1, 7)]
    assert {f["check"] for f in found["findings"] if f["severity"] != "info"} == {
        "consumequeue.backends_disagree", "consumequeue.size_mismatch"}


def test_query_evidence_reads_the_databases_units():
    from jobs import query_evidence
    from store_format.javahash import tags_code
    from store_format.store import Store

    store = Store(STORE)
    with R.RocksDBQueues(STORE) as q:
        units = q.units("TopicA", 1)
    phys = int(units.physical_offset[4])
    [u] = query_evidence.units_pointing_at(store, [phys])[phys]
    assert (u.topic, u.queue_id, u.queue_offset, u.size) == ("TopicA", 1, 4, int(units.size[4]))
    tagged = query_evidence.units_with_tag(store, "TopicA", "TagA")
    assert tagged and all(t.tags_code == tags_code("TagA") for t in tagged)
