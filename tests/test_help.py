"""Every job's --help is written for the people who run it: usage lines name the console command
(``rocketmq-forensics JOB``), every option says what it does, no note is about where code lives, and times are
ISO-8601 everywhere (epoch milliseconds still taken)."""
from __future__ import annotations

import argparse
import os

import pytest

from jobs import console
from runtime import cli


def _help(job: str) -> str:
    parser = cli.add_runtime_arguments(console.job_module(job).build_parser())
    os.environ["COLUMNS"] = "100"
    try:
        return parser.format_help()
    finally:
        os.environ.pop("COLUMNS", None)


@pytest.mark.parametrize("job", console.JOBS)
def test_usage_names_the_console_command(job):
    text = _help(job)
    assert text.startswith(f"usage: rocketmq-forensics {job} "), text[:200]
    assert "python -m jobs" not in text and "spark-submit" not in text.split("\n\n")[0]
    # no developer notes: where modules live, which file formats the output
    for note in ("live here", "jobs/", "datasources/", "store_format.", "helpers"):
        assert note not in text, f"{job} --help mentions {note!r}"


@pytest.mark.parametrize("job", console.JOBS)
def test_every_option_has_help(job):
    parser = cli.add_runtime_arguments(console.job_module(job).build_parser())
    bare = [a.option_strings or [a.dest] for a in parser._actions
            if not isinstance(a, argparse._HelpAction) and not (a.help and a.help.strip())]
    assert not bare, f"{job}: options without help: {bare}"


def test_time_arguments_take_iso_8601_and_epoch_ms_in_every_job():
    iso, ms = "2024-05-01T10:00:00Z", 1714557600000
    for job, argv in (("audit", ["--store", "x", "--out", "o", "--as-of"]),
                      ("query", ["--store", "x", "--from"]), ("extract", ["--store", "x", "--out", "o", "--from"])):
        parser = console.job_module(job).build_parser()
        dest = "as_of" if job == "audit" else "from_time"
        assert getattr(parser.parse_args(argv + [iso]), dest) == ms
        assert getattr(parser.parse_args(argv + [str(ms)]), dest) == ms
        assert "ISO-8601" in _help(job)


def test_a_time_that_does_not_parse_says_what_is_expected(capsys):
    parser = console.job_module("audit").build_parser()
    with pytest.raises(SystemExit):
        parser.parse_args(["--store", "x", "--out", "o", "--as-of", "yesterday"])
    assert "'yesterday' is not a time: give ms since the epoch or ISO-8601" in capsys.readouterr().err
