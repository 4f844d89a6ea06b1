"""The notebooks in notebooks/ run top to bottom against a small demo dump, so they never rot.

One small dump is built with tools/demo.py's ``build_dump`` (both brokers, the same injected faults as
``make demo``, small segments so it still has several) and audited twice into a Delta history with the
session's SparkSession: a first run of the check families trend.py compares, then a full run with a later
--as-of (lag grows, so ``jobs.trend`` has something to say).  Each notebook is executed with nbclient in a
kernel of this venv's interpreter (a kernelspec written to a temp dir), with DEMO_OUT pointing at that dump;
the three run concurrently (each kernel starts its own JVM).  The tests check what the notebooks print
against what the project computes independently: store_format's walk, the findings table, jobs.trend.
"""
from __future__ import annotations

import asyncio
import datetime as dt
import importlib.util
import json
import re
import subprocess
import sys

import nbformat
import pyarrow.parquet as pq
import pytest

from jobs import audit, trend
from runtime.session import REPO
from store_format.store import Store

NOTEBOOKS = REPO / "notebooks"
NAMES = ("01_tour_of_a_dump", "02_investigating_an_audit", "03_lag_and_transactions_over_history")
MESSAGES = 2000  # per broker
SEGMENT = 192 << 10  # several segments even for a small dump
KERNEL = "rocketmq-forensics-test"
CELL_TIMEOUT = 600


