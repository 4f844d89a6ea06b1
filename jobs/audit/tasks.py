"""How the audit runs its work: a list of tasks (:class:`Task`), run by the executor runtime/session.py chooses.

A task is a picklable object with ``run(out)``, ``describe()``, ``cost()`` and ``broker``; it writes findings and
named partial tables to ``out`` (an :class:`Emitter`).  :func:`run_tasks` runs a stage's tasks where the
executor says: ``driver``, in this process's threads, the costliest first (a local session's executors would be
this machine's cores anyway); ``spark``, packed into at most ``slots`` bins of about equal cost, each bin pickled
apart and run as one Spark task that receives that bin only (a classic session's ``parallelize`` of the bins, one
per partition; over Spark Connect, a local relation of them through ``mapInArrow``): no data source planning round
trip, and no task unpickling its whole stage; on a cluster (``auto``) the driver's threads begin a stage while the
executors start, and hand what they have not started to that Spark job once the executors are ready
(:class:`ExecutorWarmUp`).  Every stage's tables come back in the tasks' order, wherever each ran.  What many
tasks share (a :class:`Shared` object: a broker's facts) is pickled once per stage and sent once per executor (a
classic session's broadcast; over Spark Connect, with each Spark task's function), not with every bin.  A Python
worker runs task after task (Spark reuses it, runtime/session.py), keeping what it loaded: the project's modules,
the compiled kernels, the stage's shared objects.

Findings never travel: each task writes its own as one Parquet file into the run's findings folder (stamped
with the run and each finding's id, :func:`findings.as_written`), named after the task, so a retried task
writes the same file again.  What comes back to the driver is only the partial tables (one Arrow IPC stream
per task and name, rows of :data:`OUTPUT_SCHEMA`), which :class:`Outputs` reads back; per-check counts of the
findings each task wrote are one of them (``_counts``).
"""
from __future__ import annotations

import io
import os
import time
from dataclasses import dataclass, field
from typing import Callable, Protocol

import pyarrow as pa
import pyarrow.compute as pc

from store_format.fs import Location

from .findings import as_written

OUTPUT_SCHEMA = pa.schema([("table", pa.string()), ("payload", pa.binary())])
# a Spark job's results: the row before each task's tables, its number as its payload, so the driver puts every
# table in the tasks' order (as the driver's threads do), whichever bins and executors ran them
TASK_MARK = "_task"
COUNTS = pa.schema([("check", pa.string()), ("severity", pa.string()), ("count", pa.int64())])
# what each task was (its ``kind``: its class, or how it ran) and took: --profile's, and the state's count of the
# tasks that gave a kept part back (jobs/audit/state.py)
TIMING = pa.schema([("kind", pa.string()), ("name", pa.string()), ("seconds", pa.float64())])
FAILURES = pa.schema([("broker", pa.string()), ("what", pa.string()), ("error", pa.string()), ("where", pa.string())])
# where a task wrote a spilled partial (Emitter.spill): the part file, its rows, its size, the physical offsets its
# rows span (null when the table has none): the part is addressable by file and range (issue 40); and the one
# broker its rows are of (null when the table has no broker column, or rows of more than one)
SPILLED = pa.schema([("table", pa.string()), ("path", pa.string()), ("rows", pa.int64()), ("bytes", pa.int64()),
                     ("first_offset", pa.int64()), ("last_offset", pa.int64()), ("broker", pa.string())])


class Shared:
    """An object many tasks of a stage refer to (jobs/audit/scan.py's ``BrokerFacts``): on a Spark job it is
    pickled once for the stage and unpickled once per Python worker (:func:`ship`), each bin carrying only a
    reference to it; so the tasks that share it in one worker share one object, as they do in the driver."""


class Task(Protocol):
    """One piece of a stage's work (jobs/audit/survey.py, scan.py)."""

    @property
    def broker(self) -> str: ...

    def describe(self) -> str:
        """What it reads, for progress, --profile and a failure's finding."""

    def cost(self) -> int:
        """About the bytes it reads: tasks are packed and ordered by it."""

    def run(self, out: "Emitter") -> None:
        """Read and check, emitting findings, detail tables and partial tables to ``out``."""


@dataclass(frozen=True)
class RunInfo:
    """Where a run's tasks write their findings, and the stamps every finding row carries."""

    findings_dir: Location | None  # None: findings are not written (a stage that makes none)
    run_id: str = ""
    run_time: object = None  # a UTC datetime
    tables_dir: Location | None = None  # where tasks write detail tables too large to travel (jobs/audit/resend.py)
    partials_dir: Location | None = None  # where tasks write their spilled partial tables (Emitter.spill)


#: spilled rows a task holds of a partial before it writes them into its part file (:meth:`Emitter.spill`): a survey
#: task of a 16 GiB broker's delay levels spilled a million pending rows, held whole until its end and copied once
#: more to be written (~250 MiB in the driver's survey)
SPILL_HOLD_BYTES = 16 << 20


