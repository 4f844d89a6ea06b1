"""The audit's verdict on the terminal (jobs/audit/terminal.py): on a headless broker host stdout is all there is.
Per broker it says will it start, where recovery cuts, the messages lost and what to do, with the command; then
one line that counts causes, not findings ("1 cut, N messages lost", not N warnings).  --quiet keeps the line,
--format json gives the same facts to machines.  And the actions' cases the writer-built stores do not reach."""
from __future__ import annotations

import json
import shlex
import sys
from pathlib import Path

import pytest

from jobs import audit
from jobs.audit import terminal, verdict
from store_format import fs

pytestmark = [pytest.mark.spark]


@pytest.fixture(scope="module")
def damaged_run(spark, damaged_store, tmp_path_factory):
    """main() as the console runs it, three ways, on the writer-built store with a flipped bit mid-log and a
    torn tail: (text, quiet line, JSON)."""
    out = tmp_path_factory.mktemp("terminal")
    printed = {}
    for name, extra in (("text", []), ("quiet", ["--quiet"]), ("json", ["--format", "json", "--quiet"])):
        import contextlib
        import io

        buf = io.StringIO()
        with contextlib.redirect_stdout(buf):
            code = audit.main(["--store", str(damaged_store), "--out", str(out / name), "--no-report", *extra])
        assert code == 1, buf.getvalue()
        printed[name] = buf.getvalue()
    summary = json.loads((out / "text" / "summary.json").read_text())
    return printed, summary


def test_the_terminal_says_the_first_screen_in_words(damaged_run):
    printed, summary = damaged_run
    [b] = summary["brokers"]
    v, rec = b["verdict"], b["recovery"]
    lines = printed["text"].splitlines()
    assert lines[0] == "damaged: DATA LOST"
    assert lines[1] == f"  Will it start?  yes ({rec['mode']} recovery)"
    assert lines[2].startswith(f"  The cut:        physical offset {v['cut']['physical_offset']:,}, segment ")
    lost = v["lost"]
    # the flipped bit's record (its header still names it), the record its span swallowed (named by its unit), and
    # the messages after the cut
    assert lost["damaged"] == lost["destroyed"] == 1
    assert lines[3] == (f"  Messages lost:  {lost['damaged'] + lost['destroyed'] + lost['dropped']:,} (1 damaged, "
                        f"1 destroyed, {lost['dropped']:,} dropped after the cut), and 1 unreadable run of records "
                        "whose headers are gone")
    assert lines[4] == f"  Do first:       {v['actions'][0]['text']}"
    # the command under it runs as printed: the console script beside this Python, paths quoted
    command = shlex.split(lines[5].strip())
    assert command[0] == str(Path(sys.executable).parent / "rocketmq-forensics") and command[1] == "extract"
    assert command[command.index("--physical-offsets") + 1].endswith("..")
    assert lines[-1] == printed["quiet"].strip()


def test_one_line_counts_causes_not_findings(damaged_run):
    """One flipped bit mid-log loses every message after it: the line says one cut and how many messages, and the
    lost messages are errors like the cut (not a warning each)."""
    printed, summary = damaged_run
    c = summary["counts"]
    line = printed["quiet"].strip()
    assert "\n" not in line
    assert line.startswith(f"audit DATA LOST (1 store): 1 cut, {c['messages_lost']:,} messages lost "
                           f"({c['damaged']:,} damaged, {c['destroyed']:,} destroyed, {c['dropped']:,} dropped)")
    assert c["messages_lost"] > 1 and "warning(s)" not in line
    per_check = c["per_check"]
    assert per_check["recovery.message_lost"]["severity"] == per_check["recovery.truncation"]["severity"] == "error"
    from jobs.audit.findings import CHECKS, Severity

    assert CHECKS["integrity.damaged_message"].severity == Severity.ERROR  # the message a damaged record held


def test_json_is_the_same_facts_for_machines(damaged_run):
    printed, summary = damaged_run
    data = json.loads(printed["json"])
    assert data["exit_code"] == 1 and data["line"] == printed["quiet"].strip()
    same = ("level", "headline", "will_start", "cut", "lost", "at_risk", "safe_before")
    assert [{k: b["verdict"][k] for k in same} for b in data["brokers"]] == \
        [{k: b["verdict"][k] for k in same} for b in summary["brokers"]]
    assert [a["kind"] for a in data["brokers"][0]["verdict"]["actions"]] == \
        [a["kind"] for a in summary["brokers"][0]["verdict"]["actions"]]
    assert data["counts"]["cuts"] == 1 and "per_check" not in data["counts"]


