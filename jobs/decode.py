"""decode: export every message of one or more broker dumps as a table.

  rocketmq-forensics decode --store PATH [PATH ...] --out DIR [--format parquet|delta|jsonl]
                            [--walk kept|salvage] [--topic T ...] [--columns C,C,...] [--decompress]
                            [--overwrite]

The messages table has one row per stored message, with the canonical columns of the ``rocketmq-commitlog``
data source read with ``materialize=decoded``: location (``broker, segment,
file_position, physical_offset, store_size``, ``beyond_first_stop`` = behind damage in its segment, ``kept`` =
before the broker's predicted cut), every stored field, and the derived ones (msg_id, uniq_key, keys, tags,
tran_type, compression, body_crc_ok, ...); ``--columns`` keeps only the named ones (with the location columns and
topic), and is cheaper: the data source then decodes and ships only those.  ``--walk kept`` (default): what the
broker keeps after its predicted recovery, every intact message before the cut the audit reports; ``salvage``:
every intact message, also past damage and past the cut (``kept`` false there).  Damage is not part of this table
(the audit reports it); the summary line says where each broker's recovery cuts the log, counts where a walk
stopped on damage and the unframeable spans it skipped.

Exit codes: 0 messages written, 1 nothing matched (an empty table is still written), 2 could not run.
"""
from __future__ import annotations

import argparse
import json
import os
import sys

if __package__ in (None, ""):  # spark-submit jobs/decode.py: make the project importable
    try:
        import _bootstrap  # noqa: F401  (jobs/_bootstrap.py)
    except ModuleNotFoundError:  # a copy outside the checkout: the project comes with --py-files
        pass

from runtime import cli  # noqa: E402
from runtime.commit import job_run, runs_job  # noqa: E402
from runtime.custody import watch  # noqa: E402
from runtime.export import Rows  # noqa: E402
from runtime.output import prepare_output, read_table, write_delta, write_table  # noqa: E402
from runtime.progress import Phase  # noqa: E402
from store_format.commitlog import CONTAINER_FIELDS  # noqa: E402
from store_format.fs import Location  # noqa: E402
from store_format.scan import WALKS, canonical_walk, walk_help  # noqa: E402

NAME = "decode"
# The data source's damage columns are always null on message rows; ``length`` repeats store_size there.  The
# container's columns (store_format.commitlog.CONTAINER_FIELDS) are not the message's: the table keeps its own.
NOT_MESSAGE_COLUMNS = ("kind", "length", "reason", "field", "detail", "excerpt_hex") + tuple(
    name for name, _, _ in CONTAINER_FIELDS)


def build_parser() -> argparse.ArgumentParser:
    table = __doc__[__doc__.index("The messages table"):__doc__.index("Exit codes")]
    p = argparse.ArgumentParser(prog=f"{cli.PROG} decode", description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter,
                                epilog=f"{table}Exit codes: 0 messages written, 1 nothing matched, 2 could not run.")
    cli.add_store_arguments(p, what="a broker store root, a folder of broker stores, a commitlog folder or segment "
                                    "file (local path or pyarrow URI)")
    cli.add_output_arguments(p)
    p.add_argument("--walk", type=canonical_walk, choices=WALKS, default="kept", help=walk_help("kept"))
    p.add_argument("--topic", action="append", metavar="T",
                   help="keep only this topic (repeatable)")
    p.add_argument("--columns", metavar="C,C,...", type=_column_list,
                   help="keep only these message columns besides the location columns and topic (e.g. "
                        "queue_id,queue_offset,store_timestamp,tags,keys,body); default: every column")
    p.add_argument("--decompress", action="store_true",
                   help="add decompressed_body (and decompress_error) for compressed bodies")
    return p


def _column_list(text: str) -> list[str]:
    """--columns: message column names, checked against the data source's decoded columns."""
    from datasources import parse_columns

    try:
        return list(parse_columns(text, "decoded") or ())
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e).removeprefix("option columns: ")) from None


