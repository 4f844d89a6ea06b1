"""trend: what got worse between audit runs, read from the audit's Delta history.

  rocketmq-forensics trend --history DIR [--all] [--out DIR [--format parquet|delta|jsonl] [--overwrite]]

DIR is what ``rocketmq-forensics audit --history DIR`` appends to: DIR/findings and DIR/metrics, Delta tables with one
``run_id``/``run_time`` per audit run (metrics in long format: broker, scope, topic, queue_id, group, metric,
value).  Runs are ordered by ``run_time``; by default the last run is compared with the one before it,
``--all`` compares every run with its predecessor.  Flags, what the broker's recovery would do first:

  no_longer_starts    the broker would start on the previous run's dump and refuses to on this one
  cut_moved           recovery now cuts the log where the previous run found no cut, or at another offset
  lost_more           more messages lost (damaged or dropped by recovery) than in the previous run
  newly_unindexed     more messages in no consume queue (consumers never receive them) than before
  growing_lag         lag_messages or lag_ms of the same key (broker, scope, topic, queue_id, group) rose
  growing_dlq         dlq_messages rose
  transaction_backlog open_transactions rose
  new_damage          an integrity finding (check "integrity.*") whose finding_id the previous run did not have

Only committed runs are compared: those DIR/runs lists, and a run whose output is committed but which ended
before the history listed it (said on stderr; the next audit --history lists it).  A damaged history (an empty
or cut Delta commit, a missing version, a data file missing, cut short or unreadable) is refused with exit 2,
naming the file (docs/scheduling.md says how to go on); nothing is left out silently.

The recovery flags compare a broker only when both runs audited it.  A key absent from the previous run
counts as 0 when that run measured the metric at all (a new DLQ, a new lagging queue); when it did not measure
it, there is nothing to compare.  The trends table has one row per flag; the summary (stdout) counts them and
lists the first ones, each naming both runs.

Exit codes: 0 nothing got worse (or fewer than two runs), 1 something did, 2 could not run.
"""
from __future__ import annotations

import argparse
import sys

import pyarrow as pa

if __package__ in (None, ""):  # spark-submit jobs/trend.py: make the project importable
    try:
        import _bootstrap  # noqa: F401  (jobs/_bootstrap.py)
    except ModuleNotFoundError:  # a copy outside the checkout: the project comes with --py-files
        pass

from runtime import cli, progress  # noqa: E402
from runtime.commit import runs_job  # noqa: E402
from runtime.display import plural  # noqa: E402
from runtime.history import check_history, damage_behind, read_runs, unlisted_runs  # noqa: E402
from runtime.output import OutputError, prepare_output, read_table, write_table  # noqa: E402
from store_format.fs import Location  # noqa: E402
from decoding.columns import column  # noqa: E402

NAME = "trend"
RECOVERY_FLAGS = ("no_longer_starts", "cut_moved", "lost_more", "newly_unindexed")
GROWTH_FLAGS = {"lag_messages": "growing_lag", "lag_ms": "growing_lag", "dlq_messages": "growing_dlq",
                "open_transactions": "transaction_backlog"}
NEW_DAMAGE = "new_damage"
FLAGS = (*RECOVERY_FLAGS, *dict.fromkeys(GROWTH_FLAGS.values()), NEW_DAMAGE)  # the order they are listed in
DAMAGE_FAMILY = "integrity."
METRIC_KEY = ("broker", "scope", "topic", "queue_id", "group", "metric")
LISTED = 20  # flags listed under the summary line; the table has them all


_TIME = pa.timestamp("us", "UTC")
#: the trend table (--out), described
TREND_SCHEMA = pa.schema([
    column("flag", pa.string(), "`no_longer_starts`, `cut_moved`, `lost_more`, `newly_unindexed`, `growing_lag`, "
                                "`growing_dlq`, `transaction_backlog` or `new_damage`"),
    column("run_id", pa.string()), column("run_time", _TIME),
    column("previous_run_id", pa.string(), "the run compared with"),
    column("previous_run_time", _TIME, "its run time"),
    column("broker", pa.string()),
    column("scope", pa.string(), "metric flags: the metric's scope"),
    column("topic", pa.string()), column("queue_id", pa.int32()),
    column("group", pa.string(), "metric flags: consumer group"),
    column("metric", pa.string(), "metric flags: the metric that rose (`messages_lost` for lost_more, "
                                  "`messages_in_no_consume_queue` for newly_unindexed)"),
    column("previous_value", pa.float64(), "its value in the previous run (0 when the key was new; cut_moved: the "
                                           "previous cut's physical offset, null when there was none)"),
    column("value", pa.float64(), "its value now (cut_moved: the cut's physical offset)"),
    column("change", pa.float64(), "value - previous_value"),
    column("finding_id", pa.string(), "new_damage, cut_moved, no_longer_starts: the finding's stable id"),
    column("check", pa.string(), "the check behind the flag"),
    column("severity", pa.string(), "finding flags: its severity"),
    column("file", pa.string(), "finding flags: the file"),
    column("file_position", pa.int64()), column("physical_offset", pa.int64()),
    column("message", pa.string(), "finding flags: the finding's message"),
])


