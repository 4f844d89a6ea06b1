"""The transactions family's grouping of half copies by transaction (jobs/audit/checks/transactions.py
``_half_rows``, numpy over one sort) against the hash aggregates it replaced, which say what each figure is: the last
copy the highest half queue offset (nulls last, then the lowest physical offset), the firsts the first copy in
physical-offset order that has one, the others min/max/any/count with nulls skipped."""
from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest

from jobs.audit.checks import transactions as T


def _reference(h: pa.Table) -> pa.Table:
    last = h.sort_by([("broker", "ascending"), ("txn", "ascending"), ("queue_offset", "descending"),
                      ("physical_offset", "ascending")]).group_by(["broker", "txn"], use_threads=False).aggregate(
        [(c, "first") for c in ("physical_offset", "queue_offset", "segment", "file_position")])
    skip = pc.ScalarAggregateOptions(skip_nulls=True)
    agg = h.sort_by([("broker", "ascending"), ("txn", "ascending"), ("physical_offset", "ascending")]).group_by(
        ["broker", "txn"], use_threads=False).aggregate(
        [("store_timestamp", "min"), ("physical_offset", "count"), ("real_topic", "first", skip),
         ("real_queue_id", "first", skip), ("producer_group", "first", skip), ("check_int", "max"),
         ("op_done", "any"), ("op_time", "min"), ("commit_end", "max")])
    t = agg.join(last, ["broker", "txn"])
    op_done = pc.fill_null(t.column("op_done_any"), False)
    committed = pc.is_valid(t.column("commit_end_max"))
    return pa.table({
        "broker": t.column("broker"), "uniq_key": t.column("txn"), "topic": t.column("real_topic_first"),
        "queue_id": t.column("real_queue_id_first"), "producer_group": t.column("producer_group_first"),
        "physical_offset": t.column("physical_offset_first"), "half_queue_offset": t.column("queue_offset_first"),
        "segment": t.column("segment_first"), "file_position": t.column("file_position_first"),
        "first_store_time": t.column("store_timestamp_min"),
        "copies": t.column("physical_offset_count").cast(pa.int64()),
        "check_times": pc.fill_null(t.column("check_int_max"), 0).cast(pa.int32()),
        "resolved_time": t.column("op_time_min"), "commit_physical_offset": t.column("commit_end_max"),
        "state": pc.if_else(op_done, pc.if_else(committed, "committed", "rolled_back"),
                            pc.if_else(committed, "committed_without_op", "open"))})


def _copies(rng, n: int) -> pa.Table:
    """``n`` half copies of a few hundred transactions over two brokers, every nullable column sometimes null,
    queue offsets often tied within a transaction, the rows in no order."""
    def maybe(values, p=0.2):
        a = pa.array(values)
        return pc.if_else(pa.array(rng.random(n) < p), pa.nulls(n, a.type), a)

    txn = rng.integers(0, n // 3 + 1, n)
    op_time = maybe(rng.integers(0, 10**6, n), 0.5)
    phys = rng.permutation(n * 7)[:n].astype(np.int64)  # distinct, as a broker's records' offsets are
    return pa.table({
        "broker": pa.array(np.where(txn % 3 == 0, "b2", "b1")), "txn": pa.array([f"t{x}" for x in txn]),
        "physical_offset": pa.array(phys), "queue_offset": maybe(rng.integers(0, 6, n) + txn * 3, 0.1),
        "segment": pa.array([f"s{x % 4}" for x in phys]), "file_position": pa.array(phys % 1000),
        "store_timestamp": maybe(rng.integers(0, 10**9, n), 0.05),
        "real_topic": maybe([f"T{x}" for x in rng.integers(0, 3, n)], 0.4),
        "real_queue_id": maybe(rng.integers(0, 4, n).astype(np.int32), 0.4),
        "producer_group": maybe([f"g{x}" for x in rng.integers(0, 3, n)], 0.4),
        "check_int": maybe(rng.integers(-5, 20, n).astype(np.int32), 0.3),
        "op_time": op_time, "op_done": pc.is_valid(op_time),
        "commit_end": maybe(rng.integers(0, 10**9, n), 0.6)})


@pytest.mark.parametrize("seed", range(6))
def test_the_grouping_is_the_hash_aggregates(seed):
    h = _copies(np.random.default_rng(seed), [1, 2, 50, 400, 2000, 9000][seed])
    got = T._half_rows(h)
    assert got.schema == T.TRANSACTIONS and got.column("style").to_pylist() == ["half"] * got.num_rows
    assert pc.all(pc.is_null(got.column("age_ms"))).as_py()
    key = [("broker", "ascending"), ("physical_offset", "ascending")]
    want = _reference(h).sort_by(key)
    assert got.select(want.column_names).sort_by(key).equals(want.cast(got.select(want.column_names).schema))


def test_a_transaction_whose_copies_have_no_queue_offset_is_named_by_its_first_copy():
    h = _copies(np.random.default_rng(9), 30)
    h = h.set_column(h.schema.get_field_index("queue_offset"), "queue_offset", pa.nulls(30, pa.int64()))
    got = T._half_rows(h).sort_by("physical_offset")
    first = h.group_by(["broker", "txn"]).aggregate([("physical_offset", "min")])
    assert sorted(got.column("physical_offset").to_pylist()) == sorted(first.column(2).to_pylist())
