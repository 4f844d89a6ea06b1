"""The ``rocketmq-timerlog`` data source (datasources/timerlog.py, issue 32): every unit of the v5-timer fixture's
timer log as RocketMQ 5.3.3 read it back (its manifest), its blank, damaged units under each ``mode``, a 4.x store
without rows; and the same rows through Spark."""
from __future__ import annotations

import pytest

from datasources.base import NothingToRead, StoreReader
from datasources.timerlog import SCHEMA, TimerLogReader
from store_format import layout as L
from store_format.errors import StoreFormatError
from store_format.write import damage as D

from .conftest import fixture_store
from .test_v5_fixtures import store5, timer_manifest


def _rows(reader) -> list[dict]:
    return [r for part in reader.partitions() for b in reader.read(part) for r in b.to_pylist()]


def test_every_unit_and_the_blank_are_the_manifests():
    rows = _rows(TimerLogReader({"path": str(store5("v5-timer"))}))
    m = timer_manifest("v5-timer")
    entries = [r for r in rows if r["kind"] == "entry"]
    assert [(r["timerlog_offset"], r["prev_pos"], r["magic"], r["write_time_ms"], r["delay_ms"], r["slot_time_ms"],
             r["physical_offset"], r["store_size"], r["real_topic_hash"]) for r in entries] == \
        [(u["offset"], u["prevPos"], u["magic"], u["writeTimeMs"], u["delay"], u["slotTimeMs"], u["commitLogOffset"],
          u["commitLogSize"], u["realTopicHash"]) for u in m["timerLogUnits"]]
    assert {r["broker"] for r in rows} == {"v5-timer"} and {r["reason"] for r in entries} == {None}
    for r in entries:  # a unit's place: its file's name plus its position there
        assert r["timerlog_offset"] == int(r["file"]) + r["file_position"]
    [blank] = [r for r in rows if r["kind"] == "blank"]
    [theirs] = m["timerLogBlanks"]
    assert blank["timerlog_offset"] == theirs["offset"] and blank["magic"] == L.BLANK_MAGIC
    assert blank["prev_pos"] is None and blank["physical_offset"] is None  # a blank holds no unit's fields
    assert len(rows) == len(entries) + 1 and SCHEMA.names[-2:] == ["kind", "reason"]


def test_a_4x_store_has_no_timer_log_rows():
    reader = TimerLogReader({"path": str(fixture_store("basic"))})
    assert reader.partitions() == [NothingToRead()] and _rows(reader) == []
    assert issubclass(TimerLogReader, StoreReader) and TimerLogReader.plan is not StoreReader.plan


@pytest.fixture
def damaged(tmp_path):
    """The v5-timer timer log with one unit's magic made illegal and a stray file in timerlog/."""
    root = D.copy_store(store5("v5-timer"), tmp_path / "store")
    with open(root / "timerlog" / "00000000000000000000", "r+b") as f:
        f.seek(104 + L.TIMER_LOG_UNIT.offset("magic"))
        f.write(L.TIMER_LOG_UNIT.pack("magic", 0x40))
    (root / "timerlog" / "copy.bak").write_bytes(b"\0" * 52)
    return root


def test_damaged_units_under_each_mode(damaged):
    rows = _rows(TimerLogReader({"path": str(damaged)}))
    corrupt = [(r["file"], r["file_position"], r["reason"]) for r in rows if r["kind"] == "corrupt"]
    assert corrupt == [("00000000000000000000", 104, "BAD_MAGIC"), ("copy.bak", 0, "BAD_FILE_NAME")]
    dropped = _rows(TimerLogReader({"path": str(damaged), "mode": "DROPMALFORMED"}))
    assert len(dropped) == len(rows) - 2 and "corrupt" not in {r["kind"] for r in dropped}
    reader = TimerLogReader({"path": str(damaged), "mode": "FAILFAST"})
    with pytest.raises(StoreFormatError) as e:
        _rows(reader)
    assert e.value.kind.value == "BAD_MAGIC" and e.value.position == 104 and e.value.file.endswith(
        "timerlog/00000000000000000000")
    with pytest.raises(ValueError, match="option mode='later': choose one of PERMISSIVE"):
        TimerLogReader({"path": str(damaged), "mode": "later"})


def test_the_source_through_spark(spark):
    from datasources import register

    register(spark)
    df = spark.read.format("rocketmq-timerlog").load(str(store5("v5-timer")))
    got = df.where("kind = 'entry'").orderBy("timerlog_offset").select("timerlog_offset", "slot_time_ms",
                                                                        "physical_offset").collect()
    assert [tuple(r) for r in got] == [(u["offset"], u["slotTimeMs"], u["commitLogOffset"])
                                       for u in timer_manifest("v5-timer")["timerLogUnits"]]
    assert df.where("kind = 'blank'").count() == 1
