"""Claim, then commit, end to end (issue 33): real job processes, driven by their progress lines, never by sleeps.

A run is started with its stderr on a pipe; the test waits for a given progress line and then starts a second run
on the same output, sends SIGINT or SIGTERM, or changes an input file.  In every case the previous output and the
history are either unchanged or hold the complete new run, never a part of it; a second run on a claimed output
is refused naming the first; a run that fails chain of custody commits nothing.
"""
from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from .conftest import fixture_store

REPO = Path(__file__).resolve().parent.parent
pytestmark = [pytest.mark.slow, pytest.mark.spark]  # job processes that start Spark


def _env() -> dict:
    env = dict(os.environ)
    env["PYSPARK_PYTHON"] = sys.executable
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
    return env


class Job:
    """A job process whose stderr lines are collected; :meth:`wait_for` blocks until a line holds a text.
    ``hold_at``: the job is held at the first stderr line matching that pattern until :meth:`release`
    (tests/support/paused.py), so that what the test does there cannot race the job."""

    def __init__(self, job: str, argv: list[str], hold_at: str | None = None):
        module = "jobs.audit" if job == "audit" else f"jobs.{job}"
        run = [sys.executable, "-m", module] if hold_at is None else [
            sys.executable, str(REPO / "tests" / "support" / "paused.py"), "--at", hold_at, "--then", "stdin", "--",
            module]
        self.proc = subprocess.Popen([*run, *argv], cwd=REPO, env=_env(), stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        self.lines: list[str] = []
        self._cond = threading.Condition()
        self._done = False
        self._out: list[str] = []
        threading.Thread(target=self._read, daemon=True).start()
        threading.Thread(target=lambda: self._out.append(self.proc.stdout.read()), daemon=True).start()

    def _read(self):
        for line in self.proc.stderr:
            with self._cond:
                self.lines.append(line)
                self._cond.notify_all()
        with self._cond:
            self._done = True
            self._cond.notify_all()

    def wait_for(self, text: str, timeout: float = 300) -> bool:
        """True once a line holds ``text``; False when the process ended without printing it."""
        with self._cond:
            ok = self._cond.wait_for(lambda: self._done or any(text in line for line in self.lines), timeout)
            assert ok, f"timed out waiting for {text!r}:\n{self.stderr}"
            return any(text in line for line in self.lines)

    def release(self) -> None:
        """A job held at its ``hold_at`` line goes on."""
        self.proc.stdin.write("go\n")
        self.proc.stdin.flush()

    def finish(self, timeout: float = 300) -> int:
        code = self.proc.wait(timeout)
        with self._cond:
            self._cond.wait_for(lambda: self._done, 30)
        return code

    @property
    def stderr(self) -> str:
        return "".join(self.lines)


def _claim(out: Path) -> dict:
    with open(out.parent / f".{out.name}.rocketmq-forensics" / "claim.json") as f:
        return json.load(f)


def _summary(out: Path) -> dict:
    return json.loads((out / "summary.json").read_text())


def _history_runs(history: Path) -> dict[str, dict]:
    """run id -> {findings, metrics: rows of the run in each table; listed: its row as readers see it (in the runs
    table, or a committed run not listed there yet: runtime/history.py committed_runs)}."""
    from deltalake import DeltaTable

    from runtime.history import committed_runs

    runs: dict[str, dict] = {}
    for table in ("findings", "metrics"):
        if not (history / table / "_delta_log").is_dir():
            continue
        for rid in DeltaTable(str(history / table)).to_pyarrow_table(columns=["run_id"]).column("run_id").to_pylist():
            runs.setdefault(rid, {"findings": 0, "metrics": 0, "listed": None})[table] += 1
    for r in committed_runs(str(history)).to_pylist():
        runs.setdefault(r["run_id"], {"findings": 0, "metrics": 0})["listed"] = r
    return runs


def _assert_whole(out: Path, history: Path, before: str, new: str | None, *, only: bool = True,
                  previous: str | None = None) -> str:
    """The output holds one complete run (the previous one, or the new one), its history lists exactly the runs
    whose findings and metrics it holds in full, the new run iff the output holds it; returns the run the output
    holds.  ``before``: the baseline's run; ``previous``: the run the output held when the new one started (an
    earlier case's run when its signal came after its commit point), ``before`` unless given."""
    summary = _summary(out)
    assert summary["run_id"] in (previous or before, new)
    assert (out / "findings" / "_SUCCESS").exists() and (out / "report.html").exists()
    mark = json.loads((out / "_ROCKETMQ_FORENSICS").read_text())
    assert mark["state"] == "committed" and mark["run_id"] == summary["run_id"]
    runs = _history_runs(history)
    listed = {rid: r for rid, r in runs.items() if r.get("listed")}
    assert before in listed
    for rid, r in listed.items():  # a listed run is whole
        assert (r["findings"], r["metrics"]) == (r["listed"]["findings"], r["listed"]["metrics"]), (rid, r)
    if only:  # (earlier tests of the module may have committed whole runs of their own)
        assert set(listed) - _LISTED_EARLIER <= {before, new}
    if new is not None:
        assert (new in listed) == (summary["run_id"] == new), (sorted(listed), summary["run_id"])
    return summary["run_id"]


_LISTED_EARLIER: set[str] = set()


def _staging(out: Path) -> list[Path]:
    control = out.parent / f".{out.name}.rocketmq-forensics"
    return sorted(control.glob("staging-*")) if control.is_dir() else []


@pytest.fixture(scope="module")
def store(tmp_path_factory) -> Path:
    dest = tmp_path_factory.mktemp("dump") / "store"
    shutil.copytree(fixture_store("basic"), dest)
    return dest


@pytest.fixture(scope="module")
def baseline(store, tmp_path_factory):
    """One committed audit, with a history of one run: what every later run must leave whole."""
    base = tmp_path_factory.mktemp("runs")
    out, history = base / "out", base / "history"
    job = Job("audit", ["--store", f"b1={store}", "--out", str(out), "--history", str(history)])
    assert job.finish() in (0, 1), job.stderr
    return out, history, _summary(out)["run_id"]


def test_two_audits_on_one_output_the_second_is_refused_naming_the_first(store, tmp_path):
    out = tmp_path / "out"
    # the first run holds its claim from before its "store(s)" line, and is held there until the second is refused
    # (a small store's audit may otherwise end before the second run starts, and --overwrite then replaces it)
    first = Job("audit", ["--store", f"b1={store}", "--out", str(out)], hold_at=r"store\(s\)")
    assert first.wait_for("store(s)")
    holder = _claim(out)
    second = Job("audit", ["--store", f"b2={store}", "--out", str(out), "--overwrite"])
    assert second.finish() == 2
    err = second.stderr
    assert f"run {holder['run_id']}" in err and f"pid {first.proc.pid}" in err and "since" in err, err
    assert "Traceback" not in err
    first.release()
    assert first.finish() in (0, 1), first.stderr
    summary = _summary(out)
    assert summary["run_id"] == holder["run_id"] and [b["name"] for b in summary["brokers"]] == ["b1"]
    assert not (tmp_path / ".out.rocketmq-forensics").exists()


# phase boundaries of the audit and of its commit (progress lines: the history's appends, the output's commit, the
# run listed in the history), and the signal sent there
BOUNDARIES = [
    ("survey", signal.SIGINT), ("predicting recovery", signal.SIGTERM), ("writing findings", signal.SIGINT),
    ("appending to the history", signal.SIGINT), ("history: findings appended", signal.SIGINT),
    ("history: metrics appended", signal.SIGTERM), ("committing", signal.SIGTERM),
    ("history: listing run", signal.SIGINT),
]


@pytest.mark.parametrize("line,sig", BOUNDARIES, ids=[f"{s.name}-at-{line.replace(' ', '-').replace(':', '')}"
                                                       for line, s in BOUNDARIES])
def test_an_interrupted_audit_leaves_the_output_and_the_history_whole(baseline, store, line, sig):
    out, history, before = baseline
    held = _assert_whole(out, history, before, None) if _summary(out)["run_id"] == before else None
    previous = _summary(out)["run_id"]
    job = Job("audit", ["--store", f"b1={store}", "--out", str(out), "--history", str(history), "--overwrite"])
    _LISTED_EARLIER.update(rid for rid, r in _history_runs(history).items() if r.get("listed"))
    assert job.wait_for("store(s)")  # the run holds its claim from before this line to its end
    new = _claim(out)["run_id"]
    reached = job.wait_for(line)
    if reached:
        job.proc.send_signal(sig)
    code = job.finish()
    assert "Traceback" not in job.stderr or sig == signal.SIGINT  # (the clean one-liner is runtime/interrupts.py's)
    now = _assert_whole(out, history, before, new, previous=previous)
    if now != previous:  # the signal came after the commit point: the new run is whole, and said so
        assert now == new and code in (0, 1) or "committing" in job.stderr
    else:  # the output is the commit point (runtime/history.py): before it, the history never lists the new run
        assert code != 0
        assert new not in {rid for rid, r in _history_runs(history).items() if r.get("listed")}
    del held


def test_the_next_run_cleans_what_interrupted_runs_left(baseline, store):
    out, history, before = baseline
    job = Job("audit", ["--store", f"b1={store}", "--out", str(out), "--history", str(history), "--overwrite"])
    assert job.finish() in (0, 1), job.stderr
    new = _summary(out)["run_id"]
    _assert_whole(out, history, before, new, only=False)
    runs = _history_runs(history)
    assert all(r.get("listed") for r in runs.values()), runs  # no rows of an append cut short remain
    assert _staging(out) == [] and not (out.parent / ".out.rocketmq-forensics").exists()
    assert not (out.parent / ".history.rocketmq-forensics").exists()
    for table in ("findings", "metrics", "runs"):
        from deltalake import DeltaTable

        listed = {u.rsplit("/", 2)[-2] for u in DeltaTable(str(history / table)).file_uris()}
        strays = [p.name for p in (history / table).glob("data-*") if p.name not in listed]
        assert strays == [], table


def test_a_run_that_fails_chain_of_custody_commits_nothing(baseline, store, tmp_path):
    """An input file changes mid-run (after the first fingerprint: the survey's line, where the job is held until
    the change is made; under load it had passed its last look before the change, exit 0): exit 2, the previous
    output and history unchanged, no _SUCCESS anywhere but in the previous output, the staging marked failed."""
    out, history, before = baseline
    previous = _summary(out)["run_id"]
    copy = tmp_path / "store"
    shutil.copytree(store, copy)
    rows_before = _history_runs(history)
    job = Job("audit", ["--store", f"b1={copy}", "--out", str(out), "--history", str(history), "--overwrite"],
              hold_at="survey")
    assert job.wait_for("survey")
    staging = _staging(out)
    segment = sorted((copy / "commitlog").iterdir())[0]
    st = segment.stat()
    os.utime(segment, ns=(st.st_atime_ns, st.st_mtime_ns + 10**9))
    job.release()
    assert job.finish() == 2
    assert "chain of custody" in job.stderr, job.stderr
    assert _summary(out)["run_id"] == previous
    assert _history_runs(history) == rows_before
    assert len(staging) == 1
    failed = json.loads((staging[0] / "_FAILED.json").read_text())
    assert "chain of custody" in failed["reason"]
    assert not list(staging[0].rglob("_SUCCESS"))
    assert not (staging[0] / "_ROCKETMQ_FORENSICS").exists()


@pytest.mark.parametrize("sig", [signal.SIGTERM])
def test_extract_delta_overwrite_is_a_new_version_and_an_interrupted_one_keeps_the_old_table(store, tmp_path, sig):
    """Today a SIGTERM two seconds into ``extract --format delta --overwrite`` left neither the old table nor a
    new one: --overwrite deleted the folder first.  Now the old table stays whole until the new version is
    committed, and a completed overwrite is a new version of the same table (the old one still readable)."""
    from deltalake import DeltaTable

    table = tmp_path / "messages"
    argv = ["--store", str(store), "--out", str(table), "--format", "delta"]
    assert Job("extract", argv).finish() == 0
    v0 = DeltaTable(str(table)).version()
    rows = DeltaTable(str(table)).to_pyarrow_table().num_rows
    job = Job("extract", [*argv, "--overwrite"])
    assert job.wait_for("select and write")
    job.proc.send_signal(sig)
    assert job.finish() != 0
    assert DeltaTable(str(table)).version() == v0 and DeltaTable(str(table)).to_pyarrow_table().num_rows == rows
    done = Job("extract", [*argv, "--overwrite", "--topic", "TopicTest"])
    assert done.finish() in (0, 1), done.stderr
    assert DeltaTable(str(table)).version() == v0 + 1
    assert DeltaTable(str(table), version=v0).to_pyarrow_table().num_rows == rows  # time travel: nothing deleted


def test_replay_repair_overwrite_interrupted_keeps_the_old_store(store, tmp_path):
    """Today ``replay --repair --overwrite`` deleted the old store first.  Interrupted while it writes the new one,
    the old store is whole; completed, the new one replaces it."""
    from store_format.store import Store

    new = tmp_path / "repaired"
    argv = ["--repair", str(store), "--out", str(new)]
    assert Job("replay", argv).finish() == 0
    mark = json.loads((new / "_ROCKETMQ_FORENSICS").read_text())
    before = sorted((p.relative_to(new).as_posix(), p.stat().st_size) for p in new.rglob("*") if p.is_file())
    messages = sum(1 for f in Store(new).walk_commitlog(decode=False) if f.kind == "message")
    job = Job("replay", [*argv, "--overwrite"])
    assert job.wait_for("writing the new store")
    job.proc.send_signal(signal.SIGTERM)
    assert job.finish() != 0
    assert sorted((p.relative_to(new).as_posix(), p.stat().st_size) for p in new.rglob("*") if p.is_file()) == before
    assert json.loads((new / "_ROCKETMQ_FORENSICS").read_text()) == mark
    assert sum(1 for f in Store(new).walk_commitlog(decode=False) if f.kind == "message") == messages > 0
