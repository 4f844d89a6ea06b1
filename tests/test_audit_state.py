"""``audit --state DIR`` (issue 41, jobs/audit/state.py): a scheduled audit compares each broker's files and verdict
with the last run's.  On copies of RocketMQ's own stores (4.9.7 and 5.3.3): a second run of an unchanged store finds
what the first found and nothing more; bytes rewritten in an append-only file, a queue file's end zeroed and a file
deleted are findings at their place; growth is none; the verdict's change is said.  The state is safe to lose: a
folder that is not a state, a damaged one, one of another version or of another store, and a second run holding it.
"""
from __future__ import annotations

import json
import os
import shutil
import struct
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest

from jobs.audit import job as audit_job
from runtime import commit
from runtime.apart import OutputError

from .conftest import FIXTURES, FIXTURES_5X, count_paired, tree_state


def audit(spark, store: Path, out: Path, state: Path, *extra, name: str = "b1") -> dict:
    args = audit_job.build_parser().parse_args(["--store", f"{name}={store}", "--out", str(out), "--state",
                                                str(state), "--no-report", *extra])
    result = audit_job.run(spark, args)
    findings = pq.read_table(out / "findings").to_pylist()
    return {"exit": result.exit_code, "findings": findings, "summary": json.loads((out / "summary.json").read_text()),
            "history": [f for f in findings if f["check"].startswith("history.")]}


def copy_of(src: Path, tmp_path: Path) -> Path:
    dst = tmp_path / "store"
    shutil.copytree(src, dst)
    return dst


def ids(found: dict) -> set:
    return {f["finding_id"] for f in found["findings"] if not f["check"].startswith("history.")}


def flip(path: Path, position: int) -> None:
    with open(path, "r+b") as f:
        f.seek(position)
        b = f.read(1)
        f.seek(position)
        f.write(bytes([b[0] ^ 0xFF]))


@pytest.mark.parametrize("fixture", [FIXTURES / "basic" / "store", FIXTURES_5X / "v5-timer" / "store"],
                         ids=["4.9.7-basic", "5.3.3-timer"])
