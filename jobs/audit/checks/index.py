"""CommitLog <-> IndexFile: every UNIQ_KEY and key of an indexable message can be found, every entry points at a
message one of whose keys has its hash, and the files' headers and hash chains hold together.

Indexable (IndexService.buildIndex): every record but ROLLBACK; keys are ``topic#UNIQ_KEY`` and ``topic#k`` for
each non-empty piece of KEYS split on " ".  Checks: ``index.key_missing`` (error; the warning
``index.not_yet_indexed`` when the broker indexes the message at start: past the consume queues' end, or in
the abnormal-recovery re-dispatch range), ``index.hash_mismatch``, ``index.entry_past_end``,
``index.entry_mid_record``, ``index.entry_not_a_message``, the warnings ``index.entry_in_damage``,
``index.entry_for_dropped_message`` (normal recovery leaves such stale entries, store-format.md section 14),
``index.time_inconsistent``, ``index.header_mismatch``; ``index.chain_problem`` (out-of-range or cyclic
links, unreachable entries), ``index.corrupt_file``, ``index.header_count_out_of_range``; the info
``index.duplicate_entries`` (expected after re-dispatch: counted, not an error) and the warning
``index.no_index`` (messages but no index files).

An index file that cannot be opened (too short, or a geometry neither its length and content nor
--config/--hash-slots/--index-num tell: store_format.indexfile.infer_geometry) is exactly one
``index.corrupt_file`` error.  The keys only it could serve are not checked one by one: the missing keys
(no entry in any readable file, not pending) of messages whose physical offset lies in its range
(:func:`unreadable_ranges`: its header's beginPhyOffset..endPhyOffset when it has a plausible one, else the gap
between the readable files before and after it) are one warning ``index.keys_unverifiable`` per file: "N keys
not verifiable: index file X unreadable", with the key and message counts and the offsets in its details.

Where each is decided: a scan task holds the entries pointing into its range against its messages' keys (hashed
as the broker hashes them); an index task walks one file's chains and header; per-file counts and whether a loose
entry lies past the data's end are finished on the driver.
"""
from __future__ import annotations

import random

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from store_format import layout as L
from store_format.errors import ErrorKind, StoreFormatError
from store_format.fs import ReadOnlyMap
from store_format.indexfile import INDEX_NAME, EntryViews, IndexFile, written_entries
from decoding.kernels import EntriesChecked, check_entries, pairs_in, problem_lists

from ..findings import Consequence, Severity, check, concat_findings, finding_rows, finding_table, metric_table
from ..contract import Family, FamilyResult
from ..routes import INDEX_FILES
from ..plan import listed_only
from ..scan import IN_DAMAGE, MEMO, MID_RECORD, OUTSIDE
from ..state import BLOCK, block_digest, drawn_blocks

check("index.key_missing", Severity.ERROR,
      "key {topic}#{key} of this message has no index entry: queries by it will not find it",
      consequence=Consequence.QUERIES_WRONG, group="broker",
      action="Use `rocketmq-forensics query --explain` or a scan (`rocketmq-forensics query --topic ... --from/--to`); "
             "rebuilding the index needs a broker re-dispatch (delete the index files, abnormal start).")
check("index.not_yet_indexed", Severity.WARNING, "key {topic}#{key} is not indexed yet (the broker indexes it at start)",
      consequence=Consequence.COSMETIC, group="broker",
      action="Nothing.")
check("index.entry_for_dropped_message", Severity.WARNING,
      "{entries} entries point at messages recovery drops (physical offsets {physical_offset}..{last}): lookups find "
      "candidates that are gone",
      consequence=Consequence.QUERIES_WRONG,
      action="Expected after `recovery.truncation`; lookups find candidates that are gone.")
check("index.entry_in_damage", Severity.WARNING,
      "entry {entry} points into a corrupt span ({item_reason}) starting at {item_position}",
      consequence=Consequence.COSMETIC,
      action="See `integrity.*` at that offset.")
check("index.entry_mid_record", Severity.ERROR, "entry {entry} points into the middle of the record at {item_position}",
      consequence=Consequence.QUERIES_WRONG,
      action="Corrupt entry; rebuild the index.")
