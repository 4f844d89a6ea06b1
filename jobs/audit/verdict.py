"""The on-call view of one broker: what an operator deciding whether to restart it needs first, in words.

Will it start (and if not, why and what to do), where recovery will cut the log, which messages are lost (damaged
or destroyed by damage, or dropped after the cut), which the broker keeps damaged, what a restart now would destroy
(the bytes after the cut that new messages overwrite, the segments holding data that it deletes, the consume-queue
units it truncates, the index files it rebuilds), what is safe (every byte before physical offset N), and what to
do first.  One vocabulary, here and in the terminal, the report and summary.json: a message is **lost** when the
broker will not deliver it (recovery drops it, or damage destroyed its header), **kept, damaged** when the broker
keeps and serves it but its bytes changed (damage before the cut, in a segment its recovery never walks): its
producer must re-send it all the same.  The level and the headline come from those facts, not from a count of
findings:

  will-not-start  the broker refuses to start (the check of the role ``start_blocker``, or another family's
                  will-not-start finding)
  incomplete      the audit could not finish this broker (the role ``audit_failed``, or no recovery prediction)
  data-lost       messages are lost: recovery drops some, or damage destroyed some (a data-lost check the kept
                  damage does not explain)
  attention       nothing is lost, but error findings remain (a message kept damaged, queries or consumers affected)
  pass            nothing of the above

The actions are decided by the facts too, case by case, each one sentence and, where a command helps, one
command that runs as printed (the installed console script, paths quoted: :func:`runtime.cli.console_command`);
where no command can help, the sentence says so:

  will_not_start     what stops the broker, and the command that gets it started without losing more: the file to
                     move out of the store, the segment to extend; for a record whose LMQ dispatch list makes
                     load() fail, the extract that copies it and the records after it out, then (``move_abort``)
                     the start without abort, then (``resend_undispatched``) their re-send
  copy_out           intact messages lie after the cut: the extract that copies them out before a restart
  nothing_after_cut  nothing intact lies after the cut: nothing to copy out (and who must re-send what it loses)
  resend_damaged     lost damaged or destroyed messages whose producers must re-send them, named by key or place
  kept_damaged       messages the broker keeps damaged: their producers re-send them, their consumers are told
  extract_unindexed  messages in no consume queue, and the extract that copies them out
  property_crc       records whose __CRC32# does not match, the broker's CRC settings not given: where a
                     forceVerifyPropCRC recovery would cut, and the audit with ``--config`` that gives the answer
  keep_a_copy        nothing is lost, but a restart changes the store: copy it first
  check              otherwise, the user guide's what-to-do of the most consequential error group

``summary.json`` carries each broker's verdict (``brokers[].verdict``); the report's first screen, the fleet
table and the terminal (jobs/audit/terminal.py) show it, in the words resend.lost_words and
resend.kept_damaged_words give.

The verdict names no check and no family: where it needs a check's meaning (the start blocker, the cut, the
messages lost after it, damage, a message in no consume queue...) it finds the check by the role the check
declares (findings.ROLES), and where it needs a family's (its start blockers are the recovery prediction's own,
its errors are the damage behind a cut) the family declares it (contract.Family).
"""
from __future__ import annotations

import posixpath
import re
import shlex

from runtime.display import plural
from store_format.fs import Location, resolve
from store_format.queues import BY_FOLDER, FILE

from . import resend
from .checks import load_all, the_check, with_role
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


def _role(role: str) -> str:
    """The id of the one check declaring ``role`` (findings.ROLES)."""
    return the_check(role).id


def _roles(*roles: str) -> frozenset:
    """The ids of the checks declaring any of ``roles``."""
    return frozenset(c.id for r in roles for c in with_role(r))


def _families_declaring(flag: str) -> frozenset:
    """The families whose contract sets ``flag`` (contract.Family)."""
    return frozenset(f.name for f in load_all() if getattr(f, flag))


def _family(check: str) -> str:
    return check.split(".", 1)[0]


def _damage_checks() -> frozenset:
    """The checks that report damaged records themselves (the spans and the messages they held): what the
    messages to re-send name as damaged, destroyed or kept damaged."""
    return _roles("damage")


