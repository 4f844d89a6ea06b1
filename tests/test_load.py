"""Every file the broker loads at start is predicted (issue 38, items 4 and 7): one model of RocketMQ's
``MappedFileQueue.load()`` for every rolled folder (commit log, consume queues, batch consume queues, timer log) with
the rules of the RocketMQ that wrote the store (4.9.7, 5.3.3), the queue types 5.3.3 checks, the config files
``ConfigManager.load()`` reads (a file and its ``.bak`` both failing stop the broker; either alone does not),
``config/timermetrics`` and ``config/timercheck``; each failure a ``recovery.broker_will_not_start`` naming the file
and what RocketMQ requires.  And what a store's records say about its RocketMQ (5.x by its V2 records and
``__CRC32#``, not only by its file names), and a timercheck's real size.  On copies of the fixtures RocketMQ wrote."""
from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

from store_format import fs
from store_format import layout as L
from store_format.features import record_evidence, store_features
from store_format.recovery import predict_recovery
from store_format.store import Store
from store_format.write import damage as D

from .conftest import fixture_store
from .test_v5_audit import audit
from .test_v5_fixtures import store5

ZERO = "0" * 20


def _copy(name: str, dst):
    """A writable copy of a fixture store: a 5.3.3 one by its name, else a 4.9.7 one."""
    src = store5(name) if name.startswith("v5-") else fixture_store(name)
    return D.copy_store(src, dst)


def _predict(root, **given):
    return predict_recovery(Store(root, **given))


def _grow(path, extra: int = 7) -> None:
    with open(path, "ab") as f:
        f.write(b"\x01" * extra)


# --------------------------------------------------------------------------------------------------
# MappedFileQueue.load() on every rolled folder


@pytest.mark.parametrize("name, damage, file, requires", [
    ("v5-timer", lambda r: _grow(r / "consumequeue/PlainTopic/0" / ZERO),
     f"consumequeue/PlainTopic/0/{ZERO}", "is 2007 bytes, not mappedFileSizeConsumeQueue 2000"),
    ("v5-timer", lambda r: (r / "consumequeue/PlainTopic/1" / f"{2000:020d}").write_bytes(bytes(100)),
     f"consumequeue/PlainTopic/1/{2000:020d}", "is 100 bytes, not mappedFileSizeConsumeQueue 2000"),
    ("v5-timer", lambda r: shutil.copy(r / "consumequeue/PlainTopic/0" / ZERO, r / "consumequeue/PlainTopic/0/x.bak"),
     "consumequeue/PlainTopic/0/x.bak", "its name is not an offset (Long.parseLong"),
    ("v5-timer", lambda r: os.truncate(r / "timerlog" / f"{2048:020d}", 1000),
     f"timerlog/{2048:020d}", "is 1000 bytes, not mappedFileSizeTimerLog 2048: MappedFileQueue.doLoad refuses it and "
                               "TimerMessageStore.load() fails"),
    ("v5-batchcq", lambda r: _grow(r / "batchconsumequeue/BatchTopic/1" / ZERO),
     f"batchconsumequeue/BatchTopic/1/{ZERO}", "is 4607 bytes, not mapperFileSizeBatchConsumeQueue 4600"),
    ("basic", lambda r: (r / "consumequeue/TopicTest/0" / f"{2000:020d}").write_bytes(b""),
     f"consumequeue/TopicTest/0/{2000:020d}", "is 0 bytes, not mappedFileSizeConsumeQueue 2000"),
    ("basic", lambda r: (r / "consumequeue/TopicTest/0/sub").mkdir(),
     "consumequeue/TopicTest/0/sub", "is a folder, not mappedFileSizeConsumeQueue 2000"),
])
def test_every_rolled_folder_the_broker_loads_is_checked_as_it_loads_it(tmp_path, name, damage, file, requires):
    """A consume queue, timer log or batch consume queue file of the wrong length, an extra short file, a name that
    is not an offset: RocketMQ's MappedFileQueue.doLoad fails (the broker does not start) where the audit said
    PASS or ATTENTION.  4.9.7 takes every entry (an empty last file, a folder); the file sizes come from the
    files (2000, 2048 and 4600 bytes here, as the fixtures' storeConfig says)."""
    root = _copy(name, tmp_path / "s")
    damage(root)
    p = _predict(root)
    assert not p.will_start and p.start_problem_files == [file], p.start_problems
    assert requires in p.start_problems[0]


