"""What a parallel read of a dump reads, decided from the listing alone: where each segment's written data ends,
how segments are cut into byte ranges (the one split policy), and how consume-queue files are grouped.

Every reader that shares a dump out among tasks plans here: the commitlog data source (one Spark task per range)
and the audit (a survey and a scan task per range).  A range is walked by :func:`store_format.scan.read_range_walk`
from the first confirmed frame at or after its start to the first one at or after its end, so ranges may be cut
anywhere: the plan only shares work out, it never decides a record.

The split policy (:func:`range_size`): the written data of every segment (a broker's newest one up to
:func:`written_end`, the others whole) shared out as about TASKS_PER_CORE ranges per core, each at least
MIN_RANGE (a task costs more than it gains below that) and at most the reader's own bound: MAX_RANGE_HELD for a
task that holds its range's decoded columns in memory (the audit: about twice the range, so its memory does not
grow with the segment size), MAX_RANGE_STREAMED for one that streams its rows out in batches (the data source:
what a job builds from one partition, an Arrow UDF's input or a cached table, still grows with it).
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from .commitlog import Segment
from .fs import Location, ReadOnlyMap

MIN_RANGE = 32 << 20
MAX_RANGE_HELD = 64 << 20
MAX_RANGE_STREAMED = 256 << 20
TASKS_PER_CORE = 3  # ranges of uneven cost (damage, the newest segment's data end) still keep every core busy

_PAGE = 4096


def written_end(loc: Location, length: int) -> int:
    """Where a segment's written bytes end, decided by its content alone: the end of the 4 KiB page holding its last
    non-zero byte.  A local file is read backwards from its end (fs.written_length: holes are passed over unread,
    so the file's allocation saves reading but never changes the answer, however the file lies on disk: dense,
    sparse, or sparse with allocated zero blocks); a file on another file system, where each read is a round trip,
    by a binary search over its pages (about 20 ranged reads per GiB), which gives the same page for data followed
    by zeros.  For sharing work out only: the walk never trusts it (the range after it runs to the segment's end)."""
    if loc.local_path is not None:
        with ReadOnlyMap(loc.local_path) as m:  # the read-only way in: no FIFO or device waited on
            last = m.written_length(length)
        return min(length, -(-last // _PAGE) * _PAGE)
    first, last_page = 0, -(-length // _PAGE)  # the first page from which every page is zero
    while first < last_page:
        mid = (first + last_page) // 2
        if not any(loc.read_range(mid * _PAGE, min(_PAGE, length - mid * _PAGE))):
            last_page = mid
        else:
            first = mid + 1
    return min(length, first * _PAGE)


def segment_data(segments: list[tuple[str, Segment]]) -> dict[tuple[str, str], int]:
    """The bytes each (broker, segment) is cut over: a broker's newest segment up to :func:`written_end` (the one
    with the unwritten zero tail), every other segment whole."""
    newest: dict[str, Segment] = {}
    for broker, s in segments:
        if s.base_offset is not None and (broker not in newest or s.base_offset > newest[broker].base_offset):
            newest[broker] = s
    return {(broker, s.name): written_end(s.loc, s.length) if newest.get(broker) is s and s.length else s.length
            for broker, s in segments}


def range_size(data: int, cores: int, requested: int | None = None, *, largest: int = MAX_RANGE_HELD) -> int:
    """The size segments are cut into: ``requested`` when given, else ``data`` bytes over TASKS_PER_CORE ranges per
    core, rounded up to a MiB, within MIN_RANGE..``largest`` (the module docstring)."""
    if requested:
        return requested
    share = -(-max(data, 1) // (TASKS_PER_CORE * max(cores, 1)))
    return int(min(largest, max(MIN_RANGE, -(-share // (1 << 20)) << 20)))


def cut_ranges(length: int, data: int, size: int, *, grid: bool = False) -> list[tuple[int, int, bool]]:
    """(start, end, last) of the ranges of a ``length``-byte segment: its first ``data`` bytes cut into equal
    ranges of at most ``size``, the last running to the segment's end (the walk never trusts ``data``: a
    probe that ends early only makes the ranges uneven).  ``grid``: cut at multiples of ``size`` instead, so
    that a segment written further keeps its earlier ranges (what a scheduled audit's kept parts are keyed by)."""
    n = max(1, math.ceil(data / max(size, 1)))
    step = size if grid else -(-data // n)
    return [(k * step, (k + 1) * step, False) for k in range(n - 1)] + [((n - 1) * step, length, True)]


@dataclass
class SegmentRange:
    """Walk items of one segment whose position lies in [start, next range's sync point)."""

    broker: str
    loc: Location
    name: str
    base: int | None  # None: the name is not a segment name, the file is only reported
    length: int
    start: int
    end: int
    last: bool
    problems: tuple  # ((ErrorKind value, message), ...) about the file, emitted by its first range
    first_stop: int | None = None  # the segment ends; None = unknown (unresolved)
    first_blank: int | None = None
    resolved: bool = False
    crc_checked_before: int = 0  # the pass that found the ends checked every body CRC before this position
    finds_ends: bool = False  # the range is the whole segment: the task's own walk gives the ends
    cut: object = None  # store_format.recovery.Cut: where the broker's predicted recovery ends its log (None: unknown)

    @property
    def key(self) -> str:
        """``broker/segment``: how a segment's ends are named between passes."""
        return f"{self.broker}/{self.name}"


def plan_ranges(segments: list[tuple[str, Segment]], split_size: int | None, cores: int, *,
                largest: int = MAX_RANGE_HELD, grid: bool = False) -> list[SegmentRange]:
    """Every (broker, segment) cut into ranges by the split policy (``split_size`` when given); a file whose name
    is no segment's is one empty range that only reports it.  ``grid``: every segment cut at multiples of
    ``split_size`` (else ``largest``), whatever the store's size (:func:`cut_ranges`)."""
    data = segment_data(segments)
    size = (split_size or largest) if grid else range_size(sum(data.values()), cores, split_size, largest=largest)
    out = []
    for broker, s in segments:
        if s.base_offset is None:
            out.append(SegmentRange(broker, s.loc, s.name, None, s.length, 0, 0, True, s.problems))
            continue
        for k, (start, end, last) in enumerate(cut_ranges(s.length, data[broker, s.name], size, grid=grid)):
            out.append(SegmentRange(broker, s.loc, s.name, s.base_offset, s.length, start, end, last,
                                    s.problems if k == 0 else ()))
    return out


def split_segments(ranges: list[SegmentRange]) -> set[str]:
    """The ``broker/segment`` keys of the segments cut into several ranges (those that need their ends)."""
    count: dict[str, int] = {}
    for r in ranges:
        if r.base is not None:
            count[r.key] = count.get(r.key, 0) + 1
    return {k for k, n in count.items() if n > 1}


GROUP_BYTES = 64 << 20  # consume-queue files per task: 64 MiB of units (3.3 M entries), or
GROUP_FILES = 256  # this many files, whichever comes first


def group_queue_files(files: list, max_bytes: int = GROUP_BYTES, max_files: int = GROUP_FILES,
                      cost=None) -> list[list]:
    """Consume-queue files (each with ``topic``, ``queue_id``, ``name``, ``length``) as groups of whole queues (every
    file of a queue, in name order) of about ``max_bytes`` or ``max_files``: a broker has thousands of queues,
    mostly small, and a task per file would cost more in scheduling than in reading.  ``cost``: a file's bytes
    (default its length; the audit gives store_format.queues.QueueFile.stored_bytes, so that preallocated files of
    a few KB of units fill a group by what they hold, not by their 6 MB each)."""
    cost = cost or (lambda f: f.length)
    queues: dict[tuple, list] = {}
    for f in files:
        queues.setdefault((f.topic, f.queue_id), []).append(f)
    groups, cur, size = [], [], 0
    for key in sorted(queues, key=lambda k: (k[0], k[1] is None, k[1] or 0)):
        q = sorted(queues[key], key=lambda f: f.name)
        qsize = sum(cost(f) for f in q)
        if cur and (size + qsize > max_bytes or len(cur) + len(q) > max_files):
            groups.append(cur)
            cur, size = [], 0
        cur.extend(q)
        size += qsize
    if cur:
        groups.append(cur)
    return groups


__all__ = ["MIN_RANGE", "MAX_RANGE_HELD", "MAX_RANGE_STREAMED", "TASKS_PER_CORE", "written_end", "segment_data",
           "range_size", "cut_ranges", "SegmentRange", "plan_ranges", "split_segments", "GROUP_BYTES", "GROUP_FILES",
           "group_queue_files"]
