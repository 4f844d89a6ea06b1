"""audit: everything wrong with one or more broker dumps, found, located and explained.

  rocketmq-forensics audit --store PATH|NAME=PATH [...] --out DIR [--history DELTA_DIR] [--sha256] [--overwrite]
  python -m jobs.audit ...   or   spark-submit --py-files dist/rocketmq_forensics.zip jobs/audit/__main__.py ...

Reads every store (read-only) and runs the check families of jobs/audit/checks/ (framing and integrity, the
broker's recovery predicted, CommitLog <-> ConsumeQueue, CommitLog <-> IndexFile, consumer lag, transactions,
delays, retries and DLQ, metadata), then writes to DIR:

  findings/      Parquet, one row per finding (check, severity, broker, file, file_position, physical_offset,
                 topic, queue_id, queue_offset, message, details, stable finding_id)
  metrics/       Parquet, long format (broker, scope, topic, queue_id, group, metric, value)
  tables/<name>/ Parquet detail tables: segments, queues, lag, transactions, delays, retries, dlq, and resend (the
                 messages to re-send: damaged, dropped by recovery, or in no consume queue; jobs/audit/resend.py)
  summary.json   tool version, run time, inputs, geometry, counts per severity and per check, and per broker its
                 recovery and its verdict (jobs/audit/verdict.py: will it start, the cut, what is lost, what to do)
  report.html    one self-contained page: per broker, in words, will it start, where recovery cuts, what is lost and
                 what to do first, the messages to re-send; a fleet table for several brokers; the findings
                 grouped by cause; lag/transaction/delay tables, plots

With --history, findings and metrics are also appended to Delta tables HISTORY/findings and HISTORY/metrics
(one commit each per run; jobs/trend.py reads them).  Exit codes: 0 no error findings, 1 error findings,
2 the audit could not run.  Progress goes to stderr, one line per phase (--quiet: none); --profile adds where the
time went.

How it runs: two stages of tasks.  The survey reads what the driver must know first (where each surveyed
segment's walk stops, the consume-queue and index files' bounds); the scan reads every byte once, one task per
commitlog range, and decides in each task every check about the records, units and entries it owns; the driver
finishes what needs the whole dump (ranges of queue offsets, lag, transactions, delays, retries, metadata) from
the small tables the tasks return.  On a cluster each stage is one Spark job; in local mode the tasks run in the
driver's threads, one per core (jobs/audit/tasks.py), which spares the seconds a first Spark job costs.
"""
from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import sys
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc

from jobs import cli
from jobs.extract import parse_time
from jobs.output import OutputError, append_history, prepare_output, write_parquet_file
from jobs.progress import Phase, say
from store_format.brokerconf import add_geometry_arguments, geometry_from_args

from . import findings as FD
from . import resend, terminal
from .checks import FAMILIES, FamilyResult, load, load_all
from .context import AuditContext, AuditOptions
from .groups import add_times, group_findings
from .inputs import fingerprint, input_files, resolve_stores
from .plan import TASKS_PER_CORE, BrokerPlan, plan_broker, scan_split_size
from .tasks import FAILURES, RunInfo, failure_row, run_tasks
from .verdict import verdict as broker_verdict

NAME = "audit"
TOOL = "rocketmq-forensics"


