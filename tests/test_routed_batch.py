"""Many consume-queue files' windows read as one (jobs/audit/routes.py ``_queue_windows``, ``ManyWindows``) show a
commitlog range exactly the units, in exactly the order, that reading each file's window on its own shows: checked
on every range of whole audits of RocketMQ's own stores, of a store whose units address ConsumeQueueExt, and of a
damaged store in 8 KiB segments (units pointing into a record and past the data's end)."""
from __future__ import annotations

import dataclasses
import threading
from pathlib import Path

import pytest

from jobs.audit import scan as S
from jobs.audit.routes import ROUTES, ManyWindows
from store_format.write.generate import TrafficConfig, generate_store
from store_format.write.writer import WriterConfig

from .conftest import FIXTURES, FIXTURES_5X
from .test_joint_ranges import _damaged_4x



def _ext_store(tmp: Path) -> Path:
    store = tmp / "ext"
    generate_store(store, TrafficConfig(messages=1500, topics=2, queues=2, seed=3),
                   WriterConfig(mappedFileSizeCommitLog=1 << 20, enableConsumeQueueExt=True,
                                mappedFileSizeConsumeQueueExt=4096))
    assert (store / "consumequeue_ext").is_dir()
    return store


STORES = {
    "4.9.7-basic": lambda tmp: FIXTURES / "basic" / "store",
    "4.9.7-recovered-zero-page": lambda tmp: FIXTURES / "recovered-zero-page" / "input" / "store",
    "5.3.3-v5-lmq": lambda tmp: FIXTURES_5X / "v5-lmq" / "store",
    "5.3.3-v5-batchcq": lambda tmp: FIXTURES_5X / "v5-batchcq" / "store",
    "ext": _ext_store,
    "damaged-8k": _damaged_4x,
}


@pytest.mark.spark
@pytest.mark.parametrize("name", list(STORES))
def test_a_batch_of_windows_shows_what_each_file_shows(spark, tmp_path, monkeypatch, name):
    from jobs.audit import job as audit_job

    store = STORES[name](tmp_path)
    real = S.RangeContext._read_routed
    lock = threading.Lock()  # one range at a time: the swap of a route below is the process's
    compared, batched = [], []

    def both(self, route_name):
        with lock:
            route = ROUTES[route_name]
            windows = (self._windows or S.RoutedWindows(self.facts, self.lo, self.hi)).of(route_name)
            got = real(self, route_name)
            if route.read_windows is None:
                return got
            kept = self._windows
            ROUTES[route_name] = dataclasses.replace(route, read_windows=None)
            self._windows = None
            try:
                alone = real(self, route_name)
            finally:
                ROUTES[route_name], self._windows = route, kept
            assert got.schema == alone.schema
            assert got.combine_chunks().equals(alone.combine_chunks()), (route_name, self.lo, self.hi)
            compared.append(got.num_rows)
            batched.append(isinstance(windows, ManyWindows))
            return got

    monkeypatch.setattr(S.RangeContext, "_read_routed", both)
    args = audit_job.build_parser().parse_args(["--store", str(store), "--out", str(tmp_path / "out"),
                                                "--no-report"])
    audit_job.run(spark, args)
    assert compared and sum(compared) > 0
    assert any(batched)  # batchconsumequeue/'s files are read file by file, consumequeue/'s flat files batched
