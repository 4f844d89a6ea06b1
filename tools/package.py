"""Build the zip that ``spark-submit --py-files`` ships to the driver and the executors (and that Spark Connect
sessions get as a Python artifact: runtime/session.py ``ship_project``).

  python tools/package.py [ZIP]   (default dist/rocketmq_forensics.zip; ``make package``)

It holds the project's packages (store_format, decoding, datasources, runtime, jobs) as sources, importable from the zip
itself, each beside its bytecode for the Python that built it (a worker of another version compiles the sources);
third-party dependencies (numpy, pyarrow, deltalake...) must be installed where the Python workers
run (the interpreter PYSPARK_PYTHON names).  What goes in is runtime/session.py's ``write_project_zip``.
"""
from __future__ import annotations

import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from runtime.session import PACKAGES, write_project_zip  # noqa: E402  (imports nothing beyond the standard library)

DEFAULT_ZIP = REPO / "dist" / "rocketmq_forensics.zip"


def build(target: Path = DEFAULT_ZIP) -> Path:
    return write_project_zip(Path(target), REPO)


__all__ = ["DEFAULT_ZIP", "PACKAGES", "build"]

if __name__ == "__main__":
    print(build(Path(sys.argv[1]) if len(sys.argv) > 1 else DEFAULT_ZIP))
