"""What the audit's ``__CRC32#`` check costs a range of 4.x records, beside decoding them (issue 32).

    .venv/bin/python bench/bench_propcrc.py [--size-mb 256] [--repeat 5]

Over bench_decode.py's cached buffer of ~250-byte 4.x records (no record carries ``__CRC32#``), in the audit's own
batches of 262,144 rows (jobs/audit/scan.py), one core, best of ``--repeat``, alternating the two decodes so that
load on the shared machine falls on both:

  decode before   decoding.kernels.decode_buffer of the columns a range task decoded before the check (DECODED without
                  ``crc_property``)
  decode now      the same with ``crc_property``: the decode flags the records whose last 20 bytes start with the
                  key while it copies their properties; on a 4.x range that flag is the whole check
  full check      store_format.propcrc.check_crc_many over every record: what the check costs a 5.x range whose
                  records all carry the property (CRC-32 of each record's bytes)

Each line: MB/s of records, and the share of the first decode's time, by the wall clock and by this thread's CPU
time (the machine is shared: compare the shares, not MB/s).
"""
from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))

from bench_decode import load  # noqa: E402
from jobs.audit.scan import DECODED, _DECODE_ROWS  # noqa: E402
from store_format import propcrc  # noqa: E402
from decoding import kernels as K  # noqa: E402


def timed(fn, repeat: int) -> tuple[float, float]:
    """Best (wall, thread CPU) seconds of ``fn()`` over ``repeat`` runs."""
    best = (float("inf"), float("inf"))
    for _ in range(repeat):
        w, c = time.perf_counter(), time.thread_time()
        fn()
        best = min(best, (time.perf_counter() - w, time.thread_time() - c))
    return best


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--size-mb", type=int, default=256)
    p.add_argument("--repeat", type=int, default=5)
    args = p.parse_args(argv)
    data, starts = load(args.size_mb)
    sizes = (starts[1:] - starts[:-1]).tolist() + [len(data) - int(starts[-1])]
    import numpy as np

    sizes = np.array(sizes, np.int64)
    batches = [(starts[a:a + _DECODE_ROWS], sizes[a:a + _DECODE_ROWS]) for a in range(0, len(starts), _DECODE_ROWS)]
    K.load_compiled()
    before = tuple(c for c in DECODED if c != "crc_property")
    for cols in (before, DECODED):
        K.decode_buffer(data, *batches[0], columns=cols)  # warm
    flags = [K.decode_buffer(data, s, n, columns=("crc_property",)).column("crc_property") for s, n in batches]
    assert not any(f.to_numpy(zero_copy_only=False).any() for f in flags)  # 4.x: no record carries it
    mb = len(data) / 1e6
    runs: dict[str, list] = {"decode before": [], "decode now": []}
    for _ in range(args.repeat):  # alternated: a burst of load elsewhere falls on both
        for name, cols in (("decode before", before), ("decode now", DECODED)):
            runs[name].append(timed(lambda: [K.decode_buffer(data, s, n, columns=cols) for s, n in batches], 1))
    results = {name: min(r) for name, r in runs.items()}
    results["full check"] = timed(lambda: [propcrc.check_crc_many(data, s, n) for s, n in batches], args.repeat)
    wall0, cpu0 = results["decode before"]
    print(f"{len(starts):,} records, {mb:,.0f} MB, {len(batches)} batches; load average "
          f"{os.getloadavg()[0]:.1f}")
    for name, (wall, cpu) in results.items():
        print(f"  {name:<13} {mb / wall:9,.0f} MB/s wall  {mb / cpu:9,.0f} MB/s CPU   "
              f"{100 * wall / wall0:7.2f}% / {100 * cpu / cpu0:7.2f}% of the decode before (wall / CPU)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
