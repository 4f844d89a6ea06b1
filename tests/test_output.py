"""runtime/output.py: round trips for every format, Delta commits (one per call, schema merge), and the guard
that refuses to clobber outputs or write into an input dump."""
from __future__ import annotations

import datetime as dt
import json
import os

import pytest
from deltalake import DeltaTable

from runtime.output import FORMATS, MARKER, OutputError, append_history, marker_of, prepare_output, read_table, \
    write_table

SCHEMA = "id long, payload binary, at timestamp, tags map<string,string>, note string"
UTC = dt.timezone.utc
ROWS = [
    (1, b"\x00\x01\xff", dt.datetime(2024, 1, 2, 3, 4, 5, 123456, tzinfo=UTC), {"k": "v"}, "first"),
    (2, None, None, None, None),
    (3, b"", dt.datetime(1999, 12, 31, 23, 59, 59, 1, tzinfo=UTC), {}, "third"),
]


def _sorted(df):
    return sorted((r.asDict() for r in df.collect()), key=lambda r: r["id"])


@pytest.fixture(scope="module")
def frame(spark):
    return spark.createDataFrame(ROWS, SCHEMA)


@pytest.mark.parametrize("fmt", FORMATS)
def test_round_trip(spark, frame, tmp_path, fmt):
    path = str(tmp_path / fmt)
    assert write_table(frame, path, fmt) == path
    back = read_table(spark, path, schema=frame.schema if fmt == "jsonl" else None)
    assert back.schema == frame.schema
    assert _sorted(back) == _sorted(frame)
    assert _sorted(back)[0]["at"].microsecond == 123456  # microseconds survive every format


def test_jsonl_lines_carry_base64_binary_and_explicit_nulls(frame, tmp_path):
    path = tmp_path / "j"
    write_table(frame, str(path), "jsonl")
    lines = [json.loads(line) for f in sorted(path.glob("part-*.json")) for line in f.read_text().splitlines()]
    by_id = {row["id"]: row for row in lines}
    assert by_id[1]["payload"] == "AAH/"  # base64 of 00 01 ff
    assert by_id[1]["at"] == "2024-01-02T03:04:05.123456Z"
    assert by_id[2] == {"id": 2, "payload": None, "at": None, "tags": None, "note": None}


def test_delta_append_merges_schema_one_commit_per_call(spark, frame, tmp_path):
    path = str(tmp_path / "history")
    append_history(frame, path)  # creates the table
    append_history(frame.where("id = 1"), path)  # same columns: the staged files are committed as they are
    wider = spark.createDataFrame([(4, "extra")], "id long, added string")
    append_history(wider, path)  # a new column: schema merge
    table = DeltaTable(path)
    assert table.version() == 2
    assert [h["operation"] for h in table.history()] == ["WRITE", "WRITE", "CREATE TABLE"]
    assert [f.name for f in table.schema().fields] == ["id", "payload", "at", "tags", "note", "added"]
    # the first two calls committed Spark's files in place; the merging one went through delta-rs's writer
    assert len(list((tmp_path / "history").glob("data-*"))) == 2
    rows = _sorted(read_table(spark, path))
    assert [r["id"] for r in rows] == [1, 1, 2, 3, 4]
    assert rows[-1]["added"] == "extra" and rows[-1]["note"] is None
    assert all(r["added"] is None for r in rows[:-1])


def test_delta_overwrite_is_one_commit_and_reads_only_live_files(spark, frame, tmp_path):
    path = str(tmp_path / "t")
    write_table(frame, path, "delta")
    write_table(frame.where("id = 2").select("id"), path, "delta", mode="overwrite")
    table = DeltaTable(path)
    assert table.version() == 1
    # the removed files are still on disk: reading the directory would resurrect them
    assert sum(len(files) for _, _, files in os.walk(path)) > len(table.file_uris()) + 2
    back = read_table(spark, path)
    assert back.columns == ["id"] and [r.id for r in back.collect()] == [2]
    assert DeltaTable(path, version=0).to_pyarrow_table().num_rows == 3  # time travel keeps version 0


