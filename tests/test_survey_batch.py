"""Many consume-queue files' units read as one (store_format.consumequeue.read_unit_arrays_many,
store_format.queues.many_units) and a survey group's rows computed over the group (jobs/audit/routes.py
``_survey_queue_files``) give exactly what reading and surveying each file on its own gives: each file's units,
their recovery, its row (bounds, counts, routing buckets) and what its hooks are handed.  Checked on RocketMQ's own
stores, a store whose units address ConsumeQueueExt, a damaged store in 8 KiB segments, and queue files damaged
every way a unit can be (zero and invalid units before written ones, a pre-blank unit, a partial trailing unit, an
empty file, a file of zeros)."""
from __future__ import annotations

import shutil
import struct
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

from jobs.audit.plan import plan_broker
from jobs.audit.routes import QUEUE_ROUTES, ROUTES, SurveyInput, _survey_queue_file, _survey_queue_files
from runtime.stores import resolve_stores
from store_format import layout as L
from store_format.consumequeue import read_unit_arrays, read_unit_arrays_many
from store_format import queues
from store_format.queues import FILE, many_units

from .conftest import FIXTURES, FIXTURES_5X
from .test_joint_ranges import _damaged_4x
from .test_routed_batch import _ext_store

UNIT = L.CQ_STORE_UNIT_SIZE


