"""The audit's history (``audit --history DIR``): one transaction per run, read only where it is whole.

DIR holds three Delta tables, each marked as ours in its Delta metadata (the table's ``name``:
``rocketmq-forensics audit history: <table>``) and holding its key columns:

  findings/  one row per finding, stamped with its run (``run_id``, ``run_time``)
  metrics/   the metrics in long format, stamped the same way
  runs/      one row per run whose findings AND metrics were appended: the run marker, written last

A run is appended at its commit (jobs/commit.py), after every check of the run passed, chain of custody
included: findings, then metrics, then its row in ``runs``.  Readers (``trend``, :func:`read_runs`) see only the
runs listed in ``runs``; an append cut short (an interrupt between two commits) is ignored by them and rolled back
by the next run that claims the history (:func:`recover`: its rows deleted, and ``data-*`` folders no log lists
removed).  :func:`check_history` runs before the audit starts: DIR is absent (or empty), or every table in it is
one of ours with its key columns; anything else is refused and left untouched.

The tables are written with delta-rs (no Spark: a history on any file system delta-rs knows: a local path,
``file://``, ``s3://``, ``gs://``, ``az://``/``abfss://``); a scheme only pyarrow knows (a registered
``store_format.fs`` scheme) is refused before the audit starts.
"""
from __future__ import annotations

import datetime as dt
import posixpath

import pyarrow as pa
import pyarrow.fs as pafs

from store_format import fs

from .output import OutputError

FINDINGS, METRICS, RUNS = "findings", "metrics", "runs"
TABLES = (FINDINGS, METRICS, RUNS)
KEYS = {
    FINDINGS: ("run_id", "run_time", "finding_id", "check", "severity", "broker"),
    METRICS: ("run_id", "run_time", "broker", "scope", "metric", "value"),
    RUNS: ("run_id", "run_time", "findings", "metrics"),
}
MARK = "rocketmq-forensics audit history: "  # + the table's name: the Delta table's metadata name
RUNS_SCHEMA = pa.schema([("run_id", pa.string()), ("run_time", pa.timestamp("us", "UTC")),
                         ("findings", pa.int64()), ("metrics", pa.int64()), ("out", pa.string()),
                         ("appended", pa.timestamp("us", "UTC"))])
RUNS_MEANING = {  # docs/output-schemas.md (tools/schema_docs.py); kept off the table's schema, as every description
    "run_id": "the run's id (as in its findings and metrics rows)",
    "run_time": "when the run started (UTC): trend orders a history's runs by it",
    "findings": "the run's rows appended to `HISTORY/findings`",
    "metrics": "the run's rows appended to `HISTORY/metrics`",
    "out": "the run's `--out`, where its report and tables are",
    "appended": "when this row was appended, last of the run's three appends: the run is in the history from then"}
DELTA_SCHEMES = ("s3", "s3a", "gs", "gcs", "az", "abfs", "abfss", "adl", "azure", "file")


class HistoryError(OutputError):
    """A --history that is not an audit history (refused, untouched; exit 2)."""


def _say(line: str) -> None:
    from .progress import say

    say(line)


def _loc(history: str) -> fs.Location:
    if fs.is_uri(history) and not history.startswith("file://"):
        return fs.resolve(history)
    local = history[len("file://"):] if history.startswith("file://") else history
    return fs.Location(pafs.LocalFileSystem(), fs.real(local))


def table_uri(history: str, table: str) -> str:
    """What delta-rs opens for ``history/table``."""
    if fs.is_uri(history) and not history.startswith("file://"):
        return f"{history.rstrip('/')}/{table}"
    return posixpath.join(_loc(history).path, table)


def _delta(history: str, table: str):
    from deltalake import DeltaTable

    return DeltaTable(table_uri(history, table))


def _marked(dt_) -> str | None:
    name = dt_.metadata().name or ""
    return name[len(MARK):] if name.startswith(MARK) else None


