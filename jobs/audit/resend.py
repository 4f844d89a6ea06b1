"""The messages to re-send: every message the broker will not deliver after a restart on this dump, one row each,
with what a producer needs to send it again (topic, queue, keys, unique key, store time).

``tables/resend`` holds them, as Parquet, in three states:

  damaged     a record damage destroyed whose header still names a message (``integrity.damaged_message``,
              ``recovery.message_lost`` with ``details.state`` = damaged); its body cannot be trusted
  dropped     a well-formed message past the recovered end: recovery drops it (``recovery.message_lost``, intact);
              it is still in the dump, so ``rocketmq-forensics extract --walk salvage --physical-offsets N..``
              copies it out
  unindexed   a message the broker keeps but no consume-queue unit points at (``consumequeue.missing_entry``):
              consumers never receive it unless the queue is rebuilt

Dropped and unindexed rows are written by the scan tasks that find them (one Parquet file per task, as the
findings are: millions of them never travel to the driver); damaged rows are few and named on the driver,
which writes them beside the tasks' files.
"""
from __future__ import annotations


import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from udfs.columns import column

NAME = "resend"
STATES = ("damaged", "dropped", "unindexed")  # the order the report lists them in
SCHEMA = pa.schema([
    column("broker", pa.string()),
    column("state", pa.string(), "`damaged` (damage destroyed it; named from its header), `dropped` (well-formed, "
                                 "past the cut: recovery drops it) or `unindexed` (kept, but in no consume queue: "
                                 "consumers never receive it)"),
    column("topic", pa.string()), column("queue_id", pa.int32()), column("queue_offset", pa.int64()),
    column("physical_offset", pa.int64()),
    column("keys", pa.list_(pa.string()), "its KEYS (empty where a damaged record's properties are unreadable)"),
    column("uniq_key", pa.string()), column("store_timestamp", pa.int64()),
    column("damage", pa.string(), "damaged: why the walk refused it (BAD_CRC, SIZE_MISMATCH...)"),
])


def message_rows(broker: str, state: str, t: pa.Table) -> pa.Table:
    """Rows of ``state`` for the scan's decoded messages ``t`` (rows of ``RangeContext.messages``)."""
    n = t.num_rows
    return pa.Table.from_arrays([
        pa.repeat(pa.scalar(broker), n), pa.repeat(pa.scalar(state), n), t.column("topic"), t.column("queue_id"),
        t.column("queue_offset"), t.column("physical_offset"), t.column("keys").cast(pa.list_(pa.string())),
        t.column("uniq_key"), t.column("store_timestamp"), pa.nulls(n, pa.string())], schema=SCHEMA)


DAMAGED = SCHEMA  # the partial table damaged records travel in: few, and merged on the driver


def damaged_row(broker: str, physical_offset: int, about: dict, damage: str) -> dict:
    """A damaged record as a row, from what its header still says (store_format.recovery.describe_damaged_record
    or a CRC-less decode)."""
    return {"broker": broker, "state": "damaged", "topic": about.get("topic"), "queue_id": about.get("queue_id"),
            "queue_offset": about.get("queue_offset"), "physical_offset": physical_offset,
            "keys": list(about.get("keys") or []), "uniq_key": about.get("uniq_key"),
            "store_timestamp": about.get("store_timestamp"), "damage": damage}


def write_damaged(rows: list[dict], path: str) -> None:
    """The driver's part of the table: damaged records, one row per physical offset (a record that is both an
    integrity span and the record recovery stops at is named twice: the first naming is kept)."""
    from jobs.output import out_join, write_parquet_file

    seen, kept = set(), []
    for r in sorted(rows, key=lambda r: (r["broker"], r["physical_offset"])):
        if (r["broker"], r["physical_offset"]) not in seen:
            seen.add((r["broker"], r["physical_offset"]))
            kept.append(r)
    write_parquet_file(pa.Table.from_pylist(kept, schema=SCHEMA), out_join(path, "part-driver.parquet"))


def _dataset(path: str):
    """The table at ``path`` (a local path or a URI: jobs/output.py), or None when there is none."""
    from jobs.output import out_dataset

    return out_dataset(path, schema=SCHEMA)


def counts(path: str) -> dict[tuple[str, str], int]:
    """(broker, state) -> rows, read a batch at a time."""
    out: dict[tuple, int] = {}
    dataset = _dataset(path)
    if dataset is None:
        return out
    for batch in dataset.to_batches(columns=["broker", "state"]):
        if not batch.num_rows:
            continue
        g = pa.table(batch).group_by(["broker", "state"]).aggregate([("state", "count")])
        for b, s, n in zip(*(g.column(c).to_pylist() for c in ("broker", "state", "state_count"))):
            out[(b, s)] = out.get((b, s), 0) + n
    return out


def first_rows(path: str, broker: str, limit: int) -> list[dict]:
    """The first ``limit`` rows of a broker, damaged first, then dropped, then unindexed, each by physical offset;
    read a batch at a time so memory stays bounded whatever the table's size."""
    dataset = _dataset(path)
    if dataset is None or limit <= 0:
        return []
    rank = {s: i for i, s in enumerate(STATES)}
    best: list[dict] = []
    for batch in dataset.to_batches(filter=pc.field("broker") == broker):
        if not batch.num_rows:
            continue
        t = pa.table(batch)
        order = np.lexsort((t.column("physical_offset").fill_null(-1).to_numpy(),
                            np.array([rank.get(s, len(STATES)) for s in t.column("state").to_pylist()])))
        best = sorted(best + t.take(pa.array(order[:limit])).to_pylist(),
                      key=lambda r: (rank.get(r["state"], len(STATES)), r["physical_offset"] or -1))[:limit]
    return best


def first_offset(path: str, broker: str, state: str) -> int | None:
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


def unindexed_queues(path: str, broker: str) -> list[dict]:
    """Per queue with messages in no consume queue: their count and least and greatest queue offset, the largest
    first."""
    dataset = _dataset(path)
    if dataset is None:
        return []
    per: dict[tuple, dict] = {}
    for batch in dataset.to_batches(columns=["topic", "queue_id", "queue_offset"],
                                    filter=(pc.field("broker") == broker) & (pc.field("state") == "unindexed")):
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
