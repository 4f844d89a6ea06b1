"""``config/*.json`` as the broker's fastjson writes them, and RocketMQ's fallback to ``.bak``.

fastjson output is not strict JSON: maps with Integer keys are written with bare keys (``{0:12,1:13}``),
tab-indented.  :func:`loads` is a small strict-but-tolerant parser: JSON plus bare integer (or identifier)
keys; bare integer keys come back as Python ints.  Errors carry the byte position.
``ConfigManager.load`` falls back to ``<file>.bak`` when the main file is missing, empty or unreadable;
so does :func:`read_config`, and it says which file it used.

Big files (a busy broker's consumerOffset.json runs to hundreds of MB) take the fast path: the places where
fastjson wrote a flat Integer-keyed map are found with numpy (outside strings, by the quotes' parity) and
rewritten in place, byte for byte, as JSON arrays of key, value pairs (``{0:12,1:13}`` -> ``[0,12,1,13]``),
the text is parsed by the C ``json`` decoder, and the arrays become int-keyed dicts again.  The fast path
gives exactly what the tolerant parser gives, or steps aside for it: whenever the text holds an array of its
own, bare keys it cannot rewrite (identifiers, keys of nested maps), a trailing comma, or anything the C
decoder refuses, the tolerant parser reads it (and positions the error).

consumerOffset.json, the one that grows with the fleet, has a faster path still for the rows the metadata source
and the audit read (:func:`offset_columns`): a scanner of fastjson's own layout that the caller passes
(``decoding.kernels.scan_offset_table``, compiled; this package stays free of numba) gives each map's name and
entries as arrays (:class:`OffsetScan`) and, for a file as brokers write it, the rows themselves: the maps sorted
by (topic, group) as bytes (Python's order for valid UTF-8, which is checked here), each row's map, queue id and
offset as numpy columns, the names once per map as Arrow strings -- no Python object per offset or per map.
Anything else (a name escaped, without '@' or given twice, queue ids out of order or outside int, a number of
19 digits...) goes the ways above.

Memory: a file is parsed into Python objects (a dict, an int per offset: ~9 times the file's size) only up to
:data:`CONFIG_MEMORY_LIMIT` bytes (``ROCKETMQ_CONFIG_MEMORY_LIMIT`` in the environment, or a caller's ``limit``,
lowers or raises it).  Past it, consumerOffset.json in the broker's layout is still read, as columns
(:func:`offset_columns` with a scanner: memory proportional to the offsets kept, no Python object per offset), up
to :data:`CONFIG_OFFSETS_LIMIT` offsets (counted first in one pass; more: a TOO_LARGE error naming the file, its
size and counts);
any other file, or one the columns cannot be built from, is not parsed: its :class:`ConfigFile` carries a
``TOO_LARGE`` error ("too large to parse within memory: N bytes", naming the file), which the audit reports as a
finding while it checks the rest.  A ``MemoryError`` while parsing is that error too, naming the operation.
Whether the broker can load a consumer-offsets file (:func:`config_load_failure`, the recovery prediction) is
judged in one compiled pass over a read-only map of it that keeps nothing per map or offset
(``offset_scan(buf, check_only=True)``: :class:`OffsetCheck`), never by building its rows.

consumerOffset.json in the broker's layout also streams (:func:`offset_batches`, with a compiled scanner the
caller passes: ``decoding.metadata.scan_offset_stream``): one pass keeps each map's name span, body and count (no
array per offset), the maps are ordered as :func:`offset_columns` orders them, and the rows come a batch of whole
maps at a time from a read-only map of the file -- the same rows in the same order, in memory proportional to
the maps and one batch (a 1 GiB file of 104 M offsets within 3.7 GiB resident, its file pages included:
BENCHMARKS.md).  The metadata table is built from it where the file streams (``decoding.metadata.table_batch``), and
``decoding.metadata.spill_offset_table`` writes it to Parquet a batch at a time.

Values a broker cannot hold are the file's findings, not exceptions: :func:`value_problems` lists each
(``OUT_OF_RANGE`` errors naming the file, the key path and the value) -- a consumer offset outside Java's
long, a queue id or a delay level outside int or not a number -- and the accessors (:func:`consumer_offsets`,
:func:`delay_offsets`) leave those entries out.
"""
from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass
from typing import NamedTuple

from . import layout as L
from .errors import ConfigError, ErrorKind, StoreFormatError
from .fs import ReadOnlyMap, StorePath, UnreadableError, as_path, open_file

CONFIG_FILES = ("consumerOffset.json", "delayOffset.json", "topics.json", "subscriptionGroup.json",
                "consumerFilter.json")
#: The largest config file parsed into Python objects (bytes).  A busy broker's consumerOffset.json reaches a few
#: hundred MB at most: the broker builds the whole file as one String in its heap (fastjson) and rewrites it every
#: 5 s (flushConsumerOffsetInterval), and the project's "busy broker" is 200 MB (bench/bench_metadata.py, 11 M
#: offsets).  Parsed, such a file takes ~9 times its size (1.8 GiB for 200 MB, BENCHMARKS.md "Big metadata"),
#: which the machine auditing that broker can hold; a 1 GiB file took 16 GB.  Past the limit only the offsets'
#: columns are built (memory proportional to the offsets), and any other file is reported as too large.
CONFIG_MEMORY_LIMIT = 256 << 20
CONFIG_MEMORY_LIMIT_ENV = "ROCKETMQ_CONFIG_MEMORY_LIMIT"  # overrides it (bytes), e.g. on a machine with less memory
TOO_LARGE_MESSAGE = "too large to parse within memory: {size} bytes (the limit is {limit}, CONFIG_MEMORY_LIMIT)"
#: The most consumer offsets held whole in memory as one table (as columns, past CONFIG_MEMORY_LIMIT too): ~250
#: bytes an offset on the audit's driver (the table, the lag table), so 32 M offsets (a ~400 MB file) take ~8 GB.
#: Past it a whole-table read (offset_columns, read_consumer_offsets, decoding.metadata.table_batch: the metadata
#: source, compare, replay) is one TOO_LARGE error naming the file, its size and counts, never an out-of-memory (a
#: 1 GiB file of 87 M offsets took more than 13 GB); the audit instead streams such a file (:func:`offset_batches`)
#: into Parquet in its run's partials and reads it a batch at a time (jobs.audit.context.AuditContext.
#: consumer_offset_parts), so it is never skipped for its size.  ``ROCKETMQ_CONFIG_OFFSETS_LIMIT`` changes it.
CONFIG_OFFSETS_LIMIT = 32_000_000
CONFIG_OFFSETS_LIMIT_ENV = "ROCKETMQ_CONFIG_OFFSETS_LIMIT"
TOO_MANY_OFFSETS_MESSAGE = ("too large to read within memory: {size} bytes holding {entries} offsets in {maps} maps, "
                            "more than the limit of {limit} offsets (CONFIG_OFFSETS_LIMIT): its offsets are skipped")
TOPIC_GROUP_SEPARATOR = "@"
_MAX_DEPTH = 200
_WS = " \t\r\n"
_INT_TEXT = re.compile(r"[+-]?[0-9]{1,19}")  # up to Long.MAX_VALUE's 19 digits


