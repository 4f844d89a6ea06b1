"""BatchConsumeQueue files: ``batchconsumequeue/<topic>/<queueId>/<20-digit byte offset>`` (RocketMQ 5.x topics
with ``queue.type=BatchCQ``).

Mirrors ``store/queue/BatchConsumeQueue.java`` (5.3.3); the unit is declared once as
:data:`store_format.layout.BATCH_CQ_UNIT`.  Unit (46 bytes, big-endian;
``putBatchMessagePositionInfo``)::

    phyOffset q | size i | tagsCode q | storeTime q | msgBaseOffset q | batchSize h | compactedOffset i (-1) |
    reserved i (0)

File names are byte offsets within the queue (``mapperFileSizeBatchConsumeQueue`` = 300,000 * 46 by default), not
message offsets: logical offsets count messages, so a unit covers ``[msgBaseOffset, msgBaseOffset + batchSize)``
and the queue's max offset is the last unit's ``msgBaseOffset + batchSize``.  Recovery accepts units while
``phyOffset >= 0 && size > 0 && msgBaseOffset >= 0 && batchSize > 0``; the zero-filled tail is the unwritten
end.  A ``SparseConsumeQueue`` (compaction) end marker is ``(-1, 0, 0, 0, 0, 0, -1, 0)``.

:func:`read_batch_units` yields one :class:`BatchUnit` per unit (kind ``entry``, ``end_marker``, ``zero``
inside the written part, ``invalid``); :func:`read_batch_unit_arrays` / :func:`batch_units_of` give the same
units as numpy columns.  Files are given as a path or a :class:`store_format.fs.Location`, opened read-only.
"""
from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import Iterator

import numpy as np

from . import layout as L
from . import rolled
from .errors import ErrorKind, StoreFormatError
from .lmq import parse_java_long

BATCH_CQ_DIR = L.BATCH_CQ_DIR
UNIT = L.BATCH_CQ_UNIT
UNIT_SIZE = UNIT.width  # 46
_UNIT = struct.Struct(UNIT.struct)
UNIT_KINDS = ("entry", "end_marker", "zero", "invalid")
KIND_ENTRY, KIND_END_MARKER, KIND_ZERO, KIND_INVALID = range(4)


class BatchConsumeQueueError(StoreFormatError):
    """A batch consume-queue file that cannot be read."""


@dataclass(frozen=True)
class BatchUnit:
    physical_offset: int
    size: int
    tags_code: int
    store_timestamp: int
    msg_base_offset: int
    batch_size: int
    compacted_offset: int
    reserved: int
    kind: str
    file: str
    file_position: int
    unit_byte_offset: int  # the file's base + file_position: the unit's byte offset in the queue

    @property
    def next_offset(self) -> int:
        """The logical offset after this unit's messages."""
        return self.msg_base_offset + self.batch_size

    def to_dict(self) -> dict:
        return {m.name: getattr(self, m.name) for m in UNIT.members} | {
            "kind": self.kind, "file": self.file, "file_position": self.file_position,
            "unit_byte_offset": self.unit_byte_offset}


def classify(phys: int, size: int, base: int, batch: int, *rest) -> str:
    if phys == -1 and size == 0 and base == 0 and batch == 0:
        return "end_marker"
    if phys == 0 and size == 0 and base == 0 and batch == 0 and not any(rest):
        return "zero"
    if phys >= 0 and size > 0 and base >= 0 and batch > 0:
        return "entry"
    return "invalid"


def discover_batch_queues(root) -> dict[tuple[str, int], list[rolled.RolledFile]]:
    """``{(topic, queue_id): files}`` of the files the broker loads under ``<root>/batchconsumequeue``, each queue's
    by offset (store_format.rolled's listing of queue folders; the name stays for the writer and the tests that read
    a written store back by queue; a queue is store_format.queues')."""
    return rolled.by_queue(rolled.list_queue_folders(rolled.child(root, BATCH_CQ_DIR), BATCH_CQ_DIR))


def batch_units_of(raw, count: int | None = None) -> dict:
    """The first ``count`` whole units of ``raw`` (default: all) as native numpy columns with kind codes
    (:data:`UNIT_KINDS`); nothing keeps pointing into ``raw``."""
    n = len(raw) // UNIT_SIZE if count is None else count
    u = np.frombuffer(raw, UNIT.dtype(), n)
    cols = {m.name: u[m.name].astype(np.int64 if m.code == "q" else np.int32) for m in UNIT.members}
    del u
    phys, size, base, batch = cols["physical_offset"], cols["size"], cols["msg_base_offset"], cols["batch_size"]
    zero = (phys == 0) & (size == 0) & (base == 0) & (batch == 0) & (cols["tags_code"] == 0) & \
        (cols["store_timestamp"] == 0) & (cols["compacted_offset"] == 0) & (cols["reserved"] == 0)
    end = (phys == -1) & (size == 0) & (base == 0) & (batch == 0)
    entry = (phys >= 0) & (size > 0) & (base >= 0) & (batch > 0)
    cols["kind"] = np.select([end, zero, entry], [KIND_END_MARKER, KIND_ZERO, KIND_ENTRY], KIND_INVALID).astype(np.int8)
    return cols


@dataclass
class BatchUnitArrays:
    """:func:`read_batch_units` of one file as numpy columns (same units, same order); ``truncated``: the
    positioned error of a partial trailing unit."""

    file: str
    base_offset: int
    columns: dict
    file_position: np.ndarray
    truncated: StoreFormatError | None

    def __len__(self) -> int:
        return len(self.file_position)

    def __getattr__(self, name):
        cols = self.__dict__.get("columns")
        if cols is not None and name in cols:
            return cols[name]
        raise AttributeError(name)


