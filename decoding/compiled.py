"""The per-record loops of :mod:`decoding.kernels`, compiled once per process with numba (and cached on disk).

Record grammar (offsets from :func:`store_format.layout.record_layout`, passed in as the ``lay`` table)::

    TOTALSIZE 4 | MAGIC 4 | BODYCRC 4 | QUEUEID 4 | FLAG 4 | QUEUEOFFSET 8 | PHYSICALOFFSET 8 | SYSFLAG 4 |
    BORNTS 8 | BORNHOST 8/20 | STORETS 8 | STOREHOST 8/20 | RECONSUME 4 | PREPAREDTX 8 | BODYLEN 4 | BODY |
    TOPICLEN 1 (V1) / 2 (V2) | TOPIC | PROPLEN 2 | PROPERTIES

Properties grammar (``MessageDecoder.string2messageProperties``, RocketMQ >= 4.9.1)::

    PROPERTIES := SEGMENT ( \\u0002 SEGMENT )*      SEGMENT := KEY \\u0001 VALUE   (the first \\u0001 splits)

    an empty KEY or VALUE drops the segment; a repeated KEY keeps its last value.

Every kernel, by what it serves (each called through a public wrapper of decoding.kernels, never from elsewhere):

* records: :func:`decode_records` walks every frame once: the framing checks of ``codec.decode_record`` in its
  order, the header fields, copies of BODY/TOPIC/PROPERTIES, the body CRC (slice-by-8), host strings, msgId and
  whether the record ends in the ``__CRC32#`` property (5.2.0+).
  :func:`parse_properties` splits each row's PROPERTIES into map entries and finds the named properties;
  :func:`tags_hashes`, :func:`split_keys`, :func:`uniq_keys` and :func:`parse_ints` derive columns from them;
  :func:`take_strings` gathers strings by row index (named property values, small name tables);
  :func:`index_keys` gives the keys IndexService indexes for each record and their hashes.
* framing: :func:`frame_run` (the run of plain valid messages from a position, ``CompiledFramer``) and
  :func:`frame_each` (its verdict on records at given positions); :func:`dledger_walk` (a DLedger data file's
  entry headers, ``CompiledFramer.entry_walk``).
* index files: :func:`index_chain_bits` (each entry's hash-chain problems), :func:`index_entry_summary` (slots
  used, repeated pairs), :func:`pairs_in_sorted` (which (offset, hash) pairs of one set are in another), with
  :func:`index_geometry` (their ``geo`` argument, built beside the constants that name its positions).
* routing: :func:`bucket_hulls` (each routing bucket's first and last row, jobs/audit/plan.py's ``Buckets``);
  :func:`string_poly_sums` (the polynomial of jobs/audit/buckets.py's key hash over each string's bytes).
* consumerOffset.json: :func:`offset_table_scan`, :func:`offset_name_order`, :func:`offset_rows` (the offset
  table's rows in one pass, decoding/metadata.py) and :func:`gather_spans` (spans of bytes into an Arrow buffer).

Every table (layout offsets, magics, CRC table, ...) is an argument, never a global: numba's disk cache is
keyed on this file only, so a constant taken from another module would go stale.  Variable-length outputs are
written into buffers the caller sized with an upper bound (and trims afterwards); offsets are Arrow's int32
(the caller keeps a pass's texts under 2 GiB).
"""
from __future__ import annotations

import os
import tempfile


def _writable_dir(path: str) -> bool:
    try:
        os.makedirs(path, exist_ok=True)
        tempfile.TemporaryFile(dir=path).close()
        return True
    except OSError:
        return False


def cache_plan(module_file: str, environ, temp_dir: str) -> tuple[bool, str | None]:
    """Where numba keeps this module's compiled code between processes: (caching possible, the folder to use,
    or None for numba's own choice).

    numba caches next to the module (``__pycache__``) when it can.  A read-only install gets NUMBA_CACHE_DIR
    pointed at a per-user cache directory, else at one in the temp dir (unless the user has set it).

    From a zip (Spark ``--py-files``) numba would cache in its per-user directory under a folder named after
    the zip's path, which on an executor is a new work folder per application: every application would compile
    again (~15 s per process) and leave a folder behind.  So the folder returned is NUMBA_CACHE_DIR if set,
    else the per-user one, else the temp dir's, and :func:`_install_zip_locator` keys the cache inside it on the source alone; nothing is
    ever written beside the zip.  Where nothing is writable, caching is off and each process compiles once."""
    user_cache = environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    uid = os.getuid() if hasattr(os, "getuid") else 0
    fallbacks = (os.path.join(user_cache, "rocketmq-forensics-numba"),
                 os.path.join(temp_dir, f"rocketmq-forensics-numba-{uid}"))
    if not os.path.isfile(module_file):  # in a zip: NUMBA_CACHE_DIR (numba ignores it for zips), else ours
        chosen = ((environ["NUMBA_CACHE_DIR"],) if environ.get("NUMBA_CACHE_DIR") else ()) + fallbacks
        return next(((True, d) for d in chosen if _writable_dir(d)), (False, None))
    if environ.get("NUMBA_CACHE_DIR") or _writable_dir(os.path.join(os.path.dirname(module_file), "__pycache__")):
        return True, None
    return next(((True, d) for d in fallbacks if _writable_dir(d)), (False, None))


_ZIP_CACHE_DIR: str | None = None  # set when this module runs from a zip and can cache (see _install_zip_locator)


def _configure_cache() -> bool:
    """Apply :func:`cache_plan`; runs before numba is imported, which reads NUMBA_CACHE_DIR."""
    global _ZIP_CACHE_DIR
    module_file = os.path.abspath(__file__)
    cache, cache_dir = cache_plan(module_file, os.environ, tempfile.gettempdir())
    if cache_dir and not os.path.isfile(module_file):
        _ZIP_CACHE_DIR = cache_dir
    elif cache_dir:
        os.environ["NUMBA_CACHE_DIR"] = cache_dir
    return cache


CACHE = _configure_cache()

import numpy as np  # noqa: E402
from llvmlite import ir  # noqa: E402
from numba import njit  # noqa: E402
from numba import types as nt  # noqa: E402
from numba.core import cgutils  # noqa: E402
from numba.core import config as _numba_config  # noqa: E402
from numba.extending import intrinsic  # noqa: E402

_numba_config.reload_config()  # numba may have been imported before NUMBA_CACHE_DIR was set


def _install_zip_locator(cache_dir: str) -> None:
    """numba's cache for this module, run from a zip, in ``cache_dir/zip-<hash of this source>``: the same
    folder whatever the zip's path (numba's ZipCacheLocator keys it on the path, new per Spark application on
    an executor), one per version of the source (numba's index also checks the source's hash).  The locator
    answers for this file only, ahead of numba's own."""
    from numba.core.caching import CacheImpl, ZipCacheLocator

    this = os.path.normpath(os.path.abspath(__file__))

    class _StableZipLocator(ZipCacheLocator):
        def __init__(self, py_func, py_file):
            super().__init__(py_func, py_file)
            self._cache_path = os.path.join(cache_dir, f"zip-{self.get_source_stamp().hex()[:16]}")

        @classmethod
        def from_function(cls, py_func, py_file):
            if os.path.normpath(os.path.abspath(py_file)) != this:
                return None
            self = cls(py_func, py_file)
            try:
                self.ensure_cache_path()
            except OSError:
                return None  # numba's own locators decide (its per-user folder, or no cache)
            return self

    CacheImpl._locator_classes.insert(0, _StableZipLocator)


if _ZIP_CACHE_DIR:
    _install_zip_locator(_ZIP_CACHE_DIR)

from store_format import layout as L  # noqa: E402
from store_format.errors import ErrorKind  # noqa: E402

# ---------------------------------------------------------------------------------------------------------
# Tables (built here from store_format, passed to the compiled functions as arguments)

#: columns of the ``lay`` table, one row per layout variant (born v6 | store v6 << 1 | magic V2 << 2)
(LAY_BODY, LAY_TOPIC_LEN_WIDTH, LAY_MIN_SIZE, LAY_BODY_LENGTH, LAY_BORN_HOST, LAY_BORN_IP_WIDTH, LAY_STORE_HOST,
 LAY_STORE_IP_WIDTH) = range(8)
#: header integers copied to the output, in the row order of the ``i32``/``i64`` outputs (decode_records
#: writes them in this order)
INT32_FIELDS = ("store_size", "magic_version", "body_crc", "queue_id", "flag", "sys_flag", "reconsume_times")
INT64_FIELDS = ("queue_offset", "physical_offset", "born_timestamp", "store_timestamp",
                "prepared_transaction_offset")
_I32_STORE_SIZE, _I32_MAGIC_VERSION, _I32_BODY_CRC, _I32_QUEUE_ID, _I32_FLAG, _I32_SYS_FLAG, \
    _I32_RECONSUME_TIMES = range(len(INT32_FIELDS))
_I64_PHYSICAL_OFFSET = INT64_FIELDS.index("physical_offset")
#: ``params``: magics, the SYSFLAG offset and IPv6 bits
(PAR_MAGIC_V1, PAR_MAGIC_V2, PAR_SYS_FLAG_OFFSET, PAR_BORN_V6, PAR_STORE_V6) = range(5)
#: (kind, field) of error code ``c`` is ERRORS[c - 1]; codes in codec.decode_record's check order
ERRORS = (
    (ErrorKind.TRUNCATED, "store_size"),  # fewer than 8 bytes, or TOTALSIZE beyond the frame
    (ErrorKind.BAD_MAGIC, "magic"),
    (ErrorKind.TRUNCATED, "sys_flag"),
    (ErrorKind.BAD_LENGTH, "store_size"),  # TOTALSIZE below the layout's minimum
    (ErrorKind.BAD_LENGTH, "body_length"),
    (ErrorKind.BAD_LENGTH, "topic_length"),
    (ErrorKind.BAD_LENGTH, "properties_length"),
    (ErrorKind.SIZE_MISMATCH, "store_size"),
)
E_TRUNCATED, E_BAD_MAGIC, E_TRUNCATED_SYS_FLAG, E_BELOW_MIN_SIZE, E_BODY_LENGTH, E_TOPIC_LENGTH, \
    E_PROPERTIES_LENGTH, E_SIZE_MISMATCH = range(1, len(ERRORS) + 1)
#: states of parse_ints
INT_NULL, INT_VALUE, INT_ASK_PYTHON, INT_OUT_OF_RANGE = range(4)
#: states of uniq_keys
UNIQ_NONE, UNIQ_DECODED, UNIQ_ASK_PYTHON = range(3)
#: ``want`` bits of decode_records
WANT_TEXT, WANT_CRC, WANT_BORN_HOST, WANT_STORE_HOST, WANT_MSG_ID, WANT_BODY = 1, 2, 4, 8, 16, 32
#: ``flags`` bits written by decode_records
FLAG_TOPIC_NOT_UTF8, FLAG_PROPS_NOT_UTF8, FLAG_SCHEDULE_TOPIC, FLAG_CRC_OK = 1, 2, 4, 8
FLAG_CRC_PROPERTY = 16  # the record's last 20 bytes start with ``__CRC32#`` 0x01 (store_format.propcrc)
#: widest text a host / msgId can take: '[' 39 ']:' 11 (IPv6 and a negative port), 2 x 28 hex digits
HOST_TEXT_MAX, MSG_ID_TEXT_MAX, IP_TEXT_MAX = 53, 56, 39


def _variant(born_v6: bool, store_v6: bool, magic_version: int) -> int:
    return int(born_v6) | int(store_v6) << 1 | int(magic_version == 2) << 2


def _layout_table() -> np.ndarray:
    table = np.zeros((8, 8), np.int64)
    for lay in L.ALL_LAYOUTS:
        row = table[_variant(lay.born_v6, lay.store_v6, lay.magic_version)]
        row[LAY_BODY], row[LAY_TOPIC_LEN_WIDTH], row[LAY_MIN_SIZE] = lay.body_offset, lay.topic_length_width, \
            lay.min_size
        row[LAY_BODY_LENGTH] = lay.offsets["body_length"]
        row[LAY_BORN_HOST], row[LAY_BORN_IP_WIDTH] = lay.offsets["born_host"], lay.widths["born_host"] - L.PORT_WIDTH
        row[LAY_STORE_HOST], row[LAY_STORE_IP_WIDTH] = lay.offsets["store_host"], \
            lay.widths["store_host"] - L.PORT_WIDTH
    return table


def _field_offsets(names) -> np.ndarray:
    """(8 variants, len(names)) byte offsets of header integers; store_size/magic_version/sys_flag are read
    during framing and get -1."""
    out = np.full((8, len(names)), -1, np.int64)
    for lay in L.ALL_LAYOUTS:
        v = _variant(lay.born_v6, lay.store_v6, lay.magic_version)
        for k, name in enumerate(names):
            if name not in ("store_size", "magic_version", "sys_flag"):
                out[v, k] = lay.offsets[name]
    return out


def _crc_table() -> np.ndarray:
    """Slice-by-8 tables of the reflected CRC-32 polynomial (zlib's, as UtilAll.crc32), flat."""
    t = np.zeros((8, 256), np.int64)
    for i in range(256):
        c = i
        for _ in range(8):
            c = (c >> 1) ^ 0xEDB88320 if c & 1 else c >> 1
        t[0, i] = c
    for k in range(1, 8):
        t[k] = (t[k - 1] >> 8) ^ t[0, t[k - 1] & 0xFF]
    return t.astype(np.uint32).reshape(-1)


LAYOUT = _layout_table()
INT32_OFFSETS = _field_offsets(INT32_FIELDS)
INT64_OFFSETS = _field_offsets(INT64_FIELDS)
PARAMS = np.array([L.MAGIC_V1, L.MAGIC_V2, L.SYS_FLAG_OFFSET, L.BORNHOST_V6_FLAG, L.STOREHOST_V6_FLAG], np.int64)
CRC_TABLE = _crc_table()
NIBBLE = np.full(256, 255, np.uint8)  # hex digit -> value, 255 for anything else
for _i, _c in enumerate(b"0123456789abcdef"):
    NIBBLE[_c] = _i