class _Parser:
    def __init__(self, text: str, file: str | None):
        self.s, self.i, self.file = text, 0, file
        self._decoder = json.JSONDecoder()

    def fail(self, msg: str):
        raise ConfigError(ErrorKind.BAD_JSON, msg, file=self.file, position=self.i)

    def ws(self):
        s, i = self.s, self.i
        while i < len(s) and s[i] in _WS:
            i += 1
        self.i = i

    def value(self, depth: int):
        if depth > _MAX_DEPTH:
            self.fail("nesting deeper than 200")
        self.ws()
        if self.i >= len(self.s):
            self.fail("unexpected end of file")
        c = self.s[self.i]
        if c == "{":
            return self.obj(depth)
        if c == "[":
            return self.arr(depth)
        try:  # strings, numbers, true/false/null: the standard scanner
            v, end = self._decoder.raw_decode(self.s, self.i)
        except json.JSONDecodeError as e:
            self.i = e.pos
            self.fail(e.msg)
        except ValueError as e:  # e.g. an integer longer than int() accepts (sys.get_int_max_str_digits)
            self.fail(str(e))
        self.i = end
        return v

    def key(self):
        self.ws()
        s, i = self.s, self.i
        if i < len(s) and s[i] == '"':
            return self.value(0)
        j = i
        while j < len(s) and (s[j].isalnum() or s[j] in "-_$."):
            j += 1
        if j == i:
            self.fail("expected a key")
        self.i = j
        bare = s[i:j]
        try:
            return int(bare)
        except ValueError:
            return bare

    def obj(self, depth: int):
        self.i += 1
        out = {}
        self.ws()
        if self.s.startswith("}", self.i):
            self.i += 1
            return out
        while True:
            k = self.key()
            self.ws()
            if not self.s.startswith(":", self.i):
                self.fail("expected ':'")
            self.i += 1
            out[k] = self.value(depth + 1)
            self.ws()
            if self.s.startswith(",", self.i):
                self.i += 1
                self.ws()
                if self.s.startswith("}", self.i):  # tolerate a trailing comma
                    self.i += 1
                    return out
                continue
            if self.s.startswith("}", self.i):
                self.i += 1
                return out
            self.fail("expected ',' or '}'")

    def arr(self, depth: int):
        self.i += 1
        out = []
        self.ws()
        if self.s.startswith("]", self.i):
            self.i += 1
            return out
        while True:
            out.append(self.value(depth + 1))
            self.ws()
            if self.s.startswith(",", self.i):
                self.i += 1
                continue
            if self.s.startswith("]", self.i):
                self.i += 1
                return out
            self.fail("expected ',' or ']'")


def loads(text: str, file: str | None = None):
    fast = _fast_loads(text)
    if fast is not _NO_FAST_PATH:
        return fast
    return _slow_loads(text, file)


def _slow_loads(text: str, file: str | None = None):
    """What the tolerant parser gives: a text of strict JSON nested no deeper than it allows is read by the C decoder
    (the same value: the parser reads strings and numbers with that decoder's scanner, and an object's keys as it
    does, a repeated key's last value in its first place), anything else by the parser (which positions the error).
    Most small config files are strict JSON (topics.json, subscriptionGroup.json): ~20x faster, and a fleet's
    brokers have hundreds of them."""
    if _nesting(text) <= _MAX_DEPTH:  # no deeper than the parser allows (if it is JSON at all)
        try:
            return json.loads(text)
        except ValueError:  # not strict JSON (bare keys, a trailing comma) or not JSON: the parser says which
            pass
    return _tolerant_loads(text, file)


def _nesting(text: str) -> int:
    """How deep ``text``'s objects and arrays nest, where it is strict JSON (the brackets in its strings are not
    structure: :func:`_structure`); for any other text a number that only decides whether the C decoder is tried,
    which then refuses it.  A bound cheaper than the count of every bracket, which sent every config file of more
    than 200 objects (topics.json, subscriptionGroup.json: one an entry) to the tolerant parser, ~20x slower."""
    import numpy as np

    if text.count("{") + text.count("[") <= _MAX_DEPTH:  # a bound already, without a pass
        return 0
    found = _structure(bytearray(text.encode("utf-8", "surrogatepass")))
    if found is None:  # a string left open: not JSON
        return _MAX_DEPTH + 1
    a, structural, _ = found
    kinds = a[structural]
    step = ((kinds == _OPEN) | (kinds == _LBRACKET)).astype(np.int32) - ((kinds == _CLOSE) | (kinds == _RBRACKET))
    return int(np.cumsum(step).max(initial=0))


def _tolerant_loads(text: str, file: str | None = None):
    """The tolerant parser (:class:`_Parser`) over a whole text: the definition of :func:`loads`."""
    p = _Parser(text, file)
    v = p.value(0)
    p.ws()
    if p.i != len(text):
        p.fail("trailing characters after the JSON value")
    return v


_NO_FAST_PATH = object()
_FAST_MIN = 1 << 16  # smaller texts: the tolerant parser is fast enough, and is the definition
_OPEN, _CLOSE, _LBRACKET, _RBRACKET, _COLON, _COMMA, _QUOTE, _BACKSLASH = b"{}[]:,\"\\"
_SPACE = 32
_MAX_DIGITS = 18  # int64 holds every 18-digit integer; a longer one is left to the tolerant parser


def _fast_loads(text: str, min_size: int = _FAST_MIN):
    """:func:`loads` through the fast path (module docstring), or ``_NO_FAST_PATH`` where it steps aside."""
    if len(text) < min_size:
        return _NO_FAST_PATH
    try:
        raw = bytearray(text.encode("utf-8"))
    except UnicodeEncodeError:  # lone surrogates (from a file read with errors="surrogatepass")
        return _NO_FAST_PATH
    return _fast_loads_bytes(raw)


def _fast_loads_bytes(raw: bytearray):
    fast = _scan(raw)
    return _NO_FAST_PATH if fast is None else fast.materialize()


class OffsetScan(NamedTuple):
    """What an ``offset_scan`` (``decoding.kernels.scan_offset_table``) reads of consumerOffset.json in fastjson's
    layout: each map's name span in the file (quotes excluded; ``name_esc``: an escape inside), its first entry
    and entry count; each entry's queue id (``keys``) and offset (``values``), in file order; the value span of
    every other top-level member.  ``rows``, where the file is what brokers write (:func:`_scanned_offset_columns`):
    (the row's map, topics, groups (Arrow strings, one per map, in (topic, group) order), queue ids, offsets)."""

    name_lo: object
    name_hi: object
    name_esc: object
    map_first: object
    map_count: object
    keys: object
    values: object
    other_lo: object
    other_hi: object
    rows: tuple | None = None


class OffsetCheck(NamedTuple):
    """What ``offset_scan(buf, check_only=True)`` (``decoding.kernels.scan_offset_table``) reads of consumerOffset.json
    in fastjson's layout without keeping a row: the counts of maps, entries and names with an escape, the value
    span of every other top-level member, and the first map in file order a broker cannot hold: (its index, its
    name's span, the first queue id outside int, or None for a name that is not topic@group), or None."""

    maps: int
    entries: int
    escaped_names: int
    others: list
    problem: tuple | None


@dataclass
class _Scanned:
    """A file ``offset_scan`` read: its bytes and the scanner's arrays (:func:`_scanned_offset_columns`)."""

    raw: bytes
    found: OffsetScan


@dataclass
class _Fast:
    """A fast-path parse: the decoded tree with each flat Integer-keyed map left as a placeholder (``holders``: the
    container and key of each, in document order) and the maps' entries as int64 columns (``starts``, ``counts``
    per map; ``keys``, ``values`` per entry, in file order)."""

    value: object
    holders: list
    starts: object
    counts: object
    keys: object
    values: object

    def materialize(self):
        """The tree :func:`loads` gives: every placeholder an int-keyed dict (duplicate keys: the last wins)."""
        keys, values = self.keys.tolist(), self.values.tolist()
        for (container, key), a, n in zip(self.holders, self.starts.tolist(), self.counts.tolist()):
            m = dict(zip(keys[a:a + n], values[a:a + n]))
            if container is None:
                return m
            container[key] = m
        return self.value


