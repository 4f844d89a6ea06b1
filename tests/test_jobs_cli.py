"""The one job runtime (runtime/cli.py), without Spark: every job answers --help (exit 0, a usage line) in each of its
forms (the console command's subcommand, ``python -m jobs``, the spark-submit script file), usage and input
errors are one ``error:`` line and exit 2 before any session starts, and the progress line (runtime/progress.py)
says bytes and what is left, redrawn on a terminal and as plain lines in a log, silent with --quiet."""
from __future__ import annotations

import io
import re
import subprocess
import sys
import tomllib

import pytest

from jobs import console
from runtime import cli, progress
from runtime.session import REPO


@pytest.mark.parametrize("job", console.JOBS)
def test_every_job_answers_help_through_the_console_command(job, capsys):
    with pytest.raises(SystemExit) as e:
        console.console([job, "--help"])
    assert e.value.code == 0
    text = capsys.readouterr().out
    assert text.startswith(f"usage: {cli.PROG} {job} [-h]")
    for flag in ("--quiet", "--debug"):  # the runtime's flags, on every job
        assert flag in text
    if job not in ("replay", "trend"):  # replay reads --input/--repair; trend its --history
        assert "--store PATH [PATH ...]" in text and "NAME=PATH" in text


def test_console_lists_every_job_and_refuses_an_unknown_one(capsys):
    assert console.console(["--help"]) == 0
    listing = capsys.readouterr().out
    assert listing.startswith(f"usage: {cli.PROG} JOB")
    assert all(re.search(rf"^  {job} +\S", listing, re.M) for job in console.JOBS)
    assert console.console(["audi"]) == 2
    assert "no job 'audi'" in capsys.readouterr().err


def test_the_console_command_is_declared_in_pyproject():
    scripts = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["scripts"]
    module, _, attr = scripts[cli.PROG].partition(":")
    assert (module, attr) == ("jobs.console", "console")


@pytest.mark.parametrize("argv", [["-m", "jobs", "--help"], ["-m", "jobs.trend", "--help"],
                                  [str(REPO / "jobs" / "decode.py"), "--help"],
                                  [str(REPO / "jobs" / "audit" / "__main__.py"), "--help"]])
@pytest.mark.slow
def test_module_and_script_forms(argv, tmp_path):
    """``python -m`` and the files spark-submit runs (from another folder: jobs/_bootstrap.py finds the project)."""
    r = subprocess.run([sys.executable, *argv], cwd=tmp_path, capture_output=True, text=True, timeout=120,
                       env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(REPO) if argv[0] == "-m" else ""})
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith("usage: "), r.stdout[:200]


def test_bad_input_is_one_error_line_and_exit_2_before_spark(tmp_path, capsys):
    missing = str(tmp_path / "no-such-dump")
    for job, argv in (("decode", ["--store", missing, "--out", str(tmp_path / "o")]),
                      ("extract", ["--store", missing, "--out", str(tmp_path / "o")]),
                      ("audit", ["--store", f"b1={missing}", "--out", str(tmp_path / "o")])):
        assert console.console([job, *argv]) == 2, job
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and err[0].startswith(f"{job}: error: ") and "no such file" in err[0], (job, err)
    assert not (tmp_path / "o").exists()
    with pytest.raises(SystemExit) as e:  # argparse's own usage errors: exit 2 as well
        console.console(["extract", "--out", str(tmp_path / "o")])
    assert e.value.code == 2


class _Terminal(io.StringIO):
    def isatty(self):
        return True


def test_progress_line_plain_in_a_log_redrawn_on_a_terminal_and_silent_when_quiet():
    progress.configure("job")
    log = io.StringIO()
    with progress.Phase("scan", 64 << 20, stream=log) as p:
        p.update(16 << 20)
        assert p.text(p.started + 3.0) == "scan: 16.0 MiB of 64.0 MiB (25%), ETA 0:09, 0:03 elapsed"
    lines = log.getvalue().splitlines()
    assert len(lines) == 2 and lines[0].endswith("scan: started, 64.0 MiB") and " in " in lines[1]
    assert "\r" not in log.getvalue()
    tty = _Terminal()
    p = progress.Phase("scan", 64 << 20, stream=tty)
    p.started = 0.0
    p.update(32 << 20)
    p._draw(p.text(2.0))
    p._end("scan: 64.0 MiB in 4.0 s")
    assert tty.getvalue().startswith("\rscan: 32.0 MiB of 64.0 MiB (50%), ETA 0:02") and tty.getvalue().endswith("\n")
    progress.configure("job", quiet=True)
    silent = io.StringIO()
    try:
        with progress.Phase("scan", 1, stream=silent):
            progress.say("not shown")
    finally:
        progress.configure("job")
    assert silent.getvalue() == ""


def test_python_m_on_any_module_of_jobs_answers():
    """``python -m jobs.X``: the jobs (and the console, and the audit package) run; everything else in jobs/ is
    library code, and says so instead of printing nothing."""
    modules = set()
    for path in (REPO / "jobs").rglob("*.py"):
        parts = path.relative_to(REPO).with_suffix("").parts
        if parts[-1] != "__main__":
            modules.add(".".join(parts[:-1] if parts[-1] == "__init__" else parts))
    assert {m for m in modules if console.runnable(m)} == {"jobs", "jobs.audit", *(f"jobs.{j}" for j in console.JOBS
                                                                               if j != "audit")}
    assert "jobs.audit.report" in modules and not console.runnable("jobs.report")


@pytest.mark.parametrize("module", ["jobs.audit.report", "jobs.report"])
def test_python_m_on_library_code_or_no_module_says_where_the_jobs_are(module):
    """The report is written by the audit (jobs.report is gone): --help is a usage text and exit 0, anything
    else one error line and exit 2 (not silence and exit 0, not a traceback)."""
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(REPO)}
    r = subprocess.run([sys.executable, "-m", module, "--help"], capture_output=True, text=True, timeout=120,
                       env=env)
    assert r.returncode == 0 and r.stdout.startswith(f"usage: {cli.PROG} JOB"), (r.stdout, r.stderr)
    assert f"{cli.PROG} JOB --help" in r.stdout and "audit, decode, extract" in r.stdout
    r = subprocess.run([sys.executable, "-m", module, "--store", "x"], capture_output=True, text=True,
                       timeout=120, env=env)
    assert r.returncode == 2 and r.stdout == ""
    assert r.stderr.startswith(f"python -m {module}: error: ") and len(r.stderr.splitlines()) == 1
