"""The message rate over time per topic that the report plots, counted by every range task whatever checks are
chosen: a range counts its kept messages per millisecond when it spans at most two seconds, per second up to two
hours, else per minute (``unit``, in milliseconds); the report merges the counts into the finest unit every range
counted in."""
from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

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


def message_rate(ctx) -> tuple[int, dict] | None:
    """(milliseconds per unit, {(topic, time in units): kept messages}) over every range, in the finest unit
    every range counted in and the whole span allows."""
    t = ctx.partial("rates.counts", RATE)
    if not t.num_rows:
        return None
    rows = t.to_pylist()
    coarsest = max(r["unit"] for r in rows)
    lo = min(r["time"] * r["unit"] for r in rows)
    hi = max((r["time"] + 1) * r["unit"] - 1 for r in rows)
    unit = max(coarsest, unit_for(hi - lo))
    counts: dict[tuple, int] = {}
    for r in rows:
        key = (r["topic"], r["time"] * r["unit"] // unit)
        counts[key] = counts.get(key, 0) + r["messages"]
    return unit, counts


def rate_plot(plt, unit_ms: int, counts: dict) -> tuple[str, object]:
    """Messages per second per topic over the store's time span: about 60 buckets whatever the span (down to
    one millisecond); a span inside one bucket is a bar per topic, said as such.  (heading, figure)"""
    import datetime as dt

    lo = min(t for _, t in counts)
    hi = max(t for _, t in counts)
    totals: dict[str, int] = {}
    for (topic, _), n in counts.items():
        totals[topic] = totals.get(topic, 0) + n
    busiest = sorted(totals, key=lambda t: (-totals[t], t))[:_TOPICS_PLOTTED]
    start = dt.datetime.fromtimestamp(lo * unit_ms / 1000, dt.timezone.utc).isoformat(timespec="milliseconds")
    start = start.replace("+00:00", "Z")
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
    buckets: dict[str, dict[int, int]] = {}
    for (topic, t), n in counts.items():
        b = buckets.setdefault(topic if topic in busiest else "(other)", {})
        k = (t - lo) // width
        b[k] = b.get(k, 0) + n
    seconds = width * unit_ms / 1000
    fig, ax = plt.subplots(figsize=(13, 3.6))
    last = (hi - lo) // width
    for topic in sorted(buckets):  # empty buckets are zeros: a quiet stretch is drawn as one
        pts = [(k, buckets[topic].get(k, 0)) for k in range(last + 1)]
        ax.plot([k * seconds for k, _ in pts], [c / seconds for _, c in pts], marker=".", markersize=3,
                linewidth=1, label=topic[:40])
    ax.set_xlabel(f"seconds since {start} ({seconds:g} s buckets)")
    ax.set_ylabel("messages / s")
    ax.legend(fontsize=7, ncol=2)
    return "Message rate over time per topic", fig


def _draw_rate(ctx, tables, plt):
    rate = message_rate(ctx)
    return None if rate is None else rate_plot(plt, *rate)


FAMILY = Family("rates", "messages per topic over time, for the report's plot", always=True, in_range=rate_counts,
                emits={"rates.counts": RATE}, reads=("rates.counts",), plots=(Plot(10, _draw_rate),))
