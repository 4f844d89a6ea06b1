"""Query: find messages in one or more broker dumps, and say why one cannot be found.

  rocketmq-forensics query --store PATH [PATH ...]
         (--msg-id ID | --topic T --key K | --uniq-key U [--topic T] | --from T1 --to T2 [--topic T [--tag TAG]]
          | --topic T --tag TAG [--from T1] [--to T2])
         [--format jsonl|table] [--explain] [--limit N]

Point lookups need no Spark (fast: a few file reads per store):

* ``--msg-id``: the offsetMsgId is decoded (store host + physical offset) and that one record is read.
  Stores whose records carry that store host are tried first; every store is tried, so a dump whose broker
  changed address, or a master and its slave, all answer.
* ``--topic T --key K``: the index files give candidate offsets for ``T#K`` (hash matches, every file, no
  64-result cap), each candidate record is read and kept only when its topic is T and K is one of its KEYS
  or its UNIQ_KEY.  ``--from``/``--to`` narrow the index time window as RocketMQ's queryMessage does.
* ``--uniq-key U``: the same for a UNIQ_KEY (the client's msgId), in topic T or, without ``--topic``, in
  every topic the store knows (its consume queues, topics.json, the schedule and half topics): a delayed,
  retried or transactional message is found in each topic it passed through.

Scans return what the broker keeps after its predicted recovery (the kept walk: every intact message before the
cut the audit reports; ``--config``'s forceVerifyPropCRC moves it as it moves the broker's): ``--from``/``--to``
without a key (segments whose time span lies outside are skipped) and ``--topic T --tag TAG``.  A store whose
segments to read hold up to 256 MiB is scanned in this process, in seconds; a larger one by Spark (the
``rocketmq-commitlog`` data source, store time, topic and tag pushed into it), which this job then starts.

``--explain`` says, per store, why a message was not found -- NO_INDEX (no index files), NO_INDEX_ENTRY,
HASH_COLLISION_ONLY (candidates with the same hash, other keys), STALE_INDEX_ENTRY (a candidate points inside
another record or outside the commitlog), OUTSIDE_INDEX_WINDOW, INDEX_FILE_UNREADABLE (an index file that could not
be opened, so not searched), NOT_INDEXED (stored after the index's last entry), OTHER_STORE_HOST,
NOT_A_RECORD_START, OUT_OF_RANGE -- and notes found messages that the broker's recovery will drop
(DROPPED_BY_RECOVERY, from the model of the broker's recovery the audit uses).  A message the index or a consume
queue still points at whose record is gone is DESTROYED (no record can be framed there: what destroyed it -- the
zeros over its header, bytes no walk frames, zeros past the written data) or DAMAGED (its header still frames a
record that fails a check: which), with its queue offset and position.  When the lookup finds nothing it falls
back to a scan with the salvage walk (here or by Spark, as above), which also reads past damage and past the cut:
a message found there is printed and classified (BEHIND_DAMAGE: after damage in its segment; DROPPED_BY_RECOVERY;
NOT_INDEXED; NO_INDEX_ENTRY); a tag or time-window query that finds nothing does the same, and names the consume-queue
units with the tag's hash at destroyed records, or the damage inside the window.  Only a message nothing in the
store refers to is NEVER_WRITTEN (NOT_IN_TIME_WINDOW when --from/--to narrowed a key; NOTHING_IN_WINDOW for a
window).  On a 5.x store ``--explain`` of ``--uniq-key``/``--key`` also follows a timer message (TIMER_ENQUEUED,
TIMER_IN_WHEEL, then TIMER_FIRED, TIMER_ROLLED, TIMER_PENDING, TIMER_RECALLED, TIMER_LOST... with why, and
TIMER_CHAIN_LOOP or TIMER_BLOCKED_BY_LOOP where its slot's chain, or an earlier slot's, loops: the audit's
timers.chain_loop; also for ``--topic T --key K`` when it is still on rmq_sys_wheel_timer) and says a POP-consumed
message's state (POP_ACKED, POP_IN_FLIGHT, POP_REVIVE_PENDING, POP_REVIVED, POP_LOST).  Times a person reads are
ISO-8601 UTC, with the epoch ms of the property they come from beside.

Output: JSON Lines (default) -- ``{"kind": "message", "broker": ..., <canonical message fields>, "store_time",
"born_time"}`` per message (the canonical message fields, body in base64: docs/record-layout.md; the two times in
ISO beside their epoch fields), and
with ``--explain`` ``{"kind": "explain", "broker", "reason", "physical_offset", "detail"}`` lines -- or a
table (a body that is not printable text shown as ``<binary, N bytes: hex...>``).  Exit codes: 0 found, 1 nothing
found, 2 bad usage (an id or key that does not parse says why) or an unreadable store.  An index file that cannot
be opened (unreadable, too short, or a geometry neither the file nor ``--config``/``--hash-slots``/``--index-num``
tells) is named on stderr (a notice) and the key is looked
for by a scan of every store (salvage walk) as well, so the answer stays complete (exit 0 or 1), as
``python -m store_format query`` does; a geometry given with ``--config`` or the flags that an index file's content
contradicts is an error naming the file (exit 2).
"""
from __future__ import annotations

