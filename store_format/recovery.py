"""A model of what the broker will do with this store when it starts (RocketMQ 4.9.7 ``DefaultMessageStore``).

Each rule below names the 4.9.7 method it follows.

* Start: every file the broker loads, in its order (``predict_recovery``'s ``start_problems``), by the rules of the
  RocketMQ that wrote the store (store_format.features: 4.9.7's, or 5.3.3's for a 5.x store): the config files
  ``ConfigManager.load`` reads, a file and its ``.bak`` (:func:`config_load_problems`); ``lock`` must open
  read-write (the ``DefaultMessageStore`` constructor: not a folder, socket or link loop) and take a write and
  ``force`` (``start()``: not a FIFO or device) (:func:`marker_problems`); (5.x) ``config/timercheck`` must map a
  page (:func:`timer_checkpoint_problems`); every ``MappedFileQueue`` folder -- ``commitlog/``, each consume
  queue, (5.x) each batch consume queue and ``timerlog/`` -- must hold files of exactly its file size with numeric
  names (:class:`LoadRules`, :func:`mapped_file_queue_problems`, :func:`store_load_problems`, with 5.3.3's queue
  types: :func:`queue_type_problems`); ``checkpoint`` must open read-write and map a page (``StoreCheckpoint``: a
  regular file, or none) (:func:`effective_checkpoint`); (5.x) the index must load; (5.x) ``TimerMessageStore.load``
  (:func:`timer_store_load_problems`); else the broker refuses to start.  What Java does with each kind of file
  was checked on OpenJDK 17 (:func:`java_rw_open`).
* ``abort`` present (``File.exists()``: a folder too) -> ``CommitLog.recoverAbnormally``, else
  ``CommitLog.recoverNormally``: walk from the third-last segment (``size - 3``, clamped
  to 0; 5.3.2 and later, so a 5.x store: from the last segment whose base offset is <= the consume queues' max
  physical offset, store-format.md section 10.4).  ``recoverAbnormally``: from the last segment backwards, the first
  whose first record has a V1 magic, a non-zero store time and a store time <= ``checkpoint.getMinTimestamp()``
  (``getMinTimestampIndex()`` when messageIndexSafe) (``isMappedFileMatchedRecover``); else segment 0.  Every
  record from there is re-dispatched.
* The walk (:func:`recovery_walk`, one segment at a time) checks body CRCs (``checkCRCOnRecover``) with
  ``checkMessageAndReturnSize`` (5.2.0 and later with ``forceVerifyPropCRC``: each record's ``__CRC32#`` instead,
  store-format-5x.md section 1.3) and stops at the first record it refuses; a blank moves to the next segment
  (after the last segment's blank the end is that blank).  The recovered max physical offset is where it
  stopped; later segments are deleted, later bytes are kept but ignored (``MappedFileQueue.truncateDirtyFiles``).
* Consume queues (:func:`recover_consume_queues`): ``ConsumeQueue.recover()`` cuts each queue at its first unit
  that fails ``offset >= 0 && size > 0``; then, when the queues' max physical offset is >= the recovered end,
  ``truncateDirtyLogicFiles`` cuts each at its first unit at or past that end; with no segment at all every
  queue is destroyed.
* A RocksDB queue store (5.3.3, ``storeType=defaultRocksDB``): its checkpoint row is the queues' max physical
  offset and decides where the walk starts (:func:`recovery_start`); ``truncateDirty`` moves queues' ``max`` rows
  back, and a database with no row is rebuilt by the re-dispatch (:func:`database_recovery`).
* Index files (``IndexService.load(lastExitOK)``): after an abnormal exit every index file whose header's
  endTimestamp > the checkpoint's indexMsgTimestamp is deleted (and rebuilt by the re-dispatch); see
  :func:`index_files_deleted_at_load`.

What the broker will do is decided from each segment's recovery-walk outcome (:class:`SegmentWalk`), not from
the bytes: :func:`predict_recovery` takes the walks as an argument (``walks``) and walks only the segments it
is not given, so an engine that walked the segments elsewhere (in parallel) feeds them in.  The records the
broker drops are enumerated by a separate step, :func:`lost_records`, from the salvage walk's items (see its
docstring for exactly which frames count).

The model uses the broker's own checks (no PHYSICALOFFSET check) so it predicts, rather than judges.
"""
from __future__ import annotations

import errno
import os
import stat
import struct
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Iterable

from . import batchcq, dledger
from . import layout as L
from .checkpoint import Checkpoint
from .codec import decode_record
from .consumequeue import (QueueRecovery, QueueStart, finish_queue, read_queue, recover_consume_queues,  # noqa: F401
                           recover_queue, truncates_queues)
from .commitlog import (END_OF_DATA, KIND_MESSAGE, Frame, SalvageSpan, Segment, dledger_header_run, dledger_items,
                        salvage_arrays, walk_arrays)
from .queues import dispatch_end as queue_dispatch_end
from .fs import ReadOnlyMap
from .errors import ErrorKind, StoreFormatError
from .fs import UnreadableError, read_bytes, scanned
from .brokerconf import RecoverySettings
from .store import Store

_I32_AT = lambda buf, pos: int.from_bytes(buf[pos:pos + 4], "big", signed=True)  # noqa: E731
_I64_AT = lambda buf, pos: int.from_bytes(buf[pos:pos + 8], "big", signed=True)  # noqa: E731
_LENGTH_FIELDS = ("body_length", "topic_length", "properties_length")
_END_TIMESTAMP_END = L.INDEX_HEADER.end("end_timestamp")  # the header bytes that recovery reads


# ---------------------------------------------------------------------------------------------------------
# One segment's recovery walk


def frames_a_message(stop_kind: str | None, stop_field: str | None) -> bool:
    """Whether a walk's stop is a damaged record whose header still frames a message: ``frame_at`` got past the
    magic and TOTALSIZE checks (a message magic, the header inside the segment, TOTALSIZE in [the layout's
    minimum, the bytes left in the segment]) and then refused it: PHYSICAL_OFFSET_MISMATCH (salvage walk only),
    BAD_LENGTH of BODYLENGTH / TOPICLENGTH / PROPERTIESLENGTH, SIZE_MISMATCH (TOTALSIZE != calMsgLength), or
    BAD_CRC.  Such a record has a known start and a declared length, so it can be named and counted; a torn
    tail, a zeroed page that leaves the header, a bad CRC and a size mismatch give one.  Not: END_OF_DATA,
    BAD_MAGIC (no message magic), TRUNCATED (TOTALSIZE runs past the segment, or the header is cut), BAD_LENGTH
    of TOTALSIZE (below the minimum, or a blank's TOTALSIZE that is not the bytes left)."""
    if stop_kind in (ErrorKind.BAD_CRC.value, ErrorKind.SIZE_MISMATCH.value,
                     ErrorKind.PHYSICAL_OFFSET_MISMATCH.value):
        return True
    return stop_kind == ErrorKind.BAD_LENGTH.value and stop_field in _LENGTH_FIELDS


@dataclass(frozen=True)
class SegmentWalk:
    """Where the broker's recovery walk of one segment, from the segment's start, ends: the closing ``blank``
    or ``stop`` of ``walk_buffer(..., check_crc=checkCRCOnRecover, check_physical_offset=False)`` (the broker
    has no PHYSICALOFFSET check, so this is not the salvage walk's first stop when that is a
    PHYSICAL_OFFSET_MISMATCH)."""

    segment: str
    base_offset: int
    position: int  # file position of the closing blank or stop
    kind: str  # "blank" | "stop"
    stop_kind: str | None = None  # END_OF_DATA or an ErrorKind value; None for a blank
    stop_field: str | None = None
    size: int = 0  # the TOTALSIZE field there (a blank's length; a stop's declared size, maybe garbage)

    @property
    def physical_offset(self) -> int:
        return self.base_offset + self.position

    @property
    def frames_message(self) -> bool:
        """The walk stopped at a damaged record whose header still frames a message (:func:`frames_a_message`)."""
        return self.kind == "stop" and frames_a_message(self.stop_kind, self.stop_field)

    @classmethod
    def of(cls, frame: Frame, base_offset: int) -> "SegmentWalk":
        """From a walk's closing frame."""
        return cls(frame.segment, base_offset, frame.file_position, frame.kind, frame.stop_kind, frame.stop_field,
                   frame.size)


def recovery_walk(segment: Segment, check_crc: bool = True, force_verify_prop_crc: bool = False,
                  salvage_stop: int | None = None) -> SegmentWalk:
    """The one definition of a segment's recovery walk (``CommitLog.checkMessageAndReturnSize`` record by record
    from the segment's start, as ``recoverNormally`` / ``recoverAbnormally`` do), framed in bulk.  With
    ``force_verify_prop_crc`` (and ``check_crc``, checkCRCOnRecover) the broker checks each record's ``__CRC32#``
    instead of its body CRC (store-format-5x.md section 1.3): the walk frames without the body CRC and ends at the
    first record the forced check refuses (:func:`forced_crc_stop`), if that comes first.

    ``salvage_stop``: the segment's first stop or blank as the salvage walk with the same ``check_crc`` found it
    (store_format.scan.SegmentEnds.first_stop, e.g. a data source's first pass).  That walk checks everything this
    one does and the PHYSICALOFFSET besides, so the broker accepts every record before it and this walk goes on
    from there instead of from the segment's start; not with the forced ``__CRC32#`` check, which the salvage walk
    does not make."""
    force = force_verify_prop_crc and check_crc
    if dledger.is_data_file(segment.loc):  # DLedger's own walk: headers only, no record CRC (its recover())
        with ReadOnlyMap(segment.path) as m:
            items = dledger_items(m.buf, segment.name, segment.base_offset, check_crc=False, salvage=False)
            return SegmentWalk.of(items.others[len(items) - 1], segment.base_offset)
    start = salvage_stop if salvage_stop is not None and not force else 0
    with ReadOnlyMap(segment.path) as m:
        items = walk_arrays(m.buf, segment.name, segment.base_offset, start=start, check_crc=check_crc and not force,
                            check_physical_offset=False)
        last = SegmentWalk.of(items.others[len(items) - 1], segment.base_offset)
        if force:
            msg = items.kinds == KIND_MESSAGE
            refused = forced_crc_stop(m.buf, items.positions[msg], items.sizes[msg])
            if refused is not None:
                pos, size, kind = refused
                last = SegmentWalk(segment.name, segment.base_offset, pos, "stop", kind, "properties", size)
        del items
    return last


