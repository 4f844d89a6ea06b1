"""What the broker will do with this dump when it starts (store_format.recovery's model of RocketMQ 4.9.x).

Checks: ``recovery.broker_will_not_start`` (``lock`` a folder, a ``commitlog/`` entry that is not a
segment-size file with a numeric name, ``checkpoint`` a folder: the broker fails to initialize or ``load()``),
``recovery.truncation`` (one error per broker: recovery drops records: messages_lost = the damaged records
that still frame a message (damaged_messages_lost) + the intact messages past the recovered end
(intact_messages_lost), plus unframed_bytes_lost, bytes no walk could frame; store_format.recovery.lost_records),
``recovery.message_lost`` (each message the broker drops: ``details.state`` intact (a well-formed record past the
recovered end, joined with the salvage walk's messages) or damaged (``details.damage`` = its stop kind, named from
its header on the driver)), ``recovery.segment_deleted``,
``recovery.cq_truncated`` (per queue, the units recovery drops: from the first unit ConsumeQueue.recover refuses,
or the first at or past the recovered end that truncateDirtyLogicFiles cuts at, every later one),
``recovery.index_rebuilt``
(abnormal recovery deletes and rebuilds newer index files), ``recovery.abnormal`` (the abort file is there:
the broker did not shut down cleanly), ``recovery.note``.
"""
from __future__ import annotations

from pyspark.sql import functions as F

from store_format import layout as L
from store_format.commitlog import ReadOnlyMap
from store_format.recovery import describe_damaged_record

from .base import AuditContext, CheckResult, driver_findings, driver_metrics, findings


