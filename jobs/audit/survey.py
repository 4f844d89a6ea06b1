"""The survey: the first, light Spark stage of an audit, whose small results the driver needs before the scan.

* :class:`SegmentSurvey`: one range of a segment's salvage walk, CRC checked, reporting only what is not a
  message (stops, blanks, unframeable spans) and where its data ends.  Run over the segments the broker's
  recovery walks and over segments the scan splits: the driver then knows every segment's walk ends (first stop,
  first blank), so it can predict recovery and give each scan range what only a walk from the segment's start
  knows.
* :class:`QueueSurvey`: consume-queue files, a group of whole queues per task: per file its units' bounds and
  the routing buckets of its entries (which scan task owns which units).
* :class:`IndexSurvey`: one index file: header, geometry, and the routing buckets of its entries.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from datasources.commitlog import read_range_walk, span_detail
from datasources.consumequeue import CQFilePartition
from datasources.indexfile import EntryViews, IndexFilePartition, written_entries
from datasources.storepaths import Location
from store_format import layout as L
from store_format.commitlog import KIND_CORRUPT, KIND_MESSAGE, KIND_STOP, KINDS, ReadOnlyMap, SEGMENT_NAME, \
    SalvageSpan
from store_format.consumequeue import CQFile, read_unit_arrays
from store_format.recovery import recover_queue
from store_format.errors import ErrorKind, StoreFormatError
from store_format.indexfile import INDEX_NAME, IndexFile, read_header

from .plan import Buckets
from .tasks import Emitter

QUEUE_STARTS = pa.schema([("broker", pa.string()), ("topic", pa.string()), ("queue_id", pa.int32()),
                          ("recover_end", pa.int64()), ("max_physic_offset", pa.int64()),
                          ("refused_offset", pa.int64()), ("refused_size", pa.int64())])
WALK_ITEMS = pa.schema([
    ("broker", pa.string()), ("segment", pa.string()), ("range_start", pa.int64()), ("file_position", pa.int64()),
    ("kind", pa.string()), ("size", pa.int64()), ("reason", pa.string()), ("field", pa.string()),
    ("detail", pa.string()),
])
WALK_RANGES = pa.schema([
    ("broker", pa.string()), ("segment", pa.string()), ("range_start", pa.int64()), ("first", pa.int64()),
    ("until", pa.int64()), ("messages", pa.int64()), ("data_end", pa.int64()),
])
BUCKETS = [("bucket", pa.list_(pa.int64())), ("bucket_first", pa.list_(pa.int64())),
           ("bucket_last", pa.list_(pa.int64()))]
CQ_FILES = pa.schema([
    ("broker", pa.string()), ("path", pa.string()), ("topic", pa.string()), ("queue_id", pa.int32()),
    ("units", pa.int64()), ("entries", pa.int64()),
    ("min_queue_offset", pa.int64()), ("max_queue_offset", pa.int64()), *BUCKETS,
])
INDEX_FILES = pa.schema([
    ("broker", pa.string()), ("path", pa.string()), ("name", pa.string()), ("error", pa.string()),
    ("hash_slot_num", pa.int32()), ("index_num", pa.int32()), ("count", pa.int64()),
    ("begin_timestamp", pa.int64()), ("end_timestamp", pa.int64()), ("begin_phy_offset", pa.int64()),
    ("end_phy_offset", pa.int64()), ("index_count", pa.int32()), *BUCKETS,
])


def walk_rows(broker: str, segment: str, range_start: int, items) -> list[dict]:
    """The non-message items of a walk as rows of :data:`WALK_ITEMS`."""
    rows = []
    for i, it in sorted(items.others.items()):
        if isinstance(it, SalvageSpan):
            rows.append(dict(file_position=it.file_position, kind=KINDS[KIND_CORRUPT], size=it.length, reason=it.reason,
                             detail=span_detail(it)))
        else:
            rows.append(dict(file_position=it.file_position, kind=it.kind, size=it.size, reason=it.stop_kind,
                             field=it.stop_field, detail=it.stop_message))
    return [{"broker": broker, "segment": segment, "range_start": range_start, **r} for r in rows]


@dataclass
class SegmentSurvey:
    broker: str
    loc: Location
    name: str
    base: int
    length: int
    start: int
    end: int
    last: bool
    check_crc: bool

    def describe(self) -> str:
        return f"{self.broker}/{self.name}@{self.start}"

    def cost(self) -> int:
        return self.end - self.start

    def run(self, out: Emitter) -> None:
        walk, handle, _ = read_range_walk(self.loc, self.name, self.base, self.length, self.start, self.end,
                                          self.last, check_crc=self.check_crc)
        if isinstance(handle, ReadOnlyMap):
            handle.close()
        items = walk.items
        out.partial("survey.walk_items", pa.Table.from_pylist(walk_rows(self.broker, self.name, self.start, items),
                                                              schema=WALK_ITEMS))
        msg = items.kinds == KIND_MESSAGE
        ends = items.positions + np.where(items.kinds == KIND_STOP, 0, items.sizes)
        out.partial("survey.walk_ranges", pa.Table.from_pylist([{
            "broker": self.broker, "segment": self.name, "range_start": self.start, "first": walk.first,
            "until": walk.until, "messages": int(msg.sum()), "data_end": int(ends.max()) if len(items) else None,
        }], schema=WALK_RANGES))


def _bucket_columns(b: Buckets) -> dict:
    return {"bucket": b.buckets.tolist(), "bucket_first": b.first.tolist(), "bucket_last": b.last.tolist()}


@dataclass
class QueueSurvey:
    """Consume-queue files of whole queues.  For SCHEDULE_TOPIC_XXXX, the units at or past each level's next
    offset to deliver (``schedule_next``, queue id -> offset) are the pending delayed messages: their records are
    read here (without checking them: the scan says whether a message of the walk starts there)."""

    broker: str
    files: list[CQFilePartition]
    shift: int
    commitlog_end: int
    schedule_next: dict
    segments: list  # (base offset, length, Location) of the named segments, to read pending records

    def describe(self) -> str:
        return f"{self.broker}: {len(self.files)} consume-queue file(s)"

    def cost(self) -> int:
        return sum(f.length for f in self.files)

    def run(self, out: Emitter) -> None:
        rows, pending = [], []
        maps: dict[str, ReadOnlyMap] = {}  # the segments pending records are read from, each mapped once
        try:
            self._read(rows, pending, maps)
        finally:
            for m in maps.values():
                m.close()
        out.partial("survey.cq_files", pa.Table.from_pylist(rows, schema=CQ_FILES))
        starts = []
        for (topic, qid), files in queue_files(self.files).items():
            s = recover_queue(files)  # ConsumeQueue.recover(): the broker's own walk of the queue
            starts.append({"broker": self.broker, "topic": topic, "queue_id": qid, "recover_end": s.recover_end,
                           "max_physic_offset": s.max_physic_offset,
                           "refused_offset": s.refused[0] if s.refused else None,
                           "refused_size": s.refused[1] if s.refused else None})
        out.partial("survey.queue_starts", pa.Table.from_pylist(starts, schema=QUEUE_STARTS))
        if pending:
            from .checks.delays import PENDING

            out.partial("delays.pending", pa.Table.from_pylist(pending, schema=PENDING))

    def _read(self, rows: list, pending: list, maps: dict) -> None:
        """Each file's row and bounds into ``rows``, the pending delayed messages into ``pending``."""
        for p in self.files:
            if p.queue_id is None or not SEGMENT_NAME.match(p.name):
                continue  # never read: the scan reports the file
            local = p.loc.as_path()  # a Path, else a fs.StorePath read through pyarrow.fs
            u = read_unit_arrays(CQFile(p.topic, p.queue_id, local, int(p.name), p.length))
            entry = np.flatnonzero(u.kind == 0)
            qoff = u.queue_offset[entry]
            b = Buckets.of_offsets(u.physical_offset[entry], entry, self.shift, self.commitlog_end)
            rows.append({"broker": self.broker, "path": p.loc.path, "topic": p.topic, "queue_id": p.queue_id,
                         "units": len(u.kind), "entries": len(entry),
                         "min_queue_offset": int(qoff.min()) if len(qoff) else None,
                         "max_queue_offset": int(qoff.max()) if len(qoff) else None, **_bucket_columns(b)})
            if p.topic == L.SCHEDULE_TOPIC and p.queue_id in self.schedule_next:
                due = entry[qoff >= self.schedule_next[p.queue_id]]
                for i in due.tolist():
                    phys = int(u.physical_offset[i])
                    msg = self._record(phys, maps)
                    pending.append({"broker": self.broker, "level": p.queue_id + 1,
                                    "queue_offset": int(u.queue_offset[i]), "physical_offset": phys,
                                    "deliver_time": int(u.tags_code[i]),
                                    "uniq_key": msg.uniq_key if msg else None,
                                    "real_topic": msg.properties.get(L.PROPERTY_REAL_TOPIC) if msg else None})

    def _record(self, phys: int, maps: dict):
        """The record a unit points at, decoded as it stands (None when it does not decode)."""
        from store_format import codec

        for base, length, loc in self.segments:
            if base <= phys < base + length:
                pos = phys - base
                head = loc.read_range(pos, 4) if loc.local_path is None else None
                try:
                    if loc.local_path is not None:
                        if loc.local_path not in maps:
                            maps[loc.local_path] = ReadOnlyMap(loc.local_path)
                        return codec.decode_record(maps[loc.local_path].buf, pos, file=loc.path)
                    size = int.from_bytes(head, "big", signed=True)
                    if not 0 < size <= length - pos:
                        return None
                    return codec.decode_record(loc.read_range(pos, size), 0, file=loc.path)
                except StoreFormatError:
                    return None
        return None


