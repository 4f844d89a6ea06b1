"""The commitlog read in its exact two-pass form, for large dumps: :func:`read_commitlog` finds the ends of the
segments cut into several ranges first (:func:`commitlog_ends`: a Spark pass that ships only stop and blank rows,
or in local mode the same walk in the driver, a range per core at a time), then hands them to the
``rocketmq-commitlog`` source in its ``segmentEnds`` option, so every task knows them, ranges past the recovery
end are never read, and the body CRCs the first pass checked are not checked again (the CRC is most of the
framing work).  The result equals store_format's walks of every segment from its start.
"""
from __future__ import annotations

import json

from store_format.plan import split_segments
from store_format.scan import SegmentEnds, with_crc_checked
from store_format.stores import part_inputs

from .base import default_parallelism, local_master
from .commitlog import FORMAT, Options, plan_segment_ranges, walk_segment_ends

FIRST_PASSES = ("auto", "spark", "here")


def commitlog_ends(spark, path: str, first_pass: str = "auto", **options) -> dict:
    """The segment ends ``{"broker/segment": [first_stop, first_blank, crc_checked_before]}`` of the segments
    split into several ranges (the first pass of :func:`read_commitlog`; none at all when every segment is one
    range).  ``first_pass``: ``spark``, a Spark pass that ships only stop and blank rows (the work spread over
    the executors); ``here``, walked in this process with the tasks' code, a range per core at a time
    (store_format.scan.walk_ends: no Spark job, whose own cost is most of a cheap walk's); ``auto``: here when the session
    runs in local mode (its tasks would use this machine's cores anyway), else Spark."""
    from pyspark.sql import functions as F

    if first_pass not in FIRST_PASSES:
        raise ValueError(f"first_pass={first_pass!r}: choose one of {', '.join(FIRST_PASSES)}")

    opts = {k: str(v) for k, v in options.items()}
    opts.setdefault("parallelism", str(default_parallelism(spark)))
    parsed = Options.parse(opts)  # fail on bad options before any job runs
    # a segment read by one task needs no first pass: that task walks it all and finds its ends itself
    parts = plan_segment_ranges(part_inputs(path, "commitlog", opts.get("broker")), parsed)
    cut = split_segments(parts)
    split = [p for p in parts if p.key in cut]
    if not split:
        return {}
    if first_pass == "here" or (first_pass == "auto" and local_master(spark)):
        return {k: list(v) for k, v in walk_segment_ends(split, parsed).items()}
    positions = {k: v for k, v in opts.items() if k != "columns"}  # the decoded columns of the second pass
    stops = (spark.read.format(FORMAT).options(**positions)
             .options(materialize="positions", walk="salvage", mode="PERMISSIVE", segmentEnds="unresolved",
                      pushFilters="true", recoveryCuts="none")  # stops and blanks only: no cut needed
             .load(path)
             .where(F.col("broker").isin(sorted({f.broker for f in split}))
                    & F.col("segment").isin(sorted({f.name for f in split})) & F.col("kind").isin("stop", "blank"))
             .groupBy("broker", "segment")
             .agg(F.min("file_position").alias("first_stop"),
                  F.min(F.when(F.col("kind") == "blank", F.col("file_position"))).alias("first_blank")))
    return {f"{r['broker']}/{r['segment']}": list(with_crc_checked(SegmentEnds(r["first_stop"], r["first_blank"]),
                                                                   parsed.check_crc))
            for r in stops.collect()}


def read_commitlog(spark, path: str, ends: dict | None = None, first_pass: str = "auto", **options):
    """The commitlog as a DataFrame equal to store_format's walks, read in two passes: the segment ends (first
    stop, first blank) of the segments cut into ranges (:func:`commitlog_ends`, ``first_pass`` as there), then
    the rows.  ``ends`` from :func:`commitlog_ends` (same path and options) skips the first pass: the walks
    share it."""
    opts = {k: str(v) for k, v in options.items()}
    opts.setdefault("parallelism", str(default_parallelism(spark)))  # both passes plan the same ranges
    Options.parse(opts)  # fail on bad options before any job runs
    if ends is None:
        ends = commitlog_ends(spark, path, first_pass=first_pass, **opts)
    return spark.read.format(FORMAT).options(**opts).option("segmentEnds", json.dumps(ends)).load(path)


def plan_commitlog(spark, path: str, ends: dict | None = None, first_pass: str = "auto", **options):
    """:func:`read_commitlog`'s read as its planned ranges and the reader that reads each (``reader.read(range)``:
    the same rows, as Arrow batches of ``arrow_schema``), for a job whose own tasks read them
    (runtime/export.py).  Returns ``(reader, ranges, arrow_schema)``; the reader and the ranges are picklable."""
    from pyspark.sql.datasource import CaseInsensitiveDict

    from .commitlog import CommitLogReader, arrow_schema

    opts = {k: str(v) for k, v in options.items()}
    opts.setdefault("parallelism", str(default_parallelism(spark)))
    parsed = Options.parse(opts)
    if ends is None:
        ends = commitlog_ends(spark, path, first_pass=first_pass, **opts)
    reader = CommitLogReader(CaseInsensitiveDict({**opts, "path": path, "segmentEnds": json.dumps(ends)}))
    return reader, reader.partitions(), arrow_schema(parsed.materialize, parsed.decompress, parsed.columns)


__all__ = ["FIRST_PASSES", "commitlog_ends", "plan_commitlog", "read_commitlog"]
