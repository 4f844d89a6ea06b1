"""Replay: write extracted or salvaged messages into a fresh, complete broker store.

  rocketmq-forensics replay --input EXTRACT_DIR [--input-format parquet|delta|jsonl] --out NEW_STORE
  rocketmq-forensics replay --repair STORE --out NEW_STORE [--walk salvage|kept] [--dedupe]
         [--overwrite] [--dry-run] [--config broker.conf] [--set NAME=VALUE ...] [--store-host HOST] [--no-trace]
         [--format text|json]

``--input`` takes an extract (``rocketmq-forensics extract``) or any table with the canonical message columns
(``topic`` and ``body`` required; ``properties_raw``, or ``properties``, and the other stored fields as in the
JSON Lines format of docs/writing-stores.md).  ``--repair STORE`` is extract + replay in one go: every record
the salvage walk frames, also past damage and past the point where the broker's recovery would stop
(``--walk kept``: only what the broker keeps after its predicted recovery), optionally de-duplicated like
``extract --dedupe``.

Records are written by the project's store writer in their original order -- by (broker, physical offset),
so every queue keeps its order -- and get new physical and queue offsets; the consume queues, index files,
checkpoint and config/*.json are built as the broker builds them, and the store is shut down cleanly: a
complete store.  Each record keeps its topic, queue id, flags, timestamps, hosts (``--store-host`` restamps
the store host), reconsume times, body and properties string (UNIQ_KEY and KEYS stay, so the new index finds
them), and gains three properties that keep it traceable (``--no-trace`` leaves the properties as they were):

  FORENSICS_ORIGIN_MSG_ID        the offsetMsgId it had in the dump (original store host + physical offset)
  FORENSICS_ORIGIN_BROKER        the dump it came from (the ``broker`` label)
  FORENSICS_ORIGIN_QUEUE_OFFSET  its queue offset there

A record that already carries them (a replay of a replay) keeps the first origin.  Transactions stay whole:
a COMMIT (or ROLLBACK) record's prepared-transaction offset moves to its half's (or PREPARED record's) new
offset, and an op record's body (half queue offsets) to the halves' new queue offsets; an op whose halves
were not replayed is rejected (TX_OP_WITHOUT_HALF) rather than resolve the wrong half.  A ``__CRC32#`` property
(RocketMQ 5.x) covers a record's old offsets: the new store computes it afresh (``enabledAppendPropCRC``), or
else it is removed.

A repair also carries the source's config: topics.json (each topic's queues, perm and 5.x attributes: a
``queue.type=BatchCQ`` topic keeps its batch consume queue, and one that only its batchconsumequeue/ folder shows
gets the attribute too), the subscription groups with their settings, and the committed consumer offsets --
consumerOffset.json's, or lmqConsumerOffset.json's with the LMQ offsets of %LMQ% groups -- translated to the new
queue offsets (a group resumes at the first message it had not consumed; one that had consumed the whole queue,
or committed past its end, stays at the end).  A 5.x source's timer store is rebuilt consistent with the timers
replayed: every timer record enqueued again, and the source's timercheck read time carried, so the slots its
timer had read stay read (their timers fired, rolled or recalled, as the replayed re-puts show) and the later
ones pending -- a 5.x broker fires each pending timer once and no fired one again; timer records the source's
enqueue had not reached are left to the new broker's enqueue, and its timermetrics counts are carried.  What a
repair does not carry (a config file it neither carries nor rebuilds, consumerFilter.json's filters, the
compaction store, a timer store it cannot rebuild faithfully) is named in the summary's notes.

Settings: ``--config broker.conf`` if given, else the source's (a repair's store: its segment, consume-queue,
batch-queue, timer-log and index sizes, and the 5.x features its files show -- a timer store
``timerWheelEnable``, LMQ queues ``enableLmq`` and ``enableMultiDispatch``, records with ``__CRC32#``
``enabledAppendPropCRC``; an extract: its manifest's ``source_geometry``; RocketMQ's defaults otherwise); then
``--set NAME=VALUE`` (broker.conf names) on top.  A record the broker would refuse is rejected with the writer's
reason (WRITER_REFUSED).

Output (stdout): ``--format text`` (the default) says in words what was written, rejected and carried; ``--format
json`` prints one JSON summary line (a ``--dry-run``: first its plan as JSON Lines, a ``queue`` line per queue --
``new_queue_offsets`` [first, count] of the queue offsets its messages take, ``records``, ``not_dispatched``
PREPARED/ROLLBACK records, which get no queue entry, ``from`` {broker: [first, last] original queue offset} --
and a ``reject`` line per rejection).  The summary
(also written by ``--manifest PATH``):

  source, output, dry_run          what was read, where the store went, whether anything was written
  config                           the new store's geometry and store host, and the 5.x settings that are on
  counts                           selected, written (counted back from the new commitlog), rejected and
                                   rejected_by_reason; reconciled: selected = written + rejected
  queues                           queues written to (topic, queue id)
  trace_properties                 the origin properties each record gained ([] with --no-trace)
  dangling_prepared_offsets        COMMIT/ROLLBACK records whose half message was not replayed: their
                                   prepared-transaction offset is left pointing into the old store
  consumer_offsets_carried         (a repair) committed offsets carried, per group and queue
  lmq_consumer_offsets_carried     (a repair) LMQ offsets of %LMQ% groups carried (lmqConsumerOffset.json)
  notes                            everything of the source that was not carried, or carried with a caveat
  rejected_examples                the first 20 rejections: physical offset, msg id, reason, detail

``--dry-run`` writes nothing.  Counts reconcile or the run fails.  The output must not exist (or be empty) unless
``--overwrite``, and never lies in, over or around an input.  Exit codes: 0 written (or planned), 1 nothing to
replay, 2 bad usage or unreadable input.
"""
from __future__ import annotations

