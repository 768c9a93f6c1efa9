"""DESIGN "Layout and boundaries": the import direction, checked with `ast` over the modules that exist.

Why: the context engine is replayed over thousands of stored sessions and used from any notebook, so it
must stay pure (standard library only); adapters (store, provider, tools) must not pull in the UI or the
loop; and nothing but the magics and the agent kernel (and users' notebooks) may import the UI, so the
engine and the store work headless. Every import statement is read — module level and inside functions — so
a lazy import cannot slip a dependency in unnoticed.
"""

from __future__ import annotations

import ast
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "mxclaw_nb"
SKIP_PARTS = {"workspace"}  # the demo project the agent edits, not part of the product's code
UI_PREFIXES = ("mxclaw_nb.widgets", "mxclaw_nb.notebook")
UI_LIBRARIES = ("IPython", "ipywidgets")
# The pure core: the engine, message shapes and the text policy (SPEC L7) that the sent form applies.
CORE = ("mxclaw_nb.context", "mxclaw_nb.messages", "mxclaw_nb.text_policy")
# Documented exceptions: (importing module, imported module), all lazy (inside a function).
# - the package's IPython extension hook delegates to the magics (DESIGN: __init__ holds load_ipython_extension);
ALLOWED_LAZY_UI = {
    ("mxclaw_nb", "mxclaw_nb.notebook.magics"),
}


@dataclass(frozen=True)
class Import:
    module: str  # importing module, dotted
    target: str  # imported module, dotted and resolved
    lazy: bool  # inside a function
    line: int


def module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def is_package_module(dotted: str) -> bool:
    rel = Path(*dotted.split("."))
    return (PACKAGE.parent / rel).with_suffix(".py").is_file() or (PACKAGE.parent / rel / "__init__.py").is_file()


