"""The page's views of a sub-agent's call and of the MCP server list (``--app tests.e2e.views_app:agents``):
an assistant that hands "research" to a researcher agent that writes slowly, and that has one MCP
server (tests/mcp_server.py over stdio)."""

from __future__ import annotations

import sys
from pathlib import Path

from think_server.harness import Agent, McpServer, ScriptedModel, agent_tool

#: The researcher's answer: twenty words, a fifth of a second apart.
FINDINGS = [f"finding{i} " for i in range(20)]

ASSISTANT = ScriptedModel({"rules": [
    {"match": "research", "steps": [
        [{"tool_call": {"name": "ask_researcher", "input": {"task": "Find out about tides."}}}],
        [{"text": ["The researcher found: {result}"]}]]},
    {"match": "*", "steps": [[{"text": ["You said: {user}"]}]]},
]})
RESEARCHER = ScriptedModel({"rules": [{"match": "*", "steps": [[{"text": FINDINGS, "interval_ms": 200}]]}]})
CALC = McpServer("calc", command=[sys.executable, str(Path(__file__).parents[1] / "mcp_server.py"), "stdio"],
                 env={"PATH": "/usr/bin:/bin"})

agents = {
    "assistant": Agent(model=ASSISTANT, tools=[agent_tool("researcher")], mcp=[CALC]),
    "researcher": Agent(model=RESEARCHER),
}
