"""The recovery model against the fixtures (clean shutdown) and against copies damaged on purpose."""
from __future__ import annotations

import json
import os
import shutil
import struct

import pytest

from store_format.recovery import predict_recovery
from store_format.store import Store

from .conftest import fixture_manifest, fixture_store

SEG = "00000000000000000000"



@pytest.mark.parametrize("name", ["basic", "broker"])
def test_clean_fixture_recovers_to_rocketmqs_max_offset(name):
    manifest = fixture_manifest(name)
    p = predict_recovery(Store(fixture_store(name)))
    assert p.mode == "normal" and p.will_start and not p.start_problems
    assert p.max_physical_offset == manifest["commitLogMaxOffset"]
    assert p.stop_kind == "END_OF_DATA" and p.dropped_messages == [] and p.cq_units_truncated == {}
    assert p.max_cq_physical_offset == max(q["maxPhysicOffset"] for q in manifest["consumeQueues"])


def test_bad_crc_truncates_there_and_drops_later_messages(basic_copy):
    root, manifest = basic_copy
    msgs = manifest["messages"]
    k = 40
    pos = msgs[k]["commitLogOffset"]
    with open(root / "commitlog" / SEG, "r+b") as f:
        f.seek(pos + 88)
        b = f.read(1)
        f.seek(pos + 88)
        f.write(bytes([b[0] ^ 0xFF]))
    p = predict_recovery(Store(root))
    assert p.max_physical_offset == pos and p.stop_kind == "BAD_CRC" and p.stop_position == pos
    assert [o for o, _ in p.dropped_messages] == [m["commitLogOffset"] for m in msgs[k + 1:]]
    expected = {}
    for q in manifest["consumeQueues"]:
        n = sum(1 for e in q["entries_[queueOffset,commitLogOffset,size,tagsCode]"] if e[1] >= pos)
        if n:
            expected[(q["topic"], q["queueId"])] = n
    assert p.cq_units_truncated == expected


def test_abort_file_means_abnormal_recovery_and_index_rebuild(basic_copy):
    root, manifest = basic_copy
    (root / "abort").write_bytes(b"")
    p = predict_recovery(Store(root))
    assert p.mode == "abnormal" and p.redispatch_from == 0 and p.start_segment == SEG
    # indexMsgTimestamp is 0 in the fixture: every index file is newer and is deleted at load
    assert p.index_files_deleted == [f["name"] for f in manifest["indexFiles"]]
    assert p.max_physical_offset == manifest["commitLogMaxOffset"]


def test_wrong_segment_length_means_the_broker_will_not_start(basic_copy):
    root, manifest = basic_copy
    seg = root / "commitlog" / SEG
    shutil.copy(seg, root / "commitlog" / f"{1048576:020d}")
    os.truncate(root / "commitlog" / f"{1048576:020d}", 4096)
    p = predict_recovery(Store(root))
    assert not p.will_start and "00000000000001048576" in p.start_problems[0]


def test_multi_segment_normal_recovery_starts_at_third_last(tmp_path):
    """Five segments of blank-terminated records: the walk begins at segment index 2 and ends in the last."""
    from store_format.codec import encode_blank, encode_record
    from store_format.message import Message
    size = 4096
    d = tmp_path / "store" / "commitlog"
    d.mkdir(parents=True)
    for i in range(5):
        base = i * size
        buf = bytearray(size)
        pos = 0
        for j in range(3):
            rec = encode_record(Message(topic="T", body=b"x" * 100, physical_offset=base + pos, store_timestamp=1000 + i))
            buf[pos:pos + len(rec)] = rec
            pos += len(rec)
        if i < 4:
            buf[pos:pos + 8] = encode_blank(size - pos)
        (d / f"{base:020d}").write_bytes(bytes(buf))
        last_end = base + pos
    p = predict_recovery(Store(tmp_path / "store"))
    assert p.start_segment == f"{2 * size:020d}" and p.max_physical_offset == last_end and p.will_start


# ---------------------------------------------------------------------------------------------------------
# Messages lost by recovery: the damaged record(s) at the truncation point too (issue "Real brokers' stores")

from store_format.write import damage as D  # noqa: E402
from store_format.write.broker import Broker, ManualClock, Producer  # noqa: E402
from store_format.commitlog import list_segments, salvage_buffer, walk_buffer  # noqa: E402
from store_format.fs import ReadOnlyMap
from store_format.indexfile import IndexFile  # noqa: E402
from store_format.recovery import (SegmentWalk, describe_damaged_record, lost_records,  # noqa: E402
                                   recovery_walk)
