"""Hostile bytes into every parser entry point (hypothesis): each example has a deadline, a memory bound, and
may only end in the entry point's own positioned error where raising is its contract.

Entry points: the record decoder (store_format.codec.decode_record and decoding.kernels.decode_frames on the same
bytes), framing (frame_at / walk_buffer / salvage_buffer / find_next_frame), the consume-queue reader, the
index file reader and its chain walk, the properties parser, the id parsers, the fastjson-tolerant JSON
reader and its accessors, the checkpoint and marker readers, and capped decompression.

Sizes: a few dozen examples per test in ``make test`` (deterministic: ``derandomize``), many more under
``make fuzz`` (``ROCKETMQ_FUZZ=1``; ``FUZZ_EXAMPLES`` overrides the count, ``FUZZ_DEADLINE_MS`` the deadline).
A crash found there becomes an ``@example`` here.
"""
from __future__ import annotations

import json
import re

import struct
import tempfile
import tracemalloc
import zlib
from contextlib import contextmanager
from pathlib import Path

import pyarrow as pa
import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from store_format import layout as L
from store_format.checkpoint import parse_checkpoint, read_markers
from store_format.codec import decode_record, encode_blank, encode_record, record_header
from store_format.commitlog import END_OF_DATA, Frame, SalvageSpan, find_next_frame, frame_at, salvage_buffer, \
    walk_buffer
from store_format.compression import compress, decompress
from store_format.config import consumer_offsets, delay_offsets, dumps_fastjson, loads, read_config, \
    subscription_groups, topic_configs
from store_format.consumequeue import CQFile, classify_unit, discover_queues, read_units
from store_format.errors import ConfigError, ConsumeQueueError, ErrorKind, IdError, IndexFileError, RecordError, \
    StoreFormatError
from store_format.ids import create_offset_msg_id, create_uniq_key, parse_host, parse_offset_msg_id, \
    parse_uniq_key
from store_format.indexfile import IndexFile
from store_format.javahash import index_key, index_key_hash
from store_format.message import Message
from store_format.properties import parse_properties, property_value, split_keys
from store_format.write.writer import IndexFileWriter

from .support.strategies import fuzz, records
from .test_kernels import assert_parity

# ---------------------------------------------------------------------------------------------------------
# Profiles: small and deterministic in `make test`, large and random in `make fuzz`

# ---------------------------------------------------------------------------------------------------------
# Memory: a parser's peak allocation must follow its input, never a length field it read

_KEEP_POOLS = []  # proxy pools must outlive every buffer allocated through them


@contextmanager
def bounded_memory(input_bytes: int, allowance: int = 32 << 20):
    """Fail if the block allocates more than ``allowance + 64 x input_bytes`` at its peak: Python and numpy
    objects through tracemalloc, Arrow buffers through a proxy of the default pool."""
    limit = allowance + 64 * input_bytes
    started = not tracemalloc.is_tracing()
    if started:
        tracemalloc.start()
    tracemalloc.reset_peak()
    base = tracemalloc.get_traced_memory()[0]
    previous = pa.default_memory_pool()
    pool = pa.proxy_memory_pool(previous)
    _KEEP_POOLS.append(pool)
    pa.set_memory_pool(pool)
    try:
        yield
    finally:
        pa.set_memory_pool(previous)
        peak = tracemalloc.get_traced_memory()[1] - base
        if started:
            tracemalloc.stop()
    assert peak <= limit, f"Python/numpy peak {peak} bytes for {input_bytes} input bytes (limit {limit})"
    assert pool.max_memory() <= limit, f"Arrow peak {pool.max_memory()} bytes for {input_bytes} input bytes"


@pytest.fixture(scope="module")
def warm_kernels() -> None:
    """Run the vectorized decoder once, outside every deadline and memory bound: its first call in a process
    compiles or loads code, a one-off cost that has nothing to do with the input."""
    assert_parity([encode_record(Message(topic="T", body=compress(b"warm", "ZLIB"),
                                         sys_flag=L.COMPRESSED_FLAG | L.COMPRESSION_ZLIB_TYPE))])


def positioned(e: StoreFormatError) -> bool:
    """A usable error: a stable kind, and where to look (file, byte position or field)."""
    return isinstance(e.kind, ErrorKind) and (e.file is not None or e.position is not None or e.field is not None)


# ---------------------------------------------------------------------------------------------------------
# Hostile byte strategies

_INTERESTING_I32 = (0, -1, 1, 7, 8, 91, 2**31 - 1, -2**31, 2**16, 0x7FFF, 0x8000)
_MAGICS = (L.MAGIC_V1, L.MAGIC_V2, L.BLANK_MAGIC)


@st.composite
def hostile_edit(draw, buf: bytearray) -> None:
    """One in-place edit of ``buf``: random bytes, an extreme int, a magic, or zeros at any position."""
    if not buf:
        return
    at = draw(st.integers(0, len(buf) - 1))
    how = draw(st.sampled_from(["bytes", "int", "magic", "zeros", "bit"]))
    if how == "bytes":
        run = draw(st.binary(min_size=1, max_size=16))
    elif how == "int":
        run = struct.pack(">i", draw(st.sampled_from(_INTERESTING_I32 + (len(buf), len(buf) - at))))
    elif how == "magic":
        run = struct.pack(">i", draw(st.sampled_from(_MAGICS)))
    elif how == "zeros":
        run = bytes(draw(st.integers(1, 64)))
    else:
        buf[at] ^= 1 << draw(st.integers(0, 7))
        return
    run = run[:len(buf) - at]
    buf[at:at + len(run)] = run


@st.composite
def hostile_frames(draw) -> bytes | None:
    """A record frame after several hostile edits, a truncation or an extension; or raw bytes."""
    kind = draw(st.sampled_from(["edited", "edited", "raw", "magic-prefixed", "null"]))
    if kind == "null":
        return None
    if kind == "raw":
        return draw(st.binary(max_size=300))
    if kind == "magic-prefixed":
        size = draw(st.sampled_from(_INTERESTING_I32))
        return struct.pack(">ii", size, draw(st.sampled_from(_MAGICS))) + draw(st.binary(max_size=200))
    buf = bytearray(draw(records()))
    for _ in range(draw(st.integers(1, 4))):
        draw(hostile_edit(buf))
    cut = draw(st.one_of(st.none(), st.integers(0, len(buf))))
    out = bytes(buf[:cut] if cut is not None else buf)
    return out + draw(st.binary(max_size=8))


# ---------------------------------------------------------------------------------------------------------
# 1. Record decoders: the scalar codec and the vectorized kernel, on the same hostile bytes


