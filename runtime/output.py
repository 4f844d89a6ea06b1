"""Writing and reading job outputs: the one place that knows the table formats.

Formats (``FORMATS``):
  parquet  Spark's Parquet writer, one folder of part files (the decode job's tasks write the same files
           themselves, without a row through the JVM: runtime/export.py).
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
or uncommitted files.  ``prepare_output`` is the guard every job calls before writing: never a write into, over or
around an input dump (paths resolved, compared by device and inode), no clobbering without ``--overwrite``, which
replaces only a folder this suite wrote (its ``_ROCKETMQ_FORENSICS`` marker file, left in every output); it claims
the output for the job's run, which writes beside it and commits in one step (runtime/commit.py).
"""
from __future__ import annotations

import json
import os
import posixpath
import time
import uuid
from contextlib import contextmanager

import pyarrow as pa
import pyarrow.fs as pafs

# Spark's readers and writers are given uri_of(path): the local path, or the URI that resolves to the Location (below
# the URI it was resolved from, host and options kept: ``scheme://`` glued to the path lost them, as an HDFS name
# node's ``host:port`` or a bucket a sub-tree file system's paths do not spell); a string as it is (a scheme only
# Spark knows, s3a://, never resolved here)
from store_format.fs import Location, as_typed, resolve, uri_of
from store_format.fs import OUTPUT_MARKER

from .apart import OutputError, check_apart  # noqa: F401  (the jobs import them here)

FORMATS = ("parquet", "delta", "jsonl")
MODES = ("overwrite", "append")
DELTA_LOG = "_delta_log"
# Spark's JSON writer keeps only milliseconds by default; forensic timestamps keep their microseconds.
JSON_TIMESTAMP_FORMAT = "yyyy-MM-dd'T'HH:mm:ss.SSSSSSXXX"
JSON_OPTIONS = {"ignoreNullFields": "false", "timestampFormat": JSON_TIMESTAMP_FORMAT}
# Spark's default INT96 timestamps cannot be read by delta-rs.
TIMESTAMP_CONF = "spark.sql.parquet.outputTimestampType"


MARKER = OUTPUT_MARKER  # "_ROCKETMQ_FORENSICS": Spark and Delta readers skip names starting with "_"
TOOL = "rocketmq-forensics"


def marker_of(folder: Location) -> dict | None:
    """What MARKER in ``folder`` says (job, time), or None when it holds no marker of this suite (a regular file,
    not a link, whose JSON names this tool): runtime/commit.py's reading of it."""
    from .commit import marker_of as marked

    return marked(resolve(folder))


def _only_marker(names) -> bool:
    return not [n for n in names if n != MARKER]


def prepare_output(path: Location, *, overwrite: bool, inputs=(), job: str | None = None,
                   say=None, delta: bool = False):
    """Claim ``path`` for the job's run (runtime/commit.py), after checking the inputs are apart from it
    (:func:`check_apart`): refused when another run holds it, when it exists and is not empty without
    ``overwrite``, or when it is not a folder this suite wrote (it holds MARKER).  Nothing at ``path`` changes
    until the run commits: the job writes into ``out.staging`` (a Location).  ``delta``: an existing Delta table this
    suite wrote is written in place, as a new table version (never a deleted folder).  Idempotent within a run:
    ``prepare`` claims, ``run`` gets the same claim back.  Returns the :class:`runtime.commit.Output`."""
    from .commit import job_run

    path = as_typed(path)  # the spelling it was given: claimed and guarded as the OS resolves it
    run = job_run(job or "job")
    found = run.find(path)
    if found is not None:
        return found
    check_apart(path, inputs)
    inplace = bool(delta and overwrite and _is_our_delta(path))
    return run.output(path, overwrite=overwrite, inputs=inputs, inplace=inplace)


def _is_our_delta(path: str) -> bool:  # the path as given: prepare_output's
    loc = resolve(path)
    if not _is_delta(loc):
        return False
    from .commit import marker_of as marked

    return marked(loc) is not None


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


def write_table(df, path: Location, fmt: str = "parquet", *, mode: str = "overwrite") -> Location:
    """Write a Spark DataFrame as a ``fmt`` table at ``path`` (``overwrite`` replaces the table, ``append``
    adds to it); returns ``path``."""
    if fmt not in FORMATS:
        raise OutputError(f"unknown output format {fmt!r}; expected one of {', '.join(FORMATS)}")
    if mode not in MODES:
        raise OutputError(f"unknown write mode {mode!r}; expected one of {', '.join(MODES)}")
    if fmt == "parquet":
        with _micros_timestamps(df.sparkSession):
            df.write.mode(mode).parquet(uri_of(path))
    elif fmt == "jsonl":
        df.write.mode(mode).options(**JSON_OPTIONS).json(uri_of(path))
    else:
        _write_delta(df, path, mode)
    return path


