"""Tools from MCP servers (a small server on the official SDK, tests/mcp_server.py), over stdio
and streamable HTTP."""

from __future__ import annotations

import asyncio
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from think_server.harness import Agent, Harness, McpServer, ScriptedModel
from think_server.protocol import ToolPart

SERVER = Path(__file__).parents[2] / "mcp_server.py"

MODEL = ScriptedModel({"rules": [
    {"match": "add", "steps": [[{"tool_call": {"name": "calc__add", "input": {"a": 2, "b": 3}}}],
                               [{"text": ["The sum is {result.result}."]}]]},
    {"match": "shout", "steps": [[{"tool_call": {"name": "calc__shout", "input": {"text": "hey"}}}],
                                 [{"text": ["Shouted: {result.result}"]}]]},
    {"match": "crash", "steps": [[{"tool_call": {"name": "calc__crash", "input": {}}}], [{"text": ["Saw: {result}"]}]]},
    {"match": "tools", "steps": [[{"text": ["Tools: {tools}"]}]]},
]})


def stdio(tmp_path: Path) -> McpServer:
    return McpServer("calc", command=[sys.executable, str(SERVER), "stdio"],
                     env={"MCP_CALL_LOG": str(tmp_path / "calls.log"), "PATH": "/usr/bin:/bin"})


def calls(tmp_path: Path) -> list[str]:
    path = tmp_path / "calls.log"
    return path.read_text().splitlines() if path.exists() else []


async def test_stdio_tools_join_the_agents_and_run_over_one_shared_connection(tmp_path: Path) -> None:
    server = stdio(tmp_path)
    agents = {"a": Agent(model=MODEL, mcp=[server]), "b": Agent(model=MODEL, mcp=[server])}
    async with Harness(agents, data_dir=tmp_path / "data") as h:
        listed = (await h.session("a", "x").prompt("which tools")).text
        assert "calc__add" in listed and "calc__shout" in listed
        assert (await h.session("a", "x").prompt("add them")).text == "The sum is 5."
        assert (await h.session("b", "y").prompt("shout it")).text == "Shouted: HEY"
        assert calls(tmp_path) == ["add 2 3", "shout hey"]
        state = h.mcp.state([server])
        assert state["servers"]["calc"]["state"] == "ready"
        assert {t["name"] for t in state["tools"]} == {"add", "shout", "crash"}
        assert len(h.mcp._open) == 1, "one connection for both agents"


async def test_a_server_that_dies_fails_its_tools_clearly_and_is_opened_again(tmp_path: Path) -> None:
    server = stdio(tmp_path)
    async with Harness({"a": Agent(model=MODEL, mcp=[server])}, data_dir=tmp_path / "data") as h:
        s = h.session("a", "x")
        said = (await s.prompt("crash it")).text
        assert said.startswith("Saw: ") and "MCP server 'calc'" in said, said
        (part,) = [p for p in (await s.messages())[-1].parts if isinstance(p, ToolPart)]
        assert part.state == "output-error"
        # The next turn opens the connection again; the agent never failed.
        assert (await s.prompt("add again")).text == "The sum is 5."
        assert calls(tmp_path) == ["crash", "add 2 3"]


async def test_a_server_that_cannot_start_takes_only_its_own_tools_down(tmp_path: Path) -> None:
    starts = tmp_path / "starts.log"
    broken = McpServer("calc", command=[sys.executable, "-c",
                                        f"open({str(starts)!r}, 'a').write('start\\n'); raise SystemExit(1)"])
    async with Harness({"a": Agent(model=MODEL, mcp=[broken])}, data_dir=tmp_path / "data") as h:
        s = h.session("a", "x")
        result = await s.prompt("which tools")
        assert result.outcome == "done" and "calc__" not in result.text
        assert h.mcp.state([broken])["servers"]["calc"]["state"] == "failed"
        assert (await s.prompt("which tools now")).outcome == "done"
        assert starts.read_text().splitlines() == ["start"], "not started again within its backoff"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
def http_server(tmp_path: Path) -> Iterator[str]:
    port = free_port()
    proc = subprocess.Popen([sys.executable, str(SERVER), "http", str(port), "s3cret"],
                            env={"MCP_CALL_LOG": str(tmp_path / "calls.log"), "PATH": "/usr/bin:/bin"})
    try:
        for _ in range(200):
            try:
                httpx.get(f"http://127.0.0.1:{port}/mcp", timeout=1)
                break
            except httpx.TransportError:
                import time

                time.sleep(0.05)
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        proc.terminate()
        proc.wait(10)


async def test_streamable_http_with_headers(tmp_path: Path, http_server: str) -> None:
    good = McpServer("calc", url=http_server, headers={"Authorization": "Bearer s3cret"})
    async with Harness({"a": Agent(model=MODEL, mcp=[good])}, data_dir=tmp_path / "data") as h:
        assert (await h.session("a", "x").prompt("add them")).text == "The sum is 5."
        assert calls(tmp_path) == ["add 2 3"]
    wrong = McpServer("calc", url=http_server, headers={"Authorization": "Bearer nope"})
    async with Harness({"a": Agent(model=MODEL, mcp=[wrong])}, data_dir=tmp_path / "data2") as h:
        result = await h.session("a", "x").prompt("which tools")
        assert result.outcome == "done" and "calc__" not in result.text
        state = h.mcp.state([wrong])["servers"]["calc"]
        assert state["state"] == "failed" and state["error"]
    await asyncio.sleep(0)


def test_a_server_is_a_command_or_a_url() -> None:
    with pytest.raises(ValueError, match="command"):
        McpServer("x")
    with pytest.raises(ValueError, match="name"):
        McpServer("a__b", url="http://h/mcp")
    with pytest.raises(ValueError, match="url"):
        McpServer("x", url="ftp://h")
