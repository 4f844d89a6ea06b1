"""ConsumeQueue files: ``consumequeue/<topic>/<queueId>/<20-digit logical byte offset>``.

Unit (20 bytes, big-endian; ``ConsumeQueue.putMessagePositionInfo``)::

    commitlog physical offset (long) | record TOTALSIZE (int) | tagsCode (long)

Queue offset n lives at byte n*20 of the queue; a file's name is its first unit's byte offset.  Recovery
(``ConsumeQueue.recover``) accepts units while ``offset >= 0 && size > 0``; pre-blank units written by
``fillPreBlank`` are ``(0, Integer.MAX_VALUE, 0)``; the unwritten tail is zeros.
"""
from __future__ import annotations

import re
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Iterator

import pyarrow.fs as pafs

from . import fs
from . import layout as L
from .fs import ReadOnlyMap
from .errors import ConsumeQueueError, ErrorKind

if TYPE_CHECKING:  # numpy is imported where units are read in bulk, not when this module loads
    import numpy as np

_UNIT = struct.Struct(L.CQ_UNIT_STRUCT)
_FILE_NAME = re.compile(r"[0-9]{20}")  # fullmatch: ASCII digits only, no trailing newline
_QUEUE_DIR = re.compile(r"-?[0-9]{1,10}")  # an int queue id, as Integer.parseInt reads the folder name


@dataclass(frozen=True)
class CQUnit:
    queue_offset: int
    physical_offset: int
    size: int
    tags_code: int
    kind: str  # "entry" | "pre_blank" | "invalid" (fails recovery's offset >= 0 && size > 0) | "zero"
    file: str
    file_position: int


@dataclass(frozen=True)
class CQFile:
    topic: str
    queue_id: int
    path: Path
    base_byte_offset: int
    length: int

    @property
    def first_queue_offset(self) -> int:
        return self.base_byte_offset // L.CQ_STORE_UNIT_SIZE


def classify_unit(physical_offset: int, size: int, tags_code: int) -> str:
    if physical_offset == 0 and size == L.CQ_PRE_BLANK_SIZE and tags_code == 0:
        return "pre_blank"
    if physical_offset == 0 and size == 0 and tags_code == 0:
        return "zero"
    if physical_offset >= 0 and size > 0:
        return "entry"
    return "invalid"


@dataclass(frozen=True, eq=False)
class QueueFile:
    """One file of ``consumequeue/<topic>/<queue>/`` as the listing finds it (:func:`list_queue_files`): a file the
    broker loads has an int queue id and a 20-digit name (:attr:`loaded`); any other is only reported."""

    topic: str
    queue_id: int | None  # None: the queue folder's name is not an int
    loc: "fs.Location"
    length: int

    @property
    def name(self) -> str:
        return self.loc.name

    @property
    def loaded(self) -> bool:
        """The broker loads it: an int queue id and a 20-digit name (its queue's byte offset)."""
        return self.queue_id is not None and bool(_FILE_NAME.fullmatch(self.name))

    @property
    def first_queue_offset(self) -> int:
        """The queue offset of its first unit: its name (the byte offset in the queue) over the unit's size."""
        return int(self.name) // L.CQ_STORE_UNIT_SIZE

    def cq_file(self) -> CQFile:
        """The file as the readers take it (it must be :attr:`loaded`)."""
        return CQFile(self.topic, self.queue_id, self.loc.as_path(), int(self.name), self.length)


def list_consumequeue(where) -> list[QueueFile]:
    """Every regular file of a ``consumequeue/`` folder (``<topic>/<queue>/<file>``), or the one file ``where``
    names, in listing order.  Entries no reader can read are left out (store_format.fs
    reports them)."""
    loc = fs.resolve(where)
    if loc.is_file():
        queue = loc.parent()
        return [QueueFile(queue.parent().name, queue_id_of(queue.name), loc, loc.size())]
    out = []
    for topic in _folders(loc):
        for queue in _folders(topic):
            qid = queue_id_of(queue.name)
            out.extend(QueueFile(topic.name, qid, fs.Location(queue.fs, i.path, queue.origin), i.size)
                       for i in queue.list() if i.is_file)
    return out


