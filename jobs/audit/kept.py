"""``audit --state``'s kept scan ranges: a commitlog range task (jobs/audit/scan.py :class:`CommitlogRange`, or a
:class:`CommitlogRun` of small ones) whose output the last run kept is given back instead of walked, decoded and
checked again, when everything its output depends on is as it was.

What a range's output depends on, and how each is compared:

* **its segment's bytes**, up to its reach (its walk's end and a largest record twice over; to the file's end for a
  segment's last range): the state's look at the file (jobs/audit/state.py) says the file is the same, or grew past
  the part's reach;
* **its structure** (segment, range bounds, whether it is the segment's last or the broker's first range, the next
  segment's base): the part's name, :func:`scan_key`;
* **what the whole store decides**, as far as the range reads it (:func:`span_keys`, made in the task, since it reads
  the routed entries): the broker's facts the families read; the recovery's cut, the consume queues' end and the
  index's re-dispatch start, each exactly where it falls inside the span and as "below" or "above" it otherwise (a
  range only compares them with offsets it owns); the segment's first stop, first blank and where its CRCs were
  checked, the same way against the range's reach; file-level damage in the span; every routed entry (consume-queue
  units, index entries...) pointing into the span, as the values the families' views of it are made of
  (scan.routed_values: equal values, equal views), except in a file whose entries the broker only appends to (a
  queue file, a timer log; an index file's entries region, its header and slots rewritten: ``BrokerFacts.row_keyed``),
  whose entries are named instead, by the last row of those in the span or in the blocks its ends fall in
  (:func:`_rows_named`: mostly from the survey's buckets, the file not read), where the state found each such file
  (its entries region) as the last run did or grown past it (``BrokerFacts.settled``, by the kept blocks of the
  state's looks, as every file's bytes): the same rows of the same bytes, and a new entry pointing into the span is
  a later row (a part keeps two keys, one naming such entries and one showing them, and a file changed since the
  last run is compared by the second); and each family's probe as far
  as the span reads it (``Family.probe_in_span``: the pending delayed messages it owns and the pending keys its
  messages hold copies of, from the hashes ``range_memo`` kept of them; the committed offsets it owns); the recovery
  walk's end, where the span holds it.

A file task (:class:`KeptFiles`: an index file's check, the only one whose hooks go on from their last run) is
given back whole when its files are as the last run found them (the state's look: ``same``); otherwise it runs, and
its hooks read what their last run left them (the part's memos, in ``Emitter.resumed``) and check what their file's
bytes allow them to trust of it themselves (jobs/audit/checks/index.py: an index file's entries are only appended).

Rows a family works out on the driver from one spilled part of the scan and bytes of the store it reads there (the
retries' rows, whose origins are read from the segments their ids name) are kept the same way (:func:`offer_rows`):
under a key of the part's bytes, with what those made them read (memos kept beside them), given back when what they
would read now is what they read then (the recovery's cut moves) and each file read is the same or grew past where
they read it.

The span keyed is a bound of the one the range owns (it ends at the range's reach, not where its walk ended), so a
key can only differ more often than the output would, never less: a range whose key matches would emit what its
part holds (tests/test_audit_state.py's growth steps compare every output with a full audit's).
"""
from __future__ import annotations

import dataclasses
import hashlib
import json
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from store_format import fs

from .routes import CONSUMEQUEUE, CQ_FILES, ROUTES, hulls
from .scan import (INF, MEMO, NEG_INF, CommitlogRange, CommitlogRun, FileScan, RoutedWindows, owned_buckets,
                   routed_values, whole_buckets)
from .state import GIVEN_BACK, code_digest, read_part, write_part
from .tasks import Emitter, SpilledFile

ABOVE = "above"  # an offset at or past the span's end (or a file position past the range's reach): all alike
BELOW = "below"  # an offset at or before the span's start: all alike


