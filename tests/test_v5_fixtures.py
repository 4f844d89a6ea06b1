"""The RocketMQ 5.x store layer against stores RocketMQ 5.3.3 wrote (shared/fixtures/rocketmq-5.3.3): every 5.x
structure read field by field as each manifest (RocketMQ's own read-back view) says -- timer-log units and
blanks, wheel slots, the timer checkpoint and metrics, LMQ consume queues predicted from the records, batch
consume-queue units, the __CRC32# property of every record -- and the 5.x offsets pinned to the byte reference.
No Spark."""
from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
import subprocess
import sys
from pathlib import Path

import pytest

from store_format import batchcq as B
from store_format import layout as L
from store_format import lmq
from store_format import pop as P
from store_format import propcrc
from store_format import timer as T
from store_format.codec import decode_record, encode_record
from store_format.commitlog import list_segments, walk_buffer
from store_format.config import read_config
from store_format.consumequeue import discover_queues, read_queue
from store_format.features import store_features
from store_format.fs import ReadOnlyMap, resolve
from store_format.javahash import java_hash
from store_format.write.broker import convert_timer_record

from .conftest import FIXTURES, FIXTURES_5X

FIXTURES5 = FIXTURES_5X
V5_NAMES = ("v5-default", "v5-crc", "v5-timer", "v5-lmq", "v5-batchcq")
REPO = Path(__file__).resolve().parent.parent


def store5(name: str) -> Path:
    return FIXTURES5 / name / "store"


@functools.lru_cache(maxsize=None)
def manifest5(name: str) -> dict:
    with open(FIXTURES5 / name / "manifest.json", encoding="utf-8") as f:
        return json.load(f)


def records(name: str):
    """Every message record of a fixture's commitlog, decoded by the project's framing (physical order)."""
    out = []
    for seg in list_segments(store5(name) / "commitlog"):
        with ReadOnlyMap(seg.path) as m:
            out.extend(f.message for f in walk_buffer(m.buf, seg.name, seg.base_offset) if f.kind == "message")
    return out


def timer_manifest(name: str) -> dict:
    return manifest5(name)["timer"]


# --------------------------------------------------------------------------------------------------
# Layouts: the 5.x declarations pinned to store-format-5x.md (§2.4 unit, §2.4 blank, §2.5 slot, §2.6 timercheck,
# §3.2 batch unit), copied here by hand so the two are independent

REFERENCE_5X = {
    "timerlog unit": ((0, 4), (4, 8), (12, 4), (16, 8), (24, 4), (28, 8), (36, 4), (40, 4), (44, 8)),
    "timerlog end-of-file blank": ((0, 4), (4, 8), (12, 4)),
    "timerwheel slot": ((0, 8), (8, 8), (16, 8), (24, 4), (28, 4)),
    "timercheck": ((0, 8), (8, 8), (16, 8), (24, 8), (32, 8), (40, 8), (48, 8)),
    "BatchConsumeQueue unit": ((0, 8), (8, 4), (12, 8), (20, 8), (28, 8), (36, 2), (38, 4), (42, 4)),
}


@pytest.mark.parametrize("layout", L.FIXED_LAYOUTS_5X, ids=lambda f: f.title)
def test_every_5x_offset_and_width_is_the_references(layout):
    assert tuple((layout.offset(m.name), m.width) for m in layout.members) == REFERENCE_5X[layout.title]
    assert layout.dtype().itemsize == (layout.size or layout.width)


def test_derived_5x_constants_are_the_references():
    assert (L.TIMER_LOG_UNIT.width, L.TIMER_LOG_BLANK.width, L.TIMER_WHEEL_SLOT.width, L.BATCH_CQ_UNIT.width) == \
        (52, 16, 32, 46)
    assert L.timer_wheel_file_size() == 38_707_200
    assert L.timer_log_last_unit_offset(100 * 1024 * 1024) == 104_857_532  # getOffsetForLastUnit
    assert L.CRC32_RESERVED_LEN == 20 and L.TIMER_CHECKPOINT.size == 4096 and L.TIMER_CHECKPOINT.width == 56
    assert L.BLANK_MAGIC & 0xFFFFFFFF == 0xCBD43194  # the timer-log blank's magic is the commitlog's
    assert L.revive_topic("DefaultCluster") == "rmq_sys_REVIVE_LOG_DefaultCluster"


