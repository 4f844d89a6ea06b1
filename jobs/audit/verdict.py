"""The on-call view of one broker: what an operator deciding whether to restart it needs first, in words.

Will it start (and if not, why and what to do), where recovery will cut the log, which messages are lost
(damaged, or dropped after the cut), what a restart now would destroy (the bytes after the cut that new messages
overwrite, the segments holding data that it deletes, the consume-queue units it truncates, the index files it
rebuilds), what is safe (every byte before physical offset N), and what to do first.  The level and the headline
come from those facts, not from a count of findings:

  will-not-start  the broker refuses to start (recovery.broker_will_not_start)
  incomplete      the audit could not finish this broker (broker.audit_failed, or no recovery prediction)
  data-lost       messages are lost: recovery drops some, or damage destroyed some (a data-lost check)
  attention       nothing is lost, but error findings remain (queries or consumers are affected)
  pass            nothing of the above

The actions are decided by the facts too, case by case, each one sentence and, where a command helps, one
command that runs as printed (the installed console script, paths quoted: :func:`jobs.cli.console_command`):

  will_not_start     which file stops the broker, and the command that moves it out of the store
  copy_out           intact messages lie after the cut: the extract that copies them out before a restart
  nothing_after_cut  nothing intact lies after the cut: nothing to copy out (and who must re-send what it loses)
  resend_damaged     damaged messages whose producers must re-send them, named by key
  extract_unindexed  messages in no consume queue, and the extract that copies them out
  keep_a_copy        nothing is lost, but a restart changes the store: copy it first
  check              otherwise, the user guide's what-to-do of the most consequential error group

``summary.json`` carries each broker's verdict (``brokers[].verdict``); the report's first screen, the fleet
table and the terminal (jobs/audit/terminal.py) show it.
"""
from __future__ import annotations

import os
import re
import shlex

from . import resend
from .findings import Consequence, Severity
from .groups import Group

LEVELS = {  # level -> the banner's words, most serious first
    "will-not-start": "WILL NOT START",
    "incomplete": "AUDIT INCOMPLETE",
    "data-lost": "DATA LOST",
    "attention": "ATTENTION",
    "pass": "PASS",
}
ACTIONS = 4  # at most, on the first screen
_KEYS_NAMED = 3  # damaged messages named by key in an action


def _n(x: int) -> str:
    return f"{x:,}"


def _plural(n: int, one: str, many: str | None = None) -> str:
    return f"{_n(n)} {one if n == 1 else (many or one + 's')}"


def verdict(broker: dict, groups: list[Group], out: str, message_count: int | None, staged: str | None = None) -> dict:
    """The on-call view of ``broker`` (a summary.json ``brokers`` entry) from its finding groups (in the report's
    order) and the audit's tables in ``out`` (tables/resend, tables/segments; read from ``staged`` until the run
    commits, jobs/commit.py)."""
    src = staged or out
    name, rec = broker["name"], broker.get("recovery")
    mine = [g for g in groups if g.broker == name]
    failed = [g for g in mine if g.check == "broker.audit_failed"]
    errors = sum(g.count for g in mine if g.severity == Severity.ERROR)
    lost_groups = [g for g in mine if g.consequence == Consequence.DATA_LOST]
    table = _join(src, "tables", resend.NAME)
    counts = {s: n for (b, s), n in resend.counts(table).items() if b == name}
    damaged, dropped, unindexed = (counts.get(s, 0) for s in ("damaged", "dropped", "unindexed"))
    v: dict = {"level": "pass", "banner": "", "headline": "", "will_start": None, "why_not": [], "cut": None,
               "lost": {"damaged": damaged, "dropped": dropped, "unframed_runs": 0, "unindexed": unindexed},
               "at_risk": [], "safe_before": None, "actions": []}
    if rec is not None:
        rec = _with_other_blockers(rec, mine)
    if rec is None:
        v["level"] = "incomplete"
        v["headline"] = (f"{name}: the audit could not predict this broker's recovery, so whether it starts and what "
                         "it loses are unknown")
    else:
        v["will_start"] = rec["broker_will_start"]
        v["why_not"] = list(rec["start_problems"])
        v["lost"]["unframed_runs"] = rec["unframed_runs_lost"]
        cut = rec["predicted_max_physical_offset"]
        loses = rec["messages_lost"] or rec["unframed_runs_lost"]
        if loses:
            v["cut"] = {"physical_offset": cut, "segment": rec["stop_segment"], "file_position": rec["stop_position"],
                        "kind": rec["stop_kind"]}
        v["at_risk"] = _at_risk(rec, _empty_segments(src, name))
        first_damage = min((g.first_offset for g in lost_groups if g.first_offset is not None), default=None)
        v["safe_before"] = cut if first_damage is None else min(cut, first_damage)
        v["headline"] = _headline(name, rec, v, message_count, errors, mine)
        if not rec["broker_will_start"]:
            v["level"] = "will-not-start"
        elif failed:
            v["level"] = "incomplete"
        elif loses or lost_groups:
            v["level"] = "data-lost"
        elif errors:
            v["level"] = "attention"
    if failed and v["level"] not in ("will-not-start",):
        v["headline"] += f"; the audit of this broker is incomplete ({_plural(sum(g.count for g in failed), 'step')} " \
                         "failed)"
    v["banner"] = LEVELS[v["level"]]
    v["actions"] = actions(broker, v, mine, out, src)
    return v