def _structure(raw):
    """(the bytes as numpy, the positions of the structural bytes outside strings, the positions of the strings'
    quotes), told by the quotes' parity (an escaped quote: an odd run of backslashes before it); None where a string
    is left open."""
    import numpy as np

    a = np.frombuffer(raw, np.uint8)
    interesting = np.flatnonzero(np.frombuffer(raw.translate(_STRUCTURE), np.uint8))  # quotes, structure, in order
    is_quote = a[interesting] == _QUOTE
    if is_quote.any() and raw.find(b"\\") >= 0:
        qi = np.flatnonzero(is_quote)
        for k in qi[a[np.maximum(interesting[qi] - 1, 0)] == _BACKSLASH]:
            q, n = int(interesting[k]), 0
            while q - n - 1 >= 0 and raw[q - n - 1] == _BACKSLASH:
                n += 1
            is_quote[k] = n % 2 == 0
    inside = np.bitwise_xor.accumulate(is_quote.view(np.uint8)).view(bool)  # odd quotes so far: in a string
    if inside[-1:].any():
        return None
    return a, interesting[~is_quote & ~inside], interesting[is_quote]


def _scan(raw: bytearray) -> _Fast | None:
    """The fast path over UTF-8 bytes (rewritten in place), or None where it steps aside: a flat map (no container
    inside) whose keys are bare ASCII integers and whose values are ASCII integers (at most 18 digits, JSON's
    grammar: no leading zero) is parsed with numpy and blanked to a ``[]`` placeholder; the rest of the text must
    then be strict JSON, with no array of its own (a placeholder must not be mistaken), for the C decoder."""
    import numpy as np

    found = _structure(raw)
    if found is None:
        return None
    a, structural, quotes = found
    kinds = a[structural]
    if (kinds == _LBRACKET).any():
        return None  # arrays of its own: a placeholder could not be told from them
    braces = np.flatnonzero((kinds == _OPEN) | (kinds == _CLOSE))
    if not len(braces):
        return None
    depth = np.cumsum(np.where(kinds[braces] == _OPEN, 1, -1))
    if depth.min() < 0 or depth[-1] != 0 or depth.max() > _MAX_DEPTH // 2:
        return None
    # flat maps: an opening brace whose next brace closes it; inside ':' and ',' alternate (k:v(,k:v)*)
    flat = np.flatnonzero((kinds[braces[:-1]] == _OPEN) & (kinds[braces[1:]] == _CLOSE))
    opens, closes = braces[flat], braces[flat + 1]
    counts = closes - opens - 1
    keep = counts > 0
    opens, closes, counts = opens[keep], closes[keep], counts[keep]
    if not len(opens):
        return None
    n_inner = int(counts.sum())
    member = np.repeat(np.arange(len(opens)), counts)
    offset = np.arange(n_inner) - np.repeat(np.cumsum(counts) - counts, counts)
    inner = np.repeat(opens + 1, counts) + offset
    want = np.where(offset % 2 == 0, _COLON, _COMMA).astype(np.uint8)
    shaped = counts % 2 == 1
    shaped[member[kinds[inner] != want]] = False
    del member, offset, inner, want
    opens, closes, counts = opens[shaped], closes[shaped], counts[shaped]
    lo, hi = structural[opens], structural[closes]
    # a map with a string inside (quoted keys or values) is JSON's; the others must hold only integers
    qualified = np.searchsorted(quotes, lo) == np.searchsorted(quotes, hi)
    opens, closes, counts, lo, hi = opens[qualified], closes[qualified], counts[qualified], lo[qualified], hi[qualified]
    if not len(lo):
        return None
    # the delimiters of every qualified map ('{', each ':' and ',', '}'): each slot between two holds one number
    spans = counts + 2
    delims = structural[np.repeat(opens, spans) + (np.arange(int(spans.sum())) - np.repeat(np.cumsum(spans) - spans,
                                                                                           spans))]
    slot_of_delim = np.ones(len(delims), bool)
    slot_of_delim[np.cumsum(spans) - 1] = False  # a map's '}' opens no slot
    members = int(np.count_nonzero(kinds == _COLON))  # of every object, the maps' entries included
    del structural, kinds
    inside = _interiors(len(a), lo, hi)
    nums = np.where(inside, np.frombuffer(raw.translate(_SEPARATORS_TO_SPACE), np.uint8), np.uint8(_SPACE))
    runs = _integer_runs(nums)
    if runs is None or len(runs) != int(slot_of_delim.sum()) or \
            not np.array_equal(np.searchsorted(delims, runs) - 1, np.flatnonzero(slot_of_delim)):
        return None  # an empty slot, two numbers in one ("0:1 2"), a bad integer: the tolerant parser says where
    numbers = np.fromstring(nums.tobytes(), dtype=np.int64, sep=" ")  # C parsing, numbers in file order
    del nums, delims, slot_of_delim
    entries = (counts + 1) // 2
    if len(numbers) != 2 * int(entries.sum()):
        return None
    keys, values = numbers[0::2], numbers[1::2]
    starts_e = np.cumsum(entries) - entries
    # blank each map to "[]" and spaces, in place
    a[inside] = _SPACE
    del inside
    a[hi] = _SPACE
    a[lo] = _LBRACKET
    a[lo + 1] = ord("]")
    del a
    try:
        value = json.loads(raw.decode("utf-8", "replace"))
    except (ValueError, RecursionError):
        return None  # bare keys left (identifiers, nested maps), trailing commas...: the tolerant parser
    holders, kept = _placeholders(value)
    if len(holders) != len(lo) or kept != members - int(entries.sum()):
        return None  # a duplicate key (a placeholder overwritten or misplaced): the tolerant parser keeps its meaning
    return _Fast(value, holders, starts_e, entries, keys, values)


def _placeholders(value) -> tuple[list, int]:
    """(container, key) of every ``[]`` in the decoded tree, in document order ((None, None): the tree is one), and
    how many members its objects hold (fewer than the text's: a key was given twice)."""
    if isinstance(value, list):
        return ([(None, None)] if not value else []), 0
    out, members = [], len(value) if isinstance(value, dict) else 0
    stack = [iter(value.items())] if isinstance(value, dict) else []
    containers = [value]
    while stack:
        for k, v in stack[-1]:
            if type(v) is list:
                out.append((containers[-1], k))
            elif type(v) is dict and v:
                members += len(v)
                stack.append(iter(v.items()))
                containers.append(v)
                break
        else:
            stack.pop()
            containers.pop()
    return out, members


def _interiors(n: int, lo, hi):
    """A mask of the bytes strictly between each lo and hi (sorted, disjoint spans)."""
    import numpy as np

    edges = np.zeros(n + 1, np.int8)
    edges[lo + 1] += 1
    edges[hi] -= 1
    return np.cumsum(edges[:-1], dtype=np.int8).view(bool)


def _integer_runs(nums):
    """Where each number of ``nums`` (digits and '-' separated by spaces: what a qualified map's inside becomes)
    starts, or None unless every one is a JSON integer of at most _MAX_DIGITS digits: '-' only as its first
    character, then a digit; no leading zero."""
    import numpy as np

    token = nums != _SPACE
    if np.count_nonzero(_DIGITS[nums]) + np.count_nonzero(nums == ord("-")) != np.count_nonzero(token):
        return None  # anything but digits and '-' inside (true, 1.5, an identifier): not this fast path
    edge = np.diff(token.view(np.int8), prepend=np.int8(0), append=np.int8(0))
    del token
    starts = np.flatnonzero(edge == 1)
    ends = np.flatnonzero(edge == -1)
    del edge
    if not len(starts):
        return None
    signed = nums[starts] == ord("-")
    first_digit = starts + signed
    if (first_digit >= ends).any() or (ends - first_digit).max() > _MAX_DIGITS:
        return None
    if np.count_nonzero(nums == ord("-")) != int(signed.sum()):
        return None  # a '-' that does not start its number
    if ((nums[first_digit] == ord("0")) & (ends - first_digit > 1)).any():
        return None  # a leading zero: not a JSON number
    return starts


def _tables():
    import numpy as np

    digits = np.zeros(256, bool)
    digits[48:58] = True
    structure = bytes(1 if b in b'{}[]:,"' else 0 for b in range(256))
    separators_to_space = bytes(_SPACE if b in b" \t\r\n:," else b for b in range(256))
    return digits, structure, separators_to_space


_DIGITS, _STRUCTURE, _SEPARATORS_TO_SPACE = _tables()


