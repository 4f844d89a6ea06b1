"""The writer's dispatchers are the broker's: turned on by the settings RocketMQ reads, in dispatcherList order, and
a store written through them is the same one whichever broker version drives it.  No Spark."""
from __future__ import annotations

import struct

from store_format import layout as L
from store_format.write.batchcq import BatchQueues
from store_format.write.broker import Broker, ManualClock, Producer
from store_format.write.consumequeue import ConsumeQueues
from store_format.write.indexfile import IndexService
from store_format.write.lmq import LmqDispatch
from store_format.write.timer import TimerEnqueue
from store_format.write.writer import StoreWriter, WriterConfig


def _kinds(w: StoreWriter) -> list[str]:
    return [type(d).__name__ for d in w.dispatchers]


def test_a_4x_broker_dispatches_to_its_consume_queues_delay_offsets_and_index(tmp_path):
    w = StoreWriter(tmp_path / "a", WriterConfig())
    assert _kinds(w) == ["ConsumeQueues", "_DelayOffsets", "IndexService"] and not w.rocketmq5
    w.close()
    w = StoreWriter(tmp_path / "b", WriterConfig(messageIndexEnable=False))
    assert _kinds(w) == ["ConsumeQueues", "_DelayOffsets"]
    w.close()


def test_each_5x_structure_is_turned_on_by_its_setting(tmp_path):
    w = StoreWriter(tmp_path / "a", WriterConfig(enableLmq=True, enableMultiDispatch=True, timerWheelEnable=True))
    assert [type(d) for d in w.dispatchers][:3] == [ConsumeQueues, LmqDispatch, TimerEnqueue]
    assert isinstance(w.dispatchers[-1], IndexService) and w.timer is not None and w.rocketmq5
    assert w.batch_queues is None and not w.batch_topic("Batch")
    # a topic whose queue.type is BatchCQ brings the batch queues, right after the plain ones
    w.register_topic("Batch", 2, attributes={L.TOPIC_ATTRIBUTE_QUEUE_TYPE: L.QUEUE_TYPE_BATCH})
    assert isinstance(w.dispatchers[1], BatchQueues) and w.batch_topic("Batch") and not w.batch_topic("Other")
    w.close()


def test_a_batch_topic_alone_makes_a_4x_config_a_5x_broker_that_writes_46_byte_units(tmp_path):
    w = StoreWriter(tmp_path / "s", WriterConfig(storeHost="10.0.0.9:10911"), clock=ManualClock(1_700_000_000_000))
    w.register_topic("Batch", 1, attributes={L.TOPIC_ATTRIBUTE_QUEUE_TYPE: L.QUEUE_TYPE_BATCH})
    b, p = Broker(w), Producer(born_host="10.1.2.3:50000")
    assert w.rocketmq5 and b.rocketmq5
    first = b.send_inner_batch(p, "Batch", [{"body": b"a"}, {"body": b"b"}, {"body": b"c"}]).record
    second = b.send(p, "Batch", b"single", queue_id=0).record
    assert (first.queue_offset, second.queue_offset) == (0, 3)  # the batch queue's counter moved by INNER_NUM
    w.close()
    units = sorted((tmp_path / "s" / "batchconsumequeue" / "Batch" / "0").iterdir())
    assert len(units) == 1 and not (tmp_path / "s" / "consumequeue" / "Batch").exists()
    data = units[0].read_bytes()
    assert data[2 * L.BATCH_CQ_UNIT.width:3 * L.BATCH_CQ_UNIT.width] == bytes(L.BATCH_CQ_UNIT.width)  # two units
    assert struct.unpack_from(L.BATCH_CQ_UNIT.struct, data, L.BATCH_CQ_UNIT.width)[0] == second.physical_offset
