"""The 5.x timer wheel: every timer message's path through the store (store_format.timerpath) -- pending, overdue,
fired, rolled, recalled, lost -- and the timer store's own files (timer log, wheel, config/timercheck) held against
the CommitLog, as RocketMQ 5.3.3's TimerMessageStore reads them.  Runs for a dump with a timer store (a 5.x broker
creates one at start); a 4.x dump is audited without it.

Checks: about each timer message, ``timers.overdue`` (warning: due before the dump time, its slot not read),
``timers.lost`` (error: its slot was read, or its record enqueued, and it was never delivered),
``timers.roll_chain_broken`` (error: a roll's slot was read and no roll re-put followed, or a roll re-put was never
enqueued), ``timers.lost_past_reach`` (error: due more than the wheel's reach before the dump time),
``timers.unit_unreachable`` (error: in the timer log, on no chain of the wheel), ``timers.unit_past_recovered_end``
(error: its record lies past the recovered CommitLog end), ``timers.recalled_but_delivered`` (warning),
``timers.delivered_twice`` (warning); about a unit's pointer, ``timers.unit_outside_commitlog``,
``timers.unit_not_timer_record`` (errors for a unit still to be read, warnings for one read already) and
``timers.unit_in_damage`` (warning); about the files, ``timers.corrupt_unit``, ``timers.chain_loop``,
``timers.chain_broken``, ``timers.checkpoint_behind`` (warning), ``timers.checkpoint_ahead``,
``timers.timercheck_bad_length``, ``timers.wheel_bad_length``.  Detail table: ``timers`` (one row per record on
rmq_sys_wheel_timer and unit).

Where each is decided: the survey's timer-log route reads every unit (the corrupt ones come to the driver); a scan
task holds each unit next to the record it points at (``rc.routed("timerlog")``) and reads its timer records and
the fired re-puts (records on their real topic carrying TIMER_DEQUEUE_MS); the driver joins them, walks the wheel's
chains and reads the checkpoint.  The units and records are spilled partials (Parquet parts the tasks write): the
driver reads one broker's at a time and writes the ``timers`` table a broker at a time.
"""
from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from store_format import layout as L
from store_format import timer as T
from store_format import timerpath as TP
from store_format.errors import StoreFormatError
from store_format.fs import UnreadableError
from store_format.times import format_iso_z as _iso
from runtime.display import plural
from decoding.columns import column

from .. import buckets
from ..buckets import bucket_count, key_hash
from ..contract import Family, FamilyResult, SummaryView
from ..findings import Consequence, Severity, check, concat_findings, finding_rows, metric_table
from ..routes import TIMER_UNITS, TIMERLOG_FILES
from ..scan import IN_DAMAGE, MID_RECORD
from ..tasks import failure_row

_W = Severity.WARNING
check("timers.overdue", Severity.WARNING,
      "timer message for {real_topic|?} was due {due_seconds} s before the dump time; the wheel has not read its slot",
      consequence=Consequence.CONSUMERS_AFFECTED, group="topic",
      action="The timer was stopped or behind: the broker delivers it once its wheel reads the slot after a start.  "
             "Check the timer's progress (config/timercheck) and the broker's clock.")
check("timers.lost", Severity.ERROR, "timer message for {real_topic|?} will never be delivered: {reason}",
      consequence=Consequence.DATA_LOST, group="topic",
      action="Re-send the message from the producer's record (its UNIQ_KEY is in the details; `jobs.extract` can copy "
             "the record on rmq_sys_wheel_timer out).")
check("timers.roll_chain_broken", Severity.ERROR, "timer message for {real_topic|?} stops rolling: {reason}",
      consequence=Consequence.DATA_LOST, group="topic",
      action="Re-send the message from the producer's record (its UNIQ_KEY is in the details) with its deliver time.")
check("timers.lost_past_reach", Severity.ERROR,
      "timer message for {real_topic|?} was due {due_seconds} s before the dump time, beyond the wheel's reach: a "
      "restarted timer never reads its slot",
      consequence=Consequence.DATA_LOST, group="topic",
      action="Re-send it from the record on rmq_sys_wheel_timer (`jobs.extract`): the broker will not.")
check("timers.unit_unreachable", Severity.ERROR,
      "timer-log unit at {timerlog_offset} (slot {slot_time}) is on no chain of the wheel: the timer never reads it",
      consequence=Consequence.DATA_LOST, group="place",
      action="The wheel lost the slot's chain (a damaged or older timerwheel): re-send the message (UNIQ_KEY in the "
             "details).")
check("timers.unit_past_recovered_end", Severity.ERROR,
      "timer-log unit at {timerlog_offset} points at CommitLog offset {target}, past the recovered end "
      "{recovered_end}: recovery drops the message before its slot {slot_time} is read",
      consequence=Consequence.DATA_LOST, group="place",
      action="Salvage the record before the restart (`jobs.extract --walk salvage`) and re-send it after.")
check("timers.recalled_but_delivered", Severity.WARNING,
      "timer message for {real_topic|?} was recalled but delivered as the record at {delivered_at}: {reason}",
      consequence=Consequence.CONSUMERS_AFFECTED, group="topic",
      action="Tell the consumers of the topic: they received a message its producer cancelled.")
check("timers.delivered_twice", Severity.WARNING,
      "timer message for {real_topic|?} was delivered {deliveries} times (the timer read its slot again)",
      consequence=Consequence.CONSUMERS_AFFECTED, group="topic",
      action="Expect duplicates on the real topic; consumers must be idempotent for that UNIQ_KEY.")
check("timers.unit_outside_commitlog", Severity.ERROR,
      "timer-log unit at {timerlog_offset} points at CommitLog offset {target}, outside the CommitLog "
      "(its data runs from {low} to {data_end})", also=(_W,),
      consequence=Consequence.DATA_LOST, group="place",
      action="The unit is damaged or the CommitLog was truncated under it: its message is gone; re-send it if the "
             "producer can.")
check("timers.unit_not_timer_record", Severity.ERROR,
      "timer-log unit at {timerlog_offset} points at CommitLog offset {target}: {what}", also=(_W,),
      consequence=Consequence.DATA_LOST, group="place",
      action="Corrupt unit: the timer reads the wrong bytes when its slot fires; re-send the message if it is known.")
check("timers.unit_in_damage", Severity.WARNING,
      "timer-log unit at {timerlog_offset} points into a corrupt span ({item_reason}) starting at {item_position}",
      consequence=Consequence.COSMETIC, group="place",
      action="See the integrity finding at that offset.")
