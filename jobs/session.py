"""Building the SparkSession every job and test uses: spark-conf/ defaults, project modules importable by
Python workers, and the data sources registered."""
from __future__ import annotations

import os
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
SPARK_CONF_DIR = REPO / "spark-conf"

# The fast profile for tests (spark-notes.md: "Fast tests").
TEST_PROFILE = {
    "spark.ui.enabled": "false",
    "spark.ui.showConsoleProgress": "false",
    "spark.sql.shuffle.partitions": "2",
    "spark.default.parallelism": "2",
    "spark.sql.adaptive.enabled": "false",
    "spark.sql.codegen.wholeStage": "false",
    "spark.driver.memory": "1g",
    "spark.driver.extraJavaOptions": "-XX:+UseSerialGC -XX:TieredStopAtLevel=1",
}


# What the jobs need whatever spark-conf/ says or wherever it is (a zip on --py-files has no spark-conf/):
# a clean stderr, the Python data sources push filters down, and Delta (delta-rs) cannot read Spark's INT96
# timestamps.
REQUIRED = {
    "spark.ui.showConsoleProgress": "false",  # jobs/progress.py draws the progress line; Spark's bar would garble it
    "spark.sql.python.filterPushdown.enabled": "true",
    "spark.sql.session.timeZone": "UTC",
    "spark.sql.parquet.outputTimestampType": "TIMESTAMP_MICROS",
}


def read_defaults(path: Path = SPARK_CONF_DIR / "spark-defaults.conf") -> dict[str, str]:
    conf = {}
    if path.exists():
        for line in path.read_text().splitlines():
            line = line.strip()
            if line and not line.startswith("#"):
                key, _, value = line.partition(" ")
                conf[key] = value.strip().replace("spark-conf/", f"{SPARK_CONF_DIR}/")
    return conf


#: seconds the last :func:`build_session` of this process took (the JVM's start included): what a job's
#: --profile reports apart from the job's own time
last_start_seconds: float | None = None


def build_session(app_name: str, master: str | None = None, test_profile: bool = False, extra: dict | None = None):
    """A SparkSession with the project's defaults.  Python workers use this interpreter and can import
    the project's packages (data source classes are pickled by reference)."""
    global last_start_seconds
    started = time.perf_counter()
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    paths = os.environ.get("PYTHONPATH", "").split(os.pathsep)
    if str(REPO) not in paths:
        os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO)] + paths))
    from pyspark.sql import SparkSession

    conf = {**REQUIRED, **read_defaults()}
    if test_profile:
        conf.update(TEST_PROFILE)
    conf.update(extra or {})
    builder = SparkSession.builder.appName(app_name)
    # spark-submit --master (or a master set by the caller) wins over spark-defaults.conf's local[2]
    submitted = bool(os.environ.get("PYSPARK_GATEWAY_PORT"))  # set when spark-submit started this driver
    if master or ("spark.master" in conf and not submitted):
        builder = builder.master(master or conf["spark.master"])
    conf.pop("spark.master", None)
    for key, value in conf.items():
        builder = builder.config(key, value)
    session = builder.getOrCreate()
    session.sparkContext.setLogLevel("WARN")
    from datasources import register

    register(session)  # a source that cannot register fails here, with its name
    last_start_seconds = time.perf_counter() - started
    return session
