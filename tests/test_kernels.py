"""Two backends, one truth: the compiled kernels (decoding.kernels over decoding.compiled) against the scalar decoder
(store_format.codec.decode_record + Message's derived properties), on the RocketMQ-written fixtures and on
hypothesis-generated records, well-formed and malformed."""
from __future__ import annotations

import os
import struct
import zlib

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from store_format import layout as L
from store_format.codec import decode_record, encode_record, malformed_texts
from store_format.compression import compress
from store_format.errors import ErrorKind, RecordError, StoreFormatError
from store_format.ids import create_uniq_key, parse_uniq_key
from store_format.message import DERIVED_FIELDS, STORED_FIELDS, Message, body_crc32
from store_format.propcrc import carries_crc
from decoding import kernels as K

from .conftest import fixture_manifest, fixture_store
from .support.strategies import damaged, property_keys, records

DATETIME_MIN_MS, DATETIME_MAX_MS = -62132918400000, 253402300799999  # 0001-02-01 .. 9999-12-31 (UTC)


# ---------------------------------------------------------------------------------------------------------
# The oracle: what the scalar decoder says about one frame


def _int32_or_none(text):
    if text is None:
        return None
    try:
        v = int(text)
    except ValueError:
        return None
    return v if -2**31 <= v < 2**31 else None


def scalar_row(frame: bytes | None, max_decompressed: int = 1 << 20) -> dict:
    """Every kernel column for one frame, computed with store_format's scalar code only."""
    row = dict.fromkeys(K.ALL_COLUMNS)
    if frame is None:
        return row
    try:
        msg = decode_record(frame)
    except RecordError as e:
        row["error"], row["error_field"] = e.kind.value, e.field
        return row
    for name in STORED_FIELDS + DERIVED_FIELDS:
        row[name] = getattr(msg, name)
    row["properties"] = dict(msg.properties)
    props = msg.properties
    row["delay_level"] = _int32_or_none(props.get(L.PROPERTY_DELAY_TIME_LEVEL))
    row["real_topic"] = props.get(L.PROPERTY_REAL_TOPIC)
    row["real_queue_id"] = _int32_or_none(props.get(L.PROPERTY_REAL_QUEUE_ID))
    row["retry_topic"] = props.get(L.PROPERTY_RETRY_TOPIC)
    row["origin_message_id"] = props.get(L.PROPERTY_ORIGIN_MESSAGE_ID)
    row["size_ok"] = len(frame) == msg.store_size
    if msg.uniq_key is not None:
        try:
            uk = parse_uniq_key(msg.uniq_key)
        except StoreFormatError:
            pass
        else:
            row["producer_ip"], row["producer_pid"] = uk.client_ip_str, uk.pid
            if DATETIME_MIN_MS <= msg.born_timestamp <= DATETIME_MAX_MS:
                row["producer_time"] = uk.timestamp(msg.born_timestamp)
    try:
        row["decompressed_body"] = msg.decompressed_body(max_decompressed)
    except StoreFormatError as e:
        row["decompress_error"] = e.kind.value
    fields = {"topic" if f == "topic" else "properties" for f, _, _ in malformed_texts(frame)}
    row["invalid_utf8"] = ",".join(f for f in ("topic", "properties") if f in fields) or None
    row["crc_property"] = bool(carries_crc(frame, [0], [msg.store_size])[0])
    return row


def kernel_rows(frames: list[bytes | None], typ=pa.binary(), **options) -> list[dict]:
    columns = K.DEFAULT_COLUMNS + K.TEXT_CHECK_COLUMNS
    batch = K.decode_binary(pa.array(frames, typ), columns=columns, decompress=True, max_decompressed=1 << 20,
                            **options)
    assert batch.schema == K.message_schema(columns, decompress=True)
    rows = batch.to_pylist()
    for r in rows:
        if r["properties"] is not None:
            r["properties"] = dict(r["properties"])
    return rows


def assert_parity(frames: list[bytes | None], **options):
    got = kernel_rows(frames, **options)
    assert len(got) == len(frames)
    for i, (frame, row) in enumerate(zip(frames, got)):
        want = scalar_row(frame)
        diff = {k: (want[k], row[k]) for k in K.ALL_COLUMNS if want[k] != row[k]}
        assert not diff, f"row {i}: scalar vs kernel differ on {diff}"
    return got


# ---------------------------------------------------------------------------------------------------------
# Fixtures written by RocketMQ 4.9.7


def fixture_frames(name: str) -> tuple[list[bytes], list[dict]]:
    manifest = fixture_manifest(name)
    seg_size = manifest["storeConfig"]["mappedFileSizeCommitLog"]
    segments = {}
    frames = []
    for m in manifest["messages"]:
        base = m["commitLogOffset"] - m["commitLogOffset"] % seg_size
        if base not in segments:
            path = fixture_store(name) / "commitlog" / f"{base:020d}"
            segments[base] = path.read_bytes()
        pos = m["commitLogOffset"] - base
        frames.append(segments[base][pos:pos + m["storeSize"]])
    return frames, manifest["messages"]


@pytest.fixture(scope="module", autouse=True)
def compiled():
    """Load (or, on a fresh machine, compile) the numba passes before any hypothesis deadline starts."""
    return K._compiled()


