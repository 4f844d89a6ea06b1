"""ConsumeQueueExt (store-format.md §6.4, issue 30's proof of the contract): declared in store_format/layout.py, read
by store_format/consumequeue.py (every reader gives the ext unit's tagsCode, the address beside it), written by the
writer (``enableConsumeQueueExt``), damaged by store_format/write/damage.py, shown by the rocketmq-consumequeue
source's ``ext_offset`` column and audited by the consume-queue family."""
from __future__ import annotations

import struct

import numpy as np
import pyarrow.parquet as pq
import pytest

from jobs.audit import job as audit_job
from store_format import layout as L
from store_format.consumequeue import (discover_queues, ext_address, ext_files, ext_folder, ext_offset, read_ext_units,
                                       read_unit_arrays, read_units)
from store_format.write import damage as D
from store_format.write.generate import TrafficConfig, generate_store
from store_format.write.writer import WriterConfig

EXT_FILE = 4096  # small ext files, so every queue rolls several


@pytest.fixture(scope="module")
def stores(tmp_path_factory):
    """The same seeded traffic written twice: with ConsumeQueueExt and without."""
    base = tmp_path_factory.mktemp("cq-ext")
    for name, ext in (("ext", True), ("plain", False)):
        generate_store(base / name, TrafficConfig(messages=3000, topics=2, queues=2, seed=3),
                       WriterConfig(mappedFileSizeCommitLog=1 << 20, maxHashSlotNum=100, maxIndexNum=400,
                                    enableConsumeQueueExt=ext, mappedFileSizeConsumeQueueExt=EXT_FILE))
    return base


def test_the_layout_and_the_address_are_as_the_reference_says():
    """CqExtUnit.write: size (short) | tagsCode (long) | msgStoreTime (long) | bitMapSize (short) | bitmap;
    MIN_EXT_UNIT_SIZE 20; decorate(offset) = offset + Long.MIN_VALUE; isExtAddr(x) := x <= Integer.MIN_VALUE - 1."""
    assert L.CQ_EXT_UNIT.offsets == {"size": 0, "tags_code": 2, "msg_store_time": 10, "bitmap_size": 18}
    assert L.CQ_EXT_UNIT.struct == ">hqqh" and L.CQ_EXT_MIN_UNIT_SIZE == 20 and L.CQ_EXT_MAX_ADDR == -2147483649
    assert ext_address(0) == -2**63 and ext_offset(-2**63) == 0 and ext_offset(ext_address(12345)) == 12345
    assert ext_address(2**63 - 2**31 - 1) == L.CQ_EXT_MAX_ADDR  # MAX_REAL_OFFSET, the last address
    assert -2**31 > L.CQ_EXT_MAX_ADDR  # a tagsCode (a sign-extended int) is never an address


def test_every_reader_gives_the_ext_units_tags_code(stores):
    """Each unit of the ext store holds an address; every reader (bulk, scalar) gives the tagsCode the plain store
    holds, and the ext files roll with the end mark, as ConsumeQueueExt.put lays them."""
    ext, plain = discover_queues(stores / "ext" / "consumequeue"), discover_queues(stores / "plain" / "consumequeue")
    assert ext.keys() == plain.keys() and len(ext) >= 4
    rolled = 0
    for key, files in ext.items():
        a = [read_unit_arrays(f) for f in files]
        b = [read_unit_arrays(f) for f in plain[key]]
        for ua, ub in zip(a, b):
            assert (ua.tags_code == ub.tags_code).all() and ua.ext_found.all() and (ua.ext_offset >= 0).all()
            assert ub.ext_offset is None and (ua.physical_offset == ub.physical_offset).all()
        assert [(u.tags_code, u.ext_offset is not None) for f in files for u in read_units(f)] == \
            [(int(t), True) for u in a for t in u.tags_code]
        units = read_ext_units(ext_folder(files[0].path))
        assert not units.problems and sorted(units.offset.tolist()) == sorted(o for u in a for o in u.ext_offset)
        assert (units.size == L.CQ_EXT_MIN_UNIT_SIZE).all() and (units.bitmap_size == 0).all()
        found = ext_files(ext_folder(files[0].path))
        for loc, base, length in found[:-1]:  # every full file ends with -1 where the next unit did not fit
            raw = open(loc.path, "rb").read()
            end = int((units.offset[units.offset < base + length] + units.size[units.offset < base + length]).max())
            assert length == EXT_FILE and struct.unpack_from(">h", raw, end - base)[0] == -1
            assert EXT_FILE - (end - base) < L.CQ_EXT_MIN_UNIT_SIZE + L.CQ_EXT_END_BLANK
            rolled += 1
    assert rolled >= 4


