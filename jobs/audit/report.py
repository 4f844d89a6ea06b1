"""report.html: the one page a person reads first after an audit.

Self-contained (CSS inline, plots as PNG data URIs drawn with matplotlib's Agg backend, no script), so it
opens offline and survives e-mail.  Every piece of dump content (topics, keys, messages, paths) goes through
``html.escape``.  It is drawn on the driver from what the audit holds there already (the summary, the detail
tables, the scan's per-topic message counts over time); only the top findings are a Spark query.
"""
from __future__ import annotations

import base64
import html
import io
import json
from pathlib import Path

import pyarrow as pa

_ROWS = 200
_TOPICS_PLOTTED = 8
_CSS = """
body{font:14px/1.45 system-ui,-apple-system,Segoe UI,Roboto,sans-serif;margin:24px auto;max-width:1200px;color:#1d2330}
h1{font-size:24px;margin:0 0 4px} h2{font-size:18px;margin:28px 0 8px;border-bottom:1px solid #dde}
.verdict{padding:14px 18px;border-radius:8px;font-size:18px;font-weight:600;margin:14px 0}
.pass{background:#e5f6ea;color:#17622f}.fail{background:#fde8e8;color:#8d1c1c}
table{border-collapse:collapse;width:100%;margin:6px 0 12px;font-size:13px}
th,td{border:1px solid #dde;padding:4px 6px;text-align:left;vertical-align:top}
th{background:#f3f5fa} td.num{text-align:right;font-variant-numeric:tabular-nums}
.error{color:#a11}.warning{color:#a60}.info{color:#357}
.muted{color:#667} img{max-width:100%;border:1px solid #eef} code{font-size:12px}
"""


def write(spark, ctx, summary: dict, tables: dict[str, pa.Table], metrics: pa.Table, out: str, *,
          top: int = 50) -> str:
    counts = summary["counts"]
    parts = [f"<h1>RocketMQ store audit</h1><div class='muted'>{_e(summary['run_time'])} &middot; "
             f"{_e(summary['tool'])} {_e(summary['version'])} &middot; run {_e(summary['run_id'])}</div>"]
    verdict = "FAIL" if counts["error"] else "PASS"
    parts.append(f"<div class='verdict {verdict.lower()}' id='verdict'>{verdict}: {counts['error']} error(s), "
                 f"{counts['warning']} warning(s), {counts['info']} info finding(s) in "
                 f"{len(summary['brokers'])} store(s)</div>")
    parts.append(_recovery_section(summary))
    parts.append(_findings_section(out, top))
    parts.append(_per_check_section(counts["per_check"]))
    parts.append("<h2>Plots</h2>")
    for title, png in _plots(ctx, tables):
        parts.append(f"<h3>{_e(title)}</h3><img alt='{_e(title)}' src='data:image/png;base64,{png}'>")
    for name, title in (("lag", "Consumer lag"), ("transactions", "Transactions"), ("delays", "Delayed messages"),
                        ("dlq", "Dead-letter queues"), ("segments", "Segments")):
        if name in tables:
            parts.append(_table_section(tables[name], title, name))
    parts.append("<h2>Inputs</h2>" + _html_table(
        ["path", "size", "sha256"], [[i["path"], i["size"], i.get("sha256", "")] for i in summary["inputs"][:_ROWS]]))
    page = ("<!DOCTYPE html><html lang='en'><head><meta charset='utf-8'><title>RocketMQ store audit: "
            f"{verdict}</title><style>{_CSS}</style></head><body>{''.join(parts)}</body></html>")
    path = Path(out) / "report.html"
    path.write_text(page, encoding="utf-8")
    return str(path)


def _e(v) -> str:
    return html.escape("" if v is None else str(v), quote=True)


def _html_table(header: list[str], rows: list[list], numeric: set[int] = frozenset()) -> str:
    head = "".join(f"<th>{_e(h)}</th>" for h in header)
    body = []
    for r in rows:
        cells = []
        for i, v in enumerate(r):
            cls = " class='num'" if i in numeric else ""
            if header[i] == "severity":
                cls = f" class='{_e(v)}'"
            cells.append(f"<td{cls}>{_e(v)}</td>")
        body.append("<tr>" + "".join(cells) + "</tr>")
    return f"<table><tr>{head}</tr>{''.join(body)}</table>"


