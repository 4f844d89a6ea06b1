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
    out = []
    for u in sorted(uniq):
        timer = [m for m in _lookup(store, L.TIMER_TOPIC, u) if m.uniq_key == u]
        if not timer:
            continue
        real = {m.properties.get(L.PROPERTY_REAL_TOPIC) for m in timer} - {None}
        delivered = [m for t in sorted(real) for m in _lookup(store, t, u)
                     if m.uniq_key == u and m.properties.get(L.PROPERTY_TIMER_DEQUEUE_MS) is not None]
        records = [_record(m, recovered_end) for m in timer + delivered]
        units, heads = _units_of(store, {m.physical_offset for m in timer})
        try:
            cp = T.read_timer_checkpoint(store.loc.child("config").child(L.TIMER_CHECK_FILE))
        except (StoreFormatError, OSError):
            cp = None
        read = cp.last_read_time_ms if cp is not None else None
        resume = None
        if cp is not None and cp.last_timer_queue_offset is not None:
            resume = min(cp.last_timer_queue_offset, cp.master_timer_queue_offset or cp.last_timer_queue_offset)
        as_of = _dump_time(store, records)
        reached = [_reach(store, u, heads, read) for u in units]
        paths = TP.trace(records, reached, TP.Checkpoint(read, resume, reach_ms=T.wheel_reach_ms()), as_of)
        for p in paths:
            out += _path_lines(p, read)
    return out


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


def _units_of(store: Store, offsets: set[int]) -> tuple[list[TP.Unit], dict[int, int]]:
    """The timer-log units pointing at ``offsets``, and the slot heads the timer's recovery sets (each unit of the
    files it rescans, the last file and the one before, becomes its slot's lastPos)."""
    import numpy as np

    units, heads = [], {}
    files = store.timer_log
    for i, f in enumerate(files):
        a = T.read_timer_unit_arrays(f)
        entry = a.kind == T.KIND_ENTRY
        for j in np.flatnonzero(entry & np.isin(a.physical_offset, list(offsets))).tolist():
            units.append(TP.Unit(int(a.timerlog_offset[j]), f.name, int(a.file_position[j]), int(a.magic[j]),
                                 int(a.write_time_ms[j]), int(a.slot_time_ms[j]), int(a.physical_offset[j]),
                                 int(a.prev_pos[j])))
        if i >= len(files) - 2:
            for t, o in zip(a.slot_time_ms[entry].tolist(), a.timerlog_offset[entry].tolist()):
                heads[int(t)] = int(o)
    return units, heads


def _reach(store: Store, u: TP.Unit, heads: dict[int, int], read: int | None) -> TP.Unit:
    """The unit, with whether the chain of its slot reaches it (only asked of a slot still to be read)."""
    from dataclasses import replace

    if T.dequeued(u.slot_time_ms, read):
        return u
    wheel = store.loc.child(L.TIMER_WHEEL_FILE)
    starts = []
    try:
        slot = T.wheel_slot(wheel, u.slot_time_ms) if wheel.exists() else None
    except (StoreFormatError, OSError):
        slot = None
    if slot is not None and slot.last_pos >= 0:
        starts.append(slot.last_pos)
    if u.slot_time_ms in heads:
        starts.append(heads[u.slot_time_ms])
    with T.TimerLog(files=store.timer_log) as log:
        reached = any(u.timerlog_offset in T.walk_chain(log, s).positions for s in starts)
    return replace(u, reachable=reached)


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


def _path_lines(p: TP.Path, read: int | None) -> list[tuple]:
    r, u = p.record, p.unit
    what = "a recall" if p.kind == "recall" else f"a roll re-put (TIMER_ROLL_TIMES {r.roll_times})" \
        if r.roll_times else "a timer message"
    out = [("TIMER_ENQUEUED", f"{what} on {L.TIMER_TOPIC}/{r.queue_id} queue offset {r.queue_offset} for "
            f"{r.real_topic}/{r.real_queue_id}, due at {r.out_ms} (TIMER_OUT_MS)", r.physical_offset)]
    if u is not None:
        roll = f"; a roll: re-put at {u.slot_time_ms} to go round again" if u.roll and not u.delete else ""
        out.append(("TIMER_IN_WHEEL", f"timer-log unit at {u.timerlog_offset} ({L.TIMER_LOG_DIR}/{u.file} "
                    f"@{u.file_position}) in the wheel slot for time {u.slot_time_ms} (slot index "
                    f"{T.slot_index(u.slot_time_ms)}){roll}; the wheel has read up to {read}", r.physical_offset))
    elif p.state not in ("fired",):
        out.append(("TIMER_NOT_IN_WHEEL", "no timer-log unit points at it", r.physical_offset))
    if p.state == "fired":
        for d in p.deliveries:
            out.append(("TIMER_FIRED", f"fired at {d.dequeue_ms} (TIMER_DEQUEUE_MS) as record {d.physical_offset} on "
                        f"{d.topic}/{d.queue_id} queue offset {d.queue_offset}", d.physical_offset))
        if p.recalls:
            out.append(("TIMER_RECALLED_BUT_DELIVERED", f"the recall at {p.recalls[0].physical_offset} did not stop "
                        "it", r.physical_offset))
    elif p.state == "rolled":
        n = p.next_record
        out.append(("TIMER_ROLLED", f"rolled at {n.dequeue_ms} as record {n.physical_offset} (TIMER_ROLL_TIMES "
                    f"{n.roll_times})", n.physical_offset))
    else:
        text = _STATE_WORDS[p.state].format(due=p.deliver_ms, reason=p.reason, del_key=r.del_key)
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
        head = f"popped by {ck.consumer_group} at {ck.pop_time} (invisible for {ck.invisible_time} ms, revived at " \
               f"{ck.revive_time} unless acked; checkpoint at {p.checkpoint.physical_offset})"
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
