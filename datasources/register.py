"""Registers every data source of the project with a SparkSession (jobs/session.py calls it)."""
from __future__ import annotations

from .commitlog import CommitLogDataSource
from .consumequeue import ConsumeQueueDataSource
from .indexfile import IndexDataSource
from .metadata import MetadataDataSource

DATA_SOURCES = (CommitLogDataSource, ConsumeQueueDataSource, IndexDataSource, MetadataDataSource)


def register_all(spark) -> None:
    for source in DATA_SOURCES:
        spark.dataSource.register(source)
