"""Transactions: every half message resolved as committed, rolled back or still open.

Broker-style (4.x/5.x): half messages are stored in ``RMQ_SYS_TRANS_HALF_TOPIC``; an op message in
``RMQ_SYS_TRANS_OP_HALF_TOPIC`` with tag ``d`` marks half queue offsets done (body: one decimal offset in 4.x,
a comma list such as ``12,13,`` in 5.x); a commit writes the record into the real topic as COMMIT with
``preparedTransactionOffset`` = the half's physical offset.  A half that the checker re-put is the same
transaction (same UNIQ_KEY).  Raw-sysflag style: a PREPARED record in a topic is resolved by a COMMIT or
ROLLBACK record whose ``preparedTransactionOffset`` is its physical offset.

Checks: ``transactions.open`` (warning: no op message and no commit, with age, check times and producer
group), ``transactions.commit_without_op`` (warning: committed, but the half was never marked done: the
checker will ask the producer again), ``transactions.open_prepared_record`` (warning).  Detail table:
``transactions``.

The scan's tasks write the few records this needs (halves, op messages, commit/rollback records, PREPARED
records, kept ones only) as Parquet parts (a spilled partial); the driver pairs them up, reading one role's
columns at a time.  Under a state the pairing goes on from the last run's (:func:`kept_pairing`).
"""
from __future__ import annotations

import hashlib
import uuid

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from store_format import layout as L
from decoding.columns import column

from ..buckets import Buckets, bucket_count, key_hash, scratch as buckets_scratch
from ..findings import Consequence, Severity, check, finding_table, metric_table, slices
from ..contract import Family, FamilyResult, TableView

check("transactions.open", Severity.WARNING,
      "open transaction for {topic|?} from producer group {producer_group|?}, {age_seconds} s old at the dump time, "
      "checked {check_times} time(s)",
      consequence=Consequence.CONSUMERS_AFFECTED, group="topic",
      action="The broker keeps asking the producer group; if that producer is gone the transaction stays open until "
             "the check limit, then is discarded.  Ask the producer's owners.")
check("transactions.commit_without_op", Severity.WARNING,
      "transaction committed into {topic|?} but its half message was never marked done: the broker will check it "
      "again",
      consequence=Consequence.CONSUMERS_AFFECTED, group="topic",
      action="Harmless duplicate check; the producer must answer consistently.")
check("transactions.open_prepared_record", Severity.WARNING, "PREPARED record in {topic} has no COMMIT or ROLLBACK record",
      consequence=Consequence.CONSUMERS_AFFECTED, group="topic",
      action="An unfinished old-style transaction; decide with the producer.")

RECORDS = pa.schema([
    ("broker", pa.string()), ("role", pa.string()), ("physical_offset", pa.int64()), ("queue_offset", pa.int64()),
    ("topic", pa.string()), ("queue_id", pa.int32()), ("uniq_key", pa.string()), ("store_timestamp", pa.int64()),
    ("real_topic", pa.string()), ("real_queue_id", pa.int32()), ("producer_group", pa.string()),
    ("check_times", pa.string()), ("segment", pa.string()), ("file_position", pa.int64()),
    ("tran_type", pa.string()), ("prepared_transaction_offset", pa.int64()), ("op_body", pa.binary()),
])
TRANSACTIONS = pa.schema([
    column("broker", pa.string()),
    column("style", pa.string(), "`half` (broker-style: RMQ_SYS_TRANS_HALF_TOPIC + op messages) or "
                                 "`prepared_record` (a raw PREPARED record resolved by a COMMIT/ROLLBACK record)"),
    column("uniq_key", pa.string(), "the transaction's UNIQ_KEY (all re-put copies of a half share it)"),
    column("topic", pa.string(), "the real topic the transaction is for"),
    column("queue_id", pa.int32(), "the real queue id"),
    column("producer_group", pa.string(), "PGROUP: the producer group the broker checks back with"),
    column("physical_offset", pa.int64(), "the (last copy of the) half message"),
    column("half_queue_offset", pa.int64(), "its queue offset in RMQ_SYS_TRANS_HALF_TOPIC"),
    column("segment", pa.string()), column("file_position", pa.int64()),
    column("first_store_time", pa.int64(), "store time of the first half copy (ms)"),
    column("copies", pa.int64(), "half copies (check re-puts)"),
    column("check_times", pa.int32(), "TRANSACTION_CHECK_TIMES: how often the broker asked the producer"),
    column("resolved_time", pa.int64(), "store time of the op message that marked it done (ms)"),
    column("commit_physical_offset", pa.int64(), "the COMMIT record's physical offset"),
    column("state", pa.string(), "`committed`, `rolled_back`, `committed_without_op` or `open`"),
    column("age_ms", pa.int64(), "open transactions: dump time - first_store_time"),
])