@dataclass
class AuditResult(cli.JobResult):
    out: str = ""
    summary_data: dict = field(default_factory=dict)
    phases: list = field(default_factory=list)  # (phase, wall seconds), as --profile prints them
    line: str = ""  # the one line that sums the run up (what --quiet prints)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog=f"{cli.PROG} audit", description=__doc__.split("\n\n")[0],
                                epilog="Exit codes: 0 no error findings, 1 error findings, 2 the audit could "
                                       "not run.  Input dumps are only ever opened read-only.")
    cli.add_store_arguments(p)
    cli.add_output_arguments(p, formats=())  # findings, metrics and tables are Parquet (and Delta with --history)
    p.add_argument("--history", metavar="DELTA_DIR",
                   help="also append findings and metrics to the Delta tables DELTA_DIR/findings and "
                        "DELTA_DIR/metrics (for `rocketmq-forensics trend` and the lag-over-time notebook)")
    p.add_argument("--checks", default=",".join(FAMILIES),
                   help=f"comma-separated check families to run (default all: {','.join(FAMILIES)})")
    p.add_argument("--as-of", type=parse_time, metavar="TIME",
                   help="the dump time for lag, delays and transaction ages, ISO-8601 (2024-05-01T10:00:00Z) or ms "
                        "since the epoch (default: each broker's newest store timestamp)")
    p.add_argument("--sha256", action="store_true",
                   help="record the sha256 of every input file in summary.json, and fail (exit 2) if any input "
                        "changes while the audit runs (chain of custody)")
    p.add_argument("--no-crc", action="store_true",
                   help="do not verify body CRCs (the broker checks them on recovery: checkCRCOnRecover)")
    p.add_argument("--message-index-safe", action="store_true",
                   help="the broker runs with messageIndexSafe=true (changes the abnormal recovery start)")
    add_geometry_arguments(p, segment_size=True)
    p.add_argument("--split-size", metavar="BYTES",
                   help="cut commitlog segments into ranges of this size, one task each (e.g. 128m; default: about "
                        "three ranges per core, 32m to 64m: a task's memory is about twice its range)")
    p.add_argument("--top", type=int, default=200,
                   help="finding groups listed in the report (default 200; tables/ and findings/ keep them all)")
    p.add_argument("--no-report", action="store_true", help="skip report.html")
    p.add_argument("--format", choices=("text", "json"), default="text",
                   help="what stdout gets: text (default), each broker's verdict in words (will it start, the cut, "
                        "the messages lost, what to do first, with the command) and one line; json, the same as "
                        "one JSON object for machines.  With --quiet, text is the one line")
    p.add_argument("--profile", action="store_true",
                   help="print where the time went: each phase, and the slowest Spark tasks of each stage")
    return p


progress = say  # one line on stderr per step (jobs/progress.py: not with --quiet)


class _Phases:
    """Wall-clock time per phase, for --profile."""

    def __init__(self):
        self.times: list[tuple[str, float]] = []
        self._t = time.perf_counter()

    def done(self, name: str) -> None:
        now = time.perf_counter()
        self.times.append((name, now - self._t))
        self._t = now


# ---------------------------------------------------------------------------------------------------------
# Planning the two stages


@dataclass
class _SegmentPlan:
    """How one segment is read: its ranges, and whether the survey walks it first."""

    broker: str
    seg: object  # datasources.commitlog.SegmentFile
    ranges: list[tuple[int, int, bool]]  # (start, end, last)
    surveyed: bool


def _segment_plans(plans: dict[str, BrokerPlan], split: int | None, recovery_region: dict[str, set]) -> list:
    from datasources.commitlog import cut_ranges, written_end

    out = []
    for name, plan in plans.items():
        newest = plan.named_segments[-1] if plan.named_segments else None
        for seg in plan.named_segments:
            if split and seg.length > split:
                # where the written bytes end: a local file's extents answer at once; elsewhere it costs ranged
                # reads, spent on the newest segment only (the one a broker is still filling)
                probe = seg.loc.local_path is not None or seg is newest
                data = written_end(seg.loc, seg.length) if probe else seg.length
                ranges = cut_ranges(seg.length, data, split)
            else:
                ranges = [(0, seg.length, True)]
            out.append(_SegmentPlan(name, seg, ranges, len(ranges) > 1 or seg.name in recovery_region.get(name, ())))
    return out


def _survey_tasks(ctx: AuditContext, segments: list[_SegmentPlan]) -> list:
    from datasources.consumequeue import GROUP_BYTES, GROUP_FILES

    from .survey import IndexSurvey, QueueSurvey, SegmentSurvey

    tasks = []
    for sp in segments:
        if sp.surveyed:
            for start, end, last in sp.ranges:
                tasks.append(SegmentSurvey(sp.broker, sp.seg.loc, sp.seg.name, sp.seg.base, sp.seg.length, start, end,
                                           last, ctx.options.check_crc))
    delay = ctx.metadata("delay_offsets")
    for name, plan in ctx.plans.items():
        nxt = {lv - 1: o for b, lv, o, err in zip(delay.column("broker").to_pylist(),
                                                  delay.column("delay_level").to_pylist(),
                                                  delay.column("offset").to_pylist(), delay.column("error").to_pylist())
               if b == name and err is None and lv is not None} if "delays" in ctx.options.families else {}
        schedule = {qid: nxt.get(qid, 0) for (topic, qid) in plan.store.queues if topic == "SCHEDULE_TOPIC_XXXX"} \
            if "delays" in ctx.options.families else {}
        segs = [(s.base, s.length, s.loc) for s in plan.named_segments]
        for group in _queue_groups(plan.cq_files, GROUP_BYTES, GROUP_FILES):
            tasks.append(QueueSurvey(name, group, plan.shift, plan.commitlog_end, schedule, segs))
        for part in plan.index_files:
            tasks.append(IndexSurvey(name, part, plan.shift, plan.commitlog_end))
    return tasks