def _recovery_section(summary: dict) -> str:
    rows = []
    for b in summary["brokers"]:
        r = b["recovery"]
        rows.append([b["name"], r["mode"], "yes" if r["broker_will_start"] else "NO",
                     r["predicted_max_physical_offset"], r["stop_segment"], r["stop_kind"], r["messages_lost"],
                     r["cq_units_truncated"], len(r["index_files_deleted"]), "; ".join(r["start_problems"])])
    return "<h2>Recovery prediction</h2>" + _html_table(
        ["broker", "mode", "will start", "recovered end", "stop segment", "stop reason", "messages lost",
         "CQ units truncated", "index files rebuilt", "start problems"], rows, numeric={3, 6, 7, 8})


def _findings_section(out: str, top: int) -> str:
    rows = [[r[c] for c in _TOP_COLUMNS] for r in worst_findings(f"{out}/findings", top)]
    return f"<h2>Worst findings (top {top})</h2>" + _html_table(
        ["severity", "check", "broker", "file", "position", "physical offset", "topic", "queue", "queue offset",
         "message"], [list(r) for r in rows], numeric={4, 5, 7, 8})


_TOP_COLUMNS = ("severity", "check", "broker", "file", "file_position", "physical_offset", "topic", "queue_id",
                "queue_offset", "message")


def worst_findings(path: str, top: int) -> list[dict]:
    """The ``top`` worst findings of a findings folder (by severity, then broker, physical offset, file and
    position; nulls first), read a batch at a time so memory stays bounded whatever their number."""
    import pyarrow.dataset as ds

    from .findings import Severity

    def key(r):  # nulls first, as Spark's ascending order puts them
        return (Severity.of(r["severity"]),) + tuple((r[c] is not None, r[c] if r[c] is not None else "")
                                                     for c in ("broker", "physical_offset", "file", "file_position"))

    best: list[dict] = []
    for batch in ds.dataset(path, format="parquet").to_batches(columns=list(_TOP_COLUMNS)):
        best = sorted(best + batch.to_pylist(), key=key)[:top]
    return best


def _per_check_section(per_check: dict) -> str:
    from .findings import Severity

    rows = sorted(([v["severity"], k, v["count"]] for k, v in per_check.items()),
                  key=lambda r: (Severity.of(r[0]), r[1]))
    return "<h2>Findings per check</h2>" + _html_table(["severity", "check", "count"], rows, numeric={2})


def _table_section(table: pa.Table, title: str, name: str) -> str:
    cols = [c for c in table.column_names if not c.startswith("_")]
    rows = [[json.dumps(r[c], default=str) if isinstance(r[c], (list, dict)) else r[c] for c in cols]
            for r in table.slice(0, _ROWS).to_pylist()]
    total = table.num_rows
    note = f" <span class='muted'>(first {_ROWS} of {total})</span>" if total > _ROWS else ""
    if not rows:
        return f"<h2 id='{_e(name)}'>{_e(title)}</h2><p class='muted'>none</p>"
    return f"<h2 id='{_e(name)}'>{_e(title)}{note}</h2>" + _html_table(cols, rows)


# ---------------------------------------------------------------------------------------------------------
# Plots


def _png(fig) -> str:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=90, bbox_inches="tight")
    import matplotlib.pyplot as plt

    plt.close(fig)
    return base64.b64encode(buf.getvalue()).decode("ascii")


