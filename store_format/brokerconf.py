"""broker.conf: the broker's settings file, read as RocketMQ reads it, and the store geometry it sets.

``BrokerStartup`` loads the file given with ``-c`` with ``java.util.Properties.load(InputStream)`` and copies
every property onto ``MessageStoreConfig`` (``MixAll.properties2Object``).  :func:`parse_properties` is that
format: ISO-8859-1 text; ``#`` and ``!`` comment lines; a key ends at the first unescaped ``=``, ``:`` or
white space, and one ``=``/``:`` with white space around it separates it from the value; a line ending in an
odd number of backslashes continues on the next (whose leading white space is dropped); ``\\t \\n \\r \\f``,
``\\uXXXX`` and ``\\x`` (any other x) escapes; the last of repeated keys wins; a value keeps its trailing white
space.  ``properties2Object`` parses numbers with ``Integer.parseInt`` and ignores a value that does not
parse (the broker then keeps its default): such a value of a geometry setting is refused here, naming the setting.

:class:`StoreGeometry` holds what the read side takes from the file (the file sizes, the index geometry and the
delay levels); :func:`add_geometry_arguments` and :func:`geometry_from_args` give every command that reads a
store the same ``--config`` / ``--hash-slots`` / ``--index-num`` options (flags override the file; anything
neither gives is read from the store's files).  The writer's settings (``WriterConfig.from_file``) are parsed
here too: the write side depends on the read side, never the reverse.
"""
from __future__ import annotations

import os
import re
from dataclasses import dataclass, fields

from . import layout as L
from .errors import ErrorKind, StoreFormatError

# MessageStoreConfig names of the settings that shape the files, with the StoreGeometry field each sets
GEOMETRY_KEYS = {"mappedFileSizeCommitLog": "segment_size", "mappedFileSizeConsumeQueue": "consume_queue_file_size",
                 "mapperFileSizeBatchConsumeQueue": "batch_queue_file_size",
                 "mappedFileSizeTimerLog": "timer_log_file_size", "maxHashSlotNum": "hash_slot_num",
                 "maxIndexNum": "index_num", "messageDelayLevel": "message_delay_level"}
_DECIMAL = re.compile(r"[+-]?[0-9]+")  # Integer.parseInt's ASCII digits (the only ones a broker.conf holds)
_ESCAPES = {"t": "\t", "n": "\n", "r": "\r", "f": "\f"}
_WHITESPACE = " \t\f"  # Properties' white space; line ends are \n, \r, \r\n


class BrokerConfError(StoreFormatError):
    """A broker.conf that cannot be read, or a setting in it that the broker would not have used."""


def parse_properties(text: str, source: str | None = None) -> dict[str, str]:
    """``java.util.Properties.load`` of ``text`` (already decoded): key -> value, the last of repeated keys."""
    out: dict[str, str] = {}
    lines = text.replace("\r\n", "\n").replace("\r", "\n").split("\n")
    i = 0
    while i < len(lines):
        line = lines[i].lstrip(_WHITESPACE)
        i += 1
        if not line or line[0] in "#!":
            continue
        while _continues(line) and i < len(lines):  # a comment line never continues; a logical line may
            line = line[:-1] + lines[i].lstrip(_WHITESPACE)
            i += 1
        if _continues(line):
            line = line[:-1]  # a continuation at the end of the file continues into nothing
        key, value = _split(line)
        out[_unescape(key, source)] = _unescape(value, source)
    return out


def _continues(line: str) -> bool:
    return (len(line) - len(line.rstrip("\\"))) % 2 == 1


def _split(line: str) -> tuple[str, str]:
    """Key and (still escaped) value of one logical line."""
    pos, n = 0, len(line)
    while pos < n:
        c = line[pos]
        if c == "\\":
            pos += 2
            continue
        if c in "=:" or c in _WHITESPACE:
            break
        pos += 1
    key, rest = line[:pos], line[pos:].lstrip(_WHITESPACE)
    if rest[:1] in ("=", ":"):
        rest = rest[1:].lstrip(_WHITESPACE)
    return key, rest


