"""The one way in to a dump's files: read-only opens that refuse anything but regular files and folders, on the
local file system or, through ``pyarrow.fs``, on any other (the file-system seam, below: :class:`Location`,
:class:`StorePath`, :func:`resolve`, :func:`register_filesystem`; local files are memory-mapped, others read by
ranges).

A dump is evidence, and hostile: where the store has a regular file there may be a FIFO (whose ``open`` blocks
until a writer comes), a socket, a symbolic link to ``/dev/zero`` or to a tape device, a link loop, a dangling
link, or a file the reader may not open.  Every read of a dump file goes through :func:`open_fd` (and what is
built on it: :func:`open_file`, :func:`read_bytes`, :class:`ReadOnlyMap`), which

* looks before it opens (``stat``: a device is refused without being opened, since opening some devices has
  side effects),
* opens with ``O_RDONLY | O_NONBLOCK | O_CLOEXEC`` (and ``O_NOFOLLOW`` when a link must not be followed), so a
  FIFO swapped in after the look can neither block the open nor be read,
* checks what it opened (``fstat``): a regular file (or a folder, when one is asked for), else it closes it and
  raises :class:`UnreadableError`.

Every failure is an :class:`UnreadableError` (a ``StoreFormatError`` of kind ``UNREADABLE``) naming the path and
the reason in words (``a FIFO, not a regular file``, ``Permission denied``, ``a symbolic link loop``...), so a
command line prints ``error: <path>: <reason>`` and a scan turns it into a finding.

:func:`entries` lists a folder with what each entry is (without opening any), and :func:`unreadable_entries`
walks a store root for every entry a reader would have to skip: the store tools and the audit report those
instead of passing over them in silence.
"""
from __future__ import annotations

import errno
import mmap
import os
import posixpath
import stat
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import pyarrow.fs as pafs

from .errors import ErrorKind, StoreFormatError

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
        return "no such file (a dangling symbolic link?)"
    return e.strerror or str(e)


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
    return fd


def _wanted(mode: int, folder: bool) -> bool:
    return stat.S_ISDIR(mode) if folder else stat.S_ISREG(mode)


def _not_wanted(mode: int, folder: bool) -> str:
    return f"{describe(mode)}, not {'a folder' if folder else 'a regular file'}"


def open_file(path, *, follow: bool = True):
    """:func:`open_fd` as a binary file object (``rb``); a :class:`StorePath` through its file system."""
    if isinstance(path, StorePath):
        return path.loc.open_input()
    return os.fdopen(open_fd(path, follow=follow), "rb")


def read_bytes(path, limit: int | None = None, *, follow: bool = True) -> bytes:
    """The bytes of a regular file (at most ``limit``)."""
    with open_file(path, follow=follow) as f:
        try:
            return f.read() if limit is None else f.read(limit)
        except OSError as e:
            raise UnreadableError(path, _os_reason(e)) from None


def check_file(path, *, follow: bool = True) -> None:
    """Raise :class:`UnreadableError` unless ``path`` opens as a regular file."""
    if isinstance(path, StorePath):
        path.loc.open_input().close()
        return
    os.close(open_fd(path, follow=follow))


def check_folder(path) -> None:
    """Raise :class:`UnreadableError` unless ``path`` opens (and lists) as a folder."""
    if isinstance(path, StorePath):
        found = _remote_entry(path)
        if not found.is_folder:
            raise UnreadableError(path, found.reason if found.reason else "a regular file, not a folder")
        try:
            path.loc.fs.get_file_info(pafs.FileSelector(path.loc.path, recursive=False))
        except OSError as e:
            raise _unreadable(path, e) from None
        return
    fd = open_fd(path, folder=True)
    try:
        os.listdir(fd)
    except OSError as e:
        raise UnreadableError(path, _os_reason(e)) from None
    finally:
        os.close(fd)


