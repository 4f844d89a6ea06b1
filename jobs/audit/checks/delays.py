"""Delayed messages: per delay level, ``SCHEDULE_TOPIC_XXXX`` queue ``level - 1`` against the next offset to
deliver in ``config/delayOffset.json`` (absent = 0, as ScheduleMessageService starts).  A pending message is
due when its deliver time (the unit's tagsCode) is at or before the dump time; it was delivered when a
message with its UNIQ_KEY exists in its REAL_TOPIC.

Checks: ``delays.overdue`` (warning: due, not delivered), ``delays.delivered_offset_behind`` (info: delivered,
but delayOffset.json was not persisted past it: it will be delivered again), ``delays.offset_out_of_range``
(warning), ``delays.unknown_level`` (warning: an offset for a level the broker does not have).  Detail table:
``delays``.

The pending units and a first reading of their records come from the survey (its consume-queue files:
``in_survey``); the scan then confirms each record (a message of the walk starts there) and looks for delivered
copies (REAL_TOPIC, UNIQ_KEY) in every range.  All three grow with the messages: the tasks write them as Parquet
parts (spilled partials) and the driver joins them out of core (jobs/audit/buckets.py: the pending units with their
records by offset, then with the delivered copies by key, a bucket at a time), keeping per level and the findings.
"""
from __future__ import annotations

from functools import partial

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from store_format import layout as L
from store_format.fs import ReadOnlyMap
from decoding.columns import column

from .. import buckets
from ..buckets import Buckets, bucket_count, key_hash, scratch as buckets_scratch
from ..contract import Family, FamilyResult, TableView
from ..findings import Consequence, Severity, check, finding_table, metric_table, slices

check("delays.overdue", Severity.WARNING,
      "delay level {level} message for {real_topic|?} was due {due_seconds} s before the dump time and is not delivered",
      consequence=Consequence.CONSUMERS_AFFECTED,
      action="The schedule service was stopped or behind; it delivers them on start.  Check delayOffset.json.")
check("delays.delivered_offset_behind", Severity.INFO,
      "delay level {level} message was delivered to {real_topic} but delayOffset.json is behind it: the broker "
      "delivers it again",
      consequence=Consequence.CONSUMERS_AFFECTED,
      action="Expect a duplicate on the real topic.")
check("delays.offset_out_of_range", Severity.WARNING,
      "delayOffset.json says level {level} is at {delivered_offset} but its queue holds {min_offset|0}..{max_offset|0}",
      consequence=Consequence.CONSUMERS_AFFECTED,
      action="Edit delayOffset.json to a valid offset (or remove the level's entry to restart it at 0).")
check("delays.unknown_level", Severity.WARNING, "delay level {level} is beyond the {levels} levels of messageDelayLevel",
      consequence=Consequence.COSMETIC,
      action="`messageDelayLevel` was changed; check the broker config.")

PENDING = pa.schema([("broker", pa.string()), ("level", pa.int32()), ("queue_offset", pa.int64()),
                     ("physical_offset", pa.int64()), ("deliver_time", pa.int64()), ("uniq_key", pa.string()),
                     ("real_topic", pa.string())])  # from the survey: the unit and a first reading of its record
FOUND = pa.schema([("broker", pa.string()), ("physical_offset", pa.int64()), ("uniq_key", pa.string()),
                   ("real_topic", pa.string()), ("segment", pa.string()), ("file_position", pa.int64()),
                   ("store_timestamp", pa.int64())])
