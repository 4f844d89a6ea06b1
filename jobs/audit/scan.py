"""The scan: the audit's one pass over a dump, in tasks that each decide every check they can locally.

A :class:`CommitlogRange` task walks one range of a segment (salvage walk, bodies' CRCs checked once), decodes
the columns the checks use with decoding.kernels, and owns a span of physical offsets: the entries of every routed
file (jobs/audit/routes.py: consume-queue units, index entries) pointing into it are read (only those: routed by
the survey's buckets) and reconciled with its messages right there, in numpy, with no join across tasks.  Spans
tile the number line: a range owns from the position its walk starts at (the broker's first range: from minus
infinity) to where the next range's walk starts (a segment's last range: to the next segment, the last one: to
plus infinity), so every entry is checked by exactly one task, and the record an entry points into (or just
after) is always that task's.

Consecutive small ranges of one broker (small segments: a store rolled at a few KiB, thousands of them) run as
one :class:`CommitlogRun` task: the routed entries of their joint span are read once, not once per range and file,
and its contiguous whole segments are checked as one :class:`RangeContext` (:func:`check_jointly`: each walked on
its own, decoded together, each family's ``in_range`` called once), whose rows still say their own segment, file
position and first stop (:class:`RangePart`).  What it emits is what checking each range alone emits
(tests/test_joint_ranges.py); a context that fails is checked again range by range, so a failure is its range's.

A :class:`FileScan` task reads a group of one route's files for what a file says alone (corrupt units, names,
what recovery truncates, an index file's hash chains and header).  Each family of jobs/audit/checks/ contributes
hooks (jobs/audit/contract.py: ``in_range``, ``in_files[route]``) and finishes on the driver from the partial
tables its hooks emitted.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property

import numpy as np
import pyarrow as pa

from store_format import layout as L
from store_format.commitlog import KIND_BLANK, KIND_CORRUPT, KIND_MESSAGE, FrameArrays, in_container
from store_format.fs import Location, ReadOnlyMap
from store_format.plan import group_queue_files
from store_format.queues import MANY_BYTES, Dispatch, QueueFile, read_once
from store_format.scan import cut_to_walk, read_range_walk, segment_ends
from decoding.kernels import CompiledFramer

from .plan import NEGATIVE_BUCKET, ManyBuckets, bucket_of
from .routes import ROUTES, VIEW, ManyWindows, told_by_survey
from .tasks import Emitter, Shared, failure_row

INF = np.iinfo(np.int64).max
NEG_INF = np.iinfo(np.int64).min
# columns every message row carries, decoded once per range (the rest on demand, for the few rows that need them)
DECODED = ("topic", "queue_id", "queue_offset", "tags_code", "tran_type", "store_timestamp", "uniq_key", "keys",
           "tags", "prepared_transaction_offset", "real_topic", "real_queue_id", "retry_topic", "origin_message_id",
           "reconsume_times", "sys_flag", "invalid_utf8", "crc_property")
_DECODE_ROWS = 1 << 18
SMALL_RANGE = 4 << 20  # a range smaller than this shares a task with its small neighbours (CommitlogRun)...
RUN_BYTES = 32 << 20  # ...up to about this many bytes of log per task
RUN_RANGES = 1024  # ...and this many ranges: a few thousand small segments still make a task or more per core
# (1,024 segments of 8 KiB are 8 MiB, a quarter of a task of large segments; each run reads every routed
# consume-queue file's window and calls each family's in_range once per joint context: 256 made 17 of them for
# 4,287 segments, 1,024 make 5)
#: with a state (jobs/audit/kept.py), a run also ends where a cell of this many physical offsets does: a run's
#: output is kept whole, so its ranges are the same every night but in the cells the store grew or expired in
RUN_CELL = 32 << 20
#: a run's contiguous whole segments are checked as one context (check_jointly: one decode, each family's in_range
#: once); False: each range on its own context (what tests/test_joint_ranges.py compares it with)
JOINT = True

# locate(): what a physical offset that starts no message points at
IN_DAMAGE, MID_RECORD, OUTSIDE = 0, 1, 2


@dataclass
class BrokerFacts(Shared):
    """What every scan task of one broker shares (decided on the driver between survey and scan): on a Spark job,
    shipped once per stage, not with each bin (jobs/audit/tasks.py :class:`Shared`)."""

    broker: str
    families: tuple  # the jobs.audit.contract.Family objects this audit runs (their hooks)
    check_crc: bool
    segment_size: int  # the broker's segment size (1 when unknown): a record belongs to its size-aligned block
    recovered_end: int  # the predicted recovery's max physical offset: messages before it are kept
    recovery_stop: object  # the SegmentWalk the recovery walk ended in (store_format.recovery), or None
    reput_from: int  # the consume queues' end: the broker dispatches records past it at start
    has_commitlog: bool  # without a segment, recovery destroys every consume queue
    truncate_queues: bool  # recovery runs truncateDirtyLogicFiles on every queue (store_format.recovery)
    index_pending_from: int  # where the broker (re-)indexes from at start
    indexed: bool  # the store has an index/ folder
    shift: int
    commitlog_end: int
    routed: dict = field(default_factory=dict)  # route name -> its routes.RoutedFile of this broker
    # file-level damage that counts as corrupt bytes where it lies: (physical offset, length, reason)
    file_problems: list[tuple[int, int, str]] = field(default_factory=list)
    delay_levels: dict = field(default_factory=lambda: dict(L.DEFAULT_DELAY_LEVELS))
    probes: dict = field(default_factory=dict)  # family name -> what it asks every task of the broker to look up
    # where the broker's dispatch puts each message's units (store_format.queues.Dispatch: which queue folder a
    # topic's units are in, which queues hold copies of other queues' records); with ``dispatch.multi`` every range
    # decodes its messages' property strings too (``properties_raw``)
    dispatch: Dispatch = field(default_factory=Dispatch)
    # audit --state: each range also emits what its families' range_memo keep of its messages (jobs/audit/kept.py)
    keeping: bool = False
    # audit --state (jobs/audit/kept.py): the routed files whose entries the broker only appends to, which a range's
    # key names by their rows instead of showing them ({path: what names the file in a key}, AuditState.settled); and
    # of those, the paths of the ones the state found as the last run did, or grown past it (jobs/audit/state.py: same
    # or grown), which alone let a range give its part back by those rows
    row_keyed: dict = field(default_factory=dict)
    settled: frozenset = frozenset()
    # route name -> the buckets of its routed files as one (plan.ManyBuckets), made where a task first asks
    _buckets: dict = field(default_factory=dict, repr=False, compare=False)

    def buckets_of(self, route: str) -> ManyBuckets:
        """The buckets of the route's routed files, each file's in turn (every range of the broker asks them)."""
        if route not in self._buckets:  # two threads may both make it: the same object's worth
            self._buckets[route] = ManyBuckets.of([f.buckets for f in self.routed.get(route, ())])
        return self._buckets[route]


@dataclass
class Walked:
    """A range walked (:meth:`CommitlogRange.walked`): its items (file positions), its segment's first stop, the
    open handle and buffer (buffer offset ``w0``) and the span it owns (``lo`` .. ``hi`` - 1)."""

    items: FrameArrays
    first_stop: int | None
    handle: object
    w0: int
    lo: int
    hi: int

    @property
    def buf(self):
        return self.handle.buf if isinstance(self.handle, ReadOnlyMap) else self.handle

    def close(self) -> None:
        if isinstance(self.handle, ReadOnlyMap):
            self.handle.close()


@dataclass(frozen=True)
class RangePart:
    """One range of a :class:`RangeContext` (a context holds one, or a :class:`CommitlogRun`'s contiguous whole
    segments): what its rows say per range, not per context.  A context position is a file position + ``shift``."""

    segment: str
    base: int  # the segment's base offset
    shift: int
    first_stop: int | None  # the segment's first stop or blank (file position): messages past it are stale
    row: int  # its first item row in the context
    lo: int  # the physical offsets it owns: lo .. hi - 1
    hi: int
    start: int  # its range's start in the segment (scan.ranges' range_start)


def check_context(rc: "RangeContext", out: Emitter) -> None:
    """What the scan emits for a context: a ``scan.ranges`` row per range and every family's ``in_range`` once."""
    out.partial("scan.ranges", rc.range_rows())
    for family in rc.facts.families:
        if family.in_range is not None:
            family.in_range(rc, out)
        if rc.facts.keeping and family.range_memo is not None:
            memo = family.range_memo(rc)
            if memo is not None:
                out.partial(MEMO + family.name, pa.table({"memo": memo}))
    rc.release()


