"""A store's small files as Arrow tables, one builder for all of them (the ``rocketmq-metadata`` source's rows, and
what the audit reads of them on the driver).

A table name chooses: ``checkpoint`` (StoreCheckpoint fields and the derived minimum
timestamps), ``markers`` (abort / lock presence), ``unreadable_files`` (every entry of the store no reader can
read, with why: a FIFO, socket or device where a file belongs, a link loop, no permission, a part that is a
file; the other sources leave those out, never opening them), ``consumer_offsets``, ``lmq_consumer_offsets``
(5.x ``lmqConsumerOffset.json``), ``delay_offsets``, ``topics``,
``subscription_groups`` (config/*.json through store_format's fastjson-tolerant reader, with its ``.bak``
fallback; ``source`` says which file was used).  One row set per broker; a file that cannot be read, or is too
large to parse within memory (``TOO_LARGE``, past ``store_format.config.CONFIG_MEMORY_LIMIT``: consumerOffset.json
in the broker's layout is still read, as columns), gives one row with ``error`` set instead of failing the query, and so does each value the broker cannot hold (a
consumer offset outside Java's long, a queue id or a delay level outside int or not a number): ``error`` (an
OUT_OF_RANGE error naming the file), ``error_key`` (its path in the file), ``error_value``; the other rows
are complete.
"""
from __future__ import annotations

import json
import os

import pyarrow as pa

from store_format import config as C
from store_format import layout as L
from store_format.checkpoint import read_checkpoint, read_markers
from store_format.errors import ErrorKind, StoreFormatError
from store_format.fs import StorePath, as_path, unreadable_entries

from .columns import column
from .kernels import scan_offset_table

_S, _I, _L, _B = pa.string(), pa.int32(), pa.int64(), pa.bool_()
_CONFIG_JSON = "the whole entry as JSON (keys sorted): every field, the ones above and any other"
TABLES = {
    "checkpoint": [
        column("physic_msg_timestamp", _L, "physicMsgTimestamp: store time (ms) of the last message flushed to "
               "the commitlog"),
        column("logics_msg_timestamp", _L, "logicsMsgTimestamp: store time (ms) of the last message dispatched to "
               "a consume queue"),
        column("index_msg_timestamp", _L, "indexMsgTimestamp: endTimestamp of the last full index file (0: none "
               "filled up)"),
        column("master_flushed_offset", _L, "masterFlushedOffset (5.0.0 and later; null when the bytes are absent "
               "or zero)"),
        column("confirm_phy_offset", _L, "confirmPhyOffset (5.1.1 and later; null when absent or zero)"),
        column("min_timestamp", _L, "getMinTimestamp(): min(physic, logics) - 3 s, floored at 0: abnormal "
               "recovery starts from the first segment whose first message is older"),
        column("min_timestamp_index", _L, "getMinTimestampIndex(): min(getMinTimestamp(), indexMsgTimestamp)"),
        column("file_length", _L, "the checkpoint file's size (4096 as the broker maps it)")],
    "markers": [
        column("abort", _B, "an `abort` file exists: the broker did not shut down cleanly, its next start runs the "
               "abnormal recovery"),
        column("abort_pid", _L, "the PID a 5.x broker writes into `abort` (null: empty, as 4.x leaves it)"),
        column("lock", _B, "a `lock` file exists (the broker writes it at start and leaves it; only the OS lock on it "
               "matters)")],
    "consumer_offsets": [
        column("topic", _S, "topic of the `topic@group` key in consumerOffset.json's offsetTable"),
        column("group", _S, "consumer group of that key"), column("queue_id", _I),
        column("offset", _L, "the group's committed offset: the next queue offset it will consume")],
    "lmq_consumer_offsets": [
        column("topic", _S, "topic of the `topic@group` key in lmqConsumerOffset.json (5.x, enableLmq)"),
        column("group", _S, "consumer group of that key"),
        column("queue_id", _I, "the queue id (always 0 for an %LMQ% group's offset: one per topic@group)"),
        column("offset", _L, "the group's committed offset: the next queue offset it will consume"),
        column("table", _S, "`lmqOffsetTable` (groups named %LMQ%...) or `offsetTable` (every other group: with "
               "enableLmq the broker keeps them here instead of consumerOffset.json)")],
    "delay_offsets": [
        column("delay_level", _I, "delay level (1-based: SCHEDULE_TOPIC_XXXX's queue id + 1)"),
        column("offset", _L, "delivered so far: the next queue offset of the level's queue to deliver")],
    "topics": [
        column("topic", _S, "topic name (topics.json's topicConfigTable key)"),
        column("read_queue_nums", _I, "readQueueNums"), column("write_queue_nums", _I, "writeQueueNums"),
        column("perm", _I, "perm: PermName bits, 4 readable + 2 writable (6: both), 1 inherit, 8 priority"),
        column("topic_filter_type", _S, "topicFilterType: SINGLE_TAG or MULTI_TAG"),
        column("topic_sys_flag", _I, "topicSysFlag"), column("order", _B, "order: an ordered topic"),
        column("config_json", _S, _CONFIG_JSON)],
    "unreadable_files": [
        column("file", _S, "the entry's path relative to the store root"),
        column("reason", _S, "why no reader can open it (not a regular file or folder, a link, no permission, ...)")],
    "subscription_groups": [
        column("group", _S, "consumer group (subscriptionGroup.json's subscriptionGroupTable key)"),
        column("consume_enable", _B, "consumeEnable"), column("consume_broadcast_enable", _B, "consumeBroadcastEnable"),
        column("retry_queue_nums", _I, "retryQueueNums"),
        column("retry_max_times", _I, "retryMaxTimes: send-backs before a message goes to %DLQ%group"),
        column("broker_id", _L, "brokerId the group consumes from"),
        column("which_broker_when_consume_slowly", _L, "whichBrokerWhenConsumeSlowly"),
        column("config_json", _S, _CONFIG_JSON)],
}
_READ_STATUS = [  # every table's last columns: where a row was read, and what could not be
    column("source", _S, "the file (or store root) the row was read from"),
    column("error", _S, "a file that cannot be read: one row with this error; a value the broker cannot hold "
           "(out of its Java type's range, not a number): one row naming it, left out of the other rows"),
    column("error_key", _S, "for a value error: the value's path in the file"),
    column("error_value", _S, "for a value error: the value as written")]
