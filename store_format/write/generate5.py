"""Synthetic RocketMQ 5.3.3 broker traffic (``python -m store_format generate --rocketmq 5``): realistic 5.x stores
for tests and the bench, written through :class:`~store_format.write.broker5.Broker5` (the scalar put path,
since every 5.x record goes through a hook: CRC, LMQ, BatchCQ, timer).

On a simulated clock (``rate`` stores per second), seeded, the traffic mixes:

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

The last store times run ahead of the wheel only by what the traffic leaves pending.  The configuration is the
given WriterConfig with the 5.x switches turned on (:func:`config_5x`).
"""
from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np

from .. import layout as L
from .broker import BatchItem, ManualClock, Producer
from .broker5 import Broker5
from .writer import StoreWriter, WriterConfig


def config_5x(base: WriterConfig | None = None, **overrides) -> WriterConfig:
    """``base`` (default: WriterConfig()) as a 5.3.3 broker with the timer wheel, LMQ, multi-dispatch and the CRC
    property on (overrides win: e.g. ``enabledAppendPropCRC=False``)."""
    values = (base or WriterConfig()).to_dict()
    values.update(timerWheelEnable=True, enableLmq=True, enableMultiDispatch=True, enabledAppendPropCRC=True)
    values.update(overrides)
    return WriterConfig.from_dict(values)


@dataclass
class Traffic5Config:
    messages: int
    topics: int = 4
    queues: int = 4
    seed: int = 0
    start_ms: int = 1_700_000_000_000
    rate: float = 200.0  # stored records per simulated second
    p_timer: float = 0.15
    p_far_timer: float = 0.1  # of timers: hours ahead (pending at the end)
    p_roll_timer: float = 0.05  # of timers: beyond the roll window
    p_recall: float = 0.1  # of timers: recalled
    p_delay: float = 0.03
    p_lmq: float = 0.1
    p_lmq_mishandled: float = 0.1  # of LMQ sends: a non-LMQ name last in the list
    p_pop: float = 0.03
    p_batch_cq: float = 0.03


def generate_store_5x(out_dir, cfg: Traffic5Config, writer_config: WriterConfig | None = None, progress=None,
                      crash: bool = False) -> dict:
    """Write about ``cfg.messages`` stored records of 5.x traffic (the sends; fired timers, revives and
    deliveries come on top) to a new store at ``out_dir``; returns stats."""
    wcfg = config_5x(writer_config) if writer_config is None or not writer_config.is_5x else writer_config
    rng = np.random.default_rng(cfg.seed)
    clock = ManualClock(cfg.start_ms, tick=1)
    writer = StoreWriter(out_dir, wcfg, clock=clock, start_time=cfg.start_ms)
    broker = Broker5(writer, clock)
    topics = [f"Topic{i:03d}" for i in range(cfg.topics)]
    for t in topics:
        writer.register_topic(t, cfg.queues)
    batch_topic = "BatchTopic"
    writer.register_topic(batch_topic, 2, attributes={L.TOPIC_ATTRIBUTE_QUEUE_TYPE: L.QUEUE_TYPE_BATCH})
    producers = [Producer(group=f"pg-{p}", born_host=(f"[2001:db8::{p + 1:x}]:{50000 + p}" if p == 0
                                                     else f"10.0.0.{p + 1}:{50000 + p}"),
                          client_ip="2001:db8::1" if p == 0 else f"10.0.0.{p + 1}", pid=1000 + p) for p in range(4)]
    tags = ["TagA", "TagB", "TagC", "created", "paid"]
    step = 1000.0 / cfg.rate
    t0 = time.perf_counter()
    sent, pending_timers, pops, nbytes = 0, [], [], 0
    try:
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
        for (topic, qid), nxt in sorted(writer.queue_table.items()):
            if topic in topics:
                writer.commit_offset(f"cg-{topic}", topic, qid, int(nxt * 0.9))
    except BaseException:
        writer.crash()
        raise
    total = writer.messages_written
    nbytes = writer.cur_base + writer.cur_pos
    writer.crash() if crash else writer.close()
    elapsed = time.perf_counter() - t0
    return {"messages": total, "bytes": nbytes, "generate_s": 0.0, "write_s": elapsed, "total_s": elapsed,
            "segments": len(writer.segments), "pops": len(pops)}


__all__ = ["Traffic5Config", "generate_store_5x", "config_5x"]