class RunTables:
    """What every broker's verdict reads of the run's tables (tables/resend's counts, tables/segments' rows), read
    once for all of them: a fleet's brokers each read both tables whole."""

    def __init__(self, src: Location):
        from runtime.output import out_dataset

        self.resend_counts = resend.counts(_join(src, "tables", resend.NAME))
        dataset = out_dataset(_join(src, "tables", "segments"))
        self.segments = [] if dataset is None else dataset.to_table(
            columns=["broker", "segment", "messages", "corrupt_bytes", "stale_records"]).to_pylist()


def _resend_counts(counts: dict, name: str) -> tuple[dict, dict]:
    """The broker's rows of tables/resend per state (``counts``: :attr:`RunTables.resend_counts`): all of them
    (system records are lost too), and the messages to re-send (the others)."""
    records = {s: 0 for s in resend.STATES}
    messages = dict(records)
    for (b, s, is_system), n in counts.items():
        if b != name:
            continue
        records[s] = records.get(s, 0) + n
        if not is_system:
            messages[s] = messages.get(s, 0) + n
    return records, messages


def verdict(broker: dict, groups: list[Group], out: Location, message_count: int | None,
            staged: Location | None = None, tables: RunTables | None = None) -> dict:
    """The on-call view of ``broker`` (a summary.json ``brokers`` entry) from its finding groups (in the report's
    order) and the audit's tables in ``out`` (tables/resend, tables/segments; read from ``staged`` until the run
    commits, runtime/commit.py; ``tables``: what of them every broker's verdict reads, read once)."""
    src = staged or out
    tables = tables if tables is not None else RunTables(src)
    name, rec = broker["name"], broker.get("recovery")
    mine = [g for g in groups if g.broker == name]
    failing = _roles("audit_failed")
    failed = [g for g in mine if g.check in failing]
    errors = sum(g.count for g in mine if g.severity == Severity.ERROR)
    damage_groups = [g for g in mine if g.consequence == Consequence.DATA_LOST]
    per, messages = _resend_counts(tables.resend_counts, name)
    to_resend = sum(messages.values())
    v: dict = {"level": "pass", "banner": "", "headline": "", "will_start": None, "why_not": [], "cut": None,
               "lost": {"damaged": per["damaged"], "destroyed": per["destroyed"], "dropped": per["dropped"],
                        "unframed_runs": 0, "unindexed": per["unindexed"], "undispatched": per["undispatched"]},
               "kept_damaged": per["kept_damaged"], "to_resend": to_resend,
               "system_records": sum(per.values()) - to_resend,
               "at_risk": [], "safe_before": None, "actions": []}
    # the damage the messages to re-send name (lost or kept) is said by them; what they do not name is data lost
    named = per["damaged"] or per["destroyed"] or per["kept_damaged"]
    damage = _damage_checks()
    lost_groups = [g for g in damage_groups if not (named and g.check in damage)]
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
        v["at_risk"] = _at_risk(rec, _empty_segments(tables.segments, name))
        first_damage = min((g.first_offset for g in damage_groups if g.first_offset is not None), default=None)
        v["safe_before"] = cut if first_damage is None else min(cut, first_damage)
        v["headline"] = _headline(name, rec, v, message_count, errors, mine, lost_groups)
        if not rec["broker_will_start"]:
            v["level"] = "will-not-start"
        elif failed:
            v["level"] = "incomplete"
        elif loses or lost_groups or v["lost"]["destroyed"]:
            v["level"] = "data-lost"
        elif errors:
            v["level"] = "attention"
    if failed and v["level"] not in ("will-not-start",):
        v["headline"] += f"; the audit of this broker is incomplete ({plural(sum(g.count for g in failed), 'step')} " \
                         "failed)"
    v["banner"] = LEVELS[v["level"]]
    v["actions"] = actions(broker, v, mine, out, src, messages)
    return v


def _with_other_blockers(rec: dict, groups: list[Group]) -> dict:
    """``rec`` (the commitlog's recovery prediction) with the start blockers other families found (a 5.x
    timerwheel of the wrong length: TimerWheel refuses to load) as further start problems: the broker starts only
    when every store it loads does."""
    predicted = _families_declaring("blockers_predicted")  # already in the prediction's start_problems
    blockers = [g for g in groups if g.consequence == Consequence.WILL_NOT_START and _family(g.check) not in predicted]
    problems = [g.samples[0]["message"] if g.samples else g.check for g in blockers]
    if not problems:
        return rec
    return dict(rec, broker_will_start=False, start_problems=list(rec["start_problems"]) + problems)