@pytest.mark.slow
@fuzz(60)
@given(st.lists(hostile_frames(), min_size=1, max_size=5))
@example([encode_record(Message(topic="0", body_crc=-1))])  # an empty body's CRC field is never checked
def test_record_decoders_agree_on_hostile_bytes(warm_kernels, frames):
    """decode_record raises only a positioned RecordError; decode_frames never raises and reports the same
    error kind and field per row, or the same values (test_kernels.assert_parity compares every column)."""
    size = sum(len(f) for f in frames if f)
    with bounded_memory(size):
        assert_parity(frames)
        for frame in frames:
            if frame is None:
                continue
            for strict in (False, True):
                try:
                    msg = decode_record(frame, check_crc=True, strict_utf8=strict)
                except RecordError as e:
                    assert positioned(e) and e.field
                    continue
                assert msg.store_size <= len(frame) and (msg.body_crc_ok or not msg.body)  # no CRC of b''
            if len(frame) >= 8:
                assert record_header(frame) == struct.unpack_from(">ii", frame)


@fuzz(40)
@given(st.integers(0, 2**40), st.sampled_from([2**31 - 1, 2**30, 10**9]))
def test_a_huge_declared_size_does_not_allocate(warm_kernels, physical_offset, declared):
    """TOTALSIZE / BODYLENGTH / PROPERTIESLENGTH claiming up to 2 GiB in a 200-byte frame."""
    frame = bytearray(encode_record(Message(topic="T", body=b"x" * 50, physical_offset=physical_offset)))
    lay = L.layout_for(0)
    for at in (0, lay.offsets["body_length"]):
        hurt = bytearray(frame)
        struct.pack_into(">i", hurt, at, declared)
        with bounded_memory(len(hurt), allowance=4 << 20):
            with pytest.raises(RecordError) as e:
                decode_record(bytes(hurt))
            assert e.value.kind in (ErrorKind.TRUNCATED, ErrorKind.BAD_LENGTH)
            assert_parity([bytes(hurt)])
            assert frame_at(bytes(hurt), 0, len(hurt), physical_offset).kind == "stop"


# ---------------------------------------------------------------------------------------------------------
# 2. Framing over hostile segments


@st.composite
def segments(draw):
    """(buf, base offset, planted records [(pos, size)], damaged [(start, end)]): valid records at their
    PHYSICALOFFSET among garbage, zero runs and fake headers, ending in zeros, a blank or nothing; then
    hostile edits, whose byte ranges are returned."""
    base = draw(st.sampled_from([0, 1 << 20, 3 << 30, 2**40]))
    parts, planted, pos = [], [], 0
    for kind in draw(st.lists(st.sampled_from(["record"] * 4 + ["garbage", "zeros", "header"]), max_size=8)):
        if kind == "record":
            raw = encode_record(Message(
                topic=draw(st.sampled_from(["T", "TopicTest", "%RETRY%g"])), body=draw(st.binary(max_size=120)),
                properties_raw=draw(st.sampled_from(["", "KEYS\x01k\x02TAGS\x01a", "UNIQ_KEY\x01AB"])),
                physical_offset=base + pos, magic_version=draw(st.sampled_from([1, 1, 2]))))
            planted.append((pos, len(raw)))
        elif kind == "garbage":
            raw = draw(st.binary(min_size=1, max_size=64))
        elif kind == "zeros":
            raw = bytes(draw(st.integers(1, 64)))
        else:
            raw = struct.pack(">ii", draw(st.sampled_from(_INTERESTING_I32)), draw(st.sampled_from(_MAGICS))) + \
                draw(st.binary(max_size=40))
        parts.append(raw)
        pos += len(raw)
    tail = draw(st.sampled_from(["zeros", "blank", "none", "garbage"]))
    if tail == "zeros":
        parts.append(bytes(draw(st.integers(1, 200))))
    elif tail == "blank":
        n = draw(st.integers(8, 100))
        parts.append(encode_blank(n) + bytes(n - 8))
    elif tail == "garbage":
        parts.append(draw(st.binary(min_size=1, max_size=30)))
    buf = bytearray(b"".join(parts))
    damaged = []
    for _ in range(draw(st.integers(0, 3))):
        before = bytes(buf)
        draw(hostile_edit(buf))
        changed = [i for i in range(len(buf)) if buf[i] != before[i]]
        if changed:
            damaged.append((changed[0], changed[-1] + 1))
    return bytes(buf), base, planted, damaged


def _items(buf, base, **kw):
    return list(salvage_buffer(buf, "seg", base, **kw))


@fuzz(80)
@given(segments(), st.data())
def test_framing_on_hostile_segments(seg, data):
    buf, base, planted, damaged = seg
    start = data.draw(st.sampled_from([0] + [p for p, _ in planted] + [data.draw(st.integers(0, len(buf)))]))
    with bounded_memory(len(buf)):
        walk = list(walk_buffer(buf, "seg", base, start=start))
        salvage = _items(buf, base, start=start)
        for pos in {start, len(buf), max(0, len(buf) - 3), data.draw(st.integers(0, len(buf) + 8))}:
            found = frame_at(buf, pos, len(buf), base)
            assert found.kind in ("message", "blank", "stop") and (found.kind != "stop" or found.stop_kind is not None)
        nxt = find_next_frame(buf, start, len(buf), base)
    # the walk: messages back to back from start, then exactly one blank or stop
    assert walk and all(f.kind == "message" for f in walk[:-1]) and walk[-1].kind in ("blank", "stop")
    pos = start
    for f in walk:
        assert f.file_position == pos and f.physical_offset == base + pos
        if f.kind == "message":
            assert f.message.physical_offset == base + pos and f.message.store_size == f.size
            pos += f.size
    assert pos <= len(buf)
    if walk[-1].kind == "stop" and walk[-1].stop_kind != END_OF_DATA:
        err = walk[-1].stop_error()
        assert isinstance(err, RecordError) and err.position == walk[-1].file_position and err.field
    # salvage: in order, disjoint, inside the buffer, and a superset of the walk's messages
    last_end = start
    for it in salvage:
        assert it.file_position >= last_end
        end = it.file_position + (it.length if isinstance(it, SalvageSpan) else
                                  (it.size if it.kind in ("message", "blank") else 0))
        assert end <= len(buf)
        last_end = max(last_end, end)
    salvaged = {(f.file_position, f.size) for f in salvage if isinstance(f, Frame) and f.kind == "message"}
    assert {(f.file_position, f.size) for f in walk if f.kind == "message"} <= salvaged
    # find_next_frame names a real frame
    if nxt is not None:
        assert nxt >= start and frame_at(buf, nxt, len(buf), base).kind in ("message", "blank")
    # every planted record left intact is salvaged when its body CRC or what follows it confirms it (up to the
    # first blank: what follows one is stale, and a blank forged by the edits ends the segment like a real one)
    blank = min((f.file_position for f in salvage if isinstance(f, Frame) and f.kind == "blank"), default=len(buf))
    intact = [(p, n) for p, n in planted
              if start <= p and p + n <= blank and not any(a < p + n and p < b for a, b in damaged)]
    for p, n in intact:
        following = frame_at(buf, p + n, len(buf), base)
        if decode_record(buf, p, limit=p + n).body or following.kind in ("message", "blank") \
                or following.stop_kind == END_OF_DATA:
            assert (p, n) in salvaged, f"intact record at {p} ({n} bytes) lost by salvage"


