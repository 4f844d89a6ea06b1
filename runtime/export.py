"""Tables written by the tasks that read them: a job's rows as Parquet part files, no row through the JVM.

Spark's writer costs most of an export: every row of a Python data source crosses into the JVM, is converted
to Spark's rows and back out to its Parquet writer (the decode job's messages to Parquet ran at 0.15x the
decoded scan of the same dump).  Here each task reads its range with the source's own reader (Arrow batches),
keeps the rows the job wants (:class:`Rows`), and writes them through the fs seam (runtime/output.py) as one
Parquet file named after the task (a retried task writes the same file again), inside the run's staging; the
driver gets back only each task's counts, and the run commits the staged folder (runtime/commit.py) as it
commits Spark's output: a failed or interrupted task fails the run, and nothing is committed.

The files are the table Spark's writer makes of the same DataFrame: the same columns, Parquet types and
nullability (every column optional, as Spark writes them), Spark's schema in the footer
(``org.apache.spark.sql.parquet.row.metadata``, so Spark reads back the very schema it would have written), no
Arrow schema, snappy pages, one file per task with rows in the source's order; an empty table is one file with
the schema and no rows.  pandas, pyarrow, Spark and delta-rs read them as they read Spark's.

Tasks run where runtime.session.choose_executor says: ``spark``, one Spark task per part
(``spark.range(n).mapInArrow``: only the tasks' counts come back); ``driver``, this process's threads (the
decode kernels, the framing and the Parquet writer release the GIL).
"""
from __future__ import annotations

import json
import posixpath
from dataclasses import dataclass, field
from typing import Callable, Iterator

import pyarrow as pa
import pyarrow.parquet as pq

from store_format.fs import resolve

from .output import RowGroupWriter, out_join

# Spark's Parquet writer: the schema it reads back, and the version that wrote it (both in every footer)
SPARK_SCHEMA_KEY = "org.apache.spark.sql.parquet.row.metadata"
SPARK_VERSION_KEY = "org.apache.spark.version"
# rows buffered before a row group is written: large groups, as Spark's 128 MB blocks, bounded memory per task
ROW_GROUP_BYTES = 64 << 20
RESULT_SCHEMA = pa.schema([("part", pa.int64()), ("rows", pa.int64()), ("tally", pa.string())])


@dataclass(frozen=True)
class Part:
    """One task: a range planned by a source (``partition``), read by its reader (``reader.read``)."""

    reader: object
    partition: object


@dataclass
class Tally:
    """What the tasks counted while writing (merged on the driver): rows written, the distinct non-null values of
    the ``distinct`` columns (small: brokers, topics), counts a job's :class:`Rows` keeps by name, and what else it
    says of its part (``said``: name -> list of JSON values, the tasks' lists joined).  ``scratch`` is one task's
    own, never sent back."""

    rows: int = 0
    distinct: dict = field(default_factory=dict)  # column -> set of values
    counts: dict = field(default_factory=dict)  # name -> int
    said: dict = field(default_factory=dict)  # name -> list
    scratch: dict = field(default_factory=dict, compare=False, repr=False)

    def add(self, other: "Tally") -> None:
        self.rows += other.rows
        for name, values in other.distinct.items():
            self.distinct.setdefault(name, set()).update(values)
        for name, n in other.counts.items():
            self.counts[name] = self.counts.get(name, 0) + n
        for name, items in other.said.items():
            self.said.setdefault(name, []).extend(items)

    def to_json(self) -> str:
        return json.dumps({"rows": self.rows, "distinct": {k: sorted(v) for k, v in self.distinct.items()},
                           "counts": self.counts, "said": self.said})

    @classmethod
    def from_json(cls, text: str) -> "Tally":
        d = json.loads(text)
        return cls(d["rows"], {k: set(v) for k, v in d["distinct"].items()}, d["counts"], d["said"])


class Rows:
    """What a job keeps of a source's batches (subclassed by the jobs): :meth:`keep` returns the rows to write and
    may count into ``tally.counts``; :meth:`finish` runs once the task's batches are read; ``distinct`` names the
    columns whose distinct values the tally collects.  One object serves every task (the driver's threads share it):
    what a task gathers across its batches goes in ``tally.scratch``."""

    distinct: tuple[str, ...] = ()

    def keep(self, batch: pa.RecordBatch, tally: Tally) -> pa.RecordBatch:
        raise NotImplementedError

    def finish(self, tally: Tally) -> None:
        """The task's batches are all kept: say what is left to say into ``tally.said``."""


def spark_footer(spark_schema, spark_version: str) -> dict[bytes, bytes]:
    """The key-value metadata Spark's Parquet writer leaves in a file of ``spark_schema`` (a StructType): the schema
    as written, every field nullable (Spark's ``asNullable``), in Spark's own JSON spelling."""
    return {SPARK_SCHEMA_KEY.encode(): json.dumps(_as_nullable(spark_schema.jsonValue()),
                                                  separators=(",", ":")).encode(),
            SPARK_VERSION_KEY.encode(): spark_version.encode()}


def spark_written_schema(arrow_schema: pa.Schema, columns: list[str], spark_version: str) -> pa.Schema:
    """The file schema Spark's writer gives a DataFrame of a source whose rows are ``arrow_schema``, selected to
    ``columns`` (in that order): :func:`file_schema` with Spark's footer of pyspark's own conversion."""
    from pyspark.sql.pandas.types import from_arrow_schema
    from pyspark.sql.types import StructType

    spark_fields = {f.name: f for f in from_arrow_schema(arrow_schema)}
    chosen = pa.schema([arrow_schema.field(c) for c in columns])
    return file_schema(chosen, spark_footer(StructType([spark_fields[c] for c in columns]), spark_version))


