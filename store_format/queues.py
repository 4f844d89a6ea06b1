"""A consume queue, whatever holds it: one :class:`Queue` (topic, queue id, backend) over its rolled files, one
listing of every queue folder of a store (:func:`list_queue_files`), one grouping (:func:`group_queues`), unit
windows and bounds by queue offset, and what the broker's recovery does to it.

A backend (:class:`Backend`) is how a queue's units are kept: its part folder under the store root, its unit's size
and decoder, and its recovery model.  Today's backends (store-format-5x.md section 3):

- ``file``: ``consumequeue/<topic>/<queueId>/<20-digit byte offset>``, 20-byte units (store_format.consumequeue;
  with ``enableConsumeQueueExt`` their tagsCodes in ``consumequeue_ext/``), queue offset n at byte n * 20;
- ``batch``: ``batchconsumequeue/<topic>/<queueId>/<20-digit byte offset>`` (5.x, ``queue.type=BatchCQ``), 46-byte
  units (store_format.batchcq), each covering ``batchSize`` queue offsets from its ``msgBaseOffset``;
- ``rocksdb``: ``consumequeue/`` itself a RocksDB database (5.2 and later, ``storeType=defaultRocksDB``; found by its
  ``CURRENT`` and tables, store_format.rocksdbcq), one key per 28-byte unit.  Each queue is listed as one virtual
  file ``consumequeue/<topic>/<queueId>/<20-digit byte offset of its first key's unit>`` covering its first to its
  last key: unit i of it is queue offset first + i, and a queue offset with no key is a ``missing`` unit, so windows
  by unit index work as for a file queue;
- ``compaction``: ``compaction/compactionCq/<topic>/<queueId>/<20-digit>`` (5.x, ``cleanup.policy=COMPACTION``;
  store_format.compaction), the SparseConsumeQueue over a compaction log: batch units (batchSize 1) whose
  phyOffset is an offset in ``compaction/compactionLog/<topic>/<queueId>/``, not the CommitLog, and whose
  msgBaseOffset is the original queue offset (sparse: gaps where values were compacted away); each file is named
  after the log file it indexes.  Its queues' kind is ``compaction``.

The queue's kind (:attr:`Queue.kind`: ``plain``, ``lmq``, ``batch``, ``compaction``) follows from its backend and its name; an ext
queue is a ``file`` queue whose units hold ConsumeQueueExt addresses (:attr:`Queue.has_ext`).  A further backend
plugs in as one more :class:`Backend` with the same functions.

Every file is opened read-only (store_format.rolled).
"""
from __future__ import annotations

import os
import stat
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from functools import cached_property
from typing import Callable

from . import fs
from . import layout as L
from . import rolled

import numpy as np


# ---------------------------------------------------------------------------------------------------------
# A queue's files, listed once


@dataclass(frozen=True, eq=False)
class QueueFile:
    """One file of a queue folder (``<part>/<topic>/<queue>/<file>``) as the listing finds it, with what is wrong
    with it (``problems``: a bad name, a length other than its folder's file size; store_format.rolled).  The broker
    loads it when its queue folder is an int and its name 20 digits (:attr:`loaded`)."""

    topic: str
    queue_id: int | None  # None: the queue folder's name is not an int
    backend: "Backend"
    file: rolled.RolledFile

    @property
    def loc(self) -> fs.Location:
        return self.file.loc

    @cached_property
    def stored_bytes(self) -> int:
        """What reading the file costs: its length less the holes of a sparse local file.  A broker preallocates
        every consume-queue file at its full size (6 MB) and a small queue writes a few KB of it; readers pass the
        holes over unread (store_format.fs.written_length), so 40,000 small queues are not 240 GB of work.  One
        stat, on the driver, when tasks are planned (store_format.plan.group_queue_files)."""
        path = self.loc.local_path
        try:
            st = os.stat(path) if path is not None else None
        except OSError:
            st = None
        if st is None or not stat.S_ISREG(st.st_mode):
            return self.length
        return min(self.length, st.st_blocks * 512)

    @property
    def name(self) -> str:
        return self.file.name

    @property
    def length(self) -> int:
        return self.file.length

    @property
    def problems(self) -> tuple:
        return self.file.problems

    @property
    def base_offset(self) -> int | None:
        """The file's name: the byte offset of its first unit in the queue (None: the name is not 20 digits)."""
        return self.file.base_offset

    @property
    def loaded(self) -> bool:
        """The broker loads it: an int queue id and a 20-digit name."""
        return self.queue_id is not None and self.file.base_offset is not None

    @property
    def first_unit(self) -> int:
        """The index in the queue of the file's first unit: its name over the unit's size."""
        return self.file.base_offset // self.backend.unit_size

    @property
    def first_queue_offset(self) -> int:
        """A ``file`` queue's first unit's queue offset (its unit index; a batch queue's offsets are in its units)."""
        return self.first_unit

    def cq_file(self):
        """The file as store_format.consumequeue's readers take it (a ``file`` queue's, :attr:`loaded`): made once
        (the survey's read and its queue's recovery both take it; its path is a Path or a fs.StorePath)."""
        return self._cq_file

    @cached_property
    def _cq_file(self):
        from .consumequeue import CQFile

        return CQFile(self.topic, self.queue_id, self.loc.as_path(), self.file.base_offset, self.length)

    def reader_file(self):
        """The file as its backend's readers take it (:attr:`Backend.file_of`)."""
        return self.backend.file_of(self)

    def units(self) -> "Units":
        """Every unit of the file up to its last written one, in bulk (:class:`Units`; inside :func:`read_once`, read
        with its group's)."""
        known = _units_read_at_once(self)
        return known if known is not None else self.backend.file_units(self)


