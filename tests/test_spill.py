"""Spilled partial tables (tasks.Emitter.spill): each task writes its rows as its own Parquet part and only where it
is comes back; the driver reads every task's part as one dataset, on both ways back (in-process and Arrow IPC)."""
from __future__ import annotations

import os

import pyarrow as pa
import pytest

from jobs.audit.tasks import SPILLED, Emitter, Outputs, RunInfo

HOPS = pa.schema([("broker", pa.string()), ("physical_offset", pa.int64()), ("topic", pa.string())])


def _hops(offsets, topic="%DLQ%g"):
    return pa.table({"broker": ["b"] * len(offsets), "physical_offset": offsets, "topic": [topic] * len(offsets)},
                    schema=HOPS)


def _run(tmp_path) -> RunInfo:
    return RunInfo(str(tmp_path / "findings"), "run", None, tables_dir=str(tmp_path / "tables"),
                   partials_dir=str(tmp_path / "partials"))


def test_a_spilled_partial_is_a_part_file_and_a_row_saying_where(tmp_path):
    out = Emitter()
    out.spill("retries.hops", _hops([300, 100]))
    out.spill("retries.hops", _hops([500]))
    out.spill("retries.hops", _hops([]))  # nothing: no part
    out.write_findings(_run(tmp_path), "part-00003.parquet")
    path = tmp_path / "partials" / "retries.hops" / "part-00003.parquet"
    [row] = out.partials["_spilled"][0].to_pylist()
    assert row == {"table": "retries.hops", "path": str(path), "rows": 3, "bytes": os.path.getsize(path),
                   "first_offset": 100, "last_offset": 500, "broker": "b"}
    assert out.spilled == {}  # the rows are let go once written
    assert "retries.hops" not in out.partials


def test_a_task_past_its_hold_writes_its_spilled_rows_as_they_come(tmp_path, monkeypatch):
    """A task's emitter (with its run and part) writes its spilled rows into their part file once they pass
    SPILL_HOLD_BYTES, then holds none of them: one file a name all the same, its rows in the order spilled, and one
    row saying where, as an emitter that held them all writes."""
    import pyarrow.parquet as pq

    from jobs.audit import tasks

    monkeypatch.setattr(tasks, "SPILL_HOLD_BYTES", _hops([1, 2]).nbytes + 1)
    run = _run(tmp_path)
    part = "part-00007.parquet"
    out = Emitter((run, part))
    out.spill("retries.hops", _hops([300, 100]))
    path = tmp_path / "partials" / "retries.hops" / part
    assert not path.exists()  # held: under the hold
    out.spill("retries.hops", _hops([500]))
    assert path.stat().st_size > len(b"PAR1")  # past it: its rows written as a row group, the file still open
    sub = Emitter()  # a sub-task's rows (jobs/audit/scan.py), merged
    sub.spill("retries.hops", pa.table({"broker": ["b"], "physical_offset": pa.array([None], pa.int64()),
                                        "topic": ["t"]}, schema=HOPS))
    sub.spill("other.rows", _hops([7, 9]))
    out.merge(sub)
    assert out.spilled == {}  # a task's emitter holds nothing of its own: its part files' writers hold for it
    out.spill("retries.hops", _hops([50]))  # held to the end
    out.write_findings(run, part)
    got = {r["table"]: r for r in out.partials["_spilled"][0].to_pylist()}
    assert got["retries.hops"] == {"table": "retries.hops", "path": str(path), "rows": 5,
                                   "bytes": os.path.getsize(path), "first_offset": 50, "last_offset": 500,
                                   "broker": "b"}
    assert got["other.rows"]["rows"] == 2 and (got["other.rows"]["first_offset"], got["other.rows"]["last_offset"]) \
        == (7, 9)
    assert pq.read_table(path).column("physical_offset").to_pylist() == [300, 100, 500, None, 50]
    held = Emitter()  # without a sink: the same rows, one write at the end
    for offsets in ([300, 100], [500]):
        held.spill("retries.hops", _hops(offsets))
    held.write_findings(_run(tmp_path / "held"), part)
    assert pq.read_table(tmp_path / "held" / "partials" / "retries.hops" / part).equals(
        pq.read_table(path).slice(0, 3))


def test_a_failed_task_leaves_no_spilled_row_for_what_it_wrote(tmp_path, monkeypatch):
    from jobs.audit import tasks

    monkeypatch.setattr(tasks, "SPILL_HOLD_BYTES", 1)

    class Fails:
        broker = "b"

        def describe(self):
            return "a task that fails"

        def run(self, out):
            out.spill("retries.hops", _hops([1, 2]))  # written at once
            raise ValueError("bad input")

    out = tasks.run_one(3, Fails(), _run(tmp_path))
    assert "_spilled" not in out.partials and out.partials["_failures"][0].column("error").to_pylist()[0]
    assert not (tmp_path / "partials" / "retries.hops" / "part-00003.parquet").exists()  # nothing half-written left


