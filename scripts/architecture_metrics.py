"""Print the layout figures issue notes quote: modules, packages, import cycles, `Any` in the pure engine,
the longest functions (DESIGN: one owner per record; SPEC C0 passes).

    .venv/bin/python scripts/architecture_metrics.py [package_dir]
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path


def module_name(root: Path, path: Path) -> str:
    parts = list(path.relative_to(root.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def imports_of(tree: ast.AST, name: str, is_pkg: bool, known: set[str]) -> set[str]:
    """Module-level imports only (imports inside functions are lazy and cannot form load-time cycles)."""
    found: set[str] = set()
    body = tree.body if isinstance(tree, ast.Module) else []
    stack = list(body)
    while stack:
        node = stack.pop()
        if isinstance(node, (ast.If, ast.Try)):
            if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
                continue
            stack.extend(node.body)
            stack.extend(getattr(node, "orelse", []))
            for handler in getattr(node, "handlers", []):
                stack.extend(handler.body)
        elif isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                pkg = name if is_pkg else name.rpartition(".")[0]
                for _ in range(node.level - 1):
                    pkg = pkg.rpartition(".")[0]
                base = f"{pkg}.{base}" if base else pkg
            for alias in node.names:
                full = f"{base}.{alias.name}"
                found.add(full if full in known else base)
    return {m for m in found if m in known and m != name}


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []
    counter = [0]

    def visit(v: str) -> None:
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    sys.setrecursionlimit(10_000)
    for v in graph:
        if v not in index:
            visit(v)
    return out


def main(root: Path) -> None:
    files = sorted(p for p in root.rglob("*.py") if "resources" not in p.parts)
    names = {module_name(root, p): p for p in files}
    known = set(names)
    graph: dict[str, set[str]] = {}
    funcs: list[tuple[int, str]] = []
    any_context = 0
    for name, path in names.items():
        tree = ast.parse(path.read_text(encoding="utf-8"))
        graph[name] = imports_of(tree, name, path.name == "__init__.py", known)
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                funcs.append((node.end_lineno - node.lineno + 1, f"{name}.{node.name}"))
        if ".context" in name:
            any_context += sum(1 for n in ast.walk(tree) if isinstance(n, ast.Name) and n.id == "Any")
            any_context += sum(1 for n in ast.walk(tree) if isinstance(n, ast.Attribute) and n.attr == "Any")
    packages = sum(1 for p in files if p.name == "__init__.py")
    top = sum(1 for p in files if p.parent == root and p.name != "__init__.py")
    cyc = cycles(graph)
    print(f"modules: {len(files)}")
    print(f"packages: {packages}")
    print(f"top-level modules: {top}")
    print(f"module-level import cycles: {len(cyc)} {cyc if cyc else ''}")
    print(f"`Any` in context/: {any_context}")
    print("longest functions (lines):")
    for length, name in sorted(funcs, reverse=True)[:8]:
        print(f"  {length:4d}  {name}")


if __name__ == "__main__":
    main(Path(sys.argv[1] if len(sys.argv) > 1 else Path(__file__).resolve().parents[1] / "mxclaw_nb"))
