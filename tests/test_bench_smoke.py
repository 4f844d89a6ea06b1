"""Smoke tests of `make bench` (bench/run.py): every measurement once on a tiny dump (a few MB, in tmp), so the
benchmark code never rots.  They check the figures' structure and sanity (messages counted equal the messages
generated, positive rates and ratios, every results.json key), never a speed: timings belong to bench/."""
from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pytest

from bench import run as B
from bench import scaling
from bench.dump import DumpSpec, ensure_dump, load_messages

TINY = DumpSpec(size_mib=3, seed=5, segment_mib=1, index_slots=8192)  # 3 segments, one small index file


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    cache = tmp_path_factory.mktemp("bench-cache")
    meta = ensure_dump(TINY, cache, progress=False)
    return meta, cache, load_messages(Path(meta["store"]))


@pytest.fixture(scope="module")
def measured(tiny, spark, tmp_path_factory):
    """Every in-process figure of bench/run.py on the tiny dump."""
    meta, _, segs = tiny
    work = tmp_path_factory.mktemp("bench-work")
    lines = []
    bench = B.Bench(repeat=1, log=lines.append)
    B.ceilings(bench, segs)
    B.framing(bench, segs, baseline_mb=0.5)
    B.decoders(bench, segs, baseline_mb=0.5, batch_rows=2048)
    B.index_lookups(bench, Path(meta["store"]), segs, lookups=300)
    B.writer(bench, TINY, work, writer_mb=1, repeat=1)
    spark_out = B.spark_figures(bench, spark, meta, work)
    return bench, lines, spark_out, work


def test_the_dump_is_the_issues_traffic(tiny):
    """8 topics x 8 queues, bodies mostly 100-400 B, tags, keys, UNIQ_KEYs, a few IPv6 producers; cached."""
    from store_format import layout as L
    from decoding import kernels as K

    meta, cache, segs = tiny
    assert meta["messages"] == TINY.messages == sum(len(s.starts) for s in segs)
    assert meta["segments"] == len(segs) >= 3 and meta["commitlog_bytes"] == sum(len(s.data) for s in segs)
    t = K.decode_buffer(np.concatenate([s.data for s in segs]),
                        np.concatenate([s.starts + sum(len(p.data) for p in segs[:k]) for k, s in enumerate(segs)]),
                        np.concatenate([s.sizes for s in segs]),
                        columns=["topic", "queue_id", "sys_flag", "body", "tags", "keys", "uniq_key"]).to_pydict()
    plain = [i for i, topic in enumerate(t["topic"]) if topic.startswith("Topic")]
    assert len(plain) > 0.8 * meta["messages"]
    assert {t["topic"][i] for i in plain} == {f"Topic{k:03d}" for k in range(8)}
    assert {t["queue_id"][i] for i in plain} == set(range(8))
    sizes = np.array([len(t["body"][i]) for i in plain])
    assert 0.7 < np.mean((sizes >= 100) & (sizes <= 400)) and 150 < np.median(sizes) < 300
    assert all(t["tags"][i] and t["uniq_key"][i] and 1 <= len(t["keys"][i]) <= 2 for i in plain)
    v6 = np.mean([bool(t["sys_flag"][i] & L.BORNHOST_V6_FLAG) for i in plain])
    assert 0.01 < v6 < 0.12  # one producer in twenty
    again = ensure_dump(TINY, cache, progress=False)  # cached: not generated again
    assert again == meta


def test_in_process_figures(tiny, measured):
    meta, _, segs = tiny
    bench, lines, _, _ = measured
    f = bench.figures
    whole = ("raw_read", "numpy_pass", "framing_bulk", "kernel_decode_naive_fields", "kernel_decode", "kernel_decode_all",
             "spark_count", "spark_decode", "spark_headers", "spark_decode_parquet", "spark_extract_parquet")
    for key in whole:
        assert f[key]["messages"] == meta["messages"] and f[key]["bytes"] == meta["commitlog_bytes"], key
    for key in ("framing_scalar", "naive_decode", "scalar_decode"):  # the first 0.5 MB only
        assert 0 < f[key]["bytes"] <= 0.5e6 + 4096 and 0 < f[key]["messages"] < meta["messages"], key
    for key, fig in f.items():
        if key != "index_lookup":
            assert fig["seconds"] > 0 and fig["mb_s"] > 0 and fig["msgs_s"] > 0 and fig["cpu_seconds"] >= 0, key
            assert fig["msgs_s"] == pytest.approx(fig["mb_s"] * 1e6 * fig["messages"] / fig["bytes"])
    for key in ("kernel_decode", "scalar_decode", "spark_count", "writer"):  # measured after every baseline
        assert all(f[key][f"x_{b}"] > 0 for b in (B.CEILING, B.NAIVE, B.RAW)), key
        assert f[key]["x_naive_decode"] == pytest.approx(f[key]["mb_s"] / f["naive_decode"]["mb_s"])
    for key in ("spark_decode_parquet", "spark_extract_parquet"):
        assert f[key]["x_scan"] == pytest.approx(f[key]["mb_s"] / f["spark_decode"]["mb_s"])
    # one line a figure, the writer's comparison with RocketMQ, and the exports' ratios to the scan
    assert len(lines) == len(f) + 3
    assert any("x ceiling" in line and "x naive" in line for line in lines)


