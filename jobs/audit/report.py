"""report.html: the one page a person reads first after an audit, often at night, deciding whether to restart a
broker, what to copy first and which messages to re-send.

Its first screen answers that per broker, in words (jobs/audit/verdict.py): the banner (will not start, data
lost, attention, pass), the headline, will it start and why not, where recovery cuts, what is lost, what a
restart now destroys, what is safe, the three actions that matter most, and the messages to re-send with the
commands that copy them out.  With several brokers a fleet table comes first, one line per broker.  Below:
the findings grouped by cause (jobs/audit/groups.py) in order of consequence, each group expandable to its
samples (``<details>``: no script), then counts per check, the families' sections, plots and detail tables.  The
page names no family and no check: what the families declare (jobs/audit/contract.py: their summary sections,
plots and table views) and the checks' roles (findings.ROLES) say what goes where.

Self-contained (CSS inline, plots as PNG data URIs drawn with matplotlib's Agg backend, no script), so it opens
offline, survives e-mail and prints (a print stylesheet opens every group).  Times are ISO-8601 UTC with the
epoch milliseconds in a tooltip.  Every piece of dump content (topics, keys, messages, paths) goes through
``html.escape``.
"""
from __future__ import annotations

import base64
import datetime as dt
import html
import io
import json
import re

import pyarrow as pa

from runtime.display import format_duration, format_iso_z, is_time_column

from runtime.display import plural
from store_format.fs import Location

from . import resend
from .contract import WrittenTable
from .checks import load_all, the_check, with_role
from .findings import Consequence
from .resend import kept_damaged_words, lost_words
_ROWS = 200  # rows of a detail table shown
_RESEND_ROWS = 10  # messages to re-send shown per broker (tables/resend has them all)
_CSS = """
*{box-sizing:border-box}
body{font:14px/1.45 system-ui,-apple-system,Segoe UI,Roboto,sans-serif;margin:16px auto;max-width:1360px;
 padding:0 16px;color:#1d2330}
h1{font-size:22px;margin:0 0 2px} h2{font-size:18px;margin:26px 0 8px;border-bottom:1px solid #dde}
h3{font-size:15px;margin:14px 0 6px}
.meta{color:#667;font-size:12px}
.banner{padding:10px 16px;border-radius:8px;margin:10px 0;font-size:16px;font-weight:600;border-left:10px solid}
.banner .word{display:inline-block;margin-right:10px;letter-spacing:.04em}
.will-not-start{background:#fbe3e3;color:#6f0f0f;border-color:#9d1111}
.data-lost{background:#fde8e8;color:#8d1c1c;border-color:#d33}
.incomplete{background:#efe7f6;color:#4b2266;border-color:#7a3fa3}
.attention{background:#fff3dc;color:#7a4b00;border-color:#e0a030}
.pass{background:#e5f6ea;color:#17622f;border-color:#2e9c52}
.facts{display:grid;grid-template-columns:210px 1fr;gap:3px 14px;margin:6px 0 8px}
.facts dt{font-weight:600;color:#445} .facts dd{margin:0}
ol.actions{margin:4px 0 8px;padding-left:22px} ol.actions li{margin:2px 0}
.scroll{overflow-x:auto;max-width:100%}
table{border-collapse:collapse;margin:6px 0 12px;font-size:13px;min-width:50%}
th,td{border:1px solid #dde;padding:3px 6px;text-align:left;vertical-align:top;overflow-wrap:break-word}
th{background:#f3f5fa;white-space:nowrap} td.num{text-align:right;font-variant-numeric:tabular-nums;
 white-space:nowrap}
td.wide{max-width:520px;min-width:14em;overflow-wrap:anywhere}
table.detail{width:100%} table.detail th{white-space:normal;vertical-align:bottom}
table.detail td.wide{min-width:18em}
time{white-space:nowrap} td.nowrap{white-space:nowrap}
pre.command{margin:3px 0 6px;white-space:pre-wrap;overflow-wrap:anywhere} pre.command span.arg{white-space:nowrap}
.error{color:#a11}.warning{color:#a60}.info{color:#357}
.muted{color:#667} img{max-width:100%;border:1px solid #eef} code,pre{font-size:12px}
pre{background:#f6f7fb;border:1px solid #e3e6ef;padding:8px;white-space:pre-wrap;overflow-wrap:anywhere;margin:4px 0}
time{border-bottom:1px dotted #99a}
details.group{border:1px solid #e3e6ef;border-radius:6px;margin:3px 0}
details.group>summary{display:grid;grid-template-columns:70px 290px 1fr 90px 330px;gap:8px;padding:4px 8px;
 cursor:pointer;list-style:none}
details.group>summary::-webkit-details-marker{display:none}
details.group>summary>span{overflow-wrap:anywhere}
details.group[open]>summary{background:#f3f5fa}
details.group>div{padding:4px 10px 6px}
.ghead{display:grid;grid-template-columns:70px 290px 1fr 90px 330px;gap:8px;padding:2px 9px;font-weight:600;
 color:#445;font-size:13px}
.fleet td:first-child{white-space:nowrap}
.badge{display:inline-block;padding:1px 7px;border-radius:4px;font-size:12px;font-weight:700;white-space:nowrap}
@media print{
 body{max-width:none;margin:0;font-size:11px} .scroll{overflow:visible}
 details.group::details-content{content-visibility:visible;display:block}
 details.group>div{display:block} details,section.broker{break-inside:avoid-page}
 img{max-width:100%;break-inside:avoid} a{color:inherit;text-decoration:none}
}
"""


