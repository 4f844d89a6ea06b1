"""A hand-built range for testing one check family (jobs/audit/contract.py) without an audit: a few records laid
end to end in one segment, the consume-queue units and index entries that point at them, and the
:class:`jobs.audit.scan.RangeContext` a scan task would hand the family's ``in_range`` hook, owning every offset.

    rc = hand_built_range(tmp_path, [Message(...), ...], units=[unit_of(0, queue_offset=0)])
    out = Emitter()
    consumequeue.FAMILY.in_range(rc, out)

Every record is kept by recovery unless ``recovered_end`` says otherwise; units are written to a real consume-queue
file and routed as the survey would route them (jobs/audit/routes.py), so the family reads them through
``rc.routed("consumequeue")`` exactly as in an audit.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from jobs.audit.plan import Buckets
from jobs.audit.routes import RoutedFile
from jobs.audit.scan import INF, NEG_INF, BrokerFacts, RangeContext, RangePart
from store_format import layout as L
from store_format.codec import encode_record
from store_format.commitlog import salvage_arrays, segment_name
from store_format.consumequeue import unit_bytes
from store_format.fs import resolve
from store_format.message import Message

SHIFT = 20  # routing buckets of a small store: 1 MiB each


@dataclass(frozen=True)
class Unit:
    """A consume-queue unit to write: its queue, its queue offset, and what it says (physical offset, size, tags
    code)."""

    topic: str
    queue_id: int
    queue_offset: int
    physical_offset: int
    size: int
    tags_code: int = 0


def laid(records: list[Message], base: int = 0) -> tuple[bytes, list[Message]]:
    """The records encoded back to back from physical offset ``base`` (their physical offsets set), and the records
    as laid."""
    out, placed, pos = bytearray(), [], base
    for m in records:
        m = Message(**{**vars(m), "physical_offset": pos})
        raw = encode_record(m)
        out += raw
        placed.append(Message(**{**vars(m), "store_size": len(raw)}))
        pos += len(raw)
    return bytes(out), placed


def unit_of(m: Message, *, size: int | None = None, tags_code: int | None = None, queue_offset: int | None = None
            ) -> Unit:
    """The unit the broker dispatches for ``m`` (each field may be forced, to forge a wrong one)."""
    return Unit(m.topic, m.queue_id, m.queue_offset if queue_offset is None else queue_offset, m.physical_offset,
                m.store_size if size is None else size, m.tags_code if tags_code is None else tags_code)


def hand_built_range(folder: Path, records: list[Message], units: list[Unit] = (), *, families: tuple = (),
                     recovered_end: int | None = None, broker: str = "b", segment_size: int = 1 << 20
                     ) -> RangeContext:
    """The range a scan task would build over ``records`` (one segment from physical offset 0, owning every offset),
    with ``units`` written under ``folder`` as consume-queue files and routed to it."""
    buf, placed = laid(records)
    buf = buf + bytes(segment_size - len(buf))
    items = salvage_arrays(buf, segment_name(0), 0)
    end = len(buf)
    routed = []
    by_queue: dict[tuple, list[Unit]] = {}
    for u in units:
        by_queue.setdefault((u.topic, u.queue_id), []).append(u)
    for (topic, qid), mine in sorted(by_queue.items()):
        mine = sorted(mine, key=lambda u: u.queue_offset)
        first = mine[0].queue_offset
        data = bytearray((mine[-1].queue_offset - first + 1) * L.CQ_STORE_UNIT_SIZE)
        for u in mine:
            at = (u.queue_offset - first) * L.CQ_STORE_UNIT_SIZE
            data[at:at + L.CQ_STORE_UNIT_SIZE] = unit_bytes(u.physical_offset, u.size, u.tags_code)
        path = folder / "consumequeue" / topic / str(qid) / f"{first * L.CQ_STORE_UNIT_SIZE:020d}"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(bytes(data))
        phys = np.array([u.physical_offset for u in mine], np.int64)
        rows = np.array([u.queue_offset - first for u in mine], np.int64)
        buckets = Buckets.of_offsets(phys, rows, SHIFT, end)
        routed.append(RoutedFile(resolve(path), path.name, buckets, {"topic": topic, "queue_id": qid,
                                                                     "first_queue_offset": first}))
    facts = BrokerFacts(
        broker=broker, families=tuple(families), check_crc=True, segment_size=segment_size,
        recovered_end=end if recovered_end is None else recovered_end, recovery_stop=None, reput_from=end,
        has_commitlog=True, truncate_queues=False, index_pending_from=end, indexed=True, shift=SHIFT,
        commitlog_end=end, routed={"consumequeue": routed})
    return RangeContext(facts, (RangePart(segment_name(0), 0, 0, None, 0, NEG_INF, INF, 0),), items, buf, 0, NEG_INF,
                        INF)


__all__ = ["Unit", "laid", "unit_of", "hand_built_range"]
