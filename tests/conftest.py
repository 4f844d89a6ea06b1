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
    from jobs.session import build_session

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


@pytest.fixture(scope="session")
def spark_cluster(tmp_path_factory):
    """A standalone Spark cluster of this machine (tools/sparkcluster.py): a Master and two Workers, one core
    each, separate JVMs on 127.0.0.1; stopped by pid at the end, with everything it started."""
    from tools.sparkcluster import start_cluster

    cluster = start_cluster(tmp_path_factory.mktemp("spark-cluster"), workers=2, cores=1, memory="1g")
    yield cluster
    cluster.stop()
    assert not cluster.pids(), f"processes of the cluster left behind: {sorted(cluster.pids())}"


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
    yield before
    after = tree_state(FIXTURES)
    changed = sorted(k for k in before.keys() | after.keys() if before.get(k) != after.get(k))
    assert not changed, f"the test run changed read-only fixture files under {FIXTURES}: {changed[:10]}"


def pytest_terminal_summary(terminalreporter):
    if CAMPAIGN_REPORT:
        terminalreporter.section("hostile dumps")
        for line in CAMPAIGN_REPORT:
            terminalreporter.write_line(line)
