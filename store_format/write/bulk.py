"""The bulk path: many stored records into a :class:`~store_format.write.writer.StoreWriter` at once
(:func:`append_many`).

Same rules as ``StoreWriter.append`` and ``append_batch`` (which stay the reference; a parity test holds the
two to identical bytes), computed with array operations and applied through the writer's public bulk
interface (write position and roll, consume queues, index files, registrations, flush model; this module
imports the writer, never the other way round): sizes from the layout, segment placement against the
writer's ``room()`` by cumulative sums (classic batches kept whole), queue offsets by a stable group count,
headers as one numpy structured array per host layout, consume-queue units and index entries (hash chains by
a stable sort on the slot) as arrays.
What stays per record is done by C loops (``map``, ``join``) over blocks of records, so that each body and
string the caller made is fetched from memory once: CRC32 of each body (zlib), the header and TOPIC/PROPERTIES
length pieces as bytes objects, one ``join`` per block.  Properties the broker reads (REAL_TOPIC, REAL_QID,
DELAY) are found in one buffer of all properties; the scalar bookkeeping runs only for the records that can
change it (the first record of each topic/queue/REAL_TOPIC combination, scheduled and delivered UNIQ_KEYs).
"""
from __future__ import annotations

import gc
import re
import struct
import zlib
from dataclasses import dataclass
from itertools import compress, repeat
from operator import is_not

import numpy as np

from .. import layout as L
from ..codec import host_flags
from ..errors import ErrorKind, WriterError
from ..ids import parse_host
from ..javahash import index_hash_of, java_hash_concat, java_hash_joined, java_hash_many, java_hash_tokens_joined
from ..message import Message
from ..properties import parse_properties
from .writer import BATCH_SHARED_FIELDS, StoreWriter, validate_queue_id, validate_topic

_INDEX_HEADER = struct.Struct(L.INDEX_HEADER_STRUCT)

_REAL_TOPIC_MARK = L.PROPERTY_REAL_TOPIC + L.NAME_VALUE_SEPARATOR


@dataclass
class RecordBatch:
    """Stored records as columns.  ``tags``/``uniq_keys``/``keys`` are optional shortcuts for what the
    properties say (TAGS, UNIQ_KEY, KEYS); when given they must agree with ``properties``."""

    topics: list  # topic name table
    topic_id: np.ndarray  # int, index into topics
    queue_id: np.ndarray
    sys_flag: np.ndarray
    born_timestamp: np.ndarray
    store_timestamp: np.ndarray
    hosts: list  # "ip:port" table
    born_host_id: np.ndarray
    store_host_id: np.ndarray
    body: list  # bytes, as stored
    properties: list  # str, as stored
    flag: np.ndarray | None = None
    reconsume_times: np.ndarray | None = None
    prepared_transaction_offset: np.ndarray | None = None
    batch_id: np.ndarray | None = None  # equal ids >= 0: one classic batch (never split across segments)
    tags: list | None = None
    uniq_keys: list | None = None
    keys: list | None = None

    def __len__(self) -> int:
        return len(self.body)

    @classmethod
    def concat(cls, batches: list) -> "RecordBatch":
        """One batch from several (topic and host tables merged, batch ids kept distinct)."""
        topics = list(dict.fromkeys(t for b in batches for t in b.topics))
        hosts = list(dict.fromkeys(h for b in batches for h in b.hosts))
        tix = {t: i for i, t in enumerate(topics)}
        hix = {h: i for i, h in enumerate(hosts)}
        remap = lambda table, ix, col: np.array([ix[x] for x in table], np.int64)[np.asarray(col, np.int64)]
        cat = lambda name, default=0: np.concatenate([b.column(name, np.int64, default) for b in batches])
        lst = lambda name: None if any(getattr(b, name) is None for b in batches) else \
            [x for b in batches for x in getattr(b, name)]
        bid, shift = [], 0
        for b in batches:
            ids = b.column("batch_id", np.int64, -1)
            bid.append(np.where(ids >= 0, ids + shift, -1))
            shift += int(ids.max(initial=-1)) + 1
        return cls(topics=topics, topic_id=np.concatenate([remap(b.topics, tix, b.topic_id) for b in batches]),
                   queue_id=cat("queue_id"), sys_flag=cat("sys_flag"), born_timestamp=cat("born_timestamp"),
                   store_timestamp=cat("store_timestamp"), hosts=hosts,
                   born_host_id=np.concatenate([remap(b.hosts, hix, b.born_host_id) for b in batches]),
                   store_host_id=np.concatenate([remap(b.hosts, hix, b.store_host_id) for b in batches]),
                   body=[x for b in batches for x in b.body], properties=[x for b in batches for x in b.properties],
                   flag=cat("flag"), reconsume_times=cat("reconsume_times"),
                   prepared_transaction_offset=cat("prepared_transaction_offset"), batch_id=np.concatenate(bid),
                   tags=lst("tags"), uniq_keys=lst("uniq_keys"), keys=lst("keys"))

    @classmethod
    def from_messages(cls, messages: list, batch_ids=None) -> "RecordBatch":
        """Columns from stored-record :class:`Message` s (magic V1); ``batch_ids`` as :attr:`batch_id`."""
        topics = list(dict.fromkeys(m.topic for m in messages))
        hosts = list(dict.fromkeys([m.born_host for m in messages] + [m.store_host for m in messages]))
        tix = {t: i for i, t in enumerate(topics)}
        hix = {h: i for i, h in enumerate(hosts)}
        col = lambda name: np.array([getattr(m, name) for m in messages], np.int64)
        return cls(topics=topics, topic_id=np.array([tix[m.topic] for m in messages], np.int64),
                   queue_id=col("queue_id"), sys_flag=col("sys_flag"), born_timestamp=col("born_timestamp"),
                   store_timestamp=col("store_timestamp"), hosts=hosts,
                   born_host_id=np.array([hix[m.born_host] for m in messages], np.int64),
                   store_host_id=np.array([hix[m.store_host] for m in messages], np.int64),
                   body=[m.body for m in messages], properties=[m.properties_raw for m in messages],
                   flag=col("flag"), reconsume_times=col("reconsume_times"),
                   prepared_transaction_offset=col("prepared_transaction_offset"),
                   batch_id=None if batch_ids is None else np.asarray(batch_ids, np.int64),
                   tags=[m.tags for m in messages], uniq_keys=[m.uniq_key for m in messages],
                   keys=[m.properties.get(L.PROPERTY_KEYS) for m in messages])

    def column(self, name: str, dtype, default=0) -> np.ndarray:
        v = getattr(self, name)
        return np.full(len(self), default, dtype) if v is None else np.asarray(v, dtype)

    def message(self, i: int, **assigned) -> Message:
        """Record ``i`` as a :class:`Message` (for the scalar reference path and bookkeeping)."""
        return Message(topic=self.topics[int(self.topic_id[i])], body=self.body[i], queue_id=int(self.queue_id[i]),
                       properties_raw=self.properties[i], flag=int(self.column("flag", np.int64)[i]),
                       sys_flag=int(self.sys_flag[i]), born_timestamp=int(self.born_timestamp[i]),
                       born_host=self.hosts[int(self.born_host_id[i])],
                       store_timestamp=int(self.store_timestamp[i]),
                       store_host=self.hosts[int(self.store_host_id[i])],
                       reconsume_times=int(self.column("reconsume_times", np.int64)[i]),
                       prepared_transaction_offset=int(self.column("prepared_transaction_offset", np.int64)[i]),
                       **assigned)

    def messages(self) -> list[Message]:
        return [self.message(i) for i in range(len(self))]