def test_delta_of_empty_frame_reads_back_empty_with_schema(spark, frame, tmp_path):
    path = str(tmp_path / "empty")
    write_table(frame.where("id < 0"), path, "delta")
    back = read_table(spark, path)
    assert back.schema == frame.schema and back.count() == 0


def test_delta_refuses_a_folder_that_is_not_a_delta_table(frame, tmp_path):
    (tmp_path / "x").mkdir()
    (tmp_path / "x" / "data.csv").write_text("a\n")
    with pytest.raises(OutputError, match="not a Delta table"):
        write_table(frame, str(tmp_path / "x"), "delta")
    with pytest.raises(OutputError, match="format"):
        write_table(frame, str(tmp_path / "y"), "csv")


def _committed(path: str, files: dict[str, bytes] = None, **kw):
    """One run that claims ``path`` (prepare_output), writes ``files`` (default: one) into its staging and commits
    (a staging with nothing in it is never committed)."""
    from runtime.commit import JobRun

    with JobRun("test") as run:
        out = prepare_output(path, **kw)
        for name, data in (files or {"part-0.parquet": b"x"}).items():
            with open(os.path.join(out.staging_path, name), "wb") as f:
                f.write(data)
        run.commit()
    return out


def test_prepare_output_refuses_non_empty_without_overwrite(tmp_path):
    out = tmp_path / "out"
    _committed(str(out), overwrite=False)  # missing: claimed, committed with the marker
    assert (out / MARKER).is_file() and marker_of(str(out))["tool"] == "rocketmq-forensics"
    (out / "part-0.parquet").unlink()
    _committed(str(out), overwrite=False)  # only the marker: still fresh
    (out / "old.parquet").write_bytes(b"x")
    with pytest.raises(OutputError, match="--overwrite"):
        _committed(str(out), overwrite=False)
    assert (out / "old.parquet").exists()
    _committed(str(out), {"new.parquet": b"y"}, overwrite=True, job="decode")
    assert not (out / "old.parquet").exists() and (out / MARKER).is_file() and (out / "new.parquet").exists()
    (tmp_path / "file").write_text("a file")
    for overwrite in (False, True):
        with pytest.raises(OutputError, match="--overwrite"):
            _committed(str(tmp_path / "file"), overwrite=overwrite)
    assert (tmp_path / "file").read_text() == "a file"


def test_overwrite_deletes_only_a_folder_this_suite_wrote(tmp_path):
    """Without the marker (someone's folder, or evidence) --overwrite refuses and deletes nothing; a marker that
    is a link, or that names another tool, is no marker."""
    mine = tmp_path / "somebody"
    mine.mkdir()
    (mine / "data.csv").write_text("precious")
    with pytest.raises(OutputError, match="not written by this suite"):
        prepare_output(str(mine), overwrite=True)
    (tmp_path / "elsewhere.json").write_text('{"tool": "rocketmq-forensics"}')
    (mine / MARKER).symlink_to(tmp_path / "elsewhere.json")
    with pytest.raises(OutputError, match="not written by this suite"):
        prepare_output(str(mine), overwrite=True)
    (mine / MARKER).unlink()
    (mine / MARKER).write_text('{"tool": "other"}')
    with pytest.raises(OutputError, match="not written by this suite"):
        prepare_output(str(mine), overwrite=True)
    assert (mine / "data.csv").read_text() == "precious"


def test_a_prepared_output_keeps_its_marker_through_every_format(spark, frame, tmp_path):
    for fmt in FORMATS:
        out = tmp_path / fmt
        from runtime.commit import JobRun

        with JobRun("test") as run:
            write_table(frame, prepare_output(str(out), overwrite=False, job="test").staging_path, fmt)
            run.commit()
        assert (out / MARKER).is_file(), fmt
        assert _sorted(read_table(spark, str(out), schema=frame.schema if fmt == "jsonl" else None)) == _sorted(frame)


