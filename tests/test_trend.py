"""jobs/trend.py on synthetic audit history tables (the audit's findings/metrics contract), written the way
``jobs.audit --history`` writes them: each run appended whole (runtime/history.py: findings, metrics, then the run's
row in ``runs``, the marker trend requires)."""
from __future__ import annotations

import datetime as dt

import pytest

from jobs import trend
from runtime.history import append_tables
from runtime.output import append_history, read_table

FINDINGS = ("run_id string, run_time timestamp, finding_id string, check string, severity string, broker string, "
            "file string, file_position bigint, physical_offset bigint, topic string, queue_id int, "
            "queue_offset bigint, message string, details map<string,string>")
METRICS = ("run_id string, run_time timestamp, broker string, scope string, topic string, queue_id int, "
           "`group` string, metric string, value double")
T0 = dt.datetime(2024, 5, 1, tzinfo=dt.timezone.utc)


def _finding(run, when, fid, check, file_position=0):
    return (run, when, fid, check, "error", "broker-a", "00000000000000000000", file_position, file_position,
            None, None, None, f"{check} at {file_position}", {"k": "v"})


def _metric(run, when, metric, value, scope="queue", topic="T", queue_id=0, group="G"):
    return (run, when, "broker-a", scope, topic, queue_id, group, metric, float(value))


RUNS = {  # run id -> (findings, metrics); run times increase r1 < r2 < r3
    "r1": (["f-old"], {("lag_messages", 0, "G"): 1, ("dlq_messages", None, "G"): 0}),
    "r2": (["f-old", "f1"], {("lag_messages", 0, "G"): 10, ("lag_messages", 0, "H"): 50, ("lag_ms", 0, "G"): 100,
                             ("dlq_messages", None, "G"): 0, ("open_transactions", None, None): 2,
                             ("message_count", None, None): 50}),
    "r3": (["f1", "f2"], {("lag_messages", 0, "G"): 25, ("lag_messages", 0, "H"): 20,
                          ("lag_messages", 1, "G"): 4,  # a key new in r3: it was 0 in r2, which measured lag
                          ("lag_ms", 0, "G"): 100, ("dlq_messages", None, "G"): 3,
                          ("open_transactions", None, None): 5, ("message_count", None, None): 80}),
}


@pytest.fixture(scope="module")
def history(spark, tmp_path_factory):
    root = tmp_path_factory.mktemp("history")
    for i, (run, (finding_ids, metrics)) in enumerate(RUNS.items()):
        when = T0 + dt.timedelta(hours=i)
        rows = [_finding(run, when, fid, "integrity.bad_crc", 100 * n) for n, fid in enumerate(finding_ids)]
        rows.append(_finding(run, when, f"lag-{run}", "lag.consumer_behind"))  # new each run, not damage
        metric_rows = []
        for (metric, queue_id, group), value in metrics.items():
            scope = "queue" if queue_id is not None else ("group" if group else "broker")
            metric_rows.append(_metric(run, when, metric, value, scope, "T" if queue_id is not None else None,
                                       queue_id, group))
        append_tables(str(root), spark.createDataFrame(rows, FINDINGS).toArrow(),
                      spark.createDataFrame(metric_rows, METRICS).toArrow())
    return root


def _flags(table):
    return sorted((r.flag, r.run_id, r.metric or r.finding_id, r.group, r.queue_id, r.previous_value, r.value)
                  for r in table.collect())


def test_last_two_runs(spark, history, tmp_path):
    args = trend.build_parser().parse_args(["--history", str(history), "--out", str(tmp_path / "t")])
    result = trend.run(spark, args)
    assert result.exit_code == 1
    assert result.summary.splitlines()[0].startswith(
        "trend: r2 -> r3: 2 growing_lag, 1 growing_dlq, 1 transaction_backlog, 1 new_damage")
    assert _flags(read_table(spark, str(tmp_path / "t"))) == [
        ("growing_dlq", "r3", "dlq_messages", "G", None, 0.0, 3.0),
        ("growing_lag", "r3", "lag_messages", "G", 0, 10.0, 25.0),  # H shrank 50 -> 20; lag_ms stayed 100
        ("growing_lag", "r3", "lag_messages", "G", 1, 0.0, 4.0),
        ("new_damage", "r3", "f2", None, None, None, None),  # f1 was seen in r2; the lag finding is not damage
        ("transaction_backlog", "r3", "open_transactions", None, None, 2.0, 5.0),
    ]


