"""What the audit reports: the findings and metrics schemas, the one severity ranking, and the registry of every
check the audit can emit (its id, severity and message template), declared by the check families.

A finding is one row: ``check`` (``family.kind``), ``severity``, where it is (``broker``, ``file``,
``file_position``, ``physical_offset``, ``topic``, ``queue_id``, ``queue_offset``), a one-sentence ``message``
and ``details`` (string facts).  Its ``finding_id`` is a stable hash of where it is (:func:`with_finding_id`), so
the same damage has the same id in every run and ``jobs/trend.py`` tells new damage from old.  Metrics are long
format (``metric``, ``value``) per broker / topic / queue / group / level, so new figures never change a
history table's schema.

Messages come from the check's template, rendered column-wise (:func:`render`) wherever the finding is made:
in a scan task over millions of rows or on the driver over a few.  Template grammar: ``{name}`` is a value
(a null value makes the whole message null), ``{name|text}`` a value or ``text`` when it is null, and
``[...]`` a part that is left out when any value inside it is null.
"""
from __future__ import annotations

import enum
import re
from dataclasses import dataclass
from functools import lru_cache

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from decoding.columns import column


class Severity(enum.IntEnum):
    """Ordered by consequence: a lower value is worse."""

    ERROR = 0
    WARNING = 1
    INFO = 2

    @property
    def label(self) -> str:
        return self.name.lower()

    @classmethod
    def of(cls, label: str) -> "Severity":
        return cls[label.upper()]


SEVERITIES = tuple(s.label for s in Severity)

# -------------------------------------------------------------------------------------------------- schemas

POSITION_COLUMNS = ("broker", "file", "file_position", "physical_offset", "topic", "queue_id", "queue_offset")
FINDING_SCHEMA = pa.schema([
    column("check", pa.string(), "`family.kind`, see the user guide for every kind", nullable=False),
    column("severity", pa.string(), "`error`, `warning` or `info`", nullable=False),
    column("broker", pa.string()),
    column("file", pa.string(), "the file the finding is about: a segment name, `abort`, `index/<name>`, "
                                "`config/<name>.json`, a consume-queue file name"),
    column("file_position", pa.int64()), column("physical_offset", pa.int64()), column("topic", pa.string()),
    column("queue_id", pa.int32()),
    column("queue_offset", pa.int64(), "the queue offset the finding is about (the first of a range for range "
                                       "findings)"),
    column("message", pa.string(), "one sentence saying what is wrong and where (plain text; message content is "
                                   "not quoted)"),
    column("details", pa.map_(pa.string(), pa.string()), "check-specific facts (`reason`, `excerpt_hex`, `count`, "
                                                         "`uniq_key`, `key`, `lag`...) as strings"),
])
METRIC_SCHEMA = pa.schema([
    column("broker", pa.string()),
    column("scope", pa.string(), "what a row measures: `broker`, `queue`, `group` (per group and topic) or `level` "
                                 "(delay level)", nullable=False),
    column("topic", pa.string(), "topic (null for broker-scope metrics)"),
    column("queue_id", pa.int32(), "queue id (queue- and level-scope metrics)"),
    column("group", pa.string(), "consumer group (group-scope metrics)"),
    column("metric", pa.string(), "the metric's name (listed below)", nullable=False),
    column("value", pa.float64(), "its value (a double)"),
])
#: the run's stamps, first in the findings and metrics files
STAMPS = pa.schema([column("run_id", pa.string()), column("run_time", pa.timestamp("us", "UTC"))])
STAMP_COLUMNS = tuple(STAMPS.names)


# -------------------------------------------------------------------------------------------------- registry

class Consequence(enum.IntEnum):
    """What a finding means for the broker's data, the order the report puts findings in (a lower value matters
    more): a count of warnings says little, the consequence says what to look at first."""

    WILL_NOT_START = 0
    DATA_LOST = 1
    DATA_AT_RISK = 2
    QUERIES_WRONG = 3
    CONSUMERS_AFFECTED = 4
    UNKNOWN = 5  # an input the audit needs is missing: what it would have shown is not known
    COSMETIC = 6

    @property
    def label(self) -> str:
        return self.name.lower().replace("_", " ")


