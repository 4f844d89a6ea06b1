"""``dump --what commitlog`` -> ``write`` on every store RocketMQ itself wrote (issue 37 item 8): from a store's
own dump, its own settings (``--config``) and its own topics (``--topics``), the writer lays down the files
RocketMQ wrote, byte for byte.  Every file the comparison leaves out is named with why -- a wall-clock stamp, or a
file RocketMQ writes that the writer does not -- and checked as far as it can be.  These are fidelity tests: the
other side of every comparison is a fixture written by RocketMQ 4.9.7 or 5.3.3.

Also the writer's input parts the round trip rests on: topic attributes (``write --topics``, kept by
``--append``), a property the store adds at append time deleted from the input as text
(``MessageUtils.deleteProperty``), a V2 record's long topic on a writer without 5.x settings."""
from __future__ import annotations

import fnmatch
import json
import struct
import subprocess
import sys
from pathlib import Path

import pytest

from store_format import layout as L
from store_format import timer as T
from store_format.consumequeue import discover_queues, read_queue
from store_format.properties import delete_property

from .conftest import FIXTURES, FIXTURES_5X, REPO
from .support.writer_support import files

# Files a written-back store cannot share with RocketMQ's, and why (checked below as far as they can be)
WALL_CLOCK = {
    "index/*": "index files are named after the broker JVM's clock when each was created; the writer names them "
               "after the store time of the record that opened them (contents compared in order)",
    "checkpoint": "physicMsgTimestamp is when the flush thread last ran (wall clock); the rest is compared",
}
WRITER_ONLY_CONFIG = {  # the 5.3.3 fixtures were written by the store module alone, without the broker's managers
    f"config/{name}": "the 5.3.3 fixtures were written without the broker's config managers, so they have none"
    for name in ("topics.json", "subscriptionGroup.json", "consumerOffset.json", "delayOffset.json",
                 "consumerFilter.json", "lmqConsumerOffset.json")}
BROKER_5X = {
    "abort.bak": "5.x createTempFile writes the abort file through string2File, which keeps the empty file it just "
                 "created as abort.bak on every start; the writer does not write it",
    "compaction/position-checkpoint": "the compaction service's checkpoint (enableCompaction, on by default); the "
                                      "writer has no compaction store",
}
TIMER_CLOCK = {
    "config/timercheck": "lastReadTimeMs and the data version are the timer threads' wall clock (the offsets are "
                         "compared)",
    "config/timermetrics*": "the data version and timeStamps are wall clock, and the counts include the fires and "
                            "recalls the broker's dequeue thread ran, which writing a dump back does not run (the "
                            "timing topics are compared)",
}


def run_cli(*args, stdin=None):
    return subprocess.run([sys.executable, "-m", "store_format", *map(str, args)], cwd=REPO, input=stdin,
                          capture_output=True, text=True, timeout=120)


def write_back(tmp_path: Path, store: Path, settings: dict, topics: Path | None = None) -> Path:
    """``dump --what commitlog`` of ``store``, written back with ``settings`` as broker.conf (and ``topics``)."""
    dump = run_cli("dump", store, "--what", "commitlog")
    assert dump.returncode == 0, dump.stderr
    (tmp_path / "dump.jsonl").write_text(dump.stdout, encoding="utf-8")
    conf = tmp_path / "broker.conf"
    conf.write_text("".join(f"{k}={v}\n" for k, v in settings.items() if not isinstance(v, (dict, list))))
    out = tmp_path / "written"
    r = run_cli("write", out, "--input", tmp_path / "dump.jsonl", "--config", conf,
                *(["--topics", topics] if topics else []))
    assert r.returncode == 0, r.stderr
    return out


