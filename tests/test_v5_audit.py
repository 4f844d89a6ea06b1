"""The 5.x audit families (issue 32): ``timers`` and ``pop``.  The v5-timer fixture (written by RocketMQ 5.3.3)
audits with no false error and its timer messages read as its manifest and RocketMQ's own timer metrics say, field
by field; writer-built 5.x stores (store_format.write.broker's 5.x flows, generate --rocketmq 5) with each kind of
damage -- the damage helpers' and byte patches the writer's flows cannot make -- are found at the damaged position
by the right check; a 4.x dump is audited without the 5.x families."""
from __future__ import annotations

import argparse
import collections
import json
import os
import shutil
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from jobs.audit import job as audit_job
from store_format import layout as L
from store_format import pop as P
from store_format import timer as T
from store_format.write import damage as D
from store_format.write.broker import ManualClock, Producer
from store_format.write.broker import Broker, PopResult
from store_format.write.generate import Traffic5Config, config_5x, generate_store
from store_format.write.writer import StoreWriter, WriterConfig

from .conftest import fixture_store
from .test_v5_fixtures import manifest5, store5

START = 1_795_786_365_000
DAY = 86_400_000


def audit(spark, stores, out: Path, *extra) -> dict:
    """One audit (no report); its findings, tables and summary."""
    args = audit_job.build_parser().parse_args(["--store", *map(str, stores), "--out", str(out), "--no-report",
                                                *extra])
    result = audit_job.run(spark, args)
    tables = {p.name: pq.read_table(p).to_pylist() for p in (out / "tables").iterdir()}
    return {"exit": result.exit_code, "findings": pq.read_table(out / "findings").to_pylist(), "tables": tables,
            "summary": json.loads((out / "summary.json").read_text())}


def of(found: dict, prefix: str) -> list[dict]:
    return [f for f in found["findings"] if f["check"].startswith(prefix)]


def writer5(root: Path, **overrides) -> tuple[Broker, Producer]:
    cfg = WriterConfig(storeHost="192.168.0.10:10911", mappedFileSizeCommitLog=1 << 20, mappedFileSizeTimerLog=2048,
                       timerWheelEnable=True, enabledAppendPropCRC=True, **overrides)
    return Broker(StoreWriter(root, cfg, clock=ManualClock(START))), Producer(born_host="10.1.2.3:50000")


def units_of(root: Path) -> list:
    return [u for f in T.list_timer_log_files(root) for u in T.walk_timer_log(f) if u.kind == "entry"]


def patch(path: Path, position: int, data: bytes) -> None:
    with open(path, "r+b") as f:
        f.seek(position)
        f.write(data)


# ------------------------------------------------------------------------------------------------ the fixture


def test_v5_timer_audits_clean_and_its_timers_are_the_manifests(spark, tmp_path):
    found = audit(spark, [store5("v5-timer")], tmp_path / "out")
    assert found["exit"] == 0
    assert [f for f in found["findings"] if f["severity"] != "info"] == []
    assert {f["check"] for f in found["findings"]} == {"metadata.config_missing"}  # consumerOffset.json etc.
    m = manifest5("v5-timer")
    cp = m["timer"]["timerCheckpoint (TimerCheckpoint class)"]
    joined = m["timerMessages (join of puts, messages and timer.timerLogUnits; derived in Python, not by RocketMQ)"]
    recalled = {t["TIMER_DEL_UNIQKEY"] for t in joined if "TIMER_DEL_UNIQKEY" in t}
    rows = {r["physical_offset"]: r for r in found["tables"]["timers"]}
    expected = {}
    for t in joined:
        if not t["timerLogUnits"]:
            assert t["wroteOffset"] not in rows  # stored on its own topic, or refused: never in the timer
            continue
        [unit] = t["timerLogUnits"]
        delivered = [o for o in t["otherRecordsWithSameUniqKey_[offset,topic,queueId,queueOffset]"]
                     if o[1] == t["originalTopic"]]
        state = "recall" if "TIMER_DEL_UNIQKEY" in t else "fired" if delivered else \
            "recalled" if f"{t['originalTopic']}+{t['uniqKey']}" in recalled else \
            "pending" if unit["slotTimeMs"] >= cp["lastReadTimeMs"] else "?"
        kind = {1: "timer", 3: "roll", 5: "recall"}[unit["magic"]]
        expected[t["wroteOffset"]] = (t["uniqKey"], t["originalTopic"], t["originalQueueId"], kind,
                                      int(t["TIMER_OUT_MS"]), unit["offset"], unit["slotTimeMs"], state,
                                      delivered[0][0] if delivered else None, delivered[0][3] if delivered else None)
    got = {o: (r["uniq_key"], r["real_topic"], r["real_queue_id"], r["kind"], r["deliver_ms"], r["timerlog_offset"],
               r["slot_time_ms"], r["state"], r["delivered_offset"], r["delivered_queue_offset"])
           for o, r in rows.items()}
    assert got == expected and len(got) == 51
    assert collections.Counter(r[7] for r in got.values()) == {"pending": 34, "fired": 13, "recalled": 2,
                                                               "recall": 2}
    # RocketMQ's own count of what waits in the wheel (TimerMetrics: +1 a put, -1 a delete entry) is the pending one
    metrics = m["timer"]["timerMetrics (TimerMetrics class)"]["timingCount_[count,timeStamp]"]
    timers = found["summary"]["brokers"][0]["timers"]
    assert timers["pending"] == sum(c for c, _ in metrics.values()) == 34
    assert timers["fired"] == 13 and timers["recalled"] == 2 and timers["lost"] == 0 and timers["overdue"] == 0
    assert timers["read_time_ms"] == cp["lastReadTimeMs"]
    waiting = sorted(v[4] for v in expected.values() if v[7] == "pending")
    assert timers["next_due"][0] == {"due_ms": waiting[0], "messages": waiting.count(waiting[0])}
    assert timers["last_due_ms"] == waiting[-1] and "timers" in found["summary"]["checks"]


