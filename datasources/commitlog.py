"""``rocketmq-commitlog``: CommitLog segments read in parallel, split into byte ranges on record boundaries.

Partitions are (segment, byte range of ``splitSize``).  The walk of a segment is a deterministic chain: from
a position, ``frame_at`` says message (go on by its size), blank (the segment ends) or stop, and after a stop
the salvage walk resyncs at ``find_next_frame`` (the first *confirmed* frame: magic, PHYSICALOFFSET = base +
position, framing, and a matching body CRC or, for an empty body, another frame after it).  A confirmed frame
cannot be jumped over by that chain (a message step would need overlapping records, a resync step stops at the
first one), so every confirmed frame lies on the walk from the segment start.  A task therefore starts at the
first confirmed frame at or after its range start (the first range at 0, where the walk starts), follows
store_format's salvage walk and stops at the first confirmed frame at or after its range end, where the next
task starts: every frame and span of the walk is emitted by exactly one task, whatever the split size.  No
framing happens here; store_format does it all, in bulk (``salvage_arrays`` with the compiled framer over
runs of valid messages, the scalar ``frame_at`` for the rest), and batches are built from its arrays, so a
task does no per-record Python.

Two facts are only known by walking from a segment's start: where the recovery walk stops (its first
stop or blank) and where the salvage walk ends (its first blank; stale bytes may follow).  They are the
"segment ends".  :func:`read_commitlog` gets them in a first pass (:func:`commitlog_ends`: a Spark pass that
ships only stop and blank rows, or in local mode the same walk in the driver, a range per core at a time), then
hands them to the second pass in the ``segmentEnds`` option, so every task knows them and ranges past the
recovery end are never read; the first pass has also checked every body CRC before the recovery stop, so
the second pass does not check those again (``crc_checked_before``: the CRC is most of the framing work).
A segment that is a single range needs neither: its one task walks it from the start and finds its ends
itself, so only segments split into several ranges go through the first pass.  ``spark.read.format(
"rocketmq-commitlog")`` without ``segmentEnds`` (or with ends that lack a segment it cuts) walks those
segments in the planner, a range per core at a time, on every query; use :func:`read_commitlog` for large
dumps.

Ranges (:func:`plan_ranges`): each segment is cut over its written data (a broker's newest segment up to
:func:`written_end`, the others whole) into equal ranges of at most ``splitSize``, the last one running to the
segment's end; by default the size comes from the data and the session's parallelism (about TASKS_PER_CORE
ranges a core, MIN_SPLIT_SIZE to DEFAULT_SPLIT_SIZE), so both cores of local[2] work whatever the dump's shape.
The framing runs compiled (``udfs.kernels.CompiledFramer``: every check of ``frame_at``, the body CRC with no
Python call per record), so a first pass costs little beside the rows' transport.

Rows: one per walk item, ``kind`` = message | blank | stop (where a walk stopped: damage, or END_OF_DATA
for the zero-filled tail, summarized in one row whose ``length`` is the tail's) | corrupt (bytes the salvage
walk could not frame, never the zero tail after them, or a segment file with a bad name or length).
``materialize`` chooses what else a row carries: ``positions``
(nothing), ``frames`` (the record bytes), ``headers`` (decoded columns without the body: the default, so that a
plain ``load()`` has the columns people join and filter on -- topic, queue id and offset, keys, tags, store
time) or ``decoded`` (every canonical column, from udfs.kernels), since Python sources get no column pruning; a
job that needs less says so (``positions`` to count or locate, ``frames`` to compare bytes); with ``headers`` or
``decoded``, ``columns`` (comma-separated names) ships only the decoded columns asked for, which is most of the
cost of a decoded read (Spark's conversion of each column) when a job uses a few.
"""
from __future__ import annotations

import errno
import functools
import json
import math
import os
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql.datasource import EqualTo, GreaterThan, GreaterThanOrEqual, In, InputPartition, LessThan, \
    LessThanOrEqual

from store_format import layout as L
from store_format.commitlog import END_OF_DATA, KIND_BLANK, KIND_CORRUPT, KIND_MESSAGE, KIND_STOP, KINDS, \
    SEGMENT_NAME, FrameArrays, ReadOnlyMap, SalvageSpan, find_next_frame, infer_segment_size, salvage_arrays
from store_format.errors import ErrorKind, RecordError
from store_format.fs import open_fd
from udfs.columns import column

from .base import StoreDataSource, StoreReader, option_bool, option_choice, option_int, option_size, parse_mode
from .storepaths import Location, PartInput, find_inputs

FORMAT = "rocketmq-commitlog"
WALKS = ("recovery", "salvage")
MATERIALIZE = ("positions", "frames", "headers", "decoded")
DEFAULT_MATERIALIZE = "headers"  # what a plain load() carries: the message columns but the body
# Default ranges (range_sizes): the written data of every segment (the newest one's up to written_end: ranges
# past it would each scan the zero tail) shared out as about TASKS_PER_CORE ranges per core of the session, each
# MIN_SPLIT_SIZE..DEFAULT_SPLIT_SIZE.  Every Spark task costs ~70 ms of CPU before it reads a byte (worker
# hand-off, unpickling), so ranges stay >= 32 MiB; what a job builds from one partition (a cached table, an Arrow
# UDF's input) grows with the range (bench/run.py's audit of a single 1 GiB segment ran out of a 2 GiB heap), so
# they stay <= 256 MiB.  A segment cut into several ranges needs the first pass (its ends), which the compiled
# framer makes cheap (~0.35 CPU s per GiB with every body CRC, bench/bench_datasource.py --scan).
# Ranged (non-local) reads hold a range plus 2 x maxRecordSize in memory per task.
DEFAULT_SPLIT_SIZE = 256 << 20
MIN_SPLIT_SIZE = 32 << 20
TASKS_PER_CORE = 2
DEFAULT_BATCH_ROWS = 16384
# Ranged (non-mmap) reads fetch this much past a range end; a decision closer than this to the end of what
# was read is re-made with more bytes.  It bounds a legitimate record: 4 MiB body + 64 KiB (broker >= 4.9.5).
DEFAULT_MAX_RECORD_SIZE = L.DEFAULT_MAX_MESSAGE_SIZE + (64 << 10)

