"""Bad input at scale (issue 40): a folder of more files than one run can hold.  The audit lists at most --max-files
files of each consume-queue folder and --max-segments of ``commitlog/`` (store_format.rolled.FileLimit): past them the
first whole queues in name order and the newest segments are audited, the rest only counted, and a ``broker.files_skipped`` finding names
the folder, its files and what was skipped.  Every listed file costs the driver a few KB through the whole audit
(BENCHMARKS.md "Bad input at scale: many files"), so without the limit a million tiny consume-queue files need GBs.

The memory test runs the whole audit (in the driver, as ``local[N]`` runs it) in a subprocess under an address-space
limit (``resource.setrlimit``) over generated tiny consume-queue files, a scaled case with --max-files set low: the
limited listing passes, every file listed (main before this change) does not."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from store_format import rolled
from store_format.queues import list_queue_files
from store_format.store import Store

from .conftest import fixture_store

REPO = Path(__file__).resolve().parent.parent


def _copy(name: str, to: Path) -> Path:
    shutil.copytree(fixture_store(name), to)
    for p in [to, *to.rglob("*")]:
        p.chmod(0o755 if p.is_dir() else 0o644)
    return to


def _tiny_queues(root: Path, n: int, first: int = 0) -> None:
    """``n`` consume-queue folders of one file of four zero units each (never written), 8 queues a topic."""
    for i in range(first, first + n):
        q = root / "consumequeue" / f"ZTiny{i // 8:06d}" / str(i % 8)
        q.mkdir(parents=True)
        (q / "00000000000000000000").write_bytes(bytes(80))


def test_a_queue_listing_past_its_limit_keeps_whole_queues_and_counts_the_rest(tmp_path):
    """The first queue folders in name order while their files fit; the folders after the first that does not fit
    are counted, never built, and recorded with their number and the first and last skipped."""
    root = _copy("basic", tmp_path / "store")
    every = list_queue_files(root / "consumequeue")
    _tiny_queues(root, 40)
    limit = rolled.FileLimit(len(every) + 20)
    listed = list_queue_files(root / "consumequeue", limit=limit)
    assert [(f.topic, f.queue_id) for f in listed[:len(every)]] == [(f.topic, f.queue_id) for f in every]
    assert len(listed) == len(every) + 20  # the fixture's queues sort first ("%", "R", "T" < "Z")
    assert {f.topic for f in listed[len(every):]} == {"ZTiny000000", "ZTiny000001", "ZTiny000002"}
    [skip] = limit.skipped
    assert (skip.folder, skip.part, skip.files, skip.skipped) == (str(root / "consumequeue"), "consumequeue",
                                                                  len(every) + 40, 20)
    assert skip.what == "every file of 20 queue folder(s), ZTiny000002/4 to ZTiny000004/7 in name order"
    assert rolled.FileLimit(len(every) + 40).skipped == [] and \
        len(list_queue_files(root / "consumequeue", limit=rolled.FileLimit(len(every) + 40))) == len(every) + 40


def test_a_segment_folder_past_its_limit_keeps_the_newest_segments(tmp_path):
    """The newest named segments, then files of other names while room is left; the oldest counted as skipped."""
    root = _copy("basic", tmp_path / "store")
    log = root / "commitlog"
    [seg] = sorted(log.iterdir())
    size = seg.stat().st_size
    for k in (1, 2, 3):  # zero-filled segments after the fixture's: preallocated, never written
        with open(log / f"{k * size:020d}", "wb") as f:
            f.truncate(size)
    (log / "stray.bak").write_bytes(b"x")
    store = Store(root, max_segments=3, max_files=1)
    assert [s.name for s in store.segment_files] == [f"{k * size:020d}" for k in (1, 2, 3)]
    [skip] = store.skipped
    assert (skip.part, skip.files, skip.skipped) == ("commitlog", 5, 2)
    assert skip.what == f"the oldest 1 ({seg.name} to {seg.name}; the units and index entries that point into them " \
                        "are not checked) and 1 file(s) of other names"
    assert (skip.below, skip.most) == (size, 3)
    store = Store(root, max_segments=4)
    assert [s.name for s in store.segment_files] == [seg.name] + [f"{k * size:020d}" for k in (1, 2, 3)]
    assert [s.what for s in store.skipped] == ["1 file(s) of other names"]
    store = Store(root, max_segments=1)
    assert [s.name for s in store.segment_files] == [f"{3 * size:020d}"] and store.skipped[0].skipped == 4
    assert Store(root).skipped == [] and len(Store(root).segment_files) == 5


@pytest.mark.spark
def test_the_audit_names_the_folder_it_skipped_and_audits_the_rest(spark, tmp_path):
    """A broker.files_skipped warning naming the folder, its files and what was skipped; the queues that fit are
    audited."""
    import pyarrow.parquet as pq

    from jobs.audit import build_parser, run

    root = _copy("basic", tmp_path / "store")
    _tiny_queues(root, 30)
    every = len(list_queue_files(root / "consumequeue"))
    args = build_parser().parse_args(["--store", str(root), "--out", str(tmp_path / "out"), "--no-report",
                                      "--max-files", str(every - 10)])
    done = run(spark, args)
    found = pq.read_table(tmp_path / "out" / "findings").to_pylist()
    [skip] = [f for f in found if f["check"] == "broker.files_skipped"]
    assert skip["severity"] == "warning" and skip["file"] == str(root / "consumequeue")
    assert skip["message"] == (f"{root / 'consumequeue'} holds {every} files, more than --max-files {every - 10}: 10 "
                               "of them were not read (every file of 10 queue folder(s), ZTiny000002/4 to "
                               "ZTiny000003/5 in name order)")
    assert dict(skip["details"])["skipped"] == "10"
    assert done.summary_data["counts"]["per_check"]["broker.files_skipped"] == {"severity": "warning", "count": 1}
    [broker] = done.summary_data["brokers"]  # the queues audited: the fixture's and the first 20 tiny ones
    assert broker["geometry"]["queues"] == len(Store(fixture_store("basic")).queue_models) + 20


@pytest.mark.spark
def test_an_audit_past_the_limit_of_segments_reads_the_newest_and_judges_nothing_pointing_before_them(spark, tmp_path):
    """A log of 16 KiB segments, --max-segments 10: the ten newest segments are audited, the findings are those of an
    audit of every segment less the ones about what the skipped segments hold or what points into them (no unit or
    index entry into them is "not a message"), and broker.files_skipped names the oldest segments."""
    import pyarrow.parquet as pq

    from jobs.audit import build_parser, run
    from store_format.write.generate import TrafficConfig, generate_store
    from store_format.write.writer import WriterConfig

    store = tmp_path / "store"
    generate_store(store, TrafficConfig(messages=600, topics=2, queues=2, seed=5),
                   WriterConfig(mappedFileSizeCommitLog=16384))
    segments = sorted(p.name for p in (store / "commitlog").iterdir())
    assert len(segments) > 12

    def audit(out, *more):
        done = run(spark, build_parser().parse_args(["--store", str(store), "--out", str(out), "--no-report", *more]))
        return done, pq.read_table(out / "findings").to_pylist()

    _, every = audit(tmp_path / "every")
    done, capped = audit(tmp_path / "capped", "--max-segments", "10")
    [skip] = [f for f in capped if f["check"] == "broker.files_skipped"]
    old = len(segments) - 10
    assert f"more than --max-segments 10: {old} of them" in skip["message"]
    assert skip["message"].endswith(f"{len(segments) - 10} of them were not read (the oldest {old} ({segments[0]} to "
                                    f"{segments[old - 1]}; the units and index entries that point into them are "
                                    "not checked))")
    assert not [f for f in capped if f["check"].endswith(("entry_not_a_message", "entry_past_end"))]
    assert {f["check"] for f in capped} - {"broker.files_skipped"} <= {f["check"] for f in every}
    [broker] = done.summary_data["brokers"]
    assert (broker["geometry"]["segments"], broker["geometry"]["first_segment"]) == (10, segments[old])


_AUDIT_UNDER_A_LIMIT = r"""
import json, os, resource, shutil, sys
from pathlib import Path
from types import SimpleNamespace