@pytest.mark.parametrize("back", ["in-process", "ipc"])
def test_the_driver_reads_every_tasks_part_in_the_tasks_order(tmp_path, back):
    run = _run(tmp_path)
    emitters = []
    for i, offsets in ((1, [40, 50]), (0, [10, 20]), (2, [])):
        out = Emitter()
        out.spill("retries.hops", _hops(offsets))
        out.write_findings(run, f"part-{i:05d}.parquet")
        emitters.append(out)
    again = Emitter()  # task 1 retried: it writes the same file again, its rows count once
    again.spill("retries.hops", _hops([40, 50]))
    again.write_findings(run, "part-00001.parquet")
    if back == "ipc":  # as a Spark job returns them
        outputs = Outputs.of(pa.Table.from_batches([b for e in emitters for b in e.batches()]))
    else:
        outputs = Outputs({"_spilled": pa.concat_tables([e.partials["_spilled"][0] for e in emitters
                                                         if "_spilled" in e.partials])})
    assert outputs.parts("retries.hops").schema == SPILLED
    got = outputs.dataset("retries.hops", HOPS).to_table()
    assert got.column("physical_offset").to_pylist() == [10, 20, 40, 50]
    assert got.schema == HOPS


def test_many_small_parts_come_back_gathered_in_the_tasks_order(tmp_path):
    """The driver's batches of a spilled partial (Outputs.batches): consecutive tasks' small parts joined into tables
    of up to a batch's rows, every row once and in the tasks' order (a fleet's families paid a pass a part)."""
    from runtime.output import out_parts_batches

    run = _run(tmp_path)
    spilled = []
    for i in range(40):
        out = Emitter()
        out.spill("retries.hops", _hops(list(range(i * 1000, i * 1000 + 3 * (i % 4)))))  # some parts empty: no file
        out.write_findings(run, f"part-{i:05d}.parquet")
        spilled += out.partials.get("_spilled", [])
    outputs = Outputs({"_spilled": pa.concat_tables(spilled)})
    every = [o for i in range(40) for o in range(i * 1000, i * 1000 + 3 * (i % 4))]
    gathered = list(outputs.batches("retries.hops", HOPS, ["physical_offset"]))
    assert len(gathered) == 1 and gathered[0].column("physical_offset").to_pylist() == every
    assert gathered[0].schema == pa.schema([HOPS.field("physical_offset")])
    paths = sorted(outputs.parts("retries.hops").column("path").to_pylist())
    small = list(out_parts_batches(paths, HOPS, batch_size=10, gather=True))  # none past 10 rows, none split
    assert [t.num_rows for t in small] == [9] * 20  # parts of 3, 6, 9 rows in turn: 3 + 6, then 9
    assert [o for t in small for o in t.column("physical_offset").to_pylist()] == every
    apart = list(out_parts_batches(paths, HOPS))  # without gathering: a table a part, as before
    assert len(apart) == 30 and [o for t in apart for o in t.column("physical_offset").to_pylist()] == every


def test_no_spilled_part_is_an_empty_dataset_of_the_schema():
    t = Outputs().dataset("retries.hops", HOPS).to_table()
    assert t.num_rows == 0 and t.schema == HOPS


def test_a_stage_without_a_partials_folder_refuses_a_spill(tmp_path):
    out = Emitter()
    out.spill("retries.hops", _hops([1]))
    with pytest.raises(RuntimeError, match="spilled the partial retries.hops"):
        out.write_findings(RunInfo(None), "part-00000.parquet")


def _hops_ctx(tmp_path, parts):
    """A driver's view of retries.hops spilled by one task per (broker, offsets) of ``parts``."""
    from jobs.audit.checks import retries

    run = _run(tmp_path)
    rows = []
    for i, (broker, offsets) in enumerate(parts):
        out = Emitter()
        hops = pa.table({f.name: pa.nulls(len(offsets), f.type) for f in retries.HOPS}, schema=retries.HOPS)
        hops = hops.set_column(0, "broker", pa.array(broker if isinstance(broker, list) else [broker] * len(offsets)))
        hops = hops.set_column(hops.schema.get_field_index("physical_offset"), "physical_offset",
                               pa.array(offsets, pa.int64()))
        out.spill("retries.hops", hops)
        out.write_findings(run, f"part-{i:05d}.parquet")
        rows.append(out.partials["_spilled"][0])
    scan = Outputs({"_spilled": pa.concat_tables(rows)})

    class Ctx:
        state = None  # no state: nothing kept

        def partial_parts(self, name):
            return scan.parts(name)

        def kept_messages_by_id(self, broker, ids):  # read by the test's own _retry_rows (none found here)
            return None

        def partial_dataset(self, name, schema):
            return scan.dataset(name, schema)

    return Ctx()


_HOP_PARTS = (("b", [10, 20]), ("b", [15, 30]), ("a", [5]), ("c", [60, 55]), ("c", [70]))