def _unescape(s: str, source: str | None) -> str:
    if "\\" not in s:
        return s
    out, pos = [], 0
    while pos < len(s):
        c = s[pos]
        if c != "\\" or pos + 1 == len(s):
            out.append(c)
            pos += 1
            continue
        nxt = s[pos + 1]
        if nxt == "u":
            digits = s[pos + 2:pos + 6]
            if not re.fullmatch(r"[0-9a-fA-F]{4}", digits):
                raise BrokerConfError(ErrorKind.BAD_CONFIG, f"malformed \\uxxxx escape in {s!r}", file=source)
            out.append(chr(int(digits, 16)))
            pos += 6
            continue
        out.append(_ESCAPES.get(nxt, nxt))
        pos += 2
    return "".join(out)


def read_properties(path: str | os.PathLike) -> dict[str, str]:
    """A broker.conf file as the broker reads it (bytes as ISO-8859-1, as ``Properties.load(InputStream)``)."""
    from .fs import UnreadableError, read_bytes

    try:
        raw = read_bytes(path)
    except UnreadableError as e:
        raise BrokerConfError(ErrorKind.MISSING, f"cannot read the broker.conf: {e.reason}", file=str(path)) from None
    return parse_properties(raw.decode("iso-8859-1"), str(path))


@dataclass(frozen=True)
class StoreGeometry:
    """The settings that shape a store's files, where known (None: take it from the files)."""

    segment_size: int | None = None  # mappedFileSizeCommitLog
    consume_queue_file_size: int | None = None  # mappedFileSizeConsumeQueue, rounded up to whole 20-byte units
    batch_queue_file_size: int | None = None  # mapperFileSizeBatchConsumeQueue (5.x)
    timer_log_file_size: int | None = None  # mappedFileSizeTimerLog (5.x)
    hash_slot_num: int | None = None  # maxHashSlotNum
    index_num: int | None = None  # maxIndexNum
    message_delay_level: str | None = None  # messageDelayLevel
    source: str | None = None  # where it came from (a broker.conf path, "flags"), for messages

    def store_kwargs(self) -> dict:
        """Keyword arguments of :class:`store_format.store.Store` for what is known."""
        out = {"segment_size": self.segment_size, "hash_slot_num": self.hash_slot_num, "index_num": self.index_num,
               "file_sizes": {"consumequeue": self.consume_queue_file_size, L.BATCH_CQ_DIR: self.batch_queue_file_size,
                              L.TIMER_LOG_DIR: self.timer_log_file_size}}
        if self.message_delay_level is not None:
            out["message_delay_level"] = self.message_delay_level
        return out

    def index_options(self) -> dict[str, str]:
        """The ``rocketmq-index`` data source options (hashSlotNum, indexNum) for what is known."""
        return {k: str(v) for k, v in (("hashSlotNum", self.hash_slot_num), ("indexNum", self.index_num))
                if v is not None}

    def merged(self, **overrides) -> "StoreGeometry":
        """This geometry with every non-None override in its place."""
        values = {f.name: getattr(self, f.name) for f in fields(self)}
        values.update({k: v for k, v in overrides.items() if v is not None})
        return StoreGeometry(**values)


def parse_size(value, default: int | None = None) -> int | None:
    """A size in bytes with an optional k/m/g suffix (binary units; ``64m``, ``1g``, ``4096``), as the options
    and flags take them; ``default`` when None.  A ValueError for anything else or a size that is not positive."""
    if value is None:
        return default
    v = str(value).strip().lower().removesuffix("b")
    mult = {"k": 1 << 10, "m": 1 << 20, "g": 1 << 30}.get(v[-1:], 1)
    try:
        n = int(v[:-1] if mult > 1 else v) * mult
    except ValueError:
        raise ValueError(f"expected a size in bytes such as 4096, 64m or 1g, got {value!r}") from None
    if n <= 0:
        raise ValueError(f"size must be positive, got {value!r}")
    return n


def out_of_range(value, bounds: tuple[int, int], what: str) -> str | None:
    """Why ``value`` cannot be ``what`` (a number the broker holds within ``bounds``), or None when it can."""
    if bounds[0] <= value <= bounds[1]:
        return None
    return f"{value} is outside the range of {what}, [{bounds[0]}, {bounds[1]}]"


