"""``rocketmq-consumequeue``: every ConsumeQueue unit as a row, one task per file.

Units come from store_format's ``read_units`` (the same classification as the broker's recovery test
``offset >= 0 && size > 0``).  Kinds: ``entry``; ``pre_blank`` (``fillPreBlank`` units); ``corrupt`` (a unit
that fails the recovery test, a zero unit with data after it, a partial trailing unit, or a file whose name
is not 20 digits); ``zero_tail`` (the unwritten zero-filled rest of a file, one row with its length).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa
from pyspark.sql.datasource import InputPartition

from store_format import layout as L
from store_format.consumequeue import UNIT_KINDS, QueueFile, list_consumequeue, read_unit_arrays
from store_format.errors import ErrorKind, StoreFormatError
from store_format.plan import group_queue_files
from store_format.stores import PartInput
from udfs.columns import column

from .base import StoreDataSource, StoreReader, apply_mode, parse_mode

FORMAT = "rocketmq-consumequeue"
SCHEMA = pa.schema([
    column("broker", pa.string()), column("topic", pa.string(), "topic name: the queue's grandparent folder"),
    column("queue_id", pa.int32(), "queue id: the queue folder's name (null when it is no int: a `corrupt` row)"),
    column("queue_offset", pa.int64(), "the unit's queue offset: the file's first (its name / 20) + its index in "
           "the file; null on `zero_tail` rows and partial trailing units"),
    column("physical_offset", pa.int64(), "the unit's CommitLog Offset: where its message's record starts in the "
           "broker's whole commitlog"),
    column("size", pa.int32(), "the unit's Size: the record's TOTALSIZE"),
    column("tags_code", pa.int64(), "the unit's Tags HashCode: the tag's hash code; for a delayed message in "
           "SCHEDULE_TOPIC_XXXX its delivery time (ms); with ConsumeQueueExt, the ext unit's (null when the unit's "
           "address reaches none)"),
    column("ext_offset", pa.int64(), "ConsumeQueueExt (enableConsumeQueueExt): where the unit's tagsCode slot "
           "held an ext unit's address, that unit's offset in the queue's consumequeue_ext files; null otherwise"),
    column("file", pa.string(), "consume-queue file name (20 digits: the byte offset of its first unit in the "
           "queue, the queue offset * 20)"),
    column("file_position", pa.int64(), "byte position of the row's first byte inside the file"),
    column("kind", pa.string(), "`entry`; `pre_blank` (a fillPreBlank unit); `corrupt` (a unit that fails the "
           "broker's recovery test offset >= 0 && size > 0, a zero unit with data after it, a partial trailing unit, "
           "or a file or folder name the broker cannot parse); `zero_tail` (the unwritten zero-filled rest of a "
           "file, one row)"),
    column("length", pa.int64(), "bytes the row covers: 20 for a unit, the run's length for `zero_tail` and a "
           "partial trailing unit"),
    column("reason", pa.string(), "why a row is `corrupt` (`<kind> unit: recovery stops here`, or an error kind "
           "such as BAD_FILE_NAME); null otherwise"),
])
_KINDS = {"entry": "entry", "pre_blank": "pre_blank", "invalid": "corrupt", "zero": "corrupt"}
_ROW_KINDS = [_KINDS[k] for k in UNIT_KINDS]  # row kind by store_format's unit kind code


@dataclass
class CQFileGroup(InputPartition):
    """Whole queues' files read by one task (store_format.plan.group_queue_files): a broker has thousands of
    queues, mostly small, and a task per file would cost more in scheduling than in reading."""

    broker: str
    files: list[QueueFile]


def plan_groups(inputs: list[PartInput]) -> list[CQFileGroup]:
    """The files of the consume-queue ``inputs`` (store_format.stores.part_inputs) in groups of whole queues."""
    return [CQFileGroup(inp.broker, group) for inp in inputs for group in group_queue_files(list_consumequeue(inp.loc))]


def file_batches(broker: str, p: QueueFile) -> list[pa.RecordBatch]:
    """Rows of one consume-queue file (store_format's bulk unit reader), built column-wise: a busy queue
    has 300,000 units a file."""
    def rows_batch(rows: list[dict]) -> pa.RecordBatch:
        return pa.RecordBatch.from_pylist([{"broker": broker, "topic": p.topic, "queue_id": p.queue_id,
                                            "file": p.name, **r} for r in rows], schema=SCHEMA)

    if not p.loaded:  # a queue folder that is no int, or a file name that is not 20 ASCII digits
        return [rows_batch([dict(file_position=0, kind="corrupt", length=p.length,
                                 reason=ErrorKind.BAD_FILE_NAME.value, physical_offset=None)])]
    u = read_unit_arrays(p.cq_file())
    n = len(u.kind)
    end = n * L.CQ_STORE_UNIT_SIZE
    tail = []  # the unwritten zero-filled rest, then a partial trailing unit
    whole = p.length - p.length % L.CQ_STORE_UNIT_SIZE
    if whole > end:
        tail.append(dict(file_position=end, kind="zero_tail", length=whole - end))
    if u.truncated is not None:
        tail.append(dict(file_position=u.truncated.position, kind="corrupt", length=p.length - u.truncated.position,
                         reason=u.truncated.kind.value))
    if not n:
        return [rows_batch(tail)] if tail else []
    row_kind = pa.array(_ROW_KINDS, pa.string()).take(pa.array(u.kind, pa.int8()))
    reasons = pa.array([None if k in ("entry", "pre_blank") else f"{k} unit: recovery stops here" for k in UNIT_KINDS],
                       pa.string()).take(pa.array(u.kind, pa.int8()))
    ext = u.ext_offset if u.ext_offset is not None else np.full(n, -1, np.int64)
    found = u.ext_found if u.ext_found is not None else np.zeros(n, bool)
    columns = {
        "broker": pa.repeat(pa.scalar(broker, pa.string()), n), "topic": pa.repeat(pa.scalar(p.topic, pa.string()), n),
        "queue_id": pa.repeat(pa.scalar(p.queue_id, pa.int32()), n), "queue_offset": pa.array(u.queue_offset),
        "physical_offset": pa.array(u.physical_offset), "size": pa.array(u.size),
        "tags_code": pa.array(u.tags_code, mask=(ext >= 0) & ~found), "ext_offset": pa.array(ext, mask=ext < 0),
        "file": pa.repeat(pa.scalar(p.name, pa.string()), n), "file_position": pa.array(u.file_position),
        "kind": row_kind, "length": pa.repeat(pa.scalar(L.CQ_STORE_UNIT_SIZE, pa.int64()), n), "reason": reasons,
    }
    units = pa.RecordBatch.from_arrays([columns[f.name] for f in SCHEMA], schema=SCHEMA)
    return [units, rows_batch(tail)] if tail else [units]


class ConsumeQueueReader(StoreReader):
    PART = "consumequeue"

    def __init__(self, options):
        super().__init__(options)
        self.mode = parse_mode(options)

    def plan(self, inputs):
        return plan_groups(inputs)

    def read_partition(self, partition: CQFileGroup):
        for part in partition.files:
            yield from self._read_file(partition.broker, part)

    def _read_file(self, broker: str, partition: QueueFile):
        for batch in file_batches(broker, partition):
            batch = apply_mode(batch, self.mode, lambda r: StoreFormatError(
                ErrorKind(r["reason"]) if r["reason"] in ErrorKind.__members__ else ErrorKind.BAD_LENGTH,
                f"corrupt consume-queue unit ({r['reason']}); mode FAILFAST", file=str(partition.loc),
                position=r["file_position"]))
            if batch.num_rows:
                yield batch


class ConsumeQueueDataSource(StoreDataSource):
    FORMAT = FORMAT
    READER = ConsumeQueueReader

    def arrow_schema(self) -> pa.Schema:
        return SCHEMA
