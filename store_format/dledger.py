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
from dataclasses import dataclass, replace
from functools import cached_property

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
    entries: tuple[Entry, ...]  # the entries walked, by index: what get(index) returns
    stop: Entry | None  # the entry whose check ended the walk (None: a clean end)
    index_rewritten_from: int | None  # the first index whose unit DLedger rewrites (None: all agree)
    will_not_start: str | None = None  # DLedger's own exit (processOffset far before the last file)
    start_file: str | None = None  # the data file ("data/<name>") the walk starts at

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

    def __init__(self, home, *, data_file_size: int | None = None, index_file_size: int | None = None):
        self.home = home if isinstance(home, fs.Location) else fs.resolve(home)
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
        (DLedger's own, and the CRCs it never verifies).  Index and term continuity run across files."""
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
            while pos + MIN_BLANK_LEN <= n:
                magic, size = INT_PAIR.unpack_from(buf, pos)
                where = f.base_offset + pos
                if magic == BLANK_MAGIC:
                    problems = () if size == n - pos else (
                        (CHECK_BLANK, f"blank of {size} bytes at {pos}, the file has {n - pos} more"),)
                    yield Entry(name, pos, where, "blank", magic, size, problems=problems)
                    return
                if size == 0:  # the written part ends (DLedger's walk stops here)
                    return
                if size <= HEADER_SIZE or pos + max(size, BODY_OFFSET) > n:
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
    def recover(self, items: list[Entry] | None = None) -> Ledger:
        """DLedger's ``recover()`` as it runs on these files (``DLedgerMmapFileStore.recover``): start at the
        third-newest data file, stepping back while its first entry fails the header checks or its index unit;
        walk entries to the first that fails a recovery check (blanks move to the next file, size 0 ends); the
        ledger ends at the last entry walked; the committed index is the checkpoint's, ignored when -1 or absent,
        clamped to the ledger end."""
        items = self.entries() if items is None else items
        files = self.data_files
        if not files:
            return Ledger(-1, -1, -1, -1, -1, 0, (), None, None)
        by_file: dict[str, list[Entry]] = {}
        for e in items:
            by_file.setdefault(e.file, []).append(e)
        start = max(len(files) - 3, 0)
        for i in range(start, -1, -1):
            start = i
            first = by_file.get(f"data/{files[i].name}", [])
            head = first[0] if first and first[0].file_position == 0 else None
            if head is not None and head.kind == "entry" and not _fails_precheck(head):
                break
        walked: list[Entry] = []
        stop = None
        rewritten = None
        process = files[start].base_offset
        for f in files[start:]:
            process = f.base_offset
            blank = False
            for e in by_file.get(f"data/{f.name}", []):
                if e.kind == "blank":
                    blank = True
                    process = f.base_offset + f.length
                    break
                problems = {name for name, _ in e.problems}
                if walked:
                    ok = not (problems & RECOVERY_CHECKS)
                else:  # the first entry walked has no predecessor to follow
                    ok = not (problems & (RECOVERY_CHECKS - {CHECK_INDEX, CHECK_TERM}))
                if e.kind != "entry" or not ok:
                    stop = e
                    break
                if rewritten is None and CHECK_INDEX_UNIT in problems:
                    rewritten = e.index
                walked.append(e)
                process = e.end
            if stop is not None or not blank:
                break
        end_index = walked[-1].index if walked else -1
        end_term = walked[-1].term if walked else -1
        begin = -1
        if walked:
            first = by_file.get(f"data/{files[0].name}", [])
            begin = first[0].index if first and first[0].kind == "entry" else -1
        will_not_start = None
        last = files[-1]
        if last.base_offset - process > last.length:
            will_not_start = (f"DLedger's recovery ends at {process}, more than a file before the last data file "
                              f"{last.name}: it exits (System.exit) instead of truncating")
        committed_index, committed_pos = -1, -1
        wanted = self.metadata.committed_index
        if wanted is not None and wanted != -1 and end_index != -1 and wanted >= begin:
            committed_index = min(wanted, end_index)
            by_index = {e.index: e for e in walked}
            if committed_index in by_index:
                committed_pos = by_index[committed_index].end
        return Ledger(begin, end_index, end_term, committed_index, committed_pos, process, tuple(walked), stop,
                      rewritten, will_not_start, f"data/{files[start].name}")


def body_crc32(body) -> int:
    """The body's CRC as RocketMQ computes its own (``UtilAll.crc32``: java.util.zip.CRC32 masked to 31 bits).  A
    bodyCrc is accepted as this or as the full CRC-32 (no DLedger version defines which: none writes one)."""
    return zlib.crc32(body) & 0x7FFFFFFF


def _signed(value: int) -> int:
    return value - (1 << 32) if value >= 1 << 31 else value


def _fails_precheck(e: Entry) -> bool:
    """The first entry of the file recovery starts from: header checks and its index unit
    (``DLedgerMmapFileStore.recover``'s pre-check loop)."""
    return any(name in (CHECK_MAGIC, CHECK_SIZE, CHECK_POSITION, CHECK_INDEX_UNIT) for name, _ in e.problems)


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
