"""jobs.query: every fixture message found by msgId, by each key and by its unique key (RocketMQ's own
indexQueries as the reference, verified, no 64 cap); scans; --explain's reasons; bad input."""
from __future__ import annotations

import base64
import io
import json
import shutil
import subprocess
import sys

import pytest

from jobs import extract, query
from store_format.write import damage
from store_format import ids
from store_format.ids import create_uniq_key
from store_format.message import Message
from store_format.properties import format_properties
from store_format.store import Store
from store_format.write.writer import StoreWriter, WriterConfig

from .conftest import FIXTURES, REPO, fixture_manifest, fixture_store


def ask(*argv, spark=None):
    """(exit code, message lines, explain lines, stderr) of one query run in-process."""
    out, err = io.StringIO(), io.StringIO()
    args = query.build_parser().parse_args([str(a) for a in argv])
    code = query.run(spark, args, out=out, err=err).exit_code
    lines = [json.loads(x) for x in out.getvalue().splitlines()]
    return (code, [x for x in lines if x["kind"] == "message"], [x for x in lines if x["kind"] == "explain"],
            err.getvalue())


# --------------------------------------------------------------------------------------------------
# The fixtures: RocketMQ's own index queries, verified


def test_every_index_query_of_the_fixtures_gives_rocketmqs_verified_offsets(fixture):
    name, root, manifest = fixture
    for q in manifest["indexQueries"]:
        code, msgs, _, _ = ask("--store", root, "--topic", q["topic"], "--key", q["key"])
        assert code == 0, q
        assert sorted(m["physical_offset"] for m in msgs) == sorted(set(q["expectedOffsets"])), q
        assert all(m["topic"] == q["topic"] and (q["key"] in m["keys"] or q["key"] == m["uniq_key"]) for m in msgs)


def test_every_fixture_message_is_found_by_msg_id_each_key_and_uniq_key(fixture):
    name, root, manifest = fixture
    indexed = {(q["topic"], q["key"]) for q in manifest["indexQueries"]}
    for exp in manifest["messages"]:
        code, msgs, _, _ = ask("--store", root, "--msg-id", exp["msgId"])
        assert code == 0 and [m["physical_offset"] for m in msgs] == [exp["commitLogOffset"]]
        assert msgs[0]["body"] == exp["body"] and msgs[0]["properties_raw"] == exp["propertiesString"]
        keys = [k for k in (exp["keys"] or "").split(" ") if k]
        for key in keys:
            _, msgs, _, _ = ask("--store", root, "--topic", exp["topic"], "--key", key)
            if exp["tranType"] == "ROLLBACK":  # never indexed (IndexService.buildIndex), as RocketMQ says too
                assert exp["commitLogOffset"] not in [m["physical_offset"] for m in msgs]
                continue
            assert (exp["topic"], key) in indexed
            assert exp["commitLogOffset"] in [m["physical_offset"] for m in msgs], (exp["msgId"], key)
        if exp["uniqKey"] and exp["tranType"] != "ROLLBACK":
            _, msgs, _, _ = ask("--store", root, "--uniq-key", exp["uniqKey"])
            found = {m["physical_offset"] for m in msgs}
            assert exp["commitLogOffset"] in found and all(m["uniq_key"] == exp["uniqKey"] for m in msgs)
            # every copy of the message (schedule, retry, half, commit...) carries the id and is found
            copies = {x["commitLogOffset"] for x in manifest["messages"] if x["uniqKey"] == exp["uniqKey"]
                      and x["tranType"] != "ROLLBACK"}
            assert found == copies, exp["msgId"]


def test_several_stores_at_once_each_answers_for_its_own_records():
    basic, broker = fixture_manifest("basic"), fixture_manifest("broker")
    stores = ["--store", fixture_store("basic"), "--store", fixture_store("broker")]
    for name, manifest in (("basic", basic), ("broker", broker)):
        exp = manifest["messages"][3]
        code, msgs, _, _ = ask(*stores, "--msg-id", exp["msgId"])
        assert code == 0 and [(m["broker"], m["physical_offset"]) for m in msgs] == [(name, exp["commitLogOffset"])]


