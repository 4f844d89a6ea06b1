"""--store mistakes a user makes, refused in words before any Spark session starts: the same store given twice
(under two names, with a trailing slash, through a link, inside a folder of stores also given), and a file that
is not a store (a manifest next to it) or a segment file where a job reads whole stores."""
from __future__ import annotations

import pytest

from jobs import audit, compare, decode, extract, query
from runtime.stores import StoreArgumentError, resolve_stores

from .conftest import FIXTURES, fixture_store

BASIC = fixture_store("basic")


@pytest.fixture
def no_spark(monkeypatch):
    """Fails the test if a job starts a Spark session."""
    import runtime.session

    def refuse(*args, **kwargs):
        raise AssertionError("a Spark session was started before the arguments were refused")

    monkeypatch.setattr(runtime.session, "build_session", refuse)


@pytest.mark.parametrize("twice", [
    lambda b, tmp: [f"a={b}", f"b={b}"],
    lambda b, tmp: [str(b), f"{b}/"],
    lambda b, tmp: [str(b), str(FIXTURES)],  # the folder of stores holds basic/store too
    lambda b, tmp: [str(b), str(_link(tmp, b))],
], ids=["two-names", "trailing-slash", "inside-a-folder", "a-link"])
def test_the_same_store_twice_is_refused_naming_both_arguments(twice, tmp_path):
    args = twice(BASIC, tmp_path)
    with pytest.raises(StoreArgumentError) as e:
        resolve_stores(args)
    assert f"--store {args[0]} and --store {args[1]} are the same store" in str(e.value)


def _link(tmp, target):
    link = tmp / "link-to-basic"
    link.symlink_to(target, target_is_directory=True)
    return link


@pytest.mark.parametrize("job, extra", [
    (audit, ["--out", "{tmp}/out"]),
    (extract, ["--out", "{tmp}/out"]),
    (decode, ["--out", "{tmp}/out"]),
    (query, ["--from", "2020-01-01T00:00Z", "--to", "2030-01-01T00:00Z"]),  # a scan: Spark from the start
    (compare, []),
])
def test_every_job_refuses_a_store_given_twice_before_spark_starts(job, extra, tmp_path, capsys, no_spark):
    argv = ["--store", f"a={BASIC}", f"b={BASIC}", *[x.format(tmp=tmp_path) for x in extra]]
    assert job.main(argv) == 2
    err = capsys.readouterr().err
    assert f"--store a={BASIC} and --store b={BASIC} are the same store" in err
    assert "Traceback" not in err and not (tmp_path / "out").exists()


def test_compare_of_a_store_with_itself_is_refused_before_spark(capsys, no_spark):
    assert compare.main(["--store", str(BASIC), f"{BASIC}/"]) == 2
    err = capsys.readouterr().err
    assert "are the same store" in err and "exactly two" not in err


def test_a_file_that_is_not_a_store_says_what_it_is_and_what_was_expected(capsys, no_spark, tmp_path):
    manifest = FIXTURES / "basic" / "manifest.json"
    assert audit.main(["--store", str(manifest), "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert f"{manifest}: a file that is not a commitlog segment; expected a store root" in err
    assert "single segment" not in err
    segment = BASIC / "commitlog" / f"{0:020d}"
    assert audit.main(["--store", str(segment), "--out", str(tmp_path / "out")]) == 2
    assert f"a single segment file; this job reads whole stores: give its store root, {BASIC}" in \
        capsys.readouterr().err
    # a job that reads one segment takes it
    [s] = resolve_stores([str(segment)], files=True)
    assert s.single_file and s.path.as_typed == str(BASIC)
