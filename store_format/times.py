"""Moments as people read them: ISO-8601 UTC with milliseconds (``2026-12-01T22:56:06.000Z``).

Every layer that words a time for a person (the store layer's explanations, the jobs' report, terminal and tables)
says it this way; the numbers (epoch milliseconds) stay in the data.  runtime/display.py adds durations and counts.
"""
from __future__ import annotations

import datetime as dt


def format_time(ms: int | None) -> str:
    """ISO-8601 UTC with milliseconds; a time no calendar holds (an open end, a garbage field) as ms."""
    if ms is None:
        return ""
    try:
        return dt.datetime.fromtimestamp(ms / 1000, dt.timezone.utc).isoformat(timespec="milliseconds")
    except (ValueError, OverflowError, OSError):
        return f"{ms} ms"


def format_iso_z(ms: int | None) -> str:
    """:func:`format_time` with ``Z`` for UTC, as the report writes it."""
    return format_time(ms).replace("+00:00", "Z")
