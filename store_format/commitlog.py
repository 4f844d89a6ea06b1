"""CommitLog segments and their framing: where records start, end, and why a walk stops.

Segments are ``commitlog/<20-digit base offset>``, preallocated to ``mappedFileSizeCommitLog``; a record
never spans two segments and records its own PHYSICALOFFSET (= base + position).  A walk mirrors the
broker's recovery walk (``CommitLog.recoverNormally``/``checkMessageAndReturnSize``): messages, then either
the end-of-file blank (TOTALSIZE = bytes left, BLANK magic) or a stop.  Zeros where a record should
start are the normal end of written data (``END_OF_DATA``); anything else that stops the walk is damage.

Framing is apart from decoding: :func:`frame_at` validates one record's framing from its header fields
only; :func:`walk_segment` yields :class:`Frame`s and decodes messages only when asked.  Segments are read
through read-only mmaps, never loaded into a Python ``bytes`` whole.
"""
from __future__ import annotations

import mmap
import os
import re
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

from . import layout as L
from .codec import decode_record
from .errors import ErrorKind, RecordError
from .message import Message, body_crc32

SEGMENT_NAME = re.compile(r"^\d{20}$")
END_OF_DATA = "END_OF_DATA"  # stop kind for zeros where the next record would start: not damage
_HEAD = struct.Struct(">ii")
_I32 = struct.Struct(">i")
_I16 = struct.Struct(">h")
_I64 = struct.Struct(">q")
_MAGIC_BYTES = tuple(struct.pack(">i", m) for m in (L.MAGIC_V1, L.MAGIC_V2, L.BLANK_MAGIC))


def segment_name(base_offset: int) -> str:
    """UtilAll.offset2FileName: the base offset zero-padded to 20 digits."""
    return f"{base_offset:0{L.SEGMENT_NAME_DIGITS}d}"


@dataclass(frozen=True)
class Segment:
    path: Path
    base_offset: int
    length: int  # actual file length (a healthy store: == mapped file size)

    @property
    def name(self) -> str:
        return self.path.name


def list_segments(commitlog_dir: str | os.PathLike) -> list[Segment]:
    """Segments sorted by base offset; files whose names are not 20 digits are ignored."""
    d = Path(commitlog_dir)
    out = []
    if d.is_dir():
        for p in d.iterdir():
            if SEGMENT_NAME.match(p.name) and p.is_file():
                out.append(Segment(p, int(p.name), p.stat().st_size))
    return sorted(out, key=lambda s: s.base_offset)


def infer_segment_size(segments: list[Segment]) -> int | None:
    """mappedFileSizeCommitLog as the files show it: the spacing of names, else the most common length."""
    if len(segments) >= 2:
        gaps = [b.base_offset - a.base_offset for a, b in zip(segments, segments[1:])]
        return min(g for g in gaps if g > 0) if any(g > 0 for g in gaps) else None
    if segments:
        return segments[0].length or None
    return None


class ReadOnlyMap:
    """A read-only view of a file: an mmap (empty files give an empty bytes).  Never writable."""

    def __init__(self, path: str | os.PathLike):
        self.path = Path(path)
        self._f = open(self.path, "rb")
        size = os.fstat(self._f.fileno()).st_size
        self.buf = mmap.mmap(self._f.fileno(), 0, access=mmap.ACCESS_READ) if size else b""

    def __len__(self) -> int:
        return len(self.buf)

    def close(self):
        if isinstance(self.buf, mmap.mmap):
            self.buf.close()
        self._f.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


@dataclass
class Frame:
    """One step of a walk: a ``message``, the end-of-file ``blank``, or the ``stop`` that ends the walk."""

    kind: str  # "message" | "blank" | "stop"
    segment: str
    file_position: int
    physical_offset: int
    size: int  # TOTALSIZE for message/blank; for a stop, the declared TOTALSIZE field (may be garbage)
    magic: int = 0
    stop_kind: str | None = None  # ErrorKind value or END_OF_DATA
    stop_field: str | None = None
    stop_message: str | None = None
    message: Message | None = None

    def stop_error(self) -> RecordError | None:
        if self.kind != "stop" or self.stop_kind == END_OF_DATA:
            return None
        return RecordError(ErrorKind(self.stop_kind), self.stop_message or "", file=self.segment,
                           position=self.file_position, field=self.stop_field)


