"""The path of a timer message through a 5.x broker store, as RocketMQ 5.3.3's timer moves it, decided from the
store's files alone: what became of every record on ``rmq_sys_wheel_timer`` and of its timer-log unit.  The one
model behind the audit's ``timers`` family (which gathers its inputs in bulk) and ``query``'s explanation of one
message (which gathers them for one UNIQ_KEY).

The path (store-format-5x.md §2.3, §2.9)::

    put        the record on rmq_sys_wheel_timer/0: TIMER_OUT_MS (the deliver time), REAL_TOPIC, REAL_QID;
               a recall is such a record too, with TIMER_DEL_UNIQKEY = <REAL_TOPIC>+<UNIQ_KEY>
    enqueue    one 52-byte timer-log unit in the wheel slot of its time (magic 1; 5 a recall's delete entry);
               beyond the roll window the unit waits in a nearer slot (magic 3, 7 for a recall); a record already
               due when read goes straight to the re-put (no unit)
    dequeue    every slot before the checkpoint's lastReadTimeMs has been read: delete entries first (their keys
               collected), then each unit's record re-put -- to REAL_TOPIC/REAL_QID (``fired``, the new record
               keeps UNIQ_KEY, REAL_TOPIC, and gets TIMER_ENQUEUE_MS = the unit's write time and TIMER_DEQUEUE_MS),
               or, for a roll, back to rmq_sys_wheel_timer with TIMER_ROLL_TIMES + 1 (``rolled``), unless its key
               was collected (``recalled``: dropped).  A roll unit is re-put whatever its magic, a recall's (7) too,
               so a recall travels with the message it names: it keeps TIMER_OUT_MS (the message's own, from the
               recall handle) and lands as a delete entry (5) in the message's slot before that slot is read

So a unit is joined to its record by physical offset, to its delivery by (REAL_TOPIC, UNIQ_KEY, TIMER_ENQUEUE_MS =
the unit's write time), to its roll's next record by (UNIQ_KEY, REAL_TOPIC, TIMER_ROLL_TIMES + 1, the same write
time), and to a recall by (the delete key, the same slot: the slot its delete entry is in, or, for a recall still
rolling or not enqueued yet, the slot it will land in, its TIMER_OUT_MS).

States (:data:`STATES`): ``pending`` (in the wheel, due later), ``overdue`` (in the wheel, due before the dump
time and not read), ``queued`` (on rmq_sys_wheel_timer at or past the queue offset the timer resumes from: not in
the wheel yet), ``fired``, ``rolled``, ``recalled``, ``recall`` (a recall's own entry), and what the broker will
never deliver: ``lost`` (read, or due to be, and never delivered: ``reason`` says why), ``lost_past_reach`` (due
more than the wheel's reach before the dump time: a restarted wheel never reads its slot), ``unreachable`` (in the
timer log but on no chain of the wheel: never read); ``dropped`` (the record lies past the recovered CommitLog end)
and ``expired`` (read long ago; its unit went with the cleaned timer log).
"""
from __future__ import annotations

from dataclasses import dataclass, field

from . import layout as L
from .timer import delete_key, dequeued
from .times import format_iso_z as _iso

STATES = ("pending", "overdue", "queued", "fired", "rolled", "recalled", "recall", "lost", "lost_past_reach",
          "unreachable", "dropped", "expired")
#: the states of a message the broker will still deliver
WAITING = ("pending", "overdue", "queued")
#: the states of a message the broker will never deliver
NEVER = ("lost", "lost_past_reach", "unreachable")


@dataclass(frozen=True)
class TimerRecord:
    """A record the timer reads or writes: on rmq_sys_wheel_timer (a put, a roll's re-put, a recall), or a fired
    re-put on its real topic.  Integer properties that do not parse are None."""

    physical_offset: int
    topic: str
    queue_id: int
    queue_offset: int
    uniq_key: str | None
    real_topic: str | None
    real_queue_id: int | None = None
    out_ms: int | None = None  # TIMER_OUT_MS: the deliver time, rounded to the precision
    roll_times: int = 0  # TIMER_ROLL_TIMES
    del_key: str | None = None  # TIMER_DEL_UNIQKEY: a recall
    enqueue_ms: int | None = None  # TIMER_ENQUEUE_MS of a re-put: the unit's write time (Long.MAX_VALUE: no unit)
    dequeue_ms: int | None = None  # TIMER_DEQUEUE_MS of a re-put
    store_timestamp: int = 0
    kept: bool = True  # before the recovered CommitLog end
    segment: str | None = None
    file_position: int | None = None


@dataclass(frozen=True)
class Unit:
    """A timer-log unit that points at a record on rmq_sys_wheel_timer, and whether a wheel slot's chain reaches it
    (None: not known, taken as reached)."""

    timerlog_offset: int
    file: str
    file_position: int
    magic: int
    write_time_ms: int
    slot_time_ms: int
    physical_offset: int
    prev_pos: int = -1
    reachable: bool | None = None

    @property
    def roll(self) -> bool:
        return bool(self.magic & L.TIMER_MAGIC_ROLL)

    @property
    def delete(self) -> bool:
        return bool(self.magic & L.TIMER_MAGIC_DELETE)


