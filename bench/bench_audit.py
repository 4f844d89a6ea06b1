"""The audit's cost against dump size: 1x, 4x and 16x of a base size, each in a fresh local[2] session.

Reports seconds per GB of commitlog (flat = linear cost) and the peak resident memory of the driver JVM and of
the largest Python worker (VmHWM from /proc: independent of dump size = bounded memory per task), measured by
bench/scaling.py (which ``bench/run.py`` also uses, for the audit and the decode job on its own dumps).  Dumps
are generated with the writer's traffic generator (seeded, 64 MiB segments) and cached in bench/cache/.

  .venv/bin/python bench/bench_audit.py [--base-messages 25000] [--factors 1 4 16]
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
CACHE = REPO / "bench" / "cache"
sys.path.insert(0, str(REPO))

from bench.scaling import run_job, scaling_rows  # noqa: E402


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


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--base-messages", type=int, default=25_000)
    p.add_argument("--factors", type=int, nargs="+", default=[1, 4, 16])
    p.add_argument("--json", metavar="FILE", help="also write the figures here")
    args = p.parse_args(argv)
    runs = []
    for f in args.factors:
        store = dump_of(args.base_messages * f)
        nbytes = commitlog_bytes(store)
        r = run_job("audit", store)
        r.update(step=f, messages=args.base_messages * f, commitlog_bytes=nbytes, load=os.getloadavg()[0])
        runs.append(r)
        r = scaling_rows(runs)[-1]
        print(f"audit x{f:<3} {nbytes / 1e6:8.1f} MB  {r['seconds']:7.1f} s  {r['sec_per_gb']:8.1f} s/GB  "
              f"JVM peak {r['driver_jvm_peak_bytes'] / 2**20:6.0f} MiB  Python worker peak "
              f"{r['python_worker_peak_bytes'] / 2**20:5.0f} MiB  driver Python {r['driver_python_peak_bytes'] / 2**20:5.0f}"
              f" MiB  load {r['load']:.1f}", flush=True)
    rows = scaling_rows(runs)
    for a, b in zip(rows, rows[1:]):
        print(f"x{a['step']} -> x{b['step']}: marginal {b['marginal_sec_per_gb']:.1f} s/GB")
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
