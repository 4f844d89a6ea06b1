"""Transaction op bodies read a column at a time (jobs/audit/checks/transactions.py ``_op_marks``, ``_longs``,
``_ints``): the queue offsets an op marks done, and a half's CHECK_TIMES, as the per-text reading (``_long``: its
surrounding white space taken off, then Python's ``int`` within a long) reads each piece.  The plain decimals go
through Arrow's cast and the rest a text at a time, so every kind of text is here: signs, padding, blanks, other
digits and spaces, underscores, fractions, the edges of an int and a long, bodies that are not UTF-8."""
from __future__ import annotations

import random

import pyarrow as pa

from jobs.audit.checks import transactions as T

TEXTS = ["1", "12", "+5", "-7", " 42 ", "\t9\n", "", " ", "1_000", "١٢", "9223372036854775807", "9223372036854775808",
         "-9223372036854775808", "-9223372036854775809", "123456789012345678", "1234567890123456789", "0012", "-0",
         "1.5", "abc", "\x1c3\x1c", "\xa07", "2147483647", "2147483648", "-2147483648", "-2147483649", "+", "-",
         "3 4", "\u20037", "\ufffd"]


def _marks_a_piece_at_a_time(ops: pa.Table) -> list[tuple]:
    out = []
    for broker, body, ts in zip(*(ops.column(c).to_pylist() for c in ("broker", "op_body", "store_timestamp"))):
        for piece in (body or b"").decode("utf-8", "replace").split(","):
            q = T._long(piece)
            if q is not None:
                out.append((broker, q, ts))
    return out


def test_op_bodies_mark_what_each_piece_read_alone_marks():
    rng = random.Random(7)
    bodies = [",".join(rng.choice(TEXTS) for _ in range(rng.randint(0, 4))).encode() for _ in range(2000)]
    for extra in ([None], [None, b"\xff\xfe12", b"5,\xc3(,6", b"7,\xff"]):  # UTF-8 throughout, and not
        b = bodies + extra
        ops = pa.table({"broker": [f"b{i % 3}" for i in range(len(b))], "op_body": pa.array(b, pa.binary()),
                        "store_timestamp": pa.array(range(len(b)), pa.int64())})
        ops = pa.concat_tables([ops.slice(0, 100), ops.slice(100)])  # as parts are read: chunked
        got = T._op_marks(ops)
        assert got.schema == T._MARKS
        assert list(zip(*(got.column(c).to_pylist() for c in T._MARKS.names))) == _marks_a_piece_at_a_time(ops)


def test_check_times_are_ints_where_the_text_is_one():
    texts = pa.chunked_array([pa.array(TEXTS + [None]), pa.array(["5", None, " -3 "])])
    want = []
    for t in texts.to_pylist():
        v = T._long(t) if t is not None else None
        want.append(v if v is not None and -2**31 <= v < 2**31 else None)
    got = T._ints(texts)
    assert got.type == pa.int32() and got.to_pylist() == want
