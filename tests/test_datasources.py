"""The Spark data sources against store_format's scalar readers.

The exactly-once property is checked twice: on the task function itself (``range_items``, every split size
from 64 bytes to more than a segment, mmap and ranged reads) and through Spark on a multi-broker folder that
holds both fixtures and hand-built multi-segment, blank-heavy and damaged stores.
"""
from __future__ import annotations

import os
import re
import shutil
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
from chispa import assert_df_equality

from datasources.commitlog import BASE_COLUMNS
from datasources.twopass import commitlog_ends, read_commitlog
from store_format.recovery import predict_cut
from store_format.scan import NeedMoreBytes, cut_to_walk, kept_items, range_items, segment_ends
from store_format.store import Store
from store_format.checkpoint import read_checkpoint
from store_format.codec import decode_record, encode_blank, encode_record, encoded_size
from store_format.commitlog import (Frame, FrameArrays, list_segments, salvage_buffer, segment_name, walk_buffer)
from store_format.fs import ReadOnlyMap
from store_format.config import consumer_offsets, read_config
from store_format.consumequeue import UNIT_KINDS, CQFile, discover_queues, read_unit_arrays, read_units
from store_format.errors import StoreFormatError
from store_format.indexfile import IndexFile, list_index_files
from store_format.message import Message
from tests.conftest import FIXTURE_NAMES, fixture_store

SEG = 16 << 10  # small segments: many of them, many blanks


def _write_store(root: Path, bodies: list[bytes], seg_size: int = SEG) -> Path:
    """A store root whose commitlog holds ``bodies`` as messages, rolling segments with end-of-file blanks
    exactly as the broker does (a message must leave 8 bytes for the blank)."""
    cl = root / "commitlog"
    cl.mkdir(parents=True)
    segs, base, buf, pos = [], 0, bytearray(seg_size), 0
    for i, body in enumerate(bodies):
        msg = Message(topic=f"T{i % 3}", body=body, queue_id=i % 2, queue_offset=i // 2,
                      properties_raw=f"KEYS\x01k{i}\x02TAGS\x01t{i % 4}", born_timestamp=1_700_000_000_000 + i,
                      store_timestamp=1_700_000_000_000 + i, born_host="10.0.0.1:5000", store_host="10.0.0.2:10911")
        size = encoded_size(msg)
        if pos + size + 8 > seg_size:
            buf[pos:pos + 8] = encode_blank(seg_size - pos)
            segs.append((base, buf))
            base, buf, pos = base + seg_size, bytearray(seg_size), 0
        msg.physical_offset = base + pos
        buf[pos:pos + size] = encode_record(msg)
        pos += size
    segs.append((base, buf))
    for b, data in segs:
        (cl / segment_name(b)).write_bytes(bytes(data))
    return root


def _patch(path: Path, pos: int, data: bytes):
    raw = bytearray(path.read_bytes())
    raw[pos:pos + len(data)] = data
    path.write_bytes(bytes(raw))


def _bodies(n: int, seed: int, big_every: int = 0) -> list[bytes]:
    import random

    rnd = random.Random(seed)
    return [os.urandom(3000 if big_every and i % big_every == 0 else rnd.randint(0, 400)) for i in range(n)]


