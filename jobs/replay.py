"""Replay: write extracted or salvaged messages into a fresh, complete broker store.

  rocketmq-forensics replay --input EXTRACT_DIR [--input-format parquet|delta|jsonl] --out NEW_STORE
  rocketmq-forensics replay --repair STORE --out NEW_STORE [--walk salvage|kept] [--dedupe]
         [--overwrite] [--dry-run] [--config broker.conf] [--set NAME=VALUE ...] [--store-host HOST] [--no-trace]

``--input`` takes an extract (``rocketmq-forensics extract``) or any table with the canonical message columns
(``topic`` and ``body`` required; ``properties_raw``, or ``properties``, and the other stored fields as in the
JSON Lines format of docs/writing-stores.md).  ``--repair STORE`` is extract + replay in one go: every record
the salvage walk frames, also past damage and past the point where the broker's recovery would stop
(``--walk kept``: only what the broker keeps after its predicted recovery), optionally de-duplicated like
``extract --dedupe``.

Records are written by the project's store writer in their original order -- by (broker, physical offset),
so every queue keeps its order -- and get new physical and queue offsets; the consume queues, index files,
checkpoint and config/*.json are built as the broker builds them, and the store is shut down cleanly: a
complete store.  Each record keeps its topic, queue id, flags, timestamps, hosts (``--store-host`` restamps
the store host), reconsume times, body and properties string (UNIQ_KEY and KEYS stay, so the new index finds
them), and gains three properties that keep it traceable (``--no-trace`` leaves the properties as they were):

  FORENSICS_ORIGIN_MSG_ID        the offsetMsgId it had in the dump (original store host + physical offset)
  FORENSICS_ORIGIN_BROKER        the dump it came from (the ``broker`` label)
  FORENSICS_ORIGIN_QUEUE_OFFSET  its queue offset there

A record that already carries them (a replay of a replay) keeps the first origin.  Transactions stay whole:
a COMMIT (or ROLLBACK) record's prepared-transaction offset moves to its half's (or PREPARED record's) new
offset, and an op record's body (half queue offsets) to the halves' new queue offsets; an op whose halves
were not replayed is rejected (TX_OP_WITHOUT_HALF) rather than resolve the wrong half.  A repair also
carries the source's topics.json queue counts, subscription groups and committed consumer offsets
(translated to the new queue offsets: a group resumes at the first record it had not consumed; one that
had consumed the whole queue, or committed past its end, stays at the end).

Settings: ``--config broker.conf`` if given, else the source's geometry (segment, consume-queue and index
sizes of a repair's store, or of an extract manifest's ``source_geometry``; RocketMQ's defaults otherwise);
then ``--set NAME=VALUE`` (broker.conf names) on top.  A record the broker would refuse
is rejected with the writer's reason (WRITER_REFUSED).  ``--dry-run`` writes nothing and prints the plan as
JSON Lines: per queue where its records go (new queue offsets) and from where, every rejection, and a summary.
Otherwise one JSON summary line; counts reconcile (selected = written + rejected, written counted back from
the new commitlog).  The output must not exist (or be empty) unless ``--overwrite``, and never lies in, over or
around an input.  Exit codes: 0 written (or planned), 1 nothing to replay, 2 bad usage or unreadable input.
"""
from __future__ import annotations

import argparse
import bisect
import json
import os
import re
import shutil
import sys
import tempfile
from array import array
from dataclasses import dataclass, field

if __package__ in (None, ""):  # spark-submit jobs/replay.py: make the project importable
    try:
        import _bootstrap  # noqa: F401  (jobs/_bootstrap.py)
    except ModuleNotFoundError:  # a copy outside the checkout: the project comes with --py-files
        pass

from store_format import fs  # noqa: E402
from store_format import layout as L  # noqa: E402
from store_format.codec import host_flags  # noqa: E402
from store_format.scan import WALKS, canonical_walk, walk_help  # noqa: E402
from store_format.config import read_consumer_offsets, subscription_groups, topic_configs  # noqa: E402
from store_format.errors import ErrorKind, StoreFormatError, WriterError  # noqa: E402
from store_format.ids import parse_host  # noqa: E402
from store_format.message import Message  # noqa: E402
from store_format.properties import parse_properties  # noqa: E402
from store_format.store import Store  # noqa: E402
from store_format.write.writer import StoreWriter, WriterConfig, validate_topic  # noqa: E402
from udfs.kernels import scan_offset_table  # noqa: E402

