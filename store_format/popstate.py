"""The state of every POP-consumed message, decided from a 5.x broker store's files as RocketMQ 5.3.3's POP service
moves it: the one model behind the audit's ``pop`` family and ``query``'s explanation of a message.

What the store holds of a POP consumption (store-format-5x.md §6)::

    pop      a checkpoint (tag ``ck``, body PopCheckPoint: topic t, queue q, group c, popTime pt, invisibleTime it,
             startOffset so, the popped offsets so + d[i]) put through the timer, due at pt + it - 1000: first on
             rmq_sys_wheel_timer, then, fired, on the revive topic rmq_sys_REVIVE_LOG_<cluster>
    ack      an ``ack`` (one offset) or ``bAck`` (several) for the same (t, q, c, so, pt, brokerName), through the
             timer too
    revive   PopReviveService consumes each revive queue as CID_RMQ_SYS_REVIVE_GROUP (its offsets in
             consumerOffset.json); for every checkpoint it has consumed, each popped offset no ack covers is re-put
             to the group's retry topic %RETRY%<group>_<topic> (%RETRY%<group>+<topic> with enableRetryTopicV2):
             the message's own properties (UNIQ_KEY included) and reconsume times + 1

So a popped message is (:data:`STATES`): ``acked``; ``in_flight`` (its checkpoint not fired yet: the consumer
still holds it); ``revive_pending`` (fired, not yet consumed by the revive service); ``revived`` (consumed, and a
retry record with its UNIQ_KEY is on the retry topic); ``lost`` (consumed, not acked, and no retry record: nobody
will see it again).  An ack that matches no checkpoint is an orphan; two retry records of one message at the same
reconsume count are one revive done twice.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from . import layout as L
from .pop import AckMsg, PopCheckPoint

STATES = ("acked", "in_flight", "revive_pending", "revived", "lost")


@dataclass(frozen=True)
class Placed:
    """A checkpoint or ack body with where its record is: on rmq_sys_wheel_timer (``fired`` False) or on the
    revive topic (``fired`` True, ``queue_id``/``queue_offset`` its place in the revive queue)."""

    body: PopCheckPoint | AckMsg
    physical_offset: int
    fired: bool
    queue_id: int
    queue_offset: int
    store_timestamp: int = 0
    segment: str | None = None
    file_position: int | None = None


@dataclass(frozen=True)
class Retry:
    """A record the revive service re-put (it carries 1ST_POP_TIME): on the retry topic, or, when the put hooks
    delayed it (a message that kept its DELAY level), on SCHEDULE_TOPIC_XXXX with the retry topic as REAL_TOPIC
    (``topic`` is the retry topic either way)."""

    topic: str
    uniq_key: str | None
    reconsume_times: int
    physical_offset: int
    segment: str | None = None
    file_position: int | None = None


def key_of(body: PopCheckPoint | AckMsg) -> tuple:
    """What PopReviveService merges a checkpoint and its acks by: topic, group, queue, start offset, pop time,
    broker name."""
    return (body.topic, body.consumer_group, body.queue_id, body.start_offset, body.pop_time, body.broker_name)


def retry_topics(group: str, topic: str) -> tuple[str, ...]:
    """Where the revive service re-puts a message popped from ``topic`` by ``group`` (KeyBuilder: v1 and v2 names;
    a message popped from a retry topic goes back to that topic)."""
    if topic.startswith(L.RETRY_GROUP_TOPIC_PREFIX):
        return (topic,)
    return (f"{L.RETRY_GROUP_TOPIC_PREFIX}{group}_{topic}", f"{L.RETRY_GROUP_TOPIC_PREFIX}{group}+{topic}")


@dataclass
class Popped:
    """One popped message: the checkpoint's (topic, queue, offset) for its group, and what became of it."""

    checkpoint: Placed  # the fired copy when there is one, else the one on rmq_sys_wheel_timer
    queue_offset: int
    state: str
    ack: Placed | None = None
    retry: Retry | None = None
    uniq_key: str | None = None

    @property
    def ck(self) -> PopCheckPoint:
        return self.checkpoint.body


