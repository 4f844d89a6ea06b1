"""How the audit runs its work on Spark: a list of task objects, one Spark task each, in one stage.

A task is a picklable object with ``run(out)``; it writes findings and named partial tables to ``out`` (an
:class:`Emitter`).  :func:`run_tasks` runs a list of them as ``spark.range(n, numPartitions=n).mapInArrow(...)``:
one partition per task, no data source planning round trip, and nothing the session must offer but the
DataFrame API (so it runs the same in a notebook, on a cluster and over Spark Connect).  Every task's output
comes back as rows of :data:`OUTPUT_SCHEMA`: findings (``table`` null) and partial tables (``table`` = the name,
``payload`` = one Arrow IPC stream), which :class:`Outputs` reads back on the driver.
"""
from __future__ import annotations

import io
import time
from dataclasses import dataclass, field

import pyarrow as pa

from .findings import FINDING_SCHEMA

OUTPUT_SCHEMA = pa.schema(list(FINDING_SCHEMA) + [("table", pa.string()), ("payload", pa.binary())])
COUNTS = pa.schema([("check", pa.string()), ("severity", pa.string()), ("count", pa.int64())])
_FINDING_BATCH_ROWS = 65536


class Emitter:
    """What one task produced: finding tables, and partial tables by name (merged on the driver)."""

    def __init__(self):
        self.findings: list[pa.Table] = []
        self.partials: dict[str, list[pa.Table]] = {}

    def finding(self, table: pa.Table) -> None:
        if table.num_rows:
            self.findings.append(table)

    def partial(self, name: str, table: pa.Table) -> None:
        self.partials.setdefault(name, []).append(table)

    def batches(self):
        if self.findings:
            counts = pa.concat_tables(self.findings).group_by(["check", "severity"]).aggregate([("check", "count")])
            self.partial("_counts", pa.table({"check": counts.column("check"), "severity": counts.column("severity"),
                                              "count": counts.column("check_count").cast(pa.int64())}, schema=COUNTS))
        for t in self.findings:
            for b in t.to_batches(_FINDING_BATCH_ROWS):
                n = b.num_rows
                yield pa.RecordBatch.from_arrays(list(b.columns) + [pa.nulls(n, pa.string()), pa.nulls(n, pa.binary())],
                                                 schema=OUTPUT_SCHEMA)
        for name, tables in self.partials.items():
            table = pa.concat_tables(tables, promote_options="none") if len(tables) > 1 else tables[0]
            sink = io.BytesIO()
            with pa.ipc.new_stream(sink, table.schema) as w:
                w.write_table(table)
            row = {f.name: None for f in FINDING_SCHEMA}
            yield pa.RecordBatch.from_pylist([{**row, "check": "", "severity": "", "table": name,
                                               "payload": sink.getvalue()}], schema=OUTPUT_SCHEMA)


@dataclass
class TaskTiming:
    """How long a task took (a partial table of every stage, for --profile)."""

    kind: str
    name: str
    seconds: float


def pack(tasks: list, slots: int) -> list[list]:
    """Tasks in at most ``slots`` bins of about equal cost (largest first into the least loaded bin): a Spark task
    costs tens of milliseconds before it runs a line of ours, so thousands of small files must not be as many
    Spark tasks."""
    bins: list[list] = [[] for _ in range(max(1, min(slots, len(tasks))))]
    load = [0] * len(bins)
    for t in sorted(tasks, key=lambda t: -t.cost()):
        i = load.index(min(load))
        bins[i].append(t)
        load[i] += max(t.cost(), 1)
    return bins


def _runner(bins: list[list]):
    def run(batches):
        from udfs.kernels import tune_allocator

        tune_allocator()
        for batch in batches:
            for i in batch.column(0).to_pylist():
                yield from _run_bin(bins[i])
    return run


def _run_bin(tasks: list):
    for task in tasks:
        out = Emitter()
        t0 = time.perf_counter()
        task.run(out)
        out.partial("_timing", pa.table({"kind": [type(task).__name__], "name": [task.describe()],
                                         "seconds": [time.perf_counter() - t0]}))
        yield from out.batches()


def run_tasks(spark, tasks: list, slots: int, *, persist: bool = False):
    """A DataFrame of every task's output rows: the tasks packed into at most ``slots`` Spark tasks."""
    from pyspark.sql.pandas.types import from_arrow_schema

    bins = pack(tasks, slots)
    ids = spark.range(0, len(bins), 1, numPartitions=len(bins))
    df = ids.mapInArrow(_runner(bins), from_arrow_schema(OUTPUT_SCHEMA))
    if persist:
        from pyspark import StorageLevel

        df = df.persist(StorageLevel.MEMORY_AND_DISK)
    return df


@dataclass
class Outputs:
    """A stage's output on the driver: its partial tables by name (findings stay in Spark)."""

    partials: dict[str, pa.Table] = field(default_factory=dict)

    @classmethod
    def collect(cls, df) -> "Outputs":
        from pyspark.sql import functions as F

        rows = df.where(F.col("table").isNotNull()).select("table", "payload").toArrow()
        parts: dict[str, list[pa.Table]] = {}
        for name, payload in zip(rows.column("table").to_pylist(), rows.column("payload").to_pylist()):
            parts.setdefault(name, []).append(pa.ipc.open_stream(payload).read_all())
        return cls({name: pa.concat_tables(ts) for name, ts in parts.items()})

    def get(self, name: str, schema: pa.Schema | None = None) -> pa.Table:
        t = self.partials.get(name)
        if t is None:
            if schema is None:
                raise KeyError(f"no partial table {name!r}")
            return schema.empty_table()
        return t


def findings_of(df):
    """The finding rows of a stage's output, as a DataFrame of the findings schema."""
    from pyspark.sql import functions as F

    return df.where(F.col("table").isNull()).select(*[f.name for f in FINDING_SCHEMA])