# Records per pass over objects the caller made (bodies, strings): scattered over the heap, each costs a cache
# miss when first touched; several passes over one block find it still in the CPU caches.
_BLOCK = 2048


def _lengths_and_crcs(bodies: list) -> tuple[np.ndarray, np.ndarray]:
    """len() and the record's BODYCRC (zlib.crc32 & 0x7FFFFFFF, as UtilAll.crc32) of every body."""
    n = len(bodies)
    lengths, crcs = np.empty(n, np.int64), np.empty(n, np.int64)
    for s in range(0, n, _BLOCK):
        block = bodies[s:s + _BLOCK]
        k = len(block)
        lengths[s:s + k] = np.fromiter(map(len, block), np.int64, k)
        crcs[s:s + k] = np.fromiter(map(zlib.crc32, block), np.int64, k)
    return lengths, crcs & 0x7FFFFFFF


def _take(items: list, rows: np.ndarray) -> list:
    """``[items[r] for r in rows]``, the loop in C."""
    return list(map(items.__getitem__, rows.tolist()))


def _find_all(buf: bytes, needle: bytes) -> np.ndarray:
    """Where ``needle`` starts in ``buf``, every occurrence (overlapping ones too)."""
    found = []
    i = buf.find(needle)
    while i >= 0:
        found.append(i)
        i = buf.find(needle, i + 1)
    return np.array(found, np.int64)


