"""Broker flows of RocketMQ 5.3.3 on top of :class:`~store_format.write.writer.StoreWriter` (its 5.x side,
:mod:`store_format.write.v5`): timer messages, recall, the timer's fire / roll / delete, LMQ sends, POP
receive / ack / revive, inner batches to ``queue.type=BatchCQ`` topics.

Property strings are ``messageProperties2String`` of the Java maps, as in :mod:`store_format.write.broker`, with
5.2.0+'s trailing 0x02; a map the broker decodes from a string is ``new HashMap<>(128)``
(``string2messageProperties``), one it builds is the default ``HashMap``.  The steps, by 5.3.3 class:

  receive   SendMessageProcessor: the client's string decoded (HashMap(128)), CLUSTER put, the string rebuilt
            *with* WAIT (5.x keeps it)
  put hooks HookUtils.handleScheduleMessage, for NOT/COMMIT records not on rmq_sys_wheel_timer:
            checkIfTimerMessage (a delay level wins: the TIMER_* properties are dropped), transformTimerMessage:
            deliver time from TIMER_DELAY_SEC, TIMER_DELAY_MS or TIMER_DELIVER_MS; not in the future -> stored
            as it is; more than timerMaxDelaySec ahead -> WHEEL_TIMER_MSG_ILLEGAL (refused); rounded down to the
            precision (a time on the boundary one precision earlier); TIMER_OUT_MS, REAL_TOPIC, REAL_QID put,
            rmq_sys_wheel_timer/0; then transformDelayLevelMessage (SCHEDULE_TOPIC_XXXX) for a delay level
  enqueue   the writer's dispatch of an rmq_sys_wheel_timer/0 record (v5.TimerStoreWriter.enqueue)
  fire      :meth:`Broker5.run_timers`: TimerMessageStore.dequeue for every slot due by now (delete units first
            collect ``<REAL_TOPIC>+<UNIQ_KEY>`` keys; a normal unit whose key is collected is dropped), then
            convert/convertMessage: the record decoded (HashMap(128)), TIMER_ENQUEUE_MS (the unit's write time,
            Long.MAX_VALUE for a record due at enqueue), TIMER_ROLL_TIMES (+1) for a roll, TIMER_DEQUEUE_MS
            (now) put, the string built from that map -- so REAL_TOPIC, REAL_QID and WAIT stay on disk -- and
            the record put to REAL_TOPIC/REAL_QID, or back to rmq_sys_wheel_timer for a roll; body, flag,
            sysflag, born time and host, store host and reconsume times copied
  recall    RecallMessageProcessor.buildMessage: body "0", tag _RECALL_TAG_, TIMER_DEL_UNIQKEY
            ``<topic>+<uniqKey>``, the message's UNIQ_KEY, TIMER_DELIVER_MS, BORN_TIMESTAMP, TRACE_CONTEXT "",
            PGROUP; through the put hooks to rmq_sys_wheel_timer
  POP       PopMessageProcessor.buildCkMsg / AckMessageProcessor.appendAck: ck / ack / bAck bodies
            (:mod:`store_format.pop`) to ``rmq_sys_REVIVE_LOG_<cluster>``, revive queue ``ckMessageNumber++ %
            reviveQueueNum``, TAGS, TIMER_DELIVER_MS (reviveTime - 1000 for a ck, popTime + invisibleTime for an
            ack), UNIQ_KEY (the single-ack form twice for a batch ack), born/store host the broker's: timer
            messages like any other; PopReviveService.reviveRetry: an unacked message of a fired ck is re-put
            to ``%RETRY%<group>_<topic>`` queue 0 (its properties + 1ST_POP_TIME, reconsume times + 1)
  LMQ       a send with INNER_MULTI_DISPATCH (the writer wraps and dispatches it, mishandling included)
  BatchCQ   SendMessageProcessor.sendBatchMessage to a BatchCQ topic: the client batch body as one record with
            INNER_BATCH_FLAG | NEED_UNWRAP_FLAG and INNER_NUM (the writer adds INNER_BASE)
"""
from __future__ import annotations

from dataclasses import dataclass, field

