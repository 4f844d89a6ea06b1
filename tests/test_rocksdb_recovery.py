"""What RocketMQ 5.3.3's recovery does to a RocksDB consume queue (``storeType=defaultRocksDB``), predicted on copies
of the store RocketMQ wrote (fixture ``rocketmq-5.3.3/rocksdb-cq``; store-format-5x.md section 4.6): the checkpoint
row is the queues' max physical offset recovery takes; a checkpoint past the recovered end makes ``truncateDirty``
move each queue's ``max`` row back (keys stay; a queue wholly past the end keeps its row: the broker's own error);
a database with no row at all (a crash: its writes skip the WAL) is rebuilt by re-dispatching the CommitLog; and the
min offsets the broker serves use the CommitLog's real min offset.  The expectations are derived from the units
themselves, not from the model."""
from __future__ import annotations

import json

import pytest

from store_format import queues as Q
from store_format import rocksdbcq as R
from store_format.commitlog import list_segments, walk_segment
from store_format.recovery import QueueRebuild, UnservedUnits, predict_recovery
from store_format.store import Store

from .test_rocksdbcq import STORE, manifest, open_for_writing, whole_store_copy  # noqa: F401  (a fixture)

LAST = "00000000000000262144"  # the fixture's second and last segment
CHECKPOINT = 497836  # its checkpoint row, the end of its CommitLog


def emptied(root):
    """The database of a copy with every row of both families deleted: what a crash before any flush leaves."""
    db = open_for_writing(root)
    try:
        for family in (db, db.get_column_family(R.OFFSET_CF)):
            for key in list(family.keys()):
                del family[key]
        db.flush()
    finally:
        db.close()
    return root


def cut_last_segment(root) -> int:
    """Zero the last segment of a copy from the last message before TopicTx's only one (so that queue lies
    wholly past the cut); the cut's physical offset."""
    [seg] = [s for s in list_segments(root / "commitlog") if s.name == LAST]
    messages = [f for f in walk_segment(seg) if f.kind == "message"]
    tx = next(f for f in messages if f.message.topic == "TopicTx")
    at = max(f.file_position for f in messages if f.file_position < tx.file_position)
    with open(seg.path, "r+b") as f:
        f.seek(at)
        f.write(bytes(seg.length - at))
    return seg.base_offset + at


def units_of(store) -> dict:
    with R.RocksDBQueues(store) as db:
        return {k: list(zip(db.units(*k).queue_offset.tolist(), db.units(*k).physical_offset.tolist()))
                for k in db.queues() if len(db.units(*k))}


def test_a_clean_database_recovers_as_rocketmq_read_it_back(manifest):  # noqa: F811
    p = predict_recovery(Store(STORE))
    after = manifest["readBack"]["afterLoad"]
    assert (p.mode, p.will_start) == ("normal", True) and not manifest["abortFileExists"]
    assert p.max_physical_offset == after["commitLogMaxOffset"] == CHECKPOINT
    assert p.max_cq_physical_offset == after["maxPhyOffsetInConsumeQueue"]
    # 5.3.3's recoverNormally starts at the last segment whose base offset is <= the checkpoint (not the third-last)
    assert p.start_segment == LAST
    assert p.cq_truncation == {} and p.queue_rebuild is None and p.notes == []


def test_an_empty_database_is_rebuilt_from_the_first_segment(tmp_path):
    root = emptied(whole_store_copy(tmp_path))
    with R.RocksDBQueues(root) as db:
        assert db.is_empty() and db.checkpoint() is None
    p = predict_recovery(Store(root))
    # no abort: recoverNormally(0) walks from segment 0 and dispatches records past offset 0 only
    assert p.queue_rebuild == QueueRebuild("rocksdb", "normal", "0" * 20, 0, CHECKPOINT, 0, True)
    assert (p.max_physical_offset, p.max_cq_physical_offset, p.cq_truncation) == (CHECKPOINT, 0, {})
    (root / "abort").write_bytes(b"")
    p = predict_recovery(Store(root))
    # abort: isMappedFileMatchedRecover takes the segment whose first record's offset is <= 0: everything again
    assert (p.mode, p.start_segment, p.redispatch_from) == ("abnormal", "0" * 20, 0)
    assert p.queue_rebuild == QueueRebuild("rocksdb", "abnormal", "0" * 20, 0, CHECKPOINT, 0, False)
    assert p.queue_rebuild.bytes == CHECKPOINT
    (root / "commitlog" / ("0" * 20)).unlink()  # the first segment aged out: nothing to match, the first left
    p = predict_recovery(Store(root))
    assert p.queue_rebuild == QueueRebuild("rocksdb", "abnormal", LAST, 262144, CHECKPOINT, 262144, False)


