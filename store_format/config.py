"""``config/*.json`` as the broker's fastjson writes them, and RocketMQ's fallback to ``.bak``.

fastjson output is not strict JSON: maps with Integer keys are written with bare keys (``{0:12,1:13}``),
tab-indented.  :func:`loads` is a small strict-but-tolerant parser: JSON plus bare integer (or identifier)
keys; bare integer keys come back as Python ints.  Errors carry the byte position.
``ConfigManager.load`` falls back to ``<file>.bak`` when the main file is missing, empty or unreadable;
so does :func:`read_config`, and it says which file it used.
"""
from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass
from pathlib import Path

from .errors import ConfigError, ErrorKind

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
    p = _Parser(text, file)
    v = p.value(0)
    p.ws()
    if p.i != len(text):
        p.fail("trailing characters after the JSON value")
    return v


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
        if not candidate.is_file():
            continue
        text = candidate.read_bytes().decode("utf-8", "replace")
        if not text.strip():
            errors.append(ConfigError(ErrorKind.BAD_JSON, "empty file", file=str(candidate), position=0))
            continue
        try:
            data = loads(text, str(candidate))
        except ConfigError as e:
            errors.append(e)
            continue
        if not isinstance(data, dict):
            errors.append(ConfigError(ErrorKind.BAD_JSON, "top level is not an object", file=str(candidate)))
            continue
        return ConfigFile(name, data, str(candidate), tuple(errors))
    return ConfigFile(name, None, None, tuple(errors))


def consumer_offsets(cfg: ConfigFile) -> dict[tuple[str, str], dict[int, int]]:
    """consumerOffset.json -> {(topic, group): {queue_id: next offset to consume}}."""
    out = {}
    for key, table in _table(cfg, "offsetTable").items():
        topic, sep, group = str(key).rpartition(TOPIC_GROUP_SEPARATOR)
        if not sep or not isinstance(table, dict):
            continue
        out[(topic, group)] = {_as_int(q): _as_int(o) for q, o in table.items() if _is_int(q) and _is_int(o)}
    return out


def delay_offsets(cfg: ConfigFile) -> dict[int, int]:
    """delayOffset.json -> {delay level: next SCHEDULE_TOPIC_XXXX queue offset to deliver}."""
    return {_as_int(k): _as_int(v) for k, v in _table(cfg, "offsetTable").items() if _is_int(k) and _is_int(v)}


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
