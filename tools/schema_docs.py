"""Generate docs/output-schemas.md from the code, and list every finding kind the audit can emit.

  python tools/schema_docs.py                               print the document
  python tools/schema_docs.py --write docs/output-schemas.md (``make docs``)
  python tools/schema_docs.py --check docs/output-schemas.md exit 1 when the file differs
  python tools/schema_docs.py --kinds                       print every finding kind (one a line)

The schemas are not written by hand: the audit runs (local Spark, UI off) on a small store the project's
writer generates in a temp dir, and its Parquet outputs, ``summary.json`` and metric names are read back;
the decode and extract columns come from ``jobs.decode.messages`` and ``jobs.extract.OUTPUT_COLUMNS``, the
trend table from ``jobs.trend.TREND_SCHEMA``.  What each column means is not written here either: it is the
description in the field's metadata where the table's schema is declared (decoding/columns.py; ``declared`` lists
where: the audit's detail tables are each family's declared ``tables``), read with its type, which must be the
type written.  A metric's meaning is what its family declares (``metrics``); only the meanings of summary.json
keys, which are no schema's columns, are written here (``SUMMARY``).  A column, metric or summary key without a
meaning is an error, so the document cannot fall behind the code.

Finding kinds (``finding_kinds``) are the audit's registry of checks (jobs/audit/findings.py ``CHECKS``, which
each family of jobs/audit/checks/ fills with the checks it declares); tests/test_schema_docs.py checks that
docs/user-guide.md explains each one.
"""
from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

# ---------------------------------------------------------------------------------------------------------
# Finding kinds, from the source


def finding_kinds() -> set[str]:
    """Every ``check`` the audit can emit: the registry its families declare (jobs.audit.findings.CHECKS)."""
    from jobs.audit.checks import load_all
    from jobs.audit.findings import CHECKS

    load_all()
    return set(CHECKS)


# ---------------------------------------------------------------------------------------------------------
# What each column means: the descriptions in the declared schemas' field metadata (decoding/columns.py)


def declared() -> dict[str, dict]:
    """Each documented table's declared fields by name, from where its schema is declared."""
    from datasources.commitlog import arrow_schema
    from jobs import extract, trend
    from jobs.audit import findings as FD
    from jobs.audit import resend
    from jobs.audit.checks import load_all

    messages = list(arrow_schema("decoded", decompress=True))  # decode's columns: the source's decoded rows
    families = {name: schema for family in load_all() for name, schema in family.tables.items()}
    tables = {"findings": FD.FINDINGS_FILE_SCHEMA, "metrics": list(FD.STAMPS) + list(FD.METRIC_SCHEMA), **families,
              "resend": resend.SCHEMA, "decode": messages, "extract": messages + list(extract.ADDED_COLUMNS),
              "trend": trend.TREND_SCHEMA}
    return {table: {f.name: f for f in fields} for table, fields in tables.items()}


def meaning(fields: dict, table: str, column: str, typ: str) -> str:
    """The description of ``column`` as ``table`` declares it; an error when the output has a column its declared
    schema lacks, declares with another type, or leaves undescribed."""
    from pyspark.sql.pandas.types import from_arrow_type

    from decoding.columns import description

    field = fields[table].get(column)
    if field is None:
        raise KeyError(f"{table} writes the column {column!r}, which its declared schema lacks")
    declared_type = from_arrow_type(field.type).simpleString()
    if declared_type != typ:
        raise KeyError(f"{table}.{column} is declared {declared_type} and written as {typ}")
    text = description(field)
    if not text:
        raise KeyError(f"{table}.{column} has no description: give it one where its schema is declared "
                       "(decoding.columns.column)")
    return text


def metrics() -> dict[str, str]:
    """Each metric's meaning, as the family that measures it declares it (jobs/audit/checks/)."""
    from jobs.audit.checks import load_all

    return {name: text for family in load_all() for name, text in family.metrics.items()}


