"""The on-call view of one broker: what an operator deciding whether to restart it needs first, in words.

Will it start (and if not, why and what to do), where recovery will cut the log, which messages are lost
(damaged, or dropped after the cut), what a restart now would destroy (the bytes after the cut that new messages
overwrite, the segments deleted, the consume-queue units truncated, the index files rebuilt), what is safe (every
byte before physical offset N), and the three actions that matter most, each the "what to do" of a check
(``findings.Check.action``).  The level and the headline come from those facts, not from a count of findings:

  will-not-start  the broker refuses to start (recovery.broker_will_not_start)
  incomplete      the audit could not finish this broker (broker.audit_failed, or no recovery prediction)
  data-lost       messages are lost: recovery drops some, or damage destroyed some (a data-lost check)
  attention       nothing is lost, but error findings remain (queries or consumers are affected)
  pass            nothing of the above

``summary.json`` carries each broker's verdict (``brokers[].verdict``); the report's first screen and the fleet
table show it.
"""
from __future__ import annotations

from .findings import Consequence, Severity
from .groups import Group

LEVELS = {  # level -> the banner's words, most serious first
    "will-not-start": "WILL NOT START",
    "incomplete": "AUDIT INCOMPLETE",
    "data-lost": "DATA LOST",
    "attention": "ATTENTION",
    "pass": "PASS",
}
ACTIONS = 3


def _n(x: int) -> str:
    return f"{x:,}"


def _plural(n: int, one: str, many: str | None = None) -> str:
    return f"{_n(n)} {one if n == 1 else (many or one + 's')}"


def verdict(broker: dict, groups: list[Group], resend_counts: dict[str, int], message_count: int | None) -> dict:
    """The on-call view of ``broker`` (a summary.json ``brokers`` entry) from its finding groups (in the report's
    order) and its rows of tables/resend per state."""
    name, rec = broker["name"], broker.get("recovery")
    mine = [g for g in groups if g.broker == name]
    failed = [g for g in mine if g.check == "broker.audit_failed"]
    errors = sum(g.count for g in mine if g.severity == Severity.ERROR)
    lost_groups = [g for g in mine if g.consequence == Consequence.DATA_LOST]
    damaged, dropped, unindexed = (resend_counts.get(s, 0) for s in ("damaged", "dropped", "unindexed"))
    v: dict = {"level": "pass", "banner": "", "headline": "", "will_start": None, "why_not": [], "cut": None,
               "lost": {"damaged": damaged, "dropped": dropped, "unframed_runs": 0, "unindexed": unindexed},
               "at_risk": [], "safe_before": None, "actions": []}
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
        v["at_risk"] = _at_risk(rec)
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
    v["actions"] = top_actions(mine, v["level"])
    return v


def _at_risk(rec: dict) -> list[str]:
    """What a restart on this disk now destroys, file by file, in the order the broker does it."""
    out = []
    if rec["messages_lost"] or rec["unframed_runs_lost"]:
        out.append(f"commitlog/{rec['stop_segment']} after byte {_n(rec['stop_position'])}: new messages overwrite "
                   f"the {_n(rec['bytes_lost'])} bytes recovery drops there")
    for seg in rec["segments_deleted"]:
        out.append(f"commitlog/{seg}: deleted (it lies wholly past the cut)")
    if rec["cq_units_truncated"]:
        out.append(f"consume queues: {_plural(rec['cq_units_truncated'], 'unit')} truncated")
    for f in rec["index_files_deleted"]:
        out.append(f"index/{f}: deleted and rebuilt by re-dispatch")
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


def top_actions(groups: list[Group], level: str) -> list[dict]:
    """The first ``ACTIONS`` distinct actions of the broker's groups, in the report's order (never those of
    cosmetic or info groups: the report lists them below)."""
    out, seen = [], set()
    for g in groups:
        if g.consequence == Consequence.COSMETIC or g.severity == Severity.INFO:
            continue  # what the broker repairs itself, and facts (lag, dead letters): the report lists them below
        if g.action in seen:
            continue
        seen.add(g.action)
        out.append({"check": g.check, "consequence": g.consequence.label, "count": g.count, "text": g.action})
        if len(out) == ACTIONS:
            break
    if not out and level == "pass":
        out.append({"check": None, "consequence": None, "count": 0,
                    "text": "Nothing to do before a restart: the broker starts on this dump and loses nothing."})
    return out

