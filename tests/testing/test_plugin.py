"""The pytest plugin: a user's test file gets think_harness and think_server_app from it alone (no
conftest of theirs), in pytest-asyncio's strict mode, and each fixture stops what it started."""

from __future__ import annotations

import os
import subprocess
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

USER_AGENTS = '''
from think_server import Agent
from think_server.testing import ScriptBuilder

agents = {"echo": Agent(model=ScriptBuilder().otherwise().say("Echo: {user}").model())}
'''

USER_TESTS = '''
import pytest
from think_server import Agent, Harness
from think_server.testing import ScriptBuilder

started = []


@pytest.mark.asyncio
async def test_a_harness(think_harness, tmp_path):
    h = await think_harness(Agent(model=ScriptBuilder().when("hi").say("Hello!").model()))
    assert (await h.session("agent", "t").prompt("hi")).text == "Hello!"
    assert h.data_dir.is_relative_to(tmp_path)
    started.append(h.data_dir)


@pytest.mark.asyncio
async def test_the_harness_was_closed():
    # Its data dir is free again: a harness left open would hold its lock.
    async with Harness({"agent": Agent()}, data_dir=started[0], model="scripted:missing.json") as h:
        pass


@pytest.mark.asyncio
async def test_a_served_app(think_server_app):
    app = await think_server_app("user_agents:agents")
    async with app.client("echo", "t") as api:
        assert (await api.prompt("ping")).text == "Echo: ping"
    started.append(app)


def test_the_app_was_stopped():
    assert not started[1].alive
'''


def run_pytest(where: Path, *args: str) -> subprocess.CompletedProcess[str]:
    # Autoload off: only the plugins named here, whether or not the installed package's entry point
    # is active in this venv (both at once would register the module twice).
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), str(where)]), "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"}
    return subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "pytest_asyncio.plugin", *args, str(where)],
                          cwd=where, env=env, capture_output=True, text=True, timeout=180)


def test_a_users_tests_get_the_fixtures_from_the_plugin(tmp_path: Path) -> None:
    (tmp_path / "user_agents.py").write_text(USER_AGENTS)
    (tmp_path / "test_user.py").write_text(USER_TESTS.replace("scripted:missing.json", "scripted:script.json"))
    (tmp_path / "script.json").write_text('{"rules": [{"match": "*", "steps": [[{"text": ["x"]}]]}]}')
    done = run_pytest(tmp_path, "-p", "think_server.testing.plugin")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "4 passed" in done.stdout


def test_without_the_plugin_the_fixtures_are_not_there(tmp_path: Path) -> None:
    (tmp_path / "user_agents.py").write_text(USER_AGENTS)
    (tmp_path / "test_user.py").write_text(USER_TESTS)
    done = run_pytest(tmp_path)
    assert done.returncode != 0 and "fixture 'think_harness' not found" in done.stdout


def test_the_package_declares_the_plugin_entry_point() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert project["project"]["entry-points"]["pytest11"] == {"think_server": "think_server.testing.plugin"}
    assert "think_server.testing" in project["tool"]["setuptools"]["packages"]
    assert {"pytest", "pytest-asyncio"} <= {dep.split(">")[0] for dep in project["project"]["optional-dependencies"]
                                            ["testing"]}
