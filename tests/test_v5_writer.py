"""The writer's 5.x side (the dispatchers of store_format/write/{batchcq,lmq,timer}.py, the 5.x flows of broker.py, the
5.3.3 profile of generate.py): the 5.3.3 fixtures' traffic replayed through it comes out byte for byte as RocketMQ wrote it (commitlog, consume queues, LMQ queues, batch consume
queues, timer log and wheel), the 5.x broker flows read back through the 5.x readers, and a 4.x writer is
untouched.  No Spark."""
from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from store_format import batchcq as B
from store_format import layout as L
from store_format import lmq
from store_format import pop as P
from store_format import propcrc
from store_format import timer as T
from store_format.commitlog import list_segments, walk_buffer
from store_format.consumequeue import discover_queues, read_queue
from store_format.errors import WriterError
from store_format.fs import ReadOnlyMap
from store_format.write.broker import ManualClock, Producer
from store_format.write.broker import Broker
from store_format.write.generate import Traffic5Config, config_5x, generate_store
from store_format.write.javaprops import property_map, to_string
from store_format.write.writer import StoreWriter, WriterConfig

from .test_v5_fixtures import manifest5, records, store5, timer_manifest
from .support.writer_support import files


def replay(name: str, out: Path, strip, **overrides) -> StoreWriter:
    """Append every record of a 5.3.3 fixture (bytes from its commitlog: the manifest leaves bodies over 512 bytes
    out) through a writer configured as the fixture's store, after ``strip`` takes off what the 5.x put path adds
    (the CRC property, INNER_MULTI_QUEUE_OFFSET, INNER_BASE); the writer must put it back the same way."""
    m = manifest5(name)
    cfg = WriterConfig.from_dict({**m["storeConfig"], "storeHost": m["messages"][0]["storeHost"], **overrides})
    w = StoreWriter(out, cfg, start_time=m["messages"][0]["storeTimestamp"])
    for topic, tc in m.get("topicConfigs", {}).items():
        w.register_topic(topic, tc["writeQueueNums"], attributes=tc.get("attributes"))
    for x, r in zip(m["messages"], records(name)):
        assert r.physical_offset == x["commitLogOffset"]
        given = dataclasses.replace(r, properties_raw=strip(r), properties=None, body_crc=None, store_size=None)
        stored = w.append(given)
        assert stored.physical_offset == x["commitLogOffset"] and stored.queue_offset == x["queueOffset"]
    return w


def assert_same_files(ours: Path, theirs: Path, sub: str) -> int:
    a, b = files(ours, sub), files(theirs, sub)
    assert [p.relative_to(ours) for p in a] == [p.relative_to(theirs) for p in b]
    for x, y in zip(a, b):
        assert x.read_bytes() == y.read_bytes(), f"{x.relative_to(ours)} differs"
    return len(a)


def _without(key: str):
    def strip(r):
        if key not in r.properties:
            return r.properties_raw
        m = property_map(r.properties_raw)
        m.remove(key)
        return to_string(m, True)
    return strip


def test_v5_crc_is_reproduced_byte_for_byte(tmp_path):
    """enabledAppendPropCRC: each record's __CRC32# computed over the bytes as stored (offsets and store time
    patched) -- the commitlog, consume queues and the index files' contents are RocketMQ's."""
    w = replay("v5-crc", tmp_path / "s", lambda r: r.properties_raw[:-L.CRC32_RESERVED_LEN])
    assert w.config.enabledAppendPropCRC and w.rocketmq5 and w.timer is None
    w.close()
    assert assert_same_files(tmp_path / "s", store5("v5-crc"), "commitlog") == 2
    assert assert_same_files(tmp_path / "s", store5("v5-crc"), "consumequeue") == 13
    ours, theirs = files(tmp_path / "s", "index"), files(store5("v5-crc"), "index")
    assert [x.read_bytes() for x in ours] == [x.read_bytes() for x in theirs]  # names: the JVM's wall clock


