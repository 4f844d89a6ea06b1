"""Consumer progress from ``config/consumerOffset.json`` (or its ``.bak``), and on a 5.x broker with LMQ
(``enableLmq``) from ``config/lmqConsumerOffset.json``, whose %LMQ% groups have one offset per LMQ queue (queue 0)
and which then holds every other group's offsets too: per group/topic/queue the message
lag (queue max offset - committed offset) and the time lag (dump time - store time of the first unconsumed
message), retry topics (``%RETRY%group``) included.

Checks: ``lag.behind`` (info, one per group and topic with unconsumed messages), the warnings
``lag.offset_above_max`` (the committed offset is past the queue's end), ``lag.offset_below_min`` (below the
queue's first unit: those messages are gone), ``lag.offset_for_unknown_topic`` (a topic neither in the data
nor in topics.json) and ``lag.offset_for_unknown_queue``.  Detail table: ``lag``.

The first unconsumed message of each committed offset is found by the scan: the driver reads the unit at that
offset before it, and the task owning the unit's physical offset says whether a message starts there.
"""
from __future__ import annotations

import posixpath

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from store_format import layout as L
from udfs.columns import column

from ..findings import Consequence, Severity, check, concat_findings, finding_table, metric_table
from ..contract import Family, FamilyResult

check("lag.offset_for_unknown_topic", Severity.WARNING,
      "group {group} has an offset for topic {topic}, which has no consume queue and no topics.json entry",
      consequence=Consequence.COSMETIC,
      action="A deleted topic or a typo'd subscription; clean up the group.")
check("lag.offset_for_unknown_queue", Severity.WARNING,
      "group {group} has an offset for queue {queue_id} of {topic}, which has only {read_queue_nums} read queues",
      consequence=Consequence.CONSUMERS_AFFECTED,
      action="The topic's queue count was reduced; clean up.")
check("lag.offset_above_max", Severity.WARNING,
      "group {group} committed offset {offset} on {topic}/{queue_id} but the queue ends at {max_offset|0}: messages "
      "written later will be skipped",
      consequence=Consequence.CONSUMERS_AFFECTED,
      action="Typical after a truncation or a restored older log; reset the group's offset (`mqadmin "
             "resetOffsetByTime`).")
check("lag.offset_below_min", Severity.WARNING,
      "group {group} committed offset {offset} on {topic}/{queue_id} but the queue starts at {min_offset}: the "
      "messages in between are gone",
      consequence=Consequence.CONSUMERS_AFFECTED,
      action="Those messages are gone; check retention versus consumer downtime.")
check("lag.behind", Severity.INFO,
      "group {group} is {lag} message(s) behind on {topic}[ (oldest unconsumed {lag_seconds} s before the dump time)]",
      consequence=Consequence.CONSUMERS_AFFECTED,
      action="Normal in small amounts; a large or growing lag (see `rocketmq-forensics trend`) means a stuck or slow "
             "consumer.  `rocketmq-forensics extract --not-consumed-by GROUP` exports what it has not read.")

FOUND = pa.schema([("broker", pa.string()), ("physical_offset", pa.int64()), ("store_timestamp", pa.int64())])
LAG = pa.schema([
    column("broker", pa.string()), column("group", pa.string()), column("topic", pa.string()),
    column("queue_id", pa.int32()),
    column("offset", pa.int64(), "the group's committed offset (consumerOffset.json)"),
    column("min_offset", pa.int64()), column("max_offset", pa.int64()),
    column("lag", pa.int64(), "messages not consumed yet: max_offset - offset (never negative)"),
    column("first_unconsumed_store_time", pa.int64(), "store time of the first message not consumed (ms)"),
    column("lag_ms", pa.int64(), "dump time (as-of) - store time of the first unconsumed message"),
    column("retry", pa.bool_(), "true for a `%RETRY%group` topic"),
    column("source", pa.string(), "the file the offset came from (the `.bak` when the main file was unreadable)"),
])
_FILE = "config/consumerOffset.json"
_LMQ_FILE = "config/lmqConsumerOffset.json"


def _file_of(source: str | None) -> str:
    """The config file a row's offset came from, as findings name it (its ``.bak`` folded in)."""
    return _LMQ_FILE if source and posixpath.basename(source).startswith("lmqConsumerOffset.json") else _FILE


def probes(ctx, broker: str) -> np.ndarray:
    """Physical offsets of the units at every committed offset of ``broker`` (what the scan looks up)."""
    return np.unique(np.array([p for p in ctx.committed_units(broker).values() if p is not None], np.int64))


def in_range(rc, out) -> None:
    phys = rc.facts.probes.get("lag")
    if phys is None or not len(phys) or not rc.messages.num_rows:
        return
    phys = phys[rc.owns(phys)]
    at = rc.message_at(phys)
    hit = at >= 0
    if hit.any():
        ts = rc.column("store_timestamp")[at[hit]]
        out.partial("lag.found", pa.table({"broker": pa.repeat(pa.scalar(rc.broker), int(hit.sum())),
                                           "physical_offset": pa.array(phys[hit]), "store_timestamp": pa.array(ts)},
                                          schema=FOUND))


