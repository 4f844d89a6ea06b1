"""The audit's driver-side view of a dump: its stores and plans, the survey's and the scan's partial tables, and the
facts the check families share (recovery predicted per broker, the dump time, the consume queues' bounds, the
config files), each computed once."""
from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from store_format import fs
from store_format import layout as L

from .inputs import StoreRef
from .plan import BrokerPlan
from .routes import CQ_FILES, QUEUE_BOUNDS, QUEUE_STARTS
from .scan import RANGES
from .survey import WALK_ITEMS
from .tasks import Outputs, failure_row


@dataclass
class AuditOptions:
    families: tuple[str, ...]  # the check families chosen (--checks)
    as_of: int | None = None
    check_crc: bool = True
    message_index_safe: bool = False
    segment_size: int | None = None
    split_size: int | None = None
    executor: str = "auto"  # where the tasks run (jobs.session.choose_executor): auto, driver or spark


class AuditContext:
    def __init__(self, spark, stores: list[StoreRef], plans: dict[str, BrokerPlan], options: AuditOptions,
                 families: list | None = None):
        self.spark, self.stores, self.plans, self.options = spark, stores, plans, options
        self.families = list(families or [])  # the jobs.audit.contract.Family objects this audit runs
        self.survey = Outputs()
        self.scan = Outputs()
        self.failures: list[pa.Table] = []  # tasks and steps that failed (tasks.FAILURES rows)
        self.recovery: dict = {}
        self.resend_damaged: list[dict] = []  # damaged records the driver names (resend.damaged_row), for tables/resend

    # ---- partial tables ----------------------------------------------------------------------------------
    def partial(self, name: str, schema: pa.Schema | None = None) -> pa.Table:
        """The scan's partial table ``name``, every task's rows together."""
        return self.scan.get(name, schema)

    def survey_partial(self, name: str, schema: pa.Schema | None = None) -> pa.Table:
        return self.survey.get(name, schema)

    # ---- recovery ----------------------------------------------------------------------------------------
    def predict_recovery(self) -> None:
        """What each broker's recovery will do, decided from the survey's walks of the segments it walks (so
        nothing is walked here) and completed by the scan (the ``prediction`` family's ``after_scan``)."""
        from store_format.recovery import QueueStart, predict_recovery

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
                    walks=walks.get(name, {}), enumerate_lost=False, queue_starts=starts[name])
            except Exception as e:  # that broker is not scanned; the others are
                self.failures.append(failure_row(name, "predicting its recovery", e))

    def segment_walks(self) -> dict[str, dict]:
        """broker -> segment -> SegmentWalk: where the broker's recovery walk of each surveyed segment ends, from the
        survey's salvage walk: its first blank or stop (the same walk but for the PHYSICALOFFSET check the broker
        lacks: a segment whose walk stopped at a PHYSICAL_OFFSET_MISMATCH is walked again here, the broker's way)."""
        from store_format.errors import ErrorKind
        from store_format.recovery import SegmentWalk, recovery_walk

        first: dict[tuple, dict] = {}
        for r in self.survey_partial("survey.walk_items", WALK_ITEMS).to_pylist():
            if r["kind"] in ("stop", "blank"):
                key = (r["broker"], r["segment"])
                if key not in first or r["file_position"] < first[key]["file_position"]:
                    first[key] = r
        out: dict[str, dict] = {}
        for (broker, segment), r in first.items():
            seg = next(s for s in self.plans[broker].store.segments if s.name == segment)
            if r["reason"] == ErrorKind.PHYSICAL_OFFSET_MISMATCH.value:
                walk = recovery_walk(seg, self.options.check_crc)
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
        """Per consume queue: ``min_offset`` (first entry), ``max_offset`` (one past the last entry, as the broker's
        ``getMaxOffsetInQueue``) and the entry count, from the consume-queue files."""
        t = self.survey_partial("survey.cq_files", CQ_FILES)
        t = t.filter(pc.greater(t.column("entries"), 0))
        if not t.num_rows:
            return QUEUE_BOUNDS.empty_table()
        g = t.group_by(["broker", "topic", "queue_id"]).aggregate([("min_queue_offset", "min"),
                                                                   ("max_queue_offset", "max"), ("entries", "sum")])
        return pa.table({"broker": g.column("broker"), "topic": g.column("topic"), "queue_id": g.column("queue_id"),
                         "min_offset": g.column("min_queue_offset_min"),
                         "max_offset": pc.add(g.column("max_queue_offset_max"), 1),
                         "entries": g.column("entries_sum")}, schema=QUEUE_BOUNDS)

    @cached_property
    def queue_ids(self) -> set[tuple]:
        """(broker, topic, queue id) of every consume-queue file with content or a bad name (queue id None when
        the folder is not a number): the queues the consume-queue files show."""
        return {(name, f.topic, f.queue_id) for name, plan in self.plans.items() for f in plan.cq_files
                if f.length > 0 or not f.loaded}

    @cached_property
    def queue_topics(self) -> set[tuple]:
        return {(b, t) for b, t, _ in self.queue_ids}

    def committed_units(self, broker: str) -> dict[tuple, int | None]:
        """(topic, queue id, committed offset) -> the physical offset of the entry unit at that queue offset (None
        where the queue has no entry there), for every offset in consumerOffset.json."""
        cache = self.__dict__.setdefault("_committed", {})
        if broker not in cache:
            from store_format.consumequeue import read_unit_window

            files: dict[tuple, list] = {}
            for f in self.plans[broker].cq_files:
                if f.loaded:
                    files.setdefault((f.topic, f.queue_id), []).append(f)
            out = {}
            offsets = self.metadata("consumer_offsets").to_pylist()
            for r in offsets:
                if r["broker"] != broker or r["error"] is not None or r["topic"] is None:
                    continue
                key = (r["topic"], r["queue_id"], r["offset"])
                phys = None
                for f in sorted(files.get(key[:2], []), key=lambda f: f.first_queue_offset):
                    first = f.first_queue_offset
                    if first <= r["offset"] < first + f.length // L.CQ_STORE_UNIT_SIZE:
                        u = read_unit_window(f.loc, r["offset"] - first, r["offset"] - first + 1)
                        if len(u["kind"]) and u["kind"][0] == 0:
                            phys = int(u["physical_offset"][0])
                        break
                out[key] = phys
            cache[broker] = out
        return cache[broker]

    # ---- config files ------------------------------------------------------------------------------------
    def metadata(self, table: str) -> pa.Table:
        """A store metadata table (udfs/metadata.py), read on the driver: these files are small."""
        from udfs.metadata import schema_of, table_batch

        cache = self.__dict__.setdefault("_metadata", {})
        if table not in cache:  # column-wise: a broker's consumerOffset.json may hold millions of offsets
            cache[table] = pa.concat_tables([schema_of(table).empty_table()]
                                            + [table_batch(table, s.name, s.path) for s in self.stores])
        return cache[table]

    # ---- single records ----------------------------------------------------------------------------------
    def kept_messages_by_id(self, broker: str, msg_ids) -> pa.Table:
        """The messages the offset message ids (a list or a pyarrow string array) name, where a message of the
        salvage walk starts at the id's offset, the predicted recovery keeps it and its own offset message id is
        that id: a table of ``msg_id``, ``physical_offset``, ``topic``, ``uniq_key`` (the other ids are left out)."""
        from store_format.ids import offset_msg_id_offsets

        ids = pc.unique(pa.array(msg_ids, pa.string()) if isinstance(msg_ids, list) else msg_ids)
        phys, valid = offset_msg_id_offsets(ids)
        wanted = np.unique(phys[valid & (phys < self.recovery[broker].max_physical_offset)])
        t = self.walk_messages_at(broker, wanted, ("msg_id", "physical_offset", "topic", "uniq_key"))
        return t.filter(pc.is_in(t.column("msg_id"), ids.drop_null()))

    def walk_messages_at(self, broker: str, offsets, columns: tuple[str, ...]) -> pa.Table:
        """The decoded ``columns`` (udfs.kernels) of the messages of the salvage walk that start at ``offsets``
        (sorted), each segment opened once.  A frame that proves itself (store_format.commitlog.proves_itself)
        lies on the walk from its segment's start; the walk ends at the segment's first blank.  Anything else is settled
        by walking the segment.  The frames are checked together (udfs.kernels.CompiledFramer.each)."""
        from store_format.commitlog import KIND_MESSAGE, proves_itself, salvage_arrays
        from udfs import kernels as K

        segments = self.plans[broker].segments
        bases = np.array([s.base_offset for s in segments], np.int64)
        offsets = np.asarray(offsets, np.int64)
        at = np.searchsorted(bases, offsets, side="right") - 1
        parts = []
        for i, seg in enumerate(segments):
            pos = offsets[at == i] - seg.base_offset
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
                    parts.append(pa.Table.from_batches([K.decode_buffer(m.buf, pos[keep], sizes[keep],
                                                                        columns=columns)]))
        from udfs.kernels import message_schema

        return pa.concat_tables(parts) if parts else message_schema(columns).empty_table()

    def store_times(self, broker: str, offsets) -> dict[int, int]:
        """{physical offset: store time} for the offsets where a message of the salvage walk starts (for a finding
        group's time span: offsets where no message starts are left out)."""
        if broker not in self.plans or not offsets:
            return {}
        t = self.walk_messages_at(broker, sorted(set(offsets)), ("physical_offset", "store_timestamp"))
        return dict(zip(t.column("physical_offset").to_pylist(), t.column("store_timestamp").to_pylist()))

    def release(self) -> None:
        pass
