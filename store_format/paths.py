"""Output paths built from dump content (topic names, group names, queue ids) that cannot leave their root.

A topic name comes from a dump, so it is hostile until proven otherwise: ``../x``, ``/abs``, ``a/../../b``,
NUL, a 10 000-character name.  :func:`safe_component` turns any such text into one file name component,
reversibly and injectively (two names never share a component)::

    kept as is    ASCII letters, digits, '_', '-', '%' (RocketMQ's topic charset, so %RETRY%g stays readable),
                  and '.' except as the first character (no '.', '..' or hidden files)
    escaped       every other character as '+HH' per UTF-8 byte ('/' -> '+2F', NUL -> '+00', '+' -> '+2B')
    empty name    '+'
    too long      the first part of the escaped text, '~', and a SHA-256 prefix of the name (at most
                  MAX_COMPONENT bytes; '~' never appears otherwise, so such names cannot collide with short ones)

:func:`safe_path` joins components under a root and checks the result is still inside it.
"""
from __future__ import annotations

import hashlib
import os
import re
from pathlib import Path

from .errors import ErrorKind, StoreFormatError

MAX_COMPONENT = 200  # well under NAME_MAX (255 bytes) of common file systems
_HASH_CHARS = 32
_KEEP = frozenset(b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_-%.")
_ESCAPED = re.compile(r"\+([0-9A-F]{2})")


def safe_component(name) -> str:
    """One path component for ``name`` (str, or int such as a queue id); see the module docstring."""
    text = str(name)
    raw = text.encode("utf-8", "surrogatepass")
    if not raw:
        return "+"
    out = []
    for i, b in enumerate(raw):
        out.append(chr(b) if b in _KEEP and not (i == 0 and b == ord(".")) else f"+{b:02X}")
    escaped = "".join(out)
    if len(escaped) <= MAX_COMPONENT:
        return escaped
    digest = hashlib.sha256(raw).hexdigest()[:_HASH_CHARS]
    head = escaped[:MAX_COMPONENT - _HASH_CHARS - 1]
    head = head[:head.rfind("+")] if "+" in head[-2:] else head  # never cut an escape in half
    return f"{head}~{digest}"


def component_name(component: str) -> str:
    """The name :func:`safe_component` escaped (not for shortened names, which keep only a hash)."""
    if "~" in component:
        raise StoreFormatError(ErrorKind.INVALID_INPUT, "a shortened component keeps only a hash of its name",
                               field="component")
    if component == "+":
        return ""
    return _ESCAPED.sub(lambda m: chr(int(m.group(1), 16)), component).encode("latin-1").decode(
        "utf-8", "surrogatepass")


def safe_path(root: str | os.PathLike, *parts) -> Path:
    """``root / safe_component(p1) / safe_component(p2) ...``, guaranteed to lie inside ``root``."""
    base = Path(os.path.abspath(root))
    path = base.joinpath(*(safe_component(p) for p in parts))
    # each component is a plain name, so this holds by construction; checked anyway, as the last line of defence
    if os.path.commonpath([base, os.path.normpath(path)]) != str(base) or (parts and path == base):
        raise StoreFormatError(ErrorKind.INVALID_INPUT, f"{parts!r} would leave the output root",
                               file=str(base), field="path")
    return path


__all__ = ["MAX_COMPONENT", "component_name", "safe_component", "safe_path"]
