"""Files a 5.x reader opens, given as a local path or a :class:`store_format.fs.Location`, and the folders of
rolled files (``MappedFileQueue``: each file named by the 20-digit offset of its first byte): the one listing of
``commitlog/`` and ``timerlog/`` (:func:`list_folder`, every file with what is wrong with it) and the broker's view
of it (:func:`list_rolled_files`).

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

import pyarrow.fs as pafs
from dataclasses import dataclass, field
from typing import NamedTuple

from . import fs
from . import layout as L
from .errors import ErrorKind
from .fs.hostile import readable_path

_ROLLED_NAME = re.compile(r"[0-9]{20}")  # fullmatch: ASCII digits only
_QUEUE_DIR = re.compile(r"-?[0-9]{1,10}")  # an int queue id, as Integer.parseInt reads a queue folder's name


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


#: how the listing names a part's files and its size setting in what it says is wrong with one (only words)
_WORDS = {
    "commitlog": ("segment", "the store's segment size", "mappedFileSizeCommitLog", "records against"),
    L.TIMER_LOG_DIR: ("timer-log file", "the timer log's file size", "mappedFileSizeTimerLog", "units against"),
    "consumequeue": ("consume-queue file", "the queue's file size", "mappedFileSizeConsumeQueue", "units against"),
    L.BATCH_CQ_DIR: ("batch consume-queue file", "the queue's file size", "mapperFileSizeBatchConsumeQueue",
                     "units against"),
    L.COMPACTION_CQ_DIR: ("sparse consume-queue file", "the queue's file size", "compactionCqMappedFileSize",
                          "units against"),
    L.COMPACTION_LOG_DIR: ("compaction-log file", "the log's file size", "compactionMappedFileSize",
                           "records against"),
}
_ANY_PART = ("file", "the folder's file size", "its mapped file size", "entries against")


@dataclass(frozen=True, eq=False)
class RolledFile:
    """One file of a MappedFileQueue folder (``commitlog/``, ``timerlog/``...) as the listing finds it, with what is
    wrong with the file itself: a name that is no base offset (``base_offset`` None: never read), a length that is
    not the folder's file size, an empty file."""

    loc: fs.Location
    base_offset: int | None  # the name: offset of the file's first byte in the queue; None: not 20 digits
    length: int  # the file's actual length (a healthy store: the configured file size)
    problems: tuple[tuple[str, str], ...] = ()  # (ErrorKind value, what is wrong) about the file

    @property
    def name(self) -> str:
        return self.loc.name

    @property
    def path(self):
        """What the Path-based readers open: a ``Path`` (local), else a ``fs.StorePath``."""
        return self.loc.as_path()

    @property
    def location(self) -> fs.Location:
        return self.loc


@dataclass(frozen=True)
class Skipped:
    """Files of a part folder a listing left unbuilt because the folder holds more than its :class:`FileLimit`:
    which folder, how many files it holds, how many were skipped, and which ones in words."""

    folder: str  # the part folder (``commitlog/``, ``consumequeue/``...), as reports name files
    part: str  # its kind (store_format.layout's folder name)
    files: int  # regular files the folder holds
    skipped: int  # of those, not listed (never read)
    what: str  # which files were skipped
    below: int | None = None  # the skipped files of a rolled folder hold its offsets below this one (the oldest)
    most: int | None = None  # the limit it was listed under


@dataclass
class FileLimit:
    """The most files a listing builds of one part folder (a store past it cannot be held whole: every listed file
    costs the audit's driver a few KB; BENCHMARKS.md "Bad input at scale: many files").  Past it the listing only
    counts the rest, keeps what a broker's reader needs most (whole queues in name order, the newest segments) and
    records what it skipped in :attr:`skipped`."""

    most: int
    skipped: list[Skipped] = field(default_factory=list)


def list_folder(where, file_size: int | None = None, part: str = "", limit: FileLimit | None = None) \
        -> list[RolledFile]:
    """Every regular file of a MappedFileQueue folder (or the one file ``where`` names), in name order, each with
    what is wrong with its name or length: the one listing of ``commitlog/``, ``timerlog/`` and each queue's folder
    (store_format.queues).  ``file_size``: the folder's, when known; else the files' own (:func:`infer_file_size`).
    Entries no reader can open (a FIFO, a link loop...) are left out by ``Location.list``; a missing folder has
    none.  ``limit``: past its most files, only the newest (:func:`_newest`)."""
    loc = location(where)
    infos = [loc.info()] if loc.is_file() else loc.list()
    infos = [i for i in infos if i.is_file]
    if limit is not None and len(infos) > limit.most:
        infos = _newest(loc, infos, part, limit)
    return folder_files(loc, infos, file_size, part)


