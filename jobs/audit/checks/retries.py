"""Retries and dead letters: the lineage of a consumed-and-failed message from its topic through
``%RETRY%group`` (by way of ``SCHEDULE_TOPIC_XXXX``) to ``%DLQ%group``, and the DLQ inventory per group.

A send-back copy carries ``ORIGIN_MESSAGE_ID`` (the offsetMsgId of the first stored copy), ``RETRY_TOPIC`` (the
original topic) and its reconsume times; copies of one message share the origin id, which is how hops are
chained.  Checks: ``retries.dlq_message`` (info, one per dead letter, with the group, original topic and
whether the original is still in the dump).  Detail tables: ``retries`` (one row per hop), ``dlq`` (per group).

The scan's tasks write every hop (kept copies whose destination is a retry or DLQ topic) as Parquet parts (a
spilled partial); the driver reads them a part at a time, in order, and writes the ``retries`` table as it goes,
keeping only per-group figures and the dead letters' findings.  An origin id names a physical offset, so the
driver reads the original itself and keeps it when a message of the walk starts there, recovery keeps it, and
its offset message id is the origin id.  Under ``audit --state``, a part's rows are kept for the next run, which
is given them back while the part and the bytes its origins were read from are the same (jobs/audit/kept.py
:func:`offer_rows`).
"""
from __future__ import annotations

import hashlib
import itertools

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds

from store_format import layout as L
from decoding.columns import column

from ..findings import Consequence, Severity, check, finding_table, metric_table
from ..contract import Family, FamilyResult, TableView

_RETRY, _DLQ = L.RETRY_GROUP_TOPIC_PREFIX, L.DLQ_GROUP_TOPIC_PREFIX

check("retries.dlq_message", Severity.INFO,
      "dead letter of group {group} from {original_topic|?} after {reconsume_times} reconsume(s){origin_text}",
      consequence=Consequence.CONSUMERS_AFFECTED, group="topic",
      action="Investigate why the group fails it; `rocketmq-forensics extract --dlq` exports them and "
             "`rocketmq-forensics replay` can re-send them.")

HOPS = pa.schema([
    ("broker", pa.string()), ("topic", pa.string()), ("queue_id", pa.int32()), ("queue_offset", pa.int64()),
    ("physical_offset", pa.int64()), ("segment", pa.string()), ("file_position", pa.int64()),
    ("store_timestamp", pa.int64()), ("reconsume_times", pa.int32()), ("uniq_key", pa.string()),
    ("origin_message_id", pa.string()), ("retry_topic", pa.string()), ("real_topic", pa.string()),
])
RETRIES = pa.schema([
    column("broker", pa.string()),
    column("group", pa.string(), "the consumer group that sent the message back"),
    column("stage", pa.string(), "`scheduled` (SCHEDULE_TOPIC_XXXX copy waiting for the retry delay), `retry` "
                                 "(%RETRY%group) or `dlq` (%DLQ%group)"),
    column("topic", pa.string(), "the topic this copy is stored in"),
    column("queue_id", pa.int32()), column("queue_offset", pa.int64()), column("physical_offset", pa.int64()),
    column("segment", pa.string()), column("file_position", pa.int64()), column("store_timestamp", pa.int64()),
    column("reconsume_times", pa.int32(), "RECONSUMETIMES of this copy"),
    column("uniq_key", pa.string()),
    column("origin_message_id", pa.string(), "ORIGIN_MESSAGE_ID: the offset msg id of the first stored copy"),
    column("original_topic", pa.string(), "the topic the message was first sent to (RETRY_TOPIC, else the "
                                          "original's topic)"),
    column("origin_physical_offset", pa.int64(), "the original's physical offset when it is in the dump"),
    column("origin_uniq_key", pa.string(), "the original's UNIQ_KEY"),
])
DLQ = pa.schema([
    column("broker", pa.string()),
    column("group", pa.string(), "the consumer group whose dead letters these are"),
    column("messages", pa.int64(), "dead letters in %DLQ%group"),
    column("oldest_store_time", pa.int64(), "oldest dead letter's store time (ms)"),
    column("newest_store_time", pa.int64(), "newest one's (ms)"),
    column("original_topics", pa.list_(pa.field("element", pa.string(), nullable=False)),
           "the topics they were first sent to"),
    column("max_reconsume_times", pa.int32(), "highest RECONSUMETIMES"),
])