class Emitter:
    """What one task produced: finding tables, and partial tables by name (merged on the driver).  ``sink``: the
    run and the part name the task writes its files as (:func:`run_one`); with it, each spilled partial's rows are
    written as they pass :data:`SPILL_HOLD_BYTES`, not held to the task's end."""

    def __init__(self, sink: tuple["RunInfo", str] | None = None):
        self.findings: list[pa.Table] = []
        self.partials: dict[str, list[pa.Table]] = {}
        self.tables: dict[str, list[pa.Table]] = {}
        self.spilled: dict[str, list[pa.Table]] = {}
        self.spilled_files: list[SpilledFile] = []  # held without a sink (:meth:`spill_file`)
        self._files_written: list[tuple[dict, Location]] = []  # with the sink (:meth:`spill_file`): row, file
        self._gathered: dict[str, tuple[list, Callable]] = {}
        self._sink = sink
        self._writing: dict[str, _SpillWriter] = {}  # name -> its part file, open while the task runs
        # audit --state: what the task's last run left it to go on from (its kept part's memos by name, jobs/audit/
        # kept.py KeptFiles); None: no state keeps this task's part (its hooks leave nothing for a next run)
        self.resumed: dict | None = None

    def gathered(self, name: str, finish: Callable) -> list:
        """A list a hook adds to under ``name`` across its calls in one task (a survey's hook is called a file at a
        time); ``finish(items, out)`` runs once the task's files are done (:meth:`finish_gathered`): what a hook does
        once a task rather than once a file (a fleet's broker has five delay levels of a few pending messages each,
        and reading their records cost most of its survey when done a level at a time)."""
        if name not in self._gathered:
            self._gathered[name] = ([], finish)
        return self._gathered[name][0]

    def finish_gathered(self) -> None:
        """Each :meth:`gathered` list's ``finish``, once: by the task at the end of its run (before what it emitted
        is kept or merged), and by :func:`run_one` and :meth:`merge` for a task that did not."""
        while self._gathered:
            name = next(iter(self._gathered))
            items, finish = self._gathered.pop(name)
            finish(items, self)

    def table(self, name: str, table: pa.Table) -> None:
        """Rows of the detail table ``name``, written by the task as its own Parquet file (as findings are)."""
        if table.num_rows:
            self.tables.setdefault(name, []).append(table)

    def finding(self, table: pa.Table) -> None:
        if table.num_rows:
            self.findings.append(table)

    def partial(self, name: str, table: pa.Table) -> None:
        self.partials.setdefault(name, []).append(table)

    def spill(self, name: str, table: pa.Table) -> None:
        """Rows of the partial table ``name`` that grow with the messages: the task writes them as its own Parquet
        part (as findings are) and only where it is comes back (a :data:`SPILLED` row); the driver reads every
        task's part as one ``pyarrow.dataset`` (:meth:`Outputs.dataset`), so its memory does not hold them all.
        An emitter without a sink (a sub-task's, a kept task's) holds them for the task's, or for its state."""
        if not table.num_rows:
            return
        if self._sink is None:
            self.spilled.setdefault(name, []).append(table)
            return
        if name not in self._writing:
            self._writing[name] = _SpillWriter(name, table.schema, self._sink)
        self._writing[name].write(table)

    def spill_file(self, f: "SpilledFile") -> None:
        """A spilled partial's part file already encoded (:meth:`pack_spilled`): with a sink written as it is, beside
        the task's own part files of spilled rows; without one held, as :meth:`spill` holds rows."""
        if self._sink is None:
            self.spilled_files.append(f)
        else:
            self._write_file(f, *self._sink)

    def _write_file(self, f: "SpilledFile", run: RunInfo, part: str) -> None:
        from runtime.output import out_write

        stem = part[:-len(".parquet")] if part.endswith(".parquet") else part
        path = _spill_path(run, f"{stem}.{len(self._files_written)}.parquet", f.name)
        out_write(path, f.data)
        self._files_written.append(({"table": f.name, "path": path.uri(), "rows": f.rows, "bytes": len(f.data),
                                     "first_offset": f.first_offset, "last_offset": f.last_offset,
                                     "broker": f.broker}, path))

    def pack_spilled(self) -> None:
        """The spilled rows held without a sink encoded as part files, one per partial (a kept task's, which the
        state keeps and the run writes as they are: encoded once, never decoded and encoded again)."""
        for name, tables in self.spilled.items():
            self.spilled_files.append(spilled_file(name, tables))
        self.spilled = {}

    def merge(self, other: "Emitter") -> None:
        """What ``other`` emitted, after what this one has (a task made of several, jobs/audit/scan.py)."""
        other.finish_gathered()
        self.findings += other.findings
        for mine, theirs in ((self.partials, other.partials), (self.tables, other.tables)):
            for name, tables in theirs.items():
                mine.setdefault(name, []).extend(tables)
        for name, tables in other.spilled.items():
            for t in tables:
                self.spill(name, t)
        for f in other.spilled_files:
            self.spill_file(f)

    def abandon(self) -> None:
        """A failed task's part files removed (what it wrote is no part: no :data:`SPILLED` row names it)."""
        from runtime.output import out_remove_quietly

        for w in self._writing.values():
            w.abort()
        for _, path in self._files_written:
            out_remove_quietly(path)
        self._writing, self._files_written = {}, []

    def write_findings(self, run: RunInfo, part: str) -> None:
        """The task's findings as one Parquet file ``part`` in the run's findings folder, and their counts; its
        detail tables as one file ``part`` each in ``tables_dir/<name>``."""
        from runtime.output import out_join, write_parquet_file  # through the fs seam: a path or a URI

        self.write_spilled(run, part)
        for name, tables in self.tables.items():
            if run.tables_dir is None:
                raise RuntimeError(f"a task wrote the table {name} in a stage that writes none")
            write_parquet_file(pa.concat_tables(tables), out_join(run.tables_dir, name, part))
        if not self.findings:
            return

        t = pa.concat_tables(self.findings)
        counts = t.group_by(["check", "severity"]).aggregate([("check", "count")])
        self.partial("_counts", pa.table({"check": counts.column("check"), "severity": counts.column("severity"),
                                          "count": counts.column("check_count").cast(pa.int64())}, schema=COUNTS))
        if run.findings_dir is None:
            raise RuntimeError("a task made findings in a stage that writes none")
        write_parquet_file(as_written(t, run.run_id, run.run_time), out_join(run.findings_dir, part))

    def write_spilled(self, run: RunInfo, part: str) -> None:
        """Each spilled partial as one Parquet file ``part`` in ``partials_dir/<name>`` (a retried task writes the
        same file again), and a :data:`SPILLED` row for it in the ``_spilled`` partial; the tables are let go."""
        for name, tables in self.spilled.items():  # held without a sink: written now
            if name not in self._writing:
                self._writing[name] = _SpillWriter(name, tables[0].schema, (run, part))
            for t in tables:
                self._writing[name].write(t)
        self.spilled = {}
        for f in self.spilled_files:  # held without a sink: written now
            self._write_file(f, run, part)
        self.spilled_files = []
        rows = [w.close() for w in self._writing.values()] + [row for row, _ in self._files_written]
        self._writing, self._files_written = {}, []
        if rows:
            self.partial("_spilled", pa.Table.from_pylist(rows, schema=SPILLED))

    def batches(self):
        for name, tables in self.partials.items():
            table = pa.concat_tables(tables) if len(tables) > 1 else tables[0]
            yield pa.RecordBatch.from_pylist([{"table": name, "payload": ipc_bytes(table)}], schema=OUTPUT_SCHEMA)