def _join(base: Location, *parts: str) -> Location:
    from runtime.output import out_join

    return out_join(base, *parts)


def _empty_segments(rows: list[dict], broker: str) -> set[str]:
    """The segments of ``broker`` that hold nothing (no message, no damage): deleting one destroys nothing
    (``rows``: :attr:`RunTables.segments`)."""
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
        out.append(f"consume queues: {plural(rec['cq_units_truncated'], 'unit')} truncated")
    files = rec["index_files_deleted"]
    if files:
        out.append(f"index/{files[0]}: deleted and rebuilt by re-dispatch" if len(files) == 1 else
                   f"index/{files[0]} .. {files[-1]}: {len(files)} index files deleted and rebuilt by re-dispatch")
    return out


def _headline(name: str, rec: dict, v: dict, message_count: int | None, errors: int, mine: list[Group],
              lost_groups: list[Group]) -> str:
    lost = v["lost"]
    parts = []
    if not rec["broker_will_start"]:
        parts.append(f"{name} will NOT start: {rec['start_problems'][0]}")
        if len(rec["start_problems"]) > 1:
            parts[-1] += f" (and {plural(len(rec['start_problems']) - 1, 'more problem')})"
        start = "once that is fixed, recovery"
    else:
        start = f"{name} will start ({rec['mode']} recovery)"
    cuts = rec["messages_lost"] or rec["unframed_runs_lost"]
    if cuts:
        text = (f"{start}{' but' if rec['broker_will_start'] else ''} cuts the log at physical offset "
                f"{_n(rec['predicted_max_physical_offset'])} ({rec['stop_kind']} in segment {rec['stop_segment']}) and "
                f"drops {_lost_words(rec)}")
        parts.append(text)
    else:
        kept = f" and keeps all {plural(message_count, 'message')}" if message_count is not None else ""
        parts.append(f"{start}{kept}; recovery drops nothing" if rec["broker_will_start"] else
                     f"{start} drops nothing")
    if lost["destroyed"]:
        one = lost["destroyed"] == 1
        parts.append(f"{plural(lost['destroyed'], 'message')} {'is' if one else 'are'} destroyed (damage took "
                     f"{'its header' if one else 'their headers'}; the consume-queue "
                     f"{'unit' if one else 'units'} still pointing at {'it names it' if one else 'them name them'})")
    if v["kept_damaged"]:
        one = v["kept_damaged"] == 1
        parts.append(f"{plural(v['kept_damaged'], 'message')} it keeps {'is' if one else 'are'} damaged (kept, "
                     f"damaged: consumers receive {'it as it is' if one else 'them as they are'}; "
                     f"{'its producer' if one else 'their producers'} must re-send {'it' if one else 'them'})")
    by_cut = _roles("cut", "lost_after_cut")
    other_lost = [g for g in lost_groups if g.check not in by_cut]
    if other_lost and not cuts:
        parts.append(f"data is lost: {other_lost[0].check} ({plural(other_lost[0].count, 'finding')})")
    if lost["unindexed"]:
        parts.append(f"{plural(lost['unindexed'], 'message')} in no consume queue: consumers never receive them")
    if lost["undispatched"]:
        parts.append(f"{plural(lost['undispatched'], 'message')} never dispatched: consumers never receive them")
    if errors and not parts[1:] and not cuts and rec["broker_will_start"]:
        worst = next(g for g in mine if g.severity == Severity.ERROR)
        parts.append(f"but {plural(errors, 'error finding')}: {worst.consequence.label} ({worst.check})")
    return "; ".join(parts)


def _lost_words(rec: dict) -> str:
    """What recovery drops, in words: messages (damaged, intact), and runs of records no walk could frame."""
    runs = rec["unframed_runs_lost"]
    run_words = (f"{plural(runs, 'unreadable run')} of records ({_n(rec['unframed_bytes_lost'])} bytes whose headers "
                 "are gone)")
    if not rec["messages_lost"]:
        return run_words
    text = (f"{plural(rec['messages_lost'], 'message')} ({_n(rec['damaged_messages_lost'])} damaged, "
            f"{_n(rec['intact_messages_lost'])} intact)")
    return text + (f" and {run_words}" if runs else "")