def test_a_4x_dump_is_audited_without_the_5x_families(spark, tmp_path):
    found = audit(spark, [fixture_store("broker")], tmp_path / "out")
    assert "timers" not in found["summary"]["checks"] and "pop" not in found["summary"]["checks"]
    assert "timers" not in found["tables"] and "pop" not in found["tables"]
    assert "timers" not in found["summary"]["brokers"][0]


# ------------------------------------------------------------------------------------------------ timer flows


def test_pending_overdue_fired_and_recalled_timers(spark, tmp_path):
    broker, p = writer5(tmp_path / "s")
    fired = broker.send(p, "TimerTopic", b"fired", delay_sec=2, queue_id=0)
    far = broker.send(p, "TimerTopic", b"far", delay_sec=3600, queue_id=1)
    gone = broker.send(p, "TimerTopic", b"gone", delay_sec=600, queue_id=0)
    recall = broker.recall(p, "TimerTopic", gone.msg_id, int(gone.record.properties[L.PROPERTY_TIMER_OUT_MS]) + 1)
    broker.run_timers(START + 10_000)
    late = broker.send(p, "TimerTopic", b"late", delay_sec=5, queue_id=2)
    broker.clock.set(START + 120_000)  # the timer is not run again: "late" is due and its slot unread
    broker.send(p, "PlainTopic", b"now", queue_id=0)
    broker.writer.close()
    found = audit(spark, [tmp_path / "s"], tmp_path / "out", "--checks", "timers,pop")
    rows = {r["uniq_key"]: r for r in found["tables"]["timers"] if r["kind"] == "timer"}
    assert rows[fired.msg_id]["state"] == "fired" and rows[far.msg_id]["state"] == "pending"
    assert rows[gone.msg_id]["state"] == "recalled" and rows[late.msg_id]["state"] == "overdue"
    assert fired.record.physical_offset < rows[fired.msg_id]["delivered_offset"] < late.record.physical_offset
    [r] = [r for r in found["tables"]["timers"] if r["kind"] == "recall"]
    assert r["physical_offset"] == recall.physical_offset and r["state"] == "recall"
    [over] = of(found, "timers.")
    assert over["check"] == "timers.overdue" and over["severity"] == "warning" and over["topic"] == "TimerTopic"
    late_unit = [u for u in units_of(tmp_path / "s") if u.physical_offset == late.record.physical_offset][0]
    assert (over["file"], over["file_position"]) == (f"timerlog/{Path(late_unit.file).name}", late_unit.file_position)
    assert dict(over["details"])["uniq_key"] == late.msg_id and found["exit"] == 0
    t = found["summary"]["brokers"][0]["timers"]
    assert (t["pending"], t["overdue"], t["fired"], t["recalled"]) == (2, 1, 1, 1)
    # a week later, what still waits is past the wheel's reach: a restarted timer never reads those slots
    later = audit(spark, [tmp_path / "s"], tmp_path / "later", "--checks", "timers", "--as-of", str(START + 8 * DAY))
    assert sorted(f["check"] for f in later["findings"]) == ["timers.lost_past_reach"] * 2 and later["exit"] == 1


def _recalled_roll(root: Path, until: int) -> tuple[Broker, object, object, list]:
    """A timer beyond the roll window and its recall (which rolls too: magic 3 and 7), beside a timer that is not
    recalled; the timer run to ``until``: (broker, the recalled send, the other send, what the timer fired)."""
    broker, p = writer5(root)
    far = broker.send(p, "TimerTopic", b"far", deliver_ms=START + 2 * DAY + 3_600_000, queue_id=0)
    out_ms = int(far.record.properties[L.PROPERTY_TIMER_OUT_MS])
    broker.recall(p, "TimerTopic", far.msg_id, out_ms + 1)  # the recall handle: TIMER_OUT_MS + 1
    kept = broker.send(p, "TimerTopic", b"kept", delay_sec=7200, queue_id=1)
    fired = broker.run_timers(until)
    return broker, far, kept, fired


