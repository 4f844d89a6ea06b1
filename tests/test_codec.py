"""Layout pins, record codec round trips (hypothesis) and the id / hash / properties helpers."""
from __future__ import annotations

import struct
import zlib

from hypothesis import given, settings, strategies as st

from store_format import layout as L
from store_format.codec import decode_record, encode_record
from store_format.compression import compress, decompress
from store_format.ids import (create_offset_msg_id, create_uniq_key, format_host, parse_host, parse_offset_msg_id,
                              parse_uniq_key)
from store_format.javahash import index_key_hash, java_hash, tags_code
from store_format.message import Message
from store_format.properties import format_properties, parse_properties

from .support.strategies import messages, property_text


def test_layout_pinned_to_the_reference():
    v4 = L.record_layout(False, False, 1)
    assert v4.offsets["body_length"] == 84 and v4.body_offset == 88
    assert v4.total_size(10, 5, 7) == 91 + 10 + 5 + 7
    assert L.record_layout(True, False).body_offset == 100 == L.record_layout(False, True).body_offset
    assert L.record_layout(True, True).body_offset == 112
    assert L.record_layout(False, False, 2).total_size(0, 0, 0) == 92  # 2-byte topic length
    assert v4.offsets["store_timestamp"] == 56 and L.record_layout(True, False).offsets["store_timestamp"] == 68
    assert [f.name for f in L.RECORD_FIELDS][:3] == ["store_size", "magic", "body_crc"] and len(L.RECORD_FIELDS) == 20
    assert L.MAGIC_V1 & 0xFFFFFFFF == 0xDAA320A7 and L.BLANK_MAGIC & 0xFFFFFFFF == 0xCBD43194
    assert L.index_file_size(5000000, 20000000) == 420000040


def test_worked_example_from_the_reference():
    """store-format.md §1.9: the 185-byte IPv4/V1 example record."""
    props = ("KEYS\x01KEY1\x02TAGS\x01TagA\x02UNIQ_KEY\x01C0A8000A30391B6D358647B760000001\x02WAIT\x01true")
    msg = Message(topic="TopicTest", body=b"Hello RocketMQ", queue_id=1, properties_raw=props,
                  born_timestamp=1700000000000, born_host="192.168.0.10:51234", store_timestamp=1700000000123,
                  store_host="192.168.0.2:10911")
    raw = encode_record(msg)
    assert len(raw) == 185
    assert raw[:12].hex().upper() == "000000B9DAA320A769C865ED"
    assert raw[84:88] == struct.pack(">i", 14) and raw[102] == 9
    assert msg.msg_id == "C0A8000200002A9F0000000000000000"
    assert msg.tags_code == 2598919
    assert index_key_hash("TopicTest#KEY1") == 1656969516 and 1656969516 % 5000000 == 1969516


def test_java_hash_vectors():
    vectors = {"": 0, "a": 97, "d": 100, "TagA": 2598919, "TagB": 2598920, "Aa": 2112, "BB": 2112,
               "你好": 652829, "😀": 1772899, "TopicTest#KEY1": -1656969516, "polygenelubricants": -2147483648}
    for s, h in vectors.items():
        assert java_hash(s) == h, s
    assert index_key_hash("polygenelubricants") == 0
    assert tags_code(None) == 0 and tags_code("") == 0


def test_properties_edge_cases_from_rocketmq_tests():
    assert parse_properties("k1\x01v1\x02k2\x01") == {"k1": "v1"}
    assert parse_properties("\x01v1\x02k2\x01v2") == {"k2": "v2"}
    assert parse_properties("k\x01v\x01w") == {"k": "v\x01w"}  # the value keeps further separators
    assert parse_properties("k\x01a\x02k\x01b") == {"k": "b"}  # last duplicate wins
    assert parse_properties("a\x01\x02b\x01c\x02") == {"b": "c"}  # empty value dropped, trailing sep ok
    assert parse_properties("") == {} and parse_properties(None) == {}
    assert format_properties({"a": "1", "b": "2"}) == "a\x011\x02b\x012"
    assert format_properties({"a": "1"}, trailing_separator=True) == "a\x011\x02"


def test_ids_reference_vectors():
    ident = parse_offset_msg_id("645100FA00002A9F000000489A3AA09E")
    assert (ident.store_host, ident.physical_offset) == ("100.81.0.250:10911", 311825178782)
    ident6 = parse_offset_msg_id("24084004018081003FAA1DDE2B3F898A00002A9F0000000000000CA0")
    assert ident6.store_host == "[2408:4004:180:8100:3faa:1dde:2b3f:898a]:10911" and ident6.physical_offset == 3232
    assert create_offset_msg_id(ident6.store_ip, 10911, 3232) == "24084004018081003FAA1DDE2B3F898A00002A9F0000000000000CA0"
    u = parse_uniq_key("C0A8000A30391B6D358647B760000001")
    assert (u.client_ip_str, u.pid, u.class_loader_hash, u.millis_since_month_start, u.counter) == (
        "192.168.0.10", 12345, 460141958, 1203200000, 1)
    assert u.timestamp(1700000000000) == 1700000000000
    assert create_uniq_key(u.client_ip, 12345, 460141958, 1700000000000, 1) == "C0A8000A30391B6D358647B760000001"


@settings(max_examples=300, deadline=None)
@given(messages())
def test_encode_decode_round_trip(msg):
    raw = encode_record(msg)
    back = decode_record(raw, check_crc=True)
    assert encode_record(back) == raw
    for name in ("topic", "body", "queue_id", "properties_raw", "properties", "flag", "sys_flag", "queue_offset",
                 "physical_offset", "born_timestamp", "born_host", "store_timestamp", "store_host",
                 "reconsume_times", "prepared_transaction_offset", "magic_version"):
        assert getattr(back, name) == getattr(msg, name), name
    assert back.store_size == len(raw) and back.body_crc_ok


@settings(max_examples=300, deadline=None)
@given(st.dictionaries(property_text.filter(bool), property_text.filter(bool), max_size=8), st.booleans())
def test_properties_round_trip(props, trailing):
    assert parse_properties(format_properties(props, trailing)) == props


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=40))
def test_java_hash_matches_the_utf16_definition(s):
    units = s.encode("utf-16-be", "surrogatepass")
    h = 0
    for i in range(0, len(units), 2):
        h = (31 * h + int.from_bytes(units[i:i + 2], "big")) % 2**32
    assert java_hash(s) == (h - 2**32 if h >= 2**31 else h)


@settings(max_examples=50, deadline=None)
@given(st.binary(max_size=5000), st.sampled_from(["ZLIB", "LZ4", "ZSTD"]))
def test_compression_round_trip(body, kind):
    assert decompress(compress(body, kind), kind) == body


def test_host_text_is_javas():
    assert format_host(bytes([10, 1, 2, 3]), 52345) == "10.1.2.3:52345"
    ip6 = parse_host("[1050:0:0:0:5:600:300c:326b]:61000")
    assert format_host(*ip6) == "[1050:0:0:0:5:600:300c:326b]:61000"
    assert zlib.crc32(b"Hello RocketMQ") & 0x7FFFFFFF == 1774740973


def test_record_layout_page_table_is_derived_from_the_declaration():
    page = (__import__("pathlib").Path(__file__).parent.parent / "docs" / "record-layout.md").read_text()
    assert L.layout_table_markdown() in page
