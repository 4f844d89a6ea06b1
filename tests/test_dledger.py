"""The DLedger commit log reader (store_format.dledger) against the store RocketMQ 5.3.3 and DLedger 0.3.1.2 wrote
(shared/fixtures/rocketmq-5.3.3/dledger): every raw data-file item, every entry DLedger's get(index) returns, the
ledger indexes after load(), the checkpoint and term as the manifest (their own read-back) says; seeded damage on a
copy found by the named check.  No Spark."""
from __future__ import annotations

import functools
import hashlib
import json
import os
import shutil
import struct

import pytest

from store_format import dledger as D
from store_format.commitlog import dledger_header_run, dledger_items

from .conftest import FIXTURES_5X

STORE = FIXTURES_5X / "dledger" / "store"


@functools.lru_cache(maxsize=None)
def manifest() -> dict:
    with open(FIXTURES_5X / "dledger" / "manifest.json", encoding="utf-8") as f:
        return json.load(f)


@functools.lru_cache(maxsize=None)
def fixture_log() -> tuple[D.DLedgerLog, tuple[D.Entry, ...], D.Ledger]:
    log = D.DLedgerLog(D.find_home(STORE))
    items = log.entries()
    return log, tuple(items), log.recover(items)


def test_detected_from_the_files_alone():
    assert D.is_dledger_store(STORE)
    assert D.find_home(STORE).name == "dledger-n0"
    plain = FIXTURES_5X / "v5-default" / "store"
    assert not D.is_dledger_store(plain) and D.find_home(plain) is None


def test_every_raw_item_as_plain_reads_saw_it():
    log, items, ledger = fixture_log()
    raw = manifest()["readBack"]["rawEntries"]
    assert len(items) == len(raw)
    accepted = {e.position for e in ledger.entries}
    for mine, want in zip(items, raw):
        assert (mine.file, mine.position, mine.file_position, mine.magic, mine.size, mine.kind.upper()) == \
            (want["file"], want["pos"], want["filePos"], want["magic"], want["size"], want["type"])
        if want["type"] != "ENTRY":
            assert mine.problems == ()
            continue
        assert (mine.index, mine.term, mine.pos_field, mine.channel, mine.chain_crc, mine.body_crc, mine.body_size) == \
            (want["index"], want["term"], want["posField"], want["channel"], want["chainCrc"], want["bodyCrc"],
             want["bodySize"])
        unit = want["indexUnit"]
        assert (mine.index_unit.file, mine.index_unit.file_position, mine.index_unit.magic, mine.index_unit.pos,
                mine.index_unit.size, mine.index_unit.index, mine.index_unit.term) == \
            (unit["file"], unit["filePos"], unit["magic"], unit["pos"], unit["size"], unit["index"], unit["term"])
        assert mine.index_unit.matches(mine) == want["indexUnitMatches"]
        assert (not mine.fails()) == want["headerChecksPass"] and list(mine.problems) == want["problems"]
        assert (mine.position in accepted) == want["acceptedByDLedger"]
        body = log.body(mine)
        assert hashlib.sha256(body).hexdigest() == want["bodySha256"]
        assert D.body_crc32(body) == want["bodyZlibCrc32"]


def test_get_index_and_the_ledger_after_load():
    log, _, ledger = fixture_log()
    after = manifest()["readBack"]["afterLoad"]
    assert (ledger.begin_index, ledger.end_index, ledger.end_term, ledger.committed_index, ledger.committed_pos,
            ledger.data_end) == (after["ledgerBeginIndex"], after["ledgerEndIndex"], after["ledgerEndTerm"],
                                 after["committedIndex"], after["committedPos"], after["dataMaxWrotePosition"])
    assert (ledger.end_index + 1) * D.INDEX_UNIT_SIZE == after["indexMaxWrotePosition"]
    assert ledger.stop is None and ledger.index_rewritten_from is None and ledger.will_not_start is None
    got = [{"index": e.index, "term": e.term, "pos": e.position, "magic": e.magic, "size": e.size,
            "channel": e.channel, "chainCrc": e.chain_crc, "bodyCrc": e.body_crc, "bodyLength": e.body_size,
            "bodySha256": hashlib.sha256(log.body(e)).hexdigest(), "committed": e.index <= ledger.committed_index}
           for e in ledger.entries]
    assert got == manifest()["readBack"]["dledgerEntriesAfterLoad"]