def small_store(root, n=100, key="order-4711", extra=()):
    """A writer-built store where ``n`` messages share KEYS ``key`` (more than mqadmin's 64), with index files
    small enough to roll over; ``extra`` (topic, KEYS) records follow."""
    cfg = WriterConfig(mappedFileSizeCommitLog=1 << 20, mappedFileSizeConsumeQueue=400, maxHashSlotNum=64,
                       maxIndexNum=256, storeHost="10.0.0.1:10911")
    t0 = 1_700_000_000_000
    with StoreWriter(root, cfg) as w:
        stored = []
        for i, (topic, keys) in enumerate([("Orders", f"{key} item-{j}") for j in range(n)] + list(extra)):
            uniq = create_uniq_key(bytes([10, 0, 0, 9]), 77, 1, t0 + i, i)
            props = format_properties({"KEYS": keys, "UNIQ_KEY": uniq, "TAGS": "TagA" if i % 2 else "TagB"})
            stored.append(w.append(Message(topic=topic, body=f"body {i}".encode(), queue_id=i % 4,
                                           properties_raw=props, born_timestamp=t0 + i, store_timestamp=t0 + i,
                                           born_host="10.0.0.9:5000", store_host=cfg.storeHost)))
    return stored


def test_key_queries_have_no_64_result_cap(tmp_path):
    stored = small_store(tmp_path / "s", n=100)
    assert len(list((tmp_path / "s" / "index").iterdir())) >= 2  # the entries span several index files
    code, msgs, _, _ = ask("--store", tmp_path / "s", "--topic", "Orders", "--key", "order-4711")
    assert code == 0 and [m["physical_offset"] for m in msgs] == [s.physical_offset for s in stored]


# --------------------------------------------------------------------------------------------------
# Scans: here (small stores, jobs/local_scan.py) and by Spark (large ones), held to the same answers


@pytest.fixture(params=["here", "spark"])
def where(request, monkeypatch):
    """Scans made in this process (every test store is small), or by Spark (as for a store past the limit)."""
    from jobs import local_scan

    if request.param == "spark":
        monkeypatch.setattr(local_scan, "LOCAL_SCAN_BYTES", -1)
    return request.param


def test_time_range_and_tag_scans(spark, where):
    manifest, root = fixture_manifest("basic"), fixture_store("basic")
    ts = sorted(m["storeTimestamp"] for m in manifest["messages"])
    lo, hi = ts[10], ts[40]
    code, msgs, _, _ = ask("--store", root, "--from", lo, "--to", hi, spark=spark)
    assert code == 0
    assert [m["physical_offset"] for m in msgs] == [m["commitLogOffset"] for m in manifest["messages"]
                                                     if lo <= m["storeTimestamp"] <= hi]
    assert msgs[0]["body"] == next(m["body"] for m in manifest["messages"] if m["commitLogOffset"] ==
                                   msgs[0]["physical_offset"])
    code, msgs, _, _ = ask("--store", root, "--topic", "TopicTest", "--tag", "TagB", spark=spark)
    assert code == 0 and [m["physical_offset"] for m in msgs] == [
        m["commitLogOffset"] for m in manifest["messages"] if m["topic"] == "TopicTest" and m["tags"] == "TagB"]


# --------------------------------------------------------------------------------------------------
# --explain


