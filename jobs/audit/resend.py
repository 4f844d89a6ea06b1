"""The messages to re-send: every message the evidence says existed that the broker will not deliver as its
producer sent it after a restart on this dump, one row each, with what a producer needs to send it again (topic,
queue, keys, unique key, store time).

``tables/resend`` holds them, as Parquet, in these states (:data:`STATES`):

  damaged       a record damage changed whose header still names a message, at or past the cut: recovery drops it
                (``recovery.message_lost`` with ``details.state`` = damaged, ``integrity.damaged_message``)
  destroyed     a record whose header is gone (a page of zeros, a bad magic...): no walk frames it, but a
                consume-queue unit still points at it, which names its topic, queue and queue offset
                (``consumequeue.entry_in_damage``); ``damage`` says what destroyed it.  The index keeps only hashes
                of keys, so no key is named: ``query --key K --explain`` tells whether a key was that message's
  dropped       a well-formed message past the recovered end: recovery drops it (``recovery.message_lost``, intact);
                it is still in the dump, so ``rocketmq-forensics extract --walk salvage --physical-offsets N..``
                copies it out
  unindexed     a message the broker keeps but no consume-queue unit points at (``consumequeue.missing_entry``),
                or whose unit the broker's own recovery stops serving (``recovery.units_unserved``): consumers
                never receive it unless the queue is rebuilt
  undispatched  a message a record before it keeps from ever being dispatched (RocketMQ's LMQ dispatch stalls on
                it: ``lmq.dispatch_stalled``), and that record itself: the broker's reput never gets past it, and
                the way to get the broker started (its verdict's actions) starts the reput at the commitlog's end
  kept_damaged  a record damage changed before the cut: the broker keeps it and delivers it as it is (its recovery
                never walks that segment), so consumers receive bytes its producer did not send
                (``integrity.damaged_message``); kept, damaged: not lost, but to be re-sent all the same

``system`` marks a record whose topic -- the REAL_TOPIC it carries, else its own -- is a system topic (a
transaction's op record, a POP checkpoint or ack...): the broker's own bookkeeping, which nobody re-sends; the
report lists and counts only the others as messages to re-send.

Dropped and unindexed rows are written by the scan tasks that find them (one Parquet file per task, as the
findings are: millions of them never travel to the driver); damaged and destroyed rows are few and named on the
driver, which writes them beside the tasks' files, with the undispatched rows it makes from the consume queues'
pending messages.
"""
from __future__ import annotations


import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from runtime.display import plural as _plural
from store_format import layout as L
from store_format.fs import Location
from decoding.columns import column

NAME = "resend"
#: the states, in the order the report lists them: what is lost first, what the broker keeps damaged last
STATES = ("damaged", "destroyed", "dropped", "unindexed", "undispatched", "kept_damaged")
#: the states of a message lost (the broker will not deliver it), as the verdict counts them
LOST_STATES = ("damaged", "destroyed", "dropped")
SCHEMA = pa.schema([
    column("broker", pa.string()),
    column("state", pa.string(), "`damaged` (damage changed it, named from its header; at or past the cut: recovery "
                                 "drops it), `destroyed` (its header is gone: named by the consume-queue unit that "
                                 "points at it), `dropped` (well-formed, past the cut: recovery drops it), "
                                 "`unindexed` (kept, but in no consume queue: consumers never receive it), "
                                 "`undispatched` (a record whose LMQ dispatch list stalls the reput, and every "
                                 "record after it: never dispatched) or `kept_damaged` (damage changed it before the "
                                 "cut: the broker keeps and delivers it as it is)"),
    column("topic", pa.string()), column("queue_id", pa.int32()), column("queue_offset", pa.int64()),
    column("physical_offset", pa.int64()),
    column("keys", pa.list_(pa.string()), "its KEYS (empty where a damaged record's properties are unreadable, and "
                                          "for a destroyed one: the index keeps only hashes of keys)"),
    column("uniq_key", pa.string()), column("store_timestamp", pa.int64()),
    column("damage", pa.string(), "damaged, kept_damaged: why the walk refused it (BAD_CRC, SIZE_MISMATCH...); "
                                  "destroyed: what destroyed it (the corrupt span it lies in and where that starts)"),
    column("system", pa.bool_(), "a record whose topic (the REAL_TOPIC it carries, else its own) is a system topic: "
                                 "a transaction's op record, a POP checkpoint or ack -- the broker's bookkeeping, "
                                 "which nobody re-sends"),
])