import argparse
import bisect
import json
import os
import re
import shutil
import sys
import tempfile
from array import array
from dataclasses import dataclass, field

if __package__ in (None, ""):  # spark-submit jobs/replay.py: make the project importable
    try:
        import _bootstrap  # noqa: F401  (jobs/_bootstrap.py)
    except ModuleNotFoundError:  # a copy outside the checkout: the project comes with --py-files
        pass

from store_format import fs  # noqa: E402
from store_format import layout as L  # noqa: E402
from store_format import lmq  # noqa: E402
from store_format.batchcq import message_count  # noqa: E402
from store_format.codec import host_flags  # noqa: E402
from store_format.scan import WALKS, canonical_walk, walk_help  # noqa: E402
from store_format.config import (LMQ_CONSUMER_OFFSET_FILE, consumer_offsets, lmq_consumer_offsets,  # noqa: E402
                                 read_consumer_offsets, subscription_groups)
from store_format.errors import ErrorKind, StoreFormatError, WriterError  # noqa: E402
from store_format.ids import parse_host  # noqa: E402
from store_format.message import Message  # noqa: E402
from store_format.properties import delete_property, parse_properties  # noqa: E402
from store_format.store import Store  # noqa: E402
from store_format.write.writer import StoreWriter, TopicTable, WriterConfig  # noqa: E402
from decoding.kernels import scan_offset_table  # noqa: E402

from runtime import cli  # noqa: E402
from runtime.commit import job_run, runs_job  # noqa: E402
from runtime.custody import watch  # noqa: E402
from runtime.display import plural  # noqa: E402
from runtime.cli import EXIT_FAILED, EXIT_NOTHING, EXIT_OK, UsageError  # noqa: E402
from jobs.extract import read_manifest, source_geometry  # noqa: E402
from runtime.stores import resolve_stores  # noqa: E402

TRACE_MSG_ID = "FORENSICS_ORIGIN_MSG_ID"
TRACE_BROKER = "FORENSICS_ORIGIN_BROKER"
TRACE_QUEUE_OFFSET = "FORENSICS_ORIGIN_QUEUE_OFFSET"
TRACE_PROPERTIES = (TRACE_MSG_ID, TRACE_BROKER, TRACE_QUEUE_OFFSET)
WRITER_REFUSED = "WRITER_REFUSED"
#: the 5.x settings a summary's ``config`` shows when they are on
FIVE_X_SETTINGS = ("enabledAppendPropCRC", "timerWheelEnable", "enableLmq", "enableMultiDispatch")
TX_OP_WITHOUT_HALF = "TX_OP_WITHOUT_HALF"
#: columns replay reads (what a JSON Lines input is parsed with); all but topic and body may be missing
INPUT_COLUMNS = ("broker string, physical_offset bigint, queue_offset bigint, msg_id string, "
                 + ", ".join(f"{name} {kind}" for name, kind in (
                     ("topic", "string"), ("queue_id", "int"), ("body", "binary"), ("properties_raw", "string"),
                     ("properties", "map<string,string>"), ("flag", "int"), ("sys_flag", "int"),
                     ("born_timestamp", "bigint"), ("born_host", "string"), ("store_timestamp", "bigint"),
                     ("store_host", "string"), ("reconsume_times", "int"), ("prepared_transaction_offset", "bigint"),
                     ("magic_version", "int"))))
_OP_BODY = re.compile(r"^\d+(,\d+)*,?$")


@dataclass
class QueuePlan:
    topic: str
    queue_id: int
    written: int = 0
    messages: int = 0  # the queue offsets they take (an inner batch on a BatchCQ topic takes INNER_NUM)
    not_dispatched: int = 0  # PREPARED/ROLLBACK: queue offset 0, no consume-queue entry
    origins: dict = field(default_factory=dict)  # broker -> [first, last] original queue offset