def test_each_record_sits_at_its_entry_plus_48():
    log, _, ledger = fixture_log()
    by_index = {e.index: e for e in ledger.entries}
    for rec in manifest()["readBack"]["records"]:
        entry = by_index[rec["dledgerIndex"]]
        assert (entry.term, entry.position, entry.record_offset) == \
            (rec["dledgerTerm"], rec["dledgerPos"], rec["physicalOffset"])
        assert rec["dispatch"]["bufferSize"] == entry.size and rec["physicalOffsetField"] == entry.record_offset
        assert hashlib.sha256(log.body(entry)).hexdigest() == rec["rawSha256"]


def test_checkpoint_and_term():
    log, _, _ = fixture_log()
    text = manifest()["textFiles"]
    assert text["store/dledger-n0/checkpoint"] == "committedIndex=302\nendIndex=302\n"
    assert text["store/dledger-n0/currterm"] == "voteLeader=n0\ncurrTerm=0\n"
    assert log.metadata == D.Metadata(302, 302, 0, "n0")
    assert log.self_id == "n0"


# ---- seeded damage, on a copy -------------------------------------------------------------------------

def _copy(dst):
    shutil.copytree(STORE, dst)
    for folder, _, files in os.walk(dst):
        os.chmod(folder, 0o755)
        for name in files:
            os.chmod(os.path.join(folder, name), 0o644)
    return dst


@pytest.fixture
def dledger_copy(tmp_path):
    return _copy(tmp_path / "store")


def _term_goes_backwards_at_101(store):
    """Entry 100 and its index unit say term 2: entry 101's term 0 goes backwards."""
    entry = _raw(100)
    _patch(store, entry, 16, ">q", 2)
    with open(store / "dledger-n0" / entry["indexUnit"]["file"], "r+b") as f:
        f.seek(entry["indexUnit"]["filePos"] + 24)
        f.write(struct.pack(">q", 2))


def _raw(index: int) -> dict:
    return next(e for e in manifest()["readBack"]["rawEntries"] if e.get("index") == index)


def _patch(store, entry: dict, offset: int, fmt: str, value):
    with open(store / "dledger-n0" / entry["file"], "r+b") as f:
        f.seek(entry["filePos"] + offset)
        f.write(struct.pack(fmt, value))


def _found(store) -> dict:
    """{check: [(index, severity, file, file_position, physical_offset)]}: the audit's dledger family on ``store``
    (jobs/audit/checks/dledger.py, what its on_driver makes findings of)."""
    from jobs.audit.checks import dledger as family
    from jobs.audit.findings import CHECKS

    out = {}
    for check, rows in family.broker_rows(D.DLedgerLog(D.find_home(store))).items():
        sev = CHECKS[check].severity
        out[check] = [(r["details"].get("index"), r.get("severity", sev).label, r["file"],
                       r.get("file_position"), r["physical_offset"]) for r in rows]
    return out


def _at(index: int) -> tuple:
    """Where the family places a finding about entry ``index``: its data file, the record's position (entry + 48)."""
    e = _raw(index)
    return e["file"].removeprefix("data/"), e["filePos"] + 48, e["pos"] + 48


def test_the_clean_fixture_gives_no_dledger_finding():
    assert _found(STORE) == {}

def test_a_bad_body_crc_is_found_and_dledger_accepts_it(dledger_copy):
    """A nonzero bodyCrc that is not the body's CRC-32: dledger.body_crc; DLedger never checks it, so the ledger is
    unchanged."""
    entry = _raw(40)
    _patch(dledger_copy, entry, 40, ">i", entry["bodyZlibCrc32"] ^ 0x1)
    log = D.DLedgerLog(D.find_home(dledger_copy))
    items = log.entries()
    bad = [(e.index, name) for e in items for name, _ in e.problems]
    assert bad == [(40, D.CHECK_BODY_CRC)]
    ledger = log.recover(items)
    assert (ledger.end_index, ledger.committed_index, ledger.stop) == (302, 302, None)
    from store_format.recovery import predict_recovery
    from store_format.store import Store

    p = predict_recovery(Store(dledger_copy))  # the audit's recovery.note
    [note] = p.notes
    assert note.startswith(f"1 DLedger entry fails {D.CHECK_BODY_CRC}, the first at index 40, physical offset "
                           f"{entry['pos'] + 48}")
    assert p.max_physical_offset == manifest()["readBack"]["afterLoad"]["commitLogMaxOffset"]
    assert _found(dledger_copy) == {"dledger.body_crc": [(40, "error", *_at(40))]}
    # the right CRC passes
    _patch(dledger_copy, entry, 40, ">i", entry["bodyZlibCrc32"])
    assert all(not e.problems for e in D.DLedgerLog(D.find_home(dledger_copy)).entries())


