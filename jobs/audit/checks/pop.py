"""5.x POP consumption: every popped message's state (store_format.popstate) -- in flight, acked, revive pending,
revived, lost -- from the checkpoints and acks in the revive topic (and on rmq_sys_wheel_timer, the timer they go
through), the revive service's offsets in consumerOffset.json and the retry records it put.  Runs for a 5.x dump
(POP came with 5.0).

Checks: ``pop.lost`` (error: the revive service consumed its checkpoint, no ack covers it, and no retry record holds
it), ``pop.orphan_ack`` (warning: an ack no checkpoint matches), ``pop.revived_twice`` (warning: one message re-put
to its retry topic twice at the same reconsume count), ``pop.bad_body`` (error: a checkpoint or ack body that is not
the JSON of its class, at its record).  Detail table: ``pop`` (one row per popped message).

Where each is decided: a scan task parses the revive records it holds (a bad body is its finding there) and keeps
the retry records the revive service put (they carry 1ST_POP_TIME); the driver joins checkpoints, acks, the revive
offsets and the retries, and reads the popped messages' UNIQ_KEYs from their consume queues when it must.  The
revive and retry records are spilled partials (Parquet parts the tasks write): the driver reads one broker's at a
time and writes the ``pop`` table a broker at a time.
"""
from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from store_format import layout as L
from store_format import pop as P
from store_format import popstate as PS
from decoding.columns import column

from ..contract import Family, FamilyResult
from ..findings import Consequence, Severity, check, concat_findings, finding_rows, finding_table, metric_table
from ..tasks import failure_row

check("pop.lost", Severity.ERROR,
      "message {topic}/{queue_id} offset {queue_offset} popped by {group} is lost: the revive service consumed its "
      "checkpoint, no ack covers it and no retry record holds it",
      consequence=Consequence.DATA_LOST, group="queue",
      action="Re-consume it: reset the group's offset on that queue to the message (`mqadmin resetOffsetByTime`) or "
             "re-send it (`jobs.extract`).")
check("pop.orphan_ack", Severity.WARNING,
      "{tag} for {topic}/{queue_id} (group {group}, pop time {pop_time}) matches no checkpoint",
      consequence=Consequence.COSMETIC, group="queue",
      action="The revive service ignores it; if the checkpoint was lost, the acked messages may be revived and "
             "consumed again.")
check("pop.revived_twice", Severity.WARNING,
      "message {uniq_key} was re-put to {topic} {copies} times at reconsume count {reconsume_times}",
      consequence=Consequence.CONSUMERS_AFFECTED, group="topic",
      action="Expect it consumed twice from the retry topic; consumers must be idempotent for that UNIQ_KEY.")
check("pop.bad_body", Severity.ERROR, "{tag} record of the POP service: {error}",
      consequence=Consequence.CONSUMERS_AFFECTED, group="place",
      action="The revive service cannot read it: the messages that checkpoint (or ack) covers are revived (or not) "
             "as if it did not exist.  Keep a copy of the record.")

RECORDS = pa.schema([("broker", pa.string()), ("physical_offset", pa.int64()), ("segment", pa.string()),
                     ("file_position", pa.int64()), ("queue_id", pa.int32()), ("queue_offset", pa.int64()),
                     ("store_timestamp", pa.int64()), ("fired", pa.bool_()), ("tag", pa.string()),
                     ("body", pa.binary())])
RETRIES = pa.schema([("broker", pa.string()), ("physical_offset", pa.int64()), ("segment", pa.string()),
                     ("file_position", pa.int64()), ("topic", pa.string()), ("uniq_key", pa.string()),
                     ("reconsume_times", pa.int32())])
POP = pa.schema([
    column("broker", pa.string()),
    column("topic", pa.string(), "the topic the message was popped from"), column("queue_id", pa.int32()),
    column("queue_offset", pa.int64(), "the popped message's queue offset"),
    column("group", pa.string()),
    column("pop_time_ms", pa.int64(), "when it was popped (the checkpoint's pt)"),
    column("invisible_time_ms", pa.int64(), "how long the consumer may hold it (it)"),
    column("revive_time_ms", pa.int64(), "pop time + invisible time: when it is revived unless acked"),
    column("state", pa.string(), "`acked`, `in_flight` (its checkpoint not fired yet), `revive_pending` (fired, not "
                                 "consumed by the revive service), `revived` (re-put to the retry topic) or `lost`"),
    column("checkpoint_offset", pa.int64(), "the checkpoint record (its fired copy on the revive topic when there "
                                            "is one)"),
    column("ack_offset", pa.int64(), "the ack record that covers it"),
    column("retry_offset", pa.int64(), "the retry record the revive service put"),
    column("uniq_key", pa.string()),
])
_FIRST_POP_TIME = "1ST_POP_TIME"  # PopReviveService.reviveRetry puts it on every retry record it writes