@dataclass(frozen=True)
class Entry:
    """One entry of a folder, as a reader would meet it (links followed)."""

    name: str
    path: Path
    kind: str  # "file" | "folder" | "other" (FIFO, socket, device) | "broken" (loop, dangling link, no stat)
    size: int
    reason: str | None  # why it is not a readable file or folder (None for a plain file or folder)

    @property
    def is_file(self) -> bool:
        return self.kind == "file"

    @property
    def is_folder(self) -> bool:
        return self.kind == "folder"

    def error(self) -> UnreadableError:
        return UnreadableError(self.path, self.reason or "cannot be read")


def entry(path) -> Entry:
    """What ``path`` is (following links), never opening it."""
    if isinstance(path, StorePath):
        return _remote_entry(path)
    path = Path(path)
    try:
        st = path.stat()
    except OSError as e:
        return Entry(path.name, path, "broken", 0, _os_reason(e))
    if stat.S_ISREG(st.st_mode):
        reason = None if os.access(path, os.R_OK) else "Permission denied"
        return Entry(path.name, path, "file", st.st_size, reason)
    if stat.S_ISDIR(st.st_mode):
        reason = None if os.access(path, os.R_OK | os.X_OK) else "Permission denied"
        return Entry(path.name, path, "folder", 0, reason)
    return Entry(path.name, path, "other", 0, f"{describe(st.st_mode)}, not a regular file")


def entries(folder) -> list[Entry]:
    """Every entry of ``folder``, sorted by name (``[]`` when it is not a folder; an unlistable folder raises
    :class:`UnreadableError`)."""
    if isinstance(folder, StorePath):
        if not folder.is_dir():
            return []
        try:
            infos = folder.loc.fs.get_file_info(pafs.FileSelector(folder.loc.path, recursive=False))
        except OSError as e:
            raise _unreadable(folder, e) from None
        return [_remote_entry(folder / i.base_name, i) for i in sorted(infos, key=lambda i: i.base_name)]
    folder = Path(folder)
    try:
        names = os.listdir(folder)
    except (NotADirectoryError, FileNotFoundError):
        return []
    except OSError as e:
        raise UnreadableError(folder, _os_reason(e)) from None
    return [entry(folder / n) for n in sorted(names)]


STORE_FILES = ("checkpoint", "abort", "lock")
#: the file every output of the suite's jobs holds (jobs/output.py): only such a folder is ever deleted by
#: --overwrite, and the writer accepts it in an otherwise empty store root
OUTPUT_MARKER = "_ROCKETMQ_FORENSICS"
STORE_FOLDERS = ("commitlog", "consumequeue", "index", "config")


def unreadable_entries(root) -> list[UnreadableError]:
    """Every entry of a store root that a reader cannot read: FIFOs, sockets and devices (also behind links),
    link loops and dangling links, files and folders without permission, and a part folder (``commitlog/``,
    ``consumequeue/``, ``index/``, ``config/``) that is not a folder.  Walked: the part folders (consume queues
    two levels deep: ``<topic>/<queue>/<file>``) and the root's ``checkpoint``, ``abort``, ``lock``."""
    root = as_path(root)
    out: list[UnreadableError] = []

    def visit(folder: Path, depth: int) -> None:
        try:
            found = entries(folder)
        except UnreadableError as e:
            out.append(e)
            return
        for e in found:
            if e.reason is not None:
                out.append(e.error())
            elif e.is_folder and depth > 0:
                visit(e.path, depth - 1)

    for name in STORE_FOLDERS:
        e = entry(root / name)
        if e.kind == "broken" and e.reason and e.reason.startswith("no such file") and not (root / name).is_symlink():
            continue  # absent: a store may lack any part
        if e.reason is not None:
            out.append(e.error())
        elif e.kind == "file":
            out.append(UnreadableError(e.path, "a regular file, not a folder: this part of the store is not read"))
        else:
            visit(e.path, 2 if name == "consumequeue" else 0)
    for name in STORE_FILES:
        e = entry(root / name)
        if e.kind == "broken" and not (root / name).is_symlink():
            continue
        if e.reason is not None and not (name != "checkpoint" and e.kind == "folder"):
            out.append(e.error())
    return out


