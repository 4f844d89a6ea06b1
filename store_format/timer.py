"""The 5.x timer store: ``timerlog/``, ``timerwheel``, ``config/timercheck``, ``config/timermetrics``.

Mirrors RocketMQ 5.3.3's ``TimerLog``, ``TimerWheel`` / ``Slot``, ``TimerCheckpoint`` and ``TimerMetrics``
(``store/timer/``); the layouts are declared once in :mod:`store_format.layout` (``TIMER_LOG_UNIT``,
``TIMER_LOG_BLANK``, ``TIMER_WHEEL_SLOT``, ``TIMER_CHECKPOINT``).  Big-endian throughout::

    timerlog/<20-digit offset>   rolled like the commitlog (mappedFileSizeTimerLog, 100 MiB by default)
        unit (52)   size i (=52) | prevPos q | magic i | writeTimeMs q | delay i | offsetPy q | sizePy i |
                    realTopicHash i | reserved q
        blank (16)  size i (= bytes left in the file) | 0 q | magic i (0xCBD43194)   -- where 52 + 16 do not fit
    timerwheel                   slotsTotal * 2 slots, one fixed-size (38,707,200-byte) sparse file
        slot (32)   time q (slot time / timerPrecisionMs) | firstPos q | lastPos q | num i | magic i
        index = time % (slotsTotal * 2); a slot is the one for time T only if its time field is T / precision
    config/timercheck            one 4096-byte page: lastReadTimeMs q | lastTimerLogFlushPos q |
                                 lastTimerQueueOffset q | masterTimerQueueOffset q | stateVersion q |
                                 dataVersion.timestamp q | dataVersion.counter q   (the last three added later)
    config/timermetrics          fastjson: {"dataVersion":{...},"timingCount":{"<REAL_TOPIC>":{"count":N,
                                 "timeStamp":ms},...}}   (+ .bak, read as ConfigManager does)

A wheel slot heads a backward chain through the log: ``lastPos`` -> the unit's ``prevPos`` -> ... -> -1
(:func:`walk_chain`, which never loops: a chain goes strictly backwards, anything else is a positioned
``CYCLIC_CHAIN``).

Framing apart from decoding: a timer-log file is walked into positioned units of kind ``entry``, ``blank`` or
``corrupt`` (a size other than 52, a magic ``TimerMessageStore.isMagicOK`` refuses, a blank whose size is not
the bytes left, a partial unit); the zero-filled unwritten tail is not a unit.  :func:`walk_timer_log` is the
scalar walk (one :class:`TimerUnit` per unit), :func:`read_timer_unit_arrays` / :func:`timer_units_of` the same
walk as numpy columns (no Python object per unit), for the audit's bulk path.  Every reader takes a local path
or a :class:`store_format.fs.Location` (:mod:`store_format.rolled`); inputs are opened read-only.
"""
from __future__ import annotations

import bisect
import struct
from dataclasses import dataclass, field
from typing import Iterator

import numpy as np

from . import layout as L
from . import rolled
from .errors import ErrorKind, StoreFormatError
from .fs import UnreadableError

TIMER_LOG_DIR = L.TIMER_LOG_DIR
TIMER_WHEEL_FILE = L.TIMER_WHEEL_FILE
TIMER_CHECK_FILE = L.TIMER_CHECK_FILE  # under config/
TIMER_METRICS_FILE = L.TIMER_METRICS_FILE  # under config/

UNIT = L.TIMER_LOG_UNIT
UNIT_SIZE = UNIT.width  # 52
BLANK_SIZE = L.TIMER_LOG_BLANK.width  # 16
SLOT = L.TIMER_WHEEL_SLOT
SLOT_SIZE = SLOT.width  # 32
_UNIT = struct.Struct(UNIT.struct)
_HEAD = struct.Struct(">i8xi")  # size, magic: where a unit and a blank both keep them
_MAGIC_AT = UNIT.offset("magic")
assert _MAGIC_AT == L.TIMER_LOG_BLANK.offset("magic")

#: kinds of a walked position, as the ``kind`` codes of the bulk arrays index them
UNIT_KINDS = ("entry", "blank", "corrupt")
KIND_ENTRY, KIND_BLANK, KIND_CORRUPT = 0, 1, 2
#: why a unit is corrupt, as the ``reason`` codes of the bulk arrays index them (0: not corrupt)
REASONS = (None, ErrorKind.BAD_LENGTH.value, ErrorKind.BAD_MAGIC.value, ErrorKind.TRUNCATED.value)
REASON_NONE, REASON_BAD_LENGTH, REASON_BAD_MAGIC, REASON_TRUNCATED = range(4)
_REASON_FIELD = {REASON_BAD_LENGTH: "size", REASON_BAD_MAGIC: "magic", REASON_TRUNCATED: "size"}


class TimerStoreError(StoreFormatError):
    """A timer-store file (timer log, wheel, checkpoint, metrics) that cannot be read as RocketMQ writes it."""


def magic_ok(magic: int) -> bool:
    """``TimerMessageStore.isMagicOK``: only the low four flag bits may be set."""
    return (magic | L.TIMER_MAGIC_MASK) == L.TIMER_MAGIC_MASK