@pytest.mark.parametrize("where", ["inside", "equal", "containing"])
def test_prepare_output_never_touches_an_input_store(tmp_path, where):
    store = tmp_path / "dump" / "broker-a" / "store"
    (store / "commitlog").mkdir(parents=True)
    (store / "commitlog" / "00000000000000000000").write_bytes(b"\0" * 16)
    out = {"inside": store / "out", "equal": store, "containing": tmp_path / "dump"}[where]
    with pytest.raises(OutputError, match="overlaps the input store"):
        prepare_output(str(out), overwrite=True, inputs=[str(store)])
    # spelt differently (relative, trailing slash) it is still the same place
    with pytest.raises(OutputError, match="overlaps the input store"):
        prepare_output(os.path.relpath(out) + "/", overwrite=True, inputs=[f"file://{store}"])
    assert (store / "commitlog" / "00000000000000000000").exists()
    _committed(str(tmp_path / "dump-out"), overwrite=True, inputs=[str(store)])  # a sibling is fine


def test_an_input_naming_a_part_or_a_file_guards_its_whole_store(tmp_path):
    store = tmp_path / "broker-a" / "store"
    segment = store / "commitlog" / "00000000000000000000"
    segment.parent.mkdir(parents=True)
    segment.write_bytes(b"\0" * 16)
    (store / "consumequeue").mkdir()
    for given in (segment, segment.parent):
        with pytest.raises(OutputError, match="overlaps the input store"):
            prepare_output(str(store / "consumequeue" / "out"), overwrite=True, inputs=[str(given)])
    _committed(str(tmp_path / "out"), overwrite=True, inputs=[str(segment)])


def test_a_table_file_gives_a_dictionary_only_to_columns_whose_values_repeat(tmp_path):
    """runtime/output.py ``dictionary_columns``: a column of distinct values (an offset, a message id) is written
    without the dictionary Parquet would build and drop at each page; one whose values repeat keeps it.  The rows read
    back are the rows written; a table with a nested column keeps the default (every column)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from runtime.output import dictionary_columns, write_parquet_file

    n = 5000
    t = pa.table({"broker": ["b1", "b2"] * (n // 2), "offset": pa.array(range(n), pa.int64()),
                  "msg_id": [f"id-{i:08d}" for i in range(n)], "queue_id": pa.array([i % 8 for i in range(n)],
                                                                                     pa.int32())})
    assert dictionary_columns(t) == ["broker", "queue_id"]
    write_parquet_file(t, tmp_path / "t.parquet")
    meta = pq.ParquetFile(tmp_path / "t.parquet").metadata.row_group(0)
    encoded = {meta.column(i).path_in_schema: meta.column(i).encodings for i in range(meta.num_columns)}
    assert {c for c, e in encoded.items() if "RLE_DICTIONARY" in e} == {"broker", "queue_id"}
    assert pq.read_table(tmp_path / "t.parquet").equals(t)
    assert dictionary_columns(t.append_column("tags", pa.array([{"k": "v"}] * n))) is True
    assert dictionary_columns(t.slice(0, 10)) is True


def test_a_file_kept_again_is_linked_where_it_can_be_and_never_written_through(tmp_path):
    """runtime/output.py ``out_keep`` (an audit state's parts given back night after night): a hard link to the
    source where both are local files; a file an earlier attempt left there is let go first, not written through
    (it may share the source's bytes); a source that is a symbolic link is copied, not linked."""
    from runtime.output import out_keep

    src = tmp_path / "old" / "part.arrow"
    src.parent.mkdir()
    src.write_bytes(b"kept bytes")
    out_keep(src, tmp_path / "new" / "part.arrow")
    dst = tmp_path / "new" / "part.arrow"
    assert dst.read_bytes() == b"kept bytes" and os.path.samefile(src, dst)
    out_keep(src, dst, b"kept bytes")  # again (a task attempted twice): the source untouched, still one file
    assert src.read_bytes() == b"kept bytes" and os.path.samefile(src, dst) and os.stat(src).st_nlink == 2
    link = tmp_path / "old" / "link.arrow"
    link.symlink_to(src)
    out_keep(link, tmp_path / "new" / "copied.arrow")
    copied = tmp_path / "new" / "copied.arrow"
    assert not copied.is_symlink() and copied.read_bytes() == b"kept bytes" and not os.path.samefile(src, copied)
