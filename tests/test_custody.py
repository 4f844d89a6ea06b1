"""Issue 33, "Custody that sees everything": the audit's fingerprint holds inode and ctime, the stores are
listed again at the end, and a file added, removed, replaced or changed (its mtime set back) during the run is
named as such and fails the run (exit 2), never called "a dangling symbolic link" (runtime/custody.py).

The changes are made at a progress line of the audit (``predicting recovery``: the start's fingerprint is taken,
the scan has not read a byte yet), in process through the audit's progress function, and once end to end in a
subprocess held at that line (tests/support/paused.py)."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pyarrow.fs as pafs
import pytest

from runtime import custody
from runtime.stores import resolve_stores
from store_format import fs

from .conftest import fixture_store

REPO = Path(__file__).resolve().parent.parent
PAUSED = REPO / "tests" / "support" / "paused.py"
TRIGGER = "predicting recovery"


@pytest.fixture
def store(tmp_path) -> Path:
    dst = tmp_path / "store"
    shutil.copytree(fixture_store("basic"), dst)
    return dst


def _next_segment(store: Path) -> Path:
    """A segment a broker rolling to the next file would create."""
    last = sorted((store / "commitlog").iterdir())[-1]
    return store / "commitlog" / f"{int(last.name) + (1 << 30):020d}"


def add(store: Path) -> Path:
    p = _next_segment(store)
    p.write_bytes(b"\0" * 4096)
    return p


def remove(store: Path) -> Path:
    p = store / "commitlog" / "00000000000000000000"
    p.unlink()
    return p


def replace(store: Path) -> Path:
    """The same name, size and mtime, another file (a new inode)."""
    p = store / "consumequeue" / "TopicTest" / "0" / "00000000000000000000"
    st = p.stat()
    tmp = p.with_name(".new")
    shutil.copyfile(p, tmp)
    os.utime(tmp, ns=(st.st_atime_ns, st.st_mtime_ns))
    os.replace(tmp, p)
    return p


def touch_back(store: Path) -> Path:
    """A byte changed in place, size kept and the mtime set back: only the ctime tells (no --sha256)."""
    p = store / "config" / "delayOffset.json"
    st = p.stat()
    data = bytearray(p.read_bytes())
    at = next(i for i, b in enumerate(data) if chr(b).isdigit())
    data[at] = ord("7") if data[at] != ord("7") else ord("8")
    p.write_bytes(bytes(data))
    os.utime(p, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert p.stat().st_size == st.st_size and p.stat().st_mtime_ns == st.st_mtime_ns
    return p


CASES = {"added": add, "removed": remove, "replaced": replace, "changed": touch_back}


# ---------------------------------------------------------------------------------------------------------
# The fingerprint and its comparison (no Spark)


@pytest.mark.parametrize("case", CASES)
def test_each_change_is_named_for_what_it_is(store, case):
    before = custody.fingerprint(custody.input_stats(resolve_stores([str(store)])), sha256=False)
    path = CASES[case](store)
    with pytest.raises(custody.CustodyError) as e:
        custody.check_custody(before, resolve_stores([str(store)]), sha256=False)
    assert e.value.changes == [f"{path}: {case} during the audit" + e.value.changes[0].split(" during the audit")[1]]
    assert "dangling" not in str(e.value)


def test_the_fingerprint_holds_inode_and_ctime_but_the_summary_form_does_not(store):
    fp = custody.fingerprint(custody.input_stats(resolve_stores([str(store)])), sha256=False)
    path = str(store / "checkpoint")
    st = os.stat(path)
    assert fp[path] == {"size": st.st_size, "mtime_ns": st.st_mtime_ns}  # summary.json's "inputs", as before
    assert fp.identity[path] == (st.st_ino, st.st_ctime_ns)



def test_the_listing_with_its_stats_fingerprints_as_the_listing_stated_again(store, tmp_path):
    """custody.input_stats (one walk, each stat the listed entry's) fingerprints every file as input_files and a
    stat of each path do, in the same order (the walk's own, several roots merged), links to files followed (their
    target's stat), a link to a folder, a dangling link, a loop and a FIFO left out; a store on another file system
    (a StorePath) too."""
    (store / "config" / "delay.link").symlink_to(store / "config" / "delayOffset.json")
    (store / "linked-commitlog").symlink_to(store / "commitlog", target_is_directory=True)
    (store / "index" / "dangling").symlink_to(tmp_path / "nowhere")
    (store / "loop").symlink_to(store / "loop")
    os.mkfifo(store / "config" / "fifo")
    (store / "config" / "a").mkdir()  # a folder's files before a sibling file named after it ("a-b" < "a/x" as text)
    for name in ("a/x", "a-b", "a.b", "a0"):
        (store / "config" / name).write_bytes(b"1")
    roots = resolve_stores([str(store)])
    listed = list(custody.input_stats(roots))
    assert [p for p, _ in listed] == [str(p) for p in custody.input_files(roots)]  # a local file's path as text
    several = [store / "config", store / "checkpoint", store / "commitlog", store / "config" / "a"]  # merged, in order
    assert [p for p, _ in custody.input_stats(several)] == [str(p) for p in custody.input_files(several)]
    relative = os.path.relpath(store / "config", os.getcwd())  # spelled as Path spells it, from a relative root too
    assert [p for p, _ in custody.input_stats([relative])] == [str(p) for p in custody.input_files([relative])]
    by_stats = custody.fingerprint(listed, sha256=True)
    by_paths = custody.fingerprint([(p, p.stat()) for p in custody.input_files(roots)], sha256=True)  # a stat a path
    assert list(by_stats.items()) == list(by_paths.items()) and by_stats.identity == by_paths.identity
    link = str(store / "config" / "delay.link")
    assert by_stats.identity[link] == by_stats.identity[str(store / "config" / "delayOffset.json")]
    remote = fs.StorePath(fs.Location(pafs.SubTreeFileSystem(str(store), pafs.LocalFileSystem()), ""))
    far = list(custody.input_stats([remote]))
    assert len(far) > 20
    assert [p for p, _ in far] == custody.input_files([remote])
    assert custody.fingerprint(far, sha256=False) == custody.fingerprint(
        [(p, p.stat()) for p in custody.input_files([remote])], sha256=False)


def test_a_file_that_vanished_is_no_such_file_not_a_dangling_link(tmp_path):
    gone = tmp_path / "gone"
    with pytest.raises(fs.UnreadableError) as e:
        fs.open_fd(gone)
    assert e.value.reason == "no such file"
    link = tmp_path / "link"
    link.symlink_to(tmp_path / "nowhere")
    with pytest.raises(fs.UnreadableError) as e:
        fs.open_fd(link)
    assert e.value.reason == "no such file: a dangling symbolic link"


def _files_under_entries(top):
    """The walk fs.files_under replaced: every folder listed through fs.entries (a stat of every entry)."""
    if top.is_file():
        yield top
        return
    pending = [top]
    while pending:
        try:
            found = fs.entries(pending.pop())
        except fs.UnreadableError:
            continue
        for e in found:
            if e.is_file:
                yield e.path
            elif e.is_folder and not os.path.islink(e.path):
                pending.append(e.path)


def test_the_listing_by_scandir_is_the_listing_by_entries(store, tmp_path):
    """fs.files_under lists a local folder by os.scandir (an entry's kind from its name's d_type): the same files
    as the walk through fs.entries (a stat of every entry), on a store with what a hostile dump holds besides its
    files: links to files (followed) and to folders (not walked into), a dangling link, a link loop, a FIFO, an
    empty folder, a folder without permissions, a store that is one file."""
    (store / "config" / "delay.link").symlink_to(store / "config" / "delayOffset.json")
    (store / "linked-commitlog").symlink_to(store / "commitlog", target_is_directory=True)
    (store / "index" / "dangling").symlink_to(tmp_path / "nowhere")
    (store / "loop").symlink_to(store / "loop")
    os.mkfifo(store / "config" / "fifo")
    (store / "consumequeue" / "empty").mkdir()
    shut = store / "consumequeue" / "shut"
    shut.mkdir()
    (shut / "0").write_bytes(b"x")
    shut.chmod(0)
    try:
        scanned = list(fs.files_under(store))
        walked = list(_files_under_entries(store))
        assert sorted(map(str, scanned)) == sorted(map(str, walked))
        names = {p.name for p in scanned}
        assert "delay.link" in names and not {"fifo", "dangling", "loop", "empty"} & names
        assert not any("linked-commitlog" in str(p) for p in scanned)
        one = store / "config" / "delayOffset.json"
        assert list(fs.files_under(one)) == list(_files_under_entries(one)) == [one]
        assert list(fs.files_under(tmp_path / "nothing")) == []
    finally:
        shut.chmod(0o755)


# ---------------------------------------------------------------------------------------------------------
# The audit (Spark's session fixture; the change made at a progress line)


@pytest.mark.parametrize("case", CASES)
def test_a_change_during_the_audit_fails_custody_naming_it(spark, store, tmp_path, monkeypatch, case):
    from jobs.audit import job as audit

    said, changed = audit.progress, []

    def progress(message):
        said(message)
        if message == TRIGGER:
            changed.append(CASES[case](store))

    monkeypatch.setattr(audit, "progress", progress)
    args = audit.build_parser().parse_args(["--store", str(store), "--out", str(tmp_path / "out"), "--no-report"])
    with pytest.raises(custody.CustodyError) as e:
        audit.run(spark, args)
    assert changed and f"{changed[0]}: {case} during the audit" in str(e.value)
    assert "dangling" not in str(e.value)
    assert not (tmp_path / "out" / "summary.json").exists()


@pytest.mark.spark
def test_a_segment_removed_mid_run_ends_the_audit_with_exit_2_and_one_custody_line(store, tmp_path):
    env = {**os.environ, "PYSPARK_PYTHON": sys.executable, "PYTHONPATH": str(REPO)}
    p = subprocess.Popen([sys.executable, str(PAUSED), "--at", TRIGGER, "--then", "stdin", "--",
                          "jobs", "audit", "--store", str(store), "--out", str(tmp_path / "out")],
                         cwd=REPO, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         text=True)
    try:
        for line in p.stderr:
            if TRIGGER in line:
                break
        gone = remove(store)
        out, err = p.communicate("go\n", timeout=240)
    finally:
        if p.poll() is None:
            p.kill()
            p.communicate()
    assert p.returncode == 2, err
    errors = [ln for ln in err.splitlines() if ln.startswith("audit: error:")]
    assert errors == [f"audit: error: input files changed during the audit (chain of custody broken): "
                      f"{gone}: removed during the audit"], err
    assert "dangling" not in err and "Traceback" not in err
