"""Issue 38 items 1, 2 and 7, issue 37 item 7 (runtime/commit.py): nothing outside a run's own files is ever touched,
and a commit checks what it commits.

* Every forged journal and link of the campaign is planted beside ``--out`` and the real command is run (``decode``
  or ``extract`` through its ``main``: the refusal comes before Spark starts); the input store and a bystander
  folder are hashed before and after -- byte for byte, kinds, modes and links the same -- and the refusal names
  the file and says to remove it, with ``--quiet`` too.
* A control folder swapped for a link into the store while the run runs, then an interrupt: nothing is written
  through the link (a job process held at a progress line: tests/support/paused.py).
* A claim file that names no run: refused with "try again" while it may be being written, taken over once a crash
  provably left it.
* ``--out`` on a scheme whose paths are relative (a ``SubTreeFileSystem`` per bucket) at the bucket's top, one level
  down and deeper, and on the local file system: the files land where the commit looks, and a commit whose staged
  files did not arrive fails naming them.
* Every job with inputs checks their chain of custody before its commit.
"""
from __future__ import annotations

import hashlib
import json
import os
import shutil
import signal
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest

from runtime import commit
from runtime.output import OutputError
from store_format import fs
from store_format.errors import StoreFormatError
from store_format.fs import OUTPUT_MARKER

from .conftest import fixture_store
from .support import remotefs
from .test_custody import touch_back

REPO = Path(__file__).resolve().parent.parent
PAUSED = REPO / "tests" / "support" / "paused.py"
RID = "20240102T030405Z-0123abcd"  # a run id of the right shape, of a run long gone


def tree(root: Path) -> dict:
    """Every entry below ``root`` (links not followed): kind, mode, link target, content hash."""
    out = {}
    for top, dirs, files in os.walk(root):
        for name in sorted(dirs + files):
            p = os.path.join(top, name)
            s = os.lstat(p)
            entry = (stat.S_IFMT(s.st_mode), s.st_mode & 0o7777, s.st_mtime_ns)
            if stat.S_ISLNK(s.st_mode):
                entry += (os.readlink(p),)
            elif stat.S_ISREG(s.st_mode):
                with open(p, "rb") as f:
                    entry += (hashlib.sha256(f.read()).hexdigest(),)
            out[os.path.relpath(p, root)] = entry
    return out


class Scene:
    """A copy of the ``basic`` fixture store, a bystander folder, and ``out``: an earlier output of this suite
    (``previous=True``) or nothing; ``control`` beside it."""

    def __init__(self, tmp_path: Path, previous: bool = True):
        self.base = tmp_path
        self.store = tmp_path / "store"
        shutil.copytree(fixture_store("basic"), self.store)
        self.bystander = tmp_path / "bystander"
        (self.bystander / "keep").mkdir(parents=True)
        (self.bystander / "keep" / "precious.txt").write_text("not the suite's")
        self.out = tmp_path / "out"
        if previous:
            self.out.mkdir()
            (self.out / OUTPUT_MARKER).write_text(json.dumps({"tool": commit.TOOL, "state": "committed",
                                                              "run_id": "20240101T000000Z-00000000"}))
            (self.out / "part-0.parquet").write_bytes(b"the previous output")
        self.control = tmp_path / ".out.rocketmq-forensics"

    def snapshot(self) -> dict:
        return {"store": tree(self.store), "bystander": tree(self.bystander),
                "out": tree(self.out) if self.out.exists() else None}

    def journal(self, data: dict, name: str = f"commit-{RID}.json") -> Path:
        self.control.mkdir(exist_ok=True)
        p = self.control / name
        p.write_text(json.dumps(data))
        return p


def run_job(job: str, argv: list[str]) -> int:
    import importlib

    module = importlib.import_module(f"jobs.{job}")
    try:
        return module.main(argv)
    except SystemExit as e:
        return e.code


def _refused(scene: Scene, capsys, job: str, named: Path, *, quiet: bool = True) -> str:
    """The real command on the scene: exit 2, one error line naming ``named`` and saying to remove it, and the
    store, the bystander and the previous output exactly as they were."""
    before = scene.snapshot()
    argv = ["--store", str(scene.store), "--out", str(scene.out), "--overwrite"] + (["--quiet"] if quiet else [])
    code = run_job(job, argv)
    err = capsys.readouterr().err
    assert code == 2, err
    errors = [ln for ln in err.splitlines() if ln.startswith(f"{job}: error:")]
    assert len(errors) == 1 and str(named) in errors[0] and "remove" in errors[0], err
    assert "Traceback" not in err
    assert scene.snapshot() == before
    return errors[0]


