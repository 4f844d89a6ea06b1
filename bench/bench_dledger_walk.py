"""The DLedger walk's cost per record: ``dledger_items`` with the compiled framer (as the sources and the audit call
it) over every data file of a DLedger ``data/`` folder, ``REPS`` times, wall and CPU microseconds per record.

    python bench/bench_dledger_walk.py <dledger-n0/data folder> <REPS>

A larger log to time: ``bench/make_dledger_log.py <dir> <MiB>`` (the fixture's entries repeated)."""
import sys, time
from pathlib import Path
from store_format.commitlog import dledger_items
from store_format.rolled import open_bytes
from store_format import fs
from udfs.kernels import CompiledFramer, load_compiled
load_compiled()
paths = sorted(Path(sys.argv[1]).iterdir()); reps = int(sys.argv[2])
bufs = [(p.name, p.read_bytes()) for p in paths]
t = time.perf_counter(); c = time.process_time(); n = 0
for _ in range(reps):
    for name, buf in bufs:
        n += int((dledger_items(buf, name, int(name), framer=CompiledFramer).kinds == 0).sum())
dt = time.perf_counter() - t; dc = time.process_time() - c
print(f"wall {dt * 1e6 / n:.2f} us, cpu {dc * 1e6 / n:.2f} us per record ({n} records)")
