"""Scalar record codec: one CommitLog record <-> :class:`Message`, byte for byte.

Offsets come from :mod:`store_format.layout` (the only declaration of the record).  The decoder mirrors
``CommitLog.checkMessageAndReturnSize``: it reads the header, the three length-prefixed parts, and
compares TOTALSIZE with ``calMsgLength``; every failure is a positioned :class:`RecordError`.
"""
from __future__ import annotations

import struct

from . import layout as L
from .errors import ErrorKind, RecordError
from .ids import format_host, parse_host
from .message import Message, body_crc32

_I32 = struct.Struct(">i")
_I16 = struct.Struct(">h")
_HEAD = struct.Struct(">ii")


def _text(raw: bytes, field: str, file, position: int, strict: bool) -> str:
    """UTF-8 text of a field.  The broker (``new String(bytes, UTF_8)``) replaces malformed input with
    U+FFFD and accepts the record, so that is the default; ``strict`` turns it into a positioned error."""
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as e:
        if strict:
            raise RecordError(ErrorKind.BAD_UTF8, f"invalid UTF-8 in {field}: {e.reason}", file=file,
                              position=position + e.start, field=field) from None
        return raw.decode("utf-8", "replace")


def record_header(buf, pos: int = 0) -> tuple[int, int]:
    """(TOTALSIZE, MAGICCODE) at ``pos``."""
    return _HEAD.unpack_from(buf, pos)


def decode_record(buf, pos: int = 0, *, limit: int | None = None, check_crc: bool = False,
                  file: str | None = None, strict_utf8: bool = False) -> Message:
    """Decode the record at ``buf[pos:]`` (bytes, memoryview or mmap); ``limit`` bounds every read.

    Error positions are byte positions in ``buf`` (the segment file when ``file`` names it).
    """
    limit = len(buf) if limit is None else limit

    def fail(kind, msg, fld=None, at=pos):
        raise RecordError(kind, msg, file=file, position=at, field=fld)

    if limit - pos < 8:
        fail(ErrorKind.TRUNCATED, f"only {limit - pos} bytes left, a record header needs 8", "store_size")
    total, magic = _HEAD.unpack_from(buf, pos)
    version = L.MESSAGE_MAGICS.get(magic)
    if version is None:
        fail(ErrorKind.BAD_MAGIC, f"magic 0x{magic & 0xFFFFFFFF:08X} is not a message magic", "magic")
    if limit - pos < L.SYS_FLAG_OFFSET + 4:
        fail(ErrorKind.TRUNCATED, "record ends before SYSFLAG", "sys_flag")
    sys_flag = _I32.unpack_from(buf, pos + L.SYS_FLAG_OFFSET)[0]
    lay = L.layout_for(sys_flag, version)
    if total < lay.min_size:
        fail(ErrorKind.BAD_LENGTH, f"TOTALSIZE {total} is below the minimum {lay.min_size}", "store_size")
    if pos + total > limit:
        fail(ErrorKind.TRUNCATED, f"TOTALSIZE {total} runs {pos + total - limit} bytes past the end of data",
             "store_size")
    end = pos + total
    values = dict(zip(lay.header_names, struct.unpack_from(lay.header_struct, buf, pos)))
    body_len = values["body_length"]
    p = pos + lay.body_offset
    if body_len < 0 or p + body_len + lay.topic_length_width > end:
        fail(ErrorKind.BAD_LENGTH, f"BODYLENGTH {body_len} does not fit in TOTALSIZE {total}", "body_length",
             pos + lay.offsets["body_length"])
    body = bytes(buf[p:p + body_len])
    p += body_len
    if version == 1:
        topic_len = struct.unpack_from(">b", buf, p)[0]
    else:
        topic_len = _I16.unpack_from(buf, p)[0]
    tl_pos = p
    p += lay.topic_length_width
    if topic_len < 0 or p + topic_len + 2 > end:
        fail(ErrorKind.BAD_LENGTH, f"TOPICLENGTH {topic_len} does not fit in TOTALSIZE {total}", "topic_length", tl_pos)
    topic_raw = bytes(buf[p:p + topic_len])
    topic_pos = p
    p += topic_len
    props_len = _I16.unpack_from(buf, p)[0]
    pl_pos = p
    p += 2
    if props_len < 0 or p + props_len > end:
        fail(ErrorKind.BAD_LENGTH, f"PROPERTIESLENGTH {props_len} does not fit in TOTALSIZE {total}",
             "properties_length", pl_pos)
    props_raw = bytes(buf[p:p + props_len])
    props_pos = p
    expected = lay.total_size(body_len, topic_len, props_len)
    if expected != total:
        fail(ErrorKind.SIZE_MISMATCH, f"TOTALSIZE {total} != calMsgLength {expected}", "store_size")
    if check_crc and body_len > 0 and values["body_crc"] != body_crc32(body):
        fail(ErrorKind.BAD_CRC, f"body CRC {values['body_crc']} != computed {body_crc32(body)}", "body_crc",
             pos + lay.offsets["body_crc"])
    return Message(
        topic=_text(topic_raw, "topic", file, topic_pos, strict_utf8), body=body, queue_id=values["queue_id"],
        properties_raw=_text(props_raw, "properties", file, props_pos, strict_utf8), flag=values["flag"], sys_flag=sys_flag,
        queue_offset=values["queue_offset"], physical_offset=values["physical_offset"],
        born_timestamp=values["born_timestamp"], born_host=format_host(values["born_host_ip"], values["born_host_port"]),
        store_timestamp=values["store_timestamp"],
        store_host=format_host(values["store_host_ip"], values["store_host_port"]),
        reconsume_times=values["reconsume_times"], prepared_transaction_offset=values["prepared_transaction_offset"],
        magic_version=version, body_crc=values["body_crc"], store_size=total, segment=file,
        file_position=pos if file is not None else None,
    )


