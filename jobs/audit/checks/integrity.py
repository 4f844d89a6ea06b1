"""Framing and integrity of the CommitLog: damage the salvage walk could not frame, records that decode badly,
stale records past a segment's first stop, segment files of the wrong length or name, gaps between segments.

Checks: ``integrity.<reason>`` for each corrupt span (reason = the walk's stop kind in lower case: bad_crc,
bad_magic, size_mismatch, bad_length, truncated, physical_offset_mismatch, end_of_data for a hole after zeros;
bad_file_name, bad_geometry (wrong or empty length) for segment files), ``integrity.damaged_message`` (the
message a span destroyed, when its header still decodes), ``integrity.stale_records``, ``integrity.segment_gap``,
``integrity.no_commitlog``, ``integrity.invalid_utf8`` (a topic, property name or value that is not UTF-8),
``integrity.bad_property_crc`` (5.2.0+: a record whose whole-record CRC property ``__CRC32#`` does not match its
bytes) and the warning ``integrity.malformed_property_crc`` (the property's value is not ten digits).  The
segment table (fill and damage per segment) is this family's detail table.
"""
from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from store_format.scan import span_detail
from store_format import codec
from store_format import propcrc
from store_format import layout as L
from store_format.commitlog import KIND_BLANK, KIND_CORRUPT, KIND_MESSAGE, KIND_STOP, segment_name
from store_format.errors import ErrorKind, StoreFormatError
from decoding.columns import column

from ..findings import Consequence, Severity, check, finding_rows, finding_table, metric_table
from .. import resend
from ..contract import Family, FamilyResult, Plot, TableView

_SPAN = ("unframeable bytes ({reason|?}): {length} bytes at {file}@{file_position}[, then the segment's unwritten "
         "zero tail ({unwritten_tail} bytes, not damage)][: {detail}]")
SPAN_REASONS = (ErrorKind.BAD_MAGIC, ErrorKind.BAD_CRC, ErrorKind.SIZE_MISMATCH, ErrorKind.BAD_LENGTH,
                ErrorKind.TRUNCATED, ErrorKind.PHYSICAL_OFFSET_MISMATCH, "END_OF_DATA", ErrorKind.BAD_FILE_NAME,
                ErrorKind.BAD_GEOMETRY)
_SPAN_ACTION = ("The messages inside the span are gone from this copy; check `recovery.truncation` for what the broker "
                "will drop after it; look for the same offsets in a slave or backup (`rocketmq-forensics compare`), "
                "and copy out the intact records after the span (`rocketmq-forensics extract --walk salvage`, or "
                "`rocketmq-forensics replay --repair` for a new store) before starting the broker on this disk.")
_FILE_ACTIONS = {  # the two reasons that are about a segment file, not about bytes inside one
    ErrorKind.BAD_FILE_NAME: (Consequence.DATA_AT_RISK,
                              "Rename the file to its 20-digit offset or move it out of `commitlog/` (keep a copy); until "
                              "then its bytes are not read."),
    ErrorKind.BAD_GEOMETRY: (Consequence.WILL_NOT_START,
                             "Restore the file's full length from a backup or slave before starting the broker, or pass "
                             "`--segment-size` if the size was guessed wrong."),
}
for _r in SPAN_REASONS:
    _consequence, _action = _FILE_ACTIONS.get(_r, (Consequence.DATA_LOST, _SPAN_ACTION))
    check(f"integrity.{str(getattr(_r, 'value', _r)).lower()}", Severity.ERROR, _SPAN, consequence=_consequence,
          action=_action, roles=("damage",))
check("integrity.damaged_message", Severity.ERROR,
      "the damaged record ({reason}) is a message of {topic}/{queue_id} at queue offset {queue_offset}, key {key_text}",
      consequence=Consequence.DATA_LOST, group="broker", roles=("damage", "damaged_message"),
      action="Ask the producer to resend that key; check consumers for it.")
check("integrity.stale_records", Severity.WARNING,
      "{count} well-formed record(s) after the segment's first stop (the broker's walk never reaches them)",
      consequence=Consequence.DATA_AT_RISK,
      action="Usually leftovers of an earlier truncation; extract them (`rocketmq-forensics extract --walk salvage`) "
             "if they are messages that were never consumed.")
check("integrity.segment_gap", Severity.ERROR,
      "segment {file} follows {previous}: {missing} bytes of commitlog are missing between them",
      consequence=Consequence.DATA_LOST,
      action="Restore the missing file (`details.expected_name`) from a backup or slave; without it everything after "
             "is unreachable.")
