"""What every job's command line shares: the output arguments and ``main``'s exit-code contract.

A job module defines ``build_parser()``, ``run(spark, args) -> result`` (a :class:`JobResult`) and
``main(argv=None) = cli.main(NAME, build_parser, run, argv)``.  ``cli.main`` parses the arguments, builds
the session from spark-conf/ (jobs/session.py), runs the job, prints the result's one-line summary on
stdout and returns its exit code.  Exit codes: 0 done (clean), 1 done but nothing matched / findings
(each job says which), 2 could not run (bad usage, unreadable input, refused output, a failed Spark job);
logs and tracebacks go to stderr.
"""
from __future__ import annotations

import argparse
import os
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


# the jobs' arguments that name dumps and outputs (Spark opens them, on executors or a Connect server)
PATH_ARGUMENTS = ("store", "out", "history", "input", "repair", "manifest")


def absolute_paths(args: argparse.Namespace) -> argparse.Namespace:
    """The command line's local paths made absolute, in place: Spark's executors and a Spark Connect server
    resolve a relative path against their own working folder (an executor's work folder, the server's), not
    the one the user typed it in.  URIs (``scheme://...``) are left as they are."""
    def absolute(path):
        return path if not isinstance(path, str) or "://" in path else os.path.abspath(path)

    for name in PATH_ARGUMENTS:
        value = getattr(args, name, None)
        if isinstance(value, list):
            setattr(args, name, [absolute(v) for v in value])
        elif value is not None:
            setattr(args, name, absolute(value))
    return args


def main(name: str, build_parser, run, argv=None, *, prepare=None) -> int:
    """``prepare(args)``, if given, runs before the session starts (checks that need no Spark, such as
    :func:`jobs.output.prepare_output`, fail in a second instead of after the JVM's start)."""
    args = absolute_paths(build_parser().parse_args(argv))  # bad usage exits 2 here, argparse's own code
    from .session import build_session

    try:
        if prepare is not None:
            prepare(args)
        spark = build_session(f"rocketmq-forensics {name}")
        result = run(spark, args)
    except (StoreFormatError, OutputError, OSError) as e:  # the input's or the user's fault: no traceback
        print(f"{name}: error: {e}", file=sys.stderr)
        return EXIT_FAILED
    except Exception as e:  # any failure is "could not run": never Python's exit 1, which means "nothing"
        traceback.print_exc(file=sys.stderr)
        print(f"{name}: error: {e}", file=sys.stderr)
        return EXIT_FAILED
    print(result.summary)
    return result.exit_code
