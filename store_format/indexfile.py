"""IndexFile: ``index/<yyyyMMddHHmmssSSS>`` (``IndexFile``, ``IndexHeader``, ``IndexService``).

Layout::

    header 40 B: beginTimestamp q | endTimestamp q | beginPhyOffset q | endPhyOffset q |
                 hashSlotCount i | indexCount i (starts at 1)
    slots  hashSlotNum x int: index number of the newest entry with that hash (0 = empty)
    entries indexNum x 20 B: keyHash i | phyOffset q | timeDiff i (seconds from beginTimestamp) | prevIndex i

Entry 0 is never used.  Keys are ``topic#key``; lookups compare hashes only, so results are candidates.

``maxHashSlotNum`` and ``maxIndexNum`` are two independent broker settings and the file records neither:
:func:`infer_geometry` finds the one pair the file's length and content allow (the rule is in its docstring),
and says why not, with the pairs the length admits, when the content cannot decide (an empty file).
"""
from __future__ import annotations

import os
import re
import struct
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from . import layout as L
from .fs import ReadOnlyMap, data_end
from .fs.hostile import last_nonzero
from .errors import ErrorKind, IndexFileError
from .javahash import index_key, index_key_hash

_HEADER = struct.Struct(L.INDEX_HEADER_STRUCT)
_ENTRY = struct.Struct(L.INDEX_ENTRY_STRUCT)
_SLOT = struct.Struct(L.INDEX_SLOT.struct)
_AT_INDEX_COUNT = L.INDEX_HEADER.offset("index_count")  # where a bad indexCount is reported
INDEX_NAME = re.compile(r"[0-9]{17}")  # fullmatch: ASCII digits only, no trailing newline


@dataclass(frozen=True)
class IndexHeader:
    begin_timestamp: int
    end_timestamp: int
    begin_phy_offset: int
    end_phy_offset: int
    hash_slot_count: int
    index_count: int


@dataclass(frozen=True)
class IndexEntry:
    index: int
    key_hash: int
    physical_offset: int
    time_diff: int
    prev_index: int


