"""What a broker does around one CommitLog append, as the writer's structures take part in it.

RocketMQ's store is one put path and a list of dispatchers (``DefaultMessageStore.dispatcherList``, run by the
reput service over every record the CommitLog holds).  :class:`~store_format.write.writer.StoreWriter` is the
CommitLog; each structure built from it is a :class:`Dispatcher` in its own module, turned on by the broker setting
RocketMQ reads for it:

  consume queue   :mod:`.consumequeue`  always (queue.type SimpleCQ, the default); ConsumeQueueExt with
                                        enableConsumeQueueExt
  batch queue     :mod:`.batchcq`       a topic whose queue.type attribute is BatchCQ
  LMQ             :mod:`.lmq`           enableLmq / enableMultiDispatch
  timer           :mod:`.timer`         timerWheelEnable
  delay offsets   :mod:`.writer`        always (ScheduleMessageService's delayOffset.json)
  index           :mod:`.indexfile`     messageIndexEnable
  compaction      :mod:`.compaction`    a topic whose cleanup.policy attribute is COMPACTION (enableCompaction)

A dispatcher may take part in the put path too, as the queue it owns does in RocketMQ (``assignQueueOffset``
before the record is encoded, ``increaseQueueOffset`` after it is written).  The hooks, each a no-op here:
:meth:`Dispatcher.prepare`, :meth:`Dispatcher.appended`, :meth:`Dispatcher.dispatch`,
:meth:`Dispatcher.config_texts`, :meth:`Dispatcher.close`.  The writer runs each hook over the dispatchers that
override it, in the list's order.
"""
from __future__ import annotations

from dataclasses import dataclass

from ..errors import ErrorKind, WriterError
from ..message import Message


@dataclass
class DispatchRequest:
    """One stored record on its way through the dispatchers (RocketMQ's ``DispatchRequest``)."""

    msg: Message
    tags_code: int  # the consume-queue unit's tagsCode (a delay topic's deliver time), 0 when not dispatchable
    queues: "Dispatcher"  # the dispatcher that owns the record's topic-queue (its queue.type)
    cq_written: bool = False  # the record's own ConsumeQueue unit was written now (not a repeat)


class Dispatcher:
    """One structure the broker builds from the CommitLog (the base: every hook does nothing)."""

    def prepare(self, record: Message, raw: str) -> str:
        """The put path, before the record is sized: the properties string ``raw`` as this structure turns it."""
        return raw

    def appended(self, stored: Message) -> None:
        """The put path, after the record is written (its offsets assigned)."""

    def dispatch(self, request: DispatchRequest) -> bool:
        """The reput: this structure's part of one stored record; False when it throws, which stops the reput
        here (the record's later dispatchers and every later record)."""
        return True

    def config_texts(self, texts: dict, offsets: dict) -> None:
        """The config/*.json texts at persist time (``offsets`` is consumerOffset.json's content)."""

    def close(self, now: int, clean: bool) -> None:
        """Shutdown (``clean``) or ``kill -9``: this structure's files as the broker leaves them."""


def refuse_reopen(writer, what: str) -> None:
    """The writer does not reload a 5.x structure's state from disk: a reopened store with it turned on is refused."""
    if writer._reopened:
        raise WriterError(ErrorKind.INVALID_INPUT, f"reopening a store with {what} is not supported by the writer "
                          "(only enabledAppendPropCRC and BatchCQ topics); write a new store instead (dump --what "
                          "commitlog, then write with the whole input)", file=str(writer.root))


def overrides(d: Dispatcher, hook: str) -> bool:
    return getattr(type(d), hook) is not getattr(Dispatcher, hook)
