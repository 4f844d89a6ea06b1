"""Classic batches in the writer (``CommitLog.putMessages``: one put, never split across segments) and the
commitlog layout kept through ``dump --what commitlog`` -> ``write``: the broker-flow batch API, the JSON Lines
``batch`` field, the early rolls a dump marks, the bulk path's batches, and the fixture that shows an early roll.
"""
from __future__ import annotations

import ast
import base64
import json
import random
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from store_format import layout as L
from store_format.__main__ import mark_early_rolls
from store_format.write.broker import BatchItem, Broker, ManualClock, Producer
from store_format.codec import encoded_size
from store_format.write.bulk import RecordBatch, append_many
from store_format.commitlog import infer_segment_size, list_segments
from store_format.errors import WriterError
from store_format.message import Message
from store_format.store import Store
from store_format.write.writer import StoreWriter, WriterConfig

from .conftest import FIXTURES, REPO
from .support.writer_support import files, tree_digest

SEGMENT = 8192
CONFIG = WriterConfig(mappedFileSizeCommitLog=SEGMENT, mappedFileSizeConsumeQueue=200, maxHashSlotNum=16,
                      maxIndexNum=40)


def run_cli(*args, stdin=None):
    return subprocess.run([sys.executable, "-m", "store_format", *map(str, args)], cwd=REPO, input=stdin,
                          capture_output=True, text=True, timeout=120)


def write_conf(path: Path, cfg: WriterConfig) -> Path:
    path.write_text("".join(f"{k}={v}\n" for k, v in cfg.to_dict().items()))
    return path


def dump_rows(root: Path) -> list[dict]:
    r = run_cli("dump", root, "--what", "commitlog")
    assert r.returncode == 0, r.stderr
    return [json.loads(x) for x in r.stdout.splitlines()]


def rolls(rows: list[dict]) -> list[tuple[int, bool]]:
    """(blank size, early?) of every end-of-file blank: early when the next record + 8 bytes would have fitted."""
    out = []
    for blank, nxt in zip(rows, rows[1:]):
        if blank["kind"] == "blank" and nxt["kind"] == "message":
            out.append((blank["store_size"], nxt["store_size"] + L.END_FILE_MIN_BLANK_LENGTH <= blank["store_size"]))
    return out


def broker_store(root: Path, seed: int = 3, sends: int = 120) -> None:
    """Plain sends and batches of 2-5 (two producers, one on IPv6) through the broker flows, 8 KiB segments."""
    w = StoreWriter(root, CONFIG, clock=ManualClock(1_700_000_000_000, tick=7))
    broker = Broker(w)
    rnd = random.Random(seed)
    producers = [Producer(), Producer(born_host="[2001:db8::5]:40000", client_ip="2001:db8::5")]
    for i in range(sends):
        p = producers[i % 3 == 0]
        if rnd.random() < 0.3:
            items = [BatchItem(rnd.randbytes(rnd.randint(100, 900)), tags="TB", keys=f"k{i}-{j}")
                     for j in range(rnd.randint(2, 5))]
            broker.send_batch(p, "Batches", items)
        else:
            broker.send(p, "Plain", b"p" * rnd.randint(50, 1500), tags="TP", keys=f"p{i}")
    w.close()


# --------------------------------------------------------------------------------------------------
# Round trip: broker-flow batches -> dump -> write


