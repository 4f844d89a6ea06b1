"""``rocketmq-commitlog``: CommitLog segments read in parallel, split into byte ranges on record boundaries.

Partitions are (segment, byte range of ``splitSize``).  The walk of a segment is a deterministic chain: from
a position, ``frame_at`` says message (go on by its size), blank (the segment ends) or stop, and after a stop
the salvage walk resyncs at ``find_next_frame`` (the first *confirmed* frame: magic, PHYSICALOFFSET = base +
position, framing, followed by another frame).  A confirmed frame cannot be jumped over by that chain (a
message step would need overlapping records, a resync step stops at the first one), so every confirmed frame
lies on the walk from the segment start.  A task therefore starts at the first confirmed frame at or after its
range start (the first range at 0, where the walk starts), follows store_format's ``salvage_buffer`` and stops
at the first confirmed frame at or after its range end, where the next task starts: every frame and span of
the walk is emitted by exactly one task, whatever the split size.  No framing happens here; store_format
does it all.

Two facts are only known by walking from a segment's start: where the recovery walk stops (its first
stop or blank) and where the salvage walk ends (its first blank; stale bytes may follow).  They are the
"segment ends".  :func:`read_commitlog` gets them with a first Spark pass that ships only stop and blank rows,
then hands them to the second pass in the ``segmentEnds`` option, so every task knows them and ranges past
the recovery end are never read.  ``spark.read.format("rocketmq-commitlog")`` without that option computes
them in the planner, walking every segment there: exact, but serial; use :func:`read_commitlog` for large dumps.

Rows: one per walk item, ``kind`` = message | blank | stop (where a walk stopped: damage, or END_OF_DATA
for the zero-filled tail, summarized in one row) | corrupt (bytes the salvage walk could not frame, or a
segment file with a bad name or length).  ``materialize`` chooses what else a row carries: ``positions``
(nothing), ``frames`` (the record bytes), ``headers`` (decoded columns without the body) or ``decoded``
(every canonical column, from udfs.kernels), since Python sources get no column pruning.
"""
from __future__ import annotations

import dataclasses
import json
import math
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql.datasource import DataSource, DataSourceReader, EqualTo, GreaterThan, GreaterThanOrEqual, In, \
    InputPartition, LessThan, LessThanOrEqual

from store_format import layout as L
from store_format.commitlog import END_OF_DATA, SEGMENT_NAME, Frame, ReadOnlyMap, SalvageSpan, find_next_frame, \
    salvage_buffer
from store_format.errors import ErrorKind, RecordError

from .storepaths import Location, PartInput, find_inputs, parse_bool, parse_size

FORMAT = "rocketmq-commitlog"
WALKS = ("recovery", "salvage")
MODES = ("PERMISSIVE", "DROPMALFORMED", "FAILFAST")
MATERIALIZE = ("positions", "frames", "headers", "decoded")
DEFAULT_SPLIT_SIZE = 128 << 20
DEFAULT_BATCH_ROWS = 16384
# Ranged (non-mmap) reads fetch this much past a range end; a decision closer than this to the end of what
# was read is re-made with more bytes.  It bounds a legitimate record: 4 MiB body + 64 KiB (broker >= 4.9.5).
DEFAULT_MAX_RECORD_SIZE = L.DEFAULT_MAX_MESSAGE_SIZE + (64 << 10)

BASE_COLUMNS = (
    ("broker", pa.string()), ("segment", pa.string()), ("file_position", pa.int64()),
    ("physical_offset", pa.int64()), ("kind", pa.string()), ("store_size", pa.int32()), ("length", pa.int64()),
    ("beyond_first_stop", pa.bool_()), ("reason", pa.string()), ("field", pa.string()), ("detail", pa.string()),
    ("excerpt_hex", pa.string()),
)
_BASE_NAMES = tuple(n for n, _ in BASE_COLUMNS)


def _kernel_columns(materialize: str, decompress: bool) -> tuple[str, ...]:
    if materialize not in ("headers", "decoded"):
        return ()
    from udfs import kernels as K

    skip = set(_BASE_NAMES) | set(K.STATUS_COLUMNS) | ({"body"} if materialize == "headers" else set())
    cols = tuple(c for c in K.DEFAULT_COLUMNS if c not in skip)
    if decompress and materialize == "decoded":
        cols += K.DECOMPRESS_COLUMNS
    return cols


