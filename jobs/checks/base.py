"""What every audit check shares: the findings and metrics contract, and the context holding the dump's tables.

A check family is a module with ``run(ctx) -> CheckResult``.  It reads the shared DataFrames of
:class:`AuditContext` (read once, cached) and returns findings and metrics in the shapes below, plus any
detail tables it owns (``lag``, ``transactions``...).  Adding a check never touches another.

findings: one row per problem or notable fact, ``check`` = ``family.name``; ``finding_id`` is a stable hash
of where it is (check, broker, file, positions, topic/queue/offset, key), so the same damage has the same id
in every run and ``jobs/trend.py`` can tell new damage from old.
metrics: long format (``metric``, ``value``) per broker / topic / queue / group / level, so new figures
never change the schema of a history table.
"""
from __future__ import annotations

import sys
import time
from dataclasses import dataclass, field
from functools import cached_property

from pyspark import StorageLevel
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql import types as T

from store_format import layout as L
from store_format.brokerconf import StoreGeometry
from store_format.recovery import RecoveryPrediction, predict_recovery
from store_format.store import Store

SEVERITIES = ("error", "warning", "info")

FINDING_FIELDS = T.StructType([
    T.StructField("check", T.StringType(), False),
    T.StructField("severity", T.StringType(), False),
    T.StructField("broker", T.StringType()),
    T.StructField("file", T.StringType()),
    T.StructField("file_position", T.LongType()),
    T.StructField("physical_offset", T.LongType()),
    T.StructField("topic", T.StringType()),
    T.StructField("queue_id", T.IntegerType()),
    T.StructField("queue_offset", T.LongType()),
    T.StructField("message", T.StringType()),
    T.StructField("details", T.MapType(T.StringType(), T.StringType())),
])
METRIC_FIELDS = T.StructType([
    T.StructField("broker", T.StringType()),
    T.StructField("scope", T.StringType(), False),  # broker | segment | topic | queue | group | level
    T.StructField("topic", T.StringType()),
    T.StructField("queue_id", T.IntegerType()),
    T.StructField("group", T.StringType()),
    T.StructField("metric", T.StringType(), False),
    T.StructField("value", T.DoubleType()),
])
_POSITION_COLUMNS = ("broker", "file", "file_position", "physical_offset", "topic", "queue_id", "queue_offset")

# Columns of the commitlog the checks use (the body only for transaction op messages, whose body is data).
MESSAGE_COLUMNS = (
    "broker", "segment", "file_position", "physical_offset", "store_size", "beyond_first_stop", "topic",
    "queue_id", "queue_offset", "sys_flag", "tran_type", "born_timestamp", "store_timestamp", "store_host",
    "reconsume_times", "prepared_transaction_offset", "msg_id", "uniq_key", "keys", "tags", "tags_code",
    "delay_level", "real_topic", "real_queue_id", "retry_topic", "origin_message_id", "body_crc_ok", "size_ok",
)
# The few properties the checks read beyond the decoded columns, kept as columns of their own: the whole
# properties map is the widest column and would be most of the cached table.
PROPERTY_COLUMNS = {"producer_group": L.PROPERTY_PRODUCER_GROUP, "check_times": L.PROPERTY_TRANSACTION_CHECK_TIMES,
                    "property_real_topic": L.PROPERTY_REAL_TOPIC}
DISPATCHED_TYPES = ("NOT", "COMMIT")  # PREPARED and ROLLBACK get no consume-queue entry