def list_queue_files(where, backends: tuple["Backend", ...] | None = None, limit=None) -> list[QueueFile]:
    """Every regular file of every queue folder ``where`` holds, in listing order, each with its problems: a store
    root (each backend's part folder: ``consumequeue/``, ``batchconsumequeue/``...), one part folder (its
    backend's), or the one file ``where`` names (the backend of the part folder three levels up; ``file`` when no
    part folder is there).  ``backends``: only theirs.  Entries no reader can read are left out (store_format.fs
    reports them); a missing folder has none.  ``limit`` (a ``rolled.FileLimit``): the most files built of each
    part folder (store_format.rolled.list_queue_folders)."""
    loc = rolled.location(where)
    if loc.is_file():
        parts = [(b, loc) for b in BY_FOLDER.get(loc.parent().parent().parent().name, (FILE,))[:1]]
    elif loc.name in BY_FOLDER:  # one part folder
        parts = [(b, loc) for b in BY_FOLDER[loc.name]]
    else:
        parts = [(b, loc.child(b.folder)) for b in BACKENDS]
    return [f for backend, part in parts if backends is None or backend in backends
            for f in backend.list_files(part, limit)]


def _rolled_queue_files(backend: "Backend", part, limit=None) -> list[QueueFile]:
    """A rolled backend's listing: every file of every ``<topic>/<queue>/`` MappedFileQueue under its part folder
    (store_format.rolled.list_queue_folders), or the one file ``part`` names."""
    return [QueueFile(topic, qid, backend, f)
            for topic, qid, f in rolled.list_queue_folders(part, backend.folder, limit=limit)]


def group_queues(files: list[QueueFile]) -> list["Queue"]:
    """The queues of a listing: the files the broker loads by backend, topic and queue id (store_format.rolled's
    grouping), each queue's files by name, in the order the listing first shows each queue."""
    by_file = {id(f.file): f for f in files}
    out = []
    for backend in dict.fromkeys(f.backend for f in files):
        entries = [(f.topic, f.queue_id, f.file) for f in files if f.backend is backend]
        out += [Queue(topic, qid, backend, tuple(by_file[id(r)] for r in rs))
                for (topic, qid), rs in rolled.by_queue(entries).items()]
    return out


@contextmanager
def read_once(files: list = ()):
    """A context within which (in this thread) each queue file is read once by all the readers of its units (a
    ``file`` queue's: store_format.consumequeue.read_once; the other backends' readers read as before): one task's
    readers of the same files share the reads.  ``files``: a task's group of queue files, whose units are read
    together (:func:`many_units`) the first time a reader asks for one of them (:meth:`QueueFile.units`,
    :meth:`Queue.unit_reader`)."""
    from .consumequeue import read_once as file_reads_once

    with file_reads_once():
        token = _READ_AT_ONCE.set(_ReadAtOnce(files))
        try:
            yield
        finally:
            _READ_AT_ONCE.reset(token)


def queue_files_by_key(files: list[QueueFile]) -> dict[tuple[str, int], list]:
    """{(topic, queue id): its files as the backend's readers take them} of one backend's listing."""
    return {q.key: q.reader_files for q in group_queues(files)}


# ---------------------------------------------------------------------------------------------------------
# Units, whatever the backend


@dataclass
class Units:
    """One file's units in bulk, the same columns for every backend (numpy, the file's units in order, up to its
    last written one): ``queue_offset`` is the unit's place in the queue (a ``file`` unit's index; a batch unit's
    ``msgBaseOffset``), ``valid`` the units recovery accepts; ``kind`` codes index the backend's ``kinds``;
    ``batch_size`` / ``msg_base_offset`` / ``store_timestamp`` / ``ext_offset`` / ``ext_found`` are None where the
    backend has none; ``truncated`` is the positioned error of a partial trailing unit."""

    queue_offset: "np.ndarray"
    physical_offset: "np.ndarray"
    size: "np.ndarray"
    tags_code: "np.ndarray"
    kind: "np.ndarray"
    valid: "np.ndarray"
    file_position: "np.ndarray"
    truncated: object
    kinds: tuple
    batch_size: "np.ndarray | None" = None
    msg_base_offset: "np.ndarray | None" = None
    store_timestamp: "np.ndarray | None" = None
    ext_offset: "np.ndarray | None" = None
    ext_found: "np.ndarray | None" = None
    file: "np.ndarray | None" = None  # the file of each unit (:meth:`Queue.units`, over several files)
    # what the backend's recovery needs of the file, where it is modelled (store_format.consumequeue.FileRecovery):
    # a reader that has the units hands it on, so recovery does not read the file again
    recovery: object = None

    def __len__(self) -> int:
        return len(self.kind)

    @property
    def ends(self) -> "np.ndarray":
        """One past the last queue offset each unit covers (a batch unit covers batchSize of them)."""
        return self.queue_offset + (1 if self.batch_size is None else self.batch_size.astype("int64"))


def _file_units(f: QueueFile) -> Units:
    from .consumequeue import UNIT_KINDS, read_unit_arrays

    u = read_unit_arrays(f.cq_file())
    return Units(u.queue_offset, u.physical_offset, u.size, u.tags_code, u.kind, u.kind == 0, u.file_position,
                 u.truncated, UNIT_KINDS, ext_offset=u.ext_offset, ext_found=u.ext_found, recovery=u.recovery())


@dataclass
class ManyUnits:
    """Many files' units read at once (:attr:`Backend.files_units`): each file's :class:`Units` (``files``, as
    :meth:`QueueFile.units` gives them), and every file's in turn as one (``group``, ``counts`` units a file)."""

    files: list
    group: Units
    counts: "np.ndarray"


#: the most bytes (QueueFile.stored_bytes) of files :func:`many_units` reads at once: their units are held together
#: (a broker's thousands of small queues fill a task's group with a few KB each; a group of large files is read a
#: file at a time, as before, each file's fixed cost then small beside its units)
MANY_BYTES = 8 << 20
#: the most bytes of a :func:`read_once` group's files read a file at a time (past :data:`MANY_BYTES`, or of mixed
#: backends) whose units are kept for its other readers: a queue of three full files, as recovery walks them (read
#: again by each reader, a task's consume-queue check and its recovery read every such file twice or three times)
HELD_BYTES = 24 << 20


def many_units(files: list[QueueFile]) -> ManyUnits | None:
    """The units of ``files`` (each loaded) read at once by their backend; None when their backends differ, theirs
    reads a file at a time, or they hold more than :data:`MANY_BYTES` (then :meth:`QueueFile.units` each)."""
    backends = {f.backend for f in files}
    if len(backends) != 1 or next(iter(backends)).files_units is None \
            or sum(f.stored_bytes for f in files) > MANY_BYTES:
        return None
    return next(iter(backends)).files_units(files)


