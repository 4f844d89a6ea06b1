"""IndexFile: ``index/<yyyyMMddHHmmssSSS>`` (``IndexFile``, ``IndexHeader``, ``IndexService``).

Layout::

    header 40 B: beginTimestamp q | endTimestamp q | beginPhyOffset q | endPhyOffset q |
                 hashSlotCount i | indexCount i (starts at 1)
    slots  hashSlotNum x int: index number of the newest entry with that hash (0 = empty)
    entries indexNum x 20 B: keyHash i | phyOffset q | timeDiff i (seconds from beginTimestamp) | prevIndex i

Entry 0 is never used.  Keys are ``topic#key``; lookups compare hashes only, so results are candidates.
"""
from __future__ import annotations

import os
import re
import struct
from dataclasses import dataclass
from pathlib import Path

from . import layout as L
from .commitlog import ReadOnlyMap
from .errors import ErrorKind, IndexFileError
from .javahash import index_key, index_key_hash

_HEADER = struct.Struct(L.INDEX_HEADER_STRUCT)
_ENTRY = struct.Struct(L.INDEX_ENTRY_STRUCT)
_SLOT = struct.Struct(">i")
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
    """A read-only index file.  Geometry (slot and entry counts) is given or inferred from the length."""

    def __init__(self, path: str | os.PathLike, hash_slot_num: int | None = None, index_num: int | None = None):
        self.path = Path(path)
        self._map = ReadOnlyMap(self.path)
        try:
            self._check_geometry(hash_slot_num, index_num)
        except IndexFileError:
            self._map.close()  # a refused file leaves no open mapping behind
            raise

    def _check_geometry(self, hash_slot_num: int | None, index_num: int | None):
        buf = self._map.buf
        if len(buf) < L.INDEX_HEADER_SIZE:
            raise IndexFileError(ErrorKind.TRUNCATED, f"{len(buf)} bytes, the header needs {L.INDEX_HEADER_SIZE}",
                                 file=str(self.path), position=0)
        self.header = IndexHeader(*_HEADER.unpack_from(buf, 0))
        if hash_slot_num is None or index_num is None:
            try:
                hash_slot_num, index_num = infer_geometry(len(buf), hash_slot_num, index_num)
            except IndexFileError as e:
                raise IndexFileError(e.kind, e.message, file=str(self.path), position=e.position) from None
        if hash_slot_num < 1 or index_num < 1:
            raise IndexFileError(ErrorKind.BAD_GEOMETRY, f"{hash_slot_num} hash slots x {index_num} entries: both "
                                 "must be positive", file=str(self.path), position=len(buf))
        self.hash_slot_num = hash_slot_num
        self.index_num = index_num
        expected = L.index_file_size(hash_slot_num, index_num)
        if len(buf) < expected:
            raise IndexFileError(ErrorKind.TRUNCATED, f"{len(buf)} bytes, geometry {hash_slot_num} slots x "
                                 f"{index_num} entries needs {expected}", file=str(self.path), position=len(buf))

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


def infer_geometry(length: int, hash_slot_num: int | None = None, index_num: int | None = None) -> tuple[int, int]:
    """Slots and entries from the file length: RocketMQ's ratio is maxIndexNum = 4 x maxHashSlotNum."""
    body = length - L.INDEX_HEADER_SIZE
    given = None
    if hash_slot_num is not None:
        given = hash_slot_num, (body - hash_slot_num * L.INDEX_SLOT_SIZE) // L.INDEX_ENTRY_SIZE
    elif index_num is not None:
        given = (body - index_num * L.INDEX_ENTRY_SIZE) // L.INDEX_SLOT_SIZE, index_num
    if given is not None:
        if min(given) < 1:
            raise IndexFileError(ErrorKind.BAD_GEOMETRY, f"length {length} leaves {given[0]} slots x {given[1]} "
                                 "entries", position=length)
        return given
    # 4*s + 20*4*s = 84*s
    if body > 0 and body % (L.INDEX_SLOT_SIZE + 4 * L.INDEX_ENTRY_SIZE) == 0:
        s = body // (L.INDEX_SLOT_SIZE + 4 * L.INDEX_ENTRY_SIZE)
        return s, 4 * s
    raise IndexFileError(ErrorKind.BAD_GEOMETRY, f"cannot infer slots/entries from length {length}; "
                         "pass maxHashSlotNum/maxIndexNum (broker.conf)", position=length)


def list_index_files(index_dir: str | os.PathLike) -> list[Path]:
    """Index files in load order (ascending name = creation time)."""
    d = Path(index_dir)
    if not d.is_dir():
        return []
    return sorted(p for p in d.iterdir() if p.is_file() and INDEX_NAME.fullmatch(p.name))
