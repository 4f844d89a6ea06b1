"""The verdict on every path (issue 37): the terminal, the report's headline, summary.json and the actions say the
same thing in one vocabulary -- a message the broker keeps but whose bytes changed is "kept, damaged", not lost; a
record whose header damage destroyed is named by the consume-queue unit still pointing at it; records of system
topics are the broker's bookkeeping, not messages to re-send -- and every verdict has an action: a broker that will
not start because of RocketMQ's own LMQ dispatch bug gets the commands that start it without losing more (run
here as printed, on a copy), and records failing their whole-record CRC, the broker's settings not given, get
the offset where a forced check would cut and the audit with ``--config`` that tells.

Writer-built stores, small: a clean shutdown with four segments (normal recovery walks the last three, so damage
in the first is kept), and the LMQ and CRC stores of the 5.x writer."""
from __future__ import annotations

import contextlib
import io
import json
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from jobs import audit
from jobs.audit import terminal
from jobs.console import console
from store_format.store import Store
from store_format.write import damage as D
from store_format.write.generate import TrafficConfig, generate_store
from store_format.write.writer import WriterConfig

pytestmark = [pytest.mark.spark]

KIB = 1024


def _run(store: Path, out: Path, *extra: str) -> tuple[int, str, dict]:
    """audit's main() as the console runs it: (exit code, what it printed, summary.json)."""
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        code = audit.main(["--store", str(store), "--out", str(out), "--no-report", *extra])
    return code, buf.getvalue(), json.loads((out / "summary.json").read_text())


def _resend(out: Path) -> list[dict]:
    return pq.read_table(out / "tables" / "resend").to_pylist()


def _as_printed(command: str) -> int:
    """A printed command run as pasted: the console script beside this Python (checked), its arguments to its
    entry point here (in this test's Spark session); a shell command through the shell."""
    argv = shlex.split(command)
    if argv[0].endswith("rocketmq-forensics"):
        assert argv[0] == str(Path(sys.executable).parent / "rocketmq-forensics") and Path(argv[0]).is_file()
        with contextlib.redirect_stdout(io.StringIO()):
            return console(argv[1:])
    return subprocess.run(command, shell=True, check=False).returncode


@pytest.fixture(scope="module")
def clean_store(tmp_path_factory) -> tuple[Path, list]:
    """A generated store, cleanly shut down, four 64 KiB segments; its message frames."""
    root = tmp_path_factory.mktemp("clean") / "store"
    generate_store(root, TrafficConfig(messages=700, topics=2, queues=2, seed=3, rate=50.0, p_send_back=0.0),
                   WriterConfig(mappedFileSizeCommitLog=64 * KIB, mappedFileSizeConsumeQueue=400 * 20,
                                maxHashSlotNum=128, maxIndexNum=512))
    frames = [f for f in Store(root).walk_commitlog() if f.kind == "message"]
    assert len({f.segment for f in frames}) >= 4  # the first is not walked by a normal recovery
    return root, frames


# ------------------------------------------------------------------------------------------------ kept, damaged

