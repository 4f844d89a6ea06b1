"""CommitLog <-> compaction store (5.x topics with ``cleanup.policy=COMPACTION``; docs/store-format-compaction.md):
each queue's compaction log holds CommitLog records (PHYSICALOFFSET their log offset), its sparse queue one unit per
log record (phyOffset the log offset, msgBaseOffset the record's queue offset, batchSize 1), and
``compaction/position-checkpoint`` the queue offset the queue was compacted up to, inclusive.  After a compaction the
log holds, for every KEYS string, the newest CommitLog record of the queue at or below that offset (none when its
body is empty) and no older one; records above it are the uncompacted tail.

Checks: ``compaction.newest_value_missing`` (error: the CommitLog's newest record of a key at or below the checkpoint
is not in the log; the finding names the key, that record's CommitLog offset and what the log holds instead),
``compaction.superseded_value_kept`` (warning: the log holds an older value of a key beside its newest, at or below
the checkpoint), ``compaction.record_differs`` (a log record whose key, size or body CRC is not the CommitLog's
record at its queue offset), ``compaction.unit_points_wrong`` (a sparse unit whose phyOffset starts no log record,
or whose record is of another queue, queue offset or size), ``compaction.corrupt_record`` (the log's walk stops on
damage: framing, PHYSICALOFFSET or body CRC, as the CommitLog's does) and ``compaction.file_problem`` (a sparse-queue
file of a bad name or length, a log file without the sparse-queue file of its name or the other way round, a log
folder without its queue folder, an unreadable position-checkpoint); the warning ``compaction.generation_left`` (a
``compacting/`` or ``replicating/`` folder an interrupted compaction or slave sync left in a queue folder);
``compaction.recovery_drops`` (the sparse units and log records the broker's load cuts and never appends again:
store_format.compaction.predict_log_recovery) and ``compaction.checkpoint_ahead`` (a queue's position-checkpoint above
the CommitLog's highest queue offset of it: the broker's next values never reach the compaction log).

Where: a scan task sends the kept records of the broker's compaction topics (their queue offset, KEYS, body CRC and
whether the body is empty) to the driver, which reads each queue's log and sparse queue (store_format.compaction,
the ``compaction`` backend of store_format.queues) and compares.  Run whatever ``--checks`` says, for every broker
with a compaction store or a COMPACTION topic (``applies``).
"""
from __future__ import annotations

import bisect
from typing import NamedTuple

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.fs as pafs

from store_format import layout as L
from store_format.commitlog import END_OF_DATA
from store_format.compaction import generations, log_files, predict_log_recovery, read_position_checkpoint, walk_log
from store_format.queues import COMPACTION
from store_format.rolled import queue_id_of

from ..contract import Family, FamilyResult
from ..findings import Consequence, Severity, check, concat_findings, finding_rows

check("compaction.newest_value_missing", Severity.ERROR,
      "compacted queue {topic}/{queue_id}: key {key}'s newest value at or below the compaction position "
      "{checkpoint} is queue offset {queue_offset} (CommitLog offset {physical_offset}), the compaction log holds "
      "{instead}",
      group="queue", consequence=Consequence.CONSUMERS_AFFECTED,
      action="Consumers of the compacted topic read an outdated value or none for that key: move the queue's "
             "compaction/compactionLog and compaction/compactionCq folders away and its position-checkpoint entry, "
             "and let the broker rebuild them from the CommitLog (or re-send the newest value).")
check("compaction.superseded_value_kept", Severity.WARNING,
      "compacted queue {topic}/{queue_id}: the compaction log keeps key {key}'s older value at queue offset "
      "{queue_offset} beside its newest at {newest} (both at or below the compaction position {checkpoint})",
      group="queue", consequence=Consequence.COSMETIC,
      action="Nothing for the latest state: a consumer replaying the topic sees the older value first; the next "
             "compaction removes it.")
check("compaction.record_differs", Severity.ERROR,
      "compaction-log record of {topic}/{queue_id} at queue offset {queue_offset}: its {field} is {log_value}, the "
      "CommitLog's record there has {commitlog_value}",
      group="queue", consequence=Consequence.CONSUMERS_AFFECTED,
      action="The log is not a copy of this CommitLog (damage or another store's files): rebuild the queue's "
             "compaction store from the CommitLog.")
