"""The driver's threads (jobs/audit/tasks.py ``_run_in_driver``): tasks that hold the GIL (a route's group of small
files, read a file at a time in Python) run one at a time, while the other threads run the rest beside them; every
task runs once, the outputs come back in the tasks' order, and a failure stops the tasks not started."""
import threading

import pytest

from jobs.audit.tasks import RunInfo, _run_in_driver, holds_the_gil

WAIT = 30  # seconds an event is waited for before the test fails (never reached when the scheduling is right)


class Probe:
    broker = "b"
    kind = "Probe"
    HOLDS_THE_GIL = False

    def __init__(self, name, cost=1, body=None):
        self.name, self._cost, self.body = name, cost, body

    def run(self, out):
        if self.body is not None:
            self.body(self)
        out.partial("names", __import__("pyarrow").table({"name": [self.name]}))

    def describe(self):
        return self.name

    def cost(self):
        return self._cost


class Chained(Probe):
    HOLDS_THE_GIL = True


def test_tasks_that_hold_the_gil_never_run_beside_each_other_and_the_rest_runs_beside_them():
    lock = threading.Lock()
    running = {"chain": 0, "most": 0}
    free_ran_during_chain = threading.Event()
    chain_started = threading.Event()

    def chained(task):
        with lock:
            running["chain"] += 1
            running["most"] = max(running["most"], running["chain"])
        chain_started.set()
        if task.name == "c0":  # the first chain task waits for a free task to run beside it
            assert free_ran_during_chain.wait(WAIT), "no free task ran beside a task holding the GIL"
        with lock:
            running["chain"] -= 1

    def free(task):
        if chain_started.is_set() and running["chain"]:
            free_ran_during_chain.set()
        elif task.name == "f0":
            assert chain_started.wait(WAIT)
            free_ran_during_chain.set()

    tasks = [Chained(f"c{i}", cost=100 - i, body=chained) for i in range(6)] + \
        [Probe(f"f{i}", cost=50 - i, body=free) for i in range(6)]
    out = _run_in_driver(tasks, 2, RunInfo(None, "r", None), None)
    assert running["most"] == 1  # mutation: with every task free, two chain tasks run at once (c0 waits for f0)
    assert free_ran_during_chain.is_set()
    assert out.partials["names"].column("name").to_pylist() == [t.name for t in tasks]  # the tasks' order


def test_a_thread_left_with_only_the_chain_waits_and_every_task_runs_once():
    seen, lock = [], threading.Lock()

    def body(task):
        with lock:
            seen.append(task.name)

    tasks = [Chained(f"c{i}", body=body) for i in range(20)] + [Probe("f", body=body)]
    for threads in (1, 2, 4):
        seen.clear()
        out = _run_in_driver(tasks, threads, RunInfo(None, "r", None), None)
        assert sorted(seen) == sorted(t.name for t in tasks)
        assert out.partials["names"].num_rows == len(tasks)


def test_an_interrupt_in_a_task_stops_the_tasks_not_started():
    started = []

    def body(task):
        started.append(task.name)
        if task.name == "c1":
            raise KeyboardInterrupt  # what runtime/interrupts.py raises; a task's Exception is its finding instead

    tasks = [Chained(f"c{i}", cost=10 - i, body=body) for i in range(8)]
    with pytest.raises(KeyboardInterrupt):
        _run_in_driver(tasks, 2, RunInfo(None, "r", None), None)
    assert started == ["c0", "c1"]


def test_a_wrapped_task_is_its_tasks_kind():
    class Wrapper:
        def __init__(self, task):
            self.task = task

    assert holds_the_gil(Chained("c")) and holds_the_gil(Wrapper(Chained("c")))
    assert not holds_the_gil(Probe("f")) and not holds_the_gil(Wrapper(Probe("f")))
    from jobs.audit.scan import CommitlogRange, FileScan
    from jobs.audit.survey import RouteSurvey, SegmentSurvey

    assert RouteSurvey.HOLDS_THE_GIL and FileScan.HOLDS_THE_GIL
    assert not getattr(SegmentSurvey, "HOLDS_THE_GIL", False) and not getattr(CommitlogRange, "HOLDS_THE_GIL", False)
