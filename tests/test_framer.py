"""The bulk framer (``walk_arrays`` / ``salvage_arrays``) against the scalar walks, item for item.

Two backends, one truth: ``frame_at`` and the walks built on it define where records are and why a walk
stops; the numpy framer must give exactly their items over the RocketMQ-written fixtures, writer-built stores
(several segments, blank-heavy, IPv6 hosts, V2 magic, empty bodies) with every commitlog call of
``store_format.write.damage`` applied, hand-built segments whose bodies hide records of their own, and segments
corrupted at random.  Each store is also checked with tiny search windows, so runs end at window edges too,
and with the compiled framer (``decoding.kernels.CompiledFramer``, what the data source uses), which hypothesis
also runs over damaged segments against ``frame_at`` record by record.
"""
from __future__ import annotations

import random
import struct
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from store_format import commitlog as C
from store_format.write import damage as D
from store_format import layout as L
from store_format.codec import encode_blank, encode_record, encoded_size
from store_format.commitlog import (KINDS, Frame, FrameArrays, SalvageSpan, list_segments, salvage_arrays,
                                    salvage_buffer, walk_arrays, walk_buffer)
from store_format.fs import ReadOnlyMap
from store_format.message import Message, body_crc32
from store_format.write.writer import StoreWriter, WriterConfig
from tests.conftest import FIXTURE_NAMES, fixture_store
from decoding.kernels import CompiledFramer

SEG = 8 << 10
CFG = WriterConfig(mappedFileSizeCommitLog=SEG, mappedFileSizeConsumeQueue=2000, messageIndexEnable=False)


def _kind(it) -> str:
    return "corrupt" if isinstance(it, SalvageSpan) else it.kind


def _same(arrays: FrameArrays, items: list):
    """Item for item, and the arrays say the same as the items they stand for."""
    assert list(arrays) == items
    assert [KINDS[k] for k in arrays.kinds.tolist()] == [_kind(it) for it in items]
    assert arrays.positions.tolist() == [it.file_position for it in items]
    assert arrays.sizes.tolist() == [it.length if isinstance(it, SalvageSpan) else it.size for it in items]


