"""The classes Spark registers for the sources, and ``register(spark)``, which makes them work in the
session it is given (a plain ``SparkSession.builder.getOrCreate()``, a notebook's, a cluster's default one).

Two facts of PySpark 4.3 (shared/docs/spark-notes.md) decide how:

* **Registered classes are pickled by reference**: Spark's Python workers import the module that defines them
  before any of our code runs.  A session started without ``PYSPARK_PYTHON`` runs its workers on ``python3``
  from PATH, which usually lacks pyarrow and numpy; had this module imported them, the first read would end in
  "No module named 'pyarrow'" deep in a worker traceback.  So this module imports only the standard library
  and pyspark (Spark puts its own pyspark on every worker's path).  Each registered class is a stand-in for its
  implementation (``CommitLogDataSource`` in datasources/commitlog.py, and the consume-queue, index, metadata
  and timer-log ones), imported by ``schema()`` and ``reader()``; a missing third-party module there becomes one
  :class:`WorkerEnvironmentError` saying how to start the session.  ``load()`` calls ``schema()`` in a worker,
  so the first read fails with it.  ``register`` imports every implementation in the driver first, so a
  source that is broken (or a driver without the environment) fails there, with the source's name.

* **A reader that implements ``pushFilters`` fails with DATA_SOURCE_PUSHDOWN_DISABLED** unless
  ``spark.sql.python.filterPushdown.enabled`` is true, and Spark's default is false.  The commitlog reader
  implements it.  ``register`` sets the conf to true: it is a runtime SQL conf, settable in a running session.
  This was chosen over registering readers without ``pushFilters`` because pushdown is what keeps a big dump
  cheap (``read_commitlog``'s first pass plans only the segments cut into ranges; a read with the commitlog's
  ``pushFilters=true`` option skips segments and ranges outside a query's physical offsets), and because the
  user's session then plans every read exactly as the jobs' sessions do (runtime/session.py sets the same conf),
  with one reader class per source.  Sources that push nothing are unaffected by the conf; the commitlog source
  pushes only with its ``pushFilters`` option (Spark 4.3 would reuse a pushed read for a later unfiltered
  query on the same DataFrame: see ``CommitLogReader.pushFilters``), so enabling the conf changes no rows.
  A session that refuses the setting (a managed service may allow only listed confs) gets the commitlog
  source as :class:`CommitLogSourceWithoutPushdown`: the same reader behind :class:`_WithoutPushdown`, which
  does not offer ``pushFilters``, so Spark filters every row itself (same rows, no pruning; ``pushFilters=true``
  and ``read_commitlog`` work, unpruned), and ``register`` warns once.  Turning the conf off after
  ``register`` brings Spark's DATA_SOURCE_PUSHDOWN_DISABLED back; ``register`` again turns it on.

* **The workers run the Python the session was started with**: ``SparkContext.pythonExec``, which is
  ``PYSPARK_PYTHON`` when the session started (spark-submit sets it from ``spark.pyspark.python``), else
  ``python3`` from PATH; ``.config("spark.pyspark.python", ...)`` on a builder does not change it.  A user's own
  session often gets ``python3``, which cannot import the project at all.  So the registered classes are pickled
  *by value* (this module is registered with cloudpickle's ``register_pickle_by_value``): a worker unpickles
  them without importing the project, and its first read fails in :func:`implementation` with one
  :class:`WorkerEnvironmentError` naming ``PYSPARK_PYTHON`` and the interpreter to use (the driver's, carried
  in the pickled code), whether the project or a dependency is what it lacks.  ``register`` sees this coming
  in a local session: when the workers' interpreter is another environment than the driver's and lacks the
  project or a dependency, it warns once, with the fix (:func:`check_workers_python`).
"""
from __future__ import annotations

import importlib
import os
import shutil
import subprocess
import sys
import warnings

from pyspark import cloudpickle
from pyspark.errors import PySparkException
from pyspark.sql.datasource import DataSource, DataSourceReader

PUSHDOWN_CONF = "spark.sql.python.filterPushdown.enabled"
_PROJECT_PACKAGES = frozenset({"datasources", "store_format", "decoding", "jobs"})
# what the sources' implementations import beyond the standard library and pyspark
_DEPENDENCIES = ("numpy", "pyarrow")
# the interpreter that registered the sources: the one to name in a worker's error (this value travels with
# the classes, which are pickled by value)
_DRIVER_PYTHON = sys.executable


class WorkerEnvironmentError(RuntimeError):
    """The Python running a source (a Spark worker's, or the driver's) cannot import the project or a
    third-party module the sources need: the session was started without the project's environment for its
    Python workers."""