def test_a_term_going_backwards_is_found_and_ends_dledgers_walk(dledger_copy):
    """Entry 100 (and its index unit) says term 2, entry 101 term 0: dledger.term on 101, where DLedger's recovery
    ends the ledger; the committed index is clamped to it."""
    _term_goes_backwards_at_101(dledger_copy)
    log = D.DLedgerLog(D.find_home(dledger_copy))
    items = log.entries()
    bad = [(e.index, name) for e in items for name, _ in e.problems]
    assert bad == [(101, D.CHECK_TERM)]
    ledger = log.recover(items)
    assert (ledger.end_index, ledger.end_term, ledger.stop.index, ledger.committed_index) == (100, 2, 101, 100)
    assert ledger.data_end == _raw(101)["pos"] and ledger.committed_pos == _raw(101)["pos"]
    # the checkpoint's committed 302 lies past the new end: those committed entries are gone from this node
    assert _found(dledger_copy) == {"dledger.term": [(101, "error", *_at(101))], "dledger.committed": [
        (None, "error", "dledger-n0/checkpoint", None, _raw(101)["pos"])]}


def test_a_stale_index_unit_is_rewritten_not_a_stop(dledger_copy):
    unit = _raw(7)["indexUnit"]
    with open(dledger_copy / "dledger-n0" / unit["file"], "r+b") as f:
        f.seek(unit["filePos"] + 4)
        f.write(struct.pack(">q", 12345))
    log = D.DLedgerLog(D.find_home(dledger_copy))
    ledger = log.recover()
    assert (ledger.end_index, ledger.index_rewritten_from) == (302, 7)
    assert _found(dledger_copy) == {"dledger.index": [(7, "warning", *_at(7))]}



def test_a_run_of_bad_index_units_is_one_finding(dledger_copy):
    """Units 10 to 19 zeroed (a torn index file): one dledger.index warning at entry 10 that counts them, not ten
    (a lost index file would otherwise give one per entry of the ledger)."""
    from jobs.audit.checks import dledger as family

    unit = _raw(10)["indexUnit"]
    with open(dledger_copy / "dledger-n0" / unit["file"], "r+b") as f:
        f.seek(unit["filePos"])
        f.write(bytes(10 * D.INDEX_UNIT_SIZE))
    assert _found(dledger_copy) == {"dledger.index": [(10, "warning", *_at(10))]}
    [row] = family.broker_rows(D.DLedgerLog(D.find_home(dledger_copy)))["dledger.index"]
    assert (row["details"]["count"], row["details"]["last_index"]) == (10, 19)
    assert "(and the index units of the 9 entries after it, to index 19)" in row["values"]["problem"]


def test_a_wrong_pos_field_and_an_index_that_skips_are_found_by_their_own_checks(dledger_copy):
    """Entry 150's pos field off by 8, entry 200's index 250 (its unit is 200's, and 201 then does not follow it):
    dledger.position and dledger.index, each at its entry; DLedger's recovery ends the ledger at the first."""
    _patch(dledger_copy, _raw(150), 24, ">q", _raw(150)["pos"] + 8)
    _patch(dledger_copy, _raw(200), 8, ">q", 250)
    found = _found(dledger_copy)
    assert found["dledger.position"] == [(150, "error", *_at(150))]
    assert found["dledger.index"] == [(250, "error", *_at(200)), (250, "warning", *_at(200)),
                                      (201, "error", *_at(201))]
    assert set(found) == {"dledger.position", "dledger.index", "dledger.committed"}
    [committed] = found["dledger.committed"]  # the checkpoint's 302 is past the ledger's new end, 149
    assert committed[1:3] == ("error", "dledger-n0/checkpoint")


