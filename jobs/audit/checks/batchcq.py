"""CommitLog <-> BatchConsumeQueue (5.x, topics with ``queue.type=BatchCQ``): every dispatchable message of a batch
topic the broker keeps has exactly one 46-byte unit in ``batchconsumequeue/<topic>/<queue>/`` with its physical
offset, size, tagsCode and store time, covering ``batchSize`` logical offsets from ``msgBaseOffset``
(store-format-5x.md section 3: the record's INNER_BASE and INNER_NUM when it carries both, else its QUEUEOFFSET and
1); every unit points at such a message, and a queue's units cover its logical offsets without a gap.

Checks (errors unless noted): ``batchcq.missing_unit`` (a range of queue offsets per queue; the warning
``batchcq.not_yet_dispatched`` past every consume queue's end, where the broker's reput dispatches it at start),
``batchcq.wrong_queue``, ``batchcq.unit_mismatch`` (one per unit and field that is not what the dispatch writes),
``batchcq.duplicate_unit``, ``batchcq.unit_points_nowhere`` (warning when it points into a corrupt span: the damage is
the finding), ``batchcq.offset_gap`` (a unit whose msgBaseOffset is not where the previous unit's messages end),
``batchcq.corrupt_unit`` (a unit recovery stops at, a partial unit) and ``batchcq.file_problem`` (a file name that
is not 20 digits or a queue folder that is not a number, a length other than the queue's file size, a file missing
between two others).  The queues' bounds are rows of the consumequeue family's ``queues`` table.

Where each is decided: as for consume queues (jobs/audit/checks/consumequeue.py), a scan task joins the batch units
it owns with its messages by physical offset; a file task reads whole queues for what their files say alone; the
queue-offset ranges of missing units and units past the data's end are finished on the driver.  Run whatever
``--checks`` says, for every broker with batch topics (``applies``): the consumequeue family leaves their records to
it.
"""
from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from store_format import layout as L
from store_format.batchcq import KIND_END_MARKER, KIND_ENTRY, UNIT_SIZE, read_batch_unit_arrays
from store_format.lmq import parse_java_long
from store_format.errors import ErrorKind

from ..contract import Family, FamilyResult
from ..findings import Consequence, Severity, check, concat_findings, finding_rows, finding_table
from ..scan import IN_DAMAGE, MID_RECORD, OUTSIDE

DISPATCHED_TYPES = ("NOT", "COMMIT")
SHORT_MAX = 2**15 - 1

check("batchcq.missing_unit", Severity.ERROR,
      "{count} message(s) of batch topic {topic}/{queue_id} at queue offset(s) {span} have no batch consume-queue "
      "unit: consumers cannot see them",
      group="queue", consequence=Consequence.CONSUMERS_AFFECTED,
      action="Re-dispatch: move the damaged batchconsumequeue/ queue folder away and let the broker rebuild it (an "
             "abnormal start re-dispatches from the checkpoint), or extract the messages and re-send.")
check("batchcq.not_yet_dispatched", Severity.WARNING,
      "{count} message(s) of batch topic {topic}/{queue_id} at queue offset(s) {span} have no batch unit yet (the "
      "broker dispatches them at start)",
      group="queue", consequence=Consequence.COSMETIC,
      action="Nothing, unless the broker will not start.")
check("batchcq.wrong_queue", Severity.ERROR,
      "batch unit of {topic}/{queue_id} points at a message of {message_topic}/{message_queue_id}",
      group="queue", consequence=Consequence.CONSUMERS_AFFECTED,
      action="The queue file is corrupt or from another store: rebuild the queue.")
check("batchcq.unit_mismatch", Severity.ERROR,
      "batch unit's {field} is {unit_value}, the dispatch of the record it points at writes {record_value}",
      group="queue", consequence=Consequence.CONSUMERS_AFFECTED,
      action="Rebuild the queue; consumers of it may skip, repeat or misfilter messages.")
check("batchcq.duplicate_unit", Severity.ERROR, "{units} batch units point at the same record",
      group="queue", consequence=Consequence.CONSUMERS_AFFECTED,
      action="Rebuild the queue; make consumers idempotent for that key.")
check("batchcq.unit_points_nowhere", Severity.ERROR, "batch unit points {where}", also=(Severity.WARNING,),
      group="queue", consequence=Consequence.CONSUMERS_AFFECTED,
      action="Corrupt unit (or the log was cut after dispatch): rebuild the queue; into a corrupt span, see the "
             "integrity finding at that offset.")
