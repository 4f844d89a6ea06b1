"""The Hypothesis strategies the tests share: stored records and their damage (decoding kernels, parsers, framing),
messages for the codec, and the fuzz profiles (`make test`: small and seeded; `make fuzz`: large and random).
A strategy used by one test file only stays in that file."""
from __future__ import annotations

import os
import struct
from datetime import timedelta

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st

from store_format import layout as L
from store_format.codec import encode_record
from store_format.compression import compress
from store_format.ids import create_uniq_key, format_host
from store_format.message import Message
from store_format.properties import format_properties

# ---------------------------------------------------------------------------------------------------------
# Profiles: small and deterministic in `make test`, large and random in `make fuzz`

FUZZ = os.environ.get("ROCKETMQ_FUZZ") == "1"
# a deadline catches hangs and blow-ups (examples take milliseconds); `make test` shares two cores with Spark,
# so its deadline leaves room for a busy machine
_DEADLINE_MS = int(os.environ.get("FUZZ_DEADLINE_MS", "2000" if FUZZ else "5000"))
_SUPPRESS = [HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much]
settings.register_profile("hostile-quick", deadline=timedelta(milliseconds=_DEADLINE_MS), derandomize=True,
                          database=None, suppress_health_check=_SUPPRESS, print_blob=True)
settings.register_profile("hostile-fuzz", deadline=timedelta(milliseconds=_DEADLINE_MS), derandomize=False,
                          max_examples=int(os.environ.get("FUZZ_EXAMPLES", "2000")),
                          suppress_health_check=_SUPPRESS, print_blob=True)
PROFILE = settings.get_profile("hostile-fuzz" if FUZZ else "hostile-quick")


def fuzz(quick_examples: int) -> settings:
    """Settings for one fuzz test: ``quick_examples`` in `make test`, the fuzz profile's count otherwise."""
    return settings(PROFILE, max_examples=PROFILE.max_examples if FUZZ else quick_examples)


# ---------------------------------------------------------------------------------------------------------
# Stored records, then damaged ones (any bytes a broker or a disk could leave)

record_text = st.text(st.characters(codec="utf-8", exclude_characters="\x00"), max_size=12)
separator_text = st.lists(st.sampled_from(list("ab \x01\x02é😀") + ["TAGS", "KEYS"]), max_size=10).map("".join)
property_keys = st.sampled_from([L.PROPERTY_TAGS, L.PROPERTY_KEYS, L.PROPERTY_UNIQ_KEY, L.PROPERTY_DELAY_TIME_LEVEL,
                         L.PROPERTY_REAL_TOPIC, L.PROPERTY_REAL_QUEUE_ID, L.PROPERTY_RETRY_TOPIC,
                         L.PROPERTY_ORIGIN_MESSAGE_ID, "WAIT", "CLUSTER", "ünï", "😀k"])


@st.composite
def uniq_keys(draw):
    ip = draw(st.sampled_from([bytes([10, 0, 0, 1]), bytes(range(16)), bytes(4)]))
    uk = create_uniq_key(ip, draw(st.integers(0, 65535)), draw(st.integers(-2**31, 2**31 - 1)),
                         draw(st.integers(0, 2**42)), draw(st.integers(0, 65535)))
    spaced = " ".join(uk[i:i + 2] for i in range(0, len(uk), 2))
    return draw(st.sampled_from([uk, uk.lower(), uk[:-1], uk + "0", spaced]))


property_values = st.one_of(record_text, separator_text, uniq_keys(), st.integers(-5, 40).map(str), st.just("x" * 3000))


@st.composite
def raw_properties(draw):
    entries = draw(st.lists(st.tuples(st.one_of(property_keys, record_text), property_values), max_size=8))
    if draw(st.booleans()):
        entries.insert(draw(st.integers(0, len(entries))), (L.PROPERTY_UNIQ_KEY, draw(uniq_keys())))
    raw = "\x02".join(f"{k}\x01{v}" for k, v in entries)
    if draw(st.booleans()):
        raw += draw(st.sampled_from(["\x02", "\x01", "\x02\x01", ""]))
    if draw(st.integers(0, 9)) == 0:
        raw = draw(separator_text)
    return raw if len(raw.encode()) <= L.MAX_PROPERTIES_LENGTH else raw[:2000]


@st.composite
def record_hosts(draw):
    if draw(st.booleans()):
        ip = ".".join(str(b) for b in draw(st.binary(min_size=4, max_size=4)))
        return f"{ip}:{draw(st.integers(0, 65535))}", False
    from store_format.ids import format_host
    return format_host(draw(st.binary(min_size=16, max_size=16)), draw(st.integers(-2**31, 2**31 - 1))), True