# ---------------------------------------------------------------------------------------------------------
# What to do, from the facts


def _action(kind: str, text: str, command: str | None = None, check: str | None = None, count: int = 0) -> dict:
    return {"kind": kind, "text": text, "command": command, "check": check, "count": count}


def actions(broker: dict, v: dict, groups: list[Group], out: Location, src: Location | None = None,
            messages: dict | None = None) -> list[dict]:
    """The broker's actions, most urgent first (module docstring), at most :data:`ACTIONS`; ``messages``: the
    messages to re-send per state (tables/resend without system records: nobody re-sends those)."""
    name, rec = broker["name"], broker.get("recovery")
    rec = _with_other_blockers(rec, groups) if rec is not None else None
    table = _join(src or out, "tables", resend.NAME)
    done: list[dict] = []
    covered = set(_roles(*_COVERED))
    if rec is not None and not rec["broker_will_start"]:
        done += _will_not_start(broker, rec, groups, out)
    lost = v["lost"]
    messages = messages or {**lost, "kept_damaged": v["kept_damaged"]}
    gone = messages["damaged"] + messages["destroyed"]  # lost to damage: only their producers can re-send them
    # none to name without any (a fleet's brokers would each read the whole table for nothing)
    damaged = resend.first_rows(table, name, _KEYS_NAMED, ("damaged", "destroyed")) if gone else []
    if v["cut"] and lost["dropped"]:
        first = resend.first_offset(table, name, "dropped")
        done.append(_action(
            "copy_out", f"Copy out the {plural(lost['dropped'], 'intact message')} recovery drops after the cut at "
            f"physical offset {_n(v['cut']['physical_offset'])} before restarting {name}: a restart overwrites them.",
            command(["extract", "--store", f"{name}={broker['path']}", "--walk", "salvage", "--physical-offsets",
                     f"{first}..", "--out", resend.folder(out, name).as_typed]), _role("cut"),
            lost["dropped"]))
    elif v["cut"]:
        if gone:
            many = gone > 1
            what = (f"the {plural(gone, 'damaged message')} there ({_named(damaged, gone)}), which "
                    f"{'their producers' if many else 'its producer'} must re-send")
        else:
            what = f"{plural(lost['unframed_runs'], 'unreadable run')} of records whose headers are gone"
        done.append(_action(
            "nothing_after_cut", f"Nothing intact lies after the cut at physical offset "
            f"{_n(v['cut']['physical_offset'])}, so there is nothing to copy out before restarting {name}: a restart "
            f"loses only {what}.", _resend_command(broker, damaged), _role("cut"), gone))
    if gone and not any(a["kind"] == "nothing_after_cut" for a in done):
        done.append(_action("resend_damaged", _resend_words(damaged, gone) + ".", _resend_command(broker, damaged),
                            _role("damaged_message"), gone))
    if messages["kept_damaged"]:
        kept = resend.first_rows(table, name, _KEYS_NAMED, ("kept_damaged",))
        n, many = messages["kept_damaged"], messages["kept_damaged"] > 1
        done.append(_action(
            "kept_damaged", f"Ask the producer{'s' if many else ''} to re-send the {plural(n, 'damaged message')} "
            f"{name} keeps ({_named(kept, n)}), and tell {'their' if many else 'its'} consumers: the broker keeps "
            f"{'them' if many else 'it'} and serves {'them as they are' if many else 'it as it is'}, with bytes the "
            "producer did not send.", _resend_command(broker, kept), _role("damaged_message"), n))
    if gone or messages["kept_damaged"]:  # the damaged records themselves: said by the actions above
        covered |= _damage_checks()
    if lost["unindexed"]:
        queues = resend.unindexed_queues(table, name)
        q = queues[0]
        more = f" (and {plural(len(queues) - 1, 'other queue')})" if len(queues) > 1 else ""
        done.append(_action(
            "extract_unindexed", f"Copy out the {plural(lost['unindexed'], 'message')} in no consume queue, "
            f"{plural(q['count'], 'message')} of {q['topic']}/{q['queue_id']}{more}: consumers never receive them "
            "until they are re-sent or the queue is rebuilt.",
            command(["extract", "--store", f"{name}={broker['path']}", "--topic", q["topic"], "--queue",
                     str(q["queue_id"]), "--queue-offsets", f"{q['first']}..{q['last']}", "--out",
                     resend.folder(out, f"{name}-{q['topic']}-{q['queue_id']}").as_typed]),
            _role("unindexed"), lost["unindexed"]))
    crc = _property_crc(broker, v, groups, out)
    if crc is not None:
        done.append(crc)
        covered |= _roles("property_crc")
    if rec is not None and not done and v["level"] in ("pass", "attention") and _restart_changes_data(v["at_risk"]):
        done.append(_action(
            "keep_a_copy", f"Nothing is lost, but a restart of {name} changes the store ({v['at_risk'][0]}"
            + (f", and {plural(len(v['at_risk']) - 1, 'more change')}" if len(v["at_risk"]) > 1 else "")
            + "): keep a copy of it first.",
            command_of(["cp", "-a", "--", broker["path"], _root(broker).suffixed(".before-restart").as_typed])))
    # an error the facts above do not cover (a queue pointing past the log, a config file the broker cannot
    # read...): the user guide's what-to-do for the most consequential one
    behind_cut = _families_declaring("damage_behind_cut") if v["cut"] else frozenset()
    worst = next((g for g in groups if g.severity == Severity.ERROR and g.consequence != Consequence.COSMETIC
                  and g.check not in covered and _family(g.check) not in behind_cut), None)
    if worst is not None and (not done or worst.consequence <= Consequence.DATA_LOST):
        done.append(_action("check", worst.action, None, worst.check, worst.count))
    if not done and v["level"] == "pass":
        done.append(_action("none", f"Nothing to do before a restart: {name} starts on this dump and loses nothing."))
    return done[:ACTIONS]