# --------------------------------------------------------------------------------------------------
# Detection


@pytest.mark.parametrize("name", V5_NAMES)
def test_a_5x_store_is_known_by_its_files(name):
    f = store_features(store5(name))
    assert f.is_5x and f.timer_wheel and f.timer_check and f.timer_metrics and f.compaction
    assert f.timer_log == (name == "v5-timer")
    assert f.batch_consume_queue == (name == "v5-batchcq")
    assert f.lmq_queues == (("%LMQ%room1", "%LMQ%room2", "%LMQ%room3") if name == "v5-lmq" else ())


@pytest.mark.parametrize("name", ("basic", "broker"))
def test_a_4x_store_is_not_5x(name):
    assert store_features(FIXTURES / name / "store").generation == "4.x"


# --------------------------------------------------------------------------------------------------
# The timer log


def _manifest_units(name: str) -> list[tuple]:
    return [(u["offset"], u["size"], u["prevPos"], u["magic"], u["writeTimeMs"], u["delay"], u["slotTimeMs"],
             u["commitLogOffset"], u["commitLogSize"], u["realTopicHash"], u["reserved"])
            for u in timer_manifest(name)["timerLogUnits"]]


def _ours(units) -> list[tuple]:
    return [(u.timerlog_offset, u.size, u.prev_pos, u.magic, u.write_time_ms, u.delay_ms, u.slot_time_ms,
             u.physical_offset, u.store_size, u.real_topic_hash, u.reserved) for u in units if u.kind == "entry"]


@pytest.mark.parametrize("name", V5_NAMES)
def test_timer_log_units_read_field_by_field_as_rocketmq_reads_them(name):
    t = timer_manifest(name)
    files = T.list_timer_log_files(store5(name))
    assert [f"{f.name} ({f.length})" for f in files] == t["timerLogFiles"]
    walked = [u for f in files for u in T.walk_timer_log(f)]
    assert _ours(walked) == _manifest_units(name)
    blanks = [u for u in walked if u.kind == "blank"]
    assert [(u.timerlog_offset, u.size, f"0x{u.magic & 0xFFFFFFFF:08x}") for u in blanks] == \
        [(b["offset"], b["sizeField"], b["magic"]) for b in t["timerLogBlanks"]]
    assert not [u for u in walked if u.kind == "corrupt"]
    for f in files:  # the bulk walk is the scalar walk
        arrays = T.read_timer_unit_arrays(f)
        assert [(u.kind, u.file_position, u.size, u.prev_pos, u.magic, u.physical_offset, u.real_topic_hash)
                for u in arrays.units()] == \
            [(u.kind, u.file_position, u.size, u.prev_pos, u.magic, u.physical_offset, u.real_topic_hash)
             for u in T.walk_timer_log(f)]


def test_v5_timer_units_point_at_the_timer_topic_records_and_their_real_topics():
    msgs = {m.physical_offset: m for m in records("v5-timer")}
    units = [u for f in T.list_timer_log_files(store5("v5-timer")) for u in T.walk_timer_log(f)
             if u.kind == "entry"]
    magics = [T.magic_name(u.magic) for u in units]
    assert magics.count("roll") == 4 and magics.count("delete") == 2
    for u in units:
        m = msgs[u.physical_offset]
        assert m.topic == L.TIMER_TOPIC and m.store_size == u.store_size
        assert u.real_topic_hash == java_hash(m.properties[L.PROPERTY_REAL_TOPIC])
        assert u.is_delete == (L.PROPERTY_TIMER_DEL_UNIQKEY in m.properties)
        if not u.is_roll:  # the slot is the record's TIMER_OUT_MS
            assert u.slot_time_ms == int(m.properties[L.PROPERTY_TIMER_OUT_MS])


# --------------------------------------------------------------------------------------------------
# The wheel


