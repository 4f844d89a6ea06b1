"""One audit run's commit without the audit, for the tests that kill it at each step (tests/test_history.py).

  python -m tests.support.history_run --history DIR --out OUT --like AUDIT_OUT --input STORE

claims the history and the output as the audit does (runtime/history.py ``claim_history``, runtime/output.py
``prepare_output``: what earlier runs left is settled there), stages a copy of the committed audit output
AUDIT_OUT with its findings and metrics stamped with this run's id, and commits the run through the real
``JobRun.commit``, saying each step on stderr, where tests/support/paused.py holds it for the test's signal.
"""
from __future__ import annotations

import argparse
import shutil
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq


def _restamped(folder: Path, run_id: str, run_time) -> pa.Table:
    t = pq.read_table(folder)
    when = pa.array([run_time] * t.num_rows, t.schema.field("run_time").type)
    t = t.set_column(t.schema.get_field_index("run_id"), "run_id", pa.array([run_id] * t.num_rows, pa.string()))
    return t.set_column(t.schema.get_field_index("run_time"), "run_time", when)


def main(argv=None) -> None:
    from runtime import progress
    from runtime.commit import JobRun
    from runtime.history import claim_history
    from runtime.output import prepare_output
    from store_format.fs import OUTPUT_MARKER

    p = argparse.ArgumentParser()
    for option in ("--history", "--out", "--like", "--input"):
        p.add_argument(option, required=True)
    a = p.parse_args(argv)
    progress.configure("audit")
    with JobRun("audit") as run:
        history = claim_history(run, a.history, inputs=[a.input])
        staging = Path(prepare_output(a.out, overwrite=True, inputs=[a.input], job="audit").staging_path)
        like = Path(a.like)
        for entry in like.iterdir():
            if entry.name in ("findings", "metrics", OUTPUT_MARKER):
                continue
            (shutil.copytree if entry.is_dir() else shutil.copy2)(entry, staging / entry.name)
        for table in ("findings", "metrics"):
            (staging / table).mkdir()
            pq.write_table(_restamped(like / table, run.run_id, run.started), staging / table / "part-0.parquet")
            (staging / table / "_SUCCESS").write_bytes(b"")
        history.stage(str(staging / "findings"), str(staging / "metrics"), a.out)
        run.commit()


if __name__ == "__main__":
    main()