def _hostile_units(tmp: Path) -> Path:
    """RocketMQ's basic store with its queue files damaged every way a unit can be."""
    store = tmp / "hostile"
    shutil.copytree(FIXTURES / "basic" / "store", store)
    files = sorted(p for p in (store / "consumequeue").rglob("*") if p.is_file() and p.stat().st_size)
    written = [p for p in files if p.read_bytes().rstrip(b"\0")]
    assert len(written) >= 6
    a, b, c, d, e, f = written[:6]

    def put(path: Path, unit: int, phys: int, size: int, tags: int) -> None:
        data = bytearray(path.read_bytes())
        struct.pack_into(">qiq", data, unit * UNIT, phys, size, tags)
        path.write_bytes(bytes(data))

    put(a, 1, 0, 0, 0)  # a zero unit before written ones: recovery stops there
    put(b, 0, -5, 100, 3)  # an invalid unit first
    put(c, 2, 0, L.CQ_PRE_BLANK_SIZE, 0)  # a pre-blank unit
    n = len(d.read_bytes().rstrip(b"\0"))
    d.write_bytes(d.read_bytes()[:-(-n // UNIT) * UNIT + 7])  # a partial trailing unit
    e.write_bytes(b"")  # an empty file
    f.write_bytes(bytes(f.stat().st_size))  # a file of zeros
    return store


STORES = {
    "4.9.7-basic": lambda tmp: FIXTURES / "basic" / "store",
    "4.9.7-recovered-zero-page": lambda tmp: FIXTURES / "recovered-zero-page" / "input" / "store",
    "5.3.3-v5-lmq": lambda tmp: FIXTURES_5X / "v5-lmq" / "store",
    "5.3.3-v5-batchcq": lambda tmp: FIXTURES_5X / "v5-batchcq" / "store",
    "5.3.3-rocksdb-cq": lambda tmp: FIXTURES_5X / "rocksdb-cq" / "store",
    "ext": _ext_store,
    "damaged-8k": _damaged_4x,
    "hostile-units": _hostile_units,
}


def _plan(store: Path):
    (ref,) = resolve_stores([str(store)])
    return plan_broker(ref)


def _same_arrays(x, y, where: str) -> None:
    """Two objects' numpy fields (and their other fields) equal, dtypes too."""
    for name in x.__dataclass_fields__:
        a, b = getattr(x, name), getattr(y, name)
        if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
            assert a is not None and b is not None, (where, name)
            assert a.dtype == b.dtype and np.array_equal(a, b), (where, name, a, b)
        elif name == "truncated":
            assert (a is None) == (b is None) and (a is None or (a.kind, a.position, str(a)) ==
                                                   (b.kind, b.position, str(b))), (where, name)
        else:
            assert a == b, (where, name, a, b)


@pytest.fixture
def unbounded(monkeypatch):
    """Every group read at once, whatever it holds (the bound is memory's, not the answer's: the generated stores'
    files are not sparse, so each counts its whole 6 MB)."""
    monkeypatch.setattr(queues, "MANY_BYTES", 1 << 50)


@pytest.mark.parametrize("name", list(STORES))
def test_many_files_read_as_one_give_each_file_s_units(tmp_path, unbounded, name):
    plan = _plan(STORES[name](tmp_path))
    files = [f for f in plan.queue_files if f.loaded and f.backend is FILE]
    if not files:
        pytest.skip("no flat consume-queue files")
    each, group = read_unit_arrays_many([f.cq_file() for f in files])
    assert len(each) == len(files)
    for f, u in zip(files, each):
        _same_arrays(u, read_unit_arrays(f.cq_file()), f.loc.path)
    many = many_units(files)
    assert np.array_equal(many.counts, [len(u.kind) for u in each])
    for f, u in zip(files, many.files):
        one = f.units()
        _same_arrays(u, one, f.loc.path)
        assert u.recovery == one.recovery, f.loc.path
    assert np.array_equal(group.physical_offset, np.concatenate([u.physical_offset for u in each]))


@pytest.mark.parametrize("name", list(STORES))
def test_a_survey_group_computed_at_once_is_each_file_s_survey(tmp_path, unbounded, name):
    plan = _plan(STORES[name](tmp_path))
    given = SurveyInput(plan.name, plan.shift, plan.commitlog_end)
    compared = 0
    for route in QUEUE_ROUTES:
        for group in route.group(route.files(plan)):
            got = _survey_queue_files(given, group)
            singles = [_survey_queue_file(given, f) for f in group]
            if got is None:  # their backend reads a file at a time (or serves bounds of its own)
                assert any(f.loaded and f.backend is not FILE for f in group)
                continue
            table, reads = got
            want = pa.Table.from_pylist([r for r, _ in singles if r is not None], schema=route.survey_schema)
            assert table.equals(want), (route.name, table.to_pylist()[:3], want.to_pylist()[:3])
            assert len(reads) == len(group)
            for f, read, (_, one) in zip(group, reads, singles):
                assert (read is None) == (one is None), f.loc.path
                if read is not None:
                    _same_arrays(read, one, f.loc.path)
            compared += len(group)
    if name not in ("5.3.3-rocksdb-cq",):
        assert compared, "no group was surveyed at once"


def test_files_holding_more_than_the_bound_are_read_one_by_one(tmp_path, monkeypatch):
    plan = _plan(FIXTURES / "basic" / "store")
    files = [f for f in plan.queue_files if f.loaded and f.backend is FILE]
    held = sum(f.stored_bytes for f in files)
    monkeypatch.setattr(queues, "MANY_BYTES", held)
    assert many_units(files) is not None
    monkeypatch.setattr(queues, "MANY_BYTES", held - 1)
    assert many_units(files) is None
    given = SurveyInput(plan.name, plan.shift, plan.commitlog_end)
    assert _survey_queue_files(given, files) is None


def test_the_survey_task_emits_the_same_either_way(tmp_path, unbounded):
    """A whole RouteSurvey task (its hooks and the queues' recovery starts included) emits the same partial tables
    whether its route surveys the group at once or a file at a time."""
    import dataclasses

    from jobs.audit import checks
    from jobs.audit.checks import load_all
    from jobs.audit.context import AuditContext, AuditOptions
    from jobs.audit.survey import RouteSurvey, survey_tasks
    from jobs.audit.tasks import Emitter

    store = _hostile_units(tmp_path)
    (ref,) = resolve_stores([str(store)])
    load_all()
    families = checks.selected(tuple(checks.FAMILIES))
    plans = {ref.name: plan_broker(ref)}
    ctx = AuditContext(None, [ref], plans, AuditOptions(families=tuple(f.name for f in families)), families)
    tasks = [t for t in survey_tasks(ctx, []) if isinstance(t, RouteSurvey)
             and t.route in {r.name for r in QUEUE_ROUTES}]
    assert tasks

    def emitted(t):
        out = Emitter()
        t.run(out)
        return {k: pa.concat_tables(v) for k, v in out.partials.items()}, \
            {k: pa.concat_tables(v) for k, v in out.spilled.items()}

    for t in tasks:
        at_once = emitted(t)
        route = ROUTES[t.route]
        ROUTES[t.route] = dataclasses.replace(route, survey_files=None)
        try:
            one_by_one = emitted(t)
        finally:
            ROUTES[t.route] = route
        assert at_once[0].keys() == one_by_one[0].keys()
        for k in at_once[0]:
            assert at_once[0][k].equals(one_by_one[0][k]), k
        assert at_once[1].keys() == one_by_one[1].keys()
        for k in at_once[1]:
            assert at_once[1][k].equals(one_by_one[1][k]), k


def _emitted(task, *, bound: int, monkeypatch) -> dict:
    """What ``task`` emits (findings, partial and spilled tables) with the group bound set to ``bound``."""
    from jobs.audit.tasks import Emitter

    monkeypatch.setattr(queues, "MANY_BYTES", bound)
    out = Emitter()
    task.run(out)
    got = {"findings": pa.concat_tables(out.findings) if out.findings else None}
    for kind, tables in (("partial", out.partials), ("spilled", out.spilled)):
        got.update({f"{kind}:{k}": pa.concat_tables(v) for k, v in tables.items()})
    return got


@pytest.mark.parametrize("name", ["4.9.7-basic", "4.9.7-recovered-zero-page", "5.3.3-v5-lmq", "ext", "damaged-8k",
                                  "hostile-units"])
def test_a_file_task_reading_its_group_at_once_emits_what_reading_each_file_does(tmp_path, monkeypatch, name):
    """A FileScan task over a group of queue files (the families' in_files hooks: corrupt units, ConsumeQueueExt,
    what recovery drops of each queue) emits the same whether its files' units are read together
    (store_format.queues.read_once with its files) or a file at a time."""
    from jobs.audit import checks
    from jobs.audit.checks import load_all
    from jobs.audit.context import AuditContext, AuditOptions
    from jobs.audit.plan import plan_segments
    from jobs.audit.scan import FileScan, scan_tasks
    from jobs.audit.survey import survey_tasks
    from jobs.audit.tasks import RunInfo, _run_in_driver
    from store_format.fs import resolve

    (ref,) = resolve_stores([str(STORES[name](tmp_path))])
    load_all()
    families = checks.selected(tuple(checks.FAMILIES))
    plans = {ref.name: plan_broker(ref)}
    families = [f for f in families if f.applies is None or f.applies(plans[ref.name])]
    ctx = AuditContext(None, [ref], plans, AuditOptions(families=tuple(f.name for f in families)), families)
    segments = plan_segments(plans, 2, None, False)
    (tmp_path / "partials").mkdir()
    ctx.survey = _run_in_driver(survey_tasks(ctx, segments), 1, RunInfo(None, partials_dir=resolve(
        str(tmp_path / "partials"))), None)
    ctx.predict_recovery()
    tasks = [t for t in scan_tasks(ctx, segments) if isinstance(t, FileScan)
             and t.route in {r.name for r in QUEUE_ROUTES}]
    assert tasks
    for t in tasks:
        at_once = _emitted(t, bound=1 << 50, monkeypatch=monkeypatch)
        one_by_one = _emitted(t, bound=-1, monkeypatch=monkeypatch)
        assert at_once.keys() == one_by_one.keys(), t.describe()
        for k, v in at_once.items():
            assert (v is None and one_by_one[k] is None) or v.equals(one_by_one[k]), (t.describe(), k)


@pytest.mark.parametrize("name", ["4.9.7-basic", "5.3.3-v5-lmq", "damaged-8k"])
def test_many_files_buckets_answer_each_file_s(tmp_path, name):
    """A range asks every routed file's buckets at once (jobs.audit.plan.ManyBuckets): for every span of buckets,
    the files with entries there and their row hulls are each file's own (Buckets.rows_for), in the files' order."""
    from jobs.audit.plan import Buckets, ManyBuckets
    from jobs.audit.routes import buckets_of_row

    plan = _plan(STORES[name](tmp_path))
    given = SurveyInput(plan.name, plan.shift, plan.commitlog_end)
    each = [buckets_of_row(row) for row, _ in (_survey_queue_file(given, f) for f in plan.queue_files if f.loaded)
            if row is not None]
    rng = np.random.default_rng(7)  # and files of random buckets, some empty
    for _ in range(40):
        b = np.unique(rng.integers(-1, 12, rng.integers(0, 6)))
        first = rng.integers(0, 50, len(b))
        each.append(Buckets(b.astype(np.int64), first, first + rng.integers(0, 9, len(b))))
    many = ManyBuckets.of(each)
    top = int(max((b.buckets.max() for b in each if len(b.buckets)), default=0)) + 1
    for lo in range(-1, top + 1):
        for hi in sorted({lo, lo + 1, lo + 3, top}):
            files, first, end = many.rows_for(lo, hi)
            want = [(i, r) for i, r in enumerate(b.rows_for(lo, hi) for b in each) if r is not None]
            assert files.tolist() == [i for i, _ in want], (lo, hi)
            assert list(zip(first.tolist(), end.tolist())) == [r for _, r in want], (lo, hi)
    assert ManyBuckets.of([]).rows_for(-1, 10)[0].tolist() == []


@pytest.mark.parametrize("name", ["4.9.7-basic", "ext", "damaged-8k", "hostile-units"])
def test_units_at_committed_offsets_read_at_once_are_each_file_s(tmp_path, name):
    """The entry units at the committed offsets (jobs.audit.context: the lag's units) of many files read together
    are what reading each file's span gives (_units_at), past a file's written units too."""
    from jobs.audit.context import _units_at, _units_at_many

    plan = _plan(STORES[name](tmp_path))
    files = [f for f in plan.queue_files if f.loaded and f.backend.dense]
    rng = np.random.default_rng(11)
    wanted, row = [], 0
    for f in files:
        n = len(f.units().kind)
        at = np.unique(rng.integers(0, n + 3, rng.integers(1, 6)))  # a few past its last written unit
        wanted.append((f, at, np.arange(row, row + len(at))))
        row += len(at)
    rows, units = _units_at_many(wanted)
    want = np.full(row, -2, np.int64)
    for f, at, r in wanted:
        want[r] = _units_at(f.loc, at, f.backend.window)
    got = np.full(row, -2, np.int64)
    got[rows] = units
    assert np.array_equal(got, want)
    assert (want >= 0).any() and (want == -1).any()
