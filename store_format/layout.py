"""Every fixed layout and constant of the RocketMQ store, declared once.

CommitLog record (RocketMQ ``CommitLog.MessageExtEncoder`` / ``MessageDecoder.decode``; big-endian)::

     1 TOTALSIZE 4 | 2 MAGICCODE 4 | 3 BODYCRC 4 | 4 QUEUEID 4 | 5 FLAG 4 | 6 QUEUEOFFSET 8 |
     7 PHYSICALOFFSET 8 | 8 SYSFLAG 4 | 9 BORNTIMESTAMP 8 | 10 BORNHOST 8/20 | 11 STORETIMESTAMP 8 |
    12 STOREHOST 8/20 | 13 RECONSUMETIMES 4 | 14 PREPAREDTRANSACTIONOFFSET 8 | 15 BODYLENGTH 4 |
    16 BODY n | 17 TOPICLENGTH 1 (V1) / 2 (V2) | 18 TOPIC n | 19 PROPERTIESLENGTH 2 | 20 PROPERTIES n

A host is 4 (IPv4) or 16 (IPv6) address bytes plus a 4-byte int port; the width is chosen by the
sysflag bits BORNHOST_V6 (0x10) and STOREHOST_V6 (0x20).  The topic length is a signed byte for
magic V1 and a signed short for magic V2 (RocketMQ >= 5.1.0).  The record layout below (RECORD_FIELDS)
is the only place the order and widths are written; the encoder, the scalar decoder, the vectorized
kernels and docs/record-layout.md all derive offsets from it through :func:`record_layout`.
"""
from __future__ import annotations

import struct
from dataclasses import dataclass
from functools import lru_cache

# --------------------------------------------------------------------------------------------------
# Magic codes (CommitLog / MessageDecoder)
MAGIC_V1 = -626843481  # 0xDAA320A7
MAGIC_V2 = -626843477  # 0xDAA320AB, RocketMQ >= 5.1.0: 2-byte topic length
BLANK_MAGIC = -875286124  # 0xCBD43194, end-of-file blank
MESSAGE_MAGICS = {MAGIC_V1: 1, MAGIC_V2: 2}  # magic -> magic_version
MAGIC_OF_VERSION = {1: MAGIC_V1, 2: MAGIC_V2}
END_FILE_MIN_BLANK_LENGTH = 8  # a message must leave 8 bytes free for the blank (DefaultAppendMessageCallback)

# --------------------------------------------------------------------------------------------------
# The Java types the broker holds numbers in, as (lowest, highest): long for offsets, times and lags; int for queue
# ids, counts, most settings and a file size (mappedFileSize...)
JAVA_INT = (-2**31, 2**31 - 1)
JAVA_LONG = (-2**63, 2**63 - 1)

# --------------------------------------------------------------------------------------------------
# MessageSysFlag
COMPRESSED_FLAG = 0x1
MULTI_TAGS_FLAG = 0x2
TRANSACTION_NOT_TYPE = 0x0
TRANSACTION_PREPARED_TYPE = 0x4
TRANSACTION_COMMIT_TYPE = 0x8
TRANSACTION_ROLLBACK_TYPE = 0xC
TRANSACTION_MASK = 0xC
BORNHOST_V6_FLAG = 0x10
STOREHOST_V6_FLAG = 0x20
NEED_UNWRAP_FLAG = 0x40
INNER_BATCH_FLAG = 0x80
COMPRESSION_LZ4_TYPE = 0x100
COMPRESSION_ZSTD_TYPE = 0x200
COMPRESSION_ZLIB_TYPE = 0x300
COMPRESSION_TYPE_MASK = 0x700

TRAN_TYPE_NAMES = {
    TRANSACTION_NOT_TYPE: "NOT",
    TRANSACTION_PREPARED_TYPE: "PREPARED",
    TRANSACTION_COMMIT_TYPE: "COMMIT",
    TRANSACTION_ROLLBACK_TYPE: "ROLLBACK",
}
# CompressionType.findByValue: 1 LZ4, 2 ZSTD, 3 ZLIB; 0 means ZLIB (pre-4.9.4 records).
COMPRESSION_NAMES = {0: "ZLIB", 1: "LZ4", 2: "ZSTD", 3: "ZLIB"}
COMPRESSION_FLAGS = {"ZLIB": COMPRESSION_ZLIB_TYPE, "LZ4": COMPRESSION_LZ4_TYPE, "ZSTD": COMPRESSION_ZSTD_TYPE}


def tran_type_of(sys_flag: int) -> str:
    return TRAN_TYPE_NAMES[sys_flag & TRANSACTION_MASK]


def compression_of(sys_flag: int) -> str:
    """NONE unless COMPRESSED_FLAG is set; then the 3-bit compression type (0 = legacy zlib)."""
    if not sys_flag & COMPRESSED_FLAG:
        return "NONE"
    return COMPRESSION_NAMES.get((sys_flag & COMPRESSION_TYPE_MASK) >> 8, "UNKNOWN")


# --------------------------------------------------------------------------------------------------
# Properties (MessageConst / MessageDecoder)
NAME_VALUE_SEPARATOR = "\u0001"
PROPERTY_SEPARATOR = "\u0002"
KEY_SEPARATOR = " "

