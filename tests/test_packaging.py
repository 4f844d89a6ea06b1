"""`make package`'s zip carries the project to spark-submit: a job file run from a folder outside the
repository, with an interpreter that cannot see the repository or its editable install, decodes a fixture."""
from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from jobs.session import REPO, TEST_PROFILE

from .conftest import fixture_manifest, fixture_store


def _load_tool(name: str):
    """A script from tools/ as a module (tools/ is not a package: its scripts run as ``python tools/X.py``)."""
    spec = importlib.util.spec_from_file_location(f"tools_{name}", REPO / "tools" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


package = _load_tool("package")  # what `make package` runs


@pytest.mark.spark
@pytest.mark.slow
def test_spark_submit_with_the_zip_from_outside_the_repository(tmp_path):
    zip_path = package.build(tmp_path / "dist" / "rocketmq_forensics.zip")
    job = tmp_path / "decode_job.py"
    shutil.copy(REPO / "jobs" / "decode.py", job)
    # python -S skips site-packages' .pth files, so the editable install cannot supply the project: only the
    # zip can.  Third-party packages come from PYTHONPATH, as on a cluster where they are installed.
    python = tmp_path / "python"
    python.write_text(f'#!/bin/sh\nexec "{sys.executable}" -S "$@"\n')
    python.chmod(0o755)
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "SPARK_HOME", "PYSPARK_DRIVER_PYTHON")}
    env.update(PYTHONPATH=sysconfig.get_paths()["purelib"], PYSPARK_PYTHON=str(python))
    isolated = subprocess.run([str(python), "-c", "import jobs"], env=env, cwd=tmp_path, capture_output=True)
    assert isolated.returncode != 0, "the repository is importable without the zip: the test would prove nothing"

    out = tmp_path / "messages"
    confs = [arg for key, value in TEST_PROFILE.items() for arg in ("--conf", f"{key}={value}")]
    cmd = [str(Path(sys.executable).parent / "spark-submit"), "--master", "local[2]",
           "--properties-file", str(REPO / "spark-conf" / "spark-defaults.conf"), *confs,
           "--py-files", str(zip_path), str(job),
           "--store", str(fixture_store("basic")), "--out", str(out)]
    proc = subprocess.run(cmd, env=env, cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-4000:]
    manifest = fixture_manifest("basic")
    assert proc.stdout.strip().startswith(f"decode: {manifest['messageCount']} messages")
    table = pq.read_table(out, columns=["physical_offset"])
    assert sorted(table.column("physical_offset").to_pylist()) == \
           sorted(m["commitLogOffset"] for m in manifest["messages"])


@pytest.mark.spark
@pytest.mark.slow
def test_audit_through_spark_submit_on_local2(tmp_path):
    """The audit job, unchanged, as a scheduler runs it: spark-submit --master local[2] with the zip, from a
    folder outside the repository; exit code and outputs as documented."""
    zip_path = package.build(tmp_path / "dist" / "rocketmq_forensics.zip")
    job = tmp_path / "audit_job.py"
    shutil.copy(REPO / "jobs" / "audit" / "__main__.py", job)
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "SPARK_HOME", "PYSPARK_DRIVER_PYTHON")}
    env.update(PYSPARK_PYTHON=sys.executable)
    out = tmp_path / "audit"
    confs = [arg for key, value in TEST_PROFILE.items() for arg in ("--conf", f"{key}={value}")]
    cmd = [str(Path(sys.executable).parent / "spark-submit"), "--master", "local[2]", *confs,
           "--py-files", str(zip_path), str(job), "--store", str(fixture_store("broker")), "--out", str(out)]
    proc = subprocess.run(cmd, env=env, cwd=tmp_path, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "audit PASS: 0 error(s)" in proc.stdout
    assert (out / "report.html").exists() and (out / "summary.json").exists()
    assert pq.read_table(out / "findings").num_rows > 0
