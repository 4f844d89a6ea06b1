"""Progress on stderr: one line per phase of a job, with the bytes done and an estimate of the rest.

On a terminal the line is redrawn in place (``\\r``) while the phase runs and ends with what it did; when stderr is
a file or a pipe (a scheduler's log) it is plain lines: the phase's start, a line every :data:`PLAIN_EVERY`
seconds while it runs, and its end.  ``--quiet`` (every job takes it) silences all of it; errors are still said.

A phase that runs Spark jobs is measured by Spark itself: the jobs run in a job group of the phase's own, and a
watcher thread reads the group's stages from ``SparkContext.statusTracker()`` (tasks done of tasks) every half
second; the bytes done are the phase's bytes times that fraction (the audit's tasks are packed to about equal
bytes each, so the fraction of tasks is the fraction of bytes).  A phase whose work is several Spark jobs one after
the other (count, write, count back) names each with :meth:`Phase.step`: the line then says the step and measures
the step's own latest job (``Spark job 2`` when a step runs more than one), so a finished job's 100% is never
followed by a smaller share of a total that grew, with nothing to say why.  Spark's own console progress bar is off
(``spark.ui.showConsoleProgress=false``, runtime/session.py), so nothing else draws on the line.  A Spark Connect
session has no SparkContext in this process: its phases show their time (and bytes where the job counts them).
"""
from __future__ import annotations

import sys
import threading
import time
import uuid

from store_format.interrupts import check as check_interrupt

PLAIN_EVERY = 10.0  # seconds between plain progress lines
_TICK = 0.5

_state = {"quiet": False, "name": "job", "phases": [], "step": None}


def configure(name: str, quiet: bool = False) -> None:
    """Set by the job runtime (runtime/cli.py) before the job runs."""
    _state.update(name=name, quiet=quiet, phases=[], step=None)


def current() -> str | None:
    """Where the job is (with --quiet too), in words: ``during <phase>`` (the innermost phase under way, or the
    one an exception left), ``during <step>`` (the last step said), ``after <phase>``; None before any.  What an
    interrupt's line and a failure's line name (runtime/interrupts.py, runtime/cli.py)."""
    return f"during {_state['phases'][-1]}" if _state["phases"] else _state["step"]


def quiet() -> bool:
    return _state["quiet"]


