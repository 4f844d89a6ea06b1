"""CommitLog segments and their framing: where records start, end, and why a walk stops.

Segments are ``commitlog/<20-digit base offset>``, preallocated to ``mappedFileSizeCommitLog``; a record
never spans two segments and records its own PHYSICALOFFSET (= base + position).  A walk mirrors the
broker's recovery walk (``CommitLog.recoverNormally``/``checkMessageAndReturnSize``): messages, then either
the end-of-file blank (TOTALSIZE = bytes left, BLANK magic) or a stop.  Zeros where a record should
start are the normal end of written data (``END_OF_DATA``); anything else that stops the walk is damage.

Framing is apart from decoding: :func:`frame_at` validates one record's framing from its header fields
only; :func:`walk_segment` yields :class:`Frame`s and decodes messages only when asked.  Segments are read
through read-only mmaps, never loaded into a Python ``bytes`` whole.

Bulk framing (:func:`walk_arrays`, :func:`salvage_arrays`) gives the same walks as :class:`FrameArrays`
(positions, sizes, kinds as numpy arrays) for readers that move millions of records: runs of plain valid
messages are framed with numpy (or by a faster framer the caller passes, such as ``decoding.kernels.CompiledFramer``;
this package stays free of compiled code), and every record they cannot prove valid goes to the scalar
:func:`frame_at`, which stays the one definition of the walk.
"""
from __future__ import annotations

import re
import struct
import zlib
from contextlib import contextmanager
from dataclasses import dataclass, replace
from typing import Iterator, NamedTuple

import numpy as np

from . import dledger
from . import layout as L
from .codec import decode_record
from .errors import ErrorKind, RecordError
from .fs import Location, ReadOnlyMap  # noqa: F401  (ReadOnlyMap: named here too, where readers found it)
from .message import Message, body_crc32
from .rolled import RolledFile, infer_file_size, list_folder, list_rolled_files

SEGMENT_NAME = re.compile(r"[0-9]{20}\Z")  # ASCII digits only, no trailing newline: use .match
END_OF_DATA = "END_OF_DATA"  # stop kind for zeros where the next record would start: not damage
_HEAD = struct.Struct(">ii")
_I32 = struct.Struct(">i")
_I16 = struct.Struct(">h")
_I64 = struct.Struct(">q")
_MAGIC_BYTES = tuple(struct.pack(">i", m) for m in (L.MAGIC_V1, L.MAGIC_V2, L.BLANK_MAGIC))


def segment_name(base_offset: int) -> str:
    """UtilAll.offset2FileName: the base offset zero-padded to 20 digits."""
    return f"{base_offset:0{L.SEGMENT_NAME_DIGITS}d}"


#: one file of ``commitlog/`` as the listing finds it (store_format.rolled: the one listing of rolled folders)
Segment = RolledFile


def list_segment_files(where, segment_size: int | None = None, limit=None) -> list[Segment]:
    """Every regular file of a ``commitlog/`` folder (or the one segment file ``where`` names), in name order, each with
    what is wrong with its name or length (:func:`store_format.rolled.list_folder`; ``limit``, a
    ``rolled.FileLimit``: past it the newest)."""
    return list_folder(where, segment_size, "commitlog", limit)


def list_segments(commitlog_dir) -> list[Segment]:
    """The segments the broker loads: the named files of :func:`list_segment_files`, by base offset."""
    return list_rolled_files(commitlog_dir, part="commitlog")


def min_offset(commitlog_dir) -> int:
    """``CommitLog.getMinOffset`` as a broker computes it once it has loaded ``commitlog_dir``: the first segment's
    base offset (every loaded file is available), -1 without a segment.  Read once per listing of the folder (its
    modification time): the queue model asks it for every queue."""
    from . import fs

    loc = fs.resolve(commitlog_dir)
    try:
        stamp = loc.info().mtime_ns
    except (OSError, AttributeError):
        stamp = None
    key = (loc.path, stamp)
    if key not in _MIN_OFFSETS:
        segs = list_segments(commitlog_dir)
        _MIN_OFFSETS[key] = segs[0].base_offset if segs else -1
    return _MIN_OFFSETS[key]


_MIN_OFFSETS: dict = {}


def infer_segment_size(files) -> int | None:
    """mappedFileSizeCommitLog as the segment files show it (:func:`store_format.rolled.infer_file_size`)."""
    return infer_file_size(files)


@contextmanager
def first_record(segment: Segment):
    """A buffer from a segment's start that holds its first record: the read-only map of a local segment, else
    (a ``fs.StorePath``) a ranged read of the bytes its TOTALSIZE declares, never the whole segment."""
    from .fs import StorePath

    if dledger.is_data_file(segment.loc):  # a DLedger data file: the first entry's body is the first record
        yield dledger.first_body(segment.loc, segment.length)
        return
    if not isinstance(segment.path, StorePath):
        with ReadOnlyMap(segment.path) as m:
            yield m.buf
        return
    loc = segment.path.loc
    size = int.from_bytes(loc.read_range(0, 4), "big", signed=True) if segment.length >= 4 else 0
    yield loc.read_range(0, size if 0 < size <= segment.length else min(segment.length, 4))


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


class Framing(NamedTuple):
    """What :func:`frame_at` finds at a position: a :class:`Frame` without its place and message."""

    kind: str  # "message" | "blank" | "stop"
    size: int  # TOTALSIZE (for a stop, the declared field, which may be garbage; 0 where none could be read)
    magic: int
    stop_kind: str | None = None  # ErrorKind value or END_OF_DATA
    stop_field: str | None = None
    stop_message: str | None = None

    def frame(self, segment: str, pos: int, base_offset: int) -> Frame:
        return Frame(self.kind, segment, pos, base_offset + pos, self.size, self.magic, self.stop_kind,
                     self.stop_field, self.stop_message)


class FrameRun(NamedTuple):
    """What a bulk framer's ``run`` finds: the consecutive plain valid messages from a position, as columns."""

    positions: np.ndarray  # int64, file positions
    sizes: np.ndarray  # int64, TOTALSIZE
    magics: np.ndarray  # int32


