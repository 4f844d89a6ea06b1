"""audit: everything wrong with one or more broker dumps, found, located and explained.

  python -m jobs.audit --store PATH [PATH ...] --out DIR [--history DELTA_DIR] [--sha256] [--overwrite]
  spark-submit --py-files dist/rocketmq_forensics.zip jobs/audit/__main__.py --store PATH --out DIR

Reads every store (read-only) through the data sources, runs the check families of jobs/checks/ (framing and
integrity, the broker's recovery predicted, CommitLog <-> ConsumeQueue, CommitLog <-> IndexFile, consumer lag,
transactions, delays, retries and DLQ, metadata) and writes to DIR:

  findings/      Parquet, one row per finding (check, severity, broker, file, file_position, physical_offset,
                 topic, queue_id, queue_offset, message, details, stable finding_id)
  metrics/       Parquet, long format (broker, scope, topic, queue_id, group, metric, value)
  tables/<name>/ Parquet detail tables: segments, queues, lag, transactions, delays, retries, dlq
  summary.json   tool version, run time, inputs, geometry, counts per severity and per check, recovery per broker
  report.html    one self-contained page: verdict, recovery, worst findings, lag/transaction/delay tables, plots

With --history, findings and metrics are also appended to Delta tables HISTORY/findings and HISTORY/metrics
(one commit each per run; jobs/trend.py reads them).  Exit codes: 0 no error findings, 1 error findings,
2 the audit could not run.  Progress goes to stderr, one line per phase.
"""
from __future__ import annotations

import argparse
import datetime as dt
import hashlib
import json
import os
import sys
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

if __package__ in (None, ""):  # run as a script (spark-submit jobs/audit.py): make the project importable
    _root = Path(__file__).resolve().parent.parent
    if (_root / "jobs" / "__init__.py").exists():
        sys.path.insert(0, str(_root))

from jobs import cli  # noqa: E402
from store_format.brokerconf import add_geometry_arguments, geometry_from_args  # noqa: E402
from jobs.checks import FAMILIES, load  # noqa: E402
from jobs.checks.base import AuditContext, StoreInput, progress  # noqa: E402
from jobs.output import OutputError, append_history, prepare_output, write_table  # noqa: E402

NAME = "audit"
TOOL = "rocketmq-forensics"
SEVERITY_ORDER = {"error": 0, "warning": 1, "info": 2}


@dataclass
class AuditResult(cli.JobResult):
    out: str = ""
    summary_data: dict = field(default_factory=dict)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m jobs.audit", description=__doc__.split("\n\n")[0],
                                epilog="Exit codes: 0 no error findings, 1 error findings, 2 the audit could "
                                       "not run.  Input dumps are only ever opened read-only.")
    p.add_argument("--store", nargs="+", required=True, metavar="PATH",
                   help="a broker store root (holding commitlog/, consumequeue/, index/, config/...) or a folder "
                        "of several brokers' store roots; several may be given")
    p.add_argument("--out", required=True, metavar="DIR", help="output folder (refused when it exists and is not "
                                                               "empty, unless --overwrite)")
    p.add_argument("--overwrite", action="store_true", help="replace an existing output folder")
    p.add_argument("--history", metavar="DELTA_DIR",
                   help="also append findings and metrics to the Delta tables DELTA_DIR/findings and "
                        "DELTA_DIR/metrics (for jobs/trend.py and the lag-over-time notebook)")
    p.add_argument("--checks", default=",".join(FAMILIES),
                   help=f"comma-separated check families to run (default all: {','.join(FAMILIES)})")
    p.add_argument("--as-of", type=int, metavar="EPOCH_MS",
                   help="the dump time for lag, delays and transaction ages (default: each broker's newest "
                        "store timestamp)")
    p.add_argument("--sha256", action="store_true",
                   help="record the sha256 of every input file in summary.json, and fail (exit 2) if any input "
                        "changes while the audit runs (chain of custody)")
    p.add_argument("--no-crc", action="store_true",
                   help="do not verify body CRCs (the broker checks them on recovery: checkCRCOnRecover)")
    p.add_argument("--message-index-safe", action="store_true",
                   help="the broker runs with messageIndexSafe=true (changes the abnormal recovery start)")
    add_geometry_arguments(p, segment_size=True)
    p.add_argument("--split-size", metavar="BYTES", help="commitlog split size per Spark task (e.g. 128m)")
    p.add_argument("--top", type=int, default=50, help="findings listed in the report (default 50)")
    p.add_argument("--no-report", action="store_true", help="skip report.html")
    return p


# ---------------------------------------------------------------------------------------------------------
# Inputs


