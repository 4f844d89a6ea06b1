"""SIGINT and SIGTERM as one exception in the main thread, recorded so that it is never lost.

Python turns SIGINT into ``KeyboardInterrupt`` wherever the main thread happens to be, and SIGTERM kills the
process with no word at all.  Wherever the main thread is, an exception raised there can be swallowed: inside a
finalizer (``__del__``: py4j's ``JavaObject`` finalizers, a generator's close) Python prints "Exception ignored
in ..." and goes on, so a run that was asked to stop runs to its end and exits 0.  :func:`install` replaces both
handlers with one that

* records the signal (:func:`pending`) before anything else, so a caller re-checks it where it is safe
  (:func:`check`: at phase boundaries, and once more when the work is done) and an interrupt swallowed on the way
  still ends the run with 130 or 143;
* raises :class:`Interrupted` (a ``BaseException``, like ``KeyboardInterrupt``: no ``except Exception`` catches
  it) in the main thread, once; a second signal while the first is being handled is only recorded;
* does not raise inside a finalizer (``__del__``), where the exception would be swallowed: it delivers the signal
  to itself again a moment later, and raises then; an exception swallowed all the same (a generator closed by
  the garbage collector) is delivered again the same way, and Python's "Exception ignored in" report of it is
  kept off stderr (the run's one line says what happened).  A loop that never reaches a phase boundary (rows read
  from Spark with ``toLocalIterator``: a job per partition, which cancelling the running job does not end) would
  otherwise run on to its end.

This is the store layer's half (no Spark; the ``store_format`` command line uses it as it is); runtime/interrupts.py
adds Spark's cancellation and the line the jobs print.  The exit code of an interrupted run is 128 + the signal's
number: 130 for SIGINT, 143 for SIGTERM.
"""
from __future__ import annotations

import _thread
import signal
import sys
import threading
import time
from contextvars import ContextVar

SIGNALS = (signal.SIGINT, signal.SIGTERM)
NAMES = {signal.SIGINT: "SIGINT", signal.SIGTERM: "SIGTERM"}


class Interrupted(BaseException):
    """The run was asked to stop by a signal (``signum``); exit code :attr:`exit_code`."""

    def __init__(self, signum: int):
        super().__init__(f"interrupted by {NAMES.get(signum, signum)}")
        self.signum = signum

    @property
    def exit_code(self) -> int:
        return exit_code(self.signum)

    @property
    def name(self) -> str:
        return signal_name(self.signum)


_state = {"signum": None, "handling": False, "installed": False, "again": False, "later": False}


def exit_code(signum: int) -> int:
    return 128 + int(signum)


def signal_name(signum: int) -> str:
    return NAMES.get(signum) or signal.Signals(signum).name


#: callables run with the signal's number when the first signal comes, before the exception is raised: what must
#: start at once, whatever the main thread is stuck in (runtime/interrupts.py cancels Spark's jobs from a thread of
#: its own, so that a main thread waiting on a running job gets its answer)
on_signal: list = []


def _handler(signum, frame) -> None:
    first = _state["signum"] is None
    if first:
        _state["signum"] = signum
        for react in list(on_signal):
            try:
                react(signum)
            except Exception:  # noqa: BLE001 - the exception below is what matters
                pass
    if not (first or _state["again"]) or _state["handling"]:
        return
    if _in_a_finalizer(frame):
        _deliver_again(_state["signum"])
        return
    _state["again"] = False
    raise Interrupted(_state["signum"])


def _in_a_finalizer(frame) -> bool:
    """Whether the main thread is in a finalizer, or in the report of an exception one swallowed: an exception
    raised there is swallowed in turn."""
    while frame is not None:
        code = frame.f_code
        if code.co_name == "__del__" or code is _UNRAISABLE_CODE:
            return True
        frame = frame.f_back
    return False


RETRY_SECONDS = 0.01  # long enough for a finalizer to end


