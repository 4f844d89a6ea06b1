"""Claim, then commit: how every output of every job becomes visible, on a local path and on any URI.

A job run (:class:`JobRun`) claims each output before any work, writes into a staging location beside it, and makes
the result visible in one step at the end; a run that fails or is interrupted leaves the previous output as it was.

    with JobRun("decode") as run:              # the run's id: pid, host, start time, command
        out = run.output(args.out, overwrite=args.overwrite, inputs=protected)   # claimed, or refused (exit 2)
        watch(run, stores)                     # runtime/custody.py: the inputs' chain of custody, a gate of the commit
        write_table(df, out.staging)           # into the staging, invisible to every reader
        out.expect("_manifest.json")           # what the commit checks arrived there
        run.gate("the counts reconcile", check)   # every check of the run, before anything is committed
        run.commit()                           # gates, then each participant's commit, then the claims released

**The claim.**  Beside every output (a folder ``X``) lives its control folder ``.X.rocketmq-forensics/``, and in it
``claim.json``, created exclusively (``O_CREAT|O_EXCL`` on a local path) with the run's id: run id, job, pid, host,
start time, command.  A second run on the same output is refused (:class:`ClaimError`, exit 2), naming the first
and since when; a claim whose process is gone on this host (its pid gone, or given to a later process) is stale
and taken over, said on stderr, and what the dead run left is cleaned; a claim held on another host is refused
with what to do if that run is gone (remove the file).  A claim file that names no run (empty, cut short,
garbage: a crash between its exclusive creation and its write) is a claim being written while it is younger than
:data:`CLAIM_GRACE_SECONDS` (refused: try again in so many seconds), and the crash's once it is older (taken
over, said on stderr); one that is not a regular file is refused (remove it).  On a file system without
exclusive creation (pyarrow has none for object stores and HDFS) the claim is written when absent and read back:
two runs starting within the same moment may both think they hold it (docs/cluster.md says so).  The claim is
taken before any work and released when the run ends, however it ends (``finally``): only a killed process
(SIGKILL, power loss) leaves a stale one.

**Only the run's own files.**  The control folder is a folder of its own beside the output: never a symbolic link
nor reached through one (the output's parent is resolved once, links and ``..`` as the OS does, and must stay
so), never in, over or around an input (runtime/apart.py ``check_apart``, by device and inode), looked at again
before every write in it (:meth:`Target.check_control`).  Nothing read from it is trusted before it is checked
(:func:`recover`): a journal names only its own run's entries (``staging-<run id>``, ``old-<run id>``: plain names,
no separator, no ``..``, no absolute path, a run id of :func:`new_run_id`'s shape), each entry is what the journal
says (a folder of the control folder's own, not a link or a mount; the staging carrying its run's committed
marker, the old output this suite's), and the output a journal names is this suite's.  Anything else is refused
(:class:`ForeignEntryError`, exit 2, said with ``--quiet`` too), naming the file and saying to remove it; nothing
is done with it.  Entries of other names are left alone.

**Staging and the commit.**  The run writes into ``.X.rocketmq-forensics/staging-<run id>/``: on the same file system
as ``X`` and under a name no reader looks at.  Its commit (:meth:`Output.commit`) writes the output marker
``_ROCKETMQ_FORENSICS`` (``state: committed``, the run and its time) into the staging, once it has checked what
the job staged is there (:meth:`Output.expect`: the staging holds files, and every one the job named; else the
run fails naming what is missing, and nothing is committed), then:

* where the file system renames folders atomically (a local path, HDFS, a ``PyFileSystem`` whose handler says
  ``atomic_rename``), one rename: onto a missing output, or, over an existing one (``--overwrite``), an atomic
  exchange of the two folders on Linux (``renameat2(RENAME_EXCHANGE)``), else two renames journalled in
  ``commit-<run id>.json`` (the old output aside, the new one in); only then is the old one removed;
* elsewhere (object stores: no rename of folders) the marker is written LAST: an old output is first marked
  ``state: replacing`` (invisible to readers) and moved aside file by file, the output marked ``committing``, the
  staged files moved in, the marker with ``state: committed`` written, and only then the old files removed
  (:func:`finish_marker_commit`); ``commit-<run id>.json`` journals it, so a commit cut short is finished by the
  next run's claim.

On a URI the run's writers (Spark's, the audit's tasks) are given the staging as the URI that resolves to the very
folder the commit moves (:meth:`Target.show`, checked once per output by resolving it back): never a display
string, so a scheme whose paths are relative (a ``SubTreeFileSystem`` per bucket: ``x://bucket/a1`` is ``a1``,
its parent ``""``) stages where its commit looks.  A ``file://`` URI is a local path only without a host or with
``localhost`` (RFC 8089); another host's is refused.

Readers (:func:`output_state`, used by runtime/output.py's ``read_table``) take a folder holding the marker in any state
but ``committed`` for an uncommitted run and refuse it; a folder without the marker is not this suite's (a table of
the user's: read as it is); a marker without ``state`` was written before this change (read as committed).
``_SUCCESS`` files and the committed marker exist only in the staging until the commit moves them in.

**Failure.**  Any exception (``KeyboardInterrupt`` and ``SystemExit`` included) inside ``with JobRun(...)`` marks
every uncommitted participant failed with the reason -- ``_FAILED.json`` in its staging (run, reason, time) -- undoes
participants already committed in this run (the history's appends), releases the claims and re-raises: a signal
handler only has to raise (:func:`active_runs` and :meth:`JobRun.kept` say what was kept, for its one line).  The
next run's claim cleans what failed or killed runs left: failed stagings, a commit cut short (finished or rolled
back by its journal), participants' own leftovers (``recover`` hooks: the history's partial appends).

Delta outputs (``extract --format delta --overwrite`` over an existing Delta table this suite wrote) are not
swapped: the output is claimed ``inplace`` (runtime/output.py ``prepare_output(delta=True)``), the new data is staged
as files inside the table that no log lists, and its commit is one delta-rs transaction, a new table version;
``--overwrite`` of a Delta table is a version, never a deleted folder (time travel still reads the old one).

How a job uses it: runtime/cli.py runs ``prepare`` and ``run`` inside one :class:`JobRun`; ``prepare`` claims
(``prepare_output``), ``run`` (decorated with :func:`runs_job`) writes into ``out.staging`` and its outputs
are committed when it returns anything but a failure.  The audit's history is a participant of the same run
(runtime/history.py ``HistoryAppend``): its rows are appended before the output's commit (unlisted, and undone if that
commit fails), and the run is listed in it after (:meth:`Participant.finish`): the output's commit is the run's
commit point, and a kill on either side of it leaves what the history's next claim settles one way.
"""
from __future__ import annotations

import datetime as dt
import json
import os
import posixpath
import re
import shlex
import socket
import stat
import sys
import threading
import time
import uuid
from dataclasses import asdict, dataclass

import pyarrow.fs as pafs

from store_format import fs
from store_format.fs import OUTPUT_MARKER as MARKER

from .apart import OutputError, check_apart

TOOL = "rocketmq-forensics"
CONTROL_SUFFIX = ".rocketmq-forensics"  # .<name>.rocketmq-forensics/ beside the output
CLAIM = "claim.json"
FAILED = "_FAILED.json"  # in a failed staging: the run and the reason
STAGING_PREFIX = "staging-"
OLD_PREFIX = "old-"
JOURNAL_PREFIX = "commit-"
COMMITTED, REPLACING, COMMITTING = "committed", "replacing", "committing"
RUN_ID = re.compile(r"\d{8}T\d{6}Z-[0-9a-f]{8}")  # new_run_id's shape: the only run ids a name may carry
# A claim file that names no run is one being written (its exclusive creation and its write are microseconds
# apart), or one a crash left empty or cut short: past this age it is the crash's, and taken over
CLAIM_GRACE_SECONDS = 30.0