CONFIG_FILE = {"consumer_offsets": "consumerOffset.json", "lmq_consumer_offsets": C.LMQ_CONSUMER_OFFSET_FILE,
               "delay_offsets": "delayOffset.json", "topics": "topics.json",
               "subscription_groups": "subscriptionGroup.json"}


def schema_of(table: str) -> pa.Schema:
    if table not in TABLES:
        raise ValueError(f"table={table!r}: choose one of {', '.join(TABLES)}")
    return pa.schema([column("broker", _S), *TABLES[table], *_READ_STATUS])


def is_value_error(error: str | None) -> bool:
    """An ``error`` that is about one value of a readable file (a value the broker cannot hold: ``error_key`` and
    ``error_value`` say which), not about the file as a whole."""
    return error is not None and error.startswith(ErrorKind.OUT_OF_RANGE.value + " ")


def is_too_large(error: str | None) -> bool:
    """An ``error`` saying the file is too large to parse within memory (store_format.config.CONFIG_MEMORY_LIMIT)."""
    return error is not None and any(part.startswith(ErrorKind.TOO_LARGE.value + " ") for part in error.split("; "))


def table_rows(table: str, broker: str, root: str) -> list[dict]:
    """Rows of ``table`` for one local store root (:func:`table_batch` as dicts)."""
    return table_batch(table, broker, root).to_pylist()


