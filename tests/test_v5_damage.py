"""Damage on purpose for each 5.x structure (store_format.write.damage), each found by the 5.x readers at the
position the damage names; and hostile bytes into every 5.x reader (hypothesis, small example counts): a
positioned error or a classified row, never a crash or a hang.  No Spark."""
from __future__ import annotations

import struct
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from store_format import layout as L
from store_format import lmq
from store_format import pop as P
from store_format import propcrc
from store_format import timer as T
from store_format.commitlog import list_segments, walk_buffer
from store_format.consumequeue import discover_queues, read_queue
from store_format.errors import StoreFormatError
from store_format.fs import ReadOnlyMap
from store_format.message import Message
from store_format.write import damage as D
from store_format.write.generate import Traffic5Config, config_5x, generate_store
from store_format.write.writer import WriterConfig

from .support.strategies import fuzz
from .test_v5_fixtures import records, store5


@pytest.fixture(scope="module")
def gen5(tmp_path_factory) -> Path:
    """A small generated 5.x store with every 5.x structure (timer log, POP records, LMQ queues, CRC)."""
    root = tmp_path_factory.mktemp("gen5") / "s"
    generate_store(root, Traffic5Config(messages=500, seed=7),
                   config_5x(WriterConfig(mappedFileSizeCommitLog=1 << 20, mappedFileSizeTimerLog=4096)))
    return root


def _frames(root: Path):
    out = []
    for seg in list_segments(root / "commitlog"):
        with ReadOnlyMap(seg.path) as m:
            for f in walk_buffer(m.buf, seg.name, seg.base_offset):
                if f.kind == "message":
                    out.append((seg, f))
    return out


# --------------------------------------------------------------------------------------------------
# each damage, found where it says


def test_a_timer_unit_pointing_outside_the_commitlog(tmp_path):
    d = D.timer_unit_outside_commitlog(store5("v5-timer"), tmp_path / "s")
    root = tmp_path / "s"
    end = max(f.physical_offset + f.size for _, f in _frames(root))
    outside = []
    for f in T.list_timer_log_files(root):
        a = T.read_timer_unit_arrays(f)
        hit = (a.kind == T.KIND_ENTRY) & (a.physical_offset >= end)
        outside += [(f"timerlog/{f.name}", int(p) + L.TIMER_LOG_UNIT.offset("physical_offset"))
                    for p in a.file_position[hit]]
    assert outside == [(d.path, d.position)]


def test_a_looping_chain_is_a_positioned_error_not_a_hang(tmp_path):
    d = D.looping_timer_chain(store5("v5-timer"), tmp_path / "s")
    root = tmp_path / "s"
    ends = {}
    with T.TimerLog(root) as log:
        for row in T.read_wheel_slots(root / "timerwheel").rows():
            w = T.walk_chain(log, row["last_pos"])
            ends[w.end] = ends.get(w.end, 0) + 1
            if w.end == "loop":
                err = w.error
    assert ends["loop"] == 1 and err.kind.value == "CYCLIC_CHAIN" and err.field == "prev_pos"
    assert (Path(err.file).name, err.position + L.TIMER_LOG_UNIT.offset("prev_pos")) == \
        (Path(d.path).name, d.position)


def test_a_timercheck_of_the_wrong_length(tmp_path):
    d = D.timercheck_wrong_length(store5("v5-timer"), tmp_path / "s", length=40)
    cp = T.read_timer_checkpoint(tmp_path / "s" / "config" / "timercheck")
    assert cp.problem.kind.value == "BAD_LENGTH" and cp.problem.position == 40 == d.position
    assert cp.last_timer_log_flush_pos == 2672 and cp.data_version_counter is None
    short = T.parse_timer_checkpoint(b"\x00" * 20, "f")
    assert short.problem.kind.value == "TRUNCATED" and short.problem.position == 20
    assert short.last_read_time_ms == 0 and short.last_timer_queue_offset is None