def test_the_rebuilt_queues_max_offsets_are_the_recovery_models_own(tmp_path):
    """The max offset of each queue a rebuild re-dispatches (QueueRebuild.queue_ends, what the audit compares the
    committed offsets with) is its last re-dispatched record's queue offset + 1, the database's own max before it
    was emptied; a normal recovery skips the record at offset 0 (a queue holding only it is rebuilt empty, left
    out); with the first segment aged out, the queues restart from the records left."""
    full = {k: units[-1][0] + 1 for k, units in units_of(STORE).items()}
    root = emptied(whole_store_copy(tmp_path))
    (first, only), = [(k, len(units) == 1) for k, units in units_of(STORE).items() if units[0][1] == 0]
    normal = predict_recovery(Store(root)).queue_rebuild.queue_ends
    assert normal == ({k: e for k, e in full.items() if k != first} if only else full) and len(normal) >= 10
    (root / "abort").write_bytes(b"")
    assert predict_recovery(Store(root)).queue_rebuild.queue_ends == full
    (root / "commitlog" / ("0" * 20)).unlink()
    left = {k: units[-1][0] + 1 for k, units in units_of(STORE).items() if units[-1][1] >= 262144}
    assert predict_recovery(Store(root)).queue_rebuild.queue_ends == left


def test_a_checkpoint_past_the_cut_moves_each_queues_max_back(tmp_path):
    root = whole_store_copy(tmp_path)
    cut = cut_last_segment(root)
    p = predict_recovery(Store(root))
    assert (p.max_physical_offset, p.max_cq_physical_offset) == (cut, CHECKPOINT)
    want, wholly_past, hits = {}, [], {}
    for key, units in units_of(STORE).items():
        below = [o for o, phys in units if phys < cut]
        past = [o for o, phys in units if phys >= cut]
        hits.update({key: (o, units[-1][0]) for o, phys in units if phys == cut})
        if past and not below:
            wholly_past.append(key)
        elif past:
            want[key] = (below[-1] + 1, len(past), "max_row_corrected")
    # the queue holding the record at the cut: binarySearchInCQ(high 42, low 0) probes 21 (below: kept as the
    # answer), 32 and 26 (past), then 23, the record at the cut itself, and stops there: the max goes back to 21,
    # one short of the last unit below the cut (22), whose kept message the broker stops serving
    assert hits == {("TopicB", 0): (23, 42)} and want[("TopicB", 0)] == (23, 20, "max_row_corrected")
    want[("TopicB", 0)] = (22, 21, "max_row_corrected")
    assert {k: (q.first_dropped, q.dropped, q.reason) for k, q in p.cq_truncation.items()} == want
    assert {k: q.end // 20 for k, q in p.cq_truncation.items()} == {k: w[0] for k, w in want.items()}
    assert len(want) >= 5 and wholly_past == [("TopicTx", 0)]
    [refused] = p.notes  # the broker refuses to move TopicTx/0's max row, and keeps serving it
    assert "TopicTx/0" in refused and "keeps serving its max offset 1" in refused and str(cut) in refused
    # TopicB/0's unit at queue offset 22, a message the recovered CommitLog keeps, is no longer served
    kept_unit = next((o, phys) for o, phys in units_of(STORE)[("TopicB", 0)] if o == 22)
    assert kept_unit[1] < cut
    assert p.units_unserved == [UnservedUnits("TopicB", 0, "rocksdb_truncate_dirty", 22, (22,), (kept_unit[1],))]
    # nothing happens when the checkpoint is not past the cut
    with R.RocksDBQueues(root) as db:
        assert db.truncate_dirty(CHECKPOINT, 0) == [] and db.truncate_dirty(CHECKPOINT + 1, 0) == []


def test_the_served_min_offset_uses_the_commitlogs_min_offset(tmp_path):
    root = whole_store_copy(tmp_path)
    (root / "commitlog" / ("0" * 20)).unlink()
    m = 262144  # CommitLog.getMinOffset: the first segment left
    want = {k: (next((o for o, phys in units if phys >= m), units[-1][0] + 1), units[-1][0] + 1)
            for k, units in units_of(STORE).items()}
    got = {(f.topic, f.queue_id): f.backend.bounds(f) for f in Q.list_queue_files(root) if f.loaded}
    assert got == want
    assert sum(lo > 0 for lo, _ in got.values()) >= 5  # most queues start later now


@pytest.mark.spark
def test_the_audit_tells_what_recovery_does_to_the_database(spark, tmp_path):
    from .test_v5_audit import audit

    empty = emptied(whole_store_copy(tmp_path / "empty"))
    # consumers' committed offsets: one at each queue's max (served again after the rebuild), TopicA/0's one past it
    # (no record of it: the broker sets it back), and one on the queue of the record at offset 0, which a normal
    # recovery does not re-dispatch
    ends = {k: units[-1][0] + 1 for k, units in units_of(STORE).items()}
    first = min(units_of(STORE).items(), key=lambda kv: kv[1][0][1])  # the queue of the record at offset 0
    assert first[1][0][1] == 0
    offsets: dict = {}
    for (t, q), end in ends.items():
        offsets.setdefault(f"{t}@g-at-max", {})[str(q)] = end
    offsets["TopicA@g-ahead"] = {"0": ends[("TopicA", 0)] + 5}
    (empty / "config").mkdir()
    (empty / "config" / "consumerOffset.json").write_text(json.dumps({"offsetTable": offsets}))
    ahead = {("g-ahead", "TopicA", 0)}
    if len(first[1]) == 1:  # its only record: the queue is rebuilt empty, and its group is above it too
        ahead.add(("g-at-max", *first[0]))
    cut_root = whole_store_copy(tmp_path / "cut")
    cut = cut_last_segment(cut_root)
    aged = whole_store_copy(tmp_path / "aged")
    (aged / "commitlog" / ("0" * 20)).unlink()
    found = audit(spark, [f"empty={empty}", f"cut={cut_root}", f"aged={aged}"], tmp_path / "out")
    by = {}
    for f in found["findings"]:
        by.setdefault((f["broker"], f["check"]), []).append(f)
    [rebuilt] = by[("empty", "recovery.cq_rebuilt")]
    assert (rebuilt["severity"], rebuilt["physical_offset"]) == ("warning", 0)
    assert f"{CHECKPOINT} byte(s)" in rebuilt["message"] and "message at physical offset 0 gets no unit" in \
        rebuilt["message"]
    assert json.loads(json.dumps(dict(rebuilt["details"])))["first_record_skipped"] in ("true", True)
    above = json.loads(dict(rebuilt["details"])["groups_above_max"])
    assert {(x["group"], x["topic"], x["queue_id"]) for x in above} == ahead
    assert [x["max_offset"] for x in above if x["group"] == "g-ahead"] == [ends[("TopicA", 0)]]
    assert "g-ahead on TopicA/0 (committed" in rebuilt["message"] and "OFFSET_OVERFLOW_BADLY" in rebuilt["message"]
    # the kept message truncateDirty's search leaves unserved: a finding, and a row of the messages to re-send
    [unserved] = by[("cut", "recovery.units_unserved")]
    assert (unserved["topic"], unserved["queue_id"], unserved["queue_offset"]) == ("TopicB", 0, 22)
    assert "1 kept message(s)" in unserved["message"] and "back to 22" in unserved["message"]
    rows = [r for r in found["tables"]["resend"] if r["broker"] == "cut" and r["topic"] == "TopicB"]
    assert [(r["state"], r["queue_offset"]) for r in rows if r["queue_offset"] == 22] == [("unindexed", 22)]
    truncated = {(f["topic"], f["queue_id"]): f["queue_offset"] for f in by[("cut", "recovery.cq_truncated")]}
    assert truncated == {k: q.first_dropped for k, q in predict_recovery(Store(cut_root)).cq_truncation.items()}
    assert any("truncateDirty" in f["message"] for f in by[("cut", "recovery.cq_truncated")])
    notes = " ".join(f["message"] for f in by[("cut", "recovery.note")])
    assert "max offset of TopicTx/0" in notes and "TopicB/0" not in notes
    assert not [c for b, c in by if b != "empty" and c == "recovery.cq_rebuilt"]
    # the served min offsets in the audit's queues table (what lag, pop and delays read)
    queues = {(r["topic"], r["queue_id"]): r["min_offset"] for r in found["tables"]["queues"] if r["broker"] == "aged"}
    assert queues == {(f.topic, f.queue_id): f.backend.bounds(f)[0] for f in Q.list_queue_files(aged) if f.loaded}
    geometry = {b["name"]: b["geometry"]["queues"] for b in found["summary"]["brokers"]}
    assert geometry == {"empty": 0, "cut": 12, "aged": 12}
    assert cut < CHECKPOINT
