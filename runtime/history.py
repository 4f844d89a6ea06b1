"""The audit's history (``audit --history DIR``): a run is in it when its output and its rows both are, and a
damaged history is refused with the file named, never "repaired" by deleting what it holds.

DIR holds three Delta tables, each marked as ours in its Delta metadata (the table's ``name``:
``rocketmq-forensics audit history: <table>``) and holding its key columns:

  findings/  one row per finding, stamped with its run (``run_id``, ``run_time``)
  metrics/   the metrics in long format, stamped the same way
  runs/      one row per committed run: the list every reader goes by

**One run, two places.**  A run's output (``--out``) and its rows here cannot change in one step, so its commit
(runtime/commit.py ``JobRun.commit``, after every check of the run, chain of custody included) goes in an order where
whatever a kill (SIGKILL, power loss) interrupts, one fact decides the run: its output's marker.

  1. its journal, ``append-<run id>.json`` in the history's control folder (``.DIR.rocketmq-forensics/``, beside
     the claim): the run, its output, and each table's entries before the run touched it;
  2. findings, then metrics appended (unlisted: readers do not see them), the journal updated with their counts;
  3. the output committed (runtime/commit.py: a rename, or a marker written last): the run's commit point;
  4. the run's row appended to runs/ (:meth:`HistoryAppend.finish`), then the journal removed.

A run is committed iff its output's marker names it, committed.  Killed before 3, it left the previous output
and its journal: the next run that claims the history rolls it back (its rows deleted, and the files its appends
wrote that no version of the log lists).  Killed after 3, its output is in place and its journal says so: the next
claim lists it (4 again), and readers list it already (:func:`committed_runs` reads the journals, looking at each
one's output).  Killed inside 3 with the output's own journal left beside the output (a commit of two renames, or
a marker-last one, cut short), that output's next run finishes or rolls back its commit; until then this journal
stays and readers follow the output's marker.  An interrupt that raises (Ctrl-C, SIGTERM) before 3 rolls back at
once; after 3 it leaves 4 to the next claim, as a kill does.  So neither half is ever seen without the other.

**Nothing is deleted by inference.**  Rows and files are removed only for a run named by its own journal: that
run's rows (which runs/ does not list) and the files its appends wrote that no committed version lists, never a
file a version lists.  Rows that runs/ does not list and no journal names (an append an earlier version of this
suite cut short, or what a damaged log no longer lists) stay where they are, ignored by readers.

**A damaged history is refused, the file named.**  :func:`check_history` (before the audit starts, in trend, in
:func:`read_runs`) reads each table's log (:func:`check_log`): the commits since the last checkpoint all there,
each whole (lines of Delta actions, as many adds and removes as its commitInfo counts), the checkpoint readable,
and every data file the log lists present at the size it records; a data file whose bytes cannot be read is named
when a read fails (:func:`damage_behind`).  delta-rs reads an empty commit file as a version with no actions, so
without this a history whose newest commit was lost looked whole, one run short.  The message says what to do
(restore the file from a backup, or start a new history); the history is left untouched.

:func:`check_history` also refuses anything that is not an audit history: DIR is absent (or empty), or every table
in it is one of ours with its key columns; anything else is refused and left untouched.

The tables are written with delta-rs (no Spark: a history on any file system delta-rs knows: a local path,
``file://``, ``s3://``, ``gs://``, ``az://``/``abfss://``); a scheme only pyarrow knows (a registered
``store_format.fs`` scheme) is refused before the audit starts.
"""
from __future__ import annotations

import datetime as dt
import json
import os
import posixpath
import re
from dataclasses import dataclass
from urllib.parse import unquote

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
    "appended": "when this row was appended, after the run's output was committed: the run is listed from then"}
DELTA_SCHEMES = ("s3", "s3a", "gs", "gcs", "az", "abfs", "abfss", "adl", "azure", "file")

JOURNAL_PREFIX = "append-"  # append-<run id>.json in the history's control folder: a run's appends under way
APPENDING, APPENDED = "appending", "appended"  # a journal's states: appends under way; done, counts known
LOG = "_delta_log"
_COMMIT = re.compile(r"^(\d{20})\.json$")
_CHECKPOINT = re.compile(r"^(\d{20})\.checkpoint(?:\.\d+\.\d+)?\.parquet$")
_LAST_CHECKPOINT = "_last_checkpoint"
_TEMP_COMMIT = re.compile(r"^_commit_.*\.tmp$")  # delta-rs writes a commit here first, then renames it into place
_DATA_FILE = re.compile(r"^part-.*\.parquet$")  # the data files delta-rs writes (appends, and a delete's rewrites)
_ACTIONS = frozenset({"add", "remove", "metaData", "protocol", "commitInfo", "txn", "cdc", "domainMetadata",
                      "checkpointMetadata", "sidecar"})


class HistoryError(OutputError):
    """A --history that is not an audit history (refused, untouched; exit 2)."""


class HistoryDamaged(HistoryError):
    """An audit history whose Delta log or data files are damaged: refused, the file named, untouched (exit 2)."""