def test_a_recall_that_travels_with_its_timer_makes_it_recalled_not_pending(spark, tmp_path):
    """RocketMQ 5.3.3 re-puts a roll unit whatever its magic, a recall's (7) too, and both keep their TIMER_OUT_MS:
    the recall lands as a delete entry in the message's own slot, and the dequeue drops the message there.  So a
    rolling timer whose recall rolls with it is recalled, not pending, and not in "next due"; the writer's timer,
    run on past that slot, drops it too."""
    broker, far, kept, _ = _recalled_roll(tmp_path / "s", START + 10_000)
    magics = sorted(u.magic for u in units_of(tmp_path / "s"))
    broker.writer.close()
    assert magics == [1, 3, 7]  # the kept timer's unit, the roll of the message and of its recall
    found = audit(spark, [tmp_path / "s"], tmp_path / "out", "--checks", "timers")
    rows = {(r["uniq_key"], r["kind"]): r for r in found["tables"]["timers"]}
    assert rows[(far.msg_id, "roll")]["state"] == "recalled"
    assert rows[(kept.msg_id, "timer")]["state"] == "pending"
    t = found["summary"]["brokers"][0]["timers"]
    assert (t["pending"], t["recalled"]) == (1, 1)
    due = int(kept.record.properties[L.PROPERTY_TIMER_OUT_MS])
    assert t["next_due"] == [{"due_ms": due, "messages": 1}] and t["last_due_ms"] == due
    # the timer itself, run past the message's slot, drops it: its delete entry reached that slot first
    _, far2, _, fired = _recalled_roll(tmp_path / "later", START + 3 * DAY)
    assert [f.outcome for f in fired if f.source is not None and f.source.uniq_key == far2.msg_id
            and f.source.properties.get(L.PROPERTY_TIMER_DEL_UNIQKEY) is None][-1] == "recalled"


def test_lost_timers_and_a_roll_chain_that_ends_nowhere(spark, tmp_path):
    """The checkpoint's read time moved past slots the timer never fired (the broker lost them: its checkpoint is
    ahead of what it did): a normal unit is lost, a roll unit's chain ends."""
    broker, p = writer5(tmp_path / "s")
    normal = broker.send(p, "TimerTopic", b"n", delay_sec=3, queue_id=0)
    roll = broker.send(p, "TimerTopic", b"r", deliver_ms=START + 2 * DAY + 3_600_000, queue_id=1)
    broker.timer.catch_up(START + 2 * DAY)  # read and write times move on, nothing fired
    broker.clock.set(START + 2 * DAY)
    broker.send(p, "PlainTopic", b"x", queue_id=0)
    broker.writer.close()
    found = audit(spark, [tmp_path / "s"], tmp_path / "out", "--checks", "timers")
    by = {f["check"]: f for f in of(found, "timers.")}
    assert set(by) == {"timers.lost", "timers.roll_chain_broken"}
    units = {u.physical_offset: u for u in units_of(tmp_path / "s")}
    for check_id, sent in (("timers.lost", normal), ("timers.roll_chain_broken", roll)):
        f, u = by[check_id], units[sent.record.physical_offset]
        assert (f["file"], f["file_position"], f["physical_offset"]) == (f"timerlog/{Path(u.file).name}",
                                                                       u.file_position, sent.record.physical_offset)
        assert dict(f["details"])["uniq_key"] == sent.msg_id and f["severity"] == "error"
    assert "no roll re-put" in by["timers.roll_chain_broken"]["message"]


def test_recalled_but_delivered_and_delivered_twice(spark, tmp_path):
    broker, p = writer5(tmp_path / "s")
    missed = broker.send(p, "TimerTopic", b"m", delay_sec=30, queue_id=0)
    out_ms = int(missed.record.properties[L.PROPERTY_TIMER_OUT_MS])
    broker.recall(p, "TimerTopic", missed.msg_id, out_ms + 5001)  # the recall names another slot
    twice = broker.send(p, "TimerTopic", b"t", delay_sec=3, queue_id=1)
    fired = broker.run_timers(START + 60_000)
    [f] = [f for f in fired if f.outcome == "fired" and f.source.uniq_key == twice.msg_id]
    [unit] = [u for u in units_of(tmp_path / "s") if u.physical_offset == twice.record.physical_offset]
    again = broker._fire(f.source, unit.write_time_ms, False, f.slot_time, f.unit_offset)  # a slot read twice
    broker.writer.close()
    found = audit(spark, [tmp_path / "s"], tmp_path / "out", "--checks", "timers")
    by = {f["check"]: f for f in of(found, "timers.")}
    assert set(by) == {"timers.recalled_but_delivered", "timers.delivered_twice"}
    r = by["timers.recalled_but_delivered"]
    assert r["physical_offset"] == missed.record.physical_offset and "names the slot" in r["message"]
    d = by["timers.delivered_twice"]
    assert (d["physical_offset"], d["topic"], d["queue_id"]) == (again.record.physical_offset, "TimerTopic", 1)
    assert dict(d["details"])["first_delivery"] == str(f.record.physical_offset)


