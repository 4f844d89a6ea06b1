"""``rocketmq-index``: IndexFile headers and entries as rows, one task per file.

Per file: one ``header`` row (the 40-byte IndexHeader and the geometry), then one ``entry`` row for each
entry 1 .. indexCount-1 (entry 0 is never written), or one ``corrupt`` row when the file cannot be opened
(short file, unknown geometry, bad name).  Entries are read with numpy over the layout that
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
from store_format.indexfile import INDEX_NAME, IndexFile

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


def chain_problems(index_count: int, slots: np.ndarray, key_hash: np.ndarray, prev: np.ndarray,
                   time_diff: np.ndarray, hash_slot_num: int) -> pa.ListArray:
    """Problems of entries 1..index_count-1 (arrays indexed by entry number, entry 0 unused), as a list per
    entry (names from :data:`CHAIN_PROBLEMS`), built column-wise: an index file has millions of entries."""
    n = index_count
    idx = np.arange(n, dtype=np.int32)
    slot_of = np.where(key_hash >= 0, key_hash % hash_slot_num, -1)
    in_range = (prev >= 0) & (prev < n)
    older = prev < idx
    safe_prev = np.where(in_range, prev, 0)
    other_slot = (prev > 0) & in_range & (slot_of[safe_prev] != slot_of)
    # walk every chain at once, one step per round, like selectPhyOffset (bounded by indexCount)
    reached = np.zeros(n, bool)
    heads = slots[(slots > 0) & (slots < n)]
    frontier = np.unique(heads)
    for _ in range(n):
        frontier = frontier[~reached[frontier]]
        if not len(frontier):
            break
        reached[frontier] = True
        nxt = prev[frontier]
        ok = (nxt > 0) & (nxt < n) & (nxt != frontier) & (time_diff[frontier] >= 0)
        frontier = nxt[ok]
    masks = np.stack([~in_range, in_range & (prev > 0) & ~older, other_slot, time_diff < 0, ~reached], axis=1)[1:]
    offsets = np.zeros(len(masks) + 1, np.int32)
    np.cumsum(masks.sum(axis=1), out=offsets[1:])
    _, which = np.nonzero(masks)  # row-major: each entry's problems in CHAIN_PROBLEMS order
    names = pa.array(CHAIN_PROBLEMS, pa.string()).take(pa.array(which, pa.int64()))
    return pa.ListArray.from_arrays(pa.array(offsets), names)


def file_batches(part: IndexFilePartition) -> Iterator[pa.RecordBatch]:
    """One index file as record batches: its header row, then its entries (built column-wise), or one corrupt
    row when it cannot be read."""
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
            yield _rows_batch([{**base, "kind": "corrupt", "reason": e.kind.value, "detail": e.message}])
            return
        with f:
            h = f.header
            header = {**base, "kind": "header", **vars(h), "hash_slot_num": f.hash_slot_num,
                      "index_num": f.index_num}
            count = min(max(h.index_count, 1), f.index_num)
            slots_at = L.INDEX_HEADER_SIZE
            entries_at = slots_at + f.hash_slot_num * L.INDEX_SLOT_SIZE
            with ReadOnlyMap(local) as m:  # the entries in bulk; IndexFile gave header and geometry
                # native copies in the fields' own widths (20 bytes an entry): a task holds a whole file, and a
                # full one has 20 M entries
                slots = np.frombuffer(m.buf, ">i4", f.hash_slot_num, slots_at).astype(np.int32)
                e = np.frombuffer(m.buf, _ENTRY_DTYPE, count, entries_at)
                key_hash, phys = e["key_hash"].astype(np.int32), e["physical_offset"].astype(np.int64)
                td, prev = e["time_diff"].astype(np.int32), e["prev_index"].astype(np.int32)
                del e  # no view may outlive the mmap
            problems = chain_problems(count, slots, key_hash, prev, td, f.hash_slot_num)
            del slots
    yield _rows_batch([{**header, **entry_summary(key_hash[1:], phys[1:], f.hash_slot_num)}])
    constant = {"broker": pa.scalar(part.broker, pa.string()), "file": pa.scalar(part.name, pa.string()),
                "kind": pa.scalar("entry", pa.string())}
    for start in range(1, count, _BATCH_ROWS):  # each batch's columns made when it is sent: memory stays flat
        end = min(start + _BATCH_ROWS, count)
        kh, rows = key_hash[start:end], end - start
        columns = {
            **{name: pa.repeat(value, rows) for name, value in constant.items()},
            "entry": pa.array(np.arange(start, end, dtype=np.int32)),
            "slot": pa.array(kh % np.int32(f.hash_slot_num), mask=kh < 0), "key_hash": pa.array(kh),
            "physical_offset": pa.array(phys[start:end]), "time_diff": pa.array(td[start:end]),
            "store_time": pa.array(h.begin_timestamp + td[start:end].astype(np.int64) * 1000),
            "prev_index": pa.array(prev[start:end]), "problems": problems.slice(start - 1, rows),
        }
        yield pa.RecordBatch.from_arrays([columns[fld.name] if fld.name in columns else pa.nulls(rows, fld.type)
                                          for fld in SCHEMA], schema=SCHEMA)


_BATCH_ROWS = 65536


def entry_summary(key_hash: np.ndarray, phys: np.ndarray, hash_slot_num: int) -> dict:
    """What a file's entries (1..indexCount-1) say about its header: the slots they use, the physical offsets of
    the first and last, and (key hash, offset) pairs indexed more than once (extra entries, pairs)."""
    n = len(key_hash)
    if not n:
        return {"entry_slots": 0, "duplicate_entries": 0, "duplicated_pairs": 0}
    order = np.lexsort((phys, key_hash))
    k, p = key_hash[order], phys[order]
    repeat = (k[1:] == k[:-1]) & (p[1:] == p[:-1])  # an entry equal to the one before it in sorted order
    starts_run = repeat & ~np.concatenate(([False], repeat[:-1]))
    return {"entry_slots": len(np.unique(key_hash[key_hash >= 0] % hash_slot_num)),
            "first_entry_phy_offset": int(phys[0]), "last_entry_phy_offset": int(phys[-1]),
            "duplicate_entries": int(repeat.sum()), "duplicated_pairs": int(starts_run.sum())}


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
