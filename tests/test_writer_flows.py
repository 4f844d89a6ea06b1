"""Broker flows (store_format.write.broker): what the broker stores for each client action, read back through
the readers, and the real broker's own store reproduced byte for byte."""
from __future__ import annotations

import base64

import pytest

from store_format import layout as L
from store_format.write.broker import BatchItem, Broker, ManualClock, Producer
from store_format.compression import decompress
from store_format.config import consumer_offsets, delay_offsets, read_config, subscription_groups, topic_configs
from store_format.errors import WriterError
from store_format.write.generate import TrafficConfig, generate_store
from store_format.ids import parse_uniq_key
from store_format.javahash import java_hash
from store_format.properties import parse_properties
from store_format.store import Store
from store_format.write.writer import StoreWriter, WriterConfig

from .conftest import fixture_manifest, fixture_store
from .support.writer_support import ScriptedClock, files, fixture_config


def keys_of(props: str) -> list[str]:
    return [kv.split("\x01")[0] for kv in props.split("\x02")] if props else []


# --------------------------------------------------------------------------------------------------
# The broker fixture, replayed through the broker API


def test_broker_api_reproduces_the_broker_fixture(tmp_path):
    """Feed the client actions of the `broker` fixture (bodies, tags, keys, the client's UNIQ_KEYs and the
    recorded clock) through Broker: the commitlog, consume queues, index and checkpoint come out as the real
    BrokerController wrote them.  Property order, WAIT handling, CLUSTER, REAL_TOPIC/REAL_QID, the batch's
    double WAIT, the half/commit/op records and the retry/DLQ send-backs all have to be right for that."""
    manifest, src = fixture_manifest("broker"), fixture_store("broker")
    m = manifest["messages"]
    body = lambda i: base64.b64decode(m[i]["body"])
    # clock readings in the order the broker takes them: born + store per send, one store per batch,
    # store for a commit, born + store for an op, store for a send-back or a delivery, then shutdown
    ticks = []
    for i in range(14):
        ticks += [m[i]["bornTimestamp"], m[i]["storeTimestamp"]]
    ticks += [m[14]["bornTimestamp"], m[14]["storeTimestamp"]]
    for i in (17, 18):
        ticks += [m[i]["bornTimestamp"], m[i]["storeTimestamp"]]
    ticks += [m[19]["storeTimestamp"], m[20]["bornTimestamp"], m[20]["storeTimestamp"]]
    ticks += [m[21]["bornTimestamp"], m[21]["storeTimestamp"]]
    ticks += [m[22]["storeTimestamp"], m[23]["storeTimestamp"], m[24]["storeTimestamp"], m[24]["storeTimestamp"]]
    cfg = fixture_config(manifest, storeHost=m[0]["storeHost"])
    w = StoreWriter(tmp_path / "s", cfg, clock=ScriptedClock(ticks), start_time=m[0]["storeTimestamp"] - 5000)
    broker = Broker(w)
    p = Producer(group="pg-broker", born_host=m[0]["bornHost"])
    sent = [broker.send(p, "BrokerTopic", body(i), tags=m[i]["tags"], keys=m[i]["keys"], uniq_key=m[i]["uniqKey"])
            for i in range(12)]
    assert [s.queue_id for s in sent] == [0, 1, 2, 3] * 3  # the producer's round robin over 4 queues
    broker.send(p, "BrokerTopic", body(12), tags=m[12]["tags"], keys=m[12]["keys"], properties={"用户属性": "值"},
                uniq_key=m[12]["uniqKey"])
    broker.send(p, "BrokerTopic", body(13), tags="TagD", keys="bk-delay", delay_level=2, uniq_key=m[13]["uniqKey"],
                queue_id=1)
    batch = broker.send_batch(p, "BrokerBatch", [BatchItem(body(i), tags="TagB", keys=m[i]["keys"],
                                                           uniq_key=m[i]["uniqKey"]) for i in (14, 15, 16)])
    assert batch.offset_msg_id == manifest["sends"][14]["offsetMsgId"]
    h0 = broker.send_half(p, "BrokerTx", body(17), tags="TagTx", keys="btx-0", uniq_key=m[17]["uniqKey"], queue_id=0)
    h1 = broker.send_half(p, "BrokerTx", body(18), tags="TagTx", keys="btx-1", uniq_key=m[18]["uniqKey"], queue_id=0)
    broker.end_transaction(h0, commit=True)
    broker.end_transaction(h1, commit=False)
    broker.send_back("cg-broker", sent[0].record)
    broker.send_back("cg-broker", sent[1].record, delay_level=-1)
    delivered = broker.deliver_due(m[24]["storeTimestamp"])
    assert [d.physical_offset for d in delivered] == [m[24]["commitLogOffset"]]
    for q, off in {0: 1, 1: 2, 2: 3, 3: 4}.items():
        broker.commit_offset("cg-broker", "BrokerTopic", q, off)
    w.close()
    out = tmp_path / "s"
    for sub in ("commitlog", "consumequeue"):
        ours, theirs = files(out, sub), files(src, sub)
        assert [x.relative_to(out) for x in ours] == [x.relative_to(src) for x in theirs]
        assert [x.read_bytes() for x in ours] == [x.read_bytes() for x in theirs]
    assert [x.read_bytes() for x in files(out, "index")] == [x.read_bytes() for x in files(src, "index")]
    assert (out / "checkpoint").read_bytes() == (src / "checkpoint").read_bytes()
    for name in ("consumerOffset.json", "delayOffset.json"):
        assert (out / "config" / name).read_text() == manifest["configFiles"][name]
    assert topic_configs(read_config(out / "config", "topics.json")) == \
        topic_configs(read_config(src / "config", "topics.json"))


