"""What an audit will read, decided on the driver from the store layer's listing alone: per broker its segment files,
consume-queue files and index files (store_format.store.Store: listed once, with their problems), and how the
commitlog is cut into tasks (store_format.plan: the split policy for a task that holds its range, and the cut).

The broker's recovery walk covers its newest segments (three in normal recovery, more after a crash), and a split
segment's ranges need the segment's walk ends; both come from the survey (a first, lighter pass over the framing),
so those segments are surveyed.

Physical offsets route consume-queue units and index entries to the task whose commitlog range holds them:
every file's entries are summarized by the survey as buckets (``phys >> shift``) with the unit-index interval
holding each bucket's entries, so a task reads only the units it owns (:class:`Buckets`).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from functools import cached_property

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from store_format.brokerconf import StoreGeometry
from store_format.commitlog import Segment
from store_format.queues import Dispatch, QueueFile, preferred
from store_format.fs import Location
from store_format.plan import MAX_RANGE_HELD, SegmentRange, plan_ranges
from store_format.recovery import recovery_region
from store_format.store import Store

from .inputs import StoreRef

HULL_CHUNK = 1 << 20  # offsets converted at a time by Buckets.of_offsets (8 MiB of int64)
MAX_BUCKETS = 4096  # routing buckets per broker: the bucket width follows the commitlog's length
MIN_BUCKET_SHIFT = 20  # ... and is at least 1 MiB
NEGATIVE_BUCKET = -1  # index entries may hold garbage offsets: below 0, and past the commitlog's end
BEYOND = np.iinfo(np.int64).max
#: The most files the audit lists of one queue part folder of a broker (``consumequeue/``...: --max-files) and of its
#: ``commitlog/`` (--max-segments; store_format.rolled.FileLimit).  A listed consume-queue file costs the driver 3-5
#: KB through the whole audit (100,000 tiny files: 609 MiB peak RssAnon against 141 MiB for a fixture), a segment
#: about 26 KB (its ranges, walk and table rows: 21,686 segments of 8 KiB, 924 MiB against 492 MiB for 5,000 of
#: them; BENCHMARKS.md "Bad input at scale: many files"), so the defaults are ~2.5 GB each: within a 24 GB machine
#: with room for the tasks.  A real broker is far below both (40,000 queues of a few files, 1 GiB segments).
MAX_FILES = 500_000
MAX_SEGMENTS = 100_000


@dataclass
class BrokerPlan:
    name: str
    root: Location
    store: Store = field(repr=False)
    geometry: StoreGeometry
    shift: int  # routing bucket of a physical offset: phys >> shift
    commitlog_end: int  # one past the last byte any segment file could hold

    @property
    def segment_files(self) -> list[Segment]:
        """Every file of commitlog/ (bad names too), with its problems."""
        return self.store.segment_files

    @property
    def segments(self) -> list[Segment]:
        """The segments with a base offset, by base offset."""
        return self.store.segments

    @cached_property
    def queue_files(self) -> list[QueueFile]:
        """Every file of every queue folder, whatever its backend (each with its backend and problems), in listing
        order; a queue two backends of one folder hold, the one the broker reads (store_format.queues.preferred)."""
        return preferred(self.store.queue_listing)

    @cached_property
    def dispatch(self) -> Dispatch:
        """Where its dispatch puts each message's units (store_format.queues.Dispatch)."""
        return Dispatch.of(self.store)

    @property
    def index_files(self) -> list["IndexFilePlan"]:
        """Every file of index/ with the geometry given (--config, the flags; None: each file's own)."""
        g = self.geometry
        return [IndexFilePlan(f, g.hash_slot_num, g.index_num) for f in self.store.index_files]

    @property
    def timer_log_files(self) -> list:
        """The timer-log files the broker loads (5.x; store_format.rolled.RolledFile), by base offset."""
        return self.store.timer_log

    @property
    def has_index_dir(self) -> bool:
        return self.store.loc.child("index").is_dir()

    def bucket(self, phys: np.ndarray) -> np.ndarray:
        return bucket_of(phys, self.shift, self.commitlog_end)

    @property
    def unlisted_below(self) -> int | None:
        """Where the segments read start when --max-segments left the oldest out (store_format.rolled.FileLimit): the
        units and index entries below it point into segments not read, so no check judges them (the
        broker.files_skipped finding says so); None when no segment was left out."""
        return min((s.below for s in self.store.skipped if s.below is not None), default=None)


