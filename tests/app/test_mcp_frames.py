"""The chat socket's cf_agent_mcp_servers frame lists an agent's MCP servers and their tools."""

from __future__ import annotations

import sys
import uuid
from pathlib import Path

from tests.conftest import Client, chat_request, chunks_of, is_done
from think_server.harness import Agent, McpServer, ScriptedModel

SERVER = Path(__file__).parents[1] / "mcp_server.py"
MODEL = ScriptedModel({"rules": [
    {"match": "*", "steps": [[{"tool_call": {"name": "calc__add", "input": {"a": 20, "b": 22}}}],
                             [{"text": ["It is {result.result}."]}]]},
]})


async def test_the_server_list_fills_in_as_the_servers_connect(serve) -> None:
    calc = McpServer("calc", command=[sys.executable, str(SERVER), "stdio"], env={"PATH": "/usr/bin:/bin"})
    srv = await serve({"mcp-agent": Agent(model=MODEL, mcp=[calc])})
    c = await Client.open(f"{srv.ws_base}/agents/mcp-agent/desk?_pk={uuid.uuid4()}")
    first = await c.wait_for(lambda f: f.get("type") == "cf_agent_mcp_servers")
    assert first["mcp"]["servers"]["calc"]["state"] in ("connecting", "ready")
    ready = await c.wait_for(lambda f: f.get("type") == "cf_agent_mcp_servers"
                             and f["mcp"]["servers"]["calc"]["state"] == "ready", timeout=20)
    server = ready["mcp"]["servers"]["calc"]
    assert server["server_url"].startswith("stdio:") and server["error"] is None
    assert {(t["name"], t["serverId"]) for t in ready["mcp"]["tools"]} == {
        ("add", "calc"), ("shout", "calc"), ("crash", "calc")}
    assert next(t for t in ready["mcp"]["tools"] if t["name"] == "add")["inputSchema"]["required"] == ["a", "b"]
    # And the model's call reaches it.
    rid, frame, _ = chat_request("what is 20 + 22")
    await c.send(frame)
    await c.wait_for(is_done(rid), timeout=20)
    assert "".join(ch.get("delta", "") for ch in chunks_of(c, rid)) == "It is 42."
    await c.close()


async def test_an_agent_without_mcp_servers_lists_none(serve) -> None:
    srv = await serve({"plain": Agent(model=MODEL)})
    c = await Client.open(f"{srv.ws_base}/agents/plain/desk?_pk={uuid.uuid4()}")
    frame = await c.wait_for(lambda f: f.get("type") == "cf_agent_mcp_servers")
    assert frame["mcp"] == {"prompts": [], "resources": [], "servers": {}, "tools": []}
    await c.close()
