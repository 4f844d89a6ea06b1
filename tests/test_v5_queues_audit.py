"""The audit of RocketMQ 5.x stores (issue 32): LMQ queues, batch consume queues and the whole-record CRC.

Fidelity against the 5.3.3 fixtures: each of v5-default, v5-crc, v5-lmq and v5-batchcq audits with no false error,
and what the audit reports of them (the LMQ dispatch RocketMQ itself mishandled, the batch queues' bounds, every
CRC property verified) is what their manifests say.  Damage made through store_format.write.damage, to copies of
the fixtures and of writer-built 5.x stores, is found at its position by the right check; the dispatch list that
stalls RocketMQ's reput makes a broker that will not start; LMQ groups' offsets give lag.  Recovery under
forceVerifyPropCRC is predicted as store-format-5x.md section 1.3-1.4 says RocketMQ recovers (store layer, no
Spark), and the audit reads the setting from --config."""
from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from jobs import audit
from store_format import layout as L
from store_format import propcrc
from store_format.batchcq import discover_batch_queues, read_batch_queue
from store_format.brokerconf import RecoverySettings, read_properties, recovery_settings
from store_format.commitlog import list_segments, walk_buffer
from store_format.consumequeue import discover_queues, read_queue
from store_format.fs import ReadOnlyMap
from store_format.recovery import predict_recovery, recovery_walk
from store_format.store import Store
from store_format.write import damage as D
from store_format.write.broker import ManualClock, Producer
from store_format.write.broker import Broker
from store_format.write.generate import Traffic5Config, config_5x, generate_store
from store_format.write.writer import StoreWriter, WriterConfig

from .test_audit import audit_args, by_severity, rows
from .test_v5_fixtures import manifest5, records, store5

OWN = ("v5-default", "v5-crc", "v5-lmq", "v5-batchcq")
START = 1_795_786_365_000


def _frames(root: Path) -> list:
    """(segment name, message frame) of every record, in physical order."""
    out = []
    for seg in list_segments(root / "commitlog"):
        with ReadOnlyMap(seg.path) as m:
            out += [(seg.name, f) for f in walk_buffer(m.buf, seg.name, seg.base_offset) if f.kind == "message"]
    return out


def _record_at(root: Path, damage: D.Damage):
    """The record a commitlog damage lies in: (segment, frame)."""
    seg = Path(damage.path).name
    return next((s, f) for s, f in _frames(root) if s == seg and
                f.file_position <= damage.position < f.file_position + f.size)


def _gen5(root: Path, segment: int = 1 << 20, messages: int = 500) -> Path:
    generate_store(root, Traffic5Config(messages=messages, seed=7),
                   config_5x(WriterConfig(mappedFileSizeCommitLog=segment, mappedFileSizeTimerLog=4096)))
    return root


def _broker5(root: Path) -> tuple[StoreWriter, Broker, Producer]:
    cfg = WriterConfig(storeHost="192.168.0.10:10911", mappedFileSizeCommitLog=1 << 20, timerWheelEnable=True,
                       enableLmq=True, enableMultiDispatch=True, enabledAppendPropCRC=True)
    w = StoreWriter(root, cfg, clock=ManualClock(START))
    return w, Broker(w), Producer(born_host="10.1.2.3:50000")


def _conf(path: Path, **values) -> Path:
    path.write_text("".join(f"{k}={v}\n" for k, v in values.items()), encoding="iso-8859-1")
    return path


def _checks(findings: list[dict], broker: str, severity: str | None = None) -> dict[str, int]:
    out: dict[str, int] = {}
    for f in findings:
        if f["broker"] == broker and (severity is None or f["severity"] == severity):
            out[f["check"]] = out.get(f["check"], 0) + 1
    return out


# --------------------------------------------------------------------------------------------------
# Which records carry __CRC32#: the decode's flag and the store layer's test agree, on RocketMQ's records


@pytest.mark.parametrize("name,carry", [("v5-crc", True), ("v5-default", False), ("v5-lmq", False)])
def test_the_decode_flags_exactly_the_records_that_carry_the_property(name, carry):
    from decoding import kernels as K

    for seg in list_segments(store5(name) / "commitlog"):
        with ReadOnlyMap(seg.path) as m:
            frames = [f for f in walk_buffer(m.buf, seg.name, seg.base_offset) if f.kind == "message"]
            pos, size = [f.file_position for f in frames], [f.size for f in frames]
            flag = K.decode_buffer(m.buf, pos, size, columns=("crc_property",)).column("crc_property").to_pylist()
            assert flag == propcrc.carries_crc(m.buf, pos, size).tolist() == [carry] * len(frames)