def forced_crc_stop(buf, positions, sizes) -> tuple[int, int, str] | None:
    """``forceVerifyPropCRC``'s verdict on the records at ``positions`` (TOTALSIZEs ``sizes``, in walk order) of
    ``buf``: (position, size, NO_PROPERTY_CRC or BAD_PROPERTY_CRC) of the first record the broker refuses (it has no
    ``__CRC32#``, or the property's value, parsed as Java does, is not the CRC of ``[0, TOTALSIZE - 20)``), None when
    it keeps them all (store_format.propcrc.check_crc_many)."""
    import numpy as np

    from .propcrc import ABSENT, check_crc_many

    if not len(positions):
        return None
    verdict = check_crc_many(buf, positions, sizes)
    refused = np.flatnonzero(~verdict.force_ok)
    if not len(refused):
        return None
    i = int(refused[0])
    kind = ErrorKind.NO_PROPERTY_CRC if verdict.status[i] == ABSENT else ErrorKind.BAD_PROPERTY_CRC
    return int(positions[i]), int(sizes[i]), kind.value


# ---------------------------------------------------------------------------------------------------------
# What the broker drops


@dataclass
class LostRecords:
    """The records (and unframeable bytes) past the recovered end, as :func:`lost_records` counts them."""

    intact: list[tuple[int, int]] = field(default_factory=list)  # (physical offset, TOTALSIZE) of messages
    damaged: list[tuple[int, int, str]] = field(default_factory=list)  # (physical offset, declared TOTALSIZE, kind)
    unframed: list[tuple[int, int]] = field(default_factory=list)  # (physical offset, length) of unframed runs


def lost_records(items: Iterable, recovered_end: int, stop: SegmentWalk | None = None) -> LostRecords:
    """Every record the broker's recovery drops, from the salvage walk's items.

    ``items``: the items (:class:`~store_format.commitlog.Frame` / :class:`~store_format.commitlog.SalvageSpan`)
    of the salvage walk (``salvage_buffer`` / ``salvage_arrays``, CRC checked as the recovery walk was) of every
    segment that holds bytes at or past ``recovered_end``, each segment walked from its start, in order (the
    commitlog data source's ``walk=salvage`` rows are exactly these items).  ``stop``: the recovery walk's
    outcome at the recovered end (the :class:`SegmentWalk` whose position it is), or None.  Counted, among the
    items at physical offsets >= ``recovered_end``:

    * intact: every ``message`` frame;
    * damaged: every ``stop`` frame whose header still frames a message (:func:`frames_a_message`), with its
      declared TOTALSIZE and stop kind; and ``stop`` itself when it frames a message and no damaged frame of
      the items is at the recovered end (the salvage walk, which also checks PHYSICALOFFSET, may have resynced
      past it);
    * unframed: for each span (clipped to start at ``recovered_end``), the bytes from the end of the damaged
      record that starts where the clipped span starts (none: from the span's start) to the span's end, when
      there are any.  These held records whose headers are gone (at least one per run, when the broker wrote
      them); they cannot be counted.  The segments' unwritten zero tails are never in a span.

    ``messages_lost`` = intact + damaged.  Blanks, END_OF_DATA stops and stops that do not frame a message
    count for nothing (their bytes, if not zeros, are in the span that follows them)."""
    out = LostRecords()
    damaged_at = {}
    spans = []
    for it in items:
        if isinstance(it, SalvageSpan):
            start = _absolute(it)
            end = start + it.length
            if end > recovered_end:
                spans.append((max(start, recovered_end), end))
            continue
        if it.physical_offset < recovered_end:
            continue
        if it.kind == "message":
            out.intact.append((it.physical_offset, it.size))
        elif it.kind == "stop" and frames_a_message(it.stop_kind, it.stop_field):
            damaged_at[it.physical_offset] = (it.physical_offset, it.size, it.stop_kind)
    if stop is not None and stop.frames_message and stop.physical_offset not in damaged_at \
            and stop.physical_offset >= recovered_end:
        damaged_at[stop.physical_offset] = (stop.physical_offset, stop.size, stop.stop_kind)
    out.damaged = sorted(damaged_at.values())
    for start, end in spans:
        covered = damaged_at.get(start)
        first = start + covered[1] if covered else start
        if first < end:
            out.unframed.append((first, end - first))
    return out


def _absolute(span: SalvageSpan) -> int:
    """A span's physical offset (spans carry their segment name, which is the base offset)."""
    return int(span.segment) + span.file_position


def walk_lost_records(store: Store, recovered_end: int, stop: SegmentWalk | None = None, *,
                      check_crc: bool = True) -> LostRecords:
    """:func:`lost_records` with the salvage walks done here, on the segments that hold bytes at or past
    ``recovered_end`` (in bulk; every message before the recovery stop passed the CRC check already)."""
    items = []
    for seg in store.segments:
        if seg.base_offset + seg.length <= recovered_end:
            continue
        checked = recovered_end - seg.base_offset if check_crc and seg.base_offset <= recovered_end else 0
        with ReadOnlyMap(seg.path) as m:
            if dledger.is_data_file(seg.loc):
                arrays = dledger_items(m.buf, seg.name, seg.base_offset, check_crc=check_crc)
            else:
                arrays = salvage_arrays(m.buf, seg.name, seg.base_offset, check_crc=check_crc,
                                        crc_checked_before=max(0, checked))
            keep = (arrays.positions + seg.base_offset >= recovered_end) | (arrays.kinds != KIND_MESSAGE)
            items.extend(arrays.take(keep))
            del arrays
    return lost_records(items, recovered_end, stop)


def describe_damaged_record(buf, pos: int, limit: int | None = None) -> dict:
    """What a damaged record that still frames a message (:func:`frames_a_message`) says about itself: the whole
    record decoded without the CRC check when its lengths add up (BAD_CRC, PHYSICAL_OFFSET_MISMATCH), else its
    fixed header (queue id, queue offset, store time...) with the topic only when BODYLENGTH and TOPICLENGTH
    still fit.  Keys: topic (or None), queue_id, queue_offset, store_timestamp, sys_flag, uniq_key and keys (the
    KEYS property; None and [] when the properties cannot be read), and, only when they can, real_topic
    (REAL_TOPIC or None)."""
    limit = len(buf) if limit is None else limit
    try:
        msg = decode_record(buf, pos, limit=limit, check_crc=False)
        return dict(topic=msg.topic, queue_id=msg.queue_id, queue_offset=msg.queue_offset,
                    store_timestamp=msg.store_timestamp, sys_flag=msg.sys_flag, uniq_key=msg.uniq_key, keys=msg.keys,
                    real_topic=msg.properties.get(L.PROPERTY_REAL_TOPIC))
    except StoreFormatError:
        pass
    version = L.MESSAGE_MAGICS.get(_I32_AT(buf, pos + L.MAGIC_OFFSET), 1)
    lay = L.layout_for(_I32_AT(buf, pos + L.SYS_FLAG_OFFSET), version)
    values = dict(zip(lay.header_names, struct.unpack_from(lay.header_struct, buf, pos))) \
        if pos + lay.body_offset <= limit else {}
    topic = None
    size = values.get("store_size", 0)
    body_len = values.get("body_length", -1)
    p = pos + lay.body_offset + body_len
    if values and 0 <= body_len and p + lay.topic_length_width <= min(limit, pos + size):
        n = buf[p] if version == 1 else int.from_bytes(buf[p:p + 2], "big", signed=True)
        if 0 < n <= pos + size - p - lay.topic_length_width:
            raw = bytes(buf[p + lay.topic_length_width:p + lay.topic_length_width + n])
            topic = raw.decode("utf-8", "replace")
    return dict(topic=topic, queue_id=values.get("queue_id"), queue_offset=values.get("queue_offset"),
                store_timestamp=values.get("store_timestamp"), sys_flag=values.get("sys_flag"), uniq_key=None, keys=[])


# ---------------------------------------------------------------------------------------------------------
# The store as the broker's load() sees it


def java_rw_open(path: Path, stat_result: os.stat_result | None = None) -> tuple[str | None, str | None]:
    """How ``new RandomAccessFile(path, "rw")`` fares (``open(O_RDWR | O_CREAT)``, following symbolic links), as
    (why it throws or None, what ``path`` is).  Checked against OpenJDK 17: a folder throws ("Is a directory"), a
    socket throws ("No such device or address"), a symbolic link loop throws ("Too many levels of symbolic
    links"), a dangling link creates its target when the target's folder exists (else "No such file or
    directory"); a FIFO or a device opens (what follows may not: see :func:`effective_checkpoint`).
    ``stat_result``: ``os.stat(path)`` when the caller has it already (a folder of thousands of segments)."""
    import errno
    import stat as st

    from .fs import StorePath

    if isinstance(path, StorePath):  # another file system: files and folders only, no links
        kind = path.loc.info().type.name
        return ("Is a directory", "a folder") if kind == "Directory" else \
            (None, "a regular file" if kind == "File" else "absent")
    try:
        mode = (stat_result or os.stat(path)).st_mode
    except OSError as e:
        if e.errno == errno.ENOENT:
            if not os.path.islink(path) or os.path.isdir(os.path.dirname(os.path.realpath(path))):
                return None, "absent" if not os.path.islink(path) else "a dangling symbolic link"
            return "No such file or directory", "a dangling symbolic link into a missing folder"
        if e.errno == errno.ELOOP:
            return "Too many levels of symbolic links", "a symbolic link loop"
        return os.strerror(e.errno or 0), "a path that cannot be followed"
    if st.S_ISDIR(mode):
        return "Is a directory", "a folder"
    if st.S_ISSOCK(mode):
        return "No such device or address", "a socket"
    return None, "a regular file" if st.S_ISREG(mode) else "a FIFO" if st.S_ISFIFO(mode) else "a device"