def _deliver_again(signum: int) -> None:
    """The signal delivered to the main thread once more, a moment from now (from a thread of its own: the main
    thread is where the exception could not be raised)."""
    _state["again"] = True
    if _state["later"]:
        return
    _state["later"] = True

    def later() -> None:
        time.sleep(RETRY_SECONDS)
        _state["later"] = False
        if not _state["handling"]:
            _thread.interrupt_main(signum)

    try:
        threading.Thread(target=later, name="interrupt: again", daemon=True).start()
    except RuntimeError:  # the interpreter is shutting down: the check at the work's end still has the signal
        _state["later"] = False


def _unraisable(hook):
    def unraisable(info) -> None:
        if isinstance(info.exc_value, (Interrupted, KeyboardInterrupt)):
            if _state["signum"] is not None and not _state["handling"]:
                _deliver_again(_state["signum"])  # the check at the work's end has it too
            return
        hook(info)

    unraisable.wrapped = hook
    return unraisable


# the hook's code, known by identity: a module imported from a zip's .pyc names another file than its __file__
_UNRAISABLE_CODE = _unraisable(None).__code__


def install() -> bool:
    """Our handler for SIGINT and SIGTERM (again: a SparkContext's start sets its own SIGINT handler); only in the
    main thread (signal handlers can only be set there).  Whether it is installed."""
    if threading.current_thread() is not threading.main_thread():
        return False
    for s in SIGNALS:
        signal.signal(s, _handler)
    if not hasattr(sys.unraisablehook, "wrapped"):
        sys.unraisablehook = _unraisable(sys.unraisablehook)
    _state["installed"] = True
    return True


def reset() -> None:
    """Forget a recorded signal (a new run in the same process: the tests)."""
    _state.update(signum=None, handling=False, again=False)


def pending() -> int | None:
    """The signal received (the first), if any: handled or not, swallowed or not."""
    return _state["signum"]


def check() -> None:
    """Raise :class:`Interrupted` if a signal came and its exception has not been taken up (say it was swallowed
    by a finalizer): at phase boundaries and at the end of the work."""
    signum = _state["signum"]
    if signum is not None and not _state["handling"]:
        raise Interrupted(signum)


# the event that stops the work run beside the main thread in this context (:func:`run_beside`); None elsewhere
_BESIDE_STOP: ContextVar[threading.Event | None] = ContextVar("interrupts_beside_stop", default=None)


def run_beside(stop: threading.Event, work, *args):
    """``work(*args)`` as work beside the main thread, which alone receives signals: :func:`check_beside` in it raises
    once the main thread sets ``stop`` (it was interrupted), so the work ends at its next step, not at its end with
    the run waiting for it (jobs/audit/job.py ``_finish``).  Run it in a context of its own (``Context.run``)."""
    _BESIDE_STOP.set(stop)
    return work(*args)


def check_beside() -> None:
    """Raise :class:`Interrupted` in work run beside the main thread (:func:`run_beside`) once the main thread was
    interrupted; nothing elsewhere."""
    stop = _BESIDE_STOP.get()
    if stop is not None and stop.is_set():
        raise Interrupted(_state["signum"] or signal.SIGINT)


def handling() -> int:
    """The interrupt is being handled from here on: later signals are recorded only (no exception in the middle
    of the cleanup).  The signal's number (SIGINT for a bare KeyboardInterrupt)."""
    _state["handling"] = True
    if _state["signum"] is None:
        _state["signum"] = signal.SIGINT
    return _state["signum"]


def interrupted_by(e: BaseException | None) -> int | None:
    """The signal behind ``e`` (an :class:`Interrupted`, a ``KeyboardInterrupt``), or behind any failure once a
    signal was received (a py4j call cut short fails with its own error), else None."""
    if isinstance(e, Interrupted):
        return e.signum
    if isinstance(e, KeyboardInterrupt):
        return _state["signum"] or signal.SIGINT
    return _state["signum"]