def _spill_path(run: RunInfo, part: str, name: str) -> Location:
    """Where a task's part file ``part`` of the spilled partial ``name`` goes: the run's partials folder."""
    from runtime.output import out_join

    if run.partials_dir is None:
        raise RuntimeError(f"a task spilled the partial {name} in a stage that writes none")
    return out_join(run.partials_dir, name, part)


@dataclass(frozen=True)
class SpilledFile:
    """A spilled partial's part file as Parquet bytes, with what its :data:`SPILLED` row says of its rows."""

    name: str
    data: bytes
    rows: int
    first_offset: int | None
    last_offset: int | None
    broker: str | None


def spilled_file(name: str, tables: list[pa.Table]) -> SpilledFile:
    """``tables`` (of one schema) encoded as the part file ``name`` a task would spill them as, in memory."""
    w = _SpillWriter(name, tables[0].schema)
    for t in tables:
        w.write(t)
    return w.close_to_bytes()


class _SpillWriter:
    """One spilled partial's part file of a task, written :data:`SPILL_HOLD_BYTES` of rows at a time
    (runtime.output.RowGroupWriter); its rows and the physical offsets they span, for its :data:`SPILLED` row.
    ``sink``: the run and the task's part name (the file in the run's partials folder); None: in memory, the bytes
    taken at the end (:meth:`close_to_bytes`)."""

    def __init__(self, name: str, schema: pa.Schema, sink: tuple[RunInfo, str] | None = None):
        from runtime.output import RowGroupWriter, out_parquet_writer

        self.name, self.path = name, None
        if sink is None:
            import pyarrow.parquet as pq

            from decoding.columns import plain

            from runtime.output import dictionary_columns

            self._buffer = pa.BufferOutputStream()
            open_file = lambda first: pq.ParquetWriter(  # noqa: E731
                self._buffer, plain(schema.empty_table()).schema, use_dictionary=dictionary_columns(first))
        else:
            self.path = _spill_path(*sink, name)
            open_file = lambda first: out_parquet_writer(self.path, schema, first)  # noqa: E731
        self._file = RowGroupWriter(open_file, hold_bytes=SPILL_HOLD_BYTES)
        self.rows, self.first, self.last = 0, None, None
        self.brokers: set = set()  # the brokers its rows are of, up to two (past one the part is of none alone)

    def write(self, t: pa.Table) -> None:
        from decoding.columns import plain

        self._file.write(plain(t))
        self.rows += t.num_rows
        if "broker" in t.column_names and len(self.brokers) < 2:
            self.brokers.update(pc.unique(t.column("broker")).to_pylist())
        if "physical_offset" in t.column_names:
            lo, hi = (v.as_py() for v in pc.min_max(t.column("physical_offset")).values())
            if lo is not None:
                self.first = lo if self.first is None else min(self.first, lo)
                self.last = hi if self.last is None else max(self.last, hi)

    @property
    def _broker(self) -> str | None:
        return next(iter(self.brokers)) if len(self.brokers) == 1 else None

    def abort(self) -> None:
        """Given up (its task failed): the file closed and removed."""
        from runtime.output import out_remove_quietly

        self._file.abort()
        if self.path is not None:
            out_remove_quietly(self.path)

    def close(self) -> dict:
        """Closed; its :data:`SPILLED` row."""
        from runtime.output import out_size

        self._file.close(empty_file=True)
        return {"table": self.name, "path": self.path.uri(), "rows": self.rows, "bytes": out_size(self.path),
                "first_offset": self.first, "last_offset": self.last, "broker": self._broker}

    def close_to_bytes(self) -> SpilledFile:
        """Closed, in memory: the file's bytes and what its row will say."""
        self._file.close(empty_file=True)
        return SpilledFile(self.name, self._buffer.getvalue().to_pybytes(), self.rows, self.first, self.last,
                           self._broker)