check("batchcq.offset_gap", Severity.ERROR,
      "batch unit's messages start at queue offset {queue_offset}, the previous unit's end at {expected}: the "
      "queue's offsets {what}",
      group="queue", consequence=Consequence.CONSUMERS_AFFECTED,
      action="A unit is missing or repeated: rebuild the queue; consumers by offset skip or repeat those messages.")
check("batchcq.corrupt_unit", Severity.ERROR, "batch consume-queue {topic}/{queue_id} file {file}: {reason}",
      group="queue", consequence=Consequence.CONSUMERS_AFFECTED,
      action="Rebuild the queue from the log.")
check("batchcq.file_problem", Severity.ERROR, "batch consume-queue file {file} of {topic}/{queue_text}: {reason}",
      group="queue", consequence=Consequence.CONSUMERS_AFFECTED,
      action="Restore the file from a backup or slave, or rename it to its 20-digit offset; otherwise rebuild the "
             "queue from the log.")

UNIT_COLUMNS = [("topic", pa.string()), ("queue_id", pa.int32()), ("queue_offset", pa.int64()),
                ("physical_offset", pa.int64()), ("size", pa.int32()), ("file", pa.string()),
                ("file_position", pa.int64())]
LOOSE = pa.schema([("broker", pa.string())] + UNIT_COLUMNS)
MISSING = pa.schema([("broker", pa.string()), ("topic", pa.string()), ("queue_id", pa.int32()), ("pending", pa.bool_()),
                     ("queue_offset", pa.int64()), ("last_queue_offset", pa.int64()), ("physical_offset", pa.int64())])


ROUTE = L.BATCH_CQ_DIR  # the route of the batch consume queues (jobs/audit/routes.py: their part folder)


def in_range(rc, out) -> None:
    dispatch = rc.facts.dispatch
    if not dispatch.dispatches_to(ROUTE):
        return
    u, m = rc.routed(ROUTE), rc.messages
    if u.num_rows:
        at = rc.message_at(u.column("physical_offset").to_numpy())
        hit = at >= 0
        kept = np.zeros(len(at), bool)
        kept[hit] = rc.column("kept")[at[hit]]
        matched = np.flatnonzero(kept)
        if len(matched):
            _mismatches(rc, u, matched, at[matched], out)
        loose = np.flatnonzero(~hit)
        if len(loose):
            _loose(rc, u.take(loose), out)
        _duplicates(rc, u, out)
    if m.num_rows:
        want = rc.column("kept") & pc.is_in(m.column("tran_type"), pa.array(DISPATCHED_TYPES)).to_numpy(
            zero_copy_only=False) & dispatch.own_units_in(ROUTE, m.column("topic"))
        mphys = rc.column("physical_offset")
        has_unit = np.isin(mphys, u.column("physical_offset").to_numpy()) if u.num_rows else np.zeros(len(mphys), bool)
        rows = np.flatnonzero(want & ~has_unit)
        if len(rows):
            t = m.take(rows)
            phys = t.column("physical_offset")
            both, base, size = expected_batch(rc.decode(rows, ("properties",)).column("properties").to_pylist())
            first = np.where(both, base, t.column("queue_offset").to_numpy())
            out.partial("batchcq.missing", pa.table({
                "broker": pa.repeat(pa.scalar(rc.broker), len(rows)), "topic": t.column("topic"),
                "queue_id": t.column("queue_id"),
                "pending": pc.greater_equal(phys, pa.scalar(rc.facts.reput_from, pa.int64())),
                "queue_offset": pa.array(first), "last_queue_offset": pa.array(first + np.maximum(size, 1) - 1),
                "physical_offset": phys}, schema=MISSING))


def _positions(rc, u: pa.Table) -> dict:
    return dict(broker=rc.broker, file=u.column("file"), file_position=u.column("file_position"),
                physical_offset=u.column("physical_offset"), topic=u.column("topic"), queue_id=u.column("queue_id"),
                queue_offset=u.column("msg_base_offset"))


def expected_batch(properties: list) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """What ``CommitLog.setBatchSizeIfNeeded`` makes of each record's properties (a list of maps as key/value
    pairs): (has both INNER_NUM and INNER_BASE, msgBaseOffset, batchSize), where both parse
    (``Long.parseLong`` / ``Short.parseShort``); a record with only one of them, or neither, keeps its QUEUEOFFSET
    and 1 (the caller's)."""
    n = len(properties)
    both, base, size = np.zeros(n, bool), np.zeros(n, np.int64), np.ones(n, np.int64)
    for i, pairs in enumerate(properties):
        d = dict(pairs or ())
        if L.PROPERTY_INNER_NUM in d and L.PROPERTY_INNER_BASE in d:
            b, s = parse_java_long(d[L.PROPERTY_INNER_BASE]), parse_java_long(d[L.PROPERTY_INNER_NUM])
            if b is not None and s is not None and -SHORT_MAX - 1 <= s <= SHORT_MAX:
                both[i], base[i], size[i] = True, b, s
    return both, base, size