def listed_only(plans: dict[str, BrokerPlan], t: pa.Table) -> pa.Table:
    """The rows of ``t`` (with ``broker`` and ``physical_offset``) that do not point into segments --max-segments left
    unread (:attr:`BrokerPlan.unlisted_below`)."""
    below = {name: p.unlisted_below for name, p in plans.items() if p.unlisted_below is not None}
    if not below or not t.num_rows:
        return t
    cut = pc.fill_null(pc.index_in(t.column("broker"), pa.array(list(below))), -1).to_numpy(zero_copy_only=False)
    limits = np.array([*below.values(), -1], np.int64)[cut]  # -1: a broker with every segment read
    return t.filter(pa.array(t.column("physical_offset").to_numpy(zero_copy_only=False) >= limits))


@dataclass(frozen=True)
class IndexFilePlan:
    """An index file as the audit reads it: where it is and the geometry given (None: the file's own)."""

    loc: Location
    hash_slot_num: int | None
    index_num: int | None

    @property
    def name(self) -> str:
        return self.loc.name


def bucket_of(phys: np.ndarray, shift: int, commitlog_end: int) -> np.ndarray:
    """Routing buckets: phys >> shift inside the commitlog, NEGATIVE_BUCKET below it, one bucket past its end."""
    phys = np.asarray(phys, np.int64)
    last = commitlog_end >> shift
    b = np.right_shift(np.clip(phys, 0, None), shift)
    return np.where(phys < 0, NEGATIVE_BUCKET, np.minimum(b, last + 1))


def plan_broker(store_input: StoreRef, geometry: StoreGeometry | None = None,
                max_files: int | None = MAX_FILES, max_segments: int | None = MAX_SEGMENTS) -> BrokerPlan:
    """What one broker's audit reads; ``geometry`` (--config and the flags) where the files cannot tell; at most
    ``max_files`` files of each queue part folder and ``max_segments`` of commitlog/ (None: every file)."""
    geometry = geometry or StoreGeometry()
    store = Store(store_input.path, **geometry.store_kwargs(), max_files=max_files, max_segments=max_segments)
    size = store.segment_size
    end = max((s.base_offset + max(s.length, size or 0) for s in store.segments), default=0)
    shift = max(MIN_BUCKET_SHIFT, math.ceil(math.log2(max(end, 1) / MAX_BUCKETS))) if end else MIN_BUCKET_SHIFT
    return BrokerPlan(store_input.name, store.loc, store, geometry, shift, end)


@dataclass
class SegmentPlan:
    """How one segment is read: its ranges, and whether the survey walks it first (a segment the broker's recovery
    walks, or one cut into several ranges: their walk needs the segment's ends)."""

    broker: str
    segment: Segment
    ranges: list[SegmentRange]
    surveyed: bool
    in_recovery_region: bool = False  # the broker's recovery walks it (its forced CRC check, if any, too)


def plan_segments(plans: dict[str, BrokerPlan], cores: int, split_size: int | None,
                  message_index_safe: bool, *, grid: bool = False) -> list[SegmentPlan]:
    """Every named segment of every broker cut into ranges by the split policy (for a task that holds its range);
    ``grid``: at fixed multiples of the range size (store_format.plan.cut_ranges: an audit with a state)."""
    named = [(name, s) for name, plan in plans.items() for s in plan.segments]
    by_segment: dict[tuple[str, str], list[SegmentRange]] = {}
    for r in plan_ranges(named, split_size, cores, largest=MAX_RANGE_HELD, grid=grid):
        by_segment.setdefault((r.broker, r.name), []).append(r)
    region = {name: {s.name for s in recovery_region(plan.store, message_index_safe)} for name, plan in plans.items()}
    return [SegmentPlan(name, s, by_segment[name, s.name],
                        len(by_segment[name, s.name]) > 1 or s.name in region[name], s.name in region[name])
            for name, s in named]