def _destination(topic, real_topic):
    return pc.if_else(pc.equal(topic, L.SCHEDULE_TOPIC), real_topic, topic)


def in_range(rc, out) -> None:
    m = rc.messages
    if not m.num_rows:
        return
    dest = _destination(m.column("topic"), m.column("real_topic"))
    hop = pc.fill_null(pc.or_(pc.starts_with(dest, _RETRY), pc.starts_with(dest, _DLQ)), False).to_numpy(
        zero_copy_only=False) & rc.column("kept")
    rows = np.flatnonzero(hop)
    if len(rows):
        t = m.take(rows)
        out.spill("retries.hops", pa.table({"broker": pa.repeat(pa.scalar(rc.broker), len(rows)),
                                              **{f.name: t.column(f.name) for f in HOPS if f.name != "broker"}},
                                             schema=HOPS))


def _group_of(dest):
    """The consumer group a retry or DLQ topic names (null for other topics)."""
    return pc.if_else(pc.starts_with(dest, _RETRY), pc.utf8_slice_codeunits(dest, len(_RETRY)),
                      pc.if_else(pc.starts_with(dest, _DLQ), pc.utf8_slice_codeunits(dest, len(_DLQ)),
                                 pa.scalar(None, pa.string())))


def _hop_parts(ctx):
    """The hops a broker at a time (brokers in order), each broker's in physical-offset order, one scan task's part
    at a time, as (broker, None, the part's path): a part is one task's range of one broker's commitlog, so the parts
    of a broker in the order of the offsets they span are its hops in order; the caller reads each
    (:func:`_part_bytes`, :func:`_part_hops`), or does not where its rows are kept.  Were two parts of a broker to
    overlap (or a part to hold two brokers), that broker's hops are read whole and sorted: (broker, its hops, None)."""
    from runtime.output import out_parts_dataset

    parts = ctx.partial_parts("retries.hops")
    hops = ctx.partial_dataset("retries.hops", HOPS)
    spans: dict[str, list] = {}
    mixed: set[str] = set()
    for path, first, last, broker in zip(*(parts.column(c).to_pylist()
                                           for c in ("path", "first_offset", "last_offset", "broker"))):
        brokers = [broker] if broker is not None else \
            pc.unique(out_parts_dataset([path], HOPS).to_table(columns=["broker"]).column(0)).to_pylist()
        for b in brokers:
            spans.setdefault(b, []).append((first, last, path))
        if len(brokers) > 1:
            mixed.update(brokers)
    for broker in sorted(spans):
        ordered = sorted(spans[broker])
        if broker in mixed or any(a[1] >= b[0] for a, b in zip(ordered, ordered[1:])):
            yield broker, hops.to_table(filter=ds.field("broker") == broker).sort_by("physical_offset"), None
            continue
        for _, _, path in ordered:
            yield broker, None, path


def _part_bytes(path: str) -> bytes:
    from runtime.output import out_read

    return out_read(path)


def _part_hops(raw: bytes) -> pa.Table:
    """A part's hops (the Parquet file's bytes ``raw``) in physical-offset order."""
    import pyarrow.parquet as pq

    t = pq.read_table(pa.BufferReader(raw), schema=HOPS)
    if not (np.diff(t.column("physical_offset").to_numpy()) > 0).all():  # a task's walk: already in order
        t = t.sort_by("physical_offset")
    return t


