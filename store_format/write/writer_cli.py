"""The writer's commands: ``generate`` a synthetic store, ``write`` a store from JSON Lines.

  python -m store_format generate OUT_DIR --messages N [--topics T] [--queues Q] [--seed S]
                                  [--segment-size BYTES] [--config broker.conf] [--crash] [--cover]
                                  [--rocketmq 4|5]
  python -m store_format write OUT_DIR --input messages.jsonl [--config broker.conf] [--topics topics.json]
                               [--crash] [--append]

``generate --rocketmq 5`` writes a 5.3.3 broker's store (store_format.write.generate's 5.3.3 profile: timers, LMQ,
POP, a BatchCQ topic, ``__CRC32#``).  A ``--config`` with 5.x settings (``enabledAppendPropCRC``, ``timerWheelEnable``,
``enableLmq``, ``enableMultiDispatch``, ``mappedFileSizeTimerLog``...) gives ``write`` the 5.x put path too: with
``enabledAppendPropCRC=true`` every record written gets its ``__CRC32#`` property (one the input already carries
is deleted first, as text, as the broker deletes it).

``write --topics topics.json`` starts the store from a topics.json in the broker's own format (its
``topicConfigTable``: each topic's queues, perm and 5.x ``attributes``; its ``dataVersion``), as the broker
loads it at start.  A topic with ``"attributes": {"queue.type": "BatchCQ"}`` is a 5.x BatchCQ topic: its records
get the batch counter's queue offsets (INNER_BASE on inner batches) and 46-byte units in batchconsumequeue/
instead of a consume queue.  One with ``"attributes": {"cleanup.policy": "COMPACTION"}`` gets a compaction store
(with ``enableCompaction``, RocketMQ's default): at close each of its queues is compacted up to its last record with
KEYS, into compaction/compactionLog/ and compaction/compactionCq/ (``compactionMappedFileSize``,
``compactionCqMappedFileSize``), and compaction/position-checkpoint says so.  ``--append`` keeps the existing
store's own config/topics.json, attributes included (its batch queues continue after their last unit; a store with
COMPACTION topics is refused), and takes no ``--topics``.

Both refuse a non-empty OUT_DIR (``write --append`` adds to the store there, re-dispatching whatever its
consume queues and index lack).  ``--crash`` leaves the store as a killed broker would (``abort`` file,
stale checkpoint).  Progress and the summary go to stderr.  Exit codes: 0 written, 2 bad usage or
refused input (the store is then left marked as not cleanly shut down).

JSON Lines input (``write``)
----------------------------
One stored record per line, a JSON object with the project's canonical field names (the same names
``python -m store_format dump`` prints, so a dump can be edited and written back; its ``blank`` and ``stop``
rows are skipped: the writer lays its own blanks):

=============================  =============================================================================
``topic``                      required; RocketMQ TopicValidator rules (``[%|a-zA-Z0-9_-]``, <= 127 chars)
``queue_id``                   default 0
``body``                       base64 of the body exactly as stored (compressed if ``sys_flag`` says so)
``properties_raw``             the properties string exactly as stored (``name\\u0001value\\u0002...``);
                               if absent, ``properties`` (an object) is serialized in its key order
``sys_flag``                   default 0; the IPv6 bits (0x10 born, 0x20 store) must match the hosts
``flag``, ``reconsume_times``, ``prepared_transaction_offset``   default 0
``born_timestamp``, ``store_timestamp``   ms since the epoch; default 0
``born_host``, ``store_host``  ``"ip:port"`` or ``"[ipv6]:port"``; defaults 127.0.0.1:0 / 127.0.0.1:10911
``magic_version``              1 (default) or 2
``batch``                      optional, a string or an integer: consecutive records with the same value are
                               one put, a classic batch (``CommitLog.putMessages``) that never straddles a
                               segment: when the whole batch does not fit in what the segment has left, the
                               end-of-file blank goes where it would have started, even if its first records
                               would have fitted.  As 4.9.7 requires, its records share topic, queue_id,
                               sys_flag (transaction type NOT), born/store timestamps and hosts and
                               reconsume_times, and have prepared_transaction_offset 0 (V1); they get
                               consecutive queue offsets.  A batch larger than a segment is refused (the
                               message names its lines), as an oversized record is.  ``dump --what
                               commitlog`` sets it where the broker rolled early (below)
=============================  =============================================================================

``queue_offset``, ``physical_offset``, ``body_crc`` and ``store_size`` are assigned by the writer (as the
broker does) and ignored on input, as are derived fields (``msg_id``, ``tags``, ``keys``...).
Records are written in file order; PREPARED/ROLLBACK records get queue offset 0 and no consume-queue entry.

A dump written back keeps its commitlog's layout: every record and blank in the same place.  With the store's
own settings (``--config``: its geometry, and for a 5.3.3 store ``timerWheelEnable=true``, RocketMQ's default
there) and topics (``--topics`` its config/topics.json), and when the store starts at physical offset 0 and its
queues at queue offset 0 (where the writer starts), it is the store RocketMQ wrote: the commitlog, consume
queues (LMQ ones too), batch consume queues, the index files' contents, the timer log and wheel and topics.json
are RocketMQ's byte for byte (tests/test_writer_round_trip.py runs it on every 4.9.7 and 5.3.3 fixture).  What
differs: the names of index files and the checkpoint's physicMsgTimestamp (the broker's clock); the timer
checkpoint's read time and the timer metrics (its threads' clock, and the fires they ran); committed consumer
offsets (not records) and the groups' data version; and what the writer does not write: 5.x's ``abort.bak`` and
``compaction/`` (but for COMPACTION topics' stores: no fixture has one to compare with), a DLedger log, a RocksDB
consume queue.

Where the broker rolled early -- an end-of-file blank although the next record and the 8-byte minimum blank would
have fitted: the put that followed was a batch -- ``dump --what commitlog`` gives the records after the blank
a shared ``batch`` (the physical offset of the first of them): the fewest that, as one batch, do not fit, so
that ``write`` rolls at the same place.
"""
from __future__ import annotations

