"""The audit's history never loses a committed run (issue 38, items 3 and 7; runtime/history.py).

* A run killed (SIGKILL) at each step of its commit leaves the history and its output so that the readers (trend)
  and the next ``audit --history`` see the whole run or none of it: listed iff its output is committed.  The run is
  tests/support/history_run.py (the real claims and ``JobRun.commit`` of an audit, without the audit), held at the
  step's progress line by tests/support/paused.py while the test kills it: no race, no sleep.
* A damaged Delta log or data file is refused with the file named (trend and the audit: exit 2), and the history
  is left byte for byte as it was: never "repaired" by deleting a run it lists.
* The next claim removes only what a killed run of its own journal wrote (never a file a version lists, never one
  that was there before), runs/ included; rows no journal names are left as they are.
"""
from __future__ import annotations

import datetime as dt
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pytest

from jobs import trend
from runtime import commit
from runtime import history as H
from jobs.audit import job as audit

from .conftest import REPO, fixture_store

WHEN = dt.datetime(2024, 5, 1, tzinfo=dt.timezone.utc)


def _tree(root: Path) -> dict[str, str]:
    """Every file below ``root`` (hidden ones too) -> its SHA-256; links -> their target."""
    found = {}
    for folder, dirs, files in os.walk(root):
        for name in dirs + files:
            path = Path(folder, name)
            rel = str(path.relative_to(root))
            if path.is_symlink():
                found[rel] = f"-> {os.readlink(path)}"
            elif path.is_file():
                found[rel] = hashlib.sha256(path.read_bytes()).hexdigest()
    return found


def _stamp(run: str, day: int) -> dict:
    return {"run_id": [run], "run_time": pa.array([WHEN + dt.timedelta(days=day)], pa.timestamp("us", "UTC"))}


def _small_history(hist: Path, runs: int = 3) -> None:
    """``runs`` complete runs r1, r2... with the columns trend reads (findings, metrics, runs: versions 0 ..
    runs-1 of each table); each run's lag grows."""
    for n in range(1, runs + 1):
        stamp = _stamp(f"r{n}", n)
        findings = pa.table({**stamp, "finding_id": ["f"], "check": ["integrity.bad_crc"], "severity": ["error"],
                             "broker": ["b"], "file": ["00000000000000000000"], "file_position": [0],
                             "physical_offset": [0], "topic": pa.array([None], pa.string()),
                             "queue_id": pa.array([None], pa.int32()), "queue_offset": pa.array([None], pa.int64()),
                             "message": ["bad crc"], "details": pa.array([[("k", "v")]], pa.map_(pa.string(),
                                                                                                pa.string()))})
        metrics = pa.table({**stamp, "broker": ["b"], "scope": ["queue"], "topic": ["T"],
                            "queue_id": pa.array([0], pa.int32()), "group": ["G"], "metric": ["lag_messages"],
                            "value": [float(n)]})
        H.append_tables(str(hist), findings, metrics)


def _commit_file(hist: Path, table: str, version: int) -> Path:
    return hist / table / "_delta_log" / f"{version:020d}.json"


def _data_file(hist: Path, table: str) -> Path:
    return sorted((hist / table).glob("part-*.parquet"))[0]


def _cut(path: Path, keep: float = 0.5) -> None:
    data = path.read_bytes()
    path.write_bytes(data[:int(len(data) * keep)])


def _without_adds(path: Path) -> None:
    path.write_text("\n".join(line for line in path.read_text().split("\n") if not line.startswith('{"add"')))


def _grown(path: Path, size: int) -> Path:
    with open(path, "r+b") as f:  # a sparse tail of zeros: no disk, but never read whole
        f.truncate(size)
    return path


def _unlinked(path: Path) -> Path:
    path.unlink()
    return path


