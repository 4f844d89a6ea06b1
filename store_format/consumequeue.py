"""ConsumeQueue files: ``consumequeue/<topic>/<queueId>/<20-digit logical byte offset>``, and their extension
``consumequeue_ext/<topic>/<queueId>/<20-digit offset>`` (ConsumeQueueExt, ``enableConsumeQueueExt``).

Unit (20 bytes, big-endian; ``ConsumeQueue.putMessagePositionInfo``)::

    commitlog physical offset (long) | record TOTALSIZE (int) | tagsCode (long)

Queue offset n lives at byte n*20 of the queue; a file's name is its first unit's byte offset.  Recovery
(``ConsumeQueue.recover``) accepts units while ``offset >= 0 && size > 0``; pre-blank units written by
``fillPreBlank`` are ``(0, Integer.MAX_VALUE, 0)``; the unwritten tail is zeros.

ConsumeQueueExt unit (``ConsumeQueueExt.CqExtUnit``; files rolled like the commitlog, ``MappedFileQueue``)::

    size (short: 20 + bitMapSize) | tagsCode (long) | msgStoreTime (long) | bitMapSize (short) | filterBitMap
    a file ends with size -1 when its next unit did not fit (fullFillToEnd); zeros are its unwritten tail

With the extension on, a unit's tagsCode slot holds the address of its ext unit (the offset in the queue's ext files
plus Long.MIN_VALUE: at or below ``CQ_EXT_MAX_ADDR``, where no tagsCode, a sign-extended int, reaches), and the
tagsCode consumers see is the ext unit's (``ConsumeQueue.get``): every reader here gives that one, with the address
beside it (``ext_offset``); an address that reaches no ext unit keeps its raw value and ``ext_found`` false.
"""
from __future__ import annotations

import struct
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Iterator

from . import fs
from . import layout as L
from .fs import ReadOnlyMap
from .errors import ConsumeQueueError, ErrorKind

if TYPE_CHECKING:  # numpy is imported where units are read in bulk, not when this module loads
    import numpy as np

_UNIT = struct.Struct(L.CQ_UNIT_STRUCT)


@dataclass(frozen=True)
class CQUnit:
    queue_offset: int
    physical_offset: int
    size: int
    tags_code: int
    kind: str  # "entry" | "pre_blank" | "invalid" (fails recovery's offset >= 0 && size > 0) | "zero"
    file: str
    file_position: int
    ext_offset: int | None = None  # the tagsCode slot held this ConsumeQueueExt address (tags_code: its unit's)


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


# A queue is store_format.queues' (every backend, over store_format.rolled's one listing); these two names stay for the
# writer (store_format.write, which opens one queue folder or a whole consumequeue/ to append) and the many tests
# that read a written store back by queue.


def list_queue_files(queue_dir, topic: str, queue_id: int) -> list[CQFile]:
    """The files of one queue's folder the broker loads, by name."""
    from . import rolled

    return [CQFile(topic, queue_id, f.path, f.base_offset, f.length) for f in rolled.list_rolled_files(queue_dir)]


def discover_queues(consumequeue_dir) -> dict[tuple[str, int], list[CQFile]]:
    """{(topic, queue_id): files} of the files the broker loads under a ``consumequeue/`` folder (store_format.queues'
    listing: store_format.rolled), each queue's files by name; a queue folder whose name is not an int is skipped."""
    from . import rolled

    return {k: [CQFile(k[0], k[1], f.path, f.base_offset, f.length) for f in files]
            for k, files in rolled.by_queue(rolled.list_queue_folders(consumequeue_dir, "consumequeue")).items()}


def read_units(cq_file: CQFile, *, stop_at_invalid: bool = False, include_zero: bool = False) -> Iterator[CQUnit]:
    """Every unit of one file, classified.  A trailing partial unit raises a positioned TRUNCATED error
    after the whole units have been yielded."""
    lookup = None  # the queue's ConsumeQueueExt, opened at the first address
    try:
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
                ext = None
                if tags <= L.CQ_EXT_MAX_ADDR:  # the slot holds a ConsumeQueueExt address: its unit's tagsCode
                    lookup = lookup or ExtLookup(ext_folder(cq_file.path))
                    ext = ext_offset(tags)
                    [found] = lookup.tags_codes([ext])
                    tags = found if found is not None else tags
                yield CQUnit(base_q + i, phys, size, tags, kind, cq_file.path.name, pos, ext)
            if len(m) % L.CQ_STORE_UNIT_SIZE:
                raise ConsumeQueueError(ErrorKind.TRUNCATED, f"file length {len(m)} is not a multiple of "
                                        f"{L.CQ_STORE_UNIT_SIZE}", file=str(cq_file.path),
                                        position=n * L.CQ_STORE_UNIT_SIZE)
    finally:
        if lookup is not None:
            lookup.close()


