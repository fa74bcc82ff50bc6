"""The house: rootgrep's modules import one another one way only (no circle, every function-
level import counted too), and the index knows nothing of the layers above it."""

from __future__ import annotations

import ast
from pathlib import Path

import rootgrep

PACKAGE = Path(rootgrep.__file__).parent
# what ``index/`` may never import: the layers above it (the tools' logic, their contracts,
# the MCP wiring, the command line)
ABOVE_INDEX = ("rootgrep.service", "rootgrep.tools", "rootgrep.server", "rootgrep.cli")


def module_names() -> dict[str, Path]:
    """Every module of the package by its dotted name (a package by its own name)."""
    out = {}
    for path in PACKAGE.rglob("*.py"):
        parts = ("rootgrep", *path.relative_to(PACKAGE).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join(parts)] = path
    return out


def imports_of(name: str, path: Path, modules: dict[str, Path]) -> set[str]:
    """The package's modules ``name`` imports, anywhere in it (a function's imports, and
    those only a type checker reads, included). ``from P import m`` of a module ``m`` is an
    import of ``P.m`` (not of ``P``'s ``__init__``); of a name, an import of ``P``."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - node.level + 1]
                source = ".".join([*base, *([node.module] if node.module else [])])
            else:
                source = node.module or ""
            for a in node.names:
                sub = f"{source}.{a.name}"
                out.add(sub if sub in modules else source)
    return {m for m in out if m in modules and m != name}


def import_graph() -> dict[str, set[str]]:
    modules = module_names()
    return {name: imports_of(name, path, modules) for name, path in modules.items()}


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The graph's circles: each strongly connected component of more than one module
    (Tarjan's), sorted, or a module importing itself."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in sorted(graph[v]):
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
            if len(comp) > 1 or v in graph[v]:
                out.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return sorted(out)


def test_the_import_graph_has_no_cycle() -> None:
    graph = import_graph()
    assert len(graph) > 40 and graph["rootgrep.index.store"]  # (the walk found the package)
    assert cycles(graph) == []


def test_the_cycle_finder_finds_a_cycle() -> None:
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}, "e": {"e"}}
    assert cycles(graph) == [["a", "b", "c"], ["e"]]


def test_the_index_imports_nothing_above_it() -> None:
    graph = import_graph()
    wrong = {
        (name, dep)
        for name, deps in graph.items()
        if name.startswith("rootgrep.index.")
        for dep in deps
        if dep.startswith(ABOVE_INDEX)
    }
    assert wrong == set()
