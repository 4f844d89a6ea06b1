"""The compaction store (a topic whose cleanup.policy attribute is COMPACTION; docs/store-format-compaction.md):
what RocketMQ 5.3.3's ``CompactionStore`` leaves after compacting each queue up to its last record.

  dispatch    every record of a COMPACTION topic with KEYS goes to its queue's log (``CompactionService.putRequest``:
              the current log); the writer keeps where it is, not its bytes
  close       each queue compacted up to its last queue offset (``CompactionLog.compactAndReplace``: the newest
              record per KEYS string, none whose body is empty; store_format.compaction.retained), written as a
              compaction generation is: ``compaction/compactionLog/<topic>/<queueId>/`` from offset 0, each record
              copied with PHYSICALOFFSET rewritten to its log offset, its SparseConsumeQueue unit beside it in
              ``compaction/compactionCq/`` (a file per log file, of the same name), an end marker and a blank when
              either fills, the blank after the last record; then ``compaction/position-checkpoint``

The broker keeps the file being written out of a compaction; the writer compacts every file, so each queue's
checkpoint is its last record's queue offset and no record lies above it.  Settings: ``enableCompaction``,
``compactionMappedFileSize``, ``compactionCqMappedFileSize`` (MessageStoreConfig's names and defaults).
"""
from __future__ import annotations

import os
import struct

from .. import layout as L
from ..commitlog import segment_name
from ..compaction import checkpoint_text, log_file_size, retained
from ..errors import ErrorKind, WriterError
from .dispatch import Dispatcher, DispatchRequest, refuse_reopen

_UNIT = struct.Struct(L.BATCH_CQ_UNIT.struct)
_END_MARKER = _UNIT.pack(-1, 0, 0, 0, 0, 0, L.BATCH_CQ_INVALID_POS, 0)  # SparseConsumeQueue.putEndPositionInfo
_BLANK = struct.Struct(">ii")
_PHYS = struct.Struct(">q")


def compaction_topic(writer, topic: str) -> bool:
    """A topic registered with ``cleanup.policy=COMPACTION`` (CleanupPolicyUtils.getDeletePolicy)."""
    tc = writer.topics.get(topic)
    return tc is not None and (tc.attributes or {}).get(L.TOPIC_ATTRIBUTE_CLEANUP_POLICY) == \
        L.CLEANUP_POLICY_COMPACTION


class CompactionStore(Dispatcher):
    """The COMPACTION topics' logs: each dispatched record's place at dispatch, the compacted store at close."""

    def __init__(self, writer):
        refuse_reopen(writer, "cleanup.policy=COMPACTION topics")
        self.writer = writer
        self.cq_size = writer.config.compactionCqMappedFileSize // L.BATCH_CQ_UNIT.width * L.BATCH_CQ_UNIT.width
        self.log_size = log_file_size(self.cq_size, writer.config.compactionMappedFileSize)
        # (topic, queue id) -> [(queue offset, KEYS, body not empty, physical offset, size, tagsCode, store time)]
        self.logs: dict[tuple[str, int], list[tuple]] = {}

    def dispatch(self, request: DispatchRequest) -> bool:
        msg = request.msg
        keys = msg.properties.get(L.PROPERTY_KEYS)
        if not keys or not keys.strip() or not compaction_topic(self.writer, msg.topic):
            return True  # CompactionLog.asyncPutMessage: "have no key, will not put in compaction log"
        log = self.logs.setdefault((msg.topic, msg.queue_id), [])
        if log and log[-1][0] >= msg.queue_offset:
            return True  # "fix duplicate": at or below the queue's max offset
        log.append((msg.queue_offset, keys, len(msg.body) > 0, msg.physical_offset, msg.store_size, msg.tags_code,
                    msg.store_timestamp))
        return True

    def close(self, now: int, clean: bool) -> None:
        self.writer._drain()  # the bulk path's commitlog writes land first: the records are read back from it
        checkpoint = {}
        for (topic, qid), log in self.logs.items():
            position = log[-1][0]
            keep = set(retained([(qo, keys, body) for qo, keys, body, *_ in log], position))
            self._write_queue(topic, qid, [r for r in log if r[0] in keep])
            checkpoint[(topic, qid)] = position  # offsetMap.lastOffset: the last queue offset compacted
        folder = self.writer._path(L.COMPACTION_DIR)
        folder.mkdir(exist_ok=True)
        with open(folder / L.COMPACTION_CHECKPOINT_FILE, "w", encoding="utf-8") as f:
            f.write(checkpoint_text(checkpoint))

    def _record(self, phys: int, size: int) -> bytearray:
        seg = self.writer.config.mappedFileSizeCommitLog
        base = phys - phys % seg
        with open(self.writer._path("commitlog", segment_name(base)), "rb") as f:
            return bytearray(os.pread(f.fileno(), size, phys - base))

    def _write_queue(self, topic: str, qid: int, records: list[tuple]) -> None:
        """One queue's compacted log and sparse queue (CompactionAppendMessageCallback.doAppend, then
        putEndMessage), the files written whole."""
        log_dir = self.writer._path(*L.COMPACTION_LOG_DIR.split("/"), topic, str(qid))
        cq_dir = self.writer._path(*L.COMPACTION_CQ_DIR.split("/"), topic, str(qid))
        log_dir.mkdir(parents=True, exist_ok=True)
        cq_dir.mkdir(parents=True, exist_ok=True)
        files: list[tuple[int, bytearray, bytearray]] = []  # (base, log bytes, cq bytes) per file, in order

        def roll():
            files.append((len(files) * self.log_size, bytearray(), bytearray()))

        for qo, _keys, _body, phys, size, tags, stamp in records:
            if size + L.END_FILE_MIN_BLANK_LENGTH > self.log_size:
                raise WriterError(ErrorKind.INVALID_INPUT, f"a {size}-byte record of {topic}:{qid} does not fit a "
                                  f"{self.log_size}-byte compaction-log file", position=phys)
            if not files:
                roll()
            base, log, cq = files[-1]
            if len(cq) + _UNIT.size >= self.cq_size or size + L.END_FILE_MIN_BLANK_LENGTH > self.log_size - len(log):
                cq += _END_MARKER  # the queue's file has room for it: it holds one unit less than it could
                log += _BLANK.pack(self.log_size - len(log), L.BLANK_MAGIC)
                roll()
                base, log, cq = files[-1]
            at = base + len(log)
            record = self._record(phys, size)
            record[L.PHYSICAL_OFFSET_OFFSET:L.PHYSICAL_OFFSET_OFFSET + 8] = _PHYS.pack(at)
            log += record
            cq += _UNIT.pack(at, size, tags, stamp, qo, 1, L.BATCH_CQ_INVALID_POS, 0)
        if files and len(files[-1][1]) + L.END_FILE_MIN_BLANK_LENGTH <= self.log_size:
            files[-1][1].extend(_BLANK.pack(self.log_size - len(files[-1][1]), L.BLANK_MAGIC))  # putEndMessage
        for base, log, cq in files:
            for folder, data, size in ((log_dir, log, self.log_size), (cq_dir, cq, self.cq_size)):
                with open(folder / segment_name(base), "wb") as f:
                    f.write(data)
                    f.truncate(size)  # preallocated, the unwritten rest zero (sparse)