def table_batch(table: str, broker: str, root) -> pa.Table:
    """``table`` for one store root (a local path, a URI, or a ``store_format.fs`` path), built column-wise (a
    busy broker's consumerOffset.json holds
    millions of offsets).  A file that cannot be read is one row with ``error``; a value the broker cannot hold
    (out of its Java type's range, or not a number) is one row with ``error`` (an OUT_OF_RANGE error naming
    the file), ``error_key`` (its path in the file) and ``error_value``, and is left out of the other rows."""
    schema = schema_of(table)
    where = as_path(root)
    if isinstance(where, StorePath):  # on another file system: read through it, named by its paths there
        root = str(where)
    join = where.joinpath

    def rows(*dicts) -> pa.Table:
        return pa.Table.from_pylist([{"broker": broker, **d} for d in dicts], schema=schema)

    try:
        if table == "checkpoint":
            path = join("checkpoint")
            cp = read_checkpoint(path)
            return rows(dict(**{k: v for k, v in vars(cp).items()}, min_timestamp=cp.min_timestamp,
                             min_timestamp_index=cp.min_timestamp_index, source=str(path)))
        if table == "markers":
            m = read_markers(where)
            return rows(dict(abort=m.abort, abort_pid=m.abort_pid, lock=m.lock, source=root))
        if table == "unreadable_files":
            return rows(*[dict(file=os.path.relpath(e.file, root), reason=e.reason, source=root)
                          for e in unreadable_entries(where)])
    except StoreFormatError as e:
        return rows(dict(error=str(e)))
    try:
        return _config_table(table, schema, broker, join, rows)
    except MemoryError:  # building the table: the file's error row, naming it and its size (the rest goes on)
        path = join("config") / CONFIG_FILE[table]
        e = C.out_of_memory(str(path), C.file_size(path), "building its table")
        return rows(dict(error=str(e), source=e.file))


def _config_table(table: str, schema, broker: str, join, rows) -> pa.Table:
    """:func:`table_batch` of a config file's table."""
    if table == "consumer_offsets":  # a busy broker's offsets: column-wise from the fast path when it reads them
        streamed = _streamed_offset_table(broker, join("config"), rows)
        if streamed is not None:
            return streamed
        problems: list = []
        try:  # past store_format.config.CONFIG_MEMORY_LIMIT only this way (or the file's TOO_LARGE error below)
            fast = C.offset_columns(join("config"), problems, offset_scan=scan_offset_table)
        except StoreFormatError as e:  # ran out of memory building the columns: the file's error row
            return rows(dict(error=str(e), source=e.file))
        if fast is not None:
            return _offset_table(schema, broker, *fast, problems, rows)
    cfg = C.read_config(join("config"), CONFIG_FILE[table])
    if cfg.data is None:
        errors = "; ".join(str(e) for e in cfg.errors)
        return rows(dict(error=errors)) if errors else rows()
    problems: list = []
    try:
        columns = _config_columns(table, cfg, problems)
    except StoreFormatError as e:  # parsed, but not the shape RocketMQ writes (e.g. a table that is not an object)
        return rows(dict(error=str(e), source=cfg.source))
    n = len(next(iter(columns.values()))) if columns else 0
    arrays = []
    for f in schema:
        if f.name == "broker":
            arrays.append(pa.array([broker] * n, f.type))
        elif f.name == "source":
            arrays.append(pa.array([cfg.source] * n, f.type))
        else:
            arrays.append(pa.array(columns[f.name], f.type) if f.name in columns else pa.nulls(n, f.type))
    good = pa.Table.from_arrays(arrays, schema=schema)
    if not problems:
        return good
    bad = rows(*[dict(source=cfg.source, error=str(e), error_key=e.field,
                      error_value=getattr(e, "value_text", None)) for e in problems])
    return pa.concat_tables([good, bad])


def _streamed_offset_table(broker: str, config_dir, rows) -> pa.Table | None:
    """The consumer_offsets table from :func:`offset_table_batches` (the file mapped, not read into memory, and no
    array per offset but the table's own), where the file streams and holds at most
    ``store_format.config.offsets_limit()`` offsets; None otherwise (:func:`store_format.config.offset_columns`
    then reads it, or says why not).  A ``MemoryError`` on the way is the file's error row, naming it and its
    size."""
    stream = None
    try:
        stream = C.offset_batches(config_dir, scan_offset_stream, C.OFFSET_BATCH_ROWS)
        if stream is None:
            return None
        if stream.entries > C.offsets_limit():
            stream.batches.close()  # the file unmapped: offset_columns gives its TOO_LARGE error
            return None
        parts = {"topic": [], "group": [], "queue_id": [], "offset": []}
        for cols in stream.batches:  # the names taken per row; the constant columns made once, for all rows
            index = pa.array(cols["map"])
            parts["topic"].append(cols["topics"].take(index))
            parts["group"].append(cols["groups"].take(index))
            parts["queue_id"].append(pa.array(cols["queue_id"], _I))
            parts["offset"].append(pa.array(cols["offset"], _L))
        schema = schema_of("consumer_offsets")
        n = stream.entries
        arrays = {"broker": constant_column(broker, n, _S), "source": constant_column(stream.source, n, _S),
                  **{k: pa.chunked_array(v, schema.field(k).type) for k, v in parts.items()}}
        return pa.Table.from_arrays([arrays[f.name] if f.name in arrays else constant_column(None, n, f.type)
                                     for f in schema], schema=schema)
    except MemoryError:
        if stream is not None:
            stream.batches.close()
        path = stream.source if stream is not None else str(config_dir / "consumerOffset.json")
        e = C.out_of_memory(path, C.file_size(path), "streaming its offsets")
        return rows(dict(error=str(e), source=e.file))


