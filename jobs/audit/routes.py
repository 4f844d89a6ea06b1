"""The routed files: per-file structures whose entries point at CommitLog offsets, each declared once as a
:class:`Route` that the engine serves with one survey task kind, one file task kind and one view of the entries a
commitlog range owns (``RangeContext.routed(route)``).  Today: the units of the queues (store_format.queues: one
route per part folder whose backends show their units, named after it, every file surveyed, windowed and shown
through its own backend: :attr:`store_format.queues.Backend.view`), index entries (``index``) and 5.x timer-log
units (``timerlog``: each points at its record on rmq_sys_wheel_timer).

The queues are routed per part folder, not as one route over every folder: the families check each folder's units
apart (their own file tasks, their own view, whose columns differ where a unit covers several queue offsets), and
each folder's survey rows are one partial table (``survey.<folder>_files``).

How a route is served: the survey reads each file's bounds and summarizes its entries as routing buckets
(``phys >> shift``: :class:`jobs.audit.plan.Buckets`), one row per file in the route's ``files`` partial; the
scan's range tasks then read, of every file, only the window of entries whose buckets meet the range and keep the
entries whose offset the range owns, so each entry is checked next to the message it points at by exactly one
task; the file tasks read whole files (groups of them) for what a file says alone.

A route declares: where its files are (``files``), how they are grouped into tasks (``group``), what the survey
reads of one file (``survey_file``: its row, and what it read, handed to the families' ``in_survey`` hooks) and of
a group (``survey_group``), what a scan task needs of a surveyed file (``routed``), and how a window of entries is
read (``window``) and shown (``view``, with the schema ``VIEW``).
"""
from __future__ import annotations

import hashlib
from collections import Counter
from dataclasses import dataclass, field
from functools import partial
from typing import Callable, NamedTuple

import numpy as np
import pyarrow as pa

from store_format import layout as L
from store_format.consumequeue import unit_bytes
from store_format.errors import ErrorKind, StoreFormatError
from store_format.fs import Location, ReadOnlyMap
from store_format.indexfile import INDEX_NAME, EntryViews, IndexFile, read_entry_bytes, read_entry_window, \
    read_header, written_entries
from store_format.plan import group_queue_files
from store_format.queues import BY_FOLDER, BY_NAME, ROUTED_FOLDERS, Backend, QueueFile, group_queues, many_units
from store_format.timer import KIND_BLANK as TIMER_BLANK, KIND_CORRUPT as TIMER_CORRUPT, KIND_ENTRY as TIMER_ENTRY, \
    UNIT_SIZE as TIMER_UNIT_SIZE, read_timer_unit_arrays, read_timer_unit_range
from decoding.columns import column

from .plan import BrokerPlan, Buckets, IndexFilePlan, bucket_of

BUCKETS = [("bucket", pa.list_(pa.int64())), ("bucket_first", pa.list_(pa.int64())),
           ("bucket_last", pa.list_(pa.int64()))]


def bucket_columns(b: Buckets) -> dict:
    return {"bucket": b.buckets.tolist(), "bucket_first": b.first.tolist(), "bucket_last": b.last.tolist()}


def buckets_of_row(row: dict) -> Buckets:
    return Buckets(*(np.array(row[name] if row[name] is not None else [], np.int64)
                     for name in ("bucket", "bucket_first", "bucket_last")))


@dataclass(frozen=True)
class RoutedFile:
    """A surveyed file as a scan task reads it: entry ``i`` of its entries region, by routing bucket, and the route's
    own parameters for reading and showing a window (``params``)."""

    loc: Location
    name: str
    buckets: Buckets
    params: dict = field(default_factory=dict)
    # what the survey found of a queue file's units (:func:`surveyed_units`): no window is made of it, so no kept
    # range's key reads it
    surveyed: "SurveyedUnits | None" = None


@dataclass(frozen=True)
class SurveyInput:
    """What a route's survey of a group of files is given: the broker, its routing, and the families' probes."""

    broker: str
    shift: int
    commitlog_end: int
    probes: dict = field(default_factory=dict)  # family name -> its survey_probes' answer for this broker