def _read_hops(t, path):
    """What retries._hop_parts gives: a broker's hops read whole, or a part's path (read as retry_batches reads it)."""
    from jobs.audit.checks import retries

    return t if t is not None else retries._part_hops(retries._part_bytes(path))


def test_the_retries_hops_come_a_part_at_a_time_by_broker_and_offset(tmp_path):
    """Parts of a broker that do not overlap are read one at a time, each put in order; a broker whose parts
    overlap is read whole and sorted."""
    from jobs.audit.checks import retries

    got = [(b, _read_hops(t, path).column("physical_offset").to_pylist())
           for b, t, path in retries._hop_parts(_hops_ctx(tmp_path, _HOP_PARTS))]
    assert got == [("a", [5]), ("b", [10, 15, 20, 30]), ("c", [55, 60]), ("c", [70])]


def test_a_spilled_part_names_its_one_broker_and_a_part_of_two_is_read_for_them(tmp_path):
    """A SPILLED row says the one broker of its part's rows (the retries' hops are put in order by broker without
    reading each part twice); a part of two brokers says none, and its file is read for them."""
    from jobs.audit.checks import retries

    ctx = _hops_ctx(tmp_path, [(["a", "b"], [5, 6]), ("b", [1]), ("c", [7, 8])])
    assert ctx.partial_parts("retries.hops").column("broker").to_pylist() == [None, "b", "c"]
    got = [(b, _read_hops(t, path).column("physical_offset").to_pylist()) for b, t, path in retries._hop_parts(ctx)]
    assert got == [("a", [5]), ("b", [1, 6]), ("c", [7, 8])]
    out = Emitter()
    out.spill("other", pa.table({"physical_offset": [3]}))  # no broker column: none named
    out.write_findings(_run(tmp_path), "part-00009.parquet")
    assert out.partials["_spilled"][0].column("broker").to_pylist() == [None]


@pytest.mark.parametrize("rows, looked_up", [
    (3, [("a", [5]), ("b", [10, 15, 20, 30]), ("c", [55, 60, 70])]),  # a broker's parts gathered up to 3 rows
    (2, [("a", [5]), ("b", [10, 15, 20, 30]), ("c", [55, 60]), ("c", [70])])])
def test_the_retries_origins_are_looked_up_for_a_brokers_parts_together(tmp_path, monkeypatch, rows, looked_up):
    """Consecutive parts of one broker are looked up at once, up to LOOKUP_ROWS hops (a part larger alone), never
    two brokers together; the rows come out in the table's order."""
    from jobs.audit.checks import retries

    calls = []
    monkeypatch.setattr(retries, "_retry_rows", lambda ctx, broker, hops, found=None: calls.append(
        (broker, hops.column("physical_offset").to_pylist())) or hops)
    monkeypatch.setattr(retries, "LOOKUP_ROWS", rows)
    read = []  # the parts read so far: one ahead of what is looked up, never all of them first (held whole)
    parts = retries._hop_parts
    monkeypatch.setattr(retries, "_hop_parts", lambda ctx: (read.append(p) or p for p in parts(ctx)))
    batches = retries.retry_batches(_hops_ctx(tmp_path, _HOP_PARTS))
    out = [next(batches)]
    assert len(read) == 2  # "a", then "b" ends a's gathering
    out += list(batches)
    assert calls == looked_up and len(read) == 4
    assert [o for t in out for o in t.column("physical_offset").to_pylist()] == [5, 10, 15, 20, 30, 55, 60, 70]


def _txn_records(broker, rows):
    from jobs.audit.checks import transactions as T

    cols = {f.name: [] for f in T.RECORDS}
    for r in rows:
        for f in T.RECORDS:
            cols[f.name].append(r.get(f.name, broker if f.name == "broker" else None))
    return pa.table(cols, schema=T.RECORDS)


def _half(po, qo, key, ts, **kw):
    """A half record (role ``half``) of the transactions' spilled records."""
    return dict(role="half", physical_offset=po, queue_offset=qo, uniq_key=key, store_timestamp=ts,
                topic="RMQ_SYS_TRANS_HALF_TOPIC", queue_id=0, real_topic="T", real_queue_id=1,
                producer_group="pg", check_times=kw.pop("check", None), segment="s", file_position=po, **kw)


def _prepared(po, key, ts):
    return dict(role="prepared", physical_offset=po, topic="P", queue_id=0, uniq_key=key, store_timestamp=ts,
                tran_type="PREPARED", segment="s", file_position=po)


def _end(kind, of, po):
    return dict(role="end", tran_type=kind, prepared_transaction_offset=of, physical_offset=po)