# families whose will-not-start findings the commitlog's recovery prediction already counts in start_problems
_RECOVERY_MODELLED = ("recovery", "integrity")


def _with_other_blockers(rec: dict, groups: list[Group]) -> dict:
    """``rec`` (the commitlog's recovery prediction) with the start blockers other families found (a 5.x
    timerwheel of the wrong length: TimerWheel refuses to load) as further start problems: the broker starts only
    when every store it loads does."""
    blockers = [g for g in groups if g.consequence == Consequence.WILL_NOT_START
                and g.check.split(".")[0] not in _RECOVERY_MODELLED]
    problems = [g.samples[0]["message"] if g.samples else g.check for g in blockers]
    if not problems:
        return rec
    return dict(rec, broker_will_start=False, start_problems=list(rec["start_problems"]) + problems)


def _join(base: str, *parts: str) -> str:
    from jobs.output import out_join

    return out_join(base, *parts)


def _empty_segments(out: str, broker: str) -> set[str]:
    """The segments of ``broker`` that hold nothing (no message, no damage): deleting one destroys nothing."""
    from jobs.output import out_dataset, out_join

    dataset = out_dataset(out_join(out, "tables", "segments"))
    if dataset is None:
        return set()
    rows = dataset.to_table(columns=["broker", "segment", "messages", "corrupt_bytes", "stale_records"]).to_pylist()
    return {r["segment"] for r in rows if r["broker"] == broker and not (r["messages"] or r["corrupt_bytes"]
                                                                         or r["stale_records"])}


def _at_risk(rec: dict, empty: set[str]) -> list[str]:
    """What a restart on this disk now destroys, in the order the broker does it; segments deleted in one line."""
    out = []
    if rec["messages_lost"] or rec["unframed_runs_lost"]:
        out.append(f"commitlog/{rec['stop_segment']} after byte {_n(rec['stop_position'])}: new messages overwrite "
                   f"the {_n(rec['bytes_lost'])} bytes recovery drops there")
    deleted = [s for s in rec["segments_deleted"] if s not in empty]
    if len(deleted) == 1:
        out.append(f"commitlog/{deleted[0]}: deleted (it lies wholly past the cut)")
    elif deleted:
        out.append(f"commitlog/{deleted[0]} .. {deleted[-1]}: {len(deleted)} segments deleted (they lie wholly past "
                   "the cut)")
    if rec["cq_units_truncated"]:
        out.append(f"consume queues: {_plural(rec['cq_units_truncated'], 'unit')} truncated")
    files = rec["index_files_deleted"]
    if files:
        out.append(f"index/{files[0]}: deleted and rebuilt by re-dispatch" if len(files) == 1 else
                   f"index/{files[0]} .. {files[-1]}: {len(files)} index files deleted and rebuilt by re-dispatch")
    return out


