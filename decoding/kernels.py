"""CommitLog record decoding in bulk: Arrow frames in, Arrow messages out (no Spark).

Mirrors ``MessageDecoder.decode`` / ``CommitLog.checkMessageAndReturnSize`` for a whole batch at once::

    TOTALSIZE 4 | MAGIC 4 | BODYCRC 4 | QUEUEID 4 | FLAG 4 | QUEUEOFFSET 8 | PHYSICALOFFSET 8 | SYSFLAG 4 |
    BORNTS 8 | BORNHOST 8/20 | STORETS 8 | STOREHOST 8/20 | RECONSUME 4 | PREPAREDTX 8 | BODYLEN 4 | BODY |
    TOPICLEN 1 (V1) / 2 (V2) | TOPIC | PROPLEN 2 | PROPERTIES

How, and why this way:

* The per-record work runs in :mod:`decoding.compiled` (numba, compiled on first use in a process and cached on
  disk): one pass over the frames does the framing checks in :func:`store_format.codec.decode_record`'s
  order, reads the header (offsets from :func:`store_format.layout.record_layout`), copies topic, properties
  and (when asked for) the body, checks the body CRC and formats hosts and msgIds; a second pass over the copied
  properties builds the map entries and finds the named properties.  Here, numpy and Arrow only wrap the buffers those
  passes wrote: a column costs a constant number of calls, not a call per row.
* Python per row remains only for rare input, through the store_format function that defines it: text that
  is not UTF-8 (replaced with U+FFFD, as Java's ``new String`` does), integer properties or UNIQ_KEYs in an
  unusual spelling, SCHEDULE_TOPIC_XXXX DELAY levels, and decompression (opt-in).
* A malformed frame yields a row of nulls with ``error``/``error_field`` set, never an exception for the
  batch.
"""
from __future__ import annotations

import ctypes
import functools
import os
import time
from dataclasses import dataclass
from typing import Iterable

import numpy as np
import pyarrow as pa

from store_format import layout as L
from store_format.commitlog import EntryWalk, FrameRun
from store_format.compression import DEFAULT_MAX_DECOMPRESSED, decompress
from store_format.errors import StoreFormatError
from store_format.indexfile import CHAIN_PROBLEMS, EntryViews  # noqa: F401  (EntryViews: the kernels' input)
from store_format.ids import parse_uniq_key
from store_format.message import DERIVED_FIELDS, STORED_FIELDS

from .columns import column

# ---------------------------------------------------------------------------------------------------------
# Output schema

_FIELDS: dict[str, pa.Field] = {f.name: f for f in (  # every column a decode can produce, described
    column("physical_offset", pa.int64()),
    column("store_size", pa.int32()),
    column("magic_version", pa.int32(), "1 or 2 (MAGICCODE; V2 has a 2-byte topic length)"),
    column("body_crc", pa.int32(), "BODYCRC as stored"),
    column("queue_id", pa.int32()),
    column("flag", pa.int32(), "FLAG (the producer's int flag)"),
    column("queue_offset", pa.int64()),
    column("sys_flag", pa.int32(), "SYSFLAG: compression, transaction type, IPv6 host bits"),
    column("born_timestamp", pa.int64(), "BORNTIMESTAMP (ms, the producer's clock)"),
    column("born_host", pa.string(), "BORNHOST `ip:port`"),
    column("store_timestamp", pa.int64()),
    column("store_host", pa.string(), "STOREHOSTADDRESS `ip:port`"),
    column("reconsume_times", pa.int32(), "RECONSUMETIMES"),
    column("prepared_transaction_offset", pa.int64(), "PreparedTransactionOffset"),
    column("body", pa.binary(), "BODY bytes as stored (compressed if sys_flag says so)"),
    column("topic", pa.string()),
    column("properties", pa.map_(pa.string(), pa.string()), "PROPERTIES parsed to a map"),
    column("properties_raw", pa.string(), "PROPERTIES as stored (`name\\u0001value\\u0002...`)"),
    column("msg_id", pa.string(), "offsetMsgId: store host + physical offset, 32 hex digits"),
    column("uniq_key", pa.string()),
    column("keys", pa.list_(pa.string()), "KEYS split on spaces"),
    column("tags", pa.string(), "TAGS"),
    column("tags_code", pa.int64(), "the tag's hash code as dispatched to the consume queue (deliver time for "
                                    "delayed messages)"),
    column("tran_type", pa.string(), "NOT, PREPARED, COMMIT or ROLLBACK (from sys_flag)"),
    column("compression", pa.string(), "NONE, ZLIB, LZ4 or ZSTD"),
    column("body_crc_ok", pa.bool_(), "the stored BODYCRC matches the body"),
    # derived here only
    column("producer_ip", pa.string(), "producer IP from the UNIQ_KEY"),
    column("producer_pid", pa.int32(), "producer process id from the UNIQ_KEY"),
    column("producer_time", pa.int64(), "the UNIQ_KEY's time (ms)"),
    column("delay_level", pa.int32(), "DELAY property"),
    column("real_topic", pa.string(), "REAL_TOPIC (delayed and half messages)"),
    column("real_queue_id", pa.int32(), "REAL_QID"),
    column("retry_topic", pa.string(), "RETRY_TOPIC (send-back copies)"),
    column("origin_message_id", pa.string(), "ORIGIN_MESSAGE_ID (send-back copies)"),
    column("size_ok", pa.bool_(), "TOTALSIZE matches the fields"),
    # opt-in
    column("decompressed_body", pa.binary(), "the body decompressed (--decompress / --body decompressed)"),
    column("decompress_error", pa.string(), "why decompression failed"),
    # status
    column("error", pa.string(), "why the record did not decode (null when it did)"),
    column("error_field", pa.string(), "the field that failed"),
    column("invalid_utf8", pa.string(), "which text fields held malformed UTF-8 (`topic`, `properties` or both, "
                                        "comma-separated; null when none)"),
    column("crc_property", pa.bool_(), "the record ends in the whole-record CRC property `__CRC32#` (RocketMQ "
                                       ">= 5.2.0, enabledAppendPropCRC): its last 20 bytes start with the key"),
)}
_FIELD_TYPES = {name: f.type for name, f in _FIELDS.items()}
EXTRA_DERIVED = ("producer_ip", "producer_pid", "producer_time", "delay_level", "real_topic", "real_queue_id",
                 "retry_topic", "origin_message_id", "size_ok")
DECOMPRESS_COLUMNS = ("decompressed_body", "decompress_error")
STATUS_COLUMNS = ("error", "error_field")
#: every column produced unless asked otherwise (decompression is opt-in)
DEFAULT_COLUMNS = STORED_FIELDS + DERIVED_FIELDS + EXTRA_DERIVED + STATUS_COLUMNS
#: opt-in: which text fields held malformed UTF-8 ("topic", "properties" or both, comma-separated; null when
#: none): the broker's ``new String(bytes, UTF_8)`` replaced those bytes with U+FFFD, as these columns do; and
#: whether the record ends in the ``__CRC32#`` property (found while its properties are copied: no pass of its own)
TEXT_CHECK_COLUMNS = ("invalid_utf8", "crc_property")
ALL_COLUMNS = DEFAULT_COLUMNS + DECOMPRESS_COLUMNS + TEXT_CHECK_COLUMNS
#: what RocketMQ's ``MessageDecoder.decode`` yields (bodies kept, properties parsed, msgId), to compare with
#: its speed.  decode() verifies no CRC, so neither does this selection.
MESSAGE_DECODER_COLUMNS = STORED_FIELDS + ("msg_id",) + STATUS_COLUMNS
assert set(ALL_COLUMNS) == set(_FIELD_TYPES), "every column needs a type"

