"""Writing and reading job outputs: the one place that knows the table formats.

Formats (``FORMATS``):
  parquet  Spark's Parquet writer, one folder of part files.
  jsonl    Spark's JSON writer: one JSON object per line, part files ``part-*.json`` (one per task), every
           column present (nulls written as ``null``), timestamps ISO-8601 with microseconds and offset,
           BINARY columns as base64 strings (Spark's JSON encoding), maps as JSON objects.
  delta    A Delta Lake table written without the delta-spark jars: Spark tasks write Parquet files into a
           fresh ``data-<uuid>/`` folder inside the table directory, then the driver commits them in one
           atomic delta-rs transaction (files are never collected to the driver).  ``append`` merges the
           schema: an append whose columns are the table's (or a subset) adds its files as they are; one
           that brings new columns is streamed, batch by batch, through delta-rs's
           ``write_deltalake(schema_mode="merge")``, still one commit (a column whose type changed is
           refused by delta-rs).  Only local paths are exercised by the tests.  Timestamps are written as
           TIMESTAMP_MICROS (delta-rs refuses INT96; spark-notes.md "Delta Lake here").

Reading back (``read_table``): a Delta table is read as the Parquet files its log lists
(``DeltaTable.file_uris()``) with the log's schema, never by listing the directory, which may hold removed
or uncommitted files.  ``prepare_output`` is the guard every job calls before writing: no clobbering without
``--overwrite`` and never a write into (or over) an input dump.
"""
from __future__ import annotations

import json
import os
import posixpath
import time
import uuid
from contextlib import contextmanager

import pyarrow.fs as pafs

from datasources.storepaths import PARTS, Location, resolve

FORMATS = ("parquet", "delta", "jsonl")
MODES = ("overwrite", "append")
DELTA_LOG = "_delta_log"
# Spark's JSON writer keeps only milliseconds by default; forensic timestamps keep their microseconds.
JSON_TIMESTAMP_FORMAT = "yyyy-MM-dd'T'HH:mm:ss.SSSSSSXXX"
JSON_OPTIONS = {"ignoreNullFields": "false", "timestampFormat": JSON_TIMESTAMP_FORMAT}
# Spark's default INT96 timestamps cannot be read by delta-rs.
TIMESTAMP_CONF = "spark.sql.parquet.outputTimestampType"


class OutputError(ValueError):
    """An output that must not be written (exists, or overlaps an input)."""


# ---------------------------------------------------------------------------------------------- the guard

def _canonical(loc: Location) -> tuple[str, str]:
    """(filesystem identity, normalized path) for comparing locations."""
    if isinstance(loc.fs, pafs.LocalFileSystem):
        return "local", os.path.realpath(loc.path)
    return loc.fs.type_name, posixpath.normpath("/" + loc.path.lstrip("/"))


def _within(inner: str, outer: str) -> bool:
    return inner == outer or inner.startswith(outer.rstrip("/") + "/")


def _store_root(loc: Location) -> Location:
    """The store root holding ``loc`` when it names a part folder or a file inside one (a segment, a
    consume-queue file), else ``loc`` itself (a store root, or a folder of them)."""
    up = loc
    for _ in range(4):  # consumequeue/<topic>/<queue>/<file> is the deepest
        if up.name in PARTS:
            return up.parent()
        up = up.parent()
    return loc


def prepare_output(path: str, *, overwrite: bool, inputs: list[str] = ()) -> None:
    """Make ``path`` ready to be written: refuse when it overlaps an input store (inside, equal, or
    containing one: a job never writes into a dump; an input naming a part folder or a file counts as its
    whole store root), refuse when it exists and is not empty unless ``overwrite`` (then remove it)."""
    out = resolve(path)
    out_fs, out_path = _canonical(out)
    for store in inputs:
        in_fs, in_path = _canonical(_store_root(resolve(str(store))))
        if in_fs == out_fs and (_within(out_path, in_path) or _within(in_path, out_path)):
            raise OutputError(f"output {path} overlaps the input store {store}: a job never writes into, "
                              "over or around its input; choose an output outside the dump")
    info = out.info()
    if info.type == pafs.FileType.NotFound:
        return
    empty_dir = info.type == pafs.FileType.Directory and not out.list()
    if empty_dir:
        return
    if not overwrite:
        raise OutputError(f"output {path} already exists and is not empty; pass --overwrite to replace it")
    if info.type == pafs.FileType.Directory:
        out.fs.delete_dir(out.path)
    else:
        out.fs.delete_file(out.path)


