"""The audit job (jobs/audit/): clean on RocketMQ's own stores, with tables equal to what their manifests and
config files say; exactly the injected problem, at its position, for each damage kind; the expected lag,
transaction, delay and DLQ tables for a broker-flow store; exit codes and the history tables.

Each audit run costs a few Spark jobs per check, so stores are audited together: the two fixtures in one
run, every damaged store in one run (a folder of store roots), the broker-flow store in one run."""
from __future__ import annotations

import argparse
import json
import re
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from jobs import audit
from store_format.write import damage as D
from store_format import layout as L
from store_format.config import loads
from store_format.indexfile import IndexFile, list_index_files
from store_format.store import Store

from .conftest import fixture_manifest, fixture_store
from .support.writer_support import build_flow_store

MIB = 1 << 20
FIXTURES = ("basic", "broker")
CQ_ENTRIES = "entries_[queueOffset,commitLogOffset,size,tagsCode]"  # the manifest's consume-queue units


def audit_args(stores, out, **kw) -> argparse.Namespace:
    argv = ["--store", *map(str, stores), "--out", str(out)]
    for k, v in kw.items():
        argv += [f"--{k.replace('_', '-')}"] + ([] if v is True else [str(v)])
    return audit.build_parser().parse_args(argv)


def rows(out: Path, name: str) -> list[dict]:
    """A table's rows, with map columns (findings' details) as dicts."""
    table = pq.read_table(out / name)
    maps = [f.name for f in table.schema if str(f.type).startswith("map<")]
    out_rows = table.to_pylist()
    for r in out_rows:
        for m in maps:
            r[m] = dict(r[m]) if r[m] is not None else None
    return out_rows


def by_severity(findings: list[dict], severity: str, broker: str | None = None) -> list[dict]:
    return [f for f in findings if f["severity"] == severity and (broker is None or f["broker"] == broker)]


# --------------------------------------------------------------------------------------------------
# RocketMQ's own stores


@pytest.fixture(scope="module")
def fixtures_audit(spark, tmp_path_factory):
    """Both fixtures, plus a repair (jobs.replay --repair) of a basic copy with a flipped bit, in one run."""
    from jobs import replay

    base = tmp_path_factory.mktemp("audit")
    frames = _frames(fixture_store("basic"))
    D.flip_body_bit(fixture_store("basic"), base / "damaged", physical_offset=frames[30].physical_offset)
    repaired = base / "repaired" / "store"
    replay.run(spark, replay.build_parser().parse_args(["--repair", str(base / "damaged"), "--out", str(repaired)]))
    out = base / "fixtures"
    result = audit.run(spark, audit_args([fixture_store("basic"), fixture_store("broker"), repaired], out))
    return result, out


def test_fixtures_audit_clean(fixtures_audit):
    result, out = fixtures_audit
    findings = [f for f in rows(out, "findings") if f["broker"] in FIXTURES]
    assert result.exit_code == 0 and result.line.startswith("audit PASS (3 stores): 0 cuts, 0 messages lost")
    assert result.summary.splitlines()[-1] == result.line  # after each broker's verdict in words
    assert by_severity(findings, "error") == []
    # The one warning: the broker fixture's consumer committed offset 4 on BrokerTopic/3, whose queue holds
    # 3 messages (manifest consumeQueues maxOffset 3), so a message written there next would be skipped.
    [w] = by_severity(findings, "warning")
    assert (w["check"], w["broker"], w["topic"], w["queue_id"], w["queue_offset"]) == \
        ("lag.offset_above_max", "broker", "BrokerTopic", 3, 4)
    # RocketMQ 4.9.7 does not persist RMQ_SYS_TRANS_OP_HALF_TOPIC in topics.json: a system topic, so info
    infos = {(f["broker"], f["check"], f["topic"]) for f in by_severity(findings, "info")}
    assert ("broker", "metadata.topic_not_in_config", L.TRANS_OP_HALF_TOPIC) in infos
    assert ("basic", "index.duplicate_entries", None) in infos  # the key listed twice in one message
    assert len({f["finding_id"] for f in findings}) == len(findings)


def test_repaired_store_audits_clean(fixtures_audit):
    """Repair = salvage + replay: every record but the damaged one, in a store that passes the audit."""
    _, out = fixtures_audit
    assert by_severity(rows(out, "findings"), "error", "repaired") == []
    counts = {(m["broker"], m["metric"]): m["value"] for m in rows(out, "metrics") if m["scope"] == "broker"}
    assert counts[("repaired", "message_count")] == counts[("basic", "message_count")] - 1
    assert counts[("repaired", "messages_lost")] == 0


def test_fixture_summary(fixtures_audit):
    result, out = fixtures_audit
    summary = json.loads((out / "summary.json").read_text())
    assert summary == result.summary_data
    assert summary["counts"]["error"] == 0 and sum(v["count"] for v in summary["counts"]["per_check"].values()) == \
        summary["counts"]["warning"] + summary["counts"]["info"]
    for b in summary["brokers"][:2]:
        m = fixture_manifest(b["name"])
        rec = b["recovery"]
        assert (rec["mode"], rec["broker_will_start"], rec["messages_lost"]) == ("normal", True, 0)
        assert rec["predicted_max_physical_offset"] == m["commitLogMaxOffset"]
        assert b["geometry"]["segment_size"] == m["storeConfig"]["mappedFileSizeCommitLog"]
    assert {i["path"] for i in summary["inputs"]} >= {str(fixture_store("basic") / "checkpoint")}