def _broker(**recovery) -> dict:
    rec = {"mode": "normal", "broker_will_start": True, "start_problems": [], "predicted_max_physical_offset": 1000,
           "stop_segment": "00000000000000000000", "stop_position": 1000, "stop_kind": "END_OF_DATA",
           "messages_lost": 0, "damaged_messages_lost": 0, "intact_messages_lost": 0, "unframed_bytes_lost": 0,
           "unframed_runs_lost": 0, "bytes_lost": 0, "segments_deleted": [], "cq_units_truncated": 0,
           "index_files_deleted": [], **recovery}
    return {"name": "b1", "path": "/dumps/b 1/store", "recovery": rec}


def test_a_restart_that_changes_the_store_while_nothing_is_lost(tmp_path):
    """Data at risk only if restarted: nothing is lost, but recovery would truncate consume-queue units: keep a copy
    first, with the command that makes it (a path with a space, quoted)."""
    b = _broker(cq_units_truncated=4)
    v = verdict.verdict(b, [], fs.resolve(str(tmp_path)), 10)
    assert v["level"] == "pass" and v["at_risk"] == ["consume queues: 4 units truncated"]
    [a] = v["actions"]
    assert a["kind"] == "keep_a_copy" and "Nothing is lost, but a restart of b1 changes the store" in a["text"]
    assert shlex.split(a["command"]) == ["cp", "-a", "--", "/dumps/b 1/store", "/dumps/b 1/store.before-restart"]
    # an index the broker rebuilds itself is no reason
    v = verdict.verdict(_broker(index_files_deleted=["20240501000000000"]), [], fs.resolve(str(tmp_path)), 10)
    assert [a["kind"] for a in v["actions"]] == ["none"]


def test_each_brokers_verdict_counts_its_own_rows_of_the_tables_read_once(tmp_path):
    """A fleet's verdicts share one reading of tables/resend and tables/segments (verdict.RunTables): each broker's
    lost messages and its segments at risk are its own rows only, as when each verdict read the tables itself."""
    import pyarrow as pa

    from jobs.audit import resend
    from runtime.output import write_parquet_file

    rows = [("b1", "dropped", False), ("b1", "dropped", True), ("b2", "dropped", False), ("b2", "damaged", False),
            ("b2", "destroyed", False)]
    write_parquet_file(pa.Table.from_pylist([{"broker": b, "state": st, "system": y, "physical_offset": 100 + i}
                                             for i, (b, st, y) in enumerate(rows)], schema=resend.SCHEMA),
                       fs.resolve(str(tmp_path / "tables" / resend.NAME / "part-00000.parquet")))
    second = "00000000000001073741824"
    write_parquet_file(pa.table({"broker": ["b1", "b2"], "segment": [second, second], "messages": [0, 5],
                                 "corrupt_bytes": [0, 0], "stale_records": [0, 0]}),
                       fs.resolve(str(tmp_path / "tables" / "segments" / "part-00000.parquet")))
    out = fs.resolve(str(tmp_path))
    shared = verdict.RunTables(out)
    deleted = f"commitlog/{second}: deleted (it lies wholly past the cut)"
    # (lost per state, system records among them, messages to re-send, at risk): b1's segment holds nothing
    for name, lost, system, to_resend, at_risk in (("b1", (2, 0, 0), 1, 1, []), ("b2", (1, 1, 1), 0, 3, [deleted])):
        b = {**_broker(segments_deleted=[second]), "name": name}
        v = verdict.verdict(b, [], out, 10, tables=shared)
        assert v == verdict.verdict(b, [], out, 10)  # as a verdict reading the tables itself
        assert tuple(v["lost"][s] for s in ("dropped", "damaged", "destroyed")) == lost
        assert (v["system_records"], v["to_resend"], v["at_risk"]) == (system, to_resend, at_risk)


