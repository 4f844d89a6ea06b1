"""Issue 33, "Interrupts are clean": SIGINT and SIGTERM end every command with one line (what was interrupted,
what was kept) and exit 130 / 143, with no Python traceback and no Java stack, and an interrupt is never
swallowed (runtime/interrupts.py, store_format/interrupts.py).

The jobs run in subprocesses under tests/support/paused.py, which holds them at a given progress line (a phase
boundary), or starts a Spark job that never ends there, or has a finalizer swallow the interrupt: the signal is
sent once the line is read from the job's stderr, with no sleeps."""
from __future__ import annotations

import gc
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from runtime import interrupts, progress
from store_format import interrupts as core

from .conftest import fixture_store

REPO = Path(__file__).resolve().parent.parent
PAUSED = REPO / "tests" / "support" / "paused.py"
JAVA_STACK = re.compile(r"^\s+at (org\.apache|java\.|scala\.|py4j)|^(Caused by: )?(java|org\.apache|py4j)\.\S+(Exception|Error)",
                        re.M)


def run_interrupted(args: list[str], at: str, then: str = "wait", sig: int | None = signal.SIGINT,
                    stream: str = "stderr", trigger: str | None = None, timeout: float = 240, group: bool = False):
    """``python -m ARGS`` held at the first line matching ``at`` (tests/support/paused.py ``then``), sent
    ``sig`` once the line (or ``trigger``) is read (``group``: to its whole process group, the JVM and the Python
    workers too, as a terminal's Ctrl-C); (exit code, what it wrote to stderr after that line)."""
    env = {**os.environ, "PYSPARK_PYTHON": sys.executable, "PYTHONPATH": str(REPO)}
    p = subprocess.Popen([sys.executable, str(PAUSED), "--at", at, "--then", then, "--stream", stream, "--", *args],
                         cwd=REPO, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         text=True, start_new_session=group)
    watched = p.stdout if stream == "stdout" else p.stderr
    wanted = re.compile(trigger or at)
    before = []
    try:
        for line in watched:
            before.append(line)
            if wanted.search(line):
                break
        else:
            raise AssertionError("the trigger line never came:\n" + "".join(before) + p.stderr.read())
        if sig is not None:
            os.killpg(p.pid, sig) if group else p.send_signal(sig)
        out, err = p.communicate(timeout=timeout)
    finally:
        if p.poll() is None:
            p.kill()
            p.communicate()
    return p.returncode, err


def assert_one_clean_line(err: str, job: str, name: str) -> str:
    lines = [ln for ln in err.splitlines() if "interrupted" in ln]
    assert len(lines) == 1, err
    assert lines[0].startswith(f"{job}: interrupted by {name}"), err
    assert "Traceback" not in err and "Exception ignored" not in err, err
    assert not JAVA_STACK.search(err), err
    return lines[0]


# ---------------------------------------------------------------------------------------------------------
# In process: the recording handler


@pytest.fixture
def handlers():
    saved = {s: signal.getsignal(s) for s in core.SIGNALS}
    hook = sys.unraisablehook
    core.reset()
    yield
    for s, h in saved.items():
        signal.signal(s, h)
    sys.unraisablehook = hook
    core.reset()


def test_a_signal_is_an_exception_in_the_main_thread_and_recorded(handlers):
    interrupts.install()
    with pytest.raises(interrupts.Interrupted) as raised:
        os.kill(os.getpid(), signal.SIGTERM)
        for _ in range(10_000):  # the handler runs between bytecodes
            pass
    assert raised.value.signum == signal.SIGTERM and raised.value.exit_code == 143
    assert interrupts.pending() == signal.SIGTERM


class _Swallower:
    """A finalizer that receives the signal, as py4j's do: an exception raised in it is swallowed ("Exception
    ignored in")."""

    def __del__(self):
        os.kill(os.getpid(), signal.SIGINT)
        for _ in range(10_000):
            pass


def test_an_interrupt_swallowed_by_a_finalizer_is_raised_again_in_the_main_thread(handlers):
    """A loop that never reaches a phase boundary (rows read with ``toLocalIterator``) still ends: once seen in CI,
    an audit held in such a loop outlived its SIGTERM by 240 s."""
    interrupts.install()
    with pytest.raises(interrupts.Interrupted) as raised:
        x = _Swallower()
        del x
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:  # the work goes on; the exception comes back within it
            pass
    assert raised.value.exit_code == 130
    assert time.monotonic() < deadline


def test_an_interrupt_swallowed_as_a_generator_is_collected_is_raised_again(handlers):
    """Not in a ``__del__``: the exception is raised, swallowed ("Exception ignored in"), and delivered again."""
    interrupts.install()

    def rows():
        try:
            yield 1
        finally:
            os.kill(os.getpid(), signal.SIGINT)
            for _ in range(10_000):
                pass

    with pytest.raises(interrupts.Interrupted) as raised:
        g = rows()
        next(g)
        del g
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            pass
    assert raised.value.exit_code == 130
    assert time.monotonic() < deadline