BASE_COLUMNS = pa.schema([  # every row's, whatever it materializes
    column("broker", pa.string()), column("segment", pa.string()), column("file_position", pa.int64()),
    column("physical_offset", pa.int64()),
    column("kind", pa.string(), "what the walk found there: `message`, `blank`, `stop` or `corrupt`"),
    column("store_size", pa.int32()),
    column("length", pa.int64(), "bytes the row covers: a message's or blank's TOTALSIZE; for a stop, the rest "
                                 "of the segment file from there; for a corrupt span, its length"),
    column("beyond_first_stop", pa.bool_(), "found by the salvage walk past the point where the broker's recovery "
                                            "walk stops"),
    column("reason", pa.string(), "stop and corrupt rows: why (END_OF_DATA, BAD_CRC, ...)"),
    column("field", pa.string(), "stop and corrupt rows: the field that failed"),
    column("detail", pa.string(), "stop and corrupt rows: what was found there"),
    column("excerpt_hex", pa.string(), "corrupt rows: the span's first bytes, in hex"),
])
FRAME = column("frame", pa.binary(), "materialize=frames: the record's bytes")
_BASE_NAMES = tuple(BASE_COLUMNS.names)


def _kernel_columns(materialize: str, decompress: bool, columns: tuple[str, ...] | None = None) -> tuple[str, ...]:
    """The decoded columns a row carries beyond the base ones: every default kernel column, or ``columns``."""
    if materialize not in ("headers", "decoded"):
        return ()
    from udfs import kernels as K

    skip = set(_BASE_NAMES) | set(K.STATUS_COLUMNS) | ({"body"} if materialize == "headers" else set())
    cols = tuple(c for c in (K.DEFAULT_COLUMNS if columns is None else columns) if c not in skip)
    if decompress and materialize == "decoded":
        cols += tuple(c for c in K.DECOMPRESS_COLUMNS if c not in cols)
    return cols


def parse_columns(value: str | None, materialize: str) -> tuple[str, ...] | None:
    """The ``columns`` option: a comma-separated choice of decoded columns (None: all of them).  Python
    sources get no column pruning, so this is how a reader ships only what it uses to the JVM."""
    if value is None or value.strip().lower() in ("", "all"):
        return None
    from udfs import kernels as K

    cols = tuple(dict.fromkeys(c.strip() for c in value.split(",") if c.strip()))
    if materialize not in ("headers", "decoded"):
        raise ValueError(f"option columns={value!r} chooses decoded columns: use it with materialize=headers or "
                         f"decoded (materialize is {materialize})")
    choices = [c for c in K.ALL_COLUMNS if c not in K.STATUS_COLUMNS and
               not (materialize == "headers" and c in ("body",) + K.DECOMPRESS_COLUMNS)]
    unknown = [c for c in cols if c not in choices and c not in _BASE_NAMES]
    if unknown:
        raise ValueError(f"option columns: unknown {'or body-bearing ' if materialize == 'headers' else ''}columns "
                         f"{unknown} for materialize={materialize}; choose from {choices} (the base columns "
                         f"{list(_BASE_NAMES)} are always there)")
    return cols


def arrow_schema(materialize: str, decompress: bool = False, columns: tuple[str, ...] | None = None) -> pa.Schema:
    fields = list(BASE_COLUMNS)
    if materialize == "frames":
        fields.append(FRAME)
    kcols = _kernel_columns(materialize, decompress, columns)
    if kcols:
        from udfs import kernels as K

        fields += list(K.message_schema(kcols))
    return pa.schema(fields)


# ---------------------------------------------------------------------------------------------------------
# Options


@dataclass(frozen=True)
class Options:
    split_size: int | None  # None: the default (range_sizes)
    walk: str
    mode: str
    materialize: str
    check_crc: bool
    decompress: bool
    segment_size: int | None
    batch_rows: int
    excerpt_bytes: int
    io: str  # auto (mmap for local files) | ranged
    max_record_size: int
    delay_levels: str | None
    columns: tuple[str, ...] | None  # decoded columns to ship (None: all)
    push_filters: bool  # prune by the query's filters (see CommitLogReader.pushFilters)
    ends: str  # "planner" | "unresolved" | JSON {"broker/segment": [first_stop, first_blank(, crc_checked_before)]}
    parallelism: int | None  # the session's cores, for the default range size (None: this machine's)

    @classmethod
    def parse(cls, options) -> "Options":
        materialize = option_choice(options, "materialize", MATERIALIZE, DEFAULT_MATERIALIZE)
        return cls(
            split_size=option_size(options, "splitSize"),
            walk=option_choice(options, "walk", WALKS, "recovery"),
            mode=parse_mode(options),
            materialize=materialize,
            check_crc=option_bool(options, "checkCrc", True),
            decompress=option_bool(options, "decompress", False),
            segment_size=option_size(options, "segmentSize"),
            batch_rows=option_int(options, "batchRows", DEFAULT_BATCH_ROWS),
            excerpt_bytes=option_int(options, "excerptBytes", 32, minimum=0),
            io=option_choice(options, "io", ("auto", "ranged"), "auto"),
            max_record_size=option_size(options, "maxRecordSize", DEFAULT_MAX_RECORD_SIZE),
            delay_levels=options.get("messageDelayLevel"),
            columns=parse_columns(options.get("columns"), materialize),
            push_filters=option_bool(options, "pushFilters", False),
            ends=options.get("segmentEnds", "planner"),
            parallelism=option_int(options, "parallelism"),
        )


# ---------------------------------------------------------------------------------------------------------
# Planning


@dataclass
class SegmentRange(InputPartition):
    """Walk items of one segment whose position lies in [start, next range's sync point)."""

    broker: str
    loc: Location
    name: str
    base: int | None  # None: the name is not a segment name, the file is only reported
    length: int
    start: int
    end: int
    last: bool
    problems: tuple  # ((ErrorKind value, message), ...) about the file, emitted by its first range
    first_stop: int | None = None  # the segment ends; None = unknown (unresolved)
    first_blank: int | None = None
    resolved: bool = False
    crc_checked_before: int = 0  # the pass that found the ends checked every body CRC before this position
    finds_ends: bool = False  # the range is the whole segment: the task's own walk gives the ends