def test_v5_lmq_is_reproduced_byte_for_byte(tmp_path):
    """wrapLmqDispatch at append (offsets, "" for NotLmqTopic, WAIT kept) and multiDispatchLmqQueue at dispatch
    (the count-mismatch skip, the dense append): the commitlog and every consume queue, LMQ ones included."""
    w = replay("v5-lmq", tmp_path / "s", _without(L.PROPERTY_INNER_MULTI_QUEUE_OFFSET))
    w.close()
    assert assert_same_files(tmp_path / "s", store5("v5-lmq"), "commitlog") == 1
    assert assert_same_files(tmp_path / "s", store5("v5-lmq"), "consumequeue") == 8
    assert (tmp_path / "s" / "consumequeue" / "%LMQ%room3").is_dir()


def test_v5_batchcq_is_reproduced_byte_for_byte(tmp_path):
    """queue.type=BatchCQ: the batch counter, INNER_BASE added to inner batches, 46-byte units."""
    w = replay("v5-batchcq", tmp_path / "s", _without(L.PROPERTY_INNER_BASE))
    w.close()
    assert assert_same_files(tmp_path / "s", store5("v5-batchcq"), "commitlog") == 1
    assert assert_same_files(tmp_path / "s", store5("v5-batchcq"), "consumequeue") == 2
    assert assert_same_files(tmp_path / "s", store5("v5-batchcq"), "batchconsumequeue") == 2
    assert '"attributes":{' in (tmp_path / "s" / "config" / "topics.json").read_text().replace("\n", "").replace(
        "\t", "")


def test_v5_timer_log_and_wheel_are_reproduced_given_the_same_times(tmp_path):
    """Every rmq_sys_wheel_timer record enqueued at its store time: the 52-byte units (rolls, deletes), the
    blank at the end of the first 2,048-byte file, the sparse wheel's slots, and the checkpoint's offsets."""
    t = timer_manifest("v5-timer")
    w = replay("v5-timer", tmp_path / "s", lambda r: r.properties_raw, timerWheelEnable=True)
    w.timer.catch_up(t["timerCheckpoint (TimerCheckpoint class)"]["lastReadTimeMs"])
    w.close()
    out, src = tmp_path / "s", store5("v5-timer")
    assert assert_same_files(out, src, "commitlog") == 1
    assert assert_same_files(out, src, "consumequeue") == 7
    assert assert_same_files(out, src, "timerlog") == 2
    assert (out / "timerwheel").read_bytes() == (src / "timerwheel").read_bytes()
    assert (out / "timerwheel").stat().st_blocks * 512 < 1 << 20  # sparse, as the broker leaves it
    ours, theirs = (out / "config" / "timercheck").read_bytes(), (src / "config" / "timercheck").read_bytes()
    assert len(ours) == len(theirs) == 4096 and ours[:32] == theirs[:32]  # the rest: the flush ticks' version
    metrics = T.read_timer_metrics(out / "config")
    assert metrics.timing_count["TimerTopic2"][0] == 10  # raw replay: nothing dequeued through the timer


# --------------------------------------------------------------------------------------------------
# 4.x output stays what it was


def test_a_4x_writer_has_no_5x_side(tmp_path):
    cfg = WriterConfig()
    assert not cfg.is_5x and not cfg.enabledAppendPropCRC and not cfg.timerWheelEnable and not cfg.enableLmq
    w = StoreWriter(tmp_path / "s", cfg)
    assert not w.rocketmq5
    w.close()
    assert not (tmp_path / "s" / "timerwheel").exists() and not (tmp_path / "s" / "config" / "timercheck").exists()


# --------------------------------------------------------------------------------------------------
# Broker flows


START = 1_795_786_365_000


@pytest.fixture
def b5(tmp_path):
    cfg = WriterConfig(storeHost="192.168.0.10:10911", mappedFileSizeCommitLog=1 << 20, mappedFileSizeTimerLog=2048,
                       timerWheelEnable=True, enableLmq=True, enableMultiDispatch=True, enabledAppendPropCRC=True)
    w = StoreWriter(tmp_path / "s", cfg, clock=ManualClock(START))
    yield Broker(w), Producer(born_host="10.1.2.3:50000")
    if not w._closed:
        w.close()


