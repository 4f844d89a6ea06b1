"""The DLedger commit log (``enableDLegerCommitLog=true``): entries, index units, checkpoint and term, DLedger's
own checks and its recovery, read-only.

Byte layouts and behaviour: docs/store-format-dledger.md (DLedger 0.3.1.2 as RocketMQ 5.3.3 pins it), with the
upstream file for each fact.  In brief, under ``<root>/dledger-<selfId>/``::

    data/<20 digits>    entries: magic(4)=1 size(4) index(8) term(8) pos(8) channel(4) chainCrc(4) bodyCrc(4)
                        bodySize(4), then the body (one CommitLog record); a blank magic(4)=-1 size(4) fills a
                        file's end; size 0 ends the written part
    index/<20 digits>   32-byte units at index x 32: magic(4) pos(8) size(4) index(8) term(8)
    checkpoint          committedIndex=N / endIndex=N (Java properties; .bak is never read back)
    currterm            currTerm=N / voteLeader=<id>

RocketMQ's physical offset of the record inside an entry is the entry's position + 48 (:data:`BODY_OFFSET`).
"""
from __future__ import annotations

import re
import struct
import zlib
from contextlib import ExitStack
from dataclasses import dataclass, field, replace
from functools import cached_property

import numpy as np

from . import fs
from .brokerconf import parse_properties
from .errors import StoreFormatError
from .rolled import RolledFile, list_folder, open_bytes

MAGIC = 1  # DLedgerMmapFileStore.MAGIC_1 (= CURRENT_MAGIC)
BLANK_MAGIC = -1  # MmapFileList.BLANK_MAGIC_CODE
MIN_BLANK_LEN = 8  # MmapFileList.MIN_BLANK_LEN: a blank's magic and size
HEADER_SIZE = 44  # DLedgerEntry.HEADER_SIZE: the header without bodySize; an entry must be larger
BODY_OFFSET = 48  # DLedgerEntry.BODY_OFFSET: where the body (the CommitLog record) starts
INDEX_UNIT_SIZE = 32  # DLedgerMmapFileStore.INDEX_UNIT_SIZE
DEFAULT_INDEX_FILE_SIZE = INDEX_UNIT_SIZE * 5 * 1024 * 1024  # DLedgerConfig.mappedFileSizeForEntryIndex
HOME_PREFIX = "dledger-"  # DLedgerConfig.getDefaultPath: <storeBaseDir>/dledger-<selfId>
CHECKPOINT_FILE = "checkpoint"  # DLedgerMmapFileStore.CHECK_POINT_FILE
TERM_FILE = "currterm"  # MemberState.TERM_PERSIST_FILE


def appended_file(parts: tuple[str, ...]) -> bool:
    """Whether the file at ``parts`` below a store root is one of DLedger's entry or index files (MmapFileList:
    only ever appended to, a tail truncated only by DLedger's own recovery)."""
    return len(parts) == 3 and parts[0].startswith(HOME_PREFIX) and parts[1] in ("data", "index") \
        and len(parts[2]) == 20 and parts[2].isdigit()


ENTRY_HEADER = struct.Struct(">iiqqqiiii")  # magic size index term pos channel chainCrc bodyCrc bodySize
_INDEX_UNIT = struct.Struct(">iqiqq")  # magic pos size index term
INT_PAIR = struct.Struct(">ii")
_JAVA_LONG = re.compile(r"[+-]?[0-9]+")

# the named checks of an entry (Entry.problems); DLedger's own recovery applies the first six
CHECK_MAGIC = "dledger.magic"  # magic is neither 1 nor the blank's -1
CHECK_SIZE = "dledger.size"  # size != 48 + bodySize, size <= 44, or the entry runs past its file
CHECK_POSITION = "dledger.position"  # the pos field is not where the entry lies
CHECK_INDEX = "dledger.index"  # the index does not follow the previous entry's
CHECK_TERM = "dledger.term"  # the term goes backwards
CHECK_INDEX_UNIT = "dledger.index_unit"  # the entry's index unit is missing or disagrees with it
CHECK_BODY_CRC = "dledger.body_crc"  # a nonzero bodyCrc that is not the CRC-32 of the body (body_crc32)
CHECK_CHAIN_CRC = "dledger.chain_crc"  # a nonzero chainCrc: no DLedger version writes one
CHECK_BLANK = "dledger.blank"  # a blank whose size is not the rest of its file
#: the checks DLedgerMmapFileStore.recover applies (its walk ends at the first entry failing one)
RECOVERY_CHECKS = frozenset({CHECK_MAGIC, CHECK_SIZE, CHECK_POSITION, CHECK_INDEX, CHECK_TERM})
#: the order of an Entry's problems; bit i of EntryTable.problems is CHECK_ORDER[i]
CHECK_ORDER = (CHECK_MAGIC, CHECK_SIZE, CHECK_POSITION, CHECK_BODY_CRC, CHECK_CHAIN_CRC, CHECK_INDEX_UNIT, CHECK_INDEX,
               CHECK_TERM, CHECK_BLANK)
CHECK_BIT = {name: 1 << i for i, name in enumerate(CHECK_ORDER)}
KINDS = ("entry", "blank", "unframed")  # EntryTable.kinds indexes this


