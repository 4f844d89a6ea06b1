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
family's ``recovery.cq_truncated``.  With ConsumeQueueExt (``enableConsumeQueueExt``: a unit's tagsCode slot holds
the address of its ext unit, whose tagsCode the readers give): ``consumequeue.ext_unit_missing`` (an address that
reaches no ext unit), ``consumequeue.ext_unit_orphan`` (warning: an ext unit no unit points to),
``consumequeue.ext_unit_corrupt`` (an ext unit whose size is wrong, or whose filter bitmap's length is not its
size's or not the queue's other units').  5.x: a unit of an %LMQ% queue is checked here for what it says of its
record (size, tagsCode, transaction type, where it points); which records it should hold, at which offsets, is the
lmq family's; the messages of queue.type=BatchCQ topics have batch units instead (the batchcq family).

Where each is decided: a scan task joins the units it owns with its messages by physical offset (every check
about one unit or one message, and duplicates: units at one offset share an owner); the queue-offset ranges of
missing units, and whether a loose unit lies past the data's end, need every task's part and are finished on the
driver.
"""
from __future__ import annotations


import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from store_format import layout as L
from store_format import fs
from store_format.consumequeue import ext_folder, partial_unit, read_ext_units
from store_format.errors import ErrorKind
from store_format.queues import disagreements, shared_queues

from ..findings import Consequence, Severity, check, concat_findings, finding_rows, finding_table, metric_table
from ..scan import IN_DAMAGE, MID_RECORD, OUTSIDE
from .. import resend
from ..contract import Family, FamilyResult
from ..routes import QUEUE_BOUNDS
from ..plan import listed_only

DISPATCHED_TYPES = ("NOT", "COMMIT")  # PREPARED and ROLLBACK get no consume-queue entry

check("consumequeue.wrong_queue", Severity.ERROR,
      "unit of {topic}/{queue_id} points at a message of {message_topic}/{message_queue_id}",
      group="queue", consequence=Consequence.CONSUMERS_AFFECTED,
      action="The queue file is corrupt or from another store: rebuild the queue.")
check("consumequeue.queue_offset_mismatch", Severity.ERROR,
      "unit at queue offset {queue_offset} points at the message stored with queue offset {message_queue_offset}",
      group="queue", consequence=Consequence.CONSUMERS_AFFECTED,
      action="Rebuild the queue; consumers of it may skip or repeat messages.")
check("consumequeue.size_mismatch", Severity.ERROR, "unit size {unit_size} != record TOTALSIZE {record_size}",
      group="queue", consequence=Consequence.CONSUMERS_AFFECTED,
      action="Rebuild the queue.")
check("consumequeue.tags_code_mismatch", Severity.ERROR,
      "unit tagsCode {unit_tags_code} != {record_tags_code} computed from the record",
      group="queue", consequence=Consequence.CONSUMERS_AFFECTED,
      action="Rebuild the queue.")
check("consumequeue.undispatchable_entry", Severity.ERROR,
      "unit points at a {tran_type} record, which the broker never dispatches",
      group="queue", consequence=Consequence.CONSUMERS_AFFECTED,
      action="Rebuild the queue; check the transaction's producer.")
check("consumequeue.duplicate_entry", Severity.ERROR, "{units} units point at the same record",
      group="queue", consequence=Consequence.CONSUMERS_AFFECTED,
      action="Rebuild the queue; make consumers idempotent for that key.")
check("consumequeue.entry_in_damage", Severity.WARNING,
      "unit points into a corrupt span ({item_reason}) starting at {item_position}",
      group="queue", consequence=Consequence.COSMETIC,
      action="See the integrity finding at that offset.")
check("consumequeue.entry_mid_record", Severity.ERROR, "unit points into the middle of the record at {item_position}",
      group="queue", consequence=Consequence.CONSUMERS_AFFECTED,
      action="Corrupt unit: rebuild the queue.")
check("consumequeue.entry_past_end", Severity.ERROR, "unit points past the end of the commitlog data ({data_end|empty})",
      group="queue", consequence=Consequence.DATA_LOST,
      action="The log was truncated after dispatch (or the queue is from a newer copy): those messages are gone; "
             "rebuild the queue.")
check("consumequeue.entry_not_a_message", Severity.ERROR, "unit points at bytes where no record starts",
      group="queue", consequence=Consequence.CONSUMERS_AFFECTED,
      action="Corrupt unit: rebuild the queue.")
check("consumequeue.missing_entry", Severity.ERROR,
      "{count} message(s) of {topic}/{queue_id} at queue offset(s) {span} have no consume-queue unit: consumers "
      "cannot see them",
      group="queue", consequence=Consequence.CONSUMERS_AFFECTED, roles=("unindexed",),
      action="Re-dispatch: remove the damaged queue folder and let the broker rebuild it (it re-dispatches from the "
             "checkpoint after an abnormal start), or extract the messages and re-send.")
check("consumequeue.not_yet_dispatched", Severity.WARNING,
      "{count} message(s) of {topic}/{queue_id} at queue offset(s) {span} have no consume-queue unit yet (the broker "
      "dispatches them at start)",
      group="queue", consequence=Consequence.COSMETIC,
      action="Nothing, unless the broker will not start.")
check("consumequeue.corrupt_unit", Severity.ERROR,
      "consume-queue {topic}/{queue_id_text|?} file {file}: {reason|corrupt unit}",
      group="queue", consequence=Consequence.CONSUMERS_AFFECTED,
      action="Rebuild the queue from the log.")
check("consumequeue.backend_unreadable", Severity.ERROR,
      "the consume queues in {file} cannot be read: {reason}",
      group="queue", consequence=Consequence.UNKNOWN,
      action="Read the reason: install the binding it names, or audit a copy of the store whose consumequeue/ "
             "database opens; until then no unit of it is checked and its messages read as undispatched.")
check("consumequeue.backends_disagree", Severity.ERROR,
      "{count} queue offset(s) of {topic}/{queue_id} from {queue_offset} differ between its {preferred} and "
      "{other} consume queues (there: {preferred} {preferred_unit}, {other} {other_unit})",
      group="queue", consequence=Consequence.CONSUMERS_AFFECTED,
      action="The broker reads the first; a broker switched to the other (storeType) serves other messages: "
             "rebuild the one that disagrees with the log (the other consume-queue findings say which) before "
             "switching.")
check("consumequeue.ext_unit_missing", Severity.ERROR,
      "unit of {topic}/{queue_id} at queue offset {queue_offset} holds the ConsumeQueueExt address {ext_offset}, "
      "where no ext unit is: its tagsCode is lost",
      group="queue", consequence=Consequence.CONSUMERS_AFFECTED,
      action="Consumers filtering by tag may skip the message: rebuild the queue (and its consumequeue_ext) from "
             "the log.")
check("consumequeue.ext_unit_orphan", Severity.WARNING,
      "ConsumeQueueExt unit of {topic}/{queue_id} at offset {ext_offset} is pointed to by no consume-queue unit",
      group="queue", consequence=Consequence.COSMETIC,
      action="Nothing: it is never read.")
check("consumequeue.ext_unit_corrupt", Severity.ERROR,
      "ConsumeQueueExt unit of {topic}/{queue_id}[ at offset {ext_offset}]: {problem}",
      group="queue", consequence=Consequence.CONSUMERS_AFFECTED,
      action="Rebuild the queue's consumequeue_ext from the log (tag filters read it).")
check("consumequeue.file_gap", Severity.ERROR,
      "consume-queue file {file} of {topic}/{queue_id} does not follow {previous}: {missing} units are missing between "
      "them",
      group="queue", consequence=Consequence.CONSUMERS_AFFECTED,
      action="Rebuild the queue; the messages themselves are still in the log.")

UNIT_COLUMNS = [("topic", pa.string()), ("queue_id", pa.int32()), ("queue_offset", pa.int64()),
                ("physical_offset", pa.int64()), ("size", pa.int32()), ("tags_code", pa.int64()), ("file", pa.string()),
                ("file_position", pa.int64())]
LOOSE = pa.schema([("broker", pa.string())] + UNIT_COLUMNS)
# a unit pointing into a corrupt span: the record it names, destroyed (jobs/audit/resend.py), and the span
IN_SPAN = pa.schema([("broker", pa.string())] + UNIT_COLUMNS
                    + [("span_start", pa.int64()), ("span_reason", pa.string())])
MISSING = pa.schema([("broker", pa.string()), ("topic", pa.string()), ("queue_id", pa.int32()), ("pending", pa.bool_()),
                     ("queue_offset", pa.int64()), ("physical_offset", pa.int64())])


ROUTE = "consumequeue"  # the route of the queues this family checks (jobs/audit/routes.py: their part folder)


def in_range(rc, out) -> None:
    u, m = rc.routed(ROUTE), rc.messages
    copies = rc.facts.dispatch.copies(u.column("topic"))
    # every unit against the message at its physical offset
    if u.num_rows:
        uphys = u.column("physical_offset").to_numpy()
        at = rc.message_at(uphys)
        hit = at >= 0
        kept = np.zeros(len(at), bool)
        kept[hit] = rc.column("kept")[at[hit]]
        matched = np.flatnonzero(kept)
        if len(matched):
            _mismatches(rc, u, matched, at[matched], out, copies[matched])
        loose = np.flatnonzero(~hit)
        if len(loose):
            _loose(rc, u.take(loose), out)
        _duplicates(rc, u.filter(pa.array(~copies)) if copies.any() else u, out)
    # kept dispatchable messages without any unit of their own queue at their offset (those whose own unit is in
    # another folder's queue are that folder's family's)
    if m.num_rows:
        want = rc.column("kept") & pc.is_in(m.column("tran_type"), pa.array(DISPATCHED_TYPES)).to_numpy(
            zero_copy_only=False) & rc.facts.dispatch.own_units_in(ROUTE, m.column("topic"))
        mphys = rc.column("physical_offset")
        has_unit = np.zeros(len(mphys), bool)
        if u.num_rows and not copies.all():
            unit_phys = np.sort(u.column("physical_offset").to_numpy()[~copies])
            i = np.minimum(np.searchsorted(unit_phys, mphys), len(unit_phys) - 1)
            has_unit = unit_phys[i] == mphys
        rows = np.flatnonzero(want & ~has_unit)
        if len(rows):
            t = m.take(rows)
            phys = t.column("physical_offset")
            out.partial("consumequeue.missing", pa.table({
                "broker": pa.repeat(pa.scalar(rc.broker), len(rows)), "topic": t.column("topic"),
                "queue_id": t.column("queue_id"),
                "pending": pc.greater_equal(phys, pa.scalar(rc.facts.reput_from, pa.int64())),
                "queue_offset": t.column("queue_offset"), "physical_offset": phys}, schema=MISSING))
            unseen = pc.less(phys, pa.scalar(rc.facts.reput_from, pa.int64()))  # not dispatched at start either
            out.table(resend.NAME, resend.message_rows(rc.broker, "unindexed", t.filter(unseen)))


def _unit_positions(rc, u: pa.Table) -> dict:
    return dict(broker=rc.broker, file=u.column("file"), file_position=u.column("file_position"),
                physical_offset=u.column("physical_offset"), topic=u.column("topic"), queue_id=u.column("queue_id"),
                queue_offset=u.column("queue_offset"))


def _mismatches(rc, u: pa.Table, rows: np.ndarray, at: np.ndarray, out, copies: np.ndarray) -> None:
    """Units ``rows`` of ``u`` against the kept messages at their offsets (message rows ``at``): compared in numpy,
    and only the units that differ are gathered into findings.  ``copies``: which of them are copies of another
    queue's record (store_format.queues.Dispatch.copies), whose queue and queue offset the family that checks the
    multi-dispatch checks."""
    m = rc.messages

    def mnum(name):
        return rc.column(name)[at]

    def unum(name):
        return u.column(name).to_numpy(zero_copy_only=False)[rows]

    topics = pc.unique(pa.concat_arrays([u.column("topic").combine_chunks(), m.column("topic").combine_chunks()]))
    same_topic = num_codes(u.column("topic"), topics)[rows] == num_codes(m.column("topic"), topics)[at]
    wrong_queue = (~same_topic | (unum("queue_id") != mnum("queue_id"))) & ~copies
    # a unit's address that reached no ext unit has no tagsCode to compare (consumequeue.ext_unit_missing says so)
    tags_known = m.column("tags_code").is_valid().to_numpy(zero_copy_only=False)[at] & \
        (unum("tags_code") > L.CQ_EXT_MAX_ADDR)
    dispatched = pc.is_in(m.column("tran_type"), pa.array(DISPATCHED_TYPES)).to_numpy(zero_copy_only=False)[at]
    checks = (
        ("consumequeue.wrong_queue", wrong_queue,
         {"message_topic": ("m", "topic"), "message_queue_id": ("m", "queue_id")}),
        ("consumequeue.queue_offset_mismatch", ~wrong_queue & ~copies & (unum("queue_offset") != mnum("queue_offset")),
         {"message_queue_offset": ("m", "queue_offset")}),
        ("consumequeue.size_mismatch", unum("size") != mnum("store_size"),
         {"unit_size": ("u", "size"), "record_size": ("m", "store_size")}),
        ("consumequeue.tags_code_mismatch", tags_known & (unum("tags_code") != np.where(tags_known, mnum("tags_code"), 0)),
         {"unit_tags_code": ("u", "tags_code"), "record_tags_code": ("m", "tags_code")}),
        ("consumequeue.undispatchable_entry", ~dispatched, {"tran_type": ("m", "tran_type")}),
    )
    for check_id, cond, fields in checks:
        hit = np.flatnonzero(cond)
        if not len(hit):
            continue
        uu, mm = u.take(rows[hit]), m.take(at[hit])
        values = {k: (uu if side == "u" else mm).column(col) for k, (side, col) in fields.items()}
        out.finding(finding_table(check_id, len(hit), values=values,
                                  details={"uniq_key": mm.column("uniq_key"), "key": mm.column("uniq_key"), **values},
                                  **_unit_positions(rc, uu)))


def num_codes(strings, dictionary: pa.Array) -> np.ndarray:
    """Each string's index in ``dictionary`` (every string is in it)."""
    return pc.index_in(strings, value_set=dictionary).to_numpy(zero_copy_only=False)


def _loose(rc, u: pa.Table, out) -> None:
    """Units pointing where no message starts: inside a span or a record here; the rest go to the driver."""
    code, prev, reason = rc.locate(u.column("physical_offset").to_numpy())
    details = lambda t: {"size": t.column("size"), "tags_code": t.column("tags_code")}  # noqa: E731
    for c, check_id in ((IN_DAMAGE, "consumequeue.entry_in_damage"), (MID_RECORD, "consumequeue.entry_mid_record")):
        rows = np.flatnonzero(code == c)
        if len(rows):
            t = u.take(rows)
            span_start = pa.array(prev[rows], pa.int64())
            span_reason = pa.array([reason[i] for i in rows.tolist()], pa.string())
            out.finding(finding_table(check_id, len(rows), values={
                "item_position": span_start, "item_reason": span_reason}, details=details(t), **_unit_positions(rc, t)))
            if c == IN_DAMAGE:  # the message each names is one to re-send (a copy names another's queue)
                own = pa.array(~rc.facts.dispatch.copies(t.column("topic")))
                out.partial("consumequeue.in_span", pa.table({
                    "broker": pa.repeat(pa.scalar(rc.broker), len(rows)), **{n: t.column(n) for n, _ in UNIT_COLUMNS},
                    "span_start": span_start, "span_reason": span_reason}, schema=IN_SPAN).filter(own))
    rows = np.flatnonzero(code == OUTSIDE)
    if len(rows):
        t = u.take(rows)
        out.partial("consumequeue.loose", pa.table({"broker": pa.repeat(pa.scalar(rc.broker), len(rows)),
                                                    **{name: t.column(name) for name, _ in UNIT_COLUMNS}},
                                                   schema=LOOSE))


def _duplicates(rc, u: pa.Table, out) -> None:
    phys = u.column("physical_offset").to_numpy()
    ordered = np.sort(phys)
    dup = ordered[1:][ordered[1:] == ordered[:-1]]
    if not len(dup):
        return
    rows = np.flatnonzero(np.isin(phys, dup))
    t = u.take(rows).sort_by([("physical_offset", "ascending"), ("topic", "ascending"), ("queue_id", "ascending"),
                              ("queue_offset", "ascending"), ("file", "ascending"), ("file_position", "ascending")])
    tp = t.column("physical_offset").to_numpy()
    first = np.flatnonzero(np.r_[True, tp[1:] != tp[:-1]])  # the least (topic, queue, offset, file, position)
    n = np.diff(np.r_[first, len(tp)])
    f = t.take(first)
    out.finding(finding_table("consumequeue.duplicate_entry", len(first), values={"units": pa.array(n)},
                              details={"units": pa.array(n)}, **_unit_positions(rc, f)))


# ------------------------------------------------------------------------------------------------ queue files

def in_queue_files(facts, files, out) -> None:
    """Corrupt units, bad names and partial units of each file (the data source's ``corrupt`` rows), and each
    queue's units against its ConsumeQueueExt."""
    corrupt, addressed = [], {}
    surveyed = {r.loc.path: r.surveyed for r in facts.routed.get(ROUTE, ())}
    for p in files:
        unreadable = [why for kind, why in p.problems if kind == "unreadable"]
        if unreadable:  # a queue backend that cannot be opened here (store_format.queues: a RocksDB database)
            out.finding(finding_rows("consumequeue.backend_unreadable", [dict(
                broker=facts.broker, file=str(p.loc.parent().name), values={"reason": unreadable[0]},
                details={"reason": unreadable[0], "backend": p.backend.name})]))
            continue
        if not p.loaded:
            corrupt.append(dict(topic=p.topic, queue_id=p.queue_id, file=p.name, file_position=0, length=p.length,
                                reason=ErrorKind.BAD_FILE_NAME.value))
            continue
        known = surveyed.get(p.loc.path)
        if known is not None and known.accepted and not known.ext_addressed:  # what the survey found of them:
            tail = partial_unit(p.loc.path, p.length)  # all reading its units would find
        else:
            tail = _corrupt_units(p, addressed, corrupt)
        if tail is not None:
            corrupt.append(dict(topic=p.topic, queue_id=p.queue_id, file=p.name, file_position=tail.position,
                                length=p.length - tail.position, reason=tail.kind.value))
    out.finding(finding_rows("consumequeue.corrupt_unit", [dict(
        broker=facts.broker, file=c["file"], file_position=c["file_position"], topic=c["topic"],
        queue_id=c["queue_id"], queue_offset=c.get("queue_offset"),
        values={"queue_id_text": c["queue_id"], "reason": c["reason"]},
        details={"length": c["length"], "reason": c["reason"]}) for c in corrupt]))
    for (topic, qid), units in addressed.items():  # none where the extension was off
        _ext_units(facts.broker, topic, qid, units, out)


def _corrupt_units(p, addressed: dict, corrupt: list):
    """A queue file's units recovery stops at, into ``corrupt``, and the file into ``addressed`` where a slot holds
    an ext address; returns its partial trailing unit's error, or None."""
    u = p.units()  # its backend's units (a RocksDB queue's: no corrupt kind, a missing key is a message's miss)
    if u.ext_offset is not None:
        addressed.setdefault((p.topic, p.queue_id), []).append((p, u))
    r = u.recovery  # recovery accepts every unit up to the last written one: none is bad (no array looked at)
    bad = () if r is not None and r.valid == len(u.kind) else np.flatnonzero(u.kind >= 2).tolist()
    for i in bad:  # zero units with data after them, units recovery refuses
        corrupt.append(dict(topic=p.topic, queue_id=p.queue_id, file=p.name, file_position=int(u.file_position[i]),
                            queue_offset=int(u.queue_offset[i]), length=L.CQ_STORE_UNIT_SIZE,
                            reason=f"{('pre_blank', 'pre_blank', 'zero', 'invalid')[u.kind[i]]} unit: recovery "
                                   "stops here"))
    return u.truncated


def _ext_units(broker: str, topic: str, qid: int, addressed: list, out) -> None:
    """A queue's units (``addressed``: (file, its unit arrays) with ext addresses) against its ConsumeQueueExt units
    (consumequeue_ext/<topic>/<queueId>): addresses that reach no ext unit, ext units no address reaches, ext units
    whose size or filter bitmap is wrong."""
    ext = read_ext_units(ext_folder(addressed[0][0].loc))
    starts = set(ext.offset.tolist())
    missing, pointed = [], set()
    for f, u in addressed:
        for i in np.flatnonzero(u.ext_offset >= 0).tolist():
            off = int(u.ext_offset[i])
            pointed.add(off)
            if off not in starts:
                missing.append(dict(broker=broker, file=f.name, file_position=int(u.file_position[i]), topic=topic,
                                    queue_id=qid, queue_offset=int(u.queue_offset[i]),
                                    physical_offset=int(u.physical_offset[i]), values={"ext_offset": off},
                                    details={"ext_offset": off}))
    out.finding(finding_rows("consumequeue.ext_unit_missing", missing))
    orphan = [i for i, off in enumerate(ext.offset.tolist()) if off not in pointed]
    out.finding(finding_rows("consumequeue.ext_unit_orphan", [dict(
        broker=broker, file=f"consumequeue_ext/{topic}/{qid}/{ext.file[i]}", file_position=int(ext.file_position[i]),
        topic=topic, queue_id=qid, values={"ext_offset": int(ext.offset[i])},
        details={"ext_offset": int(ext.offset[i]), "tags_code": int(ext.tags_code[i])}) for i in orphan]))
    # a unit's bitmap is its size's rest, and as long as the queue's others (bitMapLengthConsumeQueueExt / 8)
    bitmaps = ext.bitmap_size[ext.bitmap_size > 0]
    usual = int(np.bincount(bitmaps).argmax()) if len(bitmaps) else 0
    corrupt = [(i, f"its size {int(ext.size[i])} is not 20 + its bitMapSize {int(ext.bitmap_size[i])}")
               if ext.size[i] != L.CQ_EXT_MIN_UNIT_SIZE + ext.bitmap_size[i] else
               (i, f"its filter bitmap is {int(ext.bitmap_size[i])} bytes, the queue's others {usual}")
               for i in np.flatnonzero((ext.size != L.CQ_EXT_MIN_UNIT_SIZE + ext.bitmap_size)
                                       | ((ext.bitmap_size > 0) & (ext.bitmap_size != usual))).tolist()]
    corrupt += [(None, e) for e in ext.problems]
    out.finding(finding_rows("consumequeue.ext_unit_corrupt", [dict(
        broker=broker, topic=topic, queue_id=qid,
        file=f"consumequeue_ext/{topic}/{qid}/{ext.file[i] if i is not None else fs.resolve(p.file).name}",
        file_position=int(ext.file_position[i]) if i is not None else p.position,
        values={"ext_offset": int(ext.offset[i]) if i is not None else None,
                "problem": p if i is not None else p.message},
        details={"problem": p if i is not None else p.message}) for i, p in corrupt]))


# ------------------------------------------------------------------------------------------------------ driver

def _destroyed_to_resend(ctx) -> None:
    """The messages whose records damage destroyed, named by the units still pointing at them, go to the messages
    to re-send (where a record's header also names it, that naming is kept: resend.write_driver_part)."""
    t = ctx.partial("consumequeue.in_span", IN_SPAN)
    ctx.resend_damaged.extend(resend.destroyed_row(r["broker"], r, r["span_start"], r["span_reason"])
                              for r in t.to_pylist())


def _undispatched_to_resend(ctx) -> None:
    """The kept records after the one a broker's reput stops at for ever (``ctx.reput_stalls``), which no consume
    queue holds yet and none ever will, go to the messages to re-send."""
    if not ctx.reput_stalls:
        return
    missing = ctx.partial("consumequeue.missing", MISSING)
    for broker, at in sorted(ctx.reput_stalls.items()):
        after = pc.and_(missing.column("pending"), pc.greater(missing.column("physical_offset"), at))
        m = missing.filter(pc.and_(pc.equal(missing.column("broker"), broker), after))
        if m.num_rows:
            ctx.resend_tables.append(resend.undispatched_rows(broker, m))


def on_driver(ctx) -> FamilyResult:
    res = FamilyResult()
    _destroyed_to_resend(ctx)
    _undispatched_to_resend(ctx)
    res.findings.append(_outside(ctx))
    res.findings.append(_missing(ctx))
    res.findings.append(_file_sequence(ctx))
    res.findings.append(_backends_disagree(ctx))
    bounds = ctx.queue_bounds
    res.tables["queues"] = bounds
    res.metrics.append(metric_table("queue", {"cq_min_offset": bounds.column("min_offset"),
                                              "cq_max_offset": bounds.column("max_offset"),
                                              "cq_entries": bounds.column("entries")},
                                    n=bounds.num_rows, broker=bounds.column("broker"), topic=bounds.column("topic"),
                                    queue_id=bounds.column("queue_id")))
    return res


def _outside(ctx):
    """Loose units that point at no item: past the end of the broker's data, or at bytes where no record starts."""
    loose = listed_only(ctx.plans, ctx.partial("consumequeue.loose", LOOSE))  # not into segments left unread
    if not loose.num_rows:
        return concat_findings([])
    ends = ctx.data_end
    out = []
    for broker in sorted(set(loose.column("broker").to_pylist())):
        t = loose.filter(pc.equal(loose.column("broker"), broker))
        end = ends.get(broker)
        phys = t.column("physical_offset").to_numpy()
        past = np.ones(len(phys), bool) if end is None else phys >= end
        for mask, check_id in ((past, "consumequeue.entry_past_end"), (~past, "consumequeue.entry_not_a_message")):
            rows = np.flatnonzero(mask)
            if len(rows):
                s = t.take(rows)
                out.append(finding_table(check_id, len(rows), values={"data_end": end},
                                         details={"size": s.column("size"), "tags_code": s.column("tags_code")},
                                         broker=broker, file=s.column("file"), file_position=s.column("file_position"),
                                         physical_offset=s.column("physical_offset"), topic=s.column("topic"),
                                         queue_id=s.column("queue_id"), queue_offset=s.column("queue_offset")))
    return concat_findings(out)


def _missing(ctx):
    """Kept dispatchable messages without a unit, as ranges of queue offsets per queue (gaps and islands: a
    queue offset minus its rank in the queue's sorted offsets names its island)."""
    t = ctx.partial("consumequeue.missing", MISSING)
    if not t.num_rows:
        return concat_findings([])
    t = t.sort_by([("broker", "ascending"), ("topic", "ascending"), ("queue_id", "ascending"),
                   ("pending", "ascending"), ("queue_offset", "ascending"), ("physical_offset", "ascending")])
    rows = []
    cols = {c: t.column(c).to_pylist() for c in ("broker", "topic", "queue_id", "pending")}
    qoff, phys = t.column("queue_offset").to_numpy(), t.column("physical_offset").to_numpy()
    start = 0
    n = t.num_rows
    keys = list(zip(cols["broker"], cols["topic"], cols["queue_id"], cols["pending"]))
    while start < n:
        end = start + 1
        while end < n and keys[end] == keys[start]:
            end += 1
        broker, topic, qid, pending = keys[start]
        q = qoff[start:end]
        island = q - np.arange(1, len(q) + 1)
        least_q, least_p = int(q[0]), int(phys[start])  # min struct (queue_offset, physical_offset): rows are sorted
        for i in np.unique(island).tolist():
            members = q[island == i]
            first, last, count = int(members.min()), int(members.max()), len(members)
            rows.append(dict(broker=broker, topic=topic, queue_id=qid, pending=pending, first=first, last=last,
                             count=count, physical_offset=least_p if least_q == first else None))
        start = end
    out = []
    for pending, check_id in ((False, "consumequeue.missing_entry"), (True, "consumequeue.not_yet_dispatched")):
        out.append(finding_rows(check_id, [dict(
            broker=r["broker"], topic=r["topic"], queue_id=r["queue_id"], queue_offset=r["first"],
            physical_offset=r["physical_offset"],
            values={"count": r["count"], "span": str(r["first"]) if r["count"] == 1 else f"{r['first']}..{r['last']}"},
            details={"count": r["count"], "last_queue_offset": r["last"]}) for r in rows if r["pending"] == pending]))
    return concat_findings(out)


def _file_sequence(ctx):
    """Consume-queue file names must follow each other by the file size (a missing file is a hole)."""
    rows = []
    for name, plan in ctx.plans.items():
        for (topic, qid), files in plan.store.queues.items():
            files = sorted(files, key=lambda f: f.base_byte_offset)
            size = max((f.length for f in files), default=0)
            for a, b in zip(files, files[1:]):
                if size and b.base_byte_offset != a.base_byte_offset + size:
                    missing = (b.base_byte_offset - a.base_byte_offset - size) // L.CQ_STORE_UNIT_SIZE
                    rows.append(dict(broker=name, topic=topic, queue_id=qid, file=b.path.name,
                                     queue_offset=(a.base_byte_offset + size) // L.CQ_STORE_UNIT_SIZE,
                                     values={"previous": a.path.name, "missing": missing}))
    return finding_rows("consumequeue.file_gap", rows)


def _backends_disagree(ctx):
    """Each queue two backends hold (the files and a RocksDB database of a migrating store) reconciled unit by unit
    (store_format.queues.disagreements), a window at a time."""
    rows = []
    for name, plan in ctx.plans.items():
        for first, other in shared_queues(plan.store.queue_models):
            d = disagreements(first, other)
            if d is None:
                continue
            a, b = first.backend.name, other.backend.name
            shown = {k: "no unit" if u is None else f"(physical offset {u[0]}, size {u[1]}, tagsCode {u[2]})"
                     for k, u in d["units"].items()}
            rows.append(dict(broker=name, topic=first.topic, queue_id=first.queue_id, queue_offset=d["queue_offset"],
                             physical_offset=(d["units"][a] or d["units"][b])[0],
                             values={"count": d["count"], "preferred": a, "other": b, "preferred_unit": shown[a],
                                     "other_unit": shown[b]},
                             details={"count": d["count"], "compared_from": d["compared"][0],
                                      "compared_to": d["compared"][1], a: shown[a], b: shown[b]}))
    return finding_rows("consumequeue.backends_disagree", rows)


FAMILY = Family(
    "consumequeue", "CommitLog <-> ConsumeQueue: messages without a unit, units pointing wrong, corrupt units, gaps",
    in_range=in_range, in_files={ROUTE: in_queue_files}, on_driver=on_driver,
    emits={"consumequeue.missing": MISSING, "consumequeue.loose": LOOSE, "consumequeue.in_span": IN_SPAN},
    reads=("consumequeue.missing", "consumequeue.loose", "consumequeue.in_span"),
    tables={"queues": QUEUE_BOUNDS}, rank=30,
    metrics={"cq_min_offset": "first unit's queue offset (queue)", "cq_max_offset": "one past the last unit (queue)",
             "cq_entries": "units (queue)"})