# --------------------------------------------------------------------------------------------------
# One flow at a time


@pytest.fixture
def broker(tmp_path):
    w = StoreWriter(tmp_path / "s", WriterConfig(storeHost="192.168.0.2:10911"), clock=ManualClock(1_700_000_000_000))
    b = Broker(w)
    yield b
    if not w._closed:
        w.close()


def reopen(b: Broker) -> Store:
    b.writer.close()
    return Store(b.writer.root)


def test_send(broker):
    p = Producer(born_host="10.1.2.3:52345", client_ip="10.1.2.3", pid=99, class_loader_hash=7)
    r = broker.send(p, "Orders", b"hello", tags="TagA", keys=["k1", "k2"], properties={"city": "上海", "empty": ""})
    st = reopen(broker)
    msg = st.read_message(r.record.physical_offset)
    assert msg.body == b"hello" and msg.topic == "Orders" and msg.queue_id == 0 and msg.sys_flag == 0
    assert msg.born_host == "10.1.2.3:52345" and msg.store_host == "192.168.0.2:10911"
    assert msg.born_timestamp < msg.store_timestamp
    props = parse_properties(msg.properties_raw)
    # WAIT is not stored, CLUSTER is added, the empty value was dropped by the broker's parse
    assert props == {"KEYS": "k1 k2", "TAGS": "TagA", "CLUSTER": "DefaultCluster", "city": "上海",
                     "UNIQ_KEY": r.msg_id}
    uk = parse_uniq_key(r.msg_id)
    assert (uk.client_ip, uk.pid, uk.class_loader_hash) == (bytes([10, 1, 2, 3]), 99, 7)
    assert uk.timestamp(msg.born_timestamp) == msg.born_timestamp
    [unit] = list(st.consume_queue("Orders", 0))
    assert (unit.physical_offset, unit.size, unit.tags_code) == (msg.physical_offset, msg.store_size, java_hash("TagA"))
    for key in (r.msg_id, "k1", "k2"):
        assert [x.physical_offset for x in st.query_key("Orders", key)] == [msg.physical_offset]


def test_round_robin_and_reserved_properties(broker):
    p = Producer()
    assert [broker.send(p, "T", b"x").queue_id for _ in range(6)] == [0, 1, 2, 3, 0, 1]
    with pytest.raises(WriterError, match="reserved"):
        broker.send(p, "T", b"x", properties={"UNIQ_KEY": "forged"})


@pytest.mark.parametrize("kind,flag", [("ZLIB", 0x301), ("LZ4", 0x101), ("ZSTD", 0x201)])
def test_producer_compresses_large_bodies(broker, kind, flag):
    p = Producer(compress_type=kind)
    big = b"payload " * 1000
    small = broker.send(p, "Z", b"tiny" * 10)
    large = broker.send(p, "Z", big)
    st = reopen(broker)
    s, l = st.read_message(small.record.physical_offset), st.read_message(large.record.physical_offset)
    assert s.sys_flag == 0 and s.compression == "NONE"
    assert l.sys_flag == flag and l.compression == kind and len(l.body) < len(big)
    assert l.decompressed_body() == big and decompress(l.body, kind) == big
    assert l.body_crc_ok  # the CRC covers the compressed bytes