check("timers.corrupt_unit", Severity.ERROR,
      "timer-log unit at {timerlog_offset}: {reason}[; recovery truncates the timer log here and {lost} later "
      "unit(s) go with it]",
      consequence=Consequence.DATA_AT_RISK, group="place",
      action="Keep a copy of timerlog/: the timer's recovery truncates the log at a bad unit it scans, and the units "
             "after it are lost.")
check("timers.chain_loop", Severity.ERROR,
      "the chain of the wheel slot for {slot_time} loops at the unit at {timerlog_offset} (prevPos {prev_pos})",
      consequence=Consequence.DATA_AT_RISK, group="place",
      action="The timer's dequeue of that slot never ends and every later timer waits behind it: fix the unit's "
             "prevPos or remove the slot (keep copies) before starting the broker.")
check("timers.chain_broken", Severity.ERROR,
      "the chain of the wheel slot for {slot_time} breaks at timer-log offset {timerlog_offset}: {reason}",
      consequence=Consequence.DATA_LOST, group="place",
      action="The units behind the break are never read: re-send their messages (see timers.unit_unreachable).")
check("timers.checkpoint_behind", Severity.WARNING, "config/timercheck is behind the timer log: {reason}",
      consequence=Consequence.CONSUMERS_AFFECTED, group="broker",
      action="Expect those timer messages delivered again after a restart; consumers must be idempotent.")
check("timers.checkpoint_ahead", Severity.ERROR, "config/timercheck is ahead of the timer log: {reason}",
      also=(_W,), consequence=Consequence.DATA_LOST, group="broker",
      action="The timer log or the timer queue lost data the checkpoint counted: those timer messages are gone; "
             "compare with a slave's copy (`jobs.compare`).")
check("timers.timercheck_bad_length", Severity.ERROR,
      "config/timercheck is {length} bytes, not the {page}-byte page TimerCheckpoint maps: {reason}", also=(_W,),
      consequence=Consequence.CONSUMERS_AFFECTED, group="broker",
      action="Restore config/timercheck from a backup or slave; with offsets read as zeros the timer enqueues and "
             "delivers again what it had done.")
check("timers.wheel_bad_length", Severity.ERROR,
      "timerwheel is {length} bytes, not the {expected} the wheel needs: TimerWheel refuses to start",
      consequence=Consequence.WILL_NOT_START, group="broker",
      action="Restore timerwheel from a backup or slave (or remove it: the broker creates an empty wheel and every "
             "pending timer is lost).")

# --------------------------------------------------------------------------------------------- partial tables

#: corrupt timer-log units, from the survey
CORRUPT = pa.schema([("broker", pa.string()), ("file", pa.string()), ("file_position", pa.int64()),
                     ("timerlog_offset", pa.int64()), ("reason", pa.string()), ("size", pa.int32()),
                     ("magic", pa.int32())])
#: what a unit points at, decided in the task that owns its offset
TARGETS = ("record", "other_topic", "size_mismatch", "mid_record", "in_damage", "outside")
UNITS = pa.schema([("broker", pa.string()), *TIMER_UNITS, ("target", pa.string()), ("record_kept", pa.bool_()),
                   ("record_topic", pa.string()), ("record_size", pa.int32()), ("item_position", pa.int64()),
                   ("item_reason", pa.string())])
#: records on rmq_sys_wheel_timer, and fired re-puts on their real topics
RECORDS = pa.schema([
    ("broker", pa.string()), ("physical_offset", pa.int64()), ("store_size", pa.int32()), ("topic", pa.string()),
    ("queue_id", pa.int32()), ("queue_offset", pa.int64()), ("store_timestamp", pa.int64()), ("kept", pa.bool_()),
    ("segment", pa.string()), ("file_position", pa.int64()), ("uniq_key", pa.string()), ("real_topic", pa.string()),
    ("real_queue_id", pa.int32()), ("out_ms", pa.int64()), ("roll_times", pa.int32()), ("del_key", pa.string()),
    ("enqueue_ms", pa.int64()), ("dequeue_ms", pa.int64())])

TIMERS = pa.schema([
    column("broker", pa.string()),
    column("physical_offset", pa.int64(), "the record on rmq_sys_wheel_timer (the put, a roll's re-put or a recall)"),
    column("queue_offset", pa.int64(), "its offset in rmq_sys_wheel_timer/0"),
    column("uniq_key", pa.string()),
    column("real_topic", pa.string(), "REAL_TOPIC: the topic it is delivered to"),
    column("real_queue_id", pa.int32(), "REAL_QID"),
    column("kind", pa.string(), "`timer`, `roll` (its unit waits in a nearer slot, to be re-put and go round again) "
                                "or `recall` (a recall's delete entry)"),
    column("roll_times", pa.int32(), "TIMER_ROLL_TIMES of the record: how often it has rolled"),
    column("deliver_ms", pa.int64(), "when it is due: TIMER_OUT_MS (ms)"),
    column("timerlog_offset", pa.int64(), "its timer-log unit (null: not in the timer log)"),
    column("timerlog_file", pa.string(), "the unit's timer-log file"),
    column("slot_time_ms", pa.int64(), "the wheel slot the unit is in (a roll's: when it is re-put)"),
    column("state", pa.string(), "`pending`, `overdue`, `queued` (on rmq_sys_wheel_timer, not enqueued yet), "
                                 "`fired`, `rolled`, `recalled`, `recall`, `lost`, `lost_past_reach`, `unreachable`, "
                                 "`dropped` (past the recovered CommitLog end), `expired` (its unit was cleaned)"),
    column("reason", pa.string(), "why, for the states the broker will not deliver"),
    column("delivered_offset", pa.int64(), "the record it was fired as, on its real topic"),
    column("delivered_queue_offset", pa.int64(), "that record's queue offset"),
    column("dequeue_ms", pa.int64(), "TIMER_DEQUEUE_MS of that record: when the timer fired it"),
    column("deliveries", pa.int32(), "records it was fired as (more than one: delivered twice)"),
    column("next_offset", pa.int64(), "a roll's re-put on rmq_sys_wheel_timer"),
])

_PROPS = {"out_ms": L.PROPERTY_TIMER_OUT_MS, "roll_times": L.PROPERTY_TIMER_ROLL_TIMES,
          "del_key": L.PROPERTY_TIMER_DEL_UNIQKEY, "enqueue_ms": L.PROPERTY_TIMER_ENQUEUE_MS,
          "dequeue_ms": L.PROPERTY_TIMER_DEQUEUE_MS}
_LONG = r"^-?[0-9]{1,19}$"


