"""The audit pin: a deterministic corpus of stores, audited, every output normalized and compared with committed
goldens (tests/golden/audit/), so that a rebuilt audit engine (issue "The audit at scan speed") is held to
exactly the outputs of the engine it replaces: findings (finding_id included), metrics, every table, summary.json.

  python tools/audit_pin.py --corpus DIR --check tests/golden/audit          # jobs.audit against the goldens
  python tools/audit_pin.py --corpus DIR --write tests/golden/audit       # regenerate (see below when)
  python tools/audit_pin.py --corpus DIR --coverage tests/golden/audit       # findings per check and store

``tests/test_audit_pin.py`` does the ``--check`` with ``jobs.audit`` (and builds the corpus again in another
process to prove it byte-for-byte deterministic).  ``--corpus DIR`` is a cache: built once, reused while
``CORPUS.json`` there carries the same stamp (a hash of the sources that shape the stores: this file,
tests/support/writer_support.py, store_format/); ``--keep OUT`` keeps the raw audit outputs.  Exit codes: 0 equal (or
written), 1 differences, 2 bad usage.

The corpus (``DIR/stores/``, a folder of store roots: each folder name is its broker name) is the three
RocketMQ-written fixtures (symlinks ``fx-*``, read in place), and stores written by store_format's writer with
seeded generators and manual clocks (no wall clock anywhere): ``gen`` (store_format.write.generate traffic: 3 topics
x 2 queues, batches, delays, transactions, retries, DLQ, compressed bodies; 256 KiB segments, 2,000-entry index
files), ``gen-crashed`` (the same, killed: abort file, stale checkpoint), ``dmg-<kind>`` (one per
store_format.write.damage function, each on a copy of a small generated store), ``forged-*`` (damage those functions
do not make, forged through the codec or the writer: a hole of zeros, a wrong TOTALSIZE, an impossible one, a
wrong PHYSICALOFFSET, a missing segment and a stray file, no commitlog at all, consume-queue units and index
entries pointing wrong, odd config files and offsets), ``flows`` (tests/writer_support.build_flow_store),
``dispatch-lag`` and ``index-lag`` (consume queues / index files behind the commitlog), ``no-index``
(messageIndexEnable=false), ``txn-commit-without-op``, and ``index-geometry-100x300`` (maxHashSlotNum=100,
maxIndexNum=300: not the 4:1 ratio the readers infer, so today every index file is corrupt and every key
missing).  RUNS lists the audit runs over them (each with --no-report: report.html is not pinned).

Normalized, per run: findings without run_id/run_time (details as a sorted object), metrics without the run
stamps, every table under tables/ (rows sorted by all their columns), each output's column names and types,
summary.json without run_id, run_time, elapsed_seconds, version (it depends on how the project is installed)
and input mtimes (input paths relative, sizes kept), and the run's exit code and verdict line; every absolute
path in any value becomes ``<corpus>/...``, ``<out>/...`` or (the console script of a printed command)
``<bin>/...``.  Two runs of one engine on one corpus give
identical normalized outputs.  The goldens also record the corpus' digests: when ``--check`` finds that the
corpus itself changed (a writer change, not the engine's), it says so first.

Regenerate the goldens (``--write tests/golden/audit``, with the engine of record: ``jobs.audit``; the goldens
were first written by the engine it replaced, jobs/audit_legacy.py, which the new one reproduced exactly before
it was removed) only for a deliberate change of the audit's rules or outputs, or of the
corpus (the writer lays stores down differently, a store is added), e.g. when index files of other geometries
become readable and ``index-geometry-100x300`` stops being all errors; the commit that updates the goldens
names that change.  Never regenerate them to make a new engine's differences go away.
"""
from __future__ import annotations

import argparse
import dataclasses
import datetime as dt
import gzip
import hashlib
import importlib
import io
import json
import math
import os
import shutil
import struct
import sys
from collections import Counter
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from store_format.write import damage as D  # noqa: E402
from store_format import layout as L  # noqa: E402
from store_format.write.broker import Broker, ManualClock, Producer  # noqa: E402
from store_format.codec import decode_record, encode_record  # noqa: E402
from store_format.fs import ReadOnlyMap
from store_format.consumequeue import discover_queues, unit_bytes  # noqa: E402
from store_format.write.generate import TrafficConfig, generate_store  # noqa: E402
from store_format.indexfile import list_index_files  # noqa: E402
from store_format.message import Message  # noqa: E402
from store_format.store import Store  # noqa: E402
from store_format.write.writer import StoreWriter, WriterConfig  # noqa: E402
from tests.support.writer_support import build_flow_store  # noqa: E402

KIB = 1024
T0 = 1_700_000_000_000
CORPUS_FORMAT = 1  # bump when the layout of CORPUS.json changes
FIXTURES = {"fx-basic": "basic/store", "fx-broker": "broker/store",
            "fx-recovered-zero-page": "recovered-zero-page/input/store"}
# the audit runs: name -> (store roots relative to DIR/stores, or "." for the whole folder; extra arguments)
RUNS = {
    "all": (["."], []),
    # options that change the rules: the dump time, no CRC check, messageIndexSafe; stores given one by one
    "options": (["flows", "dmg-flip-body-bit", "dispatch-lag"], ["--as-of", str(T0 + 200_000), "--no-crc",
                                                                  "--message-index-safe"]),
}
ALWAYS_ARGS = ["--no-report"]  # report.html carries the run time and plots: not pinned
SUMMARY_VOLATILE = ("run_id", "run_time", "elapsed_seconds", "version")
STAMP_SOURCES = ("tools/audit_pin.py", "tests/support/writer_support.py", "store_format")


