"""Throughput of the ``rocketmq-commitlog`` source on local[2], next to the raw read speed of the same files.

    .venv/bin/python bench/bench_datasource.py [--mb 1024] [--segment-mb 256] [--split-mb 0 128] [--repeat 2]

Generates once (cached in bench/cache/) bench/dump.py's dump (``make bench``'s traffic, written by the bulk writer:
8 topics x 8 queues, tags, keys, UNIQ_KEYs, delays, transactions, some IPv6 producers; ~479-byte records) in
``--segment-mb`` segments, then measures in one run, best of ``--repeat``:

* raw read: every segment file read with the page cache warm, into one reusable buffer (``readinto``, the
  baseline: the kernel copies every byte), and a numpy sum over an mmap of each file (every byte reaches the CPU);
* one core, no Spark: the bulk framer alone (``salvage_arrays``, CRC checked), the data source's task function
  (``read()`` of every range, Arrow batches built) for positions and decoded rows, and the decode kernel
  (``decoding.kernels.decode_buffer``) alone over every message;
* Spark local[2], positions-only and fully decoded (``materialize=decoded``) rows, each ending in the ``noop``
  sink so every column reaches the JVM: ``read_commitlog`` with one range a segment (the default for these
  256 MiB segments: one pass), and with segments cut into ranges (its first pass finding the segment ends, the second pass with the ends
  known, both together), next to the transport ceiling: the same rows, schema and partitions replayed from
  one prebuilt batch (bench/replay_source.py), i.e. what Spark alone costs.

Prints MB/s of commitlog, messages/s, each figure's ratio to the raw read, the load average (other work on the
same cores changes every figure) and the CPU seconds the measurement took in this process tree.

    .venv/bin/python bench/bench_datasource.py --scan [--cache bench/cache] [--before-code DIR] [--rounds 3]

``--scan``: the source's targets on ``make bench``'s dump (bench/run.py's: 1 GiB segments, the newest one partly
written; read in place from ``--cache``), as a user runs it: ``read_commitlog`` with its default options on
local[2], positions-only ``count()`` and every decoded column into the ``noop`` sink, MB/s of message bytes.
Each round is a fresh Python process and session (the code measured importable by the Spark workers): the
session's first run of each (cold) and ``--repeat`` more (warm), with the first pass (segment ends) and the
transport ceilings (the same rows replayed) beside them; ``--before-code`` (a checkout or ``git archive`` of
the code before a change) is measured in alternate rounds, so before/after ratios come from the same run.
In this process first: the raw read and the framers (numpy bulk framer, and the compiled one where the code
has it) over the same written bytes, one core.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
CODE = Path(sys.argv[sys.argv.index("--code") + 1]).resolve() if "--code" in sys.argv[:-1] else REPO
sys.path.insert(0, str(REPO))
if CODE != REPO:
    sys.path.insert(0, str(CODE))  # the code measured (its datasources, decoding, store_format) before this one

import numpy as np  # noqa: E402

from bench.dump import DumpSpec, ensure_dump  # noqa: E402
from bench.proctree import tree_cpu  # noqa: E402
from store_format.commitlog import KIND_MESSAGE, list_segments, salvage_arrays  # noqa: E402
from store_format.fs import ReadOnlyMap

CACHE = REPO / "bench" / "cache"


def message_columns() -> str:
    """The ``columns`` option for what RocketMQ's MessageDecoder.decode yields (every stored field, properties
    parsed, msgId); the kernel's status columns are never shipped by the source."""
    from decoding import kernels as K

    return ",".join(c for c in K.MESSAGE_DECODER_COLUMNS if c not in K.STATUS_COLUMNS)


