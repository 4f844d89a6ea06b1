"""The writer's open files: one home for how many of them are open at once.

A broker maps every file it writes (``MappedFile``) and keeps it mapped; a writer doing the same holds a
descriptor per file (a Python ``mmap`` keeps a duplicate of the descriptor it maps), so a store of 50,000
consume queues needs 50,000 descriptors and fails with ``Too many open files`` far below that (``ulimit -n``
is 1024 on many machines).  Here every file the writer writes is a :class:`PooledFile` (path, size) and its
descriptor, and its mapping when a reader asks for one, come from the writer's :class:`OpenFiles`: at most
``limit`` files are open; opening one more closes the least recently used.  Closing loses nothing: every
write is a ``pwrite`` into the page cache (what the mapping shows too), so a file opened again holds the same
bytes.  The ``fdatasync`` a clean shutdown owes a file written since its last sync (``MappedFile.flush``) is
done when the writer closes it; the files closed for room while written are synced together at the end
(:meth:`OpenFiles.close_all`, on a few threads: thousands of small syncs overlap in the file system's journal).

Layout of what it manages (nothing on disk of its own)::

    OpenFiles   lru: PooledFile -> None, least recently used first; len(lru) <= limit (pinned files excepted)
                unsynced: files closed for room with writes not yet synced
    PooledFile  path, size, fd (-1: closed), map (None: not mapped), dirty (written since the last sync),
                pins (writes in flight on the writer's I/O thread: never closed while > 0)
"""
from __future__ import annotations

import mmap
import os
import threading
from collections import OrderedDict
from pathlib import Path

from ..errors import ErrorKind, WriterError

#: Files a writer keeps open at once.  Each costs one descriptor, two while it is mapped (``mmap`` keeps its own
#: duplicate), so a writer holds at most 2 x 256 = 512 descriptors: half of the common ``ulimit -n`` of 1024,
#: the rest left to the process (a Spark driver's sockets and jars, the job's inputs).  256 is also far more
#: than the files a put touches (one segment, one consume queue and its ext file, one index file): a store
#: with fewer queues never closes a file early, so its speed is as before.
MAX_OPEN_FILES = 256
_SYNC_THREADS = 8  # close_all's syncs of files closed for room (8 threads: ~4.5x one on ext4)


