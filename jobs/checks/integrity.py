"""Framing and integrity of the CommitLog: damage the salvage walk could not frame, records that decode badly,
stale records past a segment's first stop, segment files of the wrong length or name, gaps between segments.

Checks: ``integrity.<reason>`` for each corrupt span (reason = the walk's stop kind in lower case: bad_crc,
bad_magic, size_mismatch, bad_length, truncated, physical_offset_mismatch, end_of_data for a hole after zeros;
a span never includes the segment's unwritten zero tail: when one follows it, the finding says how long it is
(``details.unwritten_tail_bytes``, the ``length`` of the salvage walk's END_OF_DATA stop row at the span's end);
bad_file_name, bad_geometry (wrong or empty length) for segment files), ``integrity.damaged_message`` (the message a span destroyed,
when its header still decodes), ``integrity.stale_records``,
``integrity.segment_gap``, ``integrity.no_commitlog``.  The segment table (fill and damage per segment) is
this family's detail table.
"""
from __future__ import annotations

from pyspark.sql import functions as F

from store_format import codec
from store_format.commitlog import ReadOnlyMap
from store_format.errors import StoreFormatError

from .base import AuditContext, CheckResult, driver_findings, findings, metrics

_SPAN_LIMIT_FOR_CONTEXT = 1000  # corrupt spans whose record is decoded on the driver to name its topic/queue


def run(ctx: AuditContext) -> CheckResult:
    res = CheckResult()
    d = ctx.damage
    corrupt = d.where(F.col("kind") == "corrupt")
    # the salvage walk's END_OF_DATA stop right after a span: the segment's never-written zero tail (not damage)
    tails = d.where((F.col("kind") == "stop") & (F.col("reason") == "END_OF_DATA") & (F.col("length") > 0)).select(
        "broker", "segment", F.col("file_position").alias("_end"), F.col("length").alias("unwritten_tail"))
    spans = (corrupt.withColumn("_end", F.col("file_position") + F.col("length"))
             .join(tails, ["broker", "segment", "_end"], "left").drop("_end"))
    res.findings.append(findings(
        spans, F.concat(F.lit("integrity."), F.lower(F.coalesce(F.col("reason"), F.lit("unframeable")))),
        "error",
        F.concat_ws("", F.lit("unframeable bytes ("), F.coalesce(F.col("reason"), F.lit("?")), F.lit("): "),
                    F.col("length").cast("string"), F.lit(" bytes at "), F.col("segment"), F.lit("@"),
                    F.col("file_position").cast("string"),
                    F.when(F.col("unwritten_tail").isNotNull(),
                           F.concat(F.lit(", then the segment's unwritten zero tail ("),
                                    F.col("unwritten_tail").cast("string"), F.lit(" bytes, not damage)"))),
                    F.when(F.col("detail").isNotNull(), F.concat(F.lit(": "), F.col("detail")))),
        {"length": F.col("length"), "reason": F.col("reason"), "field": F.col("field"), "detail": F.col("detail"),
         "excerpt_hex": F.col("excerpt_hex"), "unwritten_tail_bytes": F.col("unwritten_tail")},
    ))
    res.findings.append(_stop_context(ctx, corrupt))

    m = ctx.messages
    stale = (m.where(F.col("beyond_first_stop"))
             .groupBy("broker", "segment")
             .agg(F.count("*").alias("n"), F.min("file_position").alias("first"), F.max("file_position").alias("last"),
                  F.min("physical_offset").alias("first_offset")))
    res.findings.append(findings(
        stale, "integrity.stale_records", "warning",
        F.concat(F.col("n").cast("string"), F.lit(" well-formed record(s) after the segment's first stop "
                                                  "(the broker's walk never reaches them)")),
        {"count": F.col("n"), "last_position": F.col("last")},
        file_position=F.col("first"), physical_offset=F.col("first_offset")))

    res.findings.append(_segment_listing(ctx))
    segments = _segment_table(ctx)
    res.tables["segments"] = segments
    per_broker = segments.groupBy("broker").agg(
        F.sum("messages").alias("messages"), F.sum("message_bytes").alias("message_bytes"),
        F.sum("corrupt_bytes").alias("corrupt_bytes"), F.count("*").alias("segments"))
    res.metrics.append(metrics(per_broker, "broker", {
        "message_count": "messages", "message_bytes": "message_bytes", "corrupt_bytes": "corrupt_bytes",
        "segments": "segments"}))
    per_queue = m.groupBy("broker", "topic", "queue_id").agg(
        F.count("*").alias("n"), F.sum("store_size").alias("bytes"))
    res.metrics.append(metrics(per_queue, "queue", {"message_count": "n", "message_bytes": "bytes"}))
    return res