# damage -> (what it does to a history of three runs, returning the file it damaged; what the refusal says of it)
DAMAGE = {
    "empty-newest-runs-commit": (lambda h: (_commit_file(h, "runs", 2).write_bytes(b""), _commit_file(h, "runs", 2))[1],
                                 "is empty (0 bytes)"),
    "empty-findings-commit": (lambda h: (_commit_file(h, "findings", 1).write_bytes(b""),
                                         _commit_file(h, "findings", 1))[1], "is empty (0 bytes)"),
    "cut-commit": (lambda h: (_cut(_commit_file(h, "metrics", 2)), _commit_file(h, "metrics", 2))[1],
                   "is cut short or overwritten"),
    "commit-cut-at-a-line-end": (lambda h: (_without_adds(_commit_file(h, "runs", 1)), _commit_file(h, "runs", 1))[1],
                                 "commitInfo counts 1 added and 0 removed files, the file holds 0 and 0"),
    "garbage-commit": (lambda h: (_commit_file(h, "findings", 2).write_bytes(b"\x00garbage\n"),
                                  _commit_file(h, "findings", 2))[1], "is not JSON"),
    "missing-middle-version": (lambda h: (_commit_file(h, "metrics", 1).unlink(), _commit_file(h, "metrics", 1))[1],
                               "is missing (the log goes from version 0 to 2)"),
    "oversized-commit": (lambda h: _grown(_commit_file(h, "findings", 2), H.COMMIT_LIMIT + 1),
                         "cannot be read (more than"),
    "data-file-cut-short": (lambda h: (_cut(_data_file(h, "findings")), _data_file(h, "findings"))[1],
                            "where the table's log records"),
    "data-file-missing": (lambda h: _unlinked(_data_file(h, "runs")), "is missing (the table's log lists it)"),
}


@pytest.mark.parametrize("damage", list(DAMAGE))
def test_a_damaged_history_is_refused_naming_the_file_and_left_untouched(damage, tmp_path, capsys):
    """Today an empty newest runs/ commit made trend compare older runs silently, and the next audit --history
    deleted the complete run's findings and metrics for good ("its append was cut short"); a damaged commit or
    data file said delta-rs's words (no file) or nothing.  Now trend and the audit refuse (exit 2), naming the
    file and what to do, before any Spark session, and the history is byte for byte as it was."""
    hist = tmp_path / "history"
    _small_history(hist)
    make, says = DAMAGE[damage]
    damaged = make(hist)
    before = _tree(tmp_path)
    assert trend.main(["--history", str(hist)]) == 2
    err = capsys.readouterr().err
    assert str(damaged) in err and says in err and "is damaged" in err and "backup" in err, err
    assert "Traceback" not in err and "Kernel error" not in err
    out = tmp_path / "out"
    assert audit.main(["--store", str(fixture_store("basic")), "--out", str(out), "--history", str(hist),
                       "--quiet"]) == 2
    err = capsys.readouterr().err
    assert str(damaged) in err and says in err and "Traceback" not in err, err
    assert _tree(tmp_path) == before  # nothing removed, nothing claimed, no output
    if damage == "empty-newest-runs-commit":  # the one version that may be given up, as the message says
        assert f"move {damaged} out of the history" in err


def test_a_data_file_whose_bytes_cannot_be_read_is_named(spark, tmp_path):
    """A data file of the right size whose pages are zeros (a bit rot the log cannot see): trend's read fails,
    and the failure names the file (today: Spark's or pyarrow's error, naming none)."""
    hist = tmp_path / "history"
    _small_history(hist)
    victim = _data_file(hist, "metrics")
    data = bytearray(victim.read_bytes())
    data[4:-8] = bytes(len(data) - 12)  # the magic and the footer's length kept: only the content is gone
    victim.write_bytes(bytes(data))
    assert H.check_history(str(hist), must_exist=True)  # the log is whole: only the read finds it
    args = trend.build_parser().parse_args(["--history", str(hist)])
    with pytest.raises(Exception) as refused:
        trend.run(spark, args)
    assert f"{victim} cannot be read as Parquet" in str(refused.value) and "is damaged" in str(refused.value)