def malformed_texts(buf, pos: int = 0, *, limit: int | None = None) -> list[tuple[str, str, int]]:
    """The text of the well-formed record at ``pos`` that is not UTF-8 (the broker's ``new String`` turns it into
    U+FFFD): ``(field, value, position)`` for the topic (field ``topic``) and for each property whose name or
    value is malformed (field: the name as the broker reads it), the value with its malformed bytes escaped
    (``\\xNN``), and the position in ``buf`` of its first malformed byte.  A malformed piece with no NAME/VALUE
    separator, which the broker's parse drops after decoding the whole block, is reported too (field: the
    piece, value empty): the block held those bytes."""
    m = decode_record(buf, pos, limit=limit)  # framing: raises where the record cannot be read
    lay = L.layout_for(m.sys_flag, m.magic_version)
    width = lay.topic_length_width
    at = pos + lay.body_offset + len(m.body)
    topic_len = struct.unpack_from(">b" if width == 1 else ">h", buf, at)[0]
    topic_at = at + width
    props_len = _I16.unpack_from(buf, topic_at + topic_len)[0]
    props_at = topic_at + topic_len + 2
    props = bytes(buf[props_at:props_at + props_len])
    found = []
    bad = _first_malformed(bytes(buf[topic_at:topic_at + topic_len]))
    if bad is not None:
        found.append(("topic", _escaped(bytes(buf[topic_at:topic_at + topic_len])), topic_at + bad))
    at = 0
    for segment in props.split(b"\x02"):  # string2messageProperties: NAME \x01 VALUE, split on \x02
        name, sep, value = segment.partition(b"\x01")
        bad_name, bad_value = _first_malformed(name), _first_malformed(value)
        if bad_name is not None or bad_value is not None:
            where = bad_name if bad_name is not None else len(name) + 1 + bad_value
            found.append((_escaped(name), _escaped(value), props_at + at + where))
        at += len(segment) + 1
    return found


