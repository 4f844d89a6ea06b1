"""What ``query --explain`` says of a 5.x broker's timer and POP messages: a timer message's path (put on
rmq_sys_wheel_timer, in the wheel slot for time T, fired at T' as record M, or pending, recalled, rolled, lost and
why) and a POP-consumed message's state (popped by a group, then acked, in flight, revive pending, revived as a
retry record, or lost).  The same models as the audit's ``timers`` and ``pop`` families (store_format.timerpath,
store_format.popstate), fed with what a point lookup reads: the message's records by their index keys, its
timer-log units, the wheel slot's chain, config/timercheck; the revive topic's and the timer queue's POP records,
consumerOffset.json.  No Spark.

``explain(store, broker, hits, ...)`` returns ``(reason, detail, physical_offset)`` triples for jobs/query.py to
print beside its own explanations; a 4.x store gets none.
"""
from __future__ import annotations

from dataclasses import replace

import numpy as np

from runtime.display import format_iso_z
from store_format import layout as L
from store_format import pop as P
from store_format import popstate as PS
from store_format import timer as T
from store_format import timerpath as TP
from store_format.config import consumer_offsets
from store_format.errors import StoreFormatError
from store_format.features import store_features
from store_format.javahash import tags_code
from store_format.message import Message
from store_format.store import Store

_TIMER_MARKS = (L.PROPERTY_TIMER_OUT_MS, L.PROPERTY_TIMER_DEQUEUE_MS, L.PROPERTY_TIMER_DEL_UNIQKEY)
_POP_TAG_CODES = {tags_code(t) for t in P.POP_TAGS}


def explain(store: Store, hits: list[Message], *, key: str | None = None, topic: str | None = None,
            recovered_end: int | None = None) -> list[tuple[str, str, int | None]]:
    """The timer paths and POP states of the messages ``hits`` found in ``store`` (and, for ``--topic T --key K``,
    of a timer message for T not delivered yet: it is on rmq_sys_wheel_timer, under K there)."""
    features = store_features(store.loc)
    if not features.is_5x:
        return []
    out = []
    if features.timer_store:
        out += _timer_paths(store, hits, key, topic, recovered_end)
    out += _pop_states(store, [m for m in hits if not _system(m.topic)])
    return out


def _system(topic: str) -> bool:
    return topic == L.TIMER_TOPIC or topic.startswith((L.REVIVE_TOPIC_PREFIX, L.RETRY_GROUP_TOPIC_PREFIX,
                                                       L.DLQ_GROUP_TOPIC_PREFIX)) or topic in L.SYSTEM_TOPICS


# ------------------------------------------------------------------------------------------------ timers