def trend_columns():
    """The trend table's Spark schema (from :data:`TREND_SCHEMA`)."""
    from pyspark.sql.pandas.types import from_arrow_schema

    return from_arrow_schema(TREND_SCHEMA)


def build_parser() -> argparse.ArgumentParser:
    flags = __doc__[__doc__.index("  growing_lag"):__doc__.index("Exit codes")]
    p = argparse.ArgumentParser(prog=f"{cli.PROG} trend", description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter,
                                epilog=f"flags (run vs. previous run):\n{flags}"
                                       "Exit codes: 0 nothing got worse, 1 something did, 2 could not run.")
    p.add_argument("--history", required=True, metavar="DIR", type=cli.location_argument,
                   help="the audit's --history folder (holding findings/ and metrics/ Delta tables)")
    p.add_argument("--all", action="store_true",
                   help="compare every run with the one before it (default: only the last two runs)")
    cli.add_output_arguments(p, required=False)
    return p


def _history(spark, history: Location, table: str):
    """``table`` of the history, only its complete runs (listed in its ``runs`` table: runtime/history.py)."""
    return read_runs(spark, history, table)


def run_pairs(findings, metrics, everything: bool) -> list[tuple]:
    """[(run_id, run_time, previous_run_id, previous_run_time)] for the runs to compare, oldest first."""
    from functools import reduce

    frames = [df.select("run_id", "run_time") for df in (findings, metrics) if df is not None]
    runs = sorted({(r.run_time, r.run_id) for r in reduce(lambda a, b: a.union(b), frames).distinct().collect()})
    pairs = [(cur[1], cur[0], prev[1], prev[0]) for prev, cur in zip(runs, runs[1:])]
    return pairs if everything else pairs[-1:]


def trends(spark, findings, metrics, pairs: list[tuple]):
    """The trends table (see the module docstring) for the (run, previous run) ``pairs``."""
    from pyspark.sql import functions as F

    pair_df = spark.createDataFrame(
        pairs, "run_id string, run_time timestamp, previous_run_id string, previous_run_time timestamp")
    empty = spark.createDataFrame([], trend_columns())
    parts = [empty]
    recovery = recovery_flags(broker_facts(findings, metrics, pairs), pairs)
    if recovery:
        parts.append(spark.createDataFrame(recovery, trend_columns()))
    if metrics is not None:
        parts.append(_metric_growth(metrics, pair_df))
    if findings is not None:
        parts.append(_new_damage(findings, pair_df))
    out = parts[0]
    for part in parts[1:]:
        out = out.unionByName(part, allowMissingColumns=True)
    return out.select(*[F.col(f.name).cast(f.dataType) for f in empty.schema])


# The findings and metrics a run's recovery flags come from, per broker (few rows: aggregated by Spark first)
_WONT_START, _CUT, _UNINDEXED = "recovery.broker_will_not_start", "recovery.truncation", "consumequeue.missing_entry"


def broker_facts(findings, metrics, pairs: list[tuple]) -> dict[tuple[str, str], dict]:
    """{(run_id, broker): {"lost", "cut", "cut_finding", "wont_start", "unindexed"}} for every broker each run of
    ``pairs`` audited (a broker with a messages_lost metric: its recovery was predicted)."""
    from pyspark.sql import functions as F

    runs = sorted({r for p in pairs for r in (p[0], p[2])})
    facts: dict[tuple, dict] = {}
    if metrics is not None:
        for r in (metrics.where(F.col("run_id").isin(runs) & (F.col("scope") == "broker")
                                & (F.col("metric") == "messages_lost"))
                  .select("run_id", "broker", "value").collect()):
            facts[(r["run_id"], r["broker"])] = {"lost": r["value"], "cut": None, "wont_start": None,
                                                 "unindexed": 0.0}
    if findings is None:
        return facts
    wanted = findings.where(F.col("run_id").isin(runs) & F.col("check").isin(_WONT_START, _CUT, _UNINDEXED))
    # one row per cut and per refusal (few), the unindexed counts summed by Spark
    for r in (wanted.where(F.col("check") != _UNINDEXED)
              .select("run_id", "broker", "check", "finding_id", "severity", "file", "file_position",
                      "physical_offset", "message").collect()):
        f = facts.get((r["run_id"], r["broker"]))
        if f is not None:
            f["cut" if r["check"] == _CUT else "wont_start"] = f.get("cut" if r["check"] == _CUT else "wont_start") \
                or r.asDict()
    for r in (wanted.where(F.col("check") == _UNINDEXED).groupBy("run_id", "broker")
              .agg(F.sum(F.col("details").getItem("count").cast("double")).alias("n")).collect()):
        f = facts.get((r["run_id"], r["broker"]))
        if f is not None:
            f["unindexed"] = r["n"] or 0.0
    return facts