_PROPERTY_COLUMNS = ("properties", "uniq_key", "keys", "tags", "tags_code", "producer_ip", "producer_pid",
                     "producer_time", "delay_level", "real_topic", "real_queue_id", "retry_topic",
                     "origin_message_id")
_NAMED_PROPERTIES = {  # column -> property key; the order is the row order of the compiled ``named`` table
    "tags": L.PROPERTY_TAGS, "keys": L.PROPERTY_KEYS, "uniq_key": L.PROPERTY_UNIQ_KEY,
    "delay_level": L.PROPERTY_DELAY_TIME_LEVEL, "real_topic": L.PROPERTY_REAL_TOPIC,
    "real_queue_id": L.PROPERTY_REAL_QUEUE_ID, "retry_topic": L.PROPERTY_RETRY_TOPIC,
    "origin_message_id": L.PROPERTY_ORIGIN_MESSAGE_ID,
}
_NAMED_SLOT = {col: t for t, col in enumerate(_NAMED_PROPERTIES)}
_NAMED_COLUMNS = tuple(c for c in _PROPERTY_COLUMNS if c != "properties")  # derived from named properties
_NEEDS_TEXT = ("body", "topic", "properties_raw", "tags_code") + _PROPERTY_COLUMNS + DECOMPRESS_COLUMNS + \
    TEXT_CHECK_COLUMNS


def message_schema(columns: Iterable[str] | None = None, decompress: bool = False) -> pa.Schema:
    """The Arrow schema of :func:`decode_frames` output for ``columns`` (default :data:`DEFAULT_COLUMNS`)."""
    return pa.schema([_FIELDS[c] for c in resolve_columns(columns, decompress)])


def resolve_columns(columns: Iterable[str] | None = None, decompress: bool = False) -> tuple[str, ...]:
    """The output column names for a ``columns``/``decompress`` request, validated, in output order."""
    cols = DEFAULT_COLUMNS if columns is None else tuple(columns)
    unknown = [c for c in cols if c not in _FIELD_TYPES]
    if unknown:
        raise ValueError(f"unknown message columns {unknown}; choose from {list(ALL_COLUMNS)}")
    if decompress:
        cols = cols + tuple(c for c in DECOMPRESS_COLUMNS if c not in cols)
    return tuple(dict.fromkeys(cols))


_INT32_MAX = 2**31 - 1
# Frame bytes and rows per compiled pass: its texts (even where U+FFFD replacement triples invalid bytes) and
# its host and msgId texts (<= 56 bytes a row) stay under 2 GiB, Arrow's 32-bit offsets.
_PASS_BYTES = 512 << 20
_PASS_ROWS = 1 << 24
# datetime.fromtimestamp's range (years 1..9999), with a month of margin for the previous-month step
_DATETIME_MIN_MS = int(np.datetime64("0001-02-01T00:00:00", "ms").astype(np.int64))
_DATETIME_MAX_MS = int(np.datetime64("9999-12-31T23:59:59.999", "ms").astype(np.int64))


def tune_allocator() -> bool:
    """Keep freed numpy temporaries in the heap instead of returning them to the OS (glibc only).

    A batch allocates many multi-megabyte buffers; by default glibc serves them with ``mmap`` (or trims
    the heap) and the next batch pays a page fault per 4 KiB again, which measured 30-40% of decode time.
    This raises glibc's mmap and trim thresholds for the whole process, so its resident size stays near its
    peak, and stops numpy from asking for transparent huge pages on large arrays (each first touch of one
    zeroes 2 MiB: half the decode time went to the kernel).  Call it in processes that decode (Spark Python
    workers, benchmarks), not in a library import.  Returns False where there is no glibc ``mallopt``."""
    global _TUNED
    if _TUNED:
        return True
    try:
        from numpy._core.multiarray import _set_madvise_hugepage
        _set_madvise_hugepage(False)
    except ImportError:  # another numpy layout: keep its default
        pass
    try:
        libc = ctypes.CDLL("libc.so.6")
        mallopt = libc.mallopt
    except (OSError, AttributeError):
        return False
    # M_MMAP_THRESHOLD (-3) at glibc's 64-bit maximum, M_TRIM_THRESHOLD (-1) 1 GiB, M_TOP_PAD (-2) 64 MiB
    _TUNED = bool(mallopt(-3, 32 << 20) and mallopt(-1, 1 << 30) and mallopt(-2, 64 << 20))
    return _TUNED


_TUNED = False

#: the size from which glibc serves an allocation with its own ``mmap`` in a driver (:func:`bound_driver_memory`)
DRIVER_MMAP_THRESHOLD = 16 << 20


def bound_driver_memory() -> dict:
    """Let a driver give back what its steps free (the opposite trade of :func:`tune_allocator`, which keeps a
    decoding worker's freed buffers for its next batch).  A driver runs many steps, each with its own high water,
    and the audit runs its tasks in it on local[N]; with the defaults what one step freed stayed resident under
    the next (the 4 GiB audit's driver peaked at 710-740 MiB, the 1 GiB one's crept up run after run in one
    session):

    * Arrow's default pool becomes jemalloc where this pyarrow has it: mimalloc kept the pages freed by every thread
      that ever allocated (release_unused collects the caller's only).  A job's process chose it before pyarrow
      loaded (jobs/__init__.py: ARROW_DEFAULT_MEMORY_POOL), which Arrow's C++ defaults follow as well; here,
      pyarrow's own default is set, for a process that loaded pyarrow first (a notebook).  4 GiB: 580-630 MiB,
      the same speed;
    * glibc serves allocations from :data:`DRIVER_MMAP_THRESHOLD` up with their own ``mmap``, given back when
      freed: its dynamic threshold rises to 32 MiB as large arrays are freed, and the heaps then keep each freed
      array below that, between live ones, where ``malloc_trim`` cannot return it.  4 GiB: 505-525 MiB, within
      the noise of the time (at 4 MiB: 505-511 MiB, but 7% slower: a page fault per 4 KiB of each new array).
      A fixed threshold also fixes the trim threshold where it was, at 128 KiB: every buffer under 16 MiB freed at
      a heap's top was handed back and faulted in again by the next (the state's look at a 1 GiB store read its
      files' zeros 8 MiB at a time: 0.68 s, 0.6 s of it page faults, against 0.18 s), so it is set to the same
      16 MiB: a heap keeps at most that free at its top, and the driver's steps still give back the rest.

    A setting the user made (ARROW_DEFAULT_MEMORY_POOL, MALLOC_MMAP_THRESHOLD_, MALLOC_TRIM_THRESHOLD_) is left as
    it is; so is a process :func:`tune_allocator` tuned.  Returns what it set."""
    done = {}
    if not os.environ.get("ARROW_DEFAULT_MEMORY_POOL"):
        try:
            pa.set_memory_pool(pa.jemalloc_memory_pool())
            done["arrow_pool"] = "jemalloc"
        except NotImplementedError:  # a build without it keeps its default (Arrow's error is one)
            pass
    if not _TUNED:
        for option, name, env in ((-3, "mmap_threshold", "MALLOC_MMAP_THRESHOLD_"),
                                  (-1, "trim_threshold", "MALLOC_TRIM_THRESHOLD_")):
            if os.environ.get(env):
                continue
            try:
                if ctypes.CDLL("libc.so.6").mallopt(option, DRIVER_MMAP_THRESHOLD):  # M_MMAP_ / M_TRIM_THRESHOLD
                    done[name] = DRIVER_MMAP_THRESHOLD
            except (OSError, AttributeError):  # no glibc
                break
    return done