def test_layout_offsets_are_the_reference(compiled):
    """The compiled pass takes its offsets from layout; pin them to the spec's IPv4 table and the IPv6 widths."""
    C = compiled
    v4, v6, v4_magic2 = C.LAYOUT[0], C.LAYOUT[3], C.LAYOUT[4]
    assert (v4[C.LAY_BODY], v4[C.LAY_BODY_LENGTH], v4[C.LAY_STORE_HOST], v4[C.LAY_STORE_IP_WIDTH]) == (88, 84, 64, 4)
    assert (v6[C.LAY_BODY], v6[C.LAY_STORE_IP_WIDTH], v6[C.LAY_BORN_IP_WIDTH]) == (112, 16, 16)
    assert C.INT64_OFFSETS[1][C.INT64_FIELDS.index("store_timestamp")] == 68  # after a 20-byte born host
    assert list(C.LAYOUT[:4, C.LAY_MIN_SIZE]) == [91, 103, 103, 115]
    assert v4_magic2[C.LAY_MIN_SIZE] == 92 and v4_magic2[C.LAY_TOPIC_LEN_WIDTH] == 2  # V2: 2-byte topic length


def test_fixture_parity(fixture):
    """Every record of both RocketMQ-written stores: kernel == scalar on every column, and == RocketMQ's own
    read-back (msgId, tags, keys, uniqKey, dispatch tagsCode, body bytes)."""
    name, _, _ = fixture
    frames, messages = fixture_frames(name)
    rows = assert_parity(frames)
    import base64
    for row, m in zip(rows, messages):
        assert row["error"] is None
        assert row["msg_id"] == m["msgId"]
        assert row["store_size"] == m["storeSize"] and row["physical_offset"] == m["commitLogOffset"]
        assert row["body"] == base64.b64decode(m["body"] or "")
        assert row["properties"] == m["properties"]
        assert row["tags"] == m.get("tags") and row["uniq_key"] == m.get("uniqKey")
        if m["dispatch"].get("success"):
            assert row["tags_code"] == m["dispatch"]["tagsCode"]
        assert row["body_crc_ok"] and row["size_ok"]


def test_fixture_buffer_path_equals_binary_path(fixture):
    """decode_buffer over the segment (zero copy, frames in order) == decode_binary over copied frames, and a
    shuffled offset list (repacked) gives the rows in the asked order."""
    name, store, manifest = fixture
    seg = (store / "commitlog" / f"{0:020d}").read_bytes()
    msgs = [m for m in manifest["messages"] if m["commitLogOffset"] < len(seg)]
    starts = [m["commitLogOffset"] for m in msgs]
    sizes = [m["storeSize"] for m in msgs]
    from_buffer = K.decode_buffer(seg, starts, sizes)
    from_binary = K.decode_binary(pa.array([seg[s:s + z] for s, z in zip(starts, sizes)], pa.binary()))
    assert from_buffer.equals(from_binary)
    order = np.random.default_rng(7).permutation(len(starts))
    shuffled = K.decode_buffer(seg, np.array(starts)[order], np.array(sizes)[order])
    assert shuffled.equals(from_binary.take(pa.array(order)))


def test_large_binary_and_chunked_inputs(fixture):
    name, _, _ = fixture
    frames, _ = fixture_frames(name)
    plain = K.decode_binary(pa.array(frames, pa.binary()))
    assert K.decode_binary(pa.array(frames, pa.large_binary())).equals(plain)
    chunked = pa.chunked_array([pa.array(frames[:5], pa.binary()), pa.array(frames[5:], pa.binary())])
    assert K.decode_binary(chunked).equals(plain)
    sliced = pa.array([b"junk"] + frames, pa.binary()).slice(1)
    assert K.decode_binary(sliced).equals(plain)


def test_column_selection_skips_work_and_keeps_values(fixture):
    name, _, _ = fixture
    frames, _ = fixture_frames(name)
    full = K.decode_binary(pa.array(frames, pa.binary()))
    # the texts without the body (not copied: decoding.compiled.WANT_BODY), as the audit's scan asks for them
    texts = ("topic", "properties_raw", "uniq_key", "real_topic", "body_crc_ok")
    for cols in (K.MESSAGE_DECODER_COLUMNS, ("tags_code",), ("producer_time", "error"), ("keys", "msg_id"), texts):
        part = K.decode_binary(pa.array(frames, pa.binary()), columns=cols)
        assert part.schema.names == list(cols)
        assert part.equals(full.select(list(cols)))
    with pytest.raises(ValueError, match="unknown message columns"):
        K.message_schema(["no_such_column"])


# ---------------------------------------------------------------------------------------------------------
# Hand-made edge cases


def _msg(**kw) -> Message:
    base = dict(topic="TopicTest", body=b"hello", properties_raw="TAGS\x01TagA", born_host="10.0.0.1:5000",
                store_host="10.0.0.2:10911", physical_offset=4096, store_timestamp=1_700_000_000_123,
                born_timestamp=1_700_000_000_000)
    base.update(kw)
    return Message(**base)


def test_properties_edge_cases_follow_string2messageProperties():
    cases = [
        "k1\x01v1\x02k2\x01",  # trailing empty value: only k1
        "\x01v1\x02k2\x01v2",  # empty key: only k2
        "a\x011\x02a\x012\x02b\x01x\x01y",  # last duplicate wins; value keeps a further \u0001
        "KEYS\x01 a  b \x02TAGS\x01t\x02",  # trailing separator (<= 4.9.0, >= 5.2.0); odd key spacing
        "\x02\x02\x01\x02x\x02\x01\x01",  # separators only
        "",  # no properties
        "emoji😀\x01值\x02日本\x01語\x01\x01",
    ]
    rows = assert_parity([encode_record(_msg(properties_raw=c)) for c in cases])
    assert rows[2]["properties"] == {"a": "2", "b": "x\x01y"}
    assert rows[3]["keys"] == ["a", "b"]
    assert rows[5]["properties"] == {} and rows[5]["keys"] == [] and rows[5]["tags_code"] == 0


