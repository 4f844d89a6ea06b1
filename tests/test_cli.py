"""The store_format command line, run as a user would."""
from __future__ import annotations

import json
import subprocess
import sys

import pytest

from .conftest import REPO, fixture_manifest, fixture_store


def run(*args):
    return subprocess.run([sys.executable, "-m", "store_format", *map(str, args)], cwd=REPO,
                          capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize("name", ["basic", "broker"])
def test_dump_commitlog_prints_every_frame_with_its_position(name):
    manifest = fixture_manifest(name)
    r = run("dump", fixture_store(name), "--what", "commitlog")
    assert r.returncode == 0, r.stderr
    rows = [json.loads(line) for line in r.stdout.splitlines()]
    messages = [x for x in rows if x["kind"] == "message"]
    assert [m["physical_offset"] for m in messages] == [m["commitLogOffset"] for m in manifest["messages"]]
    assert all(m["segment"] == "00000000000000000000" and m["file_position"] == m["physical_offset"] for m in messages)
    assert [m["msg_id"] for m in messages] == [m["msgId"] for m in manifest["messages"]]
    assert [m["body"] for m in messages] == [m["body"] for m in manifest["messages"]]
    assert rows[-1]["kind"] == "stop" and rows[-1]["damage"] is False
    assert f"{len(messages)} message" in r.stderr


def test_dump_other_parts():
    store = fixture_store("broker")
    manifest = fixture_manifest("broker")
    cq = [json.loads(x) for x in run("dump", store, "--what", "consumequeue").stdout.splitlines()]
    assert len(cq) == sum(len(q["entries_[queueOffset,commitLogOffset,size,tagsCode]"]) for q in manifest["consumeQueues"])
    idx = [json.loads(x) for x in run("dump", store, "--what", "index").stdout.splitlines()]
    assert idx[0]["kind"] == "header" and len([x for x in idx if x["kind"] == "entry"]) == idx[0]["index_count"] - 1
    cp = json.loads(run("dump", store, "--what", "checkpoint").stdout)
    assert cp["logics_msg_timestamp"] == manifest["checkpoint"]["logicsMsgTimestamp"] and cp["abort"] is False
    cfg = {x["name"]: x for x in map(json.loads, run("dump", store, "--what", "config").stdout.splitlines())}
    assert cfg["consumerOffset.json"]["data"]["offsetTable"]["BrokerTopic@cg-broker"] == {"0": 1, "1": 2, "2": 3, "3": 4}


def test_query_by_key_uniq_key_and_msg_id():
    manifest = fixture_manifest("basic")
    store = fixture_store("basic")
    q = next(q for q in manifest["indexQueries"] if q["key"] == "twice")
    r = run("query", store, "--topic", q["topic"], "--key", "twice")
    assert r.returncode == 0
    assert [json.loads(x)["physical_offset"] for x in r.stdout.splitlines()] == sorted(set(q["queryMessageOffsets"]))
    m = manifest["messages"][3]
    r = run("query", store, "--topic", m["topic"], "--key", m["uniqKey"])
    assert [json.loads(x)["uniq_key"] for x in r.stdout.splitlines()] == [m["uniqKey"]]
    r = run("query", store, "--msg-id", m["msgId"])
    assert json.loads(r.stdout)["physical_offset"] == m["commitLogOffset"]
    assert run("query", store, "--topic", "TopicTest", "--key", "no-such-key").returncode == 1
    assert run("query", store, "--topic", "TopicTest").returncode == 2  # usage


def test_errors_are_clear(tmp_path):
    r = run("dump", tmp_path, "--what", "commitlog")
    assert r.returncode == 2 and "store root" in r.stderr
    r = run("query", fixture_store("basic"), "--msg-id", "XYZ")
    assert r.returncode == 2 and "BAD_ID" in r.stderr


def test_generate_into_a_store_that_is_there_says_what_to_do(tmp_path):
    """generate writes new stores only: into a non-empty folder it refuses (exit 2), naming the folder and the
    command that adds to a store, not an option it does not have."""
    (tmp_path / "keep").write_text("x")
    r = run("generate", tmp_path, "--messages", "5")
    assert r.returncode == 2 and f"{tmp_path} is not empty: generate writes a new store" in r.stderr
    assert "write --append" in r.stderr and "generate --append" not in r.stderr
    assert (tmp_path / "keep").read_text() == "x" and sorted(p.name for p in tmp_path.iterdir()) == ["keep"]
