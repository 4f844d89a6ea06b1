"""The one job runtime: every job's command line, session, outputs and exit code (runtime/ never imports jobs/:
the console that dispatches to the jobs by name is jobs/console.py).

A job is a module ``jobs/<name>.py`` (or a package: ``jobs/audit/``) that defines ``build_parser()``,
``run(spark, args) -> JobResult`` and ``main(argv=None) = cli.main(NAME, build_parser, run, argv, ...)``.
:func:`main` parses the arguments (the job's own, plus ``--quiet`` and ``--debug``, which every job takes), runs
the job's ``prepare(args)`` (checks that need no Spark: the inputs, the output folder; they fail in a second
instead of after the JVM's start), builds the session from spark-conf/ (runtime/session.py; not when the job says
it needs none, e.g. a query's point lookups), runs the job, prints the result's summary line on stdout and
returns its exit code.  The same things have the same flags everywhere: ``--store PATH|NAME=PATH`` (repeatable,
several paths each; runtime/stores.py names the brokers), ``--out``, ``--overwrite``, ``--format`` and
``--config broker.conf``.

Exit codes: 0 done (clean), 1 done but nothing matched / findings / differences (each job says which), 2 could
not run (bad usage, unreadable input, refused output, an input that changed during the run (runtime/custody.py), a
failed Spark job): one line ``<job>: error: <reason>``
on stderr (``<job>: error: <path>: <reason>`` for input that cannot be read), the traceback only with
``--debug``; a failed Spark job's line is its root cause (runtime/causes.py: ``No space left on device
(IOException), writing file:/...``), a full disk or a MemoryError names the file and where the job was.  130 or
143: interrupted by SIGINT or SIGTERM (runtime/interrupts.py): Spark's jobs cancelled, one line saying what was
interrupted and what was kept, no traceback.  Progress goes to stderr (runtime/progress.py), the summary to stdout;
a job whose stdout is its output (query's messages, compare's and replay's JSON) prints that itself and returns
an empty summary.

Every job runs the same three ways: ``rocketmq-forensics <job> ...`` (the console command, jobs/console.py,
``[project.scripts]`` in pyproject.toml), ``python -m jobs.<job> ...`` and ``spark-submit jobs/<job>.py ...``
(``jobs/audit/__main__.py`` for the audit; jobs/_bootstrap.py makes a checkout importable there).
"""
from __future__ import annotations

import argparse
import os
import sys
import traceback
from dataclasses import dataclass
from pathlib import Path

from store_format import fs
from store_format.brokerconf import number_argument
from store_format.layout import JAVA_INT

from .output import FORMATS

EXIT_OK, EXIT_NOTHING, EXIT_FAILED = 0, 1, 2
EXIT_FINDINGS = EXIT_NOTHING  # 1 means "findings" for the audit and trend, "nothing matched" for exports
PROG = "rocketmq-forensics"


@dataclass
class JobResult:
    """What a job did: the line it reports on stdout (empty: it printed its output itself) and its exit code."""

    summary: str
    exit_code: int


class UsageError(ValueError):
    """Arguments or input the job cannot use (exit 2, one line)."""


# ---------------------------------------------------------------------------------------------------------
# The shared flags


def add_store_arguments(parser: argparse.ArgumentParser, *, what: str = "", required: bool = True) -> None:
    """``--store``: one or more paths per flag, the flag repeatable; ``NAME=PATH`` names the broker."""
    parser.add_argument("--store", action="extend", nargs="+", required=required, metavar="PATH",
                        help=(what or "a broker store root (holding commitlog/, consumequeue/, index/, config/...) or "
                              "a folder of several brokers' store roots")
                        + "; NAME=PATH names the broker (default: brokerName from the dump's broker.properties, "
                          "else its folder); repeatable")


def add_output_arguments(parser: argparse.ArgumentParser, *, default_format: str = "parquet",
                         required: bool = True, formats: tuple[str, ...] = FORMATS) -> None:
    parser.add_argument("--out", required=required, metavar="DIR", type=location_argument,
                        help="output folder (refused when it exists and is not empty, unless --overwrite)")
    if formats:
        parser.add_argument("--format", choices=formats, default=default_format,
                            help=f"table format of the output (default {default_format})"
                                 + ("; jsonl writes BINARY columns as base64" if "jsonl" in formats else ""))
    parser.add_argument("--overwrite", action="store_true", help="replace an existing output folder")


# option types of the ids and counts the jobs take, each refused outside what RocketMQ holds it in (the times and
# offsets: jobs.extract.parse_time, offset_range)
queue_id_argument = number_argument(JAVA_INT, "a queue id (a Java int)")
count_argument = number_argument((1, JAVA_INT[1]), "a count (a positive Java int)")