from .. import layout as L
from .. import lmq
from .. import pop as P
from ..codec import host_flags
from ..errors import ErrorKind, WriterError
from ..javahash import JavaHashMap
from ..message import Message
from ..properties import format_properties
from .broker import BatchItem, Broker, ManualClock, Producer, SendResult, _Inner, _int, client_message
from .v5 import property_map, to_string

DECODED_CAPACITY = 128  # MessageDecoder.string2messageProperties: new HashMap<>(128)
PROPERTY_BORN_TIMESTAMP = "BORN_TIMESTAMP"
PROPERTY_TRACE_CONTEXT = "TRACE_CONTEXT"
PROPERTY_FIRST_POP_TIME = "1ST_POP_TIME"


@dataclass
class Fired:
    """What :meth:`Broker5.run_timers` did with one timer-log unit."""

    slot_time: int
    unit_offset: int  # timer-log offset (-1 for a record due already at enqueue)
    outcome: str  # "fired" | "rolled" | "deleted" (a delete unit) | "recalled" (dropped) | "missing"
    source: Message | None  # the rmq_sys_wheel_timer record
    record: Message | None = None  # the record put (fired / rolled)


@dataclass
class PopResult:
    checkpoint: P.PopCheckPoint
    ck_record: Message  # the ck's rmq_sys_wheel_timer record
    messages: list = field(default_factory=list)  # the popped records