def applies(plan) -> bool:
    """A timer store: what a 5.x broker creates at start (store_format.features)."""
    return plan.store.features.timer_store


# ------------------------------------------------------------------------------------------------------ survey

def corrupt_in_survey(given, f, units, out) -> None:
    """The corrupt units of a timer-log file the route's survey walked (a size or magic the broker refuses, a
    blank that does not end the file, a partial unit)."""
    if units is None:
        return
    bad = np.flatnonzero(units.kind == T.KIND_CORRUPT)
    if not len(bad):
        return
    pos = units.file_position[bad]
    out.partial("timers.corrupt", pa.table({
        "broker": pa.repeat(pa.scalar(given.broker), len(bad)), "file": pa.repeat(pa.scalar(f.name), len(bad)),
        "file_position": pa.array(pos), "timerlog_offset": pa.array(f.base_offset + pos),
        "reason": pa.array(T.REASONS, pa.string()).take(pa.array(units.reason[bad])),
        "size": pa.array(units.size[bad]), "magic": pa.array(units.magic[bad])}, schema=CORRUPT))


# ------------------------------------------------------------------------------------------------------ scan

def in_range(rc, out) -> None:
    _units(rc, out)
    m = rc.messages
    if not m.num_rows:
        return
    topic, real = m.column("topic"), m.column("real_topic")
    on_timer = pc.fill_null(pc.equal(topic, L.TIMER_TOPIC), False)
    # a fired re-put keeps REAL_TOPIC = its topic on disk (convertMessage builds the string before clearing them);
    # delay-level deliveries do too: the properties tell them apart
    refired = pc.fill_null(pc.and_(pc.invert(on_timer), pc.equal(topic, real)), False)
    rows = np.flatnonzero(pc.or_(on_timer, refired).to_numpy(zero_copy_only=False))
    if not len(rows):
        return
    props = rc.decode(rows, ("properties",)).column("properties")
    got = {name: pc.map_lookup(props, pa.scalar(key), "last") for name, key in _PROPS.items()}
    t = m.take(rows)
    keep = pc.or_(pc.equal(t.column("topic"), L.TIMER_TOPIC), pc.is_valid(got["dequeue_ms"]))
    out.spill("timers.records", pa.table({
        "broker": pa.repeat(pa.scalar(rc.broker), len(rows)),
        **{c: t.column(c) for c in ("physical_offset", "store_size", "topic", "queue_id", "queue_offset",
                                    "store_timestamp", "kept", "segment", "file_position", "uniq_key", "real_topic")},
        "real_queue_id": t.column("real_queue_id"), "out_ms": _long(got["out_ms"]),
        "roll_times": pc.cast(pc.fill_null(_long(got["roll_times"]), 0), pa.int32(), safe=False),
        "del_key": got["del_key"], "enqueue_ms": _long(got["enqueue_ms"]), "dequeue_ms": _long(got["dequeue_ms"]),
    }, schema=RECORDS).filter(keep))


def _long(values) -> pa.Array:
    """Decimal text as a long, null where it is not one (a damaged property is not a crash)."""
    ok = pc.fill_null(pc.match_substring_regex(values, _LONG), False)
    digits = pc.if_else(ok, values, pa.scalar(None, pa.string()))
    wide = pc.cast(digits, pa.decimal128(20, 0))  # 19 digits fit; a long holds them only up to 2^63 - 1
    fits = pc.fill_null(pc.and_(pc.less_equal(wide, pa.scalar(2**63 - 1, pa.decimal128(20, 0))),
                                pc.greater_equal(wide, pa.scalar(-2**63, pa.decimal128(20, 0)))), False)
    return pc.cast(pc.if_else(fits, digits, pa.scalar(None, pa.string())), pa.int64())


def _units(rc, out) -> None:
    """Every timer-log unit this range owns, with what it points at."""
    u = rc.routed("timerlog")
    if not u.num_rows:
        return
    phys = u.column("physical_offset").to_numpy()
    n = len(phys)
    at = rc.message_at(phys)
    hit = at >= 0
    target = np.full(n, TARGETS.index("outside"), np.int8)
    kept = np.zeros(n, bool)
    size = np.zeros(n, np.int32)
    topic = [None] * n
    item_pos, item_reason = np.full(n, -1, np.int64), [None] * n
    if hit.any():
        rows = at[hit]
        kept[hit] = rc.column("kept")[rows]
        size[hit] = rc.column("store_size")[rows]
        topics = rc.messages.column("topic").take(pa.array(rows)).to_pylist()
        for i, t in zip(np.flatnonzero(hit).tolist(), topics):
            topic[i] = t
        unit_size = u.column("store_size").to_numpy()
        wrong_topic = np.array([t != L.TIMER_TOPIC for t in topics], bool)
        code = np.where(wrong_topic, TARGETS.index("other_topic"),
                        np.where(size[hit] != unit_size[hit], TARGETS.index("size_mismatch"), TARGETS.index("record")))
        target[hit] = code
    if (~hit).any():
        loose = np.flatnonzero(~hit)
        code, prev, reason = rc.locate(phys[loose])
        target[loose] = np.where(code == IN_DAMAGE, TARGETS.index("in_damage"),
                                 np.where(code == MID_RECORD, TARGETS.index("mid_record"), TARGETS.index("outside")))
        item_pos[loose] = prev
        for i, r in zip(loose.tolist(), reason):
            item_reason[i] = r
    out.spill("timers.units", pa.table({
        "broker": pa.repeat(pa.scalar(rc.broker), n), **{c: u.column(c) for c in TIMER_UNITS.names},
        "target": pa.array(TARGETS, pa.string()).take(pa.array(target)), "record_kept": pa.array(kept),
        "record_topic": pa.array(topic, pa.string()), "record_size": pa.array(size),
        "item_position": pa.array(np.where(item_pos >= 0, item_pos, 0), mask=item_pos < 0),
        "item_reason": pa.array(item_reason, pa.string())}, schema=UNITS))


# ------------------------------------------------------------------------------------------------------ driver