def applies(plan) -> bool:
    """A 5.x store (POP came with 5.0)."""
    return plan.store.features.is_5x


def in_range(rc, out) -> None:
    m = rc.messages
    if not m.num_rows:
        return
    topic = m.column("topic")
    fired = pc.fill_null(pc.starts_with(topic, L.REVIVE_TOPIC_PREFIX), False)
    waiting = pc.fill_null(pc.and_(pc.equal(topic, L.TIMER_TOPIC),
                                   pc.starts_with(m.column("real_topic"), L.REVIVE_TOPIC_PREFIX)), False)
    rows = np.flatnonzero(pc.or_(fired, waiting).to_numpy(zero_copy_only=False))
    if len(rows):
        _revive_records(rc, rows, fired.to_numpy(zero_copy_only=False)[rows], out)
    # what the revive service wrote: a record on the retry topic, or, when the put hooks delayed it (a message that
    # kept its DELAY level, or a timer), on SCHEDULE_TOPIC_XXXX / rmq_sys_wheel_timer with the retry topic as
    # REAL_TOPIC; the delayed one's later delivery (REAL_TOPIC = its topic) is the same revive, not another
    real = m.column("real_topic")
    on_retry = pc.fill_null(pc.and_(pc.starts_with(topic, L.RETRY_GROUP_TOPIC_PREFIX),
                                    pc.invert(pc.fill_null(pc.equal(topic, real), False))), False)
    delayed = pc.fill_null(pc.and_(pc.is_in(topic, pa.array([L.SCHEDULE_TOPIC, L.TIMER_TOPIC])),
                                   pc.starts_with(real, L.RETRY_GROUP_TOPIC_PREFIX)), False)
    retry = np.flatnonzero(pc.or_(on_retry, delayed).to_numpy(zero_copy_only=False))
    if len(retry):
        props = rc.decode(retry, ("properties", "reconsume_times"))
        put = pc.is_valid(pc.map_lookup(props.column("properties"), pa.scalar(_FIRST_POP_TIME), "last"))
        t = m.take(retry).filter(put)
        if t.num_rows:
            to = pc.if_else(pc.starts_with(t.column("topic"), L.RETRY_GROUP_TOPIC_PREFIX), t.column("topic"),
                            t.column("real_topic"))
            out.spill("pop.retries", pa.table({
                "broker": pa.repeat(pa.scalar(rc.broker), t.num_rows),
                **{c: t.column(c) for c in ("physical_offset", "segment", "file_position")}, "topic": to,
                "uniq_key": t.column("uniq_key"),
                "reconsume_times": props.column("reconsume_times").filter(put)}, schema=RETRIES))


def _revive_records(rc, rows: np.ndarray, fired: np.ndarray, out) -> None:
    """Checkpoint and ack records: each body parsed (a bad one is its record's finding here), the good ones sent on."""
    m = rc.messages.take(rows)
    d = rc.decode(rows, ("body", "sys_flag", "magic_version"))
    tags, bodies = m.column("tags").to_pylist(), d.column("body").to_pylist()
    flags, versions = d.column("sys_flag").to_pylist(), d.column("magic_version").to_pylist()
    pos, phys = m.column("file_position").to_pylist(), m.column("physical_offset").to_pylist()
    good, bad = [], []
    for i, (tag, body) in enumerate(zip(tags, bodies)):
        at = pos[i] + L.layout_for(flags[i], versions[i]).body_offset
        try:
            P.parse_pop_body(tag, body or b"", file=m.column("segment")[i].as_py(), position=at)
            good.append(i)
        except P.PopBodyError as e:
            bad.append((i, e))
    if good:
        t = m.take(good)
        out.spill("pop.records", pa.table({
            "broker": pa.repeat(pa.scalar(rc.broker), len(good)),
            **{c: t.column(c) for c in ("physical_offset", "segment", "file_position", "queue_id", "queue_offset",
                                        "store_timestamp")},
            "fired": pa.array(fired[good]), "tag": t.column("tags"), "body": pa.array([bodies[i] for i in good],
                                                                                    pa.binary())}, schema=RECORDS))
    if bad:
        t = m.take([i for i, _ in bad])
        errors = [e for _, e in bad]
        out.finding(finding_table(
            "pop.bad_body", len(bad), broker=rc.broker, file=t.column("segment"),
            file_position=pa.array([e.position if e.position is not None else pos[i] for i, e in bad], pa.int64()),
            physical_offset=pa.array([phys[i] for i, _ in bad], pa.int64()), topic=t.column("topic"),
            queue_id=t.column("queue_id"), queue_offset=t.column("queue_offset"),
            values={"tag": pa.array([tags[i] for i, _ in bad], pa.string()),
                    "error": pa.array([f"{e.kind.value}: {e.message}" for e in errors], pa.string())},
            details={"tag": pa.array([tags[i] for i, _ in bad], pa.string()),
                     "reason": pa.array([e.kind.value for e in errors], pa.string()),
                     "field": pa.array([e.field for e in errors], pa.string()),
                     "uniq_key": t.column("uniq_key"), "key": t.column("uniq_key")}))