def _retry_rows(ctx, broker: str, hops: pa.Table, found: pa.Table | None = None) -> pa.Table:
    """Rows of :data:`RETRIES` for some of one broker's hops: each hop's group and stage, and its origin (read from
    the store: an id names one offset, so at most one origin; ``found``: the origins already read, as
    AuditContext.kept_messages_by_id gives them), in the hops' order."""
    if found is None:
        found = ctx.kept_messages_by_id(broker, pc.unique(hops.column("origin_message_id")))
    topic = hops.column("topic")
    scheduled = pc.equal(topic, L.SCHEDULE_TOPIC)
    t = hops.append_column("group", _group_of(pc.if_else(scheduled, hops.column("real_topic"), topic)))
    t = t.append_column("stage", pc.if_else(scheduled, "scheduled", pc.if_else(pc.starts_with(topic, _DLQ), "dlq",
                                                                                "retry")))
    at = pc.index_in(t.column("origin_message_id"), value_set=found.column("msg_id"))
    for name, source in (("origin_topic_found", "topic"), ("origin_physical_offset", "physical_offset"),
                         ("origin_uniq_key", "uniq_key")):
        t = t.append_column(name, found.column(source).take(at))
    t = t.append_column("original_topic", pc.coalesce(t.column("retry_topic"), t.column("origin_topic_found")))
    return t.select([f.name for f in RETRIES]).cast(RETRIES)


# hops whose origins are looked up at once: a broker's consecutive parts gathered up to this many rows, so that each
# segment is mapped and its frames checked once per gathering, not once per part (65 parts of 16 MiB: 0.8 s of
# lookups against 0.4 s for 17 of 64 MiB).  A hop held is about 200 bytes, and its origin's record is copied out
# while it is looked up: 256 Ki rows put 300 MiB on the driver's peak at 16 GiB (make bench-scale)
LOOKUP_ROWS = 1 << 16


def _kept_rows(ctx, broker: str, raw: bytes):
    """Under a state, where the rows of a part (its file's bytes ``raw``) are kept between runs (jobs/audit/kept.py
    :func:`offer_rows`), keyed by the part's bytes: an incremental audit would otherwise read every origin of the
    store again, and work out every hop's row, each night."""
    from ..kept import offer_rows

    if ctx.state is None:
        return None
    return offer_rows(ctx.state, broker, "retries.rows", (hashlib.sha256(raw).hexdigest(), ctx.options.check_crc),
                      RETRIES)


def _origins_read(ctx, broker: str):
    """What a part's origins read of the store, from the offsets its ids name (the memo ``named``): those below
    the recovery's cut, and the segments' bytes there (AuditContext.walk_reads)."""
    def depends(memos):
        named = memos["named"]
        wanted = named[named < ctx.recovery[broker].max_physical_offset]
        return wanted, ctx.walk_reads(broker, wanted)
    return depends


def _looked_up(ctx, broker: str, held: list, derive, as_files: bool):
    """The rows of the ``held`` parts' hops (each with where its rows are kept, or None), their origins read at
    once, a part at a time (with ``derive`` of them, and ``as_files``, as :func:`retry_batches`); each part's rows
    kept with the offsets its ids name."""
    from store_format.ids import offset_msg_id_offsets

    from ..tasks import spilled_file

    hops = pa.concat_tables([h for h, _ in held]) if len(held) > 1 else held[0][0]
    rows = _retry_rows(ctx, broker, hops, ctx.kept_messages_by_id(broker, pc.unique(hops.column("origin_message_id"))))
    at = 0
    for part, keeping in held:  # the rows are in the hops' order: each part's, in turn
        mine = rows.slice(at, part.num_rows)
        derived = derive(mine) if derive is not None else None
        given = mine
        if keeping is not None:  # kept as the Parquet file the table is then given: encoded once
            phys, valid = offset_msg_id_offsets(pc.unique(part.column("origin_message_id")))
            kept = spilled_file("rows", [mine])
            keeping.keep(kept, {"named": np.unique(phys[valid])}, _origins_read(ctx, broker), derived)
            given = kept if as_files else mine
        at += part.num_rows
        yield given if derive is None else (given, derived)


def _table_of(rows) -> pa.Table:
    """Rows given as a table or as the Parquet file they were kept as (tasks.SpilledFile)."""
    import pyarrow.parquet as pq

    return rows if isinstance(rows, pa.Table) else pq.read_table(pa.BufferReader(rows.data)).cast(RETRIES)


