"""Issue 40, wide brokers: a consume-queue file is read once where one reading serves several steps, and the queue
folders are listed by one ``scandir`` a folder, with the same entries and results as before."""
from __future__ import annotations

import os

import pyarrow as pa
import pyarrow.fs as pafs
import pytest

from store_format import consumequeue, rolled
from store_format.consumequeue import recover_queue, unit_bytes
from store_format.queues import group_queues, list_queue_files

UNITS = 10  # units a file (a 200-byte mappedFileSizeConsumeQueue)


def _file(folder, index: int, units: list[tuple[int, int, int]], tail: bytes = b"") -> None:
    """File ``index`` of a queue: its units, zero-filled to the folder's file size, then ``tail``."""
    folder.mkdir(parents=True, exist_ok=True)
    raw = b"".join(unit_bytes(*u) for u in units)
    (folder / f"{index * UNITS * 20:020d}").write_bytes(raw + bytes(UNITS * 20 - len(raw)) + tail)


def _queues(root):
    """Queues whose recovery ends every way it can: inside a file at the unwritten tail, at a written unit it
    refuses (a zero size, a negative offset), at a zero unit with data after it, at the end of a full last file,
    past more than three files, and in a file with a partial trailing unit."""
    cq = root / "consumequeue"
    good = [(1000 + 100 * i, 100, 7) for i in range(UNITS)]
    _file(cq / "Tail" / "0", 0, good[:4])
    _file(cq / "Refused" / "0", 0, good[:3] + [(5000, 0, 7)] + good[3:5])
    _file(cq / "Negative" / "0", 0, good[:2] + [(-8, 100, 7)])
    _file(cq / "Gap" / "0", 0, good[:2] + [(0, 0, 0)] + good[2:4])
    for i in range(5):
        _file(cq / "Long" / "3", i, good if i < 4 else good[:6])
    for i in range(2):
        _file(cq / "Full" / "1", i, good)
    _file(cq / "Partial" / "0", 0, good[:5], tail=b"\x01" * 7)
    return root


def test_recovery_from_the_surveys_reading_is_recovery_from_the_files(tmp_path, monkeypatch):
    """Each file's FileRecovery, taken from the units a survey read (Units.recovery), gives Queue.recover the
    same start as reading the files again; and with every file's known, recovery maps none of them."""
    queues = group_queues(list_queue_files(_queues(tmp_path)))
    assert len(queues) == 7
    expected = {q.key: recover_queue(q.reader_files) for q in queues}
    known = {q.key: {i: f.units().recovery for i, f in enumerate(q.files)} for q in queues}
    assert {q.key: q.recover() for q in queues} == expected
    assert expected[("Refused", 0)].refused == (5000, 0) and expected[("Gap", 0)].refused is None
    assert expected[("Long", 3)].recover_end == 4 * UNITS * 20 + 6 * 20

    def no_read(self, i):
        raise AssertionError(f"{self.files[i].path} read again")

    monkeypatch.setattr(consumequeue.QueueUnits, "__call__", no_read)
    assert {q.key: q.recover(q.unit_reader(known[q.key])) for q in queues} == expected


def test_a_shared_reader_maps_each_file_once_for_recover_and_finish(tmp_path, monkeypatch):
    """The scan's recovery prediction: recover() then finish_queue() over one QueueUnits read each file once."""
    from store_format.recovery import finish_queue

    queues = group_queues(list_queue_files(_queues(tmp_path)))
    opened = []
    real = consumequeue.written_units  # where every bulk reader of a file's units reads it

    def counting(path, *a, **k):
        opened.append(str(path))
        return real(path, *a, **k)

    monkeypatch.setattr(consumequeue, "written_units", counting)
    for q in queues:
        units = q.unit_reader()
        start = q.recover(units)
        alone = finish_queue(*q.key, q.reader_files, start, 1000 + 100 * 3, True, True)
        opened.clear()
        units = q.unit_reader()
        assert finish_queue(*q.key, units.files, q.recover(units), 1000 + 100 * 3, True, True, units) == alone
        assert len(opened) == len(set(opened)), opened


