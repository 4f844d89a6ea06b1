"""The RocksDB consume queue (``storeType=defaultRocksDB``, RocketMQ 5.2 and later), read without ever writing.

The database is ``<store root>/consumequeue/`` itself.  Column family ``default`` holds one key per unit::

    key   int topicLength | 0x01 | topic | 0x01 | int queueId | 0x01 | long queueOffset        (19 + T bytes)
    value long physicalOffset | int size | long tagsCode | long storeTimestamp                  (28 bytes)

and ``offset`` one ``max`` row per queue (its last unit), ``min`` rows once someone asked for a queue's min offset,
and the ``CHECKPOINT_TOPIC`` row (8 bytes: the end of the last dispatched record)::

    key   int topicLength | 0x01 | topic | 0x01 | "max" or "min" | 0x01 | int queueId          (14 + T bytes)
    value long physicalOffset | long queueOffset                                              (16 bytes)

Byte for byte, with the upstream source of each fact: docs/rocksdb-consume-queue.md.  This module is the one home
of that layout (keys, values, the bounds RocketMQ serves from them) and of opening such a database.

Never opened for writing: RocksDB's read-only open writes nothing, but the binding (``rocksdict``) writes a
``rocksdict-config.json`` into any folder it opens, so :class:`RocksDBQueues` opens a scratch folder holding copies
of the small files a read-only open reads and links to the table files (which RocksDB never writes once they
exist); every file is vetted with :func:`store_format.fs.open_fd` first.  No binding, a database RocksDB will not
open, or a store on a remote file system: :class:`RocksDBQueueUnreadable` (kind ``UNREADABLE``), so an audit can
say the backend is unreadable and go on.  A malformed key or value is a positioned :class:`RocksDBEntryError`,
kept in :attr:`RocksDBQueues.problems`, and its row left out.
"""
from __future__ import annotations

import os
import re
import shutil
import struct
import tempfile
from dataclasses import dataclass
from typing import Iterable, Iterator

import numpy as np
import pyarrow.fs as pafs

from . import fs
from .errors import ErrorKind, StoreFormatError

DEFAULT_CF, OFFSET_CF = "default", "offset"  # ConsumeQueueRocksDBStorage.postLoad
SEPARATOR = b"\x01"  # AbstractRocksDBStorage.CTRL_1
UNIT_KEY_FIXED = 4 + 1 + 1 + 4 + 1 + 8  # a unit key's bytes besides the topic
OFFSET_KEY_FIXED = 4 + 1 + 1 + 3 + 1 + 4  # an offset key's bytes besides the topic
MAX, MIN = "max", "min"
CHECKPOINT_TOPIC = "CHECKPOINT_TOPIC"  # TopicValidator.RMQ_SYS_ROCKSDB_OFFSET_TOPIC
UNIT_VALUE = struct.Struct(">qiqq")  # physical offset, size, tagsCode, store timestamp: RocksDBConsumeQueueTable
OFFSET_VALUE = struct.Struct(">qq")  # physical offset, queue offset: RocksDBConsumeQueueOffsetTable
CHECKPOINT_VALUE = struct.Struct(">q")
UNIT_VALUE_DTYPE = np.dtype([("physical_offset", ">i8"), ("size", ">i4"), ("tags_code", ">i8"),
                             ("store_timestamp", ">i8")])
_INT, _LONG = struct.Struct(">i"), struct.Struct(">q")
_HEX_SHOWN = 64  # key bytes an error names in hex (a key is at most 300 bytes: RocksDBConsumeQueueStore.MAX_KEY_LEN)
WINDOW = 1 << 16  # units per window of :meth:`RocksDBQueues.windows`: a bounded piece of a queue of any length

# What a read-only open reads: the small files are copied, the table files linked (immutable once written)
_COPIED = re.compile(r"CURRENT|IDENTITY|MANIFEST-[0-9]+|OPTIONS-[0-9]+|[0-9]+\.log")
_LINKED = re.compile(r"[0-9]+\.(sst|blob)")


class RocksDBQueueUnreadable(fs.UnreadableError):
    """The RocksDB consume queue cannot be read here: no binding, a database RocksDB will not open, or a store
    on a file system RocksDB cannot read (kind ``UNREADABLE``, the folder and the reason in words)."""


