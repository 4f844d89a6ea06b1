"""The Spark application tests/test_cluster.py submits to the standalone cluster after the audit: the decode,
extract and query jobs through their command lines (each module's ``main(argv)``, in one application: one
driver and one set of executors for the three), then a probe of what the executors imported.

    spark-submit --master spark://... --py-files rocketmq_forensics.zip cluster_app.py SPEC.json

SPEC.json: {"decode": argv, "extract": argv, "query": argv, "query_out": path, "result": path, "decode_remote":
argv, "audit_remote": argv} (decode_remote: decode over a custom file system's URI, which the environment
registers; audit_remote: the audit with its stores and its --out on that file system).  The result
file gets each job's exit code and, per Python worker that ran a probe task, where ``jobs`` and
``decoding.compiled`` were imported from, whether the interpreter saw site-packages, and numba's cache counts.
No import of the project at the top: Spark has put the zip on the driver's path by the time ``main`` runs.
"""
import contextlib
import json
import sys


def probe_executors(spark, tasks: int = 4) -> list[dict]:
    """One row per probe task: the Python worker's view of the project (see the module docstring)."""
    import pyarrow as pa

    schema = pa.schema([("pid", pa.int64()), ("executor_cwd", pa.string()), ("jobs_file", pa.string()),
                        ("compiled_file", pa.string()), ("no_site", pa.bool_()), ("numba_cache_dir", pa.string()),
                        ("cache_hits", pa.int64()), ("cache_misses", pa.int64())])

    def where(batches):
        import os
        import sys

        import jobs
        import decoding.compiled as compiled

        cached = [v for v in vars(compiled).values() if hasattr(v, "stats") and getattr(v, "_cache", None) is not None
                  and type(v._cache).__name__ != "NullCache"]
        row = {"pid": os.getpid(), "executor_cwd": os.getcwd(), "jobs_file": jobs.__file__,
               "compiled_file": compiled.__file__, "no_site": bool(sys.flags.no_site),
               "numba_cache_dir": compiled._ZIP_CACHE_DIR,
               "cache_hits": sum(sum(d.stats.cache_hits.values()) for d in cached),
               "cache_misses": sum(sum(d.stats.cache_misses.values()) for d in cached)}
        for _ in batches:
            yield pa.RecordBatch.from_pylist([row], schema=schema)

    from pyspark.sql.pandas.types import from_arrow_schema

    df = spark.range(0, tasks, 1, numPartitions=tasks).mapInArrow(where, from_arrow_schema(schema))
    return df.toArrow().to_pylist()


def main(spec_path: str) -> int:
    with open(spec_path) as f:
        spec = json.load(f)
    from jobs import decode, extract, query
    from runtime.session import build_session

    codes = {"decode": decode.main(spec["decode"]), "extract": extract.main(spec["extract"])}
    with open(spec["query_out"], "w") as out, contextlib.redirect_stdout(out):
        codes["query"] = query.main(spec["query"])
    codes["decode_remote"] = decode.main(spec["decode_remote"])
    if spec.get("audit_remote"):  # the stores AND --out on the custom scheme: no path shared with the executors
        from jobs.audit import job as audit

        codes["audit_remote"] = audit.main(spec["audit_remote"])
    spark = build_session("cluster probe")  # the jobs' session, still running
    import jobs

    result = {"codes": codes, "driver_jobs_file": jobs.__file__, "executors": probe_executors(spark)}
    with open(spec["result"], "w") as f:
        json.dump(result, f)
    spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
