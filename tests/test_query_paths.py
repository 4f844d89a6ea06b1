"""``query --explain`` on 5.x stores (jobs/query_paths.py, issue 32): a timer message's path as the v5-timer fixture's
manifest gives it (put, timer-log unit, wheel slot, fired as record M / pending / recalled / a roll), a timer message
asked for on its real topic before it is delivered, and a POP-consumed message's state on a writer-built store;
a 4.x store gets none of these lines."""
from __future__ import annotations

import datetime
import io
import json

from jobs import query
from store_format import layout as L

from .conftest import fixture_store
from .test_v5_audit import START, writer5
from .test_v5_fixtures import manifest5, store5


def ask(*argv, spark=None):
    out, err = io.StringIO(), io.StringIO()
    args = query.build_parser().parse_args([str(a) for a in argv])
    code = query.run(spark, args, out=out, err=err).exit_code
    lines = [json.loads(x) for x in out.getvalue().splitlines()]
    return code, [x for x in lines if x["kind"] == "message"], [x for x in lines if x["kind"] == "explain"]


def _timers() -> dict:
    m = manifest5("v5-timer")
    joined = m["timerMessages (join of puts, messages and timer.timerLogUnits; derived in Python, not by RocketMQ)"]
    return {t["label"]: t for t in joined}


def iso(ms) -> str:
    """How a person reads an epoch-ms time in query output: ISO-8601 UTC."""
    return datetime.datetime.fromtimestamp(int(ms) / 1000, datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%f")[
        :-3] + "Z"


def _dequeue_ms(offset: int) -> str:
    [m] = [m for m in manifest5("v5-timer")["messages"] if m["commitLogOffset"] == offset]
    return m["properties"]["TIMER_DEQUEUE_MS"]


def _reasons(explains: list[dict]) -> dict:
    out = {}
    for e in explains:
        out.setdefault(e["reason"], []).append(e)
    return out


def test_a_fired_timer_messages_path():
    t = _timers()["short-sec-0"]
    [unit] = t["timerLogUnits"]
    [(delivered, topic, qid, qoff)] = t["otherRecordsWithSameUniqKey_[offset,topic,queueId,queueOffset]"]
    code, found, explains = ask("--store", store5("v5-timer"), "--uniq-key", t["uniqKey"], "--explain")
    assert code == 0 and sorted(m["physical_offset"] for m in found) == sorted([t["wroteOffset"], delivered])
    r = _reasons(explains)
    [enq] = r["TIMER_ENQUEUED"]
    assert enq["physical_offset"] == t["wroteOffset"] and f"due at {iso(t['TIMER_OUT_MS'])} (TIMER_OUT_MS " \
        f"{t['TIMER_OUT_MS']})" in enq["detail"]
    [wheel] = r["TIMER_IN_WHEEL"]
    assert f"unit at {unit['offset']} " in wheel["detail"]
    assert f"slot for {iso(unit['slotTimeMs'])} ({unit['slotTimeMs']}, slot index" in wheel["detail"]
    [fired] = r["TIMER_FIRED"]
    assert fired["physical_offset"] == delivered and f"on {topic}/{qid} queue offset {qoff}" in fired["detail"]
    assert f"fired at {iso(_dequeue_ms(delivered))} (TIMER_DEQUEUE_MS " in fired["detail"]


def test_pending_recalled_and_rolling_timer_messages():
    timers = _timers()
    for label, reason in (("far-0", "TIMER_PENDING"), ("far-2", "TIMER_RECALLED"), ("roll-0", "TIMER_PENDING")):
        t = timers[label]
        code, found, explains = ask("--store", store5("v5-timer"), "--uniq-key", t["uniqKey"], "--explain")
        r = _reasons(explains)
        [state] = [e for e in r[reason] if e["physical_offset"] == t["wroteOffset"]]
        assert "TIMER_FIRED" not in r, label
        if label == "roll-0":
            [wheel] = r["TIMER_IN_WHEEL"]
            assert "a roll: re-put at" in wheel["detail"] and f"due at {iso(t['TIMER_OUT_MS'])}" in state["detail"]
        if label == "far-2":  # the recall is explained too, as what it is
            [recall] = r["TIMER_RECALL"]
            assert f"TIMER_DEL_UNIQKEY {t['originalTopic']}+{t['uniqKey']}" in recall["detail"]


def test_a_timer_message_asked_for_on_its_topic_before_it_is_delivered(spark):
    t = _timers()["far-0"]
    code, found, explains = ask("--store", store5("v5-timer"), "--topic", t["originalTopic"], "--key", t["uniqKey"],
                                "--explain", spark=spark)
    assert code == 1 and found == []  # not in its topic yet
    [pending] = _reasons(explains)["TIMER_PENDING"]
    assert pending["physical_offset"] == t["wroteOffset"] and \
        pending["detail"].endswith(f"{iso(t['TIMER_OUT_MS'])} ({t['TIMER_OUT_MS']})")


