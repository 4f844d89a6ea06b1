"""The compaction store of cleanup.policy=COMPACTION topics (issue 39; docs/store-format-compaction.md).

No RocketMQ-written fixture holds a compaction log (the 5.3.3 fixtures have only an empty position-checkpoint), so
the stores here are the writer's, checked against what the facts say compaction keeps (computed here from the
records sent, not through the writer's rule): the reader reads the writer's units and records back, the audit finds
nothing on them, and each seeded disagreement is found by its own check and by nothing else new."""
from __future__ import annotations

import shutil
import struct
from pathlib import Path
from unittest import mock

import pytest

from jobs import audit
from store_format import compaction as C
from store_format import layout as L
from store_format.commitlog import list_segments, walk_buffer
from store_format.fs import ReadOnlyMap
from store_format.queues import COMPACTION, group_queues, list_queue_files
from store_format.write import compaction as WC
from store_format.write.broker import Broker, ManualClock, Producer
from store_format.write.writer import StoreWriter, WriterConfig

from .test_audit import audit_args, rows
from .test_v5_fixtures import store5

START = 1_795_786_365_000
# (queue id, body, KEYS): updates of k0..k2 on queue 0 with k1 deleted by an empty body, records without KEYS, and a
# KEYS string with a space (one key: compaction keys the whole string); enough values to roll the small files
SENDS = [(0, f"v{i}".encode(), f"k{i % 3}") for i in range(9)] + [(0, b"", "k1"), (0, b"nokey", None)] + \
    [(0, f"w{i}".encode(), f"d{i}") for i in range(5)] + [(1, b"a", "a b"), (1, b"b", "a b"), (1, b"c", None)]


def _write(root: Path, keep=None) -> Path:
    cfg = WriterConfig(mappedFileSizeCommitLog=1 << 16, mappedFileSizeConsumeQueue=2000, maxHashSlotNum=64, maxIndexNum=200,
                       compactionCqMappedFileSize=46 * 4, compactionMappedFileSize=10)
    with mock.patch.object(WC, "retained", keep or C.retained):
        w = StoreWriter(root, cfg, clock=ManualClock(START))
        w.register_topic("Kv", 2, attributes={L.TOPIC_ATTRIBUTE_CLEANUP_POLICY: L.CLEANUP_POLICY_COMPACTION})
        broker, p = Broker(w), Producer(born_host="10.1.2.3:50000")
        for qid, body, keys in SENDS:
            broker.send(p, "Kv", body, queue_id=qid, keys=keys)
        broker.send(p, "Plain", b"x", queue_id=0, keys="k0")  # a DELETE topic: no compaction store
        w.close()
    return root


def _commitlog(root: Path) -> list:
    out = []
    for seg in list_segments(root / "commitlog"):
        with ReadOnlyMap(seg.path) as m:
            out += [f.message for f in walk_buffer(m.buf, seg.name, seg.base_offset) if f.kind == "message"]
    return out


def _expected(root: Path) -> dict:
    """{(topic, queue id): the CommitLog records compaction keeps}, from the facts: per KEYS string the newest
    record, dropped when its body is empty; records without KEYS never."""
    out: dict = {}
    for m in _commitlog(root):
        keys = m.properties.get(L.PROPERTY_KEYS)
        if m.topic == "Kv" and keys:
            out.setdefault((m.topic, m.queue_id), {})[keys] = m
    return {q: sorted((m for m in newest.values() if m.body), key=lambda m: m.queue_offset)
            for q, newest in out.items()}