def _queue_groups(files: list, max_bytes: int, max_files: int) -> list[list]:
    """Whole queues (every file of a queue, in order) packed into groups of about ``max_bytes``."""
    queues: dict[tuple, list] = {}
    for f in files:
        queues.setdefault((f.topic, f.queue_id), []).append(f)
    groups, cur, size = [], [], 0
    for key in sorted(queues, key=lambda k: (k[0], k[1] is None, k[1] or 0)):
        q = sorted(queues[key], key=lambda f: f.name)
        qsize = sum(f.length for f in q)
        if cur and (size + qsize > max_bytes or len(cur) + len(q) > max_files):
            groups.append(cur)
            cur, size = [], 0
        cur.extend(q)
        size += qsize
    if cur:
        groups.append(cur)
    return groups


def _segment_ends(ctx: AuditContext) -> dict[tuple[str, str], tuple[int | None, int | None]]:
    """(first stop or blank, first blank) of every surveyed segment's walk."""
    from .survey import WALK_ITEMS

    ends: dict[tuple, list] = {}
    for r in ctx.survey_partial("survey.walk_items", WALK_ITEMS).to_pylist():
        e = ends.setdefault((r["broker"], r["segment"]), [None, None])
        if r["kind"] in ("stop", "blank"):
            e[0] = r["file_position"] if e[0] is None else min(e[0], r["file_position"])
        if r["kind"] == "blank":
            e[1] = r["file_position"] if e[1] is None else min(e[1], r["file_position"])
    from .survey import WALK_RANGES

    for r in ctx.survey_partial("survey.walk_ranges", WALK_RANGES).to_pylist():
        ends.setdefault((r["broker"], r["segment"]), [None, None])
    return {k: tuple(v) for k, v in ends.items()}


