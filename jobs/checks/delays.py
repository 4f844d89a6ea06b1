"""Delayed messages: per delay level, ``SCHEDULE_TOPIC_XXXX`` queue ``level - 1`` against the next offset to
deliver in ``config/delayOffset.json`` (absent = 0, as ScheduleMessageService starts).  A pending message is
due when its deliver time (the unit's tagsCode) is at or before the dump time; it was delivered when a
message with its UNIQ_KEY exists in its REAL_TOPIC.

Checks: ``delays.overdue`` (warning: due, not delivered), ``delays.delivered_offset_behind`` (info: delivered,
but delayOffset.json was not persisted past it: it will be delivered again), ``delays.offset_out_of_range``
(warning), ``delays.unknown_level`` (warning: an offset for a level the broker does not have).  Detail table:
``delays``.
"""
from __future__ import annotations

from pyspark.sql import functions as F

from store_format import layout as L

from .base import AuditContext, CheckResult, findings, metrics, queue_bounds


def run(ctx: AuditContext) -> CheckResult:
    res = CheckResult()
    levels = len(L.DEFAULT_DELAY_LEVELS)  # messageDelayLevel is broker config, not in the store: the default
    offsets = (ctx.metadata("delay_offsets").where(F.col("error").isNull() & F.col("delay_level").isNotNull())
               .select("broker", F.col("delay_level").alias("level"), F.col("offset").alias("delivered_offset")))
    bounds = (queue_bounds(ctx).where(F.col("topic") == L.SCHEDULE_TOPIC)
              .select("broker", (F.col("queue_id") + 1).alias("level"), "min_offset", "max_offset"))
    per_level = bounds.join(offsets, ["broker", "level"], "full").withColumn(
        "next", F.coalesce(F.col("delivered_offset"), F.lit(0)))

    entries = (ctx.consume_queue.where((F.col("kind") == "entry") & (F.col("topic") == L.SCHEDULE_TOPIC))
               .select("broker", (F.col("queue_id") + 1).alias("level"), "queue_offset", "physical_offset",
                       F.col("tags_code").alias("deliver_time")))
    pending = (entries.join(per_level.select("broker", "level", "next"), ["broker", "level"])
               .where(F.col("queue_offset") >= F.col("next"))
               .join(ctx.messages.select("broker", "physical_offset", "uniq_key", "real_topic", "segment",
                                         "file_position", "store_timestamp"), ["broker", "physical_offset"], "left"))
    delivered = ctx.messages.where(F.col("topic") != L.SCHEDULE_TOPIC).select(
        "broker", F.col("topic").alias("real_topic"), "uniq_key", F.lit(True).alias("delivered")).distinct()
    pending = (pending.join(delivered, ["broker", "real_topic", "uniq_key"], "left")
               .withColumn("delivered", F.coalesce("delivered", F.lit(False)))
               .withColumn("due", F.col("deliver_time") <= ctx.as_of_column()))
    pending = ctx._persist(pending)
    res.findings.append(findings(
        pending.where(F.col("due") & ~F.col("delivered")), "delays.overdue", "warning",
        F.concat(F.lit("delay level "), F.col("level").cast("string"), F.lit(" message for "),
                 F.coalesce(F.col("real_topic"), F.lit("?")), F.lit(" was due "),
                 ((ctx.as_of_column() - F.col("deliver_time")) / 1000).cast("long").cast("string"),
                 F.lit(" s before the dump time and is not delivered")),
        {"level": F.col("level"), "deliver_time": F.col("deliver_time"), "uniq_key": F.col("uniq_key"),
         "key": F.col("uniq_key")}, topic=F.lit(L.SCHEDULE_TOPIC), queue_id=F.col("level") - 1))
    res.findings.append(findings(
        pending.where(F.col("delivered")), "delays.delivered_offset_behind", "info",
        F.concat(F.lit("delay level "), F.col("level").cast("string"), F.lit(" message was delivered to "),
                 F.col("real_topic"), F.lit(" but delayOffset.json is behind it: the broker delivers it again")),
        {"level": F.col("level"), "uniq_key": F.col("uniq_key"), "key": F.col("uniq_key")},
        topic=F.lit(L.SCHEDULE_TOPIC), queue_id=F.col("level") - 1))

    stats = pending.groupBy("broker", "level").agg(
        F.count("*").alias("pending"), F.sum(F.when(F.col("due") & ~F.col("delivered"), 1).otherwise(0)).alias("overdue"),
        F.min("deliver_time").alias("next_deliver_time"))
    table = (per_level.join(stats, ["broker", "level"], "left")
             .select("broker", "level", (F.col("level") - 1).alias("queue_id"), "min_offset", "max_offset",
                     "delivered_offset", F.coalesce("pending", F.lit(0)).alias("pending"),
                     F.coalesce("overdue", F.lit(0)).alias("overdue"), "next_deliver_time"))
    table = ctx._persist(table)
    res.tables["delays"] = table
    pos = {"file": F.lit("config/delayOffset.json"), "topic": F.lit(L.SCHEDULE_TOPIC), "queue_id": F.col("queue_id")}
    out_of_range = F.col("delivered_offset").isNotNull() & (
        (F.col("delivered_offset") > F.coalesce(F.col("max_offset"), F.lit(0)))
        | (F.col("delivered_offset") < F.coalesce(F.col("min_offset"), F.lit(0))))
    res.findings.append(findings(
        table.where(out_of_range & (F.col("level") <= levels)), "delays.offset_out_of_range", "warning",
        F.concat(F.lit("delayOffset.json says level "), F.col("level").cast("string"), F.lit(" is at "),
                 F.col("delivered_offset").cast("string"), F.lit(" but its queue holds "),
                 F.coalesce(F.col("min_offset"), F.lit(0)).cast("string"), F.lit(".."),
                 F.coalesce(F.col("max_offset"), F.lit(0)).cast("string")),
        {"level": F.col("level"), "offset": F.col("delivered_offset")}, queue_offset=F.col("delivered_offset"), **pos))
    res.findings.append(findings(
        table.where(F.col("level") > levels), "delays.unknown_level", "warning",
        F.concat(F.lit("delay level "), F.col("level").cast("string"), F.lit(" is beyond the "), F.lit(str(levels)),
                 F.lit(" levels of messageDelayLevel")), {"level": F.col("level")}, **pos))
    res.metrics.append(metrics(table, "level", {"pending_delays": "pending", "overdue_delays": "overdue"},
                               topic=F.lit(L.SCHEDULE_TOPIC)))
    per_broker = table.groupBy("broker").agg(F.sum("pending").alias("p"))
    res.metrics.append(metrics(per_broker, "broker", {"pending_delays": "p"}))
    return res
