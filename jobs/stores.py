"""The dumps a job reads: ``--store`` arguments resolved to broker store roots, each with its broker's name.

``--store`` takes ``PATH`` or ``NAME=PATH``; PATH is a store root (the folder holding ``commitlog/``,
``consumequeue/``, ``index/``), one of those part folders, a file of one, or a folder of several brokers' store
roots (``<broker>/`` or ``<broker>/store/``).  The name a store's rows carry in the ``broker`` column is, first
found:

1. the user's: ``--store NAME=PATH`` (PATH must then hold one store);
2. the broker's: ``brokerName`` from its settings file when the dump carries one: ``config/broker.properties``
   in the store root (where the broker persists its settings when it was started without ``-c``:
   ``BrokerPathConfigHelper``), or ``broker.conf`` / ``broker.properties`` beside the store root;
3. the folder's: the store root's folder, or the one above it when that is ``store`` (``dump/broker-a/store`` is
   ``broker-a``), passing over folder names that name no broker (``input``, ``dump``, ``data``, ``copy``...: a
   dump copied to ``incident-42/input/store`` is ``incident-42``).

Names must differ.  Brokers whose settings give the same ``brokerName`` (a master and its slave) are named after
their folders instead; a folder name given twice gets ``-2``, ``-3`` when it is a store root of its own, and is
refused inside one folder of store roots (name one of them with ``NAME=PATH``).

Each store is given once: the same store root reached by two arguments (after following links: ``a=X b=X``,
``X X/``, or a folder of store roots that holds a store also given on its own) is refused, naming both
arguments, before any job starts Spark.
"""
from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path

from jobs.output import OutputError

# folder names that say where a copy was put, not which broker it is
GENERIC_FOLDERS = frozenset({"input", "inputs", "dump", "dumps", "data", "copy", "backup", "backups", "store",
                             "stores", "snapshot", "tmp", "temp", "rocketmq"})
SETTINGS_FILES = ("config/broker.properties", "../broker.conf", "../broker.properties")
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")


class StoreArgumentError(OutputError):
    """A ``--store`` argument that names no usable store, or names that clash (the user's to fix: exit 2)."""


@dataclass(frozen=True)
class StoreInput:
    name: str  # the broker column
    path: str  # local store root
    source: str  # the input path it was found under (a store root, or a folder of store roots)
    from_folder: bool = False  # found in a folder of several store roots
    named_by: str = "folder"  # "user", "config" (the settings file's brokerName) or "folder"
    single_file: bool = False  # given as one segment file (``source``) of the store at ``path``

    def folder_name(self) -> str:
        """Its name by rule 3 (in a folder of store roots: that folder's entry, as the data sources name it)."""
        from datasources.storepaths import broker_name, resolve

        return broker_name(resolve(self.path)) if self.from_folder else folder_name(self.path)

    def commitlog_bytes(self) -> int | None:
        """The bytes of its commitlog segments (what a scan reads), for progress; None for a remote store."""
        if "://" in self.path:
            return None
        return os.path.getsize(self.source) if self.single_file else commitlog_bytes(self.path)

    def read_path(self) -> str:
        """What a data source reads for it: the segment file given, else the store root."""
        return self.source if self.single_file else self.path


def commitlog_bytes(root: str | os.PathLike) -> int:
    """The bytes of a store's commitlog segments."""
    from store_format import fs

    where = fs.as_path(root)
    if isinstance(where, fs.StorePath):  # another file system: its listing's sizes
        return sum(e.size for e in fs.entries(where / "commitlog") if e.is_file)
    d = os.path.join(root, "commitlog")
    return sum(e.stat().st_size for e in os.scandir(d) if e.is_file()) if os.path.isdir(d) else 0


def split_name(arg: str) -> tuple[str | None, str]:
    """``NAME=PATH`` -> (NAME, PATH); a plain path (one that exists as given, or whose part before ``=`` is no
    name) -> (None, arg)."""
    name, sep, path = arg.partition("=")
    if sep and _NAME.fullmatch(name) and path and not os.path.exists(arg):
        return name, path
    return None, arg


def config_broker_name(root: str | os.PathLike) -> str | None:
    """``brokerName`` from the broker's settings file carried with the dump (:data:`SETTINGS_FILES`), if any."""
    from store_format import fs
    from store_format.brokerconf import read_properties
    from store_format.errors import StoreFormatError

    base = fs.as_path(root)  # a Path, or a fs.StorePath of a store on another file system
    for rel in SETTINGS_FILES:
        path = base
        for part in rel.split("/"):
            path = path.parent if part == ".." else path / part
        if path.is_file():
            try:
                name = read_properties(path).get("brokerName", "").strip()
            except (StoreFormatError, OSError):
                continue  # an unreadable settings file names nothing; the folder does
            if name:
                return name
    return None


