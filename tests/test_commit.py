"""Claim, then commit (issue 33, runtime/commit.py): every output claimed before any work, written beside itself in a
staging no reader sees, made visible in one step, and left as it was by a run that fails -- on a local path, on a
file system with an atomic rename, and on one without (an object store: the marker written last)."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from runtime import commit
from runtime.output import OutputError
from store_format.fs import OUTPUT_MARKER

from .conftest import fixture_store
from .support import remotefs

FIXTURE = fixture_store("basic")


@pytest.fixture
def elsewhere():
    before = dict(remotefs.ROOTS)
    yield remotefs.register
    remotefs.ROOTS.clear()
    remotefs.ROOTS.update(before)


def _write(out: commit.Output, name: str, data: bytes) -> None:
    commit.write_bytes(out.staging.child(name), data)


def _read(folder, name) -> bytes:
    with open(os.path.join(folder, name), "rb") as f:
        return f.read()


def test_a_commit_is_one_rename_and_the_staging_is_invisible_until_then(tmp_path):
    dest = tmp_path / "out"
    with commit.JobRun("test") as run:
        out = run.output(str(dest), overwrite=False)
        _write(out, "data.txt", b"new")
        _write(out, "_SUCCESS", b"")
        assert not dest.exists()  # nothing visible before the commit
        assert out.staging.path.startswith(str(tmp_path / ".out.rocketmq-forensics"))
        run.commit()
    assert _read(dest, "data.txt") == b"new" and (dest / "_SUCCESS").exists()
    mark = json.loads((dest / OUTPUT_MARKER).read_text())
    assert mark["state"] == "committed" and mark["run_id"] == run.run_id and mark["job"] == "test"
    assert not (tmp_path / ".out.rocketmq-forensics").exists()  # claim released, control folder gone
    assert commit.output_state(str(dest)) == "committed"


def test_a_second_run_is_refused_naming_the_first(tmp_path):
    dest = str(tmp_path / "out")
    with commit.JobRun("first") as first:
        first.output(dest, overwrite=False)
        with pytest.raises(commit.ClaimError) as refused:
            with commit.JobRun("second") as second:
                second.output(dest, overwrite=True)
        text = str(refused.value)
        assert first.run_id in text and f"pid {os.getpid()}" in text and "since" in text
        assert isinstance(refused.value, OutputError)  # exit 2, one line (runtime/cli.py)
        first.abandon()
    assert not os.path.exists(dest)


def test_a_failed_run_leaves_the_previous_output_and_marks_its_staging(tmp_path):
    dest = tmp_path / "out"
    with commit.JobRun("test") as run:
        _write(run.output(str(dest), overwrite=False), "data.txt", b"old")
        run.commit()
    with pytest.raises(KeyboardInterrupt):
        with commit.JobRun("test") as run:
            out = run.output(str(dest), overwrite=True)
            _write(out, "data.txt", b"new")
            _write(out, "_SUCCESS", b"")
            raise KeyboardInterrupt
    assert _read(dest, "data.txt") == b"old"
    failed = json.loads(_read(out.staging.path, commit.FAILED))
    assert failed["reason"].startswith("interrupted") and failed["run_id"] == run.run_id
    assert run.kept() == [] or "unchanged" in " ".join(run.kept())
    # the next run cleans what the failed one left
    with commit.JobRun("test") as again:
        out2 = again.output(str(dest), overwrite=True)
        assert not os.path.exists(out.staging.path)
        _write(out2, "data.txt", b"newer")
        again.commit()
    assert _read(dest, "data.txt") == b"newer" and not (tmp_path / ".out.rocketmq-forensics").exists()


def test_overwrite_swaps_then_removes_the_old_one(tmp_path):
    dest = tmp_path / "out"
    for data in (b"one", b"two"):
        with commit.JobRun("test") as run:
            out = run.output(str(dest), overwrite=True)
            _write(out, "data.txt", data)
            if data == b"two":
                assert _read(dest, "data.txt") == b"one"  # the old output stays until the new one is in
            run.commit()
    assert _read(dest, "data.txt") == b"two"
    assert sorted(os.listdir(tmp_path)) == ["out"]


def test_without_overwrite_an_existing_output_is_refused_untouched(tmp_path):
    dest = tmp_path / "out"
    dest.mkdir()
    (dest / "mine.txt").write_text("user data")
    with pytest.raises(OutputError, match="already exists"):
        with commit.JobRun("test") as run:
            run.output(str(dest), overwrite=False)
    with pytest.raises(OutputError, match="not written by this suite"):
        with commit.JobRun("test") as run:
            run.output(str(dest), overwrite=True)
    assert os.listdir(dest) == ["mine.txt"] and sorted(os.listdir(tmp_path)) == ["out"]


def test_a_stale_claim_of_a_dead_process_is_taken_over(tmp_path):
    dest = str(tmp_path / "out")
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    control = tmp_path / ".out.rocketmq-forensics"
    ident = commit.RunIdentity.current("killed", commit.new_run_id())
    (control / f"staging-{ident.run_id}").mkdir(parents=True)
    ident.pid, ident.pid_start = int(dead.stdout), None
    (control / commit.CLAIM).write_text(json.dumps(ident.__dict__))
    with commit.JobRun("test") as run:
        out = run.output(dest, overwrite=False)
        assert not (control / f"staging-{ident.run_id}").exists()  # the dead run's staging: cleaned
        _write(out, "x", b"1")
        run.commit()
    assert _read(dest, "x") == b"1"


@pytest.mark.parametrize("rename", [True, False], ids=["atomic-rename", "marker-last"])
def test_outputs_elsewhere_commit_through_the_seam(elsewhere, tmp_path, rename):
    """A writable ``elsewhere://`` folder: with a rename of folders (HDFS) the commit is a rename; without (an object
    store) the files are moved in and the committed marker written last; --overwrite keeps the old output until
    the new one is complete."""
    base = elsewhere("w", tmp_path, writable=True, rename=rename)
    for data in (b"one", b"two"):
        with commit.JobRun("test") as run:
            out = run.output(base + "out", overwrite=True)
            _write(out, "part/data.txt", data)
            assert commit.output_state(base + "out") in ("missing", "committed")
            run.commit()
        assert _read(tmp_path / "out" / "part", "data.txt") == data
        mark = json.loads((tmp_path / "out" / OUTPUT_MARKER).read_text())
        assert mark["state"] == "committed" and mark["run_id"] == run.run_id
    assert sorted(os.listdir(tmp_path)) == ["out"] and remotefs.no_local_path_used()
    # a failed run elsewhere: the previous output intact, the staging marked
    with pytest.raises(RuntimeError):
        with commit.JobRun("test") as run:
            out = run.output(base + "out", overwrite=True)
            _write(out, "part/data.txt", b"three")
            raise RuntimeError("disk full")
    assert _read(tmp_path / "out" / "part", "data.txt") == b"two"
    assert json.loads(_read(out.staging.path.replace(f"{remotefs.PREFIX}/w", str(tmp_path)),
                            commit.FAILED))["reason"] == "RuntimeError: disk full"


def test_a_reader_refuses_an_uncommitted_output(tmp_path):
    dest = tmp_path / "out"
    dest.mkdir()
    (dest / OUTPUT_MARKER).write_text(json.dumps({"tool": commit.TOOL, "state": "replacing", "run_id": "r1"}))
    (dest / "x").write_text("half")
    with pytest.raises(OutputError, match="not committed"):
        commit.check_committed(str(dest))


# ---------------------------------------------------------------------------------------------------------
# The history (runtime/history.py): validated before the audit starts, refused untouched when it is not one


def _tree(root) -> dict:
    return {str(p.relative_to(root)): (p.stat().st_size if p.is_file() else None) for p in sorted(root.rglob("*"))}


def _delta_table(path, columns: dict) -> None:
    import pyarrow as pa
    from deltalake import write_deltalake

    write_deltalake(str(path), pa.table(columns))


@pytest.mark.parametrize("case", ["extract-table", "metrics-not-delta", "a-file", "unmarked-findings"])
def test_a_history_that_is_not_an_audit_history_is_refused_before_the_audit(tmp_path, capsys, case):
    from jobs.audit import job as audit

    history = tmp_path / "history"
    if case == "extract-table":  # an extract of messages, as Delta: the audit once merged its columns into it
        _delta_table(history, {"broker": ["b"], "physical_offset": [1], "body": [b"x"]})
    elif case == "metrics-not-delta":
        history.mkdir()
        (history / "metrics").mkdir()
        (history / "metrics" / "part-0.parquet").write_bytes(b"x")
    elif case == "a-file":
        history.write_text("not a folder")
    else:  # a Delta table with the right columns but not written by the audit
        _delta_table(history / "findings", {"run_id": ["r"], "run_time": [1], "finding_id": ["f"], "check": ["c"],
                                            "severity": ["error"], "broker": ["b"]})
    before = _tree(tmp_path)
    out = tmp_path / "out"
    code = audit.main(["--store", str(FIXTURE), "--out", str(out), "--history", str(history)])
    err = capsys.readouterr().err
    assert code == 2 and "history" in err and "refused, left untouched" in err and "Traceback" not in err, err
    assert _tree(tmp_path) == before  # nothing made: no --out, no findings table, no claim left


def test_trend_refuses_a_table_that_is_not_an_audit_history(tmp_path, capsys):
    """Today: ``TypeError: '<' not supported between instances of 'NoneType' and 'datetime.datetime'``."""
    from jobs import trend

    _delta_table(tmp_path / "h" / "findings", {"broker": ["b"], "physical_offset": [1]})
    _delta_table(tmp_path / "h" / "metrics", {"broker": ["b"], "value": [1.0]})
    before = _tree(tmp_path)
    assert trend.main(["--history", str(tmp_path / "h")]) == 2
    err = capsys.readouterr().err
    assert "not an audit history's findings table" in err and "TypeError" not in err, err
    assert _tree(tmp_path) == before


def test_a_history_on_a_scheme_delta_rs_cannot_open_is_refused_before_the_audit(elsewhere, tmp_path, capsys):
    from jobs.audit import job as audit

    uri = elsewhere("h", tmp_path, writable=True) + "history"
    assert audit.main(["--store", str(FIXTURE), "--out", str(tmp_path / "out"), "--history", uri]) == 2
    assert "delta-rs" in capsys.readouterr().err
    assert sorted(os.listdir(tmp_path)) == []


def test_an_interrupt_handler_can_say_what_was_kept(tmp_path):
    """runtime/interrupts.py's one line: :func:`commit.active_runs` and :meth:`JobRun.kept`."""
    dest = tmp_path / "out"
    with commit.JobRun("test") as run:
        _write(run.output(str(dest), overwrite=False), "x", b"1")
        run.commit()
    with pytest.raises(KeyboardInterrupt):
        with commit.JobRun("test") as run:
            run.output(str(dest), overwrite=True)
            assert commit.active_runs() == [run]
            assert run.kept() == [f"{dest}: the previous output is unchanged; the staging "
                                  f"{tmp_path}/.out.rocketmq-forensics/staging-{run.run_id} is marked failed"]
            raise KeyboardInterrupt
    assert commit.active_runs() == []