class ClaimError(OutputError):
    """Another run holds the output (or held it and died): refused, exit 2."""


class ForeignEntryError(OutputError):
    """Something beside an output that the commit machinery would act on (a journal, a staging, an old output, the
    control folder itself) is not what this suite writes there: refused, never acted on, exit 2."""


def _say(line: str, *, step: bool = True) -> None:
    """A progress line (runtime/progress.py); ``step=False`` for one that says what was done, which an interrupt's line
    never names as the step under way."""
    from .progress import say

    say(line, step=step)


# ---------------------------------------------------------------------------------------------------------
# The run's identity


def _pid_start(pid: int) -> int | None:
    """The process's start time in clock ticks since boot (/proc/<pid>/stat field 22), which tells a process
    from a later one that got the same pid; None where /proc does not say."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read().decode("ascii", "replace")
        return int(stat.rsplit(")", 1)[1].split()[19])
    except (OSError, ValueError, IndexError):
        return None


def new_run_id(when: dt.datetime | None = None) -> str:
    when = when or dt.datetime.now(dt.timezone.utc)
    return f"{when.strftime('%Y%m%dT%H%M%SZ')}-{uuid.uuid4().hex[:8]}"


def _is_run_id(value) -> bool:
    return isinstance(value, str) and RUN_ID.fullmatch(value) is not None


def run_id_in(name: str, prefix: str, suffix: str = "") -> str | None:
    """The run id in a control folder entry's name (``staging-<run id>``, ``commit-<run id>.json``), or None when
    the name is not of that form: nothing else is ever taken for one of the run's own entries."""
    if not (name.startswith(prefix) and name.endswith(suffix)):
        return None
    rid = name[len(prefix):len(name) - len(suffix)]
    return rid if _is_run_id(rid) else None


@dataclass
class RunIdentity:
    """Who holds a claim: written in ``claim.json`` and in a failed staging's ``_FAILED.json``."""

    run_id: str
    job: str
    pid: int
    host: str
    started: str  # ISO-8601 UTC, to the microsecond
    command: str
    pid_start: int | None = None

    @classmethod
    def current(cls, job: str, run_id: str | None = None, started: dt.datetime | None = None) -> "RunIdentity":
        if run_id is not None and not _is_run_id(run_id):
            raise ValueError(f"run id {run_id!r} is not of the form new_run_id() makes (YYYYMMDDTHHMMSSZ-xxxxxxxx)")
        started = started or dt.datetime.now(dt.timezone.utc)
        return cls(run_id or new_run_id(started), job, os.getpid(), socket.gethostname(), started.isoformat(),
                   " ".join(shlex.quote(a) for a in [os.path.basename(sys.argv[0] or "python"), *sys.argv[1:]]),
                   _pid_start(os.getpid()))

    @classmethod
    def from_json(cls, data) -> "RunIdentity | None":
        """The identity a claim file holds, or None when it names no run this suite could have written (not an
        object, a run id of another shape, a pid that is not a number)."""
        if not isinstance(data, dict) or not _is_run_id(data.get("run_id")):
            return None
        known = {k: data.get(k) for k in ("run_id", "job", "pid", "host", "started", "command", "pid_start")}
        if type(known["pid"]) is not int or known["pid"] <= 0 or not isinstance(known["host"], str):
            return None
        if known["pid_start"] is not None and type(known["pid_start"]) is not int:
            return None
        return cls(**{k: (str(v) if k in ("job", "started", "command") and v is not None else v)
                      for k, v in known.items()})

    def describe(self) -> str:
        return (f"run {self.run_id} ({self.job}, pid {self.pid} on host {self.host}, since {self.started}: "
                f"{self.command})")

    def alive(self) -> bool | None:
        """Whether its process still runs: None when it ran on another host (nothing to ask)."""
        if self.host != socket.gethostname():
            return None
        try:
            os.kill(self.pid, 0)
        except ProcessLookupError:
            return False
        except PermissionError:
            pass
        if self.pid_start is not None and _pid_start(self.pid) not in (None, self.pid_start):
            return False  # the pid was given to another process since
        return True


def _now() -> str:
    return dt.datetime.now(dt.timezone.utc).isoformat()


# ---------------------------------------------------------------------------------------------------------
# Small file operations through the seam (a Location: local or any pyarrow file system)


def write_bytes(loc: fs.Location, data: bytes, *, exclusive: bool = False, atomic: bool = False) -> None:
    """``data`` as the file ``loc``.  ``exclusive``: refused (FileExistsError) when it exists -- by ``O_EXCL`` on a
    local path, by a look first elsewhere.  ``atomic``: a reader sees the old bytes or the new ones (a local file
    is written beside and renamed over; an object store's PUT is atomic as it is)."""
    if loc.local_path is not None:
        os.makedirs(os.path.dirname(loc.path), exist_ok=True)
        if exclusive:
            fd = os.open(loc.path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0), 0o644)
            with os.fdopen(fd, "wb") as f:
                f.write(data)
                f.flush()
                os.fsync(f.fileno())
            return
        if atomic:
            tmp = f"{loc.path}.{uuid.uuid4().hex[:8]}.tmp"
            with open(tmp, "wb") as f:
                f.write(data)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, loc.path)
            return
        with open(loc.path, "wb") as f:
            f.write(data)
        return
    if exclusive and loc.exists():
        raise FileExistsError(loc.path)
    with loc.fs.open_output_stream(loc.path) as f:
        f.write(data)


def read_json(loc: fs.Location) -> dict | None:
    """A small JSON file's object, or None (missing, unreadable, not an object)."""
    try:
        if loc.local_path is not None:
            raw = fs.read_bytes(loc.path, 1 << 20, follow=False)
        else:
            if not loc.is_file():
                return None
            with loc.fs.open_input_stream(loc.path) as f:
                raw = f.read(1 << 20)
        data = json.loads(raw.decode("utf-8"))
    except (fs.UnreadableError, OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def write_json(loc: fs.Location, data: dict, **kw) -> None:
    write_bytes(loc, json.dumps(data, indent=1, default=str).encode("utf-8"), **kw)


def delete(loc: fs.Location) -> None:
    """``loc`` gone, file or folder (nothing there: nothing to do); a symbolic link is removed itself, never what
    it points to."""
    kind = kind_of(loc)
    if kind == "folder":
        if loc.local_path is not None:
            import shutil

            shutil.rmtree(loc.path)
        else:
            loc.fs.delete_dir(loc.path)
    elif kind in ("link", "other") and loc.local_path is not None:
        os.unlink(loc.path)
    elif kind != "missing":
        loc.fs.delete_file(loc.path)


def make_dirs(loc: fs.Location) -> None:
    loc.fs.create_dir(loc.path, recursive=True)


def files_below(loc: fs.Location) -> list[pafs.FileInfo]:
    """Every file below ``loc`` (recursive), by path."""
    if not loc.is_dir():
        return []
    infos = loc.fs.get_file_info(pafs.FileSelector(loc.path, recursive=True))
    return sorted((i for i in infos if i.type == pafs.FileType.File), key=lambda i: i.path)


def contents(loc: fs.Location) -> tuple[int, int]:
    """(files, bytes) below ``loc``."""
    found = files_below(loc)
    return len(found), sum(i.size or 0 for i in found)


def atomic_rename(filesystem: pafs.FileSystem) -> bool:
    """Whether ``move`` of a folder is one atomic rename on this file system: the local one, HDFS, or a
    ``PyFileSystem`` whose handler says so (``atomic_rename = True``).  Object stores (S3, GCS, Azure blobs) have no
    rename of folders: their outputs are committed by a marker written last."""
    if isinstance(filesystem, pafs.LocalFileSystem):
        return True
    if type(filesystem).__name__ == "HadoopFileSystem":
        return True
    handler = getattr(filesystem, "handler", None)
    return bool(getattr(handler, "atomic_rename", False))


def _move_file(filesystem: pafs.FileSystem, src: str, dst: str) -> None:
    try:
        filesystem.move(src, dst)
        return
    except NotImplementedError:
        pass
    except OSError:
        if filesystem.get_file_info(src).type == pafs.FileType.NotFound:
            raise
    try:
        filesystem.copy_file(src, dst)
    except (NotImplementedError, OSError):
        with filesystem.open_input_stream(src) as a, filesystem.open_output_stream(dst) as b:
            while True:
                chunk = a.read(8 << 20)
                if not chunk:
                    break
                b.write(chunk)
    filesystem.delete_file(src)


def move_files(src: fs.Location, dst: fs.Location, *, skip: tuple[str, ...] = ()) -> None:
    """Every file below ``src`` moved to the same place below ``dst``, one at a time (a file system without a
    rename of folders); ``skip``: names at the top left where they are.  Idempotent: a file moved already is not
    looked for again (a commit cut short is finished by running it again)."""
    make_dirs(dst)
    base = src.path.rstrip("/")
    for info in files_below(src):
        rel = info.path[len(base) + 1:]
        if rel in skip:
            continue
        target = posixpath.join(dst.path, rel)
        parent = posixpath.dirname(target)
        if parent != dst.path:
            src.fs.create_dir(parent, recursive=True)
        _move_file(src.fs, info.path, target)


def exchange(a: str, b: str) -> bool:
    """Swap two local paths atomically (Linux ``renameat2(RENAME_EXCHANGE)``); False where the kernel, the C
    library or the file system cannot (the caller then renames twice, journalled)."""
    if not sys.platform.startswith("linux"):
        return False
    import ctypes

    try:
        libc = ctypes.CDLL(None, use_errno=True)
        renameat2 = libc.renameat2
    except (OSError, AttributeError):
        return False
    renameat2.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint]
    at_fdcwd, rename_exchange = -100, 2
    return renameat2(at_fdcwd, os.fsencode(a), at_fdcwd, os.fsencode(b), rename_exchange) == 0


