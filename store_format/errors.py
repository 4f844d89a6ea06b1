"""One exception tree for every way a store can be damaged or misread.

Each error carries a stable ``kind`` (an :class:`ErrorKind`), the file, the byte position and the field,
so a scan can turn it into a finding row and a command line can print where to look.
"""
from __future__ import annotations

import enum


class ErrorKind(str, enum.Enum):
    TRUNCATED = "TRUNCATED"  # a record, unit or file ends before its declared length
    BAD_MAGIC = "BAD_MAGIC"  # magic code is neither a message nor a blank
    BAD_CRC = "BAD_CRC"  # body CRC does not match
    SIZE_MISMATCH = "SIZE_MISMATCH"  # TOTALSIZE != calMsgLength(...)
    BAD_LENGTH = "BAD_LENGTH"  # negative or implausible length field
    OUT_OF_RANGE = "OUT_OF_RANGE"  # an offset or index outside the file / store
    PHYSICAL_OFFSET_MISMATCH = "PHYSICAL_OFFSET_MISMATCH"  # PHYSICALOFFSET != segment base + position
    BAD_UTF8 = "BAD_UTF8"  # text field is not valid UTF-8
    BAD_ID = "BAD_ID"  # malformed offsetMsgId / UNIQ_KEY
    BAD_JSON = "BAD_JSON"  # config file that even fastjson-tolerant parsing cannot read
    BAD_CONFIG = "BAD_CONFIG"  # impossible configuration value
    BAD_FILE_NAME = "BAD_FILE_NAME"  # a store file whose name is not what RocketMQ writes
    BAD_GEOMETRY = "BAD_GEOMETRY"  # file lengths that disagree with each other or the config
    CYCLIC_CHAIN = "CYCLIC_CHAIN"  # an index hash chain that loops or runs longer than the file
    DECOMPRESSION = "DECOMPRESSION"  # body cannot be decompressed, or exceeds the output cap
    MISSING = "MISSING"  # a file or directory the store should have
    INVALID_INPUT = "INVALID_INPUT"  # a caller's value (topic name, record too large...) that is refused
    UNREADABLE = "UNREADABLE"  # a file that cannot be read: not a regular file (FIFO, device...), a loop, no permission
    # recovery walk stops under forceVerifyPropCRC (5.2.0+): the record's __CRC32# does not match (or is no number)
    BAD_PROPERTY_CRC = "BAD_PROPERTY_CRC"
    NO_PROPERTY_CRC = "NO_PROPERTY_CRC"  # ... or it has no __CRC32# property at all
    TOO_LARGE = "TOO_LARGE"  # a file too large to parse within memory (store_format.config.CONFIG_MEMORY_LIMIT)


class StoreFormatError(ValueError):
    """Base of every store error; ``str()`` reads ``KIND file@position field: message``."""

    def __init__(self, kind: ErrorKind, message: str, *, file: str | None = None,
                 position: int | None = None, field: str | None = None):
        self.kind = ErrorKind(kind)
        self.file = file
        self.position = position
        self.field = field
        self.message = message
        where = ""
        if file is not None:
            where = f" {file}"
        if position is not None:
            where += f"@{position}"
        if field:
            where += f" [{field}]"
        super().__init__(f"{self.kind.value}{where}: {message}")

    def as_dict(self) -> dict:
        return {"kind": self.kind.value, "file": self.file, "position": self.position, "field": self.field,
                "message": self.message}


class RecordError(StoreFormatError):
    """A CommitLog record that cannot be framed or decoded."""


class ConsumeQueueError(StoreFormatError):
    """A consume-queue file that cannot be read."""


class IndexFileError(StoreFormatError):
    """An index file that cannot be read."""


class CheckpointError(StoreFormatError):
    """A checkpoint file that cannot be read."""


class ConfigError(StoreFormatError):
    """A config/*.json file that cannot be read."""


class IdError(StoreFormatError):
    """A malformed message id."""


class WriterError(StoreFormatError):
    """A write the StoreWriter refuses (bad topic, record too large, non-empty root...)."""
