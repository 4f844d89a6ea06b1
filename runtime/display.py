"""Times, durations and counts as people read them: ISO-8601 UTC for a moment (store_format.times), "3 h 12 min"
for a span, "1 message" and "2 messages" for a count.

The tables keep the numbers (epoch milliseconds, ``*_ms`` durations: Parquet is for machines); the report, the
terminal, the query table and the notebooks show them through these functions.  :func:`readable` does it for a
whole pandas frame, by column name: ``*_time``, ``*_timestamp`` and ``as_of`` are moments, ``*_ms`` spans.
"""
from __future__ import annotations

from store_format.times import format_iso_z, format_time  # noqa: F401 - moments: one home, the store layer's


_UNITS = ((86_400_000, "d"), (3_600_000, "h"), (60_000, "min"), (1_000, "s"))


def format_duration(ms: int | float | None) -> str:
    """A span in the two largest units that say it: ``850 ms``, ``12.5 s``, ``4 min 10 s``, ``3 h 12 min``,
    ``2 d 5 h``; negative spans (a time after the dump time) keep their sign."""
    if ms is None:
        return ""
    ms = int(ms)
    sign, ms = ("-" if ms < 0 else ""), abs(ms)
    if ms < 1_000:
        return f"{sign}{ms} ms"
    if ms < 60_000:
        return f"{sign}{ms / 1000:.1f} s".replace(".0 s", " s")
    for i, (size, unit) in enumerate(_UNITS[:-1]):
        if ms >= size:
            small, small_unit = _UNITS[i + 1]
            rest = (ms % size) // small
            return f"{sign}{ms // size} {unit}" + (f" {rest} {small_unit}" if rest else "")
    return f"{sign}{ms} ms"  # not reached: every span of a minute or more has a unit above


def plural(n: int, one: str, many: str | None = None) -> str:
    """``n`` things in words, with thousands separators: ``1 message``, ``2,000 messages``; ``many`` where adding
    "s" is not the plural (``1 index file``, ``2 index files``; ``1 entry``, ``2 entries``)."""
    return f"{n:,} {one if n == 1 else (many or one + 's')}"


def is_time_column(name: str) -> bool:
    n = name.lower()
    return n.endswith(("_time", "timestamp")) or n in ("as_of", "time")


def is_duration_column(name: str) -> bool:
    return name.lower().endswith("_ms")


def readable(frame):
    """A copy of a pandas frame for display: moment columns as ISO-8601 text, ``*_ms`` spans as durations;
    the other columns as they are."""
    out = frame.copy()
    for name in out.columns:
        if is_time_column(str(name)):
            out[name] = [format_iso_z(int(v)) if _number(v) else v for v in out[name]]
        elif is_duration_column(str(name)):
            out[name] = [format_duration(v) if _number(v) else v for v in out[name]]
    return out


def _number(v) -> bool:
    import math
    import numbers

    if isinstance(v, bool) or not isinstance(v, numbers.Real):
        return False
    return not (isinstance(v, float) and math.isnan(v))
