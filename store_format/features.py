"""What a broker store's files say about the RocketMQ that wrote it: 4.x, or 5.x and which 5.x structures it has.

No flag is needed to read a 5.x store: a default 5.x broker creates ``timerwheel``, ``config/timercheck`` and
``config/timermetrics`` at start (``timerWheelEnable`` is on by default) and its compaction service's
``compaction/position-checkpoint``; ``timerlog/`` appears with the first timer unit, ``batchconsumequeue/`` with
a ``queue.type=BatchCQ`` topic, ``consumequeue/%LMQ%...`` with LMQ dispatch, ``config/lmqConsumerOffset.json``
with ``enableLmq``.  Record-level evidence (V2 magic, ``__CRC32#``) is the framing's to see; this module looks at
file names only (one listing of a few folders), so it is cheap on any file system.
"""
from __future__ import annotations

from dataclasses import dataclass

import pyarrow.fs as pafs

from . import layout as L
from . import rolled


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

    @property
    def timer_store(self) -> bool:
        return self.timer_log or self.timer_wheel or self.timer_check or self.timer_metrics

    @property
    def is_5x(self) -> bool:
        return self.timer_store or self.batch_consume_queue or bool(self.lmq_queues) or self.lmq_consumer_offsets \
            or self.compaction

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
    return StoreFeatures(
        timer_log=timer_log,
        timer_wheel=names.get("timerwheel") == pafs.FileType.File,
        timer_check="timercheck" in config,
        timer_metrics="timermetrics" in config or "timermetrics.bak" in config,
        batch_consume_queue=names.get("batchconsumequeue") == pafs.FileType.Directory,
        lmq_queues=lmq,
        lmq_consumer_offsets="lmqConsumerOffset.json" in config or "lmqConsumerOffset.json.bak" in config,
        compaction=names.get("compaction") == pafs.FileType.Directory,
    )


__all__ = ["StoreFeatures", "store_features"]