PROPERTY_KEYS = "KEYS"
PROPERTY_TAGS = "TAGS"
PROPERTY_WAIT_STORE_MSG_OK = "WAIT"
PROPERTY_DELAY_TIME_LEVEL = "DELAY"
PROPERTY_RETRY_TOPIC = "RETRY_TOPIC"
PROPERTY_REAL_TOPIC = "REAL_TOPIC"
PROPERTY_REAL_QUEUE_ID = "REAL_QID"
PROPERTY_TRANSACTION_PREPARED = "TRAN_MSG"
PROPERTY_PRODUCER_GROUP = "PGROUP"
PROPERTY_ORIGIN_MESSAGE_ID = "ORIGIN_MESSAGE_ID"
PROPERTY_UNIQ_KEY = "UNIQ_KEY"
PROPERTY_MAX_RECONSUME_TIMES = "MAX_RECONSUME_TIMES"
PROPERTY_CLUSTER = "CLUSTER"
PROPERTY_TRANSACTION_ID = "__transactionId__"
PROPERTY_TRANSACTION_CHECK_TIMES = "TRANSACTION_CHECK_TIMES"
PROPERTY_TRANSACTION_PREPARED_QUEUE_OFFSET = "TRAN_PREPARED_QUEUE_OFFSET"
PROPERTY_INNER_MULTI_DISPATCH = "INNER_MULTI_DISPATCH"
PROPERTY_CRC32 = "__CRC32#"

# --------------------------------------------------------------------------------------------------
# System topics and prefixes (TopicValidator / MixAll)
SCHEDULE_TOPIC = "SCHEDULE_TOPIC_XXXX"
TRANS_HALF_TOPIC = "RMQ_SYS_TRANS_HALF_TOPIC"
TRANS_OP_HALF_TOPIC = "RMQ_SYS_TRANS_OP_HALF_TOPIC"
TRANS_CHECK_MAX_TIME_TOPIC = "TRANS_CHECK_MAX_TIME_TOPIC"
TRACE_TOPIC = "RMQ_SYS_TRACE_TOPIC"
AUTO_CREATE_TOPIC_KEY_TOPIC = "TBW102"
RETRY_GROUP_TOPIC_PREFIX = "%RETRY%"
DLQ_GROUP_TOPIC_PREFIX = "%DLQ%"
LMQ_PREFIX = "%LMQ%"
TRANS_OP_REMOVE_TAG = "d"  # TransactionalMessageUtil.REMOVETAG
SYSTEM_TOPIC_PREFIX = "rmq_sys_"  # TopicValidator.SYSTEM_TOPIC_PREFIX
SYSTEM_TOPICS = frozenset({
    SCHEDULE_TOPIC, TRANS_HALF_TOPIC, TRANS_OP_HALF_TOPIC, TRANS_CHECK_MAX_TIME_TOPIC, TRACE_TOPIC,
    AUTO_CREATE_TOPIC_KEY_TOPIC, "BenchmarkTest", "SELF_TEST_TOPIC", "OFFSET_MOVED_EVENT",
})


def is_system_topic(topic: str) -> bool:
    """TopicValidator.isSystemTopic: one of :data:`SYSTEM_TOPICS` or a name starting with ``rmq_sys_``."""
    return topic in SYSTEM_TOPICS or topic.startswith(SYSTEM_TOPIC_PREFIX)
TOPIC_MAX_LENGTH_V1 = 127  # Byte.MAX_VALUE: 4.x rejects longer topics
TOPIC_MAX_LENGTH = 255  # TopicValidator.TOPIC_MAX_LENGTH (5.x)
TOPIC_VALID_CHARS = frozenset("%|-_" + "abcdefghijklmnopqrstuvwxyz" + "ABCDEFGHIJKLMNOPQRSTUVWXYZ" + "0123456789")

# --------------------------------------------------------------------------------------------------
# Store geometry defaults (MessageStoreConfig); real stores are measured from their files.
DEFAULT_MAPPED_FILE_SIZE_COMMITLOG = 1024 * 1024 * 1024
DEFAULT_MAPPED_FILE_SIZE_CONSUME_QUEUE = 300000 * 20  # mappedFileSizeConsumeQueue: 300,000 units
CQ_PRE_BLANK_SIZE = 0x7FFFFFFF  # fillPreBlank unit: (0, Integer.MAX_VALUE, 0)
DEFAULT_MAX_HASH_SLOT_NUM = 5000000
DEFAULT_MAX_INDEX_NUM = 5000000 * 4
DEFAULT_MAX_MESSAGE_SIZE = 1024 * 1024 * 4
MAX_PROPERTIES_LENGTH = 0x7FFF  # Short.MAX_VALUE
DEFAULT_MESSAGE_DELAY_LEVEL = "1s 5s 10s 30s 1m 2m 3m 4m 5m 6m 7m 8m 9m 10m 20m 30m 1h 2h"
DEFAULT_RETRY_MAX_TIMES = 16
SEGMENT_NAME_DIGITS = 20  # UtilAll.offset2FileName

# --------------------------------------------------------------------------------------------------
# The store root's parts (StorePathConfigHelper; 5.x: TimerMessageStore, BrokerPathConfigHelper): the folders a
# reader lists and the files at the root.  A folder holding one of the ROOT_PARTS is a store root; ``depth`` is how
# many folders lie between a part folder and its files (consumequeue/<topic>/<queue>/<file>: 2); a ``rolled`` part
# is a MappedFileQueue folder (files named by their first byte's offset: store_format.rolled lists them; with a
# depth, each of its queue folders is one).
@dataclass(frozen=True)
class StorePart:
    folder: str
    depth: int
    marks_root: bool
    rolled: bool = False
    appended: bool = False  # its files are MappedFileQueue files the broker only appends to, never rewrites


