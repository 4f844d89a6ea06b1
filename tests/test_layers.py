"""store_format's two sides (issue 25): the write side (store_format/write/) builds on the read side (the package
root) and the read side never imports it; no import cycle inside store_format; the write side's old module
paths still import, as the same modules."""
from __future__ import annotations

import ast
import functools
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
    assert len(read) > 15 and len([m for m in graph if m.startswith("store_format.write.")]) == 15
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
    import pytest

    for old in ("writer", "bulk", "broker", "generate", "damage", "writer_cli"):
        sys.modules.pop(f"store_format.{old}", None)
        with pytest.warns(DeprecationWarning, match=f"store_format.{old} is now store_format.write.{old}; the old "
                                                    "path goes in 0.2.0"):
            assert importlib.import_module(f"store_format.{old}") is \
                importlib.import_module(f"store_format.write.{old}")
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


# ------------------------------------------------------------------------------------------ the layers above it

REPO = PACKAGE.parent
AUDIT = REPO / "jobs" / "audit"
#: jobs/audit's floors, from the ground up: a module imports only modules of lower floors (issue 30)
AUDIT_FLOORS = (
    ("findings", "contract", "inputs", "buckets"),
    ("tasks", "plan", "resend"),
    ("state",),  # what a scheduled audit keeps between runs: kept tasks' parts
    ("routes",),  # the routed files: what a survey task and a range read of them
    ("survey",),
    ("scan",),  # the scan's builder takes the survey's segment ends
    ("kept",),  # a state's kept scan ranges: the key of what a range reads
    ("checks.*",),  # the families, each of them
    ("checks",),  # their registry
    ("context", "groups", "report"),
    ("verdict",),
    ("terminal",),  # the verdict in words on stdout
    ("job",),
    ("__init__",),  # the package's face
    ("__main__",),  # python -m jobs.audit
)


def _audit_graph() -> dict[str, set[str]]:
    """jobs/audit's modules (``checks.lag``, ``scan``...) and the ones of the package each imports, lazily too."""
    graph = {}
    for path in AUDIT.rglob("*.py"):
        parts = path.relative_to(AUDIT).with_suffix("").parts
        name = ".".join(p for p in parts if p != "__init__") or "__init__"
        package = list(parts[:-1])
        deps = set()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and node.level:
                base = package[:len(package) - (node.level - 1)]
                if node.module is None:
                    deps |= {".".join(base + [a.name]) for a in node.names}
                else:
                    deps.add(".".join(base + node.module.split(".")))
            elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith("jobs.audit"):
                deps.add(node.module[len("jobs.audit."):] or "__init__")
        graph[name] = {d for d in deps if d and d != name}
    return graph


def _floor(module: str) -> int:
    for i, floor in enumerate(AUDIT_FLOORS):
        if module in floor or (module.startswith("checks.") and "checks.*" in floor):
            return i
    raise AssertionError(f"jobs/audit/{module} is on no floor of AUDIT_FLOORS: give it one")


def test_the_audit_package_has_one_way_layers_and_no_circles():
    graph = _audit_graph()
    upward = {m: sorted(d for d in deps if _floor(d) >= _floor(m)) for m, deps in graph.items()}
    assert not {m: d for m, d in upward.items() if d}, "imports that run back up (or across a floor)"


def test_no_job_imports_a_data_source_module_to_read():
    """jobs/ (and the runtime under them) reads through the store layer (store_format, decoding) or through Spark
    (``spark.read.format``, ``datasources.read_commitlog``): it may import the datasources package's root (its
    public API), never one of its modules."""
    found = {}
    for path in [*(REPO / "jobs").rglob("*.py"), *(REPO / "runtime").rglob("*.py")]:
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names = [node.module or ""] if isinstance(node, ast.ImportFrom) else \
                [a.name for a in node.names] if isinstance(node, ast.Import) else []
            bad = [n for n in names if n.startswith("datasources.")]
            if bad:
                found[str(path.relative_to(REPO))] = bad
    assert not found


