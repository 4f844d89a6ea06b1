"""Safety guarantees for hostile dumps, each with a test that fails if the guarantee breaks.

* Input dumps are read-only: in this process an audit hook sees every open/rename/remove/truncate/mmap the
  readers make on a store (none may write); across the whole run (Spark workers included) conftest's
  ``fixtures_stay_untouched`` compares sha256 and mtime of every fixture file before and after.
* A compressed body that expands past the cap (zlib, lz4, zstd bombs) is a DECOMPRESSION error or a row's
  ``decompress_error``, with a bounded peak allocation, never an out-of-memory.
* No eval/exec/pickle (or the like) anywhere in the packages: a syntax-tree scan, with its own self-test.
* Names from a dump (topics, groups) never become paths outside an output root: the writer (the only code
  that makes folders from topic names, consumequeue/<topic>/<queue>) refuses any name that is not a RocketMQ
  topic (tests/test_writer.py); the jobs write tables, never a file per topic.
* Chain of custody: the audit's ``--sha256`` records every input's hash (tests/test_damage_campaign.py's audit
  leg checks them) and refuses to finish when an input changes during the run, even with size and mtime kept.
"""
from __future__ import annotations

import ast
import json
import mmap
import os
import sys
import zlib

import lz4.frame
import pyarrow as pa
import pytest
import zstandard

from store_format import layout as L
from store_format.codec import encode_record
from store_format.fs import ReadOnlyMap
from store_format.compression import DEFAULT_MAX_DECOMPRESSED, decompress
from store_format.config import CONFIG_FILES
from store_format.write.damage import copy_store
from store_format.errors import ErrorKind, StoreFormatError
from store_format.message import Message
from store_format.recovery import predict_recovery
from store_format.store import Store
from decoding import kernels as K

from .conftest import FIXTURES, REPO, fixture_manifest, fixture_store, tree_state
from .test_fuzz_parsers import bounded_memory, warm_kernels  # noqa: F401,F811 (fixtures)

# ---------------------------------------------------------------------------------------------------------
# Read-only inputs


def test_fixtures_unchanged_so_far(fixtures_stay_untouched):
    """The same snapshot the session fixture checks at the very end, checked mid-run as well."""
    assert tree_state(FIXTURES) == fixtures_stay_untouched


def test_the_snapshot_sees_bytes_mtime_and_new_files(tmp_path):
    root = copy_store(fixture_store("broker"), tmp_path / "s")
    before = tree_state(root)
    cp = root / "checkpoint"
    os.utime(cp, ns=(cp.stat().st_atime_ns, cp.stat().st_mtime_ns + 1_000_000))  # mtime only
    assert tree_state(root) != before
    before = tree_state(root)
    data = bytearray(cp.read_bytes())
    data[100] ^= 1
    stat = cp.stat()
    cp.write_bytes(bytes(data))
    os.utime(cp, ns=(stat.st_atime_ns, stat.st_mtime_ns))  # bytes only, mtime put back
    assert tree_state(root) != before
    before = tree_state(root)
    (root / "config" / "extra.json").write_text("{}")
    assert tree_state(root) != before


class _Watch:
    """An audit hook (sys.addaudithook; cannot be removed, so it idles when no root is watched) that records
    every call that could change a file below ``root``, and every file-backed mmap that is not read-only."""

    _installed = False
    root: str | None = None
    writes: list = []

    @classmethod
    def install(cls):
        if not cls._installed:
            sys.addaudithook(cls._hook)
            cls._installed = True

    @classmethod
    def _hook(cls, event, args):
        if cls.root is None:
            return
        if event == "open":
            path, mode, flags = args
            writing = (mode is not None and any(c in mode for c in "wax+")) or \
                (flags is not None and flags & (os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND))
            if writing and isinstance(path, (str, bytes, os.PathLike)) and cls._below(path):
                cls.writes.append((event, str(path), mode, flags))
        elif event in ("os.rename", "os.replace", "os.remove", "os.rmdir", "os.truncate", "os.chmod", "os.utime",
                       "os.mkdir", "os.link", "os.symlink", "shutil.rmtree", "shutil.move"):
            if any(isinstance(a, (str, bytes, os.PathLike)) and cls._below(a) for a in args):
                cls.writes.append((event, *map(str, args)))
        elif event == "mmap.__new__":
            fileno, _, access, _ = args
            if fileno != -1 and access != mmap.ACCESS_READ:
                cls.writes.append((event, fileno, access))

    @classmethod
    def _below(cls, path) -> bool:
        p = os.path.abspath(os.fsdecode(path))
        return p == cls.root or p.startswith(cls.root + os.sep)