def check_history(history: str, *, must_exist: bool = False) -> bool:
    """Refuse (:class:`HistoryError`) a ``--history`` that is not an audit history, touching nothing: it must be
    absent or empty (unless ``must_exist``), or a folder whose findings/, metrics/ and runs/ are each absent or a
    Delta table of ours (the metadata's name) with its key columns, and nothing else.  True when it holds runs."""
    if fs.is_uri(history) and not history.startswith("file://"):
        scheme = history.split("://", 1)[0].lower()
        if scheme not in DELTA_SCHEMES:
            raise HistoryError(f"history {history}: the history's Delta tables are written with delta-rs, which "
                               f"cannot open {scheme}:// (it opens local paths, s3://, gs://, az:// and abfss://); "
                               "choose a history on one of those")
    loc = _loc(history)
    info = loc.info()
    if info.type == pafs.FileType.NotFound or (info.type == pafs.FileType.Directory and not loc.list()):
        if must_exist:
            raise HistoryError(f"{history}: no audit history here (expected a folder written by rocketmq-forensics "
                               "audit --history)")
        return False
    if info.type != pafs.FileType.Directory:
        raise HistoryError(f"history {history} exists and is not a folder: not an audit history; refused, left "
                           "untouched")
    names = sorted(i.base_name for i in loc.list())
    other = [n for n in names if n not in TABLES]
    if other:
        raise HistoryError(f"history {history} is not an audit history: it holds {', '.join(other[:5])} (an audit "
                           f"history holds only the Delta tables {', '.join(TABLES)}); refused, left untouched")
    earlier = [name for name in names if _check_table(history, name)]
    if earlier and RUNS not in names:
        if sorted(earlier) != [FINDINGS, METRICS]:
            raise HistoryError(f"history {history} holds only {', '.join(earlier)} of an earlier version's audit "
                               f"history (both {FINDINGS} and {METRICS} expected); refused, left untouched")
        return True  # an earlier version's history: its complete runs are listed in runs/ at the claim
    if must_exist and RUNS not in names:
        raise HistoryError(f"history {history} holds no complete audit run (no {RUNS}/ table: every append was cut "
                           "short); the next audit --history on it cleans it")
    return bool(names)


def _check_table(history: str, name: str) -> bool:
    """Refuse ``history/name`` unless it is that table of an audit history; True for one of an earlier version
    (findings/ or metrics/ with their key columns, written before the tables were marked)."""
    from deltalake import DeltaTable
    from deltalake.exceptions import TableNotFoundError

    where = f"{history.rstrip('/')}/{name}"
    try:
        t = DeltaTable(table_uri(history, name))
    except TableNotFoundError:
        raise HistoryError(f"history {history}: {name}/ is not a Delta table: not an audit history; refused, left "
                           "untouched") from None
    except Exception as e:  # noqa: BLE001 - any table delta-rs cannot read is refused the same way
        raise HistoryError(f"history {history}: {name}/ cannot be read as a Delta table "
                           f"({type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}); refused, left "
                           "untouched") from None
    kind = _marked(t)
    columns = {f.name for f in pa.schema(t.schema().to_arrow())}
    if kind is None and name in (FINDINGS, METRICS) and all(c in columns for c in KEYS[name]):
        return True  # written by an earlier version, before the marker (and runs/): adopted at the claim
    if kind != name:
        what = "it is not marked as one" if kind is None else f"it is marked as the {kind} table"
        raise HistoryError(f"history {history}: {where} is a Delta table but not an audit history's {name} table "
                           f"({what} in its Delta metadata: written by something else, e.g. an extract); refused, "
                           "left untouched")
    missing = [c for c in KEYS[name] if c not in columns]
    if missing:
        raise HistoryError(f"history {history}: {where} lacks the key columns {', '.join(missing)} of an audit "
                           "history; refused, left untouched")
    return False


# ---------------------------------------------------------------------------------------------------------
# Reading


def committed_runs(history: str) -> pa.Table:
    """The ``runs`` table: the runs readers may see (empty when there is none)."""
    try:
        t = _delta(history, RUNS)
    except Exception:  # noqa: BLE001 - no runs table: no complete run, or an earlier version's history
        return _earlier_runs(history)
    return t.to_pyarrow_table()


def _earlier_runs(history: str) -> pa.Table:
    """The runs of a history written before runs/ existed (findings/ and metrics/ not marked): every run in both
    tables, with its row counts; empty for any other history."""
    counts = {}
    for table in (FINDINGS, METRICS):
        try:
            t = _delta(history, table)
        except Exception:  # noqa: BLE001 - no such table: no runs
            return RUNS_SCHEMA.empty_table()
        if _marked(t) is not None:  # this version's tables: only runs/ lists runs
            return RUNS_SCHEMA.empty_table()
        g = t.to_pyarrow_dataset().to_table(columns=["run_id", "run_time"]).group_by(["run_id", "run_time"]).aggregate(
            [("run_id", "count")])
        counts[table] = {(r, w): n for r, w, n in zip(g.column("run_id").to_pylist(), g.column("run_time").to_pylist(),
                                                      g.column("run_id_count").to_pylist())}
    both = sorted((k for k in counts[FINDINGS] if k in counts[METRICS]), key=lambda k: (k[1], k[0]))
    now = dt.datetime.now(dt.timezone.utc)
    return pa.table({"run_id": [k[0] for k in both], "run_time": [k[1] for k in both],
                     "findings": [counts[FINDINGS][k] for k in both], "metrics": [counts[METRICS][k] for k in both],
                     "out": [""] * len(both), "appended": [now] * len(both)}, schema=RUNS_SCHEMA)


