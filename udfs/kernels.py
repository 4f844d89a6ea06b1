"""Vectorized CommitLog record decoding: Arrow frames in, Arrow messages out (numpy + pyarrow, no Spark).

Mirrors ``MessageDecoder.decode`` / ``CommitLog.checkMessageAndReturnSize`` for a whole batch at once::

    TOTALSIZE 4 | MAGIC 4 | BODYCRC 4 | QUEUEID 4 | FLAG 4 | QUEUEOFFSET 8 | PHYSICALOFFSET 8 | SYSFLAG 4 |
    BORNTS 8 | BORNHOST 8/20 | STORETS 8 | STOREHOST 8/20 | RECONSUME 4 | PREPAREDTX 8 | BODYLEN 4 | BODY |
    TOPICLEN 1 (V1) / 2 (V2) | TOPIC | PROPLEN 2 | PROPERTIES

How, and why this way:

* Every offset comes from :func:`store_format.layout.record_layout`.  A layout variant (the two IPv6 host
  bits and the magic version) fixes the whole header, so rows are grouped by variant and each variant's
  header is gathered with one numpy fancy index over an overlapping strided view of the buffer (element
  ``i`` of the view is the header that would start at byte ``i``): no per-row Python, no copy of the buffer.
* Body, topic and properties are cut out by one Arrow ``take`` over an "interleaved" binary array whose
  offsets alternate gap / field / gap / field over the original buffer, so the copy runs in C++.
* Properties are split with Arrow's ``split_pattern``/``find_substring`` and assembled into a map with
  numpy index arithmetic; keys are dictionary-encoded once per batch, which also finds repeated keys.
* Per-row Python remains only where neither numpy nor Arrow has a kernel: ``zlib.crc32`` of each body
  (``body_crc_ok``) and decompression (opt-in).  Low-cardinality text (host strings, producer ips, tag
  hashes of non-ASCII tags, integer properties) is computed once per *distinct* value in the batch through
  the store_format function that defines it, then broadcast with ``take``.
* A malformed frame yields a row of nulls with ``error``/``error_field`` set, never an exception for the
  batch; the checks and their order are those of :func:`store_format.codec.decode_record`.
"""
from __future__ import annotations

import ctypes
import zlib
from dataclasses import dataclass
from typing import Iterable

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from store_format import layout as L
from store_format.compression import DEFAULT_MAX_DECOMPRESSED, decompress
from store_format.errors import ErrorKind, StoreFormatError
from store_format.ids import UniqKey, format_host, parse_uniq_key
from store_format.javahash import tags_code as _java_tags_code
from store_format.message import DERIVED_FIELDS, STORED_FIELDS

# ---------------------------------------------------------------------------------------------------------
# Output schema

_FIELD_TYPES: dict[str, pa.DataType] = {
    "physical_offset": pa.int64(), "store_size": pa.int32(), "magic_version": pa.int32(), "body_crc": pa.int32(),
    "queue_id": pa.int32(), "flag": pa.int32(), "queue_offset": pa.int64(), "sys_flag": pa.int32(),
    "born_timestamp": pa.int64(), "born_host": pa.string(), "store_timestamp": pa.int64(),
    "store_host": pa.string(), "reconsume_times": pa.int32(), "prepared_transaction_offset": pa.int64(),
    "body": pa.binary(), "topic": pa.string(), "properties": pa.map_(pa.string(), pa.string()),
    "properties_raw": pa.string(),
    "msg_id": pa.string(), "uniq_key": pa.string(), "keys": pa.list_(pa.string()), "tags": pa.string(),
    "tags_code": pa.int64(), "tran_type": pa.string(), "compression": pa.string(), "body_crc_ok": pa.bool_(),
    # derived here only
    "producer_ip": pa.string(), "producer_pid": pa.int32(), "producer_time": pa.int64(),
    "delay_level": pa.int32(), "real_topic": pa.string(), "real_queue_id": pa.int32(),
    "retry_topic": pa.string(), "origin_message_id": pa.string(), "size_ok": pa.bool_(),
    # opt-in
    "decompressed_body": pa.binary(), "decompress_error": pa.string(),
    # status
    "error": pa.string(), "error_field": pa.string(),
}
EXTRA_DERIVED = ("producer_ip", "producer_pid", "producer_time", "delay_level", "real_topic", "real_queue_id",
                 "retry_topic", "origin_message_id", "size_ok")
DECOMPRESS_COLUMNS = ("decompressed_body", "decompress_error")
STATUS_COLUMNS = ("error", "error_field")
#: every column produced unless asked otherwise (decompression is opt-in)
DEFAULT_COLUMNS = STORED_FIELDS + DERIVED_FIELDS + EXTRA_DERIVED + STATUS_COLUMNS
ALL_COLUMNS = DEFAULT_COLUMNS + DECOMPRESS_COLUMNS
#: what RocketMQ's ``MessageDecoder.decode`` yields (bodies kept, properties parsed, msgId), to compare with
#: its speed.  decode() verifies no CRC, so neither does this selection.
MESSAGE_DECODER_COLUMNS = STORED_FIELDS + ("msg_id",) + STATUS_COLUMNS
assert set(ALL_COLUMNS) == set(_FIELD_TYPES), "every column needs a type"

_PROPERTY_COLUMNS = ("properties", "uniq_key", "keys", "tags", "tags_code", "producer_ip", "producer_pid",
                     "producer_time", "delay_level", "real_topic", "real_queue_id", "retry_topic",
                     "origin_message_id")
_NAMED_PROPERTIES = {  # column -> property key
    "tags": L.PROPERTY_TAGS, "keys": L.PROPERTY_KEYS, "uniq_key": L.PROPERTY_UNIQ_KEY,
    "delay_level": L.PROPERTY_DELAY_TIME_LEVEL, "real_topic": L.PROPERTY_REAL_TOPIC,
    "real_queue_id": L.PROPERTY_REAL_QUEUE_ID, "retry_topic": L.PROPERTY_RETRY_TOPIC,
    "origin_message_id": L.PROPERTY_ORIGIN_MESSAGE_ID,
}
_NEEDS_VARIABLE = ("body", "topic", "properties_raw", "body_crc_ok", "tags_code") + _PROPERTY_COLUMNS \
    + DECOMPRESS_COLUMNS


def message_schema(columns: Iterable[str] | None = None, decompress: bool = False) -> pa.Schema:
    """The Arrow schema of :func:`decode_frames` output for ``columns`` (default :data:`DEFAULT_COLUMNS`)."""
    return pa.schema([pa.field(c, _FIELD_TYPES[c]) for c in resolve_columns(columns, decompress)])


def resolve_columns(columns: Iterable[str] | None = None, decompress: bool = False) -> tuple[str, ...]:
    """The output column names for a ``columns``/``decompress`` request, validated, in output order."""
    cols = DEFAULT_COLUMNS if columns is None else tuple(columns)
    unknown = [c for c in cols if c not in _FIELD_TYPES]
    if unknown:
        raise ValueError(f"unknown message columns {unknown}; choose from {list(ALL_COLUMNS)}")
    if decompress:
        cols = cols + tuple(c for c in DECOMPRESS_COLUMNS if c not in cols)
    return tuple(dict.fromkeys(cols))


