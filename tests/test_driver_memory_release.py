"""The audit's driver gives freed memory back between its steps (decoding.kernels.release_freed_memory, called by
jobs/audit/job.py after each stage and each family): glibc keeps freed heap pages resident otherwise, so a driver's
peak was the sum of its steps' high waters (issue 40's driver memory); and as its arrays are freed
(decoding.kernels.bound_driver_memory, called by runtime.session.build_session)."""
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


BOUND_CHILD = """
import sys
import numpy as np
import pyarrow as pa
from decoding.kernels import bound_driver_memory

def anon():
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("RssAnon:")) // 1024

done = bound_driver_memory() if sys.argv[1] == "bound" else {}
big = np.ones(30 << 20, np.uint8)
del big  # by default glibc now serves arrays up to 30 MiB from its heaps, and keeps them there when freed
arrays = [np.ones(20 << 20, np.uint8) for _ in range(12)]
held = arrays[1::2]  # live arrays between the freed ones: no heap can shrink past them
before = anon()
del arrays
print(before - anon(), pa.default_memory_pool().backend_name, sorted(done))
"""


def _bound_child(mode: str, **env) -> tuple[int, str, str]:
    out = subprocess.run([sys.executable, "-c", BOUND_CHILD, mode], cwd=REPO, capture_output=True, text=True,
                         check=True, env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin", **env})
    freed, pool, done = out.stdout.strip().split(maxsplit=2)
    return int(freed), pool, done


@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="reads RssAnon from /proc")
def test_a_driver_gives_back_each_freed_array_when_it_is_freed():
    """decoding.kernels.bound_driver_memory, as runtime.session.build_session calls it in every driver: 6 arrays of
    20 MiB freed between live ones go back at once (by default they stay resident, no trim reaching them)."""
    freed, _, _ = _bound_child("bound")
    assert freed >= 100, freed  # 120 MiB freed
    freed, _, _ = _bound_child("default")
    assert freed < 30, freed


def test_a_driver_allocates_arrow_memory_from_jemalloc_unless_the_user_chose():
    import pyarrow as pa

    try:
        pa.jemalloc_memory_pool()
    except NotImplementedError:
        pytest.skip("this pyarrow has no jemalloc")
    assert _bound_child("bound")[1:] == ("jemalloc", "['arrow_pool', 'mmap_threshold', 'trim_threshold']")
    assert _bound_child("bound", ARROW_DEFAULT_MEMORY_POOL="system", MALLOC_MMAP_THRESHOLD_="1048576",
                        MALLOC_TRIM_THRESHOLD_="131072")[1:] == ("system", "[]")


REUSE_CHILD = """
import os
import resource
import sys
import tempfile
from decoding.kernels import bound_driver_memory

done = bound_driver_memory() if sys.argv[1] == "bound" else {}
with tempfile.TemporaryFile() as f:
    f.write(bytes(8 << 20))
    f.flush()
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    for _ in range(40):  # a file's zeros read 8 MiB at a time and let go, as the state's look reads them
        block = os.pread(f.fileno(), 8 << 20, 0)
        del block
    print(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
"""


@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="glibc's mallopt")
def test_a_driver_reuses_a_buffer_it_freed_under_the_mmap_threshold():
    """With the mmap threshold fixed at 16 MiB, glibc's trim threshold stays at 128 KiB unless it is set too: each 8
    MiB buffer freed at the heap's top was given back and the next faulted in again, a page fault per 4 KiB."""
    out = subprocess.run([sys.executable, "-c", REUSE_CHILD, "bound"], cwd=REPO, capture_output=True, text=True,
                         check=True, env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"})
    faults = int(out.stdout)
    assert faults < 40 * 2048 // 4, faults  # 40 buffers of 2,048 pages: faulted once, not 40 times


SESSION_CHILD = """
import numpy as np
from runtime.session import build_session

def anon():
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("RssAnon:")) // 1024

spark = build_session("bound-driver-test", "local[1]")
big = np.ones(30 << 20, np.uint8)
del big
arrays = [np.ones(20 << 20, np.uint8) for _ in range(12)]
held = arrays[1::2]
before = anon()
del arrays
print(before - anon())
spark.stop()
"""


@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="reads RssAnon from /proc")
def test_the_session_builder_bounds_its_driver():
    """A process that built its session with runtime.session.build_session gives its freed arrays back (a child of
    its own: tests/test_bench_smoke.py runs the decode bench in the tests' process, which tunes it the other way,
    decoding.kernels.tune_allocator)."""
    import os

    env = {k: v for k, v in os.environ.items() if k != "MALLOC_MMAP_THRESHOLD_"}
    out = subprocess.run([sys.executable, "-c", SESSION_CHILD], cwd=REPO, capture_output=True, text=True, check=True,
                         env={**env, "PYTHONPATH": str(REPO)}, timeout=300)
    assert int(out.stdout.split()[-1]) >= 100, out.stdout
