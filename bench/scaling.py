"""A job's cost against dump size: each run in a fresh local[2] session of its own (a child process), timed,
with the peak memory of its driver JVM, its largest Python worker and its driver Python process, polled during
the run (a worker that exits early still counts): resident (VmHWM, which counts the pages of the segments a
process maps) and anonymous (RssAnon: what the process itself holds).

``run_job`` runs one job (``audit`` or ``decode``, as a user would: ``run(spark, args)`` with the default
options, the audit without its HTML report) over one store; ``scaling_rows`` turns runs at growing sizes into
seconds per GB, the marginal seconds per GB between consecutive sizes and the net seconds per GB against a
tiny reference dump (a run has a fixed cost: planner workers, tens of small Spark jobs; what must stay flat for
linear cost is the rate beyond it).

    python -m bench.scaling JOB STORE OUT     # the child: prints one JSON line
"""
from __future__ import annotations

import importlib
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
JOBS = ("audit", "decode")


def job_args(job: str, store: str, out: str) -> list[str]:
    """The command line a user would give the job (no HTML report: rendering it is not the scan)."""
    return ["--store", store, "--out", out] + (["--no-report"] if job == "audit" else [])


def run_job(job: str, store: Path, timeout: float | None = None) -> dict:
    """Run ``job`` over ``store`` in a fresh child process and session; its JSON figures (see ``_child``)."""
    if job not in JOBS:
        raise ValueError(f"unknown job {job!r}; expected one of {', '.join(JOBS)}")
    with tempfile.TemporaryDirectory(prefix=f"bench-{job}-") as tmp:
        env = {**os.environ, "PYSPARK_PYTHON": os.environ.get("PYSPARK_PYTHON", sys.executable),
               "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))}
        run = subprocess.run([sys.executable, "-m", "bench.scaling", job, str(store), str(Path(tmp) / "out")],
                             cwd=REPO, env=env, stdout=subprocess.PIPE, text=True, check=True, timeout=timeout)
    return parse_child_output(run.stdout)


def parse_child_output(stdout: str) -> dict:
    """The child's figures: its last stdout line (Spark and the job may print before it)."""
    lines = [line for line in stdout.splitlines() if line.startswith("{")]
    if not lines:
        raise RuntimeError(f"the benchmark child printed no figures: {stdout[-500:]!r}")
    return json.loads(lines[-1])


def _child(job: str, store: str, out: str) -> None:
    from jobs.session import build_session

    module = importlib.import_module(f"jobs.{job}")
    t = time.perf_counter()
    spark = build_session(f"bench-{job}", master="local[2]")
    session_s = time.perf_counter() - t
    args = module.build_parser().parse_args(job_args(job, store, out))
    from bench.proctree import PeakSampler, tree_cpu

    with PeakSampler() as peaks:
        t, c = time.perf_counter(), tree_cpu()
        module.run(spark, args)
        elapsed, cpu = time.perf_counter() - t, tree_cpu() - c
    figures = {"job": job, "seconds": elapsed, "cpu_seconds": cpu, "session_seconds": session_s, **peaks.peaks}
    spark.stop()
    print(json.dumps(figures), flush=True)


def scaling_rows(runs: list[dict]) -> list[dict]:
    """``runs`` (each a job's figures plus ``job``, ``step``, ``commitlog_bytes``) with ``sec_per_gb``; from the
    second size of a job on, ``marginal_sec_per_gb`` against the previous size; and when the job has a
    reference run (``step`` 0: a dump of a few hundred KB, which measures the fixed cost), ``net_sec_per_gb`` =
    (seconds - its seconds) / (GB - its GB).  With cost = fixed + rate x size, net s/GB is the rate at every
    size: flat when the cost is linear, whatever the fixed part."""
    rows, last, ref = [], {}, {}
    for r in runs:
        row = dict(r, sec_per_gb=r["seconds"] / (r["commitlog_bytes"] / 1e9))
        job = r["job"]
        if r["step"] == 0:
            ref[job] = row
        elif job in ref and r["commitlog_bytes"] > ref[job]["commitlog_bytes"]:
            row["net_sec_per_gb"] = ((r["seconds"] - ref[job]["seconds"])
                                     / ((r["commitlog_bytes"] - ref[job]["commitlog_bytes"]) / 1e9))
        prev = last.get(job)
        if prev is not None and prev["step"] != 0 and r["commitlog_bytes"] > prev["commitlog_bytes"]:
            row["marginal_sec_per_gb"] = ((r["seconds"] - prev["seconds"])
                                          / ((r["commitlog_bytes"] - prev["commitlog_bytes"]) / 1e9))
        last[job] = row
        rows.append(row)
    return rows


if __name__ == "__main__":
    if len(sys.argv) != 4 or sys.argv[1] not in JOBS:
        sys.exit(f"usage: python -m bench.scaling {{{','.join(JOBS)}}} STORE OUT  (one run; prints one JSON line)")
    sys.path.insert(0, str(REPO))
    _child(*sys.argv[1:4])
