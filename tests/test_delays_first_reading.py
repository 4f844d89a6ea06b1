"""The survey's first reading of the pending delayed messages' records (jobs/audit/checks/delays.py), now a
segment's records at once through the compiled kernels: each offset reads as codec.decode_record reads the record
there (its UNIQ_KEY and REAL_TOPIC, or nothing where no record decodes), on the fixtures RocketMQ wrote, at
record starts and at offsets that are not, on a damaged copy, through a local map and through ranged reads."""
from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest

from jobs.audit.checks import delays as D
from store_format import codec
from store_format import layout as L
from store_format.commitlog import list_segments
from store_format.errors import StoreFormatError

from .conftest import FIXTURES, FIXTURES_5X

STORES = [FIXTURES / "basic" / "store", FIXTURES_5X / "v5-default" / "store", FIXTURES_5X / "v5-crc" / "store"]


def _reference(segments, phys: int):
    """What the survey read one record at a time (before the kernels): codec.decode_record where it stands."""
    for base, length, loc in segments:
        if base <= phys < base + length:
            buf = Path(loc.local_path).read_bytes()
            try:
                msg = codec.decode_record(buf, phys - base, file=loc.path)
            except StoreFormatError:
                return None, None
            return msg.uniq_key, msg.properties.get(L.PROPERTY_REAL_TOPIC)
    return None, None


def _record_starts(segments) -> list[int]:
    starts = []
    for base, length, loc in segments:
        buf, pos = Path(loc.local_path).read_bytes(), 0
        while pos + 8 <= len(buf):
            size = int.from_bytes(buf[pos:pos + 4], "big", signed=True)
            if size <= 0 or int.from_bytes(buf[pos + 4:pos + 8], "big") == L.BLANK_MAGIC & 0xFFFFFFFF:
                break
            starts.append(base + pos)
            pos += size
    return starts


class _Remote:
    """A segment's location read by ranges only (an object store's), over a local file."""

    def __init__(self, loc):
        self.loc, self.path, self.local_path = loc, loc.path, None

    def read_range(self, at: int, n: int) -> bytes:
        return self.loc.read_range(at, n)


def _segments(store: Path, remote: bool = False) -> list:
    return [(s.base_offset, s.length, _Remote(s.loc) if remote else s.loc)
            for s in list_segments(store / "commitlog")]


def _offsets(segments) -> np.ndarray:
    starts = _record_starts(segments)
    end = max(b + n for b, n, _ in segments)
    # record starts; inside records; a few bytes before a start; past the end; before the first segment
    extra = [s + 1 for s in starts[::3]] + [s - 3 for s in starts[1::5]] + [end - 2, end, end + 100, -7]
    return np.array(starts + extra, np.int64)


@pytest.mark.parametrize("store", STORES, ids=lambda p: f"{p.parent.parent.name}/{p.parent.name}")
@pytest.mark.parametrize("remote", [False, True], ids=["mapped", "ranged"])
@pytest.mark.parametrize("slice_rows", [None, 3], ids=["whole", "sliced"])
def test_each_offset_reads_as_the_codec_reads_it(store, remote, slice_rows, monkeypatch):
    if slice_rows:  # a segment's records decoded a few at a time, as a level's 300,000 pending ones are
        monkeypatch.setattr(D, "READING_ROWS", slice_rows)
    segments = _segments(store)
    phys = _offsets(segments)
    uniq, real = D._first_readings(_segments(store, remote), phys)
    expected = [_reference(segments, int(p)) for p in phys]
    assert uniq.to_pylist() == [u for u, _ in expected]
    assert real.to_pylist() == [r for _, r in expected]
    assert any(u is not None for u, _ in expected) and any(u is None for u, _ in expected)