def compare_trees(ours: Path, theirs: Path, named: dict[str, str]) -> list[str]:
    """Every file of either tree is identical in both or named (a glob of ``named``); returns the identical ones."""
    def tree(root):
        return {p.relative_to(root).as_posix() for p in root.rglob("*") if p.is_file()}

    a, b = tree(ours), tree(theirs)
    same = []
    for rel in sorted(a | b):
        if any(fnmatch.fnmatchcase(rel, pattern) for pattern in named):
            continue
        assert rel in a, f"{rel}: RocketMQ wrote it, the writer did not"
        assert rel in b, f"{rel}: the writer wrote it, RocketMQ did not"
        x, y = (ours / rel).read_bytes(), (theirs / rel).read_bytes()
        if x != y:
            at = next((i for i, (p, q) in enumerate(zip(x, y)) if p != q), min(len(x), len(y)))
            pytest.fail(f"{rel} differs from RocketMQ's at byte {at} ({len(x)} vs {len(y)} bytes)")
        same.append(rel)
    return same


def check_named(ours: Path, theirs: Path, named: dict[str, str], checkpoint_from: int = 8) -> None:
    """What the named files still must share (the checkpoint from byte ``checkpoint_from`` on)."""
    if "index/*" in named:
        assert [p.read_bytes() for p in files(ours, "index")] == [p.read_bytes() for p in files(theirs, "index")]
    if "checkpoint" in named:
        x, y = (ours / "checkpoint").read_bytes(), (theirs / "checkpoint").read_bytes()
        assert len(x) == len(y) and x[checkpoint_from:] == y[checkpoint_from:]
    if "config/timercheck" in named:
        x, y = (ours / "config/timercheck").read_bytes(), (theirs / "config/timercheck").read_bytes()
        assert len(x) == len(y) and x[8:32] == y[8:32]  # flush position, queue offsets
    if "config/timermetrics*" in named:
        assert set(T.read_timer_metrics(ours / "config").timing_count) == \
            set(T.read_timer_metrics(theirs / "config").timing_count)


def settings_of(manifest: dict) -> dict:
    return {**manifest["storeConfig"], **(manifest.get("brokerConfig") or {})}


def topics_file(tmp_path: Path, table: dict) -> Path:
    """A topics.json in the broker's format from a manifest's ``topicConfigs``."""
    path = tmp_path / "topics.json"
    path.write_text(json.dumps({"topicConfigTable": {n: {**c, "topicName": n} for n, c in table.items()}}))
    return path


# --------------------------------------------------------------------------------------------------
# RocketMQ 4.9.7


def test_basic_writes_back_byte_for_byte(tmp_path):
    """basic: no config/ (DefaultMessageStore alone), one segment; commitlog, every consume queue, checkpoint."""
    store = FIXTURES / "basic" / "store"
    manifest = json.loads((FIXTURES / "basic" / "manifest.json").read_text())
    out = write_back(tmp_path, store, settings_of(manifest))
    named = {"index/*": WALL_CLOCK["index/*"], "config/*": "basic has no config/: it was written without a broker"}
    same = compare_trees(out, store, named)
    assert "commitlog/00000000000000000000" in same and "checkpoint" in same and \
        sum(s.startswith("consumequeue/") for s in same) == 25
    check_named(out, store, named)


def test_broker_writes_back_byte_for_byte_with_its_topics(tmp_path):
    """broker (a BrokerController's store): with its own topics.json, the config files are RocketMQ's too, but for
    the consumers' commits (not records) and the broker's own clock."""
    store = FIXTURES / "broker" / "store"
    manifest = json.loads((FIXTURES / "broker" / "manifest.json").read_text())
    out = write_back(tmp_path, store, settings_of(manifest), topics=store / "config" / "topics.json")
    named = {**WALL_CLOCK,
             "config/consumerOffset.json": "committed consumer offsets are the consumers' commits, not records: a "
                                           "dump does not carry them",
             "config/subscriptionGroup.json": "its dataVersion timestamp is the broker's clock when it created the "
                                              "retry group, just before the record that the writer dates it by",
             "config/topics.json.bak": "the broker persisted topics.json twice; the writer persists once, at close"}
    same = compare_trees(out, store, named)
    assert {"commitlog/00000000000000000000", "config/topics.json", "config/delayOffset.json",
            "config/consumerFilter.json"} <= set(same)
    check_named(out, store, named)
    ours, theirs = (json.loads(x.read_text()) for x in (out / "config/subscriptionGroup.json",
                                                         store / "config/subscriptionGroup.json"))
    assert ours["subscriptionGroupTable"] == theirs["subscriptionGroupTable"]