def test_the_committed_index_against_the_ledger(dledger_copy):
    """A checkpoint behind the ledger: a warning (RocketMQ serves up to the committed entry until the node leads);
    ahead of it: an error (committed entries gone); -1: nothing committed."""
    checkpoint = dledger_copy / "dledger-n0" / "checkpoint"
    for text, severity, served in (("committedIndex=100\n", "warning", _raw(101)["pos"]),
                                   ("committedIndex=-1\n", "warning", 0),
                                   ("committedIndex=400\n", "error", manifest()["readBack"]["afterLoad"][
                                       "commitLogMaxOffset"])):
        checkpoint.write_text(text)
        assert _found(dledger_copy) == {"dledger.committed": [(None, severity, "dledger-n0/checkpoint", None, served)]}


def test_a_torn_tail_and_a_lost_checkpoint(dledger_copy):
    """The last entry cut short by a zeroed size; a checkpoint saying -1 (a crash before the first flush): the
    ledger ends at the entry before, nothing is committed."""
    entry = _raw(302)
    _patch(dledger_copy, entry, 4, ">i", 10_000_000)
    (dledger_copy / "dledger-n0" / "checkpoint").write_text("committedIndex=-1\nendIndex=302\n")
    log = D.DLedgerLog(D.find_home(dledger_copy))
    items = log.entries()
    assert items[-1].kind == "unframed" and items[-1].problems[0][0] == D.CHECK_SIZE
    ledger = log.recover(items)
    assert (ledger.end_index, ledger.committed_index, ledger.committed_pos, ledger.data_end) == \
        (301, -1, -1, entry["pos"])


# ---- the log model: the CommitLog records inside the entries, and the broker's recovery of them -----------------

def test_the_commitlog_readers_see_rocketmqs_records():
    """The store's segments are the DLedger data files; every walk gives each record at entry + 48, as the manifest's
    records (RocketMQ's own checkMessageAndReturnSize) say."""
    from store_format.fs import ReadOnlyMap
    from store_format.store import Store

    store = Store(STORE)
    assert store.dledger_home is not None and [s.name for s in store.segments] == \
        ["00000000000000000000", "00000000000000262144"]
    offsets = []
    for seg in store.segments:
        with ReadOnlyMap(seg.path) as m:
            items = dledger_items(m.buf, seg.name, seg.base_offset)
            offsets += (items.positions[items.kinds == 0] + seg.base_offset).tolist()
            sizes = items.sizes[items.kinds == 0].tolist()
    records = manifest()["readBack"]["records"]
    assert offsets == [r["physicalOffset"] for r in records]
    assert sizes == [r["dispatch"]["msgSize"] for r in records if r["physicalOffset"] >= 262144]
    assert [m.physical_offset for m in store.messages()] == offsets
    from store_format.codec import decode_record
    from store_format.commitlog import first_record

    from jobs.local_scan import Criteria, scan
    from store_format.recovery import predict_cut

    kept = [m.physical_offset for m, _ in scan(store, Criteria(topic="TopicC"), predict_cut(store).cut)]
    assert kept == [r["physicalOffset"] for r in records if r["topic"] == "TopicC"]  # the jobs' local scan
    by_offset = {r["physicalOffset"]: r for r in records}
    for seg in store.segments:  # what the query and extract jobs read of each segment: its first record
        with first_record(seg) as buf:
            assert decode_record(buf, 0).store_timestamp == by_offset[seg.base_offset + 48]["storeTimestamp"]


def test_recovery_follows_dledger_and_truncates_nothing_on_a_clean_store():
    from store_format.recovery import predict_recovery
    from store_format.store import Store

    p = predict_recovery(Store(STORE))
    after = manifest()["readBack"]["afterLoad"]
    assert (p.mode, p.will_start, p.max_physical_offset, p.cq_units_truncated, p.dropped_messages, p.notes) == \
        ("normal", True, after["commitLogMaxOffset"], {}, [], [])


def test_a_term_going_backwards_cuts_the_log_where_dledger_does(dledger_copy):
    from store_format.recovery import predict_recovery
    from store_format.store import Store

    _term_goes_backwards_at_101(dledger_copy)
    p = predict_recovery(Store(dledger_copy))
    cut = _raw(101)["pos"]
    assert (p.max_physical_offset, p.stop_kind) == (cut, D.CHECK_TERM)
    lost = [r["physicalOffset"] for r in manifest()["readBack"]["records"] if r["physicalOffset"] >= cut]
    assert [o for o, _ in p.dropped_messages] == lost and len(lost) == 202
    assert any("term" in n for n in p.notes)


