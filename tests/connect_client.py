"""A Spark Connect client, run by tests/test_connect.py in a process of its own (a Connect session changes
process-wide state: pyspark's functions and columns turn remote, and a classic session in the same process
refuses it).

    SPARK_REMOTE=sc://127.0.0.1:PORT python connect_client.py SPEC.json

SPEC.json: {"zip", "stores", "out", "result"}.  As a notebook user would: a session from
``SparkSession.builder.remote``, the packaged zip added as a Python artifact (jobs.session.ship_project), the
sources registered, every source read, the audit's library entry point ``jobs.audit.run(spark, args)``.  Then,
the session stopped, the audit's command line (``jobs.audit.main``), whose session comes from SPARK_REMOTE
through jobs/session.py.  Rows go to Parquet under ``out`` for the test to compare; the result file gets the
sessions' kinds, the counts read, and the exit codes.
"""
from __future__ import annotations

import json
import os
import sys

METADATA_TABLES = ("checkpoint", "topics", "consumer_offsets")  # a file of each kind: binary, config JSON


def read_sources(spark, stores: list[str], out: str) -> dict[str, int]:
    """Every source over every store (the commitlog in its exact two-pass form, three of the metadata tables),
    each read's rows written as one Parquet file; rows per read."""
    import pyarrow.parquet as pq

    from datasources import read_commitlog

    reads = {}
    for i, store in enumerate(stores):
        reads[f"{i}-commitlog"] = read_commitlog(spark, store)
        reads[f"{i}-consumequeue"] = spark.read.format("rocketmq-consumequeue").load(store)
        reads[f"{i}-index"] = spark.read.format("rocketmq-index").load(store)
        for table in METADATA_TABLES:
            reads[f"{i}-metadata-{table}"] = spark.read.format("rocketmq-metadata").option("table", table).load(store)
    counts = {}
    os.makedirs(out, exist_ok=True)
    for name, df in reads.items():
        t = df.toArrow()
        pq.write_table(t, os.path.join(out, f"{name}.parquet"))
        counts[name] = t.num_rows
    return counts


def main(spec_path: str) -> int:
    with open(spec_path) as f:
        spec = json.load(f)
    from pyspark.sql import SparkSession

    import datasources
    from jobs import audit
    from jobs.session import is_connect, ship_project

    spark = SparkSession.builder.remote(os.environ["SPARK_REMOTE"]).getOrCreate()
    result = {"notebook_session": type(spark).__module__, "connect": is_connect(spark)}
    ship_project(spark, spec["zip"])
    datasources.register(spark)
    result["reads"] = read_sources(spark, spec["stores"], os.path.join(spec["out"], "sources"))
    args = audit.build_parser().parse_args(["--store", *spec["stores"], "--out", os.path.join(spec["out"], "audit")])
    result["audit_exit"] = audit.run(spark, args).exit_code
    spark.stop()
    # the command line, as `SPARK_REMOTE=sc://... python -m jobs.audit ...` runs it
    result["cli_exit"] = audit.main(["--store", *spec["stores"], "--out", os.path.join(spec["out"], "audit-cli"),
                                     "--no-report"])
    with open(spec["result"], "w") as f:
        json.dump(result, f)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
