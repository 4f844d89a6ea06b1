"""A Spark data source for the benchmark: ``rocketmq-commitlog``'s own batches, built once and yielded again.

It ships the same schema, row count and partition count as a real scan but does no framing or decoding, so
its speed is what Spark's transport of those rows costs by itself: the ceiling for the real source.  It lives
in its own module so Spark's Python workers can import it (data source classes are pickled by reference).
"""
from __future__ import annotations

from dataclasses import dataclass

from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition

from datasources.base import spark_schema
from datasources.commitlog import CommitLogReader, Options, arrow_schema

NAME = "bench-commitlog-replay"


@dataclass
class ReplayPart(InputPartition):
    rows: int


class ReplaySource(DataSource):
    """Options: ``path`` (a segment), ``materialize`` (and ``columns``), ``rows`` in all, ``partitions``; or
    ``partitionRows``, each partition's rows (comma-separated: the real scan's, so the tasks are as uneven)."""

    @classmethod
    def name(cls) -> str:
        return NAME

    def schema(self) -> str:
        opts = Options.parse({"materialize": "positions", **self.options})
        return spark_schema(arrow_schema(opts.materialize, columns=opts.columns))

    def reader(self, schema) -> "ReplayReader":
        return ReplayReader(self.options)


class ReplayReader(DataSourceReader):
    def __init__(self, options):
        self.options = {k.lower(): v for k, v in options.items()}  # Spark's option names are case-insensitive

    def partitions(self):
        if self.options.get("partitionrows"):
            return [ReplayPart(int(n)) for n in self.options["partitionrows"].split(",")]
        rows, parts = int(self.options["rows"]), int(self.options["partitions"])
        return [ReplayPart(rows // parts + (k < rows % parts)) for k in range(parts)]

    def read(self, part: ReplayPart):
        real = CommitLogReader({"path": self.options["path"], "materialize": self.options["materialize"],
                                "splitSize": str(8 << 20), "segmentEnds": "unresolved",
                                **({"columns": self.options["columns"]} if "columns" in self.options else {})})
        batch = next(real.read(real.partitions()[0]))  # one full batch of real rows
        left = part.rows
        while left > 0:
            yield batch if left >= batch.num_rows else batch.slice(0, left)
            left -= batch.num_rows