@pytest.fixture(scope="module")
def stores(spark, tmp_path_factory):
    base = tmp_path_factory.mktemp("compaction")
    clean = _write(base / "stores" / "clean")

    def keep_older_k0(records, checkpoint):  # a compaction that kept k0's previous value instead of its newest
        kept = set(C.retained(records, checkpoint))
        k0 = sorted(qo for qo, keys, _ in records if keys == "k0")
        return sorted((kept - {k0[-1]}) | {k0[-2]}) if k0 else sorted(kept)
    dropped = _write(base / "stores" / "dropped", keep_older_k0)
    wrong = base / "stores" / "wrong-unit"
    shutil.copytree(clean, wrong)
    cq = wrong / "compaction" / "compactionCq" / "Kv" / "0" / f"{0:020d}"
    data = bytearray(cq.read_bytes())
    data[0:8] = data[46:54]  # unit 0 points at unit 1's record
    cq.write_bytes(bytes(data))
    (wrong / "compaction" / "compactionLog" / "Kv" / "0" / "compacting").mkdir()  # an interrupted compaction's
    (wrong / "compaction" / "compactionLog" / "Kv" / "0" / "compacting" / f"{0:020d}").write_bytes(b"\0" * 920)
    corrupt = base / "stores" / "corrupt-log"
    shutil.copytree(clean, corrupt)
    log = corrupt / "compaction" / "compactionLog" / "Kv" / "0" / f"{0:020d}"
    data = bytearray(log.read_bytes())
    data[178 + 88] ^= 0x01  # the first byte of the second record's body (a V1 record's body starts at 88): its CRC fails
    log.write_bytes(bytes(data))
    out = base / "out"
    audit.run(spark, audit_args([base / "stores"], out))
    return clean, dropped, rows(out, "findings")


def test_the_writer_writes_the_compacted_queue_and_the_reader_reads_it_unit_for_unit(tmp_path):
    root = _write(tmp_path / "s")
    want = _expected(root)
    queues = {q.key: q for q in group_queues(list_queue_files(root)) if q.backend is COMPACTION}
    assert set(queues) == set(want) == {("Kv", 0), ("Kv", 1)} and all(q.kind == "compaction" for q in queues.values())
    assert C.read_position_checkpoint(root).offsets == {("Kv", 0): 15, ("Kv", 1): 1}  # the last record with KEYS
    for key, q in queues.items():
        u = q.units()
        records = {fr.physical_offset: fr for fr in C.walk_log(C.log_files(root, *key)) if fr.kind == "message"}
        assert u.msg_base_offset.tolist() == [m.queue_offset for m in want[key]]
        assert u.batch_size.tolist() == [1] * len(want[key]) and u.valid.all()
        for i, m in enumerate(want[key]):
            fr = records[int(u.physical_offset[i])]  # the unit's phyOffset is its record's offset in the log
            assert fr.physical_offset == fr.message.physical_offset  # PHYSICALOFFSET rewritten to it
            assert (fr.message.queue_offset, fr.message.body, fr.message.properties_raw, fr.size) == \
                (m.queue_offset, m.body, m.properties_raw, m.store_size)
            assert (int(u.size[i]), int(u.tags_code[i]), int(u.store_timestamp[i])) == \
                (m.store_size, m.tags_code, m.store_timestamp)
        # each sparse-queue file is named after its log file; the small files rolled (an end marker each)
        assert [f.name for f in q.files] == [f.name for f in C.log_files(root, *key)] and not any(
            f.problems for f in q.files)
    assert len(queues[("Kv", 0)].files) == 3  # 7 values kept, 3 a file: the queue's file holds 4 units


def test_a_checkpoint_as_the_broker_writes_it():
    fixture = store5("v5-default") / "compaction" / "position-checkpoint"
    assert C.checkpoint_text({}) == fixture.read_text()  # what 5.3.3 wrote at start
    assert C.read_position_checkpoint(fixture.parent.parent).offsets == {}
    assert C.parse_position_checkpoint(C.checkpoint_text({("a_b", 3): 7})) == {("a_b", 3): 7}
    with pytest.raises(C.CompactionStoreError, match="queueOffsetMap"):
        C.parse_position_checkpoint('{"queueOffsetMap": {"nounderscore": 1}}')


@pytest.mark.spark
def test_the_audit_finds_nothing_on_a_written_store(spark, stores):
    _, _, findings = stores
    assert [f for f in findings if f["broker"] == "clean" and f["severity"] == "error"] == []
    assert [f["check"] for f in findings if f["broker"] == "clean" and f["check"].startswith("compaction.")] == []