# ---------------------------------------------------------------------------------------------------------
# What lies at an output path


def marker_of(loc: fs.Location) -> dict | None:
    """What the output marker in ``loc`` says, or None when it holds no marker of this suite (a regular file,
    not a link, whose JSON names this tool)."""
    data = read_json(loc.child(MARKER))
    return data if data is not None and data.get("tool") == TOOL else None


def output_state(path) -> str:
    """``missing``, ``file`` (not a folder), ``empty``, ``committed`` (this suite's, committed; or written before
    commits had states), ``uncommitted`` (this suite's marker in another state: a commit under way or cut short),
    or ``foreign`` (a folder this suite did not write: no marker)."""
    loc = fs.resolve(path) if not isinstance(path, fs.Location) else path
    info = loc.info()
    if info.type == pafs.FileType.NotFound:
        return "missing"
    if info.type != pafs.FileType.Directory:
        return "file"
    names = [i.base_name for i in loc.list()] if loc.local_path is None else os.listdir(loc.path)
    mark = marker_of(loc)
    if mark is not None:
        return COMMITTED if mark.get("state", COMMITTED) == COMMITTED else "uncommitted"
    if not names:
        return "empty"
    return "foreign"  # no marker of ours (none, a link, another tool's): not this suite's folder


def check_committed(path, what: str = "output") -> None:
    """Refuse to read an output whose run has not committed (a folder this suite is still writing, or whose
    commit was cut short: the next run on it finishes or removes it)."""
    if output_state(path) == "uncommitted":
        mark = marker_of(fs.resolve(path)) or {}
        raise OutputError(f"{what} {fs.uri_of(path)} is not committed (run {mark.get('run_id', '?')}: {mark.get('state', '?')}): "
                          "its run was interrupted or is still writing; readers ignore it until a run commits it")


def commit_of(path, run_id: str) -> bool | None:
    """Whether run ``run_id``'s commit of the output ``path`` took: True when the output is that run's, committed;
    None when its commit journal still lies beside the output (a commit cut short, which the output's next run
    finishes or rolls back); False otherwise (never committed, or replaced since).  Looks, changes nothing."""
    target = Target(path)
    mark = marker_of(target.loc)
    if mark is not None and mark.get("run_id") == run_id and mark.get("state", COMMITTED) == COMMITTED:
        return True
    if target.control.child(f"{JOURNAL_PREFIX}{run_id}.json").exists():
        return None
    return False


# ---------------------------------------------------------------------------------------------------------
# Targets: an output (or history) folder, its control folder and its claim


@dataclass(frozen=True)
class Entry:
    """An entry of a control folder as it is: its name, where it is, and what it is (:func:`kind_of`)."""

    name: str
    loc: fs.Location
    kind: str


def kind_of(loc: fs.Location) -> str:
    """What ``loc`` is, a link never followed to say: ``missing``, ``folder``, ``file``, ``link`` (a local one), or
    ``other`` (a FIFO, socket or device)."""
    if loc.local_path is not None:
        try:
            mode = os.lstat(loc.path).st_mode
        except (FileNotFoundError, NotADirectoryError):
            return "missing"
        return ("link" if stat.S_ISLNK(mode) else "folder" if stat.S_ISDIR(mode) else "file" if stat.S_ISREG(mode)
                else "other")
    return {pafs.FileType.Directory: "folder", pafs.FileType.File: "file",
            pafs.FileType.NotFound: "missing"}.get(loc.info().type, "other")


_A_KIND = {"folder": "a folder", "file": "a file", "link": "a symbolic link", "other": "a special file (FIFO, "
           "socket or device)", "missing": "missing"}


