"""docs/jobs.md is generated from every job's --help (tools/jobs_docs.py, `make docs`): the checked-in copy
must be exactly what the generator produces now, so the reference never drifts from the code; the writer's page
(docs/writing-stores.md) is the writer commands' --help text, checked the same way."""
from __future__ import annotations

import importlib.util

from runtime.session import REPO


def test_jobs_md_is_what_the_generator_produces():
    spec = importlib.util.spec_from_file_location("tools_jobs_docs", REPO / "tools" / "jobs_docs.py")
    generator = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(generator)
    generated = generator.render()
    assert "## decode" in generated and "## trend" in generated and "--store PATH" in generated
    checked_in = (REPO / "docs" / "jobs.md").read_text(encoding="utf-8")
    assert checked_in == generated, "docs/jobs.md is out of date: run `make docs`"


def test_writing_stores_page_is_the_writer_commands_help():
    """docs/writing-stores.md's text block (the JSON Lines table of ``write``) is writer_cli's docstring, the text
    ``generate --help`` and ``write --help`` print: a change to one is a change to the other."""
    import re

    from store_format.write import writer_cli

    page = (REPO / "docs" / "writing-stores.md").read_text(encoding="utf-8")
    block = re.search(r"\n```text\n(.*?)\n```\n", page, re.S)
    assert block, "docs/writing-stores.md has no text block"
    assert block.group(1) == writer_cli.__doc__.strip("\n"), "docs/writing-stores.md's text block is out of date"


def test_user_guide_what_to_do_is_each_checks_action():
    """Every check's ``action`` (what the report's first screen and finding groups tell an operator to do) is the
    user guide's "what to do" for it, word for word: a row's last cell, or, for a table of checks without that
    column, the family's "What to do for all of them:" paragraph."""
    import re

    from jobs.audit.checks import load_all
    from jobs.audit.findings import CHECKS

    load_all()
    guide = (REPO / "docs" / "user-guide.md").read_text(encoding="utf-8")
    sections = re.split(r"\n### ", guide)

    def plain(text: str) -> str:
        return " ".join(text.split())

    for check_id, c in sorted(CHECKS.items()):
        rows = [line for line in guide.splitlines() if line.startswith(f"| `{check_id}` |")]
        assert len(rows) == 1, f"docs/user-guide.md has {len(rows)} rows for {check_id}"
        cells = [x.strip() for x in rows[0].strip("|").split(" | ")]
        if len(cells) == 4:
            assert plain(cells[3]) == plain(c.action), f"{check_id}: the guide's what-to-do differs from its action"
        else:
            [section] = [s for s in sections if rows[0] in s]
            m = re.search(r"What to do for all of them: (.*?)\n\n", section, re.S)
            assert m and plain(m.group(1)) == plain(c.action), f"{check_id}: no what-to-do in the guide"
