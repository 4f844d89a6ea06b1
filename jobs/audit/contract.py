"""The check-family contract: everything a family is, declared in one object (:class:`Family`), which the engine
(plan, survey, scan, job), tools/schema_docs.py and the docs read.  The engine names no family: it runs whatever
hooks the registry's families declare, where their names say.

Where each hook runs (``rc``: a :class:`jobs.audit.scan.RangeContext`; ``out``: the task's
:class:`jobs.audit.tasks.Emitter`; ``ctx``: the driver's :class:`jobs.audit.context.AuditContext`):

* ``survey_probes(ctx, broker) -> object``: on the driver before the survey; what its survey hooks need.
* ``in_survey[route](task, file, read, out)``: in a survey task of that route (jobs/audit/routes.py), for each file
  the route's survey read (``read``: what it read of the file, the route's own form; ``task.probes[family]``); what
  it does once a task rather than once a file it gathers with ``out.gathered(name, finish)`` (the delays' first
  readings of a broker's levels).  ``in_survey_topics[route]``: the topics whose files the hook looks at (a route not
  named: every file); audit --state goes on from the last run's survey of the others (jobs/audit/kept.py).
* ``probes(ctx, broker) -> object``: on the driver between survey and scan; what its scan hooks need
  (``rc.facts.probes[family]`` in every task of the broker).
* ``in_range(rc, out)``: in every commitlog range task, over its walk, its messages and what it owns.
* ``probe_in_span(probe, lo, hi, memo) -> object``: what of its probe a range task owning physical offsets
  ``lo`` .. ``hi`` - 1 reads (``memo``: what ``range_memo`` kept of the range's messages, or None), for the key
  under which ``audit --state`` keeps the task's output (jobs/audit/kept.py); without it the whole probe is keyed.
* ``range_memo(rc) -> numpy array | None``: in a range task of an audit with ``--state``, what of its messages
  ``probe_in_span`` needs when the task's output is given back (the range is not read then); the task keeps the
  sorted union of its ranges' values (jobs/audit/kept.py).
* ``in_files[route](facts, files, out)``: in a file task of that route, over a group of its files (whole queues).
* ``while_listed(ctx)``: on the driver once the recovery is predicted, before the scan, while the run still holds
  its listings of the stores' folders (store_format.fs.listings): what walks a store's whole tree (the metadata
  family's unreadable entries) walks it then, not afresh after the scan.
* ``after_scan(ctx)``: on the driver once the scan is done, before any family finishes (to complete what the
  others read: the recovery prediction).
* ``on_driver(ctx) -> FamilyResult``: on the driver, from the partial tables and the driver's facts: findings,
  metrics and detail tables.
* ``summary(ctx) -> {broker: value}``: ``value`` goes into summary.json's broker object under the family's name.
* ``applies(plan) -> bool``: on the driver after planning, per broker (``plan``: a
  :class:`jobs.audit.plan.BrokerPlan`): whether its files give the family anything to check.  A family whose
  structures no store of the dump has (the timer store of a 5.x broker, in a dump of 4.x brokers) is not run, as
  a store is read as 5.x because its files say so; without ``applies`` a family always runs.

A family declares what its hooks emit (``emits``: partial tables by name, with their schemas; a partial's name
starts with the family's), what it reads of others (``reads``), its detail tables (``tables``, columns described
with decoding.columns) and its metrics (``metrics``, name -> description).  ``always`` families run in every audit
whatever ``--checks`` says (they complete what the summary and the report show) and are not offered there.

A family also declares how it is presented (jobs/audit/report.py, groups.py and verdict.py render these and name
no family and no check): ``views`` (its detail tables the report shows: :class:`TableView`), ``sections`` (what it
adds to summary.json's brokers, shown as a table: :class:`SummaryView`), ``plots`` (:class:`Plot`), ``rank``
(where its finding groups come within one consequence and severity, lower first; unranked families after every
ranked one), ``blockers_predicted`` (its will-not-start findings are problems the commitlog's recovery prediction
already lists) and ``damage_behind_cut`` (where recovery cuts, its errors are the damage behind the cut, which the
cut's actions say).  How a check's findings group, and what a check means to the verdict (its roles), the check
declares itself (``findings.check``).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

import pyarrow as pa

from store_format import fs


@dataclass
class FamilyResult:
    findings: list[pa.Table] = field(default_factory=list)
    metrics: list[pa.Table] = field(default_factory=list)
    tables: dict[str, "pa.Table | WrittenTable"] = field(default_factory=dict)


@dataclass(frozen=True)
class WrittenTable:
    """A detail table its family wrote itself batch by batch (:meth:`jobs.audit.context.AuditContext.table_writer`):
    one that grows with the messages is never whole on the driver.  ``paths``: its files, in the rows' order (one,
    unless rows kept by an audit state were written as they were kept).  The report shows its first rows (``head``)."""

    paths: tuple[fs.Location, ...]
    rows: int

    def head(self, n: int) -> "pa.Table":
        """Its first ``n`` rows (what the report shows), read from its files."""
        from runtime.output import out_parts_dataset

        return out_parts_dataset(list(self.paths), None).head(n)


@dataclass(frozen=True)
class TableView:
    """How the report shows one of the family's detail tables: under ``title``, at ``order`` among the report's
    detail tables; ``columns`` (column, label) in order (empty: every column under its own name); ``empty``: what
    an empty table means; ``needs``: the input beside the commitlog it is read from (missing: the table is
    unknown)."""

    title: str
    order: int
    columns: tuple[tuple[str, str], ...] = ()
    empty: str = "none"
    needs: str | None = None


#: how a :class:`SummaryView` column is drawn: words, a number, a store time (epoch ms), or a list of (store time,
#: count) pairs one a line
CELL_KINDS = ("text", "number", "time", "time_counts")


@dataclass(frozen=True)
class SummaryView:
    """A section of the report drawn from summary.json's brokers (what the family's ``summary`` adds): one row per
    broker, ``row(broker) -> list | None`` (a summary.json ``brokers`` entry; None: the broker has no row), under
    ``columns`` (label, kind: :data:`CELL_KINDS`); at ``order`` among the report's summary sections; ``anchor``: its
    id in the page; ``note``: a line under the table; ``always``: shown with no row too."""

    title: str
    order: int
    columns: tuple[tuple[str, str], ...]
    row: Callable
    anchor: str | None = None
    note: str = ""
    always: bool = False

    def __post_init__(self):
        wrong = [k for _, k in self.columns if k not in CELL_KINDS]
        if wrong:
            raise ValueError(f"section {self.title}: unknown cell kinds {wrong}")


@dataclass(frozen=True)
class Plot:
    """A plot of the report: ``draw(ctx, tables, plt) -> (heading, figure) | None`` (``tables``: the run's detail
    tables by name; ``plt``: matplotlib's pyplot), at ``order`` among the report's plots."""

    order: int
    draw: Callable


@dataclass(frozen=True)
class Family:
    name: str
    doc: str  # one line: what it finds
    always: bool = False
    survey_probes: Callable | None = None
    in_survey: dict[str, Callable] = field(default_factory=dict)
    in_survey_topics: dict[str, tuple[str, ...]] = field(default_factory=dict)
    probes: Callable | None = None
    probe_in_span: Callable | None = None
    range_memo: Callable | None = None
    in_range: Callable | None = None
    in_files: dict[str, Callable] = field(default_factory=dict)
    while_listed: Callable | None = None
    after_scan: Callable | None = None
    on_driver: Callable | None = None
    summary: Callable | None = None
    applies: Callable | None = None
    emits: dict[str, pa.Schema] = field(default_factory=dict)
    reads: tuple[str, ...] = ()
    tables: dict[str, pa.Schema] = field(default_factory=dict)
    metrics: dict[str, str] = field(default_factory=dict)
    views: dict[str, TableView] = field(default_factory=dict)
    sections: tuple[SummaryView, ...] = ()
    plots: tuple[Plot, ...] = ()
    rank: int | None = None
    blockers_predicted: bool = False
    damage_behind_cut: bool = False
    # its on_driver reads only the run's outputs and changes nothing of the context's (no list another family reads
    # or adds to): the job runs it in a thread beside the other families (jobs/audit/job.py _finish)
    beside: bool = False

    def __post_init__(self):
        wrong = [n for n in self.emits if not n.startswith(f"{self.name}.")]
        if wrong:
            raise ValueError(f"family {self.name}: partial tables are named after their family: {wrong}")
        unknown = [n for n in self.views if n not in self.tables]
        if unknown:
            raise ValueError(f"family {self.name}: views of tables it does not declare: {unknown}")


__all__ = ["Family", "FamilyResult", "Plot", "SummaryView", "TableView", "WrittenTable"]
