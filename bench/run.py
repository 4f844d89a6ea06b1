"""make bench: every figure of issue 9, measured in one run on one generated dump, into bench/results.json.

    .venv/bin/python bench/run.py [--size 1024] [--baseline-mb 64] [--writer-mb 256] [--repeat 2]
                                  [--scale-mib 16] [--scale-steps 1 4 16] [--skip audit ...]

The dump (bench/dump.py: 8 topics x 8 queues, 100-400 byte bodies, tags, 1-2 keys, UNIQ_KEYs, 5% IPv6, 1 GiB
segments, written by the bulk writer, seeded) is generated once and cached in bench/cache/ under a name made
of its parameters.  Then, on that dump, page cache warm, best of ``--repeat`` unless said:

  ceilings   raw read of the segments' written bytes (readinto one reusable buffer), numpy sum() over them
             in memory (the ceiling: every byte reaches the CPU once);
  framing    the scalar walk (store_format walk_buffer, first --baseline-mb) and the bulk framer
             (salvage_arrays, CRC checked, everything);
  decode     the naive per-record struct loop and the scalar decoder (first --baseline-mb: their rate does
             not depend on the size), the Arrow kernels (MessageDecoder.decode's columns, and every default
             column), one core;
  writer     the bulk writer on --writer-mb of the same traffic, into scratch stores (bench_writer.py),
             calibrated against RocketMQ's own writer;
  index      --index-lookups random keys of the dump looked up in its index file (hash slot + chain walk,
             store_format.indexfile): ms per lookup, mean and p99;
  spark      local[2]: the commitlog source's message count (positions), each record's bytes (frames) and a
             plain load()'s columns (headers: every decoded column but the body) into Spark's noop sink, the
             decode job's table written as Parquet, and the extract job's default selection (each against the
             frames scan: x_scan);
  scaling    the audit and the decode job over a --scale-reference-mib dump (their fixed cost) and at
             --scale-steps x --scale-mib, each with every topic and queue from its start (so the reference
             carries the per-queue part of the fixed cost), steady state: one fresh local[2] session per job
             (bench/scaling.py), two untimed warm-up runs (the first one's time is the cold start), then
             --scale-rounds rounds over the steps, smallest first, each step between two runs of the
             reference: seconds (best of the rounds, their spread the noise), net seconds per GB beyond the
             mean of the reference runs around it (the median over the rounds; the noise: their spread, at
             least half the two reference runs' difference and the reference runs' largest stray from their
             neighbours, per GB), marginal seconds per GB, peak memory per process (anonymous and resident);
  audit      ``python -m jobs.audit`` over a 1 MiB dump in a fresh process (report included; the session's
             start apart), then the audit job over the whole dump, once, in a session of its own like the
             scaling runs (its phases, and its rate against the frames scan), late (skip it with --skip audit).
  cluster    the audit's application file through spark-submit with the packaged zip, over the whole dump,
             once on local[2] and once on a standalone cluster of two one-core Workers started for it
             (tools/sparkcluster.py, --cluster-executor-memory each), last: audit_local_mb_s and
             audit_cluster_mb_s, the audit's own run time (its summary's elapsed_seconds, without the session's
             start) and each submit's wall time, with the peak memory of the driver, the executor JVMs and the
             Python workers (skip it with --skip cluster).
  incremental  issue 41's scheduled audits (bench/bench_incremental.py): a dump of --size x each of
             --incremental-steps (default 1 and 4) cut back by --incremental-append-mib of messages (its queues and
             index rebuilt: the night before), audited with a new state, then the whole dump audited in full and
             with that state, --incremental-rounds times, in one warm local[2] session: the incremental/full ratio
             (target 1/10), the state's share of the store (<= 5%), the largest size's incremental time against
             the smallest's (<= 1.5x); about 25 minutes at the default --size with a 4 GiB dump to generate.

``make bench-scale`` runs the scaling part alone at issue 40's sizes: the audit over 1, 4 and 16 GiB dumps of 1 GiB
segments at 10x the generator's transaction and send-back rates (--scale-flows 10), with the driver's anonymous
memory and the net s/GB of the largest step against the smallest (``scaling_targets``: each within 1.3x); results
in bench/results-scale.json.  The dumps (~22 GB with their queues and indexes) are generated once into --cache.

One line per figure: MB/s and messages/s, the ratio to the ceiling (numpy pass), to the naive loop and to
the raw read, the wall and CPU seconds (this process tree) and the load average; the machine is shared, so
compare ratios.  Every figure, the machine and the sizes land in bench/results.json (--results).
"""
from __future__ import annotations

import argparse
import dataclasses
import datetime as dt
import io
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

import numpy as np  # noqa: E402

from bench import bench_datasource, bench_decode, bench_writer, scaling  # noqa: E402
from bench.dump import DumpSpec, SegmentBytes, ensure_dump, load_messages  # noqa: E402
from bench.proctree import tree_cpu  # noqa: E402

CACHE = REPO / "bench" / "cache"
RESULTS = REPO / "bench" / "results.json"
REFERENCE_RATE = 10.0  # stores per simulated second in the scaling reference dump: ~55 s, long enough for retries
GROUPS = ("framing", "decode", "writer", "index", "spark", "audit", "scaling", "cluster", "incremental")
REQUIRED_KEYS = ("raw_read_mb_s", "numpy_pass_mb_s", "naive_decode_mb_s", "scalar_decode_mb_s", "kernel_decode_mb_s",
                 "spark_count_mb_s", "spark_decode_mb_s", "spark_decode_parquet_mb_s", "audit_mb_s", "audit_small_s", "writer_mb_s", "writer_msgs_s",
                 "index_lookup_ms", "scaling", "audit_local_mb_s", "audit_cluster_mb_s")
CEILING, NAIVE, RAW = "numpy_pass", "naive_decode", "raw_read"


def load_text(load=None) -> str:
    """The 1/5/15-minute load averages (now, or ``load``) as 1.0/2.0/3.0."""
    return "/".join(f"{x:.1f}" for x in (load or os.getloadavg()))


