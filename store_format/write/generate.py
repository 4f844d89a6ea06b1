"""Synthetic broker traffic: stores of any size for tests and benchmarks (``python -m store_format generate``).

One generator, :func:`generate_store`; the traffic profile says which broker it models:

  :class:`TrafficConfig`   a busy 4.9.x broker, written through the bulk path
  :class:`Traffic5Config`  a RocketMQ 5.3.3 broker (``generate --rocketmq 5``), written through
                           :class:`~store_format.write.broker.Broker` (the scalar put path, since every 5.x record
                           goes through a hook: CRC, LMQ, BatchCQ, timer), on the given WriterConfig with the 5.x
                           switches turned on (:func:`config_5x`)

The 4.9.x traffic, on a simulated clock (``rate`` stores per second):
plain sends with tags, one or two keys and UNIQ_KEYs from a handful of producer clients (some on IPv6),
classic batches, delayed sends (SCHEDULE_TOPIC_XXXX copies, delivered to their real topic when due),
transactions (half, then commit + op, rollback op, or never resolved), consumers sending messages back
(%RETRY%group through the schedule topic, %DLQ%group after the group's max reconsume times), bodies over
4 KiB compressed by their producer (zlib, lz4, zstd) and committed consumer offsets at the end.

Every properties string comes from :mod:`store_format.write.broker`'s flow functions: the frequent shapes
(plain, delayed, batch item, half) are rendered once with placeholder values into a template (the key
order of a Java HashMap depends on the key names only), the rare ones are built record by record.
Follow-ups that need a physical offset (a commit's prepared offset, a send-back's ORIGIN_MESSAGE_ID)
only refer to records of earlier chunks, whose offsets the writer has returned.

The 5.3.3 traffic: on a simulated clock (``rate`` stores per second), seeded, the traffic mixes:

  plain sends      business topics, tags and keys, several producers (one on IPv6)
  timer messages   TIMER_DELAY_SEC / TIMER_DELAY_MS / TIMER_DELIVER_MS: most due within seconds (fired while the
                   traffic runs), some hours ahead (pending at the end), a few beyond the roll window (roll units)
                   and a few recalled (delete units; the recalled message is dropped when its slot fires)
  delay levels     SCHEDULE_TOPIC_XXXX, delivered when due
  LMQ              INNER_MULTI_DISPATCH to one to three %LMQ% queues; a few lists end with a non-LMQ name, which
                   RocketMQ mishandles (no LMQ unit for that record; later offsets shift); never the stalling
                   form (a non-LMQ name before the last), which would stop the store's dispatch
  POP              pops with checkpoints (ck) and acks / batch acks through the timer, revived when due: unacked
                   messages re-put to %RETRY%<group>_<topic>
  BatchCQ          inner batches to a queue.type=BatchCQ topic (batchconsumequeue/)
  __CRC32#         every record, when enabledAppendPropCRC is on (the default here)

The last store times run ahead of the wheel only by what the traffic leaves pending.
"""
from __future__ import annotations

import heapq
import ipaddress
import re
import sys
import time
from dataclasses import dataclass, field

import numpy as np

from .. import layout as L
from .broker import (batch_item_string, batch_properties, client_message, half_properties, op_properties,
                     received_properties, reread_properties, schedule_properties, send_back_properties, _string)
from .broker import BatchItem, Broker, ManualClock, Producer
from .bulk import RecordBatch, append_many
from ..compression import compress
from ..ids import create_offset_msg_id, create_uniq_keys, parse_host
from ..properties import property_value
from .writer import StoreWriter, WriterConfig

_SENTINEL = re.compile("\x00(\\d+)\x00")


def _template(build, nargs: int):
    """Render ``build(*placeholders)`` once; returns a %-format and the argument order."""
    text = build(*(f"\x00{i}\x00" for i in range(nargs)))
    parts = _SENTINEL.split(text)
    fmt = "".join(p.replace("%", "%%") if k % 2 == 0 else "%s" for k, p in enumerate(parts))
    order = tuple(int(p) for p in parts[1::2])
    return fmt, order