def raw_readinto(files: list[Path], limits: list[int] | None = None) -> float:
    """Seconds to read every file (or its first ``limits[i]`` bytes: the written part of a preallocated
    segment) into one reusable buffer."""
    buf = memoryview(bytearray(8 << 20))
    t = time.perf_counter()
    for i, p in enumerate(files):
        left = float("inf") if limits is None else limits[i]
        with open(p, "rb", buffering=0) as f:
            while left > 0 and (n := f.readinto(buf[:int(min(left, len(buf)))])):
                left -= n
    return time.perf_counter() - t


def raw_mmap_sum(files: list[Path]) -> float:
    t = time.perf_counter()
    for p in files:
        with ReadOnlyMap(p) as m:
            data = np.frombuffer(m.buf, np.uint8)
            data.sum()
            del data
    return time.perf_counter() - t


def framing_only(segments) -> float:
    t = time.perf_counter()
    for seg in segments:
        with ReadOnlyMap(seg.path) as m:
            salvage_arrays(m.buf, seg.name, seg.base_offset)
    return time.perf_counter() - t


def task_function(path: str, options: dict) -> tuple[float, float]:
    """Every range's ``read()`` in this process, one after the other: (wall, CPU) seconds.  The planner finds
    the segment ends first (not timed), as the first pass does for a Spark scan."""
    from datasources.commitlog import CommitLogReader

    reader = CommitLogReader({"path": path, **options})
    parts = reader.partitions()
    t, c = time.perf_counter(), time.process_time()
    for p in parts:
        for _ in reader.read(p):
            pass
    return time.perf_counter() - t, time.process_time() - c


def decode_kernel(segments):
    """decoding.kernels over every message with the data source's decoded columns, in its batch size: a function
    timing the kernel alone (the frames are found beforehand)."""
    from datasources.commitlog import DEFAULT_BATCH_ROWS, _kernel_columns
    from decoding import kernels as K

    cols = _kernel_columns("decoded", False) + K.STATUS_COLUMNS
    frames = []
    for seg in segments:
        data = seg.path.read_bytes()
        items = salvage_arrays(data, seg.name, seg.base_offset)
        msg = items.kinds == KIND_MESSAGE
        frames.append((data, items.positions[msg], items.sizes[msg]))

    def run() -> float:
        t = time.perf_counter()
        for data, starts, sizes in frames:
            for a in range(0, len(starts), DEFAULT_BATCH_ROWS):
                K.decode_buffer(data, starts[a:a + DEFAULT_BATCH_ROWS], sizes[a:a + DEFAULT_BATCH_ROWS], columns=cols)
        return time.perf_counter() - t
    return run


def timed(fn):
    """``fn`` as a function returning its run time."""
    def run() -> float:
        t = time.perf_counter()
        fn()
        return time.perf_counter() - t
    return run


def best(fn, repeat: int) -> float:
    return min(fn() for _ in range(repeat))


def framing_compiled(segments, limits) -> float | None:
    """The compiled framer (decoding.kernels.CompiledFramer) over each segment's written bytes, CRC checked; None
    where the code measured has none."""
    try:
        from decoding.kernels import CompiledFramer
    except ImportError:
        return None
    t = time.perf_counter()
    for seg, limit in zip(segments, limits):
        with ReadOnlyMap(seg.path) as m:
            salvage_arrays(m.buf, seg.name, seg.base_offset, limit=limit, framer=CompiledFramer)
    return time.perf_counter() - t


def framing_numpy(segments, limits) -> float:
    t = time.perf_counter()
    for seg, limit in zip(segments, limits):
        with ReadOnlyMap(seg.path) as m:
            salvage_arrays(m.buf, seg.name, seg.base_offset, limit=limit)
    return time.perf_counter() - t