def test_an_interrupt_in_a_finalizer_not_delivered_again_ends_at_the_next_check(handlers, monkeypatch):
    interrupts.install()
    monkeypatch.setattr(core, "_deliver_again", lambda signum: None)
    x = _Swallower()
    del x
    gc.collect()
    assert interrupts.pending() == signal.SIGINT  # not raised in the finalizer, but recorded
    with pytest.raises(interrupts.Interrupted) as raised:
        with progress.Phase("next phase", stream=open(os.devnull, "w")):  # a phase boundary checks
            pass
    assert raised.value.exit_code == 130


def test_a_second_signal_during_the_handling_is_only_recorded(handlers):
    interrupts.install()
    with pytest.raises(interrupts.Interrupted):
        os.kill(os.getpid(), signal.SIGINT)
        for _ in range(10_000):
            pass
    assert interrupts.handling() == signal.SIGINT
    os.kill(os.getpid(), signal.SIGINT)  # no exception now: the cleanup goes on
    for _ in range(10_000):
        pass
    interrupts.check()


def test_the_line_names_the_phase_and_asks_what_was_kept(monkeypatch):
    progress.configure("audit", quiet=True)
    monkeypatch.setattr(interrupts, "kept_describers", [])
    with pytest.raises(RuntimeError):
        with progress.Phase("scan (3 task(s))"):
            raise RuntimeError("x")
    assert interrupts.line("audit", signal.SIGTERM) == (
        "audit: interrupted by SIGTERM during scan (3 task(s)); the previous output is left as it was")
    interrupts.kept_describers.append(lambda: None)
    interrupts.kept_describers.append(lambda: "out/ is unchanged; the run's staging is marked failed")
    assert interrupts.line("audit", signal.SIGINT).endswith(
        "; out/ is unchanged; the run's staging is marked failed")
    interrupts.note_kept("out/: the staging is marked failed (said while unwinding)")
    assert interrupts.kept() == "out/: the staging is marked failed (said while unwinding)"
    interrupts._kept.update(notes=[], at_signal=[])
    progress.configure("job")


def test_a_line_saying_what_was_done_is_never_named_as_the_step_under_way(tmp_path, monkeypatch):
    """Issue 38 item 7: "interrupted by SIGTERM during removed the staging ...".  The claim's recovery says what it
    did (runtime/progress.py ``say(step=False)``): the line names the step under way, or none."""
    from runtime import commit

    progress.configure("audit", quiet=True)
    monkeypatch.setattr(interrupts, "kept_describers", [])
    (tmp_path / ".out.rocketmq-forensics" / f"staging-{commit.new_run_id()}").mkdir(parents=True)
    with commit.JobRun("audit") as run:
        run.output(str(tmp_path / "out"), overwrite=False)  # removes the staging a killed run left
        line = interrupts.line("audit", signal.SIGTERM)
        run.abandon()
    progress.configure("job")
    assert line.startswith("audit: interrupted by SIGTERM; ") and "during removed" not in line, line


def test_what_was_kept_is_asked_at_the_signal_too_for_runs_that_end_on_the_way(handlers, monkeypatch):
    """A run's output code ends (marks its staging failed, releases its claim) as the interrupt unwinds, before
    the line is printed: what it said at the signal is the line's."""
    runs = ["out/: the previous output is unchanged; the staging out/.staging is marked failed"]
    monkeypatch.setattr(interrupts, "kept_describers", [lambda: runs[0] if runs else None])
    interrupts.install()
    with pytest.raises(interrupts.Interrupted):
        os.kill(os.getpid(), signal.SIGINT)
        for _ in range(10_000):
            pass
    runs.clear()  # the run ended
    assert interrupts.kept() == "out/: the previous output is unchanged; the staging out/.staging is marked failed"


# ---------------------------------------------------------------------------------------------------------
# store_format's command line (no Spark)


def test_our_sigint_handler_stays_while_a_spark_context_starts(handlers):
    """pyspark's SparkContext sets its own SIGINT handler at the end of its start (cancel, KeyboardInterrupt, with
    py4j's tracebacks when the JVM is busy); the console jobs start their session under handlers_kept, where that
    call leaves ours in place and any other signal's goes through."""
    import pyspark.core.context as context

    ours, term = signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM)
    with interrupts.handlers_kept():
        context.signal.signal(signal.SIGINT, lambda *_: None)  # what SparkContext.__init__ does
        assert signal.getsignal(signal.SIGINT) is ours
        context.signal.signal(signal.SIGTERM, signal.SIG_DFL)
        assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL
    signal.signal(signal.SIGTERM, term)
    assert context.signal is signal


