"""jobs.extract and jobs.replay: store -> extract -> replay -> read back gives the same messages; "not yet
consumed by G" on a writer-built store; de-duplication and decompression; repair of a damaged store;
counts that reconcile; outputs that must not be written."""
from __future__ import annotations

import base64
import io
import json
from collections import Counter
from pathlib import Path

import pytest

from jobs import extract, replay
from runtime.output import OutputError
from runtime.stores import resolve_stores
from store_format.write import damage
from store_format import layout as L
from store_format.write.broker import Broker, ManualClock, Producer
from store_format.config import consumer_offsets
from store_format.properties import parse_properties
from store_format.recovery import predict_recovery
from store_format.store import Store
from store_format.write.writer import StoreWriter, WriterConfig

from .conftest import fixture_manifest, fixture_store


def run_extract(spark, *argv):
    err = io.StringIO()
    code = extract.run(spark, extract.build_parser().parse_args([str(a) for a in argv]), err=err).exit_code
    return code, err.getvalue()


def run_replay(spark, *argv):
    """The replay's machine output (--format json): its summary (and a dry run's plan) as JSON Lines."""
    out, err = io.StringIO(), io.StringIO()
    args = replay.build_parser().parse_args([str(a) for a in argv] + ["--format", "json"])
    code = replay.run(spark, args, out=out, err=err).exit_code
    return code, [json.loads(x) for x in out.getvalue().splitlines()], err.getvalue()


def manifest_of(path: Path) -> dict:
    return json.loads((path / extract.MANIFEST_NAME).read_text())


def jsonl_rows(path: Path) -> list[dict]:
    """An extract's JSON Lines, part files in name order (the order Spark wrote them)."""
    return [json.loads(line) for f in sorted(path.glob("part-*.json")) for line in f.read_text().splitlines()]


def origin(msg) -> dict:
    props = parse_properties(msg.properties_raw)
    return {k: props.get(k) for k in replay.TRACE_PROPERTIES}


# --------------------------------------------------------------------------------------------------
# Round trip


def test_store_extract_replay_read_back_gives_the_same_messages(spark, tmp_path):
    manifest, root = fixture_manifest("basic"), fixture_store("basic")
    ex, new = tmp_path / "extract", tmp_path / "new"
    code, _ = run_extract(spark, "--store", root, "--out", ex, "--format", "parquet")
    assert code == 0
    counts = manifest_of(ex)["counts"]
    assert counts == {"selected": 85, "written": 85, "rejected": 0, "rejected_by_reason": {}, "missing_in_holes": 0,
                      "adds_up": True, "reconciled": True}  # RocketMQ's own queues: no hole where there is none
    [broker] = manifest_of(ex)["brokers"]
    cut = predict_recovery(Store(root)).cut
    assert manifest_of(ex)["walk"]["name"] == "kept" and broker["cut"] == cut.as_dict() and cut.kind == "END_OF_DATA"
    assert (broker["intact_past_cut"], broker["intact_past_damage"]) == (0, 0)
    code, lines, _ = run_replay(spark, "--input", ex, "--out", new)
    assert code == 0 and lines[-1]["counts"]["written"] == 85 and lines[-1]["counts"]["reconciled"]

    store = Store(new)
    got = list(store.messages())
    by_origin = {origin(m)[replay.TRACE_MSG_ID]: m for m in got}
    assert [origin(m)[replay.TRACE_MSG_ID] for m in got] == [x["msgId"] for x in manifest["messages"]]
    for exp in manifest["messages"]:
        m = by_origin[exp["msgId"]]
        assert origin(m) == {replay.TRACE_MSG_ID: exp["msgId"], replay.TRACE_BROKER: "basic",
                             replay.TRACE_QUEUE_OFFSET: str(exp["queueOffset"])}
        assert m.body == base64.b64decode(exp["body"])
        assert m.properties_raw.startswith(exp["propertiesString"])  # the stored string, then the trace
        assert {k: v for k, v in m.properties.items() if k not in replay.TRACE_PROPERTIES} == exp["properties"]
        assert " ".join(m.keys) == " ".join(k for k in (exp["keys"] or "").split(" ") if k)
        assert (m.topic, m.queue_id, m.flag, m.sys_flag, m.born_timestamp, m.born_host, m.store_timestamp,
                m.store_host, m.reconsume_times) == (exp["topic"], exp["queueId"], exp["flag"], exp["sysFlag"],
                                                     exp["bornTimestamp"], exp["bornHost"], exp["storeTimestamp"],
                                                     exp["storeHost"], exp["reconsumeTimes"])
        if exp["preparedTransactionOffset"]:  # points at the same (replayed) half / PREPARED record
            target = store.read_message(m.prepared_transaction_offset)
            assert origin(target)[replay.TRACE_MSG_ID] == next(
                x["msgId"] for x in manifest["messages"] if x["commitLogOffset"] == exp["preparedTransactionOffset"])
    # order per queue: the rebuilt consume queues list the same records in the same order
    msg_id_at = {x["commitLogOffset"]: x["msgId"] for x in manifest["messages"]}
    for cq in manifest["consumeQueues"]:
        theirs = [msg_id_at[e[1]] for e in cq["entries_[queueOffset,commitLogOffset,size,tagsCode]"]]
        ours = [origin(store.read_message(u.physical_offset))[replay.TRACE_MSG_ID]
                for u in store.consume_queue(cq["topic"], cq["queueId"])]
        assert ours == theirs, (cq["topic"], cq["queueId"])
    # the rebuilt index answers RocketMQ's own queries with the same records
    for q in manifest["indexQueries"]:
        ours = {origin(m)[replay.TRACE_MSG_ID] for m in store.query_key(q["topic"], q["key"])}
        assert ours == {msg_id_at[o] for o in q["expectedOffsets"]}, q
    # a complete store, shut down cleanly: the broker would recover it normally with nothing dropped
    assert not (new / "abort").exists() and (new / "checkpoint").is_file()
    assert (new / "config" / "topics.json").is_file()
    pred = predict_recovery(store)
    assert pred.mode == "normal" and pred.will_start and not pred.dropped_messages
    assert pred.max_physical_offset == got[-1].physical_offset + got[-1].store_size


