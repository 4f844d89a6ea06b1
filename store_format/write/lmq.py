"""Light message queues (enableLmq / enableMultiDispatch), as RocketMQ 5.3.3 writes them.

  put path    ``LmqDispatch.wrapLmqDispatch`` (``ConsumeQueue.assignQueueOffset``): INNER_MULTI_QUEUE_OFFSET from
              the LMQ counters ("" for a non-LMQ name), WAIT removed and put back, the string rebuilt from the map
              (so WAIT stays); ``updateLmqOffsets`` after the write (+1 per LMQ name)
  dispatch    ``ConsumeQueue.multiDispatchLmqQueue`` after the record's own consume-queue unit, as
              :func:`store_format.lmq.predict_dispatch` describes it, including the count-mismatch skip and the
              NumberFormatException that stops every later dispatch (the writer then leaves ``abort`` at close, as
              the broker does when its reput has not finished)
  offsets     ``LmqConsumerOffsetManager``: an %LMQ% group's one offset per topic@group in lmqOffsetTable, in
              ``config/lmqConsumerOffset.json``, which replaces consumerOffset.json
"""
from __future__ import annotations

from .. import layout as L
from .. import lmq
from ..config import LMQ_CONSUMER_OFFSET_FILE, dumps_fastjson
from ..message import Message
from .dispatch import Dispatcher, DispatchRequest, refuse_reopen
from .javaprops import property_map, to_string


class LmqDispatch(Dispatcher):
    """The LMQ side of one store: its counters, its dispatch, and with enableLmq its consumer offsets."""

    def __init__(self, writer):
        refuse_reopen(writer, "LMQ state")
        cfg = writer.config
        self.writer = writer
        self.enable_lmq = cfg.enableLmq
        self.multi_dispatch = cfg.enableMultiDispatch
        self.lmq_offsets = lmq.LmqOffsets(enable_lmq=cfg.enableLmq)
        self.lmq_consumer_offsets: dict[str, int] = {}  # "topic@group" -> offset, for %LMQ% groups (enableLmq)

    def _needs_lmq(self, msg: Message) -> bool:
        """``isMultiDispatchMsg``: enableLmq and ``needDispatchLMQ`` (INNER_MULTI_DISPATCH not blank, the topic
        allows it)."""
        names = msg.properties.get(L.PROPERTY_INNER_MULTI_DISPATCH)
        return self.enable_lmq and names is not None and names.strip() != "" and \
            lmq.topic_allows_multi_dispatch(msg.topic)

    # ---- the put path ---------------------------------------------------------------------------------
    def prepare(self, record: Message, raw: str) -> str:
        if not self._needs_lmq(record):
            return raw
        trailing = raw.endswith(L.PROPERTY_SEPARATOR) or not raw
        m = property_map(raw)
        m.put(L.PROPERTY_INNER_MULTI_QUEUE_OFFSET, self.lmq_offsets.assign(m.get(L.PROPERTY_INNER_MULTI_DISPATCH)))
        wait = m.remove(L.PROPERTY_WAIT_STORE_MSG_OK)  # removeWaitStorePropertyString puts it back
        if wait is not None:
            m.put(L.PROPERTY_WAIT_STORE_MSG_OK, wait)
        return to_string(m, trailing)

    def appended(self, stored: Message) -> None:
        if self._needs_lmq(stored):
            self.lmq_offsets.advance(stored.properties.get(L.PROPERTY_INNER_MULTI_DISPATCH))  # updateLmqOffsets

    # ---- dispatch -------------------------------------------------------------------------------------
    def dispatch(self, request: DispatchRequest) -> bool:
        """``ConsumeQueue.multiDispatchLmqQueue`` after the record's own unit; False when it throws (the dispatch
        stalls here: :attr:`StoreWriter.stall`)."""
        msg = request.msg
        if not (self.multi_dispatch and request.cq_written) or not lmq.topic_allows_multi_dispatch(msg.topic):
            return True
        lists = lmq.dispatch_lists(msg.properties)
        if lists is None or not lists.counts_match:
            return True
        for name, text in zip(lists.names, lists.offsets):
            if lmq.PATH_SEPARATOR in name:
                continue
            offset = lmq.parse_java_long(text)
            if offset is None:
                self.writer.stall = lmq.LmqStall(msg.physical_offset, name, text, "NumberFormatException")
                return False
            qid = L.LMQ_QUEUE_ID if self.enable_lmq and lmq.is_lmq(name) else msg.queue_id
            if not name.strip() or not set(name) <= L.TOPIC_VALID_CHARS or len(name) > L.TOPIC_MAX_LENGTH:
                continue  # a name no folder can hold (TopicValidator) is never written by this writer
            self.writer.consume_queue(name, qid).put(msg.physical_offset, msg.store_size, request.tags_code, offset)
        return True

    # ---- consumer offsets (LmqConsumerOffsetManager) --------------------------------------------------
    def commit_offset(self, group: str, topic: str, offset: int) -> bool:
        """``LmqConsumerOffsetManager.commitOffset``: with enableLmq an %LMQ% group's offset is one per
        topic@group (the queue id is not kept); False for any other group (the ordinary table)."""
        if not (self.enable_lmq and lmq.is_lmq(group)):
            return False
        self.lmq_consumer_offsets[f"{topic}@{group}"] = int(offset)
        return True

    def config_texts(self, texts: dict, offsets: dict) -> None:
        """With enableLmq the broker's offset manager is ``LmqConsumerOffsetManager``, which persists to
        ``lmqConsumerOffset.json`` (its inherited offsetTable and the lmqOffsetTable; fastjson orders the keys) and
        never writes consumerOffset.json."""
        if not self.enable_lmq:
            return
        del texts["consumerOffset.json"]
        texts[LMQ_CONSUMER_OFFSET_FILE] = dumps_fastjson({"lmqOffsetTable": dict(self.lmq_consumer_offsets), **offsets})