# --------------------------------------------------------------------------------------------------
# The 5.3.3 fixtures, audited together


@pytest.fixture(scope="module")
def fixtures5_audit(spark, tmp_path_factory):
    out = tmp_path_factory.mktemp("v5audit") / "out"
    result = audit.run(spark, audit_args([f"{n}={store5(n)}" for n in OWN], out))
    return result, out, rows(out, "findings")


def test_the_5x_fixtures_audit_with_no_false_error(fixtures5_audit):
    result, out, findings = fixtures5_audit
    assert by_severity(findings, "error") == [] and result.exit_code == 0
    # the only warnings: the records whose dispatch list ends in a non-LMQ name, for which RocketMQ wrote no LMQ
    # unit (store-format-5x.md section 5.1); RocketMQ's view has no unit of them in any %LMQ% queue
    warnings = by_severity(findings, "warning")
    assert {f["check"] for f in warnings} == {"lmq.dispatch_skipped"}
    mishandled = [r.physical_offset for r in records("v5-lmq")
                  if r.properties.get(L.PROPERTY_INNER_MULTI_DISPATCH, "").endswith(",NotLmqTopic")]
    assert sorted(f["physical_offset"] for f in warnings if f["broker"] == "v5-lmq") == mishandled
    assert len(mishandled) == 10 and all(f["details"]["reason"] == "count_mismatch" for f in warnings)
    in_lmq = {e[1] for c in manifest5("v5-lmq")["consumeQueues"] if c["topic"].startswith(L.LMQ_PREFIX)
              for e in c["entries_[queueOffset,commitLogOffset,size,tagsCode,batchNum]"]}
    assert not in_lmq & set(mishandled)
    # and from the first of them on, %LMQ%room3's units sit below the offsets its records carry
    [info] = [f for f in findings if f["check"] == "lmq.offsets_diverged"]
    assert (info["broker"], info["topic"], info["queue_offset"]) == ("v5-lmq", "%LMQ%room3", 1)


def test_the_queues_table_has_every_queue_rocketmq_reads_back(fixtures5_audit):
    """Consume queues, %LMQ% queues and batch consume queues, with the bounds RocketMQ's own view gives (a batch
    queue's offsets count messages; its entries are its 46-byte units)."""
    _, out, _ = fixtures5_audit
    queues = {(r["broker"], r["topic"], r["queue_id"]): r for r in rows(out, "tables/queues")}
    for name in ("v5-lmq", "v5-batchcq"):
        for c in manifest5(name)["consumeQueues"]:
            if not c["dirExists"]:
                continue
            q = queues[(name, c["topic"], c["queueId"])]
            assert (q["min_offset"], q["max_offset"]) == (c["minOffset"], c["maxOffset"]), c["topic"]
            units = c.get("rawUnits") or c["entries_[queueOffset,commitLogOffset,size,tagsCode,batchNum]"]
            assert q["entries"] == len(units)
    assert ("v5-batchcq", "BatchTopic", 0) in queues


def test_every_crc_property_of_v5_crc_is_verified(fixtures5_audit):
    _, out, _ = fixtures5_audit
    metrics = {(r["broker"], r["metric"]): r["value"] for r in rows(out, "metrics") if r["scope"] == "broker"}
    n = len(manifest5("v5-crc")["messages"])
    assert metrics[("v5-crc", "property_crc_records")] == metrics[("v5-crc", "property_crc_verified")] == n
    assert ("v5-default", "property_crc_records") not in metrics  # no record carries it


def test_rocketmq_consumequeue_reads_lmq_queues_like_any_other(spark):
    """The data source's LMQ queue rows are the units RocketMQ reads back from them."""
    df = spark.read.format("rocketmq-consumequeue").load(str(store5("v5-lmq"))).where("kind = 'entry'")
    got: dict[tuple, list] = {}
    for r in df.orderBy("topic", "queue_id", "queue_offset").collect():
        got.setdefault((r.topic, r.queue_id), []).append([r.queue_offset, r.physical_offset, r.size, r.tags_code])
    for c in manifest5("v5-lmq")["consumeQueues"]:
        entries = [e[:4] for e in c["entries_[queueOffset,commitLogOffset,size,tagsCode,batchNum]"]]
        assert got.get((c["topic"], c["queueId"]), []) == entries, c["topic"]
    assert {t for t, _ in got if t.startswith(L.LMQ_PREFIX)} == {"%LMQ%room1", "%LMQ%room2", "%LMQ%room3"}


