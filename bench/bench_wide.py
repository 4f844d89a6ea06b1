"""Wide and many (issue 40): what the audit pays per queue, per broker and per file, as ratios against the same
bytes in few files, each pair measured in turn in one warm local[2] session.

    .venv/bin/python bench/bench_wide.py [--mib 1024] [--rounds 2] [--cache /tmp/benchcache]
                                         [--only queues fleet segments] [--results bench/results-wide.json]

Generated once into --cache by the project's writer (bench/dump.py, every topic and queue from the start):
  queues    the same --mib MiB over 5,000 topics x 8 queues (40,000 consume queues) against 8 x 8 (64 queues);
            target <= 1.5x;
  fleet     64 brokers of --mib/64 MiB each (seeds 100..163, named b00..b63 on the command line) in one run
            against one broker of --mib MiB (the queues case's base); target <= 2x;
  segments  32 MiB in 8 KiB segments (about 4,300 files) against one 32 MiB segment; target <= 3x and
            report.html under 1 MB.
The audit runs as a user runs it (`jobs.audit.run(spark, args)`, its report included: its size is a target),
after one untimed warm-up (the smallest base side); each round runs the base then the wide side of every case.
Per run: wall and CPU seconds (this process tree), the --profile phases, peak memory per process
(bench/proctree.py), report.html bytes.  The ratio of a case is the wide side's best over the base side's best;
``pair_ratios`` are each round's.  Each case's figures replace its own in --results (bench/results-wide.json;
BENCHMARKS.md, "Wide and many").
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

CASES = ("queues", "fleet", "segments")
TARGETS = {"queues": 1.5, "fleet": 2.0, "segments": 3.0}
REPORT_LIMIT = 1 << 20  # the segments case's report.html
FLEET = 64
WIDE_TOPICS, QUEUES = 5000, 8
SMALL_SEGMENT_MIB, SEGMENTS_MIB = 8 / 1024, 32


def specs(case: str, mib: float) -> tuple[list, list]:
    """(base, wide) dump specs of ``case``: each side a list of brokers."""
    from bench.dump import DumpSpec

    if case == "queues":
        return [DumpSpec(size_mib=mib, cover=True)], [DumpSpec(size_mib=mib, topics=WIDE_TOPICS, queues=QUEUES,
                                                               cover=True)]
    if case == "fleet":
        return [DumpSpec(size_mib=mib, cover=True)], [DumpSpec(size_mib=mib / FLEET, seed=100 + i, cover=True)
                                                      for i in range(FLEET)]
    if case == "segments":
        return ([DumpSpec(size_mib=SEGMENTS_MIB, segment_mib=SEGMENTS_MIB, cover=True)],
                [DumpSpec(size_mib=SEGMENTS_MIB, segment_mib=SMALL_SEGMENT_MIB, cover=True)])
    raise ValueError(case)


def describe(metas: list[dict]) -> dict:
    """A side's size: brokers, commitlog bytes, segments, consume-queue files."""
    cq = sum(sum(1 for p in Path(m["store"], "consumequeue").rglob("*") if p.is_file()) for m in metas)
    return {"brokers": len(metas), "commitlog_bytes": sum(m["commitlog_bytes"] for m in metas),
            "segments": sum(m["segments"] for m in metas), "consume_queue_files": cq}


def store_args(metas: list[dict]) -> list[str]:
    """--store's values: one path, or NAME=PATH per broker of a fleet (their broker.properties share a name)."""
    if len(metas) == 1:
        return [metas[0]["store"]]
    return [f"b{i:02d}={m['store']}" for i, m in enumerate(metas)]


