"""Damage on purpose: each function copies a store and gives the copy exactly the damage it names.

Every call takes ``(src, dst, ...)``: ``src`` is never touched, ``dst`` must not exist yet and receives a
sparse copy of ``src`` plus the damage.  Each returns a :class:`Damage` naming the file and byte range it
changed (or the path it removed), so a test can check that nothing else moved.  Records are re-encoded
through :mod:`store_format.codec` (wrong CRC, bad magic) and index entries go through the writer's
``IndexFile.putKey``, so the damage is built, never hand-edited.

=====================  ================================================================================
``torn_tail``          the last record of the commitlog loses its last bytes (zeros), as a torn write
``flip_body_bit``      one bit of one record's body flips; its stored BODYCRC no longer matches
``zero_page``          one OS page (4 KiB) of a commitlog segment becomes zeros
``truncate_segment``   the last commitlog segment file is cut short (shorter than mappedFileSizeCommitLog)
``bad_magic``          one record's MAGICCODE becomes an illegal value
``bad_crc``            one record's BODYCRC field is wrong (the body is intact)
``size_mismatch``      one record's TOTALSIZE grows: its lengths no longer add up to it (calMsgLength)
``delete_consume_queue``  consumequeue/<topic>[/<queueId>] is removed
``stale_index_entry``  the index gains an entry for topic#key pointing where no record is (past the end)
``wrong_cq_size``      one consume-queue unit's size field disagrees with the record's TOTALSIZE
``cq_ext_dangling``    one consume-queue unit's ConsumeQueueExt address points where no ext unit is
``cq_ext_orphan``      a ConsumeQueueExt unit no consume-queue unit points to follows the queue's last one
``cq_ext_bad_bitmap``  one ConsumeQueueExt unit's bitMapSize no longer agrees with its size
=====================  ================================================================================

RocketMQ 5.x damage (stores with a timer log, LMQ queues, POP records or the ``__CRC32#`` property):

================================  =====================================================================
``timer_unit_outside_commitlog``  a timer-log unit's CommitLog offset points past the CommitLog's end
``looping_timer_chain``           a wheel slot's chain loops: one of its units' prevPos points at the slot's
                                  newest unit (or at itself)
``timercheck_wrong_length``       ``config/timercheck`` is cut (or grown) to a length other than its page
``pop_checkpoint_not_json``       a POP checkpoint (``ck``) record's body is replaced by bytes that are not
                                  JSON (same length; body CRC and ``__CRC32#`` recomputed: only the body lies)
``crc_property_non_digit``        one of a record's ``__CRC32#`` digits becomes a non-digit character
``flip_bit_under_crc``            one bit outside the body (BORNTIMESTAMP by default) of a record with
                                  ``__CRC32#`` flips: its body CRC still matches, its whole-record CRC does not
``lmq_unit_missing``              one unit of an LMQ consume queue is removed (the later ones move down)
``lmq_unit_duplicated``           one unit of an LMQ consume queue appears twice (the later ones move up)
``batch_unit_field``              one field of a batch consume-queue unit (msgBaseOffset, batchSize, size...)
                                  takes another value
``batch_unit_missing``            one unit of a batch consume queue is removed (the later ones move down)
================================  =====================================================================
"""
from __future__ import annotations

import os
import shutil
import stat
from dataclasses import dataclass
from pathlib import Path

from .. import layout as L
from ..codec import decode_record, encode_record
from ..commitlog import Frame, list_segments, walk_buffer
from ..fs import ReadOnlyMap
from ..consumequeue import discover_queues, ext_address, ext_files, ext_folder, read_ext_units, read_queue
from ..errors import ErrorKind, StoreFormatError
from ..indexfile import IndexFile, list_index_files
from ..javahash import index_key, index_key_hash
from ..message import body_crc32

_COPY_CHUNK = 1 << 20


@dataclass(frozen=True)
class Damage:
    kind: str  # the function's name
    path: str  # relative to the store root
    position: int | None  # first byte changed (None when a path was removed)
    length: int  # bytes changed (0 for a removal)
    detail: str
    ranges: tuple = ()  # every (position, length) span written, when there is more than one

    def describe(self) -> str:
        where = f"{self.path}@{self.position}+{self.length}" if self.position is not None else self.path
        return f"{self.kind}: {where}: {self.detail}"


class DamageError(StoreFormatError):
    """The store has nothing the requested damage could apply to."""


def _fail(msg: str, **kw):
    raise DamageError(ErrorKind.INVALID_INPUT, msg, **kw)


# --------------------------------------------------------------------------------------------------
# Copying


def copy_store(src: str | os.PathLike, dst: str | os.PathLike) -> Path:
    """Copy a store root, keeping preallocated files sparse and making the copy writable."""
    src, dst = Path(src), Path(dst)
    if not src.is_dir():
        _fail("source store root is not a directory", file=str(src))
    if dst.exists():
        _fail("destination exists; damage goes into a fresh copy", file=str(dst))
    if os.path.realpath(dst).startswith(os.path.realpath(src) + os.sep):
        _fail("destination is inside the source store", file=str(dst))
    for dirpath, dirnames, filenames in os.walk(src):
        rel = Path(dirpath).relative_to(src)
        (dst / rel).mkdir(parents=True, exist_ok=True)
        for name in filenames:
            _sparse_copy(Path(dirpath) / name, dst / rel / name)
    return dst


