"""``rocketmq-consumequeue``: every consume-queue unit of every backend as a row (store_format.queues: the 20-byte
units of ``consumequeue/``, ``backend`` = ``file``; 5.x batch topics' 46-byte units of ``batchconsumequeue/``,
``backend`` = ``batch``; compacted topics' sparse queues of ``compaction/compactionCq``, ``backend`` =
``compaction``), whole queues per task.

Units come from each queue's backend (the same classification as the broker's recovery test: ``offset >= 0 &&
size > 0``, and for a batch unit ``msgBaseOffset >= 0 && batchSize > 0``).  Kinds: ``entry``; ``pre_blank``
(``fillPreBlank`` units); ``corrupt`` (a unit that fails the recovery test, a zero unit with data after it, a
partial trailing unit, or a file whose name is not 20 digits); ``zero_tail`` (the unwritten zero-filled rest of a
file, one row with its length).  Every backend gives the same columns; a batch unit's ``queue_offset`` is its
``msg_base_offset`` (its first message's), and ``batch_size`` says how many queue offsets it covers.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
from pyspark.sql.datasource import InputPartition

from store_format.errors import ErrorKind, StoreFormatError
from store_format.plan import group_queue_files
from store_format.queues import QueueFile, list_queue_files
from store_format.stores import PartInput
from decoding.columns import column

from .base import StoreDataSource, StoreReader, apply_mode, parse_mode

FORMAT = "rocketmq-consumequeue"
SCHEMA = pa.schema([
    column("broker", pa.string()), column("topic", pa.string(), "topic name: the queue's grandparent folder"),
    column("queue_id", pa.int32(), "queue id: the queue folder's name (null when it is no int: a `corrupt` row)"),
    column("queue_offset", pa.int64(), "the unit's queue offset: the file's first (its name / 20) + its index in "
           "the file; a batch unit's msgBaseOffset (its first message's); null on `zero_tail` rows and partial "
           "trailing units"),
    column("physical_offset", pa.int64(), "the unit's CommitLog Offset: where its message's record starts in the "
           "broker's whole commitlog"),
    column("size", pa.int32(), "the unit's Size: the record's TOTALSIZE"),
    column("tags_code", pa.int64(), "the unit's Tags HashCode: the tag's hash code; for a delayed message in "
           "SCHEDULE_TOPIC_XXXX its delivery time (ms); with ConsumeQueueExt, the ext unit's (null when the unit's "
           "address reaches none)"),
    column("ext_offset", pa.int64(), "ConsumeQueueExt (enableConsumeQueueExt): where the unit's tagsCode slot "
           "held an ext unit's address, that unit's offset in the queue's consumequeue_ext files; null otherwise"),
    column("file", pa.string(), "consume-queue file name (20 digits: the byte offset of its first unit in the "
           "queue, the unit index * the unit's size, 20 or 46)"),
    column("file_position", pa.int64(), "byte position of the row's first byte inside the file"),
    column("kind", pa.string(), "`entry`; `pre_blank` (a fillPreBlank unit); `corrupt` (a unit that fails the "
           "broker's recovery test offset >= 0 && size > 0 (a batch unit's also msgBaseOffset >= 0 && batchSize > 0; "
           "its reason names a compaction end marker `end_marker`), a zero unit with data after it, a partial "
           "trailing unit, or a file or folder name the broker cannot parse); `end_marker` (a compaction sparse queue's "
           "end marker: its log file ended there); `zero_tail` (the unwritten zero-filled rest of a file, one row)"),
    column("length", pa.int64(), "bytes the row covers: the unit's size (20; 28 for a RocksDB unit, 46 for a "
           "batch one) for a unit, "
           "the run's length for `zero_tail` and a partial trailing unit"),
    column("reason", pa.string(), "why a row is `corrupt` (`<kind> unit: recovery stops here`, or an error kind "
           "such as BAD_FILE_NAME); null otherwise"),
    column("backend", pa.string(), "how the queue keeps its units: `file` (consumequeue/, 20-byte units), `rocksdb` "
           "(consumequeue/ a RocksDB database: 28-byte values), `batch` (batchconsumequeue/, a 5.x "
           "queue.type=BatchCQ topic's 46-byte units), `compaction` (compaction/compactionCq/, a 5.x "
           "cleanup.policy=COMPACTION topic's sparse queue: 46-byte units whose physical_offset is in its "
           "compaction log)"),
    column("batch_size", pa.int32(), "a batch unit's batchSize: the queue offsets (messages of its inner-batch "
           "record) it covers from msg_base_offset; null for other backends"),
    column("msg_base_offset", pa.int64(), "a batch unit's msgBaseOffset: its first message's queue offset; null for "
           "other backends"),
])
#: row kind by a backend's unit kind: the units recovery accepts are entries; ``pre_blank`` (fillPreBlank's) is its own
_ROW_KIND = {"entry": "entry", "pre_blank": "pre_blank"}
#: a sparse queue's end marker is where its compaction log's file ends (SparseConsumeQueue.putEndPositionInfo), not
#: damage as it would be in a batch queue
_ROW_KIND_OF = {"compaction": {**_ROW_KIND, "end_marker": "end_marker"}}


@dataclass
class CQFileGroup(InputPartition):
    """Whole queues' files read by one task (store_format.plan.group_queue_files): a broker has thousands of
    queues, mostly small, and a task per file would cost more in scheduling than in reading."""

    broker: str
    files: list[QueueFile]


def plan_groups(inputs: list[PartInput]) -> list[CQFileGroup]:
    """The queue files of the ``inputs`` (store_format.stores.part_inputs) in groups of whole queues: the one file a
    path named, else every backend's queues of its store."""
    return [CQFileGroup(inp.broker, group) for inp in inputs
            for group in group_queue_files(list_queue_files(inp.loc if inp.single_file or inp.root is None
                                                            else inp.root))]


