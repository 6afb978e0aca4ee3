"""The engine's modules import one way: no module reaches, directly or around a circle, one
that imports it, not even for type checking or from inside a function. (The protocols in
``_turn.TurnHost`` and ``_host.InstanceHost`` are what made that possible.)"""

from __future__ import annotations

import ast
from pathlib import Path

import harness

ROOT = Path(harness.__file__).parent


def _module_of(path: Path) -> str:
    rel = path.relative_to(ROOT.parent).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _imports(path: Path, module: str) -> set[str]:
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - (node.level - 1)]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            if target.startswith("harness"):
                found.add(target)
        elif isinstance(node, ast.Import):
            found.update(a.name for a in node.names if a.name.startswith("harness"))
    return found


def _graph() -> dict[str, set[str]]:
    files = {_module_of(p): p for p in ROOT.rglob("*.py")}
    graph: dict[str, set[str]] = {}
    for module, path in files.items():
        # A package's __init__ only re-exports: importing "harness.providers" means its modules.
        graph[module] = {t for t in _imports(path, module) if t in files and t != module}
    return graph


def _cycle(graph: dict[str, set[str]]) -> list[str] | None:
    done: set[str] = set()
    stack: list[str] = []

    def visit(node: str) -> list[str] | None:
        if node in stack:
            return [*stack[stack.index(node):], node]
        if node in done:
            return None
        stack.append(node)
        for nxt in sorted(graph[node]):
            found = visit(nxt)
            if found:
                return found
        stack.pop()
        done.add(node)
        return None

    for node in sorted(graph):
        found = visit(node)
        if found:
            return found
    return None


def test_the_engine_has_no_import_circle() -> None:
    graph = _graph()
    assert "harness.turn._turn" in graph and "harness.providers._openai" in graph
    assert _cycle(graph) is None, " -> ".join(_cycle(graph) or [])


def test_no_module_inside_imports_the_public_api_of_its_package() -> None:
    graph = _graph()
    inside = {m: deps for m, deps in graph.items() if m not in ("harness", "harness.providers")}
    offenders = {m for m, deps in inside.items() if "harness" in deps}
    offenders |= {m for m, deps in inside.items()
                  if m.startswith("harness.providers.") and "harness.providers" in deps}
    assert not offenders


def test_the_circle_check_sees_one() -> None:
    assert _cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
