"""``rocketmq-metadata``: a store's small files as DataFrames, one reader for all of them.

``option("table", ...)`` chooses: ``checkpoint`` (StoreCheckpoint fields and the derived minimum
timestamps), ``markers`` (abort / lock presence), ``consumer_offsets``, ``delay_offsets``, ``topics``,
``subscription_groups`` (config/*.json through store_format's fastjson-tolerant reader, with its ``.bak``
fallback; ``source`` says which file was used).  One row set per broker; a file that cannot be read gives
one row with ``error`` set instead of failing the query.
"""
from __future__ import annotations

import json
import os
import tempfile
from dataclasses import dataclass

import pyarrow as pa
from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition

from store_format import config as C
from store_format.checkpoint import read_checkpoint, read_markers
from store_format.errors import StoreFormatError

from .storepaths import Location, find_inputs

FORMAT = "rocketmq-metadata"
_S, _I, _L, _B = pa.string(), pa.int32(), pa.int64(), pa.bool_()
TABLES = {
    "checkpoint": [("physic_msg_timestamp", _L), ("logics_msg_timestamp", _L), ("index_msg_timestamp", _L),
                   ("master_flushed_offset", _L), ("confirm_phy_offset", _L), ("min_timestamp", _L),
                   ("min_timestamp_index", _L), ("file_length", _L)],
    "markers": [("abort", _B), ("abort_pid", _L), ("lock", _B)],
    "consumer_offsets": [("topic", _S), ("group", _S), ("queue_id", _I), ("offset", _L)],
    "delay_offsets": [("delay_level", _I), ("offset", _L)],
    "topics": [("topic", _S), ("read_queue_nums", _I), ("write_queue_nums", _I), ("perm", _I),
               ("topic_filter_type", _S), ("topic_sys_flag", _I), ("order", _B), ("config_json", _S)],
    "subscription_groups": [("group", _S), ("consume_enable", _B), ("consume_broadcast_enable", _B),
                            ("retry_queue_nums", _I), ("retry_max_times", _I), ("broker_id", _L),
                            ("which_broker_when_consume_slowly", _L), ("config_json", _S)],
}
CONFIG_FILE = {"consumer_offsets": "consumerOffset.json", "delay_offsets": "delayOffset.json",
               "topics": "topics.json", "subscription_groups": "subscriptionGroup.json"}
# files each table reads, relative to the store root (copied locally first when the store is remote)
_FILES = {"checkpoint": ("checkpoint",), "markers": ("abort", "lock")}


def schema_of(table: str) -> pa.Schema:
    if table not in TABLES:
        raise ValueError(f"option table={table!r}: choose one of {', '.join(TABLES)}")
    return pa.schema([("broker", _S)] + TABLES[table] + [("source", _S), ("error", _S)])


@dataclass
class StorePartition(InputPartition):
    broker: str
    root: Location


def table_rows(table: str, broker: str, root: str) -> list[dict]:
    """Rows of ``table`` for one local store root."""
    def row(**kw):
        return {"broker": broker, **kw}

    try:
        if table == "checkpoint":
            path = os.path.join(root, "checkpoint")
            cp = read_checkpoint(path)
            return [row(**{k: v for k, v in vars(cp).items()}, min_timestamp=cp.min_timestamp,
                        min_timestamp_index=cp.min_timestamp_index, source=path)]
        if table == "markers":
            m = read_markers(root)
            return [row(abort=m.abort, abort_pid=m.abort_pid, lock=m.lock, source=root)]
    except StoreFormatError as e:
        return [row(error=str(e))]
    cfg = C.read_config(os.path.join(root, "config"), CONFIG_FILE[table])
    if cfg.data is None:
        errors = "; ".join(str(e) for e in cfg.errors)
        return [row(error=errors)] if errors else []
    try:
        return _config_rows(table, cfg, row)
    except StoreFormatError as e:  # parsed, but not the shape RocketMQ writes (e.g. a table that is not an object)
        return [row(error=str(e), source=cfg.source)]


def _config_rows(table: str, cfg, row) -> list[dict]:
    src = cfg.source
    if table == "consumer_offsets":
        return [row(topic=t, group=g, queue_id=q, offset=o, source=src)
                for (t, g), queues in sorted(C.consumer_offsets(cfg).items()) for q, o in sorted(queues.items())]
    if table == "delay_offsets":
        return [row(delay_level=k, offset=v, source=src) for k, v in sorted(C.delay_offsets(cfg).items())]
    if table == "topics":
        return [row(topic=name, read_queue_nums=_int(c.get("readQueueNums")),
                    write_queue_nums=_int(c.get("writeQueueNums")), perm=_int(c.get("perm")),
                    topic_filter_type=c.get("topicFilterType"), topic_sys_flag=_int(c.get("topicSysFlag")),
                    order=c.get("order"), config_json=_json(c), source=src)
                for name, c in sorted(C.topic_configs(cfg).items(), key=_by_name) if isinstance(c, dict)]
    return [row(group=name, consume_enable=c.get("consumeEnable"),
                consume_broadcast_enable=c.get("consumeBroadcastEnable"),
                retry_queue_nums=_int(c.get("retryQueueNums")), retry_max_times=_int(c.get("retryMaxTimes")),
                broker_id=_int(c.get("brokerId")),
                which_broker_when_consume_slowly=_int(c.get("whichBrokerWhenConsumeSlowly")),
                config_json=_json(c), source=src)
            for name, c in sorted(C.subscription_groups(cfg).items(), key=_by_name) if isinstance(c, dict)]


def _by_name(item) -> str:
    return str(item[0])  # fastjson maps may mix bare numeric and quoted keys


def _json(obj) -> str:
    return json.dumps({str(k): v for k, v in obj.items()}, sort_keys=True, ensure_ascii=False, default=str)


def _int(v):
    return v if isinstance(v, int) and not isinstance(v, bool) else None


class MetadataDataSource(DataSource):
    @classmethod
    def name(cls) -> str:
        return FORMAT

    def schema(self) -> str:
        from .commitlog import spark_ddl

        return spark_ddl(schema_of(self.options.get("table", "")))

    def reader(self, schema):
        return MetadataReader(self.options)


class MetadataReader(DataSourceReader):
    def __init__(self, options):
        self.path = options.get("path")
        self.broker = options.get("broker")
        self.table = options.get("table", "")
        self.schema = schema_of(self.table)

    def partitions(self):
        # find_inputs names each store root's config/ folder; the root is its parent
        return [StorePartition(i.broker, i.loc.parent()) for i in find_inputs(self.path, "config", self.broker)]

    def read(self, partition: StorePartition):
        root = partition.root
        if root.local_path is not None:
            rows = table_rows(self.table, partition.broker, root.local_path)
        else:
            with tempfile.TemporaryDirectory(prefix="rmq-meta-") as tmp:
                _mirror(root, tmp, self.table)
                rows = table_rows(self.table, partition.broker, tmp)
        if rows:
            yield pa.RecordBatch.from_pylist(rows, schema=self.schema)


def _mirror(root: Location, tmp: str, table: str) -> None:
    """Copy the small files a table reads from a remote store root into ``tmp`` (same relative paths)."""
    if table in _FILES:
        names = _FILES[table]
    else:
        base = CONFIG_FILE[table]
        names = (f"config/{base}", f"config/{base}.bak")
        os.makedirs(os.path.join(tmp, "config"))
    for name in names:
        loc = root.child(name)
        if loc.is_file():
            with loc.fs.open_input_stream(loc.path) as src, open(os.path.join(tmp, name), "wb") as dst:
                dst.write(src.read())