# --------------------------------------------------------------------------------------------------
# What group G has not consumed yet


def writer_built_store(root: Path) -> dict:
    """Orders (4 queues) with G's offsets {0: 2, 1: 6, 2: 1} and none for queue 3, a message G sent back
    (delivered to %RETRY%G, offset 0 committed), a group H and a topic G never consumed."""
    w = StoreWriter(root, WriterConfig(mappedFileSizeCommitLog=1 << 20, mappedFileSizeConsumeQueue=400,
                                       maxHashSlotNum=64, maxIndexNum=512, storeHost="10.0.0.1:10911"),
                    clock=ManualClock(1_700_000_000_000))
    b = Broker(w)
    p = Producer(born_host="10.0.0.7:40000", client_ip="10.0.0.7")
    sent = [b.send(p, "Orders", f"order {i}".encode(), tags="TagA", keys=f"o-{i}") for i in range(22)]
    b.send(p, "Other", b"not G's topic")
    back = b.send_back("G", sent[0].record)
    b.clock.advance(60_000)
    delivered = b.deliver_due()
    committed = {0: 2, 1: 6, 2: 1}
    for q, off in committed.items():
        b.commit_offset("G", "Orders", q, off)
    b.commit_offset("G", f"%RETRY%G", 0, 0)
    b.commit_offset("H", "Orders", 3, 5)
    w.close()
    expected = [r.record for r in sent if r.queue_offset >= committed.get(r.queue_id, 0)] + delivered
    assert back.topic == L.SCHEDULE_TOPIC and [d.topic for d in delivered] == ["%RETRY%G"]
    return {"expected": expected}