# --------------------------------------------------------------------------------------------------
# Damage: to copies of the fixtures and of a writer-built 5.x store, in one audit


@pytest.fixture(scope="module")
def damaged5(spark, tmp_path_factory):
    base = tmp_path_factory.mktemp("v5damage")
    stores = base / "stores"
    gen = _gen5(base / "gen5")
    lmq_queue = max((q for q, _ in discover_queues(gen / "consumequeue") if q.startswith(L.LMQ_PREFIX)),
                    key=lambda q: len(list(read_queue(discover_queues(gen / "consumequeue")[(q, 0)]))))
    batch_queue = max(discover_batch_queues(gen), key=lambda k: len(list(read_batch_queue(
        discover_batch_queues(gen)[k]))))
    made = {
        "gen5": None,
        "fx-lmq-missing": D.lmq_unit_missing(store5("v5-lmq"), stores / "fx-lmq-missing", "%LMQ%room2", 7),
        "fx-lmq-dup": D.lmq_unit_duplicated(store5("v5-lmq"), stores / "fx-lmq-dup", "%LMQ%room2", 7),
        "fx-crc-flip": D.flip_bit_under_crc(store5("v5-crc"), stores / "fx-crc-flip", field="store_timestamp", bit=5),
        "fx-crc-digit": D.crc_property_non_digit(store5("v5-crc"), stores / "fx-crc-digit", digit=3),
        "fx-batch-size": D.batch_unit_field(store5("v5-batchcq"), stores / "fx-batch-size", "BatchTopic", 0, 4),
        "fx-batch-missing": D.batch_unit_missing(store5("v5-batchcq"), stores / "fx-batch-missing", "BatchTopic", 1,
                                                 3),
        "gen-lmq-missing": D.lmq_unit_missing(gen, stores / "gen-lmq-missing", lmq_queue),
        "gen-lmq-dup": D.lmq_unit_duplicated(gen, stores / "gen-lmq-dup", lmq_queue),
        "gen-crc-flip": D.flip_bit_under_crc(gen, stores / "gen-crc-flip"),
        "gen-crc-digit": D.crc_property_non_digit(gen, stores / "gen-crc-digit", digit=9, char="#"),
        "gen-batch-base": D.batch_unit_field(gen, stores / "gen-batch-base", *batch_queue, field="msg_base_offset",
                                             value=1000),
    }
    shutil.copytree(gen, stores / "gen5")
    out = base / "out"
    audit.run(spark, audit_args([stores], out))
    yield stores, made, rows(out, "findings")
    shutil.rmtree(base, ignore_errors=True)  # ~1 GB of damaged copies: not kept until the session ends


def _errors(findings, broker):
    return [f for f in findings if f["broker"] == broker and f["severity"] == "error"]


def test_a_writer_built_5x_store_audits_with_no_error(damaged5):
    """Reader against our own writer (consistency, not fidelity): every 5.x flow of generate --rocketmq 5."""
    _, _, findings = damaged5
    assert _errors(findings, "gen5") == []
    assert set(_checks(findings, "gen5", "warning")) <= {"lmq.dispatch_skipped"}


@pytest.mark.parametrize("broker,queue,offset", [("fx-lmq-missing", "%LMQ%room2", 7), ("gen-lmq-missing", None, None)])
def test_an_lmq_unit_missing_is_found_where_the_dispatch_put_it(damaged5, broker, queue, offset):
    stores, made, findings = damaged5
    d = made[broker]
    removed = int(d.detail.split("(record at ")[1].split(")")[0])
    queue = queue or d.path.split("/")[1]
    errors = _errors(findings, broker)
    [missing] = [f for f in errors if f["check"] == "lmq.missing_unit"]
    assert (missing["topic"], missing["physical_offset"]) == (queue, removed)
    assert offset is None or missing["queue_offset"] == offset
    # the units after it moved down one: one run of them, from the removed unit's place on
    shifts = [f for f in errors if f["check"] == "lmq.offset_shift"]
    assert {f["check"] for f in errors} <= {"lmq.missing_unit", "lmq.offset_shift"}
    assert all(int(f["details"]["delta"]) == -1 and f["queue_offset"] == missing["queue_offset"] for f in shifts)


