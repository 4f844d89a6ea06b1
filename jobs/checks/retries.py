"""Retries and dead letters: the lineage of a consumed-and-failed message from its topic through
``%RETRY%group`` (by way of ``SCHEDULE_TOPIC_XXXX``) to ``%DLQ%group``, and the DLQ inventory per group.

A send-back copy carries ``ORIGIN_MESSAGE_ID`` (the offsetMsgId of the first stored copy), ``RETRY_TOPIC`` (the
original topic) and its reconsume times; copies of one message share the origin id, which is how hops are
chained.  Checks: ``retries.dlq_message`` (info, one per dead letter, with the group, original topic and
whether the original is still in the dump).  Detail tables: ``retries`` (one row per hop), ``dlq`` (per group).
"""
from __future__ import annotations

from pyspark.sql import functions as F

from store_format import layout as L

from .base import AuditContext, CheckResult, findings, metrics

_RETRY, _DLQ = L.RETRY_GROUP_TOPIC_PREFIX, L.DLQ_GROUP_TOPIC_PREFIX


def _group_of(topic_col):
    return (F.when(topic_col.startswith(_RETRY), F.substring(topic_col, len(_RETRY) + 1, 10_000))
            .when(topic_col.startswith(_DLQ), F.substring(topic_col, len(_DLQ) + 1, 10_000)))


def run(ctx: AuditContext) -> CheckResult:
    res = CheckResult()
    m = ctx.messages.where(F.col("kept"))
    via = F.coalesce(F.when(F.col("topic") == L.SCHEDULE_TOPIC, F.col("real_topic")), F.col("topic"))
    hops = (m.withColumn("destination", via)
            .where(F.col("destination").startswith(_RETRY) | F.col("destination").startswith(_DLQ))
            .withColumn("group", _group_of(F.col("destination")))
            .withColumn("stage", F.when(F.col("topic") == L.SCHEDULE_TOPIC, "scheduled")
                        .when(F.col("topic").startswith(_DLQ), "dlq").otherwise("retry")))
    originals = m.select("broker", F.col("msg_id").alias("origin_message_id"),
                         F.col("topic").alias("origin_topic_found"), F.col("uniq_key").alias("origin_uniq_key"),
                         F.col("physical_offset").alias("origin_physical_offset"))
    hops = hops.join(originals, ["broker", "origin_message_id"], "left").select(
        "broker", "group", "stage", "topic", "queue_id", "queue_offset", "physical_offset", "segment", "file_position",
        "store_timestamp", "reconsume_times", "uniq_key", "origin_message_id",
        F.coalesce(F.col("retry_topic"), F.col("origin_topic_found")).alias("original_topic"),
        "origin_physical_offset", "origin_uniq_key")
    hops = ctx._persist(hops)
    res.tables["retries"] = hops

    dlq = hops.where(F.col("stage") == "dlq")
    res.findings.append(findings(
        dlq, "retries.dlq_message", "info",
        F.concat(F.lit("dead letter of group "), F.col("group"), F.lit(" from "),
                 F.coalesce(F.col("original_topic"), F.lit("?")), F.lit(" after "), F.col("reconsume_times").cast("string"),
                 F.lit(" reconsume(s)"), F.when(F.col("origin_physical_offset").isNotNull(),
                                                F.concat(F.lit("; original at physical offset "),
                                                         F.col("origin_physical_offset").cast("string")))
                 .otherwise(F.lit("; original not in this dump"))),
        {"group": F.col("group"), "origin_message_id": F.col("origin_message_id"), "uniq_key": F.col("uniq_key"),
         "key": F.col("uniq_key")}))
    inventory = dlq.groupBy("broker", "group").agg(
        F.count("*").alias("messages"), F.min("store_timestamp").alias("oldest_store_time"),
        F.max("store_timestamp").alias("newest_store_time"),
        F.array_sort(F.collect_set("original_topic")).alias("original_topics"),
        F.max("reconsume_times").alias("max_reconsume_times"))
    res.tables["dlq"] = inventory
    res.metrics.append(metrics(inventory, "group", {"dlq_messages": "messages"}))
    retries = hops.where(F.col("stage") == "retry").groupBy("broker", "group").agg(F.count("*").alias("n"))
    res.metrics.append(metrics(retries, "group", {"retry_messages": "n"}))
    return res
