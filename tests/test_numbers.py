"""Numbers at their real width (issue 38, item 5): offsets, lags and times stay 64-bit integers end to end; a value
the broker cannot hold is a positioned finding, never a crash of the checks; and every option that takes a number
refuses what it cannot hold with a usage error naming the option and the range."""
from __future__ import annotations

import shutil
import struct

import pytest

from runtime import cli
from jobs.audit import job as audit_job
from jobs.extract import build_parser as extract_parser
from jobs.query import build_parser as query_parser
from store_format import layout as L
from store_format import pop as P
from store_format.write.broker import BatchItem, ManualClock, Producer
from store_format.write.broker import Broker
from store_format.write.writer import StoreWriter, WriterConfig

from .conftest import fixture_store
from .test_v5_audit import START, audit, writer5

LONG_MIN, LONG_MAX = -2**63, 2**63 - 1


def _batch_store(root, base: int) -> None:
    """A BatchCQ topic of three inner batches (3, 1, 4 messages), group cg at offset 2, the last unit's msgBaseOffset
    set to ``base``."""
    cfg = WriterConfig(storeHost="192.168.0.10:10911", mappedFileSizeCommitLog=1 << 20, timerWheelEnable=True)
    w = StoreWriter(root, cfg, clock=ManualClock(START))
    b, p = Broker(w), Producer(born_host="10.1.2.3:50000")
    w.register_topic("BatchTopic", 1, attributes={L.TOPIC_ATTRIBUTE_QUEUE_TYPE: L.QUEUE_TYPE_BATCH})
    for n in (3, 1, 4):
        b.send_inner_batch(p, "BatchTopic", [BatchItem(b"x%d" % i) for i in range(n)], queue_id=0)
    w.commit_offset("cg", "BatchTopic", 0, 2)
    w.close()
    with open(root / "batchconsumequeue" / "BatchTopic" / "0" / ("0" * 20), "r+b") as f:
        f.seek(2 * L.BATCH_CQ_UNIT.width + L.BATCH_CQ_UNIT.offset("msg_base_offset"))
        f.write(struct.pack(">q", base))


def test_offsets_past_2_53_keep_the_lag_checks_and_their_exact_values(spark, tmp_path):
    """A consumer offset of -2^62 (and -2^63), and a batch queue whose last unit's msgBaseOffset is 2^62: the lag
    table and its metrics are there with exact 64-bit values (pc.cast to float64 refused anything past 2^53: the lag
    checks failed, AUDIT INCOMPLETE).  A negative committed offset counts as 0, as RocketMQ's consumer stats
    (AdminBrokerProcessor.getConsumeStats) count it; a dump time of -2^63 keeps the time lag at the long's bound."""
    stores = tmp_path / "stores"
    shutil.copytree(fixture_store("broker"), stores / "offsets")
    (stores / "offsets" / "config" / "consumerOffset.json").write_text(
        '{"offsetTable":{"BrokerTopic@cg-broker":{0:-4611686018427387904,1:2,2:3,3:-9223372036854775808}}}')
    _batch_store(stores / "batch", 2**62)
    found = audit(spark, [stores], tmp_path / "out", "--checks", "lag", "--as-of", str(LONG_MIN))
    assert [f for f in found["findings"] if f["check"] == "broker.audit_failed"] == []
    lag = {(r["broker"], r["topic"], r["queue_id"]): r for r in found["tables"]["lag"]}
    assert lag[("offsets", "BrokerTopic", 0)]["lag"] == 4 and lag[("offsets", "BrokerTopic", 3)]["lag"] == 3
    assert lag[("offsets", "BrokerTopic", 1)]["lag_ms"] == LONG_MIN  # not wrapped round to a positive time
    batch = lag[("batch", "BatchTopic", 0)]
    assert (batch["max_offset"], batch["lag"]) == (2**62 + 4, 2**62 + 2)
    below = [f for f in found["findings"] if f["check"] == "lag.offset_below_min"]
    assert sorted(f["queue_offset"] for f in below) == [LONG_MIN, -2**62]
    import pyarrow.parquet as pq

    metrics = {(r["broker"], r["metric"]): r["value"] for r in pq.read_table(tmp_path / "out" / "metrics").to_pylist()
               if r["topic"] in ("BrokerTopic", "BatchTopic")}
    assert metrics[("batch", "lag_messages")] == float(2**62 + 2)  # the metrics table holds doubles, by its schema


def test_lags_summed_past_the_largest_long_are_held_there():
    """A topic's lag is the sum of its queues' lags: past 2^63 - 1 it is held at the largest long (numpy's sum
    wraps round to a negative number)."""
    import numpy as np

    from jobs.audit.checks.lag import _sums

    values = np.array([2**62, 2**62, 2**62, 5, 7], np.int64)
    assert _sums(values, np.array([0, 3])).tolist() == [LONG_MAX, 12]


def _ck(so: int, diffs: tuple, pt: int = 1, it: int = 10_000) -> P.PopCheckPoint:
    return P.PopCheckPoint(so, pt, it, 0, len(diffs), 0, "PopTopic", "cgA", 0, diffs, "broker-a")