def test_explain_hash_collision_and_stale_entry_then_scan(spark, tmp_path):
    """'Aa' and 'BB' have the same Java hash: a query for BB finds only the Aa record as a candidate, and the
    fallback scan finds neither key anywhere: never written.  An index entry for 'ghost' points past the end of the
    records (as a record that never reached the disk leaves behind): the index refers to it, so it is not 'never
    written' but destroyed."""
    small_store(tmp_path / "s", n=3, extra=[("Orders", "Aa")])
    damage.stale_index_entry(tmp_path / "s", tmp_path / "d", topic="Orders", key="ghost")
    code, msgs, why, _ = ask("--store", tmp_path / "d", "--topic", "Orders", "--key", "BB", "--explain", spark=spark)
    assert code == 1 and msgs == []
    assert [e["reason"] for e in why] == ["HASH_COLLISION", "HASH_COLLISION_ONLY", "NEVER_WRITTEN"]
    assert "KEYS ['Aa']" in why[0]["detail"]
    code, msgs, why, _ = ask("--store", tmp_path / "d", "--topic", "Orders", "--key", "ghost", "--explain",
                             spark=spark)
    assert code == 1 and [e["reason"] for e in why] == ["DESTROYED"]
    assert "the index still points at it for Orders#ghost" in why[0]["detail"]
    assert "the record never reached the disk, or its bytes were zeroed" in why[0]["detail"]


def test_explain_a_record_past_damage_is_found_by_the_salvage_scan(spark, where, basic_copy, tmp_path):
    """Recovery stops at a bad CRC; with the index gone, the record after it is found only by the scan,
    behind the damage, and the broker's recovery would drop it."""
    root, manifest = basic_copy
    msgs_ = manifest["messages"]
    bad, after = msgs_[40], msgs_[41]
    damage.bad_crc(root, tmp_path / "d", physical_offset=bad["commitLogOffset"])
    shutil.rmtree(tmp_path / "d" / "index")
    key = [k for k in after["keys"].split(" ") if k][0]
    code, msgs, why, _ = ask("--store", tmp_path / "d", "--topic", after["topic"], "--key", key, "--explain",
                             spark=spark)
    assert code == 0 and [m["physical_offset"] for m in msgs] == [after["commitLogOffset"]]
    assert base64.b64decode(msgs[0]["body"]) == base64.b64decode(after["body"])
    reasons = {e["reason"] for e in why}
    assert {"NO_INDEX", "BEHIND_DAMAGE", "DROPPED_BY_RECOVERY"} <= reasons
    dropped = next(e for e in why if e["reason"] == "DROPPED_BY_RECOVERY")
    assert dropped["physical_offset"] == after["commitLogOffset"]
    assert f"ends the log at physical offset {bad['commitLogOffset']}, at the BAD_CRC" in dropped["detail"]


def test_explain_msg_ids_that_name_no_record(spark, where):
    manifest, root = fixture_manifest("basic"), fixture_store("basic")
    first = manifest["messages"][0]
    inside = first["msgId"][:-4] + f"{first['commitLogOffset'] + 10:04X}"
    code, msgs, why, _ = ask("--store", root, "--msg-id", inside, "--explain", spark=spark)
    assert code == 1 and [e["reason"] for e in why] == ["NOT_A_RECORD_START"]
    assert f"inside the message at {first['commitLogOffset']}" in why[0]["detail"]
    beyond = first["msgId"][:16] + f"{1 << 40:016X}"
    code, _, why, _ = ask("--store", root, "--msg-id", beyond, "--explain")
    assert code == 1 and [e["reason"] for e in why] == ["OUT_OF_RANGE"]
    other_host = "0A0B0C0D" + first["msgId"][8:]
    code, _, why, _ = ask("--store", root, "--msg-id", other_host, "--explain")
    assert code == 1 and [e["reason"] for e in why] == ["OTHER_STORE_HOST", "OTHER_STORE_HOST"]
    assert first["msgId"] in why[1]["detail"]
    code, msgs, why, _ = ask("--store", root, "--msg-id", first["msgId"], "--explain")
    assert code == 0 and [e["reason"] for e in why] == ["FOUND"]


