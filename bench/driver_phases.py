"""Peak driver RssAnon per phase of one audit (issue 40's driver memory): ``python bench/driver_phases.py STORE OUT
[AUDIT ARGS...]`` runs ``jobs.audit.job.run`` in this process (``local[2]``, ``--executor driver --no-report``, then
the audit arguments given, e.g. ``--as-of MS``) with a thread sampling /proc/self/status every 20 ms, and prints one
JSON line: seconds, the peak, and the peak under each progress line (the phase that line announces and the work
after it, until the next one: under ``transactions: N s`` is the delays family, the one after it)."""
from __future__ import annotations

import json
import sys
import threading
import time

_state = {"phase": "start", "peaks": {}}


def _anon_mib() -> int:
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("RssAnon:")) // 1024


def _sample() -> None:
    while True:
        p = _state["phase"]
        _state["peaks"][p] = max(_state["peaks"].get(p, 0), _anon_mib())
        time.sleep(0.02)


def main(store: str, out: str, *extra: str) -> dict:
    threading.Thread(target=_sample, daemon=True).start()
    from jobs.audit import job
    from runtime import progress as P
    from runtime.session import build_session

    enter, say = P.Phase.__enter__, job.progress

    def phase_enter(self):
        _state["phase"] = self.label.split(" (")[0]
        return enter(self)

    def progress(msg, *a, **k):
        _state["phase"] = msg
        return say(msg, *a, **k)

    P.Phase.__enter__, job.progress = phase_enter, progress
    spark = build_session("driver-phases", "local[2]")
    started = time.time()
    job.run(spark, job.build_parser().parse_args(["--store", store, "--out", out, "--no-report",
                                                  "--executor", "driver", *extra]))
    _state["phase"] = "end"
    time.sleep(0.1)
    return {"seconds": round(time.time() - started, 1), "peak": max(_state["peaks"].values()),
            "phases": _state["peaks"]}


if __name__ == "__main__":
    print(json.dumps(main(*sys.argv[1:])))