def test_many_keys_in_a_row_use_the_hash_grouped_duplicate_path():
    """More than 16 entries in a row are grouped by key hash instead of compared pairwise; repeats must still
    resolve."""
    props = "\x02".join(f"key{i}\x01v{i}" for i in range(80)) + "\x02key3\x01last"
    rows = assert_parity([encode_record(_msg(properties_raw=props)), encode_record(_msg())])
    assert rows[0]["properties"]["key3"] == "last" and len(rows[0]["properties"]) == 80


def test_schedule_topic_tags_code_is_the_deliver_time():
    cases = [("SCHEDULE_TOPIC_XXXX", "3"), ("SCHEDULE_TOPIC_XXXX", "99"), ("SCHEDULE_TOPIC_XXXX", "0"),
             ("SCHEDULE_TOPIC_XXXX", "x"), ("SCHEDULE_TOPIC_XXXX", " 2 "), ("SCHEDULE_TOPIC_XXXX", "99999999999"),
             ("TopicTest", "3")]
    frames = [encode_record(_msg(topic=t, properties_raw=f"TAGS\x01TagA\x02DELAY\x01{d}")) for t, d in cases]
    rows = assert_parity(frames)
    st_ = 1_700_000_000_123
    assert [r["tags_code"] for r in rows] == [st_ + 10_000, st_ + 7_200_000, 2598919, 2598919, st_ + 5000,
                                              st_ + 7_200_000, 2598919]
    assert rows[5]["delay_level"] is None  # does not fit Java's int
    custom = K.decode_binary(pa.array(frames[:2], pa.binary()), columns=["tags_code"], delay_levels={1: 5, 2: 7})
    assert custom.column(0).to_pylist() == [st_ + 7, st_ + 7]


def test_uniq_key_spellings():
    good = create_uniq_key(bytes([192, 168, 0, 10]), 12345, 460141958, 1_700_000_000_000, 1)
    v6 = create_uniq_key(bytes(range(16)), 7, -1, 1_699_999_999_000, 65535)
    spaced = " ".join(good[i:i + 2] for i in range(0, 32, 2))
    for uk in (good, v6, good.lower(), spaced, good[:-2] + "ZZ", good[:30], "", "x" * 56):
        assert_parity([encode_record(_msg(properties_raw=f"UNIQ_KEY\x01{uk}"))])
    row = kernel_rows([encode_record(_msg(properties_raw=f"UNIQ_KEY\x01{good}"))])[0]
    assert (row["producer_ip"], row["producer_pid"], row["producer_time"]) == ("192.168.0.10", 12345, 1_700_000_000_000)


def test_invalid_utf8_is_replaced_like_the_scalar_decoder():
    rec = bytearray(encode_record(_msg(topic="TopicTest", properties_raw="TAGS\x01TagA\x02K\x01v")))
    lay = L.layout_for(0)
    topic_at = lay.body_offset + 5 + 1
    rec[topic_at] = 0xFF  # inside the topic
    rec[-1] = 0xC3  # a lone lead byte at the end of the properties
    rows = assert_parity([bytes(rec), encode_record(_msg())])
    assert "\ufffd" in rows[0]["topic"] and rows[0]["properties"]["K"] == "\ufffd"


def test_compressed_bodies_and_the_decompression_cap():
    text = b"RocketMQ " * 500
    frames = [encode_record(_msg(body=compress(text, kind), sys_flag=L.COMPRESSED_FLAG | L.COMPRESSION_FLAGS[kind]))
              for kind in ("ZLIB", "LZ4", "ZSTD")]
    frames.append(encode_record(_msg(body=zlib.compress(text), sys_flag=L.COMPRESSED_FLAG)))  # legacy: type 0
    frames.append(encode_record(_msg(body=b"not zlib", sys_flag=L.COMPRESSED_FLAG | L.COMPRESSION_ZLIB_TYPE)))
    frames.append(encode_record(_msg(body=compress(text, "ZLIB"), sys_flag=L.COMPRESSED_FLAG | 0x500)))  # type 5
    rows = assert_parity(frames)
    assert [r["decompressed_body"] == text for r in rows[:4]] == [True] * 4
    assert [r["decompress_error"] for r in rows[4:]] == ["DECOMPRESSION", "DECOMPRESSION"]
    capped = K.decode_binary(pa.array(frames[:1]), decompress=True, max_decompressed=100)
    assert capped.column("decompressed_body")[0].as_py() is None
    assert capped.column("decompress_error")[0].as_py() == "DECOMPRESSION"


def test_v2_magic_long_topic_and_ipv6_hosts_mixed_in_one_batch():
    long_topic = "%RETRY%" + "g" * 300
    frames = [
        encode_record(_msg(topic=long_topic, magic_version=2)),
        encode_record(_msg(born_host="[2408:4004:180:8100:3faa:1dde:2b3f:898a]:10911", sys_flag=L.BORNHOST_V6_FLAG)),
        encode_record(_msg(store_host="[::1]:10911", sys_flag=L.STOREHOST_V6_FLAG)),
        encode_record(_msg(born_host="[fe80::1]:1", store_host="[::2]:2",
                           sys_flag=L.BORNHOST_V6_FLAG | L.STOREHOST_V6_FLAG)),
        encode_record(_msg()),
    ]
    rows = assert_parity(frames)
    assert rows[0]["topic"] == long_topic and rows[0]["magic_version"] == 2
    assert rows[1]["born_host"] == "[2408:4004:180:8100:3faa:1dde:2b3f:898a]:10911"
    assert len(rows[2]["msg_id"]) == 56 and len(rows[4]["msg_id"]) == 32