def file_batches(broker: str, p: QueueFile) -> list[pa.RecordBatch]:
    """Rows of one queue file (its backend's bulk unit reader), built column-wise: a busy queue has 300,000 units a
    file."""
    unit_size = p.backend.unit_size

    def rows_batch(rows: list[dict]) -> pa.RecordBatch:
        return pa.RecordBatch.from_pylist([{"broker": broker, "topic": p.topic, "queue_id": p.queue_id,
                                            "file": p.name, "backend": p.backend.name, **r} for r in rows],
                                          schema=SCHEMA)

    if not p.loaded:  # a queue folder that is no int, a file name that is not 20 ASCII digits, a database unread
        unreadable = [why for kind, why in p.problems if kind == "unreadable"]
        return [rows_batch([dict(file_position=0, kind="corrupt", length=p.length,
                                 reason=unreadable[0] if unreadable else ErrorKind.BAD_FILE_NAME.value,
                                 physical_offset=None)])]
    u = p.units()
    n = len(u)
    end = n * unit_size
    tail = []  # the unwritten zero-filled rest, then a partial trailing unit
    whole = p.length - p.length % unit_size
    if whole > end:
        tail.append(dict(file_position=end, kind="zero_tail", length=whole - end))
    if u.truncated is not None:
        tail.append(dict(file_position=u.truncated.position, kind="corrupt", length=p.length - u.truncated.position,
                         reason=u.truncated.kind.value))
    if "missing" in u.kinds:  # a database queue's offsets without a key between its first and last: no row
        u = _present(u, u.kinds.index("missing"))
        n = len(u)
    if not n:
        return [rows_batch(tail)] if tail else []
    codes = pa.array(u.kind, pa.int8())
    kinds = _ROW_KIND_OF.get(p.backend.name, _ROW_KIND)
    row_kind = pa.array([kinds.get(k, "corrupt") for k in u.kinds], pa.string()).take(codes)
    reasons = pa.array([None if k in kinds else f"{k} unit: recovery stops here" for k in u.kinds],
                       pa.string()).take(codes)
    ext = u.ext_offset if u.ext_offset is not None else np.full(n, -1, np.int64)
    found = u.ext_found if u.ext_found is not None else np.zeros(n, bool)

    def repeat(value, type_):
        return pa.repeat(pa.scalar(value, type_), n)

    columns = {
        "broker": repeat(broker, pa.string()), "topic": repeat(p.topic, pa.string()),
        "queue_id": repeat(p.queue_id, pa.int32()), "queue_offset": pa.array(u.queue_offset, pa.int64()),
        "physical_offset": pa.array(u.physical_offset, pa.int64()), "size": pa.array(u.size, pa.int32()),
        "tags_code": pa.array(u.tags_code, pa.int64(), mask=(ext >= 0) & ~found),
        "ext_offset": pa.array(ext, mask=ext < 0), "file": repeat(p.name, pa.string()),
        "file_position": pa.array(u.file_position, pa.int64()), "kind": row_kind,
        "length": repeat(unit_size, pa.int64()), "reason": reasons, "backend": repeat(p.backend.name, pa.string()),
        "batch_size": repeat(None, pa.int32()) if u.batch_size is None else pa.array(u.batch_size, pa.int32()),
        "msg_base_offset": repeat(None, pa.int64()) if u.msg_base_offset is None
        else pa.array(u.msg_base_offset, pa.int64()),
    }
    units = pa.RecordBatch.from_arrays([columns[f.name] for f in SCHEMA], schema=SCHEMA)
    return [units, rows_batch(tail)] if tail else [units]


def _present(u, missing: int):
    """``u`` without its units of kind ``missing``."""
    keep = u.kind != missing
    return dataclasses.replace(u, **{f.name: getattr(u, f.name)[keep] for f in dataclasses.fields(u)
                                     if isinstance(getattr(u, f.name), np.ndarray)})


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
