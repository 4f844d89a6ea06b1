"""The writer keeps a bounded set of open files (store_format.write.openfiles): ``write``, ``write --append`` and
``replay --repair`` of a store with 50,000 consume queues under ``ulimit -n 1024``, and the pool's own rules.

The big stores are tiny on disk: one small record per queue, one-unit consume-queue files (20 bytes, the
smallest mappedFileSizeConsumeQueue), 1 MiB segments, a 16-slot index."""
from __future__ import annotations

import json
import os
import resource
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from store_format import layout as L
from store_format.consumequeue import discover_queues, read_queue
from store_format.store import Store
from store_format.write.openfiles import MAX_OPEN_FILES, OpenFiles

REPO = Path(__file__).resolve().parent.parent
GEOMETRY = {"mappedFileSizeConsumeQueue": 20, "mappedFileSizeCommitLog": 1 << 20, "maxHashSlotNum": 16,
            "maxIndexNum": 64}
T0 = 1_700_000_000_000
# (queues, topics, RLIMIT_NOFILE): the case, and a small one with a small limit for the fast tests
BIG = (50_000, 100, 1024)
SMALL = (2_000, 10, 64)
SIZES = [pytest.param(SMALL, id="2000-queues-ulimit-64"),
         pytest.param(BIG, id="50000-queues-ulimit-1024", marks=pytest.mark.slow)]


def run_limited(args, fd_limit: int, **kw) -> subprocess.CompletedProcess:
    """``args`` in a subprocess whose RLIMIT_NOFILE is ``fd_limit`` (soft and hard)."""
    def limit():
        resource.setrlimit(resource.RLIMIT_NOFILE, (fd_limit, fd_limit))

    return subprocess.run([sys.executable, *map(str, args)], cwd=REPO, capture_output=True, text=True,
                          preexec_fn=limit, timeout=1200, **kw)


def queue_input(path: Path, queues: int, topics: int, first_ts: int) -> Path:
    """One 1-byte record for each queue (``topics`` topics, the same number of queue ids each), as ``write``
    reads them."""
    per = queues // topics
    with open(path, "w", encoding="utf-8") as f:
        for i in range(queues):
            t, q = divmod(i, per)
            f.write(json.dumps({"topic": f"Q{t}", "queue_id": q, "body": "eA==", "born_timestamp": first_ts + i,
                                "store_timestamp": first_ts + i}) + "\n")
    return path


def units_by_queue(root: Path) -> dict:
    """(topic, queue id) -> the queue's valid units, read back."""
    return {key: [u for u in read_queue(files, stop_at_invalid=True) if u.kind == "entry"]
            for key, files in discover_queues(root / "consumequeue").items()}


def write_store(base: Path, size, append_to: Path | None = None, first_ts: int = T0):
    """``store_format write`` (``--append`` to ``append_to``) of a record per queue under the size's limit."""
    queues, topics, fd_limit = size
    conf = base / "broker.conf"
    conf.write_text("".join(f"{k}={v}\n" for k, v in GEOMETRY.items()))
    store = append_to or base / "store"
    name = f"in-{first_ts}.jsonl"
    run = run_limited(["-m", "store_format", "write", store, *(["--append"] if append_to else []),
                       "--input", queue_input(base / name, queues, topics, first_ts), "--config", conf], fd_limit)
    assert run.returncode == 0, run.stderr[-2000:]
    assert f"{queues} consume queue(s)" in run.stderr
    return store


@pytest.fixture(scope="module")
def big_store(tmp_path_factory):
    """A 50,000-queue store written by ``write`` under ulimit -n 1024 (the replay's source); removed after the module
    (~400 MB, not kept until the session ends)."""
    base = tmp_path_factory.mktemp("open-files")
    yield write_store(base, BIG)
    shutil.rmtree(base, ignore_errors=True)


