"""StoreWriter at the stored-record level: byte-identical with RocketMQ's own stores, and every rule of
CommitLog + dispatch (rolling, queue offsets, consume queues, index files, checkpoint, configs, refusals)."""
from __future__ import annotations

import json
import os
import struct
import subprocess
import sys

import numpy as np
import pytest

from store_format import layout as L
from store_format.write.bulk import RecordBatch, append_many
from store_format.checkpoint import read_checkpoint
from store_format.commitlog import list_segments
from store_format.config import consumer_offsets, read_config, subscription_groups, topic_configs
from store_format.consumequeue import read_units, list_queue_files
from store_format.errors import WriterError
from store_format.ids import create_uniq_key, create_uniq_keys
from store_format.indexfile import IndexFile
from store_format.javahash import JavaHashMap, index_key, index_key_hash, java_hash, java_hash_many, java_map_bucket
from store_format.message import Message
from store_format.properties import parse_properties
from store_format.store import Store
from store_format.write.writer import StoreWriter, WriterConfig, time_millis_to_human, validate_topic

from .conftest import REPO
from .support.writer_support import fixture_config, files, manifest_record, replay_fixture, tree_digest


# --------------------------------------------------------------------------------------------------
# Golden: the fixtures' own messages, appended as stored records, give RocketMQ's bytes back


def test_fixture_replay_is_byte_identical(fixture, tmp_path):
    name, src, manifest = fixture
    out = tmp_path / "store"
    w, stored = replay_fixture(name, manifest, out)
    assert [(m.physical_offset, m.queue_offset, m.store_size, m.body_crc) for m in stored] == \
        [(x["commitLogOffset"], x["queueOffset"], x["storeSize"], x["bodyCRC"]) for x in manifest["messages"]]
    w.close()
    # commitlog segments and every consume-queue file: same names, same bytes
    for sub in ("commitlog", "consumequeue"):
        ours, theirs = files(out, sub), files(src, sub)
        assert [p.relative_to(out) for p in ours] == [p.relative_to(src) for p in theirs]
        for a, b in zip(ours, theirs):
            assert a.read_bytes() == b.read_bytes(), a.relative_to(out)
    # index files: contents in order (names come from the clock)
    ours, theirs = files(out, "index"), files(src, "index")
    assert len(ours) == len(theirs) == len(manifest["indexFiles"])
    for a, b in zip(ours, theirs):
        assert a.read_bytes() == b.read_bytes()
    # checkpoint: what the reader parses equals RocketMQ's values
    cp, exp = read_checkpoint(out / "checkpoint"), manifest["checkpoint"]
    assert (cp.physic_msg_timestamp, cp.logics_msg_timestamp, cp.index_msg_timestamp, cp.file_length) == \
        (exp["physicMsgTimestamp"], exp["logicsMsgTimestamp"], exp["indexMsgTimestamp"], exp["fileLength"])
    assert (out / "checkpoint").read_bytes() == (src / "checkpoint").read_bytes()
    # clean shutdown like the fixtures: lock file "lock", no abort
    assert (out / "lock").read_bytes() == (src / "lock").read_bytes() == b"lock"
    assert not (out / "abort").exists() and not manifest["abortFileExists"]
    # delayOffset.json is byte-identical (the writer saw the delayed message delivered)
    assert (out / "config" / "delayOffset.json").read_text() == manifest["configFiles"]["delayOffset.json"]


def test_fixture_replay_topic_and_group_configs_match_the_broker(tmp_path):
    """The broker fixture's topics.json / subscriptionGroup.json follow from its records: auto-created
    topics (4 queues), REAL_TOPICs created before the move, 1-queue retry/DLQ/half topics, the op topic
    never registered, the consumer group from its retry topic; only the data-version clocks differ."""
    from .conftest import fixture_manifest, fixture_store
    manifest, src = fixture_manifest("broker"), fixture_store("broker")
    w, _ = replay_fixture("broker", manifest, tmp_path / "s")
    for q, o in {0: 1, 1: 2, 2: 3, 3: 4}.items():
        w.commit_offset("cg-broker", "BrokerTopic", q, o)
    w.close()
    for name in ("topics.json", "subscriptionGroup.json"):
        ours, theirs = read_config(tmp_path / "s" / "config", name), read_config(src / "config", name)
        assert ours.data["dataVersion"]["counter"] == theirs.data["dataVersion"]["counter"]
        # the text is fastjson's byte for byte once the clock value is the same
        text = (tmp_path / "s" / "config" / name).read_text().replace(
            str(ours.data["dataVersion"]["timestamp"]), str(theirs.data["dataVersion"]["timestamp"]))
        assert text == manifest["configFiles"][name]
    assert topic_configs(read_config(tmp_path / "s" / "config", "topics.json")) == \
        topic_configs(read_config(src / "config", "topics.json"))
    assert subscription_groups(read_config(tmp_path / "s" / "config", "subscriptionGroup.json")) == \
        subscription_groups(read_config(src / "config", "subscriptionGroup.json"))
    for name in ("consumerOffset.json", "delayOffset.json", "consumerFilter.json"):
        assert (tmp_path / "s" / "config" / name).read_text() == manifest["configFiles"][name]