@pytest.mark.parametrize("broker", ["fx-lmq-dup", "gen-lmq-dup"])
def test_an_lmq_unit_duplicated_is_found_at_the_copy(damaged5, broker):
    stores, made, findings = damaged5
    d = made[broker]
    twice = int(d.detail.split("(record at ")[1].split(")")[0])
    errors = _errors(findings, broker)
    [dup] = [f for f in errors if f["check"] == "lmq.duplicate_unit"]
    assert dup["physical_offset"] == twice and dup["file_position"] == d.position  # the second of the two
    assert {f["check"] for f in errors} <= {"lmq.duplicate_unit", "lmq.offset_shift"}
    assert all(int(f["details"]["delta"]) == 1 for f in errors if f["check"] == "lmq.offset_shift")


@pytest.mark.parametrize("broker,check_id,severity", [
    ("fx-crc-flip", "integrity.bad_property_crc", "error"), ("gen-crc-flip", "integrity.bad_property_crc", "error"),
    ("fx-crc-digit", "integrity.malformed_property_crc", "warning"),
    ("gen-crc-digit", "integrity.malformed_property_crc", "warning")])
def test_crc_damage_is_found_at_its_record(damaged5, broker, check_id, severity):
    stores, made, findings = damaged5
    seg, frame = _record_at(stores / broker, made[broker])
    mine = [f for f in findings if f["broker"] == broker and f["severity"] in ("error", "warning")
            and f["check"] != "lmq.dispatch_skipped"]  # a writer-built store's LMQ sends RocketMQ mishandles
    assert [(f["check"], f["severity"], f["file"], f["file_position"], f["physical_offset"]) for f in mine] == \
        [(check_id, severity, seg, frame.file_position, frame.physical_offset)]
    with ReadOnlyMap(stores / broker / "commitlog" / seg) as m:
        c = propcrc.check_record_crc(m.buf, frame.file_position, frame.size)
    if severity == "error":
        assert mine[0]["details"]["computed_crc"] == str(c.computed) != mine[0]["details"]["stored_crc"]
    else:
        assert mine[0]["details"]["stored_text"] == c.stored_text and not c.stored_text.isdigit()


def test_batch_unit_damage_is_found_at_the_unit(damaged5):
    stores, made, findings = damaged5
    d = made["fx-batch-size"]  # batchSize 7 -> 8 of unit 4: the unit says so, and the next one no longer follows
    errors = _errors(findings, "fx-batch-size")
    [wrong] = [f for f in errors if f["check"] == "batchcq.unit_mismatch"]
    assert wrong["file_position"] == d.position - L.BATCH_CQ_UNIT.offset("batch_size")
    assert wrong["details"].items() >= {"field": "batch_size", "unit_value": "8", "record_value": "7"}.items()
    [gap] = [f for f in errors if f["check"] == "batchcq.offset_gap"]
    assert gap["file_position"] == wrong["file_position"] + 46 and len(errors) == 2
    # a unit removed: its record's messages have no unit, and the queue's offsets skip them
    errors = _errors(findings, "fx-batch-missing")
    [missing] = [f for f in errors if f["check"] == "batchcq.missing_unit"]
    assert (missing["topic"], missing["queue_id"], missing["physical_offset"]) == ("BatchTopic", 1, 5878)
    assert (missing["queue_offset"], missing["details"]["last_queue_offset"]) == (11, "15")
    [gap] = [f for f in errors if f["check"] == "batchcq.offset_gap"]
    assert gap["file_position"] == made["fx-batch-missing"].position and len(errors) == 2
    # a base offset the dispatch never writes, in a writer-built store
    d = made["gen-batch-base"]
    [wrong] = [f for f in _errors(findings, "gen-batch-base") if f["check"] == "batchcq.unit_mismatch"]
    assert wrong["details"]["field"] == "msg_base_offset" and wrong["details"]["unit_value"] == "1000"
    assert wrong["file"] == Path(d.path).name
    assert wrong["file_position"] == d.position - L.BATCH_CQ_UNIT.offset("msg_base_offset")


# --------------------------------------------------------------------------------------------------
# The dispatch list that stalls the reput, and LMQ lag


def _stalling_store(root: Path) -> tuple[int, int]:
    """Five LMQ sends, one whose list names a non-LMQ queue before the last, then six more records: (the stalled
    record's physical offset, the records after it)."""
    w, b, p = _broker5(root)
    for i in range(5):
        b.send(p, "LmqParent", b"a%d" % i, lmq="%LMQ%a", queue_id=0, keys=f"k{i}")
    bad = b.send(p, "LmqParent", b"b", lmq=["%LMQ%a", "NotLmqTopic", "%LMQ%b"], queue_id=0)
    for i in range(3):
        b.send(p, "Plain", b"c%d" % i, queue_id=1, keys=f"after{i}")
        b.send(p, "LmqParent", b"d%d" % i, lmq="%LMQ%a", queue_id=0)
    w.close()
    return bad.record.physical_offset, 6