def retry_batches(ctx, derive=None, as_files: bool = False):
    """The ``retries`` table in order (broker, physical offset), a part at a time: never whole on the driver.
    ``derive``: what the caller works out of each part's rows (a dict of tables), yielded with them as (rows,
    derived) and kept with them.  Under a state, a part whose rows the last run kept, and whose origins' bytes are
    the same, is given them back (and what was derived of them): neither its origins read again nor its rows worked
    out.  ``as_files``: the rows of a part a state keeps yielded as the Parquet file they are kept as
    (tasks.SpilledFile, for TableWriter.add_file: a part given back is neither decoded nor encoded again)."""
    held, held_broker, rows = [], None, 0  # hops waiting for their origins: (hops, where kept or None)
    for broker, hops, path in itertools.chain(_hop_parts(ctx), [(None, None, None)]):  # read as they come
        given = keeping = None
        if hops is None and path is not None:  # one part of a broker's, in order
            raw = _part_bytes(path)
            keeping = _kept_rows(ctx, broker, raw)
            given = keeping.rows(_origins_read(ctx, broker)) if keeping is not None else None
            hops = _part_hops(raw) if given is None else None
        if held and (broker != held_broker or given is not None
                     or rows + (hops.num_rows if hops is not None else 0) > LOOKUP_ROWS):
            yield from _looked_up(ctx, held_broker, held, derive, as_files)
            held, rows = [], 0
        if given is not None:
            derived = None if derive is None else keeping.extra or derive(_table_of(given))
            given = given if as_files else _table_of(given)
            yield given if derive is None else (given, derived)
        elif hops is not None and hops.num_rows:
            held.append((hops, keeping))
            held_broker, rows = broker, rows + hops.num_rows


def retry_table(ctx) -> pa.Table:
    """The whole ``retries`` table (for a test or a notebook: the audit writes it a part at a time)."""
    parts = list(retry_batches(ctx))
    return pa.concat_tables(parts) if parts else RETRIES.empty_table()


def _dlq_findings(dlq: pa.Table) -> pa.Table:
    origin = dlq.column("origin_physical_offset")
    origin_text = pc.if_else(pc.is_null(origin), "; original not in this dump", pc.binary_join_element_wise(
        "; original at physical offset ", pc.cast(origin, pa.string()), ""))
    uniq = dlq.column("uniq_key")
    return finding_table(
        "retries.dlq_message", dlq.num_rows, broker=dlq.column("broker"), file=dlq.column("segment"),
        file_position=dlq.column("file_position"), physical_offset=dlq.column("physical_offset"),
        topic=dlq.column("topic"), queue_id=dlq.column("queue_id"), queue_offset=dlq.column("queue_offset"),
        values={"group": dlq.column("group"), "original_topic": dlq.column("original_topic"),
                "reconsume_times": dlq.column("reconsume_times"), "origin_text": origin_text},
        details={"group": dlq.column("group"), "origin_message_id": dlq.column("origin_message_id"),
                 "uniq_key": uniq, "key": uniq})


# what the driver keeps of the dead letters, per (broker, group) and part: combined at the end (a group's figures)
_DLQ_AGGREGATES = [("physical_offset", "count"), ("store_timestamp", "min"), ("store_timestamp", "max"),
                   ("original_topic", "distinct"), ("reconsume_times", "max")]


def _inventory(per_part: list[pa.Table]) -> pa.Table:
    """The DLQ inventory from the per-part aggregates of :data:`_DLQ_AGGREGATES`."""
    if not per_part:
        return DLQ.empty_table()
    topics: dict[tuple, set] = {}  # (broker, group) -> original topics (there is no hash aggregate of lists)
    for part in per_part:
        for b, g, ts in zip(*(part.column(c).to_pylist() for c in ("broker", "group", "original_topic_distinct"))):
            topics.setdefault((b, g), set()).update(t for t in ts if t is not None)
    g = pa.concat_tables([t.drop_columns(["original_topic_distinct"]) for t in per_part]).group_by(
        ["broker", "group"], use_threads=False).aggregate([
            ("physical_offset_count", "sum"), ("store_timestamp_min", "min"), ("store_timestamp_max", "max"),
            ("reconsume_times_max", "max")])
    return pa.table({
        "broker": g.column("broker"), "group": g.column("group"),
        "messages": g.column("physical_offset_count_sum").cast(pa.int64()),
        "oldest_store_time": g.column("store_timestamp_min_min"),
        "newest_store_time": g.column("store_timestamp_max_max"),
        "original_topics": pa.array([sorted(topics[k]) for k in zip(g.column("broker").to_pylist(),
                                                                      g.column("group").to_pylist())],
                                    DLQ.field("original_topics").type),
        "max_reconsume_times": g.column("reconsume_times_max_max")}, schema=DLQ).sort_by(
        [("broker", "ascending"), ("group", "ascending")])


