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
