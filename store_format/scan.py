"""Walking a dump's commitlog by ranges: the range walk that every parallel reader shares (the commitlog data
source, the audit's survey and scan) and the segment ends it needs.  Spark-free: the layers above pass their
compiled framer in (``framer``).  (The windows of consume-queue units and index entries a range reads live with
their readers: store_format.consumequeue.read_unit_window, store_format.indexfile.read_entry_window.)

The walk of a segment is a deterministic chain: from a position, ``frame_at`` says message (go on by its size),
blank (the segment ends) or stop, and after a stop the salvage walk resyncs at ``find_next_frame`` (the first
*confirmed* frame: magic, PHYSICALOFFSET = base + position, framing, and a matching body CRC or, for an empty
body, another frame after it).  A confirmed frame cannot be jumped over by that chain (a message step would need
overlapping records, a resync step stops at the first one), so every confirmed frame lies on the walk from the
segment start.  A range's walk therefore starts at the first confirmed frame at or after its start (the first
range at 0, where the walk starts), follows store_format's salvage walk and stops at the first confirmed frame at
or after its end, where the next range's walk starts: every frame and span of the walk belongs to exactly one
range, whatever the cut (:mod:`store_format.plan`).

Two facts are only known by walking from a segment's start: its first stop or blank (the items after it lie
beyond damage in their segment: ``beyond_first_stop``) and where the salvage walk ends (its first blank; stale
bytes may follow).  They are the segment's ends (:class:`SegmentEnds`), found by the walks of all its ranges
together (:func:`segment_ends`, :func:`walk_ends`).  A third is only known by walking the segments the broker's
recovery walks: where that recovery ends the log (store_format.recovery.predict_cut, the audit's cut).
:func:`cut_to_walk` applies them to a range's items for the walk asked for (:data:`WALKS`).
"""
from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import TYPE_CHECKING, Iterable, Iterator, NamedTuple

import numpy as np

from . import layout as L
from .commitlog import KIND_BLANK, KIND_MESSAGE, KIND_STOP, Frame, FrameArrays, SalvageSpan, \
    container_range_items, find_next_frame, in_container, salvage_arrays
from .fs import ReadOnlyMap
from .errors import ErrorKind, RecordError
from .fs import Location
from .plan import SegmentRange

if TYPE_CHECKING:
    from .recovery import Cut

#: the walks a reader can ask for, named by what they return (:func:`cut_to_walk`):
#: ``kept``, what the broker keeps after its predicted recovery: the items before the cut the audit reports
#: (store_format.recovery.predict_cut: the broker drops everything from there on), and its stop there;
#: ``salvage``, everything intact: every frame the salvage walk finds, past damage and past the cut
WALKS = ("kept", "salvage")
#: what each walk returns, in the words of every ``--walk`` help and the user guide
WALK_MEANINGS = {
    "kept": "what the broker keeps after its predicted recovery: every intact message before the cut the audit "
            "reports (the broker drops everything from there on; intact messages behind damage in a segment its "
            "recovery does not walk are kept, and marked beyond_first_stop)",
    "salvage": "every intact message: also past damage and past the broker's cut (those marked kept = false)",
}
#: earlier names still taken: ``recovery`` cut each segment at its own first stop and went on in the next one,
#: which no broker does; it now names the kept walk
WALK_ALIASES = {"recovery": "kept"}


def canonical_walk(name: str) -> str:
    """A walk's name with an earlier name (:data:`WALK_ALIASES`) replaced; anything else unchanged (an argparse
    ``type`` before ``choices=WALKS``, which names the choices)."""
    return WALK_ALIASES.get(name, name)


def walk_help(default: str) -> str:
    """The ``--walk`` help every job shares."""
    earlier = "; ".join(f"'{old}' is the earlier name of {new}" for old, new in WALK_ALIASES.items())
    return "; ".join(f"{w}: {WALK_MEANINGS[w]}" for w in WALKS) + f" (default {default}; {earlier})"

# Ranged (non-mmap) reads fetch this much past a range end; a decision closer than this to the end of what
# was read is re-made with more bytes.  It bounds a legitimate record: 4 MiB body + 64 KiB (broker >= 4.9.5).
DEFAULT_MAX_RECORD_SIZE = L.DEFAULT_MAX_MESSAGE_SIZE + (64 << 10)


class NeedMoreBytes(Exception):
    """A decision came too close to the end of the bytes read (ranged reads only)."""