def part_of(error: StoreFormatError, root) -> str | None:
    """The store part (``commitlog``, ``consumequeue``, ``index``, ``config``) or root file an error's path
    lies in, relative to ``root``."""
    try:
        rel = Path(error.file).relative_to(str(as_path(root)))
    except ValueError:
        return None
    return rel.parts[0] if rel.parts else None


# ------------------------------------------------------------------------------------- read-only maps

class _FileMap(mmap.mmap):
    """A read-only mmap that can ask its file where data starts (``SEEK_DATA``), so a search past the written data
    skips a sparse file's holes without touching them (a first touch of a hole page still costs a page fault)."""

    def data_from(self, pos: int) -> tuple[int, int]:
        """(start, end) of the first data extent at or after ``pos`` (the file's length when none); where the file
        system cannot tell, the rest of the file."""
        size = len(self)
        try:
            start = os.lseek(self.fd, pos, os.SEEK_DATA)
        except OSError as e:
            if e.errno == errno.ENXIO:  # only a hole from pos to the end
                return size, size
            return pos, size
        try:
            return start, min(os.lseek(self.fd, start, os.SEEK_HOLE), size)
        except OSError:
            return start, size


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
    extents = data_extents(fd, end) if fd is not None else None
    if extents is None:  # no descriptor (bytes read through pyarrow.fs), or the system cannot tell
        extents = [(0, end)]
    arr = np.frombuffer(buf, np.uint8, end) if end else None
    try:
        for lo, hi in reversed(extents):
            while hi > lo:
                start = max(lo, hi - _ZERO_SCAN_BLOCK)
                block = arr[start:hi]
                if block.any():
                    return start + int(np.flatnonzero(block)[-1]) + 1
                hi = start
        return 0
    finally:
        del arr  # no view may outlive the caller's map


_ZERO_SCAN_BLOCK = 1 << 18


#: a file on another file system up to this size is read into memory whole; a bigger one (a full index file is
#: 420 MB) is staged in a temp file and mapped, so a task's memory does not grow with it
STAGE_ABOVE = 64 << 20
_STAGE_CHUNK = 8 << 20


class ReadOnlyMap:
    """A read-only view of a regular file: an mmap (empty files give an empty bytes).  Never writable; opened
    through :func:`store_format.fs.open_file` (anything but a regular file is an ``UnreadableError``).  A file on a
    non-local file system (a ``store_format.fs.StorePath``) has no map of its own: it is read whole into ``bytes``,
    or, above :data:`STAGE_ABOVE`, copied by chunks into an anonymous temp file (``TMPDIR``; our copy, removed on
    close) that is mapped instead."""

    def __init__(self, path: str | os.PathLike):
        self.path = as_path(path)
        if isinstance(self.path, StorePath):
            self._f = None
            with open_file(self.path) as f:
                if f.size() <= STAGE_ABOVE:
                    self.buf = _read_all(f, self.path)
                    return
                self._f = _staged(f, self.path)
        else:
            self._f = open_file(self.path)
        size = os.fstat(self._f.fileno()).st_size
        self.buf = _FileMap(self._f.fileno(), 0, access=mmap.ACCESS_READ) if size else b""
        if size:
            self.buf.fd = self._f.fileno()

    def __len__(self) -> int:
        return len(self.buf)

    def fileno(self) -> int | None:
        """The local file's descriptor (its holes can be asked for); None for a file read through pyarrow.fs."""
        return self._f.fileno() if self._f is not None else None

    def written_length(self, end: int | None = None) -> int:
        """The file's bytes (its first ``end``) up to its last non-zero one (:func:`written_length`)."""
        return written_length(self.buf, self.fileno(), end) if len(self.buf) else 0

    def close(self):
        buf, self.buf = self.buf, b""
        if isinstance(buf, mmap.mmap):
            try:
                buf.close()
            except BufferError:  # a numpy or memoryview view still exports it (garbage not yet collected):
                pass  # the map is unmapped when the last view goes
        if self._f is not None:
            self._f.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def _read_all(f, path) -> bytes:
    try:
        return f.read()
    except OSError as e:
        raise UnreadableError(path, e.strerror or str(e)) from None


