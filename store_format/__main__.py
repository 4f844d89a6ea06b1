"""Command line for the pure-Python store tools.

  python -m store_format dump STORE_DIR --what commitlog|consumequeue|index|checkpoint|config
  python -m store_format dump STORE_DIR --what timerlog|timerwheel|timercheck      (RocketMQ 5.x timer store)
  python -m store_format query STORE_DIR (--topic T --key K | --msg-id ID)

Records go to stdout as JSON Lines (every one with its file and byte position); the one-line summary and
errors go to stderr.  Exit codes: 0 ok, 1 nothing matched (query) or damage found (dump --strict),
2 bad usage or unreadable input.  A file that cannot be read -- no permission, a FIFO, socket or device where
the store has a regular file, a symbolic link loop, a part that is a file -- is never waited on: ``dump``
prints an ``error`` row for it (``error_kind`` UNREADABLE), goes on with the rest and exits 2; so does a config
file too large to parse within memory (TOO_LARGE: ``store_format.config.CONFIG_MEMORY_LIMIT``); a store root
or a checkpoint that cannot be read ends the command with one line, ``error: <path>: <reason>``, and exit 2.
An index file that cannot be opened (unreadable, too short, or a geometry neither the file nor
--config/--hash-slots/--index-num tells): ``dump --what index`` prints an ``error`` row for it and exits 2;
``query --key`` says so on stderr and scans the commitlog for the key instead (salvage walk), so its answer
is complete: exit 0 or 1; but a geometry given with --config or the flags that an index file's content
contradicts is an error naming the file, its length and the candidates (exit 2).  Every failure of the tool
itself -- out of memory, an internal error, an output that cannot be written (``error: <stdout>: No space left on
device``) -- is one line, ``error: <path>: <reason>``, and exit 2, never 1; ``--debug`` adds the Python traceback.
A reader that goes away (``| head``) ends the command quietly, exit 0.

The 5.x timer store (read when its files are there; no flag): ``--what timerlog`` prints every timer-log unit
(``entry``, the end-of-file ``blank``, ``corrupt`` with its reason); ``--what timerwheel`` every non-empty wheel
slot with the walk of its chain (``chain``: complete, loop, out_of_range, corrupt); ``--what timercheck`` the
timer checkpoint.  Damage (a corrupt unit, a looping or corrupt chain, a wheel or timercheck of the wrong
length) counts for ``--strict``; a store without the file prints nothing and says so.

``dump --what commitlog`` prints a walk of the commitlog (``--walk``, store_format.scan.WALKS): ``kept`` (the
default), what the broker keeps after its predicted recovery -- every row before the cut the audit reports, then the
broker's stop there, nothing after it -- or ``salvage``, every frame and unframeable span of every segment, past
damage and past the cut.  ``--config broker.conf`` with ``forceVerifyPropCRC=true`` (RocketMQ 5.2.0+) moves the cut
as it moves the broker's: its recovery checks each record's ``__CRC32#`` instead of its body CRC and ends the log at
the first record without the property or whose value does not match (a ``stop`` row of kind NO_PROPERTY_CRC or
BAD_PROPERTY_CRC, damage for ``--strict``).
"""
from __future__ import annotations

import argparse
import base64
import json
import os
import sys
import traceback
from collections import deque
from pathlib import Path

from . import interrupts
from . import layout as L
from .brokerconf import add_geometry_arguments, geometry_from_args, recovery_settings_from_args
from .recovery import predict_cut
from .scan import WALKS, canonical_walk, kept_items, walk_help
from .commitlog import END_OF_DATA, SalvageSpan
from .errors import ErrorKind, IndexFileError, StoreFormatError
from .fs import UnreadableError, error_line
from .store import Store

EXIT_OK, EXIT_FINDINGS, EXIT_USAGE = 0, 1, 2
EXIT_UNREADABLE = EXIT_USAGE  # "bad usage or an unreadable store"


def _emit(obj: dict, out) -> None:
    out.write(json.dumps(obj, ensure_ascii=False, default=_json_default) + "\n")