def test_an_append_without_a_journal_is_ignored_by_readers_and_left_as_it_is(tmp_path):
    """Rows of a run runs/ does not list and no journal names (an append an earlier version cut short), and files
    no version lists, are not this suite's to judge: readers ignore them, the next claim leaves them (before, it
    deleted whatever runs/ did not list: a damaged runs/ log cost complete runs)."""
    from deltalake import DeltaTable

    hist = tmp_path / "history"
    _small_history(hist, runs=1)
    cut = pa.table({**_stamp("r2", 2), "finding_id": ["f"], "check": ["c"], "severity": ["error"], "broker": ["b"]})
    H._append(str(hist), H.FINDINGS, cut.to_reader(), cut.schema)  # cut short after this
    (hist / "findings" / "data-0123").mkdir()  # an append of an older kind killed mid-write
    (hist / "findings" / "part-00000-killed-c000.snappy.parquet").write_bytes(b"PAR1")
    assert H.committed_runs(str(hist)).column("run_id").to_pylist() == ["r1"]
    before = _tree(hist)
    with commit.JobRun("audit") as run:
        H.claim_history(run, str(hist))
        run.abandon()
    assert _tree(hist) == before
    assert sorted(DeltaTable(str(hist / "findings")).to_pyarrow_table().column("run_id").to_pylist()) == ["r1", "r2"]
    assert not (tmp_path / ".history.rocketmq-forensics").exists()


def test_a_history_written_before_the_marker_is_adopted_not_refused(tmp_path):
    """A history an earlier version wrote (findings/ and metrics/ not marked, no runs/) is an audit history: its
    runs in both tables are the committed ones, the next claim lists them in runs/ (one commit), and audits and
    trend go on with it instead of refusing it; a run in only one table stays unlisted, its rows kept."""
    from deltalake import DeltaTable, write_deltalake

    def stamp(runs):
        return {"run_id": [r for r, _ in runs], "run_time": pa.array(
            [dt.datetime(2024, 5, d, tzinfo=dt.timezone.utc) for _, d in runs], pa.timestamp("us", "UTC"))}

    hist = tmp_path / "history"
    write_deltalake(str(hist / "findings"), pa.table({**stamp([("r1", 1), ("r2", 2), ("r2", 2), ("r3", 3)]),
                                                      "finding_id": ["a", "b", "c", "d"], "check": ["c"] * 4,
                                                      "severity": ["error"] * 4, "broker": ["b"] * 4}))
    write_deltalake(str(hist / "metrics"), pa.table({**stamp([("r1", 1), ("r2", 2)]), "broker": ["b"] * 2,
                                                     "scope": ["broker"] * 2, "metric": ["m"] * 2,
                                                     "value": [1.0, 2.0]}))  # r3's append was cut short
    assert H.check_history(str(hist), must_exist=True)
    runs = H.committed_runs(str(hist))
    assert runs.column("run_id").to_pylist() == ["r1", "r2"] and runs.column("findings").to_pylist() == [1, 2]
    with commit.JobRun("audit") as run:
        H.claim_history(run, str(hist))
        run.abandon()
    assert H._marked(DeltaTable(str(hist / "runs"))) == H.RUNS
    assert H.committed_runs(str(hist)).column("run_id").to_pylist() == ["r1", "r2"]
    assert sorted(DeltaTable(str(hist / "findings")).to_pyarrow_table().column("run_id").to_pylist()) == [
        "r1", "r2", "r2", "r3"]  # r3's row, in no run, ignored and kept
    assert H.check_history(str(hist))  # and it stays an audit history


def test_a_journal_this_suite_did_not_write_is_refused_naming_it(tmp_path, capsys):
    """The control folder's journals decide what the next claim removes: one that is not this suite's (garbage,
    a name with a path in it) is refused by the audit and trend alike, and nothing is touched."""
    hist = tmp_path / "history"
    _small_history(hist, runs=2)
    control = tmp_path / ".history.rocketmq-forensics"
    control.mkdir()
    forged = {"tool": commit.TOOL, "run_id": "x", "run_time": WHEN.isoformat(), "out": "/o", "output": "/o",
              "state": "appending", "counts": {},
              "before": {"findings": {"files": ["../../victim"], "log": []}, "metrics": None, "runs": None}}
    for name, body in (("append-x.json", json.dumps(forged)), ("append-y.json", "{garbage")):
        for stale in control.glob("append-*"):
            stale.unlink()
        (control / name).write_text(body)
        before = _tree(tmp_path)
        assert trend.main(["--history", str(hist)]) == 2
        assert audit.main(["--store", str(fixture_store("basic")), "--out", str(tmp_path / "out"), "--history",
                           str(hist)]) == 2
        err = capsys.readouterr().err
        assert str(control / name) in err and "not the journal of a history append" in err, err
        assert _tree(tmp_path) == before