def _scan_tasks(ctx: AuditContext, segments: list[_SegmentPlan]) -> list:
    from datasources.consumequeue import GROUP_BYTES, GROUP_FILES

    from .scan import BrokerFacts, CommitlogRange, IndexScan, QueueScan, RoutedIndexFile, RoutedQueueFile
    from store_format.recovery import truncates_queues

    from .checks.index import unreadable_ranges
    from .survey import CQ_FILES, INDEX_FILES, buckets_of_row

    ends = _segment_ends(ctx)
    cq_rows = {r["path"]: r for r in ctx.survey_partial("survey.cq_files", CQ_FILES).to_pylist()}
    ix_rows = {r["path"]: r for r in ctx.survey_partial("survey.index_files", INDEX_FILES).to_pylist()}
    tasks = []
    for name, plan in ctx.plans.items():
        p = ctx.recovery.get(name)
        if p is None:
            continue  # its recovery could not be predicted: a finding says so
        stop = p.walks.get(p.stop_segment) if p.stop_segment else None
        queue_files = [RoutedQueueFile(f.loc, f.topic, f.queue_id, f.name, int(f.name) // 20,
                                       buckets_of_row(cq_rows[f.loc.path]))
                       for f in plan.cq_files if f.loc.path in cq_rows and cq_rows[f.loc.path]["entries"]]
        index_files = [RoutedIndexFile(f.loc, f.name, r["hash_slot_num"], r["index_num"], r["count"],
                                       r["begin_timestamp"], buckets_of_row(r))
                       for f in plan.index_files for r in [ix_rows.get(f.loc.path)]
                       if r is not None and r["error"] is None and (r["count"] or 0) > 1]
        problems = [(f.base or 0, f.length, kind) for f in plan.segments for kind, _ in f.problems]
        facts = BrokerFacts(
            broker=name, families=ctx.options.families, check_crc=ctx.options.check_crc,
            segment_size=plan.store.segment_size or 1, recovered_end=p.max_physical_offset, recovery_stop=stop,
            reput_from=p.max_cq_physical_offset, has_commitlog=bool(plan.store.segments),
            truncate_queues=truncates_queues(ctx.queue_starts[name].values(), p.max_physical_offset,
                                             bool(plan.store.segments))[0],
            index_pending_from=p.redispatch_from if p.redispatch_from is not None else p.max_cq_physical_offset,
            indexed=plan.has_index_dir, shift=plan.shift, commitlog_end=plan.commitlog_end,
            queue_files=queue_files, index_files=index_files, file_problems=problems,
            unverifiable=[(f, lo, hi) for f, lo, hi, _ in unreadable_ranges(
                [r for r in ix_rows.values() if r["broker"] == name])],
            delay_levels=dict(plan.store.delay_levels))
        for family in ctx.options.families:
            hook = getattr(load(family), "probes", None)
            if hook is not None:
                facts.probes[family] = hook(ctx, name)
        mine = [sp for sp in segments if sp.broker == name]
        for i, sp in enumerate(mine):
            nxt = mine[i + 1].seg.base if i + 1 < len(mine) else None
            first_stop, first_blank = ends.get((name, sp.seg.name), (None, None))
            resolved = (name, sp.seg.name) in ends
            for k, (start, end, last) in enumerate(sp.ranges):
                tasks.append(CommitlogRange(
                    facts, sp.seg.loc, sp.seg.name, sp.seg.base, sp.seg.length, start, end, last,
                    first_stop=first_stop, first_blank=first_blank,
                    crc_checked_before=(first_stop or 0) if resolved and ctx.options.check_crc else 0,
                    resolved=resolved, first_of_broker=(i == 0 and k == 0), next_base=nxt if last else None))
        if not mine:  # no segment: one task still owns every offset, so units and entries are checked

            tasks.append(_NoCommitlog(facts))
        for group in _queue_groups(plan.cq_files, GROUP_BYTES, GROUP_FILES):
            tasks.append(QueueScan(facts, group))
        for part in plan.index_files:
            tasks.append(IndexScan(facts, part))
    return tasks


@dataclass
class _NoCommitlog:
    """A broker without commitlog segments: its units and entries point at nothing."""

    facts: object

    @property
    def broker(self) -> str:
        return self.facts.broker

    def describe(self) -> str:
        return f"{self.facts.broker}: no commitlog"

    def cost(self) -> int:
        return 1

    def run(self, out) -> None:
        from store_format.commitlog import FrameArrays

        from .scan import INF, NEG_INF, RangeContext, family_module

        rc = RangeContext(self.facts, "", 0, FrameArrays.empty("", 0), None, b"", 0, NEG_INF, INF, True)
        for family in self.facts.families:
            hook = getattr(family_module(family), "in_range", None)
            if hook is not None:
                hook(rc, out)


# ---------------------------------------------------------------------------------------------------------
# The run