@pytest.mark.slow
def test_broker_batches_round_trip_through_dump_and_write_byte_for_byte(tmp_path):
    """Batches that cross segment ends roll the whole batch (some rolls early: the first item alone would
    have fitted); the dump marks those, and ``write`` lays the same store down again: every file identical
    (commitlog segments, consume queues, index files with their names, checkpoint, config/*.json, lock).
    Without the dump's ``batch`` values the first early roll is lost and the commitlog differs from there."""
    src, out = tmp_path / "src", tmp_path / "out"
    broker_store(src)
    rows = dump_rows(src)
    found = rolls(rows)
    assert sum(early for _, early in found) >= 3 and sum(not early for _, early in found) >= 3, found
    assert len(list_segments(src / "commitlog")) > 10
    groups = {}
    for r in rows:
        if "batch" in r:
            groups.setdefault(r["batch"], []).append(r)
    assert len(groups) == sum(early for _, early in found)
    for first_offset, members in groups.items():
        assert members[0]["file_position"] == 0 and members[0]["physical_offset"] == first_offset
        assert len({(m["topic"], m["queue_id"], m["store_timestamp"]) for m in members}) == 1  # one put
    dump_file = tmp_path / "dump.jsonl"
    dump_file.write_text("".join(json.dumps(r) + "\n" for r in rows))  # blank and stop rows included
    conf = write_conf(tmp_path / "broker.conf", CONFIG)
    r = run_cli("write", out, "--input", dump_file, "--config", conf)
    assert r.returncode == 0, r.stderr
    assert tree_digest(out) == tree_digest(src)
    assert files(out, "index") and len(files(out, "consumequeue")) > 4  # several index and queue files rolled
    # the control: the same records as single puts put the first early-rolled batch's first item in the
    # segment the broker had ended with a blank
    singles = tmp_path / "singles.jsonl"
    singles.write_text("".join(_unbatched(json.dumps(r)) for r in rows))
    r = run_cli("write", tmp_path / "single", "--input", singles, "--config", conf)
    assert r.returncode == 0, r.stderr
    ours = [p.read_bytes() for p in files(tmp_path / "single", "commitlog")]
    theirs = [p.read_bytes() for p in files(src, "commitlog")]
    first_early = next(int(m[0]["physical_offset"]) for m in groups.values()) // SEGMENT - 1
    assert ours[:first_early] == theirs[:first_early] and ours[first_early] != theirs[first_early]


def test_broker_batch_larger_than_a_segment_is_refused_before_anything_is_written(tmp_path):
    w = StoreWriter(tmp_path / "s", CONFIG, clock=ManualClock())
    broker = Broker(w)
    broker.send(Producer(), "T", b"x")
    with pytest.raises(WriterError, match=r"batch is \d+ bytes; a 8192-byte commitlog segment holds at most 8184"):
        broker.send_batch(Producer(), "T", [BatchItem(b"y" * 3000) for _ in range(3)])
    assert (w.cur_base, w.messages_written) == (0, 1)
    w.close()


# --------------------------------------------------------------------------------------------------
# The JSON Lines ``batch`` field


def _line(body_len: int, batch=None, **kw) -> str:
    d = {"topic": "T", "queue_id": 1, "body": base64.b64encode(b"b" * body_len).decode(),
         "store_timestamp": 1_700_000_000_000, "born_timestamp": 1_699_999_999_999, **kw}
    if batch is not None:
        d["batch"] = batch
    return json.dumps(d) + "\n"


def _unbatched(line: str) -> str:
    return json.dumps({k: v for k, v in json.loads(line).items() if k != "batch"}) + "\n"


@pytest.mark.slow
def test_batch_field_moves_the_whole_group_to_the_next_segment(tmp_path):
    """A 600-byte record, then three that would fit one by one: as single puts the first two stay in
    segment 0; as one ``batch`` the blank comes right after the first record and the group starts segment 1,
    with consecutive queue offsets."""
    conf = write_conf(tmp_path / "c.conf", WriterConfig(mappedFileSizeCommitLog=1200))
    head = _line(600 - encoded_size(Message(topic="T")))
    group = [_line(180, batch="b1"), _line(180, batch="b1"), _line(180, batch="b1")]
    for name, lines in (("single", [head] + [_unbatched(x) for x in group]), ("batch", [head] + group)):
        r = run_cli("write", tmp_path / name, "--input", "-", "--config", conf, stdin="".join(lines))
        assert r.returncode == 0, r.stderr
    single = [(f.segment, f.file_position, f.kind) for f in Store(tmp_path / "single").walk_commitlog()]
    batch = list(Store(tmp_path / "batch").walk_commitlog())
    assert [k for _, _, k in single] == ["message", "message", "message", "blank", "message", "stop"]
    assert [(f.segment, f.file_position, f.kind) for f in batch][:3] == [
        ("00000000000000000000", 0, "message"), ("00000000000000000000", 600, "blank"),
        ("00000000000000001200", 0, "message")]
    assert [f.message.queue_offset for f in batch if f.kind == "message"] == [0, 1, 2, 3]
    assert [f.kind for f in batch] == ["message", "blank", "message", "message", "message", "stop"]
    # the dump of the batched store marks that group, and writing the dump back gives the same store
    rows = dump_rows(tmp_path / "batch")
    assert [r.get("batch") for r in rows if r["kind"] == "message"] == [None, 1200, 1200, 1200]  # 2 x 272 fit
    r = run_cli("write", tmp_path / "again", "--input", "-", "--config", conf,
                stdin="".join(json.dumps(x) + "\n" for x in rows))
    assert r.returncode == 0, r.stderr
    assert [p.read_bytes() for p in files(tmp_path / "again", "commitlog")] == \
        [p.read_bytes() for p in files(tmp_path / "batch", "commitlog")]