def write_parquet_file(table, path: Location) -> None:
    """A pyarrow table as one Parquet file (the audit's part files, written by its tasks and its driver), through
    the fs seam: ``path`` is a local path or any URI ``store_format.fs`` resolves, so a cluster's tasks need no
    shared mount.  The columns' descriptions (decoding/columns.py) are left out: they document the declared schemas,
    and the files stay the bytes they were before the schemas carried them."""
    from decoding.columns import plain

    with out_parquet_writer(path, table.schema, like=table) as w:
        w.write_table(plain(table))


# ---------------------------------------------------------------------------------------------- output files
#
# Everything a job writes below its (staged) output, and reads back, goes through these: a Location (a local path
# or any URI the fs seam resolves; a string is resolved once, for callers outside the jobs: notebooks, tests).


def out_join(base: Location, *parts: str) -> Location:
    """``parts`` below ``base``.  Named as a URI again (:meth:`Location.uri`), a URI's path is extended before its
    query (``s3://b/o?region=r`` + ``t`` is ``s3://b/o/t?region=r``, not a key spelled ``o?region=r/t``)."""
    loc = resolve(base)
    for part in parts:
        loc = loc.child(part)
    return loc


def out_makedirs(path: Location) -> None:
    loc = resolve(path)
    loc.fs.create_dir(loc.path, recursive=True)


def out_write(path: Location, data: bytes | str) -> None:
    """A small file (summary.json, report.html, ``_SUCCESS``) written whole."""
    loc = resolve(path)
    loc.fs.create_dir(posixpath.dirname(loc.path), recursive=True)
    with loc.fs.open_output_stream(loc.path) as f:
        f.write(data.encode("utf-8") if isinstance(data, str) else data)


def out_read(path: "Location | str") -> bytes:
    """A file's bytes (a run's or a state's part: a location, or a path or URI as a listing names it)."""
    with resolve(path).open_input() as f:
        return f.read()


def out_keep(source: Location, path: Location, data: bytes | None = None) -> None:
    """``path`` made a copy of ``source``, a file of the run's own that is never written again (an audit state's part
    kept for the next run; ``data``: its bytes, when read already): a hard link where both are local, on one file
    system, and ``source`` is a regular file (a state's parts given back night after night are not written again: 120
    MB at the 4 GiB bench), else its bytes written."""
    import stat

    src, loc = resolve(source), resolve(path)
    if src.local_path is not None and loc.local_path is not None:
        try:  # an earlier attempt's file let go first, never written through: it may be the source's own bytes
            os.unlink(loc.path)
        except OSError:
            pass
        try:
            if stat.S_ISREG(os.lstat(src.path).st_mode):  # a link is not followed, nor linked
                loc.fs.create_dir(posixpath.dirname(loc.path), recursive=True)
                os.link(src.path, loc.path, follow_symlinks=False)
                return
        except OSError:  # another file system, no hard links there, or gone: written
            pass
    if data is None:
        with src.open_input() as f:
            data = f.read()
    out_write(path, data)


def out_is_dir(path: Location) -> bool:
    return resolve(path).is_dir()


def out_dataset(path: Location, **kw):
    """A Parquet folder below an output as a ``pyarrow.dataset`` (None when there is no such folder)."""
    import pyarrow.dataset as ds

    loc = resolve(path)
    if not loc.is_dir():
        return None
    return ds.dataset(loc.path, filesystem=loc.fs, format="parquet", **kw)


def out_remove_quietly(path: Location) -> None:
    """A file of the run's own removed, if it is there (a part given up: no half-written part left among what the run
    writes)."""
    try:
        loc = resolve(path)
        loc.fs.delete_file(loc.path)
    except (OSError, ValueError):  # never written, or the file system refuses: nothing more to do
        pass


def out_size(path: Location) -> int:
    """A written file's size in bytes."""
    loc = resolve(path)
    return loc.fs.get_file_info(loc.path).size


