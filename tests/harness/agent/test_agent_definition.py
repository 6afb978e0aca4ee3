"""An agent's definition: what ``Agent(...)`` makes of what its author wrote."""

from __future__ import annotations

import json
import os
import runpy
from pathlib import Path

import pytest

SCRIPT = {"rules": [{"match": "*", "steps": [[{"text": ["Hi from beside the agent."]}]]}]}


def test_a_relative_script_path_is_read_beside_the_file_that_defines_the_agent(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    project = tmp_path / "project"
    project.mkdir()
    (project / "script.json").write_text(json.dumps(SCRIPT))
    (project / "agents.py").write_text(
        "from think_server import Agent\n"
        "beside = Agent(model='scripted:script.json')\n"
        "missing = Agent(model='scripted:nowhere.json')\n"
        "other = Agent(model='openai:gpt-4.1-mini')\n")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)  # the server runs from another directory
    defined = runpy.run_path(str(project / "agents.py"))
    assert defined["beside"].model == f"scripted:{project / 'script.json'}"
    # Not there: left as written (relative to the current directory, as --model is; refused at start).
    assert defined["missing"].model == "scripted:nowhere.json"
    assert defined["other"].model == "openai:gpt-4.1-mini"
    assert os.getcwd() == str(elsewhere)


async def test_the_script_beside_the_agent_is_the_one_that_answers(tmp_path: Path,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    from think_server import Harness

    (tmp_path / "script.json").write_text(json.dumps(SCRIPT))
    (tmp_path / "agents.py").write_text("from think_server import Agent\nagent = Agent(model='scripted:script.json')\n")
    monkeypatch.chdir(tmp_path.parent)
    agent = runpy.run_path(str(tmp_path / "agents.py"))["agent"]
    async with Harness({"assistant": agent}, data_dir=tmp_path / "data") as h:
        result = await h.session("assistant", "x").prompt("hello")
    assert result.text == "Hi from beside the agent."


def test_a_script_file_that_does_not_exist_stops_the_harness_before_it_starts_naming_it(tmp_path: Path) -> None:
    from think_server import Agent, Harness, ModelSpecError

    with pytest.raises(ModelSpecError, match=r"cannot read script file nowhere\.json"):
        Harness({"assistant": Agent(model="scripted:nowhere.json")}, data_dir=tmp_path / "data")
    assert not (tmp_path / "data").exists(), "nothing was written"