@dataclass
class RangeWalk:
    """A range's share of a segment's salvage walk: its items (absolute positions), the position its walk starts
    at (None: no confirmed frame in the range, the previous range's walk covers it) and the position the next
    range's walk starts at (None: this walk runs to the segment's end).  Consecutive ranges' items tile the
    segment: every byte from ``first`` to ``until`` belongs to one of this range's items or lies after its last
    stop."""

    items: FrameArrays
    first: int | None
    until: int | None


def range_items(buf, w0: int, complete: bool, name: str, base: int, start: int, end: int, last: bool,
                **kwargs) -> FrameArrays:
    """The salvage-walk items (absolute positions) owned by range [start, end) (:func:`range_walk`)."""
    return range_walk(buf, w0, complete, name, base, start, end, last, **kwargs).items


def range_walk(buf, w0: int, complete: bool, name: str, base: int, start: int, end: int, last: bool, *,
               check_crc: bool = True, excerpt_bytes: int = 32, margin: int = 0,
               segment_length: int | None = None, crc_checked_before: int = 0, framer=None) -> RangeWalk:
    """The salvage-walk items (absolute positions) owned by range [start, end), framed in bulk; messages before
    ``crc_checked_before`` are known to pass the CRC check (the first pass checked the walk up to its stop).

    ``buf`` holds the segment's bytes from ``w0``; ``complete`` says it runs to the segment's end.  An
    incomplete buffer raises :class:`NeedMoreBytes` when a decision may depend on bytes it lacks: one within
    ``margin`` of its end, a stop that the segment's end decides (a blank, a record running past the
    bytes), or a blank of the whole segment skipped over by a search.  ``framer``: the bulk framer
    (``decoding.kernels.CompiledFramer`` from the layers above; None: store_format's numpy one)."""
    lim = len(buf)
    rbase = base + w0  # positions below are relative to w0; PHYSICALOFFSET checks use base + w0 + rel
    doubt = _Doubt(buf, w0, complete, margin, segment_length)
    if start == 0:
        s = 0  # the walk itself starts here, confirmed or not
    else:
        # only a frame before the range end matters (and an unbounded search would rescan the zero tail)
        s = find_next_frame(buf, start - w0, lim, rbase, before=end - w0)
        doubt.search(start - w0, s, end - w0)
        if s is None:  # no confirmed frame in the range: the previous range's covers it
            return RangeWalk(FrameArrays.empty(name, base), None, None)
    e = None if last else find_next_frame(buf, end - w0, lim, rbase)
    if not last:
        doubt.search(end - w0, e)
    items = salvage_arrays(buf, name, rbase, start=s, limit=lim, until=e, check_crc=check_crc,
                           excerpt_len=excerpt_bytes, crc_checked_before=max(0, crc_checked_before - w0),
                           framer=framer)
    doubt.items(items)
    return RangeWalk(items.moved(w0), s + w0, None if e is None else e + w0)


class _Doubt:
    """Decisions an incomplete buffer (ranged reads) cannot make alone; raises :class:`NeedMoreBytes`."""

    _BLANK = L.BLANK_MAGIC.to_bytes(4, "big", signed=True)

    def __init__(self, buf, w0: int, complete: bool, margin: int, segment_length: int | None):
        self.buf, self.w0, self.off, self.margin, self.seg_len = buf, w0, complete, margin, segment_length

    def search(self, lo: int, found: int | None, bound: int | None = None):
        """A search from ``lo`` found ``found`` (None: no frame before ``bound``, or before the bytes' end)."""
        if self.off:
            return
        if found is None and bound is None:
            raise NeedMoreBytes  # a frame may lie past the bytes read
        hi = bound if found is None else found
        if hi > len(self.buf) - self.margin or self._blank_in(lo, hi):
            raise NeedMoreBytes

    def items(self, items: FrameArrays):
        if self.off:
            return
        if len(items) and items.positions.max() > len(self.buf) - self.margin:
            raise NeedMoreBytes
        for it in items.others.values():
            if isinstance(it, SalvageSpan):
                if self._blank_in(it.file_position, it.file_position + it.length):
                    raise NeedMoreBytes
            elif it.kind == "stop" and (it.magic == L.BLANK_MAGIC or it.stop_kind == ErrorKind.TRUNCATED.value):
                raise NeedMoreBytes

    def _blank_in(self, lo: int, hi: int) -> bool:
        """A blank header in [lo, hi) whose TOTALSIZE reaches exactly the segment's end."""
        if self.seg_len is None:
            return False
        i = self.buf.find(self._BLANK, lo + 4, hi + 4)
        while i >= 0:
            p = i - 4
            if int.from_bytes(self.buf[p:p + 4], "big", signed=True) == self.seg_len - self.w0 - p:
                return True
            i = self.buf.find(self._BLANK, i + 1, hi + 4)
        return False


