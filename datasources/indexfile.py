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
from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition

from store_format import layout as L
from store_format.commitlog import ReadOnlyMap
from store_format.errors import ErrorKind, StoreFormatError
from store_format.indexfile import INDEX_NAME, IndexFile, read_header

from .storepaths import Location, find_inputs, local_copy

FORMAT = "rocketmq-index"
SCHEMA = pa.schema([
    ("broker", pa.string()), ("file", pa.string()), ("kind", pa.string()),
    # header
    ("begin_timestamp", pa.int64()), ("end_timestamp", pa.int64()), ("begin_phy_offset", pa.int64()),
    ("end_phy_offset", pa.int64()), ("hash_slot_count", pa.int32()), ("index_count", pa.int32()),
    ("hash_slot_num", pa.int32()), ("index_num", pa.int32()),
    # header: what the file's entries say, to hold the header against (counted here, where they are in memory)
    ("entry_slots", pa.int32()), ("first_entry_phy_offset", pa.int64()), ("last_entry_phy_offset", pa.int64()),
    ("duplicate_entries", pa.int64()), ("duplicated_pairs", pa.int64()),
    # entry
    ("entry", pa.int32()), ("slot", pa.int32()), ("key_hash", pa.int32()), ("physical_offset", pa.int64()),
    ("time_diff", pa.int32()), ("store_time", pa.int64()), ("prev_index", pa.int32()),
    ("problems", pa.list_(pa.string())),
    # corrupt
    ("reason", pa.string()), ("detail", pa.string()),
])
_ENTRY_DTYPE = L.numpy_dtype(L.INDEX_ENTRY_FIELDS, L.INDEX_ENTRY_SIZE)


@dataclass
class IndexFilePartition(InputPartition):
    broker: str
    loc: Location
    name: str
    hash_slot_num: int | None
    index_num: int | None


def plan_files(path: str, broker: str | None, hash_slot_num, index_num) -> list[IndexFilePartition]:
    out = []
    for inp in find_inputs(path, "index", broker):
        infos = [inp.loc.info()] if inp.single_file else [i for i in inp.loc.list() if i.is_file]
        for i in infos:
            out.append(IndexFilePartition(inp.broker, Location(inp.loc.fs, i.path), i.base_name, hash_slot_num,
                                          index_num))
    return out


# the chain problems an entry can have, in the order they are listed
CHAIN_PROBLEMS = ("prev_out_of_range", "prev_not_older", "prev_other_slot", "negative_time_diff", "unreachable")
# entries (and slots) a step works on at once: what a task holds beyond two bytes per entry, whatever the file's size
CHUNK_ENTRIES = 1 << 18


class EntryViews:
    """An index file's slots and entries as big-endian numpy views of its map (nothing copied until read):
    ``key_hash``, ``physical_offset``, ``time_diff``, ``prev_index`` indexed by entry number (0 .. count-1)."""

    def __init__(self, buf, hash_slot_num: int, count: int):
        self.hash_slot_num, self.count = hash_slot_num, count
        self.slots = np.frombuffer(buf, ">i4", hash_slot_num, L.INDEX_HEADER_SIZE)
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


def reachable(v: EntryViews, chunk: int = CHUNK_ENTRIES) -> np.ndarray:
    """Which entries some slot's chain leads to: the chains of a chunk of slots walked at once, one step per
    round, like ``selectPhyOffset`` (stops at prev 0, out of range, itself or a negative time diff; bounded by
    indexCount).  One byte per entry, plus a chunk of slot heads."""
    n = v.count
    reached = np.zeros(n, bool)
    for start in range(0, v.hash_slot_num, chunk):
        heads = v.slots[start:start + chunk].astype(np.int32)
        frontier = np.unique(heads[(heads > 0) & (heads < n)])
        for _ in range(n):
            frontier = frontier[~reached[frontier]]
            if not len(frontier):
                break
            reached[frontier] = True
            nxt = v.prev_index[frontier].astype(np.int32)
            ok = (nxt > 0) & (nxt < n) & (nxt != frontier) & (v.time_diff[frontier] >= 0)
            frontier = nxt[ok]
    return reached


def chain_problems(v: EntryViews, start: int, key_hash: np.ndarray, time_diff: np.ndarray, prev: np.ndarray,
                   reached: np.ndarray) -> pa.ListArray:
    """Problems of the entries from ``start`` (>= 1) whose fields are given (native copies, see
    :meth:`EntryViews.chunk`), a list per entry (names from :data:`CHAIN_PROBLEMS`), built column-wise."""
    n, end = v.count, start + len(key_hash)
    in_range = (prev >= 0) & (prev < n)
    older = prev < np.arange(start, end, dtype=np.int32)
    prev_slot = v.slot_of(v.key_hash[np.where(in_range, prev, 0)].astype(np.int32))
    other_slot = (prev > 0) & in_range & (prev_slot != v.slot_of(key_hash))
    masks = np.stack([~in_range, in_range & (prev > 0) & ~older, other_slot, time_diff < 0, ~reached[start:end]],
                     axis=1)
    offsets = np.zeros(len(masks) + 1, np.int32)
    np.cumsum(masks.sum(axis=1), out=offsets[1:])
    _, which = np.nonzero(masks)  # row-major: each entry's problems in CHAIN_PROBLEMS order
    names = pa.array(CHAIN_PROBLEMS, pa.string()).take(pa.array(which, pa.int64()))
    return pa.ListArray.from_arrays(pa.array(offsets), names)