def test_5x_skips_folders_and_deletes_an_empty_last_file(tmp_path):
    """5.1.4 and later (5.3.3's doLoad): a folder in a queue's folder is skipped, and an empty file that is the last
    entry is deleted (a note), where 4.9.7 refuses both (the test above)."""
    root = _copy("v5-timer", tmp_path / "s")
    (root / "consumequeue/PlainTopic/0/sub").mkdir()
    (root / "consumequeue/PlainTopic/1" / f"{2000:020d}").write_bytes(b"")
    p = _predict(root)
    assert p.will_start, p.start_problems
    assert any(n.startswith(f"consumequeue/PlainTopic/1/{2000:020d} is 0 bytes and the last entry") and "deletes it"
               in n for n in p.notes)
    (root / "consumequeue/PlainTopic/1" / f"{4000:020d}").write_bytes(bytes(2000))  # no longer the last entry
    assert _predict(root).start_problem_files == [f"consumequeue/PlainTopic/1/{2000:020d}"]


def test_a_file_missing_between_two_others_is_no_size(tmp_path):
    """The queue files' size is their commonest length while every spacing of the names is a multiple of it: a
    queue whose middle file is missing (files at 0 and 4000 of 2000-byte files) loads; its spacing is no size."""
    from store_format.recovery import shared_file_size

    root = _copy("v5-timer", tmp_path / "s")
    (root / "consumequeue/PlainTopic/0" / f"{4000:020d}").write_bytes(bytes(2000))
    assert _predict(root).will_start
    assert shared_file_size([[(0, 80), (160, 80)], [(0, 80)]]) == 80
    assert shared_file_size([[(0, 4096), (6000000, 4096)], [(0, 4096)]]) == 6000000  # every file cut to 4096


def test_a_size_from_broker_conf_catches_a_lone_short_file(tmp_path):
    """With one file per queue the files cannot tell a short one: broker.conf's mappedFileSizeConsumeQueue can
    (the Store's given file sizes, from --config)."""
    root = _copy("v5-timer", tmp_path / "s")
    os.truncate(root / "consumequeue/rmq_sys_wheel_timer/0" / ZERO, 1000)
    for q in (root / "consumequeue").glob("*/*"):
        if q.parts[-2] != "rmq_sys_wheel_timer":
            shutil.rmtree(q)
    assert _predict(root).will_start
    p = _predict(root, file_sizes={"consumequeue": 2000})
    assert p.start_problem_files == [f"consumequeue/rmq_sys_wheel_timer/0/{ZERO}"]


def test_5x_checks_each_topics_queue_type(tmp_path):
    """ConsumeQueueStore.loadConsumeQueues (5.3.3) refuses a batchconsumequeue/ topic that topics.json does not
    give queue.type=BatchCQ, a consumequeue/ topic it gives BatchCQ, and a value CQType.valueOf refuses.  A dump
    without topics.json (the v5-batchcq fixture's) does not say: nothing is predicted."""
    root = _copy("v5-batchcq", tmp_path / "s")
    assert _predict(root).will_start

    def topics(table):
        (root / "config" / "topics.json").write_text(json.dumps({"topicConfigTable": table}))

    topics({"BatchTopic": {"topicName": "BatchTopic", "attributes": {"queue.type": "BatchCQ"}}})
    assert _predict(root).will_start
    topics({"BatchTopic": {"topicName": "BatchTopic"}})
    p = _predict(root)
    assert p.start_problem_files == ["batchconsumequeue/BatchTopic"]
    assert "should be BatchCQ, but is SimpleCQ" in p.start_problems[0]
    plain = next(t.name for t in (root / "consumequeue").iterdir())
    topics({"BatchTopic": {"attributes": {"queue.type": "BatchCQ"}}, plain: {"attributes": {"queue.type": "Batch"}}})
    assert _predict(root).start_problem_files == [f"consumequeue/{plain}"]