def _timer_paths(store: Store, hits: list[Message], key, topic, recovered_end) -> list[tuple]:
    uniq = {m.uniq_key for m in hits if m.uniq_key and (m.topic == L.TIMER_TOPIC or any(
        m.properties.get(p) is not None for p in _TIMER_MARKS))}
    if key is not None and topic is not None and topic != L.TIMER_TOPIC:  # a timer message for T still waiting
        uniq |= {m.uniq_key for m in _lookup(store, L.TIMER_TOPIC, key)
                 if m.uniq_key and m.properties.get(L.PROPERTY_REAL_TOPIC) == topic}
    if not uniq:
        return []
    try:
        cp = T.read_timer_checkpoint(store.loc.child("config").child(L.TIMER_CHECK_FILE))
    except (StoreFormatError, OSError):
        cp = None
    read = cp.last_read_time_ms if cp is not None else None
    resume = None
    if cp is not None and cp.last_timer_queue_offset is not None:
        resume = min(cp.last_timer_queue_offset, cp.master_timer_queue_offset or cp.last_timer_queue_offset)
    log = _TimerLogFacts(store, cp)
    out = []
    for u in sorted(uniq):
        timer = [m for m in _lookup(store, L.TIMER_TOPIC, u) if m.uniq_key == u]
        if not timer:
            continue
        real = {m.properties.get(L.PROPERTY_REAL_TOPIC) for m in timer} - {None}
        delivered = [m for t in sorted(real) for m in _lookup(store, t, u)
                     if m.uniq_key == u and m.properties.get(L.PROPERTY_TIMER_DEQUEUE_MS) is not None]
        records = [_record(m, recovered_end) for m in timer + delivered]
        units = log.units_at({m.physical_offset for m in timer})
        as_of = _dump_time(store, records)
        chains = {unit.slot_time_ms: log.chain(unit.slot_time_ms) for unit in units
                  if not T.dequeued(unit.slot_time_ms, read)}
        reached = [unit if chains.get(unit.slot_time_ms) is None else
                   replace(unit, reachable=unit.timerlog_offset in chains[unit.slot_time_ms].positions)
                   for unit in units]
        paths = TP.trace(records, reached, TP.Checkpoint(read, resume, reach_ms=T.wheel_reach_ms()), as_of)
        for p in paths:
            lines = _path_lines(p, read, chains.get(p.unit.slot_time_ms) if p.unit is not None else None)
            waiting = lines[-1][0] in tuple(f"TIMER_{s.upper()}" for s in TP.WAITING)
            blocked = log.first_loop(read, p.unit.slot_time_ms if p.unit is not None else p.deliver_ms or 0) \
                if waiting else None
            if blocked is not None:
                t, walk = blocked
                last = walk.units[-1]
                lines[-1] = ("TIMER_BLOCKED_BY_LOOP", f"not fired, and it will not be: the chain of the earlier wheel "
                             f"slot for {_when(t)} loops at the timer-log unit at {last.timerlog_offset} (prevPos "
                             f"{last.prev_pos}), and the timer's dequeue never gets past that slot (the audit's "
                             f"timers.chain_loop); due at {_when(p.deliver_ms)}", p.record.physical_offset)
            out += lines
    return out


class _TimerLogFacts:
    """The timer log as the timer's recovery leaves it, read once for a query: every unit (in bulk), the slot heads
    (store_format.timer.slot_heads: the wheel's, then the units the recovery rescans, as the audit's ``timers``
    family has them), and each slot's chain walked as the dequeue walks it (store_format.timer.walk_chain)."""

    def __init__(self, store: Store, cp):
        self.store = store
        self.files = store.timer_log
        self.arrays = [T.read_timer_unit_arrays(f) for f in self.files]
        start = T.rescan_start(self.files, cp.last_timer_log_flush_pos if cp is not None else None)
        corrupt = [int(o) for a in self.arrays for o in a.timerlog_offset[a.kind == T.KIND_CORRUPT].tolist()
                   if o >= start]
        wheel = store.loc.child(L.TIMER_WHEEL_FILE)
        try:
            slots = T.read_wheel_slots(wheel, slots_total=L.DEFAULT_TIMER_SLOTS_TOTAL) if wheel.exists() else None
        except (StoreFormatError, OSError):
            slots = None
        entries = [(a.timerlog_offset[a.kind == T.KIND_ENTRY], a.slot_time_ms[a.kind == T.KIND_ENTRY])
                   for a in self.arrays]
        self.heads = T.slot_heads(slots, np.concatenate([o for o, _ in entries] or [np.zeros(0, np.int64)]),
                                  np.concatenate([t for _, t in entries] or [np.zeros(0, np.int64)]), start,
                                  min(corrupt) if corrupt else None)

    def units_at(self, offsets: set[int]) -> list[TP.Unit]:
        """The timer-log units pointing at the records at ``offsets``."""
        units = []
        for f, a in zip(self.files, self.arrays):
            for j in np.flatnonzero((a.kind == T.KIND_ENTRY) & np.isin(a.physical_offset, list(offsets))).tolist():
                units.append(TP.Unit(int(a.timerlog_offset[j]), f.name, int(a.file_position[j]), int(a.magic[j]),
                                     int(a.write_time_ms[j]), int(a.slot_time_ms[j]), int(a.physical_offset[j]),
                                     int(a.prev_pos[j])))
        return units

    def first_loop(self, read: int | None, before: int) -> tuple[int, T.ChainWalk] | None:
        """The first slot still to be read (its time at or after ``read``) and before ``before`` whose chain loops,
        with its walk: the dequeue stops there for ever, so no later slot is read."""
        for t in sorted(t for t in self.heads if not T.dequeued(t, read) and t < before):
            walk = self.chain(t)
            if walk is not None and walk.end == "loop":
                return t, walk
        return None

    def chain(self, slot_time_ms: int) -> T.ChainWalk | None:
        """The chain of the slot for ``slot_time_ms`` from its head, as the dequeue walks it (None: no head)."""
        head = self.heads.get(slot_time_ms)
        if head is None or head < 0:
            return None
        with T.TimerLog(files=self.files) as log:
            return T.walk_chain(log, head)