def read_range_walk(loc: Location, name: str, base: int, length: int, start: int, end: int, last: bool, *,
                     check_crc: bool = True, excerpt_bytes: int = 32, crc_checked_before: int = 0, io: str = "auto",
                     max_record_size: int = DEFAULT_MAX_RECORD_SIZE, framer=None):
    """(walk, buffer, buffer offset) for the range [start, end) of a segment (:func:`range_walk`): a read-only
    mmap for local files (the caller closes it), else ranged reads that grow until every decision was made with
    ``max_record_size`` bytes to spare."""
    kwargs = dict(check_crc=check_crc, excerpt_bytes=excerpt_bytes, crc_checked_before=crc_checked_before,
                  framer=framer)
    if in_container(loc):  # records inside a container's entries: the container's walk, over the whole file
        handle = ReadOnlyMap(loc.local_path) if loc.local_path is not None else None
        buf = handle.buf if handle is not None else loc.read_range(0, length)
        items, first, until = container_range_items(buf, name, base, start, end, last, check_crc=check_crc,
                                                     excerpt_len=excerpt_bytes, framer=framer)
        return RangeWalk(items, first, until), (handle if handle is not None else buf), 0
    local = loc.local_path
    if local is not None and io == "auto":
        m = ReadOnlyMap(local)
        try:
            walk = range_walk(m.buf, 0, True, name, base, start, end, last, **kwargs)
        except BaseException:
            m.close()
            raise
        return walk, m, 0
    w0 = start
    w1 = length if last else min(length, end + 2 * max_record_size)
    while True:
        buf = loc.read_range(w0, w1 - w0)
        if len(buf) != w1 - w0:
            raise RecordError(ErrorKind.TRUNCATED, f"read {len(buf)} of {w1 - w0} bytes at {w0}; the file changed "
                              "while it was read", file=str(loc), position=w0)
        try:
            walk = range_walk(buf, w0, w1 == length, name, base, start, end, last,
                              margin=max_record_size, segment_length=length, **kwargs)
            return walk, buf, w0
        except NeedMoreBytes:
            w1 = min(length, w0 + 2 * (w1 - w0))


class SegmentEnds(NamedTuple):
    """Where a segment's walks end: ``first_stop``, its first stop or blank (what follows lies beyond damage in the
    segment), and ``first_blank`` (the salvage walk ends there); None where the walk found none."""

    first_stop: int | None
    first_blank: int | None

    @classmethod
    def of(cls, stops: Iterable[int | None], blanks: Iterable[int | None]) -> "SegmentEnds":
        """From the positions of a walk's stops and blanks (any order, from any of its ranges; a blank is a stop
        of the recovery walk too)."""
        blanks = [b for b in blanks if b is not None]
        stops = [s for s in stops if s is not None] + blanks
        return cls(min(stops) if stops else None, min(blanks) if blanks else None)


def segment_ends(items_of_ranges: Iterable[FrameArrays]) -> SegmentEnds:
    """The ends of a segment from the items of every range of its walk."""
    stops, blanks = [], []
    for items in items_of_ranges:
        stops += [it.file_position for it in items.others.values() if not isinstance(it, SalvageSpan)]
        blanks += items.positions[items.kinds == KIND_BLANK].tolist()
    return SegmentEnds.of(stops, blanks)


def walk_ends(ranges: list[SegmentRange], *, check_crc: bool = True, parallelism: int | None = None,
              framer=None, **walk_options) -> dict[str, tuple]:
    """The ends of the segments whose ranges are ``ranges`` (every range of each), as a first pass finds them
    (``{"broker/segment": (first_stop, first_blank, crc_checked_before)}``: :func:`with_crc_checked`), walked in
    this process, ``parallelism`` ranges at a time (threads: the compiled framer releases the GIL).
    ``walk_options``: :func:`read_range_walk`'s (``io``, ``excerpt_bytes``, ``max_record_size``)."""
    def walk(r: SegmentRange) -> FrameArrays:
        w, handle, _ = read_range_walk(r.loc, r.name, r.base, r.length, r.start, r.end, r.last, check_crc=check_crc,
                                       crc_checked_before=r.crc_checked_before, framer=framer, **walk_options)
        if isinstance(handle, ReadOnlyMap):
            handle.close()
        return w.items

    with ThreadPoolExecutor(max(1, min(len(ranges), parallelism or os.cpu_count() or 2))) as pool:
        found = list(pool.map(walk, ranges))
    by_segment: dict[str, list] = {}
    for r, items in zip(ranges, found):
        by_segment.setdefault(r.key, []).append(items)
    return {key: with_crc_checked(segment_ends(items), check_crc) for key, items in by_segment.items()}


