"""A range's messages decoded ``_DECODE_ROWS`` at a time and made one array a column (jobs/audit/scan.py
``_one_array_each``: a column's pieces let go as it is made, where combining the whole table held them twice): the
same columns, and the same audit, as one decode."""
from __future__ import annotations

import numpy as np
import pyarrow as pa

from jobs.audit import scan


def test_each_column_made_of_its_pieces_is_the_combined_tables():
    rnd = np.random.default_rng(5)
    batches = [pa.record_batch({"n": pa.array(rnd.integers(0, 99, k), pa.int64()),
                                "s": pa.array([f"x{i}" * (i % 4) for i in range(k)], pa.string()),
                                "m": pa.array([None if i % 3 else i for i in range(k)], pa.int32())})
               for k in (5, 0, 7, 1)]
    expected = pa.Table.from_batches(batches).combine_chunks()
    given = list(batches)
    got = scan._one_array_each(given)
    assert given == [] and list(got) == ["n", "s", "m"]
    assert all(got[c].equals(expected.column(c).chunk(0)) for c in got)
    one = [batches[0]]
    assert scan._one_array_each(one)["s"].equals(batches[0].column("s")) and one == []


def test_an_audit_decoding_a_few_messages_at_a_time_is_the_same_audit(spark, two_stores, local_audit, tmp_path,
                                                                      monkeypatch):
    from jobs import audit

    from .conftest import assert_same_audit

    monkeypatch.setattr(scan, "_DECODE_ROWS", 3)
    out = tmp_path / "audit"
    args = audit.build_parser().parse_args(["--store", *map(str, two_stores), "--out", str(out)])
    assert audit.run(spark, args).exit_code == local_audit[1]
    assert_same_audit(out, local_audit[0])