def write(ctx, summary: dict, tables: dict[str, "pa.Table | WrittenTable"], groups: list, out: Location, *, top: int = 200,
          staged: Location | None = None) -> str:
    """report.html for the audit in ``out`` (its summary, detail tables and finding groups); ``staged``: where the
    run's outputs are until it commits (runtime/commit.py): read and written there, named as ``out``."""
    src = staged or out
    brokers = summary["brokers"]
    counts = summary["counts"]
    worst = min((b["verdict"] for b in brokers), key=lambda v: list(_LEVEL_ORDER).index(v["level"]),
                default={"level": "pass", "banner": "PASS", "headline": "no store audited"})
    title = _overall_title(brokers)
    parts = [f"<header><h1>RocketMQ store audit</h1><div class='meta'>{_time_iso(summary['run_time'])} &middot; "
             f"{_e(summary['tool'])} {_e(summary['version'])} &middot; run {_e(summary['run_id'])} &middot; "
             f"{plural(len(brokers), 'store')}: {_e(counts['in_words'])} &middot; "
             "<a href='#findings'>findings by cause</a>"
             f" &middot; <a href='summary.json'>summary.json</a></div></header>"]
    if len(brokers) > 1:
        parts.append(f"<div class='banner {worst['level']}' id='verdict'><span class='word'>"
                     f"{_e(worst['banner'])}</span>{_e(title)}</div>")
        parts.append(_fleet(brokers))
    for b in brokers:
        parts.append(_first_screen(b, out, src, top_banner=len(brokers) == 1))
    parts.append(_groups_section(groups, top))
    parts.append(_per_check_section(counts["per_check"]))
    families = load_all()  # what every family declares to show; what this run has no data for is left out
    for section in sorted((s for f in families for s in f.sections), key=lambda s: s.order):
        parts.append(_summary_section(section, brokers))
    plots = _plots(ctx, {n: t for n, t in tables.items() if not isinstance(t, WrittenTable)}, families)
    if plots:
        parts.append("<h2>Plots</h2>")
    for heading, png in plots:
        parts.append(f"<h3>{_e(heading)}</h3><img alt='{_e(heading)}' src='data:image/png;base64,{png}'>")
    missing = _missing_inputs(groups)
    views = sorted(((name, view) for f in families for name, view in f.views.items()), key=lambda nv: nv[1].order)
    for name, view in views:
        if name in tables:
            parts.append(_table_section(tables[name], view, name, [b["name"] for b in brokers], missing))
    inputs = summary["inputs"]
    parts.append(f"<h2>Inputs</h2><details><summary>{plural(len(inputs), 'file')} read (read-only)</summary>"
                 + _html_table(["path", "size", "sha256"],
                               [[i["path"], i["size"], i.get("sha256", "")] for i in inputs[:_ROWS]], numeric={1})
                 + "</details>")
    page = ("<!DOCTYPE html><html lang='en'><head><meta charset='utf-8'>"
            "<meta name='viewport' content='width=device-width, initial-scale=1'>"
            f"<title>RocketMQ store audit: {_e(worst['banner'])}</title><style>{_CSS}</style></head>"
            f"<body>{''.join(parts)}</body></html>")
    from runtime.output import out_join, out_write

    path = out_join(src, "report.html")
    out_write(path, page)  # a local path or a URI (the run's staging)
    return path