# the roles of the checks whose what-to-do the actions above say with the facts (and, where there is a cut, the
# families of the damage behind it: Family.damage_behind_cut)
_COVERED = ("start_blocker", "cut", "lost_after_cut", "unindexed", "dispatch_stall")


def _restart_changes_data(at_risk: list[str]) -> bool:
    """Whether a restart destroys more than index files it rebuilds itself."""
    return any(not item.startswith("index/") for item in at_risk)


def _property_crc(broker: dict, v: dict, groups: list[Group], out: Location) -> dict | None:
    """Records whose ``__CRC32#`` does not match their bytes (or is no number), the broker's CRC settings not
    given: whether its recovery cuts there depends on ``forceVerifyPropCRC``, so say where a forced check would cut
    and give the audit that knows (``--config`` with the broker's settings file, found beside the dump or named)."""
    crc = broker.get("property_crc")
    crc_checks = _roles("property_crc")
    bad = [g for g in groups if g.check in crc_checks]
    if crc is None or not bad or crc["settings_given"]:
        return None
    n = sum(g.count for g in bad)
    first = min((g for g in bad if g.first_offset is not None), key=lambda g: g.first_offset, default=bad[0])
    name = broker["name"]
    sample = first.samples[0] if first.samples else None
    where = f"the first at physical offset {_n(first.first_offset)}" if first.first_offset is not None else "one"
    if sample is not None and sample["file"] is not None:
        where += f" (segment {sample['file']} at byte {_n(sample['file_position'] or 0)})"
    f = crc["forced_cut"]
    if f is None:
        forced = "with forceVerifyPropCRC on or off the broker keeps them: its recovery does not walk their segments"
    else:
        why = "its __CRC32# does not match" if f["kind"] == "BAD_PROPERTY_CRC" else "it carries no __CRC32#"
        forced = (f"with forceVerifyPropCRC=true its recovery cuts the log at physical offset "
                  f"{_n(f['physical_offset'])} (segment {f['segment']} at byte {_n(f['file_position'])}: {why}) and "
                  "drops everything after it; off (the default) it keeps them")
    conf = _settings_file(broker["path"])
    then = (f"the audit with the broker's settings ({conf}) says which" if conf is not None else
            "run the audit again with the broker's broker.conf in place of `broker.conf` below to know which")
    return _action("property_crc", f"{plural(n, 'record')} of {name} {'fails' if n == 1 else 'fail'} the "
                   f"whole-record CRC (__CRC32#), {where}; "
                   f"{forced}.  The audit was not given the broker's settings: {then}.",
                   command(["audit", "--store", f"{name}={broker['path']}", "--config", conf or "broker.conf",
                            "--out", out.suffixed("-with-config").as_typed]), first.check, n)


