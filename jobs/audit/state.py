"""``audit --state DIR``: what a scheduled audit keeps between runs of the same brokers, and what it finds by
comparing.

A nightly audit sees the same brokers again and again.  With ``--state DIR`` each run keeps, per broker, the
identity of every file it read (its length, where its written bytes end, and the digests of a few blocks of those
bytes) and the broker's verdict.  The next run with the same DIR compares them with what it finds:

* a file whose earlier bytes changed (a kept block's digest differs, its written bytes end earlier than they did,
  it got shorter) was rewritten since the last look: an error finding ``history.rewritten`` names it and the first
  differing block found (append-only files are never rewritten by a broker that runs normally);
* a file that is gone (expired by the broker's ``fileReservedTime``, or deleted by hand) is ``history.disappeared``,
  with the offsets and the messages or units it held;
* files that grew or appeared are counted;
* the verdict is compared with the last one: summary.json's ``brokers[].since_last_run`` and the report say what
  changed (a new cut, more messages lost, a broker that no longer starts, a rewritten file), the changed first.

The kept blocks move: each run verifies the last run's blocks and keeps new ones (the first and the last block of
the written bytes, and :data:`DRAWN` drawn at random among them), so night after night more of each old file is
checked while each run reads a few KB of it.

**Kept parts.**  A task that declares ``kept_by()`` (the file it reads, and everything else its output depends on:
the survey's segment walks, jobs/audit/survey.py) has its output kept in the state, under a key of those and of the
suite's own code (:func:`code_digest`).  The next run gives it back (:class:`Replayed`) instead of running the task
when the file's bytes are the same (its look is ``same``) and the key is one the state holds; every other such task
runs and its output is kept for the next run (:class:`Recorded`).  A file that grew since (the active segment) gives
back the parts whose output depends only on bytes it held then (a task's ``reach``: a segment range's walk and a
largest record twice over).  The scan's range tasks read what the whole store decides (the recovery's cut, the
queues' units, the families' probes) too: each decides itself whether its part holds (jobs/audit/kept.py: it is
offered the part by :meth:`AuditState.offer`).  An index file's check is given back while its file is the same, and
otherwise goes on from the memos of its last part (jobs/audit/kept.py ``KeptFiles``, :meth:`AuditState.offer_files`).

The state's folder is claimed and committed as every output (runtime/commit.py): written in a staging, swapped in
after the run's output is committed (:class:`StateOutput`), so a run that fails or is killed leaves the previous
state whole, and a second run on the same state is refused (exit 2, naming the first).  A missing or damaged state
means an audit without comparison and a warning (the state is written anew); a folder that is not an audit state
(other files, another output of this suite), a state of another version, or one whose broker held another store,
means a warning, an audit without comparison, and the folder left exactly as it is.

Layout: ``DIR/state.json`` (format, version, the run that wrote it, each broker's folder, verdict, run and kept
parts), ``DIR/brokers/<folder>/files.parquet`` (:data:`FILES`, one row per file of the broker) and
``DIR/brokers/<folder>/parts/<key>.arrow`` (a kept task's output: :data:`PART`; a part given back is kept again as a
hard link to the last state's where both are local, runtime/output.py ``out_keep``, and a part is never written
through a file already there).  Brokers of the state that a run does not audit keep their files (not their kept
parts).
"""
from __future__ import annotations

import datetime as dt
import hashlib
import json
import os
import random
import re
from dataclasses import dataclass, field
from pathlib import Path

import pyarrow as pa

from runtime.commit import Output
from store_format import fs
from store_format import layout as L
from store_format.dledger import appended_file as dledger_appended

from .findings import Consequence, Severity, check, finding_rows
from .tasks import Emitter, SpilledFile, ipc_bytes

FORMAT = "rocketmq-forensics audit state"
VERSION = 1
STATE_JSON = "state.json"
FILES_NAME = "files.parquet"
PARTS = "parts"
# a kept task's output: each of its tables as an Arrow IPC stream, by kind (finding, partial, table) and name, and
# each spilled partial as the Parquet file the run writes (kind spilled; its name, its SPILLED row as JSON)
PART = pa.schema([("kind", pa.string()), ("name", pa.string()), ("payload", pa.binary())])
# each payload's codec (Arrow IPC's own, read back by any reader): a part holds what its range emitted, the families'
# rows of every transaction and retry hop among them.  LZ4: most parts are read back every night, and the 4 GiB
# bench's state read back in 0.31 s against 0.90 s as zstd (163 MB against 133 MB on disk)
PART_COMPRESSION = "lz4"
BLOCK = 4096  # a kept block's bytes (fewer for the last block of a file's written bytes)
ZERO_SCAN = 8 << 20  # the bytes read at a time searching a file's zeros from its end
DRAWN = 6  # blocks drawn at random per file and run, besides its first and last

FILES = pa.schema([
    ("path", pa.string()),  # below the store root, "/"-separated
    ("size", pa.int64()),
    ("written", pa.int64()),  # up to and including its last non-zero byte (a preallocated file's data)
    ("block_at", pa.list_(pa.int64())),  # the kept blocks: where, how long, their BLAKE2b-128 digests
    ("block_length", pa.list_(pa.int64())),
    ("block_digest", pa.list_(pa.binary())),
    ("first_offset", pa.int64()),  # what the file held: physical offsets (a segment) or queue offsets (a queue file)
    ("end_offset", pa.int64()),
    ("messages", pa.int64()),  # messages the salvage walk framed (a segment), units (a consume-queue file)
    # an index file's entries region (only appended to, its header and slots rewritten), as the scan's ranges key the
    # entries by their rows (:meth:`AuditState.settled`): where it begins and ends, and its kept blocks, as above
    ("entries_at", pa.int64()),
    ("entries_end", pa.int64()),
    ("entries_block_at", pa.list_(pa.int64())),
    ("entries_block_length", pa.list_(pa.int64())),
    ("entries_block_digest", pa.list_(pa.binary())),
])
_ENTRIES = ("entries_at", "entries_end", "entries_block_at", "entries_block_length", "entries_block_digest")