TIMER_LOG_DIR = "timerlog"  # 5.x, appears with the first timer unit: never alone what makes a store root
TIMER_WHEEL_FILE = "timerwheel"  # 5.x, at the root
TIMER_CHECK_FILE = "timercheck"  # 5.x, under config/ (binary, one page)
TIMER_METRICS_FILE = "timermetrics"  # 5.x, under config/ (JSON, with .bak)
BATCH_CQ_DIR = "batchconsumequeue"  # 5.x, a queue.type=BatchCQ topic's queues: <topic>/<queue>/<20-digit byte offset>
# 5.x, cleanup.policy=COMPACTION topics (docs/store-format-compaction.md): compaction/compactionLog/<topic>/<queue>/ the
# log (CommitLog records), compaction/compactionCq/<topic>/<queue>/ its SparseConsumeQueue (46-byte units, each file
# named after the log file it indexes), compaction/position-checkpoint the queue offsets compacted up to
COMPACTION_DIR = "compaction"
COMPACTION_LOG_DIR = COMPACTION_DIR + "/compactionLog"
COMPACTION_CQ_DIR = COMPACTION_DIR + "/compactionCq"
COMPACTION_CHECKPOINT_FILE = "position-checkpoint"
COMPACTION_GENERATIONS = ("compacting", "replicating")  # temporary sub folders of a queue folder, never the queue
DEFAULT_COMPACTION_CQ_FILE_SIZE = 10 * 1024 * 1024 // 46 * 46  # compactionCqMappedFileSize, whole units
DEFAULT_COMPACTION_FILE_SIZE = 100 * 1024 * 1024  # compactionMappedFileSize (the log's is derived from both)
STORE_PARTS = (StorePart("commitlog", 0, True, rolled=True, appended=True),
               StorePart("consumequeue", 2, True, appended=True), StorePart("index", 0, True),
               StorePart("config", 0, False), StorePart("consumequeue_ext", 2, False, appended=True),
               StorePart(TIMER_LOG_DIR, 0, False, rolled=True, appended=True),
               StorePart(BATCH_CQ_DIR, 2, False, rolled=True, appended=True))
STORE_PART_FOLDERS = tuple(p.folder for p in STORE_PARTS)
ROOT_PARTS = tuple(p.folder for p in STORE_PARTS if p.marks_root)
STORE_ROOT_FILES = ("checkpoint", "abort", "lock", TIMER_WHEEL_FILE)


def appended_file(parts: tuple[str, ...]) -> bool:
    """Whether the file at ``parts`` below a store root is one the broker only appends to (a segment, a queue file,
    the timer log: :attr:`StorePart.appended`, the name a 20-digit offset); DLedger's are store_format.dledger's."""
    for p in STORE_PARTS:
        if p.appended and len(parts) == p.depth + 2 and parts[0] == p.folder:
            return len(parts[-1]) == SEGMENT_NAME_DIGITS and parts[-1].isdigit()
    return False


# --------------------------------------------------------------------------------------------------
# The fixed-width structures besides the record: each declared once, as its members in file order; offsets,
# struct formats, numpy dtypes and docs/record-layout.md's tables are derived (``FixedLayout``).

#: struct codes of fixed-width members: their widths, and as big-endian numpy types
CODE_WIDTHS = {"q": 8, "i": 4, "h": 2, "b": 1}
NUMPY_CODES = {"i": ">i4", "q": ">i8", "h": ">i2", "b": "i1"}
_JAVA_TYPES = {"q": "long", "i": "int", "h": "short", "b": "byte"}


@dataclass(frozen=True)
class Member:
    """One member of a fixed-width structure: our name, its struct code, RocketMQ's name, what it holds."""

    name: str
    code: str  # "q" long, "i" int, "h" short, "b" byte: big-endian, as Java's ByteBuffer writes them
    java: str
    meaning: str

    @property
    def width(self) -> int:
        return CODE_WIDTHS[self.code]


@dataclass(frozen=True)
class FixedLayout:
    """A fixed-width on-disk structure (a consume-queue unit, an index header, slot or entry, the checkpoint):
    its members in file order, and the size of the whole where it is padded beyond them (``size``)."""

    title: str
    source: str  # the RocketMQ class that writes it
    members: tuple[Member, ...]
    size: int | None = None

    @property
    def width(self) -> int:
        """The members' bytes (without padding)."""
        return sum(m.width for m in self.members)

    @property
    def offsets(self) -> dict[str, int]:
        out, at = {}, 0
        for m in self.members:
            out[m.name] = at
            at += m.width
        return out

    def offset(self, name: str) -> int:
        return self.offsets[name]

    def member(self, name: str) -> Member:
        return next(m for m in self.members if m.name == name)

    def end(self, name: str) -> int:
        """Where the member ends: the bytes a reader needs to hold it."""
        return self.offsets[name] + self.member(name).width

    def head_struct(self, count: int) -> str:
        """The ``struct`` format of the first ``count`` members (a 4.x checkpoint holds three of five)."""
        return ">" + "".join(m.code for m in self.members[:count])

    def read(self, buf, name: str, at: int = 0) -> int:
        """One member of the structure that starts at ``at`` of ``buf``."""
        return struct.unpack_from(">" + self.member(name).code, buf, at + self.offsets[name])[0]

    def pack(self, name: str, value: int) -> bytes:
        """One member's bytes (to patch it in place)."""
        return struct.pack(">" + self.member(name).code, value)

    def numpy_type(self, name: str):
        """One member's big-endian numpy type, for an array of it alone (the slot table)."""
        import numpy as np
        return np.dtype(NUMPY_CODES[self.member(name).code])

    @property
    def struct(self) -> str:
        """The ``struct`` format of the members (big-endian)."""
        return ">" + "".join(m.code for m in self.members)

    @property
    def fields(self) -> tuple[tuple[str, int, str], ...]:
        """(name, offset, struct code) per member: what :func:`numpy_dtype` and bulk readers take."""
        return tuple((m.name, self.offsets[m.name], m.code) for m in self.members)

    def dtype(self):
        """A big-endian numpy structured dtype of one unit (``size`` bytes where padded)."""
        return numpy_dtype(self.fields, self.size or self.width)

    def markdown(self) -> str:
        """The reference table (docs/record-layout.md), derived from the declaration."""
        rows = [f"**{self.title}** ({self.width} bytes{f', in a {self.size}-byte file' if self.size else ''}; "
                f"`{self.source}`)", "", "| field | RocketMQ name | type | offset | meaning |", "|---|---|---|---|---|"]
        rows += [f"| `{m.name}` | {m.java} | {_JAVA_TYPES[m.code]} | {self.offsets[m.name]} | {m.meaning} |"
                 for m in self.members]
        return "\n".join(rows)


