"""The scan: the audit's one pass over a dump, as Spark tasks that each decide every check they can locally.

A :class:`CommitlogRange` task walks one range of a segment (salvage walk, bodies' CRCs checked once), decodes
the columns the checks use with udfs.kernels, and owns a span of physical offsets: the consume-queue units and
index entries pointing into it are read (only those: routed by the survey's buckets) and reconciled with its
messages right there, in numpy, with no join across tasks.  Spans tile the number line: a range owns from the
position its walk starts at (the broker's first range: from minus infinity) to where the next range's walk
starts (a segment's last range: to the next segment, the last one: to plus infinity), so every unit and entry is
checked by exactly one task, and the record a unit points into (or just after) is always that task's.

:class:`QueueScan` reads consume-queue files for what concerns a file alone (corrupt units, names, what recovery
truncates); :class:`IndexScan` walks one index file's hash chains and holds its header against its entries.
Each family of jobs/audit/checks/ contributes a hook per task kind (``in_range``, ``in_queue_files``,
``in_index_file``) and finishes on the driver (``on_driver``) from the partial tables its hooks emitted.
"""
from __future__ import annotations

import importlib
import os
from dataclasses import dataclass, field
from functools import cached_property

import numpy as np
import pyarrow as pa

from datasources.commitlog import cut_to_walk, read_range_walk, segment_ends
from datasources.storepaths import Location
from store_format import layout as L
from store_format.commitlog import KIND_BLANK, KIND_CORRUPT, KIND_MESSAGE, ReadOnlyMap

from .plan import Buckets
from .tasks import Emitter

INF = np.iinfo(np.int64).max
NEG_INF = np.iinfo(np.int64).min
# columns every message row carries, decoded once per range (the rest on demand, for the few rows that need them)
DECODED = ("topic", "queue_id", "queue_offset", "tags_code", "tran_type", "store_timestamp", "uniq_key", "keys",
           "tags", "prepared_transaction_offset", "real_topic", "real_queue_id", "retry_topic", "origin_message_id",
           "reconsume_times", "sys_flag", "invalid_utf8")
_DECODE_ROWS = 1 << 18

# locate(): what a physical offset that starts no message points at
IN_DAMAGE, MID_RECORD, OUTSIDE = 0, 1, 2


def family_module(family: str):
    return importlib.import_module(f"jobs.audit.checks.{family}")


@dataclass(frozen=True)
class RoutedQueueFile:
    """A consume-queue file as a scan task reads it: entry ``i`` is unit ``i`` of the file."""

    loc: Location
    topic: str
    queue_id: int
    name: str
    first_queue_offset: int
    buckets: Buckets


@dataclass(frozen=True)
class RoutedIndexFile:
    loc: Location
    name: str
    hash_slot_num: int
    index_num: int
    count: int  # entries 1 .. count-1 are written
    begin_timestamp: int
    buckets: Buckets


@dataclass
class BrokerFacts:
    """What every scan task of one broker shares (decided on the driver between survey and scan)."""

    broker: str
    families: tuple[str, ...]
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
    queue_files: list[RoutedQueueFile] = field(default_factory=list)
    index_files: list[RoutedIndexFile] = field(default_factory=list)
    # file-level damage that counts as corrupt bytes where it lies: (physical offset, length, reason)
    file_problems: list[tuple[int, int, str]] = field(default_factory=list)
    # index files it could not read: (file, from, to) the physical offsets whose keys only they could serve
    unverifiable: list[tuple[str, int, int]] = field(default_factory=list)
    delay_levels: dict = field(default_factory=lambda: dict(L.DEFAULT_DELAY_LEVELS))
    probes: dict = field(default_factory=dict)  # family -> what it asks every range task to look up


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

    @property
    def broker(self) -> str:
        return self.facts.broker

    def describe(self) -> str:
        return f"{self.facts.broker}/{self.name}@{self.start}"

    def cost(self) -> int:
        return self.end - self.start

    def run(self, out: Emitter) -> None:
        walk, handle, w0 = read_range_walk(self.loc, self.name, self.base, self.length, self.start, self.end,
                                           self.last, check_crc=self.facts.check_crc,
                                           crc_checked_before=self.crc_checked_before)
        try:
            items = walk.items
            first_stop, first_blank = (self.first_stop, self.first_blank) if self.resolved else segment_ends([items])
            items = cut_to_walk(items, "salvage", first_stop, first_blank)
            if walk.first is None:
                lo = hi = self.base + self.start  # no walk of its own: the previous range's covers its bytes
            else:
                lo = NEG_INF if self.first_of_broker else self.base + walk.first
                hi = self.base + walk.until if walk.until is not None else (
                    INF if self.next_base is None else max(self.next_base, self.base + self.length))
            buf = handle.buf if isinstance(handle, ReadOnlyMap) else handle
            rc = RangeContext(self.facts, self.name, self.base, items, first_stop, buf, w0, lo, hi,
                              self.start == 0)
            blanks = items.positions[items.kinds == KIND_BLANK]
            ts = rc.column("store_timestamp") if len(rc.message_rows) else np.zeros(0, np.int64)
            out.partial("scan.ranges", pa.table({
                "broker": [self.facts.broker], "segment": [self.name], "range_start": [self.start],
                "messages": [len(rc.message_rows)], "blank_at": [int(blanks.min()) if len(blanks) else None],
                "max_store_timestamp": [int(ts.max()) if len(ts) else None], "data_end": [rc.data_end]},
                schema=RANGES))
            from .checks.recovery import lost_records_in
            from .report import rate_counts

            lost_records_in(rc, out)  # the summary's recovery counts them, whatever the families

            rate = rate_counts(rc) if len(rc.message_rows) else None
            if rate is not None:
                out.partial("report.rate", rate)
            for family in self.facts.families:
                hook = getattr(family_module(family), "in_range", None)
                if hook is not None:
                    hook(rc, out)
            rc.release()
        finally:
            if isinstance(handle, ReadOnlyMap):
                handle.close()


