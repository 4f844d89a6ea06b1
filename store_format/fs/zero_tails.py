"""A run's zero tails: where a local file holds only zeros to its end, found once in a run and told to its later
readers in this process.

A preallocated file copied without its holes (a broker's newest segment: most of a gigabyte of zeros; a consume
queue: 6 MB of which a queue writes a part) had its zeros read three times by an incremental audit: the state's look
for where its written bytes end, the survey's walk and the scan's walk searching past its last frame.  The first
search notes where the zeros begin (:func:`note_zeros_from`); a later search of the same file in the same run stops
there (:func:`zeros_from`, asked by ``hostile.search_extents`` and ``hostile._FileMap.data_from``).

Kept for one run only, as the run's listings (fs/listings.py) and small reads (store_format.consumequeue
``RunReads``) are: a file changed during the run fails the run's chain of custody (runtime/custody.py) whatever was
read of it.  A file is known by its device, inode and length (one ``fstat``), so a file replaced or grown during the
run is another file here.  Local files only; outside a run nothing is kept.
"""
from __future__ import annotations

import os
from contextlib import contextmanager
from contextvars import ContextVar

#: a tail shorter than this is not noted: reading it again costs less than keeping it
NOTED_TAIL = 256 << 10
#: at most this many files noted in a run (a key and an offset: about 200 bytes each)
NOTED_FILES = 1 << 16


class ZeroTails:
    """Where each noted file's bytes are zeros to its end."""

    def __init__(self, most: int = NOTED_FILES):
        self.most = most
        self.zeros_at: dict[tuple[int, int, int], int] = {}

    def get(self, st: os.stat_result) -> int | None:
        return self.zeros_at.get((st.st_dev, st.st_ino, st.st_size))

    def note(self, st: os.stat_result, at: int) -> None:
        if st.st_size - at < NOTED_TAIL:
            return
        key = (st.st_dev, st.st_ino, st.st_size)
        known = self.zeros_at.get(key)
        if known is None and len(self.zeros_at) >= self.most:
            return
        if known is None or at < known:  # every byte from either on is zero: the lower says more
            self.zeros_at[key] = at


_RUN_TAILS: ContextVar[ZeroTails | None] = ContextVar("fs_run_zero_tails", default=None)


@contextmanager
def zero_tails_of_the_run(tails: ZeroTails | None):
    """Within it (in this thread, and in the threads given a copy of its context), searches for a local file's last
    non-zero byte note and use ``tails`` (None: each search reads afresh, as outside it)."""
    token = _RUN_TAILS.set(tails)
    try:
        yield
    finally:
        _RUN_TAILS.reset(token)


def zeros_from(fd: int) -> int | None:
    """Where the file open at ``fd`` is known, in this run, to hold only zeros to its end; None when not known."""
    tails = _RUN_TAILS.get()
    return None if tails is None else tails.get(os.fstat(fd))


def note_zeros_from(fd: int, at: int, length: int) -> None:
    """Every byte of the file open at ``fd`` from ``at`` to ``length`` is zero (a search read them, or they are
    holes): noted when ``length`` is the file's length (a file grown since its search began is not)."""
    tails = _RUN_TAILS.get()
    if tails is not None:
        st = os.fstat(fd)
        if st.st_size == length:
            tails.note(st, at)