@dataclass
class Replayer:
    """Turns source rows into the records to write, in order, remembering where each went."""

    trace: bool = True
    store_host: str | None = None
    crc: bool = False  # the new store appends __CRC32# (enabledAppendPropCRC)
    batch_topic: object = lambda topic: False  # the new store's rule: is this a queue.type=BatchCQ topic
    half_offsets: dict = field(default_factory=dict)  # (broker, old offset) -> new: halves, PREPARED records
    half_queue: dict = field(default_factory=dict)  # (broker, queue id, old queue offset) -> new, half topic only
    # (topic, queue id) -> QueueMap: where each replayed record's queue offsets were, and are (LMQ queues too)
    kept_queue_offsets: dict = field(default_factory=dict)
    queues: dict = field(default_factory=dict)  # (topic, queue id) -> QueuePlan
    next_queue_offset: dict = field(default_factory=dict)  # what a dry run assigns
    dangling_prepared: int = 0
    stale_crc: int = 0  # records whose __CRC32# (over their old offsets) was removed: the new store writes none

    def record(self, row: dict) -> tuple[Message | None, str | None, str | None]:
        """(record to write, reject reason, detail) for one source row."""
        d = {k: v for k, v in row.items() if v is not None}
        if isinstance(d.get("body"), (bytearray, memoryview)):
            d["body"] = bytes(d["body"])
        msg = Message.from_dict(d)
        broker = row.get("broker") or ""
        if not self.crc and L.PROPERTY_CRC32 + L.NAME_VALUE_SEPARATOR in msg.properties_raw:
            # its value covers the record at its old offsets: a broker that verifies it would cut the new log there
            msg.properties_raw = delete_property(msg.properties_raw, L.PROPERTY_CRC32)
            msg.properties = parse_properties(msg.properties_raw)
            self.stale_crc += 1
        if self.trace:
            origin = row.get("msg_id") or (msg.msg_id if row.get("physical_offset") is not None else None)
            extra = {TRACE_MSG_ID: origin, TRACE_BROKER: broker or None,
                     TRACE_QUEUE_OFFSET: None if row.get("queue_offset") is None else str(row["queue_offset"])}
            msg.properties_raw = add_properties(msg.properties_raw, extra)
            msg.properties = parse_properties(msg.properties_raw)
        if self.store_host is not None:
            v6 = host_flags(msg.born_host, self.store_host) & L.STOREHOST_V6_FLAG
            msg.sys_flag = (msg.sys_flag & ~L.STOREHOST_V6_FLAG) | v6
            msg.store_host = self.store_host
        if msg.tran_type in ("COMMIT", "ROLLBACK") and msg.prepared_transaction_offset:
            new = self.half_offsets.get((broker, msg.prepared_transaction_offset))
            if new is None:
                self.dangling_prepared += 1
            else:
                msg.prepared_transaction_offset = new
        if msg.topic == L.TRANS_OP_HALF_TOPIC:
            body = remap_op_body(msg.body, lambda q: self.half_queue.get((broker, msg.queue_id, q)))
            if body is None:
                return None, TX_OP_WITHOUT_HALF, f"op record resolves half queue offsets {msg.body[:64]!r} of " \
                    f"{L.TRANS_HALF_TOPIC}/{msg.queue_id}, none of which was replayed"
            msg.body = body
        return msg, None, None

    def placed(self, row: dict, stored: Message) -> None:
        """Remember where a source row's record went."""
        broker = row.get("broker") or ""
        old_q = row.get("queue_offset")
        half = stored.topic == L.TRANS_HALF_TOPIC
        if (half or stored.tran_type == "PREPARED") and row.get("physical_offset") is not None:
            self.half_offsets[(broker, row["physical_offset"])] = stored.physical_offset
        if half and old_q is not None:
            self.half_queue[(broker, stored.queue_id, old_q)] = stored.queue_offset
        key = (stored.topic, stored.queue_id)
        plan = self.queues.get(key)
        if plan is None:
            plan = self.queues[key] = QueuePlan(*key)
        if not stored.dispatchable:
            plan.not_dispatched += 1
            return
        plan.written += 1
        count = message_count(stored.properties) if self.batch_topic(stored.topic) else 1
        plan.messages += count
        if old_q is not None:
            span = plan.origins.setdefault(broker, [old_q, old_q])
            span[0], span[1] = min(span[0], old_q), max(span[1], old_q)
            self._kept(key).add(old_q, count, stored.queue_offset)
        lists = lmq.dispatch_lists(original_properties(row))
        if lists is not None and lists.counts_match:  # its LMQ queue offsets there, for the LMQ consumer offsets
            for name, text in zip(lists.names, lists.offsets):
                was = lmq.parse_java_long(text)
                if lmq.is_lmq(name) and was is not None:
                    kept = self._kept((name, L.LMQ_QUEUE_ID))
                    kept.add(was, 1, kept.next_new)

    def _kept(self, key) -> "QueueMap":
        kept = self.kept_queue_offsets.get(key)
        if kept is None:
            kept = self.kept_queue_offsets[key] = QueueMap()
        return kept

    def planned(self, msg: Message) -> Message:
        """The queue offset a dry run's record would get (the writer's rule: consecutive per queue for
        NOT/COMMIT records -- on a BatchCQ topic, by the messages each record holds -- 0 for PREPARED/ROLLBACK)."""
        key = (msg.topic, msg.queue_id)
        if msg.dispatchable:
            msg.queue_offset = self.next_queue_offset.get(key, 0)
            count = message_count(msg.properties) if self.batch_topic(msg.topic) else 1
            self.next_queue_offset[key] = msg.queue_offset + count
        else:
            msg.queue_offset = 0
        return msg

    def translated_offset(self, topic: str, queue_id: int, committed: int) -> int:
        """A committed consumer offset in the new queue: the new offset of the first message it had not consumed
        (the queue's new end when it had consumed every replayed one)."""
        kept = self.kept_queue_offsets.get((topic, queue_id))
        return kept.translated(committed) if kept else 0


@dataclass
class QueueMap:
    """Where one queue's replayed records were and are, in queue order: each record's first old queue offset, how
    many messages it holds (an inner batch on a BatchCQ topic: INNER_NUM; else 1), its first new queue offset."""

    old: array = field(default_factory=lambda: array("q"))
    count: array = field(default_factory=lambda: array("q"))
    new: array = field(default_factory=lambda: array("q"))

    @property
    def next_new(self) -> int:
        return self.new[-1] + self.count[-1] if self.new else 0

    def add(self, old: int, count: int, new: int) -> None:
        self.old.append(old)
        self.count.append(count)
        self.new.append(new)

    def translated(self, committed: int) -> int:
        i = bisect.bisect_right(self.old, committed) - 1  # the last record starting at or before it
        if i < 0:
            return self.new[0] if self.new else 0
        if committed < self.old[i] + self.count[i]:  # inside it (or at its start)
            return self.new[i] + committed - self.old[i]
        return self.new[i] + self.count[i]


def original_properties(row: dict) -> dict:
    """The properties a source row had (before the replay added or removed any)."""
    raw = row.get("properties_raw")
    return parse_properties(raw) if raw is not None else dict(row.get("properties") or {})


def add_properties(raw: str, extra: dict) -> str:
    """``raw`` with ``name\\u0001value`` pairs appended (no pair whose name is already there or whose value is
    None); the original bytes stay as they were, in front."""
    present = parse_properties(raw)
    pairs = [f"{k}{L.NAME_VALUE_SEPARATOR}{v}" for k, v in extra.items() if v is not None and k not in present]
    if not pairs:
        return raw
    sep = "" if not raw or raw.endswith(L.PROPERTY_SEPARATOR) else L.PROPERTY_SEPARATOR
    return raw + sep + L.PROPERTY_SEPARATOR.join(pairs)