def frame_at(buf, pos: int, limit: int, base_offset: int, *, check_crc: bool = True,
             check_physical_offset: bool = True) -> Framing:
    """Classify the bytes at ``pos`` as the broker's recovery would: a message, the blank, or the stop that ends
    the walk (with why).  ``check_physical_offset`` adds our forensic check (PHYSICALOFFSET == base + pos) that
    the broker lacks.
    """
    remaining = limit - pos
    if remaining < 8:
        if remaining > 0 and any(buf[pos:limit]):
            return Framing("stop", 0, 0, ErrorKind.TRUNCATED.value, "store_size", f"{remaining} stray bytes at the end")
        return Framing("stop", 0, 0, END_OF_DATA, None, "end of segment")
    size, magic = _HEAD.unpack_from(buf, pos)
    if magic == L.BLANK_MAGIC:
        if size != remaining:
            return Framing("stop", size, magic, ErrorKind.BAD_LENGTH.value, "store_size",
                           f"blank TOTALSIZE {size} != {remaining} bytes left in the segment")
        return Framing("blank", size, magic)
    version = L.MESSAGE_MAGICS.get(magic)
    if version is None:
        if size == 0 and magic == 0:
            return Framing("stop", 0, 0, END_OF_DATA, None, "zeros where the next record would start (unwritten tail)")
        return Framing("stop", size, magic, ErrorKind.BAD_MAGIC.value, "magic",
                       f"illegal magic code 0x{magic & 0xFFFFFFFF:08X}")
    if remaining < L.BORN_HOST_OFFSET:
        return Framing("stop", size, magic, ErrorKind.TRUNCATED.value, "sys_flag",
                       "record header cut by the end of the segment")
    sys_flag = _I32.unpack_from(buf, pos + L.SYS_FLAG_OFFSET)[0]
    lay = L.layout_for(sys_flag, version)
    if size < lay.min_size or size > remaining:
        kind = ErrorKind.TRUNCATED if size > remaining else ErrorKind.BAD_LENGTH
        return Framing("stop", size, magic, kind.value, "store_size",
                       f"TOTALSIZE {size} outside [{lay.min_size}, {remaining} bytes left]")
    if check_physical_offset:
        phys = _I64.unpack_from(buf, pos + L.PHYSICAL_OFFSET_OFFSET)[0]
        if phys != base_offset + pos:
            return Framing("stop", size, magic, ErrorKind.PHYSICAL_OFFSET_MISMATCH.value, "physical_offset",
                           f"PHYSICALOFFSET {phys} != segment base + position {base_offset + pos}")
    end = pos + size
    body_len = _I32.unpack_from(buf, pos + lay.offsets["body_length"])[0]
    p = pos + lay.body_offset + max(body_len, 0)
    if body_len < 0 or p + lay.topic_length_width > end:
        return Framing("stop", size, magic, ErrorKind.BAD_LENGTH.value, "body_length",
                       f"BODYLENGTH {body_len} does not fit")
    topic_len = buf[p] if version == 1 else _I16.unpack_from(buf, p)[0]
    if version == 1 and topic_len > 127:
        topic_len -= 256  # signed byte
    p += lay.topic_length_width + topic_len
    if topic_len < 0 or p + 2 > end:
        return Framing("stop", size, magic, ErrorKind.BAD_LENGTH.value, "topic_length",
                       f"TOPICLENGTH {topic_len} does not fit")
    props_len = _I16.unpack_from(buf, p)[0]
    if props_len < 0 or p + 2 + props_len > end:
        return Framing("stop", size, magic, ErrorKind.BAD_LENGTH.value, "properties_length",
                       f"PROPERTIESLENGTH {props_len} does not fit")
    expected = lay.total_size(body_len, topic_len, props_len)
    if expected != size:
        return Framing("stop", size, magic, ErrorKind.SIZE_MISMATCH.value, "store_size",
                       f"TOTALSIZE {size} != calMsgLength {expected}")
    if check_crc and body_len > 0:
        crc = _I32.unpack_from(buf, pos + lay.offsets["body_crc"])[0]
        start = pos + lay.body_offset
        actual = body_crc32(buf[start:start + body_len])
        if crc != actual:
            return Framing("stop", size, magic, ErrorKind.BAD_CRC.value, "body_crc",
                           f"body CRC {crc} != computed {actual}")
    return Framing("message", size, magic)


def walk_buffer(buf, segment: str, base_offset: int, *, start: int = 0, limit: int | None = None,
                decode: bool = True, check_crc: bool = True, check_physical_offset: bool = True) -> Iterator[Frame]:
    """Recovery walk over one segment's bytes from ``start``: messages until a blank or a stop.

    Always ends with exactly one blank or stop frame.
    """
    limit = len(buf) if limit is None else limit
    pos = start
    while True:
        frame = frame_at(buf, pos, limit, base_offset, check_crc=check_crc,
                         check_physical_offset=check_physical_offset).frame(segment, pos, base_offset)
        if frame.kind == "message":
            if decode:
                frame.message = decode_record(buf, pos, limit=pos + frame.size, file=segment)
            yield frame
            pos += frame.size
            continue
        yield frame
        return


def walk_segment(segment: Segment, **kwargs) -> Iterator[Frame]:
    with ReadOnlyMap(segment.path) as m:
        yield from walk_buffer(m.buf, segment.name, segment.base_offset, **kwargs)


def proves_itself(buf, pos: int, size: int, body_length: int, limit: int, base_offset: int) -> bool:
    """The one rule for a message framed at ``pos`` (``frame_at`` accepted it, its body CRC checked) to prove it lies
    on its segment's walk: a non-empty body whose CRC matched is its own proof (so an intact record between two
    damaged ones is found), while a record with an empty body, whose CRC cannot be checked, must be followed by
    another valid frame, a blank, or zeros/the segment end (so a magic-looking run of bytes inside a body is not
    taken for a record)."""
    if body_length > 0:
        return True
    nxt = frame_at(buf, pos + size, limit, base_offset)
    return nxt.kind in ("message", "blank") or nxt.stop_kind == END_OF_DATA


def find_next_frame(buf, start: int, limit: int, base_offset: int, *, confirm: bool = True,
                    before: int | None = None) -> int | None:
    """Resync: the first position >= ``start`` (and < ``before``, if given) where a record plausibly begins,
    or None.

    A candidate has a message (or blank) magic, a PHYSICALOFFSET equal to base + position, valid framing;
    when ``confirm`` a message must also prove itself (:func:`proves_itself`).
    """
    search_end = limit if before is None else min(limit, before + 7)  # a magic at p + 4 for p < before
    pos = start
    while pos < limit:
        hit = _find_any_magic(buf, pos + 4, search_end)
        if hit is None:
            return None
        cand = hit - 4
        if cand >= start:
            found = frame_at(buf, cand, limit, base_offset)
            if found.kind == "blank":
                return cand
            if found.kind == "message" and (
                    not confirm or proves_itself(buf, cand, found.size, _body_length(buf, cand), limit, base_offset)):
                return cand
        pos = hit - 3
    return None


