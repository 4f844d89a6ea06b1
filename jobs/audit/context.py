"""The audit's driver-side view of a dump: its stores and plans, the survey's and the scan's partial tables, and the
facts the check families share (recovery predicted per broker, the dump time, the consume queues' bounds, the
config files), each computed once."""
from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from store_format import fs
from store_format.brokerconf import RecoverySettings

from .inputs import StoreRef
from .plan import BrokerPlan
from .routes import QUEUE_BOUNDS, QUEUE_ROUTES, QUEUE_STARTS
from .scan import RANGES
from .survey import WALK_ITEMS, WALK_RANGES
from .tasks import Outputs, failure_row


@dataclass
class AuditOptions:
    families: tuple[str, ...]  # the check families chosen (--checks)
    as_of: int | None = None
    check_crc: bool = True
    message_index_safe: bool = False
    segment_size: int | None = None
    split_size: int | None = None
    executor: str = "auto"  # where the tasks run (runtime.session.choose_executor): auto, driver or spark
    recovery: RecoverySettings = field(default_factory=RecoverySettings)  # broker.conf's __CRC32# switches

    @property
    def forced_crc_check(self) -> bool:
        """The broker's recovery checks each record's __CRC32# instead of its body CRC (forceVerifyPropCRC, which
        acts only with checkCRCOnRecover)."""
        return self.recovery.force_verify_prop_crc and self.check_crc


#: The audit spills a consumerOffset.json that streams and holds more offsets than this (into Parquet in the run's
#: staging, read back a batch at a time: AuditContext.consumer_offset_parts); None: store_format.config.
#: offsets_limit(), the most a whole-table read builds (past it that read is a TOO_LARGE error, the spill is not).
SPILL_OFFSETS: int | None = None
#: Rows per batch a spilled consumerOffset.json is read back in (consumer_offset_parts): a batch of the
#: consumer_offsets table with its strings is ~13 MB per 64 Ki rows, and the families hold a few times that over it
SPILL_READ_ROWS = 1 << 16

# the metadata table of lmqConsumerOffset.json (5.x): a config file, whose offsets supersede consumerOffset.json's
SUPERSEDING_OFFSETS = "lmq_consumer_offsets"


