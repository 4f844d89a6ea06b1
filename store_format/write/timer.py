"""The timer store (timerWheelEnable): ``timerlog/``, ``timerwheel``, ``config/timercheck`` and
``config/timermetrics``, as RocketMQ 5.3.3's ``TimerMessageStore`` writes them, and its enqueue service, modelled as
the dispatcher that follows the consume queue of ``rmq_sys_wheel_timer``/0.

  enqueue       ``TimerMessageStore.doEnqueue`` for every record dispatched to ``rmq_sys_wheel_timer``/0 (52-byte
                unit, ``TimerLog.append``'s blank and roll of 100 MiB files, the wheel slot rewritten), the
                metrics (``TimerMetrics.addAndGet``)
  dequeue       the chain walk the broker flows fire, roll and delete with (:meth:`store_format.write.broker.Broker.
                run_timers`)
  at close      ``config/timercheck`` and ``config/timermetrics``; the ``timerwheel`` is the fixed-size sparse file
                (``TimerWheel``) from the start

The timer store's times are the writer's: a unit's write time is its record's store time floored to the
precision (the enqueue service runs right after the put), the checkpoint's read time is what the flows
fired up to.  The checkpoint's data version (counter, timestamp) depends on the broker's flush ticks; it is
modelled as one version per second of timer activity, which is what the 5.3.3 fixture shows but not a fact a
test compares.
"""
from __future__ import annotations

import struct
from dataclasses import dataclass

from .. import layout as L
from .. import lmq
from ..commitlog import segment_name
from ..javahash import JavaHashMap, java_hash
from ..message import Message
from .dispatch import Dispatcher, DispatchRequest, refuse_reopen

_TIMER_UNIT = struct.Struct(L.TIMER_LOG_UNIT.struct)
_TIMER_BLANK = struct.Struct(L.TIMER_LOG_BLANK.struct)
_SLOT = struct.Struct(L.TIMER_WHEEL_SLOT.struct)




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



class TimerEnqueue(Dispatcher):
    """The enqueue service: every record whose ConsumeQueue unit lands in ``rmq_sys_wheel_timer``/0 enqueued in
    the timer store (:meth:`TimerStoreWriter.enqueue`), until :meth:`TimerStoreWriter.stop_enqueue`."""

    def __init__(self, writer):
        refuse_reopen(writer, "the 5.x timer store")
        self.store = TimerStoreWriter(writer)

    def dispatch(self, request: DispatchRequest) -> bool:
        msg = request.msg
        if request.cq_written and msg.topic == L.TIMER_TOPIC and msg.queue_id == L.TIMER_QUEUE_ID \
                and not self.store.enqueue_stopped:
            self.store.enqueue(msg, msg.store_timestamp)
        return True

    def close(self, now: int, clean: bool) -> None:
        self.store.close(now)