class Target:
    """A folder a run writes (``--out``, ``--history``): where it is, its control folder beside it, its claim.
    ``inputs``: what the run reads, which the control folder must stay apart from (runtime/apart.py check_apart)."""

    def __init__(self, path: fs.Location, inputs=()):
        path = fs.as_typed(path)  # the spelling it was given
        self.shown = str(path)
        self.inputs = tuple(fs.as_typed(i) for i in inputs or ())
        local = fs.local_path(path)  # a file:// URI of another host is refused here
        if local is None:
            self.loc = fs.resolve(path)
            self.uri = str(path)
        else:  # links and ``..`` resolved as the OS does: the parent is the folder the run really writes in
            self.loc = fs.Location(pafs.LocalFileSystem(), fs.real(local.rstrip("/") or local))
            self.uri = None
        if self.loc.name in ("", ".", ".."):
            raise OutputError(f"{path}: an output must be a folder with a name (not a file system's root)")
        self.parent = self.loc.parent()
        self.control = self.parent.child(f".{self.loc.name}{CONTROL_SUFFIX}")
        self.rename = atomic_rename(self.loc.fs)
        if self.uri is not None:
            self._check_uri()

    def show(self, loc: fs.Location) -> str:
        """``loc`` (the output, its control folder or an entry of it) as the run's writers are given it and the user
        reads it: the local path, or the URI that resolves to ``loc`` itself on the output's file system (the
        tasks write through it, the commit reads ``loc``: one place)."""
        if self.uri is None:
            return loc.path
        return fs.uri_below(self.uri, self.loc, loc)

    def _check_uri(self) -> None:
        """The control folder's URI resolves to the control folder itself, so that every file a task writes through
        a URI below it lands where the commit looks (a scheme may spell its paths unlike its URIs)."""
        try:
            uri = self.show(self.control)
            back = fs.resolve(uri)
        except ValueError as e:  # StoreFormatError too: the scheme refused the name
            raise OutputError(f"output {self.shown}: no URI on its file system names the folder beside it where the "
                              f"run stages its files ({e}); choose an output one folder deeper") from None
        if back.path.rstrip("/") != self.control.path.rstrip("/") or back.fs.type_name != self.control.fs.type_name:
            raise OutputError(f"output {self.shown}: the folder beside it where the run stages its files "
                              f"({self.control.path} on its file system) is named {uri}, which resolves to "
                              f"{back.path}: files written through that name would not be where the commit looks; "
                              "choose an output one folder deeper")

    # ---- the control folder: a folder of its own beside the output, never a link, never in an input ----------
    def check_control(self, what: str = "output") -> None:
        """Refuse (:class:`ForeignEntryError`) a control folder that is a symbolic link or reached through one, is not
        a folder, or lies in, over or around an input; nothing there yet is fine.  Looked at before every write in
        it (the claim, the staging, a failure's mark, the commit's moves, the claim's release), so a link put in its
        place while the run ran is seen too."""
        here = self.show(self.control)
        if self.uri is None and fs.real(self.parent.path) != self.parent.path:
            raise ForeignEntryError(f"{what} {self.shown}: the folder that holds it, {self.parent.path}, is now "
                                    f"reached through a symbolic link (it resolves to {fs.real(self.parent.path)}): "
                                    "the run writes only where it looked when it started; run again")
        kind = kind_of(self.control)
        if kind == "missing":
            return
        if kind == "link":
            raise ForeignEntryError(f"{what} {self.shown}: its control folder {here} is a symbolic link (to "
                                    f"{os.readlink(self.control.path)}): the run's claim and staging are never "
                                    "written through a link, which would put them where it points; remove the link "
                                    f"(rm {here}, not rm -r) and run again")
        if kind != "folder":
            raise ForeignEntryError(f"{what} {self.shown}: {here} is {_A_KIND[kind]}, not the control folder this "
                                    "suite makes beside an output; remove it and run again")

        check_apart(here, self.inputs, what=f"the control folder of {what} {self.shown},")

    def make_control(self, what: str = "output") -> None:
        self.check_control(what)
        if self.uri is None:
            os.makedirs(self.parent.path, exist_ok=True)
            try:
                os.mkdir(self.control.path, 0o755)
            except FileExistsError:
                pass
        else:
            make_dirs(self.control)
        self.check_control(what)  # what was made (or was there) is still the folder itself

    def make_folder(self, loc: fs.Location, what: str = "output") -> None:
        """A new folder of the run's own in the control folder (its staging): made there, never found there."""
        self.check_control(what)
        if loc.local_path is not None:
            os.mkdir(loc.path, 0o755)  # FileExistsError: not this run's to write in
        else:
            make_dirs(loc)

    def entries(self) -> list[Entry]:
        """The control folder's entries, each as it is (a link is a link, whatever it points to)."""
        if self.control.local_path is not None:
            try:
                names = sorted(os.listdir(self.control.path))
            except (FileNotFoundError, NotADirectoryError):
                return []
            return [Entry(n, self.control.child(n), kind_of(self.control.child(n))) for n in names]
        found = [fs.Location(self.control.fs, i.path) for i in self.control.list()]
        return [Entry(loc.name, loc, kind_of(loc)) for loc in found]

    def refuse_entry(self, entry: Entry, why: str, what: str = "output") -> ForeignEntryError:
        """The refusal of an entry the commit machinery would act on and that is not what this suite writes there:
        it names the entry and what to do, and nothing is done with it (nor with anything it names)."""
        rm = "rm" if entry.kind in ("file", "link", "other") else "rm -r"
        return ForeignEntryError(f"{what} {self.shown}: {self.show(entry.loc)} {why}; nothing was done with it or "
                                 f"with anything it names.  Look at what it is, remove it ({rm} "
                                 f"{self.show(entry.loc)}) and run again")

    # ---- the claim -----------------------------------------------------------------------------------------
    def holder(self) -> tuple[RunIdentity | None, fs.Location]:
        claim = self.control.child(CLAIM)
        return RunIdentity.from_json(read_json(claim)), claim

    def check_unclaimed(self, what: str = "output") -> None:
        """Refuse when a run holds the claim (or held it and died): the early check, with no side effect."""
        self.check_control(what)
        holder, claim = self.holder()
        if holder is None:
            if kind_of(claim) != "missing":
                self._claim_left_by_a_crash(claim, what)  # refused, unless the claim will take it over
            return
        if holder.alive() is False:
            return  # stale: the claim takes it over
        self._refuse(holder, claim, what)

    def _claim_left_by_a_crash(self, claim: fs.Location, what: str) -> float:
        """A claim file that names no run: its age in seconds when a crash provably left it (a regular file, empty
        or cut short, written more than :data:`CLAIM_GRACE_SECONDS` ago: no run takes that long between creating
        its claim and writing it), to be taken over; else refused, saying what to do."""
        here = self.show(claim)
        kind = kind_of(claim)
        if kind != "file":
            raise ForeignEntryError(f"{what} {self.shown}: {here} is {_A_KIND[kind]}, not a claim this suite "
                                    f"wrote; remove it (rm {here}) and run again")
        if claim.local_path is not None:
            written = os.lstat(claim.path).st_mtime
        else:
            mtime = claim.info().mtime
            written = mtime.timestamp() if mtime is not None else None
        if written is None:
            raise ClaimError(f"{what} {self.shown}: {here} names no run, and this file system does not say when it "
                             "was written (a claim being written this moment, or one a crash left empty): if no run "
                             "is starting on this output, remove that file and run again")
        age = time.time() - written
        if age < CLAIM_GRACE_SECONDS:
            raise ClaimError(f"{what} {self.shown} is being claimed by another run right now ({here} is still being "
                             f"written); try again in {int(CLAIM_GRACE_SECONDS - age) + 1} seconds (a claim that "
                             "still names no run then was left by a crash, and is taken over), or choose another "
                             "path")
        return age

    def _refuse(self, holder: RunIdentity, claim: fs.Location, what: str):
        alive = holder.alive()
        if alive is False:
            raise ClaimError(f"{what} {self.shown} is claimed by {holder.describe()}, but that process is no longer "
                             f"running (killed?): its claim is stale.  Remove {self.show(claim)} and run again: the "
                             "next run removes what it left (its staging)")
        where = "" if alive else (f" (it runs on another host: if it is no longer running, remove {self.show(claim)} "
                                  "and run again)")
        raise ClaimError(f"{what} {self.shown} is in use by {holder.describe()}{where}: two runs never write one "
                         "output; wait for it to end, or choose another path")

    def claim(self, run: RunIdentity, what: str = "output") -> "Claim":
        self.make_control(what)
        loc = self.control.child(CLAIM)
        body = json.dumps(asdict(run), indent=1).encode("utf-8")
        for _ in range(3):
            try:
                write_bytes(loc, body, exclusive=True)
            except FileExistsError:
                holder, _ = self.holder()
                if holder is None:  # being written this very moment, or a file a crash left empty
                    time.sleep(0.05)
                    holder, _ = self.holder()
                if holder is None:
                    age = self._claim_left_by_a_crash(loc, what)  # refused unless a crash left it
                    _say(f"{what} {self.shown}: taking over {self.show(loc)}, which names no run and was written "
                         f"{age:.0f} s ago (left empty or cut short by a crash)", step=False)
                    delete(loc)
                    continue
                if holder.run_id == run.run_id:
                    return Claim(self, run)
                if holder.alive() is False:  # its process is gone (killed): the claim is stale, taken over
                    _say(f"{what} {self.shown}: taking over the stale claim of {holder.describe()} (that process "
                         "is no longer running)", step=False)
                    delete(loc)
                    continue
                self._refuse(holder, loc, what)
            else:
                break
        if loc.local_path is None:  # no exclusive creation here: read it back, the last writer wins
            holder, _ = self.holder()
            if holder is None or holder.run_id != run.run_id:
                if holder is None:
                    raise ClaimError(f"{what} {self.shown}: its claim could not be read back from {self.show(loc)}")
                self._refuse(holder, loc, what)
        return Claim(self, run)