def release_freed_memory() -> None:
    """Give the memory freed so far back to the OS: glibc's free heap pages (``malloc_trim``) and Arrow's pool's
    unused memory.  The audit's driver calls it between its steps: otherwise each step's freed temporaries stay
    resident, and the driver's peak is the sum of its steps' high waters rather than the largest one's."""
    import pyarrow as pa

    pa.default_memory_pool().release_unused()
    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):  # no glibc
        pass


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
# The compiled passes, loaded once per process (numba's import and its disk cache cost ~1 s; a cold compile
# ~15 s), on the first decode rather than on import: schema users never pay it.


#: how this process got the compiled passes, once it has: seconds and how many numba compiled (not from its cache)
KERNEL_LOAD: dict = {}


@functools.cache
def _compiled():
    started = time.perf_counter()
    from . import compiled
    KERNEL_LOAD.update(seconds=time.perf_counter() - started, compiled=compiled.compiled_in_this_process())
    return compiled


def load_compiled() -> None:
    """Import the compiled passes now (from numba's disk cache, or compiled): a process that will need them can
    pay for it while it waits for something else (the audit, while its Spark session starts)."""
    _compiled()


def bucket_hulls(phys: np.ndarray, rows: np.ndarray, row_base: int, shift: int, last: int, first: np.ndarray,
                 final: np.ndarray) -> None:
    """Per routing bucket (``phys >> shift``, -1 below 0, ``last + 1`` past the end), the first and last row of the
    offsets in it, into ``first`` and ``final`` (indexed bucket + 1), in one compiled pass: an index file holds up
    to 20 M entries, whose sort would cost more than the read (jobs.audit.plan.Buckets.of_offsets)."""
    _compiled().bucket_hulls(np.ascontiguousarray(phys, np.int64), np.ascontiguousarray(rows, np.int64), row_base,
                             shift, last, first, final)


def string_poly_sums(offsets: np.ndarray, data: np.ndarray, poly: np.uint64) -> np.ndarray:
    """Per string (bytes ``offsets[i]`` .. ``offsets[i + 1]`` - 1 of ``data``): the sum over its bytes ``b`` at
    ``k`` of ``(b + 1) * poly ** (k + 1)`` modulo 2 ** 64, in one compiled pass (jobs/audit/buckets.py's key hash:
    numpy's per-byte temporaries cost a fifth of the scan where every message's keys are hashed)."""
    offsets = np.ascontiguousarray(offsets, np.int64)
    out = np.empty(max(len(offsets) - 1, 0), np.uint64)
    _compiled().string_poly_sums(offsets, np.ascontiguousarray(data, np.uint8), np.uint64(poly), out)
    return out


@functools.cache
def _tables() -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """Small string tables as (offsets, bytes) for compiled.take_strings."""
    C = _compiled()

    def table(texts) -> tuple[np.ndarray, np.ndarray]:
        raw = [t.encode("utf-8") for t in texts]
        return np.cumsum([0] + [len(r) for r in raw], dtype=np.int32), np.frombuffer(b"".join(raw) or b"\0", np.uint8)

    return {
        "names": table(_NAMED_PROPERTIES.values()),
        "tran_type": table(L.tran_type_of(t << 2) for t in range(4)),
        "compression": table(L.compression_of(c | t << 8) for c in (0, L.COMPRESSED_FLAG) for t in range(8)),
        "error": table(kind.value for kind, _ in C.ERRORS),
        "error_field": table(f for _, f in C.ERRORS),
    }


# ---------------------------------------------------------------------------------------------------------
# numpy buffers -> Arrow arrays


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


def _mask(valid) -> pa.Array | None:
    return None if valid is None else pa.array(~valid)


def _strings(off: np.ndarray, data: np.ndarray, valid, typ: pa.DataType = pa.string()) -> pa.Array:
    """String/binary array of ``data[off[i]:off[i+1]]`` (int32 offsets, as the compiled passes write them)."""
    return pa.Array.from_buffers(typ, len(off) - 1, [_bitmap(valid), pa.py_buffer(off), pa.py_buffer(data)])


def _string_parts(arr: pa.Array) -> tuple[np.ndarray, np.ndarray]:
    """(data bytes, int64 offsets) of a string or binary array (either offset width)."""
    _, off_buf, data_buf = arr.buffers()[:3]
    odt = np.int64 if arr.type in (pa.large_string(), pa.large_binary()) else np.int32
    if off_buf is None:  # an empty array may have no buffers at all
        return np.zeros(0, np.uint8), np.zeros(len(arr) + 1, np.int64)
    offsets = np.frombuffer(off_buf, odt, len(arr) + 1, arr.offset * np.dtype(odt).itemsize).astype(np.int64)
    data = np.frombuffer(data_buf, np.uint8) if data_buf is not None else np.zeros(0, np.uint8)
    return data, offsets


def _trimmed(buf: np.ndarray, used: int) -> np.ndarray:
    """``buf`` cut to ``used`` items in place (realloc; the compiled passes write into upper-bound buffers)."""
    buf.resize(used, refcheck=False)
    return buf


