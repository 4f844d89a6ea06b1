"""jobs/audit/buckets.py's key hash: its string part, now one compiled pass, is the polynomial it is declared to be
(the delays probe's keys are hashed on the driver and every message's in the scan tasks: both sides must agree,
and the buckets of the out-of-core joins must not move)."""
from __future__ import annotations

import numpy as np
import pyarrow as pa

from jobs.audit.buckets import _M1, _M2, _POLY, key_hash, _string_hash

MASK = (1 << 64) - 1


def _mix(h: int) -> int:
    h ^= h >> 30
    h = h * int(_M1) & MASK
    h ^= h >> 27
    h = h * int(_M2) & MASK
    return h ^ (h >> 31)


def _reference(text: str | None) -> int:
    """The declared hash, a byte at a time: sum of (byte + 1) * POLY ** (k + 1) over the UTF-8 bytes, plus the
    length, mixed; a null as the empty string."""
    data = (text or "").encode()
    h = sum((b + 1) * pow(int(_POLY), k + 1, 1 << 64) for k, b in enumerate(data)) & MASK
    return _mix((h + len(data)) & MASK)


TEXTS = ["", None, "a", "TopicTest", "7F0000011DF418B4AAC2" * 3, "délai ✓", "%RETRY%group_1", "\x00\x01", "x" * 300]


def test_each_string_hashes_to_the_declared_polynomial():
    got = _string_hash(pa.array(TEXTS, pa.string()))
    assert got.tolist() == [_reference(t) for t in TEXTS]


def test_slices_chunks_and_large_strings_hash_as_their_values():
    want = [_reference(t) for t in TEXTS]
    assert _string_hash(pa.array(TEXTS).slice(3, 4)).tolist() == want[3:7]
    assert _string_hash(pa.chunked_array([pa.array(TEXTS[:2]), pa.array(TEXTS[2:])])).tolist() == want
    assert _string_hash(pa.array(TEXTS, pa.large_string())).tolist() == want
    assert _string_hash(pa.array([], pa.string())).tolist() == []


def test_a_key_of_several_columns_mixes_each_in_turn():
    topics, ids = pa.array(["t1", "t2", None]), pa.array([1, None, 3], pa.int64())
    with np.errstate(over="ignore"):
        expected = []
        for t, i in zip(topics.to_pylist(), ids.to_pylist()):
            h = _mix((0 * int(_POLY) + _reference(t)) & MASK)
            part = _mix((i if i is not None else -1) & MASK)
            expected.append(_mix((h * int(_POLY) + part) & MASK))
    assert key_hash(topics, ids).tolist() == expected
