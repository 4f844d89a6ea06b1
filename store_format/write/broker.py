"""Broker flows: the records a RocketMQ broker stores for each client action, built the way the broker builds them
and written through :class:`~store_format.write.writer.StoreWriter`.  One :class:`Broker` for 4.9.x and 5.3.3: it is
the version its store is (:attr:`StoreWriter.rocketmq5 <store_format.write.writer.StoreWriter.rocketmq5>`), which
changes how a received string is rebuilt and adds 5.x's put hooks; the 5.x flows (timers, recall, POP, inner
batches) need the store's 5.x structures.

Property strings are ``messageProperties2String`` of Java HashMaps, so their order is the map's iteration
order (:class:`~store_format.javahash.JavaHashMap`) and each step below adds, removes or re-puts keys in the
order the Java code does.  The ``broker`` fixture (a real BrokerController) pins every flow:

  send        client Message(topic, tags, keys, body): TAGS, KEYS, WAIT=true, user properties, UNIQ_KEY
              (DefaultMQProducerImpl.sendKernelImpl); the broker re-parses the string (empty values drop),
              adds CLUSTER and stores the string built *without* WAIT (SendMessageProcessor).
  delay       CommitLog.asyncPutMessage: DELAY clamped, REAL_TOPIC/REAL_QID added, string rebuilt (WAIT is
              back in the map by then), topic SCHEDULE_TOPIC_XXXX, queue level-1.
  deliver     ScheduleMessageService.messageTimeup: the scheduled string re-serialized, topic/queue from
              REAL_TOPIC/REAL_QID, born time/host, store host, flag, sysflag, reconsume times copied.
  batch       each item's client string + "\\u0002" + the batch's (CLUSTER, WAIT): WAIT appears twice;
              one store timestamp; the whole batch in one segment.
  half        parseHalfMessageInner: REAL_TOPIC/REAL_QID, type reset to NOT, RMQ_SYS_TRANS_HALF_TOPIC/0.
  commit      EndTransactionProcessor.endMessageTransaction: the half's string (REAL_TOPIC, REAL_QID,
              TRAN_MSG kept), COMMIT type, prepared offset = half offset; then the op record.
  op          TransactionalMessageBridge.makeOpMessageInner: RMQ_SYS_TRANS_OP_HALF_TOPIC, tag "d", body =
              the half's queue offset, born host = store host = broker; UNIQ_KEY set after the string.
  send-back   SendMessageProcessor.asyncConsumerSendMsgBack: RETRY_TOPIC (once), WAIT=false,
              DELAY = 3 + reconsumeTimes, ORIGIN_MESSAGE_ID (first offsetMsgId), reconsumeTimes + 1 to
              %RETRY%group via the schedule topic; at maxReconsumeTimes (or delay < 0) %DLQ%group, DELAY=0.

RocketMQ 5.3.3: property strings end with 5.2.0+'s trailing 0x02; a map the broker decodes from a string is
``new HashMap<>(128)`` (``string2messageProperties``), one it builds is the default ``HashMap``.  The steps, by 5.3.3
class:

  receive   SendMessageProcessor: the client's string decoded (HashMap(128)), CLUSTER put, the string rebuilt
            *with* WAIT (5.x keeps it)
  put hooks HookUtils.handleScheduleMessage, for NOT/COMMIT records not on rmq_sys_wheel_timer:
            checkIfTimerMessage (a delay level wins: the TIMER_* properties are dropped), transformTimerMessage:
            deliver time from TIMER_DELAY_SEC, TIMER_DELAY_MS or TIMER_DELIVER_MS; not in the future -> stored
            as it is; more than timerMaxDelaySec ahead -> WHEEL_TIMER_MSG_ILLEGAL (refused); rounded down to the
            precision (a time on the boundary one precision earlier); TIMER_OUT_MS, REAL_TOPIC, REAL_QID put,
            rmq_sys_wheel_timer/0; then transformDelayLevelMessage (SCHEDULE_TOPIC_XXXX) for a delay level
  enqueue   the writer's dispatch of an rmq_sys_wheel_timer/0 record (store_format.write.timer.TimerEnqueue)
  fire      :meth:`Broker.run_timers`: TimerMessageStore.dequeue for every slot due by now (delete units first
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

import bisect
import ipaddress
from dataclasses import dataclass, field
from typing import Iterable

from .. import layout as L
from .. import pop as P
from ..codec import host_flags
from ..compression import compress as _compress
from ..errors import ErrorKind, WriterError
from ..ids import create_uniq_key
from ..javahash import JavaHashMap
from ..message import Message
from ..properties import format_properties, parse_properties
from .javaprops import property_map, to_string
from .writer import StoreWriter, validate_topic

DECODED_CAPACITY = 128  # MessageDecoder.string2messageProperties: new HashMap<>(128)
PROPERTY_BORN_TIMESTAMP = "BORN_TIMESTAMP"
PROPERTY_TRACE_CONTEXT = "TRACE_CONTEXT"
PROPERTY_FIRST_POP_TIME = "1ST_POP_TIME"


class ManualClock:
    """A broker clock you control: each reading returns the current ms and then moves ``tick`` ms on, so
    born and store times of successive calls increase as on a live broker."""

    def __init__(self, start_ms: int = 1_700_000_000_000, tick: int = 1):
        self.ms = int(start_ms)
        self.tick = int(tick)

    def __call__(self) -> int:
        now = self.ms
        self.ms += self.tick
        return now

    def set(self, ms: int) -> None:
        self.ms = max(self.ms, int(ms))

    def advance(self, ms: int) -> None:
        self.ms += int(ms)


@dataclass
class Producer:
    """A client: its socket address (BORNHOST), the identity its UNIQ_KEYs carry, and its send options."""

    group: str = "please_rename_unique_group_name"
    born_host: str = "127.0.0.1:50000"
    client_ip: str = "127.0.0.1"  # UtilAll.getIP(): the address in UNIQ_KEY (may differ from the socket)
    pid: int = 4242
    class_loader_hash: int = 0x2B276B21
    counter: int = 0
    compress_type: str = "ZLIB"  # System property rocketmq.message.compressType
    compress_over: int = L.COMPRESS_MSG_BODY_OVER_HOWMUCH
    _next_queue: dict = field(default_factory=dict, repr=False)

    def next_uniq_key(self, now_ms: int) -> str:
        """MessageClientIDSetter.createUniqID for this client at ``now_ms`` (month start in UTC)."""
        ip = ipaddress.ip_address(self.client_ip).packed
        key = create_uniq_key(ip, self.pid, self.class_loader_hash, now_ms, self.counter)
        self.counter = (self.counter + 1) & 0xFFFF
        return key

    def select_queue(self, topic: str, queue_nums: int) -> int:
        """MQFaultStrategy round robin over the topic's write queues."""
        i = self._next_queue.get(topic, 0)
        self._next_queue[topic] = i + 1
        return i % queue_nums