def imports_of(path: Path) -> list[Import]:
    """Every import in a file, relative ones resolved, `from pkg import mod` resolved to `pkg.mod`."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    me = module_name(path)
    package = me if path.name == "__init__.py" else me.rpartition(".")[0]
    lazy_nodes = {id(n) for f in ast.walk(tree) if isinstance(f, (ast.FunctionDef, ast.AsyncFunctionDef))
                  for n in ast.walk(f)}
    # `if TYPE_CHECKING:` imports never run either: count them as lazy (they still count as dependencies)
    lazy_nodes |= {id(n) for f in ast.walk(tree) if isinstance(f, ast.If) and "TYPE_CHECKING" in ast.unparse(f.test)
                   for n in ast.walk(f)}
    out: list[Import] = []
    for node in ast.walk(tree):
        lazy = id(node) in lazy_nodes
        if isinstance(node, ast.Import):
            out += [Import(me, a.name, lazy, node.lineno) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                source = ".".join(base + ([node.module] if node.module else []))
            else:
                source = node.module or ""
            for alias in node.names:
                candidate = f"{source}.{alias.name}"
                target = candidate if source.startswith("mxclaw_nb") and is_package_module(candidate) else source
                out.append(Import(me, target, lazy, node.lineno))
    return out


def product_files() -> list[Path]:
    return sorted(p for p in PACKAGE.rglob("*.py") if not SKIP_PARTS & set(p.parts))


def all_imports() -> list[Import]:
    return [imp for path in product_files() for imp in imports_of(path)]


def within(target: str, prefixes: tuple[str, ...]) -> bool:
    return any(target == p or target.startswith(p + ".") for p in prefixes)


def is_ui_module(name: str) -> bool:
    # The agent kernel (SPEC N4) is notebook surface too: it drives the magics.
    return within(name, ("mxclaw_nb.widgets", "mxclaw_nb.kernel")) or name.startswith("mxclaw_nb.notebook")


def test_the_walker_sees_the_package() -> None:
    """Guard: the checks below look at real files (a broken walker would make them vacuous)."""
    names = {module_name(p) for p in product_files()}
    assert {"mxclaw_nb.context.pipeline", "mxclaw_nb.messages"} <= names
    pipeline = [i.target for i in imports_of(PACKAGE / "context" / "pipeline.py")]
    assert "mxclaw_nb.context.summary" in pipeline and "mxclaw_nb.messages" in pipeline


def test_context_and_messages_import_only_the_standard_library_and_themselves() -> None:
    """DESIGN: context/ is PURE (stdlib only, no I/O libraries, no pandas/IPython); messages.py likewise."""
    core = [i for i in all_imports() if within(i.module, CORE)]
    assert core
    bad = [i for i in core if not (within(i.target, (*CORE, "__future__"))
                                   or i.target.split(".")[0] in sys.stdlib_module_names)]
    assert not bad, "\n".join(f"{i.module}:{i.line} imports {i.target}" for i in bad)


def test_the_request_record_is_engine_data() -> None:
    """S1/N3: the one request record (mxclaw_nb.records) that flows loop -> store -> widgets -> replay imports the
    pure core and the standard library only, so every side can use it; its stored form lives in store/."""
    found = [i for i in all_imports() if i.module == "mxclaw_nb.records"]
    assert found
    bad = [i for i in found if not (within(i.target, (*CORE, "__future__"))
                                    or i.target.split(".")[0] in sys.stdlib_module_names)]
    assert not bad, "\n".join(f"{i.module}:{i.line} imports {i.target}" for i in bad)


def test_core_does_not_do_io_or_read_the_clock() -> None:
    """DESIGN: the context engine has no clock and no I/O (pure functions: messages in, view out)."""
    forbidden = ("os", "io", "pathlib", "time", "datetime", "socket", "subprocess", "random", "sqlite3", "shutil",
                 "tempfile", "urllib", "http", "threading", "logging")
    core = [i for i in all_imports() if within(i.module, CORE)]
    bad = [i for i in core if i.target.split(".")[0] in forbidden]
    assert not bad, "\n".join(f"{i.module}:{i.line} imports {i.target}" for i in bad)


def adapter(name: str) -> bool:
    return within(name, ("mxclaw_nb.store", "mxclaw_nb.provider", "mxclaw_nb.tools", "mxclaw_nb.demo"))


def test_adapters_do_not_import_ui_or_the_loop() -> None:
    """DESIGN: adapters (store, provider, tools) import the core only: never widgets, magics, IPython, the loop."""
    found = [i for i in all_imports() if adapter(i.module)]
    assert found, "no adapter modules found"
    bad = [i for i in found if is_ui_module(i.target) or within(i.target, UI_LIBRARIES)
           or within(i.target, ("mxclaw_nb.loop", "mxclaw_nb.agent"))]
    assert not bad, "\n".join(f"{i.module}:{i.line} imports {i.target}" for i in bad)


def test_nothing_imports_the_ui_except_the_ui() -> None:
    """DESIGN: UI (widgets, magics) may import anything; nothing imports UI (users' notebooks aside)."""
    bad = []
    for i in all_imports():
        if is_ui_module(i.module) or not (is_ui_module(i.target) or within(i.target, UI_LIBRARIES)):
            continue
        if i.lazy and (i.module, i.target) in ALLOWED_LAZY_UI:
            continue
        bad.append(f"{i.module}:{i.line} imports {i.target}{' (lazily)' if i.lazy else ''}")
    assert not bad, "\n".join(bad)


@pytest.mark.parametrize(("module", "target"), sorted(ALLOWED_LAZY_UI))
def test_documented_exceptions_are_still_real_and_lazy(module: str, target: str) -> None:
    """Each allowed exception must still exist and stay inside a function (stale entries fail)."""
    matches = [i for i in all_imports() if i.module == module and i.target == target]
    assert matches, f"{module} no longer imports {target}: remove it from ALLOWED_LAZY_UI"
    assert all(i.lazy for i in matches), f"{module} imports {target} at module level"


def test_only_magics_import_ipython() -> None:
    """DESIGN: magics is the only module importing IPython (widgets use ipywidgets, never IPython directly)."""
    bad = [i for i in all_imports() if within(i.target, ("IPython",)) and not i.module.startswith("mxclaw_nb.notebook")]
    assert not bad, "\n".join(f"{i.module}:{i.line} imports {i.target}" for i in bad)


def test_c0_stages_are_listed_only_in_the_registry() -> None:
    """One stage registry (context/stages.py): no other module spells out the list of stages."""
    import re

    listing = re.compile(r'"unchanged",\s*"micro",\s*"summary"')
    offenders = [str(p.relative_to(PACKAGE)) for p in PACKAGE.rglob("*.py")
                 if p.name != "stages.py" and listing.search(p.read_text(encoding="utf-8"))]
    assert not offenders, f"stage lists outside context/stages.py: {offenders}"


def test_s1_sql_lives_only_in_the_store() -> None:
    """SQL statements are written only inside store/ (the rest asks the store by method)."""
    import ast
    import re

    statement = re.compile(r"^\s*(SELECT\b.*\bFROM\b|INSERT INTO\b|UPDATE \w+ SET\b|DELETE FROM\b"
                           r"|(CREATE|ALTER|DROP) (TABLE|VIEW|INDEX|SEQUENCE)\b)", re.DOTALL)
    offenders = []
    for path in PACKAGE.rglob("*.py"):
        rel = path.relative_to(PACKAGE)
        if rel.parts[0] == "store":
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.JoinedStr):  # f"SELECT {cols} FROM ...": the literal parts around the holes
                text = "{}".join(v.value if isinstance(v, ast.Constant) else "" for v in node.values)
            elif isinstance(node, ast.Constant) and isinstance(node.value, str):
                text = node.value
            else:
                continue
            if statement.match(text):
                offenders.append(f"{rel}:{node.lineno}")
    assert not offenders, f"SQL outside store/: {offenders}"