def _first_malformed(raw: bytes) -> int | None:
    try:
        raw.decode("utf-8")
        return None
    except UnicodeDecodeError as e:
        return e.start


def _escaped(raw: bytes) -> str:
    return raw.decode("utf-8", "backslashreplace")


def host_flags(born_host: str, store_host: str) -> int:
    """The sysflag IPv6 bits implied by the two hosts."""
    flags = 0
    if len(parse_host(born_host)[0]) == 16:
        flags |= L.BORNHOST_V6_FLAG
    if len(parse_host(store_host)[0]) == 16:
        flags |= L.STOREHOST_V6_FLAG
    return flags


def encoded_size(msg: Message) -> int:
    lay = L.layout_for(msg.sys_flag, msg.magic_version)
    return lay.total_size(len(msg.body), len(msg.topic.encode("utf-8")), len(msg.properties_raw.encode("utf-8")))


def encode_record(msg: Message, *, store_size: int | None = None, magic: int | None = None) -> bytes:
    """Encode ``msg`` exactly as the broker stores it.  ``body_crc`` None is computed; ``store_size`` and
    ``magic`` may be forced (to forge damage on purpose)."""
    born_ip, born_port = parse_host(msg.born_host)
    store_ip, store_port = parse_host(msg.store_host)
    sys_flag = msg.sys_flag
    if (len(born_ip) == 16) != bool(sys_flag & L.BORNHOST_V6_FLAG) or \
            (len(store_ip) == 16) != bool(sys_flag & L.STOREHOST_V6_FLAG):
        raise RecordError(ErrorKind.INVALID_INPUT,
                          f"sys_flag 0x{sys_flag:X} IPv6 bits disagree with hosts {msg.born_host} / {msg.store_host}",
                          field="sys_flag")
    lay = L.layout_for(sys_flag, msg.magic_version)
    topic = msg.topic.encode("utf-8")
    props = msg.properties_raw.encode("utf-8")
    max_topic = 0x7F if msg.magic_version == 1 else 0x7FFF
    if len(topic) > max_topic:
        raise RecordError(ErrorKind.INVALID_INPUT, f"topic is {len(topic)} bytes; magic V{msg.magic_version} allows "
                          f"{max_topic}", field="topic")
    if len(props) > L.MAX_PROPERTIES_LENGTH:
        raise RecordError(ErrorKind.INVALID_INPUT, f"properties are {len(props)} bytes; max {L.MAX_PROPERTIES_LENGTH}",
                          field="properties")
    total = lay.total_size(len(msg.body), len(topic), len(props))
    crc = body_crc32(msg.body) if msg.body_crc is None else msg.body_crc
    values = {
        "store_size": total if store_size is None else store_size,
        "magic": L.MAGIC_OF_VERSION[msg.magic_version] if magic is None else magic,
        "body_crc": crc, "queue_id": msg.queue_id, "flag": msg.flag, "queue_offset": msg.queue_offset,
        "physical_offset": msg.physical_offset, "sys_flag": sys_flag, "born_timestamp": msg.born_timestamp,
        "born_host_ip": born_ip, "born_host_port": born_port, "store_timestamp": msg.store_timestamp,
        "store_host_ip": store_ip, "store_host_port": store_port, "reconsume_times": msg.reconsume_times,
        "prepared_transaction_offset": msg.prepared_transaction_offset, "body_length": len(msg.body),
    }
    head = struct.pack(lay.header_struct, *(values[n] for n in lay.header_names))
    tlen = struct.pack(">b" if msg.magic_version == 1 else ">h", len(topic))
    return b"".join((head, msg.body, tlen, topic, struct.pack(">h", len(props)), props))


def encode_blank(size: int) -> bytes:
    """The end-of-file blank header: TOTALSIZE = bytes left in the file, BLANK magic; nothing else written."""
    return _HEAD.pack(size, L.BLANK_MAGIC)
