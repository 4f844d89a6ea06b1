"""A model of what the broker will do with this store when it starts (RocketMQ 4.9.x ``DefaultMessageStore``).

* ``load()``: every commitlog segment must be exactly ``mappedFileSizeCommitLog`` long
  (``MappedFileQueue.doLoad``), else the broker refuses to start.
* No ``abort`` file -> ``recoverNormally``: walk from the third-last segment (``size - 3``, clamped to 0).
* ``abort`` present -> ``recoverAbnormally``: from the last segment backwards, the first whose first record
  has a V1 magic, a non-zero store time and a store time <= ``checkpoint.getMinTimestamp()``
  (``getMinTimestampIndex()`` when messageIndexSafe); else segment 0.  Every record from there is re-dispatched,
  and index files whose endTimestamp > ``indexMsgTimestamp`` are deleted at load and rebuilt.
* The walk checks body CRCs (``checkCRCOnRecover``) and stops at the first failure; a blank moves to the next
  segment.  The recovered max physical offset is where it stopped; later segments are deleted, later bytes are
  kept but ignored, and consume-queue units at or beyond it are truncated (``truncateDirtyLogicFiles``).

The model uses the broker's own checks (no PHYSICALOFFSET check) so it predicts, rather than judges.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from . import layout as L
from .commitlog import Frame, ReadOnlyMap, Segment, salvage_buffer, walk_buffer
from .errors import StoreFormatError
from .indexfile import read_header
from .store import Store

_I32_AT = lambda buf, pos: int.from_bytes(buf[pos:pos + 4], "big", signed=True)  # noqa: E731
_I64_AT = lambda buf, pos: int.from_bytes(buf[pos:pos + 8], "big", signed=True)  # noqa: E731


@dataclass
class RecoveryPrediction:
    mode: str  # "normal" | "abnormal"
    will_start: bool
    start_problems: list[str]
    segment_size: int | None
    start_segment: str | None  # where the recovery walk begins
    max_physical_offset: int  # the recovered end of the commitlog
    stop_segment: str | None
    stop_position: int | None
    stop_kind: str | None  # why the walk ended (END_OF_DATA, BAD_CRC, ... or "last blank")
    segments_deleted: list[str]  # segments wholly beyond the recovered end
    dropped_messages: list[tuple[int, int]]  # (physical offset, size) of well-formed records the broker will ignore
    max_cq_physical_offset: int  # ConsumeQueue recover(): max over queues of the last valid unit's end
    cq_units_truncated: dict = field(default_factory=dict)  # (topic, qid) -> units at/after the recovered end
    index_files_deleted: list[str] = field(default_factory=list)  # abnormal: endTimestamp > indexMsgTimestamp
    redispatch_from: int | None = None  # abnormal: physical offset re-dispatch starts at
    notes: list[str] = field(default_factory=list)

    def as_dict(self) -> dict:
        d = dict(vars(self))
        d["cq_units_truncated"] = {f"{t}/{q}": n for (t, q), n in self.cq_units_truncated.items()}
        return d


def _first_record_matches(seg: Segment, min_timestamp: int) -> bool:
    """isMappedFileMatchedRecover (4.9.8)."""
    with ReadOnlyMap(seg.path) as m:
        buf = m.buf
        if len(buf) < L.BORN_HOST_OFFSET + 4:
            return False
        if _I32_AT(buf, L.MAGIC_OFFSET) != L.MAGIC_V1:
            return False
        sys_flag = _I32_AT(buf, L.SYS_FLAG_OFFSET)
        ts_pos = L.layout_for(sys_flag).offsets["store_timestamp"]
        if len(buf) < ts_pos + 8:
            return False
        store_ts = _I64_AT(buf, ts_pos)
        return store_ts != 0 and store_ts <= min_timestamp


def predict_recovery(store: Store, *, message_index_safe: bool = False, check_crc: bool = True) -> RecoveryPrediction:
    markers = store.markers()
    mode = "abnormal" if markers.abort else "normal"
    segs = store.segments
    size = store.segment_size
    notes: list[str] = []
    problems = [f"segment {s.name} is {s.length} bytes, not {size}: MappedFileQueue.load() fails"
                for s in segs if size and s.length != size]
    try:
        cp = store.checkpoint()
    except StoreFormatError as e:
        # StoreCheckpoint opens the file "rw" and maps a page: a missing or short file reads as zeros
        cp = None
        notes.append(f"checkpoint unreadable ({e.kind.value}): the broker reads it as zeros")

    start_index = 0
    redispatch_from = None
    if mode == "normal":
        start_index = max(0, len(segs) - 3)
    elif segs:
        min_ts = 0
        if cp is not None:
            min_ts = cp.min_timestamp_index if message_index_safe else cp.min_timestamp
        start_index = 0
        for i in range(len(segs) - 1, -1, -1):
            if _first_record_matches(segs[i], min_ts):
                start_index = i
                break
        redispatch_from = segs[start_index].base_offset

    max_offset = segs[start_index].base_offset if segs else 0
    stop_seg = stop_pos = stop_kind = None
    i = start_index
    while i < len(segs):
        seg = segs[i]
        last = None
        with ReadOnlyMap(seg.path) as m:
            for frame in walk_buffer(m.buf, seg.name, seg.base_offset, decode=False, check_crc=check_crc,
                                     check_physical_offset=False):
                last = frame
        if last.kind == "blank":
            if i + 1 >= len(segs):  # "recover last 3 physics file over": ends at the blank
                max_offset, stop_seg, stop_pos, stop_kind = last.physical_offset, seg.name, last.file_position, "last blank"
                break
            i += 1
            continue
        max_offset, stop_seg, stop_pos, stop_kind = last.physical_offset, seg.name, last.file_position, last.stop_kind
        break

    # truncateDirtyFiles: a segment starting beyond the end is destroyed; the one holding it is kept
    deleted = [s.name for s in segs if s.base_offset > max_offset]
    dropped = []
    for seg in segs:
        if seg.base_offset + seg.length <= max_offset:
            continue
        with ReadOnlyMap(seg.path) as m:
            start = max(0, max_offset - seg.base_offset)
            for frame in salvage_buffer(m.buf, seg.name, seg.base_offset, start=start, decode=False,
                                        check_crc=check_crc):
                if isinstance(frame, Frame) and frame.kind == "message" and frame.physical_offset >= max_offset:
                    dropped.append((frame.physical_offset, frame.size))

    max_cq = 0
    truncated = {}
    for key, files in store.queues.items():
        n_beyond = 0
        try:
            for unit in store.consume_queue(*key, stop_at_invalid=True):
                if unit.kind == "entry":
                    max_cq = max(max_cq, unit.physical_offset + unit.size)
                    if unit.physical_offset >= max_offset:
                        n_beyond += 1
        except StoreFormatError:
            pass  # a partial trailing unit: recovery stops before it as well
        if n_beyond:
            truncated[key] = n_beyond

    index_deleted = []
    if mode == "abnormal" and cp is not None:
        for path in store.index_paths():  # IndexService.load reads the header only: no geometry needed
            try:
                with ReadOnlyMap(path) as m:
                    if read_header(m.buf).end_timestamp > cp.index_msg_timestamp:
                        index_deleted.append(path.name)
            except StoreFormatError:
                index_deleted.append(path.name)

    return RecoveryPrediction(
        mode=mode, will_start=not problems, start_problems=problems, segment_size=size,
        start_segment=segs[start_index].name if segs else None, max_physical_offset=max_offset,
        stop_segment=stop_seg, stop_position=stop_pos, stop_kind=stop_kind, segments_deleted=deleted,
        dropped_messages=dropped, max_cq_physical_offset=max_cq, cq_units_truncated=truncated,
        index_files_deleted=index_deleted, redispatch_from=redispatch_from, notes=notes)