def _json_default(v):
    if isinstance(v, (bytes, bytearray, memoryview)):
        return base64.b64encode(bytes(v)).decode("ascii")
    raise TypeError(f"not JSON serializable: {type(v).__name__}")


def frame_to_dict(frame) -> dict:
    if isinstance(frame, SalvageSpan):
        return {"kind": "corrupt", "segment": frame.segment, "file_position": frame.file_position,
                "length": frame.length, "reason": frame.reason, "excerpt_hex": frame.excerpt.hex(),
                "unwritten_tail": frame.unwritten_tail}
    out = {"kind": frame.kind, "segment": frame.segment, "file_position": frame.file_position,
           "physical_offset": frame.physical_offset}
    if frame.kind == "message" and frame.message is not None:
        out.update(frame.message.to_dict())
    elif frame.kind == "blank":
        out["store_size"] = frame.size
    else:
        out.update({"stop_kind": frame.stop_kind, "field": frame.stop_field, "reason": frame.stop_message,
                    "damage": frame.stop_kind != END_OF_DATA})
    return out


def mark_early_rolls(rows):
    """Commitlog rows (:func:`frame_to_dict`) in walk order, where the broker rolled early marked as a batch.

    doAppend ends a segment with the blank (TOTALSIZE = the bytes left) when a put does not fit with the 8
    bytes END_FILE_MIN_BLANK_LENGTH after it; a batch (``CommitLog.putMessages``) is one put, so the blank
    can come although the next record alone would have fitted.  There the records after the blank (from the
    next segment's start) get a shared ``batch`` (the first one's physical offset): the fewest that together
    do not fit, so that ``write`` rolls at the same place.  Nothing is marked when even every record up to
    the next non-message row fits (no put of them explains the roll)."""
    source, pending = iter(rows), deque()

    def take():
        return pending.popleft() if pending else next(source, None)

    while (row := take()) is not None:
        yield row
        if row["kind"] != "blank":
            continue
        room = row["store_size"] - L.END_FILE_MIN_BLANK_LENGTH  # what a put could still take there
        held, total = [], 0
        while total <= room and (nxt := take()) is not None:
            held.append(nxt)
            if nxt["kind"] != "message":
                break
            total += nxt["store_size"]
        if total > room and held[0]["store_size"] <= room and held[0]["file_position"] == 0:
            for h in held:
                h["batch"] = held[0]["physical_offset"]
        pending.extendleft(reversed(held))