@pytest.fixture(scope="module")
def stalled(spark, tmp_path_factory):
    base = tmp_path_factory.mktemp("stall")
    at, after = _stalling_store(base / "stores" / "stalled")
    shutil.copytree(base / "stores" / "stalled", base / "stores" / "no-abort")
    (base / "stores" / "no-abort" / "abort").unlink()  # someone removed it: a normal start
    out = base / "out"
    result = audit.run(spark, audit_args([base / "stores"], out))
    yield at, after, result, rows(out, "findings")
    shutil.rmtree(base, ignore_errors=True)  # ~450 MB: not kept until the session ends


def test_a_stalled_dispatch_is_predicted_and_the_broker_will_not_start(stalled):
    at, after, result, findings = stalled
    brokers = {b["name"]: b for b in result.summary_data["brokers"]}
    assert brokers["stalled"]["recovery"]["broker_will_start"] is False
    assert "Long.parseLong" in brokers["stalled"]["recovery"]["start_problems"][0]
    assert brokers["no-abort"]["recovery"]["broker_will_start"] is True
    for broker in ("stalled", "no-abort"):
        [s] = [f for f in findings if f["broker"] == broker and f["check"] == "lmq.dispatch_stalled"]
        assert s["physical_offset"] == at and s["details"]["records_after"] == str(after)
        # no "missing unit" (nor key) for the records the stall left undispatched: they are pending
        errors = _checks(findings, broker, "error")
        assert not {"consumequeue.missing_entry", "lmq.missing_unit"} & set(errors)
        # only the stalled record's own keys are missing for good, and only on a normal start: its dispatch threw
        # before the index was built, and the 5.3.3 reput starts at the commitlog's end
        assert {f["physical_offset"] for f in findings if f["broker"] == broker and f["check"] == "index.key_missing"} \
            <= ({at} if broker == "no-abort" else set())
        pending = [f for f in findings if f["broker"] == broker and f["check"] == "consumequeue.not_yet_dispatched"]
        assert sum(int(f["details"]["count"]) for f in pending) == after
    assert _checks(findings, "stalled", "error") == {"lmq.dispatch_stalled": 1, "recovery.broker_will_not_start": 1}
    assert set(_checks(findings, "no-abort", "error")) == {"lmq.dispatch_stalled", "index.key_missing"}
    [no_abort] = [f for f in findings if f["broker"] == "no-abort" and f["check"] == "lmq.dispatch_stalled"]
    assert "never dispatched" in no_abort["message"]


def test_lmq_groups_have_lag(spark, tmp_path):
    w, b, p = _broker5(tmp_path / "lag")
    for i in range(8):
        b.send(p, "LmqParent", b"a%d" % i, lmq=["%LMQ%a", "%LMQ%b"] if i % 2 else "%LMQ%a", queue_id=0)
    w.commit_offset("%LMQ%g1", "%LMQ%a", 0, 5)
    w.commit_offset("%LMQ%g1", "%LMQ%b", 0, 4)
    w.commit_offset("cg", "LmqParent", 0, 6)
    w.close()
    assert not (tmp_path / "lag" / "config" / "consumerOffset.json").exists()  # LmqConsumerOffsetManager's file
    out = tmp_path / "out"
    audit.run(spark, audit_args([tmp_path / "lag"], out))
    lag = {(r["group"], r["topic"]): r for r in rows(out, "tables/lag")}
    assert {k: (r["offset"], r["max_offset"], r["lag"]) for k, r in lag.items()} == {
        ("%LMQ%g1", "%LMQ%a"): (5, 8, 3), ("%LMQ%g1", "%LMQ%b"): (4, 4, 0), ("cg", "LmqParent"): (6, 8, 2)}
    assert lag[("%LMQ%g1", "%LMQ%a")]["first_unconsumed_store_time"] is not None
    behind = {f["topic"]: f for f in rows(out, "findings") if f["check"] == "lag.behind"}
    assert behind["%LMQ%a"]["file"] == "config/lmqConsumerOffset.json" and set(behind) == {"%LMQ%a", "LmqParent"}


# --------------------------------------------------------------------------------------------------
# Recovery under forceVerifyPropCRC (store-format-5x.md sections 1.3-1.4): the store layer, no Spark