def test_store_format_imports_nothing_above_it():
    """The store layer runs in a notebook, a test, an executor or a plain script: no Spark, no decoding package, no
    datasources, no runtime, no jobs."""
    above = ("pyspark", "decoding", "datasources", "runtime", "jobs")
    found = {}
    for path in PACKAGE.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names = [node.module or ""] if isinstance(node, ast.ImportFrom) and not node.level else \
                [a.name for a in node.names] if isinstance(node, ast.Import) else []
            bad = [n for n in names if n.split(".")[0] in above]
            if bad:
                found[str(path.relative_to(REPO))] = bad
    assert not found


def _module_graph(package: str) -> dict[str, set[str]]:
    """``package``'s own top-level modules (jobs/audit/ aside: it has its floors above) and which of them each
    imports, lazily too (an import inside a function is an edge all the same)."""
    folder = REPO / package
    names = {p.stem for p in folder.glob("*.py")}
    graph: dict[str, set[str]] = {}
    for path in folder.glob("*.py"):
        edges = set()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom):
                module = node.module or ""
                parts = (module.split(".") if node.level == 1 else
                         module.split(".")[1:] if module.startswith(f"{package}.") else [])
                if parts and parts[0] in names:
                    edges.add(parts[0])
                elif (node.level == 1 and not module) or (not node.level and module == package):
                    edges |= {a.name for a in node.names if a.name in names}
        graph[path.stem] = edges - {path.stem}
    return graph


def _circle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import circle of ``graph`` (its modules in order, the first again at the end), or None."""
    done: set[str] = set()

    def visit(node, path):
        if node in path:
            return path[path.index(node):] + [node]
        if node in done:
            return None
        for nxt in sorted(graph.get(node, ())):
            found = visit(nxt, path + [node])
            if found:
                return found
        done.add(node)
        return None

    return next((c for c in (visit(n, []) for n in sorted(graph)) if c), None)


def test_the_runtime_modules_import_each_other_one_way():
    """No circle among runtime/'s modules (runtime/commit.py and runtime/output.py imported each other until the
    guard both need moved to runtime/apart.py, below both), nor among jobs/' own."""
    graph = _module_graph("runtime")
    assert {"cli", "commit", "output", "apart", "history", "session"} <= set(graph)
    assert "output" not in graph["commit"] and "commit" not in graph["apart"] and "output" not in graph["apart"]
    assert _circle(graph) is None, f"an import circle in runtime/: {' -> '.join(_circle(graph))}"
    jobs = _module_graph("jobs")
    assert _circle(jobs) is None, f"an import circle in jobs/: {' -> '.join(_circle(jobs))}"