def ipc_bytes(table: pa.Table, compression: str | None = None) -> bytes:
    """A table as one Arrow IPC stream (what travels back from a task, and what a state keeps of one:
    ``compression``, a codec Arrow reads back by itself, e.g. "zstd")."""
    sink = io.BytesIO()
    with pa.ipc.new_stream(sink, table.schema, options=pa.ipc.IpcWriteOptions(compression=compression)) as w:
        w.write_table(table)
    return sink.getvalue()


def failure_row(broker: str, what: str, e: BaseException) -> pa.Table:
    """A failure as a row of :data:`FAILURES`: where it happened is the innermost frame of the project's code."""
    import traceback

    frames = [f for f in traceback.extract_tb(e.__traceback__)
              if any(f"{os.sep}{p}{os.sep}" in f.filename
                     for p in ("store_format", "datasources", "decoding", "runtime", "jobs"))]
    where = f"{frames[-1].filename.rsplit(os.sep, 2)[-2]}/{os.path.basename(frames[-1].filename)}:{frames[-1].lineno}" \
        if frames else None
    return pa.table({"broker": [broker], "what": [what], "error": [f"{type(e).__name__}: {e}"], "where": [where]},
                    schema=FAILURES)


def pack(tasks: list, slots: int, numbers: list[int] | None = None) -> list[list]:
    """Tasks in at most ``slots`` bins of about equal cost (largest first into the least loaded bin), each bin
    keeping the tasks' order, as ``(number, task)`` pairs (``numbers``: each task's in its stage, by default its
    place in ``tasks``): a Spark task costs tens of milliseconds before it runs a line of ours, so thousands of
    small files must not be as many Spark tasks."""
    numbers = list(range(len(tasks))) if numbers is None else numbers
    bins: list[list] = [[] for _ in range(max(1, min(slots, len(tasks))))]
    load = [0] * len(bins)
    for i in sorted(range(len(tasks)), key=lambda i: -tasks[i].cost()):
        b = load.index(min(load))
        bins[b].append(i)
        load[b] += max(tasks[i].cost(), 1)
    return [[(numbers[i], tasks[i]) for i in sorted(b)] for b in bins]


def run_one(i: int, task, run: RunInfo) -> Emitter:
    """Run task number ``i``: its findings written (as ``part-<i>``), what it returns to the driver in its emitter."""
    part = f"part-{i:05d}.parquet"
    out = Emitter((run, part))
    t0 = time.perf_counter()
    try:
        task.run(out)
        out.finish_gathered()
    except Exception as e:  # one broker's bad file is that broker's finding: the others' tasks go on
        out.abandon()
        out = Emitter()  # what the task made before it failed is incomplete: only the failure is kept
        out.partial("_failures", failure_row(task.broker, task.describe(), e))
    out.write_findings(run, part)
    out.partial("_timing", pa.table({"kind": [getattr(task, "kind", type(task).__name__)], "name": [task.describe()],
                                     "seconds": [time.perf_counter() - t0]}, schema=TIMING))
    return out


# A Spark task's own work: one row per bin, its tasks pickled apart from every other bin's, so each Spark task
# unpickles only what it runs (a function closing over the stage's bins would ship all of them to every task);
# the Shared objects they refer to travel apart, once (Shipped).
WORK = pa.schema([("bin", pa.int64()), ("work", pa.binary())])
# What each bin cost its Spark task around the tasks themselves, for --profile's fixed cost of a cluster audit
# (jobs/audit/job.py): which Python worker ran it and whether that process was new (Spark's command and the
# project imported, the kernels loaded: a reused worker keeps them), its work's size and unpickling, and when it
# started and ended on the wall clock (the driver compares them with when it submitted the job).
SPARK_TASKS = pa.schema([
    ("bin", pa.int64()), ("host", pa.string()), ("pid", pa.int64()), ("worker_tasks_before", pa.int64()),
    ("worker_age_seconds", pa.float64()), ("work_bytes", pa.int64()), ("unpickle_seconds", pa.float64()),
    ("kernel_load_seconds", pa.float64()), ("kernel_passes_compiled", pa.int64()), ("tasks_seconds", pa.float64()),
    ("started", pa.float64()), ("ended", pa.float64())])
# What the driver spent on a stage run as a Spark job (one row): pickling the bins, the job from its submission
# to its results back (wall clock, as SPARK_TASKS'), and reading the results into tables.
SPARK_JOB = pa.schema([
    ("bins", pa.int64()), ("work_bytes", pa.int64()), ("shared_bytes", pa.int64()), ("pickle_seconds", pa.float64()),
    ("submitted", pa.float64()),
    ("returned", pa.float64()), ("results_bytes", pa.int64()), ("read_seconds", pa.float64())])

_spark_tasks_here = 0  # Spark tasks this Python process has run: > 0 in a reused worker (spark.python.worker.reuse)
_shared_here: tuple[str, list] = ("", [])  # the last stage's Shared objects this process unpickled, by content key


