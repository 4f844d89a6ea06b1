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
    """One file of a MappedFileQueue folder."""

    location: fs.Location
    base_offset: int  # the name: offset of the file's first byte in the queue
    length: int  # the file's actual length (a healthy store: the configured file size)

    @property
    def name(self) -> str:
        return self.location.name

    @property
    def path(self) -> str:
        return name_of(self.location)


def list_rolled_files(folder) -> list[RolledFile]:
    """The rolled files of ``folder`` in offset order; other names are ignored, and a missing folder has none.
    Entries no reader can open (a FIFO, a link loop...) are left out by ``Location.list``."""
    loc = location(folder)
    out = []
    for info in loc.list():
        if info.type == pafs.FileType.File and _ROLLED_NAME.fullmatch(info.base_name):
            out.append(RolledFile(loc.child(info.base_name), int(info.base_name), info.size))
    return sorted(out, key=lambda f: f.base_offset)


def infer_file_size(files: list[RolledFile]) -> int | None:
    """The configured file size as the names and lengths show it: the smallest spacing of the names, else the
    only file's length (None when nothing tells)."""
    bases = sorted({f.base_offset for f in files})
    gaps = [b - a for a, b in zip(bases, bases[1:]) if b > a]
    if gaps:
        return min(gaps)
    if len(files) == 1 and files[0].length > 0:
        return files[0].length
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