check("integrity.no_commitlog", Severity.ERROR, "no commitlog segment in this store",
      consequence=Consequence.DATA_LOST,
      action="Check that `--store` points at the store root and that the copy is complete.")
check("integrity.invalid_utf8", Severity.WARNING,
      "{field} of this message is not UTF-8: {value} (the broker reads U+FFFD for the bytes shown escaped, so "
      "consumers and key lookups see other text than the producer sent)",
      consequence=Consequence.CONSUMERS_AFFECTED, group="broker",
      action="The broker reads U+FFFD for those bytes: consumers see other text, and lookups by the original key fail "
             "(expect `index.*` findings for the same message).  Re-send it from the producer's record if the key "
             "matters.")

check("integrity.bad_property_crc", Severity.ERROR,
      "the record's whole-record CRC (__CRC32# {stored}) does not match its bytes ({computed}): a byte of it changed "
      "after it was written",
      consequence=Consequence.DATA_AT_RISK, group="broker", roles=("property_crc",),
      action="The body CRC still holds, so only the header or properties changed (times, offsets, keys, tags): "
             "compare the record with a slave or backup (`rocketmq-forensics compare`); with forceVerifyPropCRC the "
             "broker's recovery cuts here.")
check("integrity.malformed_property_crc", Severity.WARNING,
      "the record's __CRC32# property holds {text}, not ten digits: its whole-record CRC cannot be checked",
      consequence=Consequence.DATA_AT_RISK, group="broker", roles=("property_crc",),
      action="A byte of the property changed: compare the record with a slave or backup (`rocketmq-forensics "
             "compare`); with forceVerifyPropCRC the broker's recovery cuts here.")

_CONTEXT_REASONS = ("BAD_CRC", "SIZE_MISMATCH", "PHYSICAL_OFFSET_MISMATCH")  # spans whose record still decodes

SEGMENT_PARTS = pa.schema([
    ("broker", pa.string()), ("segment", pa.string()), ("messages", pa.int64()), ("message_bytes", pa.int64()),
    ("stale_records", pa.int64()), ("corrupt_bytes", pa.int64()), ("first_stop", pa.int64()),
    ("stop_reason", pa.string()), ("blank_at", pa.int64()), ("stale_first", pa.int64()), ("stale_last", pa.int64()),
    ("stale_first_offset", pa.int64()),
])
PROPERTY_CRCS = pa.schema([("broker", pa.string()), ("records", pa.int64()), ("verified", pa.int64())])
# per range: the first message a forceVerifyPropCRC recovery walk refuses
FORCED_REFUSALS = pa.schema([("broker", pa.string()), ("segment", pa.string()), ("file_position", pa.int64()),
                             ("physical_offset", pa.int64()), ("kind", pa.string())])
QUEUE_COUNTS = pa.schema([("broker", pa.string()), ("topic", pa.string()), ("queue_id", pa.int32()),
                          ("messages", pa.int64()), ("bytes", pa.int64())])
SEGMENTS = pa.schema([
    column("broker", pa.string()), column("segment", pa.string()),
    column("base_offset", pa.int64(), "the segment's first physical offset (its name as a number)"),
    column("file_length", pa.int64(), "the file's length in bytes"),
    column("messages", pa.int64(), "messages the salvage walk framed in it"),
    column("message_bytes", pa.int64(), "bytes of those messages"),
    column("stale_records", pa.int64(), "well-formed records after the segment's first stop, which the broker's "
                                        "walk never reaches"),
    column("corrupt_bytes", pa.int64(), "bytes no walk could frame"),
    column("first_stop", pa.int64(), "file position of the first stop (damage or the zero-filled end of data)"),
    column("stop_reason", pa.string(), "why the walk stopped there: END_OF_DATA (normal) or a damage kind "
                                       "(BAD_CRC, ...)"),
    column("blank_at", pa.int64(), "file position of the end-of-file blank record, if any"),
])