class _Properties:
    """Records' properties strings as UTF-8, back to back in one buffer (record r at offsets[r]:offsets[r+1]),
    for reading a property of many records at once."""

    def __init__(self, encoded: list, lengths: np.ndarray):
        self.encoded, self.lengths = encoded, lengths
        self.buf = b"".join(encoded)
        self.offsets = np.zeros(len(encoded) + 1, np.int64)
        np.cumsum(lengths, out=self.offsets[1:])

    def occurrences(self, needle: bytes) -> tuple[np.ndarray, np.ndarray]:
        """Every ``needle`` inside one record: (positions, records), ascending."""
        at = _find_all(self.buf, needle)
        rec = np.searchsorted(self.offsets, at, side="right") - 1
        inside = at + len(needle) <= self.offsets[rec + 1]
        return at[inside], rec[inside]

    def column(self, name: str, rows: np.ndarray | None = None, found=None) -> tuple[list, np.ndarray]:
        """``property_value(properties[r], name)`` of every record, or of each of ``rows``: (distinct values
        then None, each one's index into that list).  ``found`` is ``occurrences`` of ``name`` +
        NAME_VALUE_SEPARATOR when the caller has it."""
        if rows is not None:  # a buffer of just those records: less to search
            return _Properties(_take(self.encoded, rows), self.lengths[rows]).column(name)
        buf, offsets = self.buf, self.offsets
        needle = (name + L.NAME_VALUE_SEPARATOR).encode()
        at, rec = found if found is not None else self.occurrences(needle)
        # a key starts a segment: at the record's start or right after a property separator
        raw = np.frombuffer(buf, np.uint8)
        keep = (at == offsets[rec]) | (raw[np.maximum(at - 1, 0)] == ord(L.PROPERTY_SEPARATOR))
        rec, start = rec[keep], at[keep] + len(needle)
        limit = offsets[rec + 1]
        end = np.fromiter(map(buf.find, repeat(L.PROPERTY_SEPARATOR.encode(), len(rec)), start.tolist(),
                              limit.tolist()), np.int64, len(rec))
        end = np.where(end < 0, limit, end)
        nonempty = end > start  # an empty value drops the segment; of the rest, the record's last one wins
        rec, start, end = rec[nonempty], start[nonempty], end[nonempty]
        last = np.ones(len(rec), bool)
        last[:-1] = rec[1:] != rec[:-1]
        rec, start, end = rec[last], start[last], end[last]
        values = [buf[a:b] for a, b in zip(start.tolist(), end.tolist())]
        table = list(dict.fromkeys(values))
        index = {v: k for k, v in enumerate(table)}
        ids = np.full(len(offsets) - 1, len(table), np.int64)
        ids[rec] = np.fromiter(map(index.__getitem__, values), np.int64, len(values))
        return [v.decode("utf-8") for v in table] + [None], ids


def _small(ids: np.ndarray) -> np.ndarray:
    """Ids as uint16 when they fit: numpy sorts 16-bit integers with a linear radix sort."""
    return ids.astype(np.uint16) if len(ids) and 0 <= ids.min() and ids.max() < 1 << 16 else ids


_CQ_DTYPE = L.CQ_UNIT.dtype()
_INDEX_ENTRY_DTYPE = L.INDEX_ENTRY.dtype()
_SLOT_TYPE = L.INDEX_SLOT.numpy_type("index")


def _np_dtype(lay: L.RecordLayout) -> np.dtype:
    """The header before BODY as a big-endian structured dtype, from the layout declaration."""
    codes = re.findall(r"(\d*)([a-zA-Z])", lay.header_struct)
    fields, names = [], iter(lay.header_names)
    for count, code in codes:
        name = next(names)
        if code == "s":
            fields.append((name, f"S{count}"))
        else:
            fields.append((name, L.NUMPY_CODES[code]))
    dt = np.dtype(fields)
    assert dt.itemsize == lay.body_offset
    return dt


def _validate(writer, batch: RecordBatch):
    n = len(batch)
    for name in ("topic_id", "queue_id", "sys_flag", "born_timestamp", "store_timestamp", "born_host_id",
                 "store_host_id"):
        if len(getattr(batch, name)) != n:
            raise WriterError(ErrorKind.INVALID_INPUT, f"column {name} has {len(getattr(batch, name))} rows, "
                              f"body has {n}", field=name)
    if len(batch.properties) != n:
        raise WriterError(ErrorKind.INVALID_INPUT, "properties and body differ in length", field="properties")
    for t in batch.topics:
        validate_topic(t)
    qid = np.asarray(batch.queue_id, np.int64)
    if n and (qid.min() < 0 or qid.max() > 0x7FFFFFFF):
        validate_queue_id(int(qid[np.argmax((qid < 0) | (qid > 0x7FFFFFFF))]))
    flags = np.array([host_flags(h, h) for h in batch.hosts], np.int64)  # per host: v6 -> 0x30
    born_v6 = (flags[np.asarray(batch.born_host_id)] & L.BORNHOST_V6_FLAG) != 0
    store_v6 = (flags[np.asarray(batch.store_host_id)] & L.STOREHOST_V6_FLAG) != 0
    sf = np.asarray(batch.sys_flag, np.int64)
    bad = (((sf & L.BORNHOST_V6_FLAG) != 0) != born_v6) | (((sf & L.STOREHOST_V6_FLAG) != 0) != store_v6)
    if bad.any():
        i = int(np.argmax(bad))
        raise WriterError(ErrorKind.INVALID_INPUT, f"record {i}: sys_flag 0x{int(sf[i]):X} IPv6 bits disagree with "
                          f"its hosts", field="sys_flag")


@dataclass
class Appended:
    physical_offset: np.ndarray
    queue_offset: np.ndarray
    store_size: np.ndarray


def append_many(writer: StoreWriter, batch: RecordBatch) -> Appended:
    """Append every record of ``batch`` to ``writer``, vectorized: the same bytes as ``writer.append`` for each
    record in turn (``writer.append_batch`` for each run of equal batch ids); returns where each went."""
    if writer.rocketmq5:  # the 5.x put path (CRC, LMQ, BatchCQ, timer) is the scalar one
        return _append_scalar(writer, batch)
    enabled = gc.isenabled()
    gc.disable()  # hundreds of thousands of short-lived objects, no cycles: skip the collector's passes
    try:
        return _append_many(writer, batch)
    finally:
        if enabled:
            gc.enable()