# ---------------------------------------------------------------------------------------------------------
# Forged journals and entries of the control folder: refused, never acted on


def _rename(staging: str, old: str, run_id: str = RID) -> dict:
    return {"run_id": run_id, "how": "rename", "staging": staging, "old": old}


FORGED = {
    # the campaign's own file: the next --overwrite deleted the input store
    "campaign-relative-store": (True, "commit-x.json", {"how": "rename", "staging": "nothing", "old": "../store"}),
    "relative-store": (True, None, _rename(f"staging-{RID}", "../store")),
    "absolute-bystander": (True, None, _rename(f"staging-{RID}", "{bystander}")),
    # without an existing output, the store was renamed into it ("the previous output is back")
    "store-into-missing-output": (False, None, _rename("nothing", "../store")),
    "staging-with-separators": (False, None, _rename("../bystander", f"old-{RID}")),
    "staging-dot-dot-inside-name": (False, None, _rename(f"staging-{RID}/../../bystander", f"old-{RID}")),
    "marker-journal-elsewhere": (True, None, {"run_id": RID, "how": "marker", "staging": "../bystander",
                                              "old": "../store", "replaced": True,
                                              "marker": {"tool": commit.TOOL, "run_id": RID, "state": "committed"}}),
    "run-id-of-another-run": (True, None, _rename("staging-20240101T000000Z-00000000",
                                                  "old-20240101T000000Z-00000000")),
    "not-json": (True, None, None),
}


@pytest.mark.parametrize("case", FORGED)
def test_a_forged_journal_is_refused_naming_it_and_nothing_moves(tmp_path, capsys, case):
    previous, name, data = FORGED[case]
    scene = Scene(tmp_path, previous)
    if data is None:
        path = scene.control / f"commit-{RID}.json"
        scene.control.mkdir()
        path.write_bytes(b'{"run_id": "' + RID.encode() + b'", "how": "ren')  # a journal cut short
    else:
        text = json.dumps(data).replace("{bystander}", str(scene.bystander))
        path = scene.journal(json.loads(text), name or f"commit-{RID}.json")
    line = _refused(scene, capsys, "decode", path)
    assert "commit journal" in line, line
    assert path.exists()  # left for the user to look at


def test_a_journal_naming_links_in_the_control_folder_is_refused(tmp_path, capsys):
    """The journal's names are the run's own, but its ``old`` is a link to the bystander and its staging a link
    into the store: neither is followed, moved nor deleted."""
    scene = Scene(tmp_path, previous=False)
    path = scene.journal(_rename(f"staging-{RID}", f"old-{RID}"))
    (scene.control / f"old-{RID}").symlink_to(scene.bystander)
    (scene.control / f"staging-{RID}").symlink_to(scene.store / "config")
    _refused(scene, capsys, "extract", scene.control / f"staging-{RID}")
    assert path.exists()


@pytest.mark.parametrize("leftover", ["staging-link", "old-link", "staging-badly-named", "old-foreign"])
def test_a_leftover_that_is_not_the_suites_is_refused(tmp_path, capsys, leftover):
    scene = Scene(tmp_path)
    scene.control.mkdir()
    if leftover == "staging-link":
        entry = scene.control / f"staging-{RID}"
        entry.symlink_to(scene.store)
    elif leftover == "old-link":
        entry = scene.control / f"old-{RID}"
        entry.symlink_to(scene.bystander)
    elif leftover == "staging-badly-named":
        entry = scene.control / "staging-everything"
        shutil.copytree(scene.bystander, entry)
    else:  # an old output with files in it and no marker: not something this suite moved aside
        entry = scene.control / f"old-{RID}"
        shutil.copytree(scene.bystander, entry)
    _refused(scene, capsys, "decode", entry)
    assert os.path.lexists(entry)


