"""Maps and listings of a dump's files, local or remote: :class:`ReadOnlyMap` (a read-only mmap of a local file;
a remote file read whole, or staged in an unlinked temp file above :data:`STAGE_ABOVE`), the any-path opens
(:func:`open_file`, :func:`read_bytes`, :func:`check_file`, :func:`check_folder`), :func:`entries` (a folder listed
with what each entry is, without opening any), :func:`files_under` and :func:`stat_files_under` (every file below a
root, with its stat) and :func:`unreadable_entries` (every entry of a store root a reader would have to skip: the
store tools and the audit report those instead of passing over them in silence).
"""
from __future__ import annotations

import mmap
import stat
import os
from dataclasses import dataclass
from pathlib import Path

import pyarrow.fs as pafs

from .. import layout as L
from ..errors import StoreFormatError
from .hostile import UnreadableError, _FileMap, _os_reason, describe, last_nonzero, open_fd, open_fd_stat, \
    search_extents, written_length
from .listings import accessible, scanned
from .remote import Location, StorePath, _Bytes, _unreadable, _Window, as_path
from .zero_tails import note_zeros_from



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
    return _local_entry(path.name, path)


def _local_entry(name: str, path: Path, at: str | None = None) -> Entry:
    """:func:`entry` of a local ``path`` named ``name`` (``at``: the same path as text, when the caller has it: the
    system calls take it without a ``Path`` formatting itself)."""
    at = path if at is None else at
    try:
        st = os.stat(at)
    except OSError as e:
        return Entry(name, path, "broken", 0, _os_reason(e))
    if stat.S_ISREG(st.st_mode):
        return Entry(name, path, "file", st.st_size, _denied("file", at))
    if stat.S_ISDIR(st.st_mode):
        return Entry(name, path, "folder", 0, _denied("folder", at))
    return Entry(name, path, "other", 0, f"{describe(st.st_mode)}, not a regular file")


def _denied(kind: str, at) -> str | None:
    """Why a reader may not use the local file or folder at ``at`` ("Permission denied"), or None: a file must be
    readable, a folder listable and searchable."""
    return None if accessible(at, os.R_OK if kind == "file" else os.R_OK | os.X_OK) else "Permission denied"


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
    if not isinstance(folder, Path):  # a Path is not parsed again (a fleet's 7,500 queue folders, every audit)
        folder = Path(folder)
    top = os.fspath(folder)
    try:
        names = os.listdir(top)
    except (NotADirectoryError, FileNotFoundError):
        return []
    except OSError as e:
        raise UnreadableError(folder, _os_reason(e)) from None
    # a listed name is one plain part: its Path made without parsing it again (a folder of thousands of segments,
    # listed on every audit for the unreadable entries), its text for the system calls joined, not formatted
    child = getattr(folder, "_make_child_relpath", None) or folder.joinpath
    return [_local_entry(n, child(n), os.path.join(top, n)) for n in sorted(names)]


def files_under(root):
    """Every regular file below ``root`` (``root`` itself when it is one): links to files followed, a link to a
    folder not walked into (so no loop), a folder that cannot be listed passed over (its readers report it); each
    folder's files in name order.  ``Path``s, or ``StorePath``s on another file system (listed by :func:`entries`).
    A local folder is listed by ``os.scandir``, whose entries say what they are: no ``stat`` of a plain file or
    folder, only of a link (or where the file system does not say), which is what :func:`entries` would have made
    of it -- the chain of custody lists every input file twice a run (6,000 of them for a fleet of 64 brokers)."""
    for path, _ in _walk_files(root):
        yield path


