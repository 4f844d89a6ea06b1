"""LMQ (light message queue) multi-dispatch: what RocketMQ 5.3.3 writes into ``%LMQ%`` consume queues, predicted
from the records, mishandling included.

Mirrors ``store/LmqDispatch.java`` (write side), ``store/queue/MultiDispatchUtils.java`` and
``store/ConsumeQueue.java`` (``multiDispatchLmqQueue``, ``putMessagePositionInfo``, ``fillPreBlank``).
Grammar of the two properties (``MessageConst``; separator ``MixAll.LMQ_DISPATCH_SEPARATOR`` = ``,``)::

    INNER_MULTI_DISPATCH      name[,name...]        set by the client: the queues to dispatch to
    INNER_MULTI_QUEUE_OFFSET  offset[,offset...]    set at append (enableLmq): each %LMQ% name's next offset,
                                                   "" for any other name (StringUtils.join renders null as "")

An LMQ consume queue is an ordinary 20-byte-unit queue under ``consumequeue/%LMQ%<name>/0/`` (the existing
consume-queue reader reads it); the units carry the record's physical offset, size and tagsCode.

Dispatch (``multiDispatchLmqQueue``), for a NOT/COMMIT record whose topic allows it (not ``%RETRY%``, not
``rmq_sys_``, not ``SCHEDULE_TOPIC_XXXX``) when both properties are non-blank, after its own unit:

* both lists are split as Java's ``String.split`` does (trailing empty strings dropped), so a non-LMQ name in
  the *last* place loses its "" offset: the counts differ and **no** unit of that record is written;
* names containing ``/`` are skipped; each other name's offset goes through ``Long.parseLong``: an empty one (a
  non-LMQ name *before* the last place) throws ``NumberFormatException`` after the units before it were written;
  the reput retries the same record for ever (**no later record reaches any consume queue or index**) and at
  restart ``load()`` fails: **the broker does not start**;
* each unit goes through ``putMessagePositionInfo``: a record already dispatched to the queue (physical offset +
  size <= the queue's max) is skipped (the same LMQ named twice: one unit); an offset below the queue's write
  position is skipped ("build repeatedly"); one above it is appended densely at the write position ("[BUG]
  logic queue order"), so once a unit is missing the queue's offsets stop matching the records'
  ``INNER_MULTI_QUEUE_OFFSET``; the first unit of a new queue at an offset other than 0 is preceded by pre-blank
  units ``(0, Integer.MAX_VALUE, 0)`` from the start of its file (``fillPreBlank``).

:func:`predict_dispatch` turns records into the units each queue gets (:class:`LmqPrediction`), the records it
skips and why, and the stall.  :class:`LmqOffsets` is the write side (``wrapLmqDispatch`` /
``updateLmqOffsets``), which the writer uses.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterable

from . import layout as L

PATH_SEPARATOR = "/"  # File.separator on the brokers this models


def java_split(text: str, sep: str = L.LMQ_DISPATCH_SEPARATOR) -> list[str]:
    """``String.split(sep)`` for a one-character literal separator: trailing empty strings removed (so ``","``
    gives ``[]``), but ``""`` gives ``[""]``."""
    if text == "":
        return [""]
    parts = text.split(sep)
    while parts and parts[-1] == "":
        parts.pop()
    return parts


def is_lmq(name: str | None) -> bool:
    """``MixAll.isLmq``."""
    return name is not None and name.startswith(L.LMQ_PREFIX)


def topic_allows_multi_dispatch(topic: str) -> bool:
    """``MixAll.topicAllowsLMQ`` / ``MultiDispatchUtils.isNeedHandleMultiDispatch``'s topic test."""
    return not (topic.startswith(L.RETRY_GROUP_TOPIC_PREFIX) or topic.startswith(L.SYSTEM_TOPIC_PREFIX)
                or topic == L.SCHEDULE_TOPIC)


def _blank(s: str | None) -> bool:
    return s is None or not s.strip()


@dataclass(frozen=True)
class DispatchLists:
    """A record's two properties, split as the broker splits them."""

    names: list[str]
    offsets: list[str]
    raw_names: str | None
    raw_offsets: str | None

    @property
    def counts_match(self) -> bool:
        return len(self.names) == len(self.offsets)