def test_a_marker_journal_without_its_staging_keeps_the_previous_output(tmp_path, capsys):
    """A well-formed journal of a marker-last commit whose staging is not there: finishing it would move the
    previous output aside and commit nothing in its place.  Refused; the previous output stays."""
    scene = Scene(tmp_path)
    mark = {"tool": commit.TOOL, "job": "decode", "run_id": RID, "state": "committed"}
    path = scene.journal({"run_id": RID, "how": "marker", "staging": f"staging-{RID}", "old": f"old-{RID}",
                          "replaced": True, "marker": mark})
    _refused(scene, capsys, "decode", path)


def test_the_refusal_is_said_with_quiet_too(tmp_path, capsys):
    scene = Scene(tmp_path)
    path = scene.journal(_rename(f"staging-{RID}", str(scene.bystander)))
    line = _refused(scene, capsys, "extract", path, quiet=True)
    assert "nothing was done with it" in line


def test_a_journal_of_a_rename_cut_short_is_still_finished(tmp_path):
    """The validation refuses what this suite does not write, and only that: a rename cut short between the old
    output moved aside and the new one moved in is finished by the next claim."""
    scene = Scene(tmp_path)
    scene.control.mkdir()
    staging, old = scene.control / f"staging-{RID}", scene.control / f"old-{RID}"
    staging.mkdir()
    (staging / "part-0.parquet").write_bytes(b"the new output")
    (staging / OUTPUT_MARKER).write_text(json.dumps({"tool": commit.TOOL, "state": "committed", "run_id": RID}))
    scene.journal(_rename(staging.name, old.name))
    scene.out.rename(old)
    with commit.JobRun("test") as run:
        out = run.output(str(scene.out), overwrite=True)
        assert (scene.out / "part-0.parquet").read_bytes() == b"the new output" and not old.exists()
        commit.write_bytes(out.staging.child("part-0.parquet"), b"newer")
        run.commit()
    assert (scene.out / "part-0.parquet").read_bytes() == b"newer"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bystander", "out", "store"]


# ---------------------------------------------------------------------------------------------------------
# The control folder: never a link, never in an input


@pytest.mark.parametrize("into", ["config", "commitlog", "root", "bystander"])
@pytest.mark.parametrize("job", ["decode", "extract"])
def test_a_control_folder_that_is_a_link_is_refused(tmp_path, capsys, into, job):
    """Linked to ``store/config`` the claim and the staging were written into the store; to ``store/commitlog``
    and interrupted, ``claim.json`` and a staging were left there; to the store root ``extract`` ended 0."""
    scene = Scene(tmp_path)
    target = {"config": scene.store / "config", "commitlog": scene.store / "commitlog", "root": scene.store,
              "bystander": scene.bystander}[into]
    scene.control.symlink_to(target)
    line = _refused(scene, capsys, job, scene.control)
    assert "symbolic link" in line, line


def test_an_input_inside_the_control_folder_is_never_removed_with_a_leftover(tmp_path, capsys):
    """The store given to the job lies inside a leftover staging: cleaning the leftover would delete the input."""
    scene = Scene(tmp_path)
    leftover = scene.control / f"staging-{RID}"
    leftover.mkdir(parents=True)
    scene.store.rename(leftover / "store")
    scene.store = leftover / "store"
    before = scene.snapshot()
    code = run_job("decode", ["--store", str(scene.store), "--out", str(scene.out), "--overwrite"])
    err = capsys.readouterr().err
    assert code == 2 and "overlaps the input store" in err and "control folder" in err, err
    assert scene.snapshot() == before