@dataclass(frozen=True)
class Shipped:
    """A stage's work as shipped (:func:`ship`): each bin's tasks pickled apart, numbered, with their
    :class:`Shared` objects replaced by references into ``shared`` (those objects pickled once), whose ``key`` (a
    digest of its bytes) lets a reused Python worker keep them from bin to bin."""

    bins: list[tuple[int, bytes]]
    shared: bytes
    key: str


def ship(bins: list[list]) -> Shipped:
    """Each bin pickled on its own (with cloudpickle, as Spark pickles a function: a family's hook may be any
    callable), every :class:`Shared` object it refers to pickled once for all bins."""
    import hashlib

    from pyspark import cloudpickle

    shared: list = []
    numbers: dict[int, int] = {}  # id() of a Shared object -> its place in ``shared``

    class Pickler(cloudpickle.Pickler):
        def persistent_id(self, obj):
            if not isinstance(obj, Shared):
                return None
            if id(obj) not in numbers:
                numbers[id(obj)] = len(shared)
                shared.append(obj)
            return numbers[id(obj)]

    def dumps(items) -> bytes:
        sink = io.BytesIO()
        Pickler(sink).dump(items)
        return sink.getvalue()

    pickled = [(b, dumps(items)) for b, items in enumerate(bins)]
    blob = cloudpickle.dumps(shared)
    return Shipped(pickled, blob, hashlib.sha256(blob).hexdigest())


def _worker_age() -> float | None:
    """Seconds since this process started (Linux /proc), else None: at a Python worker's first Spark task, how
    long it took from its fork to our code (Spark's command read, the project imported)."""
    try:
        with open("/proc/self/stat") as f:
            started_ticks = int(f.read().rsplit(")", 1)[1].split()[19])
        with open("/proc/uptime") as f:
            uptime = float(f.read().split()[0])
        return max(0.0, uptime - started_ticks / os.sysconf("SC_CLK_TCK"))
    except (OSError, ValueError, IndexError, AttributeError):
        return None


def _unpickle(payload: bytes, shared: list):
    """Pickled tasks (:func:`ship`), their references to :class:`Shared` objects resolved in ``shared``."""
    import pickle

    unpickler = pickle.Unpickler(io.BytesIO(payload))
    unpickler.persistent_load = shared.__getitem__
    return unpickler.load()


def _shared_objects(key: str, blob) -> list:
    """The stage's :class:`Shared` objects, unpickled once per Python worker and stage (``blob()`` gives their
    bytes: a broadcast's value is read only when this worker has not them yet)."""
    global _shared_here
    if _shared_here[0] != key:
        _shared_here = ("", [])  # the last stage's let go first
        _shared_here = (key, _unpickle(blob(), []))
    return _shared_here[1]


def run_shipped(work, run: RunInfo, key: str, shared):
    """Run the bins one Spark task received (``(bin, pickled tasks)`` pairs, :func:`ship`; ``shared()`` gives the
    bytes of the stage's Shared objects, whose digest is ``key``); yields their partial tables as
    ``(name, Arrow IPC stream)`` pairs, and one :data:`SPARK_TASKS` row per bin (``_spark_tasks``)."""
    import socket

    from decoding.kernels import KERNEL_LOAD, tune_allocator

    global _spark_tasks_here
    tune_allocator()
    for b, payload in work:
        started, t0 = time.time(), time.perf_counter()
        before, age = _spark_tasks_here, _worker_age() if _spark_tasks_here == 0 else None
        had_kernels = bool(KERNEL_LOAD)
        items = _unpickle(payload, _shared_objects(key, shared))
        unpickled = time.perf_counter() - t0
        for i, task in items:
            yield TASK_MARK, str(i).encode()
            for batch in run_one(i, task, run).batches():
                yield from zip(batch.column(0).to_pylist(), batch.column(1).to_pylist())
        _spark_tasks_here += 1
        loaded = KERNEL_LOAD if KERNEL_LOAD and not had_kernels else {}  # loaded by this bin's tasks
        row = pa.table({"bin": [b], "host": [socket.gethostname()], "pid": [os.getpid()],
                        "worker_tasks_before": [before], "worker_age_seconds": [age], "work_bytes": [len(payload)],
                        "unpickle_seconds": [unpickled], "kernel_load_seconds": [loaded.get("seconds")],
                        "kernel_passes_compiled": [loaded.get("compiled")],
                        "tasks_seconds": [time.perf_counter() - t0 - unpickled], "started": [started],
                        "ended": [time.time()]}, schema=SPARK_TASKS)
        cost = Emitter()
        cost.partial("_spark_tasks", row)
        for batch in cost.batches():
            yield from zip(batch.column(0).to_pylist(), batch.column(1).to_pylist())


def _arrow_runner(run: RunInfo, key: str, shared: bytes):
    """:func:`run_shipped` over ``mapInArrow``'s batches of :data:`WORK` rows (a Spark Connect session); the
    stage's shared objects travel with this function, once per Spark task."""
    def execute(batches):
        for batch in batches:
            work = zip(batch.column(0).to_pylist(), batch.column(1).to_pylist())
            for name, payload in run_shipped(work, run, key, lambda: shared):
                yield pa.RecordBatch.from_pylist([{"table": name, "payload": payload}], schema=OUTPUT_SCHEMA)
    return execute


