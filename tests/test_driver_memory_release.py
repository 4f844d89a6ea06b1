"""The audit's driver gives freed memory back between its steps (decoding.kernels.release_freed_memory, called by
jobs/audit/job.py after each stage and each family): glibc keeps freed heap pages resident otherwise, so a driver's
peak was the sum of its steps' high waters (issue 40's driver memory)."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]

CHILD = """
import numpy as np
from decoding.kernels import release_freed_memory

def anon():
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("RssAnon:")) // 1024

big = np.ones(16 << 20, np.uint8)
del big  # glibc raises its mmap threshold past 16 MiB: the arrays below come from the heap
arrays = [np.ones(1 << 20, np.uint8) for _ in range(300)]
last = arrays[-1]  # held: the heap cannot shrink from its top
del arrays
before = anon()
release_freed_memory()
print(before, anon())
"""


@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="reads RssAnon from /proc")
def test_freed_heap_pages_go_back_to_the_os():
    out = subprocess.run([sys.executable, "-c", CHILD], cwd=REPO, capture_output=True, text=True, check=True,
                         env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"})
    before, after = map(int, out.stdout.split())
    assert before - after > 200, (before, after)  # ~299 MiB of freed 1 MiB arrays
