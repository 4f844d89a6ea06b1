"""What the sources' implementations share (issue 25): the DataSource that names the source and turns its
Arrow schema into Spark's, the reader's options common to all (path, broker, mode), and the accessors every
source reads its options with (a bad value is an error naming the option).  Each source keeps only what is its
own: its Arrow schema, its options, how it plans partitions over its inputs and reads one.

These are the implementations; Spark registers the stand-ins of datasources/sources.py, which import them when
a read is planned (so this module may import pyarrow).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import pyarrow as pa
from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition
from pyspark.sql.pandas.types import from_arrow_schema
from pyspark.sql.types import StructType

from store_format.brokerconf import parse_size
from store_format.errors import ErrorKind, StoreFormatError
from store_format.stores import PartInput, part_inputs

MODES = ("PERMISSIVE", "DROPMALFORMED", "FAILFAST")  # Spark's own names for what a reader does with bad rows


def spark_schema(schema: pa.Schema) -> StructType:
    """A source's Arrow schema as Spark's: pyspark's own conversion, the one the jobs use too."""
    return from_arrow_schema(schema)


class StoreDataSource(DataSource):
    """A source: its format name (``FORMAT``), its Arrow schema (:meth:`arrow_schema`, from the options), and its
    reader class (``READER``), built from the options."""

    FORMAT: ClassVar[str] = ""
    READER: ClassVar[type[DataSourceReader]]

    @classmethod
    def name(cls) -> str:
        return cls.FORMAT

    def arrow_schema(self) -> pa.Schema:
        raise NotImplementedError

    def schema(self) -> StructType:
        return spark_schema(self.arrow_schema())

    def reader(self, schema) -> DataSourceReader:
        return self.READER(self.options)


@dataclass
class NothingToRead(InputPartition):
    """The one partition of an empty plan: Spark needs at least one, and it reads no row."""


class StoreReader(DataSourceReader):
    """A reader's options every source takes: ``path`` (a store root, a folder of them, a part folder or a file),
    ``broker`` (the broker name for every row, else each store's own), and its planning: the inputs of ``PART``
    that ``path`` names (one per broker) go to the source's :meth:`plan`, and each partition planned to its
    :meth:`read_partition`."""

    #: the folder of a store root the source reads (a store_format part name: commitlog, consumequeue, ...)
    PART: ClassVar[str] = ""

    def __init__(self, options):
        self.path = options.get("path")
        self.broker = options.get("broker")

    def plan(self, inputs: list[PartInput]) -> list[InputPartition]:
        raise NotImplementedError

    def read_partition(self, partition: InputPartition):
        raise NotImplementedError

    def partitions(self):
        if not self.path:
            raise StoreFormatError(ErrorKind.INVALID_INPUT, "no path given: use .load(path)")
        return self.plan(part_inputs(self.path, self.PART, self.broker)) or [NothingToRead()]

    def read(self, partition):
        if not isinstance(partition, NothingToRead):
            yield from self.read_partition(partition)


# Options: each accessor reads one option, ``default`` when it is absent or empty, and a bad value is a ValueError
# that names the option and the value given.


def _option(options, name: str, default, parse):
    value = options.get(name)
    if value is None or str(value).strip() == "":
        return default
    try:
        return parse(value)
    except ValueError as e:
        raise ValueError(f"option {name}={value!r}: {e}") from None


def option_parsed(options, name: str, default, parse):
    """``parse`` of the option's value (absent or empty: ``default``); its ValueError names the option."""
    return _option(options, name, default, parse)


def option_choice(options, name: str, choices, default: str, *, upper: bool = False) -> str:
    """One of ``choices`` (compared upper- or lower-cased, as they are spelled)."""
    def choose(value):
        v = str(value).upper() if upper else str(value).lower()
        if v not in choices:
            raise ValueError(f"choose one of {', '.join(choices)}")
        return v

    return _option(options, name, default, choose)


def parse_bool(value, default: bool) -> bool:
    if value is None:
        return default
    v = str(value).strip().lower()
    if v in ("true", "1", "yes"):
        return True
    if v in ("false", "0", "no"):
        return False
    raise ValueError(f"expected true or false, got {value!r}")


def option_bool(options, name: str, default: bool) -> bool:
    return _option(options, name, default, lambda v: parse_bool(v, default))


def option_size(options, name: str, default: int | None = None) -> int | None:
    """Bytes, with an optional k/m/g suffix (store_format.brokerconf.parse_size)."""
    return _option(options, name, default, lambda v: parse_size(v, 0))


def option_int(options, name: str, default: int | None = None, minimum: int = 1) -> int | None:
    def whole(value):
        n = int(str(value).strip())
        if n < minimum:
            raise ValueError(f"must be at least {minimum}")
        return n

    return _option(options, name, default, whole)


def parse_mode(options) -> str:
    """The ``mode`` option (PERMISSIVE, the default; DROPMALFORMED; FAILFAST), or a ValueError naming the choices."""
    return option_choice(options, "mode", MODES, "PERMISSIVE", upper=True)


def apply_mode(batch: pa.Table, mode: str, failfast) -> pa.Table:
    """A batch of unit rows under ``mode``: FAILFAST raises ``failfast(row)`` (a StoreFormatError) for the first row
    of ``kind`` corrupt, DROPMALFORMED leaves those rows out, PERMISSIVE keeps them (the sources of per-file units:
    consume queues, the timer log)."""
    import pyarrow.compute as pc

    corrupt = pc.equal(batch.column("kind"), "corrupt")
    if mode == "FAILFAST" and pc.any(corrupt).as_py():
        raise failfast(batch.filter(corrupt).slice(0, 1).to_pylist()[0])
    if mode == "DROPMALFORMED":
        return batch.filter(pc.invert(corrupt))
    return batch


# The session's cores: what a read plans its ranges for, and whether its tasks run on this machine


def local_master(spark) -> bool:
    """The session runs its tasks in this process's machine (local mode): what they read, this process can."""
    try:
        master = spark.sparkContext.master
    except Exception:  # Spark Connect: no SparkContext, the tasks run elsewhere
        return False
    return master == "local" or master.startswith("local[")


def default_parallelism(spark) -> int:
    """The session's cores: its default parallelism.  A Spark Connect session has no SparkContext to ask: the
    server's spark.default.parallelism, else :func:`planned_parallelism` (never this client's cores, which say
    nothing of the server's)."""
    try:
        return int(spark.sparkContext.defaultParallelism)
    except Exception:
        conf = spark.conf.get("spark.default.parallelism", None)
        return int(conf) if conf else planned_parallelism(spark)


def planned_parallelism(spark) -> int:
    """The partitions of a range the session plans with its default parallelism (one small query, on any
    session)."""
    from pyspark.sql import functions as F

    parts = spark.range(0, 1 << 16).select(F.spark_partition_id().alias("p"))  # an aggregate refuses it unaliased
    return int(parts.agg(F.max("p")).first()[0]) + 1