def stat_files_under(root):
    """(path, its stat) of every file :func:`files_under` finds, links followed; a file gone by the time it is
    looked at is left out.  A local file's path is its text (``str`` of the ``Path`` :func:`files_under` gives), its
    stat its listed entry's (``DirEntry.stat``: no ``Path`` made, formatted and looked up again, and a link's stat
    already taken by the walk reused): the chain of custody fingerprints every input file at the start of a run and
    again at its commit (50,007 consume-queue files for 40,000 queues: 0.9 s a walk with ``Path``s, 0.5 s
    without); another file system's a ``StorePath``, its stat by ``StorePath.stat``."""
    top = as_path(root)
    for path, entry in _walk_files(top, as_text=not isinstance(top, StorePath)):
        try:
            yield path, entry.stat() if entry is not None else os.stat(path) if isinstance(path, str) else path.stat()
        except FileNotFoundError:
            continue


def _walk_files(root, as_text: bool = False):
    """(path, its ``os.DirEntry`` or None) of every file :func:`files_under` finds, in ``Path.parts`` order (each
    folder's entries in name order, a folder's files before its next sibling's: what a sort of the paths gives, so
    a listing can be fingerprinted as it goes, its stats never all held): the one walk behind it and
    :func:`stat_files_under`.  ``as_text``: a local root's paths as the texts of their ``Path``s
    (:func:`_text_kinds_in`), none made."""
    top = as_path(root)
    if top.is_file():
        yield (str(top) if as_text else top), None
        return
    kinds_in = _text_kinds_in if as_text else _kinds_in
    walking = [iter(kinds_in(str(top) if as_text else top))]  # the listings of the folders down to the one walked
    while walking:
        for path, kind, scanned in walking[-1]:
            if kind == "file":
                yield path, scanned
            elif kind == "folder":
                walking.append(iter(kinds_in(path)))
                break
        else:
            walking.pop()


def _text_kinds_in(folder: str) -> list[tuple]:
    """:func:`_kinds_in` of a local folder given as text, each entry's path the text its ``Path`` would have (the
    folder's text and the name, as scandir joins them; a name alone below ".", as ``Path`` spells it)."""
    try:
        found = scanned(folder)
    except OSError:  # as _kinds_in
        return []
    if folder == ".":
        return [(e.name, _scanned_kind(e), e) for e in found]
    return [(e.path, _scanned_kind(e), e) for e in found]


def _kinds_in(folder) -> list[tuple]:
    """(path, kind, its ``os.DirEntry`` or None) of each entry of ``folder`` in name order, as :func:`files_under`
    walks them: "file" (a regular file, links followed), "folder" (a folder that is not a link), else None; none for
    a folder that cannot be listed (its readers report it).  A local folder by ``os.scandir``, another file
    system's by :func:`entries`."""
    if isinstance(folder, StorePath):
        try:
            found = entries(folder)
        except UnreadableError:
            return []
        return [(e.path, "file" if e.is_file else "folder" if e.is_folder else None, None) for e in found]
    try:
        found = scanned(folder)
    except OSError:  # not a folder, gone, or unlistable (entries: [] or UnreadableError)
        return []
    child = getattr(folder, "_make_child_relpath", None) or folder.joinpath
    return [(child(e.name), _scanned_kind(e), e) for e in found]


def _scanned_kind(e: os.DirEntry) -> str | None:
    """A scanned entry's kind for :func:`files_under`: "file" (a regular file, links followed), "folder" (a folder
    that is not a link), else None (a link to a folder, a FIFO, socket or device, a dangling link or a loop: what
    :func:`_local_entry`'s ``stat`` fails on is "broken", never walked)."""
    try:
        if e.is_file():
            return "file"
        return "folder" if not e.is_symlink() and e.is_dir() else None
    except OSError:
        return None


STORE_FILES = L.STORE_ROOT_FILES
#: the file every output of the suite's jobs holds (runtime/output.py): only such a folder is ever deleted by
#: --overwrite, and the writer accepts it in an otherwise empty store root
OUTPUT_MARKER = "_ROCKETMQ_FORENSICS"
STORE_FOLDERS = L.STORE_PART_FOLDERS


