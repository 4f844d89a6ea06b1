"""RocketMQ's on-disk store in pure Python: the read side here (layout, codec, framing, the files, recovery), the
write side in :mod:`store_format.write`.

The write side's modules were ``store_format.writer``, ``store_format.bulk`` ... before they moved (0.1.0); those
names still import, as the same module objects (``store_format.writer is store_format.write.writer``), through the
finder below, which loads a moved module only when it is asked for and warns (DeprecationWarning) naming its new
path.  The old paths go in 0.2.0, with the finder and its test (tests/test_layers.py); nothing in this repository
uses them.  The write side's public names import from
the package too (``from store_format import StoreWriter``), loaded the same way: on first use, so reading a store
never loads the write side.
"""
from __future__ import annotations

import importlib
import importlib.abc
import importlib.util
import sys

_MOVED = frozenset({"writer", "bulk", "broker", "generate", "damage", "writer_cli"})


class _MovedModules(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """``store_format.<old>`` -> ``store_format.write.<old>``, the same module object."""

    def find_spec(self, fullname, path=None, target=None):
        head, _, name = fullname.rpartition(".")
        if head != __name__ or name not in _MOVED:
            return None
        return importlib.util.spec_from_loader(fullname, self)

    def create_module(self, spec):
        import warnings

        new = f"{__name__}.write.{spec.name.rpartition('.')[2]}"
        warnings.warn(f"{spec.name} is now {new}; the old path goes in 0.2.0", DeprecationWarning, stacklevel=3)
        module = importlib.import_module(new)
        spec.loader_state = module.__spec__  # the import system sets the alias's spec on it: put its own back
        return module

    def exec_module(self, module):
        module.__spec__ = module.__spec__.loader_state  # executed under its own name already


if not any(isinstance(f, _MovedModules) for f in sys.meta_path):
    sys.meta_path.append(_MovedModules())


#: the write side's public names, importable from the package: name -> its module under store_format.write
_WRITE_NAMES = {
    "StoreWriter": "writer", "WriterConfig": "writer", "IndexFileWriter": "writer",
    "append_many": "bulk", "RecordBatch": "bulk",
    "Broker": "broker", "Producer": "broker", "ManualClock": "broker", "BatchItem": "broker",
    "TrafficConfig": "generate", "generate_store": "generate",
    "copy_store": "damage",
}


def __getattr__(name: str):
    module = _WRITE_NAMES.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.write.{module}"), name)


def __dir__():
    return sorted(set(globals()) | set(_WRITE_NAMES))