SUMMARY = {
    "tool": "`rocketmq-forensics`", "version": "the installed package version (`unknown` from a zip)",
    "run_id": "the run's id (as in the findings and metrics)", "run_time": "when it started (ISO-8601, UTC)",
    "elapsed_seconds": "how long the audit took", "checks": "the check families run",
    "inputs": "every input file", "inputs[].path": "its path", "inputs[].size": "its size in bytes",
    "inputs[].mtime_ns": "its modification time", "inputs[].sha256": "with --sha256: its hash",
    "counts": "findings per severity", "counts.error": "error findings", "counts.warning": "warning findings",
    "counts.info": "info findings", "counts.per_check": "per check",
    "counts.per_check.<check>": "that check's severity and count", "counts.per_check.<check>.severity": "severity",
    "counts.per_check.<check>.count": "findings", "brokers": "one entry per store", "brokers[].name": "broker",
    "brokers[].path": "store root", "brokers[].geometry": "sizes read from the files",
    "brokers[].geometry.segment_size": "commitlog segment size", "brokers[].geometry.segments": "segment files",
    "brokers[].geometry.first_segment": "first segment name", "brokers[].geometry.last_segment": "last one",
    "brokers[].geometry.consume_queue_file_size": "consume-queue file size",
    "brokers[].geometry.queues": "queues the broker loads, of every backend (files, batch, a RocksDB database; a queue "
                                 "two hold once)",
    "brokers[].geometry.index_files": "index files", "brokers[].as_of": "the dump time used for lag and ages (ms)",
    "brokers[].recovery": "what the broker will do when it starts on this dump",
    "brokers[].recovery.mode": "`normal` or `abnormal` (abort file present)",
    "brokers[].recovery.broker_will_start": "false when a file makes `load()` fail",
    "brokers[].recovery.start_problems": "why it will not start", "brokers[].recovery.start_segment": "the "
    "segment recovery starts from", "brokers[].recovery.predicted_max_physical_offset": "where the commitlog "
    "will end", "brokers[].recovery.stop_segment": "segment where recovery stops",
    "brokers[].recovery.stop_position": "file position there", "brokers[].recovery.stop_kind": "why it stops",
    "brokers[].recovery.messages_lost": "messages the broker drops: damaged + intact",
    "brokers[].recovery.damaged_messages_lost": "damaged records at (or past) the end whose header still frames a "
    "message", "brokers[].recovery.intact_messages_lost": "well-formed messages past the end",
    "brokers[].recovery.unframed_bytes_lost": "bytes past the end no walk could frame (records whose headers are "
    "gone, not counted)", "brokers[].recovery.unframed_runs_lost": "runs of such bytes",
    "brokers[].recovery.bytes_lost": "the bytes of all of them", "brokers[].recovery.segments_deleted":
    "segments wholly past the end (deleted)",
    "brokers[].recovery.max_cq_physical_offset": "the highest offset the consume queues reach",
    "brokers[].recovery.cq_units_truncated": "consume-queue units truncated",
    "brokers[].recovery.index_files_deleted": "index files deleted and rebuilt",
    "brokers[].recovery.redispatch_from": "abnormal recovery: where re-dispatch starts",
    "brokers[].recovery.notes": "other remarks", "outputs": "paths of everything written",
    "outputs.findings": "findings table", "outputs.metrics": "metrics table",
    "outputs.tables/<name>": "each detail table", "outputs.report": "report.html (null with --no-report)",
    "groups": "finding groups: the report's rows (one per check and place, jobs/audit/groups.py)",
    "brokers[].verdict": "the on-call view the report's first screen shows (jobs/audit/verdict.py)",
    "brokers[].verdict.level": "`will-not-start`, `incomplete`, `data-lost`, `attention` or `pass`",
    "brokers[].verdict.banner": "the level in the banner's words", "brokers[].verdict.headline": "the headline",
    "brokers[].verdict.will_start": "will the broker start (null: unknown)",
    "brokers[].verdict.why_not": "why it will not start", "brokers[].verdict.cut": "where recovery cuts the log "
    "(null: nowhere)", "brokers[].verdict.cut.physical_offset": "the recovered end",
    "brokers[].verdict.cut.segment": "its segment", "brokers[].verdict.cut.file_position": "its position there",
    "brokers[].verdict.cut.kind": "why the walk stops there", "brokers[].verdict.lost": "messages lost: the broker "
    "will not deliver them (tables/resend, system records included)",
    "brokers[].verdict.lost.damaged": "damaged at or past the cut: recovery drops them",
    "brokers[].verdict.lost.destroyed": "their headers destroyed: named by the consume-queue units still pointing at "
    "them", "brokers[].verdict.lost.dropped": "dropped after the cut",
    "brokers[].verdict.lost.unframed_runs": "runs of records whose headers are gone (past the cut)",
    "brokers[].verdict.lost.unindexed": "kept but in no consume queue",
    "brokers[].verdict.lost.undispatched": "never dispatched: a record's LMQ dispatch list stalls the reput there",
    "brokers[].verdict.kept_damaged": "kept, damaged: damaged before the cut, the broker keeps and serves them as they "
    "are (their producers re-send them)",
    "brokers[].verdict.to_resend": "the messages to re-send (tables/resend without system records)",
    "brokers[].verdict.system_records": "records of system topics in tables/resend: the broker's bookkeeping, which "
    "nobody re-sends",
    "brokers[].verdict.at_risk": "what a restart now destroys, file by file",
    "brokers[].verdict.safe_before": "every byte before this physical offset is intact",
    "state": "with --state: the state compared with (jobs/audit/state.py)", "state.path": "the --state folder",
    "state.used": "whether this run compared with a state (false: the first run, or a state it could not use)",
    "state.note": "why it did not (null when it did)",
    "state.tasks_given_back": "the tasks not run, per stage: their output, kept by the last run, given back (the "
    "bytes they read the same)", "state.tasks_given_back.survey": "the survey's segment walks given back",
    "state.tasks_given_back.scan": "the scan's commitlog range tasks given back (their bytes, and what they read of "
    "the store, as the last run's)",
    "brokers[].since_last_run": "with --state: what changed since the state's last run of this broker",
    "brokers[].since_last_run.previous_run_id": "that run (null: the first run with this state)",
    "brokers[].since_last_run.previous_run_time": "when it started",
    "brokers[].since_last_run.changed": "the verdict moved (the level, the cut, will it start, more messages lost or "
    "to re-send) or an append-only file was rewritten",
    "brokers[].since_last_run.changes": "what changed, in words, one sentence each",
    "brokers[].since_last_run.files": "the broker's files against the last run's look: `same`, `grown` (written "
    "further), `new`, `changed` (one the broker rewrites in place: checkpoint, config, index files), `rewritten` (an "
    "append-only file whose earlier bytes changed: a history.rewritten finding), `disappeared`",
    "brokers[].verdict.actions": "what to do, decided by the facts, most urgent first (at most four)",
    "brokers[].verdict.actions[].kind": "`will_not_start`, `move_abort`, `resend_undispatched`, `copy_out`, "
    "`nothing_after_cut`, `resend_damaged`, `kept_damaged`, `extract_unindexed`, `property_crc`, `keep_a_copy`, "
    "`check` (a check's what-to-do) or `none`",
    "brokers[].verdict.actions[].text": "what to do, in one sentence",
    "brokers[].verdict.actions[].command": "the command that does it, as it runs pasted (null: none helps)",
    "brokers[].verdict.actions[].check": "the check the action answers", "brokers[].verdict.actions[].count":
    "its findings (or the messages concerned)",
    "counts.will_not_start": "brokers that will not start", "counts.cuts": "brokers whose recovery cuts the log",
    "counts.messages_lost": "messages lost, every broker: damaged + destroyed + dropped",
    "counts.damaged": "damaged messages recovery drops", "counts.destroyed": "messages whose headers damage destroyed",
    "counts.dropped": "intact messages recovery drops after a cut",
    "counts.kept_damaged": "messages the brokers keep damaged", "counts.unindexed": "messages in no consume queue",
    "counts.undispatched": "messages never dispatched (a stalled reput)",
    "counts.other_causes": "the other finding groups (causes), per severity", "counts.other_causes.error": "errors",
    "counts.other_causes.warning": "warnings", "counts.other_causes.info": "notes",
    "counts.in_words": "all of it in words, as the terminal's last line and the report's header say it",
    "brokers[].timers": "5.x, a store with a timer store: its timer messages (timers family)",
    "brokers[].timers.pending": "timer messages the broker will still deliver (in the wheel, or waiting to enter it)",
    "brokers[].timers.overdue": "of them, due before the dump time with their slot unread",
    "brokers[].timers.fired": "delivered to their real topic", "brokers[].timers.recalled": "recalled before delivery",
    "brokers[].timers.lost": "timer messages the broker will never deliver",
    "brokers[].timers.read_time_ms": "config/timercheck's lastReadTimeMs: every wheel slot before it has been read",
    "brokers[].timers.next_due": "the next deliver times of pending timer messages (up to five)",
    "brokers[].property_crc": "5.2.0+, records carrying the whole-record CRC `__CRC32#` (integrity family)",
    "brokers[].property_crc.records": "records carrying it", "brokers[].property_crc.verified": "of them, matching",
    "brokers[].property_crc.settings_given": "whether `--config` gave the broker's settings",
    "brokers[].property_crc.force_verify": "its forceVerifyPropCRC (false when not given)",
    "brokers[].property_crc.forced_cut": "where a forceVerifyPropCRC recovery cuts the log (null: nowhere)",
    "brokers[].property_crc.forced_cut.physical_offset": "the first record it refuses",
    "brokers[].property_crc.forced_cut.segment": "its segment", "brokers[].property_crc.forced_cut.file_position":
    "its position there", "brokers[].property_crc.forced_cut.kind": "`BAD_PROPERTY_CRC` or `NO_PROPERTY_CRC`",
    "brokers[].dispatch_stall": "5.x: the record whose LMQ dispatch list stalls the reput (lmq family)",
    "brokers[].dispatch_stall.physical_offset": "where it is", "brokers[].dispatch_stall.segment": "its segment",
    "brokers[].dispatch_stall.file_position": "its position there", "brokers[].dispatch_stall.topic": "its topic",
    "brokers[].dispatch_stall.queue_id": "its queue", "brokers[].dispatch_stall.queue_offset": "its queue offset",
    "brokers[].dispatch_stall.uniq_key": "its UNIQ_KEY",
    "brokers[].dispatch_stall.records_after": "kept records after it, never dispatched",
    "brokers[].timers.next_due[].due_ms": "a deliver time (ms)", "brokers[].timers.next_due[].messages": "messages "
    "due then", "brokers[].timers.last_due_ms": "the last pending deliver time",
}