def default_limit() -> int:
    """:data:`MAX_OPEN_FILES`, or a quarter of ``RLIMIT_NOFILE`` where the process may open fewer than 1024."""
    import resource

    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY:
        return MAX_OPEN_FILES
    return max(4, min(MAX_OPEN_FILES, soft // 4))


class OpenFiles:
    """At most ``limit`` :class:`PooledFile` open (descriptor, and mapping if asked for), least recently used
    closed first.  One per writer; the writer's thread opens and closes, its I/O thread only writes through
    files pinned for it (:meth:`PooledFile.pin`)."""

    def __init__(self, limit: int | None = None):
        self.limit = default_limit() if limit is None else max(1, int(limit))
        self._lru: OrderedDict[PooledFile, None] = OrderedDict()
        self._unsynced: dict[PooledFile, None] = {}
        self._lock = threading.Lock()  # pins (taken here, released on the I/O thread) and the eviction scan
        self.opened = 0  # opens so far (a file opened again after its eviction counts again)
        self.evicted = 0

    def __len__(self) -> int:
        return len(self._lru)

    def file(self, path: str | os.PathLike, size: int, create: bool) -> "PooledFile":
        """A file of ``size`` bytes to write: created sparse and zero-filled (``create``), or an existing one
        that must have that size."""
        return PooledFile(self, Path(path), size, create)

    def _admit(self, f: "PooledFile", fd: int) -> None:
        if len(self._lru) >= self.limit:
            self._make_room()
        f.fd = fd
        self._lru[f] = None
        self._unsynced.pop(f, None)  # open again: synced when it is closed
        self.opened += 1

    def _make_room(self) -> None:
        with self._lock:
            kept = 0  # pinned, or a view of its mapping held: moved to the end, tried again next time
            while len(self._lru) >= self.limit and kept < len(self._lru):
                victim = next(iter(self._lru))
                dirty = victim.dirty
                if victim.pins == 0 and victim._shut(sync=False):
                    self.evicted += 1
                    if dirty:
                        self._unsynced[victim] = None
                else:
                    self._lru.move_to_end(victim)
                    kept += 1

    def touch(self, f: "PooledFile") -> None:
        self._lru.move_to_end(f)

    def forget(self, f: "PooledFile") -> None:
        self._lru.pop(f, None)

    def close_all(self) -> None:
        """Close (and sync) every file still open, and sync the files closed for room since they were written."""
        for f in list(self._lru):
            f.close()
        pending, self._unsynced = list(self._unsynced), {}
        if len(pending) <= _SYNC_THREADS:
            for f in pending:
                f.sync_closed()
            return
        from concurrent.futures import ThreadPoolExecutor

        def sync(files):
            for f in files:
                f.sync_closed()

        with ThreadPoolExecutor(_SYNC_THREADS, thread_name_prefix="store-writer-sync") as ex:
            for done in [ex.submit(sync, pending[i::_SYNC_THREADS]) for i in range(_SYNC_THREADS)]:
                done.result()


class PooledFile:
    """A preallocated (sparse, zero-filled) file the writer writes, like RocketMQ's MappedFile.

    Writes go through ``pwrite`` (the page cache a mapping shares: on ext4 the first write fault into a hole of
    a mapping costs milliseconds, and a store creates many files); :attr:`map` maps the file for readers (the
    index file's slots, a record read back).  Its descriptor and mapping come and go with the writer's
    :class:`OpenFiles`."""

    __slots__ = ("pool", "path", "size", "fd", "_map", "dirty", "pins", "__weakref__")

    def __init__(self, pool: OpenFiles, path: Path, size: int, create: bool):
        self.pool, self.path, self.size = pool, path, size
        self.fd, self._map, self.dirty, self.pins = -1, None, False, 0
        if create:
            fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o666)
            try:
                os.ftruncate(fd, size)
            except BaseException:
                os.close(fd)
                raise
            pool._admit(self, fd)
        else:  # opened when first used (reopening a store of 50,000 queues writes to the last file of each)
            have = os.stat(path).st_size
            if have != size:
                raise WriterError(ErrorKind.BAD_GEOMETRY, f"file is {have} bytes, the configuration says {size}",
                                  file=str(path))

    def _descriptor(self) -> int:
        if self.fd < 0:
            fd = os.open(self.path, os.O_RDWR | os.O_CLOEXEC)
            try:
                have = os.fstat(fd).st_size
            except BaseException:
                os.close(fd)
                raise
            if have != self.size:  # changed under the writer since it was listed
                os.close(fd)
                raise WriterError(ErrorKind.BAD_GEOMETRY, f"file is {have} bytes, the writer expected {self.size}",
                                  file=str(self.path))
            self.pool._admit(self, fd)
        else:
            self.pool.touch(self)
        return self.fd

    @property
    def map(self) -> mmap.mmap:
        """The file mapped for reading and writing (mapped again after the pool closed it)."""
        fd = self._descriptor()
        if self._map is None:
            self._map = mmap.mmap(fd, self.size, access=mmap.ACCESS_WRITE)
        return self._map

    def write(self, pos: int, data) -> None:
        if pos < 0 or pos + len(data) > self.size:
            raise WriterError(ErrorKind.OUT_OF_RANGE, f"write of {len(data)} bytes at {pos} runs past the "
                              f"{self.size}-byte file", file=str(self.path), position=pos)
        fd = self._descriptor()
        self.dirty = True
        done = os.pwrite(fd, data, pos)
        while done < len(data):  # a short write: finish it
            done += os.pwrite(fd, memoryview(data)[done:], pos + done)

    _IOV_MAX = 1024  # os.sysconf("SC_IOV_MAX") on Linux

    def writev(self, pos: int, pieces: list) -> int:
        """Write ``pieces`` back to back from ``pos`` (pwritev: no joined copy); returns bytes written.  On the
        writer's I/O thread only while :meth:`pin` holds the file open."""
        total = sum(map(len, pieces))
        if pos < 0 or pos + total > self.size:
            raise WriterError(ErrorKind.OUT_OF_RANGE, f"write of {total} bytes at {pos} runs past the "
                              f"{self.size}-byte file", file=str(self.path), position=pos)
        fd = self.fd if self.pins else self._descriptor()
        self.dirty = True
        at = pos
        for i in range(0, len(pieces), self._IOV_MAX):
            group = pieces[i:i + self._IOV_MAX]
            want = sum(map(len, group))
            done = os.pwritev(fd, group, at)
            if done != want:  # a short write: finish this group the plain way
                rest = b"".join(group)[done:]
                while rest:
                    k = os.pwrite(fd, rest, at + done)
                    done += k
                    rest = rest[k:]
            at += want
        return total

    def pin(self) -> None:
        """Keep the file open until :meth:`unpin` (a write handed to another thread)."""
        self._descriptor()
        with self.pool._lock:
            self.pins += 1

    def unpin(self) -> None:
        with self.pool._lock:
            self.pins -= 1

    def release(self) -> None:
        """Done appending to this file for now (a later one took over): give its descriptor back early."""
        if self.fd >= 0 and not self.pins:
            self._shut(sync=False)

    def _shut(self, sync: bool) -> bool:
        """Unmap and close; False (still open) while a reader holds a view of the mapping."""
        if self._map is not None:
            try:
                self._map.close()
            except BufferError:  # a buffer of it is exported: keep it open
                return False
            self._map = None
        if sync and self.dirty:
            os.fdatasync(self.fd)
            self.dirty = False
        os.close(self.fd)
        self.fd = -1
        self.pool.forget(self)
        return True

    def close(self) -> None:
        """The writer is done with the file: written data synced (``MappedFile.flush``), descriptor closed.  A
        file the pool closed for room since it was written is synced by :meth:`OpenFiles.close_all`."""
        if self.fd >= 0 and not self._shut(sync=True):
            raise BufferError(f"{self.path}: closed while a view of its mapping is held")

    def sync_closed(self) -> None:
        """``fdatasync`` of a file written, then closed for room."""
        fd = os.open(self.path, os.O_RDONLY | os.O_CLOEXEC)
        try:
            os.fdatasync(fd)
        finally:
            os.close(fd)
        self.dirty = False

    def __repr__(self) -> str:
        return f"PooledFile({str(self.path)!r}, {self.size}, {'open' if self.fd >= 0 else 'closed'})"