DELIVERED = pa.schema([("broker", pa.string()), ("real_topic", pa.string()), ("uniq_key", pa.string())])
DELAYS = pa.schema([
    column("broker", pa.string()),
    column("level", pa.int32(), "delay level (1-based; SCHEDULE_TOPIC_XXXX queue `level - 1`)"),
    column("queue_id", pa.int32(), "the SCHEDULE_TOPIC_XXXX queue"),
    column("min_offset", pa.int64()), column("max_offset", pa.int64()),
    column("delivered_offset", pa.int64(), "delayOffset.json: the next offset to deliver"),
    column("pending", pa.int64(), "messages at or past delivered_offset"),
    column("overdue", pa.int64(), "pending, due before the dump time, and not delivered to their real topic"),
    column("next_deliver_time", pa.int64(), "the earliest pending deliver time (ms)"),
])
_FILE = "config/delayOffset.json"


def schedule_probe(ctx, broker: str) -> dict:
    """What the survey needs to read the pending delayed messages: each SCHEDULE_TOPIC_XXXX queue's next offset to
    deliver (delayOffset.json; absent = 0, as ScheduleMessageService starts) and the segments the records are in."""
    delay = ctx.metadata("delay_offsets")
    nxt = {lv - 1: o for b, lv, o, err in zip(delay.column("broker").to_pylist(), delay.column("delay_level").to_pylist(),
                                              delay.column("offset").to_pylist(), delay.column("error").to_pylist())
           if b == broker and err is None and lv is not None}
    plan = ctx.plans[broker]
    levels = sorted({f.queue_id for f in plan.queue_files if f.loaded and f.topic == L.SCHEDULE_TOPIC
                     and f.backend.folder == plan.dispatch.folder_of(f.topic)})  # of any backend of its folder
    return {"next": {qid: nxt.get(qid, 0) for qid in levels},
            "segments": [(s.base_offset, s.length, s.loc) for s in plan.segments]}


def pending_in_survey(given, f, units, out) -> None:
    """The units of a SCHEDULE_TOPIC_XXXX file at or past its level's next offset to deliver: the pending delayed
    messages, with a first reading of their records (not checked: the scan says whether a message of the walk
    starts there), read for all the task's files at once (:func:`_pending_read`)."""
    probe = given.probes.get("delays")
    if units is None or probe is None or f.topic != L.SCHEDULE_TOPIC or f.queue_id not in probe["next"]:
        return
    entry = np.flatnonzero(units.valid)
    due = entry[units.queue_offset[entry] >= probe["next"][f.queue_id]]
    if not len(due):
        return
    gathered = out.gathered("delays.pending", partial(_pending_read, given, probe["segments"]))
    for lo in range(0, len(due), READING_ROWS):  # a level's file holds up to 300,000: read a slice at a time
        rows = due[lo:lo + READING_ROWS]
        gathered.append((np.full(len(rows), f.queue_id + 1, np.int32), units.queue_offset[rows].astype(np.int64),
                         units.physical_offset[rows].astype(np.int64), units.tags_code[rows].astype(np.int64)))
        if sum(len(g[0]) for g in gathered) >= READING_ROWS:  # enough to be read now: held no longer than before
            _pending_read(given, probe["segments"], gathered, out)
            gathered.clear()


def _pending_read(given, segments: list, files: list, out) -> None:
    """The pending messages of a survey task's files (``files``: their levels, queue offsets, physical offsets and
    deliver times, a file at a time), their records' first readings taken together: one map of a segment and one
    decode for a task's levels of few pending messages (a fleet's broker has five of a few hundred each), not one
    a level."""
    if not files:
        return
    level, queue_offset, phys, deliver_time = (np.concatenate(c) for c in zip(*files))
    uniq_key, real_topic = _first_readings(segments, phys)
    out.spill("delays.pending", pa.table({
        "broker": pa.repeat(pa.scalar(given.broker), len(phys)), "level": pa.array(level),
        "queue_offset": pa.array(queue_offset), "physical_offset": pa.array(phys),
        "deliver_time": pa.array(deliver_time), "uniq_key": uniq_key, "real_topic": real_topic}, schema=PENDING))