def test_the_source_shows_the_address_beside_the_tags_code(spark, stores):
    import datasources

    datasources.register(spark)
    read = lambda name: {(r["topic"], r["queue_id"], r["queue_offset"]): r for r in  # noqa: E731
                         spark.read.format("rocketmq-consumequeue").load(str(stores / name)).collect()
                         if r["kind"] == "entry"}
    ext, plain = read("ext"), read("plain")
    assert ext.keys() == plain.keys()
    assert all(ext[k]["tags_code"] == plain[k]["tags_code"] and ext[k]["ext_offset"] is not None
               and plain[k]["ext_offset"] is None for k in ext)


def _audit(spark, store, out):
    result = audit_job.run(spark, audit_job.build_parser().parse_args(["--store", str(store), "--out", str(out),
                                                                       "--no-report"]))
    return result, pq.read_table(out / "findings").to_pylist()


def test_the_audit_of_an_ext_store_is_the_plain_ones_and_finds_each_damage(spark, stores, tmp_path):
    """The extension changes no finding; each damage is found by its check, at its place."""
    key = lambda f: (f["check"], f["topic"], f["queue_id"], f["queue_offset"], f["physical_offset"])  # noqa: E731
    _, plain = _audit(spark, stores / "plain", tmp_path / "plain")
    _, ext = _audit(spark, stores / "ext", tmp_path / "ext")
    assert sorted(map(key, ext)) == sorted(map(key, plain))

    d = D.cq_ext_dangling(stores / "ext", tmp_path / "dangling", "Topic000", 0)
    result, found = _audit(spark, tmp_path / "dangling", tmp_path / "o-dangling")
    [missing] = [f for f in found if f["check"] == "consumequeue.ext_unit_missing"]
    assert result.exit_code == 1 and d.path.endswith(missing["file"]) and missing["file_position"] == d.position - 12
    assert not [f for f in found if f["check"] == "consumequeue.tags_code_mismatch"]  # one cause, one finding

    d = D.cq_ext_orphan(stores / "ext", tmp_path / "orphan", "Topic000", 1)
    result, found = _audit(spark, tmp_path / "orphan", tmp_path / "o-orphan")
    [orphan] = [f for f in found if f["check"].startswith("consumequeue.ext_")]
    assert result.exit_code == 0 and orphan["check"] == "consumequeue.ext_unit_orphan"
    assert orphan["file"] == d.path and orphan["file_position"] == d.position and orphan["severity"] == "warning"

    d = D.cq_ext_bad_bitmap(stores / "ext", tmp_path / "bitmap", "Topic001", 0)
    result, found = _audit(spark, tmp_path / "bitmap", tmp_path / "o-bitmap")
    [corrupt] = [f for f in found if f["check"].startswith("consumequeue.ext_")]
    assert result.exit_code == 1 and corrupt["check"] == "consumequeue.ext_unit_corrupt"
    assert corrupt["file"] == d.path and corrupt["file_position"] == d.position - L.CQ_EXT_UNIT.offset("bitmap_size")
    assert "bitMapSize 8" in corrupt["message"]


def test_a_reopened_ext_store_continues_its_ext_files(stores, tmp_path):
    """The writer reopens a store with the extension where its last ext unit ends (ConsumeQueueExt.recover), so
    appending keeps every address right."""
    import shutil

    from store_format.message import Message
    from store_format.write.writer import StoreWriter

    root = tmp_path / "store"
    shutil.copytree(stores / "ext", root)
    before = {k: [u for f in fs for u in read_units(f)] for k, fs in discover_queues(root / "consumequeue").items()}
    cfg = WriterConfig(mappedFileSizeCommitLog=1 << 20, maxHashSlotNum=100, maxIndexNum=400,
                       enableConsumeQueueExt=True, mappedFileSizeConsumeQueueExt=EXT_FILE)
    with StoreWriter(root, cfg, append=True) as w:
        w.append(Message(topic="Topic000", queue_id=0, body=b"more", properties_raw="TAGS\u0001blue\u0002",
                         store_timestamp=1_800_000_000_000, born_timestamp=1_800_000_000_000))
    files = discover_queues(root / "consumequeue")[("Topic000", 0)]
    after = [u for f in files for u in read_units(f)]
    assert after[:len(before[("Topic000", 0)])] == before[("Topic000", 0)]
    from store_format.javahash import tags_code

    assert after[-1].tags_code == tags_code("blue") and after[-1].ext_offset is not None
    units = read_ext_units(ext_folder(files[0].path))
    assert not units.problems and after[-1].ext_offset == int(units.offset.max())
    assert np.unique(units.offset).size == len(units.offset)