def effective_checkpoint(root: Path) -> tuple[Checkpoint | None, list[str], list[str]]:
    """The checkpoint values the broker works with (``new StoreCheckpoint(path)``), with start problems and notes.

    A missing file is created, so every value is 0; an existing regular file is mapped read-write over one
    4096-byte page (which extends a short file with zeros), so a short file's missing bytes read as 0 and only
    the first three longs count (4.x).  ``new StoreCheckpoint`` throws inside ``DefaultMessageStore.load()``,
    which then fails (the broker will not start: None), when ``new RandomAccessFile(file, "rw")`` does (a folder,
    a socket, a link loop: :func:`java_rw_open`) and when ``fileChannel.map(READ_WRITE, 0, 4096)`` does: a FIFO
    or a device cannot be extended to the page ("Invalid argument", OpenJDK 17).  A dangling link is a missing
    file (``File.exists()`` is false) whose target is created."""
    path = root / "checkpoint"
    refused, what = page_map_refusal(path)
    if refused is not None:
        return None, [f"checkpoint is {what}: new StoreCheckpoint() throws ({refused}), so "
                      "DefaultMessageStore.load() fails"], []
    if not path.exists():  # File.exists follows symbolic links
        return Checkpoint(0, 0, 0, file_length=0), [], [
            "no checkpoint file: StoreCheckpoint creates one and reads every value as 0"]
    notes = []
    try:
        raw = read_bytes(path, L.CHECKPOINT_MIN_SIZE)
    except UnreadableError as e:  # no permission here: the broker (its own user) may read it
        notes.append(f"checkpoint cannot be read here ({e.reason}): read as zeros")
        raw = b""
    if len(raw) < L.CHECKPOINT_MIN_SIZE:
        if not notes:
            notes.append(f"checkpoint is {len(raw)} bytes: StoreCheckpoint maps a 4096-byte page over it, so the "
                         "missing bytes read as 0")
        raw = raw + bytes(L.CHECKPOINT_MIN_SIZE - len(raw))
    values = struct.unpack_from(L.CHECKPOINT.head_struct(L.CHECKPOINT_MIN_MEMBERS), raw)
    return Checkpoint(*values, file_length=path.stat().st_size), [], notes


def page_map_refusal(path: Path) -> tuple[str | None, str]:
    """Why ``new RandomAccessFile(path, "rw")`` and ``fileChannel.map(READ_WRITE, 0, 4096)`` throw, as
    ``StoreCheckpoint`` and ``TimerCheckpoint`` open their file (None when they do not), and what ``path`` is: the
    open refuses a folder, a socket or a link loop (:func:`java_rw_open`); the map cannot extend a FIFO or a device
    to the page ("Invalid argument", OpenJDK 17).  Any regular file maps, whatever its length: the first page is
    what counts."""
    refused, what = java_rw_open(path)
    if refused is None and what in ("a FIFO", "a device"):
        refused = "Invalid argument, from fileChannel.map(READ_WRITE, 0, 4096)"
    return refused, what


def java_parse_long(text: str) -> int | None:
    """``Long.parseLong(text)``, or None where it throws NumberFormatException: an optional sign then one or more
    decimal digits (Character.digit: any Unicode decimal digit), within the signed 64-bit range."""
    import unicodedata

    if text.isascii() and text.isdigit():  # a plain segment name: the same value as the digit by digit parse below
        value = int(text)
        return value if value < 2**63 else None
    body = text[1:] if text[:1] in "+-" else text
    if not body:
        return None
    digits = []
    for ch in body:
        d = unicodedata.decimal(ch, None)
        if d is None:
            return None
        digits.append(d)
    value = 0
    for d in digits:
        value = value * 10 + d
    if text[0] == "-":
        value = -value
    return value if -2**63 <= value < 2**63 else None


def index_files_deleted_at_load(index_dir: Path, last_exit_ok: bool, index_msg_timestamp: int,
                                generation: str = "4.x") -> tuple[list[str], list[str], list[tuple[str, str]]]:
    """The index files ``IndexService.load(lastExitOK)`` deletes, notes, and start problems.

    Every entry of ``index/`` in sorted order: a name ``Long.parseLong`` refuses is skipped (NumberFormatException
    is caught: neither loaded nor deleted); an entry that cannot be opened (a folder: ``new IndexFile`` throws an
    IOException) ends the load (``load`` returns false): it and every later entry are neither loaded nor deleted,
    and 5.x's ``DefaultMessageStore.load()`` fails with it (4.9.7 ignores the result: a note); any other file is
    loaded, its header read from its first
    40 bytes whatever its length or geometry (the broker maps the configured size, extending a short file with
    zeros, so missing header bytes read as 0; a dangling link's target is created, all zeros), and after an
    abnormal exit (``!lastExitOK``) deleted when its endTimestamp > the checkpoint's indexMsgTimestamp.  Normal
    exit: nothing is deleted."""
    deleted, notes, problems = [], [], []
    if not index_dir.is_dir():
        return deleted, notes, problems
    for entry in sorted(index_dir.iterdir(), key=lambda p: p.name):
        if java_parse_long(entry.name) is None:
            continue
        if entry.is_dir():
            if generation == "5.x":
                problems.append((f"index/{entry.name}", f"index/{entry.name} is a folder: new IndexFile throws, so "
                                 "IndexService.load returns false and DefaultMessageStore.load() fails"))
            else:
                notes.append(f"index/{entry.name} is a folder: IndexService.load stops there (new IndexFile throws), "
                             "and it and every later index file are neither loaded nor deleted")
            break
        head = b""
        if entry.is_file():
            try:
                head = read_bytes(entry, _END_TIMESTAMP_END)
            except UnreadableError:
                head = b""
        end_timestamp = L.INDEX_HEADER.read(head.ljust(_END_TIMESTAMP_END, b"\0"), "end_timestamp")
        if not last_exit_ok and end_timestamp > index_msg_timestamp:
            deleted.append(entry.name)
    return deleted, notes, problems


@dataclass(frozen=True)
class LoadRules:
    """What the broker's ``MappedFileQueue.doLoad`` does with a folder's entries, by the RocketMQ that wrote the
    store (:func:`load_rules`).  Every version sorts ``listFiles()`` by name and returns false at the first entry
    whose ``File.length()`` is not the folder's file size (``load()`` then fails); an entry of the right length is
    mapped by ``new MappedFile``, whose ``Long.parseLong`` of the name throws NumberFormatException (out of
    ``load()``) and whose ``RandomAccessFile "rw"`` throws an IOException for a folder (doLoad returns false).
    4.9.7 (and 5.0.0) take every entry, folders too; 5.1.0 skips folders (``File.isDirectory``); 5.1.4 and later
    also delete an empty entry that is the last one of the sorted list (``file.length() == 0 && i ==
    files.size() - 1``: an empty file, a FIFO, a socket, a device or a dangling link) instead of failing."""

    version: str  # the RocketMQ whose rules these are
    skips_folders: bool
    deletes_empty_last: bool


LOAD_RULES = {"4.x": LoadRules("4.9.7", False, False), "5.x": LoadRules("5.3.3", True, True)}


def load_rules(generation: str) -> LoadRules:
    """The MappedFileQueue rules of a store of ``generation`` (store_format.features: ``4.x`` or ``5.x``; a 5.x store
    is predicted with 5.3.3's)."""
    return LOAD_RULES[generation]


@dataclass(frozen=True)
class RolledFolder:
    """A folder the broker loads as one ``MappedFileQueue``: the commit log, one consume queue, one batch consume
    queue, the timer log (and later the compaction log).  ``rel`` names it from the store root; ``file_size`` is
    its setting's value (broker.conf's, else the files': None when neither tells); ``loader`` is the load that
    fails with it."""

    path: Path | str  # a consume queue's local folder: its path as text
    rel: str
    file_size: int | None
    setting: str  # the MessageStoreConfig setting of its file size
    loader: str = "load()"
    noun: str = "file"  # what one of its files is (a commit-log "segment")


def mapped_file_queue_problems(folder: RolledFolder, rules: LoadRules) -> tuple[list[tuple[str, str]], list[str]]:
    """Why ``MappedFileQueue.load`` / ``doLoad`` fails on ``folder`` under ``rules``, as (file, reason) pairs, and
    notes.  Every entry of the folder counts, not only file names the readers take: a hidden file, a ``.bak`` copy,
    a folder (4.x), a FIFO, a link.  The broker logs only the first failure; every one is listed here.  A numeric
    name that is not 20 digits loads as the file at that offset (a note: the model ignores it)."""
    problems, notes = [], []
    try:
        entries = _listed(folder.path)
    except OSError as e:
        if e.errno in _NOT_A_FOLDER:  # no such folder (Path.is_dir's False): nothing to load
            return problems, notes
        return problems, [f"{folder.rel}/ cannot be listed here ({e.strerror}): its entries are not checked"]
    size = folder.file_size
    for i, entry in enumerate(entries):
        rel = f"{folder.rel}/{entry.name}"
        try:  # one stat an entry: its length, File.isDirectory (through links) and the open's outcome
            looked = entry.stat()
            length = looked.st_size
        except OSError:
            looked, length = None, 0
        is_folder = _is_dir(entry) if not isinstance(looked, os.stat_result) else stat.S_ISDIR(looked.st_mode)
        if rules.skips_folders and is_folder:
            continue
        # the same stat for the open's outcome (a folder of thousands of segments: one stat of each less)
        kind = java_rw_open(entry, looked if isinstance(looked, os.stat_result) else None)[1]
        what = f"{length} bytes" if kind == "a regular file" else "a folder" if kind == "a folder" else \
            f"{kind} (File.length() {length})"
        if rules.deletes_empty_last and not length and i == len(entries) - 1:
            notes.append(f"{rel} is {what} and the last entry of {folder.rel}/: MappedFileQueue.doLoad deletes it "
                         f"({rules.version}) and loads the rest")
        elif size and length != size:
            problems.append((rel, f"{rel} is {what}, not {folder.setting} {size}: MappedFileQueue.doLoad refuses it "
                                  f"and {folder.loader} fails"))
        elif java_parse_long(entry.name) is None:
            problems.append((rel, f"{rel}: its name is not an offset (Long.parseLong fails in new MappedFile), so "
                                  f"{folder.loader} fails"))
        elif is_folder:
            problems.append((rel, f"{rel} is a folder: new MappedFile cannot open it, so MappedFileQueue.doLoad "
                                  "fails"))
        elif not (len(entry.name) == L.SEGMENT_NAME_DIGITS and entry.name.isascii() and entry.name.isdigit()):
            notes.append(f"{rel} loads as the {folder.noun} at offset {java_parse_long(entry.name)} (its name parsed "
                         "by Long.parseLong, sorted among the others by name); this prediction ignores it")
    return problems, notes


# what pathlib's is_dir takes for "not a folder" rather than an error: absent, not a folder, a link loop
_NOT_A_FOLDER = (errno.ENOENT, errno.ENOTDIR, errno.EBADF, errno.ELOOP)


