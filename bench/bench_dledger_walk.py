"""The DLedger walk's cost per record: ``dledger_items`` with the compiled framer (as the sources and the audit call
it) over every data file of a DLedger ``data/`` folder, ``REPS`` times; prints wall and CPU microseconds per record.

    python bench/bench_dledger_walk.py <dledger-<id>/data folder> <REPS>
    python bench/bench_dledger_walk.py --ledger [--scalar] <dledger-<id> folder> <REPS>

``--ledger``: DLedger's own walk and recovery instead (store_format.dledger: ``DLedgerLog.table`` and ``recover``, what
the dledger family and the recovery prediction run; ``--scalar``: ``entries`` and ``recover`` without a framer, the
per-entry Python walk, which also runs on a checkout from before the table), microseconds per entry.

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


def ledger(home: str, reps: int, scalar: bool) -> None:
    from store_format import dledger as D

    if not scalar:
        from store_format.commitlog import dledger_header_run  # not on a checkout from before the table
    load_compiled()
    wall, cpu, entries = time.perf_counter(), time.process_time(), 0
    for _ in range(reps):
        log = D.DLedgerLog(home) if scalar else D.DLedgerLog(home, header_run=dledger_header_run(CompiledFramer))
        items = log.entries() if scalar else log.table()
        entries += len(log.recover(items).walked if not scalar else log.recover(items).entries)
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    print(f"{'scalar' if scalar else 'table'}: wall {wall * 1e6 / entries:.2f} us, cpu {cpu * 1e6 / entries:.2f} us "
          f"per entry ({entries} entries)")


if __name__ == "__main__":
    if sys.argv[1] == "--ledger":
        scalar = sys.argv[2] == "--scalar"
        ledger(sys.argv[2 + scalar], int(sys.argv[3 + scalar]), scalar)
    else:
        main(sys.argv[1], int(sys.argv[2]))