def _derived(rows: pa.Table) -> dict[str, pa.Table]:
    """What the family takes of some of the table's rows besides writing them (kept with them under a state): the
    dead letters' findings and the per-group aggregates (:data:`_DLQ_AGGREGATES`, the retry counts); a table only
    where there are rows for it."""
    stage = rows.column("stage")
    out = {}
    dlq = rows.filter(pc.equal(stage, "dlq"))
    if dlq.num_rows:
        out["dlq_findings"] = _dlq_findings(dlq)
        out["dlq"] = dlq.group_by(["broker", "group"], use_threads=False).aggregate(_DLQ_AGGREGATES)
    retry = rows.filter(pc.equal(stage, "retry"))
    if retry.num_rows:
        out["retry"] = retry.group_by(["broker", "group"], use_threads=False).aggregate([("physical_offset", "count")])
    return out


def on_driver(ctx) -> FamilyResult:
    """The retries table written a part at a time; what stays on the driver is per group (the DLQ inventory, the
    retry counts) and the dead letters' findings."""
    res = FamilyResult()
    writer = ctx.table_writer("retries", RETRIES)
    dead_letters = ctx.findings_writer("retries.dlq_message")
    dlq_parts, retry_parts = [], []
    for rows, derived in retry_batches(ctx, _derived, as_files=True):
        if isinstance(rows, pa.Table):
            writer.write(rows)
        else:
            writer.add_file(rows)
        if "dlq_findings" in derived:
            dead_letters.write(derived["dlq_findings"])
            dlq_parts.append(derived["dlq"])
        if "retry" in derived:
            retry_parts.append(derived["retry"])
    res.tables["retries"] = writer.close()
    res.findings.append(dead_letters.close())
    inventory = _inventory(dlq_parts)
    res.tables["dlq"] = inventory
    if inventory.num_rows:
        res.metrics.append(metric_table("group", {"dlq_messages": inventory.column("messages")}, n=inventory.num_rows,
                                        broker=inventory.column("broker"), group=inventory.column("group")))
    retries = pa.concat_tables(retry_parts).group_by(["broker", "group"], use_threads=False).aggregate(
        [("physical_offset_count", "sum")]) if retry_parts else None
    if retries is not None and retries.num_rows:
        res.metrics.append(metric_table("group", {"retry_messages": retries.column("physical_offset_count_sum")},
                                        n=retries.num_rows, broker=retries.column("broker"),
                                        group=retries.column("group")))
    return res


DLQ_VIEW = TableView("Dead-letter queues", 40, (
    ("group", "group"), ("messages", "messages"), ("original_topics", "original topics"),
    ("max_reconsume_times", "max reconsume times"), ("oldest_store_time", "oldest stored at"),
    ("newest_store_time", "newest stored at")),
    empty="none: no %DLQ% topic in the commitlog")

FAMILY = Family(
    "retries", "the retry -> DLQ lineage of every dead letter, the DLQ inventory per group",
    in_range=in_range, on_driver=on_driver, emits={"retries.hops": HOPS}, reads=("retries.hops",),
    tables={"retries": RETRIES, "dlq": DLQ}, views={"dlq": DLQ_VIEW}, rank=80, beside=True,
    metrics={"dlq_messages": "dead letters (group)", "retry_messages": "messages in %RETRY%group (group)"})