def test_the_queue_listing_by_scandir_is_the_locations_listing(tmp_path, monkeypatch):
    """rolled._entries gives what Location.list gives, hostile entries included (a FIFO, a dangling link, a link
    to a folder and to a file, a file where a topic folder should be), and so list_queue_folders is unchanged."""
    root = _queues(tmp_path)
    cq = root / "consumequeue"
    os.mkfifo(cq / "Tail" / "0" / "fifo")
    os.symlink(tmp_path / "nowhere", cq / "Tail" / "0" / "dangling")
    os.symlink(cq / "Full" / "1", cq / "Full" / "2")  # a queue folder that is a link
    os.symlink(cq / "Tail" / "0" / "00000000000000000000", cq / "Gap" / "0" / "00000000000000000200")
    (cq / "stray").write_bytes(b"x")
    (cq / "Gap" / "notaqueue").mkdir()
    loc = rolled.location(cq)
    folders = [loc] + [loc.child(t) for t in os.listdir(cq) if (cq / t).is_dir()]
    folders += [t.child(q) for t in folders[1:] for q in os.listdir(t.local_path)]
    for f in folders + [loc.child("missing"), loc.child("stray")]:
        assert [(i.path, i.type, i.size) for i in rolled._entries(f)] == \
            [(i.path, i.type, i.size) for i in f.list()], f.path
    fast = rolled.list_queue_folders(cq, "consumequeue")
    monkeypatch.setattr(rolled, "_entries", lambda loc: loc.list())
    slow = rolled.list_queue_folders(cq, "consumequeue")
    assert [(t, q, f.loc.path, f.base_offset, f.length, f.problems) for t, q, f in fast] == \
        [(t, q, f.loc.path, f.base_offset, f.length, f.problems) for t, q, f in slow]
    assert any(t == "Full" and q == 2 for t, q, _ in fast)


def test_the_surveys_queue_starts_are_each_queues_recovery(tmp_path, monkeypatch):
    """The survey's ``survey.queue_starts`` rows (what predict_recovery starts each queue from) are recover_queue's
    answer for every queue, while each file is read once by the whole survey task."""
    import pyarrow as pa

    from jobs.audit.routes import CONSUMEQUEUE, SurveyInput
    from jobs.audit.survey import RouteSurvey
    from jobs.audit.tasks import Emitter

    files = list_queue_files(_queues(tmp_path))
    expected = {q.key: recover_queue(q.reader_files) for q in group_queues(files)}
    opened = []
    real = consumequeue.written_units  # where every bulk reader of a file's units reads it

    def counting(path, *a, **k):
        opened.append(str(path))
        return real(path, *a, **k)

    monkeypatch.setattr(consumequeue, "written_units", counting)
    out = Emitter()
    RouteSurvey(CONSUMEQUEUE.name, SurveyInput("b", 20, 1 << 20), files).run(out)
    rows = pa.concat_tables(out.partials["survey.queue_starts"]).to_pylist()
    assert {(r["topic"], r["queue_id"]): (r["recover_end"], r["max_physic_offset"],
                                          (r["refused_offset"], r["refused_size"]) if r["refused_offset"] is not None
                                          else None) for r in rows} == \
        {k: (s.recover_end, s.max_physic_offset, s.refused) for k, s in expected.items()}
    assert sorted(opened) == sorted(str(f.loc.local_path) for f in files)


def test_inside_read_once_each_file_is_read_once_by_every_reader(tmp_path, monkeypatch):
    """store_format.queues.read_once (a scan file task's hooks: the consumequeue family's units, the prediction
    family's recovery): each file read once by read_unit_arrays and QueueUnits together, with the same units and
    recovery as read apart; outside it, or past its budget, each reader reads the file again."""
    from store_format import fs
    from store_format.queues import read_once
    from store_format.recovery import finish_queue

    files = list_queue_files(_queues(tmp_path))
    reads = []
    real = fs.read_written
    monkeypatch.setattr(fs, "read_written", lambda path, *a: reads.append(str(path)) or real(path, *a))

    def both():
        units = {f.loc.path: f.units() for f in files}
        ends = []
        for q in group_queues(files):
            shared = q.unit_reader()
            ends.append(finish_queue(*q.key, shared.files, q.recover(shared), 1000 + 100 * 3, True, True, shared))
        return {p: (u.physical_offset.tolist(), u.kind.tolist(), u.recovery) for p, u in units.items()}, ends

    apart = both()
    each = sorted(str(f.loc.local_path) for f in files)
    twice = len(reads)  # every file by units(), and those recovery reads again
    assert sorted(set(reads)) == each and twice > len(files) + 5
    reads.clear()
    with read_once():
        assert both() == apart
    assert sorted(reads) == each
    reads.clear()
    both()
    assert len(reads) == twice  # let go at its end
    reads.clear()
    monkeypatch.setattr(consumequeue, "READ_ONCE_BYTES", 0)
    with read_once():
        assert both() == apart
    assert len(reads) == twice


