"""The dumps an audit reads: store roots named by ``--store`` paths, with their broker names, and the chain of
custody over their files (sizes, mtimes, optionally sha256, before and after the run)."""
from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass
from pathlib import Path

from jobs.output import OutputError
from store_format import fs


@dataclass(frozen=True)
class StoreInput:
    name: str  # the broker column
    path: str  # local store root
    source: str  # the input path it was found under (a store root, or a folder of store roots)
    from_folder: bool = False  # found in a folder of store roots: named after its folder


def resolve_stores(paths: list[str]) -> list[StoreInput]:
    """Store roots named by ``paths`` (each a store root or a folder of store roots), with broker names as the
    data sources give them (the folder name; ``.../<broker>/store`` -> ``<broker>``).  A single root whose
    name is taken already gets a numbered name; a clash inside folders is refused."""
    from datasources.storepaths import find_inputs

    out: list[StoreInput] = []
    for path in paths:
        if "://" in path and not path.startswith("file://"):
            raise OutputError(f"{path}: the audit reads local (or mounted) stores; copy remote dumps first")
        local = os.path.abspath(path[len("file://"):] if path.startswith("file://") else path)
        inputs = find_inputs(local, "commitlog")
        for inp in inputs:
            if inp.single_file:
                raise OutputError(f"{path}: give a store root, not a single segment file")
            root = os.path.abspath(inp.loc.parent().path)
            if any(root == s.path for s in out):
                continue
            name = inp.broker
            taken = {s.name for s in out}
            if name in taken:
                if len(inputs) > 1:
                    raise OutputError(f"{path}: a store named {name!r} is given twice; pass one of them as its "
                                      "own --store path so it can be renamed")
                name = next(f"{name}-{i}" for i in range(2, len(out) + 3) if f"{name}-{i}" not in taken)
            out.append(StoreInput(name, root, local, from_folder=len(inputs) > 1))
    return out


def input_files(stores: list[StoreInput]) -> list[Path]:
    return sorted(p for s in stores for p in Path(s.path).rglob("*") if p.is_file())


def fingerprint(files: list[Path], sha256: bool) -> dict[str, dict]:
    out = {}
    for p in files:
        st = p.stat()
        entry = {"size": st.st_size, "mtime_ns": st.st_mtime_ns}
        if sha256:
            h = hashlib.sha256()
            with fs.open_file(p) as f:  # the read-only way in (no FIFO, device or link loop is read)
                for chunk in iter(lambda: f.read(1 << 20), b""):
                    h.update(chunk)
            entry["sha256"] = h.hexdigest()
        out[str(p)] = entry
    return out
