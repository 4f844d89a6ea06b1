"""StoreWriter: lay down a complete broker store the way RocketMQ's ``DefaultMessageStore`` does (4.9.x, or 5.3.3 with
the settings that turn its 5.x structures on).

One ``append`` is a CommitLog append followed by the dispatchers (:mod:`store_format.write.dispatch`), as the
broker's put path and reput service do (``CommitLog.DefaultAppendMessageCallback.doAppend`` + the dispatchers)::

    commitlog  record = codec.encode_record(...) at the segment's write position; when
               len + 8 > bytes left (END_FILE_MIN_BLANK_LENGTH) the 8-byte blank (left, BLANK magic) ends the
               segment and the record goes to the next one; segments are sparse, full-size, zero-filled;
               with enabledAppendPropCRC the __CRC32# property (``MessageExtEncoder`` reserves 20 bytes, a client's
               own is deleted first, as text; doAppend writes ``createCrc32`` of the stored record into them)
    queue      QUEUEOFFSET from the queue that owns the topic (topicQueueTable["topic-qid"]++ for a plain queue,
               the batch queue's own counter for a BatchCQ topic) for NOT/COMMIT; PREPARED/ROLLBACK get 0
    dispatch   the consume queue (:mod:`.consumequeue`), batch queue (:mod:`.batchcq`), LMQ (:mod:`.lmq`),
               timer (:mod:`.timer`), delay offsets, index (:mod:`.indexfile`), each turned on by the broker
               setting RocketMQ reads for it
    checkpoint physic/logics/index timestamps as the flush services would have left them (``FlushModel``)

``abort`` exists from the moment the writer opens the store; ``close()`` is a clean shutdown (config/*.json
persisted fastjson-style, checkpoint written, files synced, ``abort`` removed last).  ``crash()`` is
``kill -9``: ``abort`` stays, the checkpoint on disk is the one last flushed, and the preallocated next
segment is left behind.  ``append=True`` reopens a store as a restarted broker would (configs, queues and
index reopened, the commitlog walked to its valid end, the tail past the consume queues re-dispatched).
Every file lives under ``root``; topics are validated like ``TopicValidator`` and every path is checked
after resolving symlinks, so no record can name a path outside it.  Every file is written through the writer's
bounded set of open files (:mod:`store_format.write.openfiles`: at most 256 open, the least recently used closed
first), so a store of any number of queues is written under ``ulimit -n 1024``.

``append`` is the reference path, one record at a time, and ``append_batch`` one classic batch
(``CommitLog.putMessages``: one put, never split across segments).  :func:`store_format.write.bulk.append_many`
writes the same bytes for many records with array operations through the writer's bulk interface (the
methods under "the bulk path's interface" below; the writer never imports the bulk module).  Broker flows
live in :mod:`store_format.write.broker`, damage on purpose in :mod:`store_format.write.damage`, synthetic traffic in
:mod:`store_format.write.generate`.
"""
from __future__ import annotations

import dataclasses
import fcntl
import os
import shutil
import struct
from dataclasses import dataclass, fields
from itertools import compress
from operator import or_
from pathlib import Path
from typing import Callable, Iterable
from zoneinfo import ZoneInfo

from .. import layout as L
from .. import propcrc
from ..brokerconf import read_properties
from ..codec import encode_blank, encode_record, encoded_size, host_flags
from ..commitlog import list_segments, segment_name, walk_buffer
from ..fs import ReadOnlyMap
from ..config import INT_RANGE, LONG_RANGE, dumps_fastjson, number, read_config, value_text
from ..checkpoint import read_checkpoint
from ..consumequeue import discover_queues
from ..errors import ErrorKind, RecordError, StoreFormatError, WriterError
from ..javahash import JavaHashMap
from ..message import Message, body_crc32
from ..properties import delete_property
from .consumequeue import ConsumeQueues, ConsumeQueueWriter
from .dispatch import Dispatcher, DispatchRequest, overrides
from .indexfile import IndexFileWriter, IndexService, time_millis_to_human  # noqa: F401 (their old home, still imported)
from .openfiles import OpenFiles, PooledFile


# --------------------------------------------------------------------------------------------------
# Configuration