# system topics whose records carry a producer's message for later (REAL_TOPIC names its topic): a delayed message,
# a half message, a timer message -- or, through the timer, a POP checkpoint for the revive topic
_CARRIERS = (L.SCHEDULE_TOPIC, L.TRANS_HALF_TOPIC, L.TIMER_TOPIC)


def system_records(topic, real_topic) -> pa.Array:
    """Which records (columns ``topic`` and ``real_topic``) are the broker's own bookkeeping: their topic -- the
    REAL_TOPIC they carry, else their own -- is a system topic (store_format.layout.is_system_topic): a
    transaction's op record, a POP checkpoint or ack; a producer's delayed, half or timer message carries its own
    topic as REAL_TOPIC."""
    effective = pc.coalesce(real_topic, topic)
    system = pc.or_(pc.is_in(effective, pa.array(sorted(L.SYSTEM_TOPICS))),
                    pc.starts_with(effective, L.SYSTEM_TOPIC_PREFIX))
    return pc.fill_null(system, False)


def is_system_record(topic: str | None, real_topic: str | None, *, real_topic_known: bool = True) -> bool:
    """:func:`system_records` for one record; where its REAL_TOPIC cannot be read (``real_topic_known`` false: a
    destroyed header), a record of a topic that carries producers' messages counts as one of them."""
    if not real_topic_known and topic in _CARRIERS:
        return False
    effective = real_topic if real_topic is not None else topic
    return effective is not None and L.is_system_topic(effective)


def message_rows(broker: str, state: str, t: pa.Table) -> pa.Table:
    """Rows of ``state`` for the scan's decoded messages ``t`` (rows of ``RangeContext.messages``)."""
    n = t.num_rows
    return pa.Table.from_arrays([
        pa.repeat(pa.scalar(broker), n), pa.repeat(pa.scalar(state), n), t.column("topic"), t.column("queue_id"),
        t.column("queue_offset"), t.column("physical_offset"), t.column("keys").cast(pa.list_(pa.string())),
        t.column("uniq_key"), t.column("store_timestamp"), pa.nulls(n, pa.string()),
        system_records(t.column("topic"), t.column("real_topic"))], schema=SCHEMA)


DAMAGED = SCHEMA  # the partial table damaged and destroyed records travel in: few, and merged on the driver


def damaged_row(broker: str, physical_offset: int, about: dict, damage: str) -> dict:
    """A damaged record as a row, from what its header still says (store_format.recovery.describe_damaged_record
    or a CRC-less decode: ``real_topic`` only where its properties could be read); :func:`write_driver_part` tells
    damaged from kept_damaged by the cut."""
    topic = about.get("topic")
    return {"broker": broker, "state": "damaged", "topic": topic, "queue_id": about.get("queue_id"),
            "queue_offset": about.get("queue_offset"), "physical_offset": physical_offset,
            "keys": list(about.get("keys") or []), "uniq_key": about.get("uniq_key"),
            "store_timestamp": about.get("store_timestamp"), "damage": damage,
            "system": is_system_record(topic, about.get("real_topic"), real_topic_known="real_topic" in about)}


def destroyed_row(broker: str, unit: dict, span_start: int, span_reason: str | None) -> dict:
    """A record whose header is gone, named by the consume-queue unit ``unit`` that points into the corrupt span
    starting at ``span_start`` (physical offset)."""
    what = f"{span_reason or 'corrupt'} span at physical offset {span_start}"
    return {"broker": broker, "state": "destroyed", "topic": unit["topic"], "queue_id": unit["queue_id"],
            "queue_offset": unit["queue_offset"], "physical_offset": unit["physical_offset"], "keys": [],
            "uniq_key": None, "store_timestamp": None, "damage": what,
            "system": is_system_record(unit["topic"], None, real_topic_known=False)}


def undispatched_row(broker: str, r: dict) -> dict:
    """The record whose dispatch list stalls the reput (a row of the lmq family's records)."""
    return {"broker": broker, "state": "undispatched", "topic": r["topic"], "queue_id": r["queue_id"],
            "queue_offset": r["queue_offset"], "physical_offset": r["physical_offset"], "keys": [],
            "uniq_key": r["uniq_key"], "store_timestamp": None, "damage": None, "system": False}


