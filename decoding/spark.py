"""Spark wrappers for :mod:`decoding.kernels`: a DataFrame of frames becomes a DataFrame of messages in one call.

* :func:`decode_messages` — ``mapInArrow`` over whole batches (the fast path for scans: the data sources'
  frame rows in, one message row out per frame, other input columns carried along).
* :func:`decode_record_column` — a scalar ``arrow_udf`` from a binary column of raw records to a struct
  (for frames kept as evidence in Parquet/Delta and decoded again later).

Both declare their output schema once, derived from the kernel's Arrow schema.  Python workers hand the
kernels ``binary`` or, with ``spark.sql.execution.arrow.useLargeVarTypes=true``, ``large_binary`` frames; the
kernels take either, and the output is cast to the offset width Spark expects under that setting.
"""
from __future__ import annotations

from typing import Iterable, Iterator

import pyarrow as pa
from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql.functions import arrow_udf
from pyspark.sql.pandas.types import from_arrow_schema
from pyspark.sql.types import StructType

from store_format import layout as L
from store_format.compression import DEFAULT_MAX_DECOMPRESSED

from . import kernels as K

LARGE_VAR_TYPES_CONF = "spark.sql.execution.arrow.useLargeVarTypes"


def message_struct_type(columns: Iterable[str] | None = None, decompress: bool = False) -> StructType:
    """The Spark type of the decoded message columns (from :func:`decoding.kernels.message_schema`)."""
    return from_arrow_schema(K.message_schema(columns, decompress))


def _large_var_types(spark: SparkSession) -> bool:
    return spark.conf.get(LARGE_VAR_TYPES_CONF, "false").strip().lower() == "true"


def _widen(typ: pa.DataType) -> pa.DataType:
    """The type Spark's Arrow conversion uses under useLargeVarTypes: 64-bit offsets for strings and binaries,
    also inside lists, maps and structs (whose own offsets stay 32-bit: Spark has no LargeList)."""
    if typ == pa.string():
        return pa.large_string()
    if typ == pa.binary():
        return pa.large_binary()
    if pa.types.is_list(typ):
        return pa.list_(_widen(typ.value_type))
    if pa.types.is_map(typ):
        return pa.map_(_widen(typ.key_type), _widen(typ.item_type))
    if pa.types.is_struct(typ):
        return pa.struct([f.with_type(_widen(f.type)) for f in typ])
    return typ


def _output_schema(columns: tuple[str, ...], large: bool) -> pa.Schema:
    schema = K.message_schema(columns)
    return pa.schema([f.with_type(_widen(f.type)) for f in schema]) if large else schema


def decode_messages(df: DataFrame, frame_col: str = "frame", keep: Iterable[str] | None = None, *,
                    columns: Iterable[str] | None = None, decompress: bool = False,
                    max_decompressed: int = DEFAULT_MAX_DECOMPRESSED,
                    delay_levels: dict[int, int] = L.DEFAULT_DELAY_LEVELS) -> DataFrame:
    """Decode ``df[frame_col]`` (binary: one whole CommitLog record per row) into message rows.

    ``keep``: input columns carried to the output, first (default: every column but ``frame_col``; e.g. the
    data source's ``segment`` and ``file_position``).  ``columns``/``decompress``/``max_decompressed``/
    ``delay_levels``: as :func:`decoding.kernels.decode_frames`.  A frame that does not decode is a row with
    nulls and ``error``/``error_field`` set, never a failed task."""
    cols = K.resolve_columns(columns, decompress)
    keep = [c for c in df.columns if c != frame_col] if keep is None else list(keep)
    missing = [c for c in [frame_col, *keep] if c not in df.columns]
    if missing:
        raise ValueError(f"columns {missing} are not in the DataFrame ({df.columns})")
    clash = sorted(set(keep) & set(cols))
    if clash:
        raise ValueError(f"kept columns {clash} clash with decoded message columns; rename or drop them first")
    large = _large_var_types(df.sparkSession)
    out_schema = _output_schema(cols, large)
    spark_schema = StructType(list(df.select(*keep).schema.fields) + list(from_arrow_schema(K.message_schema(cols))))
    options = dict(columns=cols, max_decompressed=max_decompressed, delay_levels=delay_levels)

    def decode(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        K.tune_allocator()
        for batch in batches:
            decoded = K.decode_frames(batch.column(frame_col), **options)
            arrays = [batch.column(k) for k in keep] + [
                a if a.type == f.type else a.cast(f.type) for a, f in zip(decoded.columns, out_schema)]
            names = keep + list(cols)
            yield pa.RecordBatch.from_arrays(arrays, names=names)

    return df.select(frame_col, *keep).mapInArrow(decode, spark_schema)


def decode_record_column(col: Column | str, columns: Iterable[str] | None = None, *, decompress: bool = False,
                         max_decompressed: int = DEFAULT_MAX_DECOMPRESSED,
                         delay_levels: dict[int, int] = L.DEFAULT_DELAY_LEVELS,
                         large_var_types: bool | None = None) -> Column:
    """A column expression decoding a binary column of raw records into a struct of message fields.

    ``df.select(decode_record_column("frame").alias("m")).select("m.*")``.  A null record gives a null
    struct; an undecodable one a struct with ``error`` set.  ``large_var_types`` defaults to the active
    session's ``spark.sql.execution.arrow.useLargeVarTypes``."""
    cols = K.resolve_columns(columns, decompress)
    if large_var_types is None:
        active = SparkSession.getActiveSession()
        large_var_types = bool(active) and _large_var_types(active)
    out_type = pa.struct(list(_output_schema(cols, large_var_types)))
    options = dict(columns=cols, max_decompressed=max_decompressed, delay_levels=delay_levels)

    @arrow_udf(message_struct_type(cols))
    def decode_records(frames: pa.Array) -> pa.Array:
        K.tune_allocator()
        decoded = K.decode_frames(frames, **options)
        arrays = [a if a.type == f.type else a.cast(f.type) for a, f in zip(decoded.columns, out_type)]
        mask = frames.is_null() if frames.null_count else None
        return pa.StructArray.from_arrays(arrays, fields=list(out_type), mask=mask)

    return decode_records(col)