def run(spark, args) -> AuditResult:
    started = time.time()
    phases = _Phases()
    # to the microsecond: the trend job orders a history's runs by it, and two audits of a small dump start
    # within the same second
    run_time = dt.datetime.now(dt.timezone.utc)
    run_id = f"{run_time.strftime('%Y%m%dT%H%M%SZ')}-{uuid.uuid4().hex[:8]}"
    stores = resolve_stores(args.store)
    _prepare_outputs(args, stores)
    families = tuple(f.strip() for f in args.checks.split(",") if f.strip())
    for f in families:
        load(f)
    load_all()
    files = input_files(stores)
    total = sum(p.stat().st_size for p in files)
    progress(f"{len(stores)} store(s), {len(files)} files, {total / 2**20:.1f} MiB; checks: {', '.join(families)}")
    before = fingerprint(files, args.sha256)
    geometry = geometry_from_args(args)
    plans = {s.name: plan_broker(s, geometry) for s in stores}
    from datasources.storepaths import parse_size

    options = AuditOptions(families=families, as_of=args.as_of, check_crc=not args.no_crc,
                           message_index_safe=args.message_index_safe, segment_size=geometry.segment_size,
                           split_size=parse_size(args.split_size, 0) if args.split_size else None)
    ctx = AuditContext(spark, stores, plans, options)
    from datasources.commitlog import default_parallelism, local_master

    cores = default_parallelism(spark)
    split = scan_split_size(list(plans.values()), cores, options.split_size)
    from store_format.recovery import recovery_region

    region = {name: {s.name for s in recovery_region(plan.store, options.message_index_safe)}
              for name, plan in plans.items()}
    segments = _segment_plans(plans, split, region)
    phases.done("planning")

    out = args.out.rstrip("/")
    run = RunInfo(os.path.join(out, "findings"), run_id, run_time, tables_dir=os.path.join(out, "tables"))
    os.makedirs(run.findings_dir, exist_ok=True)
    try:
        survey = _survey_tasks(ctx, segments)
        # local mode: the tasks run in the driver's threads, on the cores the session's tasks would use, without
        # a Spark job's start (on a cluster they run where the executors are, two jobs)
        local = local_master(spark)
        where = " in the driver" if local else ""
        with Phase(f"survey ({len(survey)} task(s){where})", sum(t.cost() for t in survey),
                   None if local else spark) as phase:
            ctx.survey = run_tasks(spark, survey, cores if local else TASKS_PER_CORE * cores, RunInfo(None),
                                   in_driver=local, phase=phase)
        ctx.failures.append(ctx.survey.get("_failures", FAILURES))
        phases.done("survey")
        progress("predicting recovery")
        ctx.predict_recovery()
        phases.done("recovery prediction")
        scan = _scan_tasks(ctx, segments)
        with Phase(f"scan ({len(scan)} task(s){where})", sum(t.cost() for t in scan), None if local else spark) \
                as phase:
            ctx.scan = run_tasks(spark, scan, cores if local else TASKS_PER_CORE * cores, run, in_driver=local,
                                 phase=phase)
        ctx.failures.append(ctx.scan.get("_failures", FAILURES))
        from .checks.recovery import lost_from_scan

        lost_from_scan(ctx)
        phases.done("scan")

        results = {}
        for family in families:
            t0 = time.time()
            try:
                results[family] = load(family).on_driver(ctx)
            except Exception as e:  # a bug or input no check foresaw: every broker's results lack this family
                ctx.failures += [failure_row(s.name, f"the {family} checks", e) for s in stores]
            progress(f"{family}: {time.time() - t0:.1f}s")
        results["_failures"] = FamilyResult(findings=[_failure_findings(ctx.failures)])
        phases.done("families on the driver")

        stamp = {"run_id": run_id, "run_time": run_time}
        driver_findings = FD.concat_findings([t for r in results.values() for t in r.findings])
        progress("writing findings")
        counts = _counts(ctx, driver_findings)
        # the scan's tasks wrote theirs; the families' go beside them (always a file: the folder has a schema)
        write_parquet_file(FD.as_written(driver_findings, run_id, run_time),
                           os.path.join(run.findings_dir, "part-driver.parquet"))
        Path(run.findings_dir, "_SUCCESS").touch()
        phases.done("writing findings")
        metrics = FD.concat_metrics([t for r in results.values() for t in r.metrics])
        _write_arrow(_stamp_arrow(metrics, stamp), f"{out}/metrics")
        tables = {name: t for r in results.values() for name, t in r.tables.items()}
        for name, t in tables.items():
            _write_arrow(t, f"{out}/tables/{name}")
        # the messages to re-send: the scan's tasks wrote the dropped and unindexed ones; the damaged ones go beside
        resend.write_damaged(ctx.partial("resend.damaged", resend.DAMAGED).to_pylist() + ctx.resend_damaged,
                             f"{out}/tables/{resend.NAME}")
        Path(out, "tables", resend.NAME, "_SUCCESS").touch()
        if args.history:
            progress(f"appending to the history at {args.history}")
            append_history(spark.read.parquet(f"{out}/findings"), f"{args.history.rstrip('/')}/findings")
            append_history(spark.read.parquet(f"{out}/metrics"), f"{args.history.rstrip('/')}/metrics")
        phases.done("writing metrics, tables, history")

        from .checks import recovery as recovery_family

        recovery = recovery_family.summary(ctx)
        progress("grouping findings by cause")
        groups = group_findings(run.findings_dir)
        add_times(groups, ctx.store_times)
        message_counts = _broker_metric(metrics, "message_count")
        after = fingerprint(files, args.sha256)
        if after != before:
            changed = sorted(k for k in set(before) | set(after) if before.get(k) != after.get(k))
            raise OutputError(f"input files changed during the audit (chain of custody broken): {changed[:5]}")
        summary = {
            "tool": TOOL, "version": _version(), "run_id": run_id, "run_time": run_time.isoformat(),
            "elapsed_seconds": round(time.time() - started, 1), "checks": list(families),
            "inputs": [{"path": p, **v} for p, v in before.items()],
            "counts": {"error": counts["severity"].get("error", 0), "warning": counts["severity"].get("warning", 0),
                       "info": counts["severity"].get("info", 0), "per_check": counts["per_check"]},
            "brokers": [{"name": s.name, "path": s.path, "geometry": _geometry(plans[s.name]),
                         "as_of": ctx.as_of.get(s.name), "recovery": recovery.get(s.name)} for s in stores],
            "groups": len(groups),
            "outputs": {"findings": f"{out}/findings", "metrics": f"{out}/metrics",
                        **{f"tables/{n}": f"{out}/tables/{n}" for n in [*tables, resend.NAME]},
                        "report": None if args.no_report else f"{out}/report.html"},
        }
        for b in summary["brokers"]:
            b["verdict"] = broker_verdict(b, groups, out, message_counts.get(b["name"]))
        summary["counts"].update(terminal.counts(summary, groups))
        (Path(out) / "summary.json").write_text(json.dumps(summary, indent=2, sort_keys=False, default=str))
        if not args.no_report:
            progress("rendering report.html")
            from . import report

            report.write(ctx, summary, tables, groups, out, top=args.top)
        phases.done("summary and report")
    finally:
        ctx.release()

    code = cli.EXIT_NOTHING if summary["counts"]["error"] else cli.EXIT_OK
    progress(f"done in {time.time() - started:.1f}s")
    if getattr(args, "profile", False):
        _print_profile(ctx, phases)
    # stdout: each broker's first screen in words, then one line (--quiet: the line; --format json: JSON)
    return AuditResult(terminal.render(summary, getattr(args, "format", "text"), getattr(args, "quiet", False), code),
                       code, out=out, summary_data=summary, phases=phases.times, line=terminal.final_line(summary))


