"""One check family tested on a hand-built range (tests/support/ranges.py), without an audit: the consume-queue
family's in-range checks and the integrity family's count of a range's queues, each from a few records and units."""
from __future__ import annotations

import pyarrow.parquet as pq

from jobs.audit.checks import consumequeue, integrity
from jobs.audit.tasks import Emitter, RunInfo
from store_format.message import Message

from .support.ranges import hand_built_range, unit_of


def _records() -> list[Message]:
    props = "TAGS\u0001red\u0002UNIQ_KEY\u0001{}\u0002"
    return [Message(topic="Orders", queue_id=q, queue_offset=i, body=b"x" * (10 + i), store_timestamp=1_700_000_000_000 + i,
                    properties_raw=props.format(f"K{q}{i}")) for q in (0, 1) for i in range(3)]


def _findings(out: Emitter, tmp_path) -> list[dict]:
    (tmp_path / "findings").mkdir(exist_ok=True)
    out.write_findings(RunInfo(str(tmp_path / "findings"), "run", None, tables_dir=str(tmp_path / "tables")),
                       "part-0.parquet")
    path = tmp_path / "findings" / "part-0.parquet"
    return pq.read_table(path).to_pylist() if path.exists() else []


def test_the_consume_queue_family_on_a_hand_built_range(tmp_path):
    records = _records()
    from .support.ranges import laid

    _, placed = laid(records)
    units = [unit_of(m) for m in placed]
    units[1] = unit_of(placed[1], size=placed[1].store_size + 4)  # a unit whose size is wrong
    del units[4]  # queue 1, queue offset 1: a message without its unit
    rc = hand_built_range(tmp_path / "store", records, units)
    out = Emitter()
    consumequeue.FAMILY.in_range(rc, out)
    found = _findings(out, tmp_path)
    assert [(f["check"], f["queue_id"], f["queue_offset"]) for f in found] == [("consumequeue.size_mismatch", 0, 1)]
    missing = out.partials["consumequeue.missing"][0].to_pylist()
    assert [(m["topic"], m["queue_id"], m["queue_offset"], m["physical_offset"]) for m in missing] == \
        [("Orders", 1, 1, placed[4].physical_offset)]
    assert "consumequeue.loose" not in out.partials


def test_a_unit_pointing_mid_record_and_one_for_a_dropped_message(tmp_path):
    """A unit into the middle of a record is an error at the unit; recovery's end before the last record makes its
    unit's message not kept, so that message is missing nothing (recovery's finding, not this family's)."""
    records = _records()[:3]
    from .support.ranges import laid

    _, placed = laid(records)
    units = [unit_of(m) for m in placed]
    units[0] = unit_of(placed[0])
    mid = unit_of(placed[1], queue_offset=5)
    mid = type(mid)(mid.topic, mid.queue_id, 5, placed[1].physical_offset + 8, mid.size)
    rc = hand_built_range(tmp_path / "store", records, units + [mid], recovered_end=placed[2].physical_offset)
    out = Emitter()
    consumequeue.FAMILY.in_range(rc, out)
    found = _findings(out, tmp_path)
    assert [(f["check"], f["queue_offset"]) for f in found] == [("consumequeue.entry_mid_record", 5)]
    assert "consumequeue.missing" not in out.partials


def test_integrity_counts_a_hand_built_ranges_queues(tmp_path):
    records = _records()
    rc = hand_built_range(tmp_path / "store", records)
    out = Emitter()
    integrity.FAMILY.in_range(rc, out)
    counts = {(r["topic"], r["queue_id"]): r["messages"] for r in out.partials["integrity.queue_counts"][0].to_pylist()}
    assert counts == {("Orders", 0): 3, ("Orders", 1): 3}
    [segment] = out.partials["integrity.segments"][0].to_pylist()
    assert segment["messages"] == 6 and segment["stop_reason"] == "END_OF_DATA" and not _findings(out, tmp_path)