# ---------------------------------------------------------------------------------------------------------
# Running the code to get the schemas


def collect(spark) -> dict:
    """Schemas of every output, from an audit of a small generated store and the jobs' own definitions."""
    from jobs import audit, decode, extract, trend
    from store_format.write.generate import Traffic5Config, TrafficConfig, config_5x, generate_store
    from store_format.write.writer import WriterConfig

    with tempfile.TemporaryDirectory() as tmp:
        store, out = Path(tmp) / "broker-x" / "store", Path(tmp) / "audit"
        generate_store(store, TrafficConfig(messages=400, seed=5),
                       WriterConfig(mappedFileSizeCommitLog=64 << 10, maxHashSlotNum=64, maxIndexNum=1024))
        audit.run(spark, audit.build_parser().parse_args(["--store", str(store), "--out", str(out), "--no-report"]))
        tables = {"findings": spark.read.parquet(str(out / "findings")).schema,
                  "metrics": spark.read.parquet(str(out / "metrics")).schema}
        tables.update({p.name: spark.read.parquet(str(p)).schema for p in sorted((out / "tables").iterdir())})
        metric_names = sorted(r["metric"] for r in spark.read.parquet(str(out / "metrics")).select("metric")
                              .distinct().collect())
        summary = json.loads((out / "summary.json").read_text())
        # a 5.x store's audit: the tables, metrics and summary keys of the families that run only for 5.x stores
        store5, out5 = Path(tmp) / "broker-5" / "store", Path(tmp) / "audit5"
        generate_store(store5, Traffic5Config(messages=400, seed=5),
                       config_5x(WriterConfig(mappedFileSizeCommitLog=256 << 10, mappedFileSizeTimerLog=4096)))
        audit.run(spark, audit.build_parser().parse_args(["--store", str(store5), "--out", str(out5), "--no-report",
                                                          "--checks", "timers,pop"]))
        for p in sorted((out5 / "tables").iterdir()):
            tables.setdefault(p.name, spark.read.parquet(str(p)).schema)
        metric_names = sorted(set(metric_names) | {r["metric"] for r in spark.read.parquet(str(out5 / "metrics"))
                                                   .select("metric").distinct().collect()})
        summary["brokers"] += json.loads((out5 / "summary.json").read_text())["brokers"]
        from runtime.stores import resolve_stores

        messages = decode.messages(spark, resolve_stores([str(store)]), decompress=True).schema
    from pyspark.sql.pandas.types import from_arrow_type

    by_name = {f.name: f.dataType.simpleString() for f in messages}
    added = {f.name: from_arrow_type(f.type).simpleString() for f in extract.ADDED_COLUMNS}
    extract_types = {**by_name, **added}
    extract_cols = [*extract.OUTPUT_COLUMNS, *added]

    def columns(schema):
        return [(f.name, f.dataType.simpleString()) for f in schema]

    return {"tables": {k: columns(v) for k, v in tables.items()}, "metric_names": metric_names,
            "summary_keys": summary_keys(summary), "decode": columns(messages),
            "extract": [(c, extract_types[c]) for c in extract_cols],
            "trend": columns(spark.createDataFrame([], trend.trend_columns()).schema)}