def test_read_table_refuses_an_output_whose_commit_was_cut_short(tmp_path):
    """A marker-last commit (an object store) cut short leaves the marker in state ``replacing``: no reader takes
    the half-moved folder for a finished output."""
    from runtime.output import read_table

    dest = tmp_path / "out"
    dest.mkdir()
    (dest / OUTPUT_MARKER).write_text(json.dumps({"tool": commit.TOOL, "state": "replacing", "run_id": "r1"}))
    (dest / "part-0.parquet").write_bytes(b"half")
    with pytest.raises(OutputError, match="not committed"):
        read_table(None, str(dest))


def test_a_named_store_uri_reaches_the_output_checks(elsewhere, tmp_path, capsys):
    """``--store NAME=URI`` as the README says (today: ``Cannot parse URI: 'b1=elsewhere://...'`` from the output
    guard): the store resolves, the output is checked apart from it, and the run goes on to the next check (here
    a history that is a file, refused before any work)."""
    from jobs.audit import job as audit

    uri = elsewhere("fx", FIXTURE.parent) + "store"
    out = elsewhere("o", tmp_path, writable=True) + "out"  # both on the scheme: the guard compares them by name
    (tmp_path / "h").write_text("a file")
    assert audit.main(["--store", f"b1={uri}", "--out", out, "--history", str(tmp_path / "h")]) == 2
    err = capsys.readouterr().err
    assert "Cannot parse URI" not in err and "history" in err and "not a folder" in err, err


