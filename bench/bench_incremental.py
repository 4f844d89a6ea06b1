"""Scheduled audits (issue 41): what an audit with ``--state`` costs after the store grew, against a full audit of
the same store, in one warm local[2] session.

    .venv/bin/python bench/bench_incremental.py [--mib 1024 [4096]] [--append-mib 64] [--rounds 2] [--flows 1]
                                                [--cache /tmp/benchcache] [--results bench/results-incremental.json]

The bench dump of --mib MiB (bench/dump.py) is copied, and its last --append-mib MiB of messages zeroed (cut at a
message's start; later segments removed), its consume queues and index rebuilt from what is left by the project's
writer (as the broker's dispatch built them: the same units and entries, each queue's newest file shorter) and its
consumer and delay offsets held to the queues' ends then: the store as it was the night before.  That store is
audited with a new state (untimed).  Then the messages are put back, as a broker appends them, and each round audits
the grown store without the state (full) and with a copy of the night before's state (incremental), in turn; every
size's stores are made first and each round runs the sizes in turn (the machine's speed drifts by up to 2x within
minutes: a size measured after another would carry the drift into the scaling figure).  Per
run: the audit's own time (after the session starts: AuditResult.phases), its phases, and what the state gave back.
Targets (issue 41): the incremental audit at most 1/10 of the full one; the state at most 5% of the store's bytes;
given two sizes (``--mib 1024 4096``), the larger store's incremental audit within 1.5x of the smaller's.  ``make
bench`` runs it at its --size and four times that (bench/run.py's ``incremental`` part).
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))


def cut_back(store: Path, original: Path, append: int) -> dict:
    """``store`` (a copy of ``original``) as it was before its last ``append`` bytes of messages: zeroed from a
    message's start, later segments removed.  Returns where it was cut."""
    from bench.dump import segment_frames
    from store_format.commitlog import list_segments

    segments = list_segments(store / "commitlog")
    ends = [(s, *segment_frames(s)) for s in segments]
    total = sum(int(e.max(initial=0)) for _, _, e in ends)
    keep = total - append
    for s, starts, stops in ends:
        data_end = int(stops.max(initial=0))
        if keep >= data_end:
            keep -= data_end
            continue
        cut = int(starts[starts >= keep].min()) if (starts >= keep).any() else data_end
        if cut == 0 and s is not segments[0]:
            os.unlink(s.path)
        else:
            with open(s.path, "r+b") as f:  # its end-of-file blank too: written when the segment filled
                f.seek(cut)
                f.write(bytes(os.path.getsize(s.path) - cut))
        keep = -1  # every later segment goes
        if cut:
            where = {"segment": s.name, "file_position": cut, "bytes_cut": total - (s.base_offset + cut)}
    return where


def night_before(store: Path, original: Path, append: int, spec) -> dict:
    """``store`` (a copy of ``original``, the dump of ``spec``) as the broker left it before its last ``append``
    bytes of messages: :func:`cut_back`, then what the broker builds from the commitlog rebuilt from the records
    left (a restarted writer re-dispatches a store whose consume queues and index are gone:
    store_format.write.writer ``_reopen_files``), and no committed or delivered offset past its queue's end."""
    from store_format.layout import SCHEDULE_TOPIC
    from store_format.write.writer import StoreWriter

    where = cut_back(store, original, append)
    shutil.rmtree(store / "consumequeue")
    shutil.rmtree(store / "index", ignore_errors=True)
    w = StoreWriter(store, spec.writer(), append=True)
    for key, table in w.consumer_offsets.items():
        topic = key.rsplit("@", 1)[0]
        for qid, offset in table.items():
            table.put(qid, min(offset, w.queue_table.get((topic, qid), 0)))
    for level, offset in w.delay_offsets.items():  # level L is SCHEDULE_TOPIC_XXXX's queue L - 1
        w.delay_offsets.put(level, min(offset, w.queue_table.get((SCHEDULE_TOPIC, level - 1), 0)))
    w.close()
    for bak in (store / "config").glob("*.bak"):  # the writer's persist keeps them, the dump never had them
        if not (original / "config" / bak.name).exists():
            bak.unlink()
    return where


