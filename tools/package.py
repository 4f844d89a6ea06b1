"""Build the zip that ``spark-submit --py-files`` ships to the driver and the executors.

  python tools/package.py [ZIP]   (default dist/rocketmq_forensics.zip; ``make package``)

It holds the project's packages (store_format, udfs, datasources, jobs) as sources, importable from the zip
itself; third-party dependencies (numpy, pyarrow, deltalake...) must be installed where the Python workers
run (the interpreter PYSPARK_PYTHON names).
"""
from __future__ import annotations

import sys
import zipfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
PACKAGES = ("store_format", "udfs", "datasources", "jobs")
DEFAULT_ZIP = REPO / "dist" / "rocketmq_forensics.zip"


def build(target: Path = DEFAULT_ZIP) -> Path:
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_suffix(".zip.tmp")
    with zipfile.ZipFile(tmp, "w", zipfile.ZIP_DEFLATED) as zf:
        for package in PACKAGES:
            for path in sorted((REPO / package).rglob("*.py")):
                if "__pycache__" not in path.parts:
                    zf.write(path, path.relative_to(REPO).as_posix())
    tmp.replace(target)  # a reader never sees a half-written zip
    return target


if __name__ == "__main__":
    print(build(Path(sys.argv[1]) if len(sys.argv) > 1 else DEFAULT_ZIP))