@lru_cache(maxsize=None)
def numpy_dtype(fields: tuple, itemsize: int):
    """A (name, offset, struct code) declaration as a big-endian numpy structured dtype of ``itemsize`` bytes,
    for reading or writing units and entries in bulk; made once per declaration (a dtype is immutable, and making
    one cost ~20 us, paid on every read of a small queue file)."""
    import numpy as np
    return np.dtype({"names": [f[0] for f in fields], "formats": [NUMPY_CODES[f[2]] for f in fields],
                     "offsets": [f[1] for f in fields], "itemsize": itemsize})


CQ_UNIT = FixedLayout("ConsumeQueue unit", "ConsumeQueue.putMessagePositionInfo", (
    Member("physical_offset", "q", "offset", "the message's CommitLog physical offset"),
    Member("size", "i", "size", "its TOTALSIZE (Integer.MAX_VALUE in a pre-blank unit)"),
    Member("tags_code", "q", "tagsCode", "the tag's hash code; a delayed message's delivery time"),
))
INDEX_HEADER = FixedLayout("IndexFile header", "IndexHeader", (
    Member("begin_timestamp", "q", "beginTimestamp", "store time of the first indexed message (ms)"),
    Member("end_timestamp", "q", "endTimestamp", "store time of the last indexed message (ms)"),
    Member("begin_phy_offset", "q", "beginPhyOffset", "physical offset of the first indexed message"),
    Member("end_phy_offset", "q", "endPhyOffset", "physical offset of the last indexed message"),
    Member("hash_slot_count", "i", "hashSlotCount", "slots that became non-empty"),
    Member("index_count", "i", "indexCount", "the next entry's number: entries written + 1 (entry 0 is never written)"),
))
INDEX_SLOT = FixedLayout("IndexFile hash slot", "IndexFile.putKey", (
    Member("index", "i", "slotValue", "the number of the newest entry whose key hashes here, 0 when empty"),
))
INDEX_ENTRY = FixedLayout("IndexFile entry", "IndexFile.putKey", (
    Member("key_hash", "i", "keyHash", "the non-negative hash of topic#key (indexKeyHashMethod)"),
    Member("physical_offset", "q", "phyOffset", "the message's CommitLog physical offset"),
    Member("time_diff", "i", "timeDiff", "seconds since the header's beginTimestamp"),
    Member("prev_index", "i", "slotValue", "the number of the previous entry in the same slot's chain, 0 at its end"),
))
# StoreCheckpoint: one mapped page; 3 longs in 4.x, +masterFlushedOffset (5.0), +confirmPhyOffset (5.1.1)
CHECKPOINT = FixedLayout("checkpoint", "StoreCheckpoint", (
    Member("physic_msg_timestamp", "q", "physicMsgTimestamp", "store time of the last flushed CommitLog message"),
    Member("logics_msg_timestamp", "q", "logicsMsgTimestamp", "store time of the last flushed consume-queue unit"),
    Member("index_msg_timestamp", "q", "indexMsgTimestamp", "store time of the last flushed index file"),
    Member("master_flushed_offset", "q", "masterFlushedOffset", "5.0: the master's flushed offset"),
    Member("confirm_phy_offset", "q", "confirmPhyOffset", "5.1.1: the confirmed physical offset"),
), size=4096)
# ConsumeQueueExt (enableConsumeQueueExt, default off): consumequeue_ext/<topic>/<queueId>/<20-digit offset>, rolled
# like the commitlog; a unit is these 20 bytes and a filter bitmap of bitmap_size bytes; a file whose next unit would
# not fit ends with a size of -1.  A consume-queue unit then holds the unit's address in its tagsCode slot:
# offset + Long.MIN_VALUE, every value at or below CQ_EXT_MAX_ADDR (no tagsCode, a sign-extended int, reaches it).
CQ_EXT_UNIT = FixedLayout("ConsumeQueueExt unit", "ConsumeQueueExt.CqExtUnit.write", (
    Member("size", "h", "size", "the unit's bytes: 20 + bitmap_size"),
    Member("tags_code", "q", "tagsCode", "the tag's hash code the consume-queue unit would hold"),
    Member("msg_store_time", "q", "msgStoreTime", "the message's store time (ms)"),
    Member("bitmap_size", "h", "bitMapSize", "bytes of the consumer-filter bitmap that follows (0: none)"),
))
FIXED_LAYOUTS = (CQ_UNIT, INDEX_HEADER, INDEX_SLOT, INDEX_ENTRY, CHECKPOINT, CQ_EXT_UNIT)

# the names the readers and writers use, derived
CQ_STORE_UNIT_SIZE = CQ_UNIT.width
CQ_EXT_MIN_UNIT_SIZE = CQ_EXT_UNIT.width  # CqExtUnit.MIN_EXT_UNIT_SIZE
CQ_EXT_MAX_UNIT_SIZE = 0x7FFF  # Short.MAX_VALUE
CQ_EXT_END_SIZE = -1  # fullFillToEnd: the size that ends a file
CQ_EXT_END_BLANK = 4  # END_BLANK_DATA_LENGTH: what a file keeps free for that end mark
CQ_EXT_MAX_ADDR = -(1 << 31) - 1  # ConsumeQueueExt.MAX_ADDR: Integer.MIN_VALUE - 1L; isExtAddr(x) := x <= it
DEFAULT_MAPPED_FILE_SIZE_CQ_EXT = 48 << 20  # mappedFileSizeConsumeQueueExt
DEFAULT_BITMAP_LENGTH_CQ_EXT = 64  # bitMapLengthConsumeQueueExt, in bits (the broker sets it to its bloom filter's)
CQ_UNIT_FIELDS, CQ_UNIT_STRUCT = CQ_UNIT.fields, CQ_UNIT.struct
INDEX_HEADER_SIZE, INDEX_HEADER_FIELDS, INDEX_HEADER_STRUCT = INDEX_HEADER.width, INDEX_HEADER.fields, \
    INDEX_HEADER.struct
