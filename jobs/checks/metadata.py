"""Metadata: the config files against the data.

Checks: ``metadata.config_unreadable`` (error: neither the file nor its ``.bak`` parses),
``metadata.config_from_backup`` (warning: the main file was empty or broken; the broker loads the ``.bak``),
``metadata.config_missing`` (info), ``metadata.topic_not_in_config`` (warning: a topic with consume queues but
no topics.json entry; info for system topics, which 4.9.7 itself leaves out, e.g. RMQ_SYS_TRANS_OP_HALF_TOPIC), ``metadata.queue_outside_config`` (warning: a queue id at or past the topic's queue
count), ``metadata.group_not_in_config`` (warning: offsets for a group without a subscriptionGroup.json entry).
"""
from __future__ import annotations

from pyspark.sql import functions as F

from datasources.metadata import CONFIG_FILE
from store_format import layout as L

from .base import AuditContext, CheckResult, driver_findings, findings

_TABLES = ("consumer_offsets", "delay_offsets", "topics", "subscription_groups")


def run(ctx: AuditContext) -> CheckResult:
    res = CheckResult()
    rows = []
    present = {}
    for table in _TABLES:
        name = CONFIG_FILE[table]
        got = {r["broker"]: r for r in ctx.metadata(table).groupBy("broker").agg(
            F.first("error", ignorenulls=True).alias("error"), F.first("source", ignorenulls=True).alias("source"),
            F.count("*").alias("n")).collect()}
        for s in ctx.stores:
            r = got.get(s.name)
            cfg = ctx.store_objects[s.name].root / "config"
            exists = (cfg / name).exists() or (cfg / f"{name}.bak").exists()
            present[(s.name, table)] = bool(r and r["error"] is None and exists)
            if r and r["error"]:
                rows.append(dict(check="metadata.config_unreadable", severity="error", broker=s.name,
                                 file=f"config/{name}", message=f"config/{name} cannot be read: {r['error']}"))
            elif r and r["source"] and r["source"].endswith(".bak"):
                rows.append(dict(check="metadata.config_from_backup", severity="warning", broker=s.name,
                                 file=f"config/{name}", message=f"config/{name} is empty or broken; the broker "
                                 f"will load {name}.bak"))
            elif not exists:
                rows.append(dict(check="metadata.config_missing", severity="info", broker=s.name,
                                 file=f"config/{name}", message=f"no config/{name}: its checks are skipped"))
    res.findings.append(driver_findings(ctx.spark, rows))

    with_topics = [s.name for s in ctx.stores if present[(s.name, "topics")]]
    if with_topics:
        topics = ctx.metadata("topics").where(F.col("topic").isNotNull()).select(
            "broker", "topic", "read_queue_nums", "write_queue_nums", F.lit(True).alias("configured"))
        queues = ctx.consume_queue.where(F.col("broker").isin(*with_topics)).select(
            "broker", "topic", "queue_id").distinct()
        j = queues.join(topics, ["broker", "topic"], "left")
        pos = {"file": F.lit("config/topics.json")}
        missing = j.where(F.col("configured").isNull()).groupBy("broker", "topic").agg(F.count("*").alias("queues"))
        system = F.col("topic").isin(*sorted(L.SYSTEM_TOPICS)) | F.col("topic").startswith(L.SYSTEM_TOPIC_PREFIX)
        res.findings.append(findings(
            missing, "metadata.topic_not_in_config", F.when(system, "info").otherwise("warning"),
            F.concat(F.lit("topic "), F.col("topic"), F.lit(" has "), F.col("queues").cast("string"),
                     F.lit(" consume queue(s) but no topics.json entry")), {"queues": F.col("queues")}, **pos))
        outside = j.where(F.col("configured") & ~F.col("topic").isin(L.SCHEDULE_TOPIC) & (
            F.col("queue_id") >= F.greatest("read_queue_nums", "write_queue_nums")))
        res.findings.append(findings(
            outside, "metadata.queue_outside_config", "warning",
            F.concat(F.lit("queue "), F.col("queue_id").cast("string"), F.lit(" of "), F.col("topic"),
                     F.lit(" has data but topics.json gives it "),
                     F.greatest("read_queue_nums", "write_queue_nums").cast("string"), F.lit(" queues")),
            {"read_queue_nums": F.col("read_queue_nums"), "write_queue_nums": F.col("write_queue_nums")}, **pos))

    with_groups = [s.name for s in ctx.stores if present[(s.name, "subscription_groups")]]
    if with_groups:
        groups = ctx.metadata("subscription_groups").where(F.col("group").isNotNull()).select(
            "broker", "group", F.lit(True).alias("configured"))
        offsets = (ctx.metadata("consumer_offsets").where(F.col("broker").isin(*with_groups) & F.col("group").isNotNull())
                   .select("broker", "group").distinct())
        missing = offsets.join(groups, ["broker", "group"], "left").where(F.col("configured").isNull())
        res.findings.append(findings(
            missing, "metadata.group_not_in_config", "warning",
            F.concat(F.lit("consumer group "), F.col("group"),
                     F.lit(" has offsets but no subscriptionGroup.json entry")),
            {"group": F.col("group"), "key": F.col("group")}, file=F.lit("config/consumerOffset.json")))
    return res