def _sparse_copy(a: Path, b: Path):
    size = a.stat().st_size
    with open(a, "rb") as fa, open(b, "wb") as fb:
        while True:
            chunk = fa.read(_COPY_CHUNK)
            if not chunk:
                break
            if chunk.count(0) == len(chunk):
                fb.seek(len(chunk), os.SEEK_CUR)  # leave a hole, like the broker's preallocated zeros
            else:
                fb.write(chunk)
        fb.truncate(size)
    os.chmod(b, stat.S_IRUSR | stat.S_IWUSR | stat.S_IRGRP | stat.S_IROTH)


def _patch(root: Path, rel: str, position: int, data: bytes):
    with open(root / rel, "r+b") as f:
        f.seek(position)
        f.write(data)


# --------------------------------------------------------------------------------------------------
# Finding records


def _messages(root: Path) -> list[Frame]:
    """Message frames of every segment, in physical order (decoded)."""
    out = []
    for seg in list_segments(root / "commitlog"):
        with ReadOnlyMap(seg.path) as m:
            out.extend(f for f in walk_buffer(m.buf, seg.name, seg.base_offset) if f.kind == "message")
    return out


def _frame(root: Path, physical_offset: int | None, want=lambda f: True) -> Frame:
    frames = [f for f in _messages(root) if want(f)]
    if not frames:
        _fail("the store has no record this damage can apply to", file=str(root / "commitlog"))
    if physical_offset is None:
        return frames[-1]
    for f in frames:
        if f.physical_offset == physical_offset:
            return f
    _fail(f"no record starts at physical offset {physical_offset}", position=physical_offset,
          field="physical_offset")


def _rel_segment(f: Frame) -> str:
    return f"commitlog/{f.segment}"


# --------------------------------------------------------------------------------------------------
# Commitlog damage