def _say(line: str, *, step: bool = True) -> None:
    from .progress import say

    say(line, step=step)


def _local(history: str) -> str | None:
    """The local path a --history names (a path, or a ``file:`` URI as RFC 8089 reads it; one naming another host
    is refused), or None for another file system's URI."""
    from store_format.errors import StoreFormatError

    try:
        return fs.local_path(history)
    except StoreFormatError as e:
        raise HistoryError(f"history {e.message}") from None


def _loc(history: str) -> fs.Location:
    # --history's spelling (fs.as_typed), not its Location: its links and ``..`` resolved as the OS does (fs.real),
    # which a Location (fs.resolve: lexically normalised) has already folded
    local = _local(history)
    if local is None:
        return fs.resolve(history)
    return fs.Location(pafs.LocalFileSystem(), fs.real(local))


def table_uri(history: fs.Location, table: str) -> str:
    """What delta-rs opens for ``history/table``."""
    history = fs.as_typed(history)  # the spelling it was given
    if _local(history) is None:
        return f"{history.rstrip('/')}/{table}"
    return posixpath.join(_loc(history).path, table)


def _delta(history: str, table: str):
    from deltalake import DeltaTable

    return DeltaTable(table_uri(history, table))


def _marked(dt_) -> str | None:
    name = dt_.metadata().name or ""
    return name[len(MARK):] if name.startswith(MARK) else None


def _control(history: str) -> fs.Location:
    """The history's control folder (its claim, the journals of runs under way): runtime/commit.py ``Target``."""
    from .commit import Target

    return Target(history).control


COMMIT_LIMIT = 64 << 20  # bytes of one Delta commit read at most (an audit history's are kilobytes)


def _read_bytes(loc: fs.Location, limit: int = COMMIT_LIMIT) -> bytes:
    """A small file of the log, read whole; more than ``limit`` bytes is an OSError (never read into memory)."""
    with loc.fs.open_input_stream(loc.path) as f:
        data = f.read(limit + 1)
    if len(data) > limit:
        raise OSError(f"more than {limit:,} bytes, more than any Delta commit of an audit history")
    return data


# ---------------------------------------------------------------------------------------------------------
# Damage: each table's log read whole before anything reads or writes the history


def _damaged(history: str, rel: str, what: str, *, droppable: bool = False) -> HistoryDamaged:
    """The refusal of a damaged history: the file, what is wrong with it, what to do.  ``droppable``: the newest
    version of runs/, which can be given up (the run it listed is then ignored, its rows kept)."""
    where = f"{history.rstrip('/')}/{rel}"
    drop = (f"; or, to give up the run that version listed (its rows stay, ignored), move {where} out of the "
            "history" if droppable else "")
    return HistoryDamaged(f"history {history} is damaged: {where} {what}.  The history is left untouched (the "
                          "audit and trend refuse it until it is repaired): restore that file from a backup of the "
                          f"history, or give the audit a new --history folder{drop}")


def check_log(history: fs.Location, table: str) -> int | None:
    """The version of ``history/table`` once its log reads whole, None when the table has no version yet; a damaged
    log raises :class:`HistoryDamaged` naming the file.  Whole: every commit since the newest checkpoint there (no
    gap), each a non-empty file of JSON lines that are Delta actions, with as many adds and removes as its
    commitInfo counts (a commit cut at a line's end), version 0 with the table's protocol and metadata, the newest
    checkpoint and ``_last_checkpoint`` readable.  Reads, changes nothing."""
    history = fs.as_typed(history)  # the spelling it was given
    log = _loc(history).child(table).child(LOG)
    rel = f"{table}/{LOG}"
    commits: dict[int, fs.Location] = {}
    checkpoints: dict[int, list[fs.Location]] = {}
    last = None
    for info in log.list():
        commit, checkpoint = _COMMIT.match(info.base_name), _CHECKPOINT.match(info.base_name)
        if commit:
            commits[int(commit.group(1))] = log.child(info.base_name)
        elif checkpoint:
            checkpoints.setdefault(int(checkpoint.group(1)), []).append(log.child(info.base_name))
        elif info.base_name == _LAST_CHECKPOINT:
            last = log.child(info.base_name)
    if not commits and not checkpoints:
        return None
    latest = max([*commits, *checkpoints])
    start = 0
    if checkpoints:
        newest = max(checkpoints)
        for part in checkpoints[newest]:
            _check_checkpoint(history, f"{rel}/{part.name}", part)
        start = newest + 1
    if last is not None:
        _check_last_checkpoint(history, f"{rel}/{_LAST_CHECKPOINT}", last, checkpoints)
    for version in range(start, latest + 1):
        if version not in commits:  # (the latest version is a commit: a later one than any checkpoint)
            before = max((v for v in [*commits, *checkpoints] if v < version), default=None)
            after = min(v for v in commits if v > version)
            raise _damaged(history, f"{rel}/{version:020d}.json",
                           f"is missing (the log goes from version {before} to {after})" if before is not None
                           else "is missing (the log has no first version)")
        _check_commit(history, f"{rel}/{version:020d}.json", commits[version], version,
                      droppable=table == RUNS and version == latest)
    return latest