@pytest.mark.parametrize("name", V5_NAMES)
def test_wheel_non_empty_slots_are_the_manifests(name):
    t = timer_manifest(name)
    wheel = T.read_wheel_slots(store5(name) / "timerwheel")
    assert wheel.problem is None and wheel.file_length == t["timerwheelFileLength"] == 38_707_200
    assert wheel.slots_total == t["slotsTotal"] and wheel.precision_ms == t["precisionMs"]
    assert [(r["slot_index"], r["time"], r["first_pos"], r["last_pos"], r["num"], r["magic"]) for r in wheel.rows()] \
        == [(s["slotIndex"], s["timeField"], s["firstPos"], s["lastPos"], s["num"], s["magic"])
            for s in t["nonZeroWheelSlots (plain reads, my code)"]]
    assert wheel.index_matches.all()


def test_wheel_slot_for_each_unit_time_is_getslots():
    t = timer_manifest("v5-timer")
    for s in t["wheelSlotsForUnits (TimerWheel.getSlot)"]:
        got = T.wheel_slot(store5("v5-timer") / "timerwheel", s["queryTimeMs"])
        assert (got.slot_index, got.first_pos, got.last_pos, got.num, got.magic) == \
            (s["slotIndex"], s["firstPos"], s["lastPos"], s["num"], s["magic"])
        other = T.wheel_slot(store5("v5-timer") / "timerwheel", s["queryTimeMs"] + 14 * 86_400_000)
        assert (other.first_pos, other.last_pos) == (-1, -1)  # same index, another time: empty for getSlot


def test_every_chain_walks_back_to_minus_one_through_units_of_its_slot():
    store = store5("v5-timer")
    wheel = T.read_wheel_slots(store / "timerwheel")
    seen = []
    with T.TimerLog(store) as log:
        for row in wheel.rows():
            walk = T.walk_chain(log, row["last_pos"])
            assert walk.end == "complete" and walk.error is None
            assert walk.positions[-1] == row["first_pos"]
            assert {u.slot_time_ms for u in walk.units} == {row["slot_time_ms"]}
            seen += walk.positions
    assert sorted(seen) == [u[0] for u in _manifest_units("v5-timer")]  # every unit is on exactly one chain


def test_wheel_and_timer_log_read_through_a_location():
    loc = resolve(str(store5("v5-timer")))
    assert len(T.read_wheel_slots(loc.child("timerwheel"))) == 35
    assert _ours(u for f in T.list_timer_log_files(loc) for u in T.walk_timer_log(f)) == \
        _manifest_units("v5-timer")


# --------------------------------------------------------------------------------------------------
# timercheck, timermetrics


@pytest.mark.parametrize("name", V5_NAMES)
def test_timercheck_reads_as_timercheckpoint_does(name):
    t = timer_manifest(name)["timerCheckpoint (TimerCheckpoint class)"]
    cp = T.read_timer_checkpoint(store5(name) / "config" / "timercheck")
    assert cp.problem is None and cp.file_length == t["fileLength"] == 4096
    assert (cp.last_read_time_ms, cp.last_timer_log_flush_pos, cp.last_timer_queue_offset,
            cp.master_timer_queue_offset) == (t["lastReadTimeMs"], t["lastTimerLogFlushPos"],
                                              t["lastTimerQueueOffset"], t["masterTimerQueueOffset"])
    assert t["dataVersion"] == f"DataVersion[timestamp={cp.data_version_timestamp}, counter={cp.data_version_counter}]"
    hex64 = manifest5(name)["configFiles"]["timercheck (hex of first 64 of 4096 bytes)"]
    assert cp.to_bytes()[:64].hex() == hex64


@pytest.mark.parametrize("name", V5_NAMES)
def test_timermetrics_reads_as_timermetrics_does(name):
    t = timer_manifest(name)["timerMetrics (TimerMetrics class)"]
    metrics = T.read_timer_metrics(store5(name) / "config")
    assert metrics.readable and not metrics.errors
    assert {k: list(v) for k, v in metrics.timing_count.items()} == t["timingCount_[count,timeStamp]"]
    dv = metrics.data_version
    assert t["dataVersion"] == f"DataVersion[timestamp={dv['timestamp']}, counter={dv['counter']}]"


# --------------------------------------------------------------------------------------------------
# LMQ: the queues RocketMQ wrote are the ones predicted from the records