def dump(store: Store, what: str, args, out) -> tuple[str, bool, int]:
    """Print the ``what`` part of the store; (summary, damage found, files that could not be opened)."""
    if what in TIMER_PARTS:
        return dump_timer(store, what, out)
    damaged = False
    part = {"checkpoint": "checkpoint"}.get(what, what)
    unreadable = store.unreadable(part) if part != "checkpoint" else []
    if what == "config":  # a config file's own row says why it cannot be read
        unreadable = [e for e in unreadable if Path(e.file).parent != store.root / "config"]
    reported = {e.file for e in unreadable}  # each file once: its own reader's error is not repeated
    for e in unreadable:  # reported, never waited on nor skipped in silence
        _emit(_error_row(e), out)
    if what == "commitlog":
        counts = {}
        skipped = []
        frames = store.walk_commitlog(check_crc=not args.no_crc, salvage=True, unreadable=skipped)
        if args.walk == "kept":
            try:
                cut = predict_cut(store, recovery_settings_from_args(args), check_crc=not args.no_crc).cut
            except UnreadableError as e:  # a segment its recovery reads: what the broker keeps is not known
                if e.file not in reported:
                    reported.add(e.file)
                    _emit(_error_row(e), out)
                return (f"{len(store.segments)} segment(s): the kept walk needs the broker's predicted recovery, "
                        f"which cannot read {e.file}", False, len(unreadable) + 1)
            frames = kept_items(frames, cut)
        for d in mark_early_rolls(map(frame_to_dict, frames)):
            counts[d["kind"]] = counts.get(d["kind"], 0) + 1
            damaged |= d["kind"] == "corrupt" or bool(d.get("damage"))
            _emit(d, out)
        skipped = [e for e in skipped if e.file not in reported]
        for e in skipped:
            _emit(_error_row(e), out)
        return (f"{len(store.segments)} segment(s): " + ", ".join(f"{v} {k}" for k, v in sorted(counts.items())),
                damaged, len(unreadable) + len(skipped))
    if what == "consumequeue":
        n = 0
        failed = 0
        for (topic, qid), files in sorted(store.queues.items()):
            try:
                for u in store.consume_queue(topic, qid):
                    n += 1
                    damaged |= u.kind == "invalid"
                    _emit({"topic": topic, "queue_id": qid, "queue_offset": u.queue_offset,
                           "physical_offset": u.physical_offset, "size": u.size, "tags_code": u.tags_code,
                           "kind": u.kind, "file": u.file, "file_position": u.file_position}, out)
            except UnreadableError as e:
                if e.file not in reported:
                    failed += 1
                    _emit({"topic": topic, "queue_id": qid, **_error_row(e)}, out)
            except StoreFormatError as e:
                damaged = True
                _emit({"topic": topic, "queue_id": qid, **_error_row(e)}, out)
        return f"{len(store.queues)} queue(s), {n} unit(s)", damaged, len(unreadable) + failed
    if what == "index":
        n, unreadable = 0, len(unreadable)
        paths = store.index_paths()
        for path in paths:
            try:
                with store.open_index(path) as f:
                    _emit({"kind": "header", "file": f.name, **vars(f.header), "hash_slot_num": f.hash_slot_num,
                           "index_num": f.index_num}, out)
                    for e in f.entries():
                        n += 1
                        _emit({"kind": "entry", "file": f.name, **vars(e)}, out)
            except IndexFileError as e:  # cannot be opened at all: unreadable input, not damage read
                if e.file not in reported:
                    unreadable += 1
                    _emit(_error_row(e), out)
        return f"{len(paths)} index file(s), {n} entr(ies)", damaged, unreadable
    if what == "checkpoint":
        cp = store.checkpoint()
        markers = store.markers()
        _emit({**vars(cp), "min_timestamp": cp.min_timestamp, "min_timestamp_index": cp.min_timestamp_index,
               "abort": markers.abort, "abort_pid": markers.abort_pid, "lock": markers.lock}, out)
        return f"checkpoint {cp.file_length} bytes; abort file {'present' if markers.abort else 'absent'}", False, 0
    if what == "config":
        from .config import value_problems

        names = store.config_names()
        failed = 0
        for name in names:
            cfg = store.config(name)
            errors = list(cfg.errors) + value_problems(cfg)
            damaged |= cfg.data is None or bool(errors)
            failed += any(e.kind in (ErrorKind.UNREADABLE, ErrorKind.TOO_LARGE) for e in cfg.errors)
            _emit({"name": name, "source": cfg.source, "data": _stringify_keys(cfg.data),
                   "errors": [e.as_dict() for e in errors]}, out)
        return f"{len(names)} config file(s)", damaged, len(unreadable) + failed
    raise ValueError(what)


TIMER_PARTS = ("timerlog", "timerwheel", "timercheck")