def summary_keys(value, path: str = "") -> list[str]:
    """Key paths of summary.json: lists as ``[]``, check names and table names as placeholders."""
    out = []
    if isinstance(value, dict):
        for k, v in value.items():
            key = "<check>" if path == "counts.per_check" else ("tables/<name>" if k.startswith("tables/") else k)
            child = f"{path}.{key}" if path else key
            if child not in out:
                out.append(child)
                out += [c for c in summary_keys(v, child) if c not in out]
    elif isinstance(value, list) and value and isinstance(value[0], dict):
        keys = {}
        for item in value:
            keys.update(item)
        out += summary_keys(keys, f"{path}[]")
    return out


# ---------------------------------------------------------------------------------------------------------
# The document

HEADER = """# Output schemas

Generated by `make docs` (`tools/schema_docs.py`): the column names and types come from running the audit
on a small generated store and from the jobs' own column lists, each column's meaning from the description
its schema declares with it; do not edit by hand (a test fails when this file and the code disagree).  What
each finding kind means and what to do about it is in [user-guide.md](user-guide.md); every job's options are
in [jobs.md](jobs.md).

Types are Spark SQL types (`bigint` = 64-bit, `int` = 32-bit); timestamps in `*_time`/`*_timestamp` columns
of `bigint` type are milliseconds since the epoch, as RocketMQ stores them.  Tables are Parquet folders
(`--format delta` or `jsonl` where a job offers it; see `runtime/output.py`).
"""