def check_bits(checks) -> int:
    """The EntryTable.problems bits of ``checks``."""
    return sum(CHECK_BIT[name] for name in set(checks))


_RECOVERY_BITS = check_bits(RECOVERY_CHECKS)
_FIRST_WALKED_BITS = check_bits(RECOVERY_CHECKS - {CHECK_INDEX, CHECK_TERM})  # the first entry follows nothing
_PRECHECK_BITS = check_bits((CHECK_MAGIC, CHECK_SIZE, CHECK_POSITION, CHECK_INDEX_UNIT))


@dataclass(frozen=True)
class IndexUnit:
    """One 32-byte DLedger index unit (``DLedgerEntryCoder.encodeIndex``)."""

    file: str  # "index/<name>"
    file_position: int
    magic: int
    pos: int
    size: int
    index: int
    term: int

    def matches(self, entry: "Entry") -> bool:
        """What DLedger's recovery compares: magic, pos, size, index and term."""
        return (self.magic, self.pos, self.size, self.index, self.term) == \
            (entry.magic, entry.position, entry.size, entry.index, entry.term)


@dataclass(frozen=True)
class Entry:
    """One item of a data file as plain reads see it: an ``entry`` (a header and its body), a ``blank`` (magic -1 to
    the file's end) or ``unframed`` (bytes no entry can be framed from: the file's walk ends there).  ``problems``:
    (check name, what is wrong) for every check it fails."""

    file: str  # "data/<name>"
    file_position: int
    position: int  # absolute: the file's base offset + file_position
    kind: str
    magic: int
    size: int
    index: int | None = None
    term: int | None = None
    pos_field: int | None = None
    channel: int | None = None
    chain_crc: int | None = None
    body_crc: int | None = None
    body_size: int | None = None
    body_crc32: int | None = None  # body_crc32() of the body, computed where bodyCrc is nonzero (only then it matters)
    index_unit: IndexUnit | None = None
    problems: tuple[tuple[str, str], ...] = ()

    @property
    def record_offset(self) -> int:
        """RocketMQ's physical offset of the record inside: the entry's position + 48."""
        return self.position + BODY_OFFSET

    @property
    def end(self) -> int:
        return self.position + self.size

    def fails(self, checks=RECOVERY_CHECKS) -> bool:
        return any(name in checks for name, _ in self.problems)


#: EntryTable's per-row columns and their dtypes (the unit_* columns: the entry's index unit; unit_file -1: none)
_COLUMNS = (("file", np.int32), ("file_position", np.int64), ("kinds", np.int8), ("magic", np.int64),
            ("size", np.int64), ("index", np.int64), ("term", np.int64), ("pos_field", np.int64),
            ("channel", np.int64), ("chain_crc", np.int64), ("body_crc", np.int64), ("body_size", np.int64),
            ("body_crc32", np.int64), ("unit_file", np.int32), ("unit_file_position", np.int64),
            ("unit_magic", np.int64), ("unit_pos", np.int64), ("unit_size", np.int64), ("unit_index", np.int64),
            ("unit_term", np.int64), ("problems", np.int32), ("prev_index", np.int64), ("prev_term", np.int64))
_NONE = -1  # body_crc32 / unit_file where Entry holds None