def dumps_fastjson(obj, indent: int = 0) -> str:
    """fastjson's pretty format: tabs, ``"key":value`` with no space, bare integer keys (byte-exact with
    the broker fixture's config files)."""
    tab = "\t"
    if isinstance(obj, dict):
        if not obj:
            return "{}"
        if all(isinstance(k, int) for k in obj):
            # fastjson writes Integer-keyed maps on one line, closing brace on the next
            inner = ",".join(f"{k}:{dumps_fastjson(v, indent + 1)}" for k, v in obj.items())
            return "{" + inner + "\n" + tab * indent + "}"
        items = []
        for k, v in obj.items():
            key = str(k) if isinstance(k, int) else json.dumps(k, ensure_ascii=False)
            items.append(f"{tab * (indent + 1)}{key}:{dumps_fastjson(v, indent + 1)}")
        return "{\n" + ",\n".join(items) + "\n" + tab * indent + "}"
    if isinstance(obj, list):
        if not obj:
            return "[]"
        return "[\n" + ",\n".join(tab * (indent + 1) + dumps_fastjson(v, indent + 1) for v in obj) + "\n" + \
            tab * indent + "]"
    return json.dumps(obj, ensure_ascii=False)


@dataclass(frozen=True)
class ConfigFile:
    name: str
    data: dict | None  # None when neither the file nor its .bak could be read
    source: str | None  # the file actually used (the .bak on fallback)
    errors: tuple  # ConfigError for each file that failed


def _limit_from_env(name: str, default: int, unit: str) -> int:
    """``$name`` as an int (a positioned BAD_CONFIG error naming it when it is not one), else ``default``."""
    env = os.environ.get(name)
    if not env:
        return default
    try:
        return int(env)
    except ValueError:
        raise ConfigError(ErrorKind.BAD_CONFIG, f"{name}={env!r}: a number of {unit}", field=name) from None


def memory_limit(limit: int | None = None) -> int:
    """The size past which a config file is not parsed into Python objects: ``limit`` if given, else
    ``$ROCKETMQ_CONFIG_MEMORY_LIMIT``, else :data:`CONFIG_MEMORY_LIMIT`."""
    if limit is not None:
        return int(limit)
    return _limit_from_env(CONFIG_MEMORY_LIMIT_ENV, CONFIG_MEMORY_LIMIT, "bytes")


def offsets_limit() -> int:
    """The most consumer offsets read from one file: ``$ROCKETMQ_CONFIG_OFFSETS_LIMIT``, else
    :data:`CONFIG_OFFSETS_LIMIT`."""
    return _limit_from_env(CONFIG_OFFSETS_LIMIT_ENV, CONFIG_OFFSETS_LIMIT, "offsets")


def _scan_offsets(offset_scan, raw, file: str):
    """``offset_scan(raw)``, counted first by its one-pass check: a file holding more offsets than
    :func:`offsets_limit` is its TOO_LARGE error (raised), its columns never built."""
    counted = offset_scan(raw, check_only=True)
    limit = offsets_limit()
    if counted is not None and counted.entries > limit:
        raise ConfigError(ErrorKind.TOO_LARGE, TOO_MANY_OFFSETS_MESSAGE.format(
            size=len(raw), entries=counted.entries, maps=counted.maps, limit=limit), file=file)
    return offset_scan(raw)


def too_large(file: str, size: int, limit: int) -> ConfigError:
    """The error of a file past the limit (:data:`TOO_LARGE_MESSAGE`)."""
    return ConfigError(ErrorKind.TOO_LARGE, TOO_LARGE_MESSAGE.format(size=size, limit=limit), file=file)


def out_of_memory(file: str, size: int | None, operation: str) -> ConfigError:
    """A ``MemoryError`` met while ``operation`` (e.g. "parsing it"), as the file's TOO_LARGE error."""
    return ConfigError(ErrorKind.TOO_LARGE, f"ran out of memory {operation}" + ("" if size is None else
                                                                                 f" ({size} bytes)"), file=file)


_TOO_LARGE_SIZE = re.compile(r"too large to (?:parse|read) within memory: (\d+) bytes|"
                             r"ran out of memory [^(;]*\((\d+) bytes\)")


def too_large_size(error: str | None) -> int | None:
    """The file size a TOO_LARGE error's text names, past the limit or out of memory (None for another error)."""
    m = _TOO_LARGE_SIZE.search(error or "")
    return int(m.group(1) or m.group(2)) if m else None


def file_size(path) -> int | None:
    """A config file's size, for an error that names it (None when it cannot be asked)."""
    try:
        p = as_path(path)
        return p.loc.info().size if isinstance(p, StorePath) else os.stat(p).st_size
    except (OSError, StoreFormatError, AttributeError):
        return None


def _read_limited(candidate, limit: int | None) -> tuple[int, bytes | None]:
    """(size, bytes) of a config file; bytes None when it is larger than ``limit`` (then not read at all)."""
    with open_file(candidate) as f:  # a FIFO, a device, a folder, a loop, no permission: unreadable
        try:
            size = f.size() if isinstance(candidate, StorePath) else os.fstat(f.fileno()).st_size
            if limit is not None and size > limit:
                return size, None
            raw = f.read()
            return len(raw), raw  # what was read (a file growing or shrinking under the read: its bytes)
        except OSError as e:
            raise UnreadableError(candidate, e.strerror or str(e)) from None


def read_config(config_dir: str | os.PathLike, name: str, *, limit: int | None = None) -> ConfigFile:
    """Read ``name`` like ``ConfigManager.load``: the main file, else ``name.bak``.  A file larger than
    :func:`memory_limit` is not parsed: its TOO_LARGE error, and no fallback (the broker would load it)."""
    return _read_config(config_dir, name, limit=limit)[0]


def read_config_file(path: str | os.PathLike, *, limit: int | None = None) -> dict:
    """One config file a user names (e.g. ``write --topics``), parsed as :func:`read_config` parses one, without the
    ``.bak`` fallback (that is the broker's start, not the user's choice): its data, or its positioned error
    (unreadable, too large to parse within memory, not JSON, not an object) raised."""
    limit = memory_limit(limit)
    try:
        size, raw = _read_limited(as_path(path), limit)
    except UnreadableError as e:
        raise ConfigError(ErrorKind.UNREADABLE, e.reason, file=str(path)) from None
    if raw is None:
        raise too_large(str(path), size, limit)
    errors: list = []
    parsed = _parse(os.path.basename(path), str(path), raw, errors, False, None)
    if parsed is None:
        raise errors[0]
    return parsed[0]


def _read_config(config_dir, name: str, keep_fast: bool = False, offset_scan=None,
                 limit: int | None = None) -> tuple[ConfigFile, _Fast | None]:
    """:func:`read_config`; with ``keep_fast``, a file the fast path read comes back unmaterialized: (a ConfigFile
    whose data is None, the parse) -- for :func:`offset_columns`, which needs no Python object per offset, and
    may pass ``offset_scan`` (:func:`_offset_fast`): a file past the limit is read only by it."""
    d = as_path(config_dir)
    limit = memory_limit(limit)
    errors = []
    for candidate in (d / name, d / f"{name}.bak"):
        if not candidate.exists() and not candidate.is_symlink():
            continue
        try:
            size, raw = _read_limited(candidate, limit if offset_scan is None else None)
        except UnreadableError as e:
            errors.append(ConfigError(ErrorKind.UNREADABLE, e.reason, file=str(candidate)))
            continue
        except MemoryError:
            errors.append(out_of_memory(str(candidate), file_size(candidate), "reading it"))
            break
        if candidate.name == name and raw is not None and size and raw.strip() in (b"", b"null"):
            # not empty, so ConfigManager.load() decodes it rather than the .bak: fastjson gives null, decode() does
            # nothing, and the broker starts with an empty table (the .bak is never read)
            return ConfigFile(name, {}, str(candidate), ()), None
        try:
            if size > limit:  # the offsets' scanner alone, or not at all; and no .bak (the broker loads this one)
                found = _scan_offsets(offset_scan, raw, str(candidate)) if offset_scan is not None else None
                if found is None:
                    errors.append(too_large(str(candidate), size, limit))
                    break
                return ConfigFile(name, None, str(candidate), tuple(errors)), _Scanned(raw, found)
            parsed = _parse(name, str(candidate), raw, errors, keep_fast, offset_scan)
        except MemoryError:
            raw = None
            errors.append(out_of_memory(str(candidate), size, "parsing it"))
            break
        raw = None
        if parsed is not None:
            return ConfigFile(name, parsed[0], str(candidate), tuple(errors)), parsed[1]
    return ConfigFile(name, None, None, tuple(errors)), None