@pytest.mark.parametrize("kind", ["fifo", "socket", "device", "dangling", "loop"])
def test_entries_of_every_kind_are_predicted_never_opened(kind):
    """A FIFO, socket, device, dangling link or link loop in a queue folder, as timermetrics and its .bak, as
    timercheck: a prediction each (File.length() 0 is no file size; the last entry of a 5.x folder is deleted),
    never a hang or a crash; config files that cannot be read here are not judged."""
    import tempfile

    short = Path(tempfile.mkdtemp(prefix="ld", dir="/tmp"))  # a socket's path must fit AF_UNIX's 108 bytes
    root = _copy("v5-timer", short / "s")
    try:
        _predicted_entries(root, kind)
    finally:
        shutil.rmtree(short)


def _predicted_entries(root, kind):
    from .test_recovery import _make

    _make(root / "consumequeue/PlainTopic/0" / f"{2000:020d}", kind)  # the last entry: 5.3.3 deletes it
    _make(root / "consumequeue/PlainTopic/1" / ".x", kind)  # sorts first: refused
    _make(root / "config" / "timermetrics", kind)
    _make(root / "config" / "timermetrics.bak", kind)
    _make(root / "config" / "timercheck", kind)
    p = _predict(root)
    assert "consumequeue/PlainTopic/1/.x" in p.start_problem_files
    assert f"consumequeue/PlainTopic/0/{2000:020d}" not in p.start_problem_files
    assert ("config/timercheck" in p.start_problem_files) == (kind in ("fifo", "socket", "device", "loop"))
    assert "config/timermetrics" not in p.start_problem_files


# --------------------------------------------------------------------------------------------------
# The config files, timermetrics and timercheck


@pytest.mark.parametrize("main, bak, starts", [
    ("{not json", "{not json", False),  # ConfigManager.load: the file fails, loadBak fails
    ("{not json", None, True),  # no .bak: loadBak returns true, the broker starts without the file's contents
    ("{not json", "", True),  # an empty .bak: loadBak returns true
    (None, '{"timingCount": [1]', False),  # no file, a .bak that does not parse
    ('{"timingCount": null}', '{"timingCount": null}', False),  # both parse, both throw in decode (putAll(null))
    ('{"timingCount": {"T": {"count": "x"}}}', '{"dataVersion": null}', False),  # fastjson refuses, NPE
    ("{not json", '{"timingCount": {"T": {"count": -3, "timeStamp": 1}}}', True),  # the .bak loads
    ("   ", "{not json", True),  # blank text decodes to nothing: the .bak is never read
])
def test_timermetrics_loads_as_timer_metrics_load_does(tmp_path, main, bak, starts):
    """TimerMessageStore.load() is timerLog.load() && timerMetrics.load(), and TimerMetrics.load() is
    ConfigManager.load(): an unparseable timermetrics and .bak fail the broker's start (no finding at all before)."""
    root = _copy("v5-timer", tmp_path / "s")
    for name, text in (("timermetrics", main), ("timermetrics.bak", bak)):
        (root / "config" / name).unlink(missing_ok=True)
        if text is not None:
            (root / "config" / name).write_text(text)
    p = _predict(root)
    assert p.will_start == starts, p.start_problems
    if not starts:
        assert p.start_problem_files == ["config/timermetrics"]
        assert "loadBak() fails" in p.start_problems[0] and "TimerMessageStore" not in p.start_problems[0]