def test_an_unchanged_store_then_rewritten_zeroed_and_deleted_files(spark, tmp_path, fixture):
    store, state = copy_of(fixture, tmp_path), tmp_path / "state"
    first = audit(spark, store, tmp_path / "out1", state)
    since = first["summary"]["brokers"][0]["since_last_run"]
    assert since["previous_run_id"] is None and not since["changed"] and since["files"]["new"] > 5
    assert first["summary"]["state"]["used"] is False and first["history"] == []
    assert json.loads((state / "state.json").read_text())["brokers"]["b1"]["run_id"] == first["summary"]["run_id"]

    second = audit(spark, store, tmp_path / "out2", state)
    since = second["summary"]["brokers"][0]["since_last_run"]
    assert second["summary"]["state"]["used"] is True and second["history"] == []
    assert since["previous_run_id"] == first["summary"]["run_id"] and not since["changed"]
    assert since["files"] == {**since["files"], "new": 0, "grown": 0, "rewritten": 0, "disappeared": 0}
    assert ids(second) == ids(first) and second["exit"] == first["exit"]  # what a run without a state finds

    segment = sorted((store / "commitlog").iterdir())[0]
    flip(segment, 100)  # in the first block: always among the kept ones
    queue = sorted(p for p in (store / "consumequeue").rglob("*") if p.is_file() and p.stat().st_size)
    zeroed, gone = queue[0], queue[-1]
    written = len(zeroed.read_bytes().rstrip(b"\0"))
    with open(zeroed, "r+b") as f:  # its last unit zeroed: its written bytes now end earlier
        f.seek(written - written % 20 - (20 if written % 20 == 0 else 0))
        f.write(bytes(20))
    gone.unlink()
    third = audit(spark, store, tmp_path / "out3", state)
    found = {(f["check"], f["file"], f["topic"]): f for f in third["history"]}
    seg = found[("history.rewritten", segment.name, None)]
    assert seg["severity"] == "error" and seg["file_position"] == 0 and seg["physical_offset"] == int(segment.name)
    assert first["summary"]["run_id"] not in seg["message"] and second["summary"]["run_id"] in seg["message"]
    topic = zeroed.parent.parent.name
    cut = found[("history.rewritten", zeroed.name, topic)]
    assert "written bytes end at" in cut["message"] and cut["queue_id"] == int(zeroed.parent.name)
    left = found[("history.disappeared", gone.name, gone.parent.parent.name)]
    assert left["severity"] == "info" and "queue offsets 0 to" in left["message"]
    assert dict(left["details"])["messages"] == str(-(-len(
        (fixture / gone.relative_to(store)).read_bytes().rstrip(b"\0")) // 20))
    assert len(third["history"]) == 3 and third["exit"] == 1
    since = third["summary"]["brokers"][0]["since_last_run"]
    assert since["changed"] and since["files"]["rewritten"] == 2 and since["files"]["disappeared"] == 1
    assert any("rewritten since the last run" in c for c in since["changes"])
    assert any(c.startswith("verdict ") for c in since["changes"])  # the flipped byte damages a message

    fourth = audit(spark, store, tmp_path / "out4", state)  # the state moved on: the same bytes are no news
    assert fourth["history"] == [] and not fourth["summary"]["brokers"][0]["since_last_run"]["changed"]


def test_growth_is_counted_not_found(spark, tmp_path):
    """The active segment's messages past a boundary zeroed (the store as it was earlier), then its bytes back: the
    segment grew, and nothing was rewritten."""
    fixture = FIXTURES / "basic" / "store"
    store, state = copy_of(fixture, tmp_path), tmp_path / "state"
    segment = sorted((store / "commitlog").iterdir())[0]
    data = segment.read_bytes()
    pos = 0
    while pos < len(data.rstrip(b"\0")) // 2:
        pos += struct.unpack_from(">i", data, pos)[0]
    with open(segment, "r+b") as f:
        f.seek(pos)
        f.write(bytes(len(data) - pos))
    audit(spark, store, tmp_path / "out1", state)
    segment.write_bytes(data)
    grown = audit(spark, store, tmp_path / "out2", state)
    since = grown["summary"]["brokers"][0]["since_last_run"]
    assert grown["history"] == [] and since["files"]["grown"] == 1 and since["files"]["rewritten"] == 0
    rows = {r["path"]: r for r in pq.read_table(next((state / "brokers").iterdir()) / "files.parquet").to_pylist()}
    assert rows[f"commitlog/{segment.name}"]["written"] == len(data.rstrip(b"\0"))
    assert rows[f"commitlog/{segment.name}"]["messages"] == 85  # the fixture's manifest: 85 records


def test_a_folder_that_is_not_a_state_is_left_as_it_is(spark, tmp_path):
    store = copy_of(FIXTURES / "basic" / "store", tmp_path)
    foreign = tmp_path / "mine"
    foreign.mkdir()
    (foreign / "notes.txt").write_text("not a state")
    before = tree_state(foreign)
    found = audit(spark, store, tmp_path / "out", foreign)
    assert found["exit"] == 0 and tree_state(foreign) == before
    note = found["summary"]["state"]
    assert note["used"] is False and "is not an audit state" in note["note"]
    table = tmp_path / "delta"  # a Delta table of something else
    (table / "_delta_log").mkdir(parents=True)
    (table / "_delta_log" / "00000000000000000000.json").write_text('{"protocol":{"minReaderVersion":1}}\n')
    before = tree_state(table)
    found = audit(spark, store, tmp_path / "out-delta", table)
    assert tree_state(table) == before and "is not an audit state" in found["summary"]["state"]["note"]
    # an audit's output given as the state: this suite's folder, but no state: left as it is too
    out_before = tree_state(tmp_path / "out")
    again = audit(spark, store, tmp_path / "out2", tmp_path / "out")
    assert tree_state(tmp_path / "out") == out_before and "is not an audit state" in again["summary"]["state"]["note"]


def test_a_damaged_state_is_written_anew_another_version_or_store_left_alone(spark, tmp_path):
    store, state = copy_of(FIXTURES / "basic" / "store", tmp_path), tmp_path / "state"
    first = audit(spark, store, tmp_path / "out1", state)
    parts = list((state / "brokers").glob("*/parts/*.arrow"))  # the segment's walk, its range's scan, the index
    # file's check, the retries' origins of the range's hops, the transactions' pairing (its part's keys, the
    # table, what it was paired from) and the queue files' survey rows, kept
    assert len(parts) == 8
    for part in parts:
        part.write_bytes(b"garbage")  # a damaged part: the task runs instead, no finding says otherwise
    again = audit(spark, store, tmp_path / "out0", state)
    assert again["summary"]["state"]["tasks_given_back"] == {"survey": 1, "scan": 0} and ids(again) == ids(first)
    assert again["history"] == [] and again["exit"] == first["exit"]
    (state / "state.json").write_text("{ damaged")
    found = audit(spark, store, tmp_path / "out2", state)
    assert "is damaged" in found["summary"]["state"]["note"] and found["history"] == []
    assert json.loads((state / "state.json").read_text())["run_id"] == found["summary"]["run_id"]

    data = json.loads((state / "state.json").read_text())
    (state / "state.json").write_text(json.dumps({**data, "run_time": "2999-01-01T00:00:00+00:00"}))
    ahead = audit(spark, store, tmp_path / "out-clock", state)  # a clock gone backwards: said, compared all the same
    assert "clock gone backwards" in ahead["summary"]["state"]["note"] and ahead["summary"]["state"]["used"]
    assert ahead["history"] == [] and ids(ahead) == ids(found)
    data = json.loads((state / "state.json").read_text())
    (state / "state.json").write_text(json.dumps({**data, "version": 99}))
    before = tree_state(state)
    other = audit(spark, store, tmp_path / "out3", state)
    assert "another version" in other["summary"]["state"]["note"] and tree_state(state) == before
    (state / "state.json").write_text(json.dumps(data))

    before = tree_state(state)  # the same broker name over another store's bytes (RocketMQ's other 4.9.7 store)
    elsewhere = copy_of(FIXTURES / "broker" / "store", tmp_path / "other")
    refused = audit(spark, elsewhere, tmp_path / "out4", state)
    assert "is another store" in refused["summary"]["state"]["note"] and refused["history"] == []
    assert tree_state(state) == before and "since_last_run" not in refused["summary"]["brokers"][0]


def test_a_second_run_on_a_state_is_refused_and_a_failed_run_leaves_it_whole(spark, tmp_path, monkeypatch):
    store, state = copy_of(FIXTURES / "basic" / "store", tmp_path), tmp_path / "state"
    audit(spark, store, tmp_path / "out1", state)
    before = tree_state(state)
    with commit.JobRun("audit") as first:
        first.output(str(state), overwrite=True, what="state")
        with pytest.raises(commit.ClaimError):
            with commit.JobRun("audit"):
                audit(spark, store, tmp_path / "out2", state)
        first.abandon()
    assert tree_state(state) == before

    flip(sorted((store / "commitlog").iterdir())[0], 100)
    from jobs.audit import terminal

    def broken(*a, **k):
        raise RuntimeError("killed while rendering")
    monkeypatch.setattr(terminal, "render", broken)
    with pytest.raises(RuntimeError):
        audit(spark, store, tmp_path / "out3", state)
    assert tree_state(state) == before and not (tmp_path / "out3").exists()
    monkeypatch.undo()
    found = audit(spark, store, tmp_path / "out4", state)  # what the failed run saw is found again
    assert [f["check"] for f in found["history"]] == ["history.rewritten"]


def test_a_store_that_changes_while_it_is_read_leaves_the_state_whole(spark, tmp_path, monkeypatch):
    """The chain of custody fails the run (the store changed after its first fingerprint): the state is not moved
    on, and the next run compares with the last committed one."""
    from runtime.custody import CustodyError

    from .test_custody import touch_back

    store, state = copy_of(FIXTURES / "basic" / "store", tmp_path), tmp_path / "state"
    first = audit(spark, store, tmp_path / "out1", state)
    before = tree_state(state)
    flip(sorted((store / "commitlog").iterdir())[0], 100)  # a change the next run must still find
    real_watch = audit_job.watch

    def watch_then_change(run, roots, **kw):
        custody = real_watch(run, roots, **kw)
        touch_back(store)
        return custody
    monkeypatch.setattr(audit_job, "watch", watch_then_change)
    with pytest.raises(CustodyError):
        audit(spark, store, tmp_path / "out2", state)
    assert tree_state(state) == before and not (tmp_path / "out2").exists()
    monkeypatch.undo()
    found = audit(spark, store, tmp_path / "out3", state)
    assert found["summary"]["brokers"][0]["since_last_run"]["previous_run_id"] == first["summary"]["run_id"]
    assert [f["check"] for f in found["history"]] == ["history.rewritten"]


def test_state_beside_an_input_or_the_output_is_refused(spark, tmp_path):
    store = copy_of(FIXTURES / "basic" / "store", tmp_path)
    for state in (store / "state", tmp_path / "out"):
        with pytest.raises(OutputError):
            audit(spark, store, tmp_path / "out", state)
    assert not (store / "state").exists()


@pytest.mark.browser
def test_a_fleet_in_one_run_puts_the_changed_broker_first(spark, tmp_path):
    """Two brokers of one run, one state each under DIR: the one with a rewritten segment comes first in the
    report's fleet table, which says what changed (read in Chromium), and the other says "no change"."""
    from .support.browser import render
    from .test_report import SCREEN, _words

    a = copy_of(FIXTURES / "basic" / "store", tmp_path / "a")
    b = copy_of(FIXTURES / "broker" / "store", tmp_path / "b")
    state = tmp_path / "state"

    def run(out):
        args = audit_job.build_parser().parse_args(["--store", f"alpha={a}", "--store", f"beta={b}", "--out",
                                                    str(out), "--state", str(state)])
        audit_job.run(spark, args)
        return json.loads((out / "summary.json").read_text())

    run(tmp_path / "out1")
    assert {p.name.split("-")[0] for p in (state / "brokers").iterdir()} == {"alpha", "beta"}
    flip(sorted((b / "commitlog").iterdir())[0], 100)
    summary = run(tmp_path / "out2")
    since = {x["name"]: x["since_last_run"] for x in summary["brokers"]}
    assert since["beta"]["changed"] and not since["alpha"]["changed"]
    page = render(tmp_path / "out2" / "report.html", tmp_path / "fleet.png", viewport=SCREEN)
    assert page.console_errors == [] and page.broken_images == 0
    text = _words(page.page_text)
    fleet = text[text.index("Fleet"):]
    assert "since the last run" in fleet and fleet.index("beta") < fleet.index("alpha")
    assert "rewritten since the last run" in fleet and "no change" in fleet
    assert "Since the last run" in text  # each broker's first screen says it too


# ---- growth: a store grown in steps, audited after each both ways (issue 41's equality) ----

START = 1_795_786_365_000


def _same_as_full(inc: Path, full: Path) -> None:
    """An audit with the state and one without, of the same store: the same findings (the state's history.* aside),
    metrics, detail tables and brokers (the state's since_last_run aside)."""
    from .conftest import AUDIT_STAMPS, parquet_rows

    def findings(out):
        rows = parquet_rows(out / "findings", AUDIT_STAMPS)
        return {k: n for k, n in rows.items() if "history." not in k}
    assert findings(inc) == findings(full)
    assert parquet_rows(inc / "metrics", AUDIT_STAMPS) == parquet_rows(full / "metrics", AUDIT_STAMPS)
    tables = sorted(p.name for p in (full / "tables").iterdir())
    assert tables == sorted(p.name for p in (inc / "tables").iterdir())
    for table in tables:
        assert parquet_rows(inc / "tables" / table) == parquet_rows(full / "tables" / table), table
    a, b = (json.loads((d / "summary.json").read_text().replace(str(d), "<out>")) for d in (inc, full))
    for broker in a["brokers"]:
        broker.pop("since_last_run")
    assert a["brokers"] == b["brokers"] and a["inputs"] == b["inputs"]


def _grow(spark, tmp_path, writer, steps, copied=None, dated: bool = False) -> list[dict]:
    """After each step (a function of the writer), the live store (the writer's files as they are, copied as a
    nightly rsync would, ``dated``: into a folder of its own each night; then ``copied(live, step)``, when given)
    audited with the state and without; what the state said each time."""
    live, state, said = tmp_path / "live", tmp_path / "state", []
    for i, step in enumerate(steps):
        live = tmp_path / f"live{i}" if dated else live
        step()
        writer._persist_configs()  # as a broker does every few seconds: the offsets moved are in the copy
        shutil.rmtree(live, ignore_errors=True)
        shutil.copytree(writer.root, live)
        if i == len(steps) - 1 and (live / "commitlog").exists():  # the broker expires its oldest segment
            sorted((live / "commitlog").iterdir())[0].unlink()
        if copied is not None:
            copied(live, i)
        args = ["--store", f"b1={live}", "--no-report", "--split-size", "16k"]
        parse = audit_job.build_parser().parse_args
        audit_job.run(spark, parse([*args, "--out", str(tmp_path / f"full{i}")]))
        audit_job.run(spark, parse([*args, "--out", str(tmp_path / f"inc{i}"), "--state", str(state)]))
        _same_as_full(tmp_path / f"inc{i}", tmp_path / f"full{i}")
        said.append(json.loads((tmp_path / f"inc{i}" / "summary.json").read_text()))
    return said


@pytest.mark.parametrize("margin", [None, 1024], ids=["as-is", "ranges-given-back"])
def test_a_4x_store_grown_in_steps_audits_with_the_state_as_without(spark, tmp_path, monkeypatch, margin):
    """``margin``: a segment range's reach past its walk (a largest record, twice) made 1 KiB, so that the active
    segment's early ranges are given back in these small segments too (their records are < 500 bytes)."""
    from jobs.audit import scan, survey

    if margin is not None:
        monkeypatch.setattr(survey, "DEFAULT_MAX_RECORD_SIZE", margin)
        monkeypatch.setattr(scan, "RUN_CELL", 64 << 10)  # a run per segment: its old segments' runs given back
    from store_format.write.broker import Broker, ManualClock, Producer
    from store_format.write.writer import StoreWriter, WriterConfig

    writer = StoreWriter(tmp_path / "writer", WriterConfig(mappedFileSizeCommitLog=64 << 10,
                                                            mappedFileSizeConsumeQueue=20 * 64),
                         clock=ManualClock(START))
    broker, p = Broker(writer), Producer()
    halves = []

    def send(n, delay=0):
        for i in range(n):
            broker.send(p, f"Topic{i % 3}", b"x" * (200 + i % 50), keys=f"k{i}", tags="t",
                        delay_level=delay if i % 20 == 0 else 0)
        halves.append(broker.send_half(p, "TopicTx", b"half"))

    def step2():
        broker.clock.advance(60_000)
        broker.deliver_due()  # the delayed messages of the last step delivered
        send(300, delay=3)  # more, pending at this step's end
        broker.end_transaction(halves[0], commit=True)  # a transaction resolved between runs
        broker.commit_offset("g1", "Topic0", 0, 30)  # a consumer offset moved

    def step3():
        broker.clock.advance(60_000)
        broker.deliver_due()  # the last step's delayed messages, in segments the same since, delivered
        send(200)
        broker.commit_offset("g1", "Topic0", 0, 40)  # into a segment the same since the last run

    said = _grow(spark, tmp_path, writer, [lambda: send(300, delay=3), step2, step3, lambda: send(100)])
    kept = [s["brokers"][0]["since_last_run"] for s in said]
    assert kept[0]["previous_run_id"] is None and kept[1]["files"]["grown"] >= 1 and kept[1]["files"]["new"] >= 1
    assert kept[3]["files"]["disappeared"] >= 1 and kept[3]["files"]["rewritten"] == 0
    state = json.loads((tmp_path / "state" / "state.json").read_text())
    assert state["brokers"]["b1"]["parts"], "segment walks kept for the next run"
    survey = [x["state"]["tasks_given_back"]["survey"] for x in said]
    assert survey[0] == 0 and min(survey[1:]) >= 4, survey
    scan = [x["state"]["tasks_given_back"]["scan"] for x in said]
    if margin is not None:  # the old segments' runs whose units, offsets and pending messages stayed (step 3: 4 of 6)
        assert scan[0] == 0 and scan[3] >= 3, scan
    if margin is not None:  # the grown active segment's early ranges too
        assert survey[1] > 4 and survey[2] > 8, survey
    writer.close()


def _appending_broker(tmp_path, monkeypatch):
    """A writer of 64 KiB segments and ``send(n)``: n messages over three topics (their records returned); a range's
    reach past its walk made 1 KiB and a run a segment, so that old segments' ranges are given back in these small
    segments.  ``send.broker``: the broker (for what else a test writes)."""
    from jobs.audit import scan, survey
    from store_format.write.broker import Broker, ManualClock, Producer
    from store_format.write.writer import StoreWriter, WriterConfig

    monkeypatch.setattr(survey, "DEFAULT_MAX_RECORD_SIZE", 1024)
    monkeypatch.setattr(scan, "RUN_CELL", 64 << 10)  # a run per segment
    writer = StoreWriter(tmp_path / "writer", WriterConfig(mappedFileSizeCommitLog=64 << 10), clock=ManualClock(START))
    broker, p = Broker(writer), Producer()

    def send(n):
        return [broker.send(p, f"Topic{i % 3}", b"z" * (200 + i % 50), keys=f"k{i}", tags="t").record
                for i in range(n)]
    send.broker = broker
    return writer, send


def test_a_store_only_appended_to_gives_its_old_ranges_back(spark, tmp_path, monkeypatch):
    """Messages appended night after night (no offset moved, nothing pending): every range of the segments full
    since the last run is given back, not walked; the outputs are a full audit's all the same (the oldest segment
    expired before the last run: the new first segment's ranges run again, owning from minus infinity)."""
    writer, send = _appending_broker(tmp_path, monkeypatch)

    def damage(live, step):  # a unit of an old segment's message made to point mid-record (from step 2 on, as a
        if step >= 2:       # damaged disk would keep it): the range owning it runs again, once
            queue = live / "consumequeue" / "Topic0" / "0"
            first = sorted(queue.iterdir())[0]
            data = bytearray(first.read_bytes())
            data[20:28] = (struct.unpack_from(">q", data, 20)[0] + 7).to_bytes(8, "big")  # the second unit's offset
            first.write_bytes(bytes(data))

    said = _grow(spark, tmp_path, writer, [lambda: send(300)] * 4, damage)
    scan_back = [x["state"]["tasks_given_back"]["scan"] for x in said]
    assert scan_back[0] == 0 and scan_back[1] >= 1 and scan_back[2] >= 2 and scan_back[3] >= 2, scan_back
    rewritten = [x["brokers"][0]["since_last_run"]["files"]["rewritten"] for x in said]
    assert rewritten[2] == 1, rewritten
    mid = pq.read_table(tmp_path / "full2" / "findings").column("check").to_pylist()
    assert "consumequeue.entry_mid_record" in mid  # which the incremental run found too (_grow compares them)
    writer.close()


def test_an_index_files_old_entries_are_named_by_rows_and_one_changed_in_a_kept_block_runs_its_range_again(
        spark, tmp_path, monkeypatch):
    """An index file is rewritten in place as the broker runs (its header, its slots), but its entries are only
    appended: a kept range names the index entries pointing into it by their rows, as a queue file's units, while
    the state finds the entries region as the last run did (jobs/audit/state.py ``look_entries``: its kept blocks), so
    a range given back reads none of them.  An old entry whose key hash changed since the last run (a damaged disk),
    in a block the state always keeps (the region's first), makes the ranges compare the entries themselves: the
    range owning its message runs again and finds it, as a full audit does."""
    import dataclasses

    from jobs.audit import kept, routes
    from store_format import layout as L

    writer, send = _appending_broker(tmp_path, monkeypatch)
    slots = writer.config.maxHashSlotNum
    start = L.index_entries_at(slots)
    assert start + 2 * L.INDEX_ENTRY_SIZE <= (start // 4096 + 1) * 4096  # entry 1 is in the region's first block

    giving_back, shown = [], []  # shown: per step, the index digests made while a range gave its part back
    whole_keys, whole_digest = kept.span_keys, routes.ROUTES["index"].span_digest

    def keys(*a, **kw):
        giving_back.append(kw.get("giving_back", False))
        try:
            return whole_keys(*a, **kw)
        finally:
            giving_back.pop()

    def digest(*a):
        if giving_back and giving_back[-1]:
            shown[-1] += 1
        return whole_digest(*a)
    monkeypatch.setattr(kept, "span_keys", keys)
    monkeypatch.setitem(routes.ROUTES, "index", dataclasses.replace(routes.ROUTES["index"], span_digest=digest))

    def damage(live, step):
        shown.append(0)
        if step < 2:
            return
        [index] = sorted((live / "index").iterdir())
        with open(index, "r+b") as f:
            f.seek(start + L.INDEX_ENTRY_SIZE)
            key_hash = struct.unpack(">i", f.read(4))[0]
            f.seek(start + L.INDEX_ENTRY_SIZE)
            f.write(struct.pack(">i", key_hash ^ 0x5A5A))

    said = _grow(spark, tmp_path, writer, [lambda: send(300)] * 4, damage)
    assert said[1]["state"]["tasks_given_back"]["scan"] >= 1
    assert shown[1] == 0 and shown[2] > 0, shown  # named by rows; then shown, the region's first block changed
    assert "index.hash_mismatch" in pq.read_table(tmp_path / "full2" / "findings").column("check").to_pylist()
    # which the incremental run found too (_grow compares them; at step 3 its message's segment has expired)
    writer.close()


def test_a_grown_index_files_check_goes_on_from_the_last_runs(spark, tmp_path, monkeypatch):
    """The index file the broker is writing: its check goes on from the last run's (the entries checked then are
    only appended to), unless a kept block of those entries reads otherwise (then it is checked whole); a file as
    the last run found it is given back whole.  Every output is a full audit's (_grow compares them)."""
    from jobs.audit.checks import index as index_checks
    from store_format import layout as L

    writer, send = _appending_broker(tmp_path, monkeypatch)
    slots = writer.config.maxHashSlotNum
    resumed = []  # per index check with a state: the entries the last run had checked, or None (checked whole)
    whole = index_checks.check_entries

    heads_kept = []  # per resumed check: whether the last run's slots' heads came back (its old entries not walked)

    def spy(v, was=None, *a):
        resumed.append(None if was is None else was.count)
        if was is not None:
            heads_kept.append(was.heads is not None and was.heads.dtype == np.uint64)
        return whole(v, was, *a)
    monkeypatch.setattr(index_checks, "check_entries", spy)

    def damage(live, step):  # from step 2 on (a damaged disk keeps it), the last entry step 1's run checked gets
        if step < 2:        # another prev: in a block the state always keeps
            return
        [index] = sorted((live / "index").iterdir())
        with open(index, "r+b") as f:
            f.seek(36)
            checked = struct.unpack(">i", f.read(4))[0] - 800  # step 2 added 400 messages of two keys each, step 3 none
            f.seek(L.INDEX_HEADER_SIZE + slots * 4 + (checked - 1) * 20 + 16)  # its prevIndex: its last 4 bytes
            f.write(struct.pack(">i", 1 << 30))

    steps = [lambda: send(300), lambda: send(400), lambda: send(400), lambda: None]
    said = _grow(spark, tmp_path, writer, steps, damage)
    # each step: a full audit (whole), then the audit with the state
    with_state = resumed[1::2]
    assert with_state[0] is None and with_state[1] is not None and with_state[1] > 1  # resumed from step 0's check
    assert heads_kept and all(heads_kept)  # with the slots' heads it was left (decoding.compiled.index_chain_bits_grown)
    assert with_state[2] is None  # step 2: an old entry changed in the blocks kept: checked whole
    assert "index.chain_problem" in pq.read_table(tmp_path / "full2" / "findings").column("check").to_pylist()
    assert len(with_state) == 3 or with_state[3] is None  # step 3: the file as it was, its check given back whole
    assert said[3]["state"]["tasks_given_back"]["scan"] >= 1
    writer.close()


def test_a_parts_retry_origins_are_given_back_while_their_bytes_are_the_same(spark, tmp_path, monkeypatch):
    """A retry hop's origin is read from the segment its id names (jobs/audit/checks/retries.py): under a state, a
    part's rows are kept and given back while the part and the bytes its origins were read from are as the last run
    found them, the origins not read again.  Origins in the active segment too near its last end, or in a segment
    expired since (the last step), are read again.  Every output is a full audit's (_grow compares them)."""
    from jobs.audit.checks import retries
    from jobs.audit.context import AuditContext, TableWriter

    writer, send = _appending_broker(tmp_path, monkeypatch)
    looked_up, made = [], []  # per audit: the origin ids it read, the hops whose rows it worked out
    as_kept = []  # per audit: the table's rows written as the Parquet files a state keeps them as
    read, rows_of, add_file = AuditContext.kept_messages_by_id, retries._retry_rows, TableWriter.add_file

    def spy(self, broker, ids):
        looked_up[-1] += len(ids)
        return read(self, broker, ids)

    def rows_spy(ctx, broker, hops, found=None):
        made[-1] += hops.num_rows
        return rows_of(ctx, broker, hops, found)
    monkeypatch.setattr(AuditContext, "kept_messages_by_id", spy)
    monkeypatch.setattr(retries, "_retry_rows", rows_spy)
    monkeypatch.setattr(TableWriter, "add_file", lambda self, f: as_kept.__setitem__(-1, as_kept[-1] + f.rows)
                        or add_file(self, f))
    monkeypatch.setattr(audit_job, "run", lambda *a, _run=audit_job.run: looked_up.append(0) or made.append(0)
                        or as_kept.append(0) or _run(*a))
    sent = []

    def night(n, back):  # n messages, then consumers give back some of all sent so far: a third to the DLQ at once
        sent.extend(send(n))
        for j, record in enumerate(sent[k] for k in back):
            send.broker.send_back("g", record, delay_level=-1 if j % 3 == 0 else 0)

    steps = [lambda: night(300, range(0, 300, 10)), lambda: night(300, range(5, 600, 20)),
             lambda: night(300, range(7, 900, 30)), lambda: night(100, range(1, 1000, 40))]
    said = _grow(spark, tmp_path, writer, steps)
    full, with_state = looked_up[0::2], looked_up[1::2]
    assert with_state[0] == full[0] > 0  # nothing kept yet
    assert 0 < with_state[1] < full[1] and with_state[2] < full[2], (full, with_state)  # the old parts given back
    assert made[3] < made[2] and made[5] < made[4], made  # their rows too, not worked out again
    assert with_state[3] > 25  # more than the night's own: hops whose origins were in the expired segment
    assert all(s["state"]["tasks_given_back"]["scan"] >= 1 for s in said[1:])
    # the rows given back written into the table as the files they were kept as: neither decoded nor encoded again
    assert not any(as_kept[0::2]) and all(as_kept[1::2]), as_kept
    assert [len(list((tmp_path / f"full{i}" / "tables" / "retries").glob("*.parquet"))) for i in range(4)] == [1] * 4
    assert len(list((tmp_path / "inc2" / "tables" / "retries").glob("*.parquet"))) > 1
    dlq = pq.read_table(tmp_path / "full3" / "tables" / "retries").column("stage").to_pylist()
    assert "dlq" in dlq and "scheduled" in dlq
    writer.close()


def test_a_nights_transactions_pair_only_what_changed_records_touch(spark, tmp_path, monkeypatch):
    """Under a state a broker's transactions are paired again only where records new or gone since the last run
    touch them (jobs/audit/checks/transactions.py ``kept_pairing``): halves committed, rolled back or re-put by the
    checker nights after they were written, others left open, the oldest segment expired on the last night.  Every
    output is a full audit's (_grow compares them); with the state fewer records are paired than the store holds."""
    from store_format.write.broker import Producer

    writer, send = _appending_broker(tmp_path, monkeypatch)
    broker, producer = send.broker, Producer()
    paired = count_paired(monkeypatch)
    monkeypatch.setattr(audit_job, "run", lambda *a, _run=audit_job.run: paired.append(0) or _run(*a))
    halves = []

    def night(n, commit=(), rollback=(), reput=()):  # n halves, a third committed at once; then older ones ended
        for i in range(n):
            send(2)
            halves.append(broker.send_half(producer, "TopicTx", b"half %d" % i))
            if i % 3 == 0:
                broker.end_transaction(halves[-1], commit=True)
        for k in reput:  # the checker's copy of an open half: the same transaction
            broker.send_half(producer, "TopicTx", b"again", uniq_key=halves[k].msg_id)
        for k in commit:
            broker.end_transaction(halves[k], commit=True)
        for k in rollback:
            broker.end_transaction(halves[k], commit=False)

    steps = [lambda: night(300, commit=[1]),
             lambda: night(60, commit=[2, 301], rollback=[4, 302], reput=[5, 7]),
             lambda: night(60, commit=[5, 361], rollback=[8, 304], reput=[10]),
             lambda: night(30, commit=[7, 400])]
    _grow(spark, tmp_path, writer, steps)
    full, with_state = paired[0::2], paired[1::2]
    assert with_state[0] == full[0] > 0  # nothing kept yet
    assert all(0 < s < f for s, f in zip(with_state[1:], full[1:])), (full, with_state)
    states = pq.read_table(tmp_path / "full2" / "tables" / "transactions").column("state").to_pylist()
    assert {"committed", "rolled_back", "open"} <= set(states)
    writer.close()


@pytest.mark.parametrize("bucket_shift", [None, 12], ids=["ranges-in-a-bucket", "buckets-in-a-range"])
def test_a_queue_file_grown_with_a_unit_into_an_old_range_runs_that_range_again(spark, tmp_path, monkeypatch,
                                                                                bucket_shift):
    """A grown consume-queue file is "settled" (its old bytes are the last run's): a kept range names the entries
    pointing into the range by their rows (jobs/audit/kept.py: read where the range shares a routing bucket with its
    neighbours, the hull of the rows the survey gives a bucket it holds whole), not by the entries.  A unit appended to
    it pointing into an old segment (mid-record, as a damaged dispatch would) moves those rows or widens that hull:
    the range runs again and finds it, as a full audit does.  Each night's copy is in a folder of its own: the rows
    name files below the store's root.  With 4 KiB buckets, each 64 KiB segment holds buckets whole."""
    from jobs.audit import plan

    if bucket_shift is not None:
        monkeypatch.setattr(plan, "MIN_BUCKET_SHIFT", bucket_shift)
    writer, send = _appending_broker(tmp_path, monkeypatch)

    def stray_unit(live, step):  # the last night: a unit after the queue's last, into a segment whose ranges the
        if step != 3:            # last run kept (not the first: its ranges run again, the one before it expired)
            return
        segments = sorted((live / "commitlog").iterdir())
        lo, hi = int(segments[1].name), int(segments[2].name)
        newest = sorted((live / "consumequeue" / "Topic0" / "0").iterdir())[-1]
        data = bytearray(newest.read_bytes())
        end = -(-len(data.rstrip(b"\0")) // 20) * 20
        units = [struct.unpack_from(">qiq", data, at) for at in range(0, end, 20)]
        older = [u for f in sorted((live / "consumequeue" / "Topic0" / "0").iterdir())
                 for u in (struct.unpack_from(">qiq", f.read_bytes(), at) for at in range(0, 20 * 64, 20))
                 if lo <= u[0] < hi]
        phys, size, tags = older[len(older) // 2]
        struct.pack_into(">qiq", data, end, phys + 7, size, tags)
        newest.write_bytes(bytes(data))
        assert units and end + 20 <= len(data)

    said = _grow(spark, tmp_path, writer, [lambda: send(300)] * 4, stray_unit, dated=True)
    files = said[3]["brokers"][0]["since_last_run"]["files"]
    assert files["rewritten"] == 0 and files["grown"] >= 1, files
    assert said[2]["state"]["tasks_given_back"]["scan"] >= 2  # old ranges given back the night before
    assert "consumequeue.entry_mid_record" in pq.read_table(tmp_path / "full3" / "findings").column("check") \
        .to_pylist()  # which the incremental run found too (_grow compares them)
    writer.close()


def test_a_nights_queue_files_are_surveyed_from_where_the_last_run_left_them(spark, tmp_path, monkeypatch):
    """Queue files found the same or grown since the last run are surveyed from its rows (jobs/audit/kept.py
    resume_queue_surveys, routes.resumed_queue_file): a file the same not read, a grown one read past its units then.
    A file whose last unit then was copied while the broker wrote it (its tagsCode still zeros) is surveyed whole,
    and a queue's file of a delay level (the delays' survey hook reads it) too.  Each night audits as a full audit."""
    from jobs.audit import survey
    from store_format.write.broker import Broker, ManualClock, Producer
    from store_format.write.writer import StoreWriter, WriterConfig

    writer = StoreWriter(tmp_path / "writer", WriterConfig(mappedFileSizeCommitLog=64 << 10,
                                                            mappedFileSizeConsumeQueue=20 * 64),
                         clock=ManualClock(START))
    broker, p = Broker(writer), Producer()
    calls, real = [], survey.resumed_queue_file

    def spy(task, f, was, written, grown):
        got = real(task, f, was, written, grown)
        calls[-1].append((f.topic, f.name, grown, got is not None))
        return got
    monkeypatch.setattr(survey, "resumed_queue_file", spy)

    def send(n, delay=0):
        for i in range(n):
            broker.send(p, f"Topic{i % 2}", b"y" * (200 + i % 50), tags="t", delay_level=delay if i % 10 == 0 else 0)

    def copied(live, step):
        calls.append([])
        if step == 1:  # the copy made while the broker wrote Topic1's last unit: its tagsCode not yet there
            last = sorted((live / "consumequeue" / "Topic1" / "0").iterdir())[-1]
            data = bytearray(last.read_bytes())
            end = -(-len(data.rstrip(b"\0")) // 20) * 20
            data[end - 8:end] = bytes(8)
            last.write_bytes(bytes(data))

    _grow(spark, tmp_path, writer, [lambda: send(600, delay=2), lambda: send(90), lambda: send(90), lambda: send(50)],
          copied)
    assert calls[0] == []  # no state yet
    for night in calls[1:]:
        assert all(topic != "SCHEDULE_TOPIC_XXXX" for topic, *_ in night)
        assert any(not grown and got for _, _, grown, got in night), night  # full files the same: not read
        assert any(grown and got for _, _, grown, got in night), night  # the newest files: read past their units
    torn = [(name, got) for topic, name, grown, got in calls[2] if topic == "Topic1" and grown]
    assert torn and not torn[0][1], calls[2]  # its last unit then differs: surveyed whole
    writer.close()


@pytest.mark.parametrize("lo, hi, whole", [
    (0, 4096, (0, 3)), (100, 4000, (1, 2)), (100, 1000, (1, -1)),  # a span inside one bucket holds none whole
    ("-inf", "inf", (-1, 11)), ("-inf", 5000, (-1, 3)), (9000, "inf", (9, 11))])
def test_the_buckets_a_span_holds_whole(lo, hi, whole):
    """1 KiB buckets over a 10 KiB log: the one below it (negative offsets) and the one past it (every offset
    beyond) are held whole only by a span from minus infinity, or to infinity."""
    from types import SimpleNamespace

    from jobs.audit.scan import INF, NEG_INF, whole_buckets

    bound = {"-inf": NEG_INF, "inf": INF}
    facts = SimpleNamespace(shift=10, commitlog_end=10 << 10)
    assert whole_buckets(facts, bound.get(lo, lo), bound.get(hi, hi)) == whole


@pytest.mark.parametrize("shift, span, recovered_end, named, read", [
    (10, (2048, 5376), 10 << 10, {"q0": 11, "q1": 11}, []),  # its end block (4..6 KiB) below the end's: named whole
    (11, (2048, 5376), 10 << 10, {"q0": 11, "q1": 11}, []),  # ... the same rows when the buckets widen
    (10, (2048, 5376), 6000, {"q0": 10, "q1": 10}, [(5, 5)]),  # the block of the end (4..6 KiB): its bucket 5 read
    (10, (2048, 4096), 6000, {"q0": 7, "q1": 7}, []),  # a span of whole buckets reads nothing
])
def test_a_kept_range_names_its_end_blocks_whole_below_the_newest_block(monkeypatch, shift, span, recovered_end,
                                                                         named, read):
    """Blocks of 2 KiB, buckets of 1 KiB (or 2), two queue files with an entry every 512 bytes of log (row r at
    512 r).  A span that ends inside a bucket (a range's reach) names the rows of the block it ends in, from the
    survey's buckets without reading the files, and the same whatever the buckets' width, when the block ends at or
    below the block of the recovered end (no new message lands there); else the bucket it ends in is read and the
    entries in the span named."""
    from types import SimpleNamespace

    import numpy as np

    from jobs.audit import kept

    phys = np.arange(16) * 512

    def rows_for(lo, hi):  # each file's first and one past its last row in buckets lo..hi
        rows = np.flatnonzero(((phys >> shift) >= lo) & ((phys >> shift) <= hi))
        if not len(rows):
            return (np.zeros(0, np.int64),) * 3
        return np.array([0, 1]), np.array([rows[0]] * 2), np.array([rows[-1] + 1] * 2)

    files = [SimpleNamespace(loc=SimpleNamespace(path=p)) for p in ("q0", "q1")]
    facts = SimpleNamespace(shift=shift, commitlog_end=8 << 10, recovered_end=recovered_end, routed={"r": files},
                            row_keyed={"q0": "cq/q0", "q1": "cq/q1"}, buckets_of=lambda name: SimpleNamespace(
                                rows_for=rows_for))
    reads = []

    class Edge:  # a bucket read: its entries in the span
        def __init__(self, facts, lo, hi, *, buckets, only):
            reads.append(buckets)
            self.rows = np.flatnonzero(((phys >> shift) == buckets[0]) & (phys >= lo) & (phys < hi))

    monkeypatch.setattr(kept, "KEY_BLOCK_SHIFT", 11)
    monkeypatch.setattr(kept, "RoutedWindows", Edge)
    monkeypatch.setattr(kept, "routed_values", lambda edge, name, lo, hi, only: (
        None, [(p, edge.rows) for p in ("q0", "q1") if len(edge.rows)]))
    assert dict(kept._rows_named(facts, "r", *span)) == named and reads == read


def test_a_5x_store_with_timers_grown_in_steps_audits_with_the_state_as_without(spark, tmp_path):
    from store_format.write.broker import Broker, ManualClock, Producer
    from store_format.write.writer import StoreWriter, WriterConfig

    writer = StoreWriter(tmp_path / "writer", WriterConfig(
        storeHost="192.168.0.10:10911", mappedFileSizeCommitLog=64 << 10, mappedFileSizeTimerLog=2048,
        timerWheelEnable=True, enabledAppendPropCRC=True), clock=ManualClock(START))
    broker, p = Broker(writer), Producer(born_host="10.1.2.3:50000")

    def send(n):
        for i in range(n):
            broker.send(p, f"Topic{i % 2}", b"y" * 300, keys=f"k{i}")
            if i % 25 == 0:
                broker.send(p, "TimerTopic", b"t", delay_sec=5 + i % 7, queue_id=0)

    def step2():
        send(200)
        broker.run_timers(START + 30_000)  # a timer fired between runs
        broker.commit_offset("g1", "Topic0", 0, 20)

    said = _grow(spark, tmp_path, writer, [lambda: send(250), step2, lambda: send(150)])
    assert said[1]["brokers"][0]["since_last_run"]["files"]["grown"] >= 1
    writer.close()


def test_the_plan_takes_the_newest_segments_written_end_from_the_states_look(spark, tmp_path, monkeypatch):
    """The state searched every appended file's zeros from its end already: when the plan cuts the newest segment,
    the run knows where that search ended (store_format/fs/zero_tails.py), so a preallocated 1 GiB segment is one
    pass over its zeros, not two; the cut is the one its own search gives, and the findings a full audit's."""
    from store_format import plan as store_plan
    from store_format.commitlog import list_segments
    from store_format.fs.zero_tails import zeros_from

    store = copy_of(FIXTURES / "broker" / "store", tmp_path)
    newest = list_segments(store / "commitlog")[-1].path
    data = len(newest.read_bytes().rstrip(b"\0"))
    assert data < newest.stat().st_size  # a zero tail to search
    known, real_end = [], store_plan.written_end

    def after_the_look(loc, length):
        fd = os.open(loc.local_path, os.O_RDONLY)
        try:
            known.append(zeros_from(fd))
        finally:
            os.close(fd)
        return real_end(loc, length)
    monkeypatch.setattr(store_plan, "written_end", after_the_look)
    kept = audit(spark, store, tmp_path / "out1", tmp_path / "state")
    monkeypatch.undo()
    assert known == [data]  # the look's search, told to the plan's
    audit_job.run(spark, audit_job.build_parser().parse_args(["--store", f"b1={store}", "--out",
                                                              str(tmp_path / "full"), "--no-report"]))
    assert ids(kept) == {f["finding_id"] for f in pq.read_table(tmp_path / "full" / "findings").to_pylist()
                         if not f["check"].startswith("history.")}


def test_kept_parts_travel_through_spark_jobs(spark, tmp_path):
    """--executor spark: the survey's tasks run in Python workers, which write their kept parts into the state's
    staging and read the last run's back through the fs seam, as on a cluster."""
    store, state = copy_of(FIXTURES / "basic" / "store", tmp_path), tmp_path / "state"
    first = audit(spark, store, tmp_path / "out1", state, "--executor", "spark")
    second = audit(spark, store, tmp_path / "out2", state, "--executor", "spark")
    # the segment's walk; its range's scan and the index file's check (and on the driver, the retries' origins and
    # the transactions' pairing: its part's keys, the table, what it was paired from; the queue files' survey rows)
    assert second["summary"]["state"]["tasks_given_back"] == {"survey": 1, "scan": 2} and ids(second) == ids(first)
    assert len(list((state / "brokers").glob("*/parts/*.arrow"))) == 8