class Claim:
    """A held claim: released once (the file removed if it is still ours, the control folder if it is empty)."""

    def __init__(self, target: Target, run: RunIdentity):
        self.target, self.run, self.held = target, run, True

    def release(self) -> None:
        if not self.held:
            return
        self.held = False
        try:
            self.target.check_control()
        except OutputError:
            return  # never through a link: what is there is left for the next run to refuse, naming it
        holder, loc = self.target.holder()
        try:
            if holder is not None and holder.run_id == self.run.run_id:
                loc.fs.delete_file(loc.path)
            control = self.target.control
            if control.is_dir() and not self.target.entries():
                control.fs.delete_dir(control.path)
        except OSError:
            pass  # the claim file is gone or the folder is not empty: nothing more to release

    def leftovers(self) -> list[Entry]:
        """What other runs left in the control folder (we hold the claim: none of them is running)."""
        mine = {f"{STAGING_PREFIX}{self.run.run_id}", f"{JOURNAL_PREFIX}{self.run.run_id}.json", CLAIM}
        return [e for e in self.target.entries() if e.name not in mine]


# ---------------------------------------------------------------------------------------------------------
# Participants of a run's commit


class Participant:
    """What a run commits: an output folder, a Delta table's new version, the history's appends.  ``order``:
    lower commits first (the history before the outputs: an output is committed last, so no undo is asked of
    it); :meth:`finish`, after every commit, completes what must follow the outputs (the history's listing)."""

    order = 10
    name = "output"

    def commit(self) -> None:
        raise NotImplementedError

    def finish(self) -> None:
        """After every participant committed (the run's outputs are in place: nothing is undone any more): what
        completes the run.  A kill or an error here leaves what the participant's next claim finishes."""

    def undo(self) -> None:
        """Revert a commit this run made (a later participant failed)."""

    def fail(self, reason: str) -> None:
        """Never committed: mark the staging failed, with the reason."""

    def release(self) -> None:
        """Drop the claims."""

    def kept(self) -> str:
        """What a failure left, in words."""
        return ""


def check_output(path: fs.Location, *, overwrite: bool, inputs=(), what: str = "output") -> str:
    """The early check of an output (no side effect): apart from every input (runtime/apart.py ``check_apart``), not
    claimed by another run, and either missing, empty, or a folder this suite wrote when ``overwrite``.  Returns
    :func:`output_state`."""
    path = fs.as_typed(path)  # the spelling it was given

    check_apart(path, inputs, what=what)
    target = Target(path, inputs)
    state = check_state(target, path, overwrite=overwrite, what=what)
    target.check_unclaimed(what)
    return state


def check_state(target: "Target", path: fs.Location, *, overwrite: bool, what: str = "output") -> str:
    """What lies at the output may be replaced by this run (the check before the claim, and again once it is held:
    another run may have committed in between)."""
    path = fs.as_typed(path)  # the spelling it was given
    state = output_state(target.loc)
    if state == "file":
        raise OutputError(f"{what} {path} exists and is {_kind(target.loc)}, not a folder written by this suite: "
                          "--overwrite only ever replaces those; remove it yourself or choose another path")
    if state == "foreign":
        if not overwrite:
            raise OutputError(f"{what} {path} already exists and is not empty; pass --overwrite to replace it (only "
                              f"possible for a folder this suite wrote: it has no {MARKER} file, so remove it "
                              "yourself or choose another path)")
        raise OutputError(f"{what} {path} exists and was not written by this suite (no {MARKER} file in it): "
                          "--overwrite only ever replaces folders this suite wrote; remove it yourself or choose "
                          "another path")
    if state in (COMMITTED, "uncommitted") and not overwrite and not _only_marker(target.loc):
        raise OutputError(f"{what} {path} already exists and is not empty; pass --overwrite to replace it")
    return state


def _kind(loc: fs.Location) -> str:
    if loc.local_path is None:
        return "a file"
    try:
        return fs.describe(os.stat(loc.path).st_mode)
    except OSError:
        return "a broken link"


def _only_marker(loc: fs.Location) -> bool:
    return all(i.base_name == MARKER for i in loc.list())