#: a range's memo for its kept part (jobs/audit/kept.py takes it out of what the task emits): MEMO + family name
MEMO = "_memo."


@dataclass
class CommitlogRange:
    facts: BrokerFacts
    loc: Location
    name: str
    base: int
    length: int
    start: int
    end: int
    last: bool
    first_stop: int | None = None  # the segment's walk ends, when known before the task (the survey's)
    first_blank: int | None = None
    crc_checked_before: int = 0
    resolved: bool = False
    first_of_broker: bool = False  # owns everything below its walk's start too
    next_base: int | None = None  # a segment's last range owns up to the next segment (None: to infinity)
    # where its walk ended (the next range's walk starts), once walked: how far its output depends on the bytes
    walk_until: int | None = field(default=None, compare=False, repr=False)

    @property
    def broker(self) -> str:
        return self.facts.broker

    @property
    def ranges(self) -> tuple:
        """The ranges the task checks (as a :class:`CommitlogRun`'s): itself."""
        return (self,)

    def describe(self) -> str:
        return f"{self.facts.broker}/{self.name}@{self.start}"

    def cost(self) -> int:
        return self.end - self.start

    def walked(self) -> "Walked":
        """The range's salvage walk as its task checks it (cut at its segment's first blank), the buffer it lies in
        and the span of physical offsets it owns; the caller closes it (:meth:`Walked.close`)."""
        walk, handle, w0 = read_range_walk(self.loc, self.name, self.base, self.length, self.start, self.end,
                                           self.last, check_crc=self.facts.check_crc,
                                           crc_checked_before=self.crc_checked_before, framer=CompiledFramer)
        self.walk_until = walk.until
        try:
            first_stop, first_blank = (self.first_stop, self.first_blank) if self.resolved \
                else segment_ends([walk.items])
            items = cut_to_walk(walk.items, "salvage", first_stop, first_blank)
            if walk.first is None:
                lo = hi = self.base + self.start  # no walk of its own: the previous range's covers its bytes
            else:
                lo = NEG_INF if self.first_of_broker else self.base + walk.first
                hi = self.base + walk.until if walk.until is not None else (
                    INF if self.next_base is None else max(self.next_base, self.base + self.length))
        except BaseException:
            if isinstance(handle, ReadOnlyMap):
                handle.close()
            raise
        return Walked(items, first_stop, handle, w0, lo, hi)

    def part(self, w: "Walked", shift: int = 0, row: int = 0) -> "RangePart":
        """This range as a part of a context whose positions are its file positions + ``shift``, its items from
        the context's row ``row`` on."""
        return RangePart(self.name, self.base, shift, w.first_stop, row, w.lo, w.hi, self.start)

    def run(self, out: Emitter, windows: "RoutedWindows | None" = None) -> None:
        """``windows``: the routed entries of a span holding this range's (a :class:`CommitlogRun`'s), read once
        for all its ranges; None: read for this range alone."""
        w = self.walked()
        try:
            check_context(RangeContext(self.facts, (self.part(w),), w.items, w.buf, w.w0, w.lo, w.hi, windows), out)
        finally:
            w.close()

    def reach(self, max_record: int) -> int | None:
        """How far into its file its output depends on the bytes, once walked: the next range's walk start and a
        largest record (``max_record``) twice over, as a ranged read reads; None: to the file's end (the segment's
        last range, or a walk that did not end in the range)."""
        return None if self.last or self.walk_until is None else self.walk_until + 2 * max_record

    def span_bound(self) -> tuple[int, int]:
        """Physical offsets holding the span this range will own, whatever its walk finds (it owns from its
        walk's start to the next range's walk's start, inside its segment unless it is the segment's last)."""
        lo = NEG_INF if self.first_of_broker else self.base + self.start
        hi = (INF if self.next_base is None else max(self.next_base, self.base + self.length)) if self.last \
            else self.base + self.length
        return lo, hi