def _mismatches(rc, u: pa.Table, rows: np.ndarray, at: np.ndarray, out) -> None:
    """Units ``rows`` of ``u`` against the kept messages at their offsets (message rows ``at``): the queue, then
    each field the dispatch writes (store-format-5x.md section 3.2-3.3)."""
    m = rc.messages
    unit = {c: u.column(c).to_numpy(zero_copy_only=False)[rows]
            for c in ("queue_id", "size", "tags_code", "store_timestamp", "msg_base_offset", "batch_size")}
    same_topic = pc.equal(u.column("topic").take(pa.array(rows)), m.column("topic").take(pa.array(at))).to_numpy(
        zero_copy_only=False)
    wrong = ~same_topic | (unit["queue_id"] != rc.column("queue_id")[at])
    if wrong.any():
        w = np.flatnonzero(wrong)
        uu, mm = u.take(rows[w]), m.take(at[w])
        values = {"message_topic": mm.column("topic"), "message_queue_id": mm.column("queue_id")}
        out.finding(finding_table("batchcq.wrong_queue", len(w), values=values,
                                  details={"uniq_key": mm.column("uniq_key"), "key": mm.column("uniq_key"), **values},
                                  **_positions(rc, uu)))
    ok = np.flatnonzero(~wrong)
    if not len(ok):
        return
    rows, at = rows[ok], at[ok]
    unit = {k: v[ok] for k, v in unit.items()}
    both, base, size = expected_batch(rc.decode(at, ("properties",)).column("properties").to_pylist())
    record = {"size": rc.column("store_size")[at], "store_timestamp": rc.column("store_timestamp")[at],
              "msg_base_offset": np.where(both, base, rc.column("queue_offset")[at]),
              "batch_size": np.where(both, size, 1)}
    tags = m.column("tags_code")  # null where the record's tags did not decode: not compared
    record["tags_code"] = np.where(tags.is_valid().to_numpy(zero_copy_only=False)[at],
                                   pc.fill_null(tags, 0).to_numpy(zero_copy_only=False)[at], unit["tags_code"])
    for field in ("msg_base_offset", "batch_size", "size", "tags_code", "store_timestamp"):
        diff = np.flatnonzero(unit[field] != record[field])
        if not len(diff):
            continue
        uu, mm = u.take(rows[diff]), m.take(at[diff])
        values = {"field": field, "unit_value": pa.array(unit[field][diff].astype(np.int64)),
                  "record_value": pa.array(record[field][diff].astype(np.int64))}
        out.finding(finding_table("batchcq.unit_mismatch", len(diff), values=values,
                                  details={"uniq_key": mm.column("uniq_key"), "key": mm.column("uniq_key"), **values},
                                  **_positions(rc, uu)))


def _loose(rc, u: pa.Table, out) -> None:
    """Units pointing where no message starts: into a corrupt span or a record here; the rest go to the driver."""
    code, prev, _ = rc.locate(u.column("physical_offset").to_numpy())
    for c, severity, where in ((IN_DAMAGE, Severity.WARNING, "into a corrupt span starting at {}"),
                               (MID_RECORD, Severity.ERROR, "into the middle of the record at {}")):
        rows = np.flatnonzero(code == c)
        if len(rows):
            t = u.take(rows)
            out.finding(finding_table("batchcq.unit_points_nowhere", len(rows), severity=severity, values={
                "where": pa.array([where.format(p) for p in prev[rows].tolist()], pa.string())},
                details={"size": t.column("size"), "batch_size": t.column("batch_size")}, **_positions(rc, t)))
    rows = np.flatnonzero(code == OUTSIDE)
    if len(rows):
        t = u.take(rows)
        out.partial("batchcq.loose", pa.table({
            "broker": pa.repeat(pa.scalar(rc.broker), len(rows)), "topic": t.column("topic"),
            "queue_id": t.column("queue_id"), "queue_offset": t.column("msg_base_offset"),
            "physical_offset": t.column("physical_offset"), "size": t.column("size"), "file": t.column("file"),
            "file_position": t.column("file_position")}, schema=LOOSE))