def test_lmq_queues_are_predicted_exactly_from_the_records():
    m = manifest5("v5-lmq")
    recs = records("v5-lmq")
    pred = lmq.predict_dispatch(recs, cq_file_size=m["storeConfig"]["mappedFileSizeConsumeQueue"])
    assert pred.broker_starts and pred.stall is None
    on_disk = discover_queues(store5("v5-lmq") / "consumequeue")
    lmq_queues = [c for c in m["consumeQueues"] if c["topic"].startswith(L.LMQ_PREFIX)]
    assert len(lmq_queues) == 3
    for c in lmq_queues:
        units = pred.units_of(c["topic"])
        expected = [e[:4] for e in c["entries_[queueOffset,commitLogOffset,size,tagsCode,batchNum]"]]
        assert [[u.queue_offset, u.physical_offset, u.size, u.tags_code] for u in units] == expected
        read = [u for u in read_queue(on_disk[(c["topic"], 0)]) if u.kind == "entry"]  # the existing CQ reader
        assert [[u.queue_offset, u.physical_offset, u.size, u.tags_code] for u in read] == expected
        assert pred.queues[(c["topic"], 0)].max_offset == c["maxOffset"] == m["topicQueueTable"][f"{c['topic']}-0"]
    # the non-LMQ name last in the list: its "" offset is dropped by split, the counts differ, no unit of that
    # record is written, and room3's later units sit below the offsets its records carry
    mismatch = [s for s in pred.skips if s.reason == "count_mismatch"]
    notlmq = [r for r in recs if "NotLmqTopic" in r.properties.get(L.PROPERTY_INNER_MULTI_DISPATCH, "")]
    assert [s.physical_offset for s in mismatch] == [r.physical_offset for r in notlmq] and len(notlmq) == 10
    assert all(r.properties[L.PROPERTY_INNER_MULTI_QUEUE_OFFSET].endswith(",") for r in notlmq)
    room3 = pred.units_of("%LMQ%room3")
    assert [u.record_offset - u.queue_offset for u in room3] == list(range(10))
    # a %RETRY% topic is never multi-dispatched (and got no offsets at append)
    retry = [r for r in recs if r.topic.startswith(L.RETRY_GROUP_TOPIC_PREFIX)]
    assert retry and L.PROPERTY_INNER_MULTI_QUEUE_OFFSET not in retry[0].properties


# --------------------------------------------------------------------------------------------------
# Batch consume queue


def test_batch_consume_queue_units_are_the_raw_units():
    m = manifest5("v5-batchcq")
    queues = B.discover_batch_queues(store5("v5-batchcq"))
    batch = [c for c in m["consumeQueues"] if c["cqType"] == "BatchCQ"]
    assert sorted(queues) == sorted((c["topic"], c["queueId"]) for c in batch) and len(batch) == 2
    for c in batch:
        files = queues[(c["topic"], c["queueId"])]
        units = list(B.read_batch_queue(files))
        assert [(Path(u.file).name, u.unit_byte_offset, u.physical_offset, u.size, u.tags_code, u.store_timestamp,
                 u.msg_base_offset, u.batch_size, u.compacted_offset, u.reserved) for u in units] == \
            [(r["file"], r["unitByteOffset"], r["phyOffset"], r["size"], r["tagsCode"], r["storeTime"],
              r["msgBaseOffset"], r["batchSize"], r["compactedOffset"], r["reserved"]) for r in c["rawUnits"]]
        assert {u.kind for u in units} == {"entry"}
        assert B.max_offset(files) == c["maxOffset"]
        assert [[u.msg_base_offset, u.physical_offset, u.size, u.tags_code, u.batch_size] for u in units] == \
            c["entries_[queueOffset,commitLogOffset,size,tagsCode,batchNum]"]
        arrays = B.read_batch_unit_arrays(files[0])
        assert arrays.truncated is None
        assert arrays.batch_size.tolist() == [u.batch_size for u in units]
        assert arrays.msg_base_offset.tolist() == [u.msg_base_offset for u in units]


# --------------------------------------------------------------------------------------------------
# __CRC32#