check("index.entry_past_end", Severity.ERROR, "entry {entry} points past the end of the commitlog data ({data_end|empty})",
      consequence=Consequence.QUERIES_WRONG,
      action="Stale index after a truncation; harmless for lookups that verify, otherwise rebuild.")
check("index.entry_not_a_message", Severity.ERROR, "entry {entry} points at bytes where no record starts",
      consequence=Consequence.QUERIES_WRONG,
      action="Corrupt entry; rebuild the index.")
check("index.hash_mismatch", Severity.ERROR,
      "entry {entry} has hash {key_hash}, which is none of the keys of the message it points at",
      consequence=Consequence.QUERIES_WRONG,
      action="Corrupt index entry; lookups may return a wrong candidate (the suite verifies every candidate).")
check("index.time_inconsistent", Severity.WARNING,
      "entry {entry} says store time {entry_time} (second precision) but the message was stored at {message_time}",
      consequence=Consequence.QUERIES_WRONG,
      action="Clock or file mix-up; lookups by time range may miss it.")
check("index.chain_problem", Severity.ERROR, "entry {entry}: {problems_text}",
      consequence=Consequence.QUERIES_WRONG,
      action="Corrupt index: lookups can miss keys; rebuild it.")
check("index.corrupt_file", Severity.ERROR, "index file {file} cannot be read: {reason|} {detail|}",
      consequence=Consequence.QUERIES_WRONG,
      action="If only the geometry is unknown (an empty file), pass the broker's `--config broker.conf` or "
             "`--hash-slots`/`--index-num`; if a geometry you gave is refused, correct it; otherwise remove the file "
             "(the broker rebuilds on an abnormal start) after keeping a copy.")
check("index.header_count_out_of_range", Severity.ERROR, "indexCount {index_count} is outside 1..{index_num}",
      consequence=Consequence.QUERIES_WRONG,
      action="Corrupt header: the broker may mis-append; rebuild the index.")
check("index.unwritten_entries", Severity.ERROR,
      "indexCount {index_count} counts {unwritten} entries past the last written one, entry {last_written}: zeros "
      "no put wrote (the header's counter is wrong, or the file lost its end); the written entries are checked",
      consequence=Consequence.QUERIES_WRONG,
      action="Corrupt header, or the file lost its end: the broker appends after the counted (zero) entries; rebuild "
             "the index.")
check("index.header_mismatch", Severity.WARNING, "index header disagrees with its entries: {problems}",
      consequence=Consequence.COSMETIC,
      action="The file was not closed cleanly; the broker tolerates it.")
check("index.duplicate_entries", Severity.INFO,
      "{extra} duplicate index entries for {pairs} (key, message) pair(s): expected after re-dispatch or a key listed "
      "twice",
      consequence=Consequence.COSMETIC,
      action="Expected after re-dispatch or a key listed twice.")
check("index.keys_unverifiable", Severity.WARNING,
      "{keys} keys not verifiable: index file {file} unreadable ({messages} messages at physical offsets "
      "{physical_offset}..{last}, in its range {range_from}..{range_to_text} {basis_text}); see index.corrupt_file",
      consequence=Consequence.QUERIES_WRONG,
      action="Fix or remove the file (`index.corrupt_file`); until then find those messages with `rocketmq-forensics "
             "query --explain` or a scan.")
check("index.no_index", Severity.WARNING,
      "no index/ folder: key lookups of {messages} messages cannot work (messageIndexEnable=false, or the folder is "
      "lost)",
      consequence=Consequence.QUERIES_WRONG,
      action="`messageIndexEnable=false`, or the folder was not copied: copy it, or use scans.")

UNINDEXED = pa.schema([("broker", pa.string()), ("messages", pa.int64())])
DROPPED = pa.schema([("broker", pa.string()), ("file", pa.string()), ("entries", pa.int64()), ("first", pa.int64()),
                     ("last", pa.int64())])
LOOSE = pa.schema([("broker", pa.string()), ("file", pa.string()), ("entry", pa.int32()), ("key_hash", pa.int32()),
                   ("physical_offset", pa.int64())])
UNVERIFIABLE = pa.schema([("broker", pa.string()), ("file", pa.string()), ("keys", pa.int64()),
                         ("messages", pa.int64()), ("first", pa.int64()), ("last", pa.int64())])