def in_range(rc, out) -> None:
    m = rc.messages
    if not m.num_rows:
        return
    kept = rc.column("kept")
    topic, tran = m.column("topic"), m.column("tran_type")
    half = pc.equal(topic, L.TRANS_HALF_TOPIC).to_numpy(zero_copy_only=False)
    op = (pc.equal(topic, L.TRANS_OP_HALF_TOPIC).to_numpy(zero_copy_only=False)
          & pc.fill_null(pc.equal(m.column("tags"), L.TRANS_OP_REMOVE_TAG), False).to_numpy(zero_copy_only=False))
    end = (pc.is_in(tran, pa.array(["COMMIT", "ROLLBACK"])).to_numpy(zero_copy_only=False)
           & (rc.column("prepared_transaction_offset") > 0))
    prepared = pc.equal(tran, "PREPARED").to_numpy(zero_copy_only=False) & ~half
    role = np.select([half, op, end, prepared], [1, 2, 3, 4], 0) * kept
    rows = np.flatnonzero(role)
    if not len(rows):
        return
    t = m.take(rows)
    extra = rc.decode(rows, ("properties", "body"))
    props = extra.column("properties")
    body = pc.if_else(pa.array(role[rows] == 2), extra.column("body"), pa.nulls(len(rows), pa.binary()))
    out.spill("transactions.records", pa.table({
        "broker": pa.repeat(pa.scalar(rc.broker), len(rows)),
        "role": pa.array(np.array(["", "half", "op", "end", "prepared"])[role[rows]]),
        **{c: t.column(c) for c in ("physical_offset", "queue_offset", "topic", "queue_id", "uniq_key",
                                    "store_timestamp", "real_topic", "real_queue_id")},
        "producer_group": pc.map_lookup(props, L.PROPERTY_PRODUCER_GROUP, "first"),
        "check_times": pc.map_lookup(props, L.PROPERTY_TRANSACTION_CHECK_TIMES, "first"),
        "segment": t.column("segment"), "file_position": t.column("file_position"), "tran_type": t.column("tran_type"),
        "prepared_transaction_offset": t.column("prepared_transaction_offset"), "op_body": body}, schema=RECORDS))


# a half copy as the pairing carries it through its buckets: what the table takes of it, named by its transaction
_HALVES = pa.schema([RECORDS.field(n) for n in ("broker", "physical_offset", "queue_offset")] + [("txn", pa.string())]
                    + [RECORDS.field(n) for n in ("store_timestamp", "real_topic", "real_queue_id", "producer_group")]
                    + [("check_int", pa.int32())] + [RECORDS.field(n) for n in ("segment", "file_position")])
_PREPARED = pa.schema([RECORDS.field(n) for n in RECORDS.names if n != "op_body"])
_MARKS = pa.schema([("broker", pa.string()), ("queue_offset", pa.int64()), ("store_timestamp", pa.int64())])
_ENDS = pa.schema([("broker", pa.string()), ("physical_offset", pa.int64()), ("end_type", pa.string()),
                   ("end_physical_offset", pa.int64())])
_MARKED = pa.schema([*_HALVES, ("op_time", pa.int64())])
_RESOLVED = pa.schema([*_MARKED, ("commit_end", pa.int64()), ("op_done", pa.bool_())])
_STYLES = ("half", "prepared_record")  # a broker's rows in this order (the table's sort)


def _op_marks(ops: pa.Table) -> pa.Table:
    """(broker, queue_offset, store_timestamp): each half queue offset an op message (a row of ``ops``) marks
    done.  A body is one decimal offset (4.x) or a comma list (5.x), decoded as UTF-8 with replacement; a piece
    that is blank or not a long (as Spark casts it) marks nothing."""
    body = ops.column("op_body")
    try:
        text = pc.cast(body, pa.string())  # checked UTF-8, in one pass
    except pa.ArrowInvalid:  # a body that is not: every body decoded with replacement, a row at a time
        text = pa.array([(b or b"").decode("utf-8", "replace") for b in body.to_pylist()], pa.string())
    text = text.combine_chunks() if isinstance(text, pa.ChunkedArray) else text
    pieces = pc.split_pattern(pc.fill_null(text, ""), ",")
    row, q = pc.list_parent_indices(pieces), _longs(pc.list_flatten(pieces))
    row, q = row.filter(q.is_valid()), q.drop_null()
    return pa.table({"broker": ops.column("broker").take(row), "queue_offset": q,
                     "store_timestamp": ops.column("store_timestamp").take(row)}, schema=_MARKS)


def _op_times(marks: pa.Table) -> pa.Table:
    """(broker, queue_offset, op_time): the earliest op's store time for each half queue offset marked done."""
    g = marks.group_by(["broker", "queue_offset"]).aggregate([("store_timestamp", "min")])
    return g.rename_columns(["broker", "queue_offset", "op_time"]) if g.num_rows else pa.table(
        {"broker": pa.array([], pa.string()), "queue_offset": pa.array([], pa.int64()),
         "op_time": pa.array([], pa.int64())})


def _long(text: str) -> int | None:
    """Spark's cast of a string to a long (surrounding white space allowed), None when it is not one."""
    text = text.strip()
    if not text:
        return None
    try:
        v = int(text)
    except ValueError:
        return None
    return v if -2**63 <= v < 2**63 else None


# a text :func:`_long` certainly reads as the decimal it spells (ASCII spaces and digits, within a long): most are
_DECIMAL = r"^[\t\n\x0b\f\r ]*[+-]?[0-9]{1,18}[\t\n\x0b\f\r ]*$"


def _longs(texts) -> pa.Array:
    """:func:`_long` of each of ``texts`` (strings, null: null) as int64: the plain decimals cast in one pass (Arrow's
    cast takes no sign "+" and no spaces: both taken off first), the rest (blanks, other digits or spaces,
    underscores, 19 digits and more) a text at a time."""
    texts = texts.combine_chunks() if isinstance(texts, pa.ChunkedArray) else texts
    plain = pc.fill_null(pc.match_substring_regex(texts, _DECIMAL), False)
    cast = pc.cast(pc.replace_substring_regex(pc.utf8_trim(texts.filter(plain), " \t\n\x0b\f\r"), r"^\+", ""),
                   pa.int64())
    plain = plain.to_numpy(zero_copy_only=False)
    values, valid = np.zeros(len(texts), np.int64), plain.copy()
    values[plain] = cast.to_numpy()
    rest = np.flatnonzero(~plain & texts.is_valid().to_numpy(zero_copy_only=False))
    for i, t in zip(rest.tolist(), texts.take(pa.array(rest, pa.int64())).to_pylist()):
        v = _long(t)
        if v is not None:
            values[i], valid[i] = v, True
    return pa.array(values, pa.int64(), mask=~valid)