def test_batch_groups_are_consecutive_lines_and_values_are_strings_or_integers(tmp_path):
    """Equal values apart are two puts; 1 and "1" are different values; other JSON values are refused."""
    conf = write_conf(tmp_path / "c.conf", WriterConfig(mappedFileSizeCommitLog=1200))
    lines = [_line(180, batch=7), _line(180, batch=7), _line(10), _line(180, batch=7), _line(180, batch="7")]
    r = run_cli("write", tmp_path / "s", "--input", "-", "--config", conf, stdin="".join(lines))
    assert r.returncode == 0, r.stderr
    for bad in (True, 1.5, [1], {"a": 1}):
        r = run_cli("write", tmp_path / f"bad{bad!r}", "--input", "-", stdin=_line(1) + _line(1, batch=bad))
        assert r.returncode == 2 and "line 2: batch" in r.stderr, r.stderr


@pytest.mark.parametrize("lines, message", [
    # three 2992-byte records are more than one 8192-byte segment holds
    ([_line(10), _line(2900, batch="big"), _line(2900, batch="big"), _line(2900, batch="big"), _line(10)],
     r"lines 2-4 \(batch 'big'\): batch is \d+ bytes; a 8192-byte commitlog segment holds at most 8184"),
    ([_line(10, batch=3), _line(10, batch=3, queue_id=2)],
     r"lines 1-2 \(batch 3\): batch item 2: queue_id 2 differs from the first item's 1"),
    ([_line(10, batch=3), _line(10, batch=3, store_timestamp=1_700_000_000_001)],
     r"lines 1-2 \(batch 3\): batch item 2: store_timestamp"),
    ([_line(10, batch=3, sys_flag=L.TRANSACTION_PREPARED_TYPE)] * 2,
     r"lines 1-2 \(batch 3\): transaction type PREPARED: putMessages refuses"),
])
def test_a_batch_group_the_broker_would_refuse_is_refused_naming_its_lines(tmp_path, lines, message):
    root = tmp_path / "s"
    r = run_cli("write", root, "--input", "-", "--config", write_conf(tmp_path / "c.conf", CONFIG),
                stdin="".join(lines))
    assert r.returncode == 2, r.stderr
    assert re.search(message, r.stderr), r.stderr
    assert (root / "abort").exists()  # never a store that claims a clean shutdown
    assert not any(m for m in Store(root).messages())  # refused before anything of its chunk was written


def test_write_skips_a_dumps_layout_rows_and_refuses_a_corrupt_one(tmp_path):
    rows = [{"kind": "blank", "segment": "0", "file_position": 0, "physical_offset": 0, "store_size": 90},
            json.loads(_line(3)), {"kind": "stop", "stop_kind": "END_OF_DATA"}]
    r = run_cli("write", tmp_path / "s", "--input", "-", stdin="".join(json.dumps(x) + "\n" for x in rows))
    assert r.returncode == 0 and "write: 1 record(s)" in r.stderr, r.stderr
    r = run_cli("write", tmp_path / "t", "--input", "-", stdin=json.dumps({"kind": "corrupt", "length": 9}) + "\n")
    assert r.returncode == 2 and "line 1: a 'corrupt' row holds no record" in r.stderr, r.stderr


