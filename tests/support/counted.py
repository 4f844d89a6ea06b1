"""A task (jobs/audit/tasks.py ``Task``) that counts where it is unpickled: each run reports the tasks unpickled in
its process since the last report, so a stage run as a Spark job shows what every Spark task received
(tests/test_audit_tasks.py)."""
from __future__ import annotations

import pyarrow as pa

UNPICKLED: list[int] = []  # numbers of the tasks unpickled in this process, not yet reported
REPORT = pa.schema([("task", pa.int64()), ("unpickled", pa.int64())])


class CountedTask:
    broker = "counted"

    def __init__(self, number: int, size: int):
        self.number, self.size = number, size

    def describe(self) -> str:
        return f"counted task {self.number}"

    def cost(self) -> int:
        return self.size

    def __getstate__(self):
        return self.number, self.size

    def __setstate__(self, state) -> None:
        self.number, self.size = state
        UNPICKLED.append(self.number)

    def run(self, out) -> None:
        seen = list(UNPICKLED)
        UNPICKLED.clear()
        out.partial("made", pa.table({"task": [self.number], "square": [self.number ** 2]}))
        out.partial("unpickled", pa.table({"task": [self.number] * len(seen), "unpickled": seen}, schema=REPORT))