def test_the_naive_loop_reads_what_the_reference_decoder_reads(tiny):
    """The naive contender is fair: over records with IPv6 hosts too, it extracts the same bodies, topics and
    properties as store_format's scalar decoder."""
    from bench import bench_decode
    from store_format.codec import decode_record

    first = tiny[2][0]
    raw = first.data.tobytes()
    messages = [decode_record(raw, pos, limit=pos + size) for pos, size in zip(first.starts.tolist(),
                                                                               first.sizes.tolist())]
    assert any(m.sys_flag & 0x30 for m in messages)
    expected = sum(len(m.body) + len(m.topic) + len(m.properties) for m in messages)
    assert bench_decode.naive_loop(raw, first.starts.tolist()) == expected


def test_index_lookups_find_their_messages(measured):
    fig = measured[0].figures["index_lookup"]
    assert fig["lookups"] == 300 and fig["found"] == fig["lookups"]  # every sampled key leads to its message
    assert 0 < fig["p50_ms"] <= fig["p99_ms"] <= fig["max_ms"] and fig["mean_ms"] > 0
    assert fig["geometry"] == [(8192, 4 * 8192)] and fig["entries"] > 0


def test_writer_figure(measured):
    bench, _, _, work = measured
    fig = bench.figures["writer"]
    assert fig["messages"] > 0 and fig["bytes"] >= 1e6 and fig["x_rocketmq_msgs_s"] > 0 and fig["close_seconds"] > 0
    assert not (work / "writer").exists()  # the scratch stores are removed


def test_spark_figures(tiny, measured, spark):
    meta = tiny[0]
    _, _, spark_out, _ = measured
    assert spark_out["count"] == meta["messages"]
    table = spark.read.parquet(spark_out["parquet"])
    assert table.count() == meta["messages"] and "msg_id" in table.columns


def test_scaling_rows_and_child_output():
    runs = [{"job": "audit", "step": 1, "seconds": 10.0, "commitlog_bytes": 1e8},
            {"job": "decode", "step": 1, "seconds": 4.0, "commitlog_bytes": 1e8},
            {"job": "audit", "step": 4, "seconds": 16.0, "commitlog_bytes": 4e8}]
    rows = scaling.scaling_rows(runs)
    assert [r["sec_per_gb"] for r in rows] == pytest.approx([100.0, 40.0, 40.0])
    assert "marginal_sec_per_gb" not in rows[0] and "marginal_sec_per_gb" not in rows[1]
    assert rows[2]["marginal_sec_per_gb"] == pytest.approx(6.0 / 0.3)
    # reference runs (step 0) measure the fixed cost: net s/GB is the rate beyond it, flat for linear cost
    ref = {"job": "audit", "step": 0, "seconds": 50.0, "commitlog_bytes": 1e6}
    linear = [dict(r, seconds=50.0 + 100.0 * (r["commitlog_bytes"] - 1e6) / 1e9, ref_seconds=50.0,
                   ref_after_seconds=50.0) for r in runs if r["job"] == "audit"]
    rows = scaling.scaling_rows([ref, linear[0], ref, linear[1], ref])
    assert [r.get("net_sec_per_gb") for r in rows] == [None, pytest.approx(100.0), pytest.approx(100.0)]
    assert "marginal_sec_per_gb" not in rows[1] and rows[2]["marginal_sec_per_gb"] == pytest.approx(100.0)
    assert [r.get("within_noise") for r in rows] == [None, True, True]
    out = 'WARN something\n{"job": "decode", "seconds": 1.5}\nINFO done\n{"job": "decode", "seconds": 1.2}\n'
    assert scaling.parse_child_output(out) == [{"job": "decode", "seconds": 1.5}, {"job": "decode", "seconds": 1.2}]
    with pytest.raises(RuntimeError, match="no figures"):
        scaling.parse_child_output("Traceback ...\n")
    with pytest.raises(ValueError, match="unknown job"):
        scaling.run_job("compare", Path("."))