def scan_round(path: str, repeat: int, ceilings: bool) -> list[dict]:
    """One session's figures (in this process, the code measured first on sys.path): the source's positions
    count and decoded noop write, the session's first run of each and ``repeat`` more, as rows
    {what, run, s, cpu, load}."""
    from datasources.twopass import read_commitlog
    from runtime.session import build_session

    # compile or load the decoder here first, so a cold run is a session's first, not numba's first ever
    from decoding import kernels as K
    segment = sorted(Path(path, "commitlog").iterdir())[0]
    head = segment.open("rb").read(1 << 20)
    items = salvage_arrays(head, segment.name, int(segment.name))
    msg = items.kinds == KIND_MESSAGE
    K.decode_buffer(head, items.positions[msg], items.sizes[msg])
    rows = []

    def run(what: str, fn, times: int, first: int = 0):
        for k in range(times):
            load0, c, t = os.getloadavg()[0], tree_cpu(), time.perf_counter()
            fn()
            t = time.perf_counter() - t
            rows.append({"what": what, "run": first + k, "s": t, "cpu": tree_cpu() - c,
                         "load": (load0 + os.getloadavg()[0]) / 2})
            print(f"    {what} #{first + k}: {t:.2f} s", file=sys.stderr)

    spark = build_session("bench-datasource-scan", master="local[2]",
                          extra={"spark.ui.enabled": "false", "spark.driver.memory": "2g"})

    def count():
        return read_commitlog(spark, path, materialize="positions").count()

    def noop(df):
        df.write.format("noop").mode("overwrite").save()

    run("positions count", count, 1 + repeat)
    run("decoded noop", lambda: noop(read_commitlog(spark, path, materialize="decoded")), 1 + repeat)
    run("decoded count", lambda: read_commitlog(spark, path, materialize="decoded").count(), repeat)
    if ceilings:
        from pyspark.sql import functions as F

        from bench.replay_source import NAME as REPLAY, ReplaySource
        from datasources.twopass import commitlog_ends

        for first_pass in ("here", "spark"):
            run(f"first pass (commitlog_ends, first_pass={first_pass})",
                lambda: commitlog_ends(spark, path, first_pass=first_pass), repeat)
        ends = commitlog_ends(spark, path)
        run("positions count, second pass (ends known)",
            lambda: read_commitlog(spark, path, ends=ends, materialize="positions").count(), repeat)
        run("decoded noop, second pass (ends known)",
            lambda: noop(read_commitlog(spark, path, ends=ends, materialize="decoded")), repeat)
        spark.dataSource.register(ReplaySource)
        per_part = read_commitlog(spark, path, ends=ends, materialize="positions") \
            .groupBy(F.spark_partition_id().alias("p")).count().orderBy("p").collect()
        for what, mat in (("positions count", "positions"), ("decoded noop", "decoded"), ("decoded count", "decoded")):
            replay = spark.read.format(REPLAY).options(path=str(segment), materialize=mat, partitionRows=",".join(
                str(r["count"]) for r in per_part)).load()
            run(f"{what}: transport ceiling (same rows replayed)",
                (lambda: replay.count()) if what.endswith("count") else (lambda: noop(replay)), repeat)
    spark.stop()
    return rows