@pytest.fixture
def watched(tmp_path):
    """A copy of the basic fixture whose every write attempt (in this process) is recorded."""
    root = copy_store(fixture_store("basic"), tmp_path / "store")
    _Watch.install()
    _Watch.writes = []
    _Watch.root = os.path.abspath(root)
    yield root
    _Watch.root = None


def test_the_watch_sees_writes(watched):
    """The detector itself: an append, a rename and a writable mmap are all seen."""
    with open(watched / "lock", "ab"):
        pass
    os.rename(watched / "lock", watched / "lock2")
    with open(watched / "lock2", "r+b") as f:
        f.write(b"x")
        f.flush()
        mmap.mmap(f.fileno(), 0).close()
    kinds = [w[0] for w in _Watch.writes]
    assert kinds.count("open") == 2 and "os.rename" in kinds and "mmap.__new__" in kinds


def test_every_reader_opens_the_store_read_only(watched):
    manifest = fixture_manifest("basic")
    store = Store(watched)
    messages = list(store.messages(salvage=True))
    assert len(messages) == len(manifest["messages"])
    for key in store.queues:
        list(store.consume_queue(*key))
    for q in manifest["indexQueries"][:10]:
        store.query_key(q["topic"], q["key"])
    store.find_msg_id(messages[0].msg_id)
    store.checkpoint()
    store.markers()
    for name in CONFIG_FILES:
        store.config(name)
    predict_recovery(store)
    seg = store.segments[0]
    with ReadOnlyMap(seg.path) as m:
        batch = K.decode_buffer(m.buf, [x.file_position for x in messages], [x.store_size for x in messages],
                                decompress=True)
        assert batch.num_rows == len(messages)
        del batch
    assert _Watch.writes == []


def test_every_data_source_reader_opens_the_store_read_only(watched):
    """The Spark data sources' task code (planner and reader, called here in-process, where the watch sees
    it): commitlog in both walks and several ranges, consume queues, index files, every metadata table."""
    from datasources.commitlog import CommitLogReader
    from datasources.consumequeue import ConsumeQueueReader
    from datasources.indexfile import IndexReader
    from datasources.metadata import MetadataReader
    from decoding.metadata import TABLES

    readers = [CommitLogReader({"path": str(watched), "walk": walk, "splitSize": "300k", "materialize": m})
               for walk, m in (("salvage", "frames"), ("recovery", "decoded"))]
    readers += [ConsumeQueueReader({"path": str(watched)}), IndexReader({"path": str(watched)})]
    readers += [MetadataReader({"path": str(watched), "table": t}) for t in TABLES]
    assert sum(map(read_in_process, readers)) > len(fixture_manifest("basic")["messages"])
    assert _Watch.writes == []


def read_in_process(reader) -> int:
    """Every row a data source reader gives (its planner, then each partition's task code), in this process
    and without Spark: the number of rows."""
    return sum(batch.num_rows for part in reader.partitions() for batch in reader.read(part))


# ---------------------------------------------------------------------------------------------------------
# Decompression bombs


def _bomb(kind: str, size: int) -> bytes:
    """``size`` zero bytes compressed, streamed in 1 MiB pieces (the bomb is built without allocating it)."""
    piece = bytes(1 << 20)
    if kind == "ZLIB":
        c = zlib.compressobj(9)
        return b"".join(c.compress(piece) for _ in range(size >> 20)) + c.flush()
    if kind == "LZ4":
        c = lz4.frame.LZ4FrameCompressor()
        return c.begin() + b"".join(c.compress(piece) for _ in range(size >> 20)) + c.flush()
    c = zstandard.ZstdCompressor(level=1).compressobj()
    return b"".join(c.compress(piece) for _ in range(size >> 20)) + c.flush()


@pytest.fixture(scope="module")
def bombs():
    """Per codec, a body that expands to twice the default cap (128 MiB) and is a few hundred KiB at most."""
    return {kind: _bomb(kind, 2 * DEFAULT_MAX_DECOMPRESSED) for kind in ("ZLIB", "LZ4", "ZSTD")}