import argparse
import io
import json
import os
import sys

from .. import fs
from ..brokerconf import file_size_argument, number_argument
from ..config import read_config_file
from .bulk import RecordBatch, append_many
from ..codec import host_flags
from ..errors import ErrorKind, StoreFormatError, WriterError
from .. import layout as L
from .generate import Traffic5Config, TrafficConfig, generate_store, progress_line
from ..message import Message
from .writer import StoreWriter, TopicTable, WriterConfig

EXIT_OK, EXIT_USAGE = 0, 2
_CHUNK = 4096


def _config(args) -> WriterConfig:
    cfg = WriterConfig.from_file(args.config) if args.config else WriterConfig()
    if getattr(args, "segment_size", None):
        cfg = WriterConfig.from_dict({**cfg.to_dict(), "mappedFileSizeCommitLog": args.segment_size})
    return cfg


def run_generate(args) -> int:
    try:
        cfg = _config(args)
        args.rate_given = args.rate is not None
        traffic = TrafficConfig(messages=args.messages, topics=args.topics, queues=args.queues, seed=args.seed,
                                rate=args.rate if args.rate_given else 2000.0, start_ms=args.start_ms,
                                cover=args.cover)
        if args.messages <= 0 or args.topics <= 0 or args.queues <= 0:
            raise ValueError("--messages, --topics and --queues must be positive")
        if os.path.isdir(args.out_dir) and os.listdir(args.out_dir):  # generate only writes new stores
            raise ValueError(f"{args.out_dir} is not empty: generate writes a new store; give a new or empty "
                             "folder (write --append adds records to a store that is there)")
        if args.rocketmq == "5":  # the 5.3.3 profile: its traffic, on cfg with the 5.x switches on
            traffic = Traffic5Config(messages=args.messages, topics=args.topics, queues=args.queues, seed=args.seed,
                                     rate=args.rate if args.rate_given else Traffic5Config.rate,
                                     start_ms=args.start_ms)
        stats = generate_store(args.out_dir, traffic, cfg, progress=None if args.quiet else progress_line(),
                               crash=args.crash)
    except (StoreFormatError, ValueError, OSError) as e:
        print(f"error: {fs.error_line(e)}", file=sys.stderr)
        return EXIT_USAGE
    print(f"generate: {stats['messages']} messages, {stats['bytes'] / 1e6:,.1f} MB in {stats['segments']} "
          f"segment(s), {stats['total_s']:.1f} s ({stats['messages'] / stats['total_s']:,.0f} msg/s; writer "
          f"{stats['messages'] / stats['write_s']:,.0f} msg/s) -> {args.out_dir}"
          f"{' (crashed: abort file left)' if args.crash else ''}", file=sys.stderr)
    return EXIT_OK


_LAYOUT_ROWS = ("blank", "stop")  # a dump's rows that are no record: the writer lays its own blanks


