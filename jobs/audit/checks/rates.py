"""The message rate over time per topic that the report plots, counted by every range task whatever checks are
chosen: a range counts its kept messages per millisecond when it spans at most two seconds, per second up to two
hours, else per minute (``unit``, in milliseconds); the report merges the counts into the finest unit every range
counted in."""
from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from store_format.times import format_iso_z

from ..contract import Family, Plot

RATE = pa.schema([("topic", pa.string()), ("unit", pa.int32()), ("time", pa.int64()), ("messages", pa.int64())])
_UNITS = ((2_000, 1), (7_200_000, 1_000), (None, 60_000))  # (widest span in ms, unit in ms)


def unit_for(span_ms: int) -> int:
    return next(u for limit, u in _UNITS if limit is None or span_ms <= limit)


def rate_counts(rc, out) -> None:
    """A range's kept messages per topic and time unit (each range of a joint context its own unit)."""
    if not len(rc.message_rows):
        return
    kept = rc.column("kept")
    if not kept.any():
        return
    m = rc.messages
    rows = np.flatnonzero(kept)
    ms = m.column("store_timestamp").to_numpy(zero_copy_only=False)[rows]
    part = rc.part_of(rc.message_rows[rows])
    starts = np.flatnonzero(np.r_[True, part[1:] != part[:-1]])  # the kept messages of each range, in order
    lo, hi = np.minimum.reduceat(ms, starts), np.maximum.reduceat(ms, starts)
    # in Python's integers: store times may span more than a long
    units = np.array([unit_for(int(b) - int(a)) for a, b in zip(lo.tolist(), hi.tolist())], np.int64)
    unit = np.repeat(units, np.diff(np.r_[starts, len(rows)]))
    g = pa.table({"topic": m.column("topic").take(pa.array(rows)), "unit": pa.array(unit.astype(np.int32)),
                  "time": pa.array(np.floor_divide(ms, unit))}).group_by(
        ["topic", "unit", "time"]).aggregate([("time", "count")])
    out.partial("rates.counts", pa.table({
        "topic": g.column("topic"), "unit": g.column("unit"), "time": g.column("time"),
        "messages": pc.cast(g.column("time_count"), pa.int64())}, schema=RATE))


_TOPICS_PLOTTED = 8


def message_rate(ctx) -> tuple[int, pa.Table] | None:
    """(milliseconds per unit, a table of ``topic``, ``time`` (in units) and its kept ``messages``) over every
    range, in the finest unit every range counted in and the whole span allows.  In Arrow: a broker of 5,000 topics
    has a count per topic and second, which a row at a time took most of the report's time."""
    t = ctx.partial("rates.counts", RATE)
    if not t.num_rows:
        return None
    units = t.column("unit").to_numpy().astype(np.int64)
    time = t.column("time").to_numpy()
    coarsest = int(units.max())
    # in Python's integers where the times are near a long's ends (damaged store times the broker kept)
    exact = int(np.abs(time).max()) * coarsest >= 1 << 62
    start = time.astype(object) * units if exact else time * units  # each count's first millisecond
    lo = int(start.min())
    hi = max((int(time[units == u].max()) + 1) * int(u) - 1 for u in np.unique(units).tolist())
    unit = max(coarsest, unit_for(hi - lo))
    g = pa.table({"topic": t.column("topic"), "time": pa.array((start // unit).astype(np.int64)),
                  "messages": t.column("messages")}).group_by(["topic", "time"]).aggregate([("messages", "sum")])
    return unit, pa.table({"topic": g.column("topic"), "time": g.column("time"),
                           "messages": g.column("messages_sum")})


def rate_plot(plt, unit_ms: int, counts: pa.Table) -> tuple[str, object]:
    """Messages per second per topic over the store's time span: about 60 buckets whatever the span (down to
    one millisecond); a span inside one bucket is a bar per topic, said as such.  ``counts``: :func:`message_rate`'s
    table.  (heading, figure)"""
    time = counts.column("time").to_numpy()
    lo, hi = int(time.min()), int(time.max())
    by_topic = counts.group_by("topic").aggregate([("messages", "sum")])
    totals = dict(zip(by_topic.column("topic").to_pylist(), by_topic.column("messages_sum").to_pylist()))
    busiest = sorted(totals, key=lambda t: (-totals[t], t))[:_TOPICS_PLOTTED]
    start = format_iso_z(lo * unit_ms)  # a damaged record's time that no calendar holds: in ms
    if hi == lo:  # every message in one time unit: a rate over time would be one point
        fig, ax = plt.subplots(figsize=(13, 0.6 + 0.3 * min(len(totals), _TOPICS_PLOTTED + 1)))
        names = busiest + (["(other)"] if len(totals) > len(busiest) else [])
        values = [totals[t] for t in busiest] + ([sum(v for t, v in totals.items() if t not in busiest)]
                                                 if len(totals) > len(busiest) else [])
        ax.barh([n[:40] for n in names], values, color="#4c8bd6")
        ax.invert_yaxis()
        ax.set_xlabel(f"messages (all stored within {unit_ms:g} ms of {start})")
        return "Messages per topic (the whole store spans less than one time bucket)", fig
    width = max(1, -(-(hi - lo + 1) // 60))  # in units: about 60 buckets
    last = (hi - lo) // width
    bucket = (time - lo) // width
    label = pc.if_else(pc.is_in(counts.column("topic"), pa.array(busiest, pa.string())), counts.column("topic"),
                       "(other)").to_numpy(zero_copy_only=False)
    messages = counts.column("messages").to_numpy()
    seconds = width * unit_ms / 1000
    fig, ax = plt.subplots(figsize=(13, 3.6))
    for topic in sorted(set(label.tolist())):  # empty buckets are zeros: a quiet stretch is drawn as one
        mine = label == topic
        per_bucket = np.bincount(bucket[mine], weights=messages[mine], minlength=last + 1)
        ax.plot(np.arange(last + 1) * seconds, per_bucket / seconds, marker=".", markersize=3, linewidth=1,
                label=topic[:40])
    ax.set_xlabel(f"seconds since {start} ({seconds:g} s buckets)")
    ax.set_ylabel("messages / s")
    ax.legend(fontsize=7, ncol=2)
    return "Message rate over time per topic", fig


def _draw_rate(ctx, tables, plt):
    rate = message_rate(ctx)
    return None if rate is None else rate_plot(plt, *rate)


FAMILY = Family("rates", "messages per topic over time, for the report's plot", always=True, in_range=rate_counts,
                emits={"rates.counts": RATE}, reads=("rates.counts",), plots=(Plot(10, _draw_rate),))