def test_rocketmq_5_3_3s_abnormal_recovery_drops_units_it_never_rebuilds(dledger_copy):
    """With abort present, dledgerRecoverAbnormally walks from data file 0 (no first record is older than the
    checkpoint), counts 157 records' sizes in the last file without their 48-byte headers and truncates the consume
    queues 157 x 48 bytes short of the end; the reput starts at the committed position, so the units of the messages
    in between are gone for good: the prediction lists them per queue (recovery.units_unserved in the audit)."""
    from store_format.recovery import predict_recovery
    from store_format.store import Store

    (dledger_copy / "abort").write_bytes(b"")
    p = predict_recovery(Store(dledger_copy))
    end = manifest()["readBack"]["afterLoad"]["commitLogMaxOffset"]
    in_last_file = [e for e in manifest()["readBack"]["rawEntries"] if e["file"].endswith("262144")]
    cut = end - 48 * len(in_last_file)
    lost = [r for r in manifest()["readBack"]["records"] if cut <= r["physicalOffset"] < end
            and r["topic"] != "TopicTx"]  # a PREPARED record has no unit
    assert not [n for n in p.notes if "abnormal DLedger recovery" in n]
    got = {(u.topic, u.queue_id, o, phys) for u in p.units_unserved for o, phys in zip(u.queue_offsets,
                                                                                     u.physical_offsets)}
    assert got == {(r["topic"], r["queueId"], r["queueOffset"], r["physicalOffset"]) for r in lost} and lost
    assert {u.cause for u in p.units_unserved} == {"dledger_abnormal_header"}
    assert {u.detail[:2] for u in p.units_unserved} == {(cut, end)}
    assert all(u.served_max == u.queue_offsets[0] for u in p.units_unserved)
    assert all(f"before DLedger's end {end}" in u.why(end) and "48-byte entry header" in u.why(end)
               for u in p.units_unserved)
    assert p.mode == "abnormal" and p.max_physical_offset == end


def test_the_source_and_the_audit_read_it_as_its_manifest_says(spark, tmp_path):
    """rocketmq-commitlog gives every record at RocketMQ's offset, kept; the audit finds nothing false on the fixture
    (the index's duplicates are keys listed twice, the delay is undelivered: both true), and on copies it finds an
    entry's bad body CRC (dledger.body_crc; a recovery note summarizes it) and a term going backwards (dledger.term,
    and DLedger's cut there: every later message lost)."""
    import pyarrow.parquet as pq

    import datasources
    from jobs.audit import job as audit_job

    datasources.register(spark)
    rows = spark.read.format("rocketmq-commitlog").load(str(STORE)).where("kind = 'message'") \
        .orderBy("physical_offset").collect()
    records = manifest()["readBack"]["records"]
    assert [(r["physical_offset"], r["topic"], r["queue_id"], r["queue_offset"], r["msg_id"], r["kept"])
            for r in rows] == [(x["physicalOffset"], x["topic"], x["queueId"], x["queueOffset"], x["msgId"], True)
                               for x in records]
    # each record's DLedger index and term as columns: those of the entry it sits in (the raw item at offset - 48)
    entries = {e["pos"] + D.BODY_OFFSET: (e["index"], e["term"]) for e in manifest()["readBack"]["rawEntries"]
               if e["type"] == "ENTRY"}
    assert [(r["dledger_index"], r["dledger_term"]) for r in rows] == [entries[r["physical_offset"]] for r in rows]
    assert len(entries) == len(rows) and len({r["dledger_index"] for r in rows}) == len(rows)
    others = spark.read.format("rocketmq-commitlog").load(str(STORE)).where("kind != 'message'").collect()
    assert others and all(r["dledger_index"] is None and r["dledger_term"] is None for r in others)
    plain = spark.read.format("rocketmq-commitlog").option("materialize", "positions") \
        .load(str(FIXTURES_5X / "v5-default" / "store"))
    assert plain.where("dledger_index is not null or dledger_term is not null").count() == 0
    crc = _copy(tmp_path / "crc")
    _patch(crc, _raw(40), 40, ">i", _raw(40)["bodyZlibCrc32"] ^ 0x1)
    term = _copy(tmp_path / "term")
    _term_goes_backwards_at_101(term)
    seeded = spark.read.format("rocketmq-commitlog").option("walk", "salvage").load(str(term)) \
        .where(f"physical_offset in ({_raw(100)['pos'] + 48}, {_raw(101)['pos'] + 48})").orderBy("physical_offset")
    assert [(r["dledger_index"], r["dledger_term"]) for r in seeded.collect()] == [(100, 2), (101, 0)]
    out = tmp_path / "out"
    args = audit_job.build_parser().parse_args(["--store", f"clean={STORE}", f"crc={crc}", f"term={term}",
                                                "--out", str(out), "--no-report"])
    audit_job.run(spark, args)
    findings = pq.read_table(out / "findings").to_pylist()
    by = {b: [f for f in findings if f["broker"] == b] for b in ("clean", "crc", "term")}
    assert {(f["check"], f["severity"]) for f in by["clean"]} == {
        ("index.duplicate_entries", "info"), ("delays.overdue", "warning"), ("metadata.config_missing", "info")}
    # each seeded disagreement found by its own check, where it is (the recovery note only summarizes)
    dledger_found = {b: [(f["check"], f["severity"], f["file"], f["file_position"], f["physical_offset"],
                          dict(f["details"]).get("index")) for f in by[b] if f["check"].startswith("dledger.")]
                     for b in by}
    assert dledger_found["clean"] == []
    assert dledger_found["crc"] == [("dledger.body_crc", "error", *_at(40), "40")]
    assert sorted(dledger_found["term"]) == [("dledger.committed", "error", "dledger-n0/checkpoint", None,
                                              _raw(101)["pos"], None), ("dledger.term", "error", *_at(101), "101")]
    [note] = [f for f in by["crc"] if f["check"] == "recovery.note"]
    assert D.CHECK_BODY_CRC in note["message"] and note["severity"] == "warning"
    assert {f["check"] for f in by["crc"]} - {f["check"] for f in by["clean"]} == {"recovery.note", "dledger.body_crc"}
    cut = _raw(101)["pos"]
    lost = sorted(f["physical_offset"] for f in by["term"] if f["check"] == "recovery.message_lost")
    assert lost == [r["physicalOffset"] for r in records if r["physicalOffset"] >= cut]
    assert any(D.CHECK_TERM in f["message"] for f in by["term"] if f["check"] == "recovery.note")
    summary = json.loads((out / "summary.json").read_text())
    cuts = {b["name"]: b["recovery"]["predicted_max_physical_offset"] for b in summary["brokers"]}
    assert cuts == {"clean": records[-1]["physicalOffset"] + records[-1]["storeSize"], "crc": cuts["clean"],
                    "term": cut}


