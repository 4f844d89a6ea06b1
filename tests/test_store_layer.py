"""The Spark-free store layer (store_format.stores, .plan, .scan; issue 30): one discovery and one naming rule for
every reader, the written end of a segment decided by its content however the file lies on disk, and one split
policy."""
from __future__ import annotations

import errno
import os
import shutil
from pathlib import Path

import pyarrow.fs as pafs
import pytest

from store_format import fs
from store_format.commitlog import list_segments
from store_format.plan import MAX_RANGE_HELD, MAX_RANGE_STREAMED, plan_ranges, range_size, written_end
from store_format.stores import find_stores, part_inputs

from .conftest import FIXTURES, fixture_store

PAGE = 4096


def _data_extents(path: Path) -> list[tuple[int, int]] | None:
    with open(path, "rb") as f:
        return fs.data_extents(f.fileno(), os.path.getsize(path))


def _lay(path: Path, content: bytes, how: str) -> Path:
    """``content`` laid down as a file: ``dense`` (every byte written), ``sparse`` (the data, then a hole to the
    end), ``sparse+block`` (as sparse, then the last 4 KiB block written out as zeros: how copy tools that end a
    sparse file by writing its last byte lay it down)."""
    data = len(content.rstrip(b"\0"))
    with open(path, "wb") as f:
        if how == "dense":
            f.write(content)
        else:
            f.write(content[:data])
            f.truncate(len(content))
            if how == "sparse+block":
                f.seek(len(content) - PAGE)
                f.write(bytes(PAGE))
    return path