def resolve_stores(paths: list[str]) -> list[StoreInput]:
    """Store roots named by ``paths`` (each a store root or a folder of store roots), with broker names as the
    data sources give them (the folder name; ``.../<broker>/store`` -> ``<broker>``).  A single root whose
    name is taken already gets a numbered name; a clash inside folders is refused."""
    from datasources.storepaths import find_inputs

    out: list[StoreInput] = []
    for path in paths:
        if "://" in path and not path.startswith("file://"):
            raise OutputError(f"{path}: the audit reads local (or mounted) stores; copy remote dumps first")
        local = os.path.abspath(path[len("file://"):] if path.startswith("file://") else path)
        inputs = find_inputs(local, "commitlog")
        for inp in inputs:
            if inp.single_file:
                raise OutputError(f"{path}: give a store root, not a single segment file")
            root = os.path.abspath(inp.loc.parent().path)
            if any(root == s.path for s in out):
                continue
            name = inp.broker
            taken = {s.name for s in out}
            if name in taken:
                if len(inputs) > 1:
                    raise OutputError(f"{path}: a store named {name!r} is given twice; pass one of them as its "
                                      "own --store path so it can be renamed")
                name = next(f"{name}-{i}" for i in range(2, len(out) + 3) if f"{name}-{i}" not in taken)
            out.append(StoreInput(name, root, local, from_folder=len(inputs) > 1))
    return out


def input_files(stores: list[StoreInput]) -> list[Path]:
    return sorted(p for s in stores for p in Path(s.path).rglob("*") if p.is_file())


def fingerprint(files: list[Path], sha256: bool) -> dict[str, dict]:
    out = {}
    for p in files:
        st = p.stat()
        entry = {"size": st.st_size, "mtime_ns": st.st_mtime_ns}
        if sha256:
            h = hashlib.sha256()
            with open(p, "rb") as f:
                for chunk in iter(lambda: f.read(1 << 20), b""):
                    h.update(chunk)
            entry["sha256"] = h.hexdigest()
        out[str(p)] = entry
    return out


# ---------------------------------------------------------------------------------------------------------
# The run


