"""``python -m jobs.audit`` and ``spark-submit jobs/audit/__main__.py`` (the application file)."""
import os
import sys

if __package__ in (None, ""):  # spark-submit jobs/audit/__main__.py: make the project importable
    _jobs = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # jobs/, the bootstrap's
    if os.path.isfile(os.path.join(_jobs, "_bootstrap.py")):  # else a copy outside the checkout: --py-files
        sys.path.insert(0, _jobs)
        import _bootstrap  # noqa: F401,E402  (jobs/_bootstrap.py)

from jobs.audit import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main())
