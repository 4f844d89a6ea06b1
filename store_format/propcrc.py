"""The whole-record CRC property ``__CRC32#`` (RocketMQ >= 5.2.0, ``enabledAppendPropCRC``).

Mirrors ``MessageDecoder.createCrc32`` (the bytes), ``CommitLog.DefaultAppendMessageCallback.doAppend`` (what
the CRC covers) and ``CommitLog.checkMessageAndReturnSize`` under ``forceVerifyPropCRC`` (how the broker reads
it back).  The property is always the record's last 20 bytes (``CRC32_RESERVED_LEN``)::

    "__CRC32#" (8) | 0x01 | 10 ASCII digits, least significant first, '0'-padded on the right | 0x02

    value = UtilAll.crc32(record[0 : TOTALSIZE - 20]) = CRC-32 (IEEE) & 0x7FFFFFFF

The covered bytes include QUEUEOFFSET, PHYSICALOFFSET and STORETIMESTAMP as patched at append time: a record
re-appended elsewhere keeps a valid CRC only at the same physical offset.

A check has one of four outcomes (:data:`STATUSES`): ``ok``; ``absent`` (the last 20 bytes do not start with
``__CRC32#\\x01``: the broker wrote no CRC); ``mismatch`` (ten digits that do not equal the CRC); ``malformed``
(the key is there but the value is not ten ASCII digits closed by 0x02).  ``force_ok`` says what the broker's
``forceVerifyPropCRC`` recovery decides for the record (it parses the value char by char in Java ``int``
arithmetic and cuts recovery at a record without the property or with a mismatch).

:func:`check_record_crc` checks one record's bytes; :func:`check_crc_many` the records at given positions of one
buffer at once (numpy over the 20-byte tails, one C ``zlib.crc32`` call per record), for the audit's bulk path;
:func:`carries_crc` finds the records that hold the property before any CRC is computed.  Framing never checks
the property; the recovery model does under ``forceVerifyPropCRC`` (store_format.recovery.forced_crc_stop).
"""
from __future__ import annotations

import struct
import zlib
from dataclasses import dataclass

import numpy as np

from . import layout as L
from .errors import ErrorKind, StoreFormatError

KEY = L.PROPERTY_CRC32.encode("ascii")  # b"__CRC32#"
PREFIX = KEY + L.NAME_VALUE_SEPARATOR.encode("ascii")  # 9 bytes
RESERVED = L.CRC32_RESERVED_LEN  # 20
DIGITS = L.CRC32_DIGITS  # 10
DIGITS_AT = len(PREFIX)  # the digits' offset inside the 20 bytes
END = L.PROPERTY_SEPARATOR.encode("ascii")  # b"\x02"

STATUSES = ("ok", "absent", "mismatch", "malformed")
OK, ABSENT, MISMATCH, MALFORMED = range(4)


def record_crc(record, size: int | None = None) -> int:
    """``UtilAll.crc32`` of the record's bytes ``[0, size - 20)`` (``size``: TOTALSIZE, default ``len(record)``)."""
    size = len(record) if size is None else size
    return zlib.crc32(memoryview(record)[:max(0, size - RESERVED)]) & 0x7FFFFFFF


def crc_digits(crc: int) -> str:
    """``createCrc32``'s ten digits: least significant first, padded with '0'."""
    out = []
    for _ in range(DIGITS):
        d = 0
        if crc > 0:
            d = crc % 10
            crc //= 10
        out.append(chr(48 + d))
    return "".join(out)


def crc_property(crc: int) -> bytes:
    """The 20 bytes ``createCrc32`` writes for ``crc``."""
    return PREFIX + crc_digits(crc).encode("ascii") + END


def java_crc_value(text: str) -> int:
    """``checkMessageAndReturnSize``'s parse of the property value: from the last character to the first,
    ``v = v * 10 + (c - '0')`` in Java ``int`` arithmetic (so any text gives a number; a negative one means
    "not found")."""
    v = 0
    for ch in reversed(text):
        v = (v * 10 + (ord(ch) - 48)) & 0xFFFFFFFF
    return v - (1 << 32) if v >= 1 << 31 else v