# --------------------------------------------------------------------------------------------------
# The dump's early-roll marks


def _rows(*items):
    """("m", size) a message, ("b", size) a blank, ("s",) a stop; offsets follow the 1000-byte segments."""
    out, phy = [], 0
    for it in items:
        if it[0] == "m":
            out.append({"kind": "message", "store_size": it[1], "physical_offset": phy, "file_position": phy % 1000})
            phy += it[1]
        elif it[0] == "b":
            out.append({"kind": "blank", "store_size": it[1], "physical_offset": phy, "file_position": phy % 1000})
            phy += it[1]
        else:
            out.append({"kind": "stop", "physical_offset": phy, "file_position": phy % 1000})
    return out


@pytest.mark.parametrize("items, marked", [
    # an ordinary roll: the next record + 8 did not fit in the 100 bytes left
    ([("m", 900), ("b", 100), ("m", 93), ("m", 50), ("s",)], [None, None]),
    # early: 92 + 8 fits in 100, 92 + 30 + 8 does not: those two were one put
    ([("m", 900), ("b", 100), ("m", 92), ("m", 30), ("m", 40), ("s",)], [1000, 1000, None]),
    # early, and the fewest that do not fit are three
    ([("m", 900), ("b", 100), ("m", 40), ("m", 40), ("m", 40), ("m", 40), ("s",)], [1000, 1000, 1000, None]),
    # every record up to the stop fits: no put of them explains the roll, nothing is marked
    ([("m", 900), ("b", 100), ("m", 40), ("m", 40), ("s",)], [None, None]),
    # the rows after a blank end with another blank before they stop fitting: looked at in turn, in order
    ([("m", 900), ("b", 100), ("m", 40), ("b", 960), ("m", 60), ("m", 900), ("s",)], [None, 2000, 2000]),
])
def test_mark_early_rolls(items, marked):
    """The ``batch`` each message after the first gets (the blank's room is its size - 8)."""
    rows = _rows(*items)
    out = list(mark_early_rolls(iter([dict(r) for r in rows])))
    assert [{k: v for k, v in r.items() if k != "batch"} for r in out] == rows  # same rows, same order
    assert [r.get("batch") for r in out if r["kind"] == "message"][1:] == marked


# --------------------------------------------------------------------------------------------------
# The fixture that shows an early roll (RocketMQ 4.9.7 itself)


@pytest.mark.slow
def test_recovered_zero_page_fixture_early_roll_is_reproduced_byte_for_byte(tmp_path):
    """recovered-zero-page (256 KiB segments, batches) has 27 end-of-file blanks; one is early: segment
    00000000000000262144 ends at 191195 with a 70949-byte blank although the next record (430 bytes) would
    have fitted: it is the first of a 3-message batch whose first two already do not fit.  The dump marks
    those two; written back, every segment before the zeroed page is RocketMQ's byte for byte (the one
    holding the zeroed page differs from it on: the dump cannot carry zeros back, and the write stops where
    the dump's records do).  As single puts, the batch's first record would land in segment 262144."""
    src = FIXTURES / "recovered-zero-page" / "input" / "store"
    manifest = json.loads((FIXTURES / "recovered-zero-page" / "manifest.json").read_text())
    rows = dump_rows(src)
    found = rolls(rows)
    assert len(found) == 26 and [size for size, early in found if early] == [70949]  # + 1 blank before the damage
    marked = [r for r in rows if "batch" in r]
    assert [(r["segment"], r["file_position"], r["store_size"], r["queue_offset"]) for r in marked] == [
        ("00000000000000524288", 0, 430, 0), ("00000000000000524288", 430, 78268, 1)]
    conf = write_conf(tmp_path / "c.conf", WriterConfig.from_dict(manifest["storeConfig"]))
    dump_file = tmp_path / "dump.jsonl"
    dump_file.write_text("".join(json.dumps(r) + "\n" for r in rows))
    r = run_cli("write", tmp_path / "s", "--input", dump_file, "--config", conf)
    assert r.returncode == 0, r.stderr
    damaged = manifest["damage"]["segment"]
    theirs = {p.name: p for p in files(src, "commitlog")}
    ours = {p.name: p for p in files(tmp_path / "s", "commitlog")}
    intact = sorted(n for n in theirs if n < damaged)
    assert len(intact) == 26 and all(ours[n].read_bytes() == theirs[n].read_bytes() for n in intact)
    zero_at = manifest["damage"]["zeroedFrom"] - int(damaged)
    a, b = ours[damaged].read_bytes(), theirs[damaged].read_bytes()
    first_diff = next(i for i in range(len(a)) if a[i] != b[i])
    assert first_diff <= zero_at and a[:first_diff] == b[:first_diff]
    # the control: without the marks the writer keeps the batch's first record in segment 262144
    (tmp_path / "singles.jsonl").write_text("".join(_unbatched(json.dumps(r)) for r in rows))
    r = run_cli("write", tmp_path / "single", "--input", tmp_path / "singles.jsonl", "--config", conf)
    assert r.returncode == 0, r.stderr
    assert (tmp_path / "single" / "commitlog" / "00000000000000262144").read_bytes() != \
        theirs["00000000000000262144"].read_bytes()


