"""The README's commands run as written: in a folder laid out as a fresh checkout leaves it after ``make setup`` and
``make demo`` (``.venv`` -- this test run's -- and ``demo-out/dump``, the demo dump made by the same code, smaller),
every ``.venv/bin/rocketmq-forensics`` line of its shell blocks runs with the exit code and the output it implies,
and its Python example runs as a script, in a process started as a user starts one.  The two ``make`` lines are what
this folder stands for: ``make setup`` made the venv the tests run in, ``make demo``'s dump is built here."""
from __future__ import annotations

import contextlib
import importlib.util
import io
import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from jobs.console import console
from runtime.session import REPO

pytestmark = [pytest.mark.spark, pytest.mark.slow]

README = (REPO / "README.md").read_text(encoding="utf-8")
PROGRAM = ".venv/bin/rocketmq-forensics"


def readme_commands() -> list[list[str]]:
    """Every command line of the README's ``sh`` blocks, as argv (comments dropped)."""
    lines = [line for block in re.findall(r"```sh\n(.*?)```", README, re.S) for line in block.splitlines()
             if line.strip()]
    return [shlex.split(line, comments=True) for line in lines]


@pytest.fixture(scope="module")
def checkout(tmp_path_factory) -> Path:
    """A folder as the README's reader has it: .venv (this run's) and demo-out/dump (the demo's, smaller)."""
    here = tmp_path_factory.mktemp("readme")
    (here / ".venv").symlink_to(Path(sys.executable).parent.parent, target_is_directory=True)
    spec = importlib.util.spec_from_file_location("tools_demo", REPO / "tools" / "demo.py")
    demo = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(demo)
    (here / "demo-out").mkdir()
    # three segments a broker, as the demo's five: broker-b's flipped bit lies where its recovery walks, so it cuts
    demo.build_dump(here / "demo-out" / "dump", 3000, segment_size=512 << 10)
    return here


def test_the_install_is_two_commands():
    [install] = re.findall(r"## Install\n\n```sh\n(.*?)```", README, re.S)
    assert [shlex.split(line, comments=True) for line in install.splitlines()] == [["make", "setup"],
                                                                                    ["make", "demo"]]


def test_every_command_runs_as_written(checkout, spark, monkeypatch):
    """The jobs that start Spark run here, in this test's session (the console's entry point, the README's
    arguments, its working folder); the no-Spark queries run as processes of their own, the program as written."""
    monkeypatch.chdir(checkout)
    commands = [argv for argv in readme_commands() if argv[0] != "make"]
    assert commands and all(argv[0] == PROGRAM for argv in commands), commands
    assert (checkout / PROGRAM).is_file()
    expected = {"audit": 1, "extract": 0, "replay": 0}  # the demo dump has errors: the audit exits 1
    ran = []
    for argv in commands:
        job = argv[1]
        if job == "query":
            proc = subprocess.run(argv, cwd=checkout, capture_output=True, text=True, timeout=300,
                                  env={k: v for k, v in os.environ.items() if k != "PYTHONPATH"})
            ran.append((argv, proc.returncode, proc.stdout))
            continue
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            code = console(argv[1:])
        assert code == expected[job], (argv, out.getvalue())
        ran.append((argv, code, out.getvalue()))
    queries = [(argv, code, out) for argv, code, out in ran if argv[1] == "query"]
    by_key, by_time, explained = queries
    assert by_key[1] == 0 and "ORD0000000005" in by_key[2] and by_key[2].startswith("broker ")
    assert by_time[1] == 0 and len(by_time[2].splitlines()) > 1
    assert explained[1] == 1 and "NEVER_WRITTEN" in explained[2]
    audit_out = [out for argv, _, out in ran if argv[1] == "audit"][0]
    # broker-a's torn tail is a cut, and broker-b's flipped bit (as in the demo)
    assert "broker-a: DATA LOST" in audit_out and "\naudit DATA LOST (2 stores): 2 cuts, " in audit_out
    assert (checkout / "audit-out" / "report.html").is_file() and (checkout / "topic003-1-store" / "commitlog").is_dir()
    _extract_returns_what_the_readme_says(checkout)


def _extract_returns_what_the_readme_says(checkout: Path) -> None:
    """The README's extract copies out what broker-b keeps of Topic003/1 (the queue whose consume queue the demo
    lost): its intact messages before the broker's cut -- the audit's cut -- with no hole; the manifest names the cut
    and the intact messages of the queue past it, which the broker drops and ``--walk salvage`` would copy too."""
    from store_format.store import Store

    manifest = json.loads((checkout / "topic003-1" / "_manifest.json").read_text())
    summary = json.loads((checkout / "audit-out" / "summary.json").read_text())
    [b] = [b for b in summary["brokers"] if b["name"] == "broker-b"]
    audit_cut = {"physical_offset": b["recovery"]["predicted_max_physical_offset"],
                 "segment": b["recovery"]["stop_segment"], "file_position": b["recovery"]["stop_position"],
                 "kind": b["recovery"]["stop_kind"]}
    [broker] = manifest["brokers"]
    assert {k: broker["cut"][k] for k in audit_cut} == audit_cut and audit_cut["kind"] == "BAD_CRC"
    intact = [f.message.physical_offset for f in Store(checkout / "demo-out/dump/broker-b/store").walk_commitlog(
        salvage=True) if getattr(f, "kind", None) == "message" and (f.message.topic, f.message.queue_id) ==
        ("Topic003", 1)]
    kept = [o for o in intact if o < audit_cut["physical_offset"]]
    assert manifest["walk"]["name"] == "kept" and manifest["counts"]["written"] == len(kept) > 0
    assert broker["intact_past_cut"] == len(intact) - len(kept) > 0 and broker["past_cut_written"] == 0
    assert manifest["counts"]["reconciled"] and manifest["holes"]["missing"] == 0


def test_a_job_started_as_a_user_starts_it_prints_no_plan_truncation_warning(checkout):
    """The console command in a process of its own, with the project's Spark configuration: its stderr has the
    progress lines, not Spark's 'Truncated the string representation of a plan' warning, nor the JVM's
    'WARNING: Using incubator modules'."""
    argv = [PROGRAM, "extract", "--store", "demo-out/dump/broker-b/store", "--topic", "Topic003", "--queue", "1",
            "--out", "extract-again"]
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYSPARK_PYTHON")}
    proc = subprocess.run(argv, cwd=checkout, capture_output=True, text=True, timeout=600, env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "select and write" in proc.stderr and "SparkStringUtils" not in proc.stderr
    # nor the JVM's own first line, which no JVM option silences: the console filters the JVM's stderr
    assert "Using incubator modules" not in proc.stderr


def test_the_python_example_runs_as_written(checkout):
    """The README's Python block as a user's script: the venv's Python, no PYTHONPATH, no PYSPARK_PYTHON (the
    block sets it), the demo's working folder.  It prints the queue whose consume queue the demo deleted."""
    [block] = re.findall(r"```python\n(.*?)```", README, re.S)
    (checkout / "example.py").write_text(block)
    env = {k: v for k, v in os.environ.items()
           if k != "PYTHONPATH" and not k.startswith(("PYSPARK_", "SPARK_"))}
    proc = subprocess.run([".venv/bin/python", "example.py"], cwd=checkout, capture_output=True, text=True,
                          timeout=600, env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    rows = [line.split("|")[1:-1] for line in proc.stdout.splitlines() if line.startswith("|")]
    assert [c.strip() for c in rows[0]] == ["topic", "queue_id", "count"]
    assert [[c.strip() for c in r][:2] for r in rows[1:]] == [["Topic003", "1"]]
