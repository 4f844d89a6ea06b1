"""Shared test fixtures: the RocketMQ-written stores (read in place, never modified) and one SparkSession."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent


def _fixtures_root() -> Path:
    """$ROCKETMQ_FIXTURES, else ../shared/fixtures beside this checkout, else beside the repository it was cloned
    from (a fresh local clone made elsewhere, as CI makes one)."""
    if os.environ.get("ROCKETMQ_FIXTURES"):
        return Path(os.environ["ROCKETMQ_FIXTURES"])
    roots = [REPO]
    try:
        origin = subprocess.run(["git", "-C", str(REPO), "config", "--get", "remote.origin.url"],
                                capture_output=True, text=True, timeout=10).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        origin = ""
    origin = origin.removeprefix("file://")
    if origin and Path(origin).is_dir():
        roots.append(Path(origin).resolve())
    found = [root.parent / "shared" / "fixtures" for root in roots if (root.parent / "shared" / "fixtures").is_dir()]
    return found[0] if found else REPO.parent / "shared" / "fixtures"


FIXTURES = _fixtures_root() / "rocketmq-4.9.7"
FIXTURE_NAMES = ("basic", "broker")
FIXTURES_5X = FIXTURES.parent / "rocketmq-5.3.3"


def fixture_store(name: str) -> Path:
    return FIXTURES / name / "store"


def fixture_manifest(name: str) -> dict:
    with open(FIXTURES / name / "manifest.json", encoding="utf-8") as f:
        return json.load(f)


@pytest.fixture(scope="session", params=FIXTURE_NAMES)
def fixture(request):
    """(name, store root Path, manifest dict) for each RocketMQ-written fixture."""
    name = request.param
    if not FIXTURES.exists():
        pytest.fail(f"fixtures not found at {FIXTURES}; set ROCKETMQ_FIXTURES")
    return name, fixture_store(name), fixture_manifest(name)


@pytest.fixture
def basic_copy(tmp_path):
    """A scratch copy of the ``basic`` fixture store (safe to damage) and its manifest."""
    import shutil

    dst = tmp_path / "store"
    shutil.copytree(fixture_store("basic"), dst)
    return dst, fixture_manifest("basic")


@pytest.fixture(scope="session")
def spark():
    """One local[2] SparkSession for the whole run, with the fast test profile from spark-notes.md."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))
    from runtime.session import build_session

    session = build_session("tests", master="local[2]", test_profile=True)
    yield session
    session.stop()


def isolated_python(folder: Path) -> tuple[Path, dict]:
    """An interpreter that cannot import the project from this checkout, and the environment to run Spark with it
    (PYSPARK_PYTHON): only a zip (``--py-files``, Spark Connect artifacts) can supply the project.  ``python -S``
    skips site-packages' .pth files, so the editable install is not seen; third-party packages come from
    PYTHONPATH, as on a cluster where they are installed."""
    python = folder / "python"
    python.write_text(f'#!/bin/sh\nexec "{sys.executable}" -S "$@"\n')
    python.chmod(0o755)
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "SPARK_HOME", "PYSPARK_DRIVER_PYTHON")}
    env.update(PYTHONPATH=sysconfig.get_paths()["purelib"], PYSPARK_PYTHON=str(python))
    isolated = subprocess.run([str(python), "-c", "import jobs"], env=env, cwd=folder, capture_output=True)
    assert isolated.returncode != 0, "the repository is importable without the zip: the test would prove nothing"
    return python, env


def parquet_rows(path, drop=()) -> "Counter[str]":
    """A Parquet file's or folder's rows (or an Arrow table's) as a multiset (each row as sorted JSON, maps as
    pairs), without the ``drop`` columns: for comparing two runs' outputs whatever their order and part files."""
    from collections import Counter

    import pyarrow as pa
    import pyarrow.parquet as pq

    t = path if isinstance(path, pa.Table) else pq.read_table(path)
    t = t.drop_columns([c for c in drop if c in t.column_names])
    return Counter(json.dumps(r, sort_keys=True, default=str) for r in t.to_pylist())


def count_paired(monkeypatch) -> list[int]:
    """The transactions' records paired (jobs/audit/checks/transactions.py ``_paired``), counted into the list's last
    item: a test appends 0 before each run it counts."""
    from jobs.audit.checks import transactions

    paired, paired_of = [], transactions._paired

    def spy(batches, n):
        def counted():
            for b in batches:
                paired[-1] += b.num_rows
                yield b
        return paired_of(counted(), n)
    monkeypatch.setattr(transactions, "_paired", spy)
    return paired