def test_a_file_tasks_hooks_run_inside_read_once(tmp_path):
    """The scan's FileScan runs its families' hooks for the route inside read_once: they share their reads."""
    from jobs.audit.contract import Family
    from jobs.audit.scan import BrokerFacts, FileScan
    from jobs.audit.tasks import Emitter

    seen = []
    hook = lambda facts, files, out: seen.append(consumequeue._READ_ONCE.get() is not None)  # noqa: E731
    family = Family("probe", "a hook that looks", in_files={"consumequeue": hook})
    facts = BrokerFacts("b", (family, family), True, 1, 0, None, 0, True, False, 0, False, 20, 0)
    FileScan("consumequeue", facts, list_queue_files(_queues(tmp_path))).run(Emitter())
    assert seen == [True, True] and consumequeue._READ_ONCE.get() is None


def test_a_runs_reads_give_later_readers_and_windows_the_bytes_the_files_hold(tmp_path, monkeypatch):
    """store_format.consumequeue.RunReads (an audit's run in the driver: its survey reads a wide broker's small queue
    files, its scan's file tasks, its ranges' windows and the driver read them again): inside reads_of_the_run each
    small file is read once, later readers and every window of it (past its written units, past its end) get the
    bytes a read of the file gives; a file past the per-file bound, or past the budget, is read each time; outside
    it, nothing is kept."""
    from store_format import fs
    from store_format.consumequeue import RunReads, reads_of_the_run
    from store_format.queues import _file_windows, read_once

    files = list_queue_files(_queues(tmp_path))
    reads = []
    real_written, real_range = fs.read_written, fs.Location.read_range
    monkeypatch.setattr(fs, "read_written", lambda path, *a: reads.append(str(path)) or real_written(path, *a))
    monkeypatch.setattr(fs.Location, "read_range", lambda self, *a: reads.append(self.path) or real_range(self, *a))

    def units():
        with read_once(files):  # a task's own reads, as the survey's and the scan's file tasks read
            return {f.loc.path: (f.units().physical_offset.tolist(), f.units().kind.tolist()) for f in files}

    spans = [(f.loc, first, end) for f in files for first, end in ((0, 3), (2, UNITS), (4, UNITS + 5), (UNITS, 99))]

    def windows():
        columns, counts = _file_windows(spans)
        return {k: v.tolist() for k, v in columns.items()}, counts.tolist()

    apart = units(), windows()
    each = sorted(str(f.loc.local_path) for f in files)
    assert sorted(set(reads)) == each and len(reads) == len(files) + len(spans)
    reads.clear()
    run = RunReads()
    with reads_of_the_run(run):
        assert units() == apart[0] and sorted(reads) == each  # the first reader reads
        reads.clear()
        assert units() == apart[0] and windows() == apart[1] and reads == []  # the later ones do not
    assert run.bytes == sum(len(raw) for raw, *_ in run.kept.values()) and len(run.kept) == len(files)
    reads.clear()
    assert (units(), windows()) == apart and len(reads) == len(files) + len(spans)  # let go at its end
    written = {str(f.loc.local_path): 20 * len(apart[0][f.loc.path][1]) for f in files}
    small = {p for p, n in written.items() if n <= 3 * 20}
    assert 0 < len(small) < len(files)
    for bounds, kept in (({"file_bytes": 3 * 20}, small), ({"budget": 5 * 20}, None), ({"budget": 0}, set())):
        reads.clear()
        bounded = RunReads(**bounds)
        with reads_of_the_run(bounded):
            assert (units(), windows()) == apart and (units(), windows()) == apart
        assert set(bounded.kept) == kept if kept is not None else 0 < bounded.bytes <= bounds["budget"]
        again = [s for s in spans if str(s[0].local_path) not in bounded.kept]
        assert len(reads) == len(files) + 2 * len(again) + len(files) - len(bounded.kept)  # again where not kept