def _offset_table(schema, broker, cfg, cols, problems, rows) -> pa.Table:
    """The consumer_offsets table from :func:`store_format.config.offset_columns`' columns: the names taken per row,
    the constant columns shared (:func:`constant_column`)."""
    n = len(cols["map"])
    index = pa.array(cols["map"])  # numpy's int64: no copy
    arrays = {"broker": constant_column(broker, n, _S), "topic": cols["topics"].take(index),
              "group": cols["groups"].take(index), "queue_id": pa.array(cols["queue_id"], _I),
              "offset": pa.array(cols["offset"], _L), "source": constant_column(cfg.source, n, _S)}
    good = pa.Table.from_arrays([arrays[f.name] if f.name in arrays else constant_column(None, n, f.type)
                                 for f in schema], schema=schema)
    if not problems:
        return good
    return pa.concat_tables([good, rows(*[dict(source=cfg.source, error=str(e), error_key=e.field,
                                               error_value=getattr(e, "value_text", None)) for e in problems])])


def scan_offset_stream(buf, batch_rows: int):
    """consumerOffset.json in fastjson's layout as a stream (``store_format.config.offset_batches``' scanner): one
    compiled pass keeps each map's name span, body and count (``decoding.compiled.offset_table_maps``: ~40 bytes a map,
    nothing per offset), the maps are ordered by (topic, group) as ``offset_columns`` orders them
    (``offset_name_order``), then the rows are read from the map a batch of maps at a time (``offset_map_rows``).
    (maps, entries, other members' spans, a generator of batches), or None where the file is not what brokers
    write (``scan_offset_table`` has no rows for it either): a name escaped, not topic@group or given twice, queue
    ids not ascending within int, a name not valid UTF-8, another grammar."""
    import numpy as np

    from store_format.config import TOPIC_GROUP_SEPARATOR, _valid_utf8

    from .kernels import _check_offset_table, _compiled, _spans

    K = _compiled()
    b = np.frombuffer(buf, np.uint8) if len(buf) else np.zeros(0, np.uint8)
    if b.flags.writeable:  # the compiled signature takes read-only bytes
        b = b.view()
        b.flags.writeable = False
    counted = _check_offset_table(K, buf, 100, C.OffsetCheck, counts_only=True)
    if counted is None:
        return None
    maps, entries, others = counted
    name_lo, name_hi, body, count = (np.empty(maps, np.int64) for _ in range(4))
    name_esc = np.empty(maps, np.bool_)
    other_lo, other_hi, flags = np.empty(others, np.int64), np.empty(others, np.int64), np.zeros(1, np.int64)
    n_maps, n_entries, n_other = K.offset_table_maps(b, name_lo, name_hi, name_esc, body, count, other_lo, other_hi,
                                                     flags, 100)
    if n_maps < 0 or not flags[0] or name_esc[:n_maps].any():
        return None
    name_lo, name_hi = name_lo[:n_maps], name_hi[:n_maps]
    # kept until the last batch, so as small as they go before the sort's arrays join them: where each map's body
    # starts past its name's end (fastjson: 2 bytes, `":{`) and its entry count, 5 bytes a map instead of 16
    gap, count = body[:n_maps] - name_hi, count[:n_maps]
    gap = gap.astype(np.uint8) if not n_maps or gap.max() <= 255 else gap
    count = count.astype(np.int32) if not n_maps or count.max() < 2**31 else count
    del name_esc, body
    at, order = np.empty(n_maps, np.int64), np.empty(n_maps, np.int64)
    if K.offset_name_order(b, name_lo, name_hi, ord(TOPIC_GROUP_SEPARATOR), at, order) != 0:
        return None
    ascii_only = _all_ascii(b)
    if not ascii_only:  # the order is Python's only for valid UTF-8: every name checked before a row is given
        for lo in range(0, n_maps, batch_rows):
            k = order[lo:lo + batch_rows]
            if not (_valid_utf8(_spans(b, name_lo[k], at[k])) and _valid_utf8(_spans(b, at[k] + 1, name_hi[k]))):
                return None

    def batches():
        lo = 0
        while lo < n_maps:  # whole maps, as many as batch_rows rows hold (at least one)
            width = batch_rows  # maps looked at: their rows counted here, not a running count kept for every map
            while True:
                ends = np.cumsum(count[order[lo:lo + width]])
                hi = lo + int(np.searchsorted(ends, batch_rows, "right"))
                if hi < lo + len(ends) or lo + width >= n_maps:
                    break
                width *= 2  # empty maps: more of them fit
            hi = max(hi, lo + 1)
            k = np.ascontiguousarray(order[lo:hi])
            lo = hi
            mine = count[k].astype(np.int64)
            rows = int(mine.sum())
            row_map, qid, offset = np.empty(rows, np.int32), np.empty(rows, np.int32), np.empty(rows, np.int64)
            K.offset_map_rows(b, np.arange(len(k), dtype=np.int64), name_hi[k] + gap[k], mine, row_map, qid, offset)
            yield {"map": row_map, "topics": _spans(b, name_lo[k], at[k]), "groups": _spans(b, at[k] + 1, name_hi[k]),
                   "queue_id": qid, "offset": offset}

    return n_maps, n_entries, list(zip(other_lo[:n_other].tolist(), other_hi[:n_other].tolist())), batches()