def _ints(texts) -> pa.Array:
    """Spark's cast of strings to ints (None where a text is not one)."""
    v = _longs(texts)
    fits = pc.and_(pc.greater_equal(v, -2**31), pc.less(v, 2**31))
    return pc.if_else(fits, v, pa.scalar(None, pa.int64())).cast(pa.int32())


def _ends(e: pa.Table) -> pa.Table:
    """Commit and rollback records (rows of role ``end``) by the offset of the half (or PREPARED record) they end."""
    return pa.table({"broker": e.column("broker"), "physical_offset": e.column("prepared_transaction_offset"),
                     "end_type": e.column("tran_type"), "end_physical_offset": e.column("physical_offset")},
                    schema=_ENDS)


def _when(cond, values):
    return pc.if_else(cond, values, pa.scalar(None, values.type))


def half_txn(records: pa.Table):
    """The transaction each half copy (a row of role ``half``) belongs to: its UNIQ_KEY, its physical offset where
    it has none."""
    return pc.coalesce(records.column("uniq_key"), pc.cast(records.column("physical_offset"), pa.string()))


def _halves(records: pa.Table) -> pa.Table:
    """Half copies (rows of role ``half``) as :data:`_HALVES`: a copy's transaction is its UNIQ_KEY (its physical
    offset where it has none), its check times an int.  The half topic and queue they were stored in (always the
    same) are not carried."""
    txn = half_txn(records)
    return pa.table({**{n: records.column(n) for n in _HALVES.names if n not in ("txn", "check_int")}, "txn": txn,
                     "check_int": _ints(records.column("check_times"))}).select(_HALVES.names)


def _resolved(h: pa.Table, ends: pa.Table) -> pa.Table:
    """Half copies (with their op marks) joined to the records that end them."""
    h = h.join(ends, ["broker", "physical_offset"], join_type="left outer")
    is_commit = pc.equal(h.column("end_type"), "COMMIT")
    h = h.append_column("commit_end", _when(is_commit, h.column("end_physical_offset")))
    return h.append_column("op_done", pc.is_valid(h.column("op_time")))


def _groups(h: pa.Table) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The rows of ``h`` in (transaction, physical offset) order -- a transaction being its (broker, txn) -- as
    positions into ``h``, and where each transaction's rows start and end in that order."""
    codes = [pc.dictionary_encode(h.column(c).combine_chunks()) for c in ("broker", "txn")]
    broker, txn = (c.indices.to_numpy(zero_copy_only=False).astype(np.int64) for c in codes)
    group = broker * len(codes[1].dictionary) + txn
    order = np.lexsort((h.column("physical_offset").to_numpy(), group))
    g = group[order]
    starts = np.flatnonzero(np.r_[True, g[1:] != g[:-1]])
    return order, starts, np.r_[starts[1:], len(g)]


def _first_where(mask: np.ndarray, starts: np.ndarray, ends: np.ndarray) -> np.ndarray:
    """Each group's first position where ``mask`` holds (groups as ``starts``/``ends`` of the rows), -1 where none."""
    at = np.flatnonzero(mask)
    i = np.searchsorted(at, starts)
    first = at[np.minimum(i, len(at) - 1)] if len(at) else np.zeros(len(starts), np.int64)
    return np.where((i < len(at)) & (first < ends), first, -1)


def _reduced(values, order: np.ndarray, starts: np.ndarray, how: str) -> pa.Array:
    """Each group's ``how`` ("min" or "max") of an integer column's values, nulls skipped (null where all are), as
    Arrow's hash aggregate gives it."""
    a = values.combine_chunks() if isinstance(values, pa.ChunkedArray) else values
    valid = a.is_valid().to_numpy(zero_copy_only=False)[order]
    info = np.iinfo(a.type.to_pandas_dtype())
    v = np.where(valid, a.fill_null(0).to_numpy()[order], info.max if how == "min" else info.min)
    out = (np.minimum if how == "min" else np.maximum).reduceat(v, starts)
    return pa.array(out, a.type, mask=np.logical_or.reduceat(valid, starts) == 0)


def _half_rows(h: pa.Table) -> pa.Table:
    """Rows of :data:`TRANSACTIONS` (``half`` style, no age) for every transaction of ``h`` (:data:`_RESOLVED`
    rows holding all copies of each), in no particular order.  Each transaction's copies in physical-offset order:
    the last copy (the highest half queue offset, the first such) names its half; topic, queue and producer group
    are the first copy's that has them."""
    order, starts, ends = _groups(h)
    rows = lambda positions: pa.array(order[positions])  # noqa: E731 - rows of h, by positions in the order
    qo = h.column("queue_offset").combine_chunks()
    qo_valid = qo.is_valid().to_numpy(zero_copy_only=False)[order]
    qo_v = qo.fill_null(0).to_numpy()[order]
    top = np.maximum.reduceat(np.where(qo_valid, qo_v, np.iinfo(np.int64).min), starts)
    any_qo = np.logical_or.reduceat(qo_valid, starts)
    group_of = np.repeat(np.arange(len(starts)), ends - starts)
    last = h.take(rows(_first_where(np.where(any_qo[group_of], qo_valid & (qo_v == top[group_of]), True), starts,
                                    ends)))
    firsts = {}
    for c in ("real_topic", "real_queue_id", "producer_group"):
        col = h.column(c)
        at = _first_where(col.is_valid().to_numpy(zero_copy_only=False)[order], starts, ends)
        firsts[c] = col.take(pa.array(np.where(at >= 0, order[np.maximum(at, 0)], 0), mask=at < 0))
    op_done = np.logical_or.reduceat(h.column("op_done").to_numpy(zero_copy_only=False)[order], starts)
    committed = _reduced(h.column("commit_end"), order, starts, "max")
    state = pc.if_else(pa.array(op_done), pc.if_else(pc.is_valid(committed), "committed", "rolled_back"),
                       pc.if_else(pc.is_valid(committed), "committed_without_op", "open"))
    n = len(starts)
    return pa.table({
        "broker": last.column("broker"), "style": pa.repeat(pa.scalar("half"), n), "uniq_key": last.column("txn"),
        "topic": firsts["real_topic"], "queue_id": firsts["real_queue_id"],
        "producer_group": firsts["producer_group"], "physical_offset": last.column("physical_offset"),
        "half_queue_offset": last.column("queue_offset"), "segment": last.column("segment"),
        "file_position": last.column("file_position"),
        "first_store_time": _reduced(h.column("store_timestamp"), order, starts, "min"),
        "copies": pa.array(ends - starts, pa.int64()),
        "check_times": pc.fill_null(_reduced(h.column("check_int"), order, starts, "max"), 0),
        "resolved_time": _reduced(h.column("op_time"), order, starts, "min"),
        "commit_physical_offset": committed, "state": state, "age_ms": pa.nulls(n, pa.int64())}, schema=TRANSACTIONS)