def test_fixture_lag_equals_consumer_offsets_and_queue_ends(fixtures_audit):
    _, out = fixtures_audit
    expected = set()
    for name in ("basic", "broker"):
        m = fixture_manifest(name)
        text = m["configFiles"].get("consumerOffset.json")
        if text is None:
            continue
        ends = {(q["topic"], q["queueId"]): q["maxOffset"] for q in m["consumeQueues"]}
        for key, queues in loads(text)["offsetTable"].items():
            topic, group = key.split("@")
            for qid, offset in queues.items():
                expected.add((name, group, topic, int(qid), offset, max(0, ends[(topic, int(qid))] - offset)))
    got = {(r["broker"], r["group"], r["topic"], r["queue_id"], r["offset"], r["lag"]) for r in rows(out, "tables/lag")
           if r["broker"] in FIXTURES}
    assert got == expected and expected
    lagging = [r for r in rows(out, "tables/lag") if r["lag"]]
    assert all(r["first_unconsumed_store_time"] and r["lag_ms"] > 0 for r in lagging)


def test_fixture_transactions(fixtures_audit):
    _, out = fixtures_audit
    state_by_key = {}
    for name in ("basic", "broker"):
        for x in fixture_manifest(name)["messages"]:
            if x["topic"] == L.TRANS_HALF_TOPIC or x["sysFlag"] & L.TRANSACTION_MASK == L.TRANSACTION_PREPARED_TYPE:
                state_by_key[x["uniqKey"]] = x["keys"]
    got = {state_by_key[r["uniq_key"]]: r["state"] for r in rows(out, "tables/transactions") if r["broker"] in FIXTURES}
    # the fixtures' README: one half committed and one rolled back through END_TRANSACTION per store, and in
    # basic the raw-sysflag PREPARED records tx1 (then COMMIT) and tx2 (then ROLLBACK)
    assert got == {"tx-half-commit": "committed", "tx-half-rollback": "rolled_back", "tx1": "committed",
                   "tx2": "rolled_back", "btx-0": "committed", "btx-1": "rolled_back"}


def test_fixture_delays_equal_schedule_queues_and_delay_offsets(fixtures_audit):
    _, out = fixtures_audit
    expected = set()
    for name in ("basic", "broker"):
        m = fixture_manifest(name)
        delivered = {int(k): v for k, v in loads(m["configFiles"]["delayOffset.json"])["offsetTable"].items()}
        for q in m["consumeQueues"]:
            if q["topic"] == L.SCHEDULE_TOPIC and q["dirExists"]:
                level = q["queueId"] + 1
                expected.add((name, level, q["maxOffset"], q["maxOffset"] - delivered.get(level, 0)))
    got = {(r["broker"], r["level"], r["max_offset"], r["pending"]) for r in rows(out, "tables/delays")
           if r["broker"] in FIXTURES}
    assert got == expected
    assert all(r["overdue"] == 0 for r in rows(out, "tables/delays"))  # nothing was due when the stores stopped


def test_fixture_dlq_inventory(fixtures_audit):
    _, out = fixtures_audit
    expected = {}
    for name in ("basic", "broker"):
        for x in fixture_manifest(name)["messages"]:
            if x["topic"].startswith(L.DLQ_GROUP_TOPIC_PREFIX):
                key = (name, x["topic"][len(L.DLQ_GROUP_TOPIC_PREFIX):])
                expected[key] = expected.get(key, 0) + 1
    assert {(r["broker"], r["group"]): r["messages"] for r in rows(out, "tables/dlq") if r["broker"] in FIXTURES} == \
        expected
    hops = rows(out, "tables/retries")
    # broker: message 1 was sent back to the DLQ; ORIGIN_MESSAGE_ID leads to its first copy
    [hop] = [h for h in hops if h["broker"] == "broker" and h["stage"] == "dlq"]
    origin = next(x for x in fixture_manifest("broker")["messages"] if x["msgId"] == hop["origin_message_id"])
    assert (hop["original_topic"], hop["origin_physical_offset"]) == ("BrokerTopic", origin["commitLogOffset"])


def test_report_is_self_contained(fixtures_audit):
    _, out = fixtures_audit
    page = (out / "report.html").read_text(encoding="utf-8")
    assert "<div class='banner pass' id='verdict'><span class='word'>PASS</span>3 of 3 brokers pass" in page
    assert page.count("data:image/png;base64,") == 3
    assert "<script" not in page and "http://" not in page and "https://" not in page
    assert "@media print" in page  # and a print stylesheet that opens every group
    # the fleet: one line per broker, its verdict and headline, linking to its first screen
    fleet = re.search(r"<h2 id='fleet'>Fleet</h2>(.*?)</table>", page, re.S).group(1)
    rows = re.findall(r"<tr><td><a href='#broker-([^']+)'>[^<]+</a></td><td><span class='badge (\w[\w-]*)'>", fleet)
    assert rows == [("basic", "pass"), ("broker", "pass"), ("repaired", "pass")]
    assert all(f"id='broker-{name}'" in page for name, _ in rows)
    assert "basic will start (normal recovery) and keeps all" in fleet


# --------------------------------------------------------------------------------------------------
# Damage, one store per kind, audited together


def _frames(store: Path):
    return [f for f in Store(store).walk_commitlog(decode=False) if f.kind == "message"]