def frame_at(buf, pos: int, limit: int, base_offset: int, *, check_crc: bool = True,
             check_physical_offset: bool = True) -> tuple[str, int, int, str | None, str | None, str | None]:
    """Classify the bytes at ``pos`` as the broker's recovery would.

    Returns ``(kind, size, magic, stop_kind, stop_field, stop_message)`` where kind is message/blank/stop.
    ``check_physical_offset`` adds our forensic check (PHYSICALOFFSET == base + pos) that the broker lacks.
    """
    remaining = limit - pos
    if remaining < 8:
        if remaining > 0 and any(buf[pos:limit]):
            return "stop", 0, 0, ErrorKind.TRUNCATED.value, "store_size", f"{remaining} stray bytes at the end"
        return "stop", 0, 0, END_OF_DATA, None, "end of segment"
    size, magic = _HEAD.unpack_from(buf, pos)
    if magic == L.BLANK_MAGIC:
        if size != remaining:
            return ("stop", size, magic, ErrorKind.BAD_LENGTH.value, "store_size",
                    f"blank TOTALSIZE {size} != {remaining} bytes left in the segment")
        return "blank", size, magic, None, None, None
    version = L.MESSAGE_MAGICS.get(magic)
    if version is None:
        if size == 0 and magic == 0:
            return "stop", 0, 0, END_OF_DATA, None, "zeros where the next record would start (unwritten tail)"
        return "stop", size, magic, ErrorKind.BAD_MAGIC.value, "magic", f"illegal magic code 0x{magic & 0xFFFFFFFF:08X}"
    if remaining < L.BORN_HOST_OFFSET:
        return "stop", size, magic, ErrorKind.TRUNCATED.value, "sys_flag", "record header cut by the end of the segment"
    sys_flag = _I32.unpack_from(buf, pos + L.SYS_FLAG_OFFSET)[0]
    lay = L.layout_for(sys_flag, version)
    if size < lay.min_size or size > remaining:
        kind = ErrorKind.TRUNCATED if size > remaining else ErrorKind.BAD_LENGTH
        return ("stop", size, magic, kind.value, "store_size",
                f"TOTALSIZE {size} outside [{lay.min_size}, {remaining} bytes left]")
    if check_physical_offset:
        phys = _I64.unpack_from(buf, pos + L.PHYSICAL_OFFSET_OFFSET)[0]
        if phys != base_offset + pos:
            return ("stop", size, magic, ErrorKind.PHYSICAL_OFFSET_MISMATCH.value, "physical_offset",
                    f"PHYSICALOFFSET {phys} != segment base + position {base_offset + pos}")
    end = pos + size
    body_len = _I32.unpack_from(buf, pos + lay.offsets["body_length"])[0]
    p = pos + lay.body_offset + max(body_len, 0)
    if body_len < 0 or p + lay.topic_length_width > end:
        return "stop", size, magic, ErrorKind.BAD_LENGTH.value, "body_length", f"BODYLENGTH {body_len} does not fit"
    topic_len = buf[p] if version == 1 else _I16.unpack_from(buf, p)[0]
    if version == 1 and topic_len > 127:
        topic_len -= 256  # signed byte
    p += lay.topic_length_width + topic_len
    if topic_len < 0 or p + 2 > end:
        return "stop", size, magic, ErrorKind.BAD_LENGTH.value, "topic_length", f"TOPICLENGTH {topic_len} does not fit"
    props_len = _I16.unpack_from(buf, p)[0]
    if props_len < 0 or p + 2 + props_len > end:
        return ("stop", size, magic, ErrorKind.BAD_LENGTH.value, "properties_length",
                f"PROPERTIESLENGTH {props_len} does not fit")
    expected = lay.total_size(body_len, topic_len, props_len)
    if expected != size:
        return "stop", size, magic, ErrorKind.SIZE_MISMATCH.value, "store_size", f"TOTALSIZE {size} != calMsgLength {expected}"
    if check_crc and body_len > 0:
        crc = _I32.unpack_from(buf, pos + lay.offsets["body_crc"])[0]
        start = pos + lay.body_offset
        actual = body_crc32(buf[start:start + body_len])
        if crc != actual:
            return "stop", size, magic, ErrorKind.BAD_CRC.value, "body_crc", f"body CRC {crc} != computed {actual}"
    return "message", size, magic, None, None, None