class RocksDBEntryError(StoreFormatError):
    """A key or value of the database that is not what RocketMQ writes: ``file`` names the folder, the column
    family and the key (hex), ``position`` the byte in the key or value, ``field`` which part."""

    def __init__(self, kind: ErrorKind, message: str, *, column_family: str, key: bytes, position: int, field: str,
                 folder: str | None = None):
        self.column_family, self.key = column_family, bytes(key)
        shown = self.key[:_HEX_SHOWN].hex() + ("..." if len(self.key) > _HEX_SHOWN else "")
        super().__init__(kind, message, file=f"{folder or 'consumequeue'} column family {column_family!r} key "
                                             f"0x{shown}", position=position, field=field)


@dataclass(frozen=True)
class UnitKey:
    topic: str
    queue_id: int
    queue_offset: int


@dataclass(frozen=True)
class OffsetKey:
    topic: str
    queue_id: int
    marker: str  # MAX or MIN


@dataclass(frozen=True)
class OffsetRow:
    """An ``offset`` row: the physical and queue offset of a queue's last (``max``) or first (``min``) unit."""

    physical_offset: int
    queue_offset: int


@dataclass(frozen=True)
class QueueBounds:
    """What the ``offset`` family and the keys say of one queue, and the bounds RocketMQ 5.3.3 serves from them."""

    topic: str
    queue_id: int
    max_row: OffsetRow | None
    min_row: OffsetRow | None
    max_offset: int  # getMaxOffsetInQueue: the max row's queue offset + 1, or 0
    min_offset: int  # getMinOffsetInQueue, the first time a broker is asked (it then writes a min row)
    first_unit: int | None  # the lowest queue offset with a key (None: no unit)
    last_unit: int | None  # the highest