def magic_name(magic: int) -> str:
    """``normal``, ``roll``, ``delete`` or ``roll+delete`` (a recall that must itself roll), else ``invalid``."""
    if not magic_ok(magic) or not magic & L.TIMER_MAGIC_DEFAULT:
        return "invalid"
    roll, delete = bool(magic & L.TIMER_MAGIC_ROLL), bool(magic & L.TIMER_MAGIC_DELETE)
    return {(False, False): "normal", (True, False): "roll", (False, True): "delete",
            (True, True): "roll+delete"}[(roll, delete)]


# ------------------------------------------------------------------------------------------- the timer log


@dataclass(frozen=True)
class TimerUnit:
    """One walked position of a timer-log file."""

    kind: str  # "entry" | "blank" | "corrupt"
    file: str
    file_position: int
    timerlog_offset: int  # the file's base offset + file_position
    size: int  # the size field (a blank: the bytes it declares left)
    prev_pos: int = 0
    magic: int = 0
    write_time_ms: int = 0
    delay_ms: int = 0
    physical_offset: int = 0
    store_size: int = 0
    real_topic_hash: int = 0
    reserved: int = 0
    reason: str | None = None  # corrupt: the ErrorKind value
    message: str | None = None

    @property
    def slot_time_ms(self) -> int:
        """The time of the slot the unit was put in (fire time, or the roll's next stop)."""
        return self.write_time_ms + self.delay_ms

    @property
    def is_roll(self) -> bool:
        return bool(self.magic & L.TIMER_MAGIC_ROLL)

    @property
    def is_delete(self) -> bool:
        return bool(self.magic & L.TIMER_MAGIC_DELETE)

    def error(self) -> TimerStoreError | None:
        if self.kind != "corrupt":
            return None
        return TimerStoreError(ErrorKind(self.reason), self.message or "", file=self.file, position=self.file_position,
                               field="magic" if self.reason == ErrorKind.BAD_MAGIC.value else "size")

    def to_dict(self) -> dict:
        d = {"kind": self.kind, "file": self.file, "file_position": self.file_position,
             "timerlog_offset": self.timerlog_offset, "size": self.size}
        if self.kind == "entry" or (self.kind == "corrupt" and self.reason != ErrorKind.TRUNCATED.value):
            d.update(prev_pos=self.prev_pos, magic=self.magic, magic_name=magic_name(self.magic),
                     write_time_ms=self.write_time_ms, delay_ms=self.delay_ms, slot_time_ms=self.slot_time_ms,
                     physical_offset=self.physical_offset, store_size=self.store_size,
                     real_topic_hash=self.real_topic_hash, reserved=self.reserved)
        if self.kind == "blank":
            d["magic"] = self.magic
        if self.kind == "corrupt":
            d.update(reason=self.reason, message=self.message)
        return d


def list_timer_log_files(root) -> list[rolled.RolledFile]:
    """The files of ``timerlog/`` of the store root ``root`` (path or Location) the broker loads, in offset order
    (store_format.rolled's listing; ``Store.timer_log_files`` has every file with its problems)."""
    return rolled.list_rolled_files(rolled.child(root, TIMER_LOG_DIR), part=TIMER_LOG_DIR)


def _file_of(src, base_offset: int | None):
    """(location, base offset, name) of a RolledFile, a path or a Location (base from the 20-digit name)."""
    if isinstance(src, rolled.RolledFile):
        return src.loc, src.base_offset, rolled.name_of(src.loc)
    loc = rolled.location(src)
    if base_offset is None:
        base_offset = int(loc.name) if loc.name.isdigit() else 0
    return loc, base_offset, rolled.name_of(loc)


def walk_timer_log(src, *, base_offset: int | None = None) -> Iterator[TimerUnit]:
    """Every unit of one timer-log file (a :class:`~store_format.rolled.RolledFile`, path or Location), in file
    order, up to the blank that ends a full file or the end of the written bytes (the zero tail is no unit).
    A corrupt unit does not stop the walk (units sit at fixed 52-byte steps); a partial unit ends it."""
    loc, base, name = _file_of(src, base_offset)
    with rolled.open_bytes(loc) as m:
        yield from walk_timer_log_buffer(m.buf, name, base, written=m.written_length())


def walk_timer_log_buffer(buf, file: str, base_offset: int = 0, *, file_length: int | None = None,
                          start: int = 0, written: int | None = None) -> Iterator[TimerUnit]:
    """:func:`walk_timer_log` over bytes: ``buf`` holds the file from ``start`` (a multiple of 52) on; the file
    is ``file_length`` bytes (default: ``start + len(buf)``), whose written data ends at ``written`` (relative to
    ``buf``; default: its last non-zero byte)."""
    from .fs import written_length

    n = len(buf)
    file_length = start + n if file_length is None else file_length
    end = written_length(buf) if written is None else written
    pos = 0
    while pos < end:
        at = start + pos
        left_in_file, avail = file_length - at, n - pos
        common = dict(file=file, file_position=at, timerlog_offset=base_offset + at)
        if avail >= BLANK_SIZE:
            size, magic = _HEAD.unpack_from(buf, pos)
            if magic == L.BLANK_MAGIC:
                if size == left_in_file:
                    yield TimerUnit("blank", size=size, magic=magic, **common)
                    return
                yield TimerUnit("corrupt", size=size, magic=magic, reason=ErrorKind.BAD_LENGTH.value,
                                message=f"blank declares {size} bytes left, the file has {left_in_file} from here",
                                **common)
                pos += UNIT_SIZE
                continue
        if avail < UNIT_SIZE:
            size = struct.unpack_from(">i", buf, pos)[0] if avail >= 4 else 0
            yield TimerUnit("corrupt", size=size, reason=ErrorKind.TRUNCATED.value,
                            message=f"{avail} bytes of a {UNIT_SIZE}-byte unit", **common)
            return
        vals = _UNIT.unpack_from(buf, pos)
        size, magic = vals[0], vals[2]
        kind, reason, message = "entry", None, None
        if size != UNIT_SIZE:
            kind, reason, message = "corrupt", ErrorKind.BAD_LENGTH.value, f"unit size {size}, not {UNIT_SIZE}"
        elif not magic_ok(magic):
            kind, reason, message = "corrupt", ErrorKind.BAD_MAGIC.value, \
                f"magic 0x{magic & 0xFFFFFFFF:X} has bits beyond 0xF"
        yield TimerUnit(kind, size=size, prev_pos=vals[1], magic=magic, write_time_ms=vals[3], delay_ms=vals[4],
                        physical_offset=vals[5], store_size=vals[6], real_topic_hash=vals[7], reserved=vals[8],
                        reason=reason, message=message, **common)
        pos += UNIT_SIZE