@dataclass
class _Traffic:
    """What every traffic profile says: how many records, over which topics and queues, from which seed, on which
    simulated clock."""

    messages: int
    topics: int = 8
    queues: int = 4
    seed: int = 0
    start_ms: int = 1_700_000_000_000
    rate: float = 2000.0  # stored records per simulated second


@dataclass
class TrafficConfig(_Traffic):
    """The 4.9.x profile."""

    producers: int = 8
    ipv6_producers: int = 1
    p_delay: float = 0.03
    p_batch: float = 0.02  # share of sends that are batches (of 2..8)
    p_half: float = 0.02
    p_send_back: float = 0.02
    p_two_keys: float = 0.2
    p_large: float = 0.004  # bodies over compressMsgBodyOverHowmuch (compressed by the producer)
    body_log_mean: float = 5.5  # body sizes: lognormal(body_log_mean, 0.6), ~300 B on average
    max_reconsume_times: int = 3  # consumer.setMaxReconsumeTimes: DLQ after this many retries
    p_give_up: float = 0.15  # share of send-backs with delay level -1 (DLQ at once)
    delay_levels: tuple = (1, 2, 3, 4, 5)
    chunk: int = 8192  # records per bulk append (~4 simulated seconds): follow-ups run at most this late
    # open with one send to every queue of every topic and each rare flow once (a delay per level, a committed
    # transaction, a retry and a dead letter per group), so that a tiny store has every topic and queue a large
    # one has; the retries land only if the store spans ~20 simulated seconds (a low rate for a tiny store)
    cover: bool = False

    def broker_config(self, base: WriterConfig | None) -> WriterConfig:
        return base or WriterConfig()

    def traffic(self, writer_config: WriterConfig) -> "_BulkTraffic":
        return _BulkTraffic(self, writer_config)


@dataclass
class _Producer:
    host_id: int
    client_ip: bytes
    pid: int
    loader_hash: int
    counter: int = 0
    compress: str = "ZLIB"
    group: str = "pg"


@dataclass
class _Pending:
    """A record whose follow-up comes later (scheduled copy, half, consumed message)."""

    due: int
    seq: int
    kind: str = field(compare=False)
    info: dict = field(compare=False)

    def __lt__(self, other):
        return (self.due, self.seq) < (other.due, other.seq)