def _newest(loc: fs.Location, infos: list, part: str, limit: FileLimit) -> list:
    """Of a rolled folder's files (by name), the ``limit.most`` a broker's reader needs most: the newest named ones
    (what recovery walks and consumers read), then files of other names while room is left; the rest recorded as
    skipped."""
    named = [i for i in infos if _ROLLED_NAME.fullmatch(i.base_name)]
    other = [i for i in infos if not _ROLLED_NAME.fullmatch(i.base_name)]
    kept_named = named[len(named) - min(len(named), limit.most):]
    kept_other = other[:limit.most - len(kept_named)]
    old, rest = named[:len(named) - len(kept_named)], len(other) - len(kept_other)
    what = []
    if old:
        what.append(f"the oldest {len(old):,} ({old[0].base_name} to {old[-1].base_name}; the units and index entries "
                    "that point into them are not checked)")
    if rest:
        what.append(f"{rest:,} file(s) of other names")
    below = int(kept_named[0].base_name) if old else None
    limit.skipped.append(Skipped(name_of(loc), part, len(infos), len(old) + rest, " and ".join(what), below,
                                 limit.most))
    kept = {i.base_name for i in kept_named} | {i.base_name for i in kept_other}
    return [i for i in infos if i.base_name in kept]


def folder_files(loc: fs.Location, infos, file_size: int | None = None, part: str = "") -> list[RolledFile]:
    """:func:`list_folder` of entries already listed (``infos``: ``loc.list()``'s, or the one file's info): a caller
    walking many folders lists each once."""
    noun, size_of, setting, checked = _WORDS.get(part, _ANY_PART)
    infos = [i for i in infos if i.is_file]
    named = [i for i in infos if _ROLLED_NAME.fullmatch(i.base_name)]
    size = file_size or infer_file_size([(int(i.base_name), i.size) for i in named])
    out = []
    for i in infos:
        file = fs.Location(loc.fs, i.path, loc.origin)
        if not _ROLLED_NAME.fullmatch(i.base_name):
            why = f"a {part or noun} file name must be its 20-digit base offset; not read (no base offset to check " \
                f"{checked})"
            out.append(RolledFile(file, None, i.size, ((ErrorKind.BAD_FILE_NAME.value, why),)))
            continue
        problems = ()
        if size and i.size != size:
            problems = ((ErrorKind.BAD_GEOMETRY.value, f"{noun} is {i.size} bytes, {size_of} is {size} (the broker "
                         "refuses to load it); read anyway"),)
        elif not i.size:  # no size to compare with when it is the only file: empty is never right
            problems = ((ErrorKind.BAD_GEOMETRY.value, f"{noun} file is empty: the broker preallocates every {noun} "
                         f"({setting}) and refuses to load an empty one"),)
        out.append(RolledFile(file, int(i.base_name), i.size, problems))
    return out


def queue_id_of(name: str) -> int | None:
    """The queue id a queue folder's name gives (as Integer.parseInt: ASCII digits, an int), else None."""
    return int(name) if _QUEUE_DIR.fullmatch(name) and -2**31 <= int(name) < 2**31 else None


def list_queue_folders(part, part_name: str, size_of=None, limit: FileLimit | None = None) \
        -> list[tuple[str, int | None, RolledFile]]:
    """(topic, queue id, file) of every regular file of every ``<topic>/<queue>/`` folder under a queue part folder
    (``consumequeue/``, ``batchconsumequeue/``: each queue folder a MappedFileQueue), or of the one file ``part``
    names, in listing order, each with its problems (:func:`folder_files`, words of ``part_name``); the queue id is
    None where the folder's name is not an int; ``size_of`` (the folder's entries -> its file size) where the names do
    not tell it (a sparse queue's files are named after its log's).  The one walk of that shape: store_format.queues
    wraps it.  ``limit``: whole queue folders in listing order while their files fit in its most; the queue folders
    after the first that does not fit are only counted (their files never built), and recorded as skipped."""
    loc = location(part)
    if loc.is_file():
        queue = loc.parent()
        return [(queue.parent().name, queue_id_of(queue.name), f)
                for f in folder_files(queue, [loc.info()], size_of and size_of([loc.info()]), part_name)]
    out = []
    over = None  # past the limit: [files, queue folders, the first one, the last one] skipped
    for topic_name, topic in _subfolders(loc):
        for queue_name, queue in _subfolders(topic):
            where = f"{topic_name}/{queue_name}"
            if over is not None:
                over[0] += _count_files(queue)
                over[1] += 1
                over[3] = where
                continue
            infos = _entries(queue)
            if limit is not None and len(out) + sum(i.is_file for i in infos) > limit.most:
                over = [sum(i.is_file for i in infos), 1, where, where]
                continue
            qid = queue_id_of(queue_name)
            out += [(topic_name, qid, f) for f in folder_files(queue, infos, size_of and size_of(infos), part_name)]
    if over is not None:
        limit.skipped.append(Skipped(name_of(loc), part_name, len(out) + over[0], over[0],
                                     f"every file of {over[1]:,} queue folder(s), {over[2]} to {over[3]} in name "
                                     "order", most=limit.most))
    return out