def progress(message: str) -> None:
    print(f"[audit {time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


@dataclass
class CheckResult:
    findings: list[DataFrame] = field(default_factory=list)
    metrics: list[DataFrame] = field(default_factory=list)
    tables: dict[str, DataFrame] = field(default_factory=dict)


@dataclass(frozen=True)
class StoreInput:
    name: str  # the broker column
    path: str  # local store root
    source: str  # the input path it was found under (a store root, or a folder of store roots)
    from_folder: bool = False  # found in a folder of store roots: the data sources name it from its folder


def spark_schema(schema) -> T.StructType:
    from pyspark.sql.pandas.types import from_arrow_schema

    return from_arrow_schema(schema)


class AuditContext:
    """The dump as DataFrames (each read once and cached) plus the driver-side facts the checks share."""

    def __init__(self, spark: SparkSession, stores: list[StoreInput], *, as_of: int | None = None,
                 check_crc: bool = True, split_size: str | None = None, message_index_safe: bool = False,
                 segment_size: int | None = None, geometry: StoreGeometry | None = None):
        self.spark = spark
        # what --config/--segment-size/--hash-slots/--index-num give, for every store (the rest: from the files)
        self.geometry = (geometry or StoreGeometry()).merged(segment_size=segment_size)
        self.segment_size = self.geometry.segment_size
        self.stores = stores
        self.as_of_override = as_of
        self.check_crc = check_crc
        self.split_size = split_size
        self.message_index_safe = message_index_safe
        self._cached: list[DataFrame] = []

    # -- driver-side facts ---------------------------------------------------------------------------
    @cached_property
    def store_objects(self) -> dict[str, Store]:
        return {s.name: Store(s.path, **self.geometry.store_kwargs()) for s in self.stores}

    @cached_property
    def recovery(self) -> dict[str, RecoveryPrediction]:
        return {name: predict_recovery(store, message_index_safe=self.message_index_safe,
                                       check_crc=self.check_crc)
                for name, store in self.store_objects.items()}

    @cached_property
    def as_of(self) -> dict[str, int]:
        """The dump time per broker: --as-of, else the newest store time in its commitlog (the best offline
        estimate of when the broker stopped writing)."""
        if self.as_of_override is not None:
            return {s.name: self.as_of_override for s in self.stores}
        rows = self.messages.groupBy("broker").agg(F.max("store_timestamp").alias("t")).collect()
        found = {r["broker"]: r["t"] for r in rows}
        return {s.name: int(found.get(s.name) or 0) for s in self.stores}

    def as_of_column(self, broker_col: str = "broker"):
        """The per-broker dump time as a column expression."""
        mapping = F.create_map(*[x for name, t in self.as_of.items() for x in (F.lit(name), F.lit(t))])
        return mapping[F.col(broker_col)].cast("long")

    def recovered_end_column(self, broker_col: str = "broker"):
        mapping = F.create_map(*[x for name, p in self.recovery.items()
                                 for x in (F.lit(name), F.lit(p.max_physical_offset))])
        return mapping[F.col(broker_col)].cast("long")

    # -- tables ---------------------------------------------------------------------------------------
    def _persist(self, df: DataFrame) -> DataFrame:
        """Cache ``df`` and compute it now: the findings are written by one query whose independent stages run
        at once, and each of them would compute a cache that is not filled yet all over again.  Caching costs
        memory and several times the work of recomputing a join from cached inputs: keep it for the data
        sources' tables (Python workers) and small derived tables."""
        df = df.persist(StorageLevel.MEMORY_AND_DISK)
        df.count()
        self._cached.append(df)
        return df

    def _union(self, frames: list[DataFrame]) -> DataFrame:
        out = frames[0]
        for f in frames[1:]:
            out = out.unionByName(f)
        return out

    def _source_options(self, stores: list[StoreInput], options: dict) -> dict:
        """A single root is read under its (possibly renamed) broker name; a folder names its roots itself."""
        if len(stores) == 1 and not stores[0].from_folder:
            return {**options, "broker": stores[0].name}
        return dict(options)

    def _load(self, fmt: str, **options) -> list[DataFrame]:
        """One read per input path (a folder of store roots is one read: each load costs planner workers)."""
        return [self.spark.read.format(fmt).options(**self._source_options(stores, options)).load(source)
                for source, stores in self.sources.items()]

    @cached_property
    def sources(self) -> dict[str, list[StoreInput]]:
        by_source: dict[str, list[StoreInput]] = {}
        for s in self.stores:
            by_source.setdefault(s.source, []).append(s)
        return by_source

    @cached_property
    def commitlog(self) -> DataFrame:
        """Every item of the salvage walk of every store (messages decoded, bodies only where needed)."""
        from datasources import read_commitlog

        # only the columns kept below (body_crc too: with it, framing's CRC check answers body_crc_ok)
        decoded = MESSAGE_COLUMNS + ("body_crc", "body", "properties")
        opts = {"walk": "salvage", "materialize": "decoded", "checkCrc": str(self.check_crc).lower(),
                "columns": ",".join(decoded)}
        if self.split_size:
            opts["splitSize"] = self.split_size
        if self.segment_size:
            opts["segmentSize"] = str(self.segment_size)
        df = self._union([read_commitlog(self.spark, source, **self._source_options(stores, opts))
                          for source, stores in self.sources.items()])
        keep = [c for c in df.columns if c in MESSAGE_COLUMNS or c in (
            "kind", "length", "reason", "field", "detail", "excerpt_hex")]
        op_body = F.when(F.col("topic") == L.TRANS_OP_HALF_TOPIC, F.col("body")).alias("op_body")
        props = [F.col("properties")[key].alias(name) for name, key in PROPERTY_COLUMNS.items()]
        return self._persist(df.select(*keep, *props, op_body))

    @cached_property
    def messages(self) -> DataFrame:
        """Messages of the salvage walk, with ``kept``: true when the broker's recovery keeps the record."""
        m = self.commitlog.where(F.col("kind") == "message")
        return m.withColumn("kept", F.col("physical_offset") < self.recovered_end_column())

    @cached_property
    def damage(self) -> DataFrame:
        """Non-message items: corrupt spans, stops and blanks (few)."""
        return self.commitlog.where(F.col("kind") != "message").drop("op_body")

    @cached_property
    def consume_queue(self) -> DataFrame:
        return self._persist(self._union(self._load("rocketmq-consumequeue")))

    @cached_property
    def index(self) -> DataFrame:
        return self._persist(self._union(self._load("rocketmq-index", **self.geometry.index_options())))

    def metadata(self, table: str) -> DataFrame:
        """A store metadata table (datasources/metadata.py's rows).  These files are a few KiB: read on the
        driver, which saves the data source's planner round trips."""
        from datasources.metadata import schema_of, table_rows

        cache = self.__dict__.setdefault("_metadata", {})
        if table not in cache:
            schema = schema_of(table)
            rows = [r for s in self.stores for r in table_rows(table, s.name, s.path)]
            cache[table] = self.spark.createDataFrame(
                [tuple(r.get(f.name) for f in schema) for r in rows], spark_schema(schema))
        return cache[table]

    def release(self) -> None:
        for df in self._cached:
            df.unpersist()
        self._cached.clear()


# ---------------------------------------------------------------------------------------------------------
# Building findings and metrics


def findings(df: DataFrame, check, severity, message, details: dict | None = None, **positions) -> DataFrame:
    """``df`` as findings of ``check``.  ``check``, ``severity`` and ``message`` are literals or columns; ``details`` maps
    names to columns (cast to string, nulls dropped); ``positions`` overrides the position columns (by
    default taken from ``df`` where it has them, else null)."""
    if isinstance(severity, str) and severity not in SEVERITIES:
        raise ValueError(f"unknown severity {severity!r}")
    cols = [_col(check).alias("check"), _col(severity).alias("severity")]
    for name in _POSITION_COLUMNS:
        typ = FINDING_FIELDS[name].dataType
        if name in positions:
            expr = _col(positions[name])
        elif name in df.columns:
            expr = F.col(name)
        elif name == "file" and "segment" in df.columns:
            expr = F.col("segment")
        else:
            expr = F.lit(None)
        cols.append(expr.cast(typ).alias(name))
    cols.append(_col(message).cast("string").alias("message"))
    cols.append(details_map(details or {}).alias("details"))
    return df.select(*cols)


def details_map(details: dict):
    if not details:
        return F.create_map().cast("map<string,string>")
    pairs = F.array(*[F.struct(F.lit(k).alias("k"), _col(v).cast("string").alias("v")) for k, v in details.items()])
    kept = F.filter(pairs, lambda p: p["v"].isNotNull())
    return F.map_from_entries(kept)


def driver_findings(spark: SparkSession, rows: list[dict]) -> DataFrame:
    """Findings made on the driver (recovery, file listings): dicts with the finding fields."""
    shaped = []
    for r in rows:
        if r["severity"] not in SEVERITIES:
            raise ValueError(f"unknown severity {r['severity']!r}")
        shaped.append(tuple(
            {k: None if v is None else str(v) for k, v in (r.get("details") or {}).items() if v is not None}
            if f.name == "details" else r.get(f.name) for f in FINDING_FIELDS))
    return spark.createDataFrame(shaped, FINDING_FIELDS)


def metrics(df: DataFrame, scope: str, values: dict, **keys) -> DataFrame:
    """Long-format metrics: one row per (row of ``df``, metric in ``values``); ``values`` maps metric names to
    columns (or column names) of ``df``, cast to double."""
    key_cols = []
    for name in ("broker", "topic", "queue_id", "group"):
        typ = METRIC_FIELDS[name].dataType
        expr = _col(keys[name]) if name in keys else (F.col(name) if name in df.columns else F.lit(None))
        key_cols.append(expr.cast(typ).alias(name))
    stacked = F.explode(F.array(*[F.struct(F.lit(m).alias("metric"), _named(v).cast("double").alias("value"))
                                  for m, v in values.items()])).alias("mv")
    return (df.select(*key_cols, stacked)
            .select("broker", F.lit(scope).alias("scope"), "topic", "queue_id", "group", "mv.metric", "mv.value"))


def driver_metrics(spark: SparkSession, rows: list[dict]) -> DataFrame:
    return spark.createDataFrame([tuple(r.get(f.name) for f in METRIC_FIELDS) for r in rows], METRIC_FIELDS)


def _col(v):
    """A literal, unless it is a column already."""
    from pyspark.sql import Column

    return v if isinstance(v, Column) else F.lit(v)


def _named(v):
    """A column, named or given."""
    return F.col(v) if isinstance(v, str) else v


def with_finding_id(df: DataFrame) -> DataFrame:
    """The stable id: where the finding is, not when it was found."""
    key = F.concat_ws("|", *[F.coalesce(F.col(c).cast("string"), F.lit("")) for c in ("check",) + _POSITION_COLUMNS],
                      F.coalesce(F.col("details")["key"], F.lit("")))
    return df.withColumn("finding_id", F.substring(F.sha2(key, 256), 1, 20))


def ranges_of(df: DataFrame, partition: list[str], order_col: str) -> DataFrame:
    """Collapse consecutive values of ``order_col`` (integers) within ``partition`` into ranges
    (``first``, ``last``, ``count``): gaps-and-islands, so a missing consume-queue file is one finding,
    not a million."""
    from pyspark.sql import Window

    w = Window.partitionBy(*partition).orderBy(order_col)
    island = F.col(order_col) - F.row_number().over(w)
    return (df.withColumn("_island", island)
            .groupBy(*partition, "_island")
            .agg(F.min(order_col).alias("first"), F.max(order_col).alias("last"), F.count("*").alias("count"))
            .drop("_island"))


def queue_bounds(ctx: AuditContext) -> DataFrame:
    """Per consume queue: ``min_offset`` (first entry), ``max_offset`` (one past the last entry, as the broker's
    ``getMaxOffsetInQueue``) and the entry count, from the consume-queue files.  Cached on the context."""
    if "_queue_bounds" not in ctx.__dict__:
        e = ctx.consume_queue.where(F.col("kind") == "entry")
        ctx.__dict__["_queue_bounds"] = ctx._persist(e.groupBy("broker", "topic", "queue_id").agg(
            F.min("queue_offset").alias("min_offset"), (F.max("queue_offset") + 1).alias("max_offset"),
            F.count("*").alias("entries")))
    return ctx.__dict__["_queue_bounds"]


def locate_offsets(ctx: AuditContext, loose: DataFrame) -> DataFrame:
    """Physical offsets (``loose.physical_offset``) at which no message of the salvage walk starts, told apart
    by what is there: ``located`` = in_damage (inside a corrupt span) | mid_record | past_end (beyond every
    byte of data) | no_record, with ``located_text`` saying so.  Each offset is matched with the last message
    or corrupt span starting before it in its segment: a sort per segment, not a range join."""
    from pyspark.sql import Window

    sizes = {name: st.segment_size or 1 for name, st in ctx.store_objects.items()}
    seg_size = F.create_map(*[x for n, s in sizes.items() for x in (F.lit(n), F.lit(s))])[F.col("broker")]
    items = ctx.commitlog.where(F.col("kind").isin("message", "corrupt")).select(
        "broker", F.col("physical_offset").alias("pos"),
        (F.col("physical_offset") + F.when(F.col("kind") == "message", F.col("store_size"))
         .otherwise(F.col("length"))).alias("item_end"), F.col("kind").alias("item_kind"),
        F.col("reason").alias("item_reason"), F.lit(None).cast("long").alias("probe"))
    ends = items.groupBy("broker").agg(F.max("item_end").alias("data_end"))
    # the probe ids must not change between the two uses of ``loose`` below: pin them
    loose = ctx._persist(loose.withColumn("probe", F.monotonically_increasing_id()))
    # only the segments holding a probe are sorted (none, in a healthy dump)
    probe_segments = loose.select("broker", (F.col("physical_offset") - F.col("physical_offset") % seg_size)
                                  .alias("seg")).distinct()
    items = (items.withColumn("seg", F.col("pos") - F.col("pos") % seg_size)
             .join(F.broadcast(probe_segments), ["broker", "seg"], "left_semi").drop("seg"))
    probes = loose.select("broker", F.col("physical_offset").alias("pos"), F.lit(None).cast("long").alias("item_end"),
                          F.lit(None).cast("string").alias("item_kind"),
                          F.lit(None).cast("string").alias("item_reason"), "probe")
    w = (Window.partitionBy("broker", "seg").orderBy("pos", F.col("probe").asc_nulls_first())
         .rowsBetween(Window.unboundedPreceding, -1))
    item = F.when(F.col("probe").isNull(), F.struct("pos", "item_end", "item_kind", "item_reason"))
    before = F.last(item, ignorenulls=True).over(w)
    classified = (items.unionByName(probes).withColumn("seg", F.col("pos") - F.col("pos") % seg_size)
                  .withColumn("prev", before)
                  .where(F.col("probe").isNotNull())
                  .join(ends, "broker", "left")
                  .select("probe", "prev", "data_end"))
    c = loose.join(classified, "probe").drop("probe")
    inside = F.col("prev").isNotNull() & (F.col("physical_offset") < F.col("prev.item_end"))
    past = ~inside & (F.col("data_end").isNull() | (F.col("physical_offset") >= F.col("data_end")))
    located = (F.when(inside & (F.col("prev.item_kind") == "corrupt"), "in_damage")
               .when(inside, "mid_record").when(past, "past_end").otherwise("no_record"))
    text = (F.when(located == "in_damage", F.concat(F.lit("points into a corrupt span ("), F.col("prev.item_reason"),
                                                    F.lit(") starting at "), F.col("prev.pos").cast("string")))
            .when(located == "mid_record", F.concat(F.lit("points into the middle of the record at "),
                                                    F.col("prev.pos").cast("string")))
            .when(located == "past_end", F.concat(F.lit("points past the end of the commitlog data ("),
                                                  F.coalesce(F.col("data_end").cast("string"), F.lit("empty")),
                                                  F.lit(")")))
            .otherwise(F.lit("points at bytes where no record starts")))
    return c.withColumn("located", located).withColumn("located_text", text).drop("prev")