class _ReadAtOnce:
    """The files of a :func:`read_once` whose units are read together, the first time one of them is asked for."""

    def __init__(self, files):
        self.files = [f for f in files if isinstance(f, QueueFile) and f.loaded]
        self.ids = {id(f) for f in self.files}
        self.units: dict | None = None
        self.one_at_a_time = False
        self.held = 0  # stored bytes of the files read one at a time and kept

    def of(self, f: QueueFile) -> Units | None:
        if id(f) not in self.ids:
            return None
        if self.units is None:
            many = many_units(self.files)
            self.units = {} if many is None else dict(zip(map(id, self.files), many.files))
            self.one_at_a_time = many is None
        got = self.units.get(id(f))
        if got is None and self.one_at_a_time and self.held + f.stored_bytes <= HELD_BYTES:
            got = self.units[id(f)] = f.backend.file_units(f)
            self.held += f.stored_bytes
        return got


_READ_AT_ONCE: ContextVar[_ReadAtOnce | None] = ContextVar("queues_read_at_once", default=None)


def _units_read_at_once(f: QueueFile) -> Units | None:
    """``f``'s units from the group of the :func:`read_once` it is in, None when it is in none or its group is read
    a file at a time."""
    group = _READ_AT_ONCE.get()
    return None if group is None else group.of(f)


def _file_units_many(files: list[QueueFile]) -> ManyUnits:
    """:func:`_file_units` of each file, decoded as one (store_format.consumequeue.read_unit_arrays_many)."""
    from .consumequeue import UNIT_KINDS, read_unit_arrays_many, recoveries

    each, g = read_unit_arrays_many([f.cq_file() for f in files])
    counts = np.fromiter((len(u.kind) for u in each), np.int64, len(each))
    found = recoveries(g, counts, np.fromiter((u.whole for u in each), np.int64, len(each)))
    valid = g.kind == 0
    starts = (np.cumsum(counts) - counts).tolist()
    units = [Units(u.queue_offset, u.physical_offset, u.size, u.tags_code, u.kind, valid[a:a + len(u.kind)],
                   u.file_position, u.truncated, UNIT_KINDS, ext_offset=u.ext_offset, ext_found=u.ext_found,
                   recovery=r) for u, a, r in zip(each, starts, found)]
    group = Units(g.queue_offset, g.physical_offset, g.size, g.tags_code, g.kind, valid, g.file_position, None,
                  UNIT_KINDS, ext_offset=g.ext_offset, ext_found=g.ext_found)
    return ManyUnits(units, group, counts)


def _batch_units(f: QueueFile) -> Units:
    from .batchcq import KIND_ENTRY, UNIT_KINDS, read_batch_unit_arrays

    u = read_batch_unit_arrays(f.file)
    return Units(u.msg_base_offset, u.physical_offset, u.size, u.tags_code, u.kind, u.kind == KIND_ENTRY,
                 u.file_position, u.truncated, UNIT_KINDS, batch_size=u.batch_size, msg_base_offset=u.msg_base_offset,
                 store_timestamp=u.store_timestamp)


def _file_window(loc: fs.Location, first: int, end: int) -> dict:
    from .consumequeue import read_unit_window

    u = read_unit_window(loc, first, end)
    return {"physical_offset": u["physical_offset"], "size": u["size"], "tags_code": u["tags_code"],
            "valid": u["kind"] == 0}


def _file_windows(spans: list) -> tuple[dict, np.ndarray]:
    """Many files' windows read as one (``spans``: (location, first, end) each): one ranged read a file, the units
    decoded together, a file whose units hold ConsumeQueueExt addresses read again as :func:`_file_window` reads
    it (which resolves them).  (The columns :func:`_file_window` gives, of every window's units in turn; how many
    units each window gave.)  A range of a broker with 40,000 queues owns a few units of each: read a file at a
    time, a file's fixed cost (a dozen numpy calls, a table) was most of the scan."""
    from .consumequeue import run_window, units_of

    unit = L.CQ_STORE_UNIT_SIZE
    chunks, counts = [], np.zeros(len(spans), np.int64)
    for i, (loc, first, end) in enumerate(spans):
        first = max(first, 0)  # as read_unit_window reads a window
        at, n = first * unit, max(end - first, 0) * unit
        raw = run_window(loc, at, n)  # a small file the run read already
        if raw is None:
            raw = loc.read_range(at, n)
        counts[i] = len(raw) // unit
        chunks.append(raw[:counts[i] * unit])
    u = units_of(b"".join(chunks))
    columns = {"physical_offset": u["physical_offset"], "size": u["size"], "tags_code": u["tags_code"],
               "valid": u["kind"] == 0}
    starts = np.cumsum(counts) - counts
    file_of_unit = np.repeat(np.arange(len(spans)), counts)
    for i in np.unique(file_of_unit[u["tags_code"] <= L.CQ_EXT_MAX_ADDR]).tolist():
        w = _file_window(*spans[i])
        columns["tags_code"][starts[i]:starts[i] + counts[i]] = w["tags_code"][:counts[i]]
    return columns, counts


def _batch_window(loc: fs.Location, first: int, end: int) -> dict:
    from .batchcq import KIND_ENTRY, read_batch_unit_window

    u = read_batch_unit_window(loc, first, end)
    return {**u, "valid": u["kind"] == KIND_ENTRY}


def _file_recover(files, units=None):
    from .consumequeue import recover_queue

    return recover_queue(files, units)