def _body_length(buf, pos: int) -> int:
    """BODYLENGTH of the record at ``pos`` (a message magic is there: frame_at said so)."""
    magic = _I32.unpack_from(buf, pos + L.MAGIC_OFFSET)[0]
    lay = L.layout_for(_I32.unpack_from(buf, pos + L.SYS_FLAG_OFFSET)[0], L.MESSAGE_MAGICS[magic])
    return _I32.unpack_from(buf, pos + lay.offsets["body_length"])[0]


def _find_any_magic(buf, start: int, limit: int) -> int | None:
    """The first position in [start, limit) holding a message or blank magic.  Searched in windows that
    double, so the cost follows the distance to the hit, not to the limit (a magic that never occurs, a V2
    magic in a V1 store, would otherwise cost a scan to the end of the segment on every call)."""
    lo, width = start, 1 << 16
    while lo < limit:
        lo = skip_zeros(buf, lo, limit)  # every magic starts with a non-zero byte
        if lo >= limit:
            return None
        hi = min(limit, lo + width)
        best = None
        for pattern in _MAGIC_BYTES:
            i = buf.find(pattern, lo, min(limit, hi + len(pattern) - 1))  # patterns starting before hi
            if i >= 0 and (best is None or i < best):
                best = i
        if best is not None:
            return best
        lo, width = hi, width * 2
    return None


_ZERO_SCAN = 1 << 22
_ZERO_PIECE = bytes(_ZERO_SCAN)  # a piece of zeros is one memcmp against it (numpy's any took twice the time)


def skip_zeros(buf, pos: int, limit: int) -> int:
    """The first position in [pos, limit) holding a non-zero byte, else ``limit``: holes of a sparse file are
    skipped without reading them (:class:`_FileMap`), zero bytes are compared with zeros a few MiB at a time (a
    preallocated segment's unwritten tail: most of a gigabyte), and where the run found a file's zeros begin they
    are not read again (store_format/fs/zero_tails.py)."""
    if pos >= limit or buf[pos]:
        return pos
    data_from = getattr(buf, "data_from", None)
    data = np.frombuffer(buf, np.uint8) if len(buf) else np.zeros(0, np.uint8)
    view = memoryview(data)
    start = pos
    while pos < limit:
        if data_from is not None:
            pos, extent_end = data_from(pos)
            extent_end = min(extent_end, limit)
        else:
            extent_end = limit
        while pos < extent_end:
            hi = min(extent_end, pos + _ZERO_SCAN)
            if not _ZERO_PIECE.startswith(view[pos:hi]):
                return pos + int(np.argmax(data[pos:hi] != 0))
            pos = hi
        if data_from is None:
            break
    if limit >= len(buf) and data_from is not None:  # zeros to the file's end: the run's later walks stop here
        buf.zeros_to_end_from(start)
    return min(pos, limit)


@dataclass
class SalvageSpan:
    """Bytes between two frames that no walk could frame: reported, never dropped silently.

    A span never holds a segment's unwritten tail: when no frame follows a damaging stop, the span ends where
    the zeros that run to the segment's end begin, ``unwritten_tail`` says how many zero bytes follow it, and
    the salvage walk ends with an ``END_OF_DATA`` stop there (see :func:`salvage_buffer`)."""

    segment: str
    file_position: int
    length: int
    reason: str  # the stop kind that began the span
    excerpt: bytes  # the first bytes, for a hex excerpt
    unwritten_tail: int = 0  # zero bytes from the span's end to the segment's end (0: a frame follows the span)


def salvage_buffer(buf, segment: str, base_offset: int, *, start: int = 0, limit: int | None = None,
                   decode: bool = True, check_crc: bool = True, excerpt_len: int = 32
                   ) -> Iterator[Frame | SalvageSpan]:
    """Every frame anywhere in the segment: walk, and after each damaging stop resync past it.

    Yields frames (with ``stop`` frames marking where the recovery walk would have ended) and
    :class:`SalvageSpan` for each unframeable span.  Zero-filled tails end the salvage: a run of zeros
    to the end of the segment is not damage.  After an ``END_OF_DATA`` stop the walk ends unless a frame
    follows (then the bytes up to it are a span: a hole in written data).  After a damaging stop it resyncs at
    the next frame; when there is none, the span ends where the zeros that run to the segment's end begin
    (a torn last record is followed by the never-written rest of the segment, which is not damage) and the
    walk ends with an ``END_OF_DATA`` stop at that position, whose distance to the segment's end is the
    unwritten tail's length (the span's ``unwritten_tail``).  A span is never empty: the walk's stop at its
    start is non-zero in its first 8 bytes.
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
        span, nxt = _resync_after(buf, last, limit, base_offset, excerpt_len)
        if span is not None:
            yield span
        if nxt is None:
            return
        pos = nxt


def _resync_after(buf, stop: Frame, limit: int, base_offset: int, excerpt_len: int
                  ) -> tuple[SalvageSpan | None, int | None]:
    """Where the salvage walk goes on after a stop: the unframeable span from the stop (None if empty) and
    where the walk goes on (None: the salvage ends).  Zeros that run to the end are the normal tail, not a
    span: after a damaging stop with no frame after it, the span ends where they begin and the walk goes on
    there (it meets the zeros: an ``END_OF_DATA`` stop, and the end)."""
    pos = stop.file_position
    tail = 0
    if stop.stop_kind == END_OF_DATA:
        nxt = find_next_frame(buf, pos, limit, base_offset)
        if nxt is None:
            return None, None
    else:
        nxt = find_next_frame(buf, pos + 1, limit, base_offset)
        if nxt is None:
            zeros = zero_tail_start(buf, pos, limit)
            tail = limit - zeros
            nxt = zeros if tail else None
    end = limit if nxt is None else nxt
    if end <= pos:
        return None, nxt
    return SalvageSpan(stop.segment, pos, end - pos, stop.stop_kind, bytes(buf[pos:min(end, pos + excerpt_len)]),
                       tail), nxt


def zero_tail_start(buf, lo: int, hi: int) -> int:
    """The first position ``t`` in ``[lo, hi]`` from which ``buf[t:hi]`` holds only zeros (``hi`` when the last
    byte is not zero).  Read backwards in chunks that double, so the cost follows the zero run's length."""
    from .fs.hostile import written_in

    end, step = hi, 1 << 16
    while end > lo:
        start = max(lo, end - step)
        kept = written_in(bytes(buf[start:end]))
        if kept:
            return start + kept
        end, step = start, min(2 * step, 1 << 24)
    return lo


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


# ---------------------------------------------------------------------------------------------------------
# Bulk framing: the walks above as arrays, for readers of millions of records

