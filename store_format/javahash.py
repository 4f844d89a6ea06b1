"""Java ``String.hashCode`` over UTF-16 code units, and the two ways RocketMQ uses it.

tagsCode (``MessageExtBrokerInner.tagsString2tagsCode``) is the signed int widened to long;
the index hash (``IndexService.indexKeyHashMethod``) is ``Math.abs`` with Integer.MIN_VALUE -> 0.
"""
from __future__ import annotations

_MASK = 0xFFFFFFFF


def java_hash(s: str) -> int:
    h = 0
    if s.isascii():
        for ch in s.encode("ascii"):
            h = (31 * h + ch) & _MASK
    else:
        b = s.encode("utf-16-be", "surrogatepass")
        for i in range(0, len(b), 2):
            h = (31 * h + ((b[i] << 8) | b[i + 1])) & _MASK
    return h - (1 << 32) if h & 0x80000000 else h


def tags_code(tags: str | None) -> int:
    """0 for null/empty tags, else tags.hashCode() (sign-extended)."""
    return java_hash(tags) if tags else 0


def index_key_hash(key: str) -> int:
    h = java_hash(key)
    if h == -(1 << 31):  # Math.abs(Integer.MIN_VALUE) stays negative; RocketMQ maps it to 0
        return 0
    return abs(h)


def index_key(topic: str, key: str) -> str:
    """The string RocketMQ hashes into the index: ``topic#key`` (UNIQ_KEY and each of KEYS)."""
    return f"{topic}#{key}"


# --------------------------------------------------------------------------------------------------
# Java map iteration order.  RocketMQ serializes properties (``messageProperties2String``) and config
# tables (fastjson over ConcurrentHashMap) in the map's iteration order: by bucket
# ``(h ^ (h >>> 16)) & (capacity - 1)``, then insertion order inside a bucket.  Writing what the broker
# writes, byte for byte, needs that order.


def _java_key_hash(key) -> int:
    if isinstance(key, bool):  # Boolean.hashCode
        return 1231 if key else 1237
    if isinstance(key, int):  # Integer.hashCode
        return key & 0xFFFFFFFF
    return java_hash(key) & 0xFFFFFFFF


def java_map_bucket(key, capacity: int) -> int:
    h = _java_key_hash(key)
    return (h ^ (h >> 16)) & (capacity - 1)


def _table_size_for(n: int) -> int:
    cap = 1
    while cap < n:
        cap <<= 1
    return max(cap, 1)


class JavaHashMap:
    """The iteration order of ``java.util.HashMap`` (and of a ConcurrentHashMap that never had two keys
    in one bin reordered by a resize): a dict that tracks the table capacity as Java grows it.

    ``initial_capacity`` None is ``new HashMap()`` (16 on first put); ``concurrent`` sizes the table like
    ``new ConcurrentHashMap(n)`` (tableSizeFor(1.5n + 1)).  Treeified bins (8+ keys in one bin) are not
    modelled; RocketMQ's maps never get there.
    """

    __slots__ = ("_d", "capacity", "_threshold")

    def __init__(self, items=None, initial_capacity: int | None = None, concurrent: bool = False):
        self._d: dict = {}
        if initial_capacity is None:
            self.capacity = 16
        elif concurrent:
            self.capacity = _table_size_for(initial_capacity + (initial_capacity >> 1) + 1)
        else:
            self.capacity = _table_size_for(initial_capacity)
        self._threshold = self.capacity * 3 // 4
        for k, v in (items.items() if isinstance(items, dict) else (items or ())):
            self.put(k, v)

    def put(self, key, value):
        """Map.put: an existing key keeps its place; a new key goes to the tail of its bin."""
        if key not in self._d:
            self._d[key] = value
            if len(self._d) > self._threshold:
                self.capacity <<= 1
                self._threshold <<= 1
        else:
            self._d[key] = value

    def remove(self, key):
        return self._d.pop(key, None)

    def get(self, key, default=None):
        return self._d.get(key, default)

    def __contains__(self, key) -> bool:
        return key in self._d

    def __len__(self) -> int:
        return len(self._d)

    def keys(self) -> list:
        cap = self.capacity
        order = {k: i for i, k in enumerate(self._d)}
        return sorted(self._d, key=lambda k: (java_map_bucket(k, cap), order[k]))

    def items(self) -> list:
        return [(k, self._d[k]) for k in self.keys()]

    def to_dict(self) -> dict:
        """A Python dict in Java's iteration order."""
        return dict(self.items())

    def copy(self) -> "JavaHashMap":
        m = JavaHashMap.__new__(JavaHashMap)
        m._d, m.capacity, m._threshold = dict(self._d), self.capacity, self._threshold
        return m


# --------------------------------------------------------------------------------------------------
# Many hashes at once (bulk writer): h(s[a:b]) from prefix sums.  31 is odd, hence invertible mod 2^32:
# with P[j] = sum_{i<j} c_i * 31^-i, the hash of units a..b-1 is (P[b] - P[a]) * 31^(b-1), all in
# wrapping uint32 arithmetic.
_INV31 = pow(31, -1, 1 << 32)
_POW_CACHE: dict = {}


