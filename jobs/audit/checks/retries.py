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

from ..findings import Severity, check, finding_table, metric_table
from . import FamilyResult

_RETRY, _DLQ = L.RETRY_GROUP_TOPIC_PREFIX, L.DLQ_GROUP_TOPIC_PREFIX

check("retries.dlq_message", Severity.INFO,
      "dead letter of group {group} from {original_topic|?} after {reconsume_times} reconsume(s){origin_text}")

HOPS = pa.schema([
    ("broker", pa.string()), ("topic", pa.string()), ("queue_id", pa.int32()), ("queue_offset", pa.int64()),
    ("physical_offset", pa.int64()), ("segment", pa.string()), ("file_position", pa.int64()),
    ("store_timestamp", pa.int64()), ("reconsume_times", pa.int32()), ("uniq_key", pa.string()),
    ("origin_message_id", pa.string()), ("retry_topic", pa.string()), ("real_topic", pa.string()),
])
RETRIES = pa.schema([
    ("broker", pa.string()), ("group", pa.string()), ("stage", pa.string()), ("topic", pa.string()),
    ("queue_id", pa.int32()), ("queue_offset", pa.int64()), ("physical_offset", pa.int64()), ("segment", pa.string()),
    ("file_position", pa.int64()), ("store_timestamp", pa.int64()), ("reconsume_times", pa.int32()),
    ("uniq_key", pa.string()), ("origin_message_id", pa.string()), ("original_topic", pa.string()),
    ("origin_physical_offset", pa.int64()), ("origin_uniq_key", pa.string()),
])
DLQ = pa.schema([("broker", pa.string()), ("group", pa.string()), ("messages", pa.int64()),
                 ("oldest_store_time", pa.int64()), ("newest_store_time", pa.int64()),
                 ("original_topics", pa.list_(pa.field("element", pa.string(), nullable=False))),
                 ("max_reconsume_times", pa.int32())])


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
        out.partial("retries.hops", pa.table({"broker": pa.repeat(pa.scalar(rc.broker), len(rows)),
                                              **{f.name: t.column(f.name) for f in HOPS if f.name != "broker"}},
                                             schema=HOPS))


def _group_of(topic: str | None) -> str | None:
    if topic is None:
        return None
    for prefix in (_RETRY, _DLQ):
        if topic.startswith(prefix):
            return topic[len(prefix):]
    return None


def retry_table(ctx) -> pa.Table:
    rows = []
    hops = sorted(ctx.partial("retries.hops", HOPS).to_pylist(), key=lambda r: (r["broker"], r["physical_offset"]))
    origins = {b: ctx.kept_messages_by_id(b, [h["origin_message_id"] for h in hops if h["broker"] == b])
               for b in {h["broker"] for h in hops}}
    for h in hops:
        dest = h["real_topic"] if h["topic"] == L.SCHEDULE_TOPIC else h["topic"]
        stage = "scheduled" if h["topic"] == L.SCHEDULE_TOPIC else "dlq" if h["topic"].startswith(_DLQ) else "retry"
        origin = origins[h["broker"]].get(h["origin_message_id"])
        rows.append(dict(broker=h["broker"], group=_group_of(dest), stage=stage, topic=h["topic"],
                         queue_id=h["queue_id"], queue_offset=h["queue_offset"], physical_offset=h["physical_offset"],
                         segment=h["segment"], file_position=h["file_position"], store_timestamp=h["store_timestamp"],
                         reconsume_times=h["reconsume_times"], uniq_key=h["uniq_key"],
                         origin_message_id=h["origin_message_id"],
                         original_topic=h["retry_topic"] if h["retry_topic"] is not None else
                         (origin.topic if origin else None),
                         origin_physical_offset=origin.physical_offset if origin else None,
                         origin_uniq_key=origin.uniq_key if origin else None))
    return pa.Table.from_pylist(rows, schema=RETRIES)


def on_driver(ctx) -> FamilyResult:
    res = FamilyResult()
    hops = retry_table(ctx)
    res.tables["retries"] = hops
    rows = hops.to_pylist()
    dlq = [r for r in rows if r["stage"] == "dlq"]
    if dlq:
        col = lambda name, typ: pa.array([r[name] for r in dlq], typ)  # noqa: E731
        group, uniq = col("group", pa.string()), col("uniq_key", pa.string())
        res.findings.append(finding_table(
            "retries.dlq_message", len(dlq), broker=col("broker", pa.string()), file=col("segment", pa.string()),
            file_position=col("file_position", pa.int64()), physical_offset=col("physical_offset", pa.int64()),
            topic=col("topic", pa.string()), queue_id=col("queue_id", pa.int32()),
            queue_offset=col("queue_offset", pa.int64()),
            values={"group": group, "original_topic": col("original_topic", pa.string()),
                    "reconsume_times": col("reconsume_times", pa.int32()),
                    "origin_text": pa.array([f"; original at physical offset {r['origin_physical_offset']}"
                                             if r["origin_physical_offset"] is not None
                                             else "; original not in this dump" for r in dlq])},
            details={"group": group, "origin_message_id": col("origin_message_id", pa.string()), "uniq_key": uniq,
                     "key": uniq}))
    inventory: dict[tuple, list] = {}
    for r in dlq:
        inventory.setdefault((r["broker"], r["group"]), []).append(r)
    inv_rows = [dict(broker=b, group=g, messages=len(rs), oldest_store_time=min(r["store_timestamp"] for r in rs),
                     newest_store_time=max(r["store_timestamp"] for r in rs),
                     original_topics=sorted({r["original_topic"] for r in rs if r["original_topic"] is not None}),
                     max_reconsume_times=max(r["reconsume_times"] for r in rs))
                for (b, g), rs in sorted(inventory.items(), key=lambda kv: (kv[0][0], kv[0][1] or ""))]
    inv = pa.Table.from_pylist(inv_rows, schema=DLQ)
    res.tables["dlq"] = inv
    if inv_rows:
        res.metrics.append(metric_table("group", {"dlq_messages": inv.column("messages")}, n=inv.num_rows,
                                        broker=inv.column("broker"), group=inv.column("group")))
    retries: dict[tuple, int] = {}
    for r in rows:
        if r["stage"] == "retry":
            retries[(r["broker"], r["group"])] = retries.get((r["broker"], r["group"]), 0) + 1
    if retries:
        keys = sorted(retries, key=lambda k: (k[0], k[1] or ""))
        res.metrics.append(metric_table("group", {"retry_messages": [retries[k] for k in keys]},
                                        broker=[k[0] for k in keys], group=[k[1] for k in keys]))
    return res