@st.composite
def records(draw) -> bytes:
    version = draw(st.sampled_from([1, 1, 2]))
    topic = draw(st.one_of(record_text.filter(bool), st.sampled_from([L.SCHEDULE_TOPIC, "TopicTest", "%RETRY%g"]),
                           st.text(min_size=100, max_size=140)
                           .filter(lambda t: version == 2 or len(t.encode()) <= 127)))
    if version == 1 and len(topic.encode()) > 127:
        topic = topic[:20]
    born, born_v6 = draw(record_hosts())
    store, store_v6 = draw(record_hosts())
    flags = draw(st.integers(0, 0xFFF)) & ~(L.BORNHOST_V6_FLAG | L.STOREHOST_V6_FLAG)
    flags |= (L.BORNHOST_V6_FLAG if born_v6 else 0) | (L.STOREHOST_V6_FLAG if store_v6 else 0)
    kind = draw(st.sampled_from(["raw", "raw", "ZLIB", "LZ4", "ZSTD", "huge", "empty"]))
    body = draw(st.binary(max_size=64))
    if kind in ("ZLIB", "LZ4", "ZSTD"):
        body = compress(body * 20, kind)
        flags = (flags & ~L.COMPRESSION_TYPE_MASK) | L.COMPRESSED_FLAG | L.COMPRESSION_FLAGS[kind]
    elif kind == "huge":
        body = bytes(range(256)) * 300
    elif kind == "empty":
        body = b""
    i32, i64 = st.integers(-2**31, 2**31 - 1), st.integers(-2**63, 2**63 - 1)
    msg = Message(
        topic=topic, body=body, queue_id=draw(i32), properties_raw=draw(raw_properties()), flag=draw(i32),
        sys_flag=flags, queue_offset=draw(i64), physical_offset=draw(i64),
        born_timestamp=draw(st.one_of(st.integers(0, 2**42), i64)), born_host=born,
        store_timestamp=draw(st.integers(0, 2**42)), store_host=store, reconsume_times=draw(i32),
        prepared_transaction_offset=draw(i64), magic_version=version,
        body_crc=draw(st.one_of(st.none(), st.none(), i32)))
    return encode_record(msg)


@st.composite
def damaged(draw, frame: bytes) -> bytes | None:
    how = draw(st.sampled_from(["none", "truncate", "field", "byte", "null", "extend", "grow"]))
    if how == "none":
        return frame
    if how == "null":
        return None
    if how == "truncate":
        return frame[:draw(st.integers(0, len(frame) - 1))]
    if how == "extend":
        return frame + draw(st.binary(min_size=1, max_size=8))
    buf = bytearray(frame)
    if how == "grow":  # TOTALSIZE covers extra bytes: SIZE_MISMATCH
        extra = draw(st.binary(min_size=1, max_size=8))
        struct.pack_into(">i", buf, 0, len(frame) + len(extra))
        return bytes(buf) + extra
    if how == "field":  # one of the length/magic fields, overwritten
        version = 2 if frame[4:8] == struct.pack(">i", L.MAGIC_V2) else 1
        lay = L.layout_for(struct.unpack_from(">i", frame, L.SYS_FLAG_OFFSET)[0], version)
        body_len = struct.unpack_from(">i", frame, lay.offsets["body_length"])[0]
        topic_len_at = lay.body_offset + body_len
        topic_len = struct.unpack_from(">b" if version == 1 else ">h", frame, topic_len_at)[0]
        spots = [(0, ">i"), (4, ">i"), (lay.offsets["body_length"], ">i"),
                 (topic_len_at, ">b" if version == 1 else ">h"),
                 (topic_len_at + lay.topic_length_width + topic_len, ">h")]
        at, fmt = draw(st.sampled_from(spots))
        lo, hi = {">i": (-2**31, 2**31 - 1), ">h": (-2**15, 2**15 - 1), ">b": (-128, 127)}[fmt]
        struct.pack_into(fmt, buf, at, draw(st.integers(lo, hi)))
    else:
        buf[draw(st.integers(0, len(buf) - 1))] = draw(st.integers(0, 255))
    return bytes(buf)


# ---------------------------------------------------------------------------------------------------------
# Messages the codec round-trips (valid by construction)

host_texts = st.one_of(
    st.tuples(st.binary(min_size=4, max_size=4), st.integers(0, 65535)),
    st.tuples(st.binary(min_size=16, max_size=16), st.integers(0, 65535)),
).map(lambda t: format_host(*t))
property_text = st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="\x01\x02"), max_size=20)
topics = st.text(alphabet=st.sampled_from(sorted(L.TOPIC_VALID_CHARS)), min_size=1, max_size=127)
long_topics = st.text(alphabet=st.sampled_from(sorted(L.TOPIC_VALID_CHARS)), min_size=128, max_size=300)
i32, i64 = st.integers(-2**31, 2**31 - 1), st.integers(-2**63, 2**63 - 1)


@st.composite
def messages(draw):
    version = draw(st.sampled_from([1, 2]))
    born, store = draw(host_texts), draw(host_texts)
    props = draw(st.dictionaries(property_text.filter(bool), property_text.filter(bool), max_size=6))
    sys_flag = draw(st.integers(0, 0x7FF)) & ~(L.BORNHOST_V6_FLAG | L.STOREHOST_V6_FLAG)
    if "[" in born:
        sys_flag |= L.BORNHOST_V6_FLAG
    if "[" in store:
        sys_flag |= L.STOREHOST_V6_FLAG
    return Message(
        topic=draw(long_topics if version == 2 and draw(st.booleans()) else topics),
        body=draw(st.binary(max_size=3000)), queue_id=draw(i32),
        properties_raw=format_properties(props, trailing_separator=draw(st.booleans())), flag=draw(i32),
        sys_flag=sys_flag, queue_offset=draw(i64), physical_offset=draw(st.integers(0, 2**62)),
        born_timestamp=draw(i64), born_host=born, store_timestamp=draw(i64), store_host=store,
        reconsume_times=draw(i32), prepared_transaction_offset=draw(i64), magic_version=version)