def test_a_checkpoint_behind_and_ahead_of_the_timer_log(spark, tmp_path):
    broker, p = writer5(tmp_path / "s")
    for i in range(3):
        broker.send(p, "TimerTopic", b"%d" % i, delay_sec=2 + i, queue_id=0)
    broker.run_timers(START + 30_000)
    broker.writer.close()
    check = tmp_path / "s" / "config" / "timercheck"
    cp = T.read_timer_checkpoint(check)
    patch(check, 0, L.TIMER_CHECKPOINT.pack("last_read_time_ms", START))  # before the three fired slots
    behind = audit(spark, [tmp_path / "s"], tmp_path / "behind", "--checks", "timers")
    [f] = of(behind, "timers.")
    assert f["check"] == "timers.checkpoint_behind" and (f["file"], f["file_position"]) == ("config/timercheck", 0)
    assert dict(f["details"])["count"] == "3" and f["severity"] == "warning"
    patch(check, 0, L.TIMER_CHECKPOINT.pack("last_read_time_ms", cp.last_read_time_ms))
    patch(check, 8, L.TIMER_CHECKPOINT.pack("last_timer_log_flush_pos", cp.last_timer_log_flush_pos + 10 * 52))
    ahead = audit(spark, [tmp_path / "s"], tmp_path / "ahead", "--checks", "timers")
    [f] = of(ahead, "timers.")
    assert f["check"] == "timers.checkpoint_ahead" and (f["file"], f["file_position"]) == ("config/timercheck", 8)
    assert f["severity"] == "error" and str(cp.last_timer_log_flush_pos + 520) in f["message"]


def test_a_slot_the_wheel_lost_leaves_its_units_unreachable(spark, tmp_path):
    """A pending unit in an older timer-log file (which the timer's recovery does not rescan) whose wheel slot is
    zeroed: no chain reaches it."""
    broker, p = writer5(tmp_path / "s")
    lone = broker.send(p, "TimerTopic", b"lone", delay_sec=7200, queue_id=0)
    for i in range(90):  # two more timer-log files of short timers (39 units a 2,048-byte file)
        broker.send(p, "TimerTopic", b"%d" % i, delay_sec=1 + i % 5, queue_id=1)
    broker.run_timers(START + 20_000)
    broker.writer.close()
    root = tmp_path / "s"
    assert len(T.list_timer_log_files(root)) >= 3
    [u] = [u for u in units_of(root) if u.physical_offset == lone.record.physical_offset]
    patch(root / "timerwheel", T.slot_index(u.slot_time_ms) * T.SLOT_SIZE, bytes(T.SLOT_SIZE))
    found = audit(spark, [root], tmp_path / "out", "--checks", "timers")
    [f] = of(found, "timers.")
    assert f["check"] == "timers.unit_unreachable" and (f["file"], f["file_position"]) == (
        f"timerlog/{Path(u.file).name}", u.file_position)
    assert found["summary"]["brokers"][0]["timers"]["lost"] == 1


def test_units_pointing_at_no_timer_record_or_past_the_recovered_end(spark, tmp_path):
    broker, p = writer5(tmp_path / "s")
    plain = broker.send(p, "PlainTopic", b"plain", queue_id=0)
    a = broker.send(p, "TimerTopic", b"a", delay_sec=600, queue_id=0)
    b = broker.send(p, "TimerTopic", b"b", delay_sec=900, queue_id=0)
    broker.send(p, "PlainTopic", b"between", queue_id=0)
    c = broker.send(p, "TimerTopic", b"c", delay_sec=1200, queue_id=0)
    broker.writer.close()
    units = {u.physical_offset: u for u in units_of(tmp_path / "s")}
    ua = units[a.record.physical_offset]
    D.timer_unit_outside_commitlog(tmp_path / "s", tmp_path / "other", timerlog_offset=ua.timerlog_offset,
                                   physical_offset=plain.record.physical_offset)
    found = audit(spark, [tmp_path / "other"], tmp_path / "o1", "--checks", "timers")
    wrong = [f for f in of(found, "timers.") if f["check"] == "timers.unit_not_timer_record"]
    assert len(wrong) == 1 and (wrong[0]["file_position"], wrong[0]["physical_offset"]) == (
        ua.file_position, plain.record.physical_offset)
    assert "a record of PlainTopic" in wrong[0]["message"] and wrong[0]["severity"] == "error"
    # a bad CRC before c: recovery ends the CommitLog there, and c's unit points past the recovered end
    between = [f for f in D._messages(tmp_path / "s") if f.message.body == b"between"][0]
    D.bad_crc(tmp_path / "s", tmp_path / "cut", physical_offset=between.physical_offset)
    found = audit(spark, [tmp_path / "cut"], tmp_path / "o2", "--checks", "timers")
    [f] = [f for f in of(found, "timers.") if f["check"] == "timers.unit_past_recovered_end"]
    uc = units[c.record.physical_offset]
    assert (f["file_position"], f["physical_offset"]) == (uc.file_position, c.record.physical_offset)
    assert str(between.physical_offset) in f["message"]
    assert b.record.physical_offset < between.physical_offset