def recovery_flags(facts: dict, pairs: list[tuple]) -> list[dict]:
    """The recovery flags of each (run, previous run) pair, for the brokers both runs audited."""
    out = []
    for run_id, run_time, prev_id, prev_time in pairs:
        for (run, broker), now in sorted(facts.items()):
            before = facts.get((prev_id, broker))
            if run != run_id or before is None:
                continue
            base = {"run_id": run_id, "run_time": run_time, "previous_run_id": prev_id,
                    "previous_run_time": prev_time, "broker": broker}

            def finding(flag, f, **more):
                return {**base, "flag": flag, **{k: f[k] for k in ("finding_id", "check", "severity", "file",
                                                                   "file_position", "physical_offset", "message")},
                        **more}

            if now["wont_start"] and not before["wont_start"]:
                out.append(finding("no_longer_starts", now["wont_start"]))
            cut, was = now["cut"], before["cut"]
            if cut and (not was or was["physical_offset"] != cut["physical_offset"]):
                out.append(finding("cut_moved", cut, previous_value=_float(was and was["physical_offset"]),
                                   value=_float(cut["physical_offset"])))
            for flag, metric, key in (("lost_more", "messages_lost", "lost"),
                                      ("newly_unindexed", "messages_in_no_consume_queue", "unindexed")):
                if (now[key] or 0) > (before[key] or 0):
                    out.append({**base, "flag": flag, "metric": metric, "previous_value": before[key] or 0.0,
                                "value": now[key], "change": now[key] - (before[key] or 0.0),
                                "check": "recovery.truncation" if key == "lost" else _UNINDEXED})
    return out


def _float(v):
    return None if v is None else float(v)


def _metric_growth(metrics, pair_df):
    from pyspark.sql import functions as F

    watched = metrics.where(F.col("metric").isin(list(GROWTH_FLAGS)))
    current = watched.join(pair_df.select("run_id", "previous_run_id", "previous_run_time"), "run_id")
    previous = watched.select(F.col("run_id").alias("p_run"), *[F.col(k).alias(f"p_{k}") for k in METRIC_KEY],
                              F.col("value").alias("previous_value"))
    same_key = [F.col("previous_run_id") == F.col("p_run")] + \
               [F.col(k).eqNullSafe(F.col(f"p_{k}")) for k in METRIC_KEY]
    joined = current.join(previous, same_key, "left")
    # a key the previous run lacked was 0 then, if that run measured the metric at all
    measured = watched.select(F.col("run_id").alias("m_run"), F.col("metric").alias("m_metric")).distinct()
    joined = joined.join(measured, (F.col("previous_run_id") == F.col("m_run"))
                         & (F.col("metric") == F.col("m_metric")), "left")
    before = F.coalesce(F.col("previous_value"), F.when(F.col("m_run").isNotNull(), F.lit(0.0)))
    flag = F.create_map(*[F.lit(x) for kv in GROWTH_FLAGS.items() for x in kv])[F.col("metric")]
    return (joined.where(before.isNotNull() & (F.col("value") > before))
            .select(flag.alias("flag"), "run_id", "run_time", "previous_run_id", "previous_run_time",
                    *METRIC_KEY[:-1], "metric", before.alias("previous_value"), "value",
                    (F.col("value") - before).alias("change")))


def _new_damage(findings, pair_df):
    from pyspark.sql import functions as F

    damage = findings.where(F.col("check").startswith(DAMAGE_FAMILY))
    current = damage.join(pair_df.select("run_id", "previous_run_id", "previous_run_time"), "run_id")
    seen = damage.select(F.col("run_id").alias("previous_run_id"), "finding_id").distinct()
    return (current.join(seen, ["previous_run_id", "finding_id"], "left_anti")
            .select(F.lit(NEW_DAMAGE).alias("flag"), "run_id", "run_time", "previous_run_id", "previous_run_time",
                    "broker", "topic", "queue_id", "finding_id", "check", "severity", "file", "file_position",
                    "physical_offset", "message"))