class Bench:
    """The figures of one run, each printed as it lands with its ratios to the baselines measured before it."""

    def __init__(self, repeat: int = 2, log=print, on_add=None):
        self.repeat = repeat
        self.log = log
        self.on_add = on_add  # called after each figure (main saves the partial results)
        self.figures: dict[str, dict] = {}

    def measure(self, key: str, label: str, fn, nbytes: int, messages: int, repeat: int | None = None):
        """Best wall time of ``repeat`` calls of ``fn`` (with the CPU seconds of this process tree in that
        call); returns what the last call returned."""
        runs, result = [], None
        load = os.getloadavg()[0]
        for _ in range(repeat or self.repeat):
            c, t = tree_cpu(), time.perf_counter()
            result = fn()
            runs.append((time.perf_counter() - t, tree_cpu() - c))
        # the best wall time; the CPU of the fastest call whose tree's CPU could be told (a process of the tree that
        # ended between the two looks took its CPU seconds with it: a negative difference, seen in a test run)
        seconds = min(s for s, _ in runs)
        cpu = min((r for r in runs if r[1] >= 0), default=(seconds, 0.0))[1]
        self.add(key, label, seconds, cpu, nbytes, messages, load=(load + os.getloadavg()[0]) / 2)
        return result

    def add(self, key: str, label: str, seconds: float, cpu_seconds: float, nbytes: int, messages: int,
            load: float | None = None, **extra) -> dict:
        fig = {"label": label, "seconds": seconds, "cpu_seconds": cpu_seconds, "bytes": nbytes, "messages": messages,
               "mb_s": nbytes / 1e6 / seconds, "msgs_s": messages / seconds,
               "cpu_mb_s": nbytes / 1e6 / cpu_seconds if cpu_seconds > 0 else None,
               "load": os.getloadavg()[0] if load is None else load, **extra}
        for base in (CEILING, NAIVE, RAW):
            if base in self.figures:
                fig[f"x_{base}"] = fig["mb_s"] / self.figures[base]["mb_s"]
        self.figures[key] = fig
        self.log(self.line(fig))
        if self.on_add:
            self.on_add()
        return fig

    @staticmethod
    def line(fig: dict) -> str:
        ratios = "  ".join(f"{fig[f'x_{b}']:7.3f}x {name}" for b, name in
                           ((CEILING, "ceiling"), (NAIVE, "naive"), (RAW, "raw read")) if f"x_{b}" in fig)
        return (f"{fig['label']:<60} {fig['mb_s']:9,.1f} MB/s {fig['msgs_s'] / 1e6:8.3f} M msgs/s  {ratios}  "
                f"({fig['seconds']:.2f} s, {fig['cpu_seconds']:.2f} CPU s, load {fig['load']:.1f})")

    def mb_s(self, key: str):
        return self.figures[key]["mb_s"] if key in self.figures else None


# ---------------------------------------------------------------------------------------------------------
# The figures


def prefix(segs: list[SegmentBytes], baseline_mb: float | None) -> tuple:
    """The first messages of the first segment up to ``baseline_mb`` MB (all of it for None): (segment, bytes,
    starts, sizes) for the per-record Python contenders, whose rate does not depend on the size."""
    seg, data, starts, sizes = segs[0]
    m = len(starts) if baseline_mb is None else max(int(np.searchsorted(starts, baseline_mb * 1e6)), 1)
    m = min(m, len(starts))
    end = int(starts[m - 1] + sizes[m - 1])
    return seg, data[:end].tobytes(), starts[:m], sizes[:m]


def ceilings(bench: Bench, segs: list[SegmentBytes]) -> None:
    files, limits = [s.segment.path for s in segs], [len(s.data) for s in segs]
    nbytes, n = sum(limits), sum(len(s.starts) for s in segs)
    bench_datasource.raw_readinto(files, limits)  # the page cache warm
    bench.measure(RAW, "raw read: readinto one reusable buffer", lambda: bench_datasource.raw_readinto(files, limits),
                  nbytes, n, repeat=max(bench.repeat, 3))
    bench.measure(CEILING, "numpy sum() over the bytes in memory (ceiling)",
                  lambda: sum(int(s.data.sum()) for s in segs), nbytes, n, repeat=max(bench.repeat, 3))


def framing(bench: Bench, segs: list[SegmentBytes], baseline_mb: float | None) -> None:
    from store_format.commitlog import KIND_MESSAGE, salvage_arrays, walk_buffer

    seg, raw, starts, sizes = prefix(segs, baseline_mb)

    def scalar_walk() -> int:
        return sum(f.kind == "message" for f in walk_buffer(raw, seg.name, seg.base_offset, decode=False))

    found = bench.measure("framing_scalar", "framing: scalar walk (walk_buffer, CRC checked)", scalar_walk,
                          len(raw), len(starts))
    assert found == len(starts), f"the scalar walk found {found} of {len(starts)} messages"

    def bulk() -> int:
        return sum(int((salvage_arrays(s.data, s.segment.name, s.segment.base_offset).kinds == KIND_MESSAGE).sum())
                   for s in segs)

    n = sum(len(s.starts) for s in segs)
    found = bench.measure("framing_bulk", "framing: bulk framer (salvage_arrays, CRC checked)", bulk,
                          sum(len(s.data) for s in segs), n)
    assert found == n, f"the bulk framer found {found} of {n} messages"


def decoders(bench: Bench, segs: list[SegmentBytes], baseline_mb: float | None, batch_rows: int = 65536) -> None:
    import pyarrow as pa

    from decoding import kernels as K

    threads = pa.cpu_count(), pa.io_thread_count()
    pa.set_cpu_count(1)  # one core: no Arrow thread pool
    pa.set_io_thread_count(1)
    K.tune_allocator()
    try:
        _, raw, starts, sizes = prefix(segs, baseline_mb)
        st, sz = starts.tolist(), sizes.tolist()
        bench.measure(NAIVE, "decode: naive per-record struct loop", lambda: bench_decode.naive_loop(raw, st),
                      len(raw), len(st))
        bench.measure("scalar_decode", "decode: scalar store_format decode_record",
                      lambda: bench_decode.scalar_loop(raw, st, sz), len(raw), len(st))
        nbytes, n = sum(len(s.data) for s in segs), sum(len(s.starts) for s in segs)
        for key, label, cols in (("kernel_decode_naive_fields", "decode: Arrow kernels, the naive loop's fields",
                                  bench_decode.NAIVE_LOOP_COLUMNS + K.STATUS_COLUMNS),
                                 ("kernel_decode", "decode: Arrow kernels, MessageDecoder.decode's columns",
                                  K.MESSAGE_DECODER_COLUMNS),
                                 ("kernel_decode_all", "decode: Arrow kernels, every default column", None)):
            first = segs[0]
            bench_decode.kernel_pass(first.data, first.starts[:batch_rows], first.sizes[:batch_rows], batch_rows,
                                     cols)  # warm up
            rows = bench.measure(key, label, lambda: sum(
                bench_decode.kernel_pass(s.data, s.starts, s.sizes, batch_rows, cols) for s in segs), nbytes, n)
            assert rows == n, f"the kernels decoded {rows} of {n} messages"
    finally:
        pa.set_cpu_count(threads[0])
        pa.set_io_thread_count(threads[1])


