"""POP consumption's records in the revive topic ``rmq_sys_REVIVE_LOG_<cluster>``: checkpoint (``ck``), ack
(``ack``) and batch-ack (``bAck``) bodies.

Mirrors ``store/pop/PopCheckPoint.java``, ``AckMsg.java``, ``BatchAckMsg.java`` and the broker's
``PopMessageProcessor.buildCkMsg`` / ``AckMessageProcessor.appendAck`` (5.3.3).  The bodies are fastjson text
(bean properties in name order; fastjson also reads the long names)::

    ck    {"bm":bitMap,"bn":brokerName,"c":group,"d":[offset - so,...],"it":invisibleTime,"n":num,"pt":popTime,
           "q":queueId,"reviveTime":pt+it,"ro":reviveOffset,"so":startOffset,"t":topic}   (+ "rp" re-put times)
    ack   {"ao":ackOffset,"bn":brokerName,"c":group,"pt":popTime,"q":queueId,"so":startOffset,"t":topic}
    bAck  the ack's fields, "ao" -1, and "aol":[ackOffset,...]

A ck or ack record is a timer message (``TIMER_DELIVER_MS`` = reviveTime - 1000 for a ck, popTime +
invisibleTime for an ack): first stored on ``rmq_sys_wheel_timer``, re-put to the revive topic when due.

:func:`parse_pop_body` reads one body by its tag; a body that is not JSON, or whose fields are not what the
class holds, is a positioned :class:`PopBodyError` (``BAD_JSON`` / ``BAD_CONFIG``), never a crash.
:func:`ck_body` / :func:`ack_body` write bodies as the broker's fastjson does (the writer's POP flow).
"""
from __future__ import annotations

import json
from dataclasses import dataclass

from . import layout as L
from .errors import ErrorKind, StoreFormatError

POP_TAGS = (L.POP_CK_TAG, L.POP_ACK_TAG, L.POP_BATCH_ACK_TAG)


class PopBodyError(StoreFormatError):
    """A revive-topic body that is not the JSON of its class."""


@dataclass(frozen=True)
class PopCheckPoint:
    start_offset: int  # so: first popped queue offset
    pop_time: int  # pt
    invisible_time: int  # it
    bit_map: int  # bm: bit i set = message so + d[i] acked
    num: int  # n
    queue_id: int  # q
    topic: str  # t
    consumer_group: str  # c
    revive_offset: int  # ro: the ck's own offset in the revive queue
    queue_offset_diff: tuple  # d
    broker_name: str | None  # bn
    re_put_times: str | None = None  # rp

    @property
    def revive_time(self) -> int:
        return self.pop_time + self.invisible_time

    def offsets(self) -> list[int]:
        """The popped queue offsets (so + each d; an old checkpoint without d: so + 0 .. n - 1, n no more than a pop
        can take, so a damaged n is no endless list)."""
        return [self.start_offset + d for d in self.queue_offset_diff] if self.queue_offset_diff else \
            list(range(self.start_offset, self.start_offset + max(0, min(self.num, L.POP_MAX_MSG_NUMS))))

    def acked(self, i: int) -> bool:
        return bool(self.bit_map >> i & 1)

    def uniq_key(self) -> str:
        """``PopMessageProcessor.genCkUniqueId``."""
        return L.POP_UNIQ_SPLIT.join(map(str, (self.topic, self.queue_id, self.start_offset, self.consumer_group,
                                               self.pop_time, self.broker_name, L.POP_CK_TAG)))


@dataclass(frozen=True)
class AckMsg:
    ack_offset: int  # ao (-1 in a batch ack)
    start_offset: int  # so
    consumer_group: str  # c
    topic: str  # t
    queue_id: int  # q
    pop_time: int  # pt
    broker_name: str | None  # bn
    ack_offset_list: tuple | None = None  # aol: a batch ack's offsets

    @property
    def is_batch(self) -> bool:
        return self.ack_offset_list is not None

    def offsets(self) -> list[int]:
        return list(self.ack_offset_list) if self.is_batch else [self.ack_offset]

    def uniq_key(self) -> str:
        """``genAckUniqueId``: what a (batch) ack record's UNIQ_KEY ends up as (5.3.3 sets it twice for a batch
        ack; the single-ack form wins)."""
        return L.POP_UNIQ_SPLIT.join(map(str, (self.topic, self.queue_id, self.ack_offset, self.consumer_group,
                                               self.pop_time, self.broker_name, L.POP_ACK_TAG)))