def adopt_earlier(history: str) -> None:
    """With the history claimed: an earlier version's history (no runs/) gets its runs/ table listing every run
    both its tables hold, in one commit, so that this version appends to it and trend reads it; said."""
    if not _loc(history).is_dir() or _loc(history).child(RUNS).exists():
        return
    runs = _earlier_runs(history)
    if runs.num_rows:
        _append(history, RUNS, runs.to_reader(), RUNS_SCHEMA)
        _say(f"history: written by an earlier version; its {runs.num_rows} complete run(s) listed in {RUNS}/")


def read_runs(spark, history: str, table: str):
    """``history/table`` as a Spark DataFrame, only the rows of committed runs (listed in ``runs``)."""
    from pyspark.sql import functions as F

    from .output import read_table

    ids = committed_runs(history).column("run_id").to_pylist()
    frame = read_table(spark, table_uri(history, table) if not fs.is_uri(history) else
                       f"{history.rstrip('/')}/{table}", "delta")
    return frame.where(F.col("run_id").isin(ids)) if ids else frame.limit(0)


# ---------------------------------------------------------------------------------------------------------
# Writing: one run, one transaction


def _append(history: str, table: str, data, schema: pa.Schema) -> None:
    from deltalake import DeltaTable, write_deltalake

    uri = table_uri(history, table)
    try:
        target = DeltaTable(uri)
    except Exception:  # noqa: BLE001 - not there yet: created, marked
        target = uri
    reader = data if isinstance(data, pa.RecordBatchReader) else pa.RecordBatchReader.from_batches(schema, data)
    write_deltalake(target, reader, mode="append", schema_mode="merge", name=MARK + table,
                    description=f"written by rocketmq-forensics audit --history ({table})")


def _dataset(folder: str):
    import pyarrow.dataset as ds

    loc = fs.resolve(folder)
    return ds.dataset(loc.path, filesystem=loc.fs, format="parquet")


def append_run(history: str, run_id: str, run_time: dt.datetime, findings_dir: str, metrics_dir: str,
               out: str = "") -> None:
    """One run's findings and metrics (Parquet folders: the run's staged outputs) appended to ``history``:
    findings, then metrics, then the run's row in ``runs``, the marker readers require; each step said."""
    counts = {}
    for table, folder in ((FINDINGS, findings_dir), (METRICS, metrics_dir)):
        d = _dataset(folder)
        counts[table] = d.count_rows()
        _append(history, table, d.to_batches(), d.schema)
        _say(f"history: {table} appended ({counts[table]} rows)")
    row = pa.table({"run_id": [run_id], "run_time": [run_time], "findings": [counts[FINDINGS]],
                    "metrics": [counts[METRICS]], "out": [out],
                    "appended": [dt.datetime.now(dt.timezone.utc)]}, schema=RUNS_SCHEMA)
    _append(history, RUNS, row.to_reader(), RUNS_SCHEMA)
    _say(f"history: run {run_id} recorded")


def append_tables(history: str, findings: pa.Table | None, metrics: pa.Table | None) -> None:
    """Rows of any runs (stamped with run_id/run_time) appended as complete runs: for tests and imports."""
    runs: dict[str, object] = {}
    for table, t in ((FINDINGS, findings), (METRICS, metrics)):
        if t is None:
            continue
        _append(history, table, t.to_reader(), t.schema)
        for r, when in zip(t.column("run_id").to_pylist(), t.column("run_time").to_pylist()):
            runs.setdefault(r, when)
    now = dt.datetime.now(dt.timezone.utc)
    rows = pa.table({"run_id": list(runs), "run_time": list(runs.values()), "findings": [0] * len(runs),
                     "metrics": [0] * len(runs), "out": [""] * len(runs), "appended": [now] * len(runs)},
                    schema=RUNS_SCHEMA)
    _append(history, RUNS, rows.to_reader(), RUNS_SCHEMA)


def remove_run(history: str, run_id: str) -> None:
    """Undo one run's append: its marker first (readers stop seeing it), then its rows."""
    for table in (RUNS, METRICS, FINDINGS):
        try:
            t = _delta(history, table)
        except Exception:  # noqa: BLE001 - a table the run never reached
            continue
        t.delete(f"run_id = '{_quoted(run_id)}'")


def _quoted(s: str) -> str:
    return s.replace("'", "''")