def writer(bench: Bench, spec: DumpSpec, work: Path, writer_mb: float, repeat: int) -> dict:
    base = Path(work) / "writer"
    base.mkdir(parents=True, exist_ok=True)
    try:
        r = bench_writer.measure(int(writer_mb * 1e6), spec.writer(), base, spec.traffic(), repeat,
                                 log=lambda s: print(f"  writer {s.strip()}", file=sys.stderr))
    finally:
        shutil.rmtree(base, ignore_errors=True)
    fig = bench.add("writer", "bulk writer (append_many, CQ + index dispatch)", r["seconds"], r["cpu_seconds"],
                    r["bytes"], r["messages"], close_seconds=r["close_seconds"],
                    x_rocketmq_msgs_s=r["wall"]["x_rocketmq_msgs_s"], x_rocketmq_mb_s=r["wall"]["x_rocketmq_mb_s"],
                    cpu_x_rocketmq_msgs_s=r["cpu"]["x_rocketmq_msgs_s"], calibration_gb_s=r["wall"]["numpy_sum_gb_s"])
    bench.log(f"{'':<60} writer vs RocketMQ's DefaultMessageStore, each against its own numpy calibration: "
              f"{fig['x_rocketmq_msgs_s']:.2f}x msgs/s wall clock, {fig['cpu_x_rocketmq_msgs_s']:.2f}x CPU time")
    return fig


def index_lookups(bench: Bench, store: Path, segs: list[SegmentBytes], lookups: int, seed: int = 1) -> dict:
    """``lookups`` keys of random messages of the plain topics (alternately a KEYS key and the UNIQ_KEY),
    each looked up in every index file; a lookup counts as found when the message's offset is among the
    candidates."""
    from store_format.indexfile import IndexFile, list_index_files
    from decoding import kernels as K

    rng = np.random.default_rng(seed)
    picks = []  # (topic, key, physical offset)
    for seg, data, starts, sizes in segs:
        take = np.sort(rng.choice(len(starts), min(len(starts), 4 * lookups), replace=False))
        rows = K.decode_buffer(data, starts[take], sizes[take],
                               columns=["topic", "keys", "uniq_key", "physical_offset"]).to_pylist()
        picks += [(r["topic"], (r["keys"] or [None])[0] if i % 2 else r["uniq_key"], r["physical_offset"])
                  for i, r in enumerate(rows) if r["topic"].startswith("Topic")]
    picks = [(topic, key, offset) for topic, key, offset in picks if key]
    picks = [picks[i] for i in rng.choice(len(picks), min(lookups, len(picks)), replace=False)]
    files = [IndexFile(p) for p in list_index_files(Path(store) / "index")]
    try:
        times, found = np.empty(len(picks)), 0
        c = tree_cpu()
        for i, (topic, key, offset) in enumerate(picks):
            t = time.perf_counter()
            hits = [o for f in files for o in f.lookup(topic, key)]
            times[i] = time.perf_counter() - t
            found += offset in hits
        cpu = tree_cpu() - c
        entries = sum(f.header.index_count - 1 for f in files)
        geometry = [(f.hash_slot_num, f.index_num) for f in files]
    finally:
        for f in files:
            f.close()
    ms = times * 1e3
    fig = {"lookups": len(picks), "found": found, "mean_ms": float(ms.mean()), "p50_ms": float(np.percentile(ms, 50)),
           "p99_ms": float(np.percentile(ms, 99)), "max_ms": float(ms.max()), "cpu_seconds": cpu,
           "index_files": len(files), "entries": entries, "geometry": geometry, "load": os.getloadavg()[0]}
    bench.figures["index_lookup"] = fig
    if bench.on_add:
        bench.on_add()
    bench.log(f"{'index key lookup (hash slot + chain walk)':<60} {fig['mean_ms']:9.4f} ms mean, {fig['p50_ms']:.4f} "
              f"p50, {fig['p99_ms']:.4f} p99 over {len(picks):,} lookups; {found:,} found; {entries:,} entries in "
              f"{len(files)} file(s) of {geometry[0][0] if geometry else 0:,} slots (load {fig['load']:.1f})")
    return fig


def spark_session():
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from runtime.session import build_session

    return build_session("bench", master="local[2]", extra={"spark.ui.enabled": "false", "spark.driver.memory": "4g"})