class AuditContext:
    #: the columns of :meth:`kept_messages_by_id`
    BY_ID_COLUMNS = ("msg_id", "physical_offset", "topic", "uniq_key")

    def __init__(self, spark, stores: list[StoreRef], plans: dict[str, BrokerPlan], options: AuditOptions,
                 families: list | None = None):
        self.spark, self.stores, self.plans, self.options = spark, stores, plans, options
        self.families = list(families or [])  # the jobs.audit.contract.Family objects this audit runs
        self.survey = Outputs()
        self.scan = Outputs()
        self.failures: list[pa.Table] = []  # tasks and steps that failed (tasks.FAILURES rows)
        self.recovery: dict = {}
        self.resend_damaged: list[dict] = []  # records the driver names (resend.damaged_row...), for tables/resend
        self.resend_tables: list[pa.Table] = []  # rows of tables/resend the driver makes in bulk
        # broker -> the physical offset of the record the broker's reput stops at for ever (a family finds it after
        # the scan): no record from it on reaches a consume queue, whatever the start
        self.reput_stalls: dict[str, int] = {}
        self.tables_dir: "fs.Location | None" = None  # where the run's detail tables go (None: a family run on its own)
        self.partials_dir: "fs.Location | None" = None  # where the driver spills (None: a scratch folder of its own)
        self._scratch: str | None = None
        self.state = None  # the run's jobs/audit/state.AuditState when it keeps what it works out for the next run
        # the driver's table files still being closed (their last row group, their footer) beside the next family:
        # done by :meth:`tables_closed`, before anything reads them
        self.closing: list[TableWriter] = []

    # ---- partial tables ----------------------------------------------------------------------------------
    def partial(self, name: str, schema: pa.Schema | None = None) -> pa.Table:
        """The scan's partial table ``name``, every task's rows together."""
        return self.scan.get(name, schema)

    def partial_dataset(self, name: str, schema: pa.Schema):
        """The scan's spilled partial table ``name`` (tasks.Emitter.spill) as a ``pyarrow.dataset`` over the parts
        its tasks wrote: read it by columns, filters and batches, never more than the family needs at once."""
        return self.scan.dataset(name, schema)

    def partial_batches(self, name: str, schema: pa.Schema, columns: list[str] | None = None):
        """The scan's spilled partial ``name`` a batch at a time, in the tasks' order (tasks.Outputs.batches): what a
        family that reads every row in turn takes, holding one batch."""
        return self.scan.batches(name, schema, columns)

    def survey_partial_batches(self, name: str, schema: pa.Schema, columns: list[str] | None = None):
        """The survey's spilled partial ``name`` a batch at a time (as :meth:`partial_batches` is the scan's)."""
        return self.survey.batches(name, schema, columns)

    def partial_parts(self, name: str) -> pa.Table:
        """Where the scan's tasks wrote the spilled partial ``name``: tasks.SPILLED rows (path, rows, bytes, the
        physical offsets the part spans), one per task part."""
        return self.scan.parts(name)

    def table_writer(self, name: str, schema: pa.Schema) -> "TableWriter":
        """The detail table ``name`` written batch by batch (tables/<name>/part-00000.parquet); without a run's
        tables folder the batches are kept and make a table (a family run on its own, in the tests)."""
        from runtime.output import out_join

        return TableWriter(None if self.tables_dir is None else out_join(self.tables_dir, name), schema, self.closing)

    def partial_writer(self, name: str, schema: pa.Schema) -> "TableWriter":
        """A partial table ``name`` the driver writes batch by batch into the run's partials
        (partials/<name>/part-00000.parquet), for what the job writes out later without holding it whole (a
        family's metrics that grow with a spilled file, issue 40); without a run's partials folder the batches are
        kept and make a table (a family run on its own, in the tests)."""
        from runtime.output import out_join

        return TableWriter(None if self.partials_dir is None else out_join(self.partials_dir, name), schema,
                           self.closing)

    def findings_writer(self, name: str) -> "TableWriter":
        """Findings of a family that grow with the messages (open transactions, overdue delays, dead letters),
        written batch by batch into the run's partials (partials/_findings/<name>/part-00000.parquet) and returned
        as a contract.WrittenTable among the family's findings: the job copies them into the findings folder a batch
        at a time (jobs/audit/job.py), so no family's findings are whole on the driver; without a run's partials
        folder the batches are kept and make a table (a family run on its own, in the tests)."""
        from runtime.output import out_join

        from .findings import FINDING_SCHEMA

        spool = self.findings_spool
        return TableWriter(None if spool is None else out_join(spool, name), FINDING_SCHEMA, self.closing)

    @property
    def findings_spool(self) -> "fs.Location | None":
        """The folder :meth:`findings_writer` writes in (None without a run's partials folder)."""
        from runtime.output import out_join

        return None if self.partials_dir is None else out_join(self.partials_dir, "_findings")

    def survey_partial(self, name: str, schema: pa.Schema | None = None) -> pa.Table:
        return self.survey.get(name, schema)

    def survey_partial_parts(self, name: str) -> pa.Table:
        """Where the survey's tasks wrote the spilled partial ``name`` (as :meth:`partial_parts` is the scan's)."""
        return self.survey.parts(name)

    # ---- recovery ----------------------------------------------------------------------------------------
    def predict_recovery(self) -> None:
        """What each broker's recovery will do, decided from the survey's walks of the segments it walks (so
        nothing is walked here) and completed by the scan (the ``prediction`` family's ``after_scan``)."""
        from store_format.recovery import QueueStart, predict_recovery
        from decoding.kernels import CompiledFramer, scan_offset_table

        walks = self.segment_walks()
        starts: dict[str, dict] = {name: {} for name in self.plans}
        for r in self.survey_partial("survey.queue_starts", QUEUE_STARTS).to_pylist():
            starts[r["broker"]][(r["topic"], r["queue_id"])] = QueueStart(
                r["recover_end"], r["max_physic_offset"],
                (r["refused_offset"], r["refused_size"]) if r["refused_offset"] is not None else None)
        self.queue_starts = starts
        for name, plan in self.plans.items():
            try:
                self.recovery[name] = predict_recovery(
                    plan.store, message_index_safe=self.options.message_index_safe, check_crc=self.options.check_crc,
                    walks=walks.get(name, {}), enumerate_lost=False, queue_starts=starts[name],
                    settings=self.options.recovery, offset_scan=scan_offset_table, entry_framer=CompiledFramer)
            except Exception as e:  # that broker is not scanned; the others are
                self.failures.append(failure_row(name, "predicting its recovery", e))

    def segment_walks(self) -> dict[str, dict]:
        """broker -> segment -> SegmentWalk: where the broker's recovery walk of each surveyed segment ends, from the
        survey's salvage walk: its first blank or stop (the same walk but for the PHYSICALOFFSET check the broker
        lacks: a segment whose walk stopped at a PHYSICAL_OFFSET_MISMATCH is walked again here, the broker's way).
        With forceVerifyPropCRC the walk ends earlier at the first record the forced check refuses (the survey found
        it among the walk's messages), and a segment whose walk stopped at a BAD_CRC (a body CRC the broker does
        not check then) is walked again here the broker's way."""
        from store_format.errors import ErrorKind
        from store_format.recovery import SegmentWalk, recovery_walk

        force = self.options.forced_crc_check
        first: dict[tuple, dict] = {}
        for r in self.survey_partial("survey.walk_items", WALK_ITEMS).to_pylist():
            if r["kind"] in ("stop", "blank"):
                key = (r["broker"], r["segment"])
                if key not in first or r["file_position"] < first[key]["file_position"]:
                    first[key] = r
        refused: dict[tuple, dict] = {}
        for r in self.survey_partial("survey.walk_ranges", WALK_RANGES).to_pylist():
            key = (r["broker"], r["segment"])
            if r["prop_crc_stop"] is not None and (key not in refused or
                                                   r["prop_crc_stop"] < refused[key]["prop_crc_stop"]):
                refused[key] = r
        out: dict[str, dict] = {}
        named: dict[str, dict] = {}  # broker -> its segments by name, made once (not a look through each time)
        for (broker, segment), r in first.items():
            if broker not in named:
                named[broker] = {s.name: s for s in self.plans[broker].store.segments}
            seg = named[broker][segment]
            f = refused.get((broker, segment)) if force else None
            rewalk = (ErrorKind.PHYSICAL_OFFSET_MISMATCH.value,) + ((ErrorKind.BAD_CRC.value,) if force else ())
            if f is not None and f["prop_crc_stop"] < r["file_position"]:
                walk = SegmentWalk(segment, seg.base_offset, f["prop_crc_stop"], "stop", f["prop_crc_stop_kind"],
                                   "properties", f["prop_crc_stop_size"])
            elif r["kind"] == "stop" and r["reason"] in rewalk:
                walk = recovery_walk(seg, self.options.check_crc, force)
            else:
                walk = SegmentWalk(segment, seg.base_offset, r["file_position"], r["kind"],
                                   r["reason"] if r["kind"] == "stop" else None, r["field"], r["size"] or 0)
            out.setdefault(broker, {})[segment] = walk
        return out

    # ---- from the scan -----------------------------------------------------------------------------------
    @cached_property
    def _ranges(self) -> pa.Table:
        return self.partial("scan.ranges", RANGES)

    @cached_property
    def as_of(self) -> dict[str, int]:
        """The dump time per broker: --as-of, else the newest store time in its commitlog (the best offline
        estimate of when the broker stopped writing)."""
        if self.options.as_of is not None:
            return {s.name: self.options.as_of for s in self.stores}
        found: dict[str, int] = {}
        for b, t in zip(self._ranges.column("broker").to_pylist(),
                        self._ranges.column("max_store_timestamp").to_pylist()):
            if t is not None:
                found[b] = max(found.get(b, t), t)
        return {s.name: int(found.get(s.name) or 0) for s in self.stores}

    @cached_property
    def data_end(self) -> dict[str, int]:
        """Per broker, one past the last byte of any message or unframeable span (past it a unit points past the
        data's end)."""
        out: dict[str, int] = {}
        for b, e in zip(self._ranges.column("broker").to_pylist(), self._ranges.column("data_end").to_pylist()):
            if e is not None:
                out[b] = max(out.get(b, e), e)
        return out

    @cached_property
    def first_blanks(self) -> dict[tuple[str, str], int]:
        out: dict[tuple, int] = {}
        for r in self._ranges.select(["broker", "segment", "blank_at"]).to_pylist():
            if r["blank_at"] is not None:
                key = (r["broker"], r["segment"])
                out[key] = min(out.get(key, r["blank_at"]), r["blank_at"])
        return out

    # ---- consume queues ----------------------------------------------------------------------------------
    @cached_property
    def queue_bounds(self) -> pa.Table:
        """Per queue of every backend: ``min_offset`` (first entry), ``max_offset`` (one past the last queue offset
        its entries cover, as the broker's ``getMaxOffsetInQueue``: a unit may cover several) and the
        entry count (units), from the survey's rows of every queue route's files."""
        columns = ["broker", "topic", "queue_id", "entries", "min_queue_offset", "max_queue_offset"]
        t = pa.concat_tables([self.survey_partial(r.files_partial, r.survey_schema).select(columns)
                              for r in QUEUE_ROUTES])
        t = t.filter(pc.greater(t.column("entries"), 0))
        if not t.num_rows:
            return QUEUE_BOUNDS.empty_table()
        # the queues in the order the survey lists them: a group_by's own order follows how many tasks (chunks)
        # made the rows, and the survey's bins of queue files change with the files' stored bytes
        t = t.append_column("first_row", pa.array(np.arange(t.num_rows, dtype=np.int64)))
        g = t.group_by(["broker", "topic", "queue_id"]).aggregate(
            [("min_queue_offset", "min"), ("max_queue_offset", "max"), ("entries", "sum"), ("first_row", "min")])
        g = g.take(pc.sort_indices(g.column("first_row_min")))
        return pa.table({"broker": g.column("broker"), "topic": g.column("topic"), "queue_id": g.column("queue_id"),
                         "min_offset": g.column("min_queue_offset_min"),
                         "max_offset": pc.add(g.column("max_queue_offset_max"), 1),
                         "entries": g.column("entries_sum")}, schema=QUEUE_BOUNDS)

    @cached_property
    def queue_ids(self) -> set[tuple]:
        """(broker, topic, queue id) of every queue file, whatever its backend, with content or a bad name (queue
        id None when the folder is not a number): the queues the queue files show."""
        return {(name, f.topic, f.queue_id) for name, plan in self.plans.items() for f in plan.queue_files
                if (f.length > 0 or not f.loaded) and f.topic}  # no topic: a queue database that cannot be read

    @cached_property
    def queue_topics(self) -> set[tuple]:
        return {(b, t) for b, t, _ in self.queue_ids}

    @cached_property
    def committed_offsets(self) -> pa.Table:
        """Every offset a group committed that the broker holds, in their order (slices of the metadata tables:
        nothing copied): consumerOffset.json's rows that hold an offset (no error, a topic), and 5.x
        lmqConsumerOffset.json's (enableLmq: its %LMQ% groups' one offset per topic@group, and every other group's,
        which the broker then keeps there instead: those supersede consumerOffset.json's for the same topic, group
        and queue), with ``unit``: the physical offset of the entry unit at that committed queue offset in the
        queue's files of a backend whose unit index is the queue offset (store_format.queues.Backend.dense; null
        where the queue has no entry there).  Columns throughout, keyed by numbers (:meth:`queue_keys`): a busy
        broker's consumerOffset.json holds millions of offsets, and no Python object is made per offset.  Whole in
        memory: only where no store's file was spilled (:meth:`committed_offset_batches` reads any)."""
        if self.offsets_spilled:
            raise RuntimeError("the committed offsets were spilled: read them by committed_offset_batches()")
        return self._with_units(self._held_offsets, self._topics)

    def committed_offset_batches(self, units: bool = True):
        """:attr:`committed_offsets` (``units``: with its ``unit`` column) as tables, in its order: the whole table
        at once, or where a store's consumerOffset.json held more than ``store_format.config.offsets_limit()``
        offsets and was spilled (:meth:`consumer_offset_parts`), a batch of its rows at a time (their units looked
        up a batch at a time), so memory holds one batch, never the file's offsets."""
        if not self.offsets_spilled:
            yield self.committed_offsets if units else self._held_offsets
            return
        carried = _rows_where(self.metadata(SUPERSEDING_OFFSETS), _holds_offset)
        carried_keys = carried.select(_OFFSET_KEY).group_by(_OFFSET_KEY).aggregate([])
        schema = None
        for part in self.consumer_offset_parts():
            schema = part.schema
            t = _not_superseded(_rows_where(part, _holds_offset), carried_keys)
            if t.num_rows:
                yield self._with_units(t, _topics_of(t)) if units else t
        if carried.num_rows:
            t = carried.select(schema.names).cast(schema)
            yield self._with_units(t, _topics_of(t)) if units else t

    def _with_units(self, t: pa.Table, topics: pa.Array) -> pa.Table:
        """``t`` (committed offsets) with ``unit`` (:attr:`committed_offsets`), its topics numbered among
        ``topics`` (:meth:`key_of`)."""
        unit = np.full(t.num_rows, -1, np.int64)
        if t.num_rows:
            keys = self.key_of(t.column("topic"), t.column("queue_id"), topics)
            for broker, rows in self.broker_rows(t).items():
                files = [f for f in self.plans[broker].queue_files if f.loaded and f.backend.dense] \
                    if broker in self.plans else []
                if not files:
                    continue
                # the file with the lowest first queue offset that holds the committed offset, as the queue's files
                # are read in order
                order = sorted(range(len(files)), key=lambda i: (files[i].first_queue_offset, i))
                fkey = self.key_of([files[i].topic for i in order], [files[i].queue_id for i in order], topics)
                first = np.array([files[i].first_queue_offset for i in order], np.int64)
                units = np.array([files[i].length // files[i].backend.unit_size for i in order], np.int64)
                by_key = np.argsort(fkey, kind="stable")  # by queue, then first queue offset
                fkey, first, units, which = fkey[by_key], first[by_key], units[by_key], np.array(order)[by_key]
                rk, off = keys[rows], t.column("offset").take(pa.array(rows)).to_numpy()
                lo, hi = np.searchsorted(fkey, rk, "left"), np.searchsorted(fkey, rk, "right")
                got = np.full(len(rows), -1, np.int64)  # index into files
                todo, k = np.flatnonzero(lo < hi), 0
                while len(todo):  # the queue's k-th file, for the rows it has not placed yet
                    c = lo[todo] + k
                    inside = (first[c] <= off[todo]) & (off[todo] < first[c] + units[c])
                    got[todo[inside]] = c[inside]
                    k += 1
                    todo = todo[~inside & (lo[todo] + k < hi[todo])]
                placed = np.flatnonzero(got >= 0)
                if not len(placed):
                    continue
                f_of, at = got[placed], off[placed] - first[got[placed]]
                by = np.lexsort((at, f_of))
                placed, f_of, at = placed[by], f_of[by], at[by]
                bounds = np.flatnonzero(np.r_[True, f_of[1:] != f_of[:-1], True])
                wanted = [(files[int(which[f_of[a]])], at[a:b], rows[placed[a:b]])
                          for a, b in zip(bounds[:-1].tolist(), bounds[1:].tolist())]
                at_rows, at_units = _units_at_many(wanted)
                unit[at_rows] = at_units
        return t.append_column("unit", pa.array(unit, pa.int64(), mask=unit < 0))

    @cached_property
    def _held_offsets(self) -> pa.Table:
        """consumerOffset.json's valid rows, less those lmqConsumerOffset.json also holds, then the LMQ file's
        (:attr:`committed_offsets` without ``unit``).  The LMQ file is small (a group's one offset per topic, or
        the groups of a broker with enableLmq): only its keys are joined."""
        plain = _rows_where(self.metadata("consumer_offsets"), _holds_offset)
        carried = _rows_where(self.metadata(SUPERSEDING_OFFSETS), _holds_offset)
        if not carried.num_rows:
            return plain
        kept = _not_superseded(plain, carried.select(_OFFSET_KEY).group_by(_OFFSET_KEY).aggregate([]))
        return pa.concat_tables([kept, carried.select(plain.column_names).cast(plain.schema)])

    def committed_units(self, broker: str) -> np.ndarray:
        """The distinct physical offsets of the entry units at ``broker``'s committed offsets
        (:attr:`committed_offsets`)."""
        return self._committed_units.get(broker, np.empty(0, np.int64))

    @cached_property
    def _committed_units(self) -> dict[str, np.ndarray]:
        """broker -> :meth:`committed_units`, every broker's in one pass over the committed offsets."""
        found: dict[str, list] = {}
        for t in self.committed_offset_batches():
            for broker, rows in self.broker_rows(t).items():
                units = t.column("unit").take(pa.array(rows)).drop_null()
                found.setdefault(broker, []).append(units.to_numpy().astype(np.int64, copy=False) if len(units)
                                                    else np.empty(0, np.int64))
        return {b: np.unique(np.concatenate(u)) for b, u in found.items()}

    # ---- keys of (topic, queue id), for tables of millions of rows ----------------------------------------------
    @cached_property
    def _topics(self) -> pa.Array:
        """Every topic of consumerOffset.json's and lmqConsumerOffset.json's rows, distinct: what :meth:`key_of`
        numbers topics by."""
        topics = [self.metadata(t).column("topic") for t in ("consumer_offsets", SUPERSEDING_OFFSETS)]
        return pc.unique(pa.chunked_array([c for t in topics for c in t.chunks], pa.string()).drop_null())

    def key_of(self, topics, queue_ids, value_set: pa.Array | None = None) -> np.ndarray:
        """An int64 per (topic, queue id): the topic's number among the committed offsets' topics (:attr:`_topics`,
        or ``value_set``: a batch's own, :func:`_topics_of`) above the queue id's 32 bits; -1 for a topic none of
        those is (it matches none of theirs).  Only equal keys matter: any numbering gives the same matches."""
        code = pc.index_in(pa.array(topics, pa.string()) if isinstance(topics, list) else topics,
                           value_set=self._topics if value_set is None else value_set)
        code = pc.fill_null(code, -1).to_numpy(zero_copy_only=False).astype(np.int64)
        qid = np.asarray(queue_ids if not isinstance(queue_ids, (pa.Array, pa.ChunkedArray)) else
                         queue_ids.to_numpy(zero_copy_only=False), np.int64)
        return np.where(code < 0, -1, (code << 32) | (qid & 0xFFFFFFFF))

    def queue_keys(self, t: pa.Table, value_set: pa.Array | None = None) -> np.ndarray:
        """:meth:`key_of` for each row of ``t`` (its ``topic`` and ``queue_id`` columns)."""
        return self.key_of(t.column("topic"), t.column("queue_id"), value_set)

    def broker_rows(self, t: pa.Table) -> dict[str, np.ndarray]:
        """broker -> the indexes of its rows in ``t`` (a few brokers, millions of rows: one mask each)."""
        out = {}
        brokers = t.column("broker")
        for b in pc.unique(brokers).to_pylist():
            out[b] = np.flatnonzero(pc.equal(brokers, b).to_numpy(zero_copy_only=False))
        return out

    # ---- config files ------------------------------------------------------------------------------------
    def metadata(self, table: str) -> pa.Table:
        """A store metadata table (decoding/metadata.py), read on the driver: these files are small, but for a
        consumerOffset.json spilled (:meth:`consumer_offset_parts`): ``consumer_offsets`` holds the other stores'
        rows, :attr:`spilled_offsets` says which were spilled."""
        from decoding.metadata import schema_of, table_batch

        cache = self.__dict__.setdefault("_metadata", {})
        if table not in cache:  # column-wise: a broker's consumerOffset.json may hold millions of offsets
            parts = [p for p in self._offset_parts if isinstance(p, pa.Table)] if table == "consumer_offsets" else \
                [table_batch(table, s.name, fs.uri_of(s.path)) for s in self.stores]
            cache[table] = pa.concat_tables([schema_of(table).empty_table()] + parts)
        return cache[table]

    @property
    def spilled_offsets(self) -> list["SpilledOffsets"]:
        """The consumerOffset.json files spilled as Parquet (:meth:`consumer_offset_parts`), in the stores'
        order."""
        return [p for p in self._offset_parts if isinstance(p, SpilledOffsets)]

    @property
    def offsets_spilled(self) -> bool:
        return bool(self.spilled_offsets)

    def consumer_offset_parts(self):
        """The ``consumer_offsets`` table as tables, store by store in their order: a store's rows whole, or for a
        file spilled (more than ``store_format.config.offsets_limit()`` offsets: what memory holds whole) its
        Parquet read back a batch at a time (:data:`SPILL_READ_ROWS` rows)."""
        from decoding.metadata import schema_of
        from runtime.output import out_parquet_batches

        schema = schema_of("consumer_offsets")
        for part in self._offset_parts:
            if isinstance(part, pa.Table):
                yield part
                continue
            # in the file's order, a batch only as it is taken: a dataset scanner decoded the file ahead of the
            # families, which take their time over each batch (issue 40: 1 GB live at 13.6 M rows)
            for batch in out_parquet_batches(part.path, SPILL_READ_ROWS):
                if batch.num_rows:
                    yield pa.Table.from_batches([batch]).cast(schema)

    @cached_property
    def _offset_parts(self) -> list:
        """Per store, in order: its ``consumer_offsets`` table (decoding.metadata.table_batch), or where its
        consumerOffset.json streams and holds more offsets than ``store_format.config.offsets_limit()``, the
        :class:`SpilledOffsets` it was streamed into (:meth:`_spill_offsets`)."""
        from decoding.metadata import table_batch

        out = []
        for i, s in enumerate(self.stores):
            spilled = self._spill_offsets(i, s)
            out.append(table_batch("consumer_offsets", s.name, fs.uri_of(s.path)) if spilled is None else spilled)
        return out

    def _spill_offsets(self, i: int, store) -> "SpilledOffsets | pa.Table | None":
        """``store``'s consumerOffset.json streamed (decoding.metadata.offset_table_batches: memory per map and one
        batch) into one Parquet file of the run's partials (through the fs seam), where it holds more offsets than
        memory holds whole (``store_format.config.offsets_limit()``); None where it holds fewer or does not stream
        (decoding.metadata.table_batch reads it, or says why not).  Out of memory or of room on the way: the file's
        error row, naming it, its size and what was skipped."""
        from decoding.metadata import offset_table_batches, schema_of
        from runtime.output import out_join, out_parquet_writer, out_remove_quietly
        from store_format import config as C
        from store_format.errors import ConfigError, ErrorKind

        got = offset_table_batches(store.name, fs.uri_of(store.path), C.OFFSET_BATCH_ROWS)
        if got is None:
            return None
        source, size, entries, batches = got
        if entries <= (C.offsets_limit() if SPILL_OFFSETS is None else SPILL_OFFSETS):
            batches.close()
            return None
        path = out_join(self._spill_dir(), "consumer_offsets", f"part-{i:05d}.parquet")
        rows = 0
        try:
            with out_parquet_writer(path, schema_of("consumer_offsets")) as w:
                for batch in batches:
                    w.write_batch(batch)
                    rows += batch.num_rows
        except (MemoryError, OSError) as e:
            batches.close()
            out_remove_quietly(path)  # no half-written part left among the run's partials
            err = C.out_of_memory(source, size, f"spilling its {entries} offsets") if isinstance(e, MemoryError) \
                else ConfigError(ErrorKind.TOO_LARGE, f"too large to read within memory: {size} bytes holding "
                                 f"{entries} offsets (past {C.offsets_limit()}, CONFIG_OFFSETS_LIMIT), and spilling "
                                 f"them failed: {e}", file=source)
            return pa.Table.from_pylist([{"broker": store.name, "error": str(err), "source": err.file}],
                                        schema=schema_of("consumer_offsets"))
        return SpilledOffsets(store.name, path, source, size, rows)

    def _spill_dir(self):
        """Where the driver spills: the run's partials folder (inside its staging), or without a run (a family run
        on its own, in the tests) a scratch folder of its own, removed by :meth:`release`."""
        if self.partials_dir is not None:
            return self.partials_dir
        if self._scratch is None:
            import tempfile

            self._scratch = tempfile.mkdtemp(prefix="rocketmq-audit-offsets-")
        return self._scratch

    # ---- single records ----------------------------------------------------------------------------------
    def kept_messages_by_id(self, broker: str, msg_ids) -> pa.Table:
        """The messages the offset message ids (a list or a pyarrow string array) name, where a message of the
        salvage walk starts at the id's offset, the predicted recovery keeps it and its own offset message id is
        that id: a table of ``msg_id``, ``physical_offset``, ``topic``, ``uniq_key`` (the other ids are left out)."""
        from store_format.ids import offset_msg_id_offsets

        ids = pc.unique(pa.array(msg_ids, pa.string()) if isinstance(msg_ids, list) else msg_ids)
        phys, valid = offset_msg_id_offsets(ids)
        wanted = np.unique(phys[valid & (phys < self.recovery[broker].max_physical_offset)])
        t = self.walk_messages_at(broker, wanted, self.BY_ID_COLUMNS)
        return t.filter(pc.is_in(t.column("msg_id"), ids.drop_null()))

    def walk_reads(self, broker: str, offsets) -> dict:
        """What :meth:`walk_messages_at` reads of the store for ``offsets`` (sorted), for a result kept between runs
        (jobs/audit/kept.py :class:`KeptRows`): {segment location: (how far into it the result depends on its bytes,
        its first blank when before that)}, and under None the offsets no segment holds.  A frame found or not at an
        offset depends on the segment's bytes from its start (its walk) to the offset, the frame and what follows
        it: the last offset and a largest record twice over, as a scan range's reach."""
        from .kept import max_record

        segments = self.plans[broker].segments
        offsets = np.asarray(offsets, np.int64)
        at = np.searchsorted(np.array([s.base_offset for s in segments], np.int64), offsets, side="right") - 1
        out: dict = {}
        if len(at) and at[0] < 0:
            out[None] = offsets[at < 0]
        held, first = np.unique(at, return_index=True)
        for i, last in zip(held.tolist(), [*(first[1:] - 1).tolist(), len(at) - 1]):  # each segment's last offset
            if i < 0:
                continue
            seg = segments[i]
            reach = int(offsets[last]) - seg.base_offset + 2 * max_record()
            blank = self.first_blanks.get((broker, seg.name))
            out[seg.loc] = (reach, blank if blank is not None and blank < reach else None)
        return out

    def walk_messages_at(self, broker: str, offsets, columns: tuple[str, ...]) -> pa.Table:
        """The decoded ``columns`` (decoding.kernels) of the messages of the salvage walk that start at ``offsets``
        (sorted), each segment opened once.  A frame that proves itself (store_format.commitlog.proves_itself)
        lies on the walk from its segment's start; the walk ends at the segment's first blank.  Anything else is settled
        by walking the segment.  The frames are checked together (decoding.kernels.CompiledFramer.each).  Only the
        segments holding an offset are visited (a log of thousands of small segments), and the frames kept are copied
        out of their maps and decoded in one call, not one per segment."""
        from store_format.commitlog import KIND_MESSAGE, proves_itself, salvage_arrays
        from decoding import kernels as K

        segments = self.plans[broker].segments
        bases = np.array([s.base_offset for s in segments], np.int64)
        offsets = np.asarray(offsets, np.int64)
        at = np.searchsorted(bases, offsets, side="right") - 1
        by_segment = np.argsort(at, kind="stable")  # each segment's offsets in their given order
        visited, first = np.unique(at[by_segment], return_index=True)
        frames, kept_sizes = [], []  # the kept frames' bytes (copied out of their maps) and sizes, segment by segment
        for i, lo, hi in zip(visited.tolist(), first.tolist(), [*first[1:].tolist(), len(by_segment)]):
            if i < 0:  # before the first segment
                continue
            seg = segments[i]
            pos = offsets[by_segment[lo:hi]] - seg.base_offset
            pos = pos[(pos >= 0) & (pos < seg.length)]
            blank = self.first_blanks.get((broker, seg.name))
            if blank is not None:
                pos = pos[pos <= blank]
            if not len(pos):
                continue
            with fs.map_range(seg.loc) as m:  # a read-only map, or the segment read through pyarrow.fs
                limit = len(m.buf)
                framer = K.CompiledFramer(m.buf, limit, seg.base_offset, self.options.check_crc, True)
                try:
                    sizes, body_lengths = framer.each(pos)
                finally:
                    framer.close()
                # without the CRC checked no frame proves itself; with it, a non-empty body does (in bulk here) and
                # an empty one by what follows it
                confirmed = (sizes > 0) & (body_lengths > 0) if self.options.check_crc else np.zeros(len(pos), bool)
                for j in np.flatnonzero((sizes > 0) & (body_lengths == 0)) if self.options.check_crc else ():
                    confirmed[j] = proves_itself(m.buf, int(pos[j]), int(sizes[j]), 0, limit, seg.base_offset)
                rest = np.flatnonzero(~confirmed)
                if len(rest):
                    walked = salvage_arrays(m.buf, seg.name, seg.base_offset, check_crc=self.options.check_crc,
                                            framer=K.CompiledFramer)
                    messages = walked.kinds == KIND_MESSAGE
                    w_pos, w_size = walked.positions[messages], walked.sizes[messages]
                    found = np.minimum(np.searchsorted(w_pos, pos[rest]), len(w_pos) - 1)
                    hit = (w_pos[found] == pos[rest]) if len(w_pos) else np.zeros(len(rest), bool)
                    sizes[rest[hit]] = w_size[found[hit]]
                    confirmed[rest] = hit
                    del walked
                keep = np.flatnonzero(confirmed)
                if len(keep):
                    frames.append(K.gather_frames(m.buf, pos[keep], sizes[keep]))  # copied: the map closes
                    kept_sizes.append(sizes[keep])
        if not frames:
            return K.message_schema(columns).empty_table()
        sizes = np.concatenate(kept_sizes).astype(np.int64)
        starts = np.zeros(len(sizes), np.int64)
        np.cumsum(sizes[:-1], out=starts[1:])
        return pa.Table.from_batches([K.decode_buffer(np.concatenate(frames), starts, sizes, columns=columns)])

    def store_times(self, broker: str, offsets) -> dict[int, int]:
        """{physical offset: store time} for the offsets where a message of the salvage walk starts (for a finding
        group's time span: offsets where no message starts are left out)."""
        if broker not in self.plans or not offsets:
            return {}
        t = self.walk_messages_at(broker, sorted(set(offsets)), ("physical_offset", "store_timestamp"))
        return dict(zip(t.column("physical_offset").to_pylist(), t.column("store_timestamp").to_pylist()))

    def tables_closed(self) -> None:
        """Every table file a family closed beside the next one (:class:`TableWriter`) closed: its error, if one
        failed, raised here."""
        closing, self.closing = self.closing, []
        for i, writer in enumerate(closing):
            try:
                writer.closed()
            except BaseException:
                for rest in closing[i + 1:]:
                    rest.closed(raising=False)
                raise

    def release(self) -> None:
        for writer in self.closing:  # a run that failed: the files are not outputs, but no thread writes on
            writer.closed(raising=False)
        self.closing = []
        if self._scratch is not None:
            import shutil

            shutil.rmtree(self._scratch, ignore_errors=True)
            self._scratch = None


@dataclass(frozen=True)
class SpilledOffsets:
    """A consumerOffset.json streamed into Parquet (AuditContext.consumer_offset_parts): where, the file read (or
    its ``.bak``), its size and the rows written (every offset)."""

    broker: str
    path: object  # a runtime.output Location
    source: str
    size: int
    rows: int


class TableWriter:
    """A detail table written as it is made (AuditContext.table_writer): ``write`` its rows in order, ``close``
    for what the family returns (a contract.WrittenTable, or the table itself when there is no folder).

    Rows are held until :data:`ROW_GROUP_ROWS` rows or :data:`ROW_GROUP_BYTES` bytes, then written as one row
    group (runtime.output.RowGroupWriter): a family writes a batch per broker or bucket, and a row group each (a
    fleet's 64 brokers, a bucket's few thousand rows) was slower to write and to read (4 GiB at 10x the send-back
    rate: 1.6 s writing 2.6 M rows 15,000 at a time, 1.2 s whole).  The rows go in ``folder``/part-00000.parquet;
    rows already encoded (:meth:`add_file`) make the table's next file, and the rows after them the one after."""

    def __init__(self, folder: "fs.Location | None", schema: pa.Schema, closing: list | None = None):
        self.folder, self.schema, self.rows = folder, schema, 0
        # ``closing`` (AuditContext.closing): the last file closed in a thread beside what the driver does next, and
        # this writer put on the list whose owner waits for it (AuditContext.tables_closed); else closed by ``close``
        self._closing_list, self._closing = closing, None
        self._kept: list[pa.Table] = []  # without a folder: the table's rows
        self.paths: list = []  # the files closed or written whole so far, in the rows' order
        self._file = self._file_rows = None
        if folder is not None:
            self._next_file()

    def _next_file(self) -> None:
        from runtime.output import RowGroupWriter, out_join, out_parquet_writer

        path = self._path = out_join(self.folder, f"part-{len(self.paths):05d}.parquet")
        self._file = RowGroupWriter(lambda first: out_parquet_writer(path, self.schema, first),
                                    hold_rows=ROW_GROUP_ROWS, hold_bytes=ROW_GROUP_BYTES, beside=True)
        self._file_rows = 0

    def write(self, table: pa.Table) -> None:
        from decoding.columns import plain
        from store_format.interrupts import check_beside

        check_beside()  # a family run beside the others stops at its next batch once the run is interrupted
        if not table.num_rows:
            return
        table = table.cast(self.schema)
        self.rows += table.num_rows
        if self._file is None:
            self._kept.append(table)
        else:
            self._file.write(plain(table))
            self._file_rows += table.num_rows

    def add_file(self, f) -> None:
        """Rows already encoded as a Parquet file of the table's schema (a tasks.SpilledFile: a part an audit
        state kept) written as they are, after the rows written so far: neither decoded nor encoded again."""
        import pyarrow.parquet as pq

        from runtime.output import out_join, out_write
        from store_format.interrupts import check_beside

        check_beside()
        if not f.rows:
            return
        self.rows += f.rows
        if self._file is None:
            self._kept.append(pq.read_table(pa.BufferReader(f.data)).cast(self.schema))
            return
        if self._file_rows:  # the rows before it: a file of their own
            self._file.close()
            self.paths.append(self._path)
        path = out_join(self.folder, f"part-{len(self.paths):05d}.parquet")
        out_write(path, f.data)
        self.paths.append(path)
        self._next_file()

    def abort(self) -> None:
        """The table given up (its family failed): its files closed and removed, so no part of it is an output."""
        from runtime.output import out_remove_quietly

        if self._file is not None:
            self._file.abort()
            self._file = None
            for path in [*self.paths, self._path]:
                out_remove_quietly(path)
        self._kept = []

    def close(self):
        """What the family returns for the table; its last file closed, or being closed beside (:meth:`closed`)."""
        from runtime.output import Beside

        from .contract import WrittenTable

        if self._file is None:
            return pa.concat_tables(self._kept) if self._kept else self.schema.empty_table()
        if self._file_rows or not self.paths:  # a table of no rows: a file of its schema
            if self._closing_list is None:
                self._file.close(empty_file=True)
            else:
                self._closing = Beside()
                self._closing.start(self._file.close, empty_file=True)
                self._closing_list.append(self)
            self.paths.append(self._path)
        return WrittenTable(tuple(self.paths), self.rows)

    def closed(self, raising: bool = True) -> None:
        """The file closed beside (:meth:`close`) waited for; its error raised (else the file removed)."""
        if self._closing is not None:
            closing, self._closing = self._closing, None
            try:
                closing.wait(raising=raising)
            except BaseException:
                self.abort()
                raise


#: what a TableWriter holds before it writes a row group (whichever comes first); it is written in a thread beside
#: the family's next rows (runtime.output.RowGroupWriter ``beside``), so a writer holds at most twice this
ROW_GROUP_ROWS = 1 << 18
ROW_GROUP_BYTES = 32 << 20


_OFFSET_KEY = ["broker", "topic", "group", "queue_id"]


def _holds_offset(t: pa.Table):
    """The rows of a consumer offsets table that hold an offset: no error, a topic."""
    return pc.and_(pc.is_null(t.column("error")), pc.is_valid(t.column("topic")))


def _not_superseded(plain: pa.Table, carried_keys: pa.Table) -> pa.Table:
    """The rows of ``plain`` whose key (:data:`_OFFSET_KEY`) is none of ``carried_keys``' (lmqConsumerOffset.json
    holds them), in their order."""
    if not carried_keys.num_rows or not plain.num_rows:
        return plain
    row = pa.array(np.arange(plain.num_rows, dtype=np.int64))
    kept = plain.select(_OFFSET_KEY).append_column("_row", row).join(carried_keys, keys=_OFFSET_KEY,
                                                                      join_type="left anti")
    return plain.take(pa.array(np.sort(kept.column("_row").to_numpy())))


def _topics_of(t: pa.Table) -> pa.Array:
    """The distinct topics of a batch of offsets: its own numbering (AuditContext.key_of)."""
    return pc.unique(t.column("topic")).drop_null()


def _rows_where(t: pa.Table, keep) -> pa.Table:
    """The rows of ``t`` where ``keep(t)`` holds, as slices of it (zero-copy: the kept rows are long runs, the
    left-out ones a file's error rows)."""
    mask = keep(t)
    if pc.all(mask).as_py() is not False:
        return t
    m = mask.to_numpy(zero_copy_only=False).astype(bool)
    edges = np.flatnonzero(np.diff(np.r_[0, m.view(np.int8), 0]))
    runs = [t.slice(a, b - a) for a, b in zip(edges[0::2].tolist(), edges[1::2].tolist())]
    return pa.concat_tables(runs) if runs else t.slice(0, 0)


_WINDOW_UNITS = 1 << 16  # units one read of a consume-queue file may span for the committed offsets in it (1.25 MiB)


def _units_at_many(wanted: list) -> tuple[np.ndarray, np.ndarray]:
    """(rows, their units) of each of ``wanted`` ((consume-queue file, sorted unit indexes in it, their rows)):
    :func:`_units_at` of each, the short spans of files of a backend that reads many files' windows at once
    (store_format.queues.Backend.windows) read so, together, the others a file at a time.  40,000 queues' committed
    offsets were 40,000 reads and decodes of a few units each."""
    rows, units, at_once = [], [], {}
    for f, at, r in wanted:
        if f.backend.windows is not None and int(at[-1]) + 1 - int(at[0]) <= _WINDOW_UNITS:
            at_once.setdefault(f.backend, []).append((f, at, r))
        else:
            rows.append(r)
            units.append(_units_at(f.loc, at, f.backend.window))
    for backend, these in at_once.items():
        lo = np.array([int(at[0]) for _, at, _ in these], np.int64)
        columns, counts = backend.windows([(f.loc, int(at[0]), int(at[-1]) + 1) for f, at, _ in these])
        n = np.array([len(at) for _, at, _ in these], np.int64)
        file_of = np.repeat(np.arange(len(these), dtype=np.int64), n)
        k = np.concatenate([at for _, at, _ in these]) - lo[file_of]
        ok = k < counts[file_of]
        got = np.full(len(k), -1, np.int64)
        at_unit = (np.cumsum(counts) - counts)[file_of[ok]] + k[ok]
        got[ok] = np.where(columns["valid"][at_unit], columns["physical_offset"][at_unit], -1)
        rows.append(np.concatenate([r for _, _, r in these]))
        units.append(got)
    return (np.concatenate(rows), np.concatenate(units)) if rows else (np.zeros(0, np.int64), np.zeros(0, np.int64))


def _units_at(loc, at: np.ndarray, window) -> np.ndarray:
    """The physical offset of the entry unit at each of ``at`` (sorted unit indexes of one consume-queue file, read
    by its backend's ``window``), -1 where the unit there is not an entry: one read of the span when it is short,
    else a read per unit."""
    out = np.full(len(at), -1, np.int64)
    lo, hi = int(at[0]), int(at[-1]) + 1
    spans = [(lo, hi, np.arange(len(at)))] if hi - lo <= _WINDOW_UNITS else \
        [(int(u), int(u) + 1, np.flatnonzero(at == u)) for u in np.unique(at)]
    for a, b, which in spans:
        u = window(loc, a, b)
        k = at[which] - a
        ok = k < len(u["valid"])
        got = np.where(u["valid"][k[ok]], u["physical_offset"][k[ok]], -1)
        out[which[ok]] = got
    return out
