"""What the broker will do with this dump when it starts (store_format.recovery's model of RocketMQ 4.9.x).

Checks: ``recovery.broker_will_not_start`` (a segment of the wrong length fails ``load()``),
``recovery.truncation`` (one error per broker: the recovered end lies before the last well-formed record),
``recovery.message_lost`` (each message the truncation drops), ``recovery.segment_deleted``,
``recovery.cq_truncated`` (consume-queue units at or past the recovered end), ``recovery.index_rebuilt``
(abnormal recovery deletes and rebuilds newer index files), ``recovery.abnormal`` (the abort file is there:
the broker did not shut down cleanly), ``recovery.note``.
"""
from __future__ import annotations

from pyspark.sql import functions as F

from .base import AuditContext, CheckResult, driver_findings, driver_metrics, findings


def run(ctx: AuditContext) -> CheckResult:
    res = CheckResult()
    rows, mrows = [], []
    for name, p in ctx.recovery.items():
        if not p.will_start:
            for problem in p.start_problems:
                rows.append(dict(check="recovery.broker_will_not_start", severity="error", broker=name,
                                 file=problem.split()[1] if problem.startswith("segment ") else None,
                                 message=f"the broker will refuse to start: {problem}"))
        if p.mode == "abnormal":
            rows.append(dict(check="recovery.abnormal", severity="info", broker=name, file="abort",
                             physical_offset=p.redispatch_from,
                             message=f"abort file present: abnormal recovery from segment {p.start_segment}, "
                                     f"re-dispatching from physical offset {p.redispatch_from}"))
        lost = len(p.dropped_messages)
        if lost:
            first = min(o for o, _ in p.dropped_messages)
            rows.append(dict(check="recovery.truncation", severity="error", broker=name, file=p.stop_segment,
                             file_position=p.stop_position, physical_offset=p.max_physical_offset,
                             message=f"recovery stops at {p.max_physical_offset} ({p.stop_kind}) and drops {lost} "
                                     f"well-formed message(s) from {first} on",
                             details={"messages_lost": lost, "stop_kind": p.stop_kind,
                                      "bytes_lost": sum(s for _, s in p.dropped_messages)}))
        for seg in p.segments_deleted:
            rows.append(dict(check="recovery.segment_deleted", severity="warning", broker=name, file=seg,
                             message=f"segment {seg} lies wholly past the recovered end and will be deleted"))
        for (topic, qid), n in sorted(p.cq_units_truncated.items()):
            rows.append(dict(check="recovery.cq_truncated", severity="warning", broker=name, topic=topic,
                             queue_id=qid, physical_offset=p.max_physical_offset,
                             message=f"{n} consume-queue unit(s) of {topic}/{qid} point at or past the recovered "
                                     "end and will be truncated", details={"units": n}))
        for f in p.index_files_deleted:
            rows.append(dict(check="recovery.index_rebuilt", severity="info", broker=name, file=f"index/{f}",
                             message=f"index file {f} is newer than the checkpoint's indexMsgTimestamp: abnormal "
                                     "recovery deletes it and rebuilds it by re-dispatch"))
        for note in p.notes:
            rows.append(dict(check="recovery.note", severity="warning", broker=name, message=note))
        mrows += [dict(broker=name, scope="broker", metric="messages_lost", value=float(lost)),
                  dict(broker=name, scope="broker", metric="predicted_max_physical_offset",
                       value=float(p.max_physical_offset))]
    res.findings.append(driver_findings(ctx.spark, rows))
    res.metrics.append(driver_metrics(ctx.spark, mrows))

    lost = ctx.messages.where(~F.col("kept"))
    dropped = ctx.spark.createDataFrame(
        [(name, o) for name, p in ctx.recovery.items() for o, _ in p.dropped_messages],
        "broker string, physical_offset long")
    res.findings.append(findings(
        lost.join(dropped, ["broker", "physical_offset"]), "recovery.message_lost", "warning",
        F.concat(F.lit("message of "), F.col("topic"), F.lit("/"), F.col("queue_id").cast("string"),
                 F.lit(" at queue offset "), F.col("queue_offset").cast("string"),
                 F.lit(" lies past the recovered end: the broker will drop it")),
        {"uniq_key": F.col("uniq_key"), "key": F.col("uniq_key"), "msg_id": F.col("msg_id")}))
    return res


def summary(ctx: AuditContext) -> dict:
    """The summary.json ``recovery`` object per broker."""
    out = {}
    for name, p in ctx.recovery.items():
        out[name] = {
            "mode": p.mode, "broker_will_start": p.will_start, "start_problems": p.start_problems,
            "start_segment": p.start_segment, "predicted_max_physical_offset": p.max_physical_offset,
            "stop_segment": p.stop_segment, "stop_position": p.stop_position, "stop_kind": p.stop_kind,
            "messages_lost": len(p.dropped_messages), "bytes_lost": sum(s for _, s in p.dropped_messages),
            "segments_deleted": p.segments_deleted, "max_cq_physical_offset": p.max_cq_physical_offset,
            "cq_units_truncated": sum(p.cq_units_truncated.values()),
            "index_files_deleted": p.index_files_deleted, "redispatch_from": p.redispatch_from, "notes": p.notes,
        }
    return out
