"""The survey: the first, light stage of an audit, whose small results the driver needs before the scan.

* :class:`SegmentSurvey`: one range of a segment's salvage walk, CRC checked, reporting only what is not a
  message (stops, blanks, unframeable spans) and where its data ends.  Run over the segments the broker's
  recovery walks and over segments the scan splits: the driver then knows every segment's walk ends (first stop,
  first blank), so it can predict recovery and give each scan range what only a walk from the segment's start
  knows.
* :class:`RouteSurvey`: a group of one route's files (jobs/audit/routes.py: consume-queue files in groups of whole
  queues, index files one by one): per file its bounds and the routing buckets of its entries (which scan task
  owns which entries), what the route finds over the group (where each queue's recovery starts), and the
  families' ``in_survey`` hooks over what was read.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa

from store_format.commitlog import KIND_CORRUPT, KIND_MESSAGE, KIND_STOP, KINDS, SalvageSpan
from store_format.fs import Location, ReadOnlyMap
from store_format.recovery import forced_crc_stop
from store_format.scan import DEFAULT_MAX_RECORD_SIZE, SegmentEnds, read_range_walk, span_detail
from decoding.kernels import CompiledFramer

from .routes import ROUTES, SurveyInput, resumed_queue_file
from .tasks import Emitter

WALK_ITEMS = pa.schema([
    ("broker", pa.string()), ("segment", pa.string()), ("range_start", pa.int64()), ("file_position", pa.int64()),
    ("kind", pa.string()), ("size", pa.int64()), ("reason", pa.string()), ("field", pa.string()),
    ("detail", pa.string()),
])
WALK_RANGES = pa.schema([
    ("broker", pa.string()), ("segment", pa.string()), ("range_start", pa.int64()), ("first", pa.int64()),
    ("until", pa.int64()), ("messages", pa.int64()), ("data_end", pa.int64()),
    # forceVerifyPropCRC: the first message of the range the broker's forced check refuses (position, size, kind)
    ("prop_crc_stop", pa.int64()), ("prop_crc_stop_size", pa.int64()), ("prop_crc_stop_kind", pa.string()),
])
#: the partial tables the survey's own tasks emit (the routes declare theirs)
EMITS = {"survey.walk_items": WALK_ITEMS, "survey.walk_ranges": WALK_RANGES}


def walk_rows(broker: str, segment: str, range_start: int, items) -> list[dict]:
    """The non-message items of a walk as rows of :data:`WALK_ITEMS`."""
    rows = []
    for i, it in sorted(items.others.items()):
        if isinstance(it, SalvageSpan):
            rows.append(dict(file_position=it.file_position, kind=KINDS[KIND_CORRUPT], size=it.length, reason=it.reason,
                             detail=span_detail(it)))
        else:
            rows.append(dict(file_position=it.file_position, kind=it.kind, size=it.size, reason=it.stop_kind,
                             field=it.stop_field, detail=it.stop_message))
    return [{"broker": broker, "segment": segment, "range_start": range_start, **r} for r in rows]


@dataclass
class SegmentSurvey:
    broker: str
    loc: Location
    name: str
    base: int
    length: int
    start: int
    end: int
    last: bool
    check_crc: bool
    force_verify_prop_crc: bool = False  # the broker's recovery walks this segment with forceVerifyPropCRC

    def describe(self) -> str:
        return f"{self.broker}/{self.name}@{self.start}"

    def cost(self) -> int:
        return self.end - self.start

    def kept_by(self) -> tuple:
        """What its output depends on besides the bytes of the file it reads (``loc``): a state (jobs/audit/state.py)
        keeps its output and gives it back while the file's bytes are the same."""
        return self.loc, (self.broker, self.name, self.base, self.length, self.start, self.end, self.last,
                          self.check_crc, self.force_verify_prop_crc)

    def reach(self, emitted: Emitter) -> int | None:
        """How far into its file its walk's output may depend on the bytes (the next range's walk start, and a
        largest record's bytes twice over, as a ranged read of it reads): a state gives its kept output back for a
        file grown since, when the file's bytes up to here are the same.  None: the walk ran to the file's end."""
        ranges = emitted.partials.get("survey.walk_ranges") or []
        until = [u for t in ranges for u in t.column("until").to_pylist()]
        if self.last or len(until) != 1 or until[0] is None:
            return None
        return until[0] + 2 * DEFAULT_MAX_RECORD_SIZE

    def run(self, out: Emitter) -> None:
        walk, handle, w0 = read_range_walk(self.loc, self.name, self.base, self.length, self.start, self.end,
                                           self.last, check_crc=self.check_crc, framer=CompiledFramer)
        items = walk.items
        refused = None
        try:
            if self.force_verify_prop_crc:
                msg = items.kinds == KIND_MESSAGE
                buf = handle.buf if isinstance(handle, ReadOnlyMap) else handle
                refused = forced_crc_stop(buf, items.positions[msg] - w0, items.sizes[msg])
        finally:
            if isinstance(handle, ReadOnlyMap):
                handle.close()
        out.partial("survey.walk_items", pa.Table.from_pylist(walk_rows(self.broker, self.name, self.start, items),
                                                              schema=WALK_ITEMS))
        msg = items.kinds == KIND_MESSAGE
        ends = items.positions + np.where(items.kinds == KIND_STOP, 0, items.sizes)
        out.partial("survey.walk_ranges", pa.Table.from_pylist([{
            "broker": self.broker, "segment": self.name, "range_start": self.start, "first": walk.first,
            "until": walk.until, "messages": int(msg.sum()), "data_end": int(ends.max()) if len(items) else None,
            "prop_crc_stop": refused[0] + w0 if refused else None, "prop_crc_stop_size": refused[1] if refused else None,
            "prop_crc_stop_kind": refused[2] if refused else None,
        }], schema=WALK_RANGES))