# ---------------------------------------------------------------------------------------------------------
# Errors: (kind, field) in the order codec.decode_record checks them; the first failing check wins.
_ERRORS = (
    None,
    (ErrorKind.TRUNCATED, "store_size"),  # fewer than 8 bytes, or TOTALSIZE beyond the frame
    (ErrorKind.BAD_MAGIC, "magic"),
    (ErrorKind.TRUNCATED, "sys_flag"),
    (ErrorKind.BAD_LENGTH, "store_size"),  # TOTALSIZE below the layout's minimum
    (ErrorKind.BAD_LENGTH, "body_length"),
    (ErrorKind.BAD_LENGTH, "topic_length"),
    (ErrorKind.BAD_LENGTH, "properties_length"),
    (ErrorKind.SIZE_MISMATCH, "store_size"),
)
_E_TRUNC, _E_MAGIC, _E_TRUNC_SF, _E_MIN, _E_BODY, _E_TOPIC, _E_PROPS, _E_SIZE = range(1, 9)
_ERROR_KINDS = pa.array([None] + [k.value for k, _ in _ERRORS[1:]], pa.string())
_ERROR_FIELDS = pa.array([None] + [f for _, f in _ERRORS[1:]], pa.string())

# ---------------------------------------------------------------------------------------------------------
# Layout variants, derived from store_format.layout

_NP_CODES = {"i": ">i4", "q": ">i8", "h": ">i2", "b": "i1"}


def _variant_of(lay: L.RecordLayout) -> int:
    return int(lay.born_v6) | int(lay.store_v6) << 1 | int(lay.magic_version == 2) << 2


def _header_dtype(lay: L.RecordLayout) -> np.dtype:
    """Structured big-endian view of everything before BODY; a host is split into ``*_ip`` and ``*_port``."""
    names, formats, offsets = [], [], []
    for f in L.RECORD_FIELDS:
        if f.name not in lay.offsets:
            continue
        off, width = lay.offsets[f.name], lay.widths[f.name]
        if f.code == "host":
            names += [f.name + "_ip", f.name + "_port"]
            formats += [("u1", (width - L.PORT_WIDTH,)), ">i4"]
            offsets += [off, off + width - L.PORT_WIDTH]
        else:
            names.append(f.name)
            formats.append(_NP_CODES[f.code])
            offsets.append(off)
    return np.dtype({"names": names, "formats": formats, "offsets": offsets, "itemsize": lay.body_offset})


_LAYOUTS = {_variant_of(lay): lay for lay in L.ALL_LAYOUTS}
_DTYPES = {v: _header_dtype(lay) for v, lay in _LAYOUTS.items()}
_MIN_SIZE = np.array([_LAYOUTS[v].min_size for v in range(8)], np.int64)
_BODY_OFFSET = np.array([_LAYOUTS[v].body_offset for v in range(8)], np.int64)
_TOPIC_LEN_WIDTH = np.array([_LAYOUTS[v].topic_length_width for v in range(8)], np.int64)
_MAX_HEADER = max(dt.itemsize for dt in _DTYPES.values())
# TOTALSIZE, MAGICCODE and SYSFLAG precede the hosts, so any variant's header view reads them (checked here)
assert len({tuple(lay.offsets[f] for f in ("store_size", "magic", "sys_flag")) for lay in L.ALL_LAYOUTS}) == 1

# tran_type / compression names for every value of their sysflag bits, from layout's own functions
_TRAN_NAMES = pa.array([L.tran_type_of(t << 2) for t in range(4)])
_COMPRESSION_NAMES = pa.array([L.compression_of(c | t << 8) for c in (0, L.COMPRESSED_FLAG) for t in range(8)])

_HEX_PAIRS = np.array([int.from_bytes(f"{b:02X}".encode(), "little") for b in range(256)], "<u2")
_NIBBLE = np.full(256, 0xFF, np.uint8)
for _i, _c in enumerate(b"0123456789abcdef"):
    _NIBBLE[_c] = _i
for _i, _c in enumerate(b"ABCDEF"):
    _NIBBLE[_c] = 10 + _i

_INT32_MAX = 2**31 - 1
# datetime.fromtimestamp's range (years 1..9999), with a month of margin for the previous-month step
_DATETIME_MIN_MS = int(np.datetime64("0001-02-01T00:00:00", "ms").astype(np.int64))
_DATETIME_MAX_MS = int(np.datetime64("9999-12-31T23:59:59.999", "ms").astype(np.int64))



def tune_allocator() -> bool:
    """Keep freed numpy temporaries in the heap instead of returning them to the OS (glibc only).

    A batch allocates many multi-megabyte temporaries; by default glibc serves them with ``mmap`` (or trims
    the heap) and the next batch pays a page fault per 4 KiB again, which measured 30-40% of decode time.
    This raises glibc's mmap and trim thresholds for the whole process, so its resident size stays near its
    peak: call it in processes that decode (Spark Python workers, benchmarks), not in a library import.
    Returns False where there is no glibc ``mallopt``."""
    global _TUNED
    if _TUNED:
        return True
    try:
        libc = ctypes.CDLL("libc.so.6")
        mallopt = libc.mallopt
    except (OSError, AttributeError):
        return False
    # M_MMAP_THRESHOLD (-3) at glibc's 64-bit maximum, M_TRIM_THRESHOLD (-1) 1 GiB, M_TOP_PAD (-2) 64 MiB
    _TUNED = bool(mallopt(-3, 32 << 20) and mallopt(-1, 1 << 30) and mallopt(-2, 64 << 20))
    return _TUNED


_TUNED = False

# ---------------------------------------------------------------------------------------------------------
# Inputs


@dataclass
class Frames:
    """A batch of frames: frame ``i`` is ``data[starts[i] : starts[i] + sizes[i]]``; ``present[i]`` False is a
    null frame.  Frames are in buffer order and do not overlap (what framing a segment yields, and what an
    Arrow binary column is); :func:`frames_from_buffer` repacks other inputs."""

    data: np.ndarray  # uint8
    starts: np.ndarray  # int64
    sizes: np.ndarray  # int64
    present: np.ndarray | None = None  # bool; None = all present

    def __len__(self) -> int:
        return len(self.starts)


def frames_from_binary(arr: pa.Array | pa.ChunkedArray) -> Frames:
    """Frames of a binary / large_binary column, zero copy; nulls become null frames."""
    if isinstance(arr, pa.ChunkedArray):
        arr = arr.combine_chunks() if arr.num_chunks != 1 else arr.chunk(0)
    if not (pa.types.is_binary(arr.type) or pa.types.is_large_binary(arr.type)):
        if pa.types.is_binary_view(arr.type) or pa.types.is_fixed_size_binary(arr.type):
            arr = arr.cast(pa.large_binary())
        else:
            raise TypeError(f"frames must be binary or large_binary, not {arr.type}")
    data, offsets = _string_parts(arr)
    present = arr.is_valid().to_numpy(zero_copy_only=False) if arr.null_count else None
    return Frames(data, offsets[:-1], np.diff(offsets), present)