def test_batch(broker):
    p = Producer()
    r = broker.send_batch(p, "B", [BatchItem(b"a", tags="T1", keys="x"), {"body": b"b", "keys": "y"},
                                   BatchItem(b"c", properties={"u": "1"})])
    st = reopen(broker)
    msgs = [st.read_message(x.physical_offset) for x in r.records]
    assert [m.queue_offset for m in msgs] == [0, 1, 2]
    assert len({m.store_timestamp for m in msgs}) == 1 and len({m.born_timestamp for m in msgs}) == 1
    for m in msgs:
        keys = keys_of(m.properties_raw)
        assert keys.count("WAIT") == 2 and keys[-2:] == ["CLUSTER", "WAIT"]  # the batch's own properties
    assert r.msg_id.split(",") == [m.uniq_key for m in msgs]


def test_batch_never_straddles_a_segment(tmp_path):
    w = StoreWriter(tmp_path / "s", WriterConfig(mappedFileSizeCommitLog=1200), clock=ManualClock())
    b = Broker(w)
    p = Producer()
    first = b.send(p, "B", b"x" * 600)
    r = b.send_batch(p, "B", [BatchItem(b"y" * 50) for _ in range(3)])
    assert [x.physical_offset for x in r.records][0] == 1200  # the whole batch moved to the next segment
    w.close()
    frames = list(Store(tmp_path / "s").walk_commitlog())
    assert [f.kind for f in frames] == ["message", "blank", "message", "message", "message", "stop"]
    assert frames[1].file_position == first.record.store_size


def test_delay_then_delivery(broker):
    p = Producer()
    r = broker.send(p, "T", b"later", tags="TagD", keys="kd", delay_level=3, queue_id=2)
    sched = r.record
    props = parse_properties(sched.properties_raw)
    assert (sched.topic, sched.queue_id) == (L.SCHEDULE_TOPIC, 2)
    assert props["REAL_TOPIC"] == "T" and props["REAL_QID"] == "2" and props["DELAY"] == "3" and props["WAIT"] == "true"
    due = sched.store_timestamp + 10_000
    assert broker.pending_deliveries() == [(due, 3, 0)]
    assert broker.deliver_due(due - 1) == []
    [real] = broker.deliver_due(due)
    assert (real.topic, real.queue_id, real.store_timestamp) == ("T", 2, due)
    assert real.properties_raw == sched.properties_raw  # built before DELAY is cleared: kept, with REAL_*
    assert (real.born_timestamp, real.born_host, real.body) == (sched.born_timestamp, sched.born_host, b"later")
    clamp = broker.send(p, "T", b"x", delay_level=99).record
    assert parse_properties(clamp.properties_raw)["DELAY"] == "18" and clamp.queue_id == 17
    st = reopen(broker)
    [unit] = list(st.consume_queue(L.SCHEDULE_TOPIC, 2))
    assert unit.tags_code == due  # the schedule queue's tagsCode is the deliver time
    assert delay_offsets(st.config("delayOffset.json")) == {3: 1}
    assert [m.physical_offset for m in st.query_key(L.SCHEDULE_TOPIC, "kd")] == [sched.physical_offset]
    assert [m.physical_offset for m in st.query_key("T", "kd")] == [real.physical_offset]


def test_transactions(broker):
    p = Producer(group="pg-tx")
    halves = [broker.send_half(p, "Tx", f"t{i}".encode(), tags="TagTx", keys=f"tx{i}", queue_id=1) for i in range(3)]
    commit, op0 = broker.end_transaction(halves[0], commit=True)
    none, op1 = broker.end_transaction(halves[1], commit=False)
    assert none is None
    assert [h.physical_offset for h in broker.unresolved_halves()] == [halves[2].record.physical_offset]
    with pytest.raises(WriterError):
        broker.end_transaction(halves[0], commit=True)  # already resolved
    st = reopen(broker)
    h = st.read_message(halves[0].record.physical_offset)
    hp = parse_properties(h.properties_raw)
    assert (h.topic, h.queue_id, h.tran_type) == (L.TRANS_HALF_TOPIC, 0, "NOT")
    assert hp["TRAN_MSG"] == "true" and hp["PGROUP"] == "pg-tx" and hp["REAL_TOPIC"] == "Tx" and hp["REAL_QID"] == "1"
    c = st.read_message(commit.physical_offset)
    assert (c.topic, c.queue_id, c.tran_type, c.prepared_transaction_offset) == ("Tx", 1, "COMMIT", h.physical_offset)
    assert c.properties_raw == h.properties_raw and c.born_timestamp == h.born_timestamp
    for op, half in ((op0, halves[0]), (op1, halves[1])):
        o = st.read_message(op.physical_offset)
        assert (o.topic, o.queue_id, o.tags, o.sys_flag) == (L.TRANS_OP_HALF_TOPIC, 0, "d", 0)
        assert o.body == str(half.record.queue_offset).encode() and o.born_host == o.store_host
        assert o.properties_raw == "WAIT\x01true\x02TAGS\x01d" and o.uniq_key is None
    assert [u.tags_code for u in st.consume_queue(L.TRANS_OP_HALF_TOPIC, 0)] == [100, 100]  # "d".hashCode()
    assert [u.physical_offset for u in st.consume_queue("Tx", 1)] == [commit.physical_offset]
    assert len(list(st.consume_queue(L.TRANS_HALF_TOPIC, 0))) == 3