# How the report groups a check's findings (one row per group; the findings table keeps every row): ``place``
# per file, or per queue when the finding has no file; ``queue`` per consume queue (topic and queue id);
# ``topic`` per topic; ``broker`` one group per broker (per-message findings that say the same thing: every
# message lost after one cut).
GROUPINGS = ("place", "queue", "topic", "broker")

# What a check means to the verdict (jobs/audit/verdict.py) and the report, which name no check: a check declares
# its roles, and they find it by role (jobs.audit.checks.with_role, over the whole registry).
ROLES = {
    "start_blocker": "the broker will not start (the commitlog's recovery prediction says why)",
    "cut": "recovery cuts the log and drops what follows",
    "lost_after_cut": "a message recovery drops after the cut",
    "unindexed": "a message in no consume queue: consumers never receive it",
    "damage": "damaged records themselves (the spans and the messages they held): the messages to re-send name them",
    "damaged_message": "a damaged message (what the actions about damaged messages name)",
    "property_crc": "a record whose whole-record CRC (__CRC32#) fails",
    "dispatch_stall": "the record whose LMQ dispatch list stalls the reput",
    "audit_failed": "a step of the audit failed on the broker",
    "input_missing": "a config file the audit needs is missing or unreadable (the tables it feeds are unknown)",
}

# the engine's own checks (``broker.*``, declared here) among the families' ranks (contract.Family.rank)
ENGINE_FAMILY, ENGINE_RANK = "broker", 15


@dataclass(frozen=True)
class Check:
    """One kind of finding.  ``also`` lists the other severities a family may give it row by row (said in its
    docstring, e.g. info instead of warning for a system topic); ``action`` is what an operator does about it
    (docs/user-guide.md's "what to do", word for word: tests/test_docs.py holds them equal)."""

    id: str
    severity: Severity
    template: str
    also: tuple[Severity, ...] = ()
    consequence: Consequence = Consequence.COSMETIC
    action: str = ""
    group: str = "place"
    roles: tuple[str, ...] = ()

    @property
    def family(self) -> str:
        return self.id.split(".", 1)[0]


CHECKS: dict[str, Check] = {}


def check(id: str, severity: Severity, template: str, also: tuple[Severity, ...] = (), *,
          consequence: Consequence, action: str, group: str = "place", roles: tuple[str, ...] = ()) -> Check:
    """Declare a check (each family declares its own at import): what it says, how bad it is, what it costs the
    broker's data, what to do about it, how the report groups its findings and what it means to the verdict
    (``roles``, :data:`ROLES`)."""
    c = Check(id, severity, template, also, consequence, action.strip(), group, tuple(roles))
    if set(c.roles) - set(ROLES):
        raise ValueError(f"check {id}: unknown roles {sorted(set(c.roles) - set(ROLES))}")
    if id in CHECKS and CHECKS[id] != c:
        raise ValueError(f"check {id} is declared twice, differently")
    if not c.action or group not in GROUPINGS:
        raise ValueError(f"check {id}: an action and a grouping ({', '.join(GROUPINGS)}) are required")
    render_parts(template)  # a bad template fails at import, not in a task
    CHECKS[id] = c
    return c


# -------------------------------------------------------------------------------------------------- messages

_TOKEN = re.compile(r"\{([a-z_][a-z0-9_]*)(?:\|([^}]*))?\}|\[|\]|[^{}\[\]]+")


@lru_cache(maxsize=None)
def render_parts(template: str) -> tuple:
    """The template as a tree: literal strings, ("field", name, default) and ("group", parts)."""
    stack: list[list] = [[]]
    pos = 0
    for m in _TOKEN.finditer(template):
        if m.start() != pos:
            break
        pos = m.end()
        text = m.group(0)
        if m.group(1):
            stack[-1].append(("field", m.group(1), m.group(2)))
        elif text == "[":
            stack.append([])
        elif text == "]":
            if len(stack) == 1:
                raise ValueError(f"template {template!r}: ']' without '['")
            group = stack.pop()
            stack[-1].append(("group", tuple(group)))
        else:
            stack[-1].append(text)
    if pos != len(template) or len(stack) != 1:
        raise ValueError(f"template {template!r} does not parse at {pos}")
    return tuple(stack[0])