def frames_from_buffer(buf, starts, sizes) -> Frames:
    """Frames at ``starts`` (``sizes`` bytes each) of ``buf`` (bytes, memoryview, mmap or numpy uint8).

    Zero copy when the frames are in order and disjoint, as framing a segment produces; otherwise (a
    random-access list of offsets, say) the frames are first copied into one packed buffer."""
    data = buf if isinstance(buf, np.ndarray) else np.frombuffer(buf, np.uint8)
    starts = np.asarray(starts, np.int64)
    sizes = np.asarray(sizes, np.int64)
    if starts.shape != sizes.shape:
        raise ValueError("starts and sizes must have the same length")
    if len(starts) and (sizes.min() < 0 or starts.min() < 0 or (starts + sizes).max() > len(data)):
        raise ValueError("a frame lies outside the buffer")
    if len(starts) > 1 and np.any(starts[1:] < starts[:-1] + sizes[:-1]):
        packed = np.concatenate([data[s:s + z] for s, z in zip(starts.tolist(), sizes.tolist())])
        new_starts = np.zeros(len(starts), np.int64)
        np.cumsum(sizes[:-1], out=new_starts[1:])
        return Frames(packed, new_starts, sizes)
    return Frames(data, starts, sizes)


# ---------------------------------------------------------------------------------------------------------
# numpy <-> Arrow helpers


def _reader(data: np.ndarray, dtype) -> np.ndarray:
    """Overlapping view: element ``i`` is the ``dtype`` value stored at byte ``i`` (zero copy)."""
    dt = np.dtype(dtype)
    return np.ndarray((len(data) - dt.itemsize + 1,), dt, data, 0, (1,))


def _read(view: np.ndarray, pos: np.ndarray) -> np.ndarray:
    """int64 values at byte positions ``pos``; positions past the buffer are clipped (their rows are errors)."""
    return view[np.minimum(pos, len(view) - 1)].astype(np.int64)


def _bitmap(valid: np.ndarray | None):
    if valid is None:
        return None
    return pa.py_buffer(np.packbits(valid, bitorder="little"))


def _num(values: np.ndarray, typ: pa.DataType, valid) -> pa.Array:
    values = np.ascontiguousarray(values, typ.to_pandas_dtype())
    return pa.Array.from_buffers(typ, len(values), [_bitmap(valid), pa.py_buffer(values)])


def _bool(values: np.ndarray, valid) -> pa.Array:
    return pa.Array.from_buffers(pa.bool_(), len(values),
                                 [_bitmap(valid), pa.py_buffer(np.packbits(values, bitorder="little"))])


def _indices(idx: np.ndarray, valid) -> pa.Array:
    """``take`` indices; where ``valid`` is False the row takes null."""
    return _num(idx, pa.int64(), valid)


def _mask(valid) -> pa.Array | None:
    return None if valid is None else pa.array(~valid)


def _interleaved(data: np.ndarray, bounds: np.ndarray) -> pa.Array:
    """Binary array over ``data`` whose element ``k`` is ``data[bounds[k-1]:bounds[k]]`` (bounds[-1] = 0).

    With ``bounds`` laid out as (start, end) pairs, the odd elements are the wanted fields and the even ones
    the bytes between them; ``take`` of the odd elements copies every field out in one C++ pass."""
    if len(data) <= _INT32_MAX:
        typ, off = pa.binary(), np.empty(len(bounds) + 1, np.int32)
    else:
        typ, off = pa.large_binary(), np.empty(len(bounds) + 1, np.int64)
    off[0] = 0
    off[1:] = bounds
    return pa.Array.from_buffers(typ, len(bounds), [None, pa.py_buffer(off), pa.py_buffer(data)])


def _string_parts(arr: pa.Array) -> tuple[np.ndarray, np.ndarray]:
    """(data bytes, int64 offsets) of a string or binary array (either offset width)."""
    _, off_buf, data_buf = arr.buffers()[:3]
    odt = np.int64 if arr.type in (pa.large_string(), pa.large_binary()) else np.int32
    if off_buf is None:  # an empty array may have no buffers at all
        return np.zeros(0, np.uint8), np.zeros(len(arr) + 1, np.int64)
    offsets = np.frombuffer(off_buf, odt, len(arr) + 1, arr.offset * np.dtype(odt).itemsize).astype(np.int64)
    data = np.frombuffer(data_buf, np.uint8) if data_buf is not None else np.zeros(0, np.uint8)
    return data, offsets


def _to_utf8(arr: pa.Array) -> pa.Array:
    """binary -> string as store_format reads text (Java's ``new String(bytes, UTF_8)``): invalid sequences
    become U+FFFD.  A valid batch (the norm) is checked in C++; only a batch with bad bytes goes row by row."""
    try:
        return arr.cast(pa.string())
    except pa.ArrowInvalid:
        return pa.array([None if b is None else b.decode("utf-8", "replace") for b in arr.to_pylist()], pa.string())


def _map_distinct(keys: pa.Array, fn, out_type: pa.DataType) -> pa.Array:
    """``fn`` applied once per distinct non-null value of ``keys``, broadcast back with ``take``."""
    enc = pc.dictionary_encode(keys)
    return pa.array([fn(v) for v in enc.dictionary.to_pylist()], out_type).take(enc.indices)


def _parse_int32(text: str | None) -> int | None:
    """An integer property read as Message.delay_level reads DELAY (Python ``int``), kept if it fits an int."""
    if text is None:
        return None
    try:
        value = int(text)
    except ValueError:
        return None
    return value if -2**31 <= value <= _INT32_MAX else None


def _fixed_strings(chars: np.ndarray, widths: np.ndarray, valid) -> pa.Array:
    """String array from (n, W) left-aligned ASCII, row ``i`` being ``chars[i, :widths[i]]``."""
    n, w = chars.shape
    offsets = np.zeros(n + 1, np.int64)
    np.cumsum(widths, out=offsets[1:])
    data = chars.reshape(-1) if (widths == w).all() else chars[np.arange(w)[None, :] < widths[:, None]]
    typ = pa.string()
    if offsets[-1] > _INT32_MAX:
        typ = pa.large_string()
    else:
        offsets = offsets.astype(np.int32)
    return pa.Array.from_buffers(typ, n, [_bitmap(valid), pa.py_buffer(offsets), pa.py_buffer(data)])


def _repeated_string(text: str, n: int) -> pa.Array:
    """``text`` n times, built without hashing or per-row work."""
    raw = np.frombuffer(text.encode("utf-8"), np.uint8)
    offsets = np.arange(n + 1, dtype=np.int64) * len(raw)
    typ = pa.string()
    if offsets[-1] > _INT32_MAX:
        typ = pa.large_string()
    else:
        offsets = offsets.astype(np.int32)
    return pa.Array.from_buffers(typ, n, [None, pa.py_buffer(offsets), pa.py_buffer(np.tile(raw, n))])


def _hex_upper(raw: np.ndarray) -> np.ndarray:
    """(n, w) bytes -> (n, 2w) upper-case hex characters (UtilAll.bytes2string), one table lookup per byte."""
    return _HEX_PAIRS[raw].view(np.uint8).reshape(raw.shape[0], raw.shape[1] * 2)


# ---------------------------------------------------------------------------------------------------------
# Properties


@dataclass
class _Properties:
    rows: np.ndarray  # int64 row of each entry (ascending)
    keys: pa.Array  # string
    values: pa.Array  # string
    codes: np.ndarray  # int64 index of each key in ``dictionary``
    dictionary: pa.Array  # the distinct keys of the batch


