"""The audit job (``python -m jobs.audit``, ``spark-submit jobs/audit/__main__.py``).

Being rebuilt as a package (issue "The audit at scan speed"); until the new engine lands, the job is the
previous engine in ``jobs/audit_legacy.py`` (whose outputs the new one must reproduce)."""
from jobs.audit_legacy import *  # noqa: F401,F403
from jobs.audit_legacy import AuditResult, build_parser, input_files, main, resolve_stores, run  # noqa: F401