def out_parquet_writer(path: Location, schema, like=None):
    """A ``pyarrow.parquet.ParquetWriter`` of one Parquet file through the fs seam (a table written batch by batch,
    never held whole); the columns' descriptions left out, as :func:`write_parquet_file` leaves them.  ``like``: its
    first rows, which decide the columns given a dictionary (:func:`dictionary_columns`)."""
    import pyarrow.parquet as pq

    from decoding.columns import plain

    loc = resolve(path)
    loc.fs.create_dir(posixpath.dirname(loc.path), recursive=True)
    return pq.ParquetWriter(loc.path, plain(schema.empty_table()).schema, filesystem=loc.fs,
                            use_dictionary=dictionary_columns(like))


#: rows of a file's first rows :func:`dictionary_columns` counts the values of, and the share of them that may be
#: distinct in a column given a dictionary (65,536 rows took 0.11-0.13 s a table of the 4 GiB bench, 8,192 rows
#: 0.007 s, choosing the same columns)
DICTIONARY_SAMPLE, DICTIONARY_DISTINCT = 1 << 13, 0.5


def dictionary_columns(like) -> "list[str] | bool":
    """The columns of a file whose first rows are ``like`` that Parquet's dictionary encoding pays for: those whose
    values repeat (at most :data:`DICTIONARY_DISTINCT` of the first :data:`DICTIONARY_SAMPLE` rows distinct: a broker,
    a topic, a group, a state).  A column of distinct values (an offset, a message id) costs its dictionary built
    and dropped at every page (0.15 s of the 0.43 s the 4 GiB bench's 488,000 retries rows took) for no smaller
    file.  True (every column) for a table with nested columns (a dictionary names their leaves) or few rows."""
    import pyarrow.compute as pc

    if like is None or like.num_rows < 1024 or any(pa.types.is_nested(f.type) for f in like.schema):
        return True
    sample = like.slice(0, DICTIONARY_SAMPLE)
    return [name for name, col in zip(sample.column_names, sample.columns)
            if pc.count_distinct(col, mode="all").as_py() <= DICTIONARY_DISTINCT * sample.num_rows]


class RowGroupWriter:
    """One Parquet file written as rows come: rows held until ``hold_rows`` rows or ``hold_bytes`` bytes, then
    written as one row group (``open_file(first)`` opens the file at the first, given those rows, or None for a file
    of no row: a ``pyarrow.parquet.ParquetWriter``).
    Every table and part the jobs write batch by batch goes through it: a batch a row group made files of many
    small row groups, each with its own dictionaries and statistics, slower to write and to read, and a file's
    rows held whole to its end held a task's or a family's every row (issue 40)."""

    def __init__(self, open_file, *, hold_bytes: int, hold_rows: int = 1 << 62, group_rows: int = 1 << 20,
                 beside: bool = False):
        self._open_file, self.hold_bytes, self.hold_rows = open_file, hold_bytes, hold_rows
        self._group_rows = group_rows  # held rows past it (one batch alone) split as pyarrow splits them
        self._file = None
        self._held: list[pa.Table] = []
        self._held_rows = self._held_bytes = 0
        # ``beside``: each row group written in a thread of its own while the caller makes the next rows (Parquet's
        # encoding and compression release the GIL), at most one at a time: the row groups, in order, are the same
        self._writing = Beside() if beside else None

    def write(self, table: "pa.Table") -> None:
        if not table.num_rows:
            return
        self._held.append(table)
        self._held_rows += table.num_rows
        self._held_bytes += table.nbytes
        if self._held_rows >= self.hold_rows or self._held_bytes >= self.hold_bytes:
            self.flush()

    def flush(self, *, beside: bool = True) -> None:
        """What is held written as one row group (begun in its thread when the writer writes ``beside``: the next
        flush or the close waits for it)."""
        if self._held:
            held = pa.concat_tables(self._held) if len(self._held) > 1 else self._held[0]
            file, rows = self._open(held), min(self._held_rows, self._group_rows)
            if self._writing is None:
                file.write_table(held, row_group_size=rows)
            elif beside:
                self._writing.start(file.write_table, held, row_group_size=rows)
            else:
                self._writing.wait()
                file.write_table(held, row_group_size=rows)
        self._held, self._held_rows, self._held_bytes = [], 0, 0

    def _open(self, first=None):
        if self._file is None:
            self._file = self._open_file(first)
        return self._file

    def close(self, *, empty_file: bool = False) -> None:
        """What is held written and the file closed (``empty_file``: a file even without a row, its schema alone)."""
        try:
            self.flush(beside=False)  # nothing left to make beside it
            if self._writing is not None:
                self._writing.wait()
        except BaseException:
            self.abort()
            raise
        if empty_file:
            self._open()
        if self._file is not None:
            self._file.close()
            self._file = None

    def abort(self) -> None:
        """Given up: what is held dropped, the file (if opened) closed; the caller removes it or names it nowhere."""
        self._held, self._held_rows, self._held_bytes = [], 0, 0
        if self._writing is not None:
            self._writing.wait(raising=False)
        if self._file is not None:
            self._file.close()
            self._file = None