def test_hostile_headers_and_metadata_give_positioned_problems(dledger_copy):
    """A negative size, an index far past every index file, a checkpoint Java cannot parse: named problems, a
    prediction, no exception."""
    from store_format.recovery import predict_recovery
    from store_format.store import Store

    _patch(dledger_copy, _raw(5), 4, ">i", -7)
    _patch(dledger_copy, _raw(200), 8, ">q", 2**62)
    (dledger_copy / "dledger-n0" / "checkpoint").write_bytes(b"committedIndex=\\u12\nendIndex=x\n")
    log = D.DLedgerLog(D.find_home(dledger_copy))
    items = log.entries()
    bad = {(e.file, e.file_position): [c for c, _ in e.problems] for e in items if e.problems}
    assert bad[(_raw(5)["file"], _raw(5)["filePos"])] == [D.CHECK_SIZE]
    assert bad[(_raw(200)["file"], _raw(200)["filePos"])] == [D.CHECK_INDEX_UNIT, D.CHECK_INDEX]
    assert log.metadata.committed_index is None and log.metadata.problems
    ledger = log.recover(items)
    assert (ledger.end_index, ledger.committed_index, ledger.data_end) == (4, -1, _raw(5)["pos"])
    p = predict_recovery(Store(dledger_copy))
    assert p.max_physical_offset == _raw(5)["pos"] and p.stop_kind == D.CHECK_SIZE