def list_queue_files(queue_dir, topic: str, queue_id: int) -> list[CQFile]:
    """The files of one queue's folder the broker loads, by name."""
    loc = fs.resolve(queue_dir)
    return queue_files([QueueFile(topic, queue_id, fs.Location(loc.fs, i.path, loc.origin), i.size)
                        for i in loc.list() if i.is_file])


def _folders(loc) -> list:
    return [fs.Location(loc.fs, i.path, loc.origin) for i in loc.list() if i.type == pafs.FileType.Directory]


def queue_id_of(name: str) -> int | None:
    """The queue id a queue folder's name gives (as Integer.parseInt: ASCII digits, an int), else None."""
    return int(name) if _QUEUE_DIR.fullmatch(name) and -2**31 <= int(name) < 2**31 else None


def discover_queues(consumequeue_dir) -> dict[tuple[str, int], list[CQFile]]:
    """{(topic, queue_id): files} of the files the broker loads (:attr:`QueueFile.loaded`), each queue's files by
    name; a queue folder whose name is not an int is skipped."""
    queues: dict[tuple[str, int], list[CQFile]] = {}
    for f in list_consumequeue(consumequeue_dir):
        if f.loaded:
            queues.setdefault((f.topic, f.queue_id), []).append(f.cq_file())
    return {k: sorted(v, key=lambda f: f.base_byte_offset) for k, v in queues.items()}


def queue_files(files: list[QueueFile]) -> list[CQFile]:
    """The files of one queue (one folder's listing) the broker loads, by name."""
    return sorted((f.cq_file() for f in files if f.loaded), key=lambda f: f.base_byte_offset)


def read_units(cq_file: CQFile, *, stop_at_invalid: bool = False, include_zero: bool = False) -> Iterator[CQUnit]:
    """Every unit of one file, classified.  A trailing partial unit raises a positioned TRUNCATED error
    after the whole units have been yielded."""
    with ReadOnlyMap(cq_file.path) as m:
        n = len(m) // L.CQ_STORE_UNIT_SIZE
        base_q = cq_file.first_queue_offset
        written = None  # where the file's last non-zero byte ends (ReadOnlyMap.written_length), at the first zero unit
        for i in range(n):
            pos = i * L.CQ_STORE_UNIT_SIZE
            phys, size, tags = _UNIT.unpack_from(m.buf, pos)
            kind = classify_unit(phys, size, tags)
            if kind == "zero" and not include_zero:
                # recovery stops at the first invalid unit; trailing zeros are the unwritten tail.  The end of
                # the written bytes is found once per file: testing each zero unit's tail copied the rest of the
                # mapping per unit (quadratic: a 6 MB file with a few bytes at its end never finished)
                if written is None:
                    written = m.written_length()
                if pos >= written:
                    break
            if stop_at_invalid and kind in ("invalid", "zero"):
                break
            yield CQUnit(base_q + i, phys, size, tags, kind, cq_file.path.name, pos)
        if len(m) % L.CQ_STORE_UNIT_SIZE:
            raise ConsumeQueueError(ErrorKind.TRUNCATED, f"file length {len(m)} is not a multiple of "
                                    f"{L.CQ_STORE_UNIT_SIZE}", file=str(cq_file.path), position=n * L.CQ_STORE_UNIT_SIZE)


@dataclass
class UnitArrays:
    """:func:`read_units` of one file in bulk (numpy columns, the same units and order): ``kind`` codes index
    :data:`UNIT_KINDS`; ``truncated`` is the positioned error a partial trailing unit raises there."""

    queue_offset: "np.ndarray"
    physical_offset: "np.ndarray"
    size: "np.ndarray"
    tags_code: "np.ndarray"
    kind: "np.ndarray"
    file_position: "np.ndarray"
    truncated: ConsumeQueueError | None


