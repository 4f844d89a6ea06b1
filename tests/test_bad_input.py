"""Damaged input: every case gives a typed, positioned error or a stop reason; salvage keeps valid records.

Fixtures are copied to tmp_path before any byte is changed.
"""
from __future__ import annotations

import os
import shutil
import struct
import time

import pytest

from store_format import layout as L
from store_format.checkpoint import parse_checkpoint, read_checkpoint
from store_format.codec import decode_record, encode_record
from store_format.commitlog import END_OF_DATA, Frame, SalvageSpan, salvage_buffer, walk_buffer
from store_format.fs import ReadOnlyMap
from store_format.config import loads, read_config
from store_format.consumequeue import discover_queues, read_queue
from store_format.errors import ErrorKind, StoreFormatError
from store_format.indexfile import IndexFile
from store_format.message import Message
from store_format.store import Store

from .conftest import fixture_manifest, fixture_store

SEG = "00000000000000000000"



def patch(path, pos, data):
    with open(path, "r+b") as f:
        f.seek(pos)
        f.write(data)


def walk(root):
    return list(Store(root).walk_commitlog(decode=True))


def salvage(root):
    return list(Store(root).walk_commitlog(decode=True, salvage=True))


def msgs(frames):
    return [f.message.physical_offset for f in frames if isinstance(f, Frame) and f.kind == "message"]


def all_offsets(manifest):
    return [m["commitLogOffset"] for m in manifest["messages"]]


def record(manifest, i):
    m = manifest["messages"][i]
    return m["commitLogOffset"], m["storeSize"]


@pytest.mark.parametrize("case,field_offset,data,kind,field", [
    ("bad magic", 4, struct.pack(">i", 0x12345678), ErrorKind.BAD_MAGIC, "magic"),
    ("negative size", 0, struct.pack(">i", -1), ErrorKind.BAD_LENGTH, "store_size"),
    ("huge size", 0, struct.pack(">i", 2**31 - 1), ErrorKind.TRUNCATED, "store_size"),
    ("size too small", 0, struct.pack(">i", 50), ErrorKind.BAD_LENGTH, "store_size"),
    ("size off by one", 0, None, ErrorKind.SIZE_MISMATCH, "store_size"),
    ("body length past record", 84, struct.pack(">i", 10**6), ErrorKind.BAD_LENGTH, "body_length"),
    ("negative body length", 84, struct.pack(">i", -5), ErrorKind.BAD_LENGTH, "body_length"),
    ("physical offset field", 28, struct.pack(">q", 7), ErrorKind.PHYSICAL_OFFSET_MISMATCH, "physical_offset"),
    ("flipped body bit", 90, None, ErrorKind.BAD_CRC, "body_crc"),
])
def test_damaged_record_stops_the_walk_with_its_kind_and_position(basic_copy, case, field_offset, data, kind, field):
    root, manifest = basic_copy
    pos, size = record(manifest, 5)
    seg = root / "commitlog" / SEG
    if case == "size off by one":
        data = struct.pack(">i", size + 1)
    if case == "flipped body bit":
        with open(seg, "rb") as f:
            f.seek(pos + field_offset)
            data = bytes([f.read(1)[0] ^ 0x01])
    patch(seg, pos + field_offset, data)
    frames = walk(root)
    stop = frames[-1]
    assert stop.kind == "stop" and stop.stop_kind == kind.value and stop.stop_field == field
    assert stop.file_position == pos and stop.segment == SEG
    assert msgs(frames) == all_offsets(manifest)[:5]
    err = stop.stop_error()
    assert isinstance(err, StoreFormatError) and err.kind == kind and err.position == pos
    # salvage resyncs and finds every valid record after the damaged one
    assert msgs(salvage(root)) == [o for o in all_offsets(manifest) if o != pos]


def test_zeroed_page_is_a_corrupt_span_and_later_records_survive(basic_copy):
    root, manifest = basic_copy
    seg = root / "commitlog" / SEG
    patch(seg, 8192, bytes(4096))
    hit = {o for o, s in (record(manifest, i) for i in range(len(manifest["messages"]))) if o < 8192 + 4096 and o + s > 8192}
    frames = salvage(root)
    spans = [f for f in frames if isinstance(f, SalvageSpan)]
    assert spans and spans[0].file_position == min(hit)
    assert msgs(frames) == [o for o in all_offsets(manifest) if o not in hit]


