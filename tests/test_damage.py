"""store_format.write.damage: each call gives a copy exactly the damage it names, seen through the readers."""
from __future__ import annotations

import pytest

from store_format.write import damage as D
from store_format import layout as L
from store_format.write.broker import Broker, ManualClock, Producer
from store_format.codec import decode_record
from store_format.commitlog import END_OF_DATA, list_segments
from store_format.fs import ReadOnlyMap
from store_format.errors import ErrorKind, RecordError
from store_format.store import Store
from store_format.write.writer import StoreWriter, WriterConfig

from .support.writer_support import tree_digest

CFG = WriterConfig(mappedFileSizeCommitLog=64 * 1024, mappedFileSizeConsumeQueue=200, maxHashSlotNum=16,
                   maxIndexNum=256)


@pytest.fixture(scope="module")
def source(tmp_path_factory):
    """A small store written by the broker API: plain sends over two segments, a delay, a transaction."""
    root = tmp_path_factory.mktemp("src") / "store"
    w = StoreWriter(root, CFG, clock=ManualClock(1_700_000_000_000))
    b = Broker(w)
    p = Producer()
    for i in range(150):
        b.send(p, "Orders", f"order {i} ".encode() * 20, tags="TagA", keys=f"o-{i}")
    b.send(p, "Orders", b"later", delay_level=1, keys="d-1")
    h = b.send_half(p, "Orders", b"tx", keys="t-1")
    b.end_transaction(h, commit=True)
    b.send(p, "Orders", b"the last one", tags="TagZ", keys="last")
    w.close()
    return root


def check_only(src, dst, damage: D.Damage):
    """Every file but the damaged one is identical; in that one, only the reported ranges changed."""
    a, b = tree_digest(src), tree_digest(dst)
    changed = {k for k in a.keys() | b.keys() if a.get(k) != b.get(k)}
    if damage.position is None:  # a removal
        assert changed == {k for k in a if k.startswith(damage.path + "/")} and not (dst / damage.path).exists()
        return
    assert changed == {damage.path}
    old, new = (src / damage.path).read_bytes(), (dst / damage.path).read_bytes()
    ranges = damage.ranges or ((damage.position, damage.length),)
    allowed = set()
    for pos, length in ranges:
        allowed.update(range(pos, pos + length))
    diff = {i for i in range(min(len(old), len(new))) if old[i] != new[i]}
    assert diff and diff <= allowed  # something changed, and nothing outside what the damage names


def walk_end(root):
    frames = list(Store(root).walk_commitlog(decode=False))
    stops = [f for f in frames if f.kind == "stop"]
    return stops[0]


def last_record(root):
    return list(Store(root).messages())[-1]


def test_source_is_never_touched(source, tmp_path):
    before = tree_digest(source)
    D.torn_tail(source, tmp_path / "a")
    D.bad_crc(source, tmp_path / "b")
    assert tree_digest(source) == before
    with pytest.raises(D.DamageError, match="exists"):
        D.bad_crc(source, tmp_path / "b")  # never into an existing directory


def test_torn_tail(source, tmp_path):
    victim = last_record(source)
    d = D.torn_tail(source, tmp_path / "d")
    check_only(source, tmp_path / "d", d)
    assert d.position + d.length == victim.physical_offset % CFG.mappedFileSizeCommitLog + victim.store_size
    stop = walk_end(tmp_path / "d")
    assert stop.physical_offset == victim.physical_offset and stop.stop_kind != END_OF_DATA
    assert len(list(Store(tmp_path / "d").messages())) == len(list(Store(source).messages())) - 1


def test_flip_body_bit(source, tmp_path):
    victim = last_record(source)
    d = D.flip_body_bit(source, tmp_path / "d", bit=3)
    check_only(source, tmp_path / "d", d)
    seg = tmp_path / "d" / d.path
    with ReadOnlyMap(seg) as m:
        msg = decode_record(m.buf, victim.file_position)  # frames fine without the CRC check
        assert msg.body[0] == victim.body[0] ^ 0b1000 and msg.body[1:] == victim.body[1:]
        with pytest.raises(RecordError) as e:
            decode_record(m.buf, victim.file_position, check_crc=True)
    assert e.value.kind == ErrorKind.BAD_CRC
    assert walk_end(tmp_path / "d").stop_kind == ErrorKind.BAD_CRC.value


def test_zero_page(source, tmp_path):
    d = D.zero_page(source, tmp_path / "d", physical_offset=5000)
    check_only(source, tmp_path / "d", d)
    assert (d.position, d.length) == (4096, 4096)
    raw = (tmp_path / "d" / d.path).read_bytes()
    assert raw[4096:8192] == bytes(4096) and (source / d.path).read_bytes()[4096:8192] != bytes(4096)
    # recovery stops at the record touching the page, or (when only its properties were zeroed, which no
    # CRC covers) right after it, reading the zeroed page as the end of the data: the danger of a zero page
    msgs = list(Store(source).messages())
    first_hit = next(m for m in msgs if m.physical_offset + m.store_size > 4096)
    stop = walk_end(tmp_path / "d")
    assert stop.physical_offset in (first_hit.physical_offset, first_hit.physical_offset + first_hit.store_size)
    # a salvage walk resyncs after the page and finds the records beyond it
    salvaged = {f.physical_offset for f in Store(tmp_path / "d").walk_commitlog(salvage=True)
                if getattr(f, "kind", None) == "message"}
    beyond = [m.physical_offset for m in msgs if m.physical_offset >= 8192]
    assert beyond and set(beyond) <= salvaged