from store_format.write.writer import StoreWriter, WriterConfig  # noqa: E402

# small segments, and an index geometry whose length does not give it away (not RocketMQ's 1:4 slots:entries)
CRASH_CFG = WriterConfig(mappedFileSizeCommitLog=64 * 1024, mappedFileSizeConsumeQueue=20 * 5, maxHashSlotNum=16,
                         maxIndexNum=100)
ZERO_PAGE = "recovered-zero-page"


@pytest.fixture(scope="module")
def crashed(tmp_path_factory):
    """A store the writer leaves as a killed broker does (StoreWriter.crash(): abort, stale checkpoint): several
    segments, some 10 KiB bodies (a zeroed page fits inside one), index files rolled over."""
    root = tmp_path_factory.mktemp("crashed") / "store"
    w = StoreWriter(root, CRASH_CFG, clock=ManualClock(1_700_000_000_000, tick=7))
    b, p = Broker(w), Producer()
    for i in range(260):
        body = bytes([65 + i % 26]) * (10_000 if i % 37 == 5 else 200 + i % 300)
        b.send(p, f"T{i % 3}", body, tags=f"t{i % 4}", keys=f"k-{i}", compress=False)
    w.crash()
    return root


def broker_walk_messages(root, start_segment: str | None = None) -> list[int]:
    """The messages RocketMQ's recovery walk accepts (CommitLog.recoverAbnormally / recoverNormally from the
    given segment: checkMessageAndReturnSize record by record with checkCRCOnRecover, a blank moving to the next
    segment, the first refused record ending the walk): their physical offsets."""
    out = []
    for seg in list_segments(root / "commitlog"):
        if start_segment is not None and seg.name < start_segment:
            continue
        with ReadOnlyMap(seg.path) as m:
            frames = list(walk_buffer(m.buf, seg.name, seg.base_offset, decode=False, check_physical_offset=False))
        out += [f.physical_offset for f in frames if f.kind == "message"]
        if frames[-1].kind != "blank":
            break
    return out


def _messages(root):
    return [f for f in Store(root).walk_commitlog(decode=True) if f.kind == "message"]