@dataclass
class SendResult:
    msg_id: str  # UNIQ_KEY (comma-joined for a batch), what the client calls msgId
    records: list  # the stored records, in physical order

    @property
    def record(self) -> Message:
        return self.records[0]

    @property
    def offset_msg_id(self) -> str:
        return ",".join(r.msg_id for r in self.records)

    @property
    def queue_id(self) -> int:
        return self.records[0].queue_id

    @property
    def queue_offset(self) -> int:
        return self.records[0].queue_offset


@dataclass
class BatchItem:
    body: bytes
    tags: str | None = None
    keys: str | list | None = None
    properties: dict | None = None
    flag: int = 0
    uniq_key: str | None = None


def _string(props: JavaHashMap) -> str:
    return format_properties(props.to_dict())


def _keys_text(keys) -> str | None:
    if keys is None:
        return None
    return keys if isinstance(keys, str) else L.KEY_SEPARATOR.join(keys)


def _client_message(tags, keys, properties, wait: bool = True) -> JavaHashMap:
    """``new Message(topic, tags, keys, body)`` then ``putUserProperty`` for each user property."""
    m = JavaHashMap()
    if tags:
        m.put(L.PROPERTY_TAGS, tags)
    keys = _keys_text(keys)
    if keys:
        m.put(L.PROPERTY_KEYS, keys)
    m.put(L.PROPERTY_WAIT_STORE_MSG_OK, "true" if wait else "false")
    for k, v in (properties or {}).items():
        if k in _RESERVED:
            raise WriterError(ErrorKind.INVALID_INPUT, f"property {k!r} is reserved by RocketMQ "
                              "(Message.putUserProperty refuses it)", field="properties")
        m.put(k, str(v))
    return m