def test_the_written_end_is_decided_by_the_content_however_the_segment_lies(tmp_path):
    """The broker fixture's newest segment laid four ways (dense, sparse, sparse with an allocated zero block at its
    end, and read through another file system): one written end, the end of the page of its last non-zero byte."""
    [seg] = list_segments(fixture_store("broker") / "commitlog")[-1:]
    content = seg.path.read_bytes()
    expected = -(-len(content.rstrip(b"\0")) // PAGE) * PAGE
    assert 0 < expected < len(content)
    ends = {}
    for how in ("dense", "sparse", "sparse+block"):
        path = _lay(tmp_path / how, content, how)
        assert path.read_bytes() == content
        ends[how] = written_end(fs.resolve(path), len(content))
    remote = fs.Location(pafs.SubTreeFileSystem(str(tmp_path), pafs.LocalFileSystem()), "dense")
    assert remote.local_path is None
    ends["remote"] = written_end(remote, len(content))
    assert ends == dict.fromkeys(ends, expected)
    # where the file system tells holes apart, the layouts are what the test says they are: the sparse one with
    # an allocated last block is the case whose allocation once decided the answer (data up to that block)
    extents = _data_extents(tmp_path / "sparse+block")
    if extents is not None and extents != [(0, len(content))]:
        assert extents[-1][1] == len(content) and len(extents) >= 2


def test_the_audit_plans_the_same_ranges_however_the_fixture_was_copied(tmp_path):
    """A copy of a store whose newest segment is sparse with an allocated last block plans the same data bytes as
    the fixture itself, and as the same store read through another file system."""
    from jobs.audit.inputs import StoreRef
    from jobs.audit.plan import plan_broker
    from store_format.plan import segment_data

    root = tmp_path / "broker" / "store"
    shutil.copytree(fixture_store("broker"), root)
    newest = list_segments(root / "commitlog")[-1]
    _lay(newest.path, newest.path.read_bytes(), "sparse+block")

    def data(path: str) -> dict:
        plan = plan_broker(StoreRef("b", fs.resolve(path), path))
        return segment_data([("b", s) for s in plan.segments])

    local = data(str(root))
    assert local == data(str(fixture_store("broker")))
    fs.register_filesystem("layertest", lambda uri: (pafs.SubTreeFileSystem(str(tmp_path), pafs.LocalFileSystem()),
                                                     uri.split("://", 1)[1]))
    assert data("layertest://broker/store") == local


def test_one_naming_rule_for_the_sources_and_the_jobs(tmp_path):
    """A copy in ``incident-7/input/store`` is broker ``incident-7`` for a data source's planning as for every job's
    --store (the generic folder names passed over); a folder of store roots names each by its entry."""
    from runtime.stores import resolve_stores

    root = tmp_path / "incident-7" / "input" / "store"
    shutil.copytree(fixture_store("basic"), root)
    assert [i.broker for i in part_inputs(str(root), "commitlog")] == ["incident-7"]
    assert [s.name for s in resolve_stores([str(root)])] == ["incident-7"]
    assert [i.broker for i in part_inputs(str(root / "commitlog"), "commitlog")] == ["incident-7"]
    both = tmp_path / "both"
    for name in ("broker-a", "broker-b"):
        shutil.copytree(fixture_store("broker"), both / name / "store")
    assert [i.broker for i in part_inputs(str(both), "index")] == ["broker-a", "broker-b"]
    assert [s.name for s in resolve_stores([str(both)])] == ["broker-a", "broker-b"]
    [found] = find_stores(str(root / "commitlog" / list_segments(root / "commitlog")[0].name))
    assert found.root.path == str(root) and found.file is not None


def test_one_split_policy_two_bounds():
    """The data source and the audit cut by one policy: about TASKS_PER_CORE ranges a core from 32 MiB, at most
    256 MiB for a task that streams its rows and 64 MiB for one that holds its range."""
    mib = 1 << 20
    assert range_size(600 * mib, 2, largest=MAX_RANGE_STREAMED) == 100 * mib
    assert range_size(600 * mib, 2, largest=MAX_RANGE_HELD) == 64 * mib
    assert range_size(10 * mib, 2) == 32 * mib and range_size(10 * mib, 2, 5 * mib) == 5 * mib
    assert plan_ranges([], None, 2) == []


def test_a_fifo_segment_is_planned_without_being_opened(tmp_path):
    """The listing looks, never opens: a FIFO where a segment belongs is left out of the plan (store_format.fs
    reports it), and planning does not block on it."""
    root = tmp_path / "store"
    shutil.copytree(fixture_store("basic"), root)
    try:
        os.mkfifo(root / "commitlog" / "00000000000001048576")
    except OSError as e:
        if e.errno in (errno.EPERM, errno.ENOSYS):
            pytest.skip("no FIFOs here")
        raise
    [inp] = part_inputs(str(root), "commitlog")
    from store_format.commitlog import list_segment_files

    assert [s.name for s in list_segment_files(inp.loc)] == [s.name for s in list_segments(FIXTURES / "basic" / "store"
                                                                                          / "commitlog")]


# ---- the 5.x parts (issue 32): the timer log is listed as the commitlog is, and its files are parts of the store


def _timer_store(tmp_path) -> Path:
    from store_format.write.damage import copy_store

    from .conftest import FIXTURES_5X

    return copy_store(FIXTURES_5X / "v5-timer" / "store", tmp_path / "store")


def test_the_timer_log_and_the_commitlog_share_one_listing(tmp_path):
    """``Store`` lists ``timerlog/`` once, as ``commitlog/`` is listed (store_format.rolled.list_folder): every file
    with what is wrong with it, and the broker's view (20-digit names, by offset) derived from it."""
    from store_format import rolled
    from store_format.commitlog import Segment
    from store_format.store import Store

    root = _timer_store(tmp_path)
    (root / "timerlog" / "notes.txt").write_bytes(b"x")
    os.truncate(root / "timerlog" / "00000000000000002048", 1000)
    store = Store(root)
    files = {f.name: f for f in store.timer_log_files}
    assert sorted(files) == ["00000000000000000000", "00000000000000002048", "notes.txt"]
    assert files["00000000000000000000"].problems == ()
    assert files["notes.txt"].base_offset is None and files["notes.txt"].problems[0][0] == "BAD_FILE_NAME"
    [(kind, text)] = files["00000000000000002048"].problems
    assert kind == "BAD_GEOMETRY" and "timer-log file is 1000 bytes, the timer log's file size is 2048" in text
    assert [f.name for f in store.timer_log] == ["00000000000000000000", "00000000000000002048"]
    assert Segment is rolled.RolledFile and all(type(s) is rolled.RolledFile for s in store.segment_files)
    assert [s.name for s in store.segments] == ["00000000000000000000"]


def test_unreadable_timer_files_are_found_through_the_store_parts(tmp_path):
    """A FIFO in ``timerlog/``, a FIFO ``timerwheel`` and a FIFO ``config/timercheck`` are named by
    ``fs.unreadable_entries`` (layout.STORE_PARTS and STORE_ROOT_FILES), each under its part, and never opened."""
    from store_format.store import Store

    root = _timer_store(tmp_path)
    try:
        os.mkfifo(root / "timerlog" / "00000000000000004096")
    except OSError as e:
        if e.errno in (errno.EPERM, errno.ENOSYS):
            pytest.skip("no FIFOs here")
        raise
    (root / "timerwheel").unlink()
    os.mkfifo(root / "timerwheel")
    (root / "config" / "timercheck").unlink()
    os.mkfifo(root / "config" / "timercheck")
    store = Store(root)
    found = {fs.part_of(e, root): Path(e.file).name for e in store.unreadable()}
    assert found == {"timerlog": "00000000000000004096", "timerwheel": "timerwheel", "config": "timercheck"}
    assert [f.name for f in store.timer_log] == ["00000000000000000000", "00000000000000002048"]


def test_a_timer_log_path_names_its_store(tmp_path):
    root = _timer_store(tmp_path)
    for path in (root / "timerlog", root / "timerlog" / "00000000000000002048"):
        [found] = find_stores(str(path))
        assert found.root.path == str(root)


def _unreadable_by_entries(root: Path) -> list[tuple[str, str]]:
    """fs.unreadable_entries' walk through fs.entries (a stat and an Entry of every entry): the definition the local
    walk by scandir must equal."""
    from store_format import layout as L

    out = []

    def visit(folder, depth):
        try:
            found = fs.entries(folder)
        except fs.UnreadableError as e:
            out.append(e)
            return
        for e in found:
            if e.reason is not None:
                out.append(e.error())
            elif e.is_folder and depth > 0:
                visit(e.path, depth - 1)

    for part in L.STORE_PARTS:
        e = fs.entry(root / part.folder)
        if e.kind == "folder" and e.reason is None:
            visit(e.path, part.depth)
    return [(e.file, e.reason) for e in out]


def test_the_unreadable_entries_walk_by_scandir_is_the_walk_by_entries(tmp_path, monkeypatch):
    """A store's unreadable entries, found by os.scandir (a plain file or folder costs its access check alone), are
    the ones the walk through fs.entries finds, in its order and words: FIFOs, dangling links, a link loop, links
    to files and to folders, a file where a queue folder should be, and files and folders a reader may not open (no
    permission: os.access answers for the test, since root may open anything)."""
    root = tmp_path / "store"
    shutil.copytree(fixture_store("basic"), root)
    cq = root / "consumequeue"
    topic = next(p for p in cq.iterdir() if p.is_dir())
    queue = next(p for p in topic.iterdir() if p.is_dir())
    try:
        os.mkfifo(queue / "fifo")
        os.mkfifo(root / "config" / "fifo")
    except OSError as e:
        if e.errno in (errno.EPERM, errno.ENOSYS):
            pytest.skip("no FIFOs here")
        raise
    (queue / "dangling").symlink_to(tmp_path / "nowhere")
    (topic / "loop").symlink_to(topic / "loop")
    (topic / "linked").symlink_to(queue, target_is_directory=True)
    (root / "index" / "linked-file").symlink_to(root / "checkpoint")
    (cq / "a-file-topic").write_bytes(b"x")
    (topic / "7").mkdir()
    (topic / "7" / "00000000000000000000").write_bytes(b"\0" * 20)
    (topic / "9").mkdir()
    real_access = os.access
    monkeypatch.setattr(os, "access", lambda path, mode: False if os.fspath(path).endswith(
        ("/7/00000000000000000000", "/9", "/config/delayOffset.json")) else real_access(path, mode))
    found = [(e.file, e.reason) for e in fs.unreadable_entries(root)]
    assert found == _unreadable_by_entries(root)
    named = {Path(f).name: reason for f, reason in found}
    assert named["00000000000000000000"] == named["9"] == named["delayOffset.json"] == "Permission denied"
    assert {"fifo", "dangling", "loop"} <= set(named) and not {"linked", "linked-file", "a-file-topic"} & set(named)


def test_a_files_zero_tail_is_read_once_in_a_run(tmp_path, monkeypatch):
    """Within a run (fs/zero_tails.py), the first search for a local file's last non-zero byte notes where its zeros
    begin; the run's later searches of it (read_written, a walk's skip_zeros, the state's look) read nothing past
    there.  A file of another length is another file; outside a run nothing is noted."""
    from jobs.audit.state import _Reader
    from store_format import commitlog
    from store_format.fs import maps
    from store_format.fs.zero_tails import ZeroTails, zero_tails_of_the_run, zeros_from

    data, tail = bytes(range(1, 256)) * 4, 1 << 20
    path = tmp_path / "preallocated"
    path.write_bytes(data + bytes(tail))  # dense: its zeros written out, as a copy without holes lays them
    size = len(data) + tail
    reads = []
    real_pread = maps._pread
    monkeypatch.setattr(maps, "_pread", lambda fd, p, n, at: reads.append((at, n)) or real_pread(fd, p, n, at))

    assert fs.read_written(path) == (data, size) and reads  # outside a run: read, nothing noted
    tails = ZeroTails()
    with zero_tails_of_the_run(tails):
        assert fs.read_written(path) == (data, size)
        assert list(tails.zeros_at.values()) == [len(data)]
        reads.clear()
        assert fs.read_written(path) == (data, size)
        assert reads and all(at + n <= len(data) for at, n in reads)  # nothing past the data read again
        with fs.ReadOnlyMap(path) as m:
            assert m.buf.data_from(len(data)) == (size, size)
            assert commitlog.skip_zeros(m.buf, len(data), size) == size
            assert m.written_length() == len(data)
        r = _Reader(path)
        try:
            assert r.written() == len(data)
        finally:
            r.close()
        # a note is trusted: a file whose tail is said to be zeros is searched below it only
        fd = os.open(path, os.O_RDONLY)
        try:
            tails.note(os.fstat(fd), 10)
            assert zeros_from(fd) == 10
        finally:
            os.close(fd)
        assert fs.read_written(path)[0] == data[:10]
        with open(path, "ab") as f:  # grown: another file to the run's notes
            f.write(b"\x07")
        assert fs.read_written(path) == (data + bytes(tail) + b"\x07", size + 1)

    fresh = ZeroTails()
    with zero_tails_of_the_run(fresh), fs.ReadOnlyMap(path) as m:  # a walk's search to the end notes too
        assert commitlog.skip_zeros(m.buf, len(data), size) == size  # stops before the last byte: not noted
        assert fresh.zeros_at == {}
        assert commitlog.skip_zeros(m.buf, len(data), size + 1) == size
        assert fresh.zeros_at == {}
    path.write_bytes(data + bytes(tail))
    with zero_tails_of_the_run(fresh), fs.ReadOnlyMap(path) as m:
        assert commitlog.skip_zeros(m.buf, len(data) + 8, size) == size
        assert list(fresh.zeros_at.values()) == [len(data) + 8]