def _lookup(store: Store, topic: str, key: str) -> list[Message]:
    try:
        return store.query_key(topic, key, unreadable={})
    except StoreFormatError:
        return []


def _long(text) -> int | None:
    try:
        return int(text) if text is not None else None
    except ValueError:
        return None


def _record(m: Message, recovered_end: int | None) -> TP.TimerRecord:
    p = m.properties
    return TP.TimerRecord(m.physical_offset, m.topic, m.queue_id, m.queue_offset, m.uniq_key,
                          p.get(L.PROPERTY_REAL_TOPIC), _long(p.get(L.PROPERTY_REAL_QUEUE_ID)),
                          _long(p.get(L.PROPERTY_TIMER_OUT_MS)), _long(p.get(L.PROPERTY_TIMER_ROLL_TIMES)) or 0,
                          p.get(L.PROPERTY_TIMER_DEL_UNIQKEY), _long(p.get(L.PROPERTY_TIMER_ENQUEUE_MS)),
                          _long(p.get(L.PROPERTY_TIMER_DEQUEUE_MS)), m.store_timestamp,
                          recovered_end is None or m.physical_offset < recovered_end, m.segment, m.file_position)


def _dump_time(store: Store, records: list[TP.TimerRecord]) -> int:
    """The checkpoint's last flushed store time (the best offline guess at when the broker stopped), or the newest
    store time of the records."""
    try:
        cp = store.checkpoint().physic_msg_timestamp
    except (StoreFormatError, OSError):
        cp = 0
    return max([cp or 0] + [r.store_timestamp for r in records])


_STATE_WORDS = {
    "pending": "not fired yet: due at {due}", "overdue": "not fired: due at {due}, before the dump time",
    "queued": "not in the wheel yet: the timer enqueues rmq_sys_wheel_timer/0 from a later offset; due at {due}",
    "recalled": "recalled: a recall's delete entry is in its slot, so the timer drops it",
    "recall": "this record is a recall (TIMER_DEL_UNIQKEY {del_key})",
    "lost": "will never be delivered: {reason}", "lost_past_reach": "will never be delivered: {reason}",
    "unreachable": "will never be delivered: {reason}", "dropped": "{reason}", "expired": "{reason}",
}


def _when(ms: int | None, name: str | None = None) -> str:
    """A time as a person reads it (ISO-8601 UTC), with the epoch ms of the property it comes from beside."""
    if ms is None:
        return "an unknown time" + (f" (no {name})" if name else "")
    return f"{format_iso_z(ms)} ({name + ' ' if name else ''}{ms})"


