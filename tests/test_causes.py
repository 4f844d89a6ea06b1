"""Issue 33, "Errors that name the cause": a Spark error is its root cause in one line (``--debug`` keeps the
stack), and a full disk, a file size limit or a MemoryError names the file and the operation (runtime/causes.py,
runtime/cli.py's report_failure).

The reducer is tested on Py4J/Java error texts as Spark 4.x prints them (a task that hit the file size limit
while writing shuffle data, a write task that hit a full disk, a Python worker's traceback, an analysis error),
the runtime's line in process (a job whose work fails), and once end to end: ``extract`` under a file size limit
(``RLIMIT_FSIZE``: writes fail with EFBIG, "File too large", the way a full disk fails with ENOSPC)."""
from __future__ import annotations

import errno
import os
import resource
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from runtime import cli, progress
from runtime.causes import cause_line, reduce_text

from .conftest import fixture_store

REPO = Path(__file__).resolve().parent.parent

SHUFFLE_EFBIG = """An error occurred while calling o97.parquet.
: org.apache.spark.SparkException: Job aborted due to stage failure: Task 0 in stage 5.0 failed 1 times, most recent failure: Lost task 0.0 in stage 5.0 (TID 4) (192.0.2.2 executor driver): java.io.IOException: File too large
\tat java.base/java.io.FileOutputStream.writeBytes(Native Method)
\tat java.base/java.io.FileOutputStream.write(FileOutputStream.java:349)
\tat org.apache.spark.storage.TimeTrackingOutputStream.write(TimeTrackingOutputStream.java:59)
\tat org.apache.spark.shuffle.sort.BypassMergeSortShuffleWriter.write(BypassMergeSortShuffleWriter.java:185)
\tat java.base/java.lang.Thread.run(Thread.java:840)

Driver stacktrace:
\tat org.apache.spark.scheduler.DAGScheduler.failJobAndIndependentStages(DAGScheduler.scala:2935)
\tat scala.Option.foreach(Option.scala:437)
Caused by: java.io.IOException: File too large
\tat java.base/java.io.FileOutputStream.writeBytes(Native Method)
\t... 22 more
"""

WRITE_ENOSPC = """An error occurred while calling o123.save.
: org.apache.spark.SparkException: Job aborted due to stage failure: Task 1 in stage 3.0 failed 1 times, most recent failure: Lost task 1.0 in stage 3.0 (TID 7) (10.0.0.5 executor driver): org.apache.spark.SparkException: [TASK_WRITE_FAILED] Task failed while writing rows to file:/data/out/messages. SQLSTATE: 58030
\tat org.apache.spark.sql.errors.QueryExecutionErrors$.taskFailedWhileWritingRowsError(QueryExecutionErrors.scala:775)
\tat org.apache.spark.sql.execution.datasources.FileFormatWriter$.executeTask(FileFormatWriter.scala:421)
Caused by: java.io.IOException: No space left on device
\tat java.base/java.io.FileOutputStream.writeBytes(Native Method)
\tat org.apache.parquet.hadoop.ParquetFileWriter.end(ParquetFileWriter.java:1645)
\t... 15 more

Driver stacktrace:
\tat org.apache.spark.scheduler.DAGScheduler.failJobAndIndependentStages(DAGScheduler.scala:2935)
Caused by: org.apache.spark.SparkException: [TASK_WRITE_FAILED] Task failed while writing rows to file:/data/out/messages. SQLSTATE: 58030
\tat org.apache.spark.sql.errors.QueryExecutionErrors$.taskFailedWhileWritingRowsError(QueryExecutionErrors.scala:775)
Caused by: java.io.IOException: No space left on device
\tat java.base/java.io.FileOutputStream.writeBytes(Native Method)
\t... 15 more
"""

PYTHON_WORKER = """An exception was thrown from the Python worker. Please see the stack trace below.
Traceback (most recent call last):
  File "/opt/venv/lib/python3.11/site-packages/pyspark/worker.py", line 1523, in main
    process()
  File "/work/jobs/audit/tasks.py", line 140, in run_one
    task.run(out)
  File "/work/store_format/fs/maps.py", line 210, in __init__
    raise MemoryError("mapping 1073741824 bytes")
MemoryError: mapping 1073741824 bytes


JVM stacktrace:
org.apache.spark.api.python.PythonException: Traceback (most recent call last):
\tat org.apache.spark.api.python.BasePythonRunner$ReaderIterator.handlePythonException(PythonRunner.scala:624)
"""

ANALYSIS = "[PATH_NOT_FOUND] Path does not exist: file:/data/in/missing. SQLSTATE: 42K03"


def test_a_java_chain_is_its_innermost_cause():
    assert reduce_text(SHUFFLE_EFBIG) == "File too large (IOException), in parquet()"


def test_a_write_that_filled_the_disk_names_the_file_and_the_operation():
    assert reduce_text(WRITE_ENOSPC) == "No space left on device (IOException), writing file:/data/out/messages"


def test_a_python_workers_failure_is_the_last_line_of_its_traceback():
    assert reduce_text(PYTHON_WORKER) == "mapping 1073741824 bytes (MemoryError)"


def test_an_analysis_error_is_its_message_without_the_sqlstate():
    assert reduce_text(ANALYSIS) == "[PATH_NOT_FOUND] Path does not exist: file:/data/in/missing."


def java_error(text: str):
    """A Py4JJavaError whose text (which a real one asks the JVM for) is ``text``."""
    from py4j.protocol import Py4JJavaError

    class Captured(Py4JJavaError):
        def __init__(self):
            Exception.__init__(self, text)

        def __str__(self):
            return text

    return Captured()


