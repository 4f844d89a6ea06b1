"""Scans of small dumps in this process, through the store layer, for the questions a person asks at a prompt
(query's time ranges, tags, a key the index cannot answer, --explain's fallback): a Spark session costs 10-20
seconds to start, and walking a few hundred MB here costs less than that.

Each segment the query can concern (its store-time span, as :func:`jobs.extract.segments_in_time_range` says)
is walked with store_format's bulk walks (the recovery walk, or the salvage walk that also frames past damage),
the columns the query filters on are decoded in bulk (udfs.kernels), and only the messages kept are decoded
whole.  The rows are the ones the Spark scan gives (``rocketmq-commitlog``, materialize=decoded): the same walk,
the same ``beyond_first_stop``; tests/test_query.py holds the two equal.  The lead's store layer will be this
module's home once it has a planned scan of its own.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Iterator

import numpy as np

from store_format.codec import decode_record
from store_format.commitlog import KIND_BLANK, KIND_MESSAGE, KIND_STOP, KINDS, ReadOnlyMap, salvage_arrays, \
    walk_arrays
from store_format.message import Message
from store_format.store import Store

# Stores whose segments to read hold at most this many bytes are scanned here; larger ones by Spark.
LOCAL_SCAN_BYTES = 256 << 20
_FILTER_COLUMNS = ("store_timestamp", "topic", "tags", "keys", "uniq_key")


@dataclass(frozen=True)
class Criteria:
    """What a scan keeps (every given criterion holds): store time in [lo, hi], a topic, a tag, and a key (a
    KEYS entry or the UNIQ_KEY) or a UNIQ_KEY alone."""

    lo: int | None = None
    hi: int | None = None
    topic: str | None = None
    tag: str | None = None
    key: str | None = None
    uniq_key: str | None = None


def segments_to_read(store: Store, lo: int | None, hi: int | None) -> list:
    """The segments whose store times can meet [lo, hi], in order."""
    from jobs.extract import segments_in_time_range

    names = segments_in_time_range(store, lo, hi)
    return [s for s in store.segments if names is None or s.name in names]


def bytes_to_read(store: Store, lo: int | None, hi: int | None) -> int:
    return sum(s.length for s in segments_to_read(store, lo, hi))


def scan(store: Store, criteria: Criteria, *, walk: str = "recovery") -> Iterator[tuple[Message, bool | None]]:
    """(message, beyond_first_stop) of every message the walk frames that meets ``criteria``, in physical order;
    ``beyond_first_stop`` is None for the recovery walk (it never goes past a stop)."""
    for seg in segments_to_read(store, criteria.lo, criteria.hi):
        with ReadOnlyMap(seg.path) as m:
            yield from _segment(m.buf, seg.name, seg.base_offset, criteria, walk)


def _segment(buf, name: str, base: int, c: Criteria, walk: str) -> Iterator[tuple[Message, bool | None]]:
    import pyarrow as pa
    import pyarrow.compute as pc

    from udfs.kernels import decode_buffer

    items = walk_arrays(buf, name, base) if walk == "recovery" else salvage_arrays(buf, name, base)
    # the recovery walk stops at the segment's first stop or blank; what the salvage walk frames later is beyond
    stops = items.positions[(items.kinds == KIND_STOP) | (items.kinds == KIND_BLANK)]
    first_stop = int(stops.min()) if len(stops) else None
    rows = items.kinds == KIND_MESSAGE
    positions, sizes = items.positions[rows], items.sizes[rows]
    if not len(positions):
        return
    t = pa.table(decode_buffer(buf, positions, sizes, columns=_FILTER_COLUMNS))
    keep = np.ones(len(positions), bool)

    def holds(condition) -> np.ndarray:
        return pc.fill_null(condition, False).to_numpy(zero_copy_only=False)

    ts = t.column("store_timestamp")
    if c.lo is not None:
        keep &= holds(pc.greater_equal(ts, c.lo))
    if c.hi is not None:
        keep &= holds(pc.less_equal(ts, c.hi))
    if c.topic is not None:
        keep &= holds(pc.equal(t.column("topic"), c.topic))
    if c.tag is not None:
        keep &= holds(pc.equal(t.column("tags"), c.tag))
    if c.uniq_key is not None:
        keep &= holds(pc.equal(t.column("uniq_key"), c.uniq_key))
    if c.key is not None:  # a KEYS entry, or the UNIQ_KEY
        keys = t.column("keys").combine_chunks()
        listed = np.zeros(len(positions), bool)
        listed[pc.list_parent_indices(keys).filter(holds(pc.equal(pc.list_flatten(keys), c.key))).to_numpy()] = True
        keep &= listed | holds(pc.equal(t.column("uniq_key"), c.key))
    for p in positions[keep].tolist():
        beyond = None if walk == "recovery" else bool(first_stop is not None and p > first_stop)
        yield decode_record(buf, p, file=name), beyond


def walk_item_at(store: Store, segment: str, offset: int) -> dict | None:
    """The salvage walk's last item of ``segment`` at or before physical ``offset`` (kind, physical_offset,
    length, store_size, reason, detail), or None: what query --explain says lies where a msg id points."""
    seg = next((s for s in store.segments if s.name == segment), None)
    if seg is None:
        return None
    with ReadOnlyMap(seg.path) as m:
        items = salvage_arrays(m.buf, seg.name, seg.base_offset)
    i = int(np.searchsorted(items.positions, offset - seg.base_offset, side="right")) - 1
    if i < 0:
        return None
    item, kind = items.others.get(i), KINDS[int(items.kinds[i])]
    row = {"kind": kind, "physical_offset": seg.base_offset + int(items.positions[i]), "store_size": None,
           "length": None, "reason": None, "detail": None}
    if kind == "corrupt":
        row.update(length=item.length, reason=item.reason)
    elif kind == "stop":
        row.update(reason=item.stop_kind, detail=item.stop_message)
    else:
        row["store_size"] = int(items.sizes[i])
    return row
