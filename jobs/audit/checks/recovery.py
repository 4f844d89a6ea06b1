"""What the broker will do with this dump when it starts (store_format.recovery's model of RocketMQ 4.9.x).

Checks: ``recovery.broker_will_not_start`` (a file the broker loads at start fails its load, in the order it meets
them: a config file and its ``.bak`` that both fail ``ConfigManager.load``; ``lock`` a folder; an entry of a
MappedFileQueue folder -- ``commitlog/``, each consume queue, (5.x) each batch consume queue and ``timerlog/`` --
that is not a file of the folder's file size with a numeric name, by the rules of the RocketMQ that wrote the store;
(5.x) a topic whose queue type topics.json contradicts, ``config/timercheck`` or an ``index/`` entry the broker
cannot open, ``config/timermetrics`` and its ``.bak`` both failing; ``checkpoint`` a folder:
store_format.recovery's model of the load),
``recovery.truncation`` (one error per broker: recovery drops records: messages_lost = the damaged records
that still frame a message (damaged_messages_lost) + the intact messages past the recovered end
(intact_messages_lost), plus unframed_bytes_lost, bytes no walk could frame; store_format.recovery.lost_records),
``recovery.message_lost`` (each message the broker drops: ``details.state`` intact (a well-formed record past the
recovered end: a message of the salvage walk the recovered end does not keep) or damaged (``details.damage`` = its
stop kind, named from its header on the driver)), ``recovery.segment_deleted``, ``recovery.cq_truncated`` (per
queue, the units recovery drops: from the first unit ConsumeQueue.recover refuses, or the first at or past the
recovered end that truncateDirtyLogicFiles cuts at, every later one), ``recovery.index_rebuilt`` (abnormal
recovery deletes and rebuilds newer index files), ``recovery.cq_rebuilt`` (a consume-queue database with no row at
all, what a crash leaves: recovery re-dispatches the CommitLog to rebuild every queue), ``recovery.abnormal`` (the
abort file is there: the broker did not shut down cleanly), ``recovery.note``.
"""
from __future__ import annotations

import json

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from runtime.display import plural
from store_format import layout as L

from ..findings import Consequence, Severity, check, concat_findings, finding_rows, finding_table, metric_table
from .. import resend
from ..contract import Family, FamilyResult

check("recovery.broker_will_not_start", Severity.ERROR, "the broker will refuse to start: {problem}",
      consequence=Consequence.WILL_NOT_START, roles=("start_blocker",),
      action="Do what the report's first screen (and the terminal) says first: it names the file or record and "
             "gives the commands, as they run pasted -- move a stray file out of the folder or extend a short file "
             "(`truncate -s`) to the folder's file size, restore a config file from a good copy (keep a copy of "
             "each); for a record whose LMQ dispatch list stalls the reput, copy it and the records after it "
             "out (`rocketmq-forensics extract`), move `abort` out of the store, start, then re-send them.")
check("recovery.abnormal", Severity.INFO,
      "{what} present: abnormal recovery from segment {start_segment}, re-dispatching from physical offset "
      "{redispatch_from}",
      consequence=Consequence.COSMETIC,
      action="Expected after a crash; look at the other recovery findings for what it costs.")
check("recovery.truncation", Severity.ERROR,
      "recovery stops at {physical_offset} ({stop_kind}) and drops {lost} message(s) from {first} on: {damaged} "
      "damaged, {intact} intact[, and {unframed_bytes} byte(s) in {unframed_runs} run(s) no walk could frame "
      "(records whose headers are gone: at least one per run, not counted)]",
      consequence=Consequence.DATA_LOST, roles=("cut",),
      action="When intact messages lie after the cut, copy them out before the restart overwrites them "
             "(`rocketmq-forensics extract --walk salvage --physical-offsets` from the first of them, the command the "
             "report's first screen gives; or `rocketmq-forensics replay --repair` for a new store) and re-send them "
             "after it; the damaged ones only their producers can re-send.")