def test_not_yet_consumed_by_a_group_with_simulated_consumers(spark, tmp_path):
    built = writer_built_store(tmp_path / "s")
    out = tmp_path / "pending"
    code, _ = run_extract(spark, "--store", tmp_path / "s", "--out", out, "--format", "jsonl",
                          "--not-consumed-by", "G", "--consumers", "3")
    assert code == 0
    rows = jsonl_rows(out)
    key = lambda t, q, o: (t, q, o)
    expected = sorted(key(m.topic, m.queue_id, m.queue_offset) for m in built["expected"])
    assert [key(r["topic"], r["queue_id"], r["queue_offset"]) for r in rows] == expected  # in queue order
    assert {r["msg_id"] for r in rows} == {m.msg_id for m in built["expected"]}
    # AllocateMessageQueueAveragely: 4 queues over 3 consumers -> 2, 1, 1; the retry topic's 1 queue -> the first
    owner = {("Orders", 0): "consumer-0", ("Orders", 1): "consumer-0", ("Orders", 2): "consumer-1",
             ("Orders", 3): "consumer-2", ("%RETRY%G", 0): "consumer-0"}
    assert all(r["consumer"] == owner[(r["topic"], r["queue_id"])] for r in rows)
    m = manifest_of(out)
    assert m["counts"]["selected"] == m["counts"]["written"] == len(expected) and m["counts"]["reconciled"]
    assert {c: v["messages"] for c, v in m["consumers"].items()} == dict(Counter(r["consumer"] for r in rows))
    assert m["consumers"]["consumer-1"]["queues"] == ["Orders@s:2"]
    q3 = next(x for x in m["not_consumed_by"] if x["topic"] == "Orders" and x["queue_id"] == 3)
    assert q3["committed_offset"] is None and q3["unconsumed"] == 5
    # the JSON Lines extract replays into a store of just those messages, each queue in its order
    code, lines, _ = run_replay(spark, "--input", out, "--out", tmp_path / "new")
    assert code == 0 and lines[-1]["counts"]["written"] == len(expected)
    new = Store(tmp_path / "new")
    for (topic, qid) in {(t, q) for t, q, _ in expected}:
        got = [new.read_message(u.physical_offset) for u in new.consume_queue(topic, qid)]
        assert [int(origin(g)[replay.TRACE_QUEUE_OFFSET]) for g in got] == [o for t, q, o in expected
                                                                          if (t, q) == (topic, qid)]
        assert all(origin(g)[replay.TRACE_BROKER] == "s" for g in got)


def test_allocate_averagely_matches_rocketmqs_rule():
    alloc = extract.allocate_averagely(list(range(8)), ["c1", "c2", "c3"])
    assert alloc == {"c1": [0, 1, 2], "c2": [3, 4, 5], "c3": [6, 7]}
    alloc = extract.allocate_averagely(list(range(2)), ["a", "b", "c"])
    assert alloc == {"a": [0], "b": [1], "c": []}
    assert sorted(["b", "B", "a", "😀", "\uffff"], key=extract.java_string_order) == ["B", "a", "b", "😀", "\uffff"]


# --------------------------------------------------------------------------------------------------
# Options: two replicas de-duplicated, bodies decompressed; half-message states


def test_dedupe_across_replicas_and_decompressed_bodies(spark, tmp_path):
    manifest = fixture_manifest("basic")
    damage.copy_store(fixture_store("basic"), tmp_path / "replica" / "store")
    out = tmp_path / "x"
    code, _ = run_extract(spark, "--store", fixture_store("basic"), "--store", tmp_path / "replica", "--out",
                          out, "--format", "jsonl", "--dedupe", "--body", "decompressed")
    assert code == 0
    msgs = manifest["messages"]
    copies = Counter((x["topic"], x["uniqKey"], x["reconsumeTimes"], x["tranType"]) for x in msgs if x["uniqKey"])
    no_uniq = sum(1 for x in msgs if not x["uniqKey"])
    m = manifest_of(out)
    assert m["counts"]["selected"] == 2 * len(msgs)
    assert m["counts"]["written"] == len(copies) + 2 * no_uniq
    assert m["counts"]["rejected_by_reason"] == {"DUPLICATE_UNIQ_KEY": 2 * len(msgs) - len(copies) - 2 * no_uniq}
    assert m["counts"]["reconciled"] and m["rejected_examples"][0]["detail"].startswith("a copy of the record at")
    rows = jsonl_rows(out)
    assert {r["broker"] for r in rows if r["uniq_key"]} == {"basic"}  # the first store's copy is kept
    zipped = [x for x in msgs if "bodyDecompressed" in x]
    assert zipped
    for exp in zipped:
        row = next(r for r in rows if r["physical_offset"] == exp["commitLogOffset"] and r["broker"] == "basic")
        assert base64.b64decode(row["body"]) == base64.b64decode(exp["bodyDecompressed"])
        assert row["sys_flag"] & (L.COMPRESSED_FLAG | L.COMPRESSION_TYPE_MASK) == 0
        assert row["compression"] == "NONE" and row["stored_compression"] == exp["compressionType"]


def test_half_message_states(spark):
    stores = resolve_stores([str(fixture_store("basic"))], files=True)
    states = {r["physical_offset"]: r["half_state"] for r in
              extract.half_states(lambda: extract.read_messages(spark, stores)).collect()}
    assert states == {13831: "committed", 14569: "rolled-back"}


def test_nothing_matched_exits_1_and_writes_nothing(spark, tmp_path):
    code, err = run_extract(spark, "--store", fixture_store("broker"), "--out", tmp_path / "x", "--dlq",
                            "no-such-group")
    assert code == 1 and "nothing matched" in err and not (tmp_path / "x").exists()