def remap_op_body(body: bytes, new_offset) -> bytes | None:
    """An op record's body (half queue offsets: ``"12"`` in 4.x, ``"12,13,"`` in 5.x) with each offset
    replaced by ``new_offset(old)``; offsets without one are dropped; None when none remains.  A body in
    another shape is returned unchanged."""
    try:
        text = body.decode("ascii")
    except UnicodeDecodeError:
        return body
    if not _OP_BODY.match(text):
        return body
    mapped = [new_offset(int(q)) for q in text.rstrip(",").split(",")]
    mapped = [str(q) for q in mapped if q is not None]
    if not mapped:
        return None
    return (",".join(mapped) + ("," if text.endswith(",") else "")).encode("ascii")


# --------------------------------------------------------------------------------------------------
# Sources


@dataclass
class Source:
    frame: object  # DataFrame of rows to replay (with _reject/_detail for rows an extract already refused)
    inputs: list  # paths the output must stay clear of
    read: list  # what the replay reads (its chain of custody is checked before the commit)
    geometry: dict
    store: Store | None  # the store a repair reads (its configs are carried over)
    description: str


def repair_source(spark, args) -> Source:
    from jobs import extract

    stores = resolve_stores([args.repair], files=True)
    if len(stores) != 1:
        raise UsageError(f"--repair takes one store root; {args.repair} holds {len(stores)}")
    ref = stores[0]
    ex_args = extract.build_parser().parse_args(["--store", ref.path.as_typed, "--out", "-", "--walk", args.walk]
                                                + (["--dedupe"] if args.dedupe else []))
    sel = extract.select(spark, ex_args, stores)
    store = ref.open()
    return Source(sel.frame, [ref.path.as_typed], [ref], repair_settings(ref, store), store,
                  f"repair of {ref.root} ({args.walk} walk)")


def repair_settings(ref, store: Store) -> dict:
    """The new store's broker.conf settings as the source's files show them: its geometry
    (:func:`jobs.extract.source_geometry`) and the 5.x structures it has (store_format.features): a timer store
    (``timerWheelEnable``, the timer log's file size), LMQ queues (``enableLmq``, ``enableMultiDispatch``) or
    lmqConsumerOffset.json (``enableLmq``), batch consume queues (their file size; the topics' BatchCQ attribute
    comes with topics.json), and records that carry ``__CRC32#`` (``enabledAppendPropCRC``: the new store computes
    them afresh, over the records' new offsets)."""
    from store_format import timer as T
    from store_format.features import store_features

    settings = source_geometry(ref)
    features = store_features(store.loc)
    if features.timer_store:
        settings["timerWheelEnable"] = True
        logs = [f.length for f in T.list_timer_log_files(store.loc) if f.length]
        if logs:
            settings["mappedFileSizeTimerLog"] = max(set(logs), key=logs.count)
    if features.lmq_queues or features.lmq_consumer_offsets:
        settings["enableLmq"] = True
    if features.lmq_queues:
        settings["enableMultiDispatch"] = True
    sizes = [f.length for files in store.batch_queues.values() for f in files if f.length]
    if sizes:
        settings["mapperFileSizeBatchConsumeQueue"] = max(set(sizes), key=sizes.count)
    first = next((m for f in store.walk_commitlog(decode=True, salvage=True, unreadable=[])
                  if (m := getattr(f, "message", None)) is not None), None)
    if first is not None and L.PROPERTY_CRC32 in first.properties:
        settings["enabledAppendPropCRC"] = True
    return settings


def input_source(spark, args) -> Source:
    from pyspark.sql import functions as F

    from runtime.output import detect_format, read_table

    table = args.input  # a Location carrying the spelling typed, for the messages and the output's guard
    typed = table.as_typed
    fmt = args.input_format or detect_format(table)
    df = read_table(spark, table, fmt, schema=INPUT_COLUMNS if fmt == "jsonl" else None)
    missing = [c for c in ("topic", "body") if c not in df.columns]
    if missing:
        raise UsageError(f"{typed} has no {', '.join(missing)} column: not a table of messages")
    if "properties_raw" not in df.columns and "properties" not in df.columns:
        raise UsageError(f"{typed} has neither properties_raw nor properties")
    manifest = read_manifest(table) or {}
    stores = [s["path"] for s in manifest.get("stores", [])]
    df = df.withColumn("_reject", F.lit(None).cast("string")).withColumn("_detail", F.lit(None).cast("string"))
    return Source(df, [typed] + stores, [typed], dict(manifest.get("source_geometry") or {}), None, f"{typed} ({fmt})")


def ordered(df):
    """Original order: (broker, physical offset) when the rows say where they came from, else input order."""
    from pyspark.sql import functions as F

    if "physical_offset" in df.columns:
        by = [c for c in ("broker", "physical_offset") if c in df.columns]
        return df.orderBy(*by)
    return df.withColumn("_row", F.monotonically_increasing_id()).orderBy("_row").drop("_row")


def writer_config(args, source: Source) -> WriterConfig:
    """The new store's settings: ``--config`` if given, else the source's geometry; then ``--set`` and
    ``--store-host`` on top."""
    values = WriterConfig.from_file(args.config).to_dict() if args.config else dict(source.geometry)
    for item in args.set or []:
        name, sep, value = item.partition("=")
        if not sep or not name.strip():
            raise UsageError(f"--set {item!r}: expected NAME=VALUE (a broker.conf setting)")
        values[name.strip()] = value.strip()
    if args.store_host:
        values["storeHost"] = args.store_host
    return WriterConfig.from_dict(values)


# --------------------------------------------------------------------------------------------------
# Writing