def _append_scalar(writer: StoreWriter, batch: RecordBatch) -> Appended:
    """``writer.append`` / ``append_batch`` record by record (a writer with its 5.x side on)."""
    bid = batch.column("batch_id", np.int64, -1)
    stored, i, n = [], 0, len(batch)
    while i < n:
        j = i + 1
        while bid[i] >= 0 and j < n and bid[j] == bid[i]:
            j += 1
        msgs = [batch.message(k) for k in range(i, j)]
        stored.extend(writer.append_batch(msgs) if bid[i] >= 0 else [writer.append(msgs[0])])
        i = j
    return Appended(np.array([m.physical_offset for m in stored], np.int64),
                    np.array([m.queue_offset for m in stored], np.int64),
                    np.array([m.store_size for m in stored], np.int64))


# RecordBatch's column for each of the writer's BATCH_SHARED_FIELDS (same id, same value: the tables are distinct)
_BATCH_COLUMNS = {"topic": "topic_id", "born_host": "born_host_id", "store_host": "store_host_id"}


def _batch_ids(writer: StoreWriter, batch: RecordBatch, size: np.ndarray) -> np.ndarray:
    """The batch id column, every classic batch (a run of equal ids >= 0) checked as ``StoreWriter.check_batch``
    does: the runs that break a rule are found with array operations, the first of them then gets the scalar
    check's refusal."""
    bid = batch.column("batch_id", np.int64, -1)
    n = len(bid)
    if not n or bid.max() < 0:
        return bid
    first = np.ones(n, bool)
    first[1:] = bid[1:] != bid[:-1]
    starts = np.flatnonzero(first)
    bad_run = (bid[starts] >= 0) & \
        (np.add.reduceat(size, starts) + L.END_FILE_MIN_BLANK_LENGTH > writer.config.mappedFileSizeCommitLog)
    differs = np.zeros(n, bool)
    for name in BATCH_SHARED_FIELDS:
        col = batch.column(_BATCH_COLUMNS.get(name, name), np.int64)
        differs[1:] |= col[1:] != col[:-1]
    tran = np.asarray(batch.sys_flag, np.int64) & L.TRANSACTION_MASK
    bad_row = (bid >= 0) & ((differs & ~first) | (tran != L.TRANSACTION_NOT_TYPE) |
                            (batch.column("prepared_transaction_offset", np.int64) != 0))
    bad_run[np.cumsum(first)[bad_row] - 1] = True
    for k in np.flatnonzero(bad_run)[:1].tolist():
        a, b = int(starts[k]), int(starts[k + 1]) if k + 1 < len(starts) else n
        try:
            writer.check_batch([batch.message(i) for i in range(a, b)])
        except WriterError as e:
            raise WriterError(e.kind, f"batch {int(bid[a])} (records {a}-{b - 1}): {e.message}",
                              field=e.field) from None
    return bid