def _listed(folder) -> list:
    """The entries of ``folder`` by name: a local folder's as ``os.DirEntry``s (one ``scandir``; an entry's ``stat``
    and ``is_dir`` follow links, as a ``Path``'s do, and ``java_rw_open`` takes it as a path), another file
    system's as ``StorePath``s.  OSError where it is not a folder or cannot be listed (a link to one is listed)."""
    from .fs import StorePath

    if isinstance(folder, StorePath):
        if not folder.is_dir():
            raise NotADirectoryError(errno.ENOTDIR, "Not a directory", str(folder))
        return sorted(folder.iterdir(), key=lambda e: e.name)
    return scanned(folder)


def _is_dir(entry) -> bool:
    """``Path.is_dir`` of a listed entry (links followed; False where it cannot be looked at)."""
    try:
        return entry.is_dir()
    except OSError:
        return False


def shared_file_size(folders) -> int | None:
    """The file size a setting gives every folder of one kind (each consume queue's), as their files show it
    (``folders``: each folder's (base offset, length) pairs): the commonest non-zero length when every spacing of
    the names is a multiple of it (a file missing between two others leaves a wider one), else the smallest
    spacing (most files cut to one length); None when no file tells."""
    from collections import Counter

    lengths = Counter(n for f in folders for _, n in f if n)
    spacings = [b - a for f in folders for (a, _), (b, _) in zip(sorted(f), sorted(f)[1:]) if b > a]
    common = lengths.most_common(1)[0][0] if lengths else None
    if common and all(g % common == 0 for g in spacings):
        return common
    return min(spacings, default=common)


def store_folders(store: Store, generation: str) -> list[RolledFolder]:
    """The MappedFileQueue folders ``DefaultMessageStore.load()`` loads, in its order: the commit log, then each
    consume queue (``consumequeue/<topic>/<queue>``: every topic folder, every queue entry whose name
    Integer.parseInt reads), then (5.x, ``ConsumeQueueStore.load``) each batch consume queue.  Sizes: broker.conf's
    (``Store``'s geometry) else the files' (:func:`shared_file_size`)."""
    from .queues import backends_of

    out = [RolledFolder(store.root / "commitlog", "commitlog", store.segment_size, "mappedFileSizeCommitLog",
                        noun="segment")]
    for backend in backends_of(generation):
        part = backend.folder
        size = store.given_file_sizes.get(part) or shared_file_size(
            [[(f.base_offset, f.length) for f in q.files] for q in store.queue_models if q.backend is backend])
        out += [RolledFolder(q, rel, size, backend.setting) for rel, q in _queue_folders(store.root / part)]
    return out


def _queue_folders(part: Path) -> list[tuple[str, Path | str]]:
    """(rel, folder) of every queue ``loadConsumeQueues`` loads under ``part`` (consumequeue/ or
    batchconsumequeue/): each topic folder's entries whose names Integer.parseInt reads, by name (the broker lists
    them in the file system's order)."""
    from .fs import StorePath
    from .rolled import queue_id_of

    def folders(where, keep=lambda name: True):
        try:  # a folder that cannot be listed here: metadata.store_file_unreadable says so; its queues are not judged
            return [e for e in _listed(where) if _is_dir(e) and keep(e.name)]
        except OSError:
            return []

    # a local folder as its listed path's text (no Path made for each of 40,000 queues), another as its StorePath
    path = (lambda e: e) if isinstance(part, StorePath) else (lambda e: e.path)  # noqa: E731
    return [(f"{part.name}/{topic.name}/{q.name}", path(q)) for topic in folders(part)
            for q in folders(path(topic), lambda name: queue_id_of(name) is not None)]


def store_load_problems(store: Store, generation: str) -> tuple[list[tuple[str, str]], list[str]]:
    """Why ``DefaultMessageStore.load()`` fails on the commit log and the (batch) consume queues (every
    :func:`store_folders` folder under :func:`load_rules`, and 5.3.3's queue types: :func:`queue_type_problems`),
    as (file, reason) pairs, and notes."""
    rules = load_rules(generation)
    problems, notes = [], []
    for folder in store_folders(store, generation):
        p, n = mapped_file_queue_problems(folder, rules)
        problems += p
        notes += n
    if generation == "5.x":
        problems += queue_type_problems(store)
    return problems, notes


def queue_type_problems(store: Store) -> list[tuple[str, str]]:
    """``ConsumeQueueStore.loadConsumeQueues`` (5.3.3) checks each topic's queue type against topics.json before it
    loads a queue (``queueTypeShouldBe``): a topic under consumequeue/ must not be ``queue.type=BatchCQ``, one under
    batchconsumequeue/ must be (no entry, or no attribute, is SimpleCQ), and a value that is neither fails
    ``CQType.valueOf``; the RuntimeException fails ``load()``.  Without topics.json (nor its .bak) in the dump the
    broker's topics are unknown, not absent: nothing is checked."""
    from .config import topic_configs

    cfg = store.config("topics.json")
    if cfg.data is None:
        return []
    try:
        table = topic_configs(cfg)
    except StoreFormatError:  # not a map: the file's own problem (the metadata family, and its load)
        return []
    out = []
    from .queues import backends_of

    for part, expected in ((b.folder, b.queue_type) for b in backends_of("5.x") if b.queue_type):
        seen = set()
        for rel, _ in _queue_folders(store.root / part):
            topic = rel.split("/")[1]
            if topic in seen:
                continue
            seen.add(topic)
            conf = table.get(topic)
            attributes = conf.get("attributes") if isinstance(conf, dict) else None
            actual = attributes.get(L.TOPIC_ATTRIBUTE_QUEUE_TYPE, L.QUEUE_TYPE_SIMPLE) \
                if isinstance(attributes, dict) else L.QUEUE_TYPE_SIMPLE
            if actual not in (L.QUEUE_TYPE_SIMPLE, L.QUEUE_TYPE_BATCH):
                out.append((f"{part}/{topic}", f"{part}/{topic}: topics.json gives {topic} queue.type={actual!r}, "
                                               "which CQType.valueOf refuses, so ConsumeQueueStore.load() fails"))
            elif actual != expected:
                out.append((f"{part}/{topic}", f"{part}/{topic}: topics.json gives {topic} queue.type={actual}, so "
                                               f"ConsumeQueueStore.load() throws (\"The queue type of topic: {topic} "
                                               f"should be {expected}, but is {actual}\") and fails"))
    return out


#: the config files ``ConfigManager.load()`` reads as the broker initializes, before its store is opened
#: (``BrokerController.initialize`` / 5.x ``initializeMetadata``), in its order: a load that fails stops the broker.
#: ``delayOffset.json`` (ScheduleMessageService) and 5.x's ``timermetrics`` load after the store.
METADATA_CONFIGS = {"4.x": ("topics.json", "consumerOffset.json", "subscriptionGroup.json", "consumerFilter.json"),
                    "5.x": ("topics.json", "topicQueueMapping.json", "consumerOffset.json", "subscriptionGroup.json",
                            "consumerFilter.json", "consumerOrderInfo.json")}
DELAY_OFFSETS = "delayOffset.json"


def config_load_problems(config_dir: Path, names, offset_scan=None) -> list[tuple[str, str]]:
    """(file, reason) for each config file of ``names`` whose ``ConfigManager.load()`` fails
    (:func:`store_format.config.config_load_failure`, ``offset_scan`` its compiled scanner of consumer offsets).
    With ``enableLmq`` the broker's consumer offsets are lmqConsumerOffset.json (``LmqConsumerOffsetManager``)
    instead of consumerOffset.json: that file is read where the dump has it (or its .bak)."""
    from .config import LMQ_CONSUMER_OFFSET_FILE, config_load_failure
    from .timer import timer_metrics_decode_problem

    lmq = any((config_dir / f).exists() for f in (LMQ_CONSUMER_OFFSET_FILE, LMQ_CONSUMER_OFFSET_FILE + ".bak"))
    out = []
    for name in names:
        if name == "consumerOffset.json" and lmq:
            name = LMQ_CONSUMER_OFFSET_FILE
        why = config_load_failure(config_dir, name,
                                  timer_metrics_decode_problem if name == L.TIMER_METRICS_FILE else None, offset_scan)
        if why:
            out.append((f"config/{name}", f"config/{why}, so the broker does not start"))
    return out


def timer_checkpoint_problems(root: Path) -> list[tuple[str, str]]:
    """``new TimerCheckpoint(config/timercheck)`` (5.x, ``BrokerController.initializeMessageStore``): it opens and
    maps its page as the store's checkpoint does (:func:`page_map_refusal`); an exception fails the broker's
    initialization.  A missing file is created; a file of another length maps (its first page counts: the timers
    family's ``timers.timercheck_bad_length`` says what is read)."""
    refused, what = page_map_refusal(root / "config" / L.TIMER_CHECK_FILE)
    if refused is None:
        return []
    return [(f"config/{L.TIMER_CHECK_FILE}", f"config/{L.TIMER_CHECK_FILE} is {what}: new TimerCheckpoint() throws "
                                             f"({refused}), so BrokerController.initializeMessageStore() fails")]


def timer_store_load_problems(store: Store) -> tuple[list[tuple[str, str]], list[str]]:
    """``TimerMessageStore.load()`` (5.3.3, after the message store's load): ``TimerLog.load()`` -- timerlog/, a
    MappedFileQueue of mappedFileSizeTimerLog files (:func:`mapped_file_queue_problems`) -- and
    ``TimerMetrics.load()`` -- config/timermetrics through ``ConfigManager.load`` (:func:`config_load_problems`);
    either false stops the broker."""
    size = store.given_file_sizes.get(L.TIMER_LOG_DIR) or shared_file_size(
        [[(f.base_offset, f.length) for f in store.timer_log]])
    folder = RolledFolder(store.root / L.TIMER_LOG_DIR, L.TIMER_LOG_DIR, size, "mappedFileSizeTimerLog",
                          loader="TimerMessageStore.load()")
    problems, notes = mapped_file_queue_problems(folder, load_rules("5.x"))
    return problems + config_load_problems(store.root / "config", (L.TIMER_METRICS_FILE,)), notes