def test_consumer_send_back_retry_then_dlq(broker):
    p = Producer()
    orig = broker.send(p, "Orders", b"pay", tags="TagA", keys="o-1").record
    s1 = broker.send_back("cg", orig)
    assert (s1.topic, s1.queue_id, s1.reconsume_times) == (L.SCHEDULE_TOPIC, 2, 1)  # level 3 + 0
    p1 = parse_properties(s1.properties_raw)
    assert p1["REAL_TOPIC"] == "%RETRY%cg" and p1["RETRY_TOPIC"] == "Orders" and p1["WAIT"] == "false"
    assert p1["ORIGIN_MESSAGE_ID"] == orig.msg_id and p1["UNIQ_KEY"] == orig.uniq_key
    [r1] = broker.deliver_due(s1.store_timestamp + 10_000)
    assert (r1.topic, r1.reconsume_times) == ("%RETRY%cg", 1)
    s2 = broker.send_back("cg", r1)
    p2 = parse_properties(s2.properties_raw)
    assert (s2.queue_id, s2.reconsume_times, p2["DELAY"]) == (3, 2, "4")  # 3 + reconsumeTimes
    assert p2["ORIGIN_MESSAGE_ID"] == orig.msg_id and p2["RETRY_TOPIC"] == "Orders"  # kept from the first
    [r2] = broker.deliver_due(s2.store_timestamp + 30_000)
    dlq = broker.send_back("cg", r2, max_reconsume_times=2)
    assert (dlq.topic, dlq.queue_id, dlq.reconsume_times) == ("%DLQ%cg", 0, 3)
    assert parse_properties(dlq.properties_raw)["DELAY"] == "0"
    give_up = broker.send_back("cg", orig, delay_level=-1)
    assert give_up.topic == "%DLQ%cg" and give_up.reconsume_times == 1
    broker.commit_offset("cg", "Orders", 0, 1)
    st = reopen(broker)
    topics = topic_configs(st.config("topics.json"))
    assert topics["%RETRY%cg"]["writeQueueNums"] == topics["%DLQ%cg"]["writeQueueNums"] == 1
    assert "cg" in subscription_groups(st.config("subscriptionGroup.json"))
    assert consumer_offsets(st.config("consumerOffset.json")) == {("Orders", "cg"): {0: 1}}
    assert [m.physical_offset for m in st.query_key("%DLQ%cg", "o-1")] == [dlq.physical_offset, give_up.physical_offset]


def test_default_retry_limit_is_16(broker):
    p = Producer()
    msg = broker.send(p, "T", b"x").record
    msg.reconsume_times = 0
    stored = broker.writer.read_record(msg.physical_offset)
    # a record consumed for the 16th time goes to the DLQ
    rec = broker.writer.append(type(stored)(topic="%RETRY%g", body=b"x", properties_raw=stored.properties_raw,
                                            store_timestamp=stored.store_timestamp + 1, reconsume_times=16,
                                            born_host=stored.born_host, store_host=stored.store_host))
    assert broker.send_back("g", rec).topic == "%DLQ%g"
    rec15 = broker.writer.append(type(stored)(topic="%RETRY%g", body=b"x", properties_raw=stored.properties_raw,
                                              store_timestamp=stored.store_timestamp + 2, reconsume_times=15,
                                              born_host=stored.born_host, store_host=stored.store_host))
    assert broker.send_back("g", rec15).topic == L.SCHEDULE_TOPIC


# --------------------------------------------------------------------------------------------------
# Generated traffic obeys every dispatch rule