def _child(plan_path: str, out: str) -> None:
    """One session: the warm-up, then each round's runs; one JSON line per run."""
    from runtime.session import build_session
    from bench.proctree import PeakSampler, tree_cpu
    import jobs.audit as audit

    plan = json.loads(Path(plan_path).read_text())
    spark = build_session("bench-wide", master="local[2]")
    for n, run in enumerate(plan["runs"]):
        target = os.path.join(out, str(n))
        args = audit.build_parser().parse_args(["--store", *run["stores"], "--out", target])
        with PeakSampler() as peaks:
            t, c = time.perf_counter(), tree_cpu()
            result = audit.run(spark, args)
            elapsed, cpu = time.perf_counter() - t, tree_cpu() - c
        report = Path(target, "report.html")
        print(json.dumps({**{k: run[k] for k in ("case", "side", "round")}, "seconds": elapsed, "cpu_seconds": cpu,
                          "phases": getattr(result, "phases", []), "report_bytes": report.stat().st_size
                          if report.exists() else None, **peaks.peaks}), flush=True)
    spark.stop()


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--mib", type=float, default=1024, help="the queues and fleet cases' bytes (default 1024)")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--cache", default="/tmp/benchcache", help="where the generated dumps are kept")
    ap.add_argument("--only", nargs="+", choices=CASES, default=list(CASES))
    ap.add_argument("--results", default=str(REPO / "bench" / "results-wide.json"))
    ap.add_argument("--child", nargs=2, metavar=("PLAN", "OUT"), help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    if a.child:
        _child(*a.child)
        return 0
    from bench.dump import ensure_dump

    sides = {}
    for case in a.only:
        for side, dumps in zip(("base", "wide"), specs(case, a.mib)):
            metas = [ensure_dump(s, Path(a.cache), progress=False) for s in dumps]
            sides[case, side] = (metas, describe(metas))
            print(f"{case} {side}: {sides[case, side][1]}", file=sys.stderr, flush=True)
    warm = min((sides[c, "base"] for c in a.only), key=lambda s: s[1]["commitlog_bytes"])[0]  # the smallest
    runs = [{"case": "warmup", "side": "base", "round": 0, "stores": store_args(warm)}]
    runs += [{"case": case, "side": side, "round": r, "stores": store_args(sides[case, side][0])}
             for r in range(1, a.rounds + 1) for case in a.only for side in ("base", "wide")]
    with tempfile.TemporaryDirectory(prefix="bench-wide-") as tmp:
        plan = Path(tmp, "plan.json")
        plan.write_text(json.dumps({"runs": runs}))
        env = {**os.environ, "PYSPARK_PYTHON": os.environ.get("PYSPARK_PYTHON", sys.executable),
               "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))}
        child = subprocess.run([sys.executable, str(Path(__file__).resolve()), "--child", str(plan),
                                str(Path(tmp, "out"))], cwd=REPO, env=env, stdout=subprocess.PIPE, text=True,
                               check=True)
    lines = [json.loads(x) for x in child.stdout.splitlines() if x.startswith("{")]
    previous = json.loads(Path(a.results).read_text()) if Path(a.results).exists() else {}
    results = {"cases": previous.get("cases", {})}  # a case not run keeps its last figures (its own date)
    for case in a.only:
        got = {side: [x for x in lines if x["case"] == case and x["side"] == side] for side in ("base", "wide")}
        best = {side: min(x["seconds"] for x in got[side]) for side in got}
        row = {"date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "mib": a.mib, "rounds": a.rounds,
               "commit": subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO, text=True,
                                        stdout=subprocess.PIPE).stdout.strip(),
               "target": TARGETS[case], "ratio": best["wide"] / best["base"],
               "pair_ratios": [w["seconds"] / b["seconds"] for b, w in zip(got["base"], got["wide"])],
               "cpu_ratio": min(x["cpu_seconds"] for x in got["wide"]) / min(x["cpu_seconds"] for x in got["base"])}
        for side in got:
            row[side] = {**sides[case, side][1], "seconds": [x["seconds"] for x in got[side]],
                         "runs": got[side]}
        if case == "segments":
            row["report_bytes"] = max(x["report_bytes"] or 0 for x in got["wide"])
            row["report_under_limit"] = row["report_bytes"] < REPORT_LIMIT
        row["met"] = row["ratio"] <= TARGETS[case] and row.get("report_under_limit", True)
        results["cases"][case] = row
        print(f"{case}: {row['ratio']:.2f}x (target <= {TARGETS[case]}x; pairs "
              f"{', '.join(f'{r:.2f}' for r in row['pair_ratios'])}; cpu {row['cpu_ratio']:.2f}x)"
              + (f", report.html {row['report_bytes']:,} B" if case == "segments" else ""), flush=True)
    Path(a.results).write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