def unreadable_entries(root) -> list[UnreadableError]:
    """Every entry of a store root that a reader cannot read: FIFOs, sockets and devices (also behind links),
    link loops and dangling links, files and folders without permission, and a part folder (``commitlog/``,
    ``consumequeue/``, ``index/``, ``config/``, 5.x's ``timerlog/``) that is not a folder.  Walked: the parts of
    ``layout.STORE_PARTS`` (consume queues two levels deep: ``<topic>/<queue>/<file>``) and the root files of
    ``layout.STORE_ROOT_FILES`` (``checkpoint``, ``abort``, ``lock``, 5.x's ``timerwheel``)."""
    root = as_path(root)
    out: list[UnreadableError] = []

    def visit(folder: Path, depth: int) -> None:
        if not isinstance(folder, StorePath):
            _visit_local(folder, depth, out)
            return
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

    for part in L.STORE_PARTS:
        name = part.folder
        e = entry(root / name)
        if e.kind == "broken" and e.reason and e.reason.startswith("no such file") and not (root / name).is_symlink():
            continue  # absent: a store may lack any part
        if e.reason is not None:
            out.append(e.error())
        elif e.kind == "file":
            out.append(UnreadableError(e.path, "a regular file, not a folder: this part of the store is not read"))
        else:
            visit(e.path, part.depth)
    for name in STORE_FILES:
        e = entry(root / name)
        if e.kind == "broken" and not (root / name).is_symlink():
            continue
        if e.reason is not None and not (name != "checkpoint" and e.kind == "folder"):
            out.append(e.error())
    return out


def _visit_local(folder, depth: int, out: list) -> None:
    """:func:`unreadable_entries`' walk of a local folder (``depth`` levels below it) by ``os.scandir``, with what
    :func:`entries` would say of each entry: a plain file or folder (its listed type says so, and it is no link)
    costs its access check alone, no ``stat`` and no :class:`Entry` (a fleet's 7,500 queue folders, every audit);
    anything else (a link, a FIFO, a type the listing does not give) is looked at as :func:`entries` looks.  The
    folders below are walked by their listed paths' text: a ``Path`` is made only for an entry reported (40,000
    queue folders, every audit)."""
    try:
        found = scanned(folder)
    except (NotADirectoryError, FileNotFoundError):
        return
    except OSError as e:
        out.append(UnreadableError(Path(folder), _os_reason(e)))
        return
    for e in found:
        try:
            plain = None if e.is_symlink() else "file" if e.is_file(follow_symlinks=False) else \
                "folder" if e.is_dir(follow_symlinks=False) else None
        except OSError:
            plain = None
        if plain is None:
            looked = _local_entry(e.name, Path(e.path), e.path)
            if looked.reason is not None:
                out.append(looked.error())
            elif looked.is_folder and depth > 0:
                _visit_local(looked.path, depth - 1, out)
            continue
        denied = _denied(plain, e.path)
        if denied is not None:
            out.append(UnreadableError(Path(e.path), denied))
        elif plain == "folder" and depth > 0:
            _visit_local(e.path, depth - 1, out)


def part_of(error: StoreFormatError, root) -> str | None:
    """The store part (``commitlog``, ``consumequeue``, ``index``, ``config``) or root file an error's path
    lies in, relative to ``root``."""
    try:
        rel = Path(error.file).relative_to(str(as_path(root)))
    except ValueError:
        return None
    return rel.parts[0] if rel.parts else None


#: a file on another file system up to this size is read into memory whole; a bigger one (a full index file is
#: 420 MB) is staged in a temp file and mapped, so a task's memory does not grow with it
STAGE_ABOVE = 64 << 20
#: a local file up to this size is read into ``bytes``, not mapped: mapping and unmapping a small file costs more
#: than copying it (an unmap also makes every thread of the process drop its page mappings)
READ_UP_TO = 64 << 10
_STAGE_CHUNK = 8 << 20