import argparse
import json
import sys
from dataclasses import dataclass, field
from pathlib import Path

if __package__ in (None, ""):  # spark-submit jobs/query.py: make the project importable
    try:
        import _bootstrap  # noqa: F401  (jobs/_bootstrap.py)
    except ModuleNotFoundError:  # a copy outside the checkout: the project comes with --py-files
        pass

from store_format import fs  # noqa: E402
from store_format import layout as L  # noqa: E402
from store_format.brokerconf import add_geometry_arguments, geometry_from_args  # noqa: E402
from store_format.config import topic_configs  # noqa: E402
from store_format.errors import IdError, StoreFormatError  # noqa: E402
from store_format.ids import parse_offset_msg_id, parse_uniq_key  # noqa: E402
from store_format.javahash import index_key, index_key_hash  # noqa: E402
from store_format.message import Message  # noqa: E402
from store_format.store import Store  # noqa: E402

from jobs import local_scan  # noqa: E402
from runtime import cli  # noqa: E402
from runtime.cli import EXIT_NOTHING, EXIT_OK, UsageError  # noqa: E402
from runtime.display import format_iso_z  # noqa: E402
from jobs.extract import check_key, format_time, parse_time, read_messages  # noqa: E402
from runtime.stores import StoreRef, resolve_stores  # noqa: E402

MODES = ("msg-id", "key", "uniq-key", "time", "tag")
#: the reasons that say the store still refers to a message it cannot give back (never NEVER_WRITTEN then)
EVIDENCE = ("DAMAGED", "DESTROYED")
_END_OF_TIME = 2**63 - 1


@dataclass
class Hit:
    broker: str
    message: Message
    found_by: str  # "msg-id" | "index" | "scan"
    beyond_first_stop: bool | None = None


@dataclass
class Explanation:
    broker: str
    reason: str
    detail: str
    physical_offset: int | None = None

    def as_dict(self) -> dict:
        return {"kind": "explain", "broker": self.broker, "reason": self.reason,
                "physical_offset": self.physical_offset, "detail": self.detail}


@dataclass
class QueryResult:
    mode: str
    hits: list = field(default_factory=list)
    explanations: list = field(default_factory=list)


def query_mode(args) -> str:
    """Which lookup the arguments ask for; a clear UsageError for combinations that make no sense."""
    if args.msg_id is not None:
        if args.key is not None or args.uniq_key is not None or args.tag is not None:
            raise UsageError("--msg-id stands alone (it names one record)")
        return "msg-id"
    if args.key is not None and args.uniq_key is not None:
        raise UsageError("give --key or --uniq-key, not both (--key also matches a UNIQ_KEY)")
    if args.key is not None:
        if args.topic is None:
            raise UsageError("--key needs --topic: index keys are topic#key")
        return "key"
    if args.uniq_key is not None:
        return "uniq-key"
    if args.tag is not None:
        if args.topic is None:
            raise UsageError("--tag needs --topic")
        return "tag"
    if args.from_time is not None or args.to_time is not None:
        return "time"
    raise UsageError("say what to find: --msg-id ID, --topic T --key K, --uniq-key U, --from T1 --to T2, "
                     "or --topic T --tag TAG")


def check_args(args) -> None:
    mode = query_mode(args)
    geometry_from_args(args)  # a broker.conf that cannot be used is bad usage
    try:
        if mode == "msg-id":
            parse_offset_msg_id(args.msg_id)
        if mode == "uniq-key":
            parse_uniq_key(args.uniq_key)
    except IdError as e:
        option, value = ("--msg-id", args.msg_id) if mode == "msg-id" else ("--uniq-key", args.uniq_key)
        hint = "; a key that is not a client msgId can be found with --topic T --key K" if mode == "uniq-key" else ""
        raise UsageError(f"{option} {value!r}: {e.message}{hint}") from None
    check_key("--key", args.key)
    if args.topic is not None and not args.topic.strip():
        raise UsageError("--topic is empty")
    if args.from_time is not None and args.to_time is not None and args.from_time > args.to_time:
        raise UsageError(f"--from {format_time(args.from_time)} is after --to {format_time(args.to_time)}")
    if args.limit is not None and args.limit < 1:
        raise UsageError("--limit must be at least 1")


def store_hosts(store: Store) -> set[str]:
    """The store hosts this store's records carry (its segments' first records)."""
    from store_format.codec import decode_record
    from store_format.commitlog import first_record

    hosts = set()
    for seg in store.segments:
        with first_record(seg) as buf:
            try:
                hosts.add(decode_record(buf, 0, file=seg.name).store_host)
            except StoreFormatError:
                continue
    return hosts


def known_topics(store: Store) -> list[str]:
    """Every topic a UNIQ_KEY may be indexed under: consume-queue folders, topics.json, and the topics a
    message passes through on its way (schedule, half)."""
    topics = {t for t, _ in store.queues} | set(topic_configs(store.config("topics.json")))
    topics |= {L.SCHEDULE_TOPIC, L.TRANS_HALF_TOPIC}
    return sorted(topics)


