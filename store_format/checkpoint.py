"""``checkpoint`` (StoreCheckpoint), and the ``abort``/``lock`` markers.

The checkpoint is one 4096-byte mapped page of big-endian longs: physicMsgTimestamp, logicsMsgTimestamp,
indexMsgTimestamp (4.x: 24 bytes used), then masterFlushedOffset (5.0+) and confirmPhyOffset (5.1.1+).
"""
from __future__ import annotations

import os
import struct
from dataclasses import dataclass
from pathlib import Path

from . import layout as L
from .errors import CheckpointError, ErrorKind
from .fs import UnreadableError, as_path, read_bytes


@dataclass(frozen=True)
class Checkpoint:
    physic_msg_timestamp: int
    logics_msg_timestamp: int
    index_msg_timestamp: int
    master_flushed_offset: int | None = None  # 5.x only (None when the bytes are absent or zero)
    confirm_phy_offset: int | None = None
    file_length: int = L.CHECKPOINT_FILE_SIZE

    @property
    def min_timestamp(self) -> int:
        """getMinTimestamp(): min(physic, logics) - 3 s, floored at 0."""
        return max(0, min(self.physic_msg_timestamp, self.logics_msg_timestamp) - L.CHECKPOINT_SAFETY_MS)

    @property
    def min_timestamp_index(self) -> int:
        """getMinTimestampIndex(): min(getMinTimestamp(), indexMsgTimestamp)."""
        return min(self.min_timestamp, self.index_msg_timestamp)

    def to_bytes(self) -> bytes:
        vals = [self.physic_msg_timestamp, self.logics_msg_timestamp, self.index_msg_timestamp]
        for extra in (self.master_flushed_offset, self.confirm_phy_offset):
            if extra is None:
                break
            vals.append(extra)
        raw = struct.pack(L.CHECKPOINT.head_struct(len(vals)), *vals)
        return raw + bytes(self.file_length - len(raw))


def parse_checkpoint(raw: bytes, file: str | None = None, file_length: int | None = None) -> Checkpoint:
    """The checkpoint's bytes (``raw``: its first page, or all of a shorter file; ``file_length``: the file's
    length, default ``len(raw)``)."""
    if len(raw) < L.CHECKPOINT_MIN_SIZE:
        raise CheckpointError(ErrorKind.TRUNCATED, f"{len(raw)} bytes; the checkpoint needs at least "
                              f"{L.CHECKPOINT_MIN_SIZE}", file=file, position=len(raw))
    values = {}
    for m in L.CHECKPOINT.members:  # 4.x wrote three; each later one only where the file holds it
        if L.CHECKPOINT.end(m.name) <= len(raw):
            values[m.name] = L.CHECKPOINT.read(raw, m.name)
    extras = {k: (values.get(k) or None) for k in ("master_flushed_offset", "confirm_phy_offset")}
    return Checkpoint(values["physic_msg_timestamp"], values["logics_msg_timestamp"], values["index_msg_timestamp"],
                      file_length=len(raw) if file_length is None else file_length, **extras)


def read_checkpoint(path: str | os.PathLike) -> Checkpoint:
    """``checkpoint`` as the broker maps it: the first page read (never more), the length from the file system."""
    p = as_path(path)
    if not p.exists() and not p.is_symlink():
        raise CheckpointError(ErrorKind.MISSING, "no checkpoint file", file=str(p))
    raw = read_bytes(p, L.CHECKPOINT_FILE_SIZE)  # a FIFO, a device, a loop: UnreadableError
    return parse_checkpoint(raw, str(p), max(len(raw), p.stat().st_size))


@dataclass(frozen=True)
class Markers:
    """``abort`` and ``lock`` as the broker sees them: present when ``File.exists()`` says so (any kind of file,
    a folder too, through symbolic links), with what they are."""

    abort: bool  # present: the broker did not shut down cleanly -> abnormal recovery (a folder counts)
    abort_pid: int | None  # 5.x writes the PID into abort
    lock: bool
    abort_kind: str | None = None  # "file" | "folder" | "other" (a FIFO, a socket...); None when absent
    lock_kind: str | None = None


def path_kind(path: Path) -> str | None:
    """What ``path`` is, following symbolic links as java.io.File does: None when it does not exist."""
    if not path.exists():
        return None
    return "file" if path.is_file() else "folder" if path.is_dir() else "other"


def read_markers(root: str | os.PathLike) -> Markers:
    root = as_path(root)
    abort = root / "abort"
    pid = None
    if abort.is_file():
        try:
            text = read_bytes(abort, 32).decode("ascii", "replace").strip()
        except UnreadableError:  # no permission: its presence is what matters
            text = ""
        pid = int(text) if text.isdigit() else None
    abort_kind, lock_kind = path_kind(abort), path_kind(root / "lock")
    return Markers(abort_kind is not None, pid, lock_kind is not None, abort_kind, lock_kind)