def _settings_file(store_path: str) -> str | None:
    """The broker's settings file carried with the dump (store_format.stores.SETTINGS_FILES), as a path."""
    from store_format.stores import settings_file

    loc = settings_file(store_path)
    return None if loc is None else loc.uri()


def _will_not_start(broker: dict, rec: dict, groups: list[Group], out: Location) -> list[dict]:
    """What stops the broker (the first problem, as the broker meets it) and the commands that get it started
    without losing more: the file to move out of the store (beside the store root), the segment to extend, the
    records to copy out before a start without ``abort``; a blocker another family found, that family's
    what-to-do."""
    name = broker["name"]
    problem = rec["start_problems"][0]
    more = f" (and {plural(len(rec['start_problems']) - 1, 'more problem')} below)" \
        if len(rec["start_problems"]) > 1 else ""
    blocker = _role("start_blocker")
    count = sum(g.count for g in groups if g.check == blocker)
    stall = broker.get("dispatch_stall")
    if stall is not None and problem == _stall_problem(stall["physical_offset"]):
        return _stalled_dispatch(broker, stall, more, count, out)
    other = next((g for g in groups if g.consequence == Consequence.WILL_NOT_START and g.samples
                  and g.samples[0]["message"] == problem), None)
    if other is not None and _family(other.check) not in _families_declaring("blockers_predicted"):
        return [_action("will_not_start", f"{name} will not start: {problem}{more}. {other.action}", None,
                        other.check, other.count)]
    rel = _file_of_problem(problem)
    if rel is None:
        return [_action("will_not_start", f"{name} will not start: {problem}{more}.  No command can fix that from "
                        f"the dump: see {blocker} below.", None, blocker, count)]
    root = _root(broker)
    reason = problem[len(rel):].lstrip(":").strip()  # the problem names the file first: said once
    reason = "it " + reason if reason.startswith("is ") else reason
    # a file of a MappedFileQueue folder cut short (a copy that lost the preallocated tail): zeros to its full length
    # keep its records and units, where moving it away would lose them
    short = re.match(r".*/\d{20}$", rel) and re.search(r"is (\d+) bytes, not (\w+) (\d+)", problem)
    if short and int(short.group(1)) < int(short.group(3)):
        return [_action("will_not_start", f"Extend {rel} with zeros to {_n(int(short.group(3)))} bytes "
                        f"({short.group(2)}), as the broker preallocates it (keep a copy first), before starting {name}: {reason}{more}.",
                        command_of(["truncate", "-s", short.group(3), "--", root.child(rel).as_typed]),
                        blocker, count)]
    if re.match(r"config/[^/]+$", rel) and "ConfigManager.load()" in problem:
        # the file and its .bak both fail to decode: a good copy keeps what it holds; moving both aside starts the
        # broker without it (an empty table), which loses what it held
        both = [root.child(rel + ext).as_typed for ext in ("", ".bak")
                if not (ext == "" and reason.startswith("it is missing"))]
        return [_action("will_not_start", f"Restore {rel} from a good copy (a backup, or the slave's) before starting "
                        f"{name}: {reason}{more}.  Only if there is none, move it and its .bak out of the store (the "
                        "command): the broker then starts with none of what it held.",
                        command_of(["mv", "--", *both, root.parent().as_typed]),
                        blocker, count)]
    typed = re.search(r"topics\.json gives (\S+) queue\.type=(\S+?),? ", problem)
    if typed:
        expected = BY_FOLDER.get(rel.split("/")[0], (FILE,))[0].queue_type  # the type its folder's backend needs
        return [_action("will_not_start", f"Set the attribute queue.type of topic {typed.group(1)} to {expected} in "
                        f"config/topics.json (and its .bak), as its folder {rel} says (keep a copy first), before "
                        f"starting {name}: {reason}{more}.  No command does that edit: topics.json is the broker's own "
                        "JSON.", None, blocker, count)]
    return [_action("will_not_start", f"Move {rel} out of the store before starting {name}, keeping it: {reason}"
                    f"{more}.", command_of(["mv", "--", root.child(rel).as_typed, _aside(root, rel)]),
                    blocker, count)]


