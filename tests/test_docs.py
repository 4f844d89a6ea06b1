"""docs/jobs.md is generated from every job's --help (tools/jobs_docs.py, `make docs`): the checked-in copy
must be exactly what the generator produces now, so the reference never drifts from the code."""
from __future__ import annotations

import importlib.util

from jobs.session import REPO


def test_jobs_md_is_what_the_generator_produces():
    spec = importlib.util.spec_from_file_location("tools_jobs_docs", REPO / "tools" / "jobs_docs.py")
    generator = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(generator)
    generated = generator.render()
    assert "## decode" in generated and "## trend" in generated and "--store PATH" in generated
    checked_in = (REPO / "docs" / "jobs.md").read_text(encoding="utf-8")
    assert checked_in == generated, "docs/jobs.md is out of date: run `make docs`"
