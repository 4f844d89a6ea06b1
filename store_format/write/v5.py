"""The store side of a RocketMQ 5.3.3 broker, added to :class:`~store_format.write.writer.StoreWriter` when its
configuration asks for any 5.x behaviour (``enabledAppendPropCRC``, ``timerWheelEnable``, ``enableLmq``,
``enableMultiDispatch``, or a topic registered with ``queue.type=BatchCQ``).  Without them the writer is the
4.9.x broker it always was, byte for byte.

What each part reproduces (5.3.3 classes; layouts from :mod:`store_format.layout`):

  __CRC32#      ``MessageExtEncoder`` reserves 20 bytes (and a 0x02 before them if the string lacks one); a
                client's own ``__CRC32#`` is deleted first, as text (``MessageUtils.deleteProperty``: the rest of
                the string byte for byte); ``DefaultAppendMessageCallback.doAppend`` patches
                QUEUEOFFSET, PHYSICALOFFSET, STORETIMESTAMP, then writes ``createCrc32`` of [0, size - 20)
  LMQ           ``LmqDispatch.wrapLmqDispatch`` at append: INNER_MULTI_QUEUE_OFFSET from the LMQ counters ("" for a
                non-LMQ name), WAIT removed and put back, the string rebuilt from the map (so WAIT stays);
                ``updateLmqOffsets`` after the write (+1 per LMQ name); dispatch: ``ConsumeQueue.
                multiDispatchLmqQueue`` as :func:`store_format.lmq.predict_dispatch` describes it, including the
                count-mismatch skip and the NumberFormatException that stops every later dispatch (the writer
                then leaves ``abort`` at close, as the broker does when its reput has not finished); offsets:
                ``LmqConsumerOffsetManager`` (an %LMQ% group's one offset per topic@group in lmqOffsetTable, in
                ``config/lmqConsumerOffset.json``, which replaces consumerOffset.json)
  BatchCQ       ``BatchConsumeQueue.assignQueueOffset``: a per-queue counter advanced by the record's message
                count (INNER_NUM, else 1), INNER_BASE added to an inner-batch record's string; dispatch writes a
                46-byte unit (``putBatchMessagePositionInfo``) instead of a consume-queue unit
  timer store   ``TimerMessageStore.doEnqueue`` for every record dispatched to ``rmq_sys_wheel_timer``/0 (52-byte
                unit, ``TimerLog.append``'s blank and roll of 100 MiB files, the wheel slot rewritten), the
                metrics (``TimerMetrics.addAndGet``), ``dequeue``'s chain walk for the broker flows
                (:mod:`store_format.write.broker5` fires, rolls and deletes), ``config/timercheck`` and
                ``config/timermetrics`` at close; the ``timerwheel`` is the fixed-size sparse file
                (``TimerWheel``) from the start

The timer store's times are the writer's: a unit's write time is its record's store time floored to the
precision (the enqueue service runs right after the put), the checkpoint's read time is what the flows
fired up to.  The checkpoint's data version (counter, timestamp) depends on the broker's flush ticks; it is
modelled as one version per second of timer activity, which is what the 5.3.3 fixture shows but not a fact a
test compares.
"""
from __future__ import annotations

import dataclasses
import struct
from dataclasses import dataclass

from .. import layout as L
from .. import lmq
from .. import propcrc
from ..batchcq import message_count
from ..commitlog import segment_name
from ..errors import ErrorKind, WriterError
from ..config import LMQ_CONSUMER_OFFSET_FILE, dumps_fastjson
from ..javahash import JavaHashMap, java_hash
from ..message import Message
from ..properties import delete_property, format_properties, parse_properties

_TIMER_UNIT = struct.Struct(L.TIMER_LOG_UNIT.struct)
_TIMER_BLANK = struct.Struct(L.TIMER_LOG_BLANK.struct)
_SLOT = struct.Struct(L.TIMER_WHEEL_SLOT.struct)
_BCQ_UNIT = struct.Struct(L.BATCH_CQ_UNIT.struct)


