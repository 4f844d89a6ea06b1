"""Files a 5.x reader opens, given as a local path or a :class:`store_format.fs.Location`, and the folders of
rolled files (``MappedFileQueue``: each file named by the 20-digit offset of its first byte).

Grammar (``MappedFileQueue.load``, ``UtilAll.offset2FileName``)::

    <folder>/<20 ASCII digits>   the file's first byte's offset in the queue; fixed, preallocated size

Everything here opens inputs read-only: a local file through a read-only map (``fs.map_range``), any
other file system through ranged reads; nothing is ever opened writable.  The 5.x readers (timer log, batch
consume queue, timer wheel, timer checkpoint) take what these functions take, so an audit task can hand them
a ``Location`` it received from its plan as well as a path.
"""
from __future__ import annotations

import os
import re
from dataclasses import dataclass

import pyarrow.fs as pafs

from . import fs

_ROLLED_NAME = re.compile(r"[0-9]{20}")  # fullmatch: ASCII digits only


def location(src) -> fs.Location:
    """A path (str, ``Path``, ``StorePath``), a URI or a :class:`~store_format.fs.Location` as a Location."""
    return src if isinstance(src, fs.Location) else fs.resolve(src)


def name_of(src) -> str:
    """The file's name as reports give it (the path for a local file, else the Location's path)."""
    loc = location(src)
    return loc.local_path or loc.path


def open_bytes(src, offset: int = 0, length: int | None = None):
    """A context manager whose ``.buf`` holds ``[offset, offset + length)`` of the file (to its end when
    ``length`` is None): a read-only map for a local file, a ranged read otherwise.  ``len()`` of it is the
    bytes it holds; ``written_length()`` where its last non-zero byte ends."""
    return fs.map_range(location(src), offset, length)


def read_range(src, offset: int, length: int) -> bytes:
    """``length`` bytes from ``offset`` (fewer at the end of the file)."""
    return location(src).read_range(offset, length)


def file_size(src) -> int:
    return location(src).size()


@dataclass(frozen=True)
class RolledFile:
    """One file of a MappedFileQueue folder, with what is wrong with the file itself (``problems``: (ErrorKind
    value, what is wrong) pairs, about its name or its length)."""

    location: fs.Location
    base_offset: int | None  # the name: offset of the file's first byte in the queue (None: not 20 digits)
    length: int  # the file's actual length (a healthy store: the configured file size)
    problems: tuple[tuple[str, str], ...] = ()

    @property
    def name(self) -> str:
        return self.location.name

    @property
    def path(self) -> str:
        return name_of(self.location)


def list_rolled_files(folder, file_size: int | None = None, *, every_file: bool = False) -> list[RolledFile]:
    """The rolled files of ``folder`` in offset order; a missing folder has none.  Entries no reader can open (a
    FIFO, a link loop...) are left out by ``Location.list``.

    ``every_file``: every regular file instead, by name, each with its problems as ``MappedFileQueue.load`` meets
    them: a name that is not 20 digits (``base_offset`` None: never loaded), a length other than the queue's file
    size (``file_size``, else :func:`infer_file_size` of the named files), an empty file.  The commitlog's listing
    (store_format.commitlog.list_segment_files) and the batch consume queues' are this one."""
    from .errors import ErrorKind

    loc = location(folder)
    infos = [i for i in loc.list() if i.type == pafs.FileType.File]
    if not every_file:
        return sorted((RolledFile(loc.child(i.base_name), int(i.base_name), i.size) for i in infos
                       if _ROLLED_NAME.fullmatch(i.base_name)), key=lambda f: f.base_offset)
    named = [(int(i.base_name), i.size) for i in infos if _ROLLED_NAME.fullmatch(i.base_name)]
    size = file_size or infer_file_size(named)
    out = []
    for i in infos:  # Location.list gives them by name
        child_loc = loc.child(i.base_name)
        if not _ROLLED_NAME.fullmatch(i.base_name):
            out.append(RolledFile(child_loc, None, i.size, ((ErrorKind.BAD_FILE_NAME.value, "bad_name"),)))
            continue
        problems = ()
        if size and i.size != size:
            problems = ((ErrorKind.BAD_GEOMETRY.value, "wrong_length"),)
        elif not i.size:
            problems = ((ErrorKind.BAD_GEOMETRY.value, "empty"),)
        out.append(RolledFile(child_loc, int(i.base_name), i.size, problems))
    return out


def infer_file_size(files) -> int | None:
    """The configured file size as the names and lengths show it (:class:`RolledFile` items or (base offset,
    length) pairs): the smallest spacing of the names, else the only file's length.  None when the files cannot tell: no
    file, or one empty file (an empty file is never a preallocated one, so its length says nothing)."""
    pairs = sorted((f.base_offset, f.length) if isinstance(f, RolledFile) else tuple(f) for f in files
                   if not isinstance(f, RolledFile) or f.base_offset is not None)
    gaps = [b - a for (a, _), (b, _) in zip(pairs, pairs[1:]) if b > a]
    if gaps:
        return min(gaps)
    if len(pairs) == 1 and pairs[0][1] > 0:
        return pairs[0][1]
    return None


def child(folder, *names: str):
    """``folder``/names as a Location."""
    loc = location(folder)
    for n in names:
        loc = loc.child(n)
    return loc


def exists(src) -> bool:
    return location(src).exists()


def is_dir(src) -> bool:
    return location(src).is_dir()


def local_fd_path(src) -> str | None:
    """The OS path of a local file (for ``SEEK_DATA`` hole searches), else None."""
    loc = location(src)
    return loc.local_path if loc.local_path and os.path.isfile(loc.local_path) else None