@dataclass(frozen=True)
class Route:
    name: str
    files: Callable[[BrokerPlan], list]  # the broker's files of this route, as its tasks take them
    group: Callable[[list], list[list]]  # the files each task takes
    files_partial: str  # the survey's partial table of the route's files (``survey_schema``: one row per file)
    survey_schema: pa.Schema
    survey_file: Callable  # (SurveyInput, file) -> (its row or None, what was read of it, for in_survey hooks)
    routed: Callable  # (its survey row, file) -> RoutedFile, or None when nothing of it is routed
    window: Callable  # (RoutedFile, first, end) -> numpy columns of entries first..end-1: physical_offset, valid
    view: Callable  # (RoutedFile, first, rows, window) -> pa.Table of VIEW[name], the kept rows of the window
    survey_cost: Callable  # file -> bytes the survey reads of it, for packing tasks
    scan_cost: Callable  # file -> bytes a file task reads of it
    # (SurveyInput, files, out, {id of a file: its survey_keep}): what the survey finds over a group
    survey_group: Callable | None = None
    survey_keep: Callable = lambda read: None  # what survey_group needs of what survey_file read: a few numbers
    emits: dict[str, pa.Schema] = field(default_factory=dict)  # its survey's partial tables, the files' one too
    # many files' windows read at once: ([(RoutedFile, first, end)]) -> ManyWindows, or None where it cannot (then
    # each file's ``window``); and its entries ``idx`` shown as ``view`` shows them, in the same order
    read_windows: Callable | None = None
    view_many: Callable | None = None
    # (SurveyInput, files) -> (their rows as one table, what was read of each file), ``survey_file`` of each computed
    # over the group at once; None where it cannot (then ``survey_file`` each)
    survey_files: Callable | None = None
    # (RoutedFile, first, end, lo, hi) -> (the first row of entries first..end-1 pointing into lo..hi-1, one past the
    # last, the SHA-256 of those rows' bytes and all between), or None when none does; where a window is made of its
    # rows' bytes and the file's name and params alone: what a kept range's key digests instead of making the
    # window and its view (jobs/audit/kept.py)
    span_digest: Callable | None = None


@dataclass(frozen=True)
class ManyWindows:
    """The windows of many files of one route as one set of numpy columns (``physical_offset`` and ``valid`` among
    them), in the files' order: entry ``k`` is entry ``row[k]`` of ``files[file_row[k]]``.  A commitlog range of a
    broker with 40,000 queues owns a few units of each: read and shown file by file, the fixed cost of a file (a
    dozen numpy calls, an Arrow table) was most of the scan."""

    files: list  # RoutedFile
    columns: dict
    file_row: np.ndarray
    row: np.ndarray


# ---------------------------------------------------------------------------------------------------------
# consume-queue units

CQ_FILES = pa.schema([
    ("broker", pa.string()), ("path", pa.string()), ("topic", pa.string()), ("queue_id", pa.int32()),
    ("units", pa.int64()), ("entries", pa.int64()),
    # the first entry's queue offset and the last queue offset its entries cover (store_format.queues.Units.ends)
    ("min_queue_offset", pa.int64()), ("max_queue_offset", pa.int64()), *BUCKETS,
    # what the scan's file tasks would read the file again for (jobs/audit/checks/consumequeue.py, prediction.py),
    # and a next run's survey goes on from (audit --state, jobs/audit/kept.py): what recovery needs of the file
    # (store_format.consumequeue.FileRecovery; null: its backend's recovery not modelled), the greatest physical
    # offset of its units up to the last written one, and whether any slot holds a ConsumeQueueExt address
    ("recovery_valid", pa.int64()), ("recovery_end", pa.int64()), ("refused_offset", pa.int64()),
    ("refused_size", pa.int64()), ("whole_units", pa.int64()),
    ("max_physical_offset", pa.int64()), ("ext_addressed", pa.bool_()),
    ("last_unit", pa.binary()),  # the bytes of its last unit up to the last written one, as a next run checks them
])
RECOVERY_COLUMNS = ("recovery_valid", "recovery_end", "refused_offset", "refused_size", "whole_units")
QUEUE_STARTS = pa.schema([("broker", pa.string()), ("topic", pa.string()), ("queue_id", pa.int32()),
                          ("recover_end", pa.int64()), ("max_physic_offset", pa.int64()),
                          ("refused_offset", pa.int64()), ("refused_size", pa.int64())])
#: per consume queue (AuditContext.queue_bounds, from the survey's rows; the audit's ``queues`` table)
QUEUE_BOUNDS = pa.schema([column("broker", pa.string()), column("topic", pa.string()), column("queue_id", pa.int32()),
                          column("min_offset", pa.int64()), column("max_offset", pa.int64()),
                          column("entries", pa.int64(), "units in the consume queue files")])


def _survey_queue_file(task: SurveyInput, f: QueueFile):
    if not f.loaded:
        return None, None  # never read: the file task reports the file
    u = f.units()
    entry = np.flatnonzero(u.valid)
    first, last = u.queue_offset[entry], u.ends[entry] - 1  # a unit may cover several queue offsets
    b = Buckets.of_offsets(u.physical_offset[entry], entry, task.shift, task.commitlog_end)
    lo, hi = (int(first.min()), int(last.max())) if len(first) else (None, None)
    served = f.backend.bounds(f) if f.backend.bounds is not None and len(first) else None
    if served is not None:  # a backend whose broker serves bounds from rows of their own (Backend.bounds)
        lo, hi = served[0], served[1] - 1
    return {"broker": task.broker, "path": f.loc.path, "topic": f.topic, "queue_id": f.queue_id,
            "units": len(u.kind), "entries": len(entry), "min_queue_offset": lo, "max_queue_offset": hi,
            **bucket_columns(b), **_recovery_columns(u.recovery),
            "max_physical_offset": int(u.physical_offset.max()) if len(u.kind) else None,
            "ext_addressed": u.ext_offset is not None,
            "last_unit": unit_bytes(int(u.physical_offset[-1]), int(u.size[-1]), int(u.tags_code[-1]))
            if len(u.kind) else None}, u


