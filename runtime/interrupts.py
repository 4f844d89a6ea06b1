"""Ctrl-C and SIGTERM in a job: Spark stopped, one line, exit 130 or 143, never a traceback or a Java stack.

The jobs' runtime (runtime/cli.py) calls :func:`install` before the job's work and :func:`attach` once its Spark
session exists (a SparkContext's start replaces the SIGINT handler with its own, which raises a bare
``KeyboardInterrupt``).  From then on SIGINT and SIGTERM raise :class:`Interrupted` in the main thread, and the
signal is recorded (store_format/interrupts.py), so that one swallowed on the way (in a py4j finalizer) still
ends the run: the runtime re-checks it when the job returns, and the audit at its phase boundaries
(:func:`check`).

:func:`stop` is what the runtime does with it: Spark's output silenced first (the driver's log level OFF, the
JVM's ``System.err``/``System.out`` to nowhere, py4j's Python logger off: a cancelled job and a cut connection
are reported by both, at length), Spark's jobs cancelled and the session stopped, and one line on stderr::

    audit: interrupted by SIGINT during scan (3 task(s) in the driver); the previous output is left as it was

what was interrupted (the job, and the phase or step runtime/progress.py knows of) and what was kept.  What was
kept is what the output code said while the interrupt unwound (:func:`note_kept`), else what
:data:`kept_describers` (callables it registers, each returning a sentence or None) and the runs of
runtime/commit.py not ended yet (``active_runs()``, each run's ``kept()``) say at the line, else what they said when
the signal came (a run that failed and ended on the way is no longer under way at the line); with nothing said,
the previous output is left as it was.
"""
from __future__ import annotations

import contextlib
import logging
import sys
import threading
from typing import Callable

from store_format.interrupts import (Interrupted, check, exit_code, handling, install as _install,  # noqa: F401
                                     interrupted_by, on_signal, pending, reset, signal_name)

#: callables saying what an interrupted run kept (or None: nothing to say); registered by the output code
kept_describers: list[Callable[[], str | None]] = []
NOTHING_KEPT = "the previous output is left as it was"

_session = {"spark": None}


def install() -> bool:
    """SIGINT and SIGTERM raise :class:`Interrupted` in the main thread (and are recorded); what was kept is
    forgotten (a new run)."""
    _kept.update(notes=[], at_signal=[])
    logging.disable(logging.NOTSET)  # a previous run's interrupt (in this process: tests) silenced the logging
    if _cancel_at_once not in on_signal:
        on_signal.append(_cancel_at_once)
    return _install()


def attach(spark) -> None:
    """The job's session, to stop on an interrupt; our handlers put back over the SparkContext's own."""
    _session["spark"] = spark
    _install()


@contextlib.contextmanager
def handlers_kept():
    """Our SIGINT handler stays while a SparkContext starts: pyspark sets its own at the end of the context's start
    (cancel the jobs, raise KeyboardInterrupt), and a Ctrl-C between that and :func:`attach` (the JVM session's own
    start can take seconds) printed py4j's tracebacks.  Only the console jobs ask for this: in a notebook pyspark's
    handler is the right one."""
    import pyspark.core.context as context

    real = context.signal

    class _KeepSigint:
        def __getattr__(self, name):
            return getattr(real, name)

        @staticmethod
        def signal(signum, handler):
            return real.getsignal(signum) if signum == real.SIGINT else real.signal(signum, handler)

    context.signal = _KeepSigint()
    try:
        yield
    finally:
        context.signal = real


def _cancel_at_once(signum: int) -> None:
    """At the signal itself (store_format.interrupts.on_signal): Spark silenced and its jobs cancelled from a
    thread of their own, so that a main thread waiting on a running job (and pyspark's calls on the way out of
    it, on the same py4j connection) gets its answer instead of waiting for the job's end."""
    # py4j logs a call cut short through the root logger (logging.exception), a traceback each: after the signal
    # nothing logged is for the user, whose one line is printed, not logged
    logging.disable(logging.CRITICAL)
    try:
        _kept["at_signal"] = _ask()  # the runs under way now: they may have ended by the time of the line
    except BaseException:  # noqa: BLE001 - the line says the default then
        pass
    spark = _session["spark"]
    if spark is not None:
        threading.Thread(target=_silence_and_cancel, args=(spark,), name="interrupt: cancel", daemon=True).start()


def _silence_and_cancel(spark) -> None:
    silence(spark)
    try:
        if _is_connect(spark):
            spark.interruptAll()
        else:
            spark.sparkContext.cancelAllJobs()
    except BaseException:  # noqa: BLE001 - stop() tries again, and the process's end stops the rest
        pass