def marker_problems(root: Path) -> tuple[list[tuple[str, str]], list[tuple[str, str]]]:
    """What a ``lock`` of an unusual kind does, as (problems met before recovery, problems met after it).

    The ``DefaultMessageStore`` constructor opens it with ``new RandomAccessFile(lock, "rw")``, which throws for a
    folder, a socket or a link loop (:func:`java_rw_open`), so ``BrokerController.initialize()`` fails before any
    recovery.  A FIFO or a device opens, and ``load()`` recovers the store; then ``DefaultMessageStore.start()``
    locks it, writes "lock" and calls ``force(true)``, which throws for them ("Invalid argument", OpenJDK 17):
    the broker does not start, after recovery.  The broker will not start either way."""
    refused, what = java_rw_open(root / "lock")
    if refused is not None:
        return [("lock", f"lock is {what}: the DefaultMessageStore constructor cannot open it (RandomAccessFile "
                         f"\"rw\" throws: {refused}), so BrokerController.initialize() fails before any recovery")], []
    if what in ("a FIFO", "a device"):
        return [], [("lock", f"lock is {what}: DefaultMessageStore.start() locks it and writes to it, and "
                             "fileChannel.force(true) throws (Invalid argument), so the broker does not start, after "
                             "load() has recovered the store")]
    return [], []


def abort_notes(root: Path, markers) -> list[str]:
    """Notes on an ``abort`` that is not a regular file.  ``abort``: ``isTempFileExist()`` is ``File.exists()``, true for a folder too, so the start is an
    abnormal recovery; ``createTempFile()`` at start leaves an existing entry alone, and the clean ``shutdown()``
    removes it with ``File.delete()``, which cannot delete a folder that is not empty: every later start is then
    abnormal as well.  A FIFO, socket or device exists too (abnormal; ``File.delete`` removes it at shutdown); a
    dangling link or a link loop does not (``File.exists()`` is false): a normal start."""
    abort = root / "abort"
    if markers.abort_kind == "folder":
        if any(abort.iterdir()):
            return ["abort is a folder that is not empty: File.exists() is true, so the broker recovers abnormally; "
                    "a clean shutdown cannot delete it (File.delete fails on a non-empty folder), so every later "
                    "start recovers abnormally too until it is removed"]
        return ["abort is an empty folder: File.exists() is true, so the broker recovers abnormally (a clean "
                "shutdown deletes it)"]
    if markers.abort_kind == "other":
        return ["abort is not a regular file (a FIFO, a socket or a device): File.exists() is true, so the broker "
                "recovers abnormally"]
    return []


# ---------------------------------------------------------------------------------------------------------
# A RocksDB queue store (storeType=defaultRocksDB, 5.3.3)


@dataclass(frozen=True)
class QueueRebuild:
    """A database queue store with no row at all (its writes skip the WAL: a crash before any flush loses every
    row), which the broker's recovery rebuilds from the CommitLog: ``mode``'s walk re-dispatches every record from
    ``from_offset`` (segment ``start_segment``) to the recovered end, ``bytes`` of CommitLog.
    ``first_record_skipped``: a normal recovery (no ``abort``) dispatches only records past the checkpoint (0
    here), so the record at physical offset 0 gets no unit.  ``commitlog_min_offset``: the first segment's base
    offset; units of records before it are not rebuilt (a queue whose records all lie before it restarts at queue
    offset 0)."""

    backend: str
    mode: str
    start_segment: str | None
    from_offset: int
    end_offset: int
    commitlog_min_offset: int
    first_record_skipped: bool
    #: {(topic, queue id): its max offset after the rebuild} (:func:`rebuilt_queue_ends`); a queue not in it: 0
    queue_ends: dict = field(default_factory=dict, compare=False)

    @property
    def bytes(self) -> int:
        return max(0, self.end_offset - self.from_offset)


def rebuilt_queue_ends(store: Store, rebuild: QueueRebuild, check_crc: bool = True) -> dict:
    """Each queue's max offset once the broker has rebuilt an empty database queue store: the queue is rebuilt at
    its records' own queue offsets from the records the recovery re-dispatches (from ``rebuild.from_offset`` to
    the recovered end; not the record at offset 0 when ``first_record_skipped``), those that get a unit of their
    own in ``consumequeue/`` (a NOT or COMMIT transaction type, a topic no ``queue.type`` sends elsewhere:
    store_format.queues.Dispatch), so its max is its last such record's queue offset + 1.  A Python walk of those
    segments: it runs only for an empty database."""
    from .commitlog import walk_buffer
    from .queues import FILE, Dispatch

    dispatch, ends = Dispatch.of(store), {}
    for seg in store.segments:
        if seg.base_offset + seg.length <= rebuild.from_offset or seg.base_offset >= rebuild.end_offset:
            continue
        with ReadOnlyMap(seg.path) as m:
            for fr in walk_buffer(m.buf, seg.name, seg.base_offset, check_crc=check_crc):
                phys = fr.physical_offset
                if fr.kind != "message" or phys >= rebuild.end_offset:
                    break
                msg = fr.message
                if phys < rebuild.from_offset or (phys == 0 and rebuild.first_record_skipped) or \
                        msg.sys_flag & L.TRANSACTION_MASK not in (L.TRANSACTION_NOT_TYPE, L.TRANSACTION_COMMIT_TYPE):
                    continue
                key = (msg.topic, msg.queue_id)
                ends[key] = max(ends.get(key, 0), msg.queue_offset + 1)
    own = dispatch.own_units_in(FILE.folder, [t for t, _ in ends])
    return {key: end for (key, end), mine in zip(ends.items(), own) if mine}


@dataclass(frozen=True)
class UnservedUnits:
    """Units of one queue whose messages the recovered CommitLog keeps but the broker no longer serves after its
    recovery, by a mistake of its own (``cause``): ``rocksdb_truncate_dirty``, RocketMQ 5.3.3's truncateDirty
    search keeping one unit too few at the cut (the queue's max offset goes back to ``served_max``; the keys past
    it stay until new messages overwrite them); ``dledger_abnormal_header``, 5.3.3's abnormal DLedger recovery
    truncating the consume queues 48 bytes per entry short of DLedger's end, at ``detail`` = (that cut, DLedger's
    end, where the reput starts), and its reput never rebuilding them (the queue ends at ``served_max``).
    ``queue_offsets`` and ``physical_offsets``: the messages."""

    topic: str
    queue_id: int
    cause: str
    served_max: int
    queue_offsets: tuple[int, ...]
    physical_offsets: tuple[int, ...]
    detail: tuple = ()

    @property
    def messages(self) -> int:
        return len(self.queue_offsets)

    def why(self, recovered_end: int) -> str:
        """What the broker gets wrong, in words (the finding's ``why``)."""
        if self.cause == "dledger_abnormal_header":
            cut, end, reput_from = self.detail
            return (f"RocketMQ 5.3.3's abnormal DLedger recovery truncates the consume queues at physical offset "
                    f"{cut}, {end - cut} bytes before DLedger's end {end} (it counts each record's size, not its "
                    f"48-byte entry header), and its reput starts at the committed position {reput_from}, so the "
                    "units are dropped and never rebuilt")
        units = f"{self.messages:,} unit{'' if self.messages == 1 else 's'}"  # as runtime.display.plural words it
        return (f"RocketMQ 5.3.3's truncateDirty moves the queue's max offset back to {self.served_max}, {units} "
                f"short of the recovered end {recovered_end}: its binary search stops at the unit of the record at "
                "the end itself and answers the last unit it probed below it, so the units after that one are no "
                "longer served (their keys stay until new messages overwrite them)")


def database_recovery(database, segs: list[Segment], mode: str, start_index: int, recovered_end: int
                      ) -> tuple[dict, QueueRebuild | None, list[str], list[UnservedUnits]]:
    """What RocketMQ 5.3.3's recovery does to a database queue store (``database``: :func:`queue_store_state`),
    as ({(topic, queue id): QueueRecovery} of the queues it cuts, the rebuild of an empty store or None, notes, the
    units of kept messages its truncateDirty leaves unserved).

    ``DefaultMessageStore.recover`` takes the checkpoint row (0 without one) as the queues' max physical offset;
    when that is >= the recovered end, ``truncateDirtyLogicFiles`` runs ``RocksDBConsumeQueueStore.truncateDirty``
    (store_format.rocksdbcq.RocksDBQueues.truncate_dirty): each queue whose ``max`` row lies at or past the cut gets
    its max moved back; the unit keys stay.  A QueueRecovery's positions are queue offset x 20 as for a file queue
    (``end``: the new max offset + 1).  With no CommitLog segment at all the broker destroys the database
    (``destroy`` and ``loadAfterDestroy``)."""
    backend, part, state = database
    checkpoint = state.dispatch_end or 0
    unit = L.CQ_STORE_UNIT_SIZE
    if not segs:
        return {}, None, [] if state.empty else [
            "the store has no commitlog segment: recovery destroys the RocksDB consume queue (every queue's units "
            "and offsets) and opens it empty"], []
    if state.empty:
        first = segs[start_index]
        skipped = mode == "normal" and first.base_offset == 0 and _first_record_within(first, 0)
        return {}, QueueRebuild(backend.name, mode, first.name, first.base_offset, recovered_end,
                                segs[0].base_offset, skipped), [], []
    if checkpoint < recovered_end:
        return {}, None, [], []
    truncation, notes, unserved = {}, [], []
    for c, keys, kept in backend.truncate_dirty(part, recovered_end, segs[0].base_offset):
        if c.refused:
            notes.append(f"RocksDB's truncateDirty cannot move back the max offset of {c.topic}/{c.queue_id}: "
                         f"{c.refused}, so the broker logs an error and keeps serving its max offset "
                         f"{c.old.queue_offset + 1}, whose last unit (physical offset {c.old.physical_offset}) lies "
                         f"past the recovered end {recovered_end}: pulls there find no message until new messages "
                         "are written (they are given queue offsets from that max on)")
        elif keys:
            queue_offsets, physical_offsets = kept
            if len(queue_offsets):
                unserved.append(UnservedUnits(c.topic, c.queue_id, "rocksdb_truncate_dirty", c.new.queue_offset + 1,
                                              tuple(queue_offsets.tolist()), tuple(physical_offsets.tolist())))
            truncation[(c.topic, c.queue_id)] = QueueRecovery(
                c.topic, c.queue_id, (c.old.queue_offset + 1) * unit, c.old.physical_offset,
                (c.new.queue_offset + 1) * unit, keys, c.new.queue_offset + 1, "max_row_corrected")
    return truncation, None, notes, unserved