@pytest.fixture(scope="module")
def damage_audit(spark, tmp_path_factory):
    src = fixture_store("basic")
    frames = _frames(src)
    root = tmp_path_factory.mktemp("damaged") / "set"
    root.mkdir()
    made = {
        "torn_tail": D.torn_tail(src, root / "torn_tail"),
        "flip_body_bit": D.flip_body_bit(src, root / "flip_body_bit", physical_offset=frames[40].physical_offset),
        "zero_page": D.zero_page(src, root / "zero_page"),
        "truncate_segment": D.truncate_segment(src, root / "truncate_segment"),
        "bad_magic": D.bad_magic(src, root / "bad_magic", physical_offset=frames[60].physical_offset),
        "bad_crc": D.bad_crc(src, root / "bad_crc", physical_offset=frames[20].physical_offset),
        "size_mismatch": D.size_mismatch(src, root / "size_mismatch", physical_offset=frames[50].physical_offset),
        # a page inside the 200 KiB body of message 79: its header stays, its CRC fails
        "zero_page_body": D.zero_page(src, root / "zero_page_body", physical_offset=frames[79].physical_offset + 90_000),
        "delete_consume_queue": D.delete_consume_queue(src, root / "delete_consume_queue", "TopicTest", 1),
        "wrong_cq_size": D.wrong_cq_size(src, root / "wrong_cq_size", "TopicTest", 0, 3),
        "stale_index_entry": D.stale_index_entry(src, root / "stale_index_entry"),
    }
    # a combination: a flipped bit and a lost consume queue in one store
    step = tmp_path_factory.mktemp("step") / "s"
    D.flip_body_bit(src, step, physical_offset=frames[70].physical_offset)
    made["combined"] = D.delete_consume_queue(step, root / "combined", "TopicTest", 2)
    # an index header that disagrees with its entries (a warning: lookups still work); not in ``made``: no error
    header = D.copy_store(src, root / "index_header")
    [index_file] = list_index_files(header / "index")
    at = dict((n, o) for n, o, _ in L.INDEX_HEADER_FIELDS)["hash_slot_count"]
    raw = bytearray(index_file.read_bytes())
    raw[at:at + 4] = (int.from_bytes(raw[at:at + 4], "big") + 1).to_bytes(4, "big")
    index_file.write_bytes(bytes(raw))
    # an invalid consume-queue unit (ConsumeQueue.recover stops there) and markers / files that stop the broker
    cq = D.copy_store(src, root / "cq_invalid_unit")
    with open(cq / "consumequeue" / "TopicTest" / "0" / f"{0:020d}", "r+b") as f:
        f.seek(3 * 20)
        f.write((-5).to_bytes(8, "big", signed=True))
    made["cq_invalid_unit"] = None
    marked = D.copy_store(src, root / "marker_folders")
    (marked / "lock").unlink()
    (marked / "lock").mkdir()
    (marked / "abort").mkdir()
    (marked / "abort" / "pid").write_text("1")
    (marked / "commitlog" / f"{0:020d}.bak").write_bytes((marked / "commitlog" / f"{0:020d}").read_bytes())
    made["marker_folders"] = None
    # a flipped byte in a key (properties are outside the body CRC): malformed UTF-8 the broker reads as U+FFFD
    text = D.copy_store(src, root / "invalid_utf8")
    segment = text / "commitlog" / f"{0:020d}"
    raw = bytearray(segment.read_bytes())
    at = raw.index(b"KEYS\x01key-3", 675) + len("KEYS\x01k")
    raw[at] = 0xFF
    segment.write_bytes(bytes(raw))
    made["invalid_utf8"] = at  # its index entry no longer matches the key: an error
    out = root.parent / "out"
    result = audit.run(spark, audit_args([root], out, segment_size=MIB, no_report=True))
    return result, out, made, frames


def _record_holding(frames, position: int):
    return next(f for f in frames if f.file_position <= position < f.file_position + f.size)


def _errors(findings, broker):
    return sorted((f["check"], f["file_position"] if f["file_position"] is not None else f["physical_offset"])
                  for f in by_severity(findings, "error", broker))


def test_damage_audit_exit_code_and_scope(damage_audit):
    result, out, made, _ = damage_audit
    assert result.exit_code == 1 and not result.line.startswith("audit PASS")
    findings = rows(out, "findings")
    assert {f["broker"] for f in by_severity(findings, "error")} == set(made)


def _recovery_summary(out: Path, broker: str) -> dict:
    return next(b for b in json.loads((out / "summary.json").read_text())["brokers"] if b["name"] == broker)["recovery"]


def _broker_count(root: Path) -> int:
    """The messages RocketMQ's recovery walk accepts from the first segment (CommitLog.recoverNormally /
    recoverAbnormally: checkMessageAndReturnSize record by record, with the CRC check, until the first refusal;
    the basic fixture has one segment)."""
    return sum(1 for f in Store(root).walk_commitlog(decode=False, stop_at_first_stop=True) if f.kind == "message")


@pytest.mark.parametrize("kind,reason,damaged", [("flip_body_bit", "bad_crc", 1), ("bad_crc", "bad_crc", 1),
                                                 ("size_mismatch", "size_mismatch", 1),
                                                 ("zero_page_body", "bad_crc", 1), ("bad_magic", "bad_magic", 0)])
