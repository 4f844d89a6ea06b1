"""The audit with ``--profile`` through spark-submit, on local[2] and on a standalone cluster of two one-core
Workers, one after the other, with the project zip of a checkout: each run's elapsed seconds and where the time
went (the fixed cost of each stage run as a Spark job, jobs/audit/job.py).  For A/B pairs of the cluster's cost
(BENCHMARKS.md, issue 40); ``make bench``'s cluster figure (bench/run.py) is the figure of record.

    python bench/cluster_profile.py CHECKOUT STORE [local[2]] [cluster]
"""
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path


def main(argv: list[str]) -> int:
    repo, store, masters = Path(argv[0]).resolve(), argv[1], argv[2:] or ["local[2]", "cluster"]
    sys.path.insert(0, str(repo))
    from runtime.session import write_project_zip
    from tools.sparkcluster import app_conf, spark_submit, start_cluster

    work = Path(tempfile.mkdtemp(prefix="cluster-profile-"))
    zip_path = write_project_zip(work / "dist" / "rocketmq_forensics.zip", repo)
    app = work / "audit_job.py"
    shutil.copy(repo / "jobs" / "audit" / "__main__.py", app)
    env = {k: v for k, v in os.environ.items()
           if k not in ("PYTHONPATH", "SPARK_HOME", "PYSPARK_DRIVER_PYTHON", "SPARK_REMOTE")}
    env["PYSPARK_PYTHON"] = os.environ.get("PYSPARK_PYTHON", sys.executable)
    cluster = None
    try:
        for i, master in enumerate(masters):
            conf = None
            if master == "cluster":
                cluster = cluster or start_cluster(work / "cluster", workers=2, cores=1, memory="1g")
                master, conf = cluster.master_url, app_conf("1g")
            out = work / f"out-{i}"
            t = time.perf_counter()
            p = spark_submit(master, app, ["--store", store, "--out", out, "--no-report", "--profile"],
                             py_files=zip_path, conf=conf, env=env, cwd=repo,
                             properties_file=repo / "spark-conf" / "spark-defaults.conf")
            wall = time.perf_counter() - t
            summary = out / "summary.json"
            elapsed = json.loads(summary.read_text())["elapsed_seconds"] if summary.exists() else None
            print(f"=== {master}: exit {p.returncode}, elapsed {elapsed}, submit {wall:.1f} s, "
                  f"load {os.getloadavg()[0]:.1f}")
            text = p.stdout + p.stderr  # spark-submit passes the Python driver's stderr on its stdout
            print(text[text.find("where the time went"):] if "where the time went" in text else text[-3000:],
                  flush=True)
            shutil.rmtree(out, ignore_errors=True)
    finally:
        if cluster is not None:
            cluster.stop()
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