def messages(spark, stores: list, walk: str = "kept", topics: list[str] | None = None,
             decompress: bool = False, columns: list[str] | None = None, cuts: dict | None = None):
    """The messages of ``stores`` (runtime.stores.StoreRef: each read under its broker name; optionally of
    ``topics`` only) as a DataFrame; ``columns``: only these message columns (and the location columns and
    topic); ``cuts``: {broker: store_format.recovery.Cut} (predicted by the source when not given)."""
    from functools import reduce

    from pyspark.sql import functions as F

    from datasources import read_commitlog

    chosen = {"columns": ",".join(dict.fromkeys(["topic", *columns]))} if columns else {}
    frames = [read_commitlog(spark, s.read_path(), materialize="decoded", walk=walk, broker=s.name,
                             decompress=str(decompress).lower(), **chosen, **_cut_option(s, cuts)) for s in stores]
    msgs = reduce(lambda a, b: a.unionByName(b), frames).where(F.col("kind") == "message")
    if topics:
        msgs = msgs.where(F.col("topic").isin(topics))
    return msgs.drop(*NOT_MESSAGE_COLUMNS)


def _cut_option(ref, cuts: dict | None) -> dict:
    """The source's ``recoveryCuts`` option for one store (none: the source predicts the cut itself)."""
    return {} if cuts is None else {"recoveryCuts": json.dumps({ref.name: cuts[ref.name].as_dict()})}


def _damage(spark, stores: list, walk: str, cuts: dict | None = None) -> dict[str, int]:
    """How many walks stopped on damage and how many unframeable spans were skipped (positions only)."""
    from functools import reduce

    from pyspark.sql import functions as F

    from datasources import read_commitlog
    from store_format.commitlog import END_OF_DATA

    frames = [read_commitlog(spark, s.read_path(), materialize="positions", walk=walk, broker=s.name,
                             **_cut_option(s, cuts)) for s in stores]
    rows = (reduce(lambda a, b: a.unionByName(b), frames)
            .where((F.col("kind") == "corrupt") | ((F.col("kind") == "stop") & (F.col("reason") != END_OF_DATA)))
            .groupBy("kind").count().collect())
    return {r["kind"]: r["count"] for r in rows}


def check_inputs(paths: list[str]) -> None:
    """Every ``--store`` path that is on this machine can be read (a FIFO, a link loop, no permission: an
    UnreadableError naming it), checked before anything else, so a bad input never costs an output."""
    from store_format import fs

    for path in paths:
        local = fs.local_path(path)
        if local is not None and os.path.lexists(local):
            (fs.check_folder if os.path.isdir(local) else fs.check_file)(local)


def prepare(args) -> list:
    """The stores (runtime/stores.py) and the output folder, checked before Spark starts: the inputs first."""
    from runtime.stores import resolve_stores, split_name

    paths = [split_name(a)[1] for a in args.store]
    check_inputs(paths)
    stores = resolve_stores(args.store, files=True)
    prepare_output(args.out, overwrite=args.overwrite, inputs=paths + [s.path for s in stores], job="decode")
    return stores


# formats whose files the tasks write themselves (runtime/export.py); jsonl goes through Spark's JSON writer
TASK_WRITTEN = ("parquet", "delta")


class MessageRows(Rows):
    """What the decode job keeps of the source's rows (as :func:`messages` does): the messages (of ``topics``),
    without the columns that are not the message's; the walk's damage counted on the way (as :func:`_damage`
    counts it: the stops on damage and the corrupt spans)."""

    distinct = ("broker", "topic")

    def __init__(self, topics: list[str] | None, drop: tuple[str, ...]):
        self.topics, self.drop = tuple(topics) if topics else None, drop

    def keep(self, batch, tally):
        import pyarrow as pa
        import pyarrow.compute as pc

        from store_format.commitlog import END_OF_DATA

        kind = batch.column("kind")
        for name, rows in (("corrupt", pc.equal(kind, "corrupt")),
                           ("stop", pc.and_(pc.equal(kind, "stop"),
                                            pc.not_equal(batch.column("reason"), END_OF_DATA)))):
            n = pc.sum(pc.fill_null(rows, False).cast(pa.int64())).as_py() or 0
            if n:
                tally.counts[name] = tally.counts.get(name, 0) + n
        mask = pc.equal(kind, "message")
        if self.topics:
            mask = pc.and_(mask, pc.is_in(batch.column("topic"), value_set=pa.array(self.topics, pa.string())))
        kept = batch.filter(pc.fill_null(mask, False))
        return kept.select([n for n in kept.schema.names if n not in self.drop])