def spark_figures(bench: Bench, spark, meta: dict, work: Path) -> dict:
    """The commitlog source's message count and the decode job's messages written as Parquet, in ``spark``;
    returns {"count": messages counted, "parquet": its path}."""
    from pyspark.sql import functions as F

    from datasources import read_commitlog
    from jobs import decode as decode_job
    from jobs import extract as extract_job
    from runtime.stores import resolve_stores

    store, nbytes, n = meta["store"], meta["commitlog_bytes"], meta["messages"]
    # the first query of a session pays the JVM's and the planner workers' start-up
    read_commitlog(spark, store, materialize="positions").where(F.col("physical_offset") < 0).count()

    def count() -> int:
        return read_commitlog(spark, store, materialize="positions").where(F.col("kind") == "message").count()

    counted = bench.measure("spark_count", "spark local[2]: commitlog source, count (positions)", count, nbytes, n)
    # each record's bytes handed to Spark, written nowhere (the noop sink materializes each row); the figure's key
    # (spark_decode) is kept so the runs of record stay comparable
    bench.measure("spark_decode", "spark local[2]: commitlog source, frames (each record's bytes)",
                  lambda: read_commitlog(spark, store, materialize="frames").write.format("noop").mode("overwrite")
                  .save(), nbytes, n)
    # what a plain load() gives (materialize=headers, the default): every decoded column but the body
    bench.measure("spark_headers", "spark local[2]: commitlog source, a plain load() (headers decoded)",
                  lambda: read_commitlog(spark, store).write.format("noop").mode("overwrite").save(), nbytes, n)
    parquet = Path(work) / "messages.parquet"

    def export() -> None:  # what the decode job does: its tasks write the Parquet parts (runtime/export.py)
        shutil.rmtree(parquet, ignore_errors=True)
        decode_job.write_messages(spark, resolve_stores([store]), str(parquet))

    bench.measure("spark_decode_parquet", "spark local[2]: decode job's messages -> Parquet", export, nbytes, n)
    extracted = Path(work) / "extract"

    def extract_all() -> None:  # the whole extract job, its default selection (the kept walk) -> Parquet
        shutil.rmtree(extracted, ignore_errors=True)
        args = extract_job.build_parser().parse_args(["--store", str(store), "--out", str(extracted)])
        if extract_job.run(spark, args, err=io.StringIO()).exit_code != 0:
            raise RuntimeError(f"extract of {store} failed")

    bench.measure("spark_extract_parquet", "spark local[2]: extract job, default selection -> Parquet", extract_all,
                  nbytes, n)
    # the exports against the decoded scan of the same run (issue 40's target: >= 0.5x)
    for key in ("spark_decode_parquet", "spark_extract_parquet"):
        fig = bench.figures[key]
        fig["x_scan"] = fig["mb_s"] / bench.mb_s("spark_decode")
        bench.log(f"{'':<60} {key}: {fig['x_scan']:.2f}x the frames scan of this run")
    return {"count": counted, "parquet": str(parquet)}


def job_figure(bench: Bench, job: str, meta: dict, key: str | None = None) -> dict:
    """A whole job (``audit`` or ``decode``) over the dump, once, as a user runs it: a fresh local[2] session in
    a child process (bench/scaling.py), its run time without the session start, and its processes' peak
    memory; the audit's against the frames scan of the same run (``x_spark_decode``) and with its phases."""
    r = scaling.run_job(job, Path(meta["store"]))
    peaks = {k: v for k, v in r.items() if k.endswith(("_peak_bytes", "_anon_bytes"))}
    extra = {"phases": r["phases"]} if r.get("phases") else {}
    fig = bench.add(key or job, f"spark local[2]: {job} job, a session of its own" +
                    (" (no HTML report)" if job == "audit" else ""), r["seconds"], r.get("cpu_seconds", 0.0),
                    meta["commitlog_bytes"], meta["messages"], session_seconds=r["session_seconds"],
                    task_seconds=r["task_seconds"], stages=r["stages"], **extra, **peaks)
    if bench.mb_s("spark_decode"):
        fig["x_spark_decode"] = fig["mb_s"] / bench.mb_s("spark_decode")
        bench.log(f"{'':<60} {fig['x_spark_decode']:.2f}x the frames scan of this run")
    bench.log(f"{'':<60} anonymous / resident peak MiB: driver JVM {mib(peaks, 'driver_jvm')}, largest Python "
              f"worker {mib(peaks, 'python_worker')}, driver Python {mib(peaks, 'driver_python')} (session start "
              f"{r['session_seconds']:.1f} s; {r['stages']} Spark stages, {r['task_seconds']:.1f} s of task time)")
    if extra:
        bench.log(f"{'':<60} phases: " + ", ".join(f"{name} {secs:.2f} s" for name, secs in extra["phases"]))
    return fig


def audit_small(bench: Bench, spec: DumpSpec, cache: Path) -> dict:
    """``python -m jobs.audit`` over a ~1 MiB dump in a fresh process, report included, as a user first meets
    it: the process's wall time, with the Spark session's start (its --profile line) apart."""
    meta = ensure_dump(dataclasses.replace(spec, size_mib=1), cache)
    with tempfile.TemporaryDirectory(prefix="bench-audit-small-") as tmp:
        env = {**os.environ, "PYSPARK_PYTHON": os.environ.get("PYSPARK_PYTHON", sys.executable),
               "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))}
        cmd = [sys.executable, "-m", "jobs.audit", "--store", meta["store"], "--out", f"{tmp}/audit", "--profile"]
        load, t = os.getloadavg()[0], time.perf_counter()
        run = subprocess.run(cmd, cwd=tmp, env=env, capture_output=True, text=True)
        wall = time.perf_counter() - t
    if run.returncode not in (0, 1):
        raise subprocess.CalledProcessError(run.returncode, cmd, run.stdout, run.stderr)
    session = next((float(line.split()[-2]) for line in run.stderr.splitlines() if "Spark session start" in line),
                   None)
    fig = {"seconds": wall, "session_seconds": session, "bytes": meta["commitlog_bytes"], "messages": meta["messages"],
           "load": (load + os.getloadavg()[0]) / 2}
    bench.figures["audit_small"] = fig
    if bench.on_add:
        bench.on_add()
    bench.log(f"{'audit of a ' + format(meta['commitlog_bytes'] / 2**20, '.1f') + ' MiB store, a fresh process':<60} "
              f"{wall:9.2f} s wall, of which the Spark session's start {num(session, '{:.2f}', '?')} s "
              f"(report included; load {fig['load']:.1f})")
    return fig


def audit_submit_figure(bench: Bench, key: str, label: str, master: str, meta: dict, work: Path,
                        conf: dict | None = None) -> dict:
    """The audit's application file (jobs/audit/__main__.py, copied out of the checkout) through spark-submit
    on ``master`` with the packaged zip and the project's spark-defaults.conf, over the dump, without the HTML
    report, once: the audit's own run time (summary.json's elapsed_seconds), the submit's wall time, the CPU and
    the peak memory of this process tree (a cluster started by this process is part of it)."""
    from bench.proctree import PeakSampler
    from runtime.session import write_project_zip
    from tools.sparkcluster import spark_submit

    zip_path = work / "dist" / "rocketmq_forensics.zip"
    if not zip_path.exists():
        write_project_zip(zip_path, REPO)
    app = work / "app" / "audit_job.py"
    if not app.exists():
        app.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(REPO / "jobs" / "audit" / "__main__.py", app)
    out = work / f"{key}-out"
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "SPARK_HOME", "PYSPARK_DRIVER_PYTHON",
                                                            "SPARK_REMOTE")}
    env["PYSPARK_PYTHON"] = os.environ.get("PYSPARK_PYTHON", sys.executable)
    with PeakSampler() as peaks:
        c, t = tree_cpu(), time.perf_counter()
        proc = spark_submit(master, app, ["--store", meta["store"], "--out", out, "--no-report"], py_files=zip_path,
                            conf=conf, env=env, cwd=REPO, properties_file=REPO / "spark-conf" / "spark-defaults.conf")
        wall, cpu = time.perf_counter() - t, tree_cpu() - c
    if proc.returncode not in (0, 1):  # 1: findings, still a whole audit
        sys.stderr.write(proc.stderr[-4000:])
        raise subprocess.CalledProcessError(proc.returncode, proc.args)
    summary = json.loads((out / "summary.json").read_text())
    fig = bench.add(key, label, summary["elapsed_seconds"], cpu, meta["commitlog_bytes"], meta["messages"],
                    submit_seconds=wall, master=master, **peaks.peaks)
    bench.log(f"{'':<60} spark-submit {wall:.1f} s in all; anonymous / resident peak MiB: driver JVM "
              f"{mib(fig, 'driver_jvm')}, largest executor JVM {mib(fig, 'executor_jvm')}, largest Python worker "
              f"{mib(fig, 'python_worker')}")
    shutil.rmtree(out, ignore_errors=True)
    return fig


def cluster_figures(bench: Bench, meta: dict, work: Path, executor_memory: str = "1g", cluster=None) -> dict:
    """The audit through spark-submit on local[2], then on a standalone cluster of two one-core Workers (started
    here and stopped by pid, unless ``cluster`` is given), over the same dump in the same run."""
    from tools.sparkcluster import app_conf, start_cluster

    figs = {"local": audit_submit_figure(bench, "audit_local", "spark-submit local[2]: audit job (no HTML report)",
                                         "local[2]", meta, work)}
    own = cluster is None
    if own:
        cluster = start_cluster(work / "cluster", workers=2, cores=1, memory=executor_memory)
    try:
        figs["cluster"] = audit_submit_figure(
            bench, "audit_cluster", "spark-submit on 2 workers x 1 core: audit job (no HTML report)",
            cluster.master_url, meta, work, conf=app_conf(executor_memory))
    finally:
        if own:
            cluster.stop()
    return figs


def scaling_runs(spec: DumpSpec, steps: list[int], jobs: list[str], cache: Path, log=print,
                 on_run=None, reference_mib: float = 0, rounds: int = 2, warmup_step: int | None = None,
                 warmups: int = 2) -> list[dict]:
    """Each job over dumps of ``spec`` at ``steps`` x its size (and a ``reference_mib`` dump, step 0, whose time
    is the fixed cost, if given): one fresh session per job (bench/scaling.py), ``warmups`` warm-up runs over
    the ``warmup_step`` dump (a session's audits keep getting faster for a couple of runs), then ``rounds``
    rounds over every step, smallest first, each step between two reference runs (its net time is against
    their mean).  ``on_run`` gets the rows so far after each job."""
    steps = ([0] if reference_mib else []) + [s for s in steps if s]
    # every dump has every topic and queue from the start (``cover``): part of a job's fixed cost is per queue,
    # and a plain tiny dump has 45 of the 87 queues the larger ones have.  The reference dump's rate is low
    # enough for its retries to land (they take ~20 simulated seconds).
    sized = {step: dataclasses.replace(spec, size_mib=spec.size_mib * step, cover=True) for step in steps if step}
    if reference_mib:
        sized[0] = dataclasses.replace(spec, size_mib=reference_mib, cover=True, rate=REFERENCE_RATE)
    # every dump first: writing one (and its page cache flush) while a job runs would slow that job
    metas = {step: ensure_dump(sized[step], cache) for step in steps}
    # the warm-up needs at least as many segments as cores, or a later run starts the second Python worker
    warmup_step = warmup_step if warmup_step in steps else steps[-1]
    runs = []
    for job in jobs:
        t = time.perf_counter()
        got = scaling.run_series(job, [Path(metas[s]["store"]) for s in steps],
                                 warmup=Path(metas[warmup_step]["store"]), rounds=rounds, paired=bool(reference_mib),
                                 warmups=warmups)
        load = os.getloadavg()[0]
        for r in got:
            step = warmup_step if r["round"] == 0 else steps[r["store"]]
            runs.append(dict(r, step=step, commitlog_bytes=metas[step]["commitlog_bytes"],
                             messages=metas[step]["messages"], load=load))
        rows = scaling.scaling_rows(runs)
        log(f"scaling {job}: {time.perf_counter() - t:.0f} s in one session (load {load:.1f}), {warmups} warm-up(s) "
            f"over {step_label(warmup_step)} then {rounds} round(s)"
            f"{', each step between two ref runs' if reference_mib else ''}, the best of them (net: the median "
            f"against the mean of the ref runs around it):")
        for row in (r for r in rows if r["job"] == job):
            log(f"  {step_label(row['step']):<4} {row['commitlog_bytes'] / 1e6:8.1f} MB {row['seconds']:7.1f} s "
                f"(spread {row['spread_seconds']:.1f}{num(row.get('cold_seconds'), ', cold {:.1f} s')}) "
                f"{row['sec_per_gb']:8.1f} s/GB, net {num(row.get('net_sec_per_gb'), '{:.1f}', '-')}"
                f"{num(row.get('net_noise_sec_per_gb'), ' +- {:.1f}')}{flatness(row)}"
                f"{num(row.get('net_task_sec_per_gb'), '; tasks net {:.1f}', '')}"
                f"{num(row.get('net_task_noise_sec_per_gb'), ' +- {:.1f} s/GB')}; anonymous / resident peak "
                f"MiB: driver JVM {mib(row, 'driver_jvm')}, largest Python worker {mib(row, 'python_worker')}, "
                f"driver Python {mib(row, 'driver_python')}")
        target = scaling_targets(rows, job)
        if target:
            log(f"  x{target['from_step']} -> x{target['to_step']}: driver anonymous memory "
                f"{target['driver_anon_ratio']:.2f}x ({'met' if target['memory_met'] else 'NOT met'}: <= "
                f"{SCALE_MEMORY_TARGET}x), net s/GB {num(target['net_sec_per_gb_ratio'], '{:.2f}x', '-')} "
                f"({'met' if target['net_met'] else 'NOT met'}: <= {SCALE_NET_TARGET}x)")
        if on_run:
            on_run(rows)
    return scaling.scaling_rows(runs)