def _staged(f, path):
    """The rest of ``f`` copied into a temp file that is already unlinked (it goes with its last descriptor).  Zero
    chunks are skipped, not written: the copy is sparse where a broker's preallocated file is (a new index file is
    420 MB of zeros), which keeps the disk it takes and the hole search of :func:`written_length` as the original's."""
    import tempfile

    staged = tempfile.TemporaryFile(prefix="rocketmq-forensics-")
    zeros, size = bytes(_STAGE_CHUNK), 0
    try:
        while chunk := f.read(_STAGE_CHUNK):
            if chunk == zeros[:len(chunk)]:
                staged.seek(len(chunk), os.SEEK_CUR)
            else:
                staged.write(chunk)
            size += len(chunk)
        staged.truncate(size)  # a zero tail: the length, as a hole
        staged.flush()
    except OSError as e:
        staged.close()
        raise UnreadableError(path, e.strerror or str(e)) from None
    except BaseException:
        staged.close()
        raise
    return staged


# ------------------------------------------------------------------------------------- the file-system seam
#
# A dump on any pyarrow file system (hdfs://, s3://, gs://, abfs://, a PyFileSystem of the user's): a
# Location is a FileSystem and a path; StorePath is its pathlib face for the readers written over Path.  Local
# files stay Path objects (os-level reads, mmaps and the hostile-input checks above); only the others go
# through pyarrow's ranged reads.

#: ``scheme=module:function[,...]``: file systems registered by name, importable in any process (the driver,
#: a data source's planner, an executor), since a registration made in one Python process is not seen by another
FILESYSTEMS_ENV = "ROCKETMQ_FORENSICS_FILESYSTEMS"
_SCHEMES: dict[str, Callable[[str], tuple]] = {}
_LOCK = threading.Lock()


def register_filesystem(scheme: str, factory: Callable[[str], tuple]) -> None:
    """Resolve ``scheme://...`` with ``factory(uri) -> (pyarrow.fs.FileSystem, path)`` in this process, before
    pyarrow's own schemes (``FileSystem.from_uri``).  Other processes: :data:`FILESYSTEMS_ENV`."""
    with _LOCK:
        _SCHEMES[scheme.lower()] = factory


def _factory(scheme: str):
    with _LOCK:
        found = _SCHEMES.get(scheme)
    if found is not None:
        return found
    for item in os.environ.get(FILESYSTEMS_ENV, "").split(","):
        name, sep, target = item.strip().partition("=")
        if sep and name.strip().lower() == scheme:
            import importlib

            module, _, attr = target.strip().partition(":")
            try:
                found = getattr(importlib.import_module(module), attr)
            except (ImportError, AttributeError) as e:
                raise StoreFormatError(ErrorKind.INVALID_INPUT, f"{FILESYSTEMS_ENV}: {scheme}={target}: {e}") from None
            register_filesystem(scheme, found)
            return found
    return None


def is_uri(path) -> bool:
    return isinstance(path, str) and "://" in path


def filesystem_of(uri: str) -> tuple[pafs.FileSystem, str]:
    """The file system and path a URI names: a registered scheme's factory, else pyarrow's ``from_uri``."""
    scheme = uri.partition("://")[0].lower()
    factory = _factory(scheme)
    try:
        return factory(uri) if factory is not None else pafs.FileSystem.from_uri(uri)
    except ValueError as e:  # pyarrow.ArrowInvalid: an unknown scheme, a malformed URI
        raise StoreFormatError(ErrorKind.INVALID_INPUT, f"cannot open this file system: {e} (a scheme pyarrow does "
                               f"not know is registered with store_format.fs.register_filesystem or "
                               f"{FILESYSTEMS_ENV}: docs/cluster.md)", file=uri) from None


