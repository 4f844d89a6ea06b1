"""Run a command-line module with a hook on one of its progress lines: the triggers of the interrupt and custody
tests (tests/test_interrupts.py, tests/test_custody.py), with no sleeps.

  python tests/support/paused.py --at REGEX [--then MODE] [--stream stdout] -- MODULE [ARGS...]

runs ``python -m MODULE ARGS...`` in this process; when its main thread writes a line to stderr (or stdout) that
matches REGEX (the first such line), the line is written and flushed, and then, by MODE:

``wait``       (default) the main thread blocks until a signal comes: the signal lands exactly at that
               progress line, a phase boundary
``stdin``      the main thread blocks until a line comes on stdin: the test changes the store's files
               meanwhile, then writes a line, and the job goes on
``finalizer``  a finalizer (``__del__``) sends this process SIGINT, so the exception is raised and swallowed
               inside it ("Exception ignored in"), as py4j's finalizers do; the job goes on
``spark``      a Spark job that never ends is started from the main thread; its task writes ``SPARK TASK RUNNING``
               to stderr: the signal lands while the main thread waits on py4j for a running Spark job
``iterate``    the rows of an endless Spark job are read in the main thread (``toLocalIterator``, as replay
               reads its rows); ``ITERATING`` is written to stderr after the first
"""
from __future__ import annotations

import argparse
import os
import re
import runpy
import signal
import sys
import threading
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))


class _Swallower:
    def __del__(self):
        os.kill(os.getpid(), signal.SIGINT)
        for _ in range(1000):  # bytecodes for the handler to run on, inside this finalizer
            pass


def _block_forever(batches):
    import sys as s
    import threading as t

    s.stderr.write("SPARK TASK RUNNING\n")  # a Python worker's stderr reaches the job's, through the JVM
    s.stderr.flush()
    t.Event().wait()
    yield from batches


def _spark_job() -> None:
    from pyspark.sql import SparkSession

    spark = SparkSession.getActiveSession()
    spark.range(0, 1, 1, numPartitions=1).mapInArrow(_block_forever, "id long").collect()


def _iterate_forever() -> None:
    """What replay does with its rows: a Spark job's rows read in the main thread (``toLocalIterator``)."""
    from pyspark.sql import SparkSession

    spark = SparkSession.getActiveSession()
    # 16,384 partitions of 65,536 rows: endless for the test; the 16M-partition range before is a driver-side plan
    # of 16M partitions to build and cancel, the suspect when one CI run outlived the test's 240 s
    rows = spark.range(0, 1 << 30, 1, numPartitions=1 << 14).toLocalIterator(prefetchPartitions=True)
    first = True
    for _ in rows:
        if first:
            sys.__stderr__.write("ITERATING\n")
            sys.__stderr__.flush()
            first = False


class _Hooked:
    """stderr, with the hook run after the first matching line the main thread writes."""

    def __init__(self, stream, pattern: re.Pattern, then: str):
        self.stream, self.pattern, self.then = stream, pattern, then
        self.buffer = ""
        self.fired = False

    def write(self, text: str) -> int:
        if self.fired or threading.current_thread() is not threading.main_thread():
            return self.stream.write(text)
        self.buffer += text
        *lines, self.buffer = self.buffer.split("\n")
        # decided before the line goes out: the signal the reader sends on seeing it may land anywhere after
        self.fired = any(self.pattern.search(ln) for ln in lines)
        n = self.stream.write(text)
        if self.fired:
            self.stream.flush()
            self._hook()
        return n

    def _hook(self) -> None:
        if self.then == "wait":
            threading.Event().wait()
        elif self.then == "stdin":
            sys.stdin.readline()
        elif self.then == "finalizer":
            x = _Swallower()
            del x
        elif self.then == "spark":
            _spark_job()
        elif self.then == "iterate":
            _iterate_forever()

    def flush(self) -> None:
        self.stream.flush()

    def __getattr__(self, name):
        return getattr(self.stream, name)


def main() -> None:
    import faulthandler

    faulthandler.register(signal.SIGUSR1, all_threads=True)  # a stuck run says where it is
    p = argparse.ArgumentParser()
    p.add_argument("--at", required=True)
    p.add_argument("--then", choices=("wait", "stdin", "finalizer", "spark", "iterate"), default="wait")
    p.add_argument("--stream", choices=("stderr", "stdout"), default="stderr", help="whose lines to watch")
    p.add_argument("module")
    p.add_argument("args", nargs=argparse.REMAINDER)
    a = p.parse_args()
    setattr(sys, a.stream, _Hooked(getattr(sys, a.stream), re.compile(a.at), a.then))
    sys.argv = [a.module, *a.args]
    runpy.run_module(a.module, run_name="__main__", alter_sys=True)


if __name__ == "__main__":
    main()