def _environment_message(source: str, missing: str, project: bool = False) -> str:
    what = (f"the rocketmq-forensics project (no module named {missing!r})" if project else
            f"{missing!r}, which the rocketmq-forensics data sources need")
    return (f"{source}: {sys.executable} (Python {sys.version.split()[0]}) cannot import {what}: Spark's Python "
            "workers run PYSPARK_PYTHON as it was when the session started, else `python3` from PATH.  Start the "
            f"session with PYSPARK_PYTHON={_DRIVER_PYTHON}: `export PYSPARK_PYTHON={_DRIVER_PYTHON}` before "
            "starting Python or Jupyter, or os.environ['PYSPARK_PYTHON'] = sys.executable before the first "
            "SparkSession (a running session keeps its workers' Python: restart the kernel); with spark-submit, "
            f"--conf spark.pyspark.python={_DRIVER_PYTHON}.")


def implementation(source: type["_Source"]) -> type[DataSource]:
    """The DataSource class that implements ``source``, imported now.  A Python that cannot import the project at
    all, or lacks a third-party module, is a :class:`WorkerEnvironmentError`; a module of the project that is
    there but broken propagates."""
    module, cls = source.IMPLEMENTATION
    try:
        mod = importlib.import_module(f".{module}", __package__)
    except ModuleNotFoundError as e:
        name = e.name or ""
        top = name.partition(".")[0]
        if not top or (top in _PROJECT_PACKAGES and name != top):
            raise  # a module of an importable package is missing: the project is broken, not the environment
        raise WorkerEnvironmentError(_environment_message(source.FORMAT, top, project=top in _PROJECT_PACKAGES)) \
            from None
    return getattr(mod, cls)


# The registered classes reach the workers by value: a worker that cannot import the project still unpickles
# them, and says so in words (implementation) instead of failing in cloudpickle with "No module named".
cloudpickle.register_pickle_by_value(sys.modules[__name__])


class _Source(DataSource):
    """A registered source: a stand-in that imports its implementation only when Spark plans a read."""

    FORMAT = ""
    IMPLEMENTATION = ("", "")  # (module of this package, its DataSource class)
    pushdown = True  # False: the reader is offered without pushFilters (a session that refused the conf)

    @classmethod
    def name(cls) -> str:
        return cls.FORMAT

    def _implementation(self) -> DataSource:
        return implementation(type(self))(self.options)

    def schema(self):
        return self._implementation().schema()

    def reader(self, schema) -> DataSourceReader:
        reader = self._implementation().reader(schema)
        return reader if self.pushdown else _WithoutPushdown(reader)


class _WithoutPushdown(DataSourceReader):
    """A source's reader without ``pushFilters``: Spark asks for no pushdown and applies every filter itself,
    so the rows are the reader's unfiltered ones, filtered by Spark (the same rows, nothing pruned)."""

    def __init__(self, reader: DataSourceReader):
        self.reader = reader

    def partitions(self):
        return self.reader.partitions()

    def read(self, partition):
        return self.reader.read(partition)


class CommitLogSource(_Source):
    FORMAT = "rocketmq-commitlog"
    IMPLEMENTATION = ("commitlog", "CommitLogDataSource")


class CommitLogSourceWithoutPushdown(CommitLogSource):
    pushdown = False


class ConsumeQueueSource(_Source):
    FORMAT = "rocketmq-consumequeue"
    IMPLEMENTATION = ("consumequeue", "ConsumeQueueDataSource")


class IndexSource(_Source):
    FORMAT = "rocketmq-index"
    IMPLEMENTATION = ("indexfile", "IndexDataSource")


class MetadataSource(_Source):
    FORMAT = "rocketmq-metadata"
    IMPLEMENTATION = ("metadata", "MetadataDataSource")


class TimerLogSource(_Source):
    FORMAT = "rocketmq-timerlog"
    IMPLEMENTATION = ("timerlog", "TimerLogDataSource")


SOURCES = (CommitLogSource, ConsumeQueueSource, IndexSource, MetadataSource, TimerLogSource)
# the sources whose reader implements pushFilters, and the form registered where the session refuses the conf
WITHOUT_PUSHDOWN = {CommitLogSource: CommitLogSourceWithoutPushdown}


def enable_pushdown(spark) -> bool:
    """Turns Python data source filter pushdown on in ``spark``; False if the session refuses (with a warning)."""
    if str(spark.conf.get(PUSHDOWN_CONF, "false")).lower() == "true":
        return True
    try:
        spark.conf.set(PUSHDOWN_CONF, "true")
    except PySparkException as e:
        warnings.warn(f"this session refuses {PUSHDOWN_CONF}=true ({e}); the rocketmq-commitlog source reads "
                      "without filter pushdown: the same rows, but nothing is pruned", stacklevel=4)
        return False
    return True


