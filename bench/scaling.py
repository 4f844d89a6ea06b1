"""A job's cost against dump size, each measurement in a fresh local[2] session of its own (a child process):
timed, with the peak memory of its driver JVM, its largest Python worker and its driver Python process, polled
during each run (a worker that exits early still counts): resident (VmHWM, which counts the pages of the
segments a process maps) and anonymous (RssAnon: what the process itself holds).

``run_job`` runs one job (``audit`` or ``decode``, as a user would: ``run(spark, args)`` with the default
options, the audit without its HTML report) once over one store, cold: what a user waits for.
``run_series`` runs a job over several stores in one session, steady state: untimed warm-up runs first (they
start the Python workers, import the kernels into them and let the JVM compile its hot paths: ~10-40 s that a
first run pays once, whatever the size; the audit keeps getting faster for a couple of runs, so the bench
warms up twice), then ``rounds`` rounds over the stores, smallest first; ``paired`` brackets each other store
with runs of the first (a tiny reference dump): ref, x1, ref, x4, ref, x16, ref, x1, ...
``scaling_rows`` turns those runs into seconds per GB and the net seconds per GB beyond the reference run (the
fixed cost: planning and ~150 small Spark jobs for the audit), with the noise of each (the spread over rounds).
The fixed cost moves by seconds within one session (the audit's ref run: 13-22 s in one warm session), as
much as a small step's whole net time, so a step's net time is taken against the mean of the two reference
runs around it, its noise is at least how far the fixed cost moved across the step and how far one run's
fixed cost strays from its neighbours' (``ref_jitter``), and the rows also carry Spark's task time
(``TaskTime``), which the driver's pauses do not move.

    python -m bench.scaling JOB OUT STORE [STORE ...] [--warmup STORE] [--warmups N] [--rounds N] [--paired]
                                                   # the child: prints one JSON line per run
"""
from __future__ import annotations

import argparse
import importlib
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Iterator

REPO = Path(__file__).resolve().parent.parent
JOBS = ("audit", "decode")


def job_args(job: str, store: str, out: str) -> list[str]:
    """The command line a user would give the job (no HTML report: rendering it is not the scan)."""
    return ["--store", store, "--out", out] + (["--no-report"] if job == "audit" else [])


def run_job(job: str, store: Path, timeout: float | None = None) -> dict:
    """Run ``job`` over ``store`` once in a fresh child process and session, cold; its figures (see ``_child``)."""
    return run_series(job, [store], rounds=1, timeout=timeout)[0]