def entry_summary(v: EntryViews, chunk: int = CHUNK_ENTRIES) -> dict:
    """What a file's entries (1..count-1) say about its header: the slots they use, the physical offsets of the
    first and last, and (key hash, offset) pairs indexed more than once (extra entries, pairs).  Repeats are
    counted exactly, by sorting; a file of more than ``chunk`` entries is sorted a hash bucket of about a chunk
    at a time (a pair's copies share a bucket), so the memory is a byte per entry (its bucket) plus a chunk's."""
    n = v.count
    if n <= 1:
        return {"entry_slots": 0, "duplicate_entries": 0, "duplicated_pairs": 0}
    buckets = -(-(n - 1) // chunk)
    used = np.zeros(v.hash_slot_num, bool)
    bucket_of = np.zeros(n - 1, np.uint8 if buckets <= 256 else np.uint16)  # entry i's bucket at i - 1
    for start in range(1, n, chunk):
        kh, phys, _, _ = v.chunk(start, min(start + chunk, n))
        used[v.slot_of(kh[kh >= 0])] = True
        if buckets > 1:
            bucket_of[start - 1:start - 1 + len(kh)] = _pair_hash(kh, phys) % np.uint64(buckets)
    duplicate_entries = duplicated_pairs = 0
    for bucket in range(buckets):
        at = 1 + np.flatnonzero(bucket_of == bucket)
        kh, phys = v.key_hash[at].astype(np.int32), v.physical_offset[at].astype(np.int64)
        del at
        order = np.lexsort((phys, kh))
        kh, phys = kh[order], phys[order]
        repeat = (kh[1:] == kh[:-1]) & (phys[1:] == phys[:-1])  # an entry equal to the one before it
        duplicate_entries += int(repeat.sum())
        duplicated_pairs += int((repeat & ~np.concatenate(([False], repeat[:-1]))).sum())
    return {"entry_slots": int(used.sum()), "first_entry_phy_offset": int(v.physical_offset[1]),
            "last_entry_phy_offset": int(v.physical_offset[n - 1]), "duplicate_entries": duplicate_entries,
            "duplicated_pairs": duplicated_pairs}


def _pair_hash(key_hash: np.ndarray, phys: np.ndarray) -> np.ndarray:
    """A well-mixed 64-bit hash of (key hash, offset) pairs (splitmix64's finaliser), to spread them over buckets
    even when one key fills the file."""
    x = phys.view(np.uint64) * np.uint64(0x9E3779B97F4A7C15) + key_hash.astype(np.uint32).astype(np.uint64)
    x ^= x >> np.uint64(30)
    x *= np.uint64(0xBF58476D1CE4E5B9)
    x ^= x >> np.uint64(27)
    x *= np.uint64(0x94D049BB133111EB)
    return x ^ (x >> np.uint64(31))


def file_batches(part: IndexFilePartition, chunk: int = CHUNK_ENTRIES) -> Iterator[pa.RecordBatch]:
    """One index file as record batches: its header row, then its entries (built column-wise, a batch at a time,
    from the map), or one corrupt row when it cannot be read.  Memory: one byte per entry (which entries the
    chains reach) and one more (its repeat-sort bucket), plus a chunk's worth, whatever the file's size (a full one
    has 20 M entries)."""
    base = {"broker": part.broker, "file": part.name}
    if not INDEX_NAME.match(part.name):
        yield _rows_batch([{**base, "kind": "corrupt", "reason": ErrorKind.BAD_FILE_NAME.value,
                            "detail": "an index file name is its creation time, yyyyMMddHHmmssSSS (17 digits); "
                                      "not read"}])
        return
    with local_copy(part.loc) as local:
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
            reached = reachable(v, chunk)
            yield _rows_batch([{**base, "kind": "header", **vars(h), "hash_slot_num": f.hash_slot_num,
                                "index_num": f.index_num, **entry_summary(v, chunk)}])
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
                    "prev_index": pa.array(prev), "problems": chain_problems(v, start, kh, td, prev, reached),
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


class IndexDataSource(DataSource):
    @classmethod
    def name(cls) -> str:
        return FORMAT

    def schema(self) -> str:
        from .commitlog import spark_ddl

        return spark_ddl(SCHEMA)

    def reader(self, schema):
        return IndexReader(self.options)


class IndexReader(DataSourceReader):
    def __init__(self, options):
        self.path = options.get("path")
        self.broker = options.get("broker")
        self.hash_slot_num = int(options["hashSlotNum"]) if options.get("hashSlotNum") else None
        self.index_num = int(options["indexNum"]) if options.get("indexNum") else None

    def partitions(self):
        return plan_files(self.path, self.broker, self.hash_slot_num, self.index_num) or \
            [IndexFilePartition("", None, "", None, None)]

    def read(self, partition: IndexFilePartition):
        if partition.loc is None:
            return
        yield from file_batches(partition)