# two brokers' halves (a re-put copy too), op messages (4.x and 5.x bodies), commits, rollbacks and PREPARED records
_TXN_PARTS = [
    ("a", [_half(100, 0, "k0", 1), _half(200, 1, "k1", 2), _half(300, 2, "k2", 3), _half(400, 3, None, 4),
           _prepared(450, "p0", 5)]),
    ("a", [_half(500, 4, "k1", 6, check="2"),  # k1 re-put by the checker
           dict(role="op", op_body=b"0", store_timestamp=7), dict(role="op", op_body=b"1,4,x,", store_timestamp=8),
           _end("COMMIT", 100, 600), _end("COMMIT", 300, 610), _end("ROLLBACK", 450, 620), _prepared(630, "p1", 9)]),
    ("b", [_half(10, 0, "k0", 1), dict(role="op", op_body=b"0", store_timestamp=2)]),
]


def _txn_ctx(run, parts, state=None):
    """A context for the transactions family's driver step over ``parts`` ((broker, records) a task part each, named
    part-00000... in turn; None: a part left out), under ``state``."""
    rows = []
    for i, part in enumerate(parts):
        if part is None:
            continue
        out = Emitter()
        out.spill("transactions.records", _txn_records(*part))
        out.write_findings(run, f"part-{i:05d}.parquet")
        rows.append(out.partials["_spilled"][0])
    scan = Outputs({"_spilled": pa.concat_tables(rows)})

    class Ctx:
        as_of = {"a": 1000, "b": 2000}

        def partial_parts(self, name):
            return scan.parts(name)
    ctx = Ctx()
    ctx.state = state
    return ctx


def test_the_transactions_pairing_out_of_core_is_the_pairing_in_memory(tmp_path, monkeypatch):
    """Halves (re-put copies too), op messages (4.x and 5.x bodies), commits, rollbacks and PREPARED records of two
    brokers over three task parts: spread over many buckets (two rows each) the table is the one of one bucket, in
    the table's order, every state found."""
    from jobs.audit import buckets
    from jobs.audit.checks import transactions as T

    ctx = _txn_ctx(_run(tmp_path), _TXN_PARTS)
    whole = T.transaction_table(ctx)
    monkeypatch.setattr(buckets, "ROWS_PER_BUCKET", 2)
    assert buckets.bucket_count(13) == 7
    spread = T.transaction_table(ctx)
    assert spread.equals(whole)
    got = [(r["broker"], r["style"], r["uniq_key"], r["physical_offset"], r["state"], r["copies"])
           for r in spread.to_pylist()]
    assert got == [("a", "half", "k0", 100, "committed", 1), ("a", "half", "k2", 300, "committed_without_op", 1),
                   ("a", "half", "400", 400, "open", 1), ("a", "half", "k1", 500, "rolled_back", 2),
                   ("a", "prepared_record", "p0", 450, "rolled_back", 1),
                   ("a", "prepared_record", "p1", 630, "open", 1), ("b", "half", "k0", 10, "rolled_back", 1)]
    assert spread.column("age_ms").to_pylist() == [None, None, 996, None, None, 991, None]


class _NightState:
    """What the transactions' kept pairing asks of a state (jobs/audit/state.py AuditState): every broker compared,
    the parts kept by the last night (in ``last``) offered, this night's kept in ``now``; no store file read."""

    def __init__(self, last, now):
        self.last, self.now = last, now

    def compared(self, broker):
        return True

    def offer(self, broker, key, rels):
        from store_format.fs import resolve

        kept = self.last / f"{key}.arrow"
        return (resolve(str(kept)) if kept.exists() else None), resolve(str(self.now / f"{key}.arrow"))

    def rels(self, broker, locs):
        return ()

    def allows(self, broker, reaches):
        return True


def test_the_transactions_kept_pairing_pairs_again_only_what_new_and_gone_records_touch(tmp_path, monkeypatch):
    """Three nights of one store's transaction records: the last night's pairing kept, each night's table (PREPARED
    records and their ends too) equals a pairing of every record, with only the parts a new or gone record touches
    read again; a part of broker ``b`` never changes and none of its records is paired again."""
    from jobs.audit.checks import transactions as T

    from .conftest import count_paired

    settled = ("a", [r for i in range(10) for r in (  # transactions begun and ended in one part: never touched
        _half(1000 + 10 * i, 10 + i, f"s{i}", 20), _end("COMMIT", 1000 + 10 * i, 1005 + 10 * i))]
        + [dict(role="op", op_body=",".join(str(10 + i) for i in range(10)).encode(), store_timestamp=21)])
    later = ("a", [_end("COMMIT", 630, 1200),  # the open PREPARED record p1 committed
                   dict(role="op", op_body=b"2", store_timestamp=22),  # k2's half marked done at last
                   _half(1210, 20, "k9", 23), _half(1220, 21, "k0", 24, check="1")])  # k0 re-put
    nights = [[*_TXN_PARTS, settled], [*_TXN_PARTS, settled, later],
              [_TXN_PARTS[0], None, _TXN_PARTS[2], settled, later]]  # the second part expired
    paired = count_paired(monkeypatch)
    kept, tables = tmp_path / "night-0", []
    kept.mkdir()
    for i, parts in enumerate(nights):
        paired.append(0)
        full = T.transaction_table(_txn_ctx(_run(tmp_path / f"full{i}"), parts))
        paired.append(0)
        state = _NightState(kept, tmp_path / f"night-{i + 1}")
        got = T.transaction_table(_txn_ctx(_run(tmp_path / f"inc{i}"), parts, state))
        assert got.equals(full), i
        kept = state.now
        tables.append({r["uniq_key"]: (r["state"], r["copies"]) for r in got.to_pylist() if r["broker"] == "a"})
    total, with_state = paired[0::2], paired[1::2]
    assert with_state[0] == total[0] and 0 < with_state[1] < total[1] and 0 < with_state[2] < total[2], paired
    assert tables[0]["p1"] == ("open", 1) and tables[1]["p1"] == ("committed", 1) and "p1" not in tables[2]
    assert tables[0]["k2"][0] == "committed_without_op" and tables[1]["k2"][0] == "committed"
    assert tables[1]["k0"] == ("committed", 2) and tables[1]["k9"] == ("open", 1)
    assert tables[2]["k0"] == ("open", 2)  # its commit and op gone with the second part


