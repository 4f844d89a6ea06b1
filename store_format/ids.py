"""Message ids.

offsetMsgId (``MessageDecoder.createMessageId``): hex(store ip 4|16 | port int | physical offset long),
upper case, 32 (IPv4) or 56 (IPv6) characters.

UNIQ_KEY (``MessageClientIDSetter``): hex(client ip 4|16 | pid short | classloader hash int |
ms since the producer's month start, unsigned int | counter short), 32 or 56 characters.
"""
from __future__ import annotations

import datetime as _dt
import ipaddress
import re
import struct
from dataclasses import dataclass

from .errors import ErrorKind, IdError


def format_host(ip: bytes, port: int) -> str:
    """'1.2.3.4:10911' or '[2408:4004:0:0:0:0:0:1]:10911', as RocketMQ prints a host."""
    if len(ip) == 4:
        return f"{ipaddress.IPv4Address(ip)}:{port}"
    return f"[{ipv6_java_text(ip)}]:{port}"


def ipv6_java_text(ip: bytes) -> str:
    """Java's ``Inet6Address.getHostAddress``: eight lower-case hex groups, no '::' compression."""
    return ":".join(f"{(ip[i] << 8) | ip[i + 1]:x}" for i in range(0, 16, 2))


def parse_host(host: str) -> tuple[bytes, int]:
    """Inverse of :func:`format_host`: (address bytes, port)."""
    try:
        addr, _, port = host.rpartition(":")
        if addr.startswith("["):
            ip = ipaddress.IPv6Address(addr[1:-1]).packed
        else:
            ip = ipaddress.ip_address(addr).packed
        port = int(port)
    except ValueError as e:
        raise IdError(ErrorKind.BAD_ID, f"host {host!r} is not 'ip:port' or '[ipv6]:port': {e}", field="host") from None
    if not -2**31 <= port < 2**31:  # the record stores the port as a Java int
        raise IdError(ErrorKind.BAD_ID, f"host {host!r}: port {port} does not fit a 32-bit int", field="host")
    return ip, port


def create_offset_msg_id(store_ip: bytes, store_port: int, physical_offset: int) -> str:
    return (store_ip + struct.pack(">iq", store_port, physical_offset)).hex().upper()


@dataclass(frozen=True)
class OffsetMsgId:
    store_ip: bytes
    store_port: int
    physical_offset: int

    @property
    def store_host(self) -> str:
        return format_host(self.store_ip, self.store_port)


def parse_offset_msg_id(msg_id: str) -> OffsetMsgId:
    """``MessageDecoder.decodeMessageId``: 32 hex chars -> IPv4, 56 -> IPv6."""
    raw = _unhex(msg_id, "msg_id", "offsetMsgId")
    ip_len = len(raw) - 12
    port, offset = struct.unpack(">iq", raw[ip_len:])
    return OffsetMsgId(raw[:ip_len], port, offset)


@dataclass(frozen=True)
class UniqKey:
    client_ip: bytes
    pid: int
    class_loader_hash: int
    millis_since_month_start: int
    counter: int

    @property
    def client_ip_str(self) -> str:
        """Java style, like the host columns (IPv6 as eight uncompressed groups)."""
        if len(self.client_ip) == 16:
            return ipv6_java_text(self.client_ip)
        return str(ipaddress.IPv4Address(self.client_ip))

    def timestamp(self, near_ms: int, tz: _dt.tzinfo = _dt.timezone.utc) -> int:
        """Producer time in ms: month start (in ``tz``) of ``near_ms`` (e.g. the born timestamp) plus
        the offset; the previous month if that lands after ``near_ms`` by more than a minute."""
        try:
            when = _dt.datetime.fromtimestamp(near_ms / 1000, tz)
            month = when.replace(day=1, hour=0, minute=0, second=0, microsecond=0)
            t = int(month.timestamp() * 1000) + self.millis_since_month_start
            if t > near_ms + 60_000:
                prev = (month - _dt.timedelta(days=1)).replace(day=1)
                t = int(prev.timestamp() * 1000) + self.millis_since_month_start
        except (ValueError, OverflowError, OSError):  # a (damaged) time outside what datetime can hold
            raise IdError(ErrorKind.OUT_OF_RANGE, f"time {near_ms} ms is outside the years 1-9999",
                          field="born_timestamp") from None
        return t


def parse_uniq_key(uniq_key: str) -> UniqKey:
    raw = _unhex(uniq_key, "uniq_key", "UNIQ_KEY")
    ip_len = len(raw) - 12
    pid, cl_hash, span, counter = struct.unpack(">HiIH", raw[ip_len:])
    return UniqKey(raw[:ip_len], pid, cl_hash, span, counter)