@dataclass(frozen=True)
class SegmentFile:
    broker: str
    loc: Location
    name: str
    base: int | None
    length: int
    problems: tuple


def list_segment_files(inputs: list[PartInput], segment_size: int | None) -> list[SegmentFile]:
    """Every file of the commitlog folders, with what is wrong with its name or length."""
    out = []
    for inp in inputs:
        infos = [inp.loc.info()] if inp.single_file else [i for i in inp.loc.list() if i.is_file]
        named = [i for i in infos if SEGMENT_NAME.match(i.base_name)]
        size = segment_size or infer_segment_size([(int(i.base_name), i.size) for i in named])
        for i in infos:
            loc = Location(inp.loc.fs, i.path)
            if not SEGMENT_NAME.match(i.base_name):
                out.append(SegmentFile(inp.broker, loc, i.base_name, None, i.size, (
                    (ErrorKind.BAD_FILE_NAME.value, "a commitlog file name must be its 20-digit base offset; "
                     "not read (no base offset to check records against)"),)))
                continue
            problems = ()
            if size and i.size != size:
                problems = ((ErrorKind.BAD_GEOMETRY.value, f"segment is {i.size} bytes, the store's segment "
                             f"size is {size} (the broker refuses to load it); read anyway"),)
            elif not i.size:  # no size to compare with when it is the only segment: empty is never right
                problems = ((ErrorKind.BAD_GEOMETRY.value, "segment file is empty: the broker preallocates every "
                             "segment (mappedFileSizeCommitLog) and refuses to load an empty one"),)
            out.append(SegmentFile(inp.broker, loc, i.base_name, int(i.base_name), i.size, problems))
    return out


_PAGE = 4096


def written_end(loc: Location, length: int) -> int:
    """Where a segment's written bytes seem to end: past its last non-zero 4 KiB page, from the file's data extents
    (SEEK_DATA / SEEK_HOLE: a sparse file's holes are never read) and a binary search over the pages of the last
    one, as if data were followed by zeros.  For sharing work out only: a zeroed page inside the data can make it
    early, so the walk never trusts it (the range after it still runs to the segment's end)."""
    lo, hi = 0, length
    local = loc.local_path
    fd = open_fd(local) if local is not None else None  # the read-only way in: no FIFO or device waited on
    try:
        if fd is not None:
            pos, last, told = 0, None, True
            while pos < length:
                try:
                    start = os.lseek(fd, pos, os.SEEK_DATA)
                    end = min(os.lseek(fd, start, os.SEEK_HOLE), length)
                except OSError as e:
                    told = e.errno == errno.ENXIO  # no data past pos; anything else: the file system cannot say
                    break
                last, pos = (start, end), end
            if last is None and told:
                return 0  # only holes
            if last is not None and told:
                lo, hi = last

        def zero_page(at: int) -> bool:
            n = min(_PAGE, length - at)
            data = os.pread(fd, n, at) if fd is not None else loc.read_range(at, n)
            return not any(data)

        first, last_page = lo // _PAGE, -(-hi // _PAGE)  # pages [first, last_page) may hold the end
        while first < last_page:  # the first page from which every page is zero
            mid = (first + last_page) // 2
            if zero_page(mid * _PAGE):
                last_page = mid
            else:
                first = mid + 1
        return min(length, first * _PAGE)
    finally:
        if fd is not None:
            os.close(fd)


def segment_data(files: list[SegmentFile]) -> dict[tuple[str, str], int]:
    """The bytes each segment's ranges are cut over: a broker's newest segment up to :func:`written_end` (the one
    with the unwritten zero tail), every other segment whole."""
    newest = {}
    for f in files:
        if f.base is not None and (f.broker not in newest or f.base > newest[f.broker].base):
            newest[f.broker] = f
    return {(f.broker, f.name): written_end(f.loc, f.length) if newest.get(f.broker) is f and f.length else f.length
            for f in files}


