"""Retries and dead letters: the lineage of a consumed-and-failed message from its topic through
``%RETRY%group`` (by way of ``SCHEDULE_TOPIC_XXXX``) to ``%DLQ%group``, and the DLQ inventory per group.

A send-back copy carries ``ORIGIN_MESSAGE_ID`` (the offsetMsgId of the first stored copy), ``RETRY_TOPIC`` (the
original topic) and its reconsume times; copies of one message share the origin id, which is how hops are
chained.  Checks: ``retries.dlq_message`` (info, one per dead letter, with the group, original topic and
whether the original is still in the dump).  Detail tables: ``retries`` (one row per hop), ``dlq`` (per group).

The scan hands the driver every hop (kept copies whose destination is a retry or DLQ topic); an origin id names
a physical offset, so the driver reads the original itself and keeps it when a message of the walk starts there,
recovery keeps it, and its offset message id is the origin id.
"""
from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from store_format import layout as L
from udfs.columns import column

from ..findings import Consequence, Severity, check, finding_table, metric_table
from ..contract import Family, FamilyResult, TableView

_RETRY, _DLQ = L.RETRY_GROUP_TOPIC_PREFIX, L.DLQ_GROUP_TOPIC_PREFIX

check("retries.dlq_message", Severity.INFO,
      "dead letter of group {group} from {original_topic|?} after {reconsume_times} reconsume(s){origin_text}",
      consequence=Consequence.CONSUMERS_AFFECTED, group="topic",
      action="Investigate why the group fails it; `rocketmq-forensics extract --dlq` exports them and "
             "`rocketmq-forensics replay` can re-send them.")

HOPS = pa.schema([
    ("broker", pa.string()), ("topic", pa.string()), ("queue_id", pa.int32()), ("queue_offset", pa.int64()),
    ("physical_offset", pa.int64()), ("segment", pa.string()), ("file_position", pa.int64()),
    ("store_timestamp", pa.int64()), ("reconsume_times", pa.int32()), ("uniq_key", pa.string()),
    ("origin_message_id", pa.string()), ("retry_topic", pa.string()), ("real_topic", pa.string()),
])
RETRIES = pa.schema([
    column("broker", pa.string()),
    column("group", pa.string(), "the consumer group that sent the message back"),
    column("stage", pa.string(), "`scheduled` (SCHEDULE_TOPIC_XXXX copy waiting for the retry delay), `retry` "
                                 "(%RETRY%group) or `dlq` (%DLQ%group)"),
    column("topic", pa.string(), "the topic this copy is stored in"),
    column("queue_id", pa.int32()), column("queue_offset", pa.int64()), column("physical_offset", pa.int64()),
    column("segment", pa.string()), column("file_position", pa.int64()), column("store_timestamp", pa.int64()),
    column("reconsume_times", pa.int32(), "RECONSUMETIMES of this copy"),
    column("uniq_key", pa.string()),
    column("origin_message_id", pa.string(), "ORIGIN_MESSAGE_ID: the offset msg id of the first stored copy"),
    column("original_topic", pa.string(), "the topic the message was first sent to (RETRY_TOPIC, else the "
                                          "original's topic)"),
    column("origin_physical_offset", pa.int64(), "the original's physical offset when it is in the dump"),
    column("origin_uniq_key", pa.string(), "the original's UNIQ_KEY"),
])
DLQ = pa.schema([
    column("broker", pa.string()),
    column("group", pa.string(), "the consumer group whose dead letters these are"),
    column("messages", pa.int64(), "dead letters in %DLQ%group"),
    column("oldest_store_time", pa.int64(), "oldest dead letter's store time (ms)"),
    column("newest_store_time", pa.int64(), "newest one's (ms)"),
    column("original_topics", pa.list_(pa.field("element", pa.string(), nullable=False)),
           "the topics they were first sent to"),
    column("max_reconsume_times", pa.int32(), "highest RECONSUMETIMES"),
])


def _destination(topic, real_topic):
    return pc.if_else(pc.equal(topic, L.SCHEDULE_TOPIC), real_topic, topic)


def in_range(rc, out) -> None:
    m = rc.messages
    if not m.num_rows:
        return
    dest = _destination(m.column("topic"), m.column("real_topic"))
    hop = pc.fill_null(pc.or_(pc.starts_with(dest, _RETRY), pc.starts_with(dest, _DLQ)), False).to_numpy(
        zero_copy_only=False) & rc.column("kept")
    rows = np.flatnonzero(hop)
    if len(rows):
        t = m.take(rows)
        out.spill("retries.hops", pa.table({"broker": pa.repeat(pa.scalar(rc.broker), len(rows)),
                                              **{f.name: t.column(f.name) for f in HOPS if f.name != "broker"}},
                                             schema=HOPS))


def _group_of(dest):
    """The consumer group a retry or DLQ topic names (null for other topics)."""
    return pc.if_else(pc.starts_with(dest, _RETRY), pc.utf8_slice_codeunits(dest, len(_RETRY)),
                      pc.if_else(pc.starts_with(dest, _DLQ), pc.utf8_slice_codeunits(dest, len(_DLQ)),
                                 pa.scalar(None, pa.string())))


ORIGINS = pa.schema([("broker", pa.string()), ("origin_message_id", pa.string()), ("origin_topic_found", pa.string()),
                     ("origin_physical_offset", pa.int64()), ("origin_uniq_key", pa.string())])