INDEX_SLOT_SIZE = INDEX_SLOT.width
INDEX_ENTRY_SIZE, INDEX_ENTRY_FIELDS, INDEX_ENTRY_STRUCT = INDEX_ENTRY.width, INDEX_ENTRY.fields, INDEX_ENTRY.struct
INDEX_MAX_RESULTS = 64  # maxMsgsNumBatch: mqadmin's cap; our lookups are uncapped by default
CHECKPOINT_FILE_SIZE = CHECKPOINT.size
CHECKPOINT_FIELDS = tuple((name, offset) for name, offset, _ in CHECKPOINT.fields)
CHECKPOINT_MIN_MEMBERS = 3  # 4.x writes the first three
CHECKPOINT_MIN_SIZE = CHECKPOINT.end(CHECKPOINT.members[CHECKPOINT_MIN_MEMBERS - 1].name)
CHECKPOINT_SAFETY_MS = 3000  # getMinTimestamp() subtracts 3 s


def index_entries_at(hash_slot_num: int) -> int:
    """Where an index file of ``hash_slot_num`` slots has its entries region (after its header and slots)."""
    return INDEX_HEADER_SIZE + hash_slot_num * INDEX_SLOT_SIZE


def index_file_size(hash_slot_num: int, index_num: int) -> int:
    return index_entries_at(hash_slot_num) + index_num * INDEX_ENTRY_SIZE


def fixed_layouts_markdown() -> str:
    """Every fixed-width structure's table (docs/record-layout.md), derived from the declarations."""
    return "\n\n".join(f.markdown() for f in FIXED_LAYOUTS)


# --------------------------------------------------------------------------------------------------
# CommitLog record layout


@dataclass(frozen=True)
class Field:
    """One field of the record.  ``width`` is fixed, or a key of the variable widths below."""

    number: str  # RocketMQ's field number, e.g. "15a"
    name: str  # canonical snake_case name
    java: str  # RocketMQ's name
    code: str  # struct code for a fixed integer ("i","q","h","b"), "host", or "bytes"
    width: int | str


# 'born_host'/'store_host' are 8 or 20 wide; 'topic_length' is 1 (V1) or 2 (V2);
# body/topic/properties take their width from the preceding length field.
RECORD_FIELDS: tuple[Field, ...] = (
    Field("1", "store_size", "TOTALSIZE", "i", 4),
    Field("2", "magic", "MAGICCODE", "i", 4),
    Field("3", "body_crc", "BODYCRC", "i", 4),
    Field("4", "queue_id", "QUEUEID", "i", 4),
    Field("5", "flag", "FLAG", "i", 4),
    Field("6", "queue_offset", "QUEUEOFFSET", "q", 8),
    Field("7", "physical_offset", "PHYSICALOFFSET", "q", 8),
    Field("8", "sys_flag", "SYSFLAG", "i", 4),
    Field("9", "born_timestamp", "BORNTIMESTAMP", "q", 8),
    Field("10", "born_host", "BORNHOST", "host", "born_host"),
    Field("11", "store_timestamp", "STORETIMESTAMP", "q", 8),
    Field("12", "store_host", "STOREHOSTADDRESS", "host", "store_host"),
    Field("13", "reconsume_times", "RECONSUMETIMES", "i", 4),
    Field("14", "prepared_transaction_offset", "PreparedTransactionOffset", "q", 8),
    Field("15a", "body_length", "BODYLENGTH", "i", 4),
    Field("15b", "body", "BODY", "bytes", "body_length"),
    Field("16a", "topic_length", "TOPICLENGTH", "topic_length", "topic_length"),
    Field("16b", "topic", "TOPIC", "bytes", "topic_length"),
    Field("17a", "properties_length", "PROPERTIESLENGTH", "h", 2),
    Field("17b", "properties", "PROPERTIES", "bytes", "properties_length"),
)
FIELDS_BY_NAME = {f.name: f for f in RECORD_FIELDS}
IPV4_HOST_WIDTH = 8  # 4 address bytes + int port
IPV6_HOST_WIDTH = 20  # 16 address bytes + int port
PORT_WIDTH = 4


@dataclass(frozen=True)
class RecordLayout:
    """Offsets of one record variant: (born host IPv6?, store host IPv6?, magic version)."""

    born_v6: bool
    store_v6: bool
    magic_version: int
    offsets: dict  # fixed-position field name -> byte offset (up to and including body_length)
    widths: dict  # fixed-position field name -> width
    header_struct: str  # struct format of everything before BODY, hosts as address bytes + port
    header_names: tuple  # names matching header_struct's values (hosts split into *_ip, *_port)
    body_offset: int  # == fixed header size (88 / 100 / 112)
    topic_length_width: int

    def total_size(self, body_length: int, topic_length: int, properties_length: int) -> int:
        """CommitLog.calMsgLength: the record's TOTALSIZE."""
        return (self.body_offset + max(body_length, 0) + self.topic_length_width + topic_length
                + 2 + max(properties_length, 0))

    @property
    def min_size(self) -> int:
        return self.total_size(0, 0, 0)