def _parse_properties(props_raw: pa.Array) -> _Properties:
    """``string2messageProperties`` (RocketMQ >= 4.9.1, as store_format.properties.parse_properties) for a
    whole column: segments split by \u0002; a segment is kept when its first \u0001 comes after at least one
    key byte and before its last byte (so empty keys and values are dropped, and the value keeps any further
    \u0001); a repeated key keeps its last value.  Both separators are ASCII, so byte positions in UTF-8 give
    the same split as char positions, and every piece cut at them is valid UTF-8 again."""
    n = len(props_raw)
    pdata, po = _string_parts(props_raw)
    rows, ks, ke, ve, width = _property_entries(pdata, po)
    typ = pa.string() if len(pdata) <= _INT32_MAX else pa.large_string()
    values = _cut(pdata, ke + 1, ve, typ)
    if width:
        shared = _shared_keys(pdata, ks, ke, n, width)
        if shared is not None:
            return _uniform_properties(shared, values, n)
    keys = _cut(pdata, ks, ke, typ)
    enc = pc.dictionary_encode(keys)
    codes = enc.indices.to_numpy().astype(np.int64)
    keep = _last_duplicate_wins(rows, codes, len(enc.dictionary), n)
    if keep is not None:
        rows, codes = rows[keep], codes[keep]
        m = pa.array(keep)
        keys, values = keys.filter(m), values.filter(m)
    return _Properties(rows, keys, values, codes, enc.dictionary)


def _cut(data: np.ndarray, starts: np.ndarray, ends: np.ndarray, typ: pa.DataType) -> pa.Array:
    """``data[starts[i]:ends[i]]`` for every i (ascending, disjoint) as a ``typ`` array, copied in C++."""
    bounds = np.empty(2 * len(starts), np.int64)
    bounds[0::2], bounds[1::2] = starts, ends
    out = _interleaved(data, bounds).take(pa.array(np.arange(1, 2 * len(starts), 2, dtype=np.int64)))
    return pa.Array.from_buffers(typ, len(starts), out.buffers())