def _segments_of(segments: list, phys: np.ndarray) -> np.ndarray:
    """The index in ``segments`` ((base, length, loc), the probe's) of the first that holds each offset, -1 for
    none: by bisection when they are in order and apart (a broker's log, of thousands of small segments maybe),
    else by looking through them in order."""
    bases = np.array([base for base, _, _ in segments], np.int64)
    ends = bases + np.array([length for _, length, _ in segments], np.int64)
    if all(a[0] + a[1] <= b[0] for a, b in zip(segments, segments[1:])):
        i = np.searchsorted(bases, phys, side="right") - 1
        return np.where((i >= 0) & (phys < ends[np.maximum(i, 0)]), i, -1) if len(bases) else np.full(len(phys), -1)
    at = np.full(len(phys), -1, np.int64)
    for k in range(len(segments) - 1, -1, -1):  # the first holding it wins: the earliest written last
        at[(phys >= bases[k]) & (phys < ends[k])] = k
    return at


#: records a first reading decodes at once: a level's file holds up to 300,000 pending records, and decoding them
#: together held ~190 MiB in its task (the survey's peak at 16 GiB); a slice holds a tenth of that
READING_ROWS = 1 << 14


def _first_readings(segments: list, phys: np.ndarray) -> tuple[pa.Array, pa.Array]:
    """The UNIQ_KEY and REAL_TOPIC of the record at each physical offset, decoded as it stands by the compiled
    kernels, a segment's records :data:`READING_ROWS` at a time (a record that does not decode, or lies in no
    segment: nulls)."""
    from decoding.kernels import decode_buffer

    uniq, real = [], []  # the decoded records' columns, in the order decoded
    row = np.full(len(phys), -1, np.int64)  # each offset's decoded record, -1 for none
    decoded = 0
    at = _segments_of(segments, phys)
    for k in np.unique(at[at >= 0]).tolist():
        base, length, loc = segments[k]
        rows = np.flatnonzero(at == k)
        pos, first = np.unique(phys[rows] - base, return_inverse=True)  # each record decoded once, in file order
        mapped, buf, starts, sizes, ok = _records_at(loc, length, pos)
        try:
            for lo in range(0, len(starts), READING_ROWS):
                t = decode_buffer(buf, starts[lo:lo + READING_ROWS], sizes[lo:lo + READING_ROWS],
                                  columns=("uniq_key", "real_topic"))
                uniq.append(t.column("uniq_key"))
                real.append(t.column("real_topic"))
        finally:
            if mapped is not None:
                mapped.close()
        of_pos = np.full(len(pos), -1, np.int64)
        of_pos[ok] = decoded + np.arange(len(starts))
        row[rows] = of_pos[first]
        decoded += len(starts)
    take = pa.array(row, mask=row < 0)
    return tuple(pa.chunked_array(c, pa.string()).take(take).combine_chunks() for c in (uniq, real))


def _records_at(loc, length: int, pos: np.ndarray):
    """The records of one segment at file positions ``pos`` (sorted, distinct) as frames: (the map to close or
    None, the buffer, starts, sizes, which positions hold a frame).  A position holds one when its TOTALSIZE
    (big-endian, its first four bytes) is positive and fits in what follows it; the kernel then says whether it
    decodes, as codec.decode_record does.  A local segment is mapped; another is read a record at a time."""
    if loc.local_path is not None:
        m = ReadOnlyMap(loc.local_path)
        data = np.frombuffer(m.buf, np.uint8) if len(m.buf) else np.zeros(0, np.uint8)
        head = pos + 4 <= len(data)
        size = np.zeros(len(pos), np.int64)
        if head.any():
            h = data[pos[head][:, None] + np.arange(4)].astype(np.int64)
            size[head] = ((h[:, 0] << 24) | (h[:, 1] << 16) | (h[:, 2] << 8) | h[:, 3]).astype(np.int32)
        ok = head & (size > 0) & (size <= len(data) - pos)
        return m, data, pos[ok], size[ok], ok
    chunks, ok = [], np.zeros(len(pos), bool)
    for i, p in enumerate(pos.tolist()):
        size = int.from_bytes(loc.read_range(p, 4), "big", signed=True)
        if 0 < size <= length - p:
            chunk = loc.read_range(p, size)
            if len(chunk) == size:
                chunks.append(chunk)
                ok[i] = True
    sizes = np.array([len(c) for c in chunks], np.int64)
    starts = np.concatenate([[0], np.cumsum(sizes)[:-1]]).astype(np.int64) if len(chunks) else sizes
    return None, b"".join(chunks), starts, sizes, ok


def in_range(rc, out) -> None:
    probe = rc.facts.probes.get("delays")
    m = rc.messages
    if not probe or not m.num_rows:
        return
    phys = probe["physical_offsets"]
    phys = phys[rc.owns(phys)]
    at = rc.message_at(phys)
    hit = np.flatnonzero(at >= 0)
    if len(hit):
        t = m.take(at[hit])
        out.spill("delays.found", pa.table({
            "broker": pa.repeat(pa.scalar(rc.broker), len(hit)), "physical_offset": pa.array(phys[hit]),
            **{c: t.column(c) for c in ("uniq_key", "real_topic", "segment", "file_position", "store_timestamp")}},
            schema=FOUND))
    wanted = probe["copies"]  # hashes of the (real topic, uniq key) of pending messages: in their topic already?
    if len(wanted):
        here, h = _own_keys(m)
        i = np.minimum(np.searchsorted(wanted, h), len(wanted) - 1)
        # a copy whose hash only collides with a pending key's is spilled too: the driver's join on the keys
        # themselves (decided_batches) drops it
        got = here.filter(pa.array(wanted[i] == h)).group_by(["real_topic", "uniq_key"]).aggregate([])
        if got.num_rows:
            out.spill("delays.delivered", pa.table({"broker": pa.repeat(pa.scalar(rc.broker), got.num_rows),
                                                      "real_topic": got.column("real_topic"),
                                                      "uniq_key": got.column("uniq_key")}, schema=DELIVERED))


def _own_keys(m: pa.Table) -> tuple[pa.Table, np.ndarray]:
    """The (real topic, uniq key) of a range's messages a pending one's copy could be (not in SCHEDULE_TOPIC_XXXX,
    both known), and their hashes (buckets.key_hash)."""
    here = pa.table({"real_topic": m.column("topic"), "uniq_key": m.column("uniq_key")}).filter(pc.and_(
        pc.not_equal(m.column("topic"), L.SCHEDULE_TOPIC),
        pc.and_(pc.is_valid(m.column("topic")), pc.is_valid(m.column("uniq_key")))))
    return here, key_hash(here.column("real_topic"), here.column("uniq_key"))


def range_memo(rc) -> np.ndarray | None:
    """The hashes of the range's own keys (:func:`_own_keys`): which of the next run's pending messages it holds
    copies of, without reading it again (about 8 bytes a message, kept with its part by ``--state``, sorted and
    unique there: jobs/audit/kept.py)."""
    m = rc.messages
    return _own_keys(m)[1] if m.num_rows else None


def probe_in_span(probe: dict | None, lo: int, hi: int, memo: np.ndarray | None):
    """What :func:`in_range` reads of the probe in a range owning ``lo`` .. ``hi`` - 1: the pending offsets it owns,
    and the pending keys its messages hold copies of."""
    if not probe:
        return None
    phys = probe["physical_offsets"]
    phys = phys[(phys >= lo) & (phys < hi)]
    wanted = probe["copies"]  # sorted and unique, as the memo is: the shorter looked up in the longer (a range's
    # memo holds a key a message, 65 K and more; a broker's pending copies are often a few)
    if memo is not None and len(wanted) and len(memo):
        few, many = (wanted, memo) if len(wanted) <= len(memo) else (memo, wanted)
        i = np.minimum(np.searchsorted(many, few), len(many) - 1)
        copies = few[many[i] == few]
    else:
        copies = np.zeros(0, np.uint64)
    return (phys, copies) if len(phys) or len(copies) else None  # nothing: as no probe


