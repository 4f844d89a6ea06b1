"""Findings grouped by cause: what the report lists instead of one row per finding.

A group is one check at one place of one broker (``Check.group``: per file, or per queue where the finding names
no file; per consume queue; per topic; or one per broker for per-message findings that all say the same thing, such as every
message lost after one cut): its count, worst severity, first and last position, the store times there, and
the first few findings as samples.  Groups are ordered by consequence (``findings.Consequence``: will not start,
data lost, data at risk, queries wrong, consumers affected, cosmetic), then severity, then the rank the check's
family declares (contract.Family.rank: what the broker will do first, then the damage that causes it, then the
rest), then size; the findings table keeps every row for whoever filters it.  Nothing here names a family or a
check: each check declares its grouping, each family its rank.

The findings folder is read a batch at a time and each batch is reduced with Arrow, so memory stays bounded by
the number of groups, whatever the number of findings.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from functools import lru_cache

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from store_format.fs import Location

from .findings import CHECKS, ENGINE_FAMILY, ENGINE_RANK, Consequence, Severity

SAMPLES = 5
_COLUMNS = ("check", "severity", "broker", "file", "file_position", "physical_offset", "topic", "queue_id",
            "queue_offset", "message")
_SEVERITIES = pa.array([s.label for s in Severity])
_UNRANKED = float("inf")  # a family that declares no rank (or a check this build does not know): after the ranked


@lru_cache(maxsize=None)
def _ranks() -> dict[str, float]:
    """family -> the rank it declares (the engine's own checks' too)."""
    from .checks import load_all

    return {f.name: f.rank for f in load_all() if f.rank is not None} | {ENGINE_FAMILY: ENGINE_RANK}


@dataclass
class Group:
    broker: str
    check: str
    file: str | None
    topic: str | None
    queue_id: int | None
    count: int = 0
    severity: Severity = Severity.INFO
    first_offset: int | None = None  # least and greatest physical offset of the group's findings
    last_offset: int | None = None
    first_position: int | None = None  # least and greatest file position (for findings that have no offset)
    last_position: int | None = None
    first_time: int | None = None  # store times of the messages at first_offset and last_offset (if any)
    last_time: int | None = None
    first_file: str | None = None  # least and greatest file named (a group of one per broker: its range)
    last_file: str | None = None
    samples: list[dict] = field(default_factory=list)

    @property
    def consequence(self) -> Consequence:
        c = CHECKS.get(self.check)
        return c.consequence if c else Consequence.DATA_AT_RISK  # a check this build does not know: look at it

    @property
    def action(self) -> str:
        c = CHECKS.get(self.check)
        return c.action if c else "See docs/user-guide.md for this check."

    @property
    def place(self) -> str:
        """Where the group is, in words: the file, the queue or the topic; empty for a whole-broker group."""
        if self.file is not None:
            return self.file
        if self.topic is not None:
            return self.topic if self.queue_id is None else f"{self.topic}/{self.queue_id}"
        return ""

    def sort_key(self) -> tuple:
        rank = _ranks().get(self.check.split(".", 1)[0], _UNRANKED)
        c = CHECKS.get(self.check)
        per_message = c is not None and c.group == "broker"  # the messages a cause loses come after the cause
        return (int(self.consequence), int(self.severity), rank, per_message, -self.count, self.broker, self.check,
                self.place)


def _sample_key(r: dict) -> tuple:
    return (r["physical_offset"] is None, r["physical_offset"] or 0, r["file"] or "", r["file_position"] or 0)


def _place_columns(t: pa.Table, grouping: str) -> tuple[pa.Array, pa.Array, pa.Array]:
    """(file, topic, queue_id) that name each finding's group: nulls where the grouping leaves them out."""
    n = t.num_rows
    none_s, none_q = pa.nulls(n, pa.string()), pa.nulls(n, pa.int32())
    if grouping == "broker":
        return none_s, none_s, none_q
    topic = t.column("topic").combine_chunks()
    if grouping == "topic":
        return none_s, topic, none_q
    if grouping == "queue":
        return none_s, topic, t.column("queue_id").combine_chunks()
    file = t.column("file").combine_chunks()
    no_file = pc.is_null(file)
    return file, pc.if_else(no_file, topic, none_s), pc.if_else(no_file, t.column("queue_id").combine_chunks(), none_q)