# the jobs' arguments that name dumps and outputs (Spark opens them, on executors or a Connect server): --store is
# parsed by runtime/stores.py (``NAME=PATH``), the others are Locations from the parser (:func:`location_argument`)
PATH_ARGUMENTS = ("store", "out", "history", "input", "repair", "manifest")


def _absolute(path: str) -> str:
    """A local path made absolute: Spark's executors and a Spark Connect server resolve a relative path against
    their own working folder (an executor's work folder, the server's), not the one the user typed it in.  URIs
    (``scheme://...``) are left as they are, and so is every ``..`` (the kernel resolves ``link/..`` to the parent
    of the link's target, which a lexical normalisation would change: an output meant inside a store must still be
    seen there and refused)."""
    if "://" in path or os.path.isabs(path):
        return path
    return os.path.join(os.getcwd(), path)


def location_argument(text: str) -> fs.Location:
    """The one place a path the user typed (``--out``, ``--history``, ``--input``...) becomes a Location: made
    absolute (:func:`_absolute`), resolved, and carrying that spelling (``Location.as_typed``: what messages name
    and what the output's guard resolves as the OS does).  A path no file system can open (an unknown scheme, another
    host's ``file://``) is a usage error: argparse's usage, then ``argument --out: <reason>``, exit 2."""
    try:
        return fs.resolve(_absolute(text))
    except ValueError as e:  # StoreFormatError: an unknown scheme, another host's file:// URI
        raise argparse.ArgumentTypeError(fs.error_line(e)) from None


def absolute_paths(args: argparse.Namespace) -> argparse.Namespace:
    """The command line's local paths given as strings made absolute, in place (:func:`_absolute`):
    ``--store NAME=PATH`` keeps its name; a Location (:func:`location_argument`) is absolute already."""
    from .stores import split_name

    def absolute(path):
        return _absolute(path) if isinstance(path, str) else path

    def absolute_arg(name, value):
        if name == "store" and isinstance(value, str):
            store_name, path = split_name(value)
            if store_name is not None:
                return f"{store_name}={absolute(path)}"
        return absolute(value)

    for name in PATH_ARGUMENTS:
        value = getattr(args, name, None)
        if isinstance(value, list):
            setattr(args, name, [absolute_arg(name, v) for v in value])
        elif value is not None:
            setattr(args, name, absolute_arg(name, value))
    return args