# ------------------------------------------------------------------------------------------------------ driver

def on_driver(ctx) -> FamilyResult:
    """Each broker's popped messages decided in turn, its rows of the ``pop`` table written as it is done; what stays
    on the driver is per broker (the counts) and the findings."""
    res = FamilyResult()
    counts = []
    writer = ctx.table_writer("pop", POP)
    for name, plan in ctx.plans.items():
        if not applies(plan):
            continue
        try:
            book = _ledger(ctx, name, plan)
        except Exception as e:  # noqa: BLE001 - that broker's finding; the others' results stand
            ctx.failures.append(failure_row(name, "the pop checks", e))
            continue
        writer.write(pa.Table.from_pylist([_row(name, p) for p in book.popped], schema=POP))
        res.findings.append(_findings(name, book))
        states = [p.state for p in book.popped]
        counts.append({"broker": name, **{f"pop_{s}": states.count(s) for s in PS.STATES},
                       "pop_orphan_acks": len(book.orphan_acks)})
    if not counts:
        writer.abort()
    else:
        res.tables["pop"] = writer.close()
        res.metrics.append(metric_table("broker", {k: [c[k] for c in counts] for k in counts[0] if k != "broker"},
                                        broker=[c["broker"] for c in counts]))
    return res


def _ledger(ctx, name: str, plan) -> PS.PopLedger:
    import pyarrow.dataset as ds

    mine = ds.field("broker") == name  # one broker's records at a time, never every broker's for the whole run
    records = ctx.partial_dataset("pop.records", RECORDS).to_table(filter=mine)
    cks, acks = [], []
    for r in records.to_pylist():
        body = P.parse_pop_body(r["tag"], r["body"])
        placed = PS.Placed(body, r["physical_offset"], r["fired"], r["queue_id"], r["queue_offset"],
                           r["store_timestamp"], r["segment"], r["file_position"])
        (cks if isinstance(body, P.PopCheckPoint) else acks).append(placed)
    retries = [PS.Retry(r["topic"], r["uniq_key"], r["reconsume_times"], r["physical_offset"], r["segment"],
                        r["file_position"])
               for r in ctx.partial_dataset("pop.retries", RETRIES).to_table(filter=mine).to_pylist()]
    revive = {}
    # the revive group's offsets: consumerOffset.json's, or lmqConsumerOffset.json's with enableLmq; a batch at a
    # time where the file was spilled
    for offsets in ctx.committed_offset_batches(units=False):
        mine = pc.and_(pc.and_(pc.equal(offsets.column("broker"), name),
                               pc.equal(offsets.column("group"), L.REVIVE_GROUP)),
                       pc.starts_with(offsets.column("topic"), L.REVIVE_TOPIC_PREFIX))
        for r in offsets.filter(pc.fill_null(mine, False)).select(["queue_id", "offset"]).to_pylist():
            if r["queue_id"] is not None:
                revive[r["queue_id"]] = r["offset"]
    before = None
    if plan.segments and plan.segments[0].base_offset > 0:  # retention deleted older records: checkpoints too
        first = plan.segments[0].base_offset
        before = ctx.store_times(name, [first]).get(first)
    return PS.ledger(cks, acks, retries, revive, lambda t, q, offs: _uniq_keys(ctx, name, plan, t, q, offs),
                     acks_before=before)


