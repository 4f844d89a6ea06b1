"""The suite over Spark Connect (issue 23): a Spark Connect server started from the installed pyspark
(tests/conftest.py ``connect_server``, tools/sparkcluster.py; the spark-connect jar ships in its jars/), whose
Python workers run an interpreter that cannot import the project from the checkout, and a client process
(tests/support/connect_client.py) that does what a notebook user does: ``SparkSession.builder.remote(...)``, the
packaged zip added as a Python artifact, ``datasources.register(spark)``, every source read, the audit's
``run(spark, args)``; then the audit's command line with ``SPARK_REMOTE`` set.  Every read and both audits equal the same work in the classic local[2] session.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from runtime.session import REPO

from .conftest import assert_same_audit, parquet_rows
from .support.connect_client import read_all
from .test_packaging import package

pytestmark = pytest.mark.cluster


@pytest.fixture(scope="module")
def connect_run(connect_server, two_stores, tmp_path_factory):
    work = tmp_path_factory.mktemp("connect-run")
    spec = {"zip": str(package.build(work / "dist" / "rocketmq_forensics.zip")),
            "stores": [str(s) for s in two_stores], "out": str(work / "out"), "result": str(work / "result.json")}
    (work / "spec.json").write_text(json.dumps(spec))
    client = work / "connect_client.py"  # outside the repository, like a notebook
    client.write_text((REPO / "tests" / "support" / "connect_client.py").read_text())
    env = {k: v for k, v in os.environ.items() if k not in ("SPARK_HOME", "PYSPARK_DRIVER_PYTHON",
                                                            "SPARK_CONNECT_MODE_ENABLED", "PYSPARK_GATEWAY_PORT")}
    env.update(SPARK_REMOTE=connect_server.url,
               PYTHONPATH=os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])))
    proc = subprocess.run([sys.executable, str(client), str(work / "spec.json")], env=env, cwd=work,
                          capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-6000:]
    return Path(spec["out"]), json.loads(Path(spec["result"]).read_text()), proc


def test_a_connect_session_is_not_classic(connect_run, spark):
    """A Connect session, whose cores the audit asks of the server when it has no spark.default.parallelism
    (datasources.base.planned_parallelism: the server's local[2], as in a classic session)."""
    from datasources.base import planned_parallelism

    _, result, _ = connect_run
    assert result["connect"] and result["notebook_session"].startswith("pyspark.sql.connect")
    assert result["planned_parallelism"] == 2 == planned_parallelism(spark) == spark.sparkContext.defaultParallelism


def test_every_source_reads_the_same_over_connect(connect_run, spark, two_stores):
    """The four sources (the commitlog, the consume queues, the index, metadata tables) over both stores: the
    Connect session's rows are the classic session's."""
    out, result, _ = connect_run
    expected = read_all(spark, list(map(str, two_stores)))
    assert sorted(result["reads"]) == sorted(expected)
    for name, theirs in expected.items():
        mine = pq.read_table(out / "sources" / f"{name}.parquet")
        assert mine.schema.equals(theirs.schema), name
        assert parquet_rows(mine) == parquet_rows(theirs), name
    assert result["reads"]["0-commitlog"] > 25 and result["reads"]["1-index"] > 0
    assert result["reads"]["0-metadata-topics"] > 0 and result["reads"]["1-consumequeue"] > 0


def test_the_audit_over_connect_equals_local(connect_run, local_audit):
    """``jobs.audit.run(spark, args)`` in the notebook's session, and ``python -m jobs.audit`` with SPARK_REMOTE
    (runtime/session.py ships the project to its session itself): both equal the classic session's audit."""
    reference, code = local_audit
    out, result, proc = connect_run
    assert result["audit_exit"] == result["cli_exit"] == code == 1
    assert_same_audit(out / "audit", reference)
    assert_same_audit(out / "audit-cli", reference, report=False)
    assert "\naudit DATA LOST (2 stores): 1 cut, " in proc.stdout  # the command line's summary line
