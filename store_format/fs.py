"""The one way in to a dump's files: read-only opens that refuse anything but regular files and folders.

A dump is evidence, and hostile: where the store has a regular file there may be a FIFO (whose ``open`` blocks
until a writer comes), a socket, a symbolic link to ``/dev/zero`` or to a tape device, a link loop, a dangling
link, or a file the reader may not open.  Every read of a dump file goes through :func:`open_fd` (and what is
built on it: :func:`open_file`, :func:`read_bytes`, ``commitlog.ReadOnlyMap``), which

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
import os
import stat
from dataclasses import dataclass
from pathlib import Path

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
    """:func:`open_fd` as a binary file object (``rb``)."""
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
    os.close(open_fd(path, follow=follow))


def check_folder(path) -> None:
    """Raise :class:`UnreadableError` unless ``path`` opens (and lists) as a folder."""
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
    root = Path(root)
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
        rel = Path(error.file).relative_to(Path(root))
    except ValueError:
        return None
    return rel.parts[0] if rel.parts else None


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


__all__ = ["real", "identity", "ancestry", "overlap", "store_root_of", "UnreadableError", "Entry", "error_line", "open_fd", "open_file", "read_bytes", "check_file", "check_folder", "entry",
           "entries", "unreadable_entries", "part_of", "describe", "OUTPUT_MARKER", "STORE_FILES", "STORE_FOLDERS"]