@pytest.mark.parametrize("job", ["decode", "extract", "replay", "compare", "trend", "audit"])
def test_every_job_refuses_an_output_another_run_holds(job, tmp_path, capsys, monkeypatch):
    """Claim, then commit for every job with an output: while a run holds ``--out``, another job's run on it is
    refused in its prepare (exit 2, before any Spark session), naming the first run, and nothing changes."""
    import importlib

    import runtime.session

    def refuse(*a, **k):
        raise AssertionError("a Spark session was started")

    monkeypatch.setattr(runtime.session, "build_session", refuse)
    out = tmp_path / "out"
    store = str(FIXTURE)
    argv = {"decode": ["--store", store], "extract": ["--store", store], "replay": ["--repair", store],
            "compare": ["--store", store, "--store", str(fixture_store("broker"))], "audit": ["--store", store],
            "trend": ["--history", str(tmp_path / "h")]}[job]
    if job == "trend":
        import datetime as dt

        import pyarrow as pa

        from runtime import history as H

        when = pa.array([dt.datetime(2024, 5, 1, tzinfo=dt.timezone.utc)], pa.timestamp("us", "UTC"))
        H.append_tables(str(tmp_path / "h"), pa.table({"run_id": ["r"], "run_time": when, "finding_id": ["f"],
                                                       "check": ["c"], "severity": ["error"], "broker": ["b"]}),
                        pa.table({"run_id": ["r"], "run_time": when, "broker": ["b"], "scope": ["broker"],
                                  "metric": ["m"], "value": [1.0]}))
    with commit.JobRun("holder") as holder:
        holder.output(str(out), overwrite=False)
        module = importlib.import_module("jobs.audit.job" if job == "audit" else f"jobs.{job}")
        assert module.main([*argv, "--out", str(out), "--overwrite"]) == 2
        err = capsys.readouterr().err
        assert f"run {holder.run_id}" in err and f"pid {os.getpid()}" in err and "in use by" in err, err
        holder.abandon()
    assert not out.exists() and not (tmp_path / ".out.rocketmq-forensics").exists()
