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
                   "first_offset": 100, "last_offset": 500}
    assert out.spilled == {}  # the rows are let go once written
    assert "retries.hops" not in out.partials


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


def test_no_spilled_part_is_an_empty_dataset_of_the_schema():
    t = Outputs().dataset("retries.hops", HOPS).to_table()
    assert t.num_rows == 0 and t.schema == HOPS


def test_a_stage_without_a_partials_folder_refuses_a_spill(tmp_path):
    out = Emitter()
    out.spill("retries.hops", _hops([1]))
    with pytest.raises(RuntimeError, match="spilled the partial retries.hops"):
        out.write_findings(RunInfo(None), "part-00000.parquet")


def test_the_retries_hops_come_a_part_at_a_time_by_broker_and_offset(tmp_path):
    """Parts of a broker that do not overlap are read one at a time, each put in order; a broker whose parts
    overlap is read whole and sorted."""
    from jobs.audit.checks import retries

    run = _run(tmp_path)
    rows = []
    for i, (broker, offsets) in enumerate((("b", [10, 20]), ("b", [15, 30]), ("a", [5]), ("c", [60, 55]),
                                           ("c", [70]))):
        out = Emitter()
        hops = pa.table({f.name: pa.nulls(len(offsets), f.type) for f in retries.HOPS}, schema=retries.HOPS)
        hops = hops.set_column(0, "broker", pa.array([broker] * len(offsets)))
        hops = hops.set_column(hops.schema.get_field_index("physical_offset"), "physical_offset",
                               pa.array(offsets, pa.int64()))
        out.spill("retries.hops", hops)
        out.write_findings(run, f"part-{i:05d}.parquet")
        rows.append(out.partials["_spilled"][0])
    scan = Outputs({"_spilled": pa.concat_tables(rows)})

    class Ctx:
        def partial_parts(self, name):
            return scan.parts(name)

        def partial_dataset(self, name, schema):
            return scan.dataset(name, schema)

    got = [(b, t.column("physical_offset").to_pylist()) for b, t in retries._hop_parts(Ctx())]
    assert got == [("a", [5]), ("b", [10, 15, 20, 30]), ("c", [55, 60]), ("c", [70])]