def carry_configs(writer: StoreWriter, store: Store, notes: list) -> None:
    """A repair keeps the source's topics.json (each topic's queues, perm and 5.x attributes such as queue.type=
    BatchCQ; a BatchCQ topic that only its batchconsumequeue/ folder shows gets the attribute too) and
    subscription groups (each with its settings)."""
    cfg = store.config("topics.json")
    problems: list = []
    try:
        writer.adopt_topics(TopicTable.from_json(cfg.data or {}, cfg.source, problems))
    except StoreFormatError as e:  # a topicConfigTable that is not a map: nothing of it is carried
        notes.append(f"topics.json was not carried: {e.message}")
    notes += [f"topics.json: {e.field} was not carried: {e.message}" for e in problems]
    for topic in sorted(t for t in store.batch_topics if not writer.batch_topic(t)):
        queues = 1 + max((q for t, q in store.batch_queues if t == topic), default=0)
        writer.register_topic(topic, queues, attributes={L.TOPIC_ATTRIBUTE_QUEUE_TYPE: L.QUEUE_TYPE_BATCH})
        notes.append(f"topic {topic}: queue.type=BatchCQ taken from its batchconsumequeue/ folder (topics.json "
                     "does not say it)")
    for group, entry in sorted(subscription_groups(store.config("subscriptionGroup.json")).items(),
                               key=lambda kv: str(kv[0])):
        writer.register_group(str(group), entry=entry if isinstance(entry, dict) else None)


def carry_offsets(writer: StoreWriter, store: Store, replayer: Replayer, notes: list) -> tuple[int, int]:
    """The source's committed consumer offsets, translated to the new queue offsets: consumerOffset.json's, or
    with enableLmq lmqConsumerOffset.json's (LmqConsumerOffsetManager keeps every group there: its offsetTable,
    and one offset per LMQ queue and %LMQ% group in lmqOffsetTable).  (ordinary offsets, LMQ offsets) carried."""
    lmq_file = store.config(LMQ_CONSUMER_OFFSET_FILE)
    if lmq_file.data is not None:
        name, offsets = LMQ_CONSUMER_OFFSET_FILE, consumer_offsets(lmq_file)
        lmq_offsets = lmq_consumer_offsets(lmq_file)
    else:
        name = "consumerOffset.json"
        offsets = read_consumer_offsets(store.root / "config", offset_scan=scan_offset_table).table
        lmq_offsets = {}
    n = 0
    for (topic, group), table in sorted(offsets.items()):
        try:
            for qid, committed in sorted(table.items()):
                writer.commit_offset(group, topic, qid, replayer.translated_offset(topic, qid, committed))
                n += 1
        except WriterError as e:  # a topic or queue id the new store's broker would refuse
            notes.append(f"{name}: {topic}@{group} not carried: {e.message}")
            continue
        writer.register_group(group)
    lmq_carried = 0
    if lmq_offsets and not writer.config.enableLmq:
        notes.append(f"{name}: {plural(len(lmq_offsets), 'LMQ consumer offset')} not carried: the new store's "
                     "settings have enableLmq=false, so its broker keeps no LMQ offsets (--set enableLmq=true "
                     "carries them)")
        return n, 0
    for (topic, group), committed in sorted(lmq_offsets.items()):
        if not lmq.is_lmq(group):  # LmqConsumerOffsetManager keeps only %LMQ% groups there
            notes.append(f"{name}: lmqOffsetTable {topic}@{group} not carried: {group} is not an %LMQ% group")
            continue
        writer.commit_offset(group, topic, L.LMQ_QUEUE_ID,
                             replayer.translated_offset(topic, L.LMQ_QUEUE_ID, committed))
        lmq_carried += 1
    return n, lmq_carried


CARRIED_CONFIG = {  # what a repair carries or rebuilds of the source's config/ (the rest is named in the notes)
    "topics.json", "subscriptionGroup.json", "consumerOffset.json", LMQ_CONSUMER_OFFSET_FILE,
    "delayOffset.json",  # rebuilt: the delay levels' progress over the replayed SCHEDULE_TOPIC_XXXX records
    "timercheck", "timermetrics",  # TimerCarry
}


def uncarried(store: Store, notes: list) -> None:
    """Name in ``notes`` what of the source a repair leaves behind: config files it neither carries nor rebuilds,
    a consumerFilter.json with filters (the new one has none), the compaction store."""
    try:
        names = sorted({e.name.removesuffix(".bak") for e in fs.entries(store.root / "config") if not e.is_folder})
        # every 5.x store has compaction/position-checkpoint; compacted logs live beside it
        compaction = [e.name for e in fs.entries(store.root / "compaction") if e.name != "position-checkpoint"]
    except StoreFormatError as e:  # unreadable: said, not guessed
        notes.append(f"{e.file}: could not be listed ({e.message}): what of it was not carried is not known")
        return
    for name in names:
        if name == "consumerFilter.json":
            filters = (store.config(name).data or {}).get("filterDataByTopic")
            if filters:
                notes.append(f"config/{name}: the filters of {plural(len(filters), 'topic')} were not carried (the new "
                             "store has none; consumers register theirs again)")
        elif name not in CARRIED_CONFIG:
            notes.append(f"config/{name} was not carried (the new store has none)")
    if compaction:
        notes.append(f"compaction/ ({', '.join(compaction)}) was not carried: the compaction service rebuilds it "
                     "from the replayed records of cleanup.policy=COMPACTION topics")