def audit(spark, store: Path, out: Path, state: Path | None) -> dict:
    from jobs.audit import job as audit_job

    args = ["--store", f"b1={store}", "--out", str(out), "--no-report"]
    if state is not None:
        args += ["--state", str(state)]
    t0 = time.perf_counter()
    result = audit_job.run(spark, audit_job.build_parser().parse_args(args))
    wall = time.perf_counter() - t0
    summary = json.loads((out / "summary.json").read_text())
    return {"seconds": round(wall, 2), "phases": {k: round(v, 2) for k, v in result.phases},
            "exit": result.exit_code, "verdict": summary["brokers"][0]["verdict"]["banner"],
            "since_last_run": summary["brokers"][0].get("since_last_run")}


def size_of(folder: Path) -> int:
    return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file())


INCREMENTAL_TARGET = 0.1  # issue 41: the incremental audit's own time at most 1/10 of the full audit's
SCALING_TARGET = 1.5  # ... and appending to a 4x larger store within 1.5x of the smaller one's incremental time
STATE_TARGET = 0.05  # the state at most 5% of the store's bytes


def prepare(spark, mib: float, append_mib: float, flows: float, cache: Path, work: Path) -> dict:
    """One size's stores in ``work``: the night before audited with a new state and the grown store once in full
    (both untimed)."""
    from bench.dump import DumpSpec, ensure_dump

    spec = DumpSpec(size_mib=mib, cover=True, flows=flows)
    meta = ensure_dump(spec, Path(cache))
    store = work / "store"
    shutil.copytree(meta["store"], store)
    where = night_before(store, Path(meta["store"]), int(append_mib * (1 << 20)), spec)
    night = work / "state-night"
    before = audit(spark, store, work / "out-night", night)  # the night before: untimed
    shutil.rmtree(store)
    shutil.copytree(meta["store"], store)  # the messages appended since
    audit(spark, store, work / "out-warm", None)  # untimed: a session's audits get faster for a run or two
    return {"mib": mib, "append_mib": append_mib, "work": work, "store": store, "night": night, "meta": meta,
            "where": where, "before": before, "runs": []}


def measure_round(spark, size: dict, r: int) -> None:
    """One round of one size: a full and an incremental audit of the grown store (with a copy of the night before's
    state), in turn."""
    work, store = size["work"], size["store"]
    full = audit(spark, store, work / f"out-full-{r}", None)
    state = work / f"state-{r}"
    shutil.copytree(size["night"], state)
    inc = audit(spark, store, work / f"out-inc-{r}", state)
    size["runs"].append({"full": full, "incremental": inc, "ratio": round(inc["seconds"] / full["seconds"], 3)})
    print(f"{size['mib']:g} MiB, round {r + 1}: full {full['seconds']:.1f} s, incremental {inc['seconds']:.1f} s "
          f"({size['runs'][-1]['ratio']:.2f}x)", file=sys.stderr, flush=True)


def figures_of(size: dict) -> dict:
    """One size's figures from its rounds: the best full and incremental times, the state's share of the store."""
    runs = size["runs"]
    best_full = min(x["full"]["seconds"] for x in runs)
    best_inc = min(x["incremental"]["seconds"] for x in runs)
    store_bytes, state_bytes = size_of(size["store"]), size_of(size["night"])
    return {"mib": size["mib"], "append_mib": size["append_mib"], "dump": size["meta"]["spec"], "cut": size["where"],
            "night_before": {k: size["before"][k] for k in ("exit", "verdict")}, "store_bytes": store_bytes,
            "state_bytes": state_bytes, "state_share": round(state_bytes / store_bytes, 5), "runs": runs,
            "full_seconds": best_full, "incremental_seconds": best_inc, "ratio": round(best_inc / best_full, 3)}