def test_record_damage_mid_log(damage_audit, kind, reason, damaged):
    """A bad record in the middle: the integrity error at the record's start, and recovery stopping there and
    dropping it and every later message, each lost message an error like the cut (no other error: their
    consume-queue and index entries are warnings).
    messages_lost is what the broker's count loses (the recovery walk of the original sees that many more
    messages than the damaged store's, CommitLog.recoverNormally): the damaged record when its header still
    frames a message (named, ``recovery.message_lost`` with details.state=damaged), else an unframed run (a bad
    magic: the record cannot be counted, ``unframed_runs_lost``)."""
    _, out, made, frames = damage_audit
    findings = rows(out, "findings")
    bad = _record_holding(frames, made[kind].position)
    per_message = ("recovery.message_lost", "integrity.damaged_message")
    assert [e for e in _errors(findings, kind) if e[0] not in per_message] == [
        (f"integrity.{reason}", bad.file_position), ("recovery.truncation", bad.file_position)]
    rec = _recovery_summary(out, kind)
    later = [f for f in frames if f.physical_offset > bad.physical_offset]
    truth = _broker_count(fixture_store("basic")) - _broker_count(out.parent / "set" / kind)
    assert truth == len(later) + 1
    assert (rec["predicted_max_physical_offset"], rec["messages_lost"], rec["damaged_messages_lost"],
            rec["intact_messages_lost"], rec["unframed_runs_lost"]) == \
        (bad.physical_offset, len(later) + damaged, damaged, len(later), 1 - damaged)
    assert rec["messages_lost"] + rec["unframed_runs_lost"] == truth
    lost = {f["physical_offset"]: f for f in findings if f["broker"] == kind and f["check"] == "recovery.message_lost"}
    assert set(lost) == {f.physical_offset for f in later} | ({bad.physical_offset} if damaged else set())
    assert {f["details"]["state"] for o, f in lost.items() if o != bad.physical_offset} == {"intact"}
    if damaged:
        named = lost[bad.physical_offset]
        m = next(x for x in fixture_manifest("basic")["messages"] if x["commitLogOffset"] == bad.physical_offset)
        assert (named["details"]["state"], named["details"]["damage"], named["queue_id"], named["queue_offset"]) == \
            ("damaged", reason.upper(), m["queueId"], m["queueOffset"])
    [trunc] = [f for f in findings if f["broker"] == kind and f["check"] == "recovery.truncation"]
    assert f"drops {len(later) + damaged} message(s)" in trunc["message"]


def test_tail_damage(damage_audit):
    """A torn tail, a zeroed page and a truncated file destroy the last records: an integrity error where the
    first destroyed record starts, nothing well-formed is lost after it; a short file stops the broker.

    The zeroed page wipes the end of the 200 KiB record and the five records after it, wholly: zeros from there
    to the segment's end, which no walk can tell from the unwritten tail.  Their consume-queue units and index
    entries are the evidence that records were there: they point past the end of the commitlog data (errors)."""
    _, out, made, frames = damage_audit
    findings = rows(out, "findings")
    for kind in ("torn_tail", "zero_page", "truncate_segment"):
        first = _record_holding(frames, made[kind].position)
        errs = _errors(findings, kind)
        integrity = [e for e in errs if e[0].startswith("integrity.") and e[0] != "integrity.bad_geometry"]
        assert min(p for _, p in integrity) == first.file_position, kind
        others = [e for e in errs if not e[0].startswith(("integrity.", "recovery."))]
        if kind != "zero_page":
            assert not others, kind
            continue
        wiped = {f.physical_offset for f in frames if f.physical_offset >= made[kind].position}
        past = {f["physical_offset"] for f in by_severity(findings, "error", kind) if f["check"] in (
            "consumequeue.entry_past_end", "index.entry_past_end")}
        assert len(wiped) == 5 and past == wiped and {c for c, _ in others} == {"consumequeue.entry_past_end",
                                                                                 "index.entry_past_end"}
    assert ("recovery.broker_will_not_start", None) in _errors(findings, "truncate_segment")
    assert ("integrity.bad_geometry", 0) in _errors(findings, "truncate_segment")
    # the torn last record (the demo's broker-a): its span holds its written bytes, not the zero tail after it
    victim = _record_holding(frames, made["torn_tail"].position)
    [span] = [f for f in findings if f["broker"] == "torn_tail" and f["check"].startswith("integrity.")
              and f["check"] != "integrity.damaged_message"]
    length, tail = int(span["details"]["length"]), int(span["details"]["unwritten_tail_bytes"])
    assert length <= made["torn_tail"].position - victim.file_position and length + tail == MIB - victim.file_position
    assert f"unwritten zero tail ({tail} bytes, not damage)" in span["message"]
    rec = _recovery_summary(out, "torn_tail")  # the torn record is lost: one damaged message
    assert (rec["messages_lost"], rec["damaged_messages_lost"], rec["intact_messages_lost"]) == (1, 1, 0)
    assert _broker_count(fixture_store("basic")) - _broker_count(out.parent / "set" / "torn_tail") == 1