@dataclass
class CommitlogRun:
    """Consecutive small ranges of one broker as one task, the routed entries of their joint span read once
    (:class:`RoutedWindows`): thousands of 8 KiB segments must not each open every consume-queue file.  Its
    contiguous whole segments (:func:`joint_groups`) are checked as one context (:func:`check_jointly`), the
    rest each alone.  A joint context that fails (a walk, a family's hook) is dropped whole and its ranges are
    checked again one by one: the failing range reports the failure row its own task would, the others their
    findings (the cost of the failure: its ranges are walked twice)."""

    ranges: tuple

    @property
    def broker(self) -> str:
        return self.ranges[0].broker

    def describe(self) -> str:
        return f"{self.ranges[0].describe()} .. {self.ranges[-1].name}@{self.ranges[-1].start} " \
               f"({len(self.ranges)} ranges)"

    def cost(self) -> int:
        return sum(r.cost() for r in self.ranges)

    def run(self, out: Emitter) -> None:
        bounds = [r.span_bound() for r in self.ranges]
        windows = RoutedWindows(self.ranges[0].facts, min(lo for lo, _ in bounds), max(hi for _, hi in bounds))
        for group in joint_groups(self.ranges) if JOINT else [[r] for r in self.ranges]:
            if len(group) > 1:
                mine = Emitter()
                try:
                    if check_jointly(group, mine, windows):
                        out.merge(mine)
                        continue
                except Exception:  # noqa: BLE001 - checked again range by range: the failure is its range's
                    pass
            for r in group:
                mine = Emitter()
                try:
                    r.run(mine, windows)
                except Exception as e:  # as tasks.run_one: what the range made before it failed is incomplete
                    mine = Emitter()
                    mine.partial("_failures", failure_row(r.broker, r.describe(), e))
                out.merge(mine)


def joint_groups(ranges) -> list[list]:
    """``ranges`` (consecutive, of one broker) cut where two cannot share a context: each a whole segment of the
    broker's segment size, not in a container (DLedger), and each group contiguous in physical offsets (the next
    segment's base is where this one ends), so one buffer holds them all at their physical offsets."""
    groups: list[list] = []
    for r in ranges:
        prev = groups[-1][-1] if groups else None
        if prev is not None and _whole(prev) and _whole(r) and prev.base + prev.length == r.base:
            groups[-1].append(r)
        else:
            groups.append([r])
    return groups


def _whole(r) -> bool:
    """A range that is its whole segment, of the broker's segment size, of plain records."""
    return r.start == 0 and r.end == r.length and r.last and r.length == r.facts.segment_size \
        and not in_container(r.loc)


def check_jointly(group: list, out: Emitter, windows: "RoutedWindows") -> bool:
    """``group`` (:func:`joint_groups`) checked as one context: each range walked on its own (so each is cut at
    its own segment's blank, its CRCs checked from where its own task would), their items at their physical
    offsets - ``group[0].base`` in one buffer of their bytes, every family's ``in_range`` called once.  False
    (nothing emitted) when their walks' spans do not tile (a range with no walk of its own): then each is checked
    alone.  A failure raises: the caller checks each range alone, so a failing range fails as its own task does."""
    base, parts, items, chunks, spans, row = group[0].base, [], [], [], [], 0
    for r in group:
        w = r.walked()
        try:
            if w.w0 or len(w.buf) < r.length:
                return False
            shift = r.base - base
            parts.append(r.part(w, shift, row))
            items.append(w.items.within(group[0].name, shift))
            chunks.append(bytes(w.buf[:r.length]))
            spans.append((w.lo, w.hi))
            row += len(w.items)
        finally:
            w.close()
    if any(a[1] != b[0] for a, b in zip(spans, spans[1:])):
        return False
    rc = RangeContext(group[0].facts, tuple(parts), FrameArrays.concat(items), b"".join(chunks), 0, spans[0][0],
                      spans[-1][1], windows)
    check_context(rc, out)
    return True


def in_runs(ranges: list, cells: bool = False) -> list:
    """A broker's ranges as tasks: runs of consecutive ranges smaller than :data:`SMALL_RANGE`, up to about
    :data:`RUN_BYTES` and :data:`RUN_RANGES` each, as :class:`CommitlogRun` tasks; every other range its own task.
    ``cells``: runs also end at multiples of :data:`RUN_CELL` (an audit with a state)."""
    tasks, run, size = [], [], 0
    for r in ranges + [None]:  # None: the end, flushing the last run
        if r is None or r.cost() >= SMALL_RANGE or size + r.cost() > RUN_BYTES or len(run) == RUN_RANGES \
                or cells and run and (r.base + r.start) // RUN_CELL != (run[0].base + run[0].start) // RUN_CELL:
            tasks.extend(run if len(run) < 2 else [CommitlogRun(tuple(run))])
            run, size = [], 0
        if r is not None:
            (run if r.cost() < SMALL_RANGE else tasks).append(r)
            size += r.cost() if r.cost() < SMALL_RANGE else 0
    return tasks