def in_range(rc, out) -> None:
    if not rc.has_segments:
        return  # a broker without a commitlog: nothing to frame
    it = rc.items
    spans = [(i, it.others[i]) for i in np.flatnonzero(it.kinds == KIND_CORRUPT).tolist()]
    by_reason: dict[str, list] = {}
    for i, span in spans:
        by_reason.setdefault(span.reason, []).append((i, span))
    for reason, group in by_reason.items():
        n = len(group)
        rows = np.array([i for i, _ in group], np.int64)
        length = pa.array([s.length for _, s in group], pa.int64())
        at = np.array([s.file_position for _, s in group], np.int64)  # context positions
        detail = pa.array([span_detail(s) for _, s in group], pa.string())
        excerpt = pa.array([s.excerpt.hex() for _, s in group], pa.string())
        tail = pa.array([s.unwritten_tail or None for _, s in group], pa.int64())
        out.finding(finding_table(
            f"integrity.{reason.lower()}", n, broker=rc.broker, file=rc.files(rows),
            file_position=pa.array(rc.file_positions(rows, at)), physical_offset=pa.array(at + rc.base),
            values={"reason": reason, "length": length, "detail": detail, "unwritten_tail": tail},
            details={"length": length, "reason": reason, "field": None, "detail": detail, "excerpt_hex": excerpt,
                     "unwritten_tail_bytes": tail}))
    _damaged_messages(rc, [(i, s) for i, s in spans if s.reason in _CONTEXT_REASONS], out)
    out.partial("integrity.segments", _segment_parts(rc, spans))
    m = rc.messages
    _malformed_texts(rc, out)
    _property_crcs(rc, out)
    if m.num_rows:
        per_queue = m.group_by(["topic", "queue_id"]).aggregate([("store_size", "count"), ("store_size", "sum")])
        out.partial("integrity.queue_counts", pa.table({
            "broker": pa.repeat(pa.scalar(rc.broker), per_queue.num_rows), "topic": per_queue.column("topic"),
            "queue_id": per_queue.column("queue_id"),
            "messages": per_queue.column("store_size_count").cast(pa.int64()),
            "bytes": per_queue.column("store_size_sum").cast(pa.int64())}, schema=QUEUE_COUNTS))


def _segment_parts(rc, spans: list) -> pa.Table:
    """A row per range of what its walk framed (the driver sums a segment's ranges: :data:`SEGMENTS`), reduced
    per range over the context's arrays (RangeContext.per_part), not range by range."""
    it, n = rc.items, len(rc.parts)
    rows = np.arange(len(it.positions), dtype=np.int64)
    shifts = np.array([p.shift for p in rc.parts], np.int64)
    pos = it.positions - shifts[rc.part_of(rows)]  # file positions
    msg = np.flatnonzero(it.kinds == KIND_MESSAGE)
    stale = msg[rc.beyond_first_stop(msg)]
    stops = np.flatnonzero(it.kinds == KIND_STOP)
    blanks = np.flatnonzero(it.kinds == KIND_BLANK)
    messages, _ = rc.per_part(msg, np.ones(len(msg), np.int64), "sum")
    message_bytes, _ = rc.per_part(msg, it.sizes[msg], "sum")
    stale_records, _ = rc.per_part(stale, np.ones(len(stale), np.int64), "sum")
    stale_first, has_stale = rc.per_part(stale, pos[stale], "min")
    stale_last, _ = rc.per_part(stale, pos[stale], "max")
    first_stop, has_stop = rc.per_part(stops, pos[stops], "min")
    blank_at, has_blank = rc.per_part(blanks, pos[blanks], "min")
    span_rows = np.array([i for i, _ in spans], np.int64)
    corrupt_bytes, _ = rc.per_part(span_rows, np.array([s.length for _, s in spans], np.int64), "sum")
    stop_reason: list = [None] * n  # the reason of each range's first stop at its least position (np.argmin's)
    decided = np.zeros(n, bool)
    for r, k in zip(stops.tolist(), rc.part_of(stops).tolist()):
        if not decided[k] and pos[r] == first_stop[k]:
            stop_reason[k], decided[k] = it.others[r].stop_kind, True
    bases = np.array([p.base for p in rc.parts], np.int64)

    def maybe(values, has):
        return pa.array(values, pa.int64(), mask=~has)

    return pa.table({
        "broker": pa.array([rc.broker] * n, pa.string()), "segment": [p.segment for p in rc.parts],
        "messages": messages, "message_bytes": message_bytes, "stale_records": stale_records,
        "corrupt_bytes": corrupt_bytes, "first_stop": maybe(first_stop, has_stop),
        "stop_reason": pa.array(stop_reason, pa.string()), "blank_at": maybe(blank_at, has_blank),
        "stale_first": maybe(stale_first, has_stale), "stale_last": maybe(stale_last, has_stale),
        "stale_first_offset": maybe(stale_first + bases, has_stale)}, schema=SEGMENT_PARTS)