def test_an_interrupt_after_the_outputs_rename_leaves_the_run_in_both(tmp_path, monkeypatch):
    """A Ctrl-C or SIGTERM whose exception comes after the output's rename and before its commit returns (a
    signal during the rename's system call is handled right after it): the run's output is committed, so the
    history must list it too.  Before, the failure undid the history's appends, runs/ included: an output no
    history listed.  Now the history's undo looks at the output's marker and keeps the run (its journal: readers
    list it, the next claim appends its row)."""
    import pyarrow.parquet as pq
    from deltalake import DeltaTable

    from .support import history_run

    like = tmp_path / "like"
    _small_history(tmp_path / "source", runs=1)
    for table in (H.FINDINGS, H.METRICS):
        (like / table).mkdir(parents=True)
        pq.write_table(DeltaTable(str(tmp_path / "source" / table)).to_pyarrow_table(), like / table / "part-0.parquet")
    hist, out = tmp_path / "history", tmp_path / "out"
    real = commit.Output._commit_by_rename

    def renamed_then_interrupted(self, replaced):
        real(self, replaced)
        raise KeyboardInterrupt

    monkeypatch.setattr(commit.Output, "_commit_by_rename", renamed_then_interrupted)
    with pytest.raises(KeyboardInterrupt):
        history_run.main(["--history", str(hist), "--out", str(out), "--like", str(like), "--input",
                          str(fixture_store("basic"))])
    monkeypatch.undo()
    run = json.loads((out / "_ROCKETMQ_FORENSICS").read_text())["run_id"]
    assert H.committed_runs(str(hist)).column("run_id").to_pylist() == [run]
    with commit.JobRun("audit") as later:
        H.claim_history(later, str(hist))
        later.abandon()
    assert DeltaTable(str(hist / "runs")).to_pyarrow_table().column("run_id").to_pylist() == [run]
    assert not (tmp_path / ".history.rocketmq-forensics").exists()


# ---------------------------------------------------------------------------------------------------------
# A run killed at each step of its commit


@pytest.fixture(scope="module")
def audited(spark, tmp_path_factory):
    """An audit of a copy of the ``basic`` fixture, committed with a history of that one run."""
    base = tmp_path_factory.mktemp("audited")
    shutil.copytree(fixture_store("basic"), base / "store")
    result = audit.run(spark, _audit_args(base / "store", base / "out", base / "history"))
    assert result.exit_code in (0, 1)
    return base


def _audit_args(store: Path, out: Path, history: Path):
    return audit.build_parser().parse_args(["--store", str(store), "--out", str(out), "--history", str(history),
                                            "--overwrite", "--no-report"])


def _kill_at(step: str, base: Path, work: Path) -> str:
    """tests/support/history_run.py committing a run into ``work``'s history and output, held at the progress
    line ``step`` and SIGKILLed there; its run id."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])))
    proc = subprocess.Popen([sys.executable, str(REPO / "tests" / "support" / "paused.py"), "--at", step, "--",
                             "tests.support.history_run", "--history", str(work / "history"), "--out",
                             str(work / "out"), "--like", str(base / "out"), "--input", str(base / "store")],
                            cwd=REPO, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    said = []
    for line in proc.stderr:  # the process blocks after the step's line (paused.py): it is killed right there
        said.append(line)
        if re.search(step, line):
            break
    proc.kill()
    proc.wait(60)
    proc.stderr.close()
    assert re.search(step, "".join(said)), "".join(said)
    return json.loads((work / ".out.rocketmq-forensics" / "claim.json").read_text())["run_id"]


def _rows(hist: Path, table: str) -> dict[str, int]:
    from deltalake import DeltaTable

    ids = DeltaTable(str(hist / table)).to_pyarrow_table(columns=["run_id"]).column("run_id").to_pylist()
    return {r: ids.count(r) for r in set(ids)}


def _named(hist: Path, table: str) -> str:
    """The text of every commit of ``table``'s log (these small histories have no checkpoint)."""
    return "\n".join(p.read_text() for p in sorted((hist / table / "_delta_log").glob("*.json")))


