"""The canonical message: every stored field of a CommitLog record, plus what RocketMQ derives from it.

Field names are the project's canonical snake_case names; every later layer (kernels, tables, JSON Lines)
uses them.  Derived values follow the broker: ``tags_code`` is what dispatch writes to the consume queue
(``CommitLog.checkMessageAndReturnSize``), ``msg_id`` is the offsetMsgId.
"""
from __future__ import annotations

import base64
import zlib
from dataclasses import dataclass, field

from . import layout as L
from .compression import DEFAULT_MAX_DECOMPRESSED, decompress
from .ids import create_offset_msg_id, parse_host
from .javahash import tags_code as _tags_code
from .properties import parse_properties, split_keys

STORED_FIELDS = (
    "physical_offset", "store_size", "magic_version", "body_crc", "queue_id", "flag", "queue_offset",
    "sys_flag", "born_timestamp", "born_host", "store_timestamp", "store_host", "reconsume_times",
    "prepared_transaction_offset", "body", "topic", "properties", "properties_raw",
)
DERIVED_FIELDS = ("msg_id", "uniq_key", "keys", "tags", "tags_code", "tran_type", "compression", "body_crc_ok")
LOCATION_FIELDS = ("segment", "file_position")
CANONICAL_FIELDS = STORED_FIELDS + DERIVED_FIELDS + LOCATION_FIELDS


def _is_int(text: str) -> bool:
    try:
        int(text)
        return True
    except ValueError:
        return False


def body_crc32(body: bytes) -> int:
    """UtilAll.crc32: standard CRC-32 with the sign bit cleared; 0 for an empty body."""
    return zlib.crc32(body) & 0x7FFFFFFF if body else 0


@dataclass
class Message:
    topic: str
    body: bytes = b""
    queue_id: int = 0
    properties_raw: str = ""
    flag: int = 0
    sys_flag: int = 0
    queue_offset: int = 0
    physical_offset: int = 0
    born_timestamp: int = 0
    born_host: str = "127.0.0.1:0"
    store_timestamp: int = 0
    store_host: str = "127.0.0.1:10911"
    reconsume_times: int = 0
    prepared_transaction_offset: int = 0
    magic_version: int = 1
    body_crc: int | None = None  # None: computed from the body when encoded
    store_size: int | None = None  # None: computed when encoded
    segment: str | None = None
    file_position: int | None = None
    properties: dict = field(default=None, repr=False)  # parsed from properties_raw when omitted

    def __post_init__(self):
        if self.properties is None:
            self.properties = parse_properties(self.properties_raw)
        if self.body is None:
            self.body = b""

    # ---- derived -----------------------------------------------------------------------------
    @property
    def msg_id(self) -> str:
        ip, port = parse_host(self.store_host)
        return create_offset_msg_id(ip, port, self.physical_offset)

    @property
    def uniq_key(self) -> str | None:
        return self.properties.get(L.PROPERTY_UNIQ_KEY)

    @property
    def keys(self) -> list[str]:
        return split_keys(self.properties.get(L.PROPERTY_KEYS))

    @property
    def tags(self) -> str | None:
        return self.properties.get(L.PROPERTY_TAGS)

    @property
    def tran_type(self) -> str:
        return L.tran_type_of(self.sys_flag)

    @property
    def compression(self) -> str:
        return L.compression_of(self.sys_flag)

    @property
    def body_crc_ok(self) -> bool:
        return self.body_crc is None or self.body_crc == body_crc32(self.body)

    @property
    def delay_level(self) -> int | None:
        raw = self.properties.get(L.PROPERTY_DELAY_TIME_LEVEL)
        try:
            return int(raw) if raw is not None else None
        except ValueError:
            return None

    @property
    def tags_code(self) -> int:
        return self.dispatch_tags_code()

    def dispatch_tags_code(self, delay_levels: dict[int, int] = L.DEFAULT_DELAY_LEVELS) -> int:
        """The consume-queue tagsCode: tags hash, or the deliver time for SCHEDULE_TOPIC_XXXX."""
        code = _tags_code(self.tags)
        level = self.delay_level
        if self.topic == L.SCHEDULE_TOPIC and level is not None:
            level = min(level, max(delay_levels) if delay_levels else level)
            if level > 0:
                code = L.compute_deliver_timestamp(level, self.store_timestamp, delay_levels)
        return code

    @staticmethod
    def schedule_tags_codes(delay_levels_of_records, store_timestamps, fallback_codes,
                            delay_levels: dict[int, int] = L.DEFAULT_DELAY_LEVELS):
        """:meth:`dispatch_tags_code` for many SCHEDULE_TOPIC_XXXX records at once (numpy arrays): the
        DELAY level (None/unparsable -> keep ``fallback_codes``, the tags hash) clamped to the highest
        level, then the deliver time for levels > 0."""
        import numpy as np
        levels = np.array([int(v) if v is not None and _is_int(v) else 0 for v in delay_levels_of_records], np.int64)
        has = np.array([v is not None and _is_int(v) for v in delay_levels_of_records], bool)
        top = max(delay_levels) if delay_levels else 0
        levels = np.where(has & (levels > top), top, levels) if delay_levels else levels
        table = np.full(max(top, 0) + 2, 1000, np.int64)  # an unknown level waits 1 s
        for lvl, ms in delay_levels.items():
            table[lvl] = ms
        deliver = np.asarray(store_timestamps, np.int64) + table[np.clip(levels, 0, top + 1)]
        return np.where(has & (levels > 0), deliver, np.asarray(fallback_codes, np.int64))

    @property
    def dispatchable(self) -> bool:
        """NOT and COMMIT records get a consume-queue entry; PREPARED and ROLLBACK do not."""
        return self.sys_flag & L.TRANSACTION_MASK in (L.TRANSACTION_NOT_TYPE, L.TRANSACTION_COMMIT_TYPE)

    def decompressed_body(self, max_output: int = DEFAULT_MAX_DECOMPRESSED) -> bytes:
        if self.compression == "NONE":
            return self.body
        return decompress(self.body, self.compression, max_output)

    # ---- presentation ------------------------------------------------------------------------
    def to_dict(self, body_base64: bool = True) -> dict:
        """Every canonical field (JSON-ready when ``body_base64``)."""
        out = {name: getattr(self, name) for name in CANONICAL_FIELDS}
        if out["body_crc"] is None:
            out["body_crc"] = body_crc32(self.body)
        if body_base64:
            out["body"] = base64.b64encode(self.body).decode("ascii")
        out["properties"] = dict(self.properties)
        return out

    @classmethod
    def from_dict(cls, d: dict) -> "Message":
        """Build from canonical fields (body bytes or base64 text); derived and unknown keys are ignored."""
        kwargs = {k: d[k] for k in STORED_FIELDS + LOCATION_FIELDS if k in d and k != "properties"}
        body = kwargs.get("body", b"")
        if isinstance(body, str):
            kwargs["body"] = base64.b64decode(body)
        if "properties_raw" not in kwargs and d.get("properties"):
            from .properties import format_properties
            kwargs["properties_raw"] = format_properties(d["properties"])
        return cls(**kwargs)