def _delays_ctx(run, survey_parts, scan_parts, as_of):
    """A context for the delays family's driver step over spilled partials: the survey's parts of pending units,
    the scan's parts of found records and delivered copies (each a list of (name, table) per task)."""
    def stage(tasks, first):
        rows = []
        for i, emitted in enumerate(tasks):
            out = Emitter()
            for name, t in emitted:
                out.spill(name, t)
            out.write_findings(run, f"part-{first + i:05d}.parquet")
            rows += out.partials.get("_spilled", [])
        return Outputs({"_spilled": pa.concat_tables(rows)} if rows else {})

    survey, scan = stage(survey_parts, 0), stage(scan_parts, 100)

    class Ctx:
        def __init__(self):
            self.as_of = as_of
            self.queue_bounds = pa.Table.from_pylist(
                [{"broker": b, "topic": "SCHEDULE_TOPIC_XXXX", "queue_id": q, "min_offset": 0, "max_offset": 9}
                 for b in ("a", "b") for q in (0, 1)])

        def metadata(self, name):
            assert name == "delay_offsets"
            return pa.table({"broker": ["a", "b", "b"], "delay_level": [2, 1, 20], "offset": [3, 12, 0],
                             "error": pa.nulls(3, pa.string())})

        def survey_partial_batches(self, name, schema, columns=None):
            return survey.batches(name, schema, columns)

        def partial_batches(self, name, schema, columns=None):
            return scan.batches(name, schema, columns)

        def survey_partial_parts(self, name):
            return survey.parts(name)

        def partial_dataset(self, name, schema):
            return scan.dataset(name, schema)

        def findings_writer(self, name):  # kept in memory, as a family run on its own keeps them
            from jobs.audit.context import TableWriter
            from jobs.audit.findings import FINDING_SCHEMA

            return TableWriter(None, FINDING_SCHEMA)

    return Ctx()


