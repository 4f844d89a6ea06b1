"""``rocketmq-consumequeue``: every ConsumeQueue unit as a row, one task per file.

Units come from store_format's ``read_units`` (the same classification as the broker's recovery test
``offset >= 0 && size > 0``).  Kinds: ``entry``; ``pre_blank`` (``fillPreBlank`` units); ``corrupt`` (a unit
that fails the recovery test, a zero unit with data after it, a partial trailing unit, or a file whose name
is not 20 digits); ``zero_tail`` (the unwritten zero-filled rest of a file, one row with its length).
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa
import pyarrow.fs as pafs
from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition

from store_format import layout as L
from store_format.consumequeue import CQFile, read_units
from store_format.errors import ErrorKind, StoreFormatError

from .storepaths import Location, find_inputs, local_copy

FORMAT = "rocketmq-consumequeue"
MODES = ("PERMISSIVE", "DROPMALFORMED", "FAILFAST")
SCHEMA = pa.schema([
    ("broker", pa.string()), ("topic", pa.string()), ("queue_id", pa.int32()), ("queue_offset", pa.int64()),
    ("physical_offset", pa.int64()), ("size", pa.int32()), ("tags_code", pa.int64()), ("file", pa.string()),
    ("file_position", pa.int64()), ("kind", pa.string()), ("length", pa.int64()), ("reason", pa.string()),
])
_KINDS = {"entry": "entry", "pre_blank": "pre_blank", "invalid": "corrupt", "zero": "corrupt"}


@dataclass
class CQFilePartition(InputPartition):
    broker: str
    topic: str
    queue_id: int | None  # None: the queue folder's name is not an int
    loc: Location
    name: str
    length: int


@dataclass
class CQFileGroup(InputPartition):
    """Consecutive files read by one task: a broker has thousands of queues, mostly small, and a task per
    file would cost more in scheduling than in reading."""

    files: list[CQFilePartition]


GROUP_BYTES = 64 << 20  # per task: 64 MiB of units (3.3 M entries), or
GROUP_FILES = 256  # this many files, whichever comes first


def group_files(files: list[CQFilePartition]) -> list[CQFileGroup]:
    groups, cur, size = [], [], 0
    for f in files:
        if cur and (size + f.length > GROUP_BYTES or len(cur) >= GROUP_FILES):
            groups.append(CQFileGroup(cur))
            cur, size = [], 0
        cur.append(f)
        size += f.length
    if cur:
        groups.append(CQFileGroup(cur))
    return groups


def plan_files(path: str, broker: str | None) -> list[CQFilePartition]:
    out = []
    for inp in find_inputs(path, "consumequeue", broker):
        if inp.single_file:  # consumequeue/<topic>/<queueId>/<file>
            qdir = inp.loc.parent()
            out.append(_partition(inp.broker, qdir.parent().name, qdir.name, inp.loc.info()))
            continue
        for topic in inp.loc.list():
            if topic.type != pafs.FileType.Directory:
                continue
            for q in Location(inp.loc.fs, topic.path).list():
                if q.type != pafs.FileType.Directory:
                    continue
                for f in Location(inp.loc.fs, q.path).list():
                    if f.type == pafs.FileType.File:
                        out.append(_partition(inp.broker, topic.base_name, q.base_name, f, inp.loc.fs))
    return out


def _partition(broker, topic, qname, info, fs=None) -> CQFilePartition:
    qid = int(qname) if qname.lstrip("-").isdigit() else None
    fs = fs or pafs.LocalFileSystem()
    return CQFilePartition(broker, topic, qid, Location(fs, info.path), info.base_name, info.size)


def file_rows(p: CQFilePartition) -> list[dict]:
    """Rows of one consume-queue file, from store_format's reader."""
    def row(**kw):
        return {"broker": p.broker, "topic": p.topic, "queue_id": p.queue_id, "file": p.name, **kw}

    if p.queue_id is None or not p.name.isdigit() or len(p.name) != L.SEGMENT_NAME_DIGITS:
        return [row(file_position=0, kind="corrupt", length=p.length, reason=ErrorKind.BAD_FILE_NAME.value,
                    physical_offset=None)]
    rows, end = [], 0
    with local_copy(p.loc) as local:
        cq = CQFile(p.topic, p.queue_id, Path(local), int(p.name), p.length)
        try:
            for u in read_units(cq):
                kind = _KINDS[u.kind]
                rows.append(row(queue_offset=u.queue_offset, physical_offset=u.physical_offset, size=u.size,
                                tags_code=u.tags_code, file_position=u.file_position, kind=kind,
                                length=L.CQ_STORE_UNIT_SIZE,
                                reason=None if kind != "corrupt" else f"{u.kind} unit: recovery stops here"))
                end = u.file_position + L.CQ_STORE_UNIT_SIZE
        except StoreFormatError as e:  # a partial trailing unit, reported after the whole ones
            whole = p.length - p.length % L.CQ_STORE_UNIT_SIZE
            if whole > end:
                rows.append(row(file_position=end, kind="zero_tail", length=whole - end))
            rows.append(row(file_position=e.position, kind="corrupt", length=p.length - e.position,
                            reason=e.kind.value))
            return rows
    if p.length > end:
        rows.append(row(file_position=end, kind="zero_tail", length=p.length - end))
    return rows


class ConsumeQueueDataSource(DataSource):
    @classmethod
    def name(cls) -> str:
        return FORMAT

    def schema(self) -> str:
        from .commitlog import spark_ddl

        return spark_ddl(SCHEMA)

    def reader(self, schema):
        return ConsumeQueueReader(self.options)


class ConsumeQueueReader(DataSourceReader):
    def __init__(self, options):
        self.path = options.get("path")
        self.broker = options.get("broker")
        self.mode = options.get("mode", "PERMISSIVE").upper()
        if self.mode not in MODES:
            raise ValueError(f"option mode={self.mode!r}: choose one of {', '.join(MODES)}")

    def partitions(self):
        return group_files(plan_files(self.path, self.broker)) or [CQFileGroup([])]

    def read(self, partition: "CQFileGroup"):
        for part in partition.files:
            yield from self._read_file(part)

    def _read_file(self, partition: CQFilePartition):
        rows = file_rows(partition)
        bad = [r for r in rows if r["kind"] == "corrupt"]
        if bad and self.mode == "FAILFAST":
            r = bad[0]
            raise StoreFormatError(ErrorKind(r["reason"]) if r["reason"] in ErrorKind.__members__
                                   else ErrorKind.BAD_LENGTH, f"corrupt consume-queue unit ({r['reason']}); mode "
                                   "FAILFAST", file=str(partition.loc), position=r["file_position"])
        if self.mode == "DROPMALFORMED":
            rows = [r for r in rows if r["kind"] != "corrupt"]
        if rows:
            yield pa.RecordBatch.from_pylist(rows, schema=SCHEMA)