def _reduce(t: pa.Table, grouping: str, groups: dict) -> None:
    """Fold one batch of one check's findings into ``groups``."""
    file, topic, qid = _place_columns(t, grouping)
    parts = [t.column("broker").combine_chunks(), file, topic, pc.cast(qid, pa.string())]
    key = pc.binary_join_element_wise(*[pc.fill_null(p, "\x00") for p in parts], "\x1f")
    codes = pc.dictionary_encode(key)
    ids = codes.indices.to_numpy(zero_copy_only=False)
    phys = t.column("physical_offset").combine_chunks()
    pos = t.column("file_position").combine_chunks()
    rank = pc.index_in(t.column("severity"), _SEVERITIES).fill_null(int(Severity.INFO)).to_numpy(zero_copy_only=False)
    big = np.iinfo(np.int64).max
    p = phys.fill_null(big).to_numpy(zero_copy_only=False)
    order = np.lexsort((pos.fill_null(big).to_numpy(zero_copy_only=False), p, ids))  # by group, then position
    sorted_ids = ids[order]
    starts = np.flatnonzero(np.r_[True, sorted_ids[1:] != sorted_ids[:-1]])
    within = np.arange(len(order)) - np.repeat(starts, np.diff(np.r_[starts, len(order)]))
    sample_rows = order[within < SAMPLES]
    samples = t.select(list(_COLUMNS[2:])).take(pa.array(sample_rows)).to_pylist()
    stats = pa.table({"g": ids, "rank": rank, "phys": phys, "pos": pos, "file": t.column("file").combine_chunks()}) \
        .group_by("g").aggregate([("g", "count"), ("rank", "min"), ("phys", "min"), ("phys", "max"), ("pos", "min"),
                                  ("pos", "max"), ("file", "min"), ("file", "max")])
    first_of = {}
    for g, i in zip(sorted_ids[starts].tolist(), starts.tolist()):
        first_of[g] = order[i]
    names = {"file": file, "topic": topic, "queue_id": qid, "broker": t.column("broker").combine_chunks()}
    by_id = {}
    for row in stats.to_pylist():
        i = int(first_of[row["g"]])
        k = tuple(names[c][i].as_py() for c in ("broker", "file", "topic", "queue_id"))
        by_id[row["g"]] = k
        g = groups.get(k)
        if g is None:
            g = groups[k] = Group(k[0], t.column("check")[0].as_py(), k[1], k[2], k[3])
        g.count += row["g_count"]
        g.severity = Severity(min(int(g.severity), row["rank_min"]))
        g.first_offset = _least(g.first_offset, row["phys_min"])
        g.last_offset = _most(g.last_offset, row["phys_max"])
        g.first_position = _least(g.first_position, row["pos_min"])
        g.last_position = _most(g.last_position, row["pos_max"])
        g.first_file = _least(g.first_file, row["file_min"])
        g.last_file = _most(g.last_file, row["file_max"])
    for row_index, s in zip(sample_rows.tolist(), samples):
        g = groups[by_id[int(ids[row_index])]]
        g.samples = sorted(g.samples + [s], key=_sample_key)[:SAMPLES]


def _least(a, b):
    return b if a is None else a if b is None else min(a, b)


def _most(a, b):
    return b if a is None else a if b is None else max(a, b)


def group_findings(path: Location) -> list[Group]:
    """Every group of the findings folder ``path``, in the report's order."""
    from .checks import load_all

    load_all()  # each check's grouping and consequence (a fresh process, e.g. make demo's, has not imported them)
    from runtime.output import dataset_batches, out_dataset

    dataset = out_dataset(path)  # a local path or a URI (the run's staging)
    if dataset is None:
        return []
    groups: dict[str, dict] = {}  # check -> key -> Group
    for batch in dataset_batches(dataset, list(_COLUMNS)):  # a batch at a time: findings grow with the messages
        if not batch.num_rows:
            continue
        t = pa.table(batch)
        checks = t.column("check")
        for check_id in pc.unique(checks).to_pylist():
            c = CHECKS.get(check_id)
            part = t.filter(pc.equal(checks, check_id))
            _reduce(part, c.group if c else "place", groups.setdefault(check_id, {}))
    return sorted((g for per in groups.values() for g in per.values()), key=Group.sort_key)


def add_times(groups: list[Group], store_times) -> None:
    """The time span of each group of findings about messages (those that name a topic): ``store_times(broker,
    offsets)`` gives {offset: store time} for the offsets where a message starts (a span of damage or a unit
    pointing mid-record has none).  A finding about a file (a segment's name, the abort file) gets no time: the
    message at its offset says nothing about it."""
    wanted: dict[str, set] = {}
    about_messages = [g for g in groups if g.samples and g.samples[0]["topic"] is not None]
    for g in about_messages:
        for o in (g.first_offset, g.last_offset):
            if o is not None:
                wanted.setdefault(g.broker, set()).add(o)
    found = {b: store_times(b, sorted(offsets)) for b, offsets in wanted.items()}
    for g in about_messages:
        times = found.get(g.broker, {})
        g.first_time, g.last_time = times.get(g.first_offset), times.get(g.last_offset)