def lag_table(ctx) -> pa.Table:
    offsets = ctx.committed_offsets  # consumerOffset.json's, and 5.x lmqConsumerOffset.json's (LMQ groups too)
    bounds = {(r["broker"], r["topic"], r["queue_id"]): r for r in ctx.queue_bounds.to_pylist()}
    found = {(r["broker"], r["physical_offset"]): r["store_timestamp"]
             for r in ctx.partial("lag.found", FOUND).to_pylist()}
    rows = []
    for r in offsets.to_pylist():
        b = bounds.get((r["broker"], r["topic"], r["queue_id"]))
        unit = ctx.committed_units(r["broker"]).get((r["topic"], r["queue_id"], r["offset"]))
        ts = found.get((r["broker"], unit)) if unit is not None else None
        max_offset = b["max_offset"] if b else None
        lag = max((max_offset or 0) - r["offset"], 0)
        rows.append({"broker": r["broker"], "group": r["group"], "topic": r["topic"], "queue_id": r["queue_id"],
                     "offset": r["offset"], "min_offset": b["min_offset"] if b else None, "max_offset": max_offset,
                     "lag": lag, "first_unconsumed_store_time": ts if lag > 0 else None,
                     "lag_ms": ctx.as_of[r["broker"]] - ts if lag > 0 and ts is not None else None,
                     "retry": r["topic"].startswith(L.RETRY_GROUP_TOPIC_PREFIX), "source": r["source"]})
    return pa.Table.from_pylist(rows, schema=LAG)


def on_driver(ctx) -> FamilyResult:
    res = FamilyResult()
    t = lag_table(ctx)
    res.tables["lag"] = t
    topics = ctx.metadata("topics")
    topics = topics.filter(pc.is_valid(topics.column("topic")))
    known = ctx.queue_topics | {(b, tp) for b, tp in zip(topics.column("broker").to_pylist(),
                                                         topics.column("topic").to_pylist())}
    read_queues = {(b, tp): n for b, tp, n in zip(topics.column("broker").to_pylist(), topics.column("topic").to_pylist(),
                                                  topics.column("read_queue_nums").to_pylist())}
    groups: dict[str, list] = {}
    for r in t.to_pylist():
        unknown_topic = (r["broker"], r["topic"]) not in known
        rq = read_queues.get((r["broker"], r["topic"]))
        unknown_queue = (not unknown_topic and r["max_offset"] is None and rq is not None and r["queue_id"] >= rq)
        above = not unknown_topic and not unknown_queue and r["offset"] > (r["max_offset"] or 0)
        below = r["min_offset"] is not None and r["offset"] < r["min_offset"]
        row = dict(r, read_queue_nums=rq)
        for flag, check_id in ((unknown_topic, "lag.offset_for_unknown_topic"),
                               (unknown_queue, "lag.offset_for_unknown_queue"),
                               (above, "lag.offset_above_max"), (below, "lag.offset_below_min")):
            if flag:
                groups.setdefault(check_id, []).append(row)
    for check_id, rows in groups.items():
        res.findings.append(_offset_findings(check_id, rows))

    per_topic: dict[tuple, dict] = {}
    for r in t.to_pylist():
        p = per_topic.setdefault((r["broker"], r["group"], r["topic"]), {"lag": 0, "lag_ms": None,
                                                                          "file": _file_of(r["source"])})
        p["lag"] += r["lag"]
        if r["lag_ms"] is not None:
            p["lag_ms"] = r["lag_ms"] if p["lag_ms"] is None else max(p["lag_ms"], r["lag_ms"])
    keys = sorted(per_topic)
    behind = [k for k in keys if per_topic[k]["lag"] > 0]
    if behind:
        lag = pa.array([per_topic[k]["lag"] for k in behind], pa.int64())
        lag_ms = pa.array([per_topic[k]["lag_ms"] for k in behind], pa.int64())
        group = pa.array([k[1] for k in behind], pa.string())
        res.findings.append(finding_table(
            "lag.behind", len(behind), broker=pa.array([k[0] for k in behind]), topic=pa.array([k[2] for k in behind]),
            file=pa.array([per_topic[k]["file"] for k in behind], pa.string()), values={"group": group, "lag": lag,
                                "lag_seconds": pa.array([None if v is None else int(v / 1000) for v in
                                                         lag_ms.to_pylist()], pa.int64())},
            details={"group": group, "lag": lag, "lag_ms": lag_ms, "key": group}))
    if keys:
        res.metrics.append(metric_table("group", {
            "lag_messages": pa.array([per_topic[k]["lag"] for k in keys], pa.float64()),
            "lag_ms": pa.array([per_topic[k]["lag_ms"] for k in keys], pa.float64())},
            broker=[k[0] for k in keys], group=[k[1] for k in keys], topic=[k[2] for k in keys]))
    return res


def _offset_findings(check_id: str, rows: list[dict]):
    n = len(rows)
    col = lambda name, typ: pa.array([r[name] for r in rows], typ)  # noqa: E731
    group, offset = col("group", pa.string()), col("offset", pa.int64())
    details = {"group": group, "offset": offset}
    positions = dict(broker=col("broker", pa.string()), topic=col("topic", pa.string()),
                     queue_id=col("queue_id", pa.int32()), file=pa.array([_file_of(r["source"]) for r in rows],
                                                                        pa.string()))
    if check_id == "lag.offset_above_max":
        details["max_offset"] = col("max_offset", pa.int64())
        positions["queue_offset"] = offset
    elif check_id == "lag.offset_below_min":
        details["min_offset"] = col("min_offset", pa.int64())
        positions["queue_offset"] = offset
    details["key"] = group
    return concat_findings([finding_table(check_id, n, values={
        "group": group, "offset": offset, "max_offset": col("max_offset", pa.int64()),
        "min_offset": col("min_offset", pa.int64()), "read_queue_nums": col("read_queue_nums", pa.int32())},
        details=details, **positions)])


FAMILY = Family(
    "lag", "per group, topic and queue the message lag and time lag; offsets out of range, for unknown queues",
    probes=probes, in_range=in_range, on_driver=on_driver, emits={"lag.found": FOUND}, reads=("lag.found",),
    tables={"lag": LAG},
    metrics={"lag_messages": "messages a group has not consumed, per topic (group)",
             "lag_ms": "age of the oldest unconsumed message at the dump time, per topic (group)"})
