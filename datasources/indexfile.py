"""``rocketmq-index``: IndexFile headers and entries as rows, one task per file.

Per file: one ``header`` row (the 40-byte IndexHeader and the geometry), then one ``entry`` row for each
entry 1 .. indexCount-1 (entry 0 is never written), or one ``corrupt`` row when the file cannot be opened
(short file, a geometry neither the file nor the options tell, bad name), with the header's fields when the file
holds 40 bytes.  The geometry is each file's own (``store_format.indexfile.infer_geometry``) unless the options
``hashSlotNum``/``indexNum`` (broker.conf's maxHashSlotNum/maxIndexNum) give it; a given one that does not fit a
file makes that file a ``corrupt`` row.  Entries are read with numpy over the layout that
store_format.layout declares; each carries its slot (``key_hash % hashSlotNum``), absolute time
(``beginTimestamp + timeDiff * 1000``) and ``problems`` of its hash chain:

* ``prev_out_of_range``: prev index < 0 or >= indexCount;
* ``prev_not_older``: prev index >= the entry's own index (chains run newest to oldest);
* ``prev_other_slot``: the previous entry hashes to another slot;
* ``negative_time_diff``: ``selectPhyOffset`` stops at it;
* ``unreachable``: no slot's chain leads to it (the walk from each slot head, bounded by indexCount).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Iterator

import numpy as np
import pyarrow as pa
from pyspark.sql.datasource import InputPartition

from store_format import layout as L
from store_format.commitlog import ReadOnlyMap
from store_format.errors import ErrorKind, StoreFormatError
from store_format.indexfile import INDEX_NAME, IndexFile, read_header
from udfs.columns import column

from .base import StoreDataSource, StoreReader, option_int
from .storepaths import Location, PartInput

FORMAT = "rocketmq-index"
SCHEMA = pa.schema([
    column("broker", pa.string()),
    column("file", pa.string(), "index file name: its creation time, yyyyMMddHHmmssSSS"),
    column("kind", pa.string(), "`header` (one per file), `entry` (entries 1 .. indexCount-1), or `corrupt` (a file "
           "that cannot be opened as an index: `reason`, `detail`, and the header's fields when it has 40 bytes)"),
    # header
    column("begin_timestamp", pa.int64(), "header: beginTimestamp, store time (ms) of the first message indexed"),
    column("end_timestamp", pa.int64(), "header: endTimestamp, store time (ms) of the last message indexed"),
    column("begin_phy_offset", pa.int64(), "header: beginPhyOffset, commitlog offset of the first message indexed"),
    column("end_phy_offset", pa.int64(), "header: endPhyOffset, commitlog offset of the last message indexed"),
    column("hash_slot_count", pa.int32(), "header: hashSlotCount, as the broker counts slots used"),
    column("index_count", pa.int32(), "header: indexCount, the next entry to write (entry 0 is never written)"),
    column("hash_slot_num", pa.int32(), "header: the file's slots (maxHashSlotNum), from its size or the "
           "`hashSlotNum` option"),
    column("index_num", pa.int32(), "header: the entries the file has room for (maxIndexNum), from its size or "
           "the `indexNum` option"),
    # header: what the file's entries say, to hold the header against (counted here, where they are in memory)
    column("entry_slots", pa.int32(), "header: the distinct slots the entries' key hashes fall in"),
    column("first_entry_phy_offset", pa.int64(), "header: entry 1's physical offset"),
    column("last_entry_phy_offset", pa.int64(), "header: the last entry's physical offset"),
    column("duplicate_entries", pa.int64(), "header: entries beyond the first for a (key hash, physical offset) "
           "pair indexed more than once"),
    column("duplicated_pairs", pa.int64(), "header: (key hash, physical offset) pairs indexed more than once"),
    # entry
    column("entry", pa.int32(), "entry: its index in the file (1 .. indexCount-1)"),
    column("slot", pa.int32(), "entry: its slot, key_hash % hashSlotNum (null for a negative hash)"),
    column("key_hash", pa.int32(), "entry: keyHash, the key's hash (String.hashCode, absolute value)"),
    column("physical_offset", pa.int64(), "entry: phyOffset, the indexed message's commitlog offset"),
    column("time_diff", pa.int32(), "entry: timeDiff, seconds from beginTimestamp to the message's store time"),
    column("store_time", pa.int64(), "entry: beginTimestamp + timeDiff * 1000 (ms)"),
    column("prev_index", pa.int32(), "entry: prevIndex, the previous entry of its slot's chain (0: none)"),
    column("problems", pa.list_(pa.string()), "entry: its hash chain's problems: `prev_out_of_range`, "
           "`prev_not_older`, `prev_other_slot`, `negative_time_diff`, `unreachable` (the module docstring of "
           "datasources/indexfile.py)"),
    # corrupt
    column("reason", pa.string(), "corrupt: the error kind (BAD_FILE_NAME, TRUNCATED, ...)"),
    column("detail", pa.string(), "corrupt: what is wrong, in words"),
])
_ENTRY_DTYPE = L.INDEX_ENTRY.dtype()


@dataclass
class IndexFilePartition(InputPartition):
    broker: str
    loc: Location
    name: str
    hash_slot_num: int | None
    index_num: int | None


def plan_files(inputs: list[PartInput], hash_slot_num, index_num) -> list[IndexFilePartition]:
    """A partition per file of the index ``inputs`` (storepaths.find_inputs), read with the geometry given (None:
    each file's own header)."""
    out = []
    for inp in inputs:
        infos = [inp.loc.info()] if inp.single_file else [i for i in inp.loc.list() if i.is_file]
        for i in infos:
            out.append(IndexFilePartition(inp.broker, Location(inp.loc.fs, i.path), i.base_name, hash_slot_num,
                                          index_num))
    return out


# the chain problems an entry can have, in the order they are listed
CHAIN_PROBLEMS = ("prev_out_of_range", "prev_not_older", "prev_other_slot", "negative_time_diff", "unreachable")
# (key hash, offset) pairs the duplicate count sorts at once: what a task holds beyond a byte per entry
SUMMARY_BUCKET_ENTRIES = 1 << 22


class EntryViews:
    """An index file's slots and entries as big-endian numpy views of its map (nothing copied until read):
    ``key_hash``, ``physical_offset``, ``time_diff``, ``prev_index`` indexed by entry number (0 .. count-1)."""

    def __init__(self, buf, hash_slot_num: int, count: int):
        self.hash_slot_num, self.count = hash_slot_num, count
        self.raw = np.frombuffer(buf, np.uint8)
        entries_at = L.INDEX_HEADER_SIZE + hash_slot_num * L.INDEX_SLOT_SIZE
        at = L.INDEX_ENTRY.offsets
        self.geo = np.array([L.INDEX_HEADER_SIZE, entries_at, L.INDEX_ENTRY_SIZE, at["key_hash"], at["physical_offset"],
                             at["time_diff"], at["prev_index"], L.INDEX_SLOT_SIZE], np.int64)
        self.slots = np.frombuffer(buf, L.INDEX_SLOT.numpy_type("index"), hash_slot_num, L.INDEX_HEADER_SIZE)
        e = np.frombuffer(buf, _ENTRY_DTYPE, count, L.INDEX_HEADER_SIZE + hash_slot_num * L.INDEX_SLOT_SIZE)
        self.key_hash, self.physical_offset = e["key_hash"], e["physical_offset"]
        self.time_diff, self.prev_index = e["time_diff"], e["prev_index"]

    def chunk(self, start: int, end: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """Native copies of entries start..end-1: key hash, physical offset, time diff, prev index."""
        return (self.key_hash[start:end].astype(np.int32), self.physical_offset[start:end].astype(np.int64),
                self.time_diff[start:end].astype(np.int32), self.prev_index[start:end].astype(np.int32))

    def slot_of(self, key_hash: np.ndarray) -> np.ndarray:
        return np.where(key_hash >= 0, key_hash % np.int32(self.hash_slot_num), -1)


def read_entry_window(loc: Location, hash_slot_num: int, first: int, end: int) -> dict:
    """Entries ``first`` .. ``end - 1`` of an index file (of ``hash_slot_num`` slots) as native numpy columns: read
    from a read-only map, or one ranged read."""
    at = L.INDEX_HEADER_SIZE + hash_slot_num * L.INDEX_SLOT_SIZE + max(first, 0) * L.INDEX_ENTRY_SIZE
    n = max(end - first, 0) * L.INDEX_ENTRY_SIZE
    if loc.local_path is not None:
        with ReadOnlyMap(loc.local_path) as m:
            raw = bytes(m.buf[at:at + n])
    else:
        raw = loc.read_range(at, n)
    e = np.frombuffer(raw, _ENTRY_DTYPE, len(raw) // L.INDEX_ENTRY_SIZE)
    return {"key_hash": e["key_hash"].astype(np.int32), "physical_offset": e["physical_offset"].astype(np.int64),
            "time_diff": e["time_diff"].astype(np.int32), "prev_index": e["prev_index"].astype(np.int32)}


def written_entries(m: ReadOnlyMap, hash_slot_num: int, count: int) -> int:
    """Of the ``count`` entries a header counts, those up to the last one holding a non-zero byte (at least 1:
    entry 0 is never written).  Entries past it are zeros no put ever wrote: a counter beyond them is one wrong
    header, not that many broken entries."""
    at = L.INDEX_HEADER_SIZE + hash_slot_num * L.INDEX_SLOT_SIZE
    end = m.written_length(at + count * L.INDEX_ENTRY_SIZE)
    return max(1, min(count, -(-(end - at) // L.INDEX_ENTRY_SIZE)))


def chain_bits(v: EntryViews) -> np.ndarray:
    """Each entry's chain problems (:data:`CHAIN_PROBLEMS`) as bits, bit ``j`` for problem ``j``, one compiled pass
    over the file's bytes (udfs.compiled.index_chain_bits: reachable is what ``selectPhyOffset`` can walk to from
    some slot).  Five bytes per entry while it runs, one after."""
    return _compiled().index_chain_bits(v.raw, v.geo, v.hash_slot_num, v.count)


def problem_lists(bits: np.ndarray) -> pa.ListArray:
    """Entries' problem bits (:func:`chain_bits`) as a list of problem names per entry, in CHAIN_PROBLEMS order."""
    masks = (bits[:, None] >> np.arange(len(CHAIN_PROBLEMS), dtype=np.uint8)) & 1
    offsets = np.zeros(len(bits) + 1, np.int32)
    np.cumsum(masks.sum(axis=1), out=offsets[1:])
    _, which = np.nonzero(masks)  # row-major: each entry's problems in CHAIN_PROBLEMS order
    names = pa.array(CHAIN_PROBLEMS, pa.string()).take(pa.array(which, pa.int64()))
    return pa.ListArray.from_arrays(pa.array(offsets), names)


def entry_summary(v: EntryViews, bucket_entries: int = SUMMARY_BUCKET_ENTRIES) -> dict:
    """What a file's entries (1..count-1) say about its header: the slots they use, the physical offsets of the
    first and last, and (key hash, offset) pairs indexed more than once (extra entries, pairs), counted exactly
    (udfs.compiled.index_entry_summary; memory: a byte per entry plus ``bucket_entries`` pairs)."""
    if v.count <= 1:
        return {"entry_slots": 0, "duplicate_entries": 0, "duplicated_pairs": 0}
    slots, duplicate_entries, duplicated_pairs = _compiled().index_entry_summary(v.raw, v.geo, v.hash_slot_num,
                                                                               v.count, bucket_entries)
    return {"entry_slots": int(slots), "first_entry_phy_offset": int(v.physical_offset[1]),
            "last_entry_phy_offset": int(v.physical_offset[v.count - 1]),
            "duplicate_entries": int(duplicate_entries), "duplicated_pairs": int(duplicated_pairs)}


def _compiled():
    from udfs import compiled  # numba compiles on first use: not at import, which planning on the driver does

    return compiled


def file_batches(part: IndexFilePartition) -> Iterator[pa.RecordBatch]:
    """One index file as record batches: its header row, then its entries (built column-wise, a batch at a time,
    from the map), or one corrupt row when it cannot be read.  Memory: a few bytes per entry (the chain check, the
    repeat count's buckets), plus a bucket's and a batch's worth, whatever the dump's size (a full file has 20 M
    entries)."""
    base = {"broker": part.broker, "file": part.name}
    if not INDEX_NAME.match(part.name):
        yield _rows_batch([{**base, "kind": "corrupt", "reason": ErrorKind.BAD_FILE_NAME.value,
                            "detail": "an index file name is its creation time, yyyyMMddHHmmssSSS (17 digits); "
                                      "not read"}])
        return
    local = part.loc.as_path()  # a Path, else a fs.StorePath read through pyarrow.fs
    try:
        f = IndexFile(local, part.hash_slot_num, part.index_num)
    except StoreFormatError as e:
        yield _rows_batch([{**base, "kind": "corrupt", "reason": e.kind.value, "detail": e.message,
                            **_header_fields(local)}])
        return
    with f, ReadOnlyMap(local) as m:  # IndexFile gave header and geometry; the entries are read in bulk
        h = f.header
        count = min(max(h.index_count, 1), f.index_num)
        v = EntryViews(m.buf, f.hash_slot_num, count)
        bits = chain_bits(v)
        yield _rows_batch([{**base, "kind": "header", **vars(h), "hash_slot_num": f.hash_slot_num,
                            "index_num": f.index_num, **entry_summary(v)}])
        constant = {"broker": pa.scalar(part.broker, pa.string()), "file": pa.scalar(part.name, pa.string()),
                    "kind": pa.scalar("entry", pa.string())}
        for start in range(1, count, _BATCH_ROWS):
            end = min(start + _BATCH_ROWS, count)
            kh, phys, td, prev = v.chunk(start, end)  # copies: nothing sent may point into the map
            rows = end - start
            columns = {
                **{name: pa.repeat(value, rows) for name, value in constant.items()},
                "entry": pa.array(np.arange(start, end, dtype=np.int32)),
                "slot": pa.array(kh % np.int32(f.hash_slot_num), mask=kh < 0), "key_hash": pa.array(kh),
                "physical_offset": pa.array(phys), "time_diff": pa.array(td),
                "store_time": pa.array(h.begin_timestamp + td.astype(np.int64) * 1000),
                "prev_index": pa.array(prev), "problems": problem_lists(bits[start:end]),
            }
            yield pa.RecordBatch.from_arrays([columns[fld.name] if fld.name in columns
                                              else pa.nulls(rows, fld.type) for fld in SCHEMA], schema=SCHEMA)
        del v  # no view may outlive the map


_BATCH_ROWS = 16384


def _header_fields(path) -> dict:
    """The header of a file that cannot be opened as an index, when it has one (40 bytes)."""
    with ReadOnlyMap(path) as m:
        try:
            return vars(read_header(m.buf))
        except StoreFormatError:
            return {}


def _rows_batch(rows: list[dict]) -> pa.RecordBatch:
    return pa.RecordBatch.from_pylist(rows, schema=SCHEMA)


class IndexReader(StoreReader):
    PART = "index"

    def __init__(self, options):
        super().__init__(options)
        self.hash_slot_num = option_int(options, "hashSlotNum")
        self.index_num = option_int(options, "indexNum")

    def plan(self, inputs):
        return plan_files(inputs, self.hash_slot_num, self.index_num)

    def read_partition(self, partition: IndexFilePartition):
        yield from file_batches(partition)


class IndexDataSource(StoreDataSource):
    FORMAT = FORMAT
    READER = IndexReader

    def arrow_schema(self) -> pa.Schema:
        return SCHEMA