def _headline(name: str, rec: dict, v: dict, message_count: int | None, errors: int, mine: list[Group]) -> str:
    lost = v["lost"]
    parts = []
    if not rec["broker_will_start"]:
        parts.append(f"{name} will NOT start: {rec['start_problems'][0]}")
        if len(rec["start_problems"]) > 1:
            parts[-1] += f" (and {_plural(len(rec['start_problems']) - 1, 'more problem')})"
        start = "once that is fixed, recovery"
    else:
        start = f"{name} will start ({rec['mode']} recovery)"
    if rec["messages_lost"] or rec["unframed_runs_lost"]:
        text = (f"{start}{' but' if rec['broker_will_start'] else ''} cuts the log at physical offset "
                f"{_n(rec['predicted_max_physical_offset'])} ({rec['stop_kind']} in segment {rec['stop_segment']}) and "
                f"drops {_lost_words(rec)}")
        parts.append(text)
    else:
        kept = f" and keeps all {_plural(message_count, 'message')}" if message_count is not None else ""
        parts.append(f"{start}{kept}; recovery drops nothing" if rec["broker_will_start"] else
                     f"{start} drops nothing")
    other_lost = [g for g in mine if g.consequence == Consequence.DATA_LOST
                  and g.check not in ("recovery.truncation", "recovery.message_lost")]
    damaged_elsewhere = lost["damaged"] and not rec["damaged_messages_lost"]
    if damaged_elsewhere:
        parts.append(f"{_plural(lost['damaged'], 'damaged message')} it keeps cannot be trusted")
    elif other_lost and not (rec["messages_lost"] or rec["unframed_runs_lost"]):
        parts.append(f"data is lost: {other_lost[0].check} ({_plural(other_lost[0].count, 'finding')})")
    if lost["unindexed"]:
        parts.append(f"{_plural(lost['unindexed'], 'message')} in no consume queue: consumers never receive them")
    if errors and not parts[1:] and not (rec["messages_lost"] or rec["unframed_runs_lost"]) \
            and rec["broker_will_start"]:
        worst = next(g for g in mine if g.severity == Severity.ERROR)
        parts.append(f"but {_plural(errors, 'error finding')}: {worst.consequence.label} ({worst.check})")
    return "; ".join(parts)


def _lost_words(rec: dict) -> str:
    """What recovery drops, in words: messages (damaged, intact), and runs of records no walk could frame."""
    runs = rec["unframed_runs_lost"]
    run_words = (f"{_plural(runs, 'unreadable run')} of records ({_n(rec['unframed_bytes_lost'])} bytes whose headers "
                 "are gone)")
    if not rec["messages_lost"]:
        return run_words
    text = (f"{_plural(rec['messages_lost'], 'message')} ({_n(rec['damaged_messages_lost'])} damaged, "
            f"{_n(rec['intact_messages_lost'])} intact)")
    return text + (f" and {run_words}" if runs else "")


# ---------------------------------------------------------------------------------------------------------
# What to do, from the facts


def _action(kind: str, text: str, command: str | None = None, check: str | None = None, count: int = 0) -> dict:
    return {"kind": kind, "text": text, "command": command, "check": check, "count": count}