class Output(Participant):
    """An output folder claimed by a run: written in :attr:`staging`, committed by a rename (or a marker written
    last), or marked failed.  :meth:`local_work` gives a local folder for writers that need one (the store writer
    of ``replay``), uploaded into the staging before the commit when the output is elsewhere."""

    order = 10

    def __init__(self, run: "JobRun", path: fs.Location, *, overwrite: bool, inputs=(), what: str = "output",
                 stage: bool = True, inplace: bool = False):
        path = fs.as_typed(path)  # the spelling it was given
        self.run, self.shown, self.what, self.overwrite = run, str(path), what, overwrite
        self.inplace = inplace  # an existing Delta table: written in place, its commit a new table version
        check_output(path, overwrite=overwrite, inputs=inputs, what=what)
        self.target = Target(path, inputs)
        self.name = f"{what} {path}"
        self.claim = self.target.claim(run.identity, what)
        # unmarked: its control folder was no longer its own when it failed; journalled: its commit got as far as
        # its journal, and is the next claim's to finish or roll back by it (a failed staging is never committed)
        self.committed = self.failed = self.unmarked = self.journalled = False
        self._work: str | None = None
        self.expected: list[str] = []
        try:
            recover(self.target, self.claim, run.recover_hook(self.target), what)
            check_state(self.target, path, overwrite=overwrite, what=what)  # as it is now the claim is held
            self.staging = self.target.control.child(f"{STAGING_PREFIX}{run.identity.run_id}")
            if inplace:
                self.staging = self.target.loc
            elif stage:
                self.target.make_folder(self.staging, what)
        except BaseException:
            self.claim.release()
            raise

    # ---- where the run writes ---------------------------------------------------------------------------
    @property
    def staging_path(self) -> str:
        """The staging as the run's writers are given it (Spark's, the tasks'): a local path, else the URI that
        resolves to the very folder the commit moves (:meth:`Target.show`)."""
        return self.target.show(self.staging)

    def expect(self, *names: str) -> None:
        """Files or folders the job wrote into the staging, by their path below the output (``summary.json``,
        ``findings``): the commit checks that they arrived before it commits anything."""
        self.expected.extend(n.strip("/") for n in names if n.strip("/"))

    def _check_staged(self) -> None:
        """What the job staged is in the staging, or nothing is committed: the staging holds files, and every one
        the job named (:meth:`expect`).  Files written anywhere else (a URI that named another folder) fail the
        run here, naming what is missing, instead of a committed output with nothing in it."""
        here = self.target.show(self.staging)
        found: set[str] = set()
        if kind_of(self.staging) == "folder":
            base = self.staging.path.rstrip("/")
            found = {i.path[len(base) + 1:] for i in files_below(self.staging)} - {MARKER, FAILED}
        missing = [n for n in self.expected if n not in found and not any(f.startswith(n + "/") for f in found)]
        if not found or missing:
            what = ", ".join(missing) if found else "nothing (no file at all)"
            raise OutputError(f"{self.name}: the run's files did not arrive in its staging {here}: missing "
                              f"{what}; nothing was committed (were they written somewhere else?)")

    def local_work(self) -> str:
        """A local folder to write into: the staging itself for a local output; else a temporary folder, copied
        into the staging when the run commits."""
        if self.staging.local_path is not None:
            return self.staging.path
        if self._work is None:
            import tempfile

            self._work = tempfile.mkdtemp(prefix="rocketmq-forensics-out-")
        return self._work

    def _upload_work(self) -> None:
        if self._work is None:
            return
        src = fs.Location(pafs.LocalFileSystem(), self._work)
        for info in files_below(src):
            rel = info.path[len(self._work.rstrip("/")) + 1:]
            dst = self.staging.child(rel)
            dst.fs.create_dir(posixpath.dirname(dst.path), recursive=True)
            with open(info.path, "rb") as a, dst.fs.open_output_stream(dst.path) as b:
                while True:
                    chunk = a.read(8 << 20)
                    if not chunk:
                        break
                    b.write(chunk)
        self._drop_work()

    def _drop_work(self) -> None:
        if self._work is not None:
            import shutil

            shutil.rmtree(self._work, ignore_errors=True)
            self._work = None

    # ---- the commit --------------------------------------------------------------------------------------
    def commit(self) -> None:
        if self.committed:
            return  # committed, or abandoned (nothing to commit)
        if self.inplace:  # the Delta transaction the job made was the commit: only the marker is refreshed
            mark = marker_of(self.target.loc) or {"tool": TOOL}
            write_json(self.target.loc.child(MARKER), {**mark, "job": self.run.identity.job, "state": COMMITTED,
                                                       "run_id": self.run.identity.run_id, "written": _now()},
                       atomic=True)
            self.committed = True
            return
        self._upload_work()
        self.target.check_control(self.what)
        self._check_staged()
        mark = {"tool": TOOL, "job": self.run.identity.job, "run_id": self.run.identity.run_id, "state": COMMITTED,
                "written": _now(), "note": "written by rocketmq-forensics; --overwrite may replace this folder"}
        target, staging = self.target, self.staging
        old = output_state(target.loc)
        replaced = old in (COMMITTED, "uncommitted", "empty") and target.loc.exists()
        previous = (marker_of(target.loc) or {}) if replaced else {}
        size = contents(target.loc) if replaced and old != "empty" else None
        if target.rename:
            write_json(staging.child(MARKER), mark)
            _say(f"committing {self.shown}")
            self._commit_by_rename(replaced)
        else:
            _say(f"committing {self.shown} (a marker written last: this file system has no rename)")
            self._commit_by_marker(mark, replaced)
        self.committed = True
        if size is not None and size[0]:
            _say(f"overwrite: replaced {target.shown} (the previous output: {size[0]} files, {size[1]:,} bytes, "
                 f"written by {previous.get('job') or TOOL} at {previous.get('written', '?')}; removed once the "
                 "new one was in place)", step=False)

    def _commit_by_rename(self, replaced: bool) -> None:
        target, staging, run_id = self.target, self.staging, self.run.identity.run_id
        if not replaced:
            if target.loc.is_dir():  # an empty folder: a rename replaces it on a local file system
                target.loc.fs.delete_dir(target.loc.path)
            target.loc.fs.move(staging.path, target.loc.path)
            return
        if target.loc.local_path is not None and exchange(staging.path, target.loc.path):
            delete(staging)  # the staging's name now holds the old output
            return
        journal = target.control.child(f"{JOURNAL_PREFIX}{run_id}.json")
        old = target.control.child(f"{OLD_PREFIX}{run_id}")
        write_json(journal, {"run_id": run_id, "how": "rename", "staging": staging.name, "old": old.name})
        self.journalled = True
        target.loc.fs.move(target.loc.path, old.path)
        target.loc.fs.move(staging.path, target.loc.path)
        delete(old)
        delete(journal)

    def _commit_by_marker(self, mark: dict, replaced: bool) -> None:
        target, staging, run_id = self.target, self.staging, self.run.identity.run_id
        journal = target.control.child(f"{JOURNAL_PREFIX}{run_id}.json")
        old = target.control.child(f"{OLD_PREFIX}{run_id}")
        write_json(staging.child(MARKER), mark)  # the staging says whose it is (never moved: written last, below)
        write_json(journal, {"run_id": run_id, "how": "marker", "staging": staging.name, "old": old.name,
                             "marker": mark, "replaced": replaced})
        self.journalled = True
        finish_marker_commit(target, staging, old, mark, replaced)
        delete(journal)

    def fail(self, reason: str) -> None:
        if self.committed or self.failed:
            return
        self.failed = True
        self._drop_work()
        if self.inplace or self.journalled:
            return  # no staging (the table's log never saw the run's files), or a commit the next claim finishes
        try:
            self.target.check_control(self.what)  # never through a link put in its place while the run ran
        except OutputError:
            self.unmarked = True
            raise
        try:
            if kind_of(self.staging) == "folder":
                for info in files_below(self.staging):  # nothing in a failed staging says it is complete
                    if info.base_name == "_SUCCESS":
                        self.staging.fs.delete_file(info.path)
                write_json(self.staging.child(FAILED), {**asdict(self.run.identity), "reason": reason,
                                                        "failed_at": _now(), "output": self.shown})
        except OSError:
            pass  # a full disk may refuse even this: the next claim removes the staging all the same

    def abandon(self) -> None:
        """Nothing to commit (a job that found nothing to write): the staging goes, the output stays as it was."""
        self._drop_work()
        if not self.inplace:
            self.target.check_control(self.what)
            delete(self.staging)
        self.committed = True  # nothing left to fail
        self.release()

    def release(self) -> None:
        self.claim.release()

    def kept(self) -> str:
        if self.committed:
            return ""
        if self.inplace:
            return f"{self.shown}: the Delta table is at its previous version"
        state = output_state(self.target.loc)
        if self.journalled:
            return (f"{self.shown}: its commit was cut short (readers refuse it meanwhile); the next run on it "
                    f"finishes it, or puts the previous output back, by its journal")
        if state == COMMITTED and (marker_of(self.target.loc) or {}).get("run_id") == self.run.identity.run_id:
            # the interrupt came after the commit point (the rename), before the commit returned: the output is ours
            return f"{self.shown}: committed (the interrupt came as its commit ended)"
        before = "the previous output is unchanged" if state == COMMITTED else "no output was made"
        if self.unmarked:
            return (f"{self.shown}: {before}; nothing was written beside it (its control folder is no longer a folder "
                    "of its own: the next run refuses it, naming it)")
        return f"{self.shown}: {before}; the staging {self.target.show(self.staging)} is marked failed"


def finish_marker_commit(target: Target, staging: fs.Location, old: fs.Location, mark: dict, replaced: bool) -> None:
    """The commit of an output on a file system without rename, from wherever it stopped.  Every step can run again,
    and the output always carries this suite's marker, so that a journal's run can tell it from any other folder:

    1. the old output's marker says ``replacing`` (replaced by this run: readers refuse it from now on);
    2. its files are moved aside into ``old``, the marker last (``old`` then says what it is);
    3. the output's marker says ``committing`` (this run's: still refused by readers);
    4. the staged files are moved in, and the committed marker written last: from then on readers see it;
    5. the staging and the old files are removed."""
    rid = mark["run_id"]
    now = marker_of(target.loc)
    if not (now and now.get("run_id") == rid and now.get("state") == COMMITTED):
        if replaced and now is not None and not _in_commit_of(now, rid):
            now = {**now, "state": REPLACING, "replaced_by": rid}
            write_json(target.loc.child(MARKER), now)
        if now is not None and now.get("state") == REPLACING and now.get("replaced_by") == rid:
            move_files(target.loc, old, skip=(MARKER,))
            _drop_empty_folders(target.loc)
            write_json(old.child(MARKER), now)
        if not (now and now.get("state") == COMMITTING and now.get("run_id") == rid):
            make_dirs(target.loc)
            write_json(target.loc.child(MARKER), {"tool": TOOL, "job": mark.get("job"), "run_id": rid,
                                                  "state": COMMITTING, "written": _now()})
        if kind_of(staging) == "folder":
            move_files(staging, target.loc, skip=(MARKER, FAILED))
        write_json(target.loc.child(MARKER), mark)  # last: from now on readers see the new output
    delete(staging)
    delete(old)


