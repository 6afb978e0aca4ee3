"""The wheel, installed as a user installs it: one import name, ``think_server``, beside a user's own
package named ``app`` (a FastAPI project's layout), and ``think-server serve`` running an agent that
imports it.

The wheel is built offline from the files the Dockerfile copies (``pip wheel --no-build-isolation``:
the venv's setuptools, no index), into a fresh virtualenv with ``--no-deps``. That venv gets the
project's dependencies without installing them again: a ``.pth`` file adds this venv's
site-packages after its own. Python does not read the ``.pth`` files of a directory a ``.pth`` line
adds, so this venv's editable install of the checkout stays out: ``think_server`` is the wheel's.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import sysconfig
import time
import tomllib
import zipfile
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from tests.conftest import free_port

ROOT = Path(__file__).resolve().parents[1]

USER_APP = {
    "app/__init__.py": '"""The user\'s own package named app, as a FastAPI project has one."""\n',
    "app/models.py": (
        'ORDERS = {"A1": {"item": "teapot", "status": "shipped", "from": "the user\'s app.models"}}\n\n\n'
        "def find_order(order_id: str) -> dict:\n"
        "    return ORDERS[order_id]\n"
    ),
    "myagents.py": '''"""The user's agents: they import the user's app and think_server side by side."""
from app.models import find_order
from think_server import Agent, ScriptedModel, tool


@tool
def lookup_order(order_id: str) -> dict:
    """An order, from the user's own app.models.

    Args:
        order_id: The order's id.
    """
    return find_order(order_id)


SCRIPT = {"rules": [{"match": "*", "steps": [
    [{"tool_call": {"name": "lookup_order", "input": {"order_id": "A1"}}}],
    [{"text": ["Order: {result}"]}],
]}]}

agents = {"helper": Agent(model=ScriptedModel(SCRIPT), tools=[lookup_order])}
''',
}


@dataclass
class Installed:
    wheel: Path
    venv: Path
    project: Path  # the user's project: app/ and myagents.py

    def python(self, *args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
        """The fresh venv's python, run in the user's project."""
        return subprocess.run([str(self.venv / "bin" / "python"), *args], cwd=self.project, capture_output=True,
                              text=True, timeout=timeout, env=_env())


def _env() -> dict[str, str]:
    # Nothing of the checkout on the path: what the fresh venv imports is the wheel's or the user's.
    return {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV")}


def _pip(*args: str) -> None:
    done = subprocess.run([sys.executable, "-m", "pip", "--disable-pip-version-check", "-q", *args],
                          capture_output=True, text=True, timeout=120, env=_env())
    assert done.returncode == 0, done.stderr


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Installed:
    work = tmp_path_factory.mktemp("wheel")
    # A copy of what the wheel is built from (the Dockerfile's COPY lines), so the build writes its
    # build/ and egg-info there, not into the checkout.
    src = work / "src"
    src.mkdir()
    folders = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["package-dir"].values()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy2(ROOT / name, src / name)
    for folder in folders:
        shutil.copytree(ROOT / folder, src / folder, symlinks=True,
                        ignore=shutil.ignore_patterns("node_modules", "__pycache__"))
    _pip("wheel", "--no-index", "--no-deps", "--no-build-isolation", "-w", str(work / "dist"), str(src))
    (wheel,) = (work / "dist").glob("think_server-*.whl")

    venv = work / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=60, env=_env())
    _pip("--python", str(venv / "bin" / "python"), "install", "--no-index", "--no-deps", str(wheel))
    where = "import sysconfig; print(sysconfig.get_paths()['purelib'])"
    site = subprocess.run([str(venv / "bin" / "python"), "-c", where], capture_output=True, text=True, check=True,
                          timeout=60, env=_env()).stdout.strip()
    ours = dict.fromkeys([sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]])
    (Path(site) / "think_server_test_dependencies.pth").write_text("".join(f"{p}\n" for p in ours))

    project = work / "project"
    for rel, text in USER_APP.items():
        (project / rel).parent.mkdir(parents=True, exist_ok=True)
        (project / rel).write_text(text)
    return Installed(wheel=wheel, venv=venv, project=project)


