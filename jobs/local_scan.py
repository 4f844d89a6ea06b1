"""Scans of small dumps in this process, through the store layer, for the questions a person asks at a prompt
(query's time ranges, tags, a key the index cannot answer, --explain's fallback): a Spark session costs 10-20
seconds to start, and walking a few hundred MB here costs less than that.

Each segment the query can concern (its store-time span, as :func:`jobs.extract.segments_in_time_range` says)
is walked with store_format's bulk salvage walk and cut to the walk asked for (store_format.scan.cut_to_walk: the
kept walk ends at the broker's predicted cut), the columns the query filters on are decoded in bulk
(decoding.kernels), and only the messages kept are decoded whole.  The rows are the ones the Spark scan gives
(``rocketmq-commitlog``, materialize=decoded): the same walk, the same ``beyond_first_stop``; tests/test_query.py
holds the two equal.  The lead's store layer will be this
module's home once it has a planned scan of its own.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Iterator

import numpy as np

from store_format.codec import decode_record
from store_format.commitlog import KIND_CORRUPT, KIND_MESSAGE, KINDS, ReadOnlyMap, salvage_segment
from store_format.message import Message
from store_format.recovery import Cut
from store_format.scan import cut_to_walk, segment_ends
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


def scan(store: Store, criteria: Criteria, cut: Cut, *, walk: str = "kept") -> Iterator[tuple[Message, bool]]:
    """(message, beyond_first_stop) of every message ``walk`` returns (store_format.scan.WALKS; ``cut``: the broker's
    predicted recovery, store_format.recovery.predict_cut) that meets ``criteria``, in physical order."""
    for seg in segments_to_read(store, criteria.lo, criteria.hi):
        if walk == "kept" and seg.base_offset > cut.physical_offset:
            return  # the broker deletes this segment and every later one
        with ReadOnlyMap(seg.path) as m:
            yield from _segment(m.buf, seg, criteria, walk, cut)


def _segment(buf, seg, c: Criteria, walk: str, cut: Cut) -> Iterator[tuple[Message, bool]]:
    import pyarrow as pa
    import pyarrow.compute as pc

    from decoding.kernels import decode_buffer

    name = seg.name
    items = salvage_segment(seg, buf)
    first_stop, first_blank = segment_ends([items])
    items = cut_to_walk(items, walk, first_stop, first_blank, cut)
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
        yield decode_record(buf, p, file=name), bool(first_stop is not None and p > first_stop)


@dataclass(frozen=True)
class DamageSpan:
    """Bytes of a segment the salvage walk cannot frame, with the store times of the intact records around them
    (None: none on that side in the segment)."""

    physical_offset: int
    file_position: int
    length: int
    reason: str
    before_ms: int | None
    after_ms: int | None


def damage_between_times(store: Store, seg, lo: int, hi: int) -> list[DamageSpan]:
    """The unframeable spans of ``seg`` that lie between a record stored at or before ``hi`` and one stored at or
    after ``lo``: where messages stored within [lo, hi] may have been."""
    from decoding.kernels import decode_buffer

    out = []
    with ReadOnlyMap(seg.path) as m:
        items = salvage_segment(seg, m.buf)
        items = cut_to_walk(items, "salvage", *segment_ends([items]))
        spans = np.flatnonzero(items.kinds == KIND_CORRUPT)
        if not len(spans):
            return out
        rows = np.flatnonzero(items.kinds == KIND_MESSAGE)
        times = decode_buffer(m.buf, items.positions[rows], items.sizes[rows], columns=("store_timestamp",)) \
            .column("store_timestamp").to_numpy(zero_copy_only=False) if len(rows) else np.zeros(0, np.int64)
        for i in spans.tolist():
            k = int(np.searchsorted(rows, i))
            before = int(times[k - 1]) if k > 0 else None
            after = int(times[k]) if k < len(rows) else None
            if (before is None or before <= hi) and (after is None or after >= lo):
                span = items.others[i]
                out.append(DamageSpan(seg.base_offset + span.file_position, span.file_position, span.length,
                                      span.reason, before, after))
    return out


def walk_item_at(store: Store, segment: str, offset: int) -> dict | None:
    """The salvage walk's last item of ``segment`` at or before physical ``offset`` (kind, physical_offset,
    length, store_size, reason, detail), or None: what query --explain says lies where a msg id points."""
    seg = next((s for s in store.segments if s.name == segment), None)
    if seg is None:
        return None
    with ReadOnlyMap(seg.path) as m:
        items = salvage_segment(seg, m.buf)
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
