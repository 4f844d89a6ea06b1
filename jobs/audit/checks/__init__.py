"""The audit's check families, one module each, each declaring its whole contract in one object (``FAMILY``, a
:class:`jobs.audit.contract.Family`: its checks are declared with ``findings.check`` at import).  This is the
registry the engine, tools/schema_docs.py and the docs read.

:data:`FAMILIES` are the families ``--checks`` chooses from, in the order they run and report; the ``always``
families (:data:`ALWAYS`) run in every audit: they complete what the summary and the report show.  Adding a check
never touches another family."""
from __future__ import annotations

import importlib

from ..contract import Family, FamilyResult  # noqa: F401  (FamilyResult: what on_driver returns)
from ..findings import CHECKS, ROLES, Check

FAMILIES = ("integrity", "recovery", "dledger", "consumequeue", "index", "lag", "transactions", "delays", "timers", "pop", "retries",
            "metadata")
# lmq, batchcq and compaction check what consumequeue leaves to them (LMQ queues' membership, batch topics' records,
# compacted topics' logs), so they
# run whatever --checks says, where the files give them anything (Family.applies); lmq's stalled dispatch
# completes the recovery prediction
ALWAYS = ("prediction", "lmq", "batchcq", "compaction", "rates")


def load(family: str) -> Family:
    """The family named ``family`` (one of FAMILIES or ALWAYS), its module imported."""
    if family not in FAMILIES + ALWAYS:
        raise ValueError(f"unknown check family {family!r}: choose from {', '.join(FAMILIES)}")
    found = importlib.import_module(f"{__name__}.{family}").FAMILY
    if found.name != family or found.always != (family in ALWAYS):
        raise TypeError(f"{__name__}.{family}.FAMILY is {found.name!r} (always={found.always})")
    return found


def load_all() -> list[Family]:
    """Every family, so the registry of checks (jobs.audit.findings.CHECKS) is complete (with the engine's own:
    ``history.*``, jobs/audit/state.py)."""
    from .. import state  # noqa: F401
    return [load(f) for f in FAMILIES + ALWAYS]


def selected(names) -> list[Family]:
    """The families an audit runs: the ones chosen, in the order given, and the always ones."""
    return [load(f) for f in names] + [load(f) for f in ALWAYS]


def with_role(role: str) -> tuple[Check, ...]:
    """The checks declaring ``role`` (jobs.audit.findings.ROLES), every family's checks declared first."""
    if role not in ROLES:
        raise ValueError(f"unknown role {role!r}")
    load_all()
    return tuple(c for c in CHECKS.values() if role in c.roles)


def the_check(role: str) -> Check:
    """The one check declaring ``role``."""
    found = with_role(role)
    if len(found) != 1:
        raise LookupError(f"{len(found)} checks declare the role {role!r}, not one")
    return found[0]
