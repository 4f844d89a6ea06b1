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

_ENTRY_HEADER = struct.Struct(">iiqqqiiii")  # magic size index term pos channel chainCrc bodyCrc bodySize
_INDEX_UNIT = struct.Struct(">iqiqq")  # magic pos size index term
_INT_PAIR = struct.Struct(">ii")
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
        for f in self.data_files:
            for item in self._file_items(f):
                if item.kind == "entry":
                    problems = list(item.problems)
                    if last is not None and item.index != last.index + 1:
                        problems.append((CHECK_INDEX, f"index {item.index} after {last.index}"))
                    if last is not None and item.term < last.term:
                        problems.append((CHECK_TERM, f"term {item.term} after {last.term}: terms never go "
                                         "backwards"))
                    item = _with(item, problems=tuple(problems))
                    last = item
                out.append(item)
        return out

    def _file_items(self, f: RolledFile):
        name = f"data/{f.name}"
        with open_bytes(f.loc) as m:
            buf, n = m.buf, len(m.buf)
            pos = 0
            while pos + MIN_BLANK_LEN <= n:
                magic, size = _INT_PAIR.unpack_from(buf, pos)
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
                yield self._entry(name, buf, pos, where)
                pos += size

    def _entry(self, name: str, buf, pos: int, where: int) -> Entry:
        magic, size, index, term, pos_field, channel, chain_crc, body_crc, body_size = \
            _ENTRY_HEADER.unpack_from(buf, pos)
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
        unit = self.index_unit(index)
        entry = Entry(name, pos, where, "entry", magic, size, index, term, pos_field, channel, chain_crc, body_crc,
                      body_size, crc32, unit)
        if unit is None:
            problems.append((CHECK_INDEX_UNIT, f"no index unit for index {index}"))
        elif not unit.matches(entry):
            problems.append((CHECK_INDEX_UNIT, f"index unit {unit.file}@{unit.file_position} says magic "
                             f"{unit.magic} pos {unit.pos} size {unit.size} index {unit.index} term {unit.term}"))
        return _with(entry, problems=tuple(problems))

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


# ---- the CommitLog records inside: the walk every CommitLog reader takes ---------------------------------

def is_data_file(loc) -> bool:
    """A file of a DLedger data folder (``<root>/dledger-<id>/data/<name>``), told from its path alone: the
    CommitLog readers walk it as DLedger entries (:func:`walk_items`) instead of plain records."""
    path = loc.path if isinstance(loc, fs.Location) else str(loc)
    parts = path.replace("\\", "/").rstrip("/").split("/")
    return len(parts) >= 3 and parts[-2] == "data" and parts[-3].startswith(HOME_PREFIX)


def confirmed_header(buf, pos: int, limit: int, base: int) -> bool:
    """An entry header at ``pos`` that proves itself: magic 1, size = 48 + bodySize inside the bytes, and the pos
    field equal to its own absolute position (a 16-byte agreement no record body repeats by chance)."""
    if pos < 0 or pos + BODY_OFFSET > limit:
        return False
    magic, size, _, _, pos_field, _, _, _, body_size = _ENTRY_HEADER.unpack_from(buf, pos)
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