def _replace_invalid_utf8(off: np.ndarray, data: np.ndarray, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The texts of ``rows`` decoded as store_format reads text (Java's ``new String(bytes, UTF_8)``):
    invalid sequences become U+FFFD (at most 3 bytes for 1: a pass's texts stay under 2 GiB, see
    _PASS_BYTES); the other rows are kept byte for byte."""
    pieces, grow, prev = [], np.zeros(len(off), np.int64), 0
    for i in rows.tolist():
        a, b = int(off[i]), int(off[i + 1])
        fixed = data[a:b].tobytes().decode("utf-8", "replace").encode("utf-8")
        pieces += [data[prev:a], np.frombuffer(fixed, np.uint8)]
        grow[i + 1] = len(fixed) - (b - a)
        prev = b
    pieces.append(data[prev:off[-1]])
    return (off + np.cumsum(grow)).astype(np.int32), np.concatenate(pieces)


def _parse_int32(text: str | None) -> int | None:
    """An integer property read as Message.delay_level reads DELAY (Python ``int``), kept if it fits an int."""
    if text is None:
        return None
    try:
        value = int(text)
    except ValueError:
        return None
    return value if -2**31 <= value <= _INT32_MAX else None


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
# The kernel


def decode_frames(frames: Frames | pa.Array | pa.ChunkedArray, *, columns: Iterable[str] | None = None,
                  decompress: bool = False, max_decompressed: int = DEFAULT_MAX_DECOMPRESSED,
                  delay_levels: dict[int, int] = L.DEFAULT_DELAY_LEVELS) -> pa.RecordBatch:
    """Decode a batch of CommitLog record frames into one message row each (schema :func:`message_schema`).

    ``frames``: a :class:`Frames` (see :func:`frames_from_buffer`) or a binary/large_binary array of whole
    records.  ``columns`` selects the output (default :data:`DEFAULT_COLUMNS`); work for columns not asked for
    is skipped.  ``decompress`` adds ``decompressed_body`` (capped at ``max_decompressed`` bytes; null plus
    ``decompress_error`` on failure).  ``delay_levels`` is the broker's ``messageDelayLevel`` table, for
    SCHEDULE_TOPIC_XXXX tagsCodes.

    A frame that does not decode gives a row of nulls with ``error``/``error_field`` set as
    :func:`store_format.codec.decode_record` would raise them; a null frame gives an all-null row."""
    if not isinstance(frames, Frames):
        frames = frames_from_binary(frames)
    cols = resolve_columns(columns, decompress)
    passes = [_Decoder(part, set(cols), max_decompressed, delay_levels).run() for part in _passes(frames)]
    schema = message_schema(cols)
    return pa.RecordBatch.from_arrays([passes[0][f.name] if len(passes) == 1 else
                                       pa.concat_arrays([p[f.name] for p in passes]) for f in schema], schema=schema)


def _passes(frames: Frames) -> list[Frames]:
    """The batch cut into compiled passes of at most _PASS_BYTES of frames and _PASS_ROWS rows, so every text
    a pass writes keeps 32-bit offsets (a frame's text is at most its TOTALSIZE, an int; a frame bigger than
    a pass goes alone).  Batches decoders see (Spark's, a segment's window) are one pass."""
    n = len(frames)
    capped = np.minimum(frames.sizes, _INT32_MAX)
    if n <= _PASS_ROWS and capped.sum() <= _PASS_BYTES:
        return [frames]
    ends = np.cumsum(capped)
    cuts = [0]
    while cuts[-1] < n:
        a = cuts[-1]
        b = int(np.searchsorted(ends, (ends[a - 1] if a else 0) + _PASS_BYTES, side="right"))
        cuts.append(min(max(b, a + 1), a + _PASS_ROWS, n))
    return [Frames(frames.data, frames.starts[a:b], frames.sizes[a:b],
                   None if frames.present is None else frames.present[a:b]) for a, b in zip(cuts, cuts[1:])]


def index_key_hashes(topic, uniq_key, keys, indexable: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The keys IndexService indexes for each decoded record (``topic``, ``uniq_key``, ``keys`` columns; rows where
    ``indexable``): (row, source, hash) per distinct key of a record, source -1 for its UNIQ_KEY and ``j`` for
    piece ``j`` of ``pc.list_flatten(keys)``; hash is IndexService.indexKeyHashMethod of ``topic#key``
    (store_format.javahash.index_key_hash), computed over UTF-16 in one compiled pass."""
    def flat(a):
        return a.combine_chunks() if isinstance(a, pa.ChunkedArray) else a

    topic, uniq_key, keys = flat(topic), flat(uniq_key), flat(keys)
    tdata, toff = _string_parts(topic)
    udata, uoff = _string_parts(uniq_key)
    uvalid = uniq_key.is_valid().to_numpy(zero_copy_only=False)
    list_off = np.frombuffer(keys.buffers()[1], np.int32, len(keys) + 1, keys.offset * 4) if len(keys) else \
        np.zeros(1, np.int32)
    pieces = keys.values
    kdata, koff = _string_parts(pieces)
    return _compiled().index_keys(tdata, toff.astype(np.int32), udata, uoff.astype(np.int32), uvalid,
                                  np.ascontiguousarray(list_off, np.int32), koff.astype(np.int32), kdata,
                                  np.asarray(indexable, bool))


def scan_offset_table(raw, nest_limit: int = 100, *, check_only: bool = False):
    """consumerOffset.json in fastjson's layout, read in one compiled pass (decoding.compiled.offset_table_scan): the
    ``store_format.config.OffsetScan`` that ``store_format.config.offset_columns`` takes from its ``offset_scan``,
    or None where the text is anything else (a member nested deeper than ``nest_limit`` too: the exact parser's
    limit counts from the top).  Where every name is topic@group without an escape, given once, and every map's
    queue ids ascend within int (what brokers write), the rows too: the maps in (topic, group) order of their
    bytes (offset_name_order), their entries (offset_rows) and names (gather_spans) -- the caller checks that
    the names are valid UTF-8, for which that order is Python's.

    ``check_only``: the same grammar read without keeping anything per map or entry (decoding.compiled.
    offset_table_check, memory constant for a file of any size: ``raw`` may be a read-only map of it), as a
    ``store_format.config.OffsetCheck`` -- whether the broker can load the file, not its rows."""
    from store_format.config import TOPIC_GROUP_SEPARATOR, OffsetCheck, OffsetScan

    C = _compiled()
    if check_only:
        return _check_offset_table(C, raw, nest_limit, OffsetCheck)
    counted = _check_offset_table(C, raw, nest_limit, OffsetCheck, counts_only=True)  # the same grammar
    if counted is None:
        return None
    # the arrays at the sizes the check counted: each a column of the file's maps or entries, nothing to spare
    # (sized a colon each, as bounds, they took 64 bytes of address space a colon: 7 GB for a 1 GiB file)
    maps, entries, others = counted
    name_lo, name_hi, map_first, map_count = (np.empty(maps, np.int64) for _ in range(4))
    name_esc = np.empty(maps, np.bool_)
    keys, values = np.empty(entries, np.int64), np.empty(entries, np.int64)
    other_lo, other_hi = np.empty(others, np.int64), np.empty(others, np.int64)
    b = np.frombuffer(raw, np.uint8)
    n_maps, n_entries, n_other = C.offset_table_scan(b, name_lo, name_hi, name_esc, map_first, map_count, keys,
                                                     values, other_lo, other_hi, nest_limit)
    if n_maps < 0:
        return None
    name_lo, name_hi, name_esc, map_first, map_count = (a[:n_maps] for a in (name_lo, name_hi, name_esc, map_first,
                                                                             map_count))
    keys, values = keys[:n_entries], values[:n_entries]
    rows = None
    at, order = np.empty(n_maps, np.int64), np.empty(n_maps, np.int64)
    if not name_esc.any() and \
            C.offset_name_order(b, name_lo, name_hi, ord(TOPIC_GROUP_SEPARATOR), at, order) == 0:
        row_map, qid, offset = np.empty(n_entries, np.int32), np.empty(n_entries, np.int32), np.empty(n_entries,
                                                                                                     np.int64)
        at = at[order]
        if (name_hi - name_lo).sum() < 2**31 and \
                C.offset_rows(order, map_first, map_count, keys, values, row_map, qid, offset):  # int32 offsets
            rows = (row_map, _spans(b, name_lo[order], at), _spans(b, at + 1, name_hi[order]), qid, offset)
    return OffsetScan(name_lo, name_hi, name_esc, map_first, map_count, keys, values, other_lo[:n_other],
                      other_hi[:n_other], rows)


_CHECK_OTHERS = 1 << 16  # top-level members beside offsetTable the check keeps (a broker writes one: dataVersion)


def _check_offset_table(C, raw, nest_limit: int, OffsetCheck, counts_only: bool = False):
    """``scan_offset_table``'s ``check_only`` (an OffsetCheck, or None), or with ``counts_only`` the (maps,
    entries, other members) the scan will find (None: it steps aside)."""
    from store_format.config import TOPIC_GROUP_SEPARATOR

    b = np.frombuffer(raw, np.uint8) if len(raw) else np.zeros(0, np.uint8)
    if b.flags.writeable:  # the compiled signature takes read-only bytes (maps, bytes)
        b = b.view()
        b.flags.writeable = False
    out = np.zeros(C.CHECK_FIELDS, np.int64)
    other_lo, other_hi = np.empty(_CHECK_OTHERS, np.int64), np.empty(_CHECK_OTHERS, np.int64)
    got = C.offset_table_check(b, nest_limit, ord(TOPIC_GROUP_SEPARATOR), out, other_lo, other_hi)
    if counts_only and got == -2:  # more other members than the check keeps: they are counted by the colons
        colons = raw.count(b":") if isinstance(raw, bytes) else int(np.count_nonzero(b == 58))
        return colons, colons, colons
    if got != 0:
        return None
    if counts_only:
        return int(out[C.CHECK_MAPS]), int(out[C.CHECK_ENTRIES]), int(out[C.CHECK_OTHERS])
    kind = int(out[C.CHECK_PROBLEM_KIND])
    problem = None if out[C.CHECK_PROBLEM_MAP] < 0 else (
        int(out[C.CHECK_PROBLEM_MAP]), int(out[C.CHECK_NAME_LO]), int(out[C.CHECK_NAME_HI]),
        int(out[C.CHECK_QUEUE_ID]) if kind == C.CHECK_QUEUE_ID_OUTSIDE_INT else None)
    others = int(out[C.CHECK_OTHERS])
    return OffsetCheck(int(out[C.CHECK_MAPS]), int(out[C.CHECK_ENTRIES]), int(out[C.CHECK_ESCAPED]),
                       list(zip(other_lo[:others].tolist(), other_hi[:others].tolist())), problem)


def _spans(b: np.ndarray, lo: np.ndarray, hi: np.ndarray) -> pa.Array:
    """The byte spans ``b[lo:hi]`` (under 2 GiB in all) as an Arrow string array, not validated: the caller checks
    the text."""
    off = np.zeros(len(lo) + 1, np.int32)
    np.cumsum(hi - lo, dtype=np.int32, out=off[1:])
    out = np.empty(int(off[-1]), np.uint8)
    _compiled().gather_spans(b, lo, hi, off, out)
    return pa.StringArray.from_buffers(len(lo), pa.py_buffer(off), pa.py_buffer(out))


def gather_frames(buf, starts: np.ndarray, sizes: np.ndarray) -> np.ndarray:
    """The frames at ``starts`` (``sizes`` bytes each) of ``buf`` one after another, copied in one compiled pass
    (a frame at a time in Python cost ~1 us each where a family looks up a million messages)."""
    data = buf if isinstance(buf, np.ndarray) else np.frombuffer(buf, np.uint8)
    lo = np.ascontiguousarray(starts, np.int64)
    off = np.zeros(len(lo) + 1, np.int64)
    np.cumsum(sizes, out=off[1:])
    out = np.empty(int(off[-1]), np.uint8)
    _compiled().gather_spans(data, lo, lo + np.asarray(sizes, np.int64), off, out)
    return out


class CompiledFramer:
    """``store_format.commitlog``'s bulk framer compiled (:func:`decoding.compiled.frame_run`): the same runs of plain
    valid messages, found by hopping from record to record with every check of ``frame_at`` (the body CRC
    slice-by-8, no Python call per record), ~4x faster than the numpy framer with CRCs, ~2x without.  Pass the
    class as ``framer`` to ``salvage_arrays`` / ``walk_arrays``; whatever ends a run is still decided by the
    scalar ``frame_at``.  A run is not searched in windows: one call runs to the first record that is not a
    plain valid message."""

    window_min = window_max = 1 << 62
    _CHUNK = 1 << 20  # records per compiled call (its output arrays are sized for this many)

    def __init__(self, buf, limit: int, base_offset: int, check_crc: bool, check_physical_offset: bool,
                 crc_checked_before: int = 0):
        self.limit, self.base, self.check_crc, self.check_phys = limit, base_offset, check_crc, check_physical_offset
        self.crc_from = crc_checked_before
        data = np.frombuffer(buf, np.uint8) if len(buf) else np.zeros(0, np.uint8)
        if not 0 <= limit <= len(data):  # the compiled loads are unchecked: every one must lie inside the buffer
            raise ValueError(f"limit {limit} outside the buffer's {len(data)} bytes")
        if data.flags.writeable:  # the compiled signature takes read-only bytes (mmaps, bytes, Arrow buffers)
            data = data.view()
            data.flags.writeable = False
        self.data = data

    def close(self):
        """Drop the view of the buffer (an mmap cannot close while it lives)."""
        self.data = None

    def run(self, start: int, hi: int) -> FrameRun:
        if start < 0:
            raise ValueError(f"a run cannot start at {start}")
        C = _compiled()
        pieces = []
        while True:
            cap = min(self._CHUNK, max(1, (hi - start) // L.MIN_RECORD_SIZE + 1))
            positions, sizes, magics = np.empty(cap, np.int64), np.empty(cap, np.int64), np.empty(cap, np.int32)
            n = C.frame_run(self.data, start, hi, self.limit, self.base, self.check_crc, self.check_phys,
                            self.crc_from, C.LAYOUT, C.INT32_OFFSETS, C.INT64_OFFSETS, C.PARAMS, C.CRC_TABLE,
                            positions, sizes, magics)
            pieces.append((positions[:n], sizes[:n], magics[:n]))
            if n < cap:
                break
            start = int(positions[-1] + sizes[-1])  # full: the run may go on
        if len(pieces) == 1:
            return FrameRun(*(a.copy() if len(a) < cap else a for a in pieces[0]))  # not the rest of the buffers
        return FrameRun(*(np.concatenate(col) for col in zip(*pieces)))

    def each(self, starts: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The record at each of ``starts`` alone, as :meth:`run` would take it: (TOTALSIZE, BODYLENGTH) where it
        is a plain valid message, (0, -1) where not."""
        C = _compiled()
        starts = np.ascontiguousarray(starts, np.int64)
        sizes, body_lengths = np.empty(len(starts), np.int64), np.empty(len(starts), np.int64)
        C.frame_each(self.data, starts, self.limit, self.base, self.check_crc, self.check_phys, C.LAYOUT,
                     C.INT32_OFFSETS, C.INT64_OFFSETS, C.PARAMS, C.CRC_TABLE, sizes, body_lengths)
        return sizes, body_lengths

    _ENTRY_ROWS = 1 << 18  # rows per compiled call of entry_walk

    def entry_walk(self, start: int, until: int | None, salvage: bool) -> EntryWalk:
        """``store_format.commitlog.dledger_entry_walk`` of these bytes (a DLedger data file), compiled
        (:func:`decoding.compiled.dledger_walk`): the same rows, no Python step per entry."""
        if start < 0:
            raise ValueError(f"a walk cannot start at {start}")
        C = _compiled()
        until = self.limit if until is None else until
        pieces, state = [], np.zeros(2, np.int64)
        while True:
            # an entry is more than 44 bytes: rows for the bytes left plus a damaged step's three (capped)
            cap = min(self._ENTRY_ROWS, max(0, min(until, self.limit) - start) // 45 + 8)
            cols = (np.empty(cap, np.int8), np.empty(cap, np.int64), np.empty(cap, np.int64),
                    np.empty(cap, np.int32), np.empty(cap, np.int8), np.empty(cap, np.int64))
            n = C.dledger_walk(self.data, start, self.limit, until, self.base, salvage, *cols, state)
            pieces.append(tuple(c[:n] for c in cols))
            if state[1]:
                break
            start = int(state[0])
        if len(pieces) == 1:
            return EntryWalk(*pieces[0])
        return EntryWalk(*(np.concatenate(col) for col in zip(*pieces)))


def decode_binary(arr: pa.Array | pa.ChunkedArray, **options) -> pa.RecordBatch:
    """:func:`decode_frames` over a binary or large_binary column of whole records."""
    return decode_frames(frames_from_binary(arr), **options)


def decode_buffer(buf, starts, sizes, **options) -> pa.RecordBatch:
    """:func:`decode_frames` over the records at ``starts`` (``sizes`` bytes each) of one buffer."""
    return decode_frames(frames_from_buffer(buf, starts, sizes), **options)


class _Decoder:
    """One batch; each step fills ``self.cols`` with the requested columns."""

    def __init__(self, frames: Frames, want: set, max_decompressed: int, delay_levels: dict[int, int]):
        self.f, self.want, self.n = frames, want, len(frames)
        self.max_decompressed, self.delay_levels = max_decompressed, delay_levels
        self.cols: dict[str, pa.Array] = {}

    def needs(self, *names: str) -> bool:
        return not self.want.isdisjoint(names)

    def run(self) -> dict[str, pa.Array]:
        C, f, n, c = _compiled(), self.f, self.n, self.cols
        data = np.ascontiguousarray(f.data).reshape(-1).view(np.uint8)
        starts = np.ascontiguousarray(f.starts, np.int64)
        sizes = np.ascontiguousarray(f.sizes, np.int64)
        present = np.ones(n, bool) if f.present is None else np.ascontiguousarray(f.present, bool)
        text = self.needs(*_NEEDS_TEXT)
        self.find_names = self.needs(*_NAMED_COLUMNS)
        want = (C.WANT_TEXT if text else 0) | (C.WANT_CRC if "body_crc_ok" in self.want else 0) \
            | (C.WANT_BORN_HOST if "born_host" in self.want else 0) \
            | (C.WANT_STORE_HOST if "store_host" in self.want else 0) | (C.WANT_MSG_ID if "msg_id" in self.want else 0)
        self.with_body = text and self.needs("body", *DECOMPRESS_COLUMNS)
        want |= C.WANT_BODY if self.with_body else 0
        # body, topic and properties each fit in the frames, and in TOTALSIZE
        text_bound = int(np.minimum(sizes, _INT32_MAX).sum()) if text else 0

        def texts(bound: int) -> tuple[np.ndarray, np.ndarray]:
            return np.empty(n + 1, np.int32), np.empty(bound, np.uint8)

        i32 = np.empty((len(C.INT32_FIELDS), n), np.int32)
        i64 = np.empty((len(C.INT64_FIELDS), n), np.int64)
        err, flags = np.empty(n, np.int8), np.empty(n, np.int8)
        body, topic, props = texts(text_bound if self.with_body else 0), texts(text_bound), texts(text_bound)
        born = texts(n * C.HOST_TEXT_MAX if want & C.WANT_BORN_HOST else 0)
        store = texts(n * C.HOST_TEXT_MAX if want & C.WANT_STORE_HOST else 0)
        msg_id = texts(n * C.MSG_ID_TEXT_MAX if want & C.WANT_MSG_ID else 0)
        C.decode_records(data, starts, sizes, present, C.LAYOUT, C.INT32_OFFSETS, C.INT64_OFFSETS, C.PARAMS, want,
                         C.CRC_TABLE, C.SCHEDULE_TOPIC, C.CRC_PROPERTY_KEY, C.CRC_PROPERTY_BACK, i32, i64, err, flags,
                         *body, *topic, *props, *born, *store, *msg_id)

        ok = present & (err == 0)
        valid = self.valid = None if ok.all() else ok
        self.ok, self.flags = ok, flags
        self.i32 = dict(zip(C.INT32_FIELDS, i32))
        self.i64 = dict(zip(C.INT64_FIELDS, i64))
        if self.needs(*STATUS_COLUMNS):
            code = err.astype(np.int64) - 1  # -1: no error
            for name in STATUS_COLUMNS:
                c[name] = self._pick(name, code, code >= 0) if err.any() else pa.nulls(n, pa.string())
        for name, values in (*self.i32.items(), *self.i64.items()):
            if name in self.want:
                c[name] = _num(values, _FIELD_TYPES[name], valid)
        for name, (off, buf) in (("born_host", born), ("store_host", store), ("msg_id", msg_id)):
            if name in self.want:
                c[name] = _strings(off, _trimmed(buf, off[-1]), valid)
        sys_flag = self.i32["sys_flag"]
        if "tran_type" in self.want:
            c["tran_type"] = self._pick("tran_type", (sys_flag & L.TRANSACTION_MASK) >> 2, valid)
        if "compression" in self.want:
            c["compression"] = self._pick("compression", ((sys_flag & L.COMPRESSED_FLAG) != 0) * 8
                                          + ((sys_flag & L.COMPRESSION_TYPE_MASK) >> 8), valid)
        if "size_ok" in self.want:  # the frame holds exactly one record (TOTALSIZE == calMsgLength is checked)
            c["size_ok"] = _bool(sizes == self.i32["store_size"], valid)
        if "body_crc_ok" in self.want:
            c["body_crc_ok"] = _bool((flags & C.FLAG_CRC_OK) != 0, valid)
        if text:
            self._texts(body, topic, props)
        return c


    def _pick(self, table: str, idx: np.ndarray, valid) -> pa.Array:
        """Row ``i`` is entry ``idx[i]`` of a small string table."""
        off, data = _tables()[table]
        return _strings(*self._take(data, off, idx.astype(np.int64)), valid)

    @staticmethod
    def _take(data, off, idx) -> tuple[np.ndarray, np.ndarray]:
        return _compiled().take_strings(data, off, idx)

    def _texts(self, body, topic, props):
        C, c, valid = _compiled(), self.cols, self.valid
        if self.with_body:  # else not copied (decoding.compiled.WANT_BODY)
            self.body = c["body"] = _strings(body[0], _trimmed(body[1], body[0][-1]), valid, pa.binary())
        toff, tdata = topic[0], _trimmed(topic[1], topic[0][-1])
        bad = np.flatnonzero(self.flags & C.FLAG_TOPIC_NOT_UTF8)
        if len(bad):
            toff, tdata = _replace_invalid_utf8(toff, tdata, bad)
        c["topic"] = _strings(toff, tdata, valid)
        poff, pdata = props[0], _trimmed(props[1], props[0][-1])
        bad = np.flatnonzero(self.flags & C.FLAG_PROPS_NOT_UTF8)
        if len(bad):  # Java parses the text with U+FFFD in place
            poff, pdata = _replace_invalid_utf8(poff, pdata, bad)
        c["properties_raw"] = _strings(poff, pdata, valid)
        if "crc_property" in self.want:
            c["crc_property"] = _bool((self.flags & C.FLAG_CRC_PROPERTY) != 0, valid)
        if "invalid_utf8" in self.want:
            which = ((self.flags & C.FLAG_TOPIC_NOT_UTF8) != 0) + 2 * ((self.flags & C.FLAG_PROPS_NOT_UTF8) != 0)
            c["invalid_utf8"] = pa.array([None, "topic", "properties", "topic,properties"], pa.string()).take(
                pa.array(which.astype(np.int64), mask=None if valid is None else ~valid))
        if self.needs(*DECOMPRESS_COLUMNS):
            self._decompress()
        if self.needs(*_PROPERTY_COLUMNS):
            n = self.n
            max_entries = (len(pdata) + n) // 4 + 1  # an entry takes >= 3 bytes plus a separator
            parsed = (np.empty(n + 1, np.int32), np.empty(max_entries + 1, np.int32), np.empty(len(pdata), np.uint8),
                      np.empty(max_entries + 1, np.int32), np.empty(len(pdata), np.uint8),
                      np.empty((len(_NAMED_PROPERTIES), n if self.find_names else 0), np.int64))
            names_off, names_data = _tables()["names"]
            C.parse_properties(pdata, poff, names_data, names_off, self.find_names, *parsed)
            self._properties(*parsed)

    def _properties(self, entry_off, key_off, key_data, value_off, value_data, named):
        C, c, valid, want = _compiled(), self.cols, self.valid, self.want
        m = int(entry_off[-1])
        key_off, value_off = _trimmed(key_off, m + 1), _trimmed(value_off, m + 1)
        value_data = _trimmed(value_data, value_off[-1])
        if "properties" in want:
            keys = _strings(key_off, _trimmed(key_data, key_off[-1]), None)
            c["properties"] = pa.MapArray.from_arrays(pa.array(entry_off), keys,
                                                      _strings(value_off, value_data, None), mask=_mask(valid))
        if not self.find_names:
            return

        def slot(col: str) -> np.ndarray:
            return named[_NAMED_SLOT[col]]

        for col in ("uniq_key", "tags", "real_topic", "retry_topic", "origin_message_id"):
            if col in want:
                c[col] = _strings(*self._take(value_data, value_off, slot(col)), slot(col) >= 0)
        if "keys" in want:
            list_off, piece_off, pieces = C.split_keys(value_data, value_off, slot("keys"))
            c["keys"] = pa.ListArray.from_arrays(pa.array(list_off),
                                                 _strings(piece_off, pieces, None), mask=_mask(valid))
        for col in ("delay_level", "real_queue_id"):
            if col in want:
                c[col] = self._int_property(value_data, value_off, slot(col))
        if "tags_code" in want:
            c["tags_code"] = _num(self._tags_code(value_data, value_off, slot("tags"), slot("delay_level")),
                                  pa.int64(), valid)
        if self.needs("producer_ip", "producer_pid", "producer_time"):
            self._producer(value_data, value_off, slot("uniq_key"))

    def _texts_of(self, value_data, value_off, idx: np.ndarray, rows: np.ndarray) -> list[str]:
        j = idx[rows]
        return [value_data[a:b].tobytes().decode("utf-8") for a, b in zip(value_off[j].tolist(),
                                                                        value_off[j + 1].tolist())]

    def _int_property(self, value_data, value_off, idx: np.ndarray) -> pa.Array:
        C = _compiled()
        state, value = C.parse_ints(value_data, value_off, idx)
        ask = np.flatnonzero(state == C.INT_ASK_PYTHON)
        known = state == C.INT_VALUE
        if len(ask):
            parsed = [_parse_int32(t) for t in self._texts_of(value_data, value_off, idx, ask)]
            fits = np.array([p is not None for p in parsed], bool)
            value[ask[fits]] = [p for p in parsed if p is not None]
            known[ask[fits]] = True
        return _num(value, pa.int32(), known)

    def _tags_code(self, value_data, value_off, tags: np.ndarray, delay: np.ndarray) -> np.ndarray:
        """Message.dispatch_tags_code: the tags hash, or for SCHEDULE_TOPIC_XXXX with a DELAY level the
        deliver time (``_deliver_wait``: once per distinct level, or per text for unusual spellings)."""
        C = _compiled()
        code = C.tags_hashes(value_data, value_off, tags)
        rows = np.flatnonzero(((self.flags & C.FLAG_SCHEDULE_TOPIC) != 0) & (delay >= 0))
        if not len(rows):
            return code
        state, level = C.parse_ints(value_data, value_off, delay[rows])
        wait = np.full(len(rows), -1, np.int64)  # -1: the tags hash stays
        plain = np.flatnonzero(state == C.INT_VALUE)
        levels, where = np.unique(level[plain], return_inverse=True)
        waits = [_deliver_wait(str(v), self.delay_levels) for v in levels.tolist()]
        wait[plain] = np.array([-1 if w is None else w for w in waits], np.int64)[where]
        ask = np.flatnonzero(state != C.INT_VALUE)  # spaces, signs alone, past an int: as Python's int reads it
        for k, t in zip(ask.tolist(), self._texts_of(value_data, value_off, delay, rows[ask])):
            w = _deliver_wait(t, self.delay_levels)
            wait[k] = -1 if w is None else w
        due = wait >= 0
        code[rows[due]] = self.i64["store_timestamp"][rows[due]] + wait[due]
        return code

    def _producer(self, value_data, value_off, uniq: np.ndarray):
        """Producer ip/pid/time from UNIQ_KEY (MessageClientIDSetter); keys in an unusual spelling go through
        store_format.ids.parse_uniq_key itself (it takes whatever ``bytes.fromhex`` takes)."""
        C, c = _compiled(), self.cols
        born_ts = self.i64["born_timestamp"]
        state, pid, time, time_ok, ip_off, ip_text = C.uniq_keys(value_data, value_off, uniq, born_ts, C.NIBBLE,
                                                                 _DATETIME_MIN_MS, _DATETIME_MAX_MS)
        decoded = state == C.UNIQ_DECODED
        ips = _strings(ip_off, ip_text, decoded)
        ask = np.flatnonzero(state == C.UNIQ_ASK_PYTHON)
        if len(ask):
            ip_list = ips.to_pylist()
            for i, t in zip(ask.tolist(), self._texts_of(value_data, value_off, uniq, ask)):
                try:
                    uk = parse_uniq_key(t)
                except StoreFormatError:
                    continue
                ip_list[i], pid[i], decoded[i] = uk.client_ip_str, uk.pid, True
                if _DATETIME_MIN_MS <= born_ts[i] <= _DATETIME_MAX_MS:
                    time[i], time_ok[i] = uk.timestamp(int(born_ts[i])), True
            ips = pa.array(ip_list, pa.string())
        c["producer_ip"] = ips
        c["producer_pid"] = _num(pid, pa.int32(), decoded)
        c["producer_time"] = _num(time, pa.int64(), decoded & time_ok)

    def _decompress(self):
        n, sys_flag = self.n, self.i32["sys_flag"]
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
        self.cols["decompressed_body"] = both.take(_num(idx, pa.int64(), good))
        self.cols["decompress_error"] = pa.array(errors, pa.string())

# ---------------------------------------------------------------------------------------------------------
# Index files (store_format.indexfile.EntryViews over a read-only map): the hash chains and the entries' summary

# (key hash, offset) pairs the duplicate count sorts at once: what a task holds beyond a byte per entry
SUMMARY_BUCKET_ENTRIES = 1 << 22


def chain_bits(v: "EntryViews") -> np.ndarray:
    """Each entry's chain problems (:data:`CHAIN_PROBLEMS`) as bits, bit ``j`` for problem ``j``, one compiled pass
    over the file's bytes (decoding.compiled.index_chain_bits: reachable is what ``selectPhyOffset`` can walk to from
    some slot).  Five bytes per entry while it runs (four per hash slot where there are fewer slots), one after."""
    c = _compiled()
    return c.index_chain_bits(v.raw, c.index_geometry(v.hash_slot_num), v.hash_slot_num, v.count)


def problem_lists(bits: np.ndarray) -> pa.ListArray:
    """Entries' problem bits (:func:`chain_bits`) as a list of problem names per entry, in CHAIN_PROBLEMS order."""
    masks = (bits[:, None] >> np.arange(len(CHAIN_PROBLEMS), dtype=np.uint8)) & 1
    offsets = np.zeros(len(bits) + 1, np.int32)
    np.cumsum(masks.sum(axis=1), out=offsets[1:])
    _, which = np.nonzero(masks)  # row-major: each entry's problems in CHAIN_PROBLEMS order
    names = pa.array(CHAIN_PROBLEMS, pa.string()).take(pa.array(which, pa.int64()))
    return pa.ListArray.from_arrays(pa.array(offsets), names)


def entry_summary(v: "EntryViews", bucket_entries: int = SUMMARY_BUCKET_ENTRIES) -> dict:
    """What a file's entries (1..count-1) say about its header: the slots they use, the physical offsets of the
    first and last, and (key hash, offset) pairs indexed more than once (extra entries, pairs), counted exactly
    (decoding.compiled.index_entry_summary; memory: a byte per entry plus ``bucket_entries`` pairs)."""
    if v.count <= 1:
        return {"entry_slots": 0, "duplicate_entries": 0, "duplicated_pairs": 0}
    c = _compiled()
    slots, duplicate_entries, duplicated_pairs = c.index_entry_summary(v.raw, c.index_geometry(v.hash_slot_num),
                                                                       v.hash_slot_num, v.count, bucket_entries)
    return {"entry_slots": int(slots), "first_entry_phy_offset": int(v.physical_offset[1]),
            "last_entry_phy_offset": int(v.physical_offset[v.count - 1]),
            "duplicate_entries": int(duplicate_entries), "duplicated_pairs": int(duplicated_pairs)}


@dataclass
class EntriesChecked:
    """What a check of an index file's entries leaves for the next check of the same file, grown since (``audit
    --state``): entries are only appended, so the next check reads the old ones' problems and counts from here."""

    count: int  # entries 0 .. count-1 were checked
    flagged: np.ndarray  # int32: the entries that had a chain problem
    used: np.ndarray | None  # bool per hash slot: used by an entry; None: entries out of commitlog order (not resumed)
    extra: int = 0  # duplicates among the runs of equal offsets before the last one
    pairs: int = 0
    run_start: int = 1  # the last run's first entry (its keys may go on in the next entries)
    heads: np.ndarray | None = None  # uint64[3]: the slots' heads (decoding.compiled.index_slot_heads); None: unknown


def check_entries(v: "EntryViews", was: EntriesChecked | None = None,
                  bucket_entries: int = SUMMARY_BUCKET_ENTRIES) -> tuple[np.ndarray, dict, EntriesChecked]:
    """:func:`chain_bits` and :func:`entry_summary` of a file, and what the next check of it can go on from; with
    ``was`` (the last check of the same file, whose entries 1 .. was.count-1 are unchanged: the caller verified
    them), only the new entries and the flagged ones are looked at again, besides the reachability of them all
    (decoding.compiled.index_chain_bits_resumed, index_entry_runs).  Where the old entries had no problem and the
    ways into them are the slots' heads of then, they are not walked at all (index_chain_bits_grown)."""
    c = _compiled()
    geo = c.index_geometry(v.hash_slot_num)
    if was is not None and not v.count // 2 <= was.count <= v.count:  # mostly new entries: the whole pass is faster
        was = None
    grown = False
    if was is not None and was.heads is not None and not len(was.flagged):
        bits, grown, heads = c.index_chain_bits_grown(v.raw, geo, v.hash_slot_num, v.count, was.count,
                                                      np.ascontiguousarray(was.heads, np.uint64))
    if was is None:
        bits = c.index_chain_bits(v.raw, geo, v.hash_slot_num, v.count)
        heads = c.index_slot_heads(v.raw, geo, v.hash_slot_num, v.count)
    elif not grown:
        bits, heads = c.index_chain_bits_resumed(v.raw, geo, v.hash_slot_num, v.count, was.count,
                                                 np.ascontiguousarray(was.flagged, np.int32))
    flagged = np.flatnonzero(bits).astype(np.int32)
    resumed = was is not None and was.used is not None
    used = was.used.copy() if resumed else np.zeros(v.hash_slot_num, np.bool_)
    ordered, slots, extra, pairs, run_start, last_extra, last_pairs = c.index_entry_runs(
        v.raw, geo, v.hash_slot_num, v.count, was.count if resumed else 1, used, was.run_start if resumed else 1)
    if resumed:
        extra, pairs = extra + was.extra, pairs + was.pairs
    if v.count <= 1:
        summary = {"entry_slots": 0, "duplicate_entries": 0, "duplicated_pairs": 0}
    elif ordered:
        summary = {"entry_slots": int(slots), "first_entry_phy_offset": int(v.physical_offset[1]),
                   "last_entry_phy_offset": int(v.physical_offset[v.count - 1]),
                   "duplicate_entries": int(extra + last_extra), "duplicated_pairs": int(pairs + last_pairs)}
    else:  # out of order (a re-dispatch appends older offsets): counted whole, and whole again next time
        summary = entry_summary(v, bucket_entries)
    after = EntriesChecked(v.count, flagged, used, int(extra), int(pairs), int(run_start), heads) if ordered \
        else EntriesChecked(v.count, flagged, None, heads=heads)
    return bits, summary, after


def pairs_in(a_phys: np.ndarray, a_hash: np.ndarray, b_phys: np.ndarray, b_hash: np.ndarray) -> np.ndarray:
    """Whether each (offset, hash) pair of ``a`` is one of ``b``'s (decoding.compiled.pairs_in_sorted); either side
    put in offset order first where it is not (entries and keys mostly come in commitlog order)."""
    found = np.zeros(len(a_phys), bool)
    if not len(a_phys) or not len(b_phys):
        return found

    def ordered(phys, hashes):
        phys, hashes = np.ascontiguousarray(phys, np.int64), np.ascontiguousarray(hashes, np.int32)
        if len(phys) > 1 and (phys[1:] < phys[:-1]).any():
            order = np.argsort(phys, kind="stable")
            return phys[order], hashes[order], order
        return phys, hashes, None

    a_phys, a_hash, a_order = ordered(a_phys, a_hash)
    b_phys, b_hash, _ = ordered(b_phys, b_hash)
    hits = found if a_order is None else np.zeros(len(a_phys), bool)
    _compiled().pairs_in_sorted(a_phys, a_hash, b_phys, b_hash, hits)
    if a_order is not None:
        found[a_order] = hits
    return found