# ------------------------------------------------------------------------------------------------ damage helpers


@pytest.fixture(scope="module")
def gen5(tmp_path_factory) -> Path:
    """``generate --rocketmq 5``: timers fired, rolled and recalled, POP pops, acks and revives, LMQ, CRC."""
    root = tmp_path_factory.mktemp("gen5") / "broker-g" / "store"
    generate_store(root, Traffic5Config(messages=4000, seed=11),
                   config_5x(WriterConfig(mappedFileSizeCommitLog=1 << 20, mappedFileSizeTimerLog=4096)))
    return root


def test_a_generated_5x_store_has_no_timer_or_pop_finding(spark, tmp_path, gen5):
    found = audit(spark, [gen5], tmp_path / "out", "--checks", "timers,pop")
    assert of(found, "timers.") + of(found, "pop.") == [] and found["exit"] == 0
    # the lmq family runs whatever --checks says: only the LMQ sends the generator makes RocketMQ mishandle
    assert {f["check"] for f in found["findings"]} <= {"lmq.dispatch_skipped", "lmq.offsets_diverged"}
    states = collections.Counter(r["state"] for r in found["tables"]["timers"])
    assert states["fired"] > 50 and states["pending"] > 0 and states["recalled"] > 0
    pops = collections.Counter(r["state"] for r in found["tables"]["pop"])
    assert set(pops) <= {"acked", "revived"} and pops["acked"] and pops["revived"]


def _pending_slot(root: Path) -> int:
    """A wheel slot still to be read whose chain holds more than one unit."""
    read = T.read_timer_checkpoint(root / "config" / "timercheck").last_read_time_ms
    with T.TimerLog(root) as log:
        for row in T.read_wheel_slots(root / "timerwheel").rows():
            if row["slot_time_ms"] >= read and len(T.walk_chain(log, row["last_pos"]).units) > 1:
                return row["slot_time_ms"]
    raise AssertionError("no pending slot with a chain")


def test_each_timer_damage_is_found_where_it_is(spark, tmp_path, gen5):
    cases = [
        (D.timer_unit_outside_commitlog(gen5, tmp_path / "outside"), "timers.unit_outside_commitlog",
         L.TIMER_LOG_UNIT.offset("physical_offset")),
        (D.looping_timer_chain(gen5, tmp_path / "loop", slot_time_ms=_pending_slot(gen5)), "timers.chain_loop",
         L.TIMER_LOG_UNIT.offset("prev_pos")),
        (D.timercheck_wrong_length(gen5, tmp_path / "short56"), "timers.timercheck_bad_length", 0),
        (D.timercheck_wrong_length(gen5, tmp_path / "short20", length=20), "timers.timercheck_bad_length", 0),
    ]
    for (d, check_id, field_at), name in zip(cases, ("outside", "loop", "short56", "short20")):
        found = audit(spark, [tmp_path / name], tmp_path / f"{name}-out", "--checks", "timers")
        mine = [f for f in found["findings"] if f["check"] == check_id]
        assert len(mine) == 1, (name, [f["check"] for f in found["findings"]])
        f = mine[0]
        assert f["file"] == d.path and f["file_position"] == d.position - field_at, (name, f)
    short = {n: [f for f in audit(spark, [tmp_path / n], tmp_path / f"{n}-again", "--checks", "timers")["findings"]
                 if f["check"] == "timers.timercheck_bad_length"][0] for n in ("short56", "short20")}
    assert short["short56"]["severity"] == "warning" and short["short20"]["severity"] == "error"
    assert "reads the missing ones as 0" in short["short20"]["message"]


def test_a_pop_checkpoint_that_is_not_json_is_found_at_its_record(spark, tmp_path, gen5):
    d = D.pop_checkpoint_not_json(gen5, tmp_path / "bad")
    found = audit(spark, [tmp_path / "bad"], tmp_path / "out", "--checks", "pop")
    [f] = of(found, "pop.")  # (beside the lmq family's, which runs whatever --checks says)
    assert {g["check"] for g in found["findings"]} - {f["check"]} <= {"lmq.dispatch_skipped", "lmq.offsets_diverged"}
    at = d.position - L.layout_for(0).offsets["body_crc"]  # the helper rewrites from BODYCRC on
    assert f["check"] == "pop.bad_body" and f["physical_offset"] == int(Path(d.path).name) + at
    assert f["file"] == Path(d.path).name and f["file_position"] == at + L.layout_for(0).body_offset
    assert f["severity"] == "error"
    assert dict(f["details"])["reason"] == "BAD_JSON"


# ------------------------------------------------------------------------------------------------ POP flows