def _count_files(loc: fs.Location) -> int:
    """How many regular files a folder holds, without a stat of each where the listing tells the type (a local
    folder's ``scandir``): what a listing past its limit still counts."""
    if loc.local_path is None or loc.local_path != loc.path:
        return sum(i.is_file for i in loc.list())
    try:
        with os.scandir(loc.local_path) as listing:
            return sum(1 for e in listing if e.is_file())
    except OSError:
        return 0


def _subfolders(loc: fs.Location) -> list[tuple[str, fs.Location]]:
    """(name, Location) of each folder of ``loc``, in name order (the name as listed: not taken apart again)."""
    return [(i.base_name, fs.Location(loc.fs, i.path, loc.origin)) for i in _entries(loc)
            if i.type == pafs.FileType.Directory]


class Listed(NamedTuple):
    """A local folder's entry as a ``pafs.FileInfo`` shows it to the listing (``path``, ``base_name``, ``type``,
    ``size``, ``is_file``), made without pyarrow: no ``FileInfo`` built, no type converted to its enum and no base
    name split off the path again at each look (a broker with 40,000 queue folders is listed on the driver)."""

    path: str
    base_name: str
    type: pafs.FileType
    size: int | None
    is_file: bool


_FOLDER, _FILE = pafs.FileType.Directory, pafs.FileType.File


def _entries(loc: fs.Location) -> list:
    """``loc.list()`` (the same entries, in name order), a local folder's by one ``scandir`` (as :class:`Listed`):
    its entry types come with the names, so a folder costs no stat of itself or of its subfolders (a broker with
    40,000 queue folders is listed on the driver); a file's size is its one ``stat``, and every entry the same
    ``access`` check as ``Location.list``'s (fs.hostile.readable_path: no FIFO, device, loop or unreadable entry)."""
    if loc.local_path is None or loc.local_path != loc.path:
        return loc.list()
    out = []
    try:
        listing = fs.scanned(loc.local_path)  # in name order
    except OSError:  # not a folder, or one that cannot be listed: no entries, as Location.list
        return []
    for e in listing:
        try:  # is_dir / is_file follow links, as the listing's stat does
            if e.is_dir():
                if readable_path(e.path, folder=True):
                    out.append(Listed(e.path, e.name, _FOLDER, None, False))
            elif e.is_file():
                if readable_path(e.path, folder=False):
                    out.append(Listed(e.path, e.name, _FILE, e.stat().st_size, True))
            # else a FIFO, socket, device or dangling link: never a reader's
        except OSError:
            continue
    return out


def by_queue(entries) -> dict[tuple[str, int], list[RolledFile]]:
    """{(topic, queue id): files} of :func:`list_queue_folders`' entries the broker loads (an int queue id, a
    20-digit name), each queue's by base offset, in the order the listing first shows each queue."""
    out: dict[tuple[str, int], list[RolledFile]] = {}
    for topic, qid, f in entries:
        if qid is not None and f.base_offset is not None:
            out.setdefault((topic, qid), []).append(f)
    return {k: v if len(v) == 1 else sorted(v, key=lambda f: f.base_offset) for k, v in out.items()}


def list_rolled_files(folder, file_size: int | None = None, part: str = "") -> list[RolledFile]:
    """The files of ``folder`` the broker loads (20-digit names), in offset order: :func:`list_folder` without the
    files it cannot name."""
    return sorted((f for f in list_folder(folder, file_size, part) if f.base_offset is not None),
                  key=lambda f: f.base_offset)


def infer_file_size(files) -> int | None:
    """The configured file size as the files show it, from their (base offset, length) pairs: the smallest spacing
    of the names, else the only file's length.  None when the files cannot tell: no file, or one empty file (an
    empty file is never a preallocated one, so its length says nothing)."""
    files = sorted(files)
    gaps = [b - a for (a, _), (b, _) in zip(files, files[1:]) if b > a]
    if gaps:
        return min(gaps)
    if len(files) == 1 and files[0][1] > 0:
        return files[0][1]
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