def test_the_tasks_run_in_the_driver_see_the_runs_reads():
    """jobs/audit/tasks.py runs a stage's tasks in threads of the driver with the run's context: the run's reads
    (store_format.consumequeue.reads_of_the_run) are theirs, in every thread."""
    from jobs.audit.tasks import _run_in_driver, RunInfo
    from store_format.consumequeue import RunReads, reads_of_the_run

    seen = []

    class Probe:
        broker, kind = "b", "Probe"

        def run(self, out):
            seen.append(consumequeue._RUN_READS.get())

        def describe(self):
            return "probe"

        def cost(self):
            return 1

    run = RunReads()
    with reads_of_the_run(run):
        _run_in_driver([Probe() for _ in range(6)], 2, RunInfo(None, "r", None), None)
    assert seen == [run] * 6
    seen.clear()
    _run_in_driver([Probe() for _ in range(2)], 2, RunInfo(None, "r", None), None)
    assert seen == [None, None]


def test_a_run_holds_off_full_collections_and_puts_the_threshold_back(monkeypatch):
    """jobs/audit/job.py: while an audit runs, the collector's full collections wait (what a run holds lives as long
    as the run); the threshold is put back when it ends, failed or not, and by the last of overlapping runs."""
    import contextlib
    import gc

    from jobs.audit import job

    before = gc.get_threshold()
    seen = []

    def failing(spark, args, warming):
        seen.append(gc.get_threshold())
        raise RuntimeError("the step failed")

    monkeypatch.setattr(job, "_audit", failing)
    monkeypatch.setattr(job, "_executors_warmed", lambda spark, args: contextlib.nullcontext())  # no session here
    with pytest.raises(RuntimeError, match="the step failed"):
        job.run(None, None)
    assert seen[0][:2] == before[:2] and seen[0][2] > 1000 * before[2]
    assert gc.get_threshold() == before
    first, second = job._full_collections_held(), job._full_collections_held()
    first.__enter__()
    second.__enter__()
    first.__exit__(None, None, None)  # not the last: still held
    assert gc.get_threshold()[2] > 1000 * before[2]
    second.__exit__(None, None, None)
    assert gc.get_threshold() == before


@pytest.mark.parametrize("together", [True, False])
def test_a_queue_kept_whole_is_told_without_a_reader(tmp_path, together):
    """Queue.keeps_every_unit (the scan's prediction passes over a queue of one file without making a reader when it
    says so) says so only of queues finish_queue drops nothing of, with recovery truncating the queues or not (a
    queue whose units are not in offset order among them); and queue_recovery_in's rows are finish_queue's for
    every queue that loses units, its files read with their group (a scan file task's read_once) or each alone."""
    from types import SimpleNamespace

    import pyarrow as pa

    from jobs.audit.checks.prediction import queue_recovery_in
    from jobs.audit.tasks import Emitter
    from store_format.queues import read_once
    from store_format.recovery import finish_queue

    root = _queues(tmp_path)
    _file(root / "consumequeue" / "Unordered" / "0", 0, [(1000, 100, 7), (1500, 100, 7), (1100, 100, 7)])
    files = list_queue_files(root)
    queues = group_queues(files)
    kept = set()
    for has_commitlog, truncate, end in [(True, False, 1300), (True, True, 1300), (True, True, 1400),
                                         (True, True, 1 << 20), (False, False, 1300)]:
        expected = {}
        for q in queues:
            units = q.unit_reader()
            r = finish_queue(*q.key, units.files, q.recover(units), end, has_commitlog, truncate, units)
            if r.dropped:
                expected[q.key] = (r.end, r.dropped, r.first_dropped, r.reason)
            if has_commitlog and q.keeps_every_unit(end if truncate else None):  # without one, every queue goes
                assert not r.dropped, (q.key, truncate, end)
                kept.add((q.key, truncate, end))
        out = Emitter()
        facts = SimpleNamespace(broker="b", recovered_end=end, has_commitlog=has_commitlog, truncate_queues=truncate,
                                routed={})
        if together:
            with read_once(files):
                queue_recovery_in(facts, files, out)
        else:
            queue_recovery_in(facts, files, out)
        rows = pa.concat_tables(out.partials.get("prediction.queues", [])).to_pylist() \
            if "prediction.queues" in out.partials else []
        assert {(r["topic"], r["queue_id"]): (r["end"], r["dropped"], r["first_dropped"], r["reason"])
                for r in rows} == expected, (truncate, end)
    # every case the shortcut takes: untruncated queues recovery walks to their end; truncated, only where every
    # unit points below the end (Tail's last at 1300, not at 1400; not Unordered at 1400: its middle unit is 1500)
    assert {(k, t, e) for k, t, e in kept if k[0] in ("Tail", "Unordered")} == {
        (("Tail", 0), False, 1300), (("Tail", 0), True, 1400), (("Tail", 0), True, 1 << 20),
        (("Unordered", 0), False, 1300), (("Unordered", 0), True, 1 << 20)}