AUDIT_TABLES = (
    ("findings", "`OUT/findings/` (and the Delta table `HISTORY/findings` with `--history`): one row per finding"),
    ("metrics", "`OUT/metrics/` (and `HISTORY/metrics`): long format, one row per measured value"),
    ("segments", "`OUT/tables/segments/`: one row per commitlog segment (integrity family)"),
    ("queues", "`OUT/tables/queues/`: one row per consume queue (consumequeue family)"),
    ("lag", "`OUT/tables/lag/`: one row per group, topic and queue with a committed offset (lag family)"),
    ("transactions", "`OUT/tables/transactions/`: one row per transaction (transactions family)"),
    ("delays", "`OUT/tables/delays/`: one row per delay level (delays family)"),
    ("timers", "`OUT/tables/timers/`: 5.x, one row per record on rmq_sys_wheel_timer and its timer-log unit: the "
               "timer message's path and state (timers family)"),
    ("pop", "`OUT/tables/pop/`: 5.x, one row per message a POP checkpoint popped, with its state (pop family)"),
    ("retries", "`OUT/tables/retries/`: one row per send-back copy (retries family). Under `audit --state` one "
                "Parquet file per scan part, in the rows' order (docs/scheduling.md)"),
    ("dlq", "`OUT/tables/dlq/`: one row per group with dead letters (retries family)"),
    ("resend", "`OUT/tables/resend/`: one row per message to re-send: damaged, dropped by recovery, or in no "
               "consume queue (jobs/audit/resend.py; the report's \"Messages to re-send\")"),
)