KINDS = ("message", "blank", "stop", "corrupt")  # FrameArrays.kinds are indices into this
KIND_MESSAGE, KIND_BLANK, KIND_STOP, KIND_CORRUPT = range(len(KINDS))
_KIND_CODES = {k: i for i, k in enumerate(KINDS)}


@dataclass
class FrameArrays:
    """A walk's items as arrays: row ``i`` is a message (only its position, size and magic are kept) or, for
    every other row, the full item in ``others``.  Iterating gives the items :func:`walk_buffer` /
    :func:`salvage_buffer` yield with ``decode=False``."""

    segment: str
    base_offset: int  # physical offset of position 0
    positions: np.ndarray  # int64 file positions, increasing
    sizes: np.ndarray  # int64 TOTALSIZE (message, blank), the declared TOTALSIZE (stop), the length (corrupt)
    kinds: np.ndarray  # int8 index into KINDS
    magics: np.ndarray  # int32 MAGICCODE (0 for a span)
    others: dict  # row -> Frame | SalvageSpan (or a reader's own row object): every row that is not a message

    def __len__(self) -> int:
        return len(self.positions)

    def __iter__(self) -> Iterator:
        get = self.others.get
        for i, (pos, size, magic) in enumerate(zip(self.positions.tolist(), self.sizes.tolist(),
                                                   self.magics.tolist())):
            other = get(i)
            yield other if other is not None else Frame("message", self.segment, pos, self.base_offset + pos,
                                                         size, magic)

    @classmethod
    def empty(cls, segment: str, base_offset: int) -> "FrameArrays":
        return cls(segment, base_offset, np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(0, np.int8),
                   np.zeros(0, np.int32), {})

    @classmethod
    def concat(cls, parts: list["FrameArrays"]) -> "FrameArrays":
        """Parts of one segment's walk, in order (all with the same base offset)."""
        others, n = {}, 0
        for p in parts:
            others.update({n + i: it for i, it in p.others.items()})
            n += len(p)
        first = parts[0]
        return cls(first.segment, first.base_offset, *(np.concatenate([getattr(p, f) for p in parts]) for f in
                                                        ("positions", "sizes", "kinds", "magics")), others)

    def take(self, rows) -> "FrameArrays":
        """The rows at ``rows`` (increasing indices, or a boolean mask)."""
        rows = np.flatnonzero(rows) if np.asarray(rows).dtype == bool else np.asarray(rows, np.int64)
        others = {}
        if self.others:
            old = np.fromiter(self.others, np.int64, len(self.others))
            new = np.searchsorted(rows, old)
            hit = new < len(rows)
            hit[hit] = rows[new[hit]] == old[hit]
            others = {int(j): self.others[int(i)] for i, j in zip(old[hit], new[hit])}
        return FrameArrays(self.segment, self.base_offset, self.positions[rows], self.sizes[rows], self.kinds[rows],
                           self.magics[rows], others)

    def slice(self, a: int, b: int) -> "FrameArrays":
        return FrameArrays(self.segment, self.base_offset, self.positions[a:b], self.sizes[a:b], self.kinds[a:b],
                           self.magics[a:b], {i - a: it for i, it in self.others.items() if a <= i < b})

    def moved(self, delta: int) -> "FrameArrays":
        """The same items with file positions ``delta`` further (for a buffer that starts ``delta`` into the
        segment); physical offsets do not change."""
        if not delta:
            return self
        return FrameArrays(self.segment, self.base_offset - delta, self.positions + delta, self.sizes, self.kinds,
                           self.magics, {i: replace(it, file_position=it.file_position + delta)
                                         for i, it in self.others.items()})


    def within(self, segment: str, delta: int) -> "FrameArrays":
        """The same items as items of a segment named ``segment`` that holds this one's bytes from ``delta`` on
        (contiguous segments checked as one, jobs/audit/scan.py): file positions ``delta`` further, every item of
        ``segment``; physical offsets do not change (a span's is its segment's name + its file position)."""
        return FrameArrays(segment, self.base_offset - delta, self.positions + delta, self.sizes, self.kinds,
                           self.magics, {i: replace(it, segment=segment, file_position=it.file_position + delta)
                                         for i, it in self.others.items()})

class _Collector:
    """Builds a FrameArrays from message runs (arrays) and single items."""

    def __init__(self, segment: str, base_offset: int):
        self.segment, self.base_offset = segment, base_offset
        self.chunks: list[tuple] = []
        self.single: list[tuple] = []  # (position, size, kind, magic) not yet in a chunk
        self.others: dict = {}
        self.n = 0

    def run(self, positions, sizes, magics):
        self._flush()
        self.chunks.append((positions, sizes, np.zeros(len(positions), np.int8), magics))
        self.n += len(positions)

    def one(self, kind: int, position: int, size: int, magic: int, item=None):
        if item is not None:
            self.others[self.n] = item
        self.single.append((position, size, kind, magic))
        self.n += 1

    def _flush(self):
        if self.single:
            pos, size, kind, magic = zip(*self.single)
            self.chunks.append((np.array(pos, np.int64), np.array(size, np.int64), np.array(kind, np.int8),
                                np.array(magic, np.int32)))
            self.single = []

    def result(self) -> FrameArrays:
        self._flush()
        if not self.chunks:
            return FrameArrays.empty(self.segment, self.base_offset)
        cols = [np.concatenate(c) if len(self.chunks) > 1 else c[0] for c in zip(*self.chunks)]
        return FrameArrays(self.segment, self.base_offset, cols[0], cols[1], cols[2], cols[3], self.others)


# Layout variant v: bit 0 born host IPv6, bit 1 store host IPv6, bit 2 magic V2 (as the header gives them)
_VARIANTS = [L.record_layout(bool(v & 1), bool(v & 2), 2 if v & 4 else 1) for v in range(8)]
_V_BODY_OFFSET = np.array([lay.body_offset for lay in _VARIANTS], np.int64)
_V_BODY_LENGTH_AT = np.array([lay.offsets["body_length"] for lay in _VARIANTS], np.int64)
_V_TOPIC_WIDTH = np.array([lay.topic_length_width for lay in _VARIANTS], np.int64)
_BODY_CRC_AT = _VARIANTS[0].offsets["body_crc"]  # the same in every variant
_MAGIC_LEAD_BYTES = sorted({(m & 0xFFFFFFFF) >> 24 for m in L.MESSAGE_MAGICS})
# A run is searched for in a window of candidate starts that doubles while runs fill it (few numpy calls per
# record) and starts small after each record the scalar check had to decide (little scanned for nothing).
_WINDOW_MIN, _WINDOW_MAX = 64 << 10, 4 << 20