def _all_ascii(b) -> bool:
    """No byte of ``b`` at or above 0x80, asked a slice at a time (no copy of a mapped file)."""
    step = 1 << 26
    return all(not (b[i:i + step] >= 0x80).any() for i in range(0, len(b), step))


def offset_table_batches(broker: str, root, batch_rows: int = C.OFFSET_BATCH_ROWS):
    """The ``consumer_offsets`` table of one store as record batches of at most ``batch_rows`` rows (a map of more
    queues: one batch), streamed from its consumerOffset.json (``store_format.config.offset_batches``): the same
    rows, in the same order, as :func:`table_batch` where the file is what brokers write, in memory proportional to
    its maps and one batch.  (the file used, its size, its offsets, the batches' generator), or None: the file is
    not read this way (then :func:`table_batch` reads it, or says why not)."""
    return _config_offset_batches(broker, as_path(root).joinpath("config"), batch_rows)


def _config_offset_batches(broker: str, config_dir, batch_rows: int):
    """:func:`offset_table_batches` of a store's config folder."""
    schema = schema_of("consumer_offsets")
    stream = C.offset_batches(config_dir, scan_offset_stream, batch_rows)
    if stream is None:
        return None

    cfg = C.ConfigFile("consumerOffset.json", None, stream.source, ())

    def batches():
        for cols in stream.batches:
            t = _offset_table(schema, broker, cfg, cols, [], None)
            yield from t.to_batches(max_chunksize=max(t.num_rows, 1))

    return stream.source, stream.size, stream.entries, C.ClosingIterator(batches(), stream.batches.close)


def spill_offset_table(broker: str, root, directory, batch_rows: int = C.OFFSET_BATCH_ROWS):
    """:func:`offset_table_batches` written to one Parquet file in ``directory`` (the run's scratch: never next to
    the input), a batch at a time: (its path, the file read, its size, the rows written), or None where the file is
    not streamed.  A disk without room for the spill is an ``OSError`` the caller names with the file."""
    import pyarrow.parquet as pq

    got = offset_table_batches(broker, root, batch_rows)
    if got is None:
        return None
    source, size, _, batches = got
    out = os.path.join(os.fspath(directory), f"consumer_offsets-{broker}.parquet")
    rows = 0
    with pq.ParquetWriter(out, schema_of("consumer_offsets")) as w:
        for batch in batches:
            w.write_batch(batch)
            rows += batch.num_rows
    return out, source, size, rows