def _records_with_bad_magic(bad: set[int], n: int = 4) -> tuple[bytes, list[int]]:
    """``n`` records back to back (then zeros); those in ``bad`` get an illegal magic.  Returns the buffer
    and the record positions."""
    parts, positions, pos = [], [], 0
    for i in range(n):
        raw = bytearray(encode_record(Message(topic="T", body=b"body %d" % i, physical_offset=pos)))
        if i in bad:
            raw[L.MAGIC_OFFSET:L.MAGIC_OFFSET + 4] = struct.pack(">i", 0x0BADC0DE)
        parts.append(bytes(raw))
        positions.append(pos)
        pos += len(raw)
    return b"".join(parts) + bytes(100), positions


def _salvaged(buf: bytes) -> list[int]:
    return [f.file_position for f in salvage_buffer(buf, "seg", 0) if isinstance(f, Frame) and f.kind == "message"]


def test_salvage_keeps_a_record_between_two_damaged_ones():
    """Its body CRC proves the record in the middle, although what follows it is damaged."""
    buf, positions = _records_with_bad_magic({0, 2})
    assert _salvaged(buf) == [positions[1], positions[3]]
    buf, positions = _records_with_bad_magic({0, 2, 4, 6}, n=8)  # every other record damaged
    assert _salvaged(buf) == positions[1::2]


def test_salvage_keeps_a_record_after_one_damaged_one():
    buf, positions = _records_with_bad_magic({0})
    assert _salvaged(buf) == positions[1:]


def test_resync_needs_a_following_frame_when_the_body_is_empty():
    """An empty body has no CRC to check: such a candidate is only taken when a frame, a blank or zeros follow
    it, so a record-shaped run of bytes is not taken for a record on its framing alone."""
    parts, pos = [], 0
    for i, body in enumerate([b"first", b"", b"third", b""]):
        raw = bytearray(encode_record(Message(topic="T", body=body, physical_offset=pos)))
        if i in (0, 2):
            raw[L.MAGIC_OFFSET:L.MAGIC_OFFSET + 4] = struct.pack(">i", 0x0BADC0DE)
        parts.append(bytes(raw))
        pos += len(raw)
    starts = [sum(map(len, parts[:i])) for i in range(len(parts))]
    buf = b"".join(parts) + bytes(100)
    # record 1 (empty body) is followed by damage: not confirmable; record 3 is followed by zeros
    assert _salvaged(buf) == [starts[3]]
    assert find_next_frame(buf, 1, len(buf), 0, confirm=False) == starts[1]
    assert find_next_frame(buf, 1, len(buf), 0) == starts[3]


def test_a_record_shaped_run_with_a_wrong_body_crc_is_not_a_resync_point():
    """A candidate whose body does not match its BODYCRC proves nothing, even with every other field right."""
    good = encode_record(Message(topic="T", body=b"payload", physical_offset=0))
    bad_crc = bytearray(encode_record(Message(topic="T", body=b"payload", physical_offset=len(good))))
    struct.pack_into(">i", bad_crc, L.record_layout(False, False).offsets["body_crc"], 12345)
    after = bytearray(encode_record(Message(topic="T", body=b"x", physical_offset=len(good) + len(bad_crc))))
    after[L.MAGIC_OFFSET:L.MAGIC_OFFSET + 4] = bytes(4)  # damage after it too
    buf = bytearray(good) + bad_crc + after
    buf[L.MAGIC_OFFSET:L.MAGIC_OFFSET + 4] = struct.pack(">i", 0x0BADC0DE)  # the walk must resync from 0
    assert find_next_frame(bytes(buf), 1, len(buf), 0) is None
    assert _salvaged(bytes(buf)) == []


def test_only_ascii_twenty_digit_names_are_segments(tmp_path):
    from store_format.commitlog import list_segments

    d = tmp_path / "commitlog"
    d.mkdir()
    (d / "00000000000000000000").write_bytes(bytes(64))
    for odd in ("00000000000000000000\n", "\u0660" * 19 + "\u0661", "0000000000000000000a"):
        (d / odd).write_bytes(bytes(64))
    assert [s.name for s in list_segments(d)] == ["00000000000000000000"]


# ---------------------------------------------------------------------------------------------------------
# 3. Consume queue reader


@pytest.fixture(scope="module")
def scratch():
    with tempfile.TemporaryDirectory(prefix="fuzz-") as d:
        yield Path(d)


@pytest.fixture(scope="module")
def compiled():
    """decoding.compiled loaded before the examples: on a cold numba cache it compiles for tens of seconds, which must
    not count against an example's deadline."""
    from decoding.kernels import _compiled

    return _compiled()


@st.composite
def cq_bytes(draw):
    units = draw(st.lists(st.tuples(st.one_of(st.integers(-2**63, 2**63 - 1), st.sampled_from([0, -1, 2**62])),
                                    st.sampled_from(_INTERESTING_I32 + (120, 300)),
                                    st.one_of(st.integers(-2**63, 2**63 - 1), st.just(0))), max_size=12))
    raw = b"".join(struct.pack(L.CQ_UNIT_STRUCT, *u) for u in units)
    raw += bytes(20 * draw(st.integers(0, 3)))
    return raw + draw(st.binary(max_size=25))


@pytest.mark.slow
@fuzz(60)
@given(cq_bytes(), st.booleans(), st.booleans())
def test_consume_queue_reader_on_hostile_files(scratch, raw, stop_at_invalid, include_zero):
    path = scratch / "00000000000000000040"
    path.write_bytes(raw)
    cq = CQFile("T", 0, path, 40, len(raw))
    got = []
    with bounded_memory(len(raw)):
        try:
            for u in read_units(cq, stop_at_invalid=stop_at_invalid, include_zero=include_zero):
                got.append(u)
        except ConsumeQueueError as e:
            assert e.kind == ErrorKind.TRUNCATED and len(raw) % 20 and e.position == len(raw) // 20 * 20
        else:
            assert len(raw) % 20 == 0
    for i, u in enumerate(got):
        assert u.file_position == i * 20 and u.queue_offset == 2 + i
        assert (u.physical_offset, u.size, u.tags_code) == struct.unpack_from(L.CQ_UNIT_STRUCT, raw, i * 20)
        assert u.kind == classify_unit(u.physical_offset, u.size, u.tags_code)
        if stop_at_invalid:
            assert u.kind in ("entry", "pre_blank")


