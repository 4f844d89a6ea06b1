"""The fixed-width structures besides the record (consume-queue unit, index header, slot and entry, checkpoint):
declared once in store_format/layout.py (``FixedLayout``), every offset pinned against the byte reference
(shared/docs/store-format.md, copied here by hand so the two are independent), and read through the declaration
from stores RocketMQ 4.9.7 wrote, against what RocketMQ itself reported (the fixtures' manifests)."""
from __future__ import annotations

import json
import re
import struct
from pathlib import Path

import numpy as np
import pytest

from store_format import layout as L

from .conftest import FIXTURE_NAMES, FIXTURES, fixture_store

REPO = Path(__file__).resolve().parent.parent

# store-format.md: §5 (consume-queue unit), §7.2 (index header), §7.3 (slot, entry), §8.1 (checkpoint), §6.4 (the
# ConsumeQueueExt unit)
REFERENCE = {
    "ConsumeQueue unit": ((0, 8), (8, 4), (12, 8)),
    "IndexFile header": ((0, 8), (8, 8), (16, 8), (24, 8), (32, 4), (36, 4)),
    "IndexFile hash slot": ((0, 4),),
    "IndexFile entry": ((0, 4), (4, 8), (12, 4), (16, 4)),
    "checkpoint": ((0, 8), (8, 8), (16, 8), (24, 8), (32, 8)),
    "ConsumeQueueExt unit": ((0, 2), (2, 8), (10, 8), (18, 2)),
}


@pytest.mark.parametrize("layout", L.FIXED_LAYOUTS, ids=lambda f: f.title)
def test_every_offset_and_width_is_the_references(layout):
    assert tuple((layout.offset(m.name), m.width) for m in layout.members) == REFERENCE[layout.title]
    assert struct.calcsize(layout.struct) == layout.width and layout.dtype().itemsize == (layout.size or layout.width)
    assert list(layout.dtype().names) == [m.name for m in layout.members]


STORE_FORMAT_MD = FIXTURES.parent.parent / "docs" / "store-format.md"


def _reference_tables(text: str) -> dict[str, tuple]:
    """The (offset, width) rows of store-format.md's tables for these structures, read from the document itself:
    §6.2's and §7.2's "| Offset | Size |", §7.3's "| Entry offset | Size |" and the slot table's "hashSlotNum*4",
    §8.1's offsets (every checkpoint value a long)."""
    sections = dict(re.findall(r"^### ([0-9.]+) [^\n]*\n(.*?)(?=^##)", text, re.M | re.S))

    def rows(body: str, first_header: str) -> tuple:
        table = body[body.index(f"| {first_header} |"):]
        cells = [[c.strip() for c in line.strip("|").split("|")] for line in table.splitlines()[2:]
                 if line.startswith("|")]
        return tuple((int(c[0]), int(c[1].split()[0])) for c in cells)

    slot = re.search(r"`(\d+) \+ hashSlotNum\*(\d+) \+ i\*(\d+)`", sections["7.3"])
    checkpoint = re.findall(r"^\| (\d+) \| \w+ \(long", sections["8.1"], re.M)
    # §6.4 gives the ext unit as a line: `size(short) | tagsCode(long) | msgStoreTime(long) | bitMapSize(short) | ...`
    widths = {"short": 2, "int": 4, "long": 8}
    ext = re.search(r"`(size\(short\)[^`]*)`", sections["6.4"]).group(1)
    members = [widths[m] for m in re.findall(r"\((short|int|long)\)", ext)]
    return {
        "ConsumeQueue unit": rows(sections["6.2"], "Offset"),
        "IndexFile header": rows(sections["7.2"], "Offset"),
        "IndexFile hash slot": ((0, int(slot.group(2))),),
        "IndexFile entry": rows(sections["7.3"], "Entry offset"),
        "checkpoint": tuple((int(o), 8) for o in checkpoint),
        "ConsumeQueueExt unit": tuple((sum(members[:i]), w) for i, w in enumerate(members)),
        "sizes": {"IndexFile header": int(slot.group(1)), "IndexFile entry": int(slot.group(3))},
    }


@pytest.mark.skipif(not STORE_FORMAT_MD.is_file(), reason="no shared/docs/store-format.md beside the fixtures")
def test_every_offset_and_width_is_the_documents():
    """The copy above against the document it was copied from, and the declarations' sizes against its text."""
    doc = _reference_tables(STORE_FORMAT_MD.read_text(encoding="utf-8"))
    assert {k: v for k, v in doc.items() if k != "sizes"} == REFERENCE
    by_title = {f.title: f for f in L.FIXED_LAYOUTS}
    assert {title: by_title[title].width for title in doc["sizes"]} == doc["sizes"]


