"""The audit's check families, one module each (see base.py for the contract they share).  Order matters only
for progress output: integrity and recovery first, since the others explain their findings in their terms."""
from __future__ import annotations

FAMILIES = ("integrity", "recovery", "consumequeue", "index", "lag", "transactions", "delays", "retries",
            "metadata")


def load(family: str):
    import importlib

    if family not in FAMILIES:
        raise ValueError(f"unknown check family {family!r}: choose from {', '.join(FAMILIES)}")
    return importlib.import_module(f"{__name__}.{family}")