def _duplicates(rc, u: pa.Table, out) -> None:
    phys = u.column("physical_offset").to_numpy()
    values, counts = np.unique(phys, return_counts=True)
    dup = values[counts > 1]
    if not len(dup):
        return
    t = u.take(np.flatnonzero(np.isin(phys, dup))).sort_by(
        [("physical_offset", "ascending"), ("topic", "ascending"), ("queue_id", "ascending"),
         ("file", "ascending"), ("file_position", "ascending")])
    tp = t.column("physical_offset").to_numpy()
    first = np.flatnonzero(np.r_[True, tp[1:] != tp[:-1]])
    n = pa.array(np.diff(np.r_[first, len(tp)]))
    out.finding(finding_table("batchcq.duplicate_unit", len(first), values={"units": n}, details={"units": n},
                              **_positions(rc, t.take(first))))


# ------------------------------------------------------------------------------------------------ queue files

def in_batch_files(facts, files, out) -> None:
    """What each queue's files say alone: units recovery stops at, partial units, and logical offsets that do not
    follow each other (a queue's files come whole, by name)."""
    corrupt, gaps = [], []
    queues: dict[tuple, list] = {}
    for f in files:
        if f.loaded:
            queues.setdefault((f.topic, f.queue_id), []).append(f)
    for (topic, qid), q in queues.items():
        expected, prev = None, None
        for f in sorted(q, key=lambda f: f.base_offset):
            u = read_batch_unit_arrays(f.file)
            for i in np.flatnonzero(u.kind != KIND_ENTRY).tolist():
                kind = int(u.kind[i])
                reason = "a compaction end marker" if kind == KIND_END_MARKER else \
                    "zeros before written units" if kind == 2 else "an invalid unit"
                corrupt.append(dict(topic=topic, queue_id=qid, file=f.name, file_position=int(u.file_position[i]),
                                    reason=f"{reason} (phyOffset, size, msgBaseOffset or batchSize out of range): "
                                           "recovery stops here and drops every unit after it"))
            if u.truncated is not None:
                corrupt.append(dict(topic=topic, queue_id=qid, file=f.name, file_position=u.truncated.position,
                                    reason=f"{f.length % UNIT_SIZE} bytes of a partial unit at the file's end"))
            entry = np.flatnonzero(u.kind == KIND_ENTRY)
            base, batch = u.msg_base_offset[entry], u.batch_size[entry].astype(np.int64)
            if not len(entry):
                continue
            starts = np.r_[expected if expected is not None else base[0], (base + batch)[:-1]]
            for k in np.flatnonzero(base != starts).tolist():
                gaps.append(dict(topic=topic, queue_id=qid, file=f.name, file_position=int(u.file_position[entry[k]]),
                                 physical_offset=int(u.physical_offset[entry[k]]), queue_offset=int(base[k]),
                                 expected=int(starts[k]),
                                 previous=prev if k == 0 else (f.name, int(u.file_position[entry[k - 1]]))))
            expected, prev = int(base[-1] + batch[-1]), (f.name, int(u.file_position[entry[-1]]))
    out.finding(finding_rows("batchcq.corrupt_unit", [dict(
        broker=facts.broker, file=c["file"], file_position=c["file_position"], topic=c["topic"],
        queue_id=c["queue_id"], values={"reason": c["reason"]}, details={"reason": c["reason"]}) for c in corrupt]))
    out.finding(finding_rows("batchcq.offset_gap", [dict(
        broker=facts.broker, file=g["file"], file_position=g["file_position"], physical_offset=g["physical_offset"],
        topic=g["topic"], queue_id=g["queue_id"], queue_offset=g["queue_offset"],
        values={"expected": g["expected"], "what": f"skip {g['queue_offset'] - g['expected']} message(s)"
                if g["queue_offset"] > g["expected"] else f"go back by {g['expected'] - g['queue_offset']}"},
        details={"expected": g["expected"], "previous_file": g["previous"][0] if g["previous"] else None,
                 "previous_position": g["previous"][1] if g["previous"] else None}) for g in gaps]))


# ------------------------------------------------------------------------------------------------------ driver

def on_driver(ctx) -> FamilyResult:
    res = FamilyResult()
    res.findings += [_outside(ctx), _missing(ctx), _file_problems(ctx)]
    return res


