"""The Spark wrappers (decoding.spark) give exactly the kernel's rows, through the one session-scoped SparkSession."""
from __future__ import annotations

import pyarrow as pa
import pytest
from chispa import assert_df_equality

from decoding import kernels as K
from decoding import spark as S

from .test_kernels import fixture_frames

GARBAGE = [(b"\x00\x00\x00\x05junk", "bad", 10**9), (None, "null", 10**9 + 1), (b"", "empty", 10**9 + 2)]


def _frames_rows(name: str) -> list[tuple]:
    frames, messages = fixture_frames(name)
    rows = [(f, f"{name}/00000000000000000000", m["commitLogOffset"]) for f, m in zip(frames, messages)]
    return rows + GARBAGE


def _frames_df(spark, name: str):
    # several partitions, so batches are cut in more than one place
    return spark.createDataFrame(_frames_rows(name), "frame binary, segment string, file_position long").repartition(3)


def _expected(spark, name: str, columns=None):
    rows = _frames_rows(name)
    decoded = K.decode_binary(pa.array([r[0] for r in rows], pa.binary()), columns=columns)
    table = pa.Table.from_batches([decoded])
    table = table.add_column(0, "segment", pa.array([r[1] for r in rows])).add_column(
        1, "file_position", pa.array([r[2] for r in rows], pa.int64()))
    return spark.createDataFrame(table)


@pytest.mark.parametrize("name", ["basic", "broker"])
def test_decode_messages_equals_kernel(spark, name):
    actual = S.decode_messages(_frames_df(spark, name))
    assert actual.schema.names == ["segment", "file_position", *K.DEFAULT_COLUMNS]
    assert_df_equality(actual.orderBy("file_position"), _expected(spark, name).orderBy("file_position"),
                       ignore_nullable=True)
    errors = {r["segment"]: (r["error"], r["error_field"]) for r in actual.where("error is not null or topic is null")
              .select("segment", "error", "error_field").collect()}
    assert errors == {"bad": ("BAD_MAGIC", "magic"), "null": (None, None), "empty": ("TRUNCATED", "store_size")}


def test_decode_messages_column_selection_and_keep(spark):
    cols = ("msg_id", "topic", "tags_code", "error")
    actual = S.decode_messages(_frames_df(spark, "basic"), keep=["file_position"], columns=cols)
    assert actual.schema.names == ["file_position", *cols]
    expected = _expected(spark, "basic", columns=cols).drop("segment")
    assert_df_equality(actual.orderBy("file_position"), expected.orderBy("file_position"), ignore_nullable=True)
    with pytest.raises(ValueError, match="clash"):
        S.decode_messages(_frames_df(spark, "basic").withColumnRenamed("segment", "topic"))
    with pytest.raises(ValueError, match="not in the DataFrame"):
        S.decode_messages(_frames_df(spark, "basic"), frame_col="record")


def test_decode_record_column_on_a_binary_column(spark):
    df = _frames_df(spark, "broker")
    actual = df.select("segment", "file_position", S.decode_record_column("frame").alias("m")) \
        .select("segment", "file_position", "m.*")
    assert_df_equality(actual.orderBy("file_position"), _expected(spark, "broker").orderBy("file_position"),
                       ignore_nullable=True)
    structs = {r["segment"]: r["m"] for r in df.select("segment", S.decode_record_column("frame").alias("m")).collect()}
    assert structs["null"] is None  # null record -> null struct
    assert structs["bad"]["error"] == "BAD_MAGIC" and structs["bad"]["topic"] is None


def test_large_var_types_inputs(spark):
    """With useLargeVarTypes the workers see large_binary frames; both wrappers still give the kernel's rows."""
    spark.conf.set(S.LARGE_VAR_TYPES_CONF, "true")
    try:
        df = _frames_df(spark, "basic")
        seen = df.select("frame").mapInArrow(
            lambda it: (pa.RecordBatch.from_arrays([pa.array([str(b.column(0).type)])], names=["t"]) for b in it),
            "t string").distinct().collect()
        assert {r["t"] for r in seen} == {"large_binary"}
        expected = _expected(spark, "basic").orderBy("file_position")
        assert_df_equality(S.decode_messages(df).orderBy("file_position"), expected, ignore_nullable=True)
        via_udf = df.select("segment", "file_position", S.decode_record_column("frame").alias("m")) \
            .select("segment", "file_position", "m.*")
        assert_df_equality(via_udf.orderBy("file_position"), expected, ignore_nullable=True)
    finally:
        spark.conf.unset(S.LARGE_VAR_TYPES_CONF)


def test_message_struct_type_is_derived_from_the_kernel_schema():
    st = S.message_struct_type()
    assert st.names == list(K.DEFAULT_COLUMNS)
    assert st["properties"].dataType.simpleString() == "map<string,string>"
    assert st["keys"].dataType.simpleString() == "array<string>"
    assert S.message_struct_type(decompress=True).names[-2:] == list(K.DECOMPRESS_COLUMNS)