def test_the_delays_join_out_of_core_is_the_join_in_memory(tmp_path, monkeypatch):
    """Pending units of two brokers over three survey parts, their records found by two scan tasks (one unit's
    record not found, one found twice), delivered copies (one key delivered twice, one pending unit with no key):
    spread over many buckets (two rows each) the decisions, the table and the findings are those of one bucket, in
    the survey's order."""
    from jobs.audit import buckets
    from jobs.audit.checks import delays as D

    def pending(broker, rows):
        return pa.Table.from_pylist([{"broker": broker, "level": lv, "queue_offset": qo, "physical_offset": po,
                                      "deliver_time": dt, "uniq_key": "survey", "real_topic": "survey"}
                                     for lv, qo, po, dt in rows], schema=D.PENDING)

    def found(broker, rows):
        return pa.Table.from_pylist([{"broker": broker, "physical_offset": po, "uniq_key": k, "real_topic": t,
                                      "segment": "s", "file_position": po, "store_timestamp": 0}
                                     for po, k, t in rows], schema=D.FOUND)

    def delivered(broker, rows):
        return pa.Table.from_pylist([{"broker": broker, "real_topic": t, "uniq_key": k} for t, k in rows],
                                    schema=D.DELIVERED)

    survey_parts = [[("delays.pending", pending("a", [(1, 0, 100, 500), (1, 1, 200, 1500), (2, 3, 300, 900)]))],
                    [("delays.pending", pending("b", [(1, 12, 50, 10), (2, 0, 60, 20), (2, 1, 70, 5000)]))],
                    [("delays.pending", pending("a", [(2, 4, 400, 950), (2, 5, 500, 100)]))]]
    scan_parts = [[("delays.found", found("a", [(100, "k1", "T"), (200, "k2", "T"), (300, "k3", "U"),
                                                (500, None, "T")])),
                   ("delays.delivered", delivered("a", [("T", "k2"), ("U", "k3")]))],
                  [("delays.found", found("a", [(300, "k3", "U")])),  # found by two tasks: one record
                   ("delays.found", found("b", [(50, "k1", "T"), (60, "k6", "V"), (70, "k7", "V")])),
                   ("delays.delivered", delivered("a", [("U", "k3")])),
                   ("delays.delivered", delivered("b", [("T", "k1"), ("V", "k7")]))]]
    ctx = _delays_ctx(_run(tmp_path), survey_parts, scan_parts, {"a": 1000, "b": 3000})

    def run():
        res = D.on_driver(ctx)
        decided = pa.concat_tables(list(D.decided_batches(ctx)))
        return decided, res.tables["delays"], pa.concat_tables(res.findings), res.metrics

    whole = run()
    monkeypatch.setattr(buckets, "ROWS_PER_BUCKET", 2)
    assert buckets.bucket_count(8) == 4
    spread = run()
    for a, b in zip(whole[:3], spread[:3]):
        assert a.equals(b)
    assert [m.to_pylist() for m in whole[3]] == [m.to_pylist() for m in spread[3]]
    decided, table, findings, _ = spread
    assert [(r["broker"], r["physical_offset"], r["uniq_key"], r["due"], r["delivered"])
            for r in decided.to_pylist()] == [
        ("a", 100, "k1", True, False), ("a", 200, "k2", False, True), ("a", 300, "k3", True, True),
        ("b", 50, "k1", True, True), ("b", 60, "k6", True, False), ("b", 70, "k7", False, True),
        ("a", 400, None, True, False), ("a", 500, None, True, False)]
    assert [(r["check"], r["broker"], r["physical_offset"]) for r in findings.to_pylist()] == [
        ("delays.overdue", "a", 100), ("delays.overdue", "b", 60), ("delays.overdue", "a", 400),
        ("delays.overdue", "a", 500), ("delays.delivered_offset_behind", "a", 200),
        ("delays.delivered_offset_behind", "a", 300), ("delays.delivered_offset_behind", "b", 50),
        ("delays.delivered_offset_behind", "b", 70), ("delays.offset_out_of_range", "b", None),
        ("delays.unknown_level", "b", None)]
    assert [(r["broker"], r["level"], r["pending"], r["overdue"], r["next_deliver_time"])
            for r in table.to_pylist()] == [("a", 1, 2, 1, 500), ("a", 2, 3, 2, 100), ("b", 1, 1, 0, 10),
                                            ("b", 2, 2, 1, 20), ("b", 20, 0, 0, None)]
    due = {r["physical_offset"]: r["message"] for r in findings.to_pylist() if r["check"] == "delays.overdue"}
    assert "due 0 s before" in due[100] and "due 2 s before" in due[60] and "due 0 s before" in due[500]


def test_a_written_table_is_held_to_row_groups_of_a_bound_not_one_a_batch(tmp_path, monkeypatch):
    """A family writes its detail table a batch per broker or bucket: the writer holds them to a row group of up to
    ROW_GROUP_ROWS rows (or ROW_GROUP_BYTES), so a fleet's 64 brokers are not 64 row groups; the rows are the
    batches', in order; a table given up leaves no file."""
    import pyarrow.parquet as pq

    from jobs.audit import context
    from jobs.audit.contract import WrittenTable

    schema = pa.schema([("broker", pa.string()), ("n", pa.int64())])
    batches = [pa.table({"broker": [f"b{i:02d}"] * 3, "n": [i, i + 1, i + 2]}, schema=schema) for i in range(64)]
    path = tmp_path / "t" / "part-00000.parquet"

    def written(rows_bound: int) -> pq.ParquetFile:
        monkeypatch.setattr(context, "ROW_GROUP_ROWS", rows_bound)
        w = context.TableWriter(str(path.parent), schema)
        for b in batches:
            w.write(b)
        done = w.close()
        assert isinstance(done, WrittenTable) and done.rows == 192
        f = pq.ParquetFile(path)
        assert f.read().to_pylist() == pa.concat_tables(batches).to_pylist()
        return f

    assert written(1 << 18).metadata.num_row_groups == 1
    assert written(30).metadata.num_row_groups == 7  # held to 30 rows or more: 10 batches a row group, 4 left
    monkeypatch.setattr(context, "ROW_GROUP_BYTES", 1)  # every batch past the bytes bound: a row group each
    assert written(1 << 18).metadata.num_row_groups == 64
    w = context.TableWriter(str(path.parent), schema)
    w.write(batches[0])
    w.abort()
    assert not path.exists()


