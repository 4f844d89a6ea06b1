"""Golden tests: our readers against stores RocketMQ 4.9.7 wrote, and RocketMQ's own read-back manifest."""
from __future__ import annotations

import base64
import hashlib
import json

import pytest

from store_format import layout as L
from store_format.codec import decode_record, encode_record
from store_format.commitlog import END_OF_DATA
from store_format.fs import ReadOnlyMap
from store_format.config import dumps_fastjson
from store_format.store import Store

from .conftest import FIXTURES


def open_store(root, manifest):
    cfg = manifest["storeConfig"]
    return Store(root, hash_slot_num=cfg["maxHashSlotNum"], index_num=cfg["maxIndexNum"],
                 message_delay_level=cfg["messageDelayLevel"])


def test_geometry_comes_from_the_files(fixture):
    name, root, manifest = fixture
    store = Store(root)  # nothing passed: everything inferred
    cfg = manifest["storeConfig"]
    assert store.segment_size == cfg["mappedFileSizeCommitLog"]
    assert store.consume_queue_file_size == cfg["mappedFileSizeConsumeQueue"]
    for path in store.index_paths():
        with store.open_index(path) as f:
            assert (f.hash_slot_num, f.index_num) == (cfg["maxHashSlotNum"], cfg["maxIndexNum"])


def test_every_manifest_message_decodes_with_every_field(fixture):
    name, root, manifest = fixture
    store = open_store(root, manifest)
    walked = {m.physical_offset: m for m in store.messages()}
    assert sorted(walked) == [m["commitLogOffset"] for m in manifest["messages"]]
    for exp in manifest["messages"]:
        msg = walked[exp["commitLogOffset"]]
        got = {
            "storeSize": msg.store_size, "topic": msg.topic, "queueId": msg.queue_id, "queueOffset": msg.queue_offset,
            "sysFlag": msg.sys_flag, "tranType": msg.tran_type, "flag": msg.flag, "bodyCRC": msg.body_crc,
            "bornTimestamp": msg.born_timestamp, "bornHost": msg.born_host, "storeTimestamp": msg.store_timestamp,
            "storeHost": msg.store_host, "reconsumeTimes": msg.reconsume_times,
            "preparedTransactionOffset": msg.prepared_transaction_offset, "msgId": msg.msg_id,
            "bodyLen": len(msg.body), "body": base64.b64encode(msg.body).decode(),
            "propertiesString": msg.properties_raw, "properties": msg.properties, "tags": msg.tags,
            "uniqKey": msg.uniq_key,
        }
        for key, value in got.items():
            assert value == exp[key], (exp["commitLogOffset"], key)
        assert " ".join(msg.keys) == " ".join(k for k in (exp["keys"] or "").split(" ") if k)
        assert msg.dispatch_tags_code(store.delay_levels) == exp["dispatch"]["tagsCode"]
        assert msg.body_crc_ok
        assert msg.segment == "00000000000000000000" and msg.file_position == exp["commitLogOffset"]
        if "bodyDecompressed" in exp:
            assert msg.compression == exp["compressionType"]
            assert msg.decompressed_body() == base64.b64decode(exp["bodyDecompressed"])
        else:
            assert msg.compression == "NONE"


def test_encode_reproduces_every_fixture_record(fixture):
    name, root, manifest = fixture
    with ReadOnlyMap(root / "commitlog" / "00000000000000000000") as seg:
        for exp in manifest["messages"]:
            pos, size = exp["commitLogOffset"], exp["storeSize"]
            raw = bytes(seg.buf[pos:pos + size])
            assert hashlib.sha256(raw).hexdigest() == exp["rawSha256"]
            assert encode_record(decode_record(seg.buf, pos, check_crc=True)) == raw


def test_walk_matches_rocketmqs_own_walk(fixture):
    """decoded-commitlog.jsonl is RocketMQ's checkMessageAndReturnSize walk: same frames, same stop."""
    name, root, manifest = fixture
    with open(FIXTURES / name / "decoded-commitlog.jsonl", encoding="utf-8") as f:
        theirs = [json.loads(line) for line in f]
    ours = list(open_store(root, manifest).walk_commitlog(decode=False))
    assert [(t["type"], t["filePos"]) for t in theirs] == [
        ({"message": "MESSAGE", "blank": "BLANK", "stop": "STOP"}[o.kind], o.file_position) for o in ours]
    assert ours[-1].stop_kind == END_OF_DATA
    assert ours[-1].physical_offset == manifest["commitLogMaxOffset"]
    assert len([o for o in ours if o.kind == "blank"]) == len(manifest["blanks"])