def _table(fields: dict, table_key: str, columns: list[tuple[str, str]]) -> str:
    rows = [f"| `{name}` | `{typ}` | {meaning(fields, table_key, name, typ)} |" for name, typ in columns]
    return "| column | type | meaning |\n|---|---|---|\n" + "\n".join(rows) + "\n"


def _runs_table() -> str:
    """``HISTORY/runs``: written by runtime/history.py only, so documented from its schema and RUNS_MEANING."""
    from pyspark.sql.pandas.types import from_arrow_type

    from runtime.history import RUNS_MEANING, RUNS_SCHEMA

    undescribed = [f.name for f in RUNS_SCHEMA if f.name not in RUNS_MEANING]
    if undescribed:
        raise KeyError(f"HISTORY/runs columns without a meaning: {undescribed}: add them to "
                       "runtime.history.RUNS_MEANING")
    rows = [f"| `{f.name}` | `{from_arrow_type(f.type).simpleString()}` | {RUNS_MEANING[f.name]} |" for f in RUNS_SCHEMA]
    return ("### runs (history)\n\n`HISTORY/runs` (with `--history`): one row per committed run, appended after its "
            "findings and metrics, once its output is committed; `trend` and the notebooks read only the runs listed "
            "here (and a run whose output is committed but that ended before its row was appended: "
            "[scheduling.md](scheduling.md#a-killed-run-a-damaged-history)).\n\n"
            "| column | type | meaning |\n|---|---|---|\n" + "\n".join(rows) + "\n")


def render(schemas: dict) -> str:
    tables, fields = schemas["tables"], declared()
    known = {name for name, _ in AUDIT_TABLES}
    if set(tables) != known:
        raise KeyError(f"the audit writes tables {sorted(tables)}, documented are {sorted(known)}: update "
                       "AUDIT_TABLES in tools/schema_docs.py")
    parts = [HEADER, "## jobs.audit\n"]
    for name, where in AUDIT_TABLES:
        parts.append(f"### {name}\n\n{where}.\n\n{_table(fields, name, tables[name])}")
    parts.append(_runs_table())
    METRICS = metrics()
    missing = [m for m in schemas["metric_names"] if m not in METRICS]
    if missing:
        raise KeyError(f"metrics without a meaning: {missing}: declare them in their family's metrics "
                       "(jobs/audit/checks/)")
    parts.append("### Metric names\n\nThe `metric` column's values (some only appear when there is something to "
                 "count):\n\n| metric | meaning (scopes) |\n|---|---|\n"
                 + "\n".join(f"| `{m}` | {t} |" for m, t in METRICS.items()) + "\n")
    undocumented = [k for k in schemas["summary_keys"] if k not in SUMMARY]
    if undocumented:
        raise KeyError(f"summary.json keys without a meaning: {undocumented}: add them to SUMMARY")
    parts.append("### summary.json\n\n| key | meaning |\n|---|---|\n"
                 + "\n".join(f"| `{k}` | {SUMMARY[k]} |" for k in SUMMARY) + "\n")
    parts.append("## jobs.decode\n\n`OUT/`: one row per stored message (`--decompress` adds the last two "
                 "columns).\n\n" + _table(fields, "decode", schemas["decode"]))
    parts.append("## jobs.extract\n\n`OUT/`: the selected messages, these columns in this order (`stored_compression` "
                 "only with `--body decompressed`, `consumer` only with `--consumers`/`--consumer-ids`); types as in "
                 "decode.  `OUT/_manifest.json` records `job`, `stores`, `source_geometry`, `selection`, `output` "
                 "(path, format, row order), `notes`, `counts` (`selected`, `written`, `rejected`, "
                 "`rejected_by_reason`, `reconciled`: selected = written + rejected), `rejected_examples`, "
                 "`by_topic`, and with `--not-consumed-by` / `--consumers` the consumption report and the "
                 "allocation.\n\n" + _table(fields, "extract", schemas["extract"]))
    parts.append("## jobs.query\n\nJSON Lines on stdout: `{\"kind\": \"message\", \"broker\": ..., "
                 "<the decode columns from `physical_offset` to `file_position`>}` per match (`body` base64), and "
                 "with `--explain` `{\"kind\": \"explain\", \"broker\", \"reason\", \"physical_offset\", "
                 "\"detail\"}` lines saying why a message is missing (reasons in jobs.md).\n")
    parts.append("## jobs.trend\n\n`--out`: one row per flag.\n\n" + _table(fields, "trend", schemas["trend"]))
    parts.append(_sources())
    return "\n".join(parts)