def test_malformed_frames_become_error_rows_in_the_same_batch():
    good = encode_record(_msg())
    lay = L.layout_for(0)
    bad_magic = bytearray(good)
    bad_magic[4:8] = struct.pack(">i", L.BLANK_MAGIC)
    short_total = bytearray(good)
    short_total[0:4] = struct.pack(">i", 50)
    long_total = bytearray(good)
    long_total[0:4] = struct.pack(">i", len(good) + 10)
    bad_body = bytearray(good)
    bad_body[lay.offsets["body_length"]:lay.offsets["body_length"] + 4] = struct.pack(">i", -1)
    bad_topic = bytearray(good)
    bad_topic[lay.body_offset + 5] = 0x80  # topic length -128
    bad_props = bytearray(good)
    at = len(good) - len("TAGS\x01TagA") - 2
    bad_props[at:at + 2] = struct.pack(">h", 500)
    mismatch = encode_record(_msg(), store_size=len(good) + 3) + b"\0\0\0"
    frames = [good[:5], bytes(bad_magic), good[:30], bytes(short_total), good[:-1], bytes(bad_body), bytes(bad_topic),
              bytes(bad_props), mismatch, None, b"", good + b"tail", good]
    rows = assert_parity(frames)
    assert [(r["error"], r["error_field"]) for r in rows] == [
        ("TRUNCATED", "store_size"), ("BAD_MAGIC", "magic"), ("TRUNCATED", "sys_flag"), ("BAD_LENGTH", "store_size"),
        ("TRUNCATED", "store_size"), ("BAD_LENGTH", "body_length"), ("BAD_LENGTH", "topic_length"),
        ("BAD_LENGTH", "properties_length"), ("SIZE_MISMATCH", "store_size"), (None, None), ("TRUNCATED", "store_size"),
        (None, None), (None, None)]
    assert all(r["topic"] is None and r["properties"] is None for r in rows[:11])
    assert rows[11]["size_ok"] is False and rows[12]["size_ok"] is True
    assert {k.value for k in ErrorKind} >= {r["error"] for r in rows if r["error"]}


def test_empty_batch_and_all_bad_batch():
    assert K.decode_binary(pa.array([], pa.binary())).num_rows == 0
    rows = assert_parity([b"\x00" * 200, None, b"\xff" * 3])
    assert [r["error"] for r in rows] == ["BAD_MAGIC", None, "TRUNCATED"]


def test_compiled_tags_hash_matches_java_hash(compiled):
    """tagsCode over UTF-16 code units: ASCII, BMP and astral characters (surrogate pairs)."""
    from store_format.javahash import tags_code
    words = ["", "a", "TagA", "Aa", "BB", "polygenelubricants", "x" * 500, "TopicTest#KEY1", "é", "日本語", "😀", "a😀b𝄞"]
    raw = [w.encode() for w in words]
    off = np.cumsum([0] + [len(r) for r in raw], dtype=np.int32)
    got = compiled.tags_hashes(np.frombuffer(b"".join(raw), np.uint8), off, np.arange(len(words), dtype=np.int64))
    assert got.tolist() == [tags_code(w) for w in words]


def test_compiled_crc_matches_zlib_at_every_length():
    """The slice-by-8 CRC against UtilAll.crc32 (zlib) for bodies of 0..80 bytes, at every alignment."""
    rng = np.random.default_rng(3)
    frames, expected = [], []
    for n in range(81):
        body = rng.integers(0, 256, n, dtype=np.uint8).tobytes()
        good = n % 3 != 0
        crc = body_crc32(body) if good else body_crc32(body) ^ 1
        frames.append(encode_record(_msg(body=body, body_crc=crc, topic="T" * (n % 8))))
        expected.append(good)
    got = K.decode_binary(pa.array(frames, pa.binary()), columns=["body_crc_ok"]).column(0).to_pylist()
    assert got == expected


def test_cache_plan_for_read_only_and_zipped_installs(tmp_path):
    """numba's disk cache: beside the module when writable; else NUMBA_CACHE_DIR under the user cache (or the
    temp dir); from a zip, numba's own user directory, or no cache where nothing is writable."""
    from decoding.compiled import cache_plan
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    module = pkg / "compiled.py"
    module.write_text("")
    xdg = tmp_path / "xdg"
    assert cache_plan(str(module), {"XDG_CACHE_HOME": str(xdg)}, str(tmp_path)) == (True, None)
    (pkg / "__pycache__").rmdir()
    (pkg / "__pycache__").write_text("")  # the package directory cannot hold a cache (even for root)
    assert cache_plan(str(module), {"XDG_CACHE_HOME": str(xdg)}, str(tmp_path)) == \
        (True, str(xdg / "rocketmq-forensics-numba"))
    assert cache_plan(str(module), {"NUMBA_CACHE_DIR": "/somewhere"}, str(tmp_path)) == (True, None)
    blocked = tmp_path / "blocked"
    blocked.write_text("")  # a file: no directory can be made under it
    uid = os.getuid()
    assert cache_plan(str(module), {"XDG_CACHE_HOME": str(blocked)}, str(tmp_path)) == \
        (True, str(tmp_path / f"rocketmq-forensics-numba-{uid}"))
    assert cache_plan(str(module), {"XDG_CACHE_HOME": str(blocked)}, str(blocked)) == (False, None)
    # from a zip: NUMBA_CACHE_DIR, else ours under the user cache, else the temp dir's (never numba's own folder,
    # which is named after the zip's path)
    zipped = str(tmp_path / "deps.zip" / "decoding" / "compiled.py")
    assert cache_plan(zipped, {"XDG_CACHE_HOME": str(xdg)}, str(tmp_path)) == \
        (True, str(xdg / "rocketmq-forensics-numba"))
    assert cache_plan(zipped, {"NUMBA_CACHE_DIR": str(tmp_path / "mine")}, str(tmp_path)) == \
        (True, str(tmp_path / "mine"))
    assert cache_plan(zipped, {"XDG_CACHE_HOME": str(blocked)}, str(tmp_path)) == \
        (True, str(tmp_path / f"rocketmq-forensics-numba-{uid}"))
    assert cache_plan(zipped, {"XDG_CACHE_HOME": str(blocked)}, str(blocked)) == (False, None)