def _append_many(writer: StoreWriter, batch: RecordBatch) -> Appended:
    writer.check_open()
    n = len(batch)
    if n == 0:
        return Appended(np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(0, np.int64))
    _validate(writer, batch)
    cfg = writer.config
    seg_size = cfg.mappedFileSizeCommitLog
    topic_id = np.asarray(batch.topic_id, np.int64)
    queue_id = np.asarray(batch.queue_id, np.int64)
    sys_flag = np.asarray(batch.sys_flag, np.int64)
    store_ts = np.asarray(batch.store_timestamp, np.int64)
    qkey = topic_id * (1 << 32) + queue_id  # one topic-queue
    topic_bytes = [t.encode("utf-8") for t in batch.topics]
    props_bytes = list(map(str.encode, batch.properties)) if batch.properties and \
        isinstance(batch.properties[0], str) else list(batch.properties)
    body_len, crc = _lengths_and_crcs(batch.body)
    props_len = np.fromiter(map(len, props_bytes), np.int64, n)
    topic_len = np.array([len(t) for t in topic_bytes], np.int64)[topic_id]
    born_v6 = (sys_flag & L.BORNHOST_V6_FLAG) != 0
    store_v6 = (sys_flag & L.STOREHOST_V6_FLAG) != 0
    lay44 = L.record_layout(False, False)
    header = lay44.body_offset + np.where(born_v6, L.IPV6_HOST_WIDTH - L.IPV4_HOST_WIDTH, 0) + \
        np.where(store_v6, L.IPV6_HOST_WIDTH - L.IPV4_HOST_WIDTH, 0)
    size = header + body_len + lay44.topic_length_width + topic_len + 2 + props_len
    # the same refusals as StoreWriter.check_record
    if body_len.max() > cfg.maxMessageSize:
        i = int(np.argmax(body_len))
        raise WriterError(ErrorKind.INVALID_INPUT, f"record {i}: body is {int(body_len[i])} bytes; maxMessageSize "
                          f"is {cfg.maxMessageSize}", field="body")
    if props_len.max() > L.MAX_PROPERTIES_LENGTH:
        raise WriterError(ErrorKind.INVALID_INPUT, f"properties over {L.MAX_PROPERTIES_LENGTH} bytes",
                          field="properties")
    if size.max() + L.END_FILE_MIN_BLANK_LENGTH > min(seg_size, cfg.maxMessageSize + 64 * 1024 + 8):
        writer.check_record(batch.message(int(np.argmax(size))))  # raises the scalar path's message

    # ---- records the broker keeps books on (REAL_TOPIC: delays, halves, commits; retry/DLQ topics) ----
    retry_like = np.array([t.startswith((L.RETRY_GROUP_TOPIC_PREFIX, L.DLQ_GROUP_TOPIC_PREFIX)) for t in batch.topics],
                          bool)
    props = _Properties(props_bytes, props_len)
    real_mark = props.occurrences(_REAL_TOPIC_MARK.encode())
    special = np.zeros(n, bool)
    special[real_mark[1]] = True
    special |= retry_like[topic_id]
    special_rows = np.flatnonzero(special)
    reals, real_id = props.column(L.PROPERTY_REAL_TOPIC, found=real_mark)
    real_qids, real_qid_id = props.column(L.PROPERTY_REAL_QUEUE_ID, special_rows)  # per special row
    real_qids[-1] = ""  # a missing REAL_QID reads as "" (StoreWriter._register_for_record)
    # registering the same topic, queue, REAL_TOPIC and REAL_QID again changes nothing: first rows only
    _, reg_key = np.unique(qkey[special_rows], return_inverse=True)
    _, reg_key = np.unique(reg_key * len(reals) + real_id[special_rows], return_inverse=True)
    _, first = np.unique(reg_key * len(real_qids) + real_qid_id, return_index=True)
    events = []  # (record index, 0 special / 1 topic, register_record's arguments): specials first
    by_topic = np.argsort(_small(topic_id), kind="stable")
    tids = topic_id[by_topic]
    bounds = np.flatnonzero(np.diff(tids)) + 1
    for rows in np.split(by_topic, bounds):
        name = batch.topics[int(topic_id[rows[0]])]
        if name == L.TRANS_OP_HALF_TOPIC:  # never registered (StoreWriter._register_fields)
            continue
        q = queue_id[rows]
        # only a record whose queue id beats every earlier one can create or widen the topic config
        prev_max = np.concatenate(([-1], np.maximum.accumulate(q)[:-1]))
        for j in np.flatnonzero(q > prev_max).tolist():
            events.append((int(rows[j]), 1, (name, int(q[j]))))
    for j in first.tolist():
        r = int(special_rows[j])
        events.append((r, 0, (batch.topics[int(topic_id[r])], int(queue_id[r]), reals[int(real_id[r])],
                              real_qids[int(real_qid_id[j])])))
    events.sort()  # (record, kind) never repeats, so the payloads are never compared

    # ---- placement: the writer's roll rule, batches kept whole ------------------------------------
    batch_id = _batch_ids(writer, batch, size)
    phys = np.empty(n, np.int64)
    seg_runs = []  # (physical offset, first record, end record): records placed back to back in one segment
    i = 0
    while i < n:
        ends = np.cumsum(size[i:])
        j = i + int(np.searchsorted(ends, writer.room(), side="right"))
        if j < n and batch_id[j] >= 0:
            while j > i and batch_id[j - 1] == batch_id[j]:  # the whole batch goes to the next segment
                j -= 1
        if j > i:
            at = writer.reserve(int(ends[j - i - 1]))
            phys[i] = at
            phys[i + 1:j] = at + ends[:j - i - 1]
            seg_runs.append((at, i, j))
        if j < n:
            writer.roll()
        i = j

    # ---- queue offsets: topicQueueTable + rank inside each topic-queue (NOT/COMMIT only) --------
    tran = sys_flag & L.TRANSACTION_MASK
    dispatch = (tran == L.TRANSACTION_NOT_TYPE) | (tran == L.TRANSACTION_COMMIT_TYPE)
    queue_offset = np.zeros(n, np.int64)
    didx = np.flatnonzero(dispatch)
    ukeys, inverse = np.unique(qkey[didx], return_inverse=True)
    order = np.argsort(_small(inverse), kind="stable")
    counts = np.bincount(inverse, minlength=len(ukeys))
    group_start = np.concatenate(([0], np.cumsum(counts)[:-1]))
    rank = np.empty(len(didx), np.int64)
    rank[order] = np.arange(len(didx)) - np.repeat(group_start, counts)
    qnames = [(batch.topics[int(k >> 32)], int(k & 0xFFFFFFFF)) for k in ukeys]
    bases = np.array([writer.queue_table.get(q, 0) for q in qnames], np.int64)
    queue_offset[didx] = bases[inverse] + rank
    qdense = np.zeros(n, np.int64)  # each dispatched record's queue as a small dense id (cheap to sort)
    qdense[didx] = inverse
    for q, b, c in zip(qnames, bases.tolist(), counts.tolist()):
        writer.queue_table[q] = b + c

    # ---- CRC and headers (one structured array per host layout) --------------------------------
    host_ip, host_port = zip(*(parse_host(h) for h in batch.hosts))
    port_arr = np.array(host_port, np.int64)
    born_id = np.asarray(batch.born_host_id, np.int64)
    store_id = np.asarray(batch.store_host_id, np.int64)
    cols = {
        "store_size": size, "magic": L.MAGIC_V1, "body_crc": crc, "queue_id": queue_id,
        "flag": batch.column("flag", np.int64), "queue_offset": queue_offset, "physical_offset": phys,
        "sys_flag": sys_flag, "born_timestamp": np.asarray(batch.born_timestamp, np.int64),
        "store_timestamp": store_ts, "reconsume_times": batch.column("reconsume_times", np.int64),
        "prepared_transaction_offset": batch.column("prepared_transaction_offset", np.int64),
        "body_length": body_len,
    }
    variant = born_v6.astype(np.int64) * 2 + store_v6
    variants = np.unique(variant).tolist()
    # every record's header as one bytes object, made in C (np.void items come out as bytes): a Python
    # loop slicing one big buffer costs several times more
    header_rows = np.empty(n, object) if len(variants) > 1 else None
    for v in variants:
        rows = np.flatnonzero(variant == v) if len(variants) > 1 else slice(None)
        lay = L.record_layout(bool(v & 2), bool(v & 1))
        dt = _np_dtype(lay)
        arr = np.zeros(n if len(variants) == 1 else len(rows), dt)
        for name in dt.names:
            if name.endswith("_ip"):
                width = dt[name].itemsize
                ips = np.array([ip if len(ip) == width else bytes(width) for ip in host_ip], f"S{width}")
                arr[name] = ips[(born_id if name.startswith("born") else store_id)[rows]]
            elif name.endswith("_port"):
                arr[name] = port_arr[(born_id if name.startswith("born") else store_id)[rows]]
            else:
                c = cols[name]
                arr[name] = c if np.isscalar(c) else c[rows]
        items = arr.view(np.dtype((np.void, lay.body_offset))).tolist()
        if header_rows is None:
            header_rows = items
        else:
            header_rows[rows] = items
    if not isinstance(header_rows, list):
        header_rows = header_rows.tolist()
    # TOPICLENGTH | TOPIC | PROPERTIESLENGTH: one bytes object per (topic, properties length), shared
    mid_key = topic_id * (L.MAX_PROPERTIES_LENGTH + 1) + props_len
    distinct, mid_of = np.unique(mid_key, return_inverse=True)
    mids = []
    for t, pl in zip(*np.divmod(distinct, L.MAX_PROPERTIES_LENGTH + 1)):
        tb = topic_bytes[int(t)]
        mids.append(len(tb).to_bytes(lay44.topic_length_width, "big") + tb + int(pl).to_bytes(2, "big"))
    mid_rows = _take(mids, mid_of)

    # ---- commitlog bytes: one write per block of records, on the I/O thread -------------------------
    body = batch.body
    for pos, a, b in seg_runs:
        for s in range(a, b, _BLOCK):  # joined a block at a time, while its pieces are in the CPU caches
            e = min(s + _BLOCK, b)
            pieces = [None] * (4 * (e - s))
            pieces[0::4], pieces[1::4], pieces[2::4], pieces[3::4] = \
                header_rows[s:e], body[s:e], mid_rows[s:e], props_bytes[s:e]
            chunk = b"".join(pieces)
            writer.write_commitlog(pos, [chunk])  # few blocks in flight: memory stays bounded
            pos += len(chunk)
    del header_rows, mid_rows
    # ---- what dispatch reads from the properties -----------------------------------------------
    tags, uniqs, keys = batch.tags, batch.uniq_keys, batch.keys
    if tags is None or uniqs is None or keys is None:
        all_props = [parse_properties(p) for p in batch.properties]
        tags = [p.get(L.PROPERTY_TAGS) for p in all_props]
        uniqs = [p.get(L.PROPERTY_UNIQ_KEY) for p in all_props]
        keys = [p.get(L.PROPERTY_KEYS) for p in all_props]
    distinct = list(set(tags) - {None, ""})
    codes = dict(zip(distinct, java_hash_many(distinct).tolist()))
    codes[None] = codes[""] = 0
    tags_code = np.fromiter(map(codes.__getitem__, tags), np.int64, n)
    if L.SCHEDULE_TOPIC in batch.topics:
        sched_tid = batch.topics.index(L.SCHEDULE_TOPIC)
        rows = np.flatnonzero(dispatch & (topic_id == sched_tid))
        if len(rows):
            table, delay_id = props.column(L.PROPERTY_DELAY_TIME_LEVEL, rows)
            delays = _take(table, delay_id)
            tags_code[rows] = Message.schedule_tags_codes(delays, store_ts[rows], tags_code[rows], writer.delay_levels)

    # ---- flush timeline: stretches between the moments a flush service runs ---------------------
    cummax = np.maximum.accumulate(store_ts)
    flush = writer.flush
    if flush.start is None:
        flush.begin(int(store_ts[0]))
    cuts = {0, n}
    t_cl, t_cq = flush.next_cl, flush.next_cq
    while True:
        t = min(t_cl, t_cq)
        at = int(np.searchsorted(cummax, t, side="left"))
        if at >= n:
            break
        cuts.add(at)
        if t_cl == t:
            t_cl += cfg.flushCommitLogThoroughInterval
        if t_cq == t:
            t_cq += cfg.flushConsumeQueueThoroughInterval
    cuts = sorted(cuts)
    index_entries = _index_entries(batch, tran, uniqs, keys) if cfg.messageIndexEnable else None

    # delayOffset.json bookkeeping, in record order (it shares no state with the flush model or registration)
    tracked = special_rows[dispatch[special_rows]]
    if len(tracked):
        writer.track_schedule_many(_take(batch.topics, topic_id[tracked]), queue_id[tracked].tolist(),
                                   queue_offset[tracked].tolist(), phys[tracked].tolist(), _take(uniqs, tracked),
                                   _take(reals, real_id[tracked]))
    ev, n_events = 0, len(events)
    ts_l = store_ts.tolist()
    for a, b in zip(cuts, cuts[1:]):
        flush.advance(ts_l[a])
        while ev < n_events and events[ev][0] < b:
            r, _kind, payload = events[ev]
            writer.register_record(*payload, at=ts_l[r])
            ev += 1
        logics_before = flush.logics
        _dispatch_cq(writer, a, b, dispatch, qkey, qdense, batch, phys, size, tags_code, queue_offset, store_ts)
        if index_entries is not None:
            _dispatch_index(writer, a, b, index_entries, phys, store_ts, dispatch, logics_before)
        flush.appended(int(store_ts[b - 1]))
    writer.appended(n, at=int(store_ts[-1]))
    return Appended(phys, queue_offset, size)


