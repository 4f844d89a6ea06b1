"""What every job's command line shares: the output arguments and ``main``'s exit-code contract.

A job module defines ``build_parser()``, ``run(spark, args) -> result`` (a :class:`JobResult`) and
``main(argv=None) = cli.main(NAME, build_parser, run, argv)``.  ``cli.main`` parses the arguments, builds
the session from spark-conf/ (jobs/session.py), runs the job, prints the result's one-line summary on
stdout and returns its exit code.  Exit codes: 0 done (clean), 1 done but nothing matched / findings
(each job says which), 2 could not run (bad usage, unreadable input, refused output, a failed Spark job):
one line on stderr, ``<job>: error: <path>: <reason>`` for unreadable input; a Python traceback only with
``--debug`` (which every job takes).
"""
from __future__ import annotations

import argparse
import sys
import traceback
from dataclasses import dataclass

from store_format.errors import StoreFormatError

from .output import FORMATS, OutputError

EXIT_OK, EXIT_NOTHING, EXIT_FAILED = 0, 1, 2
EXIT_FINDINGS = EXIT_NOTHING  # 1 means "findings" for the audit and trend, "nothing matched" for exports


@dataclass
class JobResult:
    """What a job did: the line it reports and the exit code it earns."""

    summary: str
    exit_code: int


def add_output_arguments(parser: argparse.ArgumentParser, *, default_format: str = "parquet",
                         required: bool = True) -> None:
    parser.add_argument("--out", required=required, metavar="DIR",
                        help="output folder (refused when it exists and is not empty, unless --overwrite)")
    parser.add_argument("--format", choices=FORMATS, default=default_format,
                        help=f"table format of the output (default {default_format}); jsonl writes BINARY "
                             "columns as base64")
    parser.add_argument("--overwrite", action="store_true", help="replace an existing output folder")


def add_debug_argument(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    if not any("--debug" in a.option_strings for a in parser._actions):
        parser.add_argument("--debug", action="store_true",
                            help="show the Python traceback when the job fails (default: one error line)")
    return parser


def report_failure(name: str, e: BaseException, debug: bool) -> int:
    """The one-line message of a failed run (its traceback only with --debug); the exit code 2."""
    from store_format.fs import error_line

    if debug:
        traceback.print_exc(file=sys.stderr)
    if isinstance(e, (StoreFormatError, OutputError, OSError)):  # the input's or the user's fault
        print(f"{name}: error: {error_line(e)}", file=sys.stderr)
    else:  # any failure is "could not run": never Python's exit 1, which means "nothing"
        text = str(e).strip().splitlines()[0] if str(e).strip() else ""
        print(f"{name}: error: {type(e).__name__}: {text}" + ("" if debug else " (--debug shows the traceback)"),
              file=sys.stderr)
    return EXIT_FAILED


def main(name: str, build_parser, run, argv=None, *, prepare=None) -> int:
    """``prepare(args)``, if given, runs before the session starts (checks that need no Spark, such as
    :func:`jobs.output.prepare_output`, fail in a second instead of after the JVM's start)."""
    args = add_debug_argument(build_parser()).parse_args(argv)  # bad usage exits 2 here, argparse's own code
    from .session import build_session

    try:
        if prepare is not None:
            prepare(args)
        spark = build_session(f"rocketmq-forensics {name}")
        result = run(spark, args)
    except Exception as e:  # noqa: BLE001
        return report_failure(name, e, getattr(args, "debug", False))
    print(result.summary)
    return result.exit_code
