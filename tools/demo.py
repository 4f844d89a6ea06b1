"""make demo: a realistic two-broker dump, audited through spark-submit, with each broker's verdict (what the audit
prints: jobs/audit/terminal.py) and the findings grouped by cause.

The dump (demo-out/dump/, generated once and reused) is written by the project's own StoreWriter from
synthetic traffic (store_format/write/generate.py): 8 topics, per-topic consumer groups that lag behind,
transactions (some left open), delayed messages, send-backs through %RETRY% into %DLQ%, IPv6 producers,
compressed bodies, 16 MiB segments.  Then a few faults are injected with store_format.write.damage:

  broker-a  crashed (abort file, stale checkpoint) and its last record torn (the write never fully landed)
  broker-b  one flipped bit in a record of its middle segment, and one consume-queue folder lost

The audit runs as a user would run it: ``spark-submit --properties-file spark-conf/spark-defaults.conf
jobs/audit/__main__.py --store demo-out/dump --out demo-out/audit --history demo-out/history``: each run appends a
point to the Delta history that ``jobs.trend`` and notebooks/03_lag_and_transactions_over_history.ipynb read.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from runtime.display import plural  # noqa: E402
from store_format.write import damage as D  # noqa: E402
from store_format.write.generate import TrafficConfig, generate_store, progress_line  # noqa: E402
from store_format.store import Store  # noqa: E402
from store_format.write.writer import WriterConfig  # noqa: E402

SEGMENT = 16 << 20


def build_dump(dump: Path, messages: int, segment_size: int = SEGMENT) -> None:
    """The demo dump at ``dump``: two brokers of ``messages`` each, with the faults above (tests build a small
    one with a small ``segment_size``, so it still has several segments)."""
    wcfg = {b: WriterConfig(mappedFileSizeCommitLog=segment_size, brokerName=f"broker-{b}",
                            storeHost=f"10.10.0.{n}:10911") for n, b in enumerate("ab", 1)}
    with tempfile.TemporaryDirectory(dir=dump.parent) as tmp:
        tmp = Path(tmp)
        print(f"demo: generating broker-a ({messages:,} messages)", file=sys.stderr)
        generate_store(tmp / "a", TrafficConfig(messages=messages, seed=1), wcfg["a"], progress=progress_line(),
                       crash=True)
        print(f"demo: generating broker-b ({messages:,} messages)", file=sys.stderr)
        generate_store(tmp / "b", TrafficConfig(messages=messages, seed=2, start_ms=1_700_000_600_000), wcfg["b"],
                       progress=progress_line())
        staging = tmp / "dump"
        staging.mkdir()
        faults = [D.torn_tail(tmp / "a", staging / "broker-a" / "store")]
        frames = [f for f in Store(tmp / "b").walk_commitlog(decode=False) if f.kind == "message"]
        victim = frames[len(frames) // 2]
        faults.append(D.flip_body_bit(tmp / "b", tmp / "b1", physical_offset=victim.physical_offset, bit=3))
        faults.append(D.delete_consume_queue(tmp / "b1", staging / "broker-b" / "store", "Topic003", 1))
        (staging / "FAULTS.txt").write_text("".join(f"{f.describe()}\n" for f in faults))
        staging.rename(dump)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", default=str(REPO / "demo-out"), help="where the dump and the audit go")
    p.add_argument("--messages", type=int, default=150_000, help="messages per broker (default 150,000)")
    p.add_argument("--regenerate", action="store_true", help="write a new dump even if one exists")
    args = p.parse_args(argv)
    out = Path(args.out).resolve()
    out.mkdir(parents=True, exist_ok=True)
    dump = out / "dump"
    if args.regenerate and dump.exists():
        shutil.rmtree(dump)
        shutil.rmtree(out / "history", ignore_errors=True)  # its runs audited the old dump
    if dump.exists():
        print(f"demo: reusing the dump in {dump} (--regenerate for a new one)", file=sys.stderr)
    else:
        build_dump(dump, args.messages)
    print("demo: injected faults:\n  " + (dump / "FAULTS.txt").read_text().strip().replace("\n", "\n  "),
          file=sys.stderr)

    audit_out = out / "audit"
    python = sys.executable
    spark_submit = Path(python).parent / "spark-submit"
    env = {**os.environ, "PYSPARK_PYTHON": python, "PYSPARK_DRIVER_PYTHON": python}
    cmd = [str(spark_submit), "--properties-file", str(REPO / "spark-conf" / "spark-defaults.conf"),
           str(REPO / "jobs" / "audit" / "__main__.py"), "--store", str(dump), "--out", str(audit_out), "--overwrite",
           "--history", str(out / "history")]
    print("demo: " + " ".join(cmd), file=sys.stderr)
    # spark-submit streams the job's progress lines (stderr); its stdout, the verdict, is printed below with the
    # findings grouped by cause
    run = subprocess.run(cmd, env=env, cwd=REPO, stdout=subprocess.PIPE, text=True)
    if run.returncode not in (0, 1):  # 1 = the audit found errors, which the demo dump has on purpose
        print(run.stdout, end="")
        print(f"demo: the audit could not run (exit {run.returncode})", file=sys.stderr)
        return run.returncode
    summary = json.loads((audit_out / "summary.json").read_text())
    print(verdict_text(summary, audit_out))
    from runtime.cli import console_command

    print(f"\nReport:   {audit_out / 'report.html'}\nFindings: {audit_out / 'findings'}\nMetrics:  "
          f"{audit_out / 'metrics'}\nTables:   {audit_out / 'tables'}\nSummary:  {audit_out / 'summary.json'}\n"
          f"History:  {out / 'history'} ({console_command()} trend --history {out / 'history'}; notebooks/)")
    return 0


def verdict_text(summary: dict, audit_out: Path, top: int = 10) -> str:
    """What the demo prints after the audit: what the audit itself prints (per broker the report's first screen
    in words, each action with its command, and the run's line: jobs/audit/terminal.py), then the first findings
    grouped by cause (the report's rows, most consequential first: one row for every message one cut drops, not
    one per message)."""
    from jobs.audit import terminal
    from jobs.audit.groups import group_findings

    lines = ["", terminal.render(summary), ""]
    groups = group_findings(str(audit_out / "findings"))
    total = sum(summary["counts"][s] for s in ("error", "warning", "info"))
    lines.append(f"Findings grouped by cause ({plural(len(groups), 'group')} of {plural(total, 'finding')}; the first "
                 f"{top}):")
    for g in groups[:top]:
        where = f" {g.place}" if g.place else ""
        first = g.samples[0]["message"] if g.samples else ""
        said = first if g.count == 1 else f"{g.count:,} findings, the first: {first}"
        lines.append(f"  [{g.consequence.label}] {g.broker} {g.check}{where}: {said}")
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
