"""A DLedger data file of about ``MiB`` MiB for timings: the DLedger fixture's first data file's entries repeated,
each entry's index, term, pos field and its record's PHYSICALOFFSET rewritten so every header and record checks
out, the rest of the file a blank.  Written to ``<dir>/dledger-n0/data/00000000000000000000``, with each entry's
index unit in ``<dir>/dledger-n0/index/00000000000000000000`` (what DLedger writes beside it).

    python bench/make_dledger_log.py <dir> <MiB>
"""
from __future__ import annotations

import struct
import sys
from pathlib import Path

from store_format import dledger as D
from store_format import layout as L

FIXTURE = Path(__file__).resolve().parents[2] / "shared" / "fixtures" / "rocketmq-5.3.3" / "dledger" / "store"


def fixture_entries() -> list[bytes]:
    """The first data file's entries, up to its first non-entry."""
    src = (D.find_home(FIXTURE).child("data").child("0" * 20)).read_range(0, 1 << 30)
    out, pos = [], 0
    while pos + D.MIN_BLANK_LEN <= len(src):
        magic, size = D.INT_PAIR.unpack_from(src, pos)
        if magic != D.MAGIC:
            break
        out.append(src[pos:pos + size])
        pos += size
    return out


def main(folder: str, mib: int) -> None:
    entries, size = fixture_entries(), mib << 20
    out, at, index, units = bytearray(size), 0, 0, bytearray()
    while True:
        for e in entries:
            if at + len(e) + D.MIN_BLANK_LEN > size:
                struct.pack_into(">ii", out, at, D.BLANK_MAGIC, size - at)
                data = Path(folder) / "dledger-n0" / "data"
                data.mkdir(parents=True, exist_ok=True)
                (data / ("0" * 20)).write_bytes(out)
                (data.parent / "index").mkdir(exist_ok=True)
                (data.parent / "index" / ("0" * 20)).write_bytes(units)
                print(f"{index} entries")
                return
            b = bytearray(e)
            struct.pack_into(">qqq", b, 8, index, 1, at)  # index, term, pos
            struct.pack_into(">q", b, D.BODY_OFFSET + L.PHYSICAL_OFFSET_OFFSET, at + D.BODY_OFFSET)
            out[at:at + len(b)] = b
            units += struct.pack(">iqiqq", D.MAGIC, at, len(b), index, 1)  # DLedgerEntryCoder.encodeIndex
            at, index = at + len(b), index + 1


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]))