# fastjson's @JSONField short names and the long names it also reads
_CK_FIELDS = {"start_offset": ("so", "startOffset"), "pop_time": ("pt", "popTime"),
              "invisible_time": ("it", "invisibleTime"), "bit_map": ("bm", "bitMap"), "num": ("n", "num"),
              "queue_id": ("q", "queueId"), "topic": ("t", "topic"), "consumer_group": ("c", "cid"),
              "revive_offset": ("ro", "reviveOffset"), "queue_offset_diff": ("d", "queueOffsetDiff"),
              "broker_name": ("bn", "brokerName"), "re_put_times": ("rp", "rePutTimes")}
_ACK_FIELDS = {"ack_offset": ("ao", "ackOffset"), "start_offset": ("so", "startOffset"),
               "consumer_group": ("c", "consumerGroup"), "topic": ("t", "topic"), "queue_id": ("q", "queueId"),
               "pop_time": ("pt", "popTime"), "broker_name": ("bn", "brokerName"),
               "ack_offset_list": ("aol", "ackOffsetList")}
# each number's Java type, as the class declares it: fastjson refuses a value outside it (num, a byte, it reads as an
# int and narrows); a list's elements: d List<Integer>, aol List<Long>
_LONGS = {"start_offset", "pop_time", "invisible_time", "revive_offset", "ack_offset", "ack_offset_list"}
_INTS = {"bit_map", "num", "queue_id", "queue_offset_diff"}
_DEFAULTS = {"bit_map": 0, "num": 0, "revive_offset": 0, "queue_offset_diff": (), "broker_name": None,
             "re_put_times": None, "ack_offset_list": None, "invisible_time": 0, "start_offset": 0,
             "ack_offset": 0, "queue_id": 0, "pop_time": 0, "consumer_group": None, "topic": None}


def _fields(data: dict, spec: dict, file, position) -> dict:
    out = {}
    for name, keys in spec.items():
        value = next((data[k] for k in keys if k in data), _DEFAULTS.get(name))
        listed = name in ("queue_offset_diff", "ack_offset_list")
        if name in _INTS | _LONGS and not listed and (isinstance(value, bool) or not isinstance(value, int)):
            raise PopBodyError(ErrorKind.BAD_CONFIG, f"{keys[0]} is {value!r}, not a number", file=file,
                               position=position, field=keys[0])
        if listed and value is not None:
            if not isinstance(value, list) or not all(isinstance(v, int) and not isinstance(v, bool) for v in value):
                raise PopBodyError(ErrorKind.BAD_CONFIG, f"{keys[0]} is not a list of numbers", file=file,
                                   position=position, field=keys[0])
            value = tuple(value)
        bounds, java = (L.JAVA_LONG, "long") if name in _LONGS else (L.JAVA_INT, "int")
        numbers = (value or ()) if listed else (value,) if name in _INTS | _LONGS else ()
        outside = [v for v in numbers if not bounds[0] <= v <= bounds[1]]
        if outside:
            raise PopBodyError(ErrorKind.OUT_OF_RANGE, f"{keys[0]} holds {outside[0]}, outside Java's {java} range "
                               f"[{bounds[0]}, {bounds[1]}]: the broker cannot read this body", file=file,
                               position=position, field=keys[0])
        if name == "num":
            value = (value + 128) % 256 - 128  # PopCheckPoint.num is a byte: fastjson narrows the int
        if name in ("topic", "consumer_group", "broker_name", "re_put_times") and value is not None \
                and not isinstance(value, str):
            value = str(value)
        out[name] = value
    return out


def parse_pop_body(tag: str, body: bytes | str, *, file: str | None = None,
                   position: int | None = None) -> PopCheckPoint | AckMsg:
    """The body of a revive-topic record with tag ``ck``, ``ack`` or ``bAck``.  ``file``/``position`` (the
    record's segment and body position) place the error."""
    from .config import loads

    if tag not in POP_TAGS:
        raise PopBodyError(ErrorKind.INVALID_INPUT, f"tag {tag!r} is none of {', '.join(POP_TAGS)}", file=file,
                           position=position, field="tags")
    try:
        text = body.decode("utf-8") if isinstance(body, (bytes, bytearray, memoryview)) else body
    except UnicodeDecodeError as e:
        raise PopBodyError(ErrorKind.BAD_UTF8, f"body is not UTF-8: {e.reason}", file=file,
                           position=None if position is None else position + e.start, field="body") from None
    try:
        data = loads(text, file)
    except StoreFormatError as e:
        raise PopBodyError(ErrorKind.BAD_JSON, f"{tag} body is not JSON: {e.message}", file=file,
                           position=None if position is None or e.position is None else position + e.position,
                           field="body") from None
    if not isinstance(data, dict):
        raise PopBodyError(ErrorKind.BAD_JSON, f"{tag} body is not a JSON object", file=file, position=position,
                           field="body")
    if tag == L.POP_CK_TAG:
        ck = PopCheckPoint(**_fields(data, _CK_FIELDS, file, position))
        _within_long(ck, file, position)
        return ck
    values = _fields(data, _ACK_FIELDS, file, position)
    if tag == L.POP_BATCH_ACK_TAG and values["ack_offset_list"] is None:
        raise PopBodyError(ErrorKind.BAD_CONFIG, "bAck body has no aol", file=file, position=position, field="aol")
    if tag == L.POP_ACK_TAG:
        values["ack_offset_list"] = None
    return AckMsg(**values)


