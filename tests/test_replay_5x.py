"""``replay --repair`` of a RocketMQ 5.x store keeps what a 5.x broker needs (issue 38 item 6): topic attributes (a
BatchCQ topic keeps its batch consume queue), the LMQ offsets of lmqConsumerOffset.json, and a timer store
consistent with the timers it replays (the same timers pending, none fired twice); what is not carried is named
in the summary's notes.  And its console output says in words what it did (issue 37 item 9), the JSON kept for
``--format json``.

The sources: copies of the RocketMQ 5.3.3 fixtures (v5-timer, v5-batchcq: fidelity -- the replayed store is
audited beside the one RocketMQ wrote) and a writer-built 5.x store with committed LMQ and batch-topic offsets and
two damaged records (the offsets' translation)."""
from __future__ import annotations

import io
import json
import shutil
import struct
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from jobs import replay
from jobs.audit import job as audit_job
from store_format import batchcq as B
from store_format import layout as L
from store_format import timer as T
from store_format.config import consumer_offsets, lmq_consumer_offsets, read_config
from store_format.consumequeue import discover_queues
from store_format.write import damage
from store_format.write.broker import BatchItem, ManualClock, Producer
from store_format.write.broker import Broker
from store_format.write.writer import StoreWriter, WriterConfig

from .conftest import FIXTURES_5X

START = 1_795_786_365_000
BATCH = {L.TOPIC_ATTRIBUTE_QUEUE_TYPE: L.QUEUE_TYPE_BATCH}


def run_replay(spark, *argv, fmt: str = "json"):
    out, err = io.StringIO(), io.StringIO()
    args = replay.build_parser().parse_args([str(a) for a in argv] + ["--format", fmt])
    code = replay.run(spark, args, out=out, err=err).exit_code
    return code, out.getvalue()


def summary_of(text: str) -> dict:
    return json.loads(text.splitlines()[-1])


def writer_built(root: Path) -> dict:
    """A 5.x store (LMQ, a BatchCQ topic, __CRC32#) with committed offsets: an %LMQ% group on %LMQ%a at 2, cgB on
    BatchTopic/0 at 4 (inside the second inner batch, [3, 5)), cgP on LmqParent/0 at 3."""
    cfg = WriterConfig(storeHost="192.168.0.10:10911", mappedFileSizeCommitLog=1 << 20, enableLmq=True,
                       enableMultiDispatch=True, enabledAppendPropCRC=True)
    w = StoreWriter(root, cfg, clock=ManualClock(START))
    broker, p = Broker(w), Producer(born_host="10.1.2.3:50000")
    w.register_topic("BatchTopic", 1, attributes=BATCH)
    lmq = [broker.send(p, "LmqParent", b"lmq-%d" % i, lmq="%LMQ%a", queue_id=0).record for i in range(4)]
    batches = [broker.send_inner_batch(p, "BatchTopic", [BatchItem(b"b%d" % j) for j in range(n)], queue_id=0)
               .records[0] for n in (3, 2, 1)]
    w.commit_offset("%LMQ%g", "%LMQ%a", 0, 2)
    w.commit_offset("cgB", "BatchTopic", 0, 4)
    w.commit_offset("cgP", "LmqParent", 0, 3)
    w.close()
    return {"lmq": lmq, "batches": batches}


