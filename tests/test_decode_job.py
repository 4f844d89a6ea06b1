"""jobs/decode.py on the RocketMQ-written fixtures: every manifest message exported, fields as RocketMQ read
them back, topic filtering, and the exit codes."""
from __future__ import annotations

import json
from collections import Counter

import pytest

from jobs import decode
from runtime.output import read_table

from .conftest import fixture_manifest, fixture_store


def _args(*argv):
    return decode.build_parser().parse_args(list(argv))


def test_every_manifest_message_is_exported(spark, fixture, tmp_path):
    name, store, manifest = fixture
    out = tmp_path / "messages"
    result = decode.run(spark, _args("--store", str(store), "--out", str(out)))
    assert result.exit_code == 0
    assert f"decode: {manifest['messageCount']} messages" in result.summary
    table = read_table(spark, str(out))
    assert "kind" not in table.columns and {"broker", "segment", "file_position", "msg_id"} <= set(table.columns)
    rows = table.select("physical_offset", "topic", "queue_id", "queue_offset", "msg_id").collect()
    assert table.count() == manifest["messageCount"]
    expected = {m["commitLogOffset"]: m for m in manifest["messages"]}
    assert sorted(r.physical_offset for r in rows) == sorted(expected)
    for r in rows:
        exp = expected[r.physical_offset]
        assert (r.topic, r.queue_id, r.queue_offset, r.msg_id) == \
               (exp["topic"], exp["queueId"], exp["queueOffset"], exp["msgId"])


def test_topic_filter_jsonl_bodies_match_the_manifest(spark, tmp_path):
    manifest = fixture_manifest("basic")
    topics = Counter(m["topic"] for m in manifest["messages"])
    wanted = [t for t, _ in topics.most_common(2)]
    out = tmp_path / "j"
    argv = ["--store", str(fixture_store("basic")), "--out", str(out), "--format", "jsonl"]
    result = decode.run(spark, _args(*argv, "--topic", wanted[0], "--topic", wanted[1]))
    assert result.exit_code == 0
    lines = [json.loads(line) for f in sorted(out.glob("part-*.json")) for line in f.read_text().splitlines()]
    expected = {m["commitLogOffset"]: m for m in manifest["messages"] if m["topic"] in wanted}
    assert len(lines) == len(expected) == topics[wanted[0]] + topics[wanted[1]]
    for line in lines:  # the manifest keeps bodies as base64, as the jsonl format does
        assert line["body"] == expected[line["physical_offset"]]["body"]


def test_nothing_matched_exits_1_and_refusals_exit_2(spark, tmp_path, capsys):
    out = tmp_path / "none"
    store = str(fixture_store("basic"))
    assert decode.main(["--store", store, "--out", str(out), "--topic", "no-such-topic"]) == 1
    assert "decode: 0 messages" in capsys.readouterr().out
    assert read_table(spark, str(out)).count() == 0  # an empty table, with its schema, is still written
    assert decode.main(["--store", store, "--out", str(out)]) == 2  # exists, no --overwrite
    assert "--overwrite" in capsys.readouterr().err
    assert decode.main(["--store", store, "--out", store + "/decoded"]) == 2  # into the input
    assert decode.main(["--store", str(tmp_path / "missing"), "--out", str(tmp_path / "o")]) == 2
    assert "MISSING" in capsys.readouterr().err


def test_columns_keeps_the_location_topic_and_the_chosen_columns(spark, tmp_path):
    manifest = fixture_manifest("basic")
    out = tmp_path / "narrow"
    result = decode.run(spark, _args("--store", str(fixture_store("basic")), "--out", str(out),
                                     "--columns", "queue_offset,body"))
    assert result.exit_code == 0
    table = read_table(spark, str(out))
    assert table.columns == ["broker", "segment", "file_position", "physical_offset", "store_size",
                             "beyond_first_stop", "kept", "topic", "queue_offset", "body"]
    expected = {m["commitLogOffset"]: m for m in manifest["messages"]}
    rows = table.collect()
    assert len(rows) == len(expected)
    for r in rows:
        assert (r.topic, r.queue_offset) == (expected[r.physical_offset]["topic"],
                                             expected[r.physical_offset]["queueOffset"])


def test_unknown_columns_are_refused_before_spark_starts(capsys):
    with pytest.raises(SystemExit) as exited:  # argparse's usage error
        decode.main(["--store", "x", "--out", "y", "--columns", "topic,bodyy"])
    assert exited.value.code == 2
    assert "argument --columns: unknown columns ['bodyy']" in capsys.readouterr().err