def test_broker_conf_crc_switches_read_as_properties2object_does(tmp_path):
    assert recovery_settings({}) == RecoverySettings()  # both off by default, as in 5.3.3
    s = recovery_settings(read_properties(_conf(tmp_path / "b.conf", forceVerifyPropCRC="TRUE",
                                                enabledAppendPropCRC="true ")))
    assert s.force_verify_prop_crc and not s.enabled_append_prop_crc  # Boolean.parseBoolean: no trim


def test_off_a_bad_property_crc_does_not_cut_on_it_cuts_at_that_record(tmp_path):
    d = D.flip_bit_under_crc(store5("v5-crc"), tmp_path / "s", field="born_timestamp")
    _, frame = _record_at(tmp_path / "s", d)
    off = predict_recovery(Store(tmp_path / "s"))
    on = predict_recovery(Store(tmp_path / "s"), settings=RecoverySettings(force_verify_prop_crc=True))
    assert off.max_physical_offset == manifest5("v5-crc")["commitLogMaxOffset"] and off.stop_kind == "END_OF_DATA"
    assert (on.max_physical_offset, on.stop_kind) == (frame.physical_offset, "BAD_PROPERTY_CRC")
    assert on.dropped_messages == [(frame.physical_offset, frame.size)] or not on.lost_enumerated
    # the forced check needs checkCRCOnRecover: without it nothing is verified
    assert predict_recovery(Store(tmp_path / "s"), check_crc=False,
                            settings=RecoverySettings(force_verify_prop_crc=True)).stop_kind == "END_OF_DATA"


def test_on_a_store_written_without_the_property_is_cut_at_its_first_record():
    """5.3.3's normal recovery starts at the last segment whose base is <= the queues' max physical offset (here the
    second of two, store-format.md section 10.4), so the forced check cuts at that segment's first record; the
    first segment is never walked."""
    on = predict_recovery(Store(store5("v5-default")), settings=RecoverySettings(force_verify_prop_crc=True))
    second = f"{262144:020d}"
    assert (on.max_physical_offset, on.stop_kind, on.start_segment) == (262144, "NO_PROPERTY_CRC", second)
    assert any("enabledAppendPropCRC is off" in n for n in on.notes)
    both = predict_recovery(Store(store5("v5-crc")), settings=RecoverySettings(True, True))
    assert both.stop_kind == "END_OF_DATA" and not any("enabledAppendPropCRC" in n for n in both.notes)


def _reseal(root: Path, seg: str, frame) -> None:
    """The record's __CRC32# recomputed over what it holds now (its bytes as the broker would have sealed them)."""
    path = root / "commitlog" / seg
    raw = bytearray(path.read_bytes()[frame.file_position:frame.file_position + frame.size])
    propcrc.patch_crc(raw)
    with open(path, "r+b") as f:
        f.seek(frame.file_position)
        f.write(raw)


def test_on_the_body_crc_is_not_checked(tmp_path):
    """A record whose BODYCRC is wrong but whose __CRC32# matches: the broker's forced check keeps it."""
    target = records("v5-crc")[-3]
    d = D.bad_crc(store5("v5-crc"), tmp_path / "s", physical_offset=target.physical_offset)
    seg, frame = next((s, f) for s, f in _frames(store5("v5-crc")) if f.physical_offset == target.physical_offset)
    _reseal(tmp_path / "s", seg, frame)
    assert Path(d.path).name == seg
    store = Store(tmp_path / "s")
    off = predict_recovery(store)
    on = predict_recovery(store, settings=RecoverySettings(force_verify_prop_crc=True))
    assert (off.max_physical_offset, off.stop_kind) == (target.physical_offset, "BAD_CRC")
    assert on.stop_kind == "END_OF_DATA" and on.max_physical_offset == manifest5("v5-crc")["commitLogMaxOffset"]
    walk = recovery_walk(store.segments[-1], force_verify_prop_crc=True)
    assert walk.stop_kind == "END_OF_DATA"