check("compaction.unit_points_wrong", Severity.ERROR, "sparse unit of {topic}/{queue_id} at queue offset "
      "{queue_offset} points at compaction-log offset {physical_offset}: {reason}",
      group="queue", consequence=Consequence.CONSUMERS_AFFECTED,
      action="Consumers of the compacted topic get the wrong record or none there: rebuild the queue's compaction "
             "store from the CommitLog.")
check("compaction.corrupt_record", Severity.ERROR,
      "compaction log {topic}/{queue_id} file {file}: the walk stops at {file_position}: {reason}",
      group="queue", consequence=Consequence.CONSUMERS_AFFECTED,
      action="Records after it cannot be read from the log: rebuild the queue's compaction store from the "
             "CommitLog.")
check("compaction.file_problem", Severity.ERROR, "compaction store file {file} of {topic}/{queue_text}: {reason}",
      group="queue", consequence=Consequence.WILL_NOT_START,
      action="The broker's load of the compaction store fails on a log and sparse queue that do not pair up, and "
             "it will not start: restore the missing file or move the queue's folders away (the broker rebuilds "
             "them).")

check("compaction.recovery_drops", Severity.ERROR,
      "compacted queue {topic}/{queue_id}: the broker's load of its compaction store drops {what} from queue offset "
      "{queue_offset} on ({reason}), and nothing appends them again",
      group="queue", consequence=Consequence.CONSUMERS_AFFECTED,
      action="Once the CommitLog's copies are deleted, consumers of the compacted topic miss those values: copy the "
             "queue's compaction folders before the restart and rebuild them from the CommitLog (move them and its "
             "position-checkpoint entry away) while the CommitLog still holds the records.")
check("compaction.checkpoint_ahead", Severity.ERROR,
      "compaction position-checkpoint says {topic}/{queue_id} was compacted up to queue offset {checkpoint}, the "
      "CommitLog's records of the queue end at queue offset {commitlog_max}: the messages the broker appends at "
      "queue offsets up to the compacted queue's end are never put in its compaction log",
      group="queue", consequence=Consequence.CONSUMERS_AFFECTED,
      action="The compaction store is not this CommitLog's (a CommitLog lost, truncated or restored from an older "
             "copy): move the queue's compaction folders and its position-checkpoint entry away so the broker "
             "rebuilds them from this CommitLog.")
check("compaction.generation_left", Severity.WARNING,
      "{part} {topic}/{queue_text} holds a {generation}/ folder: a compaction (compacting) or a slave's sync from its "
      "master (replicating) was interrupted; the broker does not read it as the queue",
      group="queue", consequence=Consequence.COSMETIC,
      action="Move the folder away before the broker's next compaction, which writes its new generation into the "
             "same folder.")

RECORDS = pa.schema([("broker", pa.string()), ("topic", pa.string()), ("queue_id", pa.int32()),
                     ("queue_offset", pa.int64()), ("physical_offset", pa.int64()), ("store_size", pa.int32()),
                     ("body_crc", pa.int32()), ("keys", pa.string()), ("has_body", pa.bool_())])


def probes(ctx, broker: str) -> frozenset:
    """The broker's cleanup.policy=COMPACTION topics, for every scan task of it."""
    return ctx.plans[broker].store.compaction_topics


def in_range(rc, out) -> None:
    """The kept records of the compaction topics in this range (CompactionService.putRequest takes every one)."""
    topics = rc.facts.probes.get("compaction")
    m = rc.messages
    if not topics or not m.num_rows:
        return
    want = rc.column("kept") & pc.is_in(m.column("topic"), pa.array(sorted(topics))).to_numpy(zero_copy_only=False)
    rows = np.flatnonzero(want)
    if not len(rows):
        return
    t, d = m.take(rows), rc.decode(rows, ("properties", "body", "body_crc"))
    keys = [dict(p or ()).get(L.PROPERTY_KEYS) for p in d.column("properties").to_pylist()]
    out.partial("compaction.records", pa.table({
        "broker": pa.repeat(pa.scalar(rc.broker), len(rows)), "topic": t.column("topic"),
        "queue_id": t.column("queue_id"), "queue_offset": t.column("queue_offset"),
        "physical_offset": t.column("physical_offset"),
        "store_size": pa.array(rc.column("store_size")[rows], pa.int32()),
        "body_crc": d.column("body_crc").cast(pa.int32()), "keys": pa.array(keys, pa.string()),
        "has_body": pc.greater(pc.binary_length(d.column("body")), 0)}, schema=RECORDS))