UNIT_KINDS = ("entry", "pre_blank", "zero", "invalid")


def read_unit_arrays(cq_file: CQFile) -> UnitArrays:
    """Every unit of one file as :func:`read_units` yields them (``include_zero=False``): the zero units before
    the last written one are kept (``zero``), the zero-filled unwritten tail is not."""
    import numpy as np

    with ReadOnlyMap(cq_file.path) as m:
        n, _ = written_units(m)
        u = units_of(m.buf, n)
        truncated = None
        if len(m) % L.CQ_STORE_UNIT_SIZE:
            whole = len(m) - len(m) % L.CQ_STORE_UNIT_SIZE
            truncated = ConsumeQueueError(ErrorKind.TRUNCATED, f"file length {len(m)} is not a multiple of "
                                          f"{L.CQ_STORE_UNIT_SIZE}", file=str(cq_file.path), position=whole)
    index = np.arange(n, dtype=np.int64)
    return UnitArrays(cq_file.first_queue_offset + index, u["physical_offset"], u["size"], u["tags_code"], u["kind"],
                      index * L.CQ_STORE_UNIT_SIZE, truncated)


def written_units(m: ReadOnlyMap) -> tuple[int, int]:
    """(whole units up to and including the last written one, whole units in the file): a preallocated file's
    zero tail is found without decoding it (ReadOnlyMap.written_length)."""
    whole = len(m) // L.CQ_STORE_UNIT_SIZE
    return min(-(-m.written_length() // L.CQ_STORE_UNIT_SIZE), whole), whole


def unit_kinds(phys, size, tags):
    """:func:`classify_unit` over arrays: codes into :data:`UNIT_KINDS`."""
    import numpy as np

    zero_phys_tags = (phys == 0) & (tags == 0)
    return np.select([zero_phys_tags & (size == L.CQ_PRE_BLANK_SIZE), zero_phys_tags & (size == 0),
                      (phys >= 0) & (size > 0)], [1, 2, 0], 3).astype(np.int8)  # classify_unit's order


def units_of(raw, count: int | None = None) -> dict:
    """The first ``count`` units (default: every whole unit) of ``raw`` (bytes, or a map: nothing is kept pointing
    into it) as native numpy columns, with their kind codes and whether each was written (any of its 20 bytes not
    zero)."""
    import numpy as np

    n = len(raw) // L.CQ_STORE_UNIT_SIZE if count is None else count
    u = np.frombuffer(raw, L.CQ_UNIT.dtype(), n)
    phys, size, tags = u["physical_offset"].astype(np.int64), u["size"].astype(np.int32), \
        u["tags_code"].astype(np.int64)
    del u  # no view may outlive a map
    return {"physical_offset": phys, "size": size, "tags_code": tags, "kind": unit_kinds(phys, size, tags),
            "written": (phys != 0) | (size != 0) | (tags != 0)}


def read_queue(files: list[CQFile], **kwargs) -> Iterator[CQUnit]:
    for f in files:
        yield from read_units(f, **kwargs)


def unit_bytes(physical_offset: int, size: int, tags_code: int) -> bytes:
    return _UNIT.pack(physical_offset, size, tags_code)


def read_unit_window(loc: "fs.Location", first: int, end: int) -> dict:
    """Units ``first`` .. ``end - 1`` of a consume-queue file as numpy columns with their kinds
    (store_format.consumequeue.units_of): read from a read-only map, or one ranged read."""
    first, n = max(first, 0), max(end - first, 0) * L.CQ_STORE_UNIT_SIZE
    if loc.local_path is not None:
        with ReadOnlyMap(loc.local_path) as m:
            return units_of(bytes(m.buf[first * L.CQ_STORE_UNIT_SIZE:first * L.CQ_STORE_UNIT_SIZE + n]))
    return units_of(loc.read_range(first * L.CQ_STORE_UNIT_SIZE, n))