@dataclass(frozen=True)
class Buckets:
    """A file's entries by routing bucket: ``buckets`` (sorted) with the first and last entry index (inclusive) of
    the entries in each; entry ``i`` of the file is unit/entry number ``i`` of its entries region."""

    buckets: np.ndarray  # int64
    first: np.ndarray  # int64
    last: np.ndarray  # int64

    @classmethod
    def of(cls, bucket: np.ndarray, rows: np.ndarray | None = None) -> "Buckets":
        """From each entry's bucket (``rows``: their entry numbers, default 0..n-1)."""
        rows = np.arange(len(bucket), dtype=np.int64) if rows is None else np.asarray(rows, np.int64)
        if not len(bucket):
            return cls(np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(0, np.int64))
        order = np.argsort(bucket, kind="stable")
        b, r = bucket[order], rows[order]
        starts = np.flatnonzero(np.r_[True, b[1:] != b[:-1]])
        first = np.minimum.reduceat(r, starts)
        last = np.maximum.reduceat(r, starts)
        return cls(b[starts].astype(np.int64), first.astype(np.int64), last.astype(np.int64))

    @classmethod
    def of_offsets(cls, phys: np.ndarray, rows: np.ndarray | int, shift: int, commitlog_end: int) -> "Buckets":
        """``of(bucket_of(phys, shift, commitlog_end), rows)`` in one compiled pass, without a sort (an index file
        holds up to 20 M entries); ``rows`` an int: entry ``i``'s row is ``rows + i``, and ``phys`` may be a view
        of the file in any integer type (an index file's big-endian entries), read :data:`HULL_CHUNK` at a time so
        that no copy of a whole file's offsets is made."""
        from decoding.kernels import bucket_hulls

        last = commitlog_end >> shift
        first = np.full(last + 3, np.iinfo(np.int64).max, np.int64)  # buckets -1 .. last + 1, at b + 1
        final = np.full(last + 3, -1, np.int64)
        if isinstance(rows, int):
            none = np.zeros(0, np.int64)
            for a in range(0, len(phys), HULL_CHUNK):
                bucket_hulls(phys[a:a + HULL_CHUNK], none, rows + a, shift, last, first, final)
        else:
            bucket_hulls(phys, rows, 0, shift, last, first, final)
        seen = np.flatnonzero(final >= 0)
        return cls((seen - 1).astype(np.int64), first[seen], final[seen])

    def rows_for(self, lo_bucket: int, hi_bucket: int) -> tuple[int, int] | None:
        """The hull [first, last + 1) of the entries whose bucket is in [lo_bucket, hi_bucket]; None if none."""
        a = int(np.searchsorted(self.buckets, lo_bucket, side="left"))
        b = int(np.searchsorted(self.buckets, hi_bucket, side="right"))
        if a >= b:
            return None
        return int(self.first[a:b].min()), int(self.last[a:b].max()) + 1


@dataclass(frozen=True)
class ManyBuckets:
    """Many files' :class:`Buckets` as one, each file's in turn (``file``: the file of each bucket): what a commitlog
    range asks of every routed file of a broker at once (40,000 queue files, a Python call each per range, were
    most of a range's reading of their windows)."""

    file: np.ndarray  # int64, ascending
    buckets: np.ndarray
    first: np.ndarray
    last: np.ndarray

    @classmethod
    def of(cls, each: list[Buckets]) -> "ManyBuckets":
        counts = np.fromiter((len(b.buckets) for b in each), np.int64, len(each))
        join = (lambda name: np.concatenate([getattr(b, name) for b in each]).astype(np.int64)) if each \
            else (lambda name: np.zeros(0, np.int64))
        return cls(np.repeat(np.arange(len(each), dtype=np.int64), counts), join("buckets"), join("first"),
                   join("last"))

    def rows_for(self, lo_bucket: int, hi_bucket: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """:meth:`Buckets.rows_for` of every file at once: (the files with entries in [lo_bucket, hi_bucket], in
        order; each one's first row; one past its last)."""
        hit = np.flatnonzero((self.buckets >= lo_bucket) & (self.buckets <= hi_bucket))
        if not len(hit):
            return np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(0, np.int64)
        f = self.file[hit]
        cut = np.flatnonzero(np.r_[True, f[1:] != f[:-1]])
        return f[cut], np.minimum.reduceat(self.first[hit], cut), np.maximum.reduceat(self.last[hit], cut) + 1