class TrafficGenerator:
    def __init__(self, cfg: TrafficConfig, writer_config: WriterConfig):
        self.cfg = cfg
        self.wcfg = writer_config
        self.rng = np.random.default_rng(cfg.seed)
        self.topics = [f"Topic{i:03d}" for i in range(cfg.topics)]
        self.groups = [f"cg-{t}" for t in self.topics]
        self.tags = ["TagA", "TagB", "TagC", "created", "paid", "shipped", "订单"]
        self.topic_table = list(self.topics) + [L.SCHEDULE_TOPIC, L.TRANS_HALF_TOPIC, L.TRANS_OP_HALF_TOPIC] + \
            [f"{L.RETRY_GROUP_TOPIC_PREFIX}{g}" for g in self.groups] + \
            [f"{L.DLQ_GROUP_TOPIC_PREFIX}{g}" for g in self.groups]
        self.tid = {t: i for i, t in enumerate(self.topic_table)}
        self.hosts = [writer_config.storeHost]
        self.producers = []
        for p in range(cfg.producers):
            v6 = p < cfg.ipv6_producers
            ip = f"2001:db8::{p + 1:x}" if v6 else f"10.0.{p // 250}.{p % 250 + 1}"
            self.hosts.append(f"[{ip}]:{50000 + p}" if v6 else f"{ip}:{50000 + p}")
            self.producers.append(_Producer(len(self.hosts) - 1, ipaddress.ip_address(ip).packed, 1000 + p,
                                            int(self.rng.integers(1, 2**31)), compress=("ZLIB", "LZ4", "ZSTD")[p % 3],
                                            group=f"pg-{p}"))
        self.host_v6 = [len(parse_host(h)[0]) == 16 for h in self.hosts]
        self.cluster = writer_config.brokerClusterName
        self.max_level = writer_config.max_delay_level
        self.delay_ms = writer_config.delay_levels
        # templates for the frequent shapes, from the broker's own flow functions
        cluster, max_level = self.cluster, self.max_level
        self.t_plain = _template(lambda tags, keys, uniq: received_properties(
            client_message(tags, keys, None, uniq), cluster)[1], 3)
        self.t_delay = {level: _template(lambda tags, keys, uniq, topic, qid, level=level: schedule_properties(
            received_properties(client_message(tags, keys, None, uniq, delay_level=level), cluster)[0],
            topic, qid, max_level)[2], 5) for level in cfg.delay_levels}
        self.t_item = _template(lambda tags, keys, uniq: batch_item_string(
            _string(client_message(tags, keys, None, uniq)), batch_properties(cluster)), 3)
        self.t_half = _template(lambda tags, keys, uniq, group, topic, qid: half_properties(
            received_properties(client_message(tags, keys, None, uniq, producer_group=group), cluster)[0],
            topic, qid), 6)
        self.op_string = _string(op_properties())
        self.rr = {}  # (producer, topic) -> next queue
        self.now = cfg.start_ms
        self.step = 1000.0 / cfg.rate
        self.pending: list[_Pending] = []
        self.seq = 0
        self.cover = self._cover_plan() if cfg.cover else []
        self.consumable = []  # (topic id, info) of stored plain records, candidates for send-back
        self.written = 0
        words = ("order user item price amount status region warehouse coupon shipping note payment ").split()
        text = " ".join(self.rng.choice(words, 200_000)).encode()
        self.pool = text
        self.key_serial = 0

    def _cover_plan(self) -> list[tuple]:
        """The opening sends of ``cfg.cover``: (kind, topic index, delay level, forced follow-up), all from
        producer 0, whose round-robin then puts a topic's first ``queues`` sends on queues 0, 1, ..."""
        cfg = self.cfg
        plan = [("plain", t, None, None) for t in range(cfg.topics) for _ in range(cfg.queues)]
        plan += [("delay", 0, level, None) for level in cfg.delay_levels]
        plan += [("half", 0, None, "commit")]
        return plan + [("plain", t, None, fate) for t in range(cfg.topics) for fate in ("retry", "dlq")]

    # ---- pieces --------------------------------------------------------------------------------
    def _fill(self, template, *vals) -> str:
        fmt, order = template
        return fmt % tuple(vals[i] for i in order)

    def _body(self, n: int, serial: int) -> bytes:
        o = int(self.rng.integers(0, len(self.pool) - n))
        head = b'{"orderId":%d,"amount":%d,"memo":"' % (serial, serial % 9973)
        return head + self.pool[o:o + max(n - len(head) - 2, 0)] + b'"}'

    def _queue(self, p: int, topic: str) -> int:
        k = (p, topic)
        q = self.rr.get(k, 0)
        self.rr[k] = q + 1
        return q % self.cfg.queues

    def _keys(self, two: bool) -> str:
        self.key_serial += 1
        k = f"ORD{self.key_serial:010d}"
        return f"{k} U{self.key_serial % 100003:06d}" if two else k

    # ---- one chunk -----------------------------------------------------------------------------
    def _push(self, due: int, kind: str, info: dict):
        self.seq += 1
        heapq.heappush(self.pending, _Pending(due, self.seq, kind, info))

    def chunk(self, count: int) -> tuple[RecordBatch, list]:
        """The next ``count`` stored records (fresh sends and due follow-ups, in store-time order)."""
        cfg, rng = self.cfg, self.rng
        # one dict per record: t (topic id), q, sf, born, store, host, body, props, flag, rc, prep, batch,
        # tags, uniq, keys, note (what follows it)
        rows = []
        store_times = self.now + np.arange(count) * self.step
        end = int(store_times[-1]) if count else self.now
        # follow-ups due in this window (only those whose sources were written in earlier chunks)
        follow = []
        while self.pending and self.pending[0].due <= end and len(follow) < count // 4:
            follow.append(heapq.heappop(self.pending))
        n_fresh = count - sum(self._follow_size(f) for f in follow)
        fresh_ts = store_times[:max(n_fresh, 0)]
        kinds = rng.random(len(fresh_ts))
        prod = rng.integers(0, len(self.producers), len(fresh_ts))
        topic_pick = np.minimum(rng.zipf(1.6, len(fresh_ts)) - 1, cfg.topics - 1)
        sizes = np.clip(rng.lognormal(cfg.body_log_mean, 0.6, len(fresh_ts)).astype(np.int64), 24, 3000)
        large = rng.random(len(fresh_ts)) < cfg.p_large
        two = rng.random(len(fresh_ts)) < cfg.p_two_keys
        tag_pick = rng.integers(0, len(self.tags), len(fresh_ts))
        latency = rng.integers(1, 4, len(fresh_ts))
        forced = dict(enumerate(self.cover[:len(fresh_ts)]))
        del self.cover[:len(forced)]
        for i, (_, t, _, _) in forced.items():
            prod[i], topic_pick[i], large[i] = 0, t, False
        # UNIQ_KEYs: per producer, consecutive counters, born-time based (MessageClientIDSetter)
        born = fresh_ts.astype(np.int64) - latency
        uniq = [None] * len(fresh_ts)
        for p, pr in enumerate(self.producers):
            idx = np.flatnonzero(prod == p)
            if len(idx):
                ids = create_uniq_keys(pr.client_ip, pr.pid, pr.loader_hash, born[idx],
                                       pr.counter + np.arange(len(idx)))
                pr.counter = (pr.counter + len(idx)) & 0xFFFF
                for i, u in zip(idx.tolist(), ids):
                    uniq[i] = u
        t_batch = cfg.p_batch
        t_delay = t_batch + cfg.p_delay
        t_half = t_delay + cfg.p_half
        i = 0
        nf = len(fresh_ts)
        while i < nf:
            k = kinds[i]
            cover = forced.get(i)
            kind = cover[0] if cover else ("batch" if k < t_batch and i + 2 <= nf else "delay" if k < t_delay
                                          else "half" if k < t_half else "plain")
            p = int(prod[i])
            pr = self.producers[p]
            topic = self.topics[int(topic_pick[i])]
            tags = self.tags[int(tag_pick[i])]
            ts = int(fresh_ts[i])
            sf = L.BORNHOST_V6_FLAG if self.host_v6[pr.host_id] else 0
            if kind == "batch":
                m = min(int(rng.integers(2, 9)), nf - i)
                q = self._queue(p, topic)
                bid = self.seq = self.seq + 1
                for j in range(m):
                    keys = self._keys(False)
                    rows.append(dict(t=self.tid[topic], q=q, sf=sf, born=int(born[i]), store=ts, host=pr.host_id,
                                     body=self._body(int(sizes[i + j]), self.key_serial),
                                     props=self._fill(self.t_item, tags, keys, uniq[i + j]), batch=bid, tags=tags,
                                     uniq=uniq[i + j], keys=keys, note="plain"))
                i += m
                continue
            keys = self._keys(bool(two[i]))
            body = self._body(int(sizes[i]), self.key_serial) if not large[i] else \
                self._body(int(rng.integers(4096, 16384)), self.key_serial)
            if len(body) >= 4096:  # DefaultMQProducerImpl.tryToCompressMessage
                body = compress(body, pr.compress)
                sf |= L.COMPRESSED_FLAG | L.COMPRESSION_FLAGS[pr.compress]
            q = self._queue(p, topic)
            row = dict(t=self.tid[topic], q=q, sf=sf, born=int(born[i]), store=ts, host=pr.host_id, body=body,
                       tags=tags, uniq=uniq[i], keys=keys, note="plain")
            if cover and cover[3]:
                row["cover"] = cover[3]
            if kind == "delay":
                level = cover[2] if cover else int(rng.choice(cfg.delay_levels))
                row.update(t=self.tid[L.SCHEDULE_TOPIC], q=level - 1, note="scheduled",
                           props=self._fill(self.t_delay[level], tags, keys, uniq[i], topic, str(q)),
                           real=(topic, q))
                self._push(ts + self.delay_ms[level], "deliver", row)
            elif kind == "half":
                row.update(t=self.tid[L.TRANS_HALF_TOPIC], q=0, note="half",
                           props=self._fill(self.t_half, tags, keys, uniq[i], pr.group, topic, str(q)))
            else:
                row["props"] = self._fill(self.t_plain, tags, keys, uniq[i])
            rows.append(row)
            i += 1
        # follow-ups take their due times; the stream is stored in store-time order
        start = self.now
        for f in follow:
            f.due = max(f.due, start)
            rows.extend(self._follow(f))
        rows.sort(key=lambda r: r["store"])
        self.now = end + 1
        return rows

    def _follow_size(self, f: _Pending) -> int:
        return {"deliver": 1, "commit": 2, "rollback": 1, "consume": 1}[f.kind]

    def _follow(self, f: _Pending) -> list:
        info, due = f.info, f.due
        store = self.hosts[0]
        if f.kind == "deliver":  # ScheduleMessageService.messageTimeup
            _, string = reread_properties(info["props"])
            topic, q = info["real"]
            return [dict(t=self.tid[topic], q=q, sf=info["sf"], born=info["born"], store=due, host=info["host"],
                         body=info["body"], props=string, flag=0, rc=info.get("rc", 0), tags=info["tags"],
                         uniq=info["uniq"], keys=info["keys"], note="plain")]
        if f.kind in ("commit", "rollback"):
            out = []
            if f.kind == "commit":
                _, string = reread_properties(info["props"])
                topic, q = info["real"]
                sf = (info["sf"] & ~L.TRANSACTION_MASK) | L.TRANSACTION_COMMIT_TYPE
                out.append(dict(t=self.tid[topic], q=q, sf=sf, born=info["born"], store=due, host=info["host"],
                                body=info["body"], props=string, prep=info["phys"], tags=info["tags"],
                                uniq=info["uniq"], keys=info["keys"], note="plain"))
            out.append(dict(t=self.tid[L.TRANS_OP_HALF_TOPIC], q=0, sf=0, born=due, store=due, host=0,
                            body=str(info["qoff"]).encode(), props=self.op_string, tags=L.TRANS_OP_REMOVE_TAG,
                            uniq=None, keys=None, note="op"))
            return out
        # consume: the group fails and sends the message back
        group = self.groups[info["group"]]
        # a listener may give up at once (context.setDelayLevelWhenNextConsume(-1)): straight to the DLQ
        fate = info.get("cover")
        delay = (-1 if fate == "dlq" else 0) if fate else (-1 if self.rng.random() < self.cfg.p_give_up else 0)
        topic, props, string = send_back_properties(info["props"], self.topic_table[info["t"]], info.get("rc", 0),
                                                    create_offset_msg_id(*parse_host(store), info["phys"]), group,
                                                    delay, self.cfg.max_reconsume_times)
        row = dict(t=self.tid[topic], q=0, sf=info["sf"], born=info["born"], store=due, host=info["host"],
                   body=info["body"], props=string, rc=info.get("rc", 0) + 1, tags=info["tags"], uniq=info["uniq"],
                   keys=info["keys"], note="retry-source" if topic.startswith(L.RETRY_GROUP_TOPIC_PREFIX) else "dlq")
        moved = schedule_properties(props, topic, 0, self.max_level)
        if moved is not None:
            sched_topic, q, sched_string = moved
            row.update(t=self.tid[sched_topic], q=q, props=sched_string, note="scheduled", real=(topic, 0),
                       group=info["group"])
            self._push(due + self.delay_ms[q + 1], "deliver", row)
        return [row]

    def after_append(self, rows: list, appended) -> None:
        """Schedule follow-ups that need where the records went."""
        cfg, rng = self.cfg, self.rng
        phys, qoff = appended.physical_offset, appended.queue_offset
        for r, p, q in zip(rows, phys.tolist(), qoff.tolist()):
            note = r["note"]
            if note == "half":
                u = 0.0 if r.get("cover") == "commit" else rng.random()
                info = dict(r, phys=p, qoff=q, real=(self._real(r["props"])))
                if u < 0.7:
                    self._push(r["store"] + int(rng.integers(50, 3000)), "commit", info)
                elif u < 0.9:
                    self._push(r["store"] + int(rng.integers(50, 3000)), "rollback", info)
            elif note == "plain" and (r.get("cover") in ("retry", "dlq")
                                      or r["t"] < cfg.topics and rng.random() < cfg.p_send_back):
                self._push(r["store"] + int(rng.integers(200, 5000)), "consume", dict(r, phys=p, group=r["t"]))
            elif note == "plain" and self.topic_table[r["t"]].startswith(L.RETRY_GROUP_TOPIC_PREFIX) \
                    and rng.random() < 0.5:  # a redelivered retry fails again
                group = self.topic_table[r["t"]][len(L.RETRY_GROUP_TOPIC_PREFIX):]
                self._push(r["store"] + int(rng.integers(200, 5000)), "consume",
                           dict(r, phys=p, group=self.groups.index(group)))

    def _real(self, props: str):
        return property_value(props, L.PROPERTY_REAL_TOPIC), int(property_value(props, L.PROPERTY_REAL_QUEUE_ID))

    def to_batch(self, rows: list) -> RecordBatch:
        n = len(rows)
        col = lambda k, d=0: np.fromiter((r.get(k, d) for r in rows), np.int64, n)
        sf = col("sf")
        sf |= np.where(np.array([self.host_v6[r["host"]] for r in rows], bool), L.BORNHOST_V6_FLAG, 0)
        if self.host_v6[0]:
            sf |= L.STOREHOST_V6_FLAG
        return RecordBatch(
            topics=self.topic_table, topic_id=col("t"), queue_id=col("q"), sys_flag=sf, born_timestamp=col("born"),
            store_timestamp=col("store"), hosts=self.hosts, born_host_id=col("host"),
            store_host_id=np.zeros(n, np.int64), body=[r["body"] for r in rows], properties=[r["props"] for r in rows],
            flag=col("flag"), reconsume_times=col("rc"), prepared_transaction_offset=col("prep"),
            batch_id=col("batch", -1), tags=[r["tags"] for r in rows], uniq_keys=[r["uniq"] for r in rows],
            keys=[r["keys"] for r in rows])


