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


# ---- unreadable input: exit 2 and one line, never a traceback (issue 22) ----

def _unprivileged(*cmd):
    """``cmd`` where root's override of file permissions does not reach files owned by an unmapped user (a user
    namespace mapping only root): as an ordinary user would meet a file it may not read."""
    import shutil

    if not shutil.which("unshare") or subprocess.run(["unshare", "-r", "true"], capture_output=True).returncode:
        pytest.skip("no user namespaces here")
    prefix = ["unshare", "-r"] if __import__("os").geteuid() == 0 else []
    return subprocess.run([*prefix, sys.executable, *map(str, cmd)], cwd=REPO, capture_output=True, text=True,
                          timeout=300)


def _deny(path):
    import os

    os.chown(path, 65534, 65534)
    os.chmod(path, 0)


def test_unreadable_input_is_exit_2_and_one_line(tmp_path):
    import shutil

    root = tmp_path / "store"
    shutil.copytree(fixture_store("basic"), root)
    for p in [root, *root.rglob("*")]:
        p.chmod(0o755 if p.is_dir() else 0o644)
    segment = root / "commitlog" / "00000000000000000000"
    _deny(segment)
    _deny(root / "checkpoint")
    r = _unprivileged("-m", "store_format", "dump", root, "--what", "commitlog")
    rows = [json.loads(x) for x in r.stdout.splitlines()]
    assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr
    assert [(x["file"], x["error_kind"], x["message"]) for x in rows if x["kind"] == "error"] == [
        (str(segment), "UNREADABLE", "Permission denied")]
    r = _unprivileged("-m", "store_format", "dump", root, "--what", "checkpoint")
    assert r.returncode == 2 and r.stderr == f"error: {root / 'checkpoint'}: Permission denied\n"
    m = fixture_manifest("basic")["messages"][0]
    r = _unprivileged("-m", "store_format", "query", root, "--msg-id", m["msgId"])
    assert r.returncode == 2 and f"error: {segment}: Permission denied" in r.stderr and "Traceback" not in r.stderr
    # a store root that cannot be listed: one line from the tools and the jobs alike; --debug adds the traceback
    _deny(root)
    for cmd in (["-m", "store_format", "dump", root, "--what", "index"],
                ["-m", "store_format", "query", root, "--msg-id", m["msgId"]],
                ["-m", "jobs.query", "--store", root, "--msg-id", m["msgId"]],
                ["-m", "jobs.decode", "--store", root, "--out", tmp_path / "out"]):
        r = _unprivileged(*cmd)
        assert r.returncode == 2 and "Traceback" not in r.stderr, (cmd, r.stderr)
        assert r.stderr.strip().splitlines()[-1].endswith(f"error: {root}: Permission denied"), (cmd, r.stderr)
    r = _unprivileged("-m", "store_format", "dump", root, "--what", "index", "--debug")
    assert r.returncode == 2 and "Traceback" in r.stderr
    root.chmod(0o755)


def test_a_commitlog_that_is_a_file_and_link_loops_are_reported(tmp_path):
    import os
    import shutil

    root = tmp_path / "store"
    shutil.copytree(fixture_store("basic"), root)
    for p in [root, *root.rglob("*")]:
        p.chmod(0o755 if p.is_dir() else 0o644)
    shutil.rmtree(root / "commitlog")
    (root / "commitlog").write_bytes(b"not a folder")
    (root / "index" / "loop").symlink_to(root / "index" / "loop")
    r = run("dump", root, "--what", "commitlog")
    errors = [json.loads(x) for x in r.stdout.splitlines() if json.loads(x)["kind"] == "error"]
    assert r.returncode == 2 and errors[0]["file"] == str(root / "commitlog"), r.stdout
    assert "a regular file, not a folder" in errors[0]["message"]
    r = run("dump", root, "--what", "index")
    assert r.returncode == 2 and any(json.loads(x).get("file") == str(root / "index" / "loop") and
                                     "loop" in json.loads(x)["message"] for x in r.stdout.splitlines())
    os.unlink(root / "index" / "loop")


def test_a_wrong_msg_id_length_says_so():
    for bad in ("C0A8000A00002A9F00000000000000", "XYZ", "G" * 32):
        r = run("query", fixture_store("basic"), "--msg-id", bad)
        assert r.returncode == 2 and "Traceback" not in r.stderr
        if len(bad) != 32:
            assert f"must be 32 or 56 hex characters" in r.stderr and f"got {len(bad)}" in r.stderr, r.stderr
            assert "not hexadecimal" not in r.stderr
        else:
            assert "not hexadecimal" in r.stderr


def test_generate_into_a_store_that_is_there_says_what_to_do(tmp_path):
    """generate writes new stores only: into a non-empty folder it refuses (exit 2), naming the folder and the
    command that adds to a store, not an option it does not have."""
    (tmp_path / "keep").write_text("x")
    r = run("generate", tmp_path, "--messages", "5")
    assert r.returncode == 2 and f"{tmp_path} is not empty: generate writes a new store" in r.stderr
    assert "write --append" in r.stderr and "generate --append" not in r.stderr
    assert (tmp_path / "keep").read_text() == "x" and sorted(p.name for p in tmp_path.iterdir()) == ["keep"]