def test_truncated_segment_reports_truncation(basic_copy):
    root, manifest = basic_copy
    seg = root / "commitlog" / SEG
    pos, size = record(manifest, 10)
    os.truncate(seg, pos + size // 2)
    frames = walk(root)
    assert frames[-1].stop_kind == ErrorKind.TRUNCATED.value and frames[-1].file_position == pos
    assert msgs(frames) == all_offsets(manifest)[:10]


def test_short_tail_and_zero_tail():
    rec = encode_record(Message(topic="T", body=b"x", physical_offset=0))
    frames = list(walk_buffer(rec + bytes(20), SEG, 0))
    assert [f.kind for f in frames] == ["message", "stop"] and frames[-1].stop_kind == END_OF_DATA
    frames = list(walk_buffer(rec + b"\x00\x01\x02", SEG, 0))
    assert frames[-1].stop_kind == ErrorKind.TRUNCATED.value and frames[-1].file_position == len(rec)
    frames = list(walk_buffer(rec, SEG, 0))  # data ends exactly at a record end
    assert frames[-1].stop_kind == END_OF_DATA


def test_blank_moves_to_the_next_segment_and_wrong_blank_size_is_damage():
    rec = encode_record(Message(topic="T", body=b"x", physical_offset=0))
    size = 400
    blank = struct.pack(">ii", size - len(rec), L.BLANK_MAGIC)
    buf = rec + blank + bytes(size - len(rec) - 8)
    frames = list(walk_buffer(buf, SEG, 0))
    assert [f.kind for f in frames] == ["message", "blank"] and frames[-1].size == size - len(rec)
    bad = rec + struct.pack(">ii", 12, L.BLANK_MAGIC) + bytes(size - len(rec) - 8)
    assert list(walk_buffer(bad, SEG, 0))[-1].stop_kind == ErrorKind.BAD_LENGTH.value


def test_topic_and_properties_lengths_that_run_past_the_record():
    raw = bytearray(encode_record(Message(topic="Topic", body=b"abc", properties_raw="a\x01b")))
    lay = L.record_layout(False, False)
    tpos = lay.body_offset + 3
    bad_topic = bytes(raw[:tpos]) + b"\x7f" + bytes(raw[tpos + 1:])
    with pytest.raises(StoreFormatError) as e:
        decode_record(bad_topic)
    assert e.value.kind == ErrorKind.BAD_LENGTH and e.value.field == "topic_length" and e.value.position == tpos
    neg_topic = bytes(raw[:tpos]) + b"\xff" + bytes(raw[tpos + 1:])
    with pytest.raises(StoreFormatError) as e:
        decode_record(neg_topic)
    assert e.value.field == "topic_length"
    ppos = tpos + 1 + 5
    bad_props = bytes(raw[:ppos]) + struct.pack(">h", 3000) + bytes(raw[ppos + 2:])
    with pytest.raises(StoreFormatError) as e:
        decode_record(bad_props)
    assert e.value.field == "properties_length" and e.value.position == ppos
    with pytest.raises(StoreFormatError) as e:
        decode_record(bytes(raw[:40]))
    assert e.value.kind == ErrorKind.BAD_LENGTH or e.value.kind == ErrorKind.TRUNCATED


def test_invalid_utf8_is_replaced_like_java_or_a_positioned_error_when_strict():
    raw = encode_record(Message(topic="Tab", body=b"", properties_raw="k\x01v"))
    lay = L.record_layout(False, False)
    tpos = lay.body_offset + 1
    bad = raw[:tpos + 1] + b"\xff" + raw[tpos + 2:]
    assert decode_record(bad).topic == "T\ufffdb"
    with pytest.raises(StoreFormatError) as e:
        decode_record(bad, strict_utf8=True)
    assert e.value.kind == ErrorKind.BAD_UTF8 and e.value.position == tpos + 1 and e.value.field == "topic"


def test_cyclic_index_chain_terminates(tmp_path):
    src = next((fixture_store("basic") / "index").iterdir())
    dst = tmp_path / src.name
    shutil.copy(src, dst)
    manifest = fixture_manifest("basic")
    q = next(q for q in manifest["indexQueries"] if q["topic"] == "TopicTest" and q["key"] == "twice")
    with IndexFile(dst, 512, 2048) as f:
        _, chain, _ = f.select_phy_offsets("TopicTest#twice", with_chain=True)
        head = chain[0].index
    # point the head entry's prev at itself's predecessor chain start -> cycle head -> ... -> head
    entry_pos = 40 + 512 * 4 + head * 20
    patch(dst, entry_pos + 16, struct.pack(">i", head))
    with IndexFile(dst, 512, 2048) as f:
        offsets, chain, reason = f.select_phy_offsets("TopicTest#twice", with_chain=True)
    assert reason in ("bad prev index", "cycle") and len(chain) <= f.header.index_count
    # a longer cycle: entry 2 -> entry 3 -> entry 2
    patch(dst, 40 + 512 * 4 + 2 * 20 + 16, struct.pack(">i", 3))
    patch(dst, 40 + 512 * 4 + 3 * 20 + 16, struct.pack(">i", 2))
    with IndexFile(dst, 512, 2048) as f:
        e2 = f.entry(2)
        slot = e2.key_hash % 512
        patch(dst, 40 + slot * 4, struct.pack(">i", 2))
    with IndexFile(dst, 512, 2048) as f:
        start = time.monotonic()
        _, chain, reason = f.select_phy_offsets("x", with_chain=True)
        for e in f.entries():
            pass
        assert time.monotonic() - start < 5
    assert q["queryMessageOffsets"]


def test_short_index_and_bad_geometry(tmp_path):
    p = tmp_path / "20260101000000000"
    p.write_bytes(bytes(10))
    with pytest.raises(StoreFormatError) as e:
        IndexFile(p)
    assert e.value.kind == ErrorKind.TRUNCATED
    p.write_bytes(bytes(1000))
    with pytest.raises(StoreFormatError) as e:
        IndexFile(p)
    assert e.value.kind == ErrorKind.BAD_GEOMETRY


def test_checkpoint_shorter_than_24_bytes(tmp_path):
    with pytest.raises(StoreFormatError) as e:
        parse_checkpoint(bytes(20), "checkpoint")
    assert e.value.kind == ErrorKind.TRUNCATED and e.value.position == 20
    with pytest.raises(StoreFormatError) as e:
        read_checkpoint(tmp_path / "checkpoint")
    assert e.value.kind == ErrorKind.MISSING
    cp = parse_checkpoint(struct.pack(">5q", 1, 2, 3, 4, 5) + bytes(4056))
    assert (cp.master_flushed_offset, cp.confirm_phy_offset) == (4, 5)  # 5.1.1+ layout


def test_fastjson_quirks_and_bad_json(tmp_path):
    assert loads('{"offsetTable":{0:1,1:2\n}}') == {"offsetTable": {0: 1, 1: 2}}
    with pytest.raises(StoreFormatError) as e:
        loads('{"offsetTable":{0:1,x y:2}}')
    assert e.value.kind == ErrorKind.BAD_JSON and e.value.position is not None
    # non-numeric keys where numbers are expected are skipped, not fatal
    from store_format.config import ConfigFile, consumer_offsets
    cfg = ConfigFile("consumerOffset.json", loads('{"offsetTable":{"T@g":{abc:1,0:5}}}'), "x", ())
    assert consumer_offsets(cfg) == {("T", "g"): {0: 5}}
    with pytest.raises(StoreFormatError):
        loads("[" * 10000)


def test_config_falls_back_to_bak_like_the_broker(tmp_path):
    d = tmp_path / "config"
    d.mkdir()
    (d / "delayOffset.json").write_text("{garbage")
    (d / "delayOffset.json.bak").write_text('{\n\t"offsetTable":{1:7\n\t}\n}')
    cfg = read_config(d, "delayOffset.json")
    assert cfg.source.endswith(".bak") and cfg.data == {"offsetTable": {1: 7}}
    assert cfg.errors[0].kind == ErrorKind.BAD_JSON
    (d / "topics.json").write_text("")
    empty = read_config(d, "topics.json")
    assert empty.data is None and empty.errors[0].kind == ErrorKind.BAD_JSON


def test_missing_config_dir_and_non_store(basic_copy, tmp_path):
    root, _ = basic_copy
    shutil.rmtree(root / "config")
    store = Store(root)
    assert store.config_names() == [] and store.config("topics.json").data is None
    with pytest.raises(StoreFormatError) as e:
        Store(tmp_path / "nowhere")
    assert e.value.kind == ErrorKind.MISSING


def test_consume_queue_damage(basic_copy):
    root, manifest = basic_copy
    queues = discover_queues(root / "consumequeue")
    files = queues[("TopicTest", 0)]
    path = files[0].path
    patch(path, 20 + 8, struct.pack(">i", -3))  # unit 1: negative size
    units = list(read_queue(files))
    assert units[1].kind == "invalid" and units[1].file_position == 20
    os.truncate(path, 20 * 3 + 7)
    with pytest.raises(StoreFormatError) as e:
        list(read_queue(discover_queues(root / "consumequeue")[("TopicTest", 0)]))
    assert e.value.kind == ErrorKind.TRUNCATED and e.value.position == 60


def test_inputs_are_opened_read_only(basic_copy):
    root, manifest = basic_copy
    before = {p: (p.stat().st_mtime_ns, p.read_bytes()) for p in root.rglob("*") if p.is_file()}
    store = Store(root)
    list(store.walk_commitlog(salvage=True))
    for q in manifest["indexQueries"][:5]:
        store.query_key(q["topic"], q["key"])
    with ReadOnlyMap(root / "commitlog" / SEG) as m:
        with pytest.raises(TypeError):
            m.buf[0] = 1
    assert before == {p: (p.stat().st_mtime_ns, p.read_bytes()) for p in root.rglob("*") if p.is_file()}


def test_salvage_finds_stale_records_past_the_logical_end():
    """Records after a zero gap (e.g. left by truncation) are found by salvage, not by the recovery walk."""
    a = encode_record(Message(topic="T", body=b"a", physical_offset=0))
    gap = 64
    b = encode_record(Message(topic="T", body=b"b", physical_offset=len(a) + gap))
    buf = a + bytes(gap) + b + bytes(100)
    assert [f.kind for f in walk_buffer(buf, SEG, 0)] == ["message", "stop"]
    found = list(salvage_buffer(buf, SEG, 0))
    assert [f.physical_offset for f in found if isinstance(f, Frame) and f.kind == "message"] == [0, len(a) + gap]
    assert any(isinstance(f, SalvageSpan) and f.reason == END_OF_DATA for f in found)


def test_config_values_a_broker_cannot_hold_are_findings_not_exceptions(tmp_path):
    """Out of the Java type's range, or not a number: an OUT_OF_RANGE problem naming the file, the key path and the
    value; the accessors leave the entry out, the metadata rows carry one error row per value and every other
    row (issue 22)."""
    from decoding.metadata import is_value_error, table_rows
    from store_format.config import consumer_offsets, value_problems

    d = tmp_path / "config"
    d.mkdir()
    (d / "consumerOffset.json").write_text('{"offsetTable":{"T@g":{0:5,1:99999999999999999999999,2147483648:1,'
                                           '3:"x"},"nogroup":{0:1}}}')
    (d / "delayOffset.json").write_text('{"offsetTable":{x:1,2:3,-99999999999:4}}')
    (d / "topics.json").write_text('{"topicConfigTable":{"T":{"readQueueNums":1099511627776,"perm":"rw"}}}')
    (d / "subscriptionGroup.json").write_text('{"subscriptionGroupTable":{"g":{"brokerId":1e400,'
                                              '"retryMaxTimes":16}}}')
    cfg = read_config(d, "consumerOffset.json")
    assert consumer_offsets(cfg) == {("T", "g"): {0: 5}}
    problems = {(e.field, e.kind) for e in value_problems(cfg)}
    assert problems == {(f, ErrorKind.OUT_OF_RANGE) for f in ("offsetTable/T@g/1", "offsetTable/T@g/2147483648",
                                                              "offsetTable/T@g/3", "offsetTable/nogroup")}
    rows = table_rows("consumer_offsets", "b", str(tmp_path))
    assert [(r["queue_id"], r["offset"]) for r in rows if r["error"] is None] == [(0, 5)]
    bad = {r["error_key"]: r for r in rows if is_value_error(r["error"])}
    assert bad["offsetTable/T@g/1"]["error_value"] == "99999999999999999999999"
    assert "outside Java's long range" in bad["offsetTable/T@g/1"]["error"]
    assert str(d / "consumerOffset.json") in bad["offsetTable/T@g/1"]["error"]
    delay = table_rows("delay_offsets", "b", str(tmp_path))
    assert [(r["delay_level"], r["offset"]) for r in delay if r["error"] is None] == [(2, 3)]
    assert {r["error_key"] for r in delay if r["error"]} == {"offsetTable/x", "offsetTable/-99999999999"}
    topics = table_rows("topics", "b", str(tmp_path))
    assert [r["read_queue_nums"] for r in topics if r["error"] is None] == [None]
    assert {r["error_key"] for r in topics if r["error"]} == {"topicConfigTable/T/readQueueNums",
                                                              "topicConfigTable/T/perm"}
    groups = table_rows("subscription_groups", "b", str(tmp_path))
    assert [r["retry_max_times"] for r in groups if r["error"] is None] == [16]
    assert [r["error_key"] for r in groups if r["error"]] == ["subscriptionGroupTable/g/brokerId"]
