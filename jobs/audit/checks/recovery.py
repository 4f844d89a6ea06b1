"""What the broker will do with this dump when it starts (store_format.recovery's model of RocketMQ 4.9.x).

Checks: ``recovery.broker_will_not_start`` (a segment of the wrong length fails ``load()``),
``recovery.truncation`` (one error per broker: the recovered end lies before the last well-formed record),
``recovery.message_lost`` (each message the truncation drops), ``recovery.segment_deleted``,
``recovery.cq_truncated`` (consume-queue units at or past the recovered end), ``recovery.index_rebuilt``
(abnormal recovery deletes and rebuilds newer index files), ``recovery.abnormal`` (the abort file is there:
the broker did not shut down cleanly), ``recovery.note``.
"""
from __future__ import annotations

import numpy as np

from ..findings import Severity, check, concat_findings, finding_rows, finding_table, metric_table
from . import FamilyResult

check("recovery.broker_will_not_start", Severity.ERROR, "the broker will refuse to start: {problem}")
check("recovery.abnormal", Severity.INFO,
      "abort file present: abnormal recovery from segment {start_segment}, re-dispatching from physical offset "
      "{redispatch_from}")
check("recovery.truncation", Severity.ERROR,
      "recovery stops at {physical_offset} ({stop_kind}) and drops {lost} well-formed message(s) from {first} on")
check("recovery.segment_deleted", Severity.WARNING,
      "segment {file} lies wholly past the recovered end and will be deleted")
check("recovery.cq_truncated", Severity.WARNING,
      "{units} consume-queue unit(s) of {topic}/{queue_id} point at or past the recovered end and will be truncated")
check("recovery.index_rebuilt", Severity.INFO,
      "index file {name} is newer than the checkpoint's indexMsgTimestamp: abnormal recovery deletes it and rebuilds "
      "it by re-dispatch")
check("recovery.note", Severity.WARNING, "{note}")
check("recovery.message_lost", Severity.WARNING,
      "message of {topic}/{queue_id} at queue offset {queue_offset} lies past the recovered end: the broker will drop "
      "it")


def in_range(rc, out) -> None:
    m = rc.messages
    lost = np.flatnonzero(~rc.column("kept"))
    if not len(lost):
        return
    ids = rc.decode(lost, ("msg_id",)).column("msg_id")
    t = m.take(lost)
    uniq = t.column("uniq_key")
    out.finding(finding_table(
        "recovery.message_lost", len(lost), broker=rc.broker, file=rc.segment, file_position=t.column("file_position"),
        physical_offset=t.column("physical_offset"), topic=t.column("topic"), queue_id=t.column("queue_id"),
        queue_offset=t.column("queue_offset"), details={"uniq_key": uniq, "key": uniq, "msg_id": ids}))


def on_driver(ctx) -> FamilyResult:
    res = FamilyResult()
    rows: dict[str, list] = {}

    def add(check_id, **row):
        rows.setdefault(check_id, []).append(row)

    mrows = []
    for name, p in ctx.recovery.items():
        if not p.will_start:
            for problem in p.start_problems:
                add("recovery.broker_will_not_start", broker=name,
                    file=problem.split()[1] if problem.startswith("segment ") else None, values={"problem": problem})
        if p.mode == "abnormal":
            add("recovery.abnormal", broker=name, file="abort", physical_offset=p.redispatch_from,
                values={"start_segment": p.start_segment, "redispatch_from": p.redispatch_from})
        lost = len(p.dropped_messages)
        if lost:
            first = min(o for o, _ in p.dropped_messages)
            add("recovery.truncation", broker=name, file=p.stop_segment, file_position=p.stop_position,
                physical_offset=p.max_physical_offset,
                values={"stop_kind": p.stop_kind, "lost": lost, "first": first},
                details={"messages_lost": lost, "stop_kind": p.stop_kind,
                         "bytes_lost": sum(s for _, s in p.dropped_messages)})
        for seg in p.segments_deleted:
            add("recovery.segment_deleted", broker=name, file=seg)
        for (topic, qid), n in sorted(p.cq_units_truncated.items()):
            add("recovery.cq_truncated", broker=name, topic=topic, queue_id=qid, physical_offset=p.max_physical_offset,
                values={"units": n}, details={"units": n})
        for f in p.index_files_deleted:
            add("recovery.index_rebuilt", broker=name, file=f"index/{f}", values={"name": f})
        for note in p.notes:
            add("recovery.note", broker=name, values={"note": note})
        mrows.append((name, float(lost), float(p.max_physical_offset)))
    res.findings.append(concat_findings([finding_rows(c, r) for c, r in rows.items()]))
    if mrows:
        res.metrics.append(metric_table("broker", {"messages_lost": [r[1] for r in mrows],
                                                   "predicted_max_physical_offset": [r[2] for r in mrows]},
                                        broker=[r[0] for r in mrows]))
    return res


def summary(ctx) -> dict:
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