class Beside:
    """One call at a time in a thread of its own: :meth:`start` waits for the last one (raising what it raised)."""

    def __init__(self):
        self._thread: "threading.Thread | None" = None
        self._failed: BaseException | None = None

    def start(self, fn, *args, **kwargs) -> None:
        import threading

        self.wait()

        def run():
            try:
                fn(*args, **kwargs)
            except BaseException as e:  # raised in the caller's thread, at its next start or wait
                self._failed = e

        self._thread = threading.Thread(target=run, name="row-group-writer", daemon=True)
        self._thread.start()

    def wait(self, raising: bool = True) -> None:
        if self._thread is not None:
            self._thread.join()
            self._thread = None
        failed, self._failed = self._failed, None
        if failed is not None and raising:
            raise failed


def out_parquet_batches(path, batch_size: int = 1 << 16, columns: list[str] | None = None):
    """The record batches of one Parquet file written through the seam, in its order, each row group read only as its
    batches are taken: a consumer slower than the decoding never finds the file decoded ahead in memory (a
    ``pyarrow.dataset`` scanner reads a fragment's row groups ahead, whatever its read-ahead options say)."""
    loc = resolve(path)
    yield from _file_batches(loc.fs, loc.path, batch_size, columns)


def _file_batches(filesystem, path: str, batch_size: int, columns: list[str] | None):
    import pyarrow.parquet as pq

    with filesystem.open_input_file(path) as f:
        yield from pq.ParquetFile(f).iter_batches(batch_size=batch_size, columns=columns, use_threads=False)


def dataset_batches(dataset, columns: list[str] | None = None, batch_size: int = 1 << 16):
    """The record batches of a Parquet ``pyarrow.dataset`` (:func:`out_dataset`'s: a folder's files) in its files'
    order, each file's row groups read only as its batches are taken (:func:`out_parquet_batches`: no scanner's
    read-ahead)."""
    for path in dataset.files:
        yield from _file_batches(dataset.filesystem, path, batch_size, columns)


def out_parts_batches(paths: list[str], schema, columns: list[str] | None = None, batch_size: int = 1 << 16,
                      gather: bool = False):
    """Parquet part files (as :func:`out_parts_dataset` takes them) as tables of ``schema`` (its ``columns`` only,
    when given), a batch at a time in the order given: :func:`out_parquet_batches` of each part, so a slow consumer
    holds one batch, never a scanner's read-ahead (which grew with the parts: issue 40).  ``gather``: consecutive
    batches joined into tables of up to ``batch_size`` rows, the rows in the same order: a consumer's fixed cost per
    table is then paid per ``batch_size`` rows, not per part (a fleet's tasks write thousands of small parts)."""
    import pyarrow as pa

    wanted = pa.schema([schema.field(c) for c in columns]) if columns is not None else schema
    held, rows = [], 0
    for path in paths:
        for batch in out_parquet_batches(path, batch_size, wanted.names):
            if not batch.num_rows:
                continue
            t = pa.Table.from_batches([batch]).select(wanted.names).cast(wanted)
            if not gather:
                yield t
                continue
            if rows + t.num_rows > batch_size and held:
                yield pa.concat_tables(held).combine_chunks()
                held, rows = [], 0
            held.append(t)
            rows += t.num_rows
    if held:
        yield pa.concat_tables(held).combine_chunks()


def out_parts_dataset(paths: list[str], schema):
    """Parquet part files (paths or URIs of one file system, written through the seam) as one ``pyarrow.dataset``
    read as ``schema``, in the order given; an empty in-memory one when there is none."""
    import pyarrow.dataset as ds

    if not paths:
        return ds.dataset(schema.empty_table())
    locs = [resolve(p) for p in paths]
    return ds.dataset([loc.path for loc in locs], schema=schema, filesystem=locs[0].fs, format="parquet")


