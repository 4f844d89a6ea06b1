"""``rocketmq-commitlog``: CommitLog segments read in parallel, split into byte ranges on record boundaries.

Partitions are the ranges store_format.plan cuts (its one split policy, for a task that streams its rows:
MAX_RANGE_STREAMED; ``splitSize`` overrides it), and each task's rows are store_format.scan's walk of its range
(every frame and span of a segment's walk belongs to exactly one range, whatever the cut: see that module), built
into Arrow batches from its arrays with no per-record Python.  The framing runs compiled
(``decoding.kernels.CompiledFramer``).

``walk`` says which items: ``kept`` (the default), what the broker keeps after its predicted recovery -- the items
before the cut the audit reports, and its stop there -- or ``salvage``, everything intact, past damage and past the
cut (store_format.scan.WALKS; ``recovery`` is the kept walk's earlier name).  The cut is each store's
(store_format.recovery.predict_cut, predicted by the planner once per read, the ``brokerConfig`` broker.conf's
CRC settings followed), or the ``recoveryCuts`` a job predicted once for all its reads (JSON ``{broker:
Cut.as_dict()}``; ``none``: not known, for a salvage read that does not need it).  Every row says whether the broker
keeps it (``kept``).

A segment cut into several ranges needs its ends (its first stop, where ``beyond_first_stop`` begins, and its first
blank, where the salvage walk ends: store_format.scan), known only by walking it from its start.
datasources/twopass.py's :func:`read_commitlog` finds them in a first pass and hands them to this source in the
``segmentEnds`` option, so every task knows them, ranges past a walk's end are never read, and body CRCs checked by
the first pass are not checked again.  Without ``segmentEnds`` (or with ends that lack a segment it cuts) the
planner walks those segments itself, a range per core at a time, on every query; a segment that is a single range
needs neither (its one task walks it all).

Rows: one per walk item, ``kind`` = message | blank | stop (where a walk stopped: damage, or END_OF_DATA
for the zero-filled tail, summarized in one row whose ``length`` is the tail's) | corrupt (bytes the salvage
walk could not frame, never the zero tail after them, or a segment file with a bad name or length).
``materialize`` chooses what else a row carries: ``positions``
(nothing), ``frames`` (the record bytes), ``headers`` (decoded columns without the body: the default, so that a
plain ``load()`` has the columns people join and filter on -- topic, queue id and offset, keys, tags, store
time) or ``decoded`` (every canonical column, from decoding.kernels), since Python sources get no column pruning; a
job that needs less says so (``positions`` to count or locate, ``frames`` to compare bytes); with ``headers`` or
``decoded``, ``columns`` (comma-separated names) ships only the decoded columns asked for, which is most of the
cost of a decoded read (Spark's conversion of each column) when a job uses a few.
"""
from __future__ import annotations

import functools
import json
import math
import os
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql.datasource import EqualTo, GreaterThan, GreaterThanOrEqual, In, InputPartition, LessThan, \
    LessThanOrEqual

from store_format.commitlog import (CONTAINER_FIELDS, END_OF_DATA, KIND_CORRUPT, KIND_MESSAGE, KIND_STOP, KINDS,
                                    FrameArrays, SalvageSpan, container_fields, list_segment_files)
from store_format.fs import ReadOnlyMap
from store_format.errors import ErrorKind, RecordError
from store_format.plan import MAX_RANGE_STREAMED, SegmentRange, plan_ranges, split_segments
from store_format.scan import DEFAULT_MAX_RECORD_SIZE, WALK_MEANINGS, WALKS, canonical_walk, cut_to_walk, \
    read_range_walk, segment_ends, span_detail, walk_ends
from decoding.columns import column

from .base import StoreDataSource, StoreReader, option_bool, option_choice, option_int, option_parsed, option_size, \
    parse_mode

FORMAT = "rocketmq-commitlog"
MATERIALIZE = ("positions", "frames", "headers", "decoded")
DEFAULT_MATERIALIZE = "headers"  # what a plain load() carries: the message columns but the body
DEFAULT_BATCH_ROWS = 16384