def undispatched_rows(broker: str, t: pa.Table) -> pa.Table:
    """The kept records after a stalling one that no consume queue holds (rows of the consumequeue family's
    missing units: topic, queue and offsets; the extract the verdict prints copies out the rest of them)."""
    n = t.num_rows
    return pa.Table.from_arrays([
        pa.repeat(pa.scalar(broker), n), pa.repeat(pa.scalar("undispatched"), n), t.column("topic"),
        t.column("queue_id"), t.column("queue_offset"), t.column("physical_offset"),
        pa.array([[]] * n, pa.list_(pa.string())), pa.nulls(n, pa.string()), pa.nulls(n, pa.int64()),
        pa.nulls(n, pa.string()), pa.array([is_system_record(x, None, real_topic_known=False)
                                            for x in t.column("topic").to_pylist()], pa.bool_())], schema=SCHEMA)


def unserved_rows(broker: str, topic: str, queue_id: int, queue_offsets, physical_offsets) -> pa.Table:
    """Kept messages of one queue whose units the broker's own recovery leaves unserved
    (store_format.recovery.UnservedUnits): ``unindexed`` rows, as the messages in no consume queue are (the extract
    the verdict prints for those copies these out too)."""
    n = len(queue_offsets)
    return pa.Table.from_arrays([
        pa.repeat(pa.scalar(broker), n), pa.repeat(pa.scalar("unindexed"), n), pa.repeat(pa.scalar(topic), n),
        pa.repeat(pa.scalar(queue_id, pa.int32()), n), pa.array(queue_offsets, pa.int64()),
        pa.array(physical_offsets, pa.int64()), pa.array([[]] * n, pa.list_(pa.string())), pa.nulls(n, pa.string()),
        pa.nulls(n, pa.int64()), pa.nulls(n, pa.string()),
        pa.repeat(pa.scalar(is_system_record(topic, None, real_topic_known=False)), n)], schema=SCHEMA)


# when one record is named twice (an integrity span that is also the record recovery stops at, or a unit pointing
# at a damaged record its header names), the naming that says most is kept
_NAMING = {"damaged": 0, "destroyed": 1}


def folder(out: Location, name: str) -> Location:
    """Where the commands the audit prints copy a broker's messages to re-send (``name``: the broker, or the broker
    and its queue): ``resend/<name>`` below the audit's ``--out``, spelled as the user typed it (Location.as_typed)."""
    return out.child("resend").child(name)


def write_driver_part(rows: list[dict], path: Location, cuts: dict[str, int] | None = None,
                      tables: list[pa.Table] = ()) -> None:
    """The driver's part of the table: the records it names (damaged, destroyed, a stalling one), one row per
    physical offset, and the ``tables`` of rows it made in bulk.  ``cuts``: broker -> the predicted recovered end;
    a damaged record before it is kept_damaged (the broker keeps it)."""
    from runtime.output import out_join, write_parquet_file

    for i, t in enumerate(t for t in tables if t.num_rows):
        write_parquet_file(t, out_join(path, f"part-driver-{i + 1}.parquet"))

    cuts = cuts or {}
    seen, kept = set(), []
    for r in sorted(rows, key=lambda r: (r["broker"], r["physical_offset"], _NAMING.get(r["state"], 2))):
        if (r["broker"], r["physical_offset"]) in seen:
            continue
        seen.add((r["broker"], r["physical_offset"]))
        cut = cuts.get(r["broker"])
        if r["state"] == "damaged" and cut is not None and r["physical_offset"] < cut:
            r = {**r, "state": "kept_damaged"}
        kept.append(r)
    write_parquet_file(pa.Table.from_pylist(kept, schema=SCHEMA), out_join(path, "part-driver.parquet"))


def _dataset(path: Location):
    """The table at ``path`` (a local path or a URI: runtime/output.py), or None when there is none."""
    from runtime.output import out_dataset

    return out_dataset(path, schema=SCHEMA)


def counts(path: Location) -> dict[tuple[str, str, bool], int]:
    """(broker, state, system) -> rows, read a batch at a time."""
    out: dict[tuple, int] = {}
    dataset = _dataset(path)
    if dataset is None:
        return out
    for batch in dataset.to_batches(columns=["broker", "state", "system"]):
        if not batch.num_rows:
            continue
        g = pa.table(batch).group_by(["broker", "state", "system"]).aggregate([("state", "count")])
        for b, s, y, n in zip(*(g.column(c).to_pylist() for c in ("broker", "state", "system", "state_count"))):
            out[(b, s, bool(y))] = out.get((b, s, bool(y)), 0) + n
    return out