_LEVEL_ORDER = ("will-not-start", "incomplete", "data-lost", "attention", "pass")


def _overall_title(brokers: list[dict]) -> str:
    """One line for the fleet: how many brokers are in each state."""
    by: dict[str, list[str]] = {}
    for b in brokers:
        by.setdefault(b["verdict"]["level"], []).append(b["name"])
    words = {"will-not-start": "will not start", "incomplete": "not fully audited", "data-lost": "lose data",
             "attention": "need attention", "pass": "pass"}
    n = len(brokers)
    return "; ".join(f"{len(by[lv])} of {plural(n, 'broker')} {words[lv]} ({', '.join(by[lv][:6])}"
                     f"{', ...' if len(by[lv]) > 6 else ''})" for lv in _LEVEL_ORDER if lv in by)


# ---------------------------------------------------------------------------------------------------------
# Pieces


def _e(v) -> str:
    return html.escape("" if v is None else str(v), quote=True)


def _md(text: str) -> str:
    """An action's text: escaped, with its `code` spans as <code>."""
    return re.sub(r"`([^`]+)`", r"<code>\1</code>", _e(text))


def _time(ms) -> str:
    """A store time (epoch ms) as ISO-8601 UTC, the epoch in the tooltip."""
    if ms is None:
        return ""
    iso = format_iso_z(ms)
    if iso.endswith(" ms"):  # a time no calendar holds (a garbage field)
        return _e(iso)
    return f"<time datetime='{iso}' title='epoch ms {ms}'>{iso}</time>"


def _time_iso(text: str) -> str:
    """A timestamp summary.json holds as ISO text, with its epoch in the tooltip."""
    try:
        when = dt.datetime.fromisoformat(text)
    except (TypeError, ValueError):
        return _e(text)
    return _time(int(when.timestamp() * 1000))


def _cell(value, header: str) -> tuple[str, str]:
    """(class, html) of a table cell: times as <time>, numbers right-aligned, booleans as yes and no, long words
    breakable."""
    if value is not None and not isinstance(value, bool) and isinstance(value, int) and _is_time(header):
        return "num", _time(value)
    if isinstance(value, bool):
        return "", "yes" if value else "no"
    if isinstance(value, (int, float)):
        return "num", _e(value)
    if isinstance(value, list) and all(isinstance(v, str) for v in value):
        return "", _breakable(", ".join(value))
    if isinstance(value, (list, dict)):
        return "wide", _e(json.dumps(value, default=str, ensure_ascii=False))
    if header.endswith(("key", "keys", "msg_id", "message_id", "message", "path", "detail", "hex", "problems")):
        return "wide", _e(value)  # a column wide enough to break its words anywhere (td.wide)
    return "", _breakable(value)


_LONG_WORD = 16  # a word longer than this (a 127-character topic, a unique key) may break inside


def _breakable(value) -> str:
    """Escaped text whose long words may wrap (a <wbr> every few characters inside them), so a table of topics
    and keys fits the page without breaking short words ("broker-a", "committed") anywhere."""
    out = []
    for token in re.split(r"(\s+)", "" if value is None else str(value)):
        if len(token) > _LONG_WORD:
            out.append("<wbr>".join(_e(token[i:i + 8]) for i in range(0, len(token), 8)))
        else:
            out.append(_e(token))
    return "".join(out)


def _is_time(header: str) -> bool:
    h = header.lower().replace(" ", "_")
    return is_time_column(h) or h in ("first_time", "last_time")


def _html_table(header: list[str], rows: list[list], numeric: set[int] = frozenset(), raw: set[int] = frozenset(),
                cls: str = "") -> str:
    """A table in a box that scrolls sideways inside the page when it must; ``raw`` columns hold html already."""
    head = "".join(f"<th>{_e(h)}</th>" for h in header)
    body = []
    for r in rows:
        cells = []
        for i, v in enumerate(r):
            if i in raw:
                cells.append(f"<td>{v}</td>")
                continue
            klass, text = _cell(v, header[i])
            if i in numeric:
                klass = "num"
            if header[i] == "severity":
                klass = _e(v)
            cells.append(f"<td{f' class={chr(39)}{klass}{chr(39)}' if klass else ''}>{text}</td>")
        body.append("<tr>" + "".join(cells) + "</tr>")
    return f"<div class='scroll'><table class='{cls}'><tr>{head}</tr>{''.join(body)}</table></div>"


