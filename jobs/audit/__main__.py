"""``python -m jobs.audit`` and ``spark-submit jobs/audit/__main__.py`` (the application file)."""
import sys
from pathlib import Path

if __package__ in (None, ""):  # run as a script (spark-submit): make the project importable
    _root = Path(__file__).resolve().parent.parent.parent
    if (_root / "jobs" / "__init__.py").exists():
        sys.path.insert(0, str(_root))

from jobs.audit import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main())