_WARNED: set[str] = set()  # the workers' interpreters already warned about, once per process


def check_workers_python(spark) -> str | None:
    """Warns (once per interpreter) when the Python workers of a local session will run another environment than
    this one that cannot import the project or a dependency; returns the warning, or None.  A cluster's
    executors, a Spark Connect server's workers and sessions without a SparkContext are not checked: their
    Python is not on this machine."""
    try:
        sc = spark.sparkContext
        workers, master = str(sc.pythonExec), str(sc.master)
        shipped = bool(getattr(sc, "_python_includes", None))  # --py-files / addPyFile: the project may come so
    except Exception:  # noqa: BLE001 - a Connect session or a stand-in has no SparkContext: nothing to check
        return None
    if not master.startswith("local") or workers in _WARNED:
        return None
    missing = _missing_in(workers, check_project=not shipped)
    if not missing:
        return None
    _WARNED.add(workers)
    how = f"PYSPARK_PYTHON={workers}" if os.environ.get("PYSPARK_PYTHON") == workers else \
        "`python3` from PATH: PYSPARK_PYTHON was not set when the session started"
    message = (f"Spark's Python workers in this session run {workers} ({how}), not this Python "
               f"({sys.executable}), and it {missing}: the first read of a rocketmq-* source will fail.  Fix: stop "
               f"the session and start it again with PYSPARK_PYTHON={sys.executable} (`export "
               f"PYSPARK_PYTHON={sys.executable}` before starting Python or Jupyter, or os.environ['PYSPARK_PYTHON'] "
               "= sys.executable before the first SparkSession of the process; restart a notebook's kernel first).")
    warnings.warn(message, stacklevel=4)  # the line of the caller of datasources.register
    return message


def _missing_in(python: str, check_project: bool) -> str | None:
    """What ``python`` (a command or a path, as Spark runs it) lacks of the project and its dependencies, in
    words, or None when it has everything or is this very environment.  Asked of the interpreter itself, from
    this working folder (where local workers start)."""
    path = python if os.sep in python else shutil.which(python)
    if path is None:
        return "cannot be found on PATH"
    if _same_python(path):
        return None
    wanted = list(_DEPENDENCIES) + (sorted(_PROJECT_PACKAGES - {"jobs"}) if check_project else [])
    probe = ("import importlib.util as u, sys; print(sys.prefix); "
             f"print(','.join(m for m in {wanted!r} if u.find_spec(m) is None))")
    try:
        done = subprocess.run([path, "-c", probe], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired) as e:
        return f"cannot be run ({e})"
    lines = done.stdout.splitlines()
    if done.returncode != 0 or len(lines) < 2:
        return f"cannot be run (exit {done.returncode})"
    if lines[0] == sys.prefix or not lines[1]:
        return None
    lacking = lines[1].split(",")
    project = [m for m in lacking if m in _PROJECT_PACKAGES]
    return ("cannot import the rocketmq-forensics project" if project else
            f"cannot import {', '.join(repr(m) for m in lacking)}, which the sources need")


def _same_python(path: str) -> bool:
    """Whether the interpreter at ``path`` is this one in this environment (the same file, and the same virtual
    environment or none), answered without running it."""
    if os.path.realpath(path) != os.path.realpath(sys.executable):
        return False
    root = os.path.dirname(os.path.dirname(os.path.abspath(path)))
    in_venv = os.path.isfile(os.path.join(root, "pyvenv.cfg"))
    return os.path.realpath(root if in_venv else sys.base_prefix) == os.path.realpath(sys.prefix)


def register(spark) -> None:
    """Registers every source with ``spark`` (see the module docstring): filter pushdown turned on, or the
    commitlog source without it where the session refuses; each implementation imported here first, so a
    broken source fails now with its name; a warning first when the session's Python workers will not be able
    to run them (:func:`check_workers_python`)."""
    check_workers_python(spark)
    pushdown = enable_pushdown(spark)
    for source in SOURCES:
        try:
            impl = implementation(source)
            if impl.name() != source.FORMAT:
                raise TypeError(f"{impl.__module__}.{impl.__qualname__} is named {impl.name()!r}, registered as "
                                f"{source.FORMAT!r}")
            spark.dataSource.register(source if pushdown else WITHOUT_PUSHDOWN.get(source, source))
        except Exception as e:
            raise RuntimeError(f"data source {source.FORMAT} failed to register: {type(e).__name__}: {e}") from e


__all__ = ["PUSHDOWN_CONF", "SOURCES", "WorkerEnvironmentError", "check_workers_python", "enable_pushdown",
           "implementation", "register"]