def arrow_schema(materialize: str, decompress: bool = False) -> pa.Schema:
    fields = [pa.field(n, t) for n, t in BASE_COLUMNS]
    if materialize == "frames":
        fields.append(pa.field("frame", pa.binary()))
    kcols = _kernel_columns(materialize, decompress)
    if kcols:
        from udfs import kernels as K

        fields += list(K.message_schema(kcols))
    return pa.schema(fields)


def spark_ddl(schema: pa.Schema) -> str:
    return ", ".join(f"`{f.name}` {_spark_type(f.type)}" for f in schema)


def _spark_type(t: pa.DataType) -> str:
    simple = {pa.int32(): "INT", pa.int64(): "BIGINT", pa.string(): "STRING", pa.binary(): "BINARY",
              pa.bool_(): "BOOLEAN", pa.int16(): "SMALLINT", pa.int8(): "TINYINT", pa.float64(): "DOUBLE"}
    if t in simple:
        return simple[t]
    if pa.types.is_map(t):
        return f"MAP<{_spark_type(t.key_type)}, {_spark_type(t.item_type)}>"
    if pa.types.is_list(t):
        return f"ARRAY<{_spark_type(t.value_type)}>"
    raise TypeError(f"no Spark type for {t}")


# ---------------------------------------------------------------------------------------------------------
# Options


