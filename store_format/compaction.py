"""The compaction store of a 5.x broker (``cleanup.policy=COMPACTION`` topics; docs/store-format-compaction.md):
``compaction/compactionLog/<topic>/<queueId>/`` the log, ``compaction/compactionCq/<topic>/<queueId>/`` its
SparseConsumeQueue (read as the ``compaction`` backend of store_format.queues: 46-byte units, store_format.batchcq),
``compaction/position-checkpoint`` the queue offset each queue was compacted up to.

A log record is a CommitLog record whose PHYSICALOFFSET is its offset in the log, so the log is walked with
store_format.commitlog's framing (the same stops, the same blank).  What compaction keeps is :func:`retained`, the
one statement of ``CompactionLog.shouldRetainMsg`` here (the writer writes by it).  Files are opened read-only.
"""
from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass, field
from typing import Iterator

import numpy as np
import pyarrow.fs as pafs

from . import layout as L
from . import rolled
from .batchcq import UNIT_SIZE, batch_units_of
from .commitlog import Frame, walk_buffer
from .errors import ErrorKind, StoreFormatError
from .fs import ReadOnlyMap


class CompactionStoreError(StoreFormatError):
    """A compaction-store file that cannot be read."""


# ---------------------------------------------------------------------------------------------------------
# position-checkpoint


@dataclass
class PositionCheckpoint:
    """``compaction/position-checkpoint`` (CompactionPositionMgr): {(topic, queue id): the queue offset compaction
    has been done up to, inclusive}; ``error``: why the file could not be read (its offsets then unknown)."""

    offsets: dict = field(default_factory=dict)
    exists: bool = False
    error: CompactionStoreError | None = None

    def offset(self, topic: str, queue_id: int) -> int:
        """``CompactionPositionMgr.getOffset``: -1 when the queue was never compacted."""
        return self.offsets.get((topic, queue_id), -1)


def checkpoint_location(root):
    return rolled.child(root, L.COMPACTION_DIR, L.COMPACTION_CHECKPOINT_FILE)


def parse_position_checkpoint(text: str, name: str = L.COMPACTION_CHECKPOINT_FILE) -> dict:
    """``{"queueOffsetMap": {"<topic>_<queueId>": offset}}`` as {(topic, queue id): offset}: the key's queue id is
    after its last ``_`` (a topic may hold ``_``).  CompactionStoreError, positioned, on anything else."""
    try:
        doc = json.loads(text)
    except ValueError as e:
        raise CompactionStoreError(ErrorKind.BAD_CONFIG, f"not JSON: {e}", file=name,
                                   position=getattr(e, "pos", None)) from None
    table = doc.get("queueOffsetMap", {}) if isinstance(doc, dict) else None
    if not isinstance(table, dict):
        raise CompactionStoreError(ErrorKind.BAD_CONFIG, "queueOffsetMap is not an object", file=name,
                                   field="queueOffsetMap")
    out = {}
    for key, offset in table.items():
        topic, sep, qid = key.rpartition("_")
        if not sep or rolled.queue_id_of(qid) is None or not isinstance(offset, int) or isinstance(offset, bool):
            raise CompactionStoreError(ErrorKind.BAD_CONFIG, f"entry {key!r}: {offset!r} is not <topic>_<queueId>: "
                                       "<queue offset>", file=name, field="queueOffsetMap")
        out[(topic, int(qid))] = offset
    return out


def read_position_checkpoint(root) -> PositionCheckpoint:
    """The store's position checkpoint; an absent file is an empty one (nothing compacted yet)."""
    loc = checkpoint_location(root)
    if not loc.is_file():
        return PositionCheckpoint()
    try:
        return PositionCheckpoint(parse_position_checkpoint(loc.read_range(0, loc.size()).decode("utf-8"),
                                                            str(loc.path)), True)
    except UnicodeDecodeError as e:
        return PositionCheckpoint({}, True, CompactionStoreError(ErrorKind.BAD_CONFIG, "not UTF-8", file=str(loc.path),
                                                                 position=e.start))
    except CompactionStoreError as e:
        return PositionCheckpoint({}, True, e)


