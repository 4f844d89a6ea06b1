"""The index: ``IndexFile`` (``index/<yyyyMMddHHmmssSSS>``: header, hash slots, entries) and ``IndexService``, the
``CommitLogDispatcherBuildIndex`` the broker runs with messageIndexEnable."""
from __future__ import annotations

import datetime as _dt
import struct
from pathlib import Path
from zoneinfo import ZoneInfo

from .. import layout as L
from ..indexfile import list_index_files
from ..javahash import index_key, index_key_hash
from ..message import Message
from ..properties import split_keys
from .dispatch import Dispatcher, DispatchRequest
from .openfiles import OpenFiles

_INDEX_HEADER = struct.Struct(L.INDEX_HEADER_STRUCT)
_INDEX_ENTRY = struct.Struct(L.INDEX_ENTRY_STRUCT)
_INDEX_SLOT = struct.Struct(L.INDEX_SLOT.struct)


def time_millis_to_human(ms: int, tz: str = "UTC") -> str:
    """``UtilAll.timeMillisToHumanString``: yyyyMMddHHmmssSSS in the broker's zone (an index file's name)."""
    t = _dt.datetime.fromtimestamp(ms / 1000, ZoneInfo(tz))
    return f"{t:%Y%m%d%H%M%S}{ms % 1000:03d}"


class IndexFileWriter:
    """One ``IndexFile``: header fields kept here and written through to the mapping like IndexHeader."""

    def __init__(self, path: Path, slots: int, num: int, create: bool, prev_end_phy: int = 0, prev_end_ts: int = 0,
                 files: OpenFiles | None = None):
        self.path, self.slots, self.num = path, slots, num
        self.m = (files or OpenFiles()).file(path, L.index_file_size(slots, num), create)
        if create:
            self.begin_ts = self.end_ts = self.begin_phy = self.end_phy = 0
            self.slot_count, self.count = 0, 1
            # IndexFile(..., endPhyOffset, endTimestamp): a new file starts where the previous one ended
            if prev_end_phy > 0:
                self.begin_phy = self.end_phy = prev_end_phy
                self._put_header(begin_phy_offset=prev_end_phy, end_phy_offset=prev_end_phy)
            if prev_end_ts > 0:
                self.begin_ts = self.end_ts = prev_end_ts
                self._put_header(begin_timestamp=prev_end_ts, end_timestamp=prev_end_ts)
        else:
            (self.begin_ts, self.end_ts, self.begin_phy, self.end_phy, self.slot_count,
             self.count) = _INDEX_HEADER.unpack_from(self.m.map, 0)
            if self.count <= 0:  # IndexHeader.load
                self.count = 1

    def _put_header(self, **values: int) -> None:
        for name, value in values.items():
            self.m.write(L.INDEX_HEADER.offset(name), L.INDEX_HEADER.pack(name, value))

    @property
    def full(self) -> bool:
        return self.count >= self.num

    def put(self, key_hash: int, phy: int, ts: int) -> bool:
        """``IndexFile.putKey``; False when full."""
        if self.count >= self.num:
            return False
        slot_pos = L.INDEX_HEADER_SIZE + (key_hash % self.slots) * L.INDEX_SLOT_SIZE
        slot_value = _INDEX_SLOT.unpack_from(self.m.map, slot_pos)[0]
        if slot_value <= 0 or slot_value > self.count:
            slot_value = 0
        diff = ts - self.begin_ts
        diff = int(diff / 1000) if diff >= 0 else -((-diff) // 1000)  # Java long division truncates
        if self.begin_ts <= 0 or diff < 0:
            diff = 0
        elif diff > 0x7FFFFFFF:
            diff = 0x7FFFFFFF
        pos = L.INDEX_HEADER_SIZE + self.slots * L.INDEX_SLOT_SIZE + self.count * L.INDEX_ENTRY_SIZE
        self.m.write(pos, _INDEX_ENTRY.pack(key_hash, phy, diff, slot_value))
        self.m.write(slot_pos, _INDEX_SLOT.pack(self.count))
        if self.count <= 1:
            self.begin_phy, self.begin_ts = phy, ts
        if slot_value == 0:
            self.slot_count += 1
        self.count += 1
        self.end_phy, self.end_ts = phy, ts
        self.m.write(0, _INDEX_HEADER.pack(self.begin_ts, self.end_ts, self.begin_phy, self.end_phy,
                                           self.slot_count, self.count))
        return True

    def close(self):
        self.m.close()



class IndexService(Dispatcher):
    """``IndexService``: the index files of one store, and ``buildIndex`` for each dispatched record (in the
    dispatcher list only with messageIndexEnable; a reopened store's last file is picked up either way)."""

    def __init__(self, writer):
        self.writer = writer
        self.index_file: IndexFileWriter | None = None
        self.index_names: list[str] = []

    def reopen(self) -> None:
        """The last index file, if it has room."""
        c = self.writer.config
        names = list_index_files(self.writer.root / "index")
        self.index_names = [p.name for p in names]
        if names:
            self.index_file = IndexFileWriter(names[-1], c.maxHashSlotNum, c.maxIndexNum, create=False,
                                              files=self.writer.open_files)

    def last_index_file(self, *, at: int) -> IndexFileWriter:
        """IndexService.getAndCreateLastIndexFile: the index file to put into; when there is none or it is full,
        a new one, named after the time ``at`` (the store time of the record being dispatched)."""
        w = self.writer
        cur = self.index_file
        if cur is not None and not cur.full:
            return cur
        prev_phy = prev_ts = 0
        if cur is not None:
            prev_phy, prev_ts = cur.end_phy, cur.end_ts
            # IndexService.flush(prev): a full file's end time becomes indexMsgTimestamp, checkpoint flushed
            w.flush.index = cur.end_ts
            w.flush.snapshot()
            cur.close()
        d = w._path("index")
        d.mkdir(exist_ok=True)
        ms = w.now(at)
        name = time_millis_to_human(ms, w.config.timezone)
        while name in self.index_names or (d / name).exists():  # two files in one millisecond would collide
            ms += 1
            name = time_millis_to_human(ms, w.config.timezone)
        self.index_names.append(name)
        self.index_file = IndexFileWriter(d / name, w.config.maxHashSlotNum, w.config.maxIndexNum,
                                          create=True, prev_end_phy=prev_phy, prev_end_ts=prev_ts,
                                          files=w.open_files)
        return self.index_file

    def dispatch(self, request: DispatchRequest) -> bool:
        self.build_index(request.msg)
        return True

    def build_index(self, msg: Message) -> None:
        """IndexService.buildIndex."""
        f = self.last_index_file(at=msg.store_timestamp)
        if msg.physical_offset < f.end_phy:
            return  # already indexed
        if msg.sys_flag & L.TRANSACTION_MASK == L.TRANSACTION_ROLLBACK_TYPE:
            return
        keys = []
        if msg.uniq_key is not None:
            keys.append(msg.uniq_key)
        keys.extend(split_keys(msg.properties.get(L.PROPERTY_KEYS)))
        for k in keys:
            h = index_key_hash(index_key(msg.topic, k))
            while not f.put(h, msg.physical_offset, msg.store_timestamp):
                f = self.last_index_file(at=msg.store_timestamp)

    def close_files(self) -> None:
        if self.index_file is not None:
            self.index_file.close()