class EntryTable:
    """:meth:`DLedgerLog.entries` as columns (one row per item, in file order): what the checks and the recovery
    read without a Python object per entry.  :meth:`entry` gives row ``i`` as the :class:`Entry` the scalar walk
    gives (its problems' texts written from the columns); ``problems`` holds their :data:`CHECK_BIT` bits."""

    def __init__(self, files: tuple[str, ...], bases, lengths, unit_files: tuple[str, ...], columns: dict,
                 source: list[Entry] | None = None):
        self.files, self.unit_files = files, unit_files  # "data/<name>", "index/<name>"
        self.bases = np.asarray(bases, np.int64)  # each data file's base offset
        self.lengths = tuple(lengths)  # each data file's bytes, as its walk saw them
        for name, dtype in _COLUMNS:
            setattr(self, name, np.asarray(columns[name], dtype))
        self._source = source  # the Entry objects the rows were made from, given back as they are

    def __len__(self) -> int:
        return len(self.kinds)

    @property
    def positions(self) -> np.ndarray:
        return self.bases[self.file] + self.file_position if len(self) else np.zeros(0, np.int64)

    @property
    def ends(self) -> np.ndarray:
        return self.positions + self.size

    def rows_with(self, checks) -> np.ndarray:
        """The rows failing any of ``checks``."""
        return np.flatnonzero(self.problems & check_bits(checks))

    def entry(self, i: int) -> Entry:
        if self._source is not None:
            return self._source[i]
        i = int(i)
        c = {name: int(getattr(self, name)[i]) for name, _ in _COLUMNS}
        name, fp = self.files[c["file"]], c["file_position"]
        where = int(self.bases[c["file"]]) + fp
        problems = tuple((check, self._why(check, c, where)) for check in CHECK_ORDER if c["problems"] & CHECK_BIT[check])
        kind = KINDS[c["kinds"]]
        if kind != "entry":
            return Entry(name, fp, where, kind, c["magic"], c["size"], problems=problems)
        unit = None if c["unit_file"] == _NONE else IndexUnit(
            self.unit_files[c["unit_file"]], c["unit_file_position"], c["unit_magic"], c["unit_pos"], c["unit_size"],
            c["unit_index"], c["unit_term"])
        return Entry(name, fp, where, kind, c["magic"], c["size"], c["index"], c["term"], c["pos_field"], c["channel"],
                     c["chain_crc"], c["body_crc"], c["body_size"], None if c["body_crc32"] == _NONE else c["body_crc32"],
                     unit, problems)

    def _why(self, check: str, c: dict, where: int) -> str:
        """What the scalar walk says of ``check`` on the row ``c``."""
        fp, size, n = c["file_position"], c["size"], self.lengths[c["file"]]
        if check == CHECK_BLANK:
            return f"blank of {size} bytes at {fp}, the file has {n - fp} more"
        if check == CHECK_SIZE and c["kinds"] != 0:
            return f"size {size} at {fp}: " + ("no entry is that small" if size <= HEADER_SIZE
                                               else f"runs past the file's end ({n} bytes)")
        if check == CHECK_MAGIC:
            return f"magic {c['magic']}, DLedger 0.3.1.2 writes {MAGIC}"
        if check == CHECK_SIZE:
            return f"size {size} != {BODY_OFFSET} + bodySize {c['body_size']}"
        if check == CHECK_POSITION:
            return f"pos field {c['pos_field']}, the entry lies at {where}"
        if check == CHECK_BODY_CRC:
            return f"bodyCrc {c['body_crc']}, the body's CRC-32 is {c['body_crc32']}"
        if check == CHECK_CHAIN_CRC:
            return f"chainCrc {c['chain_crc'] & 0xFFFFFFFF}: no DLedger version writes one"
        if check == CHECK_INDEX_UNIT and c["unit_file"] == _NONE:
            return f"no index unit for index {c['index']}"
        if check == CHECK_INDEX_UNIT:
            return (f"index unit {self.unit_files[c['unit_file']]}@{c['unit_file_position']} says magic "
                    f"{c['unit_magic']} pos {c['unit_pos']} size {c['unit_size']} index {c['unit_index']} term "
                    f"{c['unit_term']}")
        if check == CHECK_INDEX:
            return f"index {c['index']} after {c['prev_index']}"
        return f"term {c['term']} after {c['prev_term']}: terms never go backwards"

    @classmethod
    def of_entries(cls, entries: list[Entry], files: list[RolledFile]) -> "EntryTable":
        """The rows of Entry objects (the scalar walk's, or a caller's), each given back as it is by :meth:`entry`;
        an item of a file not in ``files`` is left out, as recovery never meets it."""
        names = {f"data/{f.name}": i for i, f in enumerate(files)}
        kept = [e for e in entries if e.file in names]
        units = sorted({e.index_unit.file for e in kept if e.kind == "entry" and e.index_unit is not None})
        unit_at = {u: i for i, u in enumerate(units)}
        cols: dict[str, list] = {name: [] for name, _ in _COLUMNS}
        last = None  # the entry before: what the index and term checks compare with
        for e in kept:
            u = e.index_unit if e.kind == "entry" else None
            row = {"file": names[e.file], "file_position": e.file_position, "kinds": KINDS.index(e.kind),
                   "magic": e.magic, "size": e.size, "index": e.index, "term": e.term, "pos_field": e.pos_field,
                   "channel": e.channel, "chain_crc": e.chain_crc, "body_crc": e.body_crc, "body_size": e.body_size,
                   "body_crc32": e.body_crc32, "unit_file": None if u is None else unit_at[u.file],
                   "unit_file_position": u and u.file_position, "unit_magic": u and u.magic, "unit_pos": u and u.pos,
                   "unit_size": u and u.size, "unit_index": u and u.index, "unit_term": u and u.term,
                   "problems": check_bits(name for name, _ in e.problems), "prev_index": last and last.index,
                   "prev_term": last and last.term}
            for name, value in row.items():
                cols[name].append(_NONE if value is None and name in ("body_crc32", "unit_file") else value or 0)
            last = e if e.kind == "entry" else last
        return cls(tuple(names), [f.base_offset for f in files], [f.length for f in files], tuple(units), cols,
                   source=kept)


@dataclass(frozen=True)
class Ledger:
    """What DLedger's ``load()`` + ``recover()`` leave (``DLedgerMmapFileStore.recover``, ``updateCommittedIndex``):
    the ledger's begin/end index and end term, the committed index and position, where the data files are cut
    (``data_end``), the entries ``get(index)`` returns, and from which index the index units are rewritten."""

    begin_index: int
    end_index: int
    end_term: int
    committed_index: int
    committed_pos: int  # end of the committed entry; -1 when nothing is committed
    data_end: int  # processOffset: the data files are truncated here
    stop: Entry | None  # the entry whose check ended the walk (None: a clean end)
    index_rewritten_from: int | None  # the first index whose unit DLedger rewrites (None: all agree)
    will_not_start: str | None = None  # DLedger's own exit (processOffset far before the last file)
    start_file: str | None = None  # the data file ("data/<name>") the walk starts at
    table: EntryTable | None = field(default=None, compare=False, repr=False)  # the items recovery read
    walked: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64), compare=False, repr=False)  # rows

    @property
    def entries(self) -> tuple[Entry, ...]:
        """The entries walked, by index: what get(index) returns."""
        return tuple(self.table.entry(i) for i in self.walked) if self.table is not None else ()

    @property
    def committed(self) -> tuple[Entry, ...]:
        """The entries up to the committed index: what RocketMQ's commit log serves (its max offset is
        ``committed_pos``)."""
        return tuple(e for e in self.entries if e.index <= self.committed_index)