class _Broker:
    """One broker's timer store, read and joined on the driver."""

    def __init__(self, ctx, name: str, plan):
        self.ctx, self.name, self.plan = ctx, name, plan
        root = plan.store.loc
        self.as_of = ctx.as_of.get(name) or 0
        rec = ctx.recovery.get(name)
        self.recovered_end = rec.max_physical_offset if rec is not None else None
        self.data_end = ctx.data_end.get(name, 0)
        self.low = plan.segments[0].base_offset if plan.segments else 0
        self.findings: list[dict] = []  # (check id, row) pairs
        self.checkpoint, self.cp_problem = _timercheck(root.child("config").child(L.TIMER_CHECK_FILE))
        self.wheel = _wheel(root.child(L.TIMER_WHEEL_FILE))
        self.read_time = self.checkpoint.last_read_time_ms if self.checkpoint is not None else None
        units = _spilled_of(ctx.partial_dataset("timers.units", UNITS), name)
        self.units = units.filter(pc.equal(units.column("target"), "record"))
        self.bad_units = units.filter(pc.not_equal(units.column("target"), "record"))
        self.records = _spilled_of(ctx.partial_dataset("timers.records", RECORDS), name)
        self.corrupt = _of(ctx.survey_partial("timers.corrupt", CORRUPT), name).sort_by("timerlog_offset")
        files = _of(ctx.survey_partial("survey.timerlog_files", TIMERLOG_FILES), name)
        self.log_end = max(files.column("written_end").to_pylist(), default=0) if files.num_rows else 0
        self.truncated_at = self._recovery_truncation()

    def _recovery_truncation(self) -> int | None:
        """Where the timer's recovery truncates the log: the first corrupt unit in the files it scans (from the one
        holding lastTimerLogFlushPos minus a file's size), or None."""
        files = self.plan.timer_log_files
        if not files or not self.corrupt.num_rows:
            return None
        flush = self.checkpoint.last_timer_log_flush_pos if self.checkpoint is not None else None
        start = T.rescan_start(files, flush)
        bad = [o for o in self.corrupt.column("timerlog_offset").to_pylist() if o >= start]
        return min(bad) if bad else None


def _of(t: pa.Table, broker: str) -> pa.Table:
    return t.filter(pc.equal(t.column("broker"), broker))


def _spilled_of(dataset, broker: str) -> pa.Table:
    """One broker's rows of a spilled partial (a dataset), in the tasks' order: the driver holds one broker's timer
    records and units at a time, never every broker's for the whole run."""
    import pyarrow.dataset as ds

    return dataset.to_table(filter=ds.field("broker") == broker)


def _timercheck(loc):
    """config/timercheck as the broker maps it: (the checkpoint or None, a problem row or None)."""
    page = L.TIMER_CHECKPOINT.size
    try:
        cp = T.read_timer_checkpoint(loc)
    except UnreadableError:
        return None, None  # the metadata family reports the unreadable file
    except StoreFormatError:
        return None, {"length": 0, "page": page, "severity": Severity.ERROR,
                      "reason": "it is missing: the broker creates it and reads zeros (lastReadTimeMs 0, queue offset 0)"}
    if cp.problem is None:
        return cp, None
    if cp.last_timer_queue_offset is None or cp.master_timer_queue_offset is None:
        reason = (f"its offsets end at byte {cp.file_length}: the broker maps a zero-filled page and reads the "
                  "missing ones as 0")
        return cp, {"length": cp.file_length, "page": page, "severity": Severity.ERROR, "reason": reason}
    return cp, {"length": cp.file_length, "page": page, "severity": Severity.WARNING,
                "reason": "its offsets are intact: the broker maps one page, zero-filling a shorter file and ignoring "
                          "bytes past it"}


def _wheel(loc):
    if not loc.exists():
        return None
    try:
        return T.read_wheel_slots(loc, slots_total=L.DEFAULT_TIMER_SLOTS_TOTAL)
    except UnreadableError:
        return None


def on_driver(ctx) -> FamilyResult:
    """Each broker's timer messages traced in turn, its rows of the ``timers`` table written as it is done; what
    stays on the driver is per broker (the counts, the summary) and the findings."""
    res = FamilyResult()
    metric_rows = []
    writer = ctx.table_writer("timers", TIMERS)
    for name, b in _computed(ctx, writer.write).items():
        if isinstance(b, Exception):  # that broker's finding; the others' results stand
            ctx.failures.append(failure_row(name, "the timers checks", b))
            continue
        res.findings.append(b["findings"])
        metric_rows.append({"broker": name, **b["counts"]})
    if not metric_rows:
        writer.abort()
    else:
        res.tables["timers"] = writer.close()
        names = [r["broker"] for r in metric_rows]
        res.metrics.append(metric_table("broker", {f"timers_{k}": [r[k] for r in metric_rows] for k in _COUNTED},
                                        broker=names))
    return res


_COUNTED = ("pending", "overdue", "fired", "recalled", "lost")


def _computed(ctx, rows=None) -> dict:
    """Per broker with a timer store: its findings, counts and what the summary says (once); its rows of the
    ``timers`` table go to ``rows`` (a function) as each broker is done, and are not kept."""
    cache = ctx.__dict__.setdefault("_timers_family", {})
    if not cache:
        for name, plan in ctx.plans.items():
            if applies(plan):
                try:
                    done = _audit_broker(_Broker(ctx, name, plan))
                    if rows is not None:
                        rows(done.pop("rows"))
                    done.pop("rows", None)
                    cache[name] = done
                except Exception as e:  # noqa: BLE001 - reported by on_driver as that broker's audit_failed
                    cache[name] = e
    return cache