from jobs import cli  # noqa: E402
from jobs.commit import runs_job  # noqa: E402
from jobs.cli import EXIT_FAILED, EXIT_NOTHING, EXIT_OK, UsageError  # noqa: E402
from jobs.extract import read_manifest, source_geometry  # noqa: E402
from jobs.stores import resolve_stores  # noqa: E402

TRACE_MSG_ID = "FORENSICS_ORIGIN_MSG_ID"
TRACE_BROKER = "FORENSICS_ORIGIN_BROKER"
TRACE_QUEUE_OFFSET = "FORENSICS_ORIGIN_QUEUE_OFFSET"
TRACE_PROPERTIES = (TRACE_MSG_ID, TRACE_BROKER, TRACE_QUEUE_OFFSET)
WRITER_REFUSED = "WRITER_REFUSED"
TX_OP_WITHOUT_HALF = "TX_OP_WITHOUT_HALF"
#: columns replay reads (what a JSON Lines input is parsed with); all but topic and body may be missing
INPUT_COLUMNS = ("broker string, physical_offset bigint, queue_offset bigint, msg_id string, "
                 + ", ".join(f"{name} {kind}" for name, kind in (
                     ("topic", "string"), ("queue_id", "int"), ("body", "binary"), ("properties_raw", "string"),
                     ("properties", "map<string,string>"), ("flag", "int"), ("sys_flag", "int"),
                     ("born_timestamp", "bigint"), ("born_host", "string"), ("store_timestamp", "bigint"),
                     ("store_host", "string"), ("reconsume_times", "int"), ("prepared_transaction_offset", "bigint"),
                     ("magic_version", "int"))))
_OP_BODY = re.compile(r"^\d+(,\d+)*,?$")


@dataclass
class QueuePlan:
    topic: str
    queue_id: int
    written: int = 0
    not_dispatched: int = 0  # PREPARED/ROLLBACK: queue offset 0, no consume-queue entry
    origins: dict = field(default_factory=dict)  # broker -> [first, last] original queue offset


@dataclass
class Replayer:
    """Turns source rows into the records to write, in order, remembering where each went."""

    trace: bool = True
    store_host: str | None = None
    half_offsets: dict = field(default_factory=dict)  # (broker, old offset) -> new: halves, PREPARED records
    half_queue: dict = field(default_factory=dict)  # (broker, queue id, old queue offset) -> new, half topic only
    kept_queue_offsets: dict = field(default_factory=dict)  # (topic, queue id) -> array of old queue offsets
    queues: dict = field(default_factory=dict)  # (topic, queue id) -> QueuePlan
    next_queue_offset: dict = field(default_factory=dict)  # what a dry run assigns
    dangling_prepared: int = 0

    def record(self, row: dict) -> tuple[Message | None, str | None, str | None]:
        """(record to write, reject reason, detail) for one source row."""
        d = {k: v for k, v in row.items() if v is not None}
        if isinstance(d.get("body"), (bytearray, memoryview)):
            d["body"] = bytes(d["body"])
        msg = Message.from_dict(d)
        broker = row.get("broker") or ""
        if self.trace:
            origin = row.get("msg_id") or (msg.msg_id if row.get("physical_offset") is not None else None)
            extra = {TRACE_MSG_ID: origin, TRACE_BROKER: broker or None,
                     TRACE_QUEUE_OFFSET: None if row.get("queue_offset") is None else str(row["queue_offset"])}
            msg.properties_raw = add_properties(msg.properties_raw, extra)
            msg.properties = parse_properties(msg.properties_raw)
        if self.store_host is not None:
            v6 = host_flags(msg.born_host, self.store_host) & L.STOREHOST_V6_FLAG
            msg.sys_flag = (msg.sys_flag & ~L.STOREHOST_V6_FLAG) | v6
            msg.store_host = self.store_host
        if msg.tran_type in ("COMMIT", "ROLLBACK") and msg.prepared_transaction_offset:
            new = self.half_offsets.get((broker, msg.prepared_transaction_offset))
            if new is None:
                self.dangling_prepared += 1
            else:
                msg.prepared_transaction_offset = new
        if msg.topic == L.TRANS_OP_HALF_TOPIC:
            body = remap_op_body(msg.body, lambda q: self.half_queue.get((broker, msg.queue_id, q)))
            if body is None:
                return None, TX_OP_WITHOUT_HALF, f"op record resolves half queue offsets {msg.body[:64]!r} of " \
                    f"{L.TRANS_HALF_TOPIC}/{msg.queue_id}, none of which was replayed"
            msg.body = body
        return msg, None, None

    def placed(self, row: dict, stored: Message) -> None:
        """Remember where a source row's record went."""
        broker = row.get("broker") or ""
        old_q = row.get("queue_offset")
        half = stored.topic == L.TRANS_HALF_TOPIC
        if (half or stored.tran_type == "PREPARED") and row.get("physical_offset") is not None:
            self.half_offsets[(broker, row["physical_offset"])] = stored.physical_offset
        if half and old_q is not None:
            self.half_queue[(broker, stored.queue_id, old_q)] = stored.queue_offset
        key = (stored.topic, stored.queue_id)
        plan = self.queues.get(key)
        if plan is None:
            plan = self.queues[key] = QueuePlan(*key)
        if not stored.dispatchable:
            plan.not_dispatched += 1
            return
        plan.written += 1
        if old_q is not None:
            span = plan.origins.setdefault(broker, [old_q, old_q])
            span[0], span[1] = min(span[0], old_q), max(span[1], old_q)
            self.kept_queue_offsets.setdefault(key, array("q")).append(old_q)

    def planned(self, msg: Message) -> Message:
        """The queue offset a dry run's record would get (the writer's rule: consecutive per queue for
        NOT/COMMIT records, 0 for PREPARED/ROLLBACK)."""
        key = (msg.topic, msg.queue_id)
        if msg.dispatchable:
            msg.queue_offset = self.next_queue_offset.get(key, 0)
            self.next_queue_offset[key] = msg.queue_offset + 1
        else:
            msg.queue_offset = 0
        return msg

    def translated_offset(self, topic: str, queue_id: int, committed: int) -> int:
        """A committed consumer offset in the new queue: how many replayed records preceded it."""
        kept = self.kept_queue_offsets.get((topic, queue_id))
        return bisect.bisect_left(kept, committed) if kept else 0