def _check_commit(history: str, rel: str, loc: fs.Location, version: int, *, droppable: bool) -> None:
    try:
        raw = _read_bytes(loc)
    except OSError as e:
        raise _damaged(history, rel, f"cannot be read ({e})") from None
    if not raw.strip():
        raise _damaged(history, rel, f"is empty ({len(raw)} bytes): version {version} of the table is lost "
                                     "(a write the disk did not keep, or a copy cut short)", droppable=droppable)
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise _damaged(history, rel, f"is not UTF-8 text (byte {e.start}): overwritten", droppable=droppable) from None
    kinds: dict[str, int] = {}
    counted = None
    for number, line in enumerate(text.split("\n"), 1):
        if not line.strip():
            continue
        try:
            action = json.loads(line)
        except ValueError as e:
            raise _damaged(history, rel, f"is cut short or overwritten: its line {number} is not JSON ({e})",
                           droppable=droppable) from None
        kind = next(iter(action)) if isinstance(action, dict) and len(action) == 1 else None
        if kind not in _ACTIONS:
            raise _damaged(history, rel, f"is overwritten: its line {number} is not a Delta log action",
                           droppable=droppable)
        kinds[kind] = kinds.get(kind, 0) + 1
        if kind == "commitInfo" and isinstance(action[kind], dict):
            metrics = action[kind].get("operationMetrics") or {}
            added, removed = metrics.get("num_added_files"), metrics.get("num_removed_files")
            if isinstance(added, int) and isinstance(removed, int):
                counted = (added, removed)
    held = (kinds.get("add", 0), kinds.get("remove", 0))
    if counted is not None and counted != held:
        raise _damaged(history, rel, f"is cut short: its commitInfo counts {counted[0]} added and {counted[1]} "
                                     f"removed files, the file holds {held[0]} and {held[1]}", droppable=droppable)
    if version == 0 and not ("protocol" in kinds and "metaData" in kinds):
        raise _damaged(history, rel, "lacks the table's protocol and metadata (the first version holds them): cut "
                                     "short or overwritten")


def _check_checkpoint(history: str, rel: str, loc: fs.Location) -> None:
    import pyarrow.parquet as pq

    try:
        with loc.fs.open_input_file(loc.path) as f:
            pq.read_table(f)
    except Exception as e:  # noqa: BLE001 - any checkpoint pyarrow cannot read is damaged the same way
        raise _damaged(history, rel, f"cannot be read as a Delta checkpoint ({_first_line(e)})") from None


def _check_last_checkpoint(history: str, rel: str, loc: fs.Location, checkpoints: dict) -> None:
    try:
        version = json.loads(_read_bytes(loc).decode("utf-8")).get("version")
    except (OSError, ValueError, AttributeError) as e:
        raise _damaged(history, rel, f"cannot be read ({_first_line(e)})") from None
    if version not in checkpoints:
        raise _damaged(history, rel, f"names the checkpoint of version {version}, which is not in the log")


def _first_line(e: BaseException) -> str:
    text = str(e).strip().splitlines()
    return f"{type(e).__name__}: {text[0]}" if text else type(e).__name__


def _data_files(t) -> list[tuple[str, int | None]]:
    """(path below the table, size the log records) of each data file the table's current version lists; files
    outside the table (a URI: never what this suite writes) left out."""
    adds = pa.table(t.get_add_actions(flatten=True))
    return [(unquote(path), size) for path, size in zip(adds.column("path").to_pylist(),
                                                        adds.column("size_bytes").to_pylist()) if "://" not in path]


def _check_data_files(history: str, table: str, t) -> None:
    """Every data file the log lists is there, at the size the log records (a missing or cut file named)."""
    from .commit import files_below

    loc = _loc(history).child(table)
    base = loc.path.rstrip("/")
    sizes = {i.path[len(base) + 1:]: i.size for i in files_below(loc)}
    for rel, size in _data_files(t):
        if rel not in sizes:
            raise _damaged(history, f"{table}/{rel}", "is missing (the table's log lists it)")
        if size is not None and sizes[rel] != size:
            raise _damaged(history, f"{table}/{rel}", f"is {sizes[rel]:,} bytes where the table's log records "
                                                      f"{size:,}: cut short or replaced")


def _unreadable_file(history: str, table: str) -> HistoryDamaged | None:
    """The first data file of ``table`` whose bytes pyarrow cannot read, as a refusal; None when all read."""
    import pyarrow.parquet as pq

    loc = _loc(history).child(table)
    for rel, _ in _data_files(_delta(history, table)):
        where = loc.child(rel)
        try:
            with where.fs.open_input_file(where.path) as f:
                pq.read_table(f)
        except Exception as e:  # noqa: BLE001 - whatever stops the read, the file is named
            return _damaged(history, f"{table}/{rel}", f"cannot be read as Parquet ({_first_line(e)})")
    return None