def uri_below(uri: str, base: "Location", below: "Location") -> str:
    """The URI of ``below``, a file or folder at or under ``base`` (what ``uri`` resolves to): ``uri`` with the
    relative path appended before its query (``?region=...`` and other options kept), so it resolves to the same
    file system again, wherever the path inside it does not spell the URI (``s3://bucket/key`` is ``bucket/key``)."""
    from urllib.parse import urlsplit, urlunsplit

    rel = posixpath.relpath(below.path.rstrip("/") or "/", base.path.rstrip("/") or "/")
    if rel == ".":
        return uri
    if rel.startswith(".."):
        raise ValueError(f"{below.path} is not under {base.path}")
    u = urlsplit(uri)
    return urlunsplit(u._replace(path=u.path.rstrip("/") + "/" + rel))


def resolve(path) -> "Location":
    """A local path, a ``file://`` URI or any other file system's URI as a :class:`Location`."""
    if isinstance(path, Location):
        return path
    if isinstance(path, StorePath):
        return path.loc
    path = os.fspath(path)
    if not path:
        raise StoreFormatError(ErrorKind.INVALID_INPUT, "no path given")
    if is_uri(path):
        fs_, inside = filesystem_of(path)
        return Location(fs_, inside, (path, inside))
    return Location(pafs.LocalFileSystem(), os.path.abspath(path))


def uri_of(path) -> str:
    """A path the readers open (``Path``, :class:`StorePath`, :class:`Location`, a string) as the string that
    resolves to it again: what a data source is given (``.load(...)``), in its own Python process."""
    if isinstance(path, StorePath):
        return path.loc.uri()
    if isinstance(path, Location):
        return path.uri()
    return os.fspath(path)


def as_path(path) -> "Path | StorePath":
    """What the readers open: a ``Path`` for a local file (a local path, ``file://``), else a :class:`StorePath`."""
    if isinstance(path, (Path, StorePath)):
        return path
    if isinstance(path, Location) or is_uri(path):
        return resolve(path).as_path()
    return Path(path)


def _unreadable(where, e: BaseException) -> UnreadableError:
    return UnreadableError(where, e.strerror if isinstance(e, OSError) and e.strerror else str(e))