def _run_on_spark(spark, shipped: Shipped, run: RunInfo) -> list[tuple[str, bytes]]:
    """The shipped bins run as one Spark job; the ``(name, payload)`` rows they return.  A classic session
    parallelizes them into as many partitions: one Spark task per bin, its partition that bin alone, the shared
    objects a broadcast (sent to each executor once, read by each Python worker once).  A Spark Connect session
    has no RDDs or broadcasts: the bins are a local relation, which the server splits into at most its default
    parallelism of partitions (a task then runs a few bins in turn), each task still receiving only its own bins
    and the shared objects once."""
    from runtime.session import is_connect

    if is_connect(spark):
        from pyspark.sql.pandas.types import from_arrow_schema

        work = pa.table({"bin": [b for b, _ in shipped.bins], "work": [w for _, w in shipped.bins]}, schema=WORK)
        rows = spark.createDataFrame(work).mapInArrow(_arrow_runner(run, shipped.key, shipped.shared),
                                                      from_arrow_schema(OUTPUT_SCHEMA)).toArrow()
        return list(zip(rows.column("table").to_pylist(), rows.column("payload").to_pylist()))
    import functools

    sc = spark.sparkContext
    shared = sc.broadcast(shipped.shared)
    try:
        rdd = sc.parallelize(shipped.bins, len(shipped.bins))
        return rdd.mapPartitions(functools.partial(run_shipped, run=run, key=shipped.key,
                                                   shared=lambda: shared.value)).collect()
    finally:
        shared.destroy()  # the job is done: the executors' and driver's copies let go


def run_tasks(spark, tasks: list[Task], executor, run: RunInfo, *, phase=None,
              warming: "ExecutorWarmUp | None" = None) -> "Outputs":
    """Every task run where ``executor`` (runtime.session.Executor) says; their partial tables, in the tasks' order.
    ``driver``: in this process, ``slots`` threads at a time, the costliest first (the compiled kernels and most of
    numpy and Arrow release the GIL); ``phase`` (a :class:`runtime.progress.Phase`) is told the cost and count of
    the tasks done, as a Spark job's tracker tells it.  ``spark``: packed into at most ``slots`` bins, one Spark
    job, each Spark task receiving its own bin only (:func:`ship`); the partial tables then include what the job
    cost around the tasks (``_spark_job``, ``_spark_tasks``: the fixed cost of a cluster audit, which --profile
    names).  With ``warming`` (an :class:`ExecutorWarmUp` not done yet) the driver's threads start on the tasks
    while the executors come up, and the tasks not started when they are ready go to Spark as that one job
    (``_driver_first`` says how many ran where)."""
    if not tasks:
        return Outputs()
    if executor.where == "driver":
        return _run_in_driver(tasks, executor.slots, run, phase)
    if warming is None or warming.ready.is_set():
        by_task, job = _spark_stage(spark, list(enumerate(tasks)), executor.slots, run)
        return Outputs.in_task_order(by_task, _spark_job=job)
    return _run_driver_first(spark, tasks, executor, run, phase, warming)


def _spark_stage(spark, numbered: list[tuple[int, Task]], slots: int, run: RunInfo) -> tuple[dict, pa.Table]:
    """``(number, task)`` pairs run as one Spark job (:func:`run_tasks`): their tables by task number, and the
    job's :data:`SPARK_JOB` row."""
    t0 = time.perf_counter()
    shipped = ship(pack([t for _, t in numbered], slots, [i for i, _ in numbered]))
    pickled, submitted = time.perf_counter() - t0, time.time()
    rows = _run_on_spark(spark, shipped, run)
    returned, t1 = time.time(), time.perf_counter()
    by_task = _by_task(rows)
    job = pa.table({
        "bins": [len(shipped.bins)], "work_bytes": [sum(len(w) for _, w in shipped.bins)],
        "shared_bytes": [len(shipped.shared)], "pickle_seconds": [pickled],
        "submitted": [submitted], "returned": [returned], "results_bytes": [sum(len(p) for _, p in rows)],
        "read_seconds": [time.perf_counter() - t1]}, schema=SPARK_JOB)
    return by_task, job


# What the driver's threads did in a stage begun before the executors were ready (:func:`_run_driver_first`): the
# tasks they ran and their cost, the tasks left to the Spark job, and when in the stage the executors were ready
# (null: not before the driver had started every task).
DRIVER_FIRST = pa.schema([("tasks", pa.int64()), ("cost", pa.int64()), ("handed_to_spark", pa.int64()),
                          ("ready_after_seconds", pa.float64())])


# The driver's threads that begin a stage on a cluster: a cluster's driver is sized for planning, not for the
# executors' work, and each thread holds a task's working memory (a range's decode: hundreds of MiB).
DRIVER_FIRST_THREADS = 2


