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
from pathlib import Path

from .errors import ConfigError, ErrorKind
from .fs import UnreadableError, read_bytes

CONFIG_FILES = ("consumerOffset.json", "delayOffset.json", "topics.json", "subscriptionGroup.json",
                "consumerFilter.json")
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
    p = _Parser(text, file)
    v = p.value(0)
    p.ws()
    if p.i != len(text):
        p.fail("trailing characters after the JSON value")
    return v


_NO_FAST_PATH = object()


def _byte_classes():
    import numpy as np

    t = np.zeros(256, np.uint8)
    t[list(b'{}[]:,"')] = 1
    return t


_CLASSES = None
_FAST_MIN = 1 << 16  # smaller texts: the tolerant parser is fast enough, and is the definition
_OPEN, _CLOSE, _LBRACKET, _COLON, _COMMA, _QUOTE, _BACKSLASH = b"{}[:,\"\\"


def _fast_loads(text: str, min_size: int = _FAST_MIN):
    """:func:`loads` for big texts through the C decoder (see the module docstring), or ``_NO_FAST_PATH``."""
    if len(text) < min_size:
        return _NO_FAST_PATH

    try:
        raw = bytearray(text.encode("utf-8"))
    except UnicodeEncodeError:  # lone surrogates (from a file read with errors="surrogatepass")
        return _NO_FAST_PATH
    return _fast_loads_bytes(raw)


def _fast_loads_bytes(raw: bytearray):
    """:func:`_fast_loads` of UTF-8 bytes (rewritten in place; invalid UTF-8 decodes as U+FFFD, as
    :func:`read_config` reads files: only bytes >= 0x80 change, never the structure)."""
    import numpy as np

    global _CLASSES
    if _CLASSES is None:
        _CLASSES = _byte_classes()
    a = np.frombuffer(raw, np.uint8)
    interesting = np.flatnonzero(_CLASSES[a])  # quotes and structural characters, in order
    is_quote = a[interesting] == _QUOTE
    quotes = interesting[is_quote]
    if len(quotes) and raw.find(b"\\") >= 0:  # drop escaped quotes: an odd run of backslashes before them
        escaped = np.zeros(len(quotes), bool)
        for k in np.flatnonzero(a[np.maximum(quotes - 1, 0)] == _BACKSLASH):
            q, n = int(quotes[k]), 0
            while q - n - 1 >= 0 and raw[q - n - 1] == _BACKSLASH:
                n += 1
            escaped[k] = n % 2 == 1
        is_quote[np.flatnonzero(is_quote)[escaped]] = False
        quotes = quotes[~escaped]
    if len(quotes) % 2:
        return _NO_FAST_PATH
    inside = (np.cumsum(is_quote, dtype=np.int64) % 2).astype(bool)  # quotes seen so far: odd inside a string
    structural = interesting[~is_quote & ~inside]  # outside strings (a closing quote itself is not structural)
    del interesting, is_quote, inside
    kinds = a[structural]
    if (kinds == _LBRACKET).any():
        return _NO_FAST_PATH  # arrays of its own: the rewritten maps could not be told from them
    braces = np.flatnonzero((kinds == _OPEN) | (kinds == _CLOSE))
    depth = np.cumsum(np.where(kinds[braces] == _OPEN, 1, -1))
    if len(depth) == 0 or depth.min() < 0 or depth[-1] != 0 or depth.max() > _MAX_DEPTH // 2:
        return _NO_FAST_PATH
    # a flat map: an opening brace whose next brace closes it; inside only ':' and ',' (no nested container)
    flat = np.flatnonzero((kinds[braces[:-1]] == _OPEN) & (kinds[braces[1:]] == _CLOSE))
    opens, closes = braces[flat], braces[flat + 1]
    counts = closes - opens - 1  # structural characters inside
    keep = counts > 0
    opens, closes, counts = opens[keep], closes[keep], counts[keep]
    if not len(opens):
        return _NO_FAST_PATH
    # inside: ':' at even offsets, ',' at odd ones, ending with ':' (key:value(,key:value)*)
    member = np.repeat(np.arange(len(opens)), counts)
    offset = np.arange(len(member)) - np.repeat(np.cumsum(counts) - counts, counts)
    inner = np.repeat(opens + 1, counts) + offset
    want = np.where(offset % 2 == 0, _COLON, _COMMA).astype(np.uint8)
    ok_member = counts % 2 == 1
    ok_member[member[kinds[inner] != want]] = False
    # every key is a bare ASCII integer: the bytes between the previous structural character and the ':'
    colons = inner[offset % 2 == 0]
    colon_member = member[offset % 2 == 0]
    starts = structural[colons - 1] + 1
    ends = structural[colons]
    ok_member[colon_member[~_bare_int_spans(a, starts, ends)]] = False
    # the rewrite, in place: '{' -> '[', each key's ':' -> ',', '}' -> ']'
    chosen = ok_member
    if not chosen.any():
        return _NO_FAST_PATH
    a[structural[opens[chosen]]] = _LBRACKET
    a[structural[closes[chosen]]] = ord("]")
    a[ends[chosen[colon_member]]] = _COMMA
    del a
    try:
        value = json.loads(raw.decode("utf-8", "replace"))
    except (ValueError, RecursionError):
        return _NO_FAST_PATH  # bare keys left (identifiers, nested maps), trailing commas...: the tolerant parser
    return _maps_from_pairs(value)


