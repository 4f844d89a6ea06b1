"""jobs/extract.py's selection written by the tasks that read it (issue 40, "export at scan speed"): for every
selection whose rows depend on no other row, the table, its order, the manifest (counts, the walk's report, the
holes) and the exit code equal those of the Spark path it replaced, which still serves the other selections."""
from __future__ import annotations

import io
import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from jobs import extract
from runtime.export import Tally

from .conftest import FIXTURES_5X, fixture_store, parquet_rows


def _run(spark, argv: list, out: Path, tasks: bool, monkeypatch) -> tuple[int, str]:
    monkeypatch.setattr(extract, "written_by_tasks", lambda args: tasks and args.format in extract.TASK_WRITTEN)
    err = io.StringIO()
    args = extract.build_parser().parse_args([str(a) for a in argv] + ["--out", str(out)])
    code = extract.run(spark, args, err=err).exit_code
    return code, err.getvalue().replace(str(out), "OUT")


def _in_file_order(folder: Path) -> list[tuple]:
    """(broker, physical_offset) of every row, part files in name order: the output's order."""
    rows = []
    for f in sorted(folder.glob("*.parquet")):
        t = pq.read_table(f, columns=["broker", "physical_offset"])
        rows += list(zip(t.column("broker").to_pylist(), t.column("physical_offset").to_pylist()))
    return rows


def _manifest(folder: Path) -> dict:
    m = json.loads((folder / extract.MANIFEST_NAME).read_text())
    m["output"].pop("path")
    return m


def _same_both_ways(spark, tmp_path, monkeypatch, argv: list, fmt: str = "parquet") -> dict:
    argv = [*argv, "--format", fmt]
    by_spark, by_tasks = tmp_path / "spark", tmp_path / "tasks"
    expected = _run(spark, argv, by_spark, False, monkeypatch)
    got = _run(spark, argv, by_tasks, True, monkeypatch)
    assert got == expected
    if expected[0] != 0:
        assert not by_tasks.exists() and not by_spark.exists()
        return {}
    if fmt == "delta":
        from deltalake import DeltaTable

        mine, theirs = (DeltaTable(str(p)).to_pyarrow_table() for p in (by_tasks, by_spark))
        assert parquet_rows(mine) == parquet_rows(theirs)
        assert mine.schema == theirs.schema
    else:
        assert parquet_rows(by_tasks) == parquet_rows(by_spark)
        assert _in_file_order(by_tasks) == _in_file_order(by_spark)
        assert spark.read.parquet(str(by_tasks)).schema == spark.read.parquet(str(by_spark)).schema
        assert pq.read_table(by_tasks).schema == pq.read_table(by_spark).schema  # what pandas gets
    m = _manifest(by_tasks)
    assert m == _manifest(by_spark)
    return m


@pytest.fixture(scope="module")
def cut_store(tmp_path_factory):
    """A store cut by its broker in the middle (a flipped body bit, segments after it): holes and messages past the
    cut (tests/test_extract_replay.py's store)."""
    from .test_extract_replay import _demo_like

    return _demo_like(tmp_path_factory.mktemp("cut"))


@pytest.mark.parametrize("argv", [
    [],
    ["--walk", "salvage"],
    ["--topic", "TOPIC", "--queue", "QUEUE"],
    ["--topic", "TOPIC", "--queue", "QUEUE", "--walk", "salvage"],
    ["--topic", "TOPIC", "--queue-offsets", "3..", "--walk", "salvage"],
    ["--physical-offsets", "..CUT", "--tran-type", "NOT"],
    ["--retry"],
    ["--topic", "no-such-topic"],
], ids=["default", "salvage", "queue", "queue-salvage", "queue-offsets", "offsets-tran-type", "retry", "nothing"])
def test_a_cut_stores_selections_are_the_same_both_ways(spark, tmp_path, monkeypatch, cut_store, argv):
    store, victim, cut = cut_store
    argv = [{"TOPIC": victim.topic, "QUEUE": victim.queue_id, "..CUT": f"..{cut.physical_offset + 10_000}"}.get(a, a)
            for a in argv]
    m = _same_both_ways(spark, tmp_path, monkeypatch, ["--store", store, *argv])
    if "salvage" in argv and "--queue" in argv:  # the damaged record's hole, found from the tasks' queue spans
        assert m["holes"]["holes"] == 1 and m["holes"]["listed"][0]["queue_offsets"] == [victim.queue_offset] * 2


def test_holes_the_tasks_cannot_tell_are_found_in_the_table_written(spark, tmp_path, monkeypatch, cut_store):
    """A task that meets more queues than it says the runs of leaves the holes to Spark's sort of the table."""
    store, victim, _ = cut_store
    monkeypatch.setattr(extract, "RUNS_PER_TASK", 1)
    sorted_in_spark, real = [], extract.selection_holes
    monkeypatch.setattr(extract, "selection_holes", lambda *a: sorted_in_spark.append(1) or real(*a))
    m = _same_both_ways(spark, tmp_path, monkeypatch, ["--store", store, "--topic", victim.topic, "--walk", "salvage"])
    assert len(sorted_in_spark) == 2  # the Spark path's, and the tasks' fallback
    assert m["holes"]["holes"] >= 1 and victim.queue_offset in {h["queue_offsets"][0] for h in m["holes"]["listed"]}