def actions(broker: dict, v: dict, groups: list[Group], out: str, src: str | None = None) -> list[dict]:
    """The broker's actions, most urgent first (module docstring), at most :data:`ACTIONS`."""
    name, rec = broker["name"], broker.get("recovery")
    rec = _with_other_blockers(rec, groups) if rec is not None else None
    table = _join(src or out, "tables", resend.NAME)
    done: list[dict] = []
    if rec is not None and not rec["broker_will_start"]:
        done.append(_will_not_start(broker, rec, groups))
    lost = v["lost"]
    damaged = [r for r in resend.first_rows(table, name, _KEYS_NAMED) if r["state"] == "damaged"]
    if v["cut"] and lost["dropped"]:
        first = resend.first_offset(table, name, "dropped")
        done.append(_action(
            "copy_out", f"Copy out the {_plural(lost['dropped'], 'intact message')} recovery drops after the cut at "
            f"physical offset {_n(v['cut']['physical_offset'])} before restarting {name}: a restart overwrites them.",
            command(["extract", "--store", f"{name}={broker['path']}", "--walk", "salvage", "--physical-offsets",
                     f"{first}..", "--out", os.path.join(out, "resend", name)]), "recovery.truncation",
            lost["dropped"]))
    elif v["cut"]:
        if lost["damaged"]:
            many = lost["damaged"] > 1
            what = (f"the {_plural(lost['damaged'], 'damaged message')} there ({_named(damaged, lost['damaged'])}), "
                    f"which {'their producers' if many else 'its producer'} must re-send")
        else:
            what = f"{_plural(lost['unframed_runs'], 'unreadable run')} of records whose headers are gone"
        done.append(_action(
            "nothing_after_cut", f"Nothing intact lies after the cut at physical offset "
            f"{_n(v['cut']['physical_offset'])}, so there is nothing to copy out before restarting {name}: a restart "
            f"loses only {what}.", _resend_command(broker, damaged), "recovery.truncation", lost["damaged"]))
    if lost["damaged"] and not any(a["kind"] == "nothing_after_cut" for a in done):
        done.append(_action("resend_damaged", _resend_words(damaged, lost["damaged"]) + ".",
                            _resend_command(broker, damaged), "integrity.damaged_message", lost["damaged"]))
    if lost["unindexed"]:
        queues = resend.unindexed_queues(table, name)
        q = queues[0]
        more = f" (and {_plural(len(queues) - 1, 'other queue')})" if len(queues) > 1 else ""
        done.append(_action(
            "extract_unindexed", f"Copy out the {_plural(lost['unindexed'], 'message')} in no consume queue, "
            f"{_plural(q['count'], 'message')} of {q['topic']}/{q['queue_id']}{more}: consumers never receive them "
            "until they are re-sent or the queue is rebuilt.",
            command(["extract", "--store", f"{name}={broker['path']}", "--topic", q["topic"], "--queue",
                     str(q["queue_id"]), "--queue-offsets", f"{q['first']}..{q['last']}", "--out",
                     os.path.join(out, "resend", f"{name}-{q['topic']}-{q['queue_id']}")]),
            "consumequeue.missing_entry", lost["unindexed"]))
    if rec is not None and not done and v["level"] in ("pass", "attention") and _restart_changes_data(v["at_risk"]):
        done.append(_action(
            "keep_a_copy", f"Nothing is lost, but a restart of {name} changes the store ({v['at_risk'][0]}"
            + (f", and {_plural(len(v['at_risk']) - 1, 'more change')}" if len(v["at_risk"]) > 1 else "")
            + "): keep a copy of it first.",
            command_of(["cp", "-a", "--", broker["path"], broker["path"].rstrip("/") + ".before-restart"])))
    # an error the facts above do not cover (a queue pointing past the log, a config file the broker cannot
    # read...): the user guide's what-to-do for the most consequential one
    worst = next((g for g in groups if g.severity == Severity.ERROR and g.consequence != Consequence.COSMETIC
                  and g.check not in _COVERED and not (v["cut"] and g.check.startswith("integrity."))), None)
    if worst is not None and (not done or worst.consequence <= Consequence.DATA_LOST):
        done.append(_action("check", worst.action, None, worst.check, worst.count))
    if not done and v["level"] == "pass":
        done.append(_action("none", f"Nothing to do before a restart: {name} starts on this dump and loses nothing."))
    return done[:ACTIONS]


# the checks whose what-to-do the actions above say with the facts (and, where there is a cut, integrity.*: the
# damage behind it)
_COVERED = ("recovery.broker_will_not_start", "recovery.truncation", "recovery.message_lost",
            "consumequeue.missing_entry")


def _restart_changes_data(at_risk: list[str]) -> bool:
    """Whether a restart destroys more than index files it rebuilds itself."""
    return any(not item.startswith("index/") for item in at_risk)