def test_the_wheel_holds_one_top_level_name(installed: Installed) -> None:
    names = zipfile.ZipFile(installed.wheel).namelist()
    tops = {name.split("/", 1)[0] for name in names}
    assert tops == {"think_server", installed.wheel.name.split("-py3")[0] + ".dist-info"}, tops
    for package in ("think_server/harness/turn/_turn.py", "think_server/storage/sqlite/_db.py",
                    "think_server/protocol/_frames.py", "think_server/app/cli.py", "think_server/__main__.py",
                    "think_server/cli.py", "think_server/testing/_chat.py",
                    "think_server/app/demo_assistant.json"):
        assert package in names, package
    assert {n for n in names if n.endswith("py.typed")} == {
        f"think_server/{sub}py.typed" for sub in ("", "app/", "harness/", "protocol/", "storage/", "testing/")}
    assert "think_server/testing/plugin.py" in names
    page = sorted(n for n in names if n.startswith("think_server/app/web/"))
    built = sorted(p.relative_to(ROOT / "app/web").as_posix() for p in (ROOT / "app/web/dist").rglob("*")
                   if p.is_file()) if (ROOT / "app/web/dist").is_dir() else []
    assert page == [f"think_server/app/web/{p}" for p in built], "the built page, whole, and nothing else of web/"
    meta = next(n for n in names if n.endswith(".dist-info/entry_points.txt"))
    entry_points = zipfile.ZipFile(installed.wheel).read(meta).decode()
    assert "think-server = think_server.cli:main" in entry_points
    assert "[pytest11]\nthink_server = think_server.testing.plugin" in entry_points


def test_pytest_finds_the_kits_fixtures_in_the_installed_package(installed: Installed) -> None:
    # No -p and no conftest: the wheel's pytest11 entry point is all that brings think_harness.
    (installed.project / "test_kit.py").write_text(
        "import pytest\n"
        "from think_server import Agent\n"
        "from think_server.testing import ScriptBuilder\n\n"
        "@pytest.mark.asyncio\n"
        "async def test_hi(think_harness):\n"
        "    h = await think_harness(Agent(model=ScriptBuilder().when('hi').say('Hello!').model()))\n"
        "    assert (await h.session('agent', 't').prompt('hi')).text == 'Hello!'\n")
    done = installed.python("-m", "pytest", "-q", "-p", "no:cacheprovider", "test_kit.py", timeout=120)
    assert done.returncode == 0 and "1 passed" in done.stdout, done.stdout + done.stderr


def test_the_users_app_and_think_server_import_side_by_side(installed: Installed) -> None:
    probe = installed.python("-c", "\n".join([
        "import json, sys, app.models, think_server",
        "from think_server import Agent, Harness, create_app, tool",
        "print(json.dumps({'app': app.models.__file__, 'think_server': think_server.__file__,",
        "                  'finders': [repr(f) for f in sys.meta_path], 'names': len(think_server.__all__)}))",
    ]))
    assert probe.returncode == 0, probe.stderr
    seen = json.loads(probe.stdout)
    assert Path(seen["app"]) == installed.project / "app" / "models.py", "the user's app"
    assert Path(seen["think_server"]).is_relative_to(installed.venv), "the wheel's think_server, not the checkout's"
    assert not [f for f in seen["finders"] if "editable" in f.lower()], "no editable install reached it"
    assert seen["names"] > 100
    for bare in ("harness", "protocol", "storage"):
        missing = installed.python("-c", f"import {bare}")
        assert missing.returncode == 1 and f"No module named '{bare}'" in missing.stderr, missing.stderr
    usage = installed.python("-m", "think_server", "serve", "--help")
    assert usage.returncode == 0 and "--app" in usage.stdout, usage.stderr
    check = installed.python("-m", "think_server", "check", "--help")  # the testing kit is in the wheel
    assert check.returncode == 0 and "--approval-prompt" in check.stdout, check.stderr


def test_think_server_serve_runs_an_agent_that_imports_the_users_app(installed: Installed, tmp_path: Path) -> None:
    port = free_port()
    log = tmp_path / "server.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [str(installed.venv / "bin" / "think-server"), "serve", "--app", "myagents:agents", "--port", str(port),
             "--data-dir", str(tmp_path / "data")],
            cwd=installed.project, env=_env(), stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    base = f"http://127.0.0.1:{port}"
    try:
        with httpx.Client(base_url=base, timeout=30) as http:
            deadline = time.monotonic() + 60
            while True:
                assert proc.poll() is None, f"the server exited with {proc.returncode}: {log.read_text()}"
                assert time.monotonic() < deadline, f"the server was not ready: {log.read_text()}"
                with contextlib.suppress(httpx.HTTPError):
                    if http.get("/readyz").status_code == 200:
                        break
                time.sleep(0.05)
            submitted = http.post("/agents/helper/desk/submit", json={"input": "Where is my order A1?"})
            assert submitted.status_code == 202, submitted.text
            operation = submitted.json()["operation_id"]
            done = http.get(f"/agents/helper/desk/operations/{operation}", params={"wait": "20"}).json()
            assert done["status"] == "completed", done
            assert done["text"] == ('Order: {"item":"teapot","status":"shipped","from":"the user\'s app.models"}'), done
            messages = http.get("/agents/helper/desk/get-messages").json()
            assert [m["role"] for m in messages] == ["user", "assistant"]
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(15)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(10)