def owned_buckets(facts: BrokerFacts, lo: int, hi: int) -> tuple[int, int]:
    """The survey's buckets (jobs/audit/plan.py) of physical offsets ``lo`` .. ``hi`` - 1."""
    blo = NEGATIVE_BUCKET if lo == NEG_INF else int(bucket_of(np.array([lo]), facts.shift, facts.commitlog_end)[0])
    bhi = int(bucket_of(np.array([INF if hi == INF else hi - 1]), facts.shift, facts.commitlog_end)[0])
    return blo, bhi


def whole_buckets(facts: BrokerFacts, lo: int, hi: int) -> tuple[int, int]:
    """The first and last of the survey's buckets that ``lo`` .. ``hi`` - 1 holds whole (first > last: none); the
    others it owns part of are its two ends' (:func:`owned_buckets`)."""
    blo, bhi = owned_buckets(facts, lo, hi)
    last = facts.commitlog_end >> facts.shift  # the bucket past it holds every offset beyond the log
    start = NEG_INF if blo == NEGATIVE_BUCKET else blo << facts.shift
    end = INF if bhi > last else (bhi + 1) << facts.shift
    return blo if start >= lo else blo + 1, bhi if end <= hi else bhi - 1


class RoutedWindows:
    """The windows of every routed file of a route holding the entries that point into ``lo`` .. ``hi`` - 1, read
    once per route: all at once where the route can (routes.ManyWindows), else a list of (file, its first unit's
    row, the window) as routes.Route.window reads them."""

    def __init__(self, facts: BrokerFacts, lo: int, hi: int, *, buckets: tuple[int, int] | None = None,
                 leave_out=(), only=None, else_as: "RoutedWindows | None" = None):
        self.facts, self.lo, self.hi = facts, lo, hi
        # jobs/audit/kept.py: the windows of some of the span's buckets only, of some files only (paths); where a
        # route has none of ``leave_out``, the windows ``else_as`` read of it
        self.buckets = buckets or owned_buckets(facts, lo, hi)
        self.leave_out, self.only, self.else_as = leave_out, only, else_as
        self._read: dict[str, list | ManyWindows] = {}
        self._digested: dict[str, list] = {}

    def _wanted(self, name: str) -> tuple[list, bool]:
        """(file, first row, end row) of each file of route ``name`` to read, and whether they are all its files
        with entries in the buckets."""
        routed = self.facts.routed.get(name, ())
        files, first, end = self.facts.buckets_of(name).rows_for(*self.buckets)
        wanted = [(routed[i], a, b) for i, a, b in zip(files.tolist(), first.tolist(), end.tolist())
                  if routed[i].loc.path not in self.leave_out and (self.only is None or routed[i].loc.path
                                                                   in self.only)]
        return wanted, len(wanted) == len(files)

    def of(self, name: str) -> "list | ManyWindows":
        if name not in self._read:
            route = ROUTES[name]
            wanted, every = self._wanted(name)
            if self.else_as is not None and every:
                return self.else_as.of(name)
            many = route.read_windows(wanted) if route.read_windows is not None else None  # ManyWindows, or None
            self._read[name] = many if many is not None else [(f, first, route.window(f, first, end))
                                                              for f, first, end in wanted]
        return self._read[name]

    def digests(self, name: str) -> list:
        """What route ``name``'s entries pointing into the span are made of (``Route.span_digest``), not made into
        windows: (file name, params, their first row, one past their last, the digest of those rows) of each file
        with some, of the rows :meth:`of` would read."""
        if name not in self._digested:
            route = ROUTES[name]
            wanted, every = self._wanted(name)
            if self.else_as is not None and every:
                return self.else_as.digests(name)
            self._digested[name] = [(f.name, f.params, *d) for f, a, b in wanted
                                    if (d := route.span_digest(f, a, b, self.lo, self.hi)) is not None]
        return self._digested[name]


def _routed_picks(windows: RoutedWindows, name: str, lo: int, hi: int, by_rows=None) -> tuple:
    """The valid entries of route ``name`` among ``windows`` pointing into ``lo`` .. ``hi`` - 1: (what was read: a
    :class:`ManyWindows` or a list of windows; the entries picked from it: indexes into a ManyWindows' columns, else
    (file, its first unit's row, indexes into its window, the window) of each file with some; [(path, the entries'
    rows in the file)] of the files of ``by_rows`` (file paths), whose entries are named, not picked), the files in
    the windows' order."""
    read = windows.of(name)
    named = []
    if isinstance(read, ManyWindows):
        phys = read.columns["physical_offset"]
        idx = np.flatnonzero(read.columns["valid"] & (phys >= lo) & (phys < hi))
        if by_rows and len(idx):
            mine = np.array([f.loc.path in by_rows for f in read.files], bool)[read.file_row[idx]]
            rows, of_file = read.row[idx[mine]], read.file_row[idx[mine]]
            cut = np.flatnonzero(np.r_[True, of_file[1:] != of_file[:-1]]).tolist() if len(of_file) else []
            named = [(read.files[of_file[a]].loc.path, rows[a:b]) for a, b in zip(cut, [*cut[1:], len(of_file)])]
            idx = idx[~mine]
        return read, idx, named
    picked = []
    for f, first, w in read:
        phys = w["physical_offset"]
        idx = np.flatnonzero(w["valid"] & (phys >= lo) & (phys < hi))
        if len(idx) and by_rows and f.loc.path in by_rows:
            named.append((f.loc.path, first + idx))
        elif len(idx):
            picked.append((f, first, idx, w))
    return read, picked, named