def config_load_failure(config_dir, name: str, decode_problem=None, offset_scan=None) -> str | None:
    """Why the broker's ``ConfigManager.load()`` of ``name`` returns false (the broker does not start), or None when it
    loads.  ``ConfigManager.load`` (4.9.7 and 5.3.3) reads the file with ``MixAll.file2String``: missing, empty or
    failing to decode, it falls back to ``loadBak``, which returns true for a missing or empty ``.bak`` (the broker
    starts with nothing from the file) and false for one that fails to decode.  So the load fails only when the file
    fails (or is missing or empty) and its ``.bak`` is there, not empty, and fails too.  The ``.bak`` is read first:
    in a healthy store it decodes, and the file itself need not be read again.

    Decoding fails where fastjson throws: text the tolerant parser refuses (:func:`loads`), a top level that is not
    an object (``null`` and blank text decode to nothing, which loads), a value the broker cannot hold
    (:func:`value_problems`), a table that is not a map; ``decode_problem(data)`` adds a file's own rules (its
    class's fields: :func:`store_format.timer.timer_metrics_decode_problem`).  A file that cannot be read here, or is
    too large to parse within memory, is not judged (None).  ``offset_scan``: the compiled scanner
    :func:`offset_columns` takes, for the consumer offsets (a busy broker's hold millions: read as columns)."""
    d = as_path(config_dir)
    bak = _judged(d / f"{name}.bak", name, decode_problem, offset_scan)
    if bak is None:
        return None
    main = _judged(d / name, name, decode_problem, offset_scan)
    if main is None:
        return None
    return f"{name} {main}, and {name}.bak {bak}: ConfigManager.load() falls back to the .bak and loadBak() fails"


def _judged(path, name: str, decode_problem, offset_scan) -> str | None:
    """:func:`_decode_failure`; None (not judged, as a file too large to parse) where it runs out of memory: the
    metadata family names the file and its size (decoding.metadata's error row), the prediction goes on."""
    try:
        return _decode_failure(path, name, decode_problem, offset_scan)
    except MemoryError:
        return None


def _decode_failure(path, name: str, decode_problem, offset_scan=None) -> str | None:
    """How ``path`` fails ``ConfigManager``'s read and decode ("is missing", "is empty", "does not decode: ..."), or
    None when it loads -- for a ``.bak``, when ``loadBak`` returns true (missing and empty load as nothing)."""
    bak = path.name.endswith(".bak")
    if not path.exists() and not path.is_symlink():
        return None if bak else "is missing"
    if name in _OFFSET_FILES:  # the offsets checked in one pass, else as columns: no Python object per offset
        checked = _offsets_load_check(path, name, offset_scan)
        if checked is _NOT_CHECKED:
            problems: list = []
            try:
                cfg_cols = offset_columns(path.parent, problems, name=path.name, offset_scan=offset_scan)
            except StoreFormatError:
                cfg_cols = None
            if cfg_cols is not None and cfg_cols[0].source == str(path) and (name == "consumerOffset.json" or
                                                                             problems):
                return _undecodable(problems[0]) if problems else None
        elif checked is not _GENERAL_PATH:
            return checked
    try:
        size, raw = _read_limited(path, memory_limit())
    except (UnreadableError, MemoryError):
        return None  # not judged here: the broker (its own user) may read it
    if raw is None:
        return None  # too large to parse within memory: not judged
    if not size:
        return None if bak else "is empty"
    errors: list = []
    try:
        parsed = _parse(name, str(path), raw, errors, False, None) if raw.strip() else ({}, None)
    except MemoryError:
        return None
    if parsed is None:
        if raw.strip() == b"null":
            return None  # fastjson decodes it to null: decode() does nothing, the load succeeds
        e = errors[-1] if errors else None
        at = f"byte {e.position}: " if e is not None and e.position is not None else ""
        return f"does not decode ({at}{e.message if e is not None else 'not JSON'})"
    cfg = ConfigFile(name, parsed[0], str(path), ())
    problems = value_problems(cfg)
    try:
        problems += [ConfigError(ErrorKind.BAD_CONFIG, why) for why in [decode_problem(cfg.data)] if why] \
            if decode_problem else []
        for table in _TABLES_OF.get(name, ()):
            _table(cfg, table)
    except ConfigError as e:
        problems.append(e)
    return _undecodable(problems[0]) if problems else None


_NOT_CHECKED, _GENERAL_PATH = object(), object()


def _offsets_load_check(path, name: str, offset_scan):
    """:func:`_decode_failure` of a consumer-offsets file through ``offset_scan``'s check (``check_only``) over a
    read-only map of it: memory constant, whatever the file's size (a 1 GiB file took more than 13 GB as columns),
    where the columns :func:`offset_columns` would build decide -- the file at least the fast path's 64 KiB, in
    the broker's layout, no name escaped.  The answer (None when it loads), or ``_GENERAL_PATH``:
    lmqConsumerOffset.json without a problem here, which the parse of the whole file judges (within the limit),
    or ``_NOT_CHECKED``: offset_columns says.  The problem named is the first in file order, as fastjson meets it
    (offset_columns names it so too, but for a map given twice, which it leaves to the whole file's parse)."""
    if offset_scan is None:
        return _NOT_CHECKED
    try:
        with ReadOnlyMap(path) as m:
            size = len(m)
            if size < _FAST_MIN:
                return _NOT_CHECKED  # the parse reads it (offset_columns does not)
            found = offset_scan(m.buf, check_only=True)
            if found is not None and not found.escaped_names:
                others = [bytes(m.buf[lo:hi]) for lo, hi in found.others]
                problem = found.problem
                key = None if problem is None else bytes(m.buf[problem[1]:problem[2]]).decode("utf-8", "replace")
    except (UnreadableError, OSError, MemoryError):
        return _NOT_CHECKED  # offset_columns reads it as it can, or says why not
    past = size > memory_limit()
    if found is None or found.escaped_names:  # past the limit the columns are the scanner's alone: none here
        return None if past and found is None else _NOT_CHECKED
    try:
        for text in others:  # dataVersion: read as in the whole file
            loads(text.decode("utf-8", "replace"))
    except (ConfigError, ValueError, RecursionError):
        return None if past else _NOT_CHECKED
    if problem is None:
        return None if name == "consumerOffset.json" else _GENERAL_PATH
    problems: list = []
    cfg = ConfigFile(name, None, str(path), ())
    if problem[3] is None:
        _problem(problems, cfg, ("offsetTable", key), key, "not topic@group")
    else:
        _problem(problems, cfg, ("offsetTable", key, problem[3]), problem[3],
                 f"queue id is outside Java's int range [{INT_RANGE[0]}, {INT_RANGE[1]}]")
    return _undecodable(problems[0])


def _undecodable(e: ConfigError) -> str:
    """What fastjson refuses in a parsed file, as :func:`_decode_failure` says it."""
    return f"does not decode ({e.field + ': ' if e.field else ''}{e.message})"