def test_explain_outside_the_index_time_window(spark, tmp_path):
    stored = small_store(tmp_path / "s", n=5)
    later = stored[-1].store_timestamp + 3_600_000
    code, msgs, why, _ = ask("--store", tmp_path / "s", "--topic", "Orders", "--key", "item-2", "--from", later,
                             "--explain", spark=spark)
    assert code == 1 and msgs == []
    assert [e["reason"] for e in why] == ["OUTSIDE_INDEX_WINDOW", "NOT_IN_TIME_WINDOW"]
    with pytest.raises(query.UsageError):
        ask("--store", tmp_path / "s", "--topic", "Orders", "--key", "item-2", "--from", later, "--to", 0)


def test_time_scans_skip_segments_outside_the_range(spark, where, tmp_path):
    """Store times grow segment by segment: a range inside the last segments reads only those files."""
    cfg = WriterConfig(mappedFileSizeCommitLog=2048, mappedFileSizeConsumeQueue=400, maxHashSlotNum=16,
                       maxIndexNum=64)
    t0 = 1_700_000_000_000
    with StoreWriter(tmp_path / "s", cfg) as w:
        stored = [w.append(Message(topic="Orders", body=bytes(300), queue_id=0, born_timestamp=t0 + i * 1000,
                                   store_timestamp=t0 + i * 1000)) for i in range(20)]
    segments = sorted({m.segment for m in stored})
    assert len(segments) >= 4
    lo, hi = stored[-6].store_timestamp, stored[-3].store_timestamp
    needed = {m.segment for m in stored if lo <= m.store_timestamp <= hi}
    before = segments[segments.index(min(needed)) - 1]  # kept too when its successor starts exactly at lo
    kept = set(extract.segments_in_time_range(Store(tmp_path / "s"), lo, hi))
    assert needed <= kept <= needed | {before} and len(kept) < len(segments)
    code, msgs, _, _ = ask("--store", tmp_path / "s", "--from", lo, "--to", hi, spark=spark)
    assert code == 0 and [m["physical_offset"] for m in msgs] == [m.physical_offset for m in stored[-6:-2]]


# --------------------------------------------------------------------------------------------------
# Bad input, through main()


@pytest.mark.parametrize("argv, says", [
    (["--msg-id", "XYZ"], "--msg-id 'XYZ'"),
    (["--msg-id", "C0A8000A00002A9F00000000000000"], "32 or 56 hex characters"),
    (["--uniq-key", "not-an-id"], "--topic T --key K"),
    (["--topic", "TopicTest", "--key", "two words"], "no space"),
    (["--key", "k"], "--key needs --topic"),
    (["--tag", "TagA"], "--tag needs --topic"),
    ([], "say what to find"),
    (["--from", "yesterday"], None),  # argparse: not a time
])
def test_bad_input_is_a_clear_message_and_exit_2(argv, says, capsys):
    try:
        code = query.main(["--store", str(fixture_store("basic")), *argv])
    except SystemExit as e:  # argparse's own errors
        code = e.code
    err = capsys.readouterr().err
    assert code == 2
    assert (says or "is not a time") in err


def test_a_time_range_and_an_explained_miss_on_a_small_store_start_no_spark(monkeypatch, capsys):
    """What a person asks at a prompt answers in seconds: a time range, a tag, and --explain for a key found
    nowhere (its salvage scan) read a small store here; no Spark session is started."""
    import runtime.session

    def refuse(*args, **kwargs):
        raise AssertionError("a Spark session was started for a small store")

    monkeypatch.setattr(runtime.session, "build_session", refuse)
    root = FIXTURES / "recovered-zero-page" / "input" / "store"
    assert query.main(["--store", str(root), "--from", "2030-01-01T00:00Z", "--to", "2030-01-02T00:00Z"]) == 1
    assert "0 message(s) found" in capsys.readouterr().err
    assert query.main(["--store", str(root), "--topic", "RandA", "--key", "no-such-key", "--explain"]) == 1
    assert '"reason": "NEVER_WRITTEN"' in capsys.readouterr().out
    assert query.main(["--store", str(root), "--from", "0", "--to", "9999999999999", "--limit", "3",
                       "--format", "table"]) == 0
    assert len(capsys.readouterr().out.splitlines()) == 4  # the header and three messages