def client_message(tags, keys, properties, uniq_key: str, *, wait: bool = True, delay_level: int = 0,
                   producer_group: str | None = None) -> JavaHashMap:
    """The properties a producer sends: ``new Message(...)`` and user properties, ``setDelayTimeLevel``,
    for a transaction TRAN_MSG and PGROUP (sendMessageInTransaction), then UNIQ_KEY (sendKernelImpl)."""
    m = _client_message(tags, keys, properties, wait)
    if delay_level:
        m.put(L.PROPERTY_DELAY_TIME_LEVEL, str(delay_level))
    if producer_group is not None:
        m.put(L.PROPERTY_TRANSACTION_PREPARED, "true")
        m.put(L.PROPERTY_PRODUCER_GROUP, producer_group)
    m.put(L.PROPERTY_UNIQ_KEY, uniq_key)
    return m


# MessageConst.STRING_HASH_SET: names putUserProperty refuses
_RESERVED = frozenset({
    L.PROPERTY_TRANSACTION_PREPARED, L.PROPERTY_PRODUCER_GROUP, L.PROPERTY_REAL_TOPIC, L.PROPERTY_REAL_QUEUE_ID,
    L.PROPERTY_UNIQ_KEY, L.PROPERTY_RETRY_TOPIC, L.PROPERTY_ORIGIN_MESSAGE_ID, L.PROPERTY_MAX_RECONSUME_TIMES,
    L.PROPERTY_CLUSTER, L.PROPERTY_KEYS, L.PROPERTY_TAGS, L.PROPERTY_WAIT_STORE_MSG_OK,
    L.PROPERTY_DELAY_TIME_LEVEL, "MIN_OFFSET", "MAX_OFFSET", "BUYER_ID", "TRANSFER_FLAG", "CORRECTION_FLAG",
    "MQ2_FLAG", "RECONSUME_TIME", "MSG_REGION", "TRACE_ON", "CONSUME_START_TIME",
    L.PROPERTY_TRANSACTION_PREPARED_QUEUE_OFFSET, L.PROPERTY_TRANSACTION_CHECK_TIMES,
    "CHECK_IMMUNITY_TIME_IN_SECONDS", "SHARDING_KEY",
})


# --------------------------------------------------------------------------------------------------
# The property steps of each flow, as pure functions (the Broker below and the bulk generator's
# templates both use them, so the two can never disagree).


def received_properties(client: JavaHashMap, cluster: str) -> tuple[JavaHashMap, str]:
    """SendMessageProcessor: re-parse the client's string (empty values drop), add CLUSTER; the stored
    string is built without WAIT, which is then put back (later rebuilds include it)."""
    props = JavaHashMap(parse_properties(format_properties(client.to_dict())))
    props.put(L.PROPERTY_CLUSTER, cluster)
    if L.PROPERTY_WAIT_STORE_MSG_OK in props:
        wait = props.remove(L.PROPERTY_WAIT_STORE_MSG_OK)
        string = _string(props)
        props.put(L.PROPERTY_WAIT_STORE_MSG_OK, wait)
    else:
        string = _string(props)
    return props, string


def schedule_properties(props: JavaHashMap, topic: str, queue_id: int, max_level: int,
                        trailing: bool = False) -> tuple[str, int, str] | None:
    """CommitLog.asyncPutMessage (5.x: HookUtils.transformDelayLevelMessage) for NOT/COMMIT records with DELAY > 0:
    (topic, queue id, string) of the SCHEDULE_TOPIC_XXXX copy, or None when the record is stored as it is
    (``trailing``: 5.2.0+'s trailing separator)."""
    level = _int(props.get(L.PROPERTY_DELAY_TIME_LEVEL))
    if level <= 0:
        return None
    if level > max_level:
        level = max_level
        props.put(L.PROPERTY_DELAY_TIME_LEVEL, str(level))
    props.put(L.PROPERTY_REAL_TOPIC, topic)
    props.put(L.PROPERTY_REAL_QUEUE_ID, str(queue_id))
    return L.SCHEDULE_TOPIC, level - 1, to_string(props, trailing)