@pytest.mark.spark
def test_silence_turns_off_every_jvm_logger_not_only_the_root():
    """setLogLevel('OFF') sets the root logger only, and the loggers spark-conf names (org.apache.spark at warn)
    kept logging: a cancelled task's ERROR TaskContextImpl stack came out after the interrupt's line.  In a
    process of its own: silencing the tests' shared session would hide its logs for the rest of the run."""
    script = (
        "from runtime.session import build_session\n"
        "from runtime import interrupts\n"
        "spark = build_session('silence', sources=False)\n"
        "get = spark.sparkContext._jvm.org.apache.logging.log4j.LogManager.getLogger\n"
        "names = ('org.apache.spark.TaskContextImpl', 'org.apache.spark.executor.Executor', 'org.apache.parquet.x')\n"
        "print('before', [get(n).getLevel().toString() for n in names])\n"
        "interrupts.silence(spark)\n"
        "print('after', [get(n).getLevel().toString() for n in names])\n")
    done = subprocess.run([sys.executable, "-c", script], cwd=REPO, capture_output=True, text=True, timeout=300,
                          env={**os.environ, "PYTHONPATH": str(REPO)})
    assert done.returncode == 0, done.stderr
    assert "before ['WARN', 'FATAL', 'ERROR']" in done.stdout, done.stdout
    assert "after ['OFF', 'OFF', 'OFF']" in done.stdout, done.stdout


@pytest.mark.parametrize("sig,code", [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_store_format_dump_interrupted_is_one_line_and_exit_130_or_143(sig, code):
    rc, err = run_interrupted(["store_format", "dump", str(fixture_store("basic")), "--what", "commitlog"],
                              at=r".", stream="stdout", sig=sig)
    assert rc == code, err
    line = assert_one_clean_line(err, "store_format", core.signal_name(sig))
    assert "during dump" in line and "the store was only read" in line


# ---------------------------------------------------------------------------------------------------------
# The jobs (a Spark session each)


@pytest.fixture
def store(tmp_path) -> Path:
    dst = tmp_path / "store"
    shutil.copytree(fixture_store("basic"), dst)
    return dst


@pytest.mark.spark
def test_audit_sigterm_at_a_phase_boundary_is_one_line_and_143(store, tmp_path):
    rc, err = run_interrupted(["jobs", "audit", "--store", str(store), "--out", str(tmp_path / "out")],
                              at=r"\] scan \(.*started", sig=signal.SIGTERM)
    assert rc == 143, err
    line = assert_one_clean_line(err, "audit", "SIGTERM")
    # what was kept is the run's (runtime/commit.py): no output made, the staging marked failed with the reason
    assert "during scan (" in line and f"{tmp_path / 'out'}: no output was made; the staging" in line
    assert line.endswith("is marked failed")


@pytest.mark.spark
def test_audit_sigint_while_a_spark_job_runs_cancels_it_with_no_java_stack(store, tmp_path):
    rc, err = run_interrupted(["jobs", "audit", "--store", str(store), "--out", str(tmp_path / "out")],
                              at=r"\] predicting recovery", then="spark", trigger="SPARK TASK RUNNING")
    assert rc == 130, err
    assert "during predicting recovery" in assert_one_clean_line(err, "audit", "SIGINT")


@pytest.mark.spark
def test_ctrl_c_at_a_terminal_reaches_the_whole_process_group_and_is_one_line(store, tmp_path):
    rc, err = run_interrupted(["jobs", "audit", "--store", str(store), "--out", str(tmp_path / "out")],
                              at=r"\] predicting recovery", then="spark", trigger="SPARK TASK RUNNING", group=True)
    assert rc == 130, err
    assert_one_clean_line(err, "audit", "SIGINT")


@pytest.mark.spark
def test_an_interrupt_swallowed_by_a_py4j_style_finalizer_still_ends_the_audit_with_130(store, tmp_path):
    """Today's failure: the KeyboardInterrupt raised inside a finalizer is "ignored", and the audit exits 0."""
    rc, err = run_interrupted(["jobs", "audit", "--store", str(store), "--out", str(tmp_path / "out")],
                              at=r"\] predicting recovery", then="finalizer", sig=None)
    assert rc == 130, err
    assert_one_clean_line(err, "audit", "SIGINT")
    assert not (tmp_path / "out" / "summary.json").exists()


@pytest.mark.spark
def test_extract_sigterm_while_its_spark_job_runs_is_one_line_and_143(store, tmp_path):
    rc, err = run_interrupted(["jobs", "extract", "--store", str(store), "--out", str(tmp_path / "out")],
                              at=r"\[extract ", then="spark", trigger="SPARK TASK RUNNING", sig=signal.SIGTERM)
    assert rc == 143, err
    assert_one_clean_line(err, "extract", "SIGTERM")


@pytest.mark.spark
def test_sigterm_while_the_main_thread_reads_a_spark_jobs_rows_is_one_line_and_143(store, tmp_path):
    """replay reads its rows with ``toLocalIterator`` (issue 33: SIGTERM to ``replay --repair`` dumped a Java
    stack): the signal lands while the main thread reads rows a Spark job serves."""
    rc, err = run_interrupted(["jobs", "audit", "--store", str(store), "--out", str(tmp_path / "out")],
                              at=r"\] predicting recovery", then="iterate", trigger="ITERATING", sig=signal.SIGTERM)
    assert rc == 143, err
    assert_one_clean_line(err, "audit", "SIGTERM")