def num(x, fmt="{:,.1f}", missing="") -> str:
    return missing if x is None else fmt.format(x)


def flatness(row: dict) -> str:
    """Whether a scaling row's net s/GB is the largest step's within their noise, as words."""
    if "within_noise" not in row:
        return ""
    return " (the largest step's within noise)" if row["within_noise"] else " (NOT the largest step's within noise)"


def step_label(step: int) -> str:
    return "ref" if step == 0 else f"x{step}"


def mib(row: dict, process: str) -> str:
    """'anonymous / resident' peak MiB of a process kind in a scaling row or figure."""
    anon, resident = (row.get(f"{process}_{kind}_bytes") for kind in ("anon", "peak"))
    return " / ".join(num(None if b is None else b / 2**20, "{:,.0f}", "-") for b in (anon, resident))


# ---------------------------------------------------------------------------------------------------------
# results.json


def machine() -> dict:
    from importlib.metadata import PackageNotFoundError, version

    def v(name):
        try:
            return version(name)
        except PackageNotFoundError:
            return None
    return {"cores": os.cpu_count(), "platform": platform.platform(), "python": platform.python_version(),
            **{name: v(name) for name in ("pyspark", "pyarrow", "numba", "numpy")}}


#: issue 40's targets over the scaling steps (the reference run, step 0, is the fixed cost, not a step)
SCALE_MEMORY_TARGET, SCALE_NET_TARGET = 1.3, 1.3


def scaling_targets(rows: list[dict] | None, job: str = "audit") -> dict | None:
    """The audit's driver anonymous memory at the largest step over the smallest, and its largest net s/GB over
    its smallest, against issue 40's 1.3x each (None without two steps of ``job``)."""
    steps = sorted((r for r in rows or [] if r["job"] == job and r["step"]), key=lambda r: r["step"])
    if len(steps) < 2:
        return None
    memory = steps[-1]["driver_python_anon_bytes"] / steps[0]["driver_python_anon_bytes"]
    nets = [r["net_sec_per_gb"] for r in steps if r.get("net_sec_per_gb")]
    net = max(nets) / min(nets) if len(nets) == len(steps) else None
    return {"job": job, "from_step": steps[0]["step"], "to_step": steps[-1]["step"],
            "driver_anon_ratio": memory, "memory_met": memory <= SCALE_MEMORY_TARGET,
            "net_sec_per_gb_ratio": net, "net_met": net is not None and net <= SCALE_NET_TARGET}


def results(bench: Bench, meta: dict, scaling_rows: list[dict] | None, incremental: dict | None = None,
            **context) -> dict:
    """Every figure of the run, with the required top-level keys (None where a part was skipped)."""
    f = bench.figures
    index = f.get("index_lookup")
    out = {
        "raw_read_mb_s": bench.mb_s(RAW), "numpy_pass_mb_s": bench.mb_s(CEILING),
        "framing_scalar_mb_s": bench.mb_s("framing_scalar"), "framing_bulk_mb_s": bench.mb_s("framing_bulk"),
        "naive_decode_mb_s": bench.mb_s(NAIVE), "scalar_decode_mb_s": bench.mb_s("scalar_decode"),
        "kernel_decode_mb_s": bench.mb_s("kernel_decode"), "kernel_decode_all_mb_s": bench.mb_s("kernel_decode_all"),
        "kernel_decode_naive_fields_mb_s": bench.mb_s("kernel_decode_naive_fields"),
        "spark_count_mb_s": bench.mb_s("spark_count"), "spark_decode_mb_s": bench.mb_s("spark_decode"),
        "spark_headers_mb_s": bench.mb_s("spark_headers"),
        "spark_decode_parquet_mb_s": bench.mb_s("spark_decode_parquet"),
        "spark_decode_parquet_x_scan": f["spark_decode_parquet"].get("x_scan") if "spark_decode_parquet" in f else None,
        "spark_extract_parquet_mb_s": bench.mb_s("spark_extract_parquet"),
        "spark_extract_parquet_x_scan": (f["spark_extract_parquet"].get("x_scan") if "spark_extract_parquet" in f
                                         else None),
        "audit_mb_s": bench.mb_s("audit"),
        "audit_x_spark_decode": f["audit"].get("x_spark_decode") if "audit" in f else None,
        "audit_phases": f["audit"].get("phases") if "audit" in f else None,
        "audit_small_s": f["audit_small"]["seconds"] if "audit_small" in f else None,
        "audit_small_session_s": f["audit_small"]["session_seconds"] if "audit_small" in f else None, "writer_mb_s": bench.mb_s("writer"),
        "audit_local_mb_s": bench.mb_s("audit_local"), "audit_cluster_mb_s": bench.mb_s("audit_cluster"),
        "writer_msgs_s": f["writer"]["msgs_s"] if "writer" in f else None,
        "index_lookup_ms": index["mean_ms"] if index else None,
        "index_lookup_p99_ms": index["p99_ms"] if index else None,
        "scaling": scaling_rows,
        "scaling_targets": scaling_targets(scaling_rows),
        "incremental": incremental,
        "sizes": {"dump": meta["spec"], "messages": meta["messages"], "commitlog_bytes": meta["commitlog_bytes"],
                  "segments": meta["segments"], "index_files": meta["index_files"],
                  **{f"{k}_bytes": f[k]["bytes"] for k in ("scalar_decode", "writer") if k in f}},
        "figures": f,
        **context,
    }
    missing = [k for k in REQUIRED_KEYS if k not in out]
    assert not missing, f"results lack {missing}"
    return out


def write_results(path: Path, data: dict) -> None:
    path = Path(path)
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(data, indent=1, default=str) + "\n")
    os.replace(tmp, path)