def _bare_int_spans(a, starts, ends):
    """For each span [start, end) of ``a``: optional whitespace, an optional '-', ASCII digits (no leading zero
    but a lone one, as JSON numbers: anything else steps aside for the tolerant parser), optional whitespace."""
    import numpy as np

    out = np.zeros(len(starts), bool)
    step = 1 << 20
    for lo in range(0, len(starts), step):
        out[lo:lo + step] = _bare_int_chunk(a, starts[lo:lo + step], ends[lo:lo + step])
    return out


def _bare_int_chunk(a, starts, ends):
    import numpy as np

    lengths = ends - starts
    if not len(starts) or lengths.max() > 64:
        return np.zeros(len(starts), bool)  # no integer key is that long: left to the tolerant parser
    text = np.full((len(starts), int(lengths.max())), ord(" "), np.uint8)
    for k in range(text.shape[1]):
        live = lengths > k
        text[live, k] = a[starts[live] + k]
    space = (text == 32) | (text == 9) | (text == 10) | (text == 13)
    digit = (text >= 48) & (text <= 57)
    minus = text == ord("-")
    first = np.argmax(~space, axis=1)  # first non-space
    rows = np.arange(len(starts))
    lead_minus = minus[rows, first]
    body = first + lead_minus
    # non-space characters form one run starting at `first`: count them and the digits
    nonspace = (~space).sum(axis=1)
    run_end = first + nonspace
    cols = np.arange(text.shape[1])
    in_run = (cols >= first[:, None]) & (cols < run_end[:, None])
    contiguous = (in_run == ~space).all(axis=1)
    digits_in_run = (digit & in_run).sum(axis=1)
    ok = contiguous & (nonspace > lead_minus) & (digits_in_run == nonspace - lead_minus)
    body = np.minimum(body, text.shape[1] - 1)
    leading_zero = (text[rows, body] == ord("0")) & (nonspace - lead_minus > 1)
    return ok & ~leading_zero


def _maps_from_pairs(value):
    """The decoded tree with every array (a rewritten Integer-keyed map) turned back into a dict."""
    if isinstance(value, list):
        return dict(zip(value[::2], value[1::2]))
    if not isinstance(value, dict):
        return value
    stack = [value]
    while stack:
        d = stack.pop()
        for k, v in d.items():
            if type(v) is list:
                d[k] = dict(zip(v[::2], v[1::2]))
            elif type(v) is dict:
                stack.append(v)
    return value


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


def read_config(config_dir: str | os.PathLike, name: str) -> ConfigFile:
    """Read ``name`` like ``ConfigManager.load``: the main file, else ``name.bak``."""
    d = Path(config_dir)
    errors = []
    for candidate in (d / name, d / f"{name}.bak"):
        if not candidate.exists() and not candidate.is_symlink():
            continue
        try:
            raw = read_bytes(candidate)  # a FIFO, a device, a folder, a loop, no permission: unreadable
        except UnreadableError as e:
            errors.append(ConfigError(ErrorKind.UNREADABLE, e.reason, file=str(candidate)))
            continue
        data = _fast_loads_bytes(bytearray(raw)) if len(raw) >= _FAST_MIN else _NO_FAST_PATH
        if data is not _NO_FAST_PATH:
            del raw
            if isinstance(data, dict):
                return ConfigFile(name, data, str(candidate), tuple(errors))
            errors.append(ConfigError(ErrorKind.BAD_JSON, "top level is not an object", file=str(candidate)))
            continue
        text = raw.decode("utf-8", "replace")
        del raw
        if not text.strip():
            errors.append(ConfigError(ErrorKind.BAD_JSON, "empty file", file=str(candidate), position=0))
            continue
        try:
            data = _slow_loads(text, str(candidate))
        except ConfigError as e:
            errors.append(e)
            continue
        if not isinstance(data, dict):
            errors.append(ConfigError(ErrorKind.BAD_JSON, "top level is not an object", file=str(candidate)))
            continue
        return ConfigFile(name, data, str(candidate), tuple(errors))
    return ConfigFile(name, None, None, tuple(errors))


INT_RANGE = (-2**31, 2**31 - 1)  # java.lang.Integer: queue ids, delay levels, queue counts
LONG_RANGE = (-2**63, 2**63 - 1)  # java.lang.Long: offsets, broker ids
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