def test_consume_queue_and_index_damage(damage_audit):
    _, out, made, frames = damage_audit
    findings = rows(out, "findings")
    [missing] = by_severity(findings, "error", "delete_consume_queue")
    m = fixture_manifest("basic")
    q1 = next(q for q in m["consumeQueues"] if (q["topic"], q["queueId"]) == ("TopicTest", 1))
    assert (missing["check"], missing["topic"], missing["queue_id"], missing["queue_offset"]) == \
        ("consumequeue.missing_entry", "TopicTest", 1, 0)
    assert int(missing["details"]["count"]) == q1["maxOffset"]
    assert missing["physical_offset"] == q1[CQ_ENTRIES][0][1]
    [size] = by_severity(findings, "error", "wrong_cq_size")
    assert (size["check"], size["topic"], size["queue_id"], size["queue_offset"], size["file_position"]) == \
        ("consumequeue.size_mismatch", "TopicTest", 0, 3, made["wrong_cq_size"].position - 8)
    [stale] = by_severity(findings, "error", "stale_index_entry")
    assert stale["check"] == "index.entry_past_end" and stale["physical_offset"] == m["commitLogMaxOffset"]


def test_invalid_utf8_is_a_finding_at_the_record(damage_audit):
    _, out, made, _ = damage_audit
    [text] = [f for f in rows(out, "findings") if f["check"] == "integrity.invalid_utf8"]
    m = fixture_manifest("basic")["messages"][3]
    assert (text["broker"], text["severity"], text["file_position"], text["topic"], text["queue_offset"]) == \
        ("invalid_utf8", "warning", m["commitLogOffset"], m["topic"], m["queueOffset"])
    assert text["details"]["field"] == "KEYS" and text["details"]["value"] == "k\\xffy-3"
    assert int(text["details"]["malformed_at"]) == made["invalid_utf8"]
    assert "KEYS of this message is not UTF-8: k\\xffy-3" in text["message"]


def test_index_header_mismatch(damage_audit):
    """hashSlotCount one above the slots the entries use: one warning naming both counts, and no error."""
    _, out, _, _ = damage_audit
    findings = [f for f in rows(out, "findings") if f["broker"] == "index_header"]
    with IndexFile(list_index_files(fixture_store("basic") / "index")[0]) as f:
        used = len({e.key_hash % f.hash_slot_num for e in f.entries() if e.key_hash >= 0})
        stored = f.header.hash_slot_count
    assert stored == used  # RocketMQ's own file agrees with itself
    assert not by_severity(findings, "error", "index_header")
    [w] = [f for f in findings if f["check"] == "index.header_mismatch"]
    assert w["severity"] == "warning" and f"hashSlotCount {used + 1} but {used} slots are used" in w["message"]


def test_recovery_of_consume_queues_and_unusual_files(damage_audit):
    """recovery.cq_truncated names the first unit ConsumeQueue.recover refuses and counts it with every later unit
    of the queue; a lock folder (DefaultMessageStore's constructor) and a commitlog file whose name is no offset
    (MappedFile.init's Long.parseLong) each stop the broker; an abort folder that is not empty means an abnormal
    recovery, and every later start too (File.delete cannot remove it)."""
    _, out, _, _ = damage_audit
    findings = rows(out, "findings")
    m = fixture_manifest("basic")
    q0 = next(q for q in m["consumeQueues"] if (q["topic"], q["queueId"]) == ("TopicTest", 0))
    [cut] = [f for f in findings if f["broker"] == "cq_invalid_unit" and f["check"] == "recovery.cq_truncated"]
    assert (cut["topic"], cut["queue_id"], cut["queue_offset"], cut["details"]["reason"]) == ("TopicTest", 0, 3,
                                                                                          "invalid_unit")
    assert int(cut["details"]["units"]) == q0["maxOffset"] - 3 and "ConsumeQueue.recover stops" in cut["message"]
    marked = [f for f in findings if f["broker"] == "marker_folders" and f["check"].startswith("recovery.")]
    stops = sorted(f["file"] for f in marked if f["check"] == "recovery.broker_will_not_start")
    assert stops == [f"{0:020d}.bak", "lock"]
    assert [f["severity"] for f in marked if f["check"] == "recovery.abnormal"] == ["info"]
    assert any("every later start" in f["message"] for f in marked if f["check"] == "recovery.note")
    rec = _recovery_summary(out, "marker_folders")
    assert (rec["mode"], rec["broker_will_start"]) == ("abnormal", False)


def test_combined_damage(damage_audit):
    _, out, _, frames = damage_audit
    findings = rows(out, "findings")
    bad = frames[70]
    checks = [c for c, _ in _errors(findings, "combined")]
    assert checks.count("integrity.bad_crc") == 1 and checks.count("recovery.truncation") == 1
    # TopicTest/2's units are gone: its messages before the flipped record are missing entries
    missing = [f for f in by_severity(findings, "error", "combined") if f["check"] == "consumequeue.missing_entry"]
    assert [(f["topic"], f["queue_id"], f["queue_offset"]) for f in missing] == [("TopicTest", 2, 0)]
    kept = [f for f in frames[:70] if f.physical_offset < bad.physical_offset]
    m = fixture_manifest("basic")
    q2 = next(q for q in m["consumeQueues"] if (q["topic"], q["queueId"]) == ("TopicTest", 2))
    assert int(missing[0]["details"]["count"]) == sum(1 for e in q2[CQ_ENTRIES] if e[1] < bad.physical_offset)
    assert kept


# --------------------------------------------------------------------------------------------------
# A store from broker flows (writer_support.build_flow_store): lag, open, committed and rolled-back
# transactions, an overdue delay, a retry chain into the DLQ, a crash


@pytest.fixture(scope="module")
def flow_audit(spark, tmp_path_factory):
    base = tmp_path_factory.mktemp("flows")
    x = build_flow_store(base / "flows")
    as_of = x["delayed"].record.store_timestamp + 60_000  # the level-6 delay is not due by then
    out = base / "out"
    history = base / "history"
    result = audit.run(spark, audit_args([base / "flows"], out, as_of=as_of, history=history))
    return result, out, history, dict(x, as_of=as_of)