@pytest.mark.slow  # two processes, the first compiling every kernel
def test_numba_cache_from_a_zip_is_found_again_wherever_the_zip_lies(tmp_path):
    """Spark's executors get the --py-files zip in a new work folder per application: the kernels compiled by the
    first application are loaded from the cache by the next, and nothing is written beside either zip."""
    import json
    import subprocess
    import sys
    import sysconfig
    import zipfile

    from runtime.session import REPO

    probe = ("import json, decoding.compiled as C\n"
             "ds = [v for v in vars(C).values() if hasattr(v, 'stats') and getattr(v, '_cache', None) is not None\n"
             "      and type(v._cache).__name__ != 'NullCache']\n"
             "print(json.dumps({'file': C.__file__, 'cached': C.CACHE, 'kernels': len(ds),\n"
             "                  'hits': sum(sum(d.stats.cache_hits.values()) for d in ds),\n"
             "                  'misses': sum(sum(d.stats.cache_misses.values()) for d in ds)}))\n")
    runs, folders = [], []
    for app in ("app-1", "app-2"):
        folder = tmp_path / app
        folder.mkdir()
        zip_path = folder / "rocketmq_forensics.zip"
        with zipfile.ZipFile(zip_path, "w") as zf:
            for package in ("store_format", "decoding"):
                for path in sorted((REPO / package).rglob("*.py")):
                    zf.write(path, path.relative_to(REPO).as_posix())
        folder.chmod(0o555)  # read-only (root writes anyway: the listing below is the proof)
        folders.append(folder)
        # python -S: the editable install cannot supply the project, only the zip
        env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "NUMBA_CACHE_DIR")}
        env.update(PYTHONPATH=os.pathsep.join([str(zip_path), sysconfig.get_paths()["purelib"]]),
                   XDG_CACHE_HOME=str(tmp_path / "xdg"))
        proc = subprocess.run([sys.executable, "-S", "-c", probe], env=env, cwd=tmp_path, capture_output=True,
                              text=True, timeout=600)
        assert proc.returncode == 0, proc.stderr[-3000:]
        runs.append(json.loads(proc.stdout.strip().splitlines()[-1]))
    try:
        first, second = runs
        assert first["file"].startswith(str(folders[0] / "rocketmq_forensics.zip")) and first["cached"]
        assert first["kernels"] > 5 and first["misses"] >= first["kernels"] and first["hits"] == 0
        assert second["file"].startswith(str(folders[1] / "rocketmq_forensics.zip"))
        # every kernel loaded, none compiled; a helper only other kernels call (e.g. _repeats_among) is compiled
        # with them the first time (its misses count) and comes inside their cached code the second time
        assert second["misses"] == 0 and first["kernels"] // 2 < second["hits"] <= first["misses"], (first, second)
        assert [sorted(p.name for p in f.iterdir()) for f in folders] == [["rocketmq_forensics.zip"]] * 2
        xdg = tmp_path / "xdg"
        assert [p.name for p in xdg.iterdir()] == ["rocketmq-forensics-numba"]  # not numba's path-named folders
        assert len([p for p in (xdg / "rocketmq-forensics-numba").iterdir() if p.name.startswith("zip-")]) == 1
    finally:
        for f in folders:
            f.chmod(0o755)


# ---------------------------------------------------------------------------------------------------------
# Hypothesis: generated records, then damaged ones

_settings = settings(max_examples=60, deadline=3000, suppress_health_check=[HealthCheck.too_slow,
                                                                          HealthCheck.data_too_large])


@pytest.mark.slow
@_settings
@given(st.lists(records(), min_size=1, max_size=6))
def test_generated_records_parity(frames):
    assert_parity(frames)


@pytest.mark.slow
@_settings
@given(st.data())
def test_generated_damage_parity(data):
    frames = data.draw(st.lists(records(), min_size=1, max_size=5))
    hurt = [data.draw(damaged(f)) for f in frames]
    rows = assert_parity(hurt)
    assert len(rows) == len(hurt)


@pytest.mark.slow
@settings(max_examples=25, deadline=3000, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(records(), min_size=1, max_size=5), st.sampled_from([pa.binary(), pa.large_binary()]))
def test_generated_buffer_and_binary_paths_agree(frames, typ):
    buf = b"".join(frames)
    starts = np.cumsum([0] + [len(f) for f in frames[:-1]])
    a = K.decode_buffer(buf, starts, [len(f) for f in frames])
    b = K.decode_binary(pa.array(frames, typ))
    assert a.equals(b)


def test_batches_bigger_than_a_pass_are_cut_and_joined(fixture, monkeypatch):
    """Texts keep 32-bit offsets because a batch past _PASS_BYTES / _PASS_ROWS is decoded in several passes and
    joined; force many passes on a small batch (a frame bigger than a pass goes alone)."""
    name, _, _ = fixture
    frames, _ = fixture_frames(name)
    arr = pa.array(frames[:3] + [None, b"junk"] + frames[3:], pa.binary())
    plain = K.decode_binary(arr, decompress=True)
    monkeypatch.setattr(K, "_PASS_BYTES", 300)
    assert len(K._passes(K.frames_from_binary(arr))) > 3
    assert K.decode_binary(arr, decompress=True).equals(plain)
    monkeypatch.setattr(K, "_PASS_ROWS", 2)
    assert K.decode_binary(arr, decompress=True).equals(plain)


