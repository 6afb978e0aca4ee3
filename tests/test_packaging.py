"""One import name: the four folders are installed as ``think_server.app``, ``.harness``,
``.protocol`` and ``.storage``, and nothing, in them or in the tests, imports them by their bare
names. A checkout still has the bare folders importable from its root, so a slip (``from harness
import Agent``, ``python -m app``) would run, as a second copy of every module it reaches, and only a
check like this one sees it.

The four import downward, in the order ``think_server/__init__``'s docstring gives (protocol,
storage, harness, app), each another only through its ``__init__``; none imports the top
``think_server``, which is the users' surface and imports them. Inside storage, a backend's folder
imports the top of storage (its modules) and nothing of another backend, and the top names a
backend in one module only, the one that makes the default store. pyproject lists every package
folder, and think_server/'s symlinks point at the folders. (The wheel itself: tests/test_wheel.py.)

``think_server/testing/`` (the kit users test their agents with) is a real folder of the top, for
users too: it imports the four through their ``__init__``, and nothing of the project imports it (the
tests do).
"""

from __future__ import annotations

import ast
import os
import re
import sys
import tomllib
from pathlib import Path

import pytest

import think_server
from think_server import app, harness

ROOT = Path(__file__).resolve().parent.parent
TOP = "think_server"
#: The subpackages, lowest first: each may import those before it.
ORDER = ("protocol", "storage", "harness", "app")
#: The packages that live in think_server/ itself, above the four, for users (none of the four imports them).
ABOVE = ("testing",)
BARE = frozenset(ORDER)


def _sources(*folders: str) -> list[Path]:
    return sorted(p for folder in folders for p in (ROOT / folder).rglob("*.py") if "node_modules" not in p.parts)


def _package_of(rel: Path) -> list[str]:
    """The dotted package a file's relative imports start from: think_server.harness.turn for
    harness/turn/_turn.py (and for harness/turn/__init__.py); tests.app for tests/app/x.py."""
    parts = list(rel.parent.parts)
    return parts if parts[0] in (TOP, "tests") else [TOP, *parts]