def _drop_empty_folders(loc: fs.Location) -> None:
    """The folders below ``loc`` that moving their files away left empty (an object store has none)."""
    infos = loc.fs.get_file_info(pafs.FileSelector(loc.path, recursive=True, allow_not_found=True))
    for path in sorted((i.path for i in infos if i.type == pafs.FileType.Directory), key=len, reverse=True):
        if not loc.fs.get_file_info(pafs.FileSelector(path)):
            loc.fs.delete_dir(path)


def _in_commit_of(mark: dict, rid: str) -> bool:
    """Whether an output's marker says the commit of run ``rid`` is under way on it."""
    return ((mark.get("state") == REPLACING and mark.get("replaced_by") == rid)
            or (mark.get("state") == COMMITTING and mark.get("run_id") == rid))


# ---------------------------------------------------------------------------------------------------------
# What earlier runs left: every entry validated before anything acts on it


def recover(target: Target, claim: Claim, extra=None, what: str = "output") -> None:
    """With the claim held, what earlier runs left beside ``target``: a commit cut short finished (or rolled back
    by its journal), failed and abandoned stagings removed, ``extra(loc)`` for entries a participant knows (the
    history's journals); each said on stderr.

    Nothing read from the control folder is trusted before it is checked (:func:`_journal`, :func:`_own_folder`): a
    journal names only the entries of its own run (``staging-<run id>``, ``old-<run id>``: plain names, no
    separator, no ``..``, no absolute path), and each is what the journal says -- a folder of the control
    folder's own (not a link, not a mount), the staging carrying its run's committed marker, the old output this
    suite's marker -- and the output itself is this suite's.  Anything else is refused
    (:class:`ForeignEntryError`, naming the file and saying to remove it), and nothing is done with it."""
    target.check_control(what)
    for entry in claim.leftovers():
        if entry.name.startswith(JOURNAL_PREFIX):
            _finish_journal(target, entry, what)
    for entry in claim.leftovers():
        if extra is not None and extra(entry.loc):
            continue
        if entry.name.startswith(STAGING_PREFIX):
            _own_folder(target, entry, STAGING_PREFIX, what, "a staging")
            failed = read_json(entry.loc.child(FAILED))
            why = f"failed: {failed.get('reason')}" if failed else "ended without committing or failing: killed?"
            delete(entry.loc)
            _say(f"removed the staging left by run {entry.name[len(STAGING_PREFIX):]} ({why})", step=False)
        elif entry.name.startswith(OLD_PREFIX):
            _own_folder(target, entry, OLD_PREFIX, what, "an old output")
            if marker_of(entry.loc) is None and files_below(entry.loc):
                raise target.refuse_entry(entry, f"holds files and no {MARKER} of this suite: it is not an output "
                                                 "this suite moved aside", what)
            delete(entry.loc)
        elif entry.name.startswith(JOURNAL_PREFIX):  # one that named no commit to finish (refused above)
            raise target.refuse_entry(entry, "is not a commit journal this suite wrote", what)


def _own_folder(target: Target, entry: Entry, prefix: str, what: str, called: str) -> str:
    """``entry`` is a folder of the control folder's own whose name is ``<prefix><run id>``: the run id, or a
    refusal naming it."""
    rid = run_id_in(entry.name, prefix)
    if rid is None:
        raise target.refuse_entry(entry, f"is named like {called} of this suite's runs but is not one ({prefix}"
                                         "<run id>)", what)
    if entry.kind != "folder":
        raise target.refuse_entry(entry, f"is {_A_KIND[entry.kind]}, not {called} of this suite's (a folder)", what)
    if entry.loc.local_path is not None and os.lstat(entry.loc.path).st_dev != os.lstat(target.control.path).st_dev:
        raise target.refuse_entry(entry, "is a mount point, not a folder this suite made", what)
    return rid


def _journal(target: Target, entry: Entry, what: str) -> dict:
    """A commit journal's contents once every field is what this suite writes, or a refusal naming the file."""
    rid = run_id_in(entry.name, JOURNAL_PREFIX, ".json")
    if rid is None:
        raise target.refuse_entry(entry, "is named like a commit journal but is not one (commit-<run id>.json)", what)
    if entry.kind != "file":
        raise target.refuse_entry(entry, f"is {_A_KIND[entry.kind]}, not a commit journal (a file)", what)
    data = read_json(entry.loc)
    if data is None:
        raise target.refuse_entry(entry, "is not a commit journal: no JSON object in it (empty, cut short or "
                                         "something else)", what)
    own = {"run_id": rid, "staging": f"{STAGING_PREFIX}{rid}", "old": f"{OLD_PREFIX}{rid}"}
    wrong = [f"{k} {data.get(k)!r} (its run's own is {v!r})" for k, v in own.items() if data.get(k) != v]
    if wrong:
        raise target.refuse_entry(entry, "is not a commit journal this suite wrote: it names " + ", ".join(wrong)
                                  + "; a journal names only its own run's entries of this control folder", what)
    if data.get("how") not in ("rename", "marker"):
        raise target.refuse_entry(entry, f"names a commit of an unknown kind ({data.get('how')!r})", what)
    mark = data.get("marker")
    if data["how"] == "marker" and not (isinstance(mark, dict) and mark.get("tool") == TOOL
                                        and mark.get("run_id") == rid and mark.get("state") == COMMITTED
                                        and isinstance(data.get("replaced"), bool)):
        raise target.refuse_entry(entry, "names a commit without its run's committed marker", what)
    return data


def _finish_journal(target: Target, entry: Entry, what: str) -> None:
    """A commit cut short, finished or rolled back as its (validated) journal says; refused before any step when
    what the journal names is not what that commit leaves (:func:`recover`)."""
    data = _journal(target, entry, what)
    rid, how = data["run_id"], data["how"]
    folders = {e.name: e for e in target.entries()}
    staging, old = folders.get(data["staging"]), folders.get(data["old"])
    if staging is not None:
        _own_folder(target, staging, STAGING_PREFIX, what, "a staging")
        if (marker_of(staging.loc) or {}).get("run_id") != rid:
            raise target.refuse_entry(staging, f"is not the staging the journal {entry.name} names: it does not "
                                               f"carry run {rid}'s {MARKER}", what)
    if old is not None:
        _own_folder(target, old, OLD_PREFIX, what, "an old output")
    here = marker_of(target.loc)
    done = here is not None and here.get("run_id") == rid and here.get("state") == COMMITTED
    moving_aside = here is not None and here.get("state") == REPLACING and here.get("replaced_by") == rid
    if old is not None and marker_of(old.loc) is None and files_below(old.loc) and not (how == "marker"
                                                                                        and moving_aside):
        raise target.refuse_entry(old, f"holds files and no {MARKER} of this suite: it is not the output the "
                                       f"journal {entry.name} moved aside", what)
    if target.loc.exists() and here is None and contents(target.loc)[0]:
        raise target.refuse_entry(entry, f"names a commit onto {target.shown}, which is not a folder this suite "
                                         f"wrote (no {MARKER} in it)", what)
    if how == "marker":
        if staging is None and not done:
            raise target.refuse_entry(entry, f"names a commit whose staging {data['staging']} is not there, and "
                                             f"{target.shown} is not that run's output", what)
        if here is not None and not data["replaced"] and here.get("run_id") != rid:
            raise target.refuse_entry(entry, f"names a commit onto a missing output, but {target.shown} holds run "
                                             f"{here.get('run_id')}'s", what)
        finish_marker_commit(target, staging.loc if staging else target.control.child(data["staging"]),
                             old.loc if old else target.control.child(data["old"]), data["marker"], data["replaced"])
        said = "finished it"
    elif not target.loc.exists():
        if staging is not None:
            target.loc.fs.move(staging.loc.path, target.loc.path)
            said = "finished it"
        elif old is not None:
            target.loc.fs.move(old.loc.path, target.loc.path)
            old, said = None, "the previous output is back"
        else:
            raise target.refuse_entry(entry, f"names a commit of which nothing is left ({data['staging']} and "
                                             f"{data['old']} are not there, nor is {target.shown})", what)
    elif not done and (old is not None or staging is None):
        raise target.refuse_entry(entry, f"names a commit onto {target.shown}, which holds another run's output "
                                         f"(run {(here or {}).get('run_id')}), not run {rid}'s", what)
    else:
        said = "finished it" if done else "the previous output stays"
    if old is not None and kind_of(old.loc) != "missing":
        delete(old.loc)
    delete(entry.loc)
    _say(f"recovered {target.shown}: the commit of run {rid} was cut short; {said}", step=False)