@dataclass
class QueueUnits:
    """Units of one queue in queue-offset order, as numpy columns (the flat queue's unit plus its store time)."""

    topic: str
    queue_id: int
    queue_offset: np.ndarray  # int64
    physical_offset: np.ndarray  # int64
    size: np.ndarray  # int32
    tags_code: np.ndarray  # int64
    store_timestamp: np.ndarray  # int64

    def __len__(self) -> int:
        return len(self.queue_offset)

    @classmethod
    def of(cls, topic: str, queue_id: int, offsets: bytes, values: bytes) -> "QueueUnits":
        """From the keys' big-endian queue offsets and the 28-byte values, concatenated."""
        v = np.frombuffer(values, UNIT_VALUE_DTYPE, len(values) // UNIT_VALUE.size)
        return cls(topic, queue_id, np.frombuffer(offsets, ">i8").astype(np.int64),
                   v["physical_offset"].astype(np.int64),
                   v["size"].astype(np.int32), v["tags_code"].astype(np.int64), v["store_timestamp"].astype(np.int64))

    @classmethod
    def concat(cls, topic: str, queue_id: int, parts: list["QueueUnits"]) -> "QueueUnits":
        if not parts:
            return cls.of(topic, queue_id, b"", b"")
        return cls(topic, queue_id, *(np.concatenate([getattr(p, f) for p in parts]) for f in
                                      ("queue_offset", "physical_offset", "size", "tags_code", "store_timestamp")))

    def rows(self) -> list[list[int]]:
        """``[queue_offset, physical_offset, size, tags_code]`` per unit, as RocketMQ's ``CqUnit`` has them."""
        return np.stack([self.queue_offset, self.physical_offset, self.size.astype(np.int64), self.tags_code],
                        axis=1).tolist()


# ---------------------------------------------------------------------------------------------------------
# Keys and values

def _topic_bytes(topic: str) -> bytes:
    return topic.encode("utf-8")


def queue_prefix(topic: str, queue_id: int) -> bytes:
    """The first ``11 + T`` bytes every unit key of the queue starts with."""
    t = _topic_bytes(topic)
    return _INT.pack(len(t)) + SEPARATOR + t + SEPARATOR + _INT.pack(queue_id) + SEPARATOR


def _past_queue(prefix: bytes) -> bytes:
    """The smallest key after every key that starts with ``prefix`` (its last 0x01 made 0x02, as RocketMQ's range
    delete of a queue ends)."""
    return prefix[:-1] + b"\x02"


def unit_key(topic: str, queue_id: int, queue_offset: int) -> bytes:
    return queue_prefix(topic, queue_id) + _LONG.pack(queue_offset)


def offset_key(topic: str, queue_id: int, marker: str) -> bytes:
    t = _topic_bytes(topic)
    return _INT.pack(len(t)) + SEPARATOR + t + SEPARATOR + marker.encode("ascii") + SEPARATOR + _INT.pack(queue_id)


def unit_value(physical_offset: int, size: int, tags_code: int, store_timestamp: int) -> bytes:
    return UNIT_VALUE.pack(physical_offset, size, tags_code, store_timestamp)


def _topic_of(key: bytes, fixed: int, cf: str, folder) -> tuple[str, int]:
    """(topic, its length) of a key that starts ``int T, 0x01, topic, 0x01`` and has ``fixed`` bytes besides it."""
    def bad(kind, message, position, field):
        return RocksDBEntryError(kind, message, column_family=cf, key=key, position=position, field=field,
                                 folder=folder)

    if len(key) < fixed:
        raise bad(ErrorKind.TRUNCATED, f"a key of {len(key)} bytes; RocketMQ's are at least {fixed}", len(key),
                  "key")
    (t,) = _INT.unpack_from(key)
    if t < 0 or len(key) != fixed + t:
        raise bad(ErrorKind.BAD_LENGTH, f"topic length {t} makes a key of {fixed + t} bytes, this one has "
                                        f"{len(key)}", 0, "key.topic_length")
    for at in (4, 5 + t):
        if key[at:at + 1] != SEPARATOR:
            raise bad(ErrorKind.BAD_MAGIC, f"separator byte 0x{key[at]:02x}, RocketMQ writes 0x01", at,
                      "key.separator")
    try:
        return key[5:5 + t].decode("utf-8"), t
    except UnicodeDecodeError as e:
        raise bad(ErrorKind.BAD_UTF8, f"topic is not UTF-8 ({e.reason})", 5 + e.start, "key.topic") from None


def decode_unit_key(key: bytes, *, folder=None) -> UnitKey:
    """A ``default``-family key; :class:`RocksDBEntryError` when it is not one RocketMQ writes."""
    topic, t = _topic_of(key, UNIT_KEY_FIXED, DEFAULT_CF, folder)
    if key[10 + t:11 + t] != SEPARATOR:
        raise RocksDBEntryError(ErrorKind.BAD_MAGIC, f"separator byte 0x{key[10 + t]:02x}, RocketMQ writes 0x01",
                                column_family=DEFAULT_CF, key=key, position=10 + t, field="key.separator",
                                folder=folder)
    (queue_id,), (queue_offset,) = _INT.unpack_from(key, 6 + t), _LONG.unpack_from(key, 11 + t)
    for value, at, name in ((queue_id, 6 + t, "queue_id"), (queue_offset, 11 + t, "queue_offset")):
        if value < 0:
            raise RocksDBEntryError(ErrorKind.OUT_OF_RANGE, f"negative {name.replace('_', ' ')} {value}",
                                    column_family=DEFAULT_CF, key=key, position=at, field=f"key.{name}",
                                    folder=folder)
    return UnitKey(topic, queue_id, queue_offset)


def check_unit_value(key: bytes, value: bytes, *, folder=None) -> None:
    if len(value) != UNIT_VALUE.size:
        raise RocksDBEntryError(ErrorKind.BAD_LENGTH, f"a unit value of {len(value)} bytes; RocketMQ writes "
                                                      f"{UNIT_VALUE.size}", column_family=DEFAULT_CF, key=key,
                                position=min(len(value), UNIT_VALUE.size), field="value", folder=folder)


def decode_offset_key(key: bytes, *, folder=None) -> OffsetKey:
    """An ``offset``-family key; :class:`RocksDBEntryError` when it is not one RocketMQ writes."""
    topic, t = _topic_of(key, OFFSET_KEY_FIXED, OFFSET_CF, folder)
    marker = key[6 + t:9 + t]
    if marker not in (b"max", b"min"):
        raise RocksDBEntryError(ErrorKind.BAD_MAGIC, f"marker {marker!r}, RocketMQ writes 'max' or 'min'",
                                column_family=OFFSET_CF, key=key, position=6 + t, field="key.marker", folder=folder)
    if key[9 + t:10 + t] != SEPARATOR:
        raise RocksDBEntryError(ErrorKind.BAD_MAGIC, f"separator byte 0x{key[9 + t]:02x}, RocketMQ writes 0x01",
                                column_family=OFFSET_CF, key=key, position=9 + t, field="key.separator",
                                folder=folder)
    (queue_id,) = _INT.unpack_from(key, 10 + t)
    if queue_id < 0:
        raise RocksDBEntryError(ErrorKind.OUT_OF_RANGE, f"negative queue id {queue_id}", column_family=OFFSET_CF,
                                key=key, position=10 + t, field="key.queue_id", folder=folder)
    return OffsetKey(topic, queue_id, marker.decode("ascii"))


def is_checkpoint(k: OffsetKey) -> bool:
    return k.topic == CHECKPOINT_TOPIC and k.marker == MAX and k.queue_id == 0


def decode_offset_value(k: OffsetKey, key: bytes, value: bytes, *, folder=None) -> OffsetRow | int:
    """An ``offset`` row's value: an :class:`OffsetRow`, or the checkpoint row's physical offset."""
    want = CHECKPOINT_VALUE if is_checkpoint(k) else OFFSET_VALUE
    if len(value) != want.size:
        raise RocksDBEntryError(ErrorKind.BAD_LENGTH, f"a value of {len(value)} bytes; RocketMQ writes {want.size} "
                                f"for {'the checkpoint row' if want is CHECKPOINT_VALUE else 'an offset row'}",
                                column_family=OFFSET_CF, key=key, position=min(len(value), want.size),
                                field="value", folder=folder)
    if want is CHECKPOINT_VALUE:
        return CHECKPOINT_VALUE.unpack(value)[0]
    return OffsetRow(*OFFSET_VALUE.unpack(value))


# ---------------------------------------------------------------------------------------------------------
# Detection from the files alone

def queue_folder(store_root) -> "fs.Location":
    return fs.resolve(store_root).child("consumequeue")


def is_rocksdb_queue_folder(path) -> bool:
    """Whether ``path`` (a ``consumequeue/`` folder, local or remote) holds a RocksDB database: a regular file
    ``CURRENT`` whose text names a ``MANIFEST-`` file, and a ``MANIFEST-*`` or ``*.sst`` beside it."""
    try:
        loc = fs.resolve(path)
        names = {i.base_name: i for i in loc.list()}
        current = names.get("CURRENT")
        if current is None or current.type != pafs.FileType.File or current.size > 256:
            return False
        if not loc.child("CURRENT").read_range(0, 256).startswith(b"MANIFEST-"):
            return False
    except (StoreFormatError, OSError):
        return False
    return any(n.startswith("MANIFEST-") or n.endswith(".sst") for n in names)


# ---------------------------------------------------------------------------------------------------------
# The reader

def _shadow(folder: str) -> str:
    """A scratch folder RocksDB may open in place of ``folder``: copies of the small files a read-only open reads,
    links to the table files; nothing else (no ``LOCK``, no ``LOG``).  Each file is vetted by ``fs.open_fd``."""
    try:
        names = sorted(os.listdir(folder))
    except OSError as e:
        raise RocksDBQueueUnreadable(folder, f"cannot list it: {e.strerror or e}") from None
    shadow = tempfile.mkdtemp(prefix="rocketmq-forensics-rocksdb-")
    try:
        for name in names:
            copy, link = _COPIED.fullmatch(name), _LINKED.fullmatch(name)
            if not (copy or link):
                continue
            src = os.path.join(folder, name)
            try:
                fd = fs.open_fd(src)  # a FIFO, device or link loop is refused here, never opened by RocksDB
            except fs.UnreadableError as e:
                raise RocksDBQueueUnreadable(src, f"{e.reason}: the database cannot be read") from None
            try:
                if copy:
                    with os.fdopen(os.dup(fd), "rb") as f, open(os.path.join(shadow, name), "wb") as out:
                        shutil.copyfileobj(f, out)
                else:
                    os.symlink(os.path.realpath(src), os.path.join(shadow, name))
            finally:
                os.close(fd)
    except BaseException:
        shutil.rmtree(shadow, ignore_errors=True)
        raise
    return shadow


def _binding():
    try:
        import rocksdict
    except ImportError as e:
        return None, e
    return rocksdict, None


class RocksDBQueues:
    """The RocksDB consume queue of a store, open read-only: its queues, their units in queue-offset order (in
    bounded windows), their bounds and the checkpoint row.  Close it (or use ``with``) to let its table files go.

    The backend a queue model can ask: :meth:`queues`, :meth:`units` / :meth:`windows`, :meth:`bounds`."""

    def __init__(self, store_root):
        loc = queue_folder(store_root)
        if loc.local_path is None:
            raise RocksDBQueueUnreadable(loc.uri(), "a RocksDB consume queue is read only from a local disk (RocksDB "
                                         "opens its files by path): copy the store's consumequeue/ folder to a "
                                         "local disk and give that store")
        self.folder = loc.local_path
        rocksdict, missing = _binding()
        if rocksdict is None:
            raise RocksDBQueueUnreadable(self.folder, f"no RocksDB binding could be loaded ({missing}): install "
                                                      "rocksdict (pip install rocksdict)")
        if not is_rocksdb_queue_folder(self.folder):
            raise RocksDBQueueUnreadable(self.folder, "not a RocksDB database: no CURRENT naming a MANIFEST, or no "
                                                      "MANIFEST-* or *.sst beside it")
        self._rd = rocksdict
        self.problems: dict[tuple[str, bytes], RocksDBEntryError] = {}
        self._offsets: dict[tuple[str, int], dict[str, OffsetRow]] | None = None
        self._checkpoint: int | None = None
        shadow = _shadow(self.folder)
        try:
            opts = rocksdict.Options(raw_mode=True)
            opts.create_if_missing(False)
            opts.set_max_open_files(-1)  # every table file opened now, so the scratch folder can go at once
            self.column_families = rocksdict.Rdict.list_cf(shadow, opts)
            self._db = rocksdict.Rdict(shadow, options=opts,
                                       column_families={n: rocksdict.Options(raw_mode=True)
                                                        for n in self.column_families if n != DEFAULT_CF},
                                       access_type=rocksdict.AccessType.read_only())
        except Exception as e:  # the binding's own errors (corrupt MANIFEST, a missing table file...)
            raise RocksDBQueueUnreadable(self.folder, f"RocksDB will not open it read-only: {e}") from None
        finally:
            # Gone before any read: a process that ends without closing (a Spark worker is killed, never exits)
            # leaves nothing behind in the temp directory.
            shutil.rmtree(shadow, ignore_errors=True)
        self._cf = {n: self._db.get_column_family(n) for n in self.column_families}

    # -- life ------------------------------------------------------------------------------------------
    def close(self) -> None:
        db, self._db = getattr(self, "_db", None), None
        if db is not None:
            self._cf = {}
            db.close()

    def __enter__(self) -> "RocksDBQueues":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __del__(self):
        try:
            self.close()
        except Exception:  # interpreter shutdown: nothing left to report to
            pass

    # -- iteration ---------------------------------------------------------------------------------------
    def _iter(self, cf: str):
        """An iterator of a family (None: the database has no such family).  No iterate_upper_bound: the binding
        does not keep the bound's bytes alive, so callers stop at their prefix themselves."""
        family = self._cf.get(cf)
        if family is None:
            return None
        ro = self._rd.ReadOptions()
        ro.fill_cache(False)  # a scan passes once: keep the block cache for point reads
        ro.set_verify_checksums(True)
        return family.iter(ro)

    def _done(self, it) -> None:
        """Raise what ended an iteration early: a corrupt block or an unreadable table file."""
        try:
            it.status()
        except Exception as e:
            raise RocksDBQueueUnreadable(self.folder, f"RocksDB stopped reading: {e}") from None

    def _note(self, e: RocksDBEntryError) -> None:
        self.problems.setdefault((e.column_family, e.key), e)

    # -- the backend -------------------------------------------------------------------------------------
    def queues(self) -> list[tuple[str, int]]:
        """Every (topic, queue id) with a unit key or an ``offset`` row, sorted; one seek per queue, not a pass
        over every unit."""
        found = {q for q in self._offset_rows()}
        it = self._iter(DEFAULT_CF)
        if it is not None:
            it.seek_to_first()
            while it.valid():
                key = it.key()
                try:
                    k = decode_unit_key(key, folder=self.folder)
                except RocksDBEntryError as e:
                    self._note(e)
                    it.next()
                    continue
                found.add((k.topic, k.queue_id))
                it.seek(_past_queue(queue_prefix(k.topic, k.queue_id)))
            self._done(it)
        return sorted(found)

    def windows(self, topic: str, queue_id: int, from_offset: int = 0, to_offset: int | None = None,
                window: int = WINDOW) -> Iterator[QueueUnits]:
        """The queue's units with ``from_offset <= queue offset < to_offset``, in order, at most ``window`` at a
        time.  Malformed rows are left out and kept in :attr:`problems`."""
        prefix = queue_prefix(topic, queue_id)
        it = self._iter(DEFAULT_CF)
        if it is None:
            return
        it.seek(prefix + _LONG.pack(max(from_offset, 0)))
        # the prefix fixes the topic, queue id and separators: a well-formed key only adds a non-negative offset,
        # so the loop checks lengths and one bit, and the decoders only say what is wrong with the rest
        whole, stop = len(prefix) + 8, None if to_offset is None else prefix + _LONG.pack(max(to_offset, 0))
        offsets, values, n = bytearray(), bytearray(), 0
        while it.valid():
            key = it.key()
            if not key.startswith(prefix) or (stop is not None and key >= stop):
                break
            value = it.value()
            if len(key) != whole or key[whole - 8] & 0x80 or len(value) != UNIT_VALUE.size:
                try:
                    decode_unit_key(key, folder=self.folder)
                    check_unit_value(key, value, folder=self.folder)
                except RocksDBEntryError as e:
                    self._note(e)
                    it.next()
                    continue
            offsets += key[whole - 8:]
            values += value
            n += 1
            if n == window:
                yield QueueUnits.of(topic, queue_id, offsets, bytes(values))
                offsets, values, n = bytearray(), bytearray(), 0
            it.next()
        self._done(it)
        if n:
            yield QueueUnits.of(topic, queue_id, offsets, bytes(values))

    def units(self, topic: str, queue_id: int, from_offset: int = 0, to_offset: int | None = None) -> QueueUnits:
        """:meth:`windows` as one :class:`QueueUnits` (bound ``to_offset`` for a queue of unknown length)."""
        return QueueUnits.concat(topic, queue_id, list(self.windows(topic, queue_id, from_offset, to_offset)))

    def unit(self, topic: str, queue_id: int, queue_offset: int) -> tuple[int, int, int, int] | None:
        """(physical offset, size, tagsCode, store time) of one unit, or None (no key, or a malformed value)."""
        family = self._cf.get(DEFAULT_CF)
        if family is None or queue_offset < 0:
            return None
        key = unit_key(topic, queue_id, queue_offset)
        value = family.get(key)
        if value is None:
            return None
        try:
            check_unit_value(key, value, folder=self.folder)
        except RocksDBEntryError as e:
            self._note(e)
            return None
        return UNIT_VALUE.unpack(value)

    def offset_rows(self, topic: str, queue_id: int) -> dict[str, OffsetRow]:
        """The queue's ``max`` / ``min`` rows as stored (either may be absent)."""
        return dict(self._offset_rows().get((topic, queue_id), {}))

    def checkpoint(self) -> int | None:
        """The ``CHECKPOINT_TOPIC`` row: the end of the last record dispatched into the database (None: no row)."""
        self._offset_rows()
        return self._checkpoint

    def bounds(self, topic: str, queue_id: int, commitlog_min_offset: int = 0) -> QueueBounds:
        """The queue's rows and keys, and the min/max offsets a 5.3.3 broker serves from them (``getMinOffsetIn
        Queue`` / ``getMaxOffsetInQueue``; ``commitlog_min_offset``: the first CommitLog segment's base offset)."""
        rows = self._offset_rows().get((topic, queue_id), {})
        max_row, min_row = rows.get(MAX), rows.get(MIN)
        first, last = self._key_span(topic, queue_id)
        return QueueBounds(topic, queue_id, max_row, min_row, max_row.queue_offset + 1 if max_row else 0,
                           self._rocketmq_min(topic, queue_id, min_row, max_row, commitlog_min_offset), first, last)

    def scan_problems(self) -> list[RocksDBEntryError]:
        """Every malformed key or value of both families (one pass over the whole database)."""
        it = self._iter(DEFAULT_CF)
        if it is not None:
            it.seek_to_first()
            while it.valid():
                key = it.key()
                try:
                    decode_unit_key(key, folder=self.folder)
                    check_unit_value(key, it.value(), folder=self.folder)
                except RocksDBEntryError as e:
                    self._note(e)
                it.next()
            self._done(it)
        self._offset_rows()
        return list(self.problems.values())

    # -- helpers -----------------------------------------------------------------------------------------
    def _offset_rows(self) -> dict[tuple[str, int], dict[str, OffsetRow]]:
        """Every ``offset`` row, read once (two rows per queue at most, and the checkpoint)."""
        if self._offsets is not None:
            return self._offsets
        out: dict[tuple[str, int], dict[str, OffsetRow]] = {}
        it = self._iter(OFFSET_CF)
        if it is not None:
            it.seek_to_first()
            while it.valid():
                key, value = it.key(), it.value()
                try:
                    k = decode_offset_key(key, folder=self.folder)
                    row = decode_offset_value(k, key, value, folder=self.folder)
                except RocksDBEntryError as e:
                    self._note(e)
                    it.next()
                    continue
                if is_checkpoint(k):
                    self._checkpoint = row
                else:
                    out.setdefault((k.topic, k.queue_id), {})[k.marker] = row
                it.next()
            self._done(it)
        self._offsets = out
        return out

    def _key_span(self, topic: str, queue_id: int) -> tuple[int | None, int | None]:
        prefix = queue_prefix(topic, queue_id)
        first = next(self.windows(topic, queue_id, 0, None, window=1), None)
        if first is None:
            return None, None
        it = self._iter(DEFAULT_CF)
        it.seek_for_prev(_past_queue(prefix))
        while it.valid() and it.key().startswith(prefix):
            try:
                return int(first.queue_offset[0]), decode_unit_key(it.key(), folder=self.folder).queue_offset
            except RocksDBEntryError as e:
                self._note(e)
                it.prev()
        self._done(it)
        return int(first.queue_offset[0]), int(first.queue_offset[0])

    def _rocketmq_min(self, topic: str, queue_id: int, min_row: OffsetRow | None, max_row: OffsetRow | None,
                      m: int) -> int:
        """RocksDBConsumeQueueOffsetTable.getMinCqOffset on a broker that has not cached the queue yet, ``m`` the
        CommitLog's min offset (:meth:`_min_answer`)."""
        return self._min_answer(topic, queue_id, min_row, max_row, m)[0]

    def _min_answer(self, topic: str, queue_id: int, min_row: OffsetRow | None, max_row: OffsetRow | None,
                    m: int) -> tuple[int, OffsetRow | None]:
        """(what getMinCqOffset answers, the min pair the broker then keeps in memory or None) on a broker that has
        not cached the queue yet (isMinOffsetOk, correctMinCqOffset, binarySearchInCQ), ``m`` the CommitLog's min
        offset.  The broker writes a min row as it answers; this only reads.  The two can disagree (a search that
        finds nothing keeps the max row's pair but answers the old floor): correctMaxCqOffset then refuses."""
        if min_row is not None and min_row.physical_offset >= m:
            return min_row.queue_offset, min_row
        floor = min_row.queue_offset if min_row is not None else 0
        if max_row is None:
            return 0, OffsetRow(m, 0)
        if max_row.physical_offset < m:
            return max_row.queue_offset + 1, OffsetRow(m, max_row.queue_offset + 1)
        found = self.binary_search(topic, queue_id, max_row.queue_offset, floor, m, True)
        if found is not None:
            return found.queue_offset, found
        return floor, max_row if max_row.queue_offset != floor else None

    def binary_search(self, topic: str, queue_id: int, high: int, low: int, target: int,
                      first_at_or_past: bool) -> OffsetRow | None:
        """RocksDBConsumeQueueTable.binarySearchInCQ as 5.3.3 runs it, over the keys from queue offset ``low`` to
        ``high``: ``first_at_or_past`` (its ``min``) the unit of the lowest offset it probes whose physical offset
        is >= ``target``, else the last probed below ``target`` (an exact hit then ends the search with the last
        one probed below it, not necessarily the unit just before).  A missing key moves the low end up.  None:
        no unit qualified."""
        result = None
        while high >= low:
            mid = low + ((high - low) >> 1)
            unit = self.unit(topic, queue_id, mid)
            if unit is None:
                low = mid + 1
                continue
            if unit[0] == target:
                if first_at_or_past:
                    result = OffsetRow(unit[0], mid)
                break
            if unit[0] > target:
                high = mid - 1
                if first_at_or_past:
                    result = OffsetRow(unit[0], mid)
            else:
                low = mid + 1
                if not first_at_or_past:
                    result = OffsetRow(unit[0], mid)
        return result

    def is_empty(self) -> bool:
        """No row in either family: what a broker that crashed before any flush leaves (its writes skip the WAL)."""
        for cf in (DEFAULT_CF, OFFSET_CF):
            it = self._iter(cf)
            if it is None:
                continue
            it.seek_to_first()
            if it.valid():
                return False
            self._done(it)
        return True

    def truncate_dirty(self, offset_to_truncate: int, commitlog_min_offset: int) -> list[MaxCorrection]:
        """What RocketMQ 5.3.3's ``RocksDBConsumeQueueStore.truncateDirty(offsetToTruncate)`` does to the database,
        predicted: nothing when the checkpoint row (0 without one) is <= ``offset_to_truncate``; else the
        checkpoint becomes ``offset_to_truncate`` and every queue whose ``max`` row's physical offset is >= it has
        that row moved back (``RocksDBConsumeQueueOffsetTable.truncateDirty``, ``truncateDirtyOffset``,
        ``correctMaxCqOffset``): to the last unit the search (:meth:`binary_search`, from the queue's min offset)
        finds below the cut; with none, to the min pair (unless max and min offsets are equal: left as it is).  No
        unit key is deleted: the keys past the new max stay until new messages overwrite them.  Where
        correctMaxCqOffset refuses (the min pair is not the min it answered, or lies past the cut: every unit of the
        queue is past it) the broker logs an error and the ``max`` row stays past the cut (``refused``)."""
        if (self.checkpoint() or 0) <= offset_to_truncate:
            return []
        out = []
        for (topic, qid), rows in sorted(self._offset_rows().items()):
            old = rows.get(MAX)
            if old is None or old.physical_offset < offset_to_truncate:
                continue
            served_min, kept = self._min_answer(topic, qid, rows.get(MIN), old, commitlog_min_offset)
            if kept is None or kept.queue_offset != served_min:
                out.append(MaxCorrection(topic, qid, old, old, "its min offset cannot be settled (correctMaxCqOffset "
                                                               "throws \"correctMaxCqOffset error\")"))
                continue
            if kept.physical_offset > offset_to_truncate:
                out.append(MaxCorrection(topic, qid, old, old, f"its first unit (physical offset "
                                                               f"{kept.physical_offset}) lies past the cut too "
                                                               "(correctMaxCqOffset throws \"correctMaxCqOffset "
                                                               "error\")"))
                continue
            below = self.binary_search(topic, qid, old.queue_offset, served_min, offset_to_truncate, False)
            if below is None:
                new = OffsetRow(kept.physical_offset, served_min) if old.queue_offset != served_min else old
            else:
                new = below
            out.append(MaxCorrection(topic, qid, old, new, None))
        return out


@dataclass(frozen=True)
class MaxCorrection:
    """One queue's ``max`` row as ``truncateDirty`` leaves it (:meth:`RocksDBQueues.truncate_dirty`): ``old`` and
    ``new`` rows (the served max offset is the new row's queue offset + 1), and why it stayed (``refused``)."""

    topic: str
    queue_id: int
    old: OffsetRow
    new: OffsetRow
    refused: str | None

    @property
    def units_unserved(self) -> int:
        """Queue offsets the broker no longer serves: from the new max + 1 to the old max."""
        return self.old.queue_offset - self.new.queue_offset


# ---------------------------------------------------------------------------------------------------------
# Reconciliation with the CommitLog

@dataclass(frozen=True)
class ExpectedUnit:
    """A unit a consume queue must hold for a dispatched CommitLog record."""

    topic: str
    queue_id: int
    queue_offset: int
    physical_offset: int
    size: int


@dataclass
class UnitReconciliation:
    missing: list[ExpectedUnit]  # no key at the record's queue offset
    mismatched: list[tuple[ExpectedUnit, tuple[int, int]]]  # a key whose (physical offset, size) is another record's


def expected_units(messages: Iterable) -> list[ExpectedUnit]:
    """The units RocketMQ dispatches for CommitLog messages (``store_format.message.Message``): one per NOT or
    COMMIT record, at its own topic, queue id and queue offset (LMQ multi-dispatch copies are not predicted here)."""
    return [ExpectedUnit(m.topic, m.queue_id, m.queue_offset, m.physical_offset, m.store_size)
            for m in messages if m.dispatchable]


def reconcile(queues: RocksDBQueues, expected: Iterable[ExpectedUnit]) -> UnitReconciliation:
    """Each expected unit against the database: a key at its queue offset that points at its record, another
    record, or no key at all.  Reads each queue once, over the span of offsets expected of it."""
    by_queue: dict[tuple[str, int], list[ExpectedUnit]] = {}
    for e in expected:
        by_queue.setdefault((e.topic, e.queue_id), []).append(e)
    missing, mismatched = [], []
    for (topic, qid), want in sorted(by_queue.items()):
        want.sort(key=lambda e: e.queue_offset)
        i = 0  # the next expected unit; windows come in queue-offset order, so one merge pass
        for w in queues.windows(topic, qid, want[0].queue_offset, want[-1].queue_offset + 1):
            for q, phys, size in zip(w.queue_offset.tolist(), w.physical_offset.tolist(), w.size.tolist()):
                while i < len(want) and want[i].queue_offset < q:
                    missing.append(want[i])
                    i += 1
                while i < len(want) and want[i].queue_offset == q:
                    if (want[i].physical_offset, want[i].size) != (phys, size):
                        mismatched.append((want[i], (phys, size)))
                    i += 1
        missing.extend(want[i:])
    return UnitReconciliation(missing, mismatched)


def missing_units(queues: RocksDBQueues, expected: Iterable[ExpectedUnit]) -> list[ExpectedUnit]:
    """The expected units (:func:`expected_units`) that have no key in the database."""
    return reconcile(queues, expected).missing
