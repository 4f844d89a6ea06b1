"""jobs.compare: two dumps of one broker -- an injected divergence is found at the right offset, a lagging
slave is a prefix (no divergence), consume-queue and offset-file differences are named."""
from __future__ import annotations

import io
import json

from jobs import compare
from runtime.output import read_table
from store_format.write import damage
from store_format.write.writer import StoreWriter

from .conftest import fixture_manifest, fixture_store
from .support.writer_support import FIXTURE_START_OFFSET_MS, fixture_config, manifest_record


def run_compare(spark, *argv):
    out = io.StringIO()
    code = compare.run(spark, compare.build_parser().parse_args([str(a) for a in argv]), out=out,
                       err=io.StringIO()).exit_code
    return code, json.loads(out.getvalue())


def test_an_injected_divergence_is_found_at_the_right_offset(spark, tmp_path):
    manifest = fixture_manifest("basic")
    target = manifest["messages"][40]
    hit = damage.flip_body_bit(fixture_store("basic"), tmp_path / "slave", physical_offset=target["commitLogOffset"],
                               bit=13)
    code, s = run_compare(spark, "--store", fixture_store("basic"), "--store", tmp_path / "slave",
                          "--out", tmp_path / "diff")
    assert code == 1 and not s["identical"]
    d = s["commitlog"]["first_divergence"]
    assert d["physical_offset"] == target["commitLogOffset"]
    assert d["first_differing_byte"] == hit.position  # segment 0: file position == physical offset
    assert d["a"]["kind"] == "message" and d["a"]["msg_id"] == target["msgId"] and d["b"]["reason"] == "BAD_CRC"
    items = s["commitlog"]["items"]
    assert items["equal"] == len(manifest["messages"]) - 1 and items["only_a"] == items["only_b"] == 0
    assert items["a_ahead"] == items["b_ahead"] == 0
    assert s["consumequeue"] == [] and s["offset_files"] == []  # the damage touched only the commitlog
    rows = read_table(spark, str(tmp_path / "diff" / "commitlog")).collect()
    assert {r["physical_offset"] for r in rows} == {target["commitLogOffset"]}
    assert json.loads((tmp_path / "diff" / "_manifest.json").read_text())["identical"] is False