@dataclass
class PopLedger:
    popped: list[Popped] = field(default_factory=list)
    orphan_acks: list[Placed] = field(default_factory=list)
    revived_twice: list[list[Retry]] = field(default_factory=list)  # each: the retry records of one revive


def ledger(checkpoints: list[Placed], acks: list[Placed], retries: list[Retry], revive_offsets: dict[int, int],
           uniq_key_of, *, acks_before: int | None = None) -> PopLedger:
    """The state of every message the ``checkpoints`` popped.  ``revive_offsets``: revive queue id -> the revive
    service's committed offset (absent: nothing consumed); ``uniq_key_of(topic, queue_id, queue_offsets)`` -> {queue
    offset: UNIQ_KEY} of the popped messages (asked only for those consumed by the revive service and not acked);
    ``acks_before``: a store time before which a checkpoint may have gone with the CommitLog's retention (an ack
    popped earlier whose checkpoint is missing is no orphan)."""
    out = PopLedger()
    cks: dict[tuple, Placed] = {}
    for c in checkpoints:
        k = key_of(c.body)
        if k not in cks or (c.fired and not cks[k].fired):
            cks[k] = c
    acked: dict[tuple, dict[int, Placed]] = {}
    for a in acks:
        mine = acked.setdefault(key_of(a.body), {})
        for off in a.body.offsets():
            if off not in mine or (a.fired and not mine[off].fired):
                mine[off] = a
    by_retry: dict[tuple, list[Retry]] = {}
    for r in retries:
        by_retry.setdefault((r.topic, r.uniq_key), []).append(r)
    consumed_unacked: dict[tuple, list[Popped]] = {}
    for k, c in sorted(cks.items(), key=lambda kv: kv[1].physical_offset):
        ck = c.body
        for off in ck.offsets():
            ack = acked.get(k, {}).get(off)
            p = Popped(c, off, "acked", ack)
            if ack is None:
                if not c.fired:
                    p.state = "in_flight"
                elif c.queue_offset >= revive_offsets.get(c.queue_id, 0):
                    p.state = "revive_pending"
                else:
                    p.state = "lost"  # until a retry record says otherwise
                    consumed_unacked.setdefault((ck.topic, ck.queue_id), []).append(p)
            out.popped.append(p)
    for (topic, qid), mine in consumed_unacked.items():
        uniq = uniq_key_of(topic, qid, sorted({p.queue_offset for p in mine}))
        for p in mine:
            p.uniq_key = uniq.get(p.queue_offset)
            found = [r for t in retry_topics(p.ck.consumer_group, topic) for r in by_retry.get((t, p.uniq_key), ())]
            if p.uniq_key is not None and found:
                p.state, p.retry = "revived", min(found, key=lambda r: r.physical_offset)
    orphans: dict[tuple, Placed] = {}  # an ack's two copies (on the timer topic, fired) are one ack
    for a in acks:
        k = (key_of(a.body), tuple(a.body.offsets()))
        if key_of(a.body) not in cks and (acks_before is None or a.body.pop_time >= acks_before) and \
                (k not in orphans or (a.fired and not orphans[k].fired)):
            orphans[k] = a
    out.orphan_acks = sorted(orphans.values(), key=lambda a: a.physical_offset)
    same: dict[tuple, list[Retry]] = {}
    for r in retries:
        same.setdefault((r.topic, r.uniq_key, r.reconsume_times), []).append(r)
    out.revived_twice = [sorted(v, key=lambda r: r.physical_offset) for v in same.values() if len(v) > 1]
    return out


__all__ = ["STATES", "Placed", "Retry", "Popped", "PopLedger", "key_of", "retry_topics", "ledger"]