def _run_driver_first(spark, tasks: list[Task], executor, run: RunInfo, phase, warming) -> "Outputs":
    """The stage begun in the driver's threads (:data:`DRIVER_FIRST_THREADS`, at most one per core of this machine)
    while ``warming`` brings the executors up; once they are ready, the tasks not started go to Spark as one job
    while the driver's threads end the ones they hold.  A stage the driver finishes first is no Spark job at all."""
    started = time.monotonic()
    threads = _DriverThreads(tasks, min(os.cpu_count() or 1, DRIVER_FIRST_THREADS), run, phase)
    by_task, job = {}, None
    try:
        rest = threads.hand_over(warming.ready)
        ready_after = time.monotonic() - started if rest or warming.ready.is_set() else None
        if rest:
            by_task, job = _spark_stage(spark, [(i, tasks[i]) for i in rest], executor.slots, run)
    except BaseException:  # an interrupt, or the job failed: the driver's tasks not started never start
        threads.abandon()
        raise
    ran = threads.results()
    first = pa.table({"tasks": [len(ran)], "cost": [sum(tasks[i].cost() for i in ran)],
                      "handed_to_spark": [len(rest)], "ready_after_seconds": [ready_after]}, schema=DRIVER_FIRST)
    return Outputs.in_task_order({**ran, **by_task}, _driver_first=first,
                                 **({"_spark_job": job} if job is not None else {}))


class ExecutorWarmUp:
    """A Spark job begun as the audit starts, one task per core: each executor's Python worker started, the project
    imported and the compiled kernels loaded (about 1 s a worker; a reused worker keeps them for the stages' tasks),
    while the driver plans and begins the first stages itself (:func:`_run_driver_first`).  ``ready`` is set when
    it ends, or fails (the stages' own tasks then meet the same failure and report it).  ``stop()`` cancels it if
    the run ended first."""

    def __init__(self, spark, cores: int):
        import threading
        import uuid

        self.ready = threading.Event()
        self.rows: list[tuple] = []  # (host, pid, kernel load seconds or None, started, ended), a task each
        self.started, self.ended = time.time(), None
        self._spark, self._group = spark, f"rocketmq-forensics-warm-up-{uuid.uuid4().hex[:8]}"
        threading.Thread(target=self._run, args=(max(1, cores),), name="audit-warm-up", daemon=True).start()

    def _run(self, cores: int) -> None:
        try:
            sc = self._spark.sparkContext
            sc.setJobGroup(self._group, "the audit: executors' Python workers and kernels loaded",
                           interruptOnCancel=False)
            self.rows = sc.parallelize(range(cores), cores).mapPartitions(_warm_up_worker).collect()
        except Exception:  # noqa: BLE001 - cancelled, or the executors cannot run it: the stages' tasks say why
            pass
        finally:
            self.ended = time.time()
            self.ready.set()

    def stop(self) -> None:
        if not self.ready.is_set():
            try:
                self._spark.sparkContext.cancelJobGroup(self._group)
            except Exception:  # noqa: BLE001 - a session already stopped has nothing to cancel
                pass


def _warm_up_worker(_):
    """One warm-up task (:class:`ExecutorWarmUp`): this Python worker's kernels loaded (the families' modules come
    with the first task that names them)."""
    import socket

    from decoding.kernels import KERNEL_LOAD, load_compiled, tune_allocator

    global _spark_tasks_here
    started = time.time()
    tune_allocator()
    had_kernels = bool(KERNEL_LOAD)
    load_compiled()
    _spark_tasks_here += 1  # the stages' tasks in this worker find it reused
    yield (socket.gethostname(), os.getpid(), None if had_kernels else KERNEL_LOAD.get("seconds"), started,
           time.time())


def holds_the_gil(task) -> bool:
    """Whether a task's work is mostly Python and system calls, a file at a time (a route's group of small files:
    a wide broker's thousands of queue files), rather than the compiled kernels, numpy and Arrow, which release
    the GIL.  The driver runs such tasks one at a time (:class:`_DriverThreads`).  A wrapper (a state's kept task,
    jobs/audit/state.py) is its task's kind."""
    return bool(getattr(getattr(task, "task", task), "HOLDS_THE_GIL", False))