@dataclass(frozen=True)
class Options:
    split_size: int
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
    ends: str  # "planner" | "unresolved" | JSON {"broker/segment": [first_stop, first_blank]}

    @classmethod
    def parse(cls, options) -> "Options":
        def choice(key, allowed, default, upper=False):
            v = options.get(key, default)
            v = v.upper() if upper else v.lower()
            if v not in allowed:
                raise ValueError(f"option {key}={options.get(key)!r}: choose one of {', '.join(allowed)}")
            return v

        return cls(
            split_size=parse_size(options.get("splitSize"), DEFAULT_SPLIT_SIZE),
            walk=choice("walk", WALKS, "recovery"),
            mode=choice("mode", MODES, "PERMISSIVE", upper=True),
            materialize=choice("materialize", MATERIALIZE, "frames"),
            check_crc=parse_bool(options.get("checkCrc"), True),
            decompress=parse_bool(options.get("decompress"), False),
            segment_size=parse_size(options["segmentSize"], 0) if options.get("segmentSize") else None,
            batch_rows=int(options.get("batchRows", DEFAULT_BATCH_ROWS)),
            excerpt_bytes=int(options.get("excerptBytes", 32)),
            io=choice("io", ("auto", "ranged"), "auto"),
            max_record_size=parse_size(options.get("maxRecordSize"), DEFAULT_MAX_RECORD_SIZE),
            delay_levels=options.get("messageDelayLevel"),
            ends=options.get("segmentEnds", "planner"),
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
        size = segment_size or _infer_segment_size([(int(i.base_name), i.size) for i in named])
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
            out.append(SegmentFile(inp.broker, loc, i.base_name, int(i.base_name), i.size, problems))
    return out


def _infer_segment_size(named: list[tuple[int, int]]) -> int | None:
    """store_format's rule (spacing of the names, else the only file's length) on file infos."""
    named = sorted(named)
    gaps = [b - a for (a, _), (b, _) in zip(named, named[1:]) if b > a]
    if gaps:
        return min(gaps)
    return named[0][1] if named else None


def plan_ranges(files: list[SegmentFile], split_size: int) -> list[SegmentRange]:
    out = []
    for f in files:
        if f.base is None:
            out.append(SegmentRange(f.broker, f.loc, f.name, None, f.length, 0, 0, True, f.problems))
            continue
        n = max(1, math.ceil(f.length / split_size))
        for k in range(n):
            start, end = k * split_size, min(f.length, (k + 1) * split_size)
            out.append(SegmentRange(f.broker, f.loc, f.name, f.base, f.length, start, end, k == n - 1,
                                    f.problems if k == 0 else ()))
    return out


# ---------------------------------------------------------------------------------------------------------
# The task: walk items of one range


class _NeedMoreBytes(Exception):
    """A decision came too close to the end of the bytes read (ranged reads only)."""


def range_items(buf, w0: int, complete: bool, name: str, base: int, start: int, end: int, last: bool, *,
                check_crc: bool = True, excerpt_bytes: int = 32, margin: int = 0,
                segment_length: int | None = None) -> list:
    """The salvage-walk items (Frames and SalvageSpans, absolute positions) owned by range [start, end).

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
        s = find_next_frame(buf, start - w0, lim, rbase)
        doubt.search(start - w0, s)
        if s is None or s + w0 >= end:
            return []  # no confirmed frame in the range: the previous range's walk covers it
    if last:
        e = math.inf
    else:
        e = find_next_frame(buf, end - w0, lim, rbase)
        doubt.search(end - w0, e)
        if e is None:
            e = math.inf
    items = []
    for it in salvage_buffer(buf, name, rbase, start=s, limit=lim, decode=False, check_crc=check_crc,
                             excerpt_len=excerpt_bytes):
        if it.file_position >= e:
            break
        doubt.item(it)
        # a copy: salvage_buffer reads the stop frame's position back to resync
        items.append(dataclasses.replace(it, file_position=it.file_position + w0) if w0 else it)
    return items


class _Doubt:
    """Decisions an incomplete buffer (ranged reads) cannot make alone; raises :class:`_NeedMoreBytes`."""

    _BLANK = L.BLANK_MAGIC.to_bytes(4, "big", signed=True)

    def __init__(self, buf, w0: int, complete: bool, margin: int, segment_length: int | None):
        self.buf, self.w0, self.off, self.margin, self.seg_len = buf, w0, complete, margin, segment_length

    def search(self, lo: int, found: int | None):
        if self.off:
            return
        hi = len(self.buf) if found is None else found
        if found is None or found > len(self.buf) - self.margin or self._blank_in(lo, hi):
            raise _NeedMoreBytes

    def item(self, it):
        if self.off:
            return
        if it.file_position > len(self.buf) - self.margin:
            raise _NeedMoreBytes
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
    """(items, buffer, buffer offset) for a range: a read-only mmap for local files, else ranged reads that
    grow until every decision was made with ``max_record_size`` bytes to spare."""
    kwargs = dict(check_crc=opts.check_crc, excerpt_bytes=opts.excerpt_bytes)
    local = part.loc.local_path
    if local is not None and opts.io == "auto":
        m = ReadOnlyMap(local)
        items = range_items(m.buf, 0, True, part.name, part.base, part.start, part.end, part.last, **kwargs)
        return items, m, 0
    w0 = part.start
    w1 = part.length if part.last else min(part.length, part.end + 2 * opts.max_record_size)
    while True:
        buf = part.loc.read_range(w0, w1 - w0)
        if len(buf) != w1 - w0:
            raise RecordError(ErrorKind.TRUNCATED, f"read {len(buf)} of {w1 - w0} bytes at {w0}; the file changed "
                              "while it was read", file=str(part.loc), position=w0)
        try:
            items = range_items(buf, w0, w1 == part.length, part.name, part.base, part.start, part.end, part.last,
                                margin=opts.max_record_size, segment_length=part.length, **kwargs)
            return items, buf, w0
        except _NeedMoreBytes:
            w1 = min(part.length, w0 + 2 * (w1 - w0))


def segment_ends(items_of_ranges) -> tuple[int | None, int | None]:
    """(first stop or blank, first blank) over every item of a segment's walk."""
    stops = [it.file_position for items in items_of_ranges for it in items
             if isinstance(it, Frame) and it.kind in ("stop", "blank")]
    blanks = [it.file_position for items in items_of_ranges for it in items
              if isinstance(it, Frame) and it.kind == "blank"]
    return (min(stops) if stops else None), (min(blanks) if blanks else None)


def cut_to_walk(items: list, walk: str, first_stop: int | None, first_blank: int | None) -> list:
    """Apply a segment's ends: the recovery walk is the frames up to its first stop (or blank); the salvage
    walk ends at its first blank (stale bytes may follow)."""
    if walk == "recovery":
        return [it for it in items if isinstance(it, Frame) and it.file_position <= first_stop]
    if first_blank is None:
        return items
    return [it for it in items if it.file_position <= first_blank]


def _is_damage(kind: str, reason: str | None) -> bool:
    return kind == "corrupt" or (kind == "stop" and reason != END_OF_DATA)


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


class CommitLogDataSource(DataSource):
    @classmethod
    def name(cls) -> str:
        return FORMAT

    def schema(self) -> str:
        opts = Options.parse(self.options)
        return spark_ddl(arrow_schema(opts.materialize, opts.decompress))

    def reader(self, schema) -> "CommitLogReader":
        return CommitLogReader(self.options)


class CommitLogReader(DataSourceReader):
    def __init__(self, options):
        self.path = options.get("path")
        self.opts = Options.parse(options)
        self.broker = options.get("broker")
        self.filters = []

    def pushFilters(self, filters):
        for f in filters:
            if _accept_filter(f, self.opts.materialize):
                self.filters.append(f)
            else:
                yield f

    def partitions(self):
        inputs = find_inputs(self.path, "commitlog", self.broker)
        files = list_segment_files(inputs, self.opts.segment_size)
        brokers, segments = _value_set(self.filters, "broker"), _value_set(self.filters, "segment")
        lo, hi = _offset_bounds(self.filters)
        files = [f for f in files if (brokers is None or f.broker in brokers)
                 and (segments is None or f.name in segments)
                 and (f.base is None or (f.base + f.length >= lo and f.base <= hi))]
        parts = plan_ranges(files, self.opts.split_size)
        ends = self._ends(parts)
        out = []
        for p in parts:
            if p.base is not None:
                if p.base + p.start > hi and p.start > 0:
                    continue  # every item of the range lies at or after its start
                key = f"{p.broker}/{p.name}"
                if key in ends:
                    p.first_stop, p.first_blank = ends[key]
                    p.resolved = True
                    cutoff = p.first_stop if self.opts.walk == "recovery" else p.first_blank
                    if cutoff is not None and p.start > cutoff and not p.problems:
                        continue  # the walk ends before this range: nothing to read
            out.append(p)
        return out or [SegmentRange("", Location(None, ""), "", None, 0, 0, 0, True, ())]  # noqa: the empty plan

    def _ends(self, parts: list[SegmentRange]) -> dict:
        if self.opts.ends == "unresolved":
            return {}
        if self.opts.ends != "planner":
            return {k: tuple(v) for k, v in json.loads(self.opts.ends).items()}
        # No ends given: walk every segment here, with the tasks' own code.
        ends, by_segment = {}, {}
        for p in parts:
            if p.base is not None:
                by_segment.setdefault(f"{p.broker}/{p.name}", []).append(p)
        for key, ranges in by_segment.items():
            items_of_ranges = []
            for p in ranges:
                items, handle, _ = _read_range_items(p, self.opts)
                items_of_ranges.append(items)
                if isinstance(handle, ReadOnlyMap):
                    handle.close()
            ends[key] = segment_ends(items_of_ranges)
        return ends

    def read(self, partition: SegmentRange):
        if not partition.name:
            return
        yield from _RangeReader(partition, self.opts, self.filters).batches()


class _RangeReader:
    """Turns one range's walk items into Arrow batches of the declared schema."""

    def __init__(self, part: SegmentRange, opts: Options, filters):
        self.p, self.opts, self.filters = part, opts, filters
        self.schema = arrow_schema(opts.materialize, opts.decompress)
        self.kernel_cols = _kernel_columns(opts.materialize, opts.decompress)
        self.lo, self.hi = _offset_bounds(filters)

    def batches(self):
        p = self.p
        rows = [self._problem_row(kind, msg) for kind, msg in p.problems]
        if p.base is None:
            yield from self._emit(rows, None, 0)
            return
        items, handle, w0 = _read_range_items(p, self.opts)
        try:
            buf = handle.buf if isinstance(handle, ReadOnlyMap) else handle
            items = self._cut(items)
            n = self.opts.batch_rows
            yield from self._emit(rows, None, 0)
            for i in range(0, len(items), n):
                yield from self._emit(items[i:i + n], buf, w0)
        finally:
            if isinstance(handle, ReadOnlyMap):
                handle.close()

    def _cut(self, items: list) -> list:
        p = self.p
        return cut_to_walk(items, self.opts.walk, p.first_stop, p.first_blank) if p.resolved else items

    @staticmethod
    def _problem_row(kind: str, msg: str) -> tuple:
        return ("problem", kind, msg)

    def _emit(self, items: list, buf, w0: int):
        if not items:
            return
        p, opts = self.p, self.opts
        n = len(items)
        # messages in bulk (almost every row); the few other rows one by one
        is_msg = np.fromiter((type(it) is Frame and it.kind == "message" for it in items), bool, n)
        pos = np.fromiter((0 if type(it) is tuple else it.file_position for it in items), np.int64, n)
        sizes = np.fromiter((it.size if type(it) is Frame else 0 for it in items), np.int64, n)
        msg_idx = np.flatnonzero(is_msg)
        others = np.flatnonzero(~is_msg).tolist()
        length = sizes.copy()
        store_size = pa.array(sizes, pa.int32())
        kind = ["message"] * n
        reason, field, detail, excerpt = ({} for _ in range(4))
        null_size = []
        for i in others:
            it = items[i]
            if isinstance(it, tuple):  # a problem with the file itself
                _, reason[i], detail[i] = it
                kind[i], length[i] = "corrupt", p.length
                field[i] = "file_name" if reason[i] == ErrorKind.BAD_FILE_NAME.value else "file_length"
                null_size.append(i)
            elif isinstance(it, SalvageSpan):
                kind[i], length[i] = "corrupt", it.length
                reason[i], excerpt[i] = it.reason, it.excerpt.hex()
                detail[i] = f"{it.length} bytes no walk could frame"
                null_size.append(i)
            else:
                kind[i], reason[i], field[i], detail[i] = it.kind, it.stop_kind, it.stop_field, it.stop_message
                if it.kind == "stop":
                    length[i] = p.length - it.file_position  # bytes this segment's walk leaves behind
        if null_size:
            mask = np.zeros(n, bool)
            mask[null_size] = True
            store_size = pa.array(sizes, pa.int32(), mask=mask)
        if p.resolved:
            beyond = pos > p.first_stop
            beyond[[i for i in others if kind[i] == "corrupt"]] = True
            beyond = pa.array(beyond, pa.bool_(), mask=np.array([isinstance(it, tuple) for it in items])
                              if null_size else None)
        else:
            beyond = pa.nulls(n, pa.bool_())

        def sparse(values: dict) -> pa.Array:
            if not values:
                return pa.nulls(n, pa.string())
            return pa.array([values.get(i) for i in range(n)], pa.string())
        damage = [i for i in others if _is_damage(kind[i], reason.get(i))]
        if damage and opts.mode == "FAILFAST":
            i = damage[0]
            # a span after zeros (reason END_OF_DATA) is a hole in written data: reported as TRUNCATED
            raise RecordError(ErrorKind(reason[i]) if reason[i] in ErrorKind.__members__ else ErrorKind.TRUNCATED,
                              f"{kind[i]} ({detail.get(i)}) in broker {p.broker}; mode FAILFAST",
                              file=str(p.loc), position=int(pos[i]), field=field.get(i))
        base = p.base or 0
        cols = {
            "broker": pa.repeat(pa.scalar(p.broker), n).cast(pa.string()) if n else pa.array([], pa.string()),
            "segment": pa.repeat(pa.scalar(p.name), n).cast(pa.string()),
            "file_position": pa.array(pos, pa.int64()),
            "physical_offset": pa.array(pos + base, pa.int64()),
            "kind": pa.array(kind, pa.string()) if others else pa.repeat(pa.scalar("message"), n).cast(pa.string()),
            "store_size": store_size,
            "length": pa.array(length, pa.int64()),
            "beyond_first_stop": beyond,
            "reason": sparse(reason), "field": sparse(field), "detail": sparse(detail), "excerpt_hex": sparse(excerpt),
        }
        starts, sizes = pos[msg_idx] - w0, sizes[msg_idx]
        msg_idx = msg_idx.tolist()
        if opts.materialize == "frames":
            cols["frame"] = _scatter(_binary_slices(buf, starts, sizes), msg_idx, n)
        if self.kernel_cols:
            cols.update(self._decode(buf, w0, starts, sizes, msg_idx, n))
        batch = pa.RecordBatch.from_arrays([cols[f.name] for f in self.schema], schema=self.schema)
        keep = np.ones(n, bool)
        if damage and opts.mode == "DROPMALFORMED":
            keep[damage] = False
        mask = _filter_mask(batch, self.filters)
        if mask is not None:
            keep &= mask.to_numpy(zero_copy_only=False)
        if not keep.all():
            batch = batch.filter(pa.array(keep))
        if batch.num_rows:
            yield batch

    def _decode(self, buf, w0: int, starts, sizes, msg_idx, n) -> dict:
        from store_format.layout import parse_delay_levels
        from udfs import kernels as K

        kwargs = {}
        if self.opts.delay_levels:
            kwargs["delay_levels"] = parse_delay_levels(self.opts.delay_levels)
        cols = self.kernel_cols + K.STATUS_COLUMNS
        decoded = K.decode_buffer(buf if len(msg_idx) else b"", starts, sizes, columns=cols,
                                  decompress=self.opts.decompress, **kwargs)
        errors = decoded.column("error")
        if errors.null_count != len(errors):
            bad = pc.index(pc.is_valid(errors), True).as_py()
            # framing accepted the record, so the kernel must decode it: two backends, one truth
            raise RecordError(ErrorKind(errors[bad].as_py()), "udfs.kernels rejects a record that framing "
                              "accepted", file=str(self.p.loc), position=w0 + int(starts[bad]))
        return {c: _scatter(decoded.column(c), msg_idx, n) for c in self.kernel_cols}


def _binary_slices(buf, starts: np.ndarray, sizes: np.ndarray) -> pa.Array:
    """A binary array of buf[starts[i]:starts[i]+sizes[i]] (in order, disjoint), copied once."""
    if not len(starts):
        return pa.array([], pa.binary())
    lo, hi = int(starts[0]), int(starts[-1] + sizes[-1])
    if hi - lo <= 2 * int(sizes.sum()):
        data = pa.py_buffer(bytes(memoryview(buf)[lo:hi]))
        offsets = np.append(starts - lo, hi - lo).astype(np.int32)
    else:  # long gaps (corrupt spans) between frames: copy the frames only
        mv = memoryview(buf)
        data = pa.py_buffer(b"".join(mv[s:s + z] for s, z in zip(starts.tolist(), sizes.tolist())))
        offsets = np.zeros(len(starts) + 1, np.int32)
        np.cumsum(sizes, out=offsets[1:])
    return pa.Array.from_buffers(pa.binary(), len(starts), [None, pa.py_buffer(offsets.tobytes()), data])


def _scatter(values: pa.Array, idx: list, n: int) -> pa.Array:
    """``values`` placed at rows ``idx`` of an n-row column, nulls elsewhere."""
    if len(idx) == n:
        return values
    take = np.full(n, -1, np.int64)
    take[idx] = np.arange(len(idx))
    indices = pa.array(take, mask=take < 0)
    return values.take(indices)


__all__ = ["CommitLogDataSource", "FORMAT", "arrow_schema", "range_items", "read_commitlog"]


def read_commitlog(spark, path: str, **options):
    """The commitlog as a DataFrame equal to store_format's walks, read in two Spark passes: the segment
    ends (first stop, first blank) from a pass that ships only stop and blank rows, then the rows."""
    from pyspark.sql import functions as F

    opts = {k: str(v) for k, v in options.items()}
    Options.parse(opts)  # fail on bad options before any job runs
    stops = (spark.read.format(FORMAT).options(**opts)
             .options(materialize="positions", walk="salvage", mode="PERMISSIVE", segmentEnds="unresolved")
             .load(path)
             .where(F.col("kind").isin("stop", "blank"))
             .groupBy("broker", "segment")
             .agg(F.min("file_position").alias("first_stop"),
                  F.min(F.when(F.col("kind") == "blank", F.col("file_position"))).alias("first_blank")))
    ends = {f"{r['broker']}/{r['segment']}": [r["first_stop"], r["first_blank"]] for r in stops.collect()}
    return spark.read.format(FORMAT).options(**opts).option("segmentEnds", json.dumps(ends)).load(path)
