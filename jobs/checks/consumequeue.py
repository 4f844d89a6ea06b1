"""CommitLog <-> ConsumeQueue: every dispatchable message (NOT/COMMIT) the broker keeps has exactly one unit at
its queue offset with its physical offset, size and tagsCode; every unit points at such a message.

Checks (errors unless noted): ``consumequeue.missing_entry`` (a range of queue offsets per queue; a
``warning`` ``consumequeue.not_yet_dispatched`` when the message lies past every queue's end, where the
broker's reput service dispatches it at start), ``consumequeue.wrong_queue``, ``consumequeue.queue_offset_mismatch``,
``consumequeue.size_mismatch``, ``consumequeue.tags_code_mismatch``, ``consumequeue.undispatchable_entry``
(a unit for a PREPARED/ROLLBACK record), ``consumequeue.duplicate_entry``, units that point at no message:
``consumequeue.entry_past_end``, ``consumequeue.entry_mid_record``, ``consumequeue.entry_not_a_message``, and
the warning ``consumequeue.entry_in_damage`` (the record it points at is inside a corrupt span: the damage is
the finding), ``consumequeue.corrupt_unit`` (units recovery stops at, bad file names, partial units),
``consumequeue.file_gap`` (file names out of sequence).  Units past the recovered end are the recovery
family's ``recovery.cq_truncated``.
"""
from __future__ import annotations

from pyspark.sql import functions as F

from store_format import layout as L

from .base import DISPATCHED_TYPES, AuditContext, CheckResult, driver_findings, findings, locate_offsets, metrics, \
    queue_bounds, ranges_of


def run(ctx: AuditContext) -> CheckResult:
    res = CheckResult()
    cq = ctx.consume_queue
    entries = cq.where(F.col("kind") == "entry")
    m = ctx.messages
    target = m.select("broker", "physical_offset", F.col("topic").alias("m_topic"),
                      F.col("queue_id").alias("m_queue_id"), F.col("queue_offset").alias("m_queue_offset"),
                      F.col("store_size").alias("m_size"), F.col("tags_code").alias("m_tags_code"),
                      F.col("tran_type").alias("m_tran_type"), "kept", F.col("uniq_key").alias("m_uniq_key"))
    j = entries.join(target, ["broker", "physical_offset"], "left")
    matched = j.where(F.col("kept"))
    where_msg = {"uniq_key": F.col("m_uniq_key"), "key": F.col("m_uniq_key")}

    def mismatch(cond, check, text, details):
        res.findings.append(findings(matched.where(cond), f"consumequeue.{check}", "error", text,
                                     {**where_msg, **details}))

    wrong_queue = (F.col("m_topic") != F.col("topic")) | (F.col("m_queue_id") != F.col("queue_id"))
    mismatch(wrong_queue, "wrong_queue",
             F.concat(F.lit("unit of "), F.col("topic"), F.lit("/"), F.col("queue_id").cast("string"),
                      F.lit(" points at a message of "), F.col("m_topic"), F.lit("/"),
                      F.col("m_queue_id").cast("string")),
             {"message_topic": F.col("m_topic"), "message_queue_id": F.col("m_queue_id")})
    same_queue = ~wrong_queue
    mismatch(same_queue & (F.col("m_queue_offset") != F.col("queue_offset")), "queue_offset_mismatch",
             F.concat(F.lit("unit at queue offset "), F.col("queue_offset").cast("string"),
                      F.lit(" points at the message stored with queue offset "), F.col("m_queue_offset").cast("string")),
             {"message_queue_offset": F.col("m_queue_offset")})
    mismatch(F.col("m_size") != F.col("size"), "size_mismatch",
             F.concat(F.lit("unit size "), F.col("size").cast("string"), F.lit(" != record TOTALSIZE "),
                      F.col("m_size").cast("string")),
             {"unit_size": F.col("size"), "record_size": F.col("m_size")})
    mismatch(F.col("m_tags_code") != F.col("tags_code"), "tags_code_mismatch",
             F.concat(F.lit("unit tagsCode "), F.col("tags_code").cast("string"), F.lit(" != "),
                      F.col("m_tags_code").cast("string"), F.lit(" computed from the record")),
             {"unit_tags_code": F.col("tags_code"), "record_tags_code": F.col("m_tags_code")})
    mismatch(~F.col("m_tran_type").isin(*DISPATCHED_TYPES), "undispatchable_entry",
             F.concat(F.lit("unit points at a "), F.col("m_tran_type"),
                      F.lit(" record, which the broker never dispatches")),
             {"tran_type": F.col("m_tran_type")})

    dup = (entries.groupBy("broker", "physical_offset")
           .agg(F.count("*").alias("n"), F.min(F.struct("topic", "queue_id", "queue_offset", "file",
                                                        "file_position")).alias("first"))
           .where(F.col("n") > 1))
    res.findings.append(findings(
        dup, "consumequeue.duplicate_entry", "error",
        F.concat(F.col("n").cast("string"), F.lit(" units point at the same record")), {"units": F.col("n")},
        topic=F.col("first.topic"), queue_id=F.col("first.queue_id"), queue_offset=F.col("first.queue_offset"),
        file=F.col("first.file"), file_position=F.col("first.file_position")))

    res.findings.append(_pointing_at_nothing(ctx, j.where(F.col("kept").isNull()).drop(*[c for c in target.columns
                                                                                         if c.startswith("m_")])))
    res.findings.append(_missing(ctx, entries))

    corrupt = cq.where(F.col("kind") == "corrupt")
    res.findings.append(findings(
        corrupt, "consumequeue.corrupt_unit", "error",
        F.concat(F.lit("consume-queue "), F.col("topic"), F.lit("/"), F.coalesce(F.col("queue_id").cast("string"),
                                                                               F.lit("?")),
                 F.lit(" file "), F.col("file"), F.lit(": "), F.coalesce(F.col("reason"), F.lit("corrupt unit"))),
        {"length": F.col("length"), "reason": F.col("reason")}, physical_offset=None))
    res.findings.append(_file_sequence(ctx))

    bounds = queue_bounds(ctx)
    res.tables["queues"] = bounds
    res.metrics.append(metrics(bounds, "queue", {"cq_min_offset": "min_offset", "cq_max_offset": "max_offset",
                                                 "cq_entries": "entries"}))
    return res