def checkpoint_text(offsets: dict) -> str:
    """The file's text as ConfigManager.persist writes it: fastjson's pretty form of the bean (``empty``, then
    ``queueOffsetMap`` in its ConcurrentHashMap's order), as the 5.3.3 fixtures' empty one is."""
    from .config import dumps_fastjson
    from .javahash import JavaHashMap

    table = JavaHashMap(concurrent=True)
    for (topic, qid), offset in offsets.items():
        table.put(f"{topic}_{qid}", offset)
    return dumps_fastjson({"empty": not offsets, "queueOffsetMap": table.to_dict()})


# ---------------------------------------------------------------------------------------------------------
# The log


def log_folder(root, topic: str, queue_id: int):
    return rolled.child(root, *L.COMPACTION_LOG_DIR.split("/"), topic, str(queue_id))


def log_files(root, topic: str, queue_id: int) -> list[rolled.RolledFile]:
    """Every regular file of a queue's log folder, each with its problems (the ``compacting/`` and ``replicating/``
    generations are folders: not listed)."""
    return rolled.list_folder(log_folder(root, topic, queue_id), None, L.COMPACTION_LOG_DIR)


def walk_log(files: list[rolled.RolledFile], *, decode: bool = True) -> Iterator[Frame]:
    """Each loaded log file (a 20-digit name) walked as the CommitLog is (store_format.commitlog.walk_buffer:
    records whose PHYSICALOFFSET is their log offset, body CRC checked, up to the blank or the stop), in offset
    order; every file's walk ends with its blank or stop frame."""
    for f in sorted((f for f in files if f.base_offset is not None), key=lambda f: f.base_offset):
        if not f.length:
            continue
        with ReadOnlyMap(f.path) as m:
            yield from walk_buffer(m.buf, f.name, f.base_offset, decode=decode)


def generations(root) -> list:
    """The temporary generation folders (``compacting/``, ``replicating/``) present under any queue folder of the
    log or the queue: (part, topic, queue folder, generation) each; a broker mid-compaction or mid-sync left them."""
    out = []
    for part in (L.COMPACTION_LOG_DIR, L.COMPACTION_CQ_DIR):
        base = rolled.child(root, *part.split("/"))
        if not base.is_dir():
            continue
        for t in base.list():
            if t.type != pafs.FileType.Directory:
                continue
            for q in rolled.child(base, t.base_name).list():
                if q.type != pafs.FileType.Directory:
                    continue
                for g in rolled.child(base, t.base_name, q.base_name).list():
                    if g.type == pafs.FileType.Directory and g.base_name in L.COMPACTION_GENERATIONS:
                        out.append((part, t.base_name, q.base_name, g.base_name))
    return out


def sparse_file_size(infos) -> int | None:
    """A sparse queue folder's file size (compactionCqMappedFileSize): its files' commonest length, as their
    names are the log's offsets and say nothing of it."""
    lengths = Counter(i.size for i in infos if i.is_file and i.size)
    return lengths.most_common(1)[0][0] if lengths else None


def log_file_size(cq_size: int, log_size: int) -> int:
    """``CompactionLog.getCompactionLogSize``: the log's file size, a multiple of the queue's (at least 5)."""
    n, m = divmod(log_size, cq_size)
    if n < 5:
        return cq_size * 5
    return n * cq_size if 0 < m < (cq_size >> 1) else (n + 1) * cq_size


# ---------------------------------------------------------------------------------------------------------
# What the broker's load does to a queue's compaction store


