"""Transactions: every half message resolved as committed, rolled back or still open.

Broker-style (4.x/5.x): half messages are stored in ``RMQ_SYS_TRANS_HALF_TOPIC``; an op message in
``RMQ_SYS_TRANS_OP_HALF_TOPIC`` with tag ``d`` marks half queue offsets done (body: one decimal offset in 4.x,
a comma list such as ``12,13,`` in 5.x); a commit writes the record into the real topic as COMMIT with
``preparedTransactionOffset`` = the half's physical offset.  A half that the checker re-put is the same
transaction (same UNIQ_KEY).  Raw-sysflag style: a PREPARED record in a topic is resolved by a COMMIT or
ROLLBACK record whose ``preparedTransactionOffset`` is its physical offset.

Checks: ``transactions.open`` (warning: no op message and no commit, with age, check times and producer
group), ``transactions.commit_without_op`` (warning: committed, but the half was never marked done: the
checker will ask the producer again), ``transactions.open_prepared_record`` (warning).  Detail table:
``transactions``.
"""
from __future__ import annotations

from pyspark.sql import functions as F

from store_format import layout as L

from .base import AuditContext, CheckResult, findings, metrics


def transaction_table(ctx: AuditContext):
    m = ctx.messages.where(F.col("kept"))
    halves = m.where(F.col("topic") == L.TRANS_HALF_TOPIC).select(
        "broker", "physical_offset", "queue_offset", "uniq_key", "store_timestamp",
        F.coalesce(F.col("real_topic"), F.col("property_real_topic")).alias("real_topic"),
        F.col("real_queue_id"), "producer_group", F.col("check_times").cast("int").alias("check_times"), "segment",
        "file_position")
    ops = (m.where((F.col("topic") == L.TRANS_OP_HALF_TOPIC) & (F.col("tags") == L.TRANS_OP_REMOVE_TAG))
           .select("broker", "store_timestamp",
                   F.explode(F.split(F.decode(F.col("op_body"), "UTF-8"), ",")).alias("piece"))
           .where(F.trim("piece") != "")
           .select("broker", F.trim("piece").cast("long").alias("queue_offset"), "store_timestamp")
           .where(F.col("queue_offset").isNotNull())
           .groupBy("broker", "queue_offset").agg(F.min("store_timestamp").alias("op_time")))
    ends = m.where(F.col("tran_type").isin("COMMIT", "ROLLBACK") & (F.col("prepared_transaction_offset") > 0)).select(
        "broker", F.col("prepared_transaction_offset").alias("physical_offset"), F.col("tran_type").alias("end_type"),
        F.col("physical_offset").alias("end_physical_offset"), F.col("topic").alias("end_topic"))
    h = (halves.join(ops, ["broker", "queue_offset"], "left").join(ends, ["broker", "physical_offset"], "left")
         .withColumn("txn", F.coalesce(F.col("uniq_key"), F.col("physical_offset").cast("string"))))
    per_txn = h.groupBy("broker", "txn").agg(
        F.max_by(F.struct("physical_offset", "queue_offset", "segment", "file_position", "store_timestamp"),
                 "queue_offset").alias("last"),
        F.min("store_timestamp").alias("first_store_time"), F.count("*").alias("copies"),
        F.first("real_topic", ignorenulls=True).alias("topic"), F.first("real_queue_id", ignorenulls=True).alias("queue_id"),
        F.first("producer_group", ignorenulls=True).alias("producer_group"),
        F.max("check_times").alias("check_times"), F.max(F.col("op_time").isNotNull()).alias("op_done"),
        F.min("op_time").alias("resolved_time"),
        F.max(F.when(F.col("end_type") == "COMMIT", F.col("end_physical_offset"))).alias("commit_physical_offset"))
    state = (F.when(F.col("op_done") & F.col("commit_physical_offset").isNotNull(), "committed")
             .when(F.col("op_done"), "rolled_back")
             .when(F.col("commit_physical_offset").isNotNull(), "committed_without_op")
             .otherwise("open"))
    broker_style = per_txn.select(
        "broker", F.lit("half").alias("style"), F.col("txn").alias("uniq_key"), "topic", "queue_id", "producer_group",
        F.col("last.physical_offset").alias("physical_offset"), F.col("last.queue_offset").alias("half_queue_offset"),
        F.col("last.segment").alias("segment"), F.col("last.file_position").alias("file_position"),
        "first_store_time", "copies", F.coalesce("check_times", F.lit(0)).alias("check_times"), "resolved_time",
        "commit_physical_offset", state.alias("state"))

    prepared = m.where((F.col("tran_type") == "PREPARED") & (F.col("topic") != L.TRANS_HALF_TOPIC)).select(
        "broker", "physical_offset", "uniq_key", "topic", "queue_id", "store_timestamp", "segment", "file_position",
        "producer_group")
    p = prepared.join(ends, ["broker", "physical_offset"], "left").groupBy(
        "broker", "physical_offset", "uniq_key", "topic", "queue_id", "store_timestamp", "segment", "file_position",
        "producer_group").agg(
        F.max(F.when(F.col("end_type") == "COMMIT", F.col("end_physical_offset"))).alias("commit_physical_offset"),
        F.max(F.when(F.col("end_type") == "ROLLBACK", F.col("end_physical_offset"))).alias("rollback_physical_offset"))
    raw_style = p.select(
        "broker", F.lit("prepared_record").alias("style"), "uniq_key", "topic", "queue_id", "producer_group",
        "physical_offset", F.lit(None).cast("long").alias("half_queue_offset"), "segment", "file_position",
        F.col("store_timestamp").alias("first_store_time"), F.lit(1).cast("long").alias("copies"),
        F.lit(0).alias("check_times"), F.lit(None).cast("long").alias("resolved_time"), "commit_physical_offset",
        F.when(F.col("commit_physical_offset").isNotNull(), "committed")
        .when(F.col("rollback_physical_offset").isNotNull(), "rolled_back").otherwise("open").alias("state"))
    t = broker_style.unionByName(raw_style)
    return t.withColumn("age_ms", F.when(F.col("state") == "open",
                                         ctx.as_of_column() - F.col("first_store_time")))


