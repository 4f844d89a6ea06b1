"""The data sources in a session the project did not build: ``SparkSession.builder.master("local[2]")`` and
``datasources.register(spark)``, nothing else.  Each test starts one Python process with one session (the test
run already holds the project's session in this process) and compares what it read with the project's session."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from .conftest import REPO, fixture_store

DUMP = fixture_store("broker").parent.parent  # the folder of both fixtures: brokers "basic" and "broker"
SPLIT = 1 << 17  # each fixture's 1 MiB segment in 8 ranges (basic's data fills 2): a read that prunes plans fewer


def _child_env(pyspark_python: str) -> dict:
    """A user's environment: PYSPARK_PYTHON as the README says, nothing of Spark's configured.  PYTHONPATH
    only because the venv's editable install may point at another checkout than this one."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SPARK_", "PYSPARK_")) and k != "PYTHONPATH"}
    env.update(PYSPARK_PYTHON=pyspark_python, PYTHONPATH=str(REPO))
    return env


def _run_child(name: str, pyspark_python: str) -> dict:
    code = f"import json; from tests.test_datasources_session import {name}; print('RESULT', json.dumps({name}()))"
    proc = subprocess.run([sys.executable, "-c", code], cwd=REPO, env=_child_env(pyspark_python),
                          capture_output=True, text=True, timeout=600)
    lines = [line for line in proc.stdout.splitlines() if line.startswith("RESULT ")]
    assert proc.returncode == 0 and lines, proc.stdout[-3000:] + proc.stderr[-5000:]
    return json.loads(lines[-1].removeprefix("RESULT "))


def _rows(df, *cols) -> list[list]:
    return sorted((list(r) for r in df.select(*cols).collect()), key=repr)  # nulls sort too


def reads(spark, store: str = str(DUMP)) -> dict:
    """What the four sources read from ``store``, as keys both sessions compare."""
    return {
        "commitlog": _rows(spark.read.format("rocketmq-commitlog").load(store), "broker", "physical_offset", "kind",
                           "store_size"),
        "consumequeue": _rows(spark.read.format("rocketmq-consumequeue").load(store),
                              "broker", "topic", "queue_id", "queue_offset", "physical_offset", "kind"),
        "index": _rows(spark.read.format("rocketmq-index").load(store), "broker", "file", "kind", "entry",
                       "physical_offset"),
        "topics": _rows(spark.read.format("rocketmq-metadata").option("table", "topics").load(store),
                        "broker", "topic", "read_queue_nums"),
    }


def _cut(commitlog: list[list]) -> int:
    """A physical offset a quarter into the data: ``physical_offset < cut`` keeps some rows of both brokers."""
    return max(offset for _, offset, kind, _ in commitlog if kind == "message") // 4


def commitlog_reads(spark, cut: int, store: str = str(DUMP)) -> dict:
    """The commitlog reads that use pushdown where it is on: ``pushFilters=true`` with a filter on
    physical_offset (the planned ranges say whether it was pushed) and ``read_commitlog``'s two passes."""
    from datasources import read_commitlog

    def split():  # a DataFrame per query: Spark 4.3 reuses a pushed read for the next query on the same one
        return spark.read.format("rocketmq-commitlog").options(pushFilters="true", splitSize=str(SPLIT)).load(store)

    return {
        "split_partitions": split().rdd.getNumPartitions(),
        "filtered_partitions": split().where(f"physical_offset < {cut}").rdd.getNumPartitions(),
        "filtered": _rows(split().where(f"physical_offset < {cut}"), "broker", "physical_offset", "kind"),
        "read_commitlog": _rows(read_commitlog(spark, store, splitSize=str(SPLIT)), "broker", "physical_offset",
                                "kind"),
    }


class _RefusingSession:
    """A session whose conf refuses to be set (as a managed service that allows only listed confs may)."""

    def __init__(self, spark):
        self.dataSource, self._conf = spark.dataSource, spark.conf
        self.conf = self

    def get(self, key, default=None):
        return self._conf.get(key, default)

    def set(self, key, value):
        from pyspark.errors import PySparkException

        raise PySparkException(f"cannot set {key}")


def plain_session_reads() -> dict:
    """Run in a fresh process: the plain session's reads, first after ``register`` (pushdown turned on), then in
    the same session with pushdown off, registered where the conf cannot be set (the commitlog source without
    pushdown)."""
    import warnings

    from pyspark.sql import SparkSession

    import datasources
    from datasources.sources import PUSHDOWN_CONF

    spark = SparkSession.builder.master("local[2]").getOrCreate()
    before = spark.conf.get(PUSHDOWN_CONF)
    datasources.register(spark)
    out = {"conf_before": before, "conf_after": spark.conf.get(PUSHDOWN_CONF), "reads": reads(spark)}
    cut = _cut(out["reads"]["commitlog"])
    out["pushdown"] = commitlog_reads(spark, cut)
    spark.conf.set(PUSHDOWN_CONF, "false")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        datasources.register(_RefusingSession(spark))
    out["warnings"] = [str(w.message) for w in caught]
    out["without_pushdown"] = commitlog_reads(spark, cut)
    spark.stop()
    return out


