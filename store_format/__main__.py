"""Command line for the pure-Python store tools.

  python -m store_format dump STORE_DIR --what commitlog|consumequeue|index|checkpoint|config
  python -m store_format query STORE_DIR (--topic T --key K | --msg-id ID)

Records go to stdout as JSON Lines (every one with its file and byte position); the one-line summary and
errors go to stderr.  Exit codes: 0 ok, 1 nothing matched (query) or damage found (dump --strict),
2 bad usage or an unreadable store.  An index file that cannot be opened (too short, or a geometry neither
the file nor --config/--hash-slots/--index-num tells) is unreadable input: ``dump --what index`` prints an
``error`` row for it and ``query --key`` names it on stderr, both print what the other files give, and both
exit 2 (their answer is incomplete).
"""
from __future__ import annotations

import argparse
import base64
import json
import sys
from collections import deque

from . import layout as L
from .brokerconf import add_geometry_arguments, geometry_from_args
from .commitlog import END_OF_DATA, Frame, SalvageSpan
from .errors import IndexFileError, StoreFormatError
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
    damaged = False
    if what == "commitlog":
        counts = {}
        frames = store.walk_commitlog(check_crc=not args.no_crc, salvage=args.walk == "salvage")
        for d in mark_early_rolls(map(frame_to_dict, frames)):
            counts[d["kind"]] = counts.get(d["kind"], 0) + 1
            damaged |= d["kind"] == "corrupt" or bool(d.get("damage"))
            _emit(d, out)
        return (f"{len(store.segments)} segment(s): " + ", ".join(f"{v} {k}" for k, v in sorted(counts.items())),
                damaged, 0)
    if what == "consumequeue":
        n = 0
        for (topic, qid), files in sorted(store.queues.items()):
            try:
                for u in store.consume_queue(topic, qid):
                    n += 1
                    damaged |= u.kind == "invalid"
                    _emit({"topic": topic, "queue_id": qid, "queue_offset": u.queue_offset,
                           "physical_offset": u.physical_offset, "size": u.size, "tags_code": u.tags_code,
                           "kind": u.kind, "file": u.file, "file_position": u.file_position}, out)
            except StoreFormatError as e:
                damaged = True
                _emit({"topic": topic, "queue_id": qid, **_error_row(e)}, out)
        return f"{len(store.queues)} queue(s), {n} unit(s)", damaged, 0
    if what == "index":
        n = unreadable = 0
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
        names = store.config_names()
        for name in names:
            cfg = store.config(name)
            damaged |= cfg.data is None or bool(cfg.errors)
            _emit({"name": name, "source": cfg.source, "data": _stringify_keys(cfg.data),
                   "errors": [e.as_dict() for e in cfg.errors]}, out)
        return f"{len(names)} config file(s)", damaged, 0
    raise ValueError(what)


def _error_row(e: StoreFormatError) -> dict:
    """A file or unit that could not be read, as a row: ``kind`` "error", the error's own kind as ``error_kind``."""
    return {**e.as_dict(), "kind": "error", "error_kind": e.kind.value}


def _stringify_keys(v):
    if isinstance(v, dict):
        return {str(k): _stringify_keys(x) for k, x in v.items()}
    if isinstance(v, list):
        return [_stringify_keys(x) for x in v]
    return v


def query(store: Store, args, out) -> tuple[int, dict]:
    """Print the matches; (how many, the index files that could not be opened: path -> error)."""
    unreadable = {}
    if args.msg_id:
        found = [m for m in [store.find_msg_id(args.msg_id)] if m is not None]
    else:
        found = store.query_key(args.topic, args.key, unreadable=unreadable)
    for msg in found:
        _emit({"kind": "message", **msg.to_dict()}, out)
    return len(found), unreadable


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m store_format", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="command", required=True)

    def store_args(sp):
        sp.add_argument("store", metavar="STORE_DIR", help="broker store root (holds commitlog/, consumequeue/...)")
        add_geometry_arguments(sp, segment_size=True)
        sp.add_argument("--delay-levels", default=None, help="messageDelayLevel, e.g. '1s 5s 10s ...' (default: "
                        "--config's, else RocketMQ's)")

    d = sub.add_parser("dump", help="print a store's files as JSON Lines")
    store_args(d)
    d.add_argument("--what", required=True, choices=["commitlog", "consumequeue", "index", "checkpoint", "config"])
    d.add_argument("--walk", choices=["recovery", "salvage"], default="recovery",
                   help="recovery: stop where the broker's recovery stops; salvage: resync past damage")
    d.add_argument("--no-crc", action="store_true", help="do not verify body CRCs (the broker's dispatch does not)")
    d.add_argument("--strict", action="store_true", help="exit 1 when damage is found")

    q = sub.add_parser("query", help="find messages by key / unique key (index, then verified) or offsetMsgId")
    store_args(q)
    q.add_argument("--topic", help="topic of the key (index keys are topic#key)")
    q.add_argument("--key", help="a KEYS entry or a UNIQ_KEY")
    q.add_argument("--msg-id", help="offsetMsgId (32 or 56 hex characters)")

    from . import writer_cli  # generate / write

    writer_cli.register(sub)
    return p


def main(argv=None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if hasattr(args, "run"):
        return args.run(args)
    if args.command == "query" and not args.msg_id and not (args.topic and args.key):
        parser.error("query needs --msg-id ID, or --topic T with --key K")
    try:
        geometry = geometry_from_args(args).merged(message_delay_level=args.delay_levels or None)
        store = Store(args.store, **geometry.store_kwargs())
        if args.command == "dump":
            summary, damaged, unreadable = dump(store, args.what, args, sys.stdout)
            print(summary + ("; damage found" if damaged else "")
                  + (f"; {unreadable} file(s) could not be read" if unreadable else ""), file=sys.stderr)
            if unreadable:
                return EXIT_UNREADABLE
            return EXIT_FINDINGS if damaged and args.strict else EXIT_OK
        n, unreadable = query(store, args, sys.stdout)
        for e in unreadable.values():
            print(f"error: not searched: {e}", file=sys.stderr)
        print(f"{n} message(s) matched" + (f"; {len(unreadable)} index file(s) could not be read, so the answer "
                                           "is incomplete" if unreadable else ""), file=sys.stderr)
        if unreadable:
            return EXIT_UNREADABLE
        return EXIT_OK if n else EXIT_FINDINGS
    except StoreFormatError as e:
        print(f"error: {e}", file=sys.stderr)
        return EXIT_USAGE
    except BrokenPipeError:
        return EXIT_OK


if __name__ == "__main__":
    sys.exit(main())
