"""A Spark Connect client, run by tests/test_connect.py in a process of its own (a Connect session changes
process-wide state: pyspark's functions and columns turn remote, and a classic session in the same process
refuses it).

    SPARK_REMOTE=sc://127.0.0.1:PORT python connect_client.py SPEC.json

SPEC.json: {"zip", "stores", "out", "result"}.  As a notebook user would: a session from
``SparkSession.builder.remote``, the packaged zip added as a Python artifact (runtime.session.ship_project), the
sources registered, every source read, the audit's library entry point ``jobs.audit.run(spark, args)``.  Then,
the session stopped, the audit's command line (``jobs.audit.main``), whose session comes from SPARK_REMOTE
through runtime/session.py.  Rows go to Parquet under ``out`` for the test to compare; the result file gets the
sessions' kinds, the counts read, and the exit codes.
"""
from __future__ import annotations

import json
import os
import sys

METADATA_TABLES = ("checkpoint", "topics", "consumer_offsets")  # a file of each kind: binary, config JSON


def source_reads(spark, stores: list[str]) -> dict:
    """name -> a function that makes the read's DataFrame: every source over every store (the commitlog in its
    exact two-pass form, three of the metadata tables)."""
    from datasources import read_commitlog

    def fmt(store, name, **options):
        return lambda: spark.read.format(name).options(**options).load(store)

    reads = {}
    for i, store in enumerate(stores):
        reads[f"{i}-commitlog"] = lambda store=store: read_commitlog(spark, store)
        reads[f"{i}-consumequeue"] = fmt(store, "rocketmq-consumequeue")
        reads[f"{i}-index"] = fmt(store, "rocketmq-index")
        for table in METADATA_TABLES:
            reads[f"{i}-metadata-{table}"] = fmt(store, "rocketmq-metadata", table=table)
    return reads


def read_all(spark, stores: list[str], threads: int = 4) -> dict:
    """name -> the read's rows as an Arrow table, the reads run from ``threads`` threads at once (each is a
    handful of small Spark jobs whose time is mostly scheduling and Python workers starting: a Connect session
    and a classic one both take jobs from several threads)."""
    from concurrent.futures import ThreadPoolExecutor

    reads = source_reads(spark, stores)
    with ThreadPoolExecutor(threads) as pool:
        tables = pool.map(lambda make: make().toArrow(), reads.values())
        return dict(zip(reads, tables))


def read_sources(spark, stores: list[str], out: str) -> dict[str, int]:
    """:func:`read_all`, each read's rows written as one Parquet file; rows per read."""
    import pyarrow.parquet as pq

    os.makedirs(out, exist_ok=True)
    counts = {}
    for name, t in read_all(spark, stores).items():
        pq.write_table(t, os.path.join(out, f"{name}.parquet"))
        counts[name] = t.num_rows
    return counts


def main(spec_path: str) -> int:
    with open(spec_path) as f:
        spec = json.load(f)
    from pyspark.sql import SparkSession

    import datasources
    from jobs import audit
    from runtime.session import is_connect, ship_project

    spark = SparkSession.builder.remote(os.environ["SPARK_REMOTE"]).getOrCreate()
    result = {"notebook_session": type(spark).__module__, "connect": is_connect(spark)}
    from datasources.base import planned_parallelism

    result["planned_parallelism"] = planned_parallelism(spark)  # the audit's cores where the server sets none
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