def _trend_compares(spark, hist: Path) -> list[tuple[str, str]]:
    """The (previous run, run) pairs trend compares, read the way it reads them (jobs/trend.py: read_runs, the
    committed runs only, and run_pairs): its whole run is seconds of Spark jobs more per call."""
    pairs = trend.run_pairs(H.read_runs(spark, str(hist), "findings"), H.read_runs(spark, str(hist), "metrics"), True)
    return [(previous, run) for run, _, previous, _ in pairs]


# the steps of a run's commit (runtime/history.py's docstring), by the line said at each, and whether the run's output
# is committed when it is killed there
STEPS = [
    ("appending to the history at", False),  # its journal not written yet
    ("history: findings appended", False),  # journal: appending; findings appended, unlisted
    ("history: metrics appended", False),  # both appended, the journal not updated yet
    ("committing ", False),  # journal: appended; the output's marker written in its staging, not moved in
    ("history: listing run", True),  # the output committed (the commit point), the run not listed
    ("history: run .* recorded", True),  # listed, its journal not removed yet
]


@pytest.mark.parametrize("step,committed", STEPS, ids=[re.sub(r"\W+", "-", s).strip("-") for s, _ in STEPS])
def test_a_run_killed_at_any_step_is_seen_whole_or_not_at_all(audited, spark, tmp_path, capsys, step,
                                                               committed):
    """Before, the history's appends (runs/ included) were committed before the output: a SIGKILL between the two
    left the history listing a run whose output never existed.  Now the output is the commit point: killed at
    any step, trend lists the run iff its output is committed, the next audit --history lists it or rolls it
    back (its rows and the files it wrote gone), and the input and a bystander folder are byte for byte as they
    were."""
    work = tmp_path
    shutil.copytree(audited / "out", work / "out")
    shutil.copytree(audited / "history", work / "history")
    (work / "bystander").mkdir()
    (work / "bystander" / "notes.txt").write_text("not the run's")
    hist = work / "history"
    first = H.committed_runs(str(hist)).column("run_id").to_pylist()
    assert len(first) == 1
    untouched = _tree(audited / "store"), _tree(work / "bystander")

    killed = _kill_at(step, audited, work)
    output = json.loads((work / "out" / "_ROCKETMQ_FORENSICS").read_text())["run_id"]
    readers = H.committed_runs(str(hist)).column("run_id").to_pylist()
    assert (killed in readers) == (output == killed), f"the history lists {readers}, the output holds {output}"
    assert (output == killed) is committed, (output, killed)
    assert sorted(readers) == sorted(first + [killed] * committed)
    assert _trend_compares(spark, hist) == ([(first[0], killed)] if committed else [])
    if step == "history: listing run":  # committed, not listed yet: trend compares it, and says why
        capsys.readouterr()
        result = trend.run(spark, trend.build_parser().parse_args(["--history", str(hist)]))
        assert result.summary.startswith(f"trend: {first[0]} -> {killed}:"), result.summary
        assert f"history: run {killed} is committed" in capsys.readouterr().err

    result = audit.run(spark, _audit_args(audited / "store", work / "out", hist))
    assert result.exit_code in (0, 1)
    from deltalake import DeltaTable

    latest = json.loads((work / "out" / "summary.json").read_text())["run_id"]
    listed = DeltaTable(str(hist / "runs")).to_pyarrow_table().to_pylist()
    expected = first + [killed] * committed + [latest]
    assert sorted(r["run_id"] for r in listed) == sorted(expected)
    for table in (H.FINDINGS, H.METRICS):  # every listed run whole, and no rows of any other run
        assert _rows(hist, table) == {r["run_id"]: r[table] for r in listed}, table
    assert not (work / ".history.rocketmq-forensics").exists() and not (work / ".out.rocketmq-forensics").exists()
    for table in H.TABLES:  # no file of the killed run that no version lists
        named = _named(hist, table)
        assert [p.name for p in (hist / table).iterdir() if p.name != "_delta_log" and p.name not in named] == []
    assert _trend_compares(spark, hist) == [(first[0], killed), (killed, latest)] if committed else [
        (first[0], latest)]
    assert (_tree(audited / "store"), _tree(work / "bystander")) == untouched