@pytest.mark.parametrize("kind", ["ZLIB", "LZ4", "ZSTD"])
def test_a_bomb_at_the_default_cap_is_a_decompression_error(bombs, kind):
    body = bombs[kind]
    assert len(body) < 1 << 20
    with bounded_memory(len(body), allowance=2 * DEFAULT_MAX_DECOMPRESSED + (8 << 20)):
        with pytest.raises(StoreFormatError) as e:
            decompress(body, kind)
    assert e.value.kind == ErrorKind.DECOMPRESSION and "cap" in e.value.message


def _record(body: bytes, kind: str | None, offset: int) -> bytes:
    flags = 0 if kind is None else L.COMPRESSED_FLAG | L.COMPRESSION_FLAGS[kind]
    return encode_record(Message(topic="T", body=body, sys_flag=flags, physical_offset=offset))


def test_bombs_in_records_are_findings_for_message_and_kernel(bombs, warm_kernels):
    """Message.decompressed_body raises the DECOMPRESSION error; decode_frames(decompress=True) gives those rows
    a null body and decompress_error, the honest rows their bodies."""
    cap = 1 << 20
    honest = zlib.compress(b"hello " * 1000)
    frames = [_record(bombs[k], k, 0) for k in ("ZLIB", "LZ4", "ZSTD")] + [_record(honest, "ZLIB", 0),
                                                                            _record(b"plain", None, 0)]
    for kind in ("ZLIB", "LZ4", "ZSTD"):
        msg = Message(topic="T", body=bombs[kind], sys_flag=L.COMPRESSED_FLAG | L.COMPRESSION_FLAGS[kind])
        with pytest.raises(StoreFormatError, match="DECOMPRESSION"):
            msg.decompressed_body(cap)
    with bounded_memory(sum(map(len, frames)), allowance=8 * cap + (16 << 20)):
        batch = K.decode_binary(pa.array(frames, pa.binary()), decompress=True, max_decompressed=cap)
    rows = batch.select(["decompressed_body", "decompress_error", "error"]).to_pylist()
    assert [r["decompress_error"] for r in rows] == ["DECOMPRESSION"] * 3 + [None, None]
    assert [r["decompressed_body"] for r in rows] == [None] * 3 + [b"hello " * 1000, b"plain"]
    assert all(r["error"] is None for r in rows)


def test_a_bomb_in_a_store_is_found_and_walked_past(tmp_path, bombs):
    """A store whose record carries a bomb: the walk frames it (it is a well-formed record), decompressing it
    is the finding, and the records after it are read."""
    from store_format.write.writer import StoreWriter, WriterConfig

    w = StoreWriter(tmp_path / "s", WriterConfig(mappedFileSizeCommitLog=1 << 20), start_time=1_700_000_000_000)
    w.append(Message(topic="T", body=bombs["ZSTD"], sys_flag=L.COMPRESSED_FLAG | L.COMPRESSION_ZSTD_TYPE))
    w.append(Message(topic="T", body=b"after"))
    w.close()
    msgs = list(Store(tmp_path / "s").messages())
    assert [m.body for m in msgs][1:] == [b"after"]
    with pytest.raises(StoreFormatError, match="DECOMPRESSION"):
        msgs[0].decompressed_body(1 << 20)


# ---------------------------------------------------------------------------------------------------------
# No eval / exec / pickle of dump content

PACKAGES = ("store_format", "decoding", "datasources", "runtime", "jobs", "bench")
_BANNED_NAMES = {"eval", "exec", "compile", "__import__"}
_BANNED_ATTRS = {("pickle", "load"), ("pickle", "loads"), ("pickle", "Unpickler"), ("cPickle", "loads"),
                 ("marshal", "load"), ("marshal", "loads"), ("shelve", "open"), ("cloudpickle", "load"),
                 ("cloudpickle", "loads"), ("dill", "load"), ("dill", "loads"), ("yaml", "load"),
                 ("yaml", "unsafe_load"), ("yaml", "full_load"), ("pd", "read_pickle"), ("pandas", "read_pickle"),
                 ("joblib", "load")}
_BANNED_MODULES = {"pickle", "cPickle", "marshal", "shelve", "cloudpickle", "dill"}
# "path:line" -> why that use never sees dump content
_OWN_TASKS = ("the audit's own tasks and the objects they share, pickled by its driver (jobs.audit.tasks.ship) and "
              "unpickled by the Spark task it ships them to, as Spark ships any function: never bytes of a dump")
