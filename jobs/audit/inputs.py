"""The dumps an audit reads (store roots and their broker names: jobs/stores.py), and the chain of custody over
their files: what each file was when the audit started, and whether it still is at the end.

A file's fingerprint is its size, its mtime, its inode and its ctime (and its sha256 with ``--sha256``).  The
inode and the ctime cost nothing and see what size and mtime miss: a file replaced by another of the same size
(a new inode), and a change whose mtime was set back afterwards (``touch -d``, ``os.utime``: the kernel sets the
ctime to now, and no one can set it back).  summary.json records size, mtime and sha256 ("inputs"): inode and
ctime identify a file on this machine only, so they are kept for the check and not published.

:func:`check_custody` lists the stores' folders again at the end, through the store layer's listing
(``store_format.fs.entries``, local paths and other file systems alike), so that a file that appeared during the
run (a broker rolling to a new segment) is seen too, and names every difference for what it is: "added during
the audit", "removed during the audit", "replaced during the audit" (the same name, another file), "changed
during the audit".  A file that vanished is never "a dangling symbolic link" here.
"""
from __future__ import annotations

import hashlib
import os

from jobs.output import OutputError
from jobs.stores import StoreRef
from store_format import fs

SHOWN = 5  # differences named in the error line (the rest are counted)


class CustodyError(OutputError):
    """The inputs changed while the audit ran: the chain of custody is broken (exit 2)."""

    def __init__(self, changes: list[str]):
        self.changes = changes
        more = f"; and {len(changes) - SHOWN} more" if len(changes) > SHOWN else ""
        super().__init__("input files changed during the audit (chain of custody broken): "
                         + "; ".join(changes[:SHOWN]) + more)


class Fingerprint(dict):
    """path -> {size, mtime_ns[, sha256]} (what summary.json's "inputs" say), and in :attr:`identity` path ->
    (inode, ctime_ns): what the custody check compares besides."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.identity: dict[str, tuple] = {}


def input_files(stores: list[StoreRef]) -> list:
    """Every file of the stores: ``Path``s, or ``fs.StorePath``s of a store on another file system."""
    return sorted((p for s in stores for p in _files_under(s.path)), key=lambda p: p.parts)  # Path's order


def _files_under(root: str):
    """The regular files below ``root``, listed by the store layer (``fs.entries``: links to files followed, a
    link to a folder not walked into, so no loop), local or on another file system."""
    pending = [fs.as_path(root)]
    while pending:
        folder = pending.pop()
        try:
            found = fs.entries(folder)
        except fs.UnreadableError:  # a folder that cannot be listed: the audit's own checks report it
            continue
        for e in found:
            if e.is_file:
                yield e.path
            elif e.is_folder and not (isinstance(e.path, os.PathLike) and os.path.islink(e.path)):
                pending.append(e.path)


def fingerprint(files: list, sha256: bool) -> Fingerprint:
    """Each file's size, mtime (and sha256), with its inode and ctime in ``identity``; a file gone by the time
    it is looked at is left out (the custody check then names it removed)."""
    out = Fingerprint()
    for p in files:
        try:
            st = p.stat()
        except FileNotFoundError:
            continue
        entry = {"size": st.st_size, "mtime_ns": st.st_mtime_ns}
        if sha256:
            h = hashlib.sha256()
            with fs.open_file(p) as f:  # the read-only way in (no FIFO, device or link loop is read)
                for chunk in iter(lambda: f.read(1 << 20), b""):
                    h.update(chunk)
            entry["sha256"] = h.hexdigest()
        out[str(p)] = entry
        out.identity[str(p)] = (getattr(st, "st_ino", None), getattr(st, "st_ctime_ns", None))
    return out


def changes(before: Fingerprint, after: Fingerprint) -> list[str]:
    """Every difference between two fingerprints, in words, by path."""
    said = []
    for path in sorted(set(before) | set(after)):
        if path not in before:
            said.append(f"{path}: added during the audit")
        elif path not in after:
            said.append(f"{path}: removed during the audit")
        else:
            was, now = before.identity.get(path, (None, None)), after.identity.get(path, (None, None))
            if was[0] is not None and now[0] is not None and was[0] != now[0]:
                said.append(f"{path}: replaced during the audit (another file now: inode {was[0]} -> {now[0]})")
            elif before[path] != after[path] or was != now:
                said.append(f"{path}: changed during the audit ({_what_changed(before[path], after[path], was, now)})")
    return said


def _what_changed(b: dict, a: dict, was: tuple, now: tuple) -> str:
    what = []
    if b.get("size") != a.get("size"):
        what.append(f"size {b.get('size')} -> {a.get('size')}")
    if b.get("sha256") != a.get("sha256"):
        what.append("sha256")
    if b.get("mtime_ns") != a.get("mtime_ns"):
        what.append("mtime")
    if was[1] != now[1]:
        what.append("ctime" + ("" if what else ": its metadata or bytes were changed, and its mtime set back"))
    return ", ".join(what)


def check_custody(before: Fingerprint, stores: list[StoreRef], sha256: bool) -> None:
    """The stores listed again and fingerprinted: :class:`CustodyError` naming every file added, removed,
    replaced or changed since ``before``."""
    after = fingerprint(input_files(stores), sha256)
    found = changes(before, after)
    if found:
        raise CustodyError(found)
