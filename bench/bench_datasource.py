"""Throughput of the ``rocketmq-commitlog`` source on local[2], next to the raw read speed of the same files.

    .venv/bin/python bench/bench_datasource.py [--mb 384] [--segment-mb 128] [--split-mb 32 64]

Generates (once, cached in bench/cache/) a store of ~475-byte records written with store_format.codec, then
measures in one run: raw sequential read of the segment files (page cache warm), the stops pass that finds
the segment ends, a positions-only scan, and a fully decoded scan (every canonical column, from
udfs.kernels).  Spark scans end in the ``noop`` sink so every column reaches the JVM.  Prints MB/s of
commitlog and messages/s, and each scan's ratio to the raw read.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from store_format.codec import encode_blank, encode_record  # noqa: E402
from store_format.commitlog import segment_name  # noqa: E402
from store_format.message import Message  # noqa: E402

CACHE = REPO / "bench" / "cache"


def generate(root: Path, total_mb: int, segment_mb: int) -> dict:
    """A store of ``total_mb`` MiB in ``segment_mb`` MiB segments; ~475-byte records (300-byte bodies)."""
    meta_path = root / "meta.json"
    if meta_path.exists():
        meta = json.loads(meta_path.read_text())
        if meta["total_mb"] == total_mb and meta["segment_mb"] == segment_mb:
            return meta
    cl = root / "store" / "commitlog"
    cl.mkdir(parents=True, exist_ok=True)
    for old in cl.iterdir():
        old.unlink()
    seg = segment_mb << 20
    body = os.urandom(300)
    n = 0
    for s in range(max(1, total_mb // segment_mb)):
        base, buf, pos = s * seg, bytearray(seg), 0
        while True:
            m = Message(topic=f"BenchTopic{n % 8}", body=body, queue_id=n % 4, queue_offset=n // 32,
                        physical_offset=base + pos, born_timestamp=1_700_000_000_000 + n,
                        store_timestamp=1_700_000_000_000 + n, born_host="10.0.0.1:50000",
                        store_host="10.0.0.2:10911",
                        properties_raw=f"UNIQ_KEY\x01C0A8000A30391B6D3586{n:012X}\x02KEYS\x01order-{n}\x02TAGS"
                                       f"\x01Tag{n % 16}\x02WAIT\x01true")
            rec = encode_record(m)
            if pos + len(rec) + 8 > seg:
                buf[pos:pos + 8] = encode_blank(seg - pos)
                break
            buf[pos:pos + len(rec)] = rec
            pos += len(rec)
            n += 1
        (cl / segment_name(base)).write_bytes(bytes(buf))
    meta = {"total_mb": total_mb, "segment_mb": segment_mb, "messages": n, "record_size": len(rec),
            "bytes": sum(p.stat().st_size for p in cl.iterdir())}
    meta_path.write_text(json.dumps(meta))
    return meta


def raw_read(root: Path) -> float:
    t = time.perf_counter()
    for p in sorted((root / "store" / "commitlog").iterdir()):
        with open(p, "rb") as f:
            while f.read(8 << 20):
                pass
    return time.perf_counter() - t


def timed(fn) -> float:
    t = time.perf_counter()
    fn()
    return time.perf_counter() - t


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--mb", type=int, default=384)
    ap.add_argument("--segment-mb", type=int, default=128)
    ap.add_argument("--split-mb", type=int, nargs="+", default=[32, 64])
    args = ap.parse_args(argv)
    root = CACHE / f"store-{args.mb}-{args.segment_mb}"
    meta = generate(root, args.mb, args.segment_mb)
    mb, n = meta["bytes"] / 1e6, meta["messages"]
    print(f"store: {mb:.0f} MB, {n} messages of {meta['record_size']} bytes", file=sys.stderr)
    raw_read(root)  # warm the page cache, then measure
    raw = min(raw_read(root) for _ in range(3))

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from jobs.session import build_session
    from datasources.commitlog import FORMAT, read_commitlog
    from pyspark.sql import functions as F

    spark = build_session("bench-datasource", master="local[2]",
                          extra={"spark.ui.enabled": "false", "spark.driver.memory": "2g"})
    path = str(root / "store")
    results = [("raw read (1 core, page cache)", raw, None)]

    def noop(df):
        df.write.format("noop").mode("overwrite").save()

    # one warm-up query: the first in a session pays JVM and worker start-up
    spark.read.format(FORMAT).options(materialize="positions", splitSize=str(1 << 20)).load(
        str(root / "store" / "commitlog" / segment_name(0))).count()
    for split in args.split_mb:
        opts = {"splitSize": str(split << 20)}
        stops = spark.read.format(FORMAT).options(**opts, materialize="positions", walk="salvage",
                                                  segmentEnds="unresolved").load(path)
        t_stops = timed(lambda: stops.where(F.col("kind").isin("stop", "blank")).collect())
        results.append((f"stops pass (split {split} MiB)", t_stops, None))
        for mat in ("positions", "decoded"):
            ends = {}
            t_ends = timed(lambda: ends.update(
                df=read_commitlog(spark, path, materialize=mat, **opts)))
            t_scan = timed(lambda: noop(ends["df"]))
            results.append((f"{mat}: scan with known ends (split {split} MiB)", t_scan, n))
            results.append((f"{mat}: read_commitlog total, ends pass + scan", t_ends + t_scan, n))
    spark.stop()
    print(f"{'what':58} {'s':>7} {'MB/s':>8} {'msg/s':>11} {'x raw':>7}")
    for what, t, rows in results:
        print(f"{what:58} {t:7.2f} {mb / t:8.0f} {(f'{rows / t:,.0f}' if rows else ''):>11} {raw / t:7.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
