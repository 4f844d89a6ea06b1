"""Wide brokers (issue 40): consume-queue files are binned into tasks by the bytes they hold, not by the 6 MB a
broker preallocates for each; the queues table keeps the survey's listing order however many tasks made it."""
from __future__ import annotations

import os
import struct

import pyarrow as pa
import pytest

from store_format import layout as L
from store_format.plan import GROUP_BYTES, group_queue_files
from store_format.queues import list_queue_files

CQ_FILE_SIZE = 6_000_000  # the broker's default consume-queue file (300,000 units)


def _queue_file(root, topic: str, qid: int, sparse: bool) -> None:
    d = root / "consumequeue" / topic / str(qid)
    d.mkdir(parents=True)
    with open(d / "00000000000000000000", "wb") as f:
        f.write(struct.pack(">qiq", 0, 100, 0))  # one unit, as a queue of one message holds
        if sparse:
            f.truncate(CQ_FILE_SIZE)  # preallocated as RandomAccessFile.setLength leaves it: a hole
        else:
            f.write(bytes(CQ_FILE_SIZE - L.CQ_STORE_UNIT_SIZE))  # the same zeros, written out


def _holes_supported(path) -> bool:
    st = os.stat(path)
    return st.st_blocks * 512 < st.st_size


def test_stored_bytes_is_the_length_less_the_holes(tmp_path):
    _queue_file(tmp_path, "Sparse", 0, sparse=True)
    _queue_file(tmp_path, "Dense", 0, sparse=False)
    files = {f.topic: f for f in list_queue_files(tmp_path)}
    assert files["Dense"].stored_bytes == files["Dense"].length == CQ_FILE_SIZE
    if not _holes_supported(files["Sparse"].loc.path):
        pytest.skip("this file system stores no holes")
    assert files["Sparse"].length == CQ_FILE_SIZE
    assert 0 < files["Sparse"].stored_bytes < 64 << 10


def test_sparse_queue_files_fill_a_bin_by_what_they_hold(tmp_path):
    for q in range(40):
        _queue_file(tmp_path, f"T{q // 8:03d}", q % 8, sparse=True)
    files = list_queue_files(tmp_path)
    if not _holes_supported(files[0].loc.path):
        pytest.skip("this file system stores no holes")
    by_length = group_queue_files(files)
    by_stored = group_queue_files(files, cost=lambda f: f.stored_bytes)
    assert len(by_length) == -(-40 // (GROUP_BYTES // CQ_FILE_SIZE))  # 10 files of 6 MB a bin: 4 tasks
    assert len(by_stored) == 1  # 40 files of one unit each: one task
    # the same files in the same order (whole queues, by topic and queue id), only cut differently
    assert [f.loc.path for g in by_stored for f in g] == [f.loc.path for g in by_length for f in g]


def test_queue_bounds_keep_the_listing_order_whatever_the_chunks(monkeypatch):
    from jobs.audit import context as C
    from jobs.audit.routes import CQ_FILES

    keys = [(f"T{t:03d}", q) for t in range(300) for q in range(8)]
    rows = [{"broker": "b", "path": f"{t}/{q}", "topic": t, "queue_id": q, "units": 1, "entries": 1,
             "min_queue_offset": 0, "max_queue_offset": 0} for t, q in keys]
    full = pa.Table.from_pylist(rows, schema=CQ_FILES)
    for chunk in (1, 11, 256, len(rows)):
        table = pa.concat_tables([full.slice(i, chunk) for i in range(0, len(rows), chunk)])
        ctx = C.AuditContext.__new__(C.AuditContext)
        monkeypatch.setattr(C.AuditContext, "survey_partial",
                            lambda self, name, schema=None, t=table: t if name == "survey.consumequeue_files"
                            else schema.empty_table())
        bounds = C.AuditContext.queue_bounds.func(ctx)
        assert list(zip(bounds.column("topic").to_pylist(), bounds.column("queue_id").to_pylist())) == keys