def _all_records(root: Path):
    out = []
    for seg in list_segments(root / "commitlog"):
        with ReadOnlyMap(seg.path) as m:
            frames = [f for f in walk_buffer(m.buf, seg.name, seg.base_offset) if f.kind == "message"]
            crcs = propcrc.check_crc_many(m.buf, [f.file_position for f in frames], [f.size for f in frames])
            assert (crcs.status == propcrc.OK).all()  # every record carries a valid __CRC32#
            out.extend(f.message for f in frames)
    return out


def test_timer_flow_enqueue_fire_roll_recall(b5, tmp_path):
    broker, p = b5
    short = broker.send(p, "TimerTopic", b"short", delay_sec=3, queue_id=0, keys="short")
    boundary = broker.send(p, "TimerTopic", b"edge", deliver_ms=START + 5000, queue_id=1)
    far = broker.send(p, "TimerTopic", b"far", deliver_ms=START + 2 * 86_400_000 + 3_600_000, queue_id=1)
    gone = broker.send(p, "TimerTopic", b"gone", delay_sec=100, queue_id=0)
    past = broker.send(p, "TimerTopic", b"past", deliver_ms=START - 1, queue_id=0)
    recall = broker.recall(p, "TimerTopic", gone.msg_id, int(gone.record.properties[L.PROPERTY_TIMER_OUT_MS]) + 1)
    with pytest.raises(WriterError, match="WHEEL_TIMER_MSG_ILLEGAL"):
        broker.send(p, "TimerTopic", b"x", delay_sec=4 * 86_400)
    assert short.record.topic == L.TIMER_TOPIC and short.record.properties[L.PROPERTY_REAL_TOPIC] == "TimerTopic"
    assert boundary.record.properties[L.PROPERTY_TIMER_OUT_MS] == str(START + 4000)  # on the boundary: one earlier
    assert past.record.topic == "TimerTopic"  # not in the future: stored as it is
    assert recall.topic == L.TIMER_TOPIC and recall.properties[L.PROPERTY_TIMER_DEL_UNIQKEY] == \
        f"TimerTopic+{gone.msg_id}"
    fired = broker.run_timers(START + 3 * 86_400_000)
    outcome = {(f.source.uniq_key, f.outcome) for f in fired if f.source is not None}
    assert (short.msg_id, "fired") in outcome and (boundary.msg_id, "fired") in outcome
    assert (gone.msg_id, "recalled") in outcome and (far.msg_id, "rolled") in outcome
    final = [f.record for f in fired if f.outcome == "fired" and f.source.uniq_key == far.msg_id]
    assert final and final[0].properties[L.PROPERTY_TIMER_ROLL_TIMES] == "1" and final[0].topic == "TimerTopic"
    for f in fired:
        if f.outcome == "fired":  # REAL_TOPIC/REAL_QID stay on disk; the enqueue and dequeue times are added
            assert f.record.properties[L.PROPERTY_REAL_TOPIC] == f.record.topic
            assert int(f.record.properties[L.PROPERTY_TIMER_DEQUEUE_MS]) >= int(
                f.record.properties[L.PROPERTY_TIMER_OUT_MS])
    broker.writer.close()
    root = tmp_path / "s"
    recs = {r.physical_offset: r for r in _all_records(root)}
    units = [u for f in T.list_timer_log_files(root) for u in T.walk_timer_log(f)]
    assert {u.kind for u in units} == {"entry"}
    names = [T.magic_name(u.magic) for u in units]
    assert names.count("roll") == 1 and names.count("delete") == 1
    for u in units:
        assert recs[u.physical_offset].topic == L.TIMER_TOPIC and recs[u.physical_offset].store_size == u.store_size
    wheel = T.read_wheel_slots(root / "timerwheel")
    with T.TimerLog(root) as log:
        assert {T.walk_chain(log, r["last_pos"]).end for r in wheel.rows()} == {"complete"}
    cp = T.read_timer_checkpoint(root / "config" / "timercheck")
    assert cp.problem is None and cp.last_timer_log_flush_pos == units[-1].timerlog_offset + 52
    assert cp.last_read_time_ms == START + 3 * 86_400_000
    assert cp.last_timer_queue_offset == max(r.queue_offset for r in recs.values() if r.topic == L.TIMER_TOPIC) + 1
    metrics = T.read_timer_metrics(root / "config")
    assert metrics.timing_count["TimerTopic"][0] == 0  # everything fired, dropped or deleted