def dledger_database_recovery(database, segs: list[Segment], mode: str, queue_cut: int,
                              unserved: list[UnservedUnits]) -> tuple[dict, list[str], list[UnservedUnits]]:
    """A RocksDB queue store under a DLedger commit log (``storeType=defaultRocksDB`` with
    ``enableDLegerCommitLog=true``: BrokerController.initializeMessageStore builds a RocksDBMessageStore, whose
    DefaultMessageStore constructor makes the DLedgerCommitLog; docs/store-format-dledger.md).  ``recover`` takes
    the checkpoint row as the queues' max physical offset and ``dledgerRecoverNormally`` / ``Abnormally`` run
    ``truncateDirtyLogicFiles`` at ``queue_cut`` when that is >= it: RocksDBConsumeQueueStore.truncateDirty, as
    :func:`database_recovery` models it.  An empty database (a crash before RocksDB flushed) is said in a note:
    the normal recovery dispatches nothing and the reput starts at DLedger's max offset, the abnormal one
    re-dispatches from the first data file (its checkpoint row 0 matches no file); no QueueRebuild is given."""
    _, _, state = database
    if not segs:
        return {}, [], unserved
    if state.empty and mode == "normal":
        return {}, ["the RocksDB consume queue has no row (its writes skip the WAL) and the commit log is DLedger's: "
                    "5.3.3's normal DLedger recovery does not rebuild it (dledgerRecoverNormally dispatches nothing; "
                    "the reput starts at DLedger's max offset), so the messages before that get no unit"], unserved
    if state.empty:
        return {}, ["the RocksDB consume queue has no row (its writes skip the WAL) and the commit log is DLedger's: "
                    "5.3.3's abnormal DLedger recovery re-dispatches every record from the first data file (a "
                    "checkpoint row of 0 matches no file)"], unserved
    truncation, _, notes, db_unserved = database_recovery(database, segs, "normal", 0, queue_cut)
    return truncation, notes, unserved + db_unserved


# ---------------------------------------------------------------------------------------------------------
# The prediction


@dataclass
class RecoveryPrediction:
    """What the broker will do.  When ``will_start`` is False the other fields describe the recovery it runs once
    the ``start_problems`` are fixed (a lock or checkpoint folder stops it before any recovery)."""

    mode: str  # "normal" | "abnormal"
    will_start: bool
    start_problems: list[str]  # why it will not start, in the order the broker meets them
    segment_size: int | None
    start_segment: str | None  # where the recovery walk begins
    max_physical_offset: int  # the recovered end of the commitlog
    stop_segment: str | None
    stop_position: int | None
    stop_kind: str | None  # why the walk ended (END_OF_DATA, BAD_CRC, ... or "last blank")
    segments_deleted: list[str]  # segments wholly beyond the recovered end
    dropped_messages: list[tuple[int, int]]  # (physical offset, size) of well-formed records the broker will ignore
    max_cq_physical_offset: int  # recoverConsumeQueue(): max over queues of recover()'s maxPhysicOffset (>= 0)
    cq_units_truncated: dict = field(default_factory=dict)  # (topic, qid) -> written units recovery drops
    index_files_deleted: list[str] = field(default_factory=list)  # abnormal: endTimestamp > indexMsgTimestamp
    redispatch_from: int | None = None  # abnormal: physical offset re-dispatch starts at
    notes: list[str] = field(default_factory=list)
    # (physical offset, declared TOTALSIZE, stop kind) of the damaged records the broker drops (lost_records)
    damaged_dropped: list[tuple[int, int, str]] = field(default_factory=list)
    # (physical offset, length) of bytes past the recovered end no frame covers (records whose headers are gone)
    unframed_dropped: list[tuple[int, int]] = field(default_factory=list)
    walks: dict = field(default_factory=dict)  # segment name -> SegmentWalk the decision used
    lost_enumerated: bool = True  # False: predict_recovery(enumerate_lost=False) left the three lists empty
    start_problem_files: list = field(default_factory=list)  # the file each start problem names (or None)
    cq_truncation: dict = field(default_factory=dict)  # (topic, qid) -> QueueRecovery, queues that drop units
    abort_kind: str | None = None  # "file" | "folder" | "other": what ``abort`` is (None: absent)
    queue_rebuild: "QueueRebuild | None" = None  # a database queue store with no row: rebuilt from the CommitLog
    units_unserved: list = field(default_factory=list)  # UnservedUnits: kept messages recovery stops serving
    # the max physical offset the store's other queues in the file queues' table give (5.x batch consume queues,
    # batch_queues_end), which the truncation decision takes with the file queues' (-1: none)
    other_queues_end: int = -1

    @property
    def intact_messages_lost(self) -> int:
        return len(self.dropped_messages)

    @property
    def damaged_messages_lost(self) -> int:
        return len(self.damaged_dropped)

    @property
    def messages_lost(self) -> int:
        """Every message the broker's count loses: the damaged record(s) that still frame a message and the
        intact messages past the recovered end (records in ``unframed_dropped`` cannot be counted)."""
        return self.intact_messages_lost + self.damaged_messages_lost

    @property
    def unframed_bytes_lost(self) -> int:
        return sum(n for _, n in self.unframed_dropped)

    @property
    def bytes_lost(self) -> int:
        """The intact messages' TOTALSIZE, the damaged records' TOTALSIZE fields and the unframed bytes."""
        return (sum(s for _, s in self.dropped_messages) + sum(s for _, s, _ in self.damaged_dropped)
                + self.unframed_bytes_lost)

    @property
    def cut(self) -> "Cut":
        """Where the recovery ends the log (what the ``kept`` walk returns lies before it)."""
        stop = self.walks.get(self.stop_segment) if self.stop_segment is not None else None
        return Cut(self.max_physical_offset, self.stop_segment, self.stop_position, self.stop_kind, self.mode,
                   stop.stop_field if stop is not None else None)

    def as_dict(self) -> dict:
        d = {k: v for k, v in vars(self).items() if k != "walks"}
        d["cq_units_truncated"] = {f"{t}/{q}": n for (t, q), n in self.cq_units_truncated.items()}
        d["cq_truncation"] = {f"{t}/{q}": vars(r) for (t, q), r in self.cq_truncation.items()}
        d["walks"] = {k: vars(w) for k, w in self.walks.items()}
        d.update(messages_lost=self.messages_lost, intact_messages_lost=self.intact_messages_lost,
                 damaged_messages_lost=self.damaged_messages_lost, unframed_bytes_lost=self.unframed_bytes_lost,
                 bytes_lost=self.bytes_lost)
        return d


@dataclass(frozen=True)
class Cut:
    """Where the broker's predicted recovery ends the commitlog (:attr:`RecoveryPrediction.cut`, the cut the audit's
    summary.json gives as ``recovery.predicted_max_physical_offset``, ``stop_segment``, ``stop_position`` and
    ``stop_kind``): the broker keeps what lies before ``physical_offset`` and drops the rest.  ``kind`` says why its
    walk ends there (END_OF_DATA or "last blank": the end of the data; else the damage: BAD_CRC, ...); ``field`` the
    field its walk refused."""

    physical_offset: int
    segment: str | None
    file_position: int | None
    kind: str | None
    mode: str  # "normal" | "abnormal"
    field: str | None = None

    def as_dict(self) -> dict:
        return {"physical_offset": self.physical_offset, "segment": self.segment, "file_position": self.file_position,
                "kind": self.kind, "field": self.field, "mode": self.mode}

    @classmethod
    def from_dict(cls, d: dict) -> "Cut":
        return cls(int(d["physical_offset"]), d.get("segment"), d.get("file_position"), d.get("kind"),
                   d.get("mode") or "normal", d.get("field"))


def predict_cut(store: Store, settings: RecoverySettings | None = None, *, check_crc: bool = True,
                message_index_safe: bool = False, salvage_stops: dict[str, int] | None = None) -> RecoveryPrediction:
    """The prediction a walk needs, the same as the audit's (:func:`predict_recovery`) without what it costs to
    count the losses: no lost records enumerated, no consume queue read (its :attr:`~RecoveryPrediction.cut`,
    mode, start problems and notes are the audit's; its counts and queue truncations are empty).
    ``salvage_stops``: {segment name: its salvage walk's first stop} already found with ``check_crc``
    (:func:`recovery_walk`'s ``salvage_stop``), so those segments are not framed again up to there."""
    return predict_recovery(store, message_index_safe=message_index_safe, check_crc=check_crc,
                            enumerate_lost=False, queue_starts={}, settings=settings, salvage_stops=salvage_stops)


def _first_record_matches(seg: Segment, min_timestamp: int) -> bool:
    """CommitLog.isMappedFileMatchedRecover: the first record's magic is V1, its store time is not 0 and
    <= min_timestamp."""
    with ReadOnlyMap(seg.path) as m:
        buf = m.buf
        if len(buf) < L.BORN_HOST_OFFSET + 4:
            return False
        if _I32_AT(buf, L.MAGIC_OFFSET) != L.MAGIC_V1:
            return False
        sys_flag = _I32_AT(buf, L.SYS_FLAG_OFFSET)
        ts_pos = L.layout_for(sys_flag).offsets["store_timestamp"]
        if len(buf) < ts_pos + 8:
            return False
        store_ts = _I64_AT(buf, ts_pos)
        return store_ts != 0 and store_ts <= min_timestamp


def recovered_end(segments: list[Segment], start_index: int, walk_of) -> tuple[int, SegmentWalk | None, str | None]:
    """``recoverNormally`` / ``recoverAbnormally``'s walk over the segments from ``start_index``, decided from
    each segment's :class:`SegmentWalk` (``walk_of(segment)``): a blank goes on to the next segment; a stop ends
    the walk there; the last segment's blank ends it at the blank ("recover last 3 physics file over").  Returns
    (the recovered max physical offset, the walk it ended in, the stop kind or "last blank")."""
    if not segments:
        return 0, None, None
    for seg in segments[start_index:]:
        w = walk_of(seg)
        if w.kind == "blank" and seg is not segments[-1]:
            continue
        return w.physical_offset, w, w.stop_kind if w.kind == "stop" else "last blank"
    return segments[start_index].base_offset, None, None  # not reached: the loop always returns


