"""``python -m jobs.audit`` and ``spark-submit jobs/audit/__main__.py`` (the application file)."""
import os
import sys

if __package__ in (None, ""):  # spark-submit jobs/audit/__main__.py: make the project importable
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # jobs/, the bootstrap's
    import _bootstrap  # noqa: F401,E402  (jobs/_bootstrap.py)

from jobs.audit import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main())