def _failure_findings(failures: list[pa.Table]) -> pa.Table:
    """``broker.audit_failed`` for every task or step that failed: what, the error, and where in the code."""
    t = pa.concat_tables([f for f in failures if f.num_rows]) if any(f.num_rows for f in failures) else None
    if t is None:
        return FD.empty_findings()
    return FD.finding_table("broker.audit_failed", t.num_rows, broker=t.column("broker"),
                            values={"what": t.column("what"), "error": t.column("error")},
                            details={"what": t.column("what"), "error": t.column("error"), "where": t.column("where")})


def _counts(ctx: AuditContext, driver_findings: pa.Table) -> dict:
    """Findings per severity and per check: the scan tasks counted theirs (the ``_counts`` partial)."""
    from .tasks import COUNTS

    rows = ctx.partial("_counts", COUNTS).to_pylist()
    for check, sev in zip(driver_findings.column("check").to_pylist(), driver_findings.column("severity").to_pylist()):
        rows.append({"check": check, "severity": sev, "count": 1})
    per: dict[tuple, int] = {}
    for r in rows:
        per[(r["check"], r["severity"])] = per.get((r["check"], r["severity"]), 0) + r["count"]
    severity: dict[str, int] = {}
    for (_, sev), n in per.items():
        severity[sev] = severity.get(sev, 0) + n
    per_check = {c: {"severity": s, "count": n} for (c, s), n in sorted(per.items())}
    return {"severity": severity, "per_check": per_check}