def test_flow_store_is_clean_after_a_crash(flow_audit):
    result, out, _, _ = flow_audit
    findings = rows(out, "findings")
    assert by_severity(findings, "error") == [] and result.exit_code == 0
    [abnormal] = [f for f in findings if f["check"] == "recovery.abnormal"]
    assert abnormal["severity"] == "info"
    rec = json.loads((out / "summary.json").read_text())["brokers"][0]["recovery"]
    assert rec["mode"] == "abnormal" and rec["messages_lost"] == 0 and rec["broker_will_start"]


def test_flow_tables(flow_audit):
    _, out, _, x = flow_audit
    lag = {(r["group"], r["topic"], r["queue_id"]): r for r in rows(out, "tables/lag")}
    # queue 0 holds sends 0, 2, 4 and the committed transaction; offset 1 is send 2
    assert {k: v["lag"] for k, v in lag.items() if k[1] == "Orders"} == {("cg", "Orders", 0): 3, ("cg", "Orders", 1): 0}
    first_unconsumed = x["sent"][2].record
    assert lag[("cg", "Orders", 0)]["lag_ms"] == x["as_of"] - first_unconsumed.store_timestamp
    tx = {r["uniq_key"]: r for r in rows(out, "tables/transactions")}
    assert tx[x["open_half"].msg_id]["state"] == "open" and tx[x["done"].msg_id]["state"] == "committed"
    assert tx[x["undone"].msg_id]["state"] == "rolled_back"
    assert tx[x["open_half"].msg_id]["age_ms"] == x["as_of"] - x["open_half"].record.store_timestamp
    assert tx[x["open_half"].msg_id]["producer_group"] == "<pg>&\"x\""
    delays = {r["level"]: r for r in rows(out, "tables/delays")}
    assert (delays[2]["pending"], delays[2]["overdue"]) == (1, 1)
    assert (delays[3]["pending"], delays[3]["overdue"]) == (0, 0)  # the retry was delivered
    findings = rows(out, "findings")
    [overdue] = [f for f in findings if f["check"] == "delays.overdue"]
    assert overdue["details"]["uniq_key"] == x["delayed"].msg_id
    [opened] = [f for f in findings if f["check"] == "transactions.open"]
    assert opened["details"]["uniq_key"] == x["open_half"].msg_id
    hops = sorted(rows(out, "tables/retries"), key=lambda h: h["store_timestamp"])
    assert [(h["stage"], h["topic"]) for h in hops] == [("scheduled", L.SCHEDULE_TOPIC), ("retry", "%RETRY%cg"),
                                                      ("dlq", "%DLQ%cg")]
    assert {h["origin_physical_offset"] for h in hops} == {x["sent"][0].record.physical_offset}
    assert [(r["group"], r["messages"]) for r in rows(out, "tables/dlq")] == [("cg", 1)]


def test_flow_report_escapes_content(flow_audit):
    _, out, _, _ = flow_audit
    page = (out / "report.html").read_text(encoding="utf-8")
    assert "&lt;pg&gt;&amp;&quot;x&quot;" in page and "<pg>" not in page


def test_flow_history_tables(flow_audit):
    from deltalake import DeltaTable

    _, out, history, _ = flow_audit
    findings = DeltaTable(str(history / "findings"))
    metrics = DeltaTable(str(history / "metrics"))
    assert findings.version() == 0 and metrics.version() == 0  # one commit each
    assert findings.to_pyarrow_table().num_rows == len(rows(out, "findings"))
    names = set(metrics.to_pyarrow_table().column("metric").to_pylist())
    assert {"lag_messages", "open_transactions", "pending_delays", "dlq_messages", "message_count"} <= names
    # the run marker, written last (runtime/history.py), names the run of the output and its whole append
    runs = DeltaTable(str(history / "runs")).to_pyarrow_table().to_pylist()
    summary = json.loads((out / "summary.json").read_text())
    assert [(r["run_id"], r["findings"], r["metrics"]) for r in runs] == \
        [(summary["run_id"], findings.to_pyarrow_table().num_rows, metrics.to_pyarrow_table().num_rows)]
    for table, name in ((findings, "findings"), (metrics, "metrics")):
        assert table.metadata().name == f"rocketmq-forensics audit history: {name}"


# --------------------------------------------------------------------------------------------------
# The command line


def test_exit_codes(spark, tmp_path):
    assert audit.main(["--store", str(tmp_path / "nowhere"), "--out", str(tmp_path / "o")]) == 2
    existing = tmp_path / "taken"
    existing.mkdir()
    (existing / "x").write_text("keep me")
    assert audit.main(["--store", str(fixture_store("basic")), "--out", str(existing)]) == 2
    assert (existing / "x").read_text() == "keep me"
    assert audit.main(["--store", str(fixture_store("basic")), "--out", str(fixture_store("basic") / "out")]) == 2


