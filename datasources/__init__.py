"""PySpark data sources over RocketMQ broker dumps: ``rocketmq-commitlog``, ``rocketmq-consumequeue``,
``rocketmq-index`` and ``rocketmq-metadata``.  ``register(spark)`` makes them known to a session;
``read_commitlog`` reads the commitlog in its exact two-pass form (see datasources/commitlog.py)."""
from __future__ import annotations


def register(spark) -> None:
    from .register import register_all

    register_all(spark)


def read_commitlog(spark, path: str, **options):
    from .commitlog import read_commitlog as _read

    return _read(spark, path, **options)


__all__ = ["register", "read_commitlog"]
