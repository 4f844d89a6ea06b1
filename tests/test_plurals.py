"""Counts in words, one helper (runtime.display.plural): "1 message lost", never "1 messages lost"."""
from __future__ import annotations

from jobs import trend
from runtime.display import plural


def test_plural_says_one_and_many():
    assert [plural(n, "message") for n in (0, 1, 2, 1188)] == ["0 messages", "1 message", "2 messages",
                                                               "1,188 messages"]
    assert plural(1, "entry", "entries") == "1 entry" and plural(3, "entry", "entries") == "3 entries"


def test_trend_says_one_message_lost():
    row = {"flag": "lost_more", "broker": "b", "topic": None, "queue_id": None, "group": None, "run_id": "r2",
           "previous_run_id": "r1", "value": 1.0, "previous_value": 0.0}
    assert trend._describe(row) == "  lost_more: b: run r2: 1 message lost; run r1: 0"
    row.update(flag="newly_unindexed", value=2.0)
    assert trend._describe(row) == "  newly_unindexed: b: run r2: 2 messages in no consume queue; run r1: 0"
