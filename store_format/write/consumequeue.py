"""The consume queue: ``ConsumeQueue`` (20-byte units, ``consumequeue/<topic>/<queueId>/``) and ``ConsumeQueueExt``
(``consumequeue_ext/``, with enableConsumeQueueExt), and ``CommitLogDispatcherBuildConsumeQueue`` for the topics
whose queue.type is the default SimpleCQ, with their queue offsets (``topicQueueTable``, the writer's
``queue_table``)."""
from __future__ import annotations

import struct
from .. import layout as L
from ..commitlog import segment_name
from ..consumequeue import read_queue
from ..errors import ErrorKind, WriterError
from ..message import Message
from .dispatch import Dispatcher, DispatchRequest
from .openfiles import PooledFile

_CQ_UNIT = struct.Struct(L.CQ_UNIT_STRUCT)
_PRE_BLANK_UNIT = _CQ_UNIT.pack(0, L.CQ_PRE_BLANK_SIZE, 0)


class ConsumeQueueExtWriter:
    """``ConsumeQueueExt.put`` for one topic-queue: a unit (size, tagsCode, store time, filter bitmap) appended to
    ``consumequeue_ext/<topic>/<queueId>/``, rolled like the commitlog; a file the next unit does not fit (with the
    4 bytes of its end mark to spare) is ended with a size of -1."""

    def __init__(self, writer, topic: str, queue_id: int):
        self.dir = writer._path("consumequeue_ext", topic, str(queue_id))
        self.file_size = writer.config.mappedFileSizeConsumeQueueExt
        self.open_files = writer.open_files
        self.files: dict[int, PooledFile] = {}
        self.last_base = -1
        self.wrote = 0

    def load(self) -> None:
        """Reopen: write after the last unit of the last file (ConsumeQueueExt.recover's walk by size)."""
        from ..consumequeue import ext_files, read_ext_units

        existing = ext_files(self.dir) if self.dir.is_dir() else []
        if not existing:
            return
        loc, base, length = existing[-1]
        if length != self.file_size:
            raise WriterError(ErrorKind.BAD_GEOMETRY, f"consume queue ext file is {length} bytes, "
                              f"mappedFileSizeConsumeQueueExt is {self.file_size}", file=str(loc))
        units = read_ext_units(self.dir)
        mine = units.offset >= base
        self.last_base = base
        self.wrote = int((units.offset[mine] + units.size[mine]).max()) - base if mine.any() else 0
        self.files[base] = self.open_files.file(loc.path, self.file_size, create=False)
        if self.wrote + 2 <= self.file_size and int.from_bytes(
                self.files[base].map[self.wrote:self.wrote + 2], "big", signed=True) == L.CQ_EXT_END_SIZE:
            self.wrote = self.file_size  # ended already

    def put(self, tags_code: int, store_timestamp: int, bitmap: bytes = b"") -> int:
        """Append a unit; the address the consume-queue unit holds for it (ConsumeQueueExt.decorate)."""
        from ..consumequeue import ext_address

        size = L.CQ_EXT_MIN_UNIT_SIZE + len(bitmap)
        if size > L.CQ_EXT_MAX_UNIT_SIZE:
            raise WriterError(ErrorKind.OUT_OF_RANGE, f"a ConsumeQueueExt unit of {size} bytes (the filter bitmap is "
                              f"{len(bitmap)})", file=str(self.dir))
        if self.last_base < 0 or size > self.file_size - self.wrote - L.CQ_EXT_END_BLANK:
            if self.last_base >= 0:  # fullFillToEnd: the end mark, then the next file
                self.files[self.last_base].write(self.wrote, L.CQ_EXT_END_SIZE.to_bytes(2, "big", signed=True))
                self.files[self.last_base].release()
            base = 0 if self.last_base < 0 else self.last_base + self.file_size
            self.dir.mkdir(parents=True, exist_ok=True)
            self.files[base] = self.open_files.file(self.dir / segment_name(base), self.file_size, create=True)
            self.last_base, self.wrote = base, 0
        unit = b"".join(L.CQ_EXT_UNIT.pack(name, value) for name, value in (
            ("size", size), ("tags_code", tags_code), ("msg_store_time", store_timestamp),
            ("bitmap_size", len(bitmap)))) + bitmap
        self.files[self.last_base].write(self.wrote, unit)
        address = ext_address(self.last_base + self.wrote)
        self.wrote += size
        return address

    def close(self):
        for m in self.files.values():
            m.close()


