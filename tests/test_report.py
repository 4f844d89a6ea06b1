"""The on-call view: report.html's first screen (1400x900, headless Chromium) answers, per broker and in words,
will it start, where recovery cuts, which messages are lost, what a restart destroys and what to do first; the
messages to re-send are a table with the command that copies them out; findings are grouped by cause.

Four single-store audits, each read as an operator would read it: a clean RocketMQ-written store (basic), a
RocketMQ-written store that crashed with a zeroed page (recovered-zero-page, whose manifest says what RocketMQ's
own recovery kept), a copy of basic that will not start (a backup of its segment left in commitlog/), and a
writer-built store with a flipped bit mid-log and a lost consume queue (the demo's broker-b, small).  The
screenshots (first screen, and the whole page) stay in each test's output folder."""
from __future__ import annotations

import ast
import json
import re
import shlex
import subprocess
import time
from pathlib import Path

import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

from jobs import audit
from jobs.audit import groups as G
from store_format.write import damage as D
from store_format.write.generate import TrafficConfig, generate_store
from store_format.store import Store
from store_format.write.writer import WriterConfig

from .support.browser import render
from .conftest import FIXTURES, fixture_manifest, fixture_store

pytestmark = [pytest.mark.spark, pytest.mark.browser]

SCREEN = (1400, 900)
KIB = 1024


