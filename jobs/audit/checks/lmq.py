"""LMQ multi-dispatch (enableLmq / enableMultiDispatch, RocketMQ 4.9.3 and later): every %LMQ% consume queue against
what RocketMQ 5.3.3's dispatch writes into it, predicted from the records that name it (store_format.lmq:
``INNER_MULTI_DISPATCH`` and ``INNER_MULTI_QUEUE_OFFSET``, RocketMQ's mishandling of non-LMQ names included,
store-format-5x.md section 5.1).  Run whatever ``--checks`` says, for every store whose files say its records may
carry dispatch lists (``applies``): the dispatch list that stalls the reput completes the recovery prediction (a
broker that will not start).

Checks: ``lmq.missing_unit`` (a unit the dispatch writes is not in the queue), ``lmq.unexpected_unit`` (a unit
pointing at a record the dispatch does not put in that queue), ``lmq.duplicate_unit``, ``lmq.offset_shift`` (a run
of units of a queue that sit at other queue offsets than the dispatch gives them: a unit lost or repeated before
them), all errors; RocketMQ's own behaviour, predicted and said as it is: ``lmq.dispatch_skipped`` (warning: a
record whose LMQ units RocketMQ does not write: a non-LMQ name last in its list, a name with a '/'; info: the same
LMQ named twice), ``lmq.offsets_diverged`` (info: from a skipped unit on, a queue's units sit below the offsets
their records carry) and ``lmq.dispatch_stalled`` (error: a non-LMQ name before the last makes ``Long.parseLong``
throw, the reput retries that record for ever and no later record reaches any consume queue or index; after an
abnormal exit the broker's recovery re-dispatches it and ``load()`` fails).  What a unit says of its record (size,
tagsCode, where it points) is the consumequeue family's check; LMQ lag is the lag family's.

Where each is decided: a scan task reads the property strings of its messages (only on a broker whose files say it
may multi-dispatch: a 5.x store, LMQ queues or offsets), and returns the few records that carry a dispatch list and
the LMQ units it owns (with whether a message starts where each points), both spilled as Parquet parts; the driver
runs the dispatch in CommitLog order over those records (store_format.lmq.predict_dispatch: it is sequential, each
unit's place depends on every earlier one), streams the units it predicts into buckets by queue beside the queues'
own units (buckets.Buckets), and compares a bucket of queues at a time: per queue and per listed record on the
driver, never per unit.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from store_format import layout as L
from store_format.lmq import QueueState, predict_dispatch
from store_format.queues import holds_copies

from ..buckets import Buckets, bucket_count, scratch as buckets_scratch
from ..contract import Family, FamilyResult
from ..findings import Consequence, Severity, check, concat_findings, finding_rows

check("lmq.missing_unit", Severity.ERROR,
      "the record is not in LMQ queue {topic} at queue offset {queue_offset}, where RocketMQ's dispatch put it: "
      "consumers of that queue cannot see it",
      group="queue", consequence=Consequence.CONSUMERS_AFFECTED,
      action="The queue file lost the unit: extract the record (`rocketmq-forensics extract`) and re-send it to the LMQ, or "
             "rebuild the queue by re-dispatch (an abnormal start re-dispatches from the checkpoint).")
check("lmq.unexpected_unit", Severity.ERROR,
      "unit {queue_offset} of LMQ queue {topic} points at a record of {message_topic} whose dispatch list does not "
      "put it there",
      group="queue", consequence=Consequence.CONSUMERS_AFFECTED,
      action="The queue file is corrupt or from another store: rebuild the queue.")
check("lmq.duplicate_unit", Severity.ERROR,
      "{units} units of LMQ queue {topic} point at the same record (RocketMQ's dispatch writes one)",
      group="queue", consequence=Consequence.CONSUMERS_AFFECTED,
      action="Rebuild the queue; make consumers idempotent for that key.")
check("lmq.offset_shift", Severity.ERROR,
      "{count} unit(s) of LMQ queue {topic} from queue offset {queue_offset} on sit {delta} from where RocketMQ's "
      "dispatch put them (a unit lost or repeated before them)",
      group="queue", consequence=Consequence.CONSUMERS_AFFECTED,
      action="Consumers reading by offset skip or repeat messages of that queue: rebuild the queue, then check the "
             "groups' offsets in lmqConsumerOffset.json.")
check("lmq.dispatch_skipped", Severity.WARNING,
      "RocketMQ's dispatch writes {what} of this record ({reason}): {detail}", also=(Severity.INFO,),
      group="broker", consequence=Consequence.CONSUMERS_AFFECTED,
      action="RocketMQ's own behaviour (store-format-5x.md section 5.1), not damage: make producers list only %LMQ% "
             "names, once each, without '/'; re-send the message to the queues that missed it if their consumers "
             "need it.")
check("lmq.offsets_diverged", Severity.INFO,
      "from queue offset {queue_offset} on, {count} unit(s) of LMQ queue {topic} sit below the "
      "INNER_MULTI_QUEUE_OFFSET their records carry (by {delta} at the last): RocketMQ's dispatch skipped units "
      "before them",
      group="queue", consequence=Consequence.COSMETIC,
      action="RocketMQ's own behaviour, not damage: read LMQ queues by their consume-queue offsets, not by the "
             "records' INNER_MULTI_QUEUE_OFFSET.")
check("lmq.dispatch_stalled", Severity.ERROR,
      "the dispatch list of this record names {queue} (offset {offset_text}) before its last name: "
      "Long.parseLong throws, the broker's reput retries this record for ever and the {after} record(s) after it "
      "reach no consume queue or index; {restart}",
      # not WILL_NOT_START: whether the broker starts is the recovery prediction's start problem (after_scan)
      group="broker", consequence=Consequence.CONSUMERS_AFFECTED, roles=("dispatch_stall",),
      action="Extract the records from this one on (`rocketmq-forensics extract`) before anything else; removing "
             "`abort` lets the broker start with a normal recovery, whose reput starts at the commitlog's end, so "
             "re-send them afterwards; make producers list only %LMQ% names.")

# a record that names queues to multi-dispatch to, as a scan task returns it
RECORDS = pa.schema([
    ("broker", pa.string()), ("physical_offset", pa.int64()), ("store_size", pa.int32()), ("topic", pa.string()),
    ("queue_id", pa.int32()), ("queue_offset", pa.int64()), ("sys_flag", pa.int32()), ("tags_code", pa.int64()),
    ("names", pa.string()), ("offsets", pa.string()), ("kept", pa.bool_()), ("pending", pa.bool_()),
    ("stalls", pa.bool_()), ("uniq_key", pa.string()), ("file", pa.string()), ("file_position", pa.int64())])
# an LMQ unit a scan task owns, and whether a message of its range starts where it points
UNITS = pa.schema([
    ("broker", pa.string()), ("topic", pa.string()), ("queue_id", pa.int32()), ("queue_offset", pa.int64()),
    ("physical_offset", pa.int64()), ("file", pa.string()), ("file_position", pa.int64()), ("at_message", pa.bool_()),
    ("message_topic", pa.string())])
# per range: its kept messages, and how many of them follow the first record there whose dispatch list stalls
RANGES = pa.schema([("broker", pa.string()), ("first_offset", pa.int64()), ("kept", pa.int64()),
                    ("stall_at", pa.int64()), ("kept_after_stall", pa.int64())])

_KEY = L.PROPERTY_INNER_MULTI_DISPATCH + L.NAME_VALUE_SEPARATOR


@dataclass(frozen=True)
class _Record:
    """A record as store_format.lmq.predict_dispatch reads it."""

    topic: str
    queue_id: int
    physical_offset: int
    store_size: int
    sys_flag: int
    tags_code: int
    properties: dict


def _record(r: dict) -> _Record:
    props = {L.PROPERTY_INNER_MULTI_DISPATCH: r["names"]}
    if r["offsets"] is not None:
        props[L.PROPERTY_INNER_MULTI_QUEUE_OFFSET] = r["offsets"]
    return _Record(r["topic"], r["queue_id"], r["physical_offset"], r["store_size"], r["sys_flag"],
                   r["tags_code"] or 0, props)


# ----------------------------------------------------------------------------------------------- scan tasks

def in_range(rc, out) -> None:
    f = rc.facts
    if not f.dispatch.multi:
        return
    if f.dispatch.copies_held:
        _units(rc, out)
    m = rc.messages
    if not m.num_rows:
        return
    kept = rc.column("kept")
    rows = np.flatnonzero(pc.fill_null(pc.match_substring(m.column("properties_raw"), _KEY), False).to_numpy(
        zero_copy_only=False))
    stall_at, after = None, 0
    if len(rows):
        props = rc.decode(rows, ("properties",)).column("properties").to_pylist()
        t = m.take(rows)
        names, offsets, stalls = [], [], []
        for r, pairs, topic, qid, phys, size, flag in zip(
                rows.tolist(), props, t.column("topic").to_pylist(), t.column("queue_id").to_pylist(),
                t.column("physical_offset").to_pylist(), t.column("store_size").to_pylist(),
                t.column("sys_flag").to_pylist()):
            d = dict(pairs or ())
            names.append(d.get(L.PROPERTY_INNER_MULTI_DISPATCH))
            offsets.append(d.get(L.PROPERTY_INNER_MULTI_QUEUE_OFFSET))
            # whether this record stalls the reput is its own lists' business (a parse that throws)
            alone = predict_dispatch([_Record(topic, qid, phys, size, flag, 0, d)])
            stalls.append(alone.stall is not None)
        keep = np.array([n is not None for n in names], bool)  # the key inside a value: not a dispatch list
        if keep.any():
            idx = np.flatnonzero(keep)
            t = t.take(idx)
            phys = t.column("physical_offset")
            out.spill("lmq.records", pa.table({
                "broker": pa.repeat(pa.scalar(rc.broker), len(idx)), "physical_offset": phys,
                "store_size": t.column("store_size"), "topic": t.column("topic"), "queue_id": t.column("queue_id"),
                "queue_offset": t.column("queue_offset"), "sys_flag": t.column("sys_flag"),
                "tags_code": t.column("tags_code"), "names": pa.array([names[i] for i in idx], pa.string()),
                "offsets": pa.array([offsets[i] for i in idx], pa.string()), "kept": t.column("kept"),
                "pending": pc.greater_equal(phys, pa.scalar(rc.facts.reput_from, pa.int64())),
                "stalls": pa.array([stalls[i] for i in idx], pa.bool_()), "uniq_key": t.column("uniq_key"),
                "file": t.column("segment"),
                "file_position": t.column("file_position")}, schema=RECORDS))
            hit = [rows[i] for i in idx if stalls[i] and kept[rows[i]]]
            if hit:
                stall_at = int(rc.column("physical_offset")[hit[0]])
                after = int((kept & (rc.column("physical_offset") > stall_at)).sum())
    out.partial("lmq.ranges", pa.table({"broker": [rc.broker], "first_offset": [int(rc.column("physical_offset")[0])],
                                        "kept": [int(kept.sum())], "stall_at": pa.array([stall_at], pa.int64()),
                                        "kept_after_stall": [after]}, schema=RANGES))


def _units(rc, out) -> None:
    u = rc.routed("consumequeue")
    if not u.num_rows:
        return
    u = u.filter(pa.array(rc.facts.dispatch.copies(u.column("topic"))))
    if not u.num_rows:
        return
    at = rc.message_at(u.column("physical_offset").to_numpy())
    hit = at >= 0
    topic = pa.nulls(u.num_rows, pa.string())
    if hit.any():
        topic = pc.if_else(pa.array(hit), rc.messages.column("topic").take(pa.array(np.where(hit, at, 0))), topic)
    out.spill("lmq.units", pa.table({
        "broker": pa.repeat(pa.scalar(rc.broker), u.num_rows), "topic": u.column("topic"),
        "queue_id": u.column("queue_id"), "queue_offset": u.column("queue_offset"),
        "physical_offset": u.column("physical_offset"), "file": u.column("file"),
        "file_position": u.column("file_position"), "at_message": pa.array(hit), "message_topic": topic},
        schema=UNITS))


# ------------------------------------------------------------------------------------------------------ driver

def _stalls(ctx) -> dict[str, tuple[int, int]]:
    """broker -> (physical offset of the first kept record whose dispatch list stalls the reput, kept messages
    after it)."""
    t = ctx.partial("lmq.ranges", RANGES)
    out = {}
    for broker in set(t.column("broker").to_pylist()):
        mine = [r for r in t.to_pylist() if r["broker"] == broker]
        at = [r["stall_at"] for r in mine if r["stall_at"] is not None]
        if not at:
            continue
        s = min(at)
        after = sum(r["kept_after_stall"] for r in mine if r["stall_at"] == s) + \
            sum(r["kept"] for r in mine if r["first_offset"] > s and r["stall_at"] != s)
        out[broker] = (s, after)
    return out


def stall_problem(physical_offset: int) -> str:
    """The start problem a stalling record makes (the verdict gives its way out: jobs/audit/verdict.py)."""
    return (f"the record at {physical_offset} names a non-LMQ queue before the last in its INNER_MULTI_DISPATCH: the "
            "abnormal recovery re-dispatches it, Long.parseLong throws and DefaultMessageStore.load() fails")


def after_scan(ctx) -> None:
    """A stalled reput in the recovery prediction: the broker keeps ``abort`` ("CommitLog have not finish to be
    dispatched"), its abnormal recovery re-dispatches the record (when it lies in the re-dispatch range and recovery
    keeps it), throws again, and ``DefaultMessageStore.load()`` fails: the broker will not start."""
    for broker, (stall, _) in _stalls(ctx).items():
        ctx.reput_stalls[broker] = stall  # the records from it on are never dispatched (the consumequeue family)
        p = ctx.recovery.get(broker)
        if p is None or p.mode != "abnormal" or p.redispatch_from is None or not \
                p.redispatch_from <= stall < p.max_physical_offset:
            continue
        seg = next((s for s in reversed(ctx.plans[broker].store.segments) if s.base_offset <= stall), None)
        p.start_problems.append(stall_problem(stall))
        p.start_problem_files.append(f"commitlog/{seg.name}" if seg else None)
        p.will_start = False


# predicted and actual units a bucket holds on average: compared as Python objects, ~1.6 KB each
UNITS_PER_BUCKET = 1 << 15
_PREDICTED = pa.schema([("topic", pa.string()), ("queue_id", pa.int32()), ("queue_offset", pa.int64()),
                        ("physical_offset", pa.int64()), ("record_offset", pa.int64()), ("seq", pa.int64())])
_NARROW = ("physical_offset", "topic", "queue_id", "queue_offset", "kept", "pending", "uniq_key", "file",
           "file_position")


def on_driver(ctx) -> FamilyResult:
    """Per broker, the dispatch predicted in CommitLog order and compared with the queues' units a bucket of
    queues at a time (buckets.Buckets on the driver's disk): what the driver keeps is per queue and per record that
    carries a dispatch list, never per unit."""
    res = FamilyResult()
    records = ctx.partial_dataset("lmq.records", RECORDS)
    units = ctx.partial_dataset("lmq.units", UNITS)
    stalls = _stalls(ctx)
    _stalled_to_resend(ctx, stalls)
    brokers = set(pc.unique(records.to_table(columns=["broker"]).column(0)).to_pylist()) | \
        set(pc.unique(units.to_table(columns=["broker"]).column(0)).to_pylist())
    for broker in sorted(brokers):
        res.findings.append(_broker(ctx, broker, records, units, stalls.get(broker)))
    return res


def _seed(ctx, broker: str, units, file_size: int) -> dict:
    """Each LMQ queue's write state before the dump's first record, from the units (dicts, in order) pointing
    below the commitlog's first offset (records whose segments are gone)."""
    first_file = {}
    for f in ctx.plans[broker].queue_files:
        if f.loaded and f.backend.dense and holds_copies(f.topic):  # its name: its first unit's byte offset
            key = (f.topic, f.queue_id)
            first_file[key] = min(first_file.get(key, int(f.name)), int(f.name))
    states = {}
    for u in units:
        key = (u["topic"], u["queue_id"])
        s = states.get(key)
        if s is None or u["queue_offset"] >= s.max_offset:  # past the record's start is enough: every
            # record of the dump lies after it
            states[key] = QueueState(file_size, first_file.get(key, 0), (u["queue_offset"] + 1) *
                                     L.CQ_STORE_UNIT_SIZE, u["physical_offset"] + 1)
    return states


class _Predicted:
    """Where predict_dispatch puts the units it writes (its ``units``): each entry into its queue's bucket, in write
    order (``seq``), and per queue what lmq.offsets_diverged says (its first unit away from its record's offset, how
    many, the last one's distance)."""

    def __init__(self, buckets: Buckets):
        self.buckets, self.rows, self.seq = buckets, [], 0
        self.diverged: dict[tuple, list] = {}  # (queue, queue id) -> [first unit, count, last delta]

    def append(self, u) -> None:
        if u.kind != "entry":
            return
        if not u.matches_record:
            d = self.diverged.get((u.queue, u.queue_id))
            if d is None:
                self.diverged[(u.queue, u.queue_id)] = [u, 1, u.record_offset - u.queue_offset]
            else:
                d[1], d[2] = d[1] + 1, u.record_offset - u.queue_offset
        self.rows.append((u.queue, u.queue_id, u.queue_offset, u.physical_offset, u.record_offset, self.seq))
        self.seq += 1
        if len(self.rows) >= 1 << 16:
            self.flush()

    def flush(self) -> None:
        if self.rows:
            t = pa.table([pa.array(c, f.type) for c, f in zip(zip(*self.rows), _PREDICTED)], schema=_PREDICTED)
            self.buckets.add_by_key(t, "topic", "queue_id")
            self.rows = []


def _broker(ctx, broker: str, records, units, stall) -> pa.Table:
    import pyarrow.dataset as ds

    plan = ctx.plans[broker]
    file_size = plan.geometry.consume_queue_file_size or plan.store.consume_queue_file_size or \
        L.DEFAULT_MAPPED_FILE_SIZE_CONSUME_QUEUE
    segments = plan.store.segments
    low = segments[0].base_offset if segments else 0
    mine = ds.field("broker") == broker
    recs = records.to_table(filter=mine).sort_by("physical_offset")
    at = {p: i for i, p in enumerate(recs.column("physical_offset").to_pylist())}  # the last of an offset
    by_offset = {r["physical_offset"]: r for r in recs.select(list(_NARROW)).to_pylist()}
    names = pc.fill_null(recs.column("names"), "")
    named = recs.num_rows + pc.sum(pc.count_substring(names, L.LMQ_DISPATCH_SEPARATOR)).as_py() if recs.num_rows else 0
    n = bucket_count(named + units.count_rows(filter=mine), UNITS_PER_BUCKET)
    with buckets_scratch(n, "audit-lmq-") as scratch:
        actual = Buckets(scratch, "actual", n, UNITS)  # what the queues hold, by queue

        def seeds():
            for batch in units.to_batches(filter=mine):
                t = pa.Table.from_batches([batch])
                under = pc.less(t.column("physical_offset"), low)
                actual.add_by_key(t.filter(pc.invert(under)), "topic", "queue_id")
                yield from t.filter(under).to_pylist()

        existing = _seed(ctx, broker, seeds(), file_size)
        predicted = _Predicted(Buckets(scratch, "predicted", n, _PREDICTED))
        pred = predict_dispatch((_record(r) for batch in recs.to_batches(4096) for r in batch.to_pylist()),
                                cq_file_size=file_size, existing=existing, units=predicted)
        predicted.flush()
        found = {c: [] for c in ("missing", "unexpected", "dups", "runs")}  # (order, finding row)
        for i in range(n):
            _compare(broker, predicted.buckets.read(i), actual.read(i), by_offset, found)
    out = [finding_rows(check_id, [row for _, row in sorted(found[k], key=lambda x: x[0])]) for check_id, k in (
        ("lmq.missing_unit", "missing"), ("lmq.unexpected_unit", "unexpected"), ("lmq.duplicate_unit", "dups"),
        ("lmq.offset_shift", "runs"))]
    out.append(_skips(broker, pred, by_offset, recs, at))
    out.append(_diverged(broker, predicted.diverged))
    if stall is not None:
        out.append(_stalled(ctx, broker, stall, pred, by_offset, recs, at))
    return concat_findings(out)


def _compare(broker: str, pred: pa.Table, units: pa.Table, by_offset: dict, found: dict) -> None:
    """The predicted units of some queues against the units those queues hold: each finding row with what orders
    it among all (a missing unit by the dispatch's write order, the others by queue and offset)."""
    predicted, order = {}, {}
    for p in pred.sort_by("seq").to_pylist():
        key = (p["topic"], p["queue_id"], p["physical_offset"])
        order.setdefault(key, p["seq"])
        predicted[key] = p
    actual: dict[tuple, list] = {}
    for u in units.to_pylist():
        actual.setdefault((u["topic"], u["queue_id"], u["physical_offset"]), []).append(u)

    shifted = {}
    for key, p in predicted.items():
        r = by_offset.get(p["physical_offset"])
        have = actual.get(key)
        if not have:
            if r is not None and r["kept"] and not r["pending"]:
                found["missing"].append((order[key], dict(
                    broker=broker, topic=p["topic"], queue_id=p["queue_id"], queue_offset=p["queue_offset"],
                    physical_offset=p["physical_offset"], file=r["file"], file_position=r["file_position"],
                    details={"uniq_key": r["uniq_key"], "key": r["uniq_key"], "record_offset": p["record_offset"]})))
            continue
        first = min(have, key=lambda u: u["queue_offset"])
        if first["queue_offset"] != p["queue_offset"]:
            shifted.setdefault((p["topic"], p["queue_id"]), []).append((first["queue_offset"], p["queue_offset"],
                                                                        first))

    for key, have in sorted(actual.items()):
        if key not in predicted:
            for u in have:
                if u["at_message"]:
                    found["unexpected"].append((key, dict(
                        broker=broker, topic=u["topic"], queue_id=u["queue_id"], queue_offset=u["queue_offset"],
                        physical_offset=u["physical_offset"], file=u["file"], file_position=u["file_position"],
                        values={"message_topic": u["message_topic"]}, details={"message_topic": u["message_topic"]})))
            continue
        if len(have) > 1:
            extra = sorted(have, key=lambda u: u["queue_offset"])[1:]
            u = extra[0]
            found["dups"].append((key, dict(
                broker=broker, topic=u["topic"], queue_id=u["queue_id"], queue_offset=u["queue_offset"],
                physical_offset=u["physical_offset"], file=u["file"], file_position=u["file_position"],
                values={"units": len(have)},
                details={"units": len(have), "queue_offsets": [x["queue_offset"] for x in have]})))

    for (queue, qid), items in sorted(shifted.items()):
        items.sort(key=lambda x: x[1])
        start = 0
        for i in range(1, len(items) + 1):
            if i == len(items) or items[i][0] - items[i][1] != items[start][0] - items[start][1]:
                a, p0, u = items[start]
                delta = a - p0
                found["runs"].append(((queue, qid, start), dict(
                    broker=broker, topic=queue, queue_id=qid, queue_offset=a,
                    physical_offset=u["physical_offset"], file=u["file"], file_position=u["file_position"],
                    values={"count": i - start, "delta": f"{delta:+d}"},
                    details={"count": i - start, "delta": delta, "predicted_queue_offset": p0})))
                start = i


_SKIPS = {  # store_format.lmq.LmqSkip reasons: (what is not written, severity)
    "count_mismatch": ("no LMQ unit", Severity.WARNING),
    "path_separator": ("no unit in a queue whose name holds '/'", Severity.WARNING),
    "already_dispatched": ("one unit where its list names a queue twice", Severity.INFO),
    "below_write_position": ("no unit below a queue's write position", Severity.INFO),
}


def _lists(recs: pa.Table, at: dict, physical_offset: int) -> tuple[str, str]:
    """The dispatch lists (names, offsets) of the record at ``physical_offset``."""
    i = at[physical_offset]
    return recs.column("names")[i].as_py(), recs.column("offsets")[i].as_py()


def _skips(broker: str, pred, by_offset: dict, recs: pa.Table, at: dict) -> pa.Table:
    rows = []
    for s in pred.skips:
        r = by_offset.get(s.physical_offset)
        if r is None or not r["kept"]:
            continue
        what, sev = _SKIPS[s.reason]
        rows.append(dict(broker=broker, file=r["file"], file_position=r["file_position"],
                         physical_offset=s.physical_offset, topic=r["topic"], queue_id=r["queue_id"],
                         queue_offset=r["queue_offset"], severity=sev,
                         values={"what": what, "reason": s.reason, "detail": s.detail},
                         details={"reason": s.reason, "queue": s.queue,
                                  **dict(zip(("names", "offsets"), _lists(recs, at, s.physical_offset))),
                                  "uniq_key": r["uniq_key"], "key": r["uniq_key"]}))
    return finding_rows("lmq.dispatch_skipped", rows)


def _diverged(broker: str, diverged: dict) -> pa.Table:
    """Per queue, where its units first sit away from their records' INNER_MULTI_QUEUE_OFFSET (predicted):
    ``diverged`` as _Predicted keeps it."""
    rows = []
    for (queue, qid), (u, count, delta) in sorted(diverged.items()):
        rows.append(dict(broker=broker, topic=queue, queue_id=qid, queue_offset=u.queue_offset,
                         physical_offset=u.physical_offset, values={"count": count, "delta": delta},
                         details={"count": count, "record_offset": u.record_offset}))
    return finding_rows("lmq.offsets_diverged", rows)


def _stalled(ctx, broker: str, stall: tuple[int, int], pred, by_offset: dict, recs: pa.Table,
             at_offset: dict) -> pa.Table:
    at, after = stall
    r = by_offset[at]
    p = ctx.recovery.get(broker)
    if p is not None and not p.will_start and any("Long.parseLong" in x for x in p.start_problems):
        restart = "the broker keeps abort, and its abnormal recovery re-dispatches this record and fails: it will " \
                  "not start"
    elif p is not None and p.mode == "abnormal":
        restart = "the abnormal recovery does not reach it (it lies before the re-dispatch range), so the broker " \
                  "starts, and its reput starts at the commitlog's end: those records are never dispatched"
    else:
        restart = "there is no abort file (it was removed), so the broker starts, and its reput starts at the " \
                  "commitlog's end (5.3.3: getConfirmOffset): those records are never dispatched"
    s = pred.stall
    return finding_rows("lmq.dispatch_stalled", [dict(
        broker=broker, file=r["file"], file_position=r["file_position"], physical_offset=at, topic=r["topic"],
        queue_id=r["queue_id"], queue_offset=r["queue_offset"],
        values={"queue": s.queue if s else "?", "offset_text": f'"{s.offset_text}"' if s else "?", "after": after,
                "restart": restart},
        details={**dict(zip(("names", "offsets"), _lists(recs, at_offset, at))), "records_after": after,
                 "uniq_key": r["uniq_key"],
                 "key": r["uniq_key"]})])


def _stalled_record(ctx, broker: str, at: int) -> dict | None:
    import pyarrow.dataset as ds

    hit = ctx.partial_dataset("lmq.records", RECORDS).to_table(
        filter=(ds.field("broker") == broker) & (ds.field("physical_offset") == at))
    return hit.to_pylist()[0] if hit.num_rows else None


def _stalled_to_resend(ctx, stalls: dict) -> None:
    """The stalling record goes to the messages to re-send (jobs/audit/resend.py): its LMQ units after the bad name
    are never written (the consumequeue family names the records after it)."""
    from .. import resend

    for broker, (at, _) in sorted(stalls.items()):
        r = _stalled_record(ctx, broker, at)
        if r is not None:
            ctx.resend_damaged.append(resend.undispatched_row(broker, r))


def summary(ctx) -> dict:
    """summary.json's ``dispatch_stall`` per broker whose reput a record stalls: where the record is and how many
    kept records follow it (the verdict's way out of a broker that will not start)."""
    out = {}
    for broker, (at, after) in _stalls(ctx).items():
        r = _stalled_record(ctx, broker, at)
        if r is not None:
            out[broker] = {"dispatch_stall": {
                "physical_offset": at, "segment": r["file"], "file_position": r["file_position"], "topic": r["topic"],
                "queue_id": r["queue_id"], "queue_offset": r["queue_offset"], "uniq_key": r["uniq_key"],
                "records_after": after}}
    return out


def applies(plan) -> bool:
    """A broker whose files say its records may carry dispatch lists (a 5.x store, LMQ queues or offsets)."""
    return plan.dispatch.multi


FAMILY = Family(
    "lmq", "LMQ queues against RocketMQ's multi-dispatch predicted from the records; the dispatch list that stalls "
           "the reput (a broker that will not start)",
    always=True, applies=applies, in_range=in_range, after_scan=after_scan, on_driver=on_driver, summary=summary,
    emits={"lmq.records": RECORDS, "lmq.units": UNITS, "lmq.ranges": RANGES},
    reads=("lmq.records", "lmq.units", "lmq.ranges"))