check("recovery.segment_deleted", Severity.WARNING,
      "segment {file} lies wholly past the recovered end and will be deleted",
      consequence=Consequence.DATA_AT_RISK, group="broker",
      action="Copy the segments away before starting the broker if they hold messages you need (the segments "
             "table says which hold any).")
check("recovery.cq_truncated", Severity.WARNING,
      "{units} consume-queue unit(s) of {topic}/{queue_id} from queue offset {queue_offset} on will be dropped: {why}",
      consequence=Consequence.CONSUMERS_AFFECTED, group="broker",
      action="Consumers' offsets above the new end will be corrected by the broker; expect re-consumption or skips "
             "on that queue.")
check("recovery.cq_rebuilt", Severity.WARNING,
      "the consume queue (backend {backend}) holds no row (its writes skip the write-ahead log, so a crash before a "
      "flush loses them all): the broker's {mode} recovery rebuilds every queue by re-dispatching the CommitLog "
      "from physical offset {from_offset} (segment {start_segment}) to {end_offset}, {bytes} byte(s), before it "
      "serves[; {skipped}][; {aged}][; {above}]",
      consequence=Consequence.CONSUMERS_AFFECTED, group="broker",
      action="Expect a long start (the whole CommitLog is dispatched again); nothing is lost and consumers' offsets "
             "stay valid, as every unit is rebuilt at its record's own queue offset.  If the finding says a normal "
             "recovery skips the record at physical offset 0, create an empty `abort` file in the store first: the "
             "abnormal recovery re-dispatches that record too.")
check("recovery.units_unserved", Severity.ERROR,
      "{messages} kept message(s) of {topic}/{queue_id} from queue offset {queue_offset} on will no longer be served "
      "after the restart: {why}",
      consequence=Consequence.CONSUMERS_AFFECTED, group="queue",
      action="Copy the messages out before the restart (`rocketmq-forensics extract --topic T --queue Q "
             "--queue-offsets A..B`, the command the report's first screen gives) and re-send them after it: the "
             "broker keeps their records but no consumer receives them, and new messages overwrite their units.")
check("recovery.index_rebuilt", Severity.INFO,
      "index file {name} is newer than the checkpoint's indexMsgTimestamp: abnormal recovery deletes it and rebuilds "
      "it by re-dispatch",
      consequence=Consequence.QUERIES_WRONG, group="broker",
      action="Nothing; key lookups come back once the broker has re-dispatched.")
check("recovery.note", Severity.WARNING, "{note}",
      consequence=Consequence.DATA_AT_RISK, group="broker",
      action="Read the message; it explains itself.  Remove an `abort` folder once the broker has recovered.")
check("recovery.message_lost", Severity.ERROR,
      "[{damaged_prefix}]message [({damage}) ]of {queue_text} at queue offset {queue_offset} lies {where}: the broker "
      "will drop it",
      consequence=Consequence.DATA_LOST, group="broker", roles=("lost_after_cut",),
      action="Re-send these messages after the restart: the report's \"Messages to re-send\" table and `tables/resend` "
             "list them with the commands that extract them.")


def in_range(rc, out) -> None:
    m = rc.messages
    lost = np.flatnonzero(~rc.column("kept"))
    if not len(lost):
        return
    ids = rc.decode(lost, ("msg_id",)).column("msg_id")
    t = m.take(lost)
    uniq = t.column("uniq_key")
    queue_text = pc.binary_join_element_wise(t.column("topic"), pc.cast(t.column("queue_id"), pa.string()), "/")
    out.finding(finding_table(
        "recovery.message_lost", len(lost), broker=rc.broker, file=t.column("segment"), file_position=t.column("file_position"),
        physical_offset=t.column("physical_offset"), topic=t.column("topic"), queue_id=t.column("queue_id"),
        queue_offset=t.column("queue_offset"),
        values={"damaged_prefix": None, "damage": None, "queue_text": queue_text, "where": "past the recovered end"},
        details={"state": "intact", "uniq_key": uniq, "key": uniq, "msg_id": ids}))
    out.table(resend.NAME, resend.message_rows(rc.broker, "dropped", t))