def _describe(row) -> str:
    where = " ".join(f"{k}={row[k]}" for k in ("broker", "topic", "queue_id", "group") if row[k] is not None)
    runs = f"run {row['run_id']}", f"run {row['previous_run_id']}"
    if row["flag"] == "no_longer_starts":
        return f"  no_longer_starts: {row['broker']}: {runs[0]} will not start ({row['message']}); {runs[1]} would"
    if row["flag"] == "cut_moved":
        was = "kept the whole log" if row["previous_value"] is None else \
            f"cut it at physical offset {row['previous_value']:,.0f}"
        return (f"  cut_moved: {row['broker']}: {runs[0]}: recovery cuts the log at physical offset "
                f"{row['value']:,.0f}; {runs[1]}: recovery {was}")
    if row["flag"] in ("lost_more", "newly_unindexed"):
        what = "lost" if row["flag"] == "lost_more" else "in no consume queue"
        return (f"  {row['flag']}: {row['broker']}: {runs[0]}: {plural(int(row['value']), 'message')} {what}; "
                f"{runs[1]}: {row['previous_value']:,.0f}")
    if row["flag"] == NEW_DAMAGE:
        return f"  {row['flag']}: {row['check']} {where} {row['file']}@{row['file_position']}: {row['message']}"
    return (f"  {row['flag']}: {row['metric']} {row['scope']} {where}: {row['previous_value']:g} -> "
            f"{row['value']:g} (+{row['change']:g})")


def prepare(args) -> None:
    if args.out:  # never into, over or around the history it reads
        from runtime.output import check_apart

        check_apart(args.out, [args.history])
    check_history(args.history, must_exist=True)  # an audit history (its tables marked as ours), or refused
    if args.out:
        prepare_output(args.out, overwrite=args.overwrite, inputs=[args.history], job="trend")


@runs_job(NAME)
def run(spark, args) -> cli.JobResult:
    prepare(args)
    for journal in unlisted_runs(args.history):
        progress.say(f"history: run {journal.run_id} is committed (its output {journal.out}) but its run ended before "
                     "the history listed it: compared as listed (the next audit --history lists it)")
    try:
        return _compare(spark, args)
    except Exception as e:  # noqa: BLE001 - a read that failed on the history's damage names the file; else as it is
        damaged = None if isinstance(e, OutputError) else damage_behind(args.history)
        if damaged is not None:
            raise damaged from None
        raise


def _compare(spark, args) -> cli.JobResult:
    findings = _history(spark, args.history, "findings")
    metrics = _history(spark, args.history, "metrics")
    pairs = run_pairs(findings, metrics, args.all)
    if not pairs:
        return cli.JobResult("trend: fewer than two audit runs in the history: nothing to compare yet", cli.EXIT_OK)
    table = trends(spark, findings, metrics, pairs)
    if args.out:
        staged = prepare_output(args.out, overwrite=args.overwrite, job=NAME).staging  # committed on return
        write_table(table, staged, args.format)
        table = read_table(spark, staged, args.format, schema=table.schema)
    from pyspark.sql import functions as F

    counts = {r["flag"]: r["count"] for r in table.groupBy("flag").count().collect()}
    order = F.create_map(*[F.lit(x) for i, f in enumerate(FLAGS) for x in (f, i)])[F.col("flag")]
    listed = table.orderBy("run_time", order, "broker", "topic", "queue_id", "group", "metric", "finding_id") \
        .limit(LISTED).collect()
    compared = f"{pairs[0][2]} -> {pairs[-1][0]}" if len(pairs) == 1 else f"{len(pairs)} run pairs"
    counted = ", ".join(f"{counts[f]} {f}" for f in FLAGS if counts.get(f)) or "nothing got worse"
    written = f"; written to {args.out.as_typed} as {args.format}" if args.out else ""
    lines = [f"trend: {compared}: {counted}{written}"]
    lines += [_describe(r) for r in listed]
    if sum(counts.values()) > LISTED:
        lines.append(f"  ... {sum(counts.values()) - LISTED} more" + (" in the table" if args.out else
                                                                       " (--out writes them all)"))
    return cli.JobResult("\n".join(lines), cli.EXIT_FINDINGS if counts else cli.EXIT_OK)


def main(argv=None, prog: str | None = None) -> int:
    return cli.main(NAME, build_parser, run, argv, prepare=prepare, prog=prog)


if __name__ == "__main__":
    sys.exit(main())