def _audit_broker(b: _Broker) -> dict:
    """One broker's timer messages traced a bucket of keys at a time (:func:`_trace_keys`): what the driver holds of
    them as Python objects is one bucket's; the rest is per broker (the counts, the summary) or a finding."""
    reach = T.wheel_reach_ms()
    reached, chain_findings = _chains(b)
    resume, first_covered = _queue_offsets(b)
    cp = TP.Checkpoint(b.read_time, resume, first_covered, reach_ms=reach)
    rows, found = [], []
    counts = dict.fromkeys(_COUNTED, 0)
    again, again_slot, enqueued_again, last_due = 0, None, 0, None
    due: dict[int, int] = {}  # the earliest deliver times of waiting messages and how many wait for each
    known = b.checkpoint is not None or b.cp_problem is not None  # an unreadable one is the metadata family's
    for paths in _trace_keys(b, reached, cp):
        if b.truncated_at is not None:
            for p in paths:
                if p.unit is not None and p.unit.timerlog_offset > b.truncated_at and \
                        p.state in TP.WAITING + TP.NEVER:
                    p.state = "lost"
                    p.reason = f"the timer's recovery truncates the timer log at the corrupt unit at {b.truncated_at}"
        rows.append(pa.Table.from_pylist([_row(b.name, p) for p in paths], schema=TIMERS))
        found += _path_findings(b, paths)
        counts["pending"] += sum(p.state in TP.WAITING and p.kind != "recall" for p in paths)
        counts["overdue"] += sum(p.state == "overdue" for p in paths)
        counts["fired"] += sum(p.state == "fired" for p in paths)
        counts["recalled"] += sum(p.state == "recalled" for p in paths)
        counts["lost"] += sum(p.state in TP.NEVER for p in paths)
        waiting = [p.deliver_ms for p in paths if p.state in TP.WAITING and p.kind != "recall"
                   and p.deliver_ms is not None]
        for t in waiting:
            due[t] = due.get(t, 0) + 1
        if waiting:
            last_due = max(waiting) if last_due is None else max(last_due, max(waiting))
        due = dict(sorted(due.items())[:5])  # the five earliest of all are among the five earliest so far
        if known:
            slots = [p.unit.slot_time_ms for p in paths if p.state in ("fired", "rolled") and p.unit is not None
                     and not T.dequeued(p.unit.slot_time_ms, b.read_time)]
            again += len(slots)
            again_slot = min([*slots, *([] if again_slot is None else [again_slot])], default=None)
            enqueued_again += sum(p.unit is not None and resume is not None and p.record.queue_offset >= resume
                                  and p.record.kept for p in paths)
        del paths
    counts["lost"] += _lost_units(b)
    table = pa.concat_tables(rows) if rows else TIMERS.empty_table()
    table = table.take(pc.sort_indices(table, [("physical_offset", "ascending"), ("timerlog_offset", "ascending")]))
    findings = chain_findings + _in_path_order(found) + _unit_findings(b) + \
        _file_findings(b, resume, again, again_slot, enqueued_again)
    summary = {**counts, "read_time_ms": b.read_time,
               "next_due": [{"due_ms": t, "messages": n} for t, n in due.items()], "last_due_ms": last_due}
    return {"findings": concat_findings(findings), "rows": table, "counts": counts, "summary": summary}