def _parse(name: str, file: str, raw: bytes, errors: list, keep_fast: bool, offset_scan):
    """One candidate's bytes: (data, None), or (None, the unmaterialized parse) for ``keep_fast``; None when it does
    not parse (its error added to ``errors``: the caller tries the ``.bak``)."""
    fast = None
    if len(raw) >= _FAST_MIN:
        found = _scan_offsets(offset_scan, raw, file) if offset_scan is not None else None
        if found is not None:  # the scanner's arrays, for offset_columns to build from (it alone passes one)
            return None, _Scanned(raw, found)
        fast = _scan(bytearray(raw))
    if fast is not None:
        del raw
        if keep_fast and isinstance(fast.value, dict):
            return None, fast
        data = fast.materialize()
        if isinstance(data, dict):
            return data, None
        errors.append(ConfigError(ErrorKind.BAD_JSON, "top level is not an object", file=file))
        return None
    text = raw.decode("utf-8", "replace")
    del raw
    if not text.strip():
        errors.append(ConfigError(ErrorKind.BAD_JSON, "empty file", file=file, position=0))
        return None
    try:
        data = _slow_loads(text, file)
    except ConfigError as e:
        errors.append(e)
        return None
    if not isinstance(data, dict):
        errors.append(ConfigError(ErrorKind.BAD_JSON, "top level is not an object", file=file))
        return None
    return data, None


def _scanned_offset_columns(raw: bytes, found: OffsetScan, cfg: ConfigFile):
    """:func:`offset_columns`' result from ``offset_scan``'s rows when the file is what brokers write (every key
    topic@group without an escape and given once, each map's queue ids ascending and within int: the scanner
    built the rows then, the maps in (topic, group) order of their bytes), the names valid UTF-8 (for which that
    order is Python's) and the other top-level members readable.  None for anything else (the general path then
    says what is wrong with it)."""
    if found.rows is None or not _others_read(raw, found):
        return None
    row_map, topics, groups, qid, offset = found.rows
    if not raw.isascii() and not (_valid_utf8(topics) and _valid_utf8(groups)):
        return None  # the exact path reads invalid bytes as U+FFFD, in another order
    return cfg, {"map": row_map, "topics": topics, "groups": groups, "queue_id": qid, "offset": offset}


def _valid_utf8(names) -> bool:
    """Every string of an Arrow string array (built from raw bytes) valid UTF-8, as Python's decoder has it."""
    import numpy as np

    off = np.frombuffer(names.buffers()[1], np.int32, len(names) + 1)
    data = np.frombuffer(names.buffers()[2] or b"", np.uint8)
    high = np.concatenate([[0], np.cumsum(data >= 0x80)])[off]  # only names with non-ASCII bytes need decoding
    try:
        for k in np.flatnonzero(np.diff(high)).tolist():
            data[off[k]:off[k + 1]].tobytes().decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


def _offset_fast(raw: bytes, found) -> _Fast | None:
    """``offset_scan``'s arrays (:func:`offset_columns`) as the fast path's parse of the file, for the general
    post-processing of a file :func:`_scanned_offset_columns` does not build (a map given twice, queue ids out of
    order or outside int, a key that is not topic@group); None where the other members or a name do not read."""
    names = _scanned_names(raw, found)
    if names is None:
        return None
    table = {n: [] for n in names}  # the fast path's placeholder for a flat Integer-keyed map
    return _Fast({"offsetTable": table}, [(table, n) for n in names], *found[3:7])


def _scanned_names(raw: bytes, found: OffsetScan) -> list[str] | None:
    """The maps' names as the C decoder reads them (the file decoded with errors replaced, then the escapes), once
    the other top-level members are known to read as in the whole file (:func:`loads`); None if one does not."""
    if not _others_read(raw, found):
        return None
    try:
        return [json.loads(f'"{raw[lo:hi].decode("utf-8", "replace")}"') if esc else raw[lo:hi].decode("utf-8", "replace")
                for lo, hi, esc in zip(found.name_lo.tolist(), found.name_hi.tolist(), found.name_esc.tolist())]
    except (ValueError, RecursionError):
        return None


def _others_read(raw: bytes, found: OffsetScan) -> bool:
    """The top-level members beside offsetTable (5.x's dataVersion) read as in the whole file (:func:`loads`)."""
    try:
        for lo, hi in zip(found.other_lo.tolist(), found.other_hi.tolist()):
            loads(raw[lo:hi].decode("utf-8", "replace"))
    except (ConfigError, ValueError, RecursionError):
        return False
    return True


def offset_columns(config_dir, problems: list, name: str = "consumerOffset.json", offset_scan=None, *,
                   limit: int | None = None):
    """consumerOffset.json's offsets as columns, in memory proportional to the offsets (no Python object per
    offset): (ConfigFile without data, {"map": each row's map (int32), "topics", "groups": each map's (Arrow
    strings), "queue_id" (int32), "offset" (int64)}), the rows sorted by topic, group, queue id
    (a queue id given twice: the last one, as the dict would keep), entries a broker cannot hold recorded in
    ``problems`` and left out.  None when the fast path does not read the file or its offsetTable holds anything but
    flat Integer-keyed maps: then :func:`consumer_offsets` of :func:`read_config` gives the same rows.
    ``offset_scan``: a one-pass scanner of the file's usual layout to try first (:func:`_offset_fast`); a file past
    :func:`memory_limit` is read by it alone (None when it cannot: :func:`read_config` then says it is too large).
    A ``MemoryError`` on the way is the file's TOO_LARGE :class:`ConfigError`, naming what ran out."""
    cfg, fast = _read_config(config_dir, name, keep_fast=True, offset_scan=offset_scan, limit=limit)
    if fast is None:
        return None
    try:
        return _offset_columns(cfg, fast, problems, memory_limit(limit))
    except MemoryError:
        fast = None
        raise out_of_memory(cfg.source, file_size(cfg.source), "building its offset columns") from None


def _offset_columns(cfg: ConfigFile, fast, problems: list, limit: int):
    import numpy as np
    import pyarrow as pa

    if isinstance(fast, _Scanned):
        built = _scanned_offset_columns(fast.raw, fast.found, ConfigFile(cfg.name, None, cfg.source, cfg.errors))
        if built is not None:
            return built
        scanned = fast
        fast = _offset_fast(scanned.raw, scanned.found)
        if fast is None and len(scanned.raw) <= limit:  # the fast path's parse: Python objects, within the limit
            fast = _scan(bytearray(scanned.raw))
        if fast is None:
            return None
    table = fast.value.get("offsetTable")
    if not isinstance(table, dict) or any(type(v) is not list for v in table.values()):
        return None  # an empty or unusual entry: the dict path says what it is
    mine = [i for i, (c, _) in enumerate(fast.holders) if c is table]
    if len(mine) != len(table):
        return None
    names = [str(fast.holders[i][1]).rpartition(TOPIC_GROUP_SEPARATOR) for i in mine]
    maps = np.array(mine, np.int64)
    counts = fast.counts[maps]
    entry_map = np.repeat(np.arange(len(mine)), counts)
    entry = np.repeat(fast.starts[maps], counts) + (np.arange(int(counts.sum())) - np.repeat(np.cumsum(counts) - counts,
                                                                                            counts))
    qid, offset = fast.keys[entry], fast.values[entry]
    same = entry_map[1:] == entry_map[:-1]
    if (qid[1:][same] > qid[:-1][same]).all():  # fastjson's own order: ascending, no queue id twice
        m, q, o, first_at = entry_map, qid, offset, entry
    else:  # each (map, queue id) once, as a dict keeps it: the last value, at the first one's place
        sort = np.lexsort((entry, qid, entry_map))
        m, q, o, at = entry_map[sort], qid[sort], offset[sort], entry[sort]
        head = np.ones(len(m), bool)
        head[1:] = (m[1:] != m[:-1]) | (q[1:] != q[:-1])
        groups = np.cumsum(head) - 1
        last = np.zeros(len(m), bool)
        last[np.r_[np.flatnonzero(head)[1:] - 1, len(m) - 1] if len(m) else []] = True
        m, q, o, first_at = m[last], q[last], o[last], at[head][groups[last]]
    del same
    # what no broker holds: a key that is not topic@group, a queue id outside int (in file order)
    found = [((int(i), -1), ("offsetTable", fast.holders[mine[i]][1]), fast.holders[mine[i]][1], "not topic@group")
             for i in range(len(mine)) if not names[i][1]]
    named = np.array([bool(n[1]) for n in names], bool)
    outside = (q < INT_RANGE[0]) | (q > INT_RANGE[1])
    for k in np.flatnonzero(outside & named[m]).tolist():
        key = fast.holders[mine[int(m[k])]][1]
        found.append(((int(m[k]), int(first_at[k])), ("offsetTable", key, int(q[k])), int(q[k]),
                      f"queue id is outside Java's int range [{INT_RANGE[0]}, {INT_RANGE[1]}]"))
    cfg = ConfigFile(cfg.name, None, cfg.source, cfg.errors)
    for _, path, value, why in sorted(found, key=lambda f: f[0]):
        _problem(problems, cfg, path, value, why)
    order = sorted(np.flatnonzero(named).tolist(), key=lambda i: (names[i][0], names[i][2]))
    keep = ~outside
    m, q, o = m[keep], q[keep], o[keep]
    # entries map by map, the maps in (topic, group) order, each map's entries by queue id (already so)
    per_map = np.bincount(m, minlength=len(mine))
    first = np.cumsum(per_map) - per_map
    chosen = np.array(order, np.int64)
    sizes = per_map[chosen]
    take = np.repeat(first[chosen], sizes) + (np.arange(int(sizes.sum())) - np.repeat(np.cumsum(sizes) - sizes, sizes))
    r, qid, offset = np.repeat(np.arange(len(chosen)), sizes), q[take], o[take]
    ordered = [(names[i][0], names[i][2]) for i in order]
    return cfg, {"map": r.astype(np.int32), "topics": pa.array([t for t, _ in ordered], pa.string()),
                 "groups": pa.array([g for _, g in ordered], pa.string()), "queue_id": qid.astype(np.int32),
                 "offset": offset}