class TimerCarry:
    """The source timer's progress carried into the new store, so that its timer fires what was pending there and
    nothing it had fired already: the timercheck's read time and the timermetrics
    (:meth:`~store_format.write.timer.TimerStoreWriter.resume_from`), and its queue offset -- timer records the source's
    enqueue had not reached are left for the new broker's own enqueue (:meth:`stop_enqueue`).  What cannot be
    carried is said in ``notes``."""

    def __init__(self, writer: StoreWriter, store: Store | None, notes: list):
        from store_format import timer as T
        from store_format.features import store_features

        self.timer, self.notes, self.checkpoint, self.metrics = None, notes, None, None
        self.timer_records = 0  # records of rmq_sys_wheel_timer/0 replayed
        self.why_pending = None  # why every replayed timer is pending in the new store
        timer = writer.timer
        if timer is None:
            if store is not None and store_features(store.loc).timer_store:
                notes.append("the source's timer store (timerlog/, timerwheel, config/timercheck, timermetrics) was "
                             "not carried: the new store's settings have timerWheelEnable=false")
            return
        self.timer = timer
        if store is None:
            self.why_pending = "the input holds no timer checkpoint"
            return
        config = store.loc.child("config")
        try:
            cp = T.read_timer_checkpoint(config.child(T.TIMER_CHECK_FILE))
            why = cp.problem.message if cp.problem is not None else "it holds no lastReadTimeMs"
        except StoreFormatError as e:
            cp, why = None, e.message
        if cp is None or cp.problem is not None or cp.last_read_time_ms is None:
            self.why_pending = f"config/{T.TIMER_CHECK_FILE} could not be read ({why})"
            return
        self.checkpoint = cp
        metrics = T.read_timer_metrics(config)
        if metrics.readable:
            self.metrics = metrics.timing_count
        else:
            notes.append(f"config/{T.TIMER_METRICS_FILE} could not be read: the new store's counts take in every "
                         "replayed timer's enqueue, the source's fires and recalls not taken off")

    def see(self, row: dict) -> None:
        """Before a source row is written: the first timer record the source had not enqueued stops the enqueue."""
        if (row.get("topic"), row.get("queue_id")) != (L.TIMER_TOPIC, L.TIMER_QUEUE_ID):
            return
        self.timer_records += 1
        cp = self.checkpoint
        if cp is not None and cp.last_timer_queue_offset is not None and not self.timer.enqueue_stopped and \
                row.get("queue_offset") is not None and row["queue_offset"] >= cp.last_timer_queue_offset:
            self.timer.stop_enqueue()

    def finish(self) -> None:
        if self.checkpoint is not None:
            self.timer.resume_from(self.checkpoint.last_read_time_ms, self.metrics)
        elif self.timer is not None and self.timer_records:
            self.notes.append(f"{self.why_pending}: the {plural(self.timer_records, 'replayed timer record')} are "
                              "all pending in the new store's timer, so any the source had fired already will fire "
                              "again")
        elif self.timer is None and self.timer_records:
            self.notes.append(f"{plural(self.timer_records, 'record')} of {L.TIMER_TOPIC} were replayed without "
                              "a timer store (timerWheelEnable=false): a 5.x broker that runs its timer enqueues them "
                              "all from the queue's start, fired ones too")


def check_as_writer(scratch: StoreWriter, msg: Message) -> None:
    """What ``StoreWriter.append`` checks before it writes anything (a dry run writes nothing)."""
    scratch.check_record(msg)
    if msg.sys_flag & (L.BORNHOST_V6_FLAG | L.STOREHOST_V6_FLAG) != host_flags(msg.born_host, msg.store_host):
        raise WriterError(ErrorKind.INVALID_INPUT, f"sys_flag 0x{msg.sys_flag:X} IPv6 bits disagree with hosts "
                          f"{msg.born_host} / {msg.store_host}", field="sys_flag")


def count_written(root) -> int:
    """Message records in a store's commitlog (its recovery walk, framing only)."""
    return sum(1 for f in Store(root).walk_commitlog(decode=False) if f.kind == "message")


