"""Out-of-core joins and aggregates on the driver (issue 40): rows spread over files on the driver's local disk by a
hash of their key, read back one bucket at a time, so that a join or a group-by on that key is done a bucket at a
time (a grace hash join) and the driver holds one bucket, never the whole table.

``Buckets`` is the spread; :func:`key_hash` the hash (stable across batches and runs: a polynomial over a string's
UTF-8 bytes, a 64-bit mix of an integer), :func:`bucket_count` how many buckets keep each under a size.
"""
from __future__ import annotations

import contextlib
import os
import tempfile

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

ROWS_PER_BUCKET = 1 << 18  # rows a bucket holds on average: the driver's working set of one out-of-core step
HELD_BYTES = 16 << 20  # rows added to on-disk buckets and held before they are written (Buckets), across the buckets

_M1, _M2 = np.uint64(0xBF58476D1CE4E5B9), np.uint64(0x94D049BB133111EB)  # splitmix64's finalizer
_POLY = np.uint64(0x100000001B3)


def bucket_count(rows: int, per_bucket: int | None = None) -> int:
    """Buckets for ``rows`` rows, ``per_bucket`` (default :data:`ROWS_PER_BUCKET`) a bucket on average."""
    return max(1, -(-rows // (per_bucket or ROWS_PER_BUCKET)))


def _mix(h: np.ndarray) -> np.ndarray:
    h = h ^ (h >> np.uint64(30))
    h = h * _M1
    h = h ^ (h >> np.uint64(27))
    h = h * _M2
    return h ^ (h >> np.uint64(31))


def _string_hash(column) -> np.ndarray:
    """A hash of each string (null: as the empty string), over the Arrow buffers in one compiled pass."""
    from decoding.kernels import string_poly_sums

    a = column.combine_chunks() if isinstance(column, pa.ChunkedArray) else column
    a = pc.fill_null(a.cast(pa.large_string()), "")
    offsets = np.frombuffer(a.buffers()[1], np.int64)[a.offset:a.offset + len(a) + 1]
    data = np.frombuffer(a.buffers()[2], np.uint8)[offsets[0]:offsets[-1]] if len(a) else np.zeros(0, np.uint8)
    with np.errstate(over="ignore"):
        return _mix(string_poly_sums(offsets - offsets[0], data, _POLY) + np.diff(offsets).astype(np.uint64))


def key_hash(*columns) -> np.ndarray:
    """A 64-bit hash of each row's key (string or integer columns; a null integer as -1)."""
    h = np.zeros(len(columns[0]), np.uint64)
    with np.errstate(over="ignore"):
        for c in columns:
            if pa.types.is_string(c.type) or pa.types.is_large_string(c.type):
                part = _string_hash(c)
            else:
                part = _mix(pc.fill_null(c, -1).to_numpy(zero_copy_only=False).astype(np.int64).view(np.uint64))
            h = _mix(h * _POLY + part)
    return h


class Scratch:
    """A folder of the driver's for a step's buckets, and the rows its :class:`Buckets` hold before writing them,
    shared: :data:`HELD_BYTES` for each of them still in use, so that rows held by one stage's buckets, done with
    (:meth:`Buckets.drop`), leave room for the next stage's, and a step whose rows fit never writes them (4 GiB of
    log's transactions wrote a fifth of their pairing's rows to disk and read them back, for 16 MiB a table)."""

    def __init__(self, folder: str):
        self.folder = folder
        self.members: list["Buckets"] = []
        self.held = 0

    def over(self) -> bool:
        return self.held > HELD_BYTES * len(self.members)

    def make_room(self) -> None:
        """The largest holders' rows written until what is held is within the budget again."""
        while self.over():
            largest = max(self.members, key=lambda b: b.held_bytes)
            if not largest.held_bytes:
                return
            largest.write_held()


@contextlib.contextmanager
def scratch(n: int, prefix: str):
    """Where a step's buckets live when it needs ``n`` a table: in memory (None) for one, whose rows the step holds
    anyway when it reads that bucket (a store of few transactions pays no disk); else a :class:`Scratch` in a
    temporary directory of the driver's, removed after the step."""
    if n == 1:
        yield None
        return
    with tempfile.TemporaryDirectory(prefix=prefix) as folder:
        yield Scratch(folder)


class Buckets:
    """``n`` buckets of rows of ``schema`` in ``folder`` (the driver's scratch, :func:`scratch`, or a folder of its
    own; None: kept in memory): ``add`` spreads a table's rows by bucket number, ``read`` gives one bucket's rows
    in the order added, ``drop`` lets them all go.

    On disk, the rows added are held while the scratch's buckets hold no more than :data:`HELD_BYTES` each
    (:class:`Scratch`), then the largest holder's are written as one file holding a record batch per bucket (its
    batches' numbers kept per bucket).  A file per bucket and add made the files grow with the adds times the
    buckets, both in proportion to the rows: 4,900 small files for the transactions of 4 GiB of log, a fifth of
    the family's time."""

    def __init__(self, folder: "Scratch | str | None", name: str, n: int, schema: pa.Schema):
        self.pool = None if folder is None else folder if isinstance(folder, Scratch) else Scratch(folder)
        self.folder = None if folder is None else os.path.join(self.pool.folder, name)
        self.n, self.schema = n, schema
        self._files: list[list] = [[] for _ in range(n)]  # each bucket's (file, batch numbers), or tables in memory
        self._held: list[list] = [[] for _ in range(n)]  # on disk: each bucket's rows added since the last write
        self.held_bytes = 0
        self._written = 0
        if self.folder is not None:
            os.makedirs(self.folder)
            self.pool.members.append(self)

    def add(self, table: pa.Table, bucket: np.ndarray) -> None:
        from store_format.interrupts import check_beside

        check_beside()  # a family's out-of-core pass beside the others stops once the run is interrupted
        if not table.num_rows:
            return
        table = table.select(self.schema.names).cast(self.schema)
        order = np.argsort(bucket, kind="stable")
        ids = bucket[order]
        edges = np.flatnonzero(np.diff(ids)) + 1
        table = table.take(pa.array(order))
        into = self._files if self.folder is None else self._held
        for a, b in zip(np.r_[0, edges].tolist(), np.r_[edges, len(ids)].tolist()):
            into[int(ids[a])].append(table.slice(a, b - a))
        if self.folder is not None:
            self.held_bytes += table.nbytes  # the slices hold the whole table until written
            self.pool.held += table.nbytes
            self.pool.make_room()

    def write_held(self) -> None:
        """The rows held, one file: each bucket's as record batches, their numbers kept in the bucket's list."""
        path = os.path.join(self.folder, f"{self._written}.arrow")
        self._written += 1
        k = 0
        with pa.OSFile(path, "wb") as f, pa.ipc.new_file(f, self.schema) as w:
            for i, held in enumerate(self._held):
                if not held:
                    continue
                batches = pa.concat_tables(held).combine_chunks().to_batches()
                for batch in batches:
                    w.write_batch(batch)
                self._files[i].append((path, range(k, k + len(batches))))
                k += len(batches)
                self._held[i] = []
        self.pool.held -= self.held_bytes
        self.held_bytes = 0

    def drop(self) -> None:
        """Every row let go (read no more): what it held leaves room in its scratch for the others'."""
        self._files = [[] for _ in range(self.n)]
        self._held = [[] for _ in range(self.n)]
        if self.pool is not None and self in self.pool.members:
            self.pool.held -= self.held_bytes
            self.pool.members.remove(self)
        self.held_bytes = 0

    def add_by_key(self, table: pa.Table, *key: str) -> None:
        """``table``'s rows by the hash of the columns ``key``."""
        if table.num_rows:
            self.add(table, (key_hash(*(table.column(k) for k in key)) % np.uint64(self.n)).astype(np.int64))

    def read(self, i: int) -> pa.Table:
        if self.folder is None:
            return pa.concat_tables(self._files[i]) if self._files[i] else self.schema.empty_table()
        parts = []
        for path, numbers in self._files[i]:
            with pa.OSFile(path) as f:
                r = pa.ipc.open_file(f)
                parts += [r.get_batch(j) for j in numbers]
        held = [b for t in self._held[i] for b in t.to_batches()]
        return pa.Table.from_batches(parts + held, self.schema)