def retry_table(ctx) -> pa.Table:
    hops = ctx.partial_dataset("retries.hops", HOPS).to_table()
    if not hops.num_rows:
        return RETRIES.empty_table()
    origins = []
    for broker in pc.unique(hops.column("broker")).to_pylist():
        ids = pc.unique(hops.filter(pc.equal(hops.column("broker"), broker)).column("origin_message_id"))
        found = ctx.kept_messages_by_id(broker, ids)
        origins.append(pa.table({"broker": pa.repeat(pa.scalar(broker), found.num_rows),
                                 "origin_message_id": found.column("msg_id"),
                                 "origin_topic_found": found.column("topic"),
                                 "origin_physical_offset": found.column("physical_offset"),
                                 "origin_uniq_key": found.column("uniq_key")}, schema=ORIGINS))
    topic = hops.column("topic")
    scheduled = pc.equal(topic, L.SCHEDULE_TOPIC)
    t = hops.append_column("group", _group_of(pc.if_else(scheduled, hops.column("real_topic"), topic)))
    t = t.append_column("stage", pc.if_else(scheduled, "scheduled", pc.if_else(pc.starts_with(topic, _DLQ), "dlq",
                                                                                "retry")))
    # each hop's origin looked up (an id names one offset, so at most one origin), the hops kept in their order
    origins = pa.concat_tables(origins)
    at = pc.index_in(_broker_key(t.column("broker"), t.column("origin_message_id")),
                     value_set=_broker_key(origins.column("broker"), origins.column("origin_message_id")))
    for name in ("origin_topic_found", "origin_physical_offset", "origin_uniq_key"):
        t = t.append_column(name, origins.column(name).take(at))
    t = t.append_column("original_topic", pc.coalesce(t.column("retry_topic"), t.column("origin_topic_found")))
    order = pc.sort_indices(t, [("broker", "ascending"), ("physical_offset", "ascending")])
    if not (np.diff(order.to_numpy()) == 1).all():  # the tasks return them in commitlog order: mostly sorted
        t = t.take(order)
    return t.select([f.name for f in RETRIES]).cast(RETRIES)


def _broker_key(broker, msg_id):
    """(broker, id) as one string, for a lookup in one pass."""
    return pc.binary_join_element_wise(broker, msg_id, "\x00")


def on_driver(ctx) -> FamilyResult:
    res = FamilyResult()
    hops = retry_table(ctx)
    res.tables["retries"] = hops
    dlq = hops.filter(pc.equal(hops.column("stage"), "dlq"))
    if dlq.num_rows:
        origin = dlq.column("origin_physical_offset")
        origin_text = pc.if_else(pc.is_null(origin), "; original not in this dump", pc.binary_join_element_wise(
            "; original at physical offset ", pc.cast(origin, pa.string()), ""))
        uniq = dlq.column("uniq_key")
        res.findings.append(finding_table(
            "retries.dlq_message", dlq.num_rows, broker=dlq.column("broker"), file=dlq.column("segment"),
            file_position=dlq.column("file_position"), physical_offset=dlq.column("physical_offset"),
            topic=dlq.column("topic"), queue_id=dlq.column("queue_id"), queue_offset=dlq.column("queue_offset"),
            values={"group": dlq.column("group"), "original_topic": dlq.column("original_topic"),
                    "reconsume_times": dlq.column("reconsume_times"), "origin_text": origin_text},
            details={"group": dlq.column("group"), "origin_message_id": dlq.column("origin_message_id"),
                     "uniq_key": uniq, "key": uniq}))
    g = dlq.group_by(["broker", "group"]).aggregate([
        ("physical_offset", "count"), ("store_timestamp", "min"), ("store_timestamp", "max"),
        ("original_topic", "distinct"), ("reconsume_times", "max")])
    inventory = pa.table({
        "broker": g.column("broker"), "group": g.column("group"),
        "messages": g.column("physical_offset_count").cast(pa.int64()),
        "oldest_store_time": g.column("store_timestamp_min"), "newest_store_time": g.column("store_timestamp_max"),
        "original_topics": pa.array([sorted(v for v in topics if v is not None)
                                     for topics in g.column("original_topic_distinct").to_pylist()],
                                    DLQ.field("original_topics").type),
        "max_reconsume_times": g.column("reconsume_times_max")}, schema=DLQ).sort_by(
        [("broker", "ascending"), ("group", "ascending")])
    res.tables["dlq"] = inventory
    if inventory.num_rows:
        res.metrics.append(metric_table("group", {"dlq_messages": inventory.column("messages")}, n=inventory.num_rows,
                                        broker=inventory.column("broker"), group=inventory.column("group")))
    retries = hops.filter(pc.equal(hops.column("stage"), "retry")).group_by(["broker", "group"]).aggregate(
        [("physical_offset", "count")])
    if retries.num_rows:
        res.metrics.append(metric_table("group", {"retry_messages": retries.column("physical_offset_count")},
                                        n=retries.num_rows, broker=retries.column("broker"),
                                        group=retries.column("group")))
    return res


DLQ_VIEW = TableView("Dead-letter queues", 40, (
    ("group", "group"), ("messages", "messages"), ("original_topics", "original topics"),
    ("max_reconsume_times", "max reconsume times"), ("oldest_store_time", "oldest stored at"),
    ("newest_store_time", "newest stored at")),
    empty="none: no %DLQ% topic in the commitlog")

FAMILY = Family(
    "retries", "the retry -> DLQ lineage of every dead letter, the DLQ inventory per group",
    in_range=in_range, on_driver=on_driver, emits={"retries.hops": HOPS}, reads=("retries.hops",),
    tables={"retries": RETRIES, "dlq": DLQ}, views={"dlq": DLQ_VIEW}, rank=80,
    metrics={"dlq_messages": "dead letters (group)", "retry_messages": "messages in %RETRY%group (group)"})
