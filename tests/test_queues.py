"""store_format.queues, the one model of a consume queue whatever its backend, and the ``rocketmq-consumequeue``
source over it, against what RocketMQ 5.3.3 itself listed of the ``v5-batchcq`` store (its manifest: every queue's
entries as ``getMessage`` walks them, and a batch queue's raw 46-byte units)."""
from __future__ import annotations

import json
import shutil

import pytest

from store_format import rolled
from store_format.consumequeue import discover_queues, recover_queue
from store_format.queues import BATCH, FILE, group_queues, list_queue_files
from store_format.store import Store

from .conftest import FIXTURES, FIXTURES_5X

BATCHCQ = FIXTURES_5X / "v5-batchcq"
ENTRIES = "entries_[queueOffset,commitLogOffset,size,tagsCode,batchNum]"


def manifest() -> dict:
    with open(BATCHCQ / "manifest.json", encoding="utf-8") as f:
        return json.load(f)


def test_every_backend_is_one_listing_and_one_grouping():
    """A store root lists both folders; each queue knows its backend and kind; its bounds are RocketMQ's
    getMinOffsetInQueue / getMaxOffsetInQueue (a batch queue's count messages, not units)."""
    queues = {q.key: q for q in group_queues(list_queue_files(BATCHCQ / "store"))}
    listed = {(q["topic"], q["queueId"]): q for q in manifest()["consumeQueues"]}
    assert set(queues) == set(listed)
    for key, q in queues.items():
        m = listed[key]
        assert (q.backend, q.kind) == ((BATCH, "batch") if m["cqType"] == "BatchCQ" else (FILE, "plain"))
        assert q.bounds() == (m["minOffset"], m["maxOffset"])
        if q.kind == "batch":
            assert [f.name for f in q.files] == sorted({u["file"] for u in m["rawUnits"]})
    # one backend's share of the listing, as the writer's names read it
    assert set(discover_queues(BATCHCQ / "store" / "consumequeue")) == {k for k, q in queues.items()
                                                                          if q.backend is FILE}


def test_a_single_file_or_part_folder_is_listed_as_its_backend():
    one = BATCHCQ / "store" / "batchconsumequeue" / "BatchTopic" / "1" / "00000000000000000000"
    [f] = list_queue_files(one)
    assert (f.topic, f.queue_id, f.backend, f.first_unit, f.loaded) == ("BatchTopic", 1, BATCH, 0, True)
    assert {f.backend for f in list_queue_files(BATCHCQ / "store" / "batchconsumequeue")} == {BATCH}
    assert {f.backend for f in list_queue_files(BATCHCQ / "store" / "consumequeue")} == {FILE}


def test_a_file_queue_recovers_as_consume_queue_recover_and_a_batch_one_is_not_modelled():
    store = Store(FIXTURES / "basic" / "store")
    for q in store.queue_models:
        assert q.recover() == recover_queue(store.queues[q.key])
    assert all(q.recover() is None for q in group_queues(list_queue_files(BATCHCQ / "store", (BATCH,))))


def test_bad_names_and_lengths_are_the_listings_problems(tmp_path):
    """The listing carries each file's problems the same way for every backend (store_format.rolled's words)."""
    root = shutil.copytree(BATCHCQ / "store", tmp_path / "s", ignore=shutil.ignore_patterns("commitlog", "index"))
    queue = root / "consumequeue" / "PlainTopic" / "0"
    (queue / "garbage").write_bytes(b"x" * 20)
    (root / "batchconsumequeue" / "BatchTopic" / "x").mkdir()
    (root / "batchconsumequeue" / "BatchTopic" / "x" / "00000000000000000000").write_bytes(b"")
    files = list_queue_files(root)
    bad = {(f.backend.name, f.topic, f.queue_id, f.name): [k for k, _ in f.problems] for f in files if f.problems}
    assert bad == {("file", "PlainTopic", 0, "garbage"): ["BAD_FILE_NAME"],
                   ("batch", "BatchTopic", None, "00000000000000000000"): ["BAD_GEOMETRY"]}
    assert not any(q.key == ("BatchTopic", None) for q in group_queues(files))  # never loaded
    assert rolled.queue_id_of("2147483648") is None and rolled.queue_id_of("-1") == -1