#: Rows per batch of a streamed consumerOffset.json (:func:`offset_batches`): ~1.3 MB of columns per 64 Ki rows
#: beside the names, so the driver holds a few MB of rows at a time whatever the file's size.
OFFSET_BATCH_ROWS = 1 << 20


class OffsetStream(NamedTuple):
    """A consumer-offsets file read as a stream (:func:`offset_batches`): the file used, its size, its counts, and
    ``batches``: a generator of the rows a batch of maps at a time, each batch what :func:`offset_columns` gives
    for its maps ({"map", "topics", "groups", "queue_id", "offset"}: ``map`` indexes the batch's own names), the
    maps in (topic, group) order as :func:`offset_columns` orders them.  The file stays mapped until the generator
    ends or is closed."""

    source: str
    size: int
    maps: int
    entries: int
    batches: object


def offset_batches(config_dir, offset_stream, batch_rows: int = OFFSET_BATCH_ROWS,
                   name: str = "consumerOffset.json") -> OffsetStream | None:
    """consumerOffset.json (or, when it is missing, its ``.bak``) as batches of rows, in memory proportional to its
    maps and one batch, never to its offsets -- the same rows, in the same order, as :func:`offset_columns` where
    the file is what brokers write: every key topic@group without an escape and given once, each map's queue ids
    ascending within int, the names valid UTF-8, the other top-level members readable, at least the fast path's
    64 KiB.  ``offset_stream(buf, batch_rows)`` (``decoding.metadata.scan_offset_stream``, compiled; this package stays
    free of numba) reads a read-only map of the file: (maps, entries, other members' spans, a generator of
    batches) or None.  None for any other file (missing, unreadable, another shape): :func:`offset_columns` and
    :func:`read_config` then read it as they can, or say why not."""
    d = as_path(config_dir)
    for candidate in (d / name, d / f"{name}.bak"):
        if not candidate.exists() and not candidate.is_symlink():
            continue
        try:
            m = ReadOnlyMap(candidate)
        except (UnreadableError, OSError):
            return None
        try:
            size = len(m)
            found = offset_stream(m.buf, batch_rows) if size >= _FAST_MIN else None
            if found is None or not _members_read(m.buf, found[2]):
                m.close()
                return None
        except BaseException:
            m.close()
            raise
        return OffsetStream(str(candidate), size, found[0], found[1], _closing(found[3], m))
    return None


def _members_read(buf, spans) -> bool:
    """The top-level members beside offsetTable (5.x's dataVersion) read as in the whole file (:func:`loads`)."""
    try:
        for lo, hi in spans:
            loads(bytes(buf[lo:hi]).decode("utf-8", "replace"))
    except (ConfigError, ValueError, RecursionError):
        return False
    return True


class ClosingIterator:
    """An iterator that calls ``close`` once it ends, fails or is closed, started or not (a generator closed before
    its first item never runs its ``finally``): a mapped file's batches unmap it so."""

    def __init__(self, items, close):
        self._items, self._close = iter(items), close

    def __iter__(self):
        return self

    def __next__(self):
        try:
            return next(self._items)
        except BaseException:
            self.close()
            raise

    def close(self) -> None:
        close, self._close = self._close, None
        if close is not None:
            getattr(self._items, "close", lambda: None)()
            close()


def _closing(batches, m) -> ClosingIterator:
    """``batches``, then the map closed (also when the consumer stops early)."""
    return ClosingIterator(batches, m.close)


INT_RANGE = L.JAVA_INT  # java.lang.Integer: queue ids, delay levels, queue counts
LONG_RANGE = L.JAVA_LONG  # java.lang.Long: offsets, broker ids
_JAVA = {INT_RANGE: "int", LONG_RANGE: "long"}
# numeric fields of topics.json / subscriptionGroup.json entries and their Java types
TOPIC_INT_FIELDS = ("readQueueNums", "writeQueueNums", "perm", "topicSysFlag")
GROUP_FIELDS = {"retryQueueNums": INT_RANGE, "retryMaxTimes": INT_RANGE, "brokerId": LONG_RANGE,
                "whichBrokerWhenConsumeSlowly": LONG_RANGE}


def consumer_offsets(cfg: ConfigFile, problems: list | None = None) -> dict[tuple[str, str], dict[int, int]]:
    """consumerOffset.json -> {(topic, group): {queue_id: next offset to consume}}.  Entries a broker cannot hold
    (a queue id outside int or not a number, an offset outside long or not a number, a key that is not
    topic@group) are left out and, with ``problems`` (a list), recorded there (:func:`value_problems`)."""
    out = {}
    for key, table in _table(cfg, "offsetTable").items():
        topic, sep, group = str(key).rpartition(TOPIC_GROUP_SEPARATOR)
        if not sep or not isinstance(table, dict):
            _problem(problems, cfg, ("offsetTable", key), key if not sep else table,
                     "not topic@group" if not sep else "not a map of queue ids to offsets")
            continue
        if _ints_within(table.keys(), INT_RANGE) and _ints_within(table.values(), LONG_RANGE):
            out[(topic, group)] = dict(table)  # the common case, checked in bulk
            continue
        kept = {}
        for q, o in table.items():
            if _checked(problems, cfg, ("offsetTable", key, q), q, INT_RANGE, "queue id", key=True) and \
                    _checked(problems, cfg, ("offsetTable", key, q), o, LONG_RANGE, "offset"):
                kept[_as_int(q)] = _as_int(o)
        out[(topic, group)] = kept
    return out


class ConsumerOffsets(NamedTuple):
    """What :func:`read_consumer_offsets` read: the offsets, and whether the file (or its ``.bak``) parsed at all."""

    table: dict[tuple[str, str], dict[int, int]]  # (topic, group) -> {queue id: committed offset}
    readable: bool  # False: missing, unreadable or not JSON (its errors are the ConfigFile's)