_DIR_NAMES = st.one_of(st.sampled_from(["0", "-1", "--5", "+3", "²", "٣", "99999999999", "0\n", " 1", "1 ", "a"]),
                       st.text(st.characters(exclude_categories=("Cs",), exclude_characters="/\x00"),
                               min_size=1, max_size=12).filter(lambda s: s not in (".", "..")))


@pytest.mark.slow
@fuzz(40)
@given(st.lists(st.tuples(_DIR_NAMES, _DIR_NAMES), min_size=1, max_size=4))
@example([("T", "--5"), ("T", "²"), ("T", "0"), ("U", "99999999999")])  # int() refused the first two
def test_consume_queue_discovery_on_hostile_names(names):
    with tempfile.TemporaryDirectory() as d:
        root = Path(d)
        for topic, queue in names:
            try:
                (root / topic / queue).mkdir(parents=True, exist_ok=True)
                (root / topic / queue / "00000000000000000000").write_bytes(bytes(20))
                (root / topic / queue / "00000000000000000000\n").write_bytes(bytes(20))
            except OSError:
                continue  # a name this file system refuses
        queues = discover_queues(root)
        for (topic, qid), files in queues.items():
            assert -2**31 <= qid < 2**31 and (root / topic).is_dir()
            assert [f.path.name for f in files] == ["00000000000000000000"]


# ---------------------------------------------------------------------------------------------------------
# 4. Index file reader and its bounded chain walk


@st.composite
def index_files(draw):
    """(bytes, slots, entries, keys): an index written by the writer's IndexFile.putKey, then edited."""
    slots = draw(st.integers(1, 8))
    num = draw(st.integers(2, 24))
    keys = draw(st.lists(st.sampled_from(["T#a", "T#b", "T#c", "U#a", "T#Aa", "T#BB"]), max_size=num - 1))
    with tempfile.TemporaryDirectory() as d:
        f = IndexFileWriter(Path(d) / "idx", slots, num, create=True)
        for i, k in enumerate(keys):
            f.put(index_key_hash(k), 1000 + 100 * i, 1_700_000_000_000 + 1000 * i)
        f.close()
        raw = bytearray((Path(d) / "idx").read_bytes())
    entries_at = L.INDEX_HEADER_SIZE + slots * L.INDEX_SLOT_SIZE
    for _ in range(draw(st.integers(0, 4))):
        where = draw(st.sampled_from(["index_count", "slot", "prev", "time_diff", "any"]))
        value = struct.pack(">i", draw(st.one_of(st.sampled_from(_INTERESTING_I32), st.integers(-3, num + 3))))
        at = {"index_count": L.INDEX_HEADER.offset("index_count"),
              "slot": L.INDEX_HEADER_SIZE + L.INDEX_SLOT_SIZE * draw(st.integers(0, slots - 1)),
              "prev": entries_at + L.INDEX_ENTRY_SIZE * draw(st.integers(0, num - 1))
              + L.INDEX_ENTRY.offset("prev_index"),
              "time_diff": entries_at + L.INDEX_ENTRY_SIZE * draw(st.integers(0, num - 1))
              + L.INDEX_ENTRY.offset("time_diff")}.get(where)
        if at is None:
            draw(hostile_edit(raw))
        else:
            raw[at:at + 4] = value
    cut = draw(st.one_of(st.none(), st.none(), st.integers(0, len(raw))))
    return bytes(raw[:cut] if cut is not None else raw), slots, num, keys


@pytest.mark.slow
@fuzz(80)
@given(index_files(), st.sampled_from(["given", "inferred", "wrong"]), st.data())
def test_index_reader_and_chain_walk_on_hostile_files(scratch, idx, geometry, data):
    raw, slots, num, keys = idx
    path = scratch / "20240101000000000"
    path.write_bytes(raw)
    args = {"given": (slots, num), "inferred": (None, None),
            "wrong": (data.draw(st.integers(-2, slots + 3)), data.draw(st.one_of(st.none(), st.integers(-2, 40))))
            }[geometry]
    with bounded_memory(len(raw)):
        try:
            f = IndexFile(path, *args)
        except IndexFileError as e:
            assert positioned(e) and e.kind in (ErrorKind.TRUNCATED, ErrorKind.BAD_GEOMETRY)
            return
        with f:
            entries = list(f.entries())
            list(f.slots())
            for key in set(keys) | {"T#zz"}:
                offsets, visited, reason = f.select_phy_offsets(key, with_chain=True)
                assert len(visited) <= min(max(f.header.index_count, 0), f.index_num)
                assert len({e.index for e in visited}) == len(visited), f"chain revisits an entry ({reason})"
                assert all(0 < e.index < f.index_num for e in visited)
                begin = f.header.begin_timestamp
                assert offsets == [e.physical_offset for e in visited if e.key_hash == index_key_hash(key)
                                   and e.time_diff >= 0 and 0 <= begin + e.time_diff * 1000 <= 2**63 - 1]
                capped = f.select_phy_offsets(key, max_num=1)
                assert capped == offsets[:1]
    assert len(entries) <= f.index_num


def test_impossible_index_geometry_is_a_positioned_error(scratch):
    """Regressions: 0 hash slots divided by zero in the chain walk; a slot count too large for the file
    inferred a negative entry count and read past the mapping."""
    path = scratch / "20240101000000001"
    path.write_bytes(bytes(L.index_file_size(4, 16)))
    for slots, entries in ((0, 16), (-1, 16), (1000, None), (None, 1000)):
        with pytest.raises(IndexFileError) as e:
            IndexFile(path, slots, entries)
        assert e.value.kind == ErrorKind.BAD_GEOMETRY and e.value.file == str(path)


def test_index_writer_keys_are_found_in_an_undamaged_file(scratch):
    """The fuzz above edits the file; without edits every key put is found (the strategy is sound)."""
    with tempfile.TemporaryDirectory() as d:
        f = IndexFileWriter(Path(d) / "idx", 4, 16, create=True)
        for i, k in enumerate(["T#a", "T#b", "T#a"]):
            f.put(index_key_hash(k), 1000 + i, 1_700_000_000_000)
        f.close()
        with IndexFile(Path(d) / "idx", 4, 16) as idx:
            assert idx.lookup("T", "a") == [1002, 1000] and idx.select_phy_offsets(index_key("T", "b")) == [1001]


# ---------------------------------------------------------------------------------------------------------
# 5. Properties, 6. ids


_SEP_TEXT = st.text(st.sampled_from(["\x01", "\x02", "a", "K", "é", " ", "😀", "\x00"]), max_size=40)