@pytest.fixture(scope="module")
def replayed(spark, tmp_path_factory):
    """Each source replayed (--format json), and one audit of every source and replay."""
    base = tmp_path_factory.mktemp("replay5")
    sources = {}
    for name in ("v5-timer", "v5-batchcq"):
        shutil.copytree(FIXTURES_5X / name / "store", base / "src" / name)
        sources[name] = base / "src" / name
    built = writer_built(base / "built")
    # the first %LMQ%a record (LMQ offset 0) and the first inner batch ([0, 3)) are lost to damage
    damage.bad_crc(base / "built", base / "d1", physical_offset=built["batches"][0].physical_offset)
    damage.bad_crc(base / "d1", base / "src" / "v5-built", physical_offset=built["lmq"][0].physical_offset)
    sources["v5-built"] = base / "src" / "v5-built"
    summaries = {}
    for name, src in sources.items():
        code, text = run_replay(spark, "--repair", src, "--out", base / "new" / name)
        assert code == 0, text
        summaries[name] = summary_of(text)
    stores = [*sources.values(), *(base / "new" / n for n in sources)]
    audit_out = base / "audit"
    args = audit_job.build_parser().parse_args(["--store", *(f"{p.parent.name}-{p.name}={p}" for p in stores),
                                                "--out", str(audit_out), "--no-report"])
    audit_job.run(spark, args)
    return {"base": base, "sources": sources, "summaries": summaries, "built": built,
            "findings": pq.read_table(audit_out / "findings").to_pylist(),
            "timers": pq.read_table(audit_out / "tables" / "timers").to_pylist()}


def test_a_replayed_timer_store_fires_what_was_pending_and_nothing_twice(replayed):
    """v5-timer (RocketMQ 5.3.3: timers fired, rolled, recalled, pending): every timer message is in the same state
    in the replayed store as in RocketMQ's, as the audit reads both -- the timer store rebuilt, its read time
    carried from the source's timercheck."""
    new = replayed["base"] / "new" / "v5-timer"
    assert (new / "timerwheel").is_file() and T.list_timer_log_files(new)
    assert replayed["summaries"]["v5-timer"]["config"]["timerWheelEnable"] is True

    def states(broker):
        return sorted((r["uniq_key"], r["kind"], r["state"]) for r in replayed["timers"] if r["broker"] == broker)

    source = states("src-v5-timer")
    assert source == states("new-v5-timer")
    assert {s for _, _, s in source} == {"pending", "fired", "recalled", "recall"}
    ours = T.read_timer_checkpoint(new / "config" / "timercheck")
    theirs = T.read_timer_checkpoint(replayed["sources"]["v5-timer"] / "config" / "timercheck")
    assert ours.last_read_time_ms == theirs.last_read_time_ms
    assert ours.last_timer_queue_offset == theirs.last_timer_queue_offset
    assert T.read_timer_metrics(new / "config").timing_count == T.read_timer_metrics(
        replayed["sources"]["v5-timer"] / "config").timing_count
    assert not [f for f in replayed["findings"] if f["broker"] == "new-v5-timer" and f["check"].startswith("timers.")]


def test_a_replayed_batchcq_topic_keeps_its_batch_consume_queue(replayed):
    """v5-batchcq: BatchTopic (queue.type=BatchCQ, which only its folder shows: the fixture has no topics.json)
    keeps 46-byte units with the same logical offsets, and the attribute; the note says where it came from."""
    new, src = replayed["base"] / "new" / "v5-batchcq", replayed["sources"]["v5-batchcq"]
    assert ("BatchTopic", 0) not in discover_queues(new / "consumequeue")

    def units(root):
        return {k: [(u.msg_base_offset, u.batch_size) for u in B.read_batch_queue(files)]
                for k, files in B.discover_batch_queues(root).items()}

    assert units(new) == units(src) and units(src)
    table = read_config(new / "config", "topics.json").data["topicConfigTable"]
    assert table["BatchTopic"]["attributes"] == BATCH
    assert any("BatchTopic: queue.type=BatchCQ taken from its batchconsumequeue/ folder" in n
               for n in replayed["summaries"]["v5-batchcq"]["notes"])
    assert not [f for f in replayed["findings"] if f["broker"] == "new-v5-batchcq" and f["severity"] != "info"]