def property_map(raw: str, capacity: int | None = None) -> JavaHashMap:
    """A stored property string back as the Java map it was serialized from: its keys put in string order (a
    HashMap rebuilt that way iterates as the original did), ``capacity`` as the map was created
    (``string2messageProperties`` makes ``new HashMap<>(128)``; a client's ``Message`` the default 16)."""
    m = JavaHashMap(initial_capacity=capacity)
    for k, v in parse_properties(raw).items():
        m.put(k, v)
    return m


def to_string(props: JavaHashMap, trailing: bool = True) -> str:
    """``messageProperties2String`` (5.2.0+ ends with 0x02)."""
    return format_properties(props.to_dict(), trailing_separator=trailing)


# ------------------------------------------------------------------------------------------- timer store


@dataclass
class TimerRequest:
    """A unit read back by the dequeue (``TimerRequest``)."""

    offset: int  # the unit's timer-log offset
    magic: int
    physical_offset: int
    store_size: int
    enqueue_time: int  # the unit's write time
    delayed_time: int  # its slot time

    @property
    def roll(self) -> bool:
        return bool(self.magic & L.TIMER_MAGIC_ROLL)

    @property
    def delete(self) -> bool:
        return bool(self.magic & L.TIMER_MAGIC_DELETE) and not self.roll