def test_truncate_segment(source, tmp_path):
    d = D.truncate_segment(source, tmp_path / "d")
    segs = list_segments(tmp_path / "d" / "commitlog")
    assert segs[-1].length == d.position < CFG.mappedFileSizeCommitLog
    assert [s.length for s in segs[:-1]] == [CFG.mappedFileSizeCommitLog] * (len(segs) - 1)
    assert (tmp_path / "d" / d.path).read_bytes() == (source / d.path).read_bytes()[:d.position]
    stop = walk_end(tmp_path / "d")
    assert stop.stop_kind == ErrorKind.TRUNCATED.value and stop.physical_offset == last_record(source).physical_offset


def test_bad_magic(source, tmp_path):
    victim = list(Store(source).messages())[10]
    d = D.bad_magic(source, tmp_path / "d", physical_offset=victim.physical_offset)
    check_only(source, tmp_path / "d", d)
    assert (d.position, d.length) == (victim.file_position + 4, 4)
    with ReadOnlyMap(tmp_path / "d" / d.path) as m:
        with pytest.raises(RecordError) as e:
            decode_record(m.buf, victim.file_position)
    assert e.value.kind == ErrorKind.BAD_MAGIC
    assert walk_end(tmp_path / "d").physical_offset == victim.physical_offset
    with pytest.raises(D.DamageError):
        D.bad_magic(source, tmp_path / "e", magic=L.MAGIC_V1)


def test_bad_crc(source, tmp_path):
    victim = last_record(source)
    d = D.bad_crc(source, tmp_path / "d")
    check_only(source, tmp_path / "d", d)
    assert victim.file_position + 8 <= d.position < victim.file_position + 12  # inside BODYCRC only
    with ReadOnlyMap(tmp_path / "d" / d.path) as m:
        msg = decode_record(m.buf, victim.file_position)
        assert msg.body == victim.body and msg.body_crc != victim.body_crc and not msg.body_crc_ok
        with pytest.raises(RecordError) as e:
            decode_record(m.buf, victim.file_position, check_crc=True)
    assert e.value.kind == ErrorKind.BAD_CRC


def test_size_mismatch(source, tmp_path):
    """TOTALSIZE grows by 4: the lengths add up to 4 bytes less (CommitLog.checkMessageAndReturnSize: TOTALSIZE
    != calMsgLength); only the TOTALSIZE field changes, and the walk stops there with SIZE_MISMATCH."""
    victim = last_record(source)
    d = D.size_mismatch(source, tmp_path / "d")
    check_only(source, tmp_path / "d", d)
    assert victim.file_position <= d.position < victim.file_position + 4  # inside TOTALSIZE only
    stop = walk_end(tmp_path / "d")
    assert (stop.physical_offset, stop.size, stop.stop_kind) == (victim.physical_offset, victim.store_size + 4,
                                                                 ErrorKind.SIZE_MISMATCH.value)
    with pytest.raises(D.DamageError, match="positive"):
        D.size_mismatch(source, tmp_path / "e", delta=0)


def test_delete_consume_queue(source, tmp_path):
    d = D.delete_consume_queue(source, tmp_path / "d", "Orders", 1)
    check_only(source, tmp_path / "d", d)
    st = Store(tmp_path / "d")
    assert ("Orders", 1) not in st.queues and ("Orders", 0) in st.queues
    assert list(st.consume_queue("Orders", 1)) == []
    with pytest.raises(D.DamageError):
        D.delete_consume_queue(source, tmp_path / "e", "..")


def test_wrong_cq_size(source, tmp_path):
    st = Store(source)
    last = list(st.consume_queue("Orders", 2))[-1]
    d = D.wrong_cq_size(source, tmp_path / "d", "Orders", 2)
    check_only(source, tmp_path / "d", d)
    units = list(Store(tmp_path / "d").consume_queue("Orders", 2))
    assert units[-1].size == last.size + 1 and units[-1].physical_offset == last.physical_offset
    assert st.read_message(last.physical_offset).store_size == last.size  # the record disagrees now
    assert [u.size for u in units[:-1]] == [u.size for u in list(st.consume_queue("Orders", 2))[:-1]]


def test_stale_index_entry(source, tmp_path):
    last = last_record(source)
    d = D.stale_index_entry(source, tmp_path / "d", hash_slot_num=16, index_num=256)
    check_only(source, tmp_path / "d", d)
    end = last.physical_offset + last.store_size  # nothing is stored there
    st = Store(tmp_path / "d", hash_slot_num=16, index_num=256)
    assert st.index_candidates(last.topic, last.uniq_key) == [end, last.physical_offset]
    assert [m.physical_offset for m in st.query_key(last.topic, last.uniq_key)] == [last.physical_offset]