@dataclass(frozen=True)
class Location:
    """A file or folder on a pyarrow file system (picklable: tasks reopen it; the file system travels with it,
    so an executor needs no registration of its scheme)."""

    fs: pafs.FileSystem
    path: str
    # (URI, its path) this was resolved from, so a path below it can be named by a URI again (uri())
    origin: tuple[str, str] | None = field(default=None, compare=False)

    @property
    def local_path(self) -> str | None:
        """The OS path when the file system is the local one (mmap and os-level reads allowed), else None."""
        return self.path if isinstance(self.fs, pafs.LocalFileSystem) else None

    @property
    def name(self) -> str:
        return posixpath.basename(self.path.rstrip("/"))

    def child(self, name: str) -> "Location":
        return Location(self.fs, posixpath.join(self.path, name), self.origin)

    def parent(self) -> "Location":
        return Location(self.fs, posixpath.dirname(self.path.rstrip("/")), self.origin)

    def info(self) -> pafs.FileInfo:
        return self.fs.get_file_info(self.path)

    def exists(self) -> bool:
        return self.info().type != pafs.FileType.NotFound

    def is_dir(self) -> bool:
        return self.info().type == pafs.FileType.Directory

    def is_file(self) -> bool:
        return self.info().type == pafs.FileType.File

    def size(self) -> int:
        """The file's length (an :class:`UnreadableError` when it is not a file)."""
        info = self.info()
        if info.type != pafs.FileType.File:
            raise UnreadableError(self.path, "no such file" if info.type == pafs.FileType.NotFound
                                  else "not a regular file")
        return info.size

    def list(self) -> list[pafs.FileInfo]:
        """Direct children, sorted by name; [] when this is not a folder.  Local entries no reader can read (a FIFO,
        socket or device, a link loop or dangling link, no permission) are left out: never opened, so never waited
        on; :func:`unreadable_entries` (the ``unreadable_files`` metadata table) reports them."""
        if not self.is_dir():
            return []
        try:
            infos = self.fs.get_file_info(pafs.FileSelector(self.path, recursive=False))
        except OSError:  # a folder that cannot be listed: reported the same way
            return []
        if self.local_path is not None:
            infos = [i for i in infos if _readable(i)]
        return sorted(infos, key=lambda i: i.base_name)

    def open_input(self):
        """A random-access read-only file (``pyarrow.NativeFile``); local files through :func:`open_file` (no
        FIFO, device or link loop is opened), others after a look at what they are."""
        if self.local_path is not None:
            import pyarrow as pa

            return pa.PythonFile(open_file(self.local_path), mode="r")
        info = self.info()
        if info.type != pafs.FileType.File:
            raise UnreadableError(self.path, "no such file" if info.type == pafs.FileType.NotFound
                                  else f"{'a folder' if info.type == pafs.FileType.Directory else 'not a file'}, "
                                       "not a regular file")
        try:
            return self.fs.open_input_file(self.path)
        except OSError as e:
            raise _unreadable(self.path, e) from None

    def read_range(self, offset: int, length: int) -> bytes:
        """``length`` bytes from ``offset`` (fewer at the end of the file)."""
        if self.local_path is not None:
            fd = open_fd(self.local_path)
            try:
                return os.pread(fd, length, offset) if length > 0 else b""
            except OSError as e:
                raise UnreadableError(self.local_path, _os_reason(e)) from None
            finally:
                os.close(fd)
        with self.open_input() as f:
            try:
                return f.read_at(length, offset) if length > 0 else b""
            except OSError as e:
                raise _unreadable(self.path, e) from None

    open_range = read_range

    def mmap_or_read(self, offset: int = 0, length: int | None = None):
        """The bytes ``[offset, offset + length)`` (to the end when ``length`` is None) as ``.buf`` of a context
        manager: a read-only map when the file system is local (the whole file: ``commitlog.ReadOnlyMap``, or a
        view of its range), else one ranged read into ``bytes``."""
        if self.local_path is not None:
            m = ReadOnlyMap(self.local_path)
            return m if offset == 0 and length is None else _Window(m, offset, length)
        if length is None:
            length = max(0, self.size() - offset)
        return _Bytes(self.read_range(offset, length), self.path)

    def as_path(self) -> "Path | StorePath":
        return Path(self.path) if self.local_path is not None else StorePath(self)

    def uri(self) -> str:
        """What resolves to this again, in any process: the local path, or a URI below the one it came from."""
        if self.local_path is not None or self.origin is None:
            return self.path
        uri, base = self.origin
        return uri_below(uri, Location(self.fs, base), self)

    def __str__(self) -> str:
        return self.path


class _Bytes:
    """Bytes read through a file system, with ``ReadOnlyMap``'s face (``buf``, ``len``, a context)."""

    def __init__(self, buf: bytes, path: str):
        self.buf, self.path = buf, path

    def __len__(self) -> int:
        return len(self.buf)

    def written_length(self, end: int | None = None) -> int:
        return written_length(self.buf, None, end) if len(self.buf) else 0

    def close(self) -> None:
        self.buf = b""

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


class _Window(_Bytes):
    """A range of a local read-only map, as a view (released before the map closes)."""

    def __init__(self, m, offset: int, length: int | None):
        end = len(m.buf) if length is None else min(len(m.buf), offset + length)
        self._map = m
        super().__init__(memoryview(m.buf)[min(offset, end):end] if len(m.buf) else b"", str(m.path))

    def close(self) -> None:
        if isinstance(self.buf, memoryview):
            self.buf.release()
        self.buf = b""
        self._map.close()


def _readable(info: pafs.FileInfo) -> bool:
    if info.type == pafs.FileType.File:
        return os.access(info.path, os.R_OK)
    if info.type == pafs.FileType.Directory:
        return os.access(info.path, os.R_OK | os.X_OK)
    return False


class _Stat:
    """What ``os.stat`` gives that the readers use, from a ``FileInfo``."""

    def __init__(self, info: pafs.FileInfo):
        self.st_mode = stat.S_IFDIR | 0o555 if info.type == pafs.FileType.Directory else stat.S_IFREG | 0o444
        self.st_size = info.size or 0
        self.st_mtime_ns = info.mtime_ns or 0


