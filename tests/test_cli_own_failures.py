"""``python -m store_format``'s exit-code contract for the tool's own failures: 0 ok, 1 nothing matched (query) or
damage found (dump --strict), 2 anything else -- a failure of the tool itself is one line, ``error: <path>:
<reason>``, and exit 2, never 1 and never a traceback, whatever it is and whenever it happens."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from .conftest import fixture_store

REPO = Path(__file__).resolve().parent.parent


def run(args, **kw) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, *map(str, args)], cwd=REPO, capture_output=True, text=True, timeout=300,
                          **kw)


# ``python -m store_format`` with one reader replaced (argv[1]: what replaces it), then its own main
_PATCHED = r"""
import resource, sys
import store_format.config as C, store_format.store as S, store_format.__main__ as M

def exhausting(self, *args, **kwargs):  # runs out of memory holding what it allocated, under an address-space limit
    held = []
    resource.setrlimit(resource.RLIMIT_AS, (int(open('/proc/self/statm').read().split()[0]) * resource.getpagesize()
                                            + (64 << 20), resource.RLIM_INFINITY))
    for size in [1 << 20, 1 << 16, 1 << 12, 1 << 10] + list(range(512, 0, -8)):  # every size class, to the last bytes
        try:
            while True:
                held.append(bytearray(size))
        except MemoryError:
            pass
    raise MemoryError()

def no_memory(*args, **kwargs):
    raise MemoryError()

def broken(self, *args, **kwargs):
    raise KeyError("boom")

how = sys.argv.pop(1)
if how == "exhausting":
    S.Store.checkpoint = exhausting
elif how == "broken":
    S.Store.checkpoint = broken
else:  # parsing a config file runs out of memory
    C._scan = C._slow_loads = no_memory
sys.exit(M.main(sys.argv[1:]))
"""


def test_running_out_of_memory_is_one_line_naming_the_store_and_exit_2():
    """Printed after the failed frames are let go (what they held is free again): ``error: <store>: out of memory:
    ...``, exit 2 (the old line named no path)."""
    store = fixture_store("basic")
    r = run(["-c", _PATCHED, "exhausting", "dump", store, "--what", "checkpoint"])
    assert r.returncode == 2, (r.returncode, r.stderr[-2000:])
    assert r.stderr == f"error: {store}: out of memory: MemoryError (run with --debug for the traceback)\n"


def test_running_out_of_memory_parsing_a_config_file_names_the_file_and_the_operation(tmp_path):
    """The file's error row (TOO_LARGE: "ran out of memory parsing it (N bytes)"), the other files dumped, exit 2;
    with --strict too (the tool's own failure, not damage found)."""
    root = tmp_path / "s"
    (root / "commitlog").mkdir(parents=True)
    (root / "config").mkdir()
    path = root / "config" / "topics.json"
    path.write_text('{"topicConfigTable":{"T":{"perm":6}}}')
    for strict in ([], ["--strict"]):
        r = run(["-c", _PATCHED, "config", "dump", root, "--what", "config", *strict])
        assert r.returncode == 2, r.stderr
        (row,) = map(json.loads, r.stdout.splitlines())
        assert row["errors"] == [{"kind": "TOO_LARGE", "file": str(path), "position": None, "field": None,
                                  "message": f"ran out of memory parsing it ({path.stat().st_size} bytes)"}]


def test_an_output_that_cannot_be_written_names_stdout_and_exits_2(tmp_path):
    """A full disk under the records (``> /dev/full``): the error names ``<stdout>``, also when the output is
    small enough to be written only at the end (once the interpreter's exit flush, exit status 120)."""
    for what in ("checkpoint", "commitlog"):
        with open("/dev/full", "w") as full:
            r = subprocess.run([sys.executable, "-m", "store_format", "dump", fixture_store("basic"), "--what", what],
                               cwd=REPO, stdout=full, stderr=subprocess.PIPE, text=True, timeout=300)
        assert r.returncode == 2, r.stderr
        assert r.stderr == "error: <stdout>: No space left on device\n", r.stderr


def test_a_reader_that_goes_away_ends_the_command_quietly(tmp_path):
    """``dump | head -1``: exit 0, nothing on stderr (no "Exception ignored ... BrokenPipeError", no status 120)."""
    from store_format.write.generate import TrafficConfig, generate_store

    generate_store(tmp_path / "s", TrafficConfig(messages=3000, topics=2, queues=2))
    p = subprocess.Popen([sys.executable, "-m", "store_format", "dump", tmp_path / "s", "--what", "commitlog"],
                         cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    json.loads(p.stdout.readline())
    p.stdout.close()
    err = p.stderr.read().decode()
    assert p.wait(timeout=300) == 0 and err == ""


def test_an_internal_error_names_the_store_and_exits_2(tmp_path):
    """A failure of the tool itself (here: a reader raising what it never should) is ``error: <store>: internal
    error: ...``, exit 2, the traceback only with --debug."""
    store = fixture_store("basic")
    r = run(["-c", _PATCHED, "broken", "dump", store, "--what", "checkpoint"])
    assert r.returncode == 2
    assert r.stderr == f"error: {store}: internal error: KeyError: 'boom' (run with --debug for the traceback)\n"
    r = run(["-c", _PATCHED, "broken", "dump", store, "--what", "checkpoint", "--debug"])
    assert r.returncode == 2 and "Traceback" in r.stderr and r.stderr.endswith("internal error: KeyError: 'boom'\n")


def test_a_config_too_large_to_parse_is_exit_2_even_with_strict(tmp_path):
    """``--strict`` makes damage exit 1; a file the tool could not parse within memory is its own failure: 2."""
    root = tmp_path / "s"
    (root / "commitlog").mkdir(parents=True)
    (root / "config").mkdir()
    (root / "config" / "topics.json").write_text('{"topicConfigTable":{"T":{"perm":6}}}')
    r = run(["-m", "store_format", "dump", root, "--what", "config", "--strict"],
            env={**os.environ, "ROCKETMQ_CONFIG_MEMORY_LIMIT": "8"})
    assert r.returncode == 2
    (row,) = map(json.loads, r.stdout.splitlines())
    assert [e["kind"] for e in row["errors"]] == ["TOO_LARGE"]