@pytest.mark.spark
def test_a_dropped_newest_value_is_found_naming_the_key_and_its_record(spark, stores):
    clean, _, findings = stores
    newest = max((m for m in _commitlog(clean) if m.topic == "Kv" and m.properties.get(L.PROPERTY_KEYS) == "k0"),
                 key=lambda m: m.queue_offset)
    new = [f for f in findings if f["broker"] == "dropped"]
    assert [f["check"] for f in new if f["severity"] in ("error", "warning")] == ["compaction.newest_value_missing"]
    [f] = new
    assert (f["topic"], f["queue_id"], f["queue_offset"], f["physical_offset"]) == \
        ("Kv", 0, newest.queue_offset, newest.physical_offset)
    assert "key k0" in f["message"] and "queue offset(s) 3 for it" in f["message"]


@pytest.mark.spark
def test_a_sparse_unit_pointing_at_another_record_and_a_generation_left_are_found(spark, stores):
    _, _, findings = stores
    new = [f for f in findings if f["broker"] == "wrong-unit" and f["severity"] in ("error", "warning")]
    assert {(f["check"], f["queue_offset"], f["file_position"], f["severity"]) for f in new} == \
        {("compaction.unit_points_wrong", 6, 0, "error"), ("compaction.generation_left", None, None, "warning")}
    [wrong] = [f for f in new if f["check"] == "compaction.unit_points_wrong"]
    assert "its record is at queue offset 8" in wrong["message"]  # the generation folder is not read as the queue


@pytest.mark.spark
def test_a_corrupt_log_record_is_found_where_the_walk_stops(spark, stores):
    """The units behind the damage are not reported again; the values behind it are missing for consumers."""
    _, _, findings = stores
    new = [f for f in findings if f["broker"] == "corrupt-log" and f["severity"] in ("error", "warning")]
    [bad] = [f for f in new if f["check"] == "compaction.corrupt_record"]
    assert (bad["file"], bad["file_position"], bad["details"]["problem"]) == (f"{0:020d}", 178, "BAD_CRC")
    assert sorted((f["check"], f["queue_offset"]) for f in new if f is not bad) == \
        [("compaction.newest_value_missing", 8), ("compaction.newest_value_missing", 11)]


def test_the_consume_queue_source_gives_the_sparse_units(tmp_path):
    """The rows of ``rocketmq-consumequeue`` (its tasks' reader, without Spark): backend ``compaction``, queue offset
    = msgBaseOffset, batchSize 1."""
    from datasources.consumequeue import file_batches

    root = _write(tmp_path / "s")
    got = [r for f in list_queue_files(root) if f.backend is COMPACTION
           for b in file_batches("b", f) for r in b.to_pylist()]
    want = _expected(root)
    assert sorted((r["queue_id"], r["queue_offset"], r["msg_base_offset"], r["batch_size"], r["backend"])
                  for r in got if r["kind"] == "entry") == \
        [(m.queue_id, m.queue_offset, m.queue_offset, 1, "compaction") for q in sorted(want) for m in want[q]]
    one = root / "compaction" / "compactionCq" / "Kv" / "1" / f"{0:020d}"  # a path naming one file: its backend's
    assert [(f.backend, f.topic, f.queue_id) for f in list_queue_files(one)] == [(COMPACTION, "Kv", 1)]
    ends = [r for r in got if r["kind"] == "end_marker"]  # where each of the first two log files ended
    assert {r["kind"] for r in got} == {"entry", "end_marker", "zero_tail"} and len(ends) == 2 and \
        {r["file_position"] for r in ends} == {3 * 46} and ends[0]["reason"] is None



# ---- the broker's load of the compaction store (CompactionLog.TopicPartitionLog.init), and its checkpoint -----------

def _unit(root: Path, qid: int, name: int, index: int, at: int, fmt: str, value) -> None:
    """Patch field ``at`` of sparse unit ``index`` of the queue's file ``name``."""
    with open(root / "compaction" / "compactionCq" / "Kv" / str(qid) / f"{name:020d}", "r+b") as f:
        f.seek(index * 46 + at)
        f.write(struct.pack(fmt, value))


def _sparse(root: Path, qid: int) -> list:
    """The sparse-queue files of Kv/``qid``."""
    [q] = [q for q in group_queues(list_queue_files(root)) if q.backend is COMPACTION and q.key == ("Kv", qid)]
    return q.files