# ---------------------------------------------------------------------------------------------- writing

@contextmanager
def _micros_timestamps(spark):
    previous = spark.conf.get(TIMESTAMP_CONF, None)
    spark.conf.set(TIMESTAMP_CONF, "TIMESTAMP_MICROS")
    try:
        yield
    finally:
        if previous is None:
            spark.conf.unset(TIMESTAMP_CONF)
        else:
            spark.conf.set(TIMESTAMP_CONF, previous)


def write_table(df, path: str, fmt: str = "parquet", *, mode: str = "overwrite") -> str:
    """Write a Spark DataFrame as a ``fmt`` table at ``path`` (``overwrite`` replaces the table, ``append``
    adds to it); returns ``path``."""
    if fmt not in FORMATS:
        raise OutputError(f"unknown output format {fmt!r}; expected one of {', '.join(FORMATS)}")
    if mode not in MODES:
        raise OutputError(f"unknown write mode {mode!r}; expected one of {', '.join(MODES)}")
    if fmt == "parquet":
        with _micros_timestamps(df.sparkSession):
            df.write.mode(mode).parquet(path)
    elif fmt == "jsonl":
        df.write.mode(mode).options(**JSON_OPTIONS).json(path)
    else:
        _write_delta(df, path, mode)
    return path


def append_history(df, delta_path: str) -> str:
    """Append one run's rows to a Delta history table (created on first use): one commit, schema merged."""
    return write_table(df, delta_path, "delta", mode="append")


def _is_delta(loc: Location) -> bool:
    return loc.child(DELTA_LOG).is_dir()


def is_delta_table(path: str) -> bool:
    return _is_delta(resolve(path))


def _write_delta(df, path: str, mode: str) -> None:
    import pyarrow.parquet as pq
    from deltalake import DeltaTable, Schema
    from deltalake.transaction import AddAction, create_table_with_add_actions

    table = resolve(path)
    info = table.info()
    if info.type == pafs.FileType.File or (info.type == pafs.FileType.Directory and table.list()
                                            and not _is_delta(table)):
        raise OutputError(f"{path} exists and is not a Delta table; refusing to turn it into one")
    batch = f"data-{uuid.uuid4().hex}"
    staging = table.child(batch)
    try:
        with _micros_timestamps(df.sparkSession):
            # the _SUCCESS marker would only be litter inside the table
            (df.write.mode("error")  # "errorifexists": Spark Connect knows only this spelling
             .option("mapreduce.fileoutputcommitter.marksuccessfuljobs", "false")
             .parquet(_spark_path(path, staging)))
        files = [i for i in staging.fs.get_file_info(pafs.FileSelector(staging.path))
                 if i.type == pafs.FileType.File]
        for litter in (i for i in files if not i.base_name.endswith(".parquet")):  # Hadoop's .crc files
            staging.fs.delete_file(litter.path)
        files = sorted((i for i in files if i.base_name.endswith(".parquet")), key=lambda i: i.base_name)
        if files:
            schema = pq.read_schema(files[0].path, filesystem=staging.fs)
        else:
            from pyspark.sql.pandas.types import to_arrow_schema

            schema = to_arrow_schema(df.schema, timezone="UTC")
        now = int(time.time() * 1000)
        actions = []
        for f in files:
            rows = pq.read_metadata(f.path, filesystem=staging.fs).num_rows
            actions.append(AddAction(f"{batch}/{f.base_name}", f.size, {}, now, True,
                                     json.dumps({"numRecords": rows})))
        delta_schema = Schema.from_arrow(schema)
        uri = _delta_uri(table)
        if not _is_delta(table):
            create_table_with_add_actions(uri, delta_schema, actions, mode="error")
            return
        dt = DeltaTable(uri)
        if mode == "overwrite" or _fits(delta_schema, dt.schema()):
            dt.create_write_transaction(actions, mode, dt.schema() if mode == "append" else delta_schema)
            return
        _append_merging(dt, staging, files, schema)
        staging.fs.delete_dir(staging.path)  # its rows now live in delta-rs's own files
    except BaseException:
        if staging.info().type == pafs.FileType.Directory:
            staging.fs.delete_dir(staging.path)
        raise