def _present_joined(strings: list) -> tuple[np.ndarray, str, np.ndarray]:
    """The strings that are not None: (their rows, themselves back to back, their lengths), a block at a time."""
    rows, parts, lengths = [], [], []
    for s in range(0, len(strings), _BLOCK):
        block = strings[s:s + _BLOCK]
        present = list(map(is_not, block, repeat(None)))
        if not all(present):
            block = list(compress(block, present))
            rows.append(s + np.flatnonzero(present))
        else:
            rows.append(np.arange(s, s + len(block)))
        parts.append("".join(block))
        lengths.append(np.fromiter(map(len, block), np.int64, len(block)))
    if not parts:
        return np.zeros(0, np.int64), "", np.zeros(0, np.int64)
    return np.concatenate(rows), "".join(parts), np.concatenate(lengths)


def _index_entries(batch: RecordBatch, tran, uniqs, keys):
    """IndexService.buildIndex's keys for every record, in put order (UNIQ_KEY, then each of KEYS):
    (record index array, index hash array).  ROLLBACK records are not indexed."""
    n = len(batch)
    topic_id = np.asarray(batch.topic_id, np.int64)
    rollback = tran == L.TRANSACTION_ROLLBACK_TYPE
    if rollback.any():
        drop = np.flatnonzero(rollback).tolist()
        uniqs, keys = list(uniqs), list(keys)
        for r in drop:
            uniqs[r] = keys[r] = None
    u_rows, u_joined, u_len = _present_joined(uniqs)
    k_rows, k_joined, k_chars = _present_joined(keys)
    k_part, k_hash, k_len = java_hash_tokens_joined(k_joined, k_chars)
    k_owner = k_rows[k_part]
    has_u = np.zeros(n, bool)
    has_u[u_rows] = True
    n_keys = np.bincount(k_owner, minlength=n)
    per = has_u.astype(np.int64) + n_keys
    first = np.cumsum(per) - per  # where each record's entries start
    rec = np.repeat(np.arange(n, dtype=np.int64), per)
    full = np.empty(int(per.sum()), np.int32)
    prefix = java_hash_many([f"{t}#" for t in batch.topics])  # hash("topic#" + key) from the two parts
    if len(u_rows):
        h, ln = java_hash_joined(u_joined, u_len, with_lengths=True)
        full[first[u_rows]] = java_hash_concat(prefix[topic_id[u_rows]], h, ln)
    if len(k_owner):
        token_first = np.cumsum(n_keys) - n_keys  # each record's first token among all tokens
        pos = first[k_owner] + has_u[k_owner] + (np.arange(len(k_owner)) - token_first[k_owner])
        full[pos] = java_hash_concat(prefix[topic_id[k_owner]], k_hash, k_len)
    return rec, index_hash_of(full).astype(np.int64)