def add_properties(raw: str, extra: dict) -> str:
    """``raw`` with ``name\\u0001value`` pairs appended (no pair whose name is already there or whose value is
    None); the original bytes stay as they were, in front."""
    present = parse_properties(raw)
    pairs = [f"{k}{L.NAME_VALUE_SEPARATOR}{v}" for k, v in extra.items() if v is not None and k not in present]
    if not pairs:
        return raw
    sep = "" if not raw or raw.endswith(L.PROPERTY_SEPARATOR) else L.PROPERTY_SEPARATOR
    return raw + sep + L.PROPERTY_SEPARATOR.join(pairs)


def remap_op_body(body: bytes, new_offset) -> bytes | None:
    """An op record's body (half queue offsets: ``"12"`` in 4.x, ``"12,13,"`` in 5.x) with each offset
    replaced by ``new_offset(old)``; offsets without one are dropped; None when none remains.  A body in
    another shape is returned unchanged."""
    try:
        text = body.decode("ascii")
    except UnicodeDecodeError:
        return body
    if not _OP_BODY.match(text):
        return body
    mapped = [new_offset(int(q)) for q in text.rstrip(",").split(",")]
    mapped = [str(q) for q in mapped if q is not None]
    if not mapped:
        return None
    return (",".join(mapped) + ("," if text.endswith(",") else "")).encode("ascii")


# --------------------------------------------------------------------------------------------------
# Sources


@dataclass
class Source:
    frame: object  # DataFrame of rows to replay (with _reject/_detail for rows an extract already refused)
    inputs: list  # paths the output must stay clear of
    geometry: dict
    store: Store | None  # the store a repair reads (its configs are carried over)
    description: str


def repair_source(spark, args) -> Source:
    from jobs import extract

    stores = resolve_stores([args.repair], files=True)
    if len(stores) != 1:
        raise UsageError(f"--repair takes one store root; {args.repair} holds {len(stores)}")
    ref = stores[0]
    ex_args = extract.build_parser().parse_args(["--store", ref.path, "--out", "-", "--walk", args.walk]
                                                + (["--dedupe"] if args.dedupe else []))
    sel = extract.select(spark, ex_args, stores)
    return Source(sel.frame, [ref.path], source_geometry(ref), ref.open(),
                  f"repair of {ref.root} ({args.walk} walk)")