def _powers(base: int, n: int):
    """base^0 .. base^n as wrapping uint32 (cached, grown by doubling)."""
    import numpy as np
    cached = _POW_CACHE.get(base)
    if cached is None or len(cached) <= n:
        size = max(n + 1, 2 * (len(cached) if cached is not None else 1024))
        with np.errstate(over="ignore"):
            cached = np.empty(size, np.uint32)
            cached[0] = 1
            cached[1:] = np.cumprod(np.full(size - 1, base, np.uint32), dtype=np.uint32)
        _POW_CACHE[base] = cached
    return cached


def _utf16_units(joined: str, lengths):
    """``joined`` (strings back to back, ``lengths`` in code points) as UTF-16 code units (uint8 when ASCII),
    and each string's length in those units (a code point above U+FFFF is two)."""
    import numpy as np
    lengths = np.asarray(lengths, np.int64)
    if joined.isascii():
        return np.frombuffer(joined.encode("ascii"), np.uint8), lengths
    points = np.frombuffer(joined.encode("utf-32-le", "surrogatepass"), np.uint32)
    astral = np.zeros(len(points) + 1, np.int64)
    np.cumsum(points > 0xFFFF, out=astral[1:])
    ends = np.cumsum(lengths)
    lengths = lengths + astral[ends] - astral[ends - lengths]
    return np.frombuffer(joined.encode("utf-16-be", "surrogatepass"), ">u2"), lengths


def _range_hashes(units, starts, ends):
    """hash of units[starts[i]:ends[i]] for every i, as wrapping uint32, by prefix sums."""
    import numpy as np
    n = len(units)
    with np.errstate(over="ignore"):
        pows, inv_pows = _powers(31, n), _powers(_INV31, n)
        prefix = np.zeros(n + 1, np.uint32)
        np.cumsum(units * inv_pows[:n], dtype=np.uint32, out=prefix[1:])
        h = (prefix[ends] - prefix[starts]) * pows[np.maximum(ends - 1, 0)]
    return np.where(ends == starts, np.uint32(0), h).astype(np.uint32)


def java_hash_joined(joined: str, lengths, with_lengths: bool = False):
    """``java_hash`` of each string of ``joined`` (strings back to back, ``lengths`` in code points) as an
    int32 numpy array; ``with_lengths`` also returns each string's length in UTF-16 units."""
    import numpy as np
    units, lengths = _utf16_units(joined, lengths)
    k = len(lengths)
    if k == 0:
        return (np.zeros(0, np.int32), lengths) if with_lengths else np.zeros(0, np.int32)
    width = int(lengths[0])
    if width and len(units) == k * width and (lengths == width).all():
        # equal lengths (UNIQ_KEYs, fixed-width keys): Horner's rule column by column
        m = units.reshape(k, width)
        h = np.zeros(k, np.uint32)
        with np.errstate(over="ignore"):
            for c in range(width):
                h *= np.uint32(31)
                h += m[:, c]
    else:
        ends = np.cumsum(lengths)
        h = _range_hashes(units, ends - lengths, ends)
    h = h.view(np.int32)
    return (h, lengths) if with_lengths else h


def java_hash_many(strings: list[str], with_lengths: bool = False):
    """``[java_hash(s) for s in strings]`` as an int32 numpy array, vectorized over UTF-16 units;
    ``with_lengths`` also returns each string's length in UTF-16 units."""
    import numpy as np
    return java_hash_joined("".join(strings), np.fromiter(map(len, strings), np.int64, len(strings)), with_lengths)


def java_hash_concat(prefix_hash, suffix_hash, suffix_units):
    """hash(a + b) from hash(a), hash(b) and len(b) in UTF-16 units (arrays): h(a)*31^len(b) + h(b)."""
    import numpy as np
    with np.errstate(over="ignore"):
        pows = _powers(31, int(np.max(suffix_units, initial=0)))
        h = np.asarray(prefix_hash).astype(np.uint32) * pows[suffix_units] + np.asarray(suffix_hash).astype(np.uint32)
    return h.astype(np.uint32).view(np.int32)


def index_hash_of(java_hashes):
    """IndexService.indexKeyHashMethod over an array of String.hashCode values."""
    import numpy as np
    h = np.asarray(java_hashes).astype(np.int64)
    return np.where(h == -(1 << 31), 0, np.abs(h)).astype(np.int32)


def java_hash_tokens_joined(joined: str, lengths, sep: str = " "):
    """Hash every non-empty ``sep``-separated token of the strings back to back in ``joined`` (``lengths`` in code
    points; ``s.split(sep)`` with empties dropped, as IndexService splits KEYS), vectorized: (index of the owning
    string, token hash int32, token length in UTF-16 units), tokens in order.  An empty string owns no token."""
    import numpy as np
    units, lengths = _utf16_units(joined, lengths)
    if not len(lengths):
        z = np.zeros(0, np.int64)
        return z, np.zeros(0, np.int32), z
    ends_of = np.cumsum(lengths)
    seps = np.flatnonzero(units == ord(sep))
    # a token ends at a separator or at its string's end; the next one starts after it
    starts = np.sort(np.concatenate(([0], seps + 1, ends_of[:-1])))
    ends = np.sort(np.concatenate((seps, ends_of)))
    keep = ends > starts
    starts, ends = starts[keep], ends[keep]
    h = _range_hashes(units, starts, ends)
    owner = np.searchsorted(ends_of, starts, side="right")
    return owner, h.view(np.int32), ends - starts
