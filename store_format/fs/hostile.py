"""Hostile-input opens of local files: the one way a dump's file is opened on this machine.

A dump is evidence, and hostile: where the store has a regular file there may be a FIFO (whose ``open`` blocks
until a writer comes), a socket, a symbolic link to ``/dev/zero`` or to a tape device, a link loop, a dangling
link, or a file the reader may not open.  :func:`open_fd`

* looks before it opens (``stat``: a device is refused without being opened, since opening some devices has
  side effects),
* opens with ``O_RDONLY | O_NONBLOCK | O_CLOEXEC`` (and ``O_NOFOLLOW`` when a link must not be followed), so a
  FIFO swapped in after the look can neither block the open nor be read,
* checks what it opened (``fstat``): a regular file (or a folder, when one is asked for), else it closes it and
  raises :class:`UnreadableError`.

Every failure is an :class:`UnreadableError` (a ``StoreFormatError`` of kind ``UNREADABLE``) naming the path and
the reason in words (``a FIFO, not a regular file``, ``Permission denied``, ``a symbolic link loop``...), so a
command line prints ``error: <path>: <reason>`` and a scan turns it into a finding.  A file's holes
(:func:`data_extents`) let a reader pass over zeros the file system never stored (:func:`written_length`).
"""
from __future__ import annotations

import errno
import mmap
import os
import stat

import pyarrow.fs as pafs

from ..errors import ErrorKind, StoreFormatError
from .listings import accessible
from .zero_tails import note_zeros_from, zeros_from

_FLAGS = os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0)
_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
_DIRECTORY = getattr(os, "O_DIRECTORY", 0)


class UnreadableError(StoreFormatError):
    """A dump file that cannot be read: not a regular file (or folder), a link loop, no permission..."""

    def __init__(self, path, reason: str):
        super().__init__(ErrorKind.UNREADABLE, reason, file=os.fsdecode(path))

    @property
    def reason(self) -> str:
        return self.message

    def line(self) -> str:
        """``<path>: <reason>``, the form every command prints after ``error: ``."""
        return f"{self.file}: {self.message}"


def describe(mode: int) -> str:
    """What a ``st_mode`` is, in words: 'a regular file', 'a folder', 'a FIFO'..."""
    if stat.S_ISREG(mode):
        return "a regular file"
    if stat.S_ISDIR(mode):
        return "a folder"
    if stat.S_ISFIFO(mode):
        return "a FIFO"
    if stat.S_ISSOCK(mode):
        return "a socket"
    if stat.S_ISCHR(mode):
        return "a character device"
    if stat.S_ISBLK(mode):
        return "a block device"
    if stat.S_ISLNK(mode):
        return "a symbolic link"
    return "a special file"


def _os_reason(e: OSError) -> str:
    if e.errno == errno.ELOOP:
        return "a symbolic link loop (or a link where none may be followed)"
    if e.errno == errno.ENXIO:
        return "a socket or a device without a reader, not a regular file"
    if e.errno == errno.ENOENT:
        # a link whose target is missing is a dangling link; anything else is simply not there (never listed, or
        # removed after it was listed: a file that vanishes mid-run is not a link of any kind)
        return "no such file: a dangling symbolic link" if _is_link(e.filename) else "no such file"
    return e.strerror or str(e)


def _is_link(path) -> bool:
    try:
        return path is not None and os.path.islink(path)
    except (OSError, TypeError, ValueError):
        return False


def error_line(e: BaseException) -> str:
    """``<path>: <reason>`` for unreadable input and OS errors, else the error's own text (a command prints it
    after ``error: ``)."""
    if isinstance(e, UnreadableError):
        return e.line()
    if isinstance(e, OSError) and e.filename is not None:
        return f"{os.fsdecode(e.filename)}: {_os_reason(e)}"
    return str(e)


def open_fd(path, *, follow: bool = True, folder: bool = False) -> int:
    """A read-only descriptor of ``path``, which must be a regular file (or a folder with ``folder=True``).

    ``follow=False``: a symbolic link at ``path`` itself is refused (``O_NOFOLLOW``).  Raises
    :class:`UnreadableError`; the caller closes the descriptor."""
    return open_fd_stat(path, follow=follow, folder=folder)[0]