ALLOWED: dict[str, str] = {
    "jobs/audit/tasks.py:477": _OWN_TASKS,  # import pickle
    "jobs/audit/tasks.py:479": _OWN_TASKS,  # pickle.Unpickler (the stage's shared objects resolved by reference)
}


def banned_calls(source: str, name: str) -> list[str]:
    """Each place in ``source`` that evaluates code or unpickles: ``name:line what``."""
    found = []
    for node in ast.walk(ast.parse(source, name)):
        what = None
        if isinstance(node, ast.Call):
            f = node.func
            if isinstance(f, ast.Name) and f.id in _BANNED_NAMES:
                what = f.id
            elif isinstance(f, ast.Attribute) and isinstance(f.value, ast.Name) and \
                    (f.value.id, f.attr) in _BANNED_ATTRS:
                what = f"{f.value.id}.{f.attr}"
            elif isinstance(f, ast.Attribute) and f.attr == "load" and any(
                    k.arg == "allow_pickle" and not (isinstance(k.value, ast.Constant) and not k.value.value)
                    for k in node.keywords):
                what = "load(allow_pickle=...)"
        elif isinstance(node, ast.Import):
            what = next((a.name for a in node.names if a.name.split(".")[0] in _BANNED_MODULES), None)
        elif isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] in _BANNED_MODULES:
            what = f"from {node.module} import"
        if what and f"{name}:{node.lineno}" not in ALLOWED:
            found.append(f"{name}:{node.lineno} {what}")
    return found


def _sources():
    for pkg in PACKAGES:
        for path in sorted((REPO / pkg).rglob("*.py")):
            if "cache" not in path.parts:
                yield str(path.relative_to(REPO)), path.read_text(encoding="utf-8")
    for nb in sorted((REPO / "notebooks").rglob("*.ipynb")):
        cells = json.loads(nb.read_text(encoding="utf-8")).get("cells", [])
        code = "\n".join("".join(c.get("source", [])) for c in cells if c.get("cell_type") == "code")
        code = "\n".join(line for line in code.splitlines() if not line.lstrip().startswith(("%", "!")))
        yield str(nb.relative_to(REPO)), code


@pytest.mark.slow
def test_no_eval_exec_or_pickle_in_the_code():
    sources = list(_sources())
    assert any(name.startswith("store_format/") for name, _ in sources)
    found = [hit for name, text in sources for hit in banned_calls(text, name)]
    assert not found, "code that evaluates or unpickles (allowlist in ALLOWED with a reason if legitimate): " + \
        ", ".join(found)


def test_the_scan_finds_each_banned_form():
    sample = "\n".join([
        "eval(x)", "exec(x)", "compile(x, 'f', 'exec')", "__import__(x)", "pickle.loads(x)", "pickle.load(f)",
        "marshal.loads(x)", "yaml.load(x)", "pd.read_pickle(p)", "np.load(p, allow_pickle=True)",
        "import pickle", "from cloudpickle import loads", "np.load(p, allow_pickle=False)", "model.evaluate(x)",
    ])
    hits = banned_calls(sample, "s.py")
    assert sorted(int(h.split(":")[1].split()[0]) for h in hits) == list(range(1, 13))


# ---------------------------------------------------------------------------------------------------------
# Chain of custody: the audit's --sha256


def test_the_audit_refuses_when_an_input_changes_during_the_run(spark, tmp_path, monkeypatch):
    """With --sha256 an input whose bytes change while the audit runs (size and mtime put back, so only the hash
    can tell) stops the audit with the chain-of-custody error, and no summary is written."""
    from runtime import custody
    from jobs.audit import job as audit
    from runtime.output import OutputError

    root = copy_store(fixture_store("broker"), tmp_path / "broker")
    victim = root / "config" / "consumerOffset.json"
    fingerprint, calls = custody.fingerprint, []

    def tamper_after_the_first(files, sha256):
        out = fingerprint(files, sha256)
        if not calls:  # the snapshot at the start is taken: now the input changes, size and mtime kept
            st = victim.stat()
            data = bytearray(victim.read_bytes())
            data[-2] ^= 0x01
            victim.write_bytes(bytes(data))
            os.utime(victim, ns=(st.st_atime_ns, st.st_mtime_ns))
        calls.append(sha256)
        return out

    monkeypatch.setattr(custody, "fingerprint", tamper_after_the_first)
    args = audit.build_parser().parse_args(["--store", str(root), "--out", str(tmp_path / "out"), "--sha256",
                                            "--checks", "metadata", "--no-report"])
    with pytest.raises(OutputError, match="chain of custody") as e:
        audit.run(spark, args)
    # the start's fingerprint, then the end's: the last gate of the commit (runtime/custody.py)
    assert f"{victim}: changed during the audit" in str(e.value) and calls == [True, True]
    assert not (tmp_path / "out" / "summary.json").exists()