class Broker5(Broker):
    """A RocketMQ 5.3.3 broker in front of a writer whose 5.x side is on (a WriterConfig with
    ``timerWheelEnable`` for timer and POP flows, ``enableLmq``/``enableMultiDispatch`` for LMQ,
    ``enabledAppendPropCRC`` for the CRC property).  ``received_capacity`` is the map a received message's
    properties live in (128: SendMessageProcessor's decode; 16 reproduces a store driven through the store API
    with client-built maps, as the 5.3.3 fixtures were)."""

    def __init__(self, writer, clock=None, *, received_capacity: int | None = DECODED_CAPACITY,
                 revive_queue_num: int = L.DEFAULT_REVIVE_QUEUE_NUM):
        if writer.v5 is None:
            raise WriterError(ErrorKind.BAD_CONFIG, "Broker5 needs a writer with its 5.x side on (timerWheelEnable, "
                              "enableLmq, enableMultiDispatch or enabledAppendPropCRC)", field="config")
        super().__init__(writer, clock)
        self.received_capacity = received_capacity
        self.revive_topic = L.revive_topic(self.config.brokerClusterName)
        self.revive_queue_num = revive_queue_num
        self.ck_number = 0  # PopMessageProcessor.ckMessageNumber
        self.pop_offsets: dict[tuple[str, str, int], int] = {}  # (topic, group, qid) -> next offset to pop
        self._acked: dict[tuple, set] = {}  # (topic, qid, group, popTime, startOffset) -> acked offsets
        self._unrevived: list[Message] = []  # checkpoints fired to the revive topic, not yet consumed by revive()

    @property
    def timer(self):
        return self.writer.v5.timer

    def _now(self) -> int:
        return self.clock.ms if isinstance(self.clock, ManualClock) else self.clock()

    # ---- receive and put ------------------------------------------------------------------------------
    def _receive(self, producer, topic, queue_id, body, client, sys_flag, flag, born_ts) -> _Inner:
        props = property_map(format_properties(client.to_dict()), self.received_capacity)
        props.put(L.PROPERTY_CLUSTER, self.config.brokerClusterName)
        return _Inner(topic, queue_id, body, props, to_string(props), flag=flag, sys_flag=sys_flag,
                      born_timestamp=born_ts, born_host=producer.born_host, store_host=self.store_host)

    def _put(self, inner: _Inner) -> Message:
        """The put hooks (HookUtils.handleScheduleMessage) at the store time, then the store's put."""
        store_ts = self.clock()
        tran = inner.sys_flag & L.TRANSACTION_MASK
        if tran in (L.TRANSACTION_NOT_TYPE, L.TRANSACTION_COMMIT_TYPE) and inner.topic != L.TIMER_TOPIC:
            if self._is_timer(inner):
                self._transform_timer(inner, store_ts)
            level = _int(inner.props.get(L.PROPERTY_DELAY_TIME_LEVEL))
            if level > 0:
                if level > self.config.max_delay_level:
                    level = self.config.max_delay_level
                    inner.props.put(L.PROPERTY_DELAY_TIME_LEVEL, str(level))
                inner.props.put(L.PROPERTY_REAL_TOPIC, inner.topic)
                inner.props.put(L.PROPERTY_REAL_QUEUE_ID, str(inner.queue_id))
                inner.string = to_string(inner.props)
                inner.topic, inner.queue_id = L.SCHEDULE_TOPIC, level - 1
        sys_flag = (inner.sys_flag & ~(L.BORNHOST_V6_FLAG | L.STOREHOST_V6_FLAG)) | \
            host_flags(inner.born_host, inner.store_host)
        record = self._record(inner, sys_flag, store_ts)
        if len(record.topic) > L.TOPIC_MAX_LENGTH_V1:  # autoMessageVersionOnTopicLen
            record.magic_version = 2
        stored = self.writer.append(record)
        self._after_put(stored)
        return stored

    @staticmethod
    def _is_timer(inner: _Inner) -> bool:
        """HookUtils.checkIfTimerMessage (a delay level clears the timer properties and wins)."""
        p = inner.props
        if _int(p.get(L.PROPERTY_DELAY_TIME_LEVEL)) > 0:
            for k in (L.PROPERTY_TIMER_DELIVER_MS, L.PROPERTY_TIMER_DELAY_SEC, L.PROPERTY_TIMER_DELAY_MS):
                p.remove(k)
            return False
        if p.get(L.PROPERTY_TIMER_OUT_MS) is not None:
            return False
        return any(p.get(k) is not None for k in (L.PROPERTY_TIMER_DELIVER_MS, L.PROPERTY_TIMER_DELAY_MS,
                                                  L.PROPERTY_TIMER_DELAY_SEC))

    def _transform_timer(self, inner: _Inner, now: int) -> None:
        """HookUtils.transformTimerMessage at ``now``."""
        p = inner.props
        try:
            if p.get(L.PROPERTY_TIMER_DELAY_SEC) is not None:
                deliver = now + int(p.get(L.PROPERTY_TIMER_DELAY_SEC)) * 1000
            elif p.get(L.PROPERTY_TIMER_DELAY_MS) is not None:
                deliver = now + int(p.get(L.PROPERTY_TIMER_DELAY_MS))
            else:
                deliver = int(p.get(L.PROPERTY_TIMER_DELIVER_MS))
        except ValueError:
            raise WriterError(ErrorKind.INVALID_INPUT, "WHEEL_TIMER_MSG_ILLEGAL: the timer property is not a number",
                              field="properties") from None
        if deliver <= now:
            if p.get(L.PROPERTY_TIMER_DEL_UNIQKEY) is not None:
                raise WriterError(ErrorKind.INVALID_INPUT, "WHEEL_TIMER_MSG_ILLEGAL: a recall of a past time",
                                  field="properties")
            return  # stored as it is, on its own topic
        if deliver - now > self.config.timerMaxDelaySec * 1000:
            raise WriterError(ErrorKind.INVALID_INPUT, f"WHEEL_TIMER_MSG_ILLEGAL: delivery {deliver - now} ms ahead, "
                              f"beyond timerMaxDelaySec {self.config.timerMaxDelaySec}", field="properties")
        prec = self.config.timerPrecisionMs
        deliver = deliver - prec if deliver % prec == 0 else deliver // prec * prec
        p.put(L.PROPERTY_TIMER_OUT_MS, str(deliver))
        p.put(L.PROPERTY_REAL_TOPIC, inner.topic)
        p.put(L.PROPERTY_REAL_QUEUE_ID, str(inner.queue_id))
        inner.string = to_string(p)
        inner.topic, inner.queue_id = L.TIMER_TOPIC, L.TIMER_QUEUE_ID

    # ---- sends ----------------------------------------------------------------------------------------
    def send(self, producer: Producer, topic: str, body: bytes, *, deliver_ms: int | None = None,
             delay_sec: int | None = None, delay_ms: int | None = None, lmq: list | str | None = None,
             properties: dict | None = None, **kwargs) -> SendResult:
        """A producer's send; ``deliver_ms`` / ``delay_sec`` / ``delay_ms`` make it a timer message
        (``setDeliverTimeMs`` / ``setDelayTimeSec`` / ``setDelayTimeMs``), ``lmq`` the queues of
        INNER_MULTI_DISPATCH (names joined with ',': a name that is not %LMQ% is sent as it is, and RocketMQ
        mishandles it)."""
        props = dict(properties or {})
        if lmq is not None:
            props[L.PROPERTY_INNER_MULTI_DISPATCH] = lmq if isinstance(lmq, str) else \
                L.LMQ_DISPATCH_SEPARATOR.join(lmq)
        for key, value in ((L.PROPERTY_TIMER_DELIVER_MS, deliver_ms), (L.PROPERTY_TIMER_DELAY_SEC, delay_sec),
                           (L.PROPERTY_TIMER_DELAY_MS, delay_ms)):
            if value is not None:
                props[key] = str(int(value))
        return super().send(producer, topic, body, properties=props or None, **kwargs)

    def recall(self, producer: Producer, topic: str, uniq_key: str, deliver_ms: int, *,
               producer_group: str | None = None) -> Message:
        """RecallMessageProcessor: a delete entry for the timer message ``uniq_key`` of ``topic`` due at
        ``deliver_ms`` (refused unless 0 < deliver_ms - now < timerMaxDelaySec)."""
        born = self.clock()
        left = deliver_ms - born
        if left <= 0 or left >= self.config.timerMaxDelaySec * 1000:
            raise WriterError(ErrorKind.INVALID_INPUT, "recall failed, timestamp invalid", field="deliver_ms")
        props = JavaHashMap()
        props.put(L.PROPERTY_TAGS, L.TIMER_RECALL_TAG)
        props.put(L.PROPERTY_TIMER_DEL_UNIQKEY, f"{topic}+{uniq_key}")
        props.put(L.PROPERTY_UNIQ_KEY, uniq_key)
        props.put(L.PROPERTY_TIMER_DELIVER_MS, str(deliver_ms))
        props.put(PROPERTY_BORN_TIMESTAMP, str(born))
        props.put(PROPERTY_TRACE_CONTEXT, "")
        props.put(L.PROPERTY_PRODUCER_GROUP, producer_group or producer.group)
        inner = _Inner(topic, 0, b"0", props, to_string(props), born_timestamp=born, born_host=producer.born_host,
                       store_host=self.store_host)
        return self._put(inner)

    # ---- the timer's dequeue ----------------------------------------------------------------------------
    def run_timers(self, now: int | None = None) -> list[Fired]:
        """Fire every wheel slot due by ``now`` (default: the clock) in time order, and the records that were
        due already when enqueued; rolled records come back as new units and fire when their slot is due."""
        if self.timer is None:
            raise WriterError(ErrorKind.BAD_CONFIG, "the writer has no timer store (timerWheelEnable=false)",
                              field="timerWheelEnable")
        if now is None:
            now = self._now()
        out: list[Fired] = []
        while True:
            bypass, self.timer.bypass = self.timer.bypass, []
            for phys, _size in bypass:
                out.append(self._fire(self.writer.read_record(phys), L.TIMER_ENQUEUE_NEVER, False, -1, -1))
            t = self.timer.next_due(now)
            if t is None:
                if self.timer.bypass:
                    continue
                self.timer.catch_up(now)
                if isinstance(self.clock, ManualClock):
                    self.clock.set(now)
                return out
            requests = self.timer.take_slot(t)
            if isinstance(self.clock, ManualClock):
                self.clock.set(t + self.config.timerPrecisionMs)  # the broker fires a slot just after its time
            deleted: set[str] = set()
            for r in requests:
                src = self.writer.read_record(r.physical_offset) if r.physical_offset < self._written_end() else None
                if src is None:
                    out.append(Fired(t, r.offset, "missing", None))
                    continue
                if r.delete:
                    key = src.properties.get(L.PROPERTY_TIMER_DEL_UNIQKEY)
                    if key is not None:
                        deleted.add(key)
                    out.append(Fired(t, r.offset, "deleted", src))
                    continue
                real, uniq = src.properties.get(L.PROPERTY_REAL_TOPIC), src.uniq_key
                if uniq is not None and f"{real}+{uniq}" in deleted:
                    out.append(Fired(t, r.offset, "recalled", src))
                    continue
                out.append(self._fire(src, r.enqueue_time, r.roll, t, r.offset))

    def _written_end(self) -> int:
        return self.writer.cur_base + self.writer.cur_pos if self.writer.cur_base >= 0 else 0

    def _fire(self, src: Message, enqueue_time: int, roll: bool, slot_time: int, unit: int) -> Fired:
        """TimerDequeuePutMessageService: addMetric(-1), convert, doPut."""
        dequeue_ms = self.clock()
        if enqueue_time == L.TIMER_ENQUEUE_NEVER:
            marked = property_map(src.properties_raw, DECODED_CAPACITY)
            marked.put(L.PROPERTY_TIMER_ENQUEUE_MS, str(L.TIMER_ENQUEUE_NEVER))
            self.timer.add_metric(Message(src.topic, properties_raw=to_string(marked)), -1, dequeue_ms)
        else:
            self.timer.add_metric(src, -1, dequeue_ms)
        topic, qid, props, string = convert_timer_record(src, enqueue_time, roll, dequeue_ms)
        if not roll and props.get(L.PROPERTY_TIMER_DEL_UNIQKEY) is not None:
            return Fired(slot_time, unit, "deleted", src)  # doPut: a delete entry is never put (PUT_NO_RETRY)
        inner = _Inner(topic, qid, src.body, props, string, flag=src.flag, sys_flag=src.sys_flag,
                       born_timestamp=src.born_timestamp, born_host=src.born_host, store_host=src.store_host,
                       reconsume_times=src.reconsume_times)
        stored = self._put(inner)
        if not roll and stored.topic == self.revive_topic and stored.tags == L.POP_CK_TAG:
            self._unrevived.append(stored)  # whichever run fired it, the revive service consumes it in order
        return Fired(slot_time, unit, "rolled" if roll else "fired", src, stored)

    # ---- POP ------------------------------------------------------------------------------------------
    def _revive_put(self, body: bytes, queue_id: int, tag: str, deliver_ms: int, uniq: str) -> Message:
        props = JavaHashMap()
        props.put(L.PROPERTY_TAGS, tag)
        props.put(L.PROPERTY_TIMER_DELIVER_MS, str(deliver_ms))
        props.put(L.PROPERTY_UNIQ_KEY, uniq)
        born = self.clock()
        inner = _Inner(self.revive_topic, queue_id, body, props, to_string(props), born_timestamp=born,
                       born_host=self.store_host, store_host=self.store_host)
        self.writer.register_topic(self.revive_topic, self.revive_queue_num, at=born)
        return self._put(inner)

    def pop(self, group: str, topic: str, queue_id: int, max_nums: int = 32, *,
            invisible_time: int = 60_000) -> PopResult | None:
        """PopMessageProcessor: the next ``max_nums`` messages of ``topic``/``queue_id`` after ``group``'s
        popped offset, and their checkpoint (a ck record through the timer, due at reviveTime - 1000).  None
        when nothing is there."""
        from ..consumequeue import read_queue
        cq = self.writer.cqs.get((topic, queue_id))
        start = self.pop_offsets.get((topic, group, queue_id), 0)
        if cq is None:
            return None
        self.writer._drain()
        units = [u for u in read_queue([_cq_file(cq, b) for b in sorted(cq.files)], stop_at_invalid=True)
                 if u.queue_offset >= start][:max_nums]
        if not units:
            return None
        pop_time = self._now()
        msgs = [self.writer.read_record(u.physical_offset) for u in units]
        ck = P.PopCheckPoint(start_offset=start, pop_time=pop_time, invisible_time=invisible_time, bit_map=0,
                             num=len(units), queue_id=queue_id, topic=topic, consumer_group=group, revive_offset=0,
                             queue_offset_diff=tuple(u.queue_offset - start for u in units),
                             broker_name=self.config.brokerName)
        rqid = self.ck_number % self.revive_queue_num
        self.ck_number += 1
        rec = self._revive_put(P.ck_body(ck), rqid, L.POP_CK_TAG, ck.revive_time - L.POP_ACK_TIME_INTERVAL_MS,
                               ck.uniq_key())
        self.pop_offsets[(topic, group, queue_id)] = units[-1].queue_offset + 1
        self._acked[(topic, queue_id, group, pop_time, start)] = set()
        return PopResult(ck, rec, msgs)

    def ack(self, popped: PopResult, offsets: list[int] | int) -> Message:
        """AckMessageProcessor.appendAck: an ``ack`` for one offset, a ``bAck`` for several (revive queue =
        the ck's), due at popTime + invisibleTime."""
        ck = popped.checkpoint
        offsets = [offsets] if isinstance(offsets, int) else list(offsets)
        rqid = popped.ck_record.queue_id
        batch = len(offsets) > 1
        ack = P.AckMsg(ack_offset=-1 if batch else offsets[0], start_offset=ck.start_offset,
                       consumer_group=ck.consumer_group, topic=ck.topic, queue_id=ck.queue_id, pop_time=ck.pop_time,
                       broker_name=self.config.brokerName, ack_offset_list=tuple(offsets) if batch else None)
        self._acked[(ck.topic, ck.queue_id, ck.consumer_group, ck.pop_time, ck.start_offset)].update(offsets)
        return self._revive_put(P.ack_body(ack), rqid, L.POP_BATCH_ACK_TAG if batch else L.POP_ACK_TAG,
                                ck.pop_time + ck.invisible_time, ack.uniq_key())

    def revive(self, now: int | None = None) -> list[Message]:
        """Fire the timers (the ck and ack records reach the revive topic), then PopReviveService: every fired
        ck not consumed yet (fired by this call or an earlier ``run_timers``) has its unacked messages re-put to
        ``%RETRY%<group>_<topic>``; the revive group's offsets committed."""
        self.run_timers(now)
        out = []
        fired, self._unrevived = self._unrevived, []
        for rec in fired:
            ck = P.parse_pop_body(L.POP_CK_TAG, rec.body)
            acked = self._acked.get((ck.topic, ck.queue_id, ck.consumer_group, ck.pop_time, ck.start_offset), set())
            for off in ck.offsets():
                if off in acked:
                    continue
                src = self._message_at(ck.topic, ck.queue_id, off)
                if src is not None:
                    out.append(self._revive_retry(ck, src))
            self.commit_offset(L.REVIVE_GROUP, self.revive_topic, rec.queue_id, rec.queue_offset + 1)
        return out

    def _message_at(self, topic: str, queue_id: int, offset: int) -> Message | None:
        from ..consumequeue import read_queue
        cq = self.writer.cqs.get((topic, queue_id))
        if cq is None:
            return None
        self.writer._drain()
        for u in read_queue([_cq_file(cq, b) for b in sorted(cq.files)], stop_at_invalid=True):
            if u.queue_offset == offset:
                return self.writer.read_record(u.physical_offset)
        return None

    def _revive_retry(self, ck: P.PopCheckPoint, src: Message) -> Message:
        """PopReviveService.reviveRetry."""
        topic = ck.topic if ck.topic.startswith(L.RETRY_GROUP_TOPIC_PREFIX) else \
            f"{L.RETRY_GROUP_TOPIC_PREFIX}{ck.consumer_group}_{ck.topic}"
        props = JavaHashMap()
        if src.tags is not None:
            props.put(L.PROPERTY_TAGS, src.tags)
        for k, v in property_map(src.properties_raw, DECODED_CAPACITY).items():
            props.put(k, v)
        if src.reconsume_times == 0 or props.get(PROPERTY_FIRST_POP_TIME) is None:
            props.put(PROPERTY_FIRST_POP_TIME, str(ck.pop_time))
        self.writer.register_group(ck.consumer_group)
        self.writer.register_topic(topic)
        inner = _Inner(topic, 0, src.body, props, to_string(props), flag=src.flag, sys_flag=src.sys_flag,
                       born_timestamp=src.born_timestamp, born_host=self.store_host, store_host=self.store_host,
                       reconsume_times=src.reconsume_times + 1)
        return self._put(inner)

    # ---- BatchCQ --------------------------------------------------------------------------------------
    def send_inner_batch(self, producer: Producer, topic: str, items: list, *, queue_id: int | None = None) -> \
            SendResult:
        """SendMessageProcessor.sendBatchMessage to a ``queue.type=BatchCQ`` topic: the client's batch
        (``MessageDecoder.encodeMessages``) stored as one record flagged INNER_BATCH | NEED_UNWRAP with INNER_NUM
        (the store adds INNER_BASE); it takes INNER_NUM logical offsets."""
        from ..ids import parse_host

        if self.writer.v5 is None or not self.writer.v5.batch_topic(topic):
            raise WriterError(ErrorKind.INVALID_INPUT, f"{topic} is not a queue.type=BatchCQ topic", field="topic")
        items = [i if isinstance(i, BatchItem) else BatchItem(**i) for i in items]
        queue_id = self._queue_for(producer, topic, queue_id)
        born = self.clock()
        body = b""
        uniqs = []
        for it in items:
            uniq = it.uniq_key or producer.next_uniq_key(born)
            uniqs.append(uniq)
            s = format_properties(client_message(it.tags, it.keys, it.properties, uniq).to_dict(),
                                  trailing_separator=True).encode("utf-8")
            body += _encode_client_message(it.body, it.flag, s)
        props = JavaHashMap()
        props.put(L.PROPERTY_UNIQ_KEY, producer.next_uniq_key(born))  # the batch's own id, after its items
        props.put(L.PROPERTY_WAIT_STORE_MSG_OK, "true")
        props.put(L.PROPERTY_CLUSTER, self.config.brokerClusterName)
        props.put(L.PROPERTY_INNER_NUM, str(len(items)))
        parse_host(producer.born_host)
        inner = _Inner(topic, queue_id, body, props, to_string(props), born_timestamp=born,
                       born_host=producer.born_host, store_host=self.store_host,
                       sys_flag=L.INNER_BATCH_FLAG | L.NEED_UNWRAP_FLAG)
        return SendResult(",".join(uniqs), [self._put(inner)])


