"""The dumps a job reads: ``--store`` arguments resolved to broker store roots, each with its broker's name (one
:class:`StoreRef` per store, the one reference every job uses).

``--store`` takes ``PATH`` or ``NAME=PATH``; PATH is a store root (the folder holding ``commitlog/``,
``consumequeue/``, ``index/``), one of those part folders, a file of one, or a folder of several brokers' store
roots (``<broker>/`` or ``<broker>/store/``), a local path or the URI of any file system store_format.fs
resolves.  The name a store's rows carry in the ``broker`` column is the user's (``NAME=PATH``: PATH must then
hold one store), else the broker's own or its folder's, by store_format.stores' rules (the one discovery every
reader shares).

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
from dataclasses import dataclass, replace
from typing import NamedTuple

from runtime.output import OutputError
from store_format import fs
from store_format.brokerconf import StoreGeometry

_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")


class StoreArgumentError(OutputError):
    """A ``--store`` argument that names no usable store, or names that clash (the user's to fix: exit 2)."""


@dataclass(frozen=True)
class StoreRef:
    """One broker store a job reads."""

    name: str  # the broker column
    path: "fs.Location"  # the store root (spelled, as_typed, as a local absolute path or a URI below the one given)
    source: str  # the input path it was found under (a store root, a folder of store roots, or the file given)
    folder: str = ""  # its name by its folders alone (store_format.stores.folder_name, or its entry in a folder)
    from_folder: bool = False  # found in a folder of several store roots
    named_by: str = "folder"  # "user", "config" (the settings file's brokerName) or "folder"
    single_file: bool = False  # given as one segment file (``source``) of the store at ``path``
    geometry: StoreGeometry = StoreGeometry()  # what --config and the flags give (the rest is read from the files)

    @property
    def root(self):
        """The store root as the Path-based readers open it: a ``Path``, or a ``fs.StorePath`` of a URI."""
        return fs.as_path(self.path)

    def open(self):
        """The store (store_format.store.Store), with the geometry given."""
        from store_format.store import Store

        return Store(self.path, **self.geometry.store_kwargs())

    def commitlog_bytes(self) -> int | None:
        """The bytes of its commitlog segments (what a scan reads), for progress; None for a remote store."""
        if self.path.local_path is None:
            return None
        return os.path.getsize(self.source) if self.single_file else commitlog_bytes(self.path)

    def read_path(self) -> str:
        """What a data source loads for it (Spark's reader takes a string): the segment file given, else the store
        root (fs.uri_of)."""
        return self.source if self.single_file else fs.uri_of(self.path)


def commitlog_bytes(root) -> int:
    """The bytes of a store's commitlog segments (``root`` a local path, a URI or what fs.as_path gives: one
    listing through the fs seam, links followed)."""
    return sum(e.size for e in fs.entries(fs.as_path(root) / "commitlog") if e.is_file)


class StoreArgument(NamedTuple):
    """One ``--store`` value, parsed once (:func:`store_arguments`): the broker name it gives (``NAME=PATH``) and
    the path or URI, exactly as given otherwise (links and ``..`` are the kernel's to resolve, not ours)."""

    name: str | None
    path: str


def parse_store_argument(arg: str) -> StoreArgument:
    """``NAME=PATH`` (PATH a local path or any URI: ``b1=s3://bucket/dump``) -> (NAME, PATH); a plain path (one
    that exists as given, or whose part before ``=`` is no name) -> (None, arg).  The one place that reads a
    ``--store`` value: every job, the output guard and the command line's path handling go through it."""
    name, sep, path = arg.partition("=")
    if sep and _NAME.fullmatch(name) and path and not os.path.exists(arg):
        return StoreArgument(name, path)
    return StoreArgument(None, arg)


def store_arguments(args: list[str]) -> list[StoreArgument]:
    return [parse_store_argument(a) for a in args or ()]


def split_name(arg: str) -> tuple[str | None, str]:
    """``NAME=PATH`` -> (NAME, PATH) (:func:`parse_store_argument` as a pair)."""
    parsed = parse_store_argument(arg)
    return parsed.name, parsed.path


def protected_paths(args: list[str], stores: list["StoreRef"] = ()) -> list[str]:
    """What an output must stay apart from (runtime/output.py ``check_apart``): every ``--store`` path as given
    (``NAME=`` taken off: a ``b1=vault://...`` argument is the URI ``vault://...``) and every store root it
    resolved to, as spelled (Location.as_typed)."""
    return list(dict.fromkeys([a.path for a in store_arguments(args)] + [s.path.as_typed for s in stores]))


def resolve_stores(args: list[str], *, files: bool = False, geometry: StoreGeometry | None = None
                   ) -> list[StoreRef]:
    """Store roots named by ``--store`` arguments, with their broker names (module docstring).  ``files``: a
    segment file stands for its store (the point lookups, extract, replay, compare).  ``geometry``: what --config
    and the flags give, for every store.  A PATH may be a URI of any file system store_format.fs resolves
    (``hdfs://``, ``s3://``, a registered scheme): its store roots are then URIs too, each resolving to the same
    file system.  Raises :class:`StoreArgumentError` (for no argument at all too), the store layer's MISSING error
    for a path that holds no store, and an UnreadableError naming a folder that cannot be listed (a loop, no
    permission: never skipped)."""
    from store_format.stores import find_stores

    if not args:
        raise StoreArgumentError("no --store given")
    found: list[StoreRef] = []
    given_by: dict[str, str] = {}  # a store root, resolved (links followed) -> the argument that named it
    for arg, (given, path) in zip(args, store_arguments(args)):
        if not fs.is_uri(path) and os.path.isdir(path):
            fs.check_folder(path)
        local = fs.local_path(path)  # a file:// URI as its local path (another host's is refused)
        uri = local is None
        local = path if uri else os.path.abspath(local)
        stores = find_stores(local)
        if given and len(stores) > 1:
            raise StoreArgumentError(f"{arg}: NAME=PATH names one store, but {path} holds {len(stores)}; name each "
                                     "store root on its own")
        for st in stores:
            if st.file is not None:
                _check_single_file(path, st.file, st.root, files)
            root_path = st.root.uri() if uri else os.path.abspath(st.root.path)
            same = root_path if uri else os.path.realpath(root_path)
            if same in given_by:
                # one broker audited twice (or compared with itself) is never what was meant: say so
                raise StoreArgumentError(f"--store {given_by[same]} and --store {arg} are the same store "
                                         f"({root_path}): give each store once")
            given_by[same] = arg
            name, by = (given, "user") if given else (st.name, st.named_by)
            # the root, spelled as before: a local absolute path, or a URI below the one given (its query kept)
            root = replace(st.root, path=st.root.path if uri else root_path, given=root_path)
            found.append(StoreRef(name, root, local, folder=st.folder, from_folder=st.in_folder, named_by=by,
                                  single_file=st.file is not None, geometry=geometry or StoreGeometry()))
    return _distinct(found)


def _check_single_file(path: str, loc, root, files: bool) -> None:
    """A file given as --store: a segment file stands for its store where ``files`` allows; any other file is
    named for what it is, with what was expected instead."""
    from store_format.commitlog import SEGMENT_NAME

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
                                 f"root, {root.path}")


def _distinct(stores: list[StoreRef]) -> list[StoreRef]:
    names = [s.name for s in stores]
    # the same brokerName twice (a master and its slave): their folders tell them apart
    stores = [replace(s, name=s.folder, named_by="folder")
              if s.named_by == "config" and names.count(s.name) > 1 else s for s in stores]
    out: list[StoreRef] = []
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