def half_properties(props: JavaHashMap, topic: str, queue_id: int) -> str:
    """TransactionalMessageBridge.parseHalfMessageInner."""
    props.put(L.PROPERTY_REAL_TOPIC, topic)
    props.put(L.PROPERTY_REAL_QUEUE_ID, str(queue_id))
    return _string(props)


def reread_properties(stored: str) -> tuple[JavaHashMap, str]:
    """A stored record read back (MessageDecoder.decode) and its properties serialized again, as
    messageTimeup and endMessageTransaction do before they clear anything."""
    props = JavaHashMap(parse_properties(stored))
    return props, _string(props)


def batch_properties(cluster: str) -> str:
    """The batch's own properties: WAIT of the first message (client), CLUSTER (broker)."""
    props = JavaHashMap(parse_properties(f"{L.PROPERTY_WAIT_STORE_MSG_OK}{L.NAME_VALUE_SEPARATOR}true"))
    props.put(L.PROPERTY_CLUSTER, cluster)
    return _string(props)


def batch_item_string(item: str, batch: str) -> str:
    """CommitLog's batch encoder: the item's string, a separator if needed, the batch's string."""
    if item and batch and not item.endswith(L.PROPERTY_SEPARATOR):
        item += L.PROPERTY_SEPARATOR
    return item + batch


def op_properties() -> JavaHashMap:
    """``new Message(RMQ_SYS_TRANS_OP_HALF_TOPIC, "d", body)``: TAGS, WAIT=true."""
    op = JavaHashMap()
    op.put(L.PROPERTY_TAGS, L.TRANS_OP_REMOVE_TAG)
    op.put(L.PROPERTY_WAIT_STORE_MSG_OK, "true")
    return op


def send_back_properties(stored: str, stored_topic: str, reconsume_times: int, msg_id: str, group: str,
                         delay_level: int, max_reconsume_times: int) -> tuple[str, JavaHashMap, str]:
    """SendMessageProcessor.asyncConsumerSendMsgBack: (topic, properties, string) of the record sent back."""
    props = JavaHashMap(parse_properties(stored))
    if props.get(L.PROPERTY_RETRY_TOPIC) is None:
        props.put(L.PROPERTY_RETRY_TOPIC, stored_topic)
    props.put(L.PROPERTY_WAIT_STORE_MSG_OK, "false")
    if reconsume_times >= max_reconsume_times or delay_level < 0:
        topic = f"{L.DLQ_GROUP_TOPIC_PREFIX}{group}"
        props.put(L.PROPERTY_DELAY_TIME_LEVEL, "0")
    else:
        topic = f"{L.RETRY_GROUP_TOPIC_PREFIX}{group}"
        props.put(L.PROPERTY_DELAY_TIME_LEVEL, str(delay_level or 3 + reconsume_times))
    origin = props.get(L.PROPERTY_ORIGIN_MESSAGE_ID)
    props.put(L.PROPERTY_ORIGIN_MESSAGE_ID, origin if origin and origin.strip() else msg_id)
    return topic, props, _string(props)


@dataclass
class _Inner:
    """MessageExtBrokerInner: the properties map and the already-built string may differ, as in Java."""

    topic: str
    queue_id: int
    body: bytes
    props: JavaHashMap
    string: str
    flag: int = 0
    sys_flag: int = 0
    born_timestamp: int = 0
    born_host: str = ""
    store_host: str = ""
    reconsume_times: int = 0
    prepared_transaction_offset: int = 0


@dataclass
class Fired:
    """What :meth:`Broker.run_timers` did with one timer-log unit."""

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