def test_lmq_flow_mishandling_is_written_as_predicted(b5, tmp_path):
    broker, p = b5
    broker.send(p, "LmqParent", b"a", lmq=["%LMQ%a", "%LMQ%b"])
    broker.send(p, "LmqParent", b"b", lmq=["%LMQ%a", "NotLmqTopic"])  # last: counts differ, no unit
    broker.send(p, "LmqParent", b"c", lmq=["%LMQ%a", "%LMQ%a"])  # twice: one unit, +2
    broker.send(p, "LmqParent", b"d", lmq=["%LMQ%a", "%LMQ%x/y"])  # a '/': offset, no queue
    broker.send(p, "%RETRY%g", b"e", lmq=["%LMQ%a"])  # a retry topic: no multi-dispatch
    broker.send(p, "LmqParent", b"f", lmq="%LMQ%a")
    broker.writer.close()
    root = tmp_path / "s"
    recs = _all_records(root)
    assert recs[1].properties[L.PROPERTY_INNER_MULTI_QUEUE_OFFSET] == "1,"
    assert recs[2].properties[L.PROPERTY_INNER_MULTI_QUEUE_OFFSET] == "2,2"
    pred = lmq.predict_dispatch(recs, cq_file_size=broker.config.mappedFileSizeConsumeQueue)
    disk = discover_queues(root / "consumequeue")
    for q in ("%LMQ%a", "%LMQ%b"):
        assert [(u.queue_offset, u.physical_offset, u.size, u.tags_code) for u in pred.units_of(q)] == \
            [(u.queue_offset, u.physical_offset, u.size, u.tags_code) for u in read_queue(disk[(q, 0)])]
    assert [u.record_offset for u in pred.units_of("%LMQ%a")] == [0, 2, 4, 5]  # offsets stop matching
    assert {s.reason for s in pred.skips} >= {"count_mismatch", "already_dispatched", "path_separator"}
    assert not (root / "abort").exists()


def test_a_non_lmq_name_before_the_last_stalls_dispatch_and_the_broker_keeps_abort(b5, tmp_path):
    broker, p = b5
    ok = broker.send(p, "LmqParent", b"a", lmq="%LMQ%a", queue_id=0)
    bad = broker.send(p, "LmqParent", b"b", lmq=["%LMQ%a", "NotLmqTopic", "%LMQ%b"], queue_id=0)
    after = broker.send(p, "LmqParent", b"c", lmq="%LMQ%a", keys="after", queue_id=0)
    assert bad.record.properties[L.PROPERTY_INNER_MULTI_QUEUE_OFFSET] == "1,,0"
    broker.writer.close()
    root = tmp_path / "s"
    assert (root / "abort").exists()  # "CommitLog have not finish to be dispatched"
    pred = lmq.predict_dispatch(_all_records(root))
    assert not pred.broker_starts and pred.undispatched_from == bad.record.physical_offset
    disk = discover_queues(root / "consumequeue")
    assert [u.physical_offset for u in read_queue(disk[("%LMQ%a", 0)])] == \
        [u.physical_offset for u in pred.units_of("%LMQ%a")] == [ok.record.physical_offset, bad.record.physical_offset]
    main = [u.physical_offset for u in read_queue(disk[("LmqParent", 0)])]
    assert main == [ok.record.physical_offset, bad.record.physical_offset]  # nothing after the stall is dispatched
    assert ("NotLmqTopic", 0) not in disk and ("%LMQ%b", 0) not in disk