def _overlapping(data: np.ndarray, dtype: str) -> np.ndarray:
    """Element ``i`` is the ``dtype`` value stored at byte ``i`` (zero copy)."""
    dt = np.dtype(dtype)
    return np.ndarray((max(len(data) - dt.itemsize + 1, 0),), dt, data, 0, (1,))


class _BulkFramer:
    """Runs of consecutive records that :func:`frame_at` would call plain valid messages, found with numpy.

    Candidates are the positions whose MAGICCODE is a message magic (and, when checked, whose PHYSICALOFFSET is
    base + position); a run follows TOTALSIZE from candidate to candidate and ends before the first record whose
    successor is not the next candidate or that fails any of ``frame_at``'s message checks (size bounds, the
    three length fields, calMsgLength, body CRC).  Whatever ends a run is left to ``frame_at``.  Records before
    ``crc_checked_before`` are trusted to pass the CRC check (an earlier walk checked them).

    This is the framer interface of :func:`walk_arrays` / :func:`salvage_arrays` (their ``framer``): this
    constructor, :meth:`run`, :meth:`close`, and the bounds of the window of candidate starts one :meth:`run`
    is given (``window_min``, ``window_max``); another implementation (``decoding.kernels.CompiledFramer``, the same
    runs compiled) must return exactly these runs."""

    @property
    def window_min(self) -> int:
        return _WINDOW_MIN

    @property
    def window_max(self) -> int:
        return _WINDOW_MAX

    def __init__(self, buf, limit: int, base_offset: int, check_crc: bool, check_physical_offset: bool,
                 crc_checked_before: int = 0):
        self.buf, self.limit, self.base = buf, limit, base_offset
        self.check_crc, self.check_phys, self.crc_from = check_crc, check_physical_offset, crc_checked_before
        self.data = np.frombuffer(buf, np.uint8) if len(buf) else np.zeros(0, np.uint8)
        self.i8 = self.data.view(np.int8)
        self.i16, self.i32, self.i64 = (_overlapping(self.data, t) for t in (">i2", ">i4", ">i8"))
        self.mv = memoryview(buf)

    def close(self):
        """Drop the views of ``buf`` (an mmap cannot close while they live)."""
        self.data = self.i8 = self.i16 = self.i32 = self.i64 = None
        self.mv.release()

    def run(self, start: int, hi: int) -> FrameRun:
        """The run from ``start`` (a record boundary) among records starting
        before ``hi`` (at most ``limit - MIN_RECORD_SIZE + 1``); empty when the record at ``start`` is not one."""
        data, i32 = self.data, self.i32
        window = data[start + L.MAGIC_OFFSET:hi + L.MAGIC_OFFSET]
        hits = np.flatnonzero(window == _MAGIC_LEAD_BYTES[0])
        for lead in _MAGIC_LEAD_BYTES[1:]:
            hits = np.union1d(hits, np.flatnonzero(window == lead))
        if not len(hits) or hits[0] != 0:
            return _EMPTY_RUN
        hits += start
        magic = i32[hits + L.MAGIC_OFFSET]
        keep = magic == L.MAGIC_V1
        for m in list(L.MESSAGE_MAGICS)[1:]:
            keep |= magic == m
        if self.check_phys:
            keep &= self.i64[hits + L.PHYSICAL_OFFSET_OFFSET] == hits + self.base
        cand = hits[keep]
        if not len(cand) or cand[0] != start:
            return _EMPTY_RUN
        magic = magic[keep]
        size = i32[cand].astype(np.int64)
        end = cand + size
        link = np.flatnonzero(cand[1:] != end[:-1])  # a candidate that is not where the previous record ends
        k = int(link[0]) + 1 if len(link) else len(cand)
        cand, magic, size, end = cand[:k], magic[:k], size[:k], end[:k]
        sys_flag = i32[cand + L.SYS_FLAG_OFFSET]
        variant = (((sys_flag & L.BORNHOST_V6_FLAG) != 0) | ((sys_flag & L.STOREHOST_V6_FLAG) != 0) << 1
                   | (magic == L.MAGIC_V2) << 2).astype(np.intp)
        body_len = i32[np.minimum(cand + _V_BODY_LENGTH_AT[variant], len(i32) - 1)].astype(np.int64)
        ok = self._framing_ok(cand, variant, body_len, size, end)
        j = k if ok.all() else int(np.argmin(ok))
        if self.check_crc and j and cand[j - 1] >= self.crc_from:
            first = int(np.searchsorted(cand[:j], self.crc_from))
            body_at = cand[first:j] + _V_BODY_OFFSET[variant[first:j]]
            crc_ok = self._crc_ok(body_at, body_len[first:j], i32[cand[first:j] + _BODY_CRC_AT])
            if not crc_ok.all():
                j = first + int(np.argmin(crc_ok))
        return FrameRun(cand[:j], size[:j], magic[:j])

    def _framing_ok(self, cand, variant, body_len, size, end) -> np.ndarray:
        """frame_at's message checks after the magic (and PHYSICALOFFSET), for every candidate at once.

        TOTALSIZE == calMsgLength with three non-negative lengths puts every field inside the record and
        TOTALSIZE above the layout's minimum: that is all frame_at's bounds checks ask of a message."""
        i8, i16 = self.i8, self.i16
        width = _V_TOPIC_WIDTH[variant]
        p = cand + _V_BODY_OFFSET[variant] + np.maximum(body_len, 0)  # the topic length
        topic_len = np.where(width == 2, i16[np.minimum(p, len(i16) - 1)], i8[np.minimum(p, len(i8) - 1)])
        p = np.clip(p + width + topic_len, 0, len(i16) - 1)  # the properties length
        props_len = i16[p].astype(np.int64)
        return ((end <= self.limit) & (body_len >= 0) & (topic_len >= 0) & (props_len >= 0)
                & (_V_BODY_OFFSET[variant] + body_len + width + topic_len + 2 + props_len == size))

    def _crc_ok(self, body_at, body_len, stored) -> np.ndarray:
        """body_crc32 of each body against BODYCRC; an empty body is not checked (as frame_at)."""
        # body_crc32's rule, one zlib call per body with no Python frame in between
        crc = np.fromiter(map(zlib.crc32, map(self.mv.__getitem__, map(slice, body_at.tolist(),
                                                                       (body_at + body_len).tolist()))),
                          np.int64, len(body_at))
        return ((crc & 0x7FFFFFFF) == stored) | (body_len == 0)


_EMPTY_RUN = FrameRun(np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(0, np.int32))