@dataclass(frozen=True)
class CrcCheck:
    status: str  # one of STATUSES
    computed: int  # the CRC of [0, TOTALSIZE - 20)
    stored_text: str | None  # the ten bytes after the key (escaped where not ASCII); None when absent
    stored: int | None  # their value when they are ten digits
    force_ok: bool  # forceVerifyPropCRC keeps the record
    position: int  # where the 20 bytes start in the record (TOTALSIZE - 20)

    @property
    def ok(self) -> bool:
        return self.status == "ok"


def check_record_crc(buf, pos: int = 0, size: int | None = None, *, properties: dict | None = None) -> CrcCheck:
    """Check the ``__CRC32#`` of the record at ``buf[pos:]`` (``size``: its TOTALSIZE, default read from the
    record).  ``properties`` (the parsed map), when given, supplies the value the broker's forced check reads
    (``propertiesMap.get("__CRC32#")``); by default it is the tail's ten characters."""
    if size is None:
        size = struct.unpack_from(">i", buf, pos)[0]
    if size < RESERVED or pos + size > len(buf):
        raise StoreFormatError(ErrorKind.BAD_LENGTH, f"record of {size} bytes at {pos} does not fit a {RESERVED}-byte "
                               "CRC property in the buffer", position=pos, field="store_size")
    rec = memoryview(buf)[pos:pos + size]
    try:
        computed = record_crc(rec, size)
        tail = bytes(rec[size - RESERVED:size])
    finally:
        rec.release()
    return _judge(tail, computed, size - RESERVED, properties)


def _judge(tail: bytes, computed: int, position: int, properties: dict | None) -> CrcCheck:
    if tail[:DIGITS_AT] != PREFIX:
        value = None if properties is None else properties.get(L.PROPERTY_CRC32)
        force_ok = value is not None and 0 <= java_crc_value(value) == computed
        return CrcCheck("absent", computed, None, None, force_ok, position)
    digits = tail[DIGITS_AT:DIGITS_AT + DIGITS]
    text = digits.decode("ascii", "backslashreplace")
    value = text if properties is None else properties.get(L.PROPERTY_CRC32)
    force_ok = value is not None and 0 <= java_crc_value(value) == computed
    if tail[-1:] != END or not all(48 <= b <= 57 for b in digits):
        return CrcCheck("malformed", computed, text, None, force_ok, position)
    stored = int(text[::-1])
    return CrcCheck("ok" if stored == computed else "mismatch", computed, text, stored, force_ok, position)


@dataclass
class CrcArrays:
    """:func:`check_crc_many`'s columns, one row per record: ``status`` codes index :data:`STATUSES`; ``stored``
    is -1 where the value is not ten digits; ``force_ok`` is the broker's forced check."""

    status: np.ndarray  # int8
    computed: np.ndarray  # int64
    stored: np.ndarray  # int64
    force_ok: np.ndarray  # bool

    def __len__(self) -> int:
        return len(self.status)


_POW10 = 10 ** np.arange(DIGITS, dtype=np.int64)  # digit i (least significant first) weighs 10**i