def test_a_damaged_record_reads_as_nothing_and_its_neighbours_as_before(tmp_path, monkeypatch):
    monkeypatch.setattr(D, "READING_ROWS", 2)  # slices that end beside a damaged record
    store = tmp_path / "store"
    shutil.copytree(STORES[0], store)
    segments = _segments(store)
    starts = _record_starts(segments)
    base, _, loc = segments[0]
    with open(loc.local_path, "r+b") as f:
        # a magic code, a size past the end, a negative size, a body length (v1, IPv4 hosts: at 84)
        damaged = starts[2:12:3]
        for k, s in enumerate(damaged):
            f.seek(s - base + {0: 4, 1: 0, 2: 0, 3: 84}[k])
            f.write({0: b"\x00\x00\x00\x01", 1: b"\x7f\xff\xff\xf0", 2: b"\xff\xff\xff\xf0", 3: b"\xde\xad\xbe\xef"}[k])
    phys = np.array(starts, np.int64)
    uniq, real = D._first_readings(_segments(store), phys)
    expected = [_reference(segments, int(p)) for p in phys]
    assert uniq.to_pylist() == [u for u, _ in expected]
    assert real.to_pylist() == [r for _, r in expected]
    before = [_reference(_segments(STORES[0]), int(p)) for p in phys]  # the fixture's own records
    assert expected == [(None, None) if p in damaged else b for p, b in zip(starts, before)]


@pytest.mark.parametrize("store", STORES[:2], ids=lambda p: f"{p.parent.parent.name}/{p.parent.name}")
@pytest.mark.parametrize("reading_rows", [1 << 14, 2])
def test_a_survey_task_reads_its_levels_pending_records_at_once(store, reading_rows, monkeypatch):
    """A survey task of a broker's consume-queue files takes the first readings of every level's pending messages
    together (one call, where a fleet's broker paid one a level) until they are READING_ROWS or more (then read at
    once; a level's file is taken READING_ROWS units at a time, so no more is held), its ``delays.pending`` rows each
    level's units at or past the level's next offset in the files' order, each read as the codec reads its record."""
    monkeypatch.setattr(D, "READING_ROWS", reading_rows)
    import pyarrow as pa

    from jobs.audit.routes import CONSUMEQUEUE, SurveyInput
    from jobs.audit.survey import RouteSurvey
    from jobs.audit.tasks import Emitter
    from store_format.queues import list_queue_files

    files = list_queue_files(store)
    levels = sorted({f.queue_id for f in files if f.topic == L.SCHEDULE_TOPIC})
    assert len(levels) >= 3
    nxt = {qid: k % 2 for k, qid in enumerate(levels)}  # every other level's first unit delivered already
    segments = _segments(store)
    calls = []
    real = D._first_readings
    monkeypatch.setattr(D, "_first_readings", lambda s, p: calls.append(len(p)) or real(s, p))
    out = Emitter()
    given = SurveyInput("b", 20, 1 << 40, {"delays": {"next": nxt, "segments": segments}})
    RouteSurvey(CONSUMEQUEUE.name, given, files, (("delays", D.pending_in_survey),)).run(out)
    rows = pa.concat_tables(out.spilled["delays.pending"]).to_pylist()
    expected = []
    for f in files:
        if f.topic == L.SCHEDULE_TOPIC:
            u = f.units()
            for i in np.flatnonzero(u.valid & (u.queue_offset >= nxt[f.queue_id])).tolist():
                uniq, topic = _reference(segments, int(u.physical_offset[i]))
                expected.append({"broker": "b", "level": f.queue_id + 1, "queue_offset": int(u.queue_offset[i]),
                                 "physical_offset": int(u.physical_offset[i]), "deliver_time": int(u.tags_code[i]),
                                 "uniq_key": uniq, "real_topic": topic})
    assert rows == expected and len({r["level"] for r in rows}) >= 2
    read, held = [], 0  # each level's pending in the files' order, READING_ROWS at most at a time, read once
    for level in dict.fromkeys(r["level"] for r in expected):  # READING_ROWS are held
        pending = sum(r["level"] == level for r in expected)
        for lo in range(0, pending, reading_rows):
            held += min(reading_rows, pending - lo)
            if held >= reading_rows:
                read, held = read + [held], 0
    assert calls == read + ([held] if held else []) and (len(calls) == 1) == (reading_rows > len(expected))
