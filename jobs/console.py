"""The console command ``rocketmq-forensics JOB ...`` (``python -m jobs JOB ...``): the jobs as subcommands.

It lives with the jobs because it names them (:data:`JOBS`) and imports them by name; the runtime each job runs
in (runtime/cli.py ``main``) knows none of them."""
from __future__ import annotations

import ast
import importlib
import sys
from pathlib import Path

from runtime.cli import EXIT_FAILED, EXIT_OK, PROG, did_you_mean

JOBS = ("audit", "decode", "extract", "query", "replay", "compare", "trend")  # the console's subcommands


def job_module(name: str):
    return importlib.import_module(f"jobs.{name}")


def console(argv=None) -> int:
    """``rocketmq-forensics JOB ...``: the jobs as subcommands (``python -m jobs JOB ...`` too)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help"):
        print(overview())
        return EXIT_OK if argv else EXIT_FAILED
    if argv[0] == "--version":
        from importlib.metadata import PackageNotFoundError, version

        try:
            print(f"{PROG} {version(PROG)}")
        except PackageNotFoundError:
            print(f"{PROG} (not installed: running from a checkout)")
        return EXIT_OK
    job, rest = argv[0], argv[1:]
    if job not in JOBS:
        close = did_you_mean(job, JOBS)
        print(f"{PROG}: error: no job {job!r}{f' (did you mean {close}?)' if close else ''}; the jobs are "
              f"{', '.join(JOBS)} ({PROG} --help)", file=sys.stderr)
        return EXIT_FAILED
    return job_module(job).main(rest, prog=f"{PROG} {job}")


def runnable(module: str) -> bool:
    """Whether ``python -m MODULE`` runs something: a package with ``__main__.py`` or a module with a
    ``__main__`` block (the jobs, the console); the rest of jobs/ is library code."""
    path = Path(__file__).resolve().parent.parent.joinpath(*module.split("."))
    if path.is_dir():
        return (path / "__main__.py").is_file()
    source = path.with_suffix(".py")
    if not source.is_file():
        return False
    main = ast.parse('if __name__ == "__main__": pass').body[0].test
    return any(isinstance(node, ast.If) and ast.dump(node.test) == ast.dump(main)
               for node in ast.parse(source.read_text(encoding="utf-8")).body)


def not_a_job(module: str, argv: list[str]) -> int:
    """``python -m jobs.X`` where X runs nothing (library code, or no such module): say what it is and where the
    jobs are -- a usage text with exit 0 for ``--help``, one ``error:`` line with exit 2 otherwise."""
    path = Path(__file__).resolve().parent.parent.joinpath(*module.split("."))
    source = path / "__init__.py" if path.is_dir() else path.with_suffix(".py")
    if source.is_file():
        doc = (ast.get_docstring(ast.parse(source.read_text(encoding="utf-8"))) or "").strip()
        first = " ".join(doc.split("\n\n")[0].split()).replace("``", "").split(". ")[0].rstrip(".:")
        what = f"{module} is library code, not a job" + (f" ({first})" if first else "")
    else:
        what = f"there is no module {module}"
    jobs = f"the jobs are {', '.join(JOBS)}: {PROG} JOB --help, or python -m jobs.JOB --help"
    if any(a in ("-h", "--help") for a in argv):
        print(f"usage: {PROG} JOB [options]   (python -m jobs.JOB [options])\n\n{what}; {jobs}.")
        return EXIT_OK
    print(f"python -m {module}: error: {what}; {jobs}", file=sys.stderr)
    return EXIT_FAILED


def overview() -> str:
    """The console's --help: one line per job, from each job's parser."""
    lines = [f"usage: {PROG} JOB [options]   ({PROG} JOB --help for a job's options)", "",
             "Offline forensics for Apache RocketMQ broker stores.  Jobs:", ""]
    for job in JOBS:
        first = (job_module(job).build_parser().description or "").strip().split("\n")[0]
        if first.lower().startswith(f"{job}: "):
            first = first[len(job) + 2:]
        lines.append(f"  {job:<9} {first[:1].upper()}{first[1:]}")
    lines += ["", "Also: python -m jobs.JOB ..., or spark-submit jobs/JOB.py ... (jobs/audit/__main__.py for the "
                  "audit).", "Exit codes: 0 done and clean, 1 findings / nothing matched / differences, 2 could not "
                  "run, 130/143 interrupted (SIGINT/SIGTERM)."]
    return "\n".join(lines)