class Query:
    """One query over labelled stores; Spark is started only when a scan needs it."""

    def __init__(self, spark, args, stores: list[StoreRef]):
        self._spark = spark
        self.args = args
        self.stores = stores
        self.opened = {ref.name: ref.open() for ref in stores}
        self.unreadable = {ref.name: {} for ref in stores}  # index files skipped: path -> IndexFileError
        self._predictions = {}
        self.begin = args.from_time if args.from_time is not None else 0
        self.end = args.to_time if args.to_time is not None else _END_OF_TIME

    @property
    def spark(self):
        if self._spark is None:
            from runtime.session import build_session

            self._spark = build_session("rocketmq-forensics query")
        return self._spark

    def prediction(self, label: str):
        """The store's predicted recovery, the audit's (``--config``'s CRC settings): its cut is where the kept walk
        ends and what DROPPED_BY_RECOVERY says."""
        from store_format.brokerconf import recovery_settings_from_args
        from store_format.recovery import predict_cut

        if label not in self._predictions:
            self._predictions[label] = predict_cut(self.opened[label], recovery_settings_from_args(self.args))
        return self._predictions[label]

    # ---- lookups -------------------------------------------------------------------------------
    def run(self) -> QueryResult:
        mode = query_mode(self.args)
        result = QueryResult(mode)
        if mode == "msg-id":
            result.hits = self.by_msg_id(self.args.msg_id)
        elif mode in ("key", "uniq-key"):
            result.hits = self.by_key()
            if any(self.unreadable.values()):  # an index file that cannot be used: the commitlog answers instead
                result.hits = self.key_scan(result.hits)
        else:
            result.hits = self.scan()
        if self.args.explain:
            self.explain(result)
        result.hits.sort(key=lambda h: ([s.name for s in self.stores].index(h.broker), h.message.physical_offset))
        if self.args.limit is not None:
            result.hits = result.hits[:self.args.limit]
        return result

    def by_msg_id(self, msg_id: str) -> list[Hit]:
        ident = parse_offset_msg_id(msg_id)
        matching = [r for r in self.stores if ident.store_host in store_hosts(self.opened[r.name])]
        hits = []
        for ref in matching + [r for r in self.stores if r not in matching]:
            msg = self.opened[ref.name].find_msg_id(msg_id)
            if msg is not None:
                hits.append(Hit(ref.name, msg, "msg-id"))
        return hits

    def key_topics(self, store: Store) -> list[str]:
        return [self.args.topic] if self.args.topic is not None else known_topics(store)

    def by_key(self) -> list[Hit]:
        key = self.args.key if self.args.key is not None else self.args.uniq_key
        hits = []
        for ref in self.stores:
            store = self.opened[ref.name]
            seen = set()
            for topic in self.key_topics(store):
                for msg in store.query_key(topic, key, self.begin, self.end, unreadable=self.unreadable[ref.name]):
                    if self.args.uniq_key is not None and msg.uniq_key != key:
                        continue  # a KEYS entry equal to the id is not the message it names
                    if msg.physical_offset not in seen:
                        seen.add(msg.physical_offset)
                        hits.append(Hit(ref.name, msg, "index"))
        return hits

    def key_condition(self):
        """The Column a Spark scan for the key (--key: a KEYS entry or the UNIQ_KEY; --uniq-key: the UNIQ_KEY)
        keeps."""
        from pyspark.sql import functions as F

        self.spark  # a Column needs a running session
        key = self.args.key if self.args.key is not None else self.args.uniq_key
        cond = F.col("uniq_key") == key
        if self.args.key is not None:
            cond = cond | F.array_contains(F.col("keys"), key)
        return cond

    def key_scan(self, hits: list[Hit]) -> list[Hit]:
        """``hits`` plus what a salvage-walk scan of every store finds for the key (the index lookup's answer when
        an index file cannot be used), each message once."""
        seen = {(h.broker, h.message.physical_offset) for h in hits}
        found = [h for h in self.scan(walk="salvage", by_key=True) if (h.broker, h.message.physical_offset) not in seen]
        return hits + found

    def scan(self, *, walk: str = "kept", by_key: bool = False) -> list[Hit]:
        """Messages of the stores' commitlogs that meet the query's time range, topic and tag (and, ``by_key``, its
        key), in store then physical order: read here when the segments to read are small
        (jobs/local_scan.py: no Spark session to start), else by a Spark scan."""
        a = self.args
        small = sum(local_scan.bytes_to_read(self.opened[r.name], a.from_time, a.to_time) for r in self.stores)
        if small <= local_scan.LOCAL_SCAN_BYTES:
            return self.scan_here(walk, by_key)
        return self.scan_spark(walk, self.key_condition() if by_key else None)

    def scan_here(self, walk: str, by_key: bool) -> list[Hit]:
        a = self.args
        criteria = local_scan.Criteria(a.from_time, a.to_time, a.topic, a.tag, a.key if by_key else None,
                                       a.uniq_key if by_key and a.key is None else None)
        hits = []
        for ref in self.stores:
            cut = self.prediction(ref.name).cut
            for msg, beyond in local_scan.scan(self.opened[ref.name], criteria, cut, walk=walk):
                hits.append(Hit(ref.name, msg, "scan", beyond))
                if a.limit is not None and len(hits) >= a.limit:
                    return hits
        return hits

    def scan_spark(self, walk: str, match=None) -> list[Hit]:
        """Message rows of a Spark scan (time range, topic, tag pushed into the source; ``match`` an extra
        Column condition), in store then physical order."""
        from pyspark.sql import functions as F

        a = self.args
        df = read_messages(self.spark, self.stores, walk=walk, time_range=(a.from_time, a.to_time),
                           cuts={ref.name: self.prediction(ref.name).cut for ref in self.stores})
        if a.topic is not None:
            df = df.where(F.col("topic") == a.topic)
        if a.tag is not None:
            df = df.where(F.col("tags") == a.tag)
        if match is not None:
            df = df.where(match)
        df = df.orderBy("broker", "physical_offset")
        if a.limit is not None:
            df = df.limit(a.limit)
        hits = []
        for row in df.toLocalIterator():
            d = row.asDict()
            d["body"] = bytes(d["body"] or b"")
            hits.append(Hit(d["broker"], Message.from_dict(d), "scan", d.get("beyond_first_stop")))
        return hits

    # ---- explain -------------------------------------------------------------------------------
    def explain(self, result: QueryResult) -> None:
        out = result.explanations
        for hit in result.hits:
            out += self.visibility(hit)
        if result.mode == "msg-id":
            for ref in self.stores:
                if not any(h.broker == ref.name for h in result.hits):
                    out += self.why_no_record(ref, parse_offset_msg_id(self.args.msg_id))
            return
        if result.mode not in ("key", "uniq-key"):
            self.explain_scan(result)
            return
        key = self.args.key if self.args.key is not None else self.args.uniq_key
        for ref in self.stores:
            if not any(h.broker == ref.name for h in result.hits):
                out += self.why_not_indexed(ref, key)
        out += self.timer_and_pop_paths(result, key)
        if result.hits:
            return
        # found by no index: scan every store, past damage too
        found = self.scan(walk="salvage", by_key=True)
        result.hits += found
        windowed = (self.begin, self.end) != (0, _END_OF_TIME)
        for ref in self.stores:
            mine = [h for h in found if h.broker == ref.name]
            referred = any(e.broker == ref.name and e.reason in EVIDENCE for e in out)
            if not mine and not referred:
                where = f"topic {self.args.topic}" if self.args.topic else "any topic"
                detail = (f"no record in {where} carries {key} in the commitlog, not even past damage (salvage walk), "
                          "and no index entry for it points at a damaged or destroyed record")
                if windowed:  # the scan keeps the query's time window: outside it, nothing was looked at
                    out.append(Explanation(ref.name, "NOT_IN_TIME_WINDOW", f"{detail}, stored within "
                                           f"[{format_time(self.begin)}, {format_time(self.end)}]"))
                else:
                    out.append(Explanation(ref.name, "NEVER_WRITTEN", detail))
            for hit in mine:
                out += self.why_scan_only(ref, hit)

    def explain_scan(self, result: QueryResult) -> None:
        """A tag or time-window query the kept walk found nothing for: the salvage walk's messages (past damage and
        past the cut, each with what the broker does with it), and what the store still says of the ones no walk
        gives back (consume-queue units with the tag's hash at damaged or destroyed records; damage inside the
        window); NEVER_WRITTEN or NOTHING_IN_WINDOW only when there is neither."""
        if result.hits:
            return
        out = result.explanations
        found = self.scan(walk="salvage")
        result.hits += found
        for hit in found:
            out += self.visibility(hit)
        for ref in self.stores:
            evidence = self.tag_evidence(ref) if result.mode == "tag" else self.window_evidence(ref)
            out += evidence
            if evidence or any(h.broker == ref.name for h in found):
                continue
            what = (f"message of topic {self.args.topic} with tag {self.args.tag}" if result.mode == "tag"
                    else "message" + (f" of topic {self.args.topic}" if self.args.topic else ""))
            window = (f" stored within [{format_time(self.begin)}, {format_time(self.end)}]"
                      if (self.begin, self.end) != (0, _END_OF_TIME) else "")
            reason = "NEVER_WRITTEN" if result.mode == "tag" and not window else "NOTHING_IN_WINDOW"
            out.append(Explanation(ref.name, reason, f"no {what}{window} in the commitlog, not even past damage "
                                   "(salvage walk), and no consume-queue unit or damaged record says one was there"))

    def tag_evidence(self, ref: StoreRef) -> list[Explanation]:
        """The consume-queue units of the topic with the tag's hash whose records are damaged or destroyed."""
        from jobs.query_evidence import units_with_tag

        store = self.opened[ref.name]
        out = []
        for unit in units_with_tag(store, self.args.topic, self.args.tag):
            e = self.damage_note(ref, unit.physical_offset, [unit], f"its consume-queue unit has the hash of tag "
                                                                    f"{self.args.tag}")
            if e is not None:
                out.append(e)
        return out

    def window_evidence(self, ref: StoreRef) -> list[Explanation]:
        """Damage whose neighbours were stored around the window: unframeable bytes or damaged records between a
        record stored before its end and one stored after its start, where messages of the window may have been."""
        from jobs.query_evidence import remains_at, units_pointing_into

        store = self.opened[ref.name]
        cut = self.prediction(ref.name).cut
        out = []
        for seg in local_scan.segments_to_read(store, self.args.from_time, self.args.to_time):
            for span in local_scan.damage_between_times(store, seg, self.begin, self.end):
                units = units_pointing_into(store, span.physical_offset, span.physical_offset + span.length,
                                            [self.args.topic] if self.args.topic else None)
                pointed = sorted({u for found in units.values() for u in found}, key=lambda u: u.physical_offset)
                remains = remains_at(store, span.physical_offset)
                detail = (f"{span.length} damaged bytes at physical offset {span.physical_offset} (segment "
                          f"{seg.name} byte {span.file_position}: {span.reason}) lie between a record stored at "
                          f"{format_time(span.before_ms)} and one stored at {format_time(span.after_ms)}: messages of "
                          "the window may have been there")
                if remains is not None:
                    detail += f"; {remains.what}"
                if pointed:
                    detail += "; consume-queue units still point into them: " + ", ".join(u.name for u in pointed[:5])
                if span.physical_offset >= cut.physical_offset:
                    detail += f"; the broker's recovery drops them: {self.cut_words(ref.name)}"
                out.append(Explanation(ref.name, "DESTROYED", detail, span.physical_offset))
        return out

    def damage_note(self, ref: StoreRef, offset: int, units: list, referred: str, key: str | None = None
                    ) -> Explanation | None:
        """DAMAGED or DESTROYED for a record something still refers to (``referred``: what), when no intact record
        starts at ``offset``; None when one does."""
        from jobs.query_evidence import remains_at

        remains = remains_at(self.opened[ref.name], offset)
        if remains is None or remains.state in ("inside", "outside"):
            return None
        reason = "DAMAGED" if remains.state == "damaged" else "DESTROYED"
        names = ", ".join(u.name for u in units)
        what = f"{names} ({remains.where})" if names else remains.where
        if remains.header is not None and not names and remains.header.get("queue_offset") is not None:
            what = f"queue offset {remains.header['queue_offset']} of queue {remains.header.get('queue_id')} " \
                   f"({remains.where})"
        detail = f"{what}: {referred}, but {remains.what}"
        if key is not None and remains.state == "damaged":
            detail += f"; its properties {'still name' if remains.carries(key) else 'no longer show'} {key}"
        elif key is not None:
            detail += f"; an index entry holds only the key's hash, so that the record carried {key} cannot be " \
                      "confirmed from its bytes"
        cut = self.prediction(ref.name).cut
        if offset >= cut.physical_offset:
            detail += f"; the broker's recovery drops it: {self.cut_words(ref.name)}"
        return Explanation(ref.name, reason, detail, offset)

    def cut_words(self, label: str) -> str:
        pred = self.prediction(label)
        return f"its {pred.mode} recovery ends the log at physical offset {pred.max_physical_offset}, at the " \
               f"{pred.stop_kind} in segment {pred.stop_segment}"

    def timer_and_pop_paths(self, result: QueryResult, key: str) -> list[Explanation]:
        """5.x stores: each found timer message's path and POP-consumed message's state (jobs/query_paths.py)."""
        from jobs import query_paths

        out = []
        for ref in self.stores:
            hits = [h.message for h in result.hits if h.broker == ref.name]
            found = query_paths.explain(self.opened[ref.name], hits, key=key, topic=self.args.topic,
                                        recovered_end=self.prediction(ref.name).max_physical_offset)
            out += [Explanation(ref.name, reason, detail, offset) for reason, detail, offset in found]
        return out

    def visibility(self, hit: Hit) -> list[Explanation]:
        """Notes on a found message: will the broker's recovery keep it?"""
        pred = self.prediction(hit.broker)
        off = hit.message.physical_offset
        notes = []
        if not hit.message.body_crc_ok:  # a lookup reads the record its index entry names, whatever its CRC
            notes.append(Explanation(hit.broker, "DAMAGED", f"{hit.message.topic}/{hit.message.queue_id} queue offset "
                                     f"{hit.message.queue_offset}: its body fails the CRC check (BAD_CRC: BODYCRC "
                                     f"{hit.message.body_crc}): the body printed is not the one sent", off))
        if hit.beyond_first_stop:
            keeps = "; the broker keeps it (before its cut)" if off < pred.max_physical_offset else ""
            notes.append(Explanation(hit.broker, "BEHIND_DAMAGE", f"found by the salvage walk behind damage in segment "
                                     f"{hit.message.segment} (after its walk's first stop){keeps}", off))
        if off >= pred.max_physical_offset:
            notes.append(Explanation(hit.broker, "DROPPED_BY_RECOVERY", f"{self.cut_words(hit.broker)}; this record "
                                     "lies at or past that end and will be dropped", off))
        if not notes:
            notes.append(Explanation(hit.broker, "FOUND", f"{hit.message.topic}/{hit.message.queue_id} queue offset "
                                     f"{hit.message.queue_offset}, found by {hit.found_by}", off))
        return notes

    def why_not_indexed(self, ref: StoreRef, key: str) -> list[Explanation]:
        store = self.opened[ref.name]
        label = ref.name
        paths = store.index_paths()
        if not paths:
            return [Explanation(label, "NO_INDEX", "the store has no index files (messageIndexEnable=false, or "
                                "index/ is missing)")]
        from jobs.query_evidence import units_pointing_at

        topics = self.key_topics(store)
        windowed = (self.begin, self.end) != (0, _END_OF_TIME)
        out, collisions, stale, outside = [], [], [], 0
        skipped = self.unreadable[label]
        for topic in topics:
            everywhere = store.index_candidates(topic, key, unreadable=skipped)
            candidates = store.index_candidates(topic, key, self.begin, self.end, unreadable=skipped) if windowed \
                else everywhere
            outside += len(set(everywhere) - set(candidates))
            for off in sorted(set(candidates)):
                try:
                    msg = store.read_message(off)
                except StoreFormatError as e:
                    units = units_pointing_at(store, [off], [topic]).get(off, [])
                    referred = f"the index still points at it for {topic}#{key}" + (
                        " and so does the consume queue" if units else "")
                    note = self.damage_note(ref, off, units, referred, key)
                    stale.append(note or Explanation(label, "STALE_INDEX_ENTRY", f"{topic}#{key} points at {off}, "
                                                     f"where no record decodes ({e.kind.value}: {e.message})", off))
                    continue
                if msg.physical_offset != off:
                    stale.append(Explanation(label, "STALE_INDEX_ENTRY", f"{topic}#{key} points at {off}; the bytes "
                                             f"there claim physical offset {msg.physical_offset}", off))
                    continue
                collisions.append(Explanation(label, "HASH_COLLISION", f"candidate for {topic}#{key} (hash "
                                              f"{index_key_hash(index_key(topic, key))}) is a record of topic "
                                              f"{msg.topic} with KEYS {msg.keys} and UNIQ_KEY {msg.uniq_key}", off))
        out += stale + collisions
        out += [Explanation(label, "INDEX_FILE_UNREADABLE", f"index file {Path(path).name} was not searched: "
                            f"{e.kind.value}: {e.message}") for path, e in sorted(skipped.items())]
        if outside:
            out.append(Explanation(label, "OUTSIDE_INDEX_WINDOW", f"{outside} index candidate(s) lie outside the "
                                   f"time window [{format_time(self.begin)}, {format_time(self.end)}]"))
        if collisions and not stale and not outside:
            out.append(Explanation(label, "HASH_COLLISION_ONLY", f"{len(collisions)} candidate(s) share the hash "
                                   "but carry other keys: the key was never indexed here"))
        if not out:
            where = f"{topics[0]}#{key}" if len(topics) == 1 else f"<topic>#{key} for {len(topics)} topics"
            out.append(Explanation(label, "NO_INDEX_ENTRY", f"no entry of the {len(paths)} index file(s) has the "
                                   f"hash of {where}"))
        return out

    def why_scan_only(self, ref: StoreRef, hit: Hit) -> list[Explanation]:
        """A message the index did not give but the scan found: why the index lacks it."""
        store = self.opened[ref.name]
        msg = hit.message
        off = msg.physical_offset
        out = [e for e in self.visibility(hit) if e.reason != "FOUND"]
        if msg.sys_flag & L.TRANSACTION_MASK == L.TRANSACTION_ROLLBACK_TYPE:
            out.append(Explanation(ref.name, "NO_INDEX_ENTRY", "ROLLBACK records are never indexed "
                                   "(IndexService.buildIndex)", off))
        ends = []
        for path in store.index_paths():
            try:
                with store.open_index(path) as f:
                    ends.append((f.header.end_phy_offset, f.header.end_timestamp, f.header.begin_timestamp))
            except StoreFormatError:
                continue
        if not ends:
            out.append(Explanation(ref.name, "NO_INDEX", "the store has no readable index file", off))
        elif off > max(e[0] for e in ends):
            out.append(Explanation(ref.name, "NOT_INDEXED", f"stored at {format_time(msg.store_timestamp)}, after "
                                   f"the index's last entry (physical offset {max(e[0] for e in ends)}, "
                                   f"{format_time(max(e[1] for e in ends))}): dispatch never reached it", off))
        elif not out:
            out.append(Explanation(ref.name, "NO_INDEX_ENTRY", "in the commitlog, within the index's range, but no "
                                   "index entry points at it", off))
        return out

    def why_no_record(self, ref: StoreRef, ident) -> list[Explanation]:
        """Why offsetMsgId ``ident`` names no record of this store: another broker's id, an offset outside the
        commitlog, inside another record or unframeable bytes, or past the written data."""
        store = self.opened[ref.name]
        label, off = ref.name, ident.physical_offset
        out = []
        hosts = store_hosts(store)
        if ident.store_host not in hosts:
            out.append(Explanation(label, "OTHER_STORE_HOST", f"the id names store host {ident.store_host}; this "
                                   f"store's records carry {sorted(hosts) or 'none'}", off))
        segs = store.segments
        seg = next((s for s in segs if s.base_offset <= off < s.base_offset + (store.segment_size or s.length)), None)
        if seg is None:
            span = f"[{segs[0].base_offset}, {segs[-1].base_offset + segs[-1].length})" if segs else "nothing"
            out.append(Explanation(label, "OUT_OF_RANGE", f"offset {off} lies in no commitlog segment (they cover "
                                   f"{span}): never written here", off))
            return out
        try:
            msg = store.read_message(off)
        except StoreFormatError:
            msg = None
        if msg is not None and msg.physical_offset == off:
            out.append(Explanation(label, "OTHER_STORE_HOST", f"the record at {off} was stored by {msg.store_host}; "
                                   f"its id is {msg.msg_id}", off))
            return out
        from jobs.query_evidence import units_pointing_at

        units = units_pointing_at(store, [off]).get(off, [])
        note = self.damage_note(ref, off, units, "the consume queue still points at it") if units else None
        out.append(note or self.locate(ref, seg.name, off))
        return out

    def locate(self, ref: StoreRef, segment: str, off: int) -> Explanation:
        """What the salvage walk has at ``off``: its last item at or before it (walked here for a segment of
        a small store's size, else a Spark scan of the walk items up to it)."""
        store = self.opened[ref.name]
        seg = next((s for s in store.segments if s.name == segment), None)
        if seg is not None and seg.length <= local_scan.LOCAL_SCAN_BYTES:
            r = local_scan.walk_item_at(store, segment, off)
        else:
            r = self.locate_spark(ref, segment, off)
        if r is None:
            return Explanation(ref.name, "NEVER_WRITTEN", f"no walk item at or before {off}", off)
        start = r["physical_offset"]
        if r["kind"] == "stop" and r["reason"] == "END_OF_DATA":
            return Explanation(ref.name, "NEVER_WRITTEN", f"offset {off} is past the end of written data in "
                               f"segment {segment} (zeros from {start})", off)
        span = r["length"] if r["kind"] == "corrupt" else r["store_size"]
        if r["kind"] == "corrupt" and off < start + span:
            return Explanation(ref.name, "NOT_A_RECORD_START", f"offset {off} lies in {span} unframeable bytes "
                               f"from {start} ({r['reason']})", off)
        if r["kind"] == "stop":
            return Explanation(ref.name, "NOT_A_RECORD_START", f"the walk stops at {start} ({r['reason']}: "
                               f"{r['detail']}); no record is framed at {off}", off)
        if span is not None and start < off < start + span:
            return Explanation(ref.name, "NOT_A_RECORD_START", f"offset {off} is inside the {r['kind']} at {start} "
                               f"({span} bytes)", off)
        return Explanation(ref.name, "NEVER_WRITTEN", f"no record is framed at {off}", off)

    def locate_spark(self, ref: StoreRef, segment: str, off: int) -> dict | None:
        from pyspark.sql import functions as F

        from datasources import read_commitlog

        rows = (read_commitlog(self.spark, fs.uri_of(ref.root / "commitlog" / segment), broker=ref.name,
                               walk="salvage", materialize="positions", pushFilters="true")
                .where((F.col("segment") == segment) & (F.col("physical_offset") <= off))
                .orderBy(F.col("physical_offset").desc()).limit(1).collect())
        return rows[0].asDict() if rows else None