def test_recovered_zero_page_writes_back_what_its_recovery_walk_frames(tmp_path):
    """recovered-zero-page (a killed broker's store with a zeroed page): what is written back is RocketMQ's up to the
    damage -- every segment before it, the damaged one up to its first destroyed record, and each consume queue's
    units there.  Past it the stores part: the killed broker's files still hold what followed, and the dump's records
    after the damage (its recovery walk goes on in the next segment) are written where the damage begins."""
    base = FIXTURES / "recovered-zero-page"
    store, manifest = base / "input" / "store", json.loads((base / "manifest.json").read_text())
    out = write_back(tmp_path, store, settings_of(manifest))
    damaged = manifest["damage"]["segment"]
    lost = manifest["damage"]["messagesOverlappingZeroedPage"][0]["commitLogOffset"]  # the first record it destroyed
    theirs = {p.name: p.read_bytes() for p in files(store, "commitlog")}
    ours = {p.name: p.read_bytes() for p in files(out, "commitlog")}
    assert sum(ours[n] == theirs[n] for n in theirs if n < damaged) == 26
    assert ours[damaged][:lost - int(damaged)] == theirs[damaged][:lost - int(damaged)]
    fixture_queues = discover_queues(store / "consumequeue")
    written = discover_queues(out / "consumequeue")
    assert set(written) == set(fixture_queues)
    compared = 0
    for key, queue_files in written.items():
        mine = [(u.queue_offset, u.physical_offset, u.size, u.tags_code) for u in read_queue(queue_files)
                if u.physical_offset < lost]
        rocketmq = [(u.queue_offset, u.physical_offset, u.size, u.tags_code) for u in read_queue(fixture_queues[key])]
        assert mine == rocketmq[:len(mine)], key
        compared += len(mine)
    assert compared == sum(1 for r in map(json.loads, (tmp_path / "dump.jsonl").read_text().splitlines())
                           if r["kind"] == "message" and r["physical_offset"] < lost and r["tran_type"] in
                           ("NOT", "COMMIT"))


# --------------------------------------------------------------------------------------------------
# RocketMQ 5.3.3


FIVE = ["v5-default", "v5-crc", "v5-lmq", "v5-timer", "v5-batchcq"]


@pytest.mark.parametrize("name", FIVE)
def test_5x_store_writes_back_byte_for_byte(tmp_path, name):
    """Each 5.3.3 store with its own settings (timerWheelEnable is 5.3.3's default, which the manifest leaves out)
    and, for v5-batchcq, its topic configs: commitlog (__CRC32# on v5-crc: a record that carries it is appended
    with it deleted as text), consume queues (LMQ ones too), batch consume queues, index, timer log and wheel."""
    store = FIXTURES_5X / name / "store"
    manifest = json.loads((FIXTURES_5X / name / "manifest.json").read_text())
    topics = topics_file(tmp_path, manifest["topicConfigs"]) if manifest.get("topicConfigs") else None
    out = write_back(tmp_path, store, {**settings_of(manifest), "timerWheelEnable": "true"}, topics)
    named = {**WALL_CLOCK, **WRITER_ONLY_CONFIG, **BROKER_5X, **TIMER_CLOCK}
    same = compare_trees(out, store, named)
    check_named(out, store, named)
    assert "timerwheel" in same and sum(s.startswith("commitlog/") for s in same) == len(files(store, "commitlog"))
    expect = {"v5-lmq": "consumequeue/%LMQ%room3/0/00000000000000000000",
              "v5-timer": "timerlog/00000000000000002048",
              "v5-batchcq": "batchconsumequeue/BatchTopic/1/00000000000000000000"}.get(name)
    assert expect is None or expect in same
    if name == "v5-batchcq":
        assert not (out / "consumequeue" / "BatchTopic").exists()
        table = json.loads((out / "config" / "topics.json").read_text())["topicConfigTable"]
        assert table["BatchTopic"]["attributes"] == {L.TOPIC_ATTRIBUTE_QUEUE_TYPE: L.QUEUE_TYPE_BATCH}