def input_source(spark, args) -> Source:
    from pyspark.sql import functions as F

    from jobs.output import detect_format, read_table

    fmt = args.input_format or detect_format(args.input)
    df = read_table(spark, args.input, fmt, schema=INPUT_COLUMNS if fmt == "jsonl" else None)
    missing = [c for c in ("topic", "body") if c not in df.columns]
    if missing:
        raise UsageError(f"{args.input} has no {', '.join(missing)} column: not a table of messages")
    if "properties_raw" not in df.columns and "properties" not in df.columns:
        raise UsageError(f"{args.input} has neither properties_raw nor properties")
    manifest = read_manifest(args.input) or {}
    stores = [s["path"] for s in manifest.get("stores", [])]
    df = df.withColumn("_reject", F.lit(None).cast("string")).withColumn("_detail", F.lit(None).cast("string"))
    return Source(df, [args.input] + stores, dict(manifest.get("source_geometry") or {}), None,
                  f"{args.input} ({fmt})")


def ordered(df):
    """Original order: (broker, physical offset) when the rows say where they came from, else input order."""
    from pyspark.sql import functions as F

    if "physical_offset" in df.columns:
        by = [c for c in ("broker", "physical_offset") if c in df.columns]
        return df.orderBy(*by)
    return df.withColumn("_row", F.monotonically_increasing_id()).orderBy("_row").drop("_row")


def writer_config(args, source: Source) -> WriterConfig:
    """The new store's settings: ``--config`` if given, else the source's geometry; then ``--set`` and
    ``--store-host`` on top."""
    values = WriterConfig.from_file(args.config).to_dict() if args.config else dict(source.geometry)
    for item in args.set or []:
        name, sep, value = item.partition("=")
        if not sep or not name.strip():
            raise UsageError(f"--set {item!r}: expected NAME=VALUE (a broker.conf setting)")
        values[name.strip()] = value.strip()
    if args.store_host:
        values["storeHost"] = args.store_host
    return WriterConfig.from_dict(values)


# --------------------------------------------------------------------------------------------------
# Writing


def carry_configs(writer: StoreWriter, store: Store, notes: list) -> None:
    """A repair keeps the source's topic queue counts and subscription groups."""
    for name, tc in sorted(topic_configs(store.config("topics.json")).items(), key=lambda kv: str(kv[0])):
        if not isinstance(tc, dict):
            continue
        try:
            queues = tc.get("writeQueueNums")
            perm = tc.get("perm")
            writer.register_topic(name, queues if isinstance(queues, int) else None,
                                  perm if isinstance(perm, int) else L.PERM_READ | L.PERM_WRITE)
        except WriterError as e:
            notes.append(f"topics.json: topic {name!r} not carried: {e.message}")
    for group in sorted(subscription_groups(store.config("subscriptionGroup.json")), key=str):
        writer.register_group(str(group))


def carry_offsets(writer: StoreWriter, store: Store, replayer: Replayer, notes: list) -> int:
    """The source's committed consumer offsets, translated to the new queue offsets."""
    n = 0
    offsets = read_consumer_offsets(store.root / "config", offset_scan=scan_offset_table).table
    for (topic, group), table in sorted(offsets.items()):
        try:
            validate_topic(topic)
        except WriterError as e:
            notes.append(f"consumerOffset.json: {topic}@{group} not carried: {e.message}")
            continue
        writer.register_group(group)
        for qid, committed in sorted(table.items()):
            writer.commit_offset(group, topic, qid, replayer.translated_offset(topic, qid, committed))
            n += 1
    return n


def check_as_writer(scratch: StoreWriter, msg: Message) -> None:
    """What ``StoreWriter.append`` checks before it writes anything (a dry run writes nothing)."""
    scratch.check_record(msg)
    if msg.sys_flag & (L.BORNHOST_V6_FLAG | L.STOREHOST_V6_FLAG) != host_flags(msg.born_host, msg.store_host):
        raise WriterError(ErrorKind.INVALID_INPUT, f"sys_flag 0x{msg.sys_flag:X} IPv6 bits disagree with hosts "
                          f"{msg.born_host} / {msg.store_host}", field="sys_flag")