def _anchor(name: str) -> str:
    return "broker-" + re.sub(r"[^A-Za-z0-9_-]", "_", name)


def _fleet(brokers: list[dict]) -> str:
    """One row per broker, the most serious first past :data:`_ROWS` brokers (a fleet of hundreds: the rest are
    counted by level, and summary.json has every one).  With a state (audit --state), the brokers whose verdict
    changed since the last run come first, and a column says what changed."""
    with_state = any("since_last_run" in b for b in brokers)

    def changed(b: dict) -> bool:
        return bool((b.get("since_last_run") or {}).get("changed"))

    ranked = sorted(brokers, key=lambda b: _LEVEL_ORDER.index(b["verdict"]["level"])) if len(brokers) > _ROWS \
        else brokers
    if with_state:
        ranked = sorted(ranked, key=lambda b: not changed(b))
    shown, hidden = ranked[:_ROWS], ranked[_ROWS:]
    rows = []
    for b in shown:
        v = b["verdict"]
        lost = v["lost"]
        row = [f"<a href='#{_anchor(b['name'])}'>{_e(b['name'])}</a>",
               f"<span class='badge {v['level']}'>{_e(v['banner'])}</span>", _e(v["headline"]),
               f"{lost['damaged'] + lost['destroyed']:,} / {lost['dropped']:,}", f"{v['kept_damaged']:,}",
               f"{lost['unindexed']:,}"]
        if with_state:
            since = b.get("since_last_run") or {}
            row.append("<strong>" + _e("; ".join(since["changes"])) + "</strong>" if changed(b)
                       else "first run with this state" if since and since.get("previous_run_id") is None
                       else "no change" if since else "")
        rows.append(row)
    rest: dict[str, int] = {}  # the hidden brokers by banner, the most serious first
    for b in hidden:
        rest[b["verdict"]["banner"]] = rest.get(b["verdict"]["banner"], 0) + 1
    note = (f" <span class='muted'>(the {_ROWS} most serious of {len(brokers):,}; not shown: "
            f"{_e(', '.join(f'{n:,} {banner}' for banner, n in rest.items()))}; summary.json has them all)</span>"
            if hidden else "")
    headers = ["broker", "verdict", "headline", "lost: damaged / dropped", "kept, damaged", "in no consume queue"]
    if with_state:
        headers.append("since the last run")
    return f"<h2 id='fleet'>Fleet{note}</h2>" + _html_table(headers, rows, raw=set(range(len(headers))), cls="fleet")