def on_driver(ctx) -> FamilyResult:
    res = FamilyResult()
    records = ctx.partial("compaction.records", RECORDS)
    for name, plan in ctx.plans.items():
        if applies(plan):
            mine = records.filter(pc.equal(records.column("broker"), name)) if records.num_rows else records
            res.findings += _broker(name, plan.store, mine)
    return res


class _Held(NamedTuple):
    """What the checks need of one log record (its body is not kept: a log may be large)."""

    size: int
    topic: str
    queue_id: int
    queue_offset: int
    keys: str | None
    body_crc: int


def _log(root, topic: str, qid: int) -> tuple[dict, list]:
    """A queue's log records {log offset: _Held} and the walk's damage stops."""
    at, stops = {}, []
    for fr in walk_log(log_files(root, topic, qid)):
        if fr.kind == "message":
            m = fr.message
            at[fr.physical_offset] = _Held(fr.size, m.topic, m.queue_id, m.queue_offset,
                                           m.properties.get(L.PROPERTY_KEYS), m.body_crc)
        elif fr.kind == "stop" and fr.stop_kind != END_OF_DATA:
            stops.append(fr)
    return at, stops


def _broker(name: str, store, records: pa.Table) -> list:
    cp = read_position_checkpoint(store.loc)
    by_queue: dict[tuple, list] = {}
    for r in records.to_pylist():
        by_queue.setdefault((r["topic"], r["queue_id"]), []).append(r)
    found = {c: [] for c in ("newest_value_missing", "superseded_value_kept", "record_differs", "unit_points_wrong",
                             "corrupt_record", "file_problem", "generation_left", "recovery_drops",
                             "checkpoint_ahead")}
    base = dict(broker=name)
    if cp.error is not None:
        found["file_problem"].append(dict(base, file=L.COMPACTION_CHECKPOINT_FILE, topic=None, values={
            "queue_text": "-", "reason": f"unreadable, the compaction positions are not known: {cp.error}"},
            details={"problem": cp.error.kind.value}))
    queues = [q for q in store.queue_models if q.backend is COMPACTION]
    found["file_problem"] += _file_problems(name, store, queues)
    for part, topic, queue, generation in generations(store.loc):
        found["generation_left"].append(dict(base, topic=topic, queue_id=queue_id_of(queue),
                                             file=f"{part}/{topic}/{queue}/{generation}", values={
                                                 "part": part, "queue_text": queue, "generation": generation}))
    for q in queues:
        topic, qid = q.key
        at, stops = _log(store.loc, topic, qid)
        for fr in stops:
            found["corrupt_record"].append(dict(base, topic=topic, queue_id=qid, file=fr.segment,
                                                file_position=fr.file_position, physical_offset=fr.physical_offset,
                                                values={"reason": fr.stop_message or fr.stop_kind},
                                                details={"problem": fr.stop_kind, "field": fr.stop_field}))
        u = q.units()
        damaged = {fr.physical_offset - fr.file_position: fr.physical_offset for fr in stops}
        bases = sorted(f.base_offset for f in log_files(store.loc, topic, qid) if f.base_offset is not None)
        for i in np.flatnonzero(u.valid):
            phys, qo, size = int(u.physical_offset[i]), int(u.queue_offset[i]), int(u.size[i])
            msg = at.get(phys)
            if msg is None and _behind(bases, damaged, phys):
                continue  # a unit of a record behind the log's damage: the corrupt_record finding is its cause
            reason = "no log record starts there" if msg is None else \
                f"its record is of {msg.topic}/{msg.queue_id}" if (msg.topic, msg.queue_id) != (topic, qid) else \
                f"its record is at queue offset {msg.queue_offset}" if msg.queue_offset != qo else \
                f"its record is {msg.size} bytes, the unit says {size}" if msg.size != size else None
            if reason:
                found["unit_points_wrong"].append(dict(base, topic=topic, queue_id=qid, queue_offset=qo,
                                                       physical_offset=phys, file=str(u.file[i]),
                                                       file_position=int(u.file_position[i]),
                                                       values={"reason": reason}))
        found["recovery_drops"] += _recovery_drops(base, topic, qid, predict_log_recovery(
            q.files, log_files(store.loc, topic, qid), {phys: m.queue_offset for phys, m in at.items()}))
        log = sorted(at.values(), key=lambda m: m.queue_offset)
        _against_commitlog(base, topic, qid, cp.offset(topic, qid), log, by_queue.get((topic, qid), []), found)
    for (topic, qid), checkpoint in sorted(cp.offsets.items()):
        mine = by_queue.get((topic, qid))
        top = max(r["queue_offset"] for r in mine) if mine else None  # no record: no evidence either way
        if top is not None and checkpoint > top:
            found["checkpoint_ahead"].append(dict(base, topic=topic, queue_id=qid, queue_offset=checkpoint,
                                                  file=L.COMPACTION_CHECKPOINT_FILE, values={
                                                      "checkpoint": checkpoint, "commitlog_max": top},
                                                  details={"commitlog_max_queue_offset": top}))
    return [finding_rows(f"compaction.{c}", rows) for c, rows in found.items()]


