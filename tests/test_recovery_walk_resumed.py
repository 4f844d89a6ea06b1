"""The recovery prediction's walk resumed at the first pass's stop (store_format.recovery.recovery_walk's
``salvage_stop``): the same outcome as walking the segment from its start, on every kind of damage, so the
commitlog source's kept walk does not frame and CRC-check a gigabyte twice (once for its segment ends, once for the
broker's predicted cut)."""
from __future__ import annotations

import shutil
import struct

import pytest

from tests.conftest import fixture_store
from datasources import read_commitlog
from datasources.twopass import commitlog_ends
from datasources.commitlog import Options, plan_segment_ranges, walk_segment_ends
from store_format import layout as L
from store_format.commitlog import KIND_MESSAGE, walk_arrays
from store_format.plan import split_segments
from store_format.recovery import predict_cut, recovery_walk
from store_format.store import Store
from store_format.stores import part_inputs

SPLIT = 200_000  # cuts the basic fixture's 1 MiB segment into ranges, so the first pass walks it


def _store(tmp_path):
    root = tmp_path / "store"
    shutil.copytree(fixture_store("basic"), root)
    for p in root.rglob("*"):
        p.chmod(0o644 if p.is_file() else 0o755)
    return root


def _records(seg):
    buf = seg.path.read_bytes()
    items = walk_arrays(buf, seg.name, seg.base_offset)
    msg = items.kinds == KIND_MESSAGE
    return [int(p) for p in items.positions[msg]], [int(s) for s in items.sizes[msg]]


def _patch(path, at: int, data: bytes) -> None:
    with open(path, "r+b") as f:
        f.seek(at)
        f.write(data)


def _damage(seg, kind: str) -> None:
    pos, sizes = _records(seg)
    k = len(pos) // 2  # a record in the middle of the data, past the first range
    at = pos[k]
    if kind == "body_crc":
        _patch(seg.path, at + sizes[k] - 30, b"\xff")  # a byte near the record's end: its body or properties
    elif kind == "physical_offset":  # the broker has no PHYSICALOFFSET check: its walk goes on past this record
        _patch(seg.path, at + L.PHYSICAL_OFFSET_OFFSET, struct.pack(">q", 12345))
    elif kind == "zero_page":
        _patch(seg.path, at, bytes(4096))
    elif kind == "total_size":
        _patch(seg.path, at, struct.pack(">i", 7))
    elif kind == "bad_magic":
        _patch(seg.path, at + 4, b"GARBAGE!")
    elif kind == "physical_offset_then_crc":  # the salvage walk stops at the first, the broker's at the second
        _patch(seg.path, at + L.PHYSICAL_OFFSET_OFFSET, struct.pack(">q", 12345))
        _patch(seg.path, pos[k + 3] + sizes[k + 3] - 30, b"\xff")
    elif kind != "intact":
        raise ValueError(kind)


def _first_pass_stops(root, check_crc: bool) -> dict[str, int]:
    """What the source's planner hands the prediction (datasources.commitlog._given_stops) after its first pass."""
    opts = Options.parse({"splitSize": str(SPLIT), "checkCrc": str(check_crc).lower(), "parallelism": "2"})
    parts = plan_segment_ranges(part_inputs(str(root), "commitlog", None), opts)
    split = split_segments(parts)
    assert split, "the segment must be cut into ranges for the first pass to run"
    ends = walk_segment_ends([p for p in parts if p.key in split], opts)
    return {key.rpartition("/")[2]: (crc_checked if check_crc else first_stop)
            for key, (first_stop, _blank, crc_checked) in ends.items()}


DAMAGES = ("intact", "body_crc", "physical_offset", "zero_page", "total_size", "bad_magic",
           "physical_offset_then_crc")


@pytest.mark.parametrize("check_crc", [True, False])
@pytest.mark.parametrize("damage", DAMAGES)
def test_the_resumed_walk_ends_where_the_walk_from_the_start_ends(tmp_path, damage, check_crc):
    root = _store(tmp_path)
    seg = Store(root).segments[0]
    _damage(seg, damage)
    stops = _first_pass_stops(root, check_crc)
    stop = stops[seg.name]
    if damage == "physical_offset":  # the case the resumption exists for: the salvage walk stops short of the broker
        assert stop < recovery_walk(seg, check_crc).position
    assert recovery_walk(seg, check_crc, salvage_stop=stop) == recovery_walk(seg, check_crc)
    full, resumed = predict_cut(Store(root), check_crc=check_crc), \
        predict_cut(Store(root), check_crc=check_crc, salvage_stops=stops)
    assert resumed.cut == full.cut and resumed.walks == full.walks


def test_the_forced_property_crc_walks_from_the_start(tmp_path):
    """The first pass does not make forceVerifyPropCRC's check: its stop is no promise about ``__CRC32#``."""
    root = _store(tmp_path)
    seg = Store(root).segments[0]
    # 4.9.7's records have no __CRC32#: the forced check refuses the first record, before any stop given
    assert recovery_walk(seg, True, True, salvage_stop=500_000) == recovery_walk(seg, True, True)
    assert recovery_walk(seg, True, True).position == 0


@pytest.mark.spark
@pytest.mark.parametrize("damage", ["physical_offset", "body_crc"])
def test_the_kept_walk_in_ranges_keeps_what_the_walk_in_one_range_keeps(spark, tmp_path, damage):
    """Through the source: the segment cut into ranges (its first pass's stops handed to the prediction) and read
    as one range (no first pass: the prediction walks it from its start) keep the same rows, up to the broker's
    cut."""
    root = _store(tmp_path)
    seg = Store(root).segments[0]
    _damage(seg, damage)
    cut = predict_cut(Store(root)).cut
    ends = commitlog_ends(spark, str(root), splitSize=SPLIT)
    assert ends and not commitlog_ends(spark, str(root), splitSize=1 << 22)

    def rows(split: int, ends: dict) -> set:
        return {tuple(r) for r in read_commitlog(spark, str(root), ends=ends, splitSize=split,
                                                 materialize="positions")
                .select("physical_offset", "kind", "kept").collect()}

    in_ranges, whole = rows(SPLIT, ends), rows(1 << 22, {})
    assert in_ranges == whole
    kept = [r for r in in_ranges if r[2]]
    assert kept and max(r[0] for r in kept) < cut.physical_offset <= max(r[0] for r in in_ranges)