_END = 2**63 - 1
FILES = pa.schema([("broker", pa.string()), ("file", pa.string()), ("entries", pa.int64()),
                   ("duplicate_entries", pa.int64()), ("duplicated_pairs", pa.int64())])


def message_keys(m: pa.Table) -> tuple[np.ndarray, pa.Array, np.ndarray]:
    """(row, key, key_hash) for every key the broker indexes of the messages ``m`` (rows into it): UNIQ_KEY and each
    piece of KEYS, each once per message, for every record but ROLLBACK; key_hash is IndexService's hash of
    ``topic#key`` (String.hashCode over UTF-16, abs, Integer.MIN_VALUE -> 0).  Keys are texts only where asked:
    ``key_text(m, source)``."""
    from decoding.kernels import index_key_hashes

    indexable = pc.not_equal(m.column("tran_type"), "ROLLBACK").to_numpy(zero_copy_only=False)
    return index_key_hashes(m.column("topic"), m.column("uniq_key"), m.column("keys"), indexable)


def key_text(m: pa.Table, rows: np.ndarray, source: np.ndarray) -> pa.Array:
    """The key texts of (row, source) pairs from :func:`message_keys`."""
    values = m.column("keys").combine_chunks().values
    # no message of the range has KEYS: every key is a UNIQ_KEY (source < 0), and there is no piece to take
    pieces = values.take(pa.array(np.maximum(source, 0))) if len(values) else pa.nulls(len(source), values.type)
    uniq = m.column("uniq_key").combine_chunks().take(pa.array(rows))
    return pc.if_else(pa.array(source < 0), uniq, pieces)


def in_range(rc, out) -> None:
    m = rc.messages
    if not rc.facts.indexed:
        out.partial("index.unindexed", pa.table({"broker": [rc.broker], "messages": [int(rc.column("kept").sum())]},
                                                schema=UNINDEXED))
        return
    e = rc.routed("index")
    if m.num_rows:
        krow, ksrc, khash = message_keys(m)
        kept = rc.column("kept")
        kphys = rc.column("physical_offset")[krow]
    else:
        krow = ksrc = np.zeros(0, np.int64)
        khash = np.zeros(0, np.int32)
        kept, kphys = np.zeros(0, bool), np.zeros(0, np.int64)
    ephys = e.column("physical_offset").to_numpy()
    ehash = e.column("key_hash").to_numpy()

    # messages -> entries: each kept key needs an entry with its (offset, hash)
    missing = np.flatnonzero(kept[krow] & ~pairs_in(kphys, khash, ephys, ehash)) if len(krow) else krow
    if len(missing) and rc.facts.probes.get("index"):  # keys only an unreadable file could serve: counted per file
        missing = _unverifiable(rc, missing, kphys, out)
    if len(missing):
        rows = krow[missing]
        t = m.take(rows)
        key = key_text(m, rows, ksrc[missing])
        key_hash = pa.array(khash[missing])
        pending = kphys[missing] >= rc.facts.index_pending_from
        for flag, check_id in ((False, "index.key_missing"), (True, "index.not_yet_indexed")):
            sel = np.flatnonzero(pending == flag)
            if len(sel):
                s = t.take(sel)
                sk = key.take(pa.array(sel))
                out.finding(finding_table(
                    check_id, len(sel), broker=rc.broker, file=s.column("segment"),
                    file_position=s.column("file_position"), physical_offset=s.column("physical_offset"),
                    topic=s.column("topic"), queue_id=s.column("queue_id"), queue_offset=s.column("queue_offset"),
                    values={"key": sk}, details={"key": sk, "key_hash": key_hash.take(pa.array(sel))}))

    if not e.num_rows:
        return
    # entries -> messages
    at = rc.message_at(ephys)
    hit = at >= 0
    ekept = np.zeros(len(at), bool)
    ekept[hit] = kept[at[hit]]
    dropped = np.flatnonzero(hit & ~ekept)
    if len(dropped):
        d = e.take(dropped).group_by("file").aggregate([("physical_offset", "count"), ("physical_offset", "min"),
                                                         ("physical_offset", "max")])
        out.partial("index.dropped", pa.table({
            "broker": pa.repeat(pa.scalar(rc.broker), d.num_rows), "file": d.column("file"),
            "entries": d.column("physical_offset_count").cast(pa.int64()), "first": d.column("physical_offset_min"),
            "last": d.column("physical_offset_max")}, schema=DROPPED))
    loose = np.flatnonzero(~hit)
    if len(loose):
        _loose(rc, e.take(loose), out)
    good = np.flatnonzero(ekept)
    if len(good):
        bad = good[~pairs_in(ephys[good], ehash[good], kphys, khash)]
        if len(bad):
            gb, mb = e.take(bad), m.select(["topic"]).take(at[bad])
            out.finding(finding_table(
                "index.hash_mismatch", len(bad), broker=rc.broker, file=gb.column("file"),
                physical_offset=gb.column("physical_offset"), topic=mb.column("topic"),
                values={"entry": gb.column("entry"), "key_hash": gb.column("key_hash")},
                details={"entry": gb.column("entry"), "key_hash": gb.column("key_hash")}))
        # timeDiff is whole seconds from the header's begin; the first entry's is against the previous file
        ts = rc.column("store_timestamp")[at[good]]
        et = e.column("store_time").to_numpy()[good]
        late = (e.column("entry").to_numpy()[good] > 1) & ((ts < et) | (ts >= et + 1000))
        rows = good[late]
        if len(rows):
            gl, ml = e.take(rows), m.select(["topic", "store_timestamp"]).take(at[rows])
            out.finding(finding_table(
                "index.time_inconsistent", len(rows), broker=rc.broker, file=gl.column("file"),
                physical_offset=gl.column("physical_offset"), topic=ml.column("topic"),
                values={"entry": gl.column("entry"), "entry_time": gl.column("store_time"),
                        "message_time": ml.column("store_timestamp")},
                details={"entry": gl.column("entry"), "entry_time": gl.column("store_time"),
                         "message_time": ml.column("store_timestamp")}))