def count_written(root) -> int:
    """Message records in a store's commitlog (its recovery walk, framing only)."""
    return sum(1 for f in Store(root).walk_commitlog(decode=False) if f.kind == "message")


@runs_job("replay")
def run(spark, args, out=None, err=None) -> cli.JobResult:
    """Replay; the summary (or with --dry-run the plan) goes to ``out`` as JSON Lines (the job's output)."""
    from jobs.output import prepare_output

    out, err = out or sys.stdout, err or sys.stderr
    check_args(args)
    source = repair_source(spark, args) if args.repair else input_source(spark, args)
    staged = None
    if not args.dry_run:  # the new store is written beside --out (a local folder) and committed on return
        staged = prepare_output(args.out, overwrite=args.overwrite,
                                inputs=[args.repair or args.input, *source.inputs], job="replay").local_work()
    check_manifest(args, [args.repair or args.input, *source.inputs])
    config = writer_config(args, source)
    replayer = Replayer(trace=not args.no_trace, store_host=args.store_host)
    rejected: dict[str, int] = {}
    examples, notes = [], []
    selected = 0

    def reject(row, reason, detail):
        rejected[reason] = rejected.get(reason, 0) + 1
        line = {"kind": "reject", "broker": row.get("broker"), "physical_offset": row.get("physical_offset"),
                "msg_id": row.get("msg_id"), "reason": reason, "detail": detail}
        if args.dry_run:
            out.write(json.dumps(line, ensure_ascii=False) + "\n")
        elif len(examples) < 20:
            examples.append(line)

    scratch_dir = tempfile.mkdtemp(prefix="replay-check-") if args.dry_run else None
    writer = StoreWriter(f"{scratch_dir}/store" if args.dry_run else staged, config)
    try:
        if source.store is not None and not args.dry_run:
            carry_configs(writer, source.store, notes)
        if not args.dry_run:
            from jobs.progress import say

            say(f"writing the new store (beside {args.out} until it is complete)")
        for row in ordered(source.frame).toLocalIterator(prefetchPartitions=True):
            row = row.asDict()
            selected += 1
            if row.get("_reject") is not None:
                reject(row, row["_reject"], row.get("_detail"))
                continue
            try:
                msg, reason, detail = replayer.record(row)
                if msg is None:
                    reject(row, reason, detail)
                    continue
                if args.dry_run:
                    check_as_writer(writer, msg)
                    stored = replayer.planned(msg)
                else:
                    stored = writer.append(msg)
            except StoreFormatError as e:  # the writer refuses it before writing anything
                reject(row, WRITER_REFUSED, f"{e.kind.value}: {e.message}")
                continue
            replayer.placed(row, stored)
        carried = 0
        if source.store is not None and not args.dry_run:
            carried = carry_offsets(writer, source.store, replayer, notes)
        if args.dry_run:
            writer.crash()
        else:
            writer.close()
    except BaseException:
        writer.crash()  # the output stays marked as not cleanly shut down
        raise
    finally:
        if scratch_dir:
            shutil.rmtree(scratch_dir, ignore_errors=True)

    planned = sum(q.written + q.not_dispatched for q in replayer.queues.values())
    written = planned if args.dry_run else count_written(staged)
    summary = {
        "kind": "summary", "job": "replay", "dry_run": args.dry_run, "source": source.description,
        "output": args.out, "config": {k: v for k, v in config.to_dict().items()
                                          if k in ("mappedFileSizeCommitLog", "mappedFileSizeConsumeQueue",
                                                   "maxHashSlotNum", "maxIndexNum", "storeHost")},
        "counts": {"selected": selected, "written": written, "rejected": sum(rejected.values()),
                   "rejected_by_reason": dict(sorted(rejected.items())),
                   "reconciled": selected == written + sum(rejected.values())},
        "queues": len(replayer.queues), "trace_properties": list(TRACE_PROPERTIES) if not args.no_trace else [],
        "dangling_prepared_offsets": replayer.dangling_prepared, "notes": notes,
    }
    if source.store is not None and not args.dry_run:
        summary["consumer_offsets_carried"] = carried
    if examples:
        summary["rejected_examples"] = examples
    if args.dry_run:
        for (topic, qid), q in sorted(replayer.queues.items()):
            out.write(json.dumps({"kind": "queue", "topic": topic, "queue_id": qid,
                                  "new_queue_offsets": [0, q.written] if q.written else None,
                                  "not_dispatched": q.not_dispatched, "from": q.origins},
                                 ensure_ascii=False) + "\n")
    out.write(json.dumps(summary, ensure_ascii=False) + "\n")
    if args.manifest:
        with open(args.manifest, "w", encoding="utf-8") as f:
            json.dump(summary, f, indent=2, ensure_ascii=False)
    c = summary["counts"]
    verb = "would write" if args.dry_run else "wrote"
    print(f"replay: {c['selected']} selected, {verb} {c['written']}, {c['rejected']} rejected "
          f"{c['rejected_by_reason'] or ''} -> {args.out}", file=err)
    if selected == 0 or planned == 0:
        print("replay: nothing to replay", file=err)
        return cli.JobResult("", EXIT_NOTHING)
    if not c["reconciled"]:
        print("error: the counts do not reconcile (selected != written + rejected)", file=err)
        return cli.JobResult("", EXIT_FAILED)
    return cli.JobResult("", EXIT_OK)


