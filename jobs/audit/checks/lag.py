"""Consumer progress from ``config/consumerOffset.json`` (or its ``.bak``), and on a 5.x broker with LMQ
(``enableLmq``) from ``config/lmqConsumerOffset.json``, whose %LMQ% groups have one offset per LMQ queue (queue 0)
and which then holds every other group's offsets too: per group/topic/queue the message
lag (queue max offset - committed offset) and the time lag (dump time - store time of the first unconsumed
message), retry topics (``%RETRY%group``) included.  Lags are 64-bit integers end to end: a committed offset or a
queue end the file puts anywhere in a long gives an exact lag (a negative offset counts as 0, as RocketMQ's own
consumer stats count it), and a topic's sum past the largest long is held there.

Checks: ``lag.behind`` (info, one per group and topic with unconsumed messages), the warnings
``lag.offset_above_max`` (the committed offset is past the queue's end), ``lag.offset_below_min`` (below the
queue's first unit: those messages are gone), ``lag.offset_for_unknown_topic`` (a topic neither in the data
nor in topics.json) and ``lag.offset_for_unknown_queue``.  Detail table: ``lag``.

The first unconsumed message of each committed offset is found by the scan: the driver reads the unit at that
offset before it, and the task owning the unit's physical offset says whether a message starts there.
"""
from __future__ import annotations


import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from store_format import layout as L
from decoding.columns import column
from decoding.metadata import constant_column

from ..findings import METRIC_SCHEMA, Consequence, Severity, check, concat_findings, finding_table, metric_table
from ..contract import Family, FamilyResult, Plot, TableView

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
    column("lag", pa.int64(), "messages not consumed yet: max_offset - offset, never negative (a negative offset "
                              "counts as 0, as RocketMQ's consumer stats count it)"),
    column("first_unconsumed_store_time", pa.int64(), "store time of the first message not consumed (ms)"),
    column("lag_ms", pa.int64(), "dump time (as-of) - store time of the first unconsumed message"),
    column("retry", pa.bool_(), "true for a `%RETRY%group` topic"),
    column("source", pa.string(), "the file the offset came from (the `.bak` when the main file was unreadable)"),
])
INT64_MIN, INT64_MAX = np.iinfo(np.int64).min, np.iinfo(np.int64).max
_FILE = "config/consumerOffset.json"
_LMQ_FILE = "config/lmqConsumerOffset.json"


def _from_lmq(source) -> pa.Array:
    """Whether each row's offset came from lmqConsumerOffset.json (or its ``.bak``), by its ``source`` path."""
    return pc.fill_null(pc.match_substring_regex(source, r"(^|/)lmqConsumerOffset\.json[^/]*$"), False)


def _files_of(lmq: set[tuple], per_topic: pa.Table) -> pa.Array:
    """The config file each (broker, group, topic) row of ``per_topic`` took its offsets from, as findings name it
    (its ``.bak`` folded in): lmqConsumerOffset.json where any lag row for it came from there (``lmq``:
    :func:`_lmq_keys`), else consumerOffset.json."""
    key = ["broker", "group", "topic"]
    return pa.array([_LMQ_FILE if k in lmq else _FILE for k in zip(*(per_topic.column(c).to_pylist() for c in key))],
                    pa.string())


def probes(ctx, broker: str) -> np.ndarray:
    """Physical offsets of the units at every committed offset of ``broker`` (what the scan looks up)."""
    return ctx.committed_units(broker)


def probe_in_span(phys: np.ndarray | None, lo: int, hi: int, memo) -> np.ndarray | None:
    """The committed offsets' units a range owning ``lo`` .. ``hi`` - 1 looks up (:func:`in_range`)."""
    mine = phys[(phys >= lo) & (phys < hi)] if phys is not None else None
    return mine if mine is not None and len(mine) else None  # none: as no probe


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
    """The whole lag table in memory (:func:`lag_batches` together)."""
    parts = [t for t, _ in lag_batches(ctx)]
    return pa.concat_tables(parts) if parts else LAG.empty_table()