# --------------------------------------------------------------------------------------------------
# Output

TABLE_COLUMNS = (("broker", 10), ("physical_offset", 12), ("store_time", 24), ("topic", 20), ("queue_id", 5),
                 ("queue_offset", 8), ("msg_id", 32), ("uniq_key", 32), ("keys", 16), ("tags", 10), ("body", 24))


def message_line(hit: Hit) -> dict:
    """A message's JSON line: its fields (times in epoch ms, as stored), and its store and born times as a person
    reads them (ISO-8601 UTC) beside."""
    m = hit.message
    return {"kind": "message", "broker": hit.broker, **m.to_dict(), "store_time": format_iso_z(m.store_timestamp),
            "born_time": format_iso_z(m.born_timestamp)}


_BODY_CHARS = 24


def body_preview(body: bytes, compression: str = "NONE") -> str:
    """A body as a table cell: its text when it is UTF-8 that prints, else what it is and its first bytes in hex
    (a binary body decoded as text is mojibake)."""
    if compression != "NONE":
        return f"<{compression}-compressed, {len(body)} bytes>"
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError:
        text = None
    if text is not None and all(c.isprintable() or c in "\t\n\r" for c in text):
        return text[:_BODY_CHARS]
    return f"<binary, {len(body)} bytes: {body[:8].hex()}{'...' if len(body) > 8 else ''}>"