class ConsumeQueueWriter:
    """``ConsumeQueue.putMessagePositionInfo`` for one topic-queue (with ``enableConsumeQueueExt``,
    ``putMessagePositionInfoWrapper``: the tagsCode goes to the queue's ConsumeQueueExt and the unit holds its
    address)."""

    def __init__(self, writer, topic: str, queue_id: int):
        self.dir = writer._path("consumequeue", topic, str(queue_id))
        self.file_size = writer.config.mappedFileSizeConsumeQueue
        self.files: dict[int, PooledFile] = {}
        self.last_base = -1
        self.wrote = 0  # write position inside the last file
        self.max_physic_offset = -1
        self.writer = writer
        self.ext = ConsumeQueueExtWriter(writer, topic, queue_id) if writer.config.enableConsumeQueueExt else None

    def load(self):
        """Reopen existing files: position after the last valid unit (ConsumeQueue.recover)."""
        from ..consumequeue import list_queue_files
        existing = list_queue_files(self.dir, "", 0)
        for f in existing:
            if f.length != self.file_size:
                raise WriterError(ErrorKind.BAD_GEOMETRY, f"consume queue file is {f.length} bytes, "
                                  f"mappedFileSizeConsumeQueue is {self.file_size}", file=str(f.path))
            self.files[f.base_byte_offset] = self.writer.open_files.file(f.path, self.file_size, create=False)
        if existing:
            self.last_base = existing[-1].base_byte_offset
            self.wrote = 0
            for unit in read_queue(existing, stop_at_invalid=True):
                self.last_base = unit.queue_offset * L.CQ_STORE_UNIT_SIZE - \
                    (unit.queue_offset * L.CQ_STORE_UNIT_SIZE) % self.file_size
                self.wrote = unit.queue_offset * L.CQ_STORE_UNIT_SIZE - self.last_base + L.CQ_STORE_UNIT_SIZE
                if unit.kind == "entry":
                    self.max_physic_offset = unit.physical_offset + unit.size
        if self.ext is not None:
            self.ext.load()

    def _new_file(self, base: int) -> PooledFile:
        self.dir.mkdir(parents=True, exist_ok=True)
        if self.last_base >= 0:
            self.files[self.last_base].release()
        m = self.writer.open_files.file(self.dir / segment_name(base), self.file_size, create=True)
        self.files[base] = m
        self.last_base, self.wrote = base, 0
        return m

    def put(self, physical_offset: int, size: int, tags_code: int, queue_offset: int,
            store_timestamp: int | None = None) -> bool:
        if physical_offset + size <= self.max_physic_offset:
            return False  # "build consume queue repeatedly": already dispatched
        if self.ext is not None:  # the ext unit first, as putMessagePositionInfoWrapper does
            if store_timestamp is None:
                store_timestamp = self.writer.store_timestamp_at(physical_offset)
            tags_code = self.ext.put(tags_code, store_timestamp)
        expect = queue_offset * L.CQ_STORE_UNIT_SIZE
        if self.last_base < 0:  # first file of this queue
            m = self._new_file(expect - expect % self.file_size)
            if queue_offset != 0:
                until = expect % self.file_size
                m.write(0, _PRE_BLANK_UNIT * (until // L.CQ_STORE_UNIT_SIZE))
                self.wrote = until
        elif self.wrote >= self.file_size:
            m = self._new_file(self.last_base + self.file_size)
        else:
            m = self.files[self.last_base]
        if queue_offset != 0 and expect < self.last_base + self.wrote:
            return False  # this queue offset is already written
        # RocketMQ appends at its write position even when expect differs ("[BUG]logic queue order");
        # our queue offsets are always consecutive, so the two agree.
        m.write(self.wrote, _CQ_UNIT.pack(physical_offset, size, tags_code))
        self.wrote += L.CQ_STORE_UNIT_SIZE
        self.max_physic_offset = physical_offset + size
        return True

    def put_units(self, units, first_queue_offset: int) -> bool:
        """``put`` for packed units at consecutive queue offsets (the bulk path); the same bytes."""
        k = len(units) // L.CQ_STORE_UNIT_SIZE
        first_phys, first_size, _ = _CQ_UNIT.unpack_from(units, 0)
        fresh = first_phys + first_size > self.max_physic_offset and first_queue_offset != 0 and \
            self.last_base >= 0 and first_queue_offset * L.CQ_STORE_UNIT_SIZE == self.last_base + self.wrote
        if not fresh or self.ext is not None:  # first file, a gap, a repeat, or ext units to write: unit by unit
            done = False
            for i in range(k):
                p, z, t = _CQ_UNIT.unpack_from(units, i * L.CQ_STORE_UNIT_SIZE)
                done |= self.put(p, z, t, first_queue_offset + i)
            return done
        data = units
        while len(data):
            if self.wrote >= self.file_size:
                self._new_file(self.last_base + self.file_size)
            n = min(len(data), self.file_size - self.wrote)
            self.files[self.last_base].write(self.wrote, data[:n])
            self.wrote += n
            data = data[n:]
        last_phys, last_size, _ = _CQ_UNIT.unpack_from(units, (k - 1) * L.CQ_STORE_UNIT_SIZE)
        self.max_physic_offset = last_phys + last_size
        return True

    def close(self):
        for m in self.files.values():
            m.close()
        if self.ext is not None:
            self.ext.close()



class ConsumeQueues(Dispatcher):
    """``CommitLogDispatcherBuildConsumeQueue`` for the topics with plain consume queues: the record's unit at its
    queue offset, which the put path took from ``topicQueueTable`` (``ConsumeQueue.assignQueueOffset``)."""

    def __init__(self, writer):
        self.writer = writer
        self.cqs: dict[tuple[str, int], ConsumeQueueWriter] = {}

    def take_queue_offset(self, record: Message) -> int:
        key = (record.topic, record.queue_id)
        table = self.writer.queue_table
        offset = table.get(key, 0)
        table[key] = offset + 1
        return offset

    def replayed(self, msg: Message) -> None:
        """A record found in a reopened commitlog: its queue's counter moves past it."""
        key = (msg.topic, msg.queue_id)
        table = self.writer.queue_table
        table[key] = max(table.get(key, 0), msg.queue_offset + 1)

    def queue(self, topic: str, queue_id: int) -> ConsumeQueueWriter:
        """The consume queue of ``topic``/``queue_id`` (created on first use, as findConsumeQueue does)."""
        cq = self.cqs.get((topic, queue_id))
        if cq is None:
            cq = self.cqs[(topic, queue_id)] = ConsumeQueueWriter(self.writer, topic, queue_id)
        return cq

    def dispatch(self, request: DispatchRequest) -> bool:
        msg = request.msg
        if request.queues is self and msg.dispatchable:
            if self.queue(msg.topic, msg.queue_id).put(msg.physical_offset, msg.store_size, request.tags_code,
                                                       msg.queue_offset, msg.store_timestamp):
                self.writer.flush.logics = msg.store_timestamp
                request.cq_written = True
        return True

    def reopen(self, topic: str, queue_id: int) -> None:
        """A queue as it is on disk: written on after its last valid unit."""
        cq = ConsumeQueueWriter(self.writer, topic, queue_id)
        cq.load()
        self.cqs[(topic, queue_id)] = cq

    def reach(self) -> list[int]:
        """Where each reopened queue's last record ends (the reput resumes at the largest of all queues')."""
        return [cq.max_physic_offset for cq in self.cqs.values() if cq.max_physic_offset >= 0]

    def close_files(self) -> None:
        for cq in self.cqs.values():
            cq.close()
