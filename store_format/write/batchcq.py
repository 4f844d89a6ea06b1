"""The batch consume queue (a topic whose queue.type attribute is BatchCQ): ``batchconsumequeue/<topic>/<queueId>/``
of 46-byte units, as RocketMQ 5.3.3's ``BatchConsumeQueue`` writes them, with its own queue offsets.

  put path    ``BatchConsumeQueue.assignQueueOffset``: a per-queue counter advanced by the record's message count
              (INNER_NUM, else 1), INNER_BASE added to an inner-batch record's string
  dispatch    a 46-byte unit (``putBatchMessagePositionInfo``) instead of a consume-queue unit
"""
from __future__ import annotations

import struct

from .. import layout as L
from ..batchcq import message_count
from ..commitlog import segment_name
from ..errors import ErrorKind, WriterError
from ..message import Message
from .dispatch import Dispatcher, DispatchRequest
from .javaprops import property_map, to_string

_BCQ_UNIT = struct.Struct(L.BATCH_CQ_UNIT.struct)


class BatchConsumeQueueWriter:
    """``BatchConsumeQueue.putBatchMessagePositionInfo`` for one topic-queue."""

    def __init__(self, writer, topic: str, queue_id: int):
        self._new_file = writer.mapped_file  # through the writer's bounded set of open files
        self.dir = writer._path("batchconsumequeue", topic, str(queue_id))
        self.file_size = writer.config.mapperFileSizeBatchConsumeQueue
        self.files: dict = {}
        self.base = -1
        self.wrote = 0
        self.max_phys = -1
        self.reach = -1  # where the last unit's record ends in the commitlog
        self.next_offset = 0  # the last unit's msgBaseOffset + batchSize: the queue's max offset

    def load(self, files: list) -> None:
        """Reopen (``BatchConsumeQueue.recover``): write after the last valid unit; files of another size than
        ``mapperFileSizeBatchConsumeQueue`` are refused, as the broker's load refuses them."""
        from ..batchcq import read_batch_queue

        for f in files:
            if f.length != self.file_size:
                raise WriterError(ErrorKind.BAD_GEOMETRY, f"batch consume queue file is {f.length} bytes, "
                                  f"mapperFileSizeBatchConsumeQueue is {self.file_size}", file=str(f.location))
        if not files:
            return
        self.base, self.wrote = files[0].base_offset, 0  # no valid unit: the first file is written again
        for u in read_batch_queue(files, stop_at_invalid=True):
            self.base = u.unit_byte_offset - u.unit_byte_offset % self.file_size
            self.wrote = u.unit_byte_offset - self.base + _BCQ_UNIT.size
            self.max_phys, self.reach = u.physical_offset, u.physical_offset + u.size
            self.next_offset = u.msg_base_offset + u.batch_size
        for f in files:
            if f.base_offset <= self.base:
                self.files[f.base_offset] = self._new_file(self.dir / f.name, self.file_size, create=False)

    def put(self, phys: int, size: int, tags: int, store_ts: int, base_offset: int, batch_size: int) -> bool:
        if phys <= self.max_phys:
            return False  # "build batch consume queue repeatedly"
        if self.base < 0 or self.wrote + _BCQ_UNIT.size > self.file_size:
            self.dir.mkdir(parents=True, exist_ok=True)
            if self.base >= 0:
                self.files[self.base].release()
            self.base = 0 if self.base < 0 else self.base + self.file_size
            self.files[self.base] = self._new_file(self.dir / segment_name(self.base), self.file_size, create=True)
            self.wrote = 0
        self.files[self.base].write(self.wrote, _BCQ_UNIT.pack(phys, size, tags, store_ts, base_offset, batch_size,
                                                                L.BATCH_CQ_INVALID_POS, 0))
        self.wrote += _BCQ_UNIT.size
        self.max_phys, self.reach, self.next_offset = phys, phys + size, base_offset + batch_size
        return True

    def close(self):
        for m in self.files.values():
            m.close()