def text_of(values) -> pa.Array:
    """Values as Spark's ``cast(... as string)`` spells them: integers in decimal, booleans true/false."""
    arr = values if isinstance(values, (pa.Array, pa.ChunkedArray)) else pa.array(values)
    if isinstance(arr, pa.ChunkedArray):
        arr = arr.combine_chunks()
    if pa.types.is_string(arr.type):
        return arr
    if pa.types.is_large_string(arr.type) or pa.types.is_dictionary(arr.type):
        return arr.cast(pa.string())
    if pa.types.is_integer(arr.type) or pa.types.is_boolean(arr.type) or pa.types.is_null(arr.type):
        return pc.cast(arr, pa.string())
    raise TypeError(f"no message text for {arr.type}: give integers, booleans or strings")


def _piece(value, n: int):
    if value is None:
        return pa.nulls(n, pa.string())
    if isinstance(value, (pa.Array, pa.ChunkedArray, np.ndarray, list)):
        arr = text_of(value)
        if len(arr) != n:
            raise ValueError(f"a value of {len(arr)} rows for {n} findings")
        return arr
    return pa.scalar(text_of([value])[0].as_py(), pa.string())


def render(template: str, n: int, values: dict) -> pa.Array:
    """The messages of ``n`` findings: ``template`` with ``values`` (name -> array of n, or one value for all)."""
    return _joined(render_parts(template), template, n, values)


def _joined(parts, template: str, n: int, values: dict) -> pa.Array:
    """:func:`render` of the parsed ``parts``, an optional part's own parts joined in turn.  A function of the module,
    not a closure calling itself: such a closure is a reference cycle, and it held every finding's columns until the
    cyclic collector ran (which counts Python objects, not the Arrow bytes they hold)."""
    pieces = []
    for p in parts:
        if isinstance(p, str):
            pieces.append(pa.scalar(p, pa.string()))
        elif p[0] == "field":
            if p[1] not in values:
                raise KeyError(f"template {template!r} needs {p[1]!r}")
            v = _piece(values[p[1]], n)
            pieces.append(v if p[2] is None else pc.fill_null(v, p[2]))
        else:
            pieces.append(pc.fill_null(_joined(p[1], template, n, values), ""))
    if not pieces:
        return pa.repeat(pa.scalar("", pa.string()), n)
    out = pc.binary_join_element_wise(*pieces, pa.scalar("", pa.string()))
    return pa.repeat(out, n) if isinstance(out, pa.Scalar) else out


# -------------------------------------------------------------------------------------------------- rows

def _column(value, n: int, typ: pa.DataType) -> pa.Array:
    if value is None:
        return pa.nulls(n, typ)
    if isinstance(value, (pa.Array, pa.ChunkedArray)):
        arr = value.combine_chunks() if isinstance(value, pa.ChunkedArray) else value
        return arr if arr.type == typ else pc.cast(arr, typ)
    if isinstance(value, (np.ndarray, list)):
        return pa.array(value, typ)
    return pa.repeat(pa.scalar(value, typ), n)


def details_map(n: int, details: dict) -> pa.MapArray:
    """``details`` (name -> values) as a map column: each value as text, nulls left out, names in order."""
    names = list(details)
    if not names:
        return pa.MapArray.from_arrays(pa.array(np.zeros(n + 1, np.int32)), pa.array([], pa.string()),
                                       pa.array([], pa.string()))
    texts = [pc.cast(_column(details[k], n, pa.string()) if not isinstance(details[k], (pa.Array, pa.ChunkedArray,
                                                                                       np.ndarray, list))
                     else text_of(details[k]), pa.string()) for k in names]
    valid = np.stack([t.is_valid().to_numpy(zero_copy_only=False) for t in texts], axis=1)  # n x k
    offsets = np.zeros(n + 1, np.int32)
    np.cumsum(valid.sum(axis=1), out=offsets[1:])
    rows, cols = np.nonzero(valid)  # row-major: each row's entries in the names' order
    keys = pa.array(names, pa.string()).take(pa.array(cols, pa.int64()))
    flat = pa.concat_arrays(texts) if len(texts) > 1 else texts[0]
    items = flat.take(pa.array(cols * n + rows, pa.int64()))
    return pa.MapArray.from_arrays(pa.array(offsets), keys, items)