class TimerStoreWriter:
    """``timerlog/``, ``timerwheel``, ``config/timercheck`` and ``config/timermetrics`` of one store."""

    def __init__(self, writer):
        cfg = writer.config
        self.writer = writer
        self.precision = cfg.timerPrecisionMs
        self.slots_total = L.DEFAULT_TIMER_SLOTS_TOTAL
        self.roll_window = cfg.timerRollWindowSlot
        self.file_size = cfg.mappedFileSizeTimerLog
        self.log_dir = writer._path("timerlog")
        self.files: dict = {}  # base offset -> PooledFile (store_format.write.openfiles)
        self.cur_base = -1
        self.cur_pos = 0
        self.units: dict[int, tuple] = {}  # offset -> unpacked unit (the dequeue's reads)
        self.slots: dict[int, list] = {}  # slot index -> [time field, first, last, num, magic]
        self.dirty: set[int] = set()
        self.pending: set[int] = set()  # slot times with units not yet dequeued
        self.metrics = JavaHashMap(initial_capacity=1024, concurrent=True)  # topic -> [count, timeStamp]
        self.metrics_version = [0, 0]  # counter, timestamp (DataVersion)
        self.write_time = 0  # currWriteTimeMs
        self.read_time = 0  # currReadTimeMs / commitReadTimeMs
        self.queue_offset = 0  # commitQueueOffset: the next rmq_sys_wheel_timer/0 offset to enqueue
        self.started: int | None = None
        self.last_activity = 0
        self.bypass: list[tuple] = []  # (record physical offset, size): due already at enqueue, never in the wheel
        self.enqueue_stopped = False  # :meth:`stop_enqueue`: later timer records wait for the broker's own enqueue
        self._new_file = writer.mapped_file  # through the writer's bounded set of open files
        self.wheel_path = writer._path("timerwheel")
        self.wheel = self._new_file(self.wheel_path, L.timer_wheel_file_size(self.slots_total), create=True)

    # ---- the clock ------------------------------------------------------------------------------------
    def floor(self, ms: int) -> int:
        return ms // self.precision * self.precision

    def start(self, now: int) -> None:
        if self.started is None:
            self.started = now
            self.metrics_version[1] = now
            self.write_time = max(self.write_time, self.floor(now))
            self.read_time = self.read_time or self.floor(now)

    def move_write_time(self, now: int) -> None:
        """``maybeMoveWriteTime``."""
        self.start(now)
        self.write_time = max(self.write_time, self.floor(now))

    # ---- the log --------------------------------------------------------------------------------------
    def _file(self, base: int):
        m = self.files.get(base)
        if m is None:
            self.log_dir.mkdir(exist_ok=True)
            if self.cur_base in self.files:
                self.files[self.cur_base].release()
            m = self.files[base] = self._new_file(self.log_dir / segment_name(base), self.file_size, create=True)
        return m

    def append(self, unit: bytes) -> int:
        """``TimerLog.append``: the unit's timer-log offset; a 16-byte blank ends a file one more unit and a
        blank would not fit."""
        if self.cur_base < 0:
            self.cur_base, self.cur_pos = 0, 0
            self._file(0)
        if len(unit) + L.TIMER_LOG_MIN_BLANK_LEN > self.file_size - self.cur_pos:
            left = self.file_size - self.cur_pos
            self.files[self.cur_base].write(self.cur_pos, _TIMER_BLANK.pack(left, 0, L.BLANK_MAGIC))
            self.cur_base += self.file_size
            self.cur_pos = 0
            self._file(self.cur_base)
        at = self.cur_base + self.cur_pos
        self.files[self.cur_base].write(self.cur_pos, unit)
        self.cur_pos += len(unit)
        return at

    @property
    def end_offset(self) -> int:
        return 0 if self.cur_base < 0 else self.cur_base + self.cur_pos

    # ---- the wheel ------------------------------------------------------------------------------------
    def slot_index(self, time_ms: int) -> int:
        return time_ms // self.precision % (self.slots_total * 2)

    def get_slot(self, time_ms: int) -> tuple[int, int, int, int]:
        """``TimerWheel.getSlot``: (firstPos, lastPos, num, magic), (-1, -1, 0, 0) for another time's slot."""
        s = self.slots.get(self.slot_index(time_ms))
        if s is None or s[0] * self.precision != self.floor(time_ms):
            return -1, -1, 0, 0
        return s[1], s[2], s[3], s[4]

    def put_slot(self, time_ms: int, first: int, last: int, num: int, magic: int) -> None:
        idx = self.slot_index(time_ms)
        self.slots[idx] = [time_ms // self.precision, first, last, num, magic]
        self.dirty.add(idx)

    def _flush_wheel(self) -> None:
        for idx in sorted(self.dirty):
            self.wheel.write(idx * _SLOT.size, _SLOT.pack(*self.slots[idx]))
        self.dirty.clear()

    # ---- metrics --------------------------------------------------------------------------------------
    def add_metric(self, msg: Message, value: int, now: int) -> None:
        """``TimerMessageStore.addMetric``: records without REAL_TOPIC, or never enqueued, do not count."""
        topic = msg.properties.get(L.PROPERTY_REAL_TOPIC)
        if topic is None:
            return
        enq = msg.properties.get(L.PROPERTY_TIMER_ENQUEUE_MS)
        if enq is not None and lmq.parse_java_long(enq) == L.TIMER_ENQUEUE_NEVER:
            return
        pair = self.metrics.get(topic)
        if pair is None:
            pair = [0, now]
            self.metrics.put(topic, pair)
        self.metrics_version[0] += 1
        self.metrics_version[1] = now
        pair[1] = now
        pair[0] += value

    # ---- enqueue / dequeue ----------------------------------------------------------------------------
    def enqueue(self, msg: Message, now: int) -> int | None:
        """The enqueue service for one record of ``rmq_sys_wheel_timer``/0 (in queue order): ``doEnqueue``'s
        unit and slot, or (when already due) a bypass the flows re-put with TIMER_ENQUEUE_MS = Long.MAX_VALUE.
        Returns the unit's offset (None for a bypass, or a record without a readable TIMER_OUT_MS, which the
        broker's enqueue would throw on)."""
        self.move_write_time(now)
        self.queue_offset = max(self.queue_offset, msg.queue_offset + 1)
        self.last_activity = max(self.last_activity, now)
        delayed = lmq.parse_java_long(msg.properties.get(L.PROPERTY_TIMER_OUT_MS) or "")
        if delayed is None:
            return None
        if delayed < self.write_time:
            self.bypass.append((msg.physical_offset, msg.store_size))
            return None
        write_time = self.write_time
        magic = L.TIMER_MAGIC_DEFAULT
        window = self.roll_window * self.precision
        if delayed - write_time >= window:
            magic |= L.TIMER_MAGIC_ROLL
            if delayed - write_time - window < self.roll_window // 3 * self.precision:
                delayed = write_time + self.roll_window // 2 * self.precision
            else:
                delayed = write_time + window
        is_delete = msg.properties.get(L.PROPERTY_TIMER_DEL_UNIQKEY) is not None
        if is_delete:
            magic |= L.TIMER_MAGIC_DELETE
        real = msg.properties.get(L.PROPERTY_REAL_TOPIC)
        first, last, num, smagic = self.get_slot(delayed)
        values = (L.TIMER_LOG_UNIT.width, last, magic, write_time, delayed - write_time, msg.physical_offset,
                  msg.store_size, 0 if real is None else java_hash(real), 0)
        at = self.append(_TIMER_UNIT.pack(*values))
        self.units[at] = values
        self.put_slot(delayed, at if first == -1 else first, at, num - 1 if is_delete else num + 1, smagic)
        self.pending.add(self.floor(delayed))
        self.add_metric(msg, -1 if is_delete else 1, now)
        return at

    def stop_enqueue(self) -> None:
        """The enqueue service stops here (a broker whose enqueue had not reached the records that follow): later
        records of ``rmq_sys_wheel_timer`` get no unit, and the checkpoint's queue offset stays before them, so the
        broker that opens the store enqueues them itself."""
        self.enqueue_stopped = True

    def resume_from(self, read_time: int, metrics: dict | None = None) -> None:
        """Carry a source timer's progress into this one (a replay of a store whose timer had read its wheel up to
        ``read_time``, its timercheck's lastReadTimeMs): the slots before it were dequeued there -- their timers
        fired, rolled or were recalled, as the replayed re-puts show -- so the checkpoint reads on from it and
        only the later slots stay pending, as they were.  ``metrics`` (REAL_TOPIC -> (count, timeStamp), the
        source's timermetrics) replace the counts of this writer's enqueues, which include those fires."""
        t = self.floor(read_time)
        self.start(t)
        self.read_time = max(self.read_time, t)
        self.write_time = max(self.write_time, t)
        self.pending = {p for p in self.pending if p >= self.read_time}
        self.last_activity = max(self.last_activity, t)
        for topic, (count, ts) in (metrics or {}).items():
            self.metrics.put(topic, [int(count), int(ts or 0)])

    def next_due(self, now: int) -> int | None:
        """The earliest slot time with units not yet dequeued that the dequeue reaches by ``now``
        (``currReadTimeMs < currWriteTimeMs`` with the write time at ``now``), else None."""
        due = [t for t in self.pending if t < self.floor(now)]
        return min(due) if due else None

    def take_slot(self, t: int) -> list[TimerRequest]:
        """``dequeue`` of the slot for ``t``: its chain walked from lastPos, delete units first (newest first),
        then the others oldest first, as ``dequeue`` hands them out.  The wheel's clock moves to just after ``t``
        (a broker that keeps up fires a slot one precision after its time)."""
        self.pending.discard(t)
        self.move_write_time(t + self.precision)
        self.read_time = max(self.read_time, t + self.precision)
        _first, last, _num, _magic = self.get_slot(t)
        chain, pos = [], last
        while pos != -1 and pos in self.units and len(chain) <= len(self.units):  # newest first
            v = self.units[pos]
            chain.append(TimerRequest(pos, v[2], v[5], v[6], v[3], v[3] + v[4]))
            pos = v[1]
        deletes = [r for r in chain if r.delete]  # deleteMsgStack.add: newest first
        normals = [r for r in reversed(chain) if not r.delete]  # normalMsgStack.addFirst: oldest first
        self.last_activity = max(self.last_activity, t + self.precision)
        return deletes + normals

    def catch_up(self, now: int) -> None:
        """Nothing left due by ``now``: the read and write times move to it."""
        self.move_write_time(now)
        self.read_time = max(self.read_time, self.write_time)

    # ---- files at close -------------------------------------------------------------------------------
    def checkpoint_bytes(self, now: int) -> bytes:
        version_ts = self.last_activity or now
        counter = 0 if self.started is None else max(0, (version_ts - self.started) // 1000)
        vals = (self.read_time, self.end_offset, self.queue_offset, self.queue_offset, 0,
                version_ts if counter else 0, counter)
        raw = struct.pack(L.TIMER_CHECKPOINT.struct, *vals)
        return raw + bytes(L.TIMER_CHECKPOINT.size - len(raw))

    def metrics_text(self) -> str:
        """``TimerMetrics.write0``: fastjson BrowserCompatible, compact, bean properties in name order."""
        counter, ts = self.metrics_version
        timing = ",".join(f"{_fastjson_string(k)}:{{\"count\":{v[0]},\"timeStamp\":{v[1]}}}"
                          for k, v in self.metrics.items())
        return (f'{{"dataVersion":{{"counter":{counter},"stateVersion":0,"timestamp":{ts}}},'
                f'"timingCount":{{{timing}}}}}')

    def close(self, now: int) -> None:
        self.start(now)
        self._flush_wheel()
        config = self.writer._path("config")
        config.mkdir(exist_ok=True)
        self.writer._write_file("config/timercheck", self.checkpoint_bytes(now))
        text = self.metrics_text()
        path = config / "timermetrics"
        if path.exists() or self.units:  # persisted every flush: the previous content becomes the .bak
            (config / "timermetrics.bak").write_text(path.read_text(encoding="utf-8") if path.exists() else text,
                                                     encoding="utf-8")
        path.write_text(text, encoding="utf-8")
        for m in self.files.values():
            m.close()
        self.wheel.close()


def _fastjson_string(s: str) -> str:
    """A JSON string as fastjson's BrowserCompatible writes it: non-ASCII as \\uXXXX (upper-case hex)."""
    out = ['"']
    for ch in s:
        o = ord(ch)
        if ch in '"\\':
            out.append("\\" + ch)
        elif o < 0x20 or o > 0x7E:
            for unit in (ch.encode("utf-16-be"),):
                for i in range(0, len(unit), 2):
                    out.append("\\u%04X" % int.from_bytes(unit[i:i + 2], "big"))
        else:
            out.append(ch)
    out.append('"')
    return "".join(out)


# ------------------------------------------------------------------------------------------- batch consume queue


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


# ------------------------------------------------------------------------------------------- the hooks


class V5Store:
    """The 5.x behaviour of one :class:`StoreWriter`: the writer calls :meth:`prepare` before it sizes a
    record, :meth:`take_queue_offset` for a BatchCQ topic, :meth:`seal` on the encoded bytes, :meth:`dispatch`
    instead of its own dispatch, and :meth:`close` at shutdown."""

    def __init__(self, writer):
        self.writer = writer
        cfg = writer.config
        self.crc = cfg.enabledAppendPropCRC
        self.enable_lmq = cfg.enableLmq
        self.multi_dispatch = cfg.enableMultiDispatch
        self.lmq_offsets = lmq.LmqOffsets(enable_lmq=cfg.enableLmq)
        self.batch_offsets: dict[tuple[str, int], int] = {}
        self.bcqs: dict[tuple[str, int], BatchConsumeQueueWriter] = {}
        self.timer = TimerStoreWriter(writer) if cfg.timerWheelEnable else None
        self.lmq_consumer_offsets: dict[str, int] = {}  # "topic@group" -> offset, for %LMQ% groups (enableLmq)
        self.stall: lmq.LmqStall | None = None  # set when a dispatch throws NumberFormatException
        self.undispatched = 0  # records written after the stall
        self._pending_lmq: str | None = None
        if writer._reopened:
            self._reopen_batch_queues()

    def _reopen_batch_queues(self) -> None:
        """A reopened store's ``batchconsumequeue/``: each queue continues after its last unit, and its counter
        (``batchTopicQueueTable``) at the queue's max offset; the commitlog walk that follows raises it for records
        past the units' reach (:meth:`replayed`)."""
        from ..batchcq import discover_batch_queues

        for (topic, qid), files in discover_batch_queues(self.writer.root).items():
            if not self.batch_topic(topic):
                continue  # not a BatchCQ topic by config/topics.json: the broker does not load it either
            bcq = self.bcqs[(topic, qid)] = BatchConsumeQueueWriter(self.writer, topic, qid)
            bcq.load(files)
            self.batch_offsets[(topic, qid)] = bcq.next_offset

    def batch_queue_reach(self) -> list[int]:
        """Where each reopened batch queue's last record ends (the reput resumes at the largest of all queues')."""
        return [b.reach for b in self.bcqs.values() if b.reach >= 0]

    def replayed(self, msg: Message) -> None:
        """A record of a BatchCQ topic found in a reopened commitlog: the counter moves past its messages."""
        key = (msg.topic, msg.queue_id)
        self.batch_offsets[key] = max(self.batch_offsets.get(key, 0), msg.queue_offset + message_count(msg.properties))

    # ---- which topics ---------------------------------------------------------------------------------
    def batch_topic(self, topic: str) -> bool:
        tc = self.writer.topics.get(topic)
        return tc is not None and (tc.attributes or {}).get(L.TOPIC_ATTRIBUTE_QUEUE_TYPE) == L.QUEUE_TYPE_BATCH

    def _needs_lmq(self, msg: Message) -> bool:
        """``isMultiDispatchMsg``: enableLmq and ``needDispatchLMQ`` (INNER_MULTI_DISPATCH not blank, the topic
        allows it)."""
        names = msg.properties.get(L.PROPERTY_INNER_MULTI_DISPATCH)
        return self.enable_lmq and names is not None and names.strip() != "" and \
            lmq.topic_allows_multi_dispatch(msg.topic)

    # ---- before sizing --------------------------------------------------------------------------------
    def prepare(self, record: Message) -> Message:
        """The record as the 5.x put path turns it before it is encoded: INNER_BASE (an inner batch on a
        BatchCQ topic), INNER_MULTI_QUEUE_OFFSET (LMQ), the CRC reservation.  Counters are only read here."""
        raw = record.properties_raw
        changed = False
        if self.crc:  # asyncPutMessage deletes a client's own first, as text (MessageUtils.deleteProperty)
            raw = delete_property(raw, L.PROPERTY_CRC32)
            changed = raw != record.properties_raw
        trailing = raw.endswith(L.PROPERTY_SEPARATOR) or not raw
        if record.sys_flag & L.INNER_BATCH_FLAG and self.batch_topic(record.topic):
            m = property_map(raw)
            m.put(L.PROPERTY_INNER_BASE, str(self.batch_offsets.get((record.topic, record.queue_id), 0)))
            raw, changed = to_string(m, trailing), True
        if self._needs_lmq(record):
            m = property_map(raw)
            m.put(L.PROPERTY_INNER_MULTI_QUEUE_OFFSET,
                  self.lmq_offsets.assign(m.get(L.PROPERTY_INNER_MULTI_DISPATCH)))
            wait = m.remove(L.PROPERTY_WAIT_STORE_MSG_OK)  # removeWaitStorePropertyString puts it back
            if wait is not None:
                m.put(L.PROPERTY_WAIT_STORE_MSG_OK, wait)
            raw, changed = to_string(m, trailing), True
        if self.crc:
            raw, changed = propcrc.with_crc_reservation(raw), True
        return dataclasses.replace(record, properties_raw=raw, properties=None) if changed else record

    def take_queue_offset(self, record: Message) -> int:
        """``BatchConsumeQueue.assignQueueOffset`` + ``increaseQueueOffset``: the queue offset of a record of a
        BatchCQ topic; the counter moves by its message count."""
        key = (record.topic, record.queue_id)
        offset = self.batch_offsets.get(key, 0)
        self.batch_offsets[key] = offset + message_count(record.properties)
        return offset

    def seal(self, data: bytes) -> bytes:
        """``doAppend``'s CRC: over the record as stored (offsets and store time patched), into its last 20."""
        if not self.crc:
            return data
        rec = bytearray(data)
        propcrc.patch_crc(rec)
        return bytes(rec)

    # ---- dispatch -------------------------------------------------------------------------------------
    def dispatch(self, msg: Message) -> None:
        """The reput's dispatchers for one stored record: its own (batch) consume-queue unit, the LMQ units, the
        timer enqueue, the index; nothing once a dispatch has stalled."""
        w = self.writer
        if self._needs_lmq(msg):
            self.lmq_offsets.advance(msg.properties.get(L.PROPERTY_INNER_MULTI_DISPATCH))  # updateLmqOffsets
        if self.stall is not None:
            self.undispatched += 1
            return
        if msg.dispatchable:
            tags_code = msg.dispatch_tags_code(w.delay_levels)
            if self.batch_topic(msg.topic):
                base, batch = msg.queue_offset, 1
                if L.PROPERTY_INNER_NUM in msg.properties and L.PROPERTY_INNER_BASE in msg.properties:
                    base = int(msg.properties[L.PROPERTY_INNER_BASE])
                    batch = int(msg.properties[L.PROPERTY_INNER_NUM])
                key = (msg.topic, msg.queue_id)
                bcq = self.bcqs.get(key)
                if bcq is None:
                    bcq = self.bcqs[key] = BatchConsumeQueueWriter(w, msg.topic, msg.queue_id)
                if bcq.put(msg.physical_offset, msg.store_size, tags_code, msg.store_timestamp, base, batch):
                    w.flush.logics = msg.store_timestamp
            else:
                cq = w.consume_queue(msg.topic, msg.queue_id)
                if cq.put(msg.physical_offset, msg.store_size, tags_code, msg.queue_offset):
                    w.flush.logics = msg.store_timestamp
                    if self.multi_dispatch and not self._multi_dispatch(msg, tags_code):
                        return  # NumberFormatException: no index for this record, nothing after it
                    if self.timer is not None and msg.topic == L.TIMER_TOPIC and msg.queue_id == L.TIMER_QUEUE_ID \
                            and not self.timer.enqueue_stopped:
                        self.timer.enqueue(msg, msg.store_timestamp)
                w._track_schedule(msg)
        if w.config.messageIndexEnable:
            w._build_index(msg)

    def _multi_dispatch(self, msg: Message, tags_code: int) -> bool:
        """``ConsumeQueue.multiDispatchLmqQueue``; False when it throws (the dispatch stalls here)."""
        if not lmq.topic_allows_multi_dispatch(msg.topic):
            return True
        lists = lmq.dispatch_lists(msg.properties)
        if lists is None or not lists.counts_match:
            return True
        for name, text in zip(lists.names, lists.offsets):
            if lmq.PATH_SEPARATOR in name:
                continue
            offset = lmq.parse_java_long(text)
            if offset is None:
                self.stall = lmq.LmqStall(msg.physical_offset, name, text, "NumberFormatException")
                return False
            qid = L.LMQ_QUEUE_ID if self.enable_lmq and lmq.is_lmq(name) else msg.queue_id
            if not name.strip() or not set(name) <= L.TOPIC_VALID_CHARS or len(name) > L.TOPIC_MAX_LENGTH:
                continue  # a name no folder can hold (TopicValidator) is never written by this writer
            self.writer.consume_queue(name, qid).put(msg.physical_offset, msg.store_size, tags_code, offset)
        return True

    # ---- consumer offsets (LmqConsumerOffsetManager) --------------------------------------------------
    def commit_lmq_offset(self, group: str, topic: str, offset: int) -> bool:
        """``LmqConsumerOffsetManager.commitOffset``: with enableLmq an %LMQ% group's offset is one per
        topic@group (the queue id is not kept); False for any other group (the ordinary table)."""
        if not (self.enable_lmq and lmq.is_lmq(group)):
            return False
        self.lmq_consumer_offsets[f"{topic}@{group}"] = int(offset)
        return True

    def config_texts(self, texts: dict, offsets: dict) -> None:
        """With enableLmq the broker's offset manager is ``LmqConsumerOffsetManager``, which persists to
        ``lmqConsumerOffset.json`` (its inherited offsetTable and the lmqOffsetTable; fastjson orders the keys) and
        never writes consumerOffset.json."""
        if not self.enable_lmq:
            return
        del texts["consumerOffset.json"]
        texts[LMQ_CONSUMER_OFFSET_FILE] = dumps_fastjson({"lmqOffsetTable": dict(self.lmq_consumer_offsets), **offsets})

    # ---- shutdown -------------------------------------------------------------------------------------
    def close(self, now: int, clean: bool) -> bool:
        """Close the 5.x files; False when the broker would keep ``abort`` (its reput never finished)."""
        for b in self.bcqs.values():
            b.close()
        if self.timer is not None:
            self.timer.close(now)
        return self.stall is None
