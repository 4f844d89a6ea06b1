"""`make package`'s zip carries the project to spark-submit: a job file run from a folder outside the
repository, with an interpreter that cannot see the repository or its editable install, decodes a fixture.
(The audit's application file, submitted the same way to a two-worker cluster: tests/test_cluster.py.)"""
from __future__ import annotations

import importlib.util
import shutil
import subprocess
import sys
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from runtime.session import REPO, TEST_PROFILE

from .conftest import fixture_manifest, fixture_store, isolated_python


def _load_tool(name: str):
    """A script from tools/ as a module (tools/ is not a package: its scripts run as ``python tools/X.py``)."""
    spec = importlib.util.spec_from_file_location(f"tools_{name}", REPO / "tools" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


package = _load_tool("package")  # what `make package` runs


@pytest.mark.spark
@pytest.mark.slow
def test_spark_submit_with_the_zip_from_outside_the_repository(tmp_path):
    zip_path = package.build(tmp_path / "dist" / "rocketmq_forensics.zip")
    job = tmp_path / "decode_job.py"
    shutil.copy(REPO / "jobs" / "decode.py", job)
    _, env = isolated_python(tmp_path)  # only the zip can supply the project

    out = tmp_path / "messages"
    confs = [arg for key, value in TEST_PROFILE.items() for arg in ("--conf", f"{key}={value}")]
    cmd = [str(Path(sys.executable).parent / "spark-submit"), "--master", "local[2]",
           "--properties-file", str(REPO / "spark-conf" / "spark-defaults.conf"), *confs,
           "--py-files", str(zip_path), str(job),
           "--store", str(fixture_store("basic")), "--out", str(out)]
    proc = subprocess.run(cmd, env=env, cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-4000:]
    manifest = fixture_manifest("basic")
    # spark-submit hands the driver's stderr (the progress lines) to its stdout too: the summary is one line of it
    assert any(line.startswith(f"decode: {manifest['messageCount']} messages") for line in proc.stdout.splitlines())
    table = pq.read_table(out, columns=["physical_offset"])
    assert sorted(table.column("physical_offset").to_pylist()) == \
           sorted(m["commitLogOffset"] for m in manifest["messages"])


def test_project_zip_is_the_package_zip_named_after_its_content(tmp_path):
    """What a Spark Connect session gets (runtime.session.ship_project): the zip `make package` writes, named after
    its content, so the same project is the same artifact."""
    import zipfile

    from runtime.session import project_zip

    first = project_zip(tmp_path / "cache")
    assert project_zip(tmp_path / "cache") == first
    assert [p.name for p in (tmp_path / "cache").iterdir()] == [first.name]  # no temporary file left
    built = package.build(tmp_path / "dist" / "rocketmq_forensics.zip")
    with zipfile.ZipFile(first) as a, zipfile.ZipFile(built) as b:
        assert a.namelist() == b.namelist() and "runtime/session.py" in a.namelist()
        assert all(a.read(n) == b.read(n) for n in a.namelist())


def test_the_zip_carries_bytecode_a_worker_imports_and_sources_to_fall_back_on(tmp_path):
    """Python never caches what it compiles from a zip, so the zip carries each module's bytecode beside its source
    (checked against the source's hash): a worker imports it instead of compiling the project again.  The kernels'
    module stays a source (numba keys its cache on the file), and bytecode of another Python is passed over."""
    import importlib.util
    import zipfile

    from runtime.session import SOURCE_ONLY

    built = package.build(tmp_path / "dist" / "rocketmq_forensics.zip")
    with zipfile.ZipFile(built) as zf:
        names = set(zf.namelist())
        sources = {n for n in names if n.endswith(".py")}
        assert {n[:-3] + ".pyc" for n in sources - set(SOURCE_ONLY)} == {n for n in names if n.endswith(".pyc")}
        assert "decoding/compiled.pyc" not in names and "jobs/audit/tasks.pyc" in names
        assert zf.read("jobs/audit/tasks.pyc")[:4] == importlib.util.MAGIC_NUMBER
    python, env = isolated_python(tmp_path)
    probe = ("import jobs.audit.tasks as t, decoding.compiled as c, runtime.session as s; "
             "print(t.__file__.rsplit('/', 1)[1], c.__file__.rsplit('/', 1)[1], s.REPO.name)")

    def imported_from(zip_path: Path) -> str:
        proc = subprocess.run([str(python), "-c", probe], env={**env, "PYTHONPATH": f"{zip_path}:{env['PYTHONPATH']}"},
                              cwd=tmp_path, capture_output=True, text=True, timeout=120)
        assert proc.returncode == 0, proc.stderr[-3000:]
        return proc.stdout.split()

    assert imported_from(built) == ["tasks.pyc", "compiled.py", built.name]
    other = tmp_path / "other-python.zip"  # the same zip as another interpreter version would find it
    with zipfile.ZipFile(built) as src, zipfile.ZipFile(other, "w") as dst:
        for info in src.infolist():
            data = src.read(info)
            dst.writestr(info, (b"\x00\x00" + data[2:]) if info.filename.endswith(".pyc") else data)
    assert imported_from(other) == ["tasks.py", "compiled.py", other.name]


def test_command_line_paths_are_made_absolute(tmp_path, monkeypatch):
    """Executors and a Spark Connect server resolve relative paths in their own working folders: the jobs' command
    lines hand Spark absolute ones (URIs as given)."""
    from jobs import audit, extract
    from runtime.cli import absolute_paths

    monkeypatch.chdir(tmp_path)
    args = absolute_paths(audit.build_parser().parse_args(["--store", "a", "s3://b/c", "--out", "o",
                                                           "--history", "h"]))
    assert args.store == [str(tmp_path / "a"), "s3://b/c"] and args.out.as_typed == str(tmp_path / "o")
    assert args.history.as_typed == str(tmp_path / "h") and args.history.path == str(tmp_path / "h")
    args = absolute_paths(extract.build_parser().parse_args(["--store", "x/y", "--out", "file:///z"]))
    assert args.store == [str(tmp_path / "x" / "y")] and args.out.as_typed == "file:///z" and args.out.path == "/z"