def _unverifiable(rc, missing: np.ndarray, kphys: np.ndarray, out) -> np.ndarray:
    """Count the missing keys (not pending) in an unreadable file's range against that file; the others remain."""
    phys = kphys[missing]
    pending = phys >= rc.facts.index_pending_from
    left = np.ones(len(missing), bool)
    rows = []
    for file, lo, hi in rc.facts.probes.get("index") or ():
        mine = ~pending & left & (phys >= lo) & (phys <= hi)
        if mine.any():
            p = phys[mine]
            rows.append({"broker": rc.broker, "file": file, "keys": int(mine.sum()), "messages": len(np.unique(p)),
                         "first": int(p.min()), "last": int(p.max())})
            left &= ~mine
    if rows:
        out.partial("index.unverifiable", pa.Table.from_pylist(rows, schema=UNVERIFIABLE))
    return missing[left]


def unreadable_ranges(files: list[dict]) -> list[tuple]:
    """(file, from, to, basis) for every index file of one broker the survey could not open whose name the broker
    loads (a BAD_FILE_NAME file is never an index): the physical offsets of the messages whose keys only it could
    serve.  ``header``: its own header's beginPhyOffset..endPhyOffset, when the file holds one that counts entries
    (indexCount >= 2: then 4.9.7 set both from its first and last entry), is ordered and lies between its readable
    neighbours' ranges (a file begins at or after the previous file's endPhyOffset: a new file starts from it).
    ``neighbours``: otherwise the gap between the readable files before and after it (in name order, the creation
    order): from the previous one's endPhyOffset (0 if none) to the next one's beginPhyOffset (the end of the log
    if none), both included (a message's keys may straddle two files).  Ranges are made disjoint in name order (an
    offset belongs to the oldest unreadable file whose range holds it)."""
    files = sorted((r for r in files if r["error"] != ErrorKind.BAD_FILE_NAME.value), key=lambda r: r["name"])
    if not any(r["error"] for r in files):
        return []
    out, taken_to = [], -1  # offsets up to taken_to belong to an older unreadable file
    for i, r in enumerate(files):
        if not r["error"]:
            continue
        before = next((f for f in reversed(files[:i]) if not f["error"]), None)
        after = next((f for f in files[i + 1:] if not f["error"]), None)
        lo = before["end_phy_offset"] if before else 0
        hi = after["begin_phy_offset"] if after else _END
        begin, end = r["begin_phy_offset"], r["end_phy_offset"]
        if (r["index_count"] or 0) >= 2 and begin is not None and lo <= begin <= end <= hi:
            lo, hi, basis = begin, end, "header"
        else:
            basis = "neighbours"
        lo = max(lo, taken_to + 1)
        if lo <= hi:
            out.append((r["name"], lo, hi, basis))
            taken_to = max(taken_to, hi)
    return out