def lag_batches(ctx):
    """The lag table as (rows, their topics' numbering) a batch of committed offsets at a time
    (:meth:`AuditContext.committed_offset_batches`: the whole table when it is held in memory), in its order."""
    bounds, found = ctx.queue_bounds, ctx.partial("lag.found", FOUND)
    by_broker: dict[str, tuple] = {}  # the per-queue facts of a broker, filtered once for every batch
    for offsets in ctx.committed_offset_batches():
        topics = _topics_of(ctx, offsets)
        yield _lag_rows(ctx, offsets, topics, bounds, found, by_broker), topics


def _topics_of(ctx, offsets: pa.Table) -> pa.Array | None:
    """The numbering of a batch's topics (AuditContext.key_of): the committed offsets' own when they are in memory,
    the batch's when they are read a batch at a time."""
    return pc.unique(offsets.column("topic")).drop_null() if ctx.offsets_spilled else None


def _lag_rows(ctx, offsets: pa.Table, topics, bounds: pa.Table, found: pa.Table, by_broker: dict) -> pa.Table:
    """One row per committed offset of ``offsets`` (in its order), built from numpy columns keyed by numbers
    (:meth:`AuditContext.queue_keys`): a busy broker's consumerOffset.json holds millions of offsets, and neither a
    Python object nor a string is made per offset.  The per-queue facts (``bounds``, the scan's ``found`` units)
    are a broker's few rows: each batch of offsets is joined against them as a hash lookup."""
    n = offsets.num_rows
    keys = ctx.queue_keys(offsets, topics)
    min_offset, max_offset, ts = (np.zeros(n, np.int64) for _ in range(3))
    has_min, has_max, has_ts = (np.zeros(n, bool) for _ in range(3))
    as_of = np.zeros(n, np.int64)
    unit = offsets.column("unit")
    for broker, rows in ctx.broker_rows(offsets).items():
        as_of[rows] = ctx.as_of.get(broker, 0)
        if broker not in by_broker:
            by_broker[broker] = (bounds.filter(pc.equal(bounds.column("broker"), broker)),
                                 found.filter(pc.equal(found.column("broker"), broker)))
        b, f = by_broker[broker]
        if b.num_rows:  # the queue's bounds (one row a queue)
            bkey = ctx.key_of(b.column("topic"), b.column("queue_id"), topics)
            at, hit = _lookup(bkey, keys[rows])
            r = rows[hit]
            min_offset[r] = b.column("min_offset").to_numpy()[at[hit]]
            max_offset[r] = b.column("max_offset").to_numpy()[at[hit]]
            has_min[r] = has_max[r] = True
        mine = unit.take(pa.array(rows))
        if f.num_rows and mine.null_count < len(mine):  # the store time of each unit's message (the last said)
            fu = f.column("physical_offset").to_numpy()
            u = pc.fill_null(mine, -1).to_numpy(zero_copy_only=False)
            at, hit = _lookup(fu, u, last=True)
            hit &= u >= 0
            ts[rows[hit]] = f.column("store_timestamp").to_numpy()[at[hit]]
            has_ts[rows[hit]] = True
    offset = offsets.column("offset").to_numpy()
    # as RocketMQ's consumer stats (AdminBrokerProcessor.getConsumeStats): a negative queue end or committed offset
    # counts as 0, so the difference of two longs in [0, 2^63) is a long again, whatever the file holds
    lag = np.maximum(np.maximum(np.where(has_max, max_offset, 0), 0) - np.maximum(offset, 0), 0)
    behind = lag > 0
    columns = {"broker": offsets.column("broker"), "group": offsets.column("group"), "topic": offsets.column("topic"),
               "queue_id": offsets.column("queue_id"), "offset": offsets.column("offset"),
               "min_offset": pa.array(min_offset, pa.int64(), mask=~has_min),
               "max_offset": pa.array(max_offset, pa.int64(), mask=~has_max), "lag": pa.array(lag, pa.int64()),
               "first_unconsumed_store_time": pa.array(ts, pa.int64(), mask=~(behind & has_ts)),
               "lag_ms": pa.array(_difference(as_of, ts), pa.int64(), mask=~(behind & has_ts)),
               "retry": pc.starts_with(offsets.column("topic"), L.RETRY_GROUP_TOPIC_PREFIX),
               "source": offsets.column("source")}
    return pa.table({f.name: _as(columns[f.name], f.type) for f in LAG}, schema=LAG)