# one object per backend in every process (``__reduce__``), so equal is the same object: hashed by identity, not by
# its fields (a frozen dataclass hashes every field at each look: 50,000 queue files grouped by backend, every run)
@dataclass(frozen=True, eq=False)
class Backend:
    """How a queue's units are kept: where (``folder`` under the store root), their size, and the functions a
    reader asks.  A new backend provides the same: ``lister`` (its :class:`QueueFile` s under its part folder;
    default: the rolled ``<topic>/<queue>/`` folders), ``file_of`` (a listed file as its readers take it),
    ``file_units`` (a file's :class:`Units`), ``window`` (units ``first``..``end - 1`` of a file as numpy columns
    with ``physical_offset``, ``size``, ``tags_code`` and ``valid``) and ``recover`` (the broker's recovery of one
    queue's files, and a reader of their units the caller shares or None; None where it is not modelled)."""

    name: str  # the source's ``backend`` column
    folder: str  # its part folder under the store root (a RocksDB queue's would share ``consumequeue/``)
    unit_size: int
    since: str  # the store generation that loads it ("4.x": every broker; "5.x": 5.x only)
    setting: str  # the broker setting of its file size
    queue_type: str | None  # the topic attribute queue.type its topics must have (ConsumeQueueStore's check), if any
    file_of: Callable
    file_units: Callable
    window: Callable
    recover: Callable | None = None
    lister: Callable = _rolled_queue_files  # (backend, part folder or one file, FileLimit or None) -> its QueueFiles

    def list_files(self, part, limit=None) -> list[QueueFile]:
        """Its files under ``part`` (its part folder, or one file), each with its problems, in listing order;
        ``limit`` (a ``rolled.FileLimit``): the most files built of a part folder of files."""
        return self.lister(self, part, limit)

    dispatch_end: Callable | None = None  # (part folder) -> where it records its dispatch ended, if it keeps that
    bounds: Callable | None = None  # (QueueFile) -> (min offset, max offset) the broker serves, where not its units'
    # a database backend's recovery (store_format.recovery): (part folder) -> DatabaseState or None, and
    # (part folder, offset to truncate, CommitLog min offset) -> [(rocksdbcq.MaxCorrection, unit keys unserved,
    # of those the (queue offsets, physical offsets) of the units before the offset: kept messages left unserved)]
    state: Callable | None = None
    truncate_dirty: Callable | None = None
    # how a unit is shown (the audit's view of a window of units): (column, Arrow type name) in order; ``topic``,
    # ``queue_id``, ``file`` and ``file_position`` are the file's, ``queue_offset`` the unit's index (with
    # :attr:`dense`), every other column the window's.  The backends of one part folder show units alike; a
    # backend without one is not routed (:data:`ROUTED_FOLDERS`)
    view: tuple | None = None
    # unit i of a file is queue offset ``first_unit + i`` (a window by unit index is one by queue offset); False
    # where a unit's queue offset is in the unit (a batch unit's msgBaseOffset)
    dense: bool = True
    # many files' windows read at once: ([(location, first, end)]) -> (``window``'s columns of every window's units
    # in turn, each window's unit count); None: a file at a time
    windows: Callable | None = None
    # many files' units read at once: ([QueueFile], each loaded) -> ManyUnits; None: a file at a time
    files_units: Callable | None = None

    def __repr__(self) -> str:  # a plan's files are printed in errors; the functions say nothing there
        return f"Backend({self.name})"

    def __reduce__(self):  # sent to tasks by name: one object per backend in every process
        return _backend_named, (self.name,)


def _backend_named(name: str) -> "Backend":
    return BY_NAME[name]


def _batch_file_of(f: QueueFile):
    return f.file


# a consume-queue unit as the audit shows it (``consumequeue/``: flat files or a RocksDB database)
UNIT_VIEW = (("topic", "string"), ("queue_id", "int32"), ("queue_offset", "int64"), ("physical_offset", "int64"),
             ("size", "int32"), ("tags_code", "int64"), ("file", "string"), ("file_position", "int64"))
# a batch unit: it covers batchSize queue offsets from its msgBaseOffset, and keeps its record's store time
BATCH_UNIT_VIEW = (("topic", "string"), ("queue_id", "int32"), ("msg_base_offset", "int64"), ("batch_size", "int32"),
                   ("physical_offset", "int64"), ("size", "int32"), ("tags_code", "int64"),
                   ("store_timestamp", "int64"), ("file", "string"), ("file_position", "int64"))

FILE = Backend("file", "consumequeue", L.CQ_STORE_UNIT_SIZE, "4.x", "mappedFileSizeConsumeQueue", L.QUEUE_TYPE_SIMPLE,
               QueueFile.cq_file, _file_units, _file_window, _file_recover, view=UNIT_VIEW, windows=_file_windows,
               files_units=_file_units_many)
BATCH = Backend("batch", L.BATCH_CQ_DIR, L.BATCH_CQ_UNIT.width, "5.x", "mapperFileSizeBatchConsumeQueue",
                L.QUEUE_TYPE_BATCH, _batch_file_of, _batch_units, _batch_window, view=BATCH_UNIT_VIEW, dense=False)


# -- rocksdb: every queue of the database one virtual file (see the module's doc) ---------------------------------

_DATABASES: dict = {}  # (folder, what its files are) -> store_format.rocksdbcq.RocksDBQueues, open once a process
ROCKSDB_UNIT_SIZE = 28  # a unit's value: physicalOffset, size, tagsCode, storeTimestamp (rocksdbcq.UNIT_VALUE)
ROCKSDB_UNIT_KINDS = ("entry", "missing")  # a key at the queue offset; none there (a hole between first and last)


def _rocksdb(folder: fs.Location):
    """The database of a ``consumequeue/`` folder, opened read-only once per process (and again when its files
    change: a seeded copy); RocksDBQueueUnreadable when it cannot be."""
    import atexit
    import os

    from .rocksdbcq import RocksDBQueues

    local = folder.local_path
    stamp = tuple(sorted((e.name, e.stat().st_size, e.stat().st_mtime_ns) for e in os.scandir(local))) \
        if local else None
    key = (folder.path, stamp)
    db = _DATABASES.get(key)
    if db is None:
        if not _DATABASES:
            atexit.register(lambda: [d.close() for d in _DATABASES.values()])
        db = _DATABASES[key] = RocksDBQueues(folder.parent())
    return db


def _rocksdb_place(loc: fs.Location) -> tuple:
    """(database folder, topic, queue id, first queue offset) of a virtual file's location."""
    return loc.parent().parent().parent(), loc.parent().parent().name, int(loc.parent().name), \
        int(loc.name) // ROCKSDB_UNIT_SIZE


