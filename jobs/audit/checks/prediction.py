"""The broker's recovery predicted to the last record: store_format.recovery decides where the recovery walk ends
(from the survey's walks: jobs/audit/context.py), and this always-run family completes the prediction from the
scan, whatever checks are chosen: the records past the recovered end (intact messages, damaged records that still
frame one, bytes no frame covers) and what recovery leaves of each consume queue.  The summary's ``recovery``
object per broker is this prediction; the ``recovery`` family's findings are read from it.
"""
from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from store_format.queues import group_queues

from ..contract import Family, SummaryView

LOST = pa.schema([("broker", pa.string()), ("state", pa.string()), ("physical_offset", pa.int64()),
                  ("size", pa.int64()), ("damage", pa.string())])


def lost_records_in(rc, out) -> None:
    """The records past the recovered end (store_format.recovery.lost_records), for the broker's count: intact
    messages, damaged records that still frame one, bytes no frame covers."""
    from store_format.commitlog import KIND_CORRUPT, KIND_MESSAGE
    from store_format.recovery import lost_records

    f, it = rc.facts, rc.items
    end = f.recovered_end
    phys = it.positions + rc.base
    stop = f.recovery_stop if f.recovery_stop is not None and rc.lo <= f.recovery_stop.physical_offset < rc.hi \
        else None
    message = it.kinds == KIND_MESSAGE
    other = ~message & ((phys >= end) | ((it.kinds == KIND_CORRUPT) & (phys + it.sizes > end)))
    intact = np.flatnonzero(message & (phys >= end))
    if not len(intact) and not other.any() and stop is None:
        return
    lost = lost_records(it.take(other), end, stop)
    rows = {"state": [], "physical_offset": [], "size": [], "damage": []}
    for state, records in (("damaged", lost.damaged), ("unframed", lost.unframed)):
        for r in records:
            rows["state"].append(state)
            rows["physical_offset"].append(r[0])
            rows["size"].append(r[1])
            rows["damage"].append(r[2] if state == "damaged" else None)
    n = len(intact) + len(rows["state"])
    out.partial("prediction.lost", pa.table({
        "broker": pa.repeat(pa.scalar(rc.broker), n),
        "state": pa.concat_arrays([pa.repeat(pa.scalar("intact"), len(intact)), pa.array(rows["state"], pa.string())]),
        "physical_offset": pa.concat_arrays([pa.array(phys[intact]), pa.array(rows["physical_offset"], pa.int64())]),
        "size": pa.concat_arrays([pa.array(it.sizes[intact].astype(np.int64)), pa.array(rows["size"], pa.int64())]),
        "damage": pa.concat_arrays([pa.nulls(len(intact), pa.string()), pa.array(rows["damage"], pa.string())])},
        schema=LOST))


QUEUES = pa.schema([("broker", pa.string()), ("topic", pa.string()), ("queue_id", pa.int32()),
                    ("recover_end", pa.int64()), ("max_physic_offset", pa.int64()), ("end", pa.int64()),
                    ("dropped", pa.int64()), ("first_dropped", pa.int64()), ("reason", pa.string()),
                    ("refused_offset", pa.int64()), ("refused_size", pa.int64())])


def queue_recovery_in(facts, parts, out) -> None:
    """What recovery leaves of each queue of ``parts`` (store_format.recovery.finish_queue, with the broker-wide
    decision to truncate), for the queues that lose units."""
    from store_format.recovery import finish_queue

    rows = []
    surveyed = {r.loc.path: r.surveyed for r in facts.routed.get("consumequeue", ())}
    for queue in group_queues(parts):
        known = surveyed.get(queue.files[0].loc.path) if len(queue.files) == 1 else None  # routes.SurveyedUnits
        if facts.has_commitlog and queue.keeps_every_unit(facts.recovered_end if facts.truncate_queues else None, (
                known.accepted, known.max_physical_offset) if known is not None else None):
            continue  # no reader made (nor the file read again): a broker of 40,000 queues has one file each
        units = queue.unit_reader()  # each file read once for both steps
        start = queue.recover(units)
        if start is None:
            continue  # a backend whose recovery is not modelled
        topic, qid = queue.key
        q = finish_queue(topic, qid, units.files, start, facts.recovered_end, facts.has_commitlog,
                         facts.truncate_queues, units)
        if q.dropped:
            rows.append({"broker": facts.broker, "topic": topic, "queue_id": qid, "recover_end": q.recover_end,
                         "max_physic_offset": q.max_physic_offset, "end": q.end, "dropped": q.dropped,
                         "first_dropped": q.first_dropped, "reason": q.reason,
                         "refused_offset": q.invalid_unit[0] if q.invalid_unit else None,
                         "refused_size": q.invalid_unit[1] if q.invalid_unit else None})
    if rows:
        out.partial("prediction.queues", pa.Table.from_pylist(rows, schema=QUEUES))