def open_fd_stat(path, *, follow: bool = True, folder: bool = False) -> tuple[int, os.stat_result]:
    """:func:`open_fd`, with the descriptor's own stat (which its check took: a reader wanting the length asks no
    second time)."""
    try:
        st = os.stat(path, follow_symlinks=follow)
    except OSError as e:
        raise UnreadableError(path, _os_reason(e)) from None
    if not _wanted(st.st_mode, folder):
        raise UnreadableError(path, _not_wanted(st.st_mode, folder))
    try:
        fd = os.open(path, _FLAGS | (0 if follow else _NOFOLLOW) | (_DIRECTORY if folder else 0))
    except OSError as e:
        raise UnreadableError(path, _os_reason(e)) from None
    try:
        st = os.fstat(fd)
        if not _wanted(st.st_mode, folder):  # swapped between the look and the open
            raise UnreadableError(path, _not_wanted(st.st_mode, folder))
    except BaseException:
        os.close(fd)
        raise
    return fd, st


def _wanted(mode: int, folder: bool) -> bool:
    return stat.S_ISDIR(mode) if folder else stat.S_ISREG(mode)


def _not_wanted(mode: int, folder: bool) -> str:
    return f"{describe(mode)}, not {'a folder' if folder else 'a regular file'}"



class _FileMap(mmap.mmap):
    """A read-only mmap that can ask its file where data starts (``SEEK_DATA``), so a search past the written data
    skips a sparse file's holes without touching them (a first touch of a hole page still costs a page fault)."""

    def data_from(self, pos: int) -> tuple[int, int]:
        """(start, end) of the first data extent at or after ``pos`` (the file's length when none), ended where the
        run found the file's zeros begin (fs/zero_tails.py); where the file system cannot tell, the rest of the
        file."""
        size = len(self)
        known = zeros_from(self.fd)
        size_or_known = size if known is None else min(size, known)
        if pos >= size_or_known:
            return size, size
        try:
            start = os.lseek(self.fd, pos, os.SEEK_DATA)
        except OSError as e:
            if e.errno == errno.ENXIO:  # only a hole from pos to the end
                return size, size
            return pos, size_or_known
        if start >= size_or_known:
            return size, size
        try:
            return start, min(os.lseek(self.fd, start, os.SEEK_HOLE), size_or_known)
        except OSError:
            return start, size_or_known

    def zeros_to_end_from(self, pos: int) -> None:
        """A search read zeros (or passed holes) from ``pos`` to the end: noted for the run's later searches."""
        note_zeros_from(self.fd, pos, len(self))


def data_end(fd: int, length: int) -> int:
    """Where the file's data ends: every byte from there is in a hole (zeros the file system never stored, as
    in a preallocated index file the broker mapped and wrote the start of).  Bisects on ``SEEK_DATA`` (about 30
    system calls); ``length`` where the system cannot tell."""
    seek_data = getattr(os, "SEEK_DATA", None)
    if seek_data is None or fd is None or length <= 0:  # no descriptor: a file read through pyarrow.fs
        return length

    def data_at_or_after(pos: int) -> bool:
        try:
            return os.lseek(fd, pos, seek_data) < length
        except OSError as e:
            if e.errno == errno.ENXIO:  # no data from pos to the end
                return False
            raise

    try:
        if not data_at_or_after(0):
            return 0
        lo, hi = 0, length  # data at or after lo; none at or after hi
        while hi - lo > 1:
            mid = (lo + hi) // 2
            if data_at_or_after(mid):
                lo = mid
            else:
                hi = mid
        return hi
    except OSError:
        return length


def data_extents(fd: int, length: int) -> list[tuple[int, int]] | None:
    """The file's data extents in ``[0, length)``, ``(start, end)`` in order (SEEK_DATA / SEEK_HOLE: every byte
    outside them is in a hole, zeros the file system never stored); None where the system cannot tell."""
    seek_data, seek_hole = getattr(os, "SEEK_DATA", None), getattr(os, "SEEK_HOLE", None)
    if seek_data is None or seek_hole is None or fd is None:
        return None
    out, pos = [], 0
    try:
        while pos < length:
            try:
                start = os.lseek(fd, pos, seek_data)
            except OSError as e:
                if e.errno == errno.ENXIO:  # only a hole from pos to the end
                    break
                raise
            if start >= length:
                break
            pos = min(os.lseek(fd, start, seek_hole), length)
            out.append((start, pos))
    except OSError:
        return None
    return out