@lru_cache(maxsize=None)
def record_layout(born_v6: bool, store_v6: bool, magic_version: int = 1) -> RecordLayout:
    host_width = {"born_host": IPV6_HOST_WIDTH if born_v6 else IPV4_HOST_WIDTH,
                  "store_host": IPV6_HOST_WIDTH if store_v6 else IPV4_HOST_WIDTH}
    topic_width = 2 if magic_version == 2 else 1
    offsets, widths, fmt, names = {}, {}, [">"], []
    pos = 0
    for f in RECORD_FIELDS:
        if f.name == "body":
            break
        width = host_width[f.width] if f.code == "host" else f.width
        offsets[f.name], widths[f.name] = pos, width
        if f.code == "host":
            fmt.append(f"{width - PORT_WIDTH}si")
            names += [f.name + "_ip", f.name + "_port"]
        else:
            fmt.append(f.code)
            names.append(f.name)
        pos += width
    return RecordLayout(born_v6, store_v6, magic_version, offsets, widths, "".join(fmt), tuple(names),
                        pos, topic_width)


def layout_for(sys_flag: int, magic_version: int = 1) -> RecordLayout:
    return record_layout(bool(sys_flag & BORNHOST_V6_FLAG), bool(sys_flag & STOREHOST_V6_FLAG), magic_version)


ALL_LAYOUTS = tuple(record_layout(b, s, v) for v in (1, 2) for b in (False, True) for s in (False, True))
# Offsets that never move: everything up to BORNHOST.
SIZE_OFFSET = 0
MAGIC_OFFSET = 4
SYS_FLAG_OFFSET = record_layout(False, False).offsets["sys_flag"]
PHYSICAL_OFFSET_OFFSET = record_layout(False, False).offsets["physical_offset"]
BORN_HOST_OFFSET = record_layout(False, False).offsets["born_host"]
MIN_RECORD_SIZE = record_layout(False, False).min_size  # 91: smallest possible message record


def layout_table_markdown() -> str:
    """The documentation table (docs/record-layout.md, --help), derived from the declaration."""
    v4, v6 = record_layout(False, False), record_layout(True, True)
    rows = ["| # | field | RocketMQ name | width | offset (IPv4/IPv4, V1) | offset (IPv6/IPv6, V1) |",
            "|---|---|---|---|---|---|"]
    for f in RECORD_FIELDS:
        if f.code == "bytes":
            width = f"= {f.width}"
        else:
            width = {"born_host": "8 / 20", "store_host": "8 / 20", "topic_length": "1 (V1) / 2 (V2)"}.get(f.width, f.width)
        o4 = v4.offsets.get(f.name, "body+…" if f.name != "body" else v4.body_offset)
        o6 = v6.offsets.get(f.name, "body+…" if f.name != "body" else v6.body_offset)
        rows.append(f"| {f.number} | `{f.name}` | {f.java} | {width} | {o4} | {o6} |")
    return "\n".join(rows)


# --------------------------------------------------------------------------------------------------
# Delay levels (ScheduleMessageService.parseDelayLevel)
_TIME_UNITS_MS = {"s": 1000, "m": 60 * 1000, "h": 60 * 60 * 1000, "d": 24 * 60 * 60 * 1000}


def parse_delay_levels(spec: str = DEFAULT_MESSAGE_DELAY_LEVEL) -> dict[int, int]:
    """'1s 5s ...' -> {level: milliseconds}; level = position + 1."""
    table = {}
    for i, item in enumerate(spec.split(" ")):
        if not item:
            continue
        unit = _TIME_UNITS_MS.get(item[-1])
        if unit is None:
            raise ValueError(f"messageDelayLevel item {item!r}: unit must be one of s, m, h, d")
        table[i + 1] = int(item[:-1]) * unit
    return table


DEFAULT_DELAY_LEVELS = parse_delay_levels()


def compute_deliver_timestamp(level: int, store_timestamp: int, delay_levels: dict[int, int] = DEFAULT_DELAY_LEVELS) -> int:
    """ScheduleMessageService.computeDeliverTimestamp: unknown level -> +1000 ms."""
    return store_timestamp + delay_levels.get(level, 1000)


# --------------------------------------------------------------------------------------------------
# Broker-side settings the writer reproduces (BrokerConfig, TopicConfigManager, SubscriptionGroupManager,
# ConsumerOffsetManager, MessageExtEncoder, DefaultMQProducer)
OS_PAGE_SIZE = 4096  # MappedFile.OS_PAGE_SIZE
ENCODER_BODY_RESERVE = 64 * 1024  # MessageExtEncoder: a record may be maxMessageSize (body) + 64 KiB
PERM_INHERIT, PERM_WRITE, PERM_READ = 0x1, 0x2, 0x4  # PermName
SCHEDULE_TOPIC_QUEUE_NUM = 18  # TopicConfigManager: a constant, not the number of delay levels
CLIENT_DEFAULT_TOPIC_QUEUE_NUMS = 4  # DefaultMQProducer.defaultTopicQueueNums, asked for on auto-create
DEFAULT_TOPIC_QUEUE_NUMS = 8  # BrokerConfig.defaultTopicQueueNums (TBW102)
TOPIC_CONFIG_DEFAULT_QUEUE_NUMS = 16  # TopicConfig.defaultRead/WriteQueueNums: a topics.json entry without them
COMPRESS_MSG_BODY_OVER_HOWMUCH = 4096  # DefaultMQProducer: bodies this long or longer are compressed
RETRY_QUEUE_NUMS = 1  # SubscriptionGroupConfig.retryQueueNums
DLQ_NUMS_PER_GROUP = 1  # SendMessageProcessor
DEFAULT_SUBSCRIPTION_GROUPS = ("TOOLS_CONSUMER", "FILTERSRV_CONSUMER", "SELF_TEST_C_GROUP", "CID_ONS-HTTP-PROXY",
                               "CID_ONSAPI_PULL", "CID_ONSAPI_PERMISSION", "CID_ONSAPI_OWNER")