def _rocksdb_queue_files(backend: "Backend", part, limit=None) -> list[QueueFile]:
    """One virtual file per queue with a unit key, when ``part`` is a RocksDB database (store_format.rocksdbcq
    .is_rocksdb_queue_folder); a database that cannot be opened is one unloaded entry whose problem says why.
    ``limit`` is not applied: its queues are keys of one database, not files of a folder."""
    from .rocksdbcq import RocksDBQueueUnreadable, is_rocksdb_queue_folder

    loc = rolled.location(part)
    if loc.is_file() or not is_rocksdb_queue_folder(loc):
        return []
    try:
        db = _rocksdb(loc)
        out = []
        for topic, qid in db.queues():
            b = db.bounds(topic, qid)
            if b.first_unit is None:
                continue  # an offset row and no unit: nothing to read
            name = f"{b.first_unit * backend.unit_size:020d}"
            length = (b.last_unit - b.first_unit + 1) * backend.unit_size
            out.append(QueueFile(topic, qid, backend, rolled.RolledFile(
                loc.child(topic).child(str(qid)).child(name), b.first_unit * backend.unit_size, length)))
        return out
    except RocksDBQueueUnreadable as e:
        return [QueueFile("", None, backend, rolled.RolledFile(loc.child("CURRENT"), None, 0,
                                                               (("unreadable", e.reason),)))]


def _rocksdb_window(loc: fs.Location, first: int, end: int, *, full: bool = False) -> dict:
    folder, topic, qid, base = _rocksdb_place(loc)
    u = _rocksdb(folder).units(topic, qid, base + first, base + end)
    n = max(end - first, 0)
    at = u.queue_offset - (base + first)
    out = {"physical_offset": np.zeros(n, np.int64), "size": np.zeros(n, np.int32),
           "tags_code": np.zeros(n, np.int64), "store_timestamp": np.zeros(n, np.int64), "valid": np.zeros(n, bool)}
    for c in ("physical_offset", "size", "tags_code", "store_timestamp"):
        out[c][at] = getattr(u, c)
    out["valid"][at] = True
    return out


def _rocksdb_units(f: QueueFile) -> Units:
    n = f.length // f.backend.unit_size
    w = _rocksdb_window(f.loc, 0, n)
    return Units(np.arange(f.first_unit, f.first_unit + n, dtype=np.int64), w["physical_offset"], w["size"],
                 w["tags_code"], np.where(w["valid"], 0, 1).astype(np.int8), w["valid"],
                 np.arange(n, dtype=np.int64) * f.backend.unit_size, None, ROCKSDB_UNIT_KINDS,
                 store_timestamp=w["store_timestamp"])


def _rocksdb_file_of(f: QueueFile):
    return f


def _rocksdb_dispatch_end(part) -> int | None:
    """The checkpoint row: the end of the last record dispatched into the database, which RocketMQ's recovery takes
    as the consume queues' max physical offset (RocksDBConsumeQueueStore.getMaxPhyOffsetInConsumeQueue)."""
    from .rocksdbcq import RocksDBQueueUnreadable, is_rocksdb_queue_folder

    loc = rolled.location(part)
    if not is_rocksdb_queue_folder(loc):
        return None
    try:
        return _rocksdb(loc).checkpoint()
    except RocksDBQueueUnreadable:
        return None


def _rocksdb_bounds(f: QueueFile) -> tuple[int, int] | None:
    """(getMinOffsetInQueue, getMaxOffsetInQueue) a 5.3.3 broker serves from the ``offset`` rows, with the CommitLog's
    min offset as the broker computes it (:func:`store_format.commitlog.min_offset`)."""
    from .commitlog import min_offset

    folder, topic, qid, _ = _rocksdb_place(f.loc)
    b = _rocksdb(folder).bounds(topic, qid, min_offset(folder.parent().child("commitlog")))
    return (b.min_offset, b.max_offset) if b.max_row is not None else None


def _rocksdb_state(part) -> "DatabaseState | None":
    """The checkpoint row and whether the database holds any row (None: no readable database in ``part``)."""
    from .rocksdbcq import RocksDBQueueUnreadable, is_rocksdb_queue_folder

    loc = rolled.location(part)
    if not is_rocksdb_queue_folder(loc):
        return None
    try:
        db = _rocksdb(loc)
        return DatabaseState(db.checkpoint(), db.is_empty())
    except RocksDBQueueUnreadable:
        return None


def _rocksdb_truncate_dirty(part, offset: int, commitlog_min_offset: int) -> list:
    """RocksDBConsumeQueueStore.truncateDirty(offset) predicted (store_format.rocksdbcq.RocksDBQueues.truncate_dirty),
    with each corrected queue's unit keys the broker stops serving counted, and of those the ones before ``offset``
    (units of kept messages its search skipped) as (queue offsets, physical offsets)."""
    db = _rocksdb(rolled.location(part))
    out = []
    none = (np.zeros(0, np.int64), np.zeros(0, np.int64))
    for c in db.truncate_dirty(offset, commitlog_min_offset):
        if c.new == c.old:
            out.append((c, 0, none))
            continue
        unserved = db.units(c.topic, c.queue_id, c.new.queue_offset + 1, c.old.queue_offset + 1)
        kept = unserved.physical_offset < offset
        out.append((c, len(unserved), (unserved.queue_offset[kept], unserved.physical_offset[kept])))
    return out


@dataclass(frozen=True)
class DatabaseState:
    """What a backend that is a database keeps apart from its units, as recovery reads it: ``dispatch_end`` (its
    checkpoint of where dispatch ended; None: no such row) and ``empty`` (no row at all: a crash lost them)."""

    dispatch_end: int | None
    empty: bool


ROCKSDB = Backend("rocksdb", "consumequeue", ROCKSDB_UNIT_SIZE, "5.x", "storeType", L.QUEUE_TYPE_SIMPLE,
                  _rocksdb_file_of, _rocksdb_units, _rocksdb_window, None, _rocksdb_queue_files,
                  _rocksdb_dispatch_end, _rocksdb_bounds, _rocksdb_state, _rocksdb_truncate_dirty,
                  view=UNIT_VIEW)


# -- compaction: a cleanup.policy=COMPACTION topic's SparseConsumeQueue over its compaction log (store_format.compaction)


