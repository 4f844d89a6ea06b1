"""A broker store root opened read-only: discovers its files and geometry and exposes every reader.

Geometry comes from the files themselves (segment spacing and length, consume-queue file length, each index
file's length and content) or from explicit broker.conf values (``store_format.brokerconf``; an index geometry
given is checked against every file); the 1 GiB / 6 MB / 420 MB defaults are never assumed.
"""
from __future__ import annotations

from collections import Counter
from functools import cached_property
from pathlib import Path
from typing import Iterator

from . import dledger, fs
from . import layout as L
from .checkpoint import Checkpoint, Markers, read_checkpoint, read_markers
from .commitlog import (Frame, Segment, dledger_frames, infer_segment_size, list_segment_files, read_message_at,
                        salvage_buffer, walk_buffer)
from .fs import ReadOnlyMap
from .config import ConfigFile, read_config
from .consumequeue import CQFile, CQUnit, read_queue
from .errors import ErrorKind, IndexFileError, StoreFormatError
from .ids import parse_host, parse_offset_msg_id
from .indexfile import INDEX_NAME, IndexFile, index_files
from .rolled import FileLimit, RolledFile, Skipped, list_folder
from .message import Message


class Store:
    """A store root on any file system (``loc``, a ``fs.Location``: a local path is the local case), listed once:
    :attr:`segment_files`, :attr:`queue_files` and :attr:`index_files` are every file of its parts with what is wrong
    with each, and the broker's view (:attr:`segments`, :attr:`queues`, :meth:`index_paths`) is derived from them.
    ``root`` is its pathlib face for the readers written over ``Path`` (a ``Path`` when local, else a
    ``fs.StorePath``)."""

    def __init__(self, root, *, segment_size: int | None = None,
                 hash_slot_num: int | None = None, index_num: int | None = None,
                 message_delay_level: str = L.DEFAULT_MESSAGE_DELAY_LEVEL, file_sizes: dict | None = None,
                 max_files: int | None = None, max_segments: int | None = None):
        self.loc = fs.resolve(root)
        # a local path stays a Path (mmaps, os-level checks); a URI of another file system is a fs.StorePath
        self.root = self.loc.as_path()
        if not self.root.is_dir():
            if self.root.exists() or self.root.is_symlink():
                fs.check_folder(self.root)  # a loop, a FIFO, no permission: UnreadableError says which
            raise StoreFormatError(ErrorKind.MISSING, "not a directory; pass a broker store root (the folder "
                                   "holding commitlog/, consumequeue/, index/)", file=str(self.root))
        fs.check_folder(self.root)
        if not (self.root / "commitlog").is_dir() and not (self.root / "consumequeue").is_dir():
            raise StoreFormatError(ErrorKind.MISSING, "no commitlog/ or consumequeue/ here; is this a store root?",
                                   file=str(self.root))
        self._segment_size = segment_size
        # the other rolled folders' file sizes broker.conf gives ({"consumequeue": mappedFileSizeConsumeQueue, ...}):
        # what the broker's load checks each file against (store_format.recovery.store_folders)
        self.given_file_sizes = {part: n for part, n in (file_sizes or {}).items() if n}
        self.hash_slot_num = hash_slot_num
        self.index_num = index_num
        self._index_geometry: dict = {}  # per file (a Path or fs.StorePath), once read: (slots, entries)
        self.delay_levels = L.parse_delay_levels(message_delay_level)
        # the most files listed of each queue part folder, and of the segment folder (None: every file); what they left
        # out: skipped
        self._file_limit = FileLimit(max_files) if max_files is not None else None
        self._segment_limit = FileLimit(max_segments) if max_segments is not None else None

    # ---- commitlog ---------------------------------------------------------------------------
    def _readable_folder(self, name: str) -> bool:
        return fs.entry(self.root / name).is_folder and fs.entry(self.root / name).reason is None

    def unreadable(self, part: str | None = None) -> list[fs.UnreadableError]:
        """The entries of the store no reader can read (:func:`store_format.fs.unreadable_entries`: FIFOs,
        devices, link loops, dangling links, no permission, a part that is a file), of ``part`` only when given
        (a folder of ``layout.STORE_PARTS``, or a root file such as ``checkpoint`` or ``timerwheel``)."""
        found = fs.unreadable_entries(self.root)
        return found if part is None else [e for e in found if fs.part_of(e, self.root) == part]

    @cached_property
    def dledger_home(self) -> fs.Location | None:
        """The ``dledger-<selfId>`` folder of a DLedger store (``enableDLegerCommitLog``: a ``dledger-*`` folder with
        ``data/`` and no ``commitlog/``), found from the files alone; None for a plain commit log."""
        return None if fs.entry(self.root / "commitlog").is_folder else dledger.find_home(self.loc)

    @cached_property
    def segment_files(self) -> list[Segment]:
        """Every file of ``commitlog/`` (bad names too), by name, each with what is wrong with it; of a DLedger
        store, its data files (the CommitLog's container: store_format.commitlog.dledger_items walks them)."""
        if self.dledger_home is not None:
            return list_segment_files(self.dledger_home.child("data"), self._segment_size, self._segment_limit)
        if not self._readable_folder("commitlog"):
            return []
        return list_segment_files(self.loc.child("commitlog"), self._segment_size, self._segment_limit)

    @cached_property
    def segments(self) -> list[Segment]:
        """The segments the broker loads (20-digit names), by base offset."""
        return sorted((s for s in self.segment_files if s.base_offset is not None), key=lambda s: s.base_offset)

    @property
    def segment_size(self) -> int | None:
        return self._segment_size or infer_segment_size([(s.base_offset, s.length) for s in self.segments])

    def walk_commitlog(self, *, decode: bool = True, check_crc: bool = True, salvage: bool = False,
                       stop_at_first_stop: bool = False, unreadable: list | None = None) -> Iterator:
        """Frames of every segment in order (each segment walked from its start).  With ``salvage``, also
        frames past damage and :class:`~store_format.commitlog.SalvageSpan`s for unframeable bytes.  A segment
        that cannot be opened raises its ``UnreadableError``, or, with ``unreadable`` (a list), is skipped and
        its error appended there."""
        for seg in self.segments:
            try:
                m = ReadOnlyMap(seg.path)
            except fs.UnreadableError as e:
                if unreadable is None:
                    raise
                unreadable.append(e)
                continue
            with m:
                if dledger.is_data_file(seg.loc):  # the records inside DLedger entries
                    yield from dledger_frames(m.buf, seg.name, seg.base_offset, decode=decode, check_crc=check_crc,
                                              salvage=salvage)
                    continue
                if salvage:
                    yield from salvage_buffer(m.buf, seg.name, seg.base_offset, decode=decode, check_crc=check_crc)
                    continue
                for frame in walk_buffer(m.buf, seg.name, seg.base_offset, decode=decode, check_crc=check_crc):
                    yield frame
                    if frame.kind == "stop" and stop_at_first_stop:
                        return

    def messages(self, **kwargs) -> Iterator[Message]:
        for frame in self.walk_commitlog(decode=True, **kwargs):
            if isinstance(frame, Frame) and frame.kind == "message":
                yield frame.message

    def read_message(self, physical_offset: int) -> Message:
        return read_message_at(self.segments, physical_offset, self.segment_size)

    # ---- timer log (5.x) ----------------------------------------------------------------------
    @cached_property
    def timer_log_files(self) -> list[RolledFile]:
        """Every file of ``timerlog/`` (bad names too), by name, each with what is wrong with it (the same listing
        as the commitlog's: store_format.rolled)."""
        if not self._readable_folder(L.TIMER_LOG_DIR):
            return []
        return list_folder(self.loc.child(L.TIMER_LOG_DIR), part=L.TIMER_LOG_DIR)

    @cached_property
    def timer_log(self) -> list[RolledFile]:
        """The timer-log files the broker loads (20-digit names), by base offset: what the timer readers take."""
        return sorted((f for f in self.timer_log_files if f.base_offset is not None), key=lambda f: f.base_offset)

    # ---- consume queues (every backend: store_format.queues) -----------------------------------------
    @cached_property
    def queue_listing(self) -> list:
        """Every file of every queue folder (``consumequeue/``, 5.x ``batchconsumequeue/``...: store_format.queues,
        bad folder and file names too, each with its problems), in listing order; a part folder no reader can read
        has none (store_format.fs reports it)."""
        from .queues import BACKENDS, list_queue_files

        return [f for b in BACKENDS if self._readable_folder(b.folder)
                for f in list_queue_files(self.loc.child(b.folder), (b,), self._file_limit)]

    @property
    def skipped(self) -> list[Skipped]:
        """The part folders listed so far past ``max_files`` or ``max_segments``, each with what it left out
        (store_format.rolled)."""
        return [s for limit in (self._segment_limit, self._file_limit) if limit is not None for s in limit.skipped]

    @cached_property
    def queue_models(self) -> list:
        """Every queue the broker loads, of every backend (store_format.queues.Queue), in listing order."""
        from .queues import group_queues

        return group_queues(self.queue_listing)

    def listing_of(self, backend) -> list:
        """:attr:`queue_listing`'s files of one backend (store_format.queues.Backend)."""
        return [f for f in self.queue_listing if f.backend is backend]

    def queues_of(self, backend) -> dict[tuple[str, int], list]:
        """{(topic, queue id): files as the backend's readers take them} of one backend's queues, each by name."""
        return {q.key: q.reader_files for q in self.queue_models if q.backend is backend}

    @property
    def queue_files(self) -> list:
        """Every file of the consume queues ``consumequeue/`` holds, whatever its backend (store_format.queues: its
        ``<topic>/<queue>/`` files, bad folder and file names too, and a database backend's queues), in listing
        order; a queue both the files and a database hold, the files' (store_format.queues.preferred)."""
        from .queues import FILE, preferred

        return preferred([f for f in self.queue_listing if f.backend.folder == FILE.folder])

    @cached_property
    def queues(self) -> dict[tuple[str, int], list[CQFile]]:
        """{(topic, queue id): files} of the consume queues (``consumequeue/``) the broker loads, each by name."""
        from .queues import FILE

        return self.queues_of(FILE)

    @property
    def consume_queue_file_size(self) -> int | None:
        lengths = Counter(f.length for files in self.queues.values() for f in files)
        return lengths.most_common(1)[0][0] if lengths else None

    def consume_queue(self, topic: str, queue_id: int, **kwargs) -> Iterator[CQUnit]:
        return read_queue(self.queues.get((topic, queue_id), []), **kwargs)

    # ---- batch consume queues (5.x, queue.type=BatchCQ) ----------------------------------------
    @property
    def batch_queue_files(self) -> list:
        """Every file of ``batchconsumequeue/<topic>/<queue>/`` (bad names and lengths too, each with its problems),
        by topic, queue and name."""
        from .queues import BATCH

        return self.listing_of(BATCH)

    @cached_property
    def batch_queues(self) -> dict:
        """{(topic, queue id): rolled files} the broker loads, each queue's by offset."""
        from .queues import BATCH

        return self.queues_of(BATCH)

    @cached_property
    def batch_topics(self) -> frozenset:
        """The topics whose records go to batch consume queues instead of consume queues: those with a queue folder
        under ``batchconsumequeue/``, and those topics.json gives ``queue.type=BatchCQ``."""
        found = {f.topic for f in self.batch_queue_files if f.queue_id is not None}
        return frozenset(found | self._topics_with(L.TOPIC_ATTRIBUTE_QUEUE_TYPE, L.QUEUE_TYPE_BATCH))

    def _topics_with(self, attribute: str, value: str) -> set:
        """The topics topics.json gives ``attribute`` = ``value`` (5.x TopicConfig.attributes)."""
        return {name for name, attributes in self._topic_attributes.items() if attributes.get(attribute) == value}

    @cached_property
    def _topic_attributes(self) -> dict[str, dict]:
        """{topic: its attributes} of the topics topics.json gives attributes, the file read and parsed once (the
        batch and the compaction topics each ask; a fleet's brokers each paid two parses)."""
        from .config import topic_configs

        cfg = self.config("topics.json")
        try:
            table = topic_configs(cfg) if isinstance(cfg.data, dict) else {}
        except StoreFormatError:  # a topicConfigTable that is not a map: the metadata family reports it
            table = {}
        found = {}
        for name, c in table.items():
            attributes = c.get("attributes") if isinstance(c, dict) else None
            if isinstance(attributes, dict):
                found[str(name)] = attributes
        return found

    @cached_property
    def compaction_topics(self) -> frozenset:
        """The topics with a compaction store (store_format.compaction): a sparse queue folder under
        ``compaction/compactionCq/``, a log folder under ``compaction/compactionLog/``, or topics.json's
        ``cleanup.policy=COMPACTION``."""
        import pyarrow.fs as pafs

        from .queues import COMPACTION

        found = {f.topic for f in self.listing_of(COMPACTION) if f.queue_id is not None}
        logs = self.loc.child(L.COMPACTION_DIR).child("compactionLog")
        if self._readable_folder(L.COMPACTION_LOG_DIR):
            found |= {i.base_name for i in logs.list() if i.type == pafs.FileType.Directory}
        return frozenset(found | self._topics_with(L.TOPIC_ATTRIBUTE_CLEANUP_POLICY, L.CLEANUP_POLICY_COMPACTION))

    @cached_property
    def topics_by_kind(self) -> dict[str, frozenset]:
        """{queue kind: its topics} of the kinds besides ``plain`` the broker has (store_format.queues.Queue.kind):
        ``batch`` (:attr:`batch_topics`: their folders, and topics.json's queue.type=BatchCQ), ``compaction``
        (:attr:`compaction_topics`) and ``lmq`` (the
        %LMQ% consume queues' topics); what the audit's families ask of a broker, so the engine names no kind."""
        lmq = frozenset(q.topic for q in self.queue_models if q.kind == "lmq")
        return {kind: topics for kind, topics in (("batch", self.batch_topics), ("lmq", lmq),
                                                  ("compaction", self.compaction_topics)) if topics}

    @cached_property
    def features(self):
        """What its files say about the RocketMQ that wrote it (store_format.features.StoreFeatures), found once:
        the audit's planning, families and recovery prediction each ask, and each asking lists ``commitlog/`` (of
        thousands of small segments maybe) again."""
        from .features import store_features

        return store_features(self.loc)

    @cached_property
    def multi_dispatch(self) -> bool:
        """Its records may carry INNER_MULTI_DISPATCH: it has %LMQ% queues, or its files say it is a 5.x store (a
        4.9.x broker with LMQ shows its %LMQ% queues or lmqConsumerOffset.json)."""
        f = self.features
        return "lmq" in self.topics_by_kind or f.is_5x or f.lmq_consumer_offsets

    # ---- index -------------------------------------------------------------------------------
    @cached_property
    def index_files(self) -> list[fs.Location]:
        """Every file of ``index/`` (bad names too), by name."""
        return index_files(self.loc.child("index")) if self._readable_folder("index") else []

    def index_paths(self) -> list[Path]:
        """The index files the broker loads (17-digit names), by name, as the Path-based readers open them."""
        return [f.as_path() for f in self.index_files if INDEX_NAME.fullmatch(f.name)]

    def open_index(self, path: Path) -> IndexFile:
        """An index file with its geometry: the store's given one (checked against the file) or the file's own,
        found on the first open and remembered."""
        known = self._index_geometry.get(path)
        if known is not None:
            return IndexFile(path, *known, verify=False)
        f = IndexFile(path, self.hash_slot_num, self.index_num)
        self._index_geometry[path] = (f.hash_slot_num, f.index_num)
        return f

    def index_candidates(self, topic: str, key: str, begin: int = 0, end: int = 2**63 - 1, *,
                         unreadable: dict | None = None) -> list[int]:
        """Physical offsets the index files give for ``topic#key``, newest file first (hash matches only).  An
        index file that cannot be opened raises, or, with ``unreadable`` (a dict), is skipped and recorded there
        (its path -> the IndexFileError); but a geometry the store was given (broker.conf, the flags) that a
        file contradicts always raises: that is the caller's setting to fix, not a file to work around."""
        out = []
        given = self.hash_slot_num is not None or self.index_num is not None
        for path in reversed(self.index_paths()):
            try:
                f = self.open_index(path)
            except IndexFileError as e:
                if unreadable is None or (given and e.kind == ErrorKind.BAD_GEOMETRY):
                    raise
                unreadable[str(path)] = e
                continue
            with f:
                if f.header.index_count <= 1 or not f.is_time_matched(begin, end):
                    continue
                out.extend(f.lookup(topic, key, begin, end))
        return out

    def query_key(self, topic: str, key: str, begin: int = 0, end: int = 2**63 - 1, *,
                  unreadable: dict | None = None) -> list[Message]:
        """Messages whose topic is ``topic`` and whose UNIQ_KEY or KEYS contain ``key``: index candidates,
        verified against the record (no 64-result cap).  Duplicate index entries collapse.  ``unreadable``: as
        :meth:`index_candidates`."""
        found, seen = [], set()
        for offset in self.index_candidates(topic, key, begin, end, unreadable=unreadable):
            if offset in seen:
                continue
            seen.add(offset)
            try:
                msg = self.read_message(offset)
            except StoreFormatError:
                continue  # a stale entry into damaged or dropped bytes: not a match
            if msg.topic == topic and (key == msg.uniq_key or key in msg.keys):
                found.append(msg)
        return sorted(found, key=lambda m: m.physical_offset)

    def find_msg_id(self, msg_id: str) -> Message | None:
        """Read the record an offsetMsgId names; None when that offset holds another broker's/no record."""
        ident = parse_offset_msg_id(msg_id)
        try:
            msg = self.read_message(ident.physical_offset)
        except StoreFormatError:
            return None
        if msg.physical_offset != ident.physical_offset or parse_host(msg.store_host) != (ident.store_ip, ident.store_port):
            return None
        return msg

    # ---- metadata ----------------------------------------------------------------------------
    def checkpoint(self) -> Checkpoint:
        return read_checkpoint(self.root / "checkpoint")

    def markers(self) -> Markers:
        return read_markers(self.root)

    def config(self, name: str) -> ConfigFile:
        return read_config(self.root / "config", name)

    def config_names(self) -> list[str]:
        """Names of the config files (``.bak`` folded in), unreadable ones too (``config`` says why)."""
        if not self._readable_folder("config"):
            return []
        return sorted({e.name.removesuffix(".bak") for e in fs.entries(self.root / "config")
                       if not e.is_folder and e.name.endswith((".json", ".json.bak"))})


__all__ = ["Store"]
