"""Property-based fuzzing of whole stores (issue 22): writer-built stores mutated at random -- bytes, lengths, file
types (a FIFO, a folder, a socket, a device link in place of a file), names, links (to another file, dangling, loops,
a part folder linked to itself), permissions -- and the read-side commands run on each: ``python -m store_format
dump`` (every part, both walks) and ``query`` (an offsetMsgId, a key) in this process under an alarm, one of them
again as a real process (as an unprivileged reader, where permissions bite), and the audit on a few.

Every run must end within its time bound with exit 0, 1 or 2, print no traceback, and leave the input tree exactly
as it was (every entry's kind, mode, link target and content hash, before and after).

Bounded and seeded in `make test` (12 examples, ~20 s; the audit on one folder of three mutated stores, ~35 s);
`make fuzz` (ROCKETMQ_FUZZ=1) runs FUZZ_STORE_EXAMPLES examples (default 200), random, and FUZZ_AUDITS audited
stores (default 8); its last result is in BENCHMARKS.md ("Store fuzz").
"""
from __future__ import annotations

import contextlib
import hashlib
import io
import os
import shutil
import signal
import socket
import stat
import subprocess
import sys
from datetime import timedelta
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from .conftest import REPO
from .support.strategies import FUZZ
EXAMPLES = int(os.environ.get("FUZZ_STORE_EXAMPLES", "200" if FUZZ else "12"))  # ~1.5 s each
AUDITS = int(os.environ.get("FUZZ_AUDITS", "8")) if FUZZ else 3
COMMAND_SECONDS = 30  # per command: each takes a few seconds at most on these stores
PROFILE = settings(max_examples=EXAMPLES, deadline=timedelta(seconds=300), derandomize=not FUZZ, database=None,
                   suppress_health_check=list(HealthCheck), print_blob=True)

MUTATIONS = ("bytes", "truncate", "extend", "fifo", "folder", "socket", "device", "rename", "link_other", "dangling",
             "loop", "part_loop", "no_permission")


# ---------------------------------------------------------------------------------------------------------
# The stores


@pytest.fixture(scope="module")
def base_stores(tmp_path_factory):
    """Two writer-built stores: several small segments and queues, index files, every config file; one crashed."""
    from store_format.write.generate import TrafficConfig, generate_store
    from store_format.write.writer import WriterConfig

    root = tmp_path_factory.mktemp("fuzz-bases")
    made = []
    for k, crash in enumerate((False, True)):
        store = root / f"b{k}" / "store"
        generate_store(store, TrafficConfig(messages=300, topics=2, queues=2, seed=k, cover=True, rate=20.0),
                       WriterConfig(mappedFileSizeCommitLog=1 << 16, maxHashSlotNum=64, maxIndexNum=200), crash=crash)
        made.append(store)
    return made


def shape(root: Path) -> dict:
    """Every entry below ``root`` (links not followed): kind, mode, link target or size and content hash."""
    out = {}
    for top, dirs, files in os.walk(root):
        for name in dirs + files:
            p = os.path.join(top, name)
            s = os.lstat(p)
            entry = (stat.S_IFMT(s.st_mode), s.st_mode & 0o7777, s.st_uid)
            if stat.S_ISLNK(s.st_mode):
                entry += (os.readlink(p),)
            elif stat.S_ISREG(s.st_mode):
                with open(p, "rb") as f:  # the test's own snapshot (as root): reads what the tools may not
                    entry += (s.st_size, hashlib.sha256(f.read()).hexdigest(), s.st_mtime_ns)
            out[os.path.relpath(p, root)] = entry
    return out


def files_of(root: Path) -> list[Path]:
    return sorted(p for p in root.rglob("*") if p.is_file() and not p.is_symlink())


@st.composite
def mutation_plans(draw):
    """1 to 4 mutations: (kind, which file (an index into the store's regular files), a number, some bytes)."""
    n = draw(st.integers(1, 4))
    return [(draw(st.sampled_from(MUTATIONS)), draw(st.integers(0, 10_000)), draw(st.integers(0, 1 << 20)),
             draw(st.binary(min_size=1, max_size=16))) for _ in range(n)]


_SOCKETS = []  # bound sockets stay open until the module ends (their files are what matters)


def mutate(root: Path, plan) -> list[str]:
    """Apply ``plan`` to the store at ``root``; returns what was done (for the failure message)."""
    done = []
    for kind, which, number, data in plan:
        files = files_of(root)
        if not files:
            break
        victim = files[which % len(files)]
        rel = victim.relative_to(root)
        if kind == "bytes":
            size = victim.stat().st_size
            if size:
                with open(victim, "r+b") as f:
                    f.seek(number % size)
                    f.write(data)
        elif kind == "truncate":
            os.truncate(victim, number % (victim.stat().st_size + 1))
        elif kind == "extend":
            with open(victim, "ab") as f:
                f.write(data * (1 + number % 64))
        elif kind in ("fifo", "folder", "socket", "device", "dangling", "loop", "link_other"):
            victim.unlink()
            if kind == "fifo":
                os.mkfifo(victim)
            elif kind == "folder":
                victim.mkdir()
                (victim / "inside").write_bytes(data)
            elif kind == "socket":
                s = socket.socket(socket.AF_UNIX)
                try:
                    s.bind(str(victim))
                except OSError:  # a path too long for a socket address: a FIFO instead
                    os.mkfifo(victim)
                _SOCKETS.append(s)
            elif kind == "device":
                victim.symlink_to("/dev/zero")
            elif kind == "dangling":
                victim.symlink_to(victim.parent / "nowhere")
            elif kind == "loop":
                victim.symlink_to(victim)
            else:
                others = [f for f in files if f != victim]
                victim.symlink_to(others[number % len(others)] if others else victim)
        elif kind == "part_loop":
            part = root / ("commitlog", "consumequeue", "index", "config")[number % 4]
            if part.is_dir() and not part.is_symlink():
                shutil.rmtree(part)
                part.symlink_to(part)
        elif kind == "rename":
            new = victim.with_name(("0" * (number % 25)) + victim.name[number % 3:] + ("", ".bak", "x", "é")[number % 4])
            if not new.exists() and new.name:
                victim.rename(new)
        elif kind == "no_permission":
            os.chown(victim, 65534, 65534)  # an unmapped owner: root in a user namespace cannot read it either
            os.chmod(victim, 0)
        done.append(f"{kind} {rel}")
    return done