def routed_entries(windows: RoutedWindows, name: str, lo: int, hi: int):
    """The valid entries of route ``name`` among ``windows`` pointing into ``lo`` .. ``hi`` - 1, as the route shows
    them (its VIEW)."""
    route, schema = ROUTES[name], VIEW[name]
    read, picked, _ = _routed_picks(windows, name, lo, hi)
    if isinstance(read, ManyWindows):
        shown = route.view_many(read, picked) if len(picked) else schema.empty_table()
    else:
        shown = pa.concat_tables([route.view(f, first, idx, w) for f, first, idx, w in picked]) if picked else \
            schema.empty_table()
    return shown


def routed_values(windows: RoutedWindows, name: str, lo: int, hi: int, by_rows=None):
    """What :func:`routed_entries` shows, as the values a route's view is made of (each file's name and params, the
    entries' rows in it and their window's columns), not the view: for a digest (jobs/audit/kept.py), equal values
    make equal views, and a range's views of a wide broker's units and an index's entries are megabytes of Arrow
    made only to be hashed.  ``by_rows`` (file paths): those files' entries not shown but named, as (the values of
    the others', [(path, the entries' rows in the file)]), the files in the windows' order.  A route whose windows
    are made of their rows' bytes alone (``Route.span_digest``: an index's entries) gives, of each file, the rows
    from its first entry pointing into the span to its last and their bytes' digest instead
    (:meth:`RoutedWindows.digests`): the same rows of the same bytes show the same entries of the span, at a
    fraction of the cost of showing them."""
    if ROUTES[name].span_digest is not None and not (by_rows and any(
            f.loc.path in by_rows for f in windows.facts.routed.get(name, ()))):
        shown = windows.digests(name)
        return shown if by_rows is None else (shown, [])
    read, picked, named = _routed_picks(windows, name, lo, hi, by_rows)

    def values(w: dict, idx: np.ndarray, n: int) -> dict:  # a window's columns at the entries (anything else whole)
        return {c: v[idx] if isinstance(v, np.ndarray) and v.shape[:1] == (n,) else v for c, v in w.items()}

    if isinstance(read, ManyWindows):
        used, of_used = np.unique(read.file_row[picked], return_inverse=True)
        shown = ([(read.files[i].name, read.files[i].params) for i in used.tolist()], of_used.astype(np.int64),
                 read.row[picked], values(read.columns, picked, len(read.file_row)))
    else:
        shown = [(f.name, f.params, first, idx, values(w, idx, len(w["physical_offset"])))
                 for f, first, idx, w in picked]
    return shown if by_rows is None else (shown, named)


def _one_array_each(batches: list) -> dict[str, pa.Array]:
    """Each column of ``batches`` (a range decoded :data:`_DECODE_ROWS` records at a time) as one array, made a
    column at a time and each column's pieces let go once it is made (``batches`` is emptied): a whole table's
    ``combine_chunks`` held every decoded column twice at once, the scan's peak at 16 GiB."""
    names = batches[0].schema.names
    if len(batches) == 1:
        out = dict(zip(names, batches[0].columns))
        batches.clear()
        return out
    pieces = [dict(zip(names, b.columns)) for b in batches]
    batches.clear()
    return {name: pa.concat_arrays([p.pop(name) for p in pieces]) for name in names}


