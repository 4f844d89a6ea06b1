"""audit: everything wrong with one or more broker dumps, found, located and explained.

  rocketmq-forensics audit --store PATH|NAME=PATH [...] --out DIR [--history DELTA_DIR] [--state DIR] [--sha256]
                           [--overwrite]
  python -m jobs.audit ...   or   spark-submit --py-files dist/rocketmq_forensics.zip jobs/audit/__main__.py ...

Reads every store (read-only) and runs the check families of jobs/audit/checks/ (framing and integrity, the
broker's recovery predicted, CommitLog <-> ConsumeQueue, CommitLog <-> IndexFile, consumer lag, transactions,
delays, 5.x timer messages and POP consumption, retries and DLQ, metadata; a family for structures no store of the
dump has does not run), then writes to DIR:

  findings/      Parquet, one row per finding (check, severity, broker, file, file_position, physical_offset,
                 topic, queue_id, queue_offset, message, details, stable finding_id)
  metrics/       Parquet, long format (broker, scope, topic, queue_id, group, metric, value)
  tables/<name>/ Parquet detail tables: segments, queues, lag, transactions, delays, timers and pop (5.x), retries,
                 dlq, and resend (the messages to re-send: damaged, destroyed, dropped by recovery, in no consume
                 queue, or kept damaged; jobs/audit/resend.py)
  partials/<name>/ Parquet, the survey's and scan's partial tables that grow with the messages (retries' hops,
                 the transactions' records, the pending delayed messages, timer and POP records), one part per task
                 (tasks.Emitter.spill): what the driver's families read;
                 consumer_offsets/: a consumerOffset.json of more offsets than memory holds whole
                 (ROCKETMQ_CONFIG_OFFSETS_LIMIT), streamed by the driver and read back a batch at a time;
                 lag_metrics/: then lag's group metrics (two a topic@group), written a slice at a time and copied
                 into metrics/; _findings/: while the families run, their findings that grow with the messages
                 (open transactions, overdue delays, dead letters), copied into findings/ and removed
  summary.json   tool version, run time, inputs, geometry, counts per severity and per check, and per broker its
                 recovery and its verdict (jobs/audit/verdict.py: will it start, the cut, what is lost, what to do)
  report.html    one self-contained page: per broker, in words, will it start, where recovery cuts, what is lost and
                 what to do first, the messages to re-send; a fleet table for several brokers; the findings
                 grouped by cause; lag/transaction/delay tables, plots

DIR and HISTORY are local paths or URIs (written through store_format.fs: a cluster needs no shared mount).
DIR is claimed before any work (a second run on it is refused, naming the first), written beside itself and
made visible in one step when the run succeeds (runtime/commit.py): a failed or interrupted run leaves the
previous output as it was.  With --history, findings and metrics are also appended to the Delta tables
HISTORY/findings and HISTORY/metrics, and the run is listed in HISTORY/runs once its output is committed
(runtime/history.py: checked before the audit starts, a damaged history refused naming the file; appended only once
every check passed, chain of custody included; a run killed on the way is settled by the next one; jobs/trend.py
reads only the committed runs).  Exit codes: 0 no error findings, 1 error findings, 2 the audit could not run.  Progress goes to stderr, one line per phase (--quiet: none); --profile adds where the
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
import contextlib
import gc
import json
import sys
import threading
import time
from contextlib import contextmanager
from dataclasses import dataclass, field

import pyarrow as pa
import pyarrow.compute as pc

from decoding.kernels import release_freed_memory
from runtime import cli
from jobs.extract import parse_time
from runtime.commit import delete, job_run, runs_job
from runtime.history import claim_history
from runtime.output import OutputError, out_join, out_makedirs, out_write, prepare_output, write_parquet_file
from runtime.progress import Phase, say
from runtime.session import EXECUTORS, choose_executor
from store_format.interrupts import run_beside
from store_format.fs import Location, let_go_of_listings, listings_of_the_run, resolve, run_listings_for
from store_format.fs.zero_tails import ZeroTails, zero_tails_of_the_run
from store_format.consumequeue import RunReads, reads_of_the_run
from store_format.brokerconf import add_geometry_arguments, geometry_from_args, recovery_settings_from_args, \
    size_argument

from . import findings as FD
from . import resend, terminal
from . import checks
from .checks import FAMILIES, load_all
from .contract import FamilyResult, WrittenTable
from .context import AuditContext, AuditOptions
from .groups import add_times, group_findings
from runtime.stores import resolve_stores

from runtime.custody import input_files, watch
from .plan import MAX_FILES, MAX_SEGMENTS, BrokerPlan, plan_broker, plan_segments
from .scan import scan_tasks
from .kept import keep_files, keep_queue_surveys, keep_ranges, resume_queue_surveys
from .state import AuditState, check_apart_from
from .survey import survey_tasks
from .tasks import FAILURES, ExecutorWarmUp, RunInfo, failure_row, run_tasks
from .verdict import RunTables, verdict as broker_verdict

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
    p.add_argument("--history", metavar="DELTA_DIR", type=cli.location_argument,
                   help="also append findings and metrics to the Delta tables DELTA_DIR/findings and "
                        "DELTA_DIR/metrics once every check passed, and list the run in DELTA_DIR/runs once its "
                        "output is committed (for `rocketmq-forensics trend` and the lag-over-time notebook); a "
                        "DELTA_DIR that is not an audit history, or a damaged one, is refused before the audit "
                        "starts, naming the file")
    p.add_argument("--state", metavar="DIR", type=cli.location_argument,
                   help="a folder kept between scheduled audits of the same brokers: each run "
                        "compares every file with the last run's look at it (a file whose written bytes changed is "
                        "a history.rewritten error, a file gone a history.disappeared finding) and each broker's "
                        "verdict with the last one (summary.json's brokers[].since_last_run, the report), then "
                        "keeps its own look there.  Missing or damaged: no comparison this run, a warning, and the "
                        "state written anew; a folder that is not an audit state is left as it is")
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
    add_geometry_arguments(p, segment_size=True, recovery=True)
    p.add_argument("--split-size", type=size_argument, metavar="SIZE",
                   help="cut commitlog segments into ranges of this size, one task each (e.g. 128m; default: about "
                        "three ranges per core, 32m to 64m: a task's memory is about twice its range)")
    p.add_argument("--max-files", type=cli.count_argument, default=MAX_FILES, metavar="N",
                   help=f"the most files read of each consume-queue folder of a broker (default {MAX_FILES:,}: each "
                        "costs the driver 3-5 KB, sized for a 24 GB machine); past it the first whole queues in name "
                        "order are audited, and a broker.files_skipped finding names the folder and what was skipped")
    p.add_argument("--max-segments", type=cli.count_argument, default=MAX_SEGMENTS, metavar="N",
                   help=f"the most files read of a broker's commitlog/ (default {MAX_SEGMENTS:,}: each costs the "
                        "driver about 26 KB); past it the newest are audited, and a broker.files_skipped finding "
                        "names the folder and what was skipped")
    p.add_argument("--top", type=cli.count_argument, default=200,
                   help="finding groups listed in the report (default 200; tables/ and findings/ keep them all)")
    p.add_argument("--no-report", action="store_true", help="skip report.html")
    p.add_argument("--format", choices=("text", "json"), default="text",
                   help="what stdout gets: text (default), each broker's verdict in words (will it start, the cut, "
                        "the messages lost, what to do first, with the command) and one line; json, the same as "
                        "one JSON object for machines.  With --quiet, text is the one line")
    p.add_argument("--executor", choices=EXECUTORS, default="auto",
                   help="where the audit's tasks run: in this process's threads, one per core (driver), or as two "
                        "Spark jobs (spark); auto (the default): driver for a local[N] session, spark over Spark "
                        "Connect, and on a cluster spark begun in the driver's threads while the executors start (a "
                        "Spark job of its own loads their kernels meanwhile; the tasks not started once it is done "
                        "go to the executors)")
    p.add_argument("--profile", action="store_true",
                   help="print where the time went: each phase, the slowest tasks of each stage, and for a stage "
                        "run as a Spark job its fixed cost (executors, Python workers, task shipping, kernel load)")
    return p


progress = say  # one line on stderr per step (runtime/progress.py: not with --quiet)


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
# The run


_held = {"runs": 0, "thresholds": None}
_held_lock = threading.Lock()


@contextmanager
def _full_collections_held():
    """The cyclic garbage collector's full collections held off while audits run in this process (its young ones
    go on).  What a run holds lives as long as the run (the plans and their listings: objects for each of 50,000
    queue files), and each full collection walked every one of them again, holding the GIL: 13 collections took
    2.4-3.2 s of a 40,000-queue audit of 22-24 s.  Garbage in reference cycles that outlives the young collections
    waits for the run's end; anything freed by its references goes at once, as before.  Concurrent runs in one
    process share the hold: the first raises the threshold, the last puts it back."""
    with _held_lock:
        if _held["runs"] == 0:
            _held["thresholds"] = gc.get_threshold()
            young, middle, _ = _held["thresholds"]
            gc.set_threshold(young, middle, 1 << 30)
        _held["runs"] += 1
    try:
        yield
    finally:
        with _held_lock:
            _held["runs"] -= 1
            if _held["runs"] == 0:
                gc.set_threshold(*_held["thresholds"])


@runs_job(NAME)
def run(spark, args) -> AuditResult:
    # the store's folders scanned once for the walks before the scan (custody, unreadable entries, queue listing,
    # recovery's load rules: 40,000 queues' 45,000 folders each time), as many as --max-files lets the run hold; the
    # commit's custody check looks afresh
    listings = run_listings_for(getattr(args, "max_files", MAX_FILES))
    # where a preallocated file's zeros begin, searched once for the state's look and the walks in this process
    with _full_collections_held(), listings_of_the_run(listings), zero_tails_of_the_run(ZeroTails()), \
            _executors_warmed(spark, args) as warming:
        return _audit(spark, args, warming)


@contextlib.contextmanager
def _executors_warmed(spark, args):
    """``auto`` on a cluster: the executors' Python workers and kernels brought up by a Spark job of their own
    (jobs/audit/tasks.py ``ExecutorWarmUp``) while the driver plans and begins the first stages in its threads
    (``_run_driver_first``): a cluster's executors take seconds to start, which the survey of a gigabyte spent
    waiting.  Yields it (None otherwise: ``--executor spark`` runs every task on the executors); a run the driver
    ended first does not wait for it."""
    from runtime.session import is_connect

    requested, warming = getattr(args, "executor", "auto"), None
    if requested == "auto" and not is_connect(spark):
        executor = choose_executor(spark, requested)
        warming = ExecutorWarmUp(spark, executor.cores) if executor.where == "spark" else None
    try:
        yield warming
    finally:
        if warming is not None:
            warming.stop()


def _audit(spark, args, warming: ExecutorWarmUp | None = None) -> AuditResult:
    started = time.time()
    phases = _Phases()
    # the run's id and time are its claim's (runtime/commit.py): to the microsecond, since the trend job orders a
    # history's runs by it, and two audits of a small dump start within the same second
    job = job_run(NAME)
    run_time, run_id = job.started, job.run_id
    stores = resolve_stores(args.store)
    staged, history, state = _prepare_outputs(args, stores)  # claimed (again: the same claims), beside --out
    names = tuple(f.strip() for f in args.checks.split(",") if f.strip())
    families = checks.selected(names)
    load_all()
    # every input file's size and mtime, as listed (one walk, a stat a file); checked again as the last gate of the
    # commit: the stores listed again (added, removed, replaced, changed)
    custody = watch(job, stores, sha256=args.sha256)
    before = custody.before
    total = sum(f["size"] for f in before.values())
    progress(f"{len(stores)} store(s), {len(before)} files, {total / 2**20:.1f} MiB; checks: {', '.join(names)}")
    if state is not None:  # each file against the last run's look at it (jobs/audit/state.py)
        state.compare(stores, input_files(stores))  # Paths (a path per input file, not held through the run)
    geometry = geometry_from_args(args)
    plans = {s.name: plan_broker(s, geometry, args.max_files, args.max_segments) for s in stores}
    families = [f for f in families if f.applies is None or any(f.applies(p) for p in plans.values())]
    names = tuple(n for n in names if n in {f.name for f in families})  # the families run (summary.json "checks")
    options = AuditOptions(families=names, as_of=args.as_of, check_crc=not args.no_crc,
                           message_index_safe=args.message_index_safe, segment_size=geometry.segment_size,
                           split_size=args.split_size,
                           executor=getattr(args, "executor", "auto"), recovery=recovery_settings_from_args(args))
    ctx = AuditContext(spark, stores, plans, options, families)
    executor = choose_executor(spark, options.executor)
    # with a state, segments are cut on a fixed grid: a segment written further keeps its earlier ranges' kept parts
    keeping = state is not None and state.output is not None
    ctx.state = state if keeping else None
    # (the newest segment's written end: its zeros were searched by the state's look, fs/zero_tails.py)
    segments = plan_segments(plans, executor.cores, options.split_size, options.message_index_safe, grid=keeping)
    phases.done("planning")

    out = args.out  # where the run's outputs will be, once committed (summary, report, messages): as typed
    # every file of the run goes through the fs seam (runtime/output.py out_*): a local path or a URI, written by the
    # tasks wherever they run (no shared mount needed)
    run = RunInfo(out_join(staged, "findings"), run_id, run_time, tables_dir=out_join(staged, "tables"),
                  partials_dir=out_join(staged, "partials"))
    ctx.tables_dir, ctx.partials_dir = run.tables_dir, run.partials_dir
    out_makedirs(run.findings_dir)
    # the small queue files the run's tasks read here (this process) read once for all of them
    with reads_of_the_run(RunReads() if executor.where == "driver" else None):
        try:
            surveyed = survey_tasks(ctx, segments)
            queue_rows = {}
            if state is not None:  # the segment walks of files the same since the last run: given back; queue files
                surveyed = state.keep(surveyed, "survey")  # the same or grown: their rows gone on from
                queue_rows = resume_queue_surveys(state, surveyed, families)
            ctx.survey = _stage(spark, "survey", surveyed, executor,
                                RunInfo(None, partials_dir=run.partials_dir), warming)  # no findings; spilled
            keep_queue_surveys(state, ctx, queue_rows)
            ctx.failures.append(ctx.survey.get("_failures", FAILURES))
            phases.done("survey")
            progress("predicting recovery")
            ctx.predict_recovery()
            for family in families:  # walks of the whole tree while its folders are listed (40,000 queues: 0.8 s)
                if family.while_listed is not None:
                    family.while_listed(ctx)
            let_go_of_listings()  # the last walk of the store's tree before the scan: not held through its peak
            phases.done("recovery prediction")
            scanned = scan_tasks(ctx, segments, cells=keeping)
            # what making the tasks freed (the families' probes: the delays' read every pending message's key, ~130
            # MiB at 16 GiB): Arrow's pages, which the scan's numpy arrays could not reuse, added to its peak
            release_freed_memory()
            if state is not None:  # ranges whose bytes, and all they read of the store, are as the last
                # run's, and index files the same: given back; a grown index file's check goes on from the last
                scanned = keep_files(state, keep_ranges(state, scanned))
            ctx.scan = _stage(spark, "scan", scanned, executor, run, warming)
            del scanned
            if state is not None:
                state.count_given_back("scan", ctx.scan)
            ctx.failures.append(ctx.scan.get("_failures", FAILURES))
            for family in families:
                if family.after_scan is not None:
                    family.after_scan(ctx)
            phases.done("scan")
            results = _finish(ctx)
            if state is not None:
                results.append(FamilyResult(findings=state.findings()))
            phases.done("families on the driver")
            written = _write_outputs(ctx, results, run, staged)
            phases.done("writing findings, metrics, tables")

            progress("grouping findings by cause")
            groups = group_findings(run.findings_dir)
            add_times(groups, ctx.store_times)
            summary = _summary(ctx, written, groups, before, out, started, run_id, run_time,
                               None if args.no_report else out.child("report.html").as_typed, staged)
            if state is not None:
                state.since_last_run(summary)
            out_write(out_join(staged, "summary.json"), json.dumps(summary, indent=2, sort_keys=False, default=str))
            if not args.no_report:
                progress("rendering report.html")
                from . import report

                report.write(ctx, summary, {**written.tables, **written.streamed}, groups, out, top=args.top,
                             staged=staged)
            if state is not None:  # committed after the output (jobs/audit/state.py StateOutput)
                state.write(summary, written.tables.get("segments"))
            if history is not None:  # appended at the commit, after every check of the run (custody included)
                history.stage(run.findings_dir, out_join(staged, "metrics"), out)
            # what the commit checks arrived in the staging before it commits anything
            job.find(args.out).expect("summary.json", "findings", "metrics",
                                      *([] if args.no_report else ["report.html"]))
            phases.done("summary and report")
        except OutputError:  # the custody check's own (or the output's): nothing more to compare
            raise
        except Exception:  # a file that vanished mid-run fails a step: custody names why, not the step
            custody.check()
            raise
        finally:
            ctx.release()

    code = cli.EXIT_NOTHING if summary["counts"]["error"] else cli.EXIT_OK
    progress(f"done in {time.time() - started:.1f}s")
    if getattr(args, "profile", False):
        _print_profile(ctx, phases, warming)
    # stdout: each broker's first screen in words, then one line (--quiet: the line; --format json: JSON)
    return AuditResult(terminal.render(summary, getattr(args, "format", "text"), getattr(args, "quiet", False), code),
                       code, out=out.as_typed.rstrip("/"), summary_data=summary, phases=phases.times,
                       line=terminal.final_line(summary))


def _stage(spark, name: str, tasks: list, executor, run: RunInfo, warming: ExecutorWarmUp | None = None):
    """One stage's tasks run where the executor says (begun in the driver while ``warming`` is under way), with a
    progress line (runtime/progress.py)."""
    where = " in the driver" if executor.where == "driver" else ""
    if warming is not None and not warming.ready.is_set():
        where = ", begun in the driver while the executors start"
    with Phase(f"{name} ({len(tasks)} task(s){where})", sum(t.cost() for t in tasks),
               spark if executor.where == "spark" else None) as phase:
        try:
            return run_tasks(spark, tasks, executor, run, phase=phase, warming=warming)
        finally:
            release_freed_memory()  # the tasks' temporaries, when they ran in the driver


def _finish(ctx: AuditContext) -> list[FamilyResult]:
    """Every family's ``on_driver``, their results in the families' order; a family that fails is a finding for every
    broker.  Each family that runs ``beside`` the others (transactions and retries: the two that grow with the
    messages) runs in a thread of its own meanwhile: the driver's cores are idle once the scan is done, and their
    work is mostly Arrow's, Parquet's and numpy's, which release the GIL.  An interrupt reaches the main thread
    only: it stops the families beside at their next batch or bucket (store_format.interrupts.check_beside), and
    the run waits for that, not for their end."""
    import contextvars
    from concurrent.futures import ThreadPoolExecutor

    def one(family):
        t0 = time.time()
        try:
            return family.on_driver(ctx), None
        except Exception as e:  # a bug or input no check foresaw: every broker's results lack this family
            return None, e
        finally:
            release_freed_memory()  # what the family freed: the next one's high water is not added to it
            progress(f"{family.name}: {time.time() - t0:.1f}s")

    families = [f for f in ctx.families if f.on_driver is not None]
    caller = contextvars.copy_context()  # what the run set for its readers, in the thread too
    stop = threading.Event()  # set when the main thread is interrupted: the families beside stop at their next step
    with ThreadPoolExecutor(max(1, sum(f.beside for f in families))) as beside:
        try:
            ran = {f.name: beside.submit(caller.copy().run, run_beside, stop, one, f) for f in families if f.beside}
            own = {f.name: one(f) for f in families if not f.beside}
            done = [ran[f.name].result() if f.beside else own[f.name] for f in families]
        except BaseException:
            stop.set()
            raise
    results = []
    for family, (result, e) in zip(families, done):
        if e is None:
            results.append(result)
        else:
            ctx.failures += [failure_row(s.name, f"the {family.name} checks", e) for s in ctx.stores]
    # the families' table files, each closed beside the families after it: a file that cannot be written to its end
    # fails the run, as any output's write does
    ctx.tables_closed()
    results.append(FamilyResult(findings=[_failure_findings(ctx.failures), _skipped_findings(ctx)]))
    return results


@dataclass
class _Written:
    """What the run wrote, for the summary and the report."""

    counts: dict
    metrics: pa.Table
    tables: dict[str, pa.Table]
    streamed: dict[str, WrittenTable] = field(default_factory=dict)  # tables their families wrote


def _write_outputs(ctx: AuditContext, results: list[FamilyResult], run: RunInfo, out: Location) -> _Written:
    """The families' findings beside the scan tasks' (always a file: the folder has a schema), the metrics, the
    detail tables and the messages to re-send, into ``out`` (the run's staging)."""
    progress("writing findings")
    counts = _counts(ctx, _write_driver_findings([t for r in results for t in r.findings], run))
    if ctx.findings_spool is not None:  # copied: not an output of its own
        delete(resolve(ctx.findings_spool))
    out_write(out_join(run.findings_dir, "_SUCCESS"), b"")
    metrics = _write_metrics([t for r in results for t in r.metrics], {"run_id": run.run_id, "run_time": run.run_time},
                             out_join(out, "metrics"))
    tables = {name: t for r in results for name, t in r.tables.items() if not isinstance(t, WrittenTable)}
    for name, t in tables.items():
        _write_arrow(t, out_join(out, "tables", name))
    streamed = {name: t for r in results for name, t in r.tables.items() if isinstance(t, WrittenTable)}
    for name in streamed:  # its family wrote its part file, batch by batch
        out_write(out_join(out, "tables", name, "_SUCCESS"), b"")
    # the messages to re-send: the scan's tasks wrote the dropped and unindexed ones; the damaged and destroyed ones
    # go beside (a damaged one before the cut is kept, damaged)
    resend.write_driver_part(ctx.resend_damaged, out_join(out, "tables", resend.NAME),
                             {name: p.max_physical_offset for name, p in ctx.recovery.items()}, ctx.resend_tables)
    out_write(out_join(out, "tables", resend.NAME, "_SUCCESS"), b"")
    return _Written(counts, metrics, tables, streamed)


def _summary(ctx: AuditContext, written: _Written, groups: list, inputs: dict, out: Location, started: float,
             run_id: str, run_time, report: str | None, staged: Location | None = None) -> dict:
    counts = written.counts
    brokers = [{"name": s.name, "path": s.path.as_typed, "geometry": _geometry(ctx.plans[s.name]),
                "as_of": ctx.as_of.get(s.name)} for s in ctx.stores]
    for family in ctx.families:  # what the families add to each broker (the predicted recovery)
        if family.summary is not None:
            found = family.summary(ctx)
            for b in brokers:
                b.update(found.get(b["name"], {}))
    summary = {
        "tool": TOOL, "version": _version(), "run_id": run_id, "run_time": run_time.isoformat(),
        "elapsed_seconds": round(time.time() - started, 1), "checks": list(ctx.options.families),
        "inputs": [{"path": p, **v} for p, v in inputs.items()],
        "counts": {"error": counts["severity"].get("error", 0), "warning": counts["severity"].get("warning", 0),
                   "info": counts["severity"].get("info", 0), "per_check": counts["per_check"]},
        "brokers": brokers,
        "groups": len(groups),
        "outputs": {"findings": out.child("findings").as_typed, "metrics": out.child("metrics").as_typed,
                    **{f"tables/{n}": out.child("tables").child(n).as_typed for n in [*written.tables,
                                                                                      *written.streamed, resend.NAME]},
                    "report": report},
    }
    message_counts = _broker_metric(written.metrics, "message_count")
    tables = RunTables(staged or out)
    for b in brokers:
        b["verdict"] = broker_verdict(b, groups, out, message_counts.get(b["name"]), staged, tables)
    summary["counts"].update(terminal.counts(summary, groups))
    return summary


def _failure_findings(failures: list[pa.Table]) -> pa.Table:
    """``broker.audit_failed`` for every task or step that failed: what, the error, and where in the code."""
    t = pa.concat_tables([f for f in failures if f.num_rows]) if any(f.num_rows for f in failures) else None
    if t is None:
        return FD.empty_findings()
    return FD.finding_table("broker.audit_failed", t.num_rows, broker=t.column("broker"),
                            values={"what": t.column("what"), "error": t.column("error")},
                            details={"what": t.column("what"), "error": t.column("error"), "where": t.column("where")})


_LIMIT_OPTION = {"commitlog": "--max-segments"}  # the option limiting a part folder's listing (else --max-files)


def _skipped_findings(ctx: AuditContext) -> pa.Table:
    """``broker.files_skipped`` for every part folder of a broker listed past --max-files (--max-segments): its files,
    how many were not read and which (store_format.rolled.Skipped)."""
    rows = [dict(broker=name, file=s.folder,
                 values={"files": s.files, "option": _LIMIT_OPTION.get(s.part, "--max-files"), "limit": s.most,
                         "skipped": s.skipped, "what": s.what},
                 details={"part": s.part, "files": s.files, "skipped": s.skipped, "what": s.what, "limit": s.most})
            for name, plan in ctx.plans.items() for s in plan.store.skipped]
    return FD.finding_rows("broker.files_skipped", rows)


def _write_driver_findings(found: list, run: RunInfo) -> list[dict]:
    """The families' findings, in order, as findings/part-driver.parquet, a batch at a time (a family's spooled
    findings, a WrittenTable: AuditContext.findings_writer, read back a row group at a time): the driver holds one
    batch of them, never all.  Their counts per (check, severity), as rows."""
    from runtime.output import out_parquet_writer, out_parts_batches

    path = out_join(run.findings_dir, "part-driver.parquet")
    counted: list[pa.Table] = []
    writer = out_parquet_writer(path, FD.FINDINGS_FILE_SCHEMA)
    try:
        for item in found:
            batches = out_parts_batches(list(item.paths), FD.FINDING_SCHEMA) if isinstance(item, WrittenTable) \
                else [item]
            for t in batches:
                if not t.num_rows:
                    continue
                written = FD.as_written(t.cast(FD.FINDING_SCHEMA), run.run_id, run.run_time)
                writer.write_table(written.cast(writer.schema))
                counted.append(t.group_by(["check", "severity"], use_threads=False).aggregate([("check", "count")]))
    finally:
        writer.close()
    if not counted:
        return []
    return [{"check": c, "severity": s, "count": n} for c, s, n in zip(*(
        pa.concat_tables(counted).column(k).to_pylist() for k in ("check", "severity", "check_count")))]


def _counts(ctx: AuditContext, driver_counts: list[dict]) -> dict:
    """Findings per severity and per check: the scan tasks counted theirs (the ``_counts`` partial), the driver's
    were counted as they were written (:func:`_write_driver_findings`)."""
    from .tasks import COUNTS

    rows = ctx.partial("_counts", COUNTS).to_pylist() + driver_counts
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


def _write_metrics(parts: list, stamp: dict, path: Location) -> pa.Table:
    """The families' metrics, in their order, as one Parquet part: tables, and files a family wrote batch by batch
    (WrittenTable: a row per map of a spilled consumerOffset.json, issue 40) copied in a batch at a time.  Returns
    the metrics held in memory (the files' rows are not read back)."""
    held = FD.concat_metrics([t for t in parts if not isinstance(t, WrittenTable)])
    if not any(isinstance(t, WrittenTable) for t in parts):
        _write_arrow(_stamp_arrow(held, stamp), path)
        return held
    from runtime.output import out_parquet_batches, out_parquet_writer

    schema = _stamp_arrow(FD.METRIC_SCHEMA.empty_table(), stamp).schema
    with out_parquet_writer(out_join(path, "part-00000.parquet"), schema) as w:
        for t in parts:
            tables = [t] if not isinstance(t, WrittenTable) else \
                (pa.Table.from_batches([b]) for path in t.paths for b in out_parquet_batches(path))
            for table in tables:
                if table.num_rows:
                    w.write_table(_stamp_arrow(table, stamp).cast(schema))
    out_write(out_join(path, "_SUCCESS"), b"")
    return held


def _write_arrow(t: pa.Table, path: Location) -> None:
    """A small table as a Parquet folder (one part file), as Spark would lay it out."""
    write_parquet_file(t, out_join(path, "part-00000.parquet"))
    out_write(out_join(path, "_SUCCESS"), b"")


def _geometry(plan: BrokerPlan) -> dict:
    st = plan.store
    segs = st.segments
    return {"segment_size": st.segment_size, "segments": len(segs),
            "first_segment": segs[0].name if segs else None, "last_segment": segs[-1].name if segs else None,
            "consume_queue_file_size": st.consume_queue_file_size, "queues": _queue_count(st),
            "index_files": len(st.index_paths())}


def _queue_count(store) -> int:
    """The queues the broker loads, of every backend (files, batch, a database), a queue two backends
    hold (a store migrating) once."""
    from store_format.queues import shared_queues

    return len(store.queue_models) - len(shared_queues(store.queue_models))


def _print_profile(ctx: AuditContext, phases: _Phases, warming: ExecutorWarmUp | None = None) -> None:
    from runtime import session

    lines = ["where the time went (wall clock):"]
    if session.last_start_seconds is not None:
        lines.append(f"  {'(Spark session start, before it)':<34} {session.last_start_seconds:7.2f} s")
    lines += [f"  {name:<34} {secs:7.2f} s" for name, secs in phases.times]
    lines.append(f"  {'the audit in all':<34} {sum(s for _, s in phases.times):7.2f} s")
    lines.append(_kernel_line())
    lines += _warm_up_lines(warming)
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
        lines += _driver_first_lines(stage, outputs)
        lines += _spark_cost_lines(stage, outputs)
    print("\n".join(lines), file=sys.stderr, flush=True)


def _warm_up_lines(warming: ExecutorWarmUp | None) -> list[str]:
    """The executors' warm-up (jobs/audit/tasks.py ``ExecutorWarmUp``): when it ended, its Python workers' loads."""
    if warming is None:
        return []
    if warming.ended is None:
        return ["  executors' warm-up                 not done when the run ended (every task ran in the driver)"]
    loads = [r[2] for r in warming.rows if r[2] is not None]
    workers = len({(r[0], r[1]) for r in warming.rows})
    first = (f"its first task began at {min(r[3] for r in warming.rows) - warming.started:.2f} s, "
             if warming.rows else "")
    return [f"  {'executors ready after':<34} {warming.ended - warming.started:7.2f} s  (a warm-up job from the run's "
            f"start: {first}{workers} Python worker(s), kernel load {sum(loads):.2f} s in all)"]


def _driver_first_lines(stage: str, outputs) -> list[str]:
    """What the driver's threads ran of a stage begun before the executors were ready (``_driver_first``)."""
    first = outputs.partials.get("_driver_first")
    if first is None:
        return []
    r = first.to_pylist()[0]
    when = (f"the executors ready {r['ready_after_seconds']:.2f} s into it" if r["ready_after_seconds"] is not None
            else "the executors not ready before the driver had started every task")
    return [f"  {stage} begun in the driver: {r['tasks']} task(s), {r['cost'] / 2**20:.1f} MiB, there; "
            f"{r['handed_to_spark']} left to a Spark job ({when})"]


def _spark_cost_lines(stage: str, outputs) -> list[str]:
    """A stage run as a Spark job (jobs/audit/tasks.py ``_spark_job``, ``_spark_tasks``): its fixed cost, by name.
    Executors' wall clocks are compared with the driver's (one machine's clock, or NTP's on a cluster)."""
    job, tasks = outputs.partials.get("_spark_job"), outputs.partials.get("_spark_tasks")
    if job is None or tasks is None or not tasks.num_rows:
        return []
    job, rows = job.to_pylist()[0], tasks.to_pylist()
    wall = job["returned"] - job["submitted"]
    busy: dict[tuple, float] = {}
    for r in rows:
        busy[(r["host"], r["pid"])] = busy.get((r["host"], r["pid"]), 0.0) + r["ended"] - r["started"]
    fresh = [r for r in rows if r["worker_tasks_before"] == 0]
    ages = [r["worker_age_seconds"] for r in fresh if r["worker_age_seconds"] is not None]
    loads = [r for r in rows if r["kernel_load_seconds"] is not None]
    compiled = sum(r["kernel_passes_compiled"] or 0 for r in loads)

    def line(name: str, value: str, note: str = "") -> str:
        return f"    {name:<32} {value:>9}  {note}".rstrip()

    return [f"  {stage} as a Spark job: {len(rows)} bin(s) on {len(busy)} Python worker(s), {wall:.2f} s from its "
            f"submission to its results",
            line("until the first task ran", f"{max(0.0, min(r['started'] for r in rows) - job['submitted']):.2f} s",
                 "(executors starting or busy, a Python worker forking)"),
            line("Python workers started", f"{len(fresh)}",
                 f"({max(ages):.2f} s at most from fork to the audit's code: Spark's command, the project's import)"
                 if ages else "(every worker reused from the stage before)"),
            line("task shipping", f"{job['work_bytes'] / 1024:.1f} KiB",
                 f"(at most {max(r['work_bytes'] for r in rows) / 1024:.1f} KiB a task, and "
                 f"{job['shared_bytes'] / 1024:.1f} KiB they share, shipped apart once; pickled in "
                 f"{job['pickle_seconds']:.2f} s, unpickled in {sum(r['unpickle_seconds'] for r in rows):.2f} s "
                 f"in all)"),
            line("kernel load on executors", f"{sum(r['kernel_load_seconds'] for r in loads):.2f} s",
                 f"({len(loads)} load(s), once per Python worker; {compiled} pass(es) compiled"
                 f"{': numba cache cold' if compiled else ''})"),
            line("the busiest worker", f"{max(busy.values()):.2f} s",
                 f"(the least busy {min(busy.values()):.2f} s)"),
            line("results back", f"{job['results_bytes'] / 2**20:.1f} MiB", f"(read in {job['read_seconds']:.2f} s)"),
            line("around the tasks", f"{max(0.0, wall - max(busy.values())):.2f} s",
                 "(the job's time less the busiest worker's: scheduling, start, results)")]


def _kernel_line() -> str:
    """The driver's compiled kernels, apart from the phases (loaded while the session starts): compile seconds are
    0 when numba's disk cache had them (``make setup`` fills it)."""
    from decoding.kernels import KERNEL_LOAD

    if not KERNEL_LOAD:
        return f"  {'kernel compile':<34} not loaded in the driver yet"
    secs, compiled = KERNEL_LOAD["seconds"], KERNEL_LOAD["compiled"]
    how = (f"{compiled} pass{'es' if compiled != 1 else ''} compiled: numba's cache was cold (make setup fills it)"
           if compiled else f"none: loaded from numba's cache in {secs:.2f} s, during the session start")
    return f"  {'kernel compile':<34} {secs if compiled else 0.0:7.2f} s  ({how})"


def _version() -> str:
    try:
        from importlib.metadata import version

        return version(TOOL)
    except Exception:  # running from a zip on --py-files: no installed metadata
        return "unknown"


def _prepare_outputs(args, stores):
    """--history validated and claimed (runtime/history.py: an audit history or nothing, refused untouched
    otherwise), then --out claimed (runtime/commit.py), both apart from every input (as given and as resolved) and
    from each other, before any work; -> (the staging the run writes its outputs into, the history's part of
    the run or None)."""
    from runtime.output import check_apart
    from runtime.stores import protected_paths

    inputs = protected_paths(args.store, stores)
    run = job_run(NAME)
    history = state = None
    state_path = getattr(args, "state", None)
    if args.history:
        check_apart(args.history, [args.out], what="history")
        check_apart(args.out, [args.history], what="output")
        history = claim_history(run, args.history, inputs=inputs)
    if state_path:
        check_apart_from(state_path, [args.out] + ([args.history] if args.history else []))
        check_apart(state_path, inputs, what="state")
    out = prepare_output(args.out, overwrite=args.overwrite, inputs=inputs, job="audit")
    if state_path:  # after the output: a folder that is not a state is only warned about
        state = AuditState.open(run, state_path, inputs)
    return out.staging, history, state


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
            from decoding.kernels import load_compiled

            load_compiled()
            load_all()
        except Exception:  # noqa: BLE001 - the task that imports them reports it, with its broker
            pass

    threading.Thread(target=load_kernels, name="audit-load-kernels", daemon=True).start()


def main(argv=None, prog: str | None = None) -> int:
    # the audit's tasks read the store themselves (jobs/audit/tasks.py): no data source to register
    return cli.main(NAME, build_parser, run, argv, prepare=_prepare, prog=prog, sources=False)