@dataclass
class RouteSurvey:
    """A group of one route's files (jobs/audit/routes.py), with the hooks of the families that survey them."""

    route: str
    given: SurveyInput
    files: list
    hooks: tuple = ()  # (family name, its in_survey hook for this route)
    # audit --state: {path: (its row of the last run, where its written bytes end now, whether they grew)} of the
    # files whose survey goes on from the last run's (routes.resumed_queue_file; no hook looks at them)
    resumed: dict = field(default_factory=dict)
    HOLDS_THE_GIL = True  # a file at a time in Python: one such task at a time in the driver (tasks.holds_the_gil)

    @property
    def broker(self) -> str:
        return self.given.broker

    def describe(self) -> str:
        return f"{self.given.broker}: {len(self.files)} {self.route} file(s)"

    def cost(self) -> int:
        return sum(ROUTES[self.route].survey_cost(f) for f in self.files)

    def run(self, out: Emitter) -> None:
        route = ROUTES[self.route]
        again = {}  # id of a file -> (its row, its recovery), gone on from the last run's
        for f in self.files:
            was = self.resumed.get(f.loc.path)
            got = resumed_queue_file(self.given, f, *was) if was is not None else None
            if got is not None:
                again[id(f)] = got
        files = [f for f in self.files if id(f) not in again]
        grouped = route.survey_files(self.given, files) if route.survey_files is not None and files else None
        if grouped is not None:  # every file's row computed over the group at once, the group's reads held
            table, reads = grouped
            surveyed = zip(files, ((None, read) for read in reads))
        else:  # a file at a time, its read let go once its hooks ran
            table, surveyed = None, ((f, route.survey_file(self.given, f)) for f in files)
        rows, kept = [], {}
        for f, (row, read) in surveyed:
            if row is not None:
                rows.append(row)
            for _, hook in self.hooks:
                hook(self.given, f, read, out)
            kept[id(f)] = route.survey_keep(read)  # a few numbers a file
        for f in self.files:
            if id(f) in again:
                rows.append(again[id(f)][0])
                kept[id(f)] = again[id(f)][1]
        out.finish_gathered()  # what the hooks do once the files are done
        rest = pa.Table.from_pylist(rows, schema=route.survey_schema)
        whole = pa.concat_tables([table, rest]) if table is not None else rest
        if again:  # in the files' order, as a survey of them all gives them
            at = {f.loc.path: i for i, f in enumerate(self.files)}
            whole = whole.take(np.argsort([at[p] for p in whole.column("path").to_pylist()], kind="stable"))
        out.partial(route.files_partial, whole)
        if route.survey_group is not None:
            route.survey_group(self.given, self.files, out, kept)


# ---------------------------------------------------------------------------------------------------------
# The stage's tasks


def survey_tasks(ctx, segments: list) -> list:
    """The survey's tasks: every range of the surveyed segments (:class:`jobs.audit.plan.SegmentPlan`), and each
    broker's files of every route in the route's groups, with the families' survey hooks and probes."""
    tasks = []
    for sp in segments:
        if sp.surveyed:
            for r in sp.ranges:
                tasks.append(SegmentSurvey(sp.broker, r.loc, r.name, r.base, r.length, r.start, r.end, r.last,
                                           ctx.options.check_crc, ctx.options.forced_crc_check and
                                           sp.in_recovery_region))
    for name, plan in ctx.plans.items():
        probes = {f.name: f.survey_probes(ctx, name) for f in ctx.families if f.survey_probes is not None}
        given = SurveyInput(name, plan.shift, plan.commitlog_end, probes)
        for route in ROUTES.values():
            hooks = tuple((f.name, f.in_survey[route.name]) for f in ctx.families if route.name in f.in_survey)
            for group in route.group(route.files(plan)):
                tasks.append(RouteSurvey(route.name, given, group, hooks))
    return tasks


def segment_ends(survey) -> dict[tuple[str, str], SegmentEnds]:
    """The ends of every surveyed segment's walk (store_format.scan.SegmentEnds), from the survey's rows."""
    stops: dict[tuple, list] = {}
    blanks: dict[tuple, list] = {}
    for r in survey.get("survey.walk_items", WALK_ITEMS).to_pylist():
        key = (r["broker"], r["segment"])
        if r["kind"] == "stop":
            stops.setdefault(key, []).append(r["file_position"])
        elif r["kind"] == "blank":
            blanks.setdefault(key, []).append(r["file_position"])
    keys = set(stops) | set(blanks) | {(r["broker"], r["segment"])
                                       for r in survey.get("survey.walk_ranges", WALK_RANGES).to_pylist()}
    return {k: SegmentEnds.of(stops.get(k, ()), blanks.get(k, ())) for k in keys}
