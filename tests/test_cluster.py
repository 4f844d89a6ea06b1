"""The suite on a real standalone Spark cluster (issue 23): a Master and two Workers of this machine, separate JVMs
with one core each (tests/conftest.py ``spark_cluster``, tools/sparkcluster.py), the packaged zip on
``--py-files`` in a read-only folder, and an interpreter that cannot import the project from the checkout.

The audit runs as a scheduler runs it (``spark-submit jobs/audit/__main__.py``), then decode, extract and a
time-range query run in one more application through their command lines (tests/cluster_app.py), over a store
RocketMQ wrote and a damaged writer-built store.  Each output equals the ``local[2]`` run's of the same jobs on
the same stores.  The stores are read where they lie: the workers share this machine's file system, as executors
share a mount on a real cluster.
"""
from __future__ import annotations

import io
import json
import os
import shutil
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from jobs import audit, decode, extract, query
from jobs.session import REPO, TEST_PROFILE
from store_format import damage as D
from store_format.store import Store

from .conftest import fixture_store, isolated_python
from .test_packaging import package
from .writer_support import build_flow_store

pytestmark = pytest.mark.cluster

# what the applications ask of the two one-core workers (1 GiB each)
APP_CONF = {**TEST_PROFILE, "spark.executor.memory": "512m", "spark.driver.host": "127.0.0.1",
            "spark.executor.extraJavaOptions": "-XX:+UseSerialGC -XX:TieredStopAtLevel=1"}


