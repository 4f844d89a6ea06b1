"""``rocketmq-timerlog``: every unit of a 5.x broker's timer log (``timerlog/``) as a row, one task per file.

Units come from store_format's bulk timer-log walk (``store_format.timer.read_timer_unit_arrays``: the same walk
as ``walk_timer_log``, whose grammar is in store_format/timer.py).  Kinds: ``entry`` (a 52-byte unit
``TimerMessageStore.isMagicOK`` accepts); ``blank`` (the 16-byte end-of-file blank ``TimerLog.append`` writes
where one more unit and a blank would not fit); ``corrupt`` (a size other than 52, a magic with bits beyond 0xF, a
blank whose size is not the bytes left, a partial unit at the end of the written bytes, or a file whose name is
not 20 digits).  The zero-filled unwritten rest of a file is no row.  A store without ``timerlog/`` (every 4.x
store, and a 5.x one before its first timer message) has no rows.
"""
from __future__ import annotations

from dataclasses import dataclass

import pyarrow as pa
from pyspark.sql.datasource import InputPartition

from store_format import layout as L
from store_format import rolled
from store_format import timer as T
from store_format.errors import ErrorKind, StoreFormatError
from store_format.stores import PartInput
from decoding.columns import column

from .base import StoreDataSource, StoreReader, apply_mode, parse_mode

FORMAT = "rocketmq-timerlog"
SCHEMA = pa.schema([
    column("broker", pa.string()),
    column("file", pa.string(), "timer-log file name (20 digits: the timer-log offset of its first byte)"),
    column("file_position", pa.int64()),
    column("timerlog_offset", pa.int64(), "the unit's offset in the whole timer log (the file's name + "
           "file_position): what a wheel slot's firstPos/lastPos and a unit's prev_pos name"),
    column("prev_pos", pa.int64(), "timer-log offset of the previous unit of the same wheel slot, -1 at the chain's "
           "end (null on `blank` rows)"),
    column("magic", pa.int32(), "bit flags: 1 default, 2 roll, 4 delete; stored 1 (a timer message), 3 (a roll: "
           "re-put to rmq_sys_wheel_timer when its slot fires), 5 (a recall's delete entry), 7 (a recall that "
           "rolls); on `blank` rows the blank magic 0xCBD43194"),
    column("write_time_ms", pa.int64(), "the wheel's write time (ms) when the unit was written: the re-put "
           "record's TIMER_ENQUEUE_MS"),
    column("delay_ms", pa.int32(), "slot time minus write time (ms)"),
    column("slot_time_ms", pa.int64(), "the time of the wheel slot the unit is in (write_time_ms + delay_ms): when "
           "the timer fires it (a roll unit: when it is re-put to roll on)"),
    column("physical_offset", pa.int64(), "CommitLog offset of the unit's record on rmq_sys_wheel_timer"),
    column("store_size", pa.int32(), "that record's TOTALSIZE, as the unit holds it"),
    column("real_topic_hash", pa.int32(), "String.hashCode() of the record's REAL_TOPIC (0 without one): what the "
           "timer metrics count by"),
    column("kind", pa.string(), "`entry`, `blank` (the end-of-file blank) or `corrupt`"),
    column("reason", pa.string(), "why a row is `corrupt`: BAD_LENGTH (a size other than 52, or a blank whose "
           "size is not the bytes left), BAD_MAGIC, TRUNCATED (a partial unit), BAD_FILE_NAME; null otherwise"),
])
_UNIT_COLUMNS = ("prev_pos", "magic", "write_time_ms", "delay_ms", "physical_offset", "store_size",
                 "real_topic_hash")


@dataclass
class TimerLogFile(InputPartition):
    """One file of a broker's ``timerlog/`` (store_format.rolled's listing), read whole by one task: a file is
    100 MiB at most (mappedFileSizeTimerLog), and a unit's kind depends on where the file's written bytes end."""

    broker: str
    file: rolled.RolledFile


def plan_files(inputs: list[PartInput]) -> list[TimerLogFile]:
    """Every file of the ``timerlog/`` inputs (store_format.stores.part_inputs), bad names too (a ``corrupt``
    row each)."""
    return [TimerLogFile(inp.broker, f) for inp in inputs
            for f in rolled.list_folder(inp.loc, part=L.TIMER_LOG_DIR)]


def file_batch(broker: str, f: rolled.RolledFile) -> pa.RecordBatch:
    """The rows of one timer-log file, built column-wise from the bulk walk (a file holds 2 million units)."""
    if f.base_offset is None:  # not read: no offset to place its units at
        return pa.RecordBatch.from_pylist([{"broker": broker, "file": f.name, "file_position": 0, "kind": "corrupt",
                                            "reason": ErrorKind.BAD_FILE_NAME.value}], schema=SCHEMA)
    u = T.read_timer_unit_arrays(f)
    n = len(u)
    kind = pa.array(T.UNIT_KINDS, pa.string()).take(pa.array(u.kind, pa.int8()))
    reason = pa.array(T.REASONS, pa.string()).take(pa.array(u.reason, pa.int8()))
    # a blank holds no unit fields, a partial unit only its size: null where the bytes say nothing
    fields = (u.kind == T.KIND_ENTRY) | ((u.kind == T.KIND_CORRUPT) & (u.reason != T.REASON_TRUNCATED))
    mask = ~fields
    cols = {name: pa.array(getattr(u, name), mask=mask) for name in _UNIT_COLUMNS}
    cols["magic"] = pa.array(u.magic)  # a blank's magic is its own (0xCBD43194)
    columns = {
        "broker": pa.repeat(pa.scalar(broker, pa.string()), n), "file": pa.repeat(pa.scalar(f.name, pa.string()), n),
        "file_position": pa.array(u.file_position), "timerlog_offset": pa.array(u.timerlog_offset),
        "slot_time_ms": pa.array(u.slot_time_ms, mask=mask), **cols, "kind": kind, "reason": reason,
    }
    return pa.RecordBatch.from_arrays([columns[c.name] for c in SCHEMA], schema=SCHEMA)


class TimerLogReader(StoreReader):
    PART = L.TIMER_LOG_DIR

    def __init__(self, options):
        super().__init__(options)
        self.mode = parse_mode(options)

    def plan(self, inputs):
        return plan_files(inputs)

    def read_partition(self, partition: TimerLogFile):
        batch = apply_mode(file_batch(partition.broker, partition.file), self.mode, lambda r: StoreFormatError(
            ErrorKind(r["reason"]), f"corrupt timer-log unit ({r['reason']}); mode FAILFAST",
            file=rolled.name_of(partition.file.loc), position=r["file_position"],
            field="magic" if r["reason"] == ErrorKind.BAD_MAGIC.value else "size"))
        if batch.num_rows:
            yield batch


class TimerLogDataSource(StoreDataSource):
    FORMAT = FORMAT
    READER = TimerLogReader

    def arrow_schema(self) -> pa.Schema:
        return SCHEMA


__all__ = ["FORMAT", "SCHEMA", "TimerLogDataSource", "TimerLogReader", "file_batch", "plan_files"]