def test_scaling_rounds_give_the_best_time_and_its_noise():
    """Rounds of a step: the best time counts, their spread is the noise that net s/GB is judged flat within;
    the warm-up run (round 0) is the cold start; memory is the least over the rounds."""
    def run(step, round_, seconds, worker_mib=100):
        return {"job": "audit", "step": step, "round": round_, "seconds": seconds,
                "commitlog_bytes": {0: 1e6, 1: 1.01e8, 4: 4.01e8}[step], "python_worker_anon_bytes": worker_mib << 20}

    def step(step_, round_, seconds, before, after, worker_mib=100):
        return dict(run(step_, round_, seconds, worker_mib), ref_seconds=before, ref_after_seconds=after)

    # each step between two reference runs (a paired series): its net time is against their mean, the median
    # over the rounds, its noise the largest of their spread, the fixed cost's move across it and ref_jitter
    runs = [run(4, 0, 90.0), run(0, 1, 20.0), step(1, 1, 32.0, 20.0, 20.0, 120), run(0, 1, 20.0),
            step(4, 1, 61.0, 20.0, 22.0), run(0, 1, 22.0), step(1, 2, 30.0, 22.0, 22.0, 110), run(0, 2, 22.0),
            step(4, 2, 61.0, 22.0, 20.0), run(0, 2, 20.0)]
    ref, x1, x4 = scaling.scaling_rows(runs)
    assert (ref["seconds"], ref["spread_seconds"], ref["round_seconds"]) == (20.0, 2.0, [20.0, 20.0, 22.0, 22.0, 20.0])
    assert x4["cold_seconds"] == 90.0 and "cold_seconds" not in x1 and "ref_seconds" not in x1
    assert x1["python_worker_anon_bytes"] == 110 << 20
    assert scaling.ref_jitter(ref) == 1.0  # 20 between 20 and 22, and 22 between 20 and 22 (twice)
    # x1: 120 and 80 s/GB, spread 40 (ref_jitter: 10); x4: 100 and 100, the fixed cost moved 1 s (2.5 s/GB)
    assert x1["net_sec_per_gb"] == pytest.approx(100.0) and x1["net_noise_sec_per_gb"] == pytest.approx(40.0)
    assert x4["net_sec_per_gb"] == pytest.approx(100.0) and x4["net_noise_sec_per_gb"] == pytest.approx(2.5)
    assert x1["within_noise"] and x4["within_noise"]
    # a step whose rate is off the largest step's by more than the two noises is not flat
    slow = [dict(r, seconds=r["seconds"] + 20.0) if (r["step"], r["round"]) in ((1, 1), (1, 2)) else r for r in runs]
    assert scaling.scaling_rows(slow)[1]["within_noise"] is False
    table = B.markdown({"figures": {}, "scaling": scaling.scaling_rows(runs)})
    assert "| audit | x4 | 401.0 | 61.0 | 0.0 | 90.0 |" in table and "| yes |" in table
    # the fixed cost moving across a step (ref 24 s before, 20 s after) widens its noise: 2 s / 0.1 GB
    moving = [run(0, 1, 24.0), step(1, 1, 34.0, 24.0, 20.0), run(0, 1, 20.0), step(4, 1, 60.0, 20.0, 18.0),
              run(0, 1, 18.0), step(1, 2, 29.0, 18.0, 18.0), run(0, 2, 18.0), step(4, 2, 57.0, 18.0, 18.0),
              run(0, 2, 18.0)]
    ref, x1, x4 = scaling.scaling_rows(moving)
    assert (ref["seconds"], ref["spread_seconds"], ref["rounds"]) == (18.0, 6.0, 5)
    assert x1["net_sec_per_gb"] == pytest.approx(115.0) and x1["net_noise_sec_per_gb"] == pytest.approx(20.0)
    assert x4["net_sec_per_gb"] == pytest.approx(100.0) and x4["net_noise_sec_per_gb"] == pytest.approx(5.0)
    # a reference run off its neighbours (23 s between two of 20 s): one run's fixed cost strays that much, and
    # so may a step's own: the noise is at least that stray per GB (3 s / 0.1 GB)
    jittery = [run(0, 1, 20.0), step(1, 1, 32.0, 20.0, 23.0), run(0, 1, 23.0), step(1, 2, 33.0, 23.0, 20.0),
               run(0, 2, 20.0)]
    ref, x1 = scaling.scaling_rows(jittery)
    assert scaling.ref_jitter(ref) == 3.0 and scaling.ref_jitter({"round_seconds": [20.0, 21.0]}) == 0.0
    assert x1["net_sec_per_gb"] == pytest.approx(110.0) and x1["net_noise_sec_per_gb"] == pytest.approx(30.0)
    # without reference runs around it, a step has no net figure
    assert "net_sec_per_gb" not in scaling.scaling_rows([run(0, 1, 20.0), run(1, 1, 30.0)])[1]


