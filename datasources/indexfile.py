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
    # entry
    ("entry", pa.int32()), ("slot", pa.int32()), ("key_hash", pa.int32()), ("physical_offset", pa.int64()),
    ("time_diff", pa.int32()), ("store_time", pa.int64()), ("prev_index", pa.int32()),
    ("problems", pa.list_(pa.string())),
    # corrupt
    ("reason", pa.string()), ("detail", pa.string()),
])
_NP = {"i": ">i4", "q": ">i8"}
_ENTRY_DTYPE = np.dtype({"names": [n for n, _, _ in L.INDEX_ENTRY_FIELDS],
                         "formats": [_NP[c] for _, _, c in L.INDEX_ENTRY_FIELDS],
                         "offsets": [o for _, o, _ in L.INDEX_ENTRY_FIELDS], "itemsize": L.INDEX_ENTRY_SIZE})


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


def chain_problems(index_count: int, slots: np.ndarray, key_hash: np.ndarray, prev: np.ndarray,
                   time_diff: np.ndarray, hash_slot_num: int) -> list[list[str]]:
    """Problems of entries 1..index_count-1 (arrays indexed by entry number, entry 0 unused)."""
    n = index_count
    idx = np.arange(n)
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
    out = []
    for i in range(1, n):
        p = []
        if not in_range[i]:
            p.append("prev_out_of_range")
        elif prev[i] > 0 and not older[i]:
            p.append("prev_not_older")
        if other_slot[i]:
            p.append("prev_other_slot")
        if time_diff[i] < 0:
            p.append("negative_time_diff")
        if not reached[i]:
            p.append("unreachable")
        out.append(p)
    return out


def file_rows(part: IndexFilePartition) -> list[dict]:
    base = {"broker": part.broker, "file": part.name}
    if not INDEX_NAME.match(part.name):
        return [{**base, "kind": "corrupt", "reason": ErrorKind.BAD_FILE_NAME.value,
                 "detail": "an index file name is its creation time, yyyyMMddHHmmssSSS (17 digits); not read"}]
    with local_copy(part.loc) as local:
        try:
            f = IndexFile(local, part.hash_slot_num, part.index_num)
        except StoreFormatError as e:
            return [{**base, "kind": "corrupt", "reason": e.kind.value, "detail": e.message}]
        with f:
            h = f.header
            rows = [{**base, "kind": "header", **vars(h), "hash_slot_num": f.hash_slot_num, "index_num": f.index_num}]
            count = min(max(h.index_count, 1), f.index_num)
            slots_at = L.INDEX_HEADER_SIZE
            entries_at = slots_at + f.hash_slot_num * L.INDEX_SLOT_SIZE
            with ReadOnlyMap(local) as m:  # the entries in bulk; IndexFile gave header and geometry
                slots = np.frombuffer(m.buf, ">i4", f.hash_slot_num, slots_at).astype(np.int64)
                e = np.frombuffer(m.buf, _ENTRY_DTYPE, count, entries_at)
                key_hash, phys = e["key_hash"].astype(np.int64), e["physical_offset"].astype(np.int64)
                td, prev = e["time_diff"].astype(np.int64), e["prev_index"].astype(np.int64)
                del e  # no view may outlive the mmap
            problems = chain_problems(count, slots, key_hash, prev, td, f.hash_slot_num)
            for i in range(1, count):
                rows.append({**base, "kind": "entry", "entry": i,
                             "slot": int(key_hash[i] % f.hash_slot_num) if key_hash[i] >= 0 else None,
                             "key_hash": int(key_hash[i]), "physical_offset": int(phys[i]),
                             "time_diff": int(td[i]), "store_time": h.begin_timestamp + int(td[i]) * 1000,
                             "prev_index": int(prev[i]), "problems": problems[i - 1]})
    return rows


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
        rows = file_rows(partition)
        for i in range(0, len(rows), 65536):
            yield pa.RecordBatch.from_pylist(rows[i:i + 65536], schema=SCHEMA)