def dispatch_lists(properties: dict) -> DispatchLists | None:
    """The record's INNER_MULTI_DISPATCH / INNER_MULTI_QUEUE_OFFSET (None unless both are non-blank, as
    ``checkMultiDispatchQueue`` requires)."""
    names = properties.get(L.PROPERTY_INNER_MULTI_DISPATCH)
    offsets = properties.get(L.PROPERTY_INNER_MULTI_QUEUE_OFFSET)
    if _blank(names) or _blank(offsets):
        return None
    return DispatchLists(java_split(names), java_split(offsets), names, offsets)


def parse_java_long(text: str) -> int | None:
    """``Long.parseLong``: an optional sign and ASCII digits within long, else None (NumberFormatException)."""
    body = text[1:] if text[:1] in "+-" else text
    if not body or not body.isascii() or not body.isdigit():
        return None
    v = int(text)
    return v if -2**63 <= v < 2**63 else None


# ------------------------------------------------------------------------------------------- the write side


class LmqOffsets:
    """The broker's LMQ offset counters (``QueueOffsetOperator.lmqTopicQueueTable``, seeded from a queue's
    max offset): :meth:`assign` is ``wrapLmqDispatch`` (the INNER_MULTI_QUEUE_OFFSET text), :meth:`advance`
    ``updateLmqOffsets`` (+1 per LMQ name, so a name given twice advances by 2)."""

    def __init__(self, initial: dict | None = None, enable_lmq: bool = True):
        self.next = dict(initial or {})
        self.enable_lmq = enable_lmq

    def assign(self, names_text: str) -> str:
        out = []
        for name in java_split(names_text):
            out.append(str(self.next.get(name, 0)) if self.enable_lmq and is_lmq(name) else "")
        return L.LMQ_DISPATCH_SEPARATOR.join(out)

    def advance(self, names_text: str) -> None:
        for name in java_split(names_text):
            if self.enable_lmq and is_lmq(name):
                self.next[name] = self.next.get(name, 0) + 1


# ------------------------------------------------------------------------------------------- the read side


@dataclass(frozen=True)
class LmqUnit:
    """A consume-queue unit the dispatch writes."""

    queue: str  # the consume queue's topic folder name (the LMQ name)
    queue_id: int
    queue_offset: int  # where it lands (the queue's write position)
    physical_offset: int
    size: int
    tags_code: int
    kind: str  # "entry" | "pre_blank"
    record_offset: int | None = None  # the offset INNER_MULTI_QUEUE_OFFSET gave (an entry)

    @property
    def matches_record(self) -> bool:
        """The unit sits where the record says (false once a queue has lost a unit)."""
        return self.record_offset == self.queue_offset


@dataclass(frozen=True)
class LmqSkip:
    """A unit (or a whole record's units) the dispatch does not write."""

    physical_offset: int
    queue: str | None
    reason: str  # "count_mismatch" | "path_separator" | "already_dispatched" | "below_write_position"
    detail: str


@dataclass(frozen=True)
class LmqStall:
    """``Long.parseLong`` refused an offset: the reput stops at this record for good."""

    physical_offset: int
    queue: str
    offset_text: str
    detail: str


@dataclass
class QueueState:
    """``ConsumeQueue``'s write state, as far as dispatch needs it."""

    file_size: int
    first_base: int | None = None  # byte offset of the queue's first file (None: no file yet)
    wrote: int = 0  # byte offset one past the last unit written
    max_physic_offset: int = -1

    @property
    def max_offset(self) -> int:
        """The queue's next queue offset (its max offset)."""
        return self.wrote // L.CQ_STORE_UNIT_SIZE


@dataclass
class LmqPrediction:
    units: list = field(default_factory=list)  # LmqUnit, in write order
    skips: list = field(default_factory=list)  # LmqSkip
    stall: LmqStall | None = None
    queues: dict = field(default_factory=dict)  # (queue, queue_id) -> QueueState
    records: int = 0  # records that named queues to dispatch to (before any stall)

    @property
    def broker_starts(self) -> bool:
        """False when a record stalls the reput: at restart the abnormal recovery re-dispatches it, throws
        again, and ``DefaultMessageStore.load()`` returns false."""
        return self.stall is None

    @property
    def undispatched_from(self) -> int | None:
        """The physical offset from which no record reaches any consume queue or index (the stalled record's
        own units before the bad name, and its own queue unit, were written)."""
        return None if self.stall is None else self.stall.physical_offset

    def units_of(self, queue: str, queue_id: int = L.LMQ_QUEUE_ID) -> list:
        return [u for u in self.units if u.queue == queue and u.queue_id == queue_id]