def resumed_queue_file(task: SurveyInput, f: QueueFile, was: dict, written: int, grown: bool):
    """:func:`_survey_queue_file` of a ``file`` queue's file that the last run surveyed (``was``: its row then, its
    buckets made under this run's shift, none past the log's end then) and that was only appended to since (its
    written bytes now end at ``written``: audit --state's look, jobs/audit/kept.py): the units past those it had,
    read and added to its row.  (The row, the file's FileRecovery), or None where it cannot go on from the row (a
    partial unit at its end, an ext address, fewer units than then): the file is then surveyed whole.  ``grown``:
    its written bytes end further than then (else it is not read at all)."""
    from store_format.consumequeue import UNIT_KINDS, FileRecovery, units_of

    unit = L.CQ_STORE_UNIT_SIZE
    whole, k0 = f.length // unit, was["units"]
    n = min(-(-written // unit), whole)
    if f.length % unit or f.backend.bounds is not None or was["ext_addressed"] or was["recovery_valid"] is None \
            or n < k0:
        return None
    row = {**was, "broker": task.broker, "path": f.loc.path, "whole_units": whole,
           **{name: np.asarray(was[name], np.int64).tolist() for name in ("bucket", "bucket_first", "bucket_last")}}
    if not grown:
        return (row, recovery_of_row(row)) if n == k0 else None
    at = max(k0 - 1, 0)  # its last unit then read again: a copy made while the broker wrote it may have held a part
    raw = f.loc.read_range(at * unit, (n - at) * unit)
    if len(raw) != (n - at) * unit or k0 and raw[:unit] != was["last_unit"]:
        return None  # cut meanwhile, or its last unit then is not what it holds now
    if n == k0:
        return row, recovery_of_row(row)
    u = units_of(memoryview(raw)[(k0 - at) * unit:])
    if (u["tags_code"] <= L.CQ_EXT_MAX_ADDR).any():
        return None  # an ext address: resolved by a whole survey
    phys, size, kind = u["physical_offset"], u["size"].astype(np.int64), u["kind"]
    entry = np.flatnonzero(kind == 0)
    offsets = f.first_queue_offset + k0 + entry
    old = buckets_of_row(was)
    new = Buckets.of_offsets(phys[entry], entry + k0, task.shift, task.commitlog_end)
    bucket, first, last = hulls(np.r_[old.buckets, new.buckets], np.r_[old.first, new.first],
                                np.r_[old.last, new.last])
    row.update(units=n, entries=was["entries"] + len(entry), last_unit=bytes(raw[-unit:]), bucket=bucket,
               bucket_first=first, bucket_last=last,
               max_physical_offset=max(int(phys.max()), was["max_physical_offset"] if k0 else int(phys.max())))
    if len(entry):
        row["min_queue_offset"] = was["min_queue_offset"] if was["entries"] else int(offsets.min())
        row["max_queue_offset"] = int(offsets.max()) if was["max_queue_offset"] is None \
            else max(was["max_queue_offset"], int(offsets.max()))
    # recovery's run of accepted units (FileRecovery.of over the file's units) goes on into the new ones only where
    # every earlier unit was accepted
    recovery = recovery_of_row(row)
    if recovery.valid == k0:
        ok = (phys >= 0) & (size > 0)
        k = len(ok) if ok.all() else int(ok.argmin())
        written_units = kind != UNIT_KINDS.index("zero")
        recovery = FileRecovery(k0 + k, int(phys[k - 1] + size[k - 1]) if k else recovery.end,
                                (int(phys[k]), int(size[k])) if k < len(ok) and written_units[k] else None, whole)
    row.update(_recovery_columns(recovery))
    return row, recovery


def hulls(bucket: np.ndarray, first: np.ndarray, last: np.ndarray) -> tuple[list, list, list]:
    """Routing buckets given more than once (with the first and last entry of each) made one each: the buckets in
    order, each with the least first and the greatest last, as lists (a survey row's)."""
    if not len(bucket):
        return [], [], []
    order = np.argsort(bucket, kind="stable")
    bucket, first, last = bucket[order], first[order], last[order]
    cut = np.flatnonzero(np.r_[True, bucket[1:] != bucket[:-1]])
    return (bucket[cut].tolist(), np.minimum.reduceat(first, cut).tolist(),
            np.maximum.reduceat(last, cut).tolist())


def _recovery_columns(r) -> dict:
    """A file's FileRecovery as its :data:`CQ_FILES` columns (None: not modelled)."""
    refused = r.refused if r is not None else None
    return {"recovery_valid": r.valid if r is not None else None, "recovery_end": r.end if r is not None else None,
            "refused_offset": refused[0] if refused else None, "refused_size": refused[1] if refused else None,
            "whole_units": r.whole if r is not None else None}


def recovery_of_row(row: dict):
    """The FileRecovery a :data:`CQ_FILES` row holds (None: not modelled)."""
    from store_format.consumequeue import FileRecovery

    if row["recovery_valid"] is None:
        return None
    refused = (row["refused_offset"], row["refused_size"]) if row["refused_offset"] is not None else None
    return FileRecovery(row["recovery_valid"], row["recovery_end"], refused, row["whole_units"])


def _survey_queue_files(task: SurveyInput, files: list[QueueFile]):
    """:func:`_survey_queue_file` of each of ``files`` whose units their backend reads at once
    (store_format.queues.many_units), computed over the group: (the rows as one table of ``CQ_FILES``, what was read
    of each file, None where nothing was); None when their units are read a file at a time, or a backend serves
    bounds of its own.  Rows, buckets and bounds are those of each file's own survey (tests/test_survey_batch.py)."""
    loaded = [f for f in files if f.loaded]
    if any(f.backend.bounds is not None for f in loaded):
        return None
    many = many_units(loaded) if loaded else None
    if many is None:
        return None
    g, counts = many.group, many.counts
    file_of = np.repeat(np.arange(len(loaded), dtype=np.int64), counts)
    entry = np.flatnonzero(g.valid)  # by file, in the file's order
    ef = file_of[entry]
    entries = np.bincount(ef, minlength=len(loaded)).astype(np.int64)
    has = entries > 0
    first_entry = np.cumsum(entries) - entries
    lo = np.zeros(len(loaded), np.int64)
    hi = np.zeros(len(loaded), np.int64)
    if len(entry):
        lo[has] = np.minimum.reduceat(g.queue_offset[entry], first_entry[has])
        hi[has] = np.maximum.reduceat(g.ends[entry] - 1, first_entry[has])
    # routing buckets of each file's entries (jobs.audit.plan.Buckets.of_offsets of each): by (file, bucket), the
    # least and greatest unit index of the entries in it
    row = entry - (np.cumsum(counts) - counts)[ef]
    nb = (task.commitlog_end >> task.shift) + 3  # buckets -1 .. last + 1
    key = ef * nb + (bucket_of(g.physical_offset[entry], task.shift, task.commitlog_end) + 1)
    order = np.argsort(key, kind="stable")
    key, row = key[order], row[order]
    cut = np.flatnonzero(np.r_[True, key[1:] != key[:-1]]) if len(key) else np.zeros(0, np.int64)
    firsts = np.minimum.reduceat(row, cut) if len(key) else np.zeros(0, np.int64)
    lasts = np.maximum.reduceat(row, cut) if len(key) else np.zeros(0, np.int64)
    buckets = key[cut] % nb - 1
    written = counts > 0
    max_phys = np.zeros(len(loaded), np.int64)
    if written.any():
        max_phys[written] = np.maximum.reduceat(g.physical_offset, (np.cumsum(counts) - counts)[written])
    offsets = pa.array(np.r_[0, np.cumsum(np.bincount(key[cut] // nb, minlength=len(loaded)))], pa.int32())
    recovery = [_recovery_columns(u.recovery) for u in many.files]
    table = pa.table({
        "broker": pa.array([task.broker] * len(loaded), pa.string()),
        "path": pa.array([f.loc.path for f in loaded], pa.string()),
        "topic": pa.array([f.topic for f in loaded], pa.string()),
        "queue_id": pa.array([f.queue_id for f in loaded], pa.int32()),
        "units": pa.array(counts, pa.int64()), "entries": pa.array(entries, pa.int64()),
        "min_queue_offset": pa.array(lo, pa.int64(), mask=~has),
        "max_queue_offset": pa.array(hi, pa.int64(), mask=~has),
        "bucket": pa.ListArray.from_arrays(offsets, pa.array(buckets, pa.int64())),
        "bucket_first": pa.ListArray.from_arrays(offsets, pa.array(firsts, pa.int64())),
        "bucket_last": pa.ListArray.from_arrays(offsets, pa.array(lasts, pa.int64())),
        **{name: pa.array([r[name] for r in recovery], pa.int64()) for name in RECOVERY_COLUMNS},
        "max_physical_offset": pa.array(max_phys, pa.int64(), mask=~written),
        "ext_addressed": pa.array([u.ext_offset is not None for u in many.files], pa.bool_()),
        "last_unit": pa.array(_last_units(g, counts), pa.binary()),
    }, schema=CQ_FILES)
    read = dict(zip(map(id, loaded), many.files))
    return table, [read.get(id(f)) for f in files]


def _last_units(g, counts: np.ndarray) -> list:
    """Each file's last unit's bytes (None: it has none) of a group read at once (``g``, ``counts`` units a file)."""
    last = (np.cumsum(counts) - 1).tolist()
    return [unit_bytes(int(g.physical_offset[i]), int(g.size[i]), int(g.tags_code[i])) if n else None
            for i, n in zip(last, counts.tolist())]


def _queue_starts(task: SurveyInput, files: list[QueueFile], out, read: dict) -> None:
    """What recovery's walk of each whole queue of the group leaves (store_format.queues.Queue.recover): where the
    broker's recovery will start it, from what the survey read of each file (``read``: id of the file -> its
    Units' ``recovery``), so no file is read twice."""
    cols = {name: [] for name in QUEUE_STARTS.names[1:]}
    for q in group_queues(files):
        s = q.start_known(read.get(id(q.files[0])))  # a queue of one file read here: no reader made
        if s is None:
            s = q.recover(q.unit_reader({i: read[id(f)] for i, f in enumerate(q.files) if read.get(id(f)) is not None}))
        if s is None:
            continue  # a backend whose recovery is not modelled
        for name, value in zip(cols, (q.topic, q.queue_id, s.recover_end, s.max_physic_offset,
                                      s.refused[0] if s.refused else None, s.refused[1] if s.refused else None)):
            cols[name].append(value)
    n = len(cols["topic"])
    out.partial("survey.queue_starts", pa.table({"broker": pa.repeat(pa.scalar(task.broker), n), **cols},
                                                schema=QUEUE_STARTS))


def _recovery_of(u) -> object:
    """What recovery needs of a surveyed queue file (store_format.queues.Units.recovery; None: not read)."""
    return None if u is None else u.recovery


def view_schema(folder: str) -> pa.Schema:
    """The view of a part folder's units: its backends' (store_format.queues.Backend.view), one for them all."""
    views = {b.view for b in BY_FOLDER[folder]}
    if len(views) != 1:
        raise ValueError(f"the backends of {folder}/ show their units differently: {sorted(map(str, views))}")
    return pa.schema([(name, pa.type_for_alias(kind)) for name, kind in views.pop()])


def _queue_route(folder: str, **more) -> Route:
    """The route of one part folder's queue files, of every backend kept there, grouped by whole queues; every file
    surveyed, routed, windowed and shown through its own backend (store_format.queues)."""
    return Route(name=folder, files=partial(_folder_files, folder), group=partial(group_queue_files, cost=_stored),
                 survey_keep=_recovery_of,
                 files_partial=f"survey.{folder}_files", survey_schema=CQ_FILES, survey_file=_survey_queue_file,
                 survey_files=_survey_queue_files,
                 routed=_routed_queue_file, window=partial(_backend_window, folder),
                 view=partial(_unit_view, folder, view_schema(folder)), survey_cost=_stored, scan_cost=_stored,
                 read_windows=partial(_queue_windows, folder),
                 view_many=partial(_queue_view_many, folder, view_schema(folder)),
                 emits={f"survey.{folder}_files": CQ_FILES, **more.pop("emits", {})}, **more)


def _folder_files(folder: str, plan: BrokerPlan) -> list[QueueFile]:
    """The broker's files of one part folder (those of the backend it reads where two hold a queue)."""
    return [f for f in plan.queue_files if f.backend.folder == folder]


def _backend_of(folder: str, f: RoutedFile) -> Backend:
    """The backend of a routed file (its ``backend`` param; the folder's first when it names none)."""
    return BY_NAME[f.params["backend"]] if "backend" in f.params else BY_FOLDER[folder][0]


def _backend_window(folder: str, f: RoutedFile, first: int, end: int) -> dict:
    return _backend_of(folder, f).window(f.loc, first, end)


def _queue_windows(folder: str, wanted: list) -> ManyWindows | None:
    """The windows of many files of one part folder read at once by their backend (``Backend.windows``); None when
    their backends differ or theirs reads a file at a time."""
    backends = {_backend_of(folder, f) for f, _, _ in wanted}
    if len(backends) != 1 or next(iter(backends)).windows is None:
        return None
    columns, counts = next(iter(backends)).windows([(f.loc, first, end) for f, first, end in wanted])
    firsts = np.array([max(first, 0) for _, first, _ in wanted], np.int64)
    file_row = np.repeat(np.arange(len(wanted), dtype=np.int64), counts)
    starts = np.cumsum(counts) - counts
    row = firsts[file_row] + np.arange(len(file_row), dtype=np.int64) - starts[file_row]
    return ManyWindows([f for f, _, _ in wanted], columns, file_row, row)


def _queue_view_many(folder: str, schema: pa.Schema, many: ManyWindows, idx: np.ndarray) -> pa.Table:
    """Entries ``idx`` of :class:`ManyWindows` of one part folder as :func:`_unit_view` shows each file's: the rows
    of every file in turn."""
    files, fi, row = many.files, many.file_row[idx], many.row[idx]
    backend = _backend_of(folder, files[0])  # one for them all (_queue_windows)
    per_file = lambda values, typ: pa.array(values, typ).take(pa.array(fi))  # noqa: E731
    made = {
        "topic": lambda: per_file([f.params["topic"] for f in files], pa.string()),
        "queue_id": lambda: per_file([f.params["queue_id"] for f in files], pa.int32()),
        "file": lambda: per_file([f.name for f in files], pa.string()),
        "file_position": lambda: pa.array(row * backend.unit_size, pa.int64()),
    }
    if backend.dense:
        made["queue_offset"] = lambda: pa.array(
            np.array([f.params["first_queue_offset"] for f in files], np.int64)[fi] + row, pa.int64())
    return pa.table({name: made[name]() if name in made else pa.array(many.columns[name][idx])
                     for name in schema.names}, schema=schema)


def _unit_view(folder: str, schema: pa.Schema, f: RoutedFile, first: int, idx: np.ndarray, w: dict) -> pa.Table:
    """Units ``first + idx`` of a window as the folder's view shows them: the file's topic, queue, name and byte
    positions, a dense backend's queue offsets from the unit index, every other column the window's."""
    backend = _backend_of(folder, f)
    k = len(idx)
    made = {
        "topic": lambda: pa.repeat(pa.scalar(f.params["topic"], pa.string()), k),
        "queue_id": lambda: pa.repeat(pa.scalar(f.params["queue_id"], pa.int32()), k),
        "file": lambda: pa.repeat(pa.scalar(f.name, pa.string()), k),
        "file_position": lambda: pa.array((first + idx) * backend.unit_size, pa.int64()),
    }
    if backend.dense:
        made["queue_offset"] = lambda: pa.array(f.params["first_queue_offset"] + first + idx, pa.int64())
    return pa.table({name: made[name]() if name in made else pa.array(w[name][idx]) for name in schema.names},
                    schema=schema)


def _routed_queue_file(row: dict | None, f: QueueFile) -> RoutedFile | None:
    if row is None or not row["entries"]:
        return None
    return RoutedFile(f.loc, f.name, buckets_of_row(row), {
        "topic": f.topic, "queue_id": f.queue_id, "first_queue_offset": f.first_queue_offset,
        "backend": f.backend.name}, surveyed_units(row))


class SurveyedUnits(NamedTuple):
    """What the survey found of a queue file's units (:func:`surveyed_units`)."""

    units: int  # up to the last written one
    accepted: bool  # recovery accepts them all
    max_physical_offset: int | None
    ext_addressed: bool  # a slot holds a ConsumeQueueExt address


def surveyed_units(row: dict) -> SurveyedUnits | None:
    """What the survey found of a queue file's units (its :data:`CQ_FILES` row); None where its backend's recovery is
    not modelled.  A file task needs not read a file again to learn them."""
    if row["recovery_valid"] is None:
        return None
    return SurveyedUnits(row["units"], row["recovery_valid"] == row["units"], row["max_physical_offset"],
                         row["ext_addressed"])


def told_by_survey(routed: list, files: list) -> set[str]:
    """The paths of ``files`` (a file task's) whose units no hook of the scan reads when the survey found them all
    accepted, without an ext address (``routed``: the route's RoutedFile of each surveyed file with entries): a
    queue of one such file (recovery's walk of a queue of several reads them)."""
    ok = {r.loc.path for r in routed if r.surveyed is not None and r.surveyed.accepted and not r.surveyed.ext_addressed}
    alone = Counter((f.topic, f.queue_id) for f in files)
    return {f.loc.path for f in files if f.loc.path in ok and alone[f.topic, f.queue_id] == 1}


def _length(f) -> int:
    return f.length


def _stored(f: QueueFile) -> int:
    """A queue file's cost: the bytes it holds (QueueFile.stored_bytes), not its preallocated length."""
    return f.stored_bytes


# ---------------------------------------------------------------------------------------------------------
# index entries

INDEX_FILES = pa.schema([
    ("broker", pa.string()), ("path", pa.string()), ("name", pa.string()), ("error", pa.string()),
    ("hash_slot_num", pa.int32()), ("index_num", pa.int32()), ("count", pa.int64()),
    ("begin_timestamp", pa.int64()), ("end_timestamp", pa.int64()), ("begin_phy_offset", pa.int64()),
    ("end_phy_offset", pa.int64()), ("index_count", pa.int32()), *BUCKETS,
])
ENTRIES = pa.schema([("file", pa.string()), ("entry", pa.int32()), ("key_hash", pa.int32()),
                     ("physical_offset", pa.int64()), ("time_diff", pa.int32()), ("store_time", pa.int64()),
                     ("prev_index", pa.int32())])


def _header_row(h) -> dict:
    return {"begin_timestamp": h.begin_timestamp, "end_timestamp": h.end_timestamp,
            "begin_phy_offset": h.begin_phy_offset, "end_phy_offset": h.end_phy_offset, "index_count": h.index_count}


def _survey_index_file(task: SurveyInput, p: IndexFilePlan):
    """Header, geometry and the routing buckets of the entries (1 .. count-1) of one index file."""
    row = {"broker": task.broker, "path": p.loc.path, "name": p.name}
    if not INDEX_NAME.match(p.name):
        row["error"] = ErrorKind.BAD_FILE_NAME.value
        return row, None
    local = p.loc.as_path()  # a Path, else a fs.StorePath read through pyarrow.fs
    try:
        f = IndexFile(local, p.hash_slot_num, p.index_num)
    except StoreFormatError as e:
        row["error"] = e.kind.value
        with ReadOnlyMap(local) as m:  # the header, when the file holds one
            if len(m) >= L.INDEX_HEADER_SIZE:
                row.update(_header_row(read_header(m.buf)))
        return row, None
    with f, ReadOnlyMap(local) as m:
        h = f.header
        count = written_entries(m, f.hash_slot_num, min(max(h.index_count, 1), f.index_num))
        v = EntryViews(m.buf, f.hash_slot_num, count)
        b = Buckets.of_offsets(v.physical_offset[1:], 1, task.shift, task.commitlog_end)  # entry 0 is never used
        del v
        row.update(hash_slot_num=f.hash_slot_num, index_num=f.index_num, count=count, **_header_row(h),
                   **bucket_columns(b))
    return row, None


def _entry_window(f: RoutedFile, first: int, end: int) -> dict:
    e = read_entry_window(f.loc, f.params["hash_slot_num"], first, end)
    return {**e, "valid": np.ones(len(e["physical_offset"]), bool)}


def _entry_span_digest(f: RoutedFile, first: int, end: int, lo: int, hi: int) -> tuple | None:
    raw = read_entry_bytes(f.loc, f.params["hash_slot_num"], first, end)
    phys = np.frombuffer(raw, L.INDEX_ENTRY.dtype(), len(raw) // L.INDEX_ENTRY_SIZE)["physical_offset"]
    inside = np.flatnonzero((phys >= lo) & (phys < hi))
    if not len(inside):
        return None
    a, b = int(inside[0]), int(inside[-1]) + 1
    return first + a, first + b, hashlib.sha256(memoryview(raw)[a * L.INDEX_ENTRY_SIZE:b * L.INDEX_ENTRY_SIZE]).digest()


def _entry_view(f: RoutedFile, first: int, idx: np.ndarray, w: dict) -> pa.Table:
    k = len(idx)
    td = w["time_diff"][idx]
    return pa.table({
        "file": pa.repeat(pa.scalar(f.name, pa.string()), k), "entry": pa.array((first + idx).astype(np.int32)),
        "key_hash": pa.array(w["key_hash"][idx]), "physical_offset": pa.array(w["physical_offset"][idx]),
        "time_diff": pa.array(td), "store_time": pa.array(f.params["begin_timestamp"] + td.astype(np.int64) * 1000),
        "prev_index": pa.array(w["prev_index"][idx]),
    }, schema=ENTRIES)


def _index_files(plan: BrokerPlan) -> list[IndexFilePlan]:
    return plan.index_files


def _one_each(files: list) -> list[list]:
    return [[f] for f in files]


def _routed_index_file(row: dict | None, f: IndexFilePlan) -> RoutedFile | None:
    if row is None or row["error"] is not None or (row["count"] or 0) <= 1:
        return None
    return RoutedFile(f.loc, f.name, buckets_of_row(row), {"hash_slot_num": row["hash_slot_num"],
                                                           "begin_timestamp": row["begin_timestamp"]})


def _a_few_bytes_an_entry(f: IndexFilePlan) -> int:
    return 1 << 20


def _file_size(f: IndexFilePlan) -> int:
    return f.loc.size()  # the chain walk reads the whole file


INDEX = Route(
    name="index", files=_index_files, group=_one_each,
    files_partial="survey.index_files", survey_schema=INDEX_FILES, survey_file=_survey_index_file,
    routed=_routed_index_file, window=_entry_window, view=_entry_view, survey_cost=_a_few_bytes_an_entry,
    scan_cost=_file_size, emits={"survey.index_files": INDEX_FILES}, span_digest=_entry_span_digest)


# ---------------------------------------------------------------------------------------------------------
# timer-log units (5.x): each entry points at its record on rmq_sys_wheel_timer

TIMERLOG_FILES = pa.schema([
    ("broker", pa.string()), ("path", pa.string()), ("name", pa.string()), ("base_offset", pa.int64()),
    ("length", pa.int64()), ("units", pa.int64()), ("entries", pa.int64()), ("blanks", pa.int64()),
    ("corrupt", pa.int64()), ("written_end", pa.int64()), *BUCKETS,
])
TIMER_UNITS = pa.schema([("file", pa.string()), ("file_position", pa.int64()), ("timerlog_offset", pa.int64()),
                         ("prev_pos", pa.int64()), ("magic", pa.int32()), ("write_time_ms", pa.int64()),
                         ("delay_ms", pa.int32()), ("slot_time_ms", pa.int64()), ("physical_offset", pa.int64()),
                         ("store_size", pa.int32()), ("real_topic_hash", pa.int32())])


def _survey_timer_file(task: SurveyInput, f):
    """A timer-log file walked whole (its units' kinds depend on where its written bytes end): its counts and the
    routing buckets of its entries, whose row in the walk is their unit number (units sit at 52-byte steps)."""
    u = read_timer_unit_arrays(f)
    entry = np.flatnonzero(u.kind == TIMER_ENTRY)
    b = Buckets.of_offsets(u.physical_offset[entry], entry, task.shift, task.commitlog_end)
    ends = u.file_position + np.where(u.kind == TIMER_BLANK, u.size, TIMER_UNIT_SIZE)
    return {"broker": task.broker, "path": f.loc.path, "name": f.name, "base_offset": f.base_offset,
            "length": f.length, "units": len(u), "entries": len(entry), "blanks": int((u.kind == TIMER_BLANK).sum()),
            "corrupt": int((u.kind == TIMER_CORRUPT).sum()),
            "written_end": f.base_offset + int(ends.max()) if len(u) else f.base_offset, **bucket_columns(b)}, u


def _routed_timer_file(row: dict | None, f) -> RoutedFile | None:
    if row is None or not row["entries"]:
        return None
    return RoutedFile(f.loc, f.name, buckets_of_row(row), {"base_offset": f.base_offset})


def _timer_unit_window(f: RoutedFile, first: int, end: int) -> dict:
    u = read_timer_unit_range(f.loc, first * TIMER_UNIT_SIZE, (end - first) * TIMER_UNIT_SIZE,
                              base_offset=f.params["base_offset"])
    return {"file_position": u.file_position, "prev_pos": u.prev_pos, "magic": u.magic,
            "write_time_ms": u.write_time_ms, "delay_ms": u.delay_ms, "physical_offset": u.physical_offset,
            "store_size": u.store_size, "real_topic_hash": u.real_topic_hash, "valid": u.kind == TIMER_ENTRY}


def _timer_unit_view(f: RoutedFile, first: int, idx: np.ndarray, w: dict) -> pa.Table:
    k = len(idx)
    pos = w["file_position"][idx]
    write, delay = w["write_time_ms"][idx], w["delay_ms"][idx]
    return pa.table({
        "file": pa.repeat(pa.scalar(f.name, pa.string()), k), "file_position": pa.array(pos),
        "timerlog_offset": pa.array(f.params["base_offset"] + pos), "prev_pos": pa.array(w["prev_pos"][idx]),
        "magic": pa.array(w["magic"][idx]), "write_time_ms": pa.array(write), "delay_ms": pa.array(delay),
        "slot_time_ms": pa.array(write + delay.astype(np.int64)), "physical_offset": pa.array(w["physical_offset"][idx]),
        "store_size": pa.array(w["store_size"][idx]), "real_topic_hash": pa.array(w["real_topic_hash"][idx]),
    }, schema=TIMER_UNITS)


def _timer_files(plan: BrokerPlan) -> list:
    return plan.timer_log_files


TIMERLOG = Route(
    name="timerlog", files=_timer_files, group=_one_each,
    files_partial="survey.timerlog_files", survey_schema=TIMERLOG_FILES, survey_file=_survey_timer_file,
    routed=_routed_timer_file, window=_timer_unit_window, view=_timer_unit_view, survey_cost=_length,
    scan_cost=_length, emits={"survey.timerlog_files": TIMERLOG_FILES})


# ---------------------------------------------------------------------------------------------------------
# the routes

# one per queue folder whose backends show their units (store_format.queues.ROUTED_FOLDERS), each survey also
# saying where recovery starts each queue of its group (none for a backend whose recovery is not modelled)
QUEUE_ROUTES = tuple(_queue_route(folder, survey_group=_queue_starts, emits={"survey.queue_starts": QUEUE_STARTS})
                     for folder in ROUTED_FOLDERS)
CONSUMEQUEUE = QUEUE_ROUTES[0]  # the queues of every topic no attribute sends elsewhere

ROUTES = {r.name: r for r in (CONSUMEQUEUE, INDEX, TIMERLOG, *QUEUE_ROUTES[1:])}
VIEW = {**{r.name: view_schema(r.name) for r in QUEUE_ROUTES}, INDEX.name: ENTRIES, TIMERLOG.name: TIMER_UNITS}
UNITS = VIEW[CONSUMEQUEUE.name]

__all__ = ["Route", "RoutedFile", "SurveyInput", "ROUTES", "VIEW", "QUEUE_ROUTES", "CONSUMEQUEUE", "INDEX",
           "TIMERLOG", "CQ_FILES", "RECOVERY_COLUMNS", "resumed_queue_file", "recovery_of_row", "hulls", "QUEUE_STARTS",
           "QUEUE_BOUNDS", "INDEX_FILES", "UNITS", "ENTRIES",
           "TIMERLOG_FILES", "TIMER_UNITS", "buckets_of_row", "bucket_columns", "view_schema"]