# ---------------------------------------------------------------------------------------------------------
# The run


_ACTIVE: list["JobRun"] = []
_LOCK = threading.Lock()


def active_runs() -> list["JobRun"]:
    """The runs of this process that have not ended (for a signal handler's one line: :meth:`JobRun.kept`)."""
    with _LOCK:
        return list(_ACTIVE)


def describe_exception(e: BaseException) -> str:
    if isinstance(e, KeyboardInterrupt):
        return f"interrupted ({type(e).__name__}{': ' + str(e) if str(e) else ''})"
    if isinstance(e, SystemExit):
        return f"exited ({e.code})"
    text = str(e).strip().splitlines()[0] if str(e).strip() else ""
    return f"{type(e).__name__}: {text}" if text else type(e).__name__


class JobRun:
    """One run of a job: its identity, its claimed outputs and other participants, the checks that gate the commit.
    A context manager: an exception (any, ``KeyboardInterrupt`` and ``SystemExit`` included) fails the run with the
    exception as the reason and is re-raised; leaving without :meth:`commit` or :meth:`abandon` fails it too."""

    def __init__(self, job: str, *, run_id: str | None = None, started: dt.datetime | None = None):
        self.identity = RunIdentity.current(job, run_id, started)
        self.participants: list[Participant] = []
        self.gates: list[tuple[str, object]] = []
        self.done = False
        self.reason: str | None = None
        self._depth = 0
        self._hooks: list = []  # recover(target, entry) -> bool: leftovers a participant kind knows

    @property
    def run_id(self) -> str:
        return self.identity.run_id

    @property
    def started(self) -> dt.datetime:
        return dt.datetime.fromisoformat(self.identity.started)

    def __enter__(self) -> "JobRun":
        self._depth += 1
        if self._depth == 1:
            with _LOCK:
                _ACTIVE.append(self)
        return self

    def __exit__(self, kind, value, tb) -> None:
        self._depth -= 1
        if self._depth and kind is None:
            return  # an inner ``with job_run(...)`` of the same run: the outer one decides
        try:
            if kind is not None:
                self.fail(describe_exception(value))
            elif not self.done:
                self.fail("the job ended without committing its output")
        finally:
            if not self._depth:
                with _LOCK:
                    if self in _ACTIVE:
                        _ACTIVE.remove(self)

    def recover_hook(self, target: "Target"):
        hooks = list(self._hooks)
        return (lambda entry: any(h(target, entry) for h in hooks)) if hooks else None

    def add(self, participant: Participant) -> Participant:
        self.participants.append(participant)
        return participant

    def find(self, path: fs.Location) -> "Output | None":
        """The output this run claimed at ``path`` (as given), if any."""
        path = fs.as_typed(path)  # the spelling it was given
        for p in self.participants:
            if isinstance(p, Output) and p.shown == str(path):
                return p
        return None

    def output(self, path: fs.Location, *, overwrite: bool, inputs=(), what: str = "output", stage: bool = True,
               inplace: bool = False) -> Output:
        """``path`` claimed for this run (refused: :class:`ClaimError`), its leftovers cleaned, a staging made;
        the same object again when this run claimed it already (a job's ``prepare`` claims, its ``run`` writes)."""
        path = fs.as_typed(path)  # the spelling it was given
        found = self.find(path)
        if found is not None:
            return found
        return self.add(Output(self, path, overwrite=overwrite, inputs=inputs, what=what, stage=stage,
                               inplace=inplace))

    def gate(self, name: str, check) -> None:
        """``check()`` must pass (return, not raise) before anything is committed; it runs at :meth:`commit`."""
        self.gates.append((name, check))

    def commit(self) -> None:
        """Every gate, then every participant's commit in order (the history's appends first, the outputs last:
        the run's commit point), then every participant's :meth:`~Participant.finish` (the history lists the run).
        A failure before the commit point undoes the commits made, fails the rest and is raised; one in a finish
        is raised as it is (the outputs stay committed; the participant's next claim finishes it)."""
        for name, check in self.gates:
            check()
        ordered = sorted(self.participants, key=lambda p: p.order)
        done: list[Participant] = []
        try:
            for p in ordered:
                p.commit()
                done.append(p)
        except BaseException as e:
            reason = describe_exception(e)
            for p in reversed(done):
                try:
                    p.undo()
                except Exception as undo_error:  # noqa: BLE001 - said, and the first failure is the one raised
                    _say(f"could not undo the commit of {p.name}: {describe_exception(undo_error)}", step=False)
            self._fail_all(reason, exclude=())
            raise
        self.done = True
        try:
            for p in ordered:
                p.finish()
        finally:
            self._release_all()

    def abandon(self) -> None:
        """Nothing to commit: every staging removed, every claim released, the outputs as they were."""
        for p in self.participants:
            if isinstance(p, Output):
                p.abandon()
        self.done = True
        self._release_all()

    def fail(self, reason: str) -> None:
        if self.done:
            return
        self.reason = reason
        self._fail_all(reason, exclude=())

    def _fail_all(self, reason: str, exclude) -> None:
        self.done = True
        for p in self.participants:
            try:
                p.fail(reason)
            except Exception as e:  # noqa: BLE001 - marking a staging failed must not hide the failure itself
                _say(f"could not mark {p.name} failed: {describe_exception(e)}", step=False)
        self._release_all()

    def _release_all(self) -> None:
        for p in self.participants:
            try:
                p.release()
            except Exception:  # noqa: BLE001 - a claim that cannot be removed is stale for the next run to say
                pass

    def kept(self) -> list[str]:
        """What this run's failure left, one sentence per participant."""
        return [k for k in (p.kept() for p in self.participants) if k]


def current_run() -> "JobRun | None":
    """The innermost run of this process that has not ended."""
    with _LOCK:
        return _ACTIVE[-1] if _ACTIVE else None


def job_run(job: str) -> JobRun:
    """The run a job's ``run(spark, args)`` belongs to: the one runtime/cli.py started for it (its ``prepare``
    claimed the outputs), or a new one when ``run`` is called by itself (a notebook, a test).  Use it as a
    context (``with job_run(NAME) as run:``): only the outermost ``with`` ends the run."""
    found = current_run()
    if found is not None and not found.done:
        return found
    return JobRun(job)


def runs_job(job: str):
    """Decorate a job's ``run(spark, args, ...)``: it runs inside :func:`job_run`, and its claimed outputs are
    committed when it returns a result that is not a failure (exit 2); an exception, or a failure returned,
    fails the run (the stagings marked, the outputs as they were)."""
    import functools

    def wrap(fn):
        @functools.wraps(fn)
        def run(*args, **kwargs):
            with job_run(job) as jr:
                result = fn(*args, **kwargs)
                if not jr.done:
                    if getattr(result, "exit_code", 0) == 2:
                        jr.fail("the job failed (exit 2)")
                    else:
                        jr.commit()
                return result
        return run
    return wrap