@pytest.fixture(scope="module")
def dump(tmp_path_factory) -> Path:
    """A folder of broker store roots: the two fixtures and four hand-built stores."""
    d = tmp_path_factory.mktemp("dump")
    for name in FIXTURE_NAMES:
        shutil.copytree(fixture_store(name), d / name / "store")
        for p in (d / name / "store").rglob("*"):
            p.chmod(0o644 if p.is_file() else 0o755)
    _write_store(d / "multi", _bodies(300, 1))
    _write_store(d / "blanky", _bodies(120, 2, big_every=2))  # ~5 messages a segment: blank-heavy
    dmg = _write_store(d / "damaged", _bodies(360, 3))
    assert len(list_segments(dmg / "commitlog")) >= 6
    segs = list_segments(dmg / "commitlog")
    frames = [f for f in walk_buffer(segs[1].path.read_bytes(), segs[1].name, segs[1].base_offset) if f.kind == "message"]
    _patch(segs[1].path, frames[3].file_position + 8, b"\x00\x00\x00\x01")  # bad body CRC mid-segment
    frames = [f for f in walk_buffer(segs[2].path.read_bytes(), segs[2].name, segs[2].base_offset) if f.kind == "message"]
    _patch(segs[2].path, frames[2].file_position, bytes(700))  # a zeroed hole, then records again
    frames = [f for f in walk_buffer(segs[3].path.read_bytes(), segs[3].name, segs[3].base_offset) if f.kind == "message"]
    _patch(segs[3].path, frames[1].file_position + 4, b"GARBAGE!" * 20)  # bad magic and garbage
    # stale records after a blank: a blank written early in a segment, older records still behind it
    raw = bytearray(segs[4].path.read_bytes())
    frames = [f for f in walk_buffer(bytes(raw), segs[4].name, segs[4].base_offset) if f.kind == "message"]
    cut = frames[4].file_position
    raw[cut:cut + 8] = encode_blank(len(raw) - cut)
    segs[4].path.write_bytes(bytes(raw))
    # records after a zero-filled stretch at the end of the last segment's data (salvage resyncs past it)
    last = segs[-1]
    raw = bytearray(last.path.read_bytes())
    frames = [f for f in walk_buffer(bytes(raw), last.name, last.base_offset) if f.kind == "message"]
    raw[frames[1].file_position:frames[2].file_position] = bytes(frames[2].file_position - frames[1].file_position)
    # and a torn last record: its second half zeros, then the segment's unwritten zero tail (not damage)
    torn = frames[-1]
    raw[torn.file_position + torn.size // 2:torn.file_position + torn.size] = bytes(torn.size - torn.size // 2)
    last.path.write_bytes(bytes(raw))
    return d


def _key(it) -> tuple:
    if isinstance(it, Frame):
        return (it.kind, it.file_position, it.size, it.stop_kind)
    return ("corrupt", it.file_position, it.length, it.reason)


def _all_segments(d: Path):
    for root in sorted(p for p in d.iterdir()):
        store = root / "store" if (root / "store").is_dir() else root
        for seg in list_segments(store / "commitlog"):
            yield root.name, seg


def _ranges(length: int, split: int):
    k = 0
    while k == 0 or k * split < length:
        yield k * split, min(length, (k + 1) * split), (k + 1) * split >= length
        k += 1


def _by_ranges(buf: bytes, seg, split: int, ranged_margin: int | None = None, **kwargs) -> list[FrameArrays]:
    out = []
    for a, b, last in _ranges(len(buf), split):
        if ranged_margin is None:
            out.append(range_items(buf, 0, True, seg.name, seg.base_offset, a, b, last, **kwargs))
            continue
        w1 = len(buf) if last else min(len(buf), b + 2 * ranged_margin)
        while True:
            try:
                out.append(range_items(buf[a:w1], a, w1 == len(buf), seg.name, seg.base_offset, a, b, last,
                                       margin=ranged_margin, segment_length=len(buf), **kwargs))
                break
            except NeedMoreBytes:
                w1 = min(len(buf), a + 2 * (w1 - a))
    return out


SPLITS = (64, 300, 1000, 4096, 7777, SEG, 1 << 20, 3 << 20)


@pytest.mark.slow
def test_every_walk_item_is_owned_by_exactly_one_range(dump):
    """The task function alone: for every segment and split size, the ranges' items joined in order are
    store_format's salvage walk, and cutting them at the segment ends (and the broker's cut) gives both walks
    exactly: the salvage walk, and the kept walk as its scalar face (store_format.scan.kept_items) gives it."""
    checked = Counter()
    for broker, seg in _all_segments(dump):
        buf = seg.path.read_bytes()
        salvage = [_key(x) for x in salvage_buffer(buf, seg.name, seg.base_offset, decode=False)]
        recovery = [_key(x) for x in walk_buffer(buf, seg.name, seg.base_offset, decode=False)]
        cut = _cut(dump, broker)
        kept = [_key(x) for x in kept_items(salvage_buffer(buf, seg.name, seg.base_offset, decode=False), cut)]
        for split in (x for x in SPLITS if x >= 1000 or len(buf) <= SEG):  # bounded task counts
            per_range = _by_ranges(buf, seg, split)
            items = FrameArrays.concat(per_range)
            first_stop, first_blank = segment_ends(per_range)
            assert [_key(x) for x in cut_to_walk(items, "salvage", first_stop, first_blank)] == salvage, (broker, seg.name, split)
            assert [_key(x) for x in cut_to_walk(items, "kept", first_stop, first_blank, cut)] == kept, \
                (broker, seg.name, split)
            checked[broker] += 1
        # ranged reads: windows past the range end, grown when a decision falls too close to their end
        # (the margin, maxRecordSize, must exceed the largest record)
        margin = max([4096] + [k[2] + 8 for k in salvage if k[0] == "message"])
        for split in (300, 4096):
            per_range = _by_ranges(buf, seg, split, ranged_margin=margin)
            items = cut_to_walk(FrameArrays.concat(per_range), "salvage", *segment_ends(per_range))
            assert [_key(x) for x in items] == salvage
            # the second pass: CRCs before the recovery stop were checked by the first, and are not again
            trusted = _by_ranges(buf, seg, split, ranged_margin=margin, crc_checked_before=recovery[-1][1])
            assert [_key(x) for r in trusted for x in r] == [_key(x) for r in per_range for x in r]
    assert set(checked) == {"basic", "broker", "multi", "blanky", "damaged"}
    # the damaged store really exercises resync, stale frames past a blank and a hole in the data
    kinds = Counter(k[0] for b, seg in _all_segments(dump) if b == "damaged"
                    for k in map(_key, salvage_buffer(seg.path.read_bytes(), seg.name, seg.base_offset, decode=False)))
    assert kinds["corrupt"] >= 3 and kinds["blank"] >= 4
    # the torn last record: its span stops where the zero tail begins, and an END_OF_DATA stop follows it
    last = list_segments(dump / "damaged" / "commitlog")[-1]
    buf = last.path.read_bytes()
    *_, span, end = salvage_buffer(buf, last.name, last.base_offset, decode=False)
    assert span.file_position + span.length == end.file_position == len(buf.rstrip(b"\0"))
    assert (end.stop_kind, span.unwritten_tail) == ("END_OF_DATA", len(buf) - end.file_position)


def _cut(dump: Path, broker: str):
    """The broker's predicted recovery cut (the audit's), which the kept walk ends at."""
    root = dump / broker / "store" if (dump / broker / "store").is_dir() else dump / broker
    return predict_cut(Store(root)).cut


def _scalar_rows(dump: Path, walk: str, only: str | None = None) -> Counter:
    """The rows of a walk as store_format's scalar walks give them: ``salvage``, ``kept`` (the salvage walk of the
    broker's segments cut at its predicted recovery) or ``first_stops`` (each segment's walk from its start to its
    first stop: the rows that are not beyond_first_stop)."""
    rows = Counter()
    for broker, seg in _all_segments(dump):
        if only is not None and broker != only:
            continue
        buf = seg.path.read_bytes()
        if walk == "first_stops":
            items = walk_buffer(buf, seg.name, seg.base_offset, decode=False)
        else:
            items = salvage_buffer(buf, seg.name, seg.base_offset, decode=False)
            items = kept_items(items, _cut(dump, broker)) if walk == "kept" else items
        for it in items:
            k = _key(it)
            rows[(broker, seg.name) + k[:2] + (k[2] if k[0] != "stop" else None, k[3])] += 1
    return rows


def _spark_rows(rows) -> Counter:
    """Spark rows (collected, or a DataFrame) keyed as _scalar_rows keys the scalar walk's items."""
    if not isinstance(rows, list):
        rows = rows.select("broker", "segment", "kind", "file_position", "store_size", "length", "reason").collect()
    out = Counter()
    for r in rows:
        size = r["length"] if r["kind"] == "corrupt" else (None if r["kind"] == "stop" else r["store_size"])
        out[(r["broker"], r["segment"], r["kind"], r["file_position"], size, r["reason"])] += 1
    return out


@pytest.mark.parametrize("only, split", [("basic", 100_000), (None, 1 << 22)])
def test_spark_reads_both_walks_exactly_whatever_the_split(spark, dump, only, split):
    """100 kB splits cut the basic fixture's 1 MiB segment (and its data) into ranges; 4 MiB reads every store
    of the dump as one range a segment (many small splits over every store: the task-level test above; the
    damaged store in small splits: test_modes, test_planner_ends...).  Both walks share one first pass."""
    path = str(dump / only if only else dump)
    ends = commitlog_ends(spark, path, splitSize=split)
    # only segments cut into several ranges go through the first pass; the others' tasks find their own ends
    assert set(ends) == ({"basic/00000000000000000000"} if only else set())
    kept = {}
    for walk in ("kept", "salvage"):
        rows = read_commitlog(spark, path, ends=ends, walk=walk, splitSize=split, materialize="positions") \
            .select("broker", "segment", "kind", "file_position", "physical_offset", "store_size", "length", "reason",
                    "beyond_first_stop", "kept").collect()
        assert _spark_rows(rows) == _scalar_rows(dump, walk, only)
        cuts = {b: _cut(dump, b).physical_offset for b in {r["broker"] for r in rows}}
        assert all(r["kept"] == (r["physical_offset"] < cuts[r["broker"]]) for r in rows)
        kept[walk] = _spark_rows([r for r in rows if r["kept"]])
        if walk == "salvage":
            assert _spark_rows([r for r in rows if not r["beyond_first_stop"]]) == _scalar_rows(dump, "first_stops",
                                                                                                 only)
    assert kept["kept"] == kept["salvage"]  # what the broker keeps: the same rows either way


def test_frames_are_the_record_bytes_and_decoded_columns_match_the_scalar_decoder(spark, dump):
    df = read_commitlog(spark, str(dump / "basic"), splitSize=100_000, materialize="frames")
    buf = (dump / "basic" / "store" / "commitlog" / "00000000000000000000").read_bytes()
    rows = df.where("kind = 'message'").collect()
    assert len(rows) == 85
    for r in rows:
        assert r["frame"] == buf[r["file_position"]:r["file_position"] + r["store_size"]]
    dec = read_commitlog(spark, str(dump), materialize="decoded").where("kind = 'message'")
    got = {(r["broker"], r["physical_offset"]): r for r in dec.collect()}
    n = 0
    for broker, seg in _all_segments(dump):
        if broker == "damaged":
            continue
        for f in walk_buffer(seg.path.read_bytes(), seg.name, seg.base_offset):
            if f.kind != "message":
                continue
            m, r = f.message, got[(broker, f.physical_offset)]
            assert (r["topic"], r["body"], r["queue_id"], r["queue_offset"], r["store_timestamp"], r["msg_id"],
                    r["properties_raw"], r["tags_code"], r["keys"]) == \
                   (m.topic, m.body, m.queue_id, m.queue_offset, m.store_timestamp, m.msg_id, m.properties_raw,
                    m.tags_code, m.keys)
            n += 1
    assert n == len(got) - sum(1 for k in got if k[0] == "damaged")
    headers = spark.read.format("rocketmq-commitlog").option("materialize", "headers").load(str(dump / "broker"))
    assert "body" not in headers.columns and "topic" in headers.columns and "frame" not in headers.columns


def test_columns_option_ships_only_the_chosen_decoded_columns(spark, fixture):
    name, store, manifest = fixture
    chosen = ["tags", "queue_offset", "properties", "body", "body_crc_ok"]
    df = read_commitlog(spark, str(store), materialize="decoded", columns=", ".join(chosen))
    assert df.columns == BASE_COLUMNS.names + chosen  # in the order asked for, after the base columns
    everything = read_commitlog(spark, str(store), materialize="decoded").select(*df.columns)
    assert_df_equality(df.drop("properties"), everything.drop("properties"), ignore_row_order=True)  # maps don't sort
    props = [df.where("kind = 'message'").orderBy("physical_offset").select("properties").collect()
             for df in (df, everything)]
    assert props[0] == props[1]
    expected = {m["commitLogOffset"]: m for m in manifest["messages"]}
    got = df.where("kind = 'message'").select("physical_offset", "queue_offset", "tags", "body_crc_ok").collect()
    assert len(got) == len(expected)
    for r in got:
        m = expected[r.physical_offset]
        assert (r.queue_offset, r.tags, r.body_crc_ok) == (m["queueOffset"], m.get("tags") or None, True)
    headers = read_commitlog(spark, str(store), materialize="headers", columns="topic,store_timestamp")
    assert headers.columns[-2:] == ["topic", "store_timestamp"]
    split = read_commitlog(spark, str(store), materialize="decoded", columns="tags", splitSize=4096)  # 2 passes
    assert_df_equality(split.where("kind = 'message'").select("physical_offset", "tags"),
                       df.where("kind = 'message'").select("physical_offset", "tags"), ignore_row_order=True)


@pytest.mark.parametrize("options, says", [
    ({"materialize": "decoded", "columns": "topic,nope"}, "unknown columns ['nope']"),
    ({"materialize": "positions", "columns": "topic"}, "use it with materialize=headers or decoded"),
    ({"materialize": "headers", "columns": "body"}, "unknown or body-bearing columns ['body']"),
])
def test_bad_columns_option_is_a_clear_error(spark, options, says):
    with pytest.raises(Exception, match=re.escape(says)):
        spark.read.format("rocketmq-commitlog").options(**options).load(str(fixture_store("basic"))).columns


@pytest.mark.parametrize("options, says", [
    ({"splitSize": "12q"}, "option splitSize='12q': expected a size in bytes"),
    ({"splitSize": "-4k"}, "option splitSize='-4k': size must be positive"),
    ({"checkCrc": "maybe"}, "option checkCrc='maybe': expected true or false"),
    ({"batchRows": "0"}, "option batchRows='0': must be at least 1"),
    ({"parallelism": "two"}, "option parallelism='two': invalid literal"),
    ({"walk": "sideways"}, "option walk='sideways': choose one of kept, salvage"),
    ({"mode": "lenient"}, "option mode='lenient': choose one of PERMISSIVE, DROPMALFORMED, FAILFAST"),
])
def test_a_bad_option_value_is_an_error_naming_the_option(options, says):
    from datasources.commitlog import Options

    with pytest.raises(ValueError, match=re.escape(says)):
        Options.parse(options)


def test_absent_and_empty_options_take_their_defaults():
    from datasources.commitlog import DEFAULT_BATCH_ROWS, DEFAULT_MAX_RECORD_SIZE, Options
    from datasources.indexfile import IndexReader

    for given in ({}, {"splitSize": "", "batchRows": "", "checkCrc": "", "mode": "", "walk": ""}):
        o = Options.parse(given)
        assert (o.split_size, o.batch_rows, o.check_crc, o.mode, o.walk, o.max_record_size, o.parallelism) == \
            (None, DEFAULT_BATCH_ROWS, True, "PERMISSIVE", "kept", DEFAULT_MAX_RECORD_SIZE, None)
    assert Options.parse({"walk": "recovery"}).walk == "kept"  # the earlier name
    o = Options.parse({"splitSize": "6k", "checkCrc": "false", "mode": "failfast", "excerptBytes": "0"})
    assert (o.split_size, o.check_crc, o.mode, o.excerpt_bytes) == (6 << 10, False, "FAILFAST", 0)
    with pytest.raises(ValueError, match=re.escape("option hashSlotNum='0': must be at least 1")):
        IndexReader({"path": "/nowhere", "hashSlotNum": "0"})


def test_planner_ends_equal_the_two_pass_reader(spark, dump):
    one = spark.read.format("rocketmq-commitlog").options(walk="salvage", splitSize="6k",
                                                        materialize="positions").load(str(dump / "damaged"))
    two = read_commitlog(spark, str(dump / "damaged"), walk="salvage", splitSize="6k", materialize="positions")
    assert_df_equality(one, two, ignore_row_order=True)  # the schemas too
    assert one.where("beyond_first_stop").count()


def test_modes(spark, dump):
    path = str(dump / "damaged")
    ends = commitlog_ends(spark, path, splitSize=10000)  # the modes share the first pass: it ignores them
    permissive = read_commitlog(spark, path, ends=ends, walk="salvage", splitSize=10000,
                                materialize="positions").collect()
    damage = [r for r in permissive if r["kind"] == "corrupt" or (r["kind"] == "stop" and r["reason"] != "END_OF_DATA")]
    assert len(damage) >= 4
    # the torn last record's span is not damage to the end: the END_OF_DATA row after it holds the zero tail
    last = list_segments(dump / "damaged" / "commitlog")[-1]
    *_, span, end = salvage_buffer(last.path.read_bytes(), last.name, last.base_offset, decode=False)
    rows = {(r["kind"], r["file_position"]): r for r in permissive if r["segment"] == last.name}
    assert rows[("corrupt", span.file_position)]["length"] == span.length
    assert f"then {span.unwritten_tail} zero bytes" in rows[("corrupt", span.file_position)]["detail"]
    assert rows[("stop", end.file_position)]["length"] == span.unwritten_tail
    dropped = read_commitlog(spark, path, ends=ends, walk="salvage", splitSize=10000, materialize="positions",
                             mode="DROPMALFORMED").collect()
    assert Counter(map(tuple, dropped)) == Counter(map(tuple, permissive)) - Counter(map(tuple, damage))
    # the first damage before the broker's cut: a CRC in segment 1, the hole of zeros in segment 2 or the garbage in
    # segment 3 (tasks race; the broker keeps them: its recovery walks the last three segments)
    with pytest.raises(Exception, match=r"(BAD_CRC .*00000000000000016384|TRUNCATED .*00000000000000032768|"
                                        r"BAD_MAGIC .*00000000000000049152)@\d+"):
        read_commitlog(spark, path, ends=ends, splitSize=10000, materialize="positions", mode="FAILFAST").collect()
    # a healthy store passes FAILFAST: its zero tail is not damage
    assert read_commitlog(spark, str(dump / "multi"), mode="FAILFAST", materialize="positions").count() == 300 + \
        len(list_segments(dump / "multi" / "commitlog"))


def test_bad_segment_names_and_lengths_are_rows(spark, tmp_path):
    root = _write_store(tmp_path / "b1", _bodies(60, 4))
    cl = root / "commitlog"
    (cl / "notes.txt").write_bytes(b"not a segment")
    segs = list_segments(cl)
    segs[-1].path.write_bytes(segs[-1].path.read_bytes()[:5000])  # a segment cut short
    df = read_commitlog(spark, str(root), materialize="positions", walk="salvage")
    bad = {(r["segment"], r["reason"]) for r in df.where("kind = 'corrupt'").collect()}
    assert bad == {("notes.txt", "BAD_FILE_NAME"), (segs[-1].name, "BAD_GEOMETRY")}
    # the short segment is still read
    assert df.where(f"segment = '{segs[-1].name}' and kind = 'message'").count() > 0
    other = _write_store(tmp_path / "b2", _bodies(10, 5))
    (other / "commitlog" / "notes.txt").write_bytes(b"not a segment")
    with pytest.raises(Exception, match=r"BAD_FILE_NAME .*notes.txt@0"):
        read_commitlog(spark, str(other), materialize="positions", mode="FAILFAST").collect()


def test_a_folder_without_a_store_is_a_clear_error(spark, tmp_path):
    (tmp_path / "empty" / "sub").mkdir(parents=True)
    with pytest.raises(Exception, match=f"MISSING {tmp_path}/empty.*no RocketMQ store"):
        spark.read.format("rocketmq-commitlog").load(str(tmp_path / "empty")).collect()


def test_file_uri_and_ranged_reads_equal_local_mmap(spark, dump):
    local = read_commitlog(spark, str(dump / "multi"), splitSize=8000, materialize="frames")
    uri = read_commitlog(spark, (dump / "multi").as_uri(), splitSize=8000, materialize="frames", io="ranged",
                         maxRecordSize=4096)
    assert_df_equality(local, uri, ignore_row_order=True)
    seg = spark.read.format("rocketmq-commitlog").load((dump / "multi" / "commitlog" / segment_name(SEG)).as_uri())
    assert {r["broker"] for r in seg.collect()} == {"multi"} and seg.count() > 2


def test_pushed_filters_prune_and_filter_exactly(spark, dump):
    path = str(dump / "multi")
    full = read_commitlog(spark, path, splitSize=4096, materialize="positions", pushFilters="true")
    lo, hi = 3 * SEG + 100, 5 * SEG + 2000
    want = [(r["physical_offset"],) for r in full.collect() if lo <= r["physical_offset"] < hi]  # filtered here
    part = full.where(f"physical_offset >= {lo} and physical_offset < {hi}")
    offsets = part.select("physical_offset")
    assert want
    assert_df_equality(offsets, spark.createDataFrame(want, offsets.schema), ignore_row_order=True)
    assert part.rdd.getNumPartitions() < full.rdd.getNumPartitions() / 2  # ranges outside were not planned
    seg = full.where(f"segment = '{segment_name(2 * SEG)}' and kind = 'blank'")
    assert [r["physical_offset"] for r in seg.collect()] == \
        [f.physical_offset for f in walk_buffer((dump / "multi/commitlog" / segment_name(2 * SEG)).read_bytes(),
                                                segment_name(2 * SEG), 2 * SEG) if f.kind == "blank"]


def test_a_plain_load_has_the_columns_people_join_on(spark):
    """``load()`` with no option carries the message columns (the documented default, ``headers``: all but the
    body), so the obvious join with the consume queue works: every unit of the broker fixture meets its message."""
    from datasources.commitlog import DEFAULT_MATERIALIZE

    store = str(fixture_store("broker"))
    messages = spark.read.format("rocketmq-commitlog").load(store)
    assert DEFAULT_MATERIALIZE == "headers"
    assert {"topic", "queue_id", "queue_offset", "keys", "tags", "store_timestamp", "uniq_key"} <= set(messages.columns)
    assert "body" not in messages.columns and "frame" not in messages.columns
    units = spark.read.format("rocketmq-consumequeue").load(store).where("kind = 'entry'")
    joined = units.join(messages.where("kind = 'message'"),
                        ["broker", "topic", "queue_id", "queue_offset", "physical_offset"])
    assert joined.count() == units.count() > 0


def test_a_loaded_dataframe_counts_everything_after_a_filtered_query(spark):
    df = spark.read.format("rocketmq-commitlog").load(str(fixture_store("broker")))
    everything = df.count()
    assert df.where("physical_offset < 1000").count() < everything
    assert df.count() == everything  # Spark 4.3 would reuse the filtered read here if the filter had been pushed
    pushed = spark.read.format("rocketmq-commitlog").option("pushFilters", "true").load(str(fixture_store("broker")))
    assert pushed.where("physical_offset < 1000").count() == df.where("physical_offset < 1000").count()


def test_consume_queue_rows_are_store_formats_units(spark, fixture):
    name, store, _ = fixture
    df = spark.read.format("rocketmq-consumequeue").load(str(store)).where("kind in ('entry', 'pre_blank')")
    expected = [(name, t, q, u.queue_offset, u.physical_offset, u.size, u.tags_code, u.file, u.file_position, u.kind)
                for (t, q), files in discover_queues(store / "consumequeue").items() for f in files
                for u in read_units(f)]
    cols = ["broker", "topic", "queue_id", "queue_offset", "physical_offset", "size", "tags_code", "file",
            "file_position", "kind"]
    assert_df_equality(df.select(*cols), spark.createDataFrame(expected, df.select(*cols).schema),
                       ignore_row_order=True)


def test_consume_queue_damage_and_tails(spark, tmp_path):
    root = tmp_path / "s" / "store"
    shutil.copytree(fixture_store("basic") / "consumequeue", root / "consumequeue")
    qfile = root / "consumequeue" / "TopicTest" / "0" / "00000000000000000000"
    qfile.chmod(0o644)
    raw = bytearray(qfile.read_bytes())
    raw[20:40] = (-5).to_bytes(8, "big", signed=True) + bytes(12)  # unit 1 fails offset >= 0
    qfile.write_bytes(bytes(raw))
    other = root / "consumequeue" / "TopicTest" / "1" / "00000000000000000000"
    other.chmod(0o644)
    other.write_bytes(other.read_bytes() + b"xyz")  # a partial unit at the end
    df = spark.read.format("rocketmq-consumequeue").load(str(root / "consumequeue"))
    rows = {(r["queue_id"], r["kind"], r["file_position"]): r for r in df.where("topic = 'TopicTest'").collect()}
    assert rows[(0, "corrupt", 20)]["reason"].startswith("invalid")
    tail = [r for r in rows.values() if r["kind"] == "zero_tail" and r["queue_id"] == 0]
    assert len(tail) == 1 and tail[0]["file_position"] + tail[0]["length"] == len(raw)
    assert rows[(1, "corrupt", len(raw))]["reason"] == "TRUNCATED"
    assert {r["broker"] for r in rows.values()} == {"s"}
    single = spark.read.format("rocketmq-consumequeue").load(str(qfile))
    assert single.where("kind = 'entry'").count() == sum(1 for r in rows.values() if r["queue_id"] == 0
                                                          and r["kind"] == "entry")
    assert spark.read.format("rocketmq-consumequeue").option("mode", "DROPMALFORMED").load(str(root)) \
        .where("kind = 'corrupt'").count() == 0
    with pytest.raises(Exception, match="FAILFAST"):
        spark.read.format("rocketmq-consumequeue").option("mode", "FAILFAST").load(str(root)).collect()


def test_index_rows_are_store_formats_entries(spark, fixture):
    name, store, manifest = fixture
    df = spark.read.format("rocketmq-index").load(str(store))
    expected_entries, expected_headers = [], []
    for path in list_index_files(store / "index"):
        with IndexFile(path) as f:
            expected_headers.append((path.name, f.header.index_count, f.header.begin_timestamp, f.hash_slot_num))
            expected_entries += [(path.name, e.index, e.key_hash, e.physical_offset, e.time_diff, e.prev_index,
                                  f.header.begin_timestamp + e.time_diff * 1000) for e in f.entries()]
    entries = df.where("kind = 'entry'").select("file", "entry", "key_hash", "physical_offset", "time_diff",
                                               "prev_index", "store_time")
    assert_df_equality(entries, spark.createDataFrame(expected_entries, entries.schema), ignore_row_order=True)
    headers = [(r["file"], r["index_count"], r["begin_timestamp"], r["hash_slot_num"])
               for r in df.where("kind = 'header'").collect()]
    assert headers == expected_headers
    # RocketMQ's index: every entry is on its slot's chain, so a healthy file has no problems
    assert df.where("size(problems) > 0").count() == 0


def test_index_chain_problems_are_reported(spark, tmp_path):
    src = list_index_files(fixture_store("basic") / "index")[0]
    dst = tmp_path / "st" / "index" / src.name
    dst.parent.mkdir(parents=True)
    raw = bytearray(src.read_bytes())
    with IndexFile(src) as f:
        slots, count = f.hash_slot_num, f.header.index_count
        e = next(x for x in f.entries() if x.prev_index > 0)
    at = 40 + slots * 4 + e.index * 20 + 16
    raw[at:at + 4] = (count + 7).to_bytes(4, "big")  # prev beyond indexCount: the older chain is cut off
    dst.write_bytes(bytes(raw))
    rows = {r["entry"]: r["problems"] for r in spark.read.format("rocketmq-index").load(str(dst.parent)).collect()
            if r["kind"] == "entry"}
    assert rows[e.index] == ["prev_out_of_range"]
    assert "unreachable" in rows[e.prev_index]
    (dst.parent / "not-an-index").write_bytes(b"x")
    bad = spark.read.format("rocketmq-index").load(str(dst.parent)).where("kind = 'corrupt'").collect()
    assert [(r["file"], r["reason"]) for r in bad] == [("not-an-index", "BAD_FILE_NAME")]


def test_metadata_tables(spark):
    base = str(fixture_store("broker").parent.parent)  # the folder of both fixtures: two brokers
    cp = spark.read.format("rocketmq-metadata").option("table", "checkpoint").load(base).collect()
    for r in cp:
        c = read_checkpoint(fixture_store(r["broker"]) / "checkpoint")
        assert (r["physic_msg_timestamp"], r["logics_msg_timestamp"], r["min_timestamp"]) == \
            (c.physic_msg_timestamp, c.logics_msg_timestamp, c.min_timestamp)
    assert {r["broker"] for r in cp} == {"basic", "broker"}
    offsets = spark.read.format("rocketmq-metadata").option("table", "consumer_offsets").load(base).collect()
    want = consumer_offsets(read_config(fixture_store("broker") / "config", "consumerOffset.json"))
    assert {((r["topic"], r["group"]), r["queue_id"], r["offset"]) for r in offsets} == \
        {(k, q, o) for k, qs in want.items() for q, o in qs.items()}
    markers = spark.read.format("rocketmq-metadata").option("table", "markers").load(base).collect()
    assert {(r["broker"], r["abort"], r["lock"]) for r in markers} == {("basic", False, True), ("broker", False, True)}
    topics = spark.read.format("rocketmq-metadata").option("table", "topics").load(base)
    assert topics.where("broker = 'broker' and topic = 'BrokerTopic'").select("read_queue_nums").first()[0] == 4
    groups = spark.read.format("rocketmq-metadata").option("table", "subscription_groups").load(base)
    assert groups.where("group = 'cg-broker'").select("retry_max_times").first()[0] == 16
    with pytest.raises(Exception, match="table"):
        spark.read.format("rocketmq-metadata").option("table", "nope").load(base).collect()



def test_big_consumer_offsets_through_spark(spark, tmp_path):
    """A consumerOffset.json big enough for the compiled rows (over the fast paths' threshold, more rows than one
    batch: the broker and source columns are one shared block per chunk): Spark reads the rows table_batch
    builds, and they are the dict path's, problems included."""
    from decoding.metadata import table_rows
    from store_format.config import dumps_fastjson

    root = tmp_path / "b1"
    (root / "config").mkdir(parents=True)
    (root / "commitlog").mkdir()
    path = root / "config" / "consumerOffset.json"
    table = {f"T{i % 17}@g{i}": {q: i * 1000 + q for q in range(16)} for i in range(5000, 0, -1)}

    def read():
        rows = spark.read.format("rocketmq-metadata").option("table", "consumer_offsets").load(str(root)).collect()
        got = sorted((tuple(r) for r in rows), key=repr)
        assert got == sorted((tuple(r.values()) for r in table_rows("consumer_offsets", rows[0]["broker"], str(root))),
                             key=repr)
        assert {r[5] for r in got} == {str(path)}
        return got

    path.write_text(dumps_fastjson({"offsetTable": table}))
    assert len(read()) == 5000 * 16
    table["T1@g1"] = {0: 1, 2**31: 2}  # a queue id outside int: the general path, and one problem row
    path.write_text(dumps_fastjson({"offsetTable": table}))
    got = read()
    want = consumer_offsets(read_config(root / "config", "consumerOffset.json"))
    assert len(got) == 4999 * 16 + 1 + 1 and [r[7] for r in got if r[6]] == ["offsetTable/T1@g1/2147483648"]
    assert {((r[1], r[2]), r[3], r[4]) for r in got if r[6] is None} == \
        {(k, q, o) for k, qs in want.items() for q, o in qs.items()}


def test_decode_record_agrees_with_frames_of_the_damaged_store(dump):
    """Frames the ranges yield past damage decode with the scalar codec: resync finds real records."""
    for _, seg in [x for x in _all_segments(dump) if x[0] == "damaged"]:
        buf = seg.path.read_bytes()
        for r in _by_ranges(buf, seg, 1000):
            for it in r:
                if isinstance(it, Frame) and it.kind == "message":
                    assert decode_record(buf, it.file_position, file=seg.name).physical_offset == it.physical_offset


# ---------------------------------------------------------------------------------------------------------
# Hostile dumps (issue 10): an intact record between two damaged ones, and frames that are exactly a record


def _sandwich_store(root: Path) -> tuple[Path, list[int]]:
    """A store whose segments 1 and 2 hold, each, an intact record between two with a bad magic (segment 2's
    also followed by a garbage run); returns it and the intact records' absolute physical offsets."""
    _write_store(root, _bodies(200, 6))
    segs = list_segments(root / "commitlog")
    intact = []
    for seg, garbage in ((segs[1], False), (segs[2], True)):
        frames = [f for f in walk_buffer(seg.path.read_bytes(), seg.name, seg.base_offset) if f.kind == "message"]
        k = next(i for i in range(4, len(frames) - 2) if all(f.message.body for f in frames[i - 1:i + 2]))
        for f in (frames[k - 1], frames[k + 1]):
            _patch(seg.path, f.file_position + 4, b"\x0b\xad\xc0\xde")
        if garbage:
            _patch(seg.path, frames[k + 1].file_position + 8, b"GARBAGE!" * 3)
        intact.append(frames[k].physical_offset)
    return root, intact


def test_an_intact_record_between_two_damaged_ones_is_owned_by_exactly_one_range(tmp_path):
    """The resync point inside the damage (the intact record, proved by its body CRC) at range boundaries too:
    splits ending just before, at and after it, and in the damage on either side."""
    root, intact = _sandwich_store(tmp_path / "sandwich")
    checked = 0
    for seg in list_segments(root / "commitlog"):
        buf = seg.path.read_bytes()
        salvage = [_key(x) for x in salvage_buffer(buf, seg.name, seg.base_offset, decode=False)]
        mine = [p - seg.base_offset for p in intact if seg.base_offset <= p < seg.base_offset + len(buf)]
        if not mine:
            continue
        assert ("message", mine[0]) in {k[:2] for k in salvage}
        # splits whose first boundary falls at the intact record, one byte either side, and in the damage
        around = [mine[0] + d for d in (-200, -90, -1, 0, 1, 50)]
        for split in sorted({s for s in around if s > 0} | {64, 300, 1000}):
            per_range = _by_ranges(buf, seg, split)
            items = cut_to_walk(FrameArrays.concat(per_range), "salvage", *segment_ends(per_range))
            assert [_key(x) for x in items] == salvage, (seg.name, split)
            checked += 1
        margin = max([4096] + [k[2] + 8 for k in salvage if k[0] == "message"])
        for split in (mine[0], mine[0] + 1, 300):
            per_range = _by_ranges(buf, seg, split, ranged_margin=margin)
            items = cut_to_walk(FrameArrays.concat(per_range), "salvage", *segment_ends(per_range))
            assert [_key(x) for x in items] == salvage, (seg.name, split, "ranged")
    assert checked >= 2 * 9


def test_binary_slices_are_exactly_the_frames():
    """A frame's bytes are its record's bytes only: gaps between frames (a corrupt span, a stop) are not glued
    onto the frame before them, however short."""
    from datasources.commitlog import _binary_slices

    buf = bytes(range(256)) * 4
    for starts in ([0, 10, 40, 41, 60], [0, 10, 40, 41, 500]):  # short gaps after 30 and 50; a long one
        starts, sizes = np.array(starts), np.array([10, 20, 1, 9, 12])
        got = _binary_slices(buf, starts, sizes).to_pylist()
        assert got == [buf[s:s + z] for s, z in zip(starts.tolist(), sizes.tolist())]
    assert _binary_slices(buf, np.array([5]), np.array([7])).to_pylist() == [buf[5:12]]
    assert _binary_slices(buf, np.zeros(0, np.int64), np.zeros(0, np.int64)).to_pylist() == []


def test_frames_of_a_damaged_store_are_exactly_their_records(spark, tmp_path):
    """materialize=frames over damage (walk=salvage, small splits): every message row's frame is the record at
    its position, store_size bytes long; the intact records between damaged ones are rows too."""
    root, intact = _sandwich_store(tmp_path / "sandwich")
    rows = read_commitlog(spark, str(root), walk="salvage", materialize="frames") \
        .select("segment", "physical_offset", "file_position", "kind", "store_size", "frame").collect()
    assert sum(r["kind"] == "corrupt" for r in rows) >= 4
    data = {seg.name: seg.path.read_bytes() for seg in list_segments(root / "commitlog")}
    messages = [r for r in rows if r["kind"] == "message"]
    assert set(intact) <= {r["physical_offset"] for r in messages}
    bad = [(r["segment"], r["file_position"]) for r in messages if bytes(r["frame"]) !=
           data[r["segment"]][r["file_position"]:r["file_position"] + r["store_size"]]]
    assert not bad, f"{len(bad)} frames are not their record's bytes, first {bad[:3]}"
    assert all(r["frame"] is None for r in rows if r["kind"] != "message")


def test_an_empty_only_segment_is_a_geometry_problem(tmp_path):
    """With one segment there is no other length to compare with, but an empty segment file is never right (the
    broker preallocates segments and refuses to load an empty one): a BAD_GEOMETRY row, not silence."""
    from store_format.commitlog import list_segment_files

    root = _write_store(tmp_path / "e", _bodies(3, 7))
    [seg] = list_segments(root / "commitlog")
    assert [f.problems for f in list_segment_files(root / "commitlog")] == [()]
    seg.path.write_bytes(b"")
    [f] = list_segment_files(root / "commitlog")
    assert [kind for kind, _ in f.problems] == ["BAD_GEOMETRY"]


@pytest.mark.parametrize("folder", ["99999999999", "²", "2147483648", "--1", "00000000000000000000\n"])
def test_a_queue_folder_that_is_no_int_queue_id_is_a_corrupt_row(tmp_path, folder):
    """Folder names from a hostile dump: one past int32 or with non-ASCII digits once crashed the task (Arrow
    overflow, int() of '²'); they are BAD_FILE_NAME rows, as a folder the broker could not parse."""
    from datasources.consumequeue import ConsumeQueueReader

    root = shutil.copytree(fixture_store("broker"), tmp_path / "s")
    queue = next((root / "consumequeue").glob("*/0"))
    queue.rename(queue.parent / folder)
    reader = ConsumeQueueReader({"path": str(root)})
    rows = [r for part in reader.partitions() for b in reader.read(part) for r in b.to_pylist()]
    bad = [r for r in rows if r["queue_id"] is None]
    assert bad and all((r["kind"], r["reason"]) == ("corrupt", "BAD_FILE_NAME") for r in bad)
    assert any(r["kind"] == "entry" for r in rows)  # the other queues are read


def test_index_header_rows_summarise_their_entries(spark, fixture):
    """The header row carries what the file's entries say (slots used, first/last offsets, repeated pairs),
    counted here from store_format's entries."""
    name, store, _ = fixture
    got = {r["file"]: (r["entry_slots"], r["first_entry_phy_offset"], r["last_entry_phy_offset"],
                       r["duplicate_entries"], r["duplicated_pairs"])
           for r in spark.read.format("rocketmq-index").load(str(store)).where("kind = 'header'").collect()}
    expected = {}
    for path in list_index_files(store / "index"):
        with IndexFile(path) as f:
            es = list(f.entries())
            pairs = Counter((e.key_hash, e.physical_offset) for e in es)
            expected[path.name] = (len({e.key_hash % f.hash_slot_num for e in es if e.key_hash >= 0}),
                                   es[0].physical_offset if es else None, es[-1].physical_offset if es else None,
                                   sum(n - 1 for n in pairs.values()), sum(1 for n in pairs.values() if n > 1))
    assert got == expected
    if name == "basic":
        assert expected[next(iter(expected))][3] > 0  # the key listed twice in one message


def test_index_source_on_a_cut_chain_and_a_repeated_entry(fixture, tmp_path):
    """The index source's rows of a file with a cut chain and a repeated entry (tests/test_kernels.py checks the
    compiled chain check and repeat count against a reference on generated files)."""
    from datasources.indexfile import file_batches, plan_files
    from store_format.stores import part_inputs

    _, store, _ = fixture
    src = list_index_files(store / "index")[0]
    raw = bytearray(src.read_bytes())
    with IndexFile(src) as f:
        slots, count = f.hash_slot_num, f.header.index_count
        e = next(x for x in f.entries() if x.prev_index > 0)
    entries_at = 40 + slots * 4
    raw[entries_at + e.index * 20 + 16:entries_at + e.index * 20 + 20] = (count + 7).to_bytes(4, "big")
    raw[entries_at + 1 * 20:entries_at + 1 * 20 + 12] = raw[entries_at + 2 * 20:entries_at + 2 * 20 + 12]
    damaged = tmp_path / "index" / src.name
    damaged.parent.mkdir()
    damaged.write_bytes(bytes(raw))

    def rows(path):
        return [r for p in plan_files(part_inputs(str(path), "index"), None, None) for b in file_batches(p) for r in b.to_pylist()]

    problems = {r["entry"]: r["problems"] for r in rows(damaged.parent) if r["kind"] == "entry"}
    assert problems[e.index] == ["prev_out_of_range"] and "unreachable" in problems[e.prev_index]
    [header] = [r for r in rows(damaged.parent) if r["kind"] == "header"]
    [healthy] = [r for r in rows(store / "index") if r["kind"] == "header" and r["file"] == src.name]
    assert header["duplicate_entries"] == healthy["duplicate_entries"] + 1  # entry 1 now repeats entry 2


def test_unit_arrays_equal_read_units(fixture, tmp_path):
    """The bulk unit reader the consume-queue source uses yields read_units' units, healthy and damaged."""
    _, store, _ = fixture
    files = [f for fs in discover_queues(store / "consumequeue").values() for f in fs]
    src = files[0]
    damaged = []
    for name, patch in [("zero_mid", lambda b: b[:20] + bytes(20) + b[40:]),
                        ("invalid", lambda b: b[:20] + (-5).to_bytes(8, "big", signed=True) + b[28:]),
                        ("partial", lambda b: b[:src.length - 7])]:
        p = tmp_path / name / src.path.name
        p.parent.mkdir()
        p.write_bytes(patch(src.path.read_bytes()))
        damaged.append(CQFile(src.topic, src.queue_id, p, src.base_byte_offset, p.stat().st_size))
    for f in files + damaged:
        arrays = read_unit_arrays(f)
        got = list(zip(arrays.queue_offset.tolist(), arrays.physical_offset.tolist(), arrays.size.tolist(),
                       arrays.tags_code.tolist(), [UNIT_KINDS[k] for k in arrays.kind], arrays.file_position.tolist()))
        expected, error = [], None
        try:
            for u in read_units(f):
                expected.append((u.queue_offset, u.physical_offset, u.size, u.tags_code, u.kind, u.file_position))
        except StoreFormatError as e:  # a partial trailing unit: raised after the whole units
            error = (e.kind, e.position)
        assert got == expected, f.path
        assert ((arrays.truncated.kind, arrays.truncated.position) if arrays.truncated else None) == error


def test_read_units_is_linear_in_a_file_written_only_at_its_end(tmp_path):
    """A 6 MB consume-queue file (the broker's size) that is zero but for a few bytes at its end (found by
    tests/test_fuzz_stores.py): read_units found the end of the written bytes again at each zero unit, copying
    the rest of the mapping each time, and never finished; now once a file.  Same units as read_unit_arrays."""
    import time

    p = tmp_path / "00000000000000000000"
    p.write_bytes(bytes(6_000_000 - 3) + b"\x01\x02\x03")
    f = CQFile("T", 0, p, 0, p.stat().st_size)
    started = time.monotonic()
    kinds = Counter(u.kind for u in read_units(f))
    assert time.monotonic() - started < 20
    assert kinds == {"zero": 299_999, "invalid": 1}  # the last unit holds the bytes; every one before is kept
    assert len(read_unit_arrays(f).kind) == 300_000


def _sparse_segment(path: Path, length: int, data_end: int) -> Path:
    """A preallocated segment file, sparse, whose last non-zero byte is just before ``data_end``."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "wb") as f:
        f.truncate(length)
        if data_end:
            f.seek(data_end - 1)
            f.write(b"\x01")
    return path


def test_default_ranges_share_the_written_data_over_the_cores(tmp_path):
    """By default the written data of all segments (the newest one's up to written_end, older ones whole) is cut
    into about TASKS_PER_CORE ranges a core, 32-256 MiB each, the newest segment too: its ranges cover its data
    and the last one runs to the segment's end.  A given splitSize cuts the same way, in ranges of at most it."""
    import pyarrow.fs as pafs

    from store_format.commitlog import Segment
    from store_format.fs import Location
    from store_format.plan import MAX_RANGE_STREAMED, MIN_RANGE, TASKS_PER_CORE, plan_ranges as plan

    gib, mib = 1 << 30, 1 << 20

    def plan_ranges(segments, split, cores):
        return plan(segments, split, cores or os.cpu_count(), largest=MAX_RANGE_STREAMED)

    def files(broker: str, newest_data: int, older: int) -> list:
        out = []
        for k in range(older + 1):
            path = _sparse_segment(tmp_path / broker / segment_name(k * gib), gib, newest_data if k == older else 0)
            out.append((broker, Segment(Location(pafs.LocalFileSystem(), str(path)), k * gib, gib)))
        return out

    def equal_ranges(data: int, cores: int) -> int:
        """The range size of the policy: about TASKS_PER_CORE ranges a core, whole MiB, 32 to 256 MiB."""
        return min(MAX_RANGE_STREAMED, max(MIN_RANGE, -(-(-(-data // (TASKS_PER_CORE * cores))) // mib) * mib))

    def shape(parts) -> dict:
        """segment -> its ranges' starts (they tile the segment: each ends where the next starts, the last at
        its end, and only the last is last)."""
        out = {}
        for p in parts:
            out.setdefault((p.broker, p.base), []).append(p)
        for ranges in out.values():
            assert ranges[0].start == 0 and ranges[-1].end == gib and [r.last for r in ranges] == \
                [False] * (len(ranges) - 1) + [True]
            assert all(a.end == b.start for a, b in zip(ranges, ranges[1:]))
        return {k: [r.start for r in v] for k, v in out.items()}

    # make bench's dump: a full segment and a newest one with 8.5 MB written; 6 ranges of 173 MiB for 2 cores
    bench = files("bench", 8_527_285, 1)
    size = equal_ranges(gib + 8_527_285, 2)
    assert size == 173 * mib and TASKS_PER_CORE == 3
    assert shape(plan_ranges(bench, None, 2)) == {("bench", 0): [k * -(-gib // 6) for k in range(6)],
                                                 ("bench", gib): [0]}
    # a single newest segment, 600 MiB written: equal ranges over the data, as many as the cores want
    single = files("single", 600 * mib, 0)
    assert shape(plan_ranges(single, None, 2)) == {("single", 0): [k * 100 * mib for k in range(6)]}
    assert len(plan_ranges(single, None, 8)) == 19  # 32 MiB each at least: 600 / 32
    assert len(plan_ranges(single, None, None)) == len(plan_ranges(single, None, os.cpu_count()))
    # two brokers, two full segments each and a newest one of 300 MiB: 4.6 GiB over 6 ranges, the 256 MiB cap
    two = files("a", 300 * mib, 2) + files("b", 300 * mib, 2)
    assert {k: len(v) for k, v in shape(plan_ranges(two, None, 2)).items()} == \
        {(b, k * gib): 4 if k < 2 else 2 for b in "ab" for k in range(3)}
    assert {k: len(v) for k, v in shape(plan_ranges(two, 512 * mib, 2)).items()} == \
        {(b, k * gib): 2 if k < 2 else 1 for b in "ab" for k in range(3)}
    # a newest segment with nothing written is one range; so is a small dump, whatever the cores
    assert shape(plan_ranges(files("empty", 0, 0), None, 2)) == {("empty", 0): [0]}
    assert shape(plan_ranges(files("small", 40 * mib, 0), None, 64)) == {("small", 0): [0, 20 * mib]}
    assert MIN_RANGE == 32 * mib


def _holey_store(root: Path) -> tuple[Path, int]:
    """A one-segment store whose data has three zeroed pages in the middle (records again after them), so
    written_end's probe ends early there; and the true end of its data."""
    store = _write_store(root, _bodies(400, 6), seg_size=1 << 20)
    seg = list_segments(store / "commitlog")[0]
    raw = bytearray(seg.path.read_bytes())
    data_end = len(raw.rstrip(b"\0"))
    assert data_end > 96 << 10
    raw[64 << 10:76 << 10] = bytes(12 << 10)  # pages 16-18: the binary search over 256 pages looks at 16
    seg.path.write_bytes(bytes(raw))
    return store, data_end


def test_the_newest_segment_cut_over_its_written_data_tiles_its_walk(dump, tmp_path):
    """range_items over the default cut of a segment (equal ranges over [0, written_end), the last to the end)
    gives both walks of the whole segment exactly, for every range size, and so does any other data end: the
    probe only shares out work (the holey store fools it with zeroed pages inside the data)."""
    import pyarrow.fs as pafs

    from store_format.fs import Location
    from store_format.plan import cut_ranges, written_end

    holey, data_end = _holey_store(tmp_path / "holey")
    segments = list(_all_segments(dump)) + [("holey", list_segments(holey / "commitlog")[0])]
    cut_short = 0
    for broker, seg in segments:
        buf = seg.path.read_bytes()
        probe = written_end(Location(pafs.LocalFileSystem(), str(seg.path)), len(buf))
        assert probe <= len(buf) and not any(buf[probe:])
        cut_short += probe < len(buf)
        salvage = [_key(x) for x in salvage_buffer(buf, seg.name, seg.base_offset, decode=False)]
        kept = [_key(x) for x in kept_items(salvage_buffer(buf, seg.name, seg.base_offset, decode=False),
                                            _cut(holey.parent if broker == "holey" else dump, broker))]
        for data in sorted({probe, 0, 1, len(buf) // 3, len(buf)}):
            for size in (1000, 4096, max(1, data // 3)):
                ranges = cut_ranges(len(buf), data, size)
                assert ranges[0][0] == 0 and ranges[-1][1:] == (len(buf), True)
                assert all(a[1] == b[0] and not a[2] for a, b in zip(ranges, ranges[1:]))
                per_range = [range_items(buf, 0, True, seg.name, seg.base_offset, a, b, last) for a, b, last in ranges]
                items = FrameArrays.concat(per_range)
                ends = segment_ends(per_range)
                assert [_key(x) for x in cut_to_walk(items, "salvage", *ends)] == salvage, (broker, data, size)
                assert [_key(x) for x in cut_to_walk(items, "kept", *ends, _cut(holey.parent if broker == "holey"
                                                                                else dump, broker))] == kept
    assert cut_short >= 4  # the fixtures' segments, the holey one and the multi store's newest
    seg = list_segments(holey / "commitlog")[0]
    # a local file is read back from its end: exact; another file system's binary search stops at the zeroed pages
    assert written_end(Location(pafs.LocalFileSystem(), str(seg.path)), seg.length) == -(-data_end // 4096) * 4096
    remote = Location(pafs.SubTreeFileSystem("/", pafs.LocalFileSystem()), str(seg.path).lstrip("/"))
    assert remote.local_path is None and written_end(remote, seg.length) == 64 << 10 < data_end


def test_spark_reads_a_newest_segment_cut_over_its_written_data(spark, tmp_path):
    """Through Spark: the holey store's one (newest) segment cut over its written data (past its zeroed pages:
    ranges of 16 KiB, the last running to the segment's end) reads exactly the scalar walks; the kept walk's
    ranges past the broker's cut (the zeroed pages at 64 KiB) are never read."""
    store, data_end = _holey_store(tmp_path / "holey")
    path = str(store)
    for walk, ranges in (("kept", 5), ("salvage", -(-data_end // (16 << 10)))):
        df = read_commitlog(spark, path, walk=walk, splitSize="16k", materialize="positions")
        assert df.rdd.getNumPartitions() == ranges
        assert _spark_rows(df) == _scalar_rows(tmp_path, walk, "holey")


def test_closing_a_map_while_a_view_is_alive_does_not_raise(tmp_path):
    seg = tmp_path / "00000000000000000000"
    seg.write_bytes(bytes(range(256)) * 16)
    m = ReadOnlyMap(seg)
    view = np.frombuffer(m.buf, np.uint8)  # e.g. a batch still referenced when the task's reader closes
    m.close()
    assert m._f.closed and len(m) == 0
    assert int(view[255]) == 255  # the view keeps the pages mapped until it goes