class IndexFile:
    """A read-only index file.  Its geometry (slot and entry counts) is read from the file itself
    (:func:`infer_geometry`), or given (``hash_slot_num``/``index_num``: from flags or broker.conf), in which case
    it must fit the file's length and not contradict what its content says.  ``verify=False`` skips the content
    check of a given geometry (for callers that checked it on an earlier open)."""

    def __init__(self, path: str | os.PathLike, hash_slot_num: int | None = None, index_num: int | None = None,
                 *, verify: bool = True):
        from .fs import UnreadableError, as_path

        self.path = as_path(path)
        try:
            self._map = ReadOnlyMap(self.path)
        except UnreadableError as e:  # no permission, not a regular file: an index file that cannot be opened
            raise IndexFileError(ErrorKind.UNREADABLE, e.reason, file=str(self.path)) from None
        try:
            self._check_geometry(hash_slot_num, index_num, verify)
        except IndexFileError:
            self._map.close()  # a refused file leaves no open mapping behind
            raise

    def _check_geometry(self, hash_slot_num: int | None, index_num: int | None, verify: bool):
        buf = self._map.buf
        try:
            self.header = read_header(buf)
            if verify or hash_slot_num is None or index_num is None:
                geometry = infer_geometry(buf, hash_slot_num, index_num,
                                          zero_from=lambda: data_end(self._map.fileno(), len(buf)))
            else:
                geometry = given_geometry(len(buf), hash_slot_num, index_num)
        except IndexFileError as e:
            raise IndexFileError(e.kind, f"index file of {len(buf)} bytes: {e.message}", file=str(self.path),
                                 position=e.position, field=e.field) from None
        self.hash_slot_num, self.index_num = geometry

    @property
    def name(self) -> str:
        return self.path.name

    def close(self):
        self._map.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def slot(self, slot_pos: int) -> int:
        return _SLOT.unpack_from(self._map.buf, L.INDEX_HEADER_SIZE + slot_pos * L.INDEX_SLOT_SIZE)[0]

    def entry(self, index: int) -> IndexEntry:
        if not 0 <= index < self.index_num:
            raise IndexFileError(ErrorKind.OUT_OF_RANGE, f"entry {index} outside [0, {self.index_num})",
                                 file=str(self.path), field="index")
        pos = L.INDEX_HEADER_SIZE + self.hash_slot_num * L.INDEX_SLOT_SIZE + index * L.INDEX_ENTRY_SIZE
        return IndexEntry(index, *_ENTRY.unpack_from(self._map.buf, pos))

    def entries(self):
        """Entries 1 .. indexCount-1 (bounded by the file's capacity)."""
        last = min(max(self.header.index_count, 1), self.index_num)
        for i in range(1, last):
            yield self.entry(i)

    def slots(self):
        """(slot position, head index) for every non-empty slot."""
        buf = self._map.buf
        for s in range(self.hash_slot_num):
            v = _SLOT.unpack_from(buf, L.INDEX_HEADER_SIZE + s * L.INDEX_SLOT_SIZE)[0]
            if v:
                yield s, v

    def is_time_matched(self, begin: int, end: int) -> bool:
        """IndexFile.isTimeMatched."""
        fb, fe = self.header.begin_timestamp, self.header.end_timestamp
        return (begin < fb and end > fe) or fb <= begin <= fe or fb <= end <= fe

    def select_phy_offsets(self, key: str, begin: int = 0, end: int = 2**63 - 1, max_num: int | None = None,
                           with_chain: bool = False):
        """``IndexFile.selectPhyOffset`` for the full key string (``topic#key``): candidate offsets, newest
        first.  The walk is bounded by indexCount, so a corrupt or cyclic chain always ends.  With
        ``with_chain`` returns (offsets, visited entries, stop reason)."""
        key_hash = index_key_hash(key)
        slot_pos = key_hash % self.hash_slot_num
        count = self.header.index_count
        out, visited, reason = [], [], "empty slot"
        slot_value = self.slot(slot_pos)
        if slot_value <= 0 or slot_value > count or count <= 1:
            return (out, visited, reason) if with_chain else out
        current = slot_value
        reason = "chain end"
        seen = set()
        for _ in range(min(count, self.index_num)):
            if current >= self.index_num:
                reason = "index beyond file"
                break
            e = self.entry(current)
            visited.append(e)
            seen.add(current)
            if e.time_diff < 0:
                reason = "negative timeDiff"
                break
            time_read = self.header.begin_timestamp + e.time_diff * 1000
            if e.key_hash == key_hash and begin <= time_read <= end:
                out.append(e.physical_offset)
                if max_num is not None and len(out) >= max_num:
                    reason = "max results"
                    break
            prev = e.prev_index
            if prev <= 0 or prev > count or prev == current or time_read < begin:
                reason = "chain end" if prev <= 0 else ("time before range" if time_read < begin else "bad prev index")
                break
            if prev in seen:
                reason = "cycle"
                break
            current = prev
        else:
            reason = "walk bound (indexCount) reached"
        return (out, visited, reason) if with_chain else out

    def lookup(self, topic: str, key: str, begin: int = 0, end: int = 2**63 - 1, max_num: int | None = None):
        return self.select_phy_offsets(index_key(topic, key), begin, end, max_num)


# ---------------------------------------------------------------------------------------------------------
# Geometry: which (slots, entries) pair a file has

#: bytes of entries per byte of slots: a file one entry longer has five slots fewer for the same length
_RATIO = L.INDEX_ENTRY_SIZE // L.INDEX_SLOT_SIZE
#: probe the unwritten tail at the entries' stride only when a stride skips at least this many bytes
_PROBE_STRIDE_BYTES = 1 << 16
_PROBES_PER_STEP = 1 << 14


def read_header(buf) -> IndexHeader:
    if len(buf) < L.INDEX_HEADER_SIZE:
        raise IndexFileError(ErrorKind.TRUNCATED, f"the header needs {L.INDEX_HEADER_SIZE} bytes", position=len(buf))
    return IndexHeader(*_HEADER.unpack_from(buf, 0))