def test_on_only_the_segments_the_normal_recovery_walks_are_checked(tmp_path):
    """Damage in a segment older than the one holding the queues' max physical offset is never seen by the broker:
    5.3.3's normal recovery starts at the last segment whose base is <= it (store-format.md 10.4, store-format-5x.md
    1.4), not at the third-last as 4.9.7's does."""
    gen = _gen5(tmp_path / "gen", segment=64 << 10, messages=600)
    segs = list_segments(gen / "commitlog")
    assert len(segs) >= 5
    frames = _frames(gen)
    old = next(f for s, f in frames if s == segs[-2].name)  # walked by 4.9.7's rule, not by 5.3.3's
    new = [f for s, f in frames if s == segs[-1].name][1]
    force = RecoverySettings(force_verify_prop_crc=True, enabled_append_prop_crc=True)
    clean = predict_recovery(Store(gen), settings=force)
    assert clean.start_segment == segs[-1].name
    D.flip_bit_under_crc(gen, tmp_path / "old", physical_offset=old.physical_offset)
    D.flip_bit_under_crc(gen, tmp_path / "new", physical_offset=new.physical_offset)
    assert predict_recovery(Store(tmp_path / "old"), settings=force).max_physical_offset == \
        clean.max_physical_offset
    cut = predict_recovery(Store(tmp_path / "new"), settings=force)
    assert (cut.max_physical_offset, cut.stop_kind) == (new.physical_offset, "BAD_PROPERTY_CRC")


def test_the_audit_reads_force_verify_prop_crc_from_its_config(spark, tmp_path):
    """The same flipped record: recovery.truncation at it with the setting, none without; and the audit's survey
    finds a record the forced check refuses, or keeps, as the store layer's walk does."""
    d = D.flip_bit_under_crc(store5("v5-crc"), tmp_path / "stores" / "flip", field="born_timestamp")
    _, frame = _record_at(tmp_path / "stores" / "flip", d)
    target = records("v5-crc")[-3]
    D.bad_crc(store5("v5-crc"), tmp_path / "stores" / "resealed", physical_offset=target.physical_offset)
    seg, tframe = next((s, f) for s, f in _frames(store5("v5-crc")) if f.physical_offset == target.physical_offset)
    _reseal(tmp_path / "stores" / "resealed", seg, tframe)
    conf = _conf(tmp_path / "broker.conf", forceVerifyPropCRC="true", enabledAppendPropCRC="true")
    cuts = {}
    for name, extra in (("off", {}), ("on", {"config": conf})):
        out = tmp_path / name
        result = audit.run(spark, audit_args([tmp_path / "stores"], out, **extra))
        cuts[name] = {b["name"]: (b["recovery"]["predicted_max_physical_offset"], b["recovery"]["stop_kind"])
                      for b in result.summary_data["brokers"]}
        trunc = {f["broker"]: f for f in rows(out, "findings") if f["check"] == "recovery.truncation"}
        cuts[name + "-findings"] = {b: f["physical_offset"] for b, f in trunc.items()}
    end = manifest5("v5-crc")["commitLogMaxOffset"]
    assert cuts["off"] == {"flip": (end, "END_OF_DATA"), "resealed": (target.physical_offset, "BAD_CRC")}
    assert cuts["on"] == {"flip": (frame.physical_offset, "BAD_PROPERTY_CRC"), "resealed": (end, "END_OF_DATA")}
    assert cuts["on-findings"] == {"flip": frame.physical_offset}
    assert cuts["off-findings"] == {"resealed": target.physical_offset}


# --------------------------------------------------------------------------------------------------
# Hostile 5.x files: findings at their place, never a crash


def test_hostile_batch_queues_lmq_queues_and_offsets_are_findings(spark, tmp_path):
    import random

    rng = random.Random(32)
    stores = tmp_path / "stores"
    bcq = "batchconsumequeue/BatchTopic"
    D.copy_store(store5("v5-batchcq"), stores / "bcq-garbage")
    f = stores / "bcq-garbage" / bcq / "0" / ("0" * 20)
    f.write_bytes(bytes(rng.randrange(256) for _ in range(f.stat().st_size)))
    D.copy_store(store5("v5-batchcq"), stores / "bcq-files")
    with open(stores / "bcq-files" / bcq / "1" / ("0" * 20), "ab") as g:
        g.write(b"\x01" * 7)  # a partial unit: the file is no longer the queue's size
    (stores / "bcq-files" / bcq / "0" / "junk").write_bytes(b"x")
    (stores / "bcq-files" / bcq / "x").mkdir()
    (stores / "bcq-files" / bcq / "x" / ("0" * 20)).write_bytes(bytes(46))
    D.copy_store(store5("v5-lmq"), stores / "lmq-garbage")
    q = stores / "lmq-garbage" / "consumequeue" / "%LMQ%room1" / "0" / ("0" * 20)
    q.write_bytes(bytes(rng.randrange(256) for _ in range(q.stat().st_size)))
    (stores / "lmq-garbage" / "config").mkdir(exist_ok=True)
    (stores / "lmq-garbage" / "config" / "lmqConsumerOffset.json").write_text('{"lmqOffsetTable": {')
    w, b, p = _broker5(stores / "lmq-lists")
    b.send(p, "LmqParent", b"a", lmq="%LMQ%a", queue_id=0)
    b.send(p, "LmqParent", b"b", lmq=" , ", queue_id=0)  # names there, all blank: no dispatch list
    b.send(p, "LmqParent", b"c", lmq="%LMQ%a,,%LMQ%b", queue_id=0)  # an empty name before the last: a stall
    w.close()
    out = tmp_path / "out"
    result = audit.run(spark, audit_args([stores], out))
    findings = rows(out, "findings")
    assert not [f for f in findings if f["check"] == "broker.audit_failed"], result.summary
    assert {"batchcq.corrupt_unit", "batchcq.missing_unit"} <= set(_checks(findings, "bcq-garbage"))
    files = [f for f in findings if f["broker"] == "bcq-files" and f["check"] == "batchcq.file_problem"]
    assert {f["file"] for f in files} >= {"junk", "0" * 20}
    assert any(f["check"] == "batchcq.corrupt_unit" and f["broker"] == "bcq-files" for f in findings)
    assert "metadata.config_unreadable" in _checks(findings, "lmq-garbage")
    assert {"lmq.missing_unit"} <= set(_checks(findings, "lmq-garbage", "error"))
    [s] = [f for f in findings if f["broker"] == "lmq-lists" and f["check"] == "lmq.dispatch_stalled"]
    assert s["details"]["names"] == "%LMQ%a,,%LMQ%b"