def damage_behind(history: fs.Location) -> HistoryDamaged | None:
    """After a read of the history failed (Spark's and pyarrow's errors name no file): the damaged log or data file
    behind it, as a refusal; None when the history reads whole (the failure was something else)."""
    history = fs.as_typed(history)  # the spelling it was given
    for table in TABLES:
        if not _loc(history).child(table).child(LOG).is_dir():
            continue
        try:
            if check_log(history, table) is None:
                continue
            found = _unreadable_file(history, table)
        except HistoryDamaged as damaged:
            return damaged
        if found is not None:
            return found
    return None


def _read(history: str, table: str, columns=None, run_id: str | None = None) -> pa.Table:
    """``history/table`` (its current version) read with pyarrow, every row or those of ``run_id``; a data file
    that cannot be read is named (:class:`HistoryDamaged`)."""
    import pyarrow.dataset as ds

    try:
        data = _delta(history, table).to_pyarrow_dataset()
        return data.to_table(columns=columns, filter=None if run_id is None else ds.field("run_id") == run_id)
    except Exception:  # noqa: BLE001 - named when it is the history's damage, else raised as it is
        found = damage_behind(history)
        if found is not None:
            raise found from None
        raise


# ---------------------------------------------------------------------------------------------------------
# What a history is


def check_history(history: fs.Location, *, must_exist: bool = False) -> bool:
    """Refuse (:class:`HistoryError`) a ``--history`` that is not an audit history, touching nothing: it must be
    absent or empty (unless ``must_exist``), or a folder whose findings/, metrics/ and runs/ are each absent or a
    Delta table of ours (the metadata's name) with its key columns, and nothing else; refuse a damaged one
    (:class:`HistoryDamaged`: its log and data files, :func:`check_log`).  True when it holds runs."""
    history = fs.as_typed(history)  # the spelling it was given
    if _local(history) is None:
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
    unborn = _unborn_tables(history)
    present = [name for name in names if name not in unborn]
    earlier = [name for name in present if _check_table(history, name)]
    if earlier and RUNS not in present:
        if sorted(earlier) != [FINDINGS, METRICS]:
            raise HistoryError(f"history {history} holds only {', '.join(earlier)} of an earlier version's audit "
                               f"history (both {FINDINGS} and {METRICS} expected); refused, left untouched")
        return True  # an earlier version's history: its complete runs are listed in runs/ at the claim
    if must_exist and RUNS not in present and not committed_runs(history).num_rows:
        raise HistoryError(f"history {history} holds no complete audit run (no {RUNS}/ table: no run that appended "
                           "to it was committed)")
    return bool(present)


def _unborn_tables(history: str) -> set[str]:
    """Tables with no version yet that a run's journal says it created (its first append, killed before the
    commit): the run's own, rolled back at the next claim, so not refused as "not a Delta table"."""
    journals = _journals(history)
    return {table for table in TABLES
            if _loc(history).child(table).is_dir() and check_log(history, table) is None
            and any(j.before.get(table) is None for j in journals)}


def _check_table(history: str, name: str) -> bool:
    """Refuse ``history/name`` unless it is that table of an audit history, whole; True for one of an earlier
    version (findings/ or metrics/ with their key columns, written before the tables were marked)."""
    from deltalake.exceptions import TableNotFoundError

    where = f"{history.rstrip('/')}/{name}"
    if check_log(history, name) is None:
        raise HistoryError(f"history {history}: {name}/ is not a Delta table: not an audit history; refused, left "
                           "untouched")
    try:
        t = _delta(history, name)
    except TableNotFoundError:
        raise HistoryError(f"history {history}: {name}/ is not a Delta table: not an audit history; refused, left "
                           "untouched") from None
    except Exception as e:  # noqa: BLE001 - any table delta-rs cannot read is refused the same way
        raise HistoryError(f"history {history}: {name}/ cannot be read as a Delta table "
                           f"({type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}); refused, left "
                           "untouched") from None
    kind = _marked(t)
    columns = {f.name for f in pa.schema(t.schema().to_arrow())}
    earlier = kind is None and name in (FINDINGS, METRICS) and all(c in columns for c in KEYS[name])
    if not earlier and kind != name:
        what = "it is not marked as one" if kind is None else f"it is marked as the {kind} table"
        raise HistoryError(f"history {history}: {where} is a Delta table but not an audit history's {name} table "
                           f"({what} in its Delta metadata: written by something else, e.g. an extract); refused, "
                           "left untouched")
    missing = [c for c in KEYS[name] if c not in columns]
    if missing:
        raise HistoryError(f"history {history}: {where} lacks the key columns {', '.join(missing)} of an audit "
                           "history; refused, left untouched")
    _check_data_files(history, name, t)
    return earlier


# ---------------------------------------------------------------------------------------------------------
# A run's journal: its appends under way (the module docstring's steps 1 to 4)


def _plain(name) -> bool:
    return isinstance(name, str) and name not in ("", ".", "..") and "/" not in name and "\\" not in name


