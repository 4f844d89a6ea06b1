"""The audit job (``python -m jobs.audit``, ``spark-submit jobs/audit/__main__.py``): see :mod:`jobs.audit.job`.

The package: ``job`` (the command line and the run: planning, the survey and scan stages, writing), ``plan``
(what is read and how it is cut into Spark tasks), ``survey`` and ``scan`` (the tasks), ``tasks`` (running task
objects on Spark), ``context`` (the driver's view of a dump and the facts the families share), ``findings``
(the findings and metrics schemas, Severity, the registry of checks), ``checks/`` (one module per check family),
``inputs`` (store roots and the chain of custody) and ``report`` (report.html)."""
from .job import AuditResult, build_parser, main, run  # noqa: F401
from .inputs import input_files, resolve_stores  # noqa: F401
