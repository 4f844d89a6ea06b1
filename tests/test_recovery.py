"""The recovery model against the fixtures (clean shutdown) and against copies damaged on purpose."""
from __future__ import annotations

import os
import shutil
import struct

import pytest

from store_format.recovery import predict_recovery
from store_format.store import Store

from .conftest import fixture_manifest, fixture_store

SEG = "00000000000000000000"



@pytest.mark.parametrize("name", ["basic", "broker"])
def test_clean_fixture_recovers_to_rocketmqs_max_offset(name):
    manifest = fixture_manifest(name)
    p = predict_recovery(Store(fixture_store(name)))
    assert p.mode == "normal" and p.will_start and not p.start_problems
    assert p.max_physical_offset == manifest["commitLogMaxOffset"]
    assert p.stop_kind == "END_OF_DATA" and p.dropped_messages == [] and p.cq_units_truncated == {}
    assert p.max_cq_physical_offset == max(q["maxPhysicOffset"] for q in manifest["consumeQueues"])


def test_bad_crc_truncates_there_and_drops_later_messages(basic_copy):
    root, manifest = basic_copy
    msgs = manifest["messages"]
    k = 40
    pos = msgs[k]["commitLogOffset"]
    with open(root / "commitlog" / SEG, "r+b") as f:
        f.seek(pos + 88)
        b = f.read(1)
        f.seek(pos + 88)
        f.write(bytes([b[0] ^ 0xFF]))
    p = predict_recovery(Store(root))
    assert p.max_physical_offset == pos and p.stop_kind == "BAD_CRC" and p.stop_position == pos
    assert [o for o, _ in p.dropped_messages] == [m["commitLogOffset"] for m in msgs[k + 1:]]
    expected = {}
    for q in manifest["consumeQueues"]:
        n = sum(1 for e in q["entries_[queueOffset,commitLogOffset,size,tagsCode]"] if e[1] >= pos)
        if n:
            expected[(q["topic"], q["queueId"])] = n
    assert p.cq_units_truncated == expected


def test_abort_file_means_abnormal_recovery_and_index_rebuild(basic_copy):
    root, manifest = basic_copy
    (root / "abort").write_bytes(b"")
    p = predict_recovery(Store(root))
    assert p.mode == "abnormal" and p.redispatch_from == 0 and p.start_segment == SEG
    # indexMsgTimestamp is 0 in the fixture: every index file is newer and is deleted at load
    assert p.index_files_deleted == [f["name"] for f in manifest["indexFiles"]]
    assert p.max_physical_offset == manifest["commitLogMaxOffset"]


def test_wrong_segment_length_means_the_broker_will_not_start(basic_copy):
    root, manifest = basic_copy
    seg = root / "commitlog" / SEG
    shutil.copy(seg, root / "commitlog" / f"{1048576:020d}")
    os.truncate(root / "commitlog" / f"{1048576:020d}", 4096)
    p = predict_recovery(Store(root))
    assert not p.will_start and "00000000000001048576" in p.start_problems[0]


def test_multi_segment_normal_recovery_starts_at_third_last(tmp_path):
    """Five segments of blank-terminated records: the walk begins at segment index 2 and ends in the last."""
    from store_format.codec import encode_blank, encode_record
    from store_format.message import Message
    size = 4096
    d = tmp_path / "store" / "commitlog"
    d.mkdir(parents=True)
    for i in range(5):
        base = i * size
        buf = bytearray(size)
        pos = 0
        for j in range(3):
            rec = encode_record(Message(topic="T", body=b"x" * 100, physical_offset=base + pos, store_timestamp=1000 + i))
            buf[pos:pos + len(rec)] = rec
            pos += len(rec)
        if i < 4:
            buf[pos:pos + 8] = encode_blank(size - pos)
        (d / f"{base:020d}").write_bytes(bytes(buf))
        last_end = base + pos
    p = predict_recovery(Store(tmp_path / "store"))
    assert p.start_segment == f"{2 * size:020d}" and p.max_physical_offset == last_end and p.will_start
