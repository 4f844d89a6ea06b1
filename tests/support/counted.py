"""A task (jobs/audit/tasks.py ``Task``) that counts where it is unpickled: each run reports the tasks unpickled in
its process since the last report, so a stage run as a Spark job shows what every Spark task received, and how
often the facts it shares with other tasks (a ``Shared`` object) were unpickled in its process
(tests/test_audit_tasks.py)."""
from __future__ import annotations

import os
import threading

import pyarrow as pa

from jobs.audit.tasks import Shared

UNPICKLED: list[int] = []  # numbers of the tasks unpickled in this process, not yet reported
REPORT = pa.schema([("task", pa.int64()), ("unpickled", pa.int64())])
FACTS_UNPICKLED: list[str] = []  # tokens of the CountedFacts unpickled in this process, not yet reported
SHARED = pa.schema([("task", pa.int64()), ("pid", pa.int64()), ("facts", pa.int64()), ("unpickled", pa.int64())])


class CountedFacts(Shared):
    """What some counted tasks share (as a broker's scan tasks share its facts): counts where it is unpickled.
    ``token`` makes each test's facts new to a reused Python worker."""

    def __init__(self, token: str):
        self.token = token

    def __getstate__(self):
        return (self.token,)

    def __setstate__(self, state) -> None:
        (self.token,) = state
        FACTS_UNPICKLED.append(self.token)


class ReadyOnFirstTask:
    """An executors' warm-up's ``ready`` event (jobs/audit/tasks.py ``ExecutorWarmUp``), set by the first counted
    task that runs in this process (the driver), which then waits until the driver has seen it set: the tasks not
    started by then go to the Spark job.  Registered under a token (:data:`READY`): a task names it, and in a
    Python worker no such token is registered."""

    def __init__(self, token: str):
        self.flag, self.seen = threading.Event(), threading.Event()
        READY[token] = self

    def is_set(self) -> bool:
        return self.flag.is_set()

    def wait(self, timeout: float | None = None) -> bool:
        if self.flag.wait(timeout):
            self.seen.set()
            return True
        return False

    def set_by_a_task(self) -> None:
        self.flag.set()
        self.seen.wait(30)


READY: dict[str, ReadyOnFirstTask] = {}
RAN = pa.schema([("task", pa.int64()), ("pid", pa.int64())])


class CountedTask:
    broker = "counted"

    def __init__(self, number: int, size: int, facts: CountedFacts | None = None, ready: str | None = None):
        self.number, self.size, self.facts, self.ready = number, size, facts, ready

    def describe(self) -> str:
        return f"counted task {self.number}"

    def cost(self) -> int:
        return self.size

    def __getstate__(self):
        return self.number, self.size, self.facts, self.ready

    def __setstate__(self, state) -> None:
        self.number, self.size, self.facts, self.ready = state
        UNPICKLED.append(self.number)

    def run(self, out) -> None:
        if self.ready in READY:  # in the process that registered it: the driver
            READY[self.ready].set_by_a_task()
        out.partial("ran", pa.table({"task": [self.number], "pid": [os.getpid()]}, schema=RAN))
        seen = list(UNPICKLED)
        UNPICKLED.clear()
        out.partial("made", pa.table({"task": [self.number], "square": [self.number ** 2]}))
        out.partial("unpickled", pa.table({"task": [self.number] * len(seen), "unpickled": seen}, schema=REPORT))
        if self.facts is not None:  # which facts object this task saw, and how many facts this process unpickled
            unpickled = sum(1 for token in FACTS_UNPICKLED if token == self.facts.token)
            out.partial("shared", pa.table({"task": [self.number], "pid": [os.getpid()], "facts": [id(self.facts)],
                                            "unpickled": [unpickled]}, schema=SHARED))