def _malformed_texts(rc, out) -> None:
    """Messages whose topic or properties hold malformed UTF-8 (the kernels' ``invalid_utf8``): one finding per
    malformed field, at the record, with the value escaped and its first bad byte's file position
    (store_format.codec.malformed_texts)."""
    bad = np.flatnonzero(rc.messages.column("invalid_utf8").is_valid().to_numpy(zero_copy_only=False))
    rows = []
    for row in bad.tolist():
        item = rc.message_rows[row:row + 1]
        pos = int(rc.positions[item[0]])  # a context position
        shift = pos - int(rc.file_positions(item)[0])
        m = rc.messages.slice(row, 1).to_pylist()[0]
        try:
            fields = codec.malformed_texts(rc.buf, pos - rc.w0)
        except StoreFormatError:
            continue
        for field, value, at in fields:
            rows.append(dict(broker=rc.broker, file=m["segment"], file_position=pos - shift,
                             physical_offset=pos + rc.base, topic=m["topic"], queue_id=m["queue_id"],
                             queue_offset=m["queue_offset"], values={"field": field, "value": value[:200]},
                             details={"field": field, "value": value, "malformed_at": at + rc.w0 - shift,
                                      "uniq_key": m["uniq_key"]}))
    out.finding(finding_rows("integrity.invalid_utf8", rows))


def _property_crcs(rc, out) -> None:
    """The ``__CRC32#`` of every message that carries one (store-format-5x.md section 1): the decode says which do
    (the kernels' ``crc_property``, found while the properties are copied), and only those get their CRC computed,
    so a range of 4.x records pays nothing.  A mismatch is an error at its record, a value that is not ten digits
    a warning.  And where the broker's recovery would cut this range with ``forceVerifyPropCRC``
    (:func:`_forced_refusal`)."""
    if not len(rc.message_rows):
        return
    carries = pc.fill_null(rc.messages.column("crc_property"), False).to_numpy(zero_copy_only=False)
    rows = np.flatnonzero(carries)
    pos = rc.positions[rc.message_rows] - rc.w0
    sizes = rc.items.sizes[rc.message_rows]
    c = propcrc.check_crc_many(rc.buf, pos[rows], sizes[rows])
    _forced_refusal(rc, out, rows, c.force_ok, pos, sizes)
    if not len(rows):
        return
    out.partial("integrity.property_crcs", pa.table({"broker": [rc.broker], "records": [len(rows)],
                                                     "verified": [int((c.status == propcrc.OK).sum())]},
                                                    schema=PROPERTY_CRCS))
    for status, check_id in ((propcrc.MISMATCH, "integrity.bad_property_crc"),
                             (propcrc.MALFORMED, "integrity.malformed_property_crc")):
        bad = np.flatnonzero(c.status == status)
        if not len(bad):
            continue
        t = rc.messages.take(rows[bad])
        text = pa.array(propcrc.stored_texts(rc.buf, pos[rows[bad]], sizes[rows[bad]]), pa.string())
        computed, stored = pa.array(c.computed[bad]), pa.array(c.stored[bad])
        out.finding(finding_table(
            check_id, len(bad), broker=rc.broker, file=t.column("segment"), file_position=t.column("file_position"),
            physical_offset=t.column("physical_offset"), topic=t.column("topic"), queue_id=t.column("queue_id"),
            queue_offset=t.column("queue_offset"),
            values={"stored": stored, "computed": computed, "text": text},
            details={"stored_text": text, "stored_crc": stored if status == propcrc.MISMATCH else None,
                     "computed_crc": computed, "uniq_key": t.column("uniq_key"), "key": t.column("uniq_key")}))


_REFUSAL_CHUNK = 256


