"""docs/output-schemas.md is generated from the code (tools/schema_docs.py, `make docs`) and docs/user-guide.md
explains every finding kind the audit's registry declares: neither document can fall behind the code."""
from __future__ import annotations

import importlib.util
import re

import pytest

from jobs.session import REPO


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