def scan(args) -> int:
    """--scan: see the module docstring."""
    meta = ensure_dump(DumpSpec(args.mb), args.cache)
    root = args.cache / DumpSpec(args.mb).key
    path = str(root / "store")
    if args.child_json:  # one round, in this process
        rows = scan_round(path, args.repeat, args.ceilings)
        Path(args.child_json).write_text(json.dumps(rows))
        return 0
    segments = list_segments(root / "store" / "commitlog")
    limits = meta["segment_data_bytes"]
    files = [s.path for s in segments]
    mb = meta["record_bytes"] / 1e6
    print(f"store: {path}\n{mb:.0f} MB of records in {len(files)} segments (written: {limits}), "
          f"{meta['messages']:,} messages", file=sys.stderr)
    inproc = []

    def record(what, fn):
        runs = []
        for _ in range(args.repeat):
            load0, c = os.getloadavg()[0], time.process_time()
            t = fn()
            if t is None:
                return
            runs.append((t, time.process_time() - c, (load0 + os.getloadavg()[0]) / 2))
        inproc.append((what,) + min(runs))
        print(f"  {what}: {min(runs)[0]:.2f} s", file=sys.stderr)

    raw_readinto(files, limits)  # the page cache warm
    record("raw read: readinto a reusable buffer (baseline)", lambda: raw_readinto(files, limits))
    record("1 core: numpy bulk framer (salvage_arrays, CRC checked)", lambda: framing_numpy(segments, limits))
    framing_compiled(segments[-1:], limits[-1:])  # numba's disk cache loaded (or the code compiled) untimed
    record("1 core: compiled framer (CompiledFramer, CRC checked)", lambda: framing_compiled(segments, limits))
    codes = [("after", CODE)] + ([("before", args.before_code.resolve())] if args.before_code else [])
    spark_rows = []
    for r in range(args.rounds):
        for label, code in (codes if r % 2 == 0 else codes[::-1]):
            out = Path(os.environ.get("TMPDIR", "/tmp")) / f"bench-datasource-scan-{os.getpid()}-{label}-{r}.json"
            env = {**os.environ, "PYSPARK_PYTHON": os.environ.get("PYSPARK_PYTHON", sys.executable),
                   "PYTHONPATH": os.pathsep.join(filter(None, [str(code), os.environ.get("PYTHONPATH")]))}
            print(f"  round {r + 1}, {label} ({code})", file=sys.stderr)
            cmd = [sys.executable, str(Path(__file__).resolve()), "--scan", "--code", str(code), "--mb",
                   str(args.mb), "--cache", str(args.cache), "--repeat", str(args.repeat), "--child-json", str(out)]
            if args.ceilings and label == "after":
                cmd.append("--ceilings")
            subprocess.run(cmd, env=env, check=True, cwd=str(code))
            spark_rows += [{**row, "code": label, "round": r} for row in json.loads(out.read_text())]
            out.unlink()
    raw = inproc[0][1]
    print(f"\n{'what':66} {'s':>6} {'MB/s':>7} {'x raw':>6} {'CPU s':>6} {'load':>5}")
    for what, t, cpu, load in inproc:
        print(f"{what:66} {t:6.2f} {mb / t:7.0f} {raw / t:6.3f} {cpu:6.2f} {load:5.1f}")
    print(f"local[2], {args.rounds} rounds (a fresh session each): the session's first run (cold), the best and the "
          f"median of the {args.repeat} warm runs (all rounds)")
    print(f"{'what':58} {'code':>6} {'cold s':>7} {'MB/s':>6} {'warm s':>7} {'MB/s':>6} {'median':>6} "
          f"{'x raw':>6} {'CPU s':>6} {'load':>5}")
    cold_first = ("positions count", "decoded noop")  # each run first in its session: run 0 is cold

    def warm(rows: list, what: str) -> list:
        return [r for r in rows if r["what"] == what and (r["run"] > 0 or what not in cold_first)]

    for what in dict.fromkeys(r["what"] for r in spark_rows):
        for label, _ in codes:
            rows = [r for r in spark_rows if r["what"] == what and r["code"] == label]
            if not rows:
                continue
            cold = [r["s"] for r in rows if r["run"] == 0 and what in cold_first]
            runs = sorted(warm(rows, what), key=lambda r: r["s"])
            best, med = runs[0], runs[len(runs) // 2]
            cold_s = float(np.median(cold)) if cold else float("nan")
            print(f"{what:58} {label:>6} {cold_s:7.2f} {mb / cold_s:6.0f} {best['s']:7.2f} {mb / best['s']:6.0f} "
                  f"{mb / med['s']:6.0f} {raw / best['s']:6.3f} {best['cpu']:6.2f} "
                  f"{np.mean([r['load'] for r in rows]):5.1f}")
    if args.before_code:
        for what in ("positions count", "decoded noop", "decoded count"):
            per_round = [min(r["s"] for r in warm(spark_rows, what) if r["code"] == "before" and r["round"] == k) /
                         min(r["s"] for r in warm(spark_rows, what) if r["code"] == "after" and r["round"] == k)
                         for k in range(args.rounds)]
            print(f"speed-up after/before, {what} (best warm run of each round): "
                  + ", ".join(f"{x:.2f}x" for x in per_round))
    print(f"in-process: compiled framer vs numpy bulk framer: "
          f"{inproc[1][1] / inproc[2][1]:.2f}x wall, {inproc[1][2] / inproc[2][2]:.2f}x CPU" if len(inproc) > 2 else "")
    return 0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--mb", type=int, default=1024)
    ap.add_argument("--segment-mb", type=int, default=256)
    ap.add_argument("--split-mb", type=int, nargs="+", default=[0, 128],
                    help="splitSize values to compare, 0 = the data source's default (256 MiB: one range a 256 MiB segment); "
                         "128 cuts each segment in two, so read_commitlog runs its first pass")
    ap.add_argument("--repeat", type=int, default=2)
    ap.add_argument("--no-check-crc", action="store_true", help="also measure checkCrc=false scans")
    ap.add_argument("--materialize", nargs="+", default=["positions", "message", "decoded"],
                    choices=["positions", "message", "decoded"],
                    help="positions; message: materialize=decoded with the columns RocketMQ's MessageDecoder.decode "
                         "yields (every stored field, properties parsed, msg_id); decoded: every decoded column")
    ap.add_argument("--no-local", action="store_true", help="skip the one-core measurements")
    ap.add_argument("--scan", action="store_true", help="the source's targets on make bench's dump (see above)")
    ap.add_argument("--cache", type=Path, default=CACHE, help="--scan: where the dump is cached (read in place)")
    ap.add_argument("--before-code", type=Path, help="--scan: also measure this checkout (the code before a change)")
    ap.add_argument("--rounds", type=int, default=3, help="--scan: fresh sessions per code measured")
    ap.add_argument("--ceilings", action="store_true", help="--scan: also the first pass alone and the transport "
                    "ceilings (the code after only)")
    ap.add_argument("--code", type=Path, help=argparse.SUPPRESS)  # the checkout measured (read before parsing)
    ap.add_argument("--child-json", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.scan:
        return scan(args)
    # bench/run.py's traffic; 3% short of --mb so that the records fill the segments without rolling into one more
    meta = ensure_dump(DumpSpec(args.mb * 0.97, segment_mib=args.segment_mb), CACHE)
    root = Path(meta["store"]).parent
    segments = list_segments(root / "store" / "commitlog")
    files = [s.path for s in segments]
    mb, n = meta["commitlog_bytes"] / 1e6, meta["messages"]
    print(f"store: {mb:.0f} MB in {len(files)} segments, {n:,} messages, {meta['record_bytes'] / n:.0f} bytes "
          f"each on average", file=sys.stderr)
    results = []

    def record(what, fn, rows=None):
        """Best of --repeat runs: wall seconds, and this process's CPU seconds (for in-process work, what a
        quiet core would take; other helpers' work on the same 2 cores stretches the wall clock)."""
        load0 = os.getloadavg()[0]
        runs = []
        for _ in range(args.repeat):
            c = tree_cpu()
            t = fn()
            runs.append(t if isinstance(t, tuple) else (t, tree_cpu() - c))
        t, cpu = min(runs)
        results.append((what, t, cpu, rows, (load0 + os.getloadavg()[0]) / 2))
        print(f"  {what}: {t:.2f} s, {cpu:.2f} CPU s", file=sys.stderr)

    raw_readinto(files)  # warm the page cache
    record("raw read: readinto a reusable buffer (baseline)", lambda: raw_readinto(files))
    record("raw read: numpy sum over an mmap", lambda: raw_mmap_sum(files))
    path = str(root / "store")
    if not args.no_local:
        record("1 core: bulk framer alone (salvage_arrays)", lambda: framing_only(segments), n)
        record("1 core: task read(), positions", lambda: task_function(path, {"materialize": "positions"}), n)
        record("1 core: decode kernel alone, decoded columns", decode_kernel(segments), n)
        record("1 core: task read(), decoded", lambda: task_function(path, {"materialize": "decoded"}), n)

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))
    from runtime.session import build_session
    from datasources.commitlog import FORMAT
    from datasources.twopass import read_commitlog
    from store_format.plan import MAX_RANGE_STREAMED
    from pyspark.sql import functions as F

    from bench.replay_source import NAME as REPLAY, ReplaySource

    spark = build_session("bench-datasource", master="local[2]",
                          extra={"spark.ui.enabled": "false", "spark.driver.memory": "2g"})
    spark.dataSource.register(ReplaySource)

    def noop(df):
        df.write.format("noop").mode("overwrite").save()

    # one warm-up query: the first in a session pays JVM and worker start-up
    noop(spark.read.format(FORMAT).options(materialize="decoded", splitSize=str(8 << 20)).load(str(files[0])))
    for split_mb in args.split_mb:
        split = (split_mb << 20) if split_mb else MAX_RANGE_STREAMED  # the split policy's largest range
        one_range = split >= args.segment_mb << 20  # no first pass: each task finds its segment's ends
        label = f"split {split >> 20} MiB" + (", one range a segment" if one_range else "")
        opts = {"splitSize": str(split)}
        if not one_range:
            stops = spark.read.format(FORMAT).options(**opts, materialize="positions", walk="salvage",
                                                      segmentEnds="unresolved").load(path)
            record(f"local[2]: first pass, segment ends ({label})",
                   timed(lambda: stops.where(F.col("kind").isin("stop", "blank")).collect()), n)
        variants = [(mat, {}) for mat in args.materialize]
        if args.no_check_crc:
            variants += [(mat, {"checkCrc": "false"}) for mat in args.materialize]
        for variant, extra in variants:
            # "message": the decoded read with MessageDecoder.decode's columns only
            source = {"materialize": "decoded", "columns": message_columns()} if variant == "message" else \
                {"materialize": variant}
            df = read_commitlog(spark, path, **source, **opts, **extra)
            crc = ", checkCrc=false" if extra else ""
            if not extra:
                replay = spark.read.format(REPLAY).options(path=str(files[0]), rows=str(n), **source,
                                                           partitions=str(df.rdd.getNumPartitions())).load()
                record(f"local[2]: {variant}: transport ceiling, replayed batches ({label})",
                       timed(lambda: noop(replay)), n)
            if one_range:
                record(f"local[2]: {variant}: read_commitlog, one pass ({label}{crc})",
                       timed(lambda: noop(read_commitlog(spark, path, **source, **opts, **extra))), n)
                continue
            record(f"local[2]: {variant}: second pass, ends known ({label}{crc})", timed(lambda: noop(df)), n)
            if not extra:
                record(f"local[2]: {variant}: read_commitlog, both passes ({label})",
                       timed(lambda: noop(read_commitlog(spark, path, **source, **opts))), n)
    spark.stop()
    raw = results[0][1]
    # "MB/CPU s": throughput per core-second of CPU spent (this process tree only): a loaded machine stretches
    # the wall clock, much less the CPU a measurement needs
    print(f"\n{'what':62} {'s':>6} {'MB/s':>7} {'msgs/s':>11} {'x raw':>6} {'load':>5} {'CPU s':>6} "
          f"{'MB/CPU s':>8}")
    for what, t, cpu, rows, load in results:
        print(f"{what:62} {t:6.2f} {mb / t:7.0f} {(f'{rows / t:,.0f}' if rows else ''):>11} {raw / t:6.3f} "
              f"{load:5.1f} {cpu:6.2f} {mb / max(cpu, 1e-3):8.0f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