def keep_ranges(state, tasks: list) -> list:
    """The scan's ``tasks`` with each commitlog range (or run of them) of a broker the ``state`` compares as a
    :class:`KeptScan`: offered the last run's part when its files allow it (jobs/audit/state.py ``offer``)."""
    out, seen = [], set()
    for task in tasks:
        if not isinstance(task, (CommitlogRange, CommitlogRun)) or not state.compared(task.broker):
            out.append(task)
            continue
        rels = state.rels(task.broker, [r.loc for r in task.ranges])
        kept, part = state.offer(task.broker, scan_key(code_digest(), rels, task), rels)
        facts = task.ranges[0].facts
        facts.keeping = True  # its ranges emit their memos (scan.check_context)
        if task.broker not in seen:  # once a broker: its facts are every range's
            seen.add(task.broker)
            facts.row_keyed, facts.settled = state.settled(task.broker, [f for files in facts.routed.values()
                                                                         for f in files])
        out.append(KeptScan(task, rels, kept, part))
    return out


def scan_key(code: str, rels: tuple, task) -> str:
    """The name of a range task's part: the suite's code, its files (below the store root) and its ranges'
    structure; what else its output depends on is :func:`span_keys`'s, decided in the task."""
    structure = [(rel, r.name, r.base, r.length, r.start, r.end, r.last, r.first_of_broker, r.next_base, r.resolved)
                 for rel, r in zip(rels, task.ranges)]
    return hashlib.sha256(repr((code, "scan", structure)).encode()).hexdigest()[:32]


def max_record() -> int:
    """A largest record (bytes past a frame's start that can decide what is read there)."""
    from . import survey  # read at the call: a test makes it smaller

    return survey.DEFAULT_MAX_RECORD_SIZE


def range_reaches(task, rels: tuple) -> dict:
    """Each file's reach after the task ran (the furthest of its ranges' there; None: to its end)."""
    reaches: dict = {}
    for rel, r in zip(rels, task.ranges):
        reach = r.reach(max_record())
        if rel in reaches:
            reaches[rel] = None if reaches[rel] is None or reach is None else max(reaches[rel], reach)
        else:
            reaches[rel] = reach
    return reaches


def span_keys(task, rels: tuple, reaches: dict, memos: dict, giving_back: bool = False) -> dict | None:
    """What the task's output depends on besides its bytes and structure, as digests (see the module's doc), one
    with the entries of the files the broker only appends to named by their rows (``"rows"``), one with them shown
    (``"views"``); giving back, only the one to compare: the rows where the state found each such file with entries
    in the span unchanged (``BrokerFacts.settled``), else the views.  None when the range cannot be kept (a probe of
    a form the key cannot hold)."""
    ranges = task.ranges
    facts = ranges[0].facts
    lo, hi, per_range = INF, -INF - 1, []
    for rel, r in zip(rels, ranges):
        reach = reaches.get(rel)
        r_lo, r_hi = r.span_bound()
        if not r.last and reach is not None:
            r_hi = min(r_hi, r.base + reach)
        lo, hi = min(lo, r_lo), max(hi, r_hi)

        def at(x, reach=reach):  # None: no stop, no blank in the segment, which is as one past the reach
            return ABOVE if x is None or reach is not None and x >= reach else x
        per_range.append((at(r.first_stop), at(r.first_blank), at(r.crc_checked_before)))

    def offset(x):  # a range only compares them with offsets it owns (and a damaged span's start with the cut)
        return BELOW if x <= lo else x if x < hi else ABOVE
    stop = facts.recovery_stop  # the recovery walk's end (store_format.recovery.SegmentWalk), where the span has it
    stop = stop if stop is not None and lo <= stop.physical_offset < hi else None
    h = hashlib.sha256()  # the fastest digest here (the CPU's SHA instructions): 1.7 GB/s, BLAKE2b's 0.76
    try:
        _feed(h, (tuple(f.name for f in facts.families), facts.check_crc, facts.segment_size, facts.delay_levels,
                  facts.dispatch, facts.indexed,
                  offset(facts.recovered_end), offset(facts.reput_from), offset(facts.index_pending_from),
                  stop, [p for p in facts.file_problems if lo <= p[0] < hi], per_range))
        seen = []
        for family in facts.families:
            if family.name in facts.probes:
                probe = facts.probes[family.name]
                seen.append((family.name, family.probe_in_span(probe, lo, hi, memos.get(family.name))
                             if family.probe_in_span is not None else probe))
        _feed(h, seen)
        rows = {name: _rows_named(facts, name, lo, hi) if lo < hi else [] for name in sorted(ROUTES)}
        settled = all(path in facts.settled for named in rows.values() for path, _ in named)
        kinds = (("rows",) if settled else ("views",)) if giving_back else ("rows", "views")
        # keyed by their rows, the files the broker only appends to are read only where the span cuts a bucket
        full = RoutedWindows(facts, lo, hi)
        windows = {"rows": RoutedWindows(facts, lo, hi, leave_out=facts.row_keyed, else_as=full), "views": full}
        keys = {}
        for kind in kinds:
            k = h.copy()
            for name in sorted(ROUTES):
                shown = routed_values(windows[kind], name, lo, hi) if lo < hi else None
                _feed(k, (name, shown, [(facts.row_keyed[path], row) for path, row in rows[name]])
                      if kind == "rows" else (name, shown))
            keys[kind] = k.hexdigest()[:32]
    except TypeError:  # a probe of a form the key cannot hold: the range runs
        return None
    return keys


