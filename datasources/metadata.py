"""``rocketmq-metadata``: a store's small files as DataFrames, one reader for all of them: ``option("table", ...)``
chooses the table (decoding/metadata.py builds each one and documents them: checkpoint, markers, unreadable_files,
consumer_offsets, lmq_consumer_offsets, delay_offsets, topics, subscription_groups), one row set per broker.
"""
from __future__ import annotations

from dataclasses import dataclass

import pyarrow as pa
from pyspark.sql.datasource import InputPartition

from store_format.fs import Location
from decoding.metadata import schema_of, table_batch

from .base import StoreDataSource, StoreReader

FORMAT = "rocketmq-metadata"


@dataclass
class StorePartition(InputPartition):
    broker: str
    root: Location


class MetadataReader(StoreReader):
    PART = "config"

    def __init__(self, options):
        super().__init__(options)
        self.table = options.get("table", "")

    def plan(self, inputs):
        # the inputs are each store root's config/ folder; the root is its parent
        return [StorePartition(i.broker, i.loc.parent()) for i in inputs]

    def read_partition(self, partition: StorePartition):
        root = partition.root
        t = table_batch(self.table, partition.broker, root.local_path or root)
        yield from t.to_batches(max_chunksize=1 << 16)


class MetadataDataSource(StoreDataSource):
    FORMAT = FORMAT
    READER = MetadataReader

    def arrow_schema(self) -> pa.Schema:
        table = self.options.get("table", "")
        try:
            return schema_of(table)
        except ValueError as e:
            raise ValueError(f"option {e}") from None