def test_a_py4j_java_error_is_reduced_and_says_where_the_job_was():
    e = java_error(WRITE_ENOSPC)
    assert cause_line(e, "during writing messages") == (
        "No space left on device (IOException), writing file:/data/out/messages (during writing messages)")


def test_full_disk_and_memory_errors_name_the_file_and_the_operation():
    full = OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), "/data/out/findings/part-driver.parquet")
    assert cause_line(full, "during writing findings") == (
        "/data/out/findings/part-driver.parquet: No space left on device, during writing findings")
    assert cause_line(MemoryError(), "during scan (3 task(s))") == "out of memory, during scan (3 task(s))"
    assert cause_line(OSError(errno.EACCES, "Permission denied", "/x")) is None  # its usual line


def _job(failure):
    def build_parser():
        import argparse

        return argparse.ArgumentParser(prog="rocketmq-forensics demo")

    def run(spark, args):
        progress.say("writing findings")
        raise failure

    return build_parser, run


@pytest.mark.parametrize("debug", [False, True])
def test_the_runtime_prints_one_line_with_the_cause_and_debug_keeps_the_stack(capsys, debug):
    build_parser, run = _job(java_error(WRITE_ENOSPC))
    code = cli.main("demo", build_parser, run, ["--quiet"] + (["--debug"] if debug else []),
                    needs_spark=lambda a: False)
    err = capsys.readouterr().err
    assert code == cli.EXIT_FAILED
    last = err.strip().splitlines()[-1]
    assert last.startswith("demo: error: No space left on device (IOException), writing file:/data/out/messages"
                           " (during writing findings)")
    if debug:
        assert "Traceback" in err and "at org.apache.spark" in err  # the whole chain
    else:
        assert err.strip() == last and last.endswith("(--debug shows the traceback)")


def test_the_runtime_names_the_file_of_a_full_disk(capsys):
    build_parser, run = _job(OSError(errno.ENOSPC, "No space left on device", "/data/out/metrics/part-0.parquet"))
    code = cli.main("demo", build_parser, run, ["--quiet"], needs_spark=lambda a: False)
    assert code == cli.EXIT_FAILED
    assert capsys.readouterr().err.strip() == (
        "demo: error: /data/out/metrics/part-0.parquet: No space left on device, during writing findings")


@pytest.mark.spark
@pytest.mark.slow
@pytest.mark.parametrize("fmt, says", [
    ("jsonl", "extract: error: File too large (IOException)"),  # Spark's writer: the cause of its failed job
    ("parquet", "part-00000.snappy.parquet: File too large, during select and write"),  # the tasks': the file
])
def test_extract_under_a_file_size_limit_is_one_line_naming_the_cause(tmp_path, fmt, says):
    """End to end: Spark's shuffle and Parquet writes, and the extract's own tasks' (runtime/export.py), fail with
    EFBIG past RLIMIT_FSIZE (SIGXFSZ ignored, as a full disk gives ENOSPC); the line was ``Py4JJavaError: An error
    occurred while calling o97.parquet.`` after pages of Java stack, and a task's write once named the store."""
    store = tmp_path / "store"
    shutil.copytree(fixture_store("basic"), store)
    limit = 100_000  # the JVM starts under it; the extract's shuffle and its 200 KB Parquet file do not fit

    def limited():
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))

    env = {**os.environ, "PYSPARK_PYTHON": sys.executable, "PYTHONPATH": str(REPO)}
    r = subprocess.run([sys.executable, "-m", "jobs", "extract", "--store", str(store), "--out", str(tmp_path / "out"),
                        "--format", fmt, "--quiet"], cwd=REPO, env=env, preexec_fn=limited, capture_output=True,
                       text=True, timeout=600)
    assert r.returncode == 2, r.stderr
    errors = [ln for ln in r.stderr.splitlines() if ln.startswith("extract: error:")]
    assert len(errors) == 1 and says in errors[0] and str(store) not in errors[0], r.stderr
    # the job's line is the last word, with no Python traceback and no Py4J chain after it (Spark's own log may
    # still warn of a suppressed exception on the way, with its stack: log4j's, not the job's)
    assert r.stderr.strip().splitlines()[-1] == errors[0], r.stderr
    assert "Traceback" not in r.stderr and "Py4JJavaError" not in r.stderr and "Caused by" not in r.stderr, r.stderr
    assert "Lost task" not in r.stderr  # a failed task's stack is not logged again (spark-conf/log4j2.properties)


def test_a_write_past_the_file_size_limit_names_the_file_pyarrow_does_not(tmp_path, capsys):
    """pyarrow's writers fail with ``Error writing bytes to file`` (errno EFBIG or ENOSPC, no file name): the line
    names the file our writer was writing, from its frame (runtime/output.py's write_parquet_file)."""
    import pyarrow as pa

    from runtime.output import write_parquet_file

    target = tmp_path / "findings" / "part-driver.parquet"
    target.parent.mkdir()
    table = pa.table({"x": pa.array(range(200_000), pa.int64())})

    def build_parser():
        import argparse

        return argparse.ArgumentParser(prog="rocketmq-forensics demo")

    def run(spark, args):
        progress.say("writing findings")
        write_parquet_file(table, str(target))

    soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    handler = signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    resource.setrlimit(resource.RLIMIT_FSIZE, (64 << 10, hard))
    try:
        code = cli.main("demo", build_parser, run, ["--quiet"], needs_spark=lambda a: False)
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))
        signal.signal(signal.SIGXFSZ, handler)
    assert code == cli.EXIT_FAILED
    assert capsys.readouterr().err.strip() == f"demo: error: {target}: File too large, during writing findings"