def _first_screen(b: dict, out: Location, src: Location, *, top_banner: bool) -> str:
    v, rec = b["verdict"], b.get("recovery")
    name = b["name"]
    ident = " id='verdict'" if top_banner else ""
    parts = [f"<section class='broker' id='{_anchor(name)}'>",
             f"<div class='banner {v['level']}'{ident}><span class='word'>{_e(v['banner'])}</span>"
             f"{_e(v['headline'])}</div>"]
    facts = []
    if v["will_start"] is None:
        facts.append(("Will it start?", "unknown: the audit could not predict its recovery (see "
                                        f"<code>{the_check('audit_failed').id}</code> below)"))
    elif v["will_start"]:
        facts.append(("Will it start?", f"yes ({_e(rec['mode'])} recovery)"))
    else:
        why = "".join(f"<li>{_e(p)}</li>" for p in v["why_not"])
        first = next((a for a in v["actions"] if a["kind"] == "will_not_start"), None)
        todo = "the first action below" if first is not None else _md(the_check("start_blocker").action)
        facts.append(("Will it start?", f"<strong>NO</strong><ul>{why}</ul>What to do: {todo}"))
    if rec is not None:
        end = rec["predicted_max_physical_offset"]
        if v["cut"]:
            c = v["cut"]
            facts.append(("Where recovery cuts", f"physical offset <strong>{c['physical_offset']:,}</strong>: segment "
                                                 f"{_e(c['segment'])} at byte {c['file_position']:,} "
                                                 f"({_e(c['kind'])}); everything after it is dropped"))
        else:
            facts.append(("Where recovery cuts", f"nowhere: the log is kept whole, to physical offset {end:,}"))
    lost_text = _e(lost_words(v)) + (_keys_words(src, name, resend.LOST_STATES) if resend.lost_count(v["lost"]) else "")
    facts.append(("Messages lost", lost_text))
    kept = kept_damaged_words(v)
    if kept:
        facts.append(("Kept, damaged", _e(kept) + _keys_words(src, name, ("kept_damaged",))))
    if rec is not None:
        facts.append(("At risk if restarted now", "<ul>" + "".join(f"<li>{_e(r)}</li>" for r in v["at_risk"])
                      + "</ul>" if v["at_risk"] else "nothing: recovery truncates and deletes nothing"))
        safe = v["safe_before"]
        facts.append(("Safe", f"every byte of the log before physical offset <strong>{safe:,}</strong>"
                      + (" (all of it)" if safe == rec["predicted_max_physical_offset"] and not v["cut"] else "")))
    since = _since_words(b)
    if since is not None:
        facts.append(("Since the last run", since))
    parts.append("<dl class='facts'>" + "".join(f"<dt>{k}</dt><dd>{val}</dd>" for k, val in facts) + "</dl>")
    parts.append("<h3>Do first</h3><ol class='actions'>" + "".join(
        f"<li>{_md(a['text'])}" + (f"<pre class='command'>{_command(a['command'])}</pre>" if a.get("command") else "")
        + "</li>" for a in v["actions"]) + "</ol>")
    parts.append(_resend_section(b, out, src))
    parts.append("</section>")
    return "".join(parts)


def _since_words(b: dict) -> str | None:
    """What changed since the state's last run (audit --state: summary.json's ``since_last_run``), as html; None
    without a state."""
    since = b.get("since_last_run")
    if since is None:
        return None
    if since["previous_run_id"] is None:
        return "the first run with this state: nothing to compare with yet"
    files = since["files"]
    counted = ", ".join(f"{files[k]:,} {w}" for k, w in (
        ("grown", "grown"), ("new", "new"), ("changed", "changed in place"), ("rewritten", "rewritten"),
        ("disappeared", "gone")) if files[k])
    head = f"compared with run {_e(since['previous_run_id'])}: " + (
        "<strong>changed</strong>" if since["changed"] else "no change in the verdict") + \
        (f" (files: {_e(counted)})" if counted else " (every file as it was)")
    return head + ("<ul>" + "".join(f"<li>{_e(c)}</li>" for c in since["changes"]) + "</ul>"
                   if since["changes"] else "")


def _are(n: int) -> str:
    return "is" if n == 1 else "are"


def _command(command: str) -> str:
    """A command as html that wraps between its arguments only (a line never breaks inside '--explain'), and
    copies as the command."""
    import shlex

    try:
        words = [shlex.quote(w) for w in shlex.split(command)]
    except ValueError:  # not shell words: shown as it is
        return _e(command)
    return " ".join(f"<span class='arg'>{_e(w)}</span>" for w in words)


def _keys_words(src: Location, broker: str, states: tuple[str, ...], limit: int = 5) -> str:
    """The first keys and unique keys of the broker's messages to re-send in ``states``, each list named (a KEYS
    entry and a UNIQ_KEY are looked up differently: ``query --key`` and ``--uniq-key``), as html ("" for none)."""
    from runtime.output import out_join

    keys, uniq = [], []
    for r in resend.first_rows(out_join(src, "tables", resend.NAME), broker, 50, states):
        keys += [k for k in r["keys"] or [] if k not in keys]
        if r["uniq_key"] and r["uniq_key"] not in uniq:
            uniq.append(r["uniq_key"])
    return "".join(f"; {label}: {', '.join(f'<code>{_e(k)}</code>' for k in found[:limit])}"
                   + (", ..." if len(found) > limit else "")
                   for label, found in (("keys", keys), ("unique keys", uniq)) if found)