def test_rows_kept_as_a_file_are_the_tables_next_file_between_the_rows_written_before_and_after(tmp_path):
    """TableWriter.add_file: a part kept by an audit state (its rows' Parquet file) written as it is, after the rows
    written so far (closed as a file of their own) and before the rows written next; the table's files in order hold
    its rows in order; a table given up leaves none of them."""
    import pyarrow.parquet as pq

    from jobs.audit import context
    from jobs.audit.contract import WrittenTable
    from jobs.audit.tasks import spilled_file

    schema = pa.schema([("broker", pa.string()), ("n", pa.int64())])
    batches = [pa.table({"broker": [f"b{i}"] * 2, "n": [i, -i]}, schema=schema) for i in range(5)]

    def written(steps, folder) -> context.TableWriter:
        w = context.TableWriter(str(folder), schema)
        for how, b in steps:
            if how == "rows":
                w.write(b)
            else:
                w.add_file(spilled_file("rows", [b]))
        return w

    folder = tmp_path / "t"
    done = written([("rows", batches[0]), ("rows", batches[1]), ("file", batches[2]), ("file", batches[3]),
                    ("rows", batches[4])], folder).close()
    assert isinstance(done, WrittenTable) and done.rows == 10
    assert [p.rsplit("/", 1)[-1] for p in map(str, done.paths)] == [f"part-0000{i}.parquet" for i in range(4)]
    assert sorted(p.name for p in folder.iterdir()) == [f"part-0000{i}.parquet" for i in range(4)]
    assert [pq.read_table(str(p)).num_rows for p in done.paths] == [4, 2, 2, 2]
    assert pq.read_table(folder).to_pylist() == pa.concat_tables(batches).to_pylist()
    assert done.head(5).to_pylist() == pa.concat_tables(batches).slice(0, 5).to_pylist()
    ends_with_a_file = written([("file", batches[0])], tmp_path / "u").close()  # no empty file after it
    assert [p.name for p in (tmp_path / "u").iterdir()] == ["part-00000.parquet"] and ends_with_a_file.rows == 2
    w = written([("rows", batches[0]), ("file", batches[1]), ("rows", batches[2])], tmp_path / "v")
    w.abort()
    assert not list((tmp_path / "v").iterdir())
    kept = context.TableWriter(None, schema)  # without a folder: the rows, the file's decoded among them
    kept.write(batches[0])
    kept.add_file(spilled_file("rows", [batches[1]]))
    assert kept.close().to_pylist() == pa.concat_tables(batches[:2]).to_pylist()


def test_a_writer_beside_writes_its_row_groups_in_another_thread_and_the_same_file(tmp_path):
    """The driver's tables are written beside the family making their rows (runtime.output.RowGroupWriter
    ``beside``: 0.86 s of the 4 GiB incremental audit's families was Parquet's encoding): each row group in a thread
    of its own, one at a time, in order, so the file is byte for byte the one written in the caller's thread; what a
    write raised is raised at the next flush or the close, which closes the file."""
    import threading

    import pyarrow.parquet as pq

    from runtime.output import RowGroupWriter, out_parquet_writer

    schema = pa.schema([("broker", pa.string()), ("n", pa.int64())])
    batches = [pa.table({"broker": [f"b{i % 7}"] * 1000, "n": range(i * 1000, i * 1000 + 1000)}, schema=schema)
               for i in range(40)]
    threads = []

    def opened(path):
        w = out_parquet_writer(str(path), schema)
        write = w.write_table

        def noted(*a, **k):
            threads.append(threading.get_ident())
            write(*a, **k)

        w.write_table = noted
        return w

    for beside in (False, True):
        threads.clear()
        w = RowGroupWriter(lambda first: opened(tmp_path / f"{beside}.parquet"), hold_rows=3000, hold_bytes=1 << 40,
                           beside=beside)
        for b in batches:
            w.write(b)
        w.close()
        assert len(threads) == 14  # 13 row groups of 3,000 rows, one of 1,000 at the close
        elsewhere = [t != threading.get_ident() for t in threads]
        assert elsewhere == ([True] * 13 + [False] if beside else [False] * 14)  # mutation: beside ignored
    assert (tmp_path / "True.parquet").read_bytes() == (tmp_path / "False.parquet").read_bytes()
    assert pq.ParquetFile(tmp_path / "True.parquet").metadata.num_row_groups == 14

    w = RowGroupWriter(lambda first: opened(tmp_path / "bad.parquet"), hold_rows=1, hold_bytes=1 << 40, beside=True)
    w.write(pa.table({"other": [1]}))  # not the file's schema: its write fails in the thread
    with pytest.raises(ValueError):
        w.close()
    assert w._file is None