def dump_timer(store: Store, what: str, out) -> tuple[str, bool, int]:
    """``dump --what timerlog|timerwheel|timercheck``: the 5.x timer store's files, every row with its file and
    byte position (store_format.timer)."""
    from . import timer as T

    root = store.root
    part = "config" if what == "timercheck" else what
    unreadable = [e for e in store.unreadable(part) if what != "timercheck" or Path(e.file).name == T.TIMER_CHECK_FILE]
    for e in unreadable:
        _emit(_error_row(e), out)
    failed, damaged = len(unreadable), False
    if what == "timerlog":
        counts: dict = {}
        files = T.list_timer_log_files(root)
        for f in files:
            try:
                for u in T.walk_timer_log(f):
                    counts[u.kind] = counts.get(u.kind, 0) + 1
                    damaged |= u.kind == "corrupt"
                    _emit({**u.to_dict(), "file": f.name}, out)
            except UnreadableError as e:
                failed += 1
                _emit(_error_row(e), out)
        return (f"{len(files)} timer-log file(s): " + (", ".join(f"{v} {k}" for k, v in sorted(counts.items()))
                                                        or "no unit"), damaged, failed)
    if what == "timerwheel":
        wheel = root / T.TIMER_WHEEL_FILE
        if not wheel.exists():
            return "no timerwheel (not a 5.x store, or its broker never built the timer store)", False, failed
        try:
            slots = T.read_wheel_slots(wheel)
        except UnreadableError as e:
            _emit(_error_row(e), out)
            return "timerwheel could not be read", False, failed + 1
        if slots.problem is not None:
            damaged = True
            _emit({**slots.problem.as_dict(), "kind": "error", "error_kind": slots.problem.kind.value}, out)
        ends: dict = {}
        with T.TimerLog(root) as log:
            for row in slots.rows():
                chain = T.walk_chain(log, row["last_pos"])
                ends[chain.end] = ends.get(chain.end, 0) + 1
                row.update(kind="slot", file=T.TIMER_WHEEL_FILE, chain=chain.end, chain_units=len(chain.units),
                           chain_positions=list(chain.positions))
                if chain.error is not None:
                    row["chain_error"] = chain.error.as_dict()
                damaged |= chain.end in ("loop", "corrupt") or not row["index_matches"]
                _emit(row, out)
        return (f"timerwheel: {len(slots)} non-empty slot(s) of {slots.slots_total * 2}; chains: "
                + (", ".join(f"{v} {k}" for k, v in sorted(ends.items())) or "none"), damaged, failed)
    path = root / "config" / T.TIMER_CHECK_FILE
    if not path.exists():
        return "no config/timercheck (not a 5.x store, or its broker never built the timer store)", False, failed
    if failed:
        return "config/timercheck could not be read", False, failed
    try:
        cp = T.read_timer_checkpoint(path)
    except UnreadableError as e:
        _emit(_error_row(e), out)
        return "config/timercheck could not be read", False, failed + 1
    row = {"kind": "timercheck", **cp.to_dict(), "file": f"config/{T.TIMER_CHECK_FILE}"}
    _emit(row, out)
    return (f"timercheck {cp.file_length} bytes" + (f"; {cp.problem.kind.value}" if cp.problem else ""),
            cp.problem is not None, failed)


def _error_row(e: StoreFormatError) -> dict:
    """A file or unit that could not be read, as a row: ``kind`` "error", the error's own kind as ``error_kind``."""
    return {**e.as_dict(), "kind": "error", "error_kind": e.kind.value}


def _stringify_keys(v):
    if isinstance(v, dict):
        return {str(k): _stringify_keys(x) for k, x in v.items()}
    if isinstance(v, list):
        return [_stringify_keys(x) for x in v]
    return v


def query(store: Store, args, out, err=None) -> tuple[int, dict]:
    """Print the matches; (how many, the index files that could not be opened: path -> error).  When an index
    file cannot be opened, the commitlog is scanned for the key instead (salvage walk), with a notice on
    ``err``: the answer stays complete."""
    unreadable = {}
    if args.msg_id:
        found = [m for m in [store.find_msg_id(args.msg_id)] if m is not None]
    else:
        found = store.query_key(args.topic, args.key, unreadable=unreadable)
        if unreadable:
            for e in unreadable.values():
                print(f"notice: index file {e.file} cannot be used ({e.kind.value}: {e.message}); scanning the "
                      "commitlog for the key instead", file=err or sys.stderr)
            found = scan_for_key(store, args.topic, args.key, found)
    for msg in found:
        _emit({"kind": "message", **msg.to_dict()}, out)
    return len(found), unreadable


