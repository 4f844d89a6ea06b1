"""Broker flows: the records a RocketMQ 4.9.x broker stores for each client action, built the way the
broker builds them and written through :class:`~store_format.write.writer.StoreWriter`.

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
"""
from __future__ import annotations

import bisect
import ipaddress
from dataclasses import dataclass, field
from typing import Iterable

from .. import layout as L
from ..codec import host_flags
from ..compression import compress as _compress
from ..errors import ErrorKind, WriterError
from ..ids import create_uniq_key
from ..javahash import JavaHashMap
from ..message import Message
from ..properties import format_properties, parse_properties
from .writer import StoreWriter, validate_topic

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


def schedule_properties(props: JavaHashMap, topic: str, queue_id: int, max_level: int) -> tuple[str, int, str] | None:
    """CommitLog.asyncPutMessage for NOT/COMMIT records with DELAY > 0: (topic, queue id, string) of the
    SCHEDULE_TOPIC_XXXX copy, or None when the record is stored as it is."""
    level = _int(props.get(L.PROPERTY_DELAY_TIME_LEVEL))
    if level <= 0:
        return None
    if level > max_level:
        level = max_level
        props.put(L.PROPERTY_DELAY_TIME_LEVEL, str(level))
    props.put(L.PROPERTY_REAL_TOPIC, topic)
    props.put(L.PROPERTY_REAL_QUEUE_ID, str(queue_id))
    return L.SCHEDULE_TOPIC, level - 1, _string(props)


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


class Broker:
    """A broker in front of a :class:`StoreWriter`.  Times come from ``clock`` (default: the writer's
    clock, else a :class:`ManualClock`); the writer stamps index names and config versions with it."""

    def __init__(self, writer: StoreWriter, clock=None):
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

    # ---- the store's put path (CommitLog.asyncPutMessage) ----------------------------------------
    def _put(self, inner: _Inner) -> Message:
        tran = inner.sys_flag & L.TRANSACTION_MASK
        if tran in (L.TRANSACTION_NOT_TYPE, L.TRANSACTION_COMMIT_TYPE):
            moved = schedule_properties(inner.props, inner.topic, inner.queue_id, self.config.max_delay_level)
            if moved is not None:
                inner.topic, inner.queue_id, inner.string = moved
        sys_flag = (inner.sys_flag & ~(L.BORNHOST_V6_FLAG | L.STOREHOST_V6_FLAG)) | \
            host_flags(inner.born_host, inner.store_host)
        stored = self.writer.append(self._record(inner, sys_flag, self.clock()))
        self._after_put(stored)
        return stored

    def _record(self, inner: _Inner, sys_flag: int, store_ts: int) -> Message:
        return Message(topic=inner.topic, body=inner.body, queue_id=inner.queue_id, properties_raw=inner.string,
                       flag=inner.flag, sys_flag=sys_flag, born_timestamp=inner.born_timestamp,
                       born_host=inner.born_host, store_timestamp=store_ts, store_host=inner.store_host,
                       reconsume_times=inner.reconsume_times,
                       prepared_transaction_offset=inner.prepared_transaction_offset)

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
             wait: bool = True, compress: str | bool | None = None, uniq_key: str | None = None) -> SendResult:
        """A producer's ``send``.  ``compress``: None = the producer's rule (bodies >= 4 KiB), a type name or
        True to force, False never.  ``uniq_key`` replays a client id instead of generating one."""
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


def _int(text) -> int:
    try:
        return int(text) if text is not None else 0
    except ValueError:
        return 0


__all__ = ["Broker", "Producer", "ManualClock", "SendResult", "BatchItem"]