def say(message: str, *, step: bool = True) -> None:
    """One line on stderr (not with --quiet).  A step's start is a boundary where a recorded interrupt that was
    swallowed on the way ends the run (store_format/interrupts.py).  ``step``: the line starts a step (``committing
    out``), which :func:`current` then names (``during committing out``); False for a line that says what was done
    (``removed the staging ...``): where the job is stays what it was."""
    check_interrupt()
    if step:
        _state["step"] = f"during {message}"
    if not _state["quiet"]:
        print(f"[{_state['name']} {time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def mib(n: float) -> str:
    return f"{n / 2**20:,.1f} MiB"


def _clock(seconds: float) -> str:
    s = int(round(seconds))
    return f"{s // 3600}:{s % 3600 // 60:02d}:{s % 60:02d}" if s >= 3600 else f"{s // 60}:{s % 60:02d}"


def _is_connect(spark) -> bool:
    from runtime.session import is_connect

    return is_connect(spark)


class Phase:
    """``with Phase("scan", total_bytes, spark):`` around the phase's work; ``update(done_bytes)`` for work that
    is not Spark's."""

    def __init__(self, label: str, total_bytes: int | None = None, spark=None, *, tasks: int | None = None,
                 stream=None):
        self.label, self.total, self.spark, self.tasks = label, total_bytes, spark, tasks
        self._count_tasks = tasks is None  # no count given: Spark's task count of the phase, as it grows
        self.stream = stream or sys.stderr
        self.tty = bool(getattr(self.stream, "isatty", lambda: False)())
        self.done_bytes = 0.0
        self.fraction: float | None = None
        self.tasks_done = 0
        self.started = 0.0
        self._printed = 0.0
        self._stop = threading.Event()
        self._thread = None
        self._group = None
        self._width = 0
        self.step_label: str | None = None
        self._before_step: set = set()  # the group's Spark jobs started before the step began
        self.step_jobs = 0  # Spark jobs of the step so far

    # ---- the phase -------------------------------------------------------------------------------------
    def __enter__(self) -> "Phase":
        check_interrupt()  # a phase boundary: an interrupt swallowed on the way ends the run here
        self.started = time.monotonic()
        self._printed = self.started
        _state["phases"].append(self.label)
        if quiet():
            return self
        if not self.tty:
            self._line(f"{self.label}: started" + (f", {mib(self.total)}" if self.total else "")
                       + (f" in {self.tasks} task(s)" if self.tasks else ""))
        if self.spark is not None and not _is_connect(self.spark):  # Connect: no SparkContext, no tracker here
            self._group = f"rocketmq-forensics-{uuid.uuid4().hex[:8]}"
            self.spark.sparkContext.setJobGroup(self._group, self.label, interruptOnCancel=False)
        self._thread = threading.Thread(target=self._watch, name=f"progress {self.label}", daemon=True)
        self._thread.start()
        return self

    def __exit__(self, kind, value, tb) -> None:
        if self.label in _state["phases"]:
            _state["phases"].reverse()
            _state["phases"].remove(self.label)  # the innermost of that name
            _state["phases"].reverse()
        _state["step"] = f"{'after' if kind is None else 'during'} {self.label}"  # where the job was last
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=2)
        if self._group is not None:
            self.spark.sparkContext.setLocalProperty("spark.jobGroup.id", None)
            self.spark.sparkContext.setLocalProperty("spark.job.description", None)
        if kind is None:
            check_interrupt()  # the phase's end, a boundary too
        if quiet():
            return
        took = time.monotonic() - self.started
        if kind is not None and not issubclass(kind, Exception):
            return  # interrupted (runtime/interrupts.py): the interrupt's one line names the phase
        if kind is not None:
            self._end(f"{self.label}: stopped after {took:.1f} s")
            return
        rate = f" ({mib(self.total / took)}/s)" if self.total and took > 0 else ""
        self._end(f"{self.label}: " + (f"{mib(self.total)} " if self.total else "") + f"in {took:.1f} s{rate}")

    def update(self, done_bytes: float) -> None:
        self.done_bytes = done_bytes

    def step(self, label: str) -> None:
        """The phase's next step (its own Spark jobs from now on): the line names it and measures only its jobs;
        said as a line of its own in a log."""
        self._before_step |= set(self._job_ids())
        self.step_label, self.step_jobs = label, 0
        self.fraction, self.tasks_done = None, 0
        if self._count_tasks:
            self.tasks = None
        _state["step"] = f"during {self.label} ({label})"
        if not quiet() and not self.tty:
            self._line(f"{self.label}: {label}")

    # ---- drawing ---------------------------------------------------------------------------------------
    def text(self, now: float) -> str:
        """The progress line as it stands."""
        elapsed = now - self.started
        frac = self.fraction if self.fraction is not None else (self.done_bytes / self.total if self.total else None)
        label = self.label
        if self.step_label is not None:  # the step's own job: the phase's bytes are not its measure
            label += f" ({self.step_label}{f', Spark job {self.step_jobs}' if self.step_jobs > 1 else ''})"
        parts = [f"{label}:"]
        if self.total and frac is not None and self.step_label is None:
            parts.append(f"{mib(frac * self.total)} of {mib(self.total)} ({frac:.0%})")
        elif frac is not None:
            parts.append(f"{frac:.0%}")
        if self.tasks:
            parts.append(f"{self.tasks_done}/{self.tasks} tasks")
        if frac and 0 < frac < 1 and elapsed > 1:
            parts.append(f"ETA {_clock(elapsed * (1 - frac) / frac)}")
        parts.append(f"{_clock(elapsed)} elapsed")
        return ", ".join([" ".join(parts[:2])] + parts[2:]) if len(parts) > 1 else parts[0]

    def _line(self, text: str) -> None:
        print(f"[{_state['name']} {time.strftime('%H:%M:%S')}] {text}", file=self.stream, flush=True)

    def _draw(self, text: str) -> None:
        pad = max(0, self._width - len(text))
        self.stream.write("\r" + text + " " * pad)
        self.stream.flush()
        self._width = len(text)

    def _end(self, text: str) -> None:
        if self.tty:
            self._draw(f"[{_state['name']}] {text}")
            self.stream.write("\n")
            self.stream.flush()
            self._width = 0
        else:
            self._line(text)

    def _watch(self) -> None:
        while not self._stop.wait(_TICK):
            self._poll()
            now = time.monotonic()
            if self.tty:
                self._draw(f"[{_state['name']}] {self.text(now)}")
            elif now - self._printed >= PLAIN_EVERY:
                self._printed = now
                self._line(self.text(now))

    def _job_ids(self) -> list:
        if self._group is None:
            return []
        try:
            return list(self.spark.sparkContext.statusTracker().getJobIdsForGroup(self._group))
        except Exception:  # noqa: BLE001 - a tracker that cannot answer has no jobs to show
            return []

    def _poll(self) -> None:
        """The share of the phase's Spark tasks that are done: every stage of its job group so far, or in a step
        its latest job's."""
        if self._group is None:
            return
        step = self.step_label
        try:
            tracker = self.spark.sparkContext.statusTracker()
            total = done = 0
            jobs = list(tracker.getJobIdsForGroup(self._group))
            if step is not None:
                jobs = sorted(j for j in jobs if j not in self._before_step)
                n_jobs, jobs = len(jobs), jobs[-1:]
            for job in jobs:
                info = tracker.getJobInfo(job)
                for stage in (info.stageIds if info else ()):
                    s = tracker.getStageInfo(stage)
                    if s is not None:
                        total += s.numTasks
                        done += s.numCompletedTasks
        except Exception:  # noqa: BLE001 - a status the tracker no longer has is no progress to show, not an error
            return
        if step != self.step_label:
            return  # a step began meanwhile: these are the last one's jobs
        if step is not None:
            self.step_jobs = n_jobs
        if total:
            self.fraction = done / total
            if self._count_tasks:
                self.tasks_done, self.tasks = done, total
