"""The agent the crash tests kill: slow streams and slow tools with both recovery modes.

Each tool run appends a line to ``$THINK_CRASH_LOG``, so a test can count runs
across process deaths.
"""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

from think_server.harness import Agent, RecoveryPolicy, ScriptedModel, WorkspaceTools, agent_tool, tool

SCRIPT = {
    "rules": [
        {"match": "slow", "steps": [[{"text": [f"w{i} " for i in range(40)], "interval_ms": 40}]]},
        {"match": "rerun", "steps": [
            [{"tool_call": {"name": "slowRerun", "input": {"n": 7}}}],
            [{"text": ["Result: ", "{result}", "."]}],
        ]},
        {"match": "report", "steps": [
            [{"tool_call": {"name": "slowReport", "input": {"n": 7}}}],
            [{"text": ["Saw: ", "{result}", "."]}],
        ]},
        {"match": "hang", "steps": [
            [{"tool_call": {"name": "hangRerun", "input": {}}}],
            [{"text": ["never"]}],
        ]},
        {"match": "*", "steps": [[{"text": ["You said: {user}"]}]]},
    ]
}


def _log(line: str) -> None:
    path = os.environ.get("THINK_CRASH_LOG")
    if path:
        with Path(path).open("a") as f:
            f.write(line + "\n")


@tool(name="slowRerun", recovery="rerun")
async def slow_rerun(n: int) -> dict[str, int]:
    """Safe to repeat: doubles a number, slowly."""
    _log("slowRerun start")
    await asyncio.sleep(1.5)
    _log("slowRerun end")
    return {"double": n * 2}


@tool(name="slowReport")
async def slow_report(n: int) -> dict[str, int]:
    """Not safe to repeat: reported as interrupted after a crash."""
    _log("slowReport start")
    await asyncio.sleep(1.5)
    _log("slowReport end")
    return {"double": n * 2}


@tool(name="hangRerun", recovery="rerun")
async def hang_rerun() -> str:
    """Never finishes: each run is killed."""
    _log("hangRerun start")
    await asyncio.sleep(3600)
    return "never"


# The workspace's tools: a file the model writes, then edits (the test kills the edit's transaction).
FILES_SCRIPT = {
    "rules": [
        {"match": "start the notes", "steps": [
            [{"tool_call": {"name": "write", "input": {"path": "notes.md", "content": "tea\n"}}}],
            [{"text": ["Started: ", "{result}"]}],
        ]},
        {"match": "add coffee", "steps": [
            [{"tool_call": {"name": "edit", "input": {"path": "notes.md", "old": "tea\n", "new": "tea\ncoffee\n"}}}],
            [{"text": ["Edit: ", "{result}"]}],
        ]},
    ]
}

# An agent that hands its work to another (the crash agent, whose "slow" answer takes ~1.6 s).
BOSS_SCRIPT = {
    "rules": [
        {"match": "*", "steps": [
            [{"tool_call": {"name": "ask_crash_agent", "input": {"task": "be slow"}}}],
            [{"text": ["It said: ", "{result}"]}],
        ]},
    ]
}

agents = {
    "boss-agent": Agent(
        model=ScriptedModel(BOSS_SCRIPT),
        tools=[agent_tool("crash-agent")],
        recovery=RecoveryPolicy(backoff_ms=50, crash_limit=3),
    ),
    "files-agent": Agent(
        model=ScriptedModel(FILES_SCRIPT),
        workspace=WorkspaceTools(),
        recovery=RecoveryPolicy(backoff_ms=50, crash_limit=3),
    ),
    "crash-agent": Agent(
        model=ScriptedModel(SCRIPT),
        tools=[slow_rerun, slow_report, hang_rerun],
        recovery=RecoveryPolicy(backoff_ms=50, crash_limit=3),
    )
}