@fuzz(200)
@given(st.one_of(_SEP_TEXT, st.text(max_size=60)), st.one_of(st.sampled_from(["a", "K", "KEYS", "a\x01"]),
                                                             st.text(max_size=4)))
def test_properties_parser_on_hostile_text(raw, name):
    props = parse_properties(raw)
    assert all(k and v and "\x02" not in k + v and "\x01" not in k for k, v in props.items())
    if "\x02" not in name and name:
        assert property_value(raw, name) == props.get(name)
    assert all(k and " " not in k for k in split_keys(props.get("KEYS", raw)))


_HEXISH = st.text(st.sampled_from(list("0123456789abcdefABCDEF g-")), max_size=60)


@fuzz(200)
@given(st.one_of(_HEXISH, st.text(max_size=60)), st.integers(-2**70, 2**70))
@example("0A000001" + "0" * 24, 2**62)  # a damaged born time beyond datetime: IdError, not ValueError
@example("1.2.3.4:" + "9" * 30, 0)  # a port beyond a Java int
def test_id_parsers_on_hostile_text(text, near_ms):
    for parse in (parse_offset_msg_id, parse_uniq_key, parse_host):
        try:
            parsed = parse(text)
        except IdError as e:
            assert e.kind == ErrorKind.BAD_ID and e.field
            continue
        if parse is parse_offset_msg_id:
            assert create_offset_msg_id(parsed.store_ip, parsed.store_port, parsed.physical_offset) == \
                bytes.fromhex(text).hex().upper()
        elif parse is parse_uniq_key:
            try:
                t = parsed.timestamp(near_ms)
            except IdError as e:
                assert e.kind == ErrorKind.OUT_OF_RANGE
            else:
                assert isinstance(t, int)
        else:
            ip, port = parsed
            assert len(ip) in (4, 16) and -2**31 <= port < 2**31


@fuzz(100)
@given(st.sampled_from([bytes([10, 0, 0, 1]), bytes(range(16))]), st.integers(0, 65535),
       st.integers(-2**31, 2**31 - 1), st.integers(0, 2**42), st.integers(0, 65535))
def test_uniq_key_round_trip(ip, pid, cl_hash, ts, counter):
    uk = parse_uniq_key(create_uniq_key(ip, pid, cl_hash, ts, counter))
    assert (uk.client_ip, uk.pid, uk.class_loader_hash, uk.counter) == (ip, pid, cl_hash, counter)
    assert uk.timestamp(ts) == ts


# ---------------------------------------------------------------------------------------------------------
# 7. fastjson-tolerant JSON and the config accessors

_JSON_VALUES = st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(-2**70, 2**70), st.text(max_size=8),
              st.floats(allow_nan=False, allow_infinity=False)),
    lambda inner: st.one_of(st.lists(inner, max_size=4),
                            st.dictionaries(st.one_of(st.text(max_size=6), st.integers(-5, 2**40)), inner,
                                            max_size=4)),
    max_leaves=20)


@st.composite
def config_texts(draw):
    kind = draw(st.sampled_from(["fastjson", "edited", "raw", "deep", "bigint"]))
    if kind == "raw":
        return draw(st.text(st.sampled_from(list('{}[]:,"0123456789 \t\nabtrufl-.e\\')), max_size=80))
    if kind == "deep":
        return draw(st.sampled_from(["[", "{\"a\":", "{1:"])) * draw(st.integers(150, 5000))
    if kind == "bigint":
        return "{\"offsetTable\":{1:" + "9" * draw(st.integers(4000, 6000)) + "}}"
    text = dumps_fastjson({"offsetTable": draw(_JSON_VALUES), "topicConfigTable": draw(_JSON_VALUES)})
    if kind == "edited" and text:
        at = draw(st.integers(0, len(text) - 1))
        text = text[:at] + draw(st.text(max_size=3)) + text[at + draw(st.integers(0, 3)):]
    return text


@pytest.mark.slow
@fuzz(150)
@given(config_texts())
@example("{\"offsetTable\":{\"²\":1}}")  # a Unicode digit int() refuses
@example("{\"offsetTable\":[1,2]}")  # a table that is not a map
@example("{\"topicConfigTable\":\"x\"}")
@example("1" * 5000)  # an integer longer than int() accepts
def test_fastjson_reader_on_hostile_text(scratch, text):
    with bounded_memory(len(text) * 4):
        try:
            value = loads(text, "x.json")
        except ConfigError as e:
            assert e.kind == ErrorKind.BAD_JSON and e.position is not None and 0 <= e.position <= len(text)
            value = None
        d = scratch / "config"
        d.mkdir(exist_ok=True)
        (d / "consumerOffset.json").write_bytes(text.encode("utf-8", "surrogatepass"))
        cfg = read_config(d, "consumerOffset.json")
        raw = text.encode("utf-8", "surrogatepass")
        decodes_to_nothing = bool(raw) and raw.strip() in (b"", b"null")  # the broker's table is empty, no .bak read
        assert (cfg.data is None) == (not isinstance(value, dict) and not decodes_to_nothing)
        assert cfg.data != {} or decodes_to_nothing or value == {}
        for accessor in (consumer_offsets, delay_offsets, topic_configs, subscription_groups):
            try:
                accessor(cfg)
            except ConfigError as e:
                assert e.kind == ErrorKind.BAD_CONFIG and e.field and e.file == cfg.source


@fuzz(150)
@given(config_texts())
@example("{\"a\":{0:1,\"x\":2},\"b\":{3:4}}")  # a mixed map: left to the tolerant parser
@example("{\"a\":\"x{0:1}\\\"{2:3}\",\"b\":{ 5 :6, -0:7, 5:8}}")  # maps inside strings, spaces, duplicates
@example("{\"a\":{01:2}}")  # a leading zero: not a JSON number
@example("{\"a\":[1,2],\"b\":{0:1}}")  # an array of its own
def test_the_fast_config_path_agrees_with_the_tolerant_parser(text):
    """The fast path (numpy rewrite + the C decoder) gives exactly what the tolerant parser gives, or steps aside
    (issue 22: a 200 MB consumerOffset.json in seconds)."""
    from store_format.config import _NO_FAST_PATH, _fast_loads, _slow_loads

    fast = _fast_loads(text, min_size=0)
    try:
        slow = _slow_loads(text, "x.json")
    except ConfigError:
        assert fast is _NO_FAST_PATH
        return
    assert fast is _NO_FAST_PATH or (fast == slow and repr(fast) == repr(slow))


@st.composite
def _strict_json_texts(draw):
    """Strict JSON (what most small config files are), sometimes edited into something else."""
    text = json.dumps(draw(_JSON_VALUES), indent=draw(st.sampled_from([None, "\t"])))
    if draw(st.booleans()) and text:
        at = draw(st.integers(0, len(text) - 1))
        text = text[:at] + draw(st.text(st.sampled_from(list('{}[]:,"0 ab\\')), max_size=3)) + \
            text[at + draw(st.integers(0, 3)):]
    return text