def test_the_crc_property_of_every_v5_crc_record_verifies():
    m = manifest5("v5-crc")
    by_offset = {x["commitLogOffset"]: x for x in m["messages"]}
    size = m["storeConfig"]["mappedFileSizeCommitLog"]
    checked = 0
    for seg in list_segments(store5("v5-crc") / "commitlog"):
        with ReadOnlyMap(seg.path) as mm:
            frames = [f for f in walk_buffer(mm.buf, seg.name, seg.base_offset) if f.kind == "message"]
            for f in frames:
                x = by_offset[f.physical_offset]
                c = propcrc.check_record_crc(mm.buf, f.file_position, f.size, properties=f.message.properties)
                assert c.status == "ok" and c.force_ok
                assert c.computed == x["wholeRecordCrcRecomputed"] and c.stored_text == x["crc32PropertyRaw"]
                assert c.position == f.size - 20
                checked += 1
            bulk = propcrc.check_crc_many(mm.buf, [f.file_position for f in frames], [f.size for f in frames])
            assert (bulk.status == propcrc.OK).all() and bulk.force_ok.all()
            assert bulk.computed.tolist() == [by_offset[f.physical_offset]["wholeRecordCrcRecomputed"]
                                              for f in frames]
    assert checked == len(m["messages"]) == 311 and size == 262144


def test_records_written_without_the_property_are_absent_and_fail_a_forced_check():
    recs = records("v5-default")
    raw = [encode_record(r) for r in recs[:40]]
    assert {propcrc.check_record_crc(b).status for b in raw} == {"absent"}
    assert not any(propcrc.check_record_crc(b).force_ok for b in raw)


def test_a_changed_byte_under_the_crc_is_found(tmp_path):
    from store_format.write.damage import flip_bit_under_crc

    d = flip_bit_under_crc(store5("v5-crc"), tmp_path / "s")
    seg = tmp_path / "s" / d.path
    with ReadOnlyMap(seg) as mm:
        frames = [f for f in walk_buffer(mm.buf, seg.name, int(seg.name)) if f.kind == "message"]
        hit = [f for f in frames if f.file_position <= d.position < f.file_position + f.size]
        assert len(hit) == 1  # the framing still accepts the record: the body CRC matches
        statuses = propcrc.check_crc_many(mm.buf, [f.file_position for f in frames], [f.size for f in frames])
    bad = [f.file_position for f, s in zip(frames, statuses.status) if s != propcrc.OK]
    assert bad == [hit[0].file_position] and statuses.status[frames.index(hit[0])] == propcrc.MISMATCH


# --------------------------------------------------------------------------------------------------
# Timer records as 5.3.3 writes them


def test_fired_timer_records_are_reproduced_byte_for_byte_from_their_sources():
    """The fired re-put (TimerMessageStore.convert/convertMessage): from each rmq_sys_wheel_timer record, its
    unit's write time and the dequeue time it carries, the stored record's bytes.  REAL_TOPIC/REAL_QID and WAIT
    stay on disk (store-format-5x.md §2.3's correction)."""
    m = manifest5("v5-timer")
    seg = (store5("v5-timer") / "commitlog" / "00000000000000000000").read_bytes()
    units = {u["commitLogOffset"]: u for u in timer_manifest("v5-timer")["timerLogUnits"]}
    sources = {x["uniqKey"]: x for x in m["messages"] if x["topic"] == L.TIMER_TOPIC}
    fired = [x for x in m["messages"] if L.PROPERTY_TIMER_DEQUEUE_MS in x["properties"]]
    assert len(fired) == 13
    for x in fired:
        assert x["properties"][L.PROPERTY_REAL_TOPIC] == x["topic"] and x["properties"]["WAIT"] == "true"
        src = decode_record(seg, sources[x["uniqKey"]]["commitLogOffset"])
        unit = units[src.physical_offset]
        topic, qid, _props, string = convert_timer_record(src, unit["writeTimeMs"], False,
                                                          int(x["properties"][L.PROPERTY_TIMER_DEQUEUE_MS]))
        rec = dataclasses.replace(src, topic=topic, queue_id=qid, properties_raw=string, properties=None,
                                  queue_offset=x["queueOffset"], physical_offset=x["commitLogOffset"],
                                  store_timestamp=x["storeTimestamp"], body_crc=None, store_size=None)
        assert hashlib.sha256(encode_record(rec)).hexdigest() == x["rawSha256"]


# --------------------------------------------------------------------------------------------------
# POP bodies