def _dispatch_cq(writer, a, b, dispatch, qkey, qdense, batch, phys, size, tags_code, queue_offset, store_ts):
    """ConsumeQueue.putMessagePositionInfo for records a..b-1: one units array, one write per queue."""
    rows = a + np.flatnonzero(dispatch[a:b])
    if not len(rows):
        return
    order = np.argsort(_small(qdense[rows]), kind="stable")
    rs = rows[order]
    sk = qdense[rs]
    units = np.empty(len(rs), _CQ_DTYPE)
    units["physical_offset"], units["size"], units["tags_code"] = phys[rs], size[rs], tags_code[rs]
    raw = memoryview(units.tobytes())
    bounds = (np.flatnonzero(np.diff(sk)) + 1).tolist()
    starts = [0] + bounds
    ends = bounds + [len(rs)]
    first_q = queue_offset[rs[starts]].tolist()
    keys = qkey[rs[starts]].tolist()
    wrote_any = False
    for s_, e_, q0, k in zip(starts, ends, first_q, keys):
        cq = writer.consume_queue(batch.topics[k >> 32], k & 0xFFFFFFFF)
        wrote_any |= cq.put_units(raw[s_ * L.CQ_STORE_UNIT_SIZE:e_ * L.CQ_STORE_UNIT_SIZE], q0)
    if wrote_any:
        writer.flush.logics = int(store_ts[rows[-1]])