def _held(scene: Scene, at: str):
    """``decode`` on the scene, run under tests/support/paused.py: held at the first stderr line matching ``at``
    until a signal comes."""
    env = {**os.environ, "PYSPARK_PYTHON": sys.executable, "PYTHONPATH": str(REPO)}
    return subprocess.Popen([sys.executable, str(PAUSED), "--at", at, "--then", "wait", "--", "jobs.decode",
                             "--store", str(scene.store), "--out", str(scene.out), "--overwrite"],
                            cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _interrupt_at(p, at: str, act=None) -> tuple[bool, str]:
    """Wait for the line ``at``; then ``act()`` and SIGINT.  (whether the line came, what the job said)."""
    came, said = False, []
    try:
        for line in p.stderr:
            said.append(line)
            if at in line:
                came = True
                break
        if came:
            if act is not None:
                act()
            p.send_signal(signal.SIGINT)
        _, err = p.communicate(timeout=240)
    finally:
        if p.poll() is None:
            p.kill()
            p.communicate()
    return came, "".join(said) + err


def test_a_control_folder_linked_into_the_store_and_an_interrupt_leave_nothing_there(tmp_path):
    """The campaign's interrupted case: ``.out.rocketmq-forensics`` linked to ``store/commitlog``, the run
    interrupted at its first phase, left ``commitlog/claim.json`` and a staging there.  Refused at the claim now:
    the run never reaches the phase, and the store is as it was (fast: no Spark session is started)."""
    scene = Scene(tmp_path)
    scene.control.symlink_to(scene.store / "commitlog")
    before = scene.snapshot()
    came, err = _interrupt_at(_held(scene, "decode and write"), "decode and write")
    assert not came and "symbolic link" in err, err
    assert scene.snapshot() == before


@pytest.mark.parametrize("end", ["interrupted", "committing"])
def test_a_control_folder_moved_into_the_store_mid_run_is_not_written_through(tmp_path, end):
    """The run claimed a real control folder; while it runs the folder is moved into the store and a link to it
    put in its place; then the run is interrupted (or commits).  Marking the staging failed, releasing the claim
    and the commit's moves went through the link, in the store: nothing is done there now."""
    scene = Scene(tmp_path)
    moved = scene.store / "commitlog" / "moved-here"
    with pytest.raises(KeyboardInterrupt if end == "interrupted" else OutputError) as e:
        with commit.JobRun("decode") as run:
            out = run.output(str(scene.out), overwrite=True, inputs=[str(scene.store)])
            commit.write_bytes(out.staging.child("part-0.parquet"), b"the new output")
            for p in (scene.store, scene.store / "commitlog"):
                p.chmod(0o755)
            scene.control.rename(moved)
            scene.control.symlink_to(moved)
            before = scene.snapshot()
            if end == "interrupted":
                raise KeyboardInterrupt
            run.commit()
    assert scene.snapshot() == before
    if end == "committing":
        assert "is a symbolic link" in str(e.value)
    assert run.kept() == [] or "previous output is unchanged" in run.kept()[0]


# ---------------------------------------------------------------------------------------------------------
# A claim file that names no run (issue 38 item 7)


@pytest.mark.parametrize("content", [b"", b'{"run_id": "20240102T0304', b'{"run_id": "x", "pid": "abc"}'],
                         ids=["empty", "cut-short", "garbage-fields"])
def test_a_claim_naming_no_run_is_try_again_then_taken_over(tmp_path, content):
    dest = tmp_path / "out"
    control = tmp_path / ".out.rocketmq-forensics"
    control.mkdir()
    claim = control / commit.CLAIM
    claim.write_bytes(content)
    with pytest.raises(commit.ClaimError) as refused:
        with commit.JobRun("test") as run:
            run.output(str(dest), overwrite=False)
    assert "try again in" in str(refused.value) and "remove" not in str(refused.value)
    assert claim.read_bytes() == content  # untouched while it may be a claim being written
    old = time.time() - commit.CLAIM_GRACE_SECONDS - 5  # a crash left it: no run takes that long to write it
    os.utime(claim, (old, old))
    with commit.JobRun("test") as run:
        out = run.output(str(dest), overwrite=False)
        commit.write_bytes(out.staging.child("x"), b"1")
        run.commit()
    assert (dest / "x").read_bytes() == b"1" and not control.exists()


def test_a_claim_that_is_a_link_is_refused_saying_remove_it(tmp_path):
    control = tmp_path / ".out.rocketmq-forensics"
    control.mkdir()
    (tmp_path / "elsewhere.json").write_text("{}")
    (control / commit.CLAIM).symlink_to(tmp_path / "elsewhere.json")
    with pytest.raises(OutputError, match=r"is a symbolic link, not a claim this suite wrote; remove it"):
        with commit.JobRun("test") as run:
            run.output(str(tmp_path / "out"), overwrite=False)
    assert (tmp_path / "elsewhere.json").read_text() == "{}" and os.path.islink(control / commit.CLAIM)


# ---------------------------------------------------------------------------------------------------------
# file:// URIs (RFC 8089)


def test_a_file_uri_is_a_local_path_only_on_this_host(tmp_path, monkeypatch, capsys):
    """``file://host/x`` wrote ``./host/x``: a file:// URI naming another host is a usage error (exit 2)."""
    monkeypatch.chdir(tmp_path)
    assert run_job("decode", ["--store", str(fixture_store("basic")), "--out", "file://host/x"]) == 2
    err = capsys.readouterr().err
    assert "decode: error:" in err and "host 'host'" in err and "Traceback" not in err, err
    assert sorted(os.listdir(tmp_path)) == []  # no ./host/x, no control folder
    assert fs.local_path(f"file://{tmp_path}/x") == f"{tmp_path}/x"
    assert fs.local_path(f"file://localhost{tmp_path}/x") == f"{tmp_path}/x"
    assert fs.local_path("relative/x") == "relative/x" and fs.local_path("s3://bucket/x") is None
    with pytest.raises(StoreFormatError, match="names a file on host 'host'"):
        fs.local_path("file://host/x")
    assert commit.Target(f"file://{tmp_path}/out").loc.path == f"{tmp_path}/out"


# ---------------------------------------------------------------------------------------------------------
# Issue 37 item 7: the tasks write where the commit looks, and the commit checks what arrived


def test_a_uri_names_places_beside_the_one_it_named():
    """What the staging's URI is made by (store_format.fs.uri_below): below, and beside (``..``), the URI's options
    kept, whatever the file system's paths look like; nothing above the URI's root."""
    import pyarrow.fs as pafs

    s3 = fs.Location(pafs.LocalFileSystem(), "bucket/a1")  # s3://bucket/a1 is bucket/a1
    assert fs.uri_below("s3://bucket/a1?region=eu", s3, fs.Location(s3.fs, "bucket/.a1.rocketmq-forensics/x")) == \
        "s3://bucket/.a1.rocketmq-forensics/x?region=eu"
    top = fs.Location(s3.fs, "a1")  # a SubTreeFileSystem per bucket: x://bucket/a1 is a1, its parent ""
    assert fs.uri_below("x://bucket/a1", top, fs.Location(s3.fs, ".a1.rocketmq-forensics/staging-r")) == \
        "x://bucket/.a1.rocketmq-forensics/staging-r"
    with pytest.raises(ValueError, match="above the root"):
        fs.uri_below("x://a1", top, fs.Location(s3.fs, ".a1.rocketmq-forensics"))


@pytest.fixture
def bucket(tmp_path):
    before = dict(remotefs.ROOTS)
    root = tmp_path / "bucket"
    root.mkdir()
    yield root, remotefs.register_bucket("bk", root)
    remotefs.ROOTS.clear()
    remotefs.ROOTS.update(before)


def _stage_and_commit(out: str, data: bytes, *, overwrite: bool = True, through: str = "string") -> commit.JobRun:
    """A run writing through the job outputs' own seam (runtime/output.py out_write), into its staging as the jobs
    give it (``location``: ``Output.staging``, whose ``fs.uri_of`` is what Spark and the tasks are given) or as a
    string resolved again (``string``: ``Output.staging_path``)."""
    from runtime.output import out_join, out_write

    with commit.JobRun("test") as run:
        o = run.output(out, overwrite=overwrite)
        assert fs.uri_of(o.staging) == o.staging_path  # Spark is given the string it was given before
        staging = o.staging if through == "location" else o.staging_path
        out_write(out_join(staging, "findings", "part-0.parquet"), data)
        out_write(out_join(staging, "summary.json"), b"{}")
        o.expect("summary.json", "findings")
        run.commit()
    return run


def test_a_delta_batch_is_named_for_spark_by_its_uri_not_its_path(bucket):
    """The Delta writer gave Spark ``scheme://`` glued to the path inside the file system: the bucket (or an HDFS
    name node's host:port) was lost."""
    _, uri = bucket  # what runtime/output.py gives Spark's readers and writers: the seam's uri_of
    assert fs.uri_of(fs.resolve(uri + "sub/a1").child("data-1")) == uri + "sub/a1/data-1"
    assert fs.uri_of(fs.resolve("/tmp/x").child("data-1")) == "/tmp/x/data-1"


@pytest.mark.parametrize("where", ["a1", "sub/a1", "sub/deeper/a1"], ids=["bucket-top", "one-down", "deeper"])
@pytest.mark.parametrize("scheme", ["subtree", "local"])
@pytest.mark.parametrize("through", ["location", "string"])
def test_staged_files_land_where_the_commit_looks(bucket, tmp_path, where, scheme, through):
    """At a bucket's top the tasks wrote into ``a1.rocketmq-forensics/`` while the commit looked in
    ``.a1.rocketmq-forensics/``, and ``committed`` was written into an empty ``a1``."""
    root, uri = bucket
    base = uri if scheme == "subtree" else f"{root}/"
    for data in (b"one", b"two"):  # a new output, then --overwrite of it
        run = _stage_and_commit(base + where, data, through=through)
        assert (root / where / "findings" / "part-0.parquet").read_bytes() == data
        assert json.loads((root / where / OUTPUT_MARKER).read_text())["run_id"] == run.run_id
    leftovers = [str(p.relative_to(root)) for p in root.rglob("*") if "rocketmq-forensics" in p.name]
    assert leftovers == []  # no staging or control folder left anywhere, none beside the bucket either
    assert not (tmp_path / "a1.rocketmq-forensics").exists()


@pytest.mark.parametrize("scheme", ["subtree", "local"])
def test_a_commit_whose_staged_files_did_not_arrive_fails_naming_them(bucket, scheme):
    from runtime.output import out_join, out_write

    root, uri = bucket
    out = (uri if scheme == "subtree" else f"{root}/") + "a1"
    with pytest.raises(OutputError, match=r"did not arrive in its staging .*: missing nothing \(no file at all\)"):
        with commit.JobRun("test") as run:
            o = run.output(out, overwrite=False)
            out_write(out_join(uri if scheme == "subtree" else f"{root}/", "elsewhere", "summary.json"), b"{}")
            run.commit()
    with pytest.raises(OutputError, match=r"missing summary.json, findings;"):
        with commit.JobRun("test") as run:
            o = run.output(out, overwrite=False)
            out_write(out_join(o.staging_path, "report.html"), b"<html>")
            o.expect("summary.json", "findings", "report.html")
            run.commit()
    assert not (root / "a1").exists()  # nothing committed: no output, no marker
    assert json.loads(next(root.glob(".a1.rocketmq-forensics/staging-*/_FAILED.json")).read_text())["reason"]


@pytest.mark.spark
def test_an_audit_at_a_buckets_top_commits_its_findings(spark, bucket):
    """The campaign's case end to end: ``--out subtree://bk/a1`` (a SubTreeFileSystem per bucket)."""
    from jobs.audit import job as audit

    root, uri = bucket
    args = audit.build_parser().parse_args(["--store", str(fixture_store("basic")), "--out", uri + "a1",
                                            "--no-report"])
    result = audit.run(spark, args)
    assert result.exit_code in (0, 1)
    summary = json.loads((root / "a1" / "summary.json").read_text())
    assert summary["run_id"] == json.loads((root / "a1" / OUTPUT_MARKER).read_text())["run_id"]
    assert (root / "a1" / "findings" / "_SUCCESS").exists() and list((root / "a1" / "findings").glob("*.parquet"))
    assert sorted(p.name for p in root.iterdir()) == ["a1"]


# ---------------------------------------------------------------------------------------------------------
# Every job with inputs checks their chain of custody before its commit


@pytest.mark.parametrize("job", ["decode", "extract", "compare", "replay"])
def test_every_job_with_inputs_checks_their_custody_before_its_commit(spark, tmp_path, monkeypatch, job):
    import importlib

    from runtime.custody import CustodyError

    module = importlib.import_module(f"jobs.{job}")
    store = tmp_path / "store"
    shutil.copytree(fixture_store("basic"), store)
    changed = []
    real_watch = module.watch

    def watch_then_change(run, roots, **kw):
        custody = real_watch(run, roots, **kw)
        changed.append(touch_back(store))  # only the ctime tells
        return custody

    monkeypatch.setattr(module, "watch", watch_then_change)
    out = tmp_path / "out"
    other = str(fixture_store("broker"))
    argv = {"replay": ["--repair", str(store)], "compare": ["--store", str(store), "--store", other]}.get(
        job, ["--store", str(store)])
    args = module.build_parser().parse_args([*argv, "--out", str(out)])
    with pytest.raises(CustodyError) as e:
        module.run(spark, args)
    assert changed and f"{changed[0]}: changed during the {job}" in str(e.value)
    assert not out.exists()  # nothing committed


# ---------------------------------------------------------------------------------------------------------
# A commit cut short at any step: the next claim finishes it or rolls it back, never a mix (the marker-last commit's
# steps were reordered so that an output always carries this suite's marker, which the journal's checks rely on)


class _Crash(BaseException):
    """A process killed here (nothing after it runs but the run's own unwinding)."""


def _files(folder: Path) -> dict:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()
            and p.name != OUTPUT_MARKER}