def test_the_circle_finder_finds_a_circle():
    assert _circle({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": set()}) == ["a", "b", "c", "a"]
    assert _circle({"a": {"b", "c"}, "b": {"c"}, "c": set()}) is None


# ------------------------------------------------------------------------------------ the top-level packages

#: the project's packages from the ground up (issue 39 item 5): each imports only packages on lower floors, so
#: no import circle can run across them.  tools/, bench/, notebooks/ and tests/ stand above them all.
PACKAGE_FLOORS = ("store_format", "decoding", "datasources", "runtime", "jobs")


@functools.lru_cache(maxsize=None)
def _package_imports(package: str) -> dict[str, set[str]]:
    """The project packages ``package`` imports (lazily too), each with the files that do."""
    found: dict[str, set[str]] = {}
    for path in (REPO / package).rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names = [node.module or ""] if isinstance(node, ast.ImportFrom) and not node.level else \
                [a.name for a in node.names] if isinstance(node, ast.Import) else []
            for name in names:
                top = name.split(".")[0]
                if top in PACKAGE_FLOORS and top != package:
                    found.setdefault(top, set()).add(str(path.relative_to(REPO)))
    return found


def test_every_package_is_on_a_floor():
    packages = {p.parent.name for p in REPO.glob("*/__init__.py")} - {"tests"}
    assert packages == set(PACKAGE_FLOORS), "a new top-level package: give it a floor of PACKAGE_FLOORS"


def test_each_package_imports_only_the_packages_below_it():
    """jobs -> runtime -> datasources -> decoding -> store_format, never back up: runtime/ imports no job (the console
    that names the jobs is jobs/console.py), the data sources no runtime, the store layer nothing of the project."""
    upward = {}
    for floor, package in enumerate(PACKAGE_FLOORS):
        above = {p: sorted(files) for p, files in _package_imports(package).items()
                 if PACKAGE_FLOORS.index(p) > floor}
        if above:
            upward[package] = above
    assert not upward, "imports that run back up"
    assert set(_package_imports("runtime")) == {"store_format", "decoding", "datasources"}  # the rule is not vacuous
    assert "runtime" in _package_imports("jobs")


def test_the_runtime_loads_no_job():
    """At run time too (an import by name, ``importlib.import_module(f"jobs.{name}")``, is no edge above): every
    runtime module imported, no module of jobs/ is loaded."""
    modules = sorted(f"runtime.{p.stem}" for p in (REPO / "runtime").glob("*.py") if p.stem != "__init__")
    code = ("import importlib, sys\n"
            f"for m in {modules!r}: importlib.import_module(m)\n"
            "print(sorted(m for m in sys.modules if m == 'jobs' or m.startswith('jobs.')))")
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True,
                         env={**os.environ, "PYTHONPATH": str(REPO)}, check=True).stdout
    assert out.strip() == "[]"


#: decoding/ is three things, from the ground up: the column descriptions every schema declares (columns), the
#: numba-compiled record passes (compiled) under the Arrow kernels that use them and the small files' tables
#: (kernels, metadata: no Spark), and the Spark wrappers of the kernels (spark).  Only compiled imports numba and
#: only spark imports pyspark, so a kernel runs in a plain process and the compile cache has one home.
DECODING_FLOORS = (("columns",), ("compiled",), ("kernels",), ("metadata",), ("spark",), ("__init__",))


def test_the_decoding_package_has_one_way_layers():
    graph = _module_graph("decoding")
    floor = {m: i for i, names in enumerate(DECODING_FLOORS) for m in names}
    assert set(graph) == set(floor), "a new decoding module: give it a floor of DECODING_FLOORS"
    upward = {m: sorted(d for d in deps if floor[d] >= floor[m]) for m, deps in graph.items()}
    assert not {m: d for m, d in upward.items() if d}
    assert "compiled" in graph["kernels"] and "kernels" in graph["spark"]


def test_only_the_kernels_compile_and_only_the_wrappers_start_spark():
    third = {}
    for path in (REPO / "decoding").glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names = [node.module or ""] if isinstance(node, ast.ImportFrom) and not node.level else \
                [a.name for a in node.names] if isinstance(node, ast.Import) else []
            third.setdefault(path.stem, set()).update(n.split(".")[0] for n in names)
    assert {m for m, names in third.items() if "numba" in names} == {"compiled"}
    assert {m for m, names in third.items() if "pyspark" in names} == {"spark"}


# ---------------------------------------------------------------------------------------------------------
# One path type below the command line (issue 39 item 5): a public function of runtime/, jobs/ or datasources/ takes
# a path as a store_format.fs Location (converted to a string only at a foreign API's boundary: Spark's readers and
# writers, deltalake, subprocess arguments, messages), never as a ``str``.

ROOT = PACKAGE.parent
PATH_LAYERS = ("runtime", "jobs", "datasources")
_PATH_NAMES = {"path", "out", "root", "folder", "staged", "src", "base", "history", "input", "manifest", "repair",
               "delta_path", "store_path", "location", "target", "dump"}
_PATH_SUFFIXES = ("_path", "_dir", "_root", "_folder", "_uri")
# the command line's own side: parsing and the job's entry point take the strings the user typed
_COMMAND_LINE = {"main", "build_parser", "parse_args"}

#: (module, function, parameter) -> why it is a string.  Each one is kept on purpose; a new one needs a reason.  A path
#: whose spelling matters (the output's guard resolves links and ``..`` as the OS does; messages name it as typed) is
#: a Location all the same: the command line made it (runtime/cli.location_argument), and it carries the spelling
#: (Location.as_typed).
_SPARK_LOAD = ("the data source's load() path: Spark's reader takes a string, which the source resolves again in "
               "its own process (the jobs give it fs.uri_of)")
STR_PATHS_ALLOWED = {
    ("runtime.session", "ship_project", "zip_path"): "a zip on this machine that SparkContext.addPyFile ships, "
                                                     "never a dump or an output",
    ("datasources.__init__", "read_commitlog", "path"): _SPARK_LOAD,
    ("datasources.twopass", "read_commitlog", "path"): _SPARK_LOAD,
    ("datasources.twopass", "commitlog_ends", "path"): _SPARK_LOAD,
    ("datasources.__init__", "plan_commitlog", "path"): _SPARK_LOAD,  # read_commitlog's options, read by the tasks
    ("datasources.twopass", "plan_commitlog", "path"): _SPARK_LOAD,
    ("datasources.__init__", "commitlog_ends", "path"): _SPARK_LOAD,  # plan_commitlog's first pass, the same string
    ("jobs.audit.buckets", "Buckets.__init__", "folder"): "the driver's own scratch (a temporary directory of this "
                                                           "machine's disk, removed after the step), never an input "
                                                           "nor an output",
    ("jobs.audit.buckets", "Scratch.__init__", "folder"): "the same scratch, shared by a step's buckets",
    ("jobs.audit.routes", "view_schema", "folder"): "a queue folder's name (consumequeue, batchcq...), not a path",
}


def _annotation_is_str(node) -> bool:
    """``str``, ``str | None``, ``Optional[str]``, ``"str"`` (not ``str | Location``: that names the path type)."""
    if node is None:
        return False
    text = ast.unparse(node).strip("'\"")
    words = {w.strip() for w in text.replace("Optional[", "").replace("]", "").split("|")}
    return "str" in words and not {"Location", "fs.Location"} & words


def _is_path_name(name: str) -> bool:
    return name in _PATH_NAMES or name.endswith(_PATH_SUFFIXES)


def str_path_parameters(source: str, module: str) -> set[tuple[str, str, str]]:
    """(module, function, parameter) of every public function or method (of a public class) in ``source`` whose
    path parameter is annotated ``str``."""
    found = set()

    def visit(body, owner: str):
        for node in body:
            if isinstance(node, ast.ClassDef) and not node.name.startswith("_"):
                visit(node.body, f"{owner}{node.name}.")
            elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                public = not node.name.startswith("_") or node.name == "__init__"
                if not public or (not owner and node.name in _COMMAND_LINE):
                    continue
                a = node.args
                for arg in a.posonlyargs + a.args + a.kwonlyargs:
                    if _is_path_name(arg.arg) and _annotation_is_str(arg.annotation):
                        found.add((module, f"{owner}{node.name}", arg.arg))

    visit(ast.parse(source).body, "")
    return found


def _str_path_parameters() -> set[tuple[str, str, str]]:
    found = set()
    for layer in PATH_LAYERS:
        for path in sorted((ROOT / layer).rglob("*.py")):
            module = ".".join(path.relative_to(ROOT).with_suffix("").parts)
            found |= str_path_parameters(path.read_text(encoding="utf-8"), module)
    return found


def test_paths_below_the_command_line_are_locations():
    found = _str_path_parameters()
    assert not sorted(found - set(STR_PATHS_ALLOWED)), "annotate these Location (store_format.fs), or list them in " \
                                                       "STR_PATHS_ALLOWED with the reason they are strings"
    assert not sorted(set(STR_PATHS_ALLOWED) - found), "no longer strings: take them off STR_PATHS_ALLOWED"


def test_the_path_check_sees_a_str_path():
    source = ("def write(table, path: str) -> None: ...\n"
              "def _private(path: str): ...\n"
              "def ok(path: Location, name: str): ...\n"
              "def either(out: 'str | None' = None): ...\n"
              "class Writer:\n    def put(self, staged_dir: str): ...\n")
    assert str_path_parameters(source, "m") == {("m", "write", "path"), ("m", "either", "out"),
                                                ("m", "Writer.put", "staged_dir")}