# ---------------------------------------------------------------------------------------------------------
# Paths from dump content

# ---------------------------------------------------------------------------------------------------------
# Evidence is untouchable: every job that writes, every path shape (issue 22)
#
# Each job resolves its inputs and outputs (links, '..', bind mounts: device and inode of every ancestor) before it
# does anything, checks its inputs before it prepares its output, and refuses any output that is, contains or lies
# inside an input store or a file of one; --overwrite deletes only a folder the suite wrote (its marker).  Every case
# below would have deleted or replaced store files before: the reported one is an input given through a link to a
# part folder and --overwrite pointed at another part of the same store.

SEGMENT = "00000000000000000000"


def _shape(root) -> dict:
    """Every entry below ``root`` (links not followed): kind, mode, size, link target, content hash."""
    import hashlib
    import stat as st_

    out = {}
    for top, dirs, files in os.walk(root):
        for name in dirs + files:
            p = os.path.join(top, name)
            s = os.lstat(p)
            entry = (st_.S_IFMT(s.st_mode), s.st_mode & 0o7777, s.st_mtime_ns)
            if st_.S_ISLNK(s.st_mode):
                entry += (os.readlink(p),)
            elif st_.S_ISREG(s.st_mode):
                with open(p, "rb") as f:
                    entry += (s.st_size, hashlib.sha256(f.read()).hexdigest())
            out[os.path.relpath(p, root)] = entry
    return out


@pytest.fixture
def evidence(tmp_path):
    """A dump (one broker store root) with every part, plus the links a careless user might give: to the root, to a
    part folder, to a segment, and an output link into the store."""
    root = copy_store(fixture_store("broker"), tmp_path / "dump" / "broker-a" / "store")
    for p in [root, *root.rglob("*")]:
        p.chmod(0o755 if p.is_dir() else 0o644)
    links = tmp_path / "links"
    links.mkdir()
    (links / "store").symlink_to(root)
    (links / "commitlog").symlink_to(root / "commitlog")
    (links / "segment").symlink_to(root / "commitlog" / SEGMENT)
    (links / "into-consumequeue").symlink_to(root / "consumequeue")
    return root, links


def _shapes(root, links, tmp_path):
    """(name, input as given, output as given) for every path shape."""
    hard = tmp_path / "hard"
    hard.mkdir(exist_ok=True)
    if not (hard / SEGMENT).exists():
        os.link(root / "commitlog" / SEGMENT, hard / SEGMENT)
    return [
        ("link to the root, output another part", links / "store", root / "consumequeue"),
        ("link to a part folder, output another part (the report)", links / "commitlog", root / "consumequeue"),
        ("link to a segment, output the index", links / "segment", root / "index"),
        ("output a link into the store", root, links / "into-consumequeue"),
        ("output a new folder inside the store", links / "store", root / "out"),
        ("output '..' through a link", root, f"{links / 'commitlog'}/../config"),
        ("output '..' lexically outside, really inside", links / "commitlog", f"{links / 'commitlog'}/../new"),
        ("output the store itself", links / "commitlog", root),
        ("output containing the store", root / "commitlog" / SEGMENT, tmp_path / "dump"),
        ("output a hard link's folder", hard / SEGMENT, hard),
        ("output the links folder", links / "store", links),
    ]


def _job_argv(job: str, given, out) -> list[str]:
    if job == "replay":
        return ["--repair", str(given), "--out", str(out), "--overwrite"]
    if job == "compare":  # compared with another store: the same one twice is refused before any output check
        return ["--store", str(given), "--store", str(fixture_store("basic")), "--out", str(out), "--overwrite"]
    return ["--store", str(given), "--out", str(out), "--overwrite"]