def _sparse_queue_files(backend: "Backend", part, limit=None) -> list[QueueFile]:
    """The rolled ``<topic>/<queue>/`` files of ``compaction/compactionCq/``, each file named after the log file it
    indexes (so the folder's file size is its files' length, not their names' spacing); the ``compacting/`` and
    ``replicating/`` generations are folders, not files of the queue."""
    from .compaction import sparse_file_size

    return [QueueFile(topic, qid, backend, f)
            for topic, qid, f in rolled.list_queue_folders(part, backend.folder, sparse_file_size, limit)]


COMPACTION = Backend("compaction", L.COMPACTION_CQ_DIR, L.BATCH_CQ_UNIT.width, "5.x", "compactionCqMappedFileSize",
                     None, _batch_file_of, _batch_units, _batch_window, None, _sparse_queue_files,
                     dense=False)  # not routed (no view): its units point into the compaction log, not the CommitLog
BACKENDS = (FILE, BATCH, ROCKSDB, COMPACTION)
BY_NAME = {b.name: b for b in BACKENDS}
BY_FOLDER: dict[str, tuple[Backend, ...]] = {}  # by the part folder's own name (compactionCq: compaction/compactionCq)
for _b in BACKENDS:
    _leaf = _b.folder.rsplit("/", 1)[-1]
    BY_FOLDER[_leaf] = BY_FOLDER.get(_leaf, ()) + (_b,)
#: the part folders whose queues' units are shown (:attr:`Backend.view`), each once, in :data:`BACKENDS` order: the
#: audit routes each folder's units to the commitlog ranges they point into
ROUTED_FOLDERS = tuple(dict.fromkeys(b.folder for b in BACKENDS
                                     if all(x.view for x in BACKENDS if x.folder == b.folder)))


def queue_stores(store_root, listing: list[QueueFile]) -> list[tuple[Backend, "fs.Location"]]:
    """(backend, part folder) of each database backend (one with a :attr:`Backend.state`) that is the broker's
    queue store: not where its part folder also holds a preferred backend's queues (``listing``: the store's
    :func:`list_queue_files`): a flat-file broker that double-writes RocksDB (``rocksdbCQDoubleWriteEnable``)
    recovers from its files."""
    root = rolled.location(store_root)
    return [(b, root.child(b.folder)) for b in BACKENDS if b.state is not None
            and not any(f.loaded and f.backend is not b and f.backend.folder == b.folder for f in listing)]


def dispatch_end(store_root, listing: list[QueueFile]) -> int:
    """The largest end of dispatch a queue store of the store records apart from its units (RocksDB's checkpoint
    row; :func:`queue_stores`), -1 when none does: recovery takes it as the queues' max physical offset."""
    ends = [b.dispatch_end(part) for b, part in queue_stores(store_root, listing) if b.dispatch_end is not None]
    return max((e for e in ends if e is not None), default=-1)


def preferred(files: list[QueueFile]) -> list[QueueFile]:
    """``files`` less those of a queue a preferred backend of the same part folder also holds: where both the
    flat files and a RocksDB database keep a queue (a store migrating, ``rocksdbCQDoubleWriteEnable``), the broker
    reads the files (CombineConsumeQueueStore's ``combineCQPreferCQType`` = ``default``); the two are reconciled
    apart (:func:`disagreements`)."""
    rank = {b: i for i, b in enumerate(BACKENDS)}
    best: dict[tuple, int] = {}
    for f in files:
        if f.loaded:
            k = (f.backend.folder, f.topic, f.queue_id)
            best[k] = min(best.get(k, rank[f.backend]), rank[f.backend])
    return [f for f in files if not f.loaded or best[(f.backend.folder, f.topic, f.queue_id)] == rank[f.backend]]


def shared_queues(queues: list["Queue"]) -> list[tuple["Queue", "Queue"]]:
    """(the preferred backend's queue, another backend's) for each queue two backends of one part folder hold
    (:func:`preferred`), in ``queues``' order."""
    by_key: dict[tuple, list] = {}
    for q in queues:
        by_key.setdefault((q.backend.folder, q.key), []).append(q)
    rank = {b: i for i, b in enumerate(BACKENDS)}
    out = []
    for qs in by_key.values():
        if len(qs) > 1:  # most queues have one backend: nothing to pair
            qs = sorted(qs, key=lambda q: rank[q.backend])
            out += [(qs[0], q) for q in qs[1:]]
    return out


def unit_columns(q: "Queue", first: int, end: int) -> dict:
    """Queue offsets ``first`` .. ``end - 1`` of a queue whose unit i of a file is queue offset file.first_unit + i
    (``file`` and ``rocksdb`` backends) as dense numpy columns ``physical_offset``, ``size``, ``tags_code`` and
    ``valid`` (False where no file holds a unit there): each file read only over the window."""
    n = max(end - first, 0)
    out = {"physical_offset": np.zeros(n, np.int64), "size": np.zeros(n, np.int64),
           "tags_code": np.zeros(n, np.int64), "valid": np.zeros(n, bool)}
    for f in q.files:
        lo, hi = f.first_unit, f.first_unit + f.length // q.backend.unit_size
        a, b = max(lo, first), min(hi, end)
        if a >= b:
            continue
        w = q.backend.window(f.loc, a - lo, b - lo)
        k = len(w["valid"])
        at = slice(a - first, a - first + k)
        for c in out:
            out[c][at] = np.where(w["valid"], w[c], out[c][at]) if c != "valid" else out[c][at] | w["valid"]
    return out


def disagreements(a: "Queue", b: "Queue", window: int = 1 << 16) -> dict | None:
    """Where two backends' copies of one queue differ (both ``file``/``rocksdb``-shaped, :func:`unit_columns`):
    from the later of their first units to the end of the longer, queue offsets where one has a unit the other
    lacks or the two units name another record (physical offset, size) or tagsCode.  None when they agree; else
    the count, the first such queue offset and each side's unit there (None: none), read a window at a time."""
    ba, bb = a.bounds(), b.bounds()
    if ba is None and bb is None:
        return None
    lo = max(x[0] for x in (ba, bb) if x is not None) if ba and bb else (ba or bb)[0]
    hi = max(x[1] for x in (ba, bb) if x is not None)
    count, first = 0, None
    for start in range(lo, hi, window):
        end = min(start + window, hi)
        x, y = unit_columns(a, start, end), unit_columns(b, start, end)
        differ = (x["valid"] != y["valid"]) | ((x["valid"] & y["valid"]) & (
            (x["physical_offset"] != y["physical_offset"]) | (x["size"] != y["size"])
            | (x["tags_code"] != y["tags_code"])))
        count += int(differ.sum())
        if first is None and differ.any():
            i = int(np.flatnonzero(differ)[0])

            def unit(u):
                return (int(u["physical_offset"][i]), int(u["size"][i]), int(u["tags_code"][i])) \
                    if u["valid"][i] else None
            first = (start + i, unit(x), unit(y))
    if not count:
        return None
    return {"count": count, "queue_offset": first[0], "units": {a.backend.name: first[1], b.backend.name: first[2]},
            "compared": (lo, hi)}