@runs_job("replay")
def run(spark, args, out=None, err=None) -> cli.JobResult:
    """Replay; the summary (or with --dry-run the plan) goes to ``out`` as JSON Lines (the job's output)."""
    from runtime.output import prepare_output

    out, err = out or sys.stdout, err or sys.stderr
    check_args(args)
    source = repair_source(spark, args) if args.repair else input_source(spark, args)
    watch(job_run("replay"), source.read)  # checked again before the commit (a dry run's end too)
    staged = None
    if not args.dry_run:  # the new store is written beside --out (a local folder) and committed on return
        staged = prepare_output(args.out, overwrite=args.overwrite,
                                inputs=[args.repair or args.input, *source.inputs], job="replay").local_work()
    check_manifest(args, [args.repair or args.input, *source.inputs])
    config = writer_config(args, source)
    replayer = Replayer(trace=not args.no_trace, store_host=args.store_host, crc=config.enabledAppendPropCRC)
    rejected: dict[str, int] = {}
    examples, notes = [], []
    selected = 0

    plan = []  # a dry run's rejections, then its queues (what --format json prints as JSON Lines)

    def reject(row, reason, detail):
        rejected[reason] = rejected.get(reason, 0) + 1
        line = {"kind": "reject", "broker": row.get("broker"), "physical_offset": row.get("physical_offset"),
                "msg_id": row.get("msg_id"), "reason": reason, "detail": detail}
        if args.dry_run:
            plan.append(line)
        elif len(examples) < 20:
            examples.append(line)

    scratch_dir = tempfile.mkdtemp(prefix="replay-check-") if args.dry_run else None
    writer = StoreWriter(f"{scratch_dir}/store" if args.dry_run else staged, config)
    timers = None
    replayer.batch_topic = writer.batch_topic
    try:
        if source.store is not None:  # a dry run's too, into its scratch store: it plans with the same topics
            carry_configs(writer, source.store, notes)
        if not args.dry_run:
            from runtime.progress import say

            timers = TimerCarry(writer, source.store, notes)
            say(f"writing the new store (beside {args.out.as_typed} until it is complete)")
        for row in ordered(source.frame).toLocalIterator(prefetchPartitions=True):
            row = row.asDict()
            selected += 1
            if row.get("_reject") is not None:
                reject(row, row["_reject"], row.get("_detail"))
                continue
            if timers is not None:
                timers.see(row)
            try:
                msg, reason, detail = replayer.record(row)
                if msg is None:
                    reject(row, reason, detail)
                    continue
                if args.dry_run:
                    check_as_writer(writer, msg)
                    stored = replayer.planned(msg)
                else:
                    stored = writer.append(msg)
            except StoreFormatError as e:  # the writer refuses it before writing anything
                reject(row, WRITER_REFUSED, f"{e.kind.value}: {e.message}")
                continue
            replayer.placed(row, stored)
        carried = lmq_carried = 0
        if source.store is not None and not args.dry_run:
            carried, lmq_carried = carry_offsets(writer, source.store, replayer, notes)
            uncarried(source.store, notes)
        if timers is not None:
            timers.finish()
        if replayer.stale_crc:
            notes.append(f"{plural(replayer.stale_crc, 'record')} carried a __CRC32# computed over their old "
                         "offsets: removed, as the new store's settings have enabledAppendPropCRC=false (--set "
                         "enabledAppendPropCRC=true writes fresh ones)")
        if args.dry_run:
            writer.crash()
        else:
            writer.close()
    except BaseException:
        writer.crash()  # the output stays marked as not cleanly shut down
        raise
    finally:
        if scratch_dir:
            shutil.rmtree(scratch_dir, ignore_errors=True)

    planned = sum(q.written + q.not_dispatched for q in replayer.queues.values())
    written = planned if args.dry_run else count_written(staged)
    summary = {
        "kind": "summary", "job": "replay", "dry_run": args.dry_run, "source": source.description,
        "output": args.out.as_typed, "config": {k: v for k, v in config.to_dict().items()
                                          if k in ("mappedFileSizeCommitLog", "mappedFileSizeConsumeQueue",
                                                   "maxHashSlotNum", "maxIndexNum", "storeHost")
                                          or (k in FIVE_X_SETTINGS and v)},
        "counts": {"selected": selected, "written": written, "rejected": sum(rejected.values()),
                   "rejected_by_reason": dict(sorted(rejected.items())),
                   "reconciled": selected == written + sum(rejected.values())},
        "queues": len(replayer.queues), "trace_properties": list(TRACE_PROPERTIES) if not args.no_trace else [],
        "dangling_prepared_offsets": replayer.dangling_prepared, "notes": notes,
    }
    if source.store is not None and not args.dry_run:
        summary["consumer_offsets_carried"] = carried
        summary["lmq_consumer_offsets_carried"] = lmq_carried
    if examples:
        summary["rejected_examples"] = examples
    if args.dry_run:
        for (topic, qid), q in sorted(replayer.queues.items()):
            plan.append({"kind": "queue", "topic": topic, "queue_id": qid, "records": q.written,
                         "new_queue_offsets": [0, q.messages] if q.written else None,
                         "not_dispatched": q.not_dispatched, "from": q.origins})
    if args.format == "json":
        for line in [*plan, summary]:
            out.write(json.dumps(line, ensure_ascii=False) + "\n")
    else:
        out.write("\n".join(in_words(summary, plan)) + "\n")
    if args.manifest:
        with open(args.manifest.as_typed, "w", encoding="utf-8") as f:
            json.dump(summary, f, indent=2, ensure_ascii=False)
    c = summary["counts"]
    if selected == 0 or planned == 0:
        return cli.JobResult("", EXIT_NOTHING)
    if not c["reconciled"]:
        print("error: the counts do not reconcile (selected != written + rejected)", file=err)
        return cli.JobResult("", EXIT_FAILED)
    return cli.JobResult("", EXIT_OK)


def in_words(summary: dict, plan: list) -> list[str]:
    """What ``--format text`` prints: the summary (and a dry run's plan) in sentences, one thing per line; the same
    facts as the JSON of ``--format json`` (docs/jobs.md explains each field)."""
    c, dry = summary["counts"], summary["dry_run"]
    if c["selected"] == 0:
        return [f"replay: nothing to replay: no message of the {summary['source']} was selected"]
    lines = [f"replay: {'would write' if dry else 'wrote'} {c['written']:,} of the "
             f"{plural(c['selected'], 'selected message')} {'into' if dry else 'for'} {summary['output']}, from the "
             f"{summary['source']}" + ("" if dry else "; the new store was shut down cleanly, and becomes "
                                       f"{summary['output']} once the run's last checks pass")]
    if c["rejected"]:
        lines.append(f"  rejected {c['rejected']:,}: " + ", ".join(
            f"{plural(n, *REJECT_WORDS.get(r, (r, r)))} ({r})" for r, n in c["rejected_by_reason"].items()))
    if not c["written"]:
        lines.append("  nothing was replayed: every selected message was rejected")
    if not c["reconciled"]:
        lines.append("  the counts do not reconcile: selected is not written + rejected")
    queues = [x for x in plan if x["kind"] == "queue"]
    for q in queues:
        n = q["new_queue_offsets"][1] if q["new_queue_offsets"] else 0
        where = "; ".join(f"{b or 'input'} queue offsets {lo}-{hi}" for b, (lo, hi) in sorted(q["from"].items()))
        lines.append(f"  {q['topic']}/{q['queue_id']}: " + (f"new queue offsets 0-{n - 1}" if n else "no message")
                     + f" ({plural(q['records'], 'record')}"
                     + (f"; from {where})" if where else ")")
                     + (f", {plural(q['not_dispatched'], 'prepared or rolled-back record')} with no queue entry"
                        if q["not_dispatched"] else ""))
    for r in [x for x in plan if x["kind"] == "reject"][:20]:
        lines.append(f"  would reject the record at {r['physical_offset']} of {r['broker'] or 'the input'}: "
                     f"{r['reason']}: {r['detail']}")
    if not queues:
        lines.append(f"  {plural(summary['queues'], 'queue')} written, each with new queue offsets from 0")
    settings = summary["config"]
    five = [FIVE_X_WORDS[k] for k in FIVE_X_SETTINGS if settings.get(k)]
    lines.append(f"  settings: {settings.get('mappedFileSizeCommitLog')}-byte segments, "
                 f"{settings.get('mappedFileSizeConsumeQueue')}-byte consume-queue files, store host "
                 f"{settings.get('storeHost')}" + (f"; 5.x: {', '.join(five)}" if five else ""))
    if "consumer_offsets_carried" in summary:
        lines.append(f"  consumer offsets carried: {summary['consumer_offsets_carried']}, and "
                     f"{plural(summary['lmq_consumer_offsets_carried'], 'LMQ offset')}, each translated to the new "
                     "queue offsets (a group resumes at the first message it had not consumed)")
    if summary["trace_properties"]:
        lines.append("  each record carries its origin in " + ", ".join(summary["trace_properties"]))
    if summary["dangling_prepared_offsets"]:
        lines.append(f"  {plural(summary['dangling_prepared_offsets'], 'COMMIT or ROLLBACK record')} end a "
                     "transaction whose half message was not replayed: their prepared-transaction offset still points "
                     "into the old store")
    lines += [f"  note: {n}" for n in summary["notes"]]
    for r in summary.get("rejected_examples", [])[:5]:
        lines.append(f"  e.g. rejected the record at {r['physical_offset']} of {r['broker'] or 'the input'}: "
                     f"{r['detail']}")
    return lines