def _walk_into(out: _Collector, framer: _BulkFramer, buf, segment: str, base_offset: int, pos: int, limit: int,
               until: int | None, check_crc: bool, check_physical_offset: bool) -> Frame | None:
    """walk_buffer from ``pos`` into ``out``; returns its closing blank/stop, or None when ``until`` came first."""
    window = framer.window_min
    last_start = limit - L.MIN_RECORD_SIZE + 1  # no message starts later
    while until is None or pos < until:
        hi = min(pos + window, last_start, limit if until is None else until)
        if hi > pos:
            run = framer.run(pos, hi)
            if len(run.positions):
                out.run(run.positions, run.sizes, run.magics)
                pos = int(run.positions[-1] + run.sizes[-1])
                if pos >= hi:  # the run filled its window: go on in bulk
                    window = min(2 * window, framer.window_max)
                    continue
        if until is not None and pos >= until:
            break
        # a record the bulk pass could not prove a plain valid message: the scalar check decides
        found = frame_at(buf, pos, limit, base_offset, check_crc=check_crc,
                         check_physical_offset=check_physical_offset)
        if found.kind == "message":
            out.one(KIND_MESSAGE, pos, found.size, found.magic)
            pos += found.size
            window = framer.window_min
            continue
        frame = found.frame(segment, pos, base_offset)
        out.one(_KIND_CODES[found.kind], pos, found.size, found.magic, frame)
        return frame
    return None


def walk_arrays(buf, segment: str, base_offset: int, *, start: int = 0, limit: int | None = None,
                until: int | None = None, check_crc: bool = True, check_physical_offset: bool = True,
                crc_checked_before: int = 0, framer=None) -> FrameArrays:
    """:func:`walk_buffer` (``decode=False``) as arrays; with ``until``, only the items before that position.

    ``crc_checked_before``: the caller vouches that every message of this walk starting before that position
    passed the body CRC check already (an earlier walk of the same bytes); the bulk pass does not redo it.
    ``framer``: the class that finds runs of plain valid messages (:class:`_BulkFramer`'s interface; None: that
    numpy one); whatever ends a run is decided by ``frame_at`` either way."""
    limit = len(buf) if limit is None else limit
    out, framer = _Collector(segment, base_offset), (framer or _BulkFramer)(
        buf, limit, base_offset, check_crc, check_physical_offset, crc_checked_before)
    try:
        _walk_into(out, framer, buf, segment, base_offset, start, limit, until, check_crc, check_physical_offset)
    finally:
        framer.close()
    return out.result()


def salvage_segment(segment: Segment, buf, *, check_crc: bool = True, excerpt_len: int = 32, framer=None
                    ) -> FrameArrays:
    """:func:`salvage_arrays` of a whole segment's bytes, in its container: a DLedger data file's records are those
    inside its entries (:func:`dledger_items`), every other segment's the plain walk's."""
    if dledger.is_data_file(segment.loc):
        return dledger_items(buf, segment.name, segment.base_offset, check_crc=check_crc, excerpt_len=excerpt_len,
                             framer=framer)
    return salvage_arrays(buf, segment.name, segment.base_offset, check_crc=check_crc, excerpt_len=excerpt_len,
                          framer=framer)


def salvage_arrays(buf, segment: str, base_offset: int, *, start: int = 0, limit: int | None = None,
                   until: int | None = None, check_crc: bool = True, excerpt_len: int = 32,
                   crc_checked_before: int = 0, framer=None) -> FrameArrays:
    """:func:`salvage_buffer` (``decode=False``) as arrays; with ``until``, only the items before that position
    (``crc_checked_before`` and ``framer`` as in :func:`walk_arrays`)."""
    limit = len(buf) if limit is None else limit
    out, framer = _Collector(segment, base_offset), (framer or _BulkFramer)(buf, limit, base_offset, check_crc, True,
                                                                           crc_checked_before)
    try:
        pos = start
        while pos < limit and (until is None or pos < until):
            last = _walk_into(out, framer, buf, segment, base_offset, pos, limit, until, check_crc, True)
            if last is None or last.kind == "blank":
                break
            span, nxt = _resync_after(buf, last, limit, base_offset, excerpt_len)
            if span is not None:
                out.one(KIND_CORRUPT, span.file_position, span.length, 0, span)
            if nxt is None:
                break
            pos = nxt
    finally:
        framer.close()
    return out.result()


# ---- the CommitLog inside DLedger entries (store_format.dledger: the container) ------------------------------

#: what a record's container says of it beyond the record, (column, numpy dtype, meaning): a DLedger entry's index
#: and term (null for a plain CommitLog record); :func:`container_fields` reads them
CONTAINER_FIELDS = (
    ("dledger_index", "int64", "DLedger stores: the index of the DLedger entry that holds the record (its header's "
                               "`index`); null for a plain CommitLog"),
    ("dledger_term", "int64", "DLedger stores: the leader's term when that entry was appended (its header's `term`); "
                              "null for a plain CommitLog"),
)
_INDEX_AT = 8 - dledger.BODY_OFFSET  # the entry header's index field, then its term, relative to the record


def in_container(loc) -> bool:
    """A segment whose records lie inside a container's entries (a DLedger data file), told from its path: walked
    with :func:`container_range_items`, never as plain records."""
    return dledger.is_data_file(loc)


def walk_start(loc, buf, segment: str, base_offset: int) -> FrameArrays:
    """The items of a segment's first bytes (``buf``, from its start) up to the first stop, framed in its container
    without CRC or physical-offset checks: evidence of what its records are like, not of damage."""
    if in_container(loc):
        return dledger_items(buf, segment, base_offset, check_crc=False, salvage=False)
    return walk_arrays(buf, segment, base_offset, check_crc=False, check_physical_offset=False)


def container_fields(loc, buf, record_positions: np.ndarray) -> dict[str, np.ndarray] | None:
    """Each :data:`CONTAINER_FIELDS` of the records at ``record_positions`` of ``buf`` (a data file's bytes from
    its start, as its walk framed them: every record sits right after a confirmed entry header), or None for a
    plain segment."""
    if not in_container(loc):
        return None
    at = np.asarray(record_positions, np.int64) + _INDEX_AT
    raw = np.frombuffer(buf, np.uint8)[at[:, None] + np.arange(16)] if len(at) else np.zeros((0, 16), np.uint8)
    index_term = np.ascontiguousarray(raw).view(">i8").astype(np.int64)
    return {"dledger_index": index_term[:, 0], "dledger_term": index_term[:, 1]}