def test_the_compiled_framer_walks_the_entries_as_frame_at_does(dledger_copy):
    """dledger_items with decoding.kernels.CompiledFramer (the records framed in one compiled call) gives every item the
    scalar walk gives, on the fixture and on a copy with a flipped body byte (BAD_CRC), a record shorter than its
    entry says and a wrong pos field, salvage walk or not."""
    from store_format.commitlog import FrameArrays
    from decoding.kernels import CompiledFramer

    def same(a: FrameArrays, b: FrameArrays) -> None:
        assert (a.positions.tolist(), a.sizes.tolist(), a.kinds.tolist(), a.magics.tolist()) == \
            (b.positions.tolist(), b.sizes.tolist(), b.kinds.tolist(), b.magics.tolist())
        assert {k: repr(v) for k, v in a.others.items()} == {k: repr(v) for k, v in b.others.items()}

    def walks(store) -> list:
        out = []
        for path in sorted((store / "dledger-n0" / "data").iterdir()):
            buf = path.read_bytes()
            for salvage in (True, False):
                scalar = dledger_items(buf, path.name, int(path.name), salvage=salvage)
                same(dledger_items(buf, path.name, int(path.name), salvage=salvage, framer=CompiledFramer), scalar)
                out.append(scalar)
        return out

    clean = walks(STORE)
    assert sum(len(w) for w in clean[::2]) == len(manifest()["readBack"]["records"]) + 2  # + the blank, the end
    from store_format import layout as L

    body = L.record_layout(False, False, 1).body_offset  # record 40: V1, IPv4 hosts
    _patch(dledger_copy, _raw(40), 48 + body + 3, ">B", 0x55)  # a byte of its body
    _patch(dledger_copy, _raw(90), 48, ">i", _raw(90)["size"] - 48 - 4)  # TOTALSIZE 4 short of the entry
    _patch(dledger_copy, _raw(150), 24, ">q", _raw(150)["pos"] + 8)
    damaged = walks(dledger_copy)
    stops = [it.stop_kind for w in damaged[::2] for it in w.others.values() if getattr(it, "stop_kind", None)]
    assert {"BAD_CRC", "PHYSICAL_OFFSET_MISMATCH"} <= set(stops) and len(stops) >= 4


def test_the_compiled_entry_walk_gives_the_scalar_walks_rows():
    """decoding.compiled.dledger_walk (CompiledFramer.entry_walk) returns the rows of the scalar dledger_entry_walk, row
    for row, on the fixture's files and on copies of their bytes with each header damage the walk names (every
    code of ENTRY_STOPS is met), salvage walk or not, with and without ``until`` and a ``limit`` short of the end."""
    from store_format.commitlog import ENTRY_STOPS, dledger_entry_walk
    from decoding.kernels import CompiledFramer

    def cases(name: str, buf: bytes):
        yield buf, len(buf)
        entries = [e for e in manifest()["readBack"]["rawEntries"]
                   if e["file"] == f"data/{name}" and e.get("index") is not None]
        written = entries[-1]["filePos"] + entries[-1]["size"]
        for e in entries[::23] + entries[-1:]:
            for at, fmt, value in ((0, ">i", 7), (0, ">i", -1), (0, ">q", 0), (4, ">i", 40), (4, ">i", 1 << 30),
                                   (44, ">i", 3), (24, ">q", e["pos"] + 1)):
                b = bytearray(buf)
                struct.pack_into(fmt, b, e["filePos"] + at, value)
                yield bytes(b), len(b)
        b = bytearray(buf)
        b[written:written + 5] = b"\x07" * 5
        yield bytes(b), written + 5  # fewer than 8 bytes left, not zeros
        yield buf, entries[5]["filePos"] + 60  # a limit inside an entry

    met = set()
    for path in sorted((STORE / "dledger-n0" / "data").iterdir()):
        buf = path.read_bytes()
        for data, limit in cases(path.name, buf):
            for salvage in (True, False):
                for until in (None, 100_000):
                    scalar = dledger_entry_walk(data, 0, limit, until, int(path.name), salvage)
                    framer = CompiledFramer(data, limit, int(path.name), True, True)
                    compiled = framer.entry_walk(0, until, salvage)
                    for got, want in zip(compiled, scalar):
                        assert got.tolist() == want.tolist()
                    met |= set(scalar.codes[scalar.kinds == 2].tolist())
    assert met == set(range(len(ENTRY_STOPS)))


# ---- the entries and DLedger's recovery as columns (DLedgerLog.table with the compiled entry walk) ---------------

