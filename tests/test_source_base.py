"""The sources' readers plan through datasources/base.py's one hook (issue 25): the base finds the inputs of
the reader's PART that ``path`` names and hands them to ``plan``; an empty plan is one partition that reads
nothing; ``read`` dispatches to ``read_partition``.  No Spark: the readers are driven as Spark drives them."""
from __future__ import annotations

import shutil

import pytest

from datasources.base import NothingToRead, StoreReader
from datasources.commitlog import CommitLogReader
from datasources.consumequeue import ConsumeQueueReader
from datasources.indexfile import IndexReader
from datasources.metadata import MetadataReader
from datasources.timerlog import TimerLogReader
from store_format.layout import STORE_PART_FOLDERS

from .conftest import fixture_store

READERS = {"commitlog": CommitLogReader, "consumequeue": ConsumeQueueReader, "index": IndexReader}


def _rows(reader) -> list[dict]:
    return [r for part in reader.partitions() for b in reader.read(part) for r in b.to_pylist()]


def test_every_reader_plans_through_the_base():
    for reader in (*READERS.values(), MetadataReader, TimerLogReader):
        assert issubclass(reader, StoreReader) and reader.PART in STORE_PART_FOLDERS, reader
        # the source's own parts are plan and read_partition; partitions and read stay the base's
        assert reader.partitions is StoreReader.partitions and reader.read is StoreReader.read, reader
        assert reader.plan is not StoreReader.plan and reader.read_partition is not StoreReader.read_partition


@pytest.mark.parametrize("part", sorted(READERS))
def test_an_empty_part_folder_is_one_partition_that_reads_nothing(tmp_path, part):
    (tmp_path / "store" / part).mkdir(parents=True)
    reader = READERS[part]({"path": str(tmp_path / "store")})
    assert reader.partitions() == [NothingToRead()]
    assert _rows(reader) == []


@pytest.mark.parametrize("part", sorted(READERS))
def test_the_inputs_planned_are_the_ones_path_and_broker_name(tmp_path, part):
    """A folder of two stores: each store's files are planned once, under its own broker name, or under the
    ``broker`` option's for every row."""
    for name in ("a", "b"):
        shutil.copytree(fixture_store("broker"), tmp_path / name / "store")
    one = _rows(READERS[part]({"path": str(tmp_path / "a" / "store")}))
    both = _rows(READERS[part]({"path": str(tmp_path)}))
    assert one and sorted(r["broker"] for r in both) == sorted(["a"] * len(one) + ["b"] * len(one))
    renamed = _rows(READERS[part]({"path": str(tmp_path / "a" / "store"), "broker": "x"}))
    assert [r["broker"] for r in renamed] == ["x"] * len(one)
