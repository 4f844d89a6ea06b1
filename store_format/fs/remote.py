"""Remote locations: a dump on any pyarrow file system (hdfs://, s3://, gs://, abfs://, a PyFileSystem of the
user's, a scheme registered by name).  A :class:`Location` is a file system and a path; :class:`StorePath` is its
pathlib face for the readers written over ``Path``.  Local files stay ``Path`` objects (os-level reads, mmaps and
the hostile-input checks of fs/hostile.py); only the others go through pyarrow's ranged reads.
"""
from __future__ import annotations

import errno
import os
import posixpath
import stat
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import pyarrow.fs as pafs

from ..errors import ErrorKind, StoreFormatError
from .hostile import UnreadableError, _os_reason, _readable, open_fd, written_length



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
    """The URI of ``below``, a file or folder at, under or beside ``base`` (what ``uri`` resolves to): ``uri`` with
    its path moved by the relative path from ``base`` to ``below`` (``..`` included: a folder beside ``base``), its
    query kept (``?region=...`` and other options), so it resolves to the same file system again, wherever the
    path inside it does not spell the URI (``s3://bucket/key`` is ``bucket/key``; a sub-tree file system's ``a1``
    is ``x://bucket/a1``).  A place above the URI's own root is refused (ValueError): no URI of this form names it."""
    from urllib.parse import urlsplit, urlunsplit

    rel = posixpath.relpath("/" + below.path.strip("/"), "/" + base.path.strip("/"))
    if rel == ".":
        return uri
    u = urlsplit(uri)
    top = "/" + u.path.strip("/")
    moved = posixpath.normpath(posixpath.join(top, rel))
    ups = len([p for p in rel.split("/") if p == ".."])
    if ups > len([p for p in top.split("/") if p]):
        raise ValueError(f"{below.path} is above the root of {uri}: no URI of that form names it")
    return urlunsplit(u._replace(path=moved))


def local_path(path) -> str | None:
    """The local path ``path`` names -- a path as it is, or a ``file:`` URI as RFC 8089 reads it (``file:///x`` and
    ``file://localhost/x`` are the local ``/x``) -- or None for another file system's URI.  A ``file://`` URI that
    names another host is refused (INVALID_INPUT): its files are not on this machine, and the part after the host
    is no local path either (``file://host/x`` is not ``./host/x``)."""
    path = os.fspath(path)
    if not is_uri(path):
        return path
    scheme, _, rest = path.partition("://")
    if scheme.lower() != "file":
        return None
    host, slash, inside = rest.partition("/")
    if host.lower() not in ("", "localhost"):
        raise StoreFormatError(ErrorKind.INVALID_INPUT, f"{path}: a file:// URI names a file on host {host!r}, not "
                               "on this machine; give the local path (file:///path, with three slashes), or that "
                               "host's file system by its own scheme", file=path)
    return "/" + inside if slash else "/"


def resolve(path) -> "Location":
    """A local path, a ``file://`` URI or any other file system's URI as a :class:`Location`."""
    if isinstance(path, Location):
        return path
    if isinstance(path, StorePath):
        return path.loc
    path = os.fspath(path)
    if not path:
        raise StoreFormatError(ErrorKind.INVALID_INPUT, "no path given")
    local = local_path(path)
    if local is None:
        fs_, inside = filesystem_of(path)
        return Location(fs_, inside, (path, inside), given=path)
    return Location(pafs.LocalFileSystem(), os.path.abspath(local), given=path)


def as_typed(path) -> str:
    """A path as the user spelled it (:attr:`Location.as_typed`; a string as it is): what messages name, and what
    the output's guard resolves as the OS does (links and ``..``, which a Location has folded lexically)."""
    if isinstance(path, StorePath):
        path = path.loc
    if isinstance(path, Location):
        return path.as_typed
    return os.fspath(path)


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
    # the string this was resolved from (resolve()), e.g. as the user typed it on the command line, and carried on
    # to its children (child()); a parent has none (the kernel, not the text, knows what ``link/..``'s parent is)
    given: str | None = field(default=None, compare=False, repr=False)

    @property
    def local_path(self) -> str | None:
        """The OS path when the file system is the local one (mmap and os-level reads allowed), else None."""
        return self.path if isinstance(self.fs, pafs.LocalFileSystem) else None

    @property
    def name(self) -> str:
        return posixpath.basename(self.path.rstrip("/"))

    def child(self, name: str) -> "Location":
        return Location(self.fs, posixpath.join(self.path, name), self.origin, given=self._spelled("/" + name))

    def suffixed(self, suffix: str) -> "Location":
        """The file or folder beside this one named as it is with ``suffix`` appended (``out`` -> ``out-with-config``),
        spelled as this one was (:attr:`as_typed`)."""
        return Location(self.fs, self.path.rstrip("/") + suffix, self.origin, given=self._spelled(suffix))

    def _spelled(self, tail: str) -> str | None:
        # a local spelling carried on as the text it is (``link/..`` kept: the OS resolves it); a URI's spelling is
        # uri(), computed when asked (below the URI it came from, its ``?query`` after the path)
        if self.given is None or self.local_path is None:
            return None
        return self.given.rstrip("/") + tail

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
        """A random-access read-only file (``pyarrow.NativeFile``); local files through :func:`hostile.open_fd` (no
        FIFO, device or link loop is opened), others after a look at what they are."""
        if self.local_path is not None:
            import pyarrow as pa

            return pa.PythonFile(os.fdopen(open_fd(self.local_path), "rb"), mode="r")
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

    def as_path(self) -> "Path | StorePath":
        return Path(self.path) if self.local_path is not None else StorePath(self)

    def uri(self) -> str:
        """What resolves to this again, in any process: the local path, or a URI below the one it came from."""
        if self.local_path is not None or self.origin is None:
            return self.path
        uri, base = self.origin
        return uri_below(uri, Location(self.fs, base), self)

    def __hash__(self) -> int:  # pyarrow's file systems are not hashable; equal Locations share a type and a path
        return hash((self.fs.type_name, self.path))

    @property
    def as_typed(self) -> str:
        """This as the user would type it: the spelling it was made from, or its parent's with its name (``link/..``
        kept), else :meth:`uri` (a URI below the one it came from, its ``?query`` after the path)."""
        return self.given if self.given is not None else self.uri()

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


class _Stat:
    """What ``os.stat`` gives that the readers use, from a ``FileInfo``."""

    def __init__(self, info: pafs.FileInfo):
        self.st_mode = stat.S_IFDIR | 0o555 if info.type == pafs.FileType.Directory else stat.S_IFREG | 0o444
        self.st_size = info.size or 0
        self.st_mtime_ns = info.mtime_ns or 0


class StorePath:
    """The ``pathlib.Path`` face of a :class:`Location` on a non-local file system, for the readers written over
    ``Path`` (listings, ``exists``, sizes).  It has no ``__fspath__``: an ``open()``, ``os.stat`` or mmap of it
    fails at once instead of reading a local file of the same name; bytes are read through fs/maps.py's
    ``open_file``, ``read_bytes`` and ``ReadOnlyMap``, which take it."""

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
