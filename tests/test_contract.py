"""The check-family contract (jobs/audit/contract.py, issue 30): every family declares its whole contract in one
object, the declarations say what the code does, and every partial table emitted is read by someone."""
from __future__ import annotations

import ast
import inspect
from pathlib import Path

import pyarrow as pa

from jobs.audit import checks, routes, scan, survey
from jobs.audit.contract import Family

AUDIT = Path(__file__).resolve().parent.parent / "jobs" / "audit"
#: the partial tables the engine itself reads (the survey's walks, the scan's ranges, every route's files and the
#: queue starts): jobs/audit/context.py and scan.py
ENGINE_READS = {"survey.walk_items", "survey.walk_ranges", "scan.ranges", "survey.queue_starts",
                "survey.index_files"} | {r.files_partial for r in routes.ROUTES.values()}


def _partial_names(source: str, owner: str, methods: tuple[str, ...]) -> set[str]:
    """The literal names passed to ``<owner>.<method>("name", ...)`` in ``source``."""
    out = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in methods \
                and isinstance(node.func.value, ast.Name) and node.func.value.id == owner \
                and node.args and isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, str):
            out.add(node.args[0].value)
    return out


def test_every_family_is_one_declared_object():
    families = checks.load_all()
    assert [f.name for f in families] == [*checks.FAMILIES, *checks.ALWAYS]
    for f in families:
        assert isinstance(f, Family) and f.doc and f.always == (f.name in checks.ALWAYS)
        assert set(f.in_files) | set(f.in_survey) <= set(routes.ROUTES), f.name
        for name, schema in {**f.emits, **f.tables}.items():
            assert isinstance(schema, pa.Schema), (f.name, name)
        assert all(isinstance(v, str) and v for v in f.metrics.values()), f.name


def test_declarations_say_what_the_hooks_do():
    """What a family's module emits (``out.partial``, ``out.spill``) and reads (``ctx.partial``,
    ``ctx.partial_dataset``, ``ctx.partial_parts``, ``ctx.partial_batches``, ``ctx.survey_partial``,
    ``ctx.survey_partial_parts``, ``ctx.survey_partial_batches``) is what its FAMILY
    declares, as literal names: nothing undeclared, nothing declared for show."""
    for f in checks.load_all():
        source = inspect.getsource(inspect.getmodule(f.on_driver or f.in_range))
        written = _partial_names(source, "out", ("partial", "spill"))
        read = _partial_names(source, "ctx", ("partial", "partial_dataset", "partial_parts", "partial_batches",
                                              "survey_partial", "survey_partial_parts",
                                              "survey_partial_batches"))
        assert written == set(f.emits), (f.name, written, set(f.emits))
        assert read == set(f.reads), (f.name, read, set(f.reads))


def test_every_partial_table_emitted_is_read():
    families = checks.load_all()
    emitted = {n for f in families for n in f.emits} | {n for r in routes.ROUTES.values() for n in r.emits} \
        | set(survey.EMITS) | set(scan.EMITS)
    read = {n for f in families for n in f.reads} | ENGINE_READS
    assert emitted - read == set(), "partial tables nothing reads: " + ", ".join(sorted(emitted - read))
    assert read - emitted == set(), "partial tables read but never emitted: " + ", ".join(sorted(read - emitted))


def test_the_engine_names_no_family():
    """plan, survey, scan, context, tasks and job read families only through the registry: no family's module, no
    family's partial table by name."""
    names = set(checks.FAMILIES + checks.ALWAYS)
    for module in ("plan", "survey", "scan", "context", "tasks", "job", "routes"):
        source = (AUDIT / f"{module}.py").read_text(encoding="utf-8")
        tree = ast.parse(source)
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.module:
                assert not any(node.module.endswith(f"checks.{n}") for n in names), (module, node.module)
                if node.module.endswith("checks"):
                    assert not {a.name for a in node.names} & names, (module, [a.name for a in node.names])
            if isinstance(node, ast.Constant) and isinstance(node.value, str):
                prefix = node.value.split(".", 1)[0]
                assert not ("." in node.value and prefix in names), (module, node.value)


def test_the_presentation_names_no_check():
    """report.py, groups.py and verdict.py render what the families and checks declare (views, sections, plots,
    ranks, groupings, roles): no check id of the catalogue, nor a family's ``family.`` prefix, in any string of
    theirs (f-string pieces and docstrings too)."""
    import re

    from jobs.audit.findings import CHECKS

    checks.load_all()
    ids = sorted(CHECKS, key=len, reverse=True)
    assert len(ids) > 90
    named = re.compile(r"(?<![\w.])(" + "|".join(map(re.escape, ids)) + r")(?![\w])")
    prefixes = {f"{c.family}." for c in CHECKS.values()}
    for module in ("report", "groups", "verdict"):
        tree = ast.parse((AUDIT / f"{module}.py").read_text(encoding="utf-8"))
        strings = [n.value for n in ast.walk(tree) if isinstance(n, ast.Constant) and isinstance(n.value, str)]
        assert len(strings) > 20, module
        found = sorted({m.group(1) for s in strings for m in named.finditer(s)})
        assert not found, f"jobs/audit/{module}.py names checks: {found}"
        assert not [s for s in strings if s in prefixes], module