def create_uniq_key(client_ip: bytes, pid: int, class_loader_hash: int, timestamp_ms: int, counter: int,
                    tz: _dt.tzinfo = _dt.timezone.utc) -> str:
    """``MessageClientIDSetter.createUniqID`` for a given clock (month start taken in ``tz``)."""
    when = _dt.datetime.fromtimestamp(timestamp_ms / 1000, tz)
    month = when.replace(day=1, hour=0, minute=0, second=0, microsecond=0)
    span = (timestamp_ms - int(month.timestamp() * 1000)) & 0xFFFFFFFF
    return (client_ip + struct.pack(">HiIH", pid & 0xFFFF, class_loader_hash, span, counter & 0xFFFF)).hex().upper()


_HEX_ID = re.compile(r"[0-9A-Fa-f]*\Z")


def _unhex(text: str, field: str, what: str) -> bytes:
    """The bytes of a 32 (IPv4) or 56 (IPv6) hex character id; the length is checked first, so a wrong length
    says so whatever the characters are."""
    if not isinstance(text, str):
        raise IdError(ErrorKind.BAD_ID, f"{what} must be a string of 32 or 56 hex characters", field=field)
    if len(text) not in (32, 56):
        raise IdError(ErrorKind.BAD_ID, f"{what} must be 32 or 56 hex characters (IPv4 or IPv6 store host), got {len(text)}",
                      field=field)
    if not _HEX_ID.match(text):
        bad = next(c for c in text if c not in "0123456789ABCDEFabcdef")
        raise IdError(ErrorKind.BAD_ID, f"{what} {text!r} is not hexadecimal (character {bad!r})", field=field)
    return bytes.fromhex(text)



def create_uniq_keys(client_ip: bytes, pid: int, class_loader_hash: int, timestamps_ms, counters) -> list[str]:
    """:func:`create_uniq_key` for many (timestamp, counter) pairs of one client, vectorized (month start
    in UTC)."""
    import numpy as np
    ts = np.asarray(timestamps_ms, np.int64)
    month = ts.astype("datetime64[ms]").astype("datetime64[M]").astype("datetime64[ms]").astype(np.int64)
    n = len(ts)
    width = len(client_ip) + 12
    raw = np.empty((n, width), np.uint8)
    raw[:, :len(client_ip)] = np.frombuffer(client_ip, np.uint8)
    raw[:, len(client_ip):len(client_ip) + 6] = np.frombuffer(struct.pack(">Hi", pid & 0xFFFF, class_loader_hash), np.uint8)
    raw[:, len(client_ip) + 6:len(client_ip) + 10] = ((ts - month) & 0xFFFFFFFF).astype(">u4").view(np.uint8).reshape(n, 4)
    raw[:, len(client_ip) + 10:] = (np.asarray(counters, np.int64) & 0xFFFF).astype(">u2").view(np.uint8).reshape(n, 2)
    hexdigits = np.frombuffer(b"0123456789ABCDEF", np.uint8)
    out = np.empty((n, width * 2), np.uint8)
    out[:, 0::2] = hexdigits[raw >> 4]
    out[:, 1::2] = hexdigits[raw & 0xF]
    text = out.tobytes().decode("ascii")
    w = width * 2
    return [text[i:i + w] for i in range(0, n * w, w)]


def offset_msg_id_offsets(msg_ids) -> tuple:
    """:func:`parse_offset_msg_id`'s physical offsets of many ids at once (a pyarrow string array, or anything
    ``pyarrow.array`` takes): (offsets int64, valid bool) numpy arrays; an id that does not parse (null, a
    length other than 32 or 56, a character that is not hex) is not valid and its offset is 0."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc

    ids = pa.array(msg_ids, pa.string()) if not isinstance(msg_ids, (pa.Array, pa.ChunkedArray)) else msg_ids
    if isinstance(ids, pa.ChunkedArray):
        ids = ids.combine_chunks()
    n = len(ids)
    if not n:
        return np.zeros(0, np.int64), np.zeros(0, bool)
    length = pc.fill_null(pc.binary_length(ids), 0).to_numpy(zero_copy_only=False)
    valid = ((length == 32) | (length == 56)) & pc.fill_null(
        pc.match_substring_regex(ids, r"^[0-9A-Fa-f]*$"), False).to_numpy(zero_copy_only=False)
    tail = pc.utf8_slice_codeunits(pc.if_else(pa.array(valid), ids, "0" * 16), -16)  # the offset: the last 16
    start = int(np.frombuffer(tail.buffers()[1], np.int32, 1, tail.offset * 4)[0])
    digits = np.frombuffer(tail.buffers()[2], np.uint8, 16 * n, start).reshape(n, 16)  # every tail: 16 ASCII chars
    value = np.full(256, 0, np.uint64)
    for i, c in enumerate(b"0123456789abcdef"):
        value[c] = value[ord(chr(c).upper())] = i
    nibbles = value[digits]
    offsets = np.zeros(n, np.uint64)
    for k in range(16):
        offsets = (offsets << np.uint64(4)) | nibbles[:, k]
    return offsets.view(np.int64), valid