@fuzz(150)
@given(st.one_of(_strict_json_texts(), config_texts()))
@example("{\"a\":1,\"b\":2,\"a\":3}")  # a repeated key: its last value, in its first place
@example("[" * 200 + "]" * 200)  # as deep as the parser goes
@example("[" * 201 + "]" * 201)  # one deeper: refused, with its position
@example("{\"a\":\"[[[[\",\"b\":[1,2,]}")  # brackets in a string; a trailing comma in an array
@example("{\"a\":1,}")  # a trailing comma in an object: the parser's tolerance
@example("\ufeff{}")  # a byte-order mark
@example("{\"a\":NaN,\"b\":-Infinity,\"c\":-0,\"d\":1e400,\"e\":\"\\ud800\"}")
@example("{\"a\":" + "1" * 5000 + "}")  # an integer longer than int() accepts
@example("{\"a\":1} x")  # trailing characters
@example("[" + ",".join(["{}"] * 300) + "]")  # more objects than the depth allows, none nested: the C decoder
@example("{\"a\":\"" + "[" * 300 + "\",\"b\":[{\"c\":1}]}")  # brackets in a string are not nesting
@example("[\"\\\\\\\"" + "{" * 250 + "\"]")  # ... nor after an escaped quote in one
@example("[{}," + "[" * 199 + "1" + "]" * 199 + "]")  # as deep as the parser goes, past 200 brackets
@example("[{}," + "[" * 200 + "1" + "]" * 200 + "]")  # one deeper: refused, with its position
def test_the_c_decoder_path_agrees_with_the_tolerant_parser(text):
    """Config text read by the C decoder where it is strict JSON (``_slow_loads``) gives exactly what the tolerant
    parser gives, or the parser reads it and raises the same error at the same place."""
    from store_format.config import _slow_loads, _tolerant_loads

    try:
        want = _tolerant_loads(text, "x.json")
    except ConfigError as e:
        with pytest.raises(ConfigError) as got:
            _slow_loads(text, "x.json")
        assert (got.value.kind, got.value.message, got.value.position) == (e.kind, e.message, e.position)
        return
    got = _slow_loads(text, "x.json")
    assert got == want and repr(got) == repr(want)  # keys' types and order too


_OFFSET_KEYS = st.one_of(st.sampled_from(["T@g", "T@h", "U@g", "%RETRY%g@g", "nogroup", "a@b@c"]),
                         st.text("ab@", max_size=4))
_QUEUE_IDS = st.one_of(st.integers(0, 40), st.integers(-2**63, 2**63 - 1), st.sampled_from([2**31, -2**31 - 1]))


@fuzz(100)
@given(st.lists(st.tuples(_OFFSET_KEYS, st.lists(st.tuples(_QUEUE_IDS, st.integers(-2**63, 2**63 - 1)), max_size=6)),
                max_size=8))
def test_offset_columns_equal_the_dict_path(compiled, scratch, table):
    """The consumer-offset rows built column-wise from the fast path (no Python object per offset) are the rows
    the dict path gives, problems included, for any offsetTable of flat Integer-keyed maps (duplicates, keys that
    are not topic@group, queue ids outside int, offsets of 19 digits that send the file to the tolerant parser)."""
    from decoding.metadata import table_rows
    from store_format import config as C

    text = "{\"offsetTable\":{" + ",".join(
        json.dumps(k) + ":{" + ",".join(f"{q}:{o}" for q, o in entries) + "}" for k, entries in table) + "}}"
    d = scratch / "offsets"
    (d / "config").mkdir(parents=True, exist_ok=True)
    (d / "config" / "consumerOffset.json").write_text(text)
    keep = C._FAST_MIN
    try:
        C._FAST_MIN = 0
        fast = table_rows("consumer_offsets", "b", str(d))
        C._FAST_MIN = 1 << 62
        slow = table_rows("consumer_offsets", "b", str(d))
    finally:
        C._FAST_MIN = keep
    assert fast == slow


@pytest.mark.slow
@fuzz(100)
@given(st.dictionaries(st.one_of(st.text(max_size=6), st.integers(-5, 2**40)), _JSON_VALUES, max_size=5))
def test_fastjson_round_trip(obj):
    assert loads(dumps_fastjson(obj)) == obj


@fuzz(60)
@given(st.binary(max_size=200), st.binary(max_size=200))
def test_config_bytes_and_bak_fallback(scratch, main, bak):
    d = scratch / "cfg-bytes"
    d.mkdir(exist_ok=True)
    (d / "topics.json").write_bytes(main)
    (d / "topics.json.bak").write_bytes(bak)
    cfg = read_config(d, "topics.json")
    assert cfg.source in (None, str(d / "topics.json"), str(d / "topics.json.bak"))
    assert all(isinstance(e, ConfigError) and positioned(e) for e in cfg.errors)


# ---------------------------------------------------------------------------------------------------------
# 8. Checkpoint and markers


@fuzz(100)
@given(st.binary(max_size=80))
def test_checkpoint_and_markers_on_hostile_bytes(scratch, raw):
    try:
        cp = parse_checkpoint(raw, "checkpoint")
    except StoreFormatError as e:
        assert e.kind == ErrorKind.TRUNCATED and len(raw) < L.CHECKPOINT_MIN_SIZE and e.position == len(raw)
    else:
        assert cp.min_timestamp >= 0 and cp.min_timestamp_index <= cp.min_timestamp
        assert (cp.physic_msg_timestamp,) == struct.unpack_from(">q", raw, 0)
    (scratch / "abort").write_bytes(raw)
    m = read_markers(scratch)
    assert m.abort and (m.abort_pid is None or m.abort_pid >= 0)


# ---------------------------------------------------------------------------------------------------------
# 9. Capped decompression


@st.composite
def compressed_bodies(draw):
    kind = draw(st.sampled_from(["ZLIB", "LZ4", "ZSTD"]))
    plain = draw(st.binary(max_size=200)) * draw(st.integers(1, 50))
    body = compress(plain, kind)
    how = draw(st.sampled_from(["intact", "truncated", "edited", "raw", "tail"]))
    if how == "truncated":
        body = body[:draw(st.integers(0, len(body) - 1))]
    elif how == "edited":
        buf = bytearray(body)
        draw(hostile_edit(buf))
        body = bytes(buf)
    elif how == "raw":
        body = draw(st.binary(max_size=100))
    elif how == "tail":
        body += draw(st.binary(min_size=1, max_size=10))
    return kind, plain, body, how