def test_pop_flow_checkpoints_acks_and_revive(b5, tmp_path):
    broker, p = b5
    sent = [broker.send(p, "PopTopic", f"m{i}".encode(), queue_id=0, tags="T") for i in range(4)]
    got = broker.pop("cgA", "PopTopic", 0, 3, invisible_time=10_000)
    assert got.checkpoint.offsets() == [0, 1, 2] and got.ck_record.topic == L.TIMER_TOPIC
    assert got.ck_record.properties[L.PROPERTY_TIMER_DELIVER_MS] == str(got.checkpoint.revive_time - 1000)
    assert got.ck_record.properties[L.PROPERTY_REAL_TOPIC] == L.revive_topic("DefaultCluster")
    ack = broker.ack(got, [0, 2])  # a batch ack
    assert ack.tags == L.POP_BATCH_ACK_TAG and ack.uniq_key.endswith("@-1@cgA@" + str(got.checkpoint.pop_time) +
                                                                     "@broker-a@ack")
    retried = broker.revive(got.checkpoint.pop_time + 20_000)
    assert [r.body for r in retried] == [b"m1"] and retried[0].topic == "%RETRY%cgA_PopTopic"
    assert retried[0].reconsume_times == 1 and retried[0].properties["1ST_POP_TIME"] == str(got.checkpoint.pop_time)
    broker.writer.close()
    revive = [r for r in _all_records(tmp_path / "s") if P.is_revive_topic(r.topic)]
    kinds = sorted(P.read_revive_record(r).kind for r in revive)
    assert kinds == ["bAck", "ck"]
    assert len(sent) == 4


def test_inner_batch_to_a_batchcq_topic(b5, tmp_path):
    from store_format.write.broker import BatchItem

    broker, p = b5
    broker.writer.register_topic("BatchTopic", 1, attributes={L.TOPIC_ATTRIBUTE_QUEUE_TYPE: L.QUEUE_TYPE_BATCH})
    broker.send_inner_batch(p, "BatchTopic", [BatchItem(b"x%d" % i) for i in range(3)], queue_id=0)
    broker.send_inner_batch(p, "BatchTopic", [BatchItem(b"y")], queue_id=0)
    broker.send(p, "BatchTopic", b"single", queue_id=0)
    broker.writer.close()
    files = B.discover_batch_queues(tmp_path / "s")[("BatchTopic", 0)]
    assert [(u.msg_base_offset, u.batch_size) for u in B.read_batch_queue(files)] == [(0, 3), (3, 1), (4, 1)]
    assert B.max_offset(files) == 5
    recs = _all_records(tmp_path / "s")
    assert [r.properties.get(L.PROPERTY_INNER_BASE) for r in recs] == ["0", "3", None]
    assert recs[0].sys_flag & (L.INNER_BATCH_FLAG | L.NEED_UNWRAP_FLAG) == L.INNER_BATCH_FLAG | L.NEED_UNWRAP_FLAG


def test_generate_rocketmq_5_is_a_readable_deterministic_5x_store(tmp_path):
    cfg = config_5x(WriterConfig(mappedFileSizeCommitLog=1 << 20, mappedFileSizeTimerLog=8192))
    stats = generate_store(tmp_path / "a", Traffic5Config(messages=600, seed=3), cfg)
    generate_store(tmp_path / "b", Traffic5Config(messages=600, seed=3), cfg)
    assert stats["messages"] > 600 and stats["pops"] > 0
    for sub in ("commitlog", "timerlog", "batchconsumequeue"):
        assert [x.read_bytes() for x in files(tmp_path / "a", sub)] == [x.read_bytes() for x in files(tmp_path / "b", sub)]
    root = tmp_path / "a"
    recs = _all_records(root)
    topics = {r.topic for r in recs}
    assert {L.TIMER_TOPIC, "LmqParent", "BatchTopic", L.revive_topic("DefaultCluster")} <= topics
    assert any(r.topic.startswith("%RETRY%") for r in recs)
    units = [u for f in T.list_timer_log_files(root) for u in T.walk_timer_log(f)]
    assert units and "corrupt" not in {u.kind for u in units}
    pred = lmq.predict_dispatch(recs, cq_file_size=cfg.mappedFileSizeConsumeQueue)
    disk = discover_queues(root / "consumequeue")
    lmqs = [q for q in disk if q[0].startswith(L.LMQ_PREFIX)]
    assert lmqs and pred.broker_starts
    for q in lmqs:
        assert [u.physical_offset for u in read_queue(disk[q]) if u.kind == "entry"] == \
            [u.physical_offset for u in pred.units_of(q[0]) if u.kind == "entry"]
    assert any(r.properties.get(L.PROPERTY_TIMER_DEQUEUE_MS) for r in recs)  # some timers fired
    assert not (root / "abort").exists()