def _damages():
    """(name, seeding on a store copy) for each header damage the walk and the recovery decide differently."""
    def crc(store):
        _patch(store, _raw(40), 40, ">i", _raw(40)["bodyZlibCrc32"] ^ 0x1)

    def chain(store):
        _patch(store, _raw(41), 36, ">i", 99)

    def magic(store):  # an entry DLedger refuses whose size still frames it: the walk steps over it
        _patch(store, _raw(60), 0, ">i", 7)

    def body_size(store):
        _patch(store, _raw(70), 44, ">i", 3)

    def pos_gap(store):  # the pos fields jump: entry 150 says it lies 8 bytes further
        _patch(store, _raw(150), 24, ">q", _raw(150)["pos"] + 8)

    def index_gap(store):
        _patch(store, _raw(200), 8, ">q", 250)

    def unit(store):
        u = _raw(10)["indexUnit"]
        with open(store / "dledger-n0" / u["file"], "r+b") as f:
            f.seek(u["filePos"])
            f.write(bytes(3 * D.INDEX_UNIT_SIZE))

    def truncated(store):  # the last entry cut: its size runs past the file
        _patch(store, _raw(302), 4, ">i", 10_000_000)

    def small(store):
        _patch(store, _raw(120), 4, ">i", 40)

    def torn_blank(store):
        blank = next(e for e in manifest()["readBack"]["rawEntries"] if e["type"] == "BLANK")
        _patch(store, blank, 4, ">i", 16)

    def first_file_head(store):  # the first data file's head fails: recovery starts in no other file
        _patch(store, _raw(0), 24, ">q", 5)

    return [("bad body CRC", crc), ("chain CRC", chain), ("bad magic", magic), ("bodySize", body_size),
            ("term goes backwards", _term_goes_backwards_at_101), ("gap in positions", pos_gap),
            ("index gap", index_gap), ("index units lost", unit), ("truncated entry", truncated),
            ("entry too small", small), ("blank of the wrong size", torn_blank), ("first head", first_file_head)]


@pytest.mark.parametrize("name,seed", [("clean", None)] + _damages(), ids=lambda v: v if isinstance(v, str) else "")
def test_the_columnar_walk_gives_the_scalar_walks_entries_and_ledger(tmp_path, name, seed):
    """DLedgerLog with the compiled framer (entries walked and checked as arrays, :meth:`DLedgerLog.table`) gives the
    scalar walk's items row for row (every field and problem text), the same ledger (and the same entries walked, the
    same stop) and the same findings, on the fixture and on each seeded damage."""
    from decoding.kernels import CompiledFramer
    from jobs.audit.checks import dledger as family

    store = STORE
    if seed is not None:
        store = _copy(tmp_path / "store")
        seed(store)
    home = D.find_home(store)
    scalar, columnar = D.DLedgerLog(home), D.DLedgerLog(home, header_run=dledger_header_run(CompiledFramer))
    items = scalar.entries()
    assert columnar.entries() == items
    assert seed is None or any(e.problems for e in items)
    want, got = scalar.recover(items), columnar.recover()
    assert got == want and got.entries == want.entries and got.stop == want.stop
    assert family.broker_rows(columnar) == family.broker_rows(scalar)


def test_a_rocksdb_queue_store_under_dledger_is_truncated_where_dledger_ends(tmp_path):
    """storeType=defaultRocksDB with enableDLegerCommitLog (a RocksDBMessageStore over a DLedgerCommitLog, possible
    in 5.3.3): the DLedger fixture with the rocksdb-cq fixture's RocksDB consume queue for its queues.  Clean, its
    checkpoint row (497836) is behind DLedger's end: nothing is cut.  With DLedger's ledger ending at entry 101 (a
    term going backwards), dledgerRecoverNormally runs truncateDirtyLogicFiles there, RocksDB's truncateDirty: each
    queue whose max row lies past the cut gets it moved back."""
    from store_format.recovery import predict_recovery, queue_store_state
    from store_format.store import Store

    root = _copy(tmp_path / "store")
    shutil.rmtree(root / "consumequeue")
    shutil.copytree(FIXTURES_5X / "rocksdb-cq" / "store" / "consumequeue", root / "consumequeue")
    assert queue_store_state(Store(root))[2].dispatch_end == 497836
    clean = predict_recovery(Store(root))
    assert (clean.max_physical_offset, clean.cq_truncation) == (manifest()["readBack"]["afterLoad"]["commitLogMaxOffset"],
                                                                {})
    _term_goes_backwards_at_101(root)
    cut = predict_recovery(Store(root))
    end = _raw(101)["pos"]
    assert cut.max_physical_offset == end and cut.cq_truncation
    assert all(q.reason == "max_row_corrected" and q.max_physic_offset >= end for q in cut.cq_truncation.values())
    assert any("truncateDirty" in n for n in cut.notes)  # the queues whose first unit lies past the cut too