@fuzz(120)
@given(compressed_bodies(), st.integers(0, 12000))
@example(("ZSTD", b"x" * 100, compress(b"x" * 100, "ZSTD")[:-4], "truncated"), 1 << 20)  # silently empty before
def test_decompression_with_caps_on_hostile_bodies(case, cap):
    kind, plain, body, how = case
    with bounded_memory(len(body), allowance=cap + (4 << 20)):
        try:
            out = decompress(body, kind, cap)
        except StoreFormatError as e:
            assert e.kind == ErrorKind.DECOMPRESSION and e.field == "body"
            assert how != "intact" or len(plain) > cap
            return
    assert len(out) <= cap
    if how in ("intact", "tail"):
        assert out == plain
    assert how != "truncated" or out == plain  # a cut stream is an error unless the cut bytes were not needed


@pytest.mark.parametrize("kind", ["ZLIB", "LZ4", "ZSTD"])
def test_a_small_body_does_not_allocate_the_cap(kind):
    """Regression: lz4 and zstd were asked for up to the cap (64 MiB) in one call and allocated all of it for
    every compressed body."""
    body = compress(b"small body " * 100, kind)
    with bounded_memory(len(body), allowance=4 << 20):
        assert decompress(body, kind) == b"small body " * 100


def test_cut_streams_are_errors_in_every_codec():
    """The regression the fuzz found: zstd was the one codec whose cut frame decoded to b'' silently."""
    for kind in ("ZLIB", "LZ4", "ZSTD"):
        body = compress(b"hello " * 500, kind)
        with pytest.raises(StoreFormatError, match="truncated"):
            decompress(body[:len(body) // 2], kind)
        with pytest.raises(StoreFormatError, match="DECOMPRESSION"):
            decompress(b"", kind)
    assert decompress(zlib.compress(b"abc") + b"trailing", "ZLIB") == b"abc"  # like Inflater: stops at the end


_OFFSET_IDS = st.one_of(st.none(), st.text(st.sampled_from(list("0123456789abcdefABCDEF g")), min_size=30, max_size=58),
                        st.builds(lambda ip, port, off: create_offset_msg_id(ip, port, off),
                                  st.sampled_from([bytes(4), b"\x0a\x00\x00\x01", bytes(range(16))]),
                                  st.integers(-2**31, 2**31 - 1), st.integers(-2**63, 2**63 - 1)))


@fuzz(200)
@given(st.lists(_OFFSET_IDS, max_size=20), st.integers(0, 3))
def test_offset_ids_parsed_together_as_one_by_one(ids, skip):
    """offset_msg_id_offsets (the audit's vectorized parse of retried messages' origin ids) agrees with
    parse_offset_msg_id on every id, the ones it refuses included, on a slice of an array too."""
    import pyarrow as pa

    from store_format.ids import offset_msg_id_offsets

    ids = ids[skip:]
    offsets, valid = offset_msg_id_offsets(pa.array([None] * skip + ids, pa.string()).slice(skip))
    for text, offset, ok in zip(ids, offsets.tolist(), valid.tolist()):
        try:
            want = parse_offset_msg_id(text).physical_offset
        except IdError:
            assert not ok and offset == 0
        else:
            assert ok and offset == want


_OFFSET_NAMES = st.one_of(_OFFSET_KEYS, st.text(st.sampled_from(list('ab@"\\/\x01é😀')), max_size=5))


@st.composite
def offset_files(draw):
    """consumerOffset.json as fastjson writes it (dumps_fastjson: tabs, bare Integer keys), sometimes with another
    top-level member (5.x's dataVersion) before or after, then sometimes edited at random (a cut, a few characters
    in, a byte out) or with a spacing fastjson never writes."""
    table = draw(st.dictionaries(_OFFSET_NAMES, st.dictionaries(_QUEUE_IDS, st.integers(-2**63, 2**63 - 1),
                                                                max_size=5), max_size=6))
    doc = {"offsetTable": table}
    extra = draw(st.sampled_from([None, "before", "after"]))
    if extra:
        version = {"dataVersion": {"counter": draw(st.integers(0, 9)), "timestamp": 1700000000000}}
        doc = {**version, **doc} if extra == "before" else {**doc, **version}
    text = dumps_fastjson(doc)
    edit = draw(st.sampled_from(["none", "none", "cut", "insert", "spaces"]))
    if edit == "cut":
        text = text[:draw(st.integers(0, len(text)))]
    elif edit == "insert":
        at = draw(st.integers(0, len(text)))
        text = text[:at] + draw(st.text(st.sampled_from(list('{}[]:,"0-9 \t\\x.')), min_size=1, max_size=3)) + text[at:]
    elif edit == "spaces":
        text = text.replace(":", " : ").replace(",", " ,\r\n ")
    return text


@fuzz(200)
@given(offset_files())
@example('{"offsetTable":{"a@b":{0:1,}}}')  # a trailing comma: the tolerant parser's
@example('{"offsetTable":{"a@b":{0:1},"a@b":{2:3}}}')  # a map given twice: the last one
@example('{"offsetTable":{"a\\u0040b":{007:1,-0:2,0:3}}}')  # an escaped name, leading zeros, a queue id twice
@example('{"offset\\u0054able":{"a@b":{0:1}},"offsetTable":{}}')  # the table's name escaped: the exact parser's
@example('{"dataVersion":{"a":[1,"]}",{}]},"offsetTable":{"a@b":{0:1}}} ')
@example('{"dataVersion":{1:2,x:3},"offsetTable":{"a@b":{0:99999999999999999999}}}')  # 20 digits: out of long
def test_the_one_pass_offset_scan_agrees_with_the_exact_reader(compiled, scratch, text):
    """decoding.kernels.scan_offset_table (the metadata source's and the audit's consumerOffset.json reader, issue 22:
    200 MB in a second or two) gives the rows and problems the exact path gives (the tolerant parser, without the
    fast paths), or steps aside; a file neither reads is the same error row."""
    from decoding.metadata import table_rows
    from store_format import config as C
    from decoding.kernels import scan_offset_table

    d = scratch / "offsets-scan"
    (d / "config").mkdir(parents=True, exist_ok=True)
    (d / "config" / "consumerOffset.json").write_bytes(text.encode("utf-8", "surrogatepass"))
    def offsets_dict(**scan):  # what compare and replay read (read_consumer_offsets), problems or error included
        problems: list = []
        try:
            return C.read_consumer_offsets(d / "config", problems, **scan), [str(p) for p in problems]
        except ConfigError as e:
            return str(e)

    keep = C._FAST_MIN
    try:
        C._FAST_MIN = 0
        scanned, scanned_dict = table_rows("consumer_offsets", "b", str(d)), offsets_dict(offset_scan=scan_offset_table)
        C._FAST_MIN = 1 << 62
        exact, exact_dict = table_rows("consumer_offsets", "b", str(d)), offsets_dict()
    finally:
        C._FAST_MIN = keep
    assert scanned == exact and scanned_dict == exact_dict
    raw = text.encode("utf-8", "surrogatepass")
    found = scan_offset_table(raw)
    checked = scan_offset_table(raw, check_only=True)  # the same grammar, counted (issue 40)
    if found is None or len(found.other_lo) <= 1 << 16:  # more other members than the check keeps: it says nothing
        assert (checked is None) == (found is None)
        assert found is None or (checked.maps, checked.entries) == (len(found.name_lo), len(found.keys))
    if found is not None and C._scanned_names(raw, found) is not None:
        C._slow_loads(text, "x.json")  # what it reads (the scan, then its checks), the exact parser reads too


_BROKER_NAME_CHARS = st.sampled_from(list("aAzZ09_-%.@é😀"))


@st.composite
def broker_offset_files(draw):
    """consumerOffset.json as a busy broker writes it (dumps_fastjson): up to 40 maps in hash order (shuffled),
    names of up to ~40 bytes sharing a prefix (the compiled sort compares the first eight bytes as a word, then
    eight at a time), each map's queue ids ascending, offsets of up to 18 digits (the scan's; longer ones step
    aside, as the other test's files try); then at most one mutation: an escaped '@' in a name, a
    queue id given twice, a queue id or offset outside its Java type, a cut."""
    prefix = draw(st.sampled_from(["", "T", "Topic_0", "%RETRY%group_", "rmq_sys_é@"]))
    names = draw(st.lists(st.text(_BROKER_NAME_CHARS, max_size=24).map(lambda s: prefix + s), max_size=40,
                          unique=True))
    table = {n: {q: draw(st.integers(0, 10**18 - 1)) for q in sorted(draw(st.sets(st.integers(0, 2**31 - 1),
                                                                               max_size=4)))}
             for n in draw(st.permutations(names))}
    text = dumps_fastjson({"offsetTable": table})
    mutation = draw(st.sampled_from(["none", "none", "escape", "twice", "qid_range", "offset_range", "cut"]))
    maps = list(re.finditer(r"\{(-?\d+):(-?\d+)", text))  # the Integer-keyed maps' first entries
    if mutation == "escape":
        text = text.replace("@", "\\u0040", 1)
    elif mutation == "cut":
        text = text[:draw(st.integers(0, len(text)))]
    elif mutation != "none" and maps:
        m = draw(st.sampled_from(maps))
        q, o = m.group(1), m.group(2)
        new = {"twice": f"{{{q}:{o},{q}:{draw(st.integers(0, 9))}",
               "qid_range": f"{{{draw(st.sampled_from([2**31, -2**31 - 1, 10**18]))}:{o}",
               "offset_range": f"{{{q}:{draw(st.sampled_from([2**63, -2**63 - 1, 10**19]))}"}[mutation]
        text = text[:m.start()] + new + text[m.end():]
    return mutation, names, text


@fuzz(150)
@given(broker_offset_files())
@example(("none", ["b@x", "a@y", "a.b@x", "a@x@y", "é@a", "z@"], dumps_fastjson(
    {"offsetTable": {n: {0: 1} for n in ["b@x", "a@y", "a.b@x", "a@x@y", "é@a", "z@"]}})))  # '@' sorts after '.'
@example(("none", [], dumps_fastjson({"offsetTable": {f"Topic_0{i % 7:012d}@group_{i:09d}": {0: i, 3: 10**18 - 1}
                                                      for i in range(300, 0, -1)}})))  # > 8-byte common prefixes
def test_the_compiled_offset_rows_agree_with_the_exact_reader(compiled, scratch, case):
    """The rows the compiled passes build (decoding.kernels.scan_offset_table: the scan, the maps sorted by (topic,
    group) as bytes, the rows in that order) are the exact path's rows and problems, with the dict compare and
    replay read, for broker-shaped files and their mutations; and for an unmutated file whose names are all
    topic@group, the compiled rows are what is used (not a step aside)."""
    from decoding.metadata import table_rows
    from store_format import config as C
    from decoding.kernels import scan_offset_table

    mutation, names, text = case
    d = scratch / "offsets-rows"
    (d / "config").mkdir(parents=True, exist_ok=True)
    raw = text.encode("utf-8")
    (d / "config" / "consumerOffset.json").write_bytes(raw)

    def read():
        problems: list = []
        rows = table_rows("consumer_offsets", "b", str(d))
        return rows, C.read_consumer_offsets(d / "config", problems, offset_scan=scan_offset_table), \
            [str(p) for p in problems]

    keep = C._FAST_MIN
    try:
        C._FAST_MIN = 0
        scanned = read()
        C._FAST_MIN = 1 << 62
        exact = read()
    finally:
        C._FAST_MIN = keep
    assert scanned == exact
    path, keep_check = d / "config" / "consumerOffset.json", C._offsets_load_check
    try:  # whether the broker loads it: the one-pass check (issue 40) judges as the columns do
        C._FAST_MIN = 0
        checked = C._decode_failure(path, path.name, None, scan_offset_table)
        C._offsets_load_check = lambda *args: C._NOT_CHECKED
        assert checked == C._decode_failure(path, path.name, None, scan_offset_table)
    finally:
        C._FAST_MIN, C._offsets_load_check = keep, keep_check
    if mutation == "none" and all("@" in n for n in names):
        found = scan_offset_table(raw)
        assert found is not None and found.rows is not None
        assert len(found.rows[0]) == sum(len(r) for r in exact[1].table.values())


def test_a_damaged_big_offset_file_is_the_exact_parsers_positioned_error(scratch):
    """A broker-sized consumerOffset.json (over the fast paths' threshold) with one damaged byte: every fast path
    steps aside, and the metadata source's one error row and read_consumer_offsets' problems name the file and the
    byte, as the tolerant parser does."""
    from decoding.metadata import table_rows
    from store_format import config as C

    text = dumps_fastjson({"offsetTable": {f"T{i % 13}@g{i}": {q: i * q for q in range(4)} for i in range(4000)}})
    assert len(text) > C._FAST_MIN
    at = text.index("2:", len(text) // 2) + 1
    text = text[:at] + ";" + text[at + 1:]  # a ':' of an entry made ';'
    d = scratch / "offsets-damaged"
    (d / "config").mkdir(parents=True, exist_ok=True)
    path = d / "config" / "consumerOffset.json"
    path.write_text(text)
    with pytest.raises(ConfigError) as exact:
        C._slow_loads(text, str(path))
    assert exact.value.position == at
    rows = table_rows("consumer_offsets", "b", str(d))
    assert [(r["error"], r["topic"]) for r in rows] == [(str(exact.value), None)]
    assert f"@{at}" in rows[0]["error"]
