"""What a store still says about a message it cannot give back, for ``query --explain``: the consume-queue units and
index entries that point at it, and what lies where they point now -- a damaged record whose header still frames it,
bytes no walk can frame, or zeros where written data should be.  A message something in the store still refers to
is DESTROYED or DAMAGED, never NEVER_WRITTEN.  No Spark: a few file reads per question (the consume queues of the
topics asked about are read whole, in bulk).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable

import numpy as np

from store_format.commitlog import END_OF_DATA, frame_at
from store_format.fs import ReadOnlyMap
from store_format.javahash import tags_code
from store_format.queues import group_queues
from store_format.recovery import describe_damaged_record, frames_a_message
from store_format.store import Store

_ZERO_RUN_MIN = 16  # fewer zero bytes than this inside a record are data, not a zeroed range


@dataclass(frozen=True)
class QueueUnit:
    """A consume-queue unit that points at a physical offset."""

    topic: str
    queue_id: int
    queue_offset: int
    physical_offset: int
    size: int
    tags_code: int

    @property
    def name(self) -> str:
        return f"{self.topic}/{self.queue_id} queue offset {self.queue_offset}"


@dataclass(frozen=True)
class Remains:
    """What lies at a physical offset where no intact record starts.  ``state``: ``damaged`` (a record's header still
    frames it, and it fails a check: ``damage`` is the check), ``destroyed`` (no record can be framed there: its
    header is gone), ``unwritten`` (zeros from there to the end of the segment's data: never written to disk, or
    zeroed), ``inside`` (it lies inside another, intact record) or ``outside`` (no segment holds it)."""

    physical_offset: int
    state: str
    what: str  # in words: what the bytes there are, and what destroyed them
    segment: str | None = None
    file_position: int | None = None
    damage: str | None = None  # the walk's stop kind there (BAD_CRC, BAD_MAGIC, ...)
    header: dict | None = None  # a damaged record's own header (store_format.recovery.describe_damaged_record)

    @property
    def where(self) -> str:
        return f"physical offset {self.physical_offset}" + (
            f", segment {self.segment} byte {self.file_position}" if self.segment is not None else "")

    def carries(self, key: str) -> bool:
        """A damaged record whose properties still name ``key`` (its UNIQ_KEY or a KEYS entry)."""
        h = self.header or {}
        return key == h.get("uniq_key") or key in (h.get("keys") or [])


def remains_at(store: Store, offset: int) -> Remains | None:
    """What lies at ``offset``; None where an intact record starts (the caller reads it)."""
    from jobs.local_scan import walk_item_at

    seg = next((s for s in store.segments
                if s.base_offset <= offset < s.base_offset + (store.segment_size or s.length)), None)
    if seg is None:
        return Remains(offset, "outside", "no commitlog segment holds it")
    pos = offset - seg.base_offset
    with ReadOnlyMap(seg.path) as m:
        buf = m.buf
        if pos >= len(buf):
            return Remains(offset, "outside", f"past the end of segment {seg.name} ({len(buf)} bytes)", seg.name, pos)
        found = frame_at(buf, pos, len(buf), seg.base_offset)
        if found.kind == "message":
            return None
        if found.kind == "stop" and frames_a_message(found.stop_kind, found.stop_field):
            header = describe_damaged_record(buf, pos)
            zeros = _first_zero_run(buf, pos, pos + found.size)
            what = f"its header frames a {found.size}-byte record, which fails the check ({found.stop_kind}: " \
                   f"{found.stop_message})"
            if zeros is not None:
                what += f"; its bytes {_span(seg.base_offset, zeros)} are zeros"
            return Remains(offset, "damaged", what, seg.name, pos, found.stop_kind, header)
        zeros = _zeros_around(buf, pos)
    item = walk_item_at(store, seg.name, offset)
    if item is not None and item["kind"] == "message" and offset < item["physical_offset"] + item["store_size"]:
        return Remains(offset, "inside", f"it lies inside the intact record at {item['physical_offset']} "
                                         f"({item['store_size']} bytes)", seg.name, pos)
    if item is not None and item["kind"] == "stop" and item["reason"] == END_OF_DATA:
        return Remains(offset, "unwritten", f"the segment holds zeros from {item['physical_offset']} to the end of "
                                            "its data: the record never reached the disk, or its bytes were zeroed",
                       seg.name, pos, END_OF_DATA)
    if item is not None and item["kind"] == "corrupt":
        what = f"it lies in {item['length']} bytes no walk can frame, from {item['physical_offset']} (the walk " \
               f"stopped there: {item['reason']})"
        damage = item["reason"]
    else:
        what, damage = f"no record can be framed there ({found.stop_kind}: {found.stop_message})", found.stop_kind
    if zeros is not None:
        what += f"; its header lies in the zeros {_span(seg.base_offset, zeros)}"
    return Remains(offset, "destroyed", what, seg.name, pos, damage)


def _span(base: int, run: tuple[int, int]) -> str:
    a, b = run
    return f"from {base + a} to {base + b} ({b - a} bytes)"


def _zeros_around(buf, pos: int, reach: int = 1 << 20) -> tuple[int, int] | None:
    """The run of zero bytes holding ``pos`` (looked for up to ``reach`` bytes either side), or None."""
    if pos >= len(buf) or buf[pos]:
        return None
    lo, hi = max(0, pos - reach), min(len(buf), pos + reach)
    data = np.frombuffer(buf, np.uint8, hi - lo, lo)
    nz_before = np.flatnonzero(data[:pos - lo])
    nz_after = np.flatnonzero(data[pos - lo:])
    start = lo + int(nz_before[-1]) + 1 if len(nz_before) else lo
    end = pos + int(nz_after[0]) if len(nz_after) else hi
    return start, end


def _first_zero_run(buf, lo: int, hi: int) -> tuple[int, int] | None:
    """The first run of at least :data:`_ZERO_RUN_MIN` zero bytes in [lo, hi), extended past ``hi`` while it lasts."""
    hi = min(hi, len(buf))
    if hi <= lo:
        return None
    zero = np.frombuffer(buf, np.uint8, hi - lo, lo) == 0
    edges = np.diff(np.concatenate(([0], zero.view(np.int8), [0])))
    starts, ends = np.flatnonzero(edges == 1), np.flatnonzero(edges == -1)
    long = np.flatnonzero(ends - starts >= _ZERO_RUN_MIN)
    if not len(long):
        return None
    run = _zeros_around(buf, lo + int(starts[long[0]]))
    return (max(run[0], lo + int(starts[long[0]])), run[1]) if run else None


def units_pointing_at(store: Store, offsets: Iterable[int], topics: Iterable[str] | None = None
                      ) -> dict[int, list[QueueUnit]]:
    """{physical offset: the consume-queue units that point at it}, in the queues of ``topics`` (None: every queue)."""
    wanted = np.array(sorted(set(offsets)), np.int64)
    return _units(store, topics, lambda phys: np.isin(phys, wanted)) if len(wanted) else {}


def units_pointing_into(store: Store, lo: int, hi: int, topics: Iterable[str] | None = None
                        ) -> dict[int, list[QueueUnit]]:
    """:func:`units_pointing_at` for every offset in [lo, hi) (a span of damaged bytes, however long)."""
    return _units(store, topics, lambda phys: (phys >= lo) & (phys < hi))


def _consume_queues(store: Store) -> list[tuple[tuple[str, int], list]]:
    """(key, files) of the consume queues the broker reads, whatever their backend (store_format.queues: the files
    of ``consumequeue/``, or a database backend's queues there), by key."""
    return sorted(((q.key, list(q.files)) for q in group_queues(store.queue_files)), key=lambda kv: kv[0])


def _units(store: Store, topics: Iterable[str] | None, pointing) -> dict[int, list[QueueUnit]]:
    chosen = None if topics is None else set(topics)
    out: dict[int, list[QueueUnit]] = {}
    for (topic, qid), files in _consume_queues(store):
        if chosen is not None and topic not in chosen:
            continue
        for f in files:
            a = f.units()
            for i in np.flatnonzero(a.valid & pointing(a.physical_offset)).tolist():
                unit = QueueUnit(topic, qid, int(a.queue_offset[i]), int(a.physical_offset[i]), int(a.size[i]),
                                 int(a.tags_code[i]))
                out.setdefault(unit.physical_offset, []).append(unit)
    return out


def units_with_tag(store: Store, topic: str, tag: str) -> list[QueueUnit]:
    """The consume-queue units of ``topic`` whose tags code is ``tag``'s (the hash the broker dispatched)."""
    code = tags_code(tag)
    out = []
    for (t, qid), files in _consume_queues(store):
        if t != topic:
            continue
        for f in files:
            a = f.units()
            for i in np.flatnonzero(a.valid & (a.tags_code == code)).tolist():
                out.append(QueueUnit(t, qid, int(a.queue_offset[i]), int(a.physical_offset[i]), int(a.size[i]),
                                     code))
    return out


__all__ = ["QueueUnit", "Remains", "remains_at", "units_pointing_at", "units_pointing_into", "units_with_tag"]