def test_what_the_presentation_reads_is_declared():
    """The roles the verdict and the report look checks up by are each declared, the one-check roles by one check;
    the detail tables the report shows are tables their families declare, each view's columns in the table."""
    from jobs.audit.checks import the_check, with_role
    from jobs.audit.findings import ROLES

    families = checks.load_all()
    for role in ROLES:
        assert with_role(role), role
    for role in ("start_blocker", "cut", "lost_after_cut", "unindexed", "damaged_message", "dispatch_stall",
                 "audit_failed"):
        the_check(role)
    views = {name: (f, v) for f in families for name, v in f.views.items()}
    assert set(views) == {"lag", "transactions", "delays", "dlq", "segments"}
    for name, (f, v) in views.items():
        assert {c for c, _ in v.columns} <= set(f.tables[name].names), name
    orders = [v.order for _, v in views.values()]
    assert len(set(orders)) == len(orders)
    ranked = [f.rank for f in families if f.rank is not None]
    assert len(set(ranked)) == len(ranked)


# ------------------------------------------------------------------------------- the engine names no queue kind

#: jobs/audit's shared engine: it asks the queue model (store_format.queues: its backends, Dispatch) and the families
#: for anything a queue kind decides (issue 39); the families, and the report's words about their findings, may name
#: what they are about
ENGINE = ("__init__", "__main__", "buckets", "context", "contract", "groups", "inputs", "job", "kept", "plan", "routes",
          "scan", "state", "survey", "tasks", "terminal")
QUEUE_KINDS = ("lmq", "batch", "rocksdb", "compaction")
#: the names of the store layer that say a kind (store_format.layout's and store_format.queues')
KIND_NAMES = {"LMQ_PREFIX", "BATCH_CQ_DIR", "BATCH_CQ_UNIT", "QUEUE_TYPE_BATCH", "BATCH", "ROCKSDB", "COMPACTION",
              "holds_copies"}
#: Arrow's record batches, and the rows a streamed consumerOffset.json is read by (store_format.config), which are no
#: queue's
ARROW_BATCHES = {"batch", "batches", "RecordBatch", "to_batches", "from_batches", "table_batch", "batch_size",
                 "write_batch", "get_batch", "OFFSET_BATCH_ROWS"}
#: the metadata table of lmqConsumerOffset.json: a config file (context.py merges its offsets), not a queue
NO_QUEUE_STRINGS = {"lmq_consumer_offsets"}


def _words(name: str) -> set[str]:
    """The lower-case words of an identifier or a string (snake_case, camelCase, dotted, spaced)."""
    import re

    return {w.lower() for w in re.findall(r"[A-Z]+(?![a-z])|[A-Z]?[a-z]+|[0-9]+", name)}


def kind_names(source: str) -> list[str]:
    """Where ``source`` names a queue kind: a string that is no docstring, an identifier (a name, an attribute, an
    import, a definition, a keyword) with a kind among its words, or a store-layer name of a kind."""
    tree = ast.parse(source)
    docstrings = {id(n.body[0].value) for n in ast.walk(tree)
                  if isinstance(n, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and n.body
                  and isinstance(n.body[0], ast.Expr) and isinstance(n.body[0].value, ast.Constant)}
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            if id(node) not in docstrings and node.value not in NO_QUEUE_STRINGS and \
                    _words(node.value) & set(QUEUE_KINDS):
                found.append(f"line {node.lineno}: {node.value!r}")
            continue
        names = [node.id] if isinstance(node, ast.Name) else [node.attr] if isinstance(node, ast.Attribute) else \
            [a.name for a in node.names] + [a.asname for a in node.names if a.asname] \
            if isinstance(node, (ast.Import, ast.ImportFrom)) else \
            [node.name] if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) else \
            [node.arg] if isinstance(node, (ast.arg, ast.keyword)) and node.arg else []
        for name in names:
            if name in KIND_NAMES or (name not in ARROW_BATCHES and _words(name) & set(QUEUE_KINDS)):
                found.append(f"line {getattr(node, 'lineno', '?')}: {name}")
    return sorted(found, key=lambda f: int(f.split(":")[0].split()[1]))


def test_no_engine_module_names_a_queue_kind():
    """The engine serves every queue folder alike (routes.py: one route per folder from the backends' views), and a
    family asks the broker's Dispatch which messages get a unit where and which units are copies: the consumequeue
    family too, which checks every unit of its folder whatever its backend."""
    named = {m: kind_names((AUDIT / f"{m.replace('.', '/')}.py").read_text(encoding="utf-8"))
             for m in (*ENGINE, "checks.consumequeue")}
    assert not {m: n for m, n in named.items() if n}
    assert set(ENGINE) | {"findings", "report", "resend", "verdict"} == {p.stem for p in AUDIT.glob("*.py")}


def test_the_kind_detector_finds_each_way_of_naming_one():
    found = kind_names('"""the doc of a batch queue"""\nfrom store_format.queues import BATCH\nx = L.LMQ_PREFIX\n'
                       'y = "survey.batch_files"\ndef _rocksdb_view(compactionTopic): pass\nz = f(isLmq=1)\n'
                       'for batch in t.to_batches(): pa.RecordBatch\n')
    assert found == ["line 2: BATCH", "line 3: LMQ_PREFIX", "line 4: 'survey.batch_files'", "line 5: _rocksdb_view",
                     "line 5: compactionTopic", "line 6: isLmq"], found