def test_pop_states_orphan_acks_and_a_message_revived_twice(spark, tmp_path):
    broker, p = writer5(tmp_path / "s")
    for i in range(8):
        broker.send(p, "PopTopic", b"m%d" % i, queue_id=0, tags="T")
    acked = broker.pop("cgA", "PopTopic", 0, 2, invisible_time=10_000)  # offsets 0, 1
    broker.ack(acked, [0, 1])
    revived = broker.pop("cgA", "PopTopic", 0, 1, invisible_time=10_000)  # offset 2
    broker.pop("cgA", "PopTopic", 0, 1, invisible_time=10_000)  # offset 3: lost below
    fake = PopResult(P.PopCheckPoint(0, 1, 10_000, 0, 1, 0, "PopTopic", "cgB", 0, (0,), "broker-a"), acked.ck_record)
    broker._acked[("PopTopic", 0, "cgB", 1, 0)] = set()  # the writer's flow keeps its own pops' acks
    orphan = broker.ack(fake, 0)  # an ack no checkpoint matches
    fired = [f.record for f in broker.run_timers(START + 30_000) if f.outcome == "fired" and f.record.tags == "ck"]
    # the revive service re-puts offset 2 (twice: a revive done again) and commits past every checkpoint fired, so
    # offset 3, neither acked nor re-put, is lost
    src = broker._message_at("PopTopic", 0, 2)
    first = broker._revive_retry(revived.checkpoint, src)
    dup = broker._revive_retry(revived.checkpoint, src)
    for qid in {r.queue_id for r in fired}:
        broker.commit_offset(L.REVIVE_GROUP, broker.revive_topic, qid,
                             max(r.queue_offset for r in fired if r.queue_id == qid) + 1)
    pending = broker.pop("cgA", "PopTopic", 0, 1, invisible_time=5_000)  # offset 4: fired, not consumed
    broker.run_timers(START + 60_000)
    held = broker.pop("cgA", "PopTopic", 0, 1, invisible_time=600_000)  # offset 5: its checkpoint has not fired
    broker.writer.close()
    found = audit(spark, [tmp_path / "s"], tmp_path / "out", "--checks", "pop")
    rows = {r["queue_offset"]: r for r in found["tables"]["pop"] if r["group"] == "cgA"}
    assert {o: r["state"] for o, r in rows.items()} == {0: "acked", 1: "acked", 2: "revived", 3: "lost",
                                                        4: "revive_pending", 5: "in_flight"}
    assert rows[2]["retry_offset"] == first.physical_offset and rows[2]["uniq_key"] == src.uniq_key
    assert rows[5]["checkpoint_offset"] == held.ck_record.physical_offset
    assert rows[0]["ack_offset"] is not None and rows[4]["revive_time_ms"] == pending.checkpoint.revive_time
    by = collections.defaultdict(list)
    for f in found["findings"]:
        by[f["check"]].append(f)
    assert set(by) == {"pop.lost", "pop.orphan_ack", "pop.revived_twice"}
    [f] = by["pop.lost"]
    assert (f["topic"], f["queue_id"], f["queue_offset"]) == ("PopTopic", 0, 3) and f["severity"] == "error"
    [f] = by["pop.orphan_ack"]  # due already when sent (pop time 1): stored on the revive topic at once
    assert dict(f["details"])["group"] == "cgB" and f["physical_offset"] == orphan.physical_offset
    [f] = by["pop.revived_twice"]
    assert f["physical_offset"] == dup.physical_offset and f["topic"] == "%RETRY%cgA_PopTopic"
    metrics = {r["metric"]: r["value"] for r in pq.read_table(tmp_path / "out" / "metrics").to_pylist()}
    assert metrics["pop_lost"] == 1 and metrics["pop_in_flight"] == 1 and metrics["pop_orphan_acks"] == 1
    assert metrics["pop_acked"] == 2 and metrics["pop_revived"] == 1 and metrics["pop_revive_pending"] == 1