@pytest.mark.slow
def test_generated_store_obeys_the_dispatch_rules(tmp_path):
    cfg = WriterConfig(mappedFileSizeCommitLog=2_000_000, mappedFileSizeConsumeQueue=6000, maxHashSlotNum=1000,
                       maxIndexNum=4000)
    stats = generate_store(tmp_path / "g", TrafficConfig(messages=24_000, topics=5, queues=3, seed=11), cfg)
    assert stats["messages"] == 24_000 and stats["segments"] > 1
    st = Store(tmp_path / "g", hash_slot_num=1000, index_num=4000)
    msgs = list(st.messages())
    assert len(msgs) == 24_000
    by_off = {m.physical_offset: m for m in msgs}
    kinds = {"schedule": 0, "half": 0, "op": 0, "commit": 0, "retry": 0, "dlq": 0, "v6": 0, "zip": set(), "batch": 0}
    for m in msgs:
        kinds["schedule"] += m.topic == L.SCHEDULE_TOPIC
        kinds["half"] += m.topic == L.TRANS_HALF_TOPIC
        kinds["op"] += m.topic == L.TRANS_OP_HALF_TOPIC
        kinds["commit"] += m.tran_type == "COMMIT"
        kinds["retry"] += m.topic.startswith("%RETRY%")
        kinds["dlq"] += m.topic.startswith("%DLQ%")
        kinds["v6"] += bool(m.sys_flag & L.BORNHOST_V6_FLAG)
        kinds["batch"] += keys_of(m.properties_raw).count("WAIT") == 2
        if m.compression != "NONE":
            kinds["zip"].add(m.compression)
            assert m.decompressed_body().startswith(b'{"orderId":')
    assert all(kinds[k] for k in kinds), kinds
    assert kinds["zip"] == {"ZLIB", "LZ4", "ZSTD"}
    # every consume-queue unit points at its record, with the record's size and tagsCode; PREPARED/ROLLBACK none
    dispatched = 0
    for (topic, qid) in st.queues:
        for u in st.consume_queue(topic, qid):
            m = by_off[u.physical_offset]
            assert (m.topic, m.queue_id, m.queue_offset, m.store_size) == (topic, qid, u.queue_offset, u.size)
            assert u.tags_code == m.dispatch_tags_code(st.delay_levels)
            dispatched += 1
    assert dispatched == sum(m.dispatchable for m in msgs)
    # transactions: commits point at halves with the same UNIQ_KEY; op bodies name half queue offsets
    halves = {m.queue_offset: m for m in msgs if m.topic == L.TRANS_HALF_TOPIC}
    resent = (L.SCHEDULE_TOPIC, L.RETRY_GROUP_TOPIC_PREFIX, L.DLQ_GROUP_TOPIC_PREFIX)
    for m in msgs:
        if m.tran_type == "COMMIT" and not m.topic.startswith(resent):
            assert by_off[m.prepared_transaction_offset].uniq_key == m.uniq_key
        elif m.tran_type == "COMMIT":  # sent back by a consumer: the sysflag is copied, the prepared offset not
            assert m.prepared_transaction_offset == 0
        if m.topic == L.TRANS_OP_HALF_TOPIC:
            assert int(m.body) in halves
    # retries: ORIGIN_MESSAGE_ID names the first record of the chain
    for m in msgs:
        origin = m.properties.get("ORIGIN_MESSAGE_ID")
        if origin:
            first = st.find_msg_id(origin)
            assert first is not None and first.uniq_key == m.uniq_key and first.reconsume_times == 0
    # delivered delays moved delayOffset.json past them
    offs = delay_offsets(st.config("delayOffset.json"))
    assert offs and all(v <= len(list(st.consume_queue(L.SCHEDULE_TOPIC, lvl - 1))) for lvl, v in offs.items())
    # every key and UNIQ_KEY of a sample is found through the index
    for m in msgs[::500]:
        if m.tran_type == "ROLLBACK":
            continue
        for key in ([m.uniq_key] if m.uniq_key else []) + m.keys:
            assert m.physical_offset in [x.physical_offset for x in st.query_key(m.topic, key)]


