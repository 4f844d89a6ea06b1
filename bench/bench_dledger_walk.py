"""The DLedger walk's cost per record: ``dledger_items`` with the compiled framer (as the sources and the audit call
it) over every data file of a DLedger ``data/`` folder, ``REPS`` times; prints wall and CPU microseconds per record.

    python bench/bench_dledger_walk.py <dledger-<id>/data folder> <REPS>

A larger log to time: ``bench/make_dledger_log.py <dir> <MiB>`` (the fixture's entries repeated).
"""
from __future__ import annotations

import sys
import time
from pathlib import Path

from store_format.commitlog import dledger_items
from decoding.kernels import CompiledFramer, load_compiled


def main(folder: str, reps: int) -> None:
    load_compiled()
    files = [(p.name, p.read_bytes()) for p in sorted(Path(folder).iterdir())]
    wall, cpu, records = time.perf_counter(), time.process_time(), 0
    for _ in range(reps):
        for name, buf in files:
            records += int((dledger_items(buf, name, int(name), framer=CompiledFramer).kinds == 0).sum())
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    print(f"wall {wall * 1e6 / records:.2f} us, cpu {cpu * 1e6 / records:.2f} us per record ({records} records)")


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]))