class BatchQueues(Dispatcher):
    """The BatchCQ topics' queues: their offsets on the put path, their units at dispatch."""

    def __init__(self, writer):
        self.writer = writer
        self.batch_offsets: dict[tuple[str, int], int] = {}
        self.bcqs: dict[tuple[str, int], BatchConsumeQueueWriter] = {}
        if writer._reopened:
            self._reopen()

    def owns(self, topic: str) -> bool:
        """A topic registered with ``queue.type=BatchCQ``."""
        tc = self.writer.topics.get(topic)
        return tc is not None and (tc.attributes or {}).get(L.TOPIC_ATTRIBUTE_QUEUE_TYPE) == L.QUEUE_TYPE_BATCH

    def _reopen(self) -> None:
        """A reopened store's ``batchconsumequeue/``: each queue continues after its last unit, and its counter
        (``batchTopicQueueTable``) at the queue's max offset; the commitlog walk that follows raises it for records
        past the units' reach (:meth:`replayed`)."""
        from ..batchcq import discover_batch_queues

        for (topic, qid), files in discover_batch_queues(self.writer.root).items():
            if not self.owns(topic):
                continue  # not a BatchCQ topic by config/topics.json: the broker does not load it either
            bcq = self.bcqs[(topic, qid)] = BatchConsumeQueueWriter(self.writer, topic, qid)
            bcq.load(files)
            self.batch_offsets[(topic, qid)] = bcq.next_offset

    def reach(self) -> list[int]:
        """Where each reopened batch queue's last record ends (the reput resumes at the largest of all queues')."""
        return [b.reach for b in self.bcqs.values() if b.reach >= 0]

    def replayed(self, msg: Message) -> None:
        """A record of a BatchCQ topic found in a reopened commitlog: the counter moves past its messages."""
        key = (msg.topic, msg.queue_id)
        self.batch_offsets[key] = max(self.batch_offsets.get(key, 0), msg.queue_offset + message_count(msg.properties))

    def prepare(self, record: Message, raw: str) -> str:
        """An inner batch on a BatchCQ topic gets INNER_BASE, its queue's next offset (the counter is only read)."""
        if not (record.sys_flag & L.INNER_BATCH_FLAG and self.owns(record.topic)):
            return raw
        trailing = raw.endswith(L.PROPERTY_SEPARATOR) or not raw
        m = property_map(raw)
        m.put(L.PROPERTY_INNER_BASE, str(self.batch_offsets.get((record.topic, record.queue_id), 0)))
        return to_string(m, trailing)

    def take_queue_offset(self, record: Message) -> int:
        """``BatchConsumeQueue.assignQueueOffset`` + ``increaseQueueOffset``: the queue offset of a record of a
        BatchCQ topic; the counter moves by its message count."""
        key = (record.topic, record.queue_id)
        offset = self.batch_offsets.get(key, 0)
        self.batch_offsets[key] = offset + message_count(record.properties)
        return offset

    def dispatch(self, request: DispatchRequest) -> bool:
        msg = request.msg
        if request.queues is not self or not msg.dispatchable:
            return True
        base, batch = msg.queue_offset, 1
        if L.PROPERTY_INNER_NUM in msg.properties and L.PROPERTY_INNER_BASE in msg.properties:
            base = int(msg.properties[L.PROPERTY_INNER_BASE])
            batch = int(msg.properties[L.PROPERTY_INNER_NUM])
        key = (msg.topic, msg.queue_id)
        bcq = self.bcqs.get(key)
        if bcq is None:
            bcq = self.bcqs[key] = BatchConsumeQueueWriter(self.writer, msg.topic, msg.queue_id)
        if bcq.put(msg.physical_offset, msg.store_size, request.tags_code, msg.store_timestamp, base, batch):
            self.writer.flush.logics = msg.store_timestamp
        return True

    def close(self, now: int, clean: bool) -> None:
        for b in self.bcqs.values():
            b.close()