def _pointing_at_nothing(ctx: AuditContext, loose):
    c = locate_offsets(ctx, loose)
    where = F.col("located")
    check = F.concat(F.lit("consumequeue.entry_"), F.when(where == "in_damage", "in_damage")
                     .when(where == "mid_record", "mid_record").when(where == "past_end", "past_end")
                     .otherwise("not_a_message"))
    return findings(c, check, F.when(where == "in_damage", "warning").otherwise("error"),
                    F.concat(F.lit("unit "), F.col("located_text")),
                    {"size": F.col("size"), "tags_code": F.col("tags_code")})


def _missing(ctx: AuditContext, entries):
    """Kept dispatchable messages without a unit, as ranges of queue offsets per queue."""
    reput_from = F.create_map(*[x for n, p in ctx.recovery.items()
                                for x in (F.lit(n), F.lit(p.max_cq_physical_offset))])[F.col("broker")]
    m = ctx.messages.where(F.col("kept") & F.col("tran_type").isin(*DISPATCHED_TYPES))
    missing = (m.join(entries.select("broker", "physical_offset"), ["broker", "physical_offset"], "left_anti")
               .withColumn("pending", F.col("physical_offset") >= reput_from))
    r = ranges_of(missing, ["broker", "topic", "queue_id", "pending"], "queue_offset")
    first_phys = missing.groupBy("broker", "topic", "queue_id", "pending").agg(
        F.min(F.struct("queue_offset", "physical_offset")).alias("s"))
    r = r.join(first_phys, ["broker", "topic", "queue_id", "pending"])
    span = F.when(F.col("count") == 1, F.col("first").cast("string")).otherwise(
        F.concat(F.col("first").cast("string"), F.lit(".."), F.col("last").cast("string")))
    return findings(
        r, F.when(F.col("pending"), "consumequeue.not_yet_dispatched").otherwise("consumequeue.missing_entry"),
        F.when(F.col("pending"), "warning").otherwise("error"),
        F.concat(F.col("count").cast("string"), F.lit(" message(s) of "), F.col("topic"), F.lit("/"),
                 F.col("queue_id").cast("string"), F.lit(" at queue offset(s) "), span,
                 F.when(F.col("pending"), F.lit(" have no consume-queue unit yet (the broker dispatches them at "
                                                "start)"))
                 .otherwise(F.lit(" have no consume-queue unit: consumers cannot see them"))),
        {"count": F.col("count"), "last_queue_offset": F.col("last")},
        queue_offset=F.col("first"), physical_offset=F.when(F.col("s.queue_offset") == F.col("first"),
                                                            F.col("s.physical_offset")))


def _file_sequence(ctx: AuditContext):
    """Consume-queue file names must follow each other by the file size (a missing file is a hole)."""
    rows = []
    for name, store in ctx.store_objects.items():
        for (topic, qid), files in store.queues.items():
            files = sorted(files, key=lambda f: f.base_byte_offset)
            size = max((f.length for f in files), default=0)
            for a, b in zip(files, files[1:]):
                if size and b.base_byte_offset != a.base_byte_offset + size:
                    missing = (b.base_byte_offset - a.base_byte_offset - size) // L.CQ_STORE_UNIT_SIZE
                    rows.append(dict(check="consumequeue.file_gap", severity="error", broker=name, topic=topic,
                                     queue_id=qid, file=b.path.name, queue_offset=(a.base_byte_offset + size)
                                     // L.CQ_STORE_UNIT_SIZE,
                                     message=f"consume-queue file {b.path.name} of {topic}/{qid} does not follow "
                                             f"{a.path.name}: {missing} units are missing between them"))
    return driver_findings(ctx.spark, rows)