# a kept range names the entries of the blocks of 64 MiB its span's ends fall in (:func:`_rows_named`): aligned to
# every bucket width the survey takes up to 256 GiB of log, so the same entries for the same span when the log's
# growth widens its buckets (past 4 GiB: plan.MAX_BUCKETS buckets of 1 MiB)
KEY_BLOCK_SHIFT = 26


def _rows_named(facts, name: str, lo: int, hi: int) -> list[tuple[str, int]]:
    """(path, the last row of its entries pointing into ``lo`` .. ``hi`` - 1, or into the blocks its ends fall in) of
    each file of route ``name`` the broker only appends to (``BrokerFacts.row_keyed``) with such entries, by path.  In
    a file the same as the last run's or grown past it, the same pairs name the same entries: an entry appended
    pointing into them is a later row.  The span is widened to whole blocks (:data:`KEY_BLOCK_SHIFT`, or a bucket
    when buckets are wider) when they end at or below the block of the recovered end, where no new message is
    appended: a bound of the span, so the key can only change more often than its entries do, and, in buckets the
    blocks hold whole, made of the survey's buckets alone, the files not read (a range's span ends at its reach,
    inside its neighbour's first bucket).  Else a bucket the span holds only part of (the log's newest, or one wider
    than the range) is read."""
    block = max(KEY_BLOCK_SHIFT, facts.shift)
    top = -(-hi >> block) << block if hi != INF else INF
    if top <= facts.recovered_end >> block << block:  # widened: a bound of the span, below the newest messages
        lo, hi = lo >> block << block if lo != NEG_INF else lo, top
    blo, bhi = owned_buckets(facts, lo, hi)
    first, final = whole_buckets(facts, lo, hi)
    routed = facts.routed.get(name, ())
    last: dict[str, int] = {}
    if first <= final:  # every entry in them points into the (widened) span
        files, _, end = facts.buckets_of(name).rows_for(first, final)
        for i, e in zip(files.tolist(), end.tolist()):
            if routed[i].loc.path in facts.row_keyed:
                last[routed[i].loc.path] = e - 1
    for b in [b for b in sorted({blo, bhi}) if not first <= b <= final]:
        edge = RoutedWindows(facts, lo, hi, buckets=(b, b), only=facts.row_keyed)
        for path, rows in routed_values(edge, name, lo, hi, facts.row_keyed)[1]:
            last[path] = max(last.get(path, -1), int(rows.max()))
    return sorted(last.items())


