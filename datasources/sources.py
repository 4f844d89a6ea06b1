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
  user's session then plans every read exactly as the jobs' sessions do (jobs/session.py sets the same conf),
  with one reader class per source.  Sources that push nothing are unaffected by the conf; the commitlog source
  pushes only with its ``pushFilters`` option (Spark 4.3 would reuse a pushed read for a later unfiltered
  query on the same DataFrame: see ``CommitLogReader.pushFilters``), so enabling the conf changes no rows.
  A session that refuses the setting (a managed service may allow only listed confs) gets the commitlog
  source as :class:`CommitLogSourceWithoutPushdown`: the same reader behind :class:`_WithoutPushdown`, which
  does not offer ``pushFilters``, so Spark filters every row itself (same rows, no pruning; ``pushFilters=true``
  and ``read_commitlog`` work, unpruned), and ``register`` warns once.  Turning the conf off after
  ``register`` brings Spark's DATA_SOURCE_PUSHDOWN_DISABLED back; ``register`` again turns it on.
"""
from __future__ import annotations

import importlib
import sys
import warnings

from pyspark.errors import PySparkException
from pyspark.sql.datasource import DataSource, DataSourceReader

PUSHDOWN_CONF = "spark.sql.python.filterPushdown.enabled"
_PROJECT_PACKAGES = frozenset({"datasources", "store_format", "udfs", "jobs"})


class WorkerEnvironmentError(RuntimeError):
    """The Python running a source (a Spark worker's, or the driver's) lacks a third-party module the sources
    need: the session was started without the project's environment for its Python workers."""


def _environment_message(source: str, missing: str) -> str:
    return (f"{source}: {sys.executable} (Python {sys.version.split()[0]}) cannot import {missing!r}, which the "
            "rocketmq-forensics data sources need.  Spark's Python workers run `python3` from PATH unless the "
            "session was started with PYSPARK_PYTHON naming another interpreter.  "
            "Start the session with the interpreter of the environment where rocketmq-forensics is installed: "
            "export PYSPARK_PYTHON=/path/to/.venv/bin/python before starting Python or Jupyter (or set "
            "os.environ['PYSPARK_PYTHON'] = sys.executable before the first SparkSession; a running session "
            "keeps its workers' Python, so restart the kernel), or run spark-submit with PYSPARK_PYTHON set the "
            "same way (or --conf spark.pyspark.python=/path/to/.venv/bin/python).")


def implementation(source: type["_Source"]) -> type[DataSource]:
    """The DataSource class that implements ``source``, imported now.  A third-party module that this Python
    lacks is a :class:`WorkerEnvironmentError`; anything else (a broken module of the project) propagates."""
    module, cls = source.IMPLEMENTATION
    try:
        mod = importlib.import_module(f".{module}", __package__)
    except ModuleNotFoundError as e:
        top = (e.name or "").partition(".")[0]
        if not top or top in _PROJECT_PACKAGES:
            raise
        raise WorkerEnvironmentError(_environment_message(source.FORMAT, top)) from None
    return getattr(mod, cls)


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


def register(spark) -> None:
    """Registers every source with ``spark`` (see the module docstring): filter pushdown turned on, or the
    commitlog source without it where the session refuses; each implementation imported here first, so a
    broken source fails now with its name."""
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


__all__ = ["PUSHDOWN_CONF", "SOURCES", "WorkerEnvironmentError", "enable_pushdown", "implementation", "register"]