@dataclass
class UnitArrays:
    """:func:`read_units` of one file in bulk (numpy columns, the same units and order): ``kind`` codes index
    :data:`UNIT_KINDS`; ``truncated`` is the positioned error a partial trailing unit raises there."""

    queue_offset: "np.ndarray"
    physical_offset: "np.ndarray"
    size: "np.ndarray"
    tags_code: "np.ndarray"  # the ConsumeQueueExt unit's where the slot holds an address it reaches
    kind: "np.ndarray"
    file_position: "np.ndarray"
    truncated: ConsumeQueueError | None
    ext_offset: "np.ndarray | None" = None  # per unit, the ext address's offset (-1: the slot held a tagsCode)
    ext_found: "np.ndarray | None" = None  # the address reached an ext unit
    whole: int = 0  # whole units in the file (its length over the unit's size, the unwritten tail too)

    def recovery(self) -> "FileRecovery":
        """What ``ConsumeQueue.recover()`` needs of the file (:class:`FileRecovery`), from these units."""
        return FileRecovery.of(self.physical_offset, self.size.astype("int64"), self.kind != UNIT_KINDS.index("zero"),
                               self.whole)


UNIT_KINDS = ("entry", "pre_blank", "zero", "invalid")


def read_unit_arrays(cq_file: CQFile) -> UnitArrays:
    """Every unit of one file as :func:`read_units` yields them (``include_zero=False``): the zero units before
    the last written one are kept (``zero``), the zero-filled unwritten tail is not."""
    import numpy as np

    raw, length, n, whole_units = written_units(cq_file.path)
    u = units_of(raw, n, ext_of=lambda: ext_folder(cq_file.path))
    index = np.arange(n, dtype=np.int64)
    return UnitArrays(cq_file.first_queue_offset + index, u["physical_offset"], u["size"], u["tags_code"], u["kind"],
                      index * L.CQ_STORE_UNIT_SIZE, partial_unit(cq_file.path, length), u.get("ext_offset"),
                      u.get("ext_found"), whole_units)


def partial_unit(path, length: int) -> ConsumeQueueError | None:
    """The positioned error of a file of ``length`` bytes ending in a partial unit (:attr:`UnitArrays.truncated`),
    or None."""
    if not length % L.CQ_STORE_UNIT_SIZE:
        return None
    return ConsumeQueueError(ErrorKind.TRUNCATED, f"file length {length} is not a multiple of {L.CQ_STORE_UNIT_SIZE}",
                             file=str(path), position=length - length % L.CQ_STORE_UNIT_SIZE)


def read_unit_arrays_many(cq_files: list[CQFile]) -> tuple[list[UnitArrays], UnitArrays]:
    """:func:`read_unit_arrays` of each of ``cq_files`` (the same arrays, file by file), decoded as one: every
    file's written units joined and decoded in one pass, each file's arrays a slice of the group's (the second
    value: every file's units in turn, ``truncated`` None, ``whole`` the sum), its :meth:`UnitArrays.recovery`
    computed for all files at once (:func:`recoveries`).  A file whose slots hold ConsumeQueueExt addresses is read
    again as :func:`read_unit_arrays` reads it (which resolves them).  A broker with 40,000 queues has a few units a
    file: read a file at a time, a file's fixed cost (a dozen numpy calls) was most of its survey."""
    import numpy as np

    unit = L.CQ_STORE_UNIT_SIZE
    reads = [written_units(f.path) for f in cq_files]  # in order: the first file that cannot be read raises
    counts = np.fromiter((n for _, _, n, _ in reads), np.int64, len(reads))
    wholes = np.fromiter((w for _, _, _, w in reads), np.int64, len(reads))
    u = units_of(b"".join(memoryview(raw)[:n * unit] for raw, _, n, _ in reads))
    starts = np.cumsum(counts) - counts
    file_of = np.repeat(np.arange(len(reads), dtype=np.int64), counts)
    index = np.arange(len(file_of), dtype=np.int64) - starts[file_of]
    firsts = np.fromiter((f.first_queue_offset for f in cq_files), np.int64, len(reads))
    group = UnitArrays(firsts[file_of] + index, u["physical_offset"], u["size"], u["tags_code"], u["kind"],
                       index * unit, None, whole=int(wholes.sum()))
    addressed = set(np.unique(file_of[u["tags_code"] <= L.CQ_EXT_MAX_ADDR]).tolist())
    if addressed:  # the group's ext columns as the files' concatenated (a file without addresses: none)
        group.ext_offset, group.ext_found = np.full(len(file_of), -1, np.int64), np.zeros(len(file_of), bool)
    out = []
    for i, (f, (raw, length, n, whole)) in enumerate(zip(cq_files, reads)):
        a, b = int(starts[i]), int(starts[i] + n)
        if i in addressed:
            one = read_unit_arrays(f)
            group.tags_code[a:b], group.ext_offset[a:b], group.ext_found[a:b] = \
                one.tags_code, one.ext_offset, one.ext_found
            out.append(one)
            continue
        out.append(UnitArrays(group.queue_offset[a:b], group.physical_offset[a:b], group.size[a:b],
                              group.tags_code[a:b], group.kind[a:b], group.file_position[a:b],
                              partial_unit(f.path, length), whole=whole))
    return out, group