def test_the_printed_commands_keep_a_uris_query_after_the_path(tmp_path):
    """``--out`` and the store root given as URIs with a ``?query``: the commands the verdict prints name the folders
    below and beside them with the query still after the path (an ``os.path.join`` on the URI put the path after
    the query: ``...?region=eu/resend/b1-undispatched``); a local ``--out`` prints as it was typed, ``..`` kept."""
    from jobs.audit.checks.lmq import stall_problem
    from runtime.cli import location_argument

    from .support import remotefs

    before = dict(remotefs.ROOTS)
    remotefs.register("outs", tmp_path / "outs", writable=True)
    remotefs.register("dumps", tmp_path / "dumps")
    try:
        at = 4096
        stall = {"physical_offset": at, "records_after": 2, "topic": "t", "queue_id": 0, "queue_offset": 7,
                 "segment": "0" * 20, "file_position": at}
        b = {**_broker(broker_will_start=False, start_problems=[stall_problem(at)]),
             "path": "elsewhere://dumps/b1?region=eu", "dispatch_stall": stall}
        out = location_argument("elsewhere://outs/audit?region=eu")
        v = verdict.verdict(b, [], out, 10, staged=fs.resolve(str(tmp_path)))
        extract, move = [shlex.split(a["command"]) for a in v["actions"][:2]]
        assert extract[extract.index("--out") + 1] == "elsewhere://outs/audit/resend/b1-undispatched?region=eu"
        assert move == ["mv", "--", "elsewhere://dumps/b1/abort?region=eu",
                        "elsewhere://dumps/abort.moved-out-of-store?region=eu"]
        assert out.suffixed("-with-config").as_typed == "elsewhere://outs/audit-with-config?region=eu"
    finally:
        remotefs.ROOTS.clear()
        remotefs.ROOTS.update(before)
    local = location_argument(f"{tmp_path}/link/../out/")
    v = verdict.verdict({**b, "path": "/dumps/b 1/store"}, [], local, 10, staged=fs.resolve(str(tmp_path)))
    extract, move = [shlex.split(a["command"]) for a in v["actions"][:2]]
    assert extract[extract.index("--out") + 1] == f"{tmp_path}/link/../out/resend/b1-undispatched"
    assert move == ["mv", "--", "/dumps/b 1/store/abort", "/dumps/b 1/abort.moved-out-of-store"]
    assert local.suffixed("-with-config").as_typed == f"{tmp_path}/link/../out-with-config"


def test_counts_in_words():
    c = {"will_not_start": 1, "cuts": 2, "messages_lost": 1188, "damaged": 1, "destroyed": 0, "dropped": 1187,
         "kept_damaged": 0, "unindexed": 0, "undispatched": 0, "other_causes": {"error": 1, "warning": 3, "info": 0}}
    assert terminal._words(c) == ("1 broker will not start, 2 cuts, 1,188 messages lost (1 damaged, 1,187 dropped), "
                                  "4 other causes (1 error, 3 warnings)")
    # one of each, in the singular; what the broker keeps damaged is not lost
    c.update(will_not_start=0, cuts=1, messages_lost=1, damaged=0, destroyed=1, dropped=0, kept_damaged=1,
             unindexed=1, undispatched=1, other_causes={"error": 1, "warning": 1, "info": 1})
    assert terminal._words(c) == ("1 cut, 1 message lost (0 damaged, 1 destroyed, 0 dropped), 1 message kept damaged, "
                                  "1 in no consume queue, 1 never dispatched, 3 other causes (1 error, 1 warning, "
                                  "1 note)")


def test_a_segment_cut_short_is_extended_not_moved_away(spark, tmp_path):
    """A copy that lost a segment's preallocated tail: the broker refuses a segment shorter than
    mappedFileSizeCommitLog.  The action extends it with zeros (what the broker preallocated) rather than moving it
    away with its messages; run as printed, the broker starts and keeps every whole record of it."""
    import subprocess

    from store_format.store import Store
    from store_format.write import damage as D
    from store_format.write.generate import TrafficConfig, generate_store
    from store_format.write.writer import WriterConfig

    generate_store(tmp_path / "gen", TrafficConfig(messages=200, topics=1, queues=2, seed=4, p_send_back=0.0),
                   WriterConfig(mappedFileSizeCommitLog=32 * 1024, mappedFileSizeConsumeQueue=400 * 20))
    cut = D.truncate_segment(tmp_path / "gen", tmp_path / "copy" / "store")
    args = audit.build_parser().parse_args(["--store", str(tmp_path / "copy" / "store"), "--out",
                                            str(tmp_path / "out1"), "--no-report"])
    [b] = audit.run(spark, args).summary_data["brokers"]
    [a, *_] = b["verdict"]["actions"]
    assert b["verdict"]["level"] == "will-not-start" and a["kind"] == "will_not_start"
    assert a["text"].startswith(f"Extend {cut.path} with zeros to 32,768 bytes")
    assert shlex.split(a["command"])[:3] == ["truncate", "-s", "32768"]
    subprocess.run(a["command"], shell=True, check=True)
    again = audit.run(spark, audit.build_parser().parse_args(["--store", str(tmp_path / "copy" / "store"), "--out",
                                                              str(tmp_path / "out2"), "--no-report"]))
    [b] = again.summary_data["brokers"]
    whole = [f for f in Store(tmp_path / "gen").walk_commitlog(decode=False) if f.kind == "message"
             and f.physical_offset + f.size <= int(cut.path.split("/")[1]) + cut.position]
    assert b["verdict"]["will_start"] is True
    assert b["recovery"]["predicted_max_physical_offset"] == max(f.physical_offset + f.size for f in whole)
