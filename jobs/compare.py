"""Compare: two dumps of one broker (master and slave, or two copies) -- where do they part?

  rocketmq-forensics compare --store A B [--print json|text]
         [--out DIR [--format parquet|jsonl|delta] [--overwrite]]

* CommitLog: both salvage walks (every record, blank, damaged stop and unframeable span, also past damage;
  the zero-filled tail is not data) are joined on physical offset.  A walk item is ``equal`` when kind,
  length and bytes agree, else ``different``; an item only one side has is ``only_a``/``only_b`` when it lies
  inside the other side's written data, and ``a_ahead``/``b_ahead`` when it lies past the other side's end
  (a slave that lags its master: no divergence, just missing the tail).  The first divergent physical
  offset is the smallest offset of a ``different``/``only_*`` item; the first differing byte there is named
  too.  Records present in one dump and not the other are listed with their msg ids.
* Consume queues: units joined on (topic, queue id, queue offset): per queue the first differing queue
  offset and the counts of units equal, different, or only in A/B.
* Offset files: ``consumerOffset.json`` (per topic@group and queue) and ``delayOffset.json`` (per level),
  every value that differs.

Prints one JSON summary (``--print text``: readable lines); ``--out`` also writes the differing walk items
and consume-queue units as tables (``commitlog/``, ``consumequeue/``, in the ``--format`` given) and the summary
as ``_manifest.json``.  Exit codes: 0 identical, 1 differences found, 2 bad usage or unreadable input.
"""
from __future__ import annotations

import argparse
import json
import operator
import sys
from functools import reduce

if __package__ in (None, ""):  # spark-submit jobs/compare.py: make the project importable
    try:
        import _bootstrap  # noqa: F401  (jobs/_bootstrap.py)
    except ModuleNotFoundError:  # a copy outside the checkout: the project comes with --py-files
        pass

from store_format.brokerconf import add_geometry_arguments, geometry_from_args  # noqa: E402
from store_format import fs  # noqa: E402
from store_format.config import delay_offsets, read_consumer_offsets  # noqa: E402
from store_format.errors import StoreFormatError  # noqa: E402
from store_format.store import Store  # noqa: E402
from decoding.kernels import scan_offset_table  # noqa: E402

from runtime import cli  # noqa: E402
from runtime.commit import job_run, runs_job  # noqa: E402
from runtime.custody import watch  # noqa: E402
from runtime.cli import EXIT_NOTHING, EXIT_OK, UsageError, add_output_arguments  # noqa: E402
from jobs.extract import MANIFEST_NAME, write_manifest  # noqa: E402
from runtime.stores import StoreRef, protected_paths, resolve_stores  # noqa: E402

DIFF_STATES = ("different", "only_a", "only_b")
LAG_STATES = ("a_ahead", "b_ahead")
_LISTED = 50  # records named in the summary per state


def walk_items(spark, ref: StoreRef):
    """The salvage walk's items that are data (not the zero-filled tail), a record's bytes as a SHA-256."""
    from pyspark.sql import functions as F

    from datasources import read_commitlog

    from pyspark.sql import Window

    df = read_commitlog(spark, fs.uri_of(ref.path), broker=ref.name, walk="salvage", materialize="frames")
    # a record's bytes are its first store_size bytes: the source's frame of a record followed by an
    # unframeable span also carries that span (datasources.commitlog._binary_slices joins them)
    digest = F.sha2(F.expr("substring(frame, 1, store_size)"), 256)
    items = df.where(~((F.col("kind") == "stop") & (F.col("reason") == "END_OF_DATA"))).select(
        "physical_offset", "segment", "kind", "length", "reason", digest.alias("digest"))
    # one item per offset: where damage stops the walk, the salvage walk has a stop row and the corrupt span
    # that starts there; the span is the item (joined as two, one damaged record counted twice)
    first = Window.partitionBy("physical_offset").orderBy((F.col("kind") == "stop").cast("int"))
    return items.withColumn("_n", F.row_number().over(first)).where(F.col("_n") == 1).drop("_n")