def walk_buffer(buf, segment: str, base_offset: int, *, start: int = 0, limit: int | None = None,
                decode: bool = True, check_crc: bool = True, check_physical_offset: bool = True) -> Iterator[Frame]:
    """Recovery walk over one segment's bytes from ``start``: messages until a blank or a stop.

    Always ends with exactly one blank or stop frame.
    """
    limit = len(buf) if limit is None else limit
    pos = start
    while True:
        kind, size, magic, stop_kind, stop_field, stop_msg = frame_at(
            buf, pos, limit, base_offset, check_crc=check_crc, check_physical_offset=check_physical_offset)
        frame = Frame(kind, segment, pos, base_offset + pos, size, magic, stop_kind, stop_field, stop_msg)
        if kind == "message":
            if decode:
                frame.message = decode_record(buf, pos, limit=pos + size, file=segment)
            yield frame
            pos += size
            continue
        yield frame
        return


def walk_segment(segment: Segment, **kwargs) -> Iterator[Frame]:
    with ReadOnlyMap(segment.path) as m:
        yield from walk_buffer(m.buf, segment.name, segment.base_offset, **kwargs)


def find_next_frame(buf, start: int, limit: int, base_offset: int, *, confirm: bool = True) -> int | None:
    """Resync: the first position >= ``start`` where a record plausibly begins, or None.

    A candidate has a message (or blank) magic, a PHYSICALOFFSET equal to base + position, valid framing;
    when ``confirm`` it must also be followed by another valid frame, a blank, or zeros/the segment end
    (so a magic-looking run of bytes inside a body is not taken for a record).
    """
    pos = start
    while pos < limit:
        hit = _find_any_magic(buf, pos + 4, limit)
        if hit is None:
            return None
        cand = hit - 4
        if cand >= start:
            kind, size, *_ = frame_at(buf, cand, limit, base_offset)
            if kind == "blank":
                return cand
            if kind == "message":
                if not confirm:
                    return cand
                nxt_kind, _, _, nxt_stop, *_ = frame_at(buf, cand + size, limit, base_offset)
                if nxt_kind in ("message", "blank") or nxt_stop == END_OF_DATA:
                    return cand
        pos = hit - 3
    return None


def _find_any_magic(buf, start: int, limit: int) -> int | None:
    best = None
    for pattern in _MAGIC_BYTES:
        i = buf.find(pattern, start, limit)
        if i >= 0 and (best is None or i < best):
            best = i
    return best


@dataclass
class SalvageSpan:
    """Bytes between two frames that no walk could frame: reported, never dropped silently."""

    segment: str
    file_position: int
    length: int
    reason: str  # the stop kind that began the span
    excerpt: bytes  # the first bytes, for a hex excerpt


def salvage_buffer(buf, segment: str, base_offset: int, *, start: int = 0, limit: int | None = None,
                   decode: bool = True, check_crc: bool = True, excerpt_len: int = 32
                   ) -> Iterator[Frame | SalvageSpan]:
    """Every frame anywhere in the segment: walk, and after each damaging stop resync past it.

    Yields frames (with ``stop`` frames marking where the recovery walk would have ended) and
    :class:`SalvageSpan` for each unframeable span.  Zero-filled tails end the salvage: a run of zeros
    to the end of the segment is not damage.
    """
    limit = len(buf) if limit is None else limit
    pos = start
    while pos < limit:
        last = None
        for frame in walk_buffer(buf, segment, base_offset, start=pos, limit=limit, decode=decode,
                                 check_crc=check_crc):
            yield frame
            last = frame
        if last.kind == "blank":
            return
        # A stop: zeros that run to the end are the normal tail; otherwise resync after it.
        pos = last.file_position
        if last.stop_kind == END_OF_DATA:
            nxt = find_next_frame(buf, pos, limit, base_offset)
            if nxt is None:
                return
        else:
            nxt = find_next_frame(buf, pos + 1, limit, base_offset)
        end = limit if nxt is None else nxt
        if end > pos:
            yield SalvageSpan(segment, pos, end - pos, last.stop_kind, bytes(buf[pos:min(end, pos + excerpt_len)]))
        if nxt is None:
            return
        pos = nxt


def read_message_at(segments: list[Segment], physical_offset: int, segment_size: int | None = None) -> Message:
    """Decode the record at an absolute physical offset (e.g. from a consume-queue unit or a msg id)."""
    for seg in segments:
        span = segment_size or seg.length
        if seg.base_offset <= physical_offset < seg.base_offset + span:
            pos = physical_offset - seg.base_offset
            with ReadOnlyMap(seg.path) as m:
                if pos >= len(m):
                    break
                return decode_record(m.buf, pos, file=seg.name)
    raise RecordError(ErrorKind.OUT_OF_RANGE, f"physical offset {physical_offset} is in no commitlog segment",
                      position=physical_offset, field="physical_offset")