@pytest.mark.parametrize("name, bak", [
    ("topics.json", '{"topicConfigTable": [1]}'),  # not the map TopicConfigSerializeWrapper holds
    ("consumerOffset.json", '{"offsetTable": {"T@g": {"0": 9223372036854775808}}}'),  # not a long
    ("consumerOffset.json", '{"offsetTable": {"T@g": {2147483648: 1}}}'),  # a queue id that is not an int
    ("subscriptionGroup.json", '{"subscriptionGroupTable": {"g": {"retryQueueNums": 2147483648}}}'),  # not an int
    ("consumerFilter.json", "{"),
    ("delayOffset.json", '{"offsetTable": {"x": 1}}'),  # a delay level that is not a number
])
def test_each_config_file_the_broker_loads(tmp_path, name, bak):
    """topics.json, consumerOffset.json, subscriptionGroup.json and consumerFilter.json (BrokerController.initialize)
    and delayOffset.json (ScheduleMessageService.load): a file and its .bak that both fail to decode stop the broker
    (4.9.7 as 5.3.3); a value fastjson cannot hold, or a table of another JSON type, fails the decode as well."""
    root = _copy("broker", tmp_path / "s")
    cfg = root / "config"
    (cfg / name).write_text('{"offsetTable": {')
    (cfg / f"{name}.bak").write_text(bak)
    p = _predict(root)
    assert p.start_problem_files == [f"config/{name}"], p.start_problems
    assert f"{name}.bak does not decode" in p.start_problems[0]
    (cfg / f"{name}.bak").unlink()
    assert _predict(root).will_start


def test_lmq_offsets_are_the_consumer_offsets_with_enable_lmq(tmp_path):
    """With enableLmq the broker's consumer offsets are lmqConsumerOffset.json (LmqConsumerOffsetManager): that file's
    load is the one that counts where the dump has it."""
    root = _copy("v5-lmq", tmp_path / "s")
    (root / "config" / "consumerOffset.json").write_text("{")
    (root / "config" / "consumerOffset.json.bak").write_text("{")
    assert _predict(root).start_problem_files == ["config/consumerOffset.json"]
    (root / "config" / "lmqConsumerOffset.json").write_text('{"lmqOffsetTable": {"%LMQ%room1@g": 3}}')
    assert _predict(root).will_start  # not the file an enableLmq broker reads
    (root / "config" / "lmqConsumerOffset.json").write_text("{")
    (root / "config" / "lmqConsumerOffset.json.bak").write_text('{"lmqOffsetTable": 5}')
    assert _predict(root).start_problem_files == ["config/lmqConsumerOffset.json"]


def test_a_timercheck_the_broker_cannot_map_stops_it(tmp_path):
    """new TimerCheckpoint() opens config/timercheck read-write and maps a page (as StoreCheckpoint does): a folder
    throws, so BrokerController.initializeMessageStore() fails.  Other lengths map."""
    root = _copy("v5-timer", tmp_path / "s")
    (root / "config" / "timercheck").unlink()
    (root / "config" / "timercheck").mkdir()
    p = _predict(root)
    assert p.start_problem_files == ["config/timercheck"] and "new TimerCheckpoint() throws" in p.start_problems[0]


def test_a_5x_index_folder_entry_stops_the_broker(tmp_path):
    """IndexService.load returns false at an entry new IndexFile cannot open: 5.3.3's DefaultMessageStore.load()
    fails with it, 4.9.7 ignores it (a note)."""
    for name, starts in (("v5-timer", False), ("basic", True)):
        root = _copy(name, tmp_path / name)
        (root / "index" / "20990101000000000").mkdir()
        p = _predict(root)
        assert p.will_start == starts, p.start_problems
        assert starts or p.start_problem_files == ["index/20990101000000000"]


def test_a_timercheck_of_a_gigabyte_is_reported_at_its_size_and_read_one_page(tmp_path, monkeypatch):
    """A 1 GiB config/timercheck was reported as "4097 bytes"; its size is the file's, and only its page is read."""
    from jobs.audit.checks import timers

    root = _copy("v5-timer", tmp_path / "s")
    os.truncate(root / "config" / "timercheck", 1 << 30)  # sparse
    reads = []
    real = fs.Location.read_range

    def spy(self, offset, length):
        reads.append(length)
        return real(self, offset, length)

    monkeypatch.setattr(fs.Location, "read_range", spy)
    cp, problem = timers._timercheck(fs.resolve(root / "config" / "timercheck"))
    assert cp.file_length == problem["length"] == 1 << 30 and max(reads) <= L.TIMER_CHECKPOINT.size
    assert cp.last_read_time_ms and problem["severity"] == timers.Severity.WARNING


# --------------------------------------------------------------------------------------------------
# 5.x by content