def _feed(h, x) -> None:
    """``x`` into the digest ``h``, as the same value always feeds it (sets sorted, arrays by their bytes)."""
    if x is None or isinstance(x, (bool, int, float, str, np.integer, np.floating)):
        h.update(f"{type(x).__name__}:{x!r};".encode())
    elif isinstance(x, bytes):
        h.update(b"b%d:" % len(x) + x)
    elif isinstance(x, np.ndarray):
        if x.dtype == object:  # its bytes would be pointers
            _feed(h, ("objects", x.shape, x.ravel().tolist()))
        else:
            h.update(f"a{x.dtype.str}{x.shape}:".encode())
            h.update(np.ascontiguousarray(x).reshape(-1).view(np.uint8))  # the buffer, not a copy of it
    elif isinstance(x, (list, tuple)):
        h.update(b"(%d:" % len(x))
        for y in x:
            _feed(h, y)
    elif isinstance(x, (set, frozenset)):
        _feed(h, ("set", sorted(x, key=repr)))
    elif isinstance(x, dict):
        _feed(h, ("dict", sorted(x.items(), key=lambda kv: repr(kv[0]))))
    elif dataclasses.is_dataclass(x):
        _feed(h, (type(x).__name__, [(f.name, getattr(x, f.name)) for f in dataclasses.fields(x)]))
    else:
        raise TypeError(f"no key for a {type(x).__name__}")


class _Wrapped:
    """A task a state wraps (its ``task``; ``given_back`` once its kept part was given back): the task's broker and
    description, and its kind as --profile names it and the state counts what it gave back."""

    @property
    def broker(self) -> str:
        return self.task.broker

    @property
    def kind(self) -> str:
        return GIVEN_BACK if self.given_back else type(self.task).__name__

    def describe(self) -> str:
        return self.task.describe()


@dataclass
class KeptScan(_Wrapped):
    """A range task under a state: given back from the last run's part (``kept``) when :func:`span_keys` is the one
    the part was kept under, else run; either way its part is kept at ``part`` (the state's staging) for the next
    run.  A task that failed keeps nothing."""

    task: object
    rels: tuple  # each range's file below the store root
    kept: fs.Location | None  # the last run's part, when its files are the same (or grew past its reach)
    part: fs.Location
    given_back: bool = False

    def cost(self) -> int:
        return self.task.cost()

    def run(self, out: Emitter) -> None:
        if self.kept is not None and self._give_back(out):
            return
        mine = Emitter()
        self.task.run(mine)
        memos = {}  # taken out of what it emits, sorted and unique: they travel only in its part
        for name in [n for n in mine.partials if n.startswith(MEMO)]:
            memos[name[len(MEMO):]] = np.unique(np.concatenate([t.column("memo").to_numpy()
                                                                for t in mine.partials.pop(name)]))
        if "_failures" not in mine.partials:
            reaches = range_reaches(self.task, self.rels)
            keys = span_keys(self.task, self.rels, reaches, memos)
            if keys is not None:
                write_part(self.part, mine, json.dumps(reaches), key=json.dumps(keys), memos=memos)
        out.merge(mine)

    def _give_back(self, out: Emitter) -> bool:
        """The kept part emitted, and kept again, when the task's key now is the one it was kept under."""
        from runtime.output import out_keep

        try:
            with self.kept.open_input() as f:
                raw = f.read()
            mine = Emitter()
            head = read_part(raw, mine)
            reaches, kept_under = json.loads(head["reach"]), json.loads(head["key"])
        except Exception:  # noqa: BLE001 - a damaged or missing part: the task runs
            return False
        now = span_keys(self.task, self.rels, reaches, head["memos"], giving_back=True)
        if not now or not isinstance(kept_under, dict) or any(kept_under.get(k) != v for k, v in now.items()):
            return False
        out_keep(self.kept, self.part, raw)
        out.merge(mine)
        self.given_back = True
        return True