def test_short_frame_at_the_end_of_the_buffer():
    """Header views are clipped near the buffer's end; the prefix must still be read from the frame itself."""
    good = encode_record(_msg())
    for tail in (good[:8], good[:30], good[:40]):
        rows = assert_parity([good, tail])
        assert rows[1]["error"] == "TRUNCATED"


# ---------------------------------------------------------------------------------------------------------
# Batches whose rows share one property shape (one producer's messages), with repeats and near misses


def test_shared_shape_batch_with_repeated_and_trailing_keys():
    frames = [encode_record(_msg(properties_raw=f"KEYS\x01k{i}\x02WAIT\x01true\x02TAGS\x01T{i % 3}\x02"
                                               f"ORIGIN_MESSAGE_ID\x01id{i}\x02WAIT\x01false\x02"))
              for i in range(20)]
    rows = assert_parity(frames)
    assert rows[7]["properties"] == {"KEYS": "k7", "TAGS": "T1", "ORIGIN_MESSAGE_ID": "id7", "WAIT": "false"}
    batch = K.decode_binary(pa.array(frames[:1], pa.binary()), columns=["properties"])
    assert [k for k, _ in batch.column(0)[0].as_py()] == ["KEYS", "TAGS", "ORIGIN_MESSAGE_ID", "WAIT"]  # last WAIT's place


@pytest.mark.parametrize("odd", ["KEYZ\x01x", "KE\x01xx", "ORIGIN_MESSAGE_IX\x01x", "K\x01v"])
def test_one_different_key_in_a_shared_shape_batch(odd):
    """Same separator shape, one row's key differs (same length, a middle byte of a long key, the buffer's
    last bytes): its keys are its own."""
    base = "KEYS\x01a\x02ORIGIN_MESSAGE_ID\x01b\x02K\x01v"
    frames = [encode_record(_msg(properties_raw=base)) for _ in range(5)]
    odd_props = base.replace({"KEYZ\x01x": "KEYS\x01a", "KE\x01xx": "KEYS\x01a",
                              "ORIGIN_MESSAGE_IX\x01x": "ORIGIN_MESSAGE_ID\x01b", "K\x01v": "K\x01v"}[odd], odd)
    if odd == "K\x01v":
        odd_props = base[:-3] + "Q\x01v"  # the last key of the last row: inside the buffer's final 8 bytes
    frames.append(encode_record(_msg(properties_raw=odd_props)))
    rows = assert_parity(frames)
    assert rows[-1]["properties"] != rows[0]["properties"]


def test_hostile_row_of_one_repeated_key_stays_fast_and_exact():
    """8,000 entries with one key (the most a 32 KiB property string holds) take the hash-grouped duplicate
    path: one entry survives, with the last value; a row of many distinct and repeated keys too."""
    same = "\x02".join(f"a\x01{i % 10}" for i in range(8000))[:L.MAX_PROPERTIES_LENGTH]
    mixed = "\x02".join(f"k{i % 97}\x01v{i}" for i in range(3000))
    rows = assert_parity([encode_record(_msg(properties_raw=same)), encode_record(_msg(properties_raw=mixed))])
    assert rows[0]["properties"] == {"a": same.rsplit("\x01", 1)[1]}
    assert len(rows[1]["properties"]) == 97 and rows[1]["properties"]["k0"] == "v2910"


@settings(max_examples=40, deadline=3000, suppress_health_check=[HealthCheck.too_slow])
@given(keys=st.lists(st.one_of(property_keys, st.text(st.characters(codec="utf-8", exclude_characters="\x00\x01\x02"),
                                            min_size=1, max_size=20)), min_size=1, max_size=6),
       values=st.lists(st.lists(st.text(st.characters(codec="utf-8", exclude_characters="\x00\x01\x02"), min_size=1,
                                        max_size=15), min_size=6, max_size=6), min_size=1, max_size=6),
       trailing=st.booleans(), swap=st.integers(-1, 5))
def test_generated_shared_shape_batches(keys, values, trailing, swap):
    props = []
    for r, vals in enumerate(values):
        ks = list(keys)
        if r == swap:
            ks[-1] = ks[-1][:-1] + ("x" if ks[-1][-1] != "x" else "y")  # same length, other key
        props.append("\x02".join(f"{k}\x01{v}" for k, v in zip(ks, vals)) + ("\x02" if trailing else ""))
    assert_parity([encode_record(_msg(properties_raw=p)) for p in props])


# ---------------------------------------------------------------------------------------------------------
# Index files: the compiled chain check and entry summary against a direct reading of selectPhyOffset


def _index_file_bytes(slot_heads, entries) -> bytes:
    """An index file body (zero header) of ``slot_heads`` and (key hash, offset, time diff, prev) entries."""
    out = bytearray(L.INDEX_HEADER_SIZE)
    out += b"".join(struct.pack(">i", h) for h in slot_heads)
    out += b"".join(struct.pack(L.INDEX_ENTRY_STRUCT, *e) for e in entries)
    return bytes(out)