@pytest.mark.parametrize("step,committed", [("history: metrics appended", False), ("history: listing run", True)],
                         ids=["rolled-back", "listed"])
def test_the_next_claim_removes_what_a_killed_run_wrote_and_nothing_else(audited, tmp_path, step, committed):
    """A run killed between delta-rs writing a data file and committing it (here: its row in runs/, beside a
    temporary commit) leaves files no version lists: the next claim removes them (before, runs/ was never
    cleaned) and rolls the run back or lists it, but keeps the files no version lists that were there before the
    run (before, any such file in findings/ or metrics/ was removed, whoever wrote it) and every file a version
    lists."""
    work = tmp_path
    shutil.copytree(audited / "out", work / "out")
    shutil.copytree(audited / "history", work / "history")
    hist = work / "history"
    foreign = [hist / "findings" / "part-00000-not-the-runs-c000.snappy.parquet", hist / "runs" / "notes.txt"]
    for path in foreign:
        path.write_bytes(b"there before the run")
    killed = _kill_at(step, audited, work)
    strays = [hist / "runs" / "part-00000-0a1b2c3d-0000-4000-8000-000000000000-c000.snappy.parquet",
              hist / "runs" / "_delta_log" / "_commit_0a1b2c3d-0000-4000-8000-000000000000.json.tmp"]
    for path in strays:  # what delta-rs had written of the run's row when the kill came
        path.write_bytes(b"PAR1 cut short")
    listed_files = [p for t in H.TABLES for p in (hist / t).iterdir() if p.name in _named(hist, t)]
    with commit.JobRun("audit") as run:
        H.claim_history(run, str(hist))
        run.abandon()
    assert [p.name for p in strays if p.exists()] == []
    assert all(p.exists() for p in foreign) and all(p.exists() for p in listed_files)
    assert (killed in H.committed_runs(str(hist)).column("run_id").to_pylist()) is committed
    assert (killed in _rows(hist, H.FINDINGS)) is committed


def test_a_run_killed_inside_its_outputs_commit_follows_that_commit(audited, tmp_path):
    """Killed between the two renames of an output's journalled commit (the output aside, the new one not yet
    in): whether the run is committed is that output's to decide (its next run finishes the commit from its
    journal), so the history's next claim leaves the run unlisted and its rows in place, readers list it once the
    output holds it, and the claim after that lists it."""
    from runtime.output import prepare_output

    work = tmp_path
    shutil.copytree(audited / "out", work / "out")
    shutil.copytree(audited / "history", work / "history")
    hist, out, control = work / "history", work / "out", work / ".out.rocketmq-forensics"
    killed = _kill_at("committing ", audited, work)
    out.rename(control / f"old-{killed}")  # the first rename of a journalled commit, the journal first
    (control / f"commit-{killed}.json").write_text(json.dumps({"run_id": killed, "how": "rename",
                                                               "staging": f"staging-{killed}",
                                                               "old": f"old-{killed}"}))
    rows = _rows(hist, H.FINDINGS)
    assert killed in rows
    with commit.JobRun("audit") as run:
        H.claim_history(run, str(hist))
        run.abandon()
    assert _rows(hist, H.FINDINGS) == rows and killed not in H.committed_runs(str(hist)).column("run_id").to_pylist()
    with commit.JobRun("audit") as run:  # the output's next run: its claim finishes the commit from the journal
        prepare_output(str(out), overwrite=True, job="audit")
        run.abandon()
    assert json.loads((out / "_ROCKETMQ_FORENSICS").read_text())["run_id"] == killed
    assert killed in H.committed_runs(str(hist)).column("run_id").to_pylist()
    with commit.JobRun("audit") as run:
        H.claim_history(run, str(hist))
        run.abandon()
    assert killed in H._read(str(hist), H.RUNS).column("run_id").to_pylist()
    assert not (work / ".history.rocketmq-forensics").exists()