def check_manifest(args, inputs) -> None:
    """--manifest: a regular file (or a new one) apart from every input and from the new store."""
    if not args.manifest:
        return
    from jobs.output import check_apart

    check_apart(args.manifest, list(inputs) + ([] if args.dry_run else [args.out]), what="manifest")
    if os.path.lexists(args.manifest) and not os.path.isfile(args.manifest):
        raise UsageError(f"--manifest {args.manifest}: exists and is not a regular file")


def check_and_prepare(args) -> None:
    """The arguments and the source path checked, then the output prepared, before Spark starts (run() reads
    the source and prepares again, idempotently)."""
    from jobs.output import prepare_output

    check_args(args)
    source = args.repair or args.input
    if "://" not in source:
        if not os.path.lexists(source):
            raise UsageError(f"{source}: no such file or directory")
        fs.check_folder(source)  # a loop, a FIFO, no permission: UnreadableError
    inputs = [source] + ([r.path for r in resolve_stores([args.repair], files=True)] if args.repair else [])
    if not args.dry_run:
        prepare_output(args.out, overwrite=args.overwrite, inputs=inputs, job="replay")
    check_manifest(args, inputs)


def check_args(args) -> None:
    if (args.input is None) == (args.repair is None):
        raise UsageError("give --input EXTRACT_DIR or --repair STORE")
    if args.input is not None and args.dedupe:
        raise UsageError("--dedupe belongs to the extract (extract --dedupe) or to --repair")
    if args.store_host:
        try:
            parse_host(args.store_host)
        except StoreFormatError as e:
            raise UsageError(f"--store-host: {e.message}") from None


def build_parser() -> argparse.ArgumentParser:
    from jobs.output import FORMATS

    p = argparse.ArgumentParser(prog=f"{cli.PROG} replay", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    src = p.add_argument_group("source (one of)")
    src.add_argument("--input", metavar="DIR", help="an extract (or a table of canonical message columns)")
    src.add_argument("--repair", metavar="STORE", help="a damaged store root: salvage it and replay what is valid")
    p.add_argument("--input-format", choices=FORMATS, help="default: detected")
    p.add_argument("--walk", type=canonical_walk, choices=WALKS, default="salvage",
                   help=f"--repair's walk: {walk_help('salvage')}")
    p.add_argument("--dedupe", action="store_true", help="--repair: drop copies as extract --dedupe does")
    p.add_argument("--out", required=True, metavar="NEW_STORE", help="the store root to create (refused when it "
                   "exists and is not empty, unless --overwrite)")
    p.add_argument("--overwrite", action="store_true", help="replace an existing output folder")
    p.add_argument("--dry-run", action="store_true", help="print the plan; write nothing")
    p.add_argument("--config", metavar="broker.conf", help="store settings (geometry, storeHost...)")
    p.add_argument("--set", action="append", metavar="NAME=VALUE", help="one store setting (repeatable)")
    p.add_argument("--store-host", metavar="HOST", help="restamp every record's store host (ip:port)")
    p.add_argument("--no-trace", action="store_true", help="do not add the FORENSICS_ORIGIN_* properties")
    p.add_argument("--manifest", metavar="PATH", help="also write the summary JSON here")
    return p


def main(argv=None, prog: str | None = None) -> int:
    return cli.main("replay", build_parser, run, argv, prepare=check_and_prepare, prog=prog)


if __name__ == "__main__":
    sys.exit(main())