def commitlog_diff(spark, a: StoreRef, b: StoreRef):
    """(every joined walk item with its ``status``, end of A's data, end of B's data).  The join is
    persisted: the summary asks several questions of it, and each would otherwise walk both dumps again."""
    from pyspark import StorageLevel
    from pyspark.sql import functions as F

    side = lambda df, s: df.select("physical_offset", *[F.col(c).alias(f"{c}_{s}") for c in df.columns
                                                          if c != "physical_offset"])
    j = side(walk_items(spark, a), "a").join(side(walk_items(spark, b), "b"), "physical_offset", "full")
    j = j.persist(StorageLevel.MEMORY_AND_DISK)
    # where each side's written data ends: the end of its last record, blank or unframeable span
    ends = j.agg(*[F.max(F.when(F.col(f"kind_{s}").isin("message", "blank", "corrupt"),
                                F.col("physical_offset") + F.col(f"length_{s}"))).alias(s) for s in "ab"]).collect()[0]
    end_a, end_b = ends["a"] or 0, ends["b"] or 0
    has_a, has_b = F.col("kind_a").isNotNull(), F.col("kind_b").isNotNull()
    same = ((F.col("kind_a") == F.col("kind_b")) & F.col("length_a").eqNullSafe(F.col("length_b"))
            & F.col("digest_a").eqNullSafe(F.col("digest_b")) & F.col("reason_a").eqNullSafe(F.col("reason_b")))
    status = (F.when(has_a & has_b, F.when(same, "equal").otherwise("different"))
              .when(has_a, F.when(F.col("physical_offset") >= end_b, "a_ahead").otherwise("only_a"))
              .otherwise(F.when(F.col("physical_offset") >= end_a, "b_ahead").otherwise("only_b")))
    return j.withColumn("status", status), end_a, end_b


def first_differing_byte(sa: Store, sb: Store, offset: int, length: int) -> int | None:
    """The first physical offset in [offset, offset + length) where the two commitlogs' bytes differ."""
    def window(store):
        for seg in store.segments:
            if seg.base_offset <= offset < seg.base_offset + seg.length:
                with fs.map_range(fs.resolve(seg.path), offset - seg.base_offset, length) as m:
                    return bytes(m.buf)
        return b""

    wa, wb = window(sa), window(sb)
    for i in range(min(len(wa), len(wb))):
        if wa[i] != wb[i]:
            return offset + i
    return offset + min(len(wa), len(wb)) if len(wa) != len(wb) else None


def describe(store: Store, kind: str | None, offset: int) -> dict:
    """Who the record at ``offset`` is (read from the dump itself)."""
    if kind != "message":
        return {}
    try:
        m = store.read_message(offset)
    except StoreFormatError as e:
        return {"decode_error": e.kind.value}
    return {"msg_id": m.msg_id, "topic": m.topic, "queue_id": m.queue_id, "queue_offset": m.queue_offset,
            "uniq_key": m.uniq_key}


def consume_queue_diff(spark, a: StoreRef, b: StoreRef):
    from pyspark.sql import functions as F

    def units(ref, s):
        df = (spark.read.format("rocketmq-consumequeue").option("broker", ref.name).load(fs.uri_of(ref.path))
              .where(F.col("kind").isin("entry", "pre_blank")))
        return df.select("topic", "queue_id", "queue_offset", *[F.col(c).alias(f"{c}_{s}") for c in
                                                                ("physical_offset", "size", "tags_code", "kind")])

    j = units(a, "a").join(units(b, "b"), ["topic", "queue_id", "queue_offset"], "full")
    has_a, has_b = F.col("kind_a").isNotNull(), F.col("kind_b").isNotNull()
    same = reduce(operator.and_, [F.col(f"{c}_a") == F.col(f"{c}_b") for c in ("physical_offset", "size", "tags_code",
                                                                                "kind")])
    status = F.when(has_a & has_b, F.when(same, "equal").otherwise("different")).when(has_a, "only_a") \
        .otherwise("only_b")
    return j.withColumn("status", status)


def offset_file_diff(sa: Store, sb: Store) -> list[dict]:
    """Every consumer offset (topic@group, queue) and delay offset (level) whose value differs."""
    out = []
    consumers = [read_consumer_offsets(s.root / "config", offset_scan=scan_offset_table) for s in (sa, sb)]
    ca, cb = (r.table for r in consumers)
    for topic, group in sorted(set(ca) | set(cb)):
        qa, qb = ca.get((topic, group), {}), cb.get((topic, group), {})
        for q in sorted(set(qa) | set(qb)):
            if qa.get(q) != qb.get(q):
                out.append({"file": "consumerOffset.json", "key": f"{topic}@{group}", "queue_id": q,
                            "a": qa.get(q), "b": qb.get(q)})
    delays = [s.config("delayOffset.json") for s in (sa, sb)]
    da, db = (delay_offsets(cfg) for cfg in delays)
    for level in sorted(set(da) | set(db)):
        if da.get(level) != db.get(level):
            out.append({"file": "delayOffset.json", "key": f"level {level}", "a": da.get(level), "b": db.get(level)})
    # each file read once (a busy broker's consumerOffset.json is hundreds of MB): readable as read above
    readable = {"consumerOffset.json": [r.readable for r in consumers],
                "delayOffset.json": [cfg.data is not None for cfg in delays]}
    for name, (ra, rb) in readable.items():
        if ra != rb:
            state = lambda ok: "readable" if ok else "missing or unreadable"  # noqa: E731
            out.append({"file": name, "key": "(file)", "a": state(ra), "b": state(rb)})
    return out