@pytest.mark.parametrize("name", ["basic", "broker"])
def test_single_segment_fixtures_have_no_roll_and_no_marks(name):
    """basic (a 3-message batch) and broker (a batch) fit one 1 MiB segment: no blank, so nothing to mark;
    their dump -> write round trip is tests/test_writer.py::test_cli_write_round_trips_a_dump."""
    rows = dump_rows(FIXTURES / name / "store")
    assert not rolls(rows) and not any("batch" in r for r in rows)


# --------------------------------------------------------------------------------------------------
# The bulk path's batches


def _bulk_and_scalar(tmp_path, groups: list[list[Message]], cfg: WriterConfig):
    roots = []
    for mode in ("scalar", "bulk"):
        root = tmp_path / mode
        w = StoreWriter(root, cfg)
        if mode == "scalar":
            for g in groups:
                w.append_batch(g) if len(g) > 1 else w.append(g[0])
        else:
            msgs = [m for g in groups for m in g]
            ids = [k if len(g) > 1 else -1 for k, g in enumerate(groups) for _ in g]
            append_many(w, RecordBatch.from_messages(msgs, ids))
        w.close()
        roots.append(root)
    return roots


def test_bulk_batches_match_append_batch(tmp_path):
    rnd = random.Random(8)
    groups, ts = [], 1_700_000_000_000
    for i in range(300):
        ts += rnd.randint(0, 40)
        n = rnd.choice([1, 1, 1, 2, 3, 5])
        groups.append([Message(topic=f"T{i % 3}", body=rnd.randbytes(rnd.randint(10, 700)), queue_id=i % 2,
                               properties_raw=f"KEYS\x01k{i}-{j}\x02UNIQ_KEY\x01U{i:05d}{j}",
                               born_timestamp=ts - 1, born_host="10.0.0.1:4000", store_timestamp=ts,
                               store_host="10.0.0.2:10911") for j in range(n)])
    cfg = WriterConfig(mappedFileSizeCommitLog=4096, mappedFileSizeConsumeQueue=100, maxHashSlotNum=7,
                       maxIndexNum=50)
    scalar, bulk = _bulk_and_scalar(tmp_path, groups, cfg)
    assert tree_digest(scalar) == tree_digest(bulk)
    assert sum(early for _, early in rolls(dump_rows(bulk))) >= 3