def backends_of(generation: str) -> tuple[Backend, ...]:
    """The backends of rolled files (MappedFileQueues: not a database) a broker of ``generation`` ("4.x", "5.x")
    loads."""
    return tuple(b for b in BACKENDS if (b.since == "4.x" or generation == "5.x") and b.lister is _rolled_queue_files)


# ---------------------------------------------------------------------------------------------------------
# Where a broker dispatches a message's units


def holds_copies(topic: str) -> bool:
    """A queue of ``topic`` holds copies: units pointing at records of other queues, which the dispatch of a record
    naming it in INNER_MULTI_DISPATCH writes (an %LMQ% queue, store-format-5x.md section 5)."""
    return topic.startswith(L.LMQ_PREFIX)


@dataclass(frozen=True)
class Dispatch:
    """Where a broker's dispatch (CommitLogDispatcherBuildConsumeQueue) puts a message's units: its own unit in the
    queue of its topic and queue id, kept in the part folder of the backend its topic's ``queue.type`` attribute
    selects (``consumequeue/`` unless one does: ConsumeQueueStore.findOrCreateConsumeQueue); and, for a record that
    names queues to multi-dispatch to, a copy in each of them (:func:`holds_copies`).  What the audit's families ask
    of a broker, so that they and the engine name no queue kind.  Built from what a store shows (:meth:`of`)."""

    # (part folder, its topics) of the backends a topic's queue.type selects instead of ``consumequeue/``'s
    typed: tuple[tuple[str, frozenset], ...] = ()
    copies_held: bool = False  # some of the broker's queues hold copies (:func:`holds_copies`)
    multi: bool = False  # its records may name queues to multi-dispatch to, so their properties are read

    @classmethod
    def of(cls, store) -> "Dispatch":
        """A broker's dispatch as its store shows it (store_format.store.Store.topics_by_kind: the topics of each
        backend a queue.type selects, by the backend's name: a batch queue folder's and topics.json's
        queue.type=BatchCQ; its %LMQ% queues; whether it is a 5.x store or shows LMQ)."""
        kinds = store.topics_by_kind
        return cls(tuple((b.folder, kinds[b.name]) for b in BACKENDS
                         if b.queue_type not in (None, L.QUEUE_TYPE_SIMPLE) and b.name in kinds),
                   "lmq" in kinds, bool(store.multi_dispatch))

    def folder_of(self, topic: str) -> str:
        """The part folder of the queue a message of ``topic`` gets its own unit in."""
        return next((folder for folder, topics in self.typed if topic in topics), FILE.folder)

    def dispatches_to(self, folder: str) -> bool:
        """Some message of the broker's topics gets its own unit in a queue of ``folder``."""
        return folder == FILE.folder or any(f == folder and topics for f, topics in self.typed)

    def own_units_in(self, folder: str, topics) -> np.ndarray:
        """Which messages (``topics``: each one's topic, an Arrow array or a list) get their own unit in a queue of
        ``folder`` (:meth:`folder_of` each, in bulk)."""
        import pyarrow as pa
        import pyarrow.compute as pc

        topics = topics if isinstance(topics, (pa.Array, pa.ChunkedArray)) else pa.array(topics, pa.string())
        if folder == FILE.folder:  # every topic no attribute sends elsewhere
            others = sorted(t for f, ts in self.typed if f != folder for t in ts)
            if not others:
                return np.ones(len(topics), bool)
            return ~pc.is_in(topics, pa.array(others, pa.string())).to_numpy(zero_copy_only=False)
        mine = sorted(t for f, ts in self.typed if f == folder for t in ts)
        if not mine:
            return np.zeros(len(topics), bool)
        return pc.is_in(topics, pa.array(mine, pa.string())).to_numpy(zero_copy_only=False)

    def copies(self, topics) -> np.ndarray:
        """Which units (``topics``: each one's queue's topic, an Arrow array) are copies of another queue's record
        (:func:`holds_copies`): their queue and queue offset are not their record's."""
        import pyarrow.compute as pc

        if not self.copies_held or not len(topics):
            return np.zeros(len(topics), bool)
        return pc.starts_with(topics, L.LMQ_PREFIX).to_numpy(zero_copy_only=False)


# ---------------------------------------------------------------------------------------------------------
# A queue