@runs_job("compare")
def run(spark, args, out=None, err=None) -> cli.JobResult:
    """Compare the two stores; the summary (the job's output) goes to ``out``."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    from runtime.output import out_join, prepare_output, write_table

    out, err = out or sys.stdout, err or sys.stderr
    stores = resolve_stores(args.store, files=True, geometry=geometry_from_args(args))
    if len(stores) != 2:
        raise UsageError(f"compare takes exactly two stores (--store A --store B); got {len(stores)}")
    a, b = stores
    watch(job_run("compare"), stores)  # the stores' chain of custody, checked again before the commit
    staged = output = None
    if args.out:  # claimed (again: the same claim), written beside itself, committed when run() returns
        output = prepare_output(args.out, overwrite=args.overwrite, inputs=protected_paths(args.store, stores),
                                job="compare")
        staged = output.staging
    sa, sb = a.open(), b.open()

    items, end_a, end_b = commitlog_diff(spark, a, b)
    counts = {r["status"]: r["count"] for r in items.groupBy("status").count().collect()}
    diffs = items.where(F.col("status") != "equal")
    named = (diffs.where(F.col("kind_a").eqNullSafe("message") | F.col("kind_b").eqNullSafe("message"))
             .select("physical_offset", "status", "kind_a", "kind_b").distinct()
             .withColumn("_n", F.row_number().over(Window.partitionBy("status").orderBy("physical_offset")))
             .where(F.col("_n") <= _LISTED).orderBy("physical_offset").collect())
    listed = {}
    for r in named:
        entry = {"physical_offset": r["physical_offset"]}
        for name, store, kind in (("a", sa, r["kind_a"]), ("b", sb, r["kind_b"])):
            if kind == "message":
                entry[name] = describe(store, kind, r["physical_offset"])
        listed.setdefault(r["status"], []).append(entry)
    first = diffs.where(F.col("status").isin(*DIFF_STATES)).orderBy("physical_offset", "kind_b").limit(1).collect()
    divergence = None
    if first:
        r = first[0]
        off = r["physical_offset"]
        length = max(x for x in (r["length_a"], r["length_b"], 1) if x is not None)
        divergence = {"physical_offset": off, "status": r["status"],
                      "a": {"kind": r["kind_a"], "length": r["length_a"], "reason": r["reason_a"],
                            **describe(sa, r["kind_a"], off)},
                      "b": {"kind": r["kind_b"], "length": r["length_b"], "reason": r["reason_b"],
                            **describe(sb, r["kind_b"], off)},
                      "first_differing_byte": first_differing_byte(sa, sb, off, length)}

    units = consume_queue_diff(spark, a, b)
    per_queue = (units.groupBy("topic", "queue_id").agg(
        *[F.sum((F.col("status") == s).cast("long")).alias(s) for s in ("equal",) + DIFF_STATES],
        F.min(F.when(F.col("status") != "equal", F.col("queue_offset"))).alias("first_differing_queue_offset"))
        .where(F.col("first_differing_queue_offset").isNotNull()).orderBy("topic", "queue_id").collect())
    offsets = offset_file_diff(sa, sb)

    records_differ = any(counts.get(s) for s in DIFF_STATES + LAG_STATES)
    summary = {
        "job": "compare", "a": {"broker": a.name, "path": str(a.root), "data_end": end_a},
        "b": {"broker": b.name, "path": str(b.root), "data_end": end_b},
        "identical": not (records_differ or per_queue or offsets),
        "commitlog": {"items": {s: counts.get(s, 0) for s in ("equal",) + DIFF_STATES + LAG_STATES},
                      "first_divergence": divergence, "records": listed},
        "consumequeue": [r.asDict() for r in per_queue],
        "offset_files": offsets,
    }
    if args.out:
        cols = ["physical_offset", "status", "segment_a", "kind_a", "length_a", "reason_a", "segment_b", "kind_b",
                "length_b", "reason_b"]
        write_table(diffs.select(*cols).orderBy("physical_offset"), out_join(staged, "commitlog"), args.format)
        write_table(units.where(F.col("status") != "equal").orderBy("topic", "queue_id", "queue_offset"),
                    out_join(staged, "consumequeue"), args.format)
        write_manifest(staged, summary)
        output.expect("commitlog", "consumequeue", MANIFEST_NAME)  # the commit checks they arrived where it looks
    items.unpersist()
    write_summary(summary, args.print, out)
    print(f"compare: {'identical' if summary['identical'] else 'differences found'}", file=err)
    return cli.JobResult("", EXIT_OK if summary["identical"] else EXIT_NOTHING)


_STATE_WORDS = {"different": "differ", "only_a": "only in A (inside B's data)", "only_b": "only in B (inside A's data)",
                "a_ahead": "only in A, past B's end", "b_ahead": "only in B, past A's end"}


def _item_words(side: dict | None) -> str:
    """One side of a walk item in words: a message by who it is, anything else by its kind, size and reason."""
    if not side or side.get("kind") is None:
        return "nothing there"
    if side["kind"] == "message":
        who = f"{side['topic']}/{side['queue_id']} at queue offset {side['queue_offset']}" if "topic" in side else \
            f"undecodable ({side.get('decode_error')})"
        ids = "".join(f", {label} {side[k]}" for k, label in (("msg_id", "msg id"), ("uniq_key", "uniq key"))
                      if side.get(k))
        return f"message {who}{ids} ({side['length']:,} bytes)"
    reason = f", {side['reason']}" if side.get("reason") else ""
    return f"{side['kind']} ({side['length'] or 0:,} bytes{reason})"


def write_summary(summary: dict, fmt: str, out) -> None:
    if fmt == "json":
        out.write(json.dumps(summary, ensure_ascii=False, default=str) + "\n")
        return
    a, b, cl = summary["a"], summary["b"], summary["commitlog"]
    lines = [f"A {a['broker']}: {a['path']} (data ends at physical offset {a['data_end']:,})",
             f"B {b['broker']}: {b['path']} (data ends at physical offset {b['data_end']:,})"]
    n = cl["items"]
    lines.append(f"commitlog: {n['equal']:,} record(s) equal, {n['different']:,} differ, {n['only_a']:,} only in A, "
                 f"{n['only_b']:,} only in B; past the other's end: {n['a_ahead']:,} in A, {n['b_ahead']:,} in B")
    d = cl["first_divergence"]
    if d:
        byte = d["first_differing_byte"]
        lines += [f"first divergence at physical offset {d['physical_offset']:,}"
                  + (f" (first differing byte {byte:,})" if byte is not None else ""),
                  f"  A: {_item_words(d['a'])}", f"  B: {_item_words(d['b'])}"]
    else:
        lines.append("no divergence in the data both sides hold")
    for state, rows in cl["records"].items():
        lines.append(f"records that {_STATE_WORDS.get(state, state)}: "
                     + ", ".join(f"{r['physical_offset']:,}" for r in rows))
    for q in summary["consumequeue"]:
        lines.append(f"consume queue {q['topic']}/{q['queue_id']}: first difference at queue offset "
                     f"{q['first_differing_queue_offset']:,} ({q['equal']:,} unit(s) equal, {q['different']:,} "
                     f"differ, {q['only_a']:,} only in A, {q['only_b']:,} only in B)")
    for o in summary["offset_files"]:
        queue = f" queue {o['queue_id']}" if "queue_id" in o else ""
        lines.append(f"{o['file']} {o['key']}{queue}: A {_value(o['a'])}, B {_value(o['b'])}")
    out.write("".join(f"{line}\n" for line in lines))


def _value(v) -> str:
    return "absent" if v is None else str(v)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog=f"{cli.PROG} compare", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    cli.add_store_arguments(p, what="the two stores to compare (give exactly two)")
    p.add_argument("--print", choices=("json", "text"), default="json", help="how the summary is printed")
    add_output_arguments(p, required=False)
    add_geometry_arguments(p)
    return p


def check_args(args) -> None:
    geometry_from_args(args)  # a broker.conf that cannot be used is bad usage
    if len(args.store) != 2:
        raise UsageError(f"compare takes exactly two --store paths; got {len(args.store)}")


def check_and_prepare(args) -> None:
    """The arguments and the inputs checked, then --out prepared, before Spark starts (run() prepares again)."""
    from runtime.output import prepare_output

    check_args(args)
    stores = resolve_stores(args.store, files=True, geometry=geometry_from_args(args))
    if args.out:
        prepare_output(args.out, overwrite=args.overwrite, inputs=protected_paths(args.store, stores), job="compare")


def main(argv=None, prog: str | None = None) -> int:
    return cli.main("compare", build_parser, run, argv, prepare=check_and_prepare, prog=prog)


if __name__ == "__main__":
    sys.exit(main())