def written_length(buf, fd: int | None = None, end: int | None = None) -> int:
    """Bytes of ``buf`` (its first ``end``) up to and including its last non-zero byte (0 when all are zeros),
    decided by the content alone: read backwards a block at a time, the file's holes (:func:`data_extents` of
    ``fd``: zeros never stored) passed over unread, so a preallocated file's unwritten tail costs nothing where it
    is a hole and one pass where its zeros were written out."""
    import numpy as np

    end = len(buf) if end is None else min(end, len(buf))
    # no descriptor: bytes read through pyarrow.fs, searched whole
    extents = search_extents(fd, end) if fd is not None else [(0, end)]
    arr = np.frombuffer(buf, np.uint8, end) if end else None
    try:
        found = last_nonzero(extents, lambda a, b: arr[a:b])[0]
    finally:
        del arr  # no view may outlive the caller's map
    if fd is not None and end == len(buf):  # the whole file was searched
        note_zeros_from(fd, found, end)
    return found


def search_extents(fd: int, length: int) -> list[tuple[int, int]]:
    """The parts of the file's first ``length`` bytes that may hold a non-zero byte, in order: its data extents
    (:func:`data_extents`), ended where the run found its zeros begin (fs/zero_tails.py); where the system cannot
    tell, all of them."""
    known = zeros_from(fd)
    if known is not None:
        length = min(length, known)
    extents = data_extents(fd, length)
    return [(0, length)] if extents is None else extents


def last_nonzero(extents: list[tuple[int, int]], block_at, step: int | None = None) -> tuple[int, int, object]:
    """Where the last non-zero byte of the ``extents`` ends (0 when none holds one), searched backwards ``step``
    bytes at a time (default :data:`_ZERO_SCAN_BLOCK`; ``block_at(start, stop)``: those bytes, a uint8 array or
    bytes); with the start of the block it was found in and that block (None when none holds one), which a reader
    keeps."""
    import numpy as np

    for lo, hi in reversed(extents):
        while hi > lo:
            start = max(lo, hi - (step or _ZERO_SCAN_BLOCK))
            block = block_at(start, hi)
            if isinstance(block, bytes):
                found = written_in(block)
                if found:
                    return start + found, start, block
            else:
                values = block if isinstance(block, np.ndarray) else np.frombuffer(block, np.uint8)
                if values.any():
                    return start + int(np.flatnonzero(values)[-1]) + 1, start, block
            hi = start
    return 0, 0, None


def written_in(block: bytes) -> int:
    """``block`` up to and including its last non-zero byte.  Searched from its end a :data:`_ZEROS` at a time,
    each piece told zeros by one ``memcmp`` (``bytes.startswith``: 70x ``rstrip``, which walks a byte at a time, and
    no array made); in the piece its data ends in, the least ``x`` from which the piece's rest is zeros found by
    halving (that rest's being zeros only grows with ``x``: a dozen memcmps, where a queue file's page of a few units
    and 4 KB of zeros cost ``rstrip`` three times as much), the last :data:`_STRIP_BYTES` stripped in C."""
    view, hi = memoryview(block), len(block)
    while hi > 0 and _ZEROS.startswith(view[max(0, hi - len(_ZEROS)):hi]):
        hi -= len(_ZEROS)
    if hi <= 0:
        return 0
    lo, zeros_at = max(0, hi - len(_ZEROS)), hi  # view[lo:hi] holds a non-zero byte, view[zeros_at:hi] none
    while zeros_at - lo > _STRIP_BYTES:
        mid = (lo + zeros_at) // 2
        if _ZEROS.startswith(view[mid:hi]):
            zeros_at = mid
        else:
            lo = mid
    return lo + len(bytes(view[lo:zeros_at]).rstrip(b"\0"))


_ZERO_SCAN_BLOCK = 1 << 18
_ZEROS = bytes(_ZERO_SCAN_BLOCK)
_STRIP_BYTES = 64


def _readable(info: pafs.FileInfo) -> bool:
    if info.type == pafs.FileType.File:
        return readable_path(info.path, folder=False)
    if info.type == pafs.FileType.Directory:
        return readable_path(info.path, folder=True)
    return False


def readable_path(path: str, folder: bool) -> bool:
    """Whether a reader may take a local file (read) or folder (list and enter): the listings' access rule."""
    return accessible(path, os.R_OK | os.X_OK if folder else os.R_OK)