def run(ctx: AuditContext) -> CheckResult:
    res = CheckResult()
    t = ctx._persist(transaction_table(ctx))
    res.tables["transactions"] = t
    where = {"uniq_key": F.col("uniq_key"), "key": F.col("uniq_key"), "producer_group": F.col("producer_group")}
    res.findings.append(findings(
        t.where((F.col("state") == "open") & (F.col("style") == "half")), "transactions.open", "warning",
        F.concat(F.lit("open transaction for "), F.coalesce(F.col("topic"), F.lit("?")), F.lit(" from producer group "),
                 F.coalesce(F.col("producer_group"), F.lit("?")), F.lit(", "),
                 (F.col("age_ms") / 1000).cast("long").cast("string"), F.lit(" s old at the dump time, checked "),
                 F.col("check_times").cast("string"), F.lit(" time(s)")),
        {**where, "age_ms": F.col("age_ms"), "check_times": F.col("check_times")}, queue_offset=F.col("half_queue_offset"),
        topic=F.lit(L.TRANS_HALF_TOPIC), queue_id=F.lit(0), file=F.col("segment")))
    res.findings.append(findings(
        t.where(F.col("state") == "committed_without_op"), "transactions.commit_without_op", "warning",
        F.concat(F.lit("transaction committed into "), F.coalesce(F.col("topic"), F.lit("?")),
                 F.lit(" but its half message was never marked done: the broker will check it again")),
        {**where, "commit_physical_offset": F.col("commit_physical_offset")}, queue_offset=F.col("half_queue_offset"),
        topic=F.lit(L.TRANS_HALF_TOPIC), queue_id=F.lit(0), file=F.col("segment")))
    res.findings.append(findings(
        t.where((F.col("state") == "open") & (F.col("style") == "prepared_record")),
        "transactions.open_prepared_record", "warning",
        F.concat(F.lit("PREPARED record in "), F.col("topic"), F.lit(" has no COMMIT or ROLLBACK record")),
        where, queue_offset=F.lit(None), file=F.col("segment")))
    per_broker = t.groupBy("broker").agg(F.sum(F.when(F.col("state") == "open", 1).otherwise(0)).alias("open"),
                                         F.count("*").alias("n"))
    res.metrics.append(metrics(per_broker, "broker", {"open_transactions": "open", "transactions": "n"}))
    return res
