"""Transactions: every half message resolved as committed, rolled back or still open.

Broker-style (4.x/5.x): half messages are stored in ``RMQ_SYS_TRANS_HALF_TOPIC``; an op message in
``RMQ_SYS_TRANS_OP_HALF_TOPIC`` with tag ``d`` marks half queue offsets done (body: one decimal offset in 4.x,
a comma list such as ``12,13,`` in 5.x); a commit writes the record into the real topic as COMMIT with
``preparedTransactionOffset`` = the half's physical offset.  A half that the checker re-put is the same
transaction (same UNIQ_KEY).  Raw-sysflag style: a PREPARED record in a topic is resolved by a COMMIT or
ROLLBACK record whose ``preparedTransactionOffset`` is its physical offset.

Checks: ``transactions.open`` (warning: no op message and no commit, with age, check times and producer
group), ``transactions.commit_without_op`` (warning: committed, but the half was never marked done: the
checker will ask the producer again), ``transactions.open_prepared_record`` (warning).  Detail table:
``transactions``.

The scan hands the driver the few records this needs (halves, op messages, commit/rollback records, PREPARED
records, kept ones only); the driver pairs them up.
"""
from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from store_format import layout as L

from ..findings import Severity, check, concat_findings, finding_table, metric_table
from . import FamilyResult

check("transactions.open", Severity.WARNING,
      "open transaction for {topic|?} from producer group {producer_group|?}, {age_seconds} s old at the dump time, "
      "checked {check_times} time(s)")
check("transactions.commit_without_op", Severity.WARNING,
      "transaction committed into {topic|?} but its half message was never marked done: the broker will check it "
      "again")
check("transactions.open_prepared_record", Severity.WARNING, "PREPARED record in {topic} has no COMMIT or ROLLBACK record")

RECORDS = pa.schema([
    ("broker", pa.string()), ("role", pa.string()), ("physical_offset", pa.int64()), ("queue_offset", pa.int64()),
    ("topic", pa.string()), ("queue_id", pa.int32()), ("uniq_key", pa.string()), ("store_timestamp", pa.int64()),
    ("real_topic", pa.string()), ("real_queue_id", pa.int32()), ("producer_group", pa.string()),
    ("check_times", pa.string()), ("segment", pa.string()), ("file_position", pa.int64()),
    ("tran_type", pa.string()), ("prepared_transaction_offset", pa.int64()), ("op_body", pa.binary()),
])
TRANSACTIONS = pa.schema([
    ("broker", pa.string()), ("style", pa.string()), ("uniq_key", pa.string()), ("topic", pa.string()),
    ("queue_id", pa.int32()), ("producer_group", pa.string()), ("physical_offset", pa.int64()),
    ("half_queue_offset", pa.int64()), ("segment", pa.string()), ("file_position", pa.int64()),
    ("first_store_time", pa.int64()), ("copies", pa.int64()), ("check_times", pa.int32()),
    ("resolved_time", pa.int64()), ("commit_physical_offset", pa.int64()), ("state", pa.string()),
    ("age_ms", pa.int64()),
])


