"""A run's look at local folders, taken once for its walks (store_format/fs/listings.py): the chain of custody, the
unreadable entries, the queue listing and the recovery prediction's load rules each walked a store's whole tree
(a broker of 40,000 queues: 45,000 folders, each walk 0.75-1.9 s).  Within a run's listings a folder is scanned
once; the custody check at the commit still looks afresh; nothing is kept past the bound or after the run lets go."""
import os
import shutil

import pytest

from .conftest import fixture_store
from runtime import custody
from store_format import fs, recovery
from store_format.fs import listings, maps
from store_format.store import Store


@pytest.fixture
def store(tmp_path):
    root = tmp_path / "store"
    shutil.copytree(fixture_store("basic"), root)
    return root


@pytest.fixture
def scans(monkeypatch):
    """Every folder os.scandir was asked for through the listings, in order."""
    seen = []
    real = os.scandir

    def counting(folder="."):
        if not isinstance(folder, int):  # os.scandir of a descriptor (shutil's walks) is no folder of a store
            seen.append(os.fspath(folder))
        return real(folder)

    monkeypatch.setattr(listings.os, "scandir", counting)
    return seen


def _walk_everything(root):
    before = custody.fingerprint(custody.input_stats([root]), False)
    unreadable = maps.unreadable_entries(root)
    st = Store(root)
    queues = [(q.topic, q.queue_id, [f.base_offset for f in q.files]) for q in st.queue_models]
    problems = recovery.store_load_problems(st, "4.x")
    return before, unreadable, queues, problems


def test_a_runs_walks_scan_each_folder_once_and_see_what_walks_outside_a_run_see(store, scans):
    alone = _walk_everything(store)
    scanned_alone = list(scans)
    scans.clear()
    with fs.listings_of_the_run(fs.RunListings()):
        together = _walk_everything(store)
    assert together[0] == alone[0] and together[0].identity == alone[0].identity
    assert together[1:] == alone[1:]
    assert len(scans) == len(set(scans))  # mutation: without the run's listings each walk scans again
    assert set(scans) == set(scanned_alone) and len(scanned_alone) > len(scans)


def test_the_custody_check_looks_afresh_within_a_run(store):
    with fs.listings_of_the_run(fs.RunListings()):
        before = custody.fingerprint(custody.input_stats([store]), False)
        (store / "consumequeue" / "added").mkdir()
        (store / "consumequeue" / "added" / "00000000000000000000").write_bytes(b"x")
        with pytest.raises(custody.CustodyError, match="added during the audit"):
            custody.check_custody(before, [store], False)


def test_nothing_is_kept_past_the_bound_or_after_the_run_lets_go(store, scans):
    small = fs.RunListings(most=3)
    with fs.listings_of_the_run(small):
        fs.scanned(store)  # 6 entries: past the bound
        fs.scanned(store)
    assert scans == [str(store)] * 2 and not small.folders
    scans.clear()
    run = fs.RunListings()
    with fs.listings_of_the_run(run):
        fs.scanned(store)
        fs.scanned(store)
        assert scans == [str(store)]
        fs.let_go_of_listings()  # what the audit does before its scan
        fs.scanned(store)
        fs.scanned(store)
    assert scans == [str(store)] * 3 and not run.folders


def test_a_folder_that_cannot_be_listed_raises_for_every_walk(tmp_path):
    with fs.listings_of_the_run(fs.RunListings()):
        for _ in range(2):
            with pytest.raises(FileNotFoundError):
                fs.scanned(tmp_path / "absent")


def test_a_run_limited_to_fewer_files_keeps_fewer_entries():
    """The audit's --max-files bounds what its walks keep too (tests/test_many_files.py's memory limit: 30,000 tiny
    queue files, --max-files 1,000, within 76 MiB, failed with the default bound)."""
    assert fs.run_listings_for(1000).most == listings.ENTRIES_PER_FILE * 1000
    assert fs.run_listings_for(500_000).most == listings.RUN_LISTING_ENTRIES


def test_the_audit_scans_a_folder_once_for_its_walks_and_once_for_its_custody_check(spark, store, scans, tmp_path):
    """Every walk of the audit's run shares one scan of each folder (its metadata family's unreadable_files table
    included: walked after the scan, it listed the whole tree a third time, 0.8 s for 40,000 queues); the custody
    check at the commit looks afresh."""
    from collections import Counter

    from jobs import audit

    args = audit.build_parser().parse_args(["--store", str(store), "--out", str(tmp_path / "out")])
    audit.run(spark, args)
    queue_folder = str(store / "consumequeue" / "TopicBatch" / "0")
    of_store = Counter(f for f in scans if f.startswith(str(store)))
    assert of_store[queue_folder] == 2 and max(of_store.values()) == 2  # mutation: with the table made after the listings are let go, 3