def recovery_start(segs: list[Segment], mode: str, cp: Checkpoint | None, message_index_safe: bool = False,
                   queue_store_end: int | None = None, queues_end: int | None = None) -> tuple[int, int | None]:
    """(index of the segment the recovery walk starts at, the physical offset re-dispatch starts at or None):
    ``recoverNormally`` starts at the third-last segment; ``recoverAbnormally`` at the last segment, going back,
    whose first record matches the checkpoint (``isMappedFileMatchedRecover``), else segment 0, and re-dispatches
    every record from there.  Only first records are read: the walks from there decide the rest.

    ``queue_store_end``: a RocksDB queue store's checkpoint row (0 without one: ``getMaxPhyOffsetInConsumeQueue``),
    which 5.3.3 compares instead: ``recoverNormally`` starts at the last segment (not the first) whose base offset
    is <= it, else the first; ``isMappedFileMatchedRecover`` matches a first record with a message magic whose
    PHYSICALOFFSET is <= it (store-format-5x.md section 4.6).

    ``queues_end``: the file consume queues' max maxPhysicOffset (``getMaxPhyOffsetInConsumeQueue``, -1 without a
    unit), given for a store whose broker is 5.3.2 or later (a 5.x store: predicted as 5.3.3): its
    ``recoverNormally`` starts at the last segment whose base offset is <= it, else the first, as with a RocksDB
    queue store; its abnormal recovery keeps the timestamp rule (store-format.md section 10.4)."""
    if not segs:
        return 0, None
    if mode == "normal":
        end = queue_store_end if queue_store_end is not None else queues_end
        if end is None:
            return max(0, len(segs) - 3), None
        return next((i for i in range(len(segs) - 1, 0, -1) if segs[i].base_offset <= end), 0), None
    min_ts = 0
    if cp is not None:
        min_ts = cp.min_timestamp_index if message_index_safe else cp.min_timestamp
    start_index = 0
    for i in range(len(segs) - 1, -1, -1):
        if _first_record_matches(segs[i], min_ts) if queue_store_end is None \
                else _first_record_within(segs[i], queue_store_end):
            start_index = i
            break
    return start_index, segs[start_index].base_offset


def _first_record_within(seg: Segment, end: int) -> bool:
    """CommitLog.isMappedFileMatchedRecover with a RocksDB queue store (5.3.3): the first record has a message
    magic (V1 or V2) and a PHYSICALOFFSET <= ``end``, the store's checkpoint row."""
    with ReadOnlyMap(seg.path) as m:
        buf = m.buf
        if len(buf) < L.PHYSICAL_OFFSET_OFFSET + 8 or _I32_AT(buf, L.MAGIC_OFFSET) not in L.MESSAGE_MAGICS:
            return False
        return _I64_AT(buf, L.PHYSICAL_OFFSET_OFFSET) <= end


def batch_queues_end(store: Store) -> int:
    """The batch consume queues' part of ``ConsumeQueueStore.getMaxPhyOffsetInConsumeQueue`` (5.3.3,
    ConsumeQueueStore.java:294-304): ``load()`` puts the batch queues in the same table as the consume queues
    (:68-72, ``loadConsumeQueues``/``putConsumeQueue``), so the max runs over both, each batch queue giving the start
    of its last valid unit's record (store_format.batchcq.recovered_max_physical_offset); -1 without one.  A
    RocksDB queue store answers from its checkpoint row alone (RocksDBConsumeQueueStore.java:494-497)."""
    return max((batchcq.recovered_max_physical_offset(files) for files in store.batch_queues.values()), default=-1)


def queue_store_state(store: Store):
    """(backend, part folder, :class:`store_format.queues.DatabaseState`) of the store's database queue store
    (RocksDB's, store_format.queues.queue_stores), or None: the broker's queues are files."""
    from .queues import queue_stores

    for backend, part in queue_stores(store.loc, store.queue_listing):
        state = backend.state(part)
        if state is not None:
            return backend, part, state
    return None


def recovery_region(store: Store, message_index_safe: bool = False) -> list[Segment]:
    """The segments whose recovery walks :func:`predict_recovery` may need: from where the walk starts to the
    last one (an engine that walks them elsewhere passes them as ``walks``)."""
    mode = "abnormal" if store.markers().abort else "normal"
    cp, _, _ = effective_checkpoint(store.root)
    db = queue_store_state(store) if store.dledger_home is None else None
    start, _ = recovery_start(store.segments, mode, cp, message_index_safe,
                              (db[2].dispatch_end or 0) if db else None)
    return store.segments[start:]


def _dledger_first_record_matches(seg: Segment, min_timestamp: int, queues_max: int | None = None) -> bool:
    """``DLedgerCommitLog.isMmapFileMatchedRecover`` (DLedgerCommitLog.java:429-470): the record in the data file's
    first entry (at 48) has a V1 magic and, with file CQs, a non-zero store time <= min_timestamp; with a RocksDB
    queue store (``queues_max``: its checkpoint row, getMaxPhyOffsetInConsumeQueue) a PHYSICALOFFSET <= it."""
    with ReadOnlyMap(seg.path) as m:
        buf, at = m.buf, dledger.BODY_OFFSET
        if len(buf) < at + L.BORN_HOST_OFFSET + 4 or _I32_AT(buf, at + L.MAGIC_OFFSET) != L.MAGIC_V1:
            return False
        if queues_max is not None:
            return _I64_AT(buf, at + L.PHYSICAL_OFFSET_OFFSET) <= queues_max
        ts_pos = at + L.layout_for(_I32_AT(buf, at + L.SYS_FLAG_OFFSET)).offsets["store_timestamp"]
        store_ts = _I64_AT(buf, ts_pos) if len(buf) >= ts_pos + 8 else 0
        return store_ts != 0 and store_ts <= min_timestamp


def dledger_abnormal_queue_cut(store: Store, segs: list[Segment], ledger_end: int, min_timestamp: int,
                               check_crc: bool = True, queues_max: int | None = None) -> int:
    """Where RocketMQ 5.3.3's ``dledgerRecoverAbnormally`` truncates the consume queues: it walks the records from
    the newest data file whose first record matches the checkpoint (else the first file) with
    ``checkMessageAndReturnSize`` (CRC checked) to the first it refuses, and adds each record's size, not its
    48-byte entry header, to the start of the file it ends in: 48 x (records walked in that file) bytes short of
    where the walk really ends (docs/store-format-dledger.md)."""
    files = [s for s in segs if s.base_offset < ledger_end] or segs[:1]
    start = next((i for i in range(len(files) - 1, -1, -1)
                  if _dledger_first_record_matches(files[i], min_timestamp, queues_max)),
                 0)
    cut = files[start].base_offset
    for seg in files[start:]:
        with ReadOnlyMap(seg.path) as m:
            limit = min(len(m.buf), max(0, ledger_end - seg.base_offset))
            items = dledger_items(m.buf, seg.name, seg.base_offset, limit=limit, check_crc=check_crc,
                                       salvage=False)
            cut = seg.base_offset + int(items.sizes[items.kinds == KIND_MESSAGE].sum())
            closing = items.others.get(len(items) - 1)
        if closing is None or closing.kind != "blank":
            break
    return cut


def dledger_units_never_rebuilt(store: Store, queue_cut: int, reput_from: int, ledger_end: int
                                ) -> list["UnservedUnits"]:
    """The consume-queue units the abnormal recovery drops (at or past ``queue_cut``) and the reput does not write
    again (it starts at ``reput_from``), per queue: units of messages DLedger keeps (before ``ledger_end``) that
    consumers never get (cause ``dledger_abnormal_header``; ``served_max``: the queue's first unit dropped)."""
    lost = []
    for (topic, qid), files in sorted(store.queues.items()):
        units = [(u.queue_offset, u.physical_offset) for u in read_queue(files)
                 if u.kind == "entry" and queue_cut <= u.physical_offset < min(reput_from, ledger_end)]
        if units:
            units.sort()
            lost.append(UnservedUnits(topic, qid, "dledger_abnormal_header", units[0][0],
                                      tuple(o for o, _ in units), tuple(phys for _, phys in units),
                                      (queue_cut, ledger_end, reput_from)))
    return lost


def _dledger_end(store: Store, segs: list[Segment], mode: str = "normal", cp: Checkpoint | None = None,
                 message_index_safe: bool = False, check_crc: bool = True, framer=None,
                 queues_max: int | None = None) -> tuple:
    """(start index, recovered end, the SegmentWalk it ends in, stop kind, notes, start problems, unserved units,
    where ``truncateDirtyLogicFiles`` cuts the queues) of a DLedger store
    (docs/store-format-dledger.md): DLedger's ``recover()`` ends the log at its last entry that passes its header
    checks (store_format.dledger.DLedgerLog.recover); RocketMQ's ``dledgerRecoverNormally`` truncates the consume
    queues there.  (RocketMQ's commit-log max offset is DLedger's committed position, which the node's next
    election as leader brings up to the ledger's end.)  ``framer``: DLedgerLog's (the compiled entry walk).
    ``queues_max``: a RocksDB queue store's checkpoint row (None: file queues), which decides the abnormal walk's
    first file (:func:`_dledger_first_record_matches`)."""
    log = dledger.DLedgerLog(store.dledger_home, data_file_size=store.segment_size,
                             header_run=dledger_header_run(framer) if framer is not None else None)
    table = log.table()
    ledger = log.recover(table)
    unserved: list[UnservedUnits] = []
    names = [f"data/{s.name}" for s in segs]
    start = names.index(ledger.start_file) if ledger.start_file in names else 0
    notes, problems = list(log.metadata.problems), []
    if ledger.will_not_start:
        problems.append(ledger.will_not_start)
    if not segs:
        return 0, 0, None, None, notes, problems, unserved, 0
    end = ledger.data_end
    seg = next((s for s in reversed(segs) if s.base_offset <= end), segs[0])
    if ledger.stop is not None:
        check, why = next(((c, w) for c, w in ledger.stop.problems if c in dledger.RECOVERY_CHECKS),
                          ledger.stop.problems[0] if ledger.stop.problems else ("dledger", ""))
        walk = SegmentWalk(seg.name, seg.base_offset, end - seg.base_offset, "stop", check, None, ledger.stop.size)
        notes.append(f"DLedger's recovery ends the ledger at index {ledger.end_index} (physical offset {end}): the "
                     f"entry after it fails {check} ({why}); DLedger truncates its data and index files there")
        kind = check
    else:
        walk = SegmentWalk(seg.name, seg.base_offset, end - seg.base_offset, "stop", END_OF_DATA)
        kind = END_OF_DATA
    unchecked: dict[str, tuple] = {}  # what neither DLedger nor RocketMQ checks: the broker serves these as they are
    for check in (dledger.CHECK_BODY_CRC, dledger.CHECK_CHAIN_CRC, dledger.CHECK_BLANK):
        rows = table.rows_with((check,))
        if len(rows):
            e = table.entry(rows[0])
            unchecked[check] = (len(rows), e, dict(e.problems)[check])
    for check, (count, e, why) in sorted(unchecked.items()):
        where = f"index {e.index}, physical offset {e.record_offset}" if e.kind == "entry" else \
            f"physical offset {e.position}"
        notes.append(f"{count} DLedger entr{'y fails' if count == 1 else 'ies fail'} {check}, the first at "
                     f"{where} ({e.file}@{e.file_position}): {why}; neither DLedger nor RocketMQ checks it, so the "
                     "broker serves the entry as it is: compare the record with its producer's copy")
    if ledger.index_rewritten_from is not None:
        notes.append(f"DLedger rewrites its index units from index {ledger.index_rewritten_from} on: the unit there "
                     "disagrees with its entry")
    if ledger.committed_index < ledger.end_index:
        committed = "nothing" if ledger.committed_index < 0 else f"index {ledger.committed_index}"
        served = max(ledger.committed_pos, 0)
        notes.append(f"DLedger's checkpoint has {committed} committed of the ledger's {ledger.end_index}: until the "
                     f"node leads its group again RocketMQ serves only to physical offset {served}")
    queue_cut = end  # dledgerRecoverNormally: truncateDirtyLogicFiles(DLedger's end)
    if mode == "abnormal":
        min_ts = 0 if cp is None else cp.min_timestamp_index if message_index_safe else cp.min_timestamp
        queue_cut = dledger_abnormal_queue_cut(store, segs, end, min_ts, check_crc, queues_max)
        # DefaultMessageStore.start: the reput starts at getConfirmOffset() = DLedger's committed position (> 0)
        reput_from = ledger.committed_pos if ledger.committed_pos > 0 else 0
        if queue_cut < end:
            unserved = dledger_units_never_rebuilt(store, queue_cut, reput_from, end)
    return start, end, walk, kind, notes, problems, unserved, queue_cut