def _prepared_rows(p: pa.Table, ends: pa.Table) -> pa.Table:
    """Rows of :data:`TRANSACTIONS` (``prepared_record`` style, no age) for the PREPARED records ``p``, resolved by
    ``ends`` (all that end any of them)."""
    j = p.select(["broker", "physical_offset"]).join(ends, ["broker", "physical_offset"], join_type="inner")
    is_commit = pc.equal(j.column("end_type"), "COMMIT")
    j = pa.table({"broker": j.column("broker"), "physical_offset": j.column("physical_offset"),
                  "commit": _when(is_commit, j.column("end_physical_offset")),
                  "rollback": _when(pc.equal(j.column("end_type"), "ROLLBACK"), j.column("end_physical_offset"))})
    resolved = j.group_by(["broker", "physical_offset"]).aggregate([("commit", "max"), ("rollback", "max")])
    t = p.join(resolved, ["broker", "physical_offset"], join_type="left outer")
    commit, rollback = t.column("commit_max"), t.column("rollback_max")
    n = t.num_rows
    return pa.table({
        "broker": t.column("broker"), "style": pa.repeat(pa.scalar("prepared_record"), n),
        "uniq_key": t.column("uniq_key"), "topic": t.column("topic"), "queue_id": t.column("queue_id"),
        "producer_group": t.column("producer_group"), "physical_offset": t.column("physical_offset"),
        "half_queue_offset": pa.nulls(n, pa.int64()), "segment": t.column("segment"),
        "file_position": t.column("file_position"), "first_store_time": t.column("store_timestamp"),
        "copies": pa.repeat(pa.scalar(1, pa.int64()), n), "check_times": pa.repeat(pa.scalar(0, pa.int32()), n),
        "resolved_time": pa.nulls(n, pa.int64()), "commit_physical_offset": commit,
        "state": pc.if_else(pc.is_valid(commit), "committed", pc.if_else(pc.is_valid(rollback), "rolled_back",
                                                                            "open")),
        "age_ms": pa.nulls(n, pa.int64())}, schema=TRANSACTIONS)