def _writer_store(root: Path) -> dict:
    """A generated store (three segments) with the demo's faults: one flipped bit in a record of its middle
    segment (recovery cuts there and drops the rest) and the folder of one consume queue removed; its settings
    file (config/broker.properties, as the broker persists it) names it ``broker-w``."""
    work = root.parent / "work"
    generate_store(work, TrafficConfig(messages=900, topics=2, queues=2, seed=5, rate=50.0, p_send_back=0.0),
                   WriterConfig(mappedFileSizeCommitLog=128 * KIB, mappedFileSizeConsumeQueue=400 * 20,
                                maxHashSlotNum=128, maxIndexNum=512, brokerName="broker-w"))
    frames = [f for f in Store(work).walk_commitlog(decode=False) if f.kind == "message"]
    segments = sorted({f.segment for f in frames})
    middle = [f for f in frames if f.segment == segments[1]]
    victim = middle[len(middle) // 2]
    D.flip_body_bit(work, root.parent / "flipped", physical_offset=victim.physical_offset, bit=3)
    D.delete_consume_queue(root.parent / "flipped", root, "Topic001", 1)
    (root / "config" / "broker.properties").write_text("brokerClusterName=DefaultCluster\nbrokerName=broker-w\n")
    return {"victim": victim, "after": [f for f in frames if f.physical_offset > victim.physical_offset]}


@pytest.fixture(scope="module")
def oncall(spark, tmp_path_factory):
    base = tmp_path_factory.mktemp("oncall")
    nostart = D.copy_store(fixture_store("basic"), base / "in" / "nostart" / "store")
    # a copy of the segment left beside it: MappedFileQueue.doLoad takes every entry of commitlog/
    (nostart / "commitlog" / f"{0:020d}.bak").write_bytes((nostart / "commitlog" / f"{0:020d}").read_bytes())
    writer_root = base / "in" / "incident-7" / "input" / "store"
    writer = _writer_store(writer_root)
    torn = base / "in" / "torn" / "store"  # the demo's broker-a: a crash tore the last record
    generate_store(base / "work-torn", TrafficConfig(messages=300, topics=2, queues=2, seed=9, p_send_back=0.0),
                   WriterConfig(mappedFileSizeCommitLog=64 * KIB, mappedFileSizeConsumeQueue=400 * 20,
                                maxHashSlotNum=128, maxIndexNum=512), crash=True)
    D.torn_tail(base / "work-torn", torn)
    demo = base / "in" / "demo"  # make demo's two brokers, smaller
    _load_demo().build_dump(demo, 3000, segment_size=192 * KIB)
    stores = {"clean": fixture_store("basic"), "damaged": FIXTURES / "recovered-zero-page" / "input" / "store",
              "nostart": nostart, "writer": writer_root, "torn": torn, "demo": demo}
    runs = {}
    for name, store in stores.items():
        out = base / "out" / name
        t0 = time.perf_counter()
        result = audit.run(spark, audit.build_parser().parse_args(["--store", str(store), "--out", str(out)]))
        print(f"{name}: audit in {time.perf_counter() - t0:.1f} s")
        runs[name] = (result, out, json.loads((out / "summary.json").read_text()))
    return runs, writer


def _load_demo():
    import importlib.util

    from runtime.session import REPO

    spec = importlib.util.spec_from_file_location("tools_demo", REPO / "tools" / "demo.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _field(manifest: dict, key: str):
    """A manifest field: JSON, or (the recovered-* fixtures) a Python literal in a string."""
    value = manifest[key]
    return ast.literal_eval(value) if isinstance(value, str) else value


def _screen(out: Path, tmp_path: Path):
    """The report read in Chromium: its first screen (and a screenshot of it and of the whole page)."""
    first = render(out / "report.html", tmp_path / "first-screen.png", viewport=SCREEN, full_page=False)
    whole = render(out / "report.html", tmp_path / "report.png", viewport=SCREEN)
    assert first.console_errors == [] and first.broken_images == 0
    assert first.screenshot_path.stat().st_size > 20_000  # a drawn page, not a blank one
    # the page fits the screen's width, and so does every table in it: none scrolls sideways in its own box
    assert whole.page_width <= SCREEN[0], f"report.html is {whole.page_width} px wide on a {SCREEN[0]} px screen"
    assert whole.scrolls_sideways == [], f"tables wider than the page: {whole.scrolls_sideways}"
    return first, whole


def _words(text: str) -> str:
    """Rendered text as one line of words: the text of neighbouring elements is joined by a space, so no space
    before punctuation."""
    return re.sub(r"\s+([:,.;)])", r"\1", " ".join(text.split()))


def _resend(out: Path) -> list[dict]:
    return pq.read_table(out / "tables" / "resend").to_pylist()


def test_clean_store_first_screen_says_pass(oncall, tmp_path):
    result, out, summary = oncall[0]["clean"]
    first, whole = _screen(out, tmp_path)
    manifest = fixture_manifest("basic")
    [b] = summary["brokers"]
    assert b["name"] == "basic" and b["verdict"]["level"] == "pass" and result.exit_code == 0
    text = _words(first.first_screen_text)
    assert text.startswith("RocketMQ store audit") and "PASS" in text
    assert f"basic will start (normal recovery) and keeps all {len(manifest['messages'])} messages" in text
    assert "Messages lost none" in text and "nothing: recovery truncates and deletes nothing" in text
    assert f"every byte of the log before physical offset {manifest['commitLogMaxOffset']:,} (all of it)" in text
    assert "Nothing to do before a restart" in text and "Messages to re-send none" in text
    groups = G.group_findings(str(out / "findings"))
    assert f"Findings by cause: {len(groups)} groups" in whole.page_text
    assert sum(g.count for g in groups) == pq.read_table(out / "findings").num_rows


def test_damaged_fixture_first_screen_names_the_cut_the_lost_and_the_first_action(oncall, tmp_path):
    """recovered-zero-page: RocketMQ 4.9.7 itself loaded this store and kept commitLogMaxOffset 6,946,057 and
    2,154 of its 2,226 records (the manifest); the first screen says so, with the keys of what is lost."""
    result, out, summary = oncall[0]["damaged"]
    m = fixture_manifest("recovered-zero-page")
    damage, after = _field(m, "damage"), _field(m, "afterLoad")
    first, whole = _screen(out, tmp_path)
    [b] = summary["brokers"]
    v, rec = b["verdict"], b["recovery"]
    # named after the folder above input/store, not "input"
    assert b["name"] == "recovered-zero-page" and v["level"] == "data-lost" and result.exit_code == 1
    assert rec["predicted_max_physical_offset"] == after["commitLogMaxOffset"]
    assert rec["messages_lost"] + rec["unframed_runs_lost"] == damage["messageCountBefore"] - after["messageCount"]
    text = _words(first.first_screen_text)
    assert "DATA LOST" in text
    assert (f"recovered-zero-page will start (abnormal recovery) but cuts the log at physical offset "
            f"{after['commitLogMaxOffset']:,}") in text
    assert (f"drops {rec['messages_lost']} messages ({rec['damaged_messages_lost']} damaged, "
            f"{rec['intact_messages_lost']} intact)") in text
    # the record whose header the zeroed page took is lost too: destroyed, named by its consume-queue unit
    assert (f"{rec['messages_lost'] + 1} ({rec['damaged_messages_lost']} damaged, 1 destroyed, "
            f"{rec['intact_messages_lost']} dropped after the cut), and 1 unreadable run") in text
    rows = _resend(out)
    assert {r["state"] for r in rows} == {"damaged", "destroyed", "dropped"}
    assert len(rows) == rec["messages_lost"] + rec["unframed_runs_lost"]
    assert min(r["physical_offset"] for r in rows) == after["commitLogMaxOffset"]  # the damaged record at the cut
    # every key RocketMQ's index lost with a dropped message is in the re-send table, with that message
    by_offset = {r["physical_offset"]: r for r in rows}
    queries = _field(m, "indexQueriesForDroppedMessages")
    # both records under the zeroed page are named, as RocketMQ's manifest says they were: the one at the cut from
    # its header (queue offset 45), the next, whose header is gone, by its unit (46: no hole in the queue); its keys
    # cannot be read (the index keeps only their hashes)
    overlap = damage["messagesOverlappingZeroedPage"]
    assert {x["commitLogOffset"] for x in overlap} <= set(by_offset)
    cut_record, gone = (by_offset[x["commitLogOffset"]] for x in overlap)
    assert (gone["state"], gone["topic"], gone["queue_id"]) == \
        ("destroyed", overlap[1]["topic"], cut_record["queue_id"])
    assert gone["queue_offset"] == cut_record["queue_offset"] + 1 and gone["keys"] == []
    unreadable = {gone["physical_offset"]}
    named = [(q["key"], o) for q in queries for o in q["offsetsBeforeDamage"]
             if o >= after["commitLogMaxOffset"] and o not in unreadable]
    assert len(named) >= len(queries) - 2 and all(o in by_offset for _, o in named)
    # the damaged record at the cut keeps its header (queue, offset, time); its properties lie in the zeroed page
    assert all(k == by_offset[o]["uniq_key"] or k in by_offset[o]["keys"] for k, o in named
               if by_offset[o]["state"] == "dropped")
    keys_shown = [k for k, o in named if k in text]
    assert keys_shown, "the first screen shows keys of lost messages"
    # what to do, from the facts: intact messages lie after the cut, so copy them out first; the damaged one at
    # the cut is named by the topic its consume-queue unit gives (the zeroed page took its header's topic),
    # which is the topic RocketMQ's own manifest says
    [overlapping, *_] = damage["messagesOverlappingZeroedPage"]
    assert by_offset[overlapping["commitLogOffset"]]["topic"] == overlapping["topic"] == "RandB"
    assert (f"Do first Copy out the {rec['intact_messages_lost']} intact messages recovery drops after the cut at "
            f"physical offset {after['commitLogMaxOffset']:,} before restarting recovered-zero-page: a restart "
            "overwrites them.") in text
    assert (f"Ask the producers to re-send the damaged messages ({overlapping['topic']}/0 at queue offset 45, stored "
            in text and f"{overlapping['topic']}/0 at queue offset 46, destroyed (SIZE_MISMATCH span at physical "
            f"offset {after['commitLogMaxOffset']}): no key readable" in text)
    assert "Salvage" not in text and "jobs.replay" not in text and "jobs.extract" not in text
    assert f"Messages to re-send: {len([r for r in rows if not r['system']])}" in text
    # below the fold: this store has no consumerOffset.json, so consumer lag is unknown (not "none"), and a
    # missing input is its own consequence, never cosmetic; ages are spans in words, not milliseconds
    page = _words(whole.page_text)
    assert "Consumer lag unknown (consumerOffset.json missing or unreadable)" in page
    assert "Not known: an input the audit needs is missing" in page
    cosmetic = page[page.index("Cosmetic (the broker repairs"):page.index("Findings per check")]
    assert "metadata.config_missing" not in cosmetic
    assert "age_ms" not in page and "lag_ms" not in page and re.search(r"\bage\b.*\d+(\.\d)? s\b", page, re.S)
    groups = G.group_findings(str(out / "findings"))
    assert f"Findings by cause: {len(groups)} groups" in whole.page_text and len(groups) <= 200
    lost = [g for g in groups if g.check == "recovery.message_lost"]
    assert [g.count for g in lost] == [rec["messages_lost"]]  # one group, not one row per message
    # the findings table keeps one row per lost message
    findings = pq.read_table(out / "findings")
    assert pc.sum(pc.equal(findings.column("check"), "recovery.message_lost")).as_py() == rec["messages_lost"]


def test_store_that_will_not_start(oncall, tmp_path, spark):
    result, out, summary = oncall[0]["nostart"]
    first, _ = _screen(out, tmp_path)
    [b] = summary["brokers"]
    assert b["verdict"]["level"] == "will-not-start" and b["verdict"]["will_start"] is False
    text = _words(first.first_screen_text)
    assert "WILL NOT START" in text and "nostart will NOT start: commitlog/00000000000000000000.bak" in text
    assert "Will it start? NO" in text
    assert "Do first Move commitlog/00000000000000000000.bak out of the store before starting nostart, keeping " \
           "it: its name is not an offset (Long.parseLong fails in new MappedFile), so load() fails." in text
    assert "Messages to re-send none" in text
    # the command, run as printed, moves that file beside the store root; the broker then starts
    [action] = [a for a in b["verdict"]["actions"] if a["kind"] == "will_not_start"]
    root = Path(b["path"])
    assert action["command"] == (f"mv -- {root}/commitlog/00000000000000000000.bak "
                                 f"{root.parent}/00000000000000000000.bak.moved-out-of-store")
    subprocess.run(action["command"], shell=True, check=True)
    again = audit.run(spark, audit.build_parser().parse_args(["--store", str(root), "--out", str(tmp_path / "again"),
                                                              "--no-report"]))
    assert again.summary_data["brokers"][0]["verdict"]["will_start"] is True


def test_writer_store_resend_command_copies_out_exactly_the_dropped_messages(oncall, spark, tmp_path):
    """The first screen names the cut at the flipped record and the messages in no consume queue; the command it
    prints, run as printed, extracts exactly the messages recovery drops."""
    runs, writer = oncall
    result, out, summary = runs["writer"]
    [b] = summary["brokers"]
    assert b["name"] == "broker-w"  # brokerName from config/broker.properties, not "input" or "incident-7"
    v, rec = b["verdict"], b["recovery"]
    victim, after = writer["victim"], writer["after"]
    assert rec["predicted_max_physical_offset"] == victim.physical_offset
    first, _ = _screen(out, tmp_path)
    text = _words(first.first_screen_text)
    assert f"cuts the log at physical offset {victim.physical_offset:,} (BAD_CRC" in text
    assert f"{len(after) + 1} (1 damaged, {len(after)} dropped after the cut)" in text
    rows = _resend(out)
    dropped = sorted(r["physical_offset"] for r in rows if r["state"] == "dropped")
    assert dropped == [f.physical_offset for f in after]
    unindexed = [r for r in rows if r["state"] == "unindexed"]
    assert unindexed and {(r["topic"], r["queue_id"]) for r in unindexed} == {("Topic001", 1)}
    assert f"{len(unindexed)} messages in no consume queue" in text
    deleted = rec["segments_deleted"]  # the segments past the cut: one line, their range
    assert len(deleted) >= 2 and _words(f"commitlog/{deleted[0]} .. {deleted[-1]}: {len(deleted)} segments deleted "
                                        "(they lie wholly past the cut)") in text
    page = (out / "report.html").read_text(encoding="utf-8")
    commands = [line for line in report_commands(page) if " extract " in line and "--physical-offsets" in line]
    # the first screen's "do first" and the re-send section print the same command
    assert len(set(commands)) == 1 and v["actions"][0]["kind"] == "copy_out" and v["actions"][0]["command"] in commands
    assert run_as_printed(v["actions"][0]["command"], spark) == 0
    got = pq.read_table(out / "resend" / "broker-w").column("physical_offset").to_pylist()
    assert sorted(got) == dropped
    # the damaged message: its producer re-sends it, by the key its header kept; the query shows what is left
    resend_action = next(a for a in v["actions"] if a["kind"] == "resend_damaged")
    damaged = next(r for r in rows if r["state"] == "damaged")
    assert f"key {(damaged['keys'] or [damaged['uniq_key']])[0]}" in resend_action["text"]
    where = f"{damaged['topic']}/{damaged['queue_id']} at queue offset {damaged['queue_offset']}"
    assert where in resend_action["text"]
    shown = run_as_printed(resend_action["command"], spark, capture=True)
    assert "DROPPED_BY_RECOVERY" in shown and damaged["uniq_key"] in shown
    # the messages in no consume queue: the printed extract copies out exactly those
    unindexed_action = next(a for a in v["actions"] if a["kind"] == "extract_unindexed")
    assert run_as_printed(unindexed_action["command"], spark) == 0
    target = Path(shlex.split(unindexed_action["command"])[-1])
    assert sorted(pq.read_table(target).column("queue_offset").to_pylist()) == \
        sorted(r["queue_offset"] for r in unindexed)


def run_as_printed(command: str, spark, capture: bool = False):
    """A command the report prints, run as pasted: its program is the console script installed beside this
    Python (checked), its arguments go to that script's entry point here, in this test's Spark session."""
    import contextlib
    import io
    import sys

    from jobs.console import console

    argv = shlex.split(command)
    assert argv[0] == str(Path(sys.executable).parent / "rocketmq-forensics") and Path(argv[0]).is_file()
    if not capture:
        return console(argv[1:])
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        console(argv[1:])
    return out.getvalue()


def test_torn_tail_nothing_intact_after_the_cut(oncall, tmp_path):
    """A crash tore the last record: recovery drops only it, so there is nothing to copy out; the first screen says
    so (not "salvage the messages after the cut"), and names the torn message by the topic its consume-queue unit
    gives, since its header no longer can."""
    result, out, summary = oncall[0]["torn"]
    first, _ = _screen(out, tmp_path)
    [b] = summary["brokers"]
    v, rec = b["verdict"], b["recovery"]
    assert v["level"] == "data-lost" and rec["intact_messages_lost"] == 0 and rec["damaged_messages_lost"] == 1
    [row] = _resend(out)
    assert row["state"] == "damaged" and row["topic"] is not None  # from the consume-queue unit
    text = _words(first.first_screen_text)
    assert (f"Do first Nothing intact lies after the cut at physical offset {v['cut']['physical_offset']:,}, so "
            "there is nothing to copy out before restarting torn: a restart loses only the 1 damaged message there "
            f"({row['topic']}/{row['queue_id']} at queue offset {row['queue_offset']}") in text
    assert "Copy out" not in text and "Salvage" not in text
    assert [a["kind"] for a in v["actions"]] == ["nothing_after_cut"]


def report_commands(page: str) -> list[str]:
    import html

    blocks = re.findall(r"<pre[^>]*>(.*?)</pre>", page, re.S)
    return [line for block in blocks for line in html.unescape(re.sub(r"<[^>]+>", "", block)).split("\n")
            if line and not line.startswith("#")]


def test_times_are_iso_with_the_epoch_in_a_tooltip_and_nothing_needs_a_script(oncall):
    runs, _ = oncall
    _, out, _ = runs["damaged"]
    page = (out / "report.html").read_text(encoding="utf-8")
    rows = _resend(out)
    t = rows[0]["store_timestamp"]
    import datetime as dt

    iso = dt.datetime.fromtimestamp(t / 1000, dt.timezone.utc).isoformat(timespec="milliseconds").replace("+00:00",
                                                                                                        "Z")
    assert f"<time datetime='{iso}' title='epoch ms {t}'>{iso}</time>" in page
    assert "<script" not in page and "@media print" in page and "<details class='group'>" in page


def test_every_group_is_at_most_a_few_hundred_rows_and_counts_every_finding(oncall):
    runs, _ = oncall
    for name, (_, out, summary) in runs.items():
        groups = G.group_findings(str(out / "findings"))
        assert summary["groups"] == len(groups) <= 200, name
        assert sum(g.count for g in groups) == pq.read_table(out / "findings").num_rows, name
        keys = [(g.broker, g.check, g.file, g.topic, g.queue_id) for g in groups]
        assert len(set(keys)) == len(keys), name
        ranks = [(int(g.consequence), int(g.severity)) for g in groups]
        assert [r[0] for r in ranks] == sorted(r[0] for r in ranks), name  # most consequential first


def test_two_broker_demo_fleet_and_first_screens(oncall, tmp_path):
    """make demo's dump: the fleet table first (a line per broker, in no consume queue said in words), then each
    broker's first screen with its own actions; every table of the page fits it (screenshots in tmp_path)."""
    result, out, summary = oncall[0]["demo"]
    first, whole = _screen(out, tmp_path)
    a, b = summary["brokers"]
    text = _words(first.first_screen_text)
    assert "DATA LOST" in text and ("Fleet broker verdict headline lost: damaged / dropped kept, damaged in no "
                                    "consume queue") in text
    assert f"{a['name']} DATA LOST" in text
    assert a["verdict"]["actions"][0]["kind"] == "nothing_after_cut"  # broker-a's torn tail
    # broker-b's flipped bit lies in a segment its normal recovery does not walk: kept, damaged, not lost
    assert f"{b['name']} ATTENTION" in text and b["verdict"]["kept_damaged"] == 1 and b["verdict"]["cut"] is None
    assert b["verdict"]["actions"][0]["kind"] == "kept_damaged" and "Kept, damaged 1 message: the broker keeps it" in \
        _words(whole.page_text)
    page = _words(whole.page_text)
    for broker in summary["brokers"]:
        assert _words(broker["verdict"]["actions"][0]["text"]) in page
    assert "Not known" not in page or "missing" in page
    assert "Consumer lag" in page and "oldest unconsumed stored at" in page