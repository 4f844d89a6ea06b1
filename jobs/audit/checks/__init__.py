"""The audit's check families, one module each.  A family declares its checks (``findings.check``: id, severity,
message template) at import and implements any of these hooks:

* ``in_range(rc, out)``: in a scan task, over one commitlog range (:class:`jobs.audit.scan.RangeContext`: its
  walk, messages, the consume-queue units and index entries it owns);
* ``in_queue_files(facts, files, out)`` / ``in_index_file(facts, part, out)``: in a scan task, over consume-queue
  files / one index file;
* ``on_driver(ctx) -> FamilyResult``: on the driver, from the partial tables its hooks emitted and the driver's
  own facts (recovery, config files), returning findings, metrics and detail tables as Arrow tables.

Adding a check never touches another family.  Order matters only for progress output."""
from __future__ import annotations

import importlib
from dataclasses import dataclass, field

import pyarrow as pa

FAMILIES = ("integrity", "recovery", "consumequeue", "index", "lag", "transactions", "delays", "retries",
            "metadata")


@dataclass
class FamilyResult:
    findings: list[pa.Table] = field(default_factory=list)
    metrics: list[pa.Table] = field(default_factory=list)
    tables: dict[str, pa.Table] = field(default_factory=dict)


def load(family: str):
    if family not in FAMILIES:
        raise ValueError(f"unknown check family {family!r}: choose from {', '.join(FAMILIES)}")
    return importlib.import_module(f"{__name__}.{family}")


def load_all() -> None:
    """Import every family, so the registry (jobs.audit.findings.CHECKS) is complete."""
    for family in FAMILIES:
        load(family)