def _put(state: QueueState, queue: str, qid: int, phys: int, size: int, tags: int, cq_offset: int,
         out: LmqPrediction) -> None:
    """``ConsumeQueue.putMessagePositionInfo`` of one unit into ``state``."""
    unit = L.CQ_STORE_UNIT_SIZE
    if phys + size <= state.max_physic_offset:
        out.skips.append(LmqSkip(phys, queue, "already_dispatched", f"{queue}/{qid} already holds the record"))
        return
    expect = cq_offset * unit
    if state.first_base is None:  # getLastMappedFile(expect) creates the queue's first file
        state.first_base = expect - expect % state.file_size
        state.wrote = state.first_base
        if cq_offset != 0:  # fillPreBlank up to the expected offset's place in the file
            for at in range(state.first_base, expect, unit):
                out.units.append(LmqUnit(queue, qid, at // unit, 0, L.CQ_PRE_BLANK_SIZE, 0, "pre_blank"))
            state.wrote = expect
    if cq_offset != 0 and expect < state.wrote:
        out.skips.append(LmqSkip(phys, queue, "below_write_position",
                                 f"offset {cq_offset} is below {queue}/{qid}'s write position {state.max_offset}"))
        return
    state.max_physic_offset = phys + size
    out.units.append(LmqUnit(queue, qid, state.wrote // unit, phys, size, tags, "entry", cq_offset))
    state.wrote += unit


def predict_dispatch(records: Iterable, *, enable_lmq: bool = True, enable_multi_dispatch: bool = True,
                     cq_file_size: int = L.DEFAULT_MAPPED_FILE_SIZE_CONSUME_QUEUE,
                     existing: dict | None = None, delay_levels: dict | None = None,
                     units=None) -> LmqPrediction:
    """The units RocketMQ 5.3.3's dispatch writes for ``records`` (in CommitLog order: each with ``topic``,
    ``queue_id``, ``physical_offset``, ``store_size``, ``sys_flag``, ``properties`` and ``dispatch_tags_code``
    or ``tags_code``, as :class:`store_format.message.Message` has them).  ``existing`` seeds queue states
    (``{(queue, queue_id): QueueState}``, e.g. from the consume-queue files before these records).  Stops at a
    stall.  ``units``: where the units go, in write order (anything with ``append``: a caller that streams them
    elsewhere; by default the prediction's list)."""
    out = LmqPrediction(queues=dict(existing or {}), units=[] if units is None else units)
    if not enable_multi_dispatch:
        return out
    file_size = -(-int(cq_file_size) // L.CQ_STORE_UNIT_SIZE) * L.CQ_STORE_UNIT_SIZE
    for r in records:
        if r.sys_flag & L.TRANSACTION_MASK not in (L.TRANSACTION_NOT_TYPE, L.TRANSACTION_COMMIT_TYPE):
            continue
        if not topic_allows_multi_dispatch(r.topic):
            continue
        lists = dispatch_lists(r.properties)
        if lists is None:
            continue
        out.records += 1
        phys, size = r.physical_offset, r.store_size
        if not lists.counts_match:
            out.skips.append(LmqSkip(phys, None, "count_mismatch", f"{len(lists.names)} queue name(s), "
                                     f"{len(lists.offsets)} offset(s): {lists.raw_names!r} / {lists.raw_offsets!r}"))
            continue
        tags = r.dispatch_tags_code(delay_levels) if delay_levels is not None and hasattr(r, "dispatch_tags_code") \
            else (r.dispatch_tags_code() if hasattr(r, "dispatch_tags_code") else r.tags_code)
        for name, text in zip(lists.names, lists.offsets):
            if PATH_SEPARATOR in name:
                out.skips.append(LmqSkip(phys, name, "path_separator", f"{name!r} holds {PATH_SEPARATOR!r}: no queue"))
                continue
            offset = parse_java_long(text)
            if offset is None:
                out.stall = LmqStall(phys, name, text, f"Long.parseLong({text!r}) for {name!r} throws "
                                     "NumberFormatException: the reput retries this record for ever")
                return out
            qid = L.LMQ_QUEUE_ID if enable_lmq and is_lmq(name) else r.queue_id
            state = out.queues.get((name, qid))
            if state is None:
                state = out.queues[(name, qid)] = QueueState(file_size)
            _put(state, name, qid, phys, size, tags, offset, out)
    return out


__all__ = ["java_split", "is_lmq", "topic_allows_multi_dispatch", "dispatch_lists", "DispatchLists",
           "parse_java_long", "LmqOffsets", "LmqUnit", "LmqSkip", "LmqStall", "QueueState", "LmqPrediction",
           "predict_dispatch"]
