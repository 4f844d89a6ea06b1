"""The audit's cost against dump size: 1x, 4x and 16x of a base size, each in a fresh local[2] session.

Reports seconds per GB of commitlog (flat = linear cost) and the peak resident memory of the driver JVM and of
the largest Python worker (VmHWM from /proc: independent of dump size = bounded memory per task).  Dumps are
generated with the writer's traffic generator (seeded) and cached in bench/cache/.

  .venv/bin/python bench/bench_audit.py [--base-messages 25000] [--factors 1 4 16]
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
CACHE = REPO / "bench" / "cache"
sys.path.insert(0, str(REPO))


def dump_of(messages: int) -> Path:
    from store_format.generate import TrafficConfig, generate_store
    from store_format.writer import WriterConfig

    root = CACHE / f"audit-{messages}"
    store = root / "store"
    if not (root / "done").exists():
        shutil.rmtree(root, ignore_errors=True)
        root.mkdir(parents=True)
        generate_store(store, TrafficConfig(messages=messages, seed=7), WriterConfig(mappedFileSizeCommitLog=64 << 20))
        (root / "done").write_text("ok")
    return store


def commitlog_bytes(store: Path) -> int:
    from store_format.store import Store

    return sum(f.size for f in Store(store).walk_commitlog(decode=False) if f.kind == "message")


_CHILD = """
import json, os, sys, time
sys.path.insert(0, {repo!r})
os.environ["PYSPARK_PYTHON"] = sys.executable
from jobs.session import build_session
from jobs import audit
spark = build_session("bench-audit", master="local[2]")
args = audit.build_parser().parse_args(["--store", {store!r}, "--out", {out!r}, "--no-report"])
t = time.perf_counter(); audit.run(spark, args); elapsed = time.perf_counter() - t

def hwm(pid):
    try:
        for line in open(f"/proc/{{pid}}/status"):
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    except OSError:
        return 0
    return 0

def cmd(pid):
    try:
        return open(f"/proc/{{pid}}/cmdline", "rb").read().replace(b"\\0", b" ").decode(errors="replace")
    except OSError:
        return ""

pids = [int(p) for p in os.listdir("/proc") if p.isdigit()]
workers = [hwm(p) for p in pids if "pyspark.daemon" in cmd(p) or "pyspark.worker" in cmd(p)]
jvm = [hwm(p) for p in pids if "org.apache.spark.deploy.SparkSubmit" in cmd(p)]
print(json.dumps({{"seconds": elapsed, "python_worker_peak_bytes": max(workers, default=0),
                  "jvm_peak_bytes": max(jvm, default=0), "driver_python_peak_bytes": hwm(os.getpid())}}))
spark.stop()
"""


def measure(store: Path) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        code = _CHILD.format(repo=str(REPO), store=str(store), out=str(Path(tmp) / "out"))
        env = {**os.environ, "PYSPARK_PYTHON": sys.executable}
        run = subprocess.run([sys.executable, "-c", code], env=env, stdout=subprocess.PIPE, text=True, check=True)
        return json.loads(run.stdout.strip().splitlines()[-1])


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--base-messages", type=int, default=25_000)
    p.add_argument("--factors", type=int, nargs="+", default=[1, 4, 16])
    p.add_argument("--json", metavar="FILE", help="also write the figures here")
    args = p.parse_args(argv)
    rows = []
    for f in args.factors:
        store = dump_of(args.base_messages * f)
        nbytes = commitlog_bytes(store)
        r = measure(store)
        r.update(factor=f, messages=args.base_messages * f, commitlog_bytes=nbytes,
                 seconds_per_gb=r["seconds"] / (nbytes / 1e9), load=os.getloadavg()[0])
        rows.append(r)
        print(f"audit x{f:<3} {nbytes / 1e6:8.1f} MB  {r['seconds']:7.1f} s  {r['seconds_per_gb']:8.1f} s/GB  "
              f"JVM peak {r['jvm_peak_bytes'] / 2**20:6.0f} MiB  Python worker peak "
              f"{r['python_worker_peak_bytes'] / 2**20:5.0f} MiB  driver Python {r['driver_python_peak_bytes'] / 2**20:5.0f}"
              f" MiB  load {r['load']:.1f}", flush=True)
    # A run has a fixed cost (session, planner workers, tens of small Spark jobs); the marginal cost between
    # sizes is what must stay flat for the cost to be linear.
    for a, b in zip(rows, rows[1:]):
        marginal = (b["seconds"] - a["seconds"]) / ((b["commitlog_bytes"] - a["commitlog_bytes"]) / 1e9)
        b["marginal_seconds_per_gb"] = marginal
        print(f"x{a['factor']} -> x{b['factor']}: marginal {marginal:.1f} s/GB")
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