check("history.rewritten", Severity.ERROR,
      "[{topic}/{queue_id}/]{file} changed since the audit of {previous_run}: {how}[; the first differing block "
      "found is at byte {file_position}]",
      consequence=Consequence.DATA_AT_RISK,
      action="Bytes the broker had written were changed afterwards: a broker never rewrites them while it runs "
             "normally (a crash recovery that overwrote its tail, a restore from an older copy, a damaged disk, or a "
             "hand).  Compare the file with the previous night's copy from the block named, and find who wrote it "
             "(the broker's logs at that time, the host's); the messages in it are audited as they are now.")
check("history.disappeared", Severity.INFO,
      "[{topic}/{queue_id}/]{file} is gone since the audit of {previous_run}[: it held {held}]",
      also=(Severity.WARNING,),
      consequence=Consequence.COSMETIC,
      action="The broker deletes its oldest segments and consume-queue files after `fileReservedTime` (info); a "
             "file gone from the middle of a log or a queue (warning) was deleted by something else: find out what, "
             "and restore it from an earlier copy if its messages are needed.")


# ---------------------------------------------------------------------------------------------------------
# One file, as this run finds it


@dataclass
class Look:
    """A file as this run found it (its :data:`FILES` row) and what changed since the last run's look."""

    row: dict
    change: str  # "new", "same", "grown", "rewritten" (an append-only file), "changed" (one rewritten in place)
    how: str = ""  # for a rewritten file, in words
    differs_at: int | None = None  # the first kept block found to differ
    was_written: int | None = None  # where its written bytes ended at the last run's look
    was: dict | None = None  # its row of the last run


def block_digest(data: bytes) -> bytes:
    return hashlib.blake2b(data, digest_size=16).digest()