def _plots(ctx, tables: dict[str, pa.Table]) -> list[tuple[str, str]]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    plots = []
    rate = message_rate(ctx)
    if rate is not None:
        unit, counts = rate
        lo = min(t for _, t in counts)
        hi = max(t for _, t in counts)
        width = max(1, -(-(hi - lo + 1) // 60))  # about 60 buckets of whole seconds (or minutes)
        totals: dict[str, int] = {}
        for (topic, _), n in counts.items():
            totals[topic] = totals.get(topic, 0) + n
        busiest = set(sorted(totals, key=lambda t: (-totals[t], t))[:_TOPICS_PLOTTED])
        buckets: dict[str, dict[int, int]] = {}
        for (topic, t), n in counts.items():
            b = buckets.setdefault(topic if topic in busiest else "(other)", {})
            k = (t - lo) // width
            b[k] = b.get(k, 0) + n
        fig, ax = plt.subplots(figsize=(11, 3.6))
        for topic in sorted(buckets):
            pts = sorted(buckets[topic].items())
            ax.plot([b * width * unit for b, _ in pts], [c / (width * unit) for _, c in pts], marker=".",
                    label=topic[:40])
        ax.set_xlabel(f"seconds since first store time ({width * unit:g} s buckets)")
        ax.set_ylabel("messages / s")
        ax.legend(fontsize=7, ncol=2)
        plots.append(("Message rate over time per topic", _png(fig)))

    segs = tables.get("segments")
    if segs is not None and segs.num_rows:
        segs = sorted(segs.to_pylist(), key=lambda s: (s["broker"], s["segment"]))
        fig, ax = plt.subplots(figsize=(11, 0.5 + 0.32 * len(segs)))
        labels = [f"{s['broker']}/{s['segment']}" for s in segs]
        size = [max(s["file_length"] or 0, 1) for s in segs]
        used = [(s["message_bytes"] or 0) / n * 100 for s, n in zip(segs, size)]
        bad = [(s["corrupt_bytes"] or 0) / n * 100 for s, n in zip(segs, size)]
        ax.barh(labels, used, color="#4c8bd6", label="messages")
        ax.barh(labels, bad, left=used, color="#d64c4c", label="corrupt")
        ax.set_xlim(0, 100)
        ax.set_xlabel("% of segment file")
        ax.invert_yaxis()
        ax.legend(fontsize=8)
        plots.append(("Segment fill and damage", _png(fig)))

    lag = tables.get("lag")
    if lag is not None and lag.num_rows:
        per: dict[tuple, int] = {}
        for r in lag.to_pylist():
            per[(r["broker"], r["group"], r["topic"])] = per.get((r["broker"], r["group"], r["topic"]), 0) + r["lag"]
        top = sorted(per.items(), key=lambda kv: -kv[1])[:30]
        fig, ax = plt.subplots(figsize=(11, 0.5 + 0.32 * len(top)))
        ax.barh([f"{g} @ {t} ({b})"[:70] for (b, g, t), _ in top], [n for _, n in top], color="#e0a030")
        ax.set_xlabel("messages not yet consumed")
        ax.invert_yaxis()
        plots.append(("Consumer lag per group", _png(fig)))
    return plots


RATE = pa.schema([("topic", pa.string()), ("unit", pa.int32()), ("time", pa.int64()), ("messages", pa.int64())])
_FINE_SPAN = 7200  # a range spanning at most this many seconds counts per second, others per minute


def rate_counts(rc) -> pa.Table | None:
    """A range's kept messages per topic and second (per minute when the range spans more than two hours)."""
    import numpy as np
    import pyarrow.compute as pc

    m = rc.messages
    kept = rc.column("kept")
    if not kept.any():
        return None
    t = pa.table({"topic": m.column("topic"), "store_timestamp": m.column("store_timestamp")}).filter(pa.array(kept))
    sec = np.floor_divide(t.column("store_timestamp").to_numpy(zero_copy_only=False), 1000)
    unit = 1 if sec.max() - sec.min() <= _FINE_SPAN else 60
    g = pa.table({"topic": t.column("topic"), "time": pa.array(sec // unit)}).group_by(["topic", "time"]).aggregate(
        [("time", "count")])
    return pa.table({"topic": g.column("topic"), "unit": pa.repeat(pa.scalar(unit, pa.int32()), g.num_rows),
                     "time": g.column("time"), "messages": pc.cast(g.column("time_count"), pa.int64())}, schema=RATE)


def message_rate(ctx) -> tuple[int, dict] | None:
    """(seconds per unit, {(topic, time in units): kept messages}) over every range: per second when every range
    counted per second and the whole spans at most two hours, else per minute."""
    t = ctx.partial("report.rate", RATE)
    if not t.num_rows:
        return None
    rows = t.to_pylist()
    fine = all(r["unit"] == 1 for r in rows)
    if fine:
        times = [r["time"] for r in rows]
        fine = max(times) - min(times) <= _FINE_SPAN
    unit = 1 if fine else 60
    counts: dict[tuple, int] = {}
    for r in rows:
        key = (r["topic"], r["time"] * r["unit"] // unit)
        counts[key] = counts.get(key, 0) + r["messages"]
    return unit, counts
