"""The audit job (``python -m jobs.audit``, ``spark-submit jobs/audit/__main__.py``): see :mod:`jobs.audit.job`.

The package, from the ground up (tests/test_layers.py holds it to these floors): ``findings`` (the findings and
metrics schemas, Severity, the registry of checks), ``contract`` (what a check family declares), ``inputs`` (the
chain of custody over the stores' files); ``tasks`` (the task protocol and where tasks run), ``plan`` (what is read
and how it is cut into tasks), ``resend`` (the messages to re-send); ``routes`` (the routed files: consume-queue
units, index entries); ``survey`` and ``scan`` (the two stages' tasks and their builders); ``checks/`` (one module
per check family, and their registry); ``context`` (the driver's view of a dump and the facts the families share),
``groups``, ``report`` and ``verdict`` (what the report says); ``job`` (the command line and the run)."""

_FROM_JOB = ("AuditResult", "build_parser", "main", "run")


def __getattr__(name: str):
    """The job's names, imported when first asked for: a Python worker running the audit's tasks imports
    ``jobs.audit.tasks``, ``scan`` and the checks, never the driver's run (its report and pandas)."""
    if name in _FROM_JOB:
        from . import job

        return getattr(job, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