def _uniq_keys(ctx, broker: str, plan, topic: str, queue_id: int, offsets: list[int]) -> dict[int, str]:
    """The UNIQ_KEYs of the messages at ``offsets`` of one consume queue: each unit read, then its record."""
    phys = {}
    for f in plan.queue_files:  # a unit index a queue offset (store_format.queues.Backend.dense)
        if not f.loaded or not f.backend.dense or (f.topic, f.queue_id) != (topic, queue_id):
            continue
        first, n = f.first_queue_offset, f.length // f.backend.unit_size
        mine = [o for o in offsets if first <= o < first + n]
        if not mine:
            continue
        u = f.backend.window(f.loc, min(mine) - first, max(mine) - first + 1)
        for o in mine:
            i = o - min(mine)
            if i < len(u["valid"]) and u["valid"][i]:
                phys[o] = int(u["physical_offset"][i])
    if not phys:
        return {}
    t = ctx.walk_messages_at(broker, sorted(set(phys.values())), ("physical_offset", "uniq_key"))
    by_phys = dict(zip(t.column("physical_offset").to_pylist(), t.column("uniq_key").to_pylist()))
    return {o: by_phys.get(p) for o, p in phys.items()}


def _row(broker: str, p: PS.Popped) -> dict:
    ck = p.ck
    return {"broker": broker, "topic": ck.topic, "queue_id": ck.queue_id, "queue_offset": p.queue_offset,
            "group": ck.consumer_group, "pop_time_ms": ck.pop_time, "invisible_time_ms": ck.invisible_time,
            "revive_time_ms": ck.revive_time, "state": p.state, "checkpoint_offset": p.checkpoint.physical_offset,
            "ack_offset": p.ack.physical_offset if p.ack else None,
            "retry_offset": p.retry.physical_offset if p.retry else None, "uniq_key": p.uniq_key}


def _findings(broker: str, book: PS.PopLedger) -> pa.Table:
    lost = [{"broker": broker, "file": p.checkpoint.segment, "file_position": p.checkpoint.file_position,
             "physical_offset": p.checkpoint.physical_offset, "topic": p.ck.topic, "queue_id": p.ck.queue_id,
             "queue_offset": p.queue_offset, "values": {"group": p.ck.consumer_group},
             "details": {"group": p.ck.consumer_group, "pop_time_ms": p.ck.pop_time, "uniq_key": p.uniq_key,
                         "key": p.uniq_key, "checkpoint_queue_offset": p.checkpoint.queue_offset}}
            for p in book.popped if p.state == "lost"]
    orphans = [{"broker": broker, "file": a.segment, "file_position": a.file_position,
                "physical_offset": a.physical_offset, "topic": a.body.topic, "queue_id": a.body.queue_id,
                "queue_offset": a.body.start_offset,
                "values": {"tag": L.POP_BATCH_ACK_TAG if a.body.is_batch else L.POP_ACK_TAG,
                           "group": a.body.consumer_group, "pop_time": a.body.pop_time},
                "details": {"group": a.body.consumer_group, "pop_time_ms": a.body.pop_time,
                            "acked": " ".join(map(str, a.body.offsets()))}} for a in book.orphan_acks]
    twice = [{"broker": broker, "file": r.segment, "file_position": r.file_position, "physical_offset":
              r.physical_offset, "topic": r.topic,
              "values": {"uniq_key": r.uniq_key, "copies": len(same), "reconsume_times": r.reconsume_times},
              "details": {"uniq_key": r.uniq_key, "key": r.uniq_key, "first_copy": same[0].physical_offset}}
             for same in book.revived_twice for r in same[1:]]
    return concat_findings([finding_rows("pop.lost", lost), finding_rows("pop.orphan_ack", orphans),
                            finding_rows("pop.revived_twice", twice)])


FAMILY = Family(
    "pop", "5.x POP consumption: popped messages in flight, acked, revive pending, revived or lost; orphan acks, "
           "revives done twice, checkpoint bodies that do not parse",
    in_range=in_range, on_driver=on_driver, applies=applies,
    emits={"pop.records": RECORDS, "pop.retries": RETRIES},
    reads=("pop.records", "pop.retries"),
    tables={"pop": POP},
    metrics={"pop_acked": "popped messages acked (broker)",
             "pop_in_flight": "popped messages whose checkpoint has not fired: the consumer holds them (broker)",
             "pop_revive_pending": "checkpoint fired, not yet consumed by the revive service (broker)",
             "pop_revived": "re-put to the group's retry topic (broker)",
             "pop_lost": "consumed by the revive service, not acked and not re-put (broker)",
             "pop_orphan_acks": "acks that match no checkpoint (broker)"})