@dataclass(frozen=True)
class Metadata:
    """``checkpoint`` and ``currterm`` as DLedger reads them (the ``.bak`` files are never read back; kept for
    the record).  None where the file or key is absent; ``problems`` says what is unreadable."""

    committed_index: int | None
    end_index: int | None
    current_term: int | None
    vote_leader: str | None
    problems: tuple[str, ...] = ()


def find_home(root) -> fs.Location | None:
    """The store's DLedger folder (``dledger-<selfId>`` holding ``data/``), found from the files alone; None
    when the store keeps a plain commit log.  Several: the first by name (one broker keeps one)."""
    loc = fs.resolve(root) if not isinstance(root, fs.Location) else root
    try:
        infos = loc.list()
    except fs.UnreadableError:
        return None
    for info in sorted(infos, key=lambda i: i.base_name):
        if info.is_file or not info.base_name.startswith(HOME_PREFIX):
            continue
        home = loc.child(info.base_name)
        if home.child("data").is_dir():
            return home
    return None


def is_dledger_store(root) -> bool:
    """A DLedger store: a ``dledger-*`` folder with ``data/`` and no ``commitlog/`` folder (docs/store-format-
    dledger.md, "Where the files are")."""
    loc = fs.resolve(root) if not isinstance(root, fs.Location) else root
    return not loc.child("commitlog").is_dir() and find_home(loc) is not None


def _java_long(text: str | None) -> int | None:
    text = (text or "").strip()
    return int(text) if _JAVA_LONG.fullmatch(text) and -2**63 <= int(text) < 2**63 else None


def _read_properties(loc: fs.Location, problems: list[str]) -> dict[str, str]:
    if not loc.exists():
        return {}
    try:
        raw = fs.read_bytes(loc.as_path(), 1 << 16)
        return parse_properties(raw.decode("latin-1"), loc.name)
    except StoreFormatError as e:  # unreadable, or an escape Java's Properties.load refuses
        problems.append(str(e))
        return {}