def finding_table(check_id: str, n: int, *, severity=None, values: dict | None = None, details: dict | None = None,
                  **positions) -> pa.Table:
    """``n`` findings of ``check_id``: ``positions`` (the position columns, arrays or one value each; missing ones
    null), the message rendered from ``values`` plus the positions, ``details`` as a map.  ``severity`` (a
    Severity or an array of labels) overrides the check's own where its family says so."""
    c = CHECKS[check_id]
    unknown = set(positions) - set(POSITION_COLUMNS)
    if unknown:
        raise TypeError(f"unknown position columns {sorted(unknown)}")
    if severity is None:
        sev = pa.repeat(pa.scalar(c.severity.label), n)
    elif isinstance(severity, Severity):
        if severity != c.severity and severity not in c.also:
            raise ValueError(f"{check_id} is not declared with severity {severity.label}")
        sev = pa.repeat(pa.scalar(severity.label), n)
    else:
        sev = _column(severity, n, pa.string())
        allowed = {c.severity.label, *(s.label for s in c.also)}
        if not set(pc.unique(sev).to_pylist()) <= allowed:
            raise ValueError(f"{check_id} is declared with severities {sorted(allowed)} only")
    cols = {"check": pa.repeat(pa.scalar(check_id), n), "severity": sev}
    for name in POSITION_COLUMNS:
        cols[name] = _column(positions.get(name), n, FINDING_SCHEMA.field(name).type)
    cols["message"] = render(c.template, n, {**positions, **(values or {})})
    cols["details"] = details_map(n, details or {})
    return pa.Table.from_arrays([cols[f.name] for f in FINDING_SCHEMA], schema=FINDING_SCHEMA)


def finding_rows(check_id: str, rows: list[dict]) -> pa.Table:
    """Findings made one at a time on the driver: dicts of positions, ``values`` and ``details``."""
    if not rows:
        return FINDING_SCHEMA.empty_table()
    keys = {k for r in rows for k in r if k in POSITION_COLUMNS}
    positions = {k: [r.get(k) for r in rows] for k in keys}
    value_names = {k for r in rows for k in r.get("values", {})}
    values = {k: [r.get("values", {}).get(k) for r in rows] for k in value_names}
    detail_names = list(dict.fromkeys(k for r in rows for k in r.get("details", {})))
    details = {k: [_detail_text(r.get("details", {}).get(k)) for r in rows] for k in detail_names}
    sev = [r["severity"].label if isinstance(r.get("severity"), Severity) else r.get("severity") for r in rows]
    typed = {k: pa.array(v, FINDING_SCHEMA.field(k).type) for k, v in positions.items()}
    return finding_table(check_id, len(rows), severity=None if all(s is None for s in sev) else pa.array(
        [s or CHECKS[check_id].severity.label for s in sev], pa.string()),
        values={k: pa.array(v) for k, v in values.items()}, details={k: pa.array(v, pa.string())
                                                                      for k, v in details.items()}, **typed)


def _detail_text(v):
    if v is None or isinstance(v, str):
        return v
    if isinstance(v, bool):
        return "true" if v else "false"
    return str(v)


# the audit's own check: one broker's bad file (or a bug) is that broker's finding, never the end of the run
check("broker.audit_failed", Severity.ERROR, "the audit of this broker is incomplete: {what} failed: {error}",
      consequence=Consequence.DATA_AT_RISK, group="broker", roles=("audit_failed",),
      action="Keep the run's output; re-run the audit on that broker alone with `--checks` narrowed to see what else "
             "it finds, and report the error with `details.where` (and, if you can share it, the file).")


# a folder holding more files than one run lists (store_format.rolled.FileLimit, --max-files, --max-segments): the
# rest is audited
check("broker.files_skipped", Severity.WARNING,
      "{file} holds {files} files, more than {option} {limit}: {skipped} of them were not read ({what})",
      consequence=Consequence.UNKNOWN, group="broker",
      action="The findings say nothing about the skipped files.  Audit them with a larger `--max-files` (or "
             "`--max-segments`) on a machine with more memory (3-5 KB of driver memory per consume-queue file, 26 KB "
             "per segment), or move the files that should not be there "
             "(stray or empty queue folders, segments past retention) out of a copy of the store and audit it again.")


def empty_findings() -> pa.Table:
    return FINDING_SCHEMA.empty_table()


#: rows of a family's table made into findings at a time: a finding's row (message, details map) is several times its
#: source row: a bucket of an out-of-core pass (buckets.ROWS_PER_BUCKET) made into findings at once peaked at 50-130 MB
FINDINGS_SLICE = 1 << 16