def drawn_blocks(start: int, end: int, rng) -> list[tuple[int, int]]:
    """The blocks kept of a file's bytes ``start`` .. ``end`` - 1 (its written bytes, an index file's entries), as
    (where, how long): the file's :data:`BLOCK`-aligned blocks there holding the first and the last byte, and
    :data:`DRAWN` drawn at random (``rng``) where there are more than two (each cut to ``start`` .. ``end``)."""
    if end <= start:
        return []
    first, last = start // BLOCK, (end - 1) // BLOCK
    drawn = {rng.randrange(start, end) // BLOCK for _ in range(DRAWN if last - first > 1 else 0)}
    return [(max(b * BLOCK, start), min((b + 1) * BLOCK, end) - max(b * BLOCK, start))
            for b in sorted({first, last} | drawn)]


def _differs(r: "_Reader", at, lengths, digests) -> int | None:
    """The first of the kept blocks (``at``, ``lengths``, their ``digests``) whose bytes read otherwise, or None."""
    for a, n, digest in sorted(zip(at, lengths, digests)):
        if block_digest(r.read(a, n)) != digest:
            return a
    return None


class _Reader:
    """A file's length and ranged reads, local (``pread``, its holes known) or through pyarrow.fs."""

    def __init__(self, path):
        self.path = path
        if isinstance(path, fs.StorePath):
            self.fd, self.f = None, path.loc.open_input()
            self.size = self.f.size()
        else:
            self.fd, self.f = fs.open_fd(path), None
            self.size = os.fstat(self.fd).st_size

    def read(self, at: int, n: int) -> bytes:
        if n <= 0:
            return b""
        return os.pread(self.fd, n, at) if self.fd is not None else self.f.read_at(n, at)

    def written(self) -> int:
        """Up to and including its last non-zero byte: its data extents searched from the end (holes unread),
        :data:`ZERO_SCAN` bytes at a time (a preallocated file copied without its holes is one pass over its
        zeros)."""
        from store_format.fs.hostile import last_nonzero, search_extents
        from store_format.fs.zero_tails import note_zeros_from

        if self.fd is None:  # read through pyarrow.fs: searched whole
            return last_nonzero([(0, self.size)], lambda a, b: self.read(a, b - a), ZERO_SCAN)[0]
        found = last_nonzero(search_extents(self.fd, self.size), lambda a, b: self.read(a, b - a), ZERO_SCAN)[0]
        note_zeros_from(self.fd, found, self.size)  # the run's walks of it stop there (store_format/fs/zero_tails.py)
        return found

    def close(self) -> None:
        if self.fd is not None:
            os.close(self.fd)
        if self.f is not None:
            self.f.close()


def look(path, rel: str, previous: dict | None, rng: random.Random) -> Look:
    """``path`` (its place below the store root ``rel``) as it is now, against ``previous`` (its row of the last
    run, or None): the last run's blocks verified, new ones kept.  Where an appended file's written bytes end is
    searched for (its zeros from the end); a file rewritten in place counts whole (an index file's zeros are not
    read)."""
    r = _Reader(path)
    try:
        size = r.size
        written = r.written() if _appended(rel) else size
        change, how, differs_at = "new", "", None
        if previous is not None:
            change = "same" if written == previous["written"] else "grown"
            differs_at = _differs(r, previous["block_at"], previous["block_length"], previous["block_digest"])
            if differs_at is not None:
                n = dict(zip(previous["block_at"], previous["block_length"]))[differs_at]
                change, how = "rewritten", f"the {n:,} bytes at {differs_at:,} differ"
            if written < previous["written"]:  # its end zeroed or cut: said first, the block found kept
                change, how = "rewritten", f"its written bytes end at {written:,}, where they ended at " \
                                           f"{previous['written']:,}"
                differs_at = written // BLOCK * BLOCK if differs_at is None else differs_at
            if size < previous["size"]:
                change, how = "rewritten", f"it is {size:,} bytes long, where it was {previous['size']:,}"
        at, lengths = (list(x) for x in zip(*drawn_blocks(0, written, rng))) if written else ([], [])
        digests = [block_digest(r.read(a, n)) for a, n in zip(at, lengths)]
    finally:
        r.close()
    row = {"path": rel, "size": size, "written": written, "block_at": at, "block_length": lengths,
           "block_digest": digests, "first_offset": None, "end_offset": None, "messages": None,
           **dict.fromkeys(_ENTRIES)}
    _held(row)
    return Look(row, change, how, differs_at, previous["written"] if previous is not None else None, previous)


def look_entries(loc, x: Look, hash_slot_num: int, rng: random.Random) -> bool:
    """An index file's entries region (``loc``, its :class:`Look` ``x``, its geometry as the survey found it) against
    the last run's look at it: whether it begins where it did and its kept blocks read as they did, up to where its
    entries then ended, now no further than they end (its header's count, as far as the file holds entries).  Blocks
    of it are kept for the next run in ``x``'s row (:data:`FILES`)."""
    from store_format.indexfile import read_header

    start = L.index_entries_at(hash_slot_num)
    r = _Reader(fs.as_path(loc))
    try:
        size = r.size
        count = read_header(r.read(0, L.INDEX_HEADER_SIZE)).index_count if size >= L.INDEX_HEADER_SIZE else 0
        end = start + max(0, min(count, (size - start) // L.INDEX_ENTRY_SIZE)) * L.INDEX_ENTRY_SIZE
        was = x.was or {}
        same = was.get("entries_at") == start and was.get("entries_end") is not None \
            and was["entries_end"] <= end and _differs(
                r, was.get("entries_block_at") or [], was.get("entries_block_length") or [],
                was.get("entries_block_digest") or []) is None
        blocks = drawn_blocks(start, end, rng)
        x.row.update(entries_at=start, entries_end=end, entries_block_at=[a for a, _ in blocks],
                     entries_block_length=[n for _, n in blocks],
                     entries_block_digest=[block_digest(r.read(a, n)) for a, n in blocks])
    finally:
        r.close()
    return same


_SEGMENT = re.compile(r"commitlog/(\d{20})")
_QUEUE_FILE = re.compile(r"consumequeue/([^/]+)/(-?\d+)/(\d{20})")


def _appended(rel: str) -> bool:
    """A file the broker only ever appends to (store_format.layout.appended_file, store_format.dledger's): any other
    (checkpoint, config, index files, the timer wheel, a database) is rewritten in place as the broker runs, and a
    change to it is counted, never a finding."""
    parts = tuple(rel.split("/"))
    return L.appended_file(parts) or dledger_appended(parts)


def _index_file(rel: str) -> bool:
    return rel.split("/")[0] == "index"


def _expiring(rel: str) -> bool:
    """A file whose going is a finding: an appended one, or an index file (the broker expires those too)."""
    return _appended(rel) or _index_file(rel)


def _held(row: dict) -> None:
    """What a file holds by its name and written bytes: a segment's physical offsets, a consume-queue file's queue
    offsets and units (its messages are the segments table's, :meth:`AuditState.write`)."""
    m = _SEGMENT.fullmatch(row["path"])
    if m:
        row["first_offset"] = int(m.group(1))
        row["end_offset"] = int(m.group(1)) + row["written"]
        return
    m = _QUEUE_FILE.fullmatch(row["path"])
    if m:
        units = -(-row["written"] // L.CQ_STORE_UNIT_SIZE)
        row["first_offset"] = int(m.group(3)) // L.CQ_STORE_UNIT_SIZE
        row["end_offset"] = row["first_offset"] + units
        row["messages"] = units


def _where(broker: str, rel: str) -> dict:
    """A file's position columns, as the other findings name it: a segment by its name (and its base offset), a
    consume-queue file by its name, topic and queue, anything else by its path below the store root."""
    m = _SEGMENT.fullmatch(rel)
    if m:
        return {"broker": broker, "file": m.group(1), "topic": None, "queue_id": None}
    m = _QUEUE_FILE.fullmatch(rel)
    if m:
        return {"broker": broker, "file": m.group(3), "topic": m.group(1), "queue_id": int(m.group(2))}
    return {"broker": broker, "file": rel, "topic": None, "queue_id": None}


# ---------------------------------------------------------------------------------------------------------
# One broker


@dataclass
class BrokerLook:
    """A broker's files as this run found them, against its last state (None: no state of it yet)."""

    name: str
    looks: list[Look]
    previous: dict | None  # its entry of the last state.json
    gone: list[dict] = field(default_factory=list)  # the last run's rows of files that are gone

    def count(self, change: str) -> int:
        return sum(1 for x in self.looks if x.change == change)

    def files(self) -> dict:
        return {"new": self.count("new"), "grown": self.count("grown"), "same": self.count("same"),
                "changed": self.count("changed"), "rewritten": self.count("rewritten"),
                "disappeared": len(self.gone)}

    def findings(self) -> list[pa.Table]:
        if self.previous is None:
            return []
        run = self.previous.get("run_id", "?")
        rewritten = [{**_where(self.name, x.row["path"]), "file_position": x.differs_at,
                      "physical_offset": x.row["first_offset"] + x.differs_at
                      if x.differs_at is not None and _SEGMENT.fullmatch(x.row["path"]) else None,
                      "values": {"previous_run": run, "how": x.how},
                      "details": {"previous_run_id": run, "how": x.how, "size": x.row["size"],
                                  "written": x.row["written"]}}
                     for x in self.looks if x.change == "rewritten"]
        gone = [{**_where(self.name, g["path"]), "severity": _gone_severity(g, self),
                 "physical_offset": g["first_offset"] if _SEGMENT.fullmatch(g["path"]) else None,
                 "queue_offset": g["first_offset"] if _QUEUE_FILE.fullmatch(g["path"]) else None,
                 "values": {"previous_run": run, "held": _held_words(g)},
                 "details": {"previous_run_id": run, "size": g["size"], "written": g["written"],
                             "first_offset": g["first_offset"], "end_offset": g["end_offset"],
                             "messages": g["messages"]}}
                for g in self.gone if _expiring(g["path"])]
        return [finding_rows("history.rewritten", rewritten), finding_rows("history.disappeared", gone)]


def _held_words(g: dict) -> str | None:
    if g["first_offset"] is None:
        return None
    if _SEGMENT.fullmatch(g["path"]):
        said = f"physical offsets {g['first_offset']:,} to {g['end_offset']:,}"
        return said + (f", {g['messages']:,} messages" if g["messages"] is not None else "")
    return f"queue offsets {g['first_offset']:,} to {g['end_offset']:,}, {g['messages']:,} units"


def _gone_severity(g: dict, b: BrokerLook) -> str:
    """Info when the broker's expiry could have deleted it (older than every file of its log or queue that is still
    there), a warning when a later one of its folder is still there and an earlier one is not gone with it."""
    folder = g["path"].rsplit("/", 1)[0]
    here = [x.row for x in b.looks if x.row["path"].rsplit("/", 1)[0] == folder]
    if g["first_offset"] is None or not here:
        return "info"
    kept_below = any(r["first_offset"] is not None and r["first_offset"] < g["first_offset"] for r in here)
    return "warning" if kept_below else "info"


def look_broker(name: str, root, files: list, previous: dict | None, rows: pa.Table | None,
                rng: random.Random) -> BrokerLook:
    """Every file of the broker (``files``, below ``root``) looked at against its last run's ``rows``."""
    before = {r["path"]: r for r in rows.to_pylist()} if rows is not None else {}
    top = len(root.parts)
    looks = []
    for p in files:
        rel = "/".join(p.parts[top:]) or p.name
        try:
            found = look(p, rel, before.get(rel), rng)
        except (OSError, fs.UnreadableError):  # gone or unreadable now: the audit's own checks say so
            continue
        if found.change == "rewritten" and not _appended(rel):
            found.change = "changed"
        looks.append(found)
    seen = {x.row["path"] for x in looks}
    return BrokerLook(name, looks, previous, [r for p, r in sorted(before.items()) if p not in seen])


def _another_store(b: BrokerLook) -> str | None:
    """Why the last state of broker ``b`` is of another store, or None: every append-only file it shares a name
    with differs, none holding what it held (one store rewritten here and there keeps the others' bytes)."""
    shared = [x for x in b.looks if _appended(x.row["path"]) and x.change != "new"]
    if shared and all(x.change == "rewritten" for x in shared):
        return (f"none of the {len(shared):,} log and queue file(s) it shares with the state's broker {b.name} holds "
                f"the bytes it held ({shared[0].row['path']}: {shared[0].how})")
    return None


# ---------------------------------------------------------------------------------------------------------
# Kept parts


_CODE: list[str] = []


def code_digest() -> str:
    """A digest of the suite's own sources (every module of its packages, from the folders or the zip they are
    imported from): a part kept by another version of the code is never given back."""
    if _CODE:
        return _CODE[0]
    import importlib
    import zipfile

    h = hashlib.sha256(f"{FORMAT} {VERSION}".encode())
    for package in ("store_format", "decoding", "datasources", "runtime", "jobs"):
        for base in importlib.import_module(package).__spec__.submodule_search_locations or ():
            if os.path.isdir(base):
                for p in sorted(Path(base).rglob("*.py")):
                    h.update(p.relative_to(base).as_posix().encode() + b"\0" + p.read_bytes())
                continue
            archive, _, inner = base.partition(".zip")  # imported from a zip (--py-files): its sources
            with zipfile.ZipFile(archive + ".zip") as z:
                inner = inner.strip("/\\")
                for name in sorted(n for n in z.namelist() if n.startswith(inner + "/") and n.endswith(".py")):
                    h.update(name[len(inner) + 1:].encode() + b"\0" + z.read(name))
    _CODE.append(h.hexdigest())
    return _CODE[0]


def write_part(loc: fs.Location, emitted: Emitter, reach: int | str | None = None, key: str | None = None,
               memos: dict | None = None) -> None:
    """What a task emitted, as one part file at ``loc``; ``reach``: how far into its file the output depends on
    the bytes (None: to its end; a JSON object: each file's, for a task of several, jobs/audit/kept.py); ``key`` and
    ``memos``: what a scan range's part is given back under (jobs/audit/kept.py)."""
    from runtime.output import out_remove_quietly, out_write

    rows = [("reach", "" if reach is None else str(reach), b"")]
    if key is not None:
        rows.append(("key", key, b""))
    for name, memo in sorted((memos or {}).items()):
        rows.append(("memo", name, ipc_bytes(pa.table({"memo": memo}), PART_COMPRESSION)))
    if emitted.findings:
        rows.append(("finding", "", ipc_bytes(pa.concat_tables(emitted.findings), PART_COMPRESSION)))
    for kind, by_name in (("partial", emitted.partials), ("table", emitted.tables)):
        for name, tables in by_name.items():
            rows.append((kind, name, ipc_bytes(pa.concat_tables(tables), PART_COMPRESSION)))
    emitted.pack_spilled()  # as the run writes them, kept as they are: given back, written as they are
    for f in emitted.spilled_files:
        rows.append(("spilled", json.dumps({"table": f.name, "rows": f.rows, "first_offset": f.first_offset,
                                            "last_offset": f.last_offset, "broker": f.broker}), f.data))
    out_remove_quietly(loc)  # written anew, never through a file there: one linked to the last state's part
    out_write(loc, ipc_bytes(pa.table({"kind": [r[0] for r in rows], "name": [r[1] for r in rows],
                                  "payload": [r[2] for r in rows]}, schema=PART)))


def read_part(source: "fs.Location | bytes", out: Emitter) -> dict:
    """A part file's tables (at ``source``, or its bytes) emitted to ``out`` as the task that made it emitted them;
    what it was kept under: {"reach": its reach row, "key": its key or None, "memos": {family: array}}."""
    if not isinstance(source, bytes):
        with source.open_input() as f:
            source = f.read()
    part = pa.ipc.open_stream(source).read_all()
    head = {"reach": None, "key": None, "memos": {}}
    for kind, name, payload in zip(*(part.column(c).to_pylist() for c in PART.names)):
        if kind in ("reach", "key"):
            head[kind] = name
            continue
        if kind == "spilled":
            row = json.loads(name)
            out.spill_file(SpilledFile(row["table"], payload, row["rows"], row["first_offset"], row["last_offset"],
                                       row["broker"]))
            continue
        t = pa.ipc.open_stream(payload).read_all()
        if kind == "memo":
            head["memos"][name] = t.column("memo").to_numpy()
            continue
        {"finding": lambda n, x: out.finding(x), "partial": out.partial, "table": out.table}[kind](name, t)
    return head


#: a task's kind (tasks.run_one's timing rows) when its output was given back from the state
GIVEN_BACK = "kept by the last run"


@dataclass
class Recorded:
    """A task run as it is, its output kept at ``part`` (in the state's staging) for the next run."""

    task: object
    part: fs.Location

    @property
    def broker(self) -> str:
        return self.task.broker

    @property
    def kind(self) -> str:  # --profile's name for it: the task's own
        return type(self.task).__name__

    def describe(self) -> str:
        return self.task.describe()

    def cost(self) -> int:
        return self.task.cost()

    def run(self, out: Emitter) -> None:
        mine = Emitter()
        self.task.run(mine)
        reach = self.task.reach(mine) if hasattr(self.task, "reach") else None
        write_part(self.part, mine, reach)  # only a task that ran to its end is kept
        out.merge(mine)


@dataclass
class Replayed:
    """A task's output as the last run kept it (``part``, in the committed state): what the task would emit now,
    its file's bytes being the same.  A part that cannot be read (a damaged state) is no finding: the task runs."""

    task: object
    part: fs.Location
    kind = GIVEN_BACK

    @property
    def broker(self) -> str:
        return self.task.broker

    def describe(self) -> str:
        return f"{self.task.describe()} (kept by the last run)"

    def cost(self) -> int:
        return 1

    def run(self, out: Emitter) -> None:
        mine = Emitter()
        try:
            read_part(self.part, mine)
        except Exception:  # noqa: BLE001 - a damaged part: what the task itself emits instead
            mine = Emitter()
            self.task.run(mine)
        out.merge(mine)


# ---------------------------------------------------------------------------------------------------------
# The folder


class StateOutput(Output):
    """The state's folder, committed after the run's output (whose commit is the run's commit point): a run whose
    output is not committed never moves the state on, so what it found is found again by the next run."""

    order = 20


def _folder_of(name: str) -> str:
    """A broker's folder below ``brokers/``: its name made safe, and a digest of it (two names never share one)."""
    safe = re.sub(r"[^A-Za-z0-9_.-]", "_", name)[:64]
    return f"{safe}-{hashlib.sha256(name.encode()).hexdigest()[:8]}"


class AuditState:
    """The state a run reads (:attr:`previous`: the last ``state.json``, or None) and writes (:attr:`output`: the
    claimed folder's staging, or None when the folder is left as it is); :attr:`note`, why it is not used."""

    def __init__(self, loc: fs.Location, output: Output | None, previous: dict | None, note: str | None):
        self.loc, self.output, self.previous, self.note = loc, output, previous, note
        self.shown = fs.as_typed(loc)
        self.brokers: dict[str, BrokerLook] = {}
        self.roots: dict[str, tuple] = {}  # broker -> its store root's parts
        self.kept: dict[str, set[str]] = {}  # broker -> keys of the parts this run gives back (copied at write)
        self.recorded: dict[str, set[str]] = {}  # broker -> keys of the parts its tasks keep this run
        self.given_back: dict[str, int] = {}  # stage -> its tasks this run did not run: their kept parts given back
        self.rng = random.Random(os.urandom(16))  # the blocks kept for the next run, drawn

    @classmethod
    def open(cls, run, path: fs.Location, inputs=()) -> "AuditState":
        """``path`` (as given) claimed for ``run`` and its state read; a folder that is not an audit state, or a
        state of another version, is neither claimed nor used."""
        opened = run.__dict__.setdefault("_audit_states", {})  # the job's prepare opened it: the run gets it back
        key = fs.as_typed(path)
        if key not in opened:
            opened[key] = cls._open(run, path, inputs)
        return opened[key]

    @classmethod
    def _open(cls, run, path: fs.Location, inputs) -> "AuditState":
        from runtime.commit import COMMITTED, output_state

        loc, shown = fs.resolve(path), fs.as_typed(path)
        kind = output_state(loc)
        output = None
        if kind == "uncommitted":  # a commit cut short: the claim finishes it or puts the previous state back
            output = run.find(path) or run.add(StateOutput(run, path, overwrite=True, inputs=inputs, what="state"))
            kind = output_state(loc)
        if kind in ("file", "foreign"):
            return cls._unused(loc, f"{shown} is not an audit state (it holds files this suite did not write)", output)
        data, why = None, None
        if kind == COMMITTED:
            data, why = _read_state(loc)
            if why is not None and any(i.base_name not in (STATE_JSON, "brokers", fs.OUTPUT_MARKER)
                                       for i in loc.list()):
                return cls._unused(loc, f"{shown} is not an audit state ({why}; it holds other files)", output)
            if data is not None and data.get("version") != VERSION:
                return cls._unused(loc, f"{shown} is a state of another version of the audit (version "
                                         f"{data.get('version')!r}; this one reads version {VERSION})", output)
        output = output or run.find(path) or run.add(StateOutput(run, path, overwrite=True, inputs=inputs,
                                                                  what="state"))
        if data is None:
            _warn(f"{why or f'no state in {shown} yet'}: nothing is compared this run; the state is written for the "
                  "next one")
        note = None if data is not None else why or "no state yet"
        later = _later_than_now(data)
        if later:  # nothing is decided by the clock (files are compared by their bytes): said, and the run goes on
            note = f"the state was written at {later}, after this run started: a clock gone backwards"
            _warn(f"{note}; the files are compared by their bytes all the same")
        return cls(loc, output, data, note)

    @classmethod
    def _unused(cls, loc: fs.Location, why: str, claimed: Output | None = None) -> "AuditState":
        note = f"{why}: the audit runs without comparing, and the folder is left as it is (give --state a folder " \
               "of its own)"
        _warn(note)
        if claimed is not None:
            claimed.abandon()  # nothing staged, the claim released
        return cls(loc, None, None, note)

    # ---- comparing --------------------------------------------------------------------------------------
    def compare(self, stores, files: list) -> None:
        """Each store's files (``files``: the run's listing) against the state's.  A broker whose state is of
        another store stops the comparison: the state is then left as it is."""
        from runtime.progress import say as progress

        if self.output is None:
            return
        roots = {tuple(s.root.parts): s for s in stores}
        depths = sorted({len(k) for k in roots}, reverse=True)
        mine: dict[str, list] = {s.name: [] for s in stores}
        for p in files:  # each file to the deepest store root above it
            parts = tuple(p.parts)
            for d in depths:
                s = roots.get(parts[:d])
                if s is not None:
                    mine[s.name].append(p)
                    break
        for s in stores:
            self.roots[s.name] = tuple(s.root.parts)
            entry = (self.previous or {}).get("brokers", {}).get(s.name)
            rows, why = self._rows(entry) if entry is not None else (None, None)
            if why is not None:
                _warn(f"the state of {s.name}: {why}: its files are not compared this run")
                entry = None
            b = look_broker(s.name, s.root, mine[s.name], entry, rows, self.rng)
            other = _another_store(b) if entry is not None else None
            if other is not None:
                self.note = (f"the state's broker {s.name} is another store: {other}: the audit runs without "
                             "comparing, and the state is left as it is (give --state a folder of its own for "
                             "this store)")
                _warn(self.note)
                self.brokers = {}
                self.output.abandon()
                self.output = None
                return
            self.brokers[s.name] = b
        for b in self.brokers.values():
            f = b.files()
            if b.previous is not None:
                progress(f"state: {b.name} since {b.previous.get('run_id')}: {f['same']:,} file(s) the same, "
                         f"{f['grown']:,} grown, {f['new']:,} new, {f['changed']:,} changed in place, "
                         f"{f['rewritten']:,} rewritten, {f['disappeared']:,} gone")

    def _rows(self, entry: dict) -> tuple[pa.Table | None, str | None]:
        import pyarrow.parquet as pq

        loc = self.loc.child("brokers").child(str(entry.get("folder", ""))).child(FILES_NAME)
        if not re.fullmatch(r"[A-Za-z0-9_-][A-Za-z0-9_.-]*", str(entry.get("folder", ""))):  # no "..", no "/"
            return None, f"its folder name {entry.get('folder')!r} is not one this suite writes"
        try:
            with loc.open_input() as f:
                t = pq.read_table(f)
            for name in [n for n in _ENTRIES if n not in t.column_names]:  # a state from before they were kept
                t = t.append_column(name, pa.nulls(t.num_rows, FILES.field(name).type))
            return t.select(FILES.names).cast(FILES), None
        except (OSError, fs.UnreadableError, KeyError, ValueError, pa.ArrowException) as e:
            return None, f"{loc.as_typed} cannot be read ({fs.error_line(e)})"

    def findings(self) -> list[pa.Table]:
        return [t for b in self.brokers.values() for t in b.findings()]

    # ---- kept parts -------------------------------------------------------------------------------------
    def keep(self, tasks: list, stage: str) -> list:
        """``tasks`` with each one that declares ``kept_by()`` given back from the state (:class:`Replayed`) when
        the state holds its part and its file is the same, or grew past the bytes its part depends on (its
        ``reach``); else run and kept (:class:`Recorded`)."""
        if self.output is None:
            return tasks
        out, given = [], 0
        held = {name: _parts_of(b.previous) for name, b in self.brokers.items()}
        looks = {name: {x.row["path"]: x for x in b.looks} for name, b in self.brokers.items()}
        for task in tasks:
            b = self.brokers.get(task.broker)
            if b is None or not hasattr(task, "kept_by"):
                out.append(task)
                continue
            loc, facts = task.kept_by()
            rel = self._rel(b.name, loc)
            key = hashlib.sha256(repr((code_digest(), rel, facts)).encode()).hexdigest()[:32]
            folder = self.loc.child("brokers").child(_folder_of(b.name)).child(PARTS)
            look = looks[b.name].get(rel)
            reach = held[b.name].get(key, -1)  # -1: not held
            if _gives_back(look, reach) and folder.child(f"{key}.arrow").exists():
                self.kept.setdefault(b.name, set()).add(key)
                out.append(Replayed(task, folder.child(f"{key}.arrow")))
                given += 1
            else:
                self.recorded.setdefault(b.name, set()).add(key)
                out.append(Recorded(task, self.output.staging.child("brokers").child(_folder_of(b.name))
                                    .child(PARTS).child(f"{key}.arrow")))
        self.given_back[stage] = given
        if given:
            from runtime.progress import say

            say(f"state: {given:,} {stage} task(s) of {len(tasks):,} given back from the last run (the bytes they "
                "read the same)")
        return out

    def _rel(self, broker: str, loc) -> str:
        """A file's path below its broker's store root, "/"-separated (how the state names it)."""
        return "/".join(fs.as_path(loc).parts[len(self.roots[broker]):])

    def compared(self, broker: str) -> bool:
        """Whether this run compares ``broker``'s files and keeps its parts."""
        return self.output is not None and broker in self.brokers

    def rels(self, broker: str, locs) -> tuple:
        """Each file's path below the broker's store root (how the state names it)."""
        return tuple(self._rel(broker, loc) for loc in locs)

    def settled(self, broker: str, routed: list) -> tuple[dict, frozenset]:
        """Of ``routed`` (the broker's routed files: jobs/audit/routes.py ``RoutedFile``), those whose entries the
        broker only appends to, by path, with what names the file in a range's key: its path below the store root
        (:meth:`rels`), and for an index file (its header and slots rewritten in place) its geometry and first
        timestamp, which its entries' views read too.  And of those, the paths of the ones this run found as the last
        run did, or grown past its bytes: a file only appended to by its look, an index file by its entries region's
        (:func:`look_entries`)."""
        looks = {x.row["path"]: x for x in self.brokers[broker].looks}
        keyed, settled = {}, set()
        for f, rel in zip(routed, self.rels(broker, [f.loc for f in routed])):
            x = looks.get(rel)
            if _appended(rel):
                keyed[f.loc.path] = rel
                if x is not None and x.change in ("same", "grown"):
                    settled.add(f.loc.path)
            elif _index_file(rel) and "hash_slot_num" in f.params:
                keyed[f.loc.path] = (rel, f.params["hash_slot_num"], f.params.get("begin_timestamp"))
                try:
                    if x is not None and look_entries(f.loc, x, f.params["hash_slot_num"], self.rng):
                        settled.add(f.loc.path)
                except (OSError, fs.UnreadableError):  # gone or unreadable now: its entries shown, not named
                    del keyed[f.loc.path]
        return keyed, frozenset(settled)

    def offer(self, broker: str, key: str, rels: tuple) -> tuple:
        """For a task of several files (``rels``, :meth:`rels`) that decides itself whether to give its part back
        (a scan range's, jobs/audit/kept.py): (the last run's part under ``key`` when every file is the same or grew
        past its reach there, else None; where this run keeps it).  The part is kept again either way."""
        parts, looks = self._held_of(broker)
        was = parts.get(key, -1)
        folder = _folder_of(broker)
        kept = None
        if isinstance(was, dict) and all(_gives_back(looks.get(rel), was.get(rel, -1)) for rel in set(rels)):
            kept = self.loc.child("brokers").child(folder).child(PARTS).child(f"{key}.arrow")
        self.recorded.setdefault(broker, set()).add(key)
        return kept, self.output.staging.child("brokers").child(folder).child(PARTS).child(f"{key}.arrow")

    def offer_files(self, broker: str, key: str, rels: tuple) -> tuple:
        """For a task that reads whole files (``rels``) and goes on from its last run's part (an index file's
        check, jobs/audit/kept.py :class:`KeptFiles`): (the last run's part under ``key``, or None; whether every
        file is as the last run found it; where this run keeps its part)."""
        parts, looks = self._held_of(broker)
        folder = _folder_of(broker)
        kept = self.loc.child("brokers").child(folder).child(PARTS).child(f"{key}.arrow") if key in parts else None
        same = all(looks.get(rel) is not None and looks[rel].change == "same" for rel in rels)
        self.recorded.setdefault(broker, set()).add(key)
        return kept, same, self.output.staging.child("brokers").child(folder).child(PARTS).child(f"{key}.arrow")

    def looks(self, broker: str) -> dict:
        """This run's looks at the broker's files (:class:`Look`), by their path below the store root."""
        return self._held_of(broker)[1]

    def allows(self, broker: str, reaches: dict) -> bool:
        """Whether each file (by its path below the store root) is as the last run found it, or grew past its reach
        in ``reaches`` (what a part kept on the driver read of it, jobs/audit/kept.py :class:`KeptRows`)."""
        _, looks = self._held_of(broker)
        return all(_gives_back(looks.get(rel), reach) for rel, reach in reaches.items())

    def _held_of(self, broker: str) -> tuple[dict, dict]:
        """The broker's kept parts in the last state (:func:`_parts_of`) and this run's looks by path: once per
        broker, not per task."""
        held = self.__dict__.setdefault("_held", {})
        if broker not in held:
            b = self.brokers[broker]
            held[broker] = (_parts_of(b.previous), {x.row["path"]: x for x in b.looks})
        return held[broker]

    def count_given_back(self, stage: str, outputs) -> None:
        """The tasks of ``stage`` that gave their kept part back (decided in the tasks: their timing rows say)."""
        from .tasks import TIMING

        if self.output is None:
            return
        kinds = outputs.get("_timing", TIMING).column("kind").to_pylist()
        given = self.given_back[stage] = kinds.count(GIVEN_BACK)
        if given:
            from runtime.progress import say

            say(f"state: {given:,} {stage} task(s) of {len(kinds):,} given back from the last run (what they read "
                "the same)")

    # ---- what the summary says --------------------------------------------------------------------------
    def since_last_run(self, summary: dict) -> None:
        """Each broker's ``since_last_run`` in ``summary`` (summary.json's): the last run compared with, the files'
        changes and the verdict's, in words; ``changed`` when the verdict moved or a file was rewritten."""
        summary["state"] = {"path": self.shown, "used": self.output is not None and self.previous is not None,
                            "note": self.note,
                            "tasks_given_back": {stage: self.given_back.get(stage, 0) for stage in ("survey", "scan")}}
        for broker in summary["brokers"]:
            b = self.brokers.get(broker["name"])
            if b is None:
                continue
            was = b.previous or {}
            same_checks = was.get("checks") in (None, summary.get("checks"))  # a narrower --checks finds less
            changes = verdict_changes(was.get("verdict"), broker["verdict"]) \
                if b.previous is not None and same_checks else []
            files = b.files()
            if files["rewritten"]:
                changes.append(f"{files['rewritten']:,} file(s) rewritten since the last run: "
                               + ", ".join(x.row["path"] for x in b.looks if x.change == "rewritten")[:300])
            broker["since_last_run"] = {
                "previous_run_id": was.get("run_id"), "previous_run_time": was.get("run_time"),
                "changed": bool(changes), "changes": changes, "files": files}

    # ---- writing ----------------------------------------------------------------------------------------
    def write(self, summary: dict, segments: pa.Table | None) -> None:
        """This run's state into the claimed folder's staging: each audited broker's files (a segment's messages
        from the run's ``segments`` table) and verdict; the state's other brokers kept as they were."""
        if self.output is None:
            return
        from runtime.output import out_join, out_keep, out_write, write_parquet_file

        messages = {}
        if segments is not None and segments.num_rows:
            for b, seg, n in zip(*(segments.column(c).to_pylist() for c in ("broker", "segment", "messages"))):
                messages[(b, f"commitlog/{seg}")] = n
        staging = self.output.staging
        brokers = dict((self.previous or {}).get("brokers", {}))
        for broker in summary["brokers"]:
            b = self.brokers.get(broker["name"])
            if b is None:
                continue
            folder = _folder_of(b.name)
            rows = [x.row for x in b.looks]
            for r in rows:
                if _SEGMENT.fullmatch(r["path"]):
                    r["messages"] = messages.get((b.name, r["path"]))
            write_parquet_file(pa.Table.from_pylist(rows, schema=FILES), out_join(staging, "brokers", folder,
                                                                                  FILES_NAME))
            parts = self.loc.child("brokers").child(folder).child(PARTS)
            for key in sorted(self.kept.get(b.name, ())):  # given back: kept again for the next run
                try:
                    out_keep(parts.child(f"{key}.arrow"), out_join(staging, "brokers", folder, PARTS, f"{key}.arrow"))
                except (OSError, fs.UnreadableError):  # gone meanwhile: the next run makes it again
                    self.kept[b.name].discard(key)
            made = staging.child("brokers").child(folder).child(PARTS)
            was = _parts_of(b.previous)
            kept = {k: was.get(k) for k in sorted(self.kept.get(b.name, ()))}
            for k in sorted(self.recorded.get(b.name, ())):
                reach = _part_reach(made.child(f"{k}.arrow"))
                if reach != -1:  # a task that failed kept nothing
                    kept[k] = reach
            brokers[b.name] = {"folder": folder, "root": broker["path"], "run_id": summary["run_id"],
                               "run_time": summary["run_time"], "checks": summary.get("checks"),
                               "verdict": _kept_verdict(broker["verdict"]), "parts": kept}
        for name, entry in list(brokers.items()):  # the state's brokers this run did not audit: kept as they were
            if name in self.brokers:
                continue
            rows, _ = self._rows(entry)
            if rows is None:  # unreadable: dropped (its broker's next audit starts its state anew)
                del brokers[name]
                continue
            write_parquet_file(rows, out_join(staging, "brokers", entry["folder"], FILES_NAME))
            brokers[name] = {**entry, "parts": {}}  # its kept parts are not carried: its next audit makes them
        out_write(out_join(staging, STATE_JSON), json.dumps({
            "format": FORMAT, "version": VERSION, "run_id": summary["run_id"], "run_time": summary["run_time"],
            "written": dt.datetime.now(dt.timezone.utc).isoformat(), "brokers": brokers}, indent=2, default=str))
        self.output.expect(STATE_JSON)


def check_apart_from(path: fs.Location, others: list[fs.Location]) -> None:
    """Refuse a state that is, or lies inside or around, another folder the run writes (``--out``, ``--history``),
    decided on the paths as the OS resolves them (neither need exist yet)."""
    from runtime.apart import OutputError

    def spelled(p: fs.Location) -> str:
        loc = fs.resolve(p)
        return fs.real(loc.path) if loc.local_path is not None else loc.uri()
    mine = spelled(path).rstrip("/")
    for other in others:
        theirs = spelled(other).rstrip("/")
        if mine == theirs or mine.startswith(theirs + "/") or theirs.startswith(mine + "/"):
            raise OutputError(f"state {fs.as_typed(path)} overlaps {fs.as_typed(other)}, which the run also "
                              "writes: give --state a folder of its own")


def _reach_of(v) -> int | None:
    return v if isinstance(v, int) and not isinstance(v, bool) else None


def _parts_of(entry: dict | None) -> dict:
    """A broker's kept parts in the last state: key -> how far into its file the part depends on the bytes (None:
    to its end), or for a task of several files (a scan range's, jobs/audit/kept.py) each file's, by its path."""
    parts = (entry or {}).get("parts")
    if not isinstance(parts, dict):
        return {}
    return {str(k): {str(f): _reach_of(r) for f, r in v.items()} if isinstance(v, dict) else _reach_of(v)
            for k, v in parts.items()}


def _gives_back(look: "Look | None", reach) -> bool:
    """Whether a part depending on its file's bytes up to ``reach`` (None: to its end; -1: no part) holds for the
    file as this run found it: the same, or grown past the reach."""
    return look is not None and reach != -1 and (look.change == "same" or look.change == "grown" and reach is not None
                                                 and reach <= look.was_written)


def _part_reach(loc: fs.Location) -> "int | dict | None":
    """A part file's reach (None: to the file's end; a dict: each file's), -1 when there is no such part."""
    if not loc.exists():
        return -1
    with loc.open_input() as f:
        part = pa.ipc.open_stream(f.read()).read_all()
    found = [n for k, n in zip(part.column("kind").to_pylist(), part.column("name").to_pylist()) if k == "reach"]
    if found and found[0].startswith("{"):
        return json.loads(found[0])
    return int(found[0]) if found and found[0] else None


def _later_than_now(data: dict | None) -> str | None:
    """The state's run time when it lies after now (a clock gone backwards, here or where it was written)."""
    try:
        when = dt.datetime.fromisoformat(str((data or {}).get("run_time")))
    except ValueError:
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=dt.timezone.utc)
    return when.isoformat() if when > dt.datetime.now(dt.timezone.utc) else None


def _warn(message: str) -> None:
    """A line on stderr, with --quiet too: the run goes on, but not as the user asked."""
    import sys

    print(f"[audit] warning: --state: {message}", file=sys.stderr, flush=True)


def _read_state(loc) -> tuple[dict | None, str | None]:
    """The folder's ``state.json``, or why there is none to use."""
    try:
        with loc.child(STATE_JSON).open_input() as f:
            data = json.loads(f.read(64 << 20))
    except (OSError, fs.UnreadableError) as e:
        return None, f"{loc.child(STATE_JSON).as_typed} cannot be read ({fs.error_line(e)})"
    except ValueError as e:
        return None, f"{loc.child(STATE_JSON).as_typed} is damaged ({e})"
    if not isinstance(data, dict) or data.get("format") != FORMAT or not isinstance(data.get("brokers"), dict):
        return None, f"{loc.child(STATE_JSON).as_typed} is not an audit state's"
    return data, None


_VERDICT_KEPT = ("level", "banner", "will_start", "cut", "lost", "kept_damaged", "to_resend")


def _kept_verdict(v: dict) -> dict:
    return {k: v.get(k) for k in _VERDICT_KEPT}


def _lost(v: dict) -> int:
    lost = v.get("lost") or {}
    return sum(int(lost.get(k) or 0) for k in ("damaged", "destroyed", "dropped", "unindexed", "undispatched"))


def verdict_changes(was: dict | None, now: dict) -> list[str]:
    """What moved between the last run's verdict and this one's, in words (empty: nothing)."""
    if not was:
        return []
    said = []
    if was.get("will_start") is not False and now.get("will_start") is False:
        said.append("the broker no longer starts")
    elif was.get("will_start") is False and now.get("will_start") is not False:
        said.append("the broker starts again")
    cut0, cut1 = was.get("cut"), now.get("cut")

    def at(c):
        return f"segment {c.get('segment')} position {c.get('file_position'):,}" \
            if c.get("file_position") is not None else f"offset {c.get('physical_offset')}"
    if cut1 and not cut0:
        said.append(f"a new cut: recovery now cuts the log at {at(cut1)}")
    elif cut0 and not cut1:
        said.append("no cut any more")
    elif cut0 and cut1 and cut0.get("physical_offset") != cut1.get("physical_offset"):
        said.append(f"the cut moved from {at(cut0)} to {at(cut1)}")
    a, b = _lost(was), _lost(now)
    if b > a:
        said.append(f"more messages lost: {a:,} -> {b:,}")
    if (now.get("to_resend") or 0) > (was.get("to_resend") or 0):
        said.append(f"more messages to re-send: {was.get('to_resend') or 0:,} -> {now.get('to_resend'):,}")
    if was.get("level") != now.get("level"):
        said.insert(0, f"verdict {was.get('banner') or was.get('level')} -> {now.get('banner') or now.get('level')}")
    return said