class DLedgerLog:
    """A DLedger home (``<root>/dledger-<selfId>``), listed once, read-only."""

    def __init__(self, home, *, data_file_size: int | None = None, index_file_size: int | None = None,
                 header_run=None):
        self.home = home if isinstance(home, fs.Location) else fs.resolve(home)
        # (buf, base offset, start) -> the positions of the run of entries from ``start`` whose headers pass, e.g.
        # store_format.commitlog.dledger_header_run over the compiled entry walk: the entries are then walked and
        # checked as arrays (:meth:`table`); None: the scalar walk
        self.header_run = header_run
        self._data_file_size = data_file_size
        self._index_file_size = index_file_size

    @property
    def self_id(self) -> str:
        return self.home.name[len(HOME_PREFIX):]

    @cached_property
    def data_files(self) -> list[RolledFile]:
        """The data files DLedger loads (20-digit names), by offset, each with what is wrong with it."""
        return _rolled(self.home.child("data"), self._data_file_size)

    @cached_property
    def index_files(self) -> list[RolledFile]:
        return _rolled(self.home.child("index"), self._index_file_size)

    @cached_property
    def metadata(self) -> Metadata:
        problems: list[str] = []
        cp = _read_properties(self.home.child(CHECKPOINT_FILE), problems)
        term = _read_properties(self.home.child(TERM_FILE), problems)
        for name, props, key in (("checkpoint", cp, "committedIndex"), ("checkpoint", cp, "endIndex"),
                                 ("currterm", term, "currTerm")):
            if key in props and props[key].strip() and _java_long(props[key]) is None:
                problems.append(f"{name}: {key}={props[key]!r} is no Java long (DLedger fails to start on it)")
        return Metadata(_java_long(cp.get("committedIndex")), _java_long(cp.get("endIndex")),
                        _java_long(term.get("currTerm")), term.get("voteLeader"), tuple(problems))

    # ---- index units -------------------------------------------------------------------------
    def index_unit(self, index: int) -> IndexUnit | None:
        """The unit at ``index`` x 32 of the index file list, None where no file holds it."""
        if index < 0 or not self.index_files:
            return None
        offset = index * INDEX_UNIT_SIZE
        for f in self.index_files:
            if f.base_offset <= offset and offset + INDEX_UNIT_SIZE <= f.base_offset + f.length:
                at = offset - f.base_offset
                raw = f.loc.read_range(at, INDEX_UNIT_SIZE)
                if len(raw) < INDEX_UNIT_SIZE:
                    return None
                return IndexUnit(f"index/{f.name}", at, *_INDEX_UNIT.unpack(raw))
        return None

    # ---- entries -----------------------------------------------------------------------------
    def entries(self) -> list[Entry]:
        """Every item of every data file in file order, as plain reads see it, with every check it fails
        (DLedger's own, and the CRCs it never verifies).  Index and term continuity run across files.  With a
        ``header_run``, the rows of :meth:`table` (the same items)."""
        if self.header_run is not None:
            table = self.table()
            return [table.entry(i) for i in range(len(table))]
        out: list[Entry] = []
        last: Entry | None = None
        with ExitStack() as index_maps:
            units = self._unit_reader(index_maps)
            for f in self.data_files:
                for item in self._file_items(f, units):
                    if item.kind == "entry":
                        problems = []
                        if last is not None and item.index != last.index + 1:
                            problems.append((CHECK_INDEX, f"index {item.index} after {last.index}"))
                        if last is not None and item.term < last.term:
                            problems.append((CHECK_TERM, f"term {item.term} after {last.term}: terms never go "
                                             "backwards"))
                        if problems:
                            item = _with(item, problems=item.problems + tuple(problems))
                        last = item
                    out.append(item)
        return out

    def table(self) -> EntryTable:
        """:meth:`entries` as columns.  With a ``header_run`` (the compiled entry walk) the entry headers are
        walked by it and decoded and checked as arrays: Python steps only at an entry whose header fails, at a
        nonzero bodyCrc (its CRC) and per file; without one, the scalar walk's items."""
        if self.header_run is None:
            return EntryTable.of_entries(self.entries(), self.data_files)
        pieces = []
        for i, f in enumerate(self.data_files):
            with open_bytes(f.loc) as m:
                pieces.append(self._file_columns(i, f, m.buf))
        cols = {name: np.concatenate([p[name] for p in pieces]) if pieces else np.zeros(0, t) for name, t in _COLUMNS}
        lengths = [p["length"] for p in pieces]
        entries = np.flatnonzero(cols["kinds"] == 0)
        index, term = cols["index"][entries], cols["term"][entries]
        prev_index, prev_term = np.roll(index, 1), np.roll(term, 1)
        follows = np.arange(len(entries)) > 0
        cols["prev_index"][entries], cols["prev_term"][entries] = prev_index, prev_term
        cols["problems"][entries] |= np.where(follows & (index != prev_index + 1), CHECK_BIT[CHECK_INDEX], 0) \
            | np.where(follows & (term < prev_term), CHECK_BIT[CHECK_TERM], 0)
        unit_files = self._units(cols, entries)
        return EntryTable(tuple(f"data/{f.name}" for f in self.data_files), [f.base_offset for f in self.data_files],
                          lengths, unit_files, cols)

    def _file_columns(self, file: int, f: RolledFile, buf) -> dict:
        """One data file's rows (its entries, then its blank or unframed item) but the index units and the
        continuity checks: the compiled walk to each header that fails, that entry stepped over in Python."""
        n = len(buf)
        starts, tail, pos = [], None, 0
        while True:
            run = np.asarray(self.header_run(buf, f.base_offset, pos), np.int64)
            starts.append(run)
            if len(run):
                pos = int(run[-1]) + INT_PAIR.unpack_from(buf, int(run[-1]))[1]
            kind = _item_kind(buf, pos, n)
            if kind != "entry":
                break
            starts.append(np.array([pos], np.int64))  # a header DLedger refuses: an entry with its problems
            pos += INT_PAIR.unpack_from(buf, pos)[1]
        if kind == "blank":
            size = INT_PAIR.unpack_from(buf, pos)[1]
            tail = (1, pos, BLANK_MAGIC, size, 0 if size == n - pos else CHECK_BIT[CHECK_BLANK])
        elif kind == "unframed":
            tail = (2, pos, *INT_PAIR.unpack_from(buf, pos), CHECK_BIT[CHECK_SIZE])
        at = np.concatenate(starts) if starts else np.zeros(0, np.int64)
        data = np.frombuffer(buf, np.uint8) if n else np.zeros(0, np.uint8)
        head = np.ascontiguousarray(data[at[:, None] + np.arange(BODY_OFFSET)]) if len(at) else \
            np.zeros((0, BODY_OFFSET), np.uint8)

        def field_at(lo: int, width: int) -> np.ndarray:
            return np.ascontiguousarray(head[:, lo:lo + width]).view(f">i{width}").reshape(-1).astype(np.int64)

        k = len(at)
        c = {name: np.zeros(k + (tail is not None), t) for name, t in _COLUMNS}
        c["file"][:], c["file_position"][:k] = file, at
        for name, lo, width in (("magic", 0, 4), ("size", 4, 4), ("index", 8, 8), ("term", 16, 8),
                                ("pos_field", 24, 8), ("channel", 32, 4), ("chain_crc", 36, 4),
                                ("body_crc", 40, 4), ("body_size", 44, 4)):
            c[name][:k] = field_at(lo, width)
        framed = c["body_size"][:k] + BODY_OFFSET == c["size"][:k]
        c["body_crc32"][:] = _NONE
        crc_bad = np.zeros(k, bool)
        for j in np.flatnonzero((c["body_crc"][:k] != 0) & framed):  # DLedger writes none: rare
            body = buf[int(at[j]) + BODY_OFFSET:int(at[j] + c["size"][j])]
            c["body_crc32"][j] = crc32 = body_crc32(body)
            crc_bad[j] = c["body_crc"][j] not in (crc32, _signed(zlib.crc32(body)))
        c["problems"][:k] = (np.where(c["magic"][:k] != MAGIC, CHECK_BIT[CHECK_MAGIC], 0)
                             | np.where(~framed, CHECK_BIT[CHECK_SIZE], 0)
                             | np.where(c["pos_field"][:k] != f.base_offset + at, CHECK_BIT[CHECK_POSITION], 0)
                             | np.where(crc_bad, CHECK_BIT[CHECK_BODY_CRC], 0)
                             | np.where(c["chain_crc"][:k] != 0, CHECK_BIT[CHECK_CHAIN_CRC], 0))
        c["unit_file"][:] = _NONE
        if tail is not None:
            c["kinds"][k], c["file_position"][k], c["magic"][k], c["size"][k], c["problems"][k] = tail
        c["length"] = n
        return c

    def _units(self, cols: dict, entries: np.ndarray) -> tuple[str, ...]:
        """Each entry's index unit into ``cols`` (:meth:`index_unit`, the first index file holding it) and its
        CHECK_INDEX_UNIT bit; returns the index files named."""
        index = cols["index"][entries]
        offset = np.where((index >= 0) & (index < 1 << 58), index, -1) * INDEX_UNIT_SIZE  # past 2^58: no file
        pending = offset >= 0
        found = np.zeros(len(entries), bool)
        names: list[str] = []
        for f in self.index_files:
            mine = pending & (f.base_offset <= offset) & (offset + INDEX_UNIT_SIZE <= f.base_offset + f.length)
            if not mine.any():
                continue
            pending &= ~mine
            with open_bytes(f.loc) as m:
                data = np.frombuffer(m.buf, np.uint8) if len(m.buf) else np.zeros(0, np.uint8)
                at = offset[mine] - f.base_offset
                inside = at + INDEX_UNIT_SIZE <= len(data)  # the listing's length past the bytes: no unit
                rows, at = entries[mine][inside], at[inside]
                raw = np.ascontiguousarray(data[at[:, None] + np.arange(INDEX_UNIT_SIZE)])
            for name, lo, width in (("unit_magic", 0, 4), ("unit_pos", 4, 8), ("unit_size", 12, 4),
                                    ("unit_index", 16, 8), ("unit_term", 24, 8)):
                cols[name][rows] = np.ascontiguousarray(raw[:, lo:lo + width]).view(f">i{width}").reshape(-1)
            cols["unit_file"][rows], cols["unit_file_position"][rows] = len(names), at
            found[np.flatnonzero(mine)[inside]] = True
            names.append(f"index/{f.name}")
        positions = (np.asarray([f.base_offset for f in self.data_files], np.int64)[cols["file"][entries]]
                     + cols["file_position"][entries]) if len(entries) else np.zeros(0, np.int64)
        agree = found.copy()
        for unit, mine in (("unit_magic", "magic"), ("unit_size", "size"), ("unit_index", "index"),
                           ("unit_term", "term")):
            agree &= cols[unit][entries] == cols[mine][entries]
        agree &= cols["unit_pos"][entries] == positions
        cols["problems"][entries[~agree]] |= CHECK_BIT[CHECK_INDEX_UNIT]
        return tuple(names)

    def _unit_reader(self, maps: ExitStack):
        """:meth:`index_unit` over index files each mapped once (for the walk of every entry), closed with
        ``maps``."""
        bufs: dict[str, object] = {}

        def unit(index: int) -> IndexUnit | None:
            offset = index * INDEX_UNIT_SIZE
            for f in self.index_files if index >= 0 else ():
                if f.base_offset <= offset and offset + INDEX_UNIT_SIZE <= f.base_offset + f.length:
                    if f.name not in bufs:
                        bufs[f.name] = maps.enter_context(open_bytes(f.loc)).buf
                    buf, at = bufs[f.name], offset - f.base_offset
                    if at + INDEX_UNIT_SIZE > len(buf):
                        return None
                    return IndexUnit(f"index/{f.name}", at, *_INDEX_UNIT.unpack_from(buf, at))
            return None
        return unit

    def _file_items(self, f: RolledFile, units):
        name = f"data/{f.name}"
        with open_bytes(f.loc) as m:
            buf, n = m.buf, len(m.buf)
            pos = 0
            while True:
                kind = _item_kind(buf, pos, n)
                if kind is None:
                    return
                magic, size = INT_PAIR.unpack_from(buf, pos)
                where = f.base_offset + pos
                if kind == "blank":
                    problems = () if size == n - pos else (
                        (CHECK_BLANK, f"blank of {size} bytes at {pos}, the file has {n - pos} more"),)
                    yield Entry(name, pos, where, "blank", magic, size, problems=problems)
                    return
                if kind == "unframed":
                    why = f"size {size} at {pos}: " + ("no entry is that small" if size <= HEADER_SIZE
                                                        else f"runs past the file's end ({n} bytes)")
                    yield Entry(name, pos, where, "unframed", magic, size, problems=((CHECK_SIZE, why),))
                    return
                yield self._entry(name, buf, pos, where, units)
                pos += size

    def _entry(self, name: str, buf, pos: int, where: int, units) -> Entry:
        magic, size, index, term, pos_field, channel, chain_crc, body_crc, body_size = \
            ENTRY_HEADER.unpack_from(buf, pos)
        problems = []
        if magic != MAGIC:
            problems.append((CHECK_MAGIC, f"magic {magic}, DLedger 0.3.1.2 writes {MAGIC}"))
        if body_size + BODY_OFFSET != size:
            problems.append((CHECK_SIZE, f"size {size} != {BODY_OFFSET} + bodySize {body_size}"))
        if pos_field != where:
            problems.append((CHECK_POSITION, f"pos field {pos_field}, the entry lies at {where}"))
        crc32 = None
        if body_crc and body_size + BODY_OFFSET == size:
            crc32 = body_crc32(buf[pos + BODY_OFFSET:pos + size])
            if body_crc not in (crc32, _signed(zlib.crc32(buf[pos + BODY_OFFSET:pos + size]))):
                problems.append((CHECK_BODY_CRC, f"bodyCrc {body_crc}, the body's CRC-32 is {crc32}"))
        if chain_crc:
            problems.append((CHECK_CHAIN_CRC, f"chainCrc {chain_crc & 0xFFFFFFFF}: no DLedger version writes one"))
        unit = units(index)
        entry = Entry(name, pos, where, "entry", magic, size, index, term, pos_field, channel, chain_crc, body_crc,
                      body_size, crc32, unit)
        if unit is None:
            problems.append((CHECK_INDEX_UNIT, f"no index unit for index {index}"))
        elif not unit.matches(entry):
            problems.append((CHECK_INDEX_UNIT, f"index unit {unit.file}@{unit.file_position} says magic "
                             f"{unit.magic} pos {unit.pos} size {unit.size} index {unit.index} term {unit.term}"))
        return _with(entry, problems=tuple(problems)) if problems else entry

    def body(self, entry: Entry) -> bytes:
        """The entry's body: the CommitLog record's bytes."""
        f = next(f for f in self.data_files if f"data/{f.name}" == entry.file)
        return f.loc.read_range(entry.file_position + BODY_OFFSET, entry.size - BODY_OFFSET)

    # ---- recovery ----------------------------------------------------------------------------
    def recover(self, items: "list[Entry] | EntryTable | None" = None) -> Ledger:
        """DLedger's ``recover()`` as it runs on these files (``DLedgerMmapFileStore.recover``): start at the
        third-newest data file, stepping back while its first entry fails the header checks or its index unit;
        walk entries to the first that fails a recovery check (blanks move to the next file, size 0 ends); the
        ledger ends at the last entry walked; the committed index is the checkpoint's, ignored when -1 or absent,
        clamped to the ledger end.  ``items``: :meth:`entries` or :meth:`table` (None: the table); decided over
        its columns, per file."""
        if items is None:
            items = self.table()
        table = items if isinstance(items, EntryTable) else EntryTable.of_entries(items, self.data_files)
        files = self.data_files
        if not files:
            return Ledger(-1, -1, -1, -1, -1, 0, None, None)
        names = [f"data/{f.name}" for f in files]
        of_file = np.asarray([names.index(n) if n in names else -1 for n in table.files], np.int64)
        rows_of = [np.flatnonzero(of_file[table.file] == i) if len(table) else np.zeros(0, np.int64)
                   for i in range(len(files))]
        start = max(len(files) - 3, 0)
        for i in range(start, -1, -1):
            start = i
            first = rows_of[i][:1]
            if len(first) and table.file_position[first[0]] == 0 and table.kinds[first[0]] == 0 \
                    and not table.problems[first[0]] & _PRECHECK_BITS:
                break
        walked: list[np.ndarray] = []
        stop = None
        process = files[start].base_offset
        for i in range(start, len(files)):
            f, rows = files[i], rows_of[i]
            process = f.base_offset
            fails = (table.kinds[rows] != 0) | (table.problems[rows] & _RECOVERY_BITS != 0)
            if not sum(map(len, walked)) and len(rows):  # the first entry walked has no predecessor to follow
                fails[0] = table.kinds[rows[0]] != 0 or bool(table.problems[rows[0]] & _FIRST_WALKED_BITS)
            first_out = np.flatnonzero(fails)
            cut = int(first_out[0]) if len(first_out) else len(rows)
            walked.append(rows[:cut])
            if cut:
                process = int(table.bases[table.file[rows[cut - 1]]] + table.file_position[rows[cut - 1]]
                              + table.size[rows[cut - 1]])
            blank = cut < len(rows) and table.kinds[rows[cut]] == 1
            if blank:
                process = f.base_offset + f.length
            elif cut < len(rows):
                stop = table.entry(rows[cut])
            if stop is not None or not blank:
                break
        walked_rows = np.concatenate(walked) if walked else np.zeros(0, np.int64)
        indexes = table.index[walked_rows]
        end_index = int(indexes[-1]) if len(walked_rows) else -1
        end_term = int(table.term[walked_rows[-1]]) if len(walked_rows) else -1
        unit_bad = np.flatnonzero(table.problems[walked_rows] & CHECK_BIT[CHECK_INDEX_UNIT])
        rewritten = int(indexes[unit_bad[0]]) if len(unit_bad) else None
        begin = -1
        if len(walked_rows):
            first = rows_of[0][:1]
            begin = int(table.index[first[0]]) if len(first) and table.kinds[first[0]] == 0 else -1
        will_not_start = None
        last = files[-1]
        if last.base_offset - process > last.length:
            will_not_start = (f"DLedger's recovery ends at {process}, more than a file before the last data file "
                              f"{last.name}: it exits (System.exit) instead of truncating")
        committed_index, committed_pos = -1, -1
        wanted = self.metadata.committed_index
        if wanted is not None and wanted != -1 and end_index != -1 and wanted >= begin:
            committed_index = min(wanted, end_index)
            at = np.flatnonzero(indexes == committed_index)
            if len(at):  # the last walked entry of that index, as a dict by index keeps
                row = walked_rows[at[-1]]
                committed_pos = int(table.bases[table.file[row]] + table.file_position[row] + table.size[row])
        return Ledger(begin, end_index, end_term, committed_index, committed_pos, process, stop, rewritten,
                      will_not_start, f"data/{files[start].name}", table, walked_rows)