@pytest.fixture(scope="session")
def damaged_store(tmp_path_factory) -> Path:
    """A writer-built store from broker flows (writer_support.build_flow_store), damaged through
    store_format.write.damage: a flipped body bit mid-log and a torn last record.  Broker name ``damaged``."""
    from store_format.write import damage as D
    from store_format.store import Store

    from .support.writer_support import build_flow_store

    base = tmp_path_factory.mktemp("damaged-flows")
    build_flow_store(base / "flows")
    frames = [f for f in Store(base / "flows").walk_commitlog(decode=False) if f.kind == "message"]
    D.flip_body_bit(base / "flows", base / "step", physical_offset=frames[len(frames) // 2].physical_offset)
    D.torn_tail(base / "step", base / "damaged" / "store")
    return base / "damaged" / "store"


@pytest.fixture(scope="session")
def two_stores(damaged_store) -> list[Path]:
    """The stores the cluster and Connect tests run the jobs over: RocketMQ's ``broker`` fixture and the
    damaged writer-built one."""
    return [fixture_store("broker"), damaged_store]


@pytest.fixture(scope="session")
def local_audit(spark, two_stores, tmp_path_factory) -> tuple[Path, int]:
    """The audit of ``two_stores`` in the test session (local[2]): (output folder, exit code), the reference the
    cluster and Connect runs must equal."""
    from jobs import audit

    out = tmp_path_factory.mktemp("local-audit") / "audit"
    args = audit.build_parser().parse_args(["--store", *map(str, two_stores), "--out", str(out)])
    return out, audit.run(spark, args).exit_code


AUDIT_STAMPS = ("run_id", "run_time")  # what differs between two runs of the same audit


def assert_same_audit(mine: Path, reference: Path, report: bool = True) -> dict:
    """Two audits' outputs are the same: findings and metrics (multisets, without the run's stamps), every
    detail table, and the summary's counts, brokers (geometry, recovery) and inputs.  Returns the summary."""
    assert parquet_rows(mine / "findings", AUDIT_STAMPS) == parquet_rows(reference / "findings", AUDIT_STAMPS)
    assert parquet_rows(mine / "metrics", AUDIT_STAMPS) == parquet_rows(reference / "metrics", AUDIT_STAMPS)
    tables = sorted(p.name for p in (reference / "tables").iterdir())
    assert tables and tables == sorted(p.name for p in (mine / "tables").iterdir())
    for table in tables:
        assert parquet_rows(mine / "tables" / table) == parquet_rows(reference / "tables" / table), table
    # the verdicts' commands name each run's own output folder (where they copy messages out to)
    a, b = (json.loads((d / "summary.json").read_text().replace(str(d), "<out>")) for d in (mine, reference))
    assert a["counts"] == b["counts"] and a["brokers"] == b["brokers"] and a["inputs"] == b["inputs"]
    assert (mine / "report.html").exists() == report
    return a


# ---- Spark daemons of the tests' own (issue 23): a standalone cluster and a Spark Connect server ----
# Each is started once per session, in a background thread as soon as collection shows a test that uses it (a
# JVM's start is mostly waiting: it overlaps the tests before), and stopped by pid (with everything it started)
# when the session ends.  Where this machine cannot start them (no Java, no Spark in pyspark, a daemon that
# does not come up, no Spark Connect client dependencies), the tests that use them are skipped, with the reason.


def spark_daemon_unavailable() -> str | None:
    """Why this machine cannot start Spark daemons, or None."""
    import shutil

    java_home = os.environ.get("JAVA_HOME")
    if not (java_home and os.access(os.path.join(java_home, "bin", "java"), os.X_OK)) and not shutil.which("java"):
        return "no Java (java on PATH or JAVA_HOME) to start Spark daemons: apt-get install -y openjdk-17-jre-headless"
    try:
        from tools.sparkcluster import spark_home
    except ImportError as e:  # no pyspark
        return f"pyspark cannot be imported: {e}"
    if not os.access(spark_home() / "bin" / "spark-class", os.X_OK):
        return f"the installed pyspark has no Spark distribution ({spark_home()}/bin/spark-class)"
    return None


def _start_spark_cluster(work: Path):
    from tools.sparkcluster import start_cluster

    return start_cluster(work, workers=2, cores=1, memory="1g")


def _start_connect_server(work: Path):
    from runtime.session import TEST_PROFILE
    from tools.sparkcluster import start_connect_server

    try:
        from pyspark.sql.connect.utils import check_dependencies

        check_dependencies()
    except ImportError as e:  # PySparkImportError is one
        raise _Unavailable(f"the Spark Connect client's dependencies (pyspark[connect], the test extra): {e}")
    # its Python workers on ``python -S``: only the session's artifacts can supply the project
    python, env = isolated_python(work)
    return start_connect_server(work, master="local[2]", conf=TEST_PROFILE,
                                env={"PYSPARK_PYTHON": str(python), "PYTHONPATH": env["PYTHONPATH"]})


class _Unavailable(Exception):
    """This machine cannot start the daemon (the tests that need it are skipped with this reason)."""


class _Daemons:
    """A daemon started in a background thread; :meth:`get` waits for it."""

    def __init__(self, name: str, start, work: Path):
        import threading

        self.name, self.value, self.error = name, None, None

        def run():
            try:
                reason = spark_daemon_unavailable()
                if reason:
                    raise _Unavailable(reason)
                self.value = start(work)
            except BaseException as e:  # handed to the fixture
                self.error = e

        self.thread = threading.Thread(target=run, name=f"start {name}", daemon=True)
        self.thread.start()

    def get(self):
        from tools.sparkcluster import DaemonError

        self.thread.join()
        if isinstance(self.error, _Unavailable):
            pytest.skip(f"{self.name}: {self.error}")
        if isinstance(self.error, DaemonError):
            pytest.skip(f"{self.name} could not be started on this machine: {self.error}")
        if self.error is not None:
            raise self.error
        return self.value

    def stop(self) -> None:
        self.thread.join()
        if self.value is not None:
            self.value.stop()
            left = self.value.pids()
            self.value = None
            assert not left, f"processes of the {self.name} left behind: {sorted(left)}"


_DAEMON_FIXTURES = {"spark_cluster": ("spark-cluster", _start_spark_cluster),
                    "connect_server": ("spark-connect", _start_connect_server)}
_DAEMONS: dict[str, _Daemons] = {}


def _daemon(name: str, tmp_path_factory) -> _Daemons:
    if name not in _DAEMONS:
        folder, start = _DAEMON_FIXTURES[name]
        _DAEMONS[name] = _Daemons(name.replace("_", " "), start, tmp_path_factory.mktemp(folder))
    return _DAEMONS[name]


def pytest_collection_finish(session):
    used = {f for item in session.items for f in getattr(item, "fixturenames", ())}
    factory = getattr(session.config, "_tmp_path_factory", None)  # what the tmp_path_factory fixture returns
    for name in _DAEMON_FIXTURES:
        if name in used and factory is not None:
            _daemon(name, factory)


def pytest_sessionfinish(session):
    for daemons in list(_DAEMONS.values()):  # started, but no test asked for them (a run stopped early)
        try:
            daemons.stop()
        except AssertionError as e:
            print(f"warning: {e}", file=sys.stderr)
    _DAEMONS.clear()


def _daemon_fixture(name: str, tmp_path_factory):
    daemons = _daemon(name, tmp_path_factory)
    try:
        yield daemons.get()
    finally:
        _DAEMONS.pop(name, None)
        daemons.stop()


@pytest.fixture(scope="session")
def spark_cluster(tmp_path_factory):
    """A standalone Spark cluster of this machine (tools/sparkcluster.py): a Master and two Workers, one core
    each, separate JVMs on 127.0.0.1."""
    yield from _daemon_fixture("spark_cluster", tmp_path_factory)


@pytest.fixture(scope="session")
def connect_server(tmp_path_factory):
    """A Spark Connect server on local[2] (tools/sparkcluster.py), its Python workers on ``python -S``: only a
    session's artifacts can supply the project."""
    yield from _daemon_fixture("connect_server", tmp_path_factory)


# ---- Hostile dumps (issue 10): the fixtures stay untouched; the damage campaign's counts end the run ----
CAMPAIGN_REPORT: list[str] = []  # lines tests/test_damage_campaign.py leaves for the terminal summary


def tree_state(root: Path) -> dict[str, tuple[str, int]]:
    """relative path -> (sha256, mtime_ns) of every file below ``root``."""
    import hashlib

    return {str(p.relative_to(root)): (hashlib.sha256(p.read_bytes()).hexdigest(), p.stat().st_mtime_ns)
            for p in sorted(root.rglob("*")) if p.is_file()} if root.exists() else {}


@pytest.fixture(scope="session", autouse=True)
def fixtures_stay_untouched():
    """Input dumps are opened read-only everywhere: once every test (Spark jobs included) has run, no fixture
    file has new bytes or a new mtime, and none appeared or vanished.  Yields the snapshot taken at the start."""
    before = tree_state(FIXTURES)
    before_5x = tree_state(FIXTURES_5X)  # the 5.3.3 stores too (tests/test_v5_*.py read them in place)
    yield before
    after = tree_state(FIXTURES)
    changed = sorted(k for k in before.keys() | after.keys() if before.get(k) != after.get(k))
    assert not changed, f"the test run changed read-only fixture files under {FIXTURES}: {changed[:10]}"
    after_5x = tree_state(FIXTURES_5X)
    changed = sorted(k for k in before_5x.keys() | after_5x.keys() if before_5x.get(k) != after_5x.get(k))
    assert not changed, f"the test run changed read-only fixture files under {FIXTURES_5X}: {changed[:10]}"


def pytest_collection_modifyitems(config, items):
    """Every test that uses the ``spark`` fixture (directly or through another fixture) is a ``spark`` test:
    ``make test-fast`` leaves them out."""
    for item in items:
        if "spark" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.spark)


def pytest_terminal_summary(terminalreporter):
    if CAMPAIGN_REPORT:
        terminalreporter.section("hostile dumps")
        for line in CAMPAIGN_REPORT:
            terminalreporter.write_line(line)
