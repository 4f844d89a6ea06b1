"""What the four sources' implementations share (issue 25): the DataSource that names the source and turns its
Arrow schema into Spark's, and the reader's options common to all (path, broker, mode).  Each source keeps only
what is its own: its Arrow schema, its options, how it plans partitions and reads one.

These are the implementations; Spark registers the stand-ins of datasources/sources.py, which import them when
a read is planned (so this module may import pyarrow).
"""
from __future__ import annotations

from typing import ClassVar

import pyarrow as pa
from pyspark.sql.datasource import DataSource, DataSourceReader
from pyspark.sql.pandas.types import from_arrow_schema
from pyspark.sql.types import StructType

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


class StoreReader(DataSourceReader):
    """A reader's options every source takes: ``path`` (a store root, a folder of them, a part folder or a file),
    ``broker`` (the broker name for every row, else each store's own)."""

    def __init__(self, options):
        self.path = options.get("path")
        self.broker = options.get("broker")


def parse_mode(options) -> str:
    """The ``mode`` option (PERMISSIVE, the default; DROPMALFORMED; FAILFAST), or a ValueError naming the choices."""
    mode = options.get("mode", "PERMISSIVE").upper()
    if mode not in MODES:
        raise ValueError(f"option mode={mode!r}: choose one of {', '.join(MODES)}")
    return mode
