"""Where a dump's stores are, and what each broker is called: the one discovery every reader shares (the data
sources, the audit, every job's ``--store``).

A path names stores in one of four ways: a broker store root (the folder holding ``commitlog/``,
``consumequeue/``, ``index/``), one of those part folders, a single file of a part, or a folder whose sub-folders
are store roots (``<broker>/`` or ``<broker>/store/``).  It may be a local path or the URI of any file system the
seam resolves (store_format.fs).

A store's broker name, first found (the user's own ``NAME=PATH`` or a source's ``broker`` option comes before
both, one layer up):

1. the broker's: ``brokerName`` from its settings file when the dump carries one: ``config/broker.properties`` in
   the store root (where the broker persists its settings when started without ``-c``: ``BrokerPathConfigHelper``),
   or ``broker.conf`` / ``broker.properties`` beside the store root;
2. the folder's: in a folder of store roots, the entry's name; otherwise the store root's folder, or the one above
   it when that is ``store`` (``dump/broker-a/store`` is ``broker-a``), passing over folder names that name no
   broker (``input``, ``dump``, ``data``, ``copy``...: a dump copied to ``incident-42/input/store`` is
   ``incident-42``).
"""
from __future__ import annotations

import posixpath
from dataclasses import dataclass

import pyarrow.fs as pafs

from . import layout as L
from .errors import ErrorKind, StoreFormatError
from .fs import Location, resolve

# folder names that say where a copy was put, not which broker it is
GENERIC_FOLDERS = frozenset({"input", "inputs", "dump", "dumps", "data", "copy", "backup", "backups", "store",
                             "stores", "snapshot", "tmp", "temp", "rocketmq"})
SETTINGS_FILES = ("config/broker.properties", "../broker.conf", "../broker.properties")


@dataclass(frozen=True)
class FoundStore:
    """A store root a path names, with its broker name and how it was found."""

    root: Location
    name: str
    named_by: str  # "config" (the settings file's brokerName) or "folder"
    folder: str  # its name by the folders alone (rule 2), for when another store has the same brokerName
    in_folder: bool = False  # one of several store roots inside the folder given
    file: Location | None = None  # the path named this one file of the store (a segment, an index file...)


def is_store_root(loc: Location) -> bool:
    """A folder holding one of the parts that make a store (commitlog/, consumequeue/, index/)."""
    return any(i.type == pafs.FileType.Directory and i.base_name in L.ROOT_PARTS for i in loc.list())


def settings_files(root) -> list[Location]:
    """The broker's settings files carried with the dump (:data:`SETTINGS_FILES`), in that order."""
    base = resolve(root)
    found = []
    for rel in SETTINGS_FILES:
        loc = base
        for part in rel.split("/"):
            loc = loc.parent() if part == ".." else loc.child(part)
        if loc.is_file():
            found.append(loc)
    return found


def settings_file(root) -> Location | None:
    """The first of :func:`settings_files`: what ``--config`` would be given to predict the broker's own way."""
    found = settings_files(root)
    return found[0] if found else None


def config_broker_name(root) -> str | None:
    """``brokerName`` from the broker's settings file carried with the dump (:data:`SETTINGS_FILES`), if any."""
    from .brokerconf import read_properties

    for loc in settings_files(root):
        try:
            name = read_properties(loc.as_path()).get("brokerName", "").strip()
        except (StoreFormatError, OSError):
            continue  # an unreadable settings file names nothing; the folder does
        if name:
            return name
    return None


def folder_name(root) -> str:
    """The broker's name from the folders around its store root (rule 2 of the module docstring)."""
    path = resolve(root).path.rstrip("/") or "/"
    up = [path, posixpath.dirname(path), posixpath.dirname(posixpath.dirname(path))]
    if posixpath.basename(path) == "store":
        up = up[1:] + [posixpath.dirname(up[-1])]
    for c in up:
        name = posixpath.basename(c)
        if name and name.lower() not in GENERIC_FOLDERS:
            return name
    return posixpath.basename(up[0]) or posixpath.basename(path)


def _found(root: Location, folder: str, *, in_folder: bool = False, file: Location | None = None) -> FoundStore:
    configured = config_broker_name(root)
    return FoundStore(root, configured or folder, "config" if configured else "folder", folder, in_folder, file)