def _reference_chains(slot_heads, entries) -> list[list[str]]:
    from store_format.indexfile import CHAIN_PROBLEMS

    n, slots = len(entries), len(slot_heads)
    reached = set()
    for head in slot_heads:  # IndexFile.selectPhyOffset: walk until prev 0, out of range, itself, negative diff
        e = head
        while 0 < e < n and e not in reached:
            reached.add(e)
            kh, _, td, prev = entries[e]
            if prev <= 0 or prev >= n or prev == e or td < 0:
                break
            e = prev
    def slot(kh):
        return kh % slots if kh >= 0 else -1
    out = [[]]
    for e in range(1, n):
        kh, _, td, prev = entries[e]
        problems = {"prev_out_of_range": not 0 <= prev < n, "prev_not_older": 0 < prev < n and prev >= e,
                    "prev_other_slot": 0 < prev < n and slot(entries[prev][0]) != slot(kh),
                    "negative_time_diff": td < 0, "unreachable": e not in reached}
        out.append([p for p in CHAIN_PROBLEMS if problems[p]])
    return out


# up to 20 slots, mostly empty: the chain check reads eight empty slots at once, one by one where one is set
_index_files = st.integers(1, 20).flatmap(lambda slots: st.integers(1, 30).flatmap(lambda n: st.tuples(
    st.lists(st.one_of(st.just(0), st.just(0), st.integers(-1, n + 1)), min_size=slots, max_size=slots),
    st.lists(st.tuples(st.integers(-3, 9), st.integers(0, 4), st.integers(-1, 2), st.integers(-2, n + 2)),
             min_size=n, max_size=n),
    st.booleans(), st.booleans())))


def _linked_as_the_broker_links(entries, slots) -> list:
    """Entries whose drawn prev is not negative re-linked as IndexFile.putKey links them (to their slot's newest
    entry so far, 0 for none); the negative ones stay as damage among them."""
    newest, out = {}, [entries[0]]
    for kh, phys, td, prev in entries[1:]:
        slot = kh % slots if kh >= 0 else None
        out.append((kh, phys, td, newest.get(slot, 0) if prev >= 0 else prev))
        if slot is not None:
            newest[slot] = len(out) - 1
    return out


@pytest.mark.slow
@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_index_files)
def test_index_chain_bits_and_summary_follow_the_reference(case):
    from collections import Counter

    from datasources.indexfile import EntryViews, chain_bits, entry_summary, problem_lists

    slot_heads, entries, in_log_order, linked = case
    if in_log_order:  # the broker's order, where the summary takes its fast path
        entries = [entries[0]] + sorted(entries[1:], key=lambda e: e[1])
    if linked:  # the broker's chains, where the chain check knows a prev's slot without reading it
        entries = _linked_as_the_broker_links(entries, len(slot_heads))
    v = EntryViews(_index_file_bytes(slot_heads, entries), len(slot_heads), len(entries))
    assert problem_lists(chain_bits(v)).to_pylist() == _reference_chains(slot_heads, entries)
    copies = Counter((kh, phys) for kh, phys, _, _ in entries[1:])
    used = {kh % len(slot_heads) for kh, _, _, _ in entries[1:] if kh >= 0}
    for bucket_entries in (2, 1 << 22):  # several hash buckets, one
        s = entry_summary(v, bucket_entries)
        assert (s["entry_slots"], s["duplicate_entries"], s["duplicated_pairs"]) == \
            (len(used), sum(c - 1 for c in copies.values()), sum(c > 1 for c in copies.values()))