def recoveries(group: UnitArrays, counts: "np.ndarray", wholes: "np.ndarray") -> list["FileRecovery"]:
    """:meth:`UnitArrays.recovery` of each file of a group (``group``: their units in turn, ``counts`` units and
    ``wholes`` whole units each; :func:`read_unit_arrays_many`), computed for all of them at once."""
    import numpy as np

    counts = np.asarray(counts, np.int64)
    starts = np.cumsum(counts) - counts
    file_of = np.repeat(np.arange(len(counts), dtype=np.int64), counts)
    local = np.arange(len(file_of), dtype=np.int64) - starts[file_of]
    size = group.size.astype(np.int64)
    ok = (group.physical_offset >= 0) & (size > 0)
    # per file, the first unit recovery refuses (its count when none): the least of each unit's index where
    # refused, the file's count where not
    stop = np.full(len(counts), 0, np.int64)
    has = counts > 0
    if has.any():
        stop[has] = np.minimum.reduceat(np.where(ok, counts[file_of], local), starts[has])
    stop = np.minimum(stop, counts)
    last = starts + stop - 1
    ends = np.where(stop > 0, group.physical_offset[np.maximum(last, 0)] + size[np.maximum(last, 0)], -1) \
        if len(file_of) else np.full(len(counts), -1, np.int64)
    at = np.minimum(starts + stop, max(len(file_of) - 1, 0))
    written = group.kind != UNIT_KINDS.index("zero")
    refused = (stop < counts) & written[at] if len(file_of) else np.zeros(len(counts), bool)
    phys_at, size_at = group.physical_offset[at].tolist() if len(file_of) else [0] * len(counts), \
        size[at].tolist() if len(file_of) else [0] * len(counts)
    return [FileRecovery(k, e, (p, s) if r else None, w) for k, e, r, p, s, w in
            zip(stop.tolist(), ends.tolist(), refused.tolist(), phys_at, size_at, wholes.tolist())]