class _Ranges:
    """The table's rows spread by (broker, style, range of physical offsets), so that reading the buckets in order
    and sorting each gives the table in its order: each broker's span of offsets cut in ``n`` equal ranges."""

    def __init__(self, scratch, spans: dict[str, list[int]], n: int):
        self.brokers, self.spans, self.n = sorted(spans), spans, n
        self.rows = Buckets(scratch, "table", len(self.brokers) * len(_STYLES) * n, TRANSACTIONS)

    def add(self, t: pa.Table) -> None:
        if not t.num_rows:
            return
        broker = pc.index_in(t.column("broker"), value_set=pa.array(self.brokers, pa.string())).to_numpy()
        lo = np.array([self.spans[b][0] for b in self.brokers], np.float64)[broker]
        width = np.array([self.spans[b][1] - self.spans[b][0] + 1 for b in self.brokers], np.float64)[broker]
        at = (t.column("physical_offset").to_numpy().astype(np.float64) - lo) / width * self.n
        style = pc.index_in(t.column("style"), value_set=pa.array(_STYLES)).to_numpy()
        self.rows.add(t, ((broker * len(_STYLES) + style) * self.n + np.clip(at.astype(np.int64), 0, self.n - 1)))

    def in_order(self):
        """(broker, rows) a bucket at a time, in the table's order (broker, style, physical offset)."""
        for i in range(self.rows.n):
            t = self.rows.read(i)
            if t.num_rows:
                yield self.brokers[i // (len(_STYLES) * self.n)], t.sort_by("physical_offset")


def _widen(spans: dict[str, list[int]], t: pa.Table) -> None:
    """Grow each broker's span of physical offsets to the rows of ``t``."""
    if not t.num_rows:
        return
    g = t.group_by("broker").aggregate([("physical_offset", "min"), ("physical_offset", "max")])
    for b, lo, hi in zip(*(g.column(c).to_pylist() for c in ("broker", "physical_offset_min", "physical_offset_max"))):
        span = spans.setdefault(b, [lo, hi])
        span[0], span[1] = min(span[0], lo), max(span[1], hi)


def transaction_batches(ctx):
    """The ``transactions`` table in order (broker, style, physical offset), a part at a time: never whole on the
    driver.  Under a state, a broker's pairing goes on from the last run's (:func:`kept_pairing`): only the
    transactions that records new or gone since touch are paired again."""
    for broker, t in kept_pairing(ctx, _paired):
        age = _when(pc.equal(t.column("state"), "open"),
                    pc.subtract(pa.scalar(ctx.as_of[broker], pa.int64()), t.column("first_store_time")))
        yield broker, t.set_column(t.schema.get_field_index("age_ms"), "age_ms", age)


def _paired(batches, n: int):
    """(broker, rows of the table without their age) in the table's order, from the records ``batches`` (tables of
    :data:`RECORDS`) spread over ``n`` buckets.  The pairing runs out of core (buckets.Buckets, on the driver's local
    disk): the records by role, each join and the grouping by transaction done a bucket of its key at a time, the
    rows then spread by ranges of offsets and each range sorted."""
    with buckets_scratch(n, "audit-transactions-") as scratch:
        halves = Buckets(scratch, "halves", n, _HALVES)
        marks = Buckets(scratch, "marks", n, _MARKS)
        ends = Buckets(scratch, "ends", n, _ENDS)
        prepared = Buckets(scratch, "prepared", n, _PREPARED)
        spans: dict[str, list[int]] = {}  # broker -> [lowest, highest] offset of its halves and PREPARED records
        for b in batches:
            role = b.column("role")
            h, p = b.filter(pc.equal(role, "half")), b.filter(pc.equal(role, "prepared"))
            halves.add_by_key(_halves(h), "broker", "queue_offset")
            marks.add_by_key(_op_marks(b.filter(pc.equal(role, "op"))), "broker", "queue_offset")
            ends.add_by_key(_ends(b.filter(pc.equal(role, "end"))), "broker", "physical_offset")
            prepared.add_by_key(p, "broker", "physical_offset")
            _widen(spans, h)
            _widen(spans, p)
            del b, h, p
        if not spans:
            return
        marked = Buckets(scratch, "marked", n, _MARKED)  # each half copy with its op mark, by its offset
        for i in range(n):
            h = halves.read(i)
            marked.add_by_key(h.join(_op_times(marks.read(i)), ["broker", "queue_offset"], join_type="left outer"),
                              "broker", "physical_offset")
        halves.drop()  # each stage's buckets let go once read: room for the next stage's (buckets.Scratch)
        marks.drop()
        table = _Ranges(scratch, spans, n)
        resolved = Buckets(scratch, "resolved", n, _RESOLVED)  # ... and the records ending it, by transaction
        for i in range(n):
            e = ends.read(i)
            h = marked.read(i)
            if h.num_rows:
                resolved.add_by_key(_resolved(h, e), "broker", "txn")
            p = prepared.read(i)
            if p.num_rows:
                table.add(_prepared_rows(p, e))
        for done in (ends, marked, prepared):
            done.drop()
        for i in range(n):
            h = resolved.read(i)
            if h.num_rows:
                table.add(_half_rows(h))
        resolved.drop()
        yield from table.in_order()


def transaction_table(ctx) -> pa.Table:
    """The whole ``transactions`` table (for a test or a notebook: the audit writes it a part at a time)."""
    parts = [t for _, t in transaction_batches(ctx)]
    return pa.concat_tables(parts) if parts else TRANSACTIONS.empty_table()


# ---------------------------------------------------------------------------------------------------------
# The pairing kept between runs (issue 41): a nightly audit pairs again only the transactions that records new or
# gone since the last run touch, not every record of the store.
#
# Under a state, each broker's table (its rows without their age) is kept in chunks, with the digest of every records
# part (a scan task's spilled ``transactions.records``) it was paired from, and for each part its keys (:data:`KEYS`):
# its halves' transaction, queue offset and physical offset, the half queue offsets its op messages mark, the offsets
# its commit and rollback records end, its PREPARED records' offsets.
#
# The next run compares the parts by digest: those added or gone are the change.  A transaction is paired again when
# one of its records is in the change, or is met by one there (a half whose queue offset an op message of the change
# marks, or whose offset a record of the change ends); then every part holding any record of it (every copy of its
# half, what marks and ends each) is read, and those parts' records paired as a full audit pairs them: its rows, and
# only its, replace the kept ones.  Every other transaction's records are the records it was paired from, so its row
# is the kept one (its age is worked out by the run).  Transactions are named by a 64-bit hash of their key: a
# transaction that shares one with a touched transaction is paired again with it, whole, which changes nothing.
#
# Without a kept pairing (the first run, another version's state, a part of the change whose keys were not kept, a
# chunk unreadable), when two parts have the same bytes, or when the parts to read again hold more than half the
# broker's records, the broker's records are paired whole, as without a state, and kept for the next run.

KEYS = pa.schema([("role", pa.int8()), ("txn", pa.int64()), ("queue_offset", pa.int64()),
                  ("physical_offset", pa.int64())])
_ROLE_HALF, _ROLE_MARK, _ROLE_END, _ROLE_PREPARED = 1, 2, 3, 4
# a broker's kept pairing: ("part", a records part's digest, its rows), then ("chunk", a chunk's name, its rows) for
# the table's chunks in order
META = pa.schema([("what", pa.string()), ("name", pa.string()), ("rows", pa.int64())])
CHUNK_ROWS = 1 << 16  # the kept table's rows a chunk: what a run holds of it at once
HELD_KEYS = 1 << 22  # key rows held between the passes over a broker's parts (32 MiB); past that, read again
_NO_NULL = np.iinfo(np.int64).min  # a null key: no record's offset; a match on it only pairs more again
_RECORD_COLUMNS = ["broker", "role", "physical_offset", "queue_offset", "uniq_key", "store_timestamp",
                   "prepared_transaction_offset", "op_body"]


def _nothing(memos):
    """What kept pairing rows depend on besides their inputs: nothing the store holds (their parts' digests say)."""
    return (), {}


def txn_hashes(txn) -> np.ndarray:
    """Each transaction's name (:func:`half_txn`, the table's ``uniq_key``) as a 64-bit hash."""
    return key_hash(txn.combine_chunks() if isinstance(txn, pa.ChunkedArray) else txn).view(np.int64)


def _int_keys(a) -> np.ndarray:
    """An integer column as keys (int64, a null as :data:`_NO_NULL`)."""
    return pc.fill_null(a, _NO_NULL).to_numpy(zero_copy_only=False).astype(np.int64)


def part_keys(records: pa.Table) -> pa.Table:
    """The keys (:data:`KEYS`) of a part's records (of :data:`transactions.RECORDS`)."""
    role = records.column("role")
    h = records.filter(pc.equal(role, "half"))
    marks = _op_marks(records.filter(pc.equal(role, "op")))
    ends = records.filter(pc.equal(role, "end"))
    prepared = records.filter(pc.equal(role, "prepared"))
    none = lambda n: np.full(n, _NO_NULL, np.int64)  # noqa: E731
    pieces = [
        (_ROLE_HALF, txn_hashes(half_txn(h)), _int_keys(h.column("queue_offset")),
         _int_keys(h.column("physical_offset"))),
        (_ROLE_MARK, none(marks.num_rows), _int_keys(marks.column("queue_offset")), none(marks.num_rows)),
        (_ROLE_END, none(ends.num_rows), none(ends.num_rows), _int_keys(ends.column("prepared_transaction_offset"))),
        (_ROLE_PREPARED, none(prepared.num_rows), none(prepared.num_rows),
         _int_keys(prepared.column("physical_offset")))]
    return pa.table({"role": pa.array(np.concatenate([np.full(len(p[1]), p[0], np.int8) for p in pieces])),
                     **{name: pa.array(np.concatenate([p[i] for p in pieces]))
                        for i, name in enumerate(KEYS.names[1:], 1)}}, schema=KEYS)


def _read_records(path: str, columns: list[str]) -> pa.Table:
    """Some ``columns`` of a records part (its path, as the scan's SPILLED rows name it)."""
    import pyarrow.parquet as pq

    from runtime.output import out_read

    return pq.read_table(pa.BufferReader(out_read(path)), schema=RECORDS, columns=columns)


def kept_pairing(ctx, paired):
    """(broker, rows without their age) of the table in its order: ``paired`` (:func:`_paired`) over the
    records, or under a state each broker's pairing gone on from the last run's (the comment above)."""
    from runtime.output import out_parts_batches

    parts = ctx.partial_parts("transactions.records")
    paths, brokers, rows = (parts.column(c).to_pylist() for c in ("path", "broker", "rows"))
    state = getattr(ctx, "state", None)
    if state is None or any(b is None for b in brokers) or not all(state.compared(b) for b in set(brokers)):
        yield from paired(out_parts_batches(sorted(paths), RECORDS, gather=True), bucket_count(sum(rows)))
        return
    by_broker: dict[str, list] = {}
    for path, broker, n in sorted(zip(paths, brokers, rows)):
        by_broker.setdefault(broker, []).append((path, n))
    for broker in sorted(by_broker):
        yield from _BrokerPairing(ctx, state, broker, by_broker[broker], paired).rows()


class _BrokerPairing:
    """One broker's pairing under a state (the comment above :data:`KEYS`)."""

    def __init__(self, ctx, state, broker: str, parts: list, paired):
        from runtime.output import out_read

        from ..kept import offer_rows

        self.ctx, self.state, self.broker, self.paired = ctx, state, broker, paired
        self.offer = lambda what, inputs, schema: offer_rows(state, broker, what, inputs, schema)  # noqa: E731
        self.parts = []  # (digest, path, rows) in the parts' order
        for path, n in parts:
            self.parts.append((hashlib.sha256(out_read(path)).hexdigest(), path, n))
        self.held: dict[str, pa.Table] = {}  # parts' keys held between passes
        self.held_rows = 0

    # -- the keys of the parts ------------------------------------------------------------------------------------
    def _keys(self, digest: str, path: str | None, first: bool = False) -> pa.Table | None:
        """A part's keys: held, kept by the last run (kept again on the ``first`` look at a part of this run's), or
        worked out from its records (``path``) and kept; None for a gone part whose keys were not kept."""
        if digest in self.held:
            return self.held[digest]
        keeping = self.offer("transactions.keys", (digest,), KEYS)
        keys = keeping.rows(_nothing, again=first and path is not None)
        if keys is None and path is not None:
            keys = part_keys(_read_records(path, columns=_RECORD_COLUMNS))
            keeping.keep(keys, {}, _nothing)
        if keys is not None and self.held_rows + keys.num_rows <= HELD_KEYS:
            self.held[digest] = keys
            self.held_rows += keys.num_rows
        return keys

    def _plan(self):
        """(the parts to read again, the transactions and PREPARED offsets to pair again, the kept chunks), or None
        when the broker's records are paired whole."""
        meta = self.offer("transactions.pairing", ("meta",), META).rows(_nothing, again=False)
        if meta is None:
            return None
        what, name, n = (meta.column(c).to_pylist() for c in META.names)
        was = [x for w, x in zip(what, name) if w == "part"]
        chunks = [(x, k) for w, x, k in zip(what, name, n) if w == "chunk"]
        now = [d for d, _, _ in self.parts]
        if len(set(was)) != len(was) or len(set(now)) != len(now):  # parts of the same bytes: compared as sets
            return None  # they would miss one more or fewer (no two ranges spill the same records)
        was, now = set(was), set(now)
        change = [self._keys(d, p, first=True) for d, p, _ in self.parts if d not in was] + \
            [self._keys(d, None) for d in sorted(was - now)]
        if any(k is None for k in change):
            return None
        for d, p, _ in self.parts:  # each part's keys kept again for the next run
            if d in was:
                self._keys(d, p, first=True)
        change = pa.concat_tables(change) if change else KEYS.empty_table()
        role = change.column("role").to_numpy()
        col = {c: change.column(c).to_numpy() for c in KEYS.names[1:]}
        txns = [col["txn"][role == _ROLE_HALF]]
        marked = np.unique(col["queue_offset"][(role == _ROLE_HALF) | (role == _ROLE_MARK)])
        ended = np.unique(col["physical_offset"][(role == _ROLE_HALF) | (role == _ROLE_END)])
        prepared = np.unique(col["physical_offset"][(role == _ROLE_PREPARED) | (role == _ROLE_END)])
        for keys in self._all_keys():  # the halves the change marks or ends: their transactions
            r, x, q, p = (keys.column(c).to_numpy() for c in KEYS.names)
            met = (r == _ROLE_HALF) & (_among(q, marked) | _among(p, ended))
            txns.append(x[met])
        txns = np.unique(np.concatenate(txns))
        queue_offsets, offsets = [], [prepared]
        for keys in self._all_keys():  # each copy of those transactions: what marks and ends it
            r, x, q, p = (keys.column(c).to_numpy() for c in KEYS.names)
            mine = (r == _ROLE_HALF) & _among(x, txns)
            queue_offsets.append(q[mine])
            offsets.append(p[mine])
        queue_offsets, offsets = np.unique(np.concatenate(queue_offsets)), np.unique(np.concatenate(offsets))
        again = []
        for (d, path, n), keys in zip(self.parts, self._all_keys()):
            r, x, q, p = (keys.column(c).to_numpy() for c in KEYS.names)
            if (((r == _ROLE_HALF) & _among(x, txns)) | ((r == _ROLE_MARK) & _among(q, queue_offsets))
                    | ((r == _ROLE_END) & _among(p, offsets)) | ((r == _ROLE_PREPARED) & _among(p, prepared))).any():
                again.append((path, n))
        if 2 * sum(n for _, n in again) > sum(n for _, _, n in self.parts):
            return None
        kept = []
        for name, n in chunks:  # every chunk there and whole before a row is given
            t = self.offer("transactions.table", (name,), TRANSACTIONS).rows(_nothing, again=False)
            if t is None or t.num_rows != n:
                return None
            kept.append(name)
        return again, txns, prepared, kept

    def _all_keys(self):
        """Each part's keys, in the parts' order."""
        for d, path, _ in self.parts:
            yield self._keys(d, path)

    # -- the rows ---------------------------------------------------------------------------------------------------
    def rows(self):
        from runtime.output import out_parts_batches

        plan = self._plan()
        total = sum(n for _, _, n in self.parts)
        if plan is None:  # paired whole: every part's keys kept for the next run
            for d, path, _ in self.parts:
                self._keys(d, path, first=True)
            made = self.paired(out_parts_batches([p for _, p, _ in self.parts], RECORDS, gather=True),
                               bucket_count(total))
            source = (t for _, t in made)
        else:
            again, txns, prepared, kept = plan
            made = self.paired(out_parts_batches([p for p, _ in again], RECORDS, gather=True),
                               bucket_count(sum(n for _, n in again))) if again else iter(())
            source = _merged((_touched(t, txns, prepared, False) for t in self._chunks(kept)),
                             (_touched(t, txns, prepared, True) for _, t in made))
        token, chunks, held = uuid.uuid4().hex, [], []
        for t in source:
            if not t.num_rows:
                continue
            held.append(t)
            if sum(x.num_rows for x in held) >= CHUNK_ROWS:
                chunks.append(self._keep_chunk(token, len(chunks), pa.concat_tables(held)))
                held = []
            yield self.broker, t
        if held:
            chunks.append(self._keep_chunk(token, len(chunks), pa.concat_tables(held)))
        meta = [("part", d, n) for d, _, n in self.parts] + [("chunk", name, n) for name, n in chunks]
        self.offer("transactions.pairing", ("meta",), META).keep(
            pa.table({c: [m[i] for m in meta] for i, c in enumerate(META.names)}, schema=META), {}, _nothing)

    def _chunks(self, names: list[str]):
        for name in names:
            t = self.offer("transactions.table", (name,), TRANSACTIONS).rows(_nothing, again=False)
            if t is None:  # read whole by _plan a moment ago
                raise RuntimeError(f"the state's kept transactions of broker {self.broker} went unreadable "
                                   "during the run: audit again")
            yield t

    def _keep_chunk(self, token: str, seq: int, rows: pa.Table) -> tuple[str, int]:
        name = f"{token}-{seq}"
        self.offer("transactions.table", (name,), TRANSACTIONS).keep(rows, {}, _nothing)
        return name, rows.num_rows


def _among(values: np.ndarray, among: np.ndarray) -> np.ndarray:
    """Whether each of ``values`` is one of ``among`` (sorted, unique): a search, not a sort of ``values``."""
    if not len(among):
        return np.zeros(len(values), bool)
    at = np.minimum(np.searchsorted(among, values), len(among) - 1)
    return among[at] == values


def _touched(t: pa.Table, txns: np.ndarray, prepared: np.ndarray, keep: bool) -> pa.Table:
    """The rows of ``t`` of the transactions paired again (``keep``), or the others."""
    half = pc.equal(t.column("style"), "half").to_numpy(zero_copy_only=False)
    hit = np.where(half, _among(txn_hashes(t.column("uniq_key")), txns),
                   _among(_int_keys(t.column("physical_offset")), prepared))
    return t.filter(pa.array(hit if keep else ~hit))


def _merged(a, b):
    """Two streams of a broker's rows, each in the table's order (style, physical offset), as one."""
    streams = [iter(a), iter(b)]
    held = [TRANSACTIONS.empty_table(), TRANSACTIONS.empty_table()]
    live = [True, True]
    order = [("style", "ascending"), ("physical_offset", "ascending")]
    while True:
        for i in (0, 1):
            while live[i] and not held[i].num_rows:
                nxt = next(streams[i], None)
                if nxt is None:
                    live[i] = False
                else:
                    held[i] = nxt
        full = [i for i in (0, 1) if held[i].num_rows]
        if not full:
            return
        if len(full) == 1:
            yield held[full[0]]
            held[full[0]] = TRANSACTIONS.empty_table()
            continue
        ends = [(held[i].column("style")[-1].as_py(), held[i].column("physical_offset")[-1].as_py()) for i in (0, 1)]
        style, offset = min(ends)
        taken = []
        for i in (0, 1):
            s, p = held[i].column("style"), held[i].column("physical_offset")
            upto = pc.or_(pc.less(s, style), pc.and_(pc.equal(s, style), pc.less_equal(p, offset)))
            n = int(pc.sum(upto).as_py() or 0)  # a prefix: the rows are in order
            taken.append(held[i].slice(0, n))
            held[i] = held[i].slice(n)
        yield pa.concat_tables(taken).sort_by(order)


_CHECKS = ("transactions.open", "transactions.commit_without_op", "transactions.open_prepared_record")


def _findings(t: pa.Table) -> dict[str, pa.Table]:
    """The findings of some rows of the table, by check."""
    state, style = t.column("state"), t.column("style")
    is_open = pc.equal(state, "open")
    out = {}
    for check_id, mask, half in (
            (_CHECKS[0], pc.and_(is_open, pc.equal(style, "half")), True),
            (_CHECKS[1], pc.equal(state, "committed_without_op"), True),
            (_CHECKS[2], pc.and_(is_open, pc.equal(style, "prepared_record")), False)):
        sel = t.filter(mask)
        if not sel.num_rows:
            continue
        uniq = sel.column("uniq_key")
        where = {"uniq_key": uniq, "key": uniq, "producer_group": sel.column("producer_group")}
        extra = {"age_ms": sel.column("age_ms"), "check_times": sel.column("check_times")} \
            if check_id == "transactions.open" else \
            {"commit_physical_offset": sel.column("commit_physical_offset")} \
            if check_id == "transactions.commit_without_op" else {}
        positions = dict(broker=sel.column("broker"), file=sel.column("segment"),
                         file_position=sel.column("file_position"), physical_offset=sel.column("physical_offset"))
        if half:
            positions.update(topic=L.TRANS_HALF_TOPIC, queue_id=0, queue_offset=sel.column("half_queue_offset"))
        else:
            positions.update(topic=sel.column("topic"), queue_id=sel.column("queue_id"))
        age = sel.column("age_ms").to_pylist()
        out[check_id] = finding_table(check_id, sel.num_rows, values={
            "topic": sel.column("topic"), "producer_group": sel.column("producer_group"),
            "age_seconds": pa.array([None if a is None else int(a / 1000) for a in age], pa.int64()),
            "check_times": sel.column("check_times")}, details={**where, **extra}, **positions)
    return out


def on_driver(ctx) -> FamilyResult:
    """The transactions table written a part at a time; what stays on the driver is per broker (the counts) and
    the findings (a check's in the table's order, the checks in turn)."""
    res = FamilyResult()
    writer = ctx.table_writer("transactions", TRANSACTIONS)
    found = {c: ctx.findings_writer(c) for c in _CHECKS}
    counts = []
    for _, t in transaction_batches(ctx):
        writer.write(t)
        for part in slices(t):
            for check_id, f in _findings(part).items():
                found[check_id].write(f)
        counts.append(t.append_column("open", pc.cast(pc.equal(t.column("state"), "open"), pa.int64())).group_by(
            "broker").aggregate([("open", "sum"), ("broker", "count")]))
    res.tables["transactions"] = writer.close()
    res.findings += [found[c].close() for c in _CHECKS]
    if counts:
        g = pa.concat_tables(counts).group_by("broker", use_threads=False).aggregate(
            [("open_sum", "sum"), ("broker_count", "sum")])
        res.metrics.append(metric_table("broker", {"open_transactions": g.column("open_sum_sum"),
                                                   "transactions": g.column("broker_count_sum")},
                                        n=g.num_rows, broker=g.column("broker")))
    return res


VIEW = TableView("Transactions", 20, (
    ("topic", "topic"), ("queue_id", "queue"), ("producer_group", "producer group"), ("uniq_key", "unique key"),
    ("physical_offset", "physical offset"), ("state", "state"), ("first_store_time", "stored at"), ("age_ms", "age"),
    ("check_times", "checks"), ("resolved_time", "resolved at"), ("style", "style")),
    empty="none: no half message in the commitlog")

FAMILY = Family(
    "transactions", "every half message committed, rolled back or open, with its age; raw PREPARED records",
    in_range=in_range, on_driver=on_driver, emits={"transactions.records": RECORDS},
    reads=("transactions.records",), tables={"transactions": TRANSACTIONS},
    views={"transactions": VIEW}, rank=60, beside=True,
    metrics={"open_transactions": "half messages neither committed nor rolled back (broker)",
             "transactions": "transactions seen (broker)"})