def test_a_pop_consumed_messages_state(tmp_path):
    broker, p = writer5(tmp_path / "s")
    sent = [broker.send(p, "PopTopic", b"m%d" % i, queue_id=0) for i in range(3)]
    acked = broker.pop("cgA", "PopTopic", 0, 1, invisible_time=10_000)
    broker.ack(acked, 0)
    revived = broker.pop("cgA", "PopTopic", 0, 1, invisible_time=10_000)
    retried = broker.revive(START + 30_000)
    held = broker.pop("cgA", "PopTopic", 0, 1, invisible_time=600_000)
    broker.writer.close()
    expect = {sent[0].msg_id: "POP_ACKED", sent[1].msg_id: "POP_REVIVED", sent[2].msg_id: "POP_IN_FLIGHT"}
    for uniq, reason in expect.items():
        code, found, explains = ask("--store", tmp_path / "s", "--uniq-key", uniq, "--explain")
        [state] = [e for e in explains if e["reason"].startswith("POP_")]
        assert state["reason"] == reason and "popped by cgA" in state["detail"], uniq
        [original] = [m for m in found if m["topic"] == "PopTopic"]
        assert state["physical_offset"] == original["physical_offset"]
    assert [r.body for r in retried] == [b"m1"] and held.checkpoint.offsets() == [2]
    code, found, explains = ask("--store", tmp_path / "s", "--uniq-key", sent[1].msg_id, "--explain")
    [state] = [e for e in explains if e["reason"] == "POP_REVIVED"]
    assert f"revived as record {retried[0].physical_offset} on %RETRY%cgA_PopTopic" in state["detail"]
    assert revived.checkpoint.offsets() == [1]


def test_a_4x_store_gets_no_timer_or_pop_lines():
    m = json.loads((fixture_store("broker").parent / "manifest.json").read_text())["messages"][0]
    code, found, explains = ask("--store", fixture_store("broker"), "--uniq-key", m["uniqKey"], "--explain")
    assert code == 0 and found and not [e for e in explains if e["reason"].startswith(("TIMER_", "POP_"))]
    assert L.TIMER_TOPIC not in {f["topic"] for f in found}


def test_a_looping_chain_is_a_loop_in_explain_too(tmp_path):
    """The audit reports a wheel slot whose chain loops (timers.chain_loop: the dequeue of that slot never ends);
    explain says so of the messages on that chain and of those in later slots, instead of TIMER_PENDING."""
    from store_format.write import damage as D

    timers = _timers()
    D.looping_timer_chain(store5("v5-timer"), tmp_path / "s")  # the longest chain: far-23's slot, with roll-0..2
    t, later = timers["far-23"], timers["far-29"]
    code, found, explains = ask("--store", tmp_path / "s", "--uniq-key", t["uniqKey"], "--explain")
    r = _reasons(explains)
    [loop] = r["TIMER_CHAIN_LOOP"]
    assert "TIMER_PENDING" not in r and loop["physical_offset"] == t["wroteOffset"]
    assert f"slot for {iso(t['TIMER_OUT_MS'])} ({t['TIMER_OUT_MS']}) loops at the timer-log unit at" in loop["detail"]
    code, found, explains = ask("--store", tmp_path / "s", "--uniq-key", later["uniqKey"], "--explain")
    r = _reasons(explains)
    [blocked] = r["TIMER_BLOCKED_BY_LOOP"]
    assert "TIMER_PENDING" not in r and f"earlier wheel slot for {iso(t['TIMER_OUT_MS'])}" in blocked["detail"]
    # the unchanged fixture: both pending
    for x in (t, later):
        code, found, explains = ask("--store", store5("v5-timer"), "--uniq-key", x["uniqKey"], "--explain")
        assert "TIMER_PENDING" in _reasons(explains) and not {"TIMER_CHAIN_LOOP", "TIMER_BLOCKED_BY_LOOP"} & set(
            _reasons(explains))


def test_a_rolled_timer_is_followed_to_its_own_re_put_not_its_recalls(tmp_path):
    """A timer message beyond the roll window and its recall, enqueued in the same millisecond, both roll: the
    original's TIMER_ROLLED names its own re-put, not the recall's (which carries TIMER_DEL_UNIQKEY)."""
    broker, p = writer5(tmp_path / "s")
    due = START + 3 * 86_400_000
    sent = broker.send(p, "TopicR", b"x", deliver_ms=due)
    broker.recall(p, "TopicR", sent.msg_id, due)
    fired = broker.run_timers(START + 2 * 86_400_000 + 10_000)
    broker.writer.close()
    rolled = {f.source.physical_offset: f.record.physical_offset for f in fired if f.outcome == "rolled"}
    original = sent.record.physical_offset
    assert len(rolled) == 2 and original in rolled  # the original and the recall
    code, found, explains = ask("--store", tmp_path / "s", "--uniq-key", sent.msg_id, "--explain")
    [roll] = [e for e in _reasons(explains)["TIMER_ROLLED"]]
    assert roll["physical_offset"] == rolled[original]
    assert f"as record {rolled[original]} (TIMER_ROLL_TIMES 1)" in roll["detail"]