def _difference(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """``a - b`` of int64 columns, held at the int64 bounds where the difference does not fit (a store time a
    damaged record gives can be any long): never wrapped round."""
    with np.errstate(over="ignore"):
        d = a - b
    wrapped = ((a ^ b) & (a ^ d)) < 0  # the operands' signs differ and the result's differs from a's
    return np.where(wrapped, np.where(a < 0, INT64_MIN, INT64_MAX), d)


def _sums(values: np.ndarray, starts: np.ndarray) -> np.ndarray:
    """``np.add.reduceat(values, starts)`` of non-negative int64 values, held at the largest long where a run's sum
    does not fit (lags of queues whose ends a damaged file puts near 2^63): the runs that could reach it are summed
    exactly in Python's integers, the rest in bulk."""
    with np.errstate(over="ignore"):
        sums = np.add.reduceat(values, starts) if len(values) else np.zeros(0, np.int64)
    near = np.flatnonzero(np.add.reduceat(values.astype(np.float64), starts) >= 2.0 ** 62) if len(values) else []
    ends = np.r_[starts[1:], len(values)]
    for i in near:
        sums[i] = min(int(sum(int(v) for v in values[starts[i]:ends[i]])), INT64_MAX)
    return sums


def _lookup(keys: np.ndarray, wanted: np.ndarray, last: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """(index into ``keys``, found) for each of ``wanted``; of equal keys the first, or with ``last`` the last."""
    order = np.argsort(keys, kind="stable")
    sk = keys[order]
    if last and len(sk):
        keep = np.r_[sk[1:] != sk[:-1], True]
        order, sk = order[keep], sk[keep]
    pos = np.minimum(np.searchsorted(sk, wanted), max(len(sk) - 1, 0))
    hit = (sk[pos] == wanted) if len(sk) else np.zeros(len(wanted), bool)
    return order[pos] if len(sk) else pos, hit


def _as(values, typ: pa.DataType):
    return values if values.type == typ else pc.cast(values, typ)


_FLAGS = ("lag.offset_for_unknown_topic", "lag.offset_for_unknown_queue", "lag.offset_above_max",
          "lag.offset_below_min")


def on_driver(ctx) -> FamilyResult:
    """The lag table, its flagged rows' findings and the per-(group, topic) figures, a batch of committed offsets
    at a time (:func:`lag_batches`): in memory the whole table is one batch; spilled, each batch's rows are written
    (``AuditContext.table_writer``) and let go, and only the flagged rows and one row per (broker, group, topic)
    are kept."""
    res = FamilyResult()
    topics = ctx.metadata("topics")
    topics = topics.filter(pc.is_valid(topics.column("topic")))
    data_topics: dict[str, list] = {}
    for b, tp in ctx.queue_topics:
        data_topics.setdefault(b, []).append(tp)
    writer = ctx.table_writer("lag", LAG) if ctx.offsets_spilled else None
    whole = LAG.empty_table()
    flagged: dict[str, list] = {}
    first: dict[str, tuple] = {}  # check -> (its first row in the whole table, its place in _FLAGS)
    runs: dict[str, list] = {}  # broker -> its runs (:func:`_runs`)
    lmq = set()
    seen = 0
    try:
        for t, value_set in lag_batches(ctx):
            if writer is None:
                whole = t  # in memory: the one batch
            else:
                writer.write(t)
            rows, flags = _flags(ctx, t, value_set, topics, data_topics)
            for k, (check_id, flag) in enumerate(zip(_FLAGS, flags)):
                hits = np.flatnonzero(flag)
                if len(hits):
                    first.setdefault(check_id, (seen + int(hits[0]), k))
                    flagged.setdefault(check_id, []).append(rows.take(pa.array(hits)))
            if t.num_rows:
                for broker, r in _runs(t).items():
                    runs.setdefault(broker, []).append(r)
            lmq |= _lmq_keys(t)
            seen += t.num_rows
    except BaseException:  # no part of an incomplete lag table among the outputs (the family's failure names why)
        if writer is not None:
            writer.abort()
        raise
    res.tables["lag"] = whole if writer is None else writer.close()
    # each check's findings in row order; the checks in the order of their first row (then as _FLAGS lists them)
    for check_id in sorted(first, key=first.get):
        res.findings.append(concat_findings([_offset_findings(check_id, part) for part in flagged[check_id]]))

    # per (broker, group, topic): held whole in memory; where the offsets were spilled (a row per map) a slice at a
    # time, its group metrics written as it comes and only the rows behind kept for their findings
    metrics, held, behind = None, [], []
    try:
        for part in _per_topic(runs, _METRIC_SLICE if ctx.offsets_spilled else None):
            behind.append(part.filter(pc.greater(part.column("lag"), 0)))
            if not ctx.offsets_spilled:
                held.append(part)
                continue
            if metrics is None:
                metrics = ctx.partial_writer("lag_metrics", METRIC_SCHEMA)
            metrics.write(_group_metrics(part))
    except BaseException:
        if metrics is not None:
            metrics.abort()
        raise
    behind = pa.concat_tables(behind) if behind else None
    if behind is not None and behind.num_rows:
        lag, lag_ms, group = behind.column("lag"), behind.column("lag_ms"), behind.column("group")
        res.findings.append(finding_table(
            "lag.behind", behind.num_rows, broker=behind.column("broker"), topic=behind.column("topic"),
            file=_files_of(lmq, behind),
            values={"group": group, "lag": lag,
                    "lag_seconds": pc.divide(lag_ms, 1000)},  # integer division, toward zero
            details={"group": group, "lag": lag, "lag_ms": lag_ms, "key": group}))
    if metrics is not None:
        res.metrics.append(metrics.close())
    elif held:
        res.metrics.append(_group_metrics(pa.concat_tables(held)))
    return res


#: per-(group, topic) rows sorted, merged and turned into metrics at a time where the offsets were spilled (two
#: metric rows each)
_METRIC_SLICE = 1 << 20


def _group_metrics(per_topic: pa.Table) -> pa.Table:
    """The ``group`` metrics of per-(broker, group, topic) rows (:func:`_per_topic`), in their order."""
    return metric_table("group", {"lag_messages": per_topic.column("lag"), "lag_ms": per_topic.column("lag_ms")},
                        broker=per_topic.column("broker"), group=per_topic.column("group"),
                        topic=per_topic.column("topic"))


def _flags(ctx, t: pa.Table, value_set, topics: pa.Table, data_topics: dict) -> tuple[pa.Table, tuple]:
    """The lag rows ``t`` with ``read_queue_nums``, and per check of :data:`_FLAGS` a mask of the rows it flags.
    Per broker: the topics the data or topics.json know, and each configured topic's read queue count (the last
    given); the rows' topics by number (AuditContext.key_of, among ``value_set``), so nothing is made per row but
    numbers."""
    n = t.num_rows
    code = np.right_shift(ctx.queue_keys(t, value_set), 32)
    known = np.zeros(n, bool)
    rq, has_rq = np.zeros(n, np.int64), np.zeros(n, bool)
    for broker, rows in ctx.broker_rows(t).items():
        conf = topics.filter(pc.equal(topics.column("broker"), broker))
        names = data_topics.get(broker, []) + conf.column("topic").to_pylist()
        known_codes = ctx.key_of(names, [0] * len(names), value_set) >> 32
        known[rows] = np.isin(code[rows], known_codes[known_codes >= 0])
        if conf.num_rows:
            ccode = ctx.key_of(conf.column("topic"), np.zeros(conf.num_rows, np.int64), value_set) >> 32
            nums = conf.column("read_queue_nums")
            at, hit = _lookup(ccode, code[rows], last=True)
            hit &= nums.is_valid().to_numpy(zero_copy_only=False)[at]  # the last given, when it is a number
            r = rows[hit]
            rq[r] = pc.fill_null(nums, 0).to_numpy(zero_copy_only=False)[at[hit]]
            has_rq[r] = True
    max_offset, min_offset = t.column("max_offset"), t.column("min_offset")
    has_max = max_offset.is_valid().to_numpy(zero_copy_only=False)
    has_min = min_offset.is_valid().to_numpy(zero_copy_only=False)
    max_o = pc.fill_null(max_offset, 0).to_numpy(zero_copy_only=False)
    min_o = pc.fill_null(min_offset, 0).to_numpy(zero_copy_only=False)
    offset = t.column("offset").to_numpy()
    qid = t.column("queue_id").to_numpy().astype(np.int64)
    unknown_topic = ~known
    unknown_queue = ~unknown_topic & ~has_max & has_rq & (qid >= rq)
    above = ~unknown_topic & ~unknown_queue & (offset > max_o)
    below = has_min & (offset < min_o)
    rows = t.append_column("read_queue_nums", pa.array(rq, pa.int32(), mask=~has_rq))
    return rows, (unknown_topic, unknown_queue, above, below)


def _lmq_keys(t: pa.Table) -> set[tuple]:
    """(broker, group, topic) of the lag rows ``t`` whose offsets came from lmqConsumerOffset.json (only those
    become objects: the LMQ file's groups)."""
    key = ["broker", "group", "topic"]
    mine = t.filter(_from_lmq(t.column("source")))
    if not mine.num_rows:
        return set()
    return {tuple(r[c] for c in key) for r in mine.select(key).group_by(key).aggregate([]).to_pylist()}


def _runs(t: pa.Table) -> dict[str, pa.Table]:
    """broker -> one row per run of its lag rows of one (group, topic) (:func:`_reduced`, without the broker: a row
    per map of a spilled file is kept until :func:`_per_topic`); the rows come a map at a time (decoding.metadata: by
    topic, group, queue id)."""
    n = t.num_rows
    new = np.zeros(n, bool)
    new[0] = True
    for name in ("broker", "group", "topic"):
        c = t.column(name)
        if n > 1:
            new[1:] |= pc.not_equal(c.slice(1), c.slice(0, n - 1)).to_numpy(zero_copy_only=False)
    r = _reduced(t, np.flatnonzero(new))
    brokers = r.column("broker")
    return {b: r.filter(pc.equal(brokers, b)).drop_columns(["broker"]) for b in pc.unique(brokers).to_pylist()}


def _per_topic(runs: dict[str, list], slice_rows: int | None = None):
    """Per (broker, group, topic), in that order, from the lag table's runs (:func:`_runs`, by broker, one table a
    batch), as tables of about ``slice_rows`` rows (None: a broker's whole): the lag summed and the largest lag_ms
    (null when none); runs of one key that are apart (another order, another batch) are merged after the runs are
    sorted, across slices too.  Each broker's runs are let go once sorted and its rows taken a slice at a time: a
    spilled file's row per map is never copied whole.  The broker column is one shared block of rows
    (decoding.metadata.constant_column), not a string a row."""
    for broker in sorted(runs):  # Python's order of str is Arrow's of UTF-8 bytes
        t = pa.concat_tables(runs.pop(broker))
        order = pc.sort_indices(t, [("group", "ascending"), ("topic", "ascending")])
        step = max(slice_rows or len(t), 1)
        carry = None  # the last key of the slice before: the next may hold more of its runs
        for lo in range(0, len(t), step):
            part = t.take(order.slice(lo, step))
            part = _merged(part if carry is None else pa.concat_tables([carry, part]))
            if lo + step < len(t):
                part, carry = part.slice(0, len(part) - 1), part.slice(len(part) - 1)
            if part.num_rows:
                yield part.add_column(0, "broker", constant_column(broker, part.num_rows, pa.string()))


def _merged(t: pa.Table) -> pa.Table:
    """``t`` (runs in key order) with the runs of one (group, topic) next to each other made one (:func:`_reduced`)."""
    if len(t) > 1:
        same = np.ones(len(t) - 1, bool)
        for name in ("group", "topic"):
            c = t.column(name)
            same &= pc.equal(c.slice(1), c.slice(0, len(t) - 1)).to_numpy(zero_copy_only=False)
        if same.any():  # one key in runs apart: merged (small: a row per map)
            return _reduced(t, np.flatnonzero(np.r_[True, ~same]))
    return t


def _reduced(t: pa.Table, starts: np.ndarray) -> pa.Table:
    """One row per run of rows of ``t`` (the runs start at ``starts``): its key, the lags summed (:func:`_sums`),
    the largest lag_ms (null when none)."""
    ms = t.column("lag_ms")
    valid = ms.is_valid().to_numpy(zero_copy_only=False)
    ms_max = np.maximum.reduceat(np.where(valid, pc.fill_null(ms, 0).to_numpy(zero_copy_only=False), INT64_MIN),
                                 starts)
    ms_any = np.add.reduceat(valid.astype(np.int64), starts) > 0
    at = pa.array(starts)
    return pa.table({**{k: t.column(k).take(at) for k in ("broker", "group", "topic") if k in t.column_names},
                     "lag": pa.array(_sums(t.column("lag").to_numpy(), starts), pa.int64()),
                     "lag_ms": pa.array(ms_max, pa.int64(), mask=~ms_any)})


def _offset_findings(check_id: str, rows: pa.Table):
    """The findings of one offset check, from the lag table's rows it flags (with ``read_queue_nums``)."""
    n = rows.num_rows
    col = lambda name, typ: _as(rows.column(name), typ)  # noqa: E731
    group, offset = col("group", pa.string()), col("offset", pa.int64())
    details = {"group": group, "offset": offset}
    positions = dict(broker=col("broker", pa.string()), topic=col("topic", pa.string()),
                     queue_id=col("queue_id", pa.int32()),
                     file=pc.if_else(_from_lmq(rows.column("source")), _LMQ_FILE, _FILE))
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


def _lag_plot(ctx, tables, plt):
    """The groups furthest behind: messages not yet consumed per group and topic, the 30 largest."""
    lag = tables.get("lag")
    if lag is None or not lag.num_rows:
        return None
    per: dict[tuple, int] = {}
    for r in lag.to_pylist():
        per[(r["broker"], r["group"], r["topic"])] = per.get((r["broker"], r["group"], r["topic"]), 0) + r["lag"]
    top = sorted(per.items(), key=lambda kv: -kv[1])[:30]
    fig, ax = plt.subplots(figsize=(13, 0.5 + 0.32 * len(top)))
    ax.barh([f"{g} @ {t} ({b})"[:70] for (b, g, t), _ in top], [n for _, n in top], color="#e0a030")
    ax.set_xlabel("messages not yet consumed")
    ax.invert_yaxis()
    return "Consumer lag per group", fig


VIEW = TableView("Consumer lag", 10, (
    ("group", "group"), ("topic", "topic"), ("queue_id", "queue"), ("offset", "committed offset"),
    ("max_offset", "max offset"), ("lag", "lag (messages)"), ("lag_ms", "lag (time)"),
    ("first_unconsumed_store_time", "oldest unconsumed stored at"), ("retry", "retry")),
    empty="none: no group has an unconsumed message", needs="config/consumerOffset.json")

FAMILY = Family(
    "lag", "per group, topic and queue the message lag and time lag; offsets out of range, for unknown queues",
    probes=probes, probe_in_span=probe_in_span, in_range=in_range, on_driver=on_driver, emits={"lag.found": FOUND},
    reads=("lag.found",),
    tables={"lag": LAG}, views={"lag": VIEW}, plots=(Plot(30, _lag_plot),), rank=50,
    metrics={"lag_messages": "messages a group has not consumed, per topic (group)",
             "lag_ms": "age of the oldest unconsumed message at the dump time, per topic (group)"})