def _forced_refusal(rc, out, rows: np.ndarray, force_ok: np.ndarray, pos: np.ndarray, sizes: np.ndarray) -> None:
    """The first message the broker's recovery walk would refuse in each range with ``forceVerifyPropCRC`` (one it
    walks: kept, before the segment's first stop; its ``__CRC32#`` missing or not its bytes' CRC as Java parses
    it), as the partial the summary's forced cut is decided from (:func:`summary`).  The messages without the
    property at their end are checked each range's first together, then a chunk at a time (every range's
    together, in order) until each range has one refused, so a range of 4.x records pays one CRC.  ``rows``: the
    messages carrying the property; ``pos``: every message's place in ``rc.buf``."""
    walked = rc.column("kept") & ~rc.column("beyond_first_stop")
    plain = np.ones(len(walked), bool)
    plain[rows] = False
    part = rc.part_of(rc.message_rows)  # the range of each message
    first = np.full(len(rc.parts), len(walked), np.int64)  # per range: its first refused message (none: past all)
    refused = rows[~force_ok & walked[rows]]
    ranges, at = np.unique(part[refused], return_index=True)
    first[ranges] = refused[at]
    candidates = np.flatnonzero(plain & walked)
    candidates = candidates[candidates < first[part[candidates]]]
    checked = np.zeros(len(rc.parts), bool)  # the range's first refusal among the candidates is found
    if len(candidates):  # each range's first candidate first, all together: a 4.x range's first is refused
        ranges, at = np.unique(part[candidates], return_index=True)
        heads = candidates[at]
        bad = ~propcrc.check_crc_many(rc.buf, pos[heads], sizes[heads]).force_ok
        first[ranges[bad]] = heads[bad]
        checked[ranges[bad]] = True
        rest = np.ones(len(candidates), bool)
        rest[at] = False
        candidates = candidates[rest & ~checked[part[candidates]]]  # then the others in order, a chunk at a time
    for c in range(0, len(candidates), _REFUSAL_CHUNK):
        chunk = candidates[c:c + _REFUSAL_CHUNK]
        chunk = chunk[~checked[part[chunk]]]
        if not len(chunk):
            continue
        bad = chunk[~propcrc.check_crc_many(rc.buf, pos[chunk], sizes[chunk]).force_ok]
        ranges, at = np.unique(part[bad], return_index=True)
        first[ranges] = bad[at]
        checked[ranges] = True
    found = []
    for k in np.flatnonzero(first < len(walked)).tolist():
        m, p = int(first[k]), rc.parts[k]
        where = int(pos[m]) + rc.w0  # a context position
        kind = ErrorKind.NO_PROPERTY_CRC if plain[m] else ErrorKind.BAD_PROPERTY_CRC
        found.append({"broker": rc.broker, "segment": p.segment, "file_position": where - p.shift,
                      "physical_offset": where + rc.base, "kind": kind.value})
    if found:
        out.partial("integrity.forced_refusal", pa.Table.from_pylist(found, schema=FORCED_REFUSALS))


def _damaged_messages(rc, spans, out) -> None:
    """For spans where a record still frames (bad CRC, size mismatch...), name the message that was lost: its
    topic, queue and queue offset, decoded without the CRC check.  ``spans``: (item row, span)."""
    rows, named = [], []
    for i, s in spans:
        item = np.array([i], np.int64)
        file = rc.files(item)[0].as_py()
        try:
            msg = codec.decode_record(rc.buf, s.file_position - rc.w0, check_crc=False, file=file)
        except StoreFormatError:
            continue
        rows.append(dict(broker=rc.broker, file=file, file_position=int(rc.file_positions(item)[0]),
                         physical_offset=s.file_position + rc.base, topic=msg.topic, queue_id=msg.queue_id,
                         queue_offset=msg.queue_offset, values={"reason": s.reason, "key_text": msg.uniq_key or "-"},
                         details={"reason": s.reason, "uniq_key": msg.uniq_key, "key": msg.uniq_key}))
        named.append(resend.damaged_row(rc.broker, s.file_position + rc.base, dict(
            topic=msg.topic, queue_id=msg.queue_id, queue_offset=msg.queue_offset, keys=msg.keys,
            uniq_key=msg.uniq_key, store_timestamp=msg.store_timestamp,
            real_topic=msg.properties.get(L.PROPERTY_REAL_TOPIC)), s.reason))
    out.finding(finding_rows("integrity.damaged_message", rows))
    if named:
        out.partial("integrity.damaged", pa.Table.from_pylist(named, schema=resend.DAMAGED))


# ------------------------------------------------------------------------------------------------------ driver

def file_problem_rows(ctx) -> list[dict]:
    """Segment files whose name or length is wrong, as the corrupt rows the segment table and the span check
    count: (broker, segment, physical offset, length, reason, field, detail)."""
    rows = []
    for name, plan in ctx.plans.items():
        for f in plan.segment_files:
            for kind, detail in f.problems:
                rows.append(dict(broker=name, segment=f.name, physical_offset=f.base_offset or 0, length=f.length,
                                 reason=kind, field="file_name" if kind == ErrorKind.BAD_FILE_NAME.value
                                 else "file_length", detail=detail))
    return rows