def test_a_file_task_past_what_is_read_at_once_decodes_each_queue_file_once(tmp_path, monkeypatch):
    """A FileScan whose queue files are more than store_format.queues.MANY_BYTES (at 4 GiB of log a task's queues
    are tens of MB, read a file at a time): its hooks take the files in groups of whole queues and the units read
    for one are held for the others (HELD_BYTES), so the consumequeue family's units and the prediction's recovery
    decode each file once, and find what they find when every reader reads again."""
    from jobs.audit.checks import consumequeue as cq_family
    from jobs.audit.checks import prediction
    from jobs.audit.scan import BrokerFacts, FileScan
    from jobs.audit.tasks import Emitter
    from store_format import queues

    files = list_queue_files(_queues(tmp_path))
    decoded = []
    real = consumequeue.units_of
    monkeypatch.setattr(consumequeue, "units_of", lambda raw, *a, **k: decoded.append(len(raw)) or real(raw, *a, **k))
    monkeypatch.setattr(queues, "MANY_BYTES", 0)  # every group a file at a time, as past 8 MiB
    monkeypatch.setattr("jobs.audit.scan.MANY_BYTES", 0)
    facts = BrokerFacts("b", (cq_family.FAMILY, prediction.FAMILY), True, 1 << 30, 1000 + 100 * 3, None, 0, True,
                        True, 0, False, 20, 1 << 20)

    def scanned():
        out = Emitter()
        FileScan("consumequeue", facts, files).run(out)
        found = sorted((r["check"], r["file"], r["file_position"]) for t in out.findings
                       for r in t.select(["check", "file", "file_position"]).to_pylist())
        return found, sorted(pa.concat_tables(out.partials["prediction.queues"]).to_pylist(), key=lambda r: r["topic"])

    held = scanned()
    loaded = [f for f in files if f.loaded]
    assert len(decoded) == len(loaded)
    assert held[0] and held[1]  # corrupt units found, queues recovery cuts
    decoded.clear()
    monkeypatch.setattr(queues, "HELD_BYTES", 0)  # nothing held: each reader reads again, as before
    assert scanned() == held and len(decoded) > len(loaded)


