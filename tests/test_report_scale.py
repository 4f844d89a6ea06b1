"""The report stays a page past thousands of segments (issue 40, "wide and many"): the segment plot draws runs of
consecutive segments, never a bar per segment; a few segments are still a bar each."""
from __future__ import annotations

import pyarrow as pa

from jobs.audit.checks import integrity
from jobs.audit.report import _png


def _segments(n: int, brokers: int = 1) -> pa.Table:
    return pa.Table.from_pylist([{"broker": f"b{i % brokers}", "segment": f"{i * 8192:020d}", "file_length": 8192,
                                  "message_bytes": 8000, "corrupt_bytes": 4096 if i == 7 else 0}
                                 for i in range(n)])


def test_four_thousand_segments_draw_one_small_figure():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    heading, fig = integrity._segment_plot(None, {"segments": _segments(4096)}, plt)
    assert heading == "Segment fill and damage"
    assert len(fig.axes[0].get_yticklabels()) <= integrity._SEGMENT_BARS
    assert len(_png(fig)) < 300_000  # base64 bytes in report.html (a bar per segment was 28 MB)


def test_runs_sum_their_bytes_and_never_span_two_brokers():
    rows = _segments(130, brokers=2).to_pylist()
    rows.sort(key=lambda s: (s["broker"], s["segment"]))
    bars = integrity._segment_bars(rows)
    assert len(bars) <= integrity._SEGMENT_BARS + 2
    assert sum(b[1] for b in bars) == 130 * 8192 and sum(b[3] for b in bars) == 4096
    assert all(label.startswith(("b0/", "b1/")) for label, *_ in bars)
    assert not any("b0/" in label and "b1" in label.split("/", 1)[1] for label, *_ in bars)
    few = integrity._segment_bars(rows[:2] + rows[-1:])
    assert [label for label, *_ in few] == [f"b0/{rows[0]['segment']}", f"b0/{rows[1]['segment']}",
                                            f"b1/{rows[-1]['segment']}"]


def test_a_fleets_segments_are_runs_of_brokers_within_the_bound():
    """Past _SEGMENT_BARS brokers a bar is a run of consecutive brokers, their segments' bytes summed: a fleet of 64
    brokers of a few segments each draws 20 bars, not one a broker."""
    rows = sorted(_segments(64 * 3, brokers=64).to_pylist(), key=lambda s: (s["broker"], s["segment"]))
    brokers = sorted({s["broker"] for s in rows})
    bars = integrity._segment_bars(rows)
    per_bar = -(-64 // integrity._SEGMENT_BARS)
    assert len(bars) == -(-64 // per_bar) <= integrity._SEGMENT_BARS
    assert bars[0][0] == f"{brokers[0]}..{brokers[per_bar - 1]} ({per_bar} brokers)"
    assert sum(b[1] for b in bars) == 64 * 3 * 8192 and sum(b[2] for b in bars) == 64 * 3 * 8000
    assert [b[3] for b in bars].index(4096) == brokers.index("b7") // per_bar and sum(b[3] for b in bars) == 4096
    few = rows[:2] + rows[-1:]  # few segments of two brokers: still a bar a segment
    assert [b[0] for b in integrity._segment_bars(few)] == [f"{s['broker']}/{s['segment']}" for s in few]


def test_a_lone_brokers_bars_name_the_segments_and_the_axis_names_the_broker():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = _segments(130).to_pylist()
    bars = integrity._segment_bars(rows)
    per_bar = -(-130 // integrity._SEGMENT_BARS)
    assert bars[0][0] == f"{rows[0]['segment']}..{rows[per_bar - 1]['segment']} ({per_bar} segments)"
    assert not any("b0" in label for label, *_ in bars)
    assert [label for label, *_ in integrity._segment_bars(rows[:3])] == [s["segment"] for s in rows[:3]]
    _, fig = integrity._segment_plot(None, {"segments": _segments(130)}, plt)
    assert fig.axes[0].get_xlabel() == "% of the segments' files (broker b0)"
    _, fig = integrity._segment_plot(None, {"segments": _segments(130, brokers=2)}, plt)
    assert fig.axes[0].get_xlabel() == "% of the segments' files"
    plt.close("all")


def test_a_fleet_of_hundreds_shows_the_most_serious_rows_and_counts_the_rest():
    from jobs.audit import report

    def broker(i, level, banner):
        return {"name": f"b{i:04d}", "verdict": {"level": level, "banner": banner, "headline": "h", "kept_damaged": 0,
                                                 "lost": {"damaged": 0, "destroyed": 0, "dropped": 0, "unindexed": 0}}}

    brokers = [broker(i, "pass", "PASS") for i in range(600)] + [broker(600, "data-lost", "DATA LOST")]
    html = report._fleet(brokers)
    assert html.count("<tr>") <= report._ROWS + 1  # the header row and at most _ROWS brokers
    assert "b0600" in html and "b0599" not in html  # the data-lost broker first, the last pass brokers left out
    assert f"the {report._ROWS} most serious of 601" in html and "401 PASS" in html
    few = report._fleet(brokers[:3])
    assert "most serious" not in few and all(f"b{i:04d}" in few for i in range(3))