def _item_kind(buf, pos: int, n: int) -> str | None:
    """What the walk of a data file's ``n`` bytes meets at ``pos``: a ``blank`` (magic -1), an ``unframed`` item
    (a size no entry has, or past the file), an ``entry`` (checked afterwards), or None where the written part
    ends (size 0, or no 8 bytes left)."""
    if pos + MIN_BLANK_LEN > n:
        return None
    magic, size = INT_PAIR.unpack_from(buf, pos)
    if magic == BLANK_MAGIC:
        return "blank"
    if size == 0:  # the written part ends (DLedger's walk stops here)
        return None
    if size <= HEADER_SIZE or pos + max(size, BODY_OFFSET) > n:
        return "unframed"
    return "entry"


def body_crc32(body) -> int:
    """The body's CRC as RocketMQ computes its own (``UtilAll.crc32``: java.util.zip.CRC32 masked to 31 bits).  A
    bodyCrc is accepted as this or as the full CRC-32 (no DLedger version defines which: none writes one)."""
    return zlib.crc32(body) & 0x7FFFFFFF


def _signed(value: int) -> int:
    return value - (1 << 32) if value >= 1 << 31 else value


def _rolled(folder: fs.Location, size: int | None) -> list[RolledFile]:
    if not folder.is_dir():
        return []
    return sorted((f for f in list_folder(folder, size) if f.base_offset is not None), key=lambda f: f.base_offset)