def _run_job(job: str, argv: list[str]) -> int:
    import importlib

    module = importlib.import_module("jobs.audit.job" if job == "audit" else f"jobs.{job}")
    try:
        return module.main(argv)
    except SystemExit as e:
        return e.code


WRITING_JOBS = ("decode", "audit", "extract", "replay", "compare")


@pytest.mark.parametrize("marked", [False, True], ids=["plain", "marker-planted"])
@pytest.mark.parametrize("job", WRITING_JOBS)
def test_no_job_can_write_into_its_input_through_any_path_shape(evidence, tmp_path, capsys, job, marked):
    """Every job x every shape: exit 2 before anything is written, and the store tree (bytes, kinds, modes, links)
    unchanged.  ``marker-planted``: each targeted folder of the store even carries the suite's marker (as if an
    earlier run had written there), so only the overlap guard stands in the way."""
    from runtime.output import MARKER

    root, links = evidence
    for name, given, out in _shapes(root, links, tmp_path):
        if marked and os.path.isdir(out):
            real = os.path.realpath(out)
            if not os.path.exists(os.path.join(real, MARKER)):
                with open(os.path.join(real, MARKER), "w") as f:
                    f.write('{"tool": "rocketmq-forensics"}')
        before = _shape(tmp_path)
        code = _run_job(job, _job_argv(job, given, out))
        err = capsys.readouterr().err
        assert code == 2, (name, err)
        assert "error" in err and "Traceback" not in err, (name, err)
        if not (job in ("audit", "replay") and os.path.isfile(given)):  # these refuse a segment as input first
            assert "overlaps the input store" in err, (name, err)
        assert _shape(tmp_path) == before, name


def test_store_format_write_append_refuses_its_own_store_as_input(evidence, tmp_path):
    """``write --append`` writes into a store: its --input may not be that store or a file of it, whatever the
    spelling (a link, '..'), and a refused run leaves the store as it was."""
    import subprocess

    root, links = evidence
    before = _shape(tmp_path)
    for given in (root / "commitlog" / SEGMENT, links / "segment", f"{links / 'commitlog'}/../config/topics.json"):
        r = subprocess.run([sys.executable, "-m", "store_format", "write", str(root), "--append", "--input",
                            str(given)], cwd=REPO, capture_output=True, text=True, timeout=120)
        assert r.returncode == 2 and "overlaps" in r.stderr and "Traceback" not in r.stderr, r.stderr
    assert _shape(tmp_path) == before


def test_trend_never_writes_into_its_history(tmp_path, capsys):
    from jobs import trend

    history = tmp_path / "history"
    (history / "findings").mkdir(parents=True)
    (history / "findings" / "part.parquet").write_bytes(b"x")
    (tmp_path / "into").symlink_to(history / "findings")
    before = _shape(tmp_path)
    for out in (history / "findings", tmp_path / "into", f"{tmp_path / 'into'}/../metrics", tmp_path):
        assert trend.main(["--history", str(history), "--out", str(out), "--overwrite"]) == 2
        assert "overlaps the input store" in capsys.readouterr().err
    assert _shape(tmp_path) == before


def test_the_audit_history_and_the_replay_manifest_stay_apart_from_the_inputs(evidence, tmp_path, capsys):
    from jobs import replay
    from jobs.audit import job as audit

    root, links = evidence
    before = _shape(tmp_path)
    assert audit.main(["--store", str(links / "store"), "--out", str(tmp_path / "a"), "--history",
                       str(root / "config")]) == 2
    assert "history" in capsys.readouterr().err
    assert replay.main(["--repair", str(links / "store"), "--out", str(tmp_path / "r"), "--dry-run", "--manifest",
                        str(root / "checkpoint")]) == 2
    assert "overlaps the input store" in capsys.readouterr().err
    assert _shape(root) == {k[len("dump/broker-a/store/"):]: v for k, v in before.items()
                            if k.startswith("dump/broker-a/store/")}