def test_python_m_jobs_query_runs_without_spark():
    exp = fixture_manifest("basic")["messages"][5]
    r = subprocess.run([sys.executable, "-m", "jobs.query", "--store", str(fixture_store("basic")), "--msg-id",
                        exp["msgId"]], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["physical_offset"] == exp["commitLogOffset"]
    assert "SparkContext" not in r.stderr and "1 message(s) found" in r.stderr


def test_main_exit_codes_and_table_format(capsys):
    root = str(fixture_store("broker"))
    exp = fixture_manifest("broker")["messages"][0]
    assert query.main(["--store", root, "--msg-id", exp["msgId"], "--format", "table"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].split()[:3] == ["broker", "physical_offset", "store_time"] and exp["msgId"] in out[1]
    assert query.main(["--store", root, "--topic", exp["topic"], "--key", "no-such-key"]) == 1
    assert query.main(["--store", "/no/such/dir", "--msg-id", exp["msgId"]]) == 2
    assert "no such file" in capsys.readouterr().err


# --------------------------------------------------------------------------------------------------
# --explain from all the evidence: what the index and the consume queue still point at (issue 37)

ZERO_PAGE = FIXTURES / "recovered-zero-page"


def test_explain_a_record_a_zeroed_page_destroyed_says_destroyed_not_never_written():
    """recovered-zero-page (written by RocketMQ 4.9.7, crashed, then a page zeroed): the page destroyed the header of
    one RandB record and the tail of the one before it.  The index and the consume queue still point at both: explain
    says DESTROYED and DAMAGED, with the queue offset, the position and the zeros, never NEVER_WRITTEN; so does a msg
    id of the destroyed record."""
    manifest = json.loads((ZERO_PAGE / "manifest.json").read_text())
    zeroed = manifest["damage"]
    damaged, destroyed = (m["commitLogOffset"] for m in zeroed["messagesOverlappingZeroedPage"])
    root = ZERO_PAGE / "input" / "store"
    store = Store(root)
    units = {u.physical_offset: (q, u.queue_offset) for (t, q) in store.queues if t == "RandB"
             for u in store.consume_queue(t, q)}
    zeros = f"from {zeroed['zeroedFrom']} to {zeroed['zeroedFrom'] + zeroed['zeroedLen']} ({zeroed['zeroedLen']} bytes)"
    for offset, reason in ((destroyed, "DESTROYED"), (damaged, "DAMAGED")):
        [key] = [q["key"] for q in manifest["indexQueriesForDroppedMessages"]
                 if q["topic"] == "RandB" and q["offsetsBeforeDamage"] == [offset]][:1]
        code, msgs, why, _ = ask("--store", root, "--topic", "RandB", "--key", key, "--explain")
        assert code == 1 and msgs == [] and [e["reason"] for e in why] == [reason], why
        queue_id, queue_offset = units[offset]
        assert why[0]["physical_offset"] == offset
        assert f"RandB/{queue_id} queue offset {queue_offset} (physical offset {offset}, segment" in \
            why[0]["detail"] and zeros in why[0]["detail"]
        assert "the index still points at it" in why[0]["detail"]
        assert "and so does the consume queue" in why[0]["detail"]
        assert f"its abnormal recovery ends the log at physical offset {damaged}" in why[0]["detail"]
    [first] = [m for m in store.messages() if m.physical_offset == 0]
    msg_id = ids.create_offset_msg_id(*ids.parse_host(first.store_host), destroyed)
    code, msgs, why, _ = ask("--store", root, "--msg-id", msg_id, "--explain")
    assert code == 1 and [e["reason"] for e in why] == ["DESTROYED"] and zeros in why[0]["detail"]
    assert why[0]["detail"].startswith("RandB/{} queue offset {}".format(*units[destroyed]))


def _tagged_store(root, tag="Late"):
    """Twenty messages over segments of 2 KiB (clean shutdown); the last eight carry TAGS ``tag``."""
    cfg = WriterConfig(mappedFileSizeCommitLog=2048, mappedFileSizeConsumeQueue=400, maxHashSlotNum=16,
                       maxIndexNum=64)
    t0 = 1_700_000_000_000
    with StoreWriter(root, cfg) as w:
        return [w.append(Message(topic="Orders", body=bytes(300), queue_id=0, born_timestamp=t0 + i * 1000,
                                 store_timestamp=t0 + i * 1000,
                                 properties_raw=format_properties({"TAGS": tag if i >= 12 else "Early"})))
                for i in range(20)]


def test_tag_and_time_queries_past_a_bad_magic_return_what_the_broker_keeps_and_explain_the_rest(spark, where,
                                                                                                  tmp_path):
    """A bad magic in the segments the broker's recovery walks: it cuts the log there.  A tag or time query returns
    what the broker keeps (nothing of the later messages, in that segment or the next); with --explain the salvage
    walk frames them, each DROPPED_BY_RECOVERY, as --uniq-key would say."""
    stored = _tagged_store(tmp_path / "s")
    bad = stored[11]
    damage.bad_magic(tmp_path / "s", tmp_path / "d", physical_offset=bad.physical_offset)
    late = [m for m in stored if m.physical_offset > bad.physical_offset]
    assert len({m.segment for m in late}) >= 2
    window = ("--from", late[0].store_timestamp, "--to", late[-1].store_timestamp)
    for argv in (("--topic", "Orders", "--tag", "Late"), window):
        code, msgs, why, _ = ask("--store", tmp_path / "d", *argv, spark=spark)
        assert (code, msgs, why) == (1, [], [])
        code, msgs, why, _ = ask("--store", tmp_path / "d", *argv, "--explain", spark=spark)
        assert code == 0 and [m["physical_offset"] for m in msgs] == [m.physical_offset for m in late], argv
        dropped = [e for e in why if e["reason"] == "DROPPED_BY_RECOVERY"]
        assert [e["physical_offset"] for e in dropped] == [m.physical_offset for m in late]
        assert f"ends the log at physical offset {bad.physical_offset}, at the BAD_MAGIC" in dropped[0]["detail"]


def test_a_tag_whose_records_are_destroyed_is_explained_by_the_consume_queue(spark, tmp_path):
    """The records of a tag lie under a zeroed page: no walk frames them, but the consume queue's units carry the
    tag's hash and still point at them: DESTROYED, with their queue offsets; an unknown tag is never written."""
    stored = _tagged_store(tmp_path / "s", tag="Gone")
    victim = stored[14]
    damage.zero_page(tmp_path / "s", tmp_path / "d", physical_offset=victim.physical_offset)
    code, msgs, why, _ = ask("--store", tmp_path / "d", "--topic", "Orders", "--tag", "Gone", "--explain")
    found = {m["physical_offset"] for m in msgs}
    destroyed = [e for e in why if e["reason"] == "DESTROYED"]
    assert victim.physical_offset not in found and victim.physical_offset in {e["physical_offset"] for e in destroyed}
    [e] = [e for e in destroyed if e["physical_offset"] == victim.physical_offset]
    assert f"Orders/0 queue offset {victim.queue_offset}" in e["detail"] and "the hash of tag Gone" in e["detail"]
    code, msgs, why, _ = ask("--store", tmp_path / "d", "--topic", "Orders", "--tag", "Never", "--explain")
    assert code == 1 and [e["reason"] for e in why] == ["NEVER_WRITTEN"]


def test_the_table_shows_a_binary_body_as_what_it_is(tmp_path, capsys):
    """A body that is not printable UTF-8 is not printed as mojibake: the table says it is binary and shows its first
    bytes in hex; text stays text."""
    cfg = WriterConfig(mappedFileSizeCommitLog=1 << 20, storeHost="10.0.0.1:10911")
    with StoreWriter(tmp_path / "s", cfg) as w:
        for body in (bytes(range(256)), "héllo wörld".encode()):
            w.append(Message(topic="Bin", body=body, queue_id=0, born_timestamp=1_700_000_000_000,
                             store_timestamp=1_700_000_000_000))
    assert query.main(["--store", str(tmp_path / "s"), "--from", "0", "--to", "9999999999999", "--format",
                       "table"]) == 0
    rows = capsys.readouterr().out.splitlines()
    assert rows[1].endswith("<binary, 256 bytes: 0001020304050607...>") and rows[2].endswith("héllo wörld")
    assert query.body_preview(b"\xe2\x82", "NONE") == "<binary, 2 bytes: e282>"  # a UTF-8 sequence cut short
    assert query.body_preview(b"x" * 40, "ZLIB") == "<ZLIB-compressed, 40 bytes>"


def test_a_record_found_by_its_key_whose_body_fails_the_crc_is_said_to_be_damaged(basic_copy, tmp_path):
    """The index names the record and a lookup reads it, whatever its body CRC: --explain says it is damaged (the
    body printed is not the one sent) and that the broker's recovery, which cuts there, drops it."""
    root, manifest = basic_copy
    bad = manifest["messages"][40]
    damage.flip_body_bit(root, tmp_path / "d", physical_offset=bad["commitLogOffset"], bit=3)
    code, msgs, why, _ = ask("--store", tmp_path / "d", "--topic", bad["topic"], "--key", bad["uniqKey"], "--explain")
    assert code == 0 and [m["physical_offset"] for m in msgs] == [bad["commitLogOffset"]]
    assert [e["reason"] for e in why] == ["DAMAGED", "DROPPED_BY_RECOVERY"]
    assert f"{bad['topic']}/{bad['queueId']} queue offset {bad['queueOffset']}: its body fails the CRC check" in \
        why[0]["detail"]


def test_a_time_window_whose_messages_a_zeroed_page_destroyed_is_explained_by_the_damage_there(tmp_path):
    """A page of zeros over records stored within the window: no walk frames them, so --explain names the damaged
    bytes between the records stored around the window and the consume-queue units still pointing into them
    (DESTROYED), where before it found nothing and said nothing."""
    cfg = WriterConfig(mappedFileSizeCommitLog=64 << 10, mappedFileSizeConsumeQueue=4000)
    t0 = 1_700_000_000_000
    with StoreWriter(tmp_path / "s", cfg) as w:
        stored = [w.append(Message(topic="Orders", body=bytes(300), queue_id=0, born_timestamp=t0 + i * 1000,
                                   store_timestamp=t0 + i * 1000)) for i in range(60)]
    page = 8192  # the third page: its records are destroyed whole, and the ones around it stay
    damage.zero_page(tmp_path / "s", tmp_path / "d", physical_offset=page)
    inside = [m for m in stored if m.physical_offset >= page and m.physical_offset + m.store_size <= page + 4096]
    assert len(inside) >= 3
    lo, hi = inside[0].store_timestamp, inside[-1].store_timestamp
    code, msgs, why, _ = ask("--store", tmp_path / "d", "--from", lo, "--to", hi, "--explain")
    assert code == 1 and msgs == [] and [e["reason"] for e in why] == ["DESTROYED"]
    assert "lie between a record stored at" in why[0]["detail"]
    assert f"Orders/0 queue offset {inside[0].queue_offset}" in why[0]["detail"]
    assert "the broker's recovery drops them" in why[0]["detail"]  # the zeros end its walk: the cut is there