def test_the_source_reads_batch_units_with_their_columns(spark):
    """Every unit RocketMQ listed, as the same columns for both backends: a batch unit's queue_offset is its
    msgBaseOffset and batch_size its batchSize; the file backend's batch columns are null."""
    df = spark.read.format("rocketmq-consumequeue").load(str(BATCHCQ / "store"))
    rows = [r for r in df.collect() if r["kind"] == "entry"]
    for q in manifest()["consumeQueues"]:
        got = [r for r in rows if (r["topic"], r["queue_id"]) == (q["topic"], q["queueId"])]
        assert [[r["queue_offset"], r["physical_offset"], r["size"], r["tags_code"], r["batch_size"] or 1]
                for r in got] == q[ENTRIES]
        if q["cqType"] == "BatchCQ":
            assert {r["backend"] for r in got} == {"batch"}
            assert [(r["file"], r["file_position"], r["msg_base_offset"], r["batch_size"], r["length"])
                    for r in got] == [(u["file"], u["unitByteOffset"], u["msgBaseOffset"], u["batchSize"], 46)
                                      for u in q["rawUnits"]]
        else:
            assert {(r["backend"], r["batch_size"], r["msg_base_offset"], r["length"]) for r in got} == \
                {("file", None, None, 20)}
    # the columns a user asks for by name resolve (they failed with UNRESOLVED_COLUMN); analysed, not run again
    assert df.select("backend", "batch_size", "msg_base_offset").columns == ["backend", "batch_size", "msg_base_offset"]

def test_unit_windows_by_queue_offset_are_what_get_message_reads():
    """A window by queue offset holds the units RocketMQ's getMessage reads from there: a batch unit is in every
    window that meets the offsets it covers."""
    queues = {q.key: q for q in group_queues(list_queue_files(BATCHCQ / "store"))}
    for m in manifest()["consumeQueues"]:
        q, entries = queues[(m["topic"], m["queueId"])], m[ENTRIES]
        whole = q.units()
        assert [[int(o), int(p), int(s), int(t)] for o, p, s, t, v in zip(
            whole.queue_offset, whole.physical_offset, whole.size, whole.tags_code, whole.valid) if v] == \
            [e[:4] for e in entries]
        for first, end in ((0, 1), (2, 5), (m["maxOffset"] - 1, m["maxOffset"]), (m["maxOffset"], None)):
            w = q.units(first, end)
            covering = [e[1] for e in entries if e[0] + e[4] > first and (end is None or e[0] < end)]
            assert w.physical_offset[w.valid].tolist() == covering
            assert set(w.file.tolist()) <= {f.name for f in q.files}


@pytest.mark.parametrize("name", ["v5-batchcq", "v5-lmq", "v5-default"])
def test_the_dispatch_rule_says_where_rocketmq_put_each_unit(name):
    """Dispatch (what the audit's families ask instead of naming a queue kind), against RocketMQ's own read-back:
    a queue's part folder is the one its topic's messages are dispatched to (a BatchCQ queue's ``batchconsumequeue``),
    every message of a queue is dispatched to that folder and no other, and a queue holds copies exactly when its
    units point at records of another topic (the multi-dispatch)."""
    import pyarrow as pa

    from store_format.queues import Dispatch

    with open(FIXTURES_5X / name / "manifest.json", encoding="utf-8") as f:
        m = json.load(f)
    d = Dispatch.of(Store(FIXTURES_5X / name / "store"))
    record_topic = {r["commitLogOffset"]: r["topic"] for r in m["messages"]}
    folders = {"BatchCQ": BATCH.folder, "SimpleCQ": FILE.folder}
    for q in m["consumeQueues"]:
        folder = folders[q["cqType"]]
        others = {record_topic[e[1]] for e in q[ENTRIES]} - {q["topic"]}
        copy = bool(d.copies(pa.array([q["topic"]]))[0])
        assert copy == bool(others), q["topic"]
        if not copy:
            assert d.folder_of(q["topic"]) == folder and d.dispatches_to(folder)
            for f in folders.values():
                assert d.own_units_in(f, [q["topic"]]).tolist() == [f == folder], (q["topic"], f)
    assert d.multi and d.copies_held == (name == "v5-lmq")  # any 5.x store's records may carry dispatch lists
    assert d.dispatches_to(BATCH.folder) == (name == "v5-batchcq")