def _root(broker: dict) -> Location:
    """The broker's store root (a summary.json ``brokers`` entry's path: a local path or a URI), for the commands
    that name its files (spelled as it is: Location.as_typed)."""
    return resolve(broker["path"])


def _aside(root: Location, rel: str) -> str:
    """Where a file moved out of the store goes: beside the store root, named after it."""
    return root.parent().child(f"{posixpath.basename(rel)}.moved-out-of-store").as_typed


def _stall_problem(physical_offset: int) -> str:
    from .checks.lmq import stall_problem

    return stall_problem(physical_offset)


def _stalled_dispatch(broker: dict, stall: dict, more: str, count: int, out: Location) -> list[dict]:
    """RocketMQ 5.3.3's own LMQ dispatch bug (store-format-5x.md section 5.1): the abnormal recovery re-dispatches
    the record whose dispatch list names a non-LMQ queue before the last, Long.parseLong throws and load() fails.
    The way out that loses nothing more: copy that record and every record after it out of the dump (no consume
    queue holds them), start without ``abort`` (a normal recovery, whose reput starts at the commitlog's end and so
    never meets the record), then re-send them."""
    name, root = broker["name"], _root(broker)
    at, after = stall["physical_offset"], stall["records_after"]
    n = after + 1
    target = resend.folder(out, f"{name}-undispatched").as_typed
    record = (f"the record at physical offset {_n(at)} ({stall['topic']}/{stall['queue_id']} at queue offset "
              f"{stall['queue_offset']}, segment {stall['segment']} at byte {_n(stall['file_position'])})")
    return [
        _action("will_not_start", f"{name} will not start: {record} names a non-LMQ queue before the last in its "
                "INNER_MULTI_DISPATCH, so its re-dispatch at start throws and load() fails (RocketMQ's own bug)"
                f"{more}.  First copy it and the {plural(after, 'record')} after it out of the dump: no consume "
                "queue holds them.", command(["extract", "--store", f"{name}={broker['path']}", "--walk", "salvage",
                                             "--physical-offsets", f"{at}..", "--out", target]),
                _role("start_blocker"), count or 1),
        _action("move_abort", f"Then move `abort` out of the store: {name} starts with a normal recovery, which keeps "
                "the whole log, and its reput starts at the commitlog's end, so it never meets that record (and "
                f"never dispatches the {plural(n, 'record')} from it on).",
                command_of(["mv", "--", root.child("abort").as_typed, _aside(root, "abort")]),
                _role("dispatch_stall"), n),
        _action("resend_undispatched", f"Once {name} runs, re-send the {plural(n, 'message')} of that extract "
                "(topic, queue, keys and body in it) with their producers; no command here sends to a broker.  Make "
                "producers list only %LMQ% names in INNER_MULTI_DISPATCH.", None, _role("dispatch_stall"), n)]


def _file_of_problem(problem: str) -> str | None:
    """The store-relative file a start problem names first (store_format.recovery words each one that way)."""
    m = re.match(r"((?:[^\s:/]+/)*[^\s:/]+)(?::| is | does not )", problem)
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
    from runtime.display import format_iso_z

    where = f"{r['topic'] or 'topic unknown'}/{r['queue_id']} at queue offset {r['queue_offset']}"
    if r["store_timestamp"] is not None:
        where += f", stored {format_iso_z(r['store_timestamp'])}"
    if r["keys"]:
        return f"{where}, key {r['keys'][0]}"
    if r["uniq_key"]:
        return f"{where}, unique key {r['uniq_key']}"
    if r["state"] == "destroyed":
        return f"{where}, destroyed ({r['damage']}): no key readable"
    return f"{where}, no key readable"


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
    from runtime.cli import printed_command

    return printed_command(argv[0], argv[1:])


def command_of(argv: list[str]) -> str:
    return " ".join(shlex.quote(a) for a in argv)