def test_report_in_a_real_browser(flow_audit, tmp_path):
    """report.html rendered by headless Chromium: no console errors, every plot decodes, the verdict and the
    (escaped) hostile producer group are visible as text, not markup."""
    from .support.browser import render

    _, out, _, _ = flow_audit
    result = render(out / "report.html", tmp_path / "report.png", viewport=(1400, 900))
    assert result.console_errors == [] and result.broken_images == 0
    assert result.page_width <= 1400  # the hostile names wrap or scroll inside their table, never the page
    assert "PASS" in result.first_screen_text and "Recovery prediction" in result.page_text
    assert "will start (abnormal recovery)" in result.first_screen_text
    assert "<pg>&\"x\"" in result.page_text  # shown as text: the markup was escaped
    assert result.screenshot_path.stat().st_size > 10_000


# --------------------------------------------------------------------------------------------------
# One broker's bad file is that broker's finding (issue 22)


def test_one_brokers_bad_config_value_and_special_files_are_its_findings(spark, tmp_path):
    """Three brokers in one run: ``bad-config`` has values no broker can hold (a consumer offset outside the long
    range, a queue id outside int, a delay level that is not a number, a queue count outside int), ``special`` has
    a FIFO segment, a socket index file, a consume-queue file linked to /dev/zero, a FIFO config file and a link
    loop; ``clean`` is the basic fixture.  Each gets its own findings, the run ends (exit 1, not 2), and the clean
    broker's results are those of an audit of it alone."""
    import shutil

    from .test_safety import hostile_store

    dump = tmp_path / "dump"
    bad = dump / "bad-config" / "store"
    shutil.copytree(fixture_store("broker"), bad)
    for p in [bad, *bad.rglob("*")]:
        p.chmod(0o755 if p.is_dir() else 0o644)
    offsets = loads((bad / "config" / "consumerOffset.json").read_text())
    (topic_group, queues), = list(offsets["offsetTable"].items())[:1]
    queues.update({0: 99999999999999999999999, 2**40: 5})
    (bad / "config" / "consumerOffset.json").write_text(json.dumps(
        {"offsetTable": {k: {str(q): o for q, o in v.items()} for k, v in offsets["offsetTable"].items()}}))
    (bad / "config" / "delayOffset.json").write_text('{"offsetTable":{x:1,2:3}}')
    topics = loads((bad / "config" / "topics.json").read_text())
    first = next(iter(topics["topicConfigTable"]))
    topics["topicConfigTable"][first]["readQueueNums"] = 2**40
    (bad / "config" / "topics.json").write_text(json.dumps(topics))
    special = dump / "special" / "store"
    made = {k: str(Path(v).relative_to(special)) for k, v in hostile_store(special).items()}
    shutil.copytree(fixture_store("basic"), dump / "clean" / "store")

    result = audit.run(spark, audit_args([dump], tmp_path / "out", no_report=True))
    findings = rows(tmp_path / "out", "findings")
    assert result.exit_code == 1
    out_of_range = [f for f in findings if f["check"] == "metadata.config_value_out_of_range"]
    assert {f["broker"] for f in out_of_range} == {"bad-config"}
    keys = {(f["file"], f["details"]["key"], f["details"]["value"]) for f in out_of_range}
    assert keys == {("config/consumerOffset.json", f"offsetTable/{topic_group}/0", "99999999999999999999999"),
                    ("config/consumerOffset.json", f"offsetTable/{topic_group}/{2**40}", f'"{2**40}"'),
                    ("config/delayOffset.json", "offsetTable/x", '"x"'),
                    ("config/topics.json", f"topicConfigTable/{first}/readQueueNums", str(2**40))}, keys
    assert all(f["severity"] == "error" and f["message"] for f in out_of_range)
    lag = [r for r in rows(tmp_path / "out", "tables/lag") if r["broker"] == "bad-config"]
    assert lag and all(r["offset"] is not None for r in lag)  # the file's other offsets are used
    unreadable = {f["file"]: f["details"]["reason"] for f in findings if f["check"] == "metadata.store_file_unreadable"}
    assert {f["broker"] for f in findings if f["check"] == "metadata.store_file_unreadable"} == {"special"}
    assert set(unreadable) == set(made.values()), unreadable
    assert unreadable[made["segment"]] == "a FIFO, not a regular file" and "socket" in unreadable[made["index"]]
    assert "character device" in unreadable[made["queue_file"]] and "loop" in unreadable[made["loop"]]
    # the clean broker: what an audit of it alone finds
    alone = audit.run(spark, audit_args([fixture_store("basic")], tmp_path / "alone", no_report=True))
    mine = sorted((f["check"], f["file"], f["file_position"]) for f in findings if f["broker"] == "clean")
    assert mine == sorted((f["check"], f["file"], f["file_position"]) for f in rows(tmp_path / "alone", "findings"))
    assert alone.exit_code == 0


