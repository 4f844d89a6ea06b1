"""The jobs (each runs in the one runtime, runtime/cli.py; jobs/console.py is the ``rocketmq-forensics`` console
command)."""
import os as _os
import sys as _sys

# a job's process is a driver, whose Arrow memory comes from jemalloc (decoding.kernels.bound_driver_memory says
# why): chosen before pyarrow loads, so that Arrow's own C++ defaults take it too, which pyarrow.set_memory_pool
# does not reach (73,000 allocations of a 1 GiB audit stayed with mimalloc, and the driver's peak with them).
# Linux wheels have jemalloc; a user's choice stands.
if "pyarrow" not in _sys.modules and _sys.platform == "linux":
    _os.environ.setdefault("ARROW_DEFAULT_MEMORY_POOL", "jemalloc")


def _module_run() -> tuple[str, list[str]] | None:
    """(module, its arguments) when ``python -m`` runs a module of this package; the interpreter imports the
    package first, while sys.argv[0] is still "-m"."""
    argv = getattr(_sys, "orig_argv", [])
    if not _sys.argv or _sys.argv[0] != "-m":
        return None
    for i, a in enumerate(argv[1:], 1):
        if a == "-m" and i + 1 < len(argv):
            target, rest = argv[i + 1], argv[i + 2:]
        elif a.startswith("-m") and len(a) > 2:
            target, rest = a[2:], argv[i + 1:]
        else:
            continue
        return (target, rest) if target == "jobs" or target.startswith("jobs.") else None
    return None


_run = _module_run()
if _run is not None:  # ``python -m jobs.audit.report --help`` would print nothing: library code says what it is
    from jobs.console import not_a_job as _not_a_job, runnable as _runnable

    if not _runnable(_run[0]):
        _sys.exit(_not_a_job(*_run))
