"""runtime/export.py through the decode job: the table its tasks write is the one Spark's writer makes of the same
DataFrame (rows, Parquet schema, Spark's footer, the schema Spark reads back), its tally is the counts the job
used to read back from it, and a task that fails leaves nothing committed."""
from __future__ import annotations

import pyarrow.parquet as pq
import pytest

from jobs import decode
from runtime.export import SPARK_SCHEMA_KEY, SPARK_VERSION_KEY
from runtime.output import write_table
from runtime.session import Executor
from runtime.stores import resolve_stores

from .conftest import fixture_store, parquet_rows


def _footer_and_schema(folder):
    files = sorted(p for p in folder.glob("*.parquet"))
    assert files
    md = pq.read_metadata(files[0])
    return {k: md.metadata[k] for k in (SPARK_SCHEMA_KEY.encode(), SPARK_VERSION_KEY.encode())}, md.schema


@pytest.mark.parametrize("case", [
    dict(store="basic", walk="kept"),
    dict(store="damaged", walk="salvage", columns=["queue_id", "tags", "body"]),
    dict(store="broker", walk="kept", topics="two", decompress=True),
])
def test_the_tasks_table_is_spark_writers_table(spark, damaged_store, tmp_path, case):
    from jobs.extract import predictions

    path = damaged_store if case["store"] == "damaged" else fixture_store(case["store"])
    stores = resolve_stores([str(path)], files=True)
    cuts = {name: p.cut for name, p in predictions(stores).items()}
    topics = None
    if case.get("topics"):
        all_topics = sorted({r.topic for r in decode.messages(spark, stores, cuts=cuts).select("topic").collect()})
        topics = all_topics[:2] + ["no-such-topic"]
    kw = dict(walk=case["walk"], topics=topics, decompress=case.get("decompress", False),
              columns=case.get("columns"), cuts=cuts)
    reference = tmp_path / "spark-writer"
    df = decode.messages(spark, stores, **kw)
    write_table(df, str(reference), "parquet")
    expected_rows = parquet_rows(reference)
    assert sum(expected_rows.values()) > 0
    for where in ("driver", "spark"):
        mine = tmp_path / where
        tally = decode.write_messages(spark, stores, str(mine), executor=Executor(where, 2), **kw)
        assert parquet_rows(mine) == expected_rows
        assert _footer_and_schema(mine) == _footer_and_schema(reference)
        assert spark.read.parquet(str(mine)).schema == spark.read.parquet(str(reference)).schema
        assert pq.read_table(mine).schema == pq.read_table(reference).schema  # what pandas gets
        # the counts the job used to read back, and its second scan's damage counts
        stats = spark.read.parquet(str(reference)).selectExpr("count(1) n", "count(distinct broker) b",
                                                              "count(distinct topic) t").first()
        assert (tally.rows, len(tally.distinct["broker"]), len(tally.distinct["topic"])) == tuple(stats)
        assert tally.counts == decode._damage(spark, stores, case["walk"], cuts)


def test_the_salvage_walk_of_a_damaged_store_counts_its_damage(spark, damaged_store, tmp_path):
    out = tmp_path / "out"
    args = decode.build_parser().parse_args(["--store", str(damaged_store), "--out", str(out), "--walk", "salvage"])
    result = decode.run(spark, args)
    assert result.exit_code == 0
    assert "0 stops on damage" not in result.summary  # the flipped bit stops the walk: counted by the tasks


def test_an_empty_table_is_one_file_with_the_schema(spark, tmp_path):
    stores = resolve_stores([str(fixture_store("basic"))], files=True)
    out = tmp_path / "empty"
    tally = decode.write_messages(spark, stores, str(out), topics=["no-such-topic"], executor=Executor("driver", 2))
    assert tally.rows == 0
    assert spark.read.parquet(str(out)).count() == 0
    assert spark.read.parquet(str(out)).schema == decode.messages(spark, stores).schema


def test_a_failed_task_leaves_nothing_committed(spark, tmp_path, monkeypatch):
    """A task that wrote its part and then failed (a lost disk, an interrupt): the run fails, the output stays as
    it was (absent here), nothing of the part is committed."""
    from runtime import export

    written = []
    write = export.PartWriter.write

    def write_then_fail(self, index, part):
        tally = write(self, index, part)
        written.extend(p for p in tmp_path.rglob("*.parquet"))
        raise OSError("disk gone")

    monkeypatch.setattr(export.PartWriter, "write", write_then_fail)
    out = tmp_path / "out"
    args = decode.build_parser().parse_args(["--store", str(fixture_store("broker")), "--out", str(out)])
    with pytest.raises(OSError, match="disk gone"):
        decode.run(spark, args)
    assert written  # the part was written (in the run's staging) before the task failed
    assert not out.exists()


def test_delta_from_the_tasks_is_the_table_spark_would_commit(spark, damaged_store, tmp_path):
    """--format delta: the tasks' files committed by delta-rs; delta-rs, pandas and Spark read the rows and the
    schema of the Delta table written from Spark's writer."""
    from deltalake import DeltaTable

    from runtime.output import read_table

    stores = resolve_stores([str(damaged_store)], files=True)
    reference = tmp_path / "spark-writer"
    write_table(decode.messages(spark, stores, walk="salvage"), str(reference), "delta")
    out = tmp_path / "tasks"
    args = decode.build_parser().parse_args(["--store", str(damaged_store), "--out", str(out), "--format", "delta",
                                             "--walk", "salvage"])
    assert decode.run(spark, args).exit_code == 0
    mine, theirs = DeltaTable(str(out)), DeltaTable(str(reference))
    assert mine.schema() == theirs.schema()
    assert parquet_rows(mine.to_pyarrow_table()) == parquet_rows(theirs.to_pyarrow_table())
    assert mine.to_pandas().shape == theirs.to_pandas().shape
    assert read_table(spark, str(out)).schema == read_table(spark, str(reference)).schema
    assert read_table(spark, str(out)).count() == theirs.to_pyarrow_table().num_rows