def test_all_runs_and_exit_codes(spark, history, tmp_path, capsys):
    args = trend.build_parser().parse_args(["--history", str(history), "--all"])
    flags = _flags(trend.trends(spark, *_tables(spark, history), trend.run_pairs(*_tables(spark, history), True)))
    r2 = [f for f in flags if f[1] == "r2"]
    # r1 did not measure open_transactions or lag_ms: nothing to compare, so no flag from them
    assert r2 == [("growing_lag", "r2", "lag_messages", "G", 0, 1.0, 10.0),
                  ("growing_lag", "r2", "lag_messages", "H", 0, 0.0, 50.0),
                  ("new_damage", "r2", "f1", None, None, None, None)]
    assert len(flags) == len(r2) + 5
    assert trend.run(spark, args).summary.startswith("trend: 2 run pairs: 4 growing_lag")

    assert trend.main(["--history", str(tmp_path / "nothing-here")]) == 2
    assert "no audit history" in capsys.readouterr().err
    one = tmp_path / "one"
    when = T0
    append_tables(str(one), spark.createDataFrame([_finding("only", when, "f", "integrity.bad_crc")], FINDINGS).toArrow(),
                  spark.createDataFrame([_metric("only", when, "lag_messages", 5)], METRICS).toArrow())
    assert trend.main(["--history", str(one)]) == 0
    assert "nothing to compare" in capsys.readouterr().out


def _tables(spark, history):
    return (read_table(spark, str(history / "findings")), read_table(spark, str(history / "metrics")))


def test_a_broker_that_goes_from_keeping_everything_to_losing_messages(spark, tmp_path, capsys):
    """Three audits of one broker into one history: clean, then a copy with a flipped bit mid-log and a consume
    queue lost, then a copy that will not start.  trend names the regression that matters, with both runs:
    the new cut, the messages lost, the messages in no consume queue, and then the broker that no longer
    starts."""
    from jobs import audit
    from store_format.store import Store
    from store_format.write import damage as D
    from store_format.write.generate import TrafficConfig, generate_store
    from store_format.write.writer import WriterConfig

    clean = tmp_path / "clean"
    generate_store(clean, TrafficConfig(messages=600, topics=2, queues=2, seed=3, p_send_back=0.0),
                   WriterConfig(mappedFileSizeCommitLog=64 * 1024, mappedFileSizeConsumeQueue=400 * 20,
                                maxHashSlotNum=128, maxIndexNum=512))
    frames = [f for f in Store(clean).walk_commitlog(decode=False) if f.kind == "message"]
    D.flip_body_bit(clean, tmp_path / "flipped", physical_offset=frames[len(frames) // 2].physical_offset)
    D.delete_consume_queue(tmp_path / "flipped", tmp_path / "damaged", "Topic000", 1)
    nostart = D.copy_store(clean, tmp_path / "nostart")
    (nostart / "commitlog" / f"{0:020d}.bak").write_bytes(b"a copy left by hand")
    history = tmp_path / "history"
    runs = []
    for i, store in enumerate((clean, tmp_path / "damaged", nostart)):
        args = audit.build_parser().parse_args(["--store", f"broker-t={store}", "--out", str(tmp_path / f"out{i}"),
                                                "--history", str(history), "--no-report"])
        runs.append(audit.run(spark, args).summary_data)
    lost = next(b["recovery"]["messages_lost"] for b in runs[1]["brokers"])
    cut = next(b["recovery"]["predicted_max_physical_offset"] for b in runs[1]["brokers"])
    assert lost > 100 and runs[0]["brokers"][0]["recovery"]["messages_lost"] == 0

    capsys.readouterr()
    assert trend.main(["--history", str(history), "--all", "--out", str(tmp_path / "trends")]) == 1
    out = capsys.readouterr().out
    first, second, third = (r["run_id"] for r in runs)
    flags = {(r.flag, r.run_id, r.previous_run_id): r for r in read_table(spark, str(tmp_path / "trends")).collect()}
    assert flags[("cut_moved", second, first)].value == cut and flags[("cut_moved", second, first)].previous_value \
        is None
    assert flags[("lost_more", second, first)].value == lost
    unindexed = flags[("newly_unindexed", second, first)]
    lost_queue = [m for m in Store(clean).messages() if (m.topic, m.queue_id) == ("Topic000", 1)
                  and m.physical_offset < cut and m.tran_type in ("NOT", "COMMIT")]
    assert (unindexed.previous_value, unindexed.value) == (0, len(lost_queue)) and lost_queue
    assert ("no_longer_starts", third, second) in flags and ("no_longer_starts", second, first) not in flags
    # the summary names both runs of each flag
    assert f"cut_moved: broker-t: run {second}: recovery cuts the log at physical offset {cut:,}; run {first}: " \
           "recovery kept the whole log" in out
    assert f"lost_more: broker-t: run {second}: {lost:,} messages lost; run {first}: 0" in out
    assert f"no_longer_starts: broker-t: run {third} will not start (" in out and f"; run {second} would" in out
    assert out.splitlines()[0].startswith("trend: 2 run pairs: 1 no_longer_starts, 1 cut_moved, 1 lost_more, "
                                          "1 newly_unindexed")