@dataclass(frozen=True)
class LogRecovery:
    """What ``CompactionLog.TopicPartitionLog.init`` does to one queue at the broker's start (docs/store-format-
    compaction.md, "Recovery"): ``SparseConsumeQueue.recover`` cuts each sparse-queue file it walks at its first
    unit that fails, then ``recover()`` cuts the log at ``getMaxPhyOffsetInLog`` (the end of the last unit the last
    sparse-queue file keeps), deleting the log files wholly past it; nothing re-appends what is cut.

    ``queue_end``: the sparse queue's processOffset (its last file's name + the units it keeps x 46); ``log_end``:
    where the log is cut, -1 when the last file keeps no unit (the log is then not cut at all);
    ``units_dropped``: (file, file position, queue offset, log offset) of each unit past a walked file's first
    failing one; ``records_dropped``: (log offset, queue offset) of each log record at or past ``log_end``;
    ``files_deleted``: the log files wholly past it."""

    queue_end: int
    log_end: int
    units_dropped: tuple = ()
    records_dropped: tuple = ()
    files_deleted: tuple = ()


def predict_log_recovery(cq_files: list[rolled.RolledFile], log_files: list[rolled.RolledFile],
                         records: dict | None = None) -> LogRecovery | None:
    """:class:`LogRecovery` of a queue's sparse-queue files and log files (None: no sparse-queue file).
    ``records``: {log offset: queue offset} of the log's records (:func:`walk_log`'s; None: walked here)."""
    files = sorted((f for f in cq_files if f.base_offset is not None), key=lambda f: f.base_offset)
    if files and files[-1].length == 0:
        files = files[:-1]  # MappedFileQueue.doLoad deletes an empty last file
    if not files:
        return None
    dropped, kept = [], 0
    for f in files[max(len(files) - 3, 0):]:  # SparseConsumeQueue.recover: from the third-newest file
        with rolled.open_bytes(f.loc) as m:
            u = batch_units_of(m.buf)
        ok = (u["physical_offset"] >= 0) & (u["size"] > 0) & (u["msg_base_offset"] >= 0) & (u["batch_size"] > 0)
        kept = len(ok) if ok.all() else int(ok.argmin())
        last = (int(u["physical_offset"][kept - 1]) + int(u["size"][kept - 1])) if kept else -1
        for i in np.flatnonzero(ok[kept:]) + kept:  # past the file's write position: never read, overwritten
            dropped.append((f.name, int(i) * UNIT_SIZE, int(u["msg_base_offset"][i]), int(u["physical_offset"][i])))
    queue_end = files[-1].base_offset + kept * UNIT_SIZE
    log_end = last  # getMaxPhyOffsetInLog: the last file's last unit before its write position, kept by recover()
    cut, deleted = [], []
    if log_end > 0:  # TopicPartitionLog.recover -> MappedFileQueue.truncateDirtyFiles(log_end)
        logs = sorted((f for f in log_files if f.base_offset is not None), key=lambda f: f.base_offset)
        deleted = [f.name for f in logs if f.base_offset > log_end]
        if records is None:
            records = {fr.physical_offset: fr.message.queue_offset for fr in walk_log(logs) if fr.kind == "message"}
        cut = sorted((phys, qo) for phys, qo in records.items() if phys >= log_end)
    return LogRecovery(queue_end, log_end, tuple(dropped), tuple(cut), tuple(deleted))


# ---------------------------------------------------------------------------------------------------------
# What compaction keeps


def retained(records, checkpoint: int) -> list[int]:
    """The queue offsets a compaction up to ``checkpoint`` keeps of one queue's ``records`` ((queue offset, KEYS,
    body not empty) each, in queue-offset order): above ``checkpoint`` every one; at or below it the newest record
    of each KEYS string when its body is not empty (CompactionLog.getOffsetMap + shouldRetainMsg); records without
    KEYS are never in the log."""
    newest: dict[str, int] = {}
    for qo, keys, _ in records:
        if keys and qo <= checkpoint:
            newest[keys] = qo
    return [qo for qo, keys, has_body in records
            if keys and (qo > checkpoint or (newest.get(keys) == qo and has_body))]


__all__ = ["PositionCheckpoint", "CompactionStoreError", "parse_position_checkpoint", "read_position_checkpoint",
           "checkpoint_text", "checkpoint_location", "log_folder", "log_files", "walk_log", "generations",
           "sparse_file_size", "log_file_size", "retained", "LogRecovery", "predict_log_recovery"]