@dataclass
class Journal:
    """``append-<run id>.json`` in the history's control folder: a run's appends between its step 1 and its step 4
    (the module docstring), what its next claim settles by."""

    loc: fs.Location
    run_id: str
    run_time: dt.datetime
    out: str  # the run's --out as given (runs/' ``out``)
    output: str  # where that is: a local path made absolute, or the URI (what the output's marker is read from)
    state: str
    before: dict  # table -> None (the table was absent) or {"files": [its data files], "log": [temp commits]}
    counts: dict  # APPENDED: {"findings": rows, "metrics": rows}

    @classmethod
    def begin(cls, history: fs.Location, run_id: str, run_time: dt.datetime, out: fs.Location) -> "Journal":
        """Step 1: the journal written (before the run's first append), each table as it is now."""
        from .commit import Target

        history, out = fs.as_typed(history), fs.as_typed(out)  # the spellings they were given
        target = Target(out)
        before = {}
        for table in TABLES:
            loc = _loc(history).child(table)
            if not loc.is_dir():
                before[table] = None
                continue
            before[table] = {"files": [i.base_name for i in loc.list() if _DATA_FILE.match(i.base_name)],
                             "log": [i.base_name for i in loc.child(LOG).list() if _TEMP_COMMIT.match(i.base_name)]}
        journal = cls(_control(history).child(f"{JOURNAL_PREFIX}{run_id}.json"), run_id, run_time, out,
                      target.uri or target.loc.path, APPENDING, before, {})
        journal.write()
        return journal

    def write(self) -> None:
        from .commit import TOOL, write_json

        write_json(self.loc, {"tool": TOOL, "what": "an audit run's appends to its history, under way",
                              "run_id": self.run_id, "run_time": self.run_time.isoformat(), "out": self.out,
                              "output": self.output, "state": self.state, "before": self.before,
                              "counts": self.counts}, atomic=True)

    def appended(self, counts: dict) -> None:
        """Step 2 done: the counts written (before the output's commit)."""
        self.state, self.counts = APPENDED, dict(counts)
        self.write()

    @classmethod
    def read(cls, history: fs.Location, loc: fs.Location) -> "Journal":
        """A journal, validated: anything but one this suite wrote is refused (:class:`HistoryError`), untouched."""
        from .commit import TOOL, read_json

        history = fs.as_typed(history)  # the spelling it was given

        data = read_json(loc)
        run_id = loc.name[len(JOURNAL_PREFIX):-len(".json")]
        why = _invalid(data, run_id, TOOL)
        if why:
            raise HistoryError(f"history {history}: {loc.path} is not the journal of a history append this suite "
                               f"wrote ({why}); refused, left untouched.  If no run is using the history, move that "
                               "file out of its folder and run again (the rows it would name stay, ignored)")
        return cls(loc, run_id, dt.datetime.fromisoformat(data["run_time"]), data["out"], data["output"],
                   data["state"], data["before"], data.get("counts") or {})

    def committed(self) -> bool | None:
        """Whether the run's output holds it, committed (the run's commit point passed): True, False, or None when
        its output's own commit was cut short (that output's next run decides) or cannot be looked at now."""
        from .commit import commit_of

        try:
            return commit_of(self.output, self.run_id)
        except Exception:  # noqa: BLE001 - an output no longer reachable from here: undecided, left as it is
            return None

    def row(self) -> pa.Table:
        """The run's row in runs/ (appended now)."""
        return pa.table({"run_id": [self.run_id], "run_time": [self.run_time], "findings": [self.counts[FINDINGS]],
                         "metrics": [self.counts[METRICS]], "out": [self.out],
                         "appended": [dt.datetime.now(dt.timezone.utc)]}, schema=RUNS_SCHEMA)


def _invalid(data, run_id: str, tool: str) -> str | None:
    """Why ``data`` is not a journal of run ``run_id`` (None: it is one)."""
    if not isinstance(data, dict) or data.get("tool") != tool:
        return "not a JSON object naming this tool"
    if data.get("run_id") != run_id or not _plain(run_id):
        return f"it names run {data.get('run_id')!r}, its file name run {run_id!r}"
    if data.get("state") not in (APPENDING, APPENDED):
        return f"state {data.get('state')!r}"
    if not all(isinstance(data.get(k), str) and data[k] for k in ("out", "output")):
        return "no output named"
    try:
        when = dt.datetime.fromisoformat(str(data.get("run_time")))
    except ValueError:
        return f"run_time {data.get('run_time')!r}"
    if when.tzinfo is None:
        return "run_time without a time zone"
    before = data.get("before")
    if not isinstance(before, dict) or set(before) != set(TABLES):
        return "no state of the tables before it"
    for table, was in before.items():
        if was is None:
            continue
        if not isinstance(was, dict) or not all(isinstance(was.get(k), list) and all(map(_plain, was[k]))
                                                for k in ("files", "log")):
            return f"{table}: entries that are not plain names"
    counts = data.get("counts") or {}
    if data["state"] == APPENDED and not all(type(counts.get(t)) is int and counts[t] >= 0
                                             for t in (FINDINGS, METRICS)):
        return "appended, without its row counts"
    return None