def _resend_section(b: dict, out: Location, src: Location) -> str:
    name, v = b["name"], b["verdict"]
    total = v["to_resend"]
    from runtime.output import out_join

    path = out_join(src, "tables", resend.NAME)
    system = (f"<div class='muted'>{_e(plural(v['system_records'], 'record'))} of system topics left out: the "
              "broker's own bookkeeping (transaction op records, POP checkpoints and acks...), which nobody re-sends "
              "(tables/resend has them, <code>system</code> = true)</div>") if v["system_records"] else ""
    if not total:
        return f"<h3>Messages to re-send</h3><p class='muted'>none</p>{system}"
    rows = resend.first_rows(path, name, _RESEND_ROWS)
    note = f" (first {len(rows)} of {total:,})" if total > len(rows) else ""
    table = _html_table(
        ["state", "topic", "queue", "queue offset", "physical offset", "keys", "unique key", "store time"],
        [[r["state"] + (f" ({r['damage']})" if r["damage"] else ""), r["topic"], r["queue_id"], r["queue_offset"],
          r["physical_offset"], " ".join(r["keys"] or []), r["uniq_key"], r["store_timestamp"]] for r in rows],
        numeric={2, 3, 4})
    return (f"<h3>Messages to re-send: {total:,}{note}</h3>{table}<div>Every one, as Parquet: "
            f"<a href='tables/{resend.NAME}/'>tables/{resend.NAME}/</a> (filter <code>broker = "
            f"'{_e(name)}'</code>)</div>{system}" + _commands(b, out, path))


def _commands(b: dict, out: Location, path: Location) -> str:
    """The commands that copy the lost messages out of the dump (and into a fresh store), as they run pasted."""
    from runtime.cli import printed_command

    def command(argv: list[str]) -> str:
        return printed_command(argv[0], argv[1:])

    name, v = b["name"], b["verdict"]
    store = f"{name}={b['path']}"
    lines = []
    if v["lost"]["dropped"]:
        first = resend.first_offset(path, name, "dropped")
        target = resend.folder(out, name)
        lines += [f"# the {plural(v['lost']['dropped'], 'dropped message')} {_are(v['lost']['dropped'])} still in the "
                  "dump: copy them out before the restart overwrites them",
                  command(["extract", "--store", store, "--walk", "salvage", "--physical-offsets", f"{first}..",
                           "--out", target.as_typed]),
                  "# then re-produce them from that table, or write them into a fresh store a broker can serve",
                  command(["replay", "--input", target.as_typed, "--out", target.suffixed("-store").as_typed])]
    for q in resend.unindexed_queues(path, name)[:5] if v["lost"]["unindexed"] else ():
        target = resend.folder(out, f"{name}-{q['topic']}-{q['queue_id']}").as_typed
        lines += [f"# {plural(q['count'], 'message')} of {q['topic']}/{q['queue_id']} in no consume queue"
                  + ("" if q["count"] == q["last"] - q["first"] + 1 else " (not contiguous: the range below holds "
                     "kept messages too)"),
                  command(["extract", "--store", store, "--topic", q["topic"], "--queue", str(q["queue_id"]),
                           "--queue-offsets", f"{q['first']}..{q['last']}", "--out", target])]
    damaged = v["lost"]["damaged"] + v["lost"]["destroyed"] + v["kept_damaged"]
    if damaged:
        lines.append(f"# the {plural(damaged, 'damaged message')} cannot be copied out (their bytes are damaged): "
                     f"{'its producer' if damaged == 1 else 'their producers'} must re-send "
                     f"{'it' if damaged == 1 else 'them'}, found by the keys in the table, or where a record kept none "
                     "by its topic, queue, queue offset and store time")
    undispatched = next((a for a in v["actions"] if a["kind"] == "will_not_start" and v["lost"]["undispatched"]
                         and a.get("command")), None)
    if undispatched is not None:
        lines += [f"# the {plural(v['lost']['undispatched'], 'message')} never dispatched: copy them out, then "
                  "re-send them once the broker runs (the actions above)", undispatched["command"]]
    shown = [_e(line) if line.startswith("#") else _command(line) for line in lines]
    return "<pre class='command'>" + "\n".join(shown) + "</pre>" if lines else ""


_GROUP_HEAD = ("severity", "check", "where", "count", "first .. last position, store time")