def config_5x(base: WriterConfig | None = None, **overrides) -> WriterConfig:
    """``base`` (default: WriterConfig()) as a 5.3.3 broker with the timer wheel, LMQ, multi-dispatch and the CRC
    property on (overrides win: e.g. ``enabledAppendPropCRC=False``)."""
    values = (base or WriterConfig()).to_dict()
    values.update(timerWheelEnable=True, enableLmq=True, enableMultiDispatch=True, enabledAppendPropCRC=True)
    values.update(overrides)
    return WriterConfig.from_dict(values)


@dataclass
class Traffic5Config(_Traffic):
    """The 5.3.3 profile."""

    topics: int = 4
    rate: float = 200.0
    p_timer: float = 0.15
    p_far_timer: float = 0.1  # of timers: hours ahead (pending at the end)
    p_roll_timer: float = 0.05  # of timers: beyond the roll window
    p_recall: float = 0.1  # of timers: recalled
    p_delay: float = 0.03
    p_lmq: float = 0.1
    p_lmq_mishandled: float = 0.1  # of LMQ sends: a non-LMQ name last in the list
    p_pop: float = 0.03
    p_batch_cq: float = 0.03

    def broker_config(self, base: WriterConfig | None) -> WriterConfig:
        return config_5x(base) if base is None or not base.is_5x else base

    def traffic(self, writer_config: WriterConfig) -> "_BrokerTraffic":
        return _BrokerTraffic(self, writer_config)