def walk_items(buf, segment: str, base_offset: int, *, start: int = 0, limit: int | None = None,
               until: int | None = None, check_crc: bool = True, salvage: bool = True, excerpt_len: int = 32):
    """A DLedger data file's CommitLog items as :func:`store_format.commitlog.salvage_arrays` gives a segment's
    (``salvage``; else :func:`~store_format.commitlog.walk_arrays`: up to the first stop): each entry's record
    framed where it lies, at file position entry + 48, so every physical offset is RocketMQ's; the file's blank
    and the end of the written part at the entry position.  An entry whose header fails DLedger's own checks is a
    stop there (BAD_MAGIC, BAD_LENGTH, TRUNCATED, PHYSICAL_OFFSET_MISMATCH of the pos field); the salvage walk
    goes on at the next confirmed header, the bytes between a span.  A record that fails the CommitLog checks (or
    does not fill its entry) is a stop at the record; the salvage walk goes on at the next entry.  ``start``:
    the walk starts at the first confirmed header at or after it (0: at 0, confirmed or not); ``until``: items
    before it only."""
    from .commitlog import (END_OF_DATA, KIND_BLANK, KIND_CORRUPT, KIND_MESSAGE, KIND_STOP, Frame, SalvageSpan,
                            _Collector, frame_at, zero_tail_start)
    from .errors import ErrorKind

    limit = len(buf) if limit is None else limit
    out = _Collector(segment, base_offset)
    pos = start

    def stop_at(at: int, size: int, magic: int, kind: str, field_name: str | None, why: str):
        out.one(KIND_STOP, at, size, magic, Frame("stop", segment, at, base_offset + at, size, magic, kind,
                                                   field_name, why))

    while pos < limit and (until is None or pos < until):
        if limit - pos < MIN_BLANK_LEN:
            if any(buf[pos:limit]):
                stop_at(pos, 0, 0, ErrorKind.TRUNCATED.value, "store_size", f"{limit - pos} stray bytes at the end")
            break
        magic, size = _INT_PAIR.unpack_from(buf, pos)
        if magic == BLANK_MAGIC and size == limit - pos:
            out.one(KIND_BLANK, pos, size, magic, Frame("blank", segment, pos, base_offset + pos, size, magic))
            break
        failed = None
        if magic == 0 and size == 0:
            failed = (END_OF_DATA, None, "zeros where the next entry would start (unwritten tail)")
        elif magic == BLANK_MAGIC:
            failed = (ErrorKind.BAD_LENGTH.value, "store_size", f"DLedger blank of {size} bytes, {limit - pos} left")
        elif magic != MAGIC:
            failed = (ErrorKind.BAD_MAGIC.value, "magic", f"DLedger entry magic {magic}, not {MAGIC}")
        elif size <= HEADER_SIZE or pos + BODY_OFFSET > limit:
            failed = (ErrorKind.BAD_LENGTH.value, "store_size", f"DLedger entry size {size}")
        elif pos + size > limit:
            failed = (ErrorKind.TRUNCATED.value, "store_size", f"DLedger entry of {size} bytes runs past the file")
        else:
            _, _, _, _, pos_field, _, _, _, body_size = _ENTRY_HEADER.unpack_from(buf, pos)
            if body_size + BODY_OFFSET != size:
                failed = (ErrorKind.SIZE_MISMATCH.value, "store_size", f"DLedger size {size} != 48 + bodySize "
                          f"{body_size}")
            elif pos_field != base_offset + pos:
                failed = (ErrorKind.PHYSICAL_OFFSET_MISMATCH.value, "physical_offset",
                          f"DLedger pos field {pos_field} != {base_offset + pos}")
        if failed is None:
            at, end = pos + BODY_OFFSET, pos + size
            found = frame_at(buf, at, end, base_offset, check_crc=check_crc)
            if found.kind == "message" and found.size == size - BODY_OFFSET:
                out.one(KIND_MESSAGE, at, found.size, found.magic)
                pos = end
                continue
            if found.kind == "message":
                stop_at(at, found.size, found.magic, ErrorKind.SIZE_MISMATCH.value, "store_size",
                        f"TOTALSIZE {found.size} != the DLedger entry's bodySize {size - BODY_OFFSET}")
            else:
                stop_at(at, found.size, found.magic, found.stop_kind or ErrorKind.BAD_MAGIC.value, found.stop_field,
                        found.stop_message or "")
            if not salvage:
                break
            pos = end  # the entry frames the damaged record: the walk goes on at the next entry
            continue
        kind, field_name, why = failed
        stop_at(pos, size, magic, kind, field_name, why)
        if not salvage:
            break
        nxt = next_header(buf, pos + 1, limit, base_offset)
        tail = 0
        if nxt is None:
            zeros = zero_tail_start(buf, pos, limit)
            if kind == END_OF_DATA or zeros <= pos:
                break
            tail, nxt = limit - zeros, None
            end = zeros
        else:
            end = nxt
        if kind != END_OF_DATA or nxt is not None:
            if end > pos:
                out.one(KIND_CORRUPT, pos, end - pos, 0, SalvageSpan(segment, pos, end - pos, kind,
                                                                    bytes(buf[pos:min(end, pos + excerpt_len)]),
                                                                    tail))
        if nxt is None:
            if tail:
                stop_at(end, 0, 0, END_OF_DATA, None, "zeros where the next entry would start (unwritten tail)")
            break
        pos = nxt
    return out.result()


def first_body(loc: fs.Location, length: int) -> bytes:
    """The body of a data file's first entry (its first CommitLog record), read alone; empty when the file does
    not start with an entry."""
    head = loc.read_range(0, BODY_OFFSET) if length >= BODY_OFFSET else b""
    if len(head) < BODY_OFFSET:
        return b""
    magic, size = _INT_PAIR.unpack_from(head, 0)
    if magic != MAGIC or not BODY_OFFSET < size <= length:
        return b""
    return loc.read_range(BODY_OFFSET, size - BODY_OFFSET)


def walk_frames(buf, segment: str, base_offset: int, *, decode: bool = True, check_crc: bool = True,
                salvage: bool = False):
    """:func:`walk_items` as the frames (and spans) ``walk_buffer`` / ``salvage_buffer`` yield, messages decoded
    when ``decode``; without ``salvage``, up to the first blank or stop."""
    from .codec import decode_record

    for item in walk_items(buf, segment, base_offset, check_crc=check_crc, salvage=salvage):
        if decode and getattr(item, "kind", None) == "message":
            item.message = decode_record(buf, item.file_position, limit=item.file_position + item.size, file=segment)
        yield item


def range_items(buf, segment: str, base_offset: int, start: int, end: int, last: bool, *, check_crc: bool = True,
                excerpt_len: int = 32):
    """The salvage items owned by the range [start, end) of a data file: from the first confirmed header at or
    after ``start`` (0: the file's start) to the first at or after ``end`` (the next range's start).  Returns
    (items, first, until) as store_format.scan.RangeWalk takes them."""
    limit = len(buf)
    first = 0 if start == 0 else next_header(buf, start, limit, base_offset, before=end)
    if first is None:
        from .commitlog import FrameArrays

        return FrameArrays.empty(segment, base_offset), None, None
    until = None if last else next_header(buf, end, limit, base_offset)
    items = walk_items(buf, segment, base_offset, start=first, limit=limit, until=until, check_crc=check_crc,
                       excerpt_len=excerpt_len)
    return items, first, until
