"""Where a path really is: identity and overlap checks, decided on device and inode so that links, ``..``, bind
mounts and hard links cannot hide an output inside an input (runtime/output.py)."""
from __future__ import annotations

import os

from .. import layout as L




def real(path) -> str:
    """``path`` with every symbolic link and ``..`` resolved in the order the OS does (``link/..`` is the
    link target's parent, never a lexical shortening), absolute; the part that does not exist yet is kept."""
    return os.path.realpath(os.fspath(path))


def identity(path) -> tuple[int, int] | None:
    """(device, inode) of what ``path`` names (links followed); None when it does not exist."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    return st.st_dev, st.st_ino


def ancestry(path) -> list[tuple[int, int]]:
    """(device, inode) of ``path`` (when it exists) and of each folder above it, up to ``/``, after resolving it
    (:func:`real`).  Identities, not names: a bind mount or a second link to a folder has the same identity."""
    out, cur = [], real(path)
    while True:
        ident = identity(cur)
        if ident is not None:
            out.append(ident)
        parent = os.path.dirname(cur)
        if parent == cur:
            return out
        cur = parent


def overlap(output, protected) -> str | None:
    """How ``output`` overlaps ``protected`` (an existing file or folder): ``"is"``, ``"inside"`` (a folder of
    ``protected``, at any depth, or about to be created there), ``"contains"``; None when apart.  Decided on
    device and inode of every ancestor, so links, ``..``, bind mounts and hard links cannot hide it."""
    pid = identity(protected)
    if pid is None:
        return None
    oid = identity(output)
    if oid == pid:
        return "is"
    if pid in ancestry(output):
        return "inside"
    if oid is not None and oid in ancestry(protected):
        return "contains"
    return None


def store_root_of(path) -> str:
    """The store an input path belongs to, resolved: a store root or a folder of them as it is, a part folder's
    parent (``commitlog/``, ``consumequeue/``, ``index/``, ``config/``), a file's store root (a segment, an index
    file, ``consumequeue/<topic>/<queue>/<file>``, a config file), else a loose file itself."""
    p = real(path)
    if os.path.isdir(p):
        name = os.path.basename(p)
        own_parts = any(os.path.isdir(os.path.join(p, part)) for part in L.STORE_PART_FOLDERS)
        return os.path.dirname(p) if name in L.STORE_PART_FOLDERS and not own_parts else p
    up = os.path.dirname(p)
    for _ in range(3):
        if os.path.basename(up) in L.STORE_PART_FOLDERS:
            return os.path.dirname(up)
        up = os.path.dirname(up)
    return p