def in_range(rc, out) -> None:
    m = rc.messages
    if not m.num_rows:
        return
    kept = rc.column("kept")
    topic, tran = m.column("topic"), m.column("tran_type")
    half = pc.equal(topic, L.TRANS_HALF_TOPIC).to_numpy(zero_copy_only=False)
    op = (pc.equal(topic, L.TRANS_OP_HALF_TOPIC).to_numpy(zero_copy_only=False)
          & pc.fill_null(pc.equal(m.column("tags"), L.TRANS_OP_REMOVE_TAG), False).to_numpy(zero_copy_only=False))
    end = (pc.is_in(tran, pa.array(["COMMIT", "ROLLBACK"])).to_numpy(zero_copy_only=False)
           & (rc.column("prepared_transaction_offset") > 0))
    prepared = pc.equal(tran, "PREPARED").to_numpy(zero_copy_only=False) & ~half
    role = np.select([half, op, end, prepared], [1, 2, 3, 4], 0) * kept
    rows = np.flatnonzero(role)
    if not len(rows):
        return
    t = m.take(rows)
    extra = rc.decode(rows, ("properties", "body"))
    props = extra.column("properties")
    body = pc.if_else(pa.array(role[rows] == 2), extra.column("body"), pa.nulls(len(rows), pa.binary()))
    out.partial("transactions.records", pa.table({
        "broker": pa.repeat(pa.scalar(rc.broker), len(rows)),
        "role": pa.array(np.array(["", "half", "op", "end", "prepared"])[role[rows]]),
        **{c: t.column(c) for c in ("physical_offset", "queue_offset", "topic", "queue_id", "uniq_key",
                                    "store_timestamp", "real_topic", "real_queue_id")},
        "producer_group": pc.map_lookup(props, L.PROPERTY_PRODUCER_GROUP, "first"),
        "check_times": pc.map_lookup(props, L.PROPERTY_TRANSACTION_CHECK_TIMES, "first"),
        "segment": t.column("segment"), "file_position": t.column("file_position"), "tran_type": t.column("tran_type"),
        "prepared_transaction_offset": t.column("prepared_transaction_offset"), "op_body": body}, schema=RECORDS))


def _long(text) -> int | None:
    """Spark's cast of a string to a long (surrounding white space allowed), None when it is not one."""
    try:
        v = int(text.strip())
    except (ValueError, AttributeError):
        return None
    return v if -2**63 <= v < 2**63 else None


def _int(text) -> int | None:
    v = _long(text)
    return v if v is not None and -2**31 <= v < 2**31 else None


def transaction_table(ctx) -> pa.Table:
    recs = ctx.partial("transactions.records", RECORDS).to_pylist()
    by_role: dict[str, list] = {}
    for r in recs:
        by_role.setdefault(r["role"], []).append(r)
    ops: dict[tuple, int] = {}
    for r in by_role.get("op", []):
        text = (r["op_body"] or b"").decode("utf-8", "replace")
        for piece in text.split(","):
            q = _long(piece) if piece.strip() else None
            if q is not None:
                key = (r["broker"], q)
                ops[key] = min(ops.get(key, r["store_timestamp"]), r["store_timestamp"])
    ends: dict[tuple, list] = {}
    for r in by_role.get("end", []):
        ends.setdefault((r["broker"], r["prepared_transaction_offset"]), []).append(r)

    rows = []
    txns: dict[tuple, list] = {}
    for h in sorted(by_role.get("half", []), key=lambda r: (r["broker"], r["physical_offset"])):
        op_time = ops.get((h["broker"], h["queue_offset"]))
        for e in ends.get((h["broker"], h["physical_offset"]), [None]):
            txn = h["uniq_key"] if h["uniq_key"] is not None else str(h["physical_offset"])
            txns.setdefault((h["broker"], txn), []).append((h, op_time, e))
    for (broker, txn), joined in sorted(txns.items()):
        last = max(joined, key=lambda x: x[0]["queue_offset"])[0]
        first = lambda f: next((x[0][f] for x in joined if x[0][f] is not None), None)  # noqa: E731
        checks = [_int(x[0]["check_times"]) for x in joined]
        checks = [c for c in checks if c is not None]
        op_done = any(x[1] is not None for x in joined)
        commits = [x[2]["physical_offset"] for x in joined if x[2] is not None and x[2]["tran_type"] == "COMMIT"]
        commit = max(commits) if commits else None
        state = ("committed" if op_done and commit is not None else "rolled_back" if op_done
                 else "committed_without_op" if commit is not None else "open")
        rows.append(dict(broker=broker, style="half", uniq_key=txn, topic=first("real_topic"),
                         queue_id=first("real_queue_id"), producer_group=first("producer_group"),
                         physical_offset=last["physical_offset"], half_queue_offset=last["queue_offset"],
                         segment=last["segment"], file_position=last["file_position"],
                         first_store_time=min(x[0]["store_timestamp"] for x in joined), copies=len(joined),
                         check_times=max(checks) if checks else 0,
                         resolved_time=min((x[1] for x in joined if x[1] is not None), default=None),
                         commit_physical_offset=commit, state=state))
    for p in sorted(by_role.get("prepared", []), key=lambda r: (r["broker"], r["physical_offset"])):
        found = ends.get((p["broker"], p["physical_offset"]), [])
        commit = max((e["physical_offset"] for e in found if e["tran_type"] == "COMMIT"), default=None)
        rollback = max((e["physical_offset"] for e in found if e["tran_type"] == "ROLLBACK"), default=None)
        rows.append(dict(broker=p["broker"], style="prepared_record", uniq_key=p["uniq_key"], topic=p["topic"],
                         queue_id=p["queue_id"], producer_group=p["producer_group"],
                         physical_offset=p["physical_offset"], half_queue_offset=None, segment=p["segment"],
                         file_position=p["file_position"], first_store_time=p["store_timestamp"], copies=1,
                         check_times=0, resolved_time=None, commit_physical_offset=commit,
                         state="committed" if commit is not None else "rolled_back" if rollback is not None
                         else "open"))
    for r in rows:
        r["age_ms"] = ctx.as_of[r["broker"]] - r["first_store_time"] if r["state"] == "open" else None
    return pa.Table.from_pylist(rows, schema=TRANSACTIONS)