def write_messages(spark, stores: list, folder: Location, walk: str = "kept", topics: list[str] | None = None,
                   decompress: bool = False, columns: list[str] | None = None, cuts: dict | None = None,
                   executor=None):
    """:func:`messages` written as Parquet into ``folder`` by the tasks that read them (runtime/export.py): the
    table Spark's writer makes of that DataFrame, without a row through the JVM.  Returns the tasks' tally
    (runtime.export.Tally: rows, distinct brokers and topics, the walk's damage counts).  ``executor``: where the
    tasks run (runtime.session.Executor; the session's choice when None)."""
    from datasources import plan_commitlog
    from runtime.export import Part, PartWriter, spark_written_schema, write_parts
    from store_format.fs import uri_of

    chosen = {"columns": ",".join(dict.fromkeys(["topic", *columns]))} if columns else {}
    parts, schema = [], None
    for s in stores:
        reader, ranges, schema = plan_commitlog(spark, s.read_path(), materialize="decoded", walk=walk,
                                                broker=s.name, decompress=str(decompress).lower(), **chosen,
                                                **_cut_option(s, cuts))
        parts += [Part(reader, r) for r in ranges]
    drop = tuple(n for n in schema.names if n in NOT_MESSAGE_COLUMNS)
    written = spark_written_schema(schema, [n for n in schema.names if n not in drop], spark.version)
    # the tasks get the folder as the string that resolves to it again in their own process
    return write_parts(spark, parts, PartWriter(uri_of(folder), written, MessageRows(topics, drop)), executor)


@runs_job(NAME)
def run(spark, args) -> cli.JobResult:
    stores = prepare(args)  # again: run() is also called directly, without main(); the same claim
    watch(job_run(NAME), stores)  # the stores' chain of custody, checked again before the commit
    staged = prepare_output(args.out, overwrite=args.overwrite, job=NAME).staging  # committed on return
    from jobs.extract import predictions

    cuts = {name: p.cut for name, p in predictions(stores).items()}
    sizes = [s.commitlog_bytes() for s in stores]
    columns = getattr(args, "columns", None)
    if args.format in TASK_WRITTEN:
        tallies = []

        def write(folder: Location) -> None:
            tallies.append(write_messages(spark, stores, folder, args.walk, args.topic, args.decompress, columns,
                                          cuts))

        with Phase("decode and write", None if None in sizes else sum(sizes), spark):
            if args.format == "delta":  # the tasks' files, committed by delta-rs as Spark's would be
                write_delta(staged, "overwrite", write, lambda: None)  # never empty: write_parts leaves a file
            else:
                write(staged)
        tally = tallies[0]
        stats = {"n": tally.rows, "brokers": len(tally.distinct.get("broker", ())),
                 "topics": len(tally.distinct.get("topic", ()))}
        damage = tally.counts
    else:
        msgs = messages(spark, stores, args.walk, args.topic, args.decompress, columns, cuts)
        with Phase("decode and write", None if None in sizes else sum(sizes), spark):
            write_table(msgs, staged, args.format)
        from pyspark.sql import functions as F

        stats = (read_table(spark, staged, args.format, schema=msgs.schema)
                 .agg(F.count(F.lit(1)).alias("n"), F.countDistinct("broker").alias("brokers"),
                      F.countDistinct("topic").alias("topics")).first())
        damage = _damage(spark, stores, args.walk, cuts)
    where = "; ".join(f"{name} recovery cuts at physical offset {c.physical_offset:,} ({c.kind})"
                      for name, c in cuts.items())
    summary = (f"decode: {stats['n']} messages ({stats['topics']} topics, {stats['brokers']} brokers) written to "
               f"{args.out.as_typed} as {args.format}; walk {args.walk}: {damage.get('stop', 0)} stops on damage, "
               f"{damage.get('corrupt', 0)} corrupt spans skipped; {where}")
    return cli.JobResult(summary, cli.EXIT_OK if stats["n"] else cli.EXIT_NOTHING)


def main(argv=None, prog: str | None = None) -> int:
    return cli.main(NAME, build_parser, run, argv, prepare=prepare, prog=prog)


if __name__ == "__main__":
    sys.exit(main())