BASE_COLUMNS = pa.schema([  # every row's, whatever it materializes
    column("broker", pa.string()), column("segment", pa.string()), column("file_position", pa.int64()),
    column("physical_offset", pa.int64()),
    column("kind", pa.string(), "what the walk found there: `message`, `blank`, `stop` or `corrupt`"),
    column("store_size", pa.int32()),
    column("length", pa.int64(), "bytes the row covers: a message's or blank's TOTALSIZE; for a stop, the rest "
                                 "of the segment file from there; for a corrupt span, its length"),
    column("beyond_first_stop", pa.bool_(), "past damage in its segment: after the first stop of the segment's walk "
                                            "from its start"),
    column("kept", pa.bool_(), "before the broker's predicted cut (the audit's): its recovery keeps the row; false "
                               "past it (the salvage walk's rows the broker drops); null where the cut is unknown"),
    *(column(name, pa.from_numpy_dtype(np.dtype(dtype)), doc) for name, dtype, doc in CONTAINER_FIELDS),
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
    from decoding import kernels as K

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
    from decoding import kernels as K

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
        from decoding import kernels as K

        fields += list(K.message_schema(kcols))
    return pa.schema(fields)


# ---------------------------------------------------------------------------------------------------------
# Options


@dataclass(frozen=True)
class Options:
    split_size: int | None  # None: the default (range_sizes)
    walk: str  # kept | salvage (store_format.scan.WALKS)
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
    cuts: str | None  # recoveryCuts: None (predicted here), "none" (not known) or JSON {broker: Cut.as_dict()}
    broker_config: str | None  # brokerConfig: the broker.conf whose CRC settings the prediction follows

    @classmethod
    def parse(cls, options) -> "Options":
        materialize = option_choice(options, "materialize", MATERIALIZE, DEFAULT_MATERIALIZE)
        return cls(
            split_size=option_size(options, "splitSize"),
            walk=parse_walk(options),
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
            cuts=options.get("recoveryCuts"),
            broker_config=options.get("brokerConfig"),
        )


def parse_walk(options) -> str:
    """The ``walk`` option: kept (default) or salvage (store_format.scan.WALKS; an earlier name is taken too)."""
    def choose(value):
        v = canonical_walk(str(value).strip().lower())
        if v not in WALKS:
            raise ValueError(f"choose one of {', '.join(WALKS)} "
                             f"({'; '.join(f'{w}: {m}' for w, m in WALK_MEANINGS.items())})")
        return v

    return option_parsed(options, "walk", "kept", choose)


# ---------------------------------------------------------------------------------------------------------
# Planning


@dataclass
class RangePartition(SegmentRange, InputPartition):
    """A range planned by store_format.plan (walk items of one segment whose position lies in [start, next range's
    sync point)), as the partition Spark hands to a task."""


def plan_segment_ranges(inputs, opts: Options) -> list[SegmentRange]:
    """The ranges of every segment file of the commitlog ``inputs`` (store_format.stores.part_inputs), cut by the
    split policy for a task that streams its rows (``splitSize`` overrides it)."""
    segments = [(inp.broker, s) for inp in inputs for s in list_segment_files(inp.loc, opts.segment_size)]
    return plan_ranges(segments, opts.split_size, opts.parallelism or os.cpu_count() or 2, largest=MAX_RANGE_STREAMED)


def recovery_cuts(inputs, opts: Options) -> dict:
    """{broker: store_format.recovery.Cut or None} for the inputs: the ``recoveryCuts`` given, else each store's
    predicted here the audit's way (store_format.recovery.predict_cut, ``brokerConfig``'s CRC settings,
    ``checkCrc`` as checkCRCOnRecover).  None where it is not known: ``recoveryCuts=none``, or a store whose recovery
    cannot be predicted (a segment file outside a store) -- the kept walk then refuses to read."""
    from store_format.recovery import Cut

    given = opts.cuts.strip() if opts.cuts is not None else None
    if given is not None and given.lower() == "none":
        found = {inp.broker: None for inp in inputs}
    else:
        table = json.loads(given) if given else {}
        found = {inp.broker: Cut.from_dict(table[inp.broker]) if inp.broker in table else predicted_cut(inp, opts)
                 for inp in inputs}
    if opts.walk == "kept":
        unknown = [b for b, c in found.items() if c is None]
        if unknown:
            raise ValueError(f"walk=kept returns what the broker keeps after its predicted recovery, which is not "
                             f"known for {', '.join(unknown)} (a segment file outside a store, or recoveryCuts=none): "
                             "read it with walk=salvage, or give its store root")
    return found


def predicted_cut(inp, opts: Options):
    """The cut of the store ``inp`` belongs to (None when its root is not a store)."""
    from store_format.brokerconf import read_properties, recovery_settings
    from store_format.errors import StoreFormatError
    from store_format.recovery import predict_cut
    from store_format.store import Store

    settings = recovery_settings(read_properties(opts.broker_config), opts.broker_config) \
        if opts.broker_config else None
    try:
        store = Store(inp.root, segment_size=opts.segment_size)
    except StoreFormatError:
        return None
    return predict_cut(store, settings, check_crc=opts.check_crc, salvage_stops=_given_stops(inp.broker, opts)).cut


def _given_stops(broker: str, opts: Options) -> dict[str, int]:
    """{segment: first stop} of ``broker``'s segments whose ends the first pass gave (``segmentEnds``): the recovery
    prediction's walk goes on from there, instead of framing (and checking the CRC of) the same gigabytes a second
    time."""
    if opts.ends in ("planner", "unresolved"):
        return {}
    return salvage_stops(json.loads(opts.ends), broker, opts.check_crc)


def salvage_stops(ends: dict, broker: str, check_crc: bool) -> dict[str, int]:
    """{segment: the salvage walk's first stop} of ``broker``'s segments in a first pass's ``ends``
    (twopass.commitlog_ends), for store_format.recovery.predict_cut's ``salvage_stops``: with ``check_crc`` only as
    far as the first pass checked the CRCs (its ``crc_checked_before``)."""
    stops = {}
    for key, (first_stop, _first_blank, *checked) in ends.items():
        owner, _, segment = key.rpartition("/")
        stop = (checked[0] if checked else 0) if check_crc else first_stop
        if owner == broker and stop:
            stops[segment] = int(stop)
    return stops


def walk_options(opts: Options) -> dict:
    """What :func:`store_format.scan.read_range_walk` takes from the options, and the compiled framer."""
    return dict(check_crc=opts.check_crc, excerpt_bytes=opts.excerpt_bytes, io=opts.io,
                max_record_size=opts.max_record_size, framer=_compiled_framer())


def walk_segment_ends(ranges: list[SegmentRange], opts: Options) -> dict[str, tuple]:
    """The ends of the segments cut into ``ranges``, walked in this process (store_format.scan.walk_ends)."""
    return walk_ends(ranges, parallelism=opts.parallelism, **walk_options(opts))


@functools.cache
def _compiled_framer():
    from decoding.kernels import CompiledFramer

    return CompiledFramer


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
        brokers, segments = _value_set(self.filters, "broker"), _value_set(self.filters, "segment")
        lo, hi = _offset_bounds(self.filters)
        # ranges planned over every file, as commitlog_ends plans them, then the files the filters exclude dropped
        inputs = [i for i in inputs if brokers is None or i.broker in brokers]
        cuts = recovery_cuts(inputs, self.opts)
        kept = self.opts.walk == "kept"
        parts = [RangePartition(**vars(p)) for p in plan_segment_ranges(inputs, self.opts)
                 if (brokers is None or p.broker in brokers) and (segments is None or p.name in segments)
                 and (p.base is None or (p.base + p.length >= lo and p.base <= hi))]
        past_cut = {p.key for p in parts if kept and p.base is not None and p.base > cuts[p.broker].physical_offset}
        ends = self._ends([p for p in parts if p.key not in past_cut])  # a segment the broker deletes needs none
        out = []
        for p in parts:
            p.cut = cuts.get(p.broker)
            if p.base is not None:
                if p.base + p.start > hi and p.start > 0:
                    continue  # every item of the range lies at or after its start
                if kept and p.base + p.start > p.cut.physical_offset and not p.problems:
                    continue  # past the broker's cut: the kept walk has nothing there
                if p.key in ends:
                    p.first_stop, p.first_blank, *checked = ends[p.key]
                    p.crc_checked_before = checked[0] if checked and self.opts.check_crc else 0
                    p.resolved = True
                    if p.first_blank is not None and p.start > p.first_blank and not p.problems:
                        continue  # the salvage walk of the segment ends before this range: nothing to read
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
        ends.update(walk_segment_ends([p for p in parts if p.key in missing], self.opts))
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
        walk, handle, w0 = read_range_walk(p.loc, p.name, p.base, p.length, p.start, p.end, p.last,
                                           crc_checked_before=p.crc_checked_before, **walk_options(self.opts))
        items = walk.items
        try:
            buf = handle.buf if isinstance(handle, ReadOnlyMap) else handle
            if p.finds_ends:
                p.first_stop, p.first_blank = segment_ends([items])
                p.resolved = True
            if p.resolved or p.cut is not None:
                items = cut_to_walk(items, self.opts.walk, p.first_stop, p.first_blank if p.resolved else None, p.cut)
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
        if p.cut is not None and p.base is not None:
            problem = [i for i, it in items.others.items() if isinstance(it, _FileProblem)]
            kept = pa.array(pos + p.base < p.cut.physical_offset, pa.bool_(),
                            mask=_rows_mask(problem, n) if problem else None)
        else:
            kept = pa.nulls(n, pa.bool_())
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
            "beyond_first_stop": beyond, "kept": kept,
            "reason": _sparse(reason, n), "field": _sparse(field, n), "detail": _sparse(detail, n),
            "excerpt_hex": _sparse(excerpt, n),
        }
        msg_rows = None if all_messages else np.flatnonzero(kinds == KIND_MESSAGE)
        starts, sizes = (pos, items.sizes) if all_messages else (pos[msg_rows], items.sizes[msg_rows])
        starts = starts - w0
        cols.update(self._container(buf, starts, msg_rows, n))
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

    def _container(self, buf, starts, msg_rows, n) -> dict:
        """The message rows' container columns (store_format.commitlog.CONTAINER_FIELDS), null on every other row
        and for a plain segment."""
        found = container_fields(self.p.loc, buf, starts) if buf is not None and len(starts) else None
        return {name: pa.nulls(n, pa.from_numpy_dtype(np.dtype(dtype))) if found is None
                else _scatter(pa.array(found[name]), msg_rows, n) for name, dtype, _ in CONTAINER_FIELDS}

    def _decode(self, buf, w0: int, starts, sizes, msg_rows, n) -> dict:
        from store_format.layout import parse_delay_levels
        from decoding import kernels as K

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
            raise RecordError(ErrorKind(errors[bad].as_py()), "decoding.kernels rejects a record that framing "
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


__all__ = ["CommitLogDataSource", "FORMAT", "Options", "arrow_schema", "parse_columns", "plan_segment_ranges",
           "walk_segment_ends"]