def test_cover_gives_a_tiny_store_every_topic_and_queue(tmp_path):
    """TrafficConfig.cover: a few hundred records (the benchmark's reference dump) have every queue of every
    topic, each delay level, a committed transaction and a retry and a dead letter per group, through the
    broker's own flows; without it the same records miss some (the benchmark's 0.25 MiB: 45 of 87 queues)."""
    cfg = WriterConfig(mappedFileSizeCommitLog=1_000_000, maxHashSlotNum=500, maxIndexNum=2000)
    traffic = dict(messages=400, topics=3, queues=4, seed=2, rate=10.0)
    generate_store(tmp_path / "cover", TrafficConfig(**traffic, cover=True), cfg)
    generate_store(tmp_path / "plain", TrafficConfig(**traffic), cfg)

    def queues(store):
        return {(q.parent.name, int(q.name)) for q in (tmp_path / store / "consumequeue").glob("*/*")}

    groups = [f"cg-Topic{t:03d}" for t in range(3)]
    expected = ({(f"Topic{t:03d}", q) for t in range(3) for q in range(4)}
                | {(L.SCHEDULE_TOPIC, level - 1) for level in range(1, 6)}
                | {(L.TRANS_HALF_TOPIC, 0), (L.TRANS_OP_HALF_TOPIC, 0)}
                | {(f"%RETRY%{g}", 0) for g in groups} | {(f"%DLQ%{g}", 0) for g in groups})
    assert queues("cover") == expected
    assert queues("plain") < expected
    msgs = list(Store(tmp_path / "cover", hash_slot_num=500, index_num=2000).messages())
    assert len(msgs) == 400 and any(m.tran_type == "COMMIT" for m in msgs)
    for g in groups:  # the retry is a redelivery of a sent-back message, through the schedule topic
        retry = [m for m in msgs if m.topic == f"%RETRY%{g}"]
        assert retry and all(m.reconsume_times >= 1 and m.properties.get("ORIGIN_MESSAGE_ID") for m in retry)
        assert any(m.properties.get("REAL_TOPIC") == f"%RETRY%{g}" for m in msgs if m.topic == L.SCHEDULE_TOPIC)


def test_generation_is_deterministic(tmp_path):
    from .support.writer_support import tree_digest
    cfg = WriterConfig(mappedFileSizeCommitLog=1_000_000, mappedFileSizeConsumeQueue=6000, maxHashSlotNum=500,
                       maxIndexNum=2000)
    for name in ("a", "b"):
        generate_store(tmp_path / name, TrafficConfig(messages=3000, seed=5), cfg)
    assert tree_digest(tmp_path / "a") == tree_digest(tmp_path / "b")
    generate_store(tmp_path / "c", TrafficConfig(messages=3000, seed=6), cfg)
    assert tree_digest(tmp_path / "a") != tree_digest(tmp_path / "c")


def test_generator_templates_equal_the_broker_flow_functions(tmp_path):
    """The generator renders frequent shapes from templates; each must be byte-equal to what broker.py's
    flow functions build for the same values."""
    from store_format.write.broker import (batch_item_string, batch_properties, client_message, half_properties,
                                     received_properties, schedule_properties, _string)
    cfg = WriterConfig(mappedFileSizeCommitLog=4_000_000, mappedFileSizeConsumeQueue=6000, maxHashSlotNum=500,
                       maxIndexNum=2000)
    generate_store(tmp_path / "g", TrafficConfig(messages=6000, seed=4), cfg)
    cluster = cfg.brokerClusterName
    seen = set()
    for m in Store(tmp_path / "g").messages():
        p = m.properties
        tags, keys, uniq = p.get("TAGS"), p.get("KEYS"), p.get("UNIQ_KEY")
        if m.topic.startswith("Topic") and m.tran_type == "NOT" and "REAL_TOPIC" not in p:
            if keys_of(m.properties_raw).count("WAIT") == 2:
                kind, want = "batch", batch_item_string(_string(client_message(tags, keys, None, uniq)),
                                                        batch_properties(cluster))
            else:
                kind, want = "plain", received_properties(client_message(tags, keys, None, uniq), cluster)[1]
        elif m.topic == L.SCHEDULE_TOPIC and "RETRY_TOPIC" not in p:
            props = received_properties(client_message(tags, keys, None, uniq, delay_level=int(p["DELAY"])), cluster)[0]
            kind, want = "delay", schedule_properties(props, p["REAL_TOPIC"], int(p["REAL_QID"]), 18)[2]
        elif m.topic == L.TRANS_HALF_TOPIC:
            props = received_properties(client_message(tags, keys, None, uniq, producer_group=p["PGROUP"]), cluster)[0]
            kind, want = "half", half_properties(props, p["REAL_TOPIC"], int(p["REAL_QID"]))
        else:
            continue
        assert m.properties_raw == want, kind
        seen.add(kind)
    assert seen == {"plain", "batch", "delay", "half"}
