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
    n = len(raw)
    start = 0
    while start < n:
        end = raw.find(PROPERTY_SEPARATOR, start)
        if end < 0:
            end = n
        kv = raw.find(NAME_VALUE_SEPARATOR, start)
        if start < kv < end - 1:
            props[raw[start:kv]] = raw[kv + 1:end]
        start = end + 1
    return props


def format_properties(props: dict[str, str], trailing_separator: bool = False) -> str:
    """Serialize in the dict's order; entries whose value is None are skipped (as RocketMQ does)."""
    parts = [f"{k}{NAME_VALUE_SEPARATOR}{v}" for k, v in props.items() if v is not None]
    s = PROPERTY_SEPARATOR.join(parts)
    if trailing_separator and parts:
        s += PROPERTY_SEPARATOR
    return s


def split_keys(keys: str | None) -> list[str]:
    """KEYS split on a single space as ``keys.split(" ")`` does; empty pieces dropped (IndexService)."""
    if not keys:
        return []
    return [k for k in keys.split(KEY_SEPARATOR) if k]