def _broker_metric(metrics: pa.Table, metric: str) -> dict[str, int]:
    """A broker-scope metric per broker."""
    out = {}
    for r in metrics.filter(pc.equal(metrics.column("metric"), metric)).to_pylist():
        if r["scope"] == "broker" and r["value"] is not None:
            out[r["broker"]] = int(r["value"])
    return out


def _stamp_arrow(t: pa.Table, stamp: dict) -> pa.Table:
    n = t.num_rows
    return pa.Table.from_arrays(
        [pa.repeat(pa.scalar(stamp["run_id"]), n), pa.repeat(pa.scalar(stamp["run_time"], pa.timestamp("us", "UTC")), n)]
        + list(t.columns), names=["run_id", "run_time"] + t.column_names)


def _write_arrow(t: pa.Table, path: str) -> None:
    """A small table as a Parquet folder (one part file), as Spark would lay it out."""
    os.makedirs(path, exist_ok=True)
    write_parquet_file(t, os.path.join(path, "part-00000.parquet"))
    Path(path, "_SUCCESS").touch()


def _geometry(plan: BrokerPlan) -> dict:
    st = plan.store
    segs = st.segments
    return {"segment_size": st.segment_size, "segments": len(segs),
            "first_segment": segs[0].name if segs else None, "last_segment": segs[-1].name if segs else None,
            "consume_queue_file_size": st.consume_queue_file_size, "queues": len(st.queues),
            "index_files": len(st.index_paths())}


def _print_profile(ctx: AuditContext, phases: _Phases) -> None:
    from jobs import session

    lines = ["where the time went (wall clock):"]
    if session.last_start_seconds is not None:
        lines.append(f"  {'(Spark session start, before it)':<34} {session.last_start_seconds:7.2f} s")
    lines += [f"  {name:<34} {secs:7.2f} s" for name, secs in phases.times]
    lines.append(f"  {'the audit in all':<34} {sum(s for _, s in phases.times):7.2f} s")
    for stage, outputs in (("survey", ctx.survey), ("scan", ctx.scan)):
        t = outputs.partials.get("_timing")
        if t is None or not t.num_rows:
            continue
        rows = sorted(t.to_pylist(), key=lambda r: -r["seconds"])
        by_kind: dict[str, list] = {}
        for r in rows:
            by_kind.setdefault(r["kind"], []).append(r["seconds"])
        lines.append(f"  {stage} tasks: " + "; ".join(f"{k} x{len(v)} {sum(v):.2f} s" for k, v in by_kind.items()))
        for r in rows[:5]:
            lines.append(f"    {r['seconds']:7.2f} s  {r['kind']} {r['name']}")
    print("\n".join(lines), file=sys.stderr, flush=True)


def _version() -> str:
    try:
        from importlib.metadata import version

        return version(TOOL)
    except Exception:  # running from a zip on --py-files: no installed metadata
        return "unknown"


def _prepare_outputs(args, stores) -> None:
    """--out prepared and --history checked, both apart from every input (as given and as resolved)."""
    from jobs.output import check_apart

    inputs = list(args.store) + [s.path for s in stores]
    if args.history:
        check_apart(args.history, inputs, what="history")
        check_apart(args.history, [args.out], what="history")
    prepare_output(args.out, overwrite=args.overwrite, inputs=inputs, job="audit")


def _prepare(args) -> None:
    geometry_from_args(args)  # a broker.conf that cannot be used fails before Spark starts
    _prepare_outputs(args, resolve_stores(args.store))  # the inputs resolved (checked) first
    _load_in_background()


def _load_in_background() -> None:
    """The compiled kernels (numba's import and disk cache: about a second) and the checks loaded while the
    Spark session starts, which is mostly waiting for the JVM; the first task that needs them waits for the
    import still under way (Python's import lock), and a failure is that task's to report."""
    import threading

    def load_kernels():
        try:
            from udfs.kernels import _compiled

            _compiled()
            load_all()
        except Exception:  # noqa: BLE001 - the task that imports them reports it, with its broker
            pass

    threading.Thread(target=load_kernels, name="audit-load-kernels", daemon=True).start()


def main(argv=None, prog: str | None = None) -> int:
    # the audit's tasks read the store themselves (jobs/audit/tasks.py): no data source to register
    return cli.main(NAME, build_parser, run, argv, prepare=_prepare, prog=prog, sources=False)