# ---------------------------------------------------------------------------------------------------------
# Running the commands


class _Expired(Exception):
    pass


@contextlib.contextmanager
def bounded(seconds: int):
    def expired(*_):
        raise _Expired(f"still running after {seconds} s")

    previous = signal.signal(signal.SIGALRM, expired)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


def run_in_process(argv: list[str]) -> tuple[int, str, str]:
    """``python -m store_format ARGV`` in this process (its main, stdout and stderr captured), time-bounded."""
    from store_format.__main__ import main

    out, err = io.StringIO(), io.StringIO()
    with bounded(COMMAND_SECONDS), contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = main(argv)
        except SystemExit as e:  # argparse
            code = e.code
    return code, out.getvalue(), err.getvalue()


def _unprivileged_prefix() -> list[str]:
    if os.geteuid() != 0:
        return []
    if shutil.which("unshare") and subprocess.run(["unshare", "-r", "true"], capture_output=True).returncode == 0:
        return ["unshare", "-r"]  # root's override of permissions does not reach files of an unmapped owner
    return []


_PREFIX = None


def run_process(argv: list[str]) -> tuple[int, str, str]:
    global _PREFIX
    if _PREFIX is None:
        _PREFIX = _unprivileged_prefix()
    r = subprocess.run([*_PREFIX, sys.executable, "-m", "store_format", *argv], cwd=REPO, capture_output=True,
                       text=True, timeout=COMMAND_SECONDS, env={**os.environ, "PYTHONPATH": str(REPO)})
    return r.returncode, r.stdout, r.stderr


def commands(root: Path, msg_id: str, key: tuple[str, str]) -> list[list[str]]:
    s = str(root)
    out = [["dump", s, "--what", w] for w in ("commitlog", "consumequeue", "index", "checkpoint", "config")]
    out += [["dump", s, "--what", "commitlog", "--walk", "salvage", "--strict"],
            ["query", s, "--msg-id", msg_id], ["query", s, "--topic", key[0], "--key", key[1]]]
    return out


def probes(store: Path) -> tuple[str, tuple[str, str]]:
    """An offsetMsgId and a (topic, key) of the pristine store, for the queries."""
    from store_format.store import Store

    for msg in Store(store).messages():
        if msg.keys:
            return msg.msg_id, (msg.topic, msg.keys[0])
    raise AssertionError("no message with keys")


def check(code, out, err, what, done) -> None:
    assert code in (0, 1, 2), (what, code, done, err[-2000:])
    assert "Traceback" not in err and "internal error" not in err, (what, done, err[-3000:])


# ---------------------------------------------------------------------------------------------------------
# The properties


@pytest.mark.slow  # ~20 s: in make test, not in make test-fast
@PROFILE
@given(base=st.integers(0, 1), plan=mutation_plans())
def test_read_side_commands_survive_any_mutated_store(base_stores, tmp_path_factory, base, plan):
    src = base_stores[base]
    msg_id, key = probes(src)
    work = tmp_path_factory.mktemp("fuzz-store") / "store"
    shutil.copytree(src, work, symlinks=True)
    done = mutate(work, plan)
    before = shape(work)
    try:
        for argv in commands(work, msg_id, key):
            check(*run_in_process(argv), argv, done)
        argv = commands(work, msg_id, key)[len(done) % 8]  # one of them as a real, unprivileged process
        check(*run_process(argv), ["process", *argv], done)
        assert shape(work) == before, ("the input changed", done)
    finally:
        _restore_permissions(work)
        shutil.rmtree(work.parent, ignore_errors=True)


def _restore_permissions(root: Path) -> None:
    for top, dirs, files in os.walk(root):
        for name in dirs + files:
            p = os.path.join(top, name)
            if not os.path.islink(p):
                os.chmod(p, 0o755 if os.path.isdir(p) else 0o644)


def test_the_audit_survives_mutated_stores(spark, base_stores, tmp_path):
    """The audit over a folder of AUDITS mutated stores (seeded plans): it ends (exit 0, 1 or 2 with a one-line
    error, never a traceback escaping run), within its bound, and no input changes."""
    import random

    from jobs.audit import job as audit

    rnd = random.Random(22 if not FUZZ else None)
    dump = tmp_path / "dump"
    plans = {}
    for k in range(AUDITS):
        store = dump / f"m{k}" / "store"
        shutil.copytree(base_stores[k % 2], store, symlinks=True)
        plan = [(rnd.choice(MUTATIONS), rnd.randrange(10_000), rnd.randrange(1 << 20), rnd.randbytes(8))
                for _ in range(rnd.randint(1, 3))]
        plans[store] = mutate(store, plan)
    before = shape(dump)
    err = io.StringIO()
    with bounded(900), contextlib.redirect_stderr(err):
        code = audit.main(["--store", str(dump), "--out", str(tmp_path / "out"), "--no-report"])
    assert code in (0, 1, 2), (code, plans, err.getvalue()[-3000:])
    assert "Traceback" not in err.getvalue(), (plans, err.getvalue()[-3000:])
    assert shape(dump) == before, plans
    _restore_permissions(dump)