# --------------------------------------------------------------------------------------------------
# Repair


def test_repair_salvages_past_damage_and_carries_consumer_offsets(spark, tmp_path):
    """BrokerTopic queue 1's first record gets a bad CRC: recovery would stop there and drop everything
    after it.  The repair keeps the 24 others, and cg-broker's committed offset 2 on queue 1 becomes 1 (one
    record it had consumed is lost)."""
    manifest = fixture_manifest("broker")
    bad = next(x for x in manifest["messages"] if x["topic"] == "BrokerTopic" and x["queueId"] == 1)
    damage.bad_crc(fixture_store("broker"), tmp_path / "d", physical_offset=bad["commitLogOffset"])
    assert predict_recovery(Store(tmp_path / "d")).max_physical_offset == bad["commitLogOffset"]

    code, lines, _ = run_replay(spark, "--repair", tmp_path / "d", "--out", tmp_path / "plan", "--dry-run")
    assert code == 0 and not (tmp_path / "plan").exists()
    plan = {(x["topic"], x["queue_id"]): x for x in lines if x["kind"] == "queue"}
    q1 = [x for x in manifest["messages"] if (x["topic"], x["queueId"]) == ("BrokerTopic", 1)]
    assert plan[("BrokerTopic", 1)]["new_queue_offsets"] == [0, len(q1) - 1]  # one record lost
    assert plan[("BrokerTopic", 1)]["from"] == {"d": [1, len(q1) - 1]}
    assert lines[-1]["kind"] == "summary" and lines[-1]["counts"]["written"] == len(manifest["messages"]) - 1

    code, lines, _ = run_replay(spark, "--repair", tmp_path / "d", "--out", tmp_path / "new")
    assert code == 0
    assert lines[-1]["counts"] == {"selected": 24, "written": 24, "rejected": 0, "rejected_by_reason": {},
                                   "reconciled": True}
    new = Store(tmp_path / "new")
    assert [origin(m)[replay.TRACE_MSG_ID] for m in new.messages()] == [
        x["msgId"] for x in manifest["messages"] if x is not bad]
    # queue 3 holds 3 records and the group committed 4 (past its end): it had consumed them all
    assert consumer_offsets(new.config("consumerOffset.json")) == {
        ("BrokerTopic", "cg-broker"): {0: 1, 1: 1, 2: 3, 3: 3}}
    assert not predict_recovery(new).dropped_messages


# --------------------------------------------------------------------------------------------------
# Outputs that must not be written


def test_outputs_are_never_clobbered_or_written_into_an_input(spark, tmp_path):
    root = fixture_store("broker")
    (tmp_path / "taken").mkdir()
    (tmp_path / "taken" / "file").write_text("x")
    with pytest.raises(OutputError, match="--overwrite"):
        run_extract(spark, "--store", root, "--out", tmp_path / "taken")
    with pytest.raises(OutputError, match="--overwrite"):
        run_replay(spark, "--repair", root, "--out", tmp_path / "taken")
    damage.copy_store(root, tmp_path / "copy")
    with pytest.raises(OutputError, match="overlaps the input"):
        run_replay(spark, "--repair", tmp_path / "copy", "--out", tmp_path / "copy" / "new")
    assert not (tmp_path / "copy" / "new").exists()


@pytest.mark.parametrize("job, argv, says", [
    (replay, ["--out", "/tmp/x"], "--input EXTRACT_DIR or --repair STORE"),
    (replay, ["--repair", "s", "--out", "/tmp/x", "--store-host", "nohost"], "--store-host"),
    (extract, ["--store", "s", "--out", "/tmp/x", "--consumers", "2"], "--not-consumed-by"),
    (extract, ["--store", "s", "--out", "/tmp/x", "--key", "a b"], "no space"),
])
def test_bad_arguments_exit_2_before_any_work(job, argv, says, capsys):
    assert job.main(argv) == 2
    assert says in capsys.readouterr().err


# --------------------------------------------------------------------------------------------------
# Walks that mean what they say (issue 37)