def _journal_locs(history: str) -> list[fs.Location]:
    control = _control(history)
    return [control.child(i.base_name) for i in control.list()
            if i.base_name.startswith(JOURNAL_PREFIX) and i.base_name.endswith(".json")]


def _journals(history: str) -> list[Journal]:
    return [Journal.read(history, loc) for loc in _journal_locs(history)]


# ---------------------------------------------------------------------------------------------------------
# Reading


def _runs_table(history: str) -> pa.Table:
    """The rows of runs/ (an earlier version's history, with no runs/: its complete runs)."""
    if check_log(history, RUNS) is None:
        return _earlier_runs(history)
    return _read(history, RUNS)


def committed_runs(history: fs.Location) -> pa.Table:
    """The runs readers may see: those runs/ lists, and those whose output is committed but whose run ended before
    listing them (:func:`unlisted_runs`); empty when there is none."""
    history = fs.as_typed(history)  # the spelling it was given
    runs = _runs_table(history)
    rows = [j.row() for j in unlisted_runs(history, runs)]
    return pa.concat_tables([runs.select(RUNS_SCHEMA.names).cast(RUNS_SCHEMA), *rows]) if rows else runs


def unlisted_runs(history: fs.Location, runs: pa.Table | None = None) -> list[Journal]:
    """The journals of committed runs runs/ does not list yet: each one's output holds it, committed, and its
    appends were done (the run ended between the module docstring's steps 3 and 4; the next claim lists it)."""
    history = fs.as_typed(history)  # the spelling it was given
    listed = set((_runs_table(history) if runs is None else runs).column("run_id").to_pylist())
    return [j for j in _journals(history)
            if j.run_id not in listed and j.state == APPENDED and j.committed() is True]


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
        g = _read(history, table, ["run_id", "run_time"]).group_by(["run_id", "run_time"]).aggregate(
            [("run_id", "count")])
        counts[table] = {(r, w): n for r, w, n in zip(g.column("run_id").to_pylist(), g.column("run_time").to_pylist(),
                                                      g.column("run_id_count").to_pylist())}
    both = sorted((k for k in counts[FINDINGS] if k in counts[METRICS]), key=lambda k: (k[1], k[0]))
    now = dt.datetime.now(dt.timezone.utc)
    return pa.table({"run_id": [k[0] for k in both], "run_time": [k[1] for k in both],
                     "findings": [counts[FINDINGS][k] for k in both], "metrics": [counts[METRICS][k] for k in both],
                     "out": [""] * len(both), "appended": [now] * len(both)}, schema=RUNS_SCHEMA)


def adopt_earlier(history: fs.Location) -> None:
    """With the history claimed: an earlier version's history (no runs/) gets its runs/ table listing every run
    both its tables hold, in one commit, so that this version appends to it and trend reads it; said."""
    history = fs.as_typed(history)  # the spelling it was given
    if not _loc(history).is_dir() or check_log(history, RUNS) is not None:
        return
    runs = _earlier_runs(history)
    if runs.num_rows:
        _append(history, RUNS, runs.to_reader(), RUNS_SCHEMA)
        _say(f"history: written by an earlier version; its {runs.num_rows} complete run(s) listed in {RUNS}/",
             step=False)


def read_runs(spark, history: fs.Location, table: str):
    """``history/table`` as a Spark DataFrame, only the rows of committed runs (:func:`committed_runs`); a damaged
    history is refused first (:func:`check_history`)."""
    from pyspark.sql import functions as F

    from .output import read_table

    history = fs.as_typed(history)  # the spelling it was given

    check_history(history, must_exist=True)
    ids = committed_runs(history).column("run_id").to_pylist()
    frame = read_table(spark, table_uri(history, table) if not fs.is_uri(history) else
                       f"{history.rstrip('/')}/{table}", "delta")
    return frame.where(F.col("run_id").isin(ids)) if ids else frame.limit(0)


# ---------------------------------------------------------------------------------------------------------
# Writing: a run's appends, its listing, and what a run that ended on the way left


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


def _dataset(folder: fs.Location):
    import pyarrow.dataset as ds

    loc = fs.resolve(folder)
    return ds.dataset(loc.path, filesystem=loc.fs, format="parquet")


def append_tables(history: fs.Location, findings: pa.Table | None, metrics: pa.Table | None) -> None:
    """Rows of any runs (stamped with run_id/run_time) appended as complete runs: for tests and imports."""
    history = fs.as_typed(history)  # the spelling it was given
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


def _quoted(s: str) -> str:
    return s.replace("'", "''")


def _rows_of(history: str, table: str, run_id: str) -> int:
    if check_log(history, table) is None:
        return 0
    return _read(history, table, ["run_id"], run_id).num_rows


def _list(history: str, journal: Journal) -> None:
    """Step 4: the run's row in runs/ (once: a run listed already is not listed again)."""
    if check_log(history, RUNS) is not None and _rows_of(history, RUNS, journal.run_id):
        return
    _append(history, RUNS, journal.row().to_reader(), RUNS_SCHEMA)