@pytest.mark.parametrize("size", SIZES)
def test_write_and_append_keep_a_bounded_set_of_open_files(size, tmp_path):
    """``write`` of one record per queue, then ``write --append`` reopening every queue and adding one more to
    each (a second one-unit file each), under a descriptor limit far below the queue count."""
    queues, topics, _ = size
    store = write_store(tmp_path, size)
    units = units_by_queue(store)
    assert len(units) == queues and {len(us) for us in units.values()} == {1}
    frames = {f.physical_offset: f for f in Store(store).walk_commitlog(decode=True) if f.kind == "message"}
    assert len(frames) == queues
    for key in [("Q0", 0), (f"Q{topics // 3}", 123), (f"Q{topics - 1}", queues // topics - 1)]:
        (u,) = units[key]  # each queue's one unit points at its own record
        msg = frames[u.physical_offset].message
        assert (msg.topic, msg.queue_id, msg.queue_offset, u.size) == (*key, 0, msg.store_size)
    assert not (store / "abort").exists()  # a clean shutdown

    write_store(tmp_path, size, append_to=store, first_ts=T0 + queues)
    units = units_by_queue(store)
    assert len(units) == queues and {len(us) for us in units.values()} == {2}
    assert [u.queue_offset for u in units[("Q1", 7)]] == [0, 1]
    assert sum(1 for f in Store(store).walk_commitlog(decode=False) if f.kind == "message") == 2 * queues
    assert not (store / "abort").exists()


@pytest.mark.spark
@pytest.mark.slow
def test_replay_repair_of_50000_queues_under_ulimit_1024(big_store, tmp_path):
    """``replay --repair`` (a job's main with its own Spark driver, in a subprocess under the limit) writes the
    50,000 queues again."""
    queues, _, fd_limit = BIG
    out = tmp_path / "repaired"
    env = {**os.environ, "PYSPARK_PYTHON": os.environ.get("PYSPARK_PYTHON", sys.executable)}
    rep = run_limited(["-m", "jobs.replay", "--repair", big_store, "--out", out, "--format", "json",
                       *(a for k, v in GEOMETRY.items() for a in ("--set", f"{k}={v}"))], fd_limit, env=env)
    assert rep.returncode == 0, rep.stderr[-3000:]
    summary = json.loads(rep.stdout.strip().splitlines()[-1])
    assert summary["counts"]["written"] == summary["counts"]["selected"] == queues
    assert summary["queues"] == queues
    units = units_by_queue(out)
    assert len(units) == queues and {len(us) for us in units.values()} == {1}


# ---- the pool's rules, on a few files ----


def test_the_pool_closes_the_least_recently_used_and_a_reopened_file_keeps_its_bytes(tmp_path):
    pool = OpenFiles(limit=3)
    files = [pool.file(tmp_path / f"f{i}", 64, create=True) for i in range(5)]
    assert len(pool) == 3 and [f.fd >= 0 for f in files] == [False, False, True, True, True]
    files[0].write(0, b"first")  # reopened: f2, the least recently used, is closed for it
    assert [f.fd >= 0 for f in files] == [True, False, False, True, True]
    files[3].map[8:12] = b"map!"  # a mapping is a use too
    files[1].write(4, b"x")
    assert [f.fd >= 0 for f in files] == [True, True, False, True, False]
    files[0].write(5, b"-again")
    pool.close_all()
    assert len(pool) == 0 and pool.evicted >= 3
    assert (tmp_path / "f0").read_bytes() == b"first-again" + bytes(53)
    assert (tmp_path / "f3").read_bytes() == bytes(8) + b"map!" + bytes(52)
    assert (tmp_path / "f1").read_bytes() == bytes(4) + b"x" + bytes(59)
    assert all(os.path.getsize(tmp_path / f"f{i}") == 64 for i in range(5))  # preallocated, sparse


def test_a_pinned_file_or_a_held_view_is_never_closed_for_room(tmp_path):
    pool = OpenFiles(limit=2)
    a = pool.file(tmp_path / "a", 16, create=True)
    a.pin()  # a write in flight on the I/O thread
    b = pool.file(tmp_path / "b", 16, create=True)
    view = memoryview(b.map)  # a reader holds a view of b's mapping
    c = pool.file(tmp_path / "c", 16, create=True)
    assert a.fd >= 0 and b.fd >= 0 and c.fd >= 0  # over the limit rather than pull either away
    a.writev(0, [b"ab", b"cd"])
    a.unpin()
    view.release()
    pool.file(tmp_path / "d", 16, create=True)
    assert a.fd < 0  # no longer pinned: the least recently used goes
    pool.close_all()
    assert (tmp_path / "a").read_bytes() == b"abcd" + bytes(12)


def test_the_limit_is_well_below_1024_and_follows_a_lower_rlimit():
    assert 2 * MAX_OPEN_FILES <= 1024 // 2  # a mapped file costs two descriptors
    code = ("import resource; resource.setrlimit(resource.RLIMIT_NOFILE, (64, 64)); "
            "from store_format.write.openfiles import OpenFiles; print(OpenFiles().limit)")
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, check=True)
    assert int(out.stdout) == 16
    assert OpenFiles().limit <= MAX_OPEN_FILES


def test_the_writer_never_holds_more_than_its_limit(tmp_path):
    """Many queues in-process: the writer's pool stays within its limit while every queue is written."""
    from store_format.write.writer import StoreWriter, WriterConfig
    from store_format.message import Message

    w = StoreWriter(tmp_path / "s", WriterConfig(**GEOMETRY))
    w.open_files.limit = 8
    peak = 0
    for i in range(300):
        w.append(Message(topic=f"T{i % 3}", queue_id=i, body=b"x", store_timestamp=T0 + i, born_timestamp=T0 + i))
        peak = max(peak, len(w.open_files))
    w.close()
    assert peak <= 8 and w.open_files.evicted > 0
    units = units_by_queue(tmp_path / "s")
    assert len(units) == 300 and all(len(us) == 1 for us in units.values())
    assert os.path.getsize(tmp_path / "s" / "consumequeue" / "T1" / "7" / "00000000000000000000") == \
        L.CQ_STORE_UNIT_SIZE