def _recovery_drops(base: dict, topic: str, qid: int, rec) -> list:
    """``compaction.recovery_drops``: the units and log records the load's recovery cuts
    (store_format.compaction.predict_log_recovery), one finding per queue at the first."""
    if rec is None or not (rec.units_dropped or rec.records_dropped):
        return []
    offsets = sorted({qo for _, _, qo, _ in rec.units_dropped} | {qo for _, qo in rec.records_dropped})
    parts = []
    if rec.units_dropped:
        f, at, _, _ = rec.units_dropped[0]
        parts.append(f"{len(rec.units_dropped)} sparse unit(s) past a unit that fails in their file (the first in "
                     f"{f} at {at}): recovery ends each file it walks there")
    if rec.records_dropped:
        parts.append(f"{len(rec.records_dropped)} log record(s) at or past log offset {rec.log_end}, where the last "
                     "sparse unit kept ends: recovery truncates the log there" + (
                         f" and deletes {len(rec.files_deleted)} log file(s)" if rec.files_deleted else ""))
    first_unit = min(rec.units_dropped, key=lambda u: u[2]) if rec.units_dropped else None
    where = dict(file=first_unit[0], file_position=first_unit[1]) if first_unit and first_unit[2] == offsets[0] \
        else {}
    return [dict(base, topic=topic, queue_id=qid, queue_offset=offsets[0], **where, values={
        "what": f"{len(offsets)} value(s)", "queue_offset": offsets[0], "reason": "; ".join(parts)},
        details={"queue_offsets": offsets, "log_end": rec.log_end, "queue_end": rec.queue_end,
                 "files_deleted": list(rec.files_deleted)})]


def _behind(bases: list, damaged: dict, phys: int) -> bool:
    """``phys`` lies from the damage stop of its log file on (``bases``: the log files' base offsets, in order;
    ``damaged``: {file base offset: the stop's log offset})."""
    i = bisect.bisect_right(bases, phys) - 1
    return i >= 0 and bases[i] in damaged and damaged[bases[i]] <= phys