def test_v2_records_and_crc_properties_say_5x_without_any_5x_file(tmp_path):
    """The user guide lists V2 records and __CRC32# as evidence of a 5.x store: the v5-crc fixture without its timer
    files and compaction/ folder still reads as 5.x (it read as 4.x), and a log whose first record is V2 does too."""
    root = _copy("v5-crc", tmp_path / "crc")
    for f in ("timerwheel", "config/timercheck", "config/timermetrics"):
        (root / f).unlink()
    shutil.rmtree(root / "compaction")
    f = store_features(root)
    assert (f.crc_property, f.timer_store, f.compaction) == (True, False, False) and f.generation == "5.x"
    seg = store5("v5-default") / "commitlog" / f"{262144:020d}"
    with open(seg, "rb") as s:
        s.seek(201301)  # the 150-character retry topic's V2 record (the fixture's manifest)
        size = int.from_bytes(s.read(4), "big")
        s.seek(201301)
        record = s.read(size)
    (tmp_path / "v2" / "commitlog").mkdir(parents=True)
    (tmp_path / "v2" / "commitlog" / ZERO).write_bytes(record + bytes(4096 - size % 4096))
    assert record_evidence(tmp_path / "v2" / "commitlog") == (True, False)
    assert record_evidence(fixture_store("basic") / "commitlog") == (False, False)


def test_a_5x_store_with_no_5x_file_is_audited_as_5x(spark, tmp_path):
    """The audit runs the 5.x families (POP here) for a store its records call 5.x, and predicts its loads with
    5.3.3's rules; before, the store was audited as 4.x with the POP and LMQ checks skipped."""
    root = _copy("v5-crc", tmp_path / "crc")
    for f in ("timerwheel", "config/timercheck", "config/timermetrics"):
        (root / f).unlink()
    shutil.rmtree(root / "compaction")
    (root / "index" / "20990101000000000").mkdir()  # 5.3.3's IndexService.load fails on it; 4.9.7's does not
    found = audit(spark, [root], tmp_path / "out", "--checks", "pop,recovery")
    assert "pop" in found["summary"]["checks"] and "timers" not in found["summary"]["checks"]
    [f] = [f for f in found["findings"] if f["check"] == "recovery.broker_will_not_start"]
    assert f["file"] == "index/20990101000000000"


def test_load_failures_are_findings_of_the_audit(spark, tmp_path):
    """Each failure is a recovery.broker_will_not_start finding naming the file, the broker's verdict is that it
    will not start, and the summary lists the problems in the order the broker meets them."""
    root = _copy("v5-timer", tmp_path / "s")
    _grow(root / "consumequeue/PlainTopic/0" / ZERO)
    (root / "config" / "timermetrics").write_text("{")
    (root / "config" / "timermetrics.bak").write_text("{")
    found = audit(spark, [root], tmp_path / "out", "--checks", "recovery")
    files = [f["file"] for f in found["findings"] if f["check"] == "recovery.broker_will_not_start"]
    assert files == [f"consumequeue/PlainTopic/0/{ZERO}", "config/timermetrics"]
    [broker] = found["summary"]["brokers"]
    assert broker["recovery"]["broker_will_start"] is False and broker["verdict"]["will_start"] is False
    assert found["exit"] == 1


@pytest.mark.parametrize("main", ["  \n", "null"])
def test_a_blank_main_config_loads_as_nothing_and_the_bak_is_never_read(tmp_path, main):
    """ConfigManager.load() falls back to the .bak only for a main file of length 0; one of blanks (or ``null``)
    is decoded -- fastjson gives null, decode() does nothing -- so the broker starts with an empty table, not the
    .bak's.  The readers say the same: the main file, empty; the load model: it starts."""
    from store_format.config import config_load_failure, consumer_offsets, read_config

    (tmp_path / "consumerOffset.json").write_text(main)
    (tmp_path / "consumerOffset.json.bak").write_text('{"offsetTable":{"T@g":{"0":5}}}')
    cfg = read_config(tmp_path, "consumerOffset.json")
    assert cfg.source == str(tmp_path / "consumerOffset.json") and cfg.data == {} and not cfg.errors
    assert list(consumer_offsets(cfg)) == []
    assert config_load_failure(tmp_path, "consumerOffset.json") is None