def probes(ctx, broker: str) -> dict | None:
    """The broker's pending messages as every scan task of it looks them up: their physical offsets, and their
    (real topic, uniq key) as sorted 64-bit hashes (buckets.key_hash, ~8 bytes each instead of ~60 as text; a copy
    whose hash only collides is dropped by the driver's join on the keys themselves).  Every broker's are made in
    one pass over the survey's parts (:func:`_pending_probes`: a pass per broker read a fleet's every part as often
    as it has brokers); each broker's is handed out once and let go here, so none is held past its scan."""
    made = ctx.__dict__.get("_delays_probes")
    if made is None or broker not in made:  # the first broker asked (or one asked again: made once more)
        made = ctx.__dict__["_delays_probes"] = _pending_probes(ctx)
    return made.pop(broker, None)


def _pending_probes(ctx) -> dict[str, dict | None]:
    """{broker: its :func:`probes`, None without pending messages} for every broker, from one pass over the survey's
    ``delays.pending`` parts, read a batch at a time: a scanner over them took ~1.1 GB to give 1.3 M rows at
    16 GiB (issue 40)."""
    offsets: dict[str, list] = {}
    keys: dict[str, list] = {}
    for b in ctx.survey_partial_batches("delays.pending", PENDING, ["broker", "physical_offset", "real_topic",
                                                                    "uniq_key"]):
        # a batch holds many brokers' rows (small parts gathered): each broker's a slice of the batch sorted by
        # broker, not a mask over the whole batch a broker
        b = b.filter(pc.is_valid(b.column("broker"))).sort_by("broker")
        names = b.column("broker").combine_chunks()
        if not len(names):
            continue
        starts = np.r_[0, np.flatnonzero(pc.not_equal(names[1:], names[:-1]).to_numpy(zero_copy_only=False)) + 1]
        for start, stop in zip(starts.tolist(), np.r_[starts[1:], len(names)].tolist()):
            broker, mine = names[start].as_py(), b.slice(start, stop - start)
            offsets.setdefault(broker, []).append(mine.column("physical_offset").to_numpy(zero_copy_only=False))
            mine = mine.filter(pc.and_(pc.is_valid(mine.column("real_topic")), pc.is_valid(mine.column("uniq_key"))))
            keys.setdefault(broker, []).append(key_hash(mine.column("real_topic"), mine.column("uniq_key")))
    return {broker: {"physical_offsets": np.unique(np.concatenate(offsets[broker])),
                     "copies": np.unique(np.concatenate(keys[broker]))} if broker in offsets else None
            for broker in ctx.plans}


# the pending units in the survey's order (``seq``), without the survey's first reading of their records: the scan's
# (FOUND) replaces it
_UNITS = pa.schema([("seq", pa.int64()), *(PENDING.field(c) for c in ("broker", "level", "queue_offset",
                                                                        "physical_offset", "deliver_time"))])
# ... with its record as the scan found it, whether it is due, and the key of its delivered copy
_JOINED = pa.schema([*_UNITS, *(FOUND.field(c) for c in ("uniq_key", "real_topic", "segment", "file_position")),
                     ("due", pa.bool_())])
_KEY = ("broker", "real_topic", "uniq_key")  # a delivered copy's
# a pending unit carries its record's key, segment and place (~150 bytes, several times a transaction's row): a
# bucket's join with the records found peaked at ~250 MB of Arrow at buckets.ROWS_PER_BUCKET rows (16 GiB), so a
# bucket holds a quarter of them
_ROWS_SHARE = 4
# ... and whether it was delivered: the rows the findings are made of
_DECIDED = pa.schema([*_JOINED, ("delivered", pa.bool_())])