def _table_row(hit: Hit) -> list[str]:
    m = hit.message
    body = body_preview(m.body, m.compression)
    values = {"broker": hit.broker, "physical_offset": m.physical_offset, "store_time": format_time(m.store_timestamp),
              "topic": m.topic, "queue_id": m.queue_id, "queue_offset": m.queue_offset, "msg_id": m.msg_id,
              "uniq_key": m.uniq_key or "", "keys": " ".join(m.keys), "tags": m.tags or "", "body": body}
    return [_printable(str(values[name])) for name, _ in TABLE_COLUMNS]


def _printable(text: str) -> str:
    """A cell on one line: line breaks and other control characters of a body or key shown as ``·``."""
    return "".join(c if c.isprintable() else "\u00b7" for c in text)


def write_result(result: QueryResult, fmt: str, out) -> None:
    if fmt == "jsonl":
        for hit in result.hits:
            out.write(json.dumps(message_line(hit), ensure_ascii=False) + "\n")
        for e in result.explanations:
            out.write(json.dumps(e.as_dict(), ensure_ascii=False) + "\n")
        return
    rows = [[name for name, _ in TABLE_COLUMNS]] + [_table_row(h) for h in result.hits]
    widths = [max(w, *(len(r[i]) for r in rows)) for i, (_, w) in enumerate(TABLE_COLUMNS)]
    for r in rows:
        out.write("  ".join(v.ljust(w) for v, w in zip(r, widths)).rstrip() + "\n")
    for e in result.explanations:
        where = f" @{e.physical_offset}" if e.physical_offset is not None else ""
        out.write(f"# {e.broker}{where}: {e.reason}: {e.detail}\n")