@dataclass
class TimerUnitArrays:
    """:func:`walk_timer_log` of one file (or a byte range of it) as numpy columns: the same units in the same
    order.  ``kind`` codes index :data:`UNIT_KINDS`, ``reason`` codes :data:`REASONS`; a blank or a partial
    unit has zeros in the columns its bytes do not hold."""

    file: str
    base_offset: int
    file_position: np.ndarray  # int64
    kind: np.ndarray  # int8
    reason: np.ndarray  # int8
    size: np.ndarray  # int32
    prev_pos: np.ndarray  # int64
    magic: np.ndarray  # int32
    write_time_ms: np.ndarray  # int64
    delay_ms: np.ndarray  # int32
    physical_offset: np.ndarray  # int64
    store_size: np.ndarray  # int32
    real_topic_hash: np.ndarray  # int32

    def __len__(self) -> int:
        return len(self.file_position)

    @property
    def timerlog_offset(self) -> np.ndarray:
        return self.base_offset + self.file_position

    @property
    def slot_time_ms(self) -> np.ndarray:
        return self.write_time_ms + self.delay_ms.astype(np.int64)

    def units(self) -> Iterator[TimerUnit]:
        """The rows as :class:`TimerUnit` (for reports; the bulk path keeps the columns)."""
        for i in range(len(self)):
            code = int(self.reason[i])
            pos = int(self.file_position[i])
            kind = UNIT_KINDS[int(self.kind[i])]
            yield TimerUnit(kind, self.file, pos, self.base_offset + pos, int(self.size[i]), int(self.prev_pos[i]),
                            int(self.magic[i]), int(self.write_time_ms[i]), int(self.delay_ms[i]),
                            int(self.physical_offset[i]), int(self.store_size[i]), int(self.real_topic_hash[i]),
                            0, REASONS[code], None)


_ARRAY_COLUMNS = ("size", "prev_pos", "magic", "write_time_ms", "delay_ms", "physical_offset", "store_size",
                  "real_topic_hash")
_NATIVE = {"i": np.int32, "q": np.int64}