def folder_name(root: str | os.PathLike) -> str:
    """The broker's name from the folders around its store root (rule 3 above)."""
    p = Path(os.path.abspath(root))
    candidates = [p.parent, p.parent.parent, p.parent.parent.parent] if p.name == "store" else \
        [p, p.parent, p.parent.parent]
    for c in candidates:
        if c.name and c.name.lower() not in GENERIC_FOLDERS:
            return c.name
    return candidates[0].name or p.name


def resolve_stores(args: list[str], *, files: bool = False) -> list[StoreInput]:
    """Store roots named by ``--store`` arguments, with their broker names (module docstring).  ``files``: a
    segment file stands for its store (the point lookups, extract, replay, compare).  A PATH may be a URI of any
    file system store_format.fs resolves (``hdfs://``, ``s3://``, a registered scheme): its store roots are
    then URIs too, each resolving to the same file system.  Raises :class:`StoreArgumentError`, and the data
    sources' MISSING error for a path that holds no store."""
    from datasources.storepaths import find_inputs
    from store_format import fs

    found: list[StoreInput] = []
    given_by: dict[str, str] = {}  # a store root, resolved (links followed) -> the argument that named it
    for arg in args:
        given, path = split_name(arg)
        uri = fs.is_uri(path) and not path.startswith("file://")
        local = path if uri else os.path.abspath(path[len("file://"):] if path.startswith("file://") else path)
        base = fs.resolve(path) if uri else None
        inputs = find_inputs(local, "commitlog")
        if given and len(inputs) > 1:
            raise StoreArgumentError(f"{arg}: NAME=PATH names one store, but {path} holds {len(inputs)}; name each "
                                     "store root on its own")
        for inp in inputs:
            if inp.single_file:
                _check_single_file(path, inp, files)
            root = inp.loc.parent().parent() if inp.single_file else inp.loc.parent()
            root_path = fs.uri_below(path, base, root) if uri else os.path.abspath(root.path)
            same = root_path if uri else os.path.realpath(root_path)
            if same in given_by:
                # one broker audited twice (or compared with itself) is never what was meant: say so
                raise StoreArgumentError(f"--store {given_by[same]} and --store {arg} are the same store "
                                         f"({root_path}): give each store once")
            given_by[same] = arg
            configured = None if given else config_broker_name(root_path)
            name, by = (given, "user") if given else (configured, "config") if configured else \
                (inp.broker if len(inputs) > 1 else folder_name(root.path), "folder")
            found.append(StoreInput(name, root_path, local, from_folder=len(inputs) > 1, named_by=by,
                                    single_file=inp.single_file))
    return _distinct(found)


def _check_single_file(path: str, inp, files: bool) -> None:
    """A file given as --store: a segment file stands for its store where ``files`` allows; any other file is
    named for what it is, with what was expected instead."""
    from store_format.commitlog import SEGMENT_NAME

    loc = inp.loc
    # a segment by its place (commitlog/, also through a link) or by its name (a copy or a hard link elsewhere)
    real = os.path.realpath(loc.path) if loc.local_path is not None else loc.path
    segment = loc.parent().name == "commitlog" or os.path.basename(os.path.dirname(real)) == "commitlog" \
        or SEGMENT_NAME.fullmatch(loc.name) is not None
    if not segment:
        raise StoreArgumentError(f"{path}: a file that is not a commitlog segment; expected a store root (the "
                                 "folder holding commitlog/, consumequeue/, index/), a folder of store roots"
                                 + (", or one segment file (commitlog/<20-digit offset>)" if files else ""))
    if not files:
        raise StoreArgumentError(f"{path}: a single segment file; this job reads whole stores: give its store "
                                 f"root, {loc.parent().parent().path}")


def _distinct(stores: list[StoreInput]) -> list[StoreInput]:
    from dataclasses import replace

    names = [s.name for s in stores]
    # the same brokerName twice (a master and its slave): their folders tell them apart
    stores = [replace(s, name=s.folder_name(), named_by="folder")
              if s.named_by == "config" and names.count(s.name) > 1 else s for s in stores]
    out: list[StoreInput] = []
    for s in stores:
        taken = {o.name for o in out}
        if s.name in taken:
            if s.named_by == "user":
                raise StoreArgumentError(f"two stores are named {s.name!r}: give each its own NAME=PATH")
            if s.from_folder:
                raise StoreArgumentError(f"{s.source}: a store named {s.name!r} is given twice; pass one of them as "
                                         "NAME=PATH so it can be renamed")
            s = replace(s, name=next(f"{s.name}-{i}" for i in range(2, len(out) + 3) if f"{s.name}-{i}" not in taken))
        out.append(s)
    return out