def range_sizes(files: list[SegmentFile], split_size: int | None, parallelism: int | None = None,
                data: dict | None = None) -> dict[tuple[str, str], int]:
    """The largest range of each segment: ``splitSize`` when given; by default (None) the written data of all
    the segments (:func:`segment_data`, or ``data``) over TASKS_PER_CORE ranges per core (``parallelism``, else
    this machine's cores), within MIN_SPLIT_SIZE..DEFAULT_SPLIT_SIZE."""
    if not split_size:
        data = segment_data(files) if data is None else data
        cores = parallelism or os.cpu_count() or 2
        share = -(-sum(data.values()) // (TASKS_PER_CORE * cores))
        split_size = min(DEFAULT_SPLIT_SIZE, max(MIN_SPLIT_SIZE, -(-share // (1 << 20)) << 20))
    return {(f.broker, f.name): split_size for f in files}


def cut_ranges(length: int, data: int, size: int) -> list[tuple[int, int, bool]]:
    """(start, end, last) of the ranges of a ``length``-byte segment: its first ``data`` bytes cut into equal
    ranges of at most ``size``, the last running to the segment's end (the walk never trusts ``data``: a
    probe that ends early only makes the ranges uneven)."""
    n = max(1, math.ceil(data / max(size, 1)))
    step = -(-data // n)
    return [(k * step, (k + 1) * step, False) for k in range(n - 1)] + [((n - 1) * step, length, True)]


def plan_ranges(files: list[SegmentFile], split_size: int | None, parallelism: int | None = None
                ) -> list[SegmentRange]:
    out = []
    data = segment_data(files)
    sizes = range_sizes(files, split_size, parallelism, data)
    for f in files:
        if f.base is None:
            out.append(SegmentRange(f.broker, f.loc, f.name, None, f.length, 0, 0, True, f.problems))
            continue
        for k, (start, end, last) in enumerate(cut_ranges(f.length, data[f.broker, f.name], sizes[f.broker, f.name])):
            out.append(SegmentRange(f.broker, f.loc, f.name, f.base, f.length, start, end, last,
                                    f.problems if k == 0 else ()))
    return out


def split_segments(parts: list[SegmentRange]) -> set[str]:
    """The ``broker/segment`` keys of the segments cut into several ranges (those that need their ends)."""
    count = {}
    for p in parts:
        if p.base is not None:
            key = f"{p.broker}/{p.name}"
            count[key] = count.get(key, 0) + 1
    return {k for k, n in count.items() if n > 1}


def local_master(spark) -> bool:
    """The session runs its tasks in this process's machine (local mode): what they read, this process can."""
    try:
        master = spark.sparkContext.master
    except Exception:  # Spark Connect: no SparkContext, the tasks run elsewhere
        return False
    return master == "local" or master.startswith("local[")


def default_parallelism(spark) -> int:
    """The session's cores: its default parallelism.  A Spark Connect session has no SparkContext to ask: the
    server's spark.default.parallelism, else :func:`planned_parallelism` (never this client's cores, which say
    nothing of the server's)."""
    try:
        return int(spark.sparkContext.defaultParallelism)
    except Exception:
        conf = spark.conf.get("spark.default.parallelism", None)
        return int(conf) if conf else planned_parallelism(spark)


def planned_parallelism(spark) -> int:
    """The partitions of a range the session plans with its default parallelism (one small query, on any
    session)."""
    from pyspark.sql import functions as F

    parts = spark.range(0, 1 << 16).select(F.spark_partition_id().alias("p"))  # an aggregate refuses it unaliased
    return int(parts.agg(F.max("p")).first()[0]) + 1


# ---------------------------------------------------------------------------------------------------------
# The task: walk items of one range


class _NeedMoreBytes(Exception):
    """A decision came too close to the end of the bytes read (ranged reads only)."""


@dataclass
class RangeWalk:
    """A range's share of a segment's salvage walk: its items (absolute positions), the position its walk starts
    at (None: no confirmed frame in the range, the previous range's walk covers it) and the position the next
    range's walk starts at (None: this walk runs to the segment's end).  Consecutive ranges' items tile the
    segment: every byte from ``first`` to ``until`` belongs to one of this range's items or lies after its last
    stop."""

    items: FrameArrays
    first: int | None
    until: int | None


def range_items(buf, w0: int, complete: bool, name: str, base: int, start: int, end: int, last: bool,
                **kwargs) -> FrameArrays:
    """The salvage-walk items (absolute positions) owned by range [start, end) (:func:`range_walk`)."""
    return range_walk(buf, w0, complete, name, base, start, end, last, **kwargs).items


def range_walk(buf, w0: int, complete: bool, name: str, base: int, start: int, end: int, last: bool, *,
               check_crc: bool = True, excerpt_bytes: int = 32, margin: int = 0,
               segment_length: int | None = None, crc_checked_before: int = 0) -> RangeWalk:
    """The salvage-walk items (absolute positions) owned by range [start, end), framed in bulk; messages before
    ``crc_checked_before`` are known to pass the CRC check (the first pass checked the walk up to its stop).

    ``buf`` holds the segment's bytes from ``w0``; ``complete`` says it runs to the segment's end.  An
    incomplete buffer raises :class:`_NeedMoreBytes` when a decision may depend on bytes it lacks: one within
    ``margin`` of its end, a stop that the segment's end decides (a blank, a record running past the
    bytes), or a blank of the whole segment skipped over by a search."""
    lim = len(buf)
    rbase = base + w0  # positions below are relative to w0; PHYSICALOFFSET checks use base + w0 + rel
    doubt = _Doubt(buf, w0, complete, margin, segment_length)
    if start == 0:
        s = 0  # the walk itself starts here, confirmed or not
    else:
        # only a frame before the range end matters (and an unbounded search would rescan the zero tail)
        s = find_next_frame(buf, start - w0, lim, rbase, before=end - w0)
        doubt.search(start - w0, s, end - w0)
        if s is None:  # no confirmed frame in the range: the previous range's covers it
            return RangeWalk(FrameArrays.empty(name, base), None, None)
    e = None if last else find_next_frame(buf, end - w0, lim, rbase)
    if not last:
        doubt.search(end - w0, e)
    items = salvage_arrays(buf, name, rbase, start=s, limit=lim, until=e, check_crc=check_crc,
                           excerpt_len=excerpt_bytes, crc_checked_before=max(0, crc_checked_before - w0),
                           framer=_compiled_framer())
    doubt.items(items)
    return RangeWalk(items.moved(w0), s + w0, None if e is None else e + w0)


@functools.cache
def _compiled_framer():
    from udfs.kernels import CompiledFramer

    return CompiledFramer


class _Doubt:
    """Decisions an incomplete buffer (ranged reads) cannot make alone; raises :class:`_NeedMoreBytes`."""

    _BLANK = L.BLANK_MAGIC.to_bytes(4, "big", signed=True)

    def __init__(self, buf, w0: int, complete: bool, margin: int, segment_length: int | None):
        self.buf, self.w0, self.off, self.margin, self.seg_len = buf, w0, complete, margin, segment_length

    def search(self, lo: int, found: int | None, bound: int | None = None):
        """A search from ``lo`` found ``found`` (None: no frame before ``bound``, or before the bytes' end)."""
        if self.off:
            return
        if found is None and bound is None:
            raise _NeedMoreBytes  # a frame may lie past the bytes read
        hi = bound if found is None else found
        if hi > len(self.buf) - self.margin or self._blank_in(lo, hi):
            raise _NeedMoreBytes

    def items(self, items: FrameArrays):
        if self.off:
            return
        if len(items) and items.positions.max() > len(self.buf) - self.margin:
            raise _NeedMoreBytes
        for it in items.others.values():
            if isinstance(it, SalvageSpan):
                if self._blank_in(it.file_position, it.file_position + it.length):
                    raise _NeedMoreBytes
            elif it.kind == "stop" and (it.magic == L.BLANK_MAGIC or it.stop_kind == ErrorKind.TRUNCATED.value):
                raise _NeedMoreBytes

    def _blank_in(self, lo: int, hi: int) -> bool:
        """A blank header in [lo, hi) whose TOTALSIZE reaches exactly the segment's end."""
        if self.seg_len is None:
            return False
        i = self.buf.find(self._BLANK, lo + 4, hi + 4)
        while i >= 0:
            p = i - 4
            if int.from_bytes(self.buf[p:p + 4], "big", signed=True) == self.seg_len - self.w0 - p:
                return True
            i = self.buf.find(self._BLANK, i + 1, hi + 4)
        return False


def _read_range_items(part: SegmentRange, opts: Options):
    walk, handle, w0 = read_range_walk(part.loc, part.name, part.base, part.length, part.start, part.end, part.last,
                                       check_crc=opts.check_crc, excerpt_bytes=opts.excerpt_bytes,
                                       crc_checked_before=part.crc_checked_before, io=opts.io,
                                       max_record_size=opts.max_record_size)
    return walk.items, handle, w0


def read_range_walk(loc: Location, name: str, base: int, length: int, start: int, end: int, last: bool, *,
                     check_crc: bool = True, excerpt_bytes: int = 32, crc_checked_before: int = 0, io: str = "auto",
                     max_record_size: int = DEFAULT_MAX_RECORD_SIZE):
    """(walk, buffer, buffer offset) for the range [start, end) of a segment (:func:`range_walk`): a read-only
    mmap for local files (the caller closes it), else ranged reads that grow until every decision was made with
    ``max_record_size`` bytes to spare."""
    kwargs = dict(check_crc=check_crc, excerpt_bytes=excerpt_bytes, crc_checked_before=crc_checked_before)
    local = loc.local_path
    if local is not None and io == "auto":
        m = ReadOnlyMap(local)
        try:
            walk = range_walk(m.buf, 0, True, name, base, start, end, last, **kwargs)
        except BaseException:
            m.close()
            raise
        return walk, m, 0
    w0 = start
    w1 = length if last else min(length, end + 2 * max_record_size)
    while True:
        buf = loc.read_range(w0, w1 - w0)
        if len(buf) != w1 - w0:
            raise RecordError(ErrorKind.TRUNCATED, f"read {len(buf)} of {w1 - w0} bytes at {w0}; the file changed "
                              "while it was read", file=str(loc), position=w0)
        try:
            walk = range_walk(buf, w0, w1 == length, name, base, start, end, last,
                              margin=max_record_size, segment_length=length, **kwargs)
            return walk, buf, w0
        except _NeedMoreBytes:
            w1 = min(length, w0 + 2 * (w1 - w0))


def segment_ends(items_of_ranges: list[FrameArrays]) -> tuple[int | None, int | None]:
    """(first stop or blank, first blank) over every item of a segment's walk."""
    stops = [it.file_position for items in items_of_ranges for it in items.others.values()
             if not isinstance(it, SalvageSpan)]
    blanks = [p for items in items_of_ranges for p in items.positions[items.kinds == KIND_BLANK].tolist()]
    return (min(stops) if stops else None), (min(blanks) if blanks else None)


def walk_ends(parts: list[SegmentRange], opts: Options) -> dict[str, tuple]:
    """The segment ends of the segments whose ranges are ``parts`` (every range of each), as the first pass finds
    them (``{"broker/segment": (first_stop, first_blank, crc_checked_before)}``), walked in this process with the
    tasks' own code, ``opts.parallelism`` ranges at a time (threads: the compiled framer releases the GIL)."""
    def ends_of(part: SegmentRange) -> tuple[int | None, int | None]:
        items, handle, _ = _read_range_items(part, opts)
        if isinstance(handle, ReadOnlyMap):
            handle.close()
        return segment_ends([items])

    with ThreadPoolExecutor(max(1, min(len(parts), opts.parallelism or os.cpu_count() or 2))) as pool:
        found = list(pool.map(ends_of, parts))
    by_segment = {}
    for p, ends in zip(parts, found):
        by_segment.setdefault(f"{p.broker}/{p.name}", []).append(ends)
    return {key: _with_crc_checked(min((s for s, _ in e if s is not None), default=None),
                                   min((b for _, b in e if b is not None), default=None), opts.check_crc)
            for key, e in by_segment.items()}


def _with_crc_checked(first_stop: int | None, first_blank: int | None, check_crc: bool) -> tuple:
    """A segment's ends as the second pass gets them: a walk that found them with CRC checks has checked every
    message before its first stop, so the second pass need not check those again."""
    return first_stop, first_blank, (first_stop or 0) if check_crc else 0


def cut_to_walk(items: FrameArrays, walk: str, first_stop: int | None, first_blank: int | None) -> FrameArrays:
    """Apply a segment's ends: the recovery walk is the frames up to its first stop (or blank); the salvage
    walk ends at its first blank (stale bytes may follow)."""
    if walk == "recovery":
        return items.take((items.positions <= first_stop) & (items.kinds != KIND_CORRUPT))
    if first_blank is None or not len(items) or items.positions[-1] <= first_blank:
        return items
    return items.take(items.positions <= first_blank)


def span_detail(span: SalvageSpan) -> str:
    """A row's ``detail`` for an unframeable span."""
    return f"{span.length} bytes no walk could frame" + (
        f", then {span.unwritten_tail} zero bytes to the segment's end (its unwritten tail)" if span.unwritten_tail
        else "")


def _is_damage(kind: int, reason: str | None) -> bool:
    return kind == KIND_CORRUPT or (kind == KIND_STOP and reason != END_OF_DATA)


# ---------------------------------------------------------------------------------------------------------
# Filters pushed down by Spark

_OPS = {EqualTo: pc.equal, GreaterThan: pc.greater, GreaterThanOrEqual: pc.greater_equal, LessThan: pc.less,
        LessThanOrEqual: pc.less_equal}
_PUSHABLE = {"physical_offset", "segment", "broker", "kind", "file_position"}
_PUSHABLE_DECODED = {"store_timestamp", "topic", "queue_id", "tags"}


def _accept_filter(f, materialize: str) -> bool:
    if not isinstance(f, tuple(_OPS) + (In,)) or len(f.attribute) != 1:
        return False
    col = f.attribute[0]
    return col in _PUSHABLE or (materialize in ("headers", "decoded") and col in _PUSHABLE_DECODED)


def _filter_mask(batch: pa.RecordBatch, filters) -> pa.Array | None:
    """Spark's semantics: a comparison with null is not true, so the row goes."""
    mask = None
    for f in filters:
        col = batch.column(f.attribute[0])
        if isinstance(f, In):
            m = pc.is_in(col, value_set=pa.array(list(f.value), col.type))
        else:
            m = _OPS[type(f)](col, pa.scalar(f.value, col.type))
        mask = m if mask is None else pc.and_kleene(mask, m)
    return None if mask is None else pc.fill_null(mask, False)


_NP_OPS = {EqualTo: np.equal, GreaterThan: np.greater, GreaterThanOrEqual: np.greater_equal, LessThan: np.less,
           LessThanOrEqual: np.less_equal}


def _prefilter(items: FrameArrays, filters, base: int) -> FrameArrays:
    """The items whose rows the pushed filters on ``kind`` and the positions keep, before any row is built (the
    batches are filtered again, by every filter: this only saves building rows that would go)."""
    keep = None
    for f in filters:
        col = f.attribute[0]
        values = list(f.value) if isinstance(f, In) else [f.value]
        if col == "kind" and isinstance(f, (EqualTo, In)) and None not in values:
            m = np.isin(items.kinds, [KINDS.index(v) for v in values if v in KINDS])
        elif col in ("file_position", "physical_offset") and values and \
                all(isinstance(v, int) and not isinstance(v, bool) for v in values):
            pos = items.positions + (base if col == "physical_offset" else 0)
            m = np.isin(pos, values) if isinstance(f, In) else _NP_OPS[type(f)](pos, f.value)
        else:
            continue
        keep = m if keep is None else keep & m
    return items if keep is None or keep.all() else items.take(keep)


def _offset_bounds(filters) -> tuple[float, float]:
    """The physical-offset interval [lo, hi] that the pushed filters allow."""
    lo, hi = -math.inf, math.inf
    for f in filters:
        if f.attribute != ("physical_offset",):
            continue
        if isinstance(f, EqualTo):
            lo, hi = max(lo, f.value), min(hi, f.value)
        elif isinstance(f, In):
            if f.value:
                lo, hi = max(lo, min(f.value)), min(hi, max(f.value))
            else:
                lo, hi = math.inf, -math.inf
        elif isinstance(f, (GreaterThan, GreaterThanOrEqual)):
            lo = max(lo, f.value)
        elif isinstance(f, (LessThan, LessThanOrEqual)):
            hi = min(hi, f.value)
    return lo, hi


def _value_set(filters, col: str) -> set | None:
    values = None
    for f in filters:
        if f.attribute != (col,):
            continue
        v = {f.value} if isinstance(f, EqualTo) else set(f.value) if isinstance(f, In) else None
        if v is not None:
            values = v if values is None else values & v
    return values


# ---------------------------------------------------------------------------------------------------------
# Spark


class CommitLogReader(StoreReader):
    PART = "commitlog"

    def __init__(self, options):
        super().__init__(options)
        self.opts = Options.parse(options)
        self.filters = []

    def pushFilters(self, filters):
        """Only with ``pushFilters=true``: Spark 4.3 keeps the read planned for a query's pushed filters on the
        loaded DataFrame and reuses it for a later query on that DataFrame that has no filter at all, which would
        then read only the earlier query's rows (fixed upstream by scoping it to the scan).  So the default is
        to push nothing; readers that build a DataFrame per query (read_commitlog's first pass, the query and
        extract jobs) turn it on."""
        for f in filters:
            if self.opts.push_filters and _accept_filter(f, self.opts.materialize):
                self.filters.append(f)
            else:
                yield f

    def plan(self, inputs):
        files = list_segment_files(inputs, self.opts.segment_size)
        brokers, segments = _value_set(self.filters, "broker"), _value_set(self.filters, "segment")
        lo, hi = _offset_bounds(self.filters)
        # ranges planned over every file, as commitlog_ends plans them, then the files the filters exclude dropped
        parts = [p for p in plan_ranges(files, self.opts.split_size, self.opts.parallelism)
                 if (brokers is None or p.broker in brokers) and (segments is None or p.name in segments)
                 and (p.base is None or (p.base + p.length >= lo and p.base <= hi))]
        ends = self._ends(parts)
        out = []
        for p in parts:
            if p.base is not None:
                if p.base + p.start > hi and p.start > 0:
                    continue  # every item of the range lies at or after its start
                key = f"{p.broker}/{p.name}"
                if key in ends:
                    p.first_stop, p.first_blank, *checked = ends[key]
                    p.crc_checked_before = checked[0] if checked and self.opts.check_crc else 0
                    p.resolved = True
                    cutoff = p.first_stop if self.opts.walk == "recovery" else p.first_blank
                    if cutoff is not None and p.start > cutoff and not p.problems:
                        continue  # the walk ends before this range: nothing to read
                elif p.start == 0 and p.last and self.opts.ends != "unresolved":
                    p.finds_ends = True
            out.append(p)
        return out

    def _ends(self, parts: list[SegmentRange]) -> dict:
        if self.opts.ends == "unresolved":
            return {}
        ends = {} if self.opts.ends == "planner" else {k: tuple(v) for k, v in json.loads(self.opts.ends).items()}
        # No ends given for a segment cut into ranges (none given, or the first pass planned it as one range:
        # its file changed since): walk it here, with the tasks' own code.  A segment of one range needs none:
        # its one task finds the ends itself.
        missing = split_segments(parts) - set(ends)
        ends.update(walk_ends([p for p in parts if f"{p.broker}/{p.name}" in missing], self.opts))
        return ends

    def read_partition(self, partition: SegmentRange):
        yield from _RangeReader(partition, self.opts, self.filters).batches()


class CommitLogDataSource(StoreDataSource):
    FORMAT = FORMAT
    READER = CommitLogReader

    def arrow_schema(self) -> pa.Schema:
        opts = Options.parse(self.options)
        return arrow_schema(opts.materialize, opts.decompress, opts.columns)


@dataclass(frozen=True)
class _FileProblem:
    """A row about a segment file itself (its name or length), not about its bytes."""

    reason: str  # ErrorKind value
    field: str
    detail: str


_KIND_NAMES = pa.array(KINDS, pa.string())


class _RangeReader:
    """Turns one range's walk items (arrays) into Arrow batches of the declared schema."""

    def __init__(self, part: SegmentRange, opts: Options, filters):
        self.p, self.opts, self.filters = part, opts, filters
        self.schema = arrow_schema(opts.materialize, opts.decompress, opts.columns)
        self.kernel_cols = _kernel_columns(opts.materialize, opts.decompress, opts.columns)

    def batches(self):
        p = self.p
        if p.problems:
            problems = [_FileProblem(kind, "file_name" if kind == ErrorKind.BAD_FILE_NAME.value else "file_length",
                                     msg) for kind, msg in p.problems]
            n = len(problems)
            yield from self._emit(FrameArrays(p.name, p.base or 0, np.zeros(n, np.int64), np.full(n, p.length),
                                              np.full(n, KIND_CORRUPT, np.int8), np.zeros(n, np.int32),
                                              dict(enumerate(problems))), None, 0)
        if p.base is None:
            return
        items, handle, w0 = _read_range_items(p, self.opts)
        try:
            buf = handle.buf if isinstance(handle, ReadOnlyMap) else handle
            if p.finds_ends:
                p.first_stop, p.first_blank = segment_ends([items])
                p.resolved = True
            if p.resolved:
                items = cut_to_walk(items, self.opts.walk, p.first_stop, p.first_blank)
            if self.filters and self.opts.mode != "FAILFAST":  # FAILFAST fails on damage the filters drop too
                items = _prefilter(items, self.filters, p.base)
            n = self.opts.batch_rows
            for i in range(0, len(items), n):
                yield from self._emit(items.slice(i, i + n), buf, w0)
        finally:
            if isinstance(handle, ReadOnlyMap):
                handle.close()

    def _emit(self, items: FrameArrays, buf, w0: int):
        n = len(items)
        if not n:
            return
        p, opts = self.p, self.opts
        pos, kinds = items.positions, items.kinds
        # the few rows that are not messages carry their own details
        length, store_size_null = items.sizes, kinds == KIND_CORRUPT
        reason, field, detail, excerpt, damage = {}, {}, {}, {}, []
        for i, it in sorted(items.others.items()):
            if isinstance(it, _FileProblem):
                reason[i], field[i], detail[i] = it.reason, it.field, it.detail
            elif isinstance(it, SalvageSpan):
                reason[i], excerpt[i] = it.reason, it.excerpt.hex()
                detail[i] = span_detail(it)
            else:
                reason[i], field[i], detail[i] = it.stop_kind, it.stop_field, it.stop_message
            if _is_damage(int(kinds[i]), reason[i]):
                damage.append(i)
        stops = np.flatnonzero(kinds == KIND_STOP)
        if len(stops):
            length = length.copy()
            length[stops] = p.length - pos[stops]  # bytes this segment's walk leaves behind
        if damage and opts.mode == "FAILFAST":
            i = damage[0]
            # a span after zeros (reason END_OF_DATA) is a hole in written data: reported as TRUNCATED
            raise RecordError(ErrorKind(reason[i]) if reason[i] in ErrorKind.__members__ else ErrorKind.TRUNCATED,
                              f"{KINDS[kinds[i]]} ({detail.get(i)}) in broker {p.broker}; mode FAILFAST",
                              file=str(p.loc), position=int(pos[i]), field=field.get(i))
        if p.resolved:
            beyond = (pos > p.first_stop) | (kinds == KIND_CORRUPT)
            problem = [i for i, it in items.others.items() if isinstance(it, _FileProblem)]
            beyond = pa.array(beyond, pa.bool_(), mask=_rows_mask(problem, n) if problem else None)
        else:
            beyond = pa.nulls(n, pa.bool_())
        all_messages = not items.others
        cols = {
            "broker": _repeated(p.broker, n),
            "segment": _repeated(p.name, n),
            "file_position": pa.array(pos, pa.int64()),
            "physical_offset": pa.array(pos + (p.base or 0), pa.int64()),
            "kind": _repeated("message", n) if all_messages else _KIND_NAMES.take(pa.array(kinds)),
            "store_size": pa.array(items.sizes, pa.int32()) if all_messages else
            pa.array(np.where(store_size_null, 0, items.sizes), pa.int32(), mask=store_size_null),
            "length": pa.array(length, pa.int64()),
            "beyond_first_stop": beyond,
            "reason": _sparse(reason, n), "field": _sparse(field, n), "detail": _sparse(detail, n),
            "excerpt_hex": _sparse(excerpt, n),
        }
        msg_rows = None if all_messages else np.flatnonzero(kinds == KIND_MESSAGE)
        starts, sizes = (pos, items.sizes) if all_messages else (pos[msg_rows], items.sizes[msg_rows])
        starts = starts - w0
        if opts.materialize == "frames":
            cols["frame"] = _scatter(_binary_slices(buf, starts, sizes), msg_rows, n)
        if self.kernel_cols:
            cols.update(self._decode(buf, w0, starts, sizes, msg_rows, n))
        batch = pa.RecordBatch.from_arrays([cols[f.name] for f in self.schema], schema=self.schema)
        keep = None
        if damage and opts.mode == "DROPMALFORMED":
            keep = ~_rows_mask(damage, n)
        mask = _filter_mask(batch, self.filters)
        if mask is not None:
            m = mask.to_numpy(zero_copy_only=False)
            keep = m if keep is None else keep & m
        if keep is not None and not keep.all():
            batch = batch.filter(pa.array(keep))
        if batch.num_rows:
            yield batch

    def _decode(self, buf, w0: int, starts, sizes, msg_rows, n) -> dict:
        from store_format.layout import parse_delay_levels
        from udfs import kernels as K

        kwargs = {}
        if self.opts.delay_levels:
            kwargs["delay_levels"] = parse_delay_levels(self.opts.delay_levels)
        # with checkCrc, framing has compared every body with its BODYCRC already: body_crc_ok is known
        crc_known = self.opts.check_crc and "body_crc_ok" in self.kernel_cols and "body" in self.kernel_cols \
            and "body_crc" in self.kernel_cols
        cols = tuple(c for c in self.kernel_cols if not (crc_known and c == "body_crc_ok")) + K.STATUS_COLUMNS
        decoded = K.decode_buffer(buf if len(starts) else b"", starts, sizes, columns=cols,
                                  decompress=self.opts.decompress, **kwargs)
        errors = decoded.column("error")
        if errors.null_count != len(errors):
            bad = pc.index(pc.is_valid(errors), True).as_py()
            # framing accepted the record, so the kernel must decode it: two backends, one truth
            raise RecordError(ErrorKind(errors[bad].as_py()), "udfs.kernels rejects a record that framing "
                              "accepted", file=str(self.p.loc), position=w0 + int(starts[bad]))
        out = {c: decoded.column(c) for c in cols if c in self.kernel_cols}
        if crc_known:
            # frame_at checks the CRC of every non-empty body; an empty body's CRC is 0 (UtilAll.crc32)
            out["body_crc_ok"] = pc.or_(pc.greater(pc.binary_length(out["body"]), 0),
                                        pc.equal(out["body_crc"], 0))
        return {c: _scatter(out[c], msg_rows, n) for c in self.kernel_cols}


@functools.lru_cache(maxsize=64)
def _repeated(text: str, n: int) -> pa.Array:
    """``text`` in each of ``n`` rows (built once per text and batch size: Arrow arrays are immutable)."""
    return pa.repeat(pa.scalar(text, pa.string()), n)


def _rows_mask(rows: list, n: int) -> np.ndarray:
    mask = np.zeros(n, bool)
    mask[rows] = True
    return mask


def _sparse(values: dict, n: int) -> pa.Array:
    """A string column that is null except at the rows in ``values``."""
    if not values:
        return pa.nulls(n, pa.string())
    rows = list(values)
    take = np.full(n, len(rows), np.int64)
    take[rows] = np.arange(len(rows))
    return pa.array([values[i] for i in rows] + [None], pa.string()).take(pa.array(take))


def _binary_slices(buf, starts: np.ndarray, sizes: np.ndarray) -> pa.Array:
    """A binary array of buf[starts[i]:starts[i]+sizes[i]] (in order, disjoint), copied once: one slice per run
    of back-to-back frames, so the bytes between two frames (a corrupt span, a stop) belong to neither."""
    if not len(starts):
        return pa.array([], pa.binary())
    ends = starts + sizes
    cuts = np.flatnonzero(starts[1:] != ends[:-1]) + 1  # where a run of adjacent frames ends
    run_first, run_last = np.append(0, cuts), np.append(cuts, len(starts)) - 1
    mv = memoryview(buf)
    data = pa.py_buffer(b"".join(mv[a:b] for a, b in zip(starts[run_first].tolist(), ends[run_last].tolist())))
    offsets = np.zeros(len(starts) + 1, np.int32)
    np.cumsum(sizes, out=offsets[1:])
    return pa.Array.from_buffers(pa.binary(), len(starts), [None, pa.py_buffer(offsets.tobytes()), data])


def _scatter(values: pa.Array, idx: np.ndarray | None, n: int) -> pa.Array:
    """``values`` placed at rows ``idx`` (None: every row) of an n-row column, nulls elsewhere."""
    if idx is None or len(idx) == n:
        return values
    take = np.full(n, -1, np.int64)
    take[idx] = np.arange(len(idx))
    indices = pa.array(take, mask=take < 0)
    return values.take(indices)


__all__ = ["CommitLogDataSource", "FORMAT", "arrow_schema", "commitlog_ends", "range_items", "read_commitlog"]


FIRST_PASSES = ("auto", "spark", "here")


def commitlog_ends(spark, path: str, first_pass: str = "auto", **options) -> dict:
    """The segment ends ``{"broker/segment": [first_stop, first_blank, crc_checked_before]}`` of the segments
    split into several ranges (the first pass of :func:`read_commitlog`; none at all when every segment is one
    range).  ``first_pass``: ``spark``, a Spark pass that ships only stop and blank rows (the work spread over
    the executors); ``here``, walked in this process with the tasks' code, a range per core at a time
    (:func:`walk_ends`: no Spark job, whose own cost is most of a cheap walk's); ``auto``: here when the session
    runs in local mode (its tasks would use this machine's cores anyway), else Spark."""
    from pyspark.sql import functions as F

    if first_pass not in FIRST_PASSES:
        raise ValueError(f"first_pass={first_pass!r}: choose one of {', '.join(FIRST_PASSES)}")

    opts = {k: str(v) for k, v in options.items()}
    opts.setdefault("parallelism", str(default_parallelism(spark)))
    parsed = Options.parse(opts)  # fail on bad options before any job runs
    # a segment read by one task needs no first pass: that task walks it all and finds its ends itself
    files = list_segment_files(find_inputs(path, "commitlog", opts.get("broker")), parsed.segment_size)
    parts = plan_ranges(files, parsed.split_size, parsed.parallelism)
    cut = split_segments(parts)
    split = [f for f in files if f"{f.broker}/{f.name}" in cut]
    if not split:
        return {}
    if first_pass == "here" or (first_pass == "auto" and local_master(spark)):
        return {k: list(v) for k, v in walk_ends([p for p in parts if f"{p.broker}/{p.name}" in cut], parsed).items()}
    positions = {k: v for k, v in opts.items() if k != "columns"}  # the decoded columns of the second pass
    stops = (spark.read.format(FORMAT).options(**positions)
             .options(materialize="positions", walk="salvage", mode="PERMISSIVE", segmentEnds="unresolved",
                      pushFilters="true")
             .load(path)
             .where(F.col("broker").isin(sorted({f.broker for f in split}))
                    & F.col("segment").isin(sorted({f.name for f in split})) & F.col("kind").isin("stop", "blank"))
             .groupBy("broker", "segment")
             .agg(F.min("file_position").alias("first_stop"),
                  F.min(F.when(F.col("kind") == "blank", F.col("file_position"))).alias("first_blank")))
    return {f"{r['broker']}/{r['segment']}": list(_with_crc_checked(r["first_stop"], r["first_blank"],
                                                                    parsed.check_crc))
            for r in stops.collect()}


def read_commitlog(spark, path: str, ends: dict | None = None, first_pass: str = "auto", **options):
    """The commitlog as a DataFrame equal to store_format's walks, read in two passes: the segment ends (first
    stop, first blank) of the segments cut into ranges (:func:`commitlog_ends`, ``first_pass`` as there), then
    the rows.  ``ends`` from :func:`commitlog_ends` (same path and options) skips the first pass: the walks
    share it."""
    opts = {k: str(v) for k, v in options.items()}
    opts.setdefault("parallelism", str(default_parallelism(spark)))  # both passes plan the same ranges
    Options.parse(opts)  # fail on bad options before any job runs
    if ends is None:
        ends = commitlog_ends(spark, path, first_pass=first_pass, **opts)
    return spark.read.format(FORMAT).options(**opts).option("segmentEnds", json.dumps(ends)).load(path)