def _with(entry: Entry, **changes) -> Entry:
    return replace(entry, **changes)


# ---- what the CommitLog walk over the entries needs (store_format.commitlog.dledger_items) -----------------

def is_data_file(loc) -> bool:
    """A file of a DLedger data folder (``<root>/dledger-<id>/data/<name>``), told from its path alone: the
    CommitLog readers walk it as DLedger entries (store_format.commitlog.dledger_items) instead of plain records."""
    path = loc.path if isinstance(loc, fs.Location) else str(loc)
    parts = path.replace("\\", "/").rstrip("/").split("/")
    return len(parts) >= 3 and parts[-2] == "data" and parts[-3].startswith(HOME_PREFIX)


def confirmed_header(buf, pos: int, limit: int, base: int) -> bool:
    """An entry header at ``pos`` that proves itself: magic 1, size = 48 + bodySize inside the bytes, and the pos
    field equal to its own absolute position (a 16-byte agreement no record body repeats by chance)."""
    if pos < 0 or pos + BODY_OFFSET > limit:
        return False
    magic, size, _, _, pos_field, _, _, _, body_size = ENTRY_HEADER.unpack_from(buf, pos)
    return (magic == MAGIC and pos_field == base + pos and size > HEADER_SIZE and body_size + BODY_OFFSET == size
            and pos + size <= limit)


_MAGIC_BYTES = struct.pack(">i", MAGIC)


def next_header(buf, start: int, limit: int, base: int, before: int | None = None) -> int | None:
    """The first confirmed entry header at or after ``start`` (and before ``before``), or None."""
    stop = limit if before is None else min(limit, before)
    i = buf.find(_MAGIC_BYTES, max(start, 0), stop + 3) if hasattr(buf, "find") else bytes(buf).find(
        _MAGIC_BYTES, max(start, 0), stop + 3)
    while 0 <= i < stop:
        if confirmed_header(buf, i, limit, base):
            return i
        i = buf.find(_MAGIC_BYTES, i + 1, stop + 3)
    return None


def first_body(loc: fs.Location, length: int) -> bytes:
    """The body of a data file's first entry (its first CommitLog record), read alone; empty when the file does
    not start with an entry."""
    head = loc.read_range(0, BODY_OFFSET) if length >= BODY_OFFSET else b""
    if len(head) < BODY_OFFSET:
        return b""
    magic, size = INT_PAIR.unpack_from(head, 0)
    if magic != MAGIC or not BODY_OFFSET < size <= length:
        return b""
    return loc.read_range(BODY_OFFSET, size - BODY_OFFSET)