def test_a_pop_checkpoint_that_is_not_json(gen5, tmp_path):
    d = D.pop_checkpoint_not_json(gen5, tmp_path / "s")
    root = tmp_path / "s"
    found = []
    for seg, f in _frames(root):
        if f.message.tags == L.POP_CK_TAG:
            rr = P.read_revive_record(f.message)
            if rr.error is not None:
                found.append((f"commitlog/{seg.name}", rr.error))
    assert len(found) == 1
    path, err = found[0]
    assert err.kind.value == "BAD_JSON" and path == d.path and d.position <= err.position < d.position + d.length
    with ReadOnlyMap(root / d.path) as m:  # the record itself is intact: framing and both CRCs pass
        frames = [f for f in walk_buffer(m.buf, Path(d.path).name, int(Path(d.path).name))]
        hit = [f for f in frames if f.kind == "message" and f.file_position <= d.position < f.file_position + f.size]
        assert hit and propcrc.check_record_crc(m.buf, hit[0].file_position).status == "ok"


def test_a_crc_property_with_a_non_digit(tmp_path):
    d = D.crc_property_non_digit(store5("v5-crc"), tmp_path / "s", digit=3)
    found = []
    for seg, f in _frames(tmp_path / "s"):
        with ReadOnlyMap(seg.path) as m:
            c = propcrc.check_record_crc(m.buf, f.file_position, f.size)
        if c.status != "ok":
            found.append((f"commitlog/{seg.name}", f.file_position + c.position + 9 + 3, c.status, c.force_ok))
    assert found == [(d.path, d.position, "malformed", False)]


def test_a_bit_changed_under_the_crc_is_a_mismatch_at_its_record(tmp_path):
    d = D.flip_bit_under_crc(store5("v5-crc"), tmp_path / "s", field="store_timestamp", bit=5)
    bad = []
    for seg, f in _frames(tmp_path / "s"):
        with ReadOnlyMap(seg.path) as m:
            c = propcrc.check_record_crc(m.buf, f.file_position, f.size)
        if c.status != "ok":
            bad.append((f"commitlog/{seg.name}", f.file_position, f.size, c.status))
    assert len(bad) == 1 and bad[0][0] == d.path and bad[0][1] <= d.position < bad[0][1] + bad[0][2]
    assert bad[0][3] == "mismatch"


@pytest.mark.parametrize("helper,kind", [(D.lmq_unit_missing, "missing"), (D.lmq_unit_duplicated, "duplicated")])
def test_an_lmq_unit_missing_or_duplicated_is_where_the_prediction_and_the_queue_part(tmp_path, helper, kind):
    d = helper(store5("v5-lmq"), tmp_path / "s", "%LMQ%room2", queue_offset=7)
    root = tmp_path / "s"
    pred = lmq.predict_dispatch(records("v5-lmq"), cq_file_size=2000).units_of("%LMQ%room2")
    disk = [u for u in read_queue(discover_queues(root / "consumequeue")[("%LMQ%room2", 0)])
            if u.kind == "entry"]
    first = next(i for i, (p, q) in enumerate(zip(pred, disk)) if p.physical_offset != q.physical_offset)
    assert disk[first].file_position == d.position and first == (7 if kind == "missing" else 8)
    assert len(disk) == len(pred) + (-1 if kind == "missing" else 1)


def test_damage_refuses_what_it_cannot_do(tmp_path):
    with pytest.raises(D.DamageError):
        D.timer_unit_outside_commitlog(store5("v5-default"), tmp_path / "a")  # no timer log
    with pytest.raises(D.DamageError):
        D.crc_property_non_digit(store5("v5-default"), tmp_path / "b")  # no CRC property
    with pytest.raises(D.DamageError):
        D.crc_property_non_digit(store5("v5-crc"), tmp_path / "c", char="7")


# --------------------------------------------------------------------------------------------------
# hostile bytes


@fuzz(40)
@given(st.binary(max_size=400), st.integers(0, 2**40))
def test_timer_log_walks_of_any_bytes_agree_and_stay_in_the_file(raw, base):
    units = list(T.walk_timer_log_buffer(raw, "f", base))
    arrays = T.timer_units_of(raw, file="f", base_offset=base)
    assert [(u.kind, u.file_position, u.size, u.magic, u.prev_pos) for u in units] == \
        [(u.kind, u.file_position, u.size, u.magic, u.prev_pos) for u in arrays.units()]
    assert all(0 <= u.file_position < max(1, len(raw)) and u.timerlog_offset == base + u.file_position for u in units)
    assert sum(u.kind == "blank" for u in units) <= 1
    for u in units:
        if u.kind == "corrupt":
            assert u.error().position == u.file_position