def _written_units(m) -> tuple[int, int]:
    whole = len(m) // UNIT_SIZE
    return min(-(-m.written_length() // UNIT_SIZE), whole), whole


def _truncated(length: int, name: str) -> StoreFormatError | None:
    if length % UNIT_SIZE:
        return BatchConsumeQueueError(ErrorKind.TRUNCATED, f"file length {length} is not a multiple of {UNIT_SIZE}",
                                      file=name, position=length - length % UNIT_SIZE)
    return None


def read_batch_unit_arrays(src) -> BatchUnitArrays:
    """Every unit up to the last written one (the zero tail left out) of one file (RolledFile, path or
    Location)."""
    f = src if isinstance(src, rolled.RolledFile) else None
    loc = f.location if f else rolled.location(src)
    name = rolled.name_of(loc)
    base = f.base_offset if f else (int(loc.name) if loc.name.isdigit() else 0)
    with rolled.open_bytes(loc) as m:
        n, _ = _written_units(m)
        cols = batch_units_of(m.buf, n)
        trunc = _truncated(len(m), name)
    return BatchUnitArrays(name, base, cols, np.arange(n, dtype=np.int64) * UNIT_SIZE, trunc)


def read_batch_units(src, *, stop_at_invalid: bool = False) -> Iterator[BatchUnit]:
    """The units of one file, classified; a partial trailing unit raises a positioned TRUNCATED error after the
    whole units.  ``stop_at_invalid`` stops where recovery stops (the first unit that is not an entry)."""
    f = src if isinstance(src, rolled.RolledFile) else None
    loc = f.location if f else rolled.location(src)
    name = rolled.name_of(loc)
    base = f.base_offset if f else (int(loc.name) if loc.name.isdigit() else 0)
    with rolled.open_bytes(loc) as m:
        n, _ = _written_units(m)
        for i in range(n):
            vals = _UNIT.unpack_from(m.buf, i * UNIT_SIZE)
            kind = classify(vals[0], vals[1], vals[4], vals[5], vals[2], vals[3], vals[6], vals[7])
            if stop_at_invalid and kind != "entry":
                return
            yield BatchUnit(*vals, kind=kind, file=name, file_position=i * UNIT_SIZE,
                            unit_byte_offset=base + i * UNIT_SIZE)
        err = _truncated(len(m), name)
    if err is not None and not stop_at_invalid:
        raise err


def read_batch_queue(files: list[rolled.RolledFile], **kwargs) -> Iterator[BatchUnit]:
    for f in files:
        yield from read_batch_units(f, **kwargs)


def max_offset(files: list[rolled.RolledFile]) -> int:
    """``BatchConsumeQueue.reviseMaxOffsetInQueue``: the last entry's msgBaseOffset + batchSize (0 when empty)."""
    last = None
    for u in read_batch_queue(files, stop_at_invalid=True):
        last = u
    return last.next_offset if last is not None else 0


def recovered_max_physical_offset(files: list[rolled.RolledFile]) -> int:
    """``BatchConsumeQueue.recover()``'s ``maxMsgPhyOffsetInCommitLog`` (5.3.3, BatchConsumeQueue.java:210-260,
    returned by ``getMaxPhysicOffset``, :297): from file ``size - 3`` (clamped to 0), units while offset >= 0,
    size > 0, msgBaseOffset >= 0 and batchSize > 0, a file all of whose units pass going on to the next; the
    physical offset of the last unit that passes -- its record's start, where a ConsumeQueue's is its end -- or -1
    when none does.  ``ConsumeQueueStore.getMaxPhyOffsetInConsumeQueue`` takes the max over these and the consume
    queues' (store-format-5x.md section 3)."""
    last = -1
    for f in files[max(0, len(files) - 3):]:
        a = read_batch_unit_arrays(f)
        ok = (a.physical_offset >= 0) & (a.size > 0) & (a.msg_base_offset >= 0) & (a.batch_size > 0)
        k = len(ok) if ok.all() else int(ok.argmin())
        if k:
            last = int(a.physical_offset[k - 1])
        if k < f.length // UNIT_SIZE or f.length % UNIT_SIZE:  # a unit that fails (or the zero tail) ends the walk
            break
    return last


def read_batch_unit_window(src, first: int, end: int) -> dict:
    """Units ``first`` .. ``end - 1`` of one file as :func:`batch_units_of` columns: from a read-only map, or one
    ranged read."""
    first, end = max(first, 0), max(end, first)
    with rolled.open_bytes(src, first * UNIT_SIZE, (end - first) * UNIT_SIZE) as m:
        return batch_units_of(m.buf, len(m.buf) // UNIT_SIZE)


def message_count(properties: dict) -> int:
    """``CommitLog.getMessageNum``: the logical messages a record holds -- INNER_NUM of an inner-batch record (a
    value Long.parseLong refuses, or 0, counts 1), else 1.  A BatchCQ topic's counter moves by it."""
    text = properties.get(L.PROPERTY_INNER_NUM)
    return (parse_java_long(text) or 1) if text is not None else 1


def unit_bytes(physical_offset: int, size: int, tags_code: int, store_timestamp: int, msg_base_offset: int,
               batch_size: int, compacted_offset: int = L.BATCH_CQ_INVALID_POS, reserved: int = 0) -> bytes:
    return _UNIT.pack(physical_offset, size, tags_code, store_timestamp, msg_base_offset, batch_size,
                      compacted_offset, reserved)


__all__ = ["BatchUnit", "BatchUnitArrays", "BatchConsumeQueueError", "UNIT_KINDS",
           "discover_batch_queues", "read_batch_unit_window",
           "batch_units_of", "read_batch_unit_arrays", "read_batch_units", "read_batch_queue", "max_offset",
           "unit_bytes", "classify", "message_count"]