fixture, folder, files, budget = Path(sys.argv[1]), Path(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
more = sys.argv[5:]  # the audit's own arguments (--max-files N)


def tiny_queues(root, n):
    # the fixture, plus n consume-queue files of four zero units each, 8 queues a topic, every 50th under a junk name
    # and every 97th empty
    shutil.copytree(fixture, root)
    for p in [root, *root.rglob("*")]:
        p.chmod(0o755 if p.is_dir() else 0o644)
    for i in range(n):
        q = root / "consumequeue" / f"ZTiny{i // 8:06d}" / str(i % 8)
        q.mkdir(parents=True)
        (q / ("00000000000000000000" if i % 50 else "junk-name")).write_bytes(b"" if i % 97 == 0 else bytes(80))


from jobs.audit import build_parser, run

spark = SimpleNamespace(sparkContext=SimpleNamespace(master="local[2]", defaultParallelism=2))  # tasks in the driver


def audit(store, out, *extra):
    return run(spark, build_parser().parse_args(["--store", str(store), "--out", str(out), "--no-report",
                                                 "--executor", "driver", *extra]))


audit(fixture, folder / "warm")  # the code paths loaded and the thread pools started before the limit
tiny_queues(folder / "store", files)
size = next(int(l.split()[1]) for l in open("/proc/self/status") if l.startswith("VmSize:")) * 1024
resource.setrlimit(resource.RLIMIT_AS, (size + budget, size + budget))
try:
    done = audit(folder / "store", folder / "out", *more)
except MemoryError as e:
    print(json.dumps({"memory_error": str(e)}))
    sys.exit(0)
import pyarrow.parquet as pq
found = pq.read_table(folder / "out" / "findings", columns=["check", "message"]).to_pylist()
print(json.dumps({"exit": done.exit_code,
                  "skipped": [f["message"] for f in found if f["check"] == "broker.files_skipped"]}))
"""


def _audit_under_a_limit(tmp_path: Path, files: int, budget: int, *more: str) -> dict:
    env = {**os.environ, "PYTHONPATH": str(REPO), "MALLOC_ARENA_MAX": "2"}
    # threads of 2 MiB stacks: glibc gives each new thread a stack of the stack limit (8 MiB here) of address space,
    # and which of Arrow's and the audit's threads happen to start under the limit moved the peak by 20 MiB
    small_stacks = ["sh", "-c", 'ulimit -S -s 2048 && exec "$0" "$@"']
    done = subprocess.run([*small_stacks, sys.executable, "-c", _AUDIT_UNDER_A_LIMIT, str(fixture_store("basic")),
                           str(tmp_path), str(files), str(budget), *more], capture_output=True, text=True, env=env,
                          timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.mark.slow
def test_many_tiny_queue_files_are_audited_within_a_memory_limit(tmp_path):
    """30,000 tiny consume-queue files, --max-files 1,000: the audit ends within 88 MiB of address space above what
    the process had, the skipped files named.  Its peak without a limit is 59-63 MiB above it (threads of 2 MiB
    stacks); with every file listed (the same script without the option) the peak is 148-152 MiB above it."""
    got = _audit_under_a_limit(tmp_path, 30_000, 88 << 20, "--max-files", "1000")
    assert "memory_error" not in got, got
    [said] = got["skipped"]
    assert said.startswith(f"{tmp_path / 'store' / 'consumequeue'} holds 30025 files, more than --max-files 1000: "
                           "29025 of them were not read (every file of 29,025 queue folder(s), ZTiny"), said
