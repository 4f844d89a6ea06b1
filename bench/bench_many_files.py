"""Bad input at scale: many files (issue 40).  The audit's driver memory and time over a folder of very many files,
with every file listed (``--max-files`` and ``--max-segments`` above the count) and with the run's limits, one run
after the other.

    .venv/bin/python bench/bench_many_files.py [--cache /tmp/bench-many] [--queues 1000000] [--segments-mib 800]
                                               [--only queues segments] [--limits 1000000000 500000 10000]
                                               [--results bench/results-many-files.json]
    .venv/bin/python bench/bench_many_files.py --planning STORE

Generated once into --cache:
  queues    a fixture's store (rocketmq-4.9.7/basic) plus --queues tiny consume-queue files, one per queue folder
            (8 queues a topic), four zero units each (a preallocated, never-written file), every 50th under a junk
            name, every 97th empty;
  segments  --segments-mib MiB written by the project's writer (bench/dump.py) in 8 KiB segments (800 MiB: about
            108,000 segment files).
Each audit runs in a process of its own (bench/driver_phases.py: ``local[2]``, the tasks in the driver, no report),
which samples its RssAnon every 20 ms: per run its wall seconds, the peak RssAnon and the broker.files_skipped
findings.  Its figures replace those of the same case and size in --results.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
FIXTURE = "rocketmq-4.9.7/basic"


def tiny_queues(root: Path, n: int) -> None:
    """The fixture plus ``n`` tiny consume-queue files (the module's docstring), written to ``root`` if absent."""
    if (root / ".done").exists():
        return
    if root.exists():
        shutil.rmtree(root)
    sys.path.insert(0, str(REPO))
    from tests.conftest import FIXTURES

    shutil.copytree(FIXTURES.parent / FIXTURE / "store", root)
    for p in [root, *root.rglob("*")]:
        p.chmod(0o755 if p.is_dir() else 0o644)
    zeros = bytes(80)
    for i in range(n):
        q = root / "consumequeue" / f"ZTiny{i // 8:07d}" / str(i % 8)
        q.mkdir(parents=True)
        (q / ("00000000000000000000" if i % 50 else "junk-name")).write_bytes(b"" if i % 97 == 0 else zeros)
    (root / ".done").write_text(str(n))


def small_segments(cache: Path, mib: float) -> Path:
    sys.path.insert(0, str(REPO))
    from bench.dump import DumpSpec, ensure_dump

    return Path(ensure_dump(DumpSpec(size_mib=mib, segment_mib=8 / 1024, cover=True), cache)["store"])


def audit(store: Path, out: Path, limit: int) -> dict:
    """One audit in a process of its own (bench/driver_phases.py), with its skipped-files findings."""
    if out.exists():
        shutil.rmtree(out)
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    t = time.perf_counter()
    done = subprocess.run([sys.executable, str(REPO / "bench" / "driver_phases.py"), str(store), str(out),
                           "--max-files", str(limit), "--max-segments", str(limit)], capture_output=True, text=True,
                          env=env)
    wall = time.perf_counter() - t
    if done.returncode != 0:
        return {"max_files": limit, "wall_seconds": round(wall, 1), "failed": done.stderr[-2000:]}
    phases = json.loads(done.stdout.strip().splitlines()[-1])
    import pyarrow.parquet as pq

    found = pq.read_table(out / "findings", columns=["check", "message"]).to_pylist()
    return {"max_files": limit, "wall_seconds": round(wall, 1), "audit_seconds": phases["seconds"],
            "peak_rss_anon_mib": phases["peak"],
            "skipped": [f["message"] for f in found if f["check"] == "broker.files_skipped"]}


def planning(store: str) -> dict:
    """What the driver holds after each planning step of one broker (tracemalloc: current and peak MiB, seconds):
    the custody listing of every input file, the store's listing, the queue files and the survey's tasks."""
    import gc
    import tracemalloc

    sys.path.insert(0, str(REPO))
    from jobs.audit import checks
    from jobs.audit.context import AuditContext, AuditOptions
    from jobs.audit.plan import plan_broker, plan_segments
    from jobs.audit.survey import survey_tasks
    from runtime.custody import input_files
    from runtime.stores import resolve_stores

    out, kept = {}, {}

    def step(name, make):
        t = time.perf_counter()
        kept[name] = make()
        gc.collect()
        now, peak = tracemalloc.get_traced_memory()
        out[name] = [round(now / 2**20, 1), round(peak / 2**20, 1), round(time.perf_counter() - t, 1)]
        tracemalloc.reset_peak()

    tracemalloc.start()
    stores = resolve_stores([store])
    step("input_files", lambda: input_files(stores))
    step("plan_broker", lambda: {s.name: plan_broker(s, max_files=None) for s in stores})
    plans = kept["plan_broker"]
    step("queue_files", lambda: sum(len(p.queue_files) for p in plans.values()))
    families = checks.selected(checks.FAMILIES)
    ctx = AuditContext(None, stores, plans, AuditOptions(families=tuple(f.name for f in families)), families)
    step("survey_tasks", lambda: survey_tasks(ctx, plan_segments(plans, 2, None, False)))
    return {"files": kept["queue_files"], "survey_tasks": len(kept["survey_tasks"]),
            "MiB (current, peak, seconds)": out}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--cache", type=Path, default=Path("/tmp/bench-many"))
    p.add_argument("--queues", type=int, default=1_000_000)
    p.add_argument("--segments-mib", type=float, default=800)
    p.add_argument("--only", nargs="+", choices=("queues", "segments"), default=("queues", "segments"))
    p.add_argument("--limits", nargs="+", type=int, default=[10**9, 500_000, 10_000],
                   help="--max-files and --max-segments of each run (10**9: every file listed)")
    p.add_argument("--results", type=Path, default=REPO / "bench" / "results-many-files.json")
    p.add_argument("--planning", metavar="STORE", help="only measure the planning steps' memory over STORE")
    args = p.parse_args(argv)
    if args.planning:
        print(json.dumps(planning(args.planning)))
        return 0
    args.cache.mkdir(parents=True, exist_ok=True)
    results = json.loads(args.results.read_text()) if args.results.exists() else {}
    for case in args.only:
        t = time.perf_counter()
        if case == "queues":
            store = args.cache / f"tiny-queues-{args.queues}"
            tiny_queues(store, args.queues)
        else:
            store = small_segments(args.cache, args.segments_mib)
        files = sum(1 for _ in (store / ("consumequeue" if case == "queues" else "commitlog")).rglob("*"))
        row = {"store": str(store), "entries": files, "generated_seconds": round(time.perf_counter() - t, 1),
               "runs": []}
        for limit in args.limits:
            run = audit(store, args.cache / f"out-{case}-{limit}", limit)
            print(json.dumps({"case": case, **run}), flush=True)
            row["runs"].append(run)
        results[f"{case}, {files:,} entries"] = {"command": " ".join(["bench/bench_many_files.py",
                                                                      *(argv or sys.argv[1:])]),
                         "time": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()), **row}
        args.results.write_text(json.dumps(results, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
