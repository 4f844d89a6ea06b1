"""A run's look at local folders, taken once for all its walks.  An audit walks a store's tree several times before
it reads a byte of it: the chain of custody (runtime/custody.py, a stat a file), the unreadable entries
(fs.maps.unreadable_entries, an access check each), the queue listing (store_format.rolled, both) and the recovery
prediction's load rules (store_format.recovery, a stat each).  A broker with 40,000 queues has 45,000 folders and
50,007 files: each walk cost 0.75-1.9 s, nearly all of it system calls.

Within :func:`listings_of_the_run`, :func:`scanned` scans a folder once for the run and gives every walk the same
``os.DirEntry`` objects, whose ``stat`` Python keeps once taken, and :func:`accessible` answers each access check
once.  Only what succeeded is kept (a folder that cannot be listed raises again, for each walk to report it its
way), up to :data:`RUN_LISTING_ENTRIES` (fewer for a run limited to fewer files, :func:`run_listings_for`), until the run lets them go (:meth:`RunListings.let_go`: the audit, before
its scan, whose peak they would add to).  What a run kept is a snapshot of its start: the custody check at its
commit looks again outside it (runtime/custody.py ``check_custody``), and names any file changed since."""
from __future__ import annotations

import os
from contextlib import contextmanager
from contextvars import ContextVar

#: the entries a run keeps (folders' entries and access answers together): a broker of 40,000 queues holds about
#: 300,000, some 300 bytes each with their stats (90 MB); past it, a folder is scanned again by each walk, as
#: outside a run
RUN_LISTING_ENTRIES = 1 << 19
#: what a run keeps for each file it may list of a folder (:func:`run_listings_for`): the file's entry, its
#: folder's entry in its parent's listing, their access answers and the folder's own key
ENTRIES_PER_FILE = 6


class RunListings:
    """What a run's walks share: each local folder's entries by name, each access check's answer."""

    def __init__(self, most: int | None = None):
        self.most = RUN_LISTING_ENTRIES if most is None else most
        self.folders: dict[str, tuple[os.DirEntry, ...]] = {}
        self.access: dict[tuple[str, int], bool] = {}
        self.kept = 0

    def let_go(self) -> None:
        """What was kept let go, and nothing kept from now on (a walk after it looks afresh)."""
        self.folders, self.access, self.most = {}, {}, 0


def run_listings_for(files: int) -> RunListings:
    """A run's listings for a run that lists at most ``files`` files of a folder (the audit's ``--max-files``): a run
    that limits its files for its memory's sake limits what its walks keep too (about 1.8 KB a file)."""
    return RunListings(min(RUN_LISTING_ENTRIES, ENTRIES_PER_FILE * files))


_RUN_LISTINGS: ContextVar[RunListings | None] = ContextVar("fs_run_listings", default=None)


@contextmanager
def listings_of_the_run(listings: RunListings | None):
    """Within it (in this thread, and in the threads given a copy of its context), :func:`scanned` and
    :func:`accessible` keep and give back what ``listings`` holds (None: a fresh look each time, as outside it)."""
    token = _RUN_LISTINGS.set(listings)
    try:
        yield
    finally:
        _RUN_LISTINGS.reset(token)


def let_go_of_listings() -> None:
    """The current run's kept listings let go (:meth:`RunListings.let_go`); nothing outside a run's."""
    run = _RUN_LISTINGS.get()
    if run is not None:
        run.let_go()


def scanned(folder) -> tuple[os.DirEntry, ...]:
    """``os.scandir(folder)``'s entries in name order (an ``OSError`` as ``scandir`` raises it): within
    :func:`listings_of_the_run`, the same entries for every walk of the run."""
    run = _RUN_LISTINGS.get()
    key = os.fspath(folder)
    if run is not None:
        kept = run.folders.get(key)
        if kept is not None:
            return kept
    with os.scandir(folder) as listing:
        found = tuple(sorted(listing, key=lambda e: e.name))
    if run is not None and run.kept + len(found) < run.most:
        run.folders[key] = found
        run.kept += len(found) + 1
    return found


def accessible(path: str, mode: int) -> bool:
    """``os.access(path, mode)``: within :func:`listings_of_the_run`, asked once for the run."""
    run = _RUN_LISTINGS.get()
    if run is None:
        return os.access(path, mode)
    key = (path, mode)
    answer = run.access.get(key)
    if answer is None:
        answer = os.access(path, mode)
        if run.kept < run.most:
            run.access[key] = answer
            run.kept += 1
    return answer