REJECT_WORDS = {WRITER_REFUSED: ("record the broker would refuse", "records the broker would refuse"),
                TX_OP_WITHOUT_HALF: ("transaction op record whose half message was not replayed",
                                     "transaction op records whose half messages were not replayed")}
FIVE_X_WORDS = {"enabledAppendPropCRC": "__CRC32# on every record", "timerWheelEnable": "timer store",
                "enableLmq": "LMQ", "enableMultiDispatch": "multi-dispatch"}


def check_manifest(args, inputs) -> None:
    """--manifest: a regular file (or a new one) apart from every input and from the new store."""
    if not args.manifest:
        return
    from runtime.output import check_apart

    check_apart(args.manifest, list(inputs) + ([] if args.dry_run else [args.out]), what="manifest")
    manifest = args.manifest.as_typed  # a local file, as the OS resolves the spelling typed
    if os.path.lexists(manifest) and not os.path.isfile(manifest):
        raise UsageError(f"--manifest {manifest}: exists and is not a regular file")


def check_and_prepare(args) -> None:
    """The arguments and the source path checked, then the output prepared, before Spark starts (run() reads
    the source and prepares again, idempotently)."""
    from runtime.output import prepare_output

    check_args(args)
    source = args.repair or args.input.as_typed  # --repair: a store argument, parsed by runtime/stores.py
    if "://" not in source:
        if not os.path.lexists(source):
            raise UsageError(f"{source}: no such file or directory")
        fs.check_folder(source)  # a loop, a FIFO, no permission: UnreadableError
    inputs = [source] + ([r.path for r in resolve_stores([args.repair], files=True)] if args.repair else [])
    if not args.dry_run:
        prepare_output(args.out, overwrite=args.overwrite, inputs=inputs, job="replay")
    check_manifest(args, inputs)


def check_args(args) -> None:
    if (args.input is None) == (args.repair is None):
        raise UsageError("give --input EXTRACT_DIR or --repair STORE")
    if args.input is not None and args.dedupe:
        raise UsageError("--dedupe belongs to the extract (extract --dedupe) or to --repair")
    if args.store_host:
        try:
            parse_host(args.store_host)
        except StoreFormatError as e:
            raise UsageError(f"--store-host: {e.message}") from None


def build_parser() -> argparse.ArgumentParser:
    from runtime.output import FORMATS

    p = argparse.ArgumentParser(prog=f"{cli.PROG} replay", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    src = p.add_argument_group("source (one of)")
    src.add_argument("--input", metavar="DIR", type=cli.location_argument,
                     help="an extract (or a table of canonical message columns)")
    src.add_argument("--repair", metavar="STORE", help="a damaged store root: salvage it and replay what is valid")
    p.add_argument("--input-format", choices=FORMATS, help="default: detected")
    p.add_argument("--walk", type=canonical_walk, choices=WALKS, default="salvage",
                   help=f"--repair's walk: {walk_help('salvage')}")
    p.add_argument("--dedupe", action="store_true", help="--repair: drop copies as extract --dedupe does")
    p.add_argument("--out", required=True, metavar="NEW_STORE", type=cli.location_argument,
                   help="the store root to create (refused when it "
                   "exists and is not empty, unless --overwrite)")
    p.add_argument("--overwrite", action="store_true", help="replace an existing output folder")
    p.add_argument("--dry-run", action="store_true", help="print the plan; write nothing")
    p.add_argument("--config", metavar="broker.conf", help="store settings (geometry, storeHost...)")
    p.add_argument("--set", action="append", metavar="NAME=VALUE", help="one store setting (repeatable)")
    p.add_argument("--store-host", metavar="HOST", help="restamp every record's store host (ip:port)")
    p.add_argument("--no-trace", action="store_true", help="do not add the FORENSICS_ORIGIN_* properties")
    p.add_argument("--manifest", metavar="PATH", type=cli.location_argument, help="also write the summary JSON here")
    p.add_argument("--format", choices=("text", "json"), default="text",
                   help="what stdout gets: text (default), what was written, rejected and carried, in words; json, "
                        "the summary as one JSON object (a dry run: its plan as JSON Lines before it) for machines")
    return p


def main(argv=None, prog: str | None = None) -> int:
    return cli.main("replay", build_parser, run, argv, prepare=check_and_prepare, prog=prog)


if __name__ == "__main__":
    sys.exit(main())