def _loose(rc, e: pa.Table, out) -> None:
    code, prev, reason = rc.locate(e.column("physical_offset").to_numpy())
    for c, check_id in ((IN_DAMAGE, "index.entry_in_damage"), (MID_RECORD, "index.entry_mid_record")):
        rows = np.flatnonzero(code == c)
        if len(rows):
            t = e.take(rows)
            out.finding(finding_table(
                check_id, len(rows), broker=rc.broker, file=t.column("file"), physical_offset=t.column("physical_offset"),
                values={"entry": t.column("entry"), "item_position": pa.array(prev[rows], pa.int64()),
                        "item_reason": pa.array([reason[i] for i in rows.tolist()], pa.string())},
                details={"entry": t.column("entry"), "key_hash": t.column("key_hash")}))
    rows = np.flatnonzero(code == OUTSIDE)
    if len(rows):
        t = e.take(rows)
        out.partial("index.loose", pa.table({"broker": pa.repeat(pa.scalar(rc.broker), len(rows)),
                                             "file": t.column("file"), "entry": t.column("entry"),
                                             "key_hash": t.column("key_hash"),
                                             "physical_offset": t.column("physical_offset")}, schema=LOOSE))


# ------------------------------------------------------------------------------------------------ index files

def in_index_files(facts, files, out) -> None:
    for part in files:
        _index_file(facts, part, out)


def _index_file(facts, part, out) -> None:
    """One file: unreadable (one finding), or its header against its entries and every entry's chain."""
    broker, name = facts.broker, part.name

    def corrupt(reason, detail):
        out.finding(finding_rows("index.corrupt_file", [dict(broker=broker, file=name,
                                                             values={"reason": reason, "detail": detail},
                                                             details={"reason": reason})]))

    if not INDEX_NAME.match(name):
        corrupt(ErrorKind.BAD_FILE_NAME.value, "an index file name is its creation time, yyyyMMddHHmmssSSS (17 "
                                               "digits); not read")
        return
    local = part.loc.as_path()  # a Path, else a fs.StorePath read through pyarrow.fs
    try:
        f = IndexFile(local, part.hash_slot_num, part.index_num)
    except StoreFormatError as e:
        corrupt(e.kind.value, e.message)
        return
    with f, ReadOnlyMap(local) as mm:
        h = f.header
        counted = min(max(h.index_count, 1), f.index_num)
        count = written_entries(mm, f.hash_slot_num, counted)  # a counter past them is one finding, not many
        if count < counted and h.index_count <= f.index_num:
            out.finding(finding_rows("index.unwritten_entries", [dict(
                broker=broker, file=name, file_position=L.INDEX_HEADER_SIZE + f.hash_slot_num * L.INDEX_SLOT_SIZE
                + count * L.INDEX_ENTRY_SIZE,
                values={"index_count": h.index_count, "unwritten": counted - count, "last_written": count - 1},
                details={"index_count": h.index_count, "written_entries": count - 1})]))
        v = EntryViews(mm.buf, f.hash_slot_num, count)
        bits, summary, checked = check_entries(v, _last_check(out, name, f.hash_slot_num, mm.buf, count))
        _leave_for_next(out, name, f.hash_slot_num, mm.buf, checked)
        _header(broker, name, h, f.index_num, summary, out)
        out.partial("index.files", pa.table({"broker": [broker], "file": [name], "entries": [max(count - 1, 0)],
                                             "duplicate_entries": [summary["duplicate_entries"]],
                                             "duplicated_pairs": [summary["duplicated_pairs"]]}, schema=FILES))
        has = np.flatnonzero(bits)  # entry 0 has none
        if len(has):
            phys, prev = v.physical_offset[has], v.prev_index[has]
            p = problem_lists(bits[has])
            entry = pa.array(has.astype(np.int32))
            out.finding(finding_table(
                "index.chain_problem", len(has), broker=broker, file=name,
                physical_offset=pa.array(phys.astype(np.int64)),
                values={"entry": entry, "problems_text": pc.binary_join(p, ", ")},
                details={"entry": entry, "problems": pc.binary_join(p, ","),
                         "prev_index": pa.array(prev.astype(np.int32))}))
        del v