def slices(table: pa.Table, rows: int = FINDINGS_SLICE):
    """``table`` as consecutive slices of at most ``rows`` rows (zero-copy), in order: what a family makes into
    findings a slice at a time."""
    for start in range(0, table.num_rows, rows):
        yield table.slice(start, rows)


def concat_findings(tables: list[pa.Table]) -> pa.Table:
    tables = [t for t in tables if t.num_rows]
    return pa.concat_tables(tables) if tables else empty_findings()


def metric_table(scope: str, values: dict, n: int | None = None, **keys) -> pa.Table:
    """Long-format metrics: one row per (key row, metric in ``values``); ``values`` maps metric names to arrays
    of n (or one value), ``keys`` gives broker / topic / queue_id / group (arrays or one value)."""
    if n is None:
        lengths = [len(v) for v in list(values.values()) + list(keys.values()) if isinstance(v, (pa.Array, pa.ChunkedArray, list,
                                                                                                np.ndarray))]
        n = lengths[0] if lengths else 1
    if not n or not values:
        return METRIC_SCHEMA.empty_table()
    names = list(values)
    k = len(names)
    rows = np.repeat(np.arange(n), k)  # row-major: each key row's metrics in the values' order
    out = {}
    for name in ("broker", "topic", "queue_id", "group"):
        out[name] = _column(keys.get(name), n, METRIC_SCHEMA.field(name).type).take(pa.array(rows))
    out["scope"] = pa.repeat(pa.scalar(scope), n * k)
    out["metric"] = pa.array(names * n, pa.string())
    # values are doubles: an integer past 2**53 (a damaged file's offset) is rounded, not refused
    vals = [pc.cast(_column(values[m], n, pa.float64()) if not isinstance(values[m], (pa.Array, pa.ChunkedArray))
                    else values[m], pa.float64(), safe=False) for m in names]
    flat = pa.concat_arrays([v.combine_chunks() if isinstance(v, pa.ChunkedArray) else v for v in vals])
    out["value"] = flat.take(pa.array(np.tile(np.arange(k), n) * n + rows, pa.int64()))
    return pa.Table.from_arrays([out[f.name] for f in METRIC_SCHEMA], schema=METRIC_SCHEMA)


def concat_metrics(tables: list[pa.Table]) -> pa.Table:
    tables = [t for t in tables if t.num_rows]
    return pa.concat_tables(tables) if tables else METRIC_SCHEMA.empty_table()


# -------------------------------------------------------------------------------------------------- as written

FINDINGS_FILE_SCHEMA = pa.schema(list(STAMPS) + [
    column("finding_id", pa.string(), "stable id: a hash of the check and where it is (broker, file, positions, "
                                      "topic/queue/offset, key), the same in every run for the same damage")]
    + list(FINDING_SCHEMA))


def finding_ids(t: pa.Table) -> pa.Array:
    """The stable id of each finding: the first 20 hex digits of the SHA-256 of where it is (check, the position
    columns, the ``key`` detail; absent ones as empty text, joined by ``|``), not of when it was found."""
    import hashlib

    cols = [pc.fill_null(text_of(t.column(c).combine_chunks()), "") for c in ("check",) + POSITION_COLUMNS]
    key = pc.fill_null(pc.map_lookup(t.column("details"), "key", "first"), "")
    joined = pc.binary_join_element_wise(*cols, key, "|")
    return pa.array([hashlib.sha256(k.encode()).hexdigest()[:20] for k in joined.to_pylist()], pa.string())


def as_written(t: pa.Table, run_id: str, run_time) -> pa.Table:
    """Findings as the findings table holds them: the run's stamps and each finding's id first."""
    n = t.num_rows
    return pa.Table.from_arrays(
        [pa.repeat(pa.scalar(run_id), n), pa.repeat(pa.scalar(run_time, pa.timestamp("us", "UTC")), n),
         finding_ids(t) if n else pa.array([], pa.string())] + list(t.columns), schema=FINDINGS_FILE_SCHEMA)


def severity_rank(column: str = "severity"):
    """A Spark column ranking severities (0 = error) for ordering."""
    from pyspark.sql import functions as F

    expr = F.lit(len(Severity))
    for s in reversed(Severity):
        expr = F.when(F.col(column) == s.label, int(s)).otherwise(expr)
    return expr