def _victims(root):
    """A mid-store record with a body (the 3rd-last segment's middle), and one with a 10 KiB body after it."""
    frames = _messages(root)
    mid = frames[len(frames) * 2 // 3]
    big = next(f for f in frames if len(f.message.body) >= 10_000 and f.physical_offset >= mid.physical_offset)
    return frames, mid, big


@pytest.mark.parametrize("call", ["torn_tail", "zero_page", "bad_crc", "size_mismatch", "flip_body_bit",
                                  "bad_magic"])
def test_messages_lost_count_the_damaged_record(crashed, tmp_path, call):
    """messages_lost = what the broker's message count after load() loses: the number of messages the recovery
    walk over the damaged store no longer sees compared with the undamaged original, the damaged record
    included (CommitLog.recoverAbnormally: the walk stops AT the refused record, processOffset = its start).
    A damaged record whose header still frames a message is counted by name (damaged_dropped); a bad magic
    leaves a record no walk frames: an unframed run, at least one record."""
    frames, mid, big = _victims(crashed)
    kwargs = {"torn_tail": {}, "zero_page": {"physical_offset": big.physical_offset + 5000},
              "flip_body_bit": {"physical_offset": mid.physical_offset, "bit": 9}}.get(
        call, {"physical_offset": mid.physical_offset})
    dmg = getattr(D, call)(crashed, tmp_path / "d", **kwargs)
    victim = frames[-1] if call == "torn_tail" else big if call == "zero_page" else mid
    p = predict_recovery(Store(tmp_path / "d"))
    before = broker_walk_messages(crashed, p.start_segment)
    after = broker_walk_messages(tmp_path / "d", p.start_segment)
    truth = len(before) - len(after)
    assert p.mode == "abnormal" and p.max_physical_offset == victim.physical_offset, dmg.describe()
    assert [o for o, _ in p.dropped_messages] == [o for o in before if o > victim.physical_offset]
    if call == "bad_magic":
        assert p.damaged_dropped == [] and p.unframed_dropped == [(victim.physical_offset, victim.size)]
        assert p.messages_lost + len(p.unframed_dropped) == truth
        return
    declared = victim.size + (4 if call == "size_mismatch" else 0)  # size_mismatch's default delta
    assert [(o, s) for o, s, _ in p.damaged_dropped] == [(victim.physical_offset, declared)]
    assert p.damaged_dropped[0][2] == p.stop_kind and p.unframed_dropped == []
    assert p.messages_lost == truth == p.damaged_messages_lost + p.intact_messages_lost
    with ReadOnlyMap(tmp_path / "d" / dmg.path) as m:  # the damaged record is named from its header
        about = describe_damaged_record(m.buf, victim.file_position)
    assert (about["queue_id"], about["queue_offset"]) == (victim.message.queue_id, victim.message.queue_offset)
    if call in ("bad_crc", "flip_body_bit", "zero_page"):  # its lengths still add up: the topic and key too
        assert (about["topic"], about["uniq_key"]) == (victim.message.topic, victim.message.uniq_key)


def test_predictions_come_from_the_segment_walks(crashed, tmp_path):
    """The decision is made from each segment's recovery-walk outcome (SegmentWalk), walked or given: given
    walks are used as they are; the lost records are a separate step (lost_records) over the salvage walk's
    items, which an engine holding every frame can apply itself."""
    frames, mid, _ = _victims(crashed)
    D.bad_crc(crashed, tmp_path / "d", physical_offset=mid.physical_offset)
    store = Store(tmp_path / "d")
    default = predict_recovery(store)
    walks = {s.name: recovery_walk(s) for s in store.segments}
    assert all(default.walks[k] == walks[k] for k in default.walks)
    given = predict_recovery(store, walks=walks, enumerate_lost=False)
    assert (given.max_physical_offset, given.stop_kind, given.dropped_messages, given.damaged_dropped) == \
        (default.max_physical_offset, default.stop_kind, [], [])
    items = [it for seg in store.segments if seg.base_offset + seg.length > given.max_physical_offset
             for it in salvage_buffer(seg.path.read_bytes(), seg.name, seg.base_offset, decode=False)]
    stop = given.walks[given.stop_segment]
    lost = lost_records(items, given.max_physical_offset, stop)
    assert (lost.intact, lost.damaged, lost.unframed) == \
        (default.dropped_messages, default.damaged_dropped, default.unframed_dropped)
    # a walk that says the stop segment ends in a blank: the decision follows it to the next segment
    seg = store.segments[[s.name for s in store.segments].index(given.stop_segment)]
    blank = SegmentWalk(seg.name, seg.base_offset, seg.length - 8, "blank", size=8)
    moved = predict_recovery(store, walks={**walks, seg.name: blank}, enumerate_lost=False)
    assert moved.max_physical_offset > seg.base_offset + seg.length and moved.walks[seg.name] is blank


def test_recovered_zero_page_fixture_against_rocketmqs_own_recovery():
    """RocketMQ 4.9.7 recovered this crashed store with a zeroed page: the prediction is what it did
    (manifest: loadResult, afterLoad, inputFiles vs recoveredFiles).  The zeroed page cuts the record at 6946057
    (its header left: a damaged record, named) and wipes the header of the next one (an unframed run): the broker
    loses both and every later message (DefaultMessageStore.load -> CommitLog.recoverAbnormally)."""
    from .conftest import FIXTURES

    manifest = json.loads((FIXTURES / ZERO_PAGE / "manifest.json").read_text())
    p = predict_recovery(Store(FIXTURES / ZERO_PAGE / "input" / "store"))
    after, damage = manifest["afterLoad"], manifest["damage"]
    assert p.will_start == manifest["loadResult"] and p.mode == "abnormal" == (
        "abnormal" if manifest["inputAbortFileExists"] else "normal")
    assert p.max_physical_offset == after["commitLogMaxOffset"]
    gone = {f["path"] for f in manifest["inputFiles"]} - {f["path"] for f in manifest["recoveredFiles"]}
    assert p.segments_deleted == sorted(g.split("/")[1] for g in gone if g.startswith("commitlog/"))
    assert p.index_files_deleted == sorted(g.split("/")[1] for g in gone if g.startswith("index/"))
    overlapping = damage["messagesOverlappingZeroedPage"]
    assert [(o, s) for o, s, _ in p.damaged_dropped] == [(overlapping[0]["commitLogOffset"],
                                                          overlapping[0]["storeSize"])]
    assert p.unframed_dropped == [(overlapping[1]["commitLogOffset"], overlapping[1]["storeSize"])]
    assert p.messages_lost + len(p.unframed_dropped) == damage["messageCountBefore"] - after["messageCount"]
    kept = {m["commitLogOffset"] for m in after["messages"]}
    assert not kept & {o for o, _ in p.dropped_messages} and min(kept | {o for o, _ in p.dropped_messages}) == 0


# ---------------------------------------------------------------------------------------------------------
# Index files deleted by abnormal recovery (IndexService.load(lastExitOK))


def _end_timestamps(root) -> dict[str, int]:
    out = {}
    for path in sorted((root / "index").iterdir()):
        out[path.name] = struct.unpack(">q", path.read_bytes()[8:16])[0]
    return out


def test_abnormal_recovery_deletes_only_index_files_newer_than_the_checkpoint(crashed):
    """IndexService.load(false) destroys exactly the files whose endTimestamp > indexMsgTimestamp, reading the
    header whatever the file's geometry: the writer's crashed store keeps every full file and loses the newest.
    (The geometry, 16 slots x 100 entries, is not RocketMQ's 1:4 ratio: the model used to count a file it
    could not open as a deletion.)"""
    store = Store(crashed)
    paths = store.index_paths()
    assert len(paths) >= 4
    with IndexFile(paths[0]) as f:
        assert (f.hash_slot_num, f.index_num) == (16, 100)
    cp = store.checkpoint()
    ends = _end_timestamps(crashed)
    expected = [n for n, t in ends.items() if t > cp.index_msg_timestamp]
    p = predict_recovery(store)
    assert p.mode == "abnormal" and p.index_files_deleted == expected == [paths[-1].name]
    assert predict_recovery(store, walks=p.walks, enumerate_lost=False).index_files_deleted == expected


def test_generate_crash_deletes_the_newest_index_file(tmp_path):
    """``python -m store_format generate --crash`` (StoreWriter.crash()): 33 index files of a geometry the
    length does not give away; abnormal recovery deletes only the newest, the one whose endTimestamp is past
    the checkpoint's indexMsgTimestamp (IndexService.load(false))."""
    from store_format.__main__ import main

    conf = tmp_path / "broker.conf"
    conf.write_text("maxHashSlotNum=16\nmaxIndexNum=100\nmappedFileSizeCommitLog=65536\n")
    root = tmp_path / "gen"
    assert main(["generate", str(root), "--messages", "1500", "--seed", "4", "--rate", "50", "--config", str(conf),
                 "--crash", "--quiet"]) == 0
    cp = Store(root).checkpoint()
    ends = _end_timestamps(root)
    p = predict_recovery(Store(root))
    assert p.mode == "abnormal" and len(ends) > 20 and cp.index_msg_timestamp > 0
    assert p.index_files_deleted == [n for n, t in ends.items() if t > cp.index_msg_timestamp] == [max(ends)]


def test_index_files_and_checkpoint_as_the_broker_reads_them(crashed, tmp_path):
    """StoreCheckpoint maps one 4096-byte page over the file: a short checkpoint's missing bytes read as 0, a
    missing one is created (all 0), so indexMsgTimestamp is 0 and every index file with an endTimestamp is
    deleted.  IndexService.load: a name Long.parseLong refuses is skipped (neither loaded nor deleted); a
    numeric name that cannot be opened (a folder) ends the load; a file shorter than its header reads zeros
    (endTimestamp 0: kept)."""
    root = D.copy_store(crashed, tmp_path / "s")
    names = sorted(_end_timestamps(root))
    with open(root / "checkpoint", "r+b") as f:
        f.truncate(16)
    p = predict_recovery(Store(root))
    assert p.index_files_deleted == names and any("16 bytes" in n for n in p.notes)
    (root / "checkpoint").unlink()
    p = predict_recovery(Store(root))
    assert p.index_files_deleted == names and p.will_start and any("no checkpoint" in n for n in p.notes)
    (root / "index" / (names[0] + ".bak")).write_bytes((root / "index" / names[0]).read_bytes())
    (root / "index" / names[1]).write_bytes(bytes(10))  # endTimestamp reads 0
    (root / "index" / names[2]).unlink()
    (root / "index" / names[2]).mkdir()  # IndexService.load returns there
    p = predict_recovery(Store(root))
    assert p.index_files_deleted == [names[0]] and any(f"index/{names[2]} is a folder" in n for n in p.notes)


# ---------------------------------------------------------------------------------------------------------
# Consume queues: what ConsumeQueue.recover() and truncateDirtyLogicFiles drop (issue "Never lose a byte", 4)

from store_format.consumequeue import unit_bytes  # noqa: E402
from store_format.recovery import recover_consume_queues  # noqa: E402


def _units_of(store: Store, key) -> list[tuple[int, int, int]]:
    """(queue offset, physical offset, size) of every written unit of a queue."""
    return [(u.queue_offset, u.physical_offset, u.size) for u in store.consume_queue(*key)]


def test_recovered_zero_page_queues_end_where_rocketmq_left_them():
    """Every queue of the crashed, zero-paged store ends where RocketMQ 4.9.7's load() left it (manifest afterLoad
    consumeQueues maxOffset): ConsumeQueue.recover() then truncateDirtyLogicFiles(processOffset), run because
    the consume queues' max physical offset is past the recovered commitlog end (CommitLog.recoverAbnormally)."""
    from .conftest import FIXTURES

    manifest = json.loads((FIXTURES / ZERO_PAGE / "manifest.json").read_text())
    store = Store(FIXTURES / ZERO_PAGE / "input" / "store")
    p = predict_recovery(store)
    queues, max_cq = recover_consume_queues(store.queues, p.max_physical_offset)
    after = {(q["topic"], q["queueId"]): q["maxOffset"] for q in manifest["afterLoad"]["consumeQueues"]}
    assert set(queues) == set(after) and max_cq > p.max_physical_offset
    assert {k: q.end // 20 for k, q in queues.items()} == after
    for key, q in queues.items():  # dropped: every written unit past the end
        assert q.dropped == sum(1 for qo, _, _ in _units_of(store, key) if qo >= after[key])
        assert p.cq_units_truncated.get(key, 0) == q.dropped
    assert {q.reason for q in p.cq_truncation.values()} == {"past_recovered_end"}


def _patch_unit(root, topic: str, qid: int, queue_offset: int, phys: int, size: int, tags: int = 0):
    store = Store(root)
    files = store.queues[(topic, qid)]
    f = next(f for f in reversed(files) if f.first_queue_offset <= queue_offset)
    with open(f.path, "r+b") as fh:
        fh.seek((queue_offset - f.first_queue_offset) * 20)
        fh.write(unit_bytes(phys, size, tags))


@pytest.mark.parametrize("phys,size", [(-5, 120), (3000, 0), (3000, -1)])
def test_an_invalid_unit_drops_itself_and_every_later_unit(basic_copy, phys, size):
    """ConsumeQueue.recover() reads units while ``offset >= 0 && size > 0`` and cuts the queue at the first
    that fails (MappedFileQueue.truncateDirtyFiles at processOffset): that unit and every later one are dropped,
    although the later ones are valid.  The commitlog is clean, so truncateDirtyLogicFiles cuts nothing."""
    root, manifest = basic_copy
    key = ("TopicTest", 0)
    before = _units_of(Store(root), key)
    _patch_unit(root, *key, 3, phys, size)
    p = predict_recovery(Store(root))
    q = p.cq_truncation[key]
    assert (q.reason, q.first_dropped, q.dropped, q.end) == ("invalid_unit", 3, len(before) - 3, 3 * 20)
    assert q.invalid_unit == (phys, size) and p.cq_units_truncated == {key: len(before) - 3}


def test_a_zero_unit_mid_queue_drops_the_units_after_it(basic_copy):
    """A zeroed unit is the end to ConsumeQueue.recover() (size 0): the written units after it are dropped; the
    zero unit itself is not counted (it holds nothing)."""
    root, _ = basic_copy
    key = ("TopicTest", 1)
    before = _units_of(Store(root), key)
    _patch_unit(root, *key, 2, 0, 0)
    q = predict_recovery(Store(root)).cq_truncation[key]
    assert (q.reason, q.first_dropped, q.dropped, q.invalid_unit) == ("invalid_unit", 3, len(before) - 3, None)


def test_truncate_dirty_logic_files_cuts_at_the_first_unit_past_the_recovered_end(crashed, tmp_path):
    """A bad CRC mid-store: every queue keeps its units below the recovered end; from the first unit at or past
    it every unit is dropped, and a queue file whose first unit is past it is deleted whole
    (ConsumeQueue.truncateDirtyLogicFiles(phyOffset), called because recoverConsumeQueue's max is >= it)."""
    _, mid, _ = _victims(crashed)
    D.bad_crc(crashed, tmp_path / "d", physical_offset=mid.physical_offset)
    store = Store(tmp_path / "d")
    p = predict_recovery(store)
    whole_files = 0
    for key, files in store.queues.items():
        units = _units_of(store, key)
        past = [qo for qo, o, _ in units if o >= p.max_physical_offset]
        q = p.cq_truncation.get(key)
        assert (q.dropped if q else 0) == len(past) and (q.first_dropped if q else None) == (past[0] if past else None)
        if q:
            assert q.reason == "past_recovered_end" and q.end == past[0] * 20
        whole_files += sum(1 for f in files if f.first_queue_offset >= (past[0] if past else 1 << 62))
    assert whole_files >= 1


def test_a_unit_past_the_end_before_an_invalid_one(basic_copy):
    """Both rules on one queue: recover() stops at the invalid unit, truncateDirtyLogicFiles (the store's
    recovered end is lower) cuts earlier, at the first unit at or past it."""
    root, manifest = basic_copy
    key = ("TopicTest", 2)
    units = _units_of(Store(root), key)
    _patch_unit(root, *key, len(units) - 1, -1, 10)
    bad = units[2]  # give the commitlog a bad CRC at this queue's third message
    with open(root / "commitlog" / SEG, "r+b") as f:
        f.seek(bad[1] + 8)
        f.write(b"\x00\x00\x00\x07")
    p = predict_recovery(Store(root))
    q = p.cq_truncation[key]
    assert p.max_physical_offset == bad[1]
    assert (q.reason, q.first_dropped, q.recover_end, q.end) == ("past_recovered_end", 2, (len(units) - 1) * 20, 40)


def test_no_commitlog_destroys_every_consume_queue(basic_copy):
    """CommitLog.recoverNormally with no segment: "The commitlog files are deleted, and delete the consume queue
    files" (DefaultMessageStore.destroyLogics): every unit goes."""
    root, manifest = basic_copy
    for seg in (root / "commitlog").iterdir():
        seg.unlink()
    p = predict_recovery(Store(root))
    expected = {(q["topic"], q["queueId"]): q["maxOffset"] - q["minOffset"] for q in manifest["consumeQueues"]
                if q["dirExists"] and q["maxOffset"] > q["minOffset"]}
    assert p.cq_units_truncated == expected and {q.reason for q in p.cq_truncation.values()} == {"no_commitlog"}


# ---------------------------------------------------------------------------------------------------------
# Files that stop the broker, and markers of the wrong kind (issue "Never lose a byte", 5 and 6)


def test_commitlog_entries_that_are_not_segments_stop_the_broker(basic_copy):
    """MappedFileQueue.load/doLoad take every entry of commitlog/: one whose length is not the segment size (a
    hidden file, a folder) makes doLoad return false; one of the right length whose name Long.parseLong refuses
    throws NumberFormatException in MappedFile.init; both fail DefaultMessageStore.load().  A numeric name of
    another width loads as a segment at that offset (a note)."""
    root, _ = basic_copy
    cl = root / "commitlog"
    seg = (cl / SEG).read_bytes()
    (cl / f"{SEG}.bak").write_bytes(seg)
    (cl / ".DS_Store").write_bytes(b"x" * 10)
    (cl / f"{1 << 20:020d}").mkdir()
    p = predict_recovery(Store(root))
    assert not p.will_start
    assert p.start_problem_files == ["commitlog/.DS_Store", f"commitlog/{SEG}.bak", f"commitlog/{1 << 20:020d}"]
    assert any("Long.parseLong" in t for t in p.start_problems) and any("a folder" in t for t in p.start_problems)
    for name in (f"{SEG}.bak", ".DS_Store"):
        (cl / name).unlink()
    (cl / f"{1 << 20:020d}").rmdir()
    (cl / "2097152").write_bytes(seg)
    p = predict_recovery(Store(root))
    assert p.will_start and any("commitlog/2097152 loads as the segment at offset 2097152" in n for n in p.notes)


def test_lock_and_checkpoint_folders_stop_the_broker(basic_copy):
    """``lock`` a folder: the DefaultMessageStore constructor's ``new RandomAccessFile(lock, "rw")`` throws, so
    BrokerController.initialize() fails; ``checkpoint`` a folder: ``new StoreCheckpoint`` throws inside
    DefaultMessageStore.load(), which fails (nothing is deleted: IndexService.load never runs)."""
    root, _ = basic_copy
    (root / "lock").unlink()
    (root / "lock").mkdir()
    (root / "abort").write_bytes(b"")
    (root / "checkpoint").unlink()
    (root / "checkpoint").mkdir()
    p = predict_recovery(Store(root))
    assert not p.will_start and p.start_problem_files == ["lock", "checkpoint"]
    assert "RandomAccessFile" in p.start_problems[0] and "StoreCheckpoint" in p.start_problems[1]
    assert p.index_files_deleted == []


@pytest.mark.parametrize("content", [False, True])
def test_an_abort_folder_means_abnormal_recovery(basic_copy, content):
    """DefaultMessageStore.isTempFileExist() is File.exists(): true for a folder, so recover(false) runs
    recoverAbnormally; shutdown's deleteFile (File.delete) cannot remove a folder that is not empty, so every
    later start is abnormal too.  A dangling symbolic link does not exist: a normal start."""
    root, manifest = basic_copy
    (root / "abort").mkdir()
    if content:
        (root / "abort" / "x").write_bytes(b"1")
    p = predict_recovery(Store(root))
    assert p.mode == "abnormal" and p.abort_kind == "folder" and p.will_start
    assert p.index_files_deleted == [f["name"] for f in manifest["indexFiles"]]  # indexMsgTimestamp 0
    assert any(("every later start" in n) == content for n in p.notes if n.startswith("abort"))
    shutil.rmtree(root / "abort")
    (root / "abort").symlink_to(root / "nowhere")
    assert predict_recovery(Store(root)).mode == "normal"


def _make(path, kind):
    """Put a ``kind`` where ``path`` is: a FIFO, a socket, a link to a device, a dangling link, a link loop."""
    import socket

    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path)
    elif path.exists() or path.is_symlink():
        path.unlink()
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "socket":
        with socket.socket(socket.AF_UNIX) as s:
            s.bind(str(path))  # the socket file stays after close
    elif kind == "device":
        path.symlink_to("/dev/zero")
    elif kind == "dangling":
        path.symlink_to(path.parent / "nowhere")
    elif kind == "loop":
        path.symlink_to(path)


@pytest.mark.parametrize("kind", ["fifo", "socket", "device", "dangling", "loop"])
def test_a_commitlog_entry_that_is_not_a_file_stops_the_broker(basic_copy, kind):
    """MappedFileQueue.doLoad (4.9.7) compares every entry's File.length() with mappedFileSizeCommitLog before
    anything else: a FIFO, a socket, a device, a dangling link and a link loop all have length 0, so doLoad
    returns false and DefaultMessageStore.load() fails.  The problem says what the entry is."""
    root, _ = basic_copy
    _make(root / "commitlog" / f"{1 << 30:020d}", kind)
    p = predict_recovery(Store(root))
    assert not p.will_start and p.start_problem_files == [f"commitlog/{1 << 30:020d}"]
    what = {"fifo": "a FIFO", "socket": "a socket", "device": "a device", "dangling": "a dangling symbolic link",
            "loop": "a symbolic link loop"}[kind]
    assert f"is {what} (File.length() 0), not mappedFileSizeCommitLog" in p.start_problems[0]


@pytest.mark.parametrize("kind, before_recovery", [("socket", True), ("loop", True), ("fifo", False),
                                                   ("device", False), ("dangling", None)])
def test_a_lock_that_is_not_a_file(basic_copy, kind, before_recovery):
    """4.9.7's DefaultMessageStore constructor opens lock with new RandomAccessFile(file, "rw"): a socket or a
    link loop throws there (BrokerController.initialize() fails before recovery: the first problem); a FIFO or
    a device opens, load() recovers the store, then DefaultMessageStore.start() writes "lock" and calls
    fileChannel.force(true), which throws (OpenJDK 17: Invalid argument): the last problem, met after
    recovery.  A dangling link's target is created: the broker starts."""
    root, _ = basic_copy
    (root / "checkpoint").unlink()
    (root / "checkpoint").mkdir()  # a problem load() meets, to show where the lock's is met
    _make(root / "lock", kind)
    p = predict_recovery(Store(root))
    assert not p.will_start
    if before_recovery is None:
        assert p.start_problem_files == ["checkpoint"]
    else:
        assert p.start_problem_files == (["lock", "checkpoint"] if before_recovery else ["checkpoint", "lock"])
        text = p.start_problems[p.start_problem_files.index("lock")]
        assert ("initialize() fails before any recovery" if before_recovery else "after load()") in text


@pytest.mark.parametrize("kind, refused", [("fifo", True), ("socket", True), ("device", True), ("loop", True),
                                           ("dangling", False)])
def test_a_checkpoint_that_is_not_a_file(basic_copy, kind, refused):
    """4.9.7's StoreCheckpoint constructor: new RandomAccessFile(file, "rw") throws for a socket or a link loop,
    fileChannel.map(READ_WRITE, 0, 4096) throws for a FIFO or a device (OpenJDK 17: Invalid argument): either
    way DefaultMessageStore.load() fails and nothing is deleted (IndexService.load never runs).  A dangling link
    is a checkpoint that does not exist (File.exists() is false): created, every value 0."""
    root, manifest = basic_copy
    (root / "abort").write_bytes(b"")
    _make(root / "checkpoint", kind)
    p = predict_recovery(Store(root))
    if refused:
        assert not p.will_start and p.start_problem_files == ["checkpoint"]
        assert "new StoreCheckpoint() throws" in p.start_problems[0] and p.index_files_deleted == []
    else:
        assert p.will_start and any("reads every value as 0" in n for n in p.notes)
        assert p.index_files_deleted == [f["name"] for f in manifest["indexFiles"]]  # indexMsgTimestamp 0


@pytest.mark.parametrize("kind, abnormal", [("fifo", True), ("socket", True), ("device", True), ("loop", False)])
def test_an_abort_that_is_not_a_file(basic_copy, kind, abnormal):
    """4.9.7's DefaultMessageStore.isTempFileExist() is File.exists(), which follows links: a FIFO, a socket or a
    device exists (recoverAbnormally); a link loop does not (stat fails: recoverNormally)."""
    root, _ = basic_copy
    _make(root / "abort", kind)
    p = predict_recovery(Store(root))
    assert p.will_start and p.mode == ("abnormal" if abnormal else "normal")


def test_the_batch_queues_count_in_the_queues_max_physical_offset(tmp_path):
    """5.3.3's getMaxPhyOffsetInConsumeQueue runs over the batch consume queues too (ConsumeQueueStore.load puts them
    in the same table), each giving its last valid unit's record START (BatchConsumeQueue.recover's
    maxMsgPhyOffsetInCommitLog), not its end as a ConsumeQueue does.  On a copy of the v5-batchcq store with its
    consume queues gone, the batch queues alone give the max: where the reput starts and the normal recovery looks
    for its first segment."""
    from store_format.batchcq import read_batch_queue

    from .conftest import FIXTURES_5X

    root = tmp_path / "store"
    shutil.copytree(FIXTURES_5X / "v5-batchcq" / "store", root)
    for folder, _, files in os.walk(root):
        os.chmod(folder, 0o755)
    full = predict_recovery(Store(root))
    shutil.rmtree(root / "consumequeue")
    store = Store(root)
    last = [max((u for u in read_batch_queue(files, stop_at_invalid=True)), key=lambda u: u.physical_offset)
            for files in store.batch_queues.values()]
    want = max(u.physical_offset for u in last)
    assert len(last) >= 2 and 0 < want < full.max_cq_physical_offset
    p = predict_recovery(store)
    assert p.max_cq_physical_offset == want  # the record's start: its end would be want + its size
    assert predict_recovery(store, queue_starts={}).max_cq_physical_offset == want  # as the audit calls it
    assert (p.max_physical_offset, p.start_segment) == (full.max_physical_offset, full.start_segment)


def test_the_truncation_decision_takes_the_batch_queues_max(tmp_path):
    """DefaultMessageStore.recover truncates every queue when the queues' max physical offset (the batch queues' in
    the same table, 5.3.3) reaches the recovered end; the audit's scan decides with the surveyed file queues' starts
    and the prediction's other_queues_end, as predict_recovery does."""
    from store_format.recovery import batch_queues_end, truncates_queues

    from .conftest import FIXTURES_5X

    root = tmp_path / "store"
    shutil.copytree(FIXTURES_5X / "v5-batchcq" / "store", root)
    for folder, _, files in os.walk(root):
        os.chmod(folder, 0o755)
    shutil.rmtree(root / "consumequeue")
    end = batch_queues_end(Store(root))
    assert end > 0 and predict_recovery(Store(root), queue_starts={}).other_queues_end == end
    assert truncates_queues([], end, True, end) == (True, end)  # a cut at the last batch unit's record
    assert truncates_queues([], end + 1, True, end) == (False, end)
    assert truncates_queues([], end, True) == (False, -1)  # without the batch queues nothing would be truncated