def _records(stream, start_line: int = 1):
    """(line number, record, batch value or None) of every record line."""
    for n, line in enumerate(stream, start_line):
        if not line.strip():
            continue
        try:
            d = json.loads(line)
            if not isinstance(d, dict):
                raise ValueError("a line must be a JSON object")
            kind = d.get("kind", "message")
            if kind in _LAYOUT_ROWS:
                continue
            if kind != "message":
                raise ValueError(f"a {kind!r} row holds no record to write")
            if "topic" not in d:
                raise ValueError("missing field 'topic'")
            batch = d.get("batch")
            if batch is not None and (isinstance(batch, bool) or not isinstance(batch, (int, str))):
                raise ValueError(f"batch {batch!r}: a string or an integer")
            yield n, Message.from_dict(d), batch
        except (ValueError, TypeError, KeyError) as e:
            raise WriterError(ErrorKind.INVALID_INPUT, f"line {n}: {e}", field="line", position=n) from None


def _checked(records, writer: StoreWriter):
    """Each record refused or passed as its own line, before anything of its chunk is written."""
    for n, msg, batch in records:
        try:
            writer.check_record(msg)
            v6_bits = msg.sys_flag & (L.BORNHOST_V6_FLAG | L.STOREHOST_V6_FLAG)
            if v6_bits != host_flags(msg.born_host, msg.store_host):
                raise WriterError(ErrorKind.INVALID_INPUT, f"sys_flag 0x{msg.sys_flag:X} IPv6 bits disagree "
                                  f"with hosts {msg.born_host} / {msg.store_host}", field="sys_flag")
        except StoreFormatError as e:
            raise WriterError(e.kind, f"line {n}: {e.message}", field=e.field, position=n) from None
        yield n, msg, batch


def _puts(records, writer: StoreWriter):
    """The input's puts in order, as (records, is a batch): a record without ``batch`` alone, consecutive
    records with the same ``batch`` together, each batch checked as ``StoreWriter.check_batch`` does."""
    group, key, first = [], None, 0

    def batch():
        try:
            writer.check_batch(group)
        except StoreFormatError as e:
            raise WriterError(e.kind, f"lines {first}-{last} (batch {key[1]!r}): {e.message}", field=e.field,
                              position=first) from None
        return group, True

    for n, msg, value in records:
        k = None if value is None else (type(value), value)
        if group and k != key:
            yield batch()
            group = []
        if k is None:
            yield [msg], False
            continue
        if not group:
            key, first = k, n
        group.append(msg)
        last = n
    if group:
        yield batch()


def check_apart(out_dir: str, inputs) -> None:
    """Refuse an output store that is, contains or lies inside an input file or the store holding it (paths
    resolved, compared by device and inode: store_format.fs.overlap), before anything is opened for writing."""
    for given in inputs:
        if given in (None, "-") or not os.path.lexists(given):
            continue
        for protected in dict.fromkeys((fs.store_root_of(given), fs.real(given))):
            how = fs.overlap(out_dir, protected)
            if how is not None:
                raise WriterError(ErrorKind.INVALID_INPUT, f"the store written overlaps the input {given} (it "
                                  f"{ {'is': 'is', 'inside': 'lies inside', 'contains': 'contains'}[how]} "
                                  f"{protected}): a write never touches its own input", file=str(out_dir))


def run_write(args) -> int:
    try:
        cfg = _config(args)
        if args.topics and args.append:
            raise WriterError(ErrorKind.INVALID_INPUT, "--topics starts a new store's topics; --append keeps the "
                              "store's own config/topics.json (its attributes included): leave --topics out",
                              field="--topics")
        if args.input != "-":
            fs.check_file(args.input)  # the input first: a FIFO, a folder, no permission is refused here
        check_apart(args.out_dir, [args.input, args.config, args.topics])
        topics = TopicTable.from_json(read_config_file(args.topics), args.topics) if args.topics else None
        stream = sys.stdin if args.input == "-" else io.TextIOWrapper(fs.open_file(args.input), encoding="utf-8")
    except (StoreFormatError, OSError) as e:
        print(f"error: {fs.error_line(e)}", file=sys.stderr)
        return EXIT_USAGE
    writer = None
    count = 0
    try:
        writer = StoreWriter(args.out_dir, cfg, append=args.append)
        if topics is not None:
            writer.adopt_topics(topics)
        chunk, batch_ids = [], []  # a batch is never cut between chunks
        for k, (msgs, is_batch) in enumerate(_puts(_checked(_records(stream), writer), writer)):
            chunk.extend(msgs)
            batch_ids.extend([k if is_batch else -1] * len(msgs))
            if len(chunk) >= _CHUNK:
                count += _flush_chunk(writer, chunk, batch_ids)
                chunk, batch_ids = [], []
        if chunk:
            count += _flush_chunk(writer, chunk, batch_ids)
    except (StoreFormatError, OSError) as e:
        print(f"error: {fs.error_line(e)}", file=sys.stderr)
        if writer is not None:
            writer.crash()  # never leave a store that claims a clean shutdown
            print(f"write: stopped after {count} record(s); {args.out_dir} is marked not cleanly shut down",
                  file=sys.stderr)
        return EXIT_USAGE
    finally:
        if stream is not sys.stdin:
            stream.close()
    if args.crash:
        writer.crash()
    else:
        writer.close()
    print(f"write: {count} record(s) -> {args.out_dir} ({len(writer.segments)} segment(s), "
          f"{len(writer.cqs)} consume queue(s), {len(writer.index_names)} index file(s))"
          f"{'; crashed: abort file left' if args.crash else ''}", file=sys.stderr)
    return EXIT_OK