@dataclass(frozen=True, eq=False)
class Queue:
    """One consume queue: its topic, id, backend and the files the broker loads, by name."""

    topic: str
    queue_id: int
    backend: Backend
    files: tuple[QueueFile, ...]

    @property
    def key(self) -> tuple[str, int]:
        return self.topic, self.queue_id

    @property
    def kind(self) -> str:
        """``batch`` (a BatchCQ topic's queue), ``compaction`` (a compacted topic's sparse queue), ``lmq`` (an %LMQ% queue: multi-dispatch), else ``plain``."""
        if self.backend is BATCH:
            return "batch"
        if self.backend is COMPACTION:
            return "compaction"
        return "lmq" if holds_copies(self.topic) else "plain"

    @cached_property
    def has_ext(self) -> bool:
        """A ``file`` queue with ConsumeQueueExt files (``consumequeue_ext/<topic>/<queue>/``)."""
        from .consumequeue import ext_folder

        return self.backend is FILE and bool(self.files) and bool(
            rolled.list_rolled_files(ext_folder(self.files[0].loc)))

    @cached_property
    def reader_files(self) -> list:
        """Its files as the backend's readers take them (store_format.consumequeue.CQFile, rolled.RolledFile), made
        once (recovery takes them twice: its reader's and its own)."""
        return [f.reader_file() for f in self.files]

    def window(self, f: QueueFile, first: int, end: int) -> dict:
        """Units ``first`` .. ``end - 1`` of one of its files (:attr:`Backend.window`)."""
        return self.backend.window(f.loc, first, end)

    def units(self, first: int = 0, end: int | None = None) -> Units:
        """Its units (up to each file's last written one, in file order) that cover a queue offset in ``first`` ..
        ``end - 1`` (all from ``first`` when ``end`` is None), with each unit's ``file``; a file backend's files
        wholly outside the window are not read (their names say which units they hold)."""
        import numpy as np

        parts = []
        for f in self.files:
            if self.backend.file_units is _file_units:
                lo, n = f.first_unit, -(-f.length // self.backend.unit_size)
                if lo + n <= first or (end is not None and lo >= end):
                    continue
            u = f.units()
            keep = (u.ends > first) & (u.queue_offset < end if end is not None else True)
            parts.append((f.name, u, np.flatnonzero(keep)))
        names = ("queue_offset", "physical_offset", "size", "tags_code", "kind", "valid", "file_position",
                 "batch_size", "msg_base_offset", "store_timestamp", "ext_offset", "ext_found")
        if not parts:
            empty = np.zeros(0, np.int64)
            return Units(empty, empty, empty, empty, empty.astype(np.int8), empty.astype(bool), empty, None, (),
                         file=np.zeros(0, object))
        fill = {"ext_offset": -1, "ext_found": False}  # a file without ext addresses: none of its units has one

        def column(c):
            if all(getattr(u, c) is None for _, u, _ in parts):
                return None
            return np.concatenate([getattr(u, c)[i] if getattr(u, c) is not None else np.full(len(i), fill[c])
                                   for _, u, i in parts])

        cols = {c: column(c) for c in names}
        return Units(**cols, truncated=None, kinds=parts[0][1].kinds,
                     file=np.concatenate([np.full(len(i), name, object) for name, _, i in parts]))

    def bounds(self) -> tuple[int, int] | None:
        """(min offset, max offset) of its valid units: the first one's queue offset and one past the last queue
        offset they cover (the broker's ``getMaxOffsetInQueue``); None when it has none."""
        if self.backend is ROCKSDB:  # a database queue's virtual file runs from its first key to its last
            return (self.files[0].first_unit, self.files[0].first_unit + self.files[0].length // ROCKSDB_UNIT_SIZE) \
                if self.files else None
        lo = hi = None
        for f in self.files:
            u = f.units()
            if u.valid.any():
                first, end = int(u.queue_offset[u.valid].min()), int(u.ends[u.valid].max())
                lo, hi = first if lo is None else min(lo, first), end if hi is None else max(hi, end)
        return None if lo is None else (lo, hi)

    def recover(self, units=None):
        """What ``recover()`` of its backend leaves of it (store_format.recovery.QueueStart for a ``file`` queue);
        None where the backend's recovery is not modelled.  ``units``: the reader of its files' units the caller
        shares (a ``file`` queue's store_format.consumequeue.QueueUnits over :attr:`reader_files`)."""
        return self.backend.recover(self.reader_files, units) if self.backend.recover else None

    def start_known(self, recovery):
        """What :meth:`recover` leaves of a ``file`` queue of one file whose FileRecovery (``recovery``, from whoever
        read the file) is known, without a reader (store_format.consumequeue.one_file_start); None for any other
        queue, or without it: then :meth:`recover` over :meth:`unit_reader`."""
        if self.backend is not FILE or len(self.files) != 1 or recovery is None:
            return None
        from .consumequeue import one_file_start

        return one_file_start(self.files[0].file.base_offset, recovery)

    def keeps_every_unit(self, truncated_at: int | None, known: tuple[bool, int | None] | None = None) -> bool:
        """Whether the broker's recovery keeps every written unit of a ``file`` queue of one file, told by that file's
        units (:meth:`QueueFile.units`, read with its group; or ``known``: whether recovery accepts them all and
        their greatest physical offset, as whoever read them found) without a reader: recover() accepts them all
        and, where recovery truncates the queues at ``truncated_at`` (the recovered commitlog end; None: it does
        not), every one points below it (store_format.consumequeue.finish_queue then drops none).  False for any
        other queue: ask finish_queue."""
        if self.backend is not FILE or len(self.files) != 1:
            return False
        if known is None:
            u = self.files[0].units()
            if u.recovery is None:
                return False
            known = u.recovery.valid == len(u.kind), int(u.physical_offset.max()) if len(u.kind) else None
        accepted, max_phys = known
        return accepted and (truncated_at is None or max_phys is None or max_phys < truncated_at)

    def unit_reader(self, known: dict | None = None):
        """A ``file`` queue's store_format.consumequeue.QueueUnits over :attr:`reader_files` (each file read once
        for :meth:`recover` and store_format.recovery.finish_queue); ``known``: {file index: FileRecovery} of
        files already read.  None for the other backends."""
        from .consumequeue import UNIT_KINDS, QueueUnits

        if self.backend is not FILE:
            return None
        read = {i: u for i, u in enumerate(map(_units_read_at_once, self.files)) if u is not None}
        zero = UNIT_KINDS.index("zero")
        return QueueUnits(self.reader_files, {**{i: u.recovery for i, u in read.items()}, **(known or {})},
                          {i: (u.physical_offset, u.size.astype(np.int64), u.kind != zero, u.recovery.whole)
                           for i, u in read.items()})


__all__ = ["QueueFile", "Queue", "Backend", "Units", "FILE", "BATCH", "ROCKSDB", "COMPACTION", "BACKENDS", "BY_NAME",
           "BY_FOLDER", "ManyUnits", "many_units", "MANY_BYTES", "HELD_BYTES", "backends_of", "list_queue_files",
           "group_queues", "read_once", "queue_files_by_key",
           "dispatch_end", "queue_stores", "DatabaseState", "preferred", "shared_queues", "unit_columns",
           "disagreements", "Dispatch", "holds_copies", "ROUTED_FOLDERS", "UNIT_VIEW", "BATCH_UNIT_VIEW"]