@pytest.fixture(scope="module")
def stores(tmp_path_factory) -> list[Path]:
    """The ``broker`` fixture (RocketMQ's) and a writer-built store from broker flows, damaged: a flipped body
    bit mid-log and a torn last record."""
    base = tmp_path_factory.mktemp("cluster-stores")
    flows = base / "flows"
    build_flow_store(flows)
    frames = [f for f in Store(flows).walk_commitlog(decode=False) if f.kind == "message"]
    D.flip_body_bit(flows, base / "step", physical_offset=frames[len(frames) // 2].physical_offset)
    damaged = base / "damaged" / "store"
    D.torn_tail(base / "step", damaged)
    return [fixture_store("broker"), damaged]


def _job_argv(stores: list[Path], out: Path, window: tuple[int, int]) -> dict[str, list[str]]:
    flags = [arg for s in stores for arg in ("--store", str(s))]
    return {"audit": ["--store", *map(str, stores), "--out", str(out / "audit")],
            "decode": ["--store", *map(str, stores), "--out", str(out / "decode")],
            "extract": [*flags, "--walk", "salvage", "--out", str(out / "extract")],
            "query": [*flags, "--from", str(window[0]), "--to", str(window[1])]}


@pytest.fixture(scope="module")
def local_runs(spark, stores, tmp_path_factory):
    """The four jobs in the test session (local[2]), from the checkout; the query's window is chosen here: from
    the middle of the damaged store's store times to the middle of the fixture's, so it cuts both."""
    out = tmp_path_factory.mktemp("local-run")
    d_argv = _job_argv(stores, out, (0, 0))["decode"]
    result = decode.run(spark, decode.build_parser().parse_args(d_argv))
    assert result.exit_code == 0, result.summary
    times = pq.read_table(out / "decode", columns=["broker", "store_timestamp"]).to_pylist()
    mid = {b: sorted(r["store_timestamp"] for r in times if r["broker"] == b) for b in ("broker", "damaged")}
    window = (mid["damaged"][len(mid["damaged"]) // 2], mid["broker"][len(mid["broker"]) // 2])
    argv = _job_argv(stores, out, window)
    codes = {"decode": result.exit_code,
             "audit": audit.run(spark, audit.build_parser().parse_args(argv["audit"])).exit_code,
             "extract": extract.run(spark, extract.build_parser().parse_args(argv["extract"]))}
    buf = io.StringIO()
    codes["query"] = query.run(spark, query.build_parser().parse_args(argv["query"]), out=buf)
    (out / "query.jsonl").write_text(buf.getvalue())
    return out, window, codes


def _submit(cluster, env: dict, zip_path: Path, app: Path, args: list[str], cwd: Path) -> subprocess.CompletedProcess:
    confs = [arg for key, value in APP_CONF.items() for arg in ("--conf", f"{key}={value}")]
    confs += ["--conf", f"spark.executorEnv.PYTHONPATH={env['PYTHONPATH']}"]  # third-party packages, as installed
    cmd = [str(Path(sys.executable).parent / "spark-submit"), "--master", cluster.master_url, *confs,
           "--py-files", str(zip_path), str(app), *args]
    return subprocess.run(cmd, env=env, cwd=cwd, capture_output=True, text=True, timeout=900)


@pytest.fixture(scope="module")
def cluster_runs(spark_cluster, stores, local_runs, tmp_path_factory):
    """The same jobs on the cluster: the audit's application file, then tests/cluster_app.py for the others."""
    _, window, _ = local_runs
    work = tmp_path_factory.mktemp("cluster-run")
    dist = work / "dist"
    zip_path = package.build(dist / "rocketmq_forensics.zip")
    zip_path.chmod(0o444)
    dist.chmod(0o555)  # read-only (root writes anyway: the listing after the runs is the proof)
    listing = sorted(os.listdir(dist))
    _, env = isolated_python(work)  # only the zip can supply the project, to the driver and to the executors
    apps = work / "apps"  # outside the repository: the application file's folder is on the driver's path
    apps.mkdir()
    shutil.copy(REPO / "jobs" / "audit" / "__main__.py", apps / "audit_job.py")
    shutil.copy(REPO / "tests" / "cluster_app.py", apps / "cluster_app.py")
    out = work / "out"
    argv = _job_argv(stores, out, window)
    try:
        audited = _submit(spark_cluster, env, zip_path, apps / "audit_job.py", argv["audit"], work)
        assert audited.returncode in (0, 1), audited.stdout[-3000:] + audited.stderr[-5000:]
        spec = {**{k: argv[k] for k in ("decode", "extract", "query")}, "query_out": str(out / "query.jsonl"),
                "result": str(work / "app.json")}
        (work / "spec.json").write_text(json.dumps(spec))
        jobs = _submit(spark_cluster, env, zip_path, apps / "cluster_app.py", [str(work / "spec.json")], work)
        assert jobs.returncode == 0, jobs.stdout[-3000:] + jobs.stderr[-5000:]
    finally:
        dist.chmod(0o755)
    return out, audited, json.loads((work / "app.json").read_text()), zip_path, listing, sorted(os.listdir(dist))


# --------------------------------------------------------------------------------------------------------


def _rows(path: Path, drop=()) -> Counter:
    """A Parquet folder's rows as a multiset (maps as sorted pairs, every value as JSON)."""
    t = pq.read_table(path)
    t = t.drop_columns([c for c in drop if c in t.column_names])
    return Counter(json.dumps(r, sort_keys=True, default=str) for r in t.to_pylist())


def test_the_audit_on_the_cluster_equals_local(local_runs, cluster_runs):
    local, _, codes = local_runs
    out, audited, *_ = cluster_runs
    assert codes["audit"] == 1 and audited.returncode == 1  # the damaged store has errors: exit 1 both ways
    assert "audit FAIL" in audited.stdout
    stamps = ("run_id", "run_time")
    findings = _rows(out / "audit" / "findings", stamps)
    assert findings == _rows(local / "audit" / "findings", stamps)
    brokers = Counter(json.loads(r)["broker"] for r in findings.elements())
    assert set(brokers) == {"broker", "damaged"}
    errors = {json.loads(r)["check"] for r in findings.elements() if json.loads(r)["severity"] == "error"}
    assert errors, "the damaged store's errors are found"
    assert _rows(out / "audit" / "metrics", stamps) == _rows(local / "audit" / "metrics", stamps)
    for table in sorted(p.name for p in (local / "audit" / "tables").iterdir()):
        assert _rows(out / "audit" / "tables" / table) == _rows(local / "audit" / "tables" / table), table
    mine, theirs = (json.loads((d / "audit" / "summary.json").read_text()) for d in (out, local))
    assert mine["counts"] == theirs["counts"] and mine["counts"]["error"] > 0
    assert mine["brokers"] == theirs["brokers"] and mine["inputs"] == theirs["inputs"]
    assert (out / "audit" / "report.html").exists()


def test_decode_extract_and_query_on_the_cluster_equal_local(local_runs, cluster_runs):
    local, window, codes = local_runs
    out, _, app, *_ = cluster_runs
    assert app["codes"] == {k: codes[k] for k in ("decode", "extract", "query")} == {"decode": 0, "extract": 0,
                                                                                     "query": 0}
    decoded = _rows(out / "decode")
    assert decoded == _rows(local / "decode") and len(decoded) > 25
    extracted = _rows(out / "extract")
    assert extracted == _rows(local / "extract") and sum(extracted.values()) >= sum(decoded.values())
    mine, theirs = (json.loads((d / "extract" / "_manifest.json").read_text()) for d in (out, local))
    assert mine["counts"] == theirs["counts"] and mine["counts"]["reconciled"]
    assert mine["by_topic"] == theirs["by_topic"]
    hits = sorted((out / "query.jsonl").read_text().splitlines())
    assert hits == sorted((local / "query.jsonl").read_text().splitlines())
    found = [json.loads(h) for h in hits]
    assert {h["broker"] for h in found} == {"broker", "damaged"}  # the window cuts both stores
    assert all(window[0] <= h["store_timestamp"] <= window[1] for h in found)


def test_executors_import_the_project_only_from_the_zip(spark_cluster, cluster_runs):
    """Every probed Python worker ran without site-packages and imported the project from the zip Spark copied
    into its executor's work folder under a worker of the cluster; both workers ran tasks; the driver's came
    from the submitted zip; nothing was written beside it, and the executors of this second application
    loaded the kernels from numba's cache (a new zip path per application: a path-keyed cache would miss)."""
    _, _, app, zip_path, before, after = cluster_runs
    assert app["driver_jobs_file"].startswith(str(zip_path) + os.sep)
    executors = app["executors"]
    assert executors
    for e in executors:
        assert e["no_site"], e
        assert Path(e["executor_cwd"]).is_relative_to(spark_cluster.work), e
        for key in ("jobs_file", "compiled_file"):  # relative to the executor's folder, as Spark adds it
            where = os.path.normpath(os.path.join(e["executor_cwd"], e[key]))
            assert where.startswith(os.path.join(e["executor_cwd"], "rocketmq_forensics.zip") + os.sep), e
        assert e["numba_cache_dir"] and e["cache_misses"] == 0 and e["cache_hits"] > 0, e
    workers = {Path(e["executor_cwd"]).relative_to(spark_cluster.work).parts[0] for e in executors}
    assert workers == {"worker-0", "worker-1"}
    assert before == after == ["rocketmq_forensics.zip"]

