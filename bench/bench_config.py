"""Config files at any size (issue 40): the driver's memory for a big consumerOffset.json, under an address-space
limit as a machine with that much memory would set it.

    .venv/bin/python bench/bench_config.py [--mib 1024] [--as-gib 8] [--results bench/results-config.json]

Generates once into bench/cache/config-<mib>MiB/ a copy of the basic fixture whose consumerOffset.json (and its
.bak, as a broker keeps one) is --mib MiB in fastjson's layout -- the issue's proportions: ~4 queues a map, ~14
bytes an offset (a 1 GiB file: ~78 M offsets, ~20 M topic@group maps) -- every offset 0 over 3000 topics that
topics.json configures (nothing for the lag checks to find: the figures are the reading's, not the findings').
Then each phase in a process of its own under ``prlimit --as`` of --as-gib GiB (the Python driver's limit), its
outcome (ok, or the last line of the error), wall seconds and peak resident memory:

  load     the recovery prediction's load of the file and its .bak (store_format.recovery.config_load_problems:
           the one-pass check over a map of each, issue 40; it built the whole file's columns before);
  columns  store_format.config.offset_columns (the compiled scan's columns);
  table    decoding.metadata.table_batch("consumer_offsets") (the metadata source's and the audit's table);
  driver   the audit's driver-side lag and metadata families over it (jobs.audit.checks.lag/metadata on_driver:
           the lag table, one row an offset);
  stream   the file streamed (decoding.metadata.spill_offset_table: the maps found in one compiled pass, the rows a
           batch of maps at a time) and spilled as Parquet into a scratch folder of TMPDIR (removed after): the
           rows written (every offset of the file), the spill's size;
  audit    the whole audit (jobs.audit, local Spark, --no-report) into a scratch folder of TMPDIR (removed after):
           past the offsets limit the file is spilled into the run's partials and read a batch at a time (issue
           40); the lag table's rows (one an offset: complete), the findings per check, and the Python driver's own
           peak resident memory (getrusage: the JVM apart).

A file of more offsets than ROCKETMQ_CONFIG_OFFSETS_LIMIT (store_format.config.CONFIG_OFFSETS_LIMIT, 32 M) is a
TOO_LARGE error for the whole-table reads (columns, table), the columns never built, and spilled by the audit's
(driver, audit): --offsets-limit raises it, to measure what the whole table costs.
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
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

CACHE = REPO / "bench" / "cache"
PHASES = ("load", "columns", "table", "driver", "stream", "audit")
TOPICS = 3000


def generate(path: Path, size: int) -> tuple[int, int]:
    """A consumerOffset.json of about ``size`` bytes as fastjson writes it; returns (offsets, maps)."""
    offsets = maps = written = 0
    with open(path, "w", encoding="ascii") as f:
        f.write('{\n\t"offsetTable":{\n')
        while written < size:
            block = []
            for m in range(maps, maps + 100_000):
                queues = (2, 4, 4, 6)[m % 4]
                block.append(f'\t\t"T{m % TOPICS}@g{m}":{{' + ",".join(f"{q}:0" for q in range(queues)) + "\n\t\t}")
                offsets += queues
            text = ("" if not maps else ",\n") + ",\n".join(block)
            f.write(text)
            written += len(text)
            maps += len(block)
        f.write('\n\t},\n\t"dataVersion":{\n\t\t"counter":1,\n\t\t"timestamp":1\n\t}\n}')
    return offsets, maps


def cached(mib: int) -> Path:
    """The store root (generated once)."""
    from store_format.config import dumps_fastjson
    from tests.conftest import fixture_store

    root = CACHE / f"config-{mib}MiB" / "store"
    done = root.parent / "generated.json"
    if done.exists():
        return root
    if root.exists():
        shutil.rmtree(root)
    shutil.copytree(fixture_store("basic"), root)
    for p in [root, *root.rglob("*")]:
        p.chmod(0o755 if p.is_dir() else 0o644)
    config = root / "config"
    (config / "topics.json").write_text(dumps_fastjson({"topicConfigTable": {
        f"T{i}": {"topicName": f"T{i}", "readQueueNums": 8, "writeQueueNums": 8, "perm": 6} for i in range(TOPICS)}}))
    offsets, maps = generate(config / "consumerOffset.json", mib << 20)
    shutil.copyfile(config / "consumerOffset.json", config / "consumerOffset.json.bak")
    done.write_text(json.dumps({"offsets": offsets, "maps": maps, "bytes": (config / "consumerOffset.json").stat().st_size}))
    return root


def measure(phase: str, root: Path) -> dict:
    """One phase, in this process."""
    from store_format import config as C
    from decoding.kernels import scan_offset_table

    if phase == "load":
        from store_format.recovery import config_load_problems

        return {"problems": config_load_problems(root / "config", ["consumerOffset.json"], scan_offset_table)}
    if phase == "columns":
        return {"rows": len(C.offset_columns(root / "config", [], offset_scan=scan_offset_table)[1]["offset"])}
    if phase == "stream":
        import tempfile

        from decoding.metadata import spill_offset_table

        with tempfile.TemporaryDirectory(prefix="bench-config-spill-") as scratch:
            path, source, size, rows = spill_offset_table("b", root, scratch)
            return {"rows": rows, "spill_mib": round(os.path.getsize(path) / 2**20, 1), "source_bytes": size}
    if phase == "table":
        from decoding.metadata import table_batch

        return {"rows": table_batch("consumer_offsets", "b", root).num_rows}
    if phase == "audit":
        import resource
        import tempfile

        import pyarrow.parquet as pq

        from jobs.audit.job import main as audit

        with tempfile.TemporaryDirectory(prefix="bench-config-audit-") as scratch:
            code = audit(["--store", str(root), "--out", f"{scratch}/out", "--no-report"])
            summary = json.loads(Path(f"{scratch}/out/summary.json").read_text())
            lag = Path(f"{scratch}/out/tables/lag")
            rows = sum(pq.read_metadata(p).num_rows for p in lag.glob("*.parquet")) if lag.is_dir() else 0
            spilled = Path(f"{scratch}/out/partials/consumer_offsets")
            findings = pq.read_table(f"{scratch}/out/findings", columns=["check", "message"])
            failed = [m for c, m in zip(findings.column("check").to_pylist(), findings.column("message").to_pylist())
                      if c == "broker.audit_failed"]
            return {"exit_code": code, "lag_rows": rows, "spilled": spilled.is_dir(),
                    "findings": summary["counts"]["per_check"], "failed": failed,
                    "driver_peak_rss_mib": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)}
    from jobs.audit.checks import lag, metadata
    from jobs.audit.context import AuditContext, AuditOptions
    from jobs.audit.plan import plan_broker
    from runtime.stores import resolve_stores

    stores = resolve_stores([str(root)])
    ctx = AuditContext(None, stores, {s.name: plan_broker(s) for s in stores},
                       AuditOptions(families=("lag", "metadata")))
    found = lag.FAMILY.on_driver(ctx)
    checked = metadata.FAMILY.on_driver(ctx)
    return {"lag_rows": found.tables["lag"].num_rows,
            "findings": sum(t.num_rows for t in found.findings + checked.findings)}


def run_phase(phase: str, root: Path, as_bytes: int, offsets_limit: int | None = None) -> dict:
    """``phase`` in a child under ``prlimit --as``: its outcome, seconds and peak resident memory (wait4's: prlimit
    execs Python in its own process, so the process waited for is the one measured, whether it ends well or not)."""
    import tempfile

    cmd = ["prlimit", f"--as={as_bytes}", sys.executable, __file__, "--measure", phase, "--root", str(root)]
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        t0 = time.perf_counter()
        env = dict(os.environ, **({} if offsets_limit is None else {"ROCKETMQ_CONFIG_OFFSETS_LIMIT": str(offsets_limit)}))
        p = subprocess.Popen(cmd, cwd=REPO, stdout=out, stderr=err, text=True, env=env)
        _, status, usage = os.wait4(p.pid, 0)
        p.returncode = os.waitstatus_to_exitcode(status)
        seconds = time.perf_counter() - t0
        out.seek(0)
        err.seek(0)
        stdout, stderr = out.read(), err.read()
    got = {"phase": phase, "seconds": round(seconds, 1), "peak_rss_mib": round(usage.ru_maxrss / 1024, 1)}
    if p.returncode == 0:
        got.update(ok=True, **json.loads(stdout.strip().splitlines()[-1]))
    else:
        got.update(ok=False, error=(stderr.strip().splitlines() or [f"exit {p.returncode}"])[-1][:300])
    return got


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--mib", type=int, default=1024, help="size of the generated consumerOffset.json (MiB)")
    p.add_argument("--as-gib", type=float, default=8.0, help="the driver's address-space limit (prlimit --as), GiB")
    p.add_argument("--phases", nargs="+", choices=PHASES, default=list(PHASES[:4]))
    p.add_argument("--offsets-limit", type=int, help="ROCKETMQ_CONFIG_OFFSETS_LIMIT for the phases (default: the "
                   "code's, 32 M: a bigger file is skipped with its finding); raise it to measure the columns")
    p.add_argument("--results", type=Path, default=REPO / "bench" / "results-config.json")
    p.add_argument("--cache", type=Path, help="where the generated store is kept (default: bench/cache)")
    p.add_argument("--measure", help=argparse.SUPPRESS)
    p.add_argument("--root", type=Path, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.measure:
        print(json.dumps(measure(args.measure, args.root)))
        return 0
    t0 = time.perf_counter()
    if args.cache is not None:
        global CACHE
        CACHE = args.cache
    root = cached(args.mib)
    made = json.loads((root.parent / "generated.json").read_text())
    print(f"consumerOffset.json: {made['bytes'] / 2**20:,.0f} MiB, {made['offsets']:,} offsets, {made['maps']:,} maps "
          f"(generated or found in {time.perf_counter() - t0:.0f} s); limit: prlimit --as={args.as_gib:g} GiB",
          flush=True)
    figures = []
    for phase in args.phases:
        f = run_phase(phase, root, int(args.as_gib * 2**30), args.offsets_limit)
        figures.append(f)
        print(json.dumps(f), flush=True)
    args.results.write_text(json.dumps({"file": made, "as_gib": args.as_gib, "offsets_limit": args.offsets_limit,
                                        "load_average": os.getloadavg()[0],
                                        "figures": figures}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