def recover(history: str) -> None:
    """With the history claimed: rows of runs whose append was cut short (in findings or metrics, not in runs)
    deleted, and ``data-*`` folders no table's log lists (an append killed mid-write) removed; each said."""
    if not _loc(history).is_dir():
        return
    committed = set(committed_runs(history).column("run_id").to_pylist())
    for table in (FINDINGS, METRICS):
        try:
            t = _delta(history, table)
        except Exception:  # noqa: BLE001 - not there
            continue
        ids = set(t.to_pyarrow_dataset().to_table(columns=["run_id"]).column("run_id").unique().to_pylist())
        for orphan in sorted(i for i in ids - committed if i is not None):
            t.delete(f"run_id = '{_quoted(orphan)}'")
            _say(f"history: removed the {table} of run {orphan} (its append was cut short)")
        _clean_orphan_folders(history, table, t)


def _clean_orphan_folders(history: str, table: str, t) -> None:
    """``data-*`` folders and data files of ``table`` that no commit of its log names (an append killed between
    writing its files and committing them); nothing is removed where the log cannot be read whole (a checkpoint,
    or commits cleaned up), since a file named only there must stay."""
    loc = _loc(history).child(table)
    log = loc.child("_delta_log")
    entries = log.list()
    commits = sorted((i for i in entries if i.base_name.endswith(".json") and i.base_name[:-5].isdigit()),
                     key=lambda i: i.base_name)
    if any("checkpoint" in i.base_name for i in entries) or not commits or commits[0].base_name != f"{0:020d}.json":
        return
    named = []
    for info in commits:
        with log.fs.open_input_stream(info.path) as f:
            named.append(f.read().decode("utf-8", "replace"))
    text = "\n".join(named)
    for info in loc.list():
        orphan = info.base_name not in text and (
            (info.type == pafs.FileType.Directory and info.base_name.startswith("data-"))
            or (info.type == pafs.FileType.File and info.base_name.startswith("part-")
                and info.base_name.endswith(".parquet")))
        if orphan:
            (loc.fs.delete_dir if info.type == pafs.FileType.Directory else loc.fs.delete_file)(info.path)
            _say(f"history: removed {table}/{info.base_name} (files of an append that was cut short)")


# ---------------------------------------------------------------------------------------------------------
# The history as a participant of a run's commit


def _participant_base():
    from .commit import Participant

    return Participant


class HistoryAppend(_participant_base()):
    """``--history`` in an audit run: validated and claimed before the audit starts, appended at the commit
    (before the output), undone if a later commit fails."""

    order = 5

    def __init__(self, run, history: str, *, inputs=()):
        from .commit import Target, recover as recover_target
        from .output import check_apart

        check_apart(history, inputs, what="history")
        check_history(history)
        self.run, self.shown, self.name = run, history, f"history {history}"
        self.target = Target(history)
        self.claim = self.target.claim(run.identity, "history")
        try:
            recover_target(self.target, self.claim)
            adopt_earlier(history)  # before recover(), which removes rows of runs runs/ does not list
            recover(history)
        except BaseException:
            self.claim.release()
            raise
        self.source: tuple[str, str, str] | None = None
        self.appended = self.failed = False

    def stage(self, findings_dir: str, metrics_dir: str, out: str) -> None:
        """What the commit appends (the run's staged findings and metrics)."""
        self.source = (findings_dir, metrics_dir, out)

    def commit(self) -> None:
        if self.source is None:
            return
        _say(f"appending to the history at {self.shown}")
        self.appended = True  # from here on, an undo removes whatever part of the run was appended
        append_run(self.shown, self.run.identity.run_id, self.run.started, *self.source)

    def undo(self) -> None:
        if self.appended:
            remove_run(self.shown, self.run.identity.run_id)

    def fail(self, reason: str) -> None:
        if self.appended:  # cut short mid-append: rolled back now if possible, else by the next run
            try:
                remove_run(self.shown, self.run.identity.run_id)
            except BaseException:  # noqa: BLE001 - the next run's recover() removes it
                pass
        self.failed = True

    def release(self) -> None:
        self.claim.release()

    def kept(self) -> str:
        return f"{self.shown}: the history does not list this run (trend ignores any part of it)"


def claim_history(run, history: str, *, inputs=()) -> HistoryAppend:
    """The run's :class:`HistoryAppend` for ``history``: claimed once (``prepare`` claims, ``run`` gets it back)."""
    for p in run.participants:
        if isinstance(p, HistoryAppend) and p.shown == history:
            return p
    return run.add(HistoryAppend(run, history, inputs=inputs))