def _demo_like(root: Path) -> tuple:
    """A store like the demo's broker-b (synthetic traffic, clean shutdown) with one body bit flipped in the middle
    record, inside the segments the broker's recovery walks: it cuts the log there.  Returns (the store, the damaged
    record, the broker's cut)."""
    from store_format.write.generate import TrafficConfig, generate_store

    generate_store(root / "clean", TrafficConfig(messages=900, seed=2), WriterConfig(mappedFileSizeCommitLog=96 << 10))
    frames = [f for f in Store(root / "clean").walk_commitlog(decode=True) if f.kind == "message"]
    victim = frames[len(frames) // 2].message
    damage.flip_body_bit(root / "clean", root / "store", physical_offset=victim.physical_offset, bit=3)
    cut = predict_recovery(Store(root / "store")).cut
    assert cut.physical_offset == victim.physical_offset and cut.kind == "BAD_CRC"
    assert len(Store(root / "store").segments) - 3 <= [s.name for s in Store(root / "store").segments].index(
        cut.segment) < len(Store(root / "store").segments) - 1  # walked by recovery, segments after it
    return root / "store", victim, cut


def _intact(store: Path, topic: str, queue_id: int) -> list:
    """Every intact message of a queue, as the salvage walk frames them."""
    return [f.message for f in Store(store).walk_commitlog(decode=True, salvage=True)
            if getattr(f, "kind", None) == "message" and f.message.topic == topic and f.message.queue_id == queue_id]


def test_the_kept_walk_ends_at_the_brokers_cut_and_the_manifest_says_what_it_left_out(spark, tmp_path):
    """The default walk (kept) writes a queue's messages up to the broker's predicted cut -- the audit's -- with no
    hole, and the manifest names the cut and counts the intact messages of the selection past it; the salvage walk
    writes them all, marked kept = false past the cut, and its one hole (the damaged record, which no walk can give
    back) makes the manifest not reconciled, the hole named.  (The walk this replaced cut each segment at its own
    first stop: it wrote messages past the cut and left out the intact ones after the damage in its segment.)"""
    store, victim, cut = _demo_like(tmp_path)
    topic, qid = victim.topic, victim.queue_id
    intact = _intact(store, topic, qid)
    before = [m for m in intact if m.physical_offset < cut.physical_offset]
    past = [m for m in intact if m.physical_offset >= cut.physical_offset]
    assert before and len({m.segment for m in past}) >= 2
    code, err = run_extract(spark, "--store", store, "--topic", topic, "--queue", qid, "--out", tmp_path / "kept",
                            "--format", "jsonl")
    m = manifest_of(tmp_path / "kept")
    rows = jsonl_rows(tmp_path / "kept")
    assert code == 0 and [r["physical_offset"] for r in rows] == [x.physical_offset for x in before]
    assert [r["queue_offset"] for r in rows] == list(range(rows[0]["queue_offset"], victim.queue_offset))
    assert all(r["kept"] for r in rows) and m["walk"]["name"] == "kept"
    [broker] = m["brokers"]
    assert broker["cut"] == cut.as_dict() and broker["intact_past_cut"] == len(past) and broker["past_cut_written"] == 0
    assert m["counts"]["reconciled"] and m["holes"] == {"checked": True, "missing": 0, "holes": 0, "listed": []}
    assert f"{len(past):,} intact message(s) of the selection lie at or past the broker's predicted cut at physical " \
           f"offset {cut.physical_offset:,}" in err and "--walk salvage writes them too" in err

    code, err = run_extract(spark, "--store", store, "--topic", topic, "--queue", qid, "--walk", "salvage", "--out",
                            tmp_path / "salvage", "--format", "jsonl")
    m = manifest_of(tmp_path / "salvage")
    rows = jsonl_rows(tmp_path / "salvage")
    assert code == 0 and [r["physical_offset"] for r in rows] == [x.physical_offset for x in intact]
    assert [r["kept"] for r in rows] == [x.physical_offset < cut.physical_offset for x in intact]
    [broker] = m["brokers"]
    assert (broker["intact_past_cut"], broker["past_cut_written"]) == (len(past), len(past))
    assert m["counts"]["adds_up"] and not m["counts"]["reconciled"] and m["counts"]["missing_in_holes"] == 1
    [hole] = m["holes"]["listed"]
    assert (hole["topic"], hole["queue_id"], hole["queue_offsets"]) == (topic, qid, [victim.queue_offset] * 2)
    assert hole["after_physical_offset"] < victim.physical_offset < hole["before_physical_offset"]
    assert f"{topic}/{qid} queue offset {victim.queue_offset} missing" in err
    # the earlier name of the kept walk still works
    code, _ = run_extract(spark, "--store", store, "--topic", topic, "--queue", qid, "--walk", "recovery", "--out",
                          tmp_path / "alias", "--format", "jsonl")
    assert code == 0 and manifest_of(tmp_path / "alias")["walk"]["name"] == "kept"
    assert jsonl_rows(tmp_path / "alias") == jsonl_rows(tmp_path / "kept")
