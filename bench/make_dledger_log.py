"""A DLedger data file of ~MiB MiB for timings: the DLedger fixture's first data file's entries repeated, each
entry's index, term, pos field and its record's PHYSICALOFFSET rewritten so every header and record checks out;
the rest of the file a blank.  Written to <dir>/dledger-n0/data/00000000000000000000.

    python bench/make_dledger_log.py <dir> <MiB>"""
import struct, sys
from pathlib import Path
from store_format import layout as L
src = Path("/work/shared/fixtures/rocketmq-5.3.3/dledger/store/dledger-n0/data/00000000000000000000").read_bytes()
ents, pos = [], 0
while True:
    m, s = struct.unpack_from(">ii", src, pos)
    if m != 1: break
    ents.append(src[pos:pos + s]); pos += s
size = int(sys.argv[2]) << 20
out = bytearray(size); at = 0; idx = 0
while True:
    for e in ents:
        if at + len(e) + 8 > size: break
        b = bytearray(e)
        struct.pack_into(">qq", b, 8, idx, 1); struct.pack_into(">q", b, 24, at)
        struct.pack_into(">q", b, 48 + L.PHYSICAL_OFFSET_OFFSET, at + 48)
        out[at:at + len(b)] = b; at += len(b); idx += 1
    else:
        continue
    break
struct.pack_into(">ii", out, at, -1, size - at)
d = Path(sys.argv[1]) / "dledger-n0" / "data"; d.mkdir(parents=True, exist_ok=True)
(d / "00000000000000000000").write_bytes(out); print(idx, "entries")