def test_a_bind_mount_of_the_store_is_still_the_store(evidence, tmp_path):
    """A bind mount gives the store a second name no link resolution reveals; device and inode still tell.  Made
    in a user and mount namespace (``unshare -rm``), so no root is needed; skipped where that is not allowed."""
    import shutil as sh
    import subprocess

    if not sh.which("unshare") or subprocess.run(["unshare", "-rm", "true"], capture_output=True).returncode:
        pytest.skip("no user namespaces here")
    root, _ = evidence
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    before = _shape(root)
    script = (f"mount --bind {root} {mnt} && {sys.executable} -m jobs.decode --store {root / 'commitlog'} "
              f"--out {mnt / 'consumequeue'} --overwrite")
    r = subprocess.run(["unshare", "-rm", "sh", "-c", script], cwd=REPO, capture_output=True, text=True, timeout=300,
                       env={**os.environ, "PYTHONPATH": str(REPO)})
    assert r.returncode == 2 and "overlaps the input store" in r.stderr, r.stderr
    assert _shape(root) == before


def test_decode_checks_its_input_before_it_prepares_its_output(tmp_path, capsys):
    """A bad input never costs an output: the (marked, --overwrite) output survives a run whose input is missing,
    not a store, or unreadable."""
    from jobs import decode
    from runtime.output import prepare_output

    from runtime.commit import JobRun

    out = tmp_path / "out"
    with JobRun("decode") as run:
        staged = prepare_output(str(out), overwrite=False, job="decode").staging_path
        with open(os.path.join(staged, "part-0.parquet"), "wb") as f:  # a staging with nothing in it: never committed
            f.write(b"keep")
        run.commit()
    os.mkfifo(tmp_path / "fifo")
    (tmp_path / "loop").symlink_to(tmp_path / "loop")
    for bad in (tmp_path / "missing", tmp_path / "fifo", tmp_path / "loop", tmp_path / "out"):
        assert decode.main(["--store", str(bad), "--out", str(out), "--overwrite"]) == 2
        assert "Traceback" not in capsys.readouterr().err
        assert (out / "part-0.parquet").read_bytes() == b"keep"


# ---------------------------------------------------------------------------------------------------------
# No hang, no silence: special files where the store has regular files (issue 22)
#
# A FIFO's open blocks until a writer comes; a link to /dev/zero reads forever.  Every read goes through
# store_format.fs (O_NONBLOCK, then an fstat type check), so each of these is reported (an error row, a finding)
# and the rest is read.  Each check runs under a time bound: before, the FIFO checkpoint hung `dump` for good.


def hostile_store(root):
    """A writer-built store (several segments) with, in place of regular files: a FIFO segment, a socket index
    file, a consume-queue file linked to /dev/zero, a FIFO topics.json, a link loop among the queues.  Returns
    {what: path}."""
    import socket

    from store_format.commitlog import list_segments
    from store_format.write.generate import TrafficConfig, generate_store
    from store_format.indexfile import list_index_files
    from store_format.write.writer import WriterConfig

    generate_store(root, TrafficConfig(messages=400, topics=2, queues=2), WriterConfig(mappedFileSizeCommitLog=1 << 16))
    segs = list_segments(root / "commitlog")
    assert len(segs) >= 3
    made = {"segment": segs[1].path, "index": list_index_files(root / "index")[0],
            "queue_file": sorted((root / "consumequeue").glob("*/*/0*"))[0], "config": root / "config" / "topics.json",
            "loop": root / "consumequeue" / "loop"}
    made["segment"].unlink()
    os.mkfifo(made["segment"])
    made["index"].unlink()
    s = socket.socket(socket.AF_UNIX)
    s.bind(str(made["index"]))
    s.close()
    made["queue_file"].unlink()
    made["queue_file"].symlink_to("/dev/zero")
    made["config"].unlink()
    os.mkfifo(made["config"])
    made["loop"].symlink_to(made["loop"])
    return made


@pytest.fixture
def within():
    """Fail (instead of hanging) when the test body runs past its bound: SIGALRM interrupts a blocked open."""
    import signal

    def expired(*_):
        raise TimeoutError("blocked: a read waited on a special file")

    previous = signal.signal(signal.SIGALRM, expired)

    def arm(seconds: int):
        signal.alarm(seconds)

    yield arm
    signal.alarm(0)
    signal.signal(signal.SIGALRM, previous)


def _tool(*args, timeout=120):
    import subprocess

    return subprocess.run([sys.executable, "-m", "store_format", *map(str, args)], cwd=REPO, capture_output=True,
                          text=True, timeout=timeout)  # a hang is a TimeoutExpired: the test fails, never waits