def run(ctx: AuditContext) -> CheckResult:
    res = CheckResult()
    rows, mrows = [], []
    for name, p in ctx.recovery.items():
        if not p.will_start:
            for problem, file in zip(p.start_problems, p.start_problem_files):
                rows.append(dict(check="recovery.broker_will_not_start", severity="error", broker=name,
                                 file=file.removeprefix("commitlog/") if file else None,
                                 message=f"the broker will refuse to start: {problem}"))
        if p.mode == "abnormal":
            what = "abort file" if p.abort_kind in (None, "file") else f"abort ({p.abort_kind})"
            rows.append(dict(check="recovery.abnormal", severity="info", broker=name, file="abort",
                             physical_offset=p.redispatch_from,
                             message=f"{what} present: abnormal recovery from segment {p.start_segment}, "
                                     f"re-dispatching from physical offset {p.redispatch_from}"))
        lost = p.messages_lost
        if lost or p.unframed_dropped:
            first = min([o for o, _ in p.dropped_messages] + [o for o, *_ in p.damaged_dropped]
                        + [o for o, _ in p.unframed_dropped])
            unframed = (f", and {p.unframed_bytes_lost} byte(s) in {len(p.unframed_dropped)} run(s) no walk could "
                        "frame (records whose headers are gone: at least one per run, not counted)"
                        if p.unframed_dropped else "")
            rows.append(dict(check="recovery.truncation", severity="error", broker=name, file=p.stop_segment,
                             file_position=p.stop_position, physical_offset=p.max_physical_offset,
                             message=f"recovery stops at {p.max_physical_offset} ({p.stop_kind}) and drops {lost} "
                                     f"message(s) from {first} on: {p.damaged_messages_lost} damaged, "
                                     f"{p.intact_messages_lost} intact{unframed}",
                             details={"messages_lost": lost, "damaged_messages_lost": p.damaged_messages_lost,
                                      "intact_messages_lost": p.intact_messages_lost,
                                      "unframed_bytes_lost": p.unframed_bytes_lost,
                                      "unframed_runs_lost": len(p.unframed_dropped), "stop_kind": p.stop_kind,
                                      "bytes_lost": p.bytes_lost}))
        for seg in p.segments_deleted:
            rows.append(dict(check="recovery.segment_deleted", severity="warning", broker=name, file=seg,
                             message=f"segment {seg} lies wholly past the recovered end and will be deleted"))
        for (topic, qid), q in sorted(p.cq_truncation.items()):
            rows.append(dict(check="recovery.cq_truncated", severity="warning", broker=name, topic=topic,
                             queue_id=qid, queue_offset=q.first_dropped, physical_offset=p.max_physical_offset,
                             message=f"{q.dropped} consume-queue unit(s) of {topic}/{qid} from queue offset "
                                     f"{q.first_dropped} on will be dropped: {_cq_why(q, p.max_physical_offset)}",
                             details={"units": q.dropped, "reason": q.reason, "recovered_queue_end":
                                      q.end // L.CQ_STORE_UNIT_SIZE}))
        for f in p.index_files_deleted:
            rows.append(dict(check="recovery.index_rebuilt", severity="info", broker=name, file=f"index/{f}",
                             message=f"index file {f} is newer than the checkpoint's indexMsgTimestamp: abnormal "
                                     "recovery deletes it and rebuilds it by re-dispatch"))
        for note in p.notes:
            rows.append(dict(check="recovery.note", severity="warning", broker=name, message=note))
        rows += _damaged_lost(ctx, name, p)
        mrows += [dict(broker=name, scope="broker", metric="messages_lost", value=float(lost)),
                  dict(broker=name, scope="broker", metric="damaged_messages_lost",
                       value=float(p.damaged_messages_lost)),
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
        {"state": F.lit("intact"), "uniq_key": F.col("uniq_key"), "key": F.col("uniq_key"),
         "msg_id": F.col("msg_id")}))
    return res


def _cq_why(q, recovered_end: int) -> str:
    """Why recovery drops a queue's units (store_format.recovery.QueueRecovery.reason)."""
    if q.reason == "no_commitlog":
        return "the store has no commitlog segment, so recovery destroys every consume queue (destroyLogics)"
    if q.reason == "past_recovered_end":
        return (f"the first points at or past the recovered commitlog end {recovered_end}, and truncateDirtyLogicFiles "
                "cuts the queue there")
    at = q.recover_end // L.CQ_STORE_UNIT_SIZE
    unit = (f"offset {q.invalid_unit[0]}, size {q.invalid_unit[1]}" if q.invalid_unit else "all zeros")
    return (f"ConsumeQueue.recover stops at the unit at queue offset {at} ({unit}: not offset >= 0 and size > 0) "
            "and cuts the queue there")


def _damaged_lost(ctx: AuditContext, name: str, p) -> list[dict]:
    """``recovery.message_lost`` for each damaged record the broker drops (store_format.recovery.lost_records:
    a stop whose header still frames a message), named from its header (describe_damaged_record)."""
    segments = ctx.store_objects[name].segments
    rows = []
    for offset, size, kind in p.damaged_dropped:
        seg = next((s for s in segments if s.base_offset <= offset < s.base_offset + s.length), None)
        if seg is None:
            continue
        pos = offset - seg.base_offset
        with ReadOnlyMap(seg.path) as m:
            about = describe_damaged_record(m.buf, pos)
        where = "at the recovered end" if offset == p.max_physical_offset else "past the recovered end"
        of = (f"{about['topic']}/{about['queue_id']}" if about["topic"] is not None
              else f"queue {about['queue_id']} of an unreadable topic")
        rows.append(dict(check="recovery.message_lost", severity="warning", broker=name, file=seg.name,
                         file_position=pos, physical_offset=offset, topic=about["topic"], queue_id=about["queue_id"],
                         queue_offset=about["queue_offset"],
                         message=f"damaged message ({kind}) of {of} at queue offset {about['queue_offset']} lies "
                                 f"{where}: the broker will drop it",
                         details={"state": "damaged", "damage": kind, "declared_size": size,
                                  "uniq_key": about["uniq_key"], "key": about["uniq_key"]}))
    return rows


def summary(ctx: AuditContext) -> dict:
    """The summary.json ``recovery`` object per broker."""
    out = {}
    for name, p in ctx.recovery.items():
        out[name] = {
            "mode": p.mode, "broker_will_start": p.will_start, "start_problems": p.start_problems,
            "start_segment": p.start_segment, "predicted_max_physical_offset": p.max_physical_offset,
            "stop_segment": p.stop_segment, "stop_position": p.stop_position, "stop_kind": p.stop_kind,
            "messages_lost": p.messages_lost, "damaged_messages_lost": p.damaged_messages_lost,
            "intact_messages_lost": p.intact_messages_lost, "unframed_bytes_lost": p.unframed_bytes_lost,
            "unframed_runs_lost": len(p.unframed_dropped), "bytes_lost": p.bytes_lost,
            "segments_deleted": p.segments_deleted, "max_cq_physical_offset": p.max_cq_physical_offset,
            "cq_units_truncated": sum(p.cq_units_truncated.values()),
            "index_files_deleted": p.index_files_deleted, "redispatch_from": p.redispatch_from, "notes": p.notes,
        }
    return out