def on_driver(ctx) -> FamilyResult:
    res = FamilyResult()
    t = transaction_table(ctx)
    res.tables["transactions"] = t
    rows = t.to_pylist()

    def emit(check_id, sel, half: bool):
        if not sel:
            return
        col = lambda name, typ=None: pa.array([r[name] for r in sel], typ)  # noqa: E731
        uniq = col("uniq_key", pa.string())
        where = {"uniq_key": uniq, "key": uniq, "producer_group": col("producer_group", pa.string())}
        extra = {"age_ms": col("age_ms", pa.int64()), "check_times": col("check_times", pa.int32())} \
            if check_id == "transactions.open" else \
            {"commit_physical_offset": col("commit_physical_offset", pa.int64())} \
            if check_id == "transactions.commit_without_op" else {}
        positions = dict(broker=col("broker"), file=col("segment", pa.string()),
                         file_position=col("file_position", pa.int64()),
                         physical_offset=col("physical_offset", pa.int64()))
        if half:
            positions.update(topic=L.TRANS_HALF_TOPIC, queue_id=0, queue_offset=col("half_queue_offset", pa.int64()))
        else:
            positions.update(topic=col("topic", pa.string()), queue_id=col("queue_id", pa.int32()))
        res.findings.append(finding_table(check_id, len(sel), values={
            "topic": col("topic", pa.string()), "producer_group": col("producer_group", pa.string()),
            "age_seconds": pa.array([None if r["age_ms"] is None else int(r["age_ms"] / 1000) for r in sel], pa.int64()),
            "check_times": col("check_times", pa.int32())}, details={**where, **extra}, **positions))

    emit("transactions.open", [r for r in rows if r["state"] == "open" and r["style"] == "half"], True)
    emit("transactions.commit_without_op", [r for r in rows if r["state"] == "committed_without_op"], True)
    emit("transactions.open_prepared_record",
         [r for r in rows if r["state"] == "open" and r["style"] == "prepared_record"], False)
    per_broker: dict[str, list] = {}
    for r in rows:
        per_broker.setdefault(r["broker"], []).append(r)
    if per_broker:
        names = sorted(per_broker)
        res.metrics.append(metric_table("broker", {
            "open_transactions": [sum(r["state"] == "open" for r in per_broker[b]) for b in names],
            "transactions": [len(per_broker[b]) for b in names]}, broker=names))
    return res