@dataclass(frozen=True)
class Checkpoint:
    """What the timer's own files say, as the path needs it: the checkpoint's lastReadTimeMs (None: no readable
    checkpoint, read as 0 by the broker), the queue offset of rmq_sys_wheel_timer/0 the enqueue resumes from
    (records at or past it are not in the wheel yet; None: every record is), and the first queue offset whose
    record the timer log still covers (older units went with the cleaned timer log; None: all)."""

    last_read_time_ms: int | None
    resume_queue_offset: int | None = None
    first_covered_queue_offset: int | None = None
    precision_ms: int = L.DEFAULT_TIMER_PRECISION_MS
    reach_ms: int = (L.DEFAULT_TIMER_SLOTS_TOTAL - L.TIMER_BLANK_SLOTS) * L.DEFAULT_TIMER_PRECISION_MS
    overdue_grace_ms: int = 2 * L.DEFAULT_TIMER_FLUSH_INTERVAL_MS


@dataclass
class Path:
    """One timer-log unit (or, for a record the timer has not enqueued, the record alone) and what became of it."""

    record: TimerRecord
    unit: Unit | None
    kind: str  # "timer" | "roll" (the unit waits to roll on) | "recall"
    state: str
    reason: str | None = None
    deliveries: list[TimerRecord] = field(default_factory=list)  # its fired re-puts (more than one: delivered twice)
    next_record: TimerRecord | None = None  # a roll's re-put on rmq_sys_wheel_timer
    recalls: list[TimerRecord] = field(default_factory=list)  # recalls naming it (any slot)
    recalled_in_slot: bool = False  # a recall's delete entry is in its slot: the broker drops it when it reads it

    @property
    def deliver_ms(self) -> int | None:
        """When the message is due: TIMER_OUT_MS (a roll's unit waits in an earlier slot), else the slot time."""
        if self.record.out_ms is not None:
            return self.record.out_ms
        return self.unit.slot_time_ms if self.unit is not None else None

    @property
    def delivery(self) -> TimerRecord | None:
        return self.deliveries[0] if self.deliveries else None


def trace(records: list[TimerRecord], units: list[Unit], checkpoint: Checkpoint, as_of: int) -> list[Path]:
    """The path of every record on rmq_sys_wheel_timer in ``records`` (the fired re-puts in ``records`` are joined to
    them), one :class:`Path` per unit pointing at it, or one for the record alone.  ``as_of``: the dump time (ms)."""
    timer = [r for r in records if r.topic == L.TIMER_TOPIC]
    deliveries: dict[tuple, list[TimerRecord]] = {}
    for r in records:
        if r.topic != L.TIMER_TOPIC and r.dequeue_ms is not None:
            deliveries.setdefault((r.topic, r.uniq_key, r.enqueue_ms), []).append(r)
    # a roll's next record is its own record's re-put: a recall rolls too, with the same UNIQ_KEY (and, enqueued in
    # the same millisecond, the same TIMER_ENQUEUE_MS), and carries its TIMER_DEL_UNIQKEY on
    by_roll = {(r.uniq_key, r.real_topic, r.roll_times, r.enqueue_ms, r.del_key): r for r in timer if r.roll_times}
    recalls: dict[str, list[TimerRecord]] = {}
    for r in timer:
        if r.del_key is not None:
            recalls.setdefault(r.del_key, []).append(r)
    by_offset = {r.physical_offset: r for r in timer}
    units_of: dict[int, list[Unit]] = {}
    in_slot: set[tuple[str, int]] = set()  # (delete key, slot time) of recall entries the dequeue collects
    for u in units:
        units_of.setdefault(u.physical_offset, []).append(u)
        rec = by_offset.get(u.physical_offset)
        if rec is not None and rec.del_key is not None and u.delete and not u.roll:
            in_slot.add((rec.del_key, u.slot_time_ms))
    # a recall still on its way to its slot (a roll unit not read yet, or a record not enqueued yet) lands there as a
    # delete entry before the slot is read: (delete key, slot time) as it will be collected
    for r in timer:
        if r.del_key is not None and r.out_ms is not None and r.kept and _on_its_way(r, units_of, checkpoint):
            in_slot.add((r.del_key, r.out_ms))
    out = []
    for r in sorted(timer, key=lambda r: r.physical_offset):
        mine = sorted(units_of.get(r.physical_offset, ()), key=lambda u: u.timerlog_offset)
        for u in mine or [None]:
            out.append(_path(r, u, checkpoint, as_of, deliveries, by_roll, recalls, in_slot))
    return out


def _on_its_way(r: TimerRecord, units_of: dict, cp: Checkpoint) -> bool:
    """Whether the record still moves towards its slot: a roll unit of it the dequeue has not read yet (read, it is
    re-put and goes round again), or no unit yet and a queue offset the enqueue has still to read."""
    mine = units_of.get(r.physical_offset, ())
    if mine:
        return any(u.roll and not dequeued(u.slot_time_ms, cp.last_read_time_ms) for u in mine)
    return cp.resume_queue_offset is not None and r.queue_offset >= cp.resume_queue_offset


