"""Big metadata (issue 22): a busy broker's consumerOffset.json read by store_format and the metadata source.

    .venv/bin/python bench/bench_metadata.py [--mb 200] [--tolerant-mb 8] [--results bench/metadata.json]

Generates (once, cached in bench/cache/) a fastjson-format consumerOffset.json of --mb MB -- tab-indented,
"topic@group" keys, each group's Integer-keyed map of 4 to 32 queues written with bare keys on one line, offsets
up to 2^40 -- and a strict-JSON twin of the same content (the same bytes but for the quotes around each queue
id).  Then each figure in a process of its own (its wall and CPU seconds, and its peak resident memory above the
process's start), in one run, so they compare:

  baseline   json.loads of the twin's bytes: the C decoder on the same content, the floor for any reader that
             builds the same Python objects;
  read       store_format.config.read_config of the fastjson file (the fast path: numpy finds the flat Integer-keyed
             maps outside strings and rewrites them in place as arrays, then the C decoder);
  rows       decoding.metadata.table_batch("consumer_offsets"): the file read by the compiled passes over
             fastjson's layout (decoding.kernels.scan_offset_table: the scan, the maps sorted by name, the rows in
             that order) and the consumer-offset table built from those columns (what the rocketmq-metadata source
             and the audit get);
  tolerant   the tolerant parser alone (the exact definition, which the fast path steps aside for) on a
             --tolerant-mb file of the same traffic, scaled to --mb: what every read cost before.

Each figure is the fastest of --repeat runs, interleaved (the machine is shared).  Prints one line per figure with
its ratio to the baseline; the figures go to --results as JSON.
"""
from __future__ import annotations

import argparse
import json
import os
import random
import resource
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

CACHE = REPO / "bench" / "cache"


def generate(path: Path, size: int, seed: int = 7, strict: bool = False) -> int:
    """A consumerOffset.json of about ``size`` bytes as fastjson writes it (``strict``: queue ids quoted);
    returns the number of offsets."""
    rnd = random.Random(seed)
    n = written = group = 0
    with open(path, "w", encoding="utf-8") as f:
        f.write('{\n\t"offsetTable":{\n')
        while written < size:
            group += 1
            queues = rnd.choice((4, 8, 16, 16, 32))
            key = (lambda q: f'"{q}"') if strict else str
            inner = ",".join(f"{key(q)}:{rnd.randint(0, 2**40)}" for q in range(queues))
            line = ("" if group == 1 else ",\n") + f'\t\t"Topic_{group % 5000:05d}@group_{group:07d}":{{{inner}\n\t\t}}'
            f.write(line)
            written += len(line)
            n += queues
        f.write("\n\t}\n}")
    return n


def cached(mb: float, strict: bool) -> Path:
    CACHE.mkdir(parents=True, exist_ok=True)
    path = CACHE / f"consumerOffset-{mb:g}MB{'-strict' if strict else ''}" / "config" / "consumerOffset.json"
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(".tmp")
        generate(tmp, int(mb * 1e6), strict=strict)
        tmp.rename(path)
    return path


def _rss_kib() -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def measure(name: str, path: Path) -> dict:
    """One figure, in this process: seconds, CPU seconds, peak resident memory above the start, offsets read."""
    import numpy  # noqa: F401  (imports before the start line: not the read's memory)
    import pyarrow  # noqa: F401

    from decoding.metadata import table_batch
    from store_format import config as C

    start_rss = _rss_kib()
    t0, c0 = time.perf_counter(), time.process_time()
    if name == "baseline":
        data = json.loads(path.read_bytes())
        n = sum(len(v) for v in data["offsetTable"].values())
    elif name == "read":
        cfg = C.read_config(path.parent, path.name)
        n = sum(len(v) for v in cfg.data["offsetTable"].values())
    elif name == "rows":
        n = table_batch("consumer_offsets", "b", str(path.parent.parent)).num_rows
    elif name == "tolerant":
        data = C._slow_loads(path.read_text(encoding="utf-8"), str(path))
        n = sum(len(v) for v in data["offsetTable"].values())
    else:
        raise ValueError(name)
    seconds, cpu = time.perf_counter() - t0, time.process_time() - c0
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # KiB on Linux
    return {"figure": name, "seconds": round(seconds, 3), "cpu_seconds": round(cpu, 3), "offsets": n,
            "bytes": path.stat().st_size, "peak_mib": round(peak / 1024, 1),
            "peak_above_start_mib": round((peak - start_rss) / 1024, 1)}


def run_one(name: str, path: Path) -> dict:
    r = subprocess.run([sys.executable, __file__, "--measure", name, "--file", str(path)], capture_output=True,
                       text=True, check=True, cwd=REPO)
    return json.loads(r.stdout.strip().splitlines()[-1])


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--mb", type=float, default=200.0, help="size of the generated consumerOffset.json (MB)")
    p.add_argument("--tolerant-mb", type=float, default=8.0, help="size of the tolerant parser's file (MB)")
    p.add_argument("--repeat", type=int, default=2, help="runs per figure, interleaved; the fastest counts")
    p.add_argument("--results", type=Path, default=REPO / "bench" / "metadata.json")
    p.add_argument("--measure", help=argparse.SUPPRESS)
    p.add_argument("--file", type=Path, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.measure:
        print(json.dumps(measure(args.measure, args.file)))
        return 0
    fastjson, strict, small = cached(args.mb, False), cached(args.mb, True), cached(args.tolerant_mb, False)
    plan = [("baseline", strict), ("read", fastjson), ("rows", fastjson), ("tolerant", small)]
    runs = [[run_one(name, path) for name, path in plan] for _ in range(max(args.repeat, 1))]  # interleaved
    figures = [min((r[i] for r in runs), key=lambda f: f["seconds"]) for i in range(len(plan))]
    base = figures[0]
    scale = fastjson.stat().st_size / small.stat().st_size
    figures[3]["scaled_seconds"] = round(figures[3]["seconds"] * scale, 1)
    figures[3]["scaled_peak_above_start_mib"] = round(figures[3]["peak_above_start_mib"] * scale, 1)
    load = os.getloadavg()[0]
    print(f"consumerOffset.json: {fastjson.stat().st_size / 1e6:,.1f} MB, {base['offsets']:,} offsets; "
          f"load average {load:.1f} (2 cores shared: compare the ratios)")
    for f in figures:
        secs = f.get("scaled_seconds", f["seconds"])
        mem = f.get("scaled_peak_above_start_mib", f["peak_above_start_mib"])
        scaled = f" (scaled from {f['bytes'] / 1e6:.1f} MB: {f['seconds']} s)" if "scaled_seconds" in f else ""
        print(f"  {f['figure']:<9} {secs:8.2f} s  x{secs / base['seconds']:5.2f} baseline   "
              f"{mem:8.0f} MiB above start  x{mem / max(base['peak_above_start_mib'], 1):5.2f}{scaled}")
    args.results.write_text(json.dumps({"when": time.strftime("%Y-%m-%d %H:%M:%S"), "load_average": load,
                                        "mb": args.mb, "figures": figures}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