def _within_long(ck: PopCheckPoint, file, position) -> None:
    """What the broker computes from a checkpoint in long arithmetic -- each popped offset so + d[i]
    (``ackOffsetByIndex``) and the revive time pt + it -- must be a long: past it Java wraps round to another
    offset or time, so such a body is refused here as one the broker cannot hold."""
    sums = [("so", o) for o in (ck.start_offset + min(ck.queue_offset_diff, default=0),
                                ck.start_offset + max(ck.queue_offset_diff, default=0))]
    if not ck.queue_offset_diff:
        sums.append(("so", ck.start_offset + max(0, min(ck.num, L.POP_MAX_MSG_NUMS)) - 1))
    sums.append(("pt", ck.revive_time))
    for key, v in sums:
        if not L.JAVA_LONG[0] <= v <= L.JAVA_LONG[1]:
            what = "a popped offset (so + d)" if key == "so" else "the revive time (pt + it)"
            raise PopBodyError(ErrorKind.OUT_OF_RANGE, f"{what} is {v}, past Java's long range: the broker's "
                               "arithmetic wraps round to another value", file=file, position=position, field=key)


@dataclass(frozen=True)
class ReviveRecord:
    """A revive-topic record's body as read: the parsed value, or the error that stands for it."""

    tag: str | None
    value: PopCheckPoint | AckMsg | None
    error: StoreFormatError | None

    @property
    def kind(self) -> str:
        return "error" if self.error is not None else {L.POP_CK_TAG: "ck", L.POP_ACK_TAG: "ack",
                                                       L.POP_BATCH_ACK_TAG: "bAck"}[self.tag]


def read_revive_record(msg) -> ReviveRecord:
    """A stored record (:class:`store_format.message.Message`) of the revive topic, classified; never raises."""
    tag = msg.tags
    if tag not in POP_TAGS:
        return ReviveRecord(tag, None, PopBodyError(ErrorKind.INVALID_INPUT, f"revive record with tag {tag!r}",
                                                    file=msg.segment, position=msg.file_position, field="tags"))
    body_at = None
    if msg.file_position is not None:
        body_at = msg.file_position + L.layout_for(msg.sys_flag, msg.magic_version).body_offset
    try:
        return ReviveRecord(tag, parse_pop_body(tag, msg.body, file=msg.segment, position=body_at), None)
    except PopBodyError as e:
        return ReviveRecord(tag, None, e)


def is_revive_topic(topic: str) -> bool:
    return topic.startswith(L.REVIVE_TOPIC_PREFIX)


# ------------------------------------------------------------------------------------------- writing bodies


def _fastjson(obj: dict) -> str:
    """fastjson's compact output of a bean: properties in name order, no spaces."""
    return json.dumps(dict(sorted(obj.items())), separators=(",", ":"), ensure_ascii=False)


def ck_body(ck: PopCheckPoint) -> bytes:
    """``JSON.toJSONString(PopCheckPoint)``: the short names plus the ``reviveTime`` getter; ``rp`` and ``bn``
    only when set (fastjson leaves out nulls)."""
    d = {"bm": ck.bit_map, "c": ck.consumer_group, "d": list(ck.queue_offset_diff), "it": ck.invisible_time,
         "n": ck.num, "pt": ck.pop_time, "q": ck.queue_id, "reviveTime": ck.revive_time, "ro": ck.revive_offset,
         "so": ck.start_offset, "t": ck.topic}
    if ck.broker_name is not None:
        d["bn"] = ck.broker_name
    if ck.re_put_times is not None:
        d["rp"] = ck.re_put_times
    return _fastjson(d).encode("utf-8")


def ack_body(ack: AckMsg) -> bytes:
    """``JSON.toJSONString(AckMsg / BatchAckMsg)``."""
    d = {"ao": ack.ack_offset, "c": ack.consumer_group, "pt": ack.pop_time, "q": ack.queue_id,
         "so": ack.start_offset, "t": ack.topic}
    if ack.broker_name is not None:
        d["bn"] = ack.broker_name
    if ack.ack_offset_list is not None:
        d["aol"] = list(ack.ack_offset_list)
    return _fastjson(d).encode("utf-8")


__all__ = ["PopCheckPoint", "AckMsg", "PopBodyError", "ReviveRecord", "parse_pop_body", "read_revive_record",
           "is_revive_topic", "ck_body", "ack_body", "POP_TAGS"]