def first_rows(path: Location, broker: str, limit: int, states: tuple[str, ...] = STATES) -> list[dict]:
    """The first ``limit`` messages to re-send of a broker in ``states`` (system records left out), in the order of
    :data:`STATES`, each state by physical offset; read a batch at a time so memory stays bounded whatever the
    table's size."""
    dataset = _dataset(path)
    if dataset is None or limit <= 0:
        return []
    rank = {s: i for i, s in enumerate(STATES)}
    best: list[dict] = []
    wanted = (pc.field("broker") == broker) & ~pc.field("system") & pc.field("state").isin(list(states))
    for batch in dataset.to_batches(filter=wanted):
        if not batch.num_rows:
            continue
        t = pa.table(batch)
        order = np.lexsort((t.column("physical_offset").fill_null(-1).to_numpy(),
                            np.array([rank.get(s, len(STATES)) for s in t.column("state").to_pylist()])))
        best = sorted(best + t.take(pa.array(order[:limit])).to_pylist(),
                      key=lambda r: (rank.get(r["state"], len(STATES)), r["physical_offset"] or -1))[:limit]
    return best


def first_offset(path: Location, broker: str, state: str) -> int | None:
    """The least physical offset of a broker's rows in ``state`` (where an extract of them starts)."""
    dataset = _dataset(path)
    if dataset is None:
        return None
    least = None
    for batch in dataset.to_batches(columns=["physical_offset"],
                                    filter=(pc.field("broker") == broker) & (pc.field("state") == state)):
        if batch.num_rows:
            m = pc.min(batch.column(0)).as_py()
            least = m if least is None else min(least, m)
    return least


def unindexed_queues(path: Location, broker: str) -> list[dict]:
    """Per queue with messages in no consume queue (system records left out): their count and least and greatest
    queue offset, the largest first."""
    dataset = _dataset(path)
    if dataset is None:
        return []
    per: dict[tuple, dict] = {}
    for batch in dataset.to_batches(columns=["topic", "queue_id", "queue_offset"],
                                    filter=(pc.field("broker") == broker) & (pc.field("state") == "unindexed")
                                    & ~pc.field("system")):
        if not batch.num_rows:
            continue
        g = pa.table(batch).group_by(["topic", "queue_id"]).aggregate(
            [("queue_offset", "count"), ("queue_offset", "min"), ("queue_offset", "max")])
        for r in g.to_pylist():
            q = per.setdefault((r["topic"], r["queue_id"]), {"topic": r["topic"], "queue_id": r["queue_id"],
                                                           "count": 0, "first": r["queue_offset_min"],
                                                           "last": r["queue_offset_max"]})
            q["count"] += r["queue_offset_count"]
            q["first"], q["last"] = min(q["first"], r["queue_offset_min"]), max(q["last"], r["queue_offset_max"])
    return sorted(per.values(), key=lambda q: (-q["count"], q["topic"], q["queue_id"]))


# ---------------------------------------------------------------------------------------------------------
# In words: what the terminal, the report and summary.json's verdict say of them (jobs/audit/verdict.py)


def lost_count(lost: dict) -> int:
    """The messages a verdict's ``lost`` counts as lost: damaged, destroyed, dropped after the cut."""
    return lost["damaged"] + lost["destroyed"] + lost["dropped"]


def lost_words(v: dict) -> str:
    """The messages lost, in words, as the terminal and the report say them: "none", or the count and what it is
    made of, then the runs no walk could count, the messages in no consume queue and those never dispatched."""
    lost = v["lost"]
    n = lost_count(lost)
    parts = [f"{lost['damaged']:,} damaged"] + ([f"{lost['destroyed']:,} destroyed"] if lost["destroyed"] else []) \
        + [f"{lost['dropped']:,} dropped after the cut"]
    text = f"{n:,} ({', '.join(parts)})" if n else ""
    if lost["unframed_runs"]:
        text += (", and " if text else "") + f"{_plural(lost['unframed_runs'], 'unreadable run')} of records whose " \
                                             "headers are gone"
    if lost["unindexed"]:
        text += ("; " if text else "") + f"{lost['unindexed']:,} {'more ' if text else ''}in no consume queue"
    if lost["undispatched"]:
        text += ("; " if text else "") + f"{_plural(lost['undispatched'], 'message')} never dispatched"
    return text or "none"


def kept_damaged_words(v: dict) -> str | None:
    """The messages the broker keeps damaged, in words (None: none)."""
    n = v["kept_damaged"]
    if not n:
        return None
    one = n == 1
    return (f"{_plural(n, 'message')}: the broker keeps {'it' if one else 'them'} and consumers receive "
            f"{'it as it is' if one else 'them as they are'}, so {'its producer' if one else 'their producers'} must "
            f"re-send {'it' if one else 'them'}")