def _will_not_start(broker: dict, rec: dict, groups: list[Group]) -> dict:
    """Which file stops the broker (the first problem, as the broker meets it) and the command that moves it out
    of the store, beside the store root; a blocker another family found, that family's what-to-do."""
    name = broker["name"]
    problem = rec["start_problems"][0]
    more = f" (and {_plural(len(rec['start_problems']) - 1, 'more problem')} below)" \
        if len(rec["start_problems"]) > 1 else ""
    other = next((g for g in groups if g.consequence == Consequence.WILL_NOT_START and g.samples
                  and g.samples[0]["message"] == problem), None)
    if other is not None and other.check.split(".")[0] not in _RECOVERY_MODELLED:
        return _action("will_not_start", f"{name} will not start: {problem}{more}. {other.action}", None, other.check,
                       other.count)
    rel = _file_of_problem(problem)
    count = sum(g.count for g in groups if g.check == "recovery.broker_will_not_start")
    if rel is None:
        return _action("will_not_start", f"{name} will not start: {problem}{more}; fix that before starting it.",
                       None, "recovery.broker_will_not_start", count)
    root = broker["path"].rstrip("/")
    reason = problem[len(rel):].lstrip(":").strip()  # the problem names the file first: said once
    reason = "it " + reason if reason.startswith("is ") else reason
    short = re.match(r"commitlog/\d{20}$", rel) and re.search(r"is (\d+) bytes, not mappedFileSizeCommitLog (\d+)",
                                                             problem)
    if short and int(short.group(1)) < int(short.group(2)):
        # a segment cut short (a copy that lost the preallocated tail): zeros to its full length keep its records,
        # where moving it away would lose them
        return _action("will_not_start", f"Extend {rel} with zeros to {_n(int(short.group(2)))} bytes, as the broker "
                       f"preallocates it (keep a copy first), before starting {name}: {reason}{more}.",
                       command_of(["truncate", "-s", short.group(2), "--", os.path.join(root, rel)]),
                       "recovery.broker_will_not_start", count)
    aside = os.path.join(os.path.dirname(root), f"{os.path.basename(rel)}.moved-out-of-store")
    return _action("will_not_start", f"Move {rel} out of the store before starting {name}, keeping it: {reason}"
                   f"{more}.", command_of(["mv", "--", os.path.join(root, rel), aside]),
                   "recovery.broker_will_not_start", count)


def _file_of_problem(problem: str) -> str | None:
    """The store-relative file a start problem names first (store_format.recovery words each one that way)."""
    m = re.match(r"((?:commitlog/)?[^\s:/]+)(?::| is )", problem)
    return m.group(1) if m else None


def _named(damaged: list[dict], total: int) -> str:
    """The damaged messages by key (or, where a record kept none, by place), the first few."""
    more = f"; and {_n(total - len(damaged))} more in tables/resend" if total > len(damaged) else ""
    return "; ".join(_message_words(r) for r in damaged) + more


def _resend_words(damaged: list[dict], total: int) -> str:
    """Who must re-send the damaged messages."""
    many = "s" if total > 1 else ""
    return f"Ask the producer{many} to re-send the damaged message{many} ({_named(damaged, total)})"


def _message_words(r: dict) -> str:
    from jobs.display import format_iso_z

    where = f"{r['topic'] or 'topic unknown'}/{r['queue_id']} at queue offset {r['queue_offset']}"
    if r["store_timestamp"] is not None:
        where += f", stored {format_iso_z(r['store_timestamp'])}"
    keys = [k for k in [*(r["keys"] or []), r["uniq_key"]] if k]
    return f"{where}, key {keys[0]}" if keys else f"{where}, no key readable"


def _resend_command(broker: dict, damaged: list[dict]) -> str | None:
    """A query showing what the dump still says about the first damaged message, by its unique key or a key."""
    store = f"{broker['name']}={broker['path']}"
    for r in damaged:
        if r["uniq_key"]:
            return command(["query", "--store", store, "--uniq-key", r["uniq_key"], "--explain", "--format", "table"])
        if r["topic"] and r["keys"]:
            return command(["query", "--store", store, "--topic", r["topic"], "--key", r["keys"][0], "--explain",
                            "--format", "table"])
    return None


def command(argv: list[str]) -> str:
    """A console command for one of the jobs (``argv[0]``), as it runs when pasted."""
    from jobs.cli import printed_command

    return printed_command(argv[0], argv[1:])


def command_of(argv: list[str]) -> str:
    return " ".join(shlex.quote(a) for a in argv)