def _load_demo():
    spec = importlib.util.spec_from_file_location("tools_demo", REPO / "tools" / "demo.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def demo_out(spark, tmp_path_factory):
    """A DEMO_OUT layout (dump/, audit/, history/) as ``make demo`` leaves it after two runs."""
    out = tmp_path_factory.mktemp("demo-out")
    _load_demo().build_dump(out / "dump", MESSAGES, segment_size=SEGMENT)

    def run(target, *extra):
        argv = ["--store", str(out / "dump"), "--out", str(out / target), "--history", str(out / "history"),
                "--no-report", *extra]
        return audit.run(spark, audit.build_parser().parse_args(argv))

    first = run("audit-first", "--checks", "integrity,lag,transactions,retries")
    later = max(b["as_of"] for b in first.summary_data["brokers"]) + 3_600_000
    second = run("audit", "--as-of", str(later))
    # the trend job orders runs by run_time: the two runs, seconds apart at most, must not tie
    started = [dt.datetime.fromisoformat(r.summary_data["run_time"]) for r in (first, second)]
    assert started[0] < started[1]
    return out


@pytest.fixture(scope="module")
def executed(demo_out, tmp_path_factory):
    """name -> (executed notebook, the CellExecutionError or None), all three run concurrently."""
    from nbclient import NotebookClient
    from nbclient.exceptions import CellExecutionError
    from traitlets.config import Config

    jupyter = tmp_path_factory.mktemp("jupyter")
    spec_dir = jupyter / "kernels" / KERNEL
    spec_dir.mkdir(parents=True)
    # the kernel (and so its Spark driver and Python workers) runs this interpreter, never python3 from PATH
    (spec_dir / "kernel.json").write_text(json.dumps({
        "argv": [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"],
        "display_name": "rocketmq-forensics (test)", "language": "python",
        "env": {"PYSPARK_PYTHON": sys.executable, "DEMO_OUT": str(demo_out), "SHUFFLE_PARTITIONS": "2"}}))

    async def execute(name):
        nb = nbformat.read(NOTEBOOKS / f"{name}.ipynb", as_version=4)
        # the kernels talk over Unix sockets: TCP ports chosen for three kernels starting at once (beside their
        # Spark JVMs) can collide ("Address already in use"), and a kernel that cannot bind dies
        ipc = Config({"KernelManager": {"transport": "ipc", "ip": str(jupyter / f"ipc-{name}")}})
        client = NotebookClient(nb, timeout=CELL_TIMEOUT, kernel_name=KERNEL, config=ipc,
                                resources={"metadata": {"path": str(NOTEBOOKS)}})
        try:
            await client.async_execute()
        except CellExecutionError as e:
            return nb, e
        return nb, None

    async def execute_all():
        return await asyncio.gather(*(execute(n) for n in NAMES))

    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("JUPYTER_PATH", str(jupyter))
        results = asyncio.run(execute_all())
    return dict(zip(NAMES, results))


def _ran(executed, name):
    nb, error = executed[name]
    assert error is None, f"{name}.ipynb failed:\n{error}"
    return nb


def _stdout(nb) -> str:
    return "".join(o.get("text", "") for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", [])
                   if o.get("output_type") == "stream" and o.get("name") == "stdout")


def _outputs(nb, kind: str) -> list[str]:
    return [o["data"][kind] for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", [])
            if kind in o.get("data", {})]


def _html_is_only_pandas_tables(nb):
    """Message content is escaped: the only HTML a notebook shows is pandas' own (escaping) table rendering."""
    for html in _outputs(nb, "text/html"):
        assert re.match(r"\s*<div>\s*(<style[^>]*>.*?</style>\s*)?<table border=\"1\" class=\"dataframe\"", html,
                        re.S), html[:300]


def test_notebooks_are_stored_without_outputs():
    for name in NAMES:
        nb = nbformat.read(NOTEBOOKS / f"{name}.ipynb", as_version=4)
        nbformat.validate(nb)
        code = [c for c in nb.cells if c.cell_type == "code"]
        assert code and all(not c.outputs and c.execution_count is None for c in code), name
        assert "build_session" in code[0].source and "DEMO_OUT" in code[0].source, name


@pytest.mark.slow
def test_tour_of_a_dump(executed, demo_out):
    nb = _ran(executed, "01_tour_of_a_dump")
    printed = dict(re.findall(r"messages in (\S+): (\d+)", _stdout(nb)))
    # the Spark source's salvage walk, as the notebook counted it, against store_format's own walk
    expected = {}
    for broker in ("broker-a", "broker-b"):
        walk = Store(demo_out / "dump" / broker / "store").walk_commitlog(decode=False, salvage=True)
        expected[broker] = str(sum(1 for item in walk if getattr(item, "kind", None) == "message"))
    assert printed == expected
    # the consume-queue folder the demo deletes shows up as a queue whose units fall short
    assert re.search(r"\d+ queues; [1-9]\d* with units != messages", _stdout(nb))
    assert len(_outputs(nb, "image/png")) >= 5  # segments, topics, rate, latency, body sizes
    assert "body (repr, first 120 bytes): b" in _stdout(nb)
    _html_is_only_pandas_tables(nb)


@pytest.mark.slow
def test_investigating_an_audit(executed, demo_out):
    nb = _ran(executed, "02_investigating_an_audit")
    out = _stdout(nb)
    rows = pq.read_table(demo_out / "audit" / "findings").num_rows
    summary = json.loads((demo_out / "audit" / "summary.json").read_text())
    assert f"findings: {rows} rows (summary.json: {sum(summary['counts'][s] for s in ('error', 'warning', 'info'))})" \
        in out
    from jobs.audit import terminal

    assert terminal.final_line(summary) in out  # what the audit printed, causes not findings
    assert f"findings: {summary['counts']['error']} error(s)" in out
    # times as ISO-8601 UTC in the tables shown, not epoch ms: the dead-letter table's and the trail's
    html = "".join(_outputs(nb, "text/html"))
    assert re.search(r"<td>20\d\d-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z</td>", html)
    assert not re.search(r"<td>1[67]\d{11}</td>", html)  # no epoch milliseconds left in a shown table
    # the drill-down found the flipped bit of broker-b and dumped the bytes around it
    assert re.search(r"integrity\.bad_crc in broker-b segment \d{20} at byte \d+", out)
    assert "<- the finding's position" in out
    # the retry -> DLQ trail starts at the original topic and ends in a dead-letter topic
    trail = re.search(r"trail: (\d+) records, (.+)", out)
    assert trail and int(trail.group(1)) >= 2
    hops = trail.group(2).split(" -> ")
    assert hops[0].startswith("Topic") and hops[-1].startswith("%DLQ%cg-")
    _html_is_only_pandas_tables(nb)


@pytest.mark.slow
def test_lag_and_transactions_over_history(executed, demo_out, spark):
    nb = _ran(executed, "03_lag_and_transactions_over_history")
    out = _stdout(nb)
    assert "2 audit run(s) in the history" in out
    flagged = re.search(r"last run vs the one before: (.+)", out).group(1)
    # the same counts as the trend job's own summary over the same history
    result = trend.run(spark, trend.build_parser().parse_args(["--history", str(demo_out / "history")]))
    assert result.summary.splitlines()[0].split(": ", 2)[2] == flagged
    assert int(re.search(r"(\d+) growing_lag", flagged).group(1)) > 0  # the later --as-of makes lag older
    assert len(_outputs(nb, "image/png")) >= 2
    _html_is_only_pandas_tables(nb)


@pytest.mark.slow
def test_make_demo_prints_each_brokers_verdict_and_the_findings_grouped(demo_out):
    """What ``make demo`` prints after its audit: what the audit prints (per broker will it start, the cut, the
    messages lost and what to do, with the command; the run in one line counting causes, not findings), then the
    first findings grouped by cause, most consequential first."""
    from jobs.audit import terminal

    summary = json.loads((demo_out / "audit" / "summary.json").read_text())
    text = _load_demo().verdict_text(summary, demo_out / "audit")
    lines = text.splitlines()
    assert terminal.render(summary) in text and terminal.final_line(summary) in lines
    for b in summary["brokers"]:
        v = b["verdict"]
        assert f"{b['name']}: {v['banner']}" in lines
        assert f"  Do first:       {v['actions'][0]['text']}" in lines
    # broker-a's torn tail: recovery cuts there and nothing intact follows; broker-b's flipped bit lies before the
    # segments a normal recovery walks (this small dump has six): kept, but untrustworthy, and a queue lost its
    # consume queue
    a, b = summary["brokers"]
    assert a["verdict"]["actions"][0]["kind"] == "nothing_after_cut" and "FAIL" not in text
    assert "broker-b will start (normal recovery) and keeps all" in b["verdict"]["headline"]
    groups = lines[lines.index(next(x for x in lines if x.startswith("Findings grouped by cause"))) + 1:]
    assert len(groups) == 10 and groups[0].startswith("  [data lost] broker-a recovery.truncation ")
    assert [x for x in groups if "delays.overdue" in x or "transactions.open" in x] == []  # consumers affected: later
    # make demo groups in a process of its own, which has not imported the checks: the same groups, same order
    code = ("import json, sys; from jobs.audit.groups import group_findings; print(json.dumps([[g.check, g.broker, "
            "g.place, g.count, int(g.consequence)] for g in group_findings(sys.argv[1])]))")
    fresh = subprocess.run([sys.executable, "-c", code, str(demo_out / "audit" / "findings")], capture_output=True,
                           text=True, timeout=120, env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(REPO)})
    from jobs.audit.groups import group_findings

    here = [[g.check, g.broker, g.place, g.count, int(g.consequence)]
            for g in group_findings(str(demo_out / "audit" / "findings"))]
    assert json.loads(fresh.stdout) == here, fresh.stderr
