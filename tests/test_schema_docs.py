"""docs/output-schemas.md is generated from the code (tools/schema_docs.py, `make docs`) and docs/user-guide.md
explains every finding kind the audit's registry declares: neither document can fall behind the code."""
from __future__ import annotations

import importlib.util
import re

import pytest

from runtime.session import REPO


@pytest.fixture(scope="module")
def generator():
    spec = importlib.util.spec_from_file_location("tools_schema_docs", REPO / "tools" / "schema_docs.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_finding_kinds_are_the_registry(generator):
    kinds = generator.finding_kinds()
    assert {"recovery.truncation", "consumequeue.not_yet_dispatched", "index.entry_past_end",
            "consumequeue.entry_not_a_message", "consumequeue.wrong_queue", "integrity.bad_crc",
            "integrity.bad_geometry", "integrity.end_of_data"} <= kinds
    assert all(re.fullmatch(r"[a-z]+\.[a-z0-9]+(_[a-z0-9]+)*", k) for k in kinds), sorted(kinds)
    assert len(kinds) >= 60


def test_user_guide_explains_every_finding_kind(generator):
    guide = (REPO / "docs" / "user-guide.md").read_text(encoding="utf-8")
    missing = sorted(k for k in generator.finding_kinds() if f"`{k}`" not in guide)
    assert not missing, f"docs/user-guide.md does not explain: {missing}"
    # and names no kind the code cannot emit (a renamed check leaves no stale entry behind)
    named = set(re.findall(r"\| `([a-z]+\.[a-z0-9_]+)` \|", guide))
    assert named <= generator.finding_kinds(), sorted(named - generator.finding_kinds())


def test_output_schemas_md_is_what_the_generator_produces(generator, spark):
    generated = generator.render(generator.collect(spark))
    for table in ("findings", "metrics", "segments", "lag", "transactions", "retries", "dlq"):
        assert f"### {table}\n" in generated
    assert "| `finding_id` | `string` |" in generated and "| `lag_ms` | `bigint` |" in generated
    checked_in = (REPO / "docs" / "output-schemas.md").read_text(encoding="utf-8")
    assert checked_in == generated, "docs/output-schemas.md is out of date: run `make docs`"


def test_every_documented_column_is_described_where_its_schema_is_declared(generator):
    from decoding.columns import description

    fields = generator.declared()
    assert {"findings", "metrics", "lag", "resend", "decode", "extract", "trend"} <= set(fields)
    undescribed = sorted(f"{t}.{n}" for t, cols in fields.items() for n, f in cols.items() if not description(f))
    assert not undescribed
    assert description(fields["lag"]["broker"]) == description(fields["decode"]["broker"])  # one shared text
    assert "TOTALSIZE" in description(fields["decode"]["store_size"])


def test_a_column_without_a_description_is_refused():
    import pyarrow as pa

    from decoding.columns import column

    with pytest.raises(KeyError, match="'no_such_column'"):
        column("no_such_column", pa.int64())
    assert column("topic", pa.string(), "the real topic").metadata == {b"description": b"the real topic"}


def test_descriptions_reach_no_output(generator, tmp_path):
    """Parquet files written through runtime.output.write_parquet_file are the bytes an undescribed schema gives (the
    descriptions would otherwise be in the file's Arrow schema), and Spark's schema of a described Arrow schema is
    the undescribed one's: the sources' schemas and everything Spark writes are unchanged."""
    import pyarrow as pa
    import pyarrow.parquet as pq
    from pyspark.sql.pandas.types import from_arrow_schema

    from runtime.output import write_parquet_file
    from decoding.columns import plain

    from datasources import consumequeue, indexfile
    from decoding import metadata

    sources = {"rocketmq-consumequeue": consumequeue.SCHEMA, "rocketmq-index": indexfile.SCHEMA,
               **{f"rocketmq-metadata {t}": metadata.schema_of(t) for t in metadata.TABLES}}
    for table, cols in [*generator.declared().items(), *((k, {f.name: f for f in v}) for k, v in sources.items())]:
        described = pa.schema(list(cols.values()))
        bare = pa.schema([f.remove_metadata() for f in described])
        rows = described.empty_table()
        write_parquet_file(rows, str(tmp_path / "described.parquet"))
        pq.write_table(rows.cast(bare), str(tmp_path / "bare.parquet"))
        pq.write_table(rows, str(tmp_path / "unstripped.parquet"))
        written = (tmp_path / "described.parquet").read_bytes()
        assert written == (tmp_path / "bare.parquet").read_bytes(), table
        assert written != (tmp_path / "unstripped.parquet").read_bytes(), table  # what plain() prevents
        assert plain(rows).schema.equals(bare, check_metadata=True), table
        assert from_arrow_schema(described) == from_arrow_schema(bare), table
        assert all(f.metadata == {} for f in from_arrow_schema(described)), table