def test_rocksdb_cq_store_writes_back_its_commitlog_and_index(tmp_path):
    """rocksdb-cq (storeType=defaultRocksDB, no timer store): the commitlog -- its 150-character retry topic a V2
    record, written by a writer without 5.x settings -- and the index come back byte for byte.  Its consumequeue/ is
    a RocksDB database, which the writer does not write: the file queues it writes hold the units RocketMQ's own
    RocksDB consume-queue API read back."""
    store = FIXTURES_5X / "rocksdb-cq" / "store"
    manifest = json.loads((FIXTURES_5X / "rocksdb-cq" / "manifest.json").read_text())
    out = write_back(tmp_path, store, settings_of(manifest))
    named = {**WALL_CLOCK, **WRITER_ONLY_CONFIG, **BROKER_5X,
             "checkpoint": WALL_CLOCK["checkpoint"] + "; logicsMsgTimestamp is 0 in RocketMQ's, as a RocksDB "
                           "consume queue keeps its own checkpoint row, while the writer's file queues set it",
             "consumequeue/*": "a RocksDB database (storeType=defaultRocksDB), which the writer does not write; "
                               "its units are compared with RocketMQ's read-back below"}
    same = compare_trees(out, store, named)
    check_named(out, store, named, checkpoint_from=16)
    assert sum(s.startswith("commitlog/") for s in same) == 2
    written = discover_queues(out / "consumequeue")
    rocketmq = [q for q in manifest["readBack"]["consumeQueues"] if q["entries"]]  # the others were never written
    assert {(q["topic"], q["queueId"]) for q in rocketmq} == set(written)
    for q in rocketmq:
        units = [[u.queue_offset, u.physical_offset, u.size, u.tags_code]
                 for u in read_queue(written[(q["topic"], q["queueId"])])]
        assert units == q["entries"], q["topic"]


def test_dledger_store_is_not_written_by_the_writer():
    """dledger: the log is DLedger entries in dledger-n0/ (data, index, checkpoint, currterm), not commitlog/; the
    writer writes no DLedger commit log, so there is nothing to write back and compare (said here, not skipped)."""
    store = FIXTURES_5X / "dledger" / "store"
    assert not (store / "commitlog").exists() and (store / "dledger-n0" / "data").is_dir()
    dump = run_cli("dump", store, "--what", "commitlog")
    # the project reads the DLedger log (store_format.dledger): its records, at RocketMQ's offsets (entry + 48)
    with open(FIXTURES_5X / "dledger" / "manifest.json", encoding="utf-8") as f:
        records = json.load(f)["readBack"]["records"]
    rows = [json.loads(line) for line in dump.stdout.splitlines()]
    assert [r["physical_offset"] for r in rows if r["kind"] == "message"] == [r["physicalOffset"] for r in records]


# --------------------------------------------------------------------------------------------------
# The input parts


def test_a_carried_crc_property_is_deleted_as_text():
    """MessageUtils.deleteProperty's own cases (RocketMQ's MessageExtBrokerInnerTest), and what a map round trip
    would lose: an empty value and a repeated key (the classic batch's WAIT twice) stay."""
    for raw, name, kept in [
            ("", "KeyA", ""), ("KeyA\x01ValueA", "KeyA", ""), ("KeyA\x01ValueA\x02", "KeyA", ""),
            ("KeyA\x01ValueA\x02KeyA\x01ValueA", "KeyA", ""), ("KeyB\x01ValueB\x02KeyA\x01ValueA", "KeyA",
                                                               "KeyB\x01ValueB\x02"),
            ("KeyB\x01ValueB\x02KeyA\x01ValueA\x02KeyB\x01ValueB\x02", "KeyA", "KeyB\x01ValueB\x02KeyB\x01ValueB\x02"),
            ("KeyA\x01ValueA\x02KeyB\x01ValueB", "KeyA", "KeyB\x01ValueB"),
            ("KeyA\x01ValueA\x02KeyB\x01ValueBKeyA\x01ValueA\x02", "KeyA", "KeyB\x01ValueBKeyA\x01ValueA\x02"),
            ("KeyA\x01ValueA\x02KeyB\x01ValueBKeyA\x01", "KeyA", "KeyB\x01ValueBKeyA\x01"),
            ("KeyA\x01ValueA\x02KeyB\x01ValueBKeyA", "KeyA", "KeyB\x01ValueBKeyA"),
            ("__CRC32#\x01", "__CRC32#", ""), ("__CRC32#", "__CRC32#", "__CRC32#"),
            ("WAIT\x01true\x02TAGS\x01\x02WAIT\x01true\x02__CRC32#\x010123456789\x02", "__CRC32#",
             "WAIT\x01true\x02TAGS\x01\x02WAIT\x01true\x02")]:
        assert delete_property(raw, name) == kept, raw