def with_crc_checked(ends: SegmentEnds, check_crc: bool) -> tuple:
    """A segment's ends as a second pass gets them: a walk that found them with CRC checks has checked every
    message before its first stop, so the second pass need not check those again."""
    return ends.first_stop, ends.first_blank, (ends.first_stop or 0) if check_crc else 0


def cut_to_walk(items: FrameArrays, walk: str, first_stop: int | None, first_blank: int | None,
                cut: "Cut | None" = None) -> FrameArrays:
    """A range's (or segment's) items as ``walk`` returns them.  The salvage walk ends at its segment's first blank
    (stale bytes may follow).  The kept walk is those items before ``cut`` (the broker's predicted recovery:
    :class:`store_format.recovery.Cut`), and the broker's stop or blank at the cut; a message our framing accepts
    where the broker's walk refuses it (a forced ``__CRC32#`` check) is that stop.  ``first_stop`` is not needed:
    it is what ``beyond_first_stop`` is decided from."""
    if first_blank is not None and len(items) and items.positions[-1] > first_blank:
        items = items.take(items.positions <= first_blank)
    if walk == "salvage":
        return items
    if walk != "kept" or cut is None:
        raise ValueError(f"walk {walk!r}: the kept walk needs the broker's cut; walks are {', '.join(WALKS)}")
    phys = items.positions + items.base_offset
    at = phys == cut.physical_offset
    keep = (phys < cut.physical_offset) | (at & ((items.kinds == KIND_STOP) | (items.kinds == KIND_BLANK)))
    refused = np.flatnonzero(at & (items.kinds == KIND_MESSAGE))
    if len(refused) and cut.kind is not None:
        i = int(refused[0])
        keep[i] = True
        kinds = items.kinds.copy()
        kinds[i] = KIND_STOP
        stop = Frame("stop", items.segment, int(items.positions[i]), cut.physical_offset, int(items.sizes[i]),
                     int(items.magics[i]), stop_kind=cut.kind, stop_field=cut.field,
                     stop_message="the broker's recovery refuses this record (its predicted cut)")
        items = FrameArrays(items.segment, items.base_offset, items.positions, items.sizes, kinds, items.magics,
                            {**items.others, i: stop})
    return items if keep.all() else items.take(keep)


def kept_items(items: Iterable, cut: "Cut") -> Iterator:
    """:func:`cut_to_walk`'s kept walk over a whole salvage walk's items (:class:`Frame` / :class:`SalvageSpan`, the
    segments in order: ``Store.walk_commitlog(salvage=True)``), one at a time: those before the cut, then the broker's
    stop there (a message our framing accepts at the cut is that stop), and nothing after it."""
    for it in items:
        phys = it.physical_offset if isinstance(it, Frame) else int(it.segment) + it.file_position
        if phys < cut.physical_offset:
            yield it
            continue
        if phys == cut.physical_offset and isinstance(it, Frame):
            if it.kind != "message":
                yield it
            elif cut.kind is not None:
                yield Frame("stop", it.segment, it.file_position, phys, it.size, it.magic, stop_kind=cut.kind,
                            stop_field=cut.field, stop_message="the broker's recovery refuses this record (its "
                                                               "predicted cut)")
        return


def span_detail(span: SalvageSpan) -> str:
    """A row's ``detail`` for an unframeable span."""
    return f"{span.length} bytes no walk could frame" + (
        f", then {span.unwritten_tail} zero bytes to the segment's end (its unwritten tail)" if span.unwritten_tail
        else "")


__all__ = ["WALKS", "WALK_MEANINGS", "WALK_ALIASES", "canonical_walk", "walk_help", "DEFAULT_MAX_RECORD_SIZE",
           "RangeWalk", "range_walk", "range_items", "read_range_walk", "SegmentEnds", "segment_ends", "walk_ends",
           "with_crc_checked", "cut_to_walk", "kept_items", "span_detail"]