def _roll_back(history: str, journal: Journal) -> None:
    """A run's appends undone (the run is not listed: its output was never committed): its rows deleted from
    findings and metrics, the files it wrote that no version lists removed, its journal removed."""
    for table in (METRICS, FINDINGS):
        if _rows_of(history, table, journal.run_id):
            _delta(history, table).delete(f"run_id = '{_quoted(journal.run_id)}'")
    _remove_strays(history, journal)
    _forget(journal)


def _remove_strays(history: str, journal: Journal) -> None:
    """The data files the journal's run wrote into each table that no version lists (an append or a delete killed
    between writing its files and committing them), delta-rs's commits killed before their rename, and a table the
    run created and never committed; only files named as delta-rs names them, never an entry that was there
    before the run, nor a file any version of the log lists (:func:`_named_files`: so not even a forged journal
    removes committed data, or anything but delta-rs's files)."""
    from .commit import delete

    for table in TABLES:
        loc = _loc(history).child(table)
        if not loc.is_dir():
            continue
        was = journal.before.get(table) or {"files": [], "log": []}
        log = loc.child(LOG)
        named = _named_files(history, table)
        for info in loc.list():
            if not _DATA_FILE.match(info.base_name) or info.base_name in was["files"] or info.base_name in named:
                continue
            if info.type != pafs.FileType.File or (loc.local_path is not None
                                                   and os.path.islink(loc.child(info.base_name).path)):
                continue  # not what delta-rs writes: not the run's (and a link is never followed)
            delete(loc.child(info.base_name))
            _say(f"history: removed {table}/{info.base_name} (written by run {journal.run_id}, and no version of "
                 "the table lists it)", step=False)
        for info in log.list():
            if _TEMP_COMMIT.match(info.base_name) and info.base_name not in was["log"]:
                delete(log.child(info.base_name))
        if journal.before.get(table) is None and check_log(history, table) is None \
                and all(i.base_name == LOG for i in loc.list()) and not log.list():
            delete(loc)  # the table its first append would have created: nothing of it committed


def _named_files(history: str, table: str) -> str:
    """Every file name the table's log holds, as one text to look names up in: each commit still there, each
    checkpoint (the adds and removes of the commits it stands for)."""
    import pyarrow.parquet as pq

    log = _loc(history).child(table).child(LOG)
    texts = []
    for info in log.list():
        where = log.child(info.base_name)
        try:
            if _COMMIT.match(info.base_name):
                texts.append(_read_bytes(where).decode("utf-8", "replace"))
            elif _CHECKPOINT.match(info.base_name):
                with where.fs.open_input_file(where.path) as f:
                    checkpoint = pq.ParquetFile(f)
                    actions = checkpoint.read(columns=[c for c in ("add", "remove")
                                                       if c in checkpoint.schema_arrow.names])
                for column in actions.column_names:
                    texts += [a["path"] for a in actions.column(column).to_pylist() if a and a.get("path")]
        except Exception as e:  # noqa: BLE001 - a log file that cannot be read: nothing is removed, the file named
            raise _damaged(history, f"{table}/{LOG}/{info.base_name}", f"cannot be read ({_first_line(e)})") from None
    return "\n".join(texts)


def settle(history: fs.Location, own: str | None = None) -> None:
    """With the history claimed: each journal another run left (it ended between its steps 1 and 4) settled by
    its output's marker: listed already (the journal removed), its output committed (the run listed now), its
    output's own commit cut short (left for that output's next run), or else rolled back; each said."""
    history = fs.as_typed(history)  # the spelling it was given
    listed = set(_runs_table(history).column("run_id").to_pylist())
    for journal in _journals(history):
        if journal.run_id == own:
            continue
        run = journal.run_id
        if run in listed:
            _remove_strays(history, journal)
            _forget(journal)
            continue
        took = journal.committed()
        if took is True:
            _check_counts(history, journal)
            _remove_strays(history, journal)
            _list(history, journal)
            _forget(journal)
            _say(f"history: run {run} was committed (its output {journal.out}) but ended before the history listed "
                 "it: listed now", step=False)
        elif took is None:
            _say(f"history: run {run} ended while committing its output {journal.out}: its rows stay unlisted until "
                 "a run on that output finishes or rolls back its commit", step=False)
        else:
            _roll_back(history, journal)
            _say(f"history: rolled back the appends of run {run} (it ended before its output {journal.out} was "
                 "committed)", step=False)
    from .commit import delete

    control = _control(history)
    for info in control.list():  # a journal's atomic write killed before its rename (runtime/commit.py write_bytes)
        if info.base_name.startswith(JOURNAL_PREFIX) and info.base_name.endswith(".tmp"):
            delete(control.child(info.base_name))


def _forget(journal: Journal) -> None:
    from .commit import delete

    delete(journal.loc)