def _path_lines(p: TP.Path, read: int | None, chain: T.ChainWalk | None = None) -> list[tuple]:
    r, u = p.record, p.unit
    what = "a recall" if p.kind == "recall" else f"a roll re-put (TIMER_ROLL_TIMES {r.roll_times})" \
        if r.roll_times else "a timer message"
    out = [("TIMER_ENQUEUED", f"{what} on {L.TIMER_TOPIC}/{r.queue_id} queue offset {r.queue_offset} for "
            f"{r.real_topic}/{r.real_queue_id}, due at {_when(r.out_ms, 'TIMER_OUT_MS')}", r.physical_offset)]
    if u is not None:
        roll = f"; a roll: re-put at {format_iso_z(u.slot_time_ms)} to go round again" if u.roll and not u.delete \
            else ""
        out.append(("TIMER_IN_WHEEL", f"timer-log unit at {u.timerlog_offset} ({L.TIMER_LOG_DIR}/{u.file} "
                    f"@{u.file_position}) in the wheel slot for {format_iso_z(u.slot_time_ms)} ({u.slot_time_ms}, "
                    f"slot index {T.slot_index(u.slot_time_ms)}){roll}; the wheel has read up to {_when(read)}",
                    r.physical_offset))
    elif p.state not in ("fired",):
        out.append(("TIMER_NOT_IN_WHEEL", "no timer-log unit points at it", r.physical_offset))
    if chain is not None and chain.end == "loop" and p.state in TP.WAITING and p.kind != "recall":
        last = chain.units[-1]
        out.append(("TIMER_CHAIN_LOOP", f"not fired, and it will not be: the chain of its wheel slot for "
                    f"{_when(u.slot_time_ms)} loops at the timer-log unit at {last.timerlog_offset} (prevPos "
                    f"{last.prev_pos}): the timer's dequeue of that slot never ends, and every later timer waits "
                    "behind it (the audit's timers.chain_loop); due at " + _when(p.deliver_ms), r.physical_offset))
        return out
    if chain is not None and chain.end in ("out_of_range", "corrupt") and p.state == "unreachable":
        out.append(("TIMER_CHAIN_BROKEN", f"the chain of its wheel slot for {_when(u.slot_time_ms)} breaks before it: "
                    f"{chain.error.message if chain.error is not None else chain.end} (the audit's "
                    "timers.chain_broken)", r.physical_offset))
    if p.state == "fired":
        for d in p.deliveries:
            out.append(("TIMER_FIRED", f"fired at {_when(d.dequeue_ms, 'TIMER_DEQUEUE_MS')} as record "
                        f"{d.physical_offset} on {d.topic}/{d.queue_id} queue offset {d.queue_offset}",
                        d.physical_offset))
        if p.recalls:
            out.append(("TIMER_RECALLED_BUT_DELIVERED", f"the recall at {p.recalls[0].physical_offset} did not stop "
                        "it", r.physical_offset))
    elif p.state == "rolled":
        n = p.next_record
        out.append(("TIMER_ROLLED", f"rolled at {_when(n.dequeue_ms, 'TIMER_DEQUEUE_MS')} as record "
                    f"{n.physical_offset} (TIMER_ROLL_TIMES {n.roll_times})", n.physical_offset))
    else:
        text = _STATE_WORDS[p.state].format(due=_when(p.deliver_ms), reason=p.reason, del_key=r.del_key)
        out.append((f"TIMER_{p.state.upper()}", text, r.physical_offset))
    return out


# ------------------------------------------------------------------------------------------------ POP