def assert_parity(buf, name: str, base: int):
    """Both walks, with and without the optional checks, from the start and from a boundary inside, and cut
    at positions around the items (``until``)."""
    for check_crc in (True, False):
        for check_phys in (True, False):
            scalar = list(walk_buffer(buf, name, base, decode=False, check_crc=check_crc,
                                      check_physical_offset=check_phys))
            _same(walk_arrays(buf, name, base, check_crc=check_crc, check_physical_offset=check_phys), scalar)
        salvage = list(salvage_buffer(buf, name, base, decode=False, check_crc=check_crc))
        _same(salvage_arrays(buf, name, base, check_crc=check_crc), salvage)
    salvage = list(salvage_buffer(buf, name, base, decode=False))
    # the data source's second pass: CRCs before the recovery walk's stop were checked by its first pass
    first_stop = list(walk_buffer(buf, name, base, decode=False))[-1].file_position
    _same(salvage_arrays(buf, name, base, crc_checked_before=first_stop), salvage)
    starts = [it.file_position for it in salvage if _kind(it) == "message"]
    for start in starts[len(starts) // 2:len(starts) // 2 + 1]:
        _same(walk_arrays(buf, name, base, start=start), list(walk_buffer(buf, name, base, start=start, decode=False)))
        _same(salvage_arrays(buf, name, base, start=start),
              list(salvage_buffer(buf, name, base, start=start, decode=False)))
    messages = [it for it in salvage if _kind(it) == "message"]
    for limit in {m.file_position + m.size // 2 for m in messages[-1:] + messages[len(messages) // 2:][:1]}:
        _same(walk_arrays(buf, name, base, limit=limit), list(walk_buffer(buf, name, base, limit=limit, decode=False)))
        _same(salvage_arrays(buf, name, base, limit=limit),
              list(salvage_buffer(buf, name, base, limit=limit, decode=False)))
    cuts = {0, len(buf)} | {it.file_position + d for it in salvage[::7] + salvage[-3:] for d in (-1, 0, 1)}
    for until in sorted(c for c in cuts if c >= 0):
        _same(salvage_arrays(buf, name, base, until=until), [it for it in salvage if it.file_position < until])


@pytest.fixture(params=["windows of 64 KiB and up", "tiny windows", "compiled"])
def windows(request, monkeypatch):
    """The numpy framer with its windows, or tiny ones (runs end at window edges); or the compiled framer, which
    the walks then use by default."""
    if request.param == "tiny windows":
        monkeypatch.setattr(C, "_WINDOW_MIN", 200)
        monkeypatch.setattr(C, "_WINDOW_MAX", 700)
    elif request.param == "compiled":
        monkeypatch.setattr(C, "_BulkFramer", CompiledFramer)


def _segments(root: Path):
    for seg in list_segments(root / "commitlog"):
        yield seg, seg.path.read_bytes()


def _message(i: int, rnd: random.Random) -> Message:
    """Every record variant: IPv4/IPv6 born and store hosts, V1/V2 magic, empty to multi-KiB bodies."""
    born = "[2001:db8::7]:5000" if i % 5 == 1 else "10.0.0.1:5000"
    store = "[fe80::1]:10911" if i % 7 == 2 else "10.0.0.2:10911"
    v2 = i % 6 == 3
    body = b"" if i % 9 == 4 else rnd.randbytes(3000 if i % 11 == 0 else rnd.randint(1, 300))
    flags = (L.BORNHOST_V6_FLAG if "[" in born else 0) | (L.STOREHOST_V6_FLAG if "[" in store else 0)
    return Message(topic=("V2Topic" + "x" * 100) if v2 else f"T{i % 3}", body=body, queue_id=i % 2,
                   properties_raw=f"KEYS\x01k{i}\x02TAGS\x01t{i % 4}", sys_flag=flags, magic_version=2 if v2 else 1,
                   born_timestamp=1_700_000_000_000 + i, store_timestamp=1_700_000_000_000 + i, born_host=born,
                   store_host=store)


@pytest.fixture(scope="module")
def written(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("framer") / "store"
    rnd = random.Random(7)
    w = StoreWriter(root, CFG)
    for i in range(160):
        w.append(_message(i, rnd))
    w.close()
    return root


def test_fixtures(windows):
    for name in FIXTURE_NAMES:
        for seg in list_segments(fixture_store(name) / "commitlog"):
            with ReadOnlyMap(seg.path) as m:  # mmaps, as the readers use them: they close after the walk
                assert_parity(m.buf, seg.name, seg.base_offset)


def test_writer_stores(written, windows):
    variants, kinds = set(), set()
    for seg, buf in _segments(written):
        assert_parity(buf, seg.name, seg.base_offset)
        for f in walk_buffer(buf, seg.name, seg.base_offset):
            kinds.add(f.kind)
            if f.kind == "message":
                variants.add((f.message.magic_version, f.message.sys_flag & 0x30, len(f.message.body) > 0))
    assert len(list_segments(written / "commitlog")) >= 8 and kinds == {"message", "blank", "stop"}
    # all 8 layout variants, with and without a body
    assert {(v, h) for v, h, _ in variants} == {(v, h) for v in (1, 2) for h in (0, 0x10, 0x20, 0x30)}
    assert {b for *_, b in variants} == {True, False}


@pytest.mark.parametrize("call", ["torn_tail", "flip_body_bit", "zero_page", "truncate_segment", "bad_magic",
                                  "bad_crc"])
def test_damaged_stores(written, tmp_path, call, windows):
    segs = list_segments(written / "commitlog")
    middle = next(f for f in walk_buffer(segs[3].path.read_bytes(), segs[3].name, segs[3].base_offset)
                  if f.kind == "message" and f.message.body)
    kwargs = {"physical_offset": middle.physical_offset} if call not in ("torn_tail", "truncate_segment") else {}
    dmg = getattr(D, call)(written, tmp_path / "d", **kwargs)
    damaged = 0
    for seg, buf in _segments(tmp_path / "d"):
        assert_parity(buf, seg.name, seg.base_offset)
        damaged += sum(1 for it in salvage_buffer(buf, seg.name, seg.base_offset, decode=False)
                       if isinstance(it, SalvageSpan) or it.kind == "stop" and it.stop_kind != C.END_OF_DATA)
    assert damaged, dmg.describe()  # the walks did meet the damage


def _hand_built(nested: bool) -> tuple[bytes, int]:
    """A segment whose bodies hold whole records encoded for where they sit (right magic, PHYSICALOFFSET and
    framing): candidates the bulk pass must not follow.  ``nested`` False: headers whose TOTALSIZE is garbage."""
    base, buf, pos, i = 3 * SEG, bytearray(SEG), 0, 0
    while True:
        prefix = bytes(i % 5 * 3)
        msg = Message(topic="Outer", body=b"", properties_raw="K\x01v", physical_offset=base + pos)
        lay = L.layout_for(0)
        inner_at = pos + lay.body_offset + len(prefix)
        inner = encode_record(Message(topic="Inner", body=b"in" * i, physical_offset=base + inner_at))
        if not nested:
            inner = struct.pack(">i", 7 + i) + inner[4:]
        msg.body = prefix + inner + b"tail"
        size = encoded_size(msg)
        if pos + size + 8 > SEG:
            buf[pos:pos + 8] = encode_blank(SEG - pos)
            return bytes(buf), base
        buf[pos:pos + size] = encode_record(msg)
        pos += size
        i += 1


@pytest.mark.parametrize("nested", [True, False])
def test_records_hidden_in_bodies(windows, nested):
    buf, base = _hand_built(nested)
    assert_parity(buf, C.segment_name(base), base)
    walk = list(walk_arrays(buf, C.segment_name(base), base))
    assert len(walk) > 10 and [_kind(it) for it in walk[-1:]] == ["blank"]


def _forged(base: int, pos: int, body_len: int, tail: bytes, size: int) -> bytes:
    """An IPv4 V1 header for ``pos`` with the given BODYLENGTH and TOTALSIZE (and the CRC of the body bytes that
    follow, when there are any), then ``tail``: lengths chosen to add up to TOTALSIZE while breaking a rule."""
    head = bytearray(encode_record(Message(topic="T", physical_offset=base + pos))[:L.layout_for(0).body_offset])
    lay = L.layout_for(0)
    struct.pack_into(">i", head, 0, size)
    struct.pack_into(">i", head, lay.offsets["body_length"], body_len)
    struct.pack_into(">i", head, lay.offsets["body_crc"], body_crc32(tail[:max(body_len, 0)]))
    return bytes(head) + tail


def test_lengths_that_add_up_but_break_a_rule(windows):
    """Records whose TOTALSIZE equals calMsgLength although a length is negative or the record runs past the
    limit: frame_at stops there, and so must the bulk pass (each is the only check that catches its case)."""
    forged = [  # (the field frame_at stops at, the record)
        # TOPICLENGTH -2: PROPERTIESLENGTH is read from the last body byte and the topic length (0x00FE = 254)
        ("topic_length", lambda at: _forged(3 * SEG, at, 4, bytes(4) + b"\xfe" + bytes(260), 88 + 4 + 1 - 2 + 2 + 254)),
        # PROPERTIESLENGTH -1: its own two bytes then run past TOTALSIZE
        ("topic_length", lambda at: _forged(3 * SEG, at, 0, b"\x01T\xff\xff", 88 + 1 + 1 + 2 - 1)),
        # BODYLENGTH -3: the topic length is read where the body would start
        ("body_length", lambda at: _forged(3 * SEG, at, -3, b"\x05TOPIC\x00\x0a" + bytes(10), 88 - 3 + 1 + 5 + 2 + 10)),
    ]
    for field, make in forged:
        buf = bytearray(SEG)
        first = encode_record(Message(topic="T", body=b"first", physical_offset=3 * SEG))
        buf[:len(first)] = first
        rec = make(len(first))
        buf[len(first):len(first) + len(rec)] = rec
        walk = list(walk_buffer(bytes(buf), "s", 3 * SEG, decode=False))
        assert [(f.kind, f.stop_field) for f in walk] == [("message", None), ("stop", field)]
        assert_parity(bytes(buf), "s", 3 * SEG)


@pytest.mark.slow
@pytest.mark.parametrize("framer", ["numpy", "compiled"])
def test_random_corruption(written, framer, monkeypatch):
    """Overwrite header fields, single bytes, or runs of bytes at random: the walks still agree."""
    if framer == "compiled":
        monkeypatch.setattr(C, "_BulkFramer", CompiledFramer)
    rnd = random.Random(11)
    segs = list(_segments(written))
    offsets = [0, 4, 8, 28, 36, 84, 96, 108]  # TOTALSIZE, MAGIC, BODYCRC, PHYSICALOFFSET, SYSFLAG, BODYLENGTHs
    for case in range(150):
        seg, clean = segs[case % len(segs)]
        raw = bytearray(clean)
        frames = [f for f in walk_buffer(clean, seg.name, seg.base_offset, decode=False) if f.kind == "message"]
        for _ in range(rnd.randint(1, 3)):
            f = rnd.choice(frames)
            how = rnd.random()
            if how < 0.5:
                at = f.file_position + rnd.choice(offsets + [f.size - 2, f.size - 1, rnd.randrange(f.size)])
                value = rnd.choice([0, -1, 1, f.size, L.MAGIC_V2, L.BLANK_MAGIC, rnd.getrandbits(31)])
                raw[at:at + 4] = struct.pack(">i", value)
            elif how < 0.8:
                raw[rnd.randrange(len(raw))] = rnd.randrange(256)
            else:
                at = rnd.randrange(len(raw))
                raw[at:at + rnd.randint(1, 600)] = bytes(rnd.randint(1, 600))
        raw = raw[:len(clean)]
        assert_parity(bytes(raw), seg.name, seg.base_offset)


def test_resync_search_bound(written):
    """find_next_frame(before=b) is the unbounded search's answer when it lies before b, else None."""
    seg, clean = next(_segments(written))
    raw = bytearray(clean)
    raw[100:900] = bytes(800)  # a hole: resync candidates after it
    for start in range(0, 3000, 97):
        full = C.find_next_frame(bytes(raw), start, len(raw), seg.base_offset)
        for before in (start, start + 1, full, (full or 0) + 1, start + 500, len(raw)):
            want = full if full is not None and (before is None or full < before) else None
            assert C.find_next_frame(bytes(raw), start, len(raw), seg.base_offset, before=before) == want


def test_mmap_closes_after_bulk_walks(written):
    seg = list_segments(written / "commitlog")[0]
    m = ReadOnlyMap(seg.path)
    arrays = salvage_arrays(m.buf, seg.name, seg.base_offset)
    m.close()  # no numpy view of the map outlives the walk
    assert len(arrays) > 1 and isinstance(list(arrays)[0], Frame)


def test_frame_arrays_take_slice_concat_and_move():
    buf, base = _hand_built(True)
    items = salvage_arrays(buf, "s", base)
    n = len(items)
    parts = [items.slice(a, min(n, a + 5)) for a in range(0, n, 5)]
    assert list(FrameArrays.concat(parts)) == list(items)
    rows = np.arange(0, n, 3)
    assert list(items.take(rows)) == list(items)[::3]
    assert list(items.take(items.kinds != C.KIND_MESSAGE)) == [it for it in items if it.kind != "message"]
    moved = items.moved(100)
    assert [(it.file_position - 100, it.physical_offset) for it in moved] == \
        [(it.file_position, it.physical_offset) for it in items]


@pytest.mark.parametrize("damage", ["bad_magic", "bad_crc", "garbage_run", "zeros"])
def test_an_intact_record_between_two_damaged_ones(written, windows, damage):
    """Damage on both sides of an intact record: the salvage walk resyncs at it (its body CRC proves it), and
    the bulk framer gives exactly the scalar walk's items."""
    seg = list_segments(written / "commitlog")[2]
    clean = seg.path.read_bytes()
    frames = [f for f in walk_buffer(clean, seg.name, seg.base_offset, decode=True) if f.kind == "message"]
    # all three with a body: the middle one's CRC proves it, the others' CRC can be damaged
    k = next(i for i in range(1, len(frames) - 2) if all(f.message.body for f in frames[i - 1:i + 2]))
    raw = bytearray(clean)
    for f in (frames[k - 1], frames[k + 1]):
        if damage == "bad_magic":
            raw[f.file_position + L.MAGIC_OFFSET:f.file_position + L.MAGIC_OFFSET + 4] = struct.pack(">i", 0x0BADC0DE)
        elif damage == "bad_crc":
            at = f.file_position + L.layout_for(0).offsets["body_crc"]
            raw[at:at + 4] = struct.pack(">i", (f.message.body_crc + 1) & 0x7FFFFFFF)
        elif damage == "garbage_run":
            raw[f.file_position + 2:f.file_position + 30] = random.Random(f.file_position).randbytes(28)
        else:
            raw[f.file_position:f.file_position + 16] = bytes(16)
    buf = bytes(raw)
    salvaged = [(it.file_position, it.size) for it in salvage_buffer(buf, seg.name, seg.base_offset, decode=False)
                if _kind(it) == "message"]
    intact = [(f.file_position, f.size) for i, f in enumerate(frames) if i not in (k - 1, k + 1)]
    assert intact == [m for m in salvaged if m in set(intact)] and set(intact) <= set(salvaged)
    assert (frames[k].file_position, frames[k].size) in salvaged
    assert_parity(buf, seg.name, seg.base_offset)


# ---------------------------------------------------------------------------------------------------------
# The zero tail after the last record is the unwritten end of the segment, never damage


def _last_written_segment(root: Path):
    """The newest segment that holds a record, its bytes and its last message frame."""
    for seg in reversed(list_segments(root / "commitlog")):
        buf = seg.path.read_bytes()
        msgs = [f for f in walk_buffer(buf, seg.name, seg.base_offset, decode=False) if f.kind == "message"]
        if msgs:
            return seg, buf, msgs[-1]
    raise AssertionError("no record")


def test_a_torn_last_record_is_followed_by_the_unwritten_tail(written, tmp_path, windows):
    """store_format.write.damage.torn_tail (the demo store's broker-a): the span is the torn record's written bytes only,
    up to where the zeros that run to the segment's end begin; the walk then ends in an END_OF_DATA stop there,
    and the span says how long that unwritten tail is.  Both walks agree (assert_parity)."""
    D.torn_tail(written, tmp_path / "d")
    seg, buf, victim = _last_written_segment(written)
    torn = (tmp_path / "d" / "commitlog" / seg.name).read_bytes()
    items = list(salvage_buffer(torn, seg.name, seg.base_offset, decode=False))
    stop, span, end = items[-3:]
    zeros = len(torn.rstrip(b"\0"))  # where the zeros that run to the end begin
    assert (stop.kind, stop.file_position) == ("stop", victim.file_position) and stop.stop_kind != C.END_OF_DATA
    assert isinstance(span, SalvageSpan) and (span.file_position, span.length) == (stop.file_position,
                                                                                 zeros - stop.file_position)
    assert span.length < victim.size and span.unwritten_tail == len(torn) - zeros > 0
    assert (end.kind, end.stop_kind, end.file_position) == ("stop", C.END_OF_DATA, zeros)
    assert_parity(torn, seg.name, seg.base_offset)


@pytest.mark.parametrize("garbage", [0, 37])
def test_damage_then_zeros_to_the_end(written, windows, garbage):
    """A bad CRC (or garbage after a record) with only zeros after it: the span ends where the zeros begin, and
    a span followed by a frame is unchanged (it runs to the frame)."""
    seg, buf, victim = _last_written_segment(written)
    raw = bytearray(buf)
    at = victim.file_position + L.layout_for(0).offsets["body_crc"]
    if garbage:  # the last record intact, then a run of garbage where the next record would start
        at = victim.file_position + victim.size
        raw[at:at + garbage] = b"\xff" + random.Random(5).randbytes(garbage - 2) + b"\xff"
    else:
        raw[at:at + 4] = struct.pack(">i", 12345)
    data = bytes(raw)
    items = list(salvage_buffer(data, seg.name, seg.base_offset, decode=False))
    spans = [it for it in items if isinstance(it, SalvageSpan)]
    zeros = len(data.rstrip(b"\0"))
    assert [(s.file_position + s.length, s.unwritten_tail) for s in spans] == [(zeros, len(data) - zeros)]
    assert (items[-1].kind, items[-1].stop_kind, items[-1].file_position) == ("stop", C.END_OF_DATA, zeros)
    assert_parity(data, seg.name, seg.base_offset)
    # a clean segment: no span, the walk ends where the zeros begin
    clean = list(salvage_buffer(buf, seg.name, seg.base_offset, decode=False))
    assert not [it for it in clean if isinstance(it, SalvageSpan)] and clean[-1].stop_kind == C.END_OF_DATA


# ---------------------------------------------------------------------------------------------------------
# The compiled framer against frame_at, on hypothesis-generated damage

_HEADER_AT = [0, 4, 8, 28, 36, 84, 96, 108]  # TOTALSIZE, MAGIC, BODYCRC, PHYSICALOFFSET, SYSFLAG, BODYLENGTHs
_VALUES = [0, -1, 1, 91, L.MAGIC_V1, L.MAGIC_V2, L.BLANK_MAGIC, 1 << 30]


@st.composite
def damaged_segments(draw, segments: list) -> tuple[bytes, str, int, list[int]]:
    """A writer-built segment with up to five pieces of damage: an int written into a record's header field, at
    its end, or anywhere in it (often a value that means something there: a size, a magic), a body byte changed
    (its CRC fails), random bytes, or a zeroed run; and the (start, size) of its records before the damage."""
    seg, clean = draw(st.sampled_from(segments))
    frames = [f for f in walk_buffer(clean, seg.name, seg.base_offset, decode=False) if f.kind == "message"]
    raw = bytearray(clean)
    for _ in range(draw(st.integers(0, 5))):
        f = draw(st.sampled_from(frames))
        how = draw(st.sampled_from(["field", "body", "bytes", "zeros"]))
        if how == "body":
            body_len = C._body_length(clean, f.file_position)
            if body_len > 0:
                raw[f.file_position + _body_offset(clean, f) + draw(st.integers(0, body_len - 1))] ^= \
                    draw(st.integers(1, 255))
        elif how == "field":
            at = f.file_position + draw(st.sampled_from(_HEADER_AT + [f.size - 4, f.size - 2, f.size - 1]) |
                                        st.integers(0, f.size - 1))
            value = draw(st.sampled_from(_VALUES + [f.size, f.size + 1, f.size - 1]) | st.integers(-2**31, 2**31 - 1))
            raw[at:at + 4] = struct.pack(">i", value)
        else:
            at = draw(st.integers(0, len(raw) - 1))
            n = draw(st.integers(1, 600))
            raw[at:at + n] = draw(st.binary(min_size=n, max_size=n)) if how == "bytes" else bytes(n)
    return bytes(raw[:len(clean)]), seg.name, seg.base_offset, [(f.file_position, f.size) for f in frames]


def _body_offset(buf, f) -> int:
    """Where the body of the record ``f`` starts, from its position."""
    lay = L.layout_for(struct.unpack_from(">i", buf, f.file_position + L.SYS_FLAG_OFFSET)[0], L.MESSAGE_MAGICS[f.magic])
    return lay.body_offset


def _scalar_run(buf, start: int, hi: int, limit: int, base: int, check_crc: bool, check_phys: bool,
                crc_from: int) -> list[tuple[int, int, int]]:
    """The run a framer must find: frame_at's messages hop by hop from ``start`` while they start before ``hi``
    (records before ``crc_from`` checked without their CRC: an earlier walk vouched for them)."""
    out, p = [], start
    while p < hi:
        f = C.frame_at(buf, p, limit, base, check_crc=check_crc and p >= crc_from, check_physical_offset=check_phys)
        if f.kind != "message":
            break
        out.append((p, f.size, f.magic))
        p += f.size
    return out


@pytest.fixture(scope="module")
def written_segments(written) -> list:
    return list(_segments(written))


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                   HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_compiled_runs_are_frame_at_messages(written_segments, data):
    """CompiledFramer.run from any position (a record's, or anywhere) is exactly the run of records frame_at
    calls messages, with or without CRC and PHYSICALOFFSET checks, CRCs trusted before any position, any run
    bound; and the whole walks with it are the scalar walks (assert_parity)."""
    buf, name, base, records = data.draw(damaged_segments(written_segments))
    starts = [p for p, _ in records]
    ends = [p + size + d for p, size in records for d in (-1, 0, 1)]  # a limit that cuts a record by a byte
    limit = data.draw(st.sampled_from([len(buf), len(buf) - 1] + ends) | st.integers(0, len(buf)))
    start = data.draw(st.sampled_from(starts) | st.integers(0, len(buf)))
    hi = data.draw(st.sampled_from([limit, limit - L.MIN_RECORD_SIZE + 1] + starts) | st.integers(start, len(buf)))
    check_crc, check_phys = data.draw(st.booleans()), data.draw(st.booleans())
    crc_from = data.draw(st.sampled_from([0, len(buf)] + starts) | st.integers(0, len(buf)))
    framer = CompiledFramer(buf, limit, base, check_crc, check_phys, crc_from)
    run = framer.run(start, hi)
    framer.close()
    assert isinstance(run, C.FrameRun)
    assert list(zip(run.positions.tolist(), run.sizes.tolist(), run.magics.tolist())) == \
        _scalar_run(buf, start, hi, limit, base, check_crc, check_phys, crc_from)
    if data.draw(st.booleans()):
        _same(salvage_arrays(buf, name, base, framer=CompiledFramer), list(salvage_buffer(buf, name, base, decode=False)))
        _same(walk_arrays(buf, name, base, check_physical_offset=check_phys, check_crc=check_crc, framer=CompiledFramer),
              list(walk_buffer(buf, name, base, decode=False, check_crc=check_crc, check_physical_offset=check_phys)))


def test_compiled_runs_longer_than_an_output_chunk(written_segments, monkeypatch):
    """A run longer than the compiled call's output arrays goes on in the next call: the same run."""
    seg, buf = written_segments[0]
    whole = CompiledFramer(buf, len(buf), seg.base_offset, True, True).run(0, len(buf))
    monkeypatch.setattr(CompiledFramer, "_CHUNK", 3)
    chunked = CompiledFramer(buf, len(buf), seg.base_offset, True, True).run(0, len(buf))
    assert len(whole.positions) > 6 and all((a == b).all() for a, b in zip(whole, chunked))
    assert chunked.positions.tolist() == [p for p, *_ in _scalar_run(buf, 0, len(buf), len(buf), seg.base_offset, True,
                                                               True, 0)]


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                   HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_compiled_frames_each_alone_as_frame_at(written_segments, data):
    """CompiledFramer.each at picked offsets (records', anywhere, past the end) is frame_at's verdict on each
    record alone: its size and BODYLENGTH where it is a message, (0, -1) where not."""
    buf, name, base, records = data.draw(damaged_segments(written_segments))
    starts = [p for p, _ in records]
    picks = data.draw(st.lists(st.sampled_from(starts) | st.integers(-2, len(buf) + 2), max_size=40))
    check_crc, check_phys = data.draw(st.booleans()), data.draw(st.booleans())
    framer = CompiledFramer(buf, len(buf), base, check_crc, check_phys)
    sizes, body_lengths = framer.each(np.array(picks, np.int64))
    framer.close()
    for p, size, body_length in zip(picks, sizes.tolist(), body_lengths.tolist()):
        f = C.frame_at(buf, p, len(buf), base, check_crc=check_crc, check_physical_offset=check_phys) \
            if 0 <= p < len(buf) else C.Framing("stop", 0, 0)
        if f.kind == "message":
            lay = L.layout_for(struct.unpack_from(">i", buf, p + L.SYS_FLAG_OFFSET)[0], L.MESSAGE_MAGICS[f.magic])
            assert (size, body_length) == (f.size, struct.unpack_from(">i", buf, p + lay.offsets["body_length"])[0]), p
        else:
            assert (size, body_length) == (0, -1), p


def test_skip_zeros_finds_the_first_non_zero_byte_across_its_pieces(tmp_path, monkeypatch):
    """commitlog.skip_zeros (each piece of zeros one memcmp) is the first non-zero byte at or after ``pos`` and
    before ``limit``, else ``limit``: data at either end of a piece, beside and on its edges, past the limit, in a
    bytes object and in a map of a file."""
    from store_format.commitlog import skip_zeros

    piece = 4096
    monkeypatch.setattr(C, "_ZERO_SCAN", piece)
    monkeypatch.setattr(C, "_ZERO_PIECE", bytes(piece))
    n = 5 * piece + 17
    assert skip_zeros(bytes(n), 0, n) == n and skip_zeros(bytes(n), 3, 100) == 100
    for at in (0, 1, piece - 1, piece, piece + 1, 2 * piece - 1, 3 * piece + 5, n - 1):
        block = bytearray(n)
        block[at] = 0x01
        block[min(n - 1, at + piece + 3)] = 0x02  # data after it: never the answer
        path = tmp_path / f"z{at}"
        path.write_bytes(bytes(block))
        with ReadOnlyMap(path) as m:
            for buf in (bytes(block), m.buf):
                for pos in sorted({0, 1, at // 2, at}):
                    if pos <= at:
                        assert skip_zeros(buf, pos, n) == at, (at, pos)
                        assert skip_zeros(buf, pos, at) == at  # the limit before it
                        assert skip_zeros(buf, pos, max(pos, at - 1)) == max(pos, at - 1)
