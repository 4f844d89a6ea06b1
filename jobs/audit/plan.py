"""What an audit will read, decided on the driver from the file listing alone: per broker its segment files, consume-
queue files and index files, and how the commitlog is cut into tasks.

The cut: segments are split into ranges of about a third of a core's share, at most MAX_SPLIT, so every core is
busy and a task's memory does not grow with the segment size (:func:`scan_split_size`).  The broker's recovery
walk covers its newest segments (three in normal recovery, more after a crash), and a split segment's ranges
need the segment's walk ends; both come from the survey (a first, lighter pass over the framing).

Physical offsets route consume-queue units and index entries to the task whose commitlog range holds them:
every file's entries are summarized by the survey as buckets (``phys >> shift``) with the unit-index interval
holding each bucket's entries, so a task reads only the units it owns (:class:`Buckets`).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from datasources.commitlog import SegmentFile, list_segment_files
from datasources.consumequeue import CQFilePartition, plan_files as plan_cq_files
from datasources.indexfile import IndexFilePartition, plan_files as plan_index_files
from datasources.storepaths import find_inputs
from store_format.brokerconf import StoreGeometry
from store_format.store import Store

from .inputs import StoreInput

MIN_SPLIT = 32 << 20  # a range smaller than this costs more in task overhead than it gains in parallelism
# a task holds its range's decoded columns (about twice the range): ranges of at most this size keep a task's
# memory the same from a small dump to a 1 GiB-segment broker of hundreds of GB (the survey's first pass over
# every cut segment costs ~0.6 s of CPU per GiB)
MAX_SPLIT = 64 << 20
TASKS_PER_CORE = 3  # ranges of uneven cost (damage, the newest segment's data end) still keep cores busy
MAX_BUCKETS = 4096  # routing buckets per broker: the bucket width follows the commitlog's length
NEGATIVE_BUCKET = -1  # index entries may hold garbage offsets: below 0, and past the commitlog's end
BEYOND = np.iinfo(np.int64).max


@dataclass
class BrokerPlan:
    name: str
    root: str
    store: Store = field(repr=False)
    segments: list[SegmentFile]
    segment_size: int | None
    cq_files: list[CQFilePartition]
    index_files: list[IndexFilePartition]
    has_index_dir: bool
    shift: int  # routing bucket of a physical offset: phys >> shift
    commitlog_end: int  # one past the last byte any segment file could hold

    def bucket(self, phys: np.ndarray) -> np.ndarray:
        return bucket_of(phys, self.shift, self.commitlog_end)

    @property
    def named_segments(self) -> list[SegmentFile]:
        return sorted((s for s in self.segments if s.base is not None), key=lambda s: s.base)


def bucket_of(phys: np.ndarray, shift: int, commitlog_end: int) -> np.ndarray:
    """Routing buckets: phys >> shift inside the commitlog, NEGATIVE_BUCKET below it, one bucket past its end."""
    phys = np.asarray(phys, np.int64)
    last = commitlog_end >> shift
    b = np.right_shift(np.clip(phys, 0, None), shift)
    return np.where(phys < 0, NEGATIVE_BUCKET, np.minimum(b, last + 1))


def plan_broker(store_input: StoreInput, geometry: StoreGeometry | None = None) -> BrokerPlan:
    """What one broker's audit reads; ``geometry`` (--config and the flags) where the files cannot tell."""
    name, root = store_input.name, store_input.path
    geometry = geometry or StoreGeometry()
    store = Store(root, **geometry.store_kwargs())
    inputs = find_inputs(root, "commitlog", name) if (store.root / "commitlog").exists() else []
    size = store.segment_size
    segments = list_segment_files(inputs, size) if inputs else []
    cq = plan_cq_files(find_inputs(root, "consumequeue", name)) if (store.root / "consumequeue").is_dir() else []
    has_index = (store.root / "index").is_dir()
    index = (plan_index_files(find_inputs(root, "index", name), geometry.hash_slot_num, geometry.index_num)
             if has_index else [])
    end = max((s.base + max(s.length, size or 0) for s in segments if s.base is not None), default=0)
    shift = max(20, math.ceil(math.log2(max(end, 1) / MAX_BUCKETS))) if end else 20
    return BrokerPlan(name, root, store, segments, size, cq, index, has_index, shift, end)


def data_bytes(plan: BrokerPlan) -> int:
    """The commitlog bytes a broker holds: every segment's length, the newest one's up to its written end."""
    from datasources.commitlog import written_end

    segs = plan.named_segments
    if not segs:
        return 0
    newest = segs[-1]
    tail = written_end(newest.loc, newest.length)  # elsewhere than local: a binary search of ranged reads
    return sum(s.length for s in segs[:-1]) + tail


def scan_split_size(plans: list[BrokerPlan], cores: int, requested: int | None) -> int | None:
    """The range size segments are cut into: ``requested`` (--split-size), else what gives about TASKS_PER_CORE
    ranges per core, within MIN_SPLIT..MAX_SPLIT."""
    if requested:
        return requested
    total = sum(data_bytes(p) for p in plans)
    if not total:
        return None
    size = -(-total // (TASKS_PER_CORE * cores))
    return int(min(MAX_SPLIT, max(MIN_SPLIT, -(-size // (1 << 20)) << 20)))


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
        holds up to 20 M entries); ``rows`` an int: entry ``i``'s row is ``rows + i``."""
        from udfs.kernels import _compiled

        last = commitlog_end >> shift
        first = np.full(last + 3, np.iinfo(np.int64).max, np.int64)  # buckets -1 .. last + 1, at b + 1
        final = np.full(last + 3, -1, np.int64)
        row_base, rows = (rows, np.zeros(0, np.int64)) if isinstance(rows, int) else (0, rows)
        _compiled().bucket_hulls(np.ascontiguousarray(phys, np.int64), np.ascontiguousarray(rows, np.int64),
                                 row_base, shift, last, first, final)
        seen = np.flatnonzero(final >= 0)
        return cls((seen - 1).astype(np.int64), first[seen], final[seen])

    def rows_for(self, lo_bucket: int, hi_bucket: int) -> tuple[int, int] | None:
        """The hull [first, last + 1) of the entries whose bucket is in [lo_bucket, hi_bucket]; None if none."""
        a = int(np.searchsorted(self.buckets, lo_bucket, side="left"))
        b = int(np.searchsorted(self.buckets, hi_bucket, side="right"))
        if a >= b:
            return None
        return int(self.first[a:b].min()), int(self.last[a:b].max()) + 1