def _pending_with_records(ctx, units: pa.Table, found: pa.Table) -> pa.Table:
    """Some pending units (:data:`_UNITS`) with the record the scan found at each (the last a task found, as one
    unit has one record), and whether each is due at its broker's dump time."""
    if found.num_rows:  # the last of each offset's rows: a stable sort and the end of each run (a hash
        # aggregation's "last" of four columns took six times as long)
        order = pc.sort_indices(found, [("broker", "ascending"), ("physical_offset", "ascending")]).to_numpy()
        broker = pc.dictionary_encode(found.column("broker")).combine_chunks().indices.to_numpy()[order]
        phys = found.column("physical_offset").to_numpy()[order]
        found = found.take(order[np.r_[(broker[1:] != broker[:-1]) | (phys[1:] != phys[:-1]), True]])
    j = units.join(found.select(["broker", "physical_offset", "uniq_key", "real_topic", "segment", "file_position"]),
                   ["broker", "physical_offset"], join_type="left outer")
    brokers = sorted(set(pc.unique(j.column("broker")).to_pylist()))
    as_of = pa.array([ctx.as_of[b] for b in brokers], pa.int64()).take(
        pc.index_in(j.column("broker"), value_set=pa.array(brokers, pa.string())))
    return j.append_column("due", pc.less_equal(j.column("deliver_time"), as_of)).select(_JOINED.names).cast(_JOINED)


def _decided(joined: pa.Table, delivered: pa.Table) -> pa.Table:
    """Some pending units with their records (:data:`_JOINED`), each marked delivered when a copy with its key is
    in ``delivered`` (every copy of those keys): a null key matches none."""
    copies = delivered.group_by(list(_KEY), use_threads=False).aggregate([])
    copies = copies.append_column("delivered", pa.repeat(pa.scalar(True), copies.num_rows))
    t = joined.join(copies, list(_KEY), join_type="left outer")
    return t.set_column(t.schema.get_field_index("delivered"), "delivered",
                        pc.fill_null(t.column("delivered"), False)).select(_DECIDED.names).cast(_DECIDED)