def default_fixtures() -> Path:
    """$ROCKETMQ_FIXTURES (the folder holding rocketmq-4.9.7/), else ../shared/fixtures beside the checkout."""
    root = Path(os.environ["ROCKETMQ_FIXTURES"]) if os.environ.get("ROCKETMQ_FIXTURES") else \
        REPO.parent / "shared" / "fixtures"
    return root / "rocketmq-4.9.7"


# ---------------------------------------------------------------------------------------------------------
# Building blocks


def _messages(root: Path) -> list:
    """Message frames of a store, in physical order (decoded)."""
    return [f for f in Store(root).walk_commitlog() if f.kind == "message"]


def _blank(root: Path):
    """The first end-of-segment blank of a store."""
    return next(f for f in Store(root).walk_commitlog(decode=False) if f.kind == "blank")


def _patch(path: Path, position: int, data: bytes) -> None:
    with open(path, "r+b") as f:
        f.seek(position)
        f.write(data)


def _forge(root: Path, frame, **fields) -> None:
    """Re-encode one record in place with fields forced: ``store_size`` / ``magic`` through encode_record, any
    other Message field (e.g. ``physical_offset``) on the decoded record.  The stored body CRC is kept."""
    path = root / "commitlog" / frame.segment
    with ReadOnlyMap(path) as m:
        msg = decode_record(m.buf, frame.file_position, file=frame.segment)
    force = {k: fields.pop(k) for k in ("store_size", "magic") if k in fields}
    data = encode_record(dataclasses.replace(msg, **fields), **force)
    assert len(data) == frame.size
    _patch(path, frame.file_position, data)


def _cq_unit(root: Path, topic: str, queue_id: int, queue_offset: int) -> tuple[Path, int]:
    """The file and position of one consume-queue unit."""
    for f in discover_queues(root / "consumequeue")[(topic, queue_id)]:
        first = f.first_queue_offset
        if first <= queue_offset < first + f.length // L.CQ_STORE_UNIT_SIZE:
            return f.path, (queue_offset - first) * L.CQ_STORE_UNIT_SIZE
    raise KeyError((topic, queue_id, queue_offset))


def _set_unit(root: Path, topic: str, queue_id: int, queue_offset: int, physical_offset: int, size: int,
              tags_code: int) -> None:
    path, pos = _cq_unit(root, topic, queue_id, queue_offset)
    _patch(path, pos, unit_bytes(physical_offset, size, tags_code))


_ENTRY = struct.Struct(L.INDEX_ENTRY_STRUCT)


def _entry_at(slots: int, entry: int) -> int:
    return L.INDEX_HEADER_SIZE + slots * L.INDEX_SLOT_SIZE + entry * L.INDEX_ENTRY_SIZE


def _set_entry(path: Path, slots: int, entry: int, **fields) -> None:
    """Rewrite fields (key_hash, physical_offset, time_diff, prev_index) of one index entry."""
    at = _entry_at(slots, entry)
    with ReadOnlyMap(path) as m:
        values = dict(zip(("key_hash", "physical_offset", "time_diff", "prev_index"), _ENTRY.unpack_from(m.buf, at)))
    _patch(path, at, _ENTRY.pack(*{**values, **fields}.values()))


def _bump_header(path: Path, name: str, by: int) -> None:
    with ReadOnlyMap(path) as m:
        value = L.INDEX_HEADER.read(m.buf, name)
    _patch(path, L.INDEX_HEADER.offset(name), L.INDEX_HEADER.pack(name, value + by))


# small files everywhere (the defaults are sparse 1 GiB segments and 400 MiB index files)
SMALL_FILES = dict(mappedFileSizeCommitLog=64 * KIB, mappedFileSizeConsumeQueue=100 * L.CQ_STORE_UNIT_SIZE,
                   maxHashSlotNum=64, maxIndexNum=256, storeHost="10.0.0.9:10911")


def _broker(root: Path, tick: int = 1, queue_offsets: dict | None = None, **config):
    w = StoreWriter(root, WriterConfig(**{**SMALL_FILES, **config}), clock=ManualClock(T0, tick=tick),
                    queue_offsets=queue_offsets)
    return w, Broker(w), Producer(group="pg-pin", born_host="10.0.1.1:50001", client_ip="10.0.1.1")


def _rounds(b: Broker, p: Producer, topics: dict, rounds: int, size: int = 160) -> list[Message]:
    """Each round one send to every queue of every topic, with a tag and two keys (one shared by the round)."""
    out = []
    for r in range(rounds):
        for topic, queues in topics.items():
            for q in range(queues):
                body = (f"{topic}/{q}/{r} " * 40).encode()[:size]
                out.append(b.send(p, topic, body, tags=f"Tag{q % 3}", keys=[f"{topic}-{q}-{r}", f"round-{r}"],
                                  queue_id=q).record)
    return out


# ---------------------------------------------------------------------------------------------------------
# The stores


# Sizes: the current engine runs a Spark task per commitlog segment, consume-queue file and index file for
# each of its queries, so the stores have few files (the fixture recovered-zero-page alone has 180).
GEN_WRITER = dict(mappedFileSizeCommitLog=256 * KIB, mappedFileSizeConsumeQueue=2000 * L.CQ_STORE_UNIT_SIZE,
                  maxHashSlotNum=500, maxIndexNum=2000, storeHost="10.0.0.1:10911", brokerName="gen")
GEN_TRAFFIC = dict(messages=4000, topics=3, queues=2, seed=1, rate=100.0, cover=True)
# the damaged stores' base: plain sends and batches, a few delays (level 1) and transactions, no send-backs
SMALL_WRITER = dict(mappedFileSizeCommitLog=64 * KIB, mappedFileSizeConsumeQueue=400 * L.CQ_STORE_UNIT_SIZE,
                    maxHashSlotNum=128, maxIndexNum=512, storeHost="10.0.0.2:10911", brokerName="small")
SMALL_TRAFFIC = dict(messages=450, topics=1, queues=2, seed=7, rate=20.0, delay_levels=(1,), p_delay=0.05,
                     p_half=0.05, p_send_back=0.0)