def _outside(ctx):
    """Loose units that point at no item: past the end of the broker's data, or at bytes where no record starts."""
    loose = ctx.partial("batchcq.loose", LOOSE)
    if not loose.num_rows:
        return concat_findings([])
    rows = []
    for r in loose.to_pylist():
        end = ctx.data_end.get(r["broker"])
        past = end is None or r["physical_offset"] >= end
        rows.append(dict(broker=r["broker"], file=r["file"], file_position=r["file_position"],
                         physical_offset=r["physical_offset"], topic=r["topic"], queue_id=r["queue_id"],
                         queue_offset=r["queue_offset"],
                         values={"where": f"past the end of the commitlog data ({end if end is not None else 'empty'})"
                                 if past else "at bytes where no record starts"},
                         details={"size": r["size"], "past_end": past}))
    return finding_rows("batchcq.unit_points_nowhere", rows)


def _missing(ctx):
    """Kept dispatchable records of batch topics without a unit, as ranges of the queue offsets of their messages
    (a record holds batchSize of them) per queue."""
    t = ctx.partial("batchcq.missing", MISSING)
    if not t.num_rows:
        return concat_findings([])
    t = t.sort_by([("broker", "ascending"), ("topic", "ascending"), ("queue_id", "ascending"),
                   ("pending", "ascending"), ("queue_offset", "ascending")])
    rows = {False: [], True: []}
    run = None
    for r in t.to_pylist():
        key = (r["broker"], r["topic"], r["queue_id"], r["pending"])
        n = r["last_queue_offset"] - r["queue_offset"] + 1
        if run is not None and run["key"] == key and r["queue_offset"] <= run["last"] + 1:
            run["last"], run["count"] = max(run["last"], r["last_queue_offset"]), run["count"] + n
            continue
        if run is not None:
            rows[run["key"][3]].append(run)
        run = {"key": key, "first": r["queue_offset"], "last": r["last_queue_offset"], "count": n,
               "physical_offset": r["physical_offset"]}
    rows[run["key"][3]].append(run)
    out = []
    for pending, check_id in ((False, "batchcq.missing_unit"), (True, "batchcq.not_yet_dispatched")):
        out.append(finding_rows(check_id, [dict(
            broker=g["key"][0], topic=g["key"][1], queue_id=g["key"][2], queue_offset=g["first"],
            physical_offset=g["physical_offset"],
            values={"count": g["count"], "span": str(g["first"]) if g["first"] == g["last"]
                    else f"{g['first']}..{g['last']}"},
            details={"count": g["count"], "last_queue_offset": g["last"]}) for g in rows[pending]]))
    return concat_findings(out)


_BAD_QUEUE = "its queue folder's name is not a number: the broker does not load it, so its units are not read"


def _file_problems(ctx):
    """Files the listing (store_format.rolled.list_rolled_files) finds wrong, and files missing between two others."""
    rows = []
    for name, plan in ctx.plans.items():
        files = plan.store.batch_queue_files
        for f in files:
            problems = list(f.problems) or ([(ErrorKind.BAD_FILE_NAME.value, _BAD_QUEUE)] if f.queue_id is None else [])
            for kind, why in problems:
                rows.append(dict(broker=name, file=f.name, topic=f.topic, queue_id=f.queue_id,
                                 values={"queue_text": str(f.queue_id) if f.queue_id is not None else "?",
                                         "reason": why},
                                 details={"problem": kind, "length": f.length}))
        for (topic, qid), queue in plan.store.batch_queues.items():
            size = max((f.length for f in queue), default=0)
            for a, b in zip(queue, queue[1:]):
                if size and b.base_offset != a.base_offset + size:
                    missing = (b.base_offset - a.base_offset - size) // UNIT_SIZE
                    rows.append(dict(broker=name, file=b.name, topic=topic, queue_id=qid,
                                     values={"queue_text": str(qid), "reason": f"it does not follow {a.name}: {missing} "
                                                                          "units are missing between them"},
                                     details={"problem": "gap", "previous": a.name, "missing_units": missing}))
    return finding_rows("batchcq.file_problem", rows)


def applies(plan) -> bool:
    """A broker with batch topics (batchconsumequeue/ folders, or topics.json's queue.type=BatchCQ)."""
    return bool(plan.store.batch_topics)


FAMILY = Family(
    "batchcq", "CommitLog <-> BatchConsumeQueue (5.x batch topics): messages without a unit, units pointing wrong or "
               "saying other than the dispatch writes, offset gaps, corrupt units and files",
    always=True, applies=applies, in_range=in_range, in_files={ROUTE: in_batch_files},
    on_driver=on_driver,
    emits={"batchcq.missing": MISSING, "batchcq.loose": LOOSE},
    reads=("batchcq.missing", "batchcq.loose"))