def test_one_damaged_record_counts_once_and_text_is_readable(spark, tmp_path):
    """The salvage walk has two items where damage stops it (the stop and the corrupt span from there): the
    comparison counts the record once, in the summary, the listing and the --out table; --print text says it
    in words, no Python reprs."""
    manifest = fixture_manifest("broker")
    target = manifest["messages"][len(manifest["messages"]) // 2]
    damage.flip_body_bit(fixture_store("broker"), tmp_path / "copy", physical_offset=target["commitLogOffset"])
    argv = ["--store", fixture_store("broker"), "--store", tmp_path / "copy"]
    code, s = run_compare(spark, *argv, "--out", tmp_path / "diff")
    assert code == 1 and s["commitlog"]["items"]["different"] == 1
    assert [r["physical_offset"] for r in s["commitlog"]["records"]["different"]] == [target["commitLogOffset"]]
    assert [r["physical_offset"] for r in read_table(spark, str(tmp_path / "diff" / "commitlog")).collect()] == \
        [target["commitLogOffset"]]
    out = io.StringIO()
    compare.run(spark, compare.build_parser().parse_args([str(a) for a in argv] + ["--print", "text"]), out=out,
                err=io.StringIO())
    text = out.getvalue()
    assert "{'" not in text and "': " not in text and "None" not in text, text  # no dict reprs
    assert "1 differ" in text and f"first divergence at physical offset {target['commitLogOffset']:,}" in text
    assert (f"  A: message {target['topic']}/{target['queueId']} at queue offset {target['queueOffset']}, "
            f"msg id {target['msgId']}") in text
    assert "  B: corrupt (" in text and "BAD_CRC)" in text


def write_prefix(root, manifest, n, offsets: dict):
    """The broker fixture's first ``n`` records written by the StoreWriter (same bytes for the same prefix),
    with consumer offsets ``{(group, topic, queue): offset}``."""
    first = manifest["messages"][0]["storeTimestamp"]
    w = StoreWriter(root, fixture_config(manifest), start_time=first + FIXTURE_START_OFFSET_MS["broker"])
    for x in manifest["messages"][:n]:
        w.append(manifest_record(x))
    for (group, topic, q), off in offsets.items():
        w.commit_offset(group, topic, q, off)
    w.close()


def test_a_lagging_slave_is_a_prefix_and_its_differences_are_named(spark, tmp_path):
    manifest = fixture_manifest("broker")
    n = len(manifest["messages"])
    write_prefix(tmp_path / "master", manifest, n, {("g", "BrokerTopic", 0): 3, ("g", "BrokerTopic", 1): 2})
    write_prefix(tmp_path / "slave", manifest, n - 5, {("g", "BrokerTopic", 0): 1, ("g", "BrokerTopic", 1): 2})
    code, s = run_compare(spark, "--store", tmp_path / "master", "--store", tmp_path / "slave")
    assert code == 1
    cl = s["commitlog"]
    assert cl["first_divergence"] is None  # the slave holds an exact prefix
    assert cl["items"]["a_ahead"] == 5 and cl["items"]["equal"] == n - 5 and cl["items"]["b_ahead"] == 0
    assert [r["physical_offset"] for r in cl["records"]["a_ahead"]] == [
        x["commitLogOffset"] for x in manifest["messages"][-5:]]
    assert s["b"]["data_end"] == manifest["messages"][-5]["commitLogOffset"]
    missing = {(x["topic"], x["queueId"]) for x in manifest["messages"][-5:] if x["tranType"] in ("NOT", "COMMIT")}
    assert {(q["topic"], q["queue_id"]) for q in s["consumequeue"]} == missing
    assert all(q["only_a"] >= 1 and q["different"] == 0 and q["only_b"] == 0 for q in s["consumequeue"])
    assert {"file": "consumerOffset.json", "key": "BrokerTopic@g", "queue_id": 0, "a": 3, "b": 1} in s["offset_files"]
    assert not any(o.get("queue_id") == 1 for o in s["offset_files"] if o["file"] == "consumerOffset.json")


def test_identical_copies_exit_0(spark, tmp_path):
    damage.copy_store(fixture_store("broker"), tmp_path / "copy")
    code, s = run_compare(spark, "--store", fixture_store("broker"), "--store", tmp_path / "copy")
    assert code == 0 and s["identical"]
    assert s["commitlog"]["items"]["equal"] == len(fixture_manifest("broker")["messages"])


def test_compare_needs_exactly_two_stores(capsys):
    assert compare.main(["--store", str(fixture_store("basic"))]) == 2
    assert "exactly two" in capsys.readouterr().err


def test_offset_files_are_compared_and_read_once(tmp_path, monkeypatch):
    """A consumerOffset.json one side lacks: its offsets and the file itself are named (readable against missing);
    each store's file is read once, by the compiled scan (a busy broker's is hundreds of MB), never again
    through the generic reader to see whether it was readable."""
    import shutil

    from store_format import config as C
    from store_format import store as store_module
    from store_format.store import Store

    a, b = (shutil.copytree(fixture_store("broker"), tmp_path / side / "store") for side in ("a", "b"))
    (b / "config" / "consumerOffset.json").unlink()
    (b / "config" / "delayOffset.json").write_text("{not json")
    monkeypatch.setattr(C, "_FAST_MIN", 0)  # the fixture's small file read as a big one is
    generic = []
    read_config = C.read_config
    for where in (C, store_module):  # Store.config calls it by its own name
        monkeypatch.setattr(where, "read_config", lambda d, name: generic.append(name) or read_config(d, name))
    diffs = compare.offset_file_diff(Store(a), Store(b))
    files = {(d["file"], d["key"]): (d["a"], d["b"]) for d in diffs}
    assert files[("consumerOffset.json", "(file)")] == ("readable", "missing or unreadable")
    assert files[("delayOffset.json", "(file)")] == ("readable", "missing or unreadable")
    offsets = [d for d in diffs if d["file"] == "consumerOffset.json" and d["key"] != "(file)"]
    assert offsets and all(d["a"] is not None and d["b"] is None for d in offsets)
    assert generic.count("consumerOffset.json") == 1  # store b's: no file for the scan, so the generic reader says so