def build_gen(dst: Path, work: Path, crash: bool = False) -> None:
    generate_store(dst, TrafficConfig(**GEN_TRAFFIC), WriterConfig(**GEN_WRITER), crash=crash)


def small_base(work: Path) -> Path:
    """The small generated store the damaged stores are copies of (built once per corpus build)."""
    base = work / "small"
    if not base.exists():
        generate_store(base, TrafficConfig(**SMALL_TRAFFIC), WriterConfig(**SMALL_WRITER))
    return base


def _victims(base: Path) -> dict:
    """Records to damage: in the second-to-last segment (so recovery drops the rest of it and deletes the last
    segment) at a quarter, a third, half and two thirds of it; and the last ones."""
    frames = _messages(base)
    segs = sorted({f.segment for f in frames})
    late = [f for f in frames if f.segment == segs[-2]]
    return {"quarter": late[len(late) // 4], "third": late[len(late) // 3], "half": late[len(late) // 2],
            "two_thirds": late[2 * len(late) // 3], "tail": frames[-16:]}


def build_damage(kind: str):
    def build(dst: Path, work: Path) -> None:
        base = small_base(work)
        v = _victims(base)
        if kind == "torn_tail":
            D.torn_tail(base, dst)
        elif kind == "flip_body_bit":
            D.flip_body_bit(base, dst, physical_offset=v["half"].physical_offset, bit=5)
        elif kind == "zero_page":
            D.zero_page(base, dst, physical_offset=v["quarter"].physical_offset)
        elif kind == "truncate_segment":
            D.truncate_segment(base, dst)
        elif kind == "bad_magic":
            D.bad_magic(base, dst, physical_offset=v["third"].physical_offset)
        elif kind == "bad_crc":
            D.bad_crc(base, dst, physical_offset=v["two_thirds"].physical_offset)
        elif kind == "delete_consume_queue":
            D.delete_consume_queue(base, dst, "Topic000", 1)
        elif kind == "wrong_cq_size":
            D.wrong_cq_size(base, dst, "Topic000", 0, queue_offset=5)
        elif kind == "stale_index_entry":
            D.stale_index_entry(base, dst)
        else:
            raise ValueError(kind)
    return build


def build_forged_records(dst: Path, work: Path) -> None:
    """Record damage no damage function makes, among the last records (each framed apart by the salvage walk):
    two records' bytes zeroed from the first one's start (a hole the walk reads as the end of data), a TOTALSIZE
    disagreeing with the fields, an impossible (negative) TOTALSIZE, a PHYSICALOFFSET that is not where the
    record is."""
    base = small_base(work)
    D.copy_store(base, dst)
    tail = _victims(base)["tail"]
    hole = tail[0]
    _patch(dst / "commitlog" / hole.segment, hole.file_position, bytes(hole.size + tail[1].size))
    _forge(dst, tail[4], store_size=tail[4].size + 8)
    _forge(dst, tail[8], store_size=-tail[8].size)
    _forge(dst, tail[12], physical_offset=tail[12].physical_offset + 1)


def build_segment_files(dst: Path, work: Path) -> None:
    """A segment missing between two others (4 KiB segments), and a file in commitlog/ whose name is no base
    offset."""
    w, b, p = _broker(dst, tick=5, mappedFileSizeCommitLog=4 * KIB)
    _rounds(b, p, {"Seg": 2}, 30)
    w.close()
    segs = sorted(f.name for f in (dst / "commitlog").iterdir())
    (dst / "commitlog" / segs[1]).unlink()
    (dst / "commitlog" / f"{segs[0]}.tmp").write_bytes(b"left behind by a copy tool\n")


def build_no_commitlog(dst: Path, work: Path) -> None:
    """Consume queues, index and configs, but the commitlog folder is empty (lost)."""
    w, b, p = _broker(dst)
    _rounds(b, p, {"Lost": 2}, 3)
    w.close()
    for f in (dst / "commitlog").iterdir():
        f.unlink()


def build_flows(dst: Path, work: Path) -> None:
    build_flow_store(dst, mappedFileSizeConsumeQueue=100 * L.CQ_STORE_UNIT_SIZE, maxHashSlotNum=64, maxIndexNum=256)


def build_forged_cq_units(dst: Path, work: Path) -> None:
    """Consume-queue units that lie, one kind per queue (4-unit files, 4 KiB segments so blanks exist):
    Cq/0 a wrong tagsCode, Cq/1 two units swapped, Cq/2 a unit pointing at Cq/3's message, Cq/4 mid-record,
    Cq/5 past the end, Cq/6 into a blank, CqGap/0 a file missing, CqBad/0 a file with a bad name, CqBad/1 an
    invalid unit (size -1), TxRaw/0 a unit pointing at a PREPARED record."""
    w, b, p = _broker(dst, tick=3, mappedFileSizeCommitLog=4 * KIB, mappedFileSizeConsumeQueue=4 * L.CQ_STORE_UNIT_SIZE)
    _rounds(b, p, {"Cq": 7}, 4)
    _rounds(b, p, {"CqGap": 1}, 12)
    _rounds(b, p, {"CqBad": 2}, 4)
    plain = b.send(p, "TxRaw", b"plain", tags="TagR", keys="raw-plain", queue_id=0).record
    prepared = w.append(Message(topic="TxRaw", queue_id=0, body=b"prepared", sys_flag=L.TRANSACTION_PREPARED_TYPE,
                                properties_raw="TAGS\x01TagR\x02KEYS\x01raw-prepared", born_timestamp=b.clock(),
                                born_host=p.born_host, store_timestamp=b.clock(), store_host=w.config.storeHost))
    w.close()
    assert plain.queue_offset == prepared.queue_offset == 0
    st = Store(dst)
    units = {(t, q): list(st.consume_queue(t, q)) for t, q in st.queues}
    u = units[("Cq", 0)][1]
    _set_unit(dst, "Cq", 0, 1, u.physical_offset, u.size, u.tags_code + 1)
    a, c = units[("Cq", 1)][0], units[("Cq", 1)][1]
    _set_unit(dst, "Cq", 1, 0, c.physical_offset, c.size, c.tags_code)
    _set_unit(dst, "Cq", 1, 1, a.physical_offset, a.size, a.tags_code)
    other = units[("Cq", 3)][0]
    _set_unit(dst, "Cq", 2, 2, other.physical_offset, other.size, other.tags_code)
    u = units[("Cq", 4)][1]
    _set_unit(dst, "Cq", 4, 1, u.physical_offset + 8, u.size, u.tags_code)
    u = units[("Cq", 5)][3]
    end = max(s.base_offset for s in st.segments) + 4 * KIB
    _set_unit(dst, "Cq", 5, 3, end + 100, u.size, u.tags_code)
    u = units[("Cq", 6)][0]
    _set_unit(dst, "Cq", 6, 0, _blank(dst).physical_offset + 4, u.size, u.tags_code)
    gap = sorted((dst / "consumequeue" / "CqGap" / "0").iterdir())
    gap[1].unlink()
    (dst / "consumequeue" / "CqBad" / "0" / "garbage").write_bytes(bytes(L.CQ_STORE_UNIT_SIZE))
    u = units[("CqBad", 1)][1]
    _set_unit(dst, "CqBad", 1, 1, u.physical_offset, -1, u.tags_code)
    _set_unit(dst, "TxRaw", 0, 0, prepared.physical_offset, prepared.store_size,
              prepared.dispatch_tags_code(w.config.delay_levels))


INDEX_SLOTS, INDEX_NUM = 16, 64


def build_forged_index_entries(dst: Path, work: Path) -> None:
    """Index files (16 slots, 64 entries) whose entries and headers lie: in the first file an entry pointing at
    another message and one mid-record; in the second one into a blank and one with a time 100 s off; in the
    third a prev link out of range; the fourth's header counts more entries than the file holds; the fifth's
    hashSlotCount is one too many."""
    w, b, p = _broker(dst, tick=11, mappedFileSizeCommitLog=16 * KIB, maxHashSlotNum=INDEX_SLOTS,
                      maxIndexNum=INDEX_NUM)
    msgs = _rounds(b, p, {"Idx": 3}, 56)
    w.close()
    files = list_index_files(dst / "index")
    assert len(files) >= 5, files
    _set_entry(files[0], INDEX_SLOTS, 5, physical_offset=msgs[40].physical_offset)
    _set_entry(files[0], INDEX_SLOTS, 9, physical_offset=msgs[3].physical_offset + 8)
    _set_entry(files[1], INDEX_SLOTS, 3, physical_offset=_blank(dst).physical_offset + 4)
    at = _entry_at(INDEX_SLOTS, 7)
    with ReadOnlyMap(files[1]) as m:
        time_diff = _ENTRY.unpack_from(m.buf, at)[2]
    _set_entry(files[1], INDEX_SLOTS, 7, time_diff=time_diff + 100)
    _set_entry(files[2], INDEX_SLOTS, 4, prev_index=1000)
    _bump_header(files[3], "index_count", INDEX_NUM)
    _bump_header(files[4], "hash_slot_count", 1)


def build_forged_configs(dst: Path, work: Path) -> None:
    """Config files and offsets that disagree with the data: a topic left out of topics.json, a queue beyond its
    topic's queue count, offsets below a queue's first unit (Archive begins at 50), for a queue and a topic that
    do not exist, for a group without a subscriptionGroup.json entry; delayOffset.json behind a delivery, past
    a level's queue, for a level beyond 18; subscriptionGroup.json empty (the .bak holds it); no checkpoint."""
    w, b, p = _broker(dst, tick=5, queue_offsets={("Archive", 0): 50})
    _rounds(b, p, {"Orders": 4, "Archive": 1, "Unlisted": 1}, 3)
    b.send(p, "Narrow", b"narrow", tags="TagN", keys="narrow-3", queue_id=3)
    delayed = b.send(p, "Orders", b"soon", tags="TagD", keys="soon", delay_level=3, queue_id=1).record
    b.deliver_due(delayed.store_timestamp + 10_000)
    b.send(p, "Orders", b"after", tags="TagA", keys="after", queue_id=2)
    b.commit_offset("cg", "Orders", 0, 1)
    b.commit_offset("cg", "Orders", 9, 0)
    b.commit_offset("cg", "Archive", 0, 10)
    w.commit_offset("cg-ghost", "Ghost", 0, 5)  # never registered: no subscriptionGroup.json entry
    assert w.delay_offsets.get(3) == 1
    w.delay_offsets.put(3, 0)
    w.delay_offsets.put(4, 7)
    w.delay_offsets.put(20, 1)
    w.topics.remove("Unlisted")
    w.topics.get("Narrow").queues = 2
    w.close()
    cfg = dst / "config"
    shutil.copyfile(cfg / "subscriptionGroup.json", cfg / "subscriptionGroup.json.bak")
    (cfg / "subscriptionGroup.json").write_text("")
    (dst / "checkpoint").unlink()


def build_broken_configs(dst: Path, work: Path) -> None:
    """delayOffset.json cut short with no .bak; topics.json and its .bak gone."""
    w, b, p = _broker(dst)
    _rounds(b, p, {"Plain": 2}, 2)
    w.close()
    cfg = dst / "config"
    text = (cfg / "delayOffset.json").read_text()
    (cfg / "delayOffset.json").write_text(text[: len(text) // 2])
    for name in ("delayOffset.json.bak", "topics.json", "topics.json.bak"):
        (cfg / name).unlink(missing_ok=True)


def _lag_script(root: Path, tail: bool, crash: bool) -> None:
    """Sends, a level-1 delay, then (``tail``) its delivery and more sends: the two builds share every byte of
    the commitlog up to the tail."""
    w, b, p = _broker(root, tick=13, mappedFileSizeCommitLog=16 * KIB, maxHashSlotNum=32, maxIndexNum=128)
    _rounds(b, p, {"Lag": 2}, 8)
    delayed = b.send(p, "Lag", b"delayed", tags="TagD", keys="delayed", delay_level=1, queue_id=0).record
    _rounds(b, p, {"Lag": 2}, 2)
    if tail:
        b.deliver_due(delayed.store_timestamp + 1_000)
        _rounds(b, p, {"Lag": 2, "LagTail": 1}, 3)
    w.crash() if crash else w.close()


def _lag_splice(dst: Path, work: Path, part: str, tail: bool, crash: bool) -> None:
    """The ``_lag_script`` store (``tail``, ``crash``) with its ``part`` folder taken from the other build
    (the other ``tail``, stopped cleanly)."""
    _lag_script(dst, tail=tail, crash=crash)
    donor = work / f"lag-{part}"
    _lag_script(donor, tail=not tail, crash=False)
    shutil.rmtree(dst / part)
    shutil.copytree(donor / part, dst / part)


def build_dispatch_lag(dst: Path, work: Path) -> None:
    """A killed broker whose reput service was behind: consume queues, index, configs and checkpoint of the
    first part of the traffic, the commitlog of all of it (a delivered delay included)."""
    _lag_splice(dst, work, "commitlog", tail=False, crash=True)


def build_index_lag(dst: Path, work: Path) -> None:
    """A cleanly stopped store whose index files lack the last messages (consume queues complete)."""
    _lag_splice(dst, work, "index", tail=True, crash=False)


def build_no_index(dst: Path, work: Path) -> None:
    w, b, p = _broker(dst, messageIndexEnable=False)
    _rounds(b, p, {"NoIndex": 2}, 3)
    w.close()


def build_commit_without_op(dst: Path, work: Path) -> None:
    """A broker killed between a commit and its op record; a raw PREPARED record never resolved."""
    w, b, p = _broker(dst, tick=7)
    b.send(p, "Pay", b"plain", tags="TagP", keys="pay-0", queue_id=0)
    half = b.send_half(p, "Pay", b"half", tags="TagP", keys="pay-tx", queue_id=0).record
    committed = dataclasses.replace(half, topic="Pay", queue_id=0, store_timestamp=b.clock(), body_crc=None,
                                    sys_flag=(half.sys_flag & ~L.TRANSACTION_MASK) | L.TRANSACTION_COMMIT_TYPE,
                                    prepared_transaction_offset=half.physical_offset)
    w.append(committed)
    w.append(Message(topic="Pay", queue_id=1, body=b"raw prepared", sys_flag=L.TRANSACTION_PREPARED_TYPE,
                     properties_raw="KEYS\x01pay-raw", born_timestamp=b.clock(), born_host=p.born_host,
                     store_timestamp=b.clock(), store_host=w.config.storeHost))
    w.crash()


def build_index_geometry(dst: Path, work: Path) -> None:
    w, b, p = _broker(dst, tick=3, maxHashSlotNum=100, maxIndexNum=300)
    _rounds(b, p, {"Geo": 2}, 30)
    w.close()


BUILDERS = {
    "gen": build_gen,
    "gen-crashed": lambda dst, work: build_gen(dst, work, crash=True),
    **{f"dmg-{k.replace('_', '-')}": build_damage(k) for k in (
        "torn_tail", "flip_body_bit", "zero_page", "truncate_segment", "bad_magic", "bad_crc",
        "delete_consume_queue", "wrong_cq_size", "stale_index_entry")},
    "forged-records": build_forged_records,
    "forged-segment-files": build_segment_files,
    "forged-no-commitlog": build_no_commitlog,
    "forged-cq-units": build_forged_cq_units,
    "forged-index-entries": build_forged_index_entries,
    "forged-configs": build_forged_configs,
    "forged-broken-configs": build_broken_configs,
    "flows": build_flows,
    "dispatch-lag": build_dispatch_lag,
    "index-lag": build_index_lag,
    "no-index": build_no_index,
    "txn-commit-without-op": build_commit_without_op,
    "index-geometry-100x300": build_index_geometry,
}


# ---------------------------------------------------------------------------------------------------------
# The corpus


def source_stamp(fixtures: Path) -> str:
    h = hashlib.sha256(f"{CORPUS_FORMAT}\n{fixtures}\n".encode())
    for rel in STAMP_SOURCES:
        p = REPO / rel
        for f in sorted(p.rglob("*.py")) if p.is_dir() else [p]:
            h.update(f"{f.relative_to(REPO)}\n".encode())
            h.update(f.read_bytes())
    return h.hexdigest()


def tree_digest(root: Path) -> str:
    """sha256 over every file under ``root`` (relative path, length, bytes), symlinks not followed."""
    h = hashlib.sha256()
    for p in sorted(root.rglob("*")):
        if p.is_file() and not p.is_symlink():
            h.update(f"{p.relative_to(root)}\0{p.stat().st_size}\0".encode())
            with open(p, "rb") as f:
                for chunk in iter(lambda: f.read(1 << 20), b""):
                    h.update(chunk)
    return h.hexdigest()


def store_digests(stores: Path) -> dict[str, str]:
    """Per store: the tree digest of a writer-built store; ``fixture:<name>`` for a fixture (read in place, so
    not hashed here: the fixture tests pin those files)."""
    out = {}
    for d in sorted(stores.iterdir()):
        out[d.name] = f"fixture:{d.name}" if d.is_symlink() else tree_digest(d)
    return out


def build_corpus(corpus: Path, fixtures: Path | None = None, *, force: bool = False, log=print) -> Path:
    """Build (or reuse) the corpus at ``corpus``; returns the folder of store roots (``corpus/stores``)."""
    fixtures = Path(fixtures or default_fixtures()).resolve()
    corpus = Path(corpus).resolve()
    stamp = source_stamp(fixtures)
    meta = corpus / "CORPUS.json"
    if not force and meta.is_file() and json.loads(meta.read_text()).get("stamp") == stamp:
        return corpus / "stores"
    if corpus.exists() and not meta.is_file() and any(corpus.iterdir()):
        raise FileExistsError(f"{corpus} is not empty and holds no corpus (no CORPUS.json): not replacing it")
    for name, rel in FIXTURES.items():
        if not (fixtures / rel / "commitlog").is_dir():
            raise FileNotFoundError(f"fixture store {fixtures / rel} not found (set ROCKETMQ_FIXTURES)")
    tmp = corpus.with_name(corpus.name + f".building-{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    try:
        stores, work = tmp / "stores", tmp / "work"
        stores.mkdir(parents=True)
        work.mkdir()
        for name, rel in FIXTURES.items():
            (stores / name).symlink_to(fixtures / rel, target_is_directory=True)
        for name, build in BUILDERS.items():
            log(f"audit-pin: building {name}")
            build(stores / name, work)
        shutil.rmtree(work)
        meta_data = {"stamp": stamp, "stores": store_digests(stores)}
        (tmp / "CORPUS.json").write_text(json.dumps(meta_data, indent=1, sort_keys=True) + "\n")
        if corpus.exists():
            shutil.rmtree(corpus)
        tmp.rename(corpus)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return corpus / "stores"


# ---------------------------------------------------------------------------------------------------------
# Running an engine


def run_audits(spark, stores: Path, out_root: Path, engine: str = "jobs.audit", runs: dict | None = None,
               log=print) -> dict[str, tuple[Path, object]]:
    """Every run of RUNS with the engine module's ``run(spark, args)``; returns {run: (out dir, result)}."""
    module = importlib.import_module(engine)
    out = {}
    for name, (paths, extra) in (runs or RUNS).items():
        target = Path(out_root) / name
        argv = ["--store", *[str(stores if p == "." else stores / p) for p in paths], "--out", str(target),
                *ALWAYS_ARGS, *extra]
        log(f"audit-pin: run {name} with {engine}: {len(paths)} path(s) {' '.join(extra)}")
        out[name] = (target, module.run(spark, module.build_parser().parse_args(argv)))
    return out


# ---------------------------------------------------------------------------------------------------------
# Normalizing outputs


class _Paths:
    """Absolute paths in values, made relative: ``<out>/...`` and ``<corpus>/...`` (a fixture's own folder too,
    as the path of its symlink in the corpus)."""

    def __init__(self, out: Path, corpus: Path):
        roots = {str(Path(out).absolute()): "<out>", str(Path(out).resolve()): "<out>",
                 str(Path(corpus).absolute()): "<corpus>", str(Path(corpus).resolve()): "<corpus>",
                 # the console script the printed commands start with (runtime.cli.console_command)
                 str(Path(sys.executable).parent): "<bin>"}
        stores = Path(corpus) / "stores"
        for link in (d for d in stores.iterdir() if d.is_symlink()) if stores.is_dir() else ():
            roots[str(link.resolve())] = f"<corpus>/stores/{link.name}"
        self.roots = sorted(roots.items(), key=lambda r: -len(r[0]))

    def __call__(self, text: str) -> str:
        for root, name in self.roots:
            if root in text:
                text = text.replace(root + os.sep, name + "/").replace(root, name)
        return text


def _plain(value, paths: _Paths):
    """A JSON-able, machine-independent form of one value read from Parquet or JSON."""
    if isinstance(value, str):
        return paths(value)
    if isinstance(value, float):
        return value if math.isfinite(value) else repr(value)
    if isinstance(value, (bytes, bytearray)):
        return {"hex": bytes(value).hex()}
    if isinstance(value, (dt.datetime, dt.date)):
        return value.isoformat()
    if isinstance(value, dict):
        return {str(k): _plain(v, paths) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v, paths) for v in value]
    return value


def _sort_key(row: dict, columns: list[str]):
    def one(v):
        if v is None:
            return (0, 0, "")
        if isinstance(v, bool):
            return (1, int(v), "")
        if isinstance(v, (int, float)):
            return (1, v, "")
        if isinstance(v, str):
            return (2, 0, v)
        return (3, 0, json.dumps(v, sort_keys=True))
    return tuple(one(row.get(c)) for c in columns)


def read_parquet(path: Path, drop: tuple, paths: _Paths) -> tuple[list, list[str]]:
    """(schema as [name, type] pairs, rows as canonical JSON lines sorted by all columns)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    table = pq.read_table(path)
    fields = [f for f in table.schema if f.name not in drop]
    maps = {f.name for f in fields if pa.types.is_map(f.type)}
    rows = []
    for r in table.select([f.name for f in fields]).to_pylist():
        for m in maps:
            if r[m] is not None:
                r[m] = dict(sorted(r[m]))
        rows.append({k: _plain(v, paths) for k, v in r.items()})
    columns = [f.name for f in fields]
    rows.sort(key=lambda r: _sort_key(r, columns))
    return [[f.name, str(f.type)] for f in fields], [json.dumps(r, sort_keys=True, ensure_ascii=False) for r in rows]


def normalize_summary(summary: dict, result, paths: _Paths) -> dict:
    s = _plain({k: v for k, v in summary.items() if k not in SUMMARY_VOLATILE}, paths)
    s["inputs"] = sorted(({k: v for k, v in i.items() if k != "mtime_ns"} for i in s.get("inputs", [])),
                         key=lambda i: i["path"])
    if result is not None:
        s["result"] = {"exit_code": result.exit_code, "line": paths(getattr(result, "line", "") or result.summary)}
    return s


def normalize_run(out: Path, corpus: Path, result=None) -> dict:
    """One run's outputs: {"schemas": {...}, "summary": {...}, "tables": {name: [json lines]}} with tables
    ``findings``, ``metrics`` and ``tables/<name>``."""
    out = Path(out)
    paths = _Paths(out, corpus)
    drop = ("run_id", "run_time")
    schemas, tables = {}, {}
    names = ["findings", "metrics"]
    if (out / "tables").is_dir():
        names += sorted(f"tables/{p.name}" for p in (out / "tables").iterdir() if p.is_dir())
    for name in names:
        schemas[name], tables[name] = read_parquet(out / name, drop, paths)
    summary = normalize_summary(json.loads((out / "summary.json").read_text()), result, paths)
    return {"schemas": schemas, "summary": summary, "tables": tables}


def normalize_all(outputs: dict, stores: Path) -> dict:
    corpus = Path(stores).parent
    return {name: normalize_run(out, corpus, result) for name, (out, result) in outputs.items()}


# ---------------------------------------------------------------------------------------------------------
# Goldens


def _gz_lines(path: Path, lines: list[str]) -> None:
    buf = io.BytesIO()
    with gzip.GzipFile(filename="", mode="wb", fileobj=buf, mtime=0, compresslevel=9) as gz:
        gz.write("".join(f"{line}\n" for line in lines).encode("utf-8"))
    path.write_bytes(buf.getvalue())


def _read_gz_lines(path: Path) -> list[str]:
    with gzip.open(path, "rt", encoding="utf-8") as f:
        return [line.rstrip("\n") for line in f]


def _file_of(table: str) -> str:
    return table.replace("/", "__") + ".jsonl.gz"


def write_golden(normalized: dict, golden: Path, corpus_meta: dict) -> None:
    golden = Path(golden)
    if golden.exists() and any(golden.iterdir()):
        if not (golden / "corpus.json").is_file():
            raise FileExistsError(f"{golden} is not empty and holds no goldens (no corpus.json): not replacing it")
        shutil.rmtree(golden)
    golden.mkdir(parents=True, exist_ok=True)
    (golden / "corpus.json").write_text(json.dumps(corpus_meta["stores"], indent=1, sort_keys=True) + "\n")
    for run, data in normalized.items():
        d = golden / run
        d.mkdir()
        (d / "schemas.json").write_text(json.dumps(data["schemas"], indent=1, sort_keys=True) + "\n")
        summary = {k: v for k, v in data["summary"].items() if k != "inputs"}
        (d / "summary.json").write_text(json.dumps(summary, indent=1, sort_keys=True, ensure_ascii=False) + "\n")
        _gz_lines(d / "summary-inputs.jsonl.gz", [json.dumps(i, sort_keys=True) for i in data["summary"]["inputs"]])
        for table, lines in data["tables"].items():
            _gz_lines(d / _file_of(table), lines)


def read_golden(golden: Path) -> tuple[dict, dict]:
    golden = Path(golden)
    corpus = json.loads((golden / "corpus.json").read_text())
    out = {}
    for d in sorted(p for p in golden.iterdir() if p.is_dir()):
        schemas = json.loads((d / "schemas.json").read_text())
        summary = json.loads((d / "summary.json").read_text())
        summary["inputs"] = [json.loads(line) for line in _read_gz_lines(d / "summary-inputs.jsonl.gz")]
        out[d.name] = {"schemas": schemas, "summary": summary,
                       "tables": {t: _read_gz_lines(d / _file_of(t)) for t in schemas}}
    return out, corpus


GROUP_BY = {"findings": "check", "metrics": "metric"}  # the column a table's differences are listed by
EXAMPLES = 3


def _short(line: str, width: int = 400) -> str:
    return line if len(line) <= width else line[:width] + "..."


def _table_diff(table: str, want: list[str], got: list[str]) -> list[str]:
    missing, extra = Counter(want) - Counter(got), Counter(got) - Counter(want)
    if not missing and not extra:
        return []
    key = GROUP_BY.get(table, "broker")
    groups: dict[str, tuple[list, list]] = {}
    for lines, side in ((missing, 0), (extra, 1)):
        for line, n in sorted(lines.items()):
            g = str(json.loads(line).get(key))
            groups.setdefault(g, ([], []))[side].extend([line] * n)
    out = [f"  {table}: {sum(missing.values())} row(s) missing, {sum(extra.values())} extra "
           f"(golden {len(want)}, now {len(got)}); by {key}:"]
    for g, (miss, ext) in sorted(groups.items()):
        out.append(f"    {key}={g}: {len(miss)} missing, {len(ext)} extra")
        out += [f"      - {_short(line)}" for line in miss[:EXAMPLES]]
        out += [f"      + {_short(line)}" for line in ext[:EXAMPLES]]
    return out


def _value_diff(path: str, want, got, out: list[str], limit: int = 40) -> None:
    if len(out) >= limit or want == got:
        return
    if isinstance(want, dict) and isinstance(got, dict):
        for k in sorted(set(want) | set(got), key=str):
            if k not in got:
                out.append(f"    {path}.{k}: missing (golden {_short(json.dumps(want[k]), 200)})")
            elif k not in want:
                out.append(f"    {path}.{k}: extra ({_short(json.dumps(got[k]), 200)})")
            else:
                _value_diff(f"{path}.{k}", want[k], got[k], out, limit)
        return
    if isinstance(want, list) and isinstance(got, list) and len(want) == len(got):
        for i, (a, b) in enumerate(zip(want, got)):
            _value_diff(f"{path}[{i}]", a, b, out, limit)
        return
    out.append(f"    {path}: golden {_short(json.dumps(want), 200)}, now {_short(json.dumps(got), 200)}")


def compare(normalized: dict, golden: Path, corpus_meta: dict | None = None) -> list[str]:
    """Readable differences between normalized outputs and the goldens ([] when equal)."""
    want_all, want_corpus = read_golden(golden)
    out = []
    if corpus_meta is not None and corpus_meta["stores"] != want_corpus:
        changed = sorted(k for k in set(want_corpus) | set(corpus_meta["stores"])
                         if want_corpus.get(k) != corpus_meta["stores"].get(k))
        out.append(f"NOTE: the corpus differs from the one the goldens were made from (stores: {', '.join(changed)}): "
                   "a writer or corpus change, not necessarily the engine's; regenerate the goldens with "
                   "--write if that change is deliberate")
    for run in sorted(set(want_all) | set(normalized)):
        if run not in normalized or run not in want_all:
            out.append(f"run {run}: {'missing' if run not in normalized else 'not in the goldens'}")
            continue
        want, got, lines = want_all[run], normalized[run], []
        for table in sorted(set(want["schemas"]) | set(got["schemas"])):
            if table not in got["schemas"]:
                lines.append(f"  {table}: missing")
                continue
            if table not in want["schemas"]:
                lines.append(f"  {table}: not in the goldens ({len(got['tables'][table])} rows)")
                continue
            if want["schemas"][table] != got["schemas"][table]:
                lines.append(f"  {table}: columns differ: golden {want['schemas'][table]}, now {got['schemas'][table]}")
            lines += _table_diff(table, want["tables"][table], got["tables"][table])
        summary: list[str] = []
        _value_diff("summary", want["summary"], got["summary"], summary)
        if summary:
            lines += ["  summary.json:"] + summary
        if lines:
            out += [f"run {run}:"] + lines
    return out


def coverage(normalized: dict) -> list[str]:
    """Findings per check and store (broker) of every run, and the documented check ids no run produces."""
    out, seen = [], set()
    for run, data in normalized.items():
        counts = Counter()
        for line in data["tables"]["findings"]:
            r = json.loads(line)
            counts[(r["check"], r["broker"])] += 1
            seen.add(r["check"])
        out.append(f"run {run}: {sum(counts.values())} findings")
        by_check: dict[str, list] = {}
        for (check, broker), n in sorted(counts.items()):
            by_check.setdefault(check, []).append(f"{broker} {n}")
        out += [f"  {check}: {', '.join(v)}" for check, v in by_check.items()]
    documented = documented_checks()
    missing = [c for c in documented if c not in seen]
    out.append(f"declared check ids never produced ({len(missing)} of {len(documented)}): "
               f"{', '.join(missing) or '-'}")
    return out


def documented_checks() -> list[str]:
    """Every check id the audit's registry declares (jobs/audit/findings.py), for --coverage only."""
    from jobs.audit.checks import load_all
    from jobs.audit.findings import CHECKS

    load_all()
    return sorted(CHECKS)


# ---------------------------------------------------------------------------------------------------------
# Command line


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--corpus", metavar="DIR", help="the corpus cache folder (built when missing or stale; needed "
                                                   "by all but --coverage)")
    p.add_argument("--fixtures", metavar="DIR", help="the folder holding basic/, broker/, recovered-zero-page/ "
                                                     "(default: $ROCKETMQ_FIXTURES/rocketmq-4.9.7 or "
                                                     "../shared/fixtures/rocketmq-4.9.7)")
    p.add_argument("--engine", default="jobs.audit", help="the audit module whose run(spark, args) is pinned "
                                                          "(default jobs.audit)")
    what = p.add_mutually_exclusive_group(required=True)
    what.add_argument("--check", metavar="GOLDEN_DIR", help="compare with the goldens; exit 1 on differences")
    what.add_argument("--write", metavar="GOLDEN_DIR", help="(re)write the goldens")
    what.add_argument("--coverage", metavar="GOLDEN_DIR", help="findings per check and store in the goldens")
    what.add_argument("--build-only", action="store_true", help="only build (or reuse) the corpus")
    p.add_argument("--rebuild", action="store_true", help="rebuild the corpus even if it is up to date")
    p.add_argument("--keep", metavar="OUT", help="keep the raw audit outputs here (default: a temporary folder)")
    args = p.parse_args(argv)
    log = lambda m: print(m, file=sys.stderr, flush=True)  # noqa: E731

    if args.coverage:
        normalized, _ = read_golden(Path(args.coverage))
        print("\n".join(coverage(normalized)))
        return 0
    if not args.corpus:
        p.error("--corpus DIR is needed")
    if args.keep and Path(args.keep).exists() and any(Path(args.keep).iterdir()):
        p.error(f"--keep {args.keep}: not empty")
    stores = build_corpus(Path(args.corpus), Path(args.fixtures) if args.fixtures else None, force=args.rebuild,
                          log=log)
    meta = json.loads((stores.parent / "CORPUS.json").read_text())
    if args.build_only:
        print(stores)
        return 0
    import tempfile

    from runtime.session import build_session

    spark = build_session("audit-pin", master="local[2]", test_profile=True)
    tmp = None if args.keep else tempfile.mkdtemp(prefix="audit-pin-")
    out_root = Path(args.keep or tmp)
    try:
        normalized = normalize_all(run_audits(spark, stores, out_root, args.engine, log=log), stores)
    finally:
        spark.stop()
        if tmp:
            shutil.rmtree(tmp, ignore_errors=True)
    if args.write:
        write_golden(normalized, Path(args.write), meta)
        print("\n".join(coverage(normalized)))
        print(f"audit-pin: goldens written to {args.write}")
        return 0
    diff = compare(normalized, Path(args.check), meta)
    if diff:
        print("\n".join(diff))
        print(f"audit-pin: {args.engine} differs from the goldens in {args.check}")
        return 1
    print(f"audit-pin: {args.engine} reproduces the goldens in {args.check}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
