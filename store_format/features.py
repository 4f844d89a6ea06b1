"""What a broker store's files say about the RocketMQ that wrote it: 4.x, or 5.x and which 5.x structures it has.

No flag is needed to read a 5.x store: a default 5.x broker creates ``timerwheel``, ``config/timercheck`` and
``config/timermetrics`` at start (``timerWheelEnable`` is on by default) and its compaction service's
``compaction/position-checkpoint``; ``timerlog/`` appears with the first timer unit, ``batchconsumequeue/`` with
a ``queue.type=BatchCQ`` topic, ``consumequeue/%LMQ%...`` with LMQ dispatch, ``config/lmqConsumerOffset.json``
with ``enableLmq``.  The records say it too, whatever files a dump kept: a V2 record (MessageVersion V2, magic
0xDAA320AB: a topic past 127 characters, 5.1.0 and later) or a ``__CRC32#`` property (``enabledAppendPropCRC``,
5.2.0 and later, on every record the broker writes once it is on).  They are sampled where they are cheapest to
see: the first records of the first and of the newest commit-log segment (:data:`SAMPLE` bytes of each, framed
in bulk), so the check costs a listing of a few folders and two small reads on any file system; a store whose only
V2 record lies deeper in its log, and whose files say nothing, reads as 4.x.
"""
from __future__ import annotations

from dataclasses import dataclass

import pyarrow.fs as pafs

from . import layout as L
from . import rolled
from .stores import part_folder


@dataclass(frozen=True)
class StoreFeatures:
    timer_log: bool  # timerlog/ holds rolled files
    timer_wheel: bool
    timer_check: bool
    timer_metrics: bool
    batch_consume_queue: bool  # batchconsumequeue/ exists
    lmq_queues: tuple  # the %LMQ% consume queues' topic folders
    lmq_consumer_offsets: bool
    compaction: bool  # compaction/ exists
    v2_records: bool = False  # a sampled record has magic V2
    crc_property: bool = False  # a sampled record ends in __CRC32#

    @property
    def timer_store(self) -> bool:
        return self.timer_log or self.timer_wheel or self.timer_check or self.timer_metrics

    @property
    def is_5x(self) -> bool:
        return self.timer_store or self.batch_consume_queue or bool(self.lmq_queues) or self.lmq_consumer_offsets \
            or self.compaction or self.v2_records or self.crc_property

    @property
    def generation(self) -> str:
        return "5.x" if self.is_5x else "4.x"


def store_features(root) -> StoreFeatures:
    """The 5.x structures present under a store root (a path or a :class:`store_format.fs.Location`)."""
    loc = rolled.location(root)
    names = {i.base_name: i.type for i in loc.list()}
    config = {i.base_name for i in loc.child("config").list()} if names.get("config") == pafs.FileType.Directory \
        else set()
    timer_log = names.get("timerlog") == pafs.FileType.Directory and bool(
        rolled.list_rolled_files(loc.child("timerlog")))
    lmq = ()
    if names.get("consumequeue") == pafs.FileType.Directory:
        lmq = tuple(sorted(i.base_name for i in loc.child("consumequeue").list()
                           if i.type == pafs.FileType.Directory and i.base_name.startswith(L.LMQ_PREFIX)))
    v2, crc = False, False
    records = part_folder(loc, "commitlog")  # the CommitLog's folder, whatever its container
    if records.is_dir():
        v2, crc = record_evidence(records)
    return StoreFeatures(
        timer_log=timer_log,
        timer_wheel=names.get("timerwheel") == pafs.FileType.File,
        timer_check="timercheck" in config,
        timer_metrics="timermetrics" in config or "timermetrics.bak" in config,
        batch_consume_queue=names.get("batchconsumequeue") == pafs.FileType.Directory,
        lmq_queues=lmq,
        lmq_consumer_offsets="lmqConsumerOffset.json" in config or "lmqConsumerOffset.json.bak" in config,
        compaction=names.get("compaction") == pafs.FileType.Directory,
        v2_records=v2, crc_property=crc,
    )


SAMPLE = 64 << 10  # bytes read from the start of a segment for its first records


def record_evidence(commitlog) -> tuple[bool, bool]:
    """(a V2 record, a ``__CRC32#`` property) among the first records of the first and of the newest segment of
    ``commitlog`` (a folder: path or Location): :data:`SAMPLE` bytes of each, framed without CRC checks (a record
    damaged there is no evidence either way).  A segment that cannot be read gives none."""
    from .commitlog import KIND_MESSAGE, walk_start
    from .fs import UnreadableError
    from .propcrc import carries_crc

    try:
        segments = rolled.list_rolled_files(commitlog)
    except UnreadableError:
        return False, False
    v2 = crc = False
    for seg in {s.name: s for s in segments[:1] + segments[-1:]}.values():
        try:
            buf = rolled.read_range(seg.loc, 0, SAMPLE)
        except (UnreadableError, OSError):
            continue
        items = walk_start(seg.loc, buf, seg.name, seg.base_offset)
        msg = items.kinds == KIND_MESSAGE
        pos, sizes = items.positions[msg], items.sizes[msg]
        raw = memoryview(buf)
        v2 = v2 or any(int.from_bytes(raw[p + L.MAGIC_OFFSET:p + L.MAGIC_OFFSET + 4], "big", signed=True) == L.MAGIC_V2
                       for p in pos.tolist())
        crc = crc or bool(carries_crc(buf, pos, sizes).any())
    return v2, crc


__all__ = ["SAMPLE", "StoreFeatures", "record_evidence", "store_features"]
