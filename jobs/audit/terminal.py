"""The audit's verdict on the terminal: on a headless broker host stdout is all there is, so it says, per broker,
what the report's first screen says (jobs/audit/verdict.py, in its words): will it start, where recovery cuts, the
messages lost (damaged, destroyed, dropped after the cut), those it keeps damaged, and what to do, each action with
the command that does it; then one line for the whole run.  ``--quiet`` prints only that line, ``--format json``
the same facts as one JSON object.  ``make demo`` (tools/demo.py) shows the audit's own output.

The line counts causes, not findings: one flipped bit mid-log is "1 cut, 1,188 messages lost", not 1,188
warnings; the other findings are counted by cause (the report's groups), per severity.
"""
from __future__ import annotations

import json

from runtime.display import plural

from .findings import Severity

# The checks the line counts in words; the rest are "other causes"
_COUNTED = ("recovery.truncation", "recovery.message_lost", "integrity.damaged_message", "consumequeue.missing_entry",
            "recovery.broker_will_not_start")


def counts(summary: dict, groups: list) -> dict:
    """What summary.json's ``counts`` adds to its per-severity and per-check counts: the brokers that will not
    start, the cuts, the messages lost (damaged, destroyed, dropped), kept damaged, in no consume queue and never
    dispatched, the other causes per severity (finding groups), and all of it in words."""
    from .resend import lost_count

    brokers = summary["brokers"]
    lost = [b["verdict"]["lost"] for b in brokers]
    out = {
        "will_not_start": sum(1 for b in brokers if b["verdict"]["will_start"] is False),
        "cuts": sum(1 for b in brokers if b["verdict"]["cut"]),
        "messages_lost": sum(lost_count(x) for x in lost),
        "damaged": sum(x["damaged"] for x in lost), "destroyed": sum(x["destroyed"] for x in lost),
        "dropped": sum(x["dropped"] for x in lost),
        "kept_damaged": sum(b["verdict"]["kept_damaged"] for b in brokers),
        "unindexed": sum(x["unindexed"] for x in lost), "undispatched": sum(x["undispatched"] for x in lost),
        "other_causes": {s.label: sum(1 for g in groups if g.severity == s and g.check not in _COUNTED)
                         for s in Severity},
    }
    out["in_words"] = _words(out)
    return out


def _words(c: dict) -> str:
    parts = []
    if c["will_not_start"]:
        parts.append(f"{plural(c['will_not_start'], 'broker')} will not start")
    parts.append(plural(c["cuts"], "cut"))
    lost = plural(c["messages_lost"], "message") + " lost"
    if c["messages_lost"]:
        lost += f" ({c['damaged']:,} damaged, " + (f"{c['destroyed']:,} destroyed, " if c["destroyed"] else "") + \
            f"{c['dropped']:,} dropped)"
    parts.append(lost)
    if c["kept_damaged"]:
        parts.append(f"{plural(c['kept_damaged'], 'message')} kept damaged")
    if c["unindexed"]:
        parts.append(f"{c['unindexed']:,} in no consume queue")
    if c["undispatched"]:
        parts.append(f"{c['undispatched']:,} never dispatched")
    other = c["other_causes"]
    n = sum(other.values())
    words = {"error": ("error", "errors"), "warning": ("warning", "warnings"), "info": ("note", "notes")}
    parts.append(f"{plural(n, 'other cause')}" + (" (" + ", ".join(
        plural(other[s], *words[s]) for s in ("error", "warning", "info") if other[s]) + ")" if n else ""))
    return ", ".join(parts)


def final_line(summary: dict) -> str:
    """The run in one line: the worst verdict, the counts in words, where the report is."""
    from .verdict import LEVELS

    levels = list(LEVELS)
    worst = min((b["verdict"]["level"] for b in summary["brokers"]), key=levels.index, default="pass")
    n = len(summary["brokers"])
    return (f"audit {LEVELS[worst]} ({plural(n, 'store')}): {summary['counts']['in_words']}; report: "
            f"{summary['outputs']['report'] or '-'}")


def broker_lines(b: dict) -> list[str]:
    """One broker's first screen in words."""
    from .resend import kept_damaged_words, lost_words

    v, rec = b["verdict"], b.get("recovery")
    lines = [f"{b['name']}: {v['banner']}"]

    def fact(label: str, text: str) -> None:
        lines.append(f"  {label:<16}{text}")

    if v["will_start"] is None:
        fact("Will it start?", "unknown: the audit could not predict its recovery")
    elif v["will_start"]:
        fact("Will it start?", f"yes ({rec['mode']} recovery)")
    else:
        fact("Will it start?", "NO: " + "; ".join(v["why_not"]))
    if v["cut"]:
        c = v["cut"]
        fact("The cut:", f"physical offset {c['physical_offset']:,}, segment {c['segment']} at byte "
                         f"{c['file_position']:,} ({c['kind']}): recovery drops everything after it")
    elif rec is not None:
        fact("The cut:", f"none: recovery keeps the log whole, to physical offset "
                         f"{rec['predicted_max_physical_offset']:,}")
    fact("Messages lost:", lost_words(v))
    kept = kept_damaged_words(v)
    if kept:
        fact("Kept, damaged:", kept)
    for i, a in enumerate(v["actions"]):
        fact("Do first:" if i == 0 else "Then:", a["text"])
        if a.get("command"):
            lines.append(f"  {'':<16}  {a['command']}")
    return lines


def render(summary: dict, fmt: str = "text", quiet: bool = False, exit_code: int | None = None) -> str:
    """What the audit prints on stdout."""
    if fmt == "json":
        return json.dumps({
            "tool": summary["tool"], "version": summary["version"], "run_id": summary["run_id"],
            "exit_code": exit_code, "line": final_line(summary), "outputs": summary["outputs"],
            "counts": {k: v for k, v in summary["counts"].items() if k != "per_check"},
            "brokers": [{"name": b["name"], "path": b["path"], "recovery": b["recovery"], "verdict": b["verdict"]}
                        for b in summary["brokers"]]}, ensure_ascii=False, default=str)
    if quiet:
        return final_line(summary)
    out = []
    for b in summary["brokers"]:
        out += broker_lines(b) + [""]
    return "\n".join(out + [final_line(summary)])