def _groups_section(groups: list, top: int) -> str:
    shown = groups[:top]
    note = f" <span class='muted'>(first {top} of {len(groups):,})</span>" if len(groups) > top else ""
    parts = [f"<h2 id='findings'>Findings by cause: {plural(len(groups), 'group')}{note}</h2>",
             "<p class='muted'>One row per check and place (file or queue; per-message findings one row per "
             "broker), most consequential first; open a row for its samples and what to do.  <a href='findings/'>"
             "findings/</a> has every finding, one row each.</p>"]
    if not shown:
        return "".join(parts) + "<p>No findings.</p>"
    parts.append("<div class='ghead'>" + "".join(f"<span>{h}</span>" for h in _GROUP_HEAD) + "</div>")
    current = None
    for g in shown:
        if g.consequence != current:
            current = g.consequence
            parts.append(f"<h3>{_e(_CONSEQUENCE_TITLES[current])}</h3>")
        parts.append(_group(g))
    return "".join(parts)


_CONSEQUENCE_TITLES = {
    Consequence.WILL_NOT_START: "The broker will not start",
    Consequence.DATA_LOST: "Data lost or damaged",  # a damaged message the broker keeps is here too
    Consequence.DATA_AT_RISK: "Data at risk",
    Consequence.QUERIES_WRONG: "Queries give wrong or no answers",
    Consequence.CONSUMERS_AFFECTED: "Consumers affected",
    Consequence.UNKNOWN: "Not known: an input the audit needs is missing",
    Consequence.COSMETIC: "Cosmetic (the broker repairs or tolerates it)",
}


def _group(g) -> str:
    where = _e(g.broker) + (f" &middot; {_e(g.place)}" if g.place else "")
    if g.first_offset is not None:
        span = (f"offset {g.first_offset:,}" if g.first_offset == g.last_offset
                else f"offsets {g.first_offset:,}..{g.last_offset:,}")
    elif g.first_position is not None:
        span = (f"byte {g.first_position:,}" if g.first_position == g.last_position
                else f"bytes {g.first_position:,}..{g.last_position:,}")
    elif not g.place and g.first_file is not None:  # one row for a broker's files (segments deleted): their range
        span = _e(g.first_file) if g.first_file == g.last_file else f"{_e(g.first_file)} .. {_e(g.last_file)}"
    else:
        span = ""
    if g.first_time is not None:
        span += f"<br>{_time(g.first_time)}" + (f" .. {_time(g.last_time)}" if g.last_time not in (None, g.first_time)
                                                 else "")
    samples = _html_table(
        ["file", "position", "physical offset", "topic", "queue", "queue offset", "message"],
        [[s["file"], s["file_position"], s["physical_offset"], s["topic"], s["queue_id"], s["queue_offset"],
          s["message"]] for s in g.samples], numeric={1, 2, 4, 5})
    more = f"<div class='muted'>first {len(g.samples)} of {g.count:,}</div>" if g.count > len(g.samples) else ""
    return (f"<details class='group'><summary>"
            f"<span class='{g.severity.label}'>{g.severity.label}</span><span><code>{_e(g.check)}</code></span>"
            f"<span>{where}</span><span class='num'>{g.count:,}</span><span>{span}</span></summary>"
            f"<div><strong>What to do:</strong> {_md(g.action)}{samples}{more}</div></details>")


def _summary_section(section, brokers: list[dict]) -> str:
    """A family's section of summary.json's brokers (contract.SummaryView): a row per broker that has one."""
    rows = [r for r in (section.row(b) for b in brokers) if r is not None]
    if not rows and not section.always:
        return ""
    kinds = [kind for _, kind in section.columns]
    drawn = [[_summary_cell(kind, v) for kind, v in zip(kinds, r)] for r in rows]
    anchor = f" id='{_e(section.anchor)}'" if section.anchor else ""
    note = f"<p class='muted'>{html.escape(section.note, quote=False)}</p>" if section.note else ""
    return f"<h2{anchor}>{_e(section.title)}</h2>" + _html_table(
        [label for label, _ in section.columns], drawn, numeric={i for i, k in enumerate(kinds) if k == "number"},
        raw={i for i, k in enumerate(kinds) if k in ("time", "time_counts")}) + note


def _summary_cell(kind: str, value):
    """A summary section's cell: store times drawn as <time> (html), the rest as _html_table draws it."""
    if kind == "time":
        return _time(value)
    if kind == "time_counts":
        return "<br>".join(f"{_time(ms)} &times; {n:,}" for ms, n in value) or "none"
    return value