def decided_batches(ctx):
    """The pending units, each with its record, whether it is due and whether it was delivered (:data:`_DECIDED`),
    in the survey's order, a part at a time: never whole on the driver.  The units meet their records by offset,
    then the delivered copies by key, out of core (buckets.Buckets, on the driver's local disk, a bucket at a time),
    and come back in order by ranges of their place in the survey's order."""
    total = sum(ctx.survey_partial_parts("delays.pending").column("rows").to_pylist())
    if not total:
        return
    n = bucket_count(total, max(1, buckets.ROWS_PER_BUCKET // _ROWS_SHARE))
    with buckets_scratch(n, "audit-delays-") as scratch:
        by_offset = Buckets(scratch, "units", n, _UNITS)
        found = Buckets(scratch, "found", n, FOUND)
        seq = 0
        for b in ctx.survey_partial_batches("delays.pending", PENDING, [c for c in _UNITS.names if c != "seq"]):
            by_offset.add_by_key(b.append_column("seq", pa.array(np.arange(seq, seq + b.num_rows, dtype=np.int64))),
                                 "broker", "physical_offset")
            seq += b.num_rows
        for b in ctx.partial_batches("delays.found", FOUND):
            found.add_by_key(b, "broker", "physical_offset")
        by_key = Buckets(scratch, "joined", n, _JOINED)
        for i in range(n):
            by_key.add_by_key(_pending_with_records(ctx, by_offset.read(i), found.read(i)), *_KEY)
        del by_offset, found
        copies = Buckets(scratch, "delivered", n, DELIVERED)
        for b in ctx.partial_batches("delays.delivered", DELIVERED):
            copies.add_by_key(b, *_KEY)
        in_order = Buckets(scratch, "decided", n, _DECIDED)
        for i in range(n):
            t = _decided(by_key.read(i), copies.read(i))
            in_order.add(t, t.column("seq").to_numpy() * n // total)
        for i in range(n):
            t = in_order.read(i)
            if t.num_rows:
                yield t.sort_by("seq")


def _findings(ctx, check_id: str, sel: pa.Table, extra_details: bool) -> pa.Table:
    level, uniq = sel.column("level"), sel.column("uniq_key")
    details = {"level": level}
    if extra_details:
        details["deliver_time"] = sel.column("deliver_time")
    details.update(uniq_key=uniq, key=uniq)
    brokers = sorted(set(pc.unique(sel.column("broker")).to_pylist()))
    as_of = np.array([ctx.as_of[b] for b in brokers], np.int64)[
        pc.index_in(sel.column("broker"), value_set=pa.array(brokers, pa.string())).to_numpy()]
    # seconds as int(ms / 1000) does it: the true quotient, truncated toward zero
    due_seconds = np.trunc((as_of - sel.column("deliver_time").to_numpy()) / 1000).astype(np.int64)
    return finding_table(
        check_id, sel.num_rows, broker=sel.column("broker"), file=sel.column("segment"),
        file_position=sel.column("file_position"), physical_offset=sel.column("physical_offset"),
        topic=L.SCHEDULE_TOPIC, queue_id=pc.subtract(level, pa.scalar(1, pa.int32())),
        queue_offset=sel.column("queue_offset"),
        values={"level": level, "real_topic": sel.column("real_topic"), "due_seconds": pa.array(due_seconds)},
        details=details)


def on_driver(ctx) -> FamilyResult:
    """The pending units decided a part at a time (:func:`decided_batches`); what stays on the driver is per level
    (the table, the metrics) and the findings (a check's in the survey's order, the checks in turn)."""
    res = FamilyResult()
    levels = len(L.DEFAULT_DELAY_LEVELS)  # messageDelayLevel is broker config, not in the store: the default
    offsets = ctx.metadata("delay_offsets")
    offsets = offsets.filter(pc.and_(pc.is_null(offsets.column("error")), pc.is_valid(offsets.column("delay_level"))))
    delivered_offset = {(b, lv): o for b, lv, o in zip(offsets.column("broker").to_pylist(),
                                                       offsets.column("delay_level").to_pylist(),
                                                       offsets.column("offset").to_pylist())}
    bounds = {(r["broker"], r["queue_id"] + 1): r for r in ctx.queue_bounds.to_pylist()
              if r["topic"] == L.SCHEDULE_TOPIC}
    per_level = sorted(set(bounds) | set(delivered_offset))

    overdue_found = ctx.findings_writer("delays.overdue")
    behind_found = ctx.findings_writer("delays.delivered_offset_behind")
    counted = []
    for t in decided_batches(ctx):
        overdue = pc.and_(t.column("due"), pc.invert(t.column("delivered")))
        for part in slices(t.filter(overdue)):
            overdue_found.write(_findings(ctx, "delays.overdue", part, True))
        for part in slices(t.filter(t.column("delivered"))):
            behind_found.write(_findings(ctx, "delays.delivered_offset_behind", part, False))
        counted.append(t.append_column("overdue", pc.cast(overdue, pa.int64())).group_by(
            ["broker", "level"], use_threads=False).aggregate([("seq", "count"), ("overdue", "sum"),
                                                               ("deliver_time", "min")]))
    res.findings += [overdue_found.close(), behind_found.close()]
    pending: dict[tuple, tuple] = {}  # (broker, level) -> (pending, overdue, next deliver time)
    if counted:
        g = pa.concat_tables(counted).group_by(["broker", "level"], use_threads=False).aggregate(
            [("seq_count", "sum"), ("overdue_sum", "sum"), ("deliver_time_min", "min")])
        for b, lv, n, o, t in zip(*(g.column(c).to_pylist() for c in (
                "broker", "level", "seq_count_sum", "overdue_sum_sum", "deliver_time_min_min"))):
            pending[(b, lv)] = (n, o, t)

    rows = []
    for broker, level in per_level:
        b = bounds.get((broker, level), {})
        n, overdue, first_due = pending.get((broker, level), (0, 0, None))
        rows.append(dict(broker=broker, level=level, queue_id=level - 1, min_offset=b.get("min_offset"),
                         max_offset=b.get("max_offset"), delivered_offset=delivered_offset.get((broker, level)),
                         pending=n, overdue=overdue, next_deliver_time=first_due))
    table = pa.Table.from_pylist(rows, schema=DELAYS)
    res.tables["delays"] = table
    out_of_range = [r for r in rows if r["delivered_offset"] is not None and r["level"] <= levels and (
        r["delivered_offset"] > (r["max_offset"] or 0) or r["delivered_offset"] < (r["min_offset"] or 0))]
    unknown = [r for r in rows if r["level"] > levels]
    for check_id, sel in (("delays.offset_out_of_range", out_of_range), ("delays.unknown_level", unknown)):
        if not sel:
            continue
        col = lambda name, typ: pa.array([r[name] for r in sel], typ)  # noqa: E731
        details = {"level": col("level", pa.int32())}
        if check_id == "delays.offset_out_of_range":
            details["offset"] = col("delivered_offset", pa.int64())
        res.findings.append(finding_table(
            check_id, len(sel), broker=col("broker", pa.string()), file=_FILE, topic=L.SCHEDULE_TOPIC,
            queue_id=col("queue_id", pa.int32()),
            queue_offset=col("delivered_offset", pa.int64()) if check_id == "delays.offset_out_of_range" else None,
            values={"level": col("level", pa.int32()), "delivered_offset": col("delivered_offset", pa.int64()),
                    "min_offset": col("min_offset", pa.int64()), "max_offset": col("max_offset", pa.int64()),
                    "levels": levels}, details=details))
    if rows:
        res.metrics.append(metric_table("level", {"pending_delays": table.column("pending"),
                                                  "overdue_delays": table.column("overdue")},
                                        n=table.num_rows, broker=table.column("broker"), topic=L.SCHEDULE_TOPIC,
                                        queue_id=table.column("queue_id")))
        per_broker: dict[str, int] = {}
        for r in rows:
            per_broker[r["broker"]] = per_broker.get(r["broker"], 0) + r["pending"]
        names = sorted(per_broker)
        res.metrics.append(metric_table("broker", {"pending_delays": [per_broker[b] for b in names]}, broker=names))
    return res


VIEW = TableView("Delayed messages", 30, (
    ("level", "level"), ("queue_id", "queue"), ("min_offset", "min offset"), ("max_offset", "max offset"),
    ("delivered_offset", "delivered offset"), ("pending", "pending"), ("overdue", "overdue"),
    ("next_deliver_time", "next delivery at")),
    empty="none: no delayed message in the commitlog", needs="config/delayOffset.json")

FAMILY = Family(
    "delays", "delayed messages per level: pending, overdue, delivered but not recorded, delayOffset.json's offsets",
    survey_probes=schedule_probe, in_survey={"consumequeue": pending_in_survey},
    in_survey_topics={"consumequeue": (L.SCHEDULE_TOPIC,)}, probes=probes, in_range=in_range,
    probe_in_span=probe_in_span, range_memo=range_memo, on_driver=on_driver,
    emits={"delays.pending": PENDING, "delays.found": FOUND, "delays.delivered": DELIVERED},
    reads=("delays.pending", "delays.found", "delays.delivered"),
    tables={"delays": DELAYS}, views={"delays": VIEW}, rank=70,
    metrics={"pending_delays": "delayed messages not delivered yet (broker, level)",
             "overdue_delays": "pending and past their deliver time (level)"})