def number_argument(bounds: tuple[int, int], what: str):
    """An argparse ``type`` for an option that takes a whole number the broker holds within ``bounds`` (``what``
    names it: "a queue id (a Java int)"): anything else is a usage error naming the range (argparse adds the
    option's name), never a value that overflows later in Arrow, numpy or the JVM."""
    import argparse

    def parse(text: str) -> int:
        t = str(text).strip()
        if not _DECIMAL.fullmatch(t):
            raise argparse.ArgumentTypeError(f"{text!r} is not a whole number: give {what} in "
                                             f"[{bounds[0]}, {bounds[1]}]")
        why = out_of_range(int(t), bounds, what)
        if why:
            raise argparse.ArgumentTypeError(why)
        return int(t)

    parse.__name__ = what  # argparse's fallback message names the type by it
    return parse


def size_argument(text: str, bounds: tuple[int, int] = (1, L.JAVA_LONG[1]), what: str = "a size in bytes") -> int:
    """:func:`parse_size` as an argparse ``type``: ``--split-size 64m`` (any positive long); with ``bounds`` and
    ``what`` a setting's own range (:data:`file_size_argument`)."""
    import argparse

    try:
        n = parse_size(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None
    why = out_of_range(n, bounds, what)
    if why:
        raise argparse.ArgumentTypeError(why)
    return n


def file_size_argument(text: str) -> int:
    """:func:`size_argument` for a broker's file size setting (``--segment-size``: mappedFileSizeCommitLog, a Java
    int)."""
    return size_argument(text, (1, L.JAVA_INT[1]), "a broker file size (a positive Java int)")


def java_int(key: str, value: str, source: str | None = None) -> int:
    """``Integer.parseInt`` of a setting's value, or an error saying what the broker did with it."""
    if not _DECIMAL.fullmatch(value) or out_of_range(int(value), L.JAVA_INT, "an int"):
        raise BrokerConfError(ErrorKind.BAD_CONFIG, f"{key}={value!r} is not an int (Integer.parseInt fails, so "
                              "the broker ignored it and kept its default); fix or remove the line", file=source,
                              field=key)
    return int(value)


def store_geometry(values: dict[str, str], source: str | None = None) -> StoreGeometry:
    """The geometry broker.conf ``values`` set (keys it does not give stay None)."""
    kwargs = {}
    for key, name in GEOMETRY_KEYS.items():
        if key not in values:
            continue
        if key == "messageDelayLevel":
            try:
                L.parse_delay_levels(values[key])
            except ValueError as e:
                raise BrokerConfError(ErrorKind.BAD_CONFIG, f"{key}: {e}", file=source, field=key) from None
            kwargs[name] = values[key]
            continue
        v = java_int(key, values[key], source)
        if v <= 0:
            raise BrokerConfError(ErrorKind.BAD_CONFIG, f"{key}={v}: must be positive", file=source, field=key)
        if key == "mappedFileSizeConsumeQueue":  # MessageStoreConfig.getMappedFileSizeConsumeQueue
            v = -(-v // L.CQ_STORE_UNIT_SIZE) * L.CQ_STORE_UNIT_SIZE
        kwargs[name] = v
    return StoreGeometry(**kwargs, source=source)


def read_geometry(path: str | os.PathLike) -> StoreGeometry:
    return store_geometry(read_properties(path), str(path))


# ---------------------------------------------------------------------------------------------------------
# The settings that change how recovery reads a record (5.2.0 and later)

# MessageStoreConfig names of the whole-record CRC switches, with the RecoverySettings field each sets
RECOVERY_KEYS = {"enabledAppendPropCRC": "enabled_append_prop_crc", "forceVerifyPropCRC": "force_verify_prop_crc"}


@dataclass(frozen=True)
class RecoverySettings:
    """broker.conf's ``__CRC32#`` switches (store-format-5x.md section 1), both off by default as in 5.3.3:
    ``force_verify_prop_crc`` makes the recovery walk check each record's whole-record CRC instead of its body CRC
    (a record without the property, or whose property does not match, ends the valid data);
    ``enabled_append_prop_crc`` makes the broker append the property to every record it writes from its start."""

    enabled_append_prop_crc: bool = False
    force_verify_prop_crc: bool = False
    source: str | None = None


def java_boolean(value: str) -> bool:
    """``Boolean.parseBoolean``, as ``properties2Object`` applies it: "true" in any case, nothing else (no trim)."""
    return value.lower() == "true"


def recovery_settings(values: dict[str, str], source: str | None = None) -> RecoverySettings:
    """The recovery switches broker.conf ``values`` set (absent keys keep their defaults)."""
    return RecoverySettings(**{name: java_boolean(values[key]) for key, name in RECOVERY_KEYS.items()
                               if key in values}, source=source)


def recovery_settings_from_args(args) -> RecoverySettings:
    """The recovery switches of ``--config`` (the defaults without one)."""
    conf = getattr(args, "config", None)
    return recovery_settings(read_properties(conf), str(conf)) if conf else RecoverySettings()


# ---------------------------------------------------------------------------------------------------------
# The same options on every command that reads a store


def add_geometry_arguments(parser, *, segment_size: bool = False, recovery: bool = False) -> None:
    """``--config broker.conf``, ``--hash-slots``, ``--index-num`` (and ``--segment-size`` where asked) on
    ``parser``: what the files cannot tell.  :func:`geometry_from_args` reads them back (and, for a command that
    predicts recovery, ``recovery``: :func:`recovery_settings_from_args`)."""
    g = parser.add_argument_group("store geometry (default: read from the files; give it only if they cannot tell)")
    g.add_argument("--config", metavar="broker.conf",
                   help="the broker's broker.conf: its maxHashSlotNum and maxIndexNum" +
                        (" (and mappedFileSizeCommitLog)" if segment_size else "") + " are used; the flags below "
                        "override it" + ("; its forceVerifyPropCRC and enabledAppendPropCRC (default false) change "
                                         "how the broker's recovery reads records; its mappedFileSizeConsumeQueue, "
                                         "mapperFileSizeBatchConsumeQueue and mappedFileSizeTimerLog are the sizes "
                                         "the broker's load checks those files against" if recovery else ""))
    if segment_size:
        g.add_argument("--segment-size", type=file_size_argument, metavar="SIZE",
                       help="the broker's mappedFileSizeCommitLog, in bytes or with k/m/g (1g; default: inferred from "
                            "the segment files; give it when a dump has one segment, so a short or long file is "
                            "caught)")
    g.add_argument("--hash-slots", type=number_argument((1, L.JAVA_INT[1]), "maxHashSlotNum (a positive Java int)"),
                   metavar="N",
                   help="maxHashSlotNum of the index files (default: inferred from each file's length and content)")
    g.add_argument("--index-num", type=number_argument((1, L.JAVA_INT[1]), "maxIndexNum (a positive Java int)"),
                   metavar="N",
                   help="maxIndexNum of the index files (default: inferred from each file's length and content)")


def geometry_from_args(args) -> StoreGeometry:
    """The geometry ``--config`` and the flags give (flags win); unknown parts stay None.  broker.conf's
    mappedFileSizeCommitLog is used only by commands that take ``--segment-size`` (the others read the segment
    size from the files, as their data sources do)."""
    conf = getattr(args, "config", None)
    base = read_geometry(conf) if conf else StoreGeometry()
    if not hasattr(args, "segment_size"):
        base = StoreGeometry(**{**vars(base), "segment_size": None})
    flags = {"segment_size": getattr(args, "segment_size", None), "hash_slot_num": getattr(args, "hash_slots", None),
             "index_num": getattr(args, "index_num", None)}
    for name, option in (("segment_size", "--segment-size"), ("hash_slot_num", "--hash-slots"),
                         ("index_num", "--index-num")):
        if flags[name] is not None and flags[name] <= 0:
            raise StoreFormatError(ErrorKind.BAD_CONFIG, f"{option} {flags[name]}: must be positive", field=option)
    out = base.merged(**flags)
    if any(v is not None for v in flags.values()):
        out = out.merged(source=f"{conf} and flags" if conf else "flags")
    return out


__all__ = ["BrokerConfError", "GEOMETRY_KEYS", "file_size_argument", "number_argument", "out_of_range",
           "size_argument", "RECOVERY_KEYS", "RecoverySettings", "StoreGeometry", "java_boolean",
           "recovery_settings", "recovery_settings_from_args", "add_geometry_arguments", "geometry_from_args",
           "java_int", "parse_properties", "read_geometry", "read_properties", "store_geometry"]