def markdown(data: dict) -> str:
    """The figures and scaling tables of a results.json, as BENCHMARKS.md shows them."""
    out = ["| figure | MB/s | M msgs/s | x ceiling | x naive | x raw read | s | CPU s | MB/CPU s | x ceiling, CPU |",
           "|---|---|---|---|---|---|---|---|---|---|"]
    ceiling_cpu = data["figures"].get(CEILING, {}).get("cpu_mb_s")
    for key, f in data["figures"].items():
        if "mb_s" in f:
            # by CPU time (this process tree): what other work on the shared cores stretches much less
            cpu_x = f["cpu_mb_s"] / ceiling_cpu if f.get("cpu_mb_s") and ceiling_cpu else None
            out.append(f"| {f['label']} | {num(f['mb_s'])} | {num(f['msgs_s'] / 1e6, '{:.3f}')} | "
                       f"{num(f.get('x_' + CEILING), '{:.3f}')} | {num(f.get('x_' + NAIVE), '{:.2f}')} | "
                       f"{num(f.get('x_' + RAW), '{:.4f}')} | {num(f['seconds'], '{:.2f}')} | "
                       f"{num(f['cpu_seconds'], '{:.2f}')} | {num(f.get('cpu_mb_s'))} | "
                       f"{num(cpu_x, '{:.3f}')} |")
    small = data["figures"].get("audit_small")
    if small:
        out += ["", f"Audit of a {small['bytes'] / 2**20:.1f} MiB store in a fresh process (`python -m jobs.audit`, "
                    f"report included): {small['seconds']:.1f} s wall, of which the Spark session's start "
                    f"{num(small.get('session_seconds'), '{:.1f}', '?')} s."]
    audit = data["figures"].get("audit")
    if audit and audit.get("phases"):
        out += ["", "Audit phases (`jobs.audit --profile`): " + ", ".join(f"{name} {secs:.2f} s"
                                                                         for name, secs in audit["phases"]) + "."]
    index = data["figures"].get("index_lookup")
    if index:
        out += ["", f"Index key lookup: {index['mean_ms']:.4f} ms mean, {index['p50_ms']:.4f} ms p50, "
                    f"{index['p99_ms']:.4f} ms p99 over {index['lookups']:,} lookups ({index['found']:,} found), "
                    f"{index['entries']:,} entries in {index['index_files']} file(s) of {index['geometry'][0][0]:,} "
                    "slots."]
    if data.get("scaling"):
        out += ["", "| job | step | commitlog MB | s (best) | spread s | cold s | s/GB | net s/GB | noise +- | "
                    "flat | marginal s/GB | task s | net task s/GB | driver JVM MiB | largest Python worker MiB | "
                    "driver Python MiB |",
                "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
        for r in data["scaling"]:
            flat = {True: "yes", False: "NO"}.get(r.get("within_noise"), "")
            out.append(f"| {r['job']} | {step_label(r['step'])} | {r['commitlog_bytes'] / 1e6:,.1f} | "
                       f"{r['seconds']:.1f} | {num(r.get('spread_seconds'))} | {num(r.get('cold_seconds'))} | "
                       f"{r['sec_per_gb']:,.0f} | {num(r.get('net_sec_per_gb'), '{:,.0f}')} | "
                       f"{num(r.get('net_noise_sec_per_gb'), '{:,.0f}')} | {flat} | "
                       f"{num(r.get('marginal_sec_per_gb'), '{:,.0f}')} | {num(r.get('task_seconds'))} | "
                       f"{num(r.get('net_task_sec_per_gb'), '{:,.0f}')}"
                       f"{num(r.get('net_task_noise_sec_per_gb'), ' +- {:,.0f}')} | {mib(r, 'driver_jvm')} | "
                       f"{mib(r, 'python_worker')} | {mib(r, 'driver_python')} |")
        out += ["", "s: best of the timed rounds in one warmed-up session; spread: worst less best; cold: the "
                    "session's first (warm-up) run; net s/GB: beyond the mean time of the reference runs just "
                    "before and after it, the median over the rounds, with its noise (the largest of their spread, "
                    "half the largest difference of a step's two reference runs, and the largest gap between a "
                    "reference run and the mean of its neighbours, per GB: how far the fixed cost moves); flat: "
                    "the net s/GB is the largest step's within the two noises; task s: the Spark "
                    "tasks' run time summed (the median over the rounds), net task s/GB beyond the reference's "
                    "with its noise (the two spreads). "
                    "Memory columns: anonymous (RssAnon, sampled) / resident (VmHWM, counts mapped segment pages) "
                    "peak, the least over the rounds."]
    if data.get("incremental"):
        from bench import bench_incremental

        out += ["", "Scheduled audits with `--state` (`bench/bench_incremental.py`: a full and an incremental audit of "
                    "the store grown by the messages appended since the night before, in one warm session):", "",
                bench_incremental.markdown(data["incremental"])]
    return "\n".join(out)


# ---------------------------------------------------------------------------------------------------------


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--size", type=float, default=1024, help="dump size in MiB (default 1024)")
    ap.add_argument("--segment-mib", type=float, default=1024, help="commitlog segment size in MiB (default 1024)")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--baseline-mb", type=float, default=64,
                    help="MB the per-record Python contenders (scalar walk, naive loop, scalar decoder) go through "
                         "(default 64)")
    ap.add_argument("--writer-mb", type=float, default=256, help="MB the bulk writer writes per run (default 256)")
    ap.add_argument("--index-lookups", type=int, default=2000, help="random key lookups (default 2000)")
    ap.add_argument("--repeat", type=int, default=2, help="runs per figure, the best counts (default 2; the jobs "
                                                          "in sessions of their own run once)")
    ap.add_argument("--scale-mib", type=float, default=16, help="scaling base size in MiB (default 16)")
    ap.add_argument("--scale-reference-mib", type=float, default=0.25,
                    help="size of the reference dump whose run measures each job's fixed cost, for net s/GB "
                         "(default 0.25; 0 leaves it out)")
    ap.add_argument("--scale-steps", type=int, nargs="+", default=[1, 4, 16], help="scaling factors (default 1 4 16)")
    ap.add_argument("--scale-segment-mib", type=float, default=16,
                    help="segment size of the scaling dumps in MiB (default 16: x1 is one segment, x16 sixteen)")
    ap.add_argument("--scale-flows", type=float, default=1.0,
                    help="times the generator's transaction and send-back rates in the scaling dumps (default 1; "
                         "issue 40's memory target: 10)")
    ap.add_argument("--scale-jobs", nargs="+", default=list(scaling.JOBS), choices=scaling.JOBS)
    ap.add_argument("--scale-rounds", type=int, default=2,
                    help="timed rounds over the scaling steps, the best counts and the spread is the noise (default 2)")
    ap.add_argument("--scale-warmup-step", type=int, default=4,
                    help="the step whose dump the untimed warm-up runs read (default 4: as many segments as cores "
                         "at least)")
    ap.add_argument("--scale-warmups", type=int, default=2,
                    help="untimed warm-up runs per scaling session (default 2: a session's audits keep getting faster "
                         "for a couple of runs)")
    ap.add_argument("--cluster-executor-memory", default="1g",
                    help="the cluster figure's executor memory, and each Worker's (default 1g)")
    ap.add_argument("--incremental-steps", type=float, nargs="+", default=[1, 4],
                    help="the incremental part's store sizes, as factors of --size (default 1 4: the 1/10 and the "
                         "state share at --size, the scaling at 4x)")
    ap.add_argument("--incremental-append-mib", type=float, default=64,
                    help="MiB of messages appended since the night before (default 64)")
    ap.add_argument("--incremental-rounds", type=int, default=2, help="full/incremental pairs per size (default 2)")
    ap.add_argument("--skip", nargs="+", default=[], choices=GROUPS, help="parts to leave out")
    ap.add_argument("--cache", type=Path, default=CACHE, help="where dumps are cached (default bench/cache)")
    ap.add_argument("--results", type=Path, default=RESULTS, help="results file (default bench/results.json)")
    ap.add_argument("--markdown", type=Path, metavar="RESULTS",
                    help="print the tables of a results.json as BENCHMARKS.md shows them, and exit")
    args = ap.parse_args(argv)
    if args.markdown:
        print(markdown(json.loads(args.markdown.read_text())))
        return 0
    skip = set(args.skip)
    started, t0, load0 = dt.datetime.now(dt.timezone.utc), time.perf_counter(), os.getloadavg()
    spec = DumpSpec(args.size, args.seed, args.segment_mib)
    t = time.perf_counter()
    meta = ensure_dump(spec, args.cache)
    print(f"dump {spec.key}: {meta['messages']:,} messages, {meta['commitlog_bytes'] / 1e6:,.1f} MB of records in "
          f"{meta['segments']} segment(s), {meta['index_files']} index file(s) (ready in "
          f"{time.perf_counter() - t:.1f} s); {os.cpu_count()} cores, load {load_text(load0)}", flush=True)
    work = Path(tempfile.mkdtemp(prefix="bench-run-"))
    scaling_rows, incremental, wall, failures = None, None, {}, {}

    def save(complete: bool) -> None:
        """results.json as far as the run got (rewritten after every figure: an interrupted run leaves them)."""
        wall["total_seconds"] = time.perf_counter() - t0
        data = results(bench, meta, scaling_rows, incremental, machine={**machine(), "load_average_start": list(load0),
                                                            "load_average_end": list(os.getloadavg())},
                       failures=failures, run={"started": started.isoformat(timespec="seconds"), "complete": complete,
                            "argv": sys.argv[1:] if argv is None else list(argv), "skipped": sorted(skip), **wall})
        write_results(args.results, data)

    bench = Bench(args.repeat, log=lambda s: print(s, flush=True), on_add=lambda: save(False))
    try:
        segs = load_messages(Path(meta["store"]))
        ceilings(bench, segs)
        if "framing" not in skip:
            framing(bench, segs, args.baseline_mb)
        if "decode" not in skip:
            decoders(bench, segs, args.baseline_mb)
        if "index" not in skip:
            index_lookups(bench, Path(meta["store"]), segs, args.index_lookups, args.seed)
        del segs
        if "writer" not in skip:
            writer(bench, spec, work, args.writer_mb, args.repeat)
        if "spark" not in skip:
            t = time.perf_counter()
            spark = spark_session()
            try:
                spark_figures(bench, spark, meta, work)
            finally:
                spark.stop()
            wall["spark_seconds"] = time.perf_counter() - t
        if "scaling" not in skip:
            t = time.perf_counter()
            scale = DumpSpec(args.scale_mib, args.seed, args.scale_segment_mib, flows=args.scale_flows)
            def keep(rows):
                nonlocal scaling_rows
                scaling_rows = rows
                save(False)
            scaling_rows = scaling_runs(scale, args.scale_steps, args.scale_jobs, args.cache, on_run=keep,
                                        reference_mib=args.scale_reference_mib, rounds=args.scale_rounds,
                                        warmup_step=args.scale_warmup_step, warmups=args.scale_warmups)
            wall["scaling_seconds"] = time.perf_counter() - t
        if "incremental" not in skip:  # issue 41: an audit with --state after the store grew, against a full one
            from bench import bench_incremental

            t = time.perf_counter()
            incremental = bench_incremental.figures([args.size * f for f in args.incremental_steps],
                                                    args.incremental_append_mib, args.incremental_rounds,
                                                    cache=args.cache)
            save(False)
            wall["incremental_seconds"] = time.perf_counter() - t
        if "audit" not in skip:  # late: the longest figures, and an interrupted run keeps all the others
            t = time.perf_counter()
            try:
                audit_small(bench, spec, args.cache)
                job_figure(bench, "audit", meta)
            except subprocess.CalledProcessError as e:  # recorded: a job that fails on the dump is a finding too
                failures["audit"] = f"the audit job exited with status {e.returncode} (its error is on stderr above)"
                print(f"FAILED: {failures['audit']}", flush=True)
            wall["audit_seconds"] = time.perf_counter() - t
        if "cluster" not in skip:  # the audit on local[2] and on two workers, one after the other
            from tools.sparkcluster import DaemonError

            t = time.perf_counter()
            try:
                cluster_figures(bench, meta, work, args.cluster_executor_memory)
            except (subprocess.CalledProcessError, DaemonError) as e:
                failures["cluster"] = f"the cluster figure failed: {e}"
                print(f"FAILED: {failures['cluster']}", flush=True)
            wall["cluster_seconds"] = time.perf_counter() - t
    finally:
        shutil.rmtree(work, ignore_errors=True)
    save(True)
    print(f"results: {args.results} ({wall['total_seconds']:.0f} s in all; load {load_text(load0)} at the start, "
          f"{load_text()} at the end)")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
