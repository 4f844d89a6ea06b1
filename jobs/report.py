"""report.html: the one page a person reads first after an audit.

Self-contained (CSS inline, plots as PNG data URIs drawn with matplotlib's Agg backend, no script), so it
opens offline and survives e-mail.  Every piece of dump content (topics, keys, messages, paths) goes through
``html.escape``.  Only small aggregates reach the driver: the top findings, per-minute message counts of the
busiest topics, the segment table, and at most ``_ROWS`` rows of each detail table.
"""
from __future__ import annotations

import base64
import html
import io
import json
from pathlib import Path

from pyspark.sql import functions as F

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


def write(spark, ctx, summary: dict, findings_df, metrics_df, out: str, *, top: int = 50) -> str:
    counts = summary["counts"]
    parts = [f"<h1>RocketMQ store audit</h1><div class='muted'>{_e(summary['run_time'])} &middot; "
             f"{_e(summary['tool'])} {_e(summary['version'])} &middot; run {_e(summary['run_id'])}</div>"]
    verdict = "FAIL" if counts["error"] else "PASS"
    parts.append(f"<div class='verdict {verdict.lower()}' id='verdict'>{verdict}: {counts['error']} error(s), "
                 f"{counts['warning']} warning(s), {counts['info']} info finding(s) in "
                 f"{len(summary['brokers'])} store(s)</div>")
    parts.append(_recovery_section(summary))
    parts.append(_findings_section(findings_df, top))
    parts.append(_per_check_section(counts["per_check"]))
    parts.append("<h2>Plots</h2>")
    for title, png in _plots(ctx, out):
        parts.append(f"<h3>{_e(title)}</h3><img alt='{_e(title)}' src='data:image/png;base64,{png}'>")
    for name, title in (("lag", "Consumer lag"), ("transactions", "Transactions"), ("delays", "Delayed messages"),
                        ("dlq", "Dead-letter queues"), ("segments", "Segments")):
        path = Path(out) / "tables" / name
        if path.exists():
            parts.append(_table_section(spark.read.parquet(str(path)), title, name))
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
                     r["damaged_messages_lost"], r["intact_messages_lost"], r["unframed_bytes_lost"],
                     r["cq_units_truncated"], len(r["index_files_deleted"]), "; ".join(r["start_problems"])])
    return "<h2>Recovery prediction</h2>" + _html_table(
        ["broker", "mode", "will start", "recovered end", "stop segment", "stop reason", "messages lost",
         "of which damaged", "of which intact", "unframed bytes lost", "CQ units truncated", "index files rebuilt",
         "start problems"], rows, numeric={3, 6, 7, 8, 9, 10, 11})


def _findings_section(findings_df, top: int) -> str:
    order = F.when(F.col("severity") == "error", 0).when(F.col("severity") == "warning", 1).otherwise(2)
    rows = (findings_df.orderBy(order, "broker", "physical_offset", "file", "file_position")
            .select("severity", "check", "broker", "file", "file_position", "physical_offset", "topic", "queue_id",
                    "queue_offset", "message").limit(top).collect())
    return f"<h2>Worst findings (top {top})</h2>" + _html_table(
        ["severity", "check", "broker", "file", "position", "physical offset", "topic", "queue", "queue offset",
         "message"], [list(r) for r in rows], numeric={4, 5, 7, 8})


def _per_check_section(per_check: dict) -> str:
    rows = sorted(([v["severity"], k, v["count"]] for k, v in per_check.items()),
                  key=lambda r: ({"error": 0, "warning": 1}.get(r[0], 2), r[1]))
    return "<h2>Findings per check</h2>" + _html_table(["severity", "check", "count"], rows, numeric={2})


def _table_section(df, title: str, name: str) -> str:
    cols = [c for c in df.columns if not c.startswith("_")]
    rows = [[json.dumps(v, default=str) if isinstance(v, (list, dict)) else v for v in r]
            for r in df.limit(_ROWS).collect()]
    total = df.count()
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


def _plots(ctx, out: str) -> list[tuple[str, str]]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    plots = []
    m = ctx.messages.where(F.col("kept"))
    span = m.agg(F.min("store_timestamp").alias("lo"), F.max("store_timestamp").alias("hi")).first()
    if span["lo"] is not None:
        width = max(1000, -(-(span["hi"] - span["lo"] + 1) // 60))  # about 60 buckets, at least a second
        busiest = [r["topic"] for r in m.groupBy("topic").count().orderBy(F.desc("count"))
                   .limit(_TOPICS_PLOTTED).collect()]
        rate = (m.withColumn("t", F.when(F.col("topic").isin(*busiest), F.col("topic")).otherwise("(other)"))
                .groupBy("t", ((F.col("store_timestamp") - span["lo"]) / width).cast("long").alias("b"))
                .count().collect())
        fig, ax = plt.subplots(figsize=(11, 3.6))
        for topic in sorted({r["t"] for r in rate}):
            pts = sorted((r["b"], r["count"]) for r in rate if r["t"] == topic)
            ax.plot([(b * width) / 1000 for b, _ in pts], [c / (width / 1000) for _, c in pts], marker=".",
                    label=topic[:40])
        ax.set_xlabel(f"seconds since first store time ({width / 1000:g} s buckets)")
        ax.set_ylabel("messages / s")
        ax.legend(fontsize=7, ncol=2)
        plots.append(("Message rate over time per topic", _png(fig)))

    seg_path = Path(out) / "tables" / "segments"
    if seg_path.exists():
        segs = ctx.spark.read.parquet(str(seg_path)).orderBy("broker", "segment").collect()
        if segs:
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

    lag_path = Path(out) / "tables" / "lag"
    if lag_path.exists():
        lag = (ctx.spark.read.parquet(str(lag_path)).groupBy("broker", "group", "topic")
               .agg(F.sum("lag").alias("lag")).orderBy(F.desc("lag")).limit(30).collect())
        if lag:
            fig, ax = plt.subplots(figsize=(11, 0.5 + 0.32 * len(lag)))
            ax.barh([f"{r['group']} @ {r['topic']} ({r['broker']})"[:70] for r in lag], [r["lag"] for r in lag],
                    color="#e0a030")
            ax.set_xlabel("messages not yet consumed")
            ax.invert_yaxis()
            plots.append(("Consumer lag per group", _png(fig)))
    return plots