def on_driver(ctx) -> FamilyResult:
    res = FamilyResult()
    rows: dict[str, list] = {}

    def add(check_id, **row):
        rows.setdefault(check_id, []).append(row)

    mrows = []
    for name, p in ctx.recovery.items():
        if not p.will_start:
            for problem, file in zip(p.start_problems, p.start_problem_files):
                add("recovery.broker_will_not_start", broker=name,
                    file=file.removeprefix("commitlog/") if file else None, values={"problem": problem})
        if p.mode == "abnormal":
            what = "abort file" if p.abort_kind in (None, "file") else f"abort ({p.abort_kind})"
            add("recovery.abnormal", broker=name, file="abort", physical_offset=p.redispatch_from,
                values={"what": what, "start_segment": p.start_segment, "redispatch_from": p.redispatch_from})
        lost = p.messages_lost
        if lost or p.unframed_dropped:
            first = min([o for o, _ in p.dropped_messages] + [o for o, *_ in p.damaged_dropped]
                        + [o for o, _ in p.unframed_dropped])
            runs = len(p.unframed_dropped)
            add("recovery.truncation", broker=name, file=p.stop_segment, file_position=p.stop_position,
                physical_offset=p.max_physical_offset,
                values={"stop_kind": p.stop_kind, "lost": lost, "first": first, "damaged": p.damaged_messages_lost,
                        "intact": p.intact_messages_lost, "unframed_bytes": p.unframed_bytes_lost if runs else None,
                        "unframed_runs": runs if runs else None},
                details={"messages_lost": lost, "damaged_messages_lost": p.damaged_messages_lost,
                         "intact_messages_lost": p.intact_messages_lost, "unframed_bytes_lost": p.unframed_bytes_lost,
                         "unframed_runs_lost": runs, "stop_kind": p.stop_kind, "bytes_lost": p.bytes_lost})
        for seg in p.segments_deleted:
            add("recovery.segment_deleted", broker=name, file=seg)
        for (topic, qid), q in sorted(p.cq_truncation.items()):
            add("recovery.cq_truncated", broker=name, topic=topic, queue_id=qid, queue_offset=q.first_dropped,
                physical_offset=p.max_physical_offset, values={"units": q.dropped, "why": _cq_why(q, p.max_physical_offset)},
                details={"units": q.dropped, "reason": q.reason, "recovered_queue_end": q.end // L.CQ_STORE_UNIT_SIZE})
        for u in p.units_unserved:
            add("recovery.units_unserved", broker=name, topic=u.topic, queue_id=u.queue_id,
                queue_offset=u.queue_offsets[0], physical_offset=u.physical_offsets[0],
                values={"messages": u.messages, "why": u.why(p.max_physical_offset)},
                details={"messages": u.messages, "cause": u.cause, "served_max_offset": u.served_max,
                         "last_queue_offset": u.queue_offsets[-1]})
            ctx.resend_tables.append(resend.unserved_rows(name, u.topic, u.queue_id, u.queue_offsets,
                                                          u.physical_offsets))
        r = p.queue_rebuild
        if r is not None:
            above = _above_rebuilt_max(ctx, name, r)
            add("recovery.cq_rebuilt", broker=name, file="consumequeue", physical_offset=r.from_offset,
                values={"backend": r.backend, "mode": r.mode,
                        "from_offset": r.from_offset, "start_segment": r.start_segment, "end_offset": r.end_offset,
                        "bytes": r.bytes, "skipped": _rebuild_skips(r), "aged": _rebuild_aged(r),
                        "above": _above_words(above)},
                details={"bytes": r.bytes, "first_record_skipped": r.first_record_skipped,
                         "commitlog_min_offset": r.commitlog_min_offset,
                         "groups_above_max": json.dumps([{"group": g, "topic": t, "queue_id": q, "committed": o,
                                                          "max_offset": m} for g, t, q, o, m in above])
                         if above else None})
        for f in p.index_files_deleted:
            add("recovery.index_rebuilt", broker=name, file=f"index/{f}", values={"name": f})
        for note in p.notes:
            add("recovery.note", broker=name, values={"note": note})
        for row in _damaged_lost(ctx, name, p):
            add("recovery.message_lost", **row)
        mrows.append((name, float(lost), float(p.damaged_messages_lost), float(p.max_physical_offset)))
    res.findings.append(concat_findings([finding_rows(c, r) for c, r in rows.items()]))
    if mrows:
        res.metrics.append(metric_table("broker", {"messages_lost": [r[1] for r in mrows],
                                                   "damaged_messages_lost": [r[2] for r in mrows],
                                                   "predicted_max_physical_offset": [r[3] for r in mrows]},
                                        broker=[r[0] for r in mrows]))
    return res


def _above_rebuilt_max(ctx, name: str, r) -> list[tuple]:
    """(group, topic, queue id, committed offset, the queue's max offset after the rebuild) of every committed
    offset (config/consumerOffset.json) above its queue's max once the broker has rebuilt it (the recovery model's
    ``r.queue_ends``: store_format.recovery.rebuilt_queue_ends; 0 for a queue with no record re-dispatched).  A pull
    above the max is OFFSET_OVERFLOW_BADLY and the broker answers the max as the next offset
    (DefaultMessageStore.getMessage, 5.3.3 DefaultMessageStore.java:828-839, nextOffsetCorrection:1729): the group
    is set back to it."""
    out = []
    for t in ctx.committed_offset_batches(units=False):  # a batch at a time where the file was spilled
        t = t.filter(pc.equal(t.column("broker"), name))
        for x in t.select(["group", "topic", "queue_id", "offset"]).to_pylist():
            top = r.queue_ends.get((x["topic"], x["queue_id"]), 0)
            if x["offset"] > top:
                out.append((x["group"], x["topic"], x["queue_id"], x["offset"], top))
    return sorted(out, key=lambda g: (g[1], g[2], g[0]))


def _above_words(above: list[tuple]) -> str | None:
    if not above:
        return None
    shown = ", ".join(f"{g} on {t}/{q} (committed {o}, max {m})" for g, t, q, o, m in above[:5])
    more = f" and {len(above) - 5} more" if len(above) > 5 else ""
    return (f"{plural(len(above), 'committed offset')} end above a rebuilt queue's max offset: {shown}{more}; the "
            "broker answers a pull there with OFFSET_OVERFLOW_BADLY and sets the group back to the max, so it "
            "re-consumes the new messages written from there")


def _rebuild_skips(r) -> str | None:
    """What a normal recovery of an empty queue store misses (store_format.recovery.QueueRebuild)."""
    if not r.first_record_skipped:
        return None
    return ("recoverNormally dispatches only records past the checkpoint, 0 here, so the message at physical offset 0 "
            "gets no unit and its consumers never receive it (an abort file makes the recovery abnormal, which "
            "dispatches it)")


def _rebuild_aged(r) -> str | None:
    """What a rebuild cannot restore when the CommitLog's first segments are gone."""
    if r.commitlog_min_offset <= 0:
        return None
    return (f"the CommitLog now starts at {r.commitlog_min_offset}: units of older records are not rebuilt, each "
            "queue's min offset becomes its first record left, and a queue with no record left gets no max offset, "
            "so its new messages restart at queue offset 0, below its consumers' committed offsets")


def _cq_why(q, recovered_end: int) -> str:
    """Why recovery drops a queue's units (store_format.recovery.QueueRecovery.reason)."""
    if q.reason == "max_row_corrected":
        return (f"the queue store's checkpoint lies past the recovered commitlog end {recovered_end}, and its "
                f"truncateDirty moves the queue's max offset back to {q.end // L.CQ_STORE_UNIT_SIZE} (the keys past "
                "it stay until new messages overwrite them)")
    if q.reason == "no_commitlog":
        return "the store has no commitlog segment, so recovery destroys every consume queue (destroyLogics)"
    if q.reason == "past_recovered_end":
        return (f"the first points at or past the recovered commitlog end {recovered_end}, and truncateDirtyLogicFiles "
                "cuts the queue there")
    at = q.recover_end // L.CQ_STORE_UNIT_SIZE
    unit = (f"offset {q.invalid_unit[0]}, size {q.invalid_unit[1]}" if q.invalid_unit else "all zeros")
    return (f"ConsumeQueue.recover stops at the unit at queue offset {at} ({unit}: not offset >= 0 and size > 0) "
            "and cuts the queue there")


def _damaged_lost(ctx, name: str, p) -> list[dict]:
    """``recovery.message_lost`` for each damaged record the broker drops (store_format.recovery.lost_records:
    a stop whose header still frames a message), named from its header (describe_damaged_record)."""
    from store_format import fs
    from store_format.fs import ReadOnlyMap
    from store_format.recovery import describe_damaged_record

    segments = ctx.plans[name].store.segments
    rows = []
    for offset, size, kind in p.damaged_dropped:
        seg = next((s for s in segments if s.base_offset <= offset < s.base_offset + s.length), None)
        if seg is None:
            continue
        pos = offset - seg.base_offset
        if isinstance(seg.path, fs.StorePath):  # another file system: the record's declared bytes, not the segment
            size = int.from_bytes(seg.path.loc.read_range(pos, 4).rjust(4, b"\0"), "big", signed=True)
            about = describe_damaged_record(seg.path.loc.read_range(pos, min(seg.length - pos, max(size, 1024))), 0)
        else:
            with ReadOnlyMap(seg.path) as m:
                about = describe_damaged_record(m.buf, pos)
        if about["topic"] is None:  # the header cannot name it: the consume-queue unit pointing at it can
            about["topic"] = _topic_from_queue(ctx.plans[name].store, offset, about["queue_id"], about["queue_offset"])
        where = "at the recovered end" if offset == p.max_physical_offset else "past the recovered end"
        of = (f"{about['topic']}/{about['queue_id']}" if about["topic"] is not None
              else f"queue {about['queue_id']} of an unreadable topic")
        ctx.resend_damaged.append(resend.damaged_row(name, offset, about, kind))
        rows.append(dict(broker=name, file=seg.name, file_position=pos, physical_offset=offset, topic=about["topic"],
                         queue_id=about["queue_id"], queue_offset=about["queue_offset"],
                         values={"damaged_prefix": "damaged ", "damage": kind, "queue_text": of, "where": where},
                         details={"state": "damaged", "damage": kind, "declared_size": size,
                                  "uniq_key": about["uniq_key"], "key": about["uniq_key"]}))
    return rows


def _topic_from_queue(store, offset: int, queue_id, queue_offset) -> str | None:
    """The topic whose consume queue ``queue_id`` has, at ``queue_offset``, a unit pointing at physical ``offset``
    (the header's queue id and offset, which a damaged record often still has): the one topic that names it."""
    import struct

    from store_format import fs

    if queue_id is None or queue_offset is None or queue_offset < 0:
        return None
    at = queue_offset * L.CQ_STORE_UNIT_SIZE
    found = set()
    for (topic, qid), files in store.queues.items():
        if qid != queue_id:
            continue
        f = next((f for f in files if f.base_byte_offset <= at < f.base_byte_offset + f.length), None)
        if f is None or at - f.base_byte_offset + L.CQ_STORE_UNIT_SIZE > f.length:
            continue
        try:
            raw = fs.resolve(f.path).read_range(at - f.base_byte_offset, L.CQ_STORE_UNIT_SIZE)
            unit_offset = struct.unpack_from(L.CQ_UNIT_STRUCT, raw, 0)[0]
        except (OSError, ValueError, struct.error):  # an unreadable queue file names nothing
            continue
        if unit_offset == offset:
            found.add(topic)
    return found.pop() if len(found) == 1 else None


FAMILY = Family(
    "recovery", "what the broker will do at start: whether it starts, where it cuts, what it drops, deletes, rebuilds",
    in_range=in_range, on_driver=on_driver, rank=10, blockers_predicted=True,
    metrics={"messages_lost": "messages the predicted recovery drops, damaged and intact (broker)",
             "damaged_messages_lost": "of those, the damaged records that still frame a message (broker)",
             "predicted_max_physical_offset": "where the broker's recovery will end the commitlog (broker)"})
