"""The suite on a real standalone Spark cluster (issue 23): a Master and two Workers of this machine, separate JVMs
with one core each (tests/conftest.py ``spark_cluster``, tools/sparkcluster.py), the packaged zip on
``--py-files`` in a read-only folder, and an interpreter that cannot import the project from the checkout.

The audit runs as a scheduler runs it (``spark-submit jobs/audit/__main__.py``), then decode, extract and a
time-range query run in one more application through their command lines (tests/support/cluster_app.py), over a store
RocketMQ wrote and a damaged writer-built store.  Each output equals the ``local[2]`` run's of the same jobs on
the same stores.  The stores are read where they lie: the workers share this machine's file system, as executors
share a mount on a real cluster.  The second application also decodes the RocketMQ-written store through a file
system of a custom scheme (tests/support/remotefs.py's ``elsewhere://``, shipped beside the zip and named to the driver and
the executors by ``ROCKETMQ_FORENSICS_FILESYSTEMS``), as a dump on HDFS or S3 is read.
"""
from __future__ import annotations

import io
import json
import os
import shutil
import subprocess
import threading
from collections import Counter
from pathlib import Path

import pytest

from jobs import decode, extract, query
from runtime.session import REPO, TEST_PROFILE
from store_format.fs import FILESYSTEMS_ENV
from store_format.store import Store
from tools.sparkcluster import app_conf, spark_submit_command, stop_processes

from .support import remotefs
from .conftest import FIXTURES, assert_same_audit, isolated_python, parquet_rows
from .test_packaging import package

pytestmark = pytest.mark.cluster

# what the applications ask of the two one-core workers (1 GiB each)
APP_CONF = {**TEST_PROFILE, **app_conf(executor_memory="512m")}
# the custom scheme as a user names theirs: a module shipped with --py-files, its factory in the environment of the
# driver (spark-submit's) and of the executors (spark.executorEnv)
REMOTE_ENV = {FILESYSTEMS_ENV: f"{remotefs.SCHEME}=remotefs:from_uri",
              remotefs.ROOTS_ENV: json.dumps({"fx": str(FIXTURES)})}
REMOTE_STORE = "elsewhere://fx/broker/store"


def _job_argv(stores: list[Path], out: Path, window: tuple[int, int]) -> dict[str, list[str]]:
    flags = [arg for s in stores for arg in ("--store", str(s))]
    return {"audit": ["--store", *map(str, stores), "--out", str(out / "audit")],
            "decode": ["--store", *map(str, stores), "--out", str(out / "decode")],
            "extract": [*flags, "--walk", "salvage", "--out", str(out / "extract")],
            "query": [*flags, "--from", str(window[0]), "--to", str(window[1])]}