# ---------------------------------------------------------------------------------------------------------
# Kept file tasks

#: the routes whose file tasks a state keeps: an index file's check depends on its bytes, its geometry and nothing
#: of the rest of the store (a queue file's recovery reads the broker's recovered end, which moves every night)
KEPT_FILE_ROUTES = ("index",)


def keep_files(state, tasks: list) -> list:
    """The scan's ``tasks`` with each file task of a :data:`KEPT_FILE_ROUTES` route of a broker the ``state``
    compares as a :class:`KeptFiles`."""
    out = []
    for task in tasks:
        if not isinstance(task, FileScan) or task.route not in KEPT_FILE_ROUTES or not state.compared(task.broker):
            out.append(task)
            continue
        rels = state.rels(task.broker, [f.loc for f in task.files])
        geometry = [(f.hash_slot_num, f.index_num) for f in task.files]
        key = hashlib.sha256(repr((code_digest(), "files", task.route, task.broker, rels, geometry)).encode()) \
            .hexdigest()[:32]
        out.append(KeptFiles(task, *state.offer_files(task.broker, key, rels)))
    return out


@dataclass
class KeptFiles(_Wrapped):
    """A file task under a state: given back from the last run's part (``kept``) when its files are the ones the
    last run read (``same``); else run, its hooks given the part's memos (``Emitter.resumed``) to go on from.
    Either way its part is kept at ``part`` for the next run; a task that failed keeps nothing."""

    task: object
    kept: fs.Location | None
    same: bool
    part: fs.Location
    given_back: bool = False

    def cost(self) -> int:
        return 1 if self.same and self.kept is not None else self.task.cost()

    def run(self, out: Emitter) -> None:
        from runtime.output import out_keep

        raw, head, given = None, None, Emitter()
        if self.kept is not None:
            try:
                with self.kept.open_input() as f:
                    raw = f.read()
                head = read_part(raw, given)
            except Exception:  # noqa: BLE001 - a damaged or missing part: the task runs whole
                raw = head = None
        if raw is not None and self.same:
            out_keep(self.kept, self.part, raw)
            out.merge(given)
            self.given_back = True
            return
        mine = Emitter()
        mine.resumed = head["memos"] if head is not None else {}
        self.task.run(mine)
        mine.finish_gathered()
        memos = {name[len(MEMO):]: pa.concat_tables(mine.partials.pop(name)).column("memo").to_numpy()
                 for name in [n for n in mine.partials if n.startswith(MEMO)]}
        if "_failures" not in mine.partials:
            write_part(self.part, mine, memos=memos)
        out.merge(mine)


# ---------------------------------------------------------------------------------------------------------
# Kept rows of a family on the driver

def offer_rows(state, broker: str, what: str, inputs, schema: pa.Schema) -> "KeptRows | None":
    """Rows (of ``schema``) ``what`` (a family's) of ``broker`` works out from ``inputs`` (the spilled part's digest
    and the values they are made of, as :func:`_feed` keys them) and from bytes of the store: the last run's under
    the same inputs, and where to keep them for the next run (:class:`KeptRows`).  None without a state comparing
    ``broker``."""
    if state is None or not state.compared(broker):
        return None
    h = hashlib.sha256()
    _feed(h, (code_digest(), "rows", what, broker, inputs))
    kept, part = state.offer(broker, h.hexdigest()[:32], ())  # the files it read: compared when given back
    return KeptRows(state, broker, kept, part, schema)