class RangeContext:
    """One range's walk, messages and the units and entries it owns, for the families' ``in_range`` hooks."""

    def __init__(self, facts: BrokerFacts, segment: str, base: int, items, first_stop: int | None, buf, w0: int,
                 lo: int, hi: int, first_range: bool):
        self.facts, self.broker, self.segment, self.base = facts, facts.broker, segment, base
        self.items, self.first_stop = items, first_stop
        self.buf, self.w0 = buf, w0
        self.lo, self.hi = lo, hi
        self.first_range = first_range  # the segment's first range (file problems are reported by it)
        self.kinds = items.kinds
        self.positions = items.positions  # file positions
        self.message_rows = np.flatnonzero(items.kinds == KIND_MESSAGE)

    def release(self) -> None:
        self.buf = None
        self.__dict__.pop("messages", None)

    # ---- messages ---------------------------------------------------------------------------------------
    @cached_property
    def messages(self) -> pa.Table:
        """Every message of the range: where it is, whether recovery keeps it, and the :data:`DECODED` columns."""
        from udfs import kernels as K

        pos = self.positions[self.message_rows]
        sizes = self.items.sizes[self.message_rows]
        phys = pos + self.base
        n = len(pos)
        starts = pos - self.w0
        parts = [K.decode_buffer(self.buf, starts[a:a + _DECODE_ROWS], sizes[a:a + _DECODE_ROWS], columns=DECODED,
                                 delay_levels=self.facts.delay_levels) for a in range(0, max(n, 1), _DECODE_ROWS)]
        decoded = pa.Table.from_batches(parts).combine_chunks() if n else K.message_schema(DECODED).empty_table()
        beyond = pos > self.first_stop if self.first_stop is not None else np.zeros(n, bool)
        base = {
            "segment": pa.repeat(pa.scalar(self.segment, pa.string()), n), "file_position": pa.array(pos, pa.int64()),
            "physical_offset": pa.array(phys, pa.int64()), "store_size": pa.array(sizes.astype(np.int32)),
            "beyond_first_stop": pa.array(beyond), "kept": pa.array(phys < self.facts.recovered_end),
        }
        t = pa.table(base)
        for name in DECODED:
            t = t.append_column(name, decoded.column(name))
        return t

    def column(self, name: str) -> np.ndarray:
        """A message column as numpy (integers, booleans)."""
        return self.messages.column(name).to_numpy(zero_copy_only=False)

    def decode(self, rows: np.ndarray, columns: tuple[str, ...]) -> pa.Table:
        """More decoded columns (properties, body, msg_id...) for a few messages (indices into :attr:`messages`)."""
        from udfs import kernels as K

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

    def _buckets(self) -> tuple[int, int]:
        from .plan import NEGATIVE_BUCKET, bucket_of

        f = self.facts
        lo = NEGATIVE_BUCKET if self.lo == NEG_INF else int(bucket_of(np.array([self.lo]), f.shift, f.commitlog_end)[0])
        hi = int(bucket_of(np.array([INF if self.hi == INF else self.hi - 1]), f.shift, f.commitlog_end)[0])
        return lo, hi

    @cached_property
    def units(self) -> pa.Table:
        """The consume-queue entries (units recovery would accept) whose physical offset this range owns."""
        from datasources.consumequeue import read_unit_window

        if self.lo >= self.hi:
            return _UNITS.empty_table()
        blo, bhi = self._buckets()
        parts = []
        for f in self.facts.queue_files:
            rows = f.buckets.rows_for(blo, bhi)
            if rows is None:
                continue
            u = read_unit_window(f.loc, rows[0], rows[1])
            keep = (u["kind"] == 0) & self.owns(u["physical_offset"])
            idx = np.flatnonzero(keep)
            if not len(idx):
                continue
            k = len(idx)
            parts.append(pa.table({
                "topic": pa.repeat(pa.scalar(f.topic, pa.string()), k),
                "queue_id": pa.repeat(pa.scalar(f.queue_id, pa.int32()), k),
                "queue_offset": pa.array(f.first_queue_offset + rows[0] + idx, pa.int64()),
                "physical_offset": pa.array(u["physical_offset"][idx]), "size": pa.array(u["size"][idx]),
                "tags_code": pa.array(u["tags_code"][idx]), "file": pa.repeat(pa.scalar(f.name, pa.string()), k),
                "file_position": pa.array((rows[0] + idx) * L.CQ_STORE_UNIT_SIZE, pa.int64()),
            }, schema=_UNITS))
        return pa.concat_tables(parts) if parts else _UNITS.empty_table()

    @cached_property
    def index_entries(self) -> pa.Table:
        """The index entries (1 .. count-1 of every readable file) whose physical offset this range owns."""
        from datasources.indexfile import read_entry_window

        if self.lo >= self.hi:
            return _ENTRIES.empty_table()
        blo, bhi = self._buckets()
        parts = []
        for f in self.facts.index_files:
            rows = f.buckets.rows_for(blo, bhi)
            if rows is None:
                continue
            e = read_entry_window(f.loc, f.hash_slot_num, rows[0], rows[1])
            idx = np.flatnonzero(self.owns(e["physical_offset"]))
            if not len(idx):
                continue
            k = len(idx)
            td = e["time_diff"][idx]
            parts.append(pa.table({
                "file": pa.repeat(pa.scalar(f.name, pa.string()), k),
                "entry": pa.array((rows[0] + idx).astype(np.int32)), "key_hash": pa.array(e["key_hash"][idx]),
                "physical_offset": pa.array(e["physical_offset"][idx]), "time_diff": pa.array(td),
                "store_time": pa.array(f.begin_timestamp + td.astype(np.int64) * 1000),
                "prev_index": pa.array(e["prev_index"][idx]),
            }, schema=_ENTRIES))
        return pa.concat_tables(parts) if parts else _ENTRIES.empty_table()

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

    @property
    def data_end(self) -> int | None:
        """One past the last byte of any message or span of this range (the driver takes the broker's max)."""
        it = self.items
        item = (it.kinds == KIND_MESSAGE) | (it.kinds == KIND_CORRUPT)
        ends = [int((it.positions[item] + it.sizes[item]).max()) + self.base] if item.any() else []
        ends += [p + n for p, n, _ in self._file_problems]
        return max(ends) if ends else None