def _fits(new, existing) -> bool:
    """Whether every column of ``new`` is a column of ``existing`` with the same Delta type."""
    have = {f.name: f.type for f in existing.fields}
    return all(f.name in have and have[f.name] == f.type for f in new.fields)


def _append_merging(dt, staging: Location, files, schema) -> None:
    """Append the staged files' rows with schema evolution, streaming them through delta-rs (bounded
    memory: one record batch at a time)."""
    import pyarrow as pa
    import pyarrow.parquet as pq
    from deltalake import write_deltalake

    def batches():
        for f in files:
            with staging.fs.open_input_file(f.path) as src:
                yield from pq.ParquetFile(src).iter_batches()

    write_deltalake(dt, pa.RecordBatchReader.from_batches(schema, batches()), mode="append", schema_mode="merge")


def _delta_uri(loc: Location) -> str:
    if isinstance(loc.fs, pafs.LocalFileSystem):
        return loc.path
    return f"{loc.fs.type_name}://{loc.path}"


def _spark_path(original: str, loc: Location) -> str:
    """``loc`` spelt the way Spark expects for the filesystem ``original`` names."""
    if isinstance(loc.fs, pafs.LocalFileSystem):
        return loc.path
    scheme = original.split("://", 1)[0]
    return f"{scheme}://{loc.path}"


# ---------------------------------------------------------------------------------------------- reading

def detect_format(path: str) -> str:
    """``delta`` when ``_delta_log`` is present, else ``parquet`` or ``jsonl`` by the part files' names."""
    loc = resolve(path)
    if _is_delta(loc):
        return "delta"
    names = [i.base_name for i in loc.list() if i.type == pafs.FileType.File]
    if any(n.endswith(".parquet") for n in names):
        return "parquet"
    if any(n.endswith(".json") or n.endswith(".jsonl") for n in names):
        return "jsonl"
    raise OutputError(f"{path} holds no Delta log, Parquet or JSON part files")


def read_table(spark, path: str, fmt: str | None = None, *, schema=None):
    """A table written by :func:`write_table` as a DataFrame.  ``schema`` (a StructType or DDL string)
    is applied to jsonl, whose lines carry no types (BINARY columns come back from base64 only with it)."""
    fmt = fmt or detect_format(path)
    if fmt == "parquet":
        return spark.read.parquet(path)
    if fmt == "jsonl":
        reader = spark.read.options(timestampFormat=JSON_TIMESTAMP_FORMAT)
        if schema is not None:
            reader = reader.schema(schema)
        return reader.json(path)
    if fmt != "delta":
        raise OutputError(f"unknown table format {fmt!r}; expected one of {', '.join(FORMATS)}")
    return _read_delta(spark, path)


def _read_delta(spark, path: str):
    import pyarrow as pa
    from deltalake import DeltaTable
    from pyspark.sql.pandas.types import from_arrow_schema

    dt = DeltaTable(_delta_uri(resolve(path)))
    schema = from_arrow_schema(pa.schema(dt.schema().to_arrow()), prefer_timestamp_ntz=True)
    uris = dt.file_uris()
    if not uris:
        return spark.createDataFrame([], schema)
    # the log's schema, not the files': files from before a schema merge lack the newer columns
    return spark.read.schema(schema).parquet(*uris)