# An index file's entries are only appended (its header and slots are rewritten), so under ``audit --state`` the
# check of the file the broker is writing goes on from the last run's (jobs/audit/kept.py KeptFiles: the memos of
# its part come back in ``out.resumed``), once a few blocks of the entries it checked then read as they did.
_MAX_FLAGGED = 1 << 20  # more entries with problems than this: the next run checks the file whole


def _last_check(out, name: str, hash_slot_num: int, buf, count: int) -> EntriesChecked | None:
    """The last run's check of this file (``out.resumed``), when it is one of this geometry, of no more entries
    than the file holds, and its kept blocks of those entries read as they did; else None (checked whole)."""
    memo = out.resumed or {}
    head, flagged = memo.get(f"index.{name}.entries"), memo.get(f"index.{name}.flagged")
    blocks, digests = memo.get(f"index.{name}.blocks"), memo.get(f"index.{name}.digests")
    if head is None or flagged is None or blocks is None or digests is None or len(head) != 6 \
            or len(digests) != 16 * len(blocks):
        return None
    checked, ordered, extra, pairs, run_start, slots = (int(x) for x in head)
    start = L.index_entries_at(hash_slot_num)
    end = start + checked * L.INDEX_ENTRY_SIZE
    if slots != hash_slot_num or not 1 <= checked <= count or not 1 <= run_start <= checked \
            or flagged.dtype != np.int32 or not all(start <= a < end for a in blocks.tolist()):
        return None
    for i, a in enumerate(blocks.tolist()):  # a block ends at a block boundary or at the checked entries' end
        if block_digest(bytes(buf[a:min(a + BLOCK - a % BLOCK, end)])) != bytes(digests[16 * i:16 * i + 16]):
            return None
    used = None
    if ordered:
        packed = memo.get(f"index.{name}.used")
        if packed is None or len(packed) != -(-hash_slot_num // 8):
            return None
        used = np.unpackbits(packed, count=hash_slot_num).astype(np.bool_)
    heads = memo.get(f"index.{name}.heads")  # where it is not one, the old entries are walked again
    heads = heads if heads is not None and heads.dtype == np.uint64 and heads.shape == (3,) else None
    return EntriesChecked(checked, flagged, used, extra, pairs, run_start, heads)


def _leave_for_next(out, name: str, hash_slot_num: int, buf, checked: EntriesChecked) -> None:
    """What the next run's check of this file goes on from, as memos of the task's part: the counts, the flagged
    entries, the slots used, the slots' heads, and the digests of a few blocks of the entries (their last, and some
    drawn)."""
    if out.resumed is None or len(checked.flagged) > _MAX_FLAGGED:  # None: no state keeps the task's part
        return
    start = L.index_entries_at(hash_slot_num)
    end = start + checked.count * L.INDEX_ENTRY_SIZE
    drawn = drawn_blocks(start, end, random)
    blocks = [a for a, _ in drawn]
    digests = b"".join(block_digest(bytes(buf[a:a + n])) for a, n in drawn)
    memos = {"entries": np.array([checked.count, checked.used is not None, checked.extra, checked.pairs,
                                  checked.run_start, hash_slot_num], np.int64),
             "flagged": checked.flagged, "blocks": np.array(blocks, np.int64),
             "digests": np.frombuffer(digests, np.uint8)}
    if checked.used is not None:
        memos["used"] = np.packbits(checked.used)
    if checked.heads is not None:
        memos["heads"] = checked.heads
    for k, memo in memos.items():
        out.partial(f"{MEMO}index.{name}.{k}", pa.table({"memo": memo}))


def _header(broker: str, name: str, h, index_num: int, s: dict, out) -> None:
    """Header counters against the entries they describe."""
    if h.index_count < 1 or h.index_count > index_num:
        out.finding(finding_rows("index.header_count_out_of_range", [dict(
            broker=broker, file=name, values={"index_count": h.index_count, "index_num": index_num},
            details={"index_count": h.index_count})]))
        return
    problems = []
    slots = s.get("entry_slots") or 0
    if h.hash_slot_count != slots:
        problems.append(f"hashSlotCount {h.hash_slot_count} but {slots} slots are used")
    last, first = s.get("last_entry_phy_offset"), s.get("first_entry_phy_offset")
    if last is not None and h.end_phy_offset != last:
        problems.append(f"endPhyOffset {h.end_phy_offset} but the last entry points at {last}")
    if first is not None and h.begin_phy_offset != first:
        problems.append(f"beginPhyOffset {h.begin_phy_offset} but the first entry points at {first}")
    if problems:
        text = "; ".join(problems)
        out.finding(finding_rows("index.header_mismatch", [dict(broker=broker, file=name, values={"problems": text},
                                                                details={"problems": text})]))


# ------------------------------------------------------------------------------------------------------ driver

def on_driver(ctx) -> FamilyResult:
    res = FamilyResult()
    u = ctx.partial("index.unindexed", UNINDEXED)
    if u.num_rows:
        g = u.group_by("broker").aggregate([("messages", "sum")])
        res.findings.append(finding_rows("index.no_index", [dict(
            broker=b, file="index", values={"messages": n}, details={"messages": n})
            for b, n in zip(g.column("broker").to_pylist(), g.column("messages_sum").to_pylist())]))
    d = ctx.partial("index.dropped", DROPPED)
    if d.num_rows:
        g = d.group_by(["broker", "file"]).aggregate([("entries", "sum"), ("first", "min"), ("last", "max")])
        res.findings.append(finding_rows("index.entry_for_dropped_message", [dict(
            broker=r["broker"], file=r["file"], physical_offset=r["first_min"],
            values={"entries": r["entries_sum"], "last": r["last_max"]},
            details={"entries": r["entries_sum"], "last_physical_offset": r["last_max"]}) for r in g.to_pylist()]))
    res.findings.append(_outside(ctx))
    res.findings.append(_keys_unverifiable(ctx))
    files = ctx.partial("index.files", FILES)
    if files.num_rows:
        with_entries = files.filter(pc.greater(files.column("entries"), 0))
        g = with_entries.group_by("broker").aggregate([("entries", "sum"), ("file", "count")])
        res.metrics.append(metric_table("broker", {"index_entries": g.column("entries_sum"),
                                                   "index_files": g.column("file_count")},
                                        n=g.num_rows, broker=g.column("broker")))
        dup = files.group_by("broker").aggregate([("duplicate_entries", "sum"), ("duplicated_pairs", "sum")])
        dup = dup.filter(pc.greater(dup.column("duplicate_entries_sum"), 0))
        if dup.num_rows:
            res.findings.append(finding_rows("index.duplicate_entries", [dict(
                broker=r["broker"], file="index",
                values={"extra": r["duplicate_entries_sum"], "pairs": r["duplicated_pairs_sum"]},
                details={"duplicates": r["duplicate_entries_sum"]}) for r in dup.to_pylist()]))
            res.metrics.append(metric_table("broker", {"index_duplicate_entries": dup.column("duplicate_entries_sum")},
                                            n=dup.num_rows, broker=dup.column("broker")))
    return res


#: what unreadable_ranges reads of the survey's index-file rows (not their buckets: lists of thousands of offsets)
_RANGE_COLUMNS = ["broker", "name", "error", "begin_phy_offset", "end_phy_offset", "index_count"]


def _index_file_rows(ctx, broker: str | None = None) -> list[dict]:
    """The survey's index-file rows as unreadable_ranges reads them, of ``broker`` only when given (a probe per
    broker made every broker's rows, buckets and all, into Python objects: 5 ms a broker of a fleet of 64)."""
    t = ctx.survey_partial("survey.index_files", INDEX_FILES).select(_RANGE_COLUMNS)
    if broker is not None:
        t = t.filter(pc.equal(t.column("broker"), broker))
    return t.to_pylist()


def _unverifiable_probe(ctx, broker: str) -> list[tuple[str, int, int]]:
    """The index files the survey could not read, each with the physical offsets whose keys only it could serve:
    (file, from, to) for every range task to count its missing keys against."""
    errors = ctx.survey_partial("survey.index_files", INDEX_FILES).column("error")
    if not pc.any(pc.not_equal(errors, "")).as_py():  # no broker's file failed: none to look through a broker each
        return []
    return [(f, lo, hi) for f, lo, hi, _ in unreadable_ranges(_index_file_rows(ctx, broker))]


def _keys_unverifiable(ctx):
    t = ctx.partial("index.unverifiable", UNVERIFIABLE)
    if not t.num_rows:
        return concat_findings([])
    rows = _index_file_rows(ctx)
    ranges = {(b, f): (lo, hi, basis) for b in {r["broker"] for r in rows}
              for f, lo, hi, basis in unreadable_ranges([r for r in rows if r["broker"] == b])}
    g = t.group_by(["broker", "file"]).aggregate([("keys", "sum"), ("messages", "sum"), ("first", "min"),
                                                  ("last", "max")])
    out = []
    for r in g.to_pylist():
        lo, hi, basis = ranges[(r["broker"], r["file"])]
        out.append(dict(broker=r["broker"], file=r["file"], physical_offset=r["first_min"],
                        values={"keys": r["keys_sum"], "messages": r["messages_sum"], "last": r["last_max"],
                                "range_from": lo, "range_to_text": "the end of the log" if hi == _END else str(hi),
                                "basis_text": "per its header" if basis == "header"
                                else "between its readable neighbours"},
                        details={"keys": r["keys_sum"], "messages": r["messages_sum"],
                                 "first_physical_offset": r["first_min"], "last_physical_offset": r["last_max"],
                                 "range_from": lo, "range_to": hi, "range_basis": basis}))
    return finding_rows("index.keys_unverifiable", out)


def _outside(ctx):
    """Each loose entry as a finding, past the log's data end or pointing at no message, in the entries' order: made
    column-wise (a crash that left the index ahead of the log leaves hundreds of thousands of them)."""
    loose = listed_only(ctx.plans, ctx.partial("index.loose", LOOSE))  # not into segments left unread
    if not loose.num_rows:
        return concat_findings([])
    ends = pa.array([ctx.data_end.get(b) for b in loose.column("broker").to_pylist()], pa.int64())
    past = pc.fill_null(pc.greater_equal(loose.column("physical_offset"), ends), True).to_numpy(zero_copy_only=False)
    parts, order = [], []
    for check_id, rows in (("index.entry_past_end", np.flatnonzero(past)),
                           ("index.entry_not_a_message", np.flatnonzero(~past))):
        if not len(rows):
            continue
        t, at = loose.take(rows), pa.array(rows, pa.int64())
        parts.append(finding_table(check_id, len(rows), broker=t.column("broker"), file=t.column("file"),
                                   physical_offset=t.column("physical_offset"),
                                   values={"entry": t.column("entry"), "data_end": ends.take(at)},
                                   details={"entry": t.column("entry"), "key_hash": t.column("key_hash")}))
        order.append(rows)
    return pa.concat_tables(parts).take(pa.array(np.argsort(np.concatenate(order), kind="stable"), pa.int64()))


FAMILY = Family(
    "index", "CommitLog <-> IndexFile: keys that cannot be found, entries pointing wrong, headers, chains, duplicates",
    probes=_unverifiable_probe, in_range=in_range, in_files={"index": in_index_files}, on_driver=on_driver, rank=40,
    emits={"index.unindexed": UNINDEXED, "index.dropped": DROPPED, "index.unverifiable": UNVERIFIABLE,
           "index.loose": LOOSE, "index.files": FILES},
    reads=("index.unindexed", "index.dropped", "index.unverifiable", "index.loose", "index.files",
           "survey.index_files"),
    metrics={"index_entries": "index entries (broker)", "index_files": "index files (broker)",
             "index_duplicate_entries": "duplicate index entries (broker)"})
