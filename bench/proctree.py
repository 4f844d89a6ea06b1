"""This process and its descendants, read from /proc: CPU seconds spent and peak resident memory per process.

Only the tree below a given process counts: the machine is shared, and other sessions' Spark JVMs and Python
workers run beside ours.
"""
from __future__ import annotations

import os


def _stats() -> dict[int, tuple[int, int]]:
    """pid -> (parent pid, utime+stime+cutime+cstime in clock ticks) of every live process."""
    stats = {}
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                with open(f"/proc/{d}/stat") as f:
                    fields = f.read().rsplit(")", 1)[1].split()
            except OSError:
                continue
            stats[int(d)] = (int(fields[1]), sum(int(x) for x in fields[11:15]))
    return stats


def descendants(root: int | None = None, stats: dict | None = None) -> set[int]:
    """``root`` (default this process) and every live process below it."""
    stats = _stats() if stats is None else stats
    mine, todo = set(), [os.getpid() if root is None else root]
    while todo:
        pid = todo.pop()
        mine.add(pid)
        todo += [c for c, (ppid, _) in stats.items() if ppid == pid and c not in mine]
    return mine


def tree_cpu(root: int | None = None) -> float:
    """CPU seconds used so far by ``root`` (default this process) and every live descendant (the Spark JVM, its
    Python workers) including their reaped children: what a measurement costs whatever else shares the cores."""
    stats = _stats()
    return sum(stats[p][1] for p in descendants(root, stats) if p in stats) / os.sysconf("SC_CLK_TCK")


def _status_bytes(pid: int, field: str) -> int:
    """A ``kB`` field of /proc/PID/status in bytes; 0 when the process is gone."""
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith(field + ":"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


def peak_rss(pid: int) -> int:
    """VmHWM (peak resident set) of ``pid`` in bytes; 0 when it is gone.  It counts the pages of files the
    process maps (a 1 GiB segment read through mmap is resident page cache, not memory the process holds)."""
    return _status_bytes(pid, "VmHWM")


def anon_rss(pid: int) -> int:
    """RssAnon of ``pid`` in bytes now: its heap, stacks and private copies, without mapped files' pages."""
    return _status_bytes(pid, "RssAnon")


def cmdline(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def spark_peaks(root: int | None = None) -> dict[str, int]:
    """Peak resident memory of the Spark processes below ``root`` (default this process), in bytes: the driver
    JVM, the largest Python worker (and daemon), the driver's Python process (``root``) itself, and the largest
    executor JVM (on a cluster whose daemons run below ``root``; 0 in local mode, where the driver executes)."""
    root = os.getpid() if root is None else root
    tree = descendants(root)
    lines = {p: cmdline(p) for p in tree}
    jvm = [p for p, c in lines.items() if "org.apache.spark.deploy.SparkSubmit" in c]
    workers = [p for p, c in lines.items() if "pyspark.daemon" in c or "pyspark.worker" in c]
    executors = [p for p, c in lines.items() if "org.apache.spark.executor.CoarseGrainedExecutorBackend" in c]
    out = {}
    # *_peak_bytes: VmHWM; *_anon_bytes: anonymous memory at this moment (PeakSampler keeps the largest seen)
    for name, pids in (("driver_jvm", jvm), ("python_worker", workers), ("driver_python", [root]),
                       ("executor_jvm", executors)):
        out[f"{name}_peak_bytes"] = max(map(peak_rss, pids), default=0)
        out[f"{name}_anon_bytes"] = max(map(anon_rss, pids), default=0)
    return out


class PeakSampler:
    """``spark_peaks`` polled every ``interval`` seconds on a background thread, keeping each maximum: a Python
    worker that exits before the end still counts, and the anonymous memory's peak is the largest sample."""

    def __init__(self, root: int | None = None, interval: float = 0.5):
        import threading

        self.root, self.interval = root, interval
        self.peaks: dict[str, int] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="peak-sampler", daemon=True)

    def _sample(self):
        for k, v in spark_peaks(self.root).items():
            self.peaks[k] = max(self.peaks.get(k, 0), v)

    def _run(self):
        while not self._stop.wait(self.interval):
            self._sample()

    def __enter__(self) -> "PeakSampler":
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join()
        self._sample()
