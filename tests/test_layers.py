"""store_format's two sides (issue 25): the write side (store_format/write/) builds on the read side (the package
root) and the read side never imports it; no import cycle inside store_format; the write side's old module
paths still import, as the same modules."""
from __future__ import annotations

import ast
import importlib
import os
import subprocess
import sys
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "store_format"


def _imports(path: Path) -> set[str]:
    """The store_format modules ``path`` imports (absolute, or relative resolved against its package)."""
    package = "store_format" + "".join(f".{p}" for p in path.relative_to(PACKAGE).parent.parts)
    out = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom):
            base = package.rsplit(".", node.level - 1)[0] if node.level else ""
            module = ".".join(p for p in (base, node.module or "") if p)
            if module.startswith("store_format"):
                names = [f"{module}.{a.name}" for a in node.names]  # `from . import x` names a module x
                out |= {n for n in names if _module_file(n)} or {module}
        elif isinstance(node, ast.Import):
            out |= {a.name for a in node.names if a.name.startswith("store_format")}
    return {m for m in out if _module_file(m)}


def _module_file(name: str) -> Path | None:
    rel = Path(*name.split(".")[1:])
    for candidate in (PACKAGE / rel.with_suffix(".py"), PACKAGE / rel / "__init__.py"):
        if candidate.is_file():
            return candidate
    return None


def _graph() -> dict[str, set[str]]:
    graph = {}
    for path in PACKAGE.rglob("*.py"):
        parts = path.relative_to(PACKAGE).with_suffix("").parts
        name = ".".join(("store_format",) + tuple(p for p in parts if p != "__init__"))
        graph[name] = _imports(path) - {name}
    return graph


def test_the_read_side_never_imports_the_write_side():
    graph = _graph()
    read = {m for m in graph if not m.startswith("store_format.write") and m != "store_format.__main__"}
    assert len(read) > 15 and len([m for m in graph if m.startswith("store_format.write.")]) == 9
    crossing = {m: sorted(d for d in graph[m] if d.startswith("store_format.write")) for m in read}
    assert not {m: d for m, d in crossing.items() if d}


def test_no_import_cycle_in_store_format():
    graph = _graph()
    state: dict[str, int] = {}

    def visit(m, path):
        state[m] = 1
        for d in graph.get(m, ()):
            assert state.get(d) != 1, " -> ".join(path + [d])
            if d not in state:
                visit(d, path + [d])
        state[m] = 2

    for m in sorted(graph):
        if m not in state and m != "store_format":  # the package's own finder imports nothing of it
            visit(m, [m])


def test_the_write_sides_old_paths_import_the_same_modules():
    for old in ("writer", "bulk", "broker", "generate", "damage", "writer_cli"):
        assert importlib.import_module(f"store_format.{old}") is importlib.import_module(f"store_format.write.{old}")
    from store_format.writer import StoreWriter
    from store_format.write.writer import StoreWriter as moved

    assert StoreWriter is moved and importlib.import_module("store_format.write.writer").__spec__.name == \
        "store_format.write.writer"


def test_the_write_sides_public_names_import_from_the_package():
    import store_format

    for name, module in store_format._WRITE_NAMES.items():
        assert getattr(store_format, name) is getattr(importlib.import_module(f"store_format.write.{module}"), name)
    from store_format import StoreWriter, generate_store  # the form users write
    from store_format.write.generate import generate_store as moved

    assert StoreWriter.__module__ == "store_format.write.writer" and generate_store is moved
    assert set(store_format._WRITE_NAMES) <= set(dir(store_format))
    try:
        store_format.NoSuchName
    except AttributeError as e:
        assert "NoSuchName" in str(e)
    else:
        raise AssertionError("an unknown name must raise AttributeError")


def test_reading_loads_no_write_module():
    """At run time too: every read-side module imported (the package's re-exports untouched), nothing of the
    write side is loaded."""
    read = sorted(m for m in _graph() if not m.startswith("store_format.write") and m != "store_format.__main__")
    code = ("import importlib, sys\n"
            f"for m in {read!r}: importlib.import_module(m)\n"
            "print(sorted(m for m in sys.modules if m.startswith('store_format.write')))")
    out = subprocess.run([sys.executable, "-c", code], cwd=PACKAGE.parent, capture_output=True, text=True,
                         env={**os.environ, "PYTHONPATH": str(PACKAGE.parent)}, check=True).stdout
    assert out.strip() == "[]"