def read_consumer_offsets(config_dir, problems: list | None = None, offset_scan=None) -> ConsumerOffsets:
    """:func:`consumer_offsets` of the store's consumerOffset.json (or its ``.bak``), through
    :func:`offset_columns` when it reads the file (with ``offset_scan``: seconds for a file of hundreds of MB),
    else through :func:`read_config`; the same either way, and the file is read once."""
    found: list = []
    cols = offset_columns(config_dir, found, offset_scan=offset_scan)
    if cols is None:
        cfg = read_config(config_dir, "consumerOffset.json")
        return ConsumerOffsets(consumer_offsets(cfg, problems), cfg.data is not None)
    if problems is not None:
        problems.extend(found)
    import numpy as np

    table = cols[1]
    per_map = np.bincount(table["map"], minlength=len(table["topics"])).tolist()
    qids, offsets = table["queue_id"].tolist(), table["offset"].tolist()
    out, at = {}, 0
    for topic, group, n in zip(table["topics"].to_pylist(), table["groups"].to_pylist(), per_map):
        out[(topic, group)] = dict(zip(qids[at:at + n], offsets[at:at + n]))
        at += n
    return ConsumerOffsets(out, True)


LMQ_CONSUMER_OFFSET_FILE = "lmqConsumerOffset.json"  # 5.x, enableLmq (BrokerPathConfigHelper)

_OFFSET_FILES = ("consumerOffset.json", LMQ_CONSUMER_OFFSET_FILE)  # read as columns where the fast path can
#: the maps each config file's class holds (fastjson fails on another JSON type there; it ignores other members)
_TABLES_OF = {"topics.json": ("topicConfigTable",), "subscriptionGroup.json": ("subscriptionGroupTable",),
              "consumerOffset.json": ("offsetTable",), "delayOffset.json": ("offsetTable",),
              LMQ_CONSUMER_OFFSET_FILE: ("offsetTable", "lmqOffsetTable")}


def lmq_consumer_offsets(cfg: ConfigFile, problems: list | None = None) -> dict[tuple[str, str], int]:
    """lmqConsumerOffset.json's ``lmqOffsetTable`` (``LmqConsumerOffsetManager``) -> {(topic, group): offset}: one
    offset per LMQ topic@group (queue id 0 implied).  The file's inherited ``offsetTable`` reads with
    :func:`consumer_offsets`.  A key that is not topic@group or an offset outside long is left out and recorded in
    ``problems``."""
    out = {}
    for key, value in _table(cfg, "lmqOffsetTable").items():
        topic, sep, group = str(key).rpartition(TOPIC_GROUP_SEPARATOR)
        if not sep:
            _problem(problems, cfg, ("lmqOffsetTable", key), key, "not topic@group")
            continue
        if _checked(problems, cfg, ("lmqOffsetTable", key), value, LONG_RANGE, "offset"):
            out[(topic, group)] = _as_int(value)
    return out


def delay_offsets(cfg: ConfigFile, problems: list | None = None) -> dict[int, int]:
    """delayOffset.json -> {delay level: next SCHEDULE_TOPIC_XXXX queue offset to deliver}; a level outside int
    or not a number, an offset outside long: left out, and recorded in ``problems``."""
    out = {}
    for k, v in _table(cfg, "offsetTable").items():
        if _checked(problems, cfg, ("offsetTable", k), k, INT_RANGE, "delay level", key=True) and \
                _checked(problems, cfg, ("offsetTable", k), v, LONG_RANGE, "offset"):
            out[_as_int(k)] = _as_int(v)
    return out


def value_problems(cfg: ConfigFile) -> list[ConfigError]:
    """Every value of a config file that the broker cannot hold, as ``OUT_OF_RANGE`` errors (file, key path,
    value): offsets outside long, queue ids, delay levels and queue counts outside int, numbers that are not
    numbers.  A table that is not a map is :func:`_table`'s error, not one of these; never raises."""
    problems: list[ConfigError] = []
    if cfg.data is None:
        return problems
    try:
        if cfg.name == "consumerOffset.json":
            consumer_offsets(cfg, problems)
        elif cfg.name == "delayOffset.json":
            delay_offsets(cfg, problems)
        elif cfg.name == LMQ_CONSUMER_OFFSET_FILE:
            consumer_offsets(cfg, problems)
            lmq_consumer_offsets(cfg, problems)
        elif cfg.name == "topics.json":
            for name, c in topic_configs(cfg).items():
                if isinstance(c, dict):
                    for f in TOPIC_INT_FIELDS:
                        number(c, f, INT_RANGE, problems, cfg, ("topicConfigTable", name, f))
        elif cfg.name == "subscriptionGroup.json":
            for name, c in subscription_groups(cfg).items():
                if isinstance(c, dict):
                    for f, bounds in GROUP_FIELDS.items():
                        number(c, f, bounds, problems, cfg, ("subscriptionGroupTable", name, f))
    except ConfigError:
        pass
    return problems


def number(entry: dict, field: str, bounds: tuple[int, int], problems: list | None = None,
           cfg: ConfigFile | None = None, path: tuple = ()) -> int | None:
    """``entry[field]`` when it is an integer within ``bounds`` (a Java int or long); None when absent, and None
    with a problem recorded when it is out of range or not a number."""
    v = entry.get(field)
    if v is None:
        return None
    if _checked(problems, cfg, path or (field,), v, bounds, field):
        return _as_int(v)
    return None


def _ints_within(values, bounds: tuple[int, int]) -> bool:
    """Every value a plain int within ``bounds`` (no bool, no numeric text): checked in bulk."""
    values = list(values)
    return all(type(v) is int for v in values) and (not values or (bounds[0] <= min(values)
                                                                    and max(values) <= bounds[1]))


def _checked(problems, cfg, path, v, bounds, what: str, key: bool = False) -> bool:
    if not _is_int(v):
        _problem(problems, cfg, path, v, f"{what} is not a number")
        return False
    n = _as_int(v)
    if not bounds[0] <= n <= bounds[1]:
        _problem(problems, cfg, path, v, f"{what} is outside Java's {_JAVA[bounds]} range "
                                         f"[{bounds[0]}, {bounds[1]}]")
        return False
    return True


def _problem(problems, cfg, path, value, why: str) -> None:
    if problems is None:
        return
    key, text = "/".join(str(p) for p in path), value_text(value)
    e = ConfigError(ErrorKind.OUT_OF_RANGE, f"{text}: {why}", file=cfg.source if cfg is not None else None, field=key)
    e.value_text = text
    problems.append(e)


def value_text(v, limit: int = 48) -> str:
    """A config value as the file shows it, shortened (an integer of thousands of digits says how long)."""
    if isinstance(v, int) and not isinstance(v, bool) and v.bit_length() > 160:
        return f"<an integer of {len(str(v))} digits>"
    text = json.dumps(v, ensure_ascii=False, default=str) if not isinstance(v, str) else json.dumps(v, ensure_ascii=False)
    return text if len(text) <= limit else text[:limit - 3] + "..."


def topic_configs(cfg: ConfigFile) -> dict[str, dict]:
    return dict(_table(cfg, "topicConfigTable"))


def subscription_groups(cfg: ConfigFile) -> dict[str, dict]:
    return dict(_table(cfg, "subscriptionGroupTable"))


def _table(cfg: ConfigFile, name: str) -> dict:
    """A top-level map of a config file ({} when absent); any other JSON type there is a positioned error."""
    table = (cfg.data or {}).get(name)
    if table is None:
        return {}
    if not isinstance(table, dict):
        raise ConfigError(ErrorKind.BAD_CONFIG, f"{name} is a JSON {type(table).__name__}, not an object",
                          file=cfg.source, field=name)
    return table


def _is_int(v) -> bool:
    """An int, or a str Java's Long.parseLong would read (ASCII digits with an optional sign)."""
    if isinstance(v, bool):
        return False
    if isinstance(v, int):
        return True
    return isinstance(v, str) and _INT_TEXT.fullmatch(v) is not None


def _as_int(v) -> int:
    return v if isinstance(v, int) else int(v)