def test_a_familys_table_is_closed_beside_the_next_family_and_waited_for_at_the_end(tmp_path):
    """AuditContext.closing: a family's table file gets its last row group and footer in a thread beside the
    families after it (0.3 s of the 4 GiB incremental audit's families waited for them); the job waits for every one
    (``tables_closed``) before it reads them.  A file that fails to close raises there and is removed."""
    import threading

    import pyarrow.parquet as pq

    from jobs.audit import context as C

    schema = pa.schema([("broker", pa.string()), ("n", pa.int64())])
    ctx = C.AuditContext.__new__(C.AuditContext)
    ctx.tables_dir, ctx.closing = str(tmp_path / "tables"), []
    writer = ctx.table_writer("t", schema)
    writer.write(pa.table({"broker": ["b"] * 5, "n": range(5)}, schema=schema))
    where = []
    close = writer._file.close

    def noted(**k):
        where.append(threading.get_ident())
        close(**k)

    writer._file.close = noted
    written = writer.close()
    assert ctx.closing == [writer] and written.rows == 5
    ctx.tables_closed()
    assert where and where[0] != threading.get_ident() and ctx.closing == []  # mutation: closed in the caller
    assert pq.read_table(tmp_path / "tables" / "t" / "part-00000.parquet").num_rows == 5

    bad = ctx.table_writer("bad", schema)
    bad.write(pa.table({"broker": ["b"], "n": [1]}, schema=schema))
    bad._file.flush(beside=False)  # the file begun: its footer is what fails
    file = bad._file._file
    footer, failed = file.close, []

    def failing():
        if not failed:
            failed.append(1)
            raise OSError("no space left")
        footer()

    file.close = failing
    assert (tmp_path / "tables" / "bad" / "part-00000.parquet").exists()
    bad.close()
    with pytest.raises(OSError, match="no space left"):
        ctx.tables_closed()
    assert not (tmp_path / "tables" / "bad" / "part-00000.parquet").exists()


@pytest.mark.spark
def test_an_audit_whose_tasks_write_every_spill_at_once_is_the_same_audit(spark, two_stores, local_audit, tmp_path,
                                                                          monkeypatch):
    from jobs import audit
    from jobs.audit import tasks

    from runtime.output import RowGroupWriter

    from .conftest import assert_same_audit

    monkeypatch.setattr(tasks, "SPILL_HOLD_BYTES", 1)
    written = []  # rows a task's spill wrote as they came (a hold of one byte: every batch at once)
    flush = RowGroupWriter.flush

    def counted(self, **how):
        if self.hold_bytes == 1 and self._held_rows:
            written.append(self._held_rows)
        flush(self, **how)

    monkeypatch.setattr(RowGroupWriter, "flush", counted)
    out = tmp_path / "audit"
    args = audit.build_parser().parse_args(["--store", *map(str, two_stores), "--out", str(out)])
    assert audit.run(spark, args).exit_code == local_audit[1]
    assert written  # (the executor ran the tasks here: local[2])
    assert_same_audit(out, local_audit[0])


def test_a_kept_tasks_spilled_rows_are_one_file_kept_and_given_back_as_they_are(tmp_path, monkeypatch):
    """A kept task's spilled rows are encoded once (Emitter.pack_spilled), as the file the run writes: the state's
    part keeps those bytes, and a part given back writes them into the run as they are, its SPILLED row the one a
    task spilling the same rows writes; no Parquet writer opened, nothing decoded."""
    import pyarrow.parquet as pq

    from jobs.audit import state, tasks
    from runtime import output
    from store_format.fs import resolve

    kept = Emitter()
    kept.spill("retries.hops", _hops([300, 100]))
    kept.spill("retries.hops", _hops([500]))
    part = resolve(str(tmp_path / "state" / "part.arrow"))
    state.write_part(part, kept)
    [packed] = kept.spilled_files
    assert kept.spilled == {} and packed.name == "retries.hops" and packed.rows == 3

    written = Emitter()  # what a task spilling the same rows writes
    written.spill("retries.hops", _hops([300, 100, 500]))
    written.write_findings(_run(tmp_path / "written"), "part-00002.parquet")
    [as_written] = written.partials["_spilled"][0].to_pylist()

    def no_writer(*a, **k):
        raise AssertionError("a kept part's rows encoded again")

    monkeypatch.setattr(output, "out_parquet_writer", no_writer)
    run = _run(tmp_path / "given")
    back = Emitter((run, "part-00002.parquet"))
    state.read_part(part, back)
    back.write_findings(run, "part-00002.parquet")
    [row] = back.partials["_spilled"][0].to_pylist()
    path = tmp_path / "given" / "partials" / "retries.hops" / "part-00002.0.parquet"
    assert path.read_bytes() == packed.data
    assert row == {**as_written, "path": str(path), "bytes": len(packed.data)}
    assert pq.read_table(path).equals(pq.read_table(as_written["path"]))


def test_a_failed_task_removes_the_kept_files_it_wrote(tmp_path):
    from jobs.audit import tasks

    held = Emitter()
    held.spill("retries.hops", _hops([1, 2]))
    held.pack_spilled()

    class Fails:
        broker = "b"

        def describe(self):
            return "a task given back, then failing"

        def run(self, out):
            out.merge(held)  # its kept file written at once
            raise ValueError("bad input")

    out = tasks.run_one(4, Fails(), _run(tmp_path))
    assert "_spilled" not in out.partials
    assert not list((tmp_path / "partials" / "retries.hops").glob("*.parquet"))