# Initial capacities of the managers' maps: the config files list entries in the maps' iteration order.
TOPIC_TABLE_CAPACITY = 1024  # TopicConfigManager / SubscriptionGroupManager: new ConcurrentHashMap(1024)
OFFSET_TABLE_CAPACITY = 512  # ConsumerOffsetManager.offsetTable: new ConcurrentHashMap(512)
QUEUE_OFFSET_TABLE_CAPACITY = 32  # each topic@group table, and ScheduleMessageService.offsetTable: (32)


# ==================================================================================================
# RocketMQ 5.x additions (shared/docs/store-format-5x.md; each fact's 5.3.3 source is named there)
#
#   timerlog/<20-digit offset>   52-byte units (TimerLog.UNIT_SIZE), a 16-byte blank where one more unit and a
#                                blank would not fit (TimerLog.append); rolled like the commitlog
#   timerwheel                   slotsTotal * 2 slots of 32 bytes (TimerWheel / Slot), one fixed-size sparse file
#   config/timercheck            seven longs in one 4096-byte page (TimerCheckpoint.flush)
#   batchconsumequeue/<t>/<q>/   46-byte units (BatchConsumeQueue.putBatchMessagePositionInfo)
#   __CRC32#                     the last 20 bytes of a record's properties (MessageDecoder.createCrc32)

# MessageConst (5.x)
PROPERTY_TIMER_DELIVER_MS = "TIMER_DELIVER_MS"
PROPERTY_TIMER_DELAY_SEC = "TIMER_DELAY_SEC"
PROPERTY_TIMER_DELAY_MS = "TIMER_DELAY_MS"
PROPERTY_TIMER_OUT_MS = "TIMER_OUT_MS"
PROPERTY_TIMER_ENQUEUE_MS = "TIMER_ENQUEUE_MS"
PROPERTY_TIMER_DEQUEUE_MS = "TIMER_DEQUEUE_MS"
PROPERTY_TIMER_ROLL_TIMES = "TIMER_ROLL_TIMES"
PROPERTY_TIMER_DEL_UNIQKEY = "TIMER_DEL_UNIQKEY"
PROPERTY_INNER_MULTI_QUEUE_OFFSET = "INNER_MULTI_QUEUE_OFFSET"
PROPERTY_INNER_NUM = "INNER_NUM"
PROPERTY_INNER_BASE = "INNER_BASE"
PROPERTY_POP_CK = "POP_CK"

# Whole-record CRC (CommitLog.CRC32_RESERVED_LEN, MessageDecoder.createCrc32): "__CRC32#" \x01 10 digits \x02
CRC32_DIGITS = 10
CRC32_RESERVED_LEN = len(PROPERTY_CRC32) + 1 + CRC32_DIGITS + 1  # 20

# Timer store (TimerMessageStore, MessageStoreConfig)
TIMER_TOPIC = "rmq_sys_wheel_timer"
TIMER_QUEUE_ID = 0
TIMER_MAGIC_DEFAULT, TIMER_MAGIC_ROLL, TIMER_MAGIC_DELETE = 1, 2, 4
TIMER_MAGIC_MASK = 0xF  # isMagicOK: (magic | 0xF) == 0xF
TIMER_ENQUEUE_NEVER = 2**63 - 1  # TIMER_ENQUEUE_MS of a record already due when read: Long.MAX_VALUE
TIMER_RECALL_TAG = "_RECALL_TAG_"
DEFAULT_MAPPED_FILE_SIZE_TIMER_LOG = 100 * 1024 * 1024  # mappedFileSizeTimerLog
DEFAULT_TIMER_PRECISION_MS = 1000  # timerPrecisionMs
DEFAULT_TIMER_SLOTS_TOTAL = 7 * 86400  # TimerMessageStore: TIMER_WHEEL_TTL_DAY * DAY_SECS
DEFAULT_TIMER_ROLL_WINDOW_SLOT = 2 * 86400  # timerRollWindowSlot
DEFAULT_TIMER_MAX_DELAY_SEC = 3 * 86400  # timerMaxDelaySec
TIMER_LOG_MIN_BLANK_LEN = 4 + 8 + 4  # TimerLog.MIN_BLANK_LEN
TIMER_BLANK_SLOTS = 60  # TimerMessageStore.TIMER_BLANK_SLOTS: recover() reads from no earlier than now - slotsTotal + 60
DEFAULT_TIMER_FLUSH_INTERVAL_MS = 1000  # timerFlushIntervalMs: the checkpoint, log and wheel are flushed this often