def run(spark, args) -> AuditResult:
    started = time.time()
    run_time = dt.datetime.now(dt.timezone.utc).replace(microsecond=0)
    run_id = f"{run_time.strftime('%Y%m%dT%H%M%SZ')}-{uuid.uuid4().hex[:8]}"
    stores = resolve_stores(args.store)
    prepare_output(args.out, overwrite=args.overwrite, inputs=[s.path for s in stores])
    families = [f.strip() for f in args.checks.split(",") if f.strip()]
    modules = [load(f) for f in families]
    files = input_files(stores)
    progress(f"{len(stores)} store(s), {len(files)} files, {sum(p.stat().st_size for p in files) / 2**20:.1f} MiB; "
             f"checks: {', '.join(families)}")
    before = fingerprint(files, args.sha256)

    # a few tasks per 128 MiB of input: tiny dumps must not pay for hundreds of empty shuffle tasks
    total_bytes = sum(p.stat().st_size for p in files)
    saved_partitions = spark.conf.get("spark.sql.shuffle.partitions")
    spark.conf.set("spark.sql.shuffle.partitions", str(max(2, min(int(saved_partitions), total_bytes >> 27))))
    ctx = AuditContext(spark, stores, as_of=args.as_of, check_crc=not args.no_crc,
                       split_size=args.split_size, message_index_safe=args.message_index_safe,
                       geometry=geometry_from_args(args))
    from pyspark.sql import functions as F

    from jobs.checks.base import FINDING_FIELDS, METRIC_FIELDS, with_finding_id

    all_findings, all_metrics, tables = [], [], {}
    try:
        progress("reading the commitlog (salvage walk, decoded)")
        n_items = ctx.commitlog.count()
        progress(f"{n_items} commitlog items; predicting recovery")
        ctx.recovery  # noqa: B018 - computed once, used by several families
        for family, module in zip(families, modules):
            t0 = time.time()
            res = module.run(ctx)
            all_findings += res.findings
            all_metrics += res.metrics
            tables.update(res.tables)
            progress(f"{family}: {time.time() - t0:.1f}s")

        empty_f = spark.createDataFrame([], FINDING_FIELDS)
        findings_df = empty_f
        for f in all_findings:
            findings_df = findings_df.unionByName(f)
        stamp = [F.lit(run_id).alias("run_id"), F.lit(run_time).cast("timestamp").alias("run_time")]
        findings_df = with_finding_id(findings_df)
        findings_df = findings_df.select(*stamp, "finding_id", *[c.name for c in FINDING_FIELDS])
        metrics_df = spark.createDataFrame([], METRIC_FIELDS)
        for m in all_metrics:
            metrics_df = metrics_df.unionByName(m)
        metrics_df = metrics_df.select(*stamp, *[c.name for c in METRIC_FIELDS])

        out = args.out.rstrip("/")
        progress("writing findings")
        write_table(findings_df.repartition(1), f"{out}/findings", "parquet")
        findings_df = spark.read.parquet(f"{out}/findings")  # computed once: everything below reads the file
        progress("writing metrics")
        write_table(metrics_df.repartition(1), f"{out}/metrics", "parquet")
        metrics_df = spark.read.parquet(f"{out}/metrics")
        for name, t in tables.items():
            progress(f"writing table {name}")
            write_table(t.coalesce(1), f"{out}/tables/{name}", "parquet")
        if args.history:
            progress(f"appending to the history at {args.history}")
            append_history(findings_df, f"{args.history.rstrip('/')}/findings")
            append_history(metrics_df, f"{args.history.rstrip('/')}/metrics")

        from jobs.checks import recovery as recovery_family

        counts = {r["severity"]: r["n"] for r in findings_df.groupBy("severity").count()
                  .withColumnRenamed("count", "n").collect()}
        per_check = {r["check"]: {"severity": r["severity"], "count": r["n"]} for r in findings_df.groupBy(
            "check", "severity").count().withColumnRenamed("count", "n").orderBy("check").collect()}
        recovery = recovery_family.summary(ctx)
        after = fingerprint(files, args.sha256)
        if after != before:
            changed = sorted(k for k in set(before) | set(after) if before.get(k) != after.get(k))
            raise OutputError(f"input files changed during the audit (chain of custody broken): {changed[:5]}")
        summary = {
            "tool": TOOL, "version": _version(), "run_id": run_id, "run_time": run_time.isoformat(),
            "elapsed_seconds": round(time.time() - started, 1), "checks": families,
            "inputs": [{"path": p, **v} for p, v in before.items()],
            "counts": {"error": counts.get("error", 0), "warning": counts.get("warning", 0),
                       "info": counts.get("info", 0), "per_check": per_check},
            "brokers": [{"name": s.name, "path": s.path, "geometry": _geometry(ctx, s.name),
                         "as_of": ctx.as_of.get(s.name), "recovery": recovery[s.name]} for s in stores],
            "outputs": {"findings": f"{out}/findings", "metrics": f"{out}/metrics",
                        **{f"tables/{n}": f"{out}/tables/{n}" for n in tables},
                        "report": None if args.no_report else f"{out}/report.html"},
        }
        (Path(out) / "summary.json").write_text(json.dumps(summary, indent=2, sort_keys=False, default=str))
        if not args.no_report:
            progress("rendering report.html")
            from jobs import report

            report.write(spark, ctx, summary, findings_df, metrics_df, out, top=args.top)
    finally:
        ctx.release()
        spark.conf.set("spark.sql.shuffle.partitions", saved_partitions)

    errors = summary["counts"]["error"]
    verdict = "FAIL" if errors else "PASS"
    line = (f"audit {verdict}: {errors} error(s), {summary['counts']['warning']} warning(s), "
            f"{summary['counts']['info']} info in {len(stores)} store(s); report: "
            f"{summary['outputs']['report'] or '-'}; findings: {out}/findings")
    progress(f"done in {time.time() - started:.1f}s")
    return AuditResult(line, cli.EXIT_NOTHING if errors else cli.EXIT_OK, out=out, summary_data=summary)


def _geometry(ctx: AuditContext, name: str) -> dict:
    st = ctx.store_objects[name]
    segs = st.segments
    return {"segment_size": st.segment_size, "segments": len(segs),
            "first_segment": segs[0].name if segs else None, "last_segment": segs[-1].name if segs else None,
            "consume_queue_file_size": st.consume_queue_file_size, "queues": len(st.queues),
            "index_files": len(st.index_paths())}


def _version() -> str:
    try:
        from importlib.metadata import version

        return version(TOOL)
    except Exception:  # running from a zip on --py-files: no installed metadata
        return "unknown"


def _prepare(args) -> None:
    geometry_from_args(args)  # a broker.conf that cannot be used fails before Spark starts
    prepare_output(args.out, overwrite=args.overwrite, inputs=[s.path for s in resolve_stores(args.store)])


def main(argv=None) -> int:
    return cli.main(NAME, build_parser, run, argv, prepare=_prepare)


if __name__ == "__main__":
    sys.exit(main())