def on_driver(ctx) -> FamilyResult:
    res = FamilyResult()
    problems = file_problem_rows(ctx)
    for reason in sorted({p["reason"] for p in problems}):
        group = [p for p in problems if p["reason"] == reason]
        res.findings.append(finding_rows(f"integrity.{reason.lower()}", [dict(
            broker=p["broker"], file=p["segment"], file_position=0, physical_offset=p["physical_offset"],
            values={"reason": reason, "length": p["length"], "detail": p["detail"], "unwritten_tail": None},
            details={"length": p["length"], "reason": reason, "field": p["field"], "detail": p["detail"]})
            for p in group]))
    res.findings.append(_segment_listing(ctx))

    parts = ctx.partial("integrity.segments", SEGMENT_PARTS).to_pylist()
    segs: dict[tuple, dict] = {}
    for p in parts:
        s = segs.setdefault((p["broker"], p["segment"]), {"messages": 0, "message_bytes": 0, "stale_records": 0,
                                                          "corrupt_bytes": 0, "first_stop": None,
                                                          "stop_reason": None, "blank_at": None, "stale": []})
        for k in ("messages", "message_bytes", "stale_records", "corrupt_bytes"):
            s[k] += p[k]
        if p["first_stop"] is not None and (s["first_stop"] is None or p["first_stop"] < s["first_stop"]):
            s["first_stop"], s["stop_reason"] = p["first_stop"], p["stop_reason"]
        if p["blank_at"] is not None:
            s["blank_at"] = p["blank_at"] if s["blank_at"] is None else min(s["blank_at"], p["blank_at"])
        if p["stale_records"]:
            s["stale"].append((p["stale_first"], p["stale_last"], p["stale_first_offset"], p["stale_records"]))
    for p in problems:
        s = segs.setdefault((p["broker"], p["segment"]), {"messages": 0, "message_bytes": 0, "stale_records": 0,
                                                          "corrupt_bytes": 0, "first_stop": None,
                                                          "stop_reason": None, "blank_at": None, "stale": []})
        s["corrupt_bytes"] += p["length"]

    stale_rows = []
    for (broker, segment), s in sorted(segs.items()):
        if s["stale"]:
            first = min(x[0] for x in s["stale"])
            stale_rows.append(dict(broker=broker, file=segment, file_position=first,
                                   physical_offset=min(x[2] for x in s["stale"]),
                                   values={"count": s["stale_records"]},
                                   details={"count": s["stale_records"], "last_position": max(x[1] for x in s["stale"])}))
    res.findings.append(finding_rows("integrity.stale_records", stale_rows))

    lengths = {(name, seg.name): (seg.base_offset, seg.length) for name, plan in ctx.plans.items()
               for seg in plan.store.segments}
    rows = []
    for key in sorted(set(lengths) | set(segs)):
        base, length = lengths.get(key, (None, None))
        s = segs.get(key)
        rows.append({"broker": key[0], "segment": key[1], "base_offset": base, "file_length": length,
                     **({k: s[k] for k in ("messages", "message_bytes", "stale_records", "corrupt_bytes", "first_stop",
                                          "stop_reason", "blank_at")} if s else {})})
    segments = pa.Table.from_pylist(rows, schema=SEGMENTS)
    res.tables["segments"] = segments

    per_broker = segments.group_by("broker").aggregate([("messages", "sum"), ("message_bytes", "sum"),
                                                        ("corrupt_bytes", "sum"), ("segment", "count")])
    res.metrics.append(metric_table("broker", {
        "message_count": per_broker.column("messages_sum"), "message_bytes": per_broker.column("message_bytes_sum"),
        "corrupt_bytes": per_broker.column("corrupt_bytes_sum"), "segments": per_broker.column("segment_count")},
        broker=per_broker.column("broker")))
    crcs = ctx.partial("integrity.property_crcs", PROPERTY_CRCS)
    if crcs.num_rows:  # only records that carry __CRC32# (5.2.0+): none on a 4.x broker
        crcs = crcs.group_by("broker").aggregate([("records", "sum"), ("verified", "sum")])
        res.metrics.append(metric_table("broker", {"property_crc_records": crcs.column("records_sum"),
                                                   "property_crc_verified": crcs.column("verified_sum")},
                                        broker=crcs.column("broker")))
    q = ctx.partial("integrity.queue_counts", QUEUE_COUNTS)
    if q.num_rows:
        q = q.group_by(["broker", "topic", "queue_id"]).aggregate([("messages", "sum"), ("bytes", "sum")])
        res.metrics.append(metric_table("queue", {"message_count": q.column("messages_sum"),
                                                  "message_bytes": q.column("bytes_sum")},
                                        broker=q.column("broker"), topic=q.column("topic"),
                                        queue_id=q.column("queue_id")))
    return res


