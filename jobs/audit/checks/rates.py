"""The message rate over time per topic that the report plots, counted by every range task whatever checks are
chosen: a range counts its kept messages per millisecond when it spans at most two seconds, per second up to two
hours, else per minute (``unit``, in milliseconds); the report merges the counts into the finest unit every range
counted in."""
from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ..contract import Family

RATE = pa.schema([("topic", pa.string()), ("unit", pa.int32()), ("time", pa.int64()), ("messages", pa.int64())])
_UNITS = ((2_000, 1), (7_200_000, 1_000), (None, 60_000))  # (widest span in ms, unit in ms)


def unit_for(span_ms: int) -> int:
    return next(u for limit, u in _UNITS if limit is None or span_ms <= limit)


def rate_counts(rc, out) -> None:
    """A range's kept messages per topic and time unit."""
    if not len(rc.message_rows):
        return
    kept = rc.column("kept")
    if not kept.any():
        return
    m = rc.messages
    t = pa.table({"topic": m.column("topic"), "store_timestamp": m.column("store_timestamp")}).filter(pa.array(kept))
    ms = t.column("store_timestamp").to_numpy(zero_copy_only=False)
    unit = unit_for(int(ms.max()) - int(ms.min()))  # in Python's integers: store times may span more than a long
    g = pa.table({"topic": t.column("topic"), "time": pa.array(np.floor_divide(ms, unit))}).group_by(
        ["topic", "time"]).aggregate([("time", "count")])
    out.partial("rates.counts", pa.table({
        "topic": g.column("topic"), "unit": pa.repeat(pa.scalar(unit, pa.int32()), g.num_rows), "time": g.column("time"),
        "messages": pc.cast(g.column("time_count"), pa.int64())}, schema=RATE))


FAMILY = Family("rates", "messages per topic over time, for the report's plot", always=True, in_range=rate_counts,
                emits={"rates.counts": RATE})  # read by jobs/audit/report.py