def test_bulk_path_matches_scalar_path(fixture, tmp_path):
    """The vectorized append_many and the scalar append give the same store, at the fixture's geometry
    and at one small enough to roll segments, consume-queue files and index files."""
    name, _, manifest = fixture
    msgs = [manifest_record(x) for x in manifest["messages"]]
    sizes = [x["storeSize"] for x in manifest["messages"]]
    segment = max(max(sizes) + 8, sum(sizes) // 3)  # forces rolls, still holds the largest record
    for geometry in ({}, {"mappedFileSizeCommitLog": segment, "mappedFileSizeConsumeQueue": 60, "maxIndexNum": 7,
                          "maxHashSlotNum": 3}):
        cfg = fixture_config(manifest, **geometry)
        roots = []
        for mode in ("scalar", "bulk"):
            root = tmp_path / f"{mode}{len(geometry)}"
            w = StoreWriter(root, cfg)
            if mode == "scalar":
                for m in msgs:
                    w.append(m)
            else:
                append_many(w, RecordBatch.from_messages(msgs))
            w.close()
            roots.append(root)
        a, b = (tree_digest(r) for r in roots)
        assert a.keys() == b.keys() and a == b
        if geometry:
            assert len(list_segments(roots[0] / "commitlog")) > 1 and len(files(roots[0], "index")) > 1


# --------------------------------------------------------------------------------------------------
# CommitLog rules


def _msg(topic="T", body=b"x", qid=0, ts=1_700_000_000_000, props="", sys_flag=0, **kw) -> Message:
    return Message(topic=topic, body=body, queue_id=qid, properties_raw=props, sys_flag=sys_flag,
                   born_timestamp=ts - 1, born_host="10.0.0.1:4000", store_timestamp=ts,
                   store_host="10.0.0.2:10911", **kw)


def test_segment_roll_follows_len_plus_8(tmp_path):
    seg = 1000
    w = StoreWriter(tmp_path / "s", WriterConfig(mappedFileSizeCommitLog=seg))
    size = w.append(_msg(body=b"a" * 9)).store_size  # 91 + 9 + 1 = 101
    assert size == L.MIN_RECORD_SIZE + 9 + 1
    # fill so that the next record leaves exactly 8 bytes: it must still fit
    body = seg - 8 - size - (L.MIN_RECORD_SIZE + 1)
    fits = w.append(_msg(body=b"b" * body))
    assert fits.physical_offset == size and fits.physical_offset + fits.store_size == seg - 8
    nxt = w.append(_msg(body=b""))  # 92 bytes, 8 left: rolls
    assert nxt.physical_offset == seg and nxt.file_position == 0
    w.close()
    segs = list_segments(tmp_path / "s" / "commitlog")
    assert [s.name for s in segs] == ["00000000000000000000", "00000000000000001000"]
    assert all(s.length == seg for s in segs)  # preallocated to full size
    frames = list(Store(tmp_path / "s").walk_commitlog())
    blank = [f for f in frames if f.kind == "blank"]
    assert len(blank) == 1 and blank[0].file_position == seg - 8 and blank[0].size == 8
    raw = (tmp_path / "s" / "commitlog" / segs[0].name).read_bytes()
    assert raw[seg - 8:] == struct.pack(">ii", 8, L.BLANK_MAGIC)


def test_one_byte_more_rolls_with_a_blank_of_the_rest(tmp_path):
    seg = 1000
    w = StoreWriter(tmp_path / "s", WriterConfig(mappedFileSizeCommitLog=seg))
    first = w.append(_msg(body=b"a" * 9))
    big = w.append(_msg(body=b"b" * (seg - 8 - first.store_size - L.MIN_RECORD_SIZE - 1 + 1)))
    assert big.physical_offset == seg  # len + 8 > remaining by one byte
    w.close()
    raw = (tmp_path / "s" / "commitlog" / "00000000000000000000").read_bytes()
    left = seg - first.store_size
    assert struct.unpack_from(">ii", raw, first.store_size) == (left, L.BLANK_MAGIC)
    assert raw[first.store_size + 8:] == bytes(left - 8)  # nothing else written


def test_segments_are_sparse(tmp_path):
    w = StoreWriter(tmp_path / "s", WriterConfig(mappedFileSizeCommitLog=64 << 20))
    w.append(_msg())
    w.close()
    st = os.stat(tmp_path / "s" / "commitlog" / "00000000000000000000")
    assert st.st_size == 64 << 20 and st.st_blocks * 512 < 1 << 20


def test_queue_offsets_and_transaction_types(tmp_path):
    w = StoreWriter(tmp_path / "s", WriterConfig())
    kinds = [L.TRANSACTION_NOT_TYPE, L.TRANSACTION_PREPARED_TYPE, L.TRANSACTION_COMMIT_TYPE,
             L.TRANSACTION_ROLLBACK_TYPE, L.TRANSACTION_NOT_TYPE]
    stored = [w.append(_msg(topic="Tx", sys_flag=k, props=f"UNIQ_KEY\x01U{i}\x02KEYS\x01k{i}"))
              for i, k in enumerate(kinds)]
    assert [m.queue_offset for m in stored] == [0, 0, 1, 0, 2]  # PREPARED/ROLLBACK: 0, not counted
    w.close()
    st = Store(tmp_path / "s")
    units = list(st.consume_queue("Tx", 0))
    assert [u.physical_offset for u in units] == [stored[i].physical_offset for i in (0, 2, 4)]
    for i, m in enumerate(stored):
        hits = st.index_candidates("Tx", f"k{i}")
        # ROLLBACK is never indexed; PREPARED is
        assert hits == ([] if kinds[i] == L.TRANSACTION_ROLLBACK_TYPE else [m.physical_offset])


def test_schedule_topic_tags_code_is_the_deliver_time(tmp_path):
    w = StoreWriter(tmp_path / "s", WriterConfig(messageDelayLevel="1s 5s 10s"))
    ts = 1_700_000_000_000
    w.append(_msg(topic=L.SCHEDULE_TOPIC, qid=1, ts=ts, props="DELAY\x012\x02TAGS\x01TagA\x02REAL_TOPIC\x01T"))
    w.append(_msg(topic=L.SCHEDULE_TOPIC, qid=2, ts=ts, props="DELAY\x0199\x02REAL_TOPIC\x01T"))  # clamped to 3
    w.append(_msg(topic="T", ts=ts, props="DELAY\x012\x02TAGS\x01TagA"))  # not the schedule topic: tags hash
    w.close()
    st = Store(tmp_path / "s")
    assert [u.tags_code for u in st.consume_queue(L.SCHEDULE_TOPIC, 1)] == [ts + 5000]
    assert [u.tags_code for u in st.consume_queue(L.SCHEDULE_TOPIC, 2)] == [ts + 10000]
    assert [u.tags_code for u in st.consume_queue("T", 0)] == [java_hash("TagA")]


# --------------------------------------------------------------------------------------------------
# Consume queues


def test_consume_queue_files_roll_and_size_rounds_up_to_units(tmp_path):
    cfg = WriterConfig(mappedFileSizeConsumeQueue=90)  # rounds up to 100 = 5 units
    assert cfg.mappedFileSizeConsumeQueue == 100
    w = StoreWriter(tmp_path / "s", cfg)
    stored = [w.append(_msg(props=f"TAGS\x01t{i % 2}")) for i in range(12)]
    w.close()
    qfiles = list_queue_files(tmp_path / "s" / "consumequeue" / "T" / "0", "T", 0)
    assert [f.path.name for f in qfiles] == [f"{b:020d}" for b in (0, 100, 200)]
    assert all(f.length == 100 for f in qfiles)
    units = list(Store(tmp_path / "s").consume_queue("T", 0))
    assert [(u.queue_offset, u.physical_offset, u.size, u.tags_code) for u in units] == \
        [(i, m.physical_offset, m.store_size, java_hash(f"t{i % 2}")) for i, m in enumerate(stored)]


@pytest.mark.parametrize("start", [3, 7])
def test_queue_starting_mid_file_is_pre_blank_filled(tmp_path, start):
    w = StoreWriter(tmp_path / "s", WriterConfig(mappedFileSizeConsumeQueue=100), queue_offsets={("T", 0): start})
    m = w.append(_msg())
    assert m.queue_offset == start
    w.close()
    qfiles = list_queue_files(tmp_path / "s" / "consumequeue" / "T" / "0", "T", 0)
    base = start * 20 - start * 20 % 100
    assert [f.base_byte_offset for f in qfiles] == [base]
    units = list(read_units(qfiles[0]))
    pre = (start * 20 % 100) // 20
    assert [u.kind for u in units] == ["pre_blank"] * pre + ["entry"]
    assert [(u.physical_offset, u.size, u.tags_code) for u in units[:pre]] == [(0, 0x7FFFFFFF, 0)] * pre
    assert (units[-1].queue_offset, units[-1].physical_offset) == (start, m.physical_offset)


# --------------------------------------------------------------------------------------------------
# Index files


def test_index_keys_chains_and_new_file_header(tmp_path):
    cfg = WriterConfig(maxHashSlotNum=2, maxIndexNum=4)  # 3 usable entries per file
    w = StoreWriter(tmp_path / "s", cfg)
    t0 = 1_700_000_000_000
    stored = [w.append(_msg(ts=t0 + 1500 * i, props=f"UNIQ_KEY\x01U{i}\x02KEYS\x01 a{i}  shared ")) for i in range(4)]
    w.close()
    paths = files(tmp_path / "s", "index")
    # 12 keys (UNIQ_KEY + 2 keys each), 3 per file; names: store time of the record that needed the file
    assert len(paths) == 4
    assert paths[0].name == time_millis_to_human(t0, "UTC") == "20231114221320000"
    assert [p.name for p in paths] == [time_millis_to_human(t0 + 1500 * i, "UTC") for i in range(4)]
    f0, f1 = IndexFile(paths[0], 2, 4), IndexFile(paths[1], 2, 4)
    # first file: begin = first entry; the first entry's timeDiff is 0 (beginTimestamp was 0)
    assert (f0.header.begin_timestamp, f0.header.begin_phy_offset, f0.header.index_count) == (t0, 0, 4)
    e = list(f0.entries())
    assert [x.key_hash for x in e] == [index_key_hash(index_key("T", k)) for k in ("U0", "a0", "shared")]
    assert [x.time_diff for x in e] == [0, 0, 0]
    # second file: created from the first one's end, the first entry timed against it (1.5 s -> 1),
    # then the header's begin moves to that entry
    e1 = list(f1.entries())
    assert f1.header.begin_timestamp == t0 + 1500 and e1[0].time_diff == 1
    assert f1.header.begin_phy_offset == stored[1].physical_offset
    # chains: the slot holds the newest entry, prev points to the older one with the same slot
    for f in (f0, f1):
        for slot, head in f.slots():
            assert 1 <= head < f.header.index_count
    # every key is found through the reader, across files
    st = Store(tmp_path / "s", hash_slot_num=2, index_num=4)
    for i, m in enumerate(stored):
        assert st.index_candidates("T", f"U{i}") == [m.physical_offset]
        assert [x.physical_offset for x in st.query_key("T", f"a{i}")] == [m.physical_offset]
    assert sorted(x.physical_offset for x in st.query_key("T", "shared")) == [m.physical_offset for m in stored]
    # the last full file's end time is the checkpoint's indexMsgTimestamp
    last_full = IndexFile(paths[2], 2, 4).header.end_timestamp
    assert read_checkpoint(tmp_path / "s" / "checkpoint").index_msg_timestamp == last_full


def test_index_file_names_never_collide(tmp_path):
    w = StoreWriter(tmp_path / "s", WriterConfig(maxHashSlotNum=2, maxIndexNum=2))  # one entry per file
    for i in range(3):
        w.append(_msg(ts=1_700_000_000_000, props=f"UNIQ_KEY\x01U{i}"))  # same millisecond
    w.close()
    assert [p.name for p in files(tmp_path / "s", "index")] == ["20231114221320000", "20231114221320001",
                                                                 "20231114221320002"]


def test_index_disabled(tmp_path):
    w = StoreWriter(tmp_path / "s", WriterConfig(messageIndexEnable=False))
    w.append(_msg(props="UNIQ_KEY\x01U"))
    w.close()
    assert files(tmp_path / "s", "index") == []


# --------------------------------------------------------------------------------------------------
# Checkpoint, shutdown, crash, reopen


def test_async_flush_model_sets_physic_at_thorough_flushes(tmp_path):
    t0 = 1_700_000_000_000
    w = StoreWriter(tmp_path / "s", WriterConfig(), start_time=t0)
    for dt in (100, 400, 600, 9000, 11000):  # thorough flushes at t0+500 and t0+10500
        w.append(_msg(ts=t0 + dt))
    w.close()
    cp = read_checkpoint(tmp_path / "s" / "checkpoint")
    assert (cp.physic_msg_timestamp, cp.logics_msg_timestamp, cp.index_msg_timestamp) == (t0 + 9000, t0 + 11000, 0)
    w = StoreWriter(tmp_path / "sync", WriterConfig(flushDiskType="SYNC_FLUSH"), start_time=t0)
    w.append(_msg(ts=t0 + 100))
    w.close()
    assert read_checkpoint(tmp_path / "sync" / "checkpoint").physic_msg_timestamp == t0 + 100


def test_crash_leaves_abort_stale_checkpoint_and_next_segment(tmp_path):
    t0 = 1_700_000_000_000
    w = StoreWriter(tmp_path / "s", WriterConfig(mappedFileSizeCommitLog=1 << 20), start_time=t0)
    assert (tmp_path / "s" / "abort").exists()  # from the first moment on, until a clean close
    for dt in (100, 2000, 5000):  # the consume-queue flush at t0+1000 wrote the checkpoint to disk
        w.append(_msg(ts=t0 + dt))
    w.crash()
    cp = read_checkpoint(tmp_path / "s" / "checkpoint")
    assert (cp.physic_msg_timestamp, cp.logics_msg_timestamp) == (t0 + 100, t0 + 100)  # stale: not t0+5000
    assert (tmp_path / "s" / "abort").exists()
    segs = list_segments(tmp_path / "s" / "commitlog")
    assert [s.base_offset for s in segs] == [0, 1 << 20]
    assert not any(segs[1].path.read_bytes())  # preallocated, never written
    assert len(list(Store(tmp_path / "s").messages())) == 3  # the page cache survived the kill


def test_a_crashed_store_reopens_and_continues(tmp_path):
    cfg = WriterConfig(mappedFileSizeCommitLog=4096)
    w = StoreWriter(tmp_path / "s", cfg)
    first = [w.append(_msg(body=b"a" * 10)) for _ in range(3)]
    w.crash()
    assert len(list_segments(tmp_path / "s" / "commitlog")) == 2  # with the preallocated, empty next one
    with StoreWriter(tmp_path / "s", cfg, append=True) as w2:
        more = w2.append(_msg(body=b"b"))
    assert more.physical_offset == first[-1].physical_offset + first[-1].store_size
    assert len(list_segments(tmp_path / "s" / "commitlog")) == 1  # the empty segment was dropped
    assert [m.queue_offset for m in Store(tmp_path / "s").messages()] == [0, 1, 2, 3]
    assert not (tmp_path / "s" / "abort").exists()


def test_exception_inside_with_block_is_not_a_clean_shutdown(tmp_path):
    with pytest.raises(RuntimeError):
        with StoreWriter(tmp_path / "s", WriterConfig()) as w:
            w.append(_msg())
            raise RuntimeError("interrupted")
    assert (tmp_path / "s" / "abort").exists()
    with StoreWriter(tmp_path / "ok", WriterConfig()) as w:
        w.append(_msg())
    assert not (tmp_path / "ok" / "abort").exists()


def _reopen_case(tmp_path, name, mutate=None):
    msgs = [_msg(topic=f"T{i % 3}", qid=i % 2, ts=1_700_000_000_000 + i, props=f"UNIQ_KEY\x01U{i}\x02KEYS\x01k{i}")
            for i in range(40)]
    cfg = WriterConfig(mappedFileSizeCommitLog=4000, mappedFileSizeConsumeQueue=100, maxIndexNum=30, maxHashSlotNum=7)
    root = tmp_path / name
    with StoreWriter(root, cfg) as w:
        stored = [w.append(m) for m in msgs[:25]]
    if mutate:
        mutate(root)
    with pytest.raises(WriterError, match="not empty"):
        StoreWriter(root, cfg)
    with StoreWriter(root, cfg, append=True) as w:
        assert w.queue_table[("T1", 1)] == 4  # i = 1, 7, 13, 19
        stored += [w.append(m) for m in msgs[25:]]
    return msgs, cfg, root, stored


def test_reopen_with_append_continues_where_the_store_ends(tmp_path):
    msgs, cfg, two, stored = _reopen_case(tmp_path, "two")
    with StoreWriter(tmp_path / "one", cfg) as w:
        one = [w.append(m) for m in msgs]
    assert [(m.physical_offset, m.queue_offset) for m in stored] == [(m.physical_offset, m.queue_offset) for m in one]
    a, b = tree_digest(tmp_path / "one"), tree_digest(two)
    assert {k: v for k, v in a.items() if not k.startswith("config/")} == \
        {k: v for k, v in b.items() if not k.startswith("config/")}


def test_reopen_after_deleting_consumequeue_rebuilds_it(tmp_path):
    """The operator's rebuild: delete consumequeue/, restart.  Queues come back identical; the index gets
    the last record's keys again, because re-dispatch re-adds an entry at the index's endPhyOffset."""
    import shutil
    msgs, cfg, two, stored = _reopen_case(tmp_path, "two", lambda root: shutil.rmtree(root / "consumequeue"))
    with StoreWriter(tmp_path / "one", cfg) as w:
        for m in msgs:
            w.append(m)
    assert [p.read_bytes() for p in files(tmp_path / "one", "consumequeue")] == \
        [p.read_bytes() for p in files(two, "consumequeue")]
    st1 = Store(tmp_path / "one", hash_slot_num=7, index_num=30)
    st2 = Store(two, hash_slot_num=7, index_num=30)
    for m in stored:
        want = st1.index_candidates(m.topic, m.uniq_key)
        got = st2.index_candidates(m.topic, m.uniq_key)
        assert got == (want * 2 if m is stored[24] else want)


def test_reopen_with_the_wrong_geometry_is_refused_and_releases_the_lock(tmp_path):
    with StoreWriter(tmp_path / "s", WriterConfig(mappedFileSizeCommitLog=4096)) as w:
        w.append(_msg())
    with pytest.raises(WriterError, match="mappedFileSizeCommitLog"):
        StoreWriter(tmp_path / "s", WriterConfig(mappedFileSizeCommitLog=8192), append=True)
    assert (tmp_path / "s" / "abort").exists()  # never claims a clean shutdown after a failed start
    StoreWriter(tmp_path / "s", WriterConfig(mappedFileSizeCommitLog=4096), append=True).close()
    assert not (tmp_path / "s" / "abort").exists()


def test_a_second_writer_is_locked_out(tmp_path):
    w = StoreWriter(tmp_path / "s", WriterConfig())
    with pytest.raises(WriterError, match="locked"):
        StoreWriter(tmp_path / "s", WriterConfig(), append=True)
    w.close()
    StoreWriter(tmp_path / "s", WriterConfig(), append=True).close()


# --------------------------------------------------------------------------------------------------
# Refused input


@pytest.mark.parametrize("topic", ["../x", "a/b", "..", "", "  ", "x" * 128, "a b", "t\x00", "café", "a\\b"])
def test_bad_topics_are_refused_and_nothing_escapes_the_root(tmp_path, topic):
    before = sorted(p.name for p in tmp_path.iterdir())
    root = tmp_path / "s"
    w = StoreWriter(root, WriterConfig())
    with pytest.raises(WriterError) as e:
        w.append(_msg(topic=topic))
    assert e.value.field == "topic"
    with pytest.raises(WriterError):
        w.commit_offset("g", topic, 0, 1)
    w.close()
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(before + ["s"])
    assert list((root / "consumequeue").iterdir()) == [] and not list(root.rglob("x"))


def test_a_symlink_out_of_the_root_is_refused(tmp_path):
    outside = tmp_path / "outside"
    outside.mkdir()
    root = tmp_path / "s"
    root.mkdir()
    (root / "consumequeue").symlink_to(outside)
    with pytest.raises(WriterError, match="outside the store root"):
        StoreWriter(root, WriterConfig(), append=True)
    assert list(outside.iterdir()) == []


def test_valid_topic_charset():
    for t in ("%RETRY%group-1", "%DLQ%g_2", "a|b", "T" * 127, L.SCHEDULE_TOPIC):
        validate_topic(t)


def test_oversized_records_are_refused_with_a_clear_error(tmp_path):
    w = StoreWriter(tmp_path / "s", WriterConfig(mappedFileSizeCommitLog=4096, maxMessageSize=3000))
    with pytest.raises(WriterError, match="maxMessageSize"):
        w.append(_msg(body=b"x" * 3001))
    w2 = StoreWriter(tmp_path / "s2", WriterConfig(mappedFileSizeCommitLog=1000))
    with pytest.raises(WriterError, match="segment holds at most 992"):
        w2.append(_msg(body=b"x" * 950))
    with pytest.raises(WriterError, match="properties"):
        w2.append(_msg(props="k\x01" + "v" * 40000))
    with pytest.raises(WriterError, match="IPv6"):
        w2.append(_msg(sys_flag=L.BORNHOST_V6_FLAG))
    with pytest.raises(WriterError, match="queue id"):
        w2.append(_msg(qid=-1))
    w.close()
    w2.close()
    assert list(Store(tmp_path / "s").messages()) == []


def test_writing_into_a_non_empty_root_is_refused(tmp_path):
    (tmp_path / "s").mkdir()
    (tmp_path / "s" / "something").write_text("x")
    with pytest.raises(WriterError, match="not empty"):
        StoreWriter(tmp_path / "s", WriterConfig())
    assert sorted(p.name for p in (tmp_path / "s").iterdir()) == ["something"]


# --------------------------------------------------------------------------------------------------
# Configuration


def test_config_from_broker_conf_file(tmp_path):
    conf = tmp_path / "broker.conf"
    conf.write_text("# store\nbrokerClusterName = C1\nbrokerName=b1\nbrokerIP1=10.1.1.1\nlistenPort=30911\n"
                    "mappedFileSizeCommitLog=1048576\nmappedFileSizeConsumeQueue=1001\nmessageIndexEnable=false\n"
                    "deleteWhen=04\nmessageDelayLevel=1s 2s\n")
    cfg = WriterConfig.from_file(conf)
    assert (cfg.brokerClusterName, cfg.brokerName, cfg.storeHost, cfg.mappedFileSizeCommitLog,
            cfg.mappedFileSizeConsumeQueue, cfg.messageIndexEnable, cfg.max_delay_level) == \
        ("C1", "b1", "10.1.1.1:30911", 1048576, 1020, False, 2)
    defaults = WriterConfig()
    assert (defaults.mappedFileSizeCommitLog, defaults.mappedFileSizeConsumeQueue, defaults.maxHashSlotNum,
            defaults.maxIndexNum, defaults.maxMessageSize) == (1 << 30, 6_000_000, 5_000_000, 20_000_000, 4 << 20)
    for bad in ("mappedFileSizeCommitLog=abc", "messageIndexEnable=maybe", "enableConsumeQueueExt=maybe",
                "storeHost=nowhere", "messageDelayLevel=1x"):
        conf.write_text(bad + "\n")
        with pytest.raises(WriterError):
            WriterConfig.from_file(conf)


def test_config_files_are_fastjson_and_reader_parses_them(tmp_path):
    w = StoreWriter(tmp_path / "s", WriterConfig(brokerClusterName="C1", brokerName="b1"))
    w.append(_msg(topic="Orders", qid=5))
    w.commit_offset("g1", "Orders", 5, 1)
    w.commit_offset("g1", "Orders", 0, 0)
    w.close()
    d = tmp_path / "s" / "config"
    text = (d / "consumerOffset.json").read_text()
    assert text == '{\n\t"offsetTable":{\n\t\t"Orders@g1":{0:0,5:1\n\t\t}\n\t}\n}'
    assert consumer_offsets(read_config(d, "consumerOffset.json")) == {("Orders", "g1"): {0: 0, 5: 1}}
    topics = topic_configs(read_config(d, "topics.json"))
    assert topics["Orders"]["writeQueueNums"] == 6  # widened to hold queue 5
    assert {"C1", "b1", "C1_REPLY_TOPIC", "TBW102", L.SCHEDULE_TOPIC} <= set(topics)
    assert "g1" not in subscription_groups(read_config(d, "subscriptionGroup.json"))  # a commit alone makes none
    # a second persist keeps the previous file as .bak (MixAll.string2File)
    with StoreWriter(tmp_path / "s", WriterConfig(brokerClusterName="C1", brokerName="b1"), append=True) as w2:
        w2.append(_msg(topic="Other"))
    assert "Other" not in (d / "topics.json.bak").read_text() and "Other" in (d / "topics.json").read_text()


# --------------------------------------------------------------------------------------------------
# Java semantics the writer leans on


def test_java_hashmap_order_reproduces_every_fixture_properties_string(fixture):
    _, _, manifest = fixture
    checked = 0
    for x in manifest["messages"]:
        s = x["propertiesString"]
        keys = [kv.split("\x01")[0] for kv in s.split("\x02")] if s else []
        if len(set(keys)) != len(keys):
            continue  # batch records: two strings concatenated
        bins = [java_map_bucket(k, 16 if len(keys) <= 12 else 32) for k in keys]
        # the order comes from the bins; insertion order only matters inside a shared bin
        order = keys if len(set(bins)) < len(bins) else list(reversed(keys))
        m = JavaHashMap((k, "v") for k in order)
        assert m.keys() == keys, s
        checked += 1
    assert checked >= 20


def test_bulk_hashes_and_uniq_keys_equal_the_scalar_ones():
    import random
    rnd = random.Random(7)
    strings = ["", "a", "TagA", "你好", "😀", "polygenelubricants"] + \
        ["".join(rnd.choice("ab中😀#%") for _ in range(rnd.randint(0, 40))) for _ in range(300)]
    assert java_hash_many(strings).tolist() == [java_hash(s) for s in strings]
    ts = np.array([1_700_000_000_000, 1_706_745_599_999, 1_706_745_600_000])  # across a month start
    ip = bytes([10, 0, 0, 1])
    assert create_uniq_keys(ip, 7, 99, ts, [0, 1, 65535]) == \
        [create_uniq_key(ip, 7, 99, int(t), c) for t, c in zip(ts, [0, 1, 65535])]


# --------------------------------------------------------------------------------------------------
# Command line (python -m store_format generate / write)


def run_cli(*args, stdin=None):
    return subprocess.run([sys.executable, "-m", "store_format", *map(str, args)], cwd=REPO, input=stdin,
                          capture_output=True, text=True, timeout=120)


@pytest.mark.slow
def test_cli_generate_is_seeded_and_readable(tmp_path):
    conf = tmp_path / "broker.conf"
    conf.write_text("mappedFileSizeConsumeQueue=6000\nmaxHashSlotNum=500\nmaxIndexNum=2000\n")
    args = ("--messages", 4000, "--topics", 3, "--queues", 2, "--seed", 9, "--segment-size", 500_000, "--config", conf)
    r = run_cli("generate", tmp_path / "a", *args)
    assert r.returncode == 0, r.stderr
    assert "generate: 4000/4000 messages" in r.stderr and "msg/s" in r.stderr
    assert run_cli("generate", tmp_path / "b", *args).returncode == 0
    assert tree_digest(tmp_path / "a") == tree_digest(tmp_path / "b")
    st = Store(tmp_path / "a")
    assert len(list(st.messages())) == 4000 and len(st.segments) > 1
    assert {t for t, _ in st.queues} >= {"Topic000", "Topic001", "Topic002"}
    r = run_cli("generate", tmp_path / "a", *args)  # not into a non-empty directory
    assert r.returncode == 2 and "not empty" in r.stderr
    r = run_cli("generate", tmp_path / "c", "--messages", 500, "--crash", "--quiet", "--config", conf)
    assert r.returncode == 0 and (tmp_path / "c" / "abort").exists() and r.stderr.count("\n") == 1
    # --cover: every queue and every flow's topic, even in a few hundred messages
    r = run_cli("generate", tmp_path / "d", "--messages", 300, "--topics", 2, "--queues", 3, "--rate", 10, "--cover",
                "--quiet", "--config", conf)
    assert r.returncode == 0, r.stderr
    assert {t for t, _ in Store(tmp_path / "d").queues} == {"Topic000", "Topic001", L.SCHEDULE_TOPIC,
                                                            L.TRANS_HALF_TOPIC, L.TRANS_OP_HALF_TOPIC} | {
        f"{prefix}cg-Topic00{t}" for prefix in ("%RETRY%", "%DLQ%") for t in (0, 1)}
    assert len(Store(tmp_path / "d").queues) == 2 * 3 + 5 + 2 + 4


@pytest.mark.slow
def test_cli_write_round_trips_a_dump(tmp_path):
    from .conftest import fixture_manifest, fixture_store
    manifest = fixture_manifest("basic")
    dump = run_cli("dump", fixture_store("basic"), "--what", "commitlog")
    lines = [x for x in dump.stdout.splitlines() if json.loads(x)["kind"] == "message"]
    (tmp_path / "in.jsonl").write_text("\n".join(lines) + "\n")
    conf = tmp_path / "broker.conf"
    conf.write_text("".join(f"{k}={v}\n" for k, v in manifest["storeConfig"].items()))
    r = run_cli("write", tmp_path / "s", "--input", tmp_path / "in.jsonl", "--config", conf)
    assert r.returncode == 0, r.stderr
    assert f"write: {len(manifest['messages'])} record(s)" in r.stderr
    src = fixture_store("basic")
    for sub in ("commitlog", "consumequeue"):
        assert [p.read_bytes() for p in files(tmp_path / "s", sub)] == [p.read_bytes() for p in files(src, sub)]
    assert [p.read_bytes() for p in files(tmp_path / "s", "index")] == [p.read_bytes() for p in files(src, "index")]
    # --append adds to it; --crash leaves it unclean
    extra = json.dumps({"topic": "Later", "body": "aGk=", "store_timestamp": 1795288560000})
    r = run_cli("write", tmp_path / "s", "--input", "-", "--config", conf, "--append", "--crash", stdin=extra + "\n")
    assert r.returncode == 0, r.stderr
    assert [m.body for m in Store(tmp_path / "s").messages()][-1] == b"hi" and (tmp_path / "s" / "abort").exists()


@pytest.mark.slow
def test_cli_write_refuses_bad_lines_and_never_claims_a_clean_store(tmp_path):
    good = json.dumps({"topic": "T", "body": "eA==", "store_timestamp": 1})
    for bad, message in ((json.dumps({"topic": "../x", "body": ""}), "line 2: topic"),
                         ("{not json", "line 2"),
                         (json.dumps({"topic": "T", "born_host": "[::1]:5"}), "IPv6"),
                         (json.dumps({"body": "eA=="}), "missing field 'topic'")):
        root = tmp_path / f"s{len(message)}"
        r = run_cli("write", root, "--input", "-", stdin=f"{good}\n{bad}\n")
        assert r.returncode == 2 and message in r.stderr, r.stderr
        assert (root / "abort").exists()
        assert not (tmp_path / "x").exists()


def test_bulk_helpers_agree_with_their_scalar_definitions():
    """The vectorized helpers the bulk path uses, against the scalar rules they stand in for."""
    import random
    from store_format.javahash import java_hash_tokens_joined
    from store_format.properties import property_value, split_keys
    rnd = random.Random(11)
    alphabet = ["a", "b", "ab", "\x01", "\x02", "中", "😀", " "]
    for _ in range(3000):
        raw = "".join(rnd.choice(alphabet) for _ in range(rnd.randint(0, 12)))
        parsed = parse_properties(raw)
        for name in ("a", "b", "ab", "中"):
            assert property_value(raw, name) == parsed.get(name), repr(raw)
    strings = ["".join(rnd.choice("ab 中😀") for _ in range(rnd.randint(0, 12))) for _ in range(500)]
    owner, h, ln = java_hash_tokens_joined("".join(strings), [len(s) for s in strings])
    assert list(zip(owner.tolist(), h.tolist(), ln.tolist())) == \
        [(i, java_hash(t), len(t.encode("utf-16-be")) // 2) for i, s in enumerate(strings) for t in split_keys(s)]
    levels = L.parse_delay_levels("1s 5s 10s")
    delays = [None, "0", "1", "3", "4", "99", "-2", "x"]
    ts = [1_700_000_000_000 + i for i in range(len(delays))]
    scalar = [Message(topic=L.SCHEDULE_TOPIC, properties={"TAGS": "t", **({"DELAY": d} if d is not None else {})},
                      store_timestamp=t).dispatch_tags_code(levels) for d, t in zip(delays, ts)]
    assert Message.schedule_tags_codes(delays, ts, [java_hash("t")] * len(delays), levels).tolist() == scalar


def test_bulk_property_columns_agree_with_property_value():
    """The bulk path reads REAL_TOPIC / REAL_QID / DELAY from all properties back to back in one buffer: the
    same values as ``property_value`` per record (segment starts, empty values, repeats, a key inside a value,
    a key cut by a record boundary, non-ASCII), and the same rows as ``needle in properties``; a block of
    strings with None gives the present rows, joined, and their lengths."""
    import random
    from store_format.write.bulk import _BLOCK, _present_joined, _Properties
    from store_format.properties import property_value
    rnd = random.Random(5)
    alphabet = ["a", "中", "\x01", "\x02", "RT", "RT\x01", "\x02RT\x01", "RT\x01x", "R", "T\x01b"]
    raws = ["".join(rnd.choice(alphabet) for _ in range(rnd.randint(0, 10))) for _ in range(3000)]
    encoded = [r.encode() for r in raws]
    props = _Properties(encoded, np.array([len(e) for e in encoded], np.int64))
    at, rec = props.occurrences(b"RT\x01")
    assert sorted(set(rec.tolist())) == [i for i, r in enumerate(raws) if "RT\x01" in r]
    expected = [property_value(r, "RT") for r in raws]
    for found in ((at, rec), None):
        table, ids = props.column("RT", found=found)
        assert [table[i] for i in ids.tolist()] == expected
    rows = np.array(sorted(rnd.sample(range(len(raws)), 700)))
    table, ids = props.column("RT", rows)
    assert [table[i] for i in ids.tolist()] == [expected[r] for r in rows.tolist()]
    strings = [None if rnd.random() < 0.2 else rnd.choice(["", "k", "中文", "😀x"]) for _ in range(2 * _BLOCK + 7)]
    rows, joined, lengths = _present_joined(strings)
    present = [i for i, s in enumerate(strings) if s is not None]
    assert rows.tolist() == present and joined == "".join(strings[i] for i in present)
    assert lengths.tolist() == [len(strings[i]) for i in present]
    assert _present_joined(["x"] * 3)[0].tolist() == [0, 1, 2] and _present_joined([])[1] == ""