def _pop_states(store: Store, hits: list[Message]) -> list[tuple]:
    if not hits:
        return []
    cks, acks = _pop_records(store)
    wanted = {(m.topic, m.queue_id, m.queue_offset): m for m in hits}
    if not any((c.body.topic, c.body.queue_id, o) in wanted for c in cks for o in c.body.offsets()):
        return []
    revive = {}
    try:
        table = consumer_offsets(store.config("consumerOffset.json"))
    except StoreFormatError:
        table = {}
    for (t, g), queues in table.items():
        if g == L.REVIVE_GROUP and t.startswith(L.REVIVE_TOPIC_PREFIX):
            revive.update(queues)
    retries = []
    for m in hits:
        groups = {c.body.consumer_group for c in cks if (c.body.topic, c.body.queue_id) == (m.topic, m.queue_id)}
        targets = {t for g in groups for t in PS.retry_topics(g, m.topic)}
        for t in sorted(targets) + [L.SCHEDULE_TOPIC, L.TIMER_TOPIC]:  # a re-put the put hooks delayed waits there
            for r in _lookup(store, t, m.uniq_key or ""):
                to = r.topic if r.topic in targets else r.properties.get(L.PROPERTY_REAL_TOPIC)
                if r.properties.get("1ST_POP_TIME") is not None and to in targets and \
                        (r.topic not in targets or r.properties.get(L.PROPERTY_REAL_TOPIC) != r.topic):
                    retries.append(PS.Retry(to, r.uniq_key, r.reconsume_times, r.physical_offset, r.segment,
                                            r.file_position))

    def uniq_key_of(topic, queue_id, offsets):
        return {o: wanted[(topic, queue_id, o)].uniq_key for o in offsets if (topic, queue_id, o) in wanted}

    book = PS.ledger(cks, acks, retries, revive, uniq_key_of)
    out = []
    for p in book.popped:
        m = wanted.get((p.ck.topic, p.ck.queue_id, p.queue_offset))
        if m is None:
            continue
        ck = p.ck
        head = f"popped by {ck.consumer_group} at {_when(ck.pop_time)} (invisible for {ck.invisible_time} ms, " \
               f"revived at {_when(ck.revive_time)} unless acked; checkpoint at {p.checkpoint.physical_offset})"
        state = {"acked": f"acked by the {'batch ' if p.ack and p.ack.body.is_batch else ''}ack at "
                          f"{p.ack.physical_offset if p.ack else None}",
                 "in_flight": "in flight: its checkpoint has not fired, the consumer still holds it",
                 "revive_pending": "revive pending: its checkpoint fired, the revive service has not consumed it",
                 "revived": f"revived as record {p.retry.physical_offset if p.retry else None} on "
                            f"{p.retry.topic if p.retry else None}",
                 "lost": "lost: the revive service consumed its checkpoint, no ack covers it and no retry record "
                         "holds it"}[p.state]
        out.append((f"POP_{p.state.upper()}", f"{head}: {state}", m.physical_offset))
    return out


def _pop_records(store: Store) -> tuple[list[PS.Placed], list[PS.Placed]]:
    """Every checkpoint and ack the store's consume queues reach: fired ones on the revive topic's queues, waiting
    ones on rmq_sys_wheel_timer/0 (read only where the unit's tags hash is one of ck, ack, bAck)."""
    cks, acks = [], []
    for (topic, qid), _files in sorted(store.queues.items()):
        fired = topic.startswith(L.REVIVE_TOPIC_PREFIX)
        if not fired and topic != L.TIMER_TOPIC:
            continue
        for unit in store.consume_queue(topic, qid):
            if unit.kind != "entry" or (not fired and unit.tags_code not in _POP_TAG_CODES):
                continue
            try:
                m = store.read_message(unit.physical_offset)
            except StoreFormatError:
                continue
            if m.tags not in P.POP_TAGS or (not fired and not str(m.properties.get(L.PROPERTY_REAL_TOPIC, ""))
                                            .startswith(L.REVIVE_TOPIC_PREFIX)):
                continue
            rec = P.read_revive_record(m)
            if rec.error is not None:
                continue
            placed = PS.Placed(rec.value, m.physical_offset, fired, m.queue_id, m.queue_offset, m.store_timestamp,
                               m.segment, m.file_position)
            (cks if isinstance(rec.value, P.PopCheckPoint) else acks).append(placed)
    return cks, acks


__all__ = ["explain"]