def test_the_rate_plot_stays_meaningful_for_a_store_spanning_under_a_second():
    """A store whose messages span 300 ms is counted per millisecond and drawn as a rate over about 60 buckets
    of 5 ms (not one point, nor one bucket of a second); every message in one millisecond is a bar per topic."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    import pyarrow as pa

    from jobs.audit.checks.rates import rate_plot, unit_for

    class Keep:  # the real pyplot, keeping the axes drawn on
        def subplots(self, *a, **k):
            fig, self.ax = plt.subplots(*a, **k)
            return fig, self.ax

    def table(counts: dict) -> pa.Table:  # message_rate's table of {(topic, time): messages}
        return pa.table({"topic": [k[0] for k in counts], "time": pa.array([k[1] for k in counts], pa.int64()),
                         "messages": pa.array(list(counts.values()), pa.int64())})

    t0 = 1_700_000_000_123
    assert unit_for(299) == 1 and unit_for(5_000) == 1_000 and unit_for(10**8) == 60_000
    counts = {("A", t0 + i): 1 for i in range(0, 300, 3)} | {("B", t0 + 150): 4}
    keep = Keep()
    title, fig = rate_plot(keep, 1, table(counts))
    assert title == "Message rate over time per topic" and fig is not None
    assert keep.ax.get_xlabel() == "seconds since 2023-11-14T22:13:20.123Z (0.005 s buckets)"
    lines = {line.get_label(): line for line in keep.ax.get_lines()}
    assert sorted(lines) == ["A", "B"] and len(lines["A"].get_xdata()) == 60
    assert max(lines["A"].get_ydata()) == 2 / 0.005 and max(lines["B"].get_ydata()) == 4 / 0.005
    title, _ = rate_plot(keep, 1, table({("A", t0): 7, ("B", t0): 2}))
    assert title.startswith("Messages per topic") and [p.get_width() for p in keep.ax.patches] == [7, 2]
    assert keep.ax.get_xlabel() == "messages (all stored within 1 ms of 2023-11-14T22:13:20.123Z)"
    plt.close("all")


def test_an_audit_of_kept_records_whose_store_times_no_calendar_holds_writes_its_report(spark, basic_copy, tmp_path):
    """Two records' STORETIMESTAMP set to a long's ends (a damaged field the broker keeps: the record's CRC covers its
    body only): the audit ends and writes its report (the rate plot's start failed it: "year -292275055 is out of
    range")."""
    import struct

    root, _ = basic_copy
    seg = sorted((root / "commitlog").iterdir())[0]
    with open(seg, "r+b") as f:
        first = struct.unpack(">i", f.read(4))[0]
        for at, value in ((0, -(1 << 63)), (first, (1 << 63) - 1)):  # STORETIMESTAMP at 56 (an IPv4 born host)
            f.seek(at + 36)
            assert struct.unpack(">i", f.read(4))[0] & 0x10 == 0  # BORNHOST_V6_FLAG clear
            f.seek(at + 56)
            f.write(struct.pack(">q", value))
    result = audit.run(spark, audit_args([root], tmp_path / "out"))
    assert result.exit_code == 0 and (tmp_path / "out" / "report.html").stat().st_size > 0

@pytest.mark.parametrize("damaged", [False, True], ids=["plain", "a-time-near-a-longs-end"])
def test_the_message_rate_is_every_ranges_counts_merged(damaged):
    """message_rate (in Arrow) merges the ranges' counts as the row-at-a-time loop it replaced did: counts per
    second and per minute in the coarsest unit the whole span allows, a topic's counts in one unit summed (and a
    count at a store time near a long's end, a damaged record the broker kept, in Python's integers); rate_plot
    draws the 8 busiest topics and "(other)", each bucket the sum of its counts, and says when they start."""
    import random
    from types import SimpleNamespace

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import pyarrow as pa

    from jobs.audit.checks.rates import RATE, message_rate, rate_plot, unit_for

    rnd = random.Random(7)
    t0 = 1_700_000_000_000
    rows = [{"topic": f"T{rnd.randrange(12)}", "unit": u, "time": (t0 + rnd.randrange(3 * 3_600_000)) // u,
             "messages": rnd.randrange(1, 50)} for u in (1_000, 60_000) for _ in range(400)]
    if damaged:
        rows.append({"topic": "T3", "unit": 60_000, "time": -(1 << 63) // 60_000, "messages": 3})  # past a long
    unit, t = message_rate(SimpleNamespace(partial=lambda name, schema: pa.Table.from_pylist(rows, schema=RATE)))
    lo = min(r["time"] * r["unit"] for r in rows)
    hi = max((r["time"] + 1) * r["unit"] - 1 for r in rows)
    assert unit == max(max(r["unit"] for r in rows), unit_for(hi - lo)) == 60_000
    merged: dict = {}
    for r in rows:
        key = (r["topic"], r["time"] * r["unit"] // unit)
        merged[key] = merged.get(key, 0) + r["messages"]
    assert dict(zip(zip(t.column("topic").to_pylist(), t.column("time").to_pylist()),
                    t.column("messages").to_pylist())) == merged
    class Keep:  # the real pyplot, keeping the axes drawn on
        def subplots(self, *a, **k):
            fig, self.ax = plt.subplots(*a, **k)
            return fig, self.ax

    keep = Keep()
    rate_plot(keep, unit, t)
    ax = keep.ax
    totals: dict = {}
    for (topic, _), n in merged.items():
        totals[topic] = totals.get(topic, 0) + n
    busiest = sorted(totals, key=lambda x: (-totals[x], x))[:8]
    first, last_time = min(k for _, k in merged), max(k for _, k in merged)
    width = max(1, -(-(last_time - first + 1) // 60))
    drawn = {line.get_label(): [round(y * width * unit / 1000, 6) for y in line.get_ydata()] for line in ax.get_lines()}
    expected: dict = {}
    for (topic, k), n in merged.items():
        b = expected.setdefault(topic if topic in busiest else "(other)", [0] * ((last_time - first) // width + 1))
        b[(k - first) // width] += n
    assert drawn == expected and "(other)" in drawn and len(drawn) == 9
    # a time no calendar holds is said in milliseconds (it failed the audit: "year ... is out of range")
    assert ax.get_xlabel().startswith("seconds since -9223372036854780000 ms (" if damaged else
                                      "seconds since 2023-11-14T22:")
    plt.close("all")
