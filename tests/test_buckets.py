"""jobs/audit/buckets.py's Buckets on the driver's disk: each bucket's rows come back in the order added, as the
buckets kept in memory give them, whether the rows added are written at every add or held across many; and the
files written grow with the rows, not with the adds times the buckets."""
from __future__ import annotations

import os

import numpy as np
import pyarrow as pa
import pytest

from jobs.audit import buckets as B

SCHEMA = pa.schema([("key", pa.string()), ("n", pa.int64())])


def _adds(seed: int, adds: int = 40, rows: int = 300):
    rng = np.random.default_rng(seed)
    for a in range(adds):
        n = int(rng.integers(0, rows))
        keys = rng.integers(0, 50, n)
        yield pa.table({"n": np.arange(a * rows, a * rows + n), "key": [f"k{k}" for k in keys]}), keys


@pytest.mark.parametrize("held", [1, 20_000, 1 << 30], ids=["written each add", "held across adds", "held whole"])
def test_each_bucket_reads_back_in_the_order_added(tmp_path, monkeypatch, held):
    monkeypatch.setattr(B, "HELD_BYTES", held)
    on_disk, in_memory = B.Buckets(str(tmp_path), "x", 7, SCHEMA), B.Buckets(None, "x", 7, SCHEMA)
    for t, keys in _adds(1):
        on_disk.add_by_key(t, "key")
        in_memory.add_by_key(t, "key")
    for i in range(7):
        assert on_disk.read(i).equals(in_memory.read(i)), i
    assert sum(on_disk.read(i).num_rows for i in range(7)) == sum(t.num_rows for t, _ in _adds(1))
    files = len(os.listdir(tmp_path / "x"))
    assert files <= 40 and (held == 1 or files < 40)  # a file per write, never one per bucket and add


def test_a_read_between_adds_sees_what_was_added_so_far(tmp_path, monkeypatch):
    monkeypatch.setattr(B, "HELD_BYTES", 5_000)
    b = B.Buckets(str(tmp_path), "x", 3, SCHEMA)
    seen = []
    for t, keys in _adds(2, adds=10):
        b.add(t, keys % 3)
        seen.append(t.filter(pa.array(keys % 3 == 1)))
        assert b.read(1).equals(pa.concat_tables(seen).select(SCHEMA.names).cast(SCHEMA))
    assert b.read(2).schema == SCHEMA


def test_a_scratchs_buckets_share_what_they_hold(tmp_path, monkeypatch):
    """Buckets of one scratch hold rows up to HELD_BYTES each between them (a stage's buckets holding more than
    their share, while the others hold less, write nothing), a dropped one leaves its room to the others, and past
    the budget the largest holder writes; every bucket reads back as in memory."""
    monkeypatch.setattr(B, "HELD_BYTES", 10_000)
    pool = B.Scratch(str(tmp_path))
    big, small = B.Buckets(pool, "big", 5, SCHEMA), B.Buckets(pool, "small", 5, SCHEMA)
    in_memory = B.Buckets(None, "x", 5, SCHEMA)
    adds = list(_adds(3, adds=12))
    for t, keys in adds[:6]:
        big.add(t, keys % 5)
        in_memory.add(t, keys % 5)
    assert 10_000 < big.held_bytes <= 20_000 and not os.listdir(tmp_path / "big")  # more than its share: held
    small.drop()  # its room is big's now: past 10,000 bytes, big writes
    for t, keys in adds[6:]:
        big.add(t, keys % 5)
        in_memory.add(t, keys % 5)
    assert os.listdir(tmp_path / "big") and pool.held <= 10_000 and pool.members == [big]
    for i in range(5):
        assert big.read(i).equals(in_memory.read(i)), i
    big.drop()
    assert pool.held == 0 and not pool.members and big.read(0).num_rows == 0
