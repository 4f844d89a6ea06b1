"""Where a dump's files are: local paths or pyarrow.fs URIs, store roots, and folders of several brokers.

Every source takes the same kinds of path: a broker store root (the folder holding ``commitlog/``,
``consumequeue/``, ``index/``), one of those part folders, a single file of a part, or a folder whose
sub-folders are store roots (``<broker>/`` or ``<broker>/store/``).  The ``broker`` column comes from the
folder name (``<broker>/store`` -> ``<broker>``) unless the ``broker`` option names a single store.
Files are only ever opened for reading: local files through read-only mmaps, others with ranged reads.
"""
from __future__ import annotations

from dataclasses import dataclass

import pyarrow.fs as pafs

from store_format.errors import ErrorKind, StoreFormatError
# the file-system seam lives at the bottom layer; the data sources use it as it is
from store_format.fs import Location, resolve  # noqa: F401

PARTS = ("commitlog", "consumequeue", "index")


def is_store_root(loc: Location) -> bool:
    return any(i.type == pafs.FileType.Directory and i.base_name in PARTS for i in loc.list())


def broker_name(root: Location) -> str:
    """``.../<broker>/store`` -> ``<broker>``; any other store root is named after its own folder."""
    return root.parent().name if root.name == "store" else root.name


@dataclass(frozen=True)
class PartInput:
    """One broker's share of the input for one part: a part folder, or a single file of it."""

    broker: str
    loc: Location
    single_file: bool


def find_inputs(path: str, part: str, broker: str | None = None) -> list[PartInput]:
    """The ``part`` folders (or the single file) that ``path`` names, one per broker.

    Raises a MISSING error naming the path when it holds no store at all."""
    if not path:
        raise StoreFormatError(ErrorKind.INVALID_INPUT, "no path given: use .load(path)")
    loc = resolve(path)
    info = loc.info()
    if info.type == pafs.FileType.NotFound:
        raise StoreFormatError(ErrorKind.MISSING, "no such file or directory", file=path)
    if info.type == pafs.FileType.File:
        root = _root_of_file(loc, part)
        return [PartInput(broker or (broker_name(root) if root else loc.parent().name), loc, True)]
    if loc.name == part:
        return [PartInput(broker or broker_name(loc.parent()), loc, False)]
    if is_store_root(loc):
        return [PartInput(broker or broker_name(loc), loc.child(part), False)]
    roots = []
    for child in loc.list():
        if child.type != pafs.FileType.Directory:
            continue
        c = Location(loc.fs, child.path)
        if is_store_root(c):
            roots.append(c)
        elif c.child("store").is_dir() and is_store_root(c.child("store")):
            roots.append(c.child("store"))
    if not roots:
        raise StoreFormatError(ErrorKind.MISSING, "no RocketMQ store here: expected a store root (holding "
                               "commitlog/, consumequeue/ or index/), one of those folders, a file of one, or a "
                               "folder of broker store roots", file=path)
    if broker is not None and len(roots) > 1:
        raise StoreFormatError(ErrorKind.INVALID_INPUT, f"the broker option names one store but {len(roots)} "
                               "store roots were found; broker names come from their folders", file=path)
    inputs = [PartInput(broker or broker_name(r), r.child(part), False) for r in roots]
    names = [i.broker for i in inputs]
    if len(set(names)) != len(names):
        raise StoreFormatError(ErrorKind.INVALID_INPUT, f"two store roots give the same broker name: {names}",
                               file=path)
    return inputs


def _root_of_file(loc: Location, part: str) -> Location | None:
    """The store root above a file of ``part`` (segment, index file, or consumequeue/<t>/<q>/<file>)."""
    p = loc.parent()
    for _ in range(3):
        if p.name == part:
            return p.parent()
        p = p.parent()
    return None


def parse_bool(value, default: bool) -> bool:
    if value is None:
        return default
    v = str(value).strip().lower()
    if v in ("true", "1", "yes"):
        return True
    if v in ("false", "0", "no"):
        return False
    raise ValueError(f"expected true or false, got {value!r}")


def parse_size(value, default: int) -> int:
    """Bytes, with an optional k/m/g suffix (binary units)."""
    if value is None:
        return default
    v = str(value).strip().lower().removesuffix("b")
    mult = {"k": 1 << 10, "m": 1 << 20, "g": 1 << 30}.get(v[-1:], 1)
    n = int(v[:-1] if mult > 1 else v) * mult
    if n <= 0:
        raise ValueError(f"size must be positive, got {value!r}")
    return n