def test_a_paired_series_brackets_each_step_with_reference_runs():
    """The child's order of runs: warm-ups, then ref, x1, ref, x4, ref, ...; each step reported with the times of
    the reference runs just before and after it (reported once the one after has run)."""
    plan = scaling.series(["R", "A", "B"], warmup="W", warmups=2, rounds=2, paired=True)
    assert [s for _, _, s in plan] == ["W", "W", "R", "A", "R", "B", "R", "A", "R", "B", "R"]
    assert [r for r, _, _ in plan] == [0, 0, 1, 1, 1, 1, 1, 2, 2, 2, 2]
    times = iter([90.0, 80.0, 20.0, 30.0, 18.0, 60.0, 17.0, 29.0, 16.0, 55.0, 15.0])
    lines = list(scaling.bracketed(plan, lambda n, store: {"seconds": next(times)}, paired=True))
    steps = [(l["store"], l["round"], l["seconds"], l["ref_seconds"], l["ref_after_seconds"]) for l in lines
             if l["store"] > 0]
    assert steps == [(1, 1, 30.0, 20.0, 18.0), (2, 1, 60.0, 18.0, 17.0), (1, 2, 29.0, 17.0, 16.0),
                     (2, 2, 55.0, 16.0, 15.0)]
    assert [l["store"] for l in lines] == [-1, -1, 0, 1, 0, 2, 0, 1, 0, 2, 0]  # each run once, in order
    # not paired: every store each round, as they ran
    plan = scaling.series(["R", "A"], rounds=2)
    assert [(r, i) for r, i, _ in plan] == [(1, 0), (1, 1), (2, 0), (2, 1)]
    lines = list(scaling.bracketed(plan, lambda n, store: {"seconds": 1.0}, paired=False))
    assert [l["store"] for l in lines] == [0, 1, 0, 1] and not any("ref_seconds" in l for l in lines)


@pytest.mark.slow
def test_scaling_dumps_share_every_queue(tmp_path, monkeypatch):
    """Part of a job's fixed cost is per queue: the reference dump (a few hundred records) must have every topic
    and queue the larger steps have, or the steps' net s/GB would carry a cost the reference lacks."""
    stores = []

    def fake_series(job, paths, warmup=None, rounds=1, paired=False, timeout=None, warmups=1):
        assert paired  # each step against the reference runs around it
        stores.extend(paths)
        return [{"job": job, "store": i, "round": r, "seconds": 1.0 + i} for r in (1, 2) for i in range(len(paths))]

    monkeypatch.setattr(scaling, "run_series", fake_series)
    spec = DumpSpec(size_mib=16, seed=3, segment_mib=16, index_slots=8192)  # the default base: ~1 s to write
    rows = B.scaling_runs(spec, [1], ["audit"], tmp_path, log=lambda line: None, reference_mib=0.25)
    assert [r["step"] for r in rows] == [0, 1]
    assert rows[0]["commitlog_bytes"] < 0.3e6 and rows[1]["commitlog_bytes"] > 16e6
    ref, x1 = [{(q.parent.name, q.name) for q in (s / "consumequeue").glob("*/*")} for s in stores]
    assert len(ref) == 87 and ref == x1  # the 8 x 8 topics' queues and every flow's