def _property_entries(pdata: np.ndarray, po: np.ndarray):
    """(row, key start, key end, value end, width) of every kept entry, as positions in ``pdata``.

    ``width`` is the number of entries per row when every row has the same separator shape with no dropped
    entry (one producer's messages: the usual batch), else None."""
    n = len(po) - 1
    pos = np.flatnonzero(pdata < 3)
    sep = pdata[pos]
    if not sep.all():  # NUL bytes are not separators
        keep = sep != 0
        pos, sep = pos[keep], sep[keep]
    counts = np.diff(np.searchsorted(pos, po))
    c = int(counts[0]) if n else 0
    if n and (counts == c).all():
        shape = sep[:c]
        if c == 0:
            e = np.zeros(0, np.int64)
            return e, e, e, e, 0
        if (shape[0::2] == 1).all() and (shape[1::2] == 2).all() and (sep.reshape(n, c) == shape).all():
            # \u0001 \u0002 alternate in every row: entry j's key starts after the (j-1)th \u0002 (or at the
            # row start) and its value ends at the jth \u0002 (or the row end); a segment after a trailing
            # \u0002 holds no \u0001, so it never counts
            at = pos.reshape(n, c)
            k = (c + 1) // 2
            ones, twos = at[:, 0::2], at[:, 1::2]
            key_start = np.empty((n, k), np.int64)
            key_start[:, 0] = po[:-1]
            key_start[:, 1:] = twos[:, :k - 1] + 1
            value_end = np.empty((n, k), np.int64)
            value_end[:, :c // 2] = twos
            if c % 2:
                value_end[:, -1] = po[1:]
            if (ones > key_start).all() and (value_end - ones > 1).all():
                return (np.repeat(np.arange(n, dtype=np.int64), k), key_start.reshape(-1), ones.reshape(-1),
                        value_end.reshape(-1), k)
    return (*_general_entries(pos, sep, counts, po), None)


def _general_entries(pos: np.ndarray, sep: np.ndarray, counts: np.ndarray, po: np.ndarray):
    """Entries of rows of any shape: from each segment's first \u0001 find its segment's bounds."""
    n, m = len(po) - 1, len(pos)
    if m == 0:
        e = np.zeros(0, np.int64)
        return e, e, e, e
    row = np.repeat(np.arange(n, dtype=np.int64), counts)
    first = np.empty(m, bool)  # the first separator of its row
    first[0] = True
    np.not_equal(row[1:], row[:-1], out=first[1:])
    is2 = sep == 2
    opens = ~is2  # a \u0001 that is the first of its segment: first of the row, or right after a \u0002
    opens[1:] &= first[1:] | is2[:-1]
    k = np.flatnonzero(opens)
    krow, kv = row[k], pos[k]
    seg_start = np.where(first[k], po[krow], pos[k - 1] + 1)
    next2 = np.where(is2, np.arange(m), m)  # index of the next \u0002 at or after each separator
    next2 = np.append(np.minimum.accumulate(next2[::-1])[::-1], m)
    j = next2[k + 1]
    jc = np.minimum(j, m - 1)
    seg_end = np.where((j < m) & (row[jc] == krow), pos[jc], po[krow + 1])
    ok = (kv > seg_start) & (kv < seg_end - 1)
    return krow[ok], seg_start[ok], kv[ok], seg_end[ok]


def _shared_keys(pdata: np.ndarray, ks: np.ndarray, ke: np.ndarray, n: int, width: int) -> list[str] | None:
    """The keys of row 0 when every row has byte-identical keys column by column, else None (compared as
    8-byte words, so a check costs one gather per 8 key bytes)."""
    klen = (ke - ks).reshape(n, width)
    if not (klen == klen[0]).all():
        return None
    starts = ks.reshape(n, width)
    words = _reader(pdata, "<u8") if len(pdata) >= 8 else None
    keys = []
    for j in range(width):
        size, col = int(klen[0, j]), starts[:, j]
        ref = pdata[col[0]:col[0] + size].tobytes()
        if size >= 8:  # whole words, the last one anchored at the key's end
            for off in sorted({*range(0, size - 7, 8), size - 8}):
                if not (words[col + off] == int.from_bytes(ref[off:off + 8], "little")).all():
                    return None
        else:  # one word from the key start, masked; keys in the buffer's last 8 bytes compared as bytes
            fits = col <= len(pdata) - 8
            mask = (1 << (8 * size)) - 1
            if words is not None and not ((words[col[fits]] & np.uint64(mask)) == int.from_bytes(ref, "little")).all():
                return None
            if any(pdata[c:c + size].tobytes() != ref for c in col[~fits].tolist()):
                return None
        keys.append(ref.decode("utf-8"))
    return keys


def _uniform_properties(keys: list[str], values: pa.Array, n: int) -> _Properties:
    """Rows that all carry the same keys in the same order: keys and codes are tiled, not hashed per row."""
    last = {key: j for j, key in enumerate(keys)}  # HashMap.put: a repeated key keeps its last column
    cols = sorted(last.values())
    width = len(keys)
    if len(cols) < width:
        keep = np.zeros(width, bool)
        keep[cols] = True
        values = values.filter(pa.array(np.tile(keep, n)))
    kept = [keys[j].encode("utf-8") for j in cols]
    piece = np.frombuffer(b"".join(kept), np.uint8)
    inner = np.zeros(len(kept) + 1, np.int64)
    np.cumsum([len(k) for k in kept], out=inner[1:])
    offsets = np.empty(n * len(kept) + 1, np.int64)
    offsets[:-1] = (np.arange(n, dtype=np.int64)[:, None] * len(piece) + inner[None, :-1]).reshape(-1)
    offsets[-1] = n * len(piece)
    typ = pa.string() if offsets[-1] <= _INT32_MAX else pa.large_string()
    offsets = offsets.astype(np.int32) if typ == pa.string() else offsets
    key_array = pa.Array.from_buffers(typ, n * len(kept),
                                      [None, pa.py_buffer(offsets), pa.py_buffer(np.tile(piece, n))])
    codes = np.tile(np.arange(len(kept), dtype=np.int64), n)
    return _Properties(np.repeat(np.arange(n, dtype=np.int64), len(kept)), key_array, values, codes,
                       pa.array([k.decode("utf-8") for k in kept], pa.string()))


def _last_duplicate_wins(rows: np.ndarray, codes: np.ndarray, n_codes: int, n_rows: int) -> np.ndarray | None:
    """Mask keeping the last entry of each (row, key), as ``HashMap.put`` does; None when no key repeats."""
    e = len(rows)
    if e == 0:
        return None
    if n_codes <= 64:  # a bitset per row: a repeat shows as fewer distinct bits than entries
        counts = np.bincount(rows, minlength=n_rows)
        has = np.flatnonzero(counts)
        first = np.zeros(n_rows, np.int64)
        np.cumsum(counts[:-1], out=first[1:])
        bits = np.left_shift(np.uint64(1), codes.astype(np.uint64))
        distinct = np.bitwise_count(np.bitwise_or.reduceat(bits, first[has]))
        dup_rows = has[distinct != counts[has]]
        if len(dup_rows) == 0:
            return None
        in_dup = np.zeros(n_rows, bool)
        in_dup[dup_rows] = True
        sel = np.flatnonzero(in_dup[rows])
    else:
        sel = np.arange(e)
    key = rows[sel] * n_codes + codes[sel]
    order = np.lexsort((sel, key))  # by (row, key), then position
    ks = key[order]
    superseded = np.zeros(len(sel), bool)
    superseded[:-1] = ks[:-1] == ks[1:]
    if not superseded.any():
        return None
    keep = np.ones(e, bool)
    keep[sel[order[superseded]]] = False
    return keep


def _named_properties(props: _Properties, names: list[str], n: int) -> dict[str, pa.Array]:
    """Value of each property ``names`` per row (null when absent): one gather and one scatter in all."""
    if not names:
        return {}
    slot_of_code = np.full(len(props.dictionary) + 1, -1, np.int64)
    found = pc.index_in(pa.array(names, pa.string()), value_set=props.dictionary).fill_null(-1).to_numpy()
    for s, code in enumerate(found.tolist()):
        if code >= 0:
            slot_of_code[code] = s
    slot = slot_of_code[props.codes]
    hit = np.flatnonzero(slot >= 0)
    table = np.full((len(names), n), -1, np.int64)
    table[slot[hit], props.rows[hit]] = hit
    out = {}
    for s, name in enumerate(names):
        idx = table[s]
        has = idx >= 0
        out[name] = props.values.take(_indices(idx, has)) if has.any() else pa.nulls(n, pa.string())
    return out


def _map_array(props: _Properties, n: int, valid) -> pa.Array:
    offsets = np.zeros(n + 1, np.int32)
    if len(props.rows):
        np.cumsum(np.bincount(props.rows, minlength=n), out=offsets[1:])
    keys, values = props.keys, props.values
    if keys.type != pa.string():
        keys, values = keys.cast(pa.string()), values.cast(pa.string())
    return pa.MapArray.from_arrays(pa.array(offsets), keys, values, mask=_mask(valid))


def _split_keys(keys_value: pa.Array, valid) -> pa.Array:
    """KEYS split on single spaces, empty pieces dropped (store_format.properties.split_keys); none -> []."""
    parts = pc.split_pattern(keys_value.fill_null(""), L.KEY_SEPARATOR)
    offsets = parts.offsets.to_numpy().astype(np.int64)
    flat = parts.values.slice(offsets[0], offsets[-1] - offsets[0])
    offsets -= offsets[0]
    nonempty = pc.greater(pc.binary_length(flat), 0).to_numpy(zero_copy_only=False)
    if not nonempty.all():
        kept = np.zeros(len(nonempty) + 1, np.int64)
        np.cumsum(nonempty, out=kept[1:])
        offsets = kept[offsets]
        flat = flat.filter(pa.array(nonempty))
    return pa.ListArray.from_arrays(pa.array(offsets.astype(np.int32)), flat.cast(pa.string()), mask=_mask(valid))


def _java_hash_ascii(strings: pa.Array) -> np.ndarray:
    """Java ``String.hashCode`` of ASCII strings, vectorized (for ASCII, UTF-16 units are the bytes)."""
    data, off = _string_parts(strings)
    lens = np.diff(off)
    out = np.zeros(len(strings), np.int64)
    if off[-1] == off[0]:
        return out
    maxlen = int(lens.max())
    pow31 = np.ones(maxlen, np.uint32)
    pow31[1:] = np.cumprod(np.full(maxlen - 1, 31, np.uint32), dtype=np.uint32)  # wraps mod 2**32, as Java
    expo = np.repeat(off[1:] - 1, lens) - np.arange(off[0], off[-1])  # distance to the string's last char
    terms = data[off[0]:off[-1]].astype(np.uint32) * pow31[expo]
    nonempty = lens > 0
    out[nonempty] = np.add.reduceat(terms, (off[:-1] - off[0])[nonempty], dtype=np.uint32).astype(np.int32)
    return out


def _tags_hashes(tags: pa.Array) -> np.ndarray:
    """tagsCode of each row's tags (0 when null or empty), once per distinct tag: ASCII tags vectorized,
    the others through store_format.javahash (UTF-16 code units)."""
    enc = pc.dictionary_encode(tags.fill_null(""))
    dictionary = enc.dictionary
    if len(dictionary) == 0:
        return np.zeros(len(tags), np.int64)
    codes = np.zeros(len(dictionary), np.int64)
    ascii_ = pc.string_is_ascii(dictionary).to_numpy(zero_copy_only=False)
    if ascii_.any():
        codes[ascii_] = _java_hash_ascii(dictionary.filter(pa.array(ascii_)))
    for i in np.flatnonzero(~ascii_).tolist():
        codes[i] = _java_tags_code(dictionary[i].as_py())
    return codes[enc.indices.to_numpy()]


def _deliver_wait(text: str, delay_levels: dict[int, int]) -> int | None:
    """Message.dispatch_tags_code for one DELAY text: the wait added to the store time (the level clamped to
    the table's highest, ``layout.compute_deliver_timestamp``), or None when the tags hash stays."""
    try:
        level = int(text)
    except ValueError:
        return None
    if delay_levels:
        level = min(level, max(delay_levels))
    return L.compute_deliver_timestamp(level, 0, delay_levels) if level > 0 else None


# ---------------------------------------------------------------------------------------------------------
# Hosts and ids


def _host_strings(ip: np.ndarray, v6: np.ndarray, port: np.ndarray, valid) -> pa.Array:
    """'ip:port' per row through store_format.ids.format_host, evaluated once per distinct (ip, port)."""
    n = len(port)
    if not v6.any():  # IPv4 only (the norm): ip and port packed into one uint64 key
        key = ip[:, :4].copy().view(">u4").reshape(n).astype(np.uint64) << np.uint64(32) \
            | port.astype(np.uint32).astype(np.uint64)
        arr = pa.Array.from_buffers(pa.uint64(), n, [_bitmap(valid), pa.py_buffer(key)])

        def fmt(k: int) -> str:
            port_bits = k & 0xFFFFFFFF
            return format_host((k >> 32).to_bytes(4, "big"), port_bits - (port_bits >> 31 << 32))

        if n and valid is None and (key == key[0]).all():  # one host for the whole batch (the store host)
            return _repeated_string(fmt(int(key[0])), n)
    else:
        raw = np.zeros((n, 21), np.uint8)  # ip (16) | port (4) | IPv6?
        raw[:, :16] = ip
        raw[:, 16:20] = port.astype(">i4").view(np.uint8).reshape(n, 4)
        raw[:, 20] = v6
        arr = pa.FixedSizeBinaryArray.from_buffers(pa.binary(21), n, [_bitmap(valid), pa.py_buffer(raw)])

        def fmt(k: bytes) -> str:
            return format_host(k[:16] if k[20] else k[:4], int.from_bytes(k[16:20], "big", signed=True))
    return _map_distinct(arr, fmt, pa.string())


def _msg_ids(store_ip: np.ndarray, store_v6: np.ndarray, port: np.ndarray, phys: np.ndarray, valid) -> pa.Array:
    """offsetMsgId (MessageDecoder.createMessageId): hex(store ip | port int | physical offset long)."""
    n = len(port)
    width = np.where(store_v6, 28, 16)
    raw = np.zeros((n, 28 if store_v6.any() else 16), np.uint8)
    raw[:, :16 if store_v6.any() else 4] = store_ip[:, :raw.shape[1] - 12]
    tail = np.empty((n, 12), np.uint8)
    tail[:, :4] = port.astype(">i4").view(np.uint8).reshape(n, 4)
    tail[:, 4:] = phys.astype(">i8").view(np.uint8).reshape(n, 8)
    if raw.shape[1] == 16:
        raw[:, 4:] = tail
    else:
        v4 = ~store_v6
        raw[v4, 4:16] = tail[v4]
        raw[v4, 16:] = 0
        raw[store_v6, 16:] = tail[store_v6]
    return _fixed_strings(_hex_upper(raw), 2 * width, valid)


def _producer_columns(uniq: pa.Array, born_ts: np.ndarray) -> dict[str, pa.Array]:
    """Producer ip/pid/time from UNIQ_KEY (MessageClientIDSetter), as store_format.ids.parse_uniq_key and
    ``UniqKey.timestamp(born_timestamp, UTC)`` read it.  32/56 hex digits are decoded in bulk; other non-null
    keys go through parse_uniq_key itself (it takes whatever ``bytes.fromhex`` takes)."""
    n = len(uniq)
    data, off = _string_parts(uniq)
    lens = np.diff(off)
    present = uniq.is_valid().to_numpy(zero_copy_only=False)
    ip = np.zeros((n, 16), np.uint8)
    ip_len = np.zeros(n, np.uint8)
    pid = np.zeros(n, np.int64)
    span = np.zeros(n, np.int64)
    ok = np.zeros(n, bool)
    for hex_len in (32, 56):
        rows = np.flatnonzero(present & (lens == hex_len))
        if len(rows) == 0:
            continue
        chars = _reader(data, np.dtype((np.void, hex_len)))[off[rows]].view(np.uint8).reshape(-1, hex_len)
        nib = np.take(_NIBBLE, chars)  # 0..15, or 0xFF for a non-hex character
        pairs = nib.view("<u2")  # (high nibble, low nibble) byte pairs
        raw = ((pairs << 4) | (pairs >> 8)).astype(np.uint8)
        ipl = hex_len // 2 - 12
        ip[rows, :ipl] = raw[:, :ipl]
        ip_len[rows] = ipl
        pid[rows] = raw[:, ipl].astype(np.int64) << 8 | raw[:, ipl + 1]
        span[rows] = np.ascontiguousarray(raw[:, ipl + 6:ipl + 10]).view(">u4").reshape(-1)
        ok[rows] = ~(nib.view(np.uint64) & np.uint64(0x8080808080808080)).any(axis=1)  # no 0xFF nibble
    # other spellings (whitespace between hex pairs, ...): the reference parser decides; under 32 characters
    # cannot hold the 16 bytes of the shortest id
    for i in np.flatnonzero(present & ~ok & (lens >= 32)).tolist():
        try:
            uk = parse_uniq_key(uniq[i].as_py())
        except StoreFormatError:
            continue
        ip[i] = 0
        ip[i, :len(uk.client_ip)] = np.frombuffer(uk.client_ip, np.uint8)
        ip_len[i], pid[i], span[i], ok[i] = len(uk.client_ip), uk.pid, uk.millis_since_month_start, True
    # UniqKey.timestamp: the month start (UTC) of the born time plus the span, or the previous month's when
    # that lands more than a minute after the born time; null where Python's datetime cannot hold the time
    in_range = (born_ts >= _DATETIME_MIN_MS) & (born_ts <= _DATETIME_MAX_MS)
    month = np.clip(born_ts, _DATETIME_MIN_MS, _DATETIME_MAX_MS).astype("datetime64[ms]").astype("datetime64[M]")
    t = month.astype("datetime64[ms]").astype(np.int64) + span
    prev = (month - 1).astype("datetime64[ms]").astype(np.int64) + span
    t = np.where(t > born_ts + 60_000, prev, t)

    key = np.zeros((n, 17), np.uint8)
    key[:, :16] = ip
    key[:, 16] = ip_len
    ips = pa.FixedSizeBinaryArray.from_buffers(pa.binary(17), n, [_bitmap(ok), pa.py_buffer(key)])

    def ip_text(k: bytes) -> str:
        return UniqKey(k[:k[16]], 0, 0, 0, 0).client_ip_str

    return {
        "producer_ip": _map_distinct(ips, ip_text, pa.string()),
        "producer_pid": _num(pid, pa.int32(), ok),
        "producer_time": _num(t, pa.int64(), ok & in_range),
    }


# ---------------------------------------------------------------------------------------------------------
# The kernel


def decode_frames(frames: Frames | pa.Array | pa.ChunkedArray, *, columns: Iterable[str] | None = None,
                  decompress: bool = False, max_decompressed: int = DEFAULT_MAX_DECOMPRESSED,
                  delay_levels: dict[int, int] = L.DEFAULT_DELAY_LEVELS) -> pa.RecordBatch:
    """Decode a batch of CommitLog record frames into one message row each (schema :func:`message_schema`).

    ``frames``: a :class:`Frames` (see :func:`frames_from_buffer`) or a binary/large_binary array of whole
    records.  ``columns`` selects the output (default :data:`DEFAULT_COLUMNS`); work for columns not asked for
    is skipped (``body_crc_ok`` costs one ``zlib.crc32`` call per row).  ``decompress`` adds
    ``decompressed_body`` (capped at ``max_decompressed`` bytes; null plus ``decompress_error`` on failure).
    ``delay_levels`` is the broker's ``messageDelayLevel`` table, for SCHEDULE_TOPIC_XXXX tagsCodes.

    A frame that does not decode gives a row of nulls with ``error``/``error_field`` set as
    :func:`store_format.codec.decode_record` would raise them; a null frame gives an all-null row."""
    if not isinstance(frames, Frames):
        frames = frames_from_binary(frames)
    cols = resolve_columns(columns, decompress)
    out = _Decoder(frames, set(cols), max_decompressed, delay_levels).run()
    schema = message_schema(cols)
    # a batch over a > 2 GiB buffer builds 64-bit offsets internally; the output keeps the declared types
    return pa.RecordBatch.from_arrays([out[f.name] if out[f.name].type == f.type else out[f.name].cast(f.type)
                                       for f in schema], schema=schema)


def decode_binary(arr: pa.Array | pa.ChunkedArray, **options) -> pa.RecordBatch:
    """:func:`decode_frames` over a binary or large_binary column of whole records."""
    return decode_frames(frames_from_binary(arr), **options)


def decode_buffer(buf, starts, sizes, **options) -> pa.RecordBatch:
    """:func:`decode_frames` over the records at ``starts`` (``sizes`` bytes each) of one buffer."""
    return decode_frames(frames_from_buffer(buf, starts, sizes), **options)


class _Header:
    """The fixed header of every row: one structured gather per layout variant present in the batch."""

    def __init__(self, data: np.ndarray, starts: np.ndarray):
        self.data, self.starts, self.n = data, starts, len(starts)
        self.parts: list[tuple[np.ndarray | None, np.ndarray]] = [(None, self._gather(0, starts))]
        self.cache: dict[str, np.ndarray] = {}

    def _gather(self, variant: int, pos: np.ndarray) -> np.ndarray:
        view = _reader(self.data, _DTYPES[variant])
        return view[np.minimum(pos, len(view) - 1)]

    def regroup(self, variant: np.ndarray, framed: np.ndarray):
        """Re-gather rows whose variant differs from the first guess (V1, IPv4/IPv4)."""
        counts = np.bincount(variant[framed], minlength=8)
        main = int(np.argmax(counts))
        if main != 0:
            self.parts = [(None, self._gather(main, self.starts))]
        for v in np.flatnonzero(counts).tolist():
            if v != main:
                rows = np.flatnonzero(framed & (variant == v))
                self.parts.append((rows, self._gather(v, self.starts[rows])))
        self.cache.clear()

    def get(self, name: str, dtype) -> np.ndarray:
        """A numeric field converted straight to ``dtype`` (one pass instead of int64 and then ``dtype``)."""
        if name in self.cache or len(self.parts) > 1:
            return self[name].astype(dtype, copy=False)
        return self.parts[0][1][name].astype(dtype)

    def __getitem__(self, name: str) -> np.ndarray:
        """int64 per row; hosts' ``*_ip`` as (n, 16) bytes, left-aligned."""
        if name not in self.cache:
            if name.endswith("_ip"):
                out = np.zeros((self.n, 16), np.uint8)
                for rows, h in self.parts:
                    col = h[name]
                    if rows is None:
                        out[:, :col.shape[1]] = col
                    else:
                        out[rows] = 0
                        out[rows, :col.shape[1]] = col
            else:
                out = self.parts[0][1][name].astype(np.int64)
                for rows, h in self.parts[1:]:
                    out[rows] = h[name]
            self.cache[name] = out
        return self.cache[name]


class _Decoder:
    """One batch; each step fills ``self.cols`` with the requested columns."""

    def __init__(self, frames: Frames, want: set, max_decompressed: int, delay_levels: dict[int, int]):
        self.f, self.want, self.n = frames, want, len(frames)
        self.max_decompressed, self.delay_levels = max_decompressed, delay_levels
        self.cols: dict[str, pa.Array] = {}

    def needs(self, *names: str) -> bool:
        return not self.want.isdisjoint(names)

    def run(self) -> dict[str, pa.Array]:
        f, n = self.f, self.n
        data = f.data
        if len(data) < _MAX_HEADER + 2:  # the strided views need room for one whole header
            data = np.concatenate([data, np.zeros(_MAX_HEADER + 2, np.uint8)])
        self.data = data
        present = np.ones(n, bool) if f.present is None else f.present
        starts, sizes = f.starts, f.sizes

        # framing checks in codec.decode_record's order; codes are written last check first, so the first wins
        hdr = self.hdr = _Header(data, starts)
        total, magic, sys_flag = hdr["store_size"], hdr["magic"], hdr["sys_flag"]
        near_end = np.flatnonzero(starts > len(data) - _DTYPES[0].itemsize)
        if len(near_end):  # a header view there was clipped: re-read the prefix with 4-byte reads
            i32 = _reader(data, ">i4")
            for arr, at in ((total, L.SIZE_OFFSET), (magic, L.MAGIC_OFFSET), (sys_flag, L.SYS_FLAG_OFFSET)):
                arr[near_end] = _read(i32, starts[near_end] + at)
        version = np.zeros(n, np.int64)
        for m, v in L.MESSAGE_MAGICS.items():
            version[magic == m] = v
        variant = ((sys_flag & L.BORNHOST_V6_FLAG) != 0) | ((sys_flag & L.STOREHOST_V6_FLAG) != 0) << 1 \
            | (version == 2) << 2
        variant = variant.astype(np.int64)
        err = np.zeros(n, np.int8)
        err[total > sizes] = _E_TRUNC
        err[total < _MIN_SIZE[variant]] = _E_MIN
        err[sizes < L.SYS_FLAG_OFFSET + 4] = _E_TRUNC_SF
        err[version == 0] = _E_MAGIC
        err[sizes < 8] = _E_TRUNC
        framed = present & (err == 0)
        if framed.any() and (variant[framed] != 0).any():
            hdr.regroup(variant, framed)

        # the three length-prefixed parts
        body_off, tlw = _BODY_OFFSET[variant], _TOPIC_LEN_WIDTH[variant]
        body_len = hdr["body_length"]
        bad_body = (body_len < 0) | (body_off + body_len + tlw > total)
        body_len = np.where(bad_body, 0, body_len)
        tpos = starts + body_off + body_len
        topic_len = _read(_reader(data, "i1"), tpos)
        if (version == 2).any():
            topic_len = np.where(version == 2, _read(_reader(data, ">i2"), tpos), topic_len)
        bad_topic = (topic_len < 0) | (body_off + body_len + tlw + topic_len + 2 > total)
        topic_len = np.where(bad_topic, 0, topic_len)
        ppos = tpos + tlw + topic_len
        props_len = _read(_reader(data, ">i2"), ppos)
        bad_props = (props_len < 0) | (ppos - starts + 2 + props_len > total)
        props_len = np.where(bad_props, 0, props_len)
        later = np.zeros(n, np.int8)
        later[_MIN_SIZE[variant] + body_len + topic_len + props_len != total] = _E_SIZE
        later[bad_props] = _E_PROPS
        later[bad_topic] = _E_TOPIC
        later[bad_body] = _E_BODY
        err = np.where(err == 0, later, err)
        err[~present] = 0
        ok = present & (err == 0)
        self.ok, self.valid = ok, (None if ok.all() else ok)
        self.version, self.sys_flag, self.variant = version, sys_flag, variant
        if self.needs(*STATUS_COLUMNS):
            if err.any():
                idx = pa.array(err.astype(np.int64))
                self.cols["error"], self.cols["error_field"] = _ERROR_KINDS.take(idx), _ERROR_FIELDS.take(idx)
            else:
                self.cols["error"] = self.cols["error_field"] = pa.nulls(n, pa.string())

        self._fixed(total, sizes)
        if self.needs(*_NEEDS_VARIABLE):
            # a row that did not decode gets empty ranges at its frame start, which keeps the bounds monotone
            bs = np.where(ok, starts + body_off, starts)
            ts = np.where(ok, ppos - topic_len, starts)
            ps = np.where(ok, ppos + 2, starts)
            self._variable(bs, bs + np.where(ok, body_len, 0), ts, ts + np.where(ok, topic_len, 0),
                           ps, ps + np.where(ok, props_len, 0))
        return self.cols

    # -- steps ---------------------------------------------------------------------------------------------
    def _fixed(self, total, sizes):
        c, want, valid, hdr = self.cols, self.want, self.valid, self.hdr
        for name in ("physical_offset", "body_crc", "queue_id", "flag", "queue_offset", "born_timestamp",
                     "store_timestamp", "reconsume_times", "prepared_transaction_offset"):
            if name in want:
                c[name] = _num(hdr.get(name, _FIELD_TYPES[name].to_pandas_dtype()), _FIELD_TYPES[name], valid)
        if "store_size" in want:
            c["store_size"] = _num(total, pa.int32(), valid)
        if "magic_version" in want:
            c["magic_version"] = _num(self.version, pa.int32(), valid)
        if "sys_flag" in want:
            c["sys_flag"] = _num(self.sys_flag, pa.int32(), valid)
        born_v6, store_v6 = (self.variant & 1) == 1, (self.variant & 2) == 2
        if "born_host" in want:
            c["born_host"] = _host_strings(hdr["born_host_ip"], born_v6, hdr["born_host_port"], valid)
        if "store_host" in want:
            c["store_host"] = _host_strings(hdr["store_host_ip"], store_v6, hdr["store_host_port"], valid)
        if "msg_id" in want:
            c["msg_id"] = _msg_ids(hdr["store_host_ip"], store_v6, hdr["store_host_port"], hdr["physical_offset"],
                                   valid)
        if "tran_type" in want:
            c["tran_type"] = _TRAN_NAMES.take(_indices((self.sys_flag & L.TRANSACTION_MASK) >> 2, valid))
        if "compression" in want:
            key = ((self.sys_flag & L.COMPRESSED_FLAG) != 0) * 8 + ((self.sys_flag & L.COMPRESSION_TYPE_MASK) >> 8)
            c["compression"] = _COMPRESSION_NAMES.take(_indices(key, valid))
        if "size_ok" in want:  # the frame holds exactly one record (TOTALSIZE == calMsgLength is checked above)
            c["size_ok"] = _bool(sizes == total, valid)

    def _variable(self, bs, be, ts, te, ps, pe):
        n, c, valid = self.n, self.cols, self.valid
        bounds = np.empty(6 * n, np.int64)
        bounds[0::6], bounds[1::6], bounds[2::6], bounds[3::6], bounds[4::6], bounds[5::6] = bs, be, ts, te, ps, pe
        inter = _interleaved(self.data, bounds)
        base = np.arange(1, 6 * n, 6, dtype=np.int64)
        body = inter.take(_indices(base, valid))
        self.body = body if body.type == pa.binary() else body.cast(pa.binary())
        c["body"] = self.body
        c["topic"] = _to_utf8(inter.take(_indices(base + 2, valid)))
        c["properties_raw"] = _to_utf8(inter.take(_indices(base + 4, valid)))
        if "body_crc_ok" in self.want:
            c["body_crc_ok"] = _bool(self._crc_ok(), valid)
        if self.needs(*DECOMPRESS_COLUMNS):
            self._decompress()
        if self.needs(*_PROPERTY_COLUMNS):
            self._properties()

    def _properties(self):
        c, n, valid, want = self.cols, self.n, self.valid, self.want
        props = _parse_properties(c["properties_raw"])
        if "properties" in want:
            c["properties"] = _map_array(props, n, valid)
        wanted = set(want)
        if wanted & {"tags_code"}:
            wanted |= {"tags", "delay_level"}
        if wanted & {"producer_ip", "producer_pid", "producer_time"}:
            wanted.add("uniq_key")
        names = {col: key for col, key in _NAMED_PROPERTIES.items() if col in wanted}
        values = _named_properties(props, list(names.values()), n)
        for col, key in names.items():
            c[col] = values[key]
        if "keys" in want:
            c["keys"] = _split_keys(c["keys"], valid)
        if "real_queue_id" in want:
            c["real_queue_id"] = _map_distinct(c["real_queue_id"], _parse_int32, pa.int32())
        delay_text = c.get("delay_level")
        if delay_text is not None:
            c["delay_level"] = _map_distinct(delay_text, _parse_int32, pa.int32())
        if "tags_code" in want:
            c["tags_code"] = _num(self._tags_code(delay_text), pa.int64(), valid)
        if "uniq_key" in c and self.needs("producer_ip", "producer_pid", "producer_time"):
            c.update(_producer_columns(c["uniq_key"], self.hdr["born_timestamp"]))

    def _tags_code(self, delay_text: pa.Array) -> np.ndarray:
        """Message.dispatch_tags_code: the tags hash, or for SCHEDULE_TOPIC_XXXX with a DELAY level the deliver
        time; the wait is worked out once per distinct DELAY text."""
        code = _tags_hashes(self.cols["tags"])
        rows = np.flatnonzero(pc.and_(pc.equal(self.cols["topic"], L.SCHEDULE_TOPIC), delay_text.is_valid())
                              .fill_null(False).to_numpy(zero_copy_only=False))
        if len(rows):
            wait = _map_distinct(delay_text.take(pa.array(rows)),
                                 lambda t: _deliver_wait(t, self.delay_levels), pa.int64())
            due = wait.is_valid().to_numpy(zero_copy_only=False)
            code[rows[due]] = self.hdr["store_timestamp"][rows[due]] + wait.filter(due).to_numpy()
        return code

    def _crc_ok(self) -> np.ndarray:
        """UtilAll.crc32 of every body: one zlib call per row (neither numpy nor Arrow has a CRC-32 kernel)."""
        data, off = _string_parts(self.body)
        view = memoryview(data)
        crc = np.fromiter(map(zlib.crc32, map(view.__getitem__, map(slice, off[:-1].tolist(), off[1:].tolist()))),
                          np.int64, self.n)
        return (crc & 0x7FFFFFFF) == self.hdr["body_crc"]

    def _decompress(self):
        n, sys_flag = self.n, self.sys_flag
        rows = np.flatnonzero(self.ok & ((sys_flag & L.COMPRESSED_FLAG) != 0))
        idx = np.arange(n, dtype=np.int64)
        good = self.ok.copy()
        extra, errors = [], [None] * n
        for i in rows.tolist():
            try:
                extra.append(decompress(self.body[i].as_py(), L.compression_of(int(sys_flag[i])),
                                        self.max_decompressed))
                idx[i] = n + len(extra) - 1
            except StoreFormatError as e:
                good[i] = False
                errors[i] = e.kind.value
        both = pa.concat_arrays([self.body, pa.array(extra, pa.binary())]) if extra else self.body
        self.cols["decompressed_body"] = both.take(_indices(idx, good))
        self.cols["decompress_error"] = pa.array(errors, pa.string())