def torn_tail(src, dst, keep: int | None = None) -> Damage:
    """The commitlog's last record keeps only its first ``keep`` bytes; the rest are zeros, as when the
    page holding its end never reached the disk.  The default tears through the body, so the record
    fails recovery's CRC check (a tear inside the properties alone would pass unseen)."""
    root = copy_store(src, dst)
    f = _frame(root, None)
    body_at = L.layout_for(f.message.sys_flag, f.message.magic_version).body_offset
    body = f.message.body
    if keep is None:
        keep = f.size // 2
        if body:
            nonzero = [i for i in range(len(body)) if body[i]]
            keep = body_at + min(len(body) // 2, nonzero[-1] if nonzero else 0)
    if not 8 <= keep < f.size:
        _fail(f"keep must be in [8, {f.size}) for a {f.size}-byte record", field="keep")
    with ReadOnlyMap(root / _rel_segment(f)) as m:
        if not any(m.buf[f.file_position + keep:f.file_position + f.size]):
            _fail("the bytes after keep are zeros already: tearing there changes nothing", field="keep")
    _patch(root, _rel_segment(f), f.file_position + keep, bytes(f.size - keep))
    return Damage("torn_tail", _rel_segment(f), f.file_position + keep, f.size - keep,
                  f"record at {f.physical_offset} ({f.size} bytes) keeps {keep} bytes")


def flip_body_bit(src, dst, physical_offset: int | None = None, bit: int = 0) -> Damage:
    """Flip bit ``bit`` (0 = the lowest bit of the first body byte) of a record's body; default record:
    the last one with a body."""
    root = copy_store(src, dst)
    f = _frame(root, physical_offset, lambda fr: len(fr.message.body) > 0)
    body_len = len(f.message.body)
    if not 0 <= bit < body_len * 8:
        _fail(f"bit {bit} is outside a {body_len}-byte body", field="bit")
    pos = f.file_position + L.layout_for(f.message.sys_flag, f.message.magic_version).body_offset + bit // 8
    with ReadOnlyMap(root / _rel_segment(f)) as m:
        old = m.buf[pos]
    _patch(root, _rel_segment(f), pos, bytes([old ^ (1 << (bit % 8))]))
    return Damage("flip_body_bit", _rel_segment(f), pos, 1,
                  f"bit {bit} of the body of the record at {f.physical_offset}")


def zero_page(src, dst, physical_offset: int | None = None) -> Damage:
    """Zero the OS page holding ``physical_offset`` (default: the page where the last record starts)."""
    root = copy_store(src, dst)
    if physical_offset is None:
        physical_offset = _frame(root, None).physical_offset
    segs = list_segments(root / "commitlog")
    for seg in segs:
        if seg.base_offset <= physical_offset < seg.base_offset + seg.length:
            pos = physical_offset - seg.base_offset
            start = pos - pos % L.OS_PAGE_SIZE
            length = min(L.OS_PAGE_SIZE, seg.length - start)
            _patch(root, f"commitlog/{seg.name}", start, bytes(length))
            return Damage("zero_page", f"commitlog/{seg.name}", start, length,
                          f"page {start // L.OS_PAGE_SIZE} holding physical offset {physical_offset}")
    _fail(f"physical offset {physical_offset} is in no segment", position=physical_offset)


def truncate_segment(src, dst, length: int | None = None) -> Damage:
    """Cut the last commitlog segment file to ``length`` bytes (default: the middle of its last record)."""
    root = copy_store(src, dst)
    segs = list_segments(root / "commitlog")
    if not segs:
        _fail("no commitlog segment", file=str(root / "commitlog"))
    seg = segs[-1]
    if length is None:
        frames = [f for f in _messages(root) if f.segment == seg.name]
        if not frames:
            _fail("the last segment holds no record; pass length", file=str(seg.path))
        length = frames[-1].file_position + frames[-1].size // 2
    if not 0 <= length < seg.length:
        _fail(f"length {length} must be below the segment's {seg.length} bytes", field="length")
    os.truncate(seg.path, length)
    return Damage("truncate_segment", f"commitlog/{seg.name}", length, seg.length - length,
                  f"file cut from {seg.length} to {length} bytes")


def _reencode(root: Path, f: Frame, body_crc: int | None = None, **force) -> tuple[int, bytes]:
    """Re-encode one record with forced fields; returns the first changed position and the new bytes."""
    with ReadOnlyMap(root / _rel_segment(f)) as m:
        old = bytes(m.buf[f.file_position:f.file_position + f.size])
        msg = decode_record(m.buf, f.file_position, file=f.segment)
    if body_crc is not None:
        msg.body_crc = body_crc
    new = encode_record(msg, **force)
    first, last = _diff_span(old, new)
    _patch(root, _rel_segment(f), f.file_position + first, new[first:last + 1])
    return f.file_position + first, new[first:last + 1]


def _diff_span(a: bytes, b: bytes) -> tuple[int, int]:
    import numpy as np
    d = np.flatnonzero(np.frombuffer(a, np.uint8) != np.frombuffer(b, np.uint8))
    if not len(d):
        _fail("the forced value equals the stored one")
    return int(d[0]), int(d[-1])


def bad_magic(src, dst, physical_offset: int | None = None, magic: int = 0x0BADC0DE) -> Damage:
    """Give a record (default: the last) an illegal MAGICCODE."""
    if magic in L.MESSAGE_MAGICS or magic == L.BLANK_MAGIC:
        _fail(f"0x{magic & 0xFFFFFFFF:08X} is a legal magic", field="magic")
    root = copy_store(src, dst)
    f = _frame(root, physical_offset)
    pos, new = _reencode(root, f, magic=magic)
    return Damage("bad_magic", _rel_segment(f), pos, len(new), f"record at {f.physical_offset}: magic "
                  f"0x{magic & 0xFFFFFFFF:08X}")


def bad_crc(src, dst, physical_offset: int | None = None) -> Damage:
    """Store a wrong BODYCRC in a record with a body (default: the last one); the body is untouched."""
    root = copy_store(src, dst)
    f = _frame(root, physical_offset, lambda fr: len(fr.message.body) > 0)
    if not f.message.body:
        _fail("CRC is only checked for records with a body", field="physical_offset")
    wrong = body_crc32(f.message.body) ^ 0x1  # still in 0..2^31-1, as a real CRC field
    pos, new = _reencode(root, f, body_crc=wrong)
    return Damage("bad_crc", _rel_segment(f), pos, len(new), f"record at {f.physical_offset}: BODYCRC {wrong}")


def size_mismatch(src, dst, physical_offset: int | None = None, delta: int = 4) -> Damage:
    """A record's (default: the last one) TOTALSIZE field becomes ``delta`` bytes larger than its lengths add up
    to (``CommitLog.checkMessageAndReturnSize``: TOTALSIZE != calMsgLength, "[BUG]read total count not equals
    msg total size"); the rest of the record is untouched.  The larger TOTALSIZE must still fit in the segment."""
    if delta < 1:
        _fail("delta must be positive (a smaller TOTALSIZE cuts the last length field instead)", field="delta")
    root = copy_store(src, dst)
    f = _frame(root, physical_offset)
    seg_length = (root / _rel_segment(f)).stat().st_size
    if f.file_position + f.size + delta > seg_length:
        _fail(f"TOTALSIZE {f.size + delta} runs past the segment's end", field="delta")
    pos, new = _reencode(root, f, store_size=f.size + delta)
    return Damage("size_mismatch", _rel_segment(f), pos, len(new), f"record at {f.physical_offset}: TOTALSIZE "
                  f"{f.size + delta} for a {f.size}-byte record")


# --------------------------------------------------------------------------------------------------
# Consume queue and index damage


def delete_consume_queue(src, dst, topic: str, queue_id: int | None = None) -> Damage:
    """Remove one queue's directory, or a whole topic's when ``queue_id`` is None."""
    root = copy_store(src, dst)
    rel = Path("consumequeue") / topic if queue_id is None else Path("consumequeue") / topic / str(queue_id)
    target = root / rel
    if not target.is_dir() or os.path.realpath(target) == os.path.realpath(root / "consumequeue") or \
            not os.path.realpath(target).startswith(os.path.realpath(root / "consumequeue") + os.sep):
        _fail(f"no consume queue directory {rel}", file=str(target))
    shutil.rmtree(target)
    return Damage("delete_consume_queue", str(rel), None, 0, "directory removed")


def wrong_cq_size(src, dst, topic: str, queue_id: int, queue_offset: int | None = None,
                  size: int | None = None) -> Damage:
    """Set one unit's size field (default: the queue's last entry) to ``size`` (default: TOTALSIZE + 1)."""
    root = copy_store(src, dst)
    files = discover_queues(root / "consumequeue").get((topic, queue_id))
    if not files:
        _fail(f"no consume queue {topic}/{queue_id}", field="topic")
    units = [u for u in read_queue(files, stop_at_invalid=True) if u.kind == "entry"]
    if queue_offset is not None:
        units = [u for u in units if u.queue_offset == queue_offset]
    if not units:
        _fail(f"no entry at queue offset {queue_offset} in {topic}/{queue_id}", field="queue_offset")
    u = units[-1]
    size = u.size + 1 if size is None else size
    if size == u.size:
        _fail("the new size equals the record's", field="size")
    rel = f"consumequeue/{topic}/{queue_id}/{u.file}"
    pos = u.file_position + L.CQ_UNIT.offset("size")
    _patch(root, rel, pos, L.CQ_UNIT.pack("size", size))
    return Damage("wrong_cq_size", rel, pos, L.CQ_UNIT.member("size").width,
                  f"queue offset {u.queue_offset}: size {u.size} -> {size}")


def _ext_unit(root: Path, topic: str, queue_id: int, queue_offset: int | None):
    """(a consume-queue unit of the queue whose tagsCode slot holds an ext address, default the last; the queue's
    files)."""
    files = discover_queues(root / "consumequeue").get((topic, queue_id))
    if not files:
        _fail(f"no consume queue {topic}/{queue_id}", field="topic")
    units = [u for u in read_queue(files, stop_at_invalid=True) if u.kind == "entry" and u.ext_offset is not None
             and (queue_offset is None or u.queue_offset == queue_offset)]
    if not units:
        _fail(f"no unit with a ConsumeQueueExt address in {topic}/{queue_id} (at {queue_offset})", field="queue_offset")
    return units[-1], files


def cq_ext_dangling(src, dst, topic: str, queue_id: int, queue_offset: int | None = None) -> Damage:
    """Point one unit's ConsumeQueueExt address (default the queue's last) past the queue's last ext unit: at no ext
    entry."""
    root = copy_store(src, dst)
    u, files = _ext_unit(root, topic, queue_id, queue_offset)
    ext = read_ext_units(ext_folder(files[0].path))
    beyond = int((ext.offset + ext.size).max()) + L.CQ_EXT_MIN_UNIT_SIZE if len(ext.offset) else 0
    rel = f"consumequeue/{topic}/{queue_id}/{u.file}"
    pos = u.file_position + L.CQ_UNIT.offset("tags_code")
    _patch(root, rel, pos, L.CQ_UNIT.pack("tags_code", ext_address(beyond)))
    return Damage("cq_ext_dangling", rel, pos, L.CQ_UNIT.member("tags_code").width,
                  f"queue offset {u.queue_offset}: ext address {u.ext_offset} -> {beyond} (no unit there)")


def cq_ext_orphan(src, dst, topic: str, queue_id: int, tags_code: int = 0, store_timestamp: int = 0) -> Damage:
    """Append one ConsumeQueueExt unit after the queue's last one, which no consume-queue unit points to."""
    root = copy_store(src, dst)
    folder = root / "consumequeue_ext" / topic / str(queue_id)
    ext = read_ext_units(folder)
    files = ext_files(folder)
    if not files or not len(ext.offset):
        _fail(f"no ConsumeQueueExt units in {topic}/{queue_id}", field="topic")
    loc, base, length = files[-1]
    pos = int((ext.offset + ext.size).max()) - base
    if pos + L.CQ_EXT_MIN_UNIT_SIZE + L.CQ_EXT_END_BLANK > length:
        _fail("the queue's last ext file has no room for another unit", file=loc.path)
    unit = b"".join(L.CQ_EXT_UNIT.pack(n, v) for n, v in (("size", L.CQ_EXT_MIN_UNIT_SIZE), ("tags_code", tags_code),
                                                           ("msg_store_time", store_timestamp), ("bitmap_size", 0)))
    rel = f"consumequeue_ext/{topic}/{queue_id}/{loc.name}"
    _patch(root, rel, pos, unit)
    return Damage("cq_ext_orphan", rel, pos, len(unit), f"an ext unit at offset {base + pos} no unit points to")


def cq_ext_bad_bitmap(src, dst, topic: str, queue_id: int, queue_offset: int | None = None,
                      bitmap_size: int = 8) -> Damage:
    """Set the bitMapSize of one unit's ConsumeQueueExt unit (default the queue's last) to ``bitmap_size``, which
    its size (20 + its real bitmap) no longer agrees with."""
    root = copy_store(src, dst)
    u, files = _ext_unit(root, topic, queue_id, queue_offset)
    for loc, base, length in ext_files(ext_folder(files[0].path)):
        if base <= u.ext_offset < base + length:
            rel = f"consumequeue_ext/{topic}/{queue_id}/{loc.name}"
            pos = u.ext_offset - base + L.CQ_EXT_UNIT.offset("bitmap_size")
            _patch(root, rel, pos, L.CQ_EXT_UNIT.pack("bitmap_size", bitmap_size))
            return Damage("cq_ext_bad_bitmap", rel, pos, L.CQ_EXT_UNIT.member("bitmap_size").width,
                          f"queue offset {u.queue_offset}: bitMapSize -> {bitmap_size}")
    _fail(f"no ext file holds offset {u.ext_offset}", field="queue_offset")


def stale_index_entry(src, dst, topic: str | None = None, key: str | None = None,
                      physical_offset: int | None = None, hash_slot_num: int | None = None,
                      index_num: int | None = None) -> Damage:
    """Add an index entry for ``topic#key`` (default: the last record's topic and UNIQ_KEY) pointing at
    ``physical_offset`` (default: the end of the commitlog's records), as a record dropped by recovery
    leaves behind.  Goes through ``IndexFile.putKey`` of the last index file."""
    from .indexfile import IndexFileWriter
    root = copy_store(src, dst)
    frames = _messages(root)
    if not frames:
        _fail("the store has no record", file=str(root / "commitlog"))
    last = frames[-1]
    topic = last.message.topic if topic is None else topic
    key = (last.message.uniq_key or (last.message.keys or [None])[0]) if key is None else key
    if key is None:
        _fail("the last record has no key; pass key", field="key")
    if physical_offset is None:
        physical_offset = last.physical_offset + last.size
    paths = list_index_files(root / "index")
    if not paths:
        _fail("the store has no index file", file=str(root / "index"))
    path = paths[-1]
    with IndexFile(path, hash_slot_num, index_num) as existing:  # the file's geometry, or the given one checked
        hash_slot_num, index_num = existing.hash_slot_num, existing.index_num
    f = IndexFileWriter(path, hash_slot_num, index_num, create=False)
    try:
        key_hash = index_key_hash(index_key(topic, key))
        entry_pos = L.INDEX_HEADER_SIZE + hash_slot_num * L.INDEX_SLOT_SIZE + f.count * L.INDEX_ENTRY_SIZE
        slot_pos = L.INDEX_HEADER_SIZE + (key_hash % hash_slot_num) * L.INDEX_SLOT_SIZE
        if not f.put(key_hash, physical_offset, last.message.store_timestamp):
            _fail("the last index file is full", file=str(path))
    finally:
        f.close()
    rel = f"index/{path.name}"
    ranges = ((0, L.INDEX_HEADER_SIZE), (slot_pos, L.INDEX_SLOT_SIZE), (entry_pos, L.INDEX_ENTRY_SIZE))
    return Damage("stale_index_entry", rel, entry_pos, L.INDEX_ENTRY_SIZE,
                  f"{topic}#{key} -> physical offset {physical_offset} (no record there)", ranges)


# --------------------------------------------------------------------------------------------------
# RocketMQ 5.x damage


def _timer_units(root: Path) -> list:
    from .. import timer as T

    return [u for f in T.list_timer_log_files(root) for u in T.walk_timer_log(f) if u.kind == "entry"]


def _commitlog_end(root: Path) -> int:
    frames = _messages(root)
    return frames[-1].physical_offset + frames[-1].size if frames else 0


def timer_unit_outside_commitlog(src, dst, timerlog_offset: int | None = None,
                                 physical_offset: int | None = None) -> Damage:
    """A timer-log unit (default: the last one) whose CommitLog offset is ``physical_offset`` (default: 1 MiB past
    the end of the CommitLog's records), as a unit left behind by a CommitLog truncated under it."""
    root = copy_store(src, dst)
    units = _timer_units(root)
    if timerlog_offset is not None:
        units = [u for u in units if u.timerlog_offset == timerlog_offset]
    if not units:
        _fail("no timer-log unit to point elsewhere", file=str(root / "timerlog"), field="timerlog_offset")
    u = units[-1]
    target = _commitlog_end(root) + (1 << 20) if physical_offset is None else physical_offset
    rel = f"timerlog/{Path(u.file).name}"
    pos = u.file_position + L.TIMER_LOG_UNIT.offset("physical_offset")
    _patch(root, rel, pos, L.TIMER_LOG_UNIT.pack("physical_offset", target))
    return Damage("timer_unit_outside_commitlog", rel, pos, L.TIMER_LOG_UNIT.member("physical_offset").width,
                  f"unit at timer-log offset {u.timerlog_offset}: CommitLog offset {u.physical_offset} -> {target}")


def looping_timer_chain(src, dst, slot_time_ms: int | None = None) -> Damage:
    """The chain of the wheel slot for ``slot_time_ms`` (default: the non-empty slot with the longest chain)
    loops: the prevPos of its oldest unit points at the slot's newest unit (a one-unit chain: at itself)."""
    from .. import timer as T

    root = copy_store(src, dst)
    slots = T.read_wheel_slots(root / T.TIMER_WHEEL_FILE)
    with T.TimerLog(root) as log:
        chains = []
        for row in slots.rows():
            if slot_time_ms is not None and row["slot_time_ms"] != slot_time_ms:
                continue
            walk = T.walk_chain(log, row["last_pos"])
            if walk.end == "complete" and walk.units:
                chains.append(walk)
    if not chains:
        _fail("no wheel slot with a complete chain to make loop", file=str(root / T.TIMER_WHEEL_FILE),
              field="slot_time_ms")
    walk = max(chains, key=lambda c: (len(c.units), c.last_pos))
    oldest = walk.units[-1]
    rel = f"timerlog/{Path(oldest.file).name}"
    pos = oldest.file_position + L.TIMER_LOG_UNIT.offset("prev_pos")
    _patch(root, rel, pos, L.TIMER_LOG_UNIT.pack("prev_pos", walk.last_pos))
    return Damage("looping_timer_chain", rel, pos, L.TIMER_LOG_UNIT.member("prev_pos").width,
                  f"unit at timer-log offset {oldest.timerlog_offset}: prevPos -1 -> {walk.last_pos} "
                  f"(the chain of {len(walk.units)} unit(s) from {walk.last_pos} loops)")


def timercheck_wrong_length(src, dst, length: int = L.TIMER_CHECKPOINT.width) -> Damage:
    """``config/timercheck`` cut (or zero-extended) to ``length`` bytes (default 56: the members without their
    page)."""
    root = copy_store(src, dst)
    path = root / "config" / "timercheck"
    if not path.is_file():
        _fail("the store has no config/timercheck", file=str(path))
    old = path.stat().st_size
    if length == old or length < 0:
        _fail(f"length {length} is the file's own or negative", field="length")
    os.truncate(path, length)
    return Damage("timercheck_wrong_length", "config/timercheck", min(old, length), abs(old - length),
                  f"file {old} -> {length} bytes")


def _rewrite_record(root: Path, f: Frame, change) -> tuple[int, int, list]:
    """Decode the record of ``f``, let ``change`` alter its Message, re-encode it (body CRC recomputed, the
    ``__CRC32#`` property recomputed when the record has one) and write what differs; (first position, length,
    ranges)."""
    from .. import propcrc

    with ReadOnlyMap(root / _rel_segment(f)) as m:
        old = bytes(m.buf[f.file_position:f.file_position + f.size])
        msg = decode_record(m.buf, f.file_position, file=f.segment)
    change(msg)
    msg.body_crc = None
    new = bytearray(encode_record(msg))
    if len(new) != len(old):
        _fail("the change would move the record's length", field="body")
    if propcrc.check_record_crc(old).status != "absent":
        propcrc.patch_crc(new)
    first, last = _diff_span(old, bytes(new))
    _patch(root, _rel_segment(f), f.file_position + first, bytes(new[first:last + 1]))
    return f.file_position + first, last - first + 1, [(f.file_position + first, last - first + 1)]


def pop_checkpoint_not_json(src, dst, physical_offset: int | None = None, body: bytes | None = None) -> Damage:
    """A POP checkpoint record (tag ``ck``; default: the last one, on the revive topic if any fired, else on
    rmq_sys_wheel_timer) whose body becomes ``body`` (default: ``<not json>`` and filler, same length)."""
    root = copy_store(src, dst)
    cks = [f for f in _messages(root) if f.message.tags == L.POP_CK_TAG]
    revived = [f for f in cks if f.message.topic.startswith(L.REVIVE_TOPIC_PREFIX)]
    pool = revived or cks
    if physical_offset is not None:
        pool = [f for f in cks if f.physical_offset == physical_offset]
    if not pool:
        _fail("the store has no POP checkpoint record", file=str(root / "commitlog"), field="physical_offset")
    f = pool[-1]
    n = len(f.message.body)
    new_body = (b"<not json>" + b"#" * n)[:n] if body is None else body
    if len(new_body) != n:
        _fail(f"body must keep the record's {n} bytes", field="body")

    def change(msg):
        msg.body = new_body

    pos, length, ranges = _rewrite_record(root, f, change)
    return Damage("pop_checkpoint_not_json", _rel_segment(f), pos, length,
                  f"ck record at {f.physical_offset}: body is {new_body[:16]!r}...", tuple(ranges))


def _crc_frame(root: Path, physical_offset: int | None) -> Frame:
    from .. import propcrc

    def has_crc(fr):
        with ReadOnlyMap(root / _rel_segment(fr)) as m:
            return propcrc.check_record_crc(m.buf, fr.file_position, fr.size).status == "ok"

    return _frame(root, physical_offset, has_crc)


def crc_property_non_digit(src, dst, physical_offset: int | None = None, digit: int = 0, char: str = "x") -> Damage:
    """One of the ten ``__CRC32#`` digits (``digit``, 0 = the least significant, the first written) of a record
    (default: the last with a valid property) becomes ``char`` (one ASCII non-digit)."""
    if len(char) != 1 or not char.isascii() or char.isdigit():
        _fail("char must be one ASCII non-digit character", field="char")
    if not 0 <= digit < L.CRC32_DIGITS:
        _fail(f"digit must be in [0, {L.CRC32_DIGITS})", field="digit")
    root = copy_store(src, dst)
    f = _crc_frame(root, physical_offset)
    pos = f.file_position + f.size - L.CRC32_RESERVED_LEN + len(L.PROPERTY_CRC32) + 1 + digit
    _patch(root, _rel_segment(f), pos, char.encode("ascii"))
    return Damage("crc_property_non_digit", _rel_segment(f), pos, 1,
                  f"record at {f.physical_offset}: __CRC32# digit {digit} -> {char!r}")


def flip_bit_under_crc(src, dst, physical_offset: int | None = None, field: str = "born_timestamp",
                       bit: int = 0) -> Damage:
    """Flip bit ``bit`` (0 = the lowest of the field's last byte) of a record's ``field`` (a fixed header field
    other than the body's) in a record with ``__CRC32#`` (default: the last): the body CRC still matches, the
    whole-record CRC does not."""
    root = copy_store(src, dst)
    f = _crc_frame(root, physical_offset)
    lay = L.layout_for(f.message.sys_flag, f.message.magic_version)
    if field not in lay.offsets or field in ("store_size", "magic", "body_length"):
        _fail(f"field {field!r} is not a header field a bit can flip in without moving the record", field="field")
    width = lay.widths[field]
    if not 0 <= bit < width * 8:
        _fail(f"bit {bit} is outside the {width}-byte field", field="bit")
    pos = f.file_position + lay.offsets[field] + width - 1 - bit // 8
    with ReadOnlyMap(root / _rel_segment(f)) as m:
        old = m.buf[pos]
    _patch(root, _rel_segment(f), pos, bytes([old ^ (1 << (bit % 8))]))
    return Damage("flip_bit_under_crc", _rel_segment(f), pos, 1,
                  f"record at {f.physical_offset}: bit {bit} of {field} (the __CRC32# no longer matches)")


def _lmq_units(root: Path, queue: str):
    from ..consumequeue import discover_queues

    files = discover_queues(root / "consumequeue").get((queue, L.LMQ_QUEUE_ID))
    if not files:
        _fail(f"no consume queue {queue}/{L.LMQ_QUEUE_ID}", field="queue")
    units = [u for u in read_queue(files, stop_at_invalid=True) if u.kind == "entry"]
    if not units:
        _fail(f"{queue} has no unit", field="queue")
    return files, units


def _rewrite_queue(root: Path, queue: str, files, raw: bytes, first_changed: int, kind: str, detail: str) -> Damage:
    """Write ``raw`` (the queue's units from its first file's start) back over the queue's files."""
    size = files[0].length
    start_file = first_changed // size
    for i, f in enumerate(files):
        if i < start_file:
            continue
        chunk = raw[i * size:(i + 1) * size]
        if len(chunk) > f.length:
            _fail("the queue's last file has no room", field="queue")
        _patch(root, f"consumequeue/{queue}/{L.LMQ_QUEUE_ID}/{f.path.name}", 0, chunk)
    last_file = files[min(len(files) - 1, first_changed // size)]
    return Damage(kind, f"consumequeue/{queue}/{L.LMQ_QUEUE_ID}/{last_file.path.name}", first_changed % size,
                  len(raw) - first_changed, detail)


def lmq_unit_missing(src, dst, queue: str, queue_offset: int | None = None) -> Damage:
    """The unit at ``queue_offset`` of LMQ consume queue ``queue`` (default: its middle unit) is removed, the
    later units move one down and the freed last place is zeros."""
    from ..consumequeue import unit_bytes

    root = copy_store(src, dst)
    files, units = _lmq_units(root, queue)
    if any(f.base_byte_offset != i * files[0].length for i, f in enumerate(files)):
        _fail("the queue's files do not start at 0 back to back", field="queue")
    u = units[len(units) // 2] if queue_offset is None else next((x for x in units if x.queue_offset == queue_offset),
                                                                   None)
    if u is None:
        _fail(f"no unit at queue offset {queue_offset}", field="queue_offset")
    kept = [x for x in units if x.queue_offset != u.queue_offset]
    head = units[0].queue_offset * L.CQ_STORE_UNIT_SIZE  # pre-blank units before the first entry stay as they are
    raw = bytearray(b"\0" * head) + b"".join(unit_bytes(x.physical_offset, x.size, x.tags_code) for x in kept) + \
        bytes(L.CQ_STORE_UNIT_SIZE)
    with ReadOnlyMap(files[0].path) as m:
        raw[:head] = bytes(m.buf[:head])
    at = u.queue_offset * L.CQ_STORE_UNIT_SIZE
    return _rewrite_queue(root, queue, files, bytes(raw), at, "lmq_unit_missing",
                          f"{queue}: unit {u.queue_offset} (record at {u.physical_offset}) removed")


def lmq_unit_duplicated(src, dst, queue: str, queue_offset: int | None = None) -> Damage:
    """The unit at ``queue_offset`` of LMQ consume queue ``queue`` (default: its middle unit) appears twice
    (at its place and the next one), the later units move one up."""
    from ..consumequeue import unit_bytes

    root = copy_store(src, dst)
    files, units = _lmq_units(root, queue)
    if any(f.base_byte_offset != i * files[0].length for i, f in enumerate(files)):
        _fail("the queue's files do not start at 0 back to back", field="queue")
    u = units[len(units) // 2] if queue_offset is None else next((x for x in units if x.queue_offset == queue_offset),
                                                                   None)
    if u is None:
        _fail(f"no unit at queue offset {queue_offset}", field="queue_offset")
    out = []
    for x in units:
        out.append(x)
        if x.queue_offset == u.queue_offset:
            out.append(x)
    head = units[0].queue_offset * L.CQ_STORE_UNIT_SIZE
    with ReadOnlyMap(files[0].path) as m:
        raw = bytes(m.buf[:head]) + b"".join(unit_bytes(x.physical_offset, x.size, x.tags_code) for x in out)
    at = (u.queue_offset + 1) * L.CQ_STORE_UNIT_SIZE
    return _rewrite_queue(root, queue, files, raw, at, "lmq_unit_duplicated",
                          f"{queue}: unit {u.queue_offset} (record at {u.physical_offset}) written twice")


def _batch_queue(root: Path, topic: str, queue_id: int):
    from ..batchcq import discover_batch_queues, read_batch_queue

    files = discover_batch_queues(root).get((topic, queue_id))
    units = [u for u in read_batch_queue(files or [], stop_at_invalid=True)]
    if not units:
        _fail(f"no batch consume queue {topic}/{queue_id} with units", field="queue")
    return files, units


def batch_unit_field(src, dst, topic: str, queue_id: int, index: int | None = None, field: str = "batch_size",
                     value: int | None = None) -> Damage:
    """Unit number ``index`` (default: the middle one) of batch consume queue ``topic``/``queue_id`` gets ``value``
    in ``field`` (a member of layout.BATCH_CQ_UNIT; default: the present value + 1)."""
    from ..batchcq import UNIT

    root = copy_store(src, dst)
    _, units = _batch_queue(root, topic, queue_id)
    u = units[len(units) // 2 if index is None else index]
    old = getattr(u, field)
    new = old + 1 if value is None else value
    data = new.to_bytes(UNIT.member(field).width, "big", signed=True)
    rel = f"batchconsumequeue/{topic}/{queue_id}/{Path(u.file).name}"
    at = u.file_position + UNIT.offset(field)
    _patch(root, rel, at, data)
    return Damage("batch_unit_field", rel, at, len(data),
                  f"{topic}/{queue_id}: unit at {u.file_position} (record at {u.physical_offset}): {field} {old} -> {new}")


def batch_unit_missing(src, dst, topic: str, queue_id: int, index: int | None = None) -> Damage:
    """Unit number ``index`` (default: the middle one) of batch consume queue ``topic``/``queue_id`` is removed; the
    later units of its file move one down and the freed place is zeros."""
    from ..batchcq import UNIT_SIZE, unit_bytes

    root = copy_store(src, dst)
    _, units = _batch_queue(root, topic, queue_id)
    u = units[len(units) // 2 if index is None else index]
    same = [x for x in units if x.file == u.file and x.file_position > u.file_position]
    raw = b"".join(unit_bytes(x.physical_offset, x.size, x.tags_code, x.store_timestamp, x.msg_base_offset,
                              x.batch_size, x.compacted_offset, x.reserved) for x in same) + bytes(UNIT_SIZE)
    rel = f"batchconsumequeue/{topic}/{queue_id}/{Path(u.file).name}"
    _patch(root, rel, u.file_position, raw)
    return Damage("batch_unit_missing", rel, u.file_position, len(raw),
                  f"{topic}/{queue_id}: unit at {u.file_position} (record at {u.physical_offset}, messages "
                  f"{u.msg_base_offset}..{u.next_offset - 1}) removed")


__all__ = ["Damage", "DamageError", "copy_store", "torn_tail", "flip_body_bit", "zero_page", "truncate_segment",
           "bad_magic", "bad_crc", "delete_consume_queue", "wrong_cq_size", "stale_index_entry",
           "timer_unit_outside_commitlog", "looping_timer_chain", "timercheck_wrong_length", "pop_checkpoint_not_json",
           "crc_property_non_digit", "flip_bit_under_crc", "lmq_unit_missing", "lmq_unit_duplicated",
           "batch_unit_field", "batch_unit_missing"]