class RangeContext:
    """One range's walk, messages and the units and entries it owns, for the families' ``in_range`` hooks; or a
    :class:`CommitlogRun`'s contiguous whole segments as one (:func:`check_jointly`).  Its ``positions`` are
    context positions (``positions + base`` is the physical offset, ``positions - w0`` the place in ``buf``);
    what an output names per range (the file, the file position, the segment's first stop) is per row
    (:meth:`files`, :meth:`file_positions`), from the row's :class:`RangePart`."""

    def __init__(self, facts: BrokerFacts, parts: tuple, items, buf, w0: int, lo: int, hi: int,
                 windows: RoutedWindows | None = None):
        self.facts, self.broker, self.parts = facts, facts.broker, parts
        self.base = parts[0].base - parts[0].shift  # the physical offset of context position 0
        self.items = items
        self.buf, self.w0 = buf, w0
        self.lo, self.hi = lo, hi
        self.kinds = items.kinds
        self.positions = items.positions  # context positions
        self.message_rows = np.flatnonzero(items.kinds == KIND_MESSAGE)
        self._windows = windows  # the routed entries of a span holding this range's, read once (CommitlogRun)
        self._part_rows = np.array([p.row for p in parts], np.int64)
        self._shifts = np.array([p.shift for p in parts], np.int64)

    def release(self) -> None:
        self.buf = None
        self.__dict__.pop("messages", None)
        self.__dict__.pop("_routed", None)

    # ---- per row: which range, file and file position -----------------------------------------------
    @property
    def has_segments(self) -> bool:
        """False for a broker without a commitlog (:class:`NoCommitlog`): nothing was walked."""
        return bool(self.parts[0].segment)

    def part_of(self, rows: np.ndarray) -> np.ndarray:
        """The index in :attr:`parts` of each item row."""
        return np.searchsorted(self._part_rows, rows, side="right") - 1

    def part_bounds(self) -> np.ndarray:
        """The item rows of each part: part ``k`` is rows ``bounds[k]`` .. ``bounds[k + 1]`` - 1."""
        return np.append(self._part_rows, len(self.positions))

    def files(self, rows: np.ndarray) -> pa.Array:
        """The segment file of each item row."""
        if len(self.parts) == 1:
            return pa.repeat(pa.scalar(self.parts[0].segment, pa.string()), len(rows))
        return pa.array([p.segment for p in self.parts], pa.string()).take(pa.array(self.part_of(rows)))

    def file_positions(self, rows: np.ndarray, positions: np.ndarray | None = None) -> np.ndarray:
        """The file position of each item row (or of ``positions``, context positions in those rows' ranges)."""
        positions = self.positions[rows] if positions is None else np.asarray(positions, np.int64)
        return positions - self._shifts[self.part_of(rows)] if len(self.parts) > 1 else positions

    def beyond_first_stop(self, rows: np.ndarray) -> np.ndarray:
        """Whether each item row lies past its segment's first stop (the broker's walk never reaches it)."""
        stops = np.array([INF if p.first_stop is None else p.first_stop for p in self.parts], np.int64)
        return self.file_positions(rows) > stops[self.part_of(rows)]

    def per_part(self, rows: np.ndarray, values: np.ndarray, how: str) -> tuple[np.ndarray, np.ndarray]:
        """``values`` of the item ``rows`` reduced per part (``how``: "sum", "min" or "max"), as arrays over the
        parts rather than a loop over them (a context of a thousand small segments): (the value, whether the part
        has any of ``rows``); a part with none has 0 and False."""
        n = len(self.parts)
        at = self.part_of(np.asarray(rows, np.int64))
        has = np.zeros(n, bool)
        has[at] = True
        values = np.asarray(values).astype(np.int64, copy=False)
        if how == "sum":
            out = np.zeros(n, np.int64)
            np.add.at(out, at, values)
        elif how == "min":
            out = np.full(n, INF, np.int64)
            np.minimum.at(out, at, values)
        else:
            out = np.full(n, NEG_INF, np.int64)
            np.maximum.at(out, at, values)
        return np.where(has, out, 0), has

    def range_rows(self) -> pa.Table:
        """The ``scan.ranges`` rows: one per range, what its walk saw."""
        it, bounds, n = self.items, self.part_bounds(), len(self.parts)
        mrows = self.message_rows
        ts = self.column("store_timestamp") if len(mrows) else np.zeros(0, np.int64)
        mb = np.searchsorted(mrows, bounds)  # the messages of part k: mb[k] .. mb[k + 1] - 1
        blanks = np.flatnonzero(it.kinds == KIND_BLANK)
        blank_at, has_blank = self.per_part(blanks, it.positions[blanks], "min")
        items = np.flatnonzero((it.kinds == KIND_MESSAGE) | (it.kinds == KIND_CORRUPT))
        item_end, has_item = self.per_part(items, it.positions[items] + it.sizes[items], "max")
        ends = [int(e) + self.base if h else None for e, h in zip(item_end.tolist(), has_item.tolist())]
        for q, size, _ in self._file_problems:  # a segment file of the wrong length or name, in the parts owning it
            for k, p in enumerate(self.parts):
                if p.lo <= q < p.hi:
                    ends[k] = q + size if ends[k] is None else max(ends[k], q + size)
        if ts.dtype.kind in "iu":
            latest, has_ts = self.per_part(mrows, ts, "max")
            latest = [int(v) if h else None for v, h in zip(latest.tolist(), has_ts.tolist())]
        else:  # a message without a store time (it did not decode): fails as int() of the NaN maximum fails
            latest = [int(ts[mb[k]:mb[k + 1]].max()) if mb[k + 1] > mb[k] else None for k in range(n)]
        return pa.table({
            "broker": pa.array([self.broker] * n, pa.string()), "segment": [p.segment for p in self.parts],
            "range_start": [p.start for p in self.parts], "messages": np.diff(mb).astype(np.int64),
            "blank_at": pa.array(blank_at - self._shifts, pa.int64(), mask=~has_blank),
            "max_store_timestamp": pa.array(latest, pa.int64()), "data_end": pa.array(ends, pa.int64())},
            schema=RANGES)

    # ---- messages ---------------------------------------------------------------------------------------
    @cached_property
    def messages(self) -> pa.Table:
        """Every message of the range: where it is, whether recovery keeps it, and the :data:`DECODED` columns
        (and ``properties_raw`` where the broker's records may carry multi-dispatch lists)."""
        from decoding import kernels as K

        pos = self.positions[self.message_rows]
        sizes = self.items.sizes[self.message_rows]
        phys = pos + self.base
        n = len(pos)
        starts = pos - self.w0
        columns = DECODED + (("properties_raw",) if self.facts.dispatch.multi else ())
        parts = [K.decode_buffer(self.buf, starts[a:a + _DECODE_ROWS], sizes[a:a + _DECODE_ROWS], columns=columns,
                                 delay_levels=self.facts.delay_levels) for a in range(0, max(n, 1), _DECODE_ROWS)]
        decoded = _one_array_each(parts) if n else dict(zip(columns, K.message_schema(columns).empty_table().columns))
        base = {
            "segment": self.files(self.message_rows),
            "file_position": pa.array(self.file_positions(self.message_rows), pa.int64()),
            "physical_offset": pa.array(phys, pa.int64()), "store_size": pa.array(sizes.astype(np.int32)),
            "beyond_first_stop": pa.array(self.beyond_first_stop(self.message_rows)),
            "kept": pa.array(phys < self.facts.recovered_end),
        }
        t = pa.table(base)
        for name in columns:
            t = t.append_column(name, decoded.pop(name))
        return t

    def column(self, name: str) -> np.ndarray:
        """A message column as numpy (integers, booleans)."""
        return self.messages.column(name).to_numpy(zero_copy_only=False)

    def decode(self, rows: np.ndarray, columns: tuple[str, ...]) -> pa.Table:
        """More decoded columns (properties, body, msg_id...) for a few messages (indices into :attr:`messages`)."""
        from decoding import kernels as K

        pos = self.positions[self.message_rows][rows]
        sizes = self.items.sizes[self.message_rows][rows]
        if not len(rows):
            return K.message_schema(columns).empty_table()
        return pa.Table.from_batches([K.decode_buffer(self.buf, pos - self.w0, sizes, columns=columns,
                                                      delay_levels=self.facts.delay_levels)])

    def message_at(self, phys: np.ndarray) -> np.ndarray:
        """The message row starting at each physical offset, -1 where none starts."""
        mphys = self.positions[self.message_rows] + self.base
        i = np.searchsorted(mphys, phys)
        hit = (i < len(mphys)) & (mphys[np.minimum(i, len(mphys) - 1)] == phys) if len(mphys) else np.zeros(len(phys), bool)
        return np.where(hit, i, -1)

    # ---- what this range owns ---------------------------------------------------------------------------
    def owns(self, phys: np.ndarray) -> np.ndarray:
        return (phys >= self.lo) & (phys < self.hi)

    def routed(self, route: str) -> pa.Table:
        """The entries of the route's files (jobs/audit/routes.py: units recovery would accept, index entries 1 ..
        count-1 of every readable file...) whose physical offset this range owns, as the route shows them."""
        cache = self.__dict__.setdefault("_routed", {})
        if route not in cache:
            cache[route] = self._read_routed(route)
        return cache[route]

    def _read_routed(self, name: str) -> pa.Table:
        if self.lo >= self.hi:
            return VIEW[name].empty_table()
        return routed_entries(self._windows or RoutedWindows(self.facts, self.lo, self.hi), name, self.lo, self.hi)

    # ---- what a loose physical offset points at ---------------------------------------------------------
    @cached_property
    def _located_items(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, list]:
        """Messages, unframeable spans and file-level damage of this range: (start, end, is_damage, reason),
        sorted by start (physical offsets)."""
        it = self.items
        rows = np.flatnonzero((it.kinds == KIND_MESSAGE) | (it.kinds == KIND_CORRUPT))
        start = it.positions[rows] + self.base
        end = start + it.sizes[rows]
        damage = it.kinds[rows] == KIND_CORRUPT
        reasons = [None] * len(rows)
        for k in np.flatnonzero(damage).tolist():
            reasons[k] = it.others[int(rows[k])].reason
        extra = self._file_problems
        if extra:
            start = np.concatenate([start, np.array([p for p, _, _ in extra], np.int64)])
            end = np.concatenate([end, np.array([p + n for p, n, _ in extra], np.int64)])
            damage = np.concatenate([damage, np.ones(len(extra), bool)])
            reasons = reasons + [r for _, _, r in extra]
        order = np.argsort(start, kind="stable")
        return start[order], end[order], damage[order], [reasons[i] for i in order.tolist()]

    def locate(self, phys: np.ndarray) -> tuple[np.ndarray, np.ndarray, list]:
        """For offsets at which no message starts: (code, start of the item before it, that item's reason).
        IN_DAMAGE: inside an unframeable span; MID_RECORD: inside a message; OUTSIDE: neither (the driver, which
        knows where a broker's data ends, tells past-the-end from no-record).  The item before an offset is the
        last message or span starting at or before it in the same segment-size block."""
        start, end, damage, reasons = self._located_items
        phys = np.asarray(phys, np.int64)
        i = np.searchsorted(start, phys, side="right") - 1
        has = i >= 0
        j = np.maximum(i, 0)
        size = self.facts.segment_size
        same_block = has & (_block(start[j], size) == _block(phys, size)) if len(start) else np.zeros(len(phys), bool)
        inside = same_block & (phys < end[j]) if len(start) else same_block
        code = np.where(inside & damage[j] if len(start) else inside, IN_DAMAGE,
                        np.where(inside, MID_RECORD, OUTSIDE)).astype(np.int8)
        prev = np.where(inside, start[j] if len(start) else 0, -1)
        return code, prev, [reasons[k] if inside[n] else None for n, k in enumerate(j.tolist())]

    @property
    def _file_problems(self) -> list[tuple[int, int, str]]:
        return [(p, n, r) for p, n, r in self.facts.file_problems if self.lo <= p < self.hi]