@dataclass
class KeptRows:
    """A family's rows for one spilled part under a state (:func:`offer_rows`): ``kept``, the last run's part under
    the same inputs, given back when what it read of the store is as it was; ``part``, where this run keeps them.
    What the rows read is said by ``depends(memos)``, from the memos kept with them (what the rows were made of
    that decides what is read): (a value :func:`_feed` keys, {file location: (how far into it the rows depend on its
    bytes, a value decided there)}, as AuditContext.walk_reads says, None for what no file holds)."""

    state: object
    broker: str
    kept: fs.Location | None
    part: fs.Location
    schema: pa.Schema
    extra: dict = field(default_factory=dict)  # what was kept beside the rows given back (:meth:`keep`'s ``extra``)

    def rows(self, depends, again: bool = True) -> "pa.Table | SpilledFile | None":
        """The kept rows (kept again for the next run, unless not ``again``) when ``depends`` of their memos is what
        they were kept under and each file it read is the same, or grew past where they read it; else None (or none
        kept, or unreadable).  Rows kept as a file (:meth:`keep`) are given back as that file, not decoded."""
        from runtime.output import out_keep

        if self.kept is None:
            return None
        try:
            with self.kept.open_input() as f:
                raw = f.read()
            given = Emitter()
            head = read_part(raw, given)
            as_file = [f for f in given.spilled_files if f.name == "rows"]
            rows = as_file[0] if as_file else given.tables["rows"][0] if "rows" in given.tables \
                else self.schema.empty_table()  # none: not kept
            extra = {name: t[0] for name, t in given.tables.items() if name != "rows"}
            key, reaches = self._key(*depends(head["memos"]))
        except Exception:  # noqa: BLE001 - a damaged or missing part: the rows are worked out again
            return None
        if head["key"] != key or not self.state.allows(self.broker, reaches):
            return None
        if again:
            out_keep(self.kept, self.part, raw)
        self.extra = extra
        return rows

    def keep(self, rows: "pa.Table | SpilledFile", memos: dict, depends, extra: dict | None = None) -> None:
        """``rows`` kept for the next run with their ``memos``, under ``depends(memos)``: a table, or a Parquet file
        of them (tasks.spilled_file, named "rows"), kept and given back as it is; ``extra``: tables worked out from
        them, kept beside (given back as :attr:`extra`)."""
        mine = Emitter()
        if isinstance(rows, SpilledFile):
            mine.spill_file(rows)
        else:
            mine.table("rows", rows)
        for name, t in (extra or {}).items():
            mine.table(name, t)
        key, reaches = self._key(*depends(memos))
        write_part(self.part, mine, json.dumps(reaches), key=key, memos=memos)

    def _key(self, value, reads: dict) -> tuple[str, dict]:
        files = {loc: v for loc, v in reads.items() if loc is not None}
        rels = self.state.rels(self.broker, list(files))
        h = hashlib.sha256()
        _feed(h, (value, sorted(zip(rels, files.values())), reads.get(None)))
        return h.hexdigest()[:32], dict(zip(rels, (v[0] for v in files.values())))


# ---------------------------------------------------------------------------------------------------------
# Kept queue surveys

#: what a state keeps of a broker's consume-queue files' survey: their rows (routes.CQ_FILES), each with its path below
#: the store root and the routing it was bucketed under
KEPT_QUEUE_ROWS = pa.schema([*CQ_FILES, ("rel", pa.string()), ("shift", pa.int64()), ("last_bucket", pa.int64())])