def _imports(rel: Path, source: str) -> list[tuple[int, str, str]]:
    """Every import in a file (at the top, in a function or under TYPE_CHECKING) as (line, the
    module it names, how it was written), relative ones made absolute."""
    found: list[tuple[int, str, str]] = []
    for node in ast.walk(ast.parse(source, str(rel))):
        if isinstance(node, ast.Import):
            found += [(node.lineno, a.name, f"import {a.name}") for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            written = f"from {'.' * node.level}{node.module or ''} import {', '.join(a.name for a in node.names)}"
            if node.level:
                base = _package_of(rel)
                base = base[: len(base) - (node.level - 1)] if node.level > 1 else base
                found.append((node.lineno, ".".join([*base, *([node.module] if node.module else [])]), written))
            else:
                found.append((node.lineno, node.module or "", written))
    return found


def bare_imports(rel: Path, source: str) -> list[str]:
    """Imports of app, harness, protocol or storage by their bare names, in the file at ``rel``."""
    return [f"{rel}:{line}: {written}" for line, module, written in _imports(rel, source)
            if module.split(".")[0] in BARE]


def layer_violations(rel: Path, source: str) -> list[str]:
    """What the module at ``rel``, one of the four's, imports that it may not: the top, a package
    above its own, or another package's insides."""
    own = rel.parts[0]
    found: list[str] = []
    for line, module, written in _imports(rel, source):
        parts = module.split(".")
        if parts[0] != TOP:
            continue
        where = f"{rel}:{line}: {written}"
        if len(parts) == 1:
            found.append(f"{where}: imports the top {TOP} (it imports {own}; import {TOP}.<package>)")
        elif parts[1] not in ORDER:
            found.append(f"{where}: {module} is none of {TOP}'s packages")
        elif parts[1] == own:
            continue  # its own package, as deep as it likes
        elif ORDER.index(parts[1]) > ORDER.index(own):
            found.append(f"{where}: {parts[1]} is above {own} (the order is {' <- '.join(ORDER)})")
        elif len(parts) > 2:
            found.append(f"{where}: inside {parts[1]}; import {TOP}.{parts[1]} instead")
    return found


#: The one module of storage's top that may import a backend: where the default store is made.
DEFAULT_STORE = Path("storage/_default.py")


def storage_backends() -> list[str]:
    """The backend folders of storage (each a package below its top)."""
    return sorted(init.parent.name for init in (ROOT / "storage").glob("*/__init__.py"))


def storage_violations(rel: Path, source: str) -> list[str]:
    """What a module of storage imports across its rooms: a backend's module another backend, or the
    top's ``__init__`` (which imports the backends: a circle); a module of the top, but
    :data:`DEFAULT_STORE`, any backend."""
    backends = storage_backends()
    own = rel.parts[1] if len(rel.parts) > 2 else None  # storage/<backend>/x.py
    found: list[str] = []
    for line, module, written in _imports(rel, source):
        parts = module.split(".")
        if parts[:2] != [TOP, "storage"]:
            continue
        where = f"{rel}:{line}: {written}"
        named = parts[2] if len(parts) > 2 and parts[2] in backends else None
        if own is not None:
            if named is not None and named != own:
                found.append(f"{where}: {own} imports another backend, {named}")
            elif len(parts) == 2:
                found.append(f"{where}: {own} imports the top's __init__, which imports the backends "
                             "(import the top's own modules)")
        elif named is not None and rel != DEFAULT_STORE:
            found.append(f"{where}: the top of storage names the backend {named} outside {DEFAULT_STORE}")
    return found


def test_nothing_imports_the_four_packages_by_their_bare_names() -> None:
    files = _sources(*ORDER, TOP, "tests")
    assert ROOT / "harness/turn/_turn.py" in files and ROOT / "tests/conftest.py" in files
    assert [line for path in files for line in bare_imports(path.relative_to(ROOT), path.read_text())] == []


def test_nothing_runs_the_server_as_python_m_app() -> None:
    """`python -m app` would run from a checkout's root too: the bare copy of everything."""
    texts = {path: path.read_text() for path in _sources("tests") if path != Path(__file__).resolve()}
    for name in ("Makefile", "Dockerfile", "README.md", "docker-compose.yml", ".ci/run"):
        texts[ROOT / name] = (ROOT / name).read_text()
    pattern = re.compile(r"""-m["']?,?\s*["']?(app|harness|protocol|storage)\b(?![-\w])""")
    found = [f"{path.relative_to(ROOT)}: {m[0]}" for path, text in texts.items() for m in pattern.finditer(text)]
    assert found == []
    assert pattern.search('[sys.executable, "-m", "app", "serve"]') and pattern.search("python -m app serve")
    assert not pattern.search('"-m", "think_server", "serve"') and not pattern.search("python -m think_server.app")


def test_the_four_packages_import_downward_never_the_top() -> None:
    files = _sources(*ORDER)
    assert len(files) > 100
    assert [line for path in files for line in layer_violations(path.relative_to(ROOT), path.read_text())] == []


def above_violations(rel: Path, source: str) -> list[str]:
    """What a module of a package above the four (``think_server/testing/x.py``) imports that it may not:
    another package's insides (it uses the four as users do, through their ``__init__``), or the top."""
    found: list[str] = []
    for line, module, written in _imports(rel, source):
        parts = module.split(".")
        if parts[0] != TOP or (len(parts) > 1 and parts[1] == rel.parts[1]):
            continue
        where = f"{rel}:{line}: {written}"
        if len(parts) == 1:
            found.append(f"{where}: imports the top {TOP}, which users import (import {TOP}.<package>)")
        elif parts[1] in ORDER and len(parts) > 2:
            found.append(f"{where}: inside {parts[1]}; import {TOP}.{parts[1]} instead")
        elif parts[1] not in ORDER:
            found.append(f"{where}: {module} is none of the packages below it")
    return found


def test_the_packages_above_use_the_four_through_their_front_doors() -> None:
    files = [p for name in ABOVE for p in _sources(f"{TOP}/{name}")]
    assert ROOT / "think_server/testing/_chat.py" in files
    assert [line for path in files for line in above_violations(path.relative_to(ROOT), path.read_text())] == []
    probe = Path("think_server/testing/_probe.py")
    assert above_violations(probe, "from think_server.protocol import X\nfrom ._chat import ChatClient\n") == []
    assert above_violations(probe, "from think_server.app._wsprotocol import X\n") == [
        f"{probe}:1: from think_server.app._wsprotocol import X: inside app; import think_server.app instead"]
    assert above_violations(probe, "from think_server import Agent\n") != []
    # and the four never import them: a package that is not one of the four is refused below
    assert layer_violations(Path("app/_probe.py"), "from think_server.testing import ChatClient\n") != []
    # nor does the public surface (`import think_server` must not pull in the kit and its pytest needs),
    # and the kit's own __init__ leaves its pytest plugin out: the fixtures are in the plugin module only.
    top, kit = Path(TOP, "__init__.py"), Path(TOP, "testing", "__init__.py")
    assert not [m for _, m, _ in _imports(top, (ROOT / top).read_text()) if "testing" in m.split(".")]
    assert not [m for _, m, _ in _imports(kit, (ROOT / kit).read_text()) if m.endswith(".plugin")]


def test_storage_backends_import_the_top_and_the_top_one_backend_in_one_place() -> None:
    assert "sqlite" in storage_backends()
    files = _sources("storage")
    assert ROOT / "storage/sqlite/_db.py" in files and ROOT / DEFAULT_STORE in files
    assert [line for path in files for line in storage_violations(path.relative_to(ROOT), path.read_text())] == []


def test_the_storage_check_sees_each_kind_of_wrong_import(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sys.modules[__name__], "storage_backends", lambda: ["postgres", "sqlite"])
    backend, top = Path("storage/sqlite/_probe.py"), Path("storage/_probe.py")
    fine = ("from think_server.protocol import X\nfrom .._problems import Problem\nfrom ._db import SqliteDatabase\n"
            "from think_server.storage._store import Store\n")
    assert storage_violations(backend, fine) == []
    assert storage_violations(backend, "from ..postgres import PgStore\n") == [
        f"{backend}:1: from ..postgres import PgStore: sqlite imports another backend, postgres"]
    assert storage_violations(backend, "from think_server.storage.postgres._db import X\n") != []
    assert storage_violations(backend, "from .. import Store\n") != [], "the top's __init__: a circle"
    assert storage_violations(backend, "from think_server.storage import Store\n") != []
    assert storage_violations(top, "from ._store import Store\nfrom think_server.protocol import X\n") == []
    assert storage_violations(top, "from .sqlite import SqliteStore\n") == [
        f"{top}:1: from .sqlite import SqliteStore: the top of storage names the backend sqlite outside "
        f"{DEFAULT_STORE}"]
    assert storage_violations(top, "def f():\n    from think_server.storage.postgres import PgStore\n") != []
    assert storage_violations(DEFAULT_STORE, "from .sqlite import SqliteStore\n") == []


def test_the_checks_see_each_kind_of_wrong_import() -> None:
    def judged(where: str, source: str) -> tuple[list[str], list[str]]:
        return layer_violations(Path(where), source), bare_imports(Path(where), source)

    probe = "storage/_probe.py"
    assert judged(probe, "from think_server.protocol import X\nfrom ._db import Database\n") == ([], [])
    assert judged(probe, "from think_server.harness import Agent\n") == (
        [f"{probe}:1: from think_server.harness import Agent: harness is above storage "
         "(the order is protocol <- storage <- harness <- app)"], [])
    assert judged(probe, "def f():\n    from think_server.protocol._ids import x\n") == (
        [f"{probe}:2: from think_server.protocol._ids import x: inside protocol; import think_server.protocol instead"],
        [])
    assert judged(probe, "from think_server import Agent\n") == (
        [f"{probe}:1: from think_server import Agent: imports the top think_server "
         "(it imports storage; import think_server.<package>)"], [])
    assert judged(probe, "import think_server\n")[0] != []
    assert judged(probe, "from .. import app\n")[0] != [], "a relative import out of its package is the top"
    assert judged(probe, "from protocol import X\n") == ([], [f"{probe}:1: from protocol import X"])
    assert judged(probe, "import harness.turn\n")[1] == [f"{probe}:1: import harness.turn"]
    assert judged("tests/app/test_x.py", "from app import Settings\n")[1] != []
    assert judged("tests/app/test_x.py", "from .test_api import url\nfrom tests.app import x\n")[1] == []


def test_the_top_re_exports_the_harness_and_the_app_whole() -> None:
    assert think_server.__all__ == [*harness.__all__, *app.__all__]
    assert len(set(think_server.__all__)) == len(think_server.__all__), "no name given twice"
    for name in think_server.__all__:
        assert getattr(think_server, name) is getattr(harness if name in harness.__all__ else app, name)
    assert {"Agent", "Harness", "tool", "create_app", "Settings"} <= set(think_server.__all__)


def test_think_server_links_to_the_four_folders() -> None:
    for name in ORDER:
        link = ROOT / TOP / name
        assert link.is_symlink(), f"{TOP}/{name} is not a symlink"
        assert os.readlink(link) == f"../{name}", "relative, so that it holds in any checkout"
        assert link.resolve() == ROOT / name
    held = sorted(p.name for p in (ROOT / TOP).iterdir() if p.name != "__pycache__")
    assert held == sorted(["__init__.py", "__main__.py", "cli.py", "py.typed", *ORDER, *ABOVE])
    for name in ABOVE:
        assert (ROOT / TOP / name).is_dir() and not (ROOT / TOP / name).is_symlink(), f"{TOP}/{name} is a real folder"


def test_pyproject_lists_every_package_folder_under_its_one_name() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    tool = project["tool"]["setuptools"]
    assert tool["package-dir"] == {TOP: TOP, **{f"{TOP}.{name}": name for name in ORDER}}
    on_disk = {TOP} | {".".join([TOP, *init.parent.relative_to(ROOT).parts])
                       for name in ORDER for init in (ROOT / name).rglob("__init__.py")
                       if "node_modules" not in init.parts}
    on_disk |= {".".join(init.parent.relative_to(ROOT).parts)
                for name in ABOVE for init in (ROOT / TOP / name).rglob("__init__.py")}
    assert "think_server.testing" in on_disk
    assert "think_server.harness.turn" in on_disk
    assert sorted(tool["packages"]) == sorted(on_disk)
    assert set(project["tool"]["setuptools"]["package-data"]) <= on_disk
    assert all("py.typed" in files for files in project["tool"]["setuptools"]["package-data"].values())
    # The command line is the top's: it adds `check` (from think_server.testing) to the app's commands.
    assert project["project"]["scripts"] == {"think-server": "think_server.cli:main"}
    assert project["tool"]["mypy"]["packages"] == [TOP]


def test_the_dockerfile_copies_every_folder_the_wheel_is_built_from() -> None:
    copied = {line.split()[1].rstrip("/") for line in (ROOT / "Dockerfile").read_text().splitlines()
              if line.startswith("COPY ") and "--from" not in line}
    assert {TOP, *ORDER} <= copied


def test_the_readme_layout_names_the_import_name_and_each_folder_with_its_package() -> None:
    layout = (ROOT / "README.md").read_text().split("## The layout", 1)[1].split("\n## ", 1)[0]
    rows = dict(re.findall(r"^\| `([a-z_]+)/` \| (.*) \|$", layout, re.MULTILINE))
    assert list(rows) == [TOP, *ORDER, "tests"]
    for name in ORDER:
        assert rows[name].startswith(f"`{TOP}.{name}`"), rows[name]
    backends = re.findall(r"^\| `storage/([a-z_]+)/` \| (.*) \|$", layout, re.MULTILINE)
    assert sorted(name for name, _ in backends) == storage_backends() == ["postgres", "sqlite"]
    assert all(f"`tests/storage/{name}/`" in text for name, text in backends), "each names its own tests"