def _dispatch_index(writer, a, b, entries, phys, store_ts, dispatch, logics_before):
    """IndexService.buildIndex for records a..b-1.  A full file is replaced when the next record is
    dispatched (any record: buildIndex asks for the file before looking at keys), with the checkpoint
    values of that moment."""
    flush = writer.flush
    logics_after, physic_after = flush.logics, flush.physic
    last_dispatched = np.maximum.accumulate(np.where(dispatch[a:b], np.arange(a, b), -1))
    sync = writer.config.flushDiskType == "SYNC_FLUSH"

    def roll_at(r: int):
        j = int(last_dispatched[r - a])
        flush.logics = int(store_ts[j]) if j >= 0 else logics_before
        if sync and r > a:
            flush.physic = int(store_ts[r - 1])
        writer.last_index_file(at=int(store_ts[r]))
        flush.logics, flush.physic = logics_after, physic_after

    f = writer.index_file
    if f is None or f.full:
        roll_at(a)
    all_rec, all_hash = entries
    lo, hi = np.searchsorted(all_rec, [a, b])
    rec, hashes = all_rec[lo:hi], all_hash[lo:hi]
    keep = phys[rec] >= writer.index_file.end_phy  # already indexed (reopened store)
    if not keep.all():
        rec, hashes = rec[keep], hashes[keep]
    pos = 0
    while pos < len(rec):
        f = writer.index_file
        take = min(len(rec) - pos, f.num - f.count)
        sl = slice(pos, pos + take)
        _put_many(f, hashes[sl], phys[rec[sl]], store_ts[rec[sl]])
        pos += take
        if f.full:
            last = int(rec[pos - 1])
            nxt = last if pos < len(rec) and int(rec[pos]) == last else last + 1
            if nxt < b:
                roll_at(nxt)


def _put_many(f, key_hash, phy, ts):
    """``IndexFile.putKey`` for consecutive entries of one file, vectorized."""
    k = len(key_hash)
    count0 = f.count
    idx = count0 + np.arange(k, dtype=np.int64)
    begin = f.begin_ts
    td = np.empty(k, np.int64)
    first = 0
    if count0 <= 1:  # the first entry is timed against the header as created, then the header restarts
        d = int(ts[0]) - begin
        d = d // 1000 if d >= 0 else -((-d) // 1000)
        td[0] = 0 if begin <= 0 or d < 0 else min(d, 0x7FFFFFFF)
        begin = int(ts[0])
        f.begin_phy, f.begin_ts = int(phy[0]), begin
        first = 1
    if k > first:
        d = ts[first:] - begin
        d = np.where(d >= 0, d // 1000, -((-d) // 1000))
        td[first:] = 0 if begin <= 0 else np.clip(d, 0, 0x7FFFFFFF)
    slots = key_hash % f.slots
    slot_base = L.INDEX_HEADER_SIZE
    table = np.frombuffer(f.m.map, _SLOT_TYPE, count=f.slots, offset=slot_base)
    # by slot, then put order: one sort of distinct keys (SIMD) is several times faster than a stable argsort
    by_slot = np.sort(slots * k + np.arange(k))
    order, ss = by_slot % k, by_slot // k
    new_group = np.ones(k, bool)
    new_group[1:] = ss[1:] != ss[:-1]
    prev_sorted = np.empty(k, np.int64)
    prev_sorted[1:] = idx[order][:-1]
    existing = table[ss].astype(np.int64)
    # a slot value outside (0, indexCount] at put time counts as empty (IndexFile.putKey)
    at_put = idx[order]
    existing = np.where((existing <= 0) | (existing > at_put), 0, existing)
    prev_sorted[new_group] = existing[new_group]
    prev = np.empty(k, np.int64)
    prev[order] = prev_sorted
    entries = np.zeros(k, _INDEX_ENTRY_DTYPE)
    entries["key_hash"], entries["physical_offset"] = key_hash, phy
    entries["time_diff"], entries["prev_index"] = td, prev
    pos = L.INDEX_HEADER_SIZE + f.slots * L.INDEX_SLOT_SIZE + count0 * L.INDEX_ENTRY_SIZE
    f.m.write(pos, entries.tobytes())
    last_in_group = np.ones(k, bool)
    last_in_group[:-1] = ss[1:] != ss[:-1]
    new_slots = ss[last_in_group]
    new_vals = idx[order][last_in_group]
    del table
    slot_view = np.ndarray((f.slots,), _SLOT_TYPE, buffer=f.m.map, offset=slot_base)
    slot_view[new_slots] = new_vals
    del slot_view  # release the mapping's buffer export
    f.slot_count += int(np.count_nonzero(existing[new_group] == 0))
    f.count = count0 + k
    f.end_phy, f.end_ts = int(phy[-1]), int(ts[-1])
    f.m.write(0, _INDEX_HEADER.pack(f.begin_ts, f.end_ts, f.begin_phy, f.end_phy, f.slot_count, f.count))