@pytest.mark.parametrize("many_bytes", [0, 8 << 20])
def test_a_file_task_reads_no_queue_file_whose_survey_says_what_it_would_find(tmp_path, monkeypatch, many_bytes):
    """The scan's queue file tasks (the consumequeue family's corrupt units, the prediction's recovery) do not read
    again a file whose survey row says recovery accepts every unit and no slot holds an ext address (its partial
    tail told by its length), nor a queue of one such file recovery keeps whole; their findings and the queues
    recovery cuts are those of reading every file, whether the survey read its group at once or a file at a time."""
    from store_format import fs, queues

    from jobs.audit.checks import consumequeue as cq_family
    from jobs.audit.checks import prediction
    from jobs.audit.routes import CONSUMEQUEUE, SurveyInput, _routed_queue_file
    from jobs.audit.scan import BrokerFacts, FileScan
    from jobs.audit.survey import RouteSurvey
    from jobs.audit.tasks import Emitter

    monkeypatch.setattr(queues, "MANY_BYTES", many_bytes)
    _file(_queues(tmp_path) / "consumequeue" / "Whole" / "0", 0, [(1000 + 100 * i, 100, 7) for i in range(UNITS)],
          tail=b"\x01" * 7)  # every unit accepted, then a partial one
    files = list_queue_files(tmp_path)
    surveyed = Emitter()
    RouteSurvey(CONSUMEQUEUE.name, SurveyInput("b", 20, 1 << 20), files).run(surveyed)
    rows = {r["path"]: r for r in pa.concat_tables(surveyed.partials["survey.consumequeue_files"]).to_pylist()}
    routed = [r for r in (_routed_queue_file(rows.get(f.loc.path), f) for f in files) if r is not None]
    reads = []
    real = fs.read_written
    monkeypatch.setattr(fs, "read_written", lambda path, *a: reads.append(str(path)) or real(path, *a))

    def scanned(routed: list, recovered_end: int):
        facts = BrokerFacts("b", (cq_family.FAMILY, prediction.FAMILY), True, 1 << 30, recovered_end, None, 0, True,
                            True, 0, False, 20, 1 << 20, routed={"consumequeue": routed})
        out = Emitter()
        FileScan("consumequeue", facts, files).run(out)
        found = sorted((r["check"], r["file"], r["file_position"], r["details"]) for t in out.findings
                       for r in t.select(["check", "file", "file_position", "details"]).to_pylist())
        return found, sorted(pa.concat_tables(out.partials.get("prediction.queues") or [prediction.QUEUES
                                                                                        .empty_table()]).to_pylist(),
                             key=lambda r: r["topic"])

    for recovered_end in (1 << 20, 1000 + 100 * 3):  # recovery keeps every queue whole; it cuts them all
        reads.clear()
        told = scanned(routed, recovered_end)
        unread = {str(f.loc.local_path) for f in files} - set(reads)
        reads.clear()
        assert scanned([], recovered_end) == told  # no survey rows: every file read
        cut = {r["topic"] for r in told[1]}
        assert "Whole" in cut if recovered_end < 1 << 20 else not cut & {"Tail", "Whole"}
        assert ("consumequeue.corrupt_unit", "00000000000000000000", 200) in [f[:3] for f in told[0]]  # Whole's tail
        tail, whole = (str(tmp_path / "consumequeue" / t / "0" / "00000000000000000000") for t in ("Tail", "Whole"))
        assert unread == ({tail, whole} if recovered_end == 1 << 20 else set())


@pytest.mark.parametrize("seed", range(12))
def test_a_grown_files_survey_gone_on_from_its_last_row_is_its_survey(tmp_path, seed):
    """routes.resumed_queue_file (audit --state): a queue file's row and recovery, made from the row of its first
    units and the units appended since, are those a survey of the whole file makes; entries, zero units, refused
    units, buckets shared across the cut, the log's end moved on (on odd seeds past a power of two: its buckets
    twice as wide, kept.py _rebucketed).  None where its last unit then changed."""
    import random

    from jobs.audit.kept import _rebucketed
    from jobs.audit.routes import SurveyInput, _survey_queue_file, recovery_of_row, resumed_queue_file

    rng = random.Random(seed)
    per_file = 64
    units = []
    for i in range(per_file):
        kind = rng.random()
        units.append((0, 0, 0) if kind < 0.05 else (-8, 100, 7) if kind < 0.1 else
                      (rng.randrange(0, 1 << 16), rng.randrange(1, 400), rng.randrange(0, 1 << 20)))
    cut, n = sorted(rng.sample(range(1, per_file), 2))
    folder = tmp_path / "consumequeue" / "T" / "0"

    def surveyed(k, given):
        _file_at(folder, units[:k], per_file)
        f = list_queue_files(tmp_path)[0]
        row, u = _survey_queue_file(given, f)
        written = -(-len((folder / f"{0:020d}").read_bytes().rstrip(b"\0")) // 20) * 20
        return f, row, u.recovery, written

    then = SurveyInput("b", 10, 70_000)
    _, was, _, _ = surveyed(cut, then)
    now = SurveyInput("b", 10 + seed % 2, 90_000)  # the log grew (no entry was past its end then: all below 65,536)
    f, row, recovery, written = surveyed(n, now)
    was = _rebucketed(was, seed % 2)
    got = resumed_queue_file(now, f, was, written, True)
    assert got is not None and got[0] == row and got[1] == recovery == recovery_of_row(row)
    changed = list(units)
    changed[was["units"] - 1] = (1, 1, 1)
    _file_at(folder, changed[:n], per_file)
    assert resumed_queue_file(now, list_queue_files(tmp_path)[0], was, written, True) is None


def _file_at(folder, units: list, per_file: int) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    raw = b"".join(unit_bytes(*u) for u in units)
    (folder / f"{0:020d}").write_bytes(raw + bytes(per_file * 20 - len(raw)))