def test_store_tools_report_special_files_and_go_on(tmp_path):
    root = tmp_path / "b" / "store"
    made = hostile_store(root)
    before = _shape(root)
    expect = {"commitlog": ["segment"], "consumequeue": ["queue_file", "loop"], "index": ["index"], "config": ["config"]}
    for what, names in expect.items():
        r = _tool("dump", root, "--what", what)
        rows = [json.loads(x) for x in r.stdout.splitlines()]
        errors = {x["file"]: x for x in rows if x.get("kind") == "error"}
        if what == "config":
            errors = {e["file"]: e for x in rows for e in x["errors"] if e["kind"] == "UNREADABLE"}
        assert r.returncode == 2 and "Traceback" not in r.stderr, (what, r.stderr)
        assert {str(made[n]) for n in names} <= set(errors), (what, errors)
        if what == "commitlog":  # the other segments are read
            assert len([x for x in rows if x["kind"] == "message"]) > 100
            assert "a FIFO, not a regular file" in errors[str(made["segment"])]["message"]
    # the checkpoint as a FIFO (and as a link to a device): one line, exit 2
    cp = root / "checkpoint"
    cp.unlink()
    os.mkfifo(cp)
    r = _tool("dump", root, "--what", "checkpoint")
    assert r.returncode == 2 and r.stderr.strip() == f"error: {cp}: a FIFO, not a regular file", r.stderr
    cp.unlink()
    cp.symlink_to("/dev/zero")
    r = _tool("dump", root, "--what", "checkpoint")
    assert r.returncode == 2 and r.stderr.strip() == f"error: {cp}: a character device, not a regular file"
    # query: the unreadable segment is named (exit 2: the answer may be incomplete), nothing waits
    r = _tool("query", root, "--topic", "T0", "--key", "nothing-like-it")
    assert r.returncode == 2 and str(made["segment"]) in r.stderr and "Traceback" not in r.stderr, r.stderr
    assert _shape(root) == {**before, **{k: v for k, v in _shape(root).items() if k == "checkpoint"}}


def test_data_sources_never_wait_on_special_files(tmp_path, within):
    """The four data sources' planners and readers (in this process, under an alarm): special files are left
    out, never opened; the metadata source's ``unreadable_files`` table names each with why."""
    from datasources.commitlog import CommitLogReader
    from datasources.consumequeue import ConsumeQueueReader
    from datasources.indexfile import IndexReader
    from datasources.metadata import MetadataReader
    from decoding.metadata import TABLES

    root = tmp_path / "b" / "store"
    made = hostile_store(root)
    within(120)
    readers = [CommitLogReader({"path": str(root), "walk": "salvage", "materialize": "frames"}),
               ConsumeQueueReader({"path": str(root)}), IndexReader({"path": str(root)})]
    readers += [MetadataReader({"path": str(root), "table": t}) for t in TABLES]
    assert sum(map(read_in_process, readers)) > 400
    reader = MetadataReader({"path": str(root), "table": "unreadable_files"})
    found = {r["file"]: r["reason"] for p in reader.partitions() for b in reader.read(p) for r in b.to_pylist()}
    assert {os.path.relpath(made[n], root) for n in made} <= set(found), found
    assert found[os.path.relpath(made["segment"], root)] == "a FIFO, not a regular file"
    assert "loop" in found["consumequeue/loop"]


def test_the_read_only_helper_refuses_every_special_file(tmp_path, within):
    import socket

    from store_format import fs

    within(30)
    os.mkfifo(tmp_path / "fifo")
    s = socket.socket(socket.AF_UNIX)
    s.bind(str(tmp_path / "sock"))
    (tmp_path / "dev").symlink_to("/dev/zero")
    (tmp_path / "loop").symlink_to(tmp_path / "loop")
    (tmp_path / "file").write_bytes(b"ok")
    (tmp_path / "link").symlink_to(tmp_path / "file")
    for name, reason in (("fifo", "a FIFO"), ("sock", "a socket"), ("dev", "a character device"), ("loop", "loop"),
                         ("missing", "no such file"), ("", "a folder")):
        with pytest.raises(fs.UnreadableError) as e:
            fs.read_bytes(tmp_path / name)
        assert reason in e.value.reason and e.value.kind == ErrorKind.UNREADABLE
    assert fs.read_bytes(tmp_path / "link") == b"ok"
    with pytest.raises(fs.UnreadableError, match="a symbolic link, not a regular file"):
        fs.read_bytes(tmp_path / "link", follow=False)
    s.close()