def test_a_corrupt_unit_the_chain_through_it_and_a_wheel_of_the_wrong_length(spark, tmp_path, gen5):
    """A unit whose magic the broker refuses, in the file the timer's recovery scans: the recovery truncates the
    timer log there (its later units are lost), and the chain of the slot still to be read that runs through it
    breaks there; a timerwheel of another length keeps the broker from starting."""
    root = D.copy_store(gen5, tmp_path / "s")
    read = T.read_timer_checkpoint(root / "config" / "timercheck").last_read_time_ms
    last = T.list_timer_log_files(root)[-1]
    mine = [u for u in T.walk_timer_log(last) if u.kind == "entry"]
    victim = next(u for u in mine if u.slot_time_ms >= read and any(
        v.prev_pos == u.timerlog_offset for v in mine))  # a pending unit a later one points back to
    patch(root / "timerlog" / last.name, victim.file_position + L.TIMER_LOG_UNIT.offset("magic"),
          L.TIMER_LOG_UNIT.pack("magic", 0x21))
    os.truncate(root / "timerwheel", 1000)
    found = audit(spark, [root], tmp_path / "out", "--checks", "timers")
    by = collections.defaultdict(list)
    for f in found["findings"]:
        by[f["check"]].append(f)
    [c] = by["timers.corrupt_unit"]
    later = sum(1 for u in mine if u.timerlog_offset > victim.timerlog_offset)
    assert (c["file"], c["file_position"]) == (f"timerlog/{last.name}", victim.file_position)
    assert f"{later} later unit(s) go with it" in c["message"]
    [w] = by["timers.wheel_bad_length"]
    assert (w["file"], w["file_position"], w["severity"]) == ("timerwheel", 1000, "error")
    [broker] = found["summary"]["brokers"]  # the commitlog recovers, but TimerWheel refuses to load: no start
    assert broker["recovery"]["broker_will_start"] and broker["verdict"]["will_start"] is False
    assert broker["verdict"]["level"] == "will-not-start"
    assert "timerwheel is 1000 bytes" in broker["verdict"]["why_not"][-1]
    assert broker["verdict"]["actions"][0]["check"] == "timers.wheel_bad_length"
    # a short wheel holds no slot, so no chain is walked; with the wheel restored, the chain breaks at the unit
    shutil.copyfile(gen5 / "timerwheel", root / "timerwheel")
    found = audit(spark, [root], tmp_path / "out2", "--checks", "timers")
    broken = [f for f in found["findings"] if f["check"] == "timers.chain_broken"]
    assert broken and all("corrupt unit" in f["message"] or "timer log's end" in f["message"] or
                          "no unit starts" in f["message"] for f in broken)
    assert any(str(victim.timerlog_offset) in f["message"] for f in broken)


def test_the_report_says_how_many_timers_wait_and_when_the_next_are_due(spark, tmp_path):
    out = tmp_path / "out"
    audit_job.run(spark, audit_job.build_parser().parse_args(["--store", str(store5("v5-timer")), "--out", str(out)]))
    page = (out / "report.html").read_text(encoding="utf-8")
    section = page[page.index("<h2 id='timers'>"):]
    section = section[:section.index("</table>")]
    cells = [c.split(">", 1)[1] for c in section.split("<td")[1:]]
    assert cells[:6] == ["v5-timer</td>", "34</td>", "0</td>", "13</td>", "2</td>", "0</td>"]
    first = json.loads((out / "summary.json").read_text())["brokers"][0]["timers"]["next_due"][0]  # the manifest's
    assert f"epoch ms {first['due_ms']}'" in cells[7].split("<br>")[0] and f"&times; {first['messages']}" in cells[7]
    without = tmp_path / "plain"
    audit_job.run(spark, audit_job.build_parser().parse_args(["--store", str(fixture_store("broker")),
                                                              "--out", str(without)]))
    assert "id='timers'" not in (without / "report.html").read_text(encoding="utf-8")


def test_hostile_timer_files_are_findings_never_a_crash_or_a_hang(spark, tmp_path):
    """FIFOs where the timer's files belong are named by the metadata family and never opened; random bytes in the
    timer log, the wheel and the timercheck are classified (corrupt units, broken chains), never an audit failure."""
    import random

    fifo = D.copy_store(store5("v5-timer"), tmp_path / "fifo")
    try:
        os.mkfifo(fifo / "timerlog" / "00000000000000004096")
    except OSError:
        pytest.skip("no FIFOs here")
    for rel in ("timerwheel", "config/timercheck"):
        (fifo / rel).unlink()
        os.mkfifo(fifo / rel)
    found = audit(spark, [fifo], tmp_path / "fifo-out")
    assert sorted(f["file"] for f in found["findings"] if f["check"] == "metadata.store_file_unreadable") == \
        ["config/timercheck", "timerlog/00000000000000004096", "timerwheel"]
    assert not of(found, "timers.") and not of(found, "broker.")
    rng = random.Random(32)
    noise = D.copy_store(store5("v5-timer"), tmp_path / "noise")
    for f in sorted((noise / "timerlog").iterdir()):
        raw = bytearray(f.read_bytes())
        for _ in range(40):
            raw[rng.randrange(len(raw))] = rng.randrange(256)
        f.write_bytes(bytes(raw))
    patch(noise / "config" / "timercheck", 0, bytes(rng.randrange(256) for _ in range(56)))
    slot = T.read_wheel_slots(noise / "timerwheel").slot_index[0]
    patch(noise / "timerwheel", int(slot) * T.SLOT_SIZE + 8, bytes(rng.randrange(256) for _ in range(16)))
    found = audit(spark, [noise], tmp_path / "noise-out", "--checks", "timers,pop")
    assert not of(found, "broker.") and of(found, "timers.corrupt_unit")
    assert all(f["file"] and f["file_position"] is not None for f in of(found, "timers.corrupt_unit"))