def _per_check_section(per_check: dict) -> str:
    from .findings import Severity

    rows = sorted(([v["severity"], k, v["count"]] for k, v in per_check.items()),
                  key=lambda r: (Severity.of(r[0]), r[1]))
    return ("<h2>Findings per check</h2><details><summary>counts per check and severity</summary>"
            + _html_table(["severity", "check", "count"], rows, numeric={2}) + "</details>")


def _missing_inputs(groups: list) -> dict[str, set[str]]:
    """broker -> the config files the audit found missing or unreadable there."""
    missing = {c.id for c in with_role("input_missing")}
    out: dict[str, set[str]] = {}
    for g in groups:
        if g.check in missing and g.file:
            out.setdefault(g.broker, set()).add(g.file)
    return out


def _shown_cell(column: str, value) -> tuple[str, str]:
    """(class, html) of a detail table's cell: moments as <time>, ``*_ms`` spans in words, numbers right-aligned."""
    number = value is not None and not isinstance(value, bool) and isinstance(value, (int, float))
    if number and is_time_column(column):
        return "num", _time(value)
    if number and column.endswith("_ms"):
        return "num", f"<span title='{int(value)} ms'>{_e(format_duration(value))}</span>"
    if column == "broker":  # a short name, never broken at its hyphen
        return "nowrap", _e(value)
    return _cell(value, column)


def _table_section(table: pa.Table, view, name: str, brokers: list[str], missing: dict[str, set[str]]) -> str:
    """A detail table as its family's view (contract.TableView) shows it: its columns (tables/<name>/ keeps every
    column, in ms) under words, the first rows; what an empty table means, or that it is unknown where the input
    it needs is missing."""
    heading = view.title
    written = isinstance(table, WrittenTable)  # its family wrote it a part at a time: only its head is read
    total, first = (table.rows, table.head(_ROWS)) if written else (table.num_rows, table.slice(0, _ROWS))
    shown = [c for c in (view.columns or [(c, c) for c in first.column_names if not c.startswith("_")])
             if c[0] in first.column_names]
    if len(brokers) > 1:
        shown = [("broker", "broker")] + [c for c in shown if c[0] != "broker"]
    note = f" <span class='muted'>(first {_ROWS} of {total:,}: tables/{_e(name)}/ has them all)</span>" \
        if total > _ROWS else ""
    need = view.needs
    unknown = [b for b in brokers if need in missing.get(b, ())] if need else []
    what = f"unknown ({need.split('/')[-1]} missing or unreadable)" if need else ""
    if not total:
        text = what if unknown and len(unknown) == len(brokers) else view.empty
        if unknown and len(unknown) < len(brokers):
            text += f"; {', '.join(unknown)}: {what}"
        return f"<h2 id='{_e(name)}'>{_e(heading)}</h2><p class='muted'>{_e(text)}</p>"
    head = "".join(f"<th>{_e(label)}</th>" for _, label in shown)
    body = []
    for r in first.to_pylist():
        cells = [_shown_cell(col, r[col]) for col, _ in shown]
        body.append("<tr>" + "".join(f"<td class='{k}'>{v}</td>" if k else f"<td>{v}</td>" for k, v in cells)
                    + "</tr>")
    after = f"<p class='muted'>{_e(', '.join(unknown))}: {_e(what)}</p>" if unknown else ""
    return (f"<h2 id='{_e(name)}'>{_e(heading)}{note}</h2><div class='scroll'><table class='detail'><tr>{head}</tr>"
            f"{''.join(body)}</table></div>{after}")


# ---------------------------------------------------------------------------------------------------------
# Plots


def _png(fig) -> str:
    buf = io.BytesIO()
    # labels fitted inside the figure as it draws: bbox_inches="tight" drew every figure twice to measure it first
    # (a fleet's 64 labelled bars took 0.15 s more a figure)
    fig.set_layout_engine("tight")
    fig.savefig(buf, format="png", dpi=90)
    import matplotlib.pyplot as plt

    plt.close(fig)
    return base64.b64encode(buf.getvalue()).decode("ascii")


def _plots(ctx, tables: dict[str, pa.Table], families: list) -> list[tuple[str, str]]:
    """(heading, PNG) of every plot the families declare (contract.Plot), in their order, where they have data."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    plots = []
    for plot in sorted((p for f in families for p in f.plots), key=lambda p: p.order):
        drawn = plot.draw(ctx, tables, plt)
        if drawn is not None:
            heading, fig = drawn
            plots.append((heading, _png(fig)))
    return plots