@pytest.mark.parametrize("scheme", ["subtree-marker-last", "local-journalled-renames"])
def test_a_commit_cut_short_at_any_step_is_finished_or_rolled_back_whole(bucket, monkeypatch, scheme):
    root, uri = bucket
    out = (uri if scheme.startswith("subtree") else f"{root}/") + "a1"
    if scheme.startswith("local"):
        monkeypatch.setattr(commit, "exchange", lambda a, b: False)  # the two renames, journalled
    previous = {"summary.json": b"old", "findings/part-0.parquet": b"old", "tables/t/part-0.parquet": b"old"}
    new = {"summary.json": b"new", "findings/part-0.parquet": b"new", "findings/part-1.parquet": b"new"}

    def run_writing(files: dict) -> commit.JobRun:
        from runtime.output import out_join, out_write

        with commit.JobRun("test") as run:
            o = run.output(out, overwrite=True)
            for name, data in files.items():
                out_write(out_join(o.staging_path, *name.split("/")), data)
            run.commit()
        return run

    first = run_writing(previous)
    steps, crashed_at = 0, []
    for crash_at in range(1, 60):
        calls = [0]

        def counted(fn):
            def step(*a, **k):
                calls[0] += 1
                if calls[0] == crash_at:
                    raise _Crash(f"killed at step {crash_at}")
                return fn(*a, **k)
            return step

        with monkeypatch.context() as m:
            for name in ("write_json", "_move_file", "delete", "move_files"):
                m.setattr(commit, name, counted(getattr(commit, name)))
            try:
                second = run_writing(new)
            except _Crash:
                crashed_at.append(crash_at)
            else:
                steps = crash_at
                break
        assert commit.output_state(out) in ("committed", "uncommitted", "missing")  # readers never see a mix
        with commit.JobRun("test") as again:  # the next claim: finishes it or puts the previous output back
            again.output(out, overwrite=True)
            again.abandon()
        mark = json.loads((root / "a1" / OUTPUT_MARKER).read_text())
        assert mark["state"] == "committed", crash_at
        assert _files(root / "a1") == (previous if mark["run_id"] == first.run_id else new), crash_at
        assert not (root / ".a1.rocketmq-forensics").exists(), crash_at
        run_writing(previous)  # back to the previous output for the next step
        first_id = json.loads((root / "a1" / OUTPUT_MARKER).read_text())["run_id"]
        first = type("R", (), {"run_id": first_id})
    assert steps > 3 and crashed_at == list(range(1, steps)), steps
    assert _files(root / "a1") == new and json.loads((root / "a1" / OUTPUT_MARKER).read_text())["run_id"] == \
        second.run_id
    assert sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_dir()) == ["a1", "a1/findings"]


def test_a_path_joined_below_a_uri_keeps_its_query_after_the_path():
    """The outputs' seam joins below a URI's path, never after its options: ``?region=...`` stays the URI's query
    (appended after it, the key would be ``o?region=r/findings``, a folder of its own)."""
    from runtime.output import out_join

    import pyarrow.fs as pafs

    def resolved(uri: str, inside: str) -> fs.Location:  # as fs.resolve makes it, without asking the store
        return fs.Location(pafs.SubTreeFileSystem("/nowhere", pafs.LocalFileSystem()), inside, (uri, inside))

    assert out_join(resolved("s3://b/o?region=r", "b/o"), "findings", "p.parquet").uri() == \
        "s3://b/o/findings/p.parquet?region=r"
    assert out_join(resolved("s3://b/o", "b/o"), "findings").uri() == "s3://b/o/findings"
    assert out_join(resolved("x://bucket/a1?k=v#f", "a1"), "t").uri() == "x://bucket/a1/t?k=v#f"  # a sub-tree's
