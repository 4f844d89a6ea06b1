"""Shared test fixtures: the RocketMQ-written stores (read in place, never modified) and one SparkSession."""
from __future__ import annotations

import json
import os
import subprocess
import sys
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