def convert_timer_record(src: Message, enqueue_time: int, roll: bool, dequeue_ms: int) -> \
        tuple[str, int, JavaHashMap, str]:
    """``TimerMessageStore.convert`` + ``convertMessage`` of a stored ``rmq_sys_wheel_timer`` record: (topic,
    queue id, the new record's map, the string stored).  The string is built from the decoded map
    (HashMap(128)) with TIMER_ENQUEUE_MS (unless ``enqueue_time`` is -1), TIMER_ROLL_TIMES (a roll) and
    TIMER_DEQUEUE_MS put, before REAL_TOPIC/REAL_QID are cleared from the map: they stay on disk."""
    props = property_map(src.properties_raw, DECODED_CAPACITY)
    if enqueue_time != -1:
        props.put(L.PROPERTY_TIMER_ENQUEUE_MS, str(enqueue_time))
    if roll:
        times = props.get(L.PROPERTY_TIMER_ROLL_TIMES)
        props.put(L.PROPERTY_TIMER_ROLL_TIMES, str(int(times) + 1 if times is not None else 1))
    props.put(L.PROPERTY_TIMER_DEQUEUE_MS, str(dequeue_ms))
    string = to_string(props)
    if roll:
        return src.topic, src.queue_id, props, string
    topic, qid = props.get(L.PROPERTY_REAL_TOPIC), _int(props.get(L.PROPERTY_REAL_QUEUE_ID))
    props.remove(L.PROPERTY_REAL_TOPIC)
    props.remove(L.PROPERTY_REAL_QUEUE_ID)
    return topic, qid, props, string


def _encode_client_message(body: bytes, flag: int, props: bytes) -> bytes:
    """``MessageDecoder.encodeMessage``: TOTALSIZE, MAGICCODE 0, BODYCRC 0, FLAG, BODY, PROPERTIES (short)."""
    import struct

    total = 4 + 4 + 4 + 4 + 4 + len(body) + 2 + len(props)
    return struct.pack(">iiiii", total, 0, 0, flag, len(body)) + body + struct.pack(">h", len(props)) + props


def _cq_file(cq, base: int):
    from ..consumequeue import CQFile
    m = cq.files[base]
    return CQFile("", 0, m.path, base, m.size)


__all__ = ["Broker5", "Fired", "PopResult", "convert_timer_record"]