def _source_table(schema, name: str) -> str:
    """A data source's columns with their types and meanings, from its declared Arrow schema alone."""
    from pyspark.sql.pandas.types import from_arrow_type

    fields = {name: {f.name: f for f in schema}}
    return _table(fields, name, [(f.name, from_arrow_type(f.type).simpleString()) for f in schema])


def _sources() -> str:
    """The Spark data sources' rows (`spark.read.format(...)`): their schemas are declared in datasources/."""
    from datasources import commitlog, consumequeue, indexfile, timerlog
    from decoding import metadata

    full = commitlog.arrow_schema("decoded", decompress=True)
    parts = ["## Data sources\n\nWhat `spark.read.format(NAME).load(PATH)` returns after `datasources.register(spark)`"
             " (PATH: a store root, a folder of them, a part folder or one file; options in library.md).\n",
             "### rocketmq-commitlog\n\nOne row per record, blank, stop or corrupt span.  `materialize=positions` "
             "gives the columns up to `excerpt_hex`; `frames` adds `frame`; `headers` (the default: what a plain "
             "`load()` gives) adds the decoded columns but `body`; `decoded` adds them all, and `decompress=true` "
             "the last two (the `columns` option keeps only those named).\n\n"
             + _source_table(list(commitlog.BASE_COLUMNS) + [commitlog.FRAME]
                             + [f for f in full if f.name not in commitlog.BASE_COLUMNS.names], "rocketmq-commitlog"),
             "### rocketmq-consumequeue\n\nOne row per consume-queue unit of every backend (`consumequeue/`, 5.x "
             "`batchconsumequeue/`), `zero_tail` run or corrupt span.\n\n"
             + _source_table(consumequeue.SCHEMA, "rocketmq-consumequeue"),
             "### rocketmq-index\n\nPer index file one `header` row, then one row per entry, or one `corrupt` row; "
             "a column is null on the rows it is not about.\n\n" + _source_table(indexfile.SCHEMA, "rocketmq-index"),
             "### rocketmq-timerlog\n\nOne row per unit of a 5.x broker's timer log (`timerlog/`): `entry`, the "
             "end-of-file `blank`, or `corrupt`; a store without a timer log has none.\n\n"
             + _source_table(timerlog.SCHEMA, "rocketmq-timerlog"),
             "### rocketmq-metadata\n\nOne of these tables per read (`option(\"table\", NAME)`), one row per "
             "store and value; every table starts with `broker` and ends with `source`, `error`, `error_key`, "
             "`error_value` (described under `checkpoint`).\n"]
    for i, table in enumerate(metadata.TABLES):
        schema = metadata.schema_of(table)
        shown = list(schema) if i == 0 else [f for f in schema if f.name in {c.name for c in metadata.TABLES[table]}]
        parts.append(f"#### table={table}\n\n" + _source_table(shown, f"rocketmq-metadata {table}"))
    return "\n".join(parts)


def generate() -> str:
    from runtime.session import build_session

    spark = build_session("schema-docs", master="local[2]", test_profile=True)
    try:
        return render(collect(spark))
    finally:
        spark.stop()


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    group = p.add_mutually_exclusive_group()
    group.add_argument("--write", metavar="PATH", help="write the document to PATH")
    group.add_argument("--check", metavar="PATH", help="exit 1 when PATH differs from the generated document")
    group.add_argument("--kinds", action="store_true", help="print every finding kind the audit can emit")
    args = p.parse_args(argv)
    if args.kinds:
        print("\n".join(sorted(finding_kinds())))
        return 0
    sys.path.insert(0, str(REPO / "tools"))
    from jobs_docs import emit  # the other generated document's writer/checker

    return emit(generate(), args.write, args.check)


if __name__ == "__main__":
    sys.exit(main())
