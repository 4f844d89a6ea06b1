"""Helpers shared by the writer, broker-flow, damage and audit tests, and by the audit pin's corpus
(tools/audit_pin.py); no tests here."""
from __future__ import annotations

import base64
import hashlib
from pathlib import Path

from store_format.write.broker import Broker, ManualClock, Producer
from store_format.message import Message
from store_format.write.writer import StoreWriter, WriterConfig


def manifest_record(x: dict) -> Message:
    """A manifest message as the stored record to append: every stored field RocketMQ wrote, except the
    ones the writer must assign itself (queue offset, physical offset, CRC, size)."""
    return Message(topic=x["topic"], body=base64.b64decode(x["body"]), queue_id=x["queueId"],
                   properties_raw=x["propertiesString"], flag=x["flag"], sys_flag=x["sysFlag"],
                   born_timestamp=x["bornTimestamp"], born_host=x["bornHost"], store_timestamp=x["storeTimestamp"],
                   store_host=x["storeHost"], reconsume_times=x["reconsumeTimes"],
                   prepared_transaction_offset=x["preparedTransactionOffset"])


def fixture_config(manifest: dict, **overrides) -> WriterConfig:
    return WriterConfig.from_dict({**manifest["storeConfig"], **overrides})


# The broker fixture's BrokerController was up for a while before its first send (route registration,
# producer start-up): its first thorough commitlog flush ran before any message and the next one only
# after shutdown, so physicMsgTimestamp stayed 0.  The basic fixture's store started with its first put.
FIXTURE_START_OFFSET_MS = {"basic": 0, "broker": -5000}


def replay_fixture(name: str, manifest: dict, root: Path, **kwargs) -> tuple[StoreWriter, list[Message]]:
    first = manifest["messages"][0]["storeTimestamp"]
    w = StoreWriter(root, fixture_config(manifest), start_time=first + FIXTURE_START_OFFSET_MS[name], **kwargs)
    stored = [w.append(manifest_record(x)) for x in manifest["messages"]]
    return w, stored


def tree_digest(root: Path) -> dict[str, str]:
    """relative path -> sha256 of every file under root."""
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*")) if p.is_file()}


def files(root: Path, sub: str) -> list[Path]:
    d = root / sub
    return sorted(p for p in d.rglob("*") if p.is_file()) if d.exists() else []


class ScriptedClock:
    """A clock that returns given instants in call order (replays a recorded broker run)."""

    def __init__(self, instants):
        self.instants = list(instants)
        self.calls = 0

    def __call__(self) -> int:
        v = self.instants[self.calls]
        self.calls += 1
        return v


def build_flow_store(root: Path, **config) -> dict:
    """A crashed store written through broker flows (tests/test_audit.py's flow store, and the audit pin's
    ``flows``): group ``cg`` 2 behind on Orders/0 and caught up on Orders/1; transactions open, committed and
    rolled back; a send-back through %RETRY%cg into %DLQ%cg; a level-2 delay never delivered (due 5 s after it
    was stored, overdue at the newest store time) and a level-6 one not due yet; a last send 10 s after the
    delays (the newest store time, the audit's default dump time).  The producer group is hostile text that a
    report must escape.  ``config`` overrides WriterConfig settings.  Returns the handles on what was sent."""
    config = {"storeHost": "192.168.0.2:10911", "mappedFileSizeCommitLog": 1 << 20, **config}
    w = StoreWriter(root, WriterConfig(**config), clock=ManualClock(1_700_000_000_000))
    b = Broker(w)
    p = Producer(group="<pg>&\"x\"")
    sent = [b.send(p, "Orders", f"o{i}".encode(), tags="TagA", keys=f"o-{i}", queue_id=i % 2) for i in range(6)]
    b.commit_offset("cg", "Orders", 0, 1)  # queue 0 holds 3: 2 behind
    b.commit_offset("cg", "Orders", 1, 3)  # queue 1 holds 3: caught up
    open_half = b.send_half(p, "Orders", b"open", keys="tx-open", queue_id=0)
    done = b.send_half(p, "Orders", b"done", keys="tx-done", queue_id=0)
    b.end_transaction(done, commit=True)
    undone = b.send_half(p, "Orders", b"undone", keys="tx-undone", queue_id=1)
    b.end_transaction(undone, commit=False)
    s1 = b.send_back("cg", sent[0].record)  # level 3 via the schedule topic
    [r1] = b.deliver_due(s1.store_timestamp + 10_000)
    dlq = b.send_back("cg", r1, max_reconsume_times=1)
    delayed = b.send(p, "Orders", b"later", keys="late", delay_level=2, queue_id=1)  # 5 s, never delivered
    not_due = b.send(p, "Orders", b"much later", keys="much-later", delay_level=6, queue_id=1)  # 2 min
    b.clock.advance(10_000)
    last = b.send(p, "Audit", b"last", keys="last", queue_id=0)
    w.crash()
    return dict(sent=sent, open_half=open_half, done=done, undone=undone, dlq=dlq, delayed=delayed,
                not_due=not_due, last=last, s1=s1, r1=r1)