def _segment_listing(ctx):
    """Gaps between segment names (a missing segment) and stores without a commitlog, from the listing."""
    gaps, empty = [], []
    for name, plan in ctx.plans.items():
        segs, size = plan.store.segments, plan.store.segment_size
        if not segs:
            empty.append(dict(broker=name, file="commitlog"))
            continue
        for a, b in zip(segs, segs[1:]):
            if size and b.base_offset != a.base_offset + size:
                gaps.append(dict(broker=name, file=b.name, physical_offset=a.base_offset + size,
                                 values={"previous": a.name, "missing": b.base_offset - a.base_offset - size},
                                 details={"expected_name": segment_name(a.base_offset + size)}))
    from ..findings import concat_findings

    return concat_findings([finding_rows("integrity.segment_gap", gaps), finding_rows("integrity.no_commitlog", empty)])


def _damaged_to_resend(ctx) -> None:
    """The damaged messages the scan named go to the messages to re-send, first (a record that recovery also names
    keeps this naming)."""
    ctx.resend_damaged[:0] = ctx.partial("integrity.damaged", resend.DAMAGED).to_pylist()


def summary(ctx) -> dict:
    """summary.json's ``property_crc`` per broker whose records carry ``__CRC32#``: how many, how many match, whether
    the broker's settings were given (``--config``), and where its recovery would cut the log with
    ``forceVerifyPropCRC`` on: the first record it refuses in the segments it walks, before the predicted end
    (null: it refuses none there)."""
    crcs = ctx.partial("integrity.property_crcs", PROPERTY_CRCS)
    refusals = ctx.partial("integrity.forced_refusal", FORCED_REFUSALS).sort_by("physical_offset").to_pylist()
    settings = ctx.options.recovery
    out = {}
    for name in sorted(set(crcs.column("broker").to_pylist())):
        mine = crcs.filter(pc.equal(crcs.column("broker"), name))
        p = ctx.recovery.get(name)
        start = next((s.base_offset for s in ctx.plans[name].store.segments if p is not None
                      and s.name == p.start_segment), None)
        cut = next((r for r in refusals if r["broker"] == name and p is not None and start is not None
                    and start <= r["physical_offset"] < p.max_physical_offset), None)
        out[name] = {"property_crc": {
            "records": int(pc.sum(mine.column("records")).as_py() or 0),
            "verified": int(pc.sum(mine.column("verified")).as_py() or 0),
            "settings_given": settings.source is not None, "force_verify": settings.force_verify_prop_crc,
            "forced_cut": None if cut is None else {k: cut[k] for k in ("physical_offset", "segment",
                                                                        "file_position", "kind")}}}
    return out


_SEGMENT_BARS = 20  # at most, in the segment plot: past it, runs of consecutive segments share a bar (40 bars of
# long segment names were 0.6 s of a 4,287-segment audit, most of it drawing their labels; 20, 0.35 s)


def _segment_plot(ctx, tables, plt):
    """Each segment's fill: the share of its file holding messages, and the share no walk could frame.  Past
    :data:`_SEGMENT_BARS` segments, a bar is a run of consecutive segments of one broker (their bytes summed), so
    thousands of small segments draw one readable figure, not a bar each (tables/segments/ has every one)."""
    segs = tables.get("segments")
    if segs is None or not segs.num_rows:
        return None
    segs = sorted(segs.to_pylist(), key=lambda s: (s["broker"], s["segment"]))
    bars = _segment_bars(segs)
    brokers = {s["broker"] for s in segs}
    fig, ax = plt.subplots(figsize=(13, 0.5 + 0.32 * len(bars)))
    labels = [label for label, _, _, _ in bars]
    size = [max(n, 1) for _, n, _, _ in bars]
    used = [m / n * 100 for (_, _, m, _), n in zip(bars, size)]
    bad = [c / n * 100 for (_, _, _, c), n in zip(bars, size)]
    ax.barh(labels, used, color="#4c8bd6", label="messages")
    ax.barh(labels, bad, left=used, color="#d64c4c", label="corrupt")
    ax.set_xlim(0, 100)
    ax.set_xlabel(("% of segment file" if len(bars) == len(segs) else "% of the segments' files")
                  + (f" (broker {next(iter(brokers))})" if len(brokers) == 1 else ""))
    ax.invert_yaxis()
    ax.legend(fontsize=8)
    return "Segment fill and damage", fig