@pytest.mark.parametrize("argv", [
    ["--tag", "TAG"],
    ["--key", "KEY"],
    ["--from", "FROM", "--to", "TO"],
    ["--to", "0"],
], ids=["tag", "key", "time-range", "before-any"])
def test_rocketmqs_stores_selections_are_the_same_both_ways(spark, tmp_path, monkeypatch, argv):
    from store_format.store import Store

    store = fixture_store("broker")
    msgs = [f.message for f in Store(store).walk_commitlog(decode=True) if f.kind == "message"]
    keyed, tagged = next(m for m in msgs if m.keys), next(m for m in msgs if m.tags)
    times = sorted(m.store_timestamp for m in msgs)
    values = {"KEY": keyed.keys[0], "TAG": tagged.tags, "FROM": times[len(times) // 3],
              "TO": times[2 * len(times) // 3]}
    _same_both_ways(spark, tmp_path, monkeypatch, ["--store", store, *[values.get(a, a) for a in argv]])


def test_several_stores_and_batch_topics_are_the_same_both_ways(spark, tmp_path, monkeypatch):
    """Brokers in name order whatever the order given; a batch topic's records take no part in the holes."""
    batch = FIXTURES_5X / "v5-batchcq" / "store"
    m = _same_both_ways(spark, tmp_path, monkeypatch,
                        ["--store", f"zz={fixture_store('basic')}", f"aa={batch}", "--walk", "salvage"])
    assert [b["broker"] for b in m["brokers"]] and m["holes"]["checked"]


def test_a_delta_table_is_the_same_both_ways(spark, tmp_path, monkeypatch):
    _same_both_ways(spark, tmp_path, monkeypatch, ["--store", fixture_store("basic")], fmt="delta")


def test_the_holes_between_tasks_and_where_only_the_whole_queue_can_tell():
    said = {"queues": [["b", "T", 0, 10, 1000, 19, 1900], ["b", "T", 0, 0, 0, 7, 700], ["b", "T", 1, 0, 5, 0, 5]],
            "gaps": [["b", "T", 0, 3, 4, 200, 500]]}
    holes = extract.holes_of_tasks(dict(said))
    assert holes["missing"] == 4 and holes["holes"] == 2
    assert [(h["queue_offsets"], h["after_physical_offset"], h["before_physical_offset"]) for h in holes["listed"]] == [
        ([3, 4], 200, 500), ([8, 9], 700, 1000)]
    said["queues"] = said["queues"] + [["b", "T", 0, 15, 1500, 30, 3000]]  # inside another task's: out of order
    assert extract.holes_of_tasks(said) is None
    assert extract.holes_of_tasks({"unsure": [True], "queues": [], "gaps": []}) is None  # a task with too many


def test_runs_that_meet_are_one_as_the_tasks_come_in():
    """The driver holds a run per queue and per hole, not per task: a thousand tasks over one queue without a hole
    leave one run."""
    total = Tally()
    for i in range(3000):
        extract.absorb_task(total, Tally(said={"queues": [["b", "T", 0, 10 * i, 100 * i, 10 * i + 9, 100 * i + 90]],
                                               "gaps": []}))
    extract.coalesce_runs(total.said)
    assert total.said["queues"] == [["b", "T", 0, 0, 0, 29999, 299990]]
    assert extract.holes_of_tasks(total.said)["holes"] == 0


def test_a_tasks_queue_spans_and_holes():
    rows = extract.SelectedRows([], (None, None), False, ["broker"], {"b": {"B"}})
    tally = Tally()
    batch = pa.RecordBatch.from_pydict({
        "kind": ["message"] * 6, "broker": ["b"] * 6, "kept": [True] * 6, "beyond_first_stop": [False] * 6,
        "topic": ["T", "T", "T", "B", "T", "U"], "queue_id": [0, 0, 0, 0, 0, 2],
        "tran_type": ["NOT", "NOT", "PREPARED", "NOT", "COMMIT", "NOT"],
        "queue_offset": [4, 1, 2, 9, 0, 5], "physical_offset": [40, 10, 20, 90, 5, 50]})
    assert rows.keep(batch, tally).num_rows == 6
    rows.finish(tally)
    assert sorted(tally.said["queues"]) == [["b", "T", 0, 0, 5, 4, 40], ["b", "U", 2, 5, 50, 5, 50]]
    assert tally.said["gaps"] == [["b", "T", 0, 2, 3, 10, 40]]  # the PREPARED record takes no queue offset