def test_a_job_in_a_session_of_its_own(tiny, measured):
    """A job figure (as the full-size audit and the scaling runs are measured): the decode job over the tiny
    dump in a child process and session, with its processes' peak memory polled during the run."""
    from jobs import audit

    meta = tiny[0]
    bench = B.Bench(repeat=1, log=lambda line: None)
    bench.figures = {k: v for k, v in measured[0].figures.items() if k in (B.CEILING, B.NAIVE, B.RAW)}
    fig = B.job_figure(bench, "decode", meta, key="decode_job")
    assert fig["messages"] == meta["messages"] and fig["seconds"] > 0 and fig["session_seconds"] > 0
    assert fig["cpu_seconds"] > 0 and fig["x_numpy_pass"] > 0
    # decode's tasks run in the driver's threads on a local session (runtime/export.py): Spark's stage count and
    # task time are still measured (the keys), and may be none here
    assert {"stages", "task_seconds"} <= set(fig)
    assert fig["driver_jvm_peak_bytes"] > 100 << 20 and fig["python_worker_peak_bytes"] > 50 << 20
    assert fig["driver_python_peak_bytes"] > 20 << 20
    assert 0 < fig["python_worker_anon_bytes"] <= fig["python_worker_peak_bytes"]
    assert 0 < fig["driver_jvm_anon_bytes"] <= fig["driver_jvm_peak_bytes"]
    args = audit.build_parser().parse_args(scaling.job_args("audit", meta["store"], "out"))
    assert args.no_report and args.store == [meta["store"]]


@pytest.mark.cluster
def test_the_audit_submitted_to_the_cluster(tiny, measured, spark_cluster, tmp_path):
    """The cluster figure (audit_cluster_mb_s; audit_local_mb_s is the same function on local[2]): the audit's
    application file submitted to the tests' two-worker cluster over the tiny dump, its run time from its
    summary, the executors' and Python workers' peak memory from this process tree (the cluster's daemons are its
    children)."""
    from tools.sparkcluster import app_conf

    meta = tiny[0]
    bench = B.Bench(repeat=1, log=lambda line: None)
    bench.figures = {k: v for k, v in measured[0].figures.items() if k in (B.CEILING, B.NAIVE, B.RAW)}
    fig = B.audit_submit_figure(bench, "audit_cluster", "cluster audit", spark_cluster.master_url, meta, tmp_path,
                                conf=app_conf("512m"))
    assert fig["master"] == spark_cluster.master_url and fig["messages"] == meta["messages"]
    assert 0 < fig["seconds"] < fig["submit_seconds"] and fig["cpu_seconds"] > 0 and fig["x_numpy_pass"] > 0
    assert fig["executor_jvm_peak_bytes"] > 50 << 20 and fig["python_worker_peak_bytes"] > 50 << 20
    assert fig["driver_jvm_peak_bytes"] > 100 << 20
    data = B.results(bench, meta, None)
    assert data["audit_cluster_mb_s"] == pytest.approx(fig["mb_s"]) and data["audit_local_mb_s"] is None
    assert not (tmp_path / "audit_cluster-out").exists()  # the audit's output is removed once measured


@pytest.mark.spark
@pytest.mark.slow
def test_the_small_audit_in_a_fresh_process(tiny, tmp_path):
    """audit_small_s: `python -m jobs.audit` on a 1 MiB dump in a process of its own, the session's start apart
    (from the audit's --profile)."""
    _, cache, _ = tiny
    bench = B.Bench(repeat=1, log=lambda line: None)
    fig = B.audit_small(bench, TINY, cache)
    assert fig["seconds"] > fig["session_seconds"] > 0 and fig["messages"] > 0
    assert 0.5 * 2**20 < fig["bytes"] <= 1.1 * 2**20


def test_results_json_has_every_figure(tiny, measured, tmp_path):
    meta = tiny[0]
    bench = measured[0]
    rows = scaling.scaling_rows([{"job": "decode", "step": 1, "seconds": 2.0,
                                  "commitlog_bytes": meta["commitlog_bytes"], "driver_jvm_peak_bytes": 1,
                                  "python_worker_peak_bytes": 1, "driver_python_peak_bytes": 1}])
    data = B.results(bench, meta, rows, machine=B.machine())
    B.write_results(tmp_path / "results.json", data)
    back = json.loads((tmp_path / "results.json").read_text())
    assert set(B.REQUIRED_KEYS) <= set(back) and back["audit_mb_s"] is None  # no full-size audit here
    assert back["audit_small_s"] is None
    assert all(back[k] > 0 for k in B.REQUIRED_KEYS
               if k not in ("scaling", "audit_mb_s", "audit_small_s", "audit_local_mb_s", "audit_cluster_mb_s"))
    assert back["audit_local_mb_s"] is None and back["audit_cluster_mb_s"] is None  # measured below
    assert back["writer_msgs_s"] == pytest.approx(bench.figures["writer"]["msgs_s"])
    assert back["scaling"][0]["sec_per_gb"] > 0 and back["sizes"]["messages"] == meta["messages"]
    assert back["machine"]["cores"] == os.cpu_count() and back["machine"]["pyspark"]
    table = B.markdown(back).splitlines()  # BENCHMARKS.md's tables
    assert sum(line.startswith("| decode: ") for line in table) == 5 and any(line.startswith("| decode | x1 |")
                                                                            for line in table)