_BLOCK = 1 << 16  # MetadataReader's batch size


def constant_column(value, n: int, type_) -> pa.ChunkedArray:
    """``value`` on ``n`` rows as one block of rows shared by every chunk: a column that repeats the file's path on
    millions of rows takes the memory of one block."""
    block = pa.repeat(pa.scalar(value, type_), min(n, _BLOCK))
    full, rest = divmod(n, _BLOCK)
    return pa.chunked_array([block] * full + ([block.slice(0, rest)] if rest or not n else []), type_)


def _config_columns(table: str, cfg, problems: list) -> dict[str, list]:
    src_order = lambda items: sorted(items, key=_by_name)  # noqa: E731
    if table == "consumer_offsets":
        topic, group, qid, offset = [], [], [], []
        for (t, g), queues in sorted(C.consumer_offsets(cfg, problems).items()):
            qs = sorted(queues)
            topic += [t] * len(qs)
            group += [g] * len(qs)
            qid += qs
            offset += [queues[q] for q in qs]
        return {"topic": topic, "group": group, "queue_id": qid, "offset": offset}
    if table == "lmq_consumer_offsets":
        out = {"topic": [], "group": [], "queue_id": [], "offset": [], "table": []}
        for (t, g), offset in sorted(C.lmq_consumer_offsets(cfg, problems).items()):
            for k, v in (("topic", t), ("group", g), ("queue_id", L.LMQ_QUEUE_ID), ("offset", offset),
                         ("table", "lmqOffsetTable")):
                out[k].append(v)
        for (t, g), queues in sorted(C.consumer_offsets(cfg, problems).items()):
            for q in sorted(queues):
                for k, v in (("topic", t), ("group", g), ("queue_id", q), ("offset", queues[q]), ("table", "offsetTable")):
                    out[k].append(v)
        return out
    if table == "delay_offsets":
        levels = sorted(C.delay_offsets(cfg, problems).items())
        return {"delay_level": [k for k, _ in levels], "offset": [v for _, v in levels]}
    if table == "topics":
        out = {k: [] for k in ("topic", "read_queue_nums", "write_queue_nums", "perm", "topic_filter_type",
                               "topic_sys_flag", "order", "config_json")}
        for name, c in src_order(C.topic_configs(cfg).items()):
            if not isinstance(c, dict):
                continue
            path = ("topicConfigTable", name)
            out["topic"].append(str(name))
            for col, key in (("read_queue_nums", "readQueueNums"), ("write_queue_nums", "writeQueueNums"),
                             ("perm", "perm"), ("topic_sys_flag", "topicSysFlag")):
                out[col].append(C.number(c, key, C.INT_RANGE, problems, cfg, path + (key,)))
            out["topic_filter_type"].append(_text(c.get("topicFilterType")))
            out["order"].append(_bool(c.get("order")))
            out["config_json"].append(_json(c))
        return out
    out = {k: [] for k in ("group", "consume_enable", "consume_broadcast_enable", "retry_queue_nums",
                           "retry_max_times", "broker_id", "which_broker_when_consume_slowly", "config_json")}
    for name, c in src_order(C.subscription_groups(cfg).items()):
        if not isinstance(c, dict):
            continue
        path = ("subscriptionGroupTable", name)
        out["group"].append(str(name))
        out["consume_enable"].append(_bool(c.get("consumeEnable")))
        out["consume_broadcast_enable"].append(_bool(c.get("consumeBroadcastEnable")))
        for col, key in (("retry_queue_nums", "retryQueueNums"), ("retry_max_times", "retryMaxTimes"),
                         ("broker_id", "brokerId"), ("which_broker_when_consume_slowly", "whichBrokerWhenConsumeSlowly")):
            out[col].append(C.number(c, key, C.GROUP_FIELDS[key], problems, cfg, path + (key,)))
        out["config_json"].append(_json(c))
    return out


def _by_name(item) -> str:
    return str(item[0])  # fastjson maps may mix bare numeric and quoted keys


def _json(obj) -> str:
    return json.dumps({str(k): v for k, v in obj.items()}, sort_keys=True, ensure_ascii=False, default=str)


def _text(v):
    return v if isinstance(v, str) else None if v is None else json.dumps(v, default=str)


def _bool(v):
    return v if isinstance(v, bool) else None