def _segment_bars(segs: list[dict]) -> list[tuple[str, int, int, int]]:
    """(label, file bytes, message bytes, corrupt bytes) per bar: a segment each up to :data:`_SEGMENT_BARS`, else
    runs of about equal count of consecutive segments within each broker; past :data:`_SEGMENT_BARS` brokers (a
    fleet), runs of consecutive brokers, their segments summed (a run within each broker drew a bar a broker at
    least: 64 brokers, 64 labelled bars, a third of the fleet's report).  A label names its broker only when the
    segments are of several (the axis names a lone broker once: its name on every bar was most of the figure's
    text, and text is most of its drawing)."""
    def one(s):
        return s["file_length"] or 0, s["message_bytes"] or 0, s["corrupt_bytes"] or 0

    brokers = list(dict.fromkeys(s["broker"] for s in segs))  # segs are in broker order
    several = len(brokers) > 1
    if len(brokers) > _SEGMENT_BARS:
        of: dict[str, list] = {}
        for s in segs:
            of.setdefault(s["broker"], []).append(one(s))
        per_bar = -(-len(brokers) // _SEGMENT_BARS)
        return [(run[0] if len(run) == 1 else f"{run[0]}..{run[-1]} ({len(run)} brokers)",
                 *map(sum, zip(*(b for name in run for b in of[name]))))
                for run in (brokers[i:i + per_bar] for i in range(0, len(brokers), per_bar))]

    def named(broker: str, what: str) -> str:
        return f"{broker}/{what}" if several else what

    if len(segs) <= _SEGMENT_BARS:
        return [(named(s["broker"], s["segment"]), *one(s)) for s in segs]
    per_bar = -(-len(segs) // _SEGMENT_BARS)
    bars = []
    for i in range(0, len(segs), per_bar):
        run = segs[i:i + per_bar]
        for broker in dict.fromkeys(s["broker"] for s in run):  # a run never spans two brokers
            mine = [s for s in run if s["broker"] == broker]
            first, last = mine[0]["segment"], mine[-1]["segment"]
            label = named(broker, first if len(mine) == 1 else f"{first}..{last} ({len(mine)} segments)")
            bars.append((label, *map(sum, zip(*(one(s) for s in mine)))))
    return bars


# a segment and file position repeat the physical offset: left out of the report's view
SEGMENTS_VIEW = TableView("Segments", 50, (
    ("segment", "segment"), ("file_length", "file length"), ("messages", "messages"),
    ("message_bytes", "message bytes"), ("corrupt_bytes", "corrupt bytes"), ("stale_records", "stale records"),
    ("first_stop", "first stop"), ("stop_reason", "stop reason"), ("blank_at", "blank at")))

FAMILY = Family(
    "integrity", "unframeable spans, damaged and stale records, segment files of the wrong name or length, gaps",
    in_range=in_range, after_scan=_damaged_to_resend, on_driver=on_driver, summary=summary,
    emits={"integrity.segments": SEGMENT_PARTS, "integrity.queue_counts": QUEUE_COUNTS,
           "integrity.damaged": resend.DAMAGED, "integrity.property_crcs": PROPERTY_CRCS,
           "integrity.forced_refusal": FORCED_REFUSALS},
    reads=("integrity.segments", "integrity.queue_counts", "integrity.damaged", "integrity.property_crcs",
           "integrity.forced_refusal"),
    tables={"segments": SEGMENTS}, views={"segments": SEGMENTS_VIEW}, plots=(Plot(20, _segment_plot),), rank=20,
    blockers_predicted=True, damage_behind_cut=True,
    metrics={"message_count": "messages (broker, queue)", "message_bytes": "bytes of messages (broker, queue)",
             "corrupt_bytes": "bytes no walk could frame (broker)", "segments": "commitlog segments (broker)",
             "property_crc_records": "records carrying the whole-record CRC property __CRC32# (broker; 5.2.0+)",
             "property_crc_verified": "of those, records whose __CRC32# matches their bytes (broker)"})