def check_crc_many(buf, positions, sizes) -> CrcArrays:
    """:func:`check_record_crc` (without ``properties``) for the records at ``positions`` with TOTALSIZEs
    ``sizes`` of one buffer (a segment's map or bytes): the tails are gathered and judged as arrays.  Every
    record must lie inside ``buf`` with at least 20 bytes (the framing's records do)."""
    positions = np.asarray(positions, dtype=np.int64)
    sizes = np.asarray(sizes, dtype=np.int64)
    n = len(positions)
    raw = np.frombuffer(buf, np.uint8)
    try:
        tails = raw[(positions + sizes - RESERVED)[:, None] + np.arange(RESERVED)] if n else \
            np.zeros((0, RESERVED), np.uint8)
        view = memoryview(buf)
        try:
            computed = np.fromiter((zlib.crc32(view[p:p + s - RESERVED]) & 0x7FFFFFFF
                                    for p, s in zip(positions.tolist(), sizes.tolist())), np.int64, n)
        finally:
            view.release()
    finally:
        del raw
    has_key = (tails[:, :DIGITS_AT] == np.frombuffer(PREFIX, np.uint8)).all(axis=1)
    digit_bytes = tails[:, DIGITS_AT:DIGITS_AT + DIGITS].astype(np.int64)
    is_digit = ((digit_bytes >= 48) & (digit_bytes <= 57)).all(axis=1)
    well_formed = has_key & is_digit & (tails[:, RESERVED - 1] == END[0])
    stored = np.where(well_formed, ((digit_bytes - 48) * _POW10).sum(axis=1), -1)
    # the broker's parse: from the last char to the first, v = v * 10 + (c - '0') in int arithmetic
    v = np.zeros(n, np.int64)
    for i in range(DIGITS - 1, -1, -1):
        v = (v * 10 + (digit_bytes[:, i] - 48)) & 0xFFFFFFFF
    java = np.where(v >= 1 << 31, v - (1 << 32), v)
    force_ok = has_key & (tails[:, RESERVED - 1] == END[0]) & (java >= 0) & (java == computed)
    status = np.full(n, ABSENT, np.int8)
    status[has_key & ~well_formed] = MALFORMED
    status[well_formed & (stored != computed)] = MISMATCH
    status[well_formed & (stored == computed)] = OK
    return CrcArrays(status, computed, stored, force_ok)


def carries_crc(buf, positions, sizes) -> np.ndarray:
    """Which of the records at ``positions`` (TOTALSIZEs ``sizes``) of ``buf`` end in the property's key
    (``__CRC32#`` and 0x01 where their last 20 bytes start): the bulk test that comes before any CRC is computed,
    so records written without the property (every 4.x record) cost one gather of nine bytes each."""
    positions = np.asarray(positions, dtype=np.int64)
    if not len(positions):
        return np.zeros(0, bool)
    raw = np.frombuffer(buf, np.uint8)
    try:
        keys = raw[(positions + np.asarray(sizes, dtype=np.int64) - RESERVED)[:, None] + np.arange(DIGITS_AT)]
    finally:
        del raw
    return (keys == np.frombuffer(PREFIX, np.uint8)).all(axis=1)


def stored_texts(buf, positions, sizes) -> list[str]:
    """The ten characters after the key of each record (escaped where they are not ASCII), as a finding shows them."""
    out = []
    for p, s in zip(np.asarray(positions).tolist(), np.asarray(sizes).tolist()):
        start = p + s - RESERVED + DIGITS_AT
        out.append(bytes(buf[start:start + DIGITS]).decode("ascii", "backslashreplace"))
    return out


def with_crc_reservation(properties: str) -> str:
    """``MessageExtEncoder`` with ``enabledAppendPropCRC``: a non-empty property string that does not end in
    0x02 gets one; the 20 bytes the CRC will take follow (here as ``createCrc32`` of 0, patched at append)."""
    if properties and not properties.endswith(L.PROPERTY_SEPARATOR):
        properties += L.PROPERTY_SEPARATOR
    return properties + crc_property(0).decode("ascii")


def patch_crc(record: bytearray) -> int:
    """Compute the record's CRC and write its 20 bytes over the record's last 20 (``doAppend``); returns it."""
    crc = record_crc(record)
    record[len(record) - RESERVED:] = crc_property(crc)
    return crc


__all__ = ["STATUSES", "CrcCheck", "CrcArrays", "record_crc", "crc_digits", "crc_property", "java_crc_value",
           "check_record_crc", "check_crc_many", "carries_crc", "stored_texts", "with_crc_reservation", "patch_crc"]
