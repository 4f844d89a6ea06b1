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
=====================  ================================================================================
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
from ..consumequeue import discover_queues, read_queue
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


def stale_index_entry(src, dst, topic: str | None = None, key: str | None = None,
                      physical_offset: int | None = None, hash_slot_num: int | None = None,
                      index_num: int | None = None) -> Damage:
    """Add an index entry for ``topic#key`` (default: the last record's topic and UNIQ_KEY) pointing at
    ``physical_offset`` (default: the end of the commitlog's records), as a record dropped by recovery
    leaves behind.  Goes through ``IndexFile.putKey`` of the last index file."""
    from .writer import IndexFileWriter
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


__all__ = ["Damage", "DamageError", "copy_store", "torn_tail", "flip_body_bit", "zero_page", "truncate_segment",
           "bad_magic", "bad_crc", "delete_consume_queue", "wrong_cq_size", "stale_index_entry"]