def run_series(job: str, stores: list[Path], warmup: Path | None = None, rounds: int = 1, paired: bool = False,
               timeout: float | None = None, warmups: int = 1) -> list[dict]:
    """Run ``job`` over ``warmup`` ``warmups`` times (untimed as a measure: their figures carry ``round`` 0),
    then ``rounds`` times over ``stores`` in order (``paired``: ``stores[0]`` before and after each of the
    others), all in one fresh child process and session; one dict of figures per run, with ``store`` (its
    index in ``stores``), ``round`` (1..rounds) and, paired, ``ref_seconds`` and ``ref_after_seconds``: the
    times of the ``stores[0]`` runs just before and just after it."""
    if job not in JOBS:
        raise ValueError(f"unknown job {job!r}; expected one of {', '.join(JOBS)}")
    with tempfile.TemporaryDirectory(prefix=f"bench-{job}-") as tmp:
        env = {**os.environ, "PYSPARK_PYTHON": os.environ.get("PYSPARK_PYTHON", sys.executable),
               "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))}
        cmd = [sys.executable, "-m", "bench.scaling", job, tmp, *map(str, stores), "--rounds", str(rounds)]
        cmd += (["--paired"] if paired else []) + (["--warmups", str(warmups)] if warmup else [])
        run = subprocess.run(cmd + (["--warmup", str(warmup)] if warmup else []), cwd=REPO, env=env,
                             stdout=subprocess.PIPE, text=True, check=True, timeout=timeout)
    return parse_child_output(run.stdout)


def parse_child_output(stdout: str) -> list[dict]:
    """The child's figures: its JSON lines (Spark and the job may print around them)."""
    runs = [json.loads(line) for line in stdout.splitlines() if line.startswith("{")]
    if not runs:
        raise RuntimeError(f"the benchmark child printed no figures: {stdout[-500:]!r}")
    return runs


class TaskTime:
    """Spark's own measure of a run's work: its tasks' executor run time and CPU time, summed over the stages
    that completed since the last call, from the session's status REST API (the UI is on in the child).  It
    counts what the tasks did, not the driver's planning between them nor a core left idle."""

    def __init__(self, spark):
        sc = spark.sparkContext
        self.url = f"{sc.uiWebUrl}/api/v1/applications/{sc.applicationId}/stages"
        self.seen = {s["stageId"] for s in self._stages()}

    def _stages(self) -> list[dict]:
        with urllib.request.urlopen(self.url, timeout=60) as r:
            return json.load(r)

    def since_last(self) -> dict:
        done = [s for s in self._stages() if s["stageId"] not in self.seen and s["status"] == "COMPLETE"]
        self.seen |= {s["stageId"] for s in done}
        return {"task_seconds": sum(s["executorRunTime"] for s in done) / 1e3,
                "task_cpu_seconds": sum(s["executorCpuTime"] for s in done) / 1e9, "stages": len(done)}


def series(stores: list, warmup=None, warmups: int = 1, rounds: int = 1, paired: bool = False) -> list[tuple]:
    """The runs of a series in order, as (round, store index, store): the warm-ups (round 0, index -1), then the
    rounds over the stores; paired, each other store between two runs of the first: ref, x1, ref, x4, ref, ..."""
    steps = [(r, i, s) for r in range(1, rounds + 1) for i, s in enumerate(stores) if i > 0 or not paired]
    if paired:
        steps = [(1, 0, stores[0])] + [run for step in steps for run in (step, (step[0], 0, stores[0]))]
    return [(0, -1, warmup)] * (warmups if warmup else 0) + steps


def bracketed(plan: list[tuple], run, paired: bool) -> Iterator[dict]:
    """``run(n, store)``'s figures for each run of ``plan`` (``series``), with ``store`` and ``round``; paired, a
    step's once the reference run after it is done, with ``ref_seconds`` and ``ref_after_seconds``, the times of
    the reference runs around it."""
    ref_seconds, pending = None, None
    for n, (round_, index, store) in enumerate(plan):
        line = {"store": index, "round": round_, **run(n, store)}
        if paired and index > 0:
            pending = dict(line, ref_seconds=ref_seconds)
            continue
        if paired and index == 0:
            ref_seconds = line["seconds"]
            if pending:
                yield dict(pending, ref_after_seconds=ref_seconds)
                pending = None
        yield line


def _child(job: str, out: str, stores: list[str], warmup: str | None, rounds: int, paired: bool,
           warmups: int = 1) -> None:
    from runtime.session import build_session

    module = importlib.import_module(f"jobs.{job}")
    t = time.perf_counter()
    spark = build_session(f"bench-{job}", master="local[2]",
                          extra={"spark.ui.enabled": "true", "spark.ui.retainedStages": "100000"})
    session_s = time.perf_counter() - t
    from bench.proctree import PeakSampler, tree_cpu

    work = TaskTime(spark)

    def run(n: int, store: str) -> dict:
        args = module.build_parser().parse_args(job_args(job, store, os.path.join(out, str(n))))
        with PeakSampler() as peaks:
            t, c = time.perf_counter(), tree_cpu()
            result = module.run(spark, args)
            elapsed, cpu = time.perf_counter() - t, tree_cpu() - c
        return {"job": job, "seconds": elapsed, "cpu_seconds": cpu, "session_seconds": session_s,
                **({"phases": result.phases} if getattr(result, "phases", None) else {}),
                **work.since_last(), **peaks.peaks}

    for line in bracketed(series(stores, warmup, warmups, rounds, paired), run, paired):
        print(json.dumps(line), flush=True)
    spark.stop()


def ref_jitter(ref_row: dict) -> float:
    """How far one run's fixed cost strays from what the runs around it say: the largest gap between a
    reference run and the mean of the reference runs before and after it (in the order they ran), in
    seconds; 0 with fewer than three."""
    t = ref_row["round_seconds"]
    return max((abs(b - (a + c) / 2) for a, b, c in zip(t, t[1:], t[2:])), default=0.0)


def scaling_rows(runs: list[dict]) -> list[dict]:
    """One row per job and step from ``runs`` (each a run's figures plus ``job``, ``step``, ``commitlog_bytes``
    and ``round``: 0 for a warm-up, 1.. for timed rounds), in the order the steps first ran:

    * ``seconds``: the best of its rounds, ``spread_seconds``: the worst less the best (the noise),
      ``round_seconds``: each; ``cold_seconds``: the first warm-up's time, on the row of the warm-up's step;
    * peak memory (``*_bytes``): the least over its rounds (a Python worker lives on between runs and keeps some
      of what an earlier, larger run allocated);
    * ``sec_per_gb``; from the second size on, ``marginal_sec_per_gb`` against the previous size;
    * when a step's runs are bracketed by reference runs (``step`` 0: a dump of a few hundred KB, whose time is
      the fixed cost; ``ref_seconds`` and ``ref_after_seconds``: the reference runs just before and after, as a
      paired ``series`` runs them), ``net_sec_per_gb``: the median over the rounds of (seconds - their mean) /
      (GB - reference GB), and ``net_noise_sec_per_gb``, the largest of: their spread; half the largest
      difference of a step's two reference runs (the fixed cost moved that much across the step);
      ``ref_jitter`` (a single run's fixed cost is off what the runs around it say by that much, and a step's
      run has its own), each per the same GB.
      With cost = fixed + rate x size, net s/GB is the rate at every size: flat when the cost is linear.
      ``within_noise``: whether a step's net s/GB is the largest step's within the two noises;
    * with the runs' Spark task time (``TaskTime``): ``task_seconds``, the median over the rounds, its spread,
      and ``net_task_sec_per_gb`` beyond the reference's median, with its noise (the two spreads): the work,
      which two cores run in parallel, as against the wall clock."""
    groups: dict[tuple, list[dict]] = {}
    cold = {}
    for r in runs:
        if r.get("round", 1) == 0:
            cold.setdefault((r["job"], r["step"]), r["seconds"])  # the first warm-up: the cold start
        else:
            groups.setdefault((r["job"], r["step"]), []).append(r)
    rows, last, ref = [], {}, {}
    for (job, step), rs in groups.items():
        times = [r["seconds"] for r in rs]
        best = min(rs, key=lambda r: r["seconds"])
        row = dict(best, round_seconds=times, spread_seconds=max(times) - min(times), rounds=len(rs),
                   cpu_seconds=min(r.get("cpu_seconds", 0.0) for r in rs),
                   sec_per_gb=best["seconds"] / (best["commitlog_bytes"] / 1e9))
        row.pop("round", None), row.pop("store", None), row.pop("ref_seconds", None), row.pop("ref_after_seconds", None)
        row.update({k: min(r[k] for r in rs) for k in best if k.endswith("_bytes") and k != "commitlog_bytes"})
        tasks = [r["task_seconds"] for r in rs if r.get("task_seconds") is not None]
        if len(tasks) == len(rs):
            row.update(task_seconds=statistics.median(tasks), task_spread_seconds=max(tasks) - min(tasks))
        if (job, step) in cold:
            row["cold_seconds"] = cold[(job, step)]
        if step == 0:
            ref[job] = row
        elif job in ref and row["commitlog_bytes"] > ref[job]["commitlog_bytes"]:
            gb = (row["commitlog_bytes"] - ref[job]["commitlog_bytes"]) / 1e9
            if all(r.get("ref_after_seconds") is not None for r in rs):
                around = [(r["ref_seconds"], r["ref_after_seconds"]) for r in rs]
                net = [(r["seconds"] - (a + b) / 2) / gb for r, (a, b) in zip(rs, around)]
                moved = max(abs(b - a) / 2 for a, b in around)  # the fixed cost's move across the step
                row.update(net_sec_per_gb=statistics.median(net),
                           net_noise_sec_per_gb=max(max(net) - min(net), moved / gb, ref_jitter(ref[job]) / gb))
            if "task_seconds" in row and "task_seconds" in ref[job]:
                row["net_task_sec_per_gb"] = (row["task_seconds"] - ref[job]["task_seconds"]) / gb
                row["net_task_noise_sec_per_gb"] = (row["task_spread_seconds"]
                                                    + ref[job]["task_spread_seconds"]) / gb
        prev = last.get(job)
        if prev is not None and prev["step"] != 0 and row["commitlog_bytes"] > prev["commitlog_bytes"]:
            row["marginal_sec_per_gb"] = ((row["seconds"] - prev["seconds"])
                                          / ((row["commitlog_bytes"] - prev["commitlog_bytes"]) / 1e9))
        last[job] = row
        rows.append(row)
    for job, largest in last.items():
        if "net_sec_per_gb" in largest:
            for row in rows:
                if row["job"] == job and "net_sec_per_gb" in row:
                    gap = abs(row["net_sec_per_gb"] - largest["net_sec_per_gb"])
                    noise = row["net_noise_sec_per_gb"] + largest["net_noise_sec_per_gb"]
                    row["within_noise"] = gap <= noise or math.isclose(gap, noise, abs_tol=1e-9)
    return rows


if __name__ == "__main__":
    ap = argparse.ArgumentParser(prog="python -m bench.scaling", description="One session: runs a job over stores, "
                                 "printing one JSON line of figures per run.")
    ap.add_argument("job", choices=JOBS)
    ap.add_argument("out", help="a scratch folder for the job's outputs")
    ap.add_argument("stores", nargs="+")
    ap.add_argument("--warmup", help="a store to run the job over first (its line has round 0)")
    ap.add_argument("--warmups", type=int, default=1, help="how many times to run the --warmup store")
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--paired", action="store_true", help="run the first store before and after each other one")
    a = ap.parse_args()
    sys.path.insert(0, str(REPO))
    _child(a.job, a.out, a.stores, a.warmup, a.rounds, a.paired, a.warmups)
