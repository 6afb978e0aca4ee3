"""The engine's modules import one way: no module reaches, directly or around a circle, one
that imports it, not even for type checking or from inside a function. (The protocols in
``turn/_turn_plan.TurnHost`` and ``host/_host.InstanceHost`` are what made that possible.)

And its rooms keep their order: the top imports no room; a room imports the top and the rooms
below it in the list ``harness/__init__``'s docstring writes down, those only through their
``__init__``.

Modules are named here as in the tree, ``harness.turn._turn`` for ``think_server.harness.turn._turn``:
only imports by the qualified name count (``tests/test_packaging.py`` fails on any of the bare one)."""

from __future__ import annotations

import ast
import re
from pathlib import Path

from think_server import harness

QUALIFIED = "think_server."  # what every import of the engine starts with
ROOT = Path(harness.__file__).parent
README = Path(__file__).parents[2] / "README.md"


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
                name = node.module or ""
                target = name.removeprefix(QUALIFIED) if name.startswith(QUALIFIED) else ""
            if target.startswith("harness"):
                found.add(target)
        elif isinstance(node, ast.Import):
            found.update(a.name.removeprefix(QUALIFIED) for a in node.names
                         if a.name.startswith(f"{QUALIFIED}harness"))
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


def _written_order() -> list[str]:
    """The rooms as ``harness/__init__``'s docstring lists them, lowest first."""
    listed = re.findall(r"^    ([a-z_]+)/ ", harness.__doc__ or "", re.MULTILINE)
    return list(reversed(listed))


def _room_of(module: str) -> str:
    """"turn" for harness.turn and harness.turn._turn; "" for a module of the top."""
    parts = module.split(".")
    return parts[1] if len(parts) > 2 or (len(parts) == 2 and not parts[1].startswith("_")) else ""


def _violations(graph: dict[str, set[str]], order: list[str]) -> list[str]:
    """Every import that breaks the rooms' order (``order`` lowest first), said in words."""
    rank = {room: i for i, room in enumerate(order)}
    found: list[str] = []
    for module, targets in sorted(graph.items()):
        if module == "harness":  # the public surface imports the top and the rooms' __init__s
            found += [f"harness imports {t}, inside {_room_of(t)}/" for t in sorted(targets)
                      if _room_of(t) and t != f"harness.{_room_of(t)}"]
            continue
        room = _room_of(module)
        if room and room not in rank:
            found.append(f"{module} is in {room}/, which the written order does not list")
            continue
        for target in sorted(targets):
            to = _room_of(target)
            if target == "harness":
                found.append(f"{module} imports the public surface (harness)")
            elif not to:
                continue  # the top: every room may import it
            elif not room:
                found.append(f"{module}, of the top, imports {target} (the top imports no room)")
            elif to == room:
                if target == f"harness.{room}" and module != target:
                    found.append(f"{module} imports its own room's __init__ ({target})")
            elif to not in rank:
                found.append(f"{module} imports {target}, in {to}/, which the written order does not list")
            elif rank[to] > rank[room]:
                found.append(f"{module} imports {target}: {to}/ is above {room}/")
            elif target != f"harness.{to}":
                found.append(f"{module} imports {target}, inside {to}/: import harness.{to} instead")
    return found


def test_the_engine_has_no_import_circle() -> None:
    graph = _graph()
    assert "harness.turn._turn" in graph and "harness.providers._openai" in graph
    assert _cycle(graph) is None, " -> ".join(_cycle(graph) or [])


def test_the_written_order_names_every_room_once() -> None:
    rooms = sorted(p.parent.name for p in ROOT.glob("*/__init__.py"))
    order = _written_order()
    assert len(order) == len(set(order)) and sorted(order) == rooms, (order, rooms)
    assert order[0] == "providers" and order[-1] == "host"


def test_the_rooms_import_in_their_written_order() -> None:
    assert _violations(_graph(), _written_order()) == []


def test_the_readme_layout_lists_the_rooms_in_the_same_order() -> None:
    layout = README.read_text().split("## The layout", 1)[1].split("\n## ", 1)[0]
    listed = re.findall(r"^\| `harness/([a-z_]+)/` \|", layout, re.MULTILINE)
    assert listed == list(reversed(_written_order()))


def test_the_circle_check_sees_one() -> None:
    assert _cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]


def test_the_order_check_sees_each_kind_of_wrong_import() -> None:
    order = ["memory", "turn", "session"]
    clean = {
        "harness": {"harness._clock", "harness.session"},
        "harness._clock": set(),
        "harness._tools": {"harness._clock"},
        "harness.memory": {"harness.memory._history"},
        "harness.memory._history": {"harness._clock"},
        "harness.turn._turn": {"harness.turn._plan", "harness.memory", "harness._tools"},
        "harness.session._session": {"harness.turn", "harness.memory", "harness.session._pending"},
    }
    assert _violations(clean, order) == []

    def wrong(module: str, target: str) -> list[str]:
        return _violations({**clean, module: clean.get(module, set()) | {target}}, order)

    assert wrong("harness.session._session", "harness.turn._turn") == [
        "harness.session._session imports harness.turn._turn, inside turn/: import harness.turn instead"]
    assert wrong("harness.turn._turn", "harness.session") == [
        "harness.turn._turn imports harness.session: session/ is above turn/"]
    assert wrong("harness.memory._history", "harness.turn._turn") == [
        "harness.memory._history imports harness.turn._turn: turn/ is above memory/"]
    assert wrong("harness._tools", "harness.memory") == [
        "harness._tools, of the top, imports harness.memory (the top imports no room)"]
    assert wrong("harness.turn._turn", "harness.turn") == [
        "harness.turn._turn imports its own room's __init__ (harness.turn)"]
    assert wrong("harness.turn._turn", "harness") == ["harness.turn._turn imports the public surface (harness)"]
    assert wrong("harness", "harness.turn._turn") == ["harness imports harness.turn._turn, inside turn/"]
    assert wrong("harness.schedules._firing", "harness._clock") == [
        "harness.schedules._firing is in schedules/, which the written order does not list"]