def append_history(df, delta_path: Location) -> Location:
    """Append one run's rows to a Delta history table (created on first use): one commit, schema merged."""
    return write_table(df, delta_path, "delta", mode="append")


def _is_delta(loc: Location) -> bool:
    return loc.child(DELTA_LOG).is_dir()


def is_delta_table(path: Location) -> bool:
    return _is_delta(resolve(path))


def _write_delta(df, path: Location, mode: str) -> None:
    def spark_writes(folder: Location) -> None:
        with _micros_timestamps(df.sparkSession):
            # the _SUCCESS marker would only be litter inside the table
            (df.write.mode("error")  # "errorifexists": Spark Connect knows only this spelling
             .option("mapreduce.fileoutputcommitter.marksuccessfuljobs", "false")
             .parquet(uri_of(folder)))

    def schema():
        from pyspark.sql.pandas.types import to_arrow_schema

        return to_arrow_schema(df.schema, timezone="UTC")

    write_delta(path, mode, spark_writes, schema)


def write_delta(path: Location, mode: str, write_files, empty_schema) -> None:
    """A Delta table at ``path`` (see FORMATS): ``write_files(folder)`` writes the rows as Parquet files into the
    fresh ``folder`` (a Location) inside the table (Spark's writer, or tasks of their own, runtime/export.py),
    then one delta-rs commit adds them; ``empty_schema()``: the Arrow schema when no file was written."""
    import pyarrow.parquet as pq
    from deltalake import DeltaTable, Schema
    from deltalake.transaction import AddAction, create_table_with_add_actions

    table = resolve(path)
    info = table.info()
    if info.type == pafs.FileType.File or (info.type == pafs.FileType.Directory
                                            and not _only_marker([i.base_name for i in table.list()])
                                            and not _is_delta(table)):
        raise OutputError(f"{uri_of(path)} exists and is not a Delta table; refusing to turn it into one")
    batch = f"data-{uuid.uuid4().hex}"
    staging = table.child(batch)
    try:
        write_files(staging)
        files = [i for i in staging.fs.get_file_info(pafs.FileSelector(staging.path))
                 if i.type == pafs.FileType.File]
        for litter in (i for i in files if not i.base_name.endswith(".parquet")):  # Hadoop's .crc files
            staging.fs.delete_file(litter.path)
        files = sorted((i for i in files if i.base_name.endswith(".parquet")), key=lambda i: i.base_name)
        if files:
            schema = pq.read_schema(files[0].path, filesystem=staging.fs)
        else:
            schema = empty_schema()
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


# ---------------------------------------------------------------------------------------------- reading

def detect_format(path: Location) -> str:
    """``delta`` when ``_delta_log`` is present, else ``parquet`` or ``jsonl`` by the part files' names."""
    loc = resolve(path)
    if _is_delta(loc):
        return "delta"
    names = [i.base_name for i in loc.list() if i.type == pafs.FileType.File and i.base_name != MARKER]
    if any(n.endswith(".parquet") for n in names):
        return "parquet"
    if any(n.endswith(".json") or n.endswith(".jsonl") for n in names):
        return "jsonl"
    raise OutputError(f"{uri_of(path)} holds no Delta log, Parquet or JSON part files")


def read_table(spark, path: Location, fmt: str | None = None, *, schema=None):
    """A table written by :func:`write_table` as a DataFrame.  ``schema`` (a StructType or DDL string)
    is applied to jsonl, whose lines carry no types (BINARY columns come back from base64 only with it).  An
    output whose run has not committed (its commit cut short: runtime/commit.py) is refused."""
    _check_committed(path)
    fmt = fmt or detect_format(path)
    if fmt == "parquet":
        return spark.read.parquet(uri_of(path))
    if fmt == "jsonl":
        reader = spark.read.options(timestampFormat=JSON_TIMESTAMP_FORMAT)
        if schema is not None:
            reader = reader.schema(schema)
        return reader.json(uri_of(path))
    if fmt != "delta":
        raise OutputError(f"unknown table format {fmt!r}; expected one of {', '.join(FORMATS)}")
    return _read_delta(spark, path)


def _check_committed(path: Location) -> None:
    from store_format.errors import StoreFormatError

    from .commit import check_committed

    try:
        check_committed(path, "table")
    except (StoreFormatError, OSError):  # a scheme only Spark knows (s3a://): nothing to look at from here
        pass


def _read_delta(spark, path: Location):
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