def test_consume_queues_equal_the_manifest(fixture):
    name, root, manifest = fixture
    store = open_store(root, manifest)
    for cq in manifest["consumeQueues"]:
        units = [u for u in store.consume_queue(cq["topic"], cq["queueId"])]
        assert all(u.kind == "entry" for u in units)
        assert [[u.queue_offset, u.physical_offset, u.size, u.tags_code] for u in units] == \
            cq["entries_[queueOffset,commitLogOffset,size,tagsCode]"], (cq["topic"], cq["queueId"])
        assert ((cq["topic"], cq["queueId"]) in store.queues) == cq["dirExists"]


def test_every_index_query_returns_rocketmqs_offsets(fixture):
    name, root, manifest = fixture
    store = open_store(root, manifest)
    for q in manifest["indexQueries"]:
        assert sorted(store.index_candidates(q["topic"], q["key"])) == sorted(q["queryMessageOffsets"]), q
        verified = store.query_key(q["topic"], q["key"])
        assert sorted({m.physical_offset for m in verified}) == sorted(set(q["expectedOffsets"])), q


def test_index_file_headers(fixture):
    name, root, manifest = fixture
    store = open_store(root, manifest)
    assert [p.name for p in store.index_paths()] == [f["name"] for f in manifest["indexFiles"]]
    for path in store.index_paths():
        with store.open_index(path) as f:
            assert f.path.stat().st_size == L.index_file_size(f.hash_slot_num, f.index_num)
            entries = list(f.entries())
            assert len(entries) == f.header.index_count - 1
            assert f.header.hash_slot_count == len(list(f.slots()))
            assert f.header.end_phy_offset == max(e.physical_offset for e in entries)


def test_checkpoint_and_config_equal_the_manifest(fixture):
    name, root, manifest = fixture
    store = open_store(root, manifest)
    cp, exp = store.checkpoint(), manifest["checkpoint"]
    assert (cp.physic_msg_timestamp, cp.logics_msg_timestamp, cp.index_msg_timestamp) == (
        exp["physicMsgTimestamp"], exp["logicsMsgTimestamp"], exp["indexMsgTimestamp"])
    assert (cp.min_timestamp, cp.min_timestamp_index, cp.file_length) == (
        exp["minTimestamp"], exp["minTimestampIndex"], exp["fileLength"])
    assert store.markers().abort == manifest["abortFileExists"]
    assert set(store.config_names()) == {n.removesuffix(".bak") for n in manifest["configFiles"]}
    for fname, text in manifest["configFiles"].items():
        cfg = store.config(fname)
        assert cfg.source.endswith(fname) and not cfg.errors
        # re-serializing in fastjson's shape gives back the broker's exact text: nothing was lost
        assert dumps_fastjson(cfg.data) == text


def test_consumer_offsets_from_the_broker_fixture():
    from store_format.config import consumer_offsets, delay_offsets
    from .conftest import fixture_store
    store = Store(fixture_store("broker"))
    assert consumer_offsets(store.config("consumerOffset.json")) == {("BrokerTopic", "cg-broker"): {0: 1, 1: 2, 2: 3, 3: 4}}
    assert delay_offsets(store.config("delayOffset.json")) == {2: 1}


@pytest.mark.parametrize("name", ["basic", "broker"])
def test_msg_id_lookup_reads_the_named_record(name):
    from .conftest import fixture_manifest, fixture_store
    manifest = fixture_manifest(name)
    store = Store(fixture_store(name))
    for exp in manifest["messages"]:
        msg = store.find_msg_id(exp["msgId"])
        assert msg is not None and msg.physical_offset == exp["commitLogOffset"]
    # right offset, wrong store host: not this broker's message
    other = manifest["messages"][0]["msgId"]
    assert store.find_msg_id("01020304" + other[8:]) is None


def test_index_time_window_rule(fixture):
    """isTimeMatched / selectPhyOffset: a window after the file's end finds nothing; one covering it finds all."""
    name, root, manifest = fixture
    store = open_store(root, manifest)
    with store.open_index(store.index_paths()[0]) as f:
        begin, end = f.header.begin_timestamp, f.header.end_timestamp
    q = manifest["indexQueries"][0]
    assert store.index_candidates(q["topic"], q["key"], end + 10_000, end + 20_000) == []
    assert sorted(store.index_candidates(q["topic"], q["key"], begin - 1000, end + 1000)) == sorted(q["queryMessageOffsets"])
