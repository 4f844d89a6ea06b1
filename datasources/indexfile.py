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

from store_format.fs import ReadOnlyMap
from store_format.errors import ErrorKind, StoreFormatError
from store_format.fs import Location
from store_format.indexfile import INDEX_NAME, EntryViews, IndexFile, index_files, read_header
from store_format.stores import PartInput
from decoding.columns import column
from decoding.kernels import chain_bits, entry_summary, problem_lists

from .base import StoreDataSource, StoreReader, option_int

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


@dataclass
class IndexFilePartition(InputPartition):
    broker: str
    loc: Location
    name: str
    hash_slot_num: int | None
    index_num: int | None


def plan_files(inputs: list[PartInput], hash_slot_num, index_num) -> list[IndexFilePartition]:
    """A partition per file of the index ``inputs`` (store_format.stores.part_inputs), read with the geometry given
    (None: each file's own header)."""
    return [IndexFilePartition(inp.broker, f, f.name, hash_slot_num, index_num)
            for inp in inputs for f in index_files(inp.loc)]


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