def test_batch_queues_have_lag_in_messages(spark, tmp_path):
    """A batch queue's offsets count messages: a group's lag on it is its last unit's msgBaseOffset + batchSize minus
    the group's offset, and its messages without units are reported by their offsets."""
    from store_format.write.broker import BatchItem

    cfg = WriterConfig(storeHost="192.168.0.10:10911", mappedFileSizeCommitLog=1 << 20, timerWheelEnable=True,
                       enabledAppendPropCRC=True)
    w = StoreWriter(tmp_path / "batch", cfg, clock=ManualClock(START))
    b, p = Broker(w), Producer(born_host="10.1.2.3:50000")
    w.register_topic("BatchTopic", 1, attributes={L.TOPIC_ATTRIBUTE_QUEUE_TYPE: L.QUEUE_TYPE_BATCH})
    for n in (3, 1, 4):
        b.send_inner_batch(p, "BatchTopic", [BatchItem(b"x%d" % i) for i in range(n)], queue_id=0)
    b.send(p, "BatchTopic", b"single", queue_id=0)
    w.commit_offset("cg", "BatchTopic", 0, 2)
    w.close()
    out = tmp_path / "out"
    audit.run(spark, audit_args([tmp_path / "batch"], out))
    [lag] = [r for r in rows(out, "tables/lag") if r["topic"] == "BatchTopic"]
    assert (lag["min_offset"], lag["max_offset"], lag["lag"]) == (0, 9, 7)
    assert _errors(rows(out, "findings"), "batch") == []


def test_dump_s_recovery_walk_follows_force_verify_prop_crc(tmp_path, capsys):
    """``store_format dump --what commitlog --config`` with forceVerifyPropCRC: the kept walk ends where the broker's
    forced check cuts the log (the records before it are listed, the stop names why, nothing after it); without it,
    every record is kept."""
    import json

    from store_format.__main__ import main

    d = D.flip_bit_under_crc(store5("v5-crc"), tmp_path / "s", field="born_timestamp")
    seg, frame = _record_at(tmp_path / "s", d)
    conf = _conf(tmp_path / "b.conf", forceVerifyPropCRC="true")

    def dump(*extra):
        code = main(["dump", str(tmp_path / "s"), "--what", "commitlog", "--strict", *extra])
        return code, [json.loads(line) for line in capsys.readouterr().out.splitlines()]

    code, plain = dump()
    assert code == 0 and sum(r["kind"] == "message" for r in plain) == len(manifest5("v5-crc")["messages"])
    code, forced = dump("--config", str(conf))
    stops = [r for r in forced if r["kind"] == "stop" and r["stop_kind"] != "END_OF_DATA"]
    assert code == 1 and [(r["segment"], r["file_position"], r["stop_kind"]) for r in stops] == \
        [(seg, frame.file_position, "BAD_PROPERTY_CRC")]
    assert [r for r in forced if r["kind"] == "message"] == \
        [r for r in plain if r["kind"] == "message" and r["physical_offset"] < frame.physical_offset]
    assert forced[-1]["physical_offset"] == frame.physical_offset  # the cut: nothing after it