def lost_from_scan(ctx) -> None:
    """Give each broker's prediction what its scan found: the records past the recovered end (predict_recovery was
    told not to enumerate them: ``enumerate_lost=False``) and the file queues recovery cuts (``queue_starts``),
    beside the database queue store's queues predict_recovery cut itself (from its offset rows)."""
    from store_format.recovery import QueueRecovery

    queues = ctx.partial("prediction.queues", QUEUES).to_pylist()
    t = ctx.partial("prediction.lost", LOST).sort_by([("broker", "ascending"), ("physical_offset", "ascending")])
    for name, p in ctx.recovery.items():
        p.cq_truncation.update({(q["topic"], q["queue_id"]): QueueRecovery(
            q["topic"], q["queue_id"], q["recover_end"], q["max_physic_offset"], q["end"], q["dropped"],
            q["first_dropped"], q["reason"], (q["refused_offset"], q["refused_size"])
            if q["refused_offset"] is not None else None) for q in queues if q["broker"] == name})
        p.cq_units_truncated = {k: q.dropped for k, q in p.cq_truncation.items()}
        mine = t.filter(pc.equal(t.column("broker"), name)).to_pylist()
        p.dropped_messages = [(r["physical_offset"], r["size"]) for r in mine if r["state"] == "intact"]
        p.damaged_dropped = [(r["physical_offset"], r["size"], r["damage"]) for r in mine if r["state"] == "damaged"]
        p.unframed_dropped = [(r["physical_offset"], r["size"]) for r in mine if r["state"] == "unframed"]
        p.lost_enumerated = True


def summary(ctx) -> dict:
    """The summary.json ``recovery`` object per broker (null where it could not be predicted: a finding says
    why)."""
    out = {name: {"recovery": None} for name in ctx.plans}
    for name, p in ctx.recovery.items():
        out[name] = {"recovery": {
            "mode": p.mode, "broker_will_start": p.will_start, "start_problems": p.start_problems,
            "start_segment": p.start_segment, "predicted_max_physical_offset": p.max_physical_offset,
            "stop_segment": p.stop_segment, "stop_position": p.stop_position, "stop_kind": p.stop_kind,
            "messages_lost": p.messages_lost, "damaged_messages_lost": p.damaged_messages_lost,
            "intact_messages_lost": p.intact_messages_lost, "unframed_bytes_lost": p.unframed_bytes_lost,
            "unframed_runs_lost": len(p.unframed_dropped), "bytes_lost": p.bytes_lost,
            "segments_deleted": p.segments_deleted, "max_cq_physical_offset": p.max_cq_physical_offset,
            "cq_units_truncated": sum(p.cq_units_truncated.values()),
            "index_files_deleted": p.index_files_deleted, "redispatch_from": p.redispatch_from, "notes": p.notes,
        }}
    return out


def _section_row(broker: dict) -> list:
    """A broker's row of the report's recovery section; whether it starts is the verdict's (the commitlog's and
    every other store's blockers)."""
    r = broker["recovery"]
    if r is None:
        return [broker["name"], "unknown"] + [None] * 8
    v = broker.get("verdict") or {}
    starts, problems = v.get("will_start", r["broker_will_start"]), v.get("why_not", r["start_problems"])
    return [broker["name"], r["mode"], "yes" if starts else "NO", r["predicted_max_physical_offset"], r["stop_segment"],
            r["stop_kind"], r["messages_lost"], r["cq_units_truncated"], len(r["index_files_deleted"]),
            "; ".join(problems)]


SECTION = SummaryView("Recovery prediction", 10, (
    ("broker", "text"), ("mode", "text"), ("will start", "text"), ("recovered end", "number"),
    ("stop segment", "text"), ("stop reason", "text"), ("messages lost", "number"), ("CQ units truncated", "number"),
    ("index files rebuilt", "number"), ("start problems", "text")), _section_row, always=True)

FAMILY = Family(
    "prediction", "the broker's recovery, completed from the scan: the records it drops and the queues it cuts",
    always=True, in_range=lost_records_in, in_files={"consumequeue": queue_recovery_in}, after_scan=lost_from_scan,
    summary=summary, sections=(SECTION,), emits={"prediction.lost": LOST, "prediction.queues": QUEUES},
    reads=("prediction.lost", "prediction.queues"))