def _block(phys: np.ndarray, size: int) -> np.ndarray:
    """``phys - phys % size`` with Java's remainder (the sign of the dividend)."""
    return phys - np.fmod(phys, size)


RANGES = pa.schema([("broker", pa.string()), ("segment", pa.string()), ("range_start", pa.int64()),
                    ("messages", pa.int64()), ("blank_at", pa.int64()), ("max_store_timestamp", pa.int64()),
                    ("data_end", pa.int64())])
_UNITS = pa.schema([("topic", pa.string()), ("queue_id", pa.int32()), ("queue_offset", pa.int64()),
                    ("physical_offset", pa.int64()), ("size", pa.int32()), ("tags_code", pa.int64()),
                    ("file", pa.string()), ("file_position", pa.int64())])
_ENTRIES = pa.schema([("file", pa.string()), ("entry", pa.int32()), ("key_hash", pa.int32()),
                      ("physical_offset", pa.int64()), ("time_diff", pa.int32()), ("store_time", pa.int64()),
                      ("prev_index", pa.int32())])


@dataclass
class QueueScan:
    """Consume-queue files of whole queues (file by file, in queue order) for what a file says alone."""

    facts: BrokerFacts
    files: list  # CQFilePartition, every file of each queue, in order

    @property
    def broker(self) -> str:
        return self.facts.broker

    def describe(self) -> str:
        return f"{self.facts.broker}: {len(self.files)} consume-queue file(s)"

    def cost(self) -> int:
        return sum(f.length for f in self.files)

    def run(self, out: Emitter) -> None:
        from .checks.recovery import queue_recovery_in

        queue_recovery_in(self.facts, self.files, out)  # the summary's recovery counts it, whatever the families
        for family in self.facts.families:
            hook = getattr(family_module(family), "in_queue_files", None)
            if hook is not None:
                hook(self.facts, self.files, out)


@dataclass
class IndexScan:
    facts: BrokerFacts
    part: object  # IndexFilePartition

    @property
    def broker(self) -> str:
        return self.facts.broker

    def describe(self) -> str:
        return f"{self.facts.broker}/index/{self.part.name}"

    def cost(self) -> int:
        return self.size  # the chain walk reads the whole file

    @property
    def size(self) -> int:
        loc = self.part.loc
        return os.path.getsize(loc.local_path) if loc.local_path is not None else loc.info().size

    def run(self, out: Emitter) -> None:
        for family in self.facts.families:
            hook = getattr(family_module(family), "in_index_file", None)
            if hook is not None:
                hook(self.facts, self.part, out)