class EntryWalk(NamedTuple):
    """The walk of a DLedger data file's entry headers (:func:`dledger_entry_walk`), one row per item in order.

    ``kinds``: :data:`ENTRY_RECORD` (an entry whose header passes: its record lies at ``positions``, ``sizes``
    bytes long, framed afterwards), or KIND_BLANK / KIND_STOP / KIND_CORRUPT as the items' own kinds.  A stop's
    ``sizes`` and ``magics`` are the header's size and magic fields and ``codes`` says why it stops (an index
    into :data:`ENTRY_STOPS`); a corrupt span's ``sizes`` is its length and ``tails`` the zero bytes after it
    (its ``unwritten_tail``)."""

    kinds: np.ndarray  # int8
    positions: np.ndarray  # int64, file positions
    sizes: np.ndarray  # int64
    magics: np.ndarray  # int32
    codes: np.ndarray  # int8, for a stop or span: ENTRY_STOPS index
    tails: np.ndarray  # int64, for a span: its unwritten tail

    @classmethod
    def of_rows(cls, rows: list[tuple]) -> "EntryWalk":
        cols = list(zip(*rows)) if rows else [()] * 6
        return cls(*(np.array(c, t) for c, t in zip(cols, (np.int8, np.int64, np.int64, np.int32, np.int8,
                                                           np.int64))))


ENTRY_RECORD = KIND_MESSAGE  # an EntryWalk row whose record is framed afterwards (a message or a record's stop)
#: why an entry header stops the walk: (ErrorKind value or END_OF_DATA, field); EntryWalk.codes index this, and
#: the compiled walk (decoding.compiled.dledger_walk) returns the same indices
ENTRY_STOPS = (
    (END_OF_DATA, None),  # 0: magic and size 0 where the next entry would start
    (ErrorKind.BAD_LENGTH.value, "store_size"),  # 1: a blank whose size is not the rest of the file
    (ErrorKind.BAD_MAGIC.value, "magic"),  # 2: magic neither 1 nor -1
    (ErrorKind.BAD_LENGTH.value, "store_size"),  # 3: size <= 44, or no whole header fits
    (ErrorKind.TRUNCATED.value, "store_size"),  # 4: the entry runs past the file
    (ErrorKind.SIZE_MISMATCH.value, "store_size"),  # 5: size != 48 + bodySize
    (ErrorKind.PHYSICAL_OFFSET_MISMATCH.value, "physical_offset"),  # 6: the pos field is not where it lies
    (ErrorKind.TRUNCATED.value, "store_size"),  # 7: fewer than 8 bytes left, not all zero
    (END_OF_DATA, None),  # 8: the zeros after a span that reaches the unwritten tail
)


def _entry_stop_message(buf, pos: int, limit: int, base_offset: int, code: int) -> str:
    """What is wrong at ``pos`` (the header's stop ``code``), read back from its bytes."""
    if code in (0, 8):
        return "zeros where the next entry would start (unwritten tail)"
    if code == 7:
        return f"{limit - pos} stray bytes at the end"
    magic, size = dledger.INT_PAIR.unpack_from(buf, pos)
    if code == 1:
        return f"DLedger blank of {size} bytes, {limit - pos} left"
    if code == 2:
        return f"DLedger entry magic {magic}, not {dledger.MAGIC}"
    if code == 3:
        return f"DLedger entry size {size}"
    if code == 4:
        return f"DLedger entry of {size} bytes runs past the file"
    _, _, _, _, pos_field, _, _, _, body_size = dledger.ENTRY_HEADER.unpack_from(buf, pos)
    if code == 5:
        return f"DLedger size {size} != 48 + bodySize {body_size}"
    return f"DLedger pos field {pos_field} != {base_offset + pos}"


def dledger_entry_walk(buf, start: int, limit: int, until: int | None, base_offset: int, salvage: bool
                       ) -> EntryWalk:
    """The entry headers of a DLedger data file from ``start`` (a header) to ``limit``, items before ``until``
    only (None: to the end): each entry whose header passes DLedger's own checks frames its record (damaged or
    not, the walk goes on at the next entry); the file's blank ends the walk; a header that fails is a stop there,
    after which the salvage walk goes on at the next confirmed header (the bytes between a span) and the plain
    walk ends.  This is the scalar walk; a framer may give the same rows compiled (its ``entry_walk``,
    decoding.kernels.CompiledFramer)."""
    rows: list[tuple] = []  # (kind, position, size, magic, code, tail)
    pos = start
    while pos < limit and (until is None or pos < until):
        if limit - pos < dledger.MIN_BLANK_LEN:
            if any(buf[pos:limit]):
                rows.append((KIND_STOP, pos, 0, 0, 7, 0))
            break
        magic, size = dledger.INT_PAIR.unpack_from(buf, pos)
        if magic == dledger.BLANK_MAGIC and size == limit - pos:
            rows.append((KIND_BLANK, pos, size, magic, 0, 0))
            break
        code = -1
        if magic == 0 and size == 0:
            code = 0
        elif magic == dledger.BLANK_MAGIC:
            code = 1
        elif magic != dledger.MAGIC:
            code = 2
        elif size <= dledger.HEADER_SIZE or pos + dledger.BODY_OFFSET > limit:
            code = 3
        elif pos + size > limit:
            code = 4
        else:
            _, _, _, _, pos_field, _, _, _, body_size = dledger.ENTRY_HEADER.unpack_from(buf, pos)
            if body_size + dledger.BODY_OFFSET != size:
                code = 5
            elif pos_field != base_offset + pos:
                code = 6
        if code < 0:
            rows.append((ENTRY_RECORD, pos + dledger.BODY_OFFSET, size - dledger.BODY_OFFSET, 0, 0, 0))
            pos += size  # the entry frames its record, damaged or not: the walk goes on at the next entry
            continue
        rows.append((KIND_STOP, pos, size, magic, code, 0))
        if not salvage:
            break
        nxt = dledger.next_header(buf, pos + 1, limit, base_offset)
        tail = 0
        if nxt is None:
            zeros = zero_tail_start(buf, pos, limit)
            if code == 0 or zeros <= pos:
                break
            tail, end = limit - zeros, zeros
        else:
            end = nxt
        if end > pos:
            rows.append((KIND_CORRUPT, pos, end - pos, 0, code, tail))
        if nxt is None:
            if tail:
                rows.append((KIND_STOP, end, 0, 0, 8, 0))
            break
        pos = nxt
    return EntryWalk.of_rows(rows)


def dledger_header_run(framer=None):
    """A ``header_run`` for store_format.dledger.DLedgerLog: ``(buf, base offset, start)`` -> the positions of the
    entries from ``start`` whose headers pass, to the first that does not (:func:`dledger_entry_walk`, no salvage),
    walked by ``framer``'s compiled ``entry_walk`` (decoding.kernels.CompiledFramer) or, without one, the scalar
    walk."""
    def run(buf, base_offset: int, start: int) -> np.ndarray:
        if framer is None:
            walk = dledger_entry_walk(buf, start, len(buf), None, base_offset, False)
        else:
            f = framer(buf, len(buf), base_offset, False, True)
            try:
                walk = f.entry_walk(start, None, False)
            finally:
                f.close()
        return walk.positions[walk.kinds == ENTRY_RECORD] - dledger.BODY_OFFSET
    return run


