"""Extract: select messages from one or more broker dumps and write them as a table, with a manifest.

  rocketmq-forensics extract --store PATH [PATH ...] --out DIR [--format parquet|jsonl|delta]
         [--topic T ...] [--queue Q ...] [--tag TAG] [--key K] [--from T1] [--to T2]
         [--physical-offsets FROM..TO] [--queue-offsets FROM..TO]
         [--tran-type NOT|PREPARED|COMMIT|ROLLBACK] [--half committed|rolled-back|unresolved]
         [--dlq [GROUP]] [--retry [GROUP]]
         [--not-consumed-by G [--consumers N | --consumer-ids ID,ID...]]
         [--walk kept|salvage] [--config broker.conf] [--body stored|decompressed] [--dedupe] [--overwrite]

Every given criterion must hold (AND).  ``--key`` matches a KEYS entry or the UNIQ_KEY; ``--from``/``--to``
bound the store time (ms since the epoch or ISO-8601, UTC unless an offset is given) and are pushed into the
commitlog data source, which also skips whole segments whose store-time span lies outside the range
(store times only grow within one broker's commitlog).  ``--half`` selects half messages
(RMQ_SYS_TRANS_HALF_TOPIC) by what the dump says became of them: ``committed`` (a COMMIT record names the
half in its prepared-transaction offset), ``rolled-back`` (an op record in RMQ_SYS_TRANS_OP_HALF_TOPIC names
its queue offset, and no commit), ``unresolved`` (neither).  ``--dlq``/``--retry`` select the ``%DLQ%``/
``%RETRY%`` topics (of one consumer group when GROUP is given).

``--not-consumed-by G``: what group G has not consumed yet, from each store's ``config/consumerOffset.json``:
the consume-queue records (NOT/COMMIT types) of every topic G has committed offsets for, at queue offsets at or
after G's committed offset (a queue of such a topic without an entry counts from 0; the manifest lists those),
in queue order.  ``--consumers N`` (ids ``consumer-0``..) or ``--consumer-ids`` simulates G's consumers with
RocketMQ's default AllocateMessageQueueAveragely: per topic, the queues (every broker's ``readQueueNums`` from
``topics.json``, plus any queue with an offset or a consume queue) sorted by (topic, broker, queue id) and
the consumer ids sorted as Java sorts strings; consumer i takes a contiguous run of queues, the first
``queues mod consumers`` consumers one queue more.  The ``consumer`` column says who would receive each
message.  The broker name is the dump folder's name (``<broker>/store`` -> ``<broker>``); name the folders
after brokerName for an exact simulation.  Subscription tag filters are not known offline and are not applied.

``--walk`` says which messages: ``kept`` (the default), what the broker keeps after its predicted recovery -- every
intact message before the cut the audit reports (``--config``'s forceVerifyPropCRC moves it as it moves the
broker's) -- or ``salvage``, every intact message, also past damage and past the cut.

Output (Parquet, JSON Lines or Delta: ``--format``): one row per message with ``broker``, the canonical message fields
(docs/record-layout.md, "Canonical message fields"), ``beyond_first_stop`` (behind damage in its segment),
``kept`` (before the broker's cut: false for the salvage walk's messages the broker drops) and, when simulating,
``consumer``.  ``--body decompressed`` stores the
decompressed body with the compression bits cleared from ``sys_flag`` (``compression`` NONE, ``body_crc`` of
the new body, ``stored_compression`` what it was), so the table replays as plain records.  ``--dedupe``
keeps one copy per (topic, UNIQ_KEY, reconsume times, transaction type) -- the first by (broker, physical
offset) -- across brokers and replicas; records without a UNIQ_KEY are never dropped.

``<out>/_manifest.json`` (ignored by table readers: a leading underscore) records the stores, the selection, the
walk, per broker where its recovery cuts the log (``brokers``: physical offset, segment, byte, why) and how many intact
messages of the selection lie past the cut (left out by the kept walk, written by the salvage walk) or behind damage
before it, and counts: ``selected = written + rejected`` with a reason per rejection (DUPLICATE_UNIQ_KEY,
DECOMPRESSION), ``written`` counted back from the output.  ``holes`` lists the queue offsets missing between the
selected messages of a queue (records the store held that no intact record of the walk holds: damaged or destroyed);
``reconciled`` is true when the counts add up and there is no hole.  Exit codes: 0 written (holes are said on
stderr and in the manifest), 1 nothing matched, 2 bad usage, unreadable input, an output that must not be written, or
counts that do not add up.
"""
# The helpers the query, replay and compare jobs share (labelled store roots, time arguments, several dumps'
# commitlogs read as one DataFrame) live here, since those jobs are in part an extract; the command line, exit
# codes and output arguments are the job runtime's (runtime/cli.py), the store names runtime/stores.py's.
from __future__ import annotations

import argparse
import datetime as _dt
import json
import sys
from dataclasses import dataclass, field
from functools import reduce
from pathlib import Path

import pyarrow as pa

if __package__ in (None, ""):  # spark-submit jobs/extract.py: make the project importable
    try:
        import _bootstrap  # noqa: F401  (jobs/_bootstrap.py)
    except ModuleNotFoundError:  # a copy outside the checkout: the project comes with --py-files
        pass

from store_format import layout as L  # noqa: E402
from store_format.brokerconf import add_geometry_arguments, geometry_from_args, number_argument  # noqa: E402
from store_format import fs  # noqa: E402
from store_format.scan import WALK_MEANINGS, WALKS, canonical_walk, walk_help  # noqa: E402
from store_format.commitlog import first_record  # noqa: E402
from store_format.errors import StoreFormatError  # noqa: E402
from store_format.message import CANONICAL_FIELDS  # noqa: E402
from store_format.store import Store  # noqa: E402

from runtime import cli  # noqa: E402
from runtime.commit import job_run, runs_job  # noqa: E402
from runtime.custody import watch  # noqa: E402
from runtime.display import format_time  # noqa: E402,F401  (the query job takes it from here)
from runtime.progress import Phase  # noqa: E402
from runtime.cli import EXIT_FAILED, EXIT_NOTHING, EXIT_OK, UsageError, add_output_arguments  # noqa: E402
from runtime.stores import StoreRef, resolve_stores  # noqa: E402
from runtime.export import Rows  # noqa: E402
from decoding import columns as C  # noqa: E402

MANIFEST_NAME = "_manifest.json"
DUPLICATE_UNIQ_KEY = "DUPLICATE_UNIQ_KEY"
DECOMPRESSION = "DECOMPRESSION"
HALF_STATES = ("committed", "rolled-back", "unresolved")
TRAN_TYPES = tuple(L.TRAN_TYPE_NAMES.values())
QUEUED_TRAN_TYPES = ("NOT", "COMMIT")  # the records that take a queue offset (PREPARED and ROLLBACK take none)
#: the columns of an extract, in order: the dump's label, the canonical message, where the walk found it
OUTPUT_COLUMNS = ("broker",) + CANONICAL_FIELDS + ("beyond_first_stop", "kept")
#: what an extract may add after them (output_columns); the Spark code of select() makes them
ADDED_COLUMNS = pa.schema([
    C.column("stored_compression", pa.string(), "extract --body decompressed: the compression the body was stored "
                                              "with"),
    C.column("consumer", pa.string(), "extract --consumers: the simulated consumer the queue is allocated to"),
])
_EXAMPLES = 20  # rejected rows named in the manifest


# --------------------------------------------------------------------------------------------------
# Shared by the query, replay and compare jobs