def test_a_flipped_bit_the_broker_keeps_is_kept_damaged_not_lost(spark, clean_store, tmp_path):
    """One bad-CRC record in the first segment of a cleanly shut-down store: no cut.  Terminal, headline,
    summary.json and actions all say the broker keeps it, damaged, and what to do; nothing says lost, and no action
    speaks of a span or a truncation."""
    root, frames = clean_store
    first = [f for f in frames if f.segment == frames[0].segment and f.size > 200]
    victim = first[len(first) // 2]
    D.flip_body_bit(root, tmp_path / "s", physical_offset=victim.physical_offset, bit=5)
    code, printed, summary = _run(tmp_path / "s", tmp_path / "out")
    [b] = summary["brokers"]
    v = b["verdict"]
    assert v["cut"] is None and b["recovery"]["messages_lost"] == 0
    assert v["kept_damaged"] == 1 and v["lost"]["damaged"] == 0 and v["level"] == "attention"
    assert summary["counts"]["messages_lost"] == 0 and summary["counts"]["kept_damaged"] == 1
    [row] = [r for r in _resend(tmp_path / "out") if r["state"] != "unindexed"]
    assert (row["state"], row["physical_offset"], row["damage"]) == ("kept_damaged", victim.physical_offset, "BAD_CRC")
    # the headline keeps all and says which one is damaged; the terminal says the same, never "lost: 1"
    assert "keeps all" in v["headline"] and "1 message it keeps is damaged (kept, damaged" in v["headline"]
    lines = printed.splitlines()
    assert lines[0].endswith(": ATTENTION") and "  Messages lost:  none" in lines
    [kept] = [x for x in lines if x.startswith("  Kept, damaged:")]
    assert "1 message: the broker keeps it and consumers receive it as it is" in kept
    assert "DATA LOST" not in printed and "messages lost (" not in printed and "1 messages" not in printed
    assert "1 message kept damaged" in lines[-1]
    # what to do: re-send it and tell its consumers; nothing about a span, a truncation or a cut
    kinds = [a["kind"] for a in v["actions"]]
    assert kinds[0] == "kept_damaged", kinds
    a = v["actions"][0]
    assert f"at queue offset {row['queue_offset']}" in a["text"] and row["topic"] in a["text"]
    assert a["command"] is not None and "--explain" in a["command"]
    for a in v["actions"]:
        assert "span" not in a["text"] and "truncation" not in a["text"] and "cut" not in a["text"], a


# ------------------------------------------------------------------------------------------------ destroyed

def test_a_record_whose_header_is_gone_is_named_by_its_unit(spark, clean_store, tmp_path):
    """A page of zeros in the first segment of a clean store: the records it destroyed are in no walk, but their
    consume-queue units still point at them, so the messages to re-send name each (topic, queue, queue offset,
    what destroyed it): the queue offsets run on without a hole."""
    root, frames = clean_store
    first = [f for f in frames if f.segment == frames[0].segment]
    page = 4096 * 2  # the third page of the first segment
    hit = [f for f in first if f.file_position < page + 4096 and f.file_position + f.size > page]
    D.zero_page(root, tmp_path / "s", physical_offset=page + 100)
    code, printed, summary = _run(tmp_path / "s", tmp_path / "out")
    [b] = summary["brokers"]
    v = b["verdict"]
    rows = _resend(tmp_path / "out")
    named = {r["physical_offset"]: r for r in rows if r["state"] in ("destroyed", "kept_damaged", "damaged")}
    # every record the page touched is named, from what its header says or, where that is gone, its unit
    by_offset = {f.physical_offset: f for f in frames}
    assert set(named) == {f.physical_offset for f in hit}
    destroyed = [r for r in named.values() if r["state"] == "destroyed"]
    assert destroyed and v["lost"]["destroyed"] == len(destroyed) and v["level"] == "data-lost"
    for r in destroyed:
        m = by_offset[r["physical_offset"]].message
        assert (r["topic"], r["queue_id"], r["queue_offset"]) == (m.topic, m.queue_id, m.queue_offset)
        assert "span at physical offset" in r["damage"] and r["keys"] == [] and r["uniq_key"] is None
    # so each queue's offsets run on without a hole
    for topic, qid in {(r["topic"], r["queue_id"]) for r in destroyed}:
        queue = sorted(f.message.queue_offset for f in hit if (f.message.topic, f.message.queue_id) == (topic, qid))
        assert sorted(r["queue_offset"] for r in named.values() if (r["topic"], r["queue_id"]) == (topic, qid)) \
            == queue
    assert "destroyed" in v["headline"] and f"{len(destroyed):,} destroyed" in printed


# ------------------------------------------------------------------------------------------------ will not start

def test_a_broker_the_lmq_dispatch_bug_stops_gets_the_commands_that_start_it(spark, tmp_path):
    """RocketMQ 5.3.3's own bug: a dispatch list naming a non-LMQ queue before the last makes the abnormal
    recovery's re-dispatch throw, and load() fails.  The actions name the record, and their commands, run as
    printed on a copy, copy it and the records after it out, and start the broker without losing more; the
    messages to re-send name them."""
    from .test_v5_queues_audit import _stalling_store

    root = tmp_path / "stalled" / "store"
    at, after = _stalling_store(root)
    out = tmp_path / "out"
    code, printed, summary = _run(root, out)
    [b] = summary["brokers"]
    v = b["verdict"]
    assert v["level"] == "will-not-start" and code == 1
    kinds = [a["kind"] for a in v["actions"]]
    assert kinds[:3] == ["will_not_start", "move_abort", "resend_undispatched"], kinds
    first, move, again = v["actions"][:3]
    assert f"the record at physical offset {at:,}" in first["text"] and f"the {after} records after it" in first["text"]
    assert "fix that before starting it" not in printed and "Fix or remove the named file" not in printed
    assert again["command"] is None and "no command here sends to a broker" in again["text"]
    # the messages to re-send are that record and those after it
    undispatched = sorted(r["physical_offset"] for r in _resend(out) if r["state"] == "undispatched")
    assert undispatched[0] == at and len(undispatched) == after + 1 and v["lost"]["undispatched"] == after + 1
    assert "Messages to re-send: none" not in printed and f"{after + 1} messages never dispatched" in printed
    # each command, run as printed: the extract copies exactly those records out, and the broker then starts
    assert _as_printed(first["command"]) == 0
    target = Path(shlex.split(first["command"])[-1])
    got = sorted(pq.read_table(target).column("physical_offset").to_pylist())
    assert got == undispatched
    assert _as_printed(move["command"]) == 0 and not (root / "abort").exists()
    _, _, again_summary = _run(root, tmp_path / "again")
    [b2] = again_summary["brokers"]
    assert b2["verdict"]["will_start"] is True and b2["recovery"]["messages_lost"] == 0



def _cut_queue_file(root: Path) -> str:
    """The first consume-queue file cut to half its length (a copy that lost its preallocated tail)."""
    f = sorted((root / "consumequeue").glob("*/*/0*"))[0]
    with open(f, "r+b") as h:
        h.truncate(f.stat().st_size // 2)
    return str(f.relative_to(root))


def _break_topics(root: Path) -> str:
    """config/topics.json and its .bak both cut mid-JSON: ConfigManager.load() fails on both."""
    for name in ("topics.json", "topics.json.bak"):
        f = root / "config" / name
        f.write_text('{"topicConfigTable":{"T":')
    return "config/topics.json"


@pytest.mark.parametrize("damage,verb", [(_cut_queue_file, "Extend"), (_break_topics, "Restore")])
def test_every_file_the_load_refuses_gets_a_command_that_starts_the_broker(spark, clean_store, tmp_path, damage,
                                                                          verb):
    """A consume-queue file cut short, a config file that fails to decode with its .bak: the broker will not start
    (the load model), and the first action names the file and gives the command that gets it started without
    losing more (zeros to the queue file's full length; the config file and its .bak moved aside when no good copy
    exists), which, run as printed, makes the next audit say it starts."""
    import shutil

    root = tmp_path / "store"
    shutil.copytree(clean_store[0], root)
    rel = damage(root)
    code, printed, summary = _run(root, tmp_path / "out")
    [b] = summary["brokers"]
    v = b["verdict"]
    assert v["level"] == "will-not-start" and code == 1
    first = v["actions"][0]
    assert first["kind"] == "will_not_start" and first["text"].startswith(f"{verb} {rel}") and first["command"]
    assert "No command can fix that" not in printed
    assert _as_printed(first["command"]) == 0
    _, _, again = _run(root, tmp_path / "again")
    assert again["brokers"][0]["verdict"]["will_start"] is True


# ------------------------------------------------------------------------------------------------ CRC advice

def test_a_bad_property_crc_without_the_settings_names_the_forced_cut_and_the_config(spark, tmp_path):
    """RocketMQ's v5-crc store with a header bit flipped under its __CRC32#, audited without --config: the action
    names the physical offset where a forceVerifyPropCRC recovery cuts, and the audit with the broker's settings
    file beside the dump, which, run as printed, cuts exactly there; with no settings file it says to give one."""
    from .test_v5_fixtures import store5

    d = D.flip_bit_under_crc(store5("v5-crc"), tmp_path / "flip" / "store", field="born_timestamp")
    frame = next(f for f in Store(tmp_path / "flip" / "store").walk_commitlog(check_crc=False)
                 if f.kind == "message" and f.segment == Path(d.path).name
                 and f.file_position <= d.position < f.file_position + f.size)
    out = tmp_path / "out"
    _, printed, summary = _run(tmp_path / "flip" / "store", out)
    [b] = summary["brokers"]
    assert b["property_crc"]["forced_cut"]["physical_offset"] == frame.physical_offset
    [a] = [a for a in b["verdict"]["actions"] if a["kind"] == "property_crc"]
    assert f"cuts the log at physical offset {frame.physical_offset:,}" in a["text"]
    assert "cuts here" not in printed and "broker.conf" in a["text"]
    assert shlex.split(a["command"])[shlex.split(a["command"]).index("--config") + 1] == "broker.conf"
    # the broker's settings file beside the store root: the command names it, and says what the broker does
    (tmp_path / "flip" / "broker.conf").write_text("brokerName=flip\nforceVerifyPropCRC=true\n")
    _, _, summary = _run(tmp_path / "flip" / "store", tmp_path / "out2")
    [a] = [a for a in summary["brokers"][0]["verdict"]["actions"] if a["kind"] == "property_crc"]
    argv = shlex.split(a["command"])
    assert argv[argv.index("--config") + 1] == str(tmp_path / "flip" / "broker.conf")
    with contextlib.redirect_stdout(io.StringIO()):
        assert console(argv[1:] + ["--no-report"]) == 1
    done = json.loads((Path(argv[argv.index("--out") + 1]) / "summary.json").read_text())
    rec = done["brokers"][0]["recovery"]
    assert (rec["predicted_max_physical_offset"], rec["stop_kind"]) == (frame.physical_offset, "BAD_PROPERTY_CRC")
    assert not [a for a in done["brokers"][0]["verdict"]["actions"] if a["kind"] == "property_crc"]


# ------------------------------------------------------------------------------------------------ what to re-send

def test_system_records_are_not_messages_to_resend_and_keys_are_named_apart(spark, clean_store, tmp_path):
    """A flipped bit in the last segment of the clean store: recovery cuts there and drops the rest, the broker's
    transaction op records among them.  They are lost like the others, but they are no producer's message: the
    table marks them ``system`` and the report neither lists nor counts them as messages to re-send (a half
    message, whose REAL_TOPIC names the producer's topic, is one).  The report names keys and unique keys in two
    lists, and counts in words ("1 message", never "1 messages")."""
    from store_format import layout as L

    root, frames = clean_store
    segments = sorted({f.segment for f in frames})
    victim = next(f for f in frames if f.segment == segments[-2] and f.message.body)
    D.flip_body_bit(root, tmp_path / "s", physical_offset=victim.physical_offset, bit=3)
    out = tmp_path / "out"
    result = audit.run(spark, audit.build_parser().parse_args(["--store", str(tmp_path / "s"), "--out", str(out)]))
    [b] = result.summary_data["brokers"]
    v = b["verdict"]
    rows = _resend(out)
    after = [f for f in frames if f.physical_offset > victim.physical_offset]
    ops = {f.physical_offset for f in after if f.message.topic == L.TRANS_OP_HALF_TOPIC}
    halves = {f.physical_offset for f in after if f.message.topic == L.TRANS_HALF_TOPIC}
    assert ops and halves, "the traffic after the cut must hold op records and half messages"
    system = {r["physical_offset"] for r in rows if r["system"]}
    assert system == ops
    assert v["system_records"] == len(ops) and v["to_resend"] == len(rows) - len(ops)
    assert v["lost"]["dropped"] == len(after)  # lost all the same: the broker drops them
    page = (out / "report.html").read_text(encoding="utf-8")
    section = page[page.index("<h3>Messages to re-send"):]
    section = section[:section.index("</section>")]
    assert f"Messages to re-send: {v['to_resend']:,}" in section and L.TRANS_OP_HALF_TOPIC not in \
        section.split("records of system topics left out")[0]
    assert f"{len(ops):,} records of system topics left out" in section or \
        (len(ops) == 1 and "1 record of system topics left out" in section)
    # the keys and the unique keys of the lost messages, each list named
    fact = page[page.index("<dt>Messages lost</dt>"):]
    fact = fact[:fact.index("</dd>")]
    lost = [r for r in rows if r["state"] in ("damaged", "dropped") and not r["system"]]
    shown_keys = re.findall(r"<code>([^<]+)</code>", fact.split("; unique keys:")[0])
    shown_uniq = re.findall(r"<code>([^<]+)</code>", fact.split("; unique keys:")[1])
    assert shown_keys and set(shown_keys) <= {k for r in lost for k in r["keys"] or []}
    assert shown_uniq and set(shown_uniq) <= {r["uniq_key"] for r in lost}
    assert not re.search(r"\b1 (messages|records|stores|brokers|groups|files)\b", page)
    assert "(s)" not in page.split("<h2 id='findings'>")[0]