def scan_for_key(store: Store, topic: str, key: str, found: list) -> list:
    """``found`` plus every message of ``topic`` whose UNIQ_KEY or KEYS hold ``key`` in a salvage walk of the
    commitlog (what an index lookup would have verified), in physical order."""
    seen = {m.physical_offset for m in found}
    out = list(found)
    for frame in store.walk_commitlog(decode=True, salvage=True, unreadable=[]):
        msg = getattr(frame, "message", None)
        if msg is None or frame.kind != "message" or msg.physical_offset in seen or msg.topic != topic:
            continue
        if key == msg.uniq_key or key in msg.keys:
            seen.add(msg.physical_offset)
            out.append(msg)
    return sorted(out, key=lambda m: m.physical_offset)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m store_format", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="command", required=True)

    def store_args(sp):
        sp.add_argument("store", metavar="STORE_DIR", help="broker store root (holds commitlog/, consumequeue/...)")
        add_geometry_arguments(sp, segment_size=True, recovery=True)
        sp.add_argument("--delay-levels", default=None, help="messageDelayLevel, e.g. '1s 5s 10s ...' (default: "
                        "--config's, else RocketMQ's)")

    d = sub.add_parser("dump", help="print a store's files as JSON Lines")
    store_args(d)
    d.add_argument("--what", required=True,
                   choices=["commitlog", "consumequeue", "index", "checkpoint", "config", *TIMER_PARTS])
    d.add_argument("--walk", type=canonical_walk, choices=WALKS, default="kept", help=walk_help("kept"))
    d.add_argument("--no-crc", action="store_true", help="do not verify body CRCs (the broker's dispatch does not)")
    d.add_argument("--strict", action="store_true", help="exit 1 when damage is found")
    d.add_argument("--debug", action="store_true", help="show a Python traceback when the tool itself fails")

    q = sub.add_parser("query", help="find messages by key / unique key (index, then verified) or offsetMsgId")
    store_args(q)
    q.add_argument("--topic", help="topic of the key (index keys are topic#key)")
    q.add_argument("--key", help="a KEYS entry or a UNIQ_KEY")
    q.add_argument("--msg-id", help="offsetMsgId (32 or 56 hex characters)")
    q.add_argument("--debug", action="store_true", help="show a Python traceback when the tool itself fails")

    from .write import writer_cli  # generate / write

    writer_cli.register(sub)
    return p