@pytest.mark.spark
@pytest.mark.slow
def test_the_incremental_figures_over_two_sizes(spark, tmp_path):
    """make bench's issue-41 part: per size a night before that audits clean, full and incremental audits of the
    grown store, and the three figures against their targets (the scaling one from two sizes)."""
    from bench import bench_incremental as I

    got = I.figures([1, 2], append_mib=0.25, rounds=1, cache=tmp_path / "cache", spark=spark)
    assert [s["mib"] for s in got["steps"]] == [1, 2] and got["ratio"] == got["steps"][0]["ratio"]
    for s in got["steps"]:
        assert s["night_before"]["exit"] == 0 and s["runs"][0]["incremental"]["exit"] == 0
        assert s["runs"][0]["full"]["verdict"] == s["runs"][0]["incremental"]["verdict"]
        assert s["runs"][0]["incremental"]["since_last_run"] is not None  # the state was compared
        assert 0 < s["state_share"] < 1 and s["incremental_seconds"] > 0
    assert got["scaling"] == pytest.approx(got["steps"][1]["incremental_seconds"] / got["steps"][0]["incremental_seconds"],
                                           abs=1e-3)
    assert got["scaling_met"] == (got["scaling"] <= 1.5) and got["met"] == (got["ratio"] <= 0.1)
    text = I.markdown(got)
    assert "| 1 MiB | 0.25 MiB |" in text and "| 2 MiB | 0.25 MiB |" in text and "target <= 1.5" in text
    assert spark.range(1).count() == 1  # the tests' session is the caller's: not stopped
    assert "Scheduled audits with `--state`" in B.markdown({"figures": {}, "incremental": got})


@pytest.mark.slow
def test_main_without_spark_writes_results(tmp_path, capsys):
    """The command line end to end, Spark parts skipped (this process holds the tests' session; the job
    figures are covered above)."""
    path = tmp_path / "r.json"
    assert B.main(["--size", "1", "--segment-mib", "1", "--baseline-mb", "0.2", "--writer-mb", "0.5",
                   "--index-lookups", "50", "--repeat", "1", "--skip", "spark", "scaling", "audit", "cluster",
                   "incremental", "--cache", str(tmp_path / "cache"), "--results", str(path)]) == 0
    data = json.loads(path.read_text())
    assert set(B.REQUIRED_KEYS) <= set(data) and data["spark_count_mb_s"] is None and data["scaling"] is None
    assert data["incremental"] is None
    assert data["kernel_decode_mb_s"] > 0 and data["run"]["skipped"] == ["audit", "cluster", "incremental", "scaling",
                                                                                  "spark"]
    assert data["run"]["complete"] and data["audit_mb_s"] is None
    assert "x naive" in capsys.readouterr().out
    assert not (Path(B.__file__).parent / "cache" / DumpSpec(1, 1, 1).key).exists()


@pytest.mark.spark
@pytest.mark.slow
def test_datasource_scan_figures(tmp_path, capsys):
    """bench/bench_datasource.py --scan on a 3 MiB dump (a newest segment only): the in-process baselines and
    framers, then one round in a child process and session: cold and warm runs, the first pass, the transport
    ceilings."""
    from bench import bench_datasource

    assert bench_datasource.main(["--scan", "--mb", "3", "--cache", str(tmp_path), "--repeat", "1", "--rounds", "1",
                                  "--ceilings"]) == 0
    out = capsys.readouterr().out
    for what in ("raw read", "numpy bulk framer", "compiled framer", "positions count", "decoded noop",
                 "decoded count", "first_pass=here", "first_pass=spark", "transport ceiling",
                 "compiled framer vs numpy bulk framer"):
        assert what in out, what