def _segment_table(ctx: AuditContext):
    """Per segment: file length, bytes of messages, stale records, corrupt bytes, where the walk stopped."""
    items = ctx.commitlog
    seg = items.groupBy("broker", "segment").agg(
        F.sum(F.when(F.col("kind") == "message", 1).otherwise(0)).alias("messages"),
        F.sum(F.when(F.col("kind") == "message", F.col("store_size")).otherwise(0)).cast("long").alias("message_bytes"),
        F.sum(F.when((F.col("kind") == "message") & F.col("beyond_first_stop"), 1).otherwise(0)).alias("stale_records"),
        F.sum(F.when(F.col("kind") == "corrupt", F.col("length")).otherwise(0)).cast("long").alias("corrupt_bytes"),
        F.min(F.when(F.col("kind") == "stop", F.col("file_position"))).alias("first_stop"),
        F.min_by(F.col("reason"), F.when(F.col("kind") == "stop", F.col("file_position"))).alias("stop_reason"),
        F.min(F.when(F.col("kind") == "blank", F.col("file_position"))).alias("blank_at"),
    )
    lengths = ctx.spark.createDataFrame(
        [(name, seg.name, seg.base_offset, seg.length) for name, st in ctx.store_objects.items()
         for seg in st.segments], "broker string, segment string, base_offset long, file_length long")
    return lengths.join(seg, ["broker", "segment"], "full").orderBy("broker", "segment")


def _segment_listing(ctx: AuditContext):
    """Gaps between segment names (a missing segment) and stores without a commitlog, from the listing."""
    rows, spark = [], ctx.spark
    for name, store in ctx.store_objects.items():
        segs, size = store.segments, store.segment_size
        if not segs:
            rows.append(dict(check="integrity.no_commitlog", severity="error", broker=name, file="commitlog",
                             message="no commitlog segment in this store"))
            continue
        for a, b in zip(segs, segs[1:]):
            if size and b.base_offset != a.base_offset + size:
                rows.append(dict(check="integrity.segment_gap", severity="error", broker=name, file=b.name,
                                 physical_offset=a.base_offset + size,
                                 message=f"segment {b.name} follows {a.name}: {b.base_offset - a.base_offset - size} "
                                         "bytes of commitlog are missing between them",
                                 details={"expected_name": f"{a.base_offset + size:020d}"}))
    return driver_findings(spark, rows)


def _stop_context(ctx: AuditContext, corrupt):
    """For spans where a record still frames (bad CRC, size mismatch...), name the message that was lost:
    its topic, queue and queue offset, decoded on the driver without the CRC check."""
    spans = (corrupt.where(F.col("reason").isin("BAD_CRC", "SIZE_MISMATCH", "PHYSICAL_OFFSET_MISMATCH"))
             .select("broker", "segment", "file_position", "physical_offset", "reason")
             .limit(_SPAN_LIMIT_FOR_CONTEXT).collect())
    rows = []
    for r in spans:
        store = ctx.store_objects[r["broker"]]
        path = store.root / "commitlog" / r["segment"]
        try:
            with ReadOnlyMap(path) as mm:
                msg = codec.decode_record(mm.buf, r["file_position"], check_crc=False,
                                          file=str(path))
        except StoreFormatError:
            continue
        rows.append(dict(check="integrity.damaged_message", severity="warning", broker=r["broker"],
                         file=r["segment"], file_position=r["file_position"], physical_offset=r["physical_offset"],
                         topic=msg.topic, queue_id=msg.queue_id, queue_offset=msg.queue_offset,
                         message=f"the damaged record ({r['reason']}) is a message of {msg.topic}/{msg.queue_id} "
                                 f"at queue offset {msg.queue_offset}, key {msg.uniq_key or '-'}",
                         details={"reason": r["reason"], "uniq_key": msg.uniq_key, "key": msg.uniq_key}))
    return driver_findings(ctx.spark, rows)

