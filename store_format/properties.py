"""Message properties: ``name \\u0001 value \\u0002 name \\u0001 value ...`` (MessageDecoder).

Parsing follows ``string2messageProperties`` of RocketMQ >= 4.9.1: walk segments split by \\u0002; a
segment is kept only if its first \\u0001 (searched from the segment start) lies after at least one
key character and before the last character, so empty keys and empty values are dropped and the value
keeps any further \\u0001; the last duplicate wins.  Formatting is ``messageProperties2String``: with
no trailing separator (4.9.1-5.1.4) or with one (<= 4.9.0 and >= 5.2.0).
"""
from __future__ import annotations

from .layout import KEY_SEPARATOR, NAME_VALUE_SEPARATOR, PROPERTY_SEPARATOR


def parse_properties(raw: str | None) -> dict[str, str]:
    props: dict[str, str] = {}
    if not raw:
        return props
    for segment in raw.split(PROPERTY_SEPARATOR):
        # the first \u0001 of the segment splits it; an empty key or an empty value drops the entry
        key, _, value = segment.partition(NAME_VALUE_SEPARATOR)
        if key and value:
            props[key] = value
    return props


def format_properties(props: dict[str, str], trailing_separator: bool = False) -> str:
    """Serialize in the dict's order; entries whose value is None are skipped (as RocketMQ does)."""
    parts = [f"{k}{NAME_VALUE_SEPARATOR}{v}" for k, v in props.items() if v is not None]
    s = PROPERTY_SEPARATOR.join(parts)
    if trailing_separator and parts:
        s += PROPERTY_SEPARATOR
    return s


def delete_property(raw: str, name: str) -> str:
    """``MessageUtils.deleteProperty``: ``raw`` without every ``name\\u0001value\\u0002`` segment, cut as text.  A
    segment counts where ``name`` starts the string or follows a \\u0002 and is followed by \\u0001; it is cut up to
    and including the next \\u0002 after that \\u0001 (to the end when there is none).  Everything else -- empty
    values, repeated keys, the order -- stays byte for byte (a map round trip would drop or merge them)."""
    if not raw or name not in raw:
        return raw
    needle = name + NAME_VALUE_SEPARATOR
    kept, at = [], 0
    for i in _segment_starts(raw, needle):
        if i < at:
            continue  # inside a segment already cut
        kept.append(raw[at:i])
        end = raw.find(PROPERTY_SEPARATOR, i + len(needle))
        if end < 0:
            return "".join(kept)
        at = end + 1
    kept.append(raw[at:])
    return "".join(kept)


def _segment_starts(raw: str, needle: str):
    """Positions where ``needle`` (a name and its \\u0001) starts a segment of ``raw``."""
    i = raw.find(needle)
    while i >= 0:
        if i == 0 or raw[i - 1] == PROPERTY_SEPARATOR:
            yield i
        i = raw.find(needle, i + 1)


def split_keys(keys: str | None) -> list[str]:
    """KEYS split on a single space as ``keys.split(" ")`` does; empty pieces dropped (IndexService)."""
    if not keys:
        return []
    return [k for k in keys.split(KEY_SEPARATOR) if k]


def property_value(raw: str | None, name: str) -> str | None:
    """``parse_properties(raw).get(name)`` without parsing the rest: the last segment whose key is
    ``name`` and whose value is non-empty (the value keeps any further \\u0001)."""
    if not raw:
        return None
    found = None
    needle = name + NAME_VALUE_SEPARATOR
    start = 0
    while True:
        i = raw.find(needle, start)
        if i < 0:
            return found
        if i == 0 or raw[i - 1] == PROPERTY_SEPARATOR:  # a key starts here, not inside another segment
            end = raw.find(PROPERTY_SEPARATOR, i)
            value = raw[i + len(needle):] if end < 0 else raw[i + len(needle):end]
            if value:
                found = value
        start = i + 1

