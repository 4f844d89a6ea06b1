"""The audit pin (tools/audit_pin.py): every output of ``jobs.audit`` on a deterministic corpus of stores (the
fixtures, generated, damaged, forged and broker-flow stores) equals the goldens committed in tests/golden/audit/,
which the previous engine (jobs/audit_legacy.py) wrote first; the rebuilt engine reproduced them exactly.  Regenerate
them only for a deliberate rule change (the tool's docstring says how).  The corpus is byte-for-byte the same
each time it is built."""
from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys

import pytest

from runtime.session import REPO

from .conftest import FIXTURES

GOLDEN = REPO / "tests" / "golden" / "audit"


def _load_tool(name: str):
    """A script from tools/ as a module (tools/ is not a package)."""
    spec = importlib.util.spec_from_file_location(f"tools_{name}", REPO / "tools" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


pin = _load_tool("audit_pin")


def _quiet(message: str) -> None:
    pass


@pytest.fixture(scope="session")
def pin_corpus(tmp_path_factory):
    """The corpus' folder of store roots, built once per session."""
    return pin.build_corpus(tmp_path_factory.mktemp("audit-pin") / "corpus", FIXTURES, log=_quiet)


@pytest.mark.slow
def test_corpus_is_deterministic(pin_corpus, tmp_path):
    """Built again by another process (with another string hash seed): every file of every writer-built store
    has the same bytes."""
    env = {**os.environ, "PYTHONHASHSEED": "4711"}
    subprocess.run([sys.executable, str(REPO / "tools" / "audit_pin.py"), "--corpus", str(tmp_path / "corpus"),
                    "--fixtures", str(FIXTURES), "--build-only"], env=env, check=True, capture_output=True)
    recorded = json.loads((pin_corpus.parent / "CORPUS.json").read_text())["stores"]
    assert sorted(recorded) == sorted([*pin.BUILDERS, *pin.FIXTURES])
    assert pin.store_digests(tmp_path / "corpus" / "stores") == pin.store_digests(pin_corpus) == recorded


def test_audit_reproduces_the_goldens(spark, pin_corpus, tmp_path):
    outputs = pin.run_audits(spark, pin_corpus, tmp_path, "jobs.audit", log=_quiet)
    meta = json.loads((pin_corpus.parent / "CORPUS.json").read_text())
    diff = pin.compare(pin.normalize_all(outputs, pin_corpus), GOLDEN, meta)
    assert not diff, "jobs.audit's outputs differ from tests/golden/audit/:\n" + "\n".join(diff)
    # the report's grouped view stays short for every store of the corpus, whatever its findings: per-message
    # findings are one group per broker, the findings table keeps every row
    from jobs.audit.groups import group_findings

    for name, (out, _) in outputs.items():
        groups = group_findings(str(out / "findings"))
        per_broker: dict[str, int] = {}
        for g in groups:
            per_broker[g.broker] = per_broker.get(g.broker, 0) + 1
        assert max(per_broker.values()) <= 200, (name, sorted(per_broker.items(), key=lambda kv: -kv[1])[:3])
        assert sum(g.count for g in groups) == sum(json.loads((out / "summary.json").read_text())["counts"][s]
                                                   for s in ("error", "warning", "info"))