def _check_counts(history: str, journal: Journal) -> None:
    """A committed run is listed only with all its rows: the counts its journal recorded are in the tables."""
    if journal.state != APPENDED:
        raise HistoryError(f"history {history}: {journal.loc.path} says run {journal.run_id}'s appends were not "
                           f"finished, yet its output {journal.out} is committed: refused, left untouched")
    for table in (FINDINGS, METRICS):
        held = _rows_of(history, table, journal.run_id)
        if held != journal.counts[table]:
            raise HistoryError(f"history {history}: run {journal.run_id}'s journal {journal.loc.path} records "
                               f"{journal.counts[table]} {table} rows and the table holds {held}: refused, left "
                               "untouched (restore the history from a backup, or move that journal out of its folder: "
                               "the run then stays unlisted)")


# ---------------------------------------------------------------------------------------------------------
# The history as a participant of a run's commit


def _participant_base():
    from .commit import Participant

    return Participant


class HistoryAppend(_participant_base()):
    """``--history`` in an audit run: validated and claimed before the audit starts (what earlier runs left
    settled), its rows appended at the commit before the output (undone if a later commit fails), the run listed
    after the output's commit (:meth:`finish`)."""

    order = 5

    def __init__(self, run, history: fs.Location, *, inputs=()):
        from .commit import Target, recover as recover_target
        from .output import check_apart

        history = fs.as_typed(history)  # the spelling it was given

        check_apart(history, inputs, what="history")
        check_history(history)
        self.run, self.shown, self.name = run, history, f"history {history}"
        self.target = Target(history, inputs=inputs)
        self.claim = self.target.claim(run.identity, "history")
        try:
            recover_target(self.target, self.claim, lambda entry: entry.name.startswith(JOURNAL_PREFIX))
            check_history(history)  # again, as it is now that no other run writes it
            adopt_earlier(history)
            settle(history, own=run.identity.run_id)
        except BaseException:
            self.claim.release()
            raise
        self.source: tuple[str, str, str] | None = None
        self.journal: Journal | None = None
        self.listed = self.failed = False

    def stage(self, findings_dir: fs.Location, metrics_dir: fs.Location, out: fs.Location) -> None:
        """What the commit appends (the run's staged findings and metrics), and the output the run commits."""
        out = fs.as_typed(out).rstrip("/")  # as the audit names its output (runs/' ``out``)
        self.source = (findings_dir, metrics_dir, out)

    def commit(self) -> None:
        """Steps 1 and 2: the journal, then findings and metrics appended (unlisted)."""
        if self.source is None:
            return
        findings_dir, metrics_dir, out = self.source
        _say(f"appending to the history at {self.shown}")
        self.journal = Journal.begin(self.shown, self.run.identity.run_id, self.run.started, out)
        counts = {}
        for table, folder in ((FINDINGS, findings_dir), (METRICS, metrics_dir)):
            d = _dataset(folder)
            counts[table] = d.count_rows()
            _append(self.shown, table, d.to_batches(), d.schema)
            _say(f"history: {table} appended ({counts[table]} rows)", step=False)
        self.journal.appended(counts)

    def finish(self) -> None:
        """Step 4, after the output's commit: the run's row in runs/, then its journal removed."""
        if self.journal is None:
            return
        _say(f"history: listing run {self.journal.run_id}")
        _list(self.shown, self.journal)
        self.listed = True
        _say(f"history: run {self.journal.run_id} recorded", step=False)
        _forget(self.journal)

    def undo(self) -> None:
        """The run failed after the appends: rolled back, unless its output holds it after all (an interrupt
        that came after the output's commit point, before its commit returned) or its commit was cut short (the
        output's next run decides): then the journal stays, for the next claim to settle by the output."""
        if self.journal is None or self.journal.committed() is not False:
            return
        _roll_back(self.shown, self.journal)
        self.journal = None

    def fail(self, reason: str) -> None:
        try:
            self.undo()
        except BaseException:  # noqa: BLE001 - the journal stays: the next run's claim rolls it back
            pass
        self.failed = True

    def release(self) -> None:
        self.claim.release()

    def kept(self) -> str:
        if self.listed:
            return ""
        if self.journal is None:
            return f"{self.shown}: the history does not list this run (trend ignores any part of it)"
        took = self.journal.committed()
        if took is None:
            return (f"{self.shown}: the output's commit was cut short; the next run on that output finishes or "
                    "undoes it, and the history follows")
        if took:
            return (f"{self.shown}: the run's output is committed; the history lists the run at its next audit "
                    "--history (trend reads it as listed already)")
        return f"{self.shown}: the history does not list this run; the next audit --history removes its rows"


def claim_history(run, history: fs.Location, *, inputs=()) -> HistoryAppend:
    """The run's :class:`HistoryAppend` for ``history``: claimed once (``prepare`` claims, ``run`` gets it back)."""
    history = fs.as_typed(history)  # the spelling it was given
    for p in run.participants:
        if isinstance(p, HistoryAppend) and p.shown == history:
            return p
    return run.add(HistoryAppend(run, history, inputs=inputs))