def _window(stores: list[Path]) -> tuple[int, int]:
    """The query's store-time window: from the middle of the damaged store's recovered messages to the middle of
    the fixture's, so it cuts both (read with store_format, no Spark: the submits start before any local run)."""
    times = [sorted(f.message.store_timestamp for f in Store(s).walk_commitlog() if f.kind == "message")
             for s in stores]
    fixture, damaged = times
    assert fixture and damaged and damaged[-1] < fixture[0]
    return damaged[len(damaged) // 2], fixture[len(fixture) // 2]


class _Submitted:
    """A spark-submit running in the background (its own process group), output to files; stopped by pid if the
    test ends first."""

    def __init__(self, cluster, env: dict, py_files: list[Path], app: Path, args: list, work: Path, name: str):
        conf = {**APP_CONF, "spark.executorEnv.PYTHONPATH": env["PYTHONPATH"],  # third-party packages, installed
                **{f"spark.executorEnv.{k}": env[k] for k in REMOTE_ENV}}
        cmd = spark_submit_command(cluster.master_url, app, args, py_files=",".join(map(str, py_files)), conf=conf)
        self.stdout, self.stderr = work / f"{name}.out", work / f"{name}.err"
        with open(self.stdout, "w") as out, open(self.stderr, "w") as err:
            self.proc = subprocess.Popen(cmd, env=env, cwd=work, stdout=out, stderr=err, start_new_session=True)

    def wait(self, timeout: float = 900) -> "_Submitted":
        self.returncode = self.proc.wait(timeout=timeout)
        return self

    def output(self) -> str:
        return self.stdout.read_text()[-3000:] + self.stderr.read_text()[-6000:]

    def stop(self) -> None:
        stop_processes([self.proc])


def _applications(cluster) -> set[str]:
    """The ids of the applications the Master knows (running or ended)."""
    state = cluster.state() or {}
    return {a["id"] for key in ("activeapps", "completedapps") for a in state.get(key, [])}


def _wait_for_application(cluster, submitted: _Submitted, known: set[str], timeout: float = 300) -> None:
    """Until the Master knows an application not in ``known`` (``submitted``'s), or the spark-submit has ended."""
    import time

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and submitted.proc.poll() is None and not _applications(cluster) - known:
        time.sleep(0.5)


@pytest.fixture(scope="module")
def runs(request, spark_cluster, spark, two_stores, tmp_path_factory):  # the cluster first: it may skip
    """The jobs on the cluster and in the test session (local[2], from the checkout), side by side: the audit's
    application file and tests/support/cluster_app.py (decode, extract, query) are submitted together, and the local
    audit, decode, extract and query run meanwhile.  The audit asks for every core of the cluster, so the Master
    gives the second application its executors only once the audit's application has ended (its executors have
    left numba's cache behind): its driver starts meanwhile.  Returns the outputs' folders and what each run
    said."""
    work = tmp_path_factory.mktemp("cluster-run")
    dist = work / "dist"
    zip_path = package.build(dist / "rocketmq_forensics.zip")
    zip_path.chmod(0o444)
    dist.chmod(0o555)  # read-only (root writes anyway: the listing after the runs is the proof)
    listing = sorted(os.listdir(dist))
    _, env = isolated_python(work)  # only the zip can supply the project, to the driver and to the executors
    env.update(REMOTE_ENV)
    # a writable folder on the scheme (an object store: no rename of folders), for the audit's --out, and the
    # damaged store served there too: the audit_remote run shares no local path with its executors
    remote_out = work / "remote-out"
    remote_out.mkdir()
    env[remotefs.ROOTS_ENV] = json.dumps({"fx": str(FIXTURES), "dmg": str(two_stores[1].parent.parent),
                                          "outs": {"root": str(remote_out), "writable": True, "rename": False}})
    apps = work / "apps"  # outside the repository: the application file's folder is on the driver's path
    apps.mkdir()
    shutil.copy(REPO / "jobs" / "audit" / "__main__.py", apps / "audit_job.py")
    shutil.copy(REPO / "tests" / "support" / "cluster_app.py", apps / "cluster_app.py")
    shutil.copy(REPO / "tests" / "support" / "remotefs.py", apps / "remotefs.py")
    py_files = [zip_path, apps / "remotefs.py"]
    window = _window(two_stores)
    out, local = work / "out", work / "local"
    argv, local_argv = _job_argv(two_stores, out, window), _job_argv(two_stores, local, window)
    spec = {**{k: argv[k] for k in ("decode", "extract", "query")}, "query_out": str(out / "query.jsonl"),
            "result": str(work / "app.json"),
            "decode_remote": ["--store", REMOTE_STORE, "--out", str(out / "decode-remote")],
            "audit_remote": ["--store", REMOTE_STORE, f"elsewhere://dmg/{two_stores[1].parent.name}/store",
                             "--out", "elsewhere://outs/audit", "--executor", "spark"]}
    (work / "spec.json").write_text(json.dumps(spec))
    submitted = []

    def submit_jobs():  # once the Master has the audit's application (the cores go to the one registered first)
        _wait_for_application(spark_cluster, submitted[0], known)
        submitted.append(_Submitted(spark_cluster, env, py_files, apps / "cluster_app.py", [work / "spec.json"],
                                    work, "jobs"))

    second = threading.Thread(target=submit_jobs, name="submit cluster_app.py")
    known = _applications(spark_cluster)  # the session's earlier applications on this cluster
    try:
        submitted.append(_Submitted(spark_cluster, env, py_files, apps / "audit_job.py", argv["audit"], work, "audit"))
        second.start()
        reference, audit_code = request.getfixturevalue("local_audit")
        codes = {"audit": audit_code}
        codes["decode"] = decode.run(spark, decode.build_parser().parse_args(local_argv["decode"])).exit_code
        codes["extract"] = extract.run(spark, extract.build_parser().parse_args(local_argv["extract"])).exit_code
        buf = io.StringIO()
        codes["query"] = query.run(spark, query.build_parser().parse_args(local_argv["query"]), out=buf).exit_code
        (local / "query.jsonl").write_text(buf.getvalue())
        audited = submitted[0].wait()
        assert audited.returncode in (0, 1), audited.output()
        second.join()
        assert len(submitted) == 2, "tests/support/cluster_app.py was not submitted"
        jobs = submitted[1].wait()
        assert jobs.returncode == 0, runtime.output()
    finally:
        if second.ident is not None:
            second.join()
        for sub in submitted:
            sub.stop()
        dist.chmod(0o755)
    return {"out": out, "local": local, "reference": reference, "window": window, "codes": codes,
            "remote_out": remote_out, "damaged_base": two_stores[1].parent.parent,
            "audit": audited, "app": json.loads((work / "app.json").read_text()), "zip": zip_path,
            "listing": (listing, sorted(os.listdir(dist)))}


# --------------------------------------------------------------------------------------------------------


def test_the_audit_on_the_cluster_equals_local(runs):
    audited = runs["audit"]
    assert runs["codes"]["audit"] == 1 and audited.returncode == 1  # the damaged store has errors: exit 1 both
    assert "\naudit DATA LOST (2 stores): 1 cut, " in audited.stdout.read_text()
    summary = assert_same_audit(runs["out"] / "audit", runs["reference"])
    assert summary["counts"]["error"] > 0 and {b["name"] for b in summary["brokers"]} == {"broker", "damaged"}


def test_decode_extract_and_query_on_the_cluster_equal_local(runs):
    out, local, window, app = runs["out"], runs["local"], runs["window"], runs["app"]
    codes = {k: v for k, v in app["codes"].items() if k != "audit_remote"}  # (its own test, below)
    assert codes == {**{k: runs["codes"][k] for k in ("decode", "extract", "query")}, "decode_remote": 0} == \
        {"decode": 0, "extract": 0, "query": 0, "decode_remote": 0}
    decoded = parquet_rows(out / "decode")
    assert decoded == parquet_rows(local / "decode") and len(decoded) > 25
    extracted = parquet_rows(out / "extract")
    assert extracted == parquet_rows(local / "extract") and sum(extracted.values()) >= sum(decoded.values())
    mine, theirs = (json.loads((d / "extract" / "_manifest.json").read_text()) for d in (out, local))
    assert mine["counts"] == theirs["counts"] and mine["counts"]["reconciled"]
    assert mine["by_topic"] == theirs["by_topic"]
    hits = sorted((out / "query.jsonl").read_text().splitlines())
    assert hits == sorted((local / "query.jsonl").read_text().splitlines())
    found = [json.loads(h) for h in hits]
    assert {h["broker"] for h in found} == {"broker", "damaged"}  # the window cuts both stores
    assert all(window[0] <= h["store_timestamp"] <= window[1] for h in found)


def test_the_cluster_decodes_a_store_on_a_custom_file_system(runs):
    """decode over ``elsewhere://`` on the cluster: the driver's planning and the executors' reads resolve the scheme
    through the environment, and the rows are the local decode's of the same store."""
    local = parquet_rows(runs["local"] / "decode")
    mine = {row for row in local.elements() if json.loads(row)["broker"] == "broker"}
    remote = parquet_rows(runs["out"] / "decode-remote")
    assert remote == Counter({row: local[row] for row in mine}) and len(mine) >= 25  # the fixture's 25 messages


def test_the_cluster_audits_a_store_into_an_output_on_a_custom_file_system(runs):
    """Issue 30 item 4: the audit with its stores AND its --out on ``elsewhere://`` (an object store's manners: no
    rename of folders, so the commit writes its marker last).  The executors write their findings through the fs
    seam, with no path shared with the driver, and the output equals the local run's, paths aside."""
    out = runs["remote_out"] / "audit"
    assert runs["app"]["codes"]["audit_remote"] == runs["codes"]["audit"]
    assert sorted(p.name for p in runs["remote_out"].iterdir()) == ["audit"]  # no staging or claim left behind
    assert json.loads((out / "_ROCKETMQ_FORENSICS").read_text())["state"] == "committed"
    reference, damaged_base = runs["reference"], runs["damaged_base"]
    swaps = [("elsewhere://fx/", f"{FIXTURES}/"), ("elsewhere://dmg/", f"{damaged_base}/"),
             (f"{remotefs.PREFIX}/fx", str(FIXTURES)), (f"{remotefs.PREFIX}/dmg", str(damaged_base))]

    def local_paths(text: str) -> str:
        for a, b in swaps:
            text = text.replace(a, b)
        return text

    from .conftest import AUDIT_STAMPS

    for name in ("findings", "metrics", *(f"tables/{t.name}" for t in (reference / "tables").iterdir())):
        rows = parquet_rows(out / name, AUDIT_STAMPS)
        assert Counter({local_paths(k): v for k, v in rows.items()}) == parquet_rows(reference / name, AUDIT_STAMPS), \
            name


def test_executors_import_the_project_only_from_the_zip(spark_cluster, runs):
    """Every probed Python worker ran without site-packages and imported the project from the zip Spark copied
    into its executor's work folder under a worker of the cluster; both workers ran tasks; the driver's came
    from the submitted zip; nothing was written beside it, and the executors of this second application
    loaded the kernels from numba's cache (a new zip path per application: a path-keyed cache would miss)."""
    app, zip_path, (before, after) = runs["app"], runs["zip"], runs["listing"]
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