def _flush_chunk(writer: StoreWriter, chunk: list, batch_ids: list) -> int:
    if all(m.magic_version == 1 for m in chunk):
        append_many(writer, RecordBatch.from_messages(chunk, batch_ids))
        return len(chunk)
    i = 0  # the bulk path writes V1 records only (a batch is always V1)
    while i < len(chunk):
        j = i + 1
        while batch_ids[i] >= 0 and j < len(chunk) and batch_ids[j] == batch_ids[i]:
            j += 1
        if batch_ids[i] >= 0:
            writer.append_batch(chunk[i:j])
        else:
            writer.append(chunk[i])
        i = j
    return len(chunk)


def register(subparsers) -> None:
    """Add ``generate`` and ``write`` to an argparse subparsers object."""
    g = subparsers.add_parser("generate", help="write a synthetic broker store (realistic traffic, seeded)",
                              description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    g.add_argument("out_dir", metavar="OUT_DIR", help="new store root (must not exist or be empty)")
    g.add_argument("--messages", type=number_argument((0, L.JAVA_LONG[1]), "a count of records (a Java long)"),
                   required=True, help="stored records to write")
    g.add_argument("--topics", type=number_argument((1, L.JAVA_INT[1]), "a count of topics (a positive Java int)"),
                   default=8, help="business topics (default 8)")
    g.add_argument("--queues", type=number_argument((1, L.JAVA_INT[1]), "a queue count (a positive Java int)"),
                   default=4, help="queues per topic (default 4)")
    g.add_argument("--seed", type=int, default=0, help="random seed: same seed, same store")
    g.add_argument("--segment-size", type=file_size_argument, metavar="SIZE",
                   help="mappedFileSizeCommitLog in bytes or with k/m/g (default 1g)")
    g.add_argument("--config", help="broker.conf with store settings (key=value)")
    g.add_argument("--rate", type=float, default=None, help="simulated stores per second (default 2000; 200 with "
                   "--rocketmq 5, so that timers fire while the traffic runs)")
    g.add_argument("--rocketmq", choices=["4", "5"], default="4",
                   help="4 (default): a 4.9.x broker's store; 5: a 5.3.3 broker's (timer wheel and log, timer "
                        "messages fired, rolled and recalled, LMQ queues, POP checkpoints and acks, a BatchCQ "
                        "topic, __CRC32# on every record; --config's settings win)")
    g.add_argument("--start-ms", type=number_argument(L.JAVA_LONG, "a time in ms (a Java long)"),
                   default=1_700_000_000_000, help="simulated broker start (ms)")
    g.add_argument("--crash", action="store_true", help="end as a killed broker: abort file, stale checkpoint")
    g.add_argument("--cover", action="store_true",
                   help="open with a send to every queue and each rare flow once (a delay per level, a committed "
                        "transaction, a retry and a dead letter per group): every topic and queue even in a tiny "
                        "store (the retries need ~20 simulated seconds: lower --rate for a few hundred messages)")
    g.add_argument("--quiet", action="store_true", help="no progress line")
    g.add_argument("--debug", action="store_true", help="show a Python traceback when the tool itself fails")
    g.set_defaults(run=run_generate)

    w = subparsers.add_parser("write", help="write a store from JSON Lines of stored records",
                              description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    w.add_argument("out_dir", metavar="OUT_DIR", help="store root (new, or existing with --append)")
    w.add_argument("--input", required=True, help="JSON Lines file, one stored record per line ('-' = stdin)")
    w.add_argument("--config", help="broker.conf with store settings (key=value)")
    w.add_argument("--crash", action="store_true", help="end as a killed broker: abort file, stale checkpoint")
    w.add_argument("--append", action="store_true", help="add to the store already in OUT_DIR (its config/topics.json, "
                   "topic attributes included, stays what it says)")
    w.add_argument("--topics", metavar="topics.json", help="start from these topics: a topics.json in the broker's "
                   "format (topicConfigTable with queues, perm and 5.x attributes such as queue.type=BatchCQ)")
    w.add_argument("--debug", action="store_true", help="show a Python traceback when the tool itself fails")
    w.set_defaults(run=run_write)