def main(argv=None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    where = getattr(args, "store", None) or getattr(args, "out_dir", None)
    interrupts.reset()
    interrupts.install()  # SIGINT/SIGTERM: one line, exit 130/143 (store_format/interrupts.py)
    if hasattr(args, "run"):  # generate / write
        out = getattr(args, "out_dir", None)
        kept = f"{out} may hold a partly written store" if out else "nothing was written"
        return guarded(lambda: args.run(args), args.debug, where, command=args.command, kept=kept)
    if args.command == "query" and not args.msg_id and not (args.topic and args.key):
        parser.error("query needs --msg-id ID, or --topic T with --key K")
    return guarded(lambda: _run(args), args.debug, where, command=args.command,
                   kept="the store was only read")


STDOUT = "<stdout>"  # the path an output error names


class _Output:
    """stdout for the records: an error writing it (a full disk, a closed pipe) names ``<stdout>``."""

    def __init__(self, stream):
        self.stream = stream

    def write(self, text: str) -> None:
        try:
            self.stream.write(text)
        except BrokenPipeError:
            raise
        except OSError as e:
            raise _named(e, STDOUT) from None

    def flush(self) -> None:
        try:
            self.stream.flush()
        except BrokenPipeError:
            raise
        except OSError as e:
            raise _named(e, STDOUT) from None


def _named(e: OSError, path: str) -> OSError:
    return OSError(e.errno, e.strerror or str(e), path) if e.filename is None else e


def guarded(body, debug: bool = False, where=None, *, command: str | None = None, kept: str | None = None) -> int:
    """Run a command's body with the exit-code contract: unreadable input, a refused input and any OSError are
    one line (``error: <path>: <reason>``) and exit 2; a failure of the tool itself is one line too (``error:
    <where>: internal error: ...``, ``out of memory: ...`` for a MemoryError; its traceback only with ``--debug``),
    also exit 2, never Python's 1 (which means "nothing matched" or "damage found").  The output is flushed
    before the body counts as done, so that an output error is this line too, not Python's exit status 120.
    The line is printed after the failed frames are let go: a parse that ran out of memory leaves the memory to
    print it with (and a last-resort write of a fixed line if even that fails).  SIGINT and SIGTERM
    (store_format/interrupts.py) end it with one line, ``store_format: interrupted by SIGINT during <command>;
    <kept>``, and exit 130 or 143."""
    failure = None
    try:
        code = body()
        _Output(sys.stdout).flush()
        interrupts.check()  # an interrupt swallowed on the way still ends the run
        return code
    except BrokenPipeError:  # the reader went away (``| head``): nothing more to say, and nothing at exit either
        if interrupts.pending() is None:
            _silence_stdout()
            return EXIT_OK
        failure = interrupts.Interrupted(interrupts.pending())
    except Exception as e:  # noqa: BLE001 - the contract: no traceback without --debug
        failure = e
    except (interrupts.Interrupted, KeyboardInterrupt) as e:
        failure = e
    signum = interrupts.interrupted_by(failure)
    if signum is not None:  # the interrupt, or what it broke on the way out
        interrupts.handling()
        return _interrupted(signum, command, kept)
    if debug:
        try:
            traceback.print_exception(failure)
        except Exception:  # noqa: BLE001 - the line below still says what failed
            pass
    _drop_frames(failure)
    return _report(failure, debug, where)


def _interrupted(signum: int, command: str | None, kept: str | None) -> int:
    line = (f"store_format: interrupted by {interrupts.signal_name(signum)}" + (f" during {command}" if command else "")
            + (f"; {kept}" if kept else ""))
    try:
        print(line, file=sys.stderr, flush=True)
    except Exception:  # noqa: BLE001 - stderr gone: the exit code still says it
        pass
    return interrupts.exit_code(signum)


def _drop_frames(e: BaseException) -> None:
    """Let the failed frames go (and what they held), for ``e`` and the errors chained to it."""
    seen = set()
    while e is not None and id(e) not in seen:
        seen.add(id(e))
        e.__traceback__ = None
        if e.__cause__ is not None:
            _drop_frames(e.__cause__)
        e = e.__context__


def _report(e: Exception, debug: bool, where) -> int:
    try:
        if isinstance(e, (StoreFormatError, OSError)):
            line = f"error: {error_line(e)}"
        else:
            what = "out of memory" if isinstance(e, MemoryError) else "internal error"
            line = (f"error: {where or 'store_format'}: {what}: {type(e).__name__}" + (f": {e}" if str(e) else "")
                    + ("" if debug else " (run with --debug for the traceback)"))
        print(line, file=sys.stderr, flush=True)
    except Exception:  # noqa: BLE001 - even the line could not be made or printed: a fixed one
        try:
            os.write(2, b"error: store_format: the command failed, and so did printing why\n")
        except OSError:
            pass
    return EXIT_USAGE


def _silence_stdout() -> None:
    """After a broken pipe, point stdout at /dev/null: the interpreter's flush at exit has nothing to fail on."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError, AttributeError):
        pass


def _run(args) -> int:
    geometry = geometry_from_args(args).merged(message_delay_level=args.delay_levels or None)
    store = Store(args.store, **geometry.store_kwargs())
    if args.command == "dump":
        summary, damaged, unreadable = dump(store, args.what, args, _Output(sys.stdout))
        print(summary + ("; damage found" if damaged else "")
              + (f"; {unreadable} file(s) could not be read" if unreadable else ""), file=sys.stderr)
        if unreadable:
            return EXIT_UNREADABLE
        return EXIT_FINDINGS if damaged and args.strict else EXIT_OK
    lost = [e for e in store.unreadable("commitlog")]
    n, unreadable = query(store, args, _Output(sys.stdout))
    for e in lost:
        print(f"error: {e.line()}", file=sys.stderr)
    print(f"{n} message(s) matched" + (f"; {len(unreadable)} index file(s) could not be used: the commitlog was "
                                       "scanned" if unreadable else "")
          + (f"; {len(lost)} commitlog file(s) could not be read, so the answer is incomplete" if lost else ""),
          file=sys.stderr)
    if lost:
        return EXIT_UNREADABLE
    return EXIT_OK if n else EXIT_FINDINGS


if __name__ == "__main__":
    sys.exit(main())