def test_bulk_refuses_a_batch_the_broker_would_refuse_before_writing(tmp_path):
    base = dict(topic="T", born_timestamp=1, born_host="10.0.0.1:4000", store_timestamp=2,
                store_host="10.0.0.2:10911")
    w = StoreWriter(tmp_path / "s", WriterConfig(mappedFileSizeCommitLog=1000))
    ok = [Message(body=b"a", **base)]
    mixed = [Message(body=b"b", **base), Message(body=b"c", queue_id=1, **base)]
    with pytest.raises(WriterError, match=r"batch 1 \(records 1-2\): batch item 2: queue_id 1 differs"):
        append_many(w, RecordBatch.from_messages(ok + mixed, [-1, 1, 1]))
    big = [Message(body=b"d" * 400, **base) for _ in range(3)]
    with pytest.raises(WriterError, match=r"batch 4 \(records 1-3\): batch is \d+ bytes; a 1000-byte"):
        append_many(w, RecordBatch.from_messages(ok + big, [-1, 4, 4, 4]))
    assert (w.cur_base, w.messages_written, list(w.segments)) == (-1, 0, [])
    append_many(w, RecordBatch.from_messages(ok + mixed[:1], np.array([-1, 1])))
    w.close()
    assert len(list(Store(tmp_path / "s").messages())) == 2


# --------------------------------------------------------------------------------------------------
# Structure: the bulk path uses the writer's public interface, one way


def test_bulk_uses_only_the_writers_public_interface():
    """bulk.py reaches no underscored name of the writer (attributes, imports); writer.py never imports
    bulk (no import cycle); damage.py imports public writer names only."""
    def tree(name):
        return ast.parse((REPO / "store_format" / "write" / name).read_text(encoding="utf-8"))

    private = [node.attr for node in ast.walk(tree("bulk.py")) if isinstance(node, ast.Attribute)
               and isinstance(node.value, ast.Name) and node.value.id in ("writer", "w") and node.attr.startswith("_")]
    assert not private
    for name in ("bulk.py", "damage.py"):
        imported = [a.name for node in ast.walk(tree(name)) if isinstance(node, ast.ImportFrom)
                    and node.module == "writer" for a in node.names]
        assert not [n for n in imported if n.startswith("_")], name
    writer_imports = {node.module for node in ast.walk(tree("writer.py")) if isinstance(node, ast.ImportFrom)}
    assert "bulk" not in writer_imports and not hasattr(StoreWriter, "append_many")


# --------------------------------------------------------------------------------------------------
# Segment size, inferred in one place


def test_infer_segment_size_from_base_offset_length_pairs():
    assert infer_segment_size([]) is None
    assert infer_segment_size([(0, 0)]) is None  # an empty file is never a preallocated segment
    assert infer_segment_size([(0, 4096)]) == 4096
    assert infer_segment_size([(8192, 4096), (0, 4096), (4096, 0)]) == 4096  # the names' spacing, in any order
    assert infer_segment_size([(0, 10), (3000, 10), (1000, 10)]) == 1000


@pytest.mark.slow
def test_generated_store_with_batches_round_trips_through_dump_and_write(tmp_path):
    """The generator's traffic (its classic batches written by the bulk path, 8 KiB segments: many early rolls)
    dumped and written back: commitlog, consume queues, index files and checkpoint identical.  topics.json and
    consumerOffset.json differ: the generator creates its topics up front and commits offsets, which no record
    says."""
    conf = write_conf(tmp_path / "c.conf", CONFIG)
    r = run_cli("generate", tmp_path / "gen", "--messages", 3000, "--topics", 2, "--queues", 2, "--seed", 4,
                "--config", conf, "--quiet")
    assert r.returncode == 0, r.stderr
    rows = dump_rows(tmp_path / "gen")
    assert sum(early for _, early in rolls(rows)) >= 5
    (tmp_path / "d.jsonl").write_text("".join(json.dumps(x) + "\n" for x in rows))
    r = run_cli("write", tmp_path / "out", "--input", tmp_path / "d.jsonl", "--config", conf)
    assert r.returncode == 0, r.stderr
    src, out = tree_digest(tmp_path / "gen"), tree_digest(tmp_path / "out")
    assert src.keys() == out.keys()
    assert sorted(k for k in src if src[k] != out[k]) == ["config/consumerOffset.json", "config/topics.json"]
