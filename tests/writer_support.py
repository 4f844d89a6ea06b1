"""Helpers shared by the writer, broker-flow and damage tests (no tests here)."""
from __future__ import annotations

import base64
import hashlib
from pathlib import Path

from store_format.message import Message
from store_format.writer import StoreWriter, WriterConfig


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