def figures(mibs: list[float], append_mib: float = 64, rounds: int = 2, flows: float = 1.0,
            cache: Path = Path("/tmp/benchcache"), spark=None) -> dict:
    """Issue 41's three figures over the sizes ``mibs`` (smallest first), in one warm local[2] session, every size's
    stores made first and each round running the sizes in turn: the first size's incremental/full ratio and state
    share, and, with two sizes or more, the largest size's incremental time against the first's (``scaling``) --
    each with its target and whether it is met."""
    from runtime.session import build_session

    own = spark is None
    spark = spark or build_session("bench-incremental", master="local[2]")
    works = []
    try:
        sizes = []
        for m in sorted(mibs):
            works.append(Path(tempfile.mkdtemp(prefix="bench-incremental-")))
            sizes.append(prepare(spark, m, append_mib, flows, cache, works[-1]))
        for r in range(rounds):  # the sizes in turn in each round: the machine's speed drifts alike for them all
            for size in sizes:
                measure_round(spark, size, r)
        steps = [figures_of(size) for size in sizes]
    finally:
        for work in works:
            shutil.rmtree(work, ignore_errors=True)
        if own:
            spark.stop()
    first, last = steps[0], steps[-1]
    scaling = round(last["incremental_seconds"] / first["incremental_seconds"], 3) if len(steps) > 1 else None
    return {**first, "steps": steps, "target": INCREMENTAL_TARGET, "met": first["ratio"] <= INCREMENTAL_TARGET,
            "state_target": STATE_TARGET, "state_met": max(s["state_share"] for s in steps) <= STATE_TARGET,
            "scaling": scaling, "scaling_target": SCALING_TARGET,
            "scaling_met": None if scaling is None else scaling <= SCALING_TARGET}


def markdown(result: dict) -> str:
    """The figures of :func:`figures` as BENCHMARKS.md shows them."""
    steps = result.get("steps") or [result]
    out = ["| store | appended | full s | incremental s | ratio | state | state share | night before |",
           "|---|---|---|---|---|---|---|---|"]
    for s in steps:
        out.append(f"| {s['mib']:g} MiB | {s['append_mib']:g} MiB | {s['full_seconds']:.1f} | "
                   f"{s['incremental_seconds']:.1f} | {s['ratio']:.2f}x | {s['state_bytes'] / 1e6:,.1f} MB | "
                   f"{s['state_share'] * 100:.2f}% | {s['night_before']['verdict']} |")
    met = {True: "met", False: "not met", None: "not measured"}
    out += ["", f"Incremental against full: {result['ratio']:.2f}x (target <= {result['target']}: "
                f"{met[result['met']]}); the state at most {max(s['state_share'] for s in steps) * 100:.2f}% "
                f"of the store (target <= {result['state_target'] * 100:.0f}%: {met[result['state_met']]}); "
                + ("the largest store's incremental audit against the smallest's: "
                   f"{result['scaling']:.2f}x (target <= {result['scaling_target']}: {met[result['scaling_met']]})."
                   if result.get("scaling") is not None else "one size: its scaling not measured.")]
    return "\n".join(out)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--mib", type=float, nargs="+", default=[1024],
                    help="store sizes in MiB (default 1024; two or more: the scaling figure, largest against smallest)")
    ap.add_argument("--append-mib", type=float, default=64)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--flows", type=float, default=1.0, help="the dump's transaction and send-back rates, times the "
                    "generator's (bench/dump.py; 10: the scale bench's dumps)")
    ap.add_argument("--cache", default="/tmp/benchcache")
    ap.add_argument("--results", default=str(REPO / "bench" / "results-incremental.json"))
    args = ap.parse_args(argv)
    result = figures(args.mib, args.append_mib, args.rounds, args.flows, Path(args.cache))
    result = {"command": "bench/bench_incremental.py " + " ".join(argv if argv is not None else sys.argv[1:]),
              "when": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "load": os.getloadavg()[0], **result}
    Path(args.results).write_text(json.dumps(result, indent=1) + "\n")
    print(markdown(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