def _against_commitlog(base: dict, topic: str, qid: int, checkpoint: int, log: list, records: list,
                       found: dict) -> None:
    """The log against the CommitLog's records of the queue: each log record is the CommitLog's at its queue offset;
    at or below the checkpoint, each key's newest CommitLog record is in the log and no older one."""
    by_offset = {r["queue_offset"]: r for r in records}
    for m in log:
        r = by_offset.get(m.queue_offset)
        if r is None:
            continue  # the CommitLog no longer holds it (its files were deleted): nothing to compare with
        for field, mine, theirs in (("KEYS", m.keys, r["keys"]), ("size", m.size, r["store_size"]),
                                    ("body CRC", m.body_crc, r["body_crc"])):
            if mine != theirs:
                found["record_differs"].append(dict(base, topic=topic, queue_id=qid, queue_offset=m.queue_offset,
                                                    physical_offset=r["physical_offset"], values={
                                                        "field": field, "log_value": str(mine),
                                                        "commitlog_value": str(theirs)}))
                break
    if checkpoint < 0:
        return  # never compacted: the log is every record, which the comparison above covers
    newest: dict[str, dict] = {}
    for r in sorted(records, key=lambda r: r["queue_offset"]):
        if r["keys"] and r["keys"].strip() and r["queue_offset"] <= checkpoint:
            newest[r["keys"]] = r
    held: dict[str, list] = {}
    for m in log:
        if m.keys and m.queue_offset <= checkpoint:
            held.setdefault(m.keys, []).append(m.queue_offset)
    for key, r in newest.items():
        mine = held.get(key, [])
        if r["has_body"] and r["queue_offset"] not in mine:
            instead = f"queue offset(s) {', '.join(map(str, mine))} for it" if mine else "no value for it"
            found["newest_value_missing"].append(dict(base, topic=topic, queue_id=qid, queue_offset=r["queue_offset"],
                                                      physical_offset=r["physical_offset"], values={
                                                          "key": key, "checkpoint": checkpoint, "instead": instead},
                                                      details={"held": mine}))
        elif not r["has_body"] and mine:
            found["newest_value_missing"].append(dict(base, topic=topic, queue_id=qid, queue_offset=r["queue_offset"],
                                                      physical_offset=r["physical_offset"], values={
                                                          "key": key, "checkpoint": checkpoint,
                                                          "instead": f"queue offset(s) {', '.join(map(str, mine))} "
                                                                     "for it, though that newest value is empty (a "
                                                                     "deletion)"},
                                                      details={"held": mine}))
    for key, offsets in held.items():
        top = max(offsets)
        for qo in offsets:
            if qo < top:
                found["superseded_value_kept"].append(dict(base, topic=topic, queue_id=qid, queue_offset=qo,
                                                           values={"key": key, "newest": top,
                                                                   "checkpoint": checkpoint}))


def _file_problems(name: str, store, queues: list) -> list:
    """What the listing finds wrong with sparse-queue files, and logs and sparse queues that do not pair up
    (CompactionStore.load, TopicPartitionLog.sanityCheck)."""
    rows = []
    for f in store.listing_of(COMPACTION):
        for kind, why in f.problems:
            rows.append(dict(broker=name, file=f.name, topic=f.topic, queue_id=f.queue_id,
                             values={"queue_text": str(f.queue_id), "reason": why}, details={"problem": kind}))
    for q in queues:
        cq = {f.name for f in q.files}
        logs = {f.name for f in log_files(store.loc, *q.key) if f.base_offset is not None}
        for missing, what in ((sorted(logs - cq), "a compaction-log file without the sparse-queue file of its name"),
                              (sorted(cq - logs), "a sparse-queue file without the compaction-log file of its name")):
            rows += [dict(broker=name, file=n, topic=q.topic, queue_id=q.queue_id, values={
                "queue_text": str(q.queue_id), "reason": what}, details={"problem": "unpaired"}) for n in missing]
    loaded = {q.key for q in queues}
    logs = store.loc.child(L.COMPACTION_DIR).child("compactionLog")
    for topic in (i.base_name for i in logs.list() if i.type == pafs.FileType.Directory) if logs.is_dir() else ():
        for i in logs.child(topic).list():
            qid = queue_id_of(i.base_name)
            if i.type == pafs.FileType.Directory and qid is not None and (topic, qid) not in loaded:
                rows.append(dict(broker=name, file=f"compactionLog/{topic}/{qid}", topic=topic, queue_id=qid, values={
                    "queue_text": str(qid), "reason": "a compaction log without its sparse queue (compactionCq): "
                                                      "the broker does not load it"},
                    details={"problem": "unpaired"}))
    return rows


def applies(plan) -> bool:
    """A broker with a compaction store or a COMPACTION topic."""
    return bool(plan.store.compaction_topics)


FAMILY = Family(
    "compaction", "CommitLog <-> compaction store (5.x cleanup.policy=COMPACTION topics): newest values the log "
                  "dropped, records and units that disagree, corrupt logs, unpaired files",
    always=True, applies=applies, probes=probes, in_range=in_range, on_driver=on_driver,
    emits={"compaction.records": RECORDS}, reads=("compaction.records",))