def add_runtime_arguments(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """``--quiet`` and ``--debug``, which every job takes; and a mistyped option's suggestion
    (:func:`suggest_options`)."""
    flags = {o for a in parser._actions for o in a.option_strings}
    if "--quiet" not in flags:
        parser.add_argument("--quiet", action="store_true", help="no progress on stderr (errors are still said)")
    if "--debug" not in flags:
        parser.add_argument("--debug", action="store_true",
                            help="show the Python traceback when the job fails (default: one error line)")
    return suggest_options(parser)


def did_you_mean(word: str, choices) -> str | None:
    """The choice closest to a mistyped ``word``, or None when none is close."""
    import difflib

    close = difflib.get_close_matches(word, list(choices), n=1, cutoff=0.6)
    return close[0] if close else None


def suggest_options(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """``parser`` whose usage errors name, for each option of the command line it does not know, the closest one it
    does ("unrecognized arguments: --uniq-kee 1; did you mean --uniq-key (not --uniq-kee)?", and the same after
    "the following arguments are required: --store" when ``--stroe`` was typed): argparse on Python 3.11 suggests
    nothing.  Every job's parser gets it here, through :func:`add_runtime_arguments`."""
    usage_error, parse = parser.error, parser.parse_args
    typed: list[str] = []

    def parse_args(args=None, namespace=None):
        typed[:] = [str(a) for a in (sys.argv[1:] if args is None else args)]
        return parse(args, namespace)

    def error(message: str):
        known = [o for a in parser._actions for o in a.option_strings]
        hints = []
        for word in typed:
            name = word.split("=", 1)[0]
            if not name.startswith("--") or name in known or any(o.startswith(name) for o in known):
                continue  # a value, an option it knows, or an abbreviation of one
            close = did_you_mean(name, [o for o in known if o.startswith("--")])
            if close is not None:
                hints.append(f"did you mean {close} (not {name})?")
        usage_error("; ".join([message, *dict.fromkeys(hints)]))

    parser.parse_args, parser.error = parse_args, error
    return parser


# ---------------------------------------------------------------------------------------------------------
# Running a job


def main(name: str, build_parser, run, argv=None, *, prepare=None, needs_spark=None, prog: str | None = None,
         sources: bool = True) -> int:
    """Parse, prepare, start the session (when ``needs_spark(args)``, default always; with the data sources
    registered unless ``sources`` is False), run; the exit code."""
    parser = add_runtime_arguments(build_parser())
    if prog:
        parser.prog = prog
    args = absolute_paths(parser.parse_args(argv))  # bad usage exits 2 here, argparse's own code
    from . import interrupts, progress

    progress.configure(name, quiet=args.quiet)
    interrupts.reset()
    interrupts.install()  # SIGINT/SIGTERM: one line, exit 130/143 (runtime/interrupts.py)
    from .commit import JobRun

    spark = None
    try:
        # one run from the first check to the end: ``prepare`` claims the outputs (runtime/commit.py), ``run`` writes
        # them beside themselves and commits; any failure or interrupt leaves them as they were
        with JobRun(name) as job_run:
            if prepare is not None:
                prepare(args)
            if needs_spark is None or needs_spark(args):
                from .session import build_session

                with interrupts.handlers_kept():
                    spark = build_session(f"{PROG} {name}", sources=sources)
                interrupts.attach(spark)  # the SparkContext's start set a SIGINT handler of its own
            result = run(spark, args)
            interrupts.check()  # an interrupt swallowed on the way (a py4j finalizer) ends the run uncommitted
            if not job_run.done and job_run.participants:
                if isinstance(result, JobResult) and result.exit_code != EXIT_FAILED:
                    job_run.commit()
                else:
                    job_run.fail("the job failed")
            job_run.done = True
    except BrokenPipeError:  # the reader of stdout went away (| head): nothing more to say
        return EXIT_OK
    except BaseException as e:  # noqa: BLE001 - any failure is "could not run": never Python's exit 1
        if interrupts.interrupted_by(e) is not None:  # the interrupt, or what it broke on the way out
            return interrupts.stop(name, e, spark)
        if not isinstance(e, Exception):  # SystemExit and the like: as they were
            raise
        return report_failure(name, e, args.debug)
    if isinstance(result, int):
        raise TypeError(f"{name}.run returned an exit code; jobs return a cli.JobResult")
    if result.summary:
        print(result.summary)
    return result.exit_code


def report_failure(name: str, e: BaseException, debug: bool) -> int:
    """The one line of a failed run (its traceback only with --debug); the exit code 2."""
    if debug:
        traceback.print_exc(file=sys.stderr)
    from . import progress
    from .causes import cause_line

    cause = cause_line(e, progress.current())  # a Spark error's root cause, a full disk, out of memory
    if cause is not None:
        print(f"{name}: error: {cause}" + ("" if debug or not _is_failure_of_job(e) else
                                           " (--debug shows the traceback)"), file=sys.stderr)
    elif isinstance(e, (ValueError, OSError)):  # bad usage, input or output (StoreFormatError is a ValueError)
        from store_format.fs import error_line  # unreadable input: '<path>: <reason>'

        print(f"{name}: error: {error_line(e)}", file=sys.stderr)
    else:  # a failure of the job itself (a bug, a failed Spark job)
        text = str(e).strip().splitlines()[0] if str(e).strip() else ""
        print(f"{name}: error: {type(e).__name__}: {text}" + ("" if debug else " (--debug shows the traceback)"),
              file=sys.stderr)
    return EXIT_FAILED


def _is_failure_of_job(e: BaseException) -> bool:
    """Not bad usage or input (whose line says all): a failed Spark job, out of memory, a bug."""
    return not isinstance(e, (ValueError, OSError)) or isinstance(e, MemoryError)


# ---------------------------------------------------------------------------------------------------------
# The console command, as the tools print it (the console itself, which knows the jobs, is jobs/console.py)


def console_command() -> str:
    """How a command the tools print for the user starts, so that it runs as printed: the console script
    installed beside this Python (``.venv/bin/rocketmq-forensics`` after ``make setup``, on PATH or not),
    shell-quoted; ``python -m jobs`` with this Python where no script is installed (a zip on --py-files)."""
    import shlex

    script = Path(sys.executable).parent / PROG  # not resolved: a venv's python is a link out of the venv
    if script.is_file() and os.access(script, os.X_OK):
        return shlex.quote(str(script))
    return f"{shlex.quote(sys.executable)} -m jobs"


def printed_command(job: str, argv: list[str]) -> str:
    """A command for one of the jobs, as the tools print it for the user: it runs when pasted (the installed
    script, every argument shell-quoted)."""
    import shlex

    return " ".join([console_command(), shlex.quote(job), *(shlex.quote(a) for a in argv)])