class StorePath:
    """The ``pathlib.Path`` face of a :class:`Location` on a non-local file system, for the readers written over
    ``Path`` (listings, ``exists``, sizes).  It has no ``__fspath__``: an ``open()``, ``os.stat`` or mmap of it
    fails at once instead of reading a local file of the same name; bytes are read through :func:`open_file`,
    :func:`read_bytes` and ``commitlog.ReadOnlyMap``, which take it."""

    __slots__ = ("loc",)

    def __init__(self, loc: Location):
        self.loc = loc

    @property
    def name(self) -> str:
        return self.loc.name

    @property
    def parent(self) -> "StorePath":
        return StorePath(self.loc.parent())

    @property
    def parts(self) -> tuple[str, ...]:
        return Path(self.loc.path).parts

    def __truediv__(self, name) -> "StorePath":
        return StorePath(self.loc.child(os.fspath(name)))

    def joinpath(self, *names) -> "StorePath":
        return StorePath(self.loc.child("/".join(os.fspath(n) for n in names))) if names else self

    def exists(self) -> bool:
        return self.loc.exists()

    def is_dir(self) -> bool:
        return self.loc.is_dir()

    def is_file(self) -> bool:
        return self.loc.is_file()

    def is_symlink(self) -> bool:
        return False  # pyarrow file systems follow links (or have none)

    def stat(self) -> _Stat:
        info = self.loc.info()
        if info.type == pafs.FileType.NotFound:
            raise FileNotFoundError(errno.ENOENT, "No such file or directory", str(self))
        return _Stat(info)

    def iterdir(self):
        if not self.is_dir():
            raise NotADirectoryError(errno.ENOTDIR, "Not a directory", str(self))
        return iter([StorePath(Location(self.loc.fs, i.path)) for i in self.loc.list()])

    def relative_to(self, other) -> Path:
        return Path(self.loc.path).relative_to(other.loc.path if isinstance(other, StorePath) else other)

    def __str__(self) -> str:
        return self.loc.path

    def __repr__(self) -> str:
        return f"StorePath({type(self.loc.fs).__name__}, {self.loc.path!r})"

    def __eq__(self, other) -> bool:
        return isinstance(other, StorePath) and other.loc.path == self.loc.path and other.loc.fs.equals(self.loc.fs)

    def __hash__(self) -> int:
        return hash(self.loc.path)

    def __lt__(self, other) -> bool:
        return self.loc.path < other.loc.path

    def __reduce__(self):
        return StorePath, (self.loc,)


def _remote_entry(path: StorePath, info: pafs.FileInfo | None = None) -> Entry:
    info = info if info is not None else path.loc.info()
    if info.type == pafs.FileType.File:
        return Entry(path.name, path, "file", info.size or 0, None)
    if info.type == pafs.FileType.Directory:
        return Entry(path.name, path, "folder", 0, None)
    if info.type == pafs.FileType.NotFound:
        return Entry(path.name, path, "broken", 0, "no such file")
    return Entry(path.name, path, "other", 0, "not a regular file")


# ------------------------------------------------------------------------------------- where a path really is

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
        own_parts = any(os.path.isdir(os.path.join(p, part)) for part in STORE_FOLDERS)
        return os.path.dirname(p) if name in STORE_FOLDERS and not own_parts else p
    up = os.path.dirname(p)
    for _ in range(3):
        if os.path.basename(up) in STORE_FOLDERS:
            return os.path.dirname(up)
        up = os.path.dirname(up)
    return p


__all__ = ["ReadOnlyMap", "data_end", "written_length", "Location", "StorePath", "resolve", "as_path", "is_uri", "uri_below", "uri_of", "filesystem_of", "register_filesystem",
           "FILESYSTEMS_ENV", "real", "identity", "ancestry", "overlap", "store_root_of", "UnreadableError", "Entry", "error_line", "open_fd", "open_file", "read_bytes", "check_file", "check_folder", "entry",
           "entries", "unreadable_entries", "part_of", "describe", "OUTPUT_MARKER", "STORE_FILES", "STORE_FOLDERS"]