# --------------------------------------------------------------------------------------------------
# The job


def run(spark, args, out=None, err=None) -> cli.JobResult:
    """Run the query (``spark`` may be None: it is started only if a scan needs it) and print the result on
    ``out`` (the messages are the job's output: the JobResult's summary is empty)."""
    out, err = out or sys.stdout, err or sys.stderr
    check_args(args)
    stores = resolve_stores(args.store, files=True, geometry=geometry_from_args(args))
    lookup = Query(spark, args, stores)
    result = lookup.run()
    write_result(result, args.format, out)
    for label, errors in lookup.unreadable.items():
        for e in errors.values():
            print(f"notice: {label}: index file {e.file} cannot be used ({e.kind.value}: {e.message}); the "
                  "commitlog was scanned for the key instead", file=err)
    unreadable = sum(len(e) for e in lookup.unreadable.values())
    print(f"query ({result.mode}): {len(result.hits)} message(s) found in {len(stores)} store(s)"
          + (f"; {unreadable} index file(s) could not be used: answered by a scan" if unreadable else ""),
          file=err)
    return cli.JobResult("", EXIT_OK if result.hits else EXIT_NOTHING)  # an unusable index: scanned instead


def needs_spark(args) -> bool:
    """Never from the start: point lookups read a few records, and a scan starts Spark only when the store is
    too large to scan here (Query.scan)."""
    return False


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog=f"{cli.PROG} query", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    cli.add_store_arguments(p, what="a broker store root, one of its part folders or segment files, or a folder "
                                    "of brokers' store roots")
    p.add_argument("--msg-id", metavar="ID", help="offsetMsgId (32 or 56 hex characters)")
    p.add_argument("--topic", metavar="T", help="the topic: needed with --key and --tag; narrows --uniq-key and "
                                                "--from/--to")
    p.add_argument("--key", metavar="K", help="a KEYS entry (or a UNIQ_KEY) of topic T")
    p.add_argument("--uniq-key", metavar="U", help="UNIQ_KEY, the client's msgId")
    p.add_argument("--tag", metavar="TAG", help="TAGS value (with --topic)")
    p.add_argument("--from", dest="from_time", type=parse_time, metavar="T1",
                   help="store time >= T1 (ISO-8601, e.g. 2024-05-01T10:00:00Z, UTC unless it says; or ms since the "
                        "epoch)")
    p.add_argument("--to", dest="to_time", type=parse_time, metavar="T2", help="store time <= T2 (as --from)")
    p.add_argument("--format", choices=("jsonl", "table"), default="jsonl",
                   help="jsonl: one JSON object per message (default, every field); table: one line per message, "
                        "for reading")
    p.add_argument("--explain", action="store_true", help="say why a message is not found; fall back to a scan")
    p.add_argument("--limit", type=cli.count_argument, metavar="N", help="print at most N messages")
    add_geometry_arguments(p, recovery=True)
    return p


def prepare(args) -> None:
    """The arguments and the stores checked before Spark starts (a scan starts it before ``run``)."""
    check_args(args)
    resolve_stores(args.store, files=True, geometry=geometry_from_args(args))


def main(argv=None, prog: str | None = None) -> int:
    return cli.main("query", build_parser, run, argv, prepare=prepare, needs_spark=needs_spark, prog=prog)


if __name__ == "__main__":
    sys.exit(main())