def test_a_plain_session_reads_every_source_as_the_projects_session_does(spark):
    child = _run_child("plain_session_reads", sys.executable)
    want = json.loads(json.dumps(reads(spark)))  # lists, as the child's JSON gives them
    assert child["conf_before"] == "false" and child["conf_after"] == "true"
    assert child["reads"] == want
    assert {row[0] for key in ("commitlog", "consumequeue", "index") for row in want[key]} == {"basic", "broker"}
    assert want["topics"]
    # the commitlog's reads that push filters give the rows of the project's session's whole read
    cut = _cut(want["commitlog"])
    walk = sorted((row[:3] for row in want["commitlog"]), key=repr)
    filtered = [row for row in walk if row[1] < cut]
    assert 0 < len(filtered) < len(walk) and {row[0] for row in filtered} == {"basic", "broker"}
    pushed = child["pushdown"]
    assert pushed["filtered"] == filtered and pushed["read_commitlog"] == walk
    assert pushed["filtered_partitions"] < pushed["split_partitions"]  # the filter was pushed: ranges pruned
    # pushdown off, the conf refused: no DATA_SOURCE_PUSHDOWN_DISABLED, the same rows, nothing pruned
    without = child["without_pushdown"]
    assert without["filtered"] == filtered and without["read_commitlog"] == walk
    assert without["filtered_partitions"] == without["split_partitions"] == pushed["split_partitions"]
    assert len(child["warnings"]) == 1 and "without filter pushdown" in child["warnings"][0]


def _python_without_pyarrow() -> str | None:
    """The interpreter the venv was made from, if it lacks pyarrow (same Python version as the driver's)."""
    for name in (f"python{sys.version_info.major}.{sys.version_info.minor}", "python3"):
        candidate = Path(sys.base_prefix) / "bin" / name
        if candidate.exists() and subprocess.run([str(candidate), "-c", "import pyarrow"],
                                                 capture_output=True).returncode != 0:
            return str(candidate)
    return None


def first_reads_without_pyarrow() -> dict:
    """Run in a fresh process whose workers lack pyarrow: the error of each source's first read."""
    from pyspark.sql import SparkSession

    import datasources

    spark = SparkSession.builder.master("local[2]").getOrCreate()
    datasources.register(spark)  # the driver has the environment: registration works
    errors = {}
    for fmt in ("rocketmq-commitlog", "rocketmq-consumequeue", "rocketmq-index", "rocketmq-metadata"):
        try:
            spark.read.format(fmt).option("table", "topics").load(str(DUMP)).collect()
            errors[fmt] = None
        except Exception as e:  # noqa: the test looks at the message
            errors[fmt] = str(e)
    spark.stop()
    return errors


@pytest.mark.spark
@pytest.mark.slow
def test_workers_without_pyarrow_get_one_clear_message():
    python = _python_without_pyarrow()
    if python is None:
        pytest.skip(f"no interpreter without pyarrow beside {sys.base_prefix}")
    errors = _run_child("first_reads_without_pyarrow", python)
    for fmt, message in errors.items():
        assert message is not None, f"{fmt} read without pyarrow in the workers"
        assert f"WorkerEnvironmentError: {fmt}: {python}" in message and "cannot import 'pyarrow'" in message
        assert "PYSPARK_PYTHON" in message and "spark-submit" in message
        assert "No module named" not in message and message.count("Traceback") == 1


def test_a_source_that_cannot_register_fails_with_its_name(monkeypatch):
    from datasources import sources

    real = sources.implementation

    def broken(source):
        if source is sources.IndexSource:
            raise SyntaxError("invalid syntax (indexfile.py, line 1)")
        return real(source)

    monkeypatch.setattr(sources, "implementation", broken)
    session = _Recorder()
    with pytest.raises(RuntimeError, match="data source rocketmq-index failed to register: SyntaxError"):
        sources.register(session)
    assert session.registered == [sources.CommitLogSource, sources.ConsumeQueueSource]


class _Recorder:
    """A session as register() uses it: pushdown already on, registrations recorded."""

    def __init__(self):
        self.conf, self.dataSource, self.registered = self, self, []

    def get(self, key, default=None):
        return "true"

    def register(self, cls):
        self.registered.append(cls)


def test_a_source_whose_module_does_not_import_fails_with_its_name(monkeypatch):
    """A real import failure of the project's own module (not a simulated one): no ImportError is swallowed, the
    session's registration fails naming the source and the module."""
    from datasources import sources

    monkeypatch.setitem(sys.modules, "datasources.indexfile", None)  # its import now raises ImportError
    session = _Recorder()
    with pytest.raises(RuntimeError, match=r"data source rocketmq-index failed to register: ModuleNotFoundError: "
                                           r".*datasources\.indexfile"):
        sources.register(session)
    assert session.registered == [sources.CommitLogSource, sources.ConsumeQueueSource]


def test_a_missing_third_party_module_is_the_environment_error_naming_the_source(monkeypatch):
    """The one optional case: a Python without what the sources need gets WorkerEnvironmentError, saying which source
    and which module, and how to start the session."""
    from datasources import sources

    for source in sources.SOURCES:  # the others imported as they are; the index source's module imported anew
        sources.implementation(source)
    monkeypatch.delitem(sys.modules, "datasources.indexfile")
    monkeypatch.setitem(sys.modules, "pyarrow", None)  # as in a Python without pyarrow
    with pytest.raises(sources.WorkerEnvironmentError, match=r"^rocketmq-index: .*cannot import 'pyarrow'.*"
                                                             r"PYSPARK_PYTHON"):
        sources.implementation(sources.IndexSource)
    with pytest.raises(RuntimeError, match="data source rocketmq-index failed to register: WorkerEnvironmentError"):
        sources.register(_Recorder())