def _as_nullable(value):
    """A Spark data type's JSON (``jsonValue()``) with every field, element and map value nullable, keys in order."""
    if isinstance(value, dict):
        out = {k: _as_nullable(v) for k, v in value.items()}
        for key in ("nullable", "containsNull", "valueContainsNull"):
            if key in out:
                out[key] = True
        return out
    if isinstance(value, list):
        return [_as_nullable(v) for v in value]
    return value


def file_schema(arrow_schema: pa.Schema, footer: dict) -> pa.Schema:
    """``arrow_schema`` as Spark writes it: every column optional, no column descriptions, Spark's footer."""
    return pa.schema([_nullable(f) for f in arrow_schema], metadata=footer)


def _nullable(f: pa.Field) -> pa.Field:
    t = f.type
    if pa.types.is_map(t):  # a map's keys stay required (Parquet's rule, and Spark's)
        t = pa.map_(t.key_type, _nullable(t.item_field).type)
    elif pa.types.is_list(t) or pa.types.is_large_list(t):
        t = pa.list_(_nullable(t.value_field))
    elif pa.types.is_struct(t):
        t = pa.struct([_nullable(c) for c in t])
    return pa.field(f.name, t, nullable=True)


@dataclass(frozen=True)
class PartWriter:
    """What a task needs to write its part: the folder, the file schema, and the job's rows."""

    folder: str  # store_format.fs.uri_of of the staged folder: what resolves to it again in a task's process
    schema: pa.Schema
    rows: Rows

    def name(self, index: int) -> str:
        return f"part-{index:05d}.snappy.parquet"

    def write(self, index: int, part: Part) -> Tally:
        """Read ``part``, write the rows kept as the file ``name(index)`` (none when no row is kept)."""
        tally = Tally()
        target = out_join(self.folder, self.name(index))  # what a failed write names (runtime/causes.py)
        # one row group a ROW_GROUP_BYTES, whatever its rows; the file opened at the first row kept
        writer = RowGroupWriter(lambda first: self._open(index), hold_bytes=ROW_GROUP_BYTES, group_rows=1 << 62)
        try:
            for batch in part.reader.read(part.partition):
                kept = self.rows.keep(batch, tally)
                if not kept.num_rows:
                    continue
                kept = pa.RecordBatch.from_arrays(kept.columns, schema=self.schema)
                tally.rows += kept.num_rows
                for name in self.rows.distinct:
                    values = tally.distinct.setdefault(name, set())
                    values.update(v for v in kept.column(name).unique().to_pylist() if v is not None)
                writer.write(pa.Table.from_batches([kept]))
            writer.close()
        except BaseException:
            writer.abort()
            raise
        self.rows.finish(tally)
        tally.scratch.clear()
        return tally

    def write_empty(self) -> None:
        """The one file of an empty table: its schema, no rows (as Spark writes an empty DataFrame)."""
        self._open(0).close()

    def _open(self, index: int):
        loc = resolve(out_join(self.folder, self.name(index)))
        loc.fs.create_dir(posixpath.dirname(loc.path), recursive=True)
        writer = pq.ParquetWriter(loc.path, self.schema, filesystem=loc.fs, compression="snappy", store_schema=False)
        writer.add_key_value_metadata(self.schema.metadata)  # without the Arrow schema, pyarrow writes none of it
        return writer


def _run_part(writer: PartWriter, index: int, part: Part) -> pa.RecordBatch:
    tally = writer.write(index, part)
    return pa.RecordBatch.from_pylist([{"part": index, "rows": tally.rows, "tally": tally.to_json()}],
                                      schema=RESULT_SCHEMA)


def _task_runner(writer: PartWriter, parts: list[Part]) -> Callable[[Iterator[pa.RecordBatch]], Iterator]:
    def execute(batches):
        for batch in batches:
            for i in batch.column(0).to_pylist():
                yield _run_part(writer, i, parts[i])
    return execute


def write_parts(spark, parts: list[Part], writer: PartWriter, executor=None,
                absorb: Callable[[Tally, Tally], None] | None = None) -> Tally:
    """Every part read and written by its own task (see the module's doc); the tasks' tallies merged (``absorb``:
    how a task's tally joins the total, :meth:`Tally.add` by default).  An empty table still gets its one file.  A
    task that fails fails the call: the run it belongs to is not committed."""
    from .session import choose_executor

    executor = executor or choose_executor(spark)
    total = Tally()
    absorb = absorb or Tally.add
    if parts and executor.where == "driver":
        from concurrent.futures import ThreadPoolExecutor

        with ThreadPoolExecutor(max(1, min(executor.slots, len(parts)))) as pool:
            futures = [pool.submit(writer.write, i, part) for i, part in enumerate(parts)]
            try:
                for f in futures:
                    absorb(total, f.result())
            except BaseException:  # the parts not started never start; the run fails, nothing is committed
                for f in futures:
                    f.cancel()
                raise
    elif parts:
        from pyspark.sql.pandas.types import from_arrow_schema

        ids = spark.range(0, len(parts), 1, numPartitions=len(parts))
        results = ids.mapInArrow(_task_runner(writer, parts), from_arrow_schema(RESULT_SCHEMA)).toArrow()
        for text in results.column("tally").to_pylist():
            absorb(total, Tally.from_json(text))
    if not total.rows:
        writer.write_empty()
    return total


__all__ = ["Part", "PartWriter", "Rows", "Tally", "file_schema", "spark_footer", "spark_written_schema", "write_parts"]
