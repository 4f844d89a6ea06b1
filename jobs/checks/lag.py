"""Consumer progress from ``config/consumerOffset.json`` (or its ``.bak``): per group/topic/queue the message
lag (queue max offset - committed offset) and the time lag (dump time - store time of the first unconsumed
message), retry topics (``%RETRY%group``) included.

Checks: ``lag.behind`` (info, one per group and topic with unconsumed messages), the warnings
``lag.offset_above_max`` (the committed offset is past the queue's end), ``lag.offset_below_min`` (below the
queue's first unit: those messages are gone), ``lag.offset_for_unknown_topic`` (a topic neither in the data
nor in topics.json) and ``lag.offset_for_unknown_queue``.  Detail table: ``lag``.
"""
from __future__ import annotations

from pyspark.sql import functions as F

from store_format import layout as L

from .base import AuditContext, CheckResult, findings, metrics, queue_bounds


def lag_table(ctx: AuditContext):
    offsets = (ctx.metadata("consumer_offsets").where(F.col("error").isNull() & F.col("topic").isNotNull())
               .select("broker", "group", "topic", "queue_id", "offset", "source"))
    bounds = queue_bounds(ctx)
    entries = ctx.consume_queue.where(F.col("kind") == "entry").select(
        "broker", "topic", "queue_id", F.col("queue_offset").alias("offset"), "physical_offset")
    # only the units at a committed offset matter: narrow the consume queues down before the join
    first_unconsumed = (entries.join(F.broadcast(offsets.select("broker", "topic", "queue_id", "offset").distinct()),
                                     ["broker", "topic", "queue_id", "offset"], "left_semi")
                        .join(ctx.messages.select("broker", "physical_offset", "store_timestamp"),
                              ["broker", "physical_offset"]))
    t = (offsets.join(bounds, ["broker", "topic", "queue_id"], "left")
         .join(first_unconsumed, ["broker", "topic", "queue_id", "offset"], "left")
         .withColumn("lag", F.greatest(F.coalesce(F.col("max_offset"), F.lit(0)) - F.col("offset"), F.lit(0)))
         .withColumn("first_unconsumed_store_time", F.when(F.col("lag") > 0, F.col("store_timestamp")))
         .withColumn("lag_ms", F.when(F.col("lag") > 0, ctx.as_of_column() - F.col("store_timestamp")))
         .withColumn("retry", F.col("topic").startswith(L.RETRY_GROUP_TOPIC_PREFIX)))
    return t.select("broker", "group", "topic", "queue_id", "offset", "min_offset", "max_offset", "lag",
                    "first_unconsumed_store_time", "lag_ms", "retry", "source")


def run(ctx: AuditContext) -> CheckResult:
    res = CheckResult()
    t = ctx._persist(lag_table(ctx))
    res.tables["lag"] = t
    known_topics = (ctx.consume_queue.select("broker", "topic")
                    .unionByName(ctx.metadata("topics").where(F.col("topic").isNotNull()).select("broker", "topic"))
                    .distinct().withColumn("topic_known", F.lit(True)))
    topic_conf = ctx.metadata("topics").where(F.col("topic").isNotNull()).select(
        "broker", "topic", "read_queue_nums")
    t2 = (t.join(known_topics, ["broker", "topic"], "left").join(topic_conf, ["broker", "topic"], "left"))
    unknown_topic = F.col("topic_known").isNull()
    no_queue = ~unknown_topic & F.col("max_offset").isNull()
    unknown_queue = no_queue & F.col("read_queue_nums").isNotNull() & (F.col("queue_id") >= F.col("read_queue_nums"))
    above = ~unknown_topic & ~unknown_queue & (F.col("offset") > F.coalesce(F.col("max_offset"), F.lit(0)))
    below = F.col("min_offset").isNotNull() & (F.col("offset") < F.col("min_offset"))
    pos = {"file": F.lit("config/consumerOffset.json")}
    res.findings.append(findings(
        t2.where(unknown_topic), "lag.offset_for_unknown_topic", "warning",
        F.concat(F.lit("group "), F.col("group"), F.lit(" has an offset for topic "), F.col("topic"),
                 F.lit(", which has no consume queue and no topics.json entry")),
        {"group": F.col("group"), "offset": F.col("offset"), "key": F.col("group")}, **pos))
    res.findings.append(findings(
        t2.where(unknown_queue), "lag.offset_for_unknown_queue", "warning",
        F.concat(F.lit("group "), F.col("group"), F.lit(" has an offset for queue "), F.col("queue_id").cast("string"),
                 F.lit(" of "), F.col("topic"), F.lit(", which has only "), F.col("read_queue_nums").cast("string"),
                 F.lit(" read queues")),
        {"group": F.col("group"), "offset": F.col("offset"), "key": F.col("group")}, **pos))
    res.findings.append(findings(
        t2.where(above), "lag.offset_above_max", "warning",
        F.concat(F.lit("group "), F.col("group"), F.lit(" committed offset "), F.col("offset").cast("string"),
                 F.lit(" on "), F.col("topic"), F.lit("/"), F.col("queue_id").cast("string"),
                 F.lit(" but the queue ends at "), F.coalesce(F.col("max_offset"), F.lit(0)).cast("string"),
                 F.lit(": messages written later will be skipped")),
        {"group": F.col("group"), "offset": F.col("offset"), "max_offset": F.col("max_offset"),
         "key": F.col("group")}, queue_offset=F.col("offset"), **pos))
    res.findings.append(findings(
        t2.where(below), "lag.offset_below_min", "warning",
        F.concat(F.lit("group "), F.col("group"), F.lit(" committed offset "), F.col("offset").cast("string"),
                 F.lit(" on "), F.col("topic"), F.lit("/"), F.col("queue_id").cast("string"),
                 F.lit(" but the queue starts at "), F.col("min_offset").cast("string"),
                 F.lit(": the messages in between are gone")),
        {"group": F.col("group"), "offset": F.col("offset"), "min_offset": F.col("min_offset"),
         "key": F.col("group")}, queue_offset=F.col("offset"), **pos))

    per_topic = t.groupBy("broker", "group", "topic").agg(
        F.sum("lag").alias("lag"), F.max("lag_ms").alias("lag_ms"), F.count("*").alias("queues"),
        F.min("first_unconsumed_store_time").alias("oldest"))
    res.findings.append(findings(
        per_topic.where(F.col("lag") > 0), "lag.behind", "info",
        F.concat(F.lit("group "), F.col("group"), F.lit(" is "), F.col("lag").cast("string"),
                 F.lit(" message(s) behind on "), F.col("topic"),
                 F.when(F.col("lag_ms").isNotNull(), F.concat(F.lit(" (oldest unconsumed "),
                                                              (F.col("lag_ms") / 1000).cast("long").cast("string"),
                                                              F.lit(" s before the dump time)"))).otherwise(F.lit(""))),
        {"group": F.col("group"), "lag": F.col("lag"), "lag_ms": F.col("lag_ms"), "key": F.col("group")}, **pos))
    res.metrics.append(metrics(per_topic, "group", {"lag_messages": "lag", "lag_ms": "lag_ms"}))
    return res