def _block(phys: np.ndarray, size: int) -> np.ndarray:
    """``phys - phys % size`` with Java's remainder (the sign of the dividend)."""
    return phys - np.fmod(phys, size)


#: the partial table the scan's own tasks emit: what each range saw (the dump time, the data's end, first blanks)
RANGES = pa.schema([("broker", pa.string()), ("segment", pa.string()), ("range_start", pa.int64()),
                    ("messages", pa.int64()), ("blank_at", pa.int64()), ("max_store_timestamp", pa.int64()),
                    ("data_end", pa.int64())])
EMITS = {"scan.ranges": RANGES}


@dataclass
class FileScan:
    """A group of one route's files (whole queues), for what each file says alone: the families' ``in_files``
    hooks for the route."""

    route: str
    facts: BrokerFacts
    files: list
    HOLDS_THE_GIL = True  # a file at a time in Python: one such task at a time in the driver (tasks.holds_the_gil)

    @property
    def broker(self) -> str:
        return self.facts.broker

    def describe(self) -> str:
        return f"{self.facts.broker}: {len(self.files)} {self.route} file(s)"

    def cost(self) -> int:
        return sum(ROUTES[self.route].scan_cost(f) for f in self.files)

    def run(self, out: Emitter) -> None:
        for files, read in self._held_apart():
            with read_once(read):  # the families' hooks read the same files: read once, together, for them all
                for family in self.facts.families:
                    hook = family.in_files.get(self.route)
                    if hook is not None:
                        hook(self.facts, files, out)

    def _held_apart(self) -> list[tuple[list, list]]:
        """The task's files in turn as the hooks take them, each group with the files its hooks read: queue files in
        groups of whole queues whose units are read at once and held for every hook (store_format.queues.MANY_BYTES;
        a task's 64 MiB held decoded would be twice that, and read a file at a time each hook read each file again),
        but those the survey told them of (routes.told_by_survey); any other route's files together."""
        if not all(isinstance(f, QueueFile) for f in self.files):
            return [(self.files, self.files)]
        told = told_by_survey(self.facts.routed.get(self.route, ()), self.files)
        return [(files, [f for f in files if f.loc.path not in told])
                for files in group_queue_files(self.files, max_bytes=MANY_BYTES, cost=lambda f: f.stored_bytes)]