@dataclass
class IndexSurvey:
    broker: str
    part: IndexFilePartition
    shift: int
    commitlog_end: int

    def describe(self) -> str:
        return f"{self.broker}/index/{self.part.name}"

    def cost(self) -> int:
        return 1 << 20  # reads a few bytes per entry

    def run(self, out: Emitter) -> None:
        p = self.part
        row = {"broker": self.broker, "path": p.loc.path, "name": p.name}
        if not INDEX_NAME.match(p.name):
            row["error"] = ErrorKind.BAD_FILE_NAME.value
        else:
            local = p.loc.as_path()  # a Path, else a fs.StorePath read through pyarrow.fs
            try:
                f = IndexFile(local, p.hash_slot_num, p.index_num)
            except StoreFormatError as e:
                row["error"] = e.kind.value
                with ReadOnlyMap(local) as m:  # the header, when the file holds one
                    if len(m) >= L.INDEX_HEADER_SIZE:
                        row.update(_header_row(read_header(m.buf)))
            else:
                with f, ReadOnlyMap(local) as m:
                    h = f.header
                    count = written_entries(m, f.hash_slot_num, min(max(h.index_count, 1), f.index_num))
                    v = EntryViews(m.buf, f.hash_slot_num, count)
                    phys = v.physical_offset[1:].astype(np.int64)
                    del v
                    b = Buckets.of_offsets(phys, 1, self.shift, self.commitlog_end)  # entry 0 is never used
                    row.update(hash_slot_num=f.hash_slot_num, index_num=f.index_num, count=count,
                               **_header_row(h), **_bucket_columns(b))
        out.partial("survey.index_files", pa.Table.from_pylist([row], schema=INDEX_FILES))


def _header_row(h) -> dict:
    return {"begin_timestamp": h.begin_timestamp, "end_timestamp": h.end_timestamp,
            "begin_phy_offset": h.begin_phy_offset, "end_phy_offset": h.end_phy_offset, "index_count": h.index_count}


def queue_files(parts: list[CQFilePartition]) -> dict[tuple[str, int], list[CQFile]]:
    """The consume-queue files of ``parts`` the broker loads, by queue (as store_format.consumequeue's
    discover_queues finds them: a number for a folder name, 20 digits for a file name), sorted by name."""
    out: dict[tuple, list] = {}
    for p in parts:
        if p.queue_id is not None and SEGMENT_NAME.match(p.name):
            out.setdefault((p.topic, p.queue_id), []).append(
                CQFile(p.topic, p.queue_id, p.loc.as_path(), int(p.name), p.length))
    return {k: sorted(v, key=lambda f: f.base_byte_offset) for k, v in out.items()}


def buckets_of_row(row: dict) -> Buckets:
    return Buckets(np.array(row["bucket"] or [], np.int64), np.array(row["bucket_first"] or [], np.int64),
                   np.array(row["bucket_last"] or [], np.int64))