@st.composite
def timer_logs(draw):
    """Valid-looking units with hostile prev positions and sizes, and a blank or garbage at the end."""
    n = draw(st.integers(0, 8))
    out = b""
    for i in range(n):
        prev = draw(st.sampled_from([-1, i * 52 - 52, i * 52, i * 52 + 52, 10**12, -7]))
        size = draw(st.sampled_from([52, 52, 52, 0, 51, 100]))
        magic = draw(st.sampled_from([1, 3, 5, 7, 0x10, L.BLANK_MAGIC]))
        out += struct.pack(L.TIMER_LOG_UNIT.struct, size, prev, magic, 1000, 1000, 0, 100, 7, 0)
    tail = draw(st.sampled_from([b"", struct.pack(">iqi", 16, 0, L.BLANK_MAGIC), b"\x01\x02\x03"]))
    return out + tail


@fuzz(40)
@given(timer_logs(), st.integers(-1, 600))
def test_chains_over_hostile_logs_end(tmp_path_factory, raw, start):
    d = tmp_path_factory.mktemp("tl") / "timerlog"
    d.mkdir()
    (d / ("0" * 20)).write_bytes(raw)
    with T.TimerLog(d.parent) as log:
        walk = T.walk_chain(log, start)
    assert walk.end in ("complete", "loop", "out_of_range", "corrupt")
    assert len(walk.units) <= max(0, start) // 52 + 2
    if walk.end != "complete":
        assert isinstance(walk.error, StoreFormatError) and walk.error.position is not None


@fuzz(30)
@given(st.binary(max_size=300))
def test_wheel_and_timercheck_of_any_bytes(tmp_path_factory, raw):
    d = tmp_path_factory.mktemp("w")
    (d / "timerwheel").write_bytes(raw)
    w = T.read_wheel_slots(d / "timerwheel")
    assert len(w) <= len(raw) // 32 and (w.problem is not None or len(raw) % 64 == 0)
    assert (w.slot_index * 32 + 32 <= len(raw)).all()
    cp = T.parse_timer_checkpoint(raw, "timercheck")
    assert (cp.problem is None) == (len(raw) == 4096)


@fuzz(40)
@given(st.sampled_from(["ck", "ack", "bAck"]), st.one_of(st.binary(max_size=200),
                                                          st.text(max_size=80).map(str.encode),
                                                          st.just(b'{"so":"x"}'), st.just(b'{"aol":[1,"a"]}'),
                                                          st.just(b"[1,2]")))
def test_pop_bodies_of_any_bytes_parse_or_fail_positioned(tag, body):
    try:
        v = P.parse_pop_body(tag, body, file="seg", position=1000)
        assert isinstance(v, (P.PopCheckPoint, P.AckMsg))
    except P.PopBodyError as e:
        assert e.file == "seg" and e.kind.value in ("BAD_JSON", "BAD_CONFIG", "BAD_UTF8")


@fuzz(40)
@given(st.binary(min_size=20, max_size=200), st.binary(min_size=20, max_size=20))
def test_crc_checks_of_any_record_bytes_agree(head, tail):
    rec = head + tail
    one = propcrc.check_record_crc(rec, 0, len(rec))
    many = propcrc.check_crc_many(rec, [0], [len(rec)])
    assert propcrc.STATUSES[int(many.status[0])] == one.status
    assert int(many.computed[0]) == one.computed and bool(many.force_ok[0]) == one.force_ok
    fixed = bytearray(rec)
    propcrc.patch_crc(fixed)
    assert propcrc.check_record_crc(bytes(fixed), 0, len(fixed)).status == "ok"


_names = st.sampled_from(["%LMQ%a", "%LMQ%b", "NotLmq", "%LMQ%x/y", "", " "])
_offsets = st.sampled_from(["0", "1", "7", "", "-1", "x", "99999999999999999999"])