def test_pop_bodies_as_the_broker_writes_them_parse_back():
    ck = P.PopCheckPoint(start_offset=0, pop_time=1_700_000_000_000, invisible_time=60_000, bit_map=0, num=2,
                         queue_id=1, topic="PopTopic", consumer_group="cgA", revive_offset=0,
                         queue_offset_diff=(0, 1), broker_name="broker-a")
    body = P.ck_body(ck)
    assert body.decode() == ('{"bm":0,"bn":"broker-a","c":"cgA","d":[0,1],"it":60000,"n":2,"pt":1700000000000,'
                             '"q":1,"reviveTime":1700000060000,"ro":0,"so":0,"t":"PopTopic"}')  # §6.1
    assert P.parse_pop_body("ck", body) == ck
    ack = P.AckMsg(0, 0, "cgA", "PopTopic", 1, 1_700_000_000_000, "broker-a")
    assert P.ack_body(ack).decode() == '{"ao":0,"bn":"broker-a","c":"cgA","pt":1700000000000,"q":1,"so":0,"t":"PopTopic"}'
    back = P.parse_pop_body("bAck", b'{"ao":-1,"aol":[0,2],"bn":"b","c":"g","pt":5,"q":1,"so":0,"t":"T"}')
    assert back.is_batch and back.offsets() == [0, 2]
    long_names = P.parse_pop_body("ack", b'{"ackOffset":3,"startOffset":1,"consumerGroup":"g","topic":"T",'
                                         b'"queueId":2,"popTime":9,"brokerName":"b"}')
    assert (long_names.ack_offset, long_names.queue_id) == (3, 2)
    with pytest.raises(P.PopBodyError) as e:
        P.parse_pop_body("ck", b'{"so":0,"pt":1,', file="seg", position=100)
    assert e.value.kind.value == "BAD_JSON" and e.value.file == "seg" and e.value.position >= 100


# --------------------------------------------------------------------------------------------------
# config files


def test_lmq_consumer_offsets_file(tmp_path):
    from store_format.config import consumer_offsets, lmq_consumer_offsets

    (tmp_path / "lmqConsumerOffset.json").write_text(
        '{"lmqOffsetTable":{"%LMQ%room1@%LMQ%g1":12,"%LMQ%room2@%LMQ%g1":3,"bad":1},'
        '"offsetTable":{"T@g":{0:4}},"dataVersion":{"counter":1}}')
    cfg = read_config(tmp_path, "lmqConsumerOffset.json")
    problems = []
    assert lmq_consumer_offsets(cfg, problems) == {("%LMQ%room1", "%LMQ%g1"): 12, ("%LMQ%room2", "%LMQ%g1"): 3}
    assert [p.field for p in problems] and consumer_offsets(cfg) == {("T", "g"): {0: 4}}


# --------------------------------------------------------------------------------------------------
# dump --what timerlog|timerwheel|timercheck


def _dump(store, what, *extra):
    r = subprocess.run([sys.executable, "-m", "store_format", "dump", str(store), "--what", what, *extra],
                       capture_output=True, text=True, cwd=REPO, timeout=120)
    return r.returncode, [json.loads(x) for x in r.stdout.splitlines()], r.stderr


def test_dump_shows_the_timer_store_with_file_and_position_on_every_row():
    rc, rows, err = _dump(store5("v5-timer"), "timerlog", "--strict")
    assert rc == 0 and "1 blank, 51 entry" in err
    assert all("file" in r and "file_position" in r for r in rows)
    assert [(r["timerlog_offset"], r["prev_pos"], r["magic"]) for r in rows if r["kind"] == "entry"] == \
        [(u[0], u[2], u[3]) for u in _manifest_units("v5-timer")]
    rc, rows, err = _dump(store5("v5-timer"), "timerwheel", "--strict")
    assert rc == 0 and len(rows) == 35 and {r["chain"] for r in rows} == {"complete"}
    assert all(r["file"] == "timerwheel" and r["file_position"] == r["slot_index"] * 32 for r in rows)
    rc, rows, err = _dump(store5("v5-timer"), "timercheck")
    assert rc == 0 and rows[0]["last_timer_log_flush_pos"] == 2672 and rows[0]["file_position"] == 0
    for what in ("timerlog", "timerwheel", "timercheck"):  # a 4.x store: nothing to show, not an error
        rc, rows, err = _dump(FIXTURES / "basic" / "store", what, "--strict")
        assert rc == 0 and rows == []
