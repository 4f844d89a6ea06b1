"""Shared test fixtures: the RocketMQ-written stores (read in place, never modified) and one SparkSession."""
from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
FIXTURES = Path(os.environ.get("ROCKETMQ_FIXTURES", REPO.parent / "shared" / "fixtures")) / "rocketmq-4.9.7"
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
