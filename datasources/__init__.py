"""PySpark data sources over RocketMQ broker dumps: ``rocketmq-commitlog``, ``rocketmq-consumequeue``,
``rocketmq-index`` and ``rocketmq-metadata``.  ``register(spark)`` makes them work in a session (any session:
see datasources/sources.py); ``read_commitlog`` reads the commitlog in its exact two-pass form (see
datasources/commitlog.py).  Nothing here imports pyarrow or numpy at import time: Spark's workers import this
package to unpickle the registered classes, and must get to datasources/sources.py's clear error if they lack them."""
from __future__ import annotations


def register(spark) -> None:
    from .sources import register as _register

    _register(spark)


def read_commitlog(spark, path: str, **options):
    from .commitlog import read_commitlog as _read

    return _read(spark, path, **options)


__all__ = ["register", "read_commitlog"]