def dledger_items(buf, segment: str, base_offset: int, *, start: int = 0, limit: int | None = None,
                  until: int | None = None, check_crc: bool = True, salvage: bool = True, excerpt_len: int = 32,
                  framer=None):
    """A DLedger data file's CommitLog items as :func:`store_format.commitlog.salvage_arrays` gives a segment's
    (``salvage``; else :func:`~store_format.commitlog.walk_arrays`: up to the first stop): each entry's record
    framed where it lies, at file position entry + 48, so every physical offset is RocketMQ's; the file's blank
    and the end of the written part at the entry position.  An entry whose header fails DLedger's own checks is a
    stop there (BAD_MAGIC, BAD_LENGTH, TRUNCATED, PHYSICAL_OFFSET_MISMATCH of the pos field); the salvage walk
    goes on at the next confirmed header, the bytes between a span.  A record that fails the CommitLog checks (or
    does not fill its entry) is a stop at the record; the salvage walk goes on at the next entry.  ``start``:
    the walk starts at the first confirmed header at or after it (0: at 0, confirmed or not); ``until``: items
    before it only.  ``framer`` (:class:`_BulkFramer`'s interface, e.g. decoding.kernels.CompiledFramer): the records
    are framed by its ``each`` in one call, the scalar ``frame_at`` deciding only those it does not accept whole;
    a framer with an ``entry_walk`` (the compiled :func:`dledger_entry_walk`) walks the headers too.

    The entry headers are walked first (a record's outcome never moves the walk: the next entry follows the
    entry), the records framed after, and the items given in order, up to the first stop without ``salvage``."""
    limit = len(buf) if limit is None else limit
    f = framer(buf, limit, base_offset, check_crc, True) if framer is not None else None
    try:
        if f is not None and hasattr(f, "entry_walk"):
            walk = f.entry_walk(start, until, salvage)
        else:
            walk = dledger_entry_walk(buf, start, limit, until, base_offset, salvage)
        records = np.flatnonzero(walk.kinds == ENTRY_RECORD)
        r_at, r_size = walk.positions[records], walk.sizes[records]
        if f is not None and len(records):
            framed, _ = f.each(r_at)
        else:
            framed = np.full(len(records), -1, np.int64)
    finally:
        if f is not None:
            f.close()
    whole = (framed == r_size) & (r_size > 0)  # a plain valid message that fills its entry (0: none)
    positions, sizes = walk.positions.copy(), walk.sizes.copy()
    kinds, magics = walk.kinds.copy(), walk.magics.copy()
    if whole.any():
        ok = records[whole]
        data = np.frombuffer(buf, np.uint8)
        magics[ok] = np.ascontiguousarray(data[positions[ok, None] + np.arange(4, 8)]).view(">i4").ravel()
    others: dict = {}
    first_stop = len(kinds)
    for i in records[~whole].tolist():  # frame_at decides each record the framer did not accept whole
        at, size = int(positions[i]), int(sizes[i])
        found = frame_at(buf, at, at + size, base_offset, check_crc=check_crc)
        if found.kind == "message" and found.size == size:
            magics[i] = found.magic
            continue
        if found.kind == "message":
            why = (ErrorKind.SIZE_MISMATCH.value, "store_size",
                   f"TOTALSIZE {found.size} != the DLedger entry's bodySize {size}")
        else:
            why = (found.stop_kind or ErrorKind.BAD_MAGIC.value, found.stop_field, found.stop_message or "")
        kinds[i], sizes[i], magics[i] = KIND_STOP, found.size, found.magic
        others[i] = Frame("stop", segment, at, base_offset + at, found.size, found.magic, *why)
        if not salvage:
            first_stop = i + 1
            break
    for i in np.flatnonzero(walk.kinds != ENTRY_RECORD).tolist():
        at, size, magic, code = (int(walk.positions[i]), int(walk.sizes[i]), int(walk.magics[i]),
                                 int(walk.codes[i]))
        if walk.kinds[i] == KIND_BLANK:
            others[i] = Frame("blank", segment, at, base_offset + at, size, magic)
        elif walk.kinds[i] == KIND_STOP:
            others[i] = Frame("stop", segment, at, base_offset + at, size, magic, *ENTRY_STOPS[code],
                              _entry_stop_message(buf, at, limit, base_offset, code))
        else:
            others[i] = SalvageSpan(segment, at, size, ENTRY_STOPS[code][0],
                                    bytes(buf[at:min(at + size, at + excerpt_len)]), int(walk.tails[i]))
    if first_stop < len(kinds):
        others = {i: v for i, v in others.items() if i < first_stop}
    return FrameArrays(segment, base_offset, positions[:first_stop], sizes[:first_stop], kinds[:first_stop],
                       magics[:first_stop], others)


def dledger_frames(buf, segment: str, base_offset: int, *, decode: bool = True, check_crc: bool = True,
                   salvage: bool = False):
    """:func:`dledger_items` as the frames (and spans) ``walk_buffer`` / ``salvage_buffer`` yield, messages decoded
    when ``decode``; without ``salvage``, up to the first blank or stop."""
    for item in dledger_items(buf, segment, base_offset, check_crc=check_crc, salvage=salvage):
        if decode and getattr(item, "kind", None) == "message":
            item.message = decode_record(buf, item.file_position, limit=item.file_position + item.size, file=segment)
        yield item


def container_range_items(buf, segment: str, base_offset: int, start: int, end: int, last: bool, *,
                          check_crc: bool = True, excerpt_len: int = 32, framer=None):
    """The salvage items owned by the range [start, end) of a DLedger data file: from the first confirmed header at or
    after ``start`` (0: the file's start) to the first at or after ``end`` (the next range's start).  Returns
    (items, first, until) as store_format.scan.RangeWalk takes them."""
    limit = len(buf)
    first = 0 if start == 0 else dledger.next_header(buf, start, limit, base_offset, before=end)
    if first is None:
        return FrameArrays.empty(segment, base_offset), None, None
    until = None if last else dledger.next_header(buf, end, limit, base_offset)
    items = dledger_items(buf, segment, base_offset, start=first, limit=limit, until=until, check_crc=check_crc,
                          excerpt_len=excerpt_len, framer=framer)
    return items, first, until