def test_l1_the_loop_depends_on_protocols_not_on_adapters() -> None:
    """loop.py names the store, provider and tool registry only through Protocols (StoreLike, ProviderLike,
    ToolsLike, ClassifiedFailure); it imports the engine, messages, the tables and the tools' data carriers."""
    import ast

    tree = ast.parse((PACKAGE / "loop.py").read_text(encoding="utf-8"))
    imported: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module == "mxclaw_nb":  # from mxclaw_nb import events
            imported |= {f"mxclaw_nb.{a.name}" for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module:
            imported.add(node.module)
        elif isinstance(node, ast.Import):
            imported |= {a.name for a in node.names}
    ours = {m for m in imported if m.startswith("mxclaw_nb")}
    allowed = {"mxclaw_nb.events", "mxclaw_nb.context", "mxclaw_nb.context.lineage", "mxclaw_nb.messages",
               "mxclaw_nb.tools.base", "mxclaw_nb.records",
               "mxclaw_nb.settings",  # a table, not an adapter (N1: TurnContext.settings)
               "mxclaw_nb.summary_call",  # C11: the loop's summary call, shared with replay (core + records only)
               "mxclaw_nb.truncation"}  # T3: a report of a cut prompt, judged on the view (core + records only)
    assert ours <= allowed, f"loop.py imports adapters: {sorted(ours - allowed)}"
    for module in ("summary_call.py", "truncation.py"):
        shared = {i.target for i in imports_of(PACKAGE / module) if i.target.startswith("mxclaw_nb")}
        assert all(t.startswith(("mxclaw_nb.context", "mxclaw_nb.messages", "mxclaw_nb.records"))
                   for t in shared), (module, shared)


# The tables every layer may read: the settings table, event names, the request record, the colour palette,
# the secret registry (L6: every edge that writes text redacts through it), the offline tokenizers (T2: the
# provider's counter, the demo server's usage and analysis count alike) and the version. Core + stdlib only.
TABLES = ("mxclaw_nb.settings", "mxclaw_nb.events", "mxclaw_nb.records", "mxclaw_nb.palette", "mxclaw_nb.secrets",
          "mxclaw_nb.tokenizers", "mxclaw_nb.version")
ADAPTERS = ("mxclaw_nb.store", "mxclaw_nb.provider", "mxclaw_nb.tools", "mxclaw_nb.demo")


def package_of(name: str) -> str:
    return next((a for a in ADAPTERS if within(name, (a,))), name)


def test_an_adapter_package_imports_only_the_core_the_tables_and_itself() -> None:
    """DESIGN "Layout and boundaries": provider, tools, store and demo import the core, the tables and their own
    package only (no adapter reaches into another; a shared helper belongs to the core or the tables)."""
    bad = [i for i in all_imports() if adapter(i.module) and i.target.startswith("mxclaw_nb")
           and not within(i.target, (*CORE, *TABLES, package_of(i.module)))]
    assert not bad, "\n".join(f"{i.module}:{i.line} imports {i.target}" for i in bad)


def test_the_tables_import_only_the_core_and_each_other() -> None:
    """The shared tables sit just above the core: anything may read them, they read nothing outward."""
    bad = [i for i in all_imports() if within(i.module, TABLES) and i.target.startswith("mxclaw_nb")
           and not within(i.target, (*CORE, *TABLES))]
    assert not bad, "\n".join(f"{i.module}:{i.line} imports {i.target}" for i in bad)


def test_analysis_does_not_import_the_package_face() -> None:
    """The package root holds the IPython hooks; analysis reads the version from its own module."""
    bad = [i for i in all_imports() if within(i.module, ("mxclaw_nb.analysis",)) and i.target == "mxclaw_nb"]
    assert not bad, "\n".join(f"{i.module}:{i.line} imports the package root" for i in bad)


def closure(start: str) -> set[str]:
    """Every package module reachable from `start` through module-level imports (lazy ones run later, if ever)."""
    graph: dict[str, set[str]] = {}
    for i in all_imports():
        if not i.lazy and i.target.startswith("mxclaw_nb"):
            parts = i.target.split(".")  # importing a.b.c runs a/__init__ and a/b/__init__ first
            graph.setdefault(i.module, set()).update(".".join(parts[:n]) for n in range(2, len(parts) + 1))
    seen, todo = set(), [start]
    while todo:
        m = todo.pop()
        if m not in seen:
            seen.add(m)
            todo += graph.get(m, ())
    return seen


def test_l1_importing_the_loop_loads_no_adapter_code() -> None:
    """The loop types against the tools' data carriers (tools.base): importing it must not load the sandbox
    prober, the store, the provider or the demo (tools.policy's forbidden list is plain data)."""
    reached = closure("mxclaw_nb.loop")
    assert {"mxclaw_nb.tools", "mxclaw_nb.tools.base"} <= reached
    bad = sorted(m for m in reached if adapter(m) and m not in {"mxclaw_nb.tools", "mxclaw_nb.tools.base",
                                                                 "mxclaw_nb.tools.policy"})
    assert not bad, f"importing the loop loads {bad}"


def test_no_module_level_import_cycles() -> None:
    """DESIGN "Layout and boundaries": no cycles among module-level imports (a registry whose plugins import it
    must not import them back; the package imports them instead)."""
    import graphlib

    graph: dict[str, set[str]] = {}
    for i in all_imports():
        if not i.lazy and i.target.startswith("mxclaw_nb") and i.target != i.module:
            graph.setdefault(i.module, set()).add(i.target)
    try:
        tuple(graphlib.TopologicalSorter(graph).static_order())
    except graphlib.CycleError as exc:
        pytest.fail(f"import cycle: {' -> '.join(exc.args[1])}")
