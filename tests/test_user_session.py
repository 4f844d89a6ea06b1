"""The data sources in a user's own PySpark script, started the way a user starts one: ``python script.py`` with
no PYTHONPATH, no PYSPARK_PYTHON and no Spark conf, so Spark's Python workers run ``python3`` from PATH, another
environment than the script's.  ``datasources.register(spark)`` warns once, with the fix; the first read fails
with one short error naming PYSPARK_PYTHON and the interpreter to use, whether the workers' Python cannot import
the project (the script runs elsewhere) or a dependency (it runs in the checkout, so the project is importable
from the working folder, but pyarrow is not)."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from .conftest import REPO, fixture_store

pytestmark = [pytest.mark.spark, pytest.mark.slow]

SCRIPT = f'''
import json, warnings
from pyspark.sql import SparkSession
import datasources

spark = SparkSession.builder.master("local[1]").getOrCreate()
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    datasources.register(spark)
    datasources.register(spark)  # again: the warning is not repeated
error = None
try:
    spark.read.format("rocketmq-commitlog").load({str(fixture_store("broker"))!r}).count()
except Exception as e:
    error = str(e)
print("RESULT " + json.dumps({{"warnings": [str(w.message) for w in caught], "error": error}}))
'''


def _workers_python() -> Path:
    """The interpreter the venv was made from: what ``python3`` is on a PATH where it comes first."""
    return Path(sys.base_prefix) / "bin" / "python3"


def _run_as_a_user(script_dir: Path, cwd: Path) -> dict:
    python3 = _workers_python()
    if subprocess.run([str(python3), "-c", "import pyarrow"], capture_output=True).returncode == 0:
        pytest.skip(f"{python3} has pyarrow: it cannot stand for a Python without the project's dependencies")
    env = {k: v for k, v in os.environ.items()
           if k != "PYTHONPATH" and not k.startswith(("PYSPARK_", "SPARK_"))}
    env["PATH"] = os.pathsep.join([str(python3.parent), env.get("PATH", "")])
    script = script_dir / "my_script.py"
    script.write_text(SCRIPT)
    proc = subprocess.run([sys.executable, str(script)], cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=600)
    lines = [line for line in proc.stdout.splitlines() if line.startswith("RESULT ")]
    assert proc.returncode == 0 and lines, proc.stdout[-3000:] + proc.stderr[-3000:]
    return json.loads(lines[-1].removeprefix("RESULT "))


def _check(result: dict, lacking: str) -> None:
    [warning] = result["warnings"]  # once, though register ran twice
    assert "python3" in warning and "PYSPARK_PYTHON was not set" in warning and lacking in warning
    assert f"start it again with PYSPARK_PYTHON={sys.executable}" in warning
    error = result["error"]
    assert error is not None, "the read worked: the test proves nothing"
    assert "WorkerEnvironmentError: rocketmq-commitlog:" in error and lacking in error
    assert f"Start the session with PYSPARK_PYTHON={sys.executable}" in error
    assert "No module named" not in error and error.count("Traceback") == 1
    assert len(error.strip().splitlines()) <= 15, error  # one short error, not Spark's 40-line traceback


def test_workers_that_cannot_import_the_project(tmp_path):
    _check(_run_as_a_user(tmp_path, cwd=tmp_path), "cannot import the rocketmq-forensics project")


def test_workers_that_lack_a_dependency(tmp_path):
    """Run from the checkout: the workers import the project from their working folder, but not pyarrow."""
    _check(_run_as_a_user(tmp_path, cwd=REPO), "cannot import 'pyarrow'")