class _DriverThreads:
    """The tasks in ``threads`` threads of this process, the costliest first; a task that :func:`holds_the_gil`
    never beside another such task.  Two threads each opening, reading and closing thousands of small files took
    twice the time one thread took for the same files (the GIL changes hands at every system call: 50,007 queue
    files' reads 2.7 s against 1.5 s): such tasks are one chain, taken whenever it is free, while the other threads
    run the rest (the walks and decodes, which release the GIL).  :meth:`hand_over` takes back the tasks not
    started yet; :meth:`results` waits for the ones that were."""

    def __init__(self, tasks: list, threads: int, run: RunInfo, phase):
        import contextvars
        import threading
        from concurrent.futures import ThreadPoolExecutor

        self.tasks, self.run, self.phase = tasks, run, phase
        self.lock = threading.Condition()
        self.done = {"cost": 0, "tasks": 0}
        if phase is not None:
            phase.tasks = len(tasks)
        self.caller = contextvars.copy_context()  # what the run set for its readers (its reads of small queue files)
        order = sorted(range(len(tasks)), key=lambda i: -tasks[i].cost())  # the longest first: no straggler at the end
        self.chained = [i for i in order if holds_the_gil(tasks[i])]
        self.free = [i for i in order if not holds_the_gil(tasks[i])]
        self.state = {"chain_busy": False, "stop": False}
        self.ran: dict[int, Emitter] = {}
        workers = max(1, min(threads, len(tasks)))
        self.pool = ThreadPoolExecutor(workers)
        self.futures = [self.pool.submit(self._worker) for _ in range(workers)]

    def _next_task(self) -> tuple[int, bool] | None:
        """The next task for a thread, and whether it is the chain's; None when nothing is left for it."""
        with self.lock:
            while not self.state["stop"]:
                if self.chained and not self.state["chain_busy"]:
                    self.state["chain_busy"] = True
                    return self.chained.pop(0), True
                if self.free:
                    return self.free.pop(0), False
                if not self.chained:
                    return None
                self.lock.wait()  # only the chain's tasks are left, and one runs: this thread has no more
            return None

    def _worker(self) -> None:
        while (picked := self._next_task()) is not None:
            i, in_chain = picked
            try:
                self.ran[i] = self.caller.copy().run(run_one, i, self.tasks[i], self.run)
            except BaseException:
                self._stop()  # the tasks not started never start
                raise
            finally:
                if in_chain:
                    with self.lock:
                        self.state["chain_busy"] = False
                        self.lock.notify_all()
            with self.lock:
                self.done["cost"] += self.tasks[i].cost()
                self.done["tasks"] += 1
                self.lock.notify_all()
                if self.phase is not None:
                    self.phase.update(self.done["cost"])
                    self.phase.tasks_done = self.done["tasks"]

    def _stop(self) -> None:
        with self.lock:
            self.state["stop"] = True
            self.lock.notify_all()

    def hand_over(self, when) -> list[int]:
        """Once the event ``when`` is set, the numbers of the tasks not started (in order; the threads start no
        more); empty if every task was started first."""
        while not when.wait(0.02):
            with self.lock:
                if not (self.chained or self.free) or self.state["stop"]:
                    return []
        with self.lock:
            rest = sorted(self.chained + self.free)
            self.chained, self.free = [], []
            self.lock.notify_all()
            return rest

    def results(self) -> dict[int, dict[str, list[pa.Table]]]:
        """Each task's tables by its number, once the threads are done (a task's failure, or an interrupt, raised
        here: the tasks not started never start)."""
        try:
            for future in self.futures:
                future.result()
        except BaseException:  # an interrupt (runtime/interrupts.py) or a failure
            self.abandon()
            raise
        self.pool.shutdown()
        return {i: emitter.partials for i, emitter in self.ran.items()}

    def abandon(self) -> None:
        """No task not started starts; the threads are not waited for."""
        self._stop()
        self.pool.shutdown(wait=False, cancel_futures=True)


def _run_in_driver(tasks: list, threads: int, run: RunInfo, phase) -> "Outputs":
    """Every task in ``threads`` threads of this process (:class:`_DriverThreads`)."""
    return Outputs.in_task_order(_DriverThreads(tasks, threads, run, phase).results())


def _by_task(rows: list[tuple[str, bytes]]) -> dict[int, dict[str, list[pa.Table]]]:
    """A Spark job's ``(name, payload)`` rows as each task's tables by its number (:data:`TASK_MARK`)."""
    by_task: dict[int, dict[str, list[pa.Table]]] = {}
    task = -1
    for name, payload in rows:
        if name == TASK_MARK:
            task = int(payload)
            continue
        by_task.setdefault(task, {}).setdefault(name, []).append(pa.ipc.open_stream(payload).read_all())
    return by_task


@dataclass
class Outputs:
    """A stage's partial tables on the driver, by name."""

    partials: dict[str, pa.Table] = field(default_factory=dict)

    @classmethod
    def of(cls, rows: pa.Table) -> "Outputs":
        """A Spark job's :data:`OUTPUT_SCHEMA` rows, in the tasks' order."""
        return cls.in_task_order(_by_task(zip(rows.column("table").to_pylist(), rows.column("payload").to_pylist())))

    @classmethod
    def in_task_order(cls, by_task: dict[int, dict[str, list[pa.Table]]], **more: pa.Table) -> "Outputs":
        """Each name's tables from every task, in the tasks' order (wherever each ran), and ``more`` by name."""
        parts: dict[str, list[pa.Table]] = {}
        for i in sorted(by_task):
            for name, tables in by_task[i].items():
                parts.setdefault(name, []).extend(tables)
        return cls({**{name: pa.concat_tables(ts) for name, ts in parts.items()}, **more})

    def parts(self, name: str) -> pa.Table:
        """Where the tasks wrote the spilled partial ``name``: :data:`SPILLED` rows, in the tasks' order."""
        spilled = self.get("_spilled", SPILLED)
        return spilled.filter(pc.equal(spilled.column("table"), name))

    def dataset(self, name: str, schema: pa.Schema):
        """The spilled partial ``name`` as one ``pyarrow.dataset`` over every task's part (in the tasks' order,
        read as ``schema``); an empty one when no task wrote a row."""
        from runtime.output import out_parts_dataset

        return out_parts_dataset(sorted(self.parts(name).column("path").to_pylist()), schema)

    def batches(self, name: str, schema: pa.Schema, columns: list[str] | None = None):
        """The spilled partial ``name`` as tables of ``schema`` (``columns`` of it), a batch at a time in the
        tasks' order (:meth:`dataset`'s), none read ahead (runtime.output.out_parts_batches), the small parts of many
        tasks gathered into one batch (each batch costs its reader a pass of filters, hashes and groupings)."""
        from runtime.output import out_parts_batches

        return out_parts_batches(sorted(self.parts(name).column("path").to_pylist()), schema, columns, gather=True)

    def get(self, name: str, schema: pa.Schema | None = None) -> pa.Table:
        t = self.partials.get(name)
        if t is None:
            if schema is None:
                raise KeyError(f"no partial table {name!r}")
            return schema.empty_table()
        return t