def test_lmq_and_batch_topic_offsets_are_carried_translated(replayed):
    """The writer-built store lost %LMQ%a's offset 0 and BatchTopic's first inner batch ([0, 3)) to damage: the
    %LMQ% group's offset 2 becomes 1 (one message before it is gone), cgB's 4 -- inside the batch [3, 5), now at
    new offset 0 -- becomes 1, in the new store's lmqConsumerOffset.json (enableLmq: it replaces
    consumerOffset.json)."""
    new = replayed["base"] / "new" / "v5-built"
    summary = replayed["summaries"]["v5-built"]
    cfg = read_config(new / "config", "lmqConsumerOffset.json")
    assert lmq_consumer_offsets(cfg) == {("%LMQ%a", "%LMQ%g"): 1}
    assert consumer_offsets(cfg) == {("BatchTopic", "cgB"): {0: 1}, ("LmqParent", "cgP"): {0: 2}}
    assert not (new / "config" / "consumerOffset.json").exists()
    assert summary["lmq_consumer_offsets_carried"] == 1 and summary["consumer_offsets_carried"] == 2
    assert summary["config"]["enableLmq"] and summary["config"]["enabledAppendPropCRC"]
    units = [(u.msg_base_offset, u.batch_size) for u in
             B.read_batch_queue(B.discover_batch_queues(new)[("BatchTopic", 0)])]
    assert units == [(0, 2), (2, 1)]


def test_a_timer_record_the_source_had_not_enqueued_is_left_to_the_new_broker(spark, tmp_path):
    """A broker killed before its enqueue reached the last two of four timer records leaves its timercheck at
    queue offset 2: the replay enqueues the first two only, and its checkpoint stays before the other two, so the
    new broker enqueues them itself (once)."""
    cfg = WriterConfig(storeHost="192.168.0.10:10911", mappedFileSizeCommitLog=1 << 20, timerWheelEnable=True,
                       mappedFileSizeTimerLog=2048)
    w = StoreWriter(tmp_path / "s", cfg, clock=ManualClock(START))
    broker, p = Broker(w), Producer(born_host="10.1.2.3:50000")
    for i in range(4):
        broker.send(p, "TimerTopic", b"t%d" % i, deliver_ms=START + 3_600_000 + i * 1000, queue_id=0)
    w.close()
    check = tmp_path / "s" / "config" / "timercheck"
    raw = bytearray(check.read_bytes())
    at = L.TIMER_CHECKPOINT.offset("last_timer_queue_offset")
    assert struct.unpack_from(">q", raw, at)[0] == 4
    raw[at:at + 8] = struct.pack(">q", 2)  # what the killed broker's checkpoint said
    check.write_bytes(bytes(raw))
    code, text = run_replay(spark, "--repair", tmp_path / "s", "--out", tmp_path / "new")
    assert code == 0, text
    cp = T.read_timer_checkpoint(tmp_path / "new" / "config" / "timercheck")
    assert cp.last_timer_queue_offset == 2
    units = [u for f in T.list_timer_log_files(tmp_path / "new") for u in T.walk_timer_log(f) if u.kind == "entry"]
    assert len(units) == 2


def test_replay_says_in_words_what_it_did(spark, tmp_path):
    """--format text (the default): sentences, every summary fact in them, no JSON; a dry run's plan per queue."""
    src = FIXTURES_5X / "v5-batchcq" / "store"
    code, text = run_replay(spark, "--repair", src, "--out", tmp_path / "new", fmt="text")
    assert code == 0
    lines = text.splitlines()
    assert lines[0].startswith("replay: wrote 28 of the 28 selected messages for ")
    assert lines[0].endswith(" once the run's last checks pass")  # printed before the commit: said so
    assert "; 5.x: timer store" in text and "consumer offsets carried: 0, and 0 LMQ offsets" in text
    assert "note: topic BatchTopic: queue.type=BatchCQ taken from its batchconsumequeue/ folder" in text
    assert not any(line.lstrip().startswith("{") for line in lines)
    code, text = run_replay(spark, "--repair", src, "--out", tmp_path / "plan", "--dry-run", fmt="text")
    assert code == 0 and not (tmp_path / "plan").exists()
    assert text.startswith("replay: would write 28 of the 28 selected")
    assert "  PlainTopic/0: new queue offsets 0-4 (5 records; from v5-batchcq queue offsets 0-4)" in text
    assert "  BatchTopic/0: new queue offsets 0-28 (9 records; from v5-batchcq queue offsets 0-28)" in text
