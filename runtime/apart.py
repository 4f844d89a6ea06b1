"""What an output must stay apart from: the inputs it is checked against before anything is claimed or written
(runtime/output.py prepares outputs, runtime/commit.py claims and commits them; both use this, and this uses neither).
"""
from __future__ import annotations

import os
import posixpath

from store_format import fs
from store_format.fs import resolve
from store_format.layout import ROOT_PARTS as PARTS


class OutputError(ValueError):
    """An output that must not be written (exists, or overlaps an input)."""


# ---------------------------------------------------------------------------------------------- the guard
#
# Evidence is untouchable by construction: every path is resolved the way the OS resolves it (links, ``..``) and
# compared by device and inode of every ancestor (store_format.fs.overlap), so no spelling -- a link to the store
# root, to a part folder or a segment, an output that is a link into the store, a bind mount -- gets an output
# into, over or around an input.  The inputs are checked before anything is prepared, and ``--overwrite`` deletes
# only a folder this suite wrote: every output carries MARKER, written when the output is prepared.

def is_remote(path: fs.Location) -> bool:
    return fs.local_path(fs.as_typed(path)) is None


def local_of(path: fs.Location) -> str:
    """A local path as it is, a ``file:`` URI as the path it names (store_format.fs.local_path: another host's is
    refused)."""
    return fs.local_path(fs.as_typed(path))


_HOW = {"is": "is", "inside": "lies inside", "contains": "contains"}


# the spellings the Locations were given (fs.as_typed), resolved by the kernel and compared by device and inode (a
# Location's path is lexically normalised: ``link/..`` would no longer be the parent of the link's target)
def check_apart(path: fs.Location, inputs, *, what: str = "output") -> None:
    """Refuse ``path`` when it is, lies inside or contains an input store, a file of one, or the link an input
    was given through; each input counts as its whole store root (:func:`store_format.fs.store_root_of`)."""
    path = fs.as_typed(path)  # the spelling it was given
    for given in inputs or ():
        given = fs.as_typed(given)
        if is_remote(given) or is_remote(path):
            if is_remote(given) and is_remote(path):
                _check_apart_by_name(path, given, what)
            continue
        local = local_of(given)
        if not os.path.lexists(local):
            continue  # nothing there to protect (the job's own input check refuses it)
        root = fs.store_root_of(local)
        for protected in dict.fromkeys((root, fs.real(local))):
            how = fs.overlap(local_of(path), protected)
            if how is not None:
                raise OutputError(f"{what} {path} overlaps the input store {given} (it {_HOW[how]} "
                                  f"{protected}): a job never writes into, over or around its input; choose a "
                                  "path outside the dump")
        link = local.rstrip("/") or local
        if os.path.islink(link):  # the link the input was given through: never deleted with the output
            how = fs.overlap(local_of(path), os.path.dirname(os.path.abspath(link)))
            if how in ("is", "contains"):
                raise OutputError(f"{what} {path} overlaps the input store {given} (it {_HOW[how]} the link "
                                  "that input was given through); choose a path outside it")


def _check_apart_by_name(path: str, given: str, what: str) -> None:
    """Remote file systems: no inodes to compare, so normalized names (the store root of a part or a file)."""
    out = resolve(path)
    loc = resolve(given)
    up = loc
    for _ in range(4):
        if up.name in PARTS:
            loc = up.parent()
            break
        up = up.parent()
    a = posixpath.normpath("/" + out.path.lstrip("/"))
    b = posixpath.normpath("/" + loc.path.lstrip("/"))
    if out.fs.type_name == loc.fs.type_name and (_within(a, b) or _within(b, a)):
        raise OutputError(f"{what} {path} overlaps the input store {given}: a job never writes into, over or "
                          "around its input; choose a path outside the dump")


def _within(inner: str, outer: str) -> bool:
    return inner == outer or inner.startswith(outer.rstrip("/") + "/")