@dataclass
class WriterConfig:
    """Store settings under their broker.conf names, with RocketMQ's defaults."""

    mappedFileSizeCommitLog: int = L.DEFAULT_MAPPED_FILE_SIZE_COMMITLOG
    mappedFileSizeConsumeQueue: int = L.DEFAULT_MAPPED_FILE_SIZE_CONSUME_QUEUE
    maxHashSlotNum: int = L.DEFAULT_MAX_HASH_SLOT_NUM
    maxIndexNum: int = L.DEFAULT_MAX_INDEX_NUM
    messageDelayLevel: str = L.DEFAULT_MESSAGE_DELAY_LEVEL
    messageIndexEnable: bool = True
    brokerName: str = "broker-a"
    brokerClusterName: str = "DefaultCluster"
    storeHost: str = "127.0.0.1:10911"  # brokerIP1:listenPort as the broker stamps STOREHOST
    maxMessageSize: int = L.DEFAULT_MAX_MESSAGE_SIZE
    flushDiskType: str = "ASYNC_FLUSH"
    flushIntervalCommitLog: int = 500
    flushCommitLogThoroughInterval: int = 10 * 1000
    flushIntervalConsumeQueue: int = 1000
    flushConsumeQueueThoroughInterval: int = 60 * 1000
    defaultTopicQueueNums: int = L.DEFAULT_TOPIC_QUEUE_NUMS  # TBW102's queues; auto-created topics get min(4, this)
    autoCreateTopicEnable: bool = True
    enableConsumeQueueExt: bool = False  # consumequeue_ext/: units' tagsCode kept beside them (ConsumeQueueExt)
    mappedFileSizeConsumeQueueExt: int = L.DEFAULT_MAPPED_FILE_SIZE_CQ_EXT
    timezone: str = "UTC"  # the broker JVM's zone: index file names are local yyyyMMddHHmmssSSS
    # RocketMQ 5.x structures (store_format.write.dispatch).  Off by default: the writer is a 4.9.x broker unless these
    # say otherwise (5.3.3's own default for timerWheelEnable is true; ``generate --rocketmq 5`` turns it on)
    enabledAppendPropCRC: bool = False
    timerWheelEnable: bool = False
    mappedFileSizeTimerLog: int = L.DEFAULT_MAPPED_FILE_SIZE_TIMER_LOG
    timerPrecisionMs: int = L.DEFAULT_TIMER_PRECISION_MS
    timerRollWindowSlot: int = L.DEFAULT_TIMER_ROLL_WINDOW_SLOT
    timerMaxDelaySec: int = L.DEFAULT_TIMER_MAX_DELAY_SEC
    enableLmq: bool = False
    enableMultiDispatch: bool = False
    mapperFileSizeBatchConsumeQueue: int = L.DEFAULT_MAPPED_FILE_SIZE_BATCH_CQ
    enableCompaction: bool = True  # the compaction store of cleanup.policy=COMPACTION topics (store_format.write.compaction)
    compactionMappedFileSize: int = L.DEFAULT_COMPACTION_FILE_SIZE
    compactionCqMappedFileSize: int = L.DEFAULT_COMPACTION_CQ_FILE_SIZE

    @property
    def is_5x(self) -> bool:
        """Any 5.x store behaviour asked for (BatchCQ topics also turn it on, when registered)."""
        return self.enabledAppendPropCRC or self.timerWheelEnable or self.enableLmq or self.enableMultiDispatch

    def __post_init__(self):
        # MessageStoreConfig.getMappedFileSizeConsumeQueue rounds up to whole 20-byte units
        units = -(-int(self.mappedFileSizeConsumeQueue) // L.CQ_STORE_UNIT_SIZE)
        self.mappedFileSizeConsumeQueue = units * L.CQ_STORE_UNIT_SIZE
        for name in ("mappedFileSizeCommitLog", "mappedFileSizeConsumeQueue", "maxHashSlotNum", "maxIndexNum",
                     "maxMessageSize", "mappedFileSizeTimerLog", "timerPrecisionMs", "timerRollWindowSlot",
                     "timerMaxDelaySec"):
            if int(getattr(self, name)) <= 0:
                raise WriterError(ErrorKind.BAD_CONFIG, f"{name} must be positive, got {getattr(self, name)}",
                                  field=name)
        if self.mappedFileSizeCommitLog < L.MIN_RECORD_SIZE + L.END_FILE_MIN_BLANK_LENGTH:
            raise WriterError(ErrorKind.BAD_CONFIG, f"mappedFileSizeCommitLog {self.mappedFileSizeCommitLog} cannot "
                              "hold a single record", field="mappedFileSizeCommitLog")
        if self.mappedFileSizeTimerLog < L.TIMER_LOG_UNIT.width + L.TIMER_LOG_MIN_BLANK_LEN:
            raise WriterError(ErrorKind.BAD_CONFIG, f"mappedFileSizeTimerLog {self.mappedFileSizeTimerLog} cannot hold "
                              "a timer-log unit and its blank", field="mappedFileSizeTimerLog")
        if self.compactionCqMappedFileSize < 2 * L.BATCH_CQ_UNIT.width or self.compactionMappedFileSize <= 0:
            raise WriterError(ErrorKind.BAD_CONFIG, f"compactionCqMappedFileSize {self.compactionCqMappedFileSize} "
                              f"cannot hold a unit and its end marker, or compactionMappedFileSize "
                              f"{self.compactionMappedFileSize} is not positive", field="compactionCqMappedFileSize")
        if self.mapperFileSizeBatchConsumeQueue < L.BATCH_CQ_UNIT.width or \
                self.mapperFileSizeBatchConsumeQueue % L.BATCH_CQ_UNIT.width:
            raise WriterError(ErrorKind.BAD_CONFIG, f"mapperFileSizeBatchConsumeQueue {self.mapperFileSizeBatchConsumeQueue}"
                              f" is not a positive multiple of {L.BATCH_CQ_UNIT.width}",
                              field="mapperFileSizeBatchConsumeQueue")
        if self.maxIndexNum < 2:
            raise WriterError(ErrorKind.BAD_CONFIG, "maxIndexNum must be >= 2 (entry 0 is never used)",
                              field="maxIndexNum")
        if self.enableConsumeQueueExt and self.mappedFileSizeConsumeQueueExt < L.CQ_EXT_MIN_UNIT_SIZE + \
                L.CQ_EXT_END_BLANK:
            raise WriterError(ErrorKind.BAD_CONFIG, f"mappedFileSizeConsumeQueueExt {self.mappedFileSizeConsumeQueueExt}"
                              " cannot hold a unit", field="mappedFileSizeConsumeQueueExt")
        if self.flushDiskType not in ("ASYNC_FLUSH", "SYNC_FLUSH"):
            raise WriterError(ErrorKind.BAD_CONFIG, f"flushDiskType {self.flushDiskType!r}: ASYNC_FLUSH or SYNC_FLUSH",
                              field="flushDiskType")
        try:
            self.delay_levels
        except ValueError as e:
            raise WriterError(ErrorKind.BAD_CONFIG, str(e), field="messageDelayLevel") from None
        try:
            ZoneInfo(self.timezone)
        except Exception:
            raise WriterError(ErrorKind.BAD_CONFIG, f"unknown time zone {self.timezone!r}", field="timezone") from None
        from ..ids import parse_host  # a bad host is a config error, not a later encode failure
        try:
            parse_host(self.storeHost)
        except StoreFormatError as e:
            raise WriterError(ErrorKind.BAD_CONFIG, e.message, field="storeHost") from None

    @property
    def delay_levels(self) -> dict[int, int]:
        return L.parse_delay_levels(self.messageDelayLevel)

    @property
    def max_delay_level(self) -> int:
        return max(self.delay_levels) if self.delay_levels else 0

    @classmethod
    def from_dict(cls, values: dict) -> "WriterConfig":
        """From broker.conf-style names (e.g. a manifest's ``storeConfig``); unknown keys are ignored,
        ``brokerIP1``/``listenPort`` make ``storeHost`` when it is not given."""
        known = {f.name: f for f in fields(cls)}
        kwargs = {}
        for key, raw in values.items():
            f = known.get(key)
            if f is None:
                continue
            kwargs[key] = _coerce(key, raw, f.type)
        if "storeHost" not in kwargs and ("brokerIP1" in values or "listenPort" in values):
            ip = str(values.get("brokerIP1", "127.0.0.1")).strip()
            port = int(str(values.get("listenPort", 10911)).strip())
            kwargs["storeHost"] = f"[{ip}]:{port}" if ":" in ip else f"{ip}:{port}"
        return cls(**kwargs)

    @classmethod
    def from_file(cls, path: str | os.PathLike) -> "WriterConfig":
        """A broker.conf, read as the broker reads it (:func:`store_format.brokerconf.read_properties`)."""
        return cls.from_dict(read_properties(path))

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


def _coerce(key: str, raw, typ: str):
    try:
        if typ == "bool":
            if isinstance(raw, bool):
                return raw
            text = str(raw).strip().lower()
            if text not in ("true", "false"):
                raise ValueError(f"expected true/false, got {raw!r}")
            return text == "true"
        if typ == "int":
            if isinstance(raw, bool):
                raise ValueError("expected an integer")
            return int(str(raw).strip())
        return str(raw).strip() if isinstance(raw, str) else str(raw)
    except ValueError as e:
        raise WriterError(ErrorKind.BAD_CONFIG, f"{key}: {e}", field=key) from None


# --------------------------------------------------------------------------------------------------
# Names and paths


def validate_topic(topic: str, magic_version: int = 1) -> None:
    """``TopicValidator.validateTopic``: non-blank, only ``[%|a-zA-Z0-9_-]``, at most 127 characters
    (255 for a V2 record).  The charset alone keeps ``..``, ``/`` and ``\\`` out of directory names."""
    if not isinstance(topic, str) or not topic.strip():
        raise WriterError(ErrorKind.INVALID_INPUT, "the topic is blank", field="topic")
    bad = sorted(set(topic) - L.TOPIC_VALID_CHARS)
    if bad:
        raise WriterError(ErrorKind.INVALID_INPUT, f"topic {topic!r} contains illegal characters {''.join(bad)!r}; "
                          "allowed: %|a-zA-Z0-9_-", field="topic")
    limit = L.TOPIC_MAX_LENGTH_V1 if magic_version == 1 else L.TOPIC_MAX_LENGTH
    if len(topic) > limit:
        raise WriterError(ErrorKind.INVALID_INPUT, f"topic is {len(topic)} characters; the limit is {limit}",
                          field="topic")


def validate_queue_id(queue_id) -> None:
    if isinstance(queue_id, bool) or not isinstance(queue_id, int) or not 0 <= queue_id <= 0x7FFFFFFF:
        raise WriterError(ErrorKind.INVALID_INPUT, f"queue id {queue_id!r} must be an int in [0, 2^31)",
                          field="queue_id")


# A classic batch (MessageExtBatch) is one put of one topic-queue: 4.9.7's CommitLog.MessageExtEncoder writes
# these fields of the batch itself into every item (an item brings only its flag, body and properties).
BATCH_SHARED_FIELDS = ("topic", "queue_id", "sys_flag", "born_timestamp", "born_host", "store_timestamp",
                       "store_host", "reconsume_times")


# --------------------------------------------------------------------------------------------------
# Flush services, on the store-time axis


class FlushModel:
    """The checkpoint values the broker's flush threads would produce, driven by message store times.

    ASYNC_FLUSH (``FlushRealTimeService``): a thorough flush (flushLeastPages 0) runs ``interval`` after
    start and then every ``flushCommitLogThoroughInterval``; only a thorough flush moves
    ``MappedFileQueue.storeTimestamp``, which becomes physicMsgTimestamp.  SYNC_FLUSH: every put.
    ``logicsMsgTimestamp`` is the store time of the last record dispatched to a consume queue.
    The checkpoint reaches disk (``StoreCheckpoint.flush``) at the thorough consume-queue flush
    (1 s after start, then every 60 s), when an index file fills, and at shutdown; ``on_disk`` is
    what a crash leaves.
    """

    def __init__(self, cfg: WriterConfig):
        self.cfg = cfg
        self.start: int | None = None
        self.physic = self.logics = self.index = 0
        self.on_disk = (0, 0, 0)
        self.last_store_ts = 0
        self.now = 0

    def begin(self, start: int):
        self.start = self.now = start
        self.next_cl = start + self.cfg.flushIntervalCommitLog
        self.next_cq = start + self.cfg.flushIntervalConsumeQueue

    def advance(self, now: int):
        """Run every flush due at or before ``now`` (before the record stored at ``now``)."""
        if self.start is None:
            self.begin(now)
        while True:
            t = min(self.next_cl, self.next_cq)
            if t > now:
                break
            if self.next_cl == t:
                if self.cfg.flushDiskType == "ASYNC_FLUSH" and self.last_store_ts > 0:
                    self.physic = self.last_store_ts
                self.next_cl += self.cfg.flushCommitLogThoroughInterval
            if self.next_cq == t:
                self.snapshot()
                self.next_cq += self.cfg.flushConsumeQueueThoroughInterval
        self.now = max(self.now, now)

    def appended(self, store_ts: int):
        self.last_store_ts = store_ts
        if self.cfg.flushDiskType == "SYNC_FLUSH":
            self.physic = store_ts

    def snapshot(self):
        self.on_disk = (self.physic, self.logics, self.index)

    def checkpoint_bytes(self, values) -> bytes:
        raw = struct.pack(">3q", *values)
        return raw + bytes(L.CHECKPOINT_FILE_SIZE - len(raw))


# --------------------------------------------------------------------------------------------------
# The writer


@dataclass
class _TopicConfig:
    name: str
    queues: int  # writeQueueNums (and readQueueNums unless read_queues says otherwise)
    perm: int
    attributes: dict | None = None  # 5.x TopicConfig.attributes (e.g. queue.type=BatchCQ); 4.x has none
    # the rest of a TopicConfig as a topics.json gave it (the broker's auto-create makes these defaults)
    read_queues: int | None = None
    sys_flag: int = 0
    order: bool = False
    filter_type: str = "SINGLE_TAG"

    def to_json(self) -> dict:  # fastjson writes bean fields in alphabetical order
        out = {"order": self.order, "perm": self.perm,
               "readQueueNums": self.queues if self.read_queues is None else self.read_queues,
               "topicFilterType": self.filter_type, "topicName": self.name, "topicSysFlag": self.sys_flag,
               "writeQueueNums": self.queues}
        return {"attributes": dict(self.attributes), **out} if self.attributes else out

    @classmethod
    def from_json(cls, name: str, entry, source: str | None) -> "_TopicConfig":
        """One ``topicConfigTable`` entry of a topics.json, as fastjson fills a ``TopicConfig`` (a field it lacks
        keeps the bean's default); a value no TopicConfig can hold is refused, naming the file and the entry."""
        where = f"topicConfigTable/{name}"
        if not isinstance(entry, dict):
            raise WriterError(ErrorKind.BAD_CONFIG, f"{where} is a JSON {type(entry).__name__}, not an object",
                              file=source, field=where)
        ints = {f: _config_int(entry, f, default, source, where) for f, default in (
            ("writeQueueNums", L.TOPIC_CONFIG_DEFAULT_QUEUE_NUMS), ("readQueueNums", L.TOPIC_CONFIG_DEFAULT_QUEUE_NUMS),
            ("perm", L.PERM_READ | L.PERM_WRITE), ("topicSysFlag", 0))}
        attributes = entry.get("attributes")
        if attributes is not None and not (isinstance(attributes, dict) and all(
                isinstance(k, str) and isinstance(v, str) for k, v in attributes.items())):
            raise WriterError(ErrorKind.BAD_CONFIG, f"{where}/attributes must map names to strings (as "
                              f"\"queue.type\": \"BatchCQ\"), got {value_text(attributes)}", file=source,
                              field=f"{where}/attributes")
        order, filter_type = entry.get("order", False), entry.get("topicFilterType", "SINGLE_TAG")
        if not isinstance(order, bool) or filter_type not in ("SINGLE_TAG", "MULTI_TAG"):
            raise WriterError(ErrorKind.BAD_CONFIG, f"{where}: order must be true/false and topicFilterType "
                              f"SINGLE_TAG or MULTI_TAG, got {value_text(order)} / {value_text(filter_type)}",
                              file=source, field=where)
        write = ints["writeQueueNums"]
        return cls(name, write, ints["perm"], dict(attributes) if attributes else None,
                   None if ints["readQueueNums"] == write else ints["readQueueNums"], ints["topicSysFlag"], order,
                   filter_type)


def _config_int(entry: dict, field: str, default: int, source: str | None, where: str,
                bounds: tuple[int, int] = INT_RANGE) -> int:
    """``entry[field]`` as the Java int (or long) fastjson reads, ``default`` when absent; refused when it is not
    one."""
    problems: list = []
    value = number(entry, field, bounds, problems, None, (where, field))
    if problems:
        raise WriterError(ErrorKind.BAD_CONFIG, f"{where}/{field}: {problems[0].message}", file=source,
                          field=f"{where}/{field}")
    return default if value is None else value


def _group_json(name: str) -> dict:
    return {"brokerId": 0, "consumeBroadcastEnable": True, "consumeEnable": True, "consumeFromMinEnable": True,
            "groupName": name, "notifyConsumerIdsChangedEnable": True, "retryMaxTimes": L.DEFAULT_RETRY_MAX_TIMES,
            "retryQueueNums": L.RETRY_QUEUE_NUMS, "whichBrokerWhenConsumeSlowly": 1}


@dataclass
class _DataVersion:
    counter: int = 0
    timestamp: int = 0

    def next(self, now: int):
        self.counter += 1
        self.timestamp = now


@dataclass
class TopicTable:
    """A topics.json as the writer takes it: its ``topicConfigTable`` entries and ``dataVersion``, each value
    checked (a value no TopicConfig can hold is refused, naming the file and the entry) before a store is opened."""

    entries: dict  # topic name -> _TopicConfig
    version: _DataVersion
    source: str | None = None

    @classmethod
    def from_json(cls, data: dict, source: str | None = None, problems: list | None = None) -> "TopicTable":
        """From a parsed topics.json (the broker's own format, as fastjson writes it; :func:`store_format.config.
        read_config_file` reads one).  With ``problems`` (a list), an entry that cannot be used is left out and its
        error added there instead of raised."""
        table = data.get("topicConfigTable") or {}
        if not isinstance(table, dict):
            raise WriterError(ErrorKind.BAD_CONFIG, f"topicConfigTable is a JSON {type(table).__name__}, not an "
                              "object", file=source, field="topicConfigTable")
        entries = {}
        for name, entry in table.items():
            try:
                entries[str(name)] = _TopicConfig.from_json(str(name), entry, source)
            except WriterError as e:
                if problems is None:
                    raise
                problems.append(e)
        dv = data.get("dataVersion") or {}
        if not isinstance(dv, dict):
            raise WriterError(ErrorKind.BAD_CONFIG, f"dataVersion is a JSON {type(dv).__name__}, not an object",
                              file=source, field="dataVersion")
        try:
            version = _DataVersion(*(_config_int(dv, f, 0, source, "dataVersion", LONG_RANGE)
                                     for f in ("counter", "timestamp")))
        except WriterError as e:
            if problems is None:
                raise
            problems.append(e)
            version = _DataVersion()
        return cls(entries, version, source)


class StoreWriter:
    """Write a broker store under ``root``.

    ``clock`` (ms) is read at close/crash (flushes due by then) and for metadata before the first record;
    index file names and config data versions take the store time of the record being written, so
    output is deterministic.  ``start_time`` is when the
    broker started (flush timing; default: the first record's store time).  ``queue_offsets`` seeds
    topicQueueTable ``{(topic, queue_id): next offset}`` so a queue can begin mid-file.
    """

    def __init__(self, root: str | os.PathLike, config: WriterConfig | None = None, append: bool = False, *,
                 clock: Callable[[], int] | None = None, start_time: int | None = None,
                 queue_offsets: dict | None = None):
        self.config = config or WriterConfig()
        self.root = Path(root)
        self.clock = clock
        self._closed = False
        self._last_ts = 0  # store time of the last record written (the clock stands in while it is 0)
        # every file written is opened through this, at most MAX_OPEN_FILES at once (store_format.write.openfiles)
        self.open_files = OpenFiles()
        self.segments: dict[int, PooledFile] = {}
        self.cur_base = -1  # base offset of the segment being written
        self.cur_pos = 0
        self.queue_table: dict[tuple[str, int], int] = {}  # topicQueueTable: each plain queue's next offset
        self.flush = FlushModel(self.config)
        self.delay_offsets = JavaHashMap(initial_capacity=L.QUEUE_OFFSET_TABLE_CAPACITY, concurrent=True)
        self.consumer_offsets = JavaHashMap(initial_capacity=L.OFFSET_TABLE_CAPACITY, concurrent=True)
        self.topics = JavaHashMap(initial_capacity=L.TOPIC_TABLE_CAPACITY, concurrent=True)
        self.groups = JavaHashMap(initial_capacity=L.TOPIC_TABLE_CAPACITY, concurrent=True)
        self.topics_version = _DataVersion()
        self.groups_version = _DataVersion()
        # scheduled, not yet delivered: uniq key -> (level, cq offset, real topic, physical offset)
        self._scheduled: dict[str, tuple[int, int, str, int]] = {}
        self.delay_levels = self.config.delay_levels
        self.messages_written = 0
        self._io = None  # the bulk path's commitlog writes run on one background thread (pwritev drops the GIL)
        self._io_pending: list = []
        self._reopened = False
        self._attributed_topics = False  # a topic with attributes registered: only a 5.x broker has them
        # the structures built from the commitlog (store_format.write.dispatch): the consume queues and the index
        # always exist (a reopened store's are picked up); the rest as the configuration and the topics ask
        self.consume_queues = ConsumeQueues(self)
        self.index = IndexService(self)
        self.batch_queues = None  # BatchQueues, once a topic has queue.type=BatchCQ
        self.lmq = None  # LmqDispatch with enableLmq / enableMultiDispatch
        self.timer_enqueue = None  # TimerEnqueue with timerWheelEnable
        self.compaction = None  # CompactionStore, once a topic has cleanup.policy=COMPACTION (and enableCompaction)
        self.dispatchers: list[Dispatcher] = []
        self.stall = None  # lmq.LmqStall: a dispatch threw, the reput stopped there
        self.undispatched = 0  # records written after the stall

        if self.root.exists() and not self.root.is_dir():
            raise WriterError(ErrorKind.INVALID_INPUT, "store root exists and is not a directory", file=str(self.root))
        from ..fs import OUTPUT_MARKER  # a job's prepared output folder (runtime/output.py) counts as empty

        existing = self.root.is_dir() and any(p.name != OUTPUT_MARKER for p in self.root.iterdir())
        if existing and not append:
            raise WriterError(ErrorKind.INVALID_INPUT, "store root is not empty: a new store needs a new or empty "
                              "folder (append=True adds to the store that is there)", file=str(self.root))
        self.root.mkdir(parents=True, exist_ok=True)
        self._root_real = os.path.realpath(self.root)
        self._lock_file = self._take_lock()
        # From here until close() finishes the store says "not shut down cleanly"
        # (DefaultMessageStore.createTempFile): reopening may already re-dispatch into its files.
        (self.root / "abort").touch()
        try:
            for d in ("commitlog", "consumequeue"):  # DefaultMessageStore's constructor: ensureDirOK
                self._path(d).mkdir(exist_ok=True)
            if existing:
                self._load_configs()
            else:
                self._init_configs()
            # before a reopened store's records are walked: they dispatch through these
            if self.config.enableLmq or self.config.enableMultiDispatch:
                from .lmq import LmqDispatch

                self.lmq = LmqDispatch(self)
            if self.config.timerWheelEnable:
                from .timer import TimerEnqueue

                self.timer_enqueue = TimerEnqueue(self)
            self._turn_on_batch_queues()
            if existing:
                self._reopen_files()
            if start_time is not None:
                self.flush.begin(start_time)
                self.topics_version.timestamp = self.topics_version.timestamp or start_time
                self.groups_version.timestamp = self.groups_version.timestamp or start_time
            for (topic, qid), offset in (queue_offsets or {}).items():
                validate_topic(topic)
                validate_queue_id(qid)
                self.queue_table[(topic, qid)] = max(self.queue_table.get((topic, qid), 0), int(offset))
        except BaseException:
            self._close_maps()
            self._release_lock()
            raise

    def store_timestamp_at(self, physical_offset: int) -> int:
        """STORETIMESTAMP of the record written at ``physical_offset`` (what a dispatch request carries), read back
        from its segment (the bulk path's writes still in flight landed first)."""
        self._drain()
        size = self.config.mappedFileSizeCommitLog
        base = physical_offset - physical_offset % size
        m, pos = self.segments[base].map, physical_offset % size
        sys_flag = int.from_bytes(m[pos + L.SYS_FLAG_OFFSET:pos + L.SYS_FLAG_OFFSET + 4], "big", signed=True)
        magic = int.from_bytes(m[pos + L.MAGIC_OFFSET:pos + L.MAGIC_OFFSET + 4], "big", signed=True)
        at = pos + L.layout_for(sys_flag, L.MESSAGE_MAGICS.get(magic, 1)).offsets["store_timestamp"]
        return int.from_bytes(m[at:at + 8], "big", signed=True)

    def mapped_file(self, path: Path, size: int, create: bool = True) -> PooledFile:
        """A preallocated, sparse file to write, through the writer's open files (the timer log, wheel, batch
        queues)."""
        return self.open_files.file(path, size, create)

    # ---- the dispatchers -----------------------------------------------------------------------
    def _turn_on_batch_queues(self) -> None:
        """The batch queues, from the first topic registered with ``queue.type=BatchCQ`` (a reopened store's
        ``batchconsumequeue/`` is reopened with them); the compaction store, from the first with
        ``cleanup.policy=COMPACTION``."""
        if self.batch_queues is None and self._batch_topics():
            from .batchcq import BatchQueues

            self.batch_queues = BatchQueues(self)
            self._attributed_topics = True
        if self.compaction is None and self.config.enableCompaction and any(
                (t.attributes or {}).get(L.TOPIC_ATTRIBUTE_CLEANUP_POLICY) == L.CLEANUP_POLICY_COMPACTION
                for _, t in self.topics.items()):
            from .compaction import CompactionStore  # the last dispatcher (DefaultMessageStore's addLast)

            self.compaction = CompactionStore(self)
            self._attributed_topics = True
        self._list_dispatchers()

    def _list_dispatchers(self) -> None:
        """``dispatcherList`` in RocketMQ's order: the record's own queue (plain or batch), the LMQ units after a
        plain unit, the timer's enqueue of its queue, delay offsets, the index."""
        self.dispatchers = [d for d in (self.consume_queues, self.batch_queues, self.lmq, self.timer_enqueue,
                                        _DelayOffsets(self), self.index if self.config.messageIndexEnable else None,
                                        self.compaction)
                            if d is not None]
        self._preparers = [d for d in self.dispatchers if overrides(d, "prepare")]
        self._after_append = [d for d in self.dispatchers if overrides(d, "appended")]

    def _batch_topics(self) -> bool:
        """Any topic registered with ``queue.type=BatchCQ``."""
        return any((t.attributes or {}).get(L.TOPIC_ATTRIBUTE_QUEUE_TYPE) == L.QUEUE_TYPE_BATCH
                   for _, t in self.topics.items())

    @property
    def rocketmq5(self) -> bool:
        """The broker is a 5.x one: its configuration turns a 5.x structure on, or a topic has attributes (a 4.x
        TopicConfig has none).  It takes topics up to 255 characters; the bulk path, which vectorizes the 4.x
        dispatch only, hands its records to :meth:`append`."""
        return self.config.is_5x or self._attributed_topics

    def batch_topic(self, topic: str) -> bool:
        """A topic registered with ``queue.type=BatchCQ`` (its records go to the batch queue)."""
        return self.batch_queues is not None and self.batch_queues.owns(topic)

    def _queues_of(self, topic: str):
        """The dispatcher that owns ``topic``'s queues (ConsumeQueueStore.findOrCreateConsumeQueue by queue.type)."""
        return self.batch_queues if self.batch_topic(topic) else self.consume_queues

    @property
    def timer(self):
        """The timer store (:class:`~store_format.write.timer.TimerStoreWriter`), None without timerWheelEnable."""
        return None if self.timer_enqueue is None else self.timer_enqueue.store

    # ---- paths and lock ------------------------------------------------------------------------
    def _path(self, *parts: str) -> Path:
        p = self.root.joinpath(*parts)
        real = os.path.realpath(p)
        if os.path.commonpath([self._root_real, real]) != self._root_real:
            raise WriterError(ErrorKind.INVALID_INPUT, f"{'/'.join(parts)} resolves outside the store root",
                              file=str(p))
        return p

    def _take_lock(self):
        f = open(self._path("lock"), "a+b")
        try:
            # flock: another writer in this process; lockf (POSIX, what FileChannel.tryLock takes): a broker
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
            fcntl.lockf(f, fcntl.LOCK_EX | fcntl.LOCK_NB, 1, 0)
        except OSError:
            f.close()
            raise WriterError(ErrorKind.INVALID_INPUT, "the store is locked by another writer or a running broker",
                              file=str(self.root / "lock")) from None
        f.seek(0)
        f.truncate()
        f.write(b"lock")  # DefaultMessageStore.start writes these 4 bytes; only the OS lock matters
        f.flush()
        return f

    def now(self, at: int | None = None) -> int:
        """Wall clock for metadata (index names, data versions): ``at``, the store time of the record being
        written (the broker's own clock read at that moment), by default the last record's; the clock only
        before any record (or for a record stored at time 0)."""
        ts = self._last_ts if at is None else at
        if ts:
            return ts
        if self.clock is not None:
            return self.clock()
        return self.flush.start or 0

    # ---- configs -------------------------------------------------------------------------------
    def _init_configs(self):
        """TopicConfigManager's and SubscriptionGroupManager's built-in entries (4.9.x)."""
        c = self.config
        rw, inherit = L.PERM_READ | L.PERM_WRITE, L.PERM_INHERIT | L.PERM_READ | L.PERM_WRITE
        builtin = [("SELF_TEST_TOPIC", 1, rw)]
        if c.autoCreateTopicEnable:
            builtin.append((L.AUTO_CREATE_TOPIC_KEY_TOPIC, c.defaultTopicQueueNums, inherit))
        builtin += [("BenchmarkTest", 1024, rw), (c.brokerClusterName, 16, inherit), (c.brokerName, 1, inherit),
                    ("OFFSET_MOVED_EVENT", 1, rw), (L.SCHEDULE_TOPIC, L.SCHEDULE_TOPIC_QUEUE_NUM, rw),
                    (f"{c.brokerClusterName}_REPLY_TOPIC", 1, rw)]
        for name, queues, perm in builtin:
            self.topics.put(name, _TopicConfig(name, queues, perm))
        for g in L.DEFAULT_SUBSCRIPTION_GROUPS:
            self.groups.put(g, _group_json(g))

    def register_topic(self, topic: str, queues: int | None = None, perm: int = L.PERM_READ | L.PERM_WRITE, *,
                       at: int | None = None, attributes: dict | None = None, magic_version: int = 1) -> None:
        """Create a topic config as the broker's auto-create does, or widen it to ``queues``; the data
        version takes the time ``at`` (default :meth:`now`).  ``attributes`` (5.x, e.g. ``{"queue.type":
        "BatchCQ"}``) are set when the topic is created; a BatchCQ topic turns the writer's 5.x side on.  A 5.x
        writer, or a V2 record's topic (``magic_version`` 2: only a 5.x broker stores one), takes topics up to 255
        characters (autoMessageVersionOnTopicLen)."""
        validate_topic(topic, 2 if self.rocketmq5 or magic_version == 2 else 1)
        cur = self.topics.get(topic)
        if attributes and cur is None:
            self.topics.put(topic, _TopicConfig(topic, queues or min(L.CLIENT_DEFAULT_TOPIC_QUEUE_NUMS,
                                                                      self.config.defaultTopicQueueNums),
                                                perm, dict(attributes)))
            self.topics_version.next(self.now(at))
            self._attributed_topics = True
            self._turn_on_batch_queues()
            return
        if cur is None:
            if queues is None:
                if topic.startswith(L.RETRY_GROUP_TOPIC_PREFIX):
                    queues = L.RETRY_QUEUE_NUMS
                elif topic.startswith(L.DLQ_GROUP_TOPIC_PREFIX):
                    queues = L.DLQ_NUMS_PER_GROUP
                elif topic == L.TRANS_HALF_TOPIC:
                    queues = 1  # TransactionalMessageBridge.selectTopicConfig
                else:  # createTopicInSendMessageMethod: the client's 4, capped by TBW102's queues
                    queues = min(L.CLIENT_DEFAULT_TOPIC_QUEUE_NUMS, self.config.defaultTopicQueueNums)
            self.topics.put(topic, _TopicConfig(topic, queues, perm))
            self.topics_version.next(self.now(at))
        elif queues is not None and queues > cur.queues:
            cur.queues = queues
            if cur.read_queues is not None:
                cur.read_queues = max(cur.read_queues, queues)
            self.topics_version.next(self.now(at))

    def register_group(self, group: str, *, at: int | None = None, entry: dict | None = None) -> None:
        """A subscription group as the broker creates it (``entry``: as a subscriptionGroup.json holds it, kept
        verbatim, the group's own settings included)."""
        if group not in self.groups:
            self.groups.put(group, _group_json(group) if entry is None else entry)
            self.groups_version.next(self.now(at))

    def commit_offset(self, group: str, topic: str, queue_id: int, offset: int) -> None:
        """``ConsumerOffsetManager.commitOffset``: the next queue offset ``group`` will consume (on a 5.x writer a
        topic up to 255 characters: its long retry topics are V2 records' and have offsets too)."""
        validate_topic(topic, 2 if self.rocketmq5 else 1)
        validate_queue_id(queue_id)
        if self.lmq is not None and self.lmq.commit_offset(group, topic, offset):
            return  # an %LMQ% group with enableLmq: LmqConsumerOffsetManager keeps one offset per topic@group
        key = f"{topic}@{group}"
        table = self.consumer_offsets.get(key)
        if table is None:
            table = JavaHashMap(initial_capacity=L.QUEUE_OFFSET_TABLE_CAPACITY, concurrent=True)
            self.consumer_offsets.put(key, table)
        table.put(int(queue_id), int(offset))

    def _register_for_record(self, msg: Message):
        """Topic/group configs the broker would hold after accepting this record."""
        self.register_record(msg.topic, msg.queue_id, msg.properties.get(L.PROPERTY_REAL_TOPIC),
                             msg.properties.get(L.PROPERTY_REAL_QUEUE_ID, ""), at=msg.store_timestamp,
                             magic_version=msg.magic_version)

    def register_record(self, topic: str, queue_id: int, real_topic: str | None = None, real_queue_id: str = "", *,
                        at: int, magic_version: int = 1) -> None:
        """Topic/group configs the broker would hold after accepting a record of ``topic``/``queue_id``
        (with these REAL_TOPIC / REAL_QID properties) stored at ``at`` as a V``magic_version`` record."""
        real, real_qid = real_topic, real_queue_id
        if real and real != topic and not self._known(real, real_qid):  # created before the record moved
            try:
                validate_topic(real)
                self._register_record_topic(real, int(real_qid) if real_qid.isdigit() else 0, at)
            except WriterError:
                pass  # a REAL_TOPIC the broker would have refused: the record itself is still valid
        if topic != L.TRANS_OP_HALF_TOPIC and not self._known(topic, queue_id):  # op topic: never registered
            self._register_record_topic(topic, queue_id, at, magic_version)

    def _known(self, topic: str, queue_id) -> bool:
        """Already registered with room for ``queue_id`` (then registering again changes nothing)."""
        cur = self.topics.get(topic)
        if cur is None:
            return False
        if isinstance(queue_id, str):
            queue_id = int(queue_id) if queue_id.isdigit() else 0
        return queue_id < cur.queues and not topic.startswith((L.RETRY_GROUP_TOPIC_PREFIX, L.DLQ_GROUP_TOPIC_PREFIX))

    def _register_record_topic(self, topic: str, queue_id: int, at: int, magic_version: int = 1):
        for prefix in (L.RETRY_GROUP_TOPIC_PREFIX, L.DLQ_GROUP_TOPIC_PREFIX):
            if topic.startswith(prefix) and len(topic) > len(prefix):
                self.register_group(topic[len(prefix):], at=at)
        cur = self.topics.get(topic)
        if cur is None:
            self.register_topic(topic, at=at, magic_version=magic_version)
            cur = self.topics.get(topic)
        if queue_id >= cur.queues:
            self.register_topic(topic, queue_id + 1, at=at, magic_version=magic_version)

    def config_texts(self) -> dict[str, str]:
        """The config/*.json files as fastjson writes them."""
        topics = {"dataVersion": dataclasses.asdict(self.topics_version),
                  "topicConfigTable": {k: v.to_json() for k, v in self.topics.items()}}
        groups = {"dataVersion": dataclasses.asdict(self.groups_version),
                  "subscriptionGroupTable": self.groups.to_dict()}
        offsets = {"offsetTable": {k: v.to_dict() for k, v in self.consumer_offsets.items()}}
        texts = {
            "topics.json": dumps_fastjson(topics),
            "subscriptionGroup.json": dumps_fastjson(groups),
            "consumerOffset.json": dumps_fastjson(offsets),
            "delayOffset.json": dumps_fastjson({"offsetTable": self.delay_offsets.to_dict()}),
            "consumerFilter.json": dumps_fastjson({"filterDataByTopic": {}}),
        }
        for d in self.dispatchers:
            d.config_texts(texts, offsets)
        return texts

    def _persist_configs(self):
        d = self._path("config")
        d.mkdir(exist_ok=True)
        for name, text in self.config_texts().items():
            _string_to_file(text, d / name)

    def adopt_topics(self, topics: "TopicTable") -> None:
        """Start from a topics.json (:meth:`TopicTable.from_json`), loaded as TopicConfigManager loads it at start:
        its entries over the built-in topics, its data version.  A new store only, before its first record (a
        reopened store keeps its own config/topics.json).  A BatchCQ topic turns the 5.x side on."""
        if self._reopened or self.messages_written or self.cur_base >= 0:
            raise WriterError(ErrorKind.INVALID_INPUT, "topics are adopted by a new store before its first record; a "
                              "reopened store keeps its own config/topics.json", file=topics.source)
        self._load_topics(topics)
        self._turn_on_batch_queues()

    def _load_topics(self, topics: "TopicTable") -> None:
        for name, tc in topics.entries.items():
            self.topics.put(name, tc)
        self.topics_version = dataclasses.replace(topics.version)

    # ---- reopening -----------------------------------------------------------------------------
    def _load_configs(self):
        """append=True, first step: the configs a restarted broker loads (topics with their attributes, groups,
        consumer and delay offsets) and the checkpoint.  :meth:`_reopen_files` follows, once the dispatchers are
        known."""
        self._reopened = True
        cfgdir = self.root / "config"
        self._init_configs()
        self._load_topics(TopicTable.from_json(_config_data(cfgdir, "topics.json"), str(cfgdir / "topics.json")))
        groups = _config_data(cfgdir, "subscriptionGroup.json")
        for name, g in (groups.get("subscriptionGroupTable") or {}).items():
            self.groups.put(name, g)
        dv = groups.get("dataVersion") or {}
        self.groups_version = _DataVersion(int(dv.get("counter", 0)), int(dv.get("timestamp", 0)))
        for key, table in (_config_data(cfgdir, "consumerOffset.json").get("offsetTable") or {}).items():
            m = JavaHashMap(initial_capacity=L.QUEUE_OFFSET_TABLE_CAPACITY, concurrent=True)
            for q, o in table.items():
                m.put(int(q), int(o))
            self.consumer_offsets.put(key, m)
        for level, off in (_config_data(cfgdir, "delayOffset.json").get("offsetTable") or {}).items():
            self.delay_offsets.put(int(level), int(off))
        if (self.root / "checkpoint").is_file():
            cp = read_checkpoint(self.root / "checkpoint")
            self.flush.physic, self.flush.logics, self.flush.index = (
                cp.physic_msg_timestamp, cp.logics_msg_timestamp, cp.index_msg_timestamp)
            self.flush.snapshot()

    def _reopen_files(self):
        """append=True, second step: pick up the store where it ends, as a restarted broker would: consume
        queues (batch ones with the 5.x side) and the last index file reopened, the commitlog walked to its valid
        end, and records past the queues' reach dispatched again (with RocketMQ's own dedupe: a queue's
        maxPhysicOffset, the index's endPhyOffset)."""
        c = self.config
        # consume queues as they are on disk (a folder name the charset allows cannot leave the root)
        for topic, qid in discover_queues(self.root / "consumequeue"):
            validate_topic(topic, 2)
            self.consume_queues.reopen(topic, qid)
        self.index.reopen()
        # the commitlog: walk every segment as recovery does, continue at the end.  Dispatch resumes where
        # DefaultMessageStore.start() puts the reput service: the largest physical offset any consume queue
        # reached (the commitlog's start when there is none), so deleting consumequeue/ rebuilds it.
        segs = list_segments(self.root / "commitlog")
        # truncateDirtyFiles: a preallocated segment a crash left behind (all zeros) is dropped
        while len(segs) > 1 and _all_zero(segs[-1].path):
            segs.pop().path.unlink()
        reach = self.consume_queues.reach() + (self.batch_queues.reach() if self.batch_queues is not None else [])
        self._reput_from = max(reach) if reach else (segs[0].base_offset if segs else 0)
        for i, seg in enumerate(segs):
            if seg.length != c.mappedFileSizeCommitLog:
                raise WriterError(ErrorKind.BAD_GEOMETRY, f"segment is {seg.length} bytes, mappedFileSizeCommitLog "
                                  f"is {c.mappedFileSizeCommitLog}", file=str(seg.path))
            if i and seg.base_offset != segs[i - 1].base_offset + c.mappedFileSizeCommitLog:
                raise WriterError(ErrorKind.BAD_GEOMETRY, "commitlog segments are not contiguous", file=str(seg.path))
            with ReadOnlyMap(seg.path) as rm:
                last = None
                for frame in walk_buffer(rm.buf, seg.name, seg.base_offset, decode=True, check_crc=True):
                    last = frame
                    if frame.kind == "message":
                        self._replay(frame.message)
            self.segments[seg.base_offset] = self.open_files.file(seg.path, c.mappedFileSizeCommitLog, create=False)
            self.cur_base, self.cur_pos = seg.base_offset, last.file_position
            if last.kind == "blank":
                self.cur_pos = c.mappedFileSizeCommitLog
            if last.kind == "stop" and i != len(segs) - 1:
                raise WriterError(ErrorKind.INVALID_INPUT, f"the commitlog's valid data ends inside {seg.name} "
                                  f"({last.stop_kind} at {last.file_position}) but later segments exist; appending "
                                  "would hide them", file=str(seg.path), position=last.file_position)

    def _replay(self, msg: Message):
        """State and dispatch for a record already in the commitlog."""
        if msg.dispatchable:
            self._queues_of(msg.topic).replayed(msg)  # its queue's counter moves past it
        self._last_ts = msg.store_timestamp
        self.flush.advance(msg.store_timestamp)
        self._register_for_record(msg)
        if msg.physical_offset >= self._reput_from:
            self._dispatch(msg)
        elif msg.dispatchable:
            self._track_schedule(msg)
        self.flush.appended(msg.store_timestamp)

    # ---- commitlog -----------------------------------------------------------------------------
    def _segment(self, base: int) -> PooledFile:
        m = self.segments.get(base)
        if m is None:
            if self._io_pending:
                self._drain()  # writes to the older segments use their descriptors
            if self.segments:  # the segment written so far (the older ones were released when it came)
                self.segments[next(reversed(self.segments))].release()
            d = self._path("commitlog")
            d.mkdir(exist_ok=True)
            m = self.open_files.file(d / segment_name(base), self.config.mappedFileSizeCommitLog, create=True)
            self.segments[base] = m
        return m

    def _segment_at(self, physical_offset: int) -> tuple[int, PooledFile]:
        """(base offset, mapping) of the segment this writer holds that contains ``physical_offset``."""
        base = physical_offset - physical_offset % self.config.mappedFileSizeCommitLog
        seg = self.segments.get(base)
        if seg is None:
            raise WriterError(ErrorKind.OUT_OF_RANGE, f"no segment holds offset {physical_offset}",
                              position=physical_offset, field="physical_offset")
        return base, seg

    def _check_fits(self, size: int, what: str) -> None:
        """A put of ``size`` bytes must fit in an empty segment, 8 bytes kept for the end-of-file blank."""
        seg = self.config.mappedFileSizeCommitLog
        if size + L.END_FILE_MIN_BLANK_LENGTH > seg:
            raise WriterError(ErrorKind.INVALID_INPUT, f"{what} is {size} bytes; a {seg}-byte commitlog segment "
                              f"holds at most {seg - L.END_FILE_MIN_BLANK_LENGTH}", field="store_size")

    def check_record(self, msg: Message) -> int:
        """Refuse what the broker would refuse (or could never place); returns the encoded size."""
        validate_topic(msg.topic, msg.magic_version)
        validate_queue_id(msg.queue_id)
        props_len = len(msg.properties_raw.encode("utf-8"))
        if props_len > L.MAX_PROPERTIES_LENGTH:
            raise WriterError(ErrorKind.INVALID_INPUT, f"properties are {props_len} bytes; PROPERTIESLENGTH is a "
                              f"short, at most {L.MAX_PROPERTIES_LENGTH}", field="properties")
        if len(msg.body) > self.config.maxMessageSize:
            raise WriterError(ErrorKind.INVALID_INPUT, f"body is {len(msg.body)} bytes; maxMessageSize is "
                              f"{self.config.maxMessageSize}", field="body")
        size = encoded_size(msg)
        if size > self.config.maxMessageSize + L.ENCODER_BODY_RESERVE:
            raise WriterError(ErrorKind.INVALID_INPUT, f"record is {size} bytes; the limit is maxMessageSize + 64 KiB "
                              f"({self.config.maxMessageSize + L.ENCODER_BODY_RESERVE})", field="store_size")
        self._check_fits(size, "record")
        return size

    def check_batch(self, records: list[Message]) -> int:
        """Refuse what ``CommitLog.putMessages`` refuses of ``records`` as one put (a classic batch,
        ``MessageExtBatch``), or could never place; returns the batch's total size.  4.9.7's batch encoder
        writes the batch's own :data:`BATCH_SHARED_FIELDS` into every item (each item keeps only its flag,
        body and properties) and prepared offset 0 (V1 records); putMessages takes transaction type NOT only."""
        if not records:
            raise WriterError(ErrorKind.INVALID_INPUT, "a batch needs at least one record", field="batch")
        total = sum(self.check_record(r) for r in records)
        first = records[0]
        for i, r in enumerate(records):
            for name in BATCH_SHARED_FIELDS:
                if getattr(r, name) != getattr(first, name):
                    raise WriterError(ErrorKind.INVALID_INPUT, f"batch item {i + 1}: {name} {getattr(r, name)!r} "
                                      f"differs from the first item's {getattr(first, name)!r}; putMessages gives "
                                      "every item of a batch the same one", field=name)
            if r.magic_version != 1:
                raise WriterError(ErrorKind.INVALID_INPUT, f"batch item {i + 1}: magic version {r.magic_version}; "
                                  "a 4.9.x batch is stored as V1 records", field="magic_version")
            if r.prepared_transaction_offset:
                raise WriterError(ErrorKind.INVALID_INPUT, f"batch item {i + 1}: prepared_transaction_offset "
                                  f"{r.prepared_transaction_offset}; a batch item's is 0",
                                  field="prepared_transaction_offset")
        if first.sys_flag & L.TRANSACTION_MASK != L.TRANSACTION_NOT_TYPE:
            raise WriterError(ErrorKind.INVALID_INPUT, f"transaction type {first.tran_type}: putMessages refuses a "
                              "batch that is not of type NOT (MESSAGE_ILLEGAL)", field="sys_flag")
        self._check_fits(total, "batch")
        return total

    # ---- the write position: one home for the roll rule (append, append_batch and the bulk path) ---------
    def room(self) -> int:
        """Bytes a put may still take in the segment being written: ``maxBlank - END_FILE_MIN_BLANK_LENGTH``
        (doAppend keeps 8 bytes for the end-of-file blank); a put that needs more goes to the next segment
        (:meth:`roll`), a batch as a whole.  Opens the first segment of a new store."""
        if self.cur_base < 0:
            self.cur_base, self.cur_pos = 0, 0
            self._segment(0)
        return self.config.mappedFileSizeCommitLog - self.cur_pos - L.END_FILE_MIN_BLANK_LENGTH

    def roll(self) -> None:
        """End the segment being written as doAppend does for a put that does not fit: the blank record
        (TOTALSIZE = the bytes left, BLANK magic; only those 8 bytes are written) at the write position; the
        write position moves to the start of the next segment."""
        self.room()
        seg_size = self.config.mappedFileSizeCommitLog
        left = seg_size - self.cur_pos
        if left >= L.END_FILE_MIN_BLANK_LENGTH:  # none left: a reopened store whose last segment ended in a blank
            self.segments[self.cur_base].write(self.cur_pos, encode_blank(left))
        self.cur_base += seg_size
        self.cur_pos = 0
        self._segment(self.cur_base)

    def reserve(self, nbytes: int) -> int:
        """Claim ``nbytes`` (at most :meth:`room`) at the write position; returns their physical offset.  The
        records are written there by the caller (:meth:`append`) or later (:meth:`write_commitlog`)."""
        if nbytes > self.room():
            raise WriterError(ErrorKind.OUT_OF_RANGE, f"{nbytes} bytes do not fit in the {self.room()} the segment "
                              "has left; roll() first", position=self.cur_base + self.cur_pos)
        phy = self.cur_base + self.cur_pos
        self.cur_pos += nbytes
        return phy

    def append(self, record: Message) -> Message:
        """Store one record as ``CommitLog.putMessage`` would, then dispatch it.  The record's topic,
        queue id, flags, timestamps, hosts, reconsume times, prepared offset, body and properties string are
        kept; queue offset, physical offset, body CRC and size are assigned.  Returns the stored record."""
        self.check_open()
        record = self._prepare(record)
        try:
            size = self.check_record(record)
            sys_flag = record.sys_flag
            if sys_flag & (L.BORNHOST_V6_FLAG | L.STOREHOST_V6_FLAG) != host_flags(record.born_host, record.store_host):
                raise WriterError(ErrorKind.INVALID_INPUT, f"sys_flag 0x{sys_flag:X} IPv6 bits disagree with hosts "
                                  f"{record.born_host} / {record.store_host}", field="sys_flag")
        except RecordError as e:
            raise WriterError(e.kind, e.message, field=e.field) from None
        except StoreFormatError as e:
            if isinstance(e, WriterError):
                raise
            raise WriterError(ErrorKind.INVALID_INPUT, e.message, field=e.field) from None
        ts = record.store_timestamp
        self.flush.advance(ts)
        self._register_for_record(record)
        if size > self.room():
            self.roll()
        phy = self.reserve(size)
        # PREPARED/ROLLBACK: not consumed, not counted
        queue_offset = self._queues_of(record.topic).take_queue_offset(record) if record.dispatchable else 0
        stored = dataclasses.replace(record, queue_offset=queue_offset, physical_offset=phy, body_crc=None,
                                     store_size=None, segment=None, file_position=None)
        data = encode_record(stored)
        if self.config.enabledAppendPropCRC:  # doAppend's CRC: over the record as stored, into its last 20 bytes
            data = bytearray(data)
            propcrc.patch_crc(data)
            data = bytes(data)
            stored.properties_raw = stored.properties_raw[:-L.CRC32_RESERVED_LEN] + \
                data[-L.CRC32_RESERVED_LEN:].decode("ascii")
            stored.properties = None
            stored.__post_init__()
        base = self.cur_base
        self.segments[base].write(phy - base, data)
        stored.store_size = len(data)
        stored.body_crc = body_crc32(record.body)
        stored.segment, stored.file_position = segment_name(base), phy - base
        for d in self._after_append:
            d.appended(stored)
        self._dispatch(stored)
        self.flush.appended(ts)
        self.appended(1, at=ts)
        return stored

    def append_all(self, records: Iterable[Message]) -> list[Message]:
        return [self.append(r) for r in records]

    def append_batch(self, records: list[Message]) -> list[Message]:
        """A classic batch (``CommitLog.putMessages``, :meth:`check_batch`): one put, so the records never
        straddle a segment; when the whole batch does not fit, the blank goes where the batch would have
        started, even if its first records would have fitted.  Queue offsets are consecutive."""
        self.check_open()
        if self.check_batch(records) > self.room():
            self.roll()
        return [self.append(r) for r in records]

    # ---- the bulk path's interface (store_format.write.bulk) ---------------------------------------------
    def check_open(self) -> None:
        if self._closed:
            raise WriterError(ErrorKind.INVALID_INPUT, "the writer is closed", file=str(self.root))

    def appended(self, count: int, *, at: int) -> None:
        """Count ``count`` more records stored, the last of them at store time ``at`` (what :meth:`now` gives
        from then on)."""
        self.messages_written += count
        self._last_ts = at

    _IO_MAX_PENDING = 2  # bounds the memory held by writes in flight

    def write_commitlog(self, physical_offset: int, pieces: list) -> None:
        """Write ``pieces`` back to back at ``physical_offset`` (space :meth:`reserve` claimed) on the writer's
        I/O thread, in submission order (pwritev drops the GIL); errors surface at the next drain (a read, a
        new segment, close)."""
        base, mapped = self._segment_at(physical_offset)
        if self._io is None:
            from concurrent.futures import ThreadPoolExecutor
            self._io = ThreadPoolExecutor(max_workers=1, thread_name_prefix="store-writer-io")
        while len(self._io_pending) >= self._IO_MAX_PENDING:
            self._io_pending.pop(0).result()
        mapped.pin()  # open until the I/O thread has written (the writer's thread may close files for room)
        self._io_pending.append(self._io.submit(_write_pinned, mapped, physical_offset - base, pieces))

    def _drain(self) -> None:
        """Wait for every background write (before reading records back, syncing, or closing)."""
        pending, self._io_pending = self._io_pending, []
        for f in pending:
            f.result()

    def read_record(self, physical_offset: int) -> Message:
        """Decode a record this writer holds (the broker's ``lookMessageByOffset``)."""
        from ..codec import decode_record
        self._drain()
        base, seg = self._segment_at(physical_offset)
        return decode_record(seg.map, physical_offset - base, file=segment_name(base))

    # ---- dispatch ------------------------------------------------------------------------------
    def consume_queue(self, topic: str, queue_id: int) -> ConsumeQueueWriter:
        """The consume queue of ``topic``/``queue_id`` (created on first use, as findConsumeQueue does)."""
        return self.consume_queues.queue(topic, queue_id)

    @property
    def cqs(self) -> dict:
        """(topic, queue id) -> the plain consume queues written or reopened."""
        return self.consume_queues.cqs

    def _prepare(self, record: Message) -> Message:
        """The record as the put path turns it before it is sized: a client's own __CRC32# deleted, as text
        (``MessageUtils.deleteProperty``, with enabledAppendPropCRC), each dispatcher's part (INNER_BASE of a
        BatchCQ inner batch, LMQ's INNER_MULTI_QUEUE_OFFSET), then the CRC reservation (``MessageExtEncoder``).
        Counters are only read here."""
        crc = self.config.enabledAppendPropCRC
        if not (crc or self._preparers):
            return record
        raw = record.properties_raw
        if crc:
            raw = delete_property(raw, L.PROPERTY_CRC32)
        for d in self._preparers:
            raw = d.prepare(record, raw)
        if crc:
            raw = propcrc.with_crc_reservation(raw)
        return dataclasses.replace(record, properties_raw=raw, properties=None) if raw != record.properties_raw \
            else record

    def _dispatch(self, msg: Message):
        """The reput of one stored record: each dispatcher in turn (``DefaultMessageStore.doDispatch``); nothing once
        a dispatch has stalled."""
        if self.stall is not None:
            self.undispatched += 1
            return
        request = DispatchRequest(msg, msg.dispatch_tags_code(self.delay_levels) if msg.dispatchable else 0,
                                  self._queues_of(msg.topic))
        for d in self.dispatchers:
            if not d.dispatch(request):
                return

    def _track_schedule(self, msg: Message):
        self._track_fields(msg.topic, msg.queue_id, msg.queue_offset, msg.physical_offset, msg.uniq_key,
                           msg.properties.get(L.PROPERTY_REAL_TOPIC))

    def _track_fields(self, topic: str, queue_id: int, queue_offset: int, physical_offset: int, uniq: str | None,
                      real: str | None):
        """delayOffset.json: a scheduled record's UNIQ_KEY reappearing in its REAL_TOPIC is its delivery
        (ScheduleMessageService.messageTimeup keeps the properties), so the level's offset moves past it."""
        if not uniq:
            return
        if topic == L.SCHEDULE_TOPIC:
            if real:
                self._scheduled[uniq] = (queue_id + 1, queue_offset, real, physical_offset)
            return
        pending = self._scheduled.get(uniq)
        if pending is not None and pending[2] == topic:
            del self._scheduled[uniq]
            level, cq_offset = pending[0], pending[1]
            if cq_offset + 1 > self.delay_offsets.get(level, 0):
                self.delay_offsets.put(level, cq_offset + 1)

    def track_schedule_many(self, topics: list, queue_ids: list, queue_offsets: list, physical_offsets: list,
                            uniqs: list, reals: list) -> None:
        """The delayOffset.json bookkeeping of dispatched records, given as columns in store order (topic,
        queue id, queue offset, physical offset, UNIQ_KEY, REAL_TOPIC).  Only a record that is scheduled or
        whose UNIQ_KEY is can change anything; the others are passed over in C."""
        scheduled_here = set(compress(uniqs, map(L.SCHEDULE_TOPIC.__eq__, topics)))
        might = map(or_, map(self._scheduled.__contains__, uniqs), map(scheduled_here.__contains__, uniqs))
        for i in compress(range(len(uniqs)), might):
            self._track_fields(topics[i], queue_ids[i], queue_offsets[i], physical_offsets[i], uniqs[i], reals[i])

    def last_index_file(self, *, at: int) -> IndexFileWriter:
        """The index file to put into (:meth:`IndexService.last_index_file`)."""
        return self.index.last_index_file(at=at)

    @property
    def index_file(self) -> IndexFileWriter | None:
        return self.index.index_file

    @property
    def index_names(self) -> list[str]:
        return self.index.index_names

    # ---- shutdown ------------------------------------------------------------------------------
    def _close_maps(self):
        self._drain()
        if self._io is not None:
            self._io.shutdown(wait=True)
            self._io = None
        for m in self.segments.values():
            m.close()
        self.consume_queues.close_files()
        self.index.close_files()
        self.open_files.close_all()

    def close(self) -> None:
        """Clean shutdown: configs persisted, checkpoint flushed, everything synced, then ``abort`` removed."""
        if self._closed:
            return
        if self.clock is not None:
            self.flush.advance(self.clock())
        self._persist_configs()
        self._write_file("checkpoint", self.flush.checkpoint_bytes((self.flush.physic, self.flush.logics,
                                                                    self.flush.index)))
        self._close_dispatchers(clean=True)
        self._close_maps()
        self._closed = True
        if self.stall is None:  # a stalled reput keeps abort ("CommitLog have not finish to be dispatched")
            (self.root / "abort").unlink(missing_ok=True)
        self._release_lock()

    def crash(self) -> None:
        """What ``kill -9`` leaves: ``abort`` present, the checkpoint as last flushed (stale), the mapped
        data intact (the page cache survives the process), and the preallocated next segment."""
        if self._closed:
            return
        if self.clock is not None:
            self.flush.advance(self.clock())
        self._persist_configs()  # the broker persists configs every few seconds
        self._write_file("checkpoint", self.flush.checkpoint_bytes(self.flush.on_disk))
        self._close_dispatchers(clean=False)
        if self.cur_base >= 0:  # AllocateMappedFileService had the next segment ready
            self._segment(self.cur_base + self.config.mappedFileSizeCommitLog)
        self._close_maps()
        self._closed = True
        self._release_lock()

    def _close_dispatchers(self, clean: bool) -> None:
        closing = [d for d in self.dispatchers if overrides(d, "close")]
        if closing:
            now = self.now()
            for d in closing:
                d.close(now, clean)

    def _write_file(self, name: str, data: bytes):
        with open(self._path(name), "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())

    def _release_lock(self):
        try:
            fcntl.lockf(self._lock_file, fcntl.LOCK_UN, 1, 0)
            fcntl.flock(self._lock_file, fcntl.LOCK_UN)
        finally:
            self._lock_file.close()

    def __enter__(self):
        return self

    def __exit__(self, exc_type, exc, tb):
        if exc_type is None:
            self.close()
        else:  # an interrupted write must not look like a clean shutdown
            self.crash()
        return False


class _DelayOffsets(Dispatcher):
    """ScheduleMessageService's progress (delayOffset.json): a dispatched record's delivery moves its level on
    (:meth:`StoreWriter._track_schedule`)."""

    def __init__(self, writer: StoreWriter):
        self.writer = writer

    def dispatch(self, request: DispatchRequest) -> bool:
        if request.msg.dispatchable:
            self.writer._track_schedule(request.msg)
        return True


def _config_data(config_dir: Path, name: str) -> dict:
    """A config file the reopened store's broker had loaded ({} when absent or unreadable, as the broker starts
    empty then).  One too large to parse within memory is refused: the store would be closed with it rewritten
    empty."""
    cfg = read_config(config_dir, name)
    big = next((e for e in cfg.errors if e.kind is ErrorKind.TOO_LARGE), None)
    if big is not None:
        raise WriterError(ErrorKind.TOO_LARGE, f"{big.message}; appending would rewrite it without its entries",
                          file=big.file)
    return cfg.data or {}


def _write_pinned(mapped: PooledFile, pos: int, pieces: list) -> int:
    """The I/O thread's write: ``mapped`` was pinned open for it."""
    try:
        return mapped.writev(pos, pieces)
    finally:
        mapped.unpin()


def _all_zero(path: Path, chunk: int = 1 << 20) -> bool:
    """True when a file holds only zero bytes (holes are skipped without reading them)."""
    with open(path, "rb") as f:
        fd = f.fileno()
        size = os.fstat(fd).st_size
        pos = 0
        while pos < size:
            try:
                pos = os.lseek(fd, pos, os.SEEK_DATA)
            except OSError:  # ENXIO: nothing but holes from here
                return True
            f.seek(pos)
            data = f.read(chunk)
            if data.count(0) != len(data):
                return False
            pos += len(data)
    return True


def _string_to_file(text: str, path: Path) -> None:
    """``MixAll.string2File``: write .tmp, keep the previous content as .bak, then rename."""
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text, encoding="utf-8")
    if path.exists():
        shutil.copyfile(path, path.with_name(path.name + ".bak"))
        path.unlink()
    tmp.rename(path)