def _family_rows(root: Path) -> dict:
    """{check: finding rows} of the compaction family's driver step on ``root`` (the scan's records made here from
    the CommitLog), without Spark."""
    import pyarrow as pa

    from jobs.audit.checks import compaction as family
    from store_format.store import Store

    ms = [m for m in _commitlog(root) if m.topic == "Kv"]
    records = pa.table({"broker": ["b"] * len(ms), "topic": [m.topic for m in ms],
                        "queue_id": [m.queue_id for m in ms], "queue_offset": [m.queue_offset for m in ms],
                        "physical_offset": [m.physical_offset for m in ms], "store_size": [m.store_size for m in ms],
                        "body_crc": [m.body_crc for m in ms],
                        "keys": [m.properties.get(L.PROPERTY_KEYS) for m in ms],
                        "has_body": [bool(m.body) for m in ms]}, schema=family.RECORDS)
    out: dict = {}
    for t in family._broker("b", Store(root), records):
        for r in t.to_pylist():
            out.setdefault(r["check"], []).append(dict(r, details=dict(r["details"] or ())))
    return out


def test_the_load_keeps_a_written_store_whole(tmp_path):
    root = _write(tmp_path / "s")
    for qid, end, log_end in ((0, 1840 + 46, 1840 + 178), (1, 46, 178)):
        assert C.predict_log_recovery(_sparse(root, qid), C.log_files(root, "Kv", qid)) == C.LogRecovery(end, log_end)
    assert {c: rows for c, rows in _family_rows(root).items() if c.startswith("compaction.")} == {}


def test_a_failing_unit_hides_the_units_after_it_in_its_file(tmp_path):
    """Unit 1 of Kv/0's middle sparse file zeroed (queue offset 13): SparseConsumeQueue.recover ends that file
    there, so unit 2 (queue offset 14, log offset 1276) is never read again; the log is cut nowhere."""
    root = _write(tmp_path / "s")
    _unit(root, 0, 920, 1, 0, "46s", bytes(46))
    rec = C.predict_log_recovery(_sparse(root, 0), C.log_files(root, "Kv", 0))
    assert rec == C.LogRecovery(1840 + 46, 1840 + 178, ((f"{920:020d}", 92, 14, 1276),))
    [row] = _family_rows(root)["compaction.recovery_drops"]
    assert (row["queue_offset"], row["file"], row["file_position"], row["details"]["queue_offsets"]) == \
        (14, f"{920:020d}", 92, "[14]")


def test_the_log_is_cut_where_the_last_unit_kept_ends(tmp_path):
    """Kv/0 as before its last roll (the last log and sparse files gone) with the newest unit failing (batchSize 0):
    the last sparse file keeps two units, getMaxPhyOffsetInLog is the second's end (1276) and the log's record
    there (queue offset 14) is truncated."""
    root = _write(tmp_path / "s")
    for part in ("compactionCq", "compactionLog"):
        (root / "compaction" / part / "Kv" / "0" / f"{1840:020d}").unlink()
    _unit(root, 0, 920, 2, 36, ">h", 0)
    rec = C.predict_log_recovery(_sparse(root, 0), C.log_files(root, "Kv", 0))
    assert rec == C.LogRecovery(920 + 2 * 46, 1276, (), ((1276, 14),))
    [row] = _family_rows(root)["compaction.recovery_drops"]
    assert (row["queue_offset"], row["details"]["log_end"]) == (14, "1276") and "log offset 1276" in row["message"]


def test_a_checkpoint_ahead_of_the_commitlog_is_found(tmp_path):
    root = _write(tmp_path / "s")
    C.checkpoint_location(root).as_path().write_text(C.checkpoint_text({("Kv", 0): 100, ("Kv", 1): 1}))
    found = _family_rows(root)
    [row] = found["compaction.checkpoint_ahead"]
    assert (row["topic"], row["queue_id"], row["queue_offset"], row["details"]["commitlog_max_queue_offset"]) == \
        ("Kv", 0, 100, "15")
    assert "up to queue offset 100" in row["message"] and "end at queue offset 15" in row["message"]