def predict_recovery(store: Store, *, message_index_safe: bool = False, check_crc: bool = True,
                     walks: dict[str, SegmentWalk] | None = None, enumerate_lost: bool = True,
                     queue_starts: dict | None = None, settings: RecoverySettings | None = None,
                     offset_scan=None, salvage_stops: dict[str, int] | None = None,
                     entry_framer=None) -> RecoveryPrediction:
    """What the broker will do when it starts on ``store``.

    ``walks``: recovery-walk outcomes by segment name (:func:`recovery_walk`), e.g. computed in parallel; a
    segment the decision needs and that is not there is walked here.  ``enumerate_lost``: enumerate the
    records the broker drops here (:func:`walk_lost_records`); False leaves ``dropped_messages``,
    ``damaged_dropped`` and ``unframed_dropped`` empty for a caller that has the salvage walk's items and
    applies :func:`lost_records` itself.  ``queue_starts``: {(topic, queue id): :class:`QueueStart`} computed
    elsewhere; then the queues are not read here and ``cq_truncation`` stays empty for the caller to finish
    each queue (:func:`finish_queue`, with :func:`truncates_queues`' decision).  ``settings``: broker.conf's
    ``__CRC32#`` switches (store_format.brokerconf.RecoverySettings; default: both off, as in 5.3.3):
    ``forceVerifyPropCRC`` changes the walk (:func:`recovery_walk`), and the ``walks`` given must have been
    decided the same way.  ``salvage_stops``: {segment name: the salvage walk's first stop there}, where a walk
    not given starts (:func:`recovery_walk`).  ``offset_scan``: a compiled scanner of consumerOffset.json
    (store_format.config.offset_columns'), so that a busy broker's offsets cost no Python object each when their
    load is predicted.  ``entry_framer``: a bulk framer with an ``entry_walk`` (decoding.kernels.CompiledFramer), so
    that a DLedger log's entries are walked and checked as arrays (store_format.dledger.DLedgerLog.table)."""
    settings = settings or RecoverySettings()
    force = settings.force_verify_prop_crc and check_crc
    root = store.root
    markers = store.markers()
    mode = "abnormal" if markers.abort else "normal"  # DefaultMessageStore.isTempFileExist: File.exists()
    segs = store.segments
    size = store.segment_size
    # in the order the broker meets them (start_problems): the config files; the store's constructor opens lock
    # (5.x: and the timer checkpoint); load() loads the commit log and the consume queues, opens the checkpoint and
    # loads the index; then (5.x) the timer store, the delay offsets; start() locks lock
    features = store.features
    generation = features.generation
    found = config_load_problems(root / "config", METADATA_CONFIGS[generation], offset_scan)
    before, at_start = marker_problems(root)
    found += before
    timer_store = features.timer_store  # timerWheelEnable: its files are there
    if timer_store:
        found += timer_checkpoint_problems(root)
    notes = abort_notes(root, markers)
    load_problems, load_notes = store_load_problems(store, generation)
    found += load_problems
    notes += load_notes
    cp, cp_problems, cp_notes = effective_checkpoint(root)
    found += [("checkpoint", text) for text in cp_problems]
    notes += cp_notes

    used: dict[str, SegmentWalk] = {}
    given, stops = walks or {}, salvage_stops or {}
    file_starts, queues_end = None, None  # the file queues' recover(), when the walk's start needs them (5.x)
    database = queue_store_state(store)  # RocksDB's queue store (a DLedger store may keep one: docs/store-format-dledger.md)
    batch_end = batch_queues_end(store) if database is None else -1  # the batch queues count in the queues' max

    def walk_of(seg: Segment) -> SegmentWalk:
        if seg.name not in used:
            used[seg.name] = given[seg.name] if seg.name in given else \
                recovery_walk(seg, check_crc, force, stops.get(seg.name))
        return used[seg.name]

    if store.dledger_home is not None:  # the CommitLog in DLedger entries: DLedger's recover() decides its end
        queues_max = (database[2].dispatch_end or 0) if database else None
        start_index, max_offset, stop_walk, stop_kind, dledger_notes, dledger_problems, dledger_unserved, \
            queue_cut = _dledger_end(store, segs, mode, cp, message_index_safe, check_crc, entry_framer, queues_max)
        redispatch_from = None
        notes += dledger_notes
        found += [("dledger", text) for text in dledger_problems]
        if stop_walk is not None:
            used[stop_walk.segment] = stop_walk
    else:
        if mode == "normal" and database is None and generation == "5.x":  # 5.3.3 starts where the queues end
            if queue_starts is None:
                file_starts = {key: recover_queue(files) for key, files in store.queues.items()}
            queues_end = max((s.max_physic_offset for s in (queue_starts if queue_starts is not None else file_starts).values()), default=-1)
            queues_end = max(queues_end, batch_end)
        start_index, redispatch_from = recovery_start(segs, mode, cp, message_index_safe,
                                                      (database[2].dispatch_end or 0) if database else None,
                                                      queues_end)
        max_offset, stop_walk, stop_kind = recovered_end(segs, start_index, walk_of)
    stop_seg = stop_walk.segment if stop_walk else None
    stop_pos = stop_walk.position if stop_walk else None

    # truncateDirtyFiles: a segment starting beyond the end is destroyed; the one holding it is kept
    deleted = [s.name for s in segs if s.base_offset > max_offset]
    lost = LostRecords()
    if enumerate_lost:
        lost = walk_lost_records(store, max_offset, stop_walk, check_crc=check_crc)

    if queue_starts is None:
        queues, max_cq = recover_consume_queues(store.queues, max_offset, has_commitlog=bool(segs),
                                                starts=file_starts, other_queues_end=batch_end)
    else:
        queues, max_cq = {}, max((s.max_physic_offset for s in queue_starts.values()), default=-1)
    max_cq = max(max_cq, batch_end)
    max_cq = max(max_cq, queue_dispatch_end(store.loc, store.queue_listing))  # a RocksDB queue's checkpoint row (store_format.queues)
    truncation = {k: q for k, q in queues.items() if q.dropped}
    rebuild, unserved = None, list(dledger_unserved) if store.dledger_home is not None else []
    if database is not None and store.dledger_home is not None:  # DLedgerCommitLog over RocksDBConsumeQueueStore
        db_truncation, db_notes, unserved = dledger_database_recovery(database, segs, mode, queue_cut, unserved)
        truncation.update(db_truncation)
        notes += db_notes
    elif database is not None:
        db_truncation, rebuild, db_notes, unserved = database_recovery(database, segs, mode, start_index, max_offset)
        truncation.update(db_truncation)
        notes += db_notes
        if rebuild is not None:
            rebuild = replace(rebuild, queue_ends=rebuilt_queue_ends(store, rebuild, check_crc))

    if force and not settings.enabled_append_prop_crc:
        notes.append("forceVerifyPropCRC is on and enabledAppendPropCRC is off: the records the broker writes from its "
                     "next start carry no __CRC32#, so the recovery after that cuts at the first of them")
    index_deleted = []
    if cp is not None:
        index_deleted, index_notes, index_problems = index_files_deleted_at_load(
            root / "index", mode == "normal", cp.index_msg_timestamp, generation)
        notes += index_notes
        found += index_problems
    if timer_store:
        timer_problems, timer_notes = timer_store_load_problems(store)
        found += timer_problems
        notes += timer_notes
    found += config_load_problems(root / "config", (DELAY_OFFSETS,))
    found += at_start  # DefaultMessageStore.start(), after every load

    return RecoveryPrediction(
        mode=mode, will_start=not found, start_problems=[t for _, t in found], segment_size=size,
        start_segment=segs[start_index].name if segs else None, max_physical_offset=max_offset,
        stop_segment=stop_seg, stop_position=stop_pos, stop_kind=stop_kind, segments_deleted=deleted,
        dropped_messages=lost.intact, max_cq_physical_offset=max(0, max_cq),
        cq_units_truncated={k: q.dropped for k, q in truncation.items()},
        index_files_deleted=index_deleted, redispatch_from=redispatch_from, notes=notes,
        damaged_dropped=lost.damaged, unframed_dropped=lost.unframed, walks=used, lost_enumerated=enumerate_lost,
        start_problem_files=[f for f, _ in found], cq_truncation=truncation, abort_kind=markers.abort_kind,
        queue_rebuild=rebuild, units_unserved=unserved, other_queues_end=batch_end)