@dataclass(frozen=True)
class LengthCandidates:
    """The (slots, entries) pairs a file length admits, ``40 + 4*slots + 20*entries == length`` with both at least
    1: ``slots = q - 5*entries`` for ``entries`` in ``lo..hi``, where ``q = (length - 40) / 4``."""

    length: int
    q: int
    lo: int
    hi: int

    def __len__(self) -> int:
        return max(0, self.hi - self.lo + 1)

    def slots(self, entries: int) -> int:
        return self.q - _RATIO * entries

    def describe(self, shown: int = 6) -> str:
        if not len(self):
            return (f"no (slots, entries) pair fits {self.length} bytes (40 + 4 x slots + 20 x entries, both at "
                    "least 1)")
        ns = list(range(self.lo, self.hi + 1)) if len(self) <= shown else \
            list(range(self.lo, self.lo + shown // 2)) + [None] + list(range(self.hi - shown // 2 + 1, self.hi + 1))
        listed = ", ".join("..." if n is None else f"{self.slots(n)} x {n}" for n in ns)
        text = f"{len(self)} (slots x entries) pair(s) fit {self.length} bytes: {listed}"
        if self.q % (1 + 4 * _RATIO) == 0:  # RocketMQ's default ratio, maxIndexNum = 4 x maxHashSlotNum
            s = self.q // (1 + 4 * _RATIO)
            text += f" (RocketMQ's 1:4 ratio would be {s} x {4 * s})"
        return text


def length_candidates(length: int) -> LengthCandidates:
    body = length - L.INDEX_HEADER_SIZE
    if body <= 0 or body % L.INDEX_SLOT_SIZE:
        return LengthCandidates(length, 0, 1, 0)
    q = body // L.INDEX_SLOT_SIZE
    return LengthCandidates(length, q, 1, (q - 1) // _RATIO)


def given_geometry(length: int, hash_slot_num: int | None, index_num: int | None) -> tuple[int, int]:
    """A given geometry (either part may be None: the length gives it) checked against the file's length."""
    cands = length_candidates(length)
    for name, v in (("slots", hash_slot_num), ("entries", index_num)):
        if v is not None and v < 1:
            raise IndexFileError(ErrorKind.BAD_GEOMETRY, f"{v} {name} given: must be positive; {cands.describe()}",
                                 position=length)
    s, n = hash_slot_num, index_num
    if s is not None and n is None:
        n = _other_part(length, s, L.INDEX_SLOT_SIZE, "slots", L.INDEX_ENTRY_SIZE, "entries", cands)
    elif n is not None and s is None:
        s = _other_part(length, n, L.INDEX_ENTRY_SIZE, "entries", L.INDEX_SLOT_SIZE, "slots", cands)
    expected = L.index_file_size(s, n)
    if expected != length:
        kind = ErrorKind.TRUNCATED if length < expected else ErrorKind.BAD_GEOMETRY
        raise IndexFileError(kind, f"{s} slots x {n} entries given make a file of {expected} bytes; "
                             f"{cands.describe()}", position=min(length, expected))
    return s, n


def _other_part(length: int, given: int, size: int, name: str, other_size: int, other: str,
                cands: LengthCandidates) -> int:
    """How many of the other part the length leaves beside ``given`` items of ``size`` bytes."""
    rest = length - L.INDEX_HEADER_SIZE - given * size
    if rest < other_size or rest % other_size:
        raise IndexFileError(ErrorKind.BAD_GEOMETRY, f"{given} {name} given leave {rest} bytes for the {other}, not "
                             f"a positive multiple of {other_size}; {cands.describe()}", position=length)
    return rest // other_size


def infer_geometry(buf, hash_slot_num: int | None = None, index_num: int | None = None, *,
                   zero_from=None) -> tuple[int, int]:
    """The (slots, entries) of an index file from its bytes ``buf``: the given geometry checked against the file,
    or the one pair its length and content allow.  Raises a positioned IndexFileError saying why (with the pairs
    the length admits) when the content cannot decide, and when a given geometry contradicts the file.

    The rule (the facts RocketMQ 4.9.7's ``IndexFile.putKey`` leaves in every file):

    1. ``40 + 4*slots + 20*entries == length``, ``slots >= max(1, hashSlotCount)``, ``entries >= indexCount``
       (``isWriteFull`` is ``indexCount >= indexNum``).
    2. ``indexCount <= 1``: no entry is written, nothing tells the pairs apart: decided only when the length admits
       a single pair.
    3. Entries ``indexCount..entries-1`` are unwritten, zeros: entry ``indexCount-1``, the last written, is the
       last 20-byte block aligned to the end of the file that holds a non-zero byte.  Found by probing the tail
       at a stride of ``indexCount-1`` blocks (the written entries are that many non-zero blocks in a row, so a
       probe lands in them) and reading the stride before the first non-zero probe; bytes past the file's last
       data extent (a hole, ``SEEK_DATA``) are zeros without reading them.  This gives the one candidate:
       ``entries = indexCount + k - 1`` for the k-th block from the end.
    4. That candidate must show: entry 0 all zeros (never written); the last entry's keyHash non-negative, its
       slot (``keyHash % slots``) holding its index (the newest entry heads its slot's chain), its prevIndex in
       ``0..indexCount-2`` (links only point backwards) naming, when not 0, an entry of the same slot; and the
       header's beginPhyOffset equal to entry 1's offset or its endPhyOffset equal to the last entry's (4.9.7
       sets them from the first and the last put).

    A given geometry (``hash_slot_num`` and/or ``index_num``; a missing part comes from the length) must fit the
    length exactly and is refused when the content decides another pair; it is used as given when the content
    cannot decide (an empty file) or is too damaged to.  Reads the header, the probes and a handful of entries
    and slots.  ``zero_from``: the offset from which the file is known to be zeros, or a callable giving it.
    """
    length = len(buf)
    header = read_header(buf)
    cands = length_candidates(length)
    given = None
    if hash_slot_num is not None or index_num is not None:
        given = given_geometry(length, hash_slot_num, index_num)
    decided, why, where = _decide(buf, header, cands, zero_from)
    if given is not None:
        if decided is not None and decided != given:
            raise IndexFileError(ErrorKind.BAD_GEOMETRY, f"{given[0]} slots x {given[1]} entries given, but the "
                                 f"file's content says {decided[0]} x {decided[1]}; {cands.describe()}",
                                 position=length)
        return given
    if decided is None:
        raise IndexFileError(ErrorKind.BAD_GEOMETRY, f"cannot tell its slots from its entries: {why}; "
                             f"{cands.describe()}; pass --hash-slots/--index-num or --config broker.conf "
                             "(maxHashSlotNum, maxIndexNum)", position=where)
    return decided


def _decide(buf, h: IndexHeader, cands: LengthCandidates, zero_from) -> tuple[tuple[int, int] | None, str, int]:
    """(the one consistent pair, or None with why not and where in the file)."""
    length, c, used = len(buf), h.index_count, h.hash_slot_count
    if not len(cands):
        return None, "the length does not fit the layout", length
    if c <= 1:
        if len(cands) == 1:
            return (cands.slots(cands.lo), cands.lo), "", 0
        return None, f"indexCount {c}: no entry is written", _AT_INDEX_COUNT
    if used < 0:
        return None, f"hashSlotCount {used} is negative", L.INDEX_HEADER.offset("hash_slot_count")
    hi = min(cands.hi, (cands.q - max(1, used)) // _RATIO)
    if hi < c:
        return None, f"no pair has entries >= indexCount {c} and slots >= hashSlotCount {used}", _AT_INDEX_COUNT
    blocks = hi - c + 1  # the last entry is the k-th 20-byte block from the end, k in 1..blocks
    if callable(zero_from):
        zero_from = zero_from()
    k = _last_nonzero_block(buf, blocks, c - 1, length if zero_from is None else zero_from)
    if k is None:
        return None, (f"indexCount {c}, but the last {blocks * L.INDEX_ENTRY_SIZE} bytes, where every pair puts "
                      f"entry {c - 1}, are zeros"), length - blocks * L.INDEX_ENTRY_SIZE
    n = c + k - 1
    s = cands.slots(n)
    reason, where = _layout_problem(buf, h, s, n)
    if reason:
        return None, (f"the one pair whose unwritten entries are zeros, {s} x {n}, does not hold: {reason}"), where
    return (s, n), "", 0


def _last_nonzero_block(buf, blocks: int, stride: int, zero_from: int) -> int | None:
    """The smallest k in 1..``blocks`` whose block, the 20 bytes ending ``20*(k-1)`` bytes before the end of
    ``buf``, holds a non-zero byte (bytes from ``zero_from`` on are known zeros); None when all are zeros."""
    length = len(buf)
    first = max(1, (length - max(zero_from, 0)) // L.INDEX_ENTRY_SIZE + 1)  # blocks before it lie in the hole
    if first > blocks:
        return None
    arr = np.frombuffer(buf, np.uint8)
    try:
        if stride * L.INDEX_ENTRY_SIZE < _PROBE_STRIDE_BYTES:
            return _first_nonzero(arr, length, first, blocks)
        # probes every ``stride`` blocks from ``first``, and at ``blocks``: a run of ``stride`` non-zero blocks
        # starting at or before ``blocks`` holds a probe (the grid's, or ``blocks`` when the grid's lies past it)
        width = np.arange(L.INDEX_ENTRY_SIZE)
        for start in range(first, blocks + 1, stride * _PROBES_PER_STEP):
            ks = np.arange(start, min(blocks, start + stride * _PROBES_PER_STEP - 1) + 1, stride)
            if ks[-1] + stride > blocks:
                ks = np.append(ks, blocks)
            rows = arr[(length - L.INDEX_ENTRY_SIZE * ks)[:, None] + width]
            hit = np.flatnonzero(rows.any(axis=1))
            if hit.size:
                probe = int(ks[hit[0]])
                return _first_nonzero(arr, length, max(first, probe - stride + 1), probe)
        return None
    finally:
        del arr  # no view may outlive the caller's map


def _first_nonzero(arr, length: int, k_lo: int, k_hi: int) -> int | None:
    """The smallest k in k_lo..k_hi whose block holds a non-zero byte: the last such byte, searched back a block
    at a time (fs.hostile.last_nonzero: the written entries end a few bytes before the data, and the indexes of a
    whole chunk of them cost ~3 ms a file)."""
    lo, top = length - L.INDEX_ENTRY_SIZE * k_hi, length - L.INDEX_ENTRY_SIZE * (k_lo - 1)
    end = last_nonzero([(lo, top)], lambda start, stop: arr[start:stop])[0]
    return (length - end + L.INDEX_ENTRY_SIZE) // L.INDEX_ENTRY_SIZE if end else None


def _layout_problem(buf, h: IndexHeader, s: int, n: int) -> tuple[str | None, int]:
    """What of rule 4 (:func:`infer_geometry`) the layout (s, n) breaks, and where; (None, 0) when nothing."""
    c = h.index_count
    base = L.INDEX_HEADER_SIZE + s * L.INDEX_SLOT_SIZE

    def entry(i: int) -> tuple[int, int, int, int]:
        return _ENTRY.unpack_from(buf, base + i * L.INDEX_ENTRY_SIZE)

    if any(buf[base:base + L.INDEX_ENTRY_SIZE]):
        return "entry 0 (never written) is not zeros", base
    last_at = base + (c - 1) * L.INDEX_ENTRY_SIZE
    key_hash, phy, _, prev = entry(c - 1)
    if key_hash < 0:
        return f"the last entry ({c - 1}) has a negative keyHash {key_hash}", last_at
    slot = key_hash % s
    head = _SLOT.unpack_from(buf, L.INDEX_HEADER_SIZE + slot * L.INDEX_SLOT_SIZE)[0]
    if head != c - 1:
        return (f"the last entry ({c - 1}) does not head its slot's chain: slot {slot} holds {head}",
                L.INDEX_HEADER_SIZE + slot * L.INDEX_SLOT_SIZE)
    if not 0 <= prev < c - 1:
        return (f"the last entry's prevIndex {prev} does not point back into 0..{c - 2}",
                last_at + L.INDEX_ENTRY.offset("prev_index"))
    if prev > 0:
        prev_hash = entry(prev)[0]
        if prev_hash < 0 or prev_hash % s != slot:
            return (f"the last entry's prevIndex {prev} names an entry of another slot (keyHash {prev_hash})",
                    base + prev * L.INDEX_ENTRY_SIZE)
    first_phy = entry(1)[1]
    if first_phy != h.begin_phy_offset and phy != h.end_phy_offset:
        return (f"neither beginPhyOffset {h.begin_phy_offset} is entry 1's offset {first_phy} nor endPhyOffset "
                f"{h.end_phy_offset} the last entry's {phy}", 16)
    return None, 0


# ---------------------------------------------------------------------------------------------------------
# Entries in bulk (numpy over a read-only map)

# the chain problems an entry can have, in the order they are listed
CHAIN_PROBLEMS = ("prev_out_of_range", "prev_not_older", "prev_other_slot", "negative_time_diff", "unreachable")


class EntryViews:
    """An index file's slots and entries as big-endian numpy views of its map (nothing copied until read):
    ``key_hash``, ``physical_offset``, ``time_diff``, ``prev_index`` indexed by entry number (0 .. count-1)."""

    def __init__(self, buf, hash_slot_num: int, count: int):
        self.hash_slot_num, self.count = hash_slot_num, count
        self.raw = np.frombuffer(buf, np.uint8)
        self.slots = np.frombuffer(buf, L.INDEX_SLOT.numpy_type("index"), hash_slot_num, L.INDEX_HEADER_SIZE)
        e = np.frombuffer(buf, L.INDEX_ENTRY.dtype(), count, L.INDEX_HEADER_SIZE + hash_slot_num * L.INDEX_SLOT_SIZE)
        self.key_hash, self.physical_offset = e["key_hash"], e["physical_offset"]
        self.time_diff, self.prev_index = e["time_diff"], e["prev_index"]

    def chunk(self, start: int, end: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """Native copies of entries start..end-1: key hash, physical offset, time diff, prev index."""
        return (self.key_hash[start:end].astype(np.int32), self.physical_offset[start:end].astype(np.int64),
                self.time_diff[start:end].astype(np.int32), self.prev_index[start:end].astype(np.int32))

    def slot_of(self, key_hash: np.ndarray) -> np.ndarray:
        return np.where(key_hash >= 0, key_hash % np.int32(self.hash_slot_num), -1)


def written_entries(m: ReadOnlyMap, hash_slot_num: int, count: int) -> int:
    """Of the ``count`` entries a header counts, those up to the last one holding a non-zero byte (at least 1:
    entry 0 is never written).  Entries past it are zeros no put ever wrote: a counter beyond them is one wrong
    header, not that many broken entries."""
    at = L.INDEX_HEADER_SIZE + hash_slot_num * L.INDEX_SLOT_SIZE
    end = m.written_length(at + count * L.INDEX_ENTRY_SIZE)
    return max(1, min(count, -(-(end - at) // L.INDEX_ENTRY_SIZE)))


def read_entry_bytes(loc, hash_slot_num: int, first: int, end: int) -> bytes:
    """The bytes of entries ``first`` .. ``end - 1`` of an index file (of ``hash_slot_num`` slots), as far as the
    file holds them: read from a read-only map, or one ranged read."""
    at = L.INDEX_HEADER_SIZE + hash_slot_num * L.INDEX_SLOT_SIZE + max(first, 0) * L.INDEX_ENTRY_SIZE
    n = max(end - first, 0) * L.INDEX_ENTRY_SIZE
    if loc.local_path is not None:
        with ReadOnlyMap(loc.local_path) as m:
            return bytes(m.buf[at:at + n])
    return loc.read_range(at, n)


def read_entry_window(loc, hash_slot_num: int, first: int, end: int) -> dict:
    """Entries ``first`` .. ``end - 1`` of an index file (of ``hash_slot_num`` slots) as native numpy columns
    (:func:`read_entry_bytes`)."""
    raw = read_entry_bytes(loc, hash_slot_num, first, end)
    e = np.frombuffer(raw, L.INDEX_ENTRY.dtype(), len(raw) // L.INDEX_ENTRY_SIZE)
    return {"key_hash": e["key_hash"].astype(np.int32), "physical_offset": e["physical_offset"].astype(np.int64),
            "time_diff": e["time_diff"].astype(np.int32), "prev_index": e["prev_index"].astype(np.int32)}


def index_files(where) -> list:
    """Every regular file of an ``index/`` folder (or the one file ``where`` names) as ``fs.Location``s, by name;
    files whose names are no creation time are listed too (the readers report them).  Entries no reader can read
    are left out (store_format.fs reports them)."""
    from .fs import Location, resolve

    loc = resolve(where)
    if loc.is_file():
        return [loc]
    return [Location(loc.fs, i.path, loc.origin) for i in loc.list() if i.is_file]


def list_index_files(index_dir) -> list[Path]:
    """Index files in load order (ascending name = creation time), as the Path-based readers open them."""
    return [f.as_path() for f in index_files(index_dir) if INDEX_NAME.fullmatch(f.name)]