for _i, _c in enumerate(b"ABCDEF"):
    NIBBLE[_c] = 10 + _i
SCHEDULE_TOPIC = np.frombuffer(L.SCHEDULE_TOPIC.encode(), np.uint8).copy()
# the whole-record CRC property's key, found CRC32_RESERVED_LEN bytes before a record's end (RocketMQ >= 5.2.0)
CRC_PROPERTY_KEY = np.frombuffer((L.PROPERTY_CRC32 + L.NAME_VALUE_SEPARATOR).encode("ascii"), np.uint8).copy()
CRC_PROPERTY_BACK = L.CRC32_RESERVED_LEN

# ---------------------------------------------------------------------------------------------------------
# numba types of the signatures (inputs read-only, so buffers of bytes, mmaps and Arrow all pass)

_u1r, _u1 = nt.Array(nt.uint8, 1, "C", readonly=True), nt.Array(nt.uint8, 1, "C")
_i8r, _i8 = nt.Array(nt.int64, 1, "C", readonly=True), nt.Array(nt.int64, 1, "C")
_b1r, _b1 = nt.Array(nt.boolean, 1, "C", readonly=True), nt.Array(nt.boolean, 1, "C")
_i1 = nt.Array(nt.int8, 1, "C")
_i4r, _i4 = nt.Array(nt.int32, 1, "C", readonly=True), nt.Array(nt.int32, 1, "C")  # Arrow's 32-bit offsets
_u4r = nt.Array(nt.uint32, 1, "C", readonly=True)
_u8r = nt.Array(nt.uint64, 1, "C", readonly=True)
_i8r2, _i8_2 = nt.Array(nt.int64, 2, "C", readonly=True), nt.Array(nt.int64, 2, "C")
_i4_2 = nt.Array(nt.int32, 2, "C")
_OPTS = dict(cache=CACHE, nogil=True, error_model="numpy")
# Helpers called once or more per row run without numba's reference counting: a call that passes arrays to a
# compiled function otherwise increments and decrements their counts atomically (measured 40 ns a call).
# They never allocate.
_inner = njit(_nrt=False, error_model="numpy")

# ---------------------------------------------------------------------------------------------------------
# Unchecked loads, stores and copies.  numba wraps negative indices (a compare and select on every access),
# which keeps LLVM from merging byte loads or vectorizing copies: a copy loop measured 7x slower than memcpy.
# Every position passed here is inside the array (the callers check lengths first).


def _index(context, builder, signature, args, k: int = 1):
    """Argument ``k`` as a 64-bit integer: a narrower one (a byte used as a table index) would be
    sign-extended by getelementptr."""
    return context.cast(builder, args[k], signature.args[k], nt.int64)


def _loader(bits: int, swap: bool):
    @intrinsic
    def load(typingctx, arr, pos):
        def codegen(context, builder, signature, args):
            a = context.make_array(signature.args[0])(context, builder, args[0])
            ptr = builder.bitcast(builder.gep(a.data, [_index(context, builder, signature, args)]),
                                  ir.IntType(bits).as_pointer())
            v = builder.load(ptr, align=1)
            if swap:
                v = builder.bswap(v)
            return builder.sext(v, ir.IntType(64)) if bits < 64 else v
        return nt.int64(arr, pos), codegen
    return load


_int8 = _loader(8, False)  # signed byte
_i16 = _loader(16, True)  # big-endian signed, as the record stores integers
_i32 = _loader(32, True)
_i64 = _loader(64, True)
_le32 = _loader(32, False)  # little-endian, for the CRC
_word = _loader(64, False)  # eight bytes at once, for byte-class tests and compares


def _storer(bits: int):
    @intrinsic
    def store(typingctx, arr, pos, value):
        def codegen(context, builder, signature, args):
            a = context.make_array(signature.args[0])(context, builder, args[0])
            ptr = builder.bitcast(builder.gep(a.data, [_index(context, builder, signature, args)]),
                                  ir.IntType(bits).as_pointer())
            v = context.cast(builder, args[2], signature.args[2], nt.int64)
            builder.store(builder.trunc(v, ir.IntType(bits)) if bits < 64 else v, ptr, align=1)
            return context.get_dummy_value()
        return nt.void(arr, pos, value), codegen
    return store


_put64 = _storer(64)  # little-endian


@intrinsic
def _at(typingctx, arr, pos):
    """``arr[pos]`` for an integer array."""
    def codegen(context, builder, signature, args):
        a = context.make_array(signature.args[0])(context, builder, args[0])
        return builder.load(builder.gep(a.data, [_index(context, builder, signature, args)]))
    return arr.dtype(arr, pos), codegen


@intrinsic
def _memcpy(typingctx, dst, dst_at, src, src_at, n):
    """``dst[dst_at:dst_at+n] = src[src_at:src_at+n]`` for byte arrays, through llvm.memcpy."""
    def codegen(context, builder, signature, args):
        d = context.make_array(signature.args[0])(context, builder, args[0])
        s = context.make_array(signature.args[2])(context, builder, args[2])
        cgutils.raw_memcpy(builder, builder.gep(d.data, [_index(context, builder, signature, args, 1)]),
                           builder.gep(s.data, [_index(context, builder, signature, args, 3)]),
                           _index(context, builder, signature, args, 4), 1)
    return nt.void(dst, dst_at, src, src_at, n), codegen


@_inner
def _copy(dst, at, src, start, n):
    _memcpy(dst, at, src, start, n)
    return at + n


@_inner
def _same(a, p, b, q, n):
    j = 0
    while j + 8 <= n:
        if _word(a, p + j) != _word(b, q + j):
            return False
        j += 8
    while j < n:
        if _at(a, p + j) != _at(b, q + j):
            return False
        j += 1
    return True


_HIGH_BITS = -0x7F7F7F7F7F7F7F80  # 0x8080808080808080 as an int64
_LOW_BITS = 0x7F7F7F7F7F7F7F7F


@intrinsic
def _ctz(typingctx, v):
    """Count of trailing zero bits (``v`` != 0)."""
    def codegen(context, builder, signature, args):
        return builder.cttz(args[0], ir.IntType(1)(1))
    return nt.int64(nt.int64), codegen


@_inner
def _below_3(w):
    """Bit 7 of each byte of ``w`` set where the byte is below 3 (the property separators, and NUL), exactly:
    ``(b & 0x7F) + 0x7D`` reaches bit 7 when ``b & 0x7F >= 3``, and ``| w`` covers bytes >= 0x80."""
    return ~(((w & _LOW_BITS) + 0x7D7D7D7D7D7D7D7D) | w) & _HIGH_BITS


@_inner
def _any_high_byte(a, s, e):
    """Whether ``a[s:e]`` holds a byte >= 0x80 (not ASCII), eight bytes at a time; the last word overlaps."""
    if e - s < 8:
        acc = np.int64(0)
        for p in range(s, e):
            acc |= _at(a, p)
        return acc >= 0x80
    acc = _word(a, e - 8)
    for p in range(s, e - 8, 8):
        acc |= _word(a, p)
    return acc & _HIGH_BITS != 0


@_inner
def _utf8_valid(a, s, e):
    """Well-formed UTF-8 (Unicode table 3-7: no overlongs, surrogates or code points past U+10FFFF), the
    strictness of Python's decoder and of Arrow's validation."""
    i = s
    while i < e:
        c = a[i]
        if c < 0x80:
            i += 1
            continue
        if c < 0xC2 or c > 0xF4:
            return False
        if c < 0xE0:
            if i + 1 >= e or a[i + 1] & 0xC0 != 0x80:
                return False
            i += 2
            continue
        lo, hi = 0x80, 0xBF
        if c == 0xE0:
            lo = 0xA0
        elif c == 0xED:
            hi = 0x9F
        elif c == 0xF0:
            lo = 0x90
        elif c == 0xF4:
            hi = 0x8F
        need = 3 if c < 0xF0 else 4
        if i + need > e or a[i + 1] < lo or a[i + 1] > hi:
            return False
        for j in range(2, need):
            if a[i + j] & 0xC0 != 0x80:
                return False
        i += need
    return True


@_inner
def _write_uint(out, p, v):
    digits = 1
    t = v
    while t >= 10:
        t //= 10
        digits += 1
    q = p + digits - 1
    for _ in range(digits):
        out[q] = 48 + v % 10
        v //= 10
        q -= 1
    return p + digits


@_inner
def _write_int(out, p, v):
    if v < 0:
        out[p] = 45  # '-'
        return _write_uint(out, p + 1, -v)
    return _write_uint(out, p, v)


@_inner
def _write_ip(out, p, src, at, width):
    """IPv4 dotted decimal, or IPv6 as Java's getHostAddress (eight lower-case groups, no '::')."""
    if width == 4:
        for j in range(4):
            if j:
                out[p] = 46  # '.'
                p += 1
            p = _write_uint(out, p, np.int64(src[at + j]))
        return p
    for g in range(8):
        if g:
            out[p] = 58  # ':'
            p += 1
        v = np.int64(src[at + 2 * g]) << 8 | np.int64(src[at + 2 * g + 1])
        shift = 12
        while shift > 0 and (v >> shift) == 0:
            shift -= 4
        while shift >= 0:
            d = (v >> shift) & 15
            out[p] = 48 + d if d < 10 else 87 + d
            p += 1
            shift -= 4
    return p


@_inner
def _write_host(out, p, src, at, width):
    """store_format.ids.format_host: 'ip:port' or '[ipv6]:port' from ip bytes then a big-endian int port."""
    if width != 4:
        out[p] = 91  # '['
        p += 1
    p = _write_ip(out, p, src, at, width)
    if width != 4:
        out[p] = 93  # ']'
        p += 1
    out[p] = 58  # ':'
    return _write_int(out, p + 1, _i32(src, at + width))


@_inner
def _hex8(x):
    """Four bytes (the low 32 bits of ``x``, first byte lowest) as eight upper-case hex digits packed for a
    little-endian store: each byte moves to its own 16-bit lane, its nibbles to the lane's two bytes (high
    nibble first), and a nibble n becomes '0' + n, plus 7 from 10 ('A') on."""
    x &= 0xFFFFFFFF
    x = (x | x << 16) & 0x0000FFFF0000FFFF
    x = (x | x << 8) & 0x00FF00FF00FF00FF
    n = (x >> 4 & 0x000F000F000F000F) | (x & 0x000F000F000F000F) << 8
    letters = ((n + 0x0606060606060606) & 0x1010101010101010) >> 4
    return n + 0x3030303030303030 + letters * 7


@_inner
def _host_text(data, at, width, out, p, cache):
    """Host text at ``out[p:]``, reusing the text of an equal host met earlier in the batch: ``cache`` is
    direct-mapped, rows (ip+port as three integers, width, text start, text length); a batch has few hosts."""
    k1 = _word(data, at)
    k2 = _word(data, at + 8) if width > 4 else 0
    k3 = _i32(data, at + 16) if width > 4 else 0
    h = (k1 ^ k2 * 31 ^ k3 * 961) * -7046029254386353131  # Fibonacci hashing: the top bits pick the slot
    slot = (h >> 58) & (cache.shape[0] - 1)
    if cache[slot, 3] == width and cache[slot, 0] == k1 and cache[slot, 1] == k2 and cache[slot, 2] == k3:
        return _copy(out, p, out, cache[slot, 4], cache[slot, 5])
    end = _write_host(out, p, data, at, width)
    cache[slot, 0], cache[slot, 1], cache[slot, 2], cache[slot, 3], cache[slot, 4], cache[slot, 5] = \
        k1, k2, k3, width, p, end - p
    return end


@_inner
def _crc32(a, s, n, t):
    """CRC-32 of ``a[s:s+n]``, slice-by-8: ``t`` is the 8 x 256 table, flat."""
    crc = np.int64(0xFFFFFFFF)
    p = s
    end8 = s + (n & ~7)
    while p < end8:
        one = crc ^ (_le32(a, p) & 0xFFFFFFFF)
        two = _le32(a, p + 4) & 0xFFFFFFFF
        crc = np.int64(_at(t, 1792 + (one & 0xFF)) ^ _at(t, 1536 + ((one >> 8) & 0xFF))
                       ^ _at(t, 1280 + ((one >> 16) & 0xFF)) ^ _at(t, 1024 + (one >> 24))
                       ^ _at(t, 768 + (two & 0xFF)) ^ _at(t, 512 + ((two >> 8) & 0xFF))
                       ^ _at(t, 256 + ((two >> 16) & 0xFF)) ^ _at(t, two >> 24))
        p += 8
    while p < s + n:
        crc = np.int64(_at(t, (crc ^ _at(a, p)) & 0xFF)) ^ (crc >> 8)
        p += 1
    return crc ^ 0xFFFFFFFF


# ---------------------------------------------------------------------------------------------------------
# Properties


@_inner
def _key_hash(a, s, e):
    h = np.int64(-3750763034362895579)  # FNV-1a
    for j in range(s, e):
        h = (h ^ a[j]) * 1099511628211
    return h


@_inner
def _dedupe_few(a, ks, ke, k, keep):
    """keep[j] False where a later entry of the row has the same key (HashMap.put: the last value wins, in the
    position of the last occurrence), comparing every pair."""
    for x in range(k):
        keep[x] = True
        lx, first = ke[x] - ks[x], _at(a, ks[x])
        for y in range(x + 1, k):
            if ke[y] - ks[y] == lx and _at(a, ks[y]) == first and _same(a, ks[x], a, ks[y], lx):
                keep[x] = False
                break


@_inner
def _before(hashes, x, y):
    return hashes[x] < hashes[y] or (hashes[x] == hashes[y] and x < y)