def written_units(path) -> tuple[bytes | bytearray, int, int, int]:
    """A consume-queue file's bytes of its whole units up to and including the last written one, its length, how
    many units those bytes hold and how many whole units the file has: its zero tail passed over without being
    read where it is a hole (store_format.fs.read_written: no map of the file).  Inside :func:`read_once`, a file
    read before there is not read again."""
    kept, run = _READ_ONCE.get(), _RUN_READS.get()
    key = str(path)
    if kept is not None and key in kept:
        return kept[key]
    got = run.get(key) if run is not None else None
    if got is None:
        raw, length = fs.read_written(path, L.CQ_STORE_UNIT_SIZE)
        whole = length // L.CQ_STORE_UNIT_SIZE
        got = raw, length, min(len(raw) // L.CQ_STORE_UNIT_SIZE, whole), whole
        if run is not None and isinstance(path, Path):
            run.keep(key, got)
    if kept is not None and kept.bytes + len(got[0]) <= READ_ONCE_BYTES:
        kept[key] = got
        kept.bytes += len(got[0])
    return got


class _Kept(dict):
    bytes = 0


_READ_ONCE: ContextVar[_Kept | None] = ContextVar("consumequeue_read_once", default=None)
#: the most bytes of files :func:`read_once` keeps (a task's group of queue files may hold 64 MiB: past this, a file
#: is read again by each reader, as outside it)
READ_ONCE_BYTES = 8 << 20


@contextmanager
def read_once():
    """Within it (in this thread), each consume-queue file is read once by all the bulk readers of its units
    (:func:`read_unit_arrays`, :class:`QueueUnits`), up to :data:`READ_ONCE_BYTES` of them: what one audit task's
    families share when each reads the task's files (a fleet's thousands of small queue files were each read once
    per family); let go when it ends."""
    token = _READ_ONCE.set(_Kept())
    try:
        yield
    finally:
        _READ_ONCE.reset(token)


class RunReads:
    """A run's small consume-queue files read once for all its tasks in this process (its survey's, its scan's and
    the driver's readers; :func:`reads_of_the_run`): each file's :func:`written_units` as first read, for files of at
    most :data:`RUN_READS_FILE_BYTES` written bytes, up to :data:`RUN_READS_BYTES` in all.  A fleet's or a wide
    broker's thousands of queue files of a few units each were read by the survey, again by the scan's queue tasks
    and again, a window each, by every commitlog range.  Kept for one run only: a file changed during the run fails
    the run's chain of custody (runtime/custody.py) whatever was read of it.  Local files only."""

    def __init__(self, budget: int | None = None, file_bytes: int | None = None):
        import threading

        self.budget = RUN_READS_BYTES if budget is None else budget
        self.file_bytes = RUN_READS_FILE_BYTES if file_bytes is None else file_bytes
        self.kept: dict[str, tuple] = {}
        self.bytes = 0
        self._lock = threading.Lock()  # the run's tasks run in threads of the driver

    def get(self, key: str) -> tuple | None:
        return self.kept.get(key)

    def keep(self, key: str, got: tuple) -> None:
        raw = got[0]
        if len(raw) > self.file_bytes:
            return
        with self._lock:
            if key not in self.kept and self.bytes + len(raw) <= self.budget:
                self.kept[key] = (bytes(raw), *got[1:])  # immutable: every reader slices the same bytes
                self.bytes += len(raw)

    def window(self, key: str, start: int, length: int) -> bytes | None:
        """The file's bytes ``start`` .. ``start + length`` as a ranged read gives them (cut at the file's end; the
        zeros past its written bytes), or None when the file is not kept."""
        got = self.kept.get(key)
        if got is None:
            return None
        raw, size = got[0], got[1]
        end = max(start, min(start + length, size))
        data = raw[start:min(end, len(raw))]
        return data + bytes(end - max(start, len(raw))) if end > len(raw) else data


_RUN_READS: ContextVar[RunReads | None] = ContextVar("consumequeue_run_reads", default=None)
#: what :class:`RunReads` keeps: a file of at most this many written bytes (a fleet's or a wide broker's queue
#: files hold a few KB; a bigger file is read in bulk, its fixed cost small against its bytes) ...
RUN_READS_FILE_BYTES = 64 << 10
#: ... up to this many bytes in all (40,000 queues over 1 GiB hold 45 MB)
RUN_READS_BYTES = 64 << 20


@contextmanager
def reads_of_the_run(reads: RunReads | None):
    """Within it (in this thread, and in the threads given a copy of its context), :func:`written_units` and the
    windows of store_format.queues keep and give back small files' reads in ``reads`` (None: as outside it)."""
    token = _RUN_READS.set(reads)
    try:
        yield
    finally:
        _RUN_READS.reset(token)


def run_window(loc, start: int, length: int) -> bytes | None:
    """A local file's bytes at ``start`` from the run's reads (:class:`RunReads`), None when they are not kept."""
    run = _RUN_READS.get()
    local = getattr(loc, "local_path", None)  # kept under the text of its Path: a listed path's text is the same
    return None if run is None or local is None else run.window(local, start, length)


def unit_kinds(phys, size, tags):
    """:func:`classify_unit` over arrays: codes into :data:`UNIT_KINDS`."""
    import numpy as np

    kind = np.full(len(phys), 3, np.int8)
    # classify_unit's tests, the later ones written first so the earlier win (a pre-blank unit is also an entry's
    # shape); masks, not np.select: its fixed cost was most of a small file's read
    kind[(phys >= 0) & (size > 0)] = 0
    zero_phys_tags = (phys == 0) & (tags == 0)
    kind[zero_phys_tags & (size == 0)] = 2
    kind[zero_phys_tags & (size == L.CQ_PRE_BLANK_SIZE)] = 1
    return kind


def units_of(raw, count: int | None = None, *, ext_of=None) -> dict:
    """The first ``count`` units (default: every whole unit) of ``raw`` (bytes, or a map: nothing is kept pointing
    into it) as native numpy columns, with their kind codes and whether each was written (any of its 20 bytes not
    zero).  ``ext_of``: a function giving the queue's ConsumeQueueExt folder (:func:`ext_folder`), asked only where
    a slot holds an address (a store without the extension has none: no path is built per file); there, its
    unit's tagsCode replaces the address and ``ext_offset`` / ``ext_found`` say where it pointed."""
    import numpy as np

    n = len(raw) // L.CQ_STORE_UNIT_SIZE if count is None else count
    u = np.frombuffer(raw, L.CQ_UNIT.dtype(), n)
    phys, size, tags = u["physical_offset"].astype(np.int64), u["size"].astype(np.int32), \
        u["tags_code"].astype(np.int64)
    del u  # no view may outlive a map
    out = {"physical_offset": phys, "size": size, "tags_code": tags, "kind": unit_kinds(phys, size, tags),
           "written": (phys != 0) | (size != 0) | (tags != 0)}
    addressed = tags <= L.CQ_EXT_MAX_ADDR
    if ext_of is not None and addressed.any():  # none in a store without the extension: nothing more to read
        offsets = np.where(addressed, tags - np.iinfo(np.int64).min, -1)
        rows = np.flatnonzero(addressed)
        found = ext_tags_codes(ext_of(), offsets[rows].tolist())
        hit = np.array([t is not None for t in found], bool)
        out["tags_code"] = tags.copy()
        out["tags_code"][rows[hit]] = np.array([t for t in found if t is not None], np.int64)
        out["ext_offset"] = offsets
        out["ext_found"] = np.zeros(n, bool)
        out["ext_found"][rows[hit]] = True
    return out


def read_queue(files: list[CQFile], **kwargs) -> Iterator[CQUnit]:
    for f in files:
        yield from read_units(f, **kwargs)


def unit_bytes(physical_offset: int, size: int, tags_code: int) -> bytes:
    return _UNIT.pack(physical_offset, size, tags_code)


def read_unit_window(loc: "fs.Location", first: int, end: int, *, resolve_ext: bool = True) -> dict:
    """Units ``first`` .. ``end - 1`` of a consume-queue file as numpy columns with their kinds (:func:`units_of`,
    ext addresses resolved unless ``resolve_ext`` is False: the kinds and physical offsets do not depend on them):
    one ranged read."""
    first, n = max(first, 0), max(end - first, 0) * L.CQ_STORE_UNIT_SIZE
    raw = loc.read_range(first * L.CQ_STORE_UNIT_SIZE, n)  # one pread of a local file: no map for a few units
    return units_of(raw, ext_of=(lambda: ext_folder(loc)) if resolve_ext else None)


# ---------------------------------------------------------------------------------------------------------
# ConsumeQueueExt


def ext_offset(address: int) -> int:
    """ConsumeQueueExt.unDecorate: the offset in the queue's ext files a tagsCode-slot address names."""
    return address + (1 << 63)


def ext_address(offset: int) -> int:
    """ConsumeQueueExt.decorate: what a consume-queue unit's tagsCode slot holds for the ext unit at ``offset``."""
    return offset - (1 << 63)


def ext_folder(cq) -> "fs.Location":
    """The ConsumeQueueExt folder of a consume-queue file's queue (a path, a ``fs.StorePath`` or a Location):
    ``<root>/consumequeue_ext/<topic>/<queueId>`` beside ``<root>/consumequeue/<topic>/<queueId>/<file>``."""
    queue = fs.resolve(cq).parent()
    topic = queue.parent()
    return topic.parent().parent().child("consumequeue_ext").child(topic.name).child(queue.name)


def ext_files(folder) -> list[tuple["fs.Location", int, int]]:
    """(file, base offset, length) of every ext file of a queue's folder the broker loads, by offset
    (store_format.rolled's listing; a tuple for the writer and the damage tools that take it so)."""
    from . import rolled

    return [(f.loc, f.base_offset, f.length) for f in rolled.list_rolled_files(folder)]


class ExtLookup:
    """A queue's ext units read by address as ConsumeQueueExt.get reads them (the file holding the offset, a size
    of at least 1 and the unit's 20 bytes there); its files listed once and each mapped once, until closed."""

    def __init__(self, folder):
        self.files = ext_files(folder)
        self.maps: dict[int, object] = {}

    def tags_codes(self, offsets: list[int]) -> list[int | None]:
        """The tagsCode of the ext unit at each offset, None where none is: no file, or nothing written there."""
        out: list[int | None] = [None] * len(offsets)
        for i, off in enumerate(offsets):
            for loc, base, length in self.files:
                if base <= off < base + length:
                    if base not in self.maps:
                        self.maps[base] = fs.map_range(loc)
                    buf, pos = self.maps[base].buf, off - base
                    if pos + L.CQ_EXT_MIN_UNIT_SIZE <= len(buf) and L.CQ_EXT_UNIT.read(buf, "size", pos) >= 1:
                        out[i] = L.CQ_EXT_UNIT.read(buf, "tags_code", pos)
                    break
        return out

    def close(self) -> None:
        for m in self.maps.values():
            m.close()
        self.maps = {}


def ext_tags_codes(folder, offsets: list[int]) -> list[int | None]:
    """:meth:`ExtLookup.tags_codes` of a queue's ext folder, once."""
    lookup = ExtLookup(folder)
    try:
        return lookup.tags_codes(offsets)
    finally:
        lookup.close()


@dataclass
class ExtUnits:
    """A queue's ConsumeQueueExt units as ConsumeQueueExt.recover walks them (each file from its start, unit after
    unit by size, to the first size below 1), in bulk, with what is wrong with them (``problems``: each a
    positioned ConsumeQueueError; the walk of that file stops there)."""

    offset: "np.ndarray"  # in the queue's ext files: what a consume-queue unit's address names
    size: "np.ndarray"
    tags_code: "np.ndarray"
    msg_store_time: "np.ndarray"
    bitmap_size: "np.ndarray"
    file: list[str]
    file_position: "np.ndarray"
    problems: list[ConsumeQueueError]


def read_ext_units(folder) -> ExtUnits:
    """Every ext unit of a queue's folder (:func:`ext_folder`); none when it has no file."""
    import numpy as np

    cols: dict[str, list] = {k: [] for k in ("offset", "size", "tags_code", "msg_store_time", "bitmap_size",
                                             "file", "file_position")}
    problems = []
    for loc, base, length in ext_files(folder):
        with fs.map_range(loc) as m:
            buf, pos = m.buf, 0
            while pos + 2 <= len(buf):
                size = L.CQ_EXT_UNIT.read(buf, "size", pos)
                if size < 1:
                    break  # the unwritten tail (0) or the end mark (-1)
                bad = ("runs past the end of the file" if pos + max(size, L.CQ_EXT_MIN_UNIT_SIZE) > len(buf)
                       else f"size {size} is below the {L.CQ_EXT_MIN_UNIT_SIZE} bytes of a unit"
                       if size < L.CQ_EXT_MIN_UNIT_SIZE else None)
                if bad:
                    problems.append(ConsumeQueueError(ErrorKind.BAD_LENGTH, f"ConsumeQueueExt unit {bad}",
                                                      file=str(loc), position=pos, field="size"))
                    break
                for name in ("size", "tags_code", "msg_store_time", "bitmap_size"):
                    cols[name].append(L.CQ_EXT_UNIT.read(buf, name, pos))
                cols["offset"].append(base + pos)
                cols["file"].append(loc.name)
                cols["file_position"].append(pos)
                pos += size
    ints = {k: np.array(v, np.int64) for k, v in cols.items() if k != "file"}
    return ExtUnits(ints["offset"], ints["size"], ints["tags_code"], ints["msg_store_time"], ints["bitmap_size"],
                    cols["file"], ints["file_position"], problems)


# ---------------------------------------------------------------------------------------------------------
# Recovery of a consume queue: ConsumeQueue.recover() and truncateDirtyLogicFiles(phyOffset) (its prediction
# over the whole store is store_format.recovery's)


@dataclass(frozen=True)
class QueueRecovery:
    """What recovery leaves of one consume queue.  Positions are logical byte offsets in the queue (queue
    offset x 20); ``end`` is where the queue's units end after recovery: every written unit at or past it is
    dropped (``dropped``; a written unit is any 20 bytes that are not all zeros)."""

    topic: str
    queue_id: int
    recover_end: int  # after ConsumeQueue.recover()
    max_physic_offset: int  # recover()'s maxPhysicOffset: offset + size of the last valid unit walked (-1: none)
    end: int  # after truncateDirtyLogicFiles (== recover_end when it does not run)
    dropped: int
    first_dropped: int | None  # queue offset of the first dropped unit
    reason: str | None  # "invalid_unit" | "past_recovered_end" | "no_commitlog"
    invalid_unit: tuple[int, int] | None = None  # (offset, size) of the unit recover() stopped at, if written


@dataclass(frozen=True)
class FileRecovery:
    """What ``ConsumeQueue.recover()`` needs of one file: how many units from its start recovery accepts
    (``offset >= 0 && size > 0``, among the written ones), where the last of them ends (offset + size; -1: none),
    the written unit that stops it (None: the run ends at the unwritten tail or the file's end) and the file's
    whole units.  A few numbers a file, so a survey that read the file once can hand them to recovery."""

    valid: int
    end: int
    refused: tuple[int, int] | None
    whole: int

    @classmethod
    def of(cls, phys, size, written, whole: int) -> "FileRecovery":
        """From the units up to the last written one (numpy physical offsets, int64 sizes, written flags)."""
        ok = (phys >= 0) & (size > 0)
        k = len(ok) if ok.all() else int(ok.argmin())  # at len(ok) < whole, a zero unit stops it
        return cls(k, int(phys[k - 1] + size[k - 1]) if k else -1,
                   (int(phys[k]), int(size[k])) if k < len(written) and written[k] else None, whole)


class QueueUnits:
    """Each file's units of one queue, read on demand and once: numpy physical offsets, sizes and written flags of
    the units up to the last written one (the rest are zeros), and the file's count of whole units.  ``known``:
    files' :class:`FileRecovery` already computed by whoever read them (the audit's survey), by file index;
    ``read``: files' units already read (as :meth:`__call__` gives them), by file index."""

    def __init__(self, files, known: dict | None = None, read: dict | None = None):
        self.files = files
        self._cache = dict(read or {})  # by file index: what __call__ gives, from units its caller read
        self._known = known or {}

    def __call__(self, i: int):
        if i not in self._cache:
            import numpy as np

            raw, _, n, whole = written_units(self.files[i].path)
            u = units_of(raw, n)
            self._cache[i] = (u["physical_offset"], u["size"].astype(np.int64), u["written"], whole)
        return self._cache[i]

    def recovery(self, i: int) -> FileRecovery:
        if i not in self._known:
            self._known[i] = FileRecovery.of(*self(i))
        return self._known[i]


def _recover_queue(files, units: QueueUnits) -> tuple[int, int, tuple[int, int] | None]:
    """ConsumeQueue.recover(): from file ``size - 3`` (clamped to 0), units while ``offset >= 0 && size > 0``; a
    full file goes on to the next.  Returns (the end, maxPhysicOffset, the refused unit if written)."""
    max_phys = -1
    if not files:
        return 0, max_phys, None
    for i in range(max(0, len(files) - 3), len(files)):
        r = units.recovery(i)
        if r.valid:
            max_phys = r.end
        if r.valid < r.whole:
            return files[i].base_byte_offset + r.valid * L.CQ_STORE_UNIT_SIZE, max_phys, r.refused
    last = files[-1]
    return last.base_byte_offset + units.recovery(len(files) - 1).whole * L.CQ_STORE_UNIT_SIZE, max_phys, None


def _truncate_queue(files, units, recover_end: int, phy_offset: int) -> int:
    """truncateDirtyLogicFiles(phyOffset) on what recover() left (the files starting at or before its end, as
    MappedFileQueue.truncateDirtyFiles keeps them), from the last file back: a file whose first unit has
    offset >= phyOffset is deleted; otherwise the first unit stays (whatever it holds), then units stay while
    ``offset >= 0 && size > 0 && offset < phyOffset``.  Returns the queue's end (the first file's start when
    every file is deleted)."""
    kept = [i for i, f in enumerate(files) if f.base_byte_offset <= recover_end]
    while kept:
        i = kept[-1]
        phys, size, _, whole = units(i)
        base = files[i].base_byte_offset
        if not whole:
            return base
        if (phys[0] if len(phys) else 0) >= phy_offset:  # a zero first unit reads as offset 0
            kept.pop()
            continue
        ok = (phys >= 0) & (size > 0) & (phys < phy_offset)
        k = len(ok) if ok.all() else int(ok.argmin())  # at len(ok) < whole, a zero unit stops it
        return base + max(k, 1) * L.CQ_STORE_UNIT_SIZE  # the first unit stays, whatever it holds
    return files[0].base_byte_offset if files else 0


@dataclass(frozen=True)
class QueueStart:
    """What ``ConsumeQueue.recover()`` leaves of one queue, before the commitlog's recovered end is known."""

    recover_end: int
    max_physic_offset: int  # -1: no valid unit walked
    refused: tuple[int, int] | None  # (offset, size) of the written unit recover() stopped at


def one_file_start(base_byte_offset: int, r: FileRecovery) -> QueueStart:
    """:func:`recover_queue` of a queue of one file (at ``base_byte_offset``) whose :class:`FileRecovery` is ``r``:
    recover() walks it from its start and stops where ``r`` says, or at its last whole unit, where ``r.valid`` is
    ``r.whole`` and nothing is refused.  No reader made: a broker of 40,000 queues has one file each."""
    return QueueStart(base_byte_offset + r.valid * L.CQ_STORE_UNIT_SIZE, r.end, r.refused)


def recover_queue(files, units: QueueUnits | None = None) -> QueueStart:
    """``ConsumeQueue.recover()`` of one queue (files sorted by name); ``units``: its files' units when the caller
    shares them (with :func:`finish_queue`) or knows some files' :class:`FileRecovery`."""
    return QueueStart(*_recover_queue(files, units or QueueUnits(files)))


def finish_queue(topic: str, queue_id: int, files, start: QueueStart, commitlog_end: int, has_commitlog: bool,
                 truncate: bool, units=None) -> QueueRecovery:
    """What recovery leaves of one queue once the commitlog's recovered end is known: ``truncateDirtyLogicFiles``
    when ``truncate`` (every queue's maxPhysicOffset against the end: decided over all queues), ``destroyLogics``
    without a commitlog; the written units from the queue's new end on are dropped."""
    units = units or QueueUnits(files)
    if not has_commitlog:
        end = files[0].base_byte_offset if files else 0
    elif truncate:
        end = _truncate_queue(files, units, start.recover_end, commitlog_end)
    else:
        end = start.recover_end
    dropped, first_dropped = 0, None
    for i, f in enumerate(files):
        if f.base_byte_offset + f.length <= end:
            continue
        written = units(i)[2]
        skip = max(0, (end - f.base_byte_offset) // L.CQ_STORE_UNIT_SIZE)
        hits = written[skip:].nonzero()[0]
        if len(hits) and first_dropped is None:
            first_dropped = (f.base_byte_offset // L.CQ_STORE_UNIT_SIZE) + skip + int(hits[0])
        dropped += len(hits)
    reason = None
    if dropped:
        reason = "no_commitlog" if not has_commitlog else "past_recovered_end" if end < start.recover_end \
            else "invalid_unit"
    return QueueRecovery(topic, queue_id, start.recover_end, start.max_physic_offset, end, dropped, first_dropped,
                         reason, start.refused if reason == "invalid_unit" else None)


def truncates_queues(starts, commitlog_end: int, has_commitlog: bool = True,
                     other_queues_end: int = -1) -> tuple[bool, int]:
    """(whether recovery runs truncateDirtyLogicFiles on every queue, the queues' max maxPhysicOffset): it does
    when that max is >= the recovered commitlog end (``DefaultMessageStore.recover``); ``other_queues_end``: the
    max the store's other queues in the same table give (5.x batch consume queues)."""
    max_cq = max(max((s.max_physic_offset for s in starts), default=-1), other_queues_end)
    return has_commitlog and max_cq >= commitlog_end, max_cq


def recover_consume_queues(queues: dict, commitlog_end: int, has_commitlog: bool = True,
                           starts: dict | None = None, other_queues_end: int = -1) -> tuple[dict, int]:
    """Every queue as recovery leaves it (``DefaultMessageStore.recover``): ``recoverConsumeQueue()`` runs
    ``ConsumeQueue.recover()`` on each queue and takes the max of their maxPhysicOffset (-1 without units); the
    commitlog recovery then calls ``truncateDirtyLogicFiles(processOffset)`` on every queue when that max is
    >= the recovered commitlog end; with no commitlog segment at all it destroys every queue
    (``destroyLogics``).  ``queues``: {(topic, queue id): files sorted by name}.  Returns ({key:
    :class:`QueueRecovery`}, the max maxPhysicOffset).  ``starts``: each queue's :func:`recover_queue`, when
    computed before (a 5.x recovery's walk starts where they end).  ``other_queues_end``: the max physical offset
    the store's other queues in the same table give (5.x batch consume queues), which the decision takes too."""
    units = {key: QueueUnits(files) for key, files in queues.items()}
    starts = starts if starts is not None else {key: QueueStart(*_recover_queue(files, units[key]))
                                                for key, files in queues.items()}
    truncate, max_cq = truncates_queues(starts.values(), commitlog_end, has_commitlog, other_queues_end)
    return {(topic, qid): finish_queue(topic, qid, files, starts[(topic, qid)], commitlog_end, has_commitlog,
                                       truncate, units[(topic, qid)])
            for (topic, qid), files in queues.items()}, max_cq


