"""The chain of custody over a job's inputs: what each input file was when the run started, and whether it still is
when the run commits.  Every job that reads a dump (or a table) watches it (:func:`watch`): the files are
fingerprinted once the inputs are resolved, and listed and fingerprinted again as a gate of the run's commit
(runtime/commit.py ``JobRun.gate``), after everything else and before anything is made visible, so a run whose
inputs changed under it (a broker still writing, a copy still under way, anything written into the dump by
mistake) commits nothing and ends with exit 2, naming each file.

A file's fingerprint is its size, its mtime, its inode and its ctime (and its sha256 with the audit's
``--sha256``).  The inode and the ctime cost nothing and see what size and mtime miss: a file replaced by another
of the same size (a new inode), and a change whose mtime was set back afterwards (``touch -d``, ``os.utime``: the
kernel sets the ctime to now, and no one can set it back).  The audit's summary.json records size, mtime and
sha256 ("inputs"): inode and ctime identify a file on this machine only, so they are kept for the check and not
published.

The check lists the inputs again, through the store layer's listing (``store_format.fs.stat_files_under``, local
paths and other file systems alike), so that a file that appeared during the run (a broker rolling to a new
segment) is seen too, and names every difference for what it is: "added during the audit", "removed during the extract",
"replaced during ..." (the same name, another file), "changed during ...".  A file that vanished is never "a
dangling symbolic link" here.
"""
from __future__ import annotations

import hashlib
import heapq

from runtime.output import OutputError
from store_format import fs

SHOWN = 5  # differences named in the error line (the rest are counted)


class CustodyError(OutputError):
    """The inputs changed while the job ran: the chain of custody is broken (exit 2)."""

    def __init__(self, changes: list[str], during: str = "the audit"):
        self.changes = changes
        more = f"; and {len(changes) - SHOWN} more" if len(changes) > SHOWN else ""
        super().__init__(f"input files changed during {during} (chain of custody broken): "
                         + "; ".join(changes[:SHOWN]) + more)


class Fingerprint(dict):
    """path -> {size, mtime_ns[, sha256]} (what summary.json's "inputs" say), and in :attr:`identity` path ->
    (inode, ctime_ns): what the custody check compares besides."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.identity: dict[str, tuple] = {}


def input_files(roots) -> list:
    """Every file below the inputs (``StoreRef``s, or paths and URIs of a folder or a file): ``Path``s, or
    ``fs.StorePath``s of an input on another file system."""
    paths = [getattr(r, "path", r) for r in roots]
    return sorted((p for root in paths for p in fs.files_under(root)), key=lambda p: p.parts)  # Path's order


def input_stats(roots):
    """(path, its stat) of every file :func:`input_files` lists, in its order, as the walk goes (the stats are not
    all held: a store of a million files), each stat the listing's own (``fs.stat_files_under``: one walk, one stat
    a file; a local file's path its text); a file gone by the time it is looked at is left out."""
    walks = [fs.stat_files_under(getattr(r, "path", r)) for r in roots]  # each in Path order already
    return walks[0] if len(walks) == 1 else heapq.merge(*walks, key=lambda ps: _parts(ps[0]))


def _parts(path) -> tuple:
    """``Path(path).parts`` of a local path's text (as ``Path`` spells it), a ``StorePath``'s own parts."""
    if not isinstance(path, str):
        return path.parts
    return ("/", *path[1:].split("/")) if path.startswith("/") else tuple(path.split("/"))


def fingerprint(listed, sha256: bool) -> Fingerprint:
    """Each file's size, mtime (and sha256), with its inode and ctime in ``identity``, of ``listed``: (path, its
    stat) pairs (:func:`input_stats`: a file gone by the time it was looked at is not there, and the custody check
    then names it removed)."""
    out = Fingerprint()
    for p, st in listed:
        entry = {"size": st.st_size, "mtime_ns": st.st_mtime_ns}
        if sha256:
            h = hashlib.sha256()
            with fs.open_file(p) as f:  # the read-only way in (no FIFO, device or link loop is read)
                for chunk in iter(lambda: f.read(1 << 20), b""):
                    h.update(chunk)
            entry["sha256"] = h.hexdigest()
        key = p if isinstance(p, str) else str(p)
        out[key] = entry
        out.identity[key] = (getattr(st, "st_ino", None), getattr(st, "st_ctime_ns", None))
    return out


def changes(before: Fingerprint, after: Fingerprint, during: str = "the audit") -> list[str]:
    """Every difference between two fingerprints, in words, by path."""
    said = []
    for path in sorted(set(before) | set(after)):
        if path not in before:
            said.append(f"{path}: added during {during}")
        elif path not in after:
            said.append(f"{path}: removed during {during}")
        else:
            was, now = before.identity.get(path, (None, None)), after.identity.get(path, (None, None))
            if was[0] is not None and now[0] is not None and was[0] != now[0]:
                said.append(f"{path}: replaced during {during} (another file now: inode {was[0]} -> {now[0]})")
            elif before[path] != after[path] or was != now:
                said.append(f"{path}: changed during {during} ({_what_changed(before[path], after[path], was, now)})")
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


def check_custody(before: Fingerprint, roots, sha256: bool, during: str = "the audit") -> None:
    """The inputs listed again and fingerprinted: :class:`CustodyError` naming every file added, removed,
    replaced or changed since ``before``: looked at afresh, never through the run's kept listings (a snapshot of
    its start, store_format.fs.listings)."""
    with fs.listings_of_the_run(None):
        after = fingerprint(input_stats(roots), sha256)
    found = changes(before, after, during)
    if found:
        raise CustodyError(found, during)


class Custody:
    """A run's inputs under watch: fingerprinted when made, as they are listed (one walk, a stat a file), checked
    again by :meth:`check`."""

    def __init__(self, roots, *, sha256: bool = False, during: str = "the run"):
        self.roots, self.sha256, self.during = list(roots), sha256, during
        # the listing is not kept (a store of a million files: ~0.5 GB of paths); the check lists the inputs again
        self.before = fingerprint(input_stats(self.roots), sha256)

    def check(self) -> None:
        check_custody(self.before, self.roots, self.sha256, self.during)


def watch(run, roots, *, sha256: bool = False) -> Custody:
    """``roots`` (what the job reads) fingerprinted now and checked again before ``run`` (runtime/commit.py's
    ``JobRun``) commits anything: a gate of its commit.  Every job with inputs calls it once it has resolved them,
    before it reads them."""
    custody = Custody(roots, sha256=sha256, during=f"the {run.identity.job}")
    run.gate("the chain of custody", custody.check)
    return custody