def timer_units_of(buf, *, file: str = "", base_offset: int = 0, file_length: int | None = None, start: int = 0,
                   written: int | None = None) -> TimerUnitArrays:
    """The bulk walk over ``buf`` (the file's bytes from ``start``, a multiple of 52): whole units decoded with
    one structured view, kinds and reasons computed over the columns, the one blank or partial unit at the end
    taken apart by hand.  Same arguments as :func:`walk_timer_log_buffer`."""
    from .fs import written_length

    n = len(buf)
    file_length = start + n if file_length is None else file_length
    end = min(n, written_length(buf) if written is None else written)
    whole = min(n // UNIT_SIZE, -(-end // UNIT_SIZE))  # whole units up to the one holding the last written byte
    view = np.frombuffer(buf, UNIT.dtype(), whole) if whole else None
    cols = {m.name: (view[m.name].astype(_NATIVE[m.code]) if whole else np.zeros(0, _NATIVE[m.code]))
            for m in UNIT.members if m.name in _ARRAY_COLUMNS}
    del view  # no view may outlive a map
    pos = start + np.arange(whole, dtype=np.int64) * UNIT_SIZE
    size, magic = cols["size"], cols["magic"]
    blank_magic = magic == L.BLANK_MAGIC
    is_blank = blank_magic & (size.astype(np.int64) == file_length - pos)
    kind = np.where(is_blank, KIND_BLANK, KIND_ENTRY).astype(np.int8)
    reason = np.zeros(whole, np.int8)
    bad_len = (size != UNIT_SIZE) & ~is_blank
    bad_magic = ~bad_len & ~is_blank & ((magic | L.TIMER_MAGIC_MASK) != L.TIMER_MAGIC_MASK)
    reason[bad_len] = REASON_BAD_LENGTH
    reason[bad_magic] = REASON_BAD_MAGIC
    kind[bad_len | bad_magic] = KIND_CORRUPT
    keep = whole
    blanks = np.flatnonzero(is_blank)
    if len(blanks):
        keep = int(blanks[0]) + 1  # a blank ends the file
    if keep < whole:
        pos, kind, reason = pos[:keep], kind[:keep], reason[:keep]
        cols = {k: v[:keep] for k, v in cols.items()}
    if len(blanks):  # the blank's columns beyond its own fields are not unit fields
        b = keep - 1
        for k in ("prev_pos", "write_time_ms", "delay_ms", "physical_offset", "store_size", "real_topic_hash"):
            cols[k][b] = 0
    elif whole * UNIT_SIZE < end:  # the partial unit at the end of the written bytes
        at, rest = whole * UNIT_SIZE, n - whole * UNIT_SIZE
        extra = next(walk_timer_log_buffer(memoryview(buf)[at:], file, base_offset, file_length=file_length,
                                           start=start + at, written=end - at))
        pos = np.append(pos, extra.file_position)
        is_b = extra.kind == "blank"
        kind = np.append(kind, np.int8(KIND_BLANK if is_b else KIND_CORRUPT))
        reason = np.append(reason, np.int8(0 if is_b else REASONS.index(extra.reason)))
        for k in _ARRAY_COLUMNS:
            cols[k] = np.append(cols[k], cols[k].dtype.type(getattr(extra, k)))
        del rest
    return TimerUnitArrays(file, base_offset, pos, kind, reason, **cols)


def read_timer_unit_arrays(src, *, base_offset: int | None = None) -> TimerUnitArrays:
    """:func:`timer_units_of` of one whole timer-log file (RolledFile, path or Location)."""
    loc, base, name = _file_of(src, base_offset)
    with rolled.open_bytes(loc) as m:
        return timer_units_of(m.buf, file=name, base_offset=base, written=m.written_length())


def read_timer_unit_range(src, start: int, length: int, *, base_offset: int | None = None) -> TimerUnitArrays:
    """The units that start in ``[start, start + length)`` of one timer-log file (``start`` rounded up to a unit
    boundary): one ranged read or a window of the read-only map, for an audit task given a split of the file."""
    loc, base, name = _file_of(src, base_offset)
    first = -(-max(0, start) // UNIT_SIZE) * UNIT_SIZE
    stop = start + length
    file_length = loc.size()
    if first >= min(stop, file_length):
        return timer_units_of(b"", file=name, base_offset=base, file_length=file_length, start=first)
    # a unit that starts before ``stop`` is read whole (up to 52 bytes past the range)
    with rolled.open_bytes(loc, first, min(file_length, stop + UNIT_SIZE - 1) - first) as m:
        arrays = timer_units_of(m.buf, file=name, base_offset=base, file_length=file_length, start=first,
                                written=m.written_length())
    keep = arrays.file_position < stop
    if keep.all():
        return arrays
    cols = {k: getattr(arrays, k)[keep] for k in ("file_position", "kind", "reason", *_ARRAY_COLUMNS)}
    return TimerUnitArrays(name, base, **cols)


class TimerLog:
    """The timer log of a store as one offset space (its rolled files), for lookups by timer-log offset: a wheel
    slot's ``lastPos``, a unit's ``prevPos``.  Files are opened on first use (read-only) and closed by
    :meth:`close` (a context manager)."""

    def __init__(self, root=None, files: list[rolled.RolledFile] | None = None):
        self.files = list_timer_log_files(root) if files is None else list(files)
        self._bases = [f.base_offset for f in self.files]
        self._open: dict[int, object] = {}

    @property
    def end_offset(self) -> int:
        """Offset one past the last file's bytes (0 without files)."""
        return self.files[-1].base_offset + self.files[-1].length if self.files else 0

    def _buf(self, i: int):
        m = self._open.get(i)
        if m is None:
            m = self._open[i] = rolled.open_bytes(self.files[i].location)
        return m.buf

    def unit_at(self, offset: int) -> TimerUnit:
        """The unit at timer-log ``offset`` as the walk would classify it; a positioned ``OUT_OF_RANGE``
        :class:`TimerStoreError` when no file holds it."""
        i = bisect.bisect_right(self._bases, offset) - 1
        if offset < 0 or i < 0 or offset >= self.files[i].base_offset + self.files[i].length:
            raise TimerStoreError(ErrorKind.OUT_OF_RANGE, f"timer-log offset {offset} is in no timer-log file",
                                  position=offset, field="prev_pos")
        f = self.files[i]
        pos = offset - f.base_offset
        buf = self._buf(i)
        piece = bytes(buf[pos:pos + UNIT_SIZE])
        name = rolled.name_of(f.loc)
        units = list(walk_timer_log_buffer(piece, name, f.base_offset, file_length=f.length, start=pos,
                                           written=len(piece)))
        if not units:
            raise TimerStoreError(ErrorKind.OUT_OF_RANGE, f"timer-log offset {offset} is in the unwritten (zero) "
                                  "part of its file", file=name, position=pos, field="prev_pos")
        return units[0]

    def close(self) -> None:
        for m in self._open.values():
            m.close()
        self._open.clear()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def rescan_start(files: list, last_timer_log_flush_pos: int | None) -> int:
    """Where the timer's recovery (``TimerMessageStore.recover`` / ``recoverAndRevise``) starts rescanning the timer
    log: the base offset of the file holding lastTimerLogFlushPos minus a file's size (the first file's when none
    does).  Each valid unit it scans, up to the first corrupt one, becomes its slot's lastPos."""
    if not files:
        return 0
    begin = max(0, (last_timer_log_flush_pos or 0) - files[-1].length)
    return max((f.base_offset for f in files if f.base_offset <= begin), default=files[0].base_offset)


def slot_heads(wheel: "WheelSlots | None", offsets, slot_times, rescan_from: int, rescan_until: int | None
               ) -> dict[int, int]:
    """Slot time -> lastPos as the timer's recovery leaves the wheel: the wheel's slots whose time maps to their own
    index, then each valid unit it rescans (``offsets`` and their ``slot_times``, in offset order, from
    ``rescan_from`` (:func:`rescan_start`) to ``rescan_until``, the first corrupt unit there, if any) as its slot's
    lastPos, the last one winning."""
    heads: dict[int, int] = {}
    if wheel is not None:
        ok = wheel.index_matches
        heads.update(zip(wheel.slot_time_ms[ok].tolist(), wheel.last_pos[ok].tolist()))
    offsets, slot_times = np.asarray(offsets, np.int64), np.asarray(slot_times, np.int64)
    scan = (offsets >= rescan_from) & ((offsets < rescan_until) if rescan_until is not None else True)
    heads.update(zip(slot_times[scan].tolist(), offsets[scan].tolist()))  # a dict keeps the last of a key
    return heads


# ------------------------------------------------------------------------------------------- chains


@dataclass(frozen=True)
class ChainWalk:
    """A wheel slot's chain walked from ``last_pos`` back through ``prevPos``.

    ``end``: ``complete`` (reached -1), ``loop`` (a prevPos that is not strictly below its unit's offset: the
    broker's dequeue would walk it for ever or re-read units), ``out_of_range`` (a position outside the timer
    log or in its unwritten part), ``corrupt`` (a unit on the chain is not an entry).  ``error`` is positioned
    where the chain broke; ``units`` are the entries read, newest first."""

    last_pos: int
    units: tuple[TimerUnit, ...]
    end: str
    error: StoreFormatError | None = None

    @property
    def positions(self) -> tuple[int, ...]:
        return tuple(u.timerlog_offset for u in self.units)


def walk_chain(log: TimerLog, last_pos: int, *, max_units: int | None = None) -> ChainWalk:
    """Follow ``last_pos`` -> prevPos -> ... -> -1 (``TimerMessageStore.dequeue``'s walk).  Never hangs: every
    step must go strictly backwards, so at most (last_pos / 52 + 1) units are read; ``max_units`` bounds it
    further."""
    units: list[TimerUnit] = []
    pos = last_pos
    limit = max_units if max_units is not None else max(0, last_pos) // UNIT_SIZE + 2
    while pos != -1:
        if len(units) >= limit:
            err = TimerStoreError(ErrorKind.CYCLIC_CHAIN, f"chain from {last_pos} runs past {limit} units",
                                  position=pos, field="prev_pos")
            return ChainWalk(last_pos, tuple(units), "loop", err)
        try:
            u = log.unit_at(pos)
        except TimerStoreError as e:
            return ChainWalk(last_pos, tuple(units), "out_of_range", e)
        if u.kind != "entry":
            return ChainWalk(last_pos, tuple(units), "corrupt", u.error() or TimerStoreError(
                ErrorKind.BAD_MAGIC, f"a {u.kind} where the chain expects a unit", file=u.file,
                position=u.file_position, field="prev_pos"))
        units.append(u)
        if u.prev_pos != -1 and u.prev_pos >= pos:
            err = TimerStoreError(ErrorKind.CYCLIC_CHAIN, f"prevPos {u.prev_pos} is not below the unit's own offset "
                                  f"{pos}: the chain loops", file=u.file, position=u.file_position, field="prev_pos")
            return ChainWalk(last_pos, tuple(units), "loop", err)
        pos = u.prev_pos
    return ChainWalk(last_pos, tuple(units), "complete")


# ------------------------------------------------------------------------------------------- the wheel


def slot_index(time_ms: int, precision_ms: int = L.DEFAULT_TIMER_PRECISION_MS,
               slots_total: int = L.DEFAULT_TIMER_SLOTS_TOTAL) -> int:
    """``TimerWheel.getSlotIndex``."""
    return int(time_ms // precision_ms % (slots_total * 2))


@dataclass
class WheelSlots:
    """The non-empty slots of a wheel file (any of their 32 bytes not zero), as numpy columns in index order."""

    file: str
    file_length: int
    slots_total: int
    precision_ms: int
    slot_index: np.ndarray  # int64
    time: np.ndarray  # int64: the stored time field (slot time / precision)
    first_pos: np.ndarray
    last_pos: np.ndarray
    num: np.ndarray  # int32
    magic: np.ndarray  # int32
    problem: StoreFormatError | None = None  # the file's length is not slotsTotal * 2 * 32

    def __len__(self) -> int:
        return len(self.slot_index)

    @property
    def file_position(self) -> np.ndarray:
        return self.slot_index * SLOT_SIZE

    @property
    def slot_time_ms(self) -> np.ndarray:
        return self.time * self.precision_ms

    @property
    def index_matches(self) -> np.ndarray:
        """Whether each slot's time maps to its own index (``getSlotIndex``): a slot elsewhere is misplaced."""
        return (self.time % (self.slots_total * 2)) == self.slot_index

    def rows(self) -> Iterator[dict]:
        for i in range(len(self)):
            yield {"file": self.file, "file_position": int(self.slot_index[i]) * SLOT_SIZE,
                   "slot_index": int(self.slot_index[i]), "time": int(self.time[i]),
                   "slot_time_ms": int(self.time[i]) * self.precision_ms, "first_pos": int(self.first_pos[i]),
                   "last_pos": int(self.last_pos[i]), "num": int(self.num[i]), "magic": int(self.magic[i]),
                   "index_matches": bool(self.index_matches[i])}


_SCAN_CHUNK = 4 << 20


def read_wheel_slots(src, *, precision_ms: int = L.DEFAULT_TIMER_PRECISION_MS,
                     slots_total: int | None = None) -> WheelSlots:
    """The non-empty slots of a ``timerwheel`` file (path or Location).  The file is never read whole into Python
    objects: a local file is mapped read-only and only its data extents (``SEEK_DATA``) are scanned with numpy;
    another file system's is read by 4 MiB ranges.  ``slots_total`` defaults to what the length says (length /
    64); a length that is not what the broker creates is ``problem`` (a positioned ``BAD_GEOMETRY``), and the
    whole slots are still read."""
    loc = rolled.location(src)
    name = rolled.name_of(loc)
    length = loc.size()
    expected_total = slots_total if slots_total is not None else max(1, length // (2 * SLOT_SIZE))
    problem = None
    if length != expected_total * 2 * SLOT_SIZE:
        problem = TimerStoreError(ErrorKind.BAD_GEOMETRY, f"timerwheel is {length} bytes; {expected_total} slots "
                                  f"total make {expected_total * 2 * SLOT_SIZE} (TimerWheel refuses to start)",
                                  file=name, position=min(length, expected_total * 2 * SLOT_SIZE), field="length")
    whole = length // SLOT_SIZE
    found: list[np.ndarray] = []
    dtype = SLOT.dtype()

    def scan(raw, first_slot: int):
        k = len(raw) // SLOT_SIZE
        if not k:
            return
        words = np.frombuffer(raw, np.uint64, k * SLOT_SIZE // 8).reshape(k, SLOT_SIZE // 8)
        hit = np.flatnonzero(words.any(axis=1))
        if len(hit):
            rec = np.frombuffer(raw, dtype, k)[hit]
            out = np.empty(len(hit), [("slot_index", np.int64), ("time", np.int64), ("first_pos", np.int64),
                                      ("last_pos", np.int64), ("num", np.int32), ("magic", np.int32)])
            out["slot_index"] = first_slot + hit
            for n in ("time", "first_pos", "last_pos", "num", "magic"):
                out[n] = rec[n]
            found.append(out)
        del words

    with rolled.open_bytes(loc) as m:
        buf = m.buf
        data_from = getattr(buf, "data_from", None)
        pos = 0
        limit = whole * SLOT_SIZE
        while pos < limit:
            if data_from is not None:
                start, end = data_from(pos)
                if start >= limit:
                    break
                start -= start % SLOT_SIZE
                end = min(limit, -(-end // SLOT_SIZE) * SLOT_SIZE)
            else:
                start, end = pos, limit
            at = start
            while at < end:
                stop = min(end, at + _SCAN_CHUNK)
                view = memoryview(buf)[at:stop]
                try:
                    scan(view, at // SLOT_SIZE)
                finally:
                    view.release()
                at = stop
            pos = end
    if found:
        allrows = np.concatenate(found)
    else:
        allrows = np.zeros(0, [("slot_index", np.int64), ("time", np.int64), ("first_pos", np.int64),
                               ("last_pos", np.int64), ("num", np.int32), ("magic", np.int32)])
    return WheelSlots(name, length, expected_total, precision_ms, allrows["slot_index"].copy(),
                      allrows["time"].copy(), allrows["first_pos"].copy(), allrows["last_pos"].copy(),
                      allrows["num"].copy(), allrows["magic"].copy(), problem)


@dataclass(frozen=True)
class Slot:
    """``TimerWheel.getSlot(timeMs)``: the slot of a time, or the empty slot (-1, -1, -1) when the stored time is
    another one."""

    time_ms: int
    first_pos: int
    last_pos: int
    num: int
    magic: int
    slot_index: int
    stored_time: int  # the raw time field read at the index


def wheel_slot(src, time_ms: int, *, precision_ms: int = L.DEFAULT_TIMER_PRECISION_MS,
               slots_total: int | None = None) -> Slot:
    """The slot ``TimerWheel.getSlot`` returns for ``time_ms`` (one 32-byte ranged read)."""
    loc = rolled.location(src)
    total = slots_total if slots_total is not None else max(1, loc.size() // (2 * SLOT_SIZE))
    idx = slot_index(time_ms, precision_ms, total)
    raw = loc.read_range(idx * SLOT_SIZE, SLOT_SIZE)
    if len(raw) < SLOT_SIZE:
        raise TimerStoreError(ErrorKind.TRUNCATED, f"slot {idx} is past the end of the wheel", file=rolled.name_of(loc),
                              position=idx * SLOT_SIZE, field="time")
    stored, first, last, num, magic = struct.unpack(SLOT.struct, raw)
    if stored * precision_ms != time_ms // precision_ms * precision_ms:
        return Slot(time_ms, -1, -1, -1, 0, idx, stored)
    return Slot(time_ms, first, last, num, magic, idx, stored)


# ------------------------------------------------------------------------------------------- config/timercheck


@dataclass(frozen=True)
class TimerCheckpoint:
    """``config/timercheck`` as ``TimerCheckpoint``'s constructor reads it; a member the file is too short to
    hold is None.  ``problem``: a length other than the one 4096-byte page the broker maps (a positioned
    ``BAD_LENGTH``, or ``TRUNCATED`` when even the four original longs do not fit)."""

    last_read_time_ms: int | None
    last_timer_log_flush_pos: int | None
    last_timer_queue_offset: int | None
    master_timer_queue_offset: int | None
    state_version: int | None
    data_version_timestamp: int | None
    data_version_counter: int | None
    file: str | None = None
    file_length: int = L.TIMER_CHECKPOINT.size
    problem: StoreFormatError | None = None

    def to_dict(self) -> dict:
        d = {m.name: getattr(self, m.name) for m in L.TIMER_CHECKPOINT.members}
        d.update(file=self.file, file_position=0, file_length=self.file_length)
        if self.problem is not None:
            d["problem"] = self.problem.as_dict()
        return d

    def to_bytes(self) -> bytes:
        """The page as ``TimerCheckpoint.flush`` writes it (None members as 0)."""
        vals = [getattr(self, m.name) or 0 for m in L.TIMER_CHECKPOINT.members]
        raw = struct.pack(L.TIMER_CHECKPOINT.struct, *vals)
        return raw + bytes(L.TIMER_CHECKPOINT.size - len(raw))


def parse_timer_checkpoint(raw: bytes, file: str | None = None, file_length: int | None = None) -> TimerCheckpoint:
    """The timercheck bytes (``raw``: the file's first page or all of a shorter file; ``file_length``: the file's
    length, default ``len(raw)``); never raises for a length: a wrong one is the result's ``problem``."""
    length = len(raw) if file_length is None else file_length
    values = {}
    for m in L.TIMER_CHECKPOINT.members:
        values[m.name] = L.TIMER_CHECKPOINT.read(raw, m.name) if L.TIMER_CHECKPOINT.end(m.name) <= len(raw) else None
    problem = None
    page = L.TIMER_CHECKPOINT.size
    needed = L.TIMER_CHECKPOINT.end(L.TIMER_CHECKPOINT.members[L.TIMER_CHECKPOINT_MIN_MEMBERS - 1].name)
    if len(raw) < needed:
        problem = TimerStoreError(ErrorKind.TRUNCATED, f"timercheck is {length} bytes; its four offsets need "
                                  f"{needed} (the broker maps a {page}-byte page)", file=file, position=len(raw),
                                  field=next(m.name for m in L.TIMER_CHECKPOINT.members if values[m.name] is None))
    elif length != page:
        problem = TimerStoreError(ErrorKind.BAD_LENGTH, f"timercheck is {length} bytes, not the {page}-byte page "
                                  "TimerCheckpoint maps", file=file, position=min(length, page), field="length")
    return TimerCheckpoint(**values, file=file, file_length=length, problem=problem)


def read_timer_checkpoint(src) -> TimerCheckpoint:
    """``config/timercheck`` (path or Location) as the broker maps it: its first page read (never more, however
    large the file), its length from the file system.  A missing file is a ``MISSING`` :class:`TimerStoreError`; an
    unreadable one the ``UnreadableError`` of the fs seam."""
    loc = rolled.location(src)
    name = rolled.name_of(loc)
    if not loc.exists():
        raise TimerStoreError(ErrorKind.MISSING, "no timercheck file", file=name)
    return parse_timer_checkpoint(loc.read_range(0, L.TIMER_CHECKPOINT.size), name, loc.size())


# ------------------------------------------------------------------------------------------- config/timermetrics


@dataclass(frozen=True)
class TimerMetrics:
    """``config/timermetrics`` (or its ``.bak``): per REAL_TOPIC (count in the wheel, last update ms).  Counts may
    be negative (every delete unit subtracts one): not damage.  ``errors`` are the files that failed and entries
    that are not ``{"count": int, "timeStamp": int}``."""

    timing_count: dict = field(default_factory=dict)  # topic -> (count, timeStamp)
    data_version: dict | None = None
    source: str | None = None
    errors: tuple = ()

    @property
    def readable(self) -> bool:
        return self.source is not None


def read_timer_metrics(config_dir) -> TimerMetrics:
    """``timermetrics`` of a config folder, read with the fastjson-tolerant parser and ``ConfigManager``'s
    fallback to ``.bak`` (:func:`store_format.config.read_config`)."""
    from .config import read_config
    from .errors import ConfigError

    cfg = read_config(config_dir, TIMER_METRICS_FILE)
    if cfg.data is None:
        return TimerMetrics({}, None, None, cfg.errors)
    errors = list(cfg.errors)
    counts = {}
    table = cfg.data.get("timingCount")
    if table is not None and not isinstance(table, dict):
        errors.append(ConfigError(ErrorKind.BAD_CONFIG, "timingCount is not a map", file=cfg.source,
                                  field="timingCount"))
        table = {}
    for topic, m in (table or {}).items():
        count = m.get("count") if isinstance(m, dict) else None
        ts = m.get("timeStamp") if isinstance(m, dict) else None
        if isinstance(count, bool) or not isinstance(count, int) or isinstance(ts, bool) or \
                not isinstance(ts, (int, type(None))):
            errors.append(ConfigError(ErrorKind.BAD_CONFIG, f"timingCount[{topic!r}] is not {{count, timeStamp}}",
                                      file=cfg.source, field=f"timingCount.{topic}"))
            continue
        counts[str(topic)] = (count, ts)
    dv = cfg.data.get("dataVersion")
    return TimerMetrics(counts, dv if isinstance(dv, dict) else None, cfg.source, tuple(errors))


def timer_metrics_decode_problem(data: dict) -> str | None:
    """What ``TimerMetrics.decode`` throws on in a parsed config/timermetrics, or None: fastjson fills a
    ``TimerMetricsSerializeWrapper`` (``timingCount``: a map of ``Metric`` {count AtomicLong, timeStamp long};
    ``dataVersion``: a ``DataVersion`` of longs; either absent keeps its empty default) and decode then calls
    ``timingCount.putAll`` and ``dataVersion.assignNewOne``, which throw NullPointerException for an explicit null.
    A value of the wrong type, or a number outside a long, fails fastjson itself.  Negative counts are RocketMQ's own
    (every delete unit subtracts one): not a problem."""
    from .config import LONG_RANGE, _as_int, _is_int

    def long_ok(v) -> bool:
        return v is None or (_is_int(v) and LONG_RANGE[0] <= _as_int(v) <= LONG_RANGE[1])

    if "timingCount" in data:
        table = data["timingCount"]
        if not isinstance(table, dict):
            return f"timingCount is {'null' if table is None else 'not a map'}"
        for topic, m in table.items():
            if not isinstance(m, dict) or not (long_ok(m.get("count")) and long_ok(m.get("timeStamp"))):
                return f"timingCount[{topic!r}] is not {{count, timeStamp}} of longs"
    if "dataVersion" in data:
        dv = data["dataVersion"]
        if not isinstance(dv, dict):
            return f"dataVersion is {'null' if dv is None else 'not an object'}"
        bad = next((k for k in ("timestamp", "stateVersion", "counter") if not long_ok(dv.get(k))), None)
        if bad:
            return f"dataVersion.{bad} is not a long"
    return None


# ------------------------------------------------------------------------------------------- the broker's rules


def delete_key(real_topic: str | None, uniq_key: str | None) -> str:
    """``TimerMessageStore.buildDeleteKey``: what a recall's TIMER_DEL_UNIQKEY names, ``<REAL_TOPIC>+<UNIQ_KEY>``."""
    return f"{real_topic}+{uniq_key}"


def dequeued(slot_time_ms: int, last_read_time_ms: int | None) -> bool:
    """Whether the wheel has read the slot of ``slot_time_ms``: ``TimerMessageStore.dequeue`` reads the slot at
    ``currReadTimeMs`` and then moves it one precision on, so every slot before the checkpoint's lastReadTimeMs has
    been read (a missing checkpoint reads as 0: nothing)."""
    return slot_time_ms < (last_read_time_ms or 0)


def wheel_reach_ms(precision_ms: int = L.DEFAULT_TIMER_PRECISION_MS,
                   slots_total: int = L.DEFAULT_TIMER_SLOTS_TOTAL) -> int:
    """How far back a restarted wheel reads: ``recover()`` starts at lastReadTimeMs but never before ``now -
    slotsTotal * precision + TIMER_BLANK_SLOTS * precision``; a slot older than that at the start is never read."""
    return (slots_total - L.TIMER_BLANK_SLOTS) * precision_ms


# ------------------------------------------------------------------------------------------- the whole store


@dataclass
class TimerStoreFiles:
    """Which timer-store files a store root has (a 5.x broker with ``timerWheelEnable`` creates the wheel, the
    checkpoint and the metrics at start; ``timerlog/`` only with the first unit)."""

    timer_log_files: list
    timer_wheel: bool
    timer_check: bool
    timer_metrics: bool

    @property
    def present(self) -> bool:
        return bool(self.timer_log_files) or self.timer_wheel or self.timer_check or self.timer_metrics


def timer_store_files(root) -> TimerStoreFiles:
    config = rolled.child(root, "config")
    try:
        files = list_timer_log_files(root)
    except UnreadableError:
        files = []
    return TimerStoreFiles(files, rolled.child(root, TIMER_WHEEL_FILE).is_file(),
                           config.child(TIMER_CHECK_FILE).is_file(),
                           config.child(TIMER_METRICS_FILE).is_file() or
                           config.child(TIMER_METRICS_FILE + ".bak").is_file())


__all__ = ["TimerUnit", "TimerUnitArrays", "TimerLog", "ChainWalk", "WheelSlots", "Slot", "TimerCheckpoint",
           "TimerMetrics", "TimerStoreError", "TimerStoreFiles", "UNIT_KINDS", "REASONS", "list_timer_log_files",
           "walk_timer_log", "walk_timer_log_buffer", "timer_units_of", "read_timer_unit_arrays", "read_timer_unit_range",
           "rescan_start", "slot_heads", "walk_chain",
           "slot_index", "read_wheel_slots", "wheel_slot", "parse_timer_checkpoint", "read_timer_checkpoint",
           "read_timer_metrics", "timer_metrics_decode_problem", "timer_store_files", "magic_ok", "magic_name",
           "delete_key", "dequeued",
           "wheel_reach_ms"]