def _path(r: TimerRecord, u: Unit | None, cp: Checkpoint, as_of: int, deliveries, by_roll, recalls,
          in_slot) -> Path:
    recall = r.del_key is not None
    kind = "recall" if recall else "roll" if u is not None and u.roll else "timer"
    p = Path(r, u, kind, "pending")
    key = delete_key(r.real_topic, r.uniq_key)
    if not recall:
        p.recalls = recalls.get(key, [])
    if u is None:
        p.deliveries = deliveries.get((r.real_topic, r.uniq_key, L.TIMER_ENQUEUE_NEVER), [])
        p.recalled_in_slot = not recall and r.out_ms is not None and (key, r.out_ms) in in_slot
        p.state, p.reason = _without_unit(r, p, cp, as_of)
        return p
    # the delete entry is in its slot, or (a roll still on its way) in the slot it will land in: TIMER_OUT_MS
    p.recalled_in_slot = not recall and ((key, u.slot_time_ms) in in_slot or (
        u.roll and r.out_ms is not None and (key, r.out_ms) in in_slot
        and not dequeued(u.slot_time_ms, cp.last_read_time_ms)))
    if kind == "roll":
        p.next_record = by_roll.get((r.uniq_key, r.real_topic, r.roll_times + 1, u.write_time_ms, r.del_key))
    else:
        p.deliveries = deliveries.get((r.real_topic, r.uniq_key, u.write_time_ms), [])
    p.state, p.reason = _with_unit(r, u, p, cp, as_of)
    return p


def _with_unit(r: TimerRecord, u: Unit, p: Path, cp: Checkpoint, as_of: int) -> tuple[str, str | None]:
    done = p.next_record is not None if p.kind == "roll" else bool(p.deliveries)
    if p.kind == "recall":
        return "recall", None
    if done:  # read already, or (the checkpoint behind) read and to be read again
        return ("rolled" if p.kind == "roll" else "fired"), None
    if p.recalled_in_slot:
        return "recalled", None
    if dequeued(u.slot_time_ms, cp.last_read_time_ms):
        if not r.kept:
            return "dropped", "its record lies past the recovered CommitLog end"
        if p.kind == "roll":
            return "lost", (f"its slot {_iso(u.slot_time_ms)} was read but no roll re-put (TIMER_ROLL_TIMES "
                            f"{r.roll_times + 1}) is in the CommitLog: the roll chain ends here")
        return "lost", (f"its slot {_iso(u.slot_time_ms)} was read (lastReadTimeMs {_iso(cp.last_read_time_ms)}) but "
                        f"no record with its UNIQ_KEY reached {r.real_topic}")
    return _waiting(r, u.slot_time_ms, u.reachable, cp, as_of)


def _without_unit(r: TimerRecord, p: Path, cp: Checkpoint, as_of: int) -> tuple[str, str | None]:
    if p.deliveries:
        return "fired", None  # already due when the timer read it: re-put at once, no unit
    if p.kind == "recall":
        return "recall", None
    if not r.kept:
        return "dropped", "its record lies past the recovered CommitLog end"
    if cp.resume_queue_offset is not None and r.queue_offset >= cp.resume_queue_offset:
        if p.recalled_in_slot:  # enqueued later, into the slot a recall's delete entry reaches too
            return "recalled", None
        return _waiting(r, r.out_ms, None, cp, as_of, queued=True)
    if cp.first_covered_queue_offset is not None and r.queue_offset < cp.first_covered_queue_offset:
        return "expired", "older than every unit of the timer log (cleaned)"
    if r.roll_times:
        return "lost", (f"the roll re-put (TIMER_ROLL_TIMES {r.roll_times}) is before the queue offset the timer "
                        f"resumes from ({cp.resume_queue_offset}) but no timer-log unit holds it: the roll chain ends "
                        "here")
    return "lost", (f"before the queue offset the timer resumes from ({cp.resume_queue_offset}), so enqueued, but no "
                    "timer-log unit holds it and it was never delivered")


def _waiting(r: TimerRecord, due: int | None, reachable: bool | None, cp: Checkpoint, as_of: int, *,
             queued: bool = False) -> tuple[str, str | None]:
    if not r.kept:
        return "dropped", "its record lies past the recovered CommitLog end: recovery drops it before it fires"
    if reachable is False:
        return "unreachable", "on no chain of the wheel: the dequeue never reads it"
    if due is not None and due < as_of - cp.reach_ms:
        return "lost_past_reach", (f"due {as_of - due} ms before the dump time, more than the wheel's reach "
                                   f"({cp.reach_ms} ms): a restarted timer starts reading after its slot")
    if due is not None and due < as_of - cp.overdue_grace_ms:
        return "overdue", f"due {as_of - due} ms before the dump time"
    return ("queued" if queued else "pending"), None


__all__ = ["STATES", "WAITING", "NEVER", "TimerRecord", "Unit", "Checkpoint", "Path", "trace"]