def generate_store(out_dir, cfg: "TrafficConfig | Traffic5Config", writer_config: WriterConfig | None = None,
                   progress=None, crash: bool = False) -> dict:
    """Write about ``cfg.messages`` records of synthetic traffic to a new store at ``out_dir`` (5.x: the sends; fired
    timers, revives and deliveries come on top), consumers' offsets committed at 90% of each queue; returns stats."""
    writer_config = cfg.broker_config(writer_config)
    traffic = cfg.traffic(writer_config)
    writer = StoreWriter(out_dir, writer_config, clock=traffic.clock, start_time=cfg.start_ms)
    t0 = time.perf_counter()
    try:
        stats = traffic.run(writer, progress, t0)
        # consumers have committed most of what they read
        for (topic, qid), nxt in sorted(writer.queue_table.items()):
            if topic in traffic.topics:
                writer.commit_offset(f"cg-{topic}", topic, qid, int(nxt * 0.9))
    except BaseException:
        writer.crash()
        raise
    traffic.finish(writer, stats)
    writer.crash() if crash else writer.close()
    total_s = time.perf_counter() - t0
    return {"write_s": total_s, **stats, "total_s": total_s, "segments": len(writer.segments)}


class _BulkTraffic:
    """The 4.9.x profile's traffic (:class:`TrafficGenerator`) in chunks through :func:`append_many`."""

    clock = None  # the generator's simulated clock stands in at close (:meth:`finish`)

    def __init__(self, cfg: TrafficConfig, writer_config: WriterConfig):
        self.cfg = cfg
        self.gen = TrafficGenerator(cfg, writer_config)
        self.topics = self.gen.topics

    def run(self, writer: StoreWriter, progress, t0: float) -> dict:
        cfg, gen = self.cfg, self.gen
        for topic in gen.topics:  # created up front with --queues queues (mqadmin updateTopic)
            writer.register_topic(topic, cfg.queues)
        gen_s = write_s = 0.0
        written = nbytes = 0
        # small runs still see follow-ups; a cover's retries need three appends (send, send-back, redelivery)
        step = min(cfg.chunk, max(64 if cfg.cover else 256, cfg.messages // 16))
        while written < cfg.messages:
            a = time.perf_counter()
            rows = gen.chunk(min(step, cfg.messages - written))
            batch = gen.to_batch(rows)
            b = time.perf_counter()
            appended = append_many(writer, batch)
            c = time.perf_counter()
            gen.after_append(rows, appended)
            gen_s += (b - a) + (time.perf_counter() - c)
            write_s += c - b
            written += len(rows)
            nbytes += int(appended.store_size.sum())
            if progress:
                progress(written, cfg.messages, nbytes, time.perf_counter() - t0)
        return {"messages": written, "bytes": nbytes, "generate_s": gen_s, "write_s": write_s}

    def finish(self, writer: StoreWriter, stats: dict) -> None:
        writer.clock = lambda: self.gen.now


class _BrokerTraffic:
    """The 5.3.3 profile's traffic, one client action at a time through :class:`Broker`."""

    def __init__(self, cfg: "Traffic5Config", writer_config: WriterConfig):
        self.cfg, self.wcfg = cfg, writer_config
        self.clock = ManualClock(cfg.start_ms, tick=1)
        self.topics = [f"Topic{i:03d}" for i in range(cfg.topics)]

    def run(self, writer: StoreWriter, progress, t0: float) -> dict:
        cfg, wcfg, clock, topics = self.cfg, self.wcfg, self.clock, self.topics
        broker = Broker(writer, clock)
        rng = np.random.default_rng(cfg.seed)
        for t in topics:
            writer.register_topic(t, cfg.queues)
        batch_topic = "BatchTopic"
        writer.register_topic(batch_topic, 2, attributes={L.TOPIC_ATTRIBUTE_QUEUE_TYPE: L.QUEUE_TYPE_BATCH})
        producers = [Producer(group=f"pg-{p}", born_host=(f"[2001:db8::{p + 1:x}]:{50000 + p}" if p == 0
                                                         else f"10.0.0.{p + 1}:{50000 + p}"),
                              client_ip="2001:db8::1" if p == 0 else f"10.0.0.{p + 1}", pid=1000 + p) for p in range(4)]
        tags = ["TagA", "TagB", "TagC", "created", "paid"]
        step = 1000.0 / cfg.rate
        sent, pops = 0, []
        while sent < cfg.messages:
            clock.set(cfg.start_ms + int(sent * step))
            if sent % 64 == 0:
                broker.run_timers(clock.ms)
                broker.deliver_due(clock.ms)
            p = producers[int(rng.integers(len(producers)))]
            topic = topics[int(rng.integers(len(topics)))]
            body = bytes(rng.integers(32, 127, int(rng.lognormal(5.0, 0.5)), dtype=np.uint8))
            tag = tags[int(rng.integers(len(tags)))]
            key = f"k{sent}"
            u = rng.random()
            if u < cfg.p_timer:
                r = rng.random()
                if r < cfg.p_roll_timer:
                    res = broker.send(p, topic, body, tags=tag, keys=key,
                                      delay_sec=int(wcfg.timerRollWindowSlot * wcfg.timerPrecisionMs // 1000
                                                    + rng.integers(60, 3600)))
                elif r < cfg.p_roll_timer + cfg.p_far_timer:
                    res = broker.send(p, topic, body, tags=tag, keys=key, delay_ms=int(rng.integers(3600, 36000)) * 1000)
                else:
                    kind = int(rng.integers(3))
                    ahead = int(rng.integers(1000, 20000))
                    res = broker.send(p, topic, body, tags=tag, keys=key,
                                      **({"delay_sec": ahead // 1000} if kind == 0 else {"delay_ms": ahead}
                                         if kind == 1 else {"deliver_ms": clock.ms + ahead}))
                rec = res.record
                if rec.topic == L.TIMER_TOPIC and rng.random() < cfg.p_recall:
                    out_ms = int(rec.properties[L.PROPERTY_TIMER_OUT_MS])
                    if out_ms - clock.ms > 1000:
                        broker.recall(p, topic, res.msg_id, out_ms + 1)
            elif u < cfg.p_timer + cfg.p_delay:
                broker.send(p, topic, body, tags=tag, keys=key, delay_level=int(rng.integers(1, 4)))
            elif u < cfg.p_timer + cfg.p_delay + cfg.p_lmq:
                names = [f"%LMQ%room{int(rng.integers(8))}" for _ in range(int(rng.integers(1, 4)))]
                names = list(dict.fromkeys(names))
                if rng.random() < cfg.p_lmq_mishandled:
                    names.append("NotLmqTopic")
                broker.send(p, "LmqParent", body, tags=tag, keys=key, lmq=names)
            elif u < cfg.p_timer + cfg.p_delay + cfg.p_lmq + cfg.p_pop:
                q = int(rng.integers(cfg.queues))
                got = broker.pop(f"cg-{topic}", topic, q, int(rng.integers(1, 5)), invisible_time=30_000)
                if got is not None:
                    offsets = got.checkpoint.offsets()
                    r = rng.random()
                    if r < 0.5:
                        broker.ack(got, offsets)  # an ack or a batch ack
                    elif r < 0.8 and len(offsets) > 1:
                        broker.ack(got, offsets[0])  # part acked: the rest is revived
                    pops.append(got)
                else:
                    broker.send(p, topic, body, tags=tag, keys=key)
            elif u < cfg.p_timer + cfg.p_delay + cfg.p_lmq + cfg.p_pop + cfg.p_batch_cq:
                n = int(rng.integers(1, 6))
                broker.send_inner_batch(p, batch_topic, [BatchItem(body[:40] + bytes([48 + i]), tags=tag)
                                                        for i in range(n)])
            else:
                broker.send(p, topic, body, tags=tag, keys=key)
            sent += 1
            if progress and (sent % 1000 == 0 or sent == cfg.messages):
                progress(sent, cfg.messages, writer.cur_base + writer.cur_pos, time.perf_counter() - t0)
        now = cfg.start_ms + int(sent * step) + 60_000  # a minute later: what was due fires, the rest waits
        broker.revive(now)
        broker.deliver_due(now)
        return {"messages": sent, "bytes": 0, "generate_s": 0.0, "pops": len(pops)}

    def finish(self, writer: StoreWriter, stats: dict) -> None:
        stats["messages"] = writer.messages_written  # the fired timers, revives and deliveries included
        stats["bytes"] = writer.cur_base + writer.cur_pos


def progress_line(stream=sys.stderr):
    def show(done, total, nbytes, elapsed):
        rate = done / elapsed if elapsed else 0.0
        stream.write(f"\rgenerate: {done}/{total} messages ({100 * done / total:5.1f}%), {nbytes / 1e6:,.1f} MB, "
                     f"{elapsed:6.1f} s, {rate:,.0f} msg/s")
        if done >= total:
            stream.write("\n")
        stream.flush()
    return show