@pytest.mark.slow
@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_index_files, st.data())
def test_an_index_files_check_goes_on_from_its_last_as_the_whole_check(case, data):
    """audit --state: a grown index file's check resumed from the check of its first entries (their bytes the same;
    the slots rewritten, drawn again) gives the whole check's problems, summary and what the next check goes on
    from, damage and entries out of commitlog order included."""
    from decoding.kernels import check_entries
    from datasources.indexfile import EntryViews, chain_bits, entry_summary

    slot_heads, entries, in_log_order, linked = case
    if in_log_order:
        entries = [entries[0]] + sorted(entries[1:], key=lambda e: e[1])
    if linked:
        entries = _linked_as_the_broker_links(entries, len(slot_heads))
    n = len(entries)
    checked = data.draw(st.integers(max(1, n // 2), n))  # resumed from at least half the entries (else whole)
    heads_then = data.draw(st.lists(st.one_of(st.just(0), st.integers(-1, checked + 1)), min_size=len(slot_heads),
                                    max_size=len(slot_heads)))
    _, _, was = check_entries(EntryViews(_index_file_bytes(heads_then, entries[:checked]), len(slot_heads), checked))
    v = EntryViews(_index_file_bytes(slot_heads, entries), len(slot_heads), n)
    bits, summary, after = check_entries(v, was)
    whole_bits, whole_summary, whole_after = check_entries(v)
    assert (bits == chain_bits(v)).all() and (whole_bits == bits).all()
    assert summary == entry_summary(v) == whole_summary
    assert (after.count, after.extra, after.pairs, after.run_start) == \
        (whole_after.count, whole_after.extra, whole_after.pairs, whole_after.run_start)
    assert (after.flagged == whole_after.flagged).all()
    assert (after.used is None) == (whole_after.used is None)
    assert after.used is None or (after.used == whole_after.used).all()


def _newest_in_each_slot(entries, slots: int) -> list[int]:
    """The slots' heads as IndexFile.putKey leaves them: each slot's newest entry (0: none)."""
    heads = [0] * slots
    for e, (kh, _, _, _) in enumerate(entries[1:], start=1):
        if kh >= 0:
            heads[kh % slots] = e
    return heads


@pytest.mark.slow
@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.integers(1, 20), st.integers(2, 40), st.data())
def test_a_grown_index_files_old_entries_are_not_walked_when_its_ways_into_them_are_the_same(slots, n, data):
    """audit --state: a grown index file whose old entries had no problem and whose ways into them (the slots' heads
    below them, the new entries' prevs) are the slots' heads of the last check is checked without walking the old
    entries (index_chain_bits_grown), with the whole check's result; where the ways in differ (a slot or a new
    entry's prev drawn anywhere, damage among the new entries), it falls back, with the same result."""
    import decoding.compiled as compiled
    from decoding.kernels import check_entries
    from datasources.indexfile import EntryViews

    entry = st.tuples(st.integers(0, 9), st.integers(0, 4), st.integers(0, 2), st.just(0))
    entries = _linked_as_the_broker_links(data.draw(st.lists(entry, min_size=n, max_size=n)), slots)
    checked = data.draw(st.integers(max(1, n // 2), n))
    damaged = data.draw(st.booleans())
    if damaged:  # new entries' prevs, time diffs and the slots drawn anywhere
        for e in range(checked, n):
            if data.draw(st.booleans()):
                kh, phys, _, _ = entries[e]
                entries[e] = (kh, phys, data.draw(st.integers(-1, 2)), data.draw(st.integers(-2, n + 2)))
        heads = data.draw(st.lists(st.one_of(st.just(0), st.integers(-1, n + 1)), min_size=slots, max_size=slots))
    else:
        heads = _newest_in_each_slot(entries, slots)
    _, _, was = check_entries(EntryViews(_index_file_bytes(_newest_in_each_slot(entries[:checked], slots),
                                                           entries[:checked]), slots, checked))
    assert not len(was.flagged) and was.heads is not None  # the old entries as the broker leaves them
    v = EntryViews(_index_file_bytes(heads, entries), slots, n)
    walked = []
    resumed = compiled.index_chain_bits_resumed
    compiled.index_chain_bits_resumed = lambda *a: walked.append(1) or resumed(*a)
    try:
        bits, summary, after = check_entries(v, was)
    finally:
        compiled.index_chain_bits_resumed = resumed
    whole_bits, whole_summary, whole_after = check_entries(v)
    assert (bits == whole_bits).all() and summary == whole_summary
    assert (after.flagged == whole_after.flagged).all() and (after.heads == whole_after.heads).all()
    assert (after.count, after.extra, after.pairs, after.run_start) == \
        (whole_after.count, whole_after.extra, whole_after.pairs, whole_after.run_start)
    if not damaged:
        assert not walked  # the old entries were not walked


def test_invalid_utf8_names_the_fields_the_broker_reads_as_u_fffd():
    """The opt-in ``invalid_utf8`` column against Python's UTF-8 decoder, and store_format.codec.malformed_texts
    (what the audit shows) on the same records: the field, the value escaped, the first bad byte's position."""
    good = encode_record(_msg(topic="Topic", properties_raw="KEYS\x01key-1\x02TAGS\x01t"))
    records = [good]
    for target, bad in ((b"Topic", b"To\xffic"), (b"key-1", b"ke\xc3(1"), (b"TAGS", b"TA\xe2S")):
        records.append(good.replace(target, bad))
    records.append(good.replace(b"Topic", b"To\xffic").replace(b"key-1", b"key\xff1"))
    starts = np.cumsum([0] + [len(r) for r in records[:-1]])
    t = K.decode_buffer(b"".join(records), starts, np.array([len(r) for r in records]),
                        columns=["topic", "keys", "invalid_utf8"]).to_pylist()
    assert [r["invalid_utf8"] for r in t] == [None, "topic", "properties", "properties", "topic,properties"]
    assert t[1]["topic"] == "To\ufffdic" and t[2]["keys"] == ["ke\ufffd(1"]
    assert malformed_texts(records[0]) == []
    [(field, value, at)] = malformed_texts(records[2])
    assert (field, value, records[2][at:at + 1]) == ("KEYS", "ke\\xc3(1", b"\xc3")
    [(field, value, at)] = malformed_texts(records[3])
    assert (field, value, records[3][at:at + 1]) == ("TA\\xe2S", "t", b"\xe2")
    assert [f for f, _, _ in malformed_texts(records[4])] == ["topic", "KEYS"]


@settings(max_examples=200, deadline=None)
@given(a=st.lists(st.tuples(st.integers(0, 40), st.integers(-3, 3)), max_size=60),
       b=st.lists(st.tuples(st.integers(0, 40), st.integers(-3, 3)), max_size=60), sort_b=st.booleans())
def test_offset_hash_pairs_in_is_set_membership(a, b, sort_b):
    """The audit's (offset, hash) join is membership in b's pairs, in any order of either side."""
    from jobs.audit.checks.index import pairs_in

    if sort_b:
        b = sorted(b, key=lambda x: x[0])
    cols = lambda pairs: (np.array([p for p, _ in pairs], np.int64), np.array([h for _, h in pairs], np.int32))  # noqa: E731
    found = pairs_in(*cols(a), *cols(b))
    assert found.tolist() == [pair in set(b) for pair in a]


def test_the_profile_line_says_whether_the_kernels_were_compiled(monkeypatch):
    """--profile names the kernels' compile apart: 0 s when numba's cache had them (make setup fills it), else
    how many passes this process compiled."""
    from jobs.audit import job
    from decoding import kernels

    kernels.load_compiled()
    if kernels.KERNEL_LOAD["compiled"] == 0:
        assert " 0.00 s  (none: loaded from numba's cache" in job._kernel_line()
    monkeypatch.setattr(kernels, "KERNEL_LOAD", {"seconds": 14.5, "compiled": 66})
    assert "  14.50 s  (66 passes compiled: numba's cache was cold" in job._kernel_line()
    monkeypatch.setattr(kernels, "KERNEL_LOAD", {})
    assert job._kernel_line().endswith("not loaded in the driver yet")