@_inner
def _sort_by_hash(hashes, order, k):
    """order[:k] = 0..k-1 sorted by (hash, index): a heapsort, so a hostile row stays O(k log k)."""
    for x in range(k):
        order[x] = x
    for end in range(k, 1, -1):
        if end == k:  # heapify once
            for root in range(k // 2 - 1, -1, -1):
                _sift(hashes, order, root, k)
        order[0], order[end - 1] = order[end - 1], order[0]
        _sift(hashes, order, 0, end - 1)


@_inner
def _sift(hashes, order, root, size):
    while True:
        child = 2 * root + 1
        if child >= size:
            return
        if child + 1 < size and _before(hashes, order[child], order[child + 1]):
            child += 1
        if not _before(hashes, order[root], order[child]):
            return
        order[root], order[child] = order[child], order[root]
        root = child


@_inner
def _dedupe_many(a, ks, ke, k, keep, hashes, order, reps):
    """As _dedupe_few for a row of many entries: grouped by key hash, each group compared against its distinct
    keys only, so a row of 8,000 equal keys stays linear."""
    for x in range(k):
        hashes[x] = _key_hash(a, ks[x], ke[x])
    _sort_by_hash(hashes, order, k)
    g = 0
    while g < k:
        h = g
        while h < k and hashes[order[h]] == hashes[order[g]]:
            h += 1
        nreps = 0
        for z in range(h - 1, g - 1, -1):  # last occurrence first
            x = order[z]
            lx = ke[x] - ks[x]
            keep[x] = True
            for r in range(nreps):
                y = reps[r]
                if ke[y] - ks[y] == lx and _same(a, ks[x], a, ks[y], lx):
                    keep[x] = False
                    break
            if keep[x]:
                reps[nreps] = x
                nreps += 1
        g = h


# ---------------------------------------------------------------------------------------------------------
# The pass over the frames


@_inner
def _record_variant(sys_flag, version, born_v6, store_v6):
    """The row of the ``lay`` table of a record: born host IPv6 | store host IPv6 << 1 | magic V2 << 2."""
    return (1 if sys_flag & born_v6 else 0) | (2 if sys_flag & store_v6 else 0) | (4 if version == 2 else 0)


@_inner
def _lengths(data, s, total, min_size, tlw, body_length_at, body_offset):
    """The length checks of a record at ``s`` whose TOTALSIZE ``total`` is within bounds, in
    ``codec.decode_record``'s order (as ``commitlog.frame_at``): (error code or 0, BODYLENGTH, TOPICLENGTH,
    PROPERTIESLENGTH); each length read only when the ones before it fit in the record."""
    end = s + total
    body_len = _i32(data, s + body_length_at)
    if body_len < 0 or s + body_offset + body_len + tlw > end:
        return E_BODY_LENGTH, body_len, 0, 0
    tl_at = s + body_offset + body_len
    topic_len = _int8(data, tl_at) if tlw == 1 else _i16(data, tl_at)
    props_at = tl_at + tlw + topic_len
    if topic_len < 0 or props_at + 2 > end:
        return E_TOPIC_LENGTH, body_len, topic_len, 0
    props_len = _i16(data, props_at)
    if props_len < 0 or props_at + 2 + props_len > end:
        return E_PROPERTIES_LENGTH, body_len, topic_len, props_len
    if min_size + body_len + topic_len + props_len != total:
        return E_SIZE_MISMATCH, body_len, topic_len, props_len
    return 0, body_len, topic_len, props_len


@njit((_u1r, _i8r, _i8r, _b1r, _i8r2, _i8r2, _i8r2, _i8r, nt.int64, _u4r, _u1r, _u1r, nt.int64,
       _i4_2, _i8_2, _i1, _i1,
       _i4, _u1, _i4, _u1, _i4, _u1, _i4, _u1, _i4, _u1, _i4, _u1), **_OPTS)
def decode_records(data, starts, sizes, present, lay, i32_offsets, i64_offsets, params, want, crc_table,
                   schedule_topic, crc_key, crc_back,
                   i32, i64, err, flags,
                   body_off, body_data, topic_off, topic_data, props_off, props_data,
                   born_off, born_data, store_off, store_data, id_off, id_data):
    """Frame ``i`` is ``data[starts[i]:starts[i]+sizes[i]]``.  Writes ``err[i]`` (0 = decoded), the header
    integers (``i32``/``i64`` rows as INT32_FIELDS/INT64_FIELDS, 0 on error rows), ``flags`` and, as ``want``
    asks, the texts: ``*_off[i]:*_off[i+1]`` of ``*_data`` (empty on error rows).  With the texts, whether the
    record ends in ``crc_key`` and its value (``crc_back`` bytes from its end, just copied: FLAG_CRC_PROPERTY)."""
    n = starts.shape[0]
    magic_v1, magic_v2 = params[PAR_MAGIC_V1], params[PAR_MAGIC_V2]
    sys_flag_at, born_v6, store_v6 = params[PAR_SYS_FLAG_OFFSET], params[PAR_BORN_V6], params[PAR_STORE_V6]
    text, crc, born, store, msg_id = want & WANT_TEXT, want & WANT_CRC, want & WANT_BORN_HOST, \
        want & WANT_STORE_HOST, want & WANT_MSG_ID
    body = text and want & WANT_BODY  # the body copied only when asked for: the audit's scan reads none
    born_cache = np.full((64, 6), -1, np.int64)
    store_cache = np.full((64, 6), -1, np.int64)
    bo = to = po = ho = so = mo = 0
    body_off[0] = topic_off[0] = props_off[0] = born_off[0] = store_off[0] = id_off[0] = 0
    cur = -1  # the layout variant whose offsets are in the locals below (a batch rarely mixes variants)
    min_size = tlw = body_length_at = body_offset = born_at = born_width = store_at = store_width = 0
    crc_at = queue_id_at = flag_at = reconsume_at = 0
    queue_offset_at = physical_at = born_ts_at = store_ts_at = prepared_at = 0
    for i in range(n):
        s, size = starts[i], sizes[i]
        code = 0
        total = version = sys_flag = body_len = topic_len = props_len = 0
        body_at = topic_at = props_at = 0
        if not present[i]:
            code = -1
        elif size < 8:
            code = E_TRUNCATED
        else:
            total, magic = _i32(data, s), _i32(data, s + 4)
            version = 1 if magic == magic_v1 else (2 if magic == magic_v2 else 0)
            if version == 0:
                code = E_BAD_MAGIC
            elif size < sys_flag_at + 4:
                code = E_TRUNCATED_SYS_FLAG
            else:
                sys_flag = _i32(data, s + sys_flag_at)
                v = _record_variant(sys_flag, version, born_v6, store_v6)
                if v != cur:
                    cur = v
                    min_size, tlw, body_length_at, body_offset = lay[v, LAY_MIN_SIZE], lay[v, LAY_TOPIC_LEN_WIDTH], \
                        lay[v, LAY_BODY_LENGTH], lay[v, LAY_BODY]
                    born_at, born_width = lay[v, LAY_BORN_HOST], lay[v, LAY_BORN_IP_WIDTH]
                    store_at, store_width = lay[v, LAY_STORE_HOST], lay[v, LAY_STORE_IP_WIDTH]
                    crc_at, queue_id_at, flag_at, reconsume_at = i32_offsets[v, _I32_BODY_CRC], \
                        i32_offsets[v, _I32_QUEUE_ID], i32_offsets[v, _I32_FLAG], i32_offsets[v, _I32_RECONSUME_TIMES]
                    queue_offset_at, physical_at, born_ts_at, store_ts_at, prepared_at = i64_offsets[v, 0], \
                        i64_offsets[v, 1], i64_offsets[v, 2], i64_offsets[v, 3], i64_offsets[v, 4]
                if total < min_size:
                    code = E_BELOW_MIN_SIZE
                elif total > size:
                    code = E_TRUNCATED
                else:
                    code, body_len, topic_len, props_len = _lengths(data, s, total, min_size, tlw, body_length_at,
                                                                    body_offset)
                    body_at = s + body_offset
                    topic_at = body_at + body_len + tlw
                    props_at = topic_at + topic_len + 2
        if code != 0:
            err[i] = max(code, 0)
            flags[i] = 0
            for k in range(i32.shape[0]):
                i32[k, i] = 0
            for k in range(i64.shape[0]):
                i64[k, i] = 0
        else:
            err[i] = 0
            f = 0
            i32[_I32_STORE_SIZE, i] = total
            i32[_I32_MAGIC_VERSION, i] = version
            i32[_I32_BODY_CRC, i] = body_crc = _i32(data, s + crc_at)
            i32[_I32_QUEUE_ID, i] = _i32(data, s + queue_id_at)
            i32[_I32_FLAG, i] = _i32(data, s + flag_at)
            i32[_I32_SYS_FLAG, i] = sys_flag
            i32[_I32_RECONSUME_TIMES, i] = _i32(data, s + reconsume_at)
            i64[0, i] = _i64(data, s + queue_offset_at)
            i64[1, i] = _i64(data, s + physical_at)
            i64[2, i] = _i64(data, s + born_ts_at)
            i64[3, i] = _i64(data, s + store_ts_at)
            i64[4, i] = _i64(data, s + prepared_at)
            if text:
                if body:
                    bo = _copy(body_data, bo, data, body_at, body_len)
                to = _copy(topic_data, to, data, topic_at, topic_len)
                po = _copy(props_data, po, data, props_at, props_len)
                if _any_high_byte(data, topic_at, topic_at + topic_len) and \
                        not _utf8_valid(data, topic_at, topic_at + topic_len):
                    f |= FLAG_TOPIC_NOT_UTF8
                if _any_high_byte(data, props_at, props_at + props_len) and \
                        not _utf8_valid(data, props_at, props_at + props_len):
                    f |= FLAG_PROPS_NOT_UTF8
                if topic_len == schedule_topic.shape[0] and _same(data, topic_at, schedule_topic, 0, topic_len):
                    f |= FLAG_SCHEDULE_TOPIC
                if total >= crc_back and _same(data, s + total - crc_back, crc_key, 0, crc_key.shape[0]):
                    f |= FLAG_CRC_PROPERTY
            if crc and (_crc32(data, body_at, body_len, crc_table) & 0x7FFFFFFF) == body_crc:
                f |= FLAG_CRC_OK
            if born:
                ho = _host_text(data, s + born_at, born_width, born_data, ho, born_cache)
            if store:
                so = _host_text(data, s + store_at, store_width, store_data, so, store_cache)
            if msg_id:  # offsetMsgId: hex(store ip | port | physical offset), upper case
                at, width = s + store_at, store_width + 4
                phys = s + physical_at
                for j in range(0, width, 4):
                    _put64(id_data, mo, _hex8(_le32(data, at + j)))
                    mo += 8
                _put64(id_data, mo, _hex8(_le32(data, phys)))
                _put64(id_data, mo + 8, _hex8(_le32(data, phys + 4)))
                mo += 16
            flags[i] = f
        body_off[i + 1], topic_off[i + 1], props_off[i + 1] = bo, to, po
        born_off[i + 1], store_off[i + 1], id_off[i + 1] = ho, so, mo


# ---------------------------------------------------------------------------------------------------------
# Framing: runs of plain valid messages (store_format.commitlog's bulk framer, compiled)


@njit((_u1r, nt.int64, nt.int64, nt.int64, nt.int64, nt.boolean, nt.boolean, nt.int64, _i8r2, _i8r2, _i8r2, _i8r,
       _u4r, _i8, _i8, _i4), **_OPTS)
def frame_run(data, start, hi, limit, base, check_crc, check_phys, crc_from, lay, i32_offsets, i64_offsets, params,
              crc_table, positions, sizes, magics):
    """The run of records from ``start`` that ``store_format.commitlog.frame_at`` calls messages, hopping by
    TOTALSIZE, among those starting before ``hi``: ``frame_at``'s message checks in its order (magic, room for
    the header, TOTALSIZE bounds, PHYSICALOFFSET = ``base`` + position when ``check_phys``, the three length
    fields, calMsgLength, the body CRC of a non-empty body when ``check_crc``, skipped before ``crc_from``).  The
    run ends before the first record that fails one (the caller's scalar ``frame_at`` says why), at ``hi``, or
    when ``positions`` is full.  Writes ``positions``/``sizes``/``magics`` and returns the count."""
    magic_v1, magic_v2 = params[PAR_MAGIC_V1], params[PAR_MAGIC_V2]
    sys_flag_at, born_v6, store_v6 = params[PAR_SYS_FLAG_OFFSET], params[PAR_BORN_V6], params[PAR_STORE_V6]
    header = lay[0, LAY_BORN_HOST]  # frame_at reads SYSFLAG only with this many bytes left
    cap = positions.shape[0]
    n, p = 0, start
    cur = -1
    min_size = tlw = body_length_at = body_offset = crc_at = physical_at = 0
    while p < hi and n < cap:
        left = limit - p
        if left < 8:
            break
        size, magic = _i32(data, p), _i32(data, p + 4)
        version = 1 if magic == magic_v1 else (2 if magic == magic_v2 else 0)
        if version == 0 or left < header:
            break
        v = _record_variant(_i32(data, p + sys_flag_at), version, born_v6, store_v6)
        if v != cur:
            cur = v
            min_size, tlw, body_length_at, body_offset = lay[v, LAY_MIN_SIZE], lay[v, LAY_TOPIC_LEN_WIDTH], \
                lay[v, LAY_BODY_LENGTH], lay[v, LAY_BODY]
            crc_at, physical_at = i32_offsets[v, _I32_BODY_CRC], i64_offsets[v, _I64_PHYSICAL_OFFSET]
        if size < min_size or size > left or (check_phys and _i64(data, p + physical_at) != base + p):
            break
        code, body_len, _, _ = _lengths(data, p, size, min_size, tlw, body_length_at, body_offset)
        if code != 0 or (check_crc and body_len > 0 and p >= crc_from and
                         (_crc32(data, p + body_offset, body_len, crc_table) & 0x7FFFFFFF) != _i32(data, p + crc_at)):
            break
        positions[n], sizes[n], magics[n] = p, size, magic
        n += 1
        p += size
    return n


@njit((_u1r, _i8r, nt.int64, nt.int64, nt.boolean, nt.boolean, _i8r2, _i8r2, _i8r2, _i8r, _u4r, _i8, _i8), **_OPTS)
def frame_each(data, starts, limit, base, check_crc, check_phys, lay, i32_offsets, i64_offsets, params, crc_table,
               sizes, body_lengths):
    """:func:`frame_run`'s verdict on the record at each of ``starts`` alone (offsets picked from elsewhere: ids,
    queue units): its TOTALSIZE and BODYLENGTH where it is a plain valid message, else 0 and -1 (the caller's
    scalar ``frame_at`` says why)."""
    magic_v1, sys_flag_at = params[PAR_MAGIC_V1], params[PAR_SYS_FLAG_OFFSET]
    born_v6, store_v6 = params[PAR_BORN_V6], params[PAR_STORE_V6]
    one_p, one_s, one_m = np.empty(1, np.int64), np.empty(1, np.int64), np.empty(1, np.int32)
    for i in range(starts.shape[0]):
        s = starts[i]
        sizes[i], body_lengths[i] = 0, -1
        if s < 0 or s >= limit:
            continue
        if frame_run(data, s, s + 1, limit, base, check_crc, check_phys, 0, lay, i32_offsets, i64_offsets, params,
                     crc_table, one_p, one_s, one_m) == 1:
            v = _record_variant(_i32(data, s + sys_flag_at), 1 if one_m[0] == magic_v1 else 2, born_v6, store_v6)
            sizes[i], body_lengths[i] = one_s[0], _i32(data, s + lay[v, LAY_BODY_LENGTH])


# ---------------------------------------------------------------------------------------------------------
# Properties, column by column


@njit((_u1r, _i4r, _u1r, _i4r, nt.boolean, _i4, _i4, _u1, _i4, _u1, _i8_2), **_OPTS)
def parse_properties(pdata, poff, names_data, names_off, find_names, entry_off, key_off, key_data, value_off,
                     value_data, named):
    """Row ``i``'s properties ``pdata[poff[i]:poff[i+1]]`` -> map entries ``entry_off[i]:entry_off[i+1]``, each
    a key ``key_data[key_off[e]:key_off[e+1]]`` and value (same with ``value_*``), in row order with repeated
    keys dropped but for their last occurrence.  With ``find_names``, ``named[t, i]`` is the entry of
    property ``t`` (``names_*``), -1 when absent."""
    n = poff.shape[0] - 1
    longest = 0
    for i in range(n):
        longest = max(longest, poff[i + 1] - poff[i])
    cap = longest // 4 + 2  # an entry takes >= 3 bytes plus a separator
    ks, ke, ve = np.empty(cap, np.int64), np.empty(cap, np.int64), np.empty(cap, np.int64)
    hashes, order, reps = np.empty(cap, np.int64), np.empty(cap, np.int64), np.empty(cap, np.int64)
    keep = np.empty(cap, np.bool_)
    n_names = names_off.shape[0] - 1
    m = ko = vo = 0
    entry_off[0] = key_off[0] = value_off[0] = 0
    for i in range(n):
        s, e = poff[i], poff[i + 1]
        k = 0
        seg = j = s
        kv = -1
        while True:  # eight bytes at a time: a mask of the separators, visited bit by bit
            if j + 8 <= e:
                mask, width = _below_3(_word(pdata, j)), 8
            else:
                mask, width = 0, e - j
                for q in range(width):
                    if _at(pdata, j + q) < 3:
                        mask |= 0x80 << (8 * q)
            while mask != 0:
                at = j + (_ctz(mask) >> 3)
                mask &= mask - 1
                c = _at(pdata, at)
                if c == 2:  # the segment ends: kept when its first \u0001 leaves a key and a value
                    if seg < kv < at - 1:
                        ks[k], ke[k], ve[k] = seg, kv, at
                        k += 1
                    seg, kv = at + 1, -1
                elif c == 1 and kv < 0:
                    kv = at
            j += width
            if j >= e:
                break
        if seg < kv < e - 1:
            ks[k], ke[k], ve[k] = seg, kv, e
            k += 1
        if k <= 16:
            _dedupe_few(pdata, ks, ke, k, keep)
        else:
            _dedupe_many(pdata, ks, ke, k, keep, hashes, order, reps)
        if find_names:
            for t in range(n_names):
                named[t, i] = -1
        for x in range(k):
            if not keep[x]:
                continue
            ko = _copy(key_data, ko, pdata, ks[x], ke[x] - ks[x])
            vo = _copy(value_data, vo, pdata, ke[x] + 1, ve[x] - ke[x] - 1)
            if find_names:
                klen = ke[x] - ks[x]
                for t in range(n_names):
                    if names_off[t + 1] - names_off[t] == klen and _same(pdata, ks[x], names_data, names_off[t], klen):
                        named[t, i] = m
                        break
            m += 1
            key_off[m], value_off[m] = ko, vo
        entry_off[i + 1] = m


@njit((_u1r, _i4r, _i8r), **_OPTS)
def take_strings(data, off, idx):
    """Strings ``data[off[j]:off[j+1]]`` for ``j = idx[i]``; -1 gives an empty string (the caller's null)."""
    n = idx.shape[0]
    out_off = np.empty(n + 1, np.int32)
    out_off[0] = 0
    for i in range(n):
        j = idx[i]
        out_off[i + 1] = out_off[i] + (off[j + 1] - off[j] if j >= 0 else 0)
    out = np.empty(out_off[n], np.uint8)
    for i in range(n):
        j = idx[i]
        if j >= 0:
            _copy(out, out_off[i], data, off[j], off[j + 1] - off[j])
    return out_off, out


@_inner
def _java_hash(data, p, e, h):
    """``h`` (a String.hashCode state, 0..2^32-1) carried over the UTF-16 units of the valid UTF-8 in
    ``data[p:e]``."""
    while p < e:
        c = np.int64(data[p])
        if c < 0x80:
            cp, w = c, 1
        elif c < 0xE0:
            cp, w = c & 0x1F, 2
        elif c < 0xF0:
            cp, w = c & 0x0F, 3
        else:
            cp, w = c & 0x07, 4
        if p + w > e:
            break
        for q in range(1, w):
            cp = cp << 6 | (np.int64(data[p + q]) & 0x3F)
        p += w
        if cp >= 0x10000:  # a surrogate pair in UTF-16
            cp -= 0x10000
            h = (h * 31 + 0xD800 + (cp >> 10)) & 0xFFFFFFFF
            h = (h * 31 + 0xDC00 + (cp & 0x3FF)) & 0xFFFFFFFF
        else:
            h = (h * 31 + cp) & 0xFFFFFFFF
    return h


@njit((_u1r, _i4r, _i8r), **_OPTS)
def tags_hashes(data, off, idx):
    """tagsCode (Java ``String.hashCode`` over UTF-16 units, sign-extended) of string ``idx[i]``; 0 for -1 or
    an empty string.  The strings are valid UTF-8."""
    n = idx.shape[0]
    out = np.zeros(n, np.int64)
    for i in range(n):
        j = idx[i]
        if j < 0:
            continue
        h = _java_hash(data, off[j], off[j + 1], np.int64(0))
        out[i] = h - (h >> 31 << 32)
    return out


@njit((_u1r, _i4r, _u1r, _i4r, _b1r, _i4r, _i4r, _u1r, _b1r), **_OPTS)
def index_keys(tdata, toff, udata, uoff, uvalid, list_off, koff, kdata, indexable):
    """The keys IndexService.buildIndex indexes for each record (UNIQ_KEY, then each piece of KEYS, each once) and
    IndexService's hash of ``topic#key``: String.hashCode over UTF-16, abs, Integer.MIN_VALUE -> 0.  Returns
    (row, source, hash): source ``-1`` is the row's UNIQ_KEY, ``j >= 0`` piece ``j`` of the flattened KEYS."""
    n = toff.shape[0] - 1
    cap = 0
    for i in range(n):
        if indexable[i]:
            cap += (1 if uvalid[i] else 0) + list_off[i + 1] - list_off[i]
    row = np.empty(cap, np.int64)
    src = np.empty(cap, np.int64)
    out = np.empty(cap, np.int32)
    m = 0
    for i in range(n):
        if not indexable[i]:
            continue
        prefix = _java_hash(tdata, toff[i], toff[i + 1], np.int64(0))
        prefix = (prefix * 31 + 35) & 0xFFFFFFFF  # '#'
        first = m
        for k in range(list_off[i] - (1 if uvalid[i] else 0), list_off[i + 1]):
            if k < list_off[i]:  # the UNIQ_KEY comes first
                k = -1
                a, p, e = udata, uoff[i], uoff[i + 1]
            else:
                a, p, e = kdata, koff[k], koff[k + 1]
            seen = False
            for t in range(first, m):  # a key listed twice (or equal to UNIQ_KEY) is indexed once
                if src[t] < 0:
                    b, q, f = udata, uoff[i], uoff[i + 1]
                else:
                    b, q, f = kdata, koff[src[t]], koff[src[t] + 1]
                if f - q == e - p and _same(a, p, b, q, e - p):
                    seen = True
                    break
            if seen:
                continue
            h = _java_hash(a, p, e, prefix)
            h = h - (h >> 31 << 32)
            row[m], src[m] = i, k
            out[m] = 0 if h == -2147483648 else (-h if h < 0 else h)
            m += 1
    return row[:m], src[:m], out[:m]


@_inner
def _split_pass(data, off, idx, list_off, piece_off, pieces, fill):
    count = size = 0
    for i in range(idx.shape[0]):
        j = idx[i]
        if j >= 0:
            p, e = off[j], off[j + 1]
            while p < e:
                while p < e and data[p] == 32:
                    p += 1
                q = p
                while q < e and data[q] != 32:
                    q += 1
                if q > p:
                    if fill:
                        _copy(pieces, size, data, p, q - p)
                        piece_off[count + 1] = size + q - p
                    count += 1
                    size += q - p
                p = q
        list_off[i + 1] = count
    return count, size


@njit((_u1r, _i4r, _i8r), **_OPTS)
def split_keys(data, off, idx):
    """KEYS split on single spaces, empty pieces dropped (store_format.properties.split_keys): a list per row
    ``list_off[i]:list_off[i+1]`` of pieces ``piece_off``/``pieces``; row -1 has none."""
    list_off = np.zeros(idx.shape[0] + 1, np.int32)
    count, size = _split_pass(data, off, idx, list_off, list_off, np.empty(0, np.uint8), False)  # sizes first
    piece_off = np.zeros(count + 1, np.int32)
    pieces = np.empty(size, np.uint8)
    _split_pass(data, off, idx, list_off, piece_off, pieces, True)
    return list_off, piece_off, pieces


@njit((_u1r, _i4r, _i8r), **_OPTS)
def parse_ints(data, off, idx):
    """Integer properties read as Python's ``int`` reads them: (state, value).  INT_VALUE: plain ASCII
    ``[+-]?digits`` that fit a Java int; INT_OUT_OF_RANGE: plain but beyond it; INT_ASK_PYTHON: anything else
    non-empty (spaces, underscores, other digits, more than 18 digits: ``int`` decides); INT_NULL: none."""
    n = idx.shape[0]
    state = np.zeros(n, np.int8)
    value = np.zeros(n, np.int32)
    for i in range(n):
        j = idx[i]
        if j < 0:
            continue
        p, e = off[j], off[j + 1]
        neg = False
        if p < e and (data[p] == 43 or data[p] == 45):  # '+' '-'
            neg = data[p] == 45
            p += 1
        if p == e:  # a lone sign: not a number
            continue
        if e - p > 18:
            state[i] = INT_ASK_PYTHON
            continue
        v = np.int64(0)
        plain = True
        for q in range(p, e):
            c = data[q]
            if c < 48 or c > 57:
                plain = False
                break
            v = v * 10 + (c - 48)
        if not plain:
            state[i] = INT_ASK_PYTHON
            continue
        v = -v if neg else v
        if -2147483648 <= v <= 2147483647:
            state[i] = INT_VALUE
            value[i] = v
        else:
            state[i] = INT_OUT_OF_RANGE
    return state, value


@_inner
def _day_of_month(days):
    """Day of the month (1-31) of a day count since 1970-01-01, proleptic Gregorian (H. Hinnant's
    civil_from_days)."""
    z = days + 719468
    era = z // 146097
    doe = z - era * 146097
    yoe = (doe - doe // 1460 + doe // 36524 - doe // 146096) // 365
    doy = doe - (365 * yoe + yoe // 4 - yoe // 100)
    mp = (5 * doy + 2) // 153
    return doy - (153 * mp + 2) // 5 + 1


@njit((_u1r, _i4r, _i8r, _i8r, _u1r, nt.int64, nt.int64), **_OPTS)
def uniq_keys(data, off, idx, born_ts, nibble, min_ms, max_ms):
    """UNIQ_KEY (MessageClientIDSetter) of 32 or 56 hex digits -> producer ip text, pid and time, as
    store_format.ids.parse_uniq_key and ``UniqKey.timestamp(born_timestamp, UTC)`` give them.  ``state``:
    UNIQ_DECODED, UNIQ_ASK_PYTHON for another spelling of >= 32 characters (parse_uniq_key decides), else
    UNIQ_NONE.
    The time is kept (``time_ok``) where the born time is within ``min_ms..max_ms``."""
    n = idx.shape[0]
    state = np.zeros(n, np.int8)
    pid = np.zeros(n, np.int32)
    time = np.zeros(n, np.int64)
    time_ok = np.zeros(n, np.bool_)
    ip_off = np.empty(n + 1, np.int32)
    ip_text = np.empty(n * IP_TEXT_MAX, np.uint8)
    raw = np.zeros(32, np.uint8)
    ip_cache = np.full((64, 5), -1, np.int64)  # (ip as two integers, ip length, text start, text length)
    day = 86400000
    last_days = month = prev = np.int64(-(2 ** 62))  # the month starts of the last row's day: rows come in time order
    io = 0
    ip_off[0] = 0
    for i in range(n):
        j = idx[i]
        if j >= 0:
            p, e = off[j], off[j + 1]
            length = e - p
            if length == 32 or length == 56:
                hexes = True
                for q in range(length // 2):
                    hi, lo = _at(nibble, _at(data, p + 2 * q)), _at(nibble, _at(data, p + 2 * q + 1))
                    if hi == 255 or lo == 255:
                        hexes = False
                        break
                    raw[q] = hi << 4 | lo
                if hexes:
                    state[i] = UNIQ_DECODED
                    ipl = length // 2 - 12
                    k1 = _word(raw, 0) if ipl > 4 else _word(raw, 0) & 0xFFFFFFFF
                    k2 = _word(raw, 8) if ipl > 4 else 0
                    slot = ((k1 ^ k2 * 31) * -7046029254386353131 >> 58) & 63
                    if ip_cache[slot, 2] == ipl and ip_cache[slot, 0] == k1 and ip_cache[slot, 1] == k2:
                        io = _copy(ip_text, io, ip_text, ip_cache[slot, 3], ip_cache[slot, 4])  # a producer seen before
                    else:
                        end = _write_ip(ip_text, io, raw, 0, ipl)
                        ip_cache[slot, 0], ip_cache[slot, 1], ip_cache[slot, 2], ip_cache[slot, 3], ip_cache[slot, 4] = \
                            k1, k2, ipl, io, end - io
                        io = end
                    pid[i] = np.int64(raw[ipl]) << 8 | raw[ipl + 1]
                    span = np.int64(0)
                    for q in range(ipl + 6, ipl + 10):
                        span = span << 8 | raw[q]
                    born = born_ts[i]
                    if min_ms <= born <= max_ms:
                        days = born // day
                        if days != last_days:
                            month = days - (_day_of_month(days) - 1)
                            prev = month - _day_of_month(month - 1)
                            last_days = days
                        t = month * day + span
                        if t > born + 60000:
                            t = prev * day + span
                        time[i] = t
                        time_ok[i] = True
            if state[i] == UNIQ_NONE and length >= 32:
                state[i] = UNIQ_ASK_PYTHON
        ip_off[i + 1] = io
    return state, pid, time, time_ok, ip_off, ip_text[:io].copy()


# ---------------------------------------------------------------------------------------------------------
# Index files: the chains and the entries' summary, straight from the file's bytes (big-endian)

#: ``geo`` of the index kernels: where the slots and entries start, the entry's width and its fields' offsets
(GEO_SLOTS_AT, GEO_ENTRIES_AT, GEO_ENTRY_SIZE, GEO_KEY_HASH, GEO_PHYSICAL_OFFSET, GEO_TIME_DIFF, GEO_PREV_INDEX,
 GEO_SLOT_SIZE) = range(8)


def index_geometry(hash_slot_num: int):
    """The ``geo`` array of an index file of ``hash_slot_num`` slots, from store_format.layout (read at call time,
    an argument of the kernels: never a global of this module, whose source alone keys numba's cache)."""
    from store_format import layout as L

    at = L.INDEX_ENTRY.offsets
    geo = np.zeros(8, np.int64)
    geo[GEO_SLOTS_AT], geo[GEO_ENTRIES_AT] = L.INDEX_HEADER_SIZE, L.INDEX_HEADER_SIZE + hash_slot_num * L.INDEX_SLOT_SIZE
    geo[GEO_ENTRY_SIZE], geo[GEO_SLOT_SIZE] = L.INDEX_ENTRY_SIZE, L.INDEX_SLOT_SIZE
    geo[GEO_KEY_HASH], geo[GEO_PHYSICAL_OFFSET] = at["key_hash"], at["physical_offset"]
    geo[GEO_TIME_DIFF], geo[GEO_PREV_INDEX] = at["time_diff"], at["prev_index"]
    return geo


#: bits of index_chain_bits, in store_format.indexfile.CHAIN_PROBLEMS order; CHAIN_REACHED is internal
CHAIN_PREV_OUT_OF_RANGE, CHAIN_PREV_NOT_OLDER, CHAIN_PREV_OTHER_SLOT, CHAIN_NEGATIVE_TIME_DIFF, CHAIN_UNREACHABLE, \
    CHAIN_REACHED = 1, 2, 4, 8, 16, 128


@_inner
def _pair_mix(kh, phys):
    """splitmix64's finaliser over (key hash, offset): spreads pairs evenly even when one key fills the file."""
    x = np.uint64(phys) * np.uint64(0x9E3779B97F4A7C15) + np.uint64(np.uint32(kh))
    x ^= x >> np.uint64(30)
    x *= np.uint64(0xBF58476D1CE4E5B9)
    x ^= x >> np.uint64(27)
    x *= np.uint64(0x94D049BB133111EB)
    return x ^ (x >> np.uint64(31))


@_inner
def _set_add(heads, e):
    """Entry ``e`` into ``heads`` (uint64: how many, and two sums of a mix of each): a digest of the entries added,
    as often as each is, in any order."""
    heads[0] += np.uint64(1)
    heads[1] += _pair_mix(1, e)
    heads[2] += _pair_mix(2, e)


@_inner
def _mark_heads(buf, geo, hash_slot_num, count, bits, old, heads, below):
    """The slots' heads (1 .. count-1), each into ``heads`` (:func:`_set_add`); those below ``old`` into ``below``
    too, and the others marked CHAIN_REACHED in ``bits`` (the old entries' bits are not touched: a random write
    each, most of the time of a grown file's check)."""
    slots_at, slot_size = geo[GEO_SLOTS_AT], geo[GEO_SLOT_SIZE]
    # Most slots of a file are empty (5 M slots, tens of thousands of keys): eight at a time in four 8-byte loads,
    # read one by one only where one is set (the slot pass took 4x the time of a memory scan of the table).
    first = 0
    if slot_size == 4:
        while first + 8 <= hash_slot_num:
            p = slots_at + 4 * first
            if (_word(buf, p) | _word(buf, p + 8) | _word(buf, p + 16) | _word(buf, p + 24)) != 0:
                for s in range(first, first + 8):
                    _mark_head(_i32(buf, slots_at + 4 * s), count, bits, old, heads, below)
            first += 8
    for s in range(first, hash_slot_num):
        _mark_head(_i32(buf, slots_at + slot_size * s), count, bits, old, heads, below)


@_inner
def _mark_head(e, count, bits, old, heads, below):
    if 0 < e < count:
        _set_add(heads, e)
        if e < old:
            _set_add(below, e)
        else:
            bits[e] = CHAIN_REACHED


@njit((_u1r, _i8r, nt.int64, nt.int64), **_OPTS)
def index_slot_heads(buf, geo, hash_slot_num, count):
    """The entries the slots point at (1 .. count-1), each as often as it is pointed at, as a digest
    (:func:`_set_add`): what a grown file's next check compares its ways into the old entries with
    (:func:`index_chain_bits_grown`)."""
    heads, below = np.zeros(3, np.uint64), np.zeros(3, np.uint64)
    _mark_heads(buf, geo, hash_slot_num, count, np.zeros(0, np.uint8), count, heads, below)
    return heads


@_inner
def _prev_reached(buf, geo, count, x, bits, old, below):
    """Where IndexFile.selectPhyOffset's walk goes from a reached entry ``x``: its prev, marked CHAIN_REACHED and
    returned; -1 where the walk stops (prev 0, out of range, itself, or after a negative time diff) or the prev was
    reached already.  A prev below ``old`` is not marked but counted into ``below`` (:func:`_set_add`), and -1."""
    at = geo[GEO_ENTRIES_AT] + x * geo[GEO_ENTRY_SIZE]
    nxt = _i32(buf, at + geo[GEO_PREV_INDEX])
    if nxt <= 0 or nxt >= count or nxt == x or _i32(buf, at + geo[GEO_TIME_DIFF]) < 0:
        return -1
    if nxt < old:
        _set_add(below, nxt)
        return -1
    if bits[nxt] == CHAIN_REACHED:
        return -1
    bits[nxt] = CHAIN_REACHED
    return nxt


@_inner
def _mark_reached(buf, geo, hash_slot_num, count, bits, heads, old, below):
    """Marks CHAIN_REACHED in ``bits`` every entry IndexFile.selectPhyOffset can walk to from some slot: from the
    slot's head (1 .. count-1), along prevIndex, stopping at 0, out of range, itself, or after an entry whose time
    diff is negative; the slots' heads into ``heads`` (:func:`_mark_heads`).  Entries below ``old`` (0: none) are
    where the walks stop: counted into ``below`` as often as a slot or a walk reaches them, never marked nor read."""
    _mark_heads(buf, geo, hash_slot_num, count, bits, old, heads, below)
    # Chains run from newer entries to older ones, so one pass from the newest entry down marks them without
    # chasing pointers (each step's loads are independent).  A link forward (prev >= e: damage) to an entry not
    # yet reached is followed at once, entry by entry; every entry is marked once, whatever the file holds.
    for e in range(count - 1, max(old, 1) - 1, -1):
        if bits[e] != CHAIN_REACHED:
            continue
        nxt = _prev_reached(buf, geo, count, e, bits, old, below)
        while nxt > e:  # forward: walk this chain now (the pass has gone by); below it, the pass carries on
            nxt = _prev_reached(buf, geo, count, nxt, bits, old, below)


@njit((_u1r, _i8r, nt.int64, nt.int64), **_OPTS)
def index_chain_bits(buf, geo, hash_slot_num, count):
    """Each entry's chain problems as bits (entry 0, the unused first one, gets none); unreachable: not marked by
    :func:`_mark_reached`."""
    bits = np.zeros(count, np.uint8)
    heads = np.zeros(3, np.uint64)
    _mark_reached(buf, geo, hash_slot_num, count, bits, heads, 0, heads)
    at0, size, kh_at = geo[GEO_ENTRIES_AT], geo[GEO_ENTRY_SIZE], geo[GEO_KEY_HASH]
    td_at, prev_at = geo[GEO_TIME_DIFF], geo[GEO_PREV_INDEX]
    # A prev's slot against the entry's, in 4 bytes for each entry or for each slot, whichever are fewer: each
    # entry's slot; or each slot's newest entry so far, which IndexFile.putKey links the next entry of the slot to,
    # so a prev equal to it is in the entry's slot without reading the older entry (any other prev is read).
    by_entry = count <= hash_slot_num
    entry_slot = np.empty(count if by_entry else 0, np.int32)
    for e in range(len(entry_slot)):
        kh = _i32(buf, at0 + e * size + kh_at)
        entry_slot[e] = kh % hash_slot_num if kh >= 0 else -1
    newest = np.zeros(0 if by_entry else hash_slot_num, np.int32)
    for e in range(1, count):
        at = at0 + e * size
        kh = _i32(buf, at + kh_at)
        slot = kh % hash_slot_num if kh >= 0 else -1
        prev = _i32(buf, at + prev_at)
        b = 0 if bits[e] == CHAIN_REACHED else CHAIN_UNREACHABLE
        if prev < 0 or prev >= count:
            b |= CHAIN_PREV_OUT_OF_RANGE
        elif prev > 0:
            if prev >= e:
                b |= CHAIN_PREV_NOT_OLDER
            if by_entry:
                prev_slot = entry_slot[prev]
            elif slot >= 0 and prev == newest[slot]:
                prev_slot = slot
            else:
                prev_kh = _i32(buf, at0 + prev * size + kh_at)
                prev_slot = prev_kh % hash_slot_num if prev_kh >= 0 else -1
            if prev_slot != slot:
                b |= CHAIN_PREV_OTHER_SLOT
        if _i32(buf, at + td_at) < 0:
            b |= CHAIN_NEGATIVE_TIME_DIFF
        bits[e] = b
        if slot >= 0 and not by_entry:
            newest[slot] = e
    return bits


@_inner
def _entry_bits(buf, geo, hash_slot_num, count, e, reached):
    """One entry's chain problems (as :func:`index_chain_bits` gives them), its prev's slot read from the prev."""
    at0, size, kh_at = geo[GEO_ENTRIES_AT], geo[GEO_ENTRY_SIZE], geo[GEO_KEY_HASH]
    at = at0 + e * size
    kh = _i32(buf, at + kh_at)
    slot = kh % hash_slot_num if kh >= 0 else -1
    prev = _i32(buf, at + geo[GEO_PREV_INDEX])
    b = 0 if reached else CHAIN_UNREACHABLE
    if prev < 0 or prev >= count:
        b |= CHAIN_PREV_OUT_OF_RANGE
    elif prev > 0:
        if prev >= e:
            b |= CHAIN_PREV_NOT_OLDER
        prev_kh = _i32(buf, at0 + prev * size + kh_at)
        if (prev_kh % hash_slot_num if prev_kh >= 0 else -1) != slot:
            b |= CHAIN_PREV_OTHER_SLOT
    if _i32(buf, at + geo[GEO_TIME_DIFF]) < 0:
        b |= CHAIN_NEGATIVE_TIME_DIFF
    return b


@njit((_u1r, _i8r, nt.int64, nt.int64, nt.int64, _i4r), **_OPTS)
def index_chain_bits_resumed(buf, geo, hash_slot_num, count, checked, flagged):
    """:func:`index_chain_bits` of a file whose entries 1 .. ``checked``-1 were checked before and are unchanged
    (entries are only appended; the slots and header are rewritten), ``flagged``: those of them that had a problem
    then.  An entry's own problems depend on its bytes, its prev's key hash and the count, so only the new entries
    and the flagged ones (an out-of-range prev may be in range now) are looked at again; reachability, which any
    new entry or slot can change, is marked over the whole file.  With the bits, the slots' heads
    (:func:`index_slot_heads`)."""
    bits = np.zeros(count, np.uint8)
    heads = np.zeros(3, np.uint64)
    _mark_reached(buf, geo, hash_slot_num, count, bits, heads, 0, heads)
    old = min(checked, count)
    for e in range(1, old):
        bits[e] = 0 if bits[e] == CHAIN_REACHED else CHAIN_UNREACHABLE
    for i in range(flagged.shape[0]):
        e = flagged[i]
        if 0 < e < old:
            bits[e] = _entry_bits(buf, geo, hash_slot_num, count, e, bits[e] == 0)
    for e in range(max(old, 1), count):
        bits[e] = _entry_bits(buf, geo, hash_slot_num, count, e, bits[e] == CHAIN_REACHED)
    return bits, heads


@njit((_u1r, _i8r, nt.int64, nt.int64, nt.int64, _u8r), **_OPTS)
def index_chain_bits_grown(buf, geo, hash_slot_num, count, checked, heads_then):
    """:func:`index_chain_bits` of a grown file whose entries 1 .. ``checked``-1 are unchanged and had no problem
    when checked, ``heads_then`` the slots' heads then (:func:`index_slot_heads`), without reading the old entries:
    (bits, whether it could, the slots' heads now).  Old entries link only to older ones, so what is reachable among
    them is what their ways in reach: the heads then, from which every one of them was reached.  The ways in now are
    the slots' heads below ``checked`` and the old prevs of the new entries reached (from the newest entry down,
    stopping at the old ones), each as often as it occurs; when they are the heads then, every old entry is reached
    and has no problem, and only the new entries are looked at.  Else (a slot rewritten to another old entry, a new
    entry linked into the middle of an old chain) it could not: :func:`index_chain_bits_resumed`."""
    old = max(min(checked, count), 1)
    bits = np.zeros(count, np.uint8)
    heads, below = np.zeros(3, np.uint64), np.zeros(3, np.uint64)
    _mark_reached(buf, geo, hash_slot_num, count, bits, heads, old, below)  # the new entries, stopping at the old
    if below[0] != heads_then[0] or below[1] != heads_then[1] or below[2] != heads_then[2]:
        return bits, False, heads
    for e in range(old, count):  # the old entries' bits were never set
        bits[e] = _entry_bits(buf, geo, hash_slot_num, count, e, bits[e] == CHAIN_REACHED)
    return bits, True, heads


@_inner
def _few_repeats(buf, at0, size, kh_at, start, end):
    """Extra copies and repeated pairs among entries start .. end-1 (a message's few keys), which share one
    physical offset: each entry against the ones before it; an entry with an earlier copy is an extra one, and the
    one with exactly one earlier copy is its pair's second.  Called for every message: no array made or counted."""
    extra = pairs = 0
    for p in range(start + 1, end):
        kh = _i32(buf, at0 + p * size + kh_at)
        before = 0
        for q in range(start, p):
            if _i32(buf, at0 + q * size + kh_at) == kh:
                before += 1
        if before:
            extra += 1
            if before == 1:
                pairs += 1
    return extra, pairs


@njit(**_OPTS)
def _repeats_among(buf, at0, size, kh_at, start, end):
    """As :func:`_few_repeats`, for a run of more than :data:`_FEW_KEYS` entries (a hostile one): sorted."""
    k = end - start
    extra = pairs = 0
    kh = np.empty(k, np.int64)
    for t in range(k):
        kh[t] = _i32(buf, at0 + (start + t) * size + kh_at)
    kh.sort()
    for t in range(1, k):
        if kh[t] == kh[t - 1]:
            extra += 1
            if t == 1 or kh[t - 1] != kh[t - 2]:
                pairs += 1
    return extra, pairs


_FEW_KEYS = 16


@njit(**_OPTS)
def _runs_from(buf, at0, size, kh_at, phys_at, first, count):
    """Duplicates among entries ``first`` .. count-1 in commitlog order, run of equal offsets by run (a pair's copies
    sit together): (extra entries and pairs of the runs before the last, the last run's first entry, its extra
    entries and pairs).  The last run apart: the next entries may carry its keys on (a resumed check)."""
    extra = pairs = last_extra = last_pairs = 0
    first_phys = _i64(buf, at0 + first * size + phys_at)
    for e in range(first + 1, count + 1):
        phys = _i64(buf, at0 + e * size + phys_at) if e < count else first_phys
        if e == count or phys != first_phys:
            if e - first > _FEW_KEYS:
                x, y = _repeats_among(buf, at0, size, kh_at, first, e)
            else:
                x, y = _few_repeats(buf, at0, size, kh_at, first, e)
            if e == count:
                last_extra, last_pairs = x, y
            else:
                extra += x
                pairs += y
                first, first_phys = e, phys
    return extra, pairs, first, last_extra, last_pairs


@njit((_u1r, _i8r, nt.int64, nt.int64, nt.int64), **_OPTS)
def index_entry_summary(buf, geo, hash_slot_num, count, bucket_entries):
    """Over entries 1 .. count-1: the slots their key hashes use, and (key hash, offset) pairs present more than
    once (extra entries, pairs), counted exactly.  Entries in commitlog order (as the broker writes them) are
    compared within runs of one offset; otherwise the pairs go through a hash table a bucket of about
    ``bucket_entries`` at a time (a pair's copies share a bucket; at most 256 buckets): memory is a byte per
    entry plus a table for a bucket."""
    at0, size = geo[GEO_ENTRIES_AT], geo[GEO_ENTRY_SIZE]
    kh_at, phys_at = geo[GEO_KEY_HASH], geo[GEO_PHYSICAL_OFFSET]
    used = np.zeros(hash_slot_num, np.bool_)
    n = count - 1
    ordered = True
    last = np.int64(-1 << 62)
    for e in range(1, count):
        at = at0 + e * size
        kh, phys = _i32(buf, at + kh_at), _i64(buf, at + phys_at)
        if kh >= 0:
            used[kh % hash_slot_num] = True
        ordered = ordered and phys >= last
        last = phys
    if ordered:  # as the broker dispatches, in commitlog order: a pair's copies sit together, among equal offsets
        extra, pairs, _, last_extra, last_pairs = _runs_from(buf, at0, size, kh_at, phys_at, 1, count)
        return used.sum(), extra + last_extra, pairs + last_pairs
    duplicate_entries = duplicated_pairs = 0
    buckets = min(max((n + bucket_entries - 1) // bucket_entries, 1), 256)  # a byte per entry names its bucket
    bucket_of = np.empty(n, np.uint8)
    largest = np.zeros(buckets, np.int64)
    for e in range(1, count):
        at = at0 + e * size
        b = _pair_mix(_i32(buf, at + kh_at), _i64(buf, at + phys_at)) % np.uint64(buckets)
        bucket_of[e - 1] = b
        largest[b] += 1
    cap = 1
    while cap < 2 * largest.max():
        cap *= 2
    table = np.empty(cap, np.int64)  # an entry holding the pair, -1 for an empty place
    copies = np.empty(cap, np.int64)
    for b in range(buckets):
        table[:] = -1
        for i in range(n):
            if bucket_of[i] != b:
                continue
            at = at0 + (i + 1) * size
            kh, phys = _i32(buf, at + kh_at), _i64(buf, at + phys_at)
            h = np.int64(_pair_mix(kh, phys) >> np.uint64(16)) & (cap - 1)
            while table[h] >= 0:  # linear probing; an equal pair stops it, so copies cost one probe each
                other = at0 + table[h] * size
                if _i32(buf, other + kh_at) == kh and _i64(buf, other + phys_at) == phys:
                    break
                h = (h + 1) & (cap - 1)
            if table[h] < 0:
                table[h], copies[h] = i + 1, 1
            else:
                copies[h] += 1
                duplicate_entries += 1
                if copies[h] == 2:
                    duplicated_pairs += 1
    return used.sum(), duplicate_entries, duplicated_pairs


@njit((_u1r, _i8r, nt.int64, nt.int64, nt.int64, _b1, nt.int64), **_OPTS)
def index_entry_runs(buf, geo, hash_slot_num, count, start, used, run_start):
    """:func:`index_entry_summary`'s ordered path, from entry ``start`` on (1: the whole file), resumable: marks the
    slots entries ``start`` .. count-1 use in ``used`` (the slots of the entries before it already marked), and
    counts the duplicates of the runs of equal offsets from entry ``run_start`` (the first of the last run before
    ``start``) on.  Returns (in commitlog order from ``start - 1`` on, slots used, extra entries and pairs of the
    runs before the last, the last run's first entry, its extra entries and pairs); out of order, the counts are
    not made (the hash-table path counts those)."""
    at0, size = geo[GEO_ENTRIES_AT], geo[GEO_ENTRY_SIZE]
    kh_at, phys_at = geo[GEO_KEY_HASH], geo[GEO_PHYSICAL_OFFSET]
    start = max(start, 1)
    ordered = True
    last = _i64(buf, at0 + (start - 1) * size + phys_at) if start > 1 else np.int64(-1 << 62)
    for e in range(start, count):
        at = at0 + e * size
        kh, phys = _i32(buf, at + kh_at), _i64(buf, at + phys_at)
        if kh >= 0:
            used[kh % hash_slot_num] = True
        ordered = ordered and phys >= last
        last = phys
    slots = used.sum()
    extra = pairs = last_extra = last_pairs = 0
    run_start = max(run_start, 1)
    if not ordered or run_start >= count:
        return ordered, slots, extra, pairs, run_start, last_extra, last_pairs
    extra, pairs, first, last_extra, last_pairs = _runs_from(buf, at0, size, kh_at, phys_at, run_start, count)
    return ordered, slots, extra, pairs, first, last_extra, last_pairs


# ---------------------------------------------------------------------------------------------------------
# Joins of (offset, hash) pairs


@njit((_i8r, _i4r, _i8r, _i4r, _b1), **_OPTS)
def pairs_in_sorted(a_phys, a_hash, b_phys, b_hash, found):
    """Whether each (offset, hash) pair of ``a`` is one of ``b``'s, both ordered by offset: one merge pass, each
    ``a`` pair compared with the run of equal offsets in ``b`` (a message's few keys)."""
    m = b_phys.shape[0]
    j = 0
    for i in range(a_phys.shape[0]):
        p = a_phys[i]
        while j < m and b_phys[j] < p:
            j += 1
        k = j
        hit = False
        while k < m and b_phys[k] == p:
            if b_hash[k] == a_hash[i]:
                hit = True
                break
            k += 1
        found[i] = hit


# ---------------------------------------------------------------------------------------------------------
# Routing buckets (jobs/audit/plan.py)


@njit((_i8r, _i8r, nt.int64, nt.int64, nt.int64, _i8, _i8), **_OPTS)
def bucket_hulls(phys, rows, row_base, shift, last, first, final):
    """Each entry's routing bucket (below 0: bucket -1; past ``last``: ``last + 1``; else ``phys >> shift``) and,
    per bucket ``b`` at index ``b + 1``, the least and greatest row of its entries (``first`` comes filled with the
    int64 maximum, ``final`` with -1): one pass, no sort, whatever the order of the entries.  Entry ``i``'s row is
    ``rows[i]``, or ``row_base + i`` when ``rows`` is empty."""
    for i in range(phys.shape[0]):
        p = phys[i]
        if p < 0:
            k = 0
        else:
            k = min(p >> shift, last + 1) + 1
        r = rows[i] if rows.shape[0] else row_base + i
        if r < first[k]:
            first[k] = r
        if r > final[k]:
            final[k] = r


@njit((_i8r, _u1r, nt.uint64, nt.Array(nt.uint64, 1, "C")), **_OPTS)
def string_poly_sums(offsets, data, poly, out):
    """Per string ``i`` (bytes ``offsets[i]`` .. ``offsets[i + 1]`` - 1 of ``data``, offsets relative to
    ``data``): the sum over its bytes ``b`` at ``k`` of ``(b + 1) * poly ** (k + 1)``, modulo 2 ** 64 (0 when
    empty).  jobs/audit/buckets.py's key hash mixes it with the length."""
    for i in range(out.shape[0]):
        h = np.uint64(0)
        p = np.uint64(1)
        for j in range(offsets[i], offsets[i + 1]):
            p = p * poly  # uint64 throughout: a Python int would make numba compute in float64
            h = h + (np.uint64(data[j]) + np.uint64(1)) * p
        out[i] = h


# ---------------------------------------------------------------------------------------------------------
# consumerOffset.json as fastjson writes it (store_format/config.py: offset_columns)

_ASIDE = -1  # the scan steps aside for the exact parser


@_inner
def _ws(b, i, n):
    """The first index from ``i`` that is not JSON whitespace (the tolerant parser's too: space, tab, LF, CR)."""
    while i < n:
        c = _at(b, i)
        if not (c == 32 or c == 9 or c == 10 or c == 13):
            break
        i += 1
    return i


@_inner
def _string_end(b, i, n, esc):
    """``b[i]`` is a quote: the index of the closing quote (``esc[0]`` set when an escape is inside), or -1 for a
    control character (strict JSON refuses them) or no end."""
    i += 1
    while i < n:
        c = _at(b, i)
        if c == 34:
            return i
        if c == 92:
            esc[0] = True
            i += 2
            continue
        if c < 32:
            return -1
        i += 1
    return -1


@_inner
def _value_end(b, i, n, limit, esc):
    """The end of the JSON value at ``b[i]`` (whatever it is: the exact parser reads it again), found by its
    brackets outside strings; -1 without one, or nested deeper than ``limit``."""
    depth = 0
    while i < n:
        c = _at(b, i)
        if c == 34:
            i = _string_end(b, i, n, esc)
            if i < 0:
                return -1
            i += 1
            if depth == 0:
                return i
            continue
        if c == 123 or c == 91:
            depth += 1
            if depth > limit:
                return -1
        elif c == 125 or c == 93:
            if depth == 0:
                return i  # the enclosing object's end: a scalar ended before it
            depth -= 1
            if depth == 0:
                return i + 1
        elif depth == 0 and (c == 44 or c == 32 or c == 9 or c == 10 or c == 13):
            return i
        i += 1
    return -1 if depth else i


@_inner
def _integer(b, i, n, strict, out):
    """A '-'? and 1 to 18 digits at ``b[i]``: its value in ``out[0]``, the index after it; -1 for anything else
    (``strict``: JSON's grammar, no leading zero).  What follows must end it (whitespace, ':', ',', '}')."""
    neg = False
    if i < n and _at(b, i) == 45:
        neg = True
        i += 1
    j = i
    v = np.int64(0)
    while j < n and 48 <= _at(b, j) <= 57:
        v = v * 10 + (_at(b, j) - 48)
        j += 1
        if j - i > 18:
            return -1
    if j == i or (strict and _at(b, i) == 48 and j - i > 1):
        return -1
    c = _at(b, j) if j < n else 0
    if j < n and not (c == 32 or c == 9 or c == 10 or c == 13 or c == 58 or c == 44 or c == 125):
        return -1
    out[0] = -v if neg else v
    return j


_CLOSED, _MORE, _BAD = 0, 1, -1  # what follows an object's member (_after_member)


@_inner
def _after_member(b, i, n):
    """What follows a member of an object at ``i``: (past the comma, _MORE) with another member to come, (past the
    closing brace, _CLOSED), or (where it is, _BAD) for anything else, a trailing comma included."""
    i = _ws(b, i, n)
    if i < n and _at(b, i) == 44:
        i = _ws(b, i + 1, n)
        if i >= n or _at(b, i) == 125:
            return i, _BAD
        return i, _MORE
    if i < n and _at(b, i) == 125:
        return i + 1, _CLOSED
    return i, _BAD


@njit((_u1r, _i8, _i8, _b1, _i8, _i8, _i8, _i8, _i8, _i8, nt.int64), **_OPTS)
def offset_table_scan(b, name_lo, name_hi, name_esc, map_first, map_count, keys, values, other_lo, other_hi,
                      nest_limit):
    """fastjson's consumerOffset.json, ``{"offsetTable":{"topic@group":{qid:offset,...},...},...}``, in one pass:
    each map's name span (its quotes excluded, whether an escape is inside) and first entry and count, each
    entry's queue id (a bare integer key, as the tolerant parser reads it) and offset (a JSON integer), and the
    value span of every other top-level member (for the exact parser to check).  Returns (maps, entries, other
    members) or (-1, the position, 0) where the text is anything else: another shape, a trailing comma, a
    duplicate offsetTable, an escaped top-level key, a longer number, ... -- the exact parser's to read."""
    n = b.shape[0]
    esc = np.zeros(1, np.bool_)
    num = np.zeros(1, np.int64)
    maps = entries = others = 0
    seen = False
    i = _ws(b, 0, n)
    if i >= n or _at(b, i) != 123:
        return _ASIDE, i, 0
    i = _ws(b, i + 1, n)
    if i < n and _at(b, i) == 125:
        return _ASIDE, i, 0  # no offsetTable
    while True:
        if i >= n or _at(b, i) != 34:
            return _ASIDE, i, 0
        esc[0] = False
        e = _string_end(b, i, n, esc)
        if e < 0 or esc[0]:
            return _ASIDE, i, 0
        is_table = e - i - 1 == 11 and b[i + 1] == 111 and b[i + 2] == 102 and b[i + 3] == 102 and \
            b[i + 4] == 115 and b[i + 5] == 101 and b[i + 6] == 116 and b[i + 7] == 84 and b[i + 8] == 97 and \
            b[i + 9] == 98 and b[i + 10] == 108 and b[i + 11] == 101  # "offsetTable" (once per member: not hot)
        i = _ws(b, e + 1, n)
        if i >= n or _at(b, i) != 58:
            return _ASIDE, i, 0
        i = _ws(b, i + 1, n)
        if not is_table:
            e = _value_end(b, i, n, nest_limit, esc)
            if e <= i:
                return _ASIDE, i, 0
            other_lo[others], other_hi[others] = i, e
            others += 1
            i = e
        else:
            if seen or i >= n or _at(b, i) != 123:
                return _ASIDE, i, 0
            seen = True
            i = _ws(b, i + 1, n)
            if i < n and _at(b, i) == 125:
                i += 1
            else:
                while True:  # "name":{k:v,...}
                    if i >= n or _at(b, i) != 34:
                        return _ASIDE, i, 0
                    esc[0] = False
                    e = _string_end(b, i, n, esc)
                    if e < 0:
                        return _ASIDE, i, 0
                    name_lo[maps], name_hi[maps], name_esc[maps] = i + 1, e, esc[0]
                    map_first[maps] = entries
                    i = _ws(b, e + 1, n)
                    if i >= n or _at(b, i) != 58:
                        return _ASIDE, i, 0
                    i = _ws(b, i + 1, n)
                    if i >= n or _at(b, i) != 123:
                        return _ASIDE, i, 0
                    i = _ws(b, i + 1, n)
                    if i < n and _at(b, i) == 125:
                        i += 1
                    else:
                        while True:
                            at = i
                            i = _integer(b, i, n, False, num)
                            if i < 0:
                                return _ASIDE, at, 0
                            keys[entries] = num[0]
                            i = _ws(b, i, n)
                            if i >= n or _at(b, i) != 58:
                                return _ASIDE, i, 0
                            at = _ws(b, i + 1, n)
                            i = _integer(b, at, n, True, num)
                            if i < 0:
                                return _ASIDE, at, 0
                            values[entries] = num[0]
                            entries += 1
                            i, then = _after_member(b, i, n)
                            if then != _MORE:
                                break
                        if then == _BAD:
                            return _ASIDE, i, 0
                    map_count[maps] = entries - map_first[maps]
                    maps += 1
                    i, then = _after_member(b, i, n)
                    if then != _MORE:
                        break
                if then == _BAD:
                    return _ASIDE, i, 0
        i, then = _after_member(b, i, n)
        if then != _MORE:
            break
    if then == _BAD or not seen or _ws(b, i, n) != n:
        return _ASIDE, i, 0
    return maps, entries, others


_SIGN = -9223372036854775808  # flips a big-endian word's top bit: signed order is then the bytes' order


@_inner
def _span_cmp(b, p, pe, q, qe):
    """-1, 0 or 1: ``b[p:pe]`` against ``b[q:qe]`` as bytes."""
    while p < pe and q < qe:
        x, y = _at(b, p), _at(b, q)
        if x != y:
            return -1 if x < y else 1
        p += 1
        q += 1
    if p < pe:
        return 1
    return -1 if q < qe else 0


@_inner
def _name_cmp(b, lo, hi, at, pk, i, j):
    """-1, 0 or 1: name ``i`` against name ``j`` (``b[lo:hi]``, split at ``at``) by (topic, group) as bytes; ``pk``:
    each name's first eight bytes as a key (:func:`offset_name_order`), compared first."""
    x, y = _at(pk, i), _at(pk, j)
    if x != y:
        return -1 if x < y else 1
    c = _span_cmp(b, _at(lo, i), _at(at, i), _at(lo, j), _at(at, j))
    if c != 0:
        return c
    return _span_cmp(b, _at(at, i) + 1, _at(hi, i), _at(at, j) + 1, _at(hi, j))


@njit((_u1r, _i8r, _i8r, nt.int64, _i8, _i8), **_OPTS)
def offset_name_order(b, lo, hi, sep, at, order):
    """The maps' names ``b[lo[k]:hi[k]]`` split at their last ``sep`` byte (``at[k]``: topic@group) and
    ``order``: the maps by (topic, group) as bytes, stably.  Returns 0, or 1 where a name has no ``sep``, 2 where
    two names are the same (the exact parser decides what those mean).  The names are compared where they are in
    ``b`` (nothing copied: 16 bytes a map beside ``at`` and ``order``, a 1 GiB file holds 26 M maps); each first by
    a word of its key's first eight bytes -- topic, a 0 byte, group, zero-padded -- whose order is the pair's (the
    names hold no byte under 32: the scan refuses them in strings, and names with escapes are not passed here)."""
    n = lo.shape[0]
    pk = np.empty(n, np.int64)
    for k in range(n):
        p = hi[k] - 1
        while p >= lo[k] and b[p] != sep:
            p -= 1
        if p < lo[k]:
            return 1
        at[k] = p
        w = np.int64(0)
        for q in range(lo[k], lo[k] + 8):  # the key's byte at q - lo is b[q] but at the separator (0)
            w = (w << 8) | (np.int64(b[q]) if q < hi[k] and q != p else np.int64(0))
        pk[k] = w ^ _SIGN
    ordered = True
    for k in range(n):
        order[k] = k
        if k and ordered and _name_cmp(b, lo, hi, at, pk, k - 1, k) > 0:
            ordered = False
    if not ordered:  # bottom-up merge sort (fastjson writes a hash map: any order)
        src, dst = order, np.empty(n, np.int64)
        width, swapped = 1, False
        while width < n:
            for s in range(0, n, 2 * width):
                i, mid, end, k = s, min(s + width, n), min(s + 2 * width, n), s
                j = mid
                while i < mid and j < end:
                    if _name_cmp(b, lo, hi, at, pk, src[j], src[i]) < 0:
                        dst[k] = src[j]
                        j += 1
                    else:
                        dst[k] = src[i]
                        i += 1
                    k += 1
                while i < mid:
                    dst[k] = src[i]
                    i += 1
                    k += 1
                while j < end:
                    dst[k] = src[j]
                    j += 1
                    k += 1
            src, dst = dst, src
            swapped = not swapped
            width *= 2
        if swapped:
            order[:] = src
    for k in range(1, n):
        if _name_cmp(b, lo, hi, at, pk, order[k - 1], order[k]) == 0:
            return 2
    return 0


@njit((_i8r, _i8r, _i8r, _i8r, _i8r, _i4, _i4, _i8), **_OPTS)
def offset_rows(order, first, count, keys, values, row_map, qid, offset):
    """The rows of the maps taken in ``order`` (each map's entries ``first[m]`` to ``first[m] + count[m]``): the
    map's place in ``order``, the queue id, the offset.  False where a map's queue ids are not ascending (fastjson
    writes them so, each once) or one lies outside int: the rows are then the general path's to build."""
    r = 0
    for m in range(order.shape[0]):
        a = first[order[m]]
        for j in range(a, a + count[order[m]]):
            q = keys[j]
            if q < -2147483648 or q > 2147483647 or (j > a and q <= keys[j - 1]):
                return False
            row_map[r] = m
            qid[r] = q
            offset[r] = values[j]
            r += 1
    return True


# what offset_table_check reports in ``out`` (store_format.config.OffsetCheck reads them by these indexes)
CHECK_MAPS, CHECK_ENTRIES, CHECK_OTHERS, CHECK_ESCAPED, CHECK_PROBLEM_MAP, CHECK_PROBLEM_KIND, CHECK_NAME_LO, \
    CHECK_NAME_HI, CHECK_QUEUE_ID, CHECK_FIELDS = range(10)
CHECK_NOT_TOPIC_GROUP, CHECK_QUEUE_ID_OUTSIDE_INT = 1, 2  # the first problem's kind


@njit((_u1r, nt.int64, nt.int64, _i8, _i8, _i8), **_OPTS)
def offset_table_check(b, nest_limit, sep, out, other_lo, other_hi):
    """:func:`offset_table_scan`'s grammar read in the same one pass, keeping nothing per map or entry (memory
    constant, whatever the file's size): the counts of maps, entries and escaped names, and the first map (in file
    order) a broker cannot hold -- a name without ``sep`` (topic@group; only names without an escape are judged:
    the caller reads a file with escaped names the exact way), else the first queue id outside int -- into
    ``out`` (the CHECK_* indexes); the other top-level members' value spans into ``other_lo``/``other_hi`` (at
    most their length).  Returns 0, or -1 where the scan steps aside (``out[CHECK_MAPS]``: the position), -2
    with more other members than fit."""
    n = b.shape[0]
    esc = np.zeros(1, np.bool_)
    num = np.zeros(1, np.int64)
    for k in range(CHECK_FIELDS):
        out[k] = 0
    out[CHECK_PROBLEM_MAP] = -1
    maps = entries = others = 0
    seen = False
    i = _ws(b, 0, n)
    if i >= n or _at(b, i) != 123:
        out[CHECK_MAPS] = i
        return -1
    i = _ws(b, i + 1, n)
    if i < n and _at(b, i) == 125:
        out[CHECK_MAPS] = i
        return -1  # no offsetTable
    while True:
        if i >= n or _at(b, i) != 34:
            out[CHECK_MAPS] = i
            return -1
        esc[0] = False
        e = _string_end(b, i, n, esc)
        if e < 0 or esc[0]:
            out[CHECK_MAPS] = i
            return -1
        is_table = e - i - 1 == 11 and b[i + 1] == 111 and b[i + 2] == 102 and b[i + 3] == 102 and \
            b[i + 4] == 115 and b[i + 5] == 101 and b[i + 6] == 116 and b[i + 7] == 84 and b[i + 8] == 97 and \
            b[i + 9] == 98 and b[i + 10] == 108 and b[i + 11] == 101  # "offsetTable"
        i = _ws(b, e + 1, n)
        if i >= n or _at(b, i) != 58:
            out[CHECK_MAPS] = i
            return -1
        i = _ws(b, i + 1, n)
        if not is_table:
            e = _value_end(b, i, n, nest_limit, esc)
            if e <= i:
                out[CHECK_MAPS] = i
                return -1
            if others >= other_lo.shape[0]:
                return -2
            other_lo[others], other_hi[others] = i, e
            others += 1
            i = e
        else:
            if seen or i >= n or _at(b, i) != 123:
                out[CHECK_MAPS] = i
                return -1
            seen = True
            i = _ws(b, i + 1, n)
            if i < n and _at(b, i) == 125:
                i += 1
            else:
                while True:  # "name":{k:v,...}
                    if i >= n or _at(b, i) != 34:
                        out[CHECK_MAPS] = i
                        return -1
                    esc[0] = False
                    e = _string_end(b, i, n, esc)
                    if e < 0:
                        out[CHECK_MAPS] = i
                        return -1
                    judged = out[CHECK_PROBLEM_MAP] < 0
                    if esc[0]:
                        out[CHECK_ESCAPED] += 1
                    elif judged:
                        p = e - 1
                        while p > i and b[p] != sep:
                            p -= 1
                        if p == i:  # no separator: not topic@group
                            out[CHECK_PROBLEM_MAP], out[CHECK_PROBLEM_KIND] = maps, CHECK_NOT_TOPIC_GROUP
                            out[CHECK_NAME_LO], out[CHECK_NAME_HI] = i + 1, e
                            judged = False
                    name_lo = i + 1
                    i = _ws(b, e + 1, n)
                    if i >= n or _at(b, i) != 58:
                        out[CHECK_MAPS] = i
                        return -1
                    i = _ws(b, i + 1, n)
                    if i >= n or _at(b, i) != 123:
                        out[CHECK_MAPS] = i
                        return -1
                    i = _ws(b, i + 1, n)
                    if i < n and _at(b, i) == 125:
                        i += 1
                    else:
                        while True:
                            at = i
                            i = _integer(b, i, n, False, num)
                            if i < 0:
                                out[CHECK_MAPS] = at
                                return -1
                            q = num[0]
                            if judged and not esc[0] and (q < -2147483648 or q > 2147483647):
                                out[CHECK_PROBLEM_MAP], out[CHECK_PROBLEM_KIND] = maps, CHECK_QUEUE_ID_OUTSIDE_INT
                                out[CHECK_NAME_LO], out[CHECK_NAME_HI], out[CHECK_QUEUE_ID] = name_lo, e, q
                                judged = False
                            i = _ws(b, i, n)
                            if i >= n or _at(b, i) != 58:
                                out[CHECK_MAPS] = i
                                return -1
                            at = _ws(b, i + 1, n)
                            i = _integer(b, at, n, True, num)
                            if i < 0:
                                out[CHECK_MAPS] = at
                                return -1
                            entries += 1
                            i, then = _after_member(b, i, n)
                            if then != _MORE:
                                break
                        if then == _BAD:
                            out[CHECK_MAPS] = i
                            return -1
                    maps += 1
                    i, then = _after_member(b, i, n)
                    if then != _MORE:
                        break
                if then == _BAD:
                    out[CHECK_MAPS] = i
                    return -1
        i, then = _after_member(b, i, n)
        if then != _MORE:
            break
    if then == _BAD or not seen or _ws(b, i, n) != n:
        out[CHECK_MAPS] = i
        return -1
    out[CHECK_MAPS], out[CHECK_ENTRIES], out[CHECK_OTHERS] = maps, entries, others
    return 0


@njit([(_u1r, _i8r, _i8r, _i4, _u1), (_u1r, _i8r, _i8r, _i8, _u1)], **_OPTS)
def gather_spans(b, lo, hi, off, out):
    """The spans ``b[lo[k]:hi[k]]`` one after another into ``out``, at offsets ``off`` (the caller's cumulative sum
    of their lengths: Arrow's 32-bit ones for a string array, 64-bit for records copied out of a segment)."""
    for k in range(lo.shape[0]):
        _copy(out, off[k], b, lo[k], hi[k] - lo[k])


def compiled_in_this_process() -> int:
    """How many of this module's compiled passes numba compiled in this process rather than loading them from its
    disk cache (0 after ``make setup``, which compiles them once for the machine): what --profile reports."""
    from numba.core.registry import CPUDispatcher

    return sum(sum(d.stats.cache_misses.values()) for d in globals().values() if isinstance(d, CPUDispatcher))



# ---------------------------------------------------------------------------------------------------------
# DLedger entry headers (store_format.commitlog.dledger_entry_walk, compiled)

_DL_MAGIC, _DL_BLANK, _DL_MIN_BLANK, _DL_HEADER, _DL_BODY = 1, -1, 8, 44, 48  # store_format.dledger's constants
_DL_RECORD, _DL_BLANK_ROW, _DL_STOP, _DL_SPAN = 0, 1, 2, 3  # EntryWalk kinds (store_format.commitlog.KINDS)


@_inner
def _dl_confirmed(data, pos, limit, base):
    """store_format.dledger.confirmed_header: magic 1, pos field = base + pos, size = 48 + bodySize > 44, inside."""
    if pos < 0 or pos + _DL_BODY > limit:
        return False
    size = _i32(data, pos + 4)
    return (_i32(data, pos) == _DL_MAGIC and _i64(data, pos + 24) == base + pos and size > _DL_HEADER
            and _i32(data, pos + 44) + _DL_BODY == size and pos + size <= limit)


@njit((_u1r, nt.int64, nt.int64, nt.int64, nt.int64, nt.boolean, _i1, _i8, _i8, _i4, _i1, _i8, _i8), **_OPTS)
def dledger_walk(data, start, limit, until, base, salvage, kinds, positions, sizes, magics, codes, tails, state):
    """store_format.commitlog.dledger_entry_walk's rows from ``start`` (items before ``until``; the caller passes
    ``limit`` for none), row for row: each entry whose header passes frames its record (kind 0, at entry + 48),
    a blank, a header's stop (its code: an index into store_format.commitlog.ENTRY_STOPS), and in a salvage walk
    the span to the next confirmed header.  Writes at most the outputs' length less 3 rows: ``state`` is (the
    position to go on from, 1 when the walk ended); returns the rows written."""
    cap = kinds.shape[0] - 3  # one step writes at most three rows (a stop, its span, the tail's stop)
    n = 0
    pos = start
    state[1] = 1
    while pos < limit and pos < until:
        if n > cap:
            state[0], state[1] = pos, 0
            return n
        if limit - pos < _DL_MIN_BLANK:
            stray = False
            for i in range(pos, limit):
                stray |= data[i] != 0
            if stray:
                kinds[n], positions[n], sizes[n], magics[n], codes[n], tails[n] = _DL_STOP, pos, 0, 0, 7, 0
                n += 1
            break
        magic, size = _i32(data, pos), _i32(data, pos + 4)
        if magic == _DL_BLANK and size == limit - pos:
            kinds[n], positions[n], sizes[n], magics[n], codes[n], tails[n] = _DL_BLANK_ROW, pos, size, magic, 0, 0
            n += 1
            break
        code = -1
        if magic == 0 and size == 0:
            code = 0
        elif magic == _DL_BLANK:
            code = 1
        elif magic != _DL_MAGIC:
            code = 2
        elif size <= _DL_HEADER or pos + _DL_BODY > limit:
            code = 3
        elif pos + size > limit:
            code = 4
        elif _i32(data, pos + 44) + _DL_BODY != size:
            code = 5
        elif _i64(data, pos + 24) != base + pos:
            code = 6
        if code < 0:
            kinds[n], positions[n], sizes[n], magics[n], codes[n], tails[n] = _DL_RECORD, pos + _DL_BODY, \
                size - _DL_BODY, 0, 0, 0
            n += 1
            pos += size
            continue
        kinds[n], positions[n], sizes[n], magics[n], codes[n], tails[n] = _DL_STOP, pos, size, magic, code, 0
        n += 1
        if not salvage:
            break
        nxt = -1
        i = pos + 1
        while i + 4 <= limit and i < limit:  # the next confirmed header (a candidate needs its magic's 4 bytes)
            if data[i + 3] == 1 and data[i] == 0 and data[i + 1] == 0 and data[i + 2] == 0 \
                    and _dl_confirmed(data, i, limit, base):
                nxt = i
                break
            i += 1
        tail = 0
        if nxt < 0:
            zeros = limit
            while zeros > pos and data[zeros - 1] == 0:
                zeros -= 1
            if code == 0 or zeros <= pos:
                break
            tail, end = limit - zeros, zeros
        else:
            end = nxt
        if end > pos:
            kinds[n], positions[n], sizes[n], magics[n], codes[n], tails[n] = _DL_SPAN, pos, end - pos, 0, code, tail
            n += 1
        if nxt < 0:
            if tail:
                kinds[n], positions[n], sizes[n], magics[n], codes[n], tails[n] = _DL_STOP, end, 0, 0, 8, 0
                n += 1
            break
        pos = nxt
    state[0] = pos
    return n


# consumerOffset.json streamed (decoding/metadata.py: offset_table_batches): the maps found once, their rows read a
# batch of maps at a time, so nothing is held per offset beyond one batch


@njit((_u1r, _i8, _i8, _b1, _i8, _i8, _i8, _i8, _i8, nt.int64), **_OPTS)
def offset_table_maps(b, name_lo, name_hi, name_esc, body, map_count, other_lo, other_hi, flags, nest_limit):
    """:func:`offset_table_scan`'s grammar in the same one pass, keeping per map its name span, whether an escape is
    inside, where its ``{`` is (``body``) and its entry count -- nothing per entry.  ``flags[0]``: 1 when every
    map's queue ids ascend within int (what fastjson writes), else 0.  Returns (maps, entries, other members) or
    (-1, the position, 0) where :func:`offset_table_scan` steps aside."""
    n = b.shape[0]
    esc = np.zeros(1, np.bool_)
    num = np.zeros(1, np.int64)
    maps = entries = others = 0
    seen = False
    flags[0] = 1
    i = _ws(b, 0, n)
    if i >= n or _at(b, i) != 123:
        return _ASIDE, i, 0
    i = _ws(b, i + 1, n)
    if i < n and _at(b, i) == 125:
        return _ASIDE, i, 0
    while True:
        if i >= n or _at(b, i) != 34:
            return _ASIDE, i, 0
        esc[0] = False
        e = _string_end(b, i, n, esc)
        if e < 0 or esc[0]:
            return _ASIDE, i, 0
        is_table = e - i - 1 == 11 and b[i + 1] == 111 and b[i + 2] == 102 and b[i + 3] == 102 and \
            b[i + 4] == 115 and b[i + 5] == 101 and b[i + 6] == 116 and b[i + 7] == 84 and b[i + 8] == 97 and \
            b[i + 9] == 98 and b[i + 10] == 108 and b[i + 11] == 101  # "offsetTable"
        i = _ws(b, e + 1, n)
        if i >= n or _at(b, i) != 58:
            return _ASIDE, i, 0
        i = _ws(b, i + 1, n)
        if not is_table:
            e = _value_end(b, i, n, nest_limit, esc)
            if e <= i:
                return _ASIDE, i, 0
            other_lo[others], other_hi[others] = i, e
            others += 1
            i = e
        else:
            if seen or i >= n or _at(b, i) != 123:
                return _ASIDE, i, 0
            seen = True
            i = _ws(b, i + 1, n)
            if i < n and _at(b, i) == 125:
                i += 1
            else:
                while True:  # "name":{k:v,...}
                    if i >= n or _at(b, i) != 34:
                        return _ASIDE, i, 0
                    esc[0] = False
                    e = _string_end(b, i, n, esc)
                    if e < 0:
                        return _ASIDE, i, 0
                    name_lo[maps], name_hi[maps], name_esc[maps] = i + 1, e, esc[0]
                    first = entries
                    i = _ws(b, e + 1, n)
                    if i >= n or _at(b, i) != 58:
                        return _ASIDE, i, 0
                    i = _ws(b, i + 1, n)
                    if i >= n or _at(b, i) != 123:
                        return _ASIDE, i, 0
                    body[maps] = i
                    i = _ws(b, i + 1, n)
                    if i < n and _at(b, i) == 125:
                        i += 1
                    else:
                        last = np.int64(0)
                        while True:
                            at = i
                            i = _integer(b, i, n, False, num)
                            if i < 0:
                                return _ASIDE, at, 0
                            q = num[0]
                            if q < -2147483648 or q > 2147483647 or (entries > first and q <= last):
                                flags[0] = 0
                            last = q
                            i = _ws(b, i, n)
                            if i >= n or _at(b, i) != 58:
                                return _ASIDE, i, 0
                            at = _ws(b, i + 1, n)
                            i = _integer(b, at, n, True, num)
                            if i < 0:
                                return _ASIDE, at, 0
                            entries += 1
                            i, then = _after_member(b, i, n)
                            if then != _MORE:
                                break
                        if then == _BAD:
                            return _ASIDE, i, 0
                    map_count[maps] = entries - first
                    maps += 1
                    i, then = _after_member(b, i, n)
                    if then != _MORE:
                        break
                if then == _BAD:
                    return _ASIDE, i, 0
        i, then = _after_member(b, i, n)
        if then != _MORE:
            break
    if then == _BAD or not seen or _ws(b, i, n) != n:
        return _ASIDE, i, 0
    return maps, entries, others


@njit((_u1r, _i8r, _i8r, _i8r, _i4, _i4, _i8), **_OPTS)
def offset_map_rows(b, maps, body, count, row_map, qid, offset):
    """The rows of the maps ``maps`` (indexes into :func:`offset_table_maps`' ``body`` and ``count``, which has
    read the file's grammar, queue ids within int), in that order: each row's place in ``maps``, its queue id and
    offset.  Returns the rows written."""
    n = b.shape[0]
    num = np.zeros(1, np.int64)
    r = 0
    for m in range(maps.shape[0]):
        k = maps[m]
        i = _ws(b, body[k] + 1, n)
        for _ in range(count[k]):
            i = _integer(b, i, n, False, num)
            qid[r] = num[0]
            i = _ws(b, _ws(b, i, n) + 1, n)  # past the ':'
            i = _integer(b, i, n, True, num)
            offset[r] = num[0]
            row_map[r] = m
            r += 1
            i, _ = _after_member(b, i, n)
    return r
