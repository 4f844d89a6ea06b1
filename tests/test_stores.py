"""--store arguments and broker names (runtime/stores.py): the user's NAME=PATH, else brokerName from the broker's
settings file carried with the dump, else the folder (never a folder named like "input"); names that clash."""
from __future__ import annotations

import pytest

from runtime.stores import StoreArgumentError, resolve_stores, split_name
from store_format.stores import folder_name
from store_format.write import damage as D

from .conftest import FIXTURES, fixture_store


def _store(path):
    return D.copy_store(fixture_store("basic"), path)


def test_names_from_the_folders_around_the_store_root(tmp_path):
    assert folder_name(tmp_path / "broker-a" / "store") == "broker-a"
    assert folder_name(tmp_path / "incident-42" / "input" / "store") == "incident-42"  # not "input"
    assert folder_name(tmp_path / "b1") == "b1"
    [s] = resolve_stores([str(FIXTURES / "recovered-zero-page" / "input" / "store")])
    assert (s.name, s.named_by) == ("recovered-zero-page", "folder")


def test_the_users_name_and_the_brokers_own(tmp_path):
    root = _store(tmp_path / "dump" / "input" / "store")
    assert split_name(f"x={root}") == ("x", str(root)) and split_name(str(root)) == (None, str(root))
    [s] = resolve_stores([f"broker-x={root}"])
    assert (s.name, s.named_by, s.path.as_typed) == ("broker-x", "user", str(root))
    # the broker persists its settings in store/config/broker.properties when started without -c
    (root / "config" / "broker.properties").write_text("brokerClusterName = c1\nbrokerName = broker-b\n")
    [s] = resolve_stores([str(root)])
    assert (s.name, s.named_by) == ("broker-b", "config")
    [s] = resolve_stores([f"mine={root}"])
    assert s.name == "mine"  # the user's name wins
    # a broker.conf copied beside the store root
    other = _store(tmp_path / "other" / "store")
    (other.parent / "broker.conf").write_text("brokerName=broker-c\n")
    assert [s.name for s in resolve_stores([str(root), str(other)])] == ["broker-b", "broker-c"]


def test_names_that_clash(tmp_path):
    master = _store(tmp_path / "a-master" / "store")
    slave = _store(tmp_path / "a-slave" / "store")
    for root in (master, slave):  # a master and its slave share a brokerName: their folders tell them apart
        (root / "config" / "broker.properties").write_text("brokerName=broker-a\n")
    assert [(s.name, s.named_by) for s in resolve_stores([str(master), str(slave)])] == \
        [("a-master", "folder"), ("a-slave", "folder")]
    (master / "config" / "broker.properties").unlink()
    twice = _store(tmp_path / "x" / "a-master" / "store")  # the same folder name, no settings file: numbered
    assert [s.name for s in resolve_stores([str(master), str(twice)])] == ["a-master", "a-master-2"]
    with pytest.raises(StoreArgumentError, match="named 'n'"):
        resolve_stores([f"n={master}", f"n={slave}"])
    with pytest.raises(StoreArgumentError, match="NAME=PATH names one store"):
        resolve_stores([f"n={tmp_path}"])


def test_command_line_paths_become_absolute_keeping_names_and_links(tmp_path, monkeypatch):
    """Relative paths are joined to the working folder (executors and Connect servers have their own), with no
    lexical '..' folding (``link/..`` is the parent of the link's target) and ``NAME=PATH`` kept: --store as strings
    (runtime/stores.py parses them), the other paths as Locations that carry that spelling."""
    import argparse

    from runtime.cli import absolute_paths, location_argument

    monkeypatch.chdir(tmp_path)
    args = absolute_paths(argparse.Namespace(store=["a=rel/store", "/abs/store", "link/../x"]))
    assert args.store == [f"a={tmp_path}/rel/store", "/abs/store", f"{tmp_path}/link/../x"]
    out = location_argument("link/..")
    assert (out.as_typed, out.path) == (f"{tmp_path}/link/..", str(tmp_path))
    assert out.child("findings").as_typed == f"{tmp_path}/link/../findings"


def test_a_stores_commitlog_bytes_are_the_same_by_any_path_to_it(tmp_path):
    """runtime.stores.commitlog_bytes lists through the fs seam: a path, a ``file://`` URI, a ``Path`` and another
    file system's URI give the segments' sizes as the OS sees them; no commitlog/ gives 0."""
    import os

    from runtime.stores import commitlog_bytes

    from .support import remotefs

    root = fixture_store("basic")
    want = sum(os.stat(e.path).st_size for e in os.scandir(root / "commitlog") if e.is_file())
    before = dict(remotefs.ROOTS)
    try:
        remote = remotefs.register("cl-bytes", root)
        got = [commitlog_bytes(p) for p in (str(root), f"file://{root}", root, remote)]
    finally:
        remotefs.ROOTS.clear()
        remotefs.ROOTS.update(before)
    assert want > 0 and got == [want] * 4
    assert commitlog_bytes(tmp_path) == 0