class Broker:
    """A broker in front of a :class:`StoreWriter`.  Times come from ``clock`` (default: the writer's
    clock, else a :class:`ManualClock`); the writer stamps index names and config versions with it.

    A 5.x store's broker (a WriterConfig with ``timerWheelEnable`` for timer and POP flows, ``enableLmq``/
    ``enableMultiDispatch`` for LMQ, ``enabledAppendPropCRC`` for the CRC property, or a BatchCQ topic):
    ``received_capacity`` is the map a received message's properties live in (128: SendMessageProcessor's decode;
    16 reproduces a store driven through the store API with client-built maps, as the 5.3.3 fixtures were)."""

    def __init__(self, writer: StoreWriter, clock=None, *, received_capacity: int | None = DECODED_CAPACITY,
                 revive_queue_num: int = L.DEFAULT_REVIVE_QUEUE_NUM):
        self.writer = writer
        self.clock = clock or writer.clock or ManualClock()
        if writer.clock is None:
            writer.clock = self.clock
        self.config = writer.config
        self.store_host = writer.config.storeHost
        # scheduled records not yet delivered: (deliver time, level, queue offset, physical offset)
        self._pending = sorted((self._deliver_time(writer.read_record(p)), lvl, off, p)
                               for lvl, off, _real, p in writer._scheduled.values())
        self._halves: dict[int, Message] = {}  # half records sent through this broker, not yet resolved
        self._resolved: set[int] = set()
        self.rocketmq5 = writer.rocketmq5
        self.max_delay_level = self.config.max_delay_level  # parsed once: every put asks for it
        self.received_capacity = received_capacity
        self.revive_topic = L.revive_topic(self.config.brokerClusterName)
        self.revive_queue_num = revive_queue_num
        self.ck_number = 0  # PopMessageProcessor.ckMessageNumber
        self.pop_offsets: dict[tuple[str, str, int], int] = {}  # (topic, group, qid) -> next offset to pop
        self._acked: dict[tuple, set] = {}  # (topic, qid, group, popTime, startOffset) -> acked offsets
        self._unrevived: list[Message] = []  # checkpoints fired to the revive topic, not yet consumed by revive()

    @property
    def timer(self):
        return self.writer.timer

    def _now(self) -> int:
        return self.clock.ms if isinstance(self.clock, ManualClock) else self.clock()

    # ---- the store's put path (CommitLog.asyncPutMessage) ----------------------------------------
    def _put(self, inner: _Inner) -> Message:
        """The put hooks at the store time (5.x: HookUtils.handleScheduleMessage, a timer message first; never on
        rmq_sys_wheel_timer), then the store's put."""
        store_ts = self.clock()
        tran = inner.sys_flag & L.TRANSACTION_MASK
        if tran in (L.TRANSACTION_NOT_TYPE, L.TRANSACTION_COMMIT_TYPE) and \
                not (self.rocketmq5 and inner.topic == L.TIMER_TOPIC):
            if self.rocketmq5 and self._is_timer(inner):
                self._transform_timer(inner, store_ts)
            moved = schedule_properties(inner.props, inner.topic, inner.queue_id, self.max_delay_level,
                                        trailing=self.rocketmq5)
            if moved is not None:
                inner.topic, inner.queue_id, inner.string = moved
        sys_flag = (inner.sys_flag & ~(L.BORNHOST_V6_FLAG | L.STOREHOST_V6_FLAG)) | \
            host_flags(inner.born_host, inner.store_host)
        record = self._record(inner, sys_flag, store_ts)
        if self.rocketmq5 and len(record.topic) > L.TOPIC_MAX_LENGTH_V1:  # autoMessageVersionOnTopicLen
            record.magic_version = 2
        stored = self.writer.append(record)
        self._after_put(stored)
        return stored

    def _record(self, inner: _Inner, sys_flag: int, store_ts: int) -> Message:
        return Message(topic=inner.topic, body=inner.body, queue_id=inner.queue_id, properties_raw=inner.string,
                       flag=inner.flag, sys_flag=sys_flag, born_timestamp=inner.born_timestamp,
                       born_host=inner.born_host, store_timestamp=store_ts, store_host=inner.store_host,
                       reconsume_times=inner.reconsume_times,
                       prepared_transaction_offset=inner.prepared_transaction_offset)

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

    def _after_put(self, stored: Message):
        if stored.topic == L.SCHEDULE_TOPIC:
            bisect.insort(self._pending, (self._deliver_time(stored), stored.queue_id + 1, stored.queue_offset,
                                          stored.physical_offset))

    def _deliver_time(self, scheduled: Message) -> int:
        return scheduled.dispatch_tags_code(self.config.delay_levels)

    # ---- producer side -------------------------------------------------------------------------
    def _queue_for(self, producer: Producer, topic: str, queue_id: int | None) -> int:
        validate_topic(topic)
        tc = self.writer.topics.get(topic)
        # a new topic: the client routes by TBW102 and asks for its default 4 queues
        nums = tc.queues if tc is not None else \
            min(L.CLIENT_DEFAULT_TOPIC_QUEUE_NUMS, self.config.defaultTopicQueueNums)
        return producer.select_queue(topic, nums) if queue_id is None else queue_id

    def _receive(self, producer: Producer, topic: str, queue_id: int, body: bytes, client: JavaHashMap,
                 sys_flag: int, flag: int, born_ts: int) -> _Inner:
        if self.rocketmq5:  # the client's string decoded, CLUSTER put, the string rebuilt *with* WAIT (5.x keeps it)
            props = property_map(format_properties(client.to_dict()), self.received_capacity)
            props.put(L.PROPERTY_CLUSTER, self.config.brokerClusterName)
            string = to_string(props)
        else:
            props, string = received_properties(client, self.config.brokerClusterName)
        return _Inner(topic, queue_id, body, props, string, flag=flag, sys_flag=sys_flag, born_timestamp=born_ts,
                      born_host=producer.born_host, store_host=self.store_host)

    def _compress(self, producer: Producer, body: bytes, compress: str | bool | None) -> tuple[bytes, int]:
        kind = producer.compress_type if compress in (None, True) else compress
        if compress is False or kind is None or (compress is None and len(body) < producer.compress_over):
            return body, 0
        if kind not in L.COMPRESSION_FLAGS:
            raise WriterError(ErrorKind.INVALID_INPUT, f"compression {kind!r}: ZLIB, LZ4 or ZSTD", field="compress")
        return _compress(body, kind), L.COMPRESSED_FLAG | L.COMPRESSION_FLAGS[kind]

    def send(self, producer: Producer, topic: str, body: bytes, *, tags: str | None = None, keys=None,
             properties: dict | None = None, queue_id: int | None = None, delay_level: int = 0, flag: int = 0,
             wait: bool = True, compress: str | bool | None = None, uniq_key: str | None = None,
             deliver_ms: int | None = None, delay_sec: int | None = None, delay_ms: int | None = None,
             lmq: list | str | None = None) -> SendResult:
        """A producer's ``send``.  ``compress``: None = the producer's rule (bodies >= 4 KiB), a type name or
        True to force, False never.  ``uniq_key`` replays a client id instead of generating one.  ``deliver_ms`` /
        ``delay_sec`` / ``delay_ms`` make it a timer message (``setDeliverTimeMs`` / ``setDelayTimeSec`` /
        ``setDelayTimeMs``), ``lmq`` the queues of INNER_MULTI_DISPATCH (names joined with ',': a name that is not
        %LMQ% is sent as it is, and RocketMQ mishandles it)."""
        props = dict(properties or {})
        if lmq is not None:
            props[L.PROPERTY_INNER_MULTI_DISPATCH] = lmq if isinstance(lmq, str) else \
                L.LMQ_DISPATCH_SEPARATOR.join(lmq)
        for key, value in ((L.PROPERTY_TIMER_DELIVER_MS, deliver_ms), (L.PROPERTY_TIMER_DELAY_SEC, delay_sec),
                           (L.PROPERTY_TIMER_DELAY_MS, delay_ms)):
            if value is not None:
                props[key] = str(int(value))
        properties = props or None
        queue_id = self._queue_for(producer, topic, queue_id)
        born = self.clock()
        uniq = uniq_key or producer.next_uniq_key(born)
        client = client_message(tags, keys, properties, uniq, wait=wait, delay_level=int(delay_level))
        body, sys_flag = self._compress(producer, body, compress)
        inner = self._receive(producer, topic, queue_id, body, client, sys_flag, flag, born)
        return SendResult(uniq, [self._put(inner)])

    def send_batch(self, producer: Producer, topic: str, items: Iterable, *, queue_id: int | None = None) -> SendResult:
        """``DefaultMQProducer.send(Collection)``: one put, each item a full record."""
        items = [i if isinstance(i, BatchItem) else BatchItem(**i) for i in items]
        if not items:
            raise WriterError(ErrorKind.INVALID_INPUT, "a batch needs at least one message", field="items")
        if topic.startswith(L.RETRY_GROUP_TOPIC_PREFIX):
            raise WriterError(ErrorKind.INVALID_INPUT, "retry group topics are not supported for batching",
                              field="topic")
        queue_id = self._queue_for(producer, topic, queue_id)
        born = self.clock()
        strings, uniqs = [], []
        for it in items:
            uniq = it.uniq_key or producer.next_uniq_key(born)
            strings.append(_string(client_message(it.tags, it.keys, it.properties, uniq)))
            uniqs.append(uniq)
        batch_string = batch_properties(self.config.brokerClusterName)
        store_ts = self.clock()
        sys_flag = host_flags(producer.born_host, self.store_host)
        records = []
        for it, s in zip(items, strings):
            records.append(Message(topic=topic, body=it.body, queue_id=queue_id,
                                   properties_raw=batch_item_string(s, batch_string),
                                   flag=it.flag, sys_flag=sys_flag, born_timestamp=born, born_host=producer.born_host,
                                   store_timestamp=store_ts, store_host=self.store_host))
        stored = self.writer.append_batch(records)
        return SendResult(",".join(uniqs), stored)

    # ---- schedule ------------------------------------------------------------------------------
    def pending_deliveries(self) -> list[tuple[int, int, int]]:
        """(deliver time, level, schedule queue offset) of every scheduled record not yet delivered."""
        return [(t, lvl, off) for t, lvl, off, _p in self._pending]

    def deliver_due(self, now: int | None = None) -> list[Message]:
        """ScheduleMessageService: write the real message for every scheduled record due by ``now``
        (default: the clock), in deliver-time order."""
        if now is None:
            now = self.clock.ms if isinstance(self.clock, ManualClock) else self.clock()
        elif isinstance(self.clock, ManualClock):
            self.clock.set(now)  # delivered records are stored at or after ``now``
        due = [p for p in self._pending if p[0] <= now]
        self._pending = [p for p in self._pending if p[0] > now]
        out = []
        for _t, _level, _off, phy in due:
            msg = self.writer.read_record(phy)
            props, string = reread_properties(msg.properties_raw)
            props.remove(L.PROPERTY_DELAY_TIME_LEVEL)  # after the string: the delivered record keeps DELAY
            real_topic = props.get(L.PROPERTY_REAL_TOPIC)
            real_qid = _int(props.get(L.PROPERTY_REAL_QUEUE_ID))
            inner = _Inner(real_topic, real_qid, msg.body, props, string, flag=msg.flag, sys_flag=msg.sys_flag,
                           born_timestamp=msg.born_timestamp, born_host=msg.born_host, store_host=msg.store_host,
                           reconsume_times=msg.reconsume_times)
            out.append(self._put(inner))
        return out

    # ---- transactions --------------------------------------------------------------------------
    def send_half(self, producer: Producer, topic: str, body: bytes, *, tags: str | None = None, keys=None,
                  properties: dict | None = None, queue_id: int | None = None, flag: int = 0,
                  uniq_key: str | None = None) -> SendResult:
        """``sendMessageInTransaction``: the half record in RMQ_SYS_TRANS_HALF_TOPIC/0."""
        queue_id = self._queue_for(producer, topic, queue_id)
        born = self.clock()
        uniq = uniq_key or producer.next_uniq_key(born)
        client = client_message(tags, keys, properties, uniq, producer_group=producer.group)
        body, sys_flag = self._compress(producer, body, None)
        inner = self._receive(producer, topic, queue_id, body, client, sys_flag | L.TRANSACTION_PREPARED_TYPE, flag,
                              born)
        inner.string = half_properties(inner.props, inner.topic, inner.queue_id)
        inner.sys_flag = (inner.sys_flag & ~L.TRANSACTION_MASK) | L.TRANSACTION_NOT_TYPE
        inner.topic, inner.queue_id = L.TRANS_HALF_TOPIC, 0
        half = self._put(inner)
        self._halves[half.physical_offset] = half
        return SendResult(uniq, [half])

    def unresolved_halves(self) -> list[Message]:
        """Half records sent through this broker with neither commit nor rollback yet (what the
        transaction checker would chase)."""
        return [self._halves[k] for k in sorted(self._halves)]

    def end_transaction(self, half, commit: bool) -> tuple[Message | None, Message]:
        """EndTransactionProcessor: on commit the real record (COMMIT type, prepared offset = half offset),
        then in both cases the op record that marks the half resolved.  Returns (commit record, op)."""
        half = half.record if isinstance(half, SendResult) else half
        offset = half.physical_offset
        half = self.writer.read_record(offset)  # any half in the store, also one from an earlier session
        if half.topic != L.TRANS_HALF_TOPIC or offset in self._resolved:
            raise WriterError(ErrorKind.INVALID_INPUT, f"no unresolved half message at offset {offset}",
                              field="physical_offset")
        self._halves.pop(offset, None)
        self._resolved.add(offset)
        committed = None
        if commit:
            # built before REAL_TOPIC/REAL_QID/TRAN_MSG are cleared: they stay stored
            props, string = reread_properties(half.properties_raw)
            real_topic = props.get(L.PROPERTY_REAL_TOPIC)
            real_qid = _int(props.get(L.PROPERTY_REAL_QUEUE_ID))
            for k in (L.PROPERTY_REAL_TOPIC, L.PROPERTY_REAL_QUEUE_ID, L.PROPERTY_TRANSACTION_PREPARED):
                props.remove(k)
            inner = _Inner(real_topic, real_qid, half.body, props, string, flag=half.flag,
                           sys_flag=(half.sys_flag & ~L.TRANSACTION_MASK) | L.TRANSACTION_COMMIT_TYPE,
                           born_timestamp=half.born_timestamp, born_host=half.born_host, store_host=half.store_host,
                           reconsume_times=half.reconsume_times, prepared_transaction_offset=half.physical_offset)
            committed = self._put(inner)
        return committed, self._put_op(half)

    def _put_op(self, half: Message) -> Message:
        """TransactionalMessageBridge.makeOpMessageInner: ``new Message(opTopic, "d", body)``."""
        op = op_properties()
        body = str(half.queue_offset).encode("utf-8")
        inner = _Inner(L.TRANS_OP_HALF_TOPIC, half.queue_id, body, op, _string(op), born_timestamp=self.clock(),
                       born_host=self.store_host, store_host=self.store_host)
        return self._put(inner)

    # ---- consumers -----------------------------------------------------------------------------
    def send_back(self, group: str, msg: Message, *, delay_level: int = 0,
                  max_reconsume_times: int | None = None) -> Message:
        """A consumer returns ``msg`` (a stored record it consumed) for redelivery: to %RETRY%group via the
        schedule topic, or to %DLQ%group once reconsumeTimes reaches maxReconsumeTimes (16)."""
        self.writer.register_group(group)
        stored = self.writer.read_record(msg.physical_offset)  # lookMessageByOffset
        limit = L.DEFAULT_RETRY_MAX_TIMES if max_reconsume_times is None else max_reconsume_times
        topic, props, string = send_back_properties(stored.properties_raw, stored.topic, stored.reconsume_times,
                                                    stored.msg_id, group, delay_level, limit)
        self.writer.register_topic(topic)  # retryQueueNums / DLQ_NUMS_PER_GROUP queues
        inner = _Inner(topic, 0, stored.body, props, string, flag=stored.flag, sys_flag=stored.sys_flag,
                       born_timestamp=stored.born_timestamp, born_host=stored.born_host, store_host=stored.store_host,
                       reconsume_times=stored.reconsume_times + 1)
        return self._put(inner)

    def commit_offset(self, group: str, topic: str, queue_id: int, offset: int) -> None:
        """ConsumerManageProcessor.updateConsumerOffset: ``offset`` is the next one to consume."""
        self.writer.register_group(group)
        self.writer.commit_offset(group, topic, queue_id, offset)

    # ---- 5.x: timers ----------------------------------------------------------------------------------
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

        if not self.writer.batch_topic(topic):
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


def _int(text) -> int:
    try:
        return int(text) if text is not None else 0
    except ValueError:
        return 0


__all__ = ["Broker", "Producer", "ManualClock", "SendResult", "BatchItem", "Fired", "PopResult",
           "convert_timer_record"]