def resume_queue_surveys(state, tasks: list, families) -> dict:
    """Each consume-queue survey task of a broker the ``state`` compares told which of its files go on from the
    last run's rows (``RouteSurvey.resumed``): a file found the same or grown since (the state's look), with a kept
    row bucketed under this run's shift and no entry past the log's end then, of a topic no family's survey hook looks
    at (``Family.in_survey_topics``).  Returns {broker: where its rows are kept for the next run
    (:class:`KeptRows`)}, for :func:`keep_queue_surveys`."""
    from .survey import RouteSurvey

    hooked = [f for f in families if CONSUMEQUEUE.name in f.in_survey]
    if any(CONSUMEQUEUE.name not in f.in_survey_topics for f in hooked):
        return {}  # a hook that looks at every file: each read whole
    looked_at = {t for f in hooked for t in f.in_survey_topics[CONSUMEQUEUE.name]}
    keepers, was = {}, {}
    for task in tasks:
        if not isinstance(task, RouteSurvey) or task.route != CONSUMEQUEUE.name or not state.compared(task.broker):
            continue
        if task.broker not in keepers:
            keepers[task.broker] = offer_rows(state, task.broker, "survey.queue_files", (), KEPT_QUEUE_ROWS)
            was[task.broker] = _kept_rows(keepers[task.broker].rows(lambda memos: ((), {}), again=False))
        looks = state.looks(task.broker)
        shift = task.given.shift
        for f, rel in zip(task.files, state.rels(task.broker, [f.loc for f in task.files])):
            row, x = was[task.broker].get(rel), looks.get(rel)
            if row is None or x is None or x.change not in ("same", "grown") or f.topic in looked_at \
                    or row["shift"] > shift or row["last_bucket"] << row["shift"] > task.given.commitlog_end \
                    or len(row["bucket"]) and row["bucket"][-1] > row["last_bucket"]:
                continue
            task.resumed[f.loc.path] = (_rebucketed({k: row[k] for k in CQ_FILES.names}, shift - row["shift"]),
                                        x.row["written"], x.change == "grown")
    return keepers


def _kept_rows(t: pa.Table | None) -> dict:
    """{path below the store root: its kept row}, each row's buckets as numpy arrays (a file's entries at 4 GiB of log
    fall in thousands of buckets: made Python lists, most of the survey's time)."""
    if t is None:
        return {}
    lists = {}
    for name in ("bucket", "bucket_first", "bucket_last"):
        col = t.column(name).combine_chunks()
        values, offsets = col.values.to_numpy(zero_copy_only=False), col.offsets.to_numpy()
        lists[name] = [values[a:b] for a, b in zip(offsets[:-1].tolist(), offsets[1:].tolist())]
    rest = {name: t.column(name).to_pylist() for name in t.column_names if name not in lists}
    return {rel: {**{k: v[i] for k, v in rest.items()}, **{k: v[i] for k, v in lists.items()}}
            for i, rel in enumerate(rest["rel"])}


def _rebucketed(row: dict, wider: int) -> dict:
    """A kept row's buckets as this run's routing makes them, its buckets ``wider`` bits wider (the log grew past a
    power of two since: plan.MAX_BUCKETS buckets over it): a bucket is the offset shifted, so each new bucket is the
    hull of the old ones shifted into it (the negative bucket stays one)."""
    if not wider or not len(row["bucket"]):
        return row
    b = np.asarray(row["bucket"], np.int64)
    return {**row, **dict(zip(("bucket", "bucket_first", "bucket_last"), hulls(
        np.where(b >= 0, b >> wider, b), np.asarray(row["bucket_first"], np.int64),
        np.asarray(row["bucket_last"], np.int64))))}


def keep_queue_surveys(state, ctx, keepers: dict) -> None:
    """The survey's consume-queue rows of each broker in ``keepers`` (:func:`resume_queue_surveys`) kept for the next
    run: those of ``file`` queues (their recovery modelled) without an ext address."""
    if not keepers:
        return
    t = ctx.survey.get(CONSUMEQUEUE.files_partial, CQ_FILES)
    for broker, keeper in keepers.items():
        plan = ctx.plans[broker]
        mine = t.filter(pc.and_(pc.equal(t.column("broker"), broker),
                                pc.and_(pc.is_valid(t.column("recovery_valid")),
                                        pc.invert(t.column("ext_addressed")))))
        n = mine.num_rows
        mine = mine.append_column("rel", pa.array(state.rels(broker, mine.column("path").to_pylist()), pa.string())) \
            .append_column("shift", pa.array(np.full(n, plan.shift), pa.int64())) \
            .append_column("last_bucket", pa.array(np.full(n, plan.commitlog_end >> plan.shift), pa.int64()))
        keeper.keep(mine, {}, lambda memos: ((), {}))
