"""The write side of store_format: stores written the way a RocketMQ broker (4.9.x, or 5.3.3 by its settings) writes
them.

``writer`` (StoreWriter: the CommitLog and its put path, checkpoint and config, one record at a time), the
structures it dispatches to (``dispatch`` says how: ``consumequeue``, ``batchcq``, ``lmq``, ``timer``,
``indexfile``), ``bulk`` (many records at once through the writer's public interface), ``broker`` (the records each
client action makes a broker store), ``generate`` (synthetic traffic of any size, 4.x or 5.x by its profile),
``damage`` (copies of a store with one named damage each) and ``writer_cli`` (``python -m store_format
generate|write``).  It builds on the read side (the package root: layout, codec, framing, files, recovery) and the
read side never imports it (tests/test_layers.py).  The modules' old paths (``store_format.writer`` ...) still
import: see ``store_format/__init__.py``.
"""