def test_one_member_reads_and_patches_through_the_declaration():
    raw = bytearray(struct.pack(L.INDEX_ENTRY_STRUCT, 7, 1 << 40, 3, 2))
    assert [L.INDEX_ENTRY.read(raw, m.name) for m in L.INDEX_ENTRY.members] == [7, 1 << 40, 3, 2]
    at = L.INDEX_ENTRY.offset("time_diff")
    raw[at:L.INDEX_ENTRY.end("time_diff")] = L.INDEX_ENTRY.pack("time_diff", -5)
    assert struct.unpack(L.INDEX_ENTRY_STRUCT, raw) == (7, 1 << 40, -5, 2)
    assert L.INDEX_ENTRY.read(bytes(3) + raw, "physical_offset", at=3) == 1 << 40
    assert L.CHECKPOINT.head_struct(L.CHECKPOINT_MIN_MEMBERS) == ">qqq" and L.CHECKPOINT_MIN_SIZE == 24
    assert L.INDEX_SLOT.numpy_type("index") == np.dtype(">i4")


def test_the_names_readers_use_are_derived():
    assert (L.CQ_STORE_UNIT_SIZE, L.CQ_UNIT_STRUCT) == (20, ">qiq")
    assert (L.INDEX_HEADER_SIZE, L.INDEX_HEADER_STRUCT, L.INDEX_SLOT_SIZE) == (40, ">qqqqii", 4)
    assert (L.INDEX_ENTRY_SIZE, L.INDEX_ENTRY_STRUCT) == (20, ">iqii")
    assert L.CHECKPOINT_FILE_SIZE == 4096 and dict(L.CHECKPOINT_FIELDS)["index_msg_timestamp"] == 16
    assert L.index_file_size(512, 2048) == 40 + 512 * 4 + 2048 * 20


def test_record_layout_page_tables_are_derived_from_the_declarations():
    assert L.fixed_layouts_markdown() in (REPO / "docs" / "record-layout.md").read_text(encoding="utf-8")


def _messages(name: str) -> list[dict]:
    lines = (FIXTURES / name / "decoded-commitlog.jsonl").read_text().splitlines()
    return [r for r in map(json.loads, lines) if r.get("type") == "MESSAGE"]


@pytest.mark.parametrize("name", FIXTURE_NAMES)
def test_consume_queue_units_read_through_the_declaration_are_rocketmqs(name):
    """Every message RocketMQ dispatched (not a prepared or rolled-back half) is the unit at its queue offset."""
    store = fixture_store(name)
    unit = L.CQ_UNIT.dtype()
    checked = 0
    for m in _messages(name):
        if m["tranType"] not in ("NOT", "COMMIT"):
            continue
        folder = store / "consumequeue" / m["topic"] / str(m["queueId"])
        at = m["queueOffset"] * unit.itemsize
        files = sorted(folder.iterdir(), key=lambda f: int(f.name))
        f = [f for f in files if int(f.name) <= at][-1]
        u = np.frombuffer(f.read_bytes(), unit)[(at - int(f.name)) // unit.itemsize]
        assert (int(u["physical_offset"]), int(u["size"])) == (m["phyOffset"], m["storeSize"])
        checked += 1
    assert checked >= 10


@pytest.mark.parametrize("name", FIXTURE_NAMES)
def test_index_header_and_entries_read_through_the_declaration_are_rocketmqs(name):
    manifest = json.loads((FIXTURES / name / "manifest.json").read_text())
    slots = manifest["storeConfig"]["maxHashSlotNum"]
    offsets = {m["phyOffset"] for m in _messages(name)}
    [path] = sorted((fixture_store(name) / "index").iterdir())
    raw = path.read_bytes()
    h = np.frombuffer(raw, L.INDEX_HEADER.dtype(), 1)[0]
    count = int(h["index_count"])
    assert count > 1 and int(h["begin_phy_offset"]) in offsets and int(h["end_phy_offset"]) in offsets
    assert 0 < int(h["hash_slot_count"]) <= slots and int(h["begin_timestamp"]) <= int(h["end_timestamp"])
    slot_values = np.frombuffer(raw, L.INDEX_SLOT.dtype(), slots, L.INDEX_HEADER.width)["index"]
    assert int((slot_values > 0).sum()) == int(h["hash_slot_count"]) and int(slot_values.max()) < count
    entries = np.frombuffer(raw, L.INDEX_ENTRY.dtype(), count, L.INDEX_HEADER.width + slots * L.INDEX_SLOT.width)
    assert entries[0].tolist() == (0, 0, 0, 0)  # entry 0 is never written
    written = entries[1:]
    assert set(written["physical_offset"].tolist()) <= offsets
    assert (written["key_hash"] >= 0).all() and (written["time_diff"] >= 0).all()
    assert ((written["prev_index"] >= 0) & (written["prev_index"] < np.arange(1, count))).all()


@pytest.mark.parametrize("name", FIXTURE_NAMES)
def test_checkpoint_read_through_the_declaration_is_rocketmqs(name):
    expected = json.loads((FIXTURES / name / "manifest.json").read_text())["checkpoint"]
    raw = (fixture_store(name) / "checkpoint").read_bytes()
    assert len(raw) == L.CHECKPOINT.size == expected["fileLength"]
    c = np.frombuffer(raw, L.CHECKPOINT.dtype(), 1)[0]
    assert (int(c["physic_msg_timestamp"]), int(c["logics_msg_timestamp"]), int(c["index_msg_timestamp"])) == \
        (expected["physicMsgTimestamp"], expected["logicsMsgTimestamp"], expected["indexMsgTimestamp"])