def _trace_keys(b: _Broker, reached, cp: TP.Checkpoint):
    """The paths of a broker's timer messages (store_format.timerpath.trace), a bucket of keys at a time: a record
    on rmq_sys_wheel_timer meets only records of its key (:func:`_keys`: its delete key, or the one a recall names)
    and the units that point at it, so records spread by key and units by their record's key trace as one."""
    recs = b.records
    key = _keys(recs)
    n = bucket_count(recs.num_rows + b.units.num_rows, max(1, buckets.ROWS_PER_BUCKET // _OBJECTS_PER_ROW))
    rb = (key_hash(key) % np.uint64(n)).astype(np.int64)
    on_timer = pc.fill_null(pc.equal(recs.column("topic"), L.TIMER_TOPIC), False)
    timer = pa.table({"physical_offset": recs.column("physical_offset").filter(on_timer),
                      "bucket": pa.array(rb).filter(on_timer)})
    timer = timer.group_by("physical_offset", use_threads=False).aggregate([("bucket", "last")])  # one record an offset
    at = pc.index_in(b.units.column("physical_offset"), value_set=timer.column("physical_offset"))
    ub = pc.fill_null(timer.column("bucket_last").take(at), -1).to_numpy(zero_copy_only=False)  # -1: no record
    for i in range(n):
        mine = recs.filter(pa.array(rb == i))
        if not mine.num_rows:
            continue
        records = [_record(r) for r in mine.to_pylist()]
        units = [_unit(r, reached) for r in b.units.filter(pa.array(ub == i)).to_pylist()]
        yield TP.trace(records, units, cp, b.as_of)


# a bucket of the trace holds its records and units as Python objects (dicts, TimerRecord, Unit, Path, row: a few KB
# a row, ~20x their Arrow rows): buckets of a quarter of buckets.ROWS_PER_BUCKET keep one near a bucket of columns
_OBJECTS_PER_ROW = 4


def _keys(records: pa.Table) -> pa.Array:
    """What joins records in the trace: ``<topic>+<UNIQ_KEY>`` (store_format.timer.delete_key; REAL_TOPIC for a
    record on rmq_sys_wheel_timer, the topic of a fired re-put), or a recall's TIMER_DEL_UNIQKEY (the key it
    names): a message's records, its deliveries, its roll re-puts and the recalls naming it share it."""
    on_timer = pc.fill_null(pc.equal(records.column("topic"), L.TIMER_TOPIC), False)
    topic = pc.if_else(on_timer, records.column("real_topic"), records.column("topic"))
    own = pc.binary_join_element_wise(pc.fill_null(topic, "None"), pc.fill_null(records.column("uniq_key"), "None"),
                                      "+")
    recall = pc.and_(on_timer, pc.is_valid(records.column("del_key")))
    return pc.if_else(recall, records.column("del_key"), own)


def _in_path_order(found: list[tuple]) -> list[pa.Table]:
    """The path findings of every bucket (``(check, order, row)``: :func:`_path_findings`) as one trace of the
    whole broker makes them: a check's rows in the paths' order, the checks in the order they first occur, the
    deliveries made twice last."""
    by_check: dict[str, list] = {}
    for check_id, order, row in found:
        by_check.setdefault(check_id, []).append((order, row))
    checks = sorted(by_check, key=lambda c: (c == "timers.delivered_twice", min(o for o, _ in by_check[c])))
    return [finding_rows(c, [r for _, r in sorted(by_check[c], key=lambda x: x[0])]) for c in checks]


def _unit(r: dict, reached: dict) -> TP.Unit:
    return TP.Unit(r["timerlog_offset"], r["file"], r["file_position"], r["magic"], r["write_time_ms"],
                   r["slot_time_ms"], r["physical_offset"], r["prev_pos"], reached.get(r["timerlog_offset"]))


def _record(r: dict) -> TP.TimerRecord:
    return TP.TimerRecord(r["physical_offset"], r["topic"], r["queue_id"], r["queue_offset"], r["uniq_key"],
                          r["real_topic"], r["real_queue_id"], r["out_ms"], r["roll_times"] or 0, r["del_key"],
                          r["enqueue_ms"], r["dequeue_ms"], r["store_timestamp"], bool(r["kept"]), r["segment"],
                          r["file_position"])


def _queue_offsets(b: _Broker) -> tuple[int | None, int | None]:
    """The queue offset of rmq_sys_wheel_timer/0 the enqueue resumes from (TimerMessageStore.recover: the last
    unit's record's queue offset + 1, no further than the checkpoint's masterTimerQueueOffset, inside the queue's
    bounds), and the first one the timer log still covers."""
    recs = b.records.filter(pc.fill_null(pc.equal(b.records.column("topic"), L.TIMER_TOPIC), False))
    queue = recs.group_by("physical_offset", use_threads=False).aggregate([("queue_offset", "last")])
    units = b.units
    at = pc.index_in(units.column("physical_offset"), value_set=queue.column("physical_offset"))
    covered = pc.min(queue.column("queue_offset_last").take(at)).as_py() if units.num_rows else None
    end = b.truncated_at
    tlo = units.column("timerlog_offset").to_numpy(zero_copy_only=False)
    before = np.flatnonzero(tlo < end) if end is not None else np.arange(len(tlo))
    last_at = at[int(before[np.argmax(tlo[before])])].as_py() if len(before) else None
    cp = b.checkpoint
    if last_at is not None:
        resume = queue.column("queue_offset_last")[last_at].as_py() + 1
    else:
        resume = cp.last_timer_queue_offset if cp is not None else 0
    if cp is not None and cp.master_timer_queue_offset is not None:
        resume = min(resume or 0, cp.master_timer_queue_offset)
    lo, hi = _timer_queue_bounds(b)
    if hi is not None:
        resume = max(lo, min(resume or 0, hi))
    return resume, covered


def _timer_queue_bounds(b: _Broker) -> tuple[int, int | None]:
    for r in b.ctx.queue_bounds.to_pylist():
        if r["broker"] == b.name and r["topic"] == L.TIMER_TOPIC and r["queue_id"] == L.TIMER_QUEUE_ID:
            return r["min_offset"], r["max_offset"]
    return 0, None


def _row(broker: str, p: TP.Path) -> dict:
    r, u, d = p.record, p.unit, p.delivery
    return {"broker": broker, "physical_offset": r.physical_offset, "queue_offset": r.queue_offset,
            "uniq_key": r.uniq_key, "real_topic": r.real_topic, "real_queue_id": r.real_queue_id, "kind": p.kind,
            "roll_times": r.roll_times, "deliver_ms": p.deliver_ms,
            "timerlog_offset": u.timerlog_offset if u else None, "timerlog_file": u.file if u else None,
            "slot_time_ms": u.slot_time_ms if u else None, "state": p.state, "reason": p.reason,
            "delivered_offset": d.physical_offset if d else None, "delivered_queue_offset": d.queue_offset if d else None,
            "dequeue_ms": d.dequeue_ms if d else None, "deliveries": len(p.deliveries),
            "next_offset": p.next_record.physical_offset if p.next_record else None}


def _where(p: TP.Path) -> dict:
    """A timer message's finding: at its unit (the timer log) or, without one, at its record."""
    r, u = p.record, p.unit
    place = {"file": f"{L.TIMER_LOG_DIR}/{u.file}", "file_position": u.file_position} if u is not None else \
        {"file": r.segment, "file_position": r.file_position}
    return {**place, "physical_offset": r.physical_offset, "topic": r.real_topic, "queue_id": r.real_queue_id}


def _details(p: TP.Path, **extra) -> dict:
    r, u = p.record, p.unit
    return {"uniq_key": r.uniq_key, "key": r.uniq_key, "deliver_ms": p.deliver_ms,
            "timer_queue_offset": r.queue_offset, "timerlog_offset": u.timerlog_offset if u else None,
            "slot_time_ms": u.slot_time_ms if u else None, **extra}


def _path_findings(b: _Broker, paths: list[TP.Path]) -> list[tuple]:
    """The findings about some timer messages, as ``(check, order, row)``: ``order`` places the row where a trace of
    the whole broker makes it (:func:`_in_path_order`): its path's (record, unit), or a delivery's place."""
    rows: list[tuple] = []

    def add(check_id, p, values=None, details=None, order=None, **where):
        rows.append((check_id, order or _order(p), {
            "broker": b.name, **_where(p), **where, "values": {"real_topic": p.record.real_topic, **(values or {})},
            "details": _details(p, **(details or {}))}))

    per_record: dict[int, list[TP.Path]] = {}
    for p in paths:
        per_record.setdefault(p.record.physical_offset, []).append(p)
        due = p.deliver_ms
        ago = (b.as_of - due) // 1000 if due is not None else None
        if p.state == "overdue":
            add("timers.overdue", p, {"due_seconds": ago}, {"due_seconds": ago})
        elif p.state == "lost_past_reach":
            add("timers.lost_past_reach", p, {"due_seconds": ago}, {"due_seconds": ago})
        elif p.state == "unreachable":
            add("timers.unit_unreachable", p, {"timerlog_offset": p.unit.timerlog_offset,
                                               "slot_time": _iso(p.unit.slot_time_ms)})
        elif p.state == "lost":
            roll = p.kind == "roll" or (p.unit is None and p.record.roll_times > 0)
            add("timers.roll_chain_broken" if roll else "timers.lost", p, {"reason": p.reason}, {"reason": p.reason})
        elif p.state == "dropped" and p.unit is not None and not T.dequeued(p.unit.slot_time_ms, b.read_time):
            add("timers.unit_past_recovered_end", p, {"timerlog_offset": p.unit.timerlog_offset,
                                                      "target": p.record.physical_offset,
                                                      "recovered_end": b.recovered_end,
                                                      "slot_time": _iso(p.unit.slot_time_ms)})
        if p.state == "fired" and p.recalls:
            add("timers.recalled_but_delivered", p, {"delivered_at": p.delivery.physical_offset,
                                                     "reason": _why_delivered(p)},
                {"reason": _why_delivered(p), "recall_offset": p.recalls[0].physical_offset})
    for phys, mine in per_record.items():
        deliveries = [d for p in mine for d in p.deliveries]
        if len(deliveries) > 1:
            p = mine[0]
            extra = sorted(deliveries, key=lambda d: d.physical_offset)[1:]
            for k, d in enumerate(extra):
                add("timers.delivered_twice", p, {"deliveries": len(deliveries)},
                    {"deliveries": len(deliveries), "first_delivery": deliveries[0].physical_offset},
                    order=(phys, k), file=d.segment, file_position=d.file_position, physical_offset=d.physical_offset,
                    topic=d.topic, queue_id=d.queue_id, queue_offset=d.queue_offset)
    return rows


def _order(p: TP.Path) -> tuple[int, int]:
    """Where a path comes in a trace of the whole broker: by its record's offset, then its unit's."""
    return p.record.physical_offset, -1 if p.unit is None else p.unit.timerlog_offset


def _why_delivered(p: TP.Path) -> str:
    recall, d, u = p.recalls[0], p.delivery, p.unit
    slot = u.slot_time_ms if u is not None else p.deliver_ms
    if recall.out_ms is not None and recall.out_ms != slot:
        return f"the recall names the slot {_iso(recall.out_ms)}, the message is in the slot {_iso(slot)}"
    if d.dequeue_ms is not None and recall.store_timestamp > d.dequeue_ms:
        return f"the recall was stored at {_iso(recall.store_timestamp)}, after the delivery at {_iso(d.dequeue_ms)}"
    return (f"the recall was stored at {_iso(recall.store_timestamp)}, before the slot was read at "
            f"{_iso(d.dequeue_ms)}, but its delete entry was not in the slot then")


def _lost_units(b: _Broker) -> int:
    """Units still to be read that point at no timer record: the timer reads nothing there."""
    t = b.bad_units
    if not t.num_rows:
        return 0
    slot = t.column("slot_time_ms").to_numpy()
    return int((slot >= (b.read_time or 0)).sum())


def _unit_findings(b: _Broker) -> list[pa.Table]:
    rows: dict[str, list[dict]] = {}
    for u in b.bad_units.to_pylist():
        waiting = not T.dequeued(u["slot_time_ms"], b.read_time)
        severity = Severity.ERROR if waiting else Severity.WARNING
        where = {"broker": b.name, "file": f"{L.TIMER_LOG_DIR}/{u['file']}", "file_position": u["file_position"],
                 "physical_offset": u["physical_offset"]}
        details = {"timerlog_offset": u["timerlog_offset"], "slot_time_ms": u["slot_time_ms"], "magic": u["magic"],
                   "store_size": u["store_size"], "still_to_fire": waiting}
        phys = u["physical_offset"]
        values = {"timerlog_offset": u["timerlog_offset"], "target": phys}
        target = u["target"]
        if target == "in_damage":
            rows.setdefault("timers.unit_in_damage", []).append({**where, "values": {
                **values, "item_reason": u["item_reason"], "item_position": u["item_position"]}, "details": details})
        elif target == "outside" and (phys < 0 or phys >= b.data_end):
            rows.setdefault("timers.unit_outside_commitlog", []).append({**where, "severity": severity, "values": {
                **values, "low": b.low, "data_end": b.data_end}, "details": details})
        elif target == "outside" and phys < b.low:
            if waiting:  # its record went with the CommitLog's retention before the timer read it
                rows.setdefault("timers.lost", []).append({**where, "values": {
                    "real_topic": None, "reason": f"its record at {phys} is before the CommitLog's first segment "
                                                  f"({b.low}): deleted before its slot {_iso(u['slot_time_ms'])} was "
                                                  "read"},
                    "details": {**details, "reason": "record deleted by CommitLog retention"}})
        else:
            what = {"other_topic": f"a record of {u['record_topic']}, not {L.TIMER_TOPIC}",
                    "size_mismatch": f"a record of {u['record_size']} bytes, the unit says {u['store_size']}",
                    "mid_record": f"the middle of the record at {u['item_position']}",
                    "outside": "bytes where no record starts"}[target]
            rows.setdefault("timers.unit_not_timer_record", []).append({**where, "severity": severity, "values": {
                **values, "what": what}, "details": {**details, "what": what}})
    return [finding_rows(check_id, r) for check_id, r in rows.items()]


def _file_findings(b: _Broker, resume: int | None, again: int, again_slot: int | None,
                   enqueued_again: int) -> list[pa.Table]:
    """The timer store's files against the paths: ``again`` fired or rolled messages whose slot (the first
    ``again_slot``) the checkpoint has not read, ``enqueued_again`` records the timer log holds at or past the queue
    offset ``resume`` the enqueue resumes from (both counted only when the checkpoint is known)."""
    out = []
    for c in b.corrupt.to_pylist():
        lost = None
        if b.truncated_at is not None and c["timerlog_offset"] == b.truncated_at:
            lost = int(pc.sum(pc.greater(b.units.column("timerlog_offset"), b.truncated_at)).as_py() or 0) + \
                int(pc.sum(pc.greater(b.bad_units.column("timerlog_offset"), b.truncated_at)).as_py() or 0)
        out.append(finding_rows("timers.corrupt_unit", [{
            "broker": b.name, "file": f"{L.TIMER_LOG_DIR}/{c['file']}", "file_position": c["file_position"],
            "values": {"timerlog_offset": c["timerlog_offset"], "reason": _corrupt_reason(c), "lost": lost},
            "details": {"reason": c["reason"], "size": c["size"], "magic": c["magic"],
                        "recovery_truncates_here": lost is not None}}]))
    cp_file = f"config/{L.TIMER_CHECK_FILE}"
    if b.cp_problem is not None:
        p = b.cp_problem
        out.append(finding_rows("timers.timercheck_bad_length", [{
            "broker": b.name, "file": cp_file, "file_position": min(p["length"], p["page"]), "severity": p["severity"],
            "values": {"length": p["length"], "page": p["page"], "reason": p["reason"]},
            "details": {"length": p["length"], "reason": p["reason"]}}]))
    if b.wheel is not None and b.wheel.problem is not None:
        expected = L.timer_wheel_file_size()
        out.append(finding_rows("timers.wheel_bad_length", [{
            "broker": b.name, "file": L.TIMER_WHEEL_FILE, "file_position": min(b.wheel.file_length, expected),
            "values": {"length": b.wheel.file_length, "expected": expected},
            "details": {"length": b.wheel.file_length}}]))
    behind = []
    if again:
        behind.append((0, f"lastReadTimeMs {_iso(b.read_time or 0)} is before the slots of "
                          f"{plural(again, 'timer message')} already fired or rolled (the first at "
                          f"{_iso(again_slot)}): the broker reads those slots again", again))
    if enqueued_again:
        behind.append((16, f"the timer resumes enqueuing rmq_sys_wheel_timer/0 at {resume}, before "
                           f"{plural(enqueued_again, 'record')} the timer log already holds: they are enqueued "
                           "again", enqueued_again))
    out.append(finding_rows("timers.checkpoint_behind", [{
        "broker": b.name, "file": cp_file, "file_position": pos, "values": {"reason": why},
        "details": {"reason": why, "count": n}} for pos, why, n in behind]))
    ahead = []
    cp = b.checkpoint
    if cp is not None and cp.last_timer_log_flush_pos is not None and cp.last_timer_log_flush_pos > b.log_end:
        ahead.append((8, Severity.ERROR, f"lastTimerLogFlushPos {cp.last_timer_log_flush_pos} is past the timer log's "
                                         f"end ({b.log_end}): units the broker flushed are missing"))
    lo, hi = _timer_queue_bounds(b)
    if cp is not None and hi is not None and (cp.last_timer_queue_offset or 0) > hi:
        ahead.append((16, Severity.WARNING, f"lastTimerQueueOffset {cp.last_timer_queue_offset} is past the end of "
                                            f"rmq_sys_wheel_timer/0 ({hi}): records the timer enqueued are missing "
                                            "from its queue"))
    out.append(finding_rows("timers.checkpoint_ahead", [{
        "broker": b.name, "file": cp_file, "file_position": pos, "severity": sev, "values": {"reason": why},
        "details": {"reason": why}} for pos, sev, why in ahead]))
    return out


def _corrupt_reason(c: dict) -> str:
    return {"BAD_LENGTH": f"size {c['size']}, not {T.UNIT_SIZE} (or a blank that does not end the file)",
            "BAD_MAGIC": f"magic 0x{(c['magic'] or 0) & 0xFFFFFFFF:X} has bits beyond 0xF",
            "TRUNCATED": "a partial unit"}.get(c["reason"], c["reason"])


def _chains(b: _Broker) -> tuple[dict, list[pa.Table]]:
    """Walk every wheel slot the timer will still read (its time at or after lastReadTimeMs), from its head as the
    timer's recovery leaves it (each unit it scans makes itself its slot's lastPos), back through prevPos: which
    units are reached, and where a chain loops or breaks.  Vectorized over the slots; a step must go strictly back,
    so at most one step per unit."""
    entries = pa.concat_tables([b.units.select(["timerlog_offset", "prev_pos", "slot_time_ms", "file",
                                                "file_position"]),
                                b.bad_units.select(["timerlog_offset", "prev_pos", "slot_time_ms", "file",
                                                    "file_position"])]).sort_by("timerlog_offset")
    offs = entries.column("timerlog_offset").to_numpy()
    prev = entries.column("prev_pos").to_numpy()
    slot = entries.column("slot_time_ms").to_numpy()
    read_from = b.read_time or 0
    heads = _heads(b, offs, slot)
    times = np.array([t for t in heads if t >= read_from], np.int64)
    cur = np.array([heads[t] for t in times.tolist()], np.int64)
    reached = np.zeros(len(offs), bool)
    corrupt = set(b.corrupt.column("timerlog_offset").to_pylist())
    loops, breaks = [], []
    n = len(offs)
    active = cur >= 0
    for _ in range(n + 1):
        if not active.any():
            break
        idx = np.searchsorted(offs, cur)
        found = active & (idx < n)
        found[found] = offs[idx[found]] == cur[found]
        for k in np.flatnonzero(active & ~found).tolist():
            at = int(cur[k])
            why = "it reaches the corrupt unit there" if at in corrupt else \
                "it points past the timer log's end" if at >= b.log_end else "no unit starts there"
            breaks.append((int(times[k]), at, why))
        active &= found
        i = idx[active]
        reached[i] = True
        nxt = prev[i]
        loop = (nxt != -1) & (nxt >= cur[active])
        for k, j in zip(np.flatnonzero(active)[loop].tolist(), i[loop].tolist()):
            loops.append((int(times[k]), j))
        cur[active] = nxt
        done = np.zeros(len(cur), bool)
        done[np.flatnonzero(active)[loop | (nxt == -1)]] = True
        active &= ~done
    e = entries.select(["file", "file_position"]).take(pa.array([j for _, j in loops], pa.int64())).to_pylist()
    findings = [finding_rows("timers.chain_loop", [{
        "broker": b.name, "file": f"{L.TIMER_LOG_DIR}/{e[k]['file']}", "file_position": e[k]["file_position"],
        "values": {"slot_time": _iso(t), "timerlog_offset": int(offs[j]), "prev_pos": int(prev[j])},
        "details": {"slot_time_ms": t, "prev_pos": int(prev[j])}} for k, (t, j) in enumerate(loops)])]
    findings.append(finding_rows("timers.chain_broken", [{
        "broker": b.name, "file": L.TIMER_WHEEL_FILE,
        "file_position": T.slot_index(t) * T.SLOT_SIZE,
        "values": {"slot_time": _iso(t), "timerlog_offset": at, "reason": why},
        "details": {"slot_time_ms": t, "timerlog_offset": at, "reason": why}} for t, at, why in breaks]))
    return {int(o): bool(r) for o, r in zip(offs.tolist(), reached.tolist())}, findings


def _heads(b: _Broker, offs: np.ndarray, slot: np.ndarray) -> dict[int, int]:
    """Slot time -> lastPos as the timer's recovery leaves the wheel (store_format.timer: the one rule explain
    follows too)."""
    flush = b.checkpoint.last_timer_log_flush_pos if b.checkpoint is not None else None
    return T.slot_heads(b.wheel, offs, slot, T.rescan_start(b.plan.timer_log_files, flush), b.truncated_at)


def summary(ctx) -> dict:
    """summary.json's ``timers`` per broker with a timer store: how many timer messages wait, and when they are due."""
    return {name: {"timers": b["summary"]} for name, b in _computed(ctx).items() if not isinstance(b, Exception)}


def _section_row(broker: dict) -> list | None:
    """A broker's row of the report's timer section: how many timer messages wait, and when the next ones are due."""
    t = broker.get("timers")
    if t is None:
        return None
    return [broker["name"], t["pending"], t["overdue"], t["fired"], t["recalled"], t["lost"], t["read_time_ms"],
            [(d["due_ms"], d["messages"]) for d in t["next_due"]], t["last_due_ms"]]


SECTION = SummaryView("Timer messages", 20, (
    ("broker", "text"), ("pending", "number"), ("overdue", "number"), ("fired", "number"), ("recalled", "number"),
    ("lost", "number"), ("wheel read up to", "time"), ("next due", "time_counts"), ("last due", "time")),
    _section_row, anchor="timers", note="tables/timers/ has every timer message's path and state.")

FAMILY = Family(
    "timers", "5.x timer messages: pending, overdue, fired, recalled and lost; the timer log, wheel and timercheck "
              "against the CommitLog",
    in_survey={"timerlog": corrupt_in_survey}, in_range=in_range, on_driver=on_driver, summary=summary,
    applies=applies, sections=(SECTION,),
    emits={"timers.corrupt": CORRUPT, "timers.units": UNITS, "timers.records": RECORDS},
    reads=("timers.units", "timers.records", "timers.corrupt", "survey.timerlog_files"),
    tables={"timers": TIMERS},
    metrics={"timers_pending": "timer messages the broker will still deliver (broker)",
             "timers_overdue": "of them, due before the dump time and not read (broker)",
             "timers_fired": "timer messages delivered to their real topic (broker)",
             "timers_recalled": "timer messages recalled before delivery (broker)",
             "timers_lost": "timer messages the broker will never deliver (broker)"})