_kept = {"notes": [], "at_signal": []}


def note_kept(sentence: str) -> None:
    """Say what was kept while the interrupt unwinds (a run's output code failing its staging): for the line."""
    if sentence and sentence not in _kept["notes"]:
        _kept["notes"].append(sentence.strip())


def _committed_runs() -> str | None:
    """The runs of runtime/commit.py (when this checkout has it) not ended yet, and what each keeps."""
    try:
        from . import commit
    except ImportError:
        return None
    runs = getattr(commit, "active_runs", lambda: [])()
    said = [k for r in runs for k in (r.kept() if callable(getattr(r, "kept", None)) else [])]
    return "; ".join(said) or None


def _ask() -> list[str]:
    said = []
    for describe in [*kept_describers, _committed_runs]:
        try:
            text = describe()
        except Exception as e:  # noqa: BLE001 - the line must still be printed; say that this part is unknown
            text = f"what was kept is unknown ({type(e).__name__}: {e})"
        if text and text.strip() not in said:
            said.append(text.strip())
    return said


def kept() -> str:
    """What the interrupted run kept, in words: what was noted while it unwound (:func:`note_kept`), else what
    the describers (:data:`kept_describers`, and runtime/commit.py's runs not ended) say now, else what they said
    when the signal came (a run that has ended since is no longer theirs to describe); with nothing said, the
    previous output is left as it was."""
    said = list(_kept["notes"]) or _ask() or list(_kept["at_signal"])
    return "; ".join(said) if said else NOTHING_KEPT


def line(job: str, signum: int) -> str:
    from . import progress

    where = progress.current()
    return f"{job}: interrupted by {signal_name(signum)}" + (f" {where}" if where else "") + f"; {kept()}"


def stop(job: str, e: BaseException | None = None, spark=None) -> int:
    """The interrupt handled: Spark silenced, cancelled and stopped; the one line; the exit code (130/143)."""
    given = interrupted_by(e)
    recorded = handling()
    signum = given if given is not None else recorded
    spark = spark if spark is not None else _session["spark"]
    # from another thread: py4j pins each Python thread to a JVM thread, and the main thread's may still be busy
    # with the call the interrupt cut short (a running Spark job), so a call from the main thread would wait on it
    _in_thread(silence, spark)
    try:
        print(line(job, signum), file=sys.stderr, flush=True)
    except Exception:  # noqa: BLE001 - stderr gone: the exit code still says it
        pass
    _in_thread(stop_spark, spark, timeout=STOP_SECONDS)
    return exit_code(signum)


STOP_SECONDS = 30.0  # how long stopping Spark may take before the process ends without waiting for it


def _in_thread(work, spark, timeout: float = 10.0) -> None:
    t = threading.Thread(target=work, args=(spark,), name=f"interrupt: {work.__name__}", daemon=True)
    t.start()
    t.join(timeout)


def silence(spark) -> None:
    """Nothing more from py4j or the JVM on stderr: what a cancelled job and a cut gateway call print is noise
    after the interrupt's line."""
    for name in ("py4j", "py4j.java_gateway", "py4j.clientserver"):
        logging.getLogger(name).disabled = True
    if spark is None or _is_connect(spark):
        return
    try:
        sc = spark.sparkContext
        sc.setLogLevel("OFF")
        jvm = sc._jvm
        # setLogLevel sets the root logger only; the loggers spark-conf/log4j2.properties names (org.apache.spark
        # at warn) kept theirs, and a cancelled task's ERROR TaskContextImpl stack still came out after the line
        log4j = jvm.org.apache.logging.log4j
        log4j.core.config.Configurator.setAllLevels(log4j.LogManager.ROOT_LOGGER_NAME, log4j.Level.OFF)
        nowhere = jvm.java.io.PrintStream(jvm.java.io.OutputStream.nullOutputStream())
        jvm.java.lang.System.setErr(nowhere)
        jvm.java.lang.System.setOut(nowhere)
    except BaseException:  # noqa: BLE001 - a gateway already gone says nothing either
        pass


def stop_spark(spark) -> None:
    """Cancel the session's jobs and stop it (a Connect session: interrupt its operations)."""
    if spark is None:
        return
    try:
        if _is_connect(spark):
            spark.interruptAll()
        else:
            spark.sparkContext.cancelAllJobs()
        spark.stop()
    except BaseException:  # noqa: BLE001 - a session that cannot be stopped dies with this process
        pass
    finally:
        _session["spark"] = None


def _is_connect(spark) -> bool:
    from .session import is_connect

    return is_connect(spark)