def root_of_file(loc: Location) -> Location | None:
    """The store root above a file of one of its parts (a segment, an index file, a unit file three levels down
    in ``consumequeue/<topic>/<queue>/``), None when no part folder is above it."""
    p = loc.parent()
    for _ in range(3):
        if p.name in L.STORE_PART_FOLDERS:
            return p.parent()
        p = p.parent()
    return None


def find_stores(path) -> list[FoundStore]:
    """The store roots ``path`` names (the module docstring), each with its broker name.  Raises a MISSING error
    naming the path when it holds no store, and refuses a folder of store roots in which two get the same name."""
    if not path:
        raise StoreFormatError(ErrorKind.INVALID_INPUT, "no path given")
    loc = resolve(path)
    info = loc.info()
    if info.type == pafs.FileType.NotFound:
        raise StoreFormatError(ErrorKind.MISSING, "no such file or directory", file=str(path))
    if info.type == pafs.FileType.File:
        root = root_of_file(loc) or loc.parent()
        return [_found(root, folder_name(root), file=loc)]
    if loc.name in L.STORE_PART_FOLDERS and not is_store_root(loc):
        return [_found(loc.parent(), folder_name(loc.parent()))]
    if is_store_root(loc):
        return [_found(loc, folder_name(loc))]
    roots = []
    for child in loc.list():
        if child.type != pafs.FileType.Directory:
            continue
        c = Location(loc.fs, child.path, loc.origin)
        if is_store_root(c):
            roots.append((child.base_name, c))
        elif c.child("store").is_dir() and is_store_root(c.child("store")):
            roots.append((child.base_name, c.child("store")))
    if not roots:
        raise StoreFormatError(ErrorKind.MISSING, "no RocketMQ store here: expected a store root (holding "
                               "commitlog/, consumequeue/ or index/), one of those folders, a file of one, or a "
                               "folder of broker store roots", file=str(path))
    if len(roots) == 1:
        return [_found(roots[0][1], folder_name(roots[0][1]))]
    found = [_found(root, name, in_folder=True) for name, root in roots]
    # brokers whose settings give the same brokerName (a master and its slave): their folders tell them apart
    names = [f.name for f in found]
    found = [FoundStore(f.root, f.folder, "folder", f.folder, True) if f.named_by == "config" and names.count(f.name) > 1
             else f for f in found]
    names = [f.name for f in found]
    if len(set(names)) != len(names):
        raise StoreFormatError(ErrorKind.INVALID_INPUT, f"two store roots give the same broker name: {names}",
                               file=str(path))
    return found


@dataclass(frozen=True)
class PartInput:
    """One broker's share of a read of one part: its part folder, or the single file the path named."""

    broker: str
    loc: Location
    single_file: bool
    root: Location | None = None  # the store root it belongs to


def part_inputs(path, part: str, broker: str | None = None) -> list[PartInput]:
    """The ``part`` folders (or the single file) of the stores ``path`` names (:func:`find_stores`), one per broker;
    ``broker`` names the one store (a source's ``broker`` option), else each store's own name."""
    stores = find_stores(path)
    if broker is not None and len(stores) > 1:
        raise StoreFormatError(ErrorKind.INVALID_INPUT, f"the broker option names one store but {len(stores)} store "
                               "roots were found; broker names come from their folders", file=str(path))
    return [PartInput(broker or s.name, s.file if s.file is not None else part_folder(s.root, part),
                      s.file is not None, s.root) for s in stores]


def part_folder(root: Location, part: str) -> Location:
    """The folder of ``part`` in a store root; a DLedger store's ``commitlog`` is its DLedger data folder
    (``dledger-<selfId>/data``, store_format.dledger: the CommitLog records inside DLedger entries)."""
    if part == "commitlog" and not root.child("commitlog").is_dir():
        from .dledger import find_home

        home = find_home(root)
        if home is not None:
            return home.child("data")
    return root.child(part)


__all__ = ["PartInput", "part_inputs", "GENERIC_FOLDERS", "SETTINGS_FILES", "FoundStore", "is_store_root", "config_broker_name", "folder_name",
           "root_of_file", "find_stores"]