@pytest.mark.parametrize("body, field", [
    (P.ck_body(_ck(LONG_MAX, (0, 1))), "so"),  # the second popped offset wraps round
    (P.ck_body(_ck(0, (0,), pt=LONG_MAX - 4, it=10)), "pt"),  # the revive time wraps round
    (b'{"so":9223372036854775808,"pt":1,"it":1,"n":1,"q":0,"t":"T","c":"g","d":[0]}', "so"),  # not a long
    (b'{"so":0,"pt":1,"it":1,"n":1,"q":2147483648,"t":"T","c":"g","d":[0]}', "q"),  # not an int
    (b'{"so":0,"pt":1,"it":1,"n":1,"q":0,"t":"T","c":"g","d":[2147483648]}', "d"),  # d is List<Integer>
])
def test_pop_checkpoints_the_broker_cannot_hold_are_positioned_errors(body, field):
    with pytest.raises(P.PopBodyError) as e:
        P.parse_pop_body(L.POP_CK_TAG, body, file="00000000000000000000", position=700)
    assert (e.value.kind.value, e.value.field, e.value.file, e.value.position) == \
        ("OUT_OF_RANGE", field, "00000000000000000000", 700)
    assert P.parse_pop_body(L.POP_CK_TAG, P.ck_body(_ck(LONG_MAX - 1, (0, 1)))).offsets() == [LONG_MAX - 1, LONG_MAX]


def test_a_pop_checkpoint_whose_offsets_run_past_a_long_is_a_finding_not_a_failure(spark, tmp_path):
    """so = 2^63 - 1 with d = [0, 1]: the POP checks ran into OverflowError (AUDIT INCOMPLETE); now the record is a
    pop.bad_body finding at its body, and the audit completes."""
    broker, p = writer5(tmp_path / "s")
    broker.send(p, "PopTopic", b"m", queue_id=0, tags="T")
    ck = _ck(LONG_MAX, (0, 1))
    rec = broker._revive_put(P.ck_body(ck), 0, L.POP_CK_TAG, ck.revive_time - L.POP_ACK_TIME_INTERVAL_MS,
                             ck.uniq_key())
    broker.writer.close()
    found = audit(spark, [tmp_path / "s"], tmp_path / "out", "--checks", "pop")
    assert [f for f in found["findings"] if f["check"] == "broker.audit_failed"] == []
    [f] = [f for f in found["findings"] if f["check"] == "pop.bad_body"]
    assert f["physical_offset"] == rec.physical_offset and dict(f["details"])["reason"] == "OUT_OF_RANGE"
    assert f["file_position"] == rec.file_position + L.layout_for(rec.sys_flag).body_offset


@pytest.mark.parametrize("parser, argv, option, bounds", [
    (query_parser, ["--to", "9223372036854775808"], "--to", L.JAVA_LONG),
    (query_parser, ["--from", "-9223372036854775809"], "--from", L.JAVA_LONG),
    (query_parser, ["--limit", "0"], "--limit", (1, L.JAVA_INT[1])),
    (query_parser, ["--hash-slots", "2147483648"], "--hash-slots", (1, L.JAVA_INT[1])),
    (extract_parser, ["--out", "o", "--queue", "2147483648"], "--queue", L.JAVA_INT),
    (extract_parser, ["--out", "o", "--physical-offsets", "0..9223372036854775808"], "--physical-offsets",
     L.JAVA_LONG),
    (extract_parser, ["--out", "o", "--consumers", "65537"], "--consumers", (1, 65536)),  # each one is listed
    (audit_job.build_parser, ["--out", "o", "--as-of", "99999999999999999999"], "--as-of", L.JAVA_LONG),
    (audit_job.build_parser, ["--out", "o", "--segment-size", "2g"], "--segment-size", (1, L.JAVA_INT[1])),
    (audit_job.build_parser, ["--out", "o", "--split-size", "9223372036854775808"], "--split-size",
     (1, L.JAVA_LONG[1])),
    (audit_job.build_parser, ["--out", "o", "--top", "-1"], "--top", (1, L.JAVA_INT[1])),
])
def test_every_number_option_refuses_what_it_cannot_hold(capsys, parser, argv, option, bounds):
    """A usage error (exit 2) whose line names the option and the range; before, ``query --to 2^63`` leaked a
    TypeError from the compute kernels, and the others overflowed later in Arrow, numpy or the JVM."""
    with pytest.raises(SystemExit) as e:
        cli.add_runtime_arguments(parser()).parse_args(["--store", "s", *argv])
    assert e.value.code == 2
    line = capsys.readouterr().err.strip().splitlines()[-1]
    assert f"argument {option}: " in line and f"[{bounds[0]}, {bounds[1]}]" in line, line


def test_times_in_iso_count_whole_milliseconds():
    """ISO times are counted in whole ms without a float (timestamp() * 1000 loses the last digits of a far date)."""
    from jobs.extract import parse_time

    assert parse_time("9999-12-31T23:59:59.999Z") == 253402300799999
    assert parse_time("2024-05-01T10:00:00.001+02:00") == 1714550400001
    assert parse_time(str(LONG_MIN)) == LONG_MIN and parse_time("+5") == 5