@dataclass
class NoCommitlog:
    """A broker without commitlog segments: one task still owns every offset, so its routed entries are checked
    (they point at nothing)."""

    facts: BrokerFacts

    @property
    def broker(self) -> str:
        return self.facts.broker

    def describe(self) -> str:
        return f"{self.facts.broker}: no commitlog"

    def cost(self) -> int:
        return 1

    def run(self, out: Emitter) -> None:
        rc = RangeContext(self.facts, (RangePart("", 0, 0, None, 0, NEG_INF, INF, 0),), FrameArrays.empty("", 0), b"",
                          0, NEG_INF, INF)
        for family in self.facts.families:
            if family.in_range is not None:
                family.in_range(rc, out)


# ---------------------------------------------------------------------------------------------------------
# The stage's tasks


def surveyed_files(ctx) -> dict[str, dict[str, dict]]:
    """{route name: {file path: its survey row}} of every broker: built once for the stage (per broker, the rows of
    a fleet's every broker would be read as often as it has brokers)."""
    return {route.name: {r["path"]: r for r in ctx.survey.get(route.files_partial, route.survey_schema).to_pylist()}
            for route in ROUTES.values()}


def broker_facts(ctx, name: str, surveyed: dict[str, dict[str, dict]] | None = None) -> BrokerFacts | None:
    """What the scan tasks of one broker share: its predicted recovery, its routed files (from the survey's rows,
    ``surveyed``: :func:`surveyed_files`) and the families' probes; None when its recovery could not be predicted (a
    finding says so)."""
    from store_format.recovery import truncates_queues

    plan, p = ctx.plans[name], ctx.recovery.get(name)
    if p is None:
        return None
    surveyed = surveyed_files(ctx) if surveyed is None else surveyed
    routed = {}
    for route in ROUTES.values():
        rows = surveyed[route.name]
        found = (route.routed(rows.get(f.loc.path), f) for f in route.files(plan))
        routed[route.name] = [r for r in found if r is not None]
    facts = BrokerFacts(
        broker=name, families=tuple(ctx.families), check_crc=ctx.options.check_crc,
        segment_size=plan.store.segment_size or 1, recovered_end=p.max_physical_offset,
        recovery_stop=p.walks.get(p.stop_segment) if p.stop_segment else None,
        reput_from=p.max_cq_physical_offset, has_commitlog=bool(plan.store.segments),
        truncate_queues=truncates_queues(ctx.queue_starts[name].values(), p.max_physical_offset,
                                         bool(plan.store.segments), p.other_queues_end)[0],
        index_pending_from=p.redispatch_from if p.redispatch_from is not None else p.max_cq_physical_offset,
        indexed=plan.has_index_dir, shift=plan.shift, commitlog_end=plan.commitlog_end, routed=routed,
        file_problems=[(f.base_offset or 0, f.length, kind) for f in plan.segment_files for kind, _ in f.problems],
        delay_levels=dict(plan.store.delay_levels), dispatch=plan.dispatch)
    for family in ctx.families:
        if family.probes is not None:
            facts.probes[family.name] = family.probes(ctx, name)
    return facts


def scan_tasks(ctx, segments: list, cells: bool = False) -> list:
    """The scan's tasks: every range of every segment (:class:`jobs.audit.plan.SegmentPlan`) with what it owns,
    and each broker's files of every route in the route's groups.  ``cells``: small ranges run together only within
    a cell of :data:`RUN_CELL` physical offsets (an audit with a state: :func:`in_runs`)."""
    from .survey import segment_ends as surveyed_ends

    ends = surveyed_ends(ctx.survey)
    surveyed = surveyed_files(ctx)
    tasks = []
    for name, plan in ctx.plans.items():
        facts = broker_facts(ctx, name, surveyed)
        if facts is None:
            continue
        mine = [sp for sp in segments if sp.broker == name]
        ranges = []
        for i, sp in enumerate(mine):
            nxt = mine[i + 1].segment.base_offset if i + 1 < len(mine) else None
            resolved = (name, sp.segment.name) in ends
            first_stop, first_blank = ends.get((name, sp.segment.name), (None, None))
            for k, r in enumerate(sp.ranges):
                ranges.append(CommitlogRange(
                    facts, r.loc, r.name, r.base, r.length, r.start, r.end, r.last,
                    first_stop=first_stop, first_blank=first_blank,
                    crc_checked_before=(first_stop or 0) if resolved and ctx.options.check_crc else 0,
                    resolved=resolved, first_of_broker=(i == 0 and k == 0), next_base=nxt if r.last else None))
        tasks += in_runs(ranges, cells)
        if not mine:
            tasks.append(NoCommitlog(facts))
        for route in ROUTES.values():
            if any(route.name in f.in_files for f in ctx.families):
                tasks += [FileScan(route.name, facts, group) for group in route.group(route.files(plan))]
    return tasks