@fuzz(40)
@given(st.lists(st.tuples(st.lists(_names, max_size=4), st.lists(_offsets, max_size=4)), max_size=12))
def test_lmq_prediction_over_hostile_lists_never_crashes(items):
    recs = [Message("LmqParent", physical_offset=i * 100, store_size=100,
                    properties={L.PROPERTY_INNER_MULTI_DISPATCH: ",".join(n), L.PROPERTY_INNER_MULTI_QUEUE_OFFSET:
                                ",".join(o)})
            for i, (n, o) in enumerate(items)]
    pred = lmq.predict_dispatch(recs, cq_file_size=200)
    for (name, qid), state in pred.queues.items():
        units = pred.units_of(name, qid)
        assert [u.queue_offset for u in units] == list(range(units[0].queue_offset, units[0].queue_offset + len(units)))
        assert state.max_offset == (units[-1].queue_offset + 1 if units else state.max_offset)
    if pred.stall is not None:
        assert pred.stall.physical_offset in {r.physical_offset for r in recs}


def test_lmq_prediction_corner_cases():
    def rec(i, names, offsets):
        return Message("T", physical_offset=i * 10, store_size=10, queue_id=3,
                       properties={L.PROPERTY_INNER_MULTI_DISPATCH: names, L.PROPERTY_INNER_MULTI_QUEUE_OFFSET: offsets})
    # a queue whose first unit comes at offset 5 is pre-filled from its file's start (fillPreBlank)
    pred = lmq.predict_dispatch([rec(1, "%LMQ%a", "5")], cq_file_size=60)
    assert [(u.queue_offset, u.kind) for u in pred.units_of("%LMQ%a")] == [(3, "pre_blank"), (4, "pre_blank"),
                                                                           (5, "entry")]
    # a non-LMQ name gets the record's own queue id; an offset below the write position is skipped, except 0,
    # which putMessagePositionInfo never checks (appended at the write position)
    pred = lmq.predict_dispatch([rec(1, "Other", "1"), rec(2, "Other", "1"), rec(3, "Other", "0")])
    assert [(u.queue_id, u.queue_offset, u.kind) for u in pred.units] == [(3, 0, "pre_blank"), (3, 1, "entry"),
                                                                          (3, 2, "entry")]
    assert [s.reason for s in pred.skips] == ["below_write_position"]
    assert lmq.java_split(",") == [] and lmq.java_split("") == [""] and lmq.java_split(",a,,") == ["", "a"]
    assert lmq.parse_java_long("+5") == 5 and lmq.parse_java_long("") is None and lmq.parse_java_long("٣") is None


@pytest.mark.parametrize("split", [52, 100, 500, 4096])
def test_timer_log_splits_give_the_whole_files_units(gen5, split):
    for f in T.list_timer_log_files(gen5):
        whole = T.read_timer_unit_arrays(f)
        parts = [T.read_timer_unit_range(f, s, split) for s in range(0, f.length, split)]
        assert np.concatenate([p.file_position for p in parts]).tolist() == whole.file_position.tolist()
        assert np.concatenate([p.physical_offset for p in parts]).tolist() == whole.physical_offset.tolist()
        assert np.concatenate([p.kind for p in parts]).tolist() == whole.kind.tolist()


def test_dump_strict_exits_1_on_timer_damage(tmp_path):
    import subprocess
    import sys

    D.looping_timer_chain(store5("v5-timer"), tmp_path / "a")
    D.timercheck_wrong_length(store5("v5-timer"), tmp_path / "b")
    repo = Path(__file__).resolve().parent.parent
    for store, what in ((tmp_path / "a", "timerwheel"), (tmp_path / "b", "timercheck")):
        r = subprocess.run([sys.executable, "-m", "store_format", "dump", str(store), "--what", what, "--strict"],
                           capture_output=True, text=True, cwd=repo, timeout=120)
        assert r.returncode == 1 and "damage found" in r.stderr
        r = subprocess.run([sys.executable, "-m", "store_format", "dump", str(store), "--what", what],
                           capture_output=True, text=True, cwd=repo, timeout=120)
        assert r.returncode == 0