class ReadOnlyMap:
    """A read-only view of a regular file: an mmap, or a local file of at most :data:`READ_UP_TO` bytes read into
    ``bytes`` (an empty file, an empty bytes).  Never writable; opened through :func:`store_format.fs.open_file`
    (anything but a regular file is an ``UnreadableError``).  A file on a
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
        if size <= READ_UP_TO:  # its bytes read: cheaper than a map and its unmapping (thousands of 8 KiB segments)
            self.buf = _pread(self._f.fileno(), self.path, size, 0) if size else b""  # fewer if it shrank
            return
        self.buf = _FileMap(self._f.fileno(), 0, access=mmap.ACCESS_READ)
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


def read_written(path, unit: int = 1) -> tuple[bytes | bytearray, int]:
    """(a file's bytes up to and including its last non-zero one, rounded up to a whole ``unit`` within the file;
    the file's length): what a reader of a preallocated file needs (a consume queue is 6 MB of which a small queue
    writes a page).  A local file is read by ``pread`` of its data extents, its holes zeros left unread, and its
    last non-zero byte found as :meth:`ReadOnlyMap.written_length` finds it, a block at a time from the end: no
    map, whose setup, first page fault and unmap cost about ten times these few system calls, which a fleet's
    thousands of small queue files paid each time a file was read.  A file read through pyarrow.fs is read as
    :class:`ReadOnlyMap` reads it."""
    path = as_path(path)
    if isinstance(path, StorePath):
        with ReadOnlyMap(path) as m:
            end = min(len(m), -(-m.written_length() // unit) * unit)
            return bytes(m.buf[:end]), len(m)
    fd, st = open_fd_stat(path)
    try:
        length = st.st_size
        extents = search_extents(fd, length)
        found, start, block = last_nonzero(extents, lambda a, b: _pread(fd, path, b - a, a))
        note_zeros_from(fd, found, length)
        end = min(length, -(-found // unit) * unit)
        if start == 0 and block is not None:  # the block the search read holds it all (a small queue's one page)
            return block[:end] + bytes(max(0, end - len(block))), length
        out = bytearray(end)
        view = memoryview(out)
        for lo, hi in extents:  # the data below the block the search read, which it did not keep
            hi = min(hi, start)
            if lo < hi:
                got = _pread(fd, path, hi - lo, lo)
                view[lo:lo + len(got)] = got
        if block is not None:
            kept = block[:end - start]  # bytes (a pread)
            view[start:start + len(kept)] = kept
        del view
        return out, length
    finally:
        os.close(fd)


def _pread(fd: int, path, length: int, offset: int) -> bytes:
    try:
        return os.pread(fd, length, offset)
    except OSError as e:
        raise UnreadableError(path, _os_reason(e)) from None


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


def _remote_entry(path: StorePath, info: pafs.FileInfo | None = None) -> Entry:
    info = info if info is not None else path.loc.info()
    if info.type == pafs.FileType.File:
        return Entry(path.name, path, "file", info.size or 0, None)
    if info.type == pafs.FileType.Directory:
        return Entry(path.name, path, "folder", 0, None)
    if info.type == pafs.FileType.NotFound:
        return Entry(path.name, path, "broken", 0, "no such file")
    return Entry(path.name, path, "other", 0, "not a regular file")


def map_range(loc: Location, offset: int = 0, length: int | None = None):
    """The bytes ``[offset, offset + length)`` of a file (to its end when ``length`` is None) as ``.buf`` of a context
    manager: a read-only map when the file system is local (the whole file's :class:`ReadOnlyMap`, or a view of its
    range), else one ranged read into ``bytes``."""
    if loc.local_path is not None:
        m = ReadOnlyMap(loc.local_path)
        return m if offset == 0 and length is None else _Window(m, offset, length)
    if length is None:
        length = max(0, loc.size() - offset)
    return _Bytes(loc.read_range(offset, length), loc.path)