def test_a_revive_the_put_hooks_delay_is_one_revive(spark, tmp_path):
    """A delivered delay-level message keeps its DELAY property (RocketMQ does not clear it), so its revive goes
    through the put hooks to SCHEDULE_TOPIC_XXXX, with the retry topic as REAL_TOPIC, and is delivered there later:
    revived, once."""
    broker, p = writer5(tmp_path / "s")
    broker.send(p, "PopTopic", b"late", queue_id=0, delay_level=1)
    broker.deliver_due(START + 5_000)
    got = broker.pop("cgA", "PopTopic", 0, 1, invisible_time=10_000)
    [retry] = broker.revive(START + 30_000)
    assert retry.topic == L.SCHEDULE_TOPIC and retry.properties[L.PROPERTY_REAL_TOPIC] == "%RETRY%cgA_PopTopic"
    broker.writer.close()
    found = audit(spark, [tmp_path / "s"], tmp_path / "out", "--checks", "pop")
    [row] = found["tables"]["pop"]
    assert (row["queue_offset"], row["state"], row["retry_offset"]) == (got.checkpoint.offsets()[0], "revived",
                                                                        retry.physical_offset)
    assert found["findings"] == []
    broker2, p2 = writer5(tmp_path / "s2")  # the same, and the delayed retry delivered to the retry topic
    broker2.send(p2, "PopTopic", b"late", queue_id=0, delay_level=1)
    broker2.deliver_due(START + 5_000)
    broker2.pop("cgA", "PopTopic", 0, 1, invisible_time=10_000)
    broker2.revive(START + 30_000)
    delivered = broker2.deliver_due(START + 60_000)
    assert [d.topic for d in delivered] == ["%RETRY%cgA_PopTopic"]
    broker2.writer.close()
    found = audit(spark, [tmp_path / "s2"], tmp_path / "out2", "--checks", "pop")
    assert [r["state"] for r in found["tables"]["pop"]] == ["revived"] and found["findings"] == []


def test_a_broker_whose_timer_audit_fails_is_that_brokers_finding(spark, tmp_path, monkeypatch):
    """A bug or a file no check foresaw in one broker's timer store: that broker's broker.audit_failed, the other
    broker's timers as they are, and summary.json still written."""
    from jobs.audit.checks import timers

    real = timers._audit_broker

    def failing(b):
        if b.name == "v5-timer":
            raise ValueError("no check foresaw this")
        return real(b)

    monkeypatch.setattr(timers, "_audit_broker", failing)
    found = audit(spark, [f"v5-timer={store5('v5-timer')}", f"other={store5('v5-default')}"], tmp_path / "out",
                  "--checks", "timers")
    [failed] = of(found, "broker.")
    assert failed["broker"] == "v5-timer" and dict(failed["details"])["error"] == "ValueError: no check foresaw this"
    brokers = {b["name"]: b for b in found["summary"]["brokers"]}
    assert "timers" not in brokers["v5-timer"] and brokers["other"]["timers"]["pending"] == 0
    assert {r["broker"] for r in found["tables"]["timers"]} <= {"other"}


@pytest.mark.parametrize("store,as_of", [("v5-timer", None), ("v5-timer", "1900000000000"), ("generated", None)])
def test_timers_traced_a_bucket_of_keys_at_a_time_are_traced_whole(spark, tmp_path, monkeypatch, store, as_of):
    """Timer messages (timers, rolls, recalls, fired re-puts) spread over buckets of two rows of records and units
    each: the timers table, the timer findings in their order and the summary are those of one bucket.  The v5-timer
    fixture as of its dump time and as of years later (every waiting message overdue or past reach); a generated
    store of many timers, recalls cancelling some.  (Spread by record offset instead of key, a fired re-put is traced
    apart from its timer message and both fail.)"""
    from jobs.audit import buckets

    if store == "generated":
        root = tmp_path / "generated"
        generate_store(root, Traffic5Config(messages=1200, seed=3, p_timer=0.6, p_delay=0.05, p_lmq=0.0, p_pop=0.0))
    else:
        root = store5(store)
    extra = ("--checks", "timers", *(() if as_of is None else ("--as-of", as_of)))
    whole = audit(spark, [root], tmp_path / "whole", *extra)
    monkeypatch.setattr(buckets, "ROWS_PER_BUCKET", 2)
    spread = audit(spark, [root], tmp_path / "spread", *extra)
    assert spread["tables"]["timers"] == whole["tables"]["timers"] and len(whole["tables"]["timers"]) > 20
    drop = ("run_id", "run_time")
    assert [{k: v for k, v in f.items() if k not in drop} for f in of(spread, "timers.")] == \
        [{k: v for k, v in f.items() if k not in drop} for f in of(whole, "timers.")]
    assert [b["timers"] for b in spread["summary"]["brokers"]] == [b["timers"] for b in whole["summary"]["brokers"]]
    if as_of is not None:
        assert len(of(whole, "timers.")) > 5
    if store == "generated":
        assert {r["state"] for r in whole["tables"]["timers"]} >= {"recalled", "recall", "fired", "pending"}
