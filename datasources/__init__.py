"""PySpark data sources over RocketMQ broker dumps: ``rocketmq-commitlog``, ``rocketmq-consumequeue``,
``rocketmq-index``, ``rocketmq-metadata`` and ``rocketmq-timerlog`` (5.x).  This package's root is its whole
public API, the one the jobs use: ``register(spark)`` makes the sources work in a session (any session: see
datasources/sources.py); ``read_commitlog`` reads the commitlog in its exact two-pass form (datasources/twopass.py);
``parse_columns`` checks the commitlog source's ``columns`` option; ``local_master`` and ``default_parallelism`` say
what a session offers.  Nothing here imports pyarrow or numpy at import time: Spark's workers import this package
to unpickle the registered classes, and must get to datasources/sources.py's clear error if they lack them."""
from __future__ import annotations


def register(spark) -> None:
    from .sources import register as _register

    _register(spark)


def read_commitlog(spark, path: str, **options):
    from .twopass import read_commitlog as _read

    return _read(spark, path, **options)


def plan_commitlog(spark, path: str, **options):
    """The commitlog read of :func:`read_commitlog` as ``(reader, ranges, arrow_schema)``, for a job whose own tasks
    read the ranges (``reader.read(range)``: Arrow batches; datasources/twopass.py)."""
    from .twopass import plan_commitlog as _plan

    return _plan(spark, path, **options)


def commitlog_ends(spark, path: str, **options) -> dict:
    """The first pass of :func:`plan_commitlog` (its ``ends``), for a job that also predicts the recovery from it
    (:func:`salvage_stops`)."""
    from .twopass import commitlog_ends as _ends

    return _ends(spark, path, **options)


def salvage_stops(ends: dict, broker: str, check_crc: bool = True) -> dict[str, int]:
    """{segment: first stop} of ``broker`` in :func:`commitlog_ends`' ``ends``: store_format.recovery.predict_cut's
    ``salvage_stops`` (datasources/commitlog.py)."""
    from .commitlog import salvage_stops as _stops

    return _stops(ends, broker, check_crc)


def parse_columns(value: str | None, materialize: str) -> tuple[str, ...] | None:
    """The commitlog source's ``columns`` option checked (datasources/commitlog.py)."""
    from .commitlog import parse_columns as _parse

    return _parse(value, materialize)


def local_master(spark) -> bool:
    """The session runs its tasks on this machine (local mode)."""
    from .base import local_master as _local

    return _local(spark)


def default_parallelism(spark) -> int:
    """The session's cores (a Spark Connect session's too: datasources/base.py)."""
    from .base import default_parallelism as _cores

    return _cores(spark)


__all__ = ["register", "read_commitlog", "plan_commitlog", "commitlog_ends", "salvage_stops", "parse_columns",
           "local_master", "default_parallelism"]