TIMER_LOG_UNIT = FixedLayout("timerlog unit", "TimerMessageStore.doEnqueue / TimerLog.UNIT_SIZE", (
    Member("size", "i", "size", "always 52 (TimerLog.UNIT_SIZE)"),
    Member("prev_pos", "q", "prev pos", "timerlog offset of the previous unit of the same slot, -1 at the chain's end"),
    Member("magic", "i", "magic", "bit flags: 1 default, 2 roll, 4 delete (stored 1, 3, 5, 7)"),
    Member("write_time_ms", "q", "currWriteTimeMs", "the wheel's write time when the unit was written (ms)"),
    Member("delay_ms", "i", "delayedTime - currWriteTimeMs", "slot time minus write time (ms)"),
    Member("physical_offset", "q", "offsetPy", "CommitLog offset of the rmq_sys_wheel_timer record"),
    Member("store_size", "i", "sizePy", "that record's TOTALSIZE"),
    Member("real_topic_hash", "i", "hashTopicForMetrics", "String.hashCode() of REAL_TOPIC, 0 without one"),
    Member("reserved", "q", "reserved", "0"),
))
TIMER_LOG_BLANK = FixedLayout("timerlog end-of-file blank", "TimerLog.append", (
    Member("size", "i", "fileSize - wrotePosition", "bytes left in the file from the blank"),
    Member("zero", "q", "0", "0"),
    Member("magic", "i", "BLANK_MAGIC_CODE", "0xCBD43194, the CommitLog blank magic (at a unit's magic offset)"),
))
TIMER_WHEEL_SLOT = FixedLayout("timerwheel slot", "TimerWheel.putSlot / Slot", (
    Member("time", "q", "timeMs / precisionMs", "the slot's time divided by timerPrecisionMs (epoch seconds by "
                                                "default)"),
    Member("first_pos", "q", "firstPos", "timerlog offset of the slot's first unit"),
    Member("last_pos", "q", "lastPos", "timerlog offset of the slot's newest unit (head of the prevPos chain)"),
    Member("num", "i", "num", "live count: +1 per put, -1 per delete unit"),
    Member("magic", "i", "magic", "unused, 0"),
))
TIMER_CHECKPOINT = FixedLayout("timercheck", "TimerCheckpoint.flush", (
    Member("last_read_time_ms", "q", "lastReadTimeMs", "dequeue progress: the wheel time delivered up to (ms)"),
    Member("last_timer_log_flush_pos", "q", "lastTimerLogFlushPos", "timerlog flushed offset"),
    Member("last_timer_queue_offset", "q", "lastTimerQueueOffset", "next rmq_sys_wheel_timer/0 queue offset to "
                                                                    "enqueue"),
    Member("master_timer_queue_offset", "q", "masterTimerQueueOffset", "the master's, read from it"),
    Member("state_version", "q", "dataVersion.stateVersion", "added later: absent (zero) in older files"),
    Member("data_version_timestamp", "q", "dataVersion.timestamp", "ms"),
    Member("data_version_counter", "q", "dataVersion.counter", ""),
), size=OS_PAGE_SIZE)
TIMER_CHECKPOINT_MIN_MEMBERS = 4  # the four longs every version writes

# BatchConsumeQueue (queue.type=BatchCQ) and its unit
TOPIC_ATTRIBUTE_QUEUE_TYPE = "queue.type"
QUEUE_TYPE_SIMPLE, QUEUE_TYPE_BATCH = "SimpleCQ", "BatchCQ"
TOPIC_ATTRIBUTE_CLEANUP_POLICY = "cleanup.policy"  # TopicAttributes.CLEANUP_POLICY_ATTRIBUTE
CLEANUP_POLICY_DELETE, CLEANUP_POLICY_COMPACTION = "DELETE", "COMPACTION"
DEFAULT_MAPPED_FILE_SIZE_BATCH_CQ = 300000 * 46  # mapperFileSizeBatchConsumeQueue
BATCH_CQ_INVALID_POS = -1  # INVALID_POS: the compacted offset every unit gets
BATCH_CQ_UNIT = FixedLayout("BatchConsumeQueue unit", "BatchConsumeQueue.putBatchMessagePositionInfo", (
    Member("physical_offset", "q", "offset", "CommitLog physical offset of the record"),
    Member("size", "i", "size", "its TOTALSIZE"),
    Member("tags_code", "q", "tagsCode", "the tag's hash code"),
    Member("store_timestamp", "q", "storeTime", "the record's store time (ms)"),
    Member("msg_base_offset", "q", "msgBaseOffset", "logical offset of the record's first message"),
    Member("batch_size", "h", "batchSize", "logical messages in the record"),
    Member("compacted_offset", "i", "compactedOffset", "always INVALID_POS (-1)"),
    Member("reserved", "i", "reserved", "0"),
))

# LMQ / multi-dispatch (MixAll, MessageConst)
LMQ_DISPATCH_SEPARATOR = ","
LMQ_QUEUE_ID = 0

# POP (PopAckConstants, KeyBuilder, BrokerConfig)
REVIVE_TOPIC_PREFIX = SYSTEM_TOPIC_PREFIX + "REVIVE_LOG_"  # + brokerClusterName
REVIVE_GROUP = "CID_RMQ_SYS_REVIVE_GROUP"
POP_CK_TAG, POP_ACK_TAG, POP_BATCH_ACK_TAG = "ck", "ack", "bAck"
POP_ACK_TIME_INTERVAL_MS = 1000  # PopAckConstants.ackTimeInterval
POP_ORDER_REVIVE_QUEUE = 999
DEFAULT_REVIVE_QUEUE_NUM = 8
POP_UNIQ_SPLIT = "@"  # PopAckConstants.SPLIT
POP_MAX_MSG_NUMS = 32  # PopMessageProcessor refuses a pop of more than 32 messages

FIXED_LAYOUTS_5X = (TIMER_LOG_UNIT, TIMER_LOG_BLANK, TIMER_WHEEL_SLOT, TIMER_CHECKPOINT, BATCH_CQ_UNIT)


def revive_topic(cluster: str) -> str:
    """PopAckConstants.buildClusterReviveTopic."""
    return REVIVE_TOPIC_PREFIX + cluster


def timer_wheel_file_size(slots_total: int = DEFAULT_TIMER_SLOTS_TOTAL) -> int:
    """TimerWheel's fixed length: slotsTotal * 2 slots (38,707,200 bytes by default)."""
    return slots_total * 2 * TIMER_WHEEL_SLOT.width


def timer_log_last_unit_offset(file_size: int) -> int:
    """TimerLog.getOffsetForLastUnit: where a full file's last unit starts."""
    return file_size - (file_size - TIMER_LOG_MIN_BLANK_LEN) % TIMER_LOG_UNIT.width - TIMER_LOG_MIN_BLANK_LEN \
        - TIMER_LOG_UNIT.width


def fixed_layouts_5x_markdown() -> str:
    """The 5.x structures' tables, derived from the declarations."""
    return "\n\n".join(f.markdown() for f in FIXED_LAYOUTS_5X)