def _batchcq(tmp_path):
    name = "v5-batchcq"
    manifest = json.loads((FIXTURES_5X / name / "manifest.json").read_text())
    dump = run_cli("dump", FIXTURES_5X / name / "store", "--what", "commitlog")
    rows = [x for x in dump.stdout.splitlines() if json.loads(x)["kind"] == "message"]
    conf = tmp_path / "broker.conf"
    conf.write_text("".join(f"{k}={v}\n" for k, v in settings_of(manifest).items()))
    return rows, conf, topics_file(tmp_path, manifest["topicConfigs"])


def test_append_keeps_the_stores_topic_attributes(tmp_path):
    """A BatchCQ store written in two goes (``--topics`` first, then ``--append`` without it) is the one RocketMQ
    wrote: the reopened store's topics.json keeps queue.type=BatchCQ, its batch queues continue after their last
    unit, and the batch counter after their max offset."""
    rows, conf, topics = _batchcq(tmp_path)
    out = tmp_path / "s"
    r = run_cli("write", out, "--input", "-", "--config", conf, "--topics", topics, stdin="\n".join(rows[:13]) + "\n")
    assert r.returncode == 0, r.stderr
    r = run_cli("write", out, "--input", "-", "--config", conf, "--append", stdin="\n".join(rows[13:]) + "\n")
    assert r.returncode == 0, r.stderr
    store = FIXTURES_5X / "v5-batchcq" / "store"
    for sub in ("commitlog", "batchconsumequeue", "consumequeue"):
        assert [p.relative_to(out) for p in files(out, sub)] == [p.relative_to(store) for p in files(store, sub)]
        assert [p.read_bytes() for p in files(out, sub)] == [p.read_bytes() for p in files(store, sub)], sub
    table = json.loads((out / "config" / "topics.json").read_text())["topicConfigTable"]
    assert table["BatchTopic"]["attributes"] == {L.TOPIC_ATTRIBUTE_QUEUE_TYPE: L.QUEUE_TYPE_BATCH}


def test_a_topics_file_the_writer_cannot_use_is_refused_by_name(tmp_path):
    rows, conf, topics = _batchcq(tmp_path)
    line = rows[0] + "\n"
    bad = tmp_path / "bad-topics.json"
    for text, says in [('{"topicConfigTable": {"T": {"attributes": ["queue.type"]}}}', "topicConfigTable/T/attributes"),
                       ('{"topicConfigTable": {"T": {"writeQueueNums": 4294967296}}}', "writeQueueNums"),
                       ('{"topicConfigTable": [1]}', "topicConfigTable is a JSON list"),
                       ("{not json", "bad-topics.json")]:
        bad.write_text(text)
        r = run_cli("write", tmp_path / "s", "--input", "-", "--config", conf, "--topics", bad, stdin=line)
        assert r.returncode == 2 and says in r.stderr and "bad-topics.json" in r.stderr, r.stderr
        assert not (tmp_path / "s").exists()  # refused before a store is made
    r = run_cli("write", tmp_path / "ok", "--input", "-", "--topics", topics, stdin=line)
    assert r.returncode == 0, r.stderr
    r = run_cli("write", tmp_path / "ok", "--input", "-", "--topics", topics, "--append", stdin=line)
    assert r.returncode == 2 and "--append keeps the store's own config/topics.json" in r.stderr, r.stderr