_STORE_TIME = "a store time (ms since the epoch, a Java long)"
_EPOCH = _dt.datetime(1970, 1, 1, tzinfo=_dt.timezone.utc)


def parse_time(text: str) -> int:
    """A store time argument: ms since the epoch (a long, as STORETIMESTAMP is), or ISO-8601 (UTC unless it carries
    an offset; counted in whole ms, never through a float)."""
    t = str(text).strip()
    if t.lstrip("+-").isdigit():
        return number_argument(L.JAVA_LONG, _STORE_TIME)(t)
    try:
        when = _dt.datetime.fromisoformat(t.replace("Z", "+00:00").replace("z", "+00:00"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a time: give ms since the epoch or ISO-8601, e.g. "
                                         "2024-05-01T10:00:00Z") from None
    if when.tzinfo is None:
        when = when.replace(tzinfo=_dt.timezone.utc)
    return (when - _EPOCH) // _dt.timedelta(milliseconds=1)


def offset_range(text: str) -> tuple[int | None, int | None]:
    """``FROM..TO`` (both included; either end may be left out, ``N`` alone is ``N..N``) as (from, to): offsets, each
    a Java long as the store holds them."""
    lo, sep, hi = str(text).strip().partition("..")
    offset = number_argument(L.JAVA_LONG, "an offset (a Java long)")
    try:
        bounds = (offset(lo) if lo else None, offset(hi) if hi else None) if sep else (offset(lo), offset(lo))
    except argparse.ArgumentTypeError as e:
        if "outside the range" in str(e):
            raise
        raise argparse.ArgumentTypeError(f"{text!r} is not a range of offsets: give FROM..TO, FROM.. or ..TO "
                                         "(numbers, both ends included)") from None
    if bounds[0] is not None and bounds[1] is not None and bounds[0] > bounds[1]:
        raise argparse.ArgumentTypeError(f"{text!r}: FROM is after TO")
    return bounds



def java_string_order(s: str) -> bytes:
    """Sort key equal to Java's ``String.compareTo`` (UTF-16 code units, shorter prefix first)."""
    return s.encode("utf-16-be", "surrogatepass")


def segment_time_spans(store: Store) -> list[tuple[str, int | None]] | None:
    """(segment name, store time of its first record) for every segment, or None when the first records'
    times do not grow with the segments (then no segment may be skipped by time)."""
    spans = []
    from store_format.codec import decode_record

    for seg in store.segments:
        ts = None
        try:
            with first_record(seg) as buf:
                ts = decode_record(buf, 0, file=seg.name).store_timestamp if len(buf) else None
        except StoreFormatError:
            ts = None  # damaged first record: its span is unknown
        spans.append((seg.name, ts))
    known = [ts for _, ts in spans if ts is not None]
    if known != sorted(known):
        return None
    return spans


def segments_in_time_range(store: Store, lo: int | None, hi: int | None) -> list[str] | None:
    """The segments that can hold records stored in [lo, hi]; None means all of them.  Store times are
    non-decreasing in commitlog order (the broker stamps them inside the put lock), so segment k holds times
    in [first(k), first(k+1)]; a segment whose first record is unreadable is always kept."""
    if lo is None and hi is None:
        return None
    spans = segment_time_spans(store)
    if spans is None:
        return None
    keep = []
    for i, (name, first) in enumerate(spans):
        nxt = next((ts for _, ts in spans[i + 1:] if ts is not None), None)
        if first is not None and hi is not None and first > hi:
            continue
        if nxt is not None and lo is not None and nxt < lo and first is not None:
            continue
        keep.append(name)
    return None if len(keep) == len(spans) else keep


def predictions(stores: list[StoreRef], args=None) -> dict:
    """{broker: store_format.recovery.RecoveryPrediction} of each store, the audit's (store_format.recovery.predict_cut,
    with ``--config``'s CRC settings when ``args`` has one): its ``cut`` is where the kept walk ends."""
    from store_format.brokerconf import recovery_settings_from_args
    from store_format.recovery import predict_cut

    settings = recovery_settings_from_args(args) if args is not None else None
    return {ref.name: predict_cut(ref.open(), settings) for ref in stores}


def commitlog_reads(stores: list[StoreRef], *, walk: str, decompress: bool, materialize: str,
                    time_range: tuple[int | None, int | None], filtered: bool, cuts: dict | None) -> list[tuple]:
    """What :func:`read_messages` reads: ``(path, options)`` of the ``rocketmq-commitlog`` source per store, or per
    segment within ``time_range`` (segments whose store-time span lies outside it are skipped); ``filtered``: every
    query filters the rows (pushing its filters into the source is safe: CommitLogReader.pushFilters); ``cuts``:
    the stores' predicted recovery cuts (None: not given yet)."""
    lo, hi = time_range
    reads = []
    for ref in stores:
        options = dict(walk=walk, materialize=materialize, broker=ref.name, pushFilters=str(filtered).lower())
        if cuts is not None:
            options["recoveryCuts"] = json.dumps({ref.name: cuts[ref.name].as_dict()})
        if decompress:
            options["decompress"] = "true"
        kept = segments_in_time_range(ref.open(), lo, hi)
        paths = [ref.root] if kept is None else [ref.root / "commitlog" / name for name in kept]
        reads += [(p, options) for p in paths]
    return reads


def read_messages(spark, stores: list[StoreRef], *, walk: str = "kept", decompress: bool = False,
                  materialize: str = "decoded", time_range: tuple[int | None, int | None] = (None, None),
                  include_other_rows: bool = False, cuts: dict | None = None):
    """Every message row of the stores' commitlogs as one DataFrame (the ``rocketmq-commitlog`` data source,
    two-pass reader), labelled by ``broker``, as ``walk`` returns them (store_format.scan.WALKS).  ``cuts``: {broker:
    store_format.recovery.Cut}, each store's predicted recovery (:func:`predictions`; predicted here when not
    given), which the kept walk ends at and every row's ``kept`` is decided by.  ``time_range`` skips segments
    outside it and pushes the store-time bounds into the source; other row kinds (blank, stop, corrupt) only with
    ``include_other_rows``."""
    from pyspark.sql import functions as F

    from datasources import read_commitlog

    lo, hi = time_range
    if cuts is None:
        cuts = {name: p.cut for name, p in predictions(stores).items()}
    reads = commitlog_reads(stores, walk=walk, decompress=decompress, materialize=materialize, time_range=time_range,
                            filtered=not include_other_rows or lo is not None or hi is not None, cuts=cuts)
    frames = [read_commitlog(spark, fs.uri_of(path), **options) for path, options in reads]  # Spark's: a string
    if not frames:  # every segment lies outside the time range: an empty frame of the same schema
        path, options = commitlog_reads(stores[-1:], walk=walk, decompress=decompress, materialize=materialize,
                                        time_range=(None, None), filtered=True, cuts=cuts)[0]
        frames = [read_commitlog(spark, fs.uri_of(path), **options).limit(0)]
    df = reduce(lambda a, b: a.unionByName(b), frames)
    if not include_other_rows:
        df = df.where(F.col("kind") == "message")
    if lo is not None:
        df = df.where(F.col("store_timestamp") >= lo)
    if hi is not None:
        df = df.where(F.col("store_timestamp") <= hi)
    return df


def check_key(option: str, key: str | None) -> None:
    """A key as the index knows it: non-empty, no space (KEYS are split on spaces), no separators."""
    if key is not None and (not key or any(c in key for c in " \x01\x02")):
        raise UsageError(f"{option} {key!r}: a key is non-empty and holds no space (KEYS are split on spaces) "
                         "and no \\u0001/\\u0002")


# --------------------------------------------------------------------------------------------------
# Selection


@dataclass(frozen=True)
class Criterion:
    """One per-row criterion of the selection, said once and evaluated by Spark (:meth:`column_expr`) or on a task's
    Arrow batch (:meth:`mask`) with the same meaning: a null value never matches."""

    column: str
    op: str  # "in", "eq", "ge", "le", "prefix", "key" (a KEYS entry or the UNIQ_KEY)
    value: object

    def column_expr(self):
        from pyspark.sql import functions as F

        col = F.col(self.column)
        if self.op == "in":
            return col.isin(list(self.value))
        if self.op == "eq":
            return col == self.value
        if self.op == "ge":
            return col >= self.value
        if self.op == "le":
            return col <= self.value
        if self.op == "prefix":
            return col.startswith(self.value)
        return F.array_contains(F.col("keys"), self.value) | (F.col("uniq_key") == self.value)

    def mask(self, batch) -> pa.Array:
        import numpy as np
        import pyarrow.compute as pc

        if self.op == "key":
            keys = batch.column("keys")
            listed = np.zeros(batch.num_rows, dtype=bool)
            hit = pc.fill_null(pc.equal(pc.list_flatten(keys), self.value), False).to_numpy(zero_copy_only=False)
            listed[pc.list_parent_indices(keys).to_numpy()[hit]] = True
            return pc.or_(pa.array(listed), pc.fill_null(pc.equal(batch.column("uniq_key"), self.value), False))
        col = batch.column(self.column)
        if self.op == "in":
            got = pc.is_in(col, value_set=pa.array(list(self.value), col.type))
        elif self.op == "prefix":
            got = pc.starts_with(col, self.value)
        else:
            got = {"eq": pc.equal, "ge": pc.greater_equal, "le": pc.less_equal}[self.op](col, self.value)
        return pc.fill_null(got, False)


def selection_criteria(args) -> list[Criterion]:
    """The per-row criteria (topic, queue, tag, key, transaction type, offsets, DLQ/retry)."""
    conds = []
    if args.topic:
        conds.append(Criterion("topic", "in", tuple(args.topic)))
    if args.queue:
        conds.append(Criterion("queue_id", "in", tuple(int(q) for q in args.queue)))
    if args.tag is not None:
        conds.append(Criterion("tags", "eq", args.tag))
    if args.key is not None:
        conds.append(Criterion("keys", "key", args.key))
    if args.tran_type:
        conds.append(Criterion("tran_type", "eq", args.tran_type))
    for column, (lo, hi) in (("physical_offset", args.physical_offsets or (None, None)),
                             ("queue_offset", args.queue_offsets or (None, None))):
        if lo is not None:
            conds.append(Criterion(column, "ge", lo))
        if hi is not None:
            conds.append(Criterion(column, "le", hi))
    for prefix, group in ((L.DLQ_GROUP_TOPIC_PREFIX, args.dlq), (L.RETRY_GROUP_TOPIC_PREFIX, args.retry)):
        if group is None:
            continue
        conds.append(Criterion("topic", "eq", prefix + group) if group else Criterion("topic", "prefix", prefix))
    return conds


def selection_filter(args):
    """The per-row criteria as one Column, or None."""
    conds = [c.column_expr() for c in selection_criteria(args)]
    return reduce(lambda a, b: a & b, conds) if conds else None


def half_states(load):
    """(broker, physical_offset, half_state) of every half message, from the dump's own commit and op
    records: a COMMIT record's prepared-transaction offset names its half; an op record (tag ``d``) in
    RMQ_SYS_TRANS_OP_HALF_TOPIC queue q names half queue offsets of RMQ_SYS_TRANS_HALF_TOPIC queue q in its
    body (one number in 4.x, a comma list in 5.x).  ``load()`` gives a fresh message DataFrame for each of
    the three branches: two differently filtered scans of one loaded source in one plan would share the
    filters the source accepted."""
    from pyspark.sql import functions as F

    halves = load().where(F.col("topic") == L.TRANS_HALF_TOPIC).select("broker", "physical_offset",
                                                                         "queue_id", "queue_offset")
    commits = (load().where(F.col("tran_type") == "COMMIT")
               .select("broker", F.col("prepared_transaction_offset").alias("physical_offset"))
               .distinct().withColumn("_committed", F.lit(True)))
    ops = (load().where((F.col("topic") == L.TRANS_OP_HALF_TOPIC) & (F.col("tags") == L.TRANS_OP_REMOVE_TAG))
           .select("broker", "queue_id", F.explode(F.split(F.col("body").cast("string"), ",")).alias("q"))
           .where(F.trim("q").rlike("^[0-9]+$"))
           .select("broker", "queue_id", F.trim("q").cast("long").alias("queue_offset"))
           .distinct().withColumn("_op", F.lit(True)))
    joined = halves.join(commits, ["broker", "physical_offset"], "left").join(
        ops, ["broker", "queue_id", "queue_offset"], "left")
    state = (F.when(F.col("_committed"), "committed").when(F.col("_op"), "rolled-back").otherwise("unresolved"))
    return joined.select("broker", "physical_offset", state.alias("half_state"))


def committed_offsets(spark, stores: list[StoreRef], group: str):
    """(broker, topic, queue_id, offset) of ``group`` from every store's consumerOffset.json (the
    ``rocketmq-metadata`` source), and the read errors it reported."""
    from pyspark.sql import functions as F

    frames = [spark.read.format("rocketmq-metadata").option("table", "consumer_offsets")
              .option("broker", ref.name).load(fs.uri_of(ref.path)) for ref in stores]
    rows = reduce(lambda a, b: a.unionByName(b), frames)
    errors = [f"{r['broker']}: {r['error']}" for r in rows.where(F.col("error").isNotNull()).collect()]
    offsets = rows.where((F.col("error").isNull()) & (F.col("group") == group)).select(
        "broker", "topic", "queue_id", "offset")
    return offsets, errors


def allocate_averagely(mq_all: list, cid_all: list) -> dict:
    """RocketMQ's AllocateMessageQueueAveragely for every consumer id: ``mq_all`` and ``cid_all`` already
    sorted as the client sorts them.  Consumer i (of m) takes a contiguous run of the n queues; when n > m
    the first ``n mod m`` consumers take ``n // m + 1`` queues and the rest ``n // m``; when n <= m the first
    n consumers take one queue each and the others none."""
    n, m = len(mq_all), len(cid_all)
    out = {}
    for index, cid in enumerate(cid_all):
        mod = n % m
        bigger = mod > 0 and index < mod
        size = 1 if n <= m else n // m + (1 if bigger else 0)
        start = index * size if bigger else index * size + mod
        out[cid] = [mq_all[(start + i) % n] for i in range(max(0, min(size, n - start)))]
    return out


def consumer_ids(args) -> list[str] | None:
    if args.consumer_ids:
        ids = [c.strip() for c in args.consumer_ids.split(",") if c.strip()]
        if len(set(ids)) != len(ids):
            raise UsageError("--consumer-ids lists a consumer twice")
        return sorted(ids, key=java_string_order)
    if args.consumers:
        width = len(str(args.consumers - 1))
        return [f"consumer-{i:0{width}d}" for i in range(args.consumers)]
    return None


def allocation_rows(stores: list[StoreRef], committed: list[tuple[str, str, int]], cids: list[str]) -> list[dict]:
    """(broker, topic, queue_id, consumer) for every queue of the topics the group committed offsets for
    (``committed``: (broker, topic, queue id)): per topic, every broker's ``readQueueNums`` (topics.json;
    what the route gives the client), plus any queue with a committed offset or a consume-queue folder."""
    from store_format.config import topic_configs

    mqs: dict[str, set] = {}
    for broker, topic, qid in committed:
        mqs.setdefault(topic, set()).add((broker, int(qid)))
    for ref in stores:
        store = ref.open()
        configs = topic_configs(store.config("topics.json"))
        for topic in mqs:
            n = configs.get(topic, {}).get("readQueueNums") if isinstance(configs.get(topic), dict) else None
            if isinstance(n, int) and not isinstance(n, bool):
                mqs[topic].update((ref.name, q) for q in range(n))
        for topic, qid in store.queues:
            if topic in mqs:
                mqs[topic].add((ref.name, qid))
    rows = []
    for topic, queues in sorted(mqs.items()):
        mq_all = sorted(queues, key=lambda bq: (java_string_order(bq[0]), bq[1]))
        for cid, assigned in allocate_averagely(mq_all, cids).items():
            rows += [{"broker": b, "topic": topic, "queue_id": q, "consumer": cid} for b, q in assigned]
    return rows


@dataclass
class Selection:
    frame: object  # DataFrame: the rows the walk gives, selected, with a ``_reject`` (reason) and ``_detail`` column
    order: tuple  # output sort columns
    notes: list
    allocation: list | None  # (broker, topic, queue_id, consumer) rows when simulating consumers
    base: object = None  # DataFrame: every intact message the selection names (the salvage walk's), ``kept`` marked
    recovery: dict = field(default_factory=dict)  # broker -> RecoveryPrediction (its cut: where the kept walk ends)


def check_time_range(args) -> tuple[int | None, int | None]:
    """``--from`` and ``--to``, the first not after the second."""
    lo, hi = args.from_time, args.to_time
    if lo is not None and hi is not None and lo > hi:
        raise UsageError(f"--from {format_time(lo)} is after --to {format_time(hi)}")
    return lo, hi


def select(spark, args, stores: list[StoreRef]) -> Selection:
    """The rows the arguments select from the walk asked for, each marked with why it would not be written (or not),
    and every intact message the selection names (``base``: the salvage walk's, each marked whether the broker keeps
    it), which what the walk leaves out is counted from."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    lo, hi = check_time_range(args)
    decompress = args.body == "decompressed"
    recovery = predictions(stores, args)
    cuts = {name: p.cut for name, p in recovery.items()}
    msgs = read_messages(spark, stores, walk="salvage", decompress=decompress, time_range=(lo, hi), cuts=cuts)
    cond = selection_filter(args)
    if cond is not None:
        msgs = msgs.where(cond)
    notes: list[str] = []
    order = ("broker", "physical_offset")
    if args.half:  # resolution comes from commit and op records anywhere in the dump, not only in the range
        states = half_states(lambda: read_messages(spark, stores, walk=args.walk, cuts=cuts))
        msgs = msgs.join(states.where(F.col("half_state") == args.half), ["broker", "physical_offset"], "left_semi")
    allocation = None
    if args.not_consumed_by is not None:
        offsets, errors = committed_offsets(spark, stores, args.not_consumed_by)
        notes += [f"consumerOffset.json unreadable: {e}" for e in errors]
        topics = offsets.select("broker", "topic").distinct()
        msgs = (msgs.join(topics, ["broker", "topic"], "left_semi")
                .join(offsets, ["broker", "topic", "queue_id"], "left")
                .where(F.col("tran_type").isin("NOT", "COMMIT")
                       & (F.col("queue_offset") >= F.coalesce("offset", F.lit(0))))
                .drop("offset"))
        order = ("broker", "topic", "queue_id", "queue_offset")
        cids = consumer_ids(args)
        if cids:
            committed = [(r["broker"], r["topic"], r["queue_id"]) for r in offsets.collect()]
            allocation = allocation_rows(stores, committed, cids)
            schema = "broker string, topic string, queue_id int, consumer string"
            msgs = msgs.join(spark.createDataFrame(allocation, schema), ["broker", "topic", "queue_id"], "left")
    base = msgs
    if args.walk == "kept":
        msgs = msgs.where(F.col("kept"))
    reject = F.lit(None).cast("string")
    detail = F.lit(None).cast("string")
    if decompress:
        failed = F.col("decompress_error").isNotNull()
        compressed = ~F.col("compression").eqNullSafe("NONE")
        reject = F.when(failed, F.lit(DECOMPRESSION)).otherwise(reject)
        detail = F.when(failed, F.concat(F.lit(f"{DECOMPRESSION}: "), F.col("compression"), F.lit(" body: "),
                                         F.col("decompress_error"))).otherwise(detail)
        rewritten = compressed & ~failed
        msgs = (msgs.withColumn("stored_compression", F.col("compression"))
                .withColumn("body", F.coalesce("decompressed_body", "body"))
                .withColumn("sys_flag", F.when(rewritten, F.col("sys_flag").bitwiseAND(
                    F.lit(~(L.COMPRESSED_FLAG | L.COMPRESSION_TYPE_MASK)))).otherwise(F.col("sys_flag")))
                .withColumn("compression", F.when(rewritten, F.lit("NONE")).otherwise(F.col("compression")))
                .withColumn("body_crc", F.crc32("body").bitwiseAND(F.lit(0x7FFFFFFF)).cast("int")))
    if args.dedupe:
        w = Window.partitionBy("topic", "uniq_key", "reconsume_times", "tran_type").orderBy("broker",
                                                                                          "physical_offset")
        msgs = (msgs.withColumn("_rank", F.row_number().over(w))
                .withColumn("_first", F.concat_ws("@", F.first("broker").over(w),
                                                  F.first("physical_offset").over(w).cast("string"))))
        dup = reject.isNull() & F.col("uniq_key").isNotNull() & (F.col("_rank") > 1)
        detail = F.when(dup, F.concat(F.lit("a copy of the record at "), F.col("_first"))).otherwise(detail)
        reject = F.when(dup, F.lit(DUPLICATE_UNIQ_KEY)).otherwise(reject)
    msgs = msgs.withColumn("_reject", reject).withColumn("_detail", detail)
    return Selection(msgs, order, notes, allocation, base, recovery)


def output_columns(args) -> list[str]:
    cols = list(OUTPUT_COLUMNS)
    if args.body == "decompressed":
        cols.append("stored_compression")
    if args.not_consumed_by is not None and (args.consumers or args.consumer_ids):
        cols.append("consumer")
    return cols


# --------------------------------------------------------------------------------------------------
# The job


def source_geometry(ref: StoreRef) -> dict:
    """broker.conf geometry of a store, as its files show it (for a replay that mirrors the source)."""
    store = ref.open()
    geo = {}
    if store.segment_size:
        geo["mappedFileSizeCommitLog"] = store.segment_size
    if store.consume_queue_file_size:
        geo["mappedFileSizeConsumeQueue"] = store.consume_queue_file_size
    for path in store.index_paths():
        try:
            with store.open_index(path) as f:
                geo["maxHashSlotNum"], geo["maxIndexNum"] = f.hash_slot_num, f.index_num
            break
        except StoreFormatError:
            continue
    if not (store.root / "index").is_dir():
        geo["messageIndexEnable"] = False
    return geo


def write_manifest(path: fs.Location, manifest: dict) -> None:
    loc = path.child(MANIFEST_NAME)
    with loc.fs.open_output_stream(loc.path) as f:
        f.write(json.dumps(manifest, indent=2, ensure_ascii=False, sort_keys=False).encode("utf-8"))


def read_manifest(path: fs.Location) -> dict | None:
    loc = path.child(MANIFEST_NAME)
    if not loc.is_file():
        return None
    with loc.fs.open_input_stream(loc.path) as f:
        return json.loads(f.read().decode("utf-8"))


def _selection_args(args) -> dict:
    keys = ("topic", "queue", "tag", "key", "from_time", "to_time", "physical_offsets", "queue_offsets",
            "tran_type", "half", "dlq", "retry",
            "not_consumed_by", "consumers", "consumer_ids", "walk", "body", "dedupe")
    return {k: getattr(args, k) for k in keys if getattr(args, k) not in (None, False, [])}


@runs_job("extract")
def run(spark, args, err=None) -> cli.JobResult:
    """Select, write, count back, and write the manifest (its lines on ``err``)."""
    from runtime.stores import commitlog_bytes

    err = err or sys.stderr
    stores = prepare(args)
    watch(job_run("extract"), stores)  # the stores' chain of custody, checked again before the commit
    if written_by_tasks(args):  # the tasks select; the recovery is predicted from their first pass (write_by_tasks)
        check_time_range(args)
        sel = Selection(None, ("broker", "physical_offset"), [], None)
    else:
        sel = select(spark, args, stores)
    with Phase("select and write", sum(commitlog_bytes(s.root) for s in stores), spark) as phase:
        return cli.JobResult("", write_selection(spark, args, stores, sel, err, phase))


def write_selection(spark, args, stores: list[StoreRef], sel: Selection, err, phase: Phase | None = None) -> int:
    """Count the selected rows and what the walk leaves out, look for holes, write the rows kept, count them back,
    write the manifest; counted, written and reported from one read of the dumps (``phase``: its steps named).
    A selection whose rows depend on no other row is read, counted and written by the tasks themselves
    (:func:`written_by_tasks`); the holes are then looked for in the table written."""
    from pyspark import StorageLevel
    from pyspark.sql import functions as F

    from runtime.output import prepare_output, read_table, write_table

    def step(label: str) -> None:
        if phase is not None:
            phase.step(label)

    out = prepare_output(args.out, overwrite=args.overwrite, job="extract")  # the claim prepare() took
    staged = out.staging  # committed when run() returns (a Delta table over ours: a new version in place)
    by_tasks = written_by_tasks(args)
    base = frame = None
    try:
        if by_tasks:
            step("selecting and writing")
            named, tallies, holes = write_by_tasks(spark, args, stores, sel, staged)
            if holes is None:  # queue offsets out of the log's order: sorted in the table written
                step("looking for holes")
                holes = selection_holes(args, stores, read_table(spark, staged, args.format))
        else:
            base = sel.base.persist(StorageLevel.MEMORY_AND_DISK)
            frame = sel.frame.persist(StorageLevel.MEMORY_AND_DISK)
            step("counting the walk's rows and what it leaves out")
            named = base.groupBy("broker", "kept", "beyond_first_stop").count().collect()
            step("counting the selection")
            by = ["_reject", "topic", "broker", "kept"] + (["consumer"] if sel.allocation is not None else [])
            tallies = frame.groupBy(*by).count().collect()
            base.unpersist()
            step("looking for holes")
            holes = selection_holes(args, stores, frame)
        selected = sum(r["count"] for r in tallies)
        rejected, by_topic, per_consumer = {}, {}, {}
        for r in tallies:
            if r["_reject"] is not None:
                rejected[r["_reject"]] = rejected.get(r["_reject"], 0) + r["count"]
                continue
            by_topic[r["topic"]] = by_topic.get(r["topic"], 0) + r["count"]
            if sel.allocation is not None:
                per_consumer[r["consumer"]] = per_consumer.get(r["consumer"], 0) + r["count"]
        brokers, walk_notes = walk_report(args, sel, named, tallies, holes)
        manifest = {
            "job": "extract",
            "stores": [{"broker": s.name, "path": fs.real(s.root) if isinstance(s.root, Path) else fs.uri_of(s.root)}
                       for s in stores],
            "source_geometry": source_geometry(stores[0]),
            "selection": _selection_args(args),
            "walk": {"name": args.walk, "returns": WALK_MEANINGS[args.walk]},
            "brokers": brokers,
            "output": {"path": args.out.as_typed, "format": args.format, "order": list(sel.order)},
            "notes": sel.notes + walk_notes,
        }
        if selected == 0:
            out.abandon()  # nothing kept: no output folder made, an earlier one left as it was
            print("extract: nothing matched the selection" + "".join(f"; {n}" for n in manifest["notes"]),
                  file=err)
            return EXIT_NOTHING
        if not by_tasks:
            keep = frame.where(F.col("_reject").isNull())
            step("writing")
            write_table(keep.select(*output_columns(args)).orderBy(*sel.order), staged, args.format)
        step("counting the output back")
        # a schema keeps Spark from inferring one from every JSON line just to count them
        written = read_table(spark, staged, args.format, schema="broker string").count()
        adds_up = selected == written + sum(rejected.values())
        manifest["counts"] = {"selected": selected, "written": written, "rejected": sum(rejected.values()),
                              "rejected_by_reason": dict(sorted(rejected.items())),
                              "missing_in_holes": holes.get("missing", 0), "adds_up": adds_up,
                              "reconciled": adds_up and not holes.get("missing")}
        manifest["holes"] = holes
        if rejected:
            manifest["rejected_examples"] = [
                {"broker": r["broker"], "physical_offset": r["physical_offset"], "msg_id": r["msg_id"],
                 "reason": r["_reject"], "detail": r["_detail"]}
                for r in frame.where(F.col("_reject").isNotNull()).orderBy("broker", "physical_offset")
                .select("broker", "physical_offset", "msg_id", "_reject", "_detail").limit(_EXAMPLES).collect()]
        manifest["by_topic"] = dict(sorted(by_topic.items()))
        if args.not_consumed_by is not None:
            manifest["not_consumed_by"] = consumption_report(spark, stores, args.not_consumed_by, keep)
        if sel.allocation is not None:
            queues = {c: [] for c in consumer_ids(args)}
            for row in sel.allocation:
                queues[row["consumer"]].append(f"{row['topic']}@{row['broker']}:{row['queue_id']}")
            manifest["consumers"] = {c: {"queues": qs, "messages": per_consumer.get(c, 0)}
                                     for c, qs in queues.items()}
        write_manifest(staged, manifest)
        out.expect(MANIFEST_NAME)  # the commit checks it arrived where it looks
    finally:
        if frame is not None:
            frame.unpersist()
            base.unpersist()
    c = manifest["counts"]
    print(f"extract: {c['selected']} selected, {c['written']} written, {c['rejected']} rejected "
          f"{c['rejected_by_reason'] or ''} -> {args.out.as_typed} ({args.format}, {args.walk} walk)", file=err)
    for note in walk_notes:
        print(f"extract: {note}", file=err)
    if not adds_up:
        print("error: the counts do not reconcile (selected != written + rejected); the output is suspect",
              file=err)
        return EXIT_FAILED
    return EXIT_OK


# --------------------------------------------------------------------------------------------------
# The selection written by the tasks that read it (runtime/export.py)

TASK_WRITTEN = ("parquet", "delta")


def written_by_tasks(args) -> bool:
    """Whether the selection is read, counted and written by the tasks themselves: a Parquet or Delta output, and no
    row that depends on another (``--half`` and ``--not-consumed-by`` join other rows, ``--dedupe`` ranks copies,
    ``--body decompressed`` may reject a row): then each task's rows are its range's, already in the output's order."""
    return (args.format in TASK_WRITTEN and not args.half and args.not_consumed_by is None and not args.dedupe
            and args.body == "stored")


class SelectedRows(Rows):
    """What extract keeps of a task's batches of the salvage walk (as :func:`select` does for the same arguments):
    the messages in the time range that meet every criterion, the broker's only for the kept walk; counted on the
    way as :func:`write_selection` counts them (``base``: by broker, kept and beyond_first_stop; ``selected``: by
    topic, broker and kept).  With ``batch_topics`` ({broker: its batch topics}: holes are looked for), each task
    also says, per queue, its first and last queue offset and the holes between its own (:func:`holes_of_tasks`)."""

    def __init__(self, criteria: list[Criterion], time_range: tuple, kept_only: bool, columns: list[str],
                 batch_topics: dict | None):
        self.criteria, self.time_range, self.kept_only, self.columns = criteria, time_range, kept_only, columns
        self.batch_topics = batch_topics

    def keep(self, batch, tally):
        import pyarrow.compute as pc

        mask = pc.fill_null(pc.equal(batch.column("kind"), "message"), False)
        lo, hi = self.time_range
        for bound, test in ((lo, pc.greater_equal), (hi, pc.less_equal)):
            if bound is not None:
                mask = pc.and_(mask, pc.fill_null(test(batch.column("store_timestamp"), bound), False))
        for c in self.criteria:
            mask = pc.and_(mask, c.mask(batch))
        # counted on the narrow columns; the output's columns filtered once
        keys = batch.select(list(dict.fromkeys(("broker", "kept", "beyond_first_stop", "topic", "tran_type")
                                               + QUEUE_KEYS + ("queue_offset", "physical_offset"))))
        base = keys.filter(mask)
        _count(tally, "base", base, ("broker", "kept", "beyond_first_stop"))
        if self.kept_only:
            mask = pc.and_(mask, pc.fill_null(batch.column("kept"), False))
            base = keys.filter(mask)
        _count(tally, "selected", base, ("topic", "broker", "kept"))
        if self.batch_topics is not None and base.num_rows:
            broker = base.column("broker")[0].as_py()  # a part reads one store
            queued = pc.is_in(base.column("tran_type"), value_set=pa.array(QUEUED_TRAN_TYPES))
            batched = list(self.batch_topics.get(broker, ()))
            if batched:
                queued = pc.and_(queued, pc.invert(pc.is_in(base.column("topic"), value_set=pa.array(batched))))
            tally.scratch.setdefault("queued", []).append(
                base.filter(pc.fill_null(queued, False)).select(list(QUEUE_KEYS) + ["queue_offset",
                                                                                    "physical_offset"]))
        return batch.select(self.columns).filter(mask)

    def finish(self, tally):
        import numpy as np

        batches = tally.scratch.get("queued")
        if not batches:
            return
        t = pa.Table.from_batches(batches).sort_by([(c, "ascending") for c in QUEUE_KEYS[1:]]
                                                   + [("queue_offset", "ascending"), ("physical_offset", "ascending")])
        if not t.num_rows:
            return
        broker = t.column("broker")[0].as_py()
        topic = np.asarray(t.column("topic").to_pylist(), dtype=object)
        qid, qo, po = (t.column(c).to_numpy() for c in ("queue_id", "queue_offset", "physical_offset"))
        same = (topic[1:] == topic[:-1]) & (qid[1:] == qid[:-1])
        if int(np.count_nonzero(~same)) >= RUNS_PER_TASK:
            tally.said["unsure"] = [True]  # the run's holes are looked for in the table written
            return
        firsts = np.concatenate(([0], np.nonzero(~same)[0] + 1))
        lasts = np.concatenate((firsts[1:] - 1, [t.num_rows - 1]))
        tally.said.setdefault("queues", []).extend(
            [broker, topic[a], int(qid[a]), int(qo[a]), int(po[a]), int(qo[b]), int(po[b])]
            for a, b in zip(firsts, lasts))
        tally.said.setdefault("gaps", []).extend(
            [broker, topic[i], int(qid[i]), int(qo[i]) + 1, int(qo[i + 1]) - 1, int(po[i]), int(po[i + 1])]
            for i in np.nonzero(same & (qo[1:] - qo[:-1] > 1))[0])


QUEUE_KEYS = ("broker", "topic", "queue_id")
RUNS_PER_TASK = 4096  # queues a task says its runs of (a task's result comes back whole); past it, the table's sort
GAP_KEYS = QUEUE_KEYS + ("first", "last", "after_physical_offset", "before_physical_offset")


def coalesce_runs(said: dict) -> None:
    """What the tasks said of their queues (:meth:`SelectedRows.finish`), with each queue's runs that meet (no queue
    offset between them) made one, in place: a queue read by many tasks without a hole keeps one run, so the
    driver holds a run per queue and per hole, not per task.  Runs of a queue that overlap (queue offsets out of
    the log's order) leave only ``unsure``: only a sort of the whole queue finds its holes."""
    if said.get("unsure"):
        said.pop("queues", None)
        said.pop("gaps", None)
        return
    runs = []
    for run in sorted(said.get("queues", [])):
        last = runs[-1] if runs and runs[-1][:3] == run[:3] else None
        if last is not None and run[3] < last[5]:
            said.clear()
            said["unsure"] = [True]
            return
        if last is not None and run[3] - last[5] <= 1:
            last[5:] = run[5:]
        else:
            runs.append(list(run))
    said["queues"] = runs


def absorb_task(total, tally) -> None:
    """A task's tally added to the run's (runtime.export.write_parts), its queue runs coalesced as they come."""
    total.add(tally)
    runs = total.said.get("queues", [])
    if total.said.get("unsure") or len(runs) > 2 * total.scratch.get("coalesced", 0) + 1024:
        coalesce_runs(total.said)
        total.scratch["coalesced"] = len(total.said.get("queues", []))


def holes_of_tasks(said: dict) -> dict | None:
    """The manifest's ``holes`` from what the tasks said (:meth:`SelectedRows.finish`): each task's own holes, and
    those between one task's last queue offset of a queue and the next task's first; None when the tasks' queue
    offsets of a queue interleave or a task had too many queues to say (:func:`coalesce_runs`), where only a sort
    of the whole queue finds them."""
    coalesce_runs(said)
    if said.get("unsure"):
        return None
    gaps = [dict(zip(GAP_KEYS, g)) for g in said.get("gaps", [])]
    for run, after in zip(said["queues"], said["queues"][1:]):
        if run[:3] == after[:3]:  # the same queue: runs that did not meet
            gaps.append(dict(zip(GAP_KEYS, tuple(run[:3]) + (run[5] + 1, after[3] - 1, run[6], after[4]))))
    return holes_found(gaps)


def _count(tally, name: str, rows, keys: tuple[str, ...]) -> None:
    """``rows`` counted by ``keys`` into the tally's counts (one count a distinct key, named by its JSON)."""
    if not rows.num_rows:
        return
    groups = pa.Table.from_batches([rows.select(list(keys))]).group_by(list(keys)).aggregate([([], "count_all")])
    for g in groups.to_pylist():
        key = json.dumps([name] + [g[k] for k in keys])
        tally.counts[key] = tally.counts.get(key, 0) + g["count_all"]


def _counted(tally, name: str, keys: tuple[str, ...]) -> list[dict]:
    """The rows :func:`_count` counted under ``name``, as the Spark path's ``groupBy(keys).count()`` rows."""
    rows = []
    for key, n in tally.counts.items():
        values = json.loads(key)
        if values[0] == name:
            rows.append({**dict(zip(keys, values[1:])), "count": n})
    return rows


def write_by_tasks(spark, args, stores: list[StoreRef], sel: Selection, folder: fs.Location) -> tuple[list, list, dict]:
    """The selection of :func:`written_by_tasks` written into ``folder`` by the tasks that read it, one Parquet part per
    planned range, brokers in name order (the output's order: broker, physical offset); the counts of
    :func:`write_selection` (``named``, ``tallies``) and the holes from the tasks' tallies (the holes None when only
    the written table can tell them: :func:`holes_of_tasks`)."""
    from datasources import commitlog_ends, plan_commitlog, salvage_stops
    from runtime.export import Part, PartWriter, spark_written_schema, write_parts
    from runtime.output import write_delta
    from store_format.brokerconf import recovery_settings_from_args
    from store_format.recovery import predict_cut

    ordered = sorted(stores, key=lambda ref: ref.name)
    time_range = (args.from_time, args.to_time)
    settings = recovery_settings_from_args(args)
    parts, schema, predicted = [], None, {}
    for ref in ordered:
        reads = [(read, options, commitlog_ends(spark, fs.uri_of(read), **options))
                 for read, options in commitlog_reads([ref], walk="salvage", decompress=False, materialize="decoded",
                                                      time_range=time_range, filtered=True, cuts=None)]
        # the broker's recovery predicted the audit's way, its walk going on from the first pass's stops
        stops = {segment: stop for _, _, ends in reads for segment, stop in salvage_stops(ends, ref.name).items()}
        predicted[ref.name] = predict_cut(ref.open(), settings, salvage_stops=stops)
        cut = {"recoveryCuts": json.dumps({ref.name: predicted[ref.name].cut.as_dict()})}
        for read, options, ends in reads:
            reader, ranges, schema = plan_commitlog(spark, fs.uri_of(read), ends=ends, **options, **cut)
            parts += [Part(reader, r) for r in ranges]
    if schema is None:  # every segment lies outside the time range: no part; the schema of the last store's plan
        read, options = commitlog_reads(ordered[-1:], walk="salvage", decompress=False, materialize="decoded",
                                        time_range=(None, None), filtered=True, cuts=None)[0]
        schema = plan_commitlog(spark, fs.uri_of(read), **options, **cut)[2]
    sel.recovery.update((ref.name, predicted[ref.name]) for ref in stores)  # the manifest's order: as given
    columns = output_columns(args)
    batch_topics = None if holes_not_looked_for(args) else {ref.name: ref.open().batch_topics for ref in stores}
    rows = SelectedRows(selection_criteria(args), time_range, args.walk == "kept", columns, batch_topics)
    tallies = []

    def write(into: fs.Location) -> None:
        # the tasks get the folder as the string that resolves to it again in their own process
        writer = PartWriter(fs.uri_of(into), spark_written_schema(schema, columns, spark.version), rows)
        tallies.append(write_parts(spark, parts, writer, absorb=absorb_task))

    if args.format == "delta":  # the tasks' files, committed by delta-rs as Spark's would be
        write_delta(folder, "overwrite", write, lambda: None)  # never empty: write_parts leaves a file
    else:
        write(folder)
    tally = tallies[0]
    named = _counted(tally, "base", ("broker", "kept", "beyond_first_stop"))
    selected = [{**r, "_reject": None} for r in _counted(tally, "selected", ("topic", "broker", "kept"))]
    holes = holes_not_looked_for(args) or holes_of_tasks(tally.said)
    return named, selected, holes


#: the options that pick single messages: the queue offsets between the messages they pick are not expected
_PICKS_SINGLE_MESSAGES = (("tag", "--tag"), ("key", "--key"), ("tran_type", "--tran-type"), ("half", "--half"))
_HOLES_LISTED = 50


def selection_holes(args, stores: list[StoreRef], frame) -> dict:
    """Queue offsets the selection leaves out between the ones it has, per queue: messages the store held (their
    queue offsets were given out) that no intact record of the walk holds -- damaged or destroyed records, or, for
    the kept walk, records the broker keeps but cannot serve.  Not looked for where the selection picks single
    messages (--tag, --key...), and not in batch queues (whose records take a queue offset per inner message);
    PREPARED and ROLLBACK records take no queue offset."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    not_looked_for = holes_not_looked_for(args)
    if not_looked_for is not None:
        return not_looked_for
    rows = frame.where(F.col("tran_type").isin(*QUEUED_TRAN_TYPES))
    for ref in stores:
        for topic in sorted(ref.open().batch_topics):
            rows = rows.where(~((F.col("broker") == ref.name) & (F.col("topic") == topic)))
    w = Window.partitionBy("broker", "topic", "queue_id").orderBy("queue_offset")
    gaps = (rows.select("broker", "topic", "queue_id", "queue_offset", "physical_offset")
            .withColumn("_prev", F.lag("queue_offset").over(w))
            .withColumn("_after", F.lag("physical_offset").over(w))
            .where(F.col("queue_offset") - F.col("_prev") > 1)
            .select("broker", "topic", "queue_id", (F.col("_prev") + 1).alias("first"),
                    (F.col("queue_offset") - 1).alias("last"),
                    F.col("_after").alias("after_physical_offset"),
                    F.col("physical_offset").alias("before_physical_offset"))
            .collect())
    return holes_found([g.asDict() for g in gaps])


def holes_not_looked_for(args) -> dict | None:
    """Why holes are not looked for in this selection (the manifest's ``holes``), or None."""
    picked = [option for attr, option in _PICKS_SINGLE_MESSAGES if getattr(args, attr, None)]
    if not picked:
        return None
    return {"checked": False, "why": f"the selection picks single messages ({', '.join(picked)}): the queue offsets "
                                     "between them are not expected in it"}


def holes_found(gaps: list[dict]) -> dict:
    """The manifest's ``holes`` of the gaps found (broker, topic, queue_id, first, last, after_physical_offset,
    before_physical_offset): how many queue offsets are missing, in how many holes, the first listed."""
    gaps = sorted(gaps, key=lambda g: (g["broker"], g["topic"], g["queue_id"], g["first"]))
    listed = [{"broker": g["broker"], "topic": g["topic"], "queue_id": g["queue_id"],
               "queue_offsets": [g["first"], g["last"]], "missing": g["last"] - g["first"] + 1,
               "after_physical_offset": g["after_physical_offset"],
               "before_physical_offset": g["before_physical_offset"]} for g in gaps[:_HOLES_LISTED]]
    return {"checked": True, "missing": sum(g["last"] - g["first"] + 1 for g in gaps), "holes": len(gaps),
            "listed": listed}


def walk_report(args, sel: Selection, named: list, tallies: list, holes: dict) -> tuple[list[dict], list[str]]:
    """Per broker: where its predicted recovery cuts the log, how many intact messages of the selection lie past the
    cut (left out by the kept walk, written by the salvage walk with kept = false) and behind damage in their
    segment before it (written, beyond_first_stop = true); and the notes that say so."""
    out, notes = [], []
    for name, prediction in sel.recovery.items():
        cut = prediction.cut
        mine = [r for r in named if r["broker"] == name]
        past = sum(r["count"] for r in mine if r["kept"] is False)
        behind = sum(r["count"] for r in mine if r["kept"] and r["beyond_first_stop"])
        written_past = sum(r["count"] for r in tallies if r["broker"] == name and r["kept"] is False
                           and r["_reject"] is None)
        where = (f"the broker's predicted cut at physical offset {cut.physical_offset:,} (segment {cut.segment} byte "
                 f"{cut.file_position}: {cut.kind}, {cut.mode} recovery)")
        out.append({"broker": name, "cut": cut.as_dict(), "will_start": prediction.will_start,
                    "intact_past_cut": past, "past_cut_written": written_past, "intact_past_damage": behind})
        if past and args.walk == "kept":
            notes.append(f"{name}: {past:,} intact message(s) of the selection lie at or past {where} and were left "
                         "out: the broker drops them (--walk salvage writes them too, marked kept = false)")
        elif past:
            notes.append(f"{name}: {written_past:,} of the messages written lie at or past {where}: the broker drops "
                         "them (kept = false)")
        if behind:
            notes.append(f"{name}: {behind:,} message(s) written lie behind damage in their segment, before the cut "
                         "(beyond_first_stop = true): the broker keeps them")
    for h in holes.get("listed", []):
        first, last = h["queue_offsets"]
        span = f"queue offset {first}" if first == last else f"queue offsets {first}-{last}"
        notes.append(f"{h['broker']}: {h['topic']}/{h['queue_id']} {span} missing between physical offsets "
                     f"{h['after_physical_offset']} and {h['before_physical_offset']}: no intact record holds "
                     f"{'it' if first == last else 'them'} (damaged or destroyed; `query --explain` and the audit "
                     "say what happened there)")
    if holes.get("holes", 0) > len(holes.get("listed", [])):
        notes.append(f"{holes['holes'] - len(holes['listed'])} more hole(s): {holes['missing']:,} queue offsets "
                     "missing in all")
    return out, notes


def consumption_report(spark, stores: list[StoreRef], group: str, unconsumed) -> list[dict]:
    """Per queue of the group's topics: committed offset (None: no entry, counted from 0) and how many
    records of the output are at or after it."""
    from pyspark.sql import functions as F

    offsets, _ = committed_offsets(spark, stores, group)
    counts = unconsumed.groupBy("broker", "topic", "queue_id").agg(F.count(F.lit(1)).alias("unconsumed"),
                                                                   F.min("queue_offset").alias("first"),
                                                                   F.max("queue_offset").alias("last"))
    rows = offsets.join(counts, ["broker", "topic", "queue_id"], "full").orderBy("broker", "topic", "queue_id")
    return [{"broker": r["broker"], "topic": r["topic"], "queue_id": r["queue_id"], "committed_offset": r["offset"],
             "unconsumed": r["unconsumed"] or 0, "first_queue_offset": r["first"], "last_queue_offset": r["last"]}
            for r in rows.collect()]


# each simulated consumer is an id, an allocation and a manifest entry: a group far larger than any queue count is a
# typo, not a consumer group (and would exhaust memory)
MAX_CONSUMERS = 1 << 16
CONSUMERS_ARGUMENT = number_argument((1, MAX_CONSUMERS), "a count of consumers")


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog=f"{cli.PROG} extract", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    cli.add_store_arguments(p, what="a broker store root, one of its part folders or segment files, or a folder of "
                                    "brokers' store roots")
    add_output_arguments(p)
    s = p.add_argument_group("selection (every criterion given must hold)")
    s.add_argument("--topic", action="append", metavar="T", help="messages of topic T (repeatable: any of them)")
    s.add_argument("--queue", action="append", type=cli.queue_id_argument, metavar="Q",
                   help="messages of queue id Q (repeatable: any of them)")
    s.add_argument("--tag", metavar="TAG", help="messages whose TAGS is TAG")
    s.add_argument("--key", metavar="K", help="a KEYS entry or the UNIQ_KEY")
    s.add_argument("--from", dest="from_time", type=parse_time, metavar="T1",
                   help="store time >= T1 (ISO-8601, e.g. 2024-05-01T10:00:00Z, UTC unless it says; or ms since the "
                        "epoch)")
    s.add_argument("--to", dest="to_time", type=parse_time, metavar="T2", help="store time <= T2 (as --from)")
    s.add_argument("--physical-offsets", type=offset_range, metavar="FROM..TO",
                   help="physical offsets from FROM to TO, both included (either may be left out: 5010015..); "
                        "the audit's report gives this for the messages recovery drops")
    s.add_argument("--queue-offsets", type=offset_range, metavar="FROM..TO",
                   help="queue offsets from FROM to TO, both included (with --topic and --queue)")
    s.add_argument("--tran-type", choices=TRAN_TYPES, help="the sysflag transaction type")
    s.add_argument("--half", choices=HALF_STATES, help="half messages by what became of them")
    s.add_argument("--dlq", nargs="?", const="", metavar="GROUP", help="%%DLQ%% topics (of GROUP)")
    s.add_argument("--retry", nargs="?", const="", metavar="GROUP", help="%%RETRY%% topics (of GROUP)")
    s.add_argument("--not-consumed-by", metavar="G", help="what consumer group G has not consumed yet")
    s.add_argument("--consumers", type=CONSUMERS_ARGUMENT, metavar="N",
                   help=f"simulate G's N consumers (AVG allocation; at most {MAX_CONSUMERS:,})")
    s.add_argument("--consumer-ids", metavar="ID,ID", help="simulate G's consumers with these client ids")
    p.add_argument("--walk", type=canonical_walk, choices=WALKS, default="kept", help=walk_help("kept"))
    p.add_argument("--body", choices=("stored", "decompressed"), default="stored",
                   help="stored: the body as stored, compressed or not (default); decompressed: compressed bodies "
                        "decompressed, their compression bits cleared (replays as plain records)")
    p.add_argument("--dedupe", action="store_true", help="one copy per (topic, UNIQ_KEY, reconsume times, "
                   "transaction type) across brokers and replicas")
    add_geometry_arguments(p, recovery=True)
    return p


def prepare(args) -> list[StoreRef]:
    """The arguments and stores checked and the output folder prepared: before Spark starts (and again, the same,
    when ``run`` is called directly)."""
    from runtime.output import prepare_output
    from runtime.stores import split_name

    check_args(args)
    stores = resolve_stores(args.store, files=True, geometry=geometry_from_args(args))
    prepare_output(args.out, overwrite=args.overwrite,
                   inputs=[split_name(a)[1] for a in args.store] + [s.path for s in stores], job="extract",
                   delta=args.format == "delta")
    return stores


def check_args(args) -> None:
    geometry_from_args(args)  # a broker.conf that cannot be used is bad usage, said before Spark starts
    if (args.consumers or args.consumer_ids) and args.not_consumed_by is None:
        raise UsageError("--consumers/--consumer-ids simulate the consumers of --not-consumed-by G")
    if args.consumers is not None and args.consumers < 1:
        raise UsageError("--consumers must be at least 1")
    check_key("--key", args.key)


def main(argv=None, prog: str | None = None) -> int:
    return cli.main("extract", build_parser, run, argv, prepare=prepare, prog=prog)


if __name__ == "__main__":
    sys.exit(main())
