"""Tools from Model Context Protocol servers (README "MCP tools"), with the official ``mcp`` SDK.

An agent lists servers (``Agent(mcp=[McpServer(...)])``): a command spoken to over stdio, or a
streamable HTTP URL with headers. Their tools join the agent's, named ``<server>__<tool>``.
A server's connection is opened when a turn first needs its tools, shared by every agent and
turn of the process, opened again after it fails, and closed with the harness. A server that
cannot be reached or that fails takes only its own tools down: they are left out of the turn
(or, once known, fail with the reason), never the agent.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import re
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from .._tools import Tool

__all__ = ["McpConnections", "McpServer", "McpUnavailable"]

log = logging.getLogger("think_server.mcp")

_NAME = re.compile(r"[A-Za-z0-9_-]{1,30}")
#: Between a server's name and its tool's in the names the model sees (OpenAI allows [A-Za-z0-9_-]).
SEPARATOR = "__"


class McpUnavailable(RuntimeError):
    """An MCP server that cannot be reached, or that failed; the message says which and why."""


@dataclass(frozen=True)
class McpServer:
    """An MCP server: ``command`` (the program and its arguments, spoken to over stdio) or
    ``url`` (streamable HTTP, with ``headers``). ``name`` prefixes its tools' names."""

    name: str
    command: Sequence[str] = ()
    url: str | None = None
    headers: Mapping[str, str] = field(default_factory=dict)
    env: Mapping[str, str] | None = None
    #: How long one call may take.
    timeout_s: float = 60.0

    def __post_init__(self) -> None:
        if not _NAME.fullmatch(self.name) or SEPARATOR in self.name:
            raise ValueError(f"McpServer name must be 1-30 letters, digits, '_' or '-' (no '__'); got {self.name!r}")
        if bool(self.command) == bool(self.url):
            raise ValueError(f"McpServer {self.name!r}: give a command (stdio) or a url (streamable HTTP), "
                             f"not {'both' if self.command else 'neither'}")
        if isinstance(self.command, str):
            raise ValueError(f"McpServer {self.name!r}: command is a list of the program and its arguments")
        if self.url is not None and not self.url.startswith(("http://", "https://")):
            raise ValueError(f"McpServer {self.name!r}: url must be http(s)://; got {self.url!r}")

    @property
    def address(self) -> str:
        """Where it is, as the chat's server list shows it (never its headers or environment)."""
        return self.url or "stdio:" + " ".join(self.command)

    def _key(self) -> tuple[Any, ...]:
        return (self.name, tuple(self.command), self.url, tuple(sorted(self.headers.items())),
                tuple(sorted((self.env or {}).items())))


async def _target(server: McpServer, stack: contextlib.AsyncExitStack) -> Any:
    from mcp import StdioServerParameters, stdio_client
    from mcp.client.streamable_http import streamable_http_client
    from mcp.shared._httpx_utils import create_mcp_http_client

    if server.url is not None:
        # The transport leaves a client it was given open: this one closes with the connection.
        http = await stack.enter_async_context(create_mcp_http_client(headers=dict(server.headers)))
        return streamable_http_client(server.url, http_client=http)
    program, *args = server.command
    params = StdioServerParameters(command=program, args=list(args), env=dict(server.env) if server.env else None)
    # The server's stderr goes to ours; a stand-in stderr with no file under it (a test runner's
    # capture, say) cannot be given to a process, and the process's own is used then.
    errlog = sys.stderr if _has_fileno(sys.stderr) or sys.__stderr__ is None else sys.__stderr__
    return stdio_client(params, errlog=errlog)


def _has_fileno(stream: Any) -> bool:
    try:
        stream.fileno()
    except (AttributeError, OSError, ValueError):
        return False
    return True


class _Connection:
    """One server's client, entered and left by a task of its own (the SDK's contexts must be)."""

    def __init__(self, server: McpServer, on_state: Callable[[], None]) -> None:
        self.server = server
        self._on_state = on_state
        self.state = "connecting"
        self.error: str | None = None
        self.instructions: str | None = None
        self.tools: list[Any] = []  # the SDK's Tool objects, as last listed
        self._client: Any = None
        self.came_up = False  # it was ready once (a failure after that is not a failure to start)
        self.ended_at: float | None = None  # when its task ended (loop time)
        self._ready = asyncio.Event()
        self._stop = asyncio.Event()
        self._task = asyncio.get_running_loop().create_task(self._hold(), name=f"mcp:{server.name}")

    async def _hold(self) -> None:
        from mcp import Client

        try:
            async with contextlib.AsyncExitStack() as stack:
                target = await _target(self.server, stack)
                client = await stack.enter_async_context(Client(target, read_timeout_seconds=self.server.timeout_s))
                listed = await client.list_tools()
                self.tools = list(listed.tools)
                self.instructions = getattr(client, "instructions", None)
                self._client, self.state, self.came_up = client, "ready", True
                self._ready.set()
                self._on_state()
                await self._stop.wait()
        except Exception as exc:
            self.error = _reason(exc)
            log.warning("MCP server %r failed: %s", self.server.name, self.error)
        finally:
            self._client, self.state = None, "failed" if self.error else "closed"
            self.ended_at = asyncio.get_running_loop().time()
            self._ready.set()
            self._on_state()

    async def ready(self) -> Any:
        await self._ready.wait()
        if self._client is None:
            raise McpUnavailable(f"MCP server {self.server.name!r} is unavailable: {self.error or 'closed'}")
        return self._client

    @property
    def alive(self) -> bool:
        return not self._task.done()

    async def close(self) -> None:
        self._stop.set()
        with contextlib.suppress(Exception):
            await asyncio.wait_for(asyncio.shield(self._task), 10)
        if not self._task.done():
            self._task.cancel()
            with contextlib.suppress(BaseException):
                await self._task


def _reason(exc: BaseException) -> str:
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    return str(exc) or type(exc).__name__


def _output(result: Any) -> Any:
    """A tool result as JSON for the model: its structured content, else its text."""
    texts = [getattr(c, "text", None) for c in result.content]
    if result.is_error:
        raise RuntimeError("; ".join(t for t in texts if t) or "the MCP tool failed")
    if result.structured_content is not None:
        return result.structured_content
    strings = [t for t in texts if isinstance(t, str)]
    if len(strings) == len(texts):
        return strings[0] if len(strings) == 1 else "\n".join(strings)
    return [c.model_dump(mode="json", exclude_none=True) for c in result.content]


class McpConnections:
    """The MCP servers' connections of a process, by server."""

    def __init__(self) -> None:
        self._open: dict[tuple[Any, ...], _Connection] = {}
        self._known: dict[tuple[Any, ...], list[Any]] = {}  # tools last listed, for a server that went down
        self._failures: dict[tuple[Any, ...], int] = {}  # failures to start in a row, by server
        self._closed = False
        #: Called with nothing when a server's state or tools change (the chat's server list listens).
        self.on_change: list[Callable[[], None]] = []

    def _changed(self) -> None:
        for listener in list(self.on_change):
            try:
                listener()
            except Exception:
                log.exception("an MCP change listener failed")

    async def _connection(self, server: McpServer) -> _Connection:
        if self._closed:
            raise McpUnavailable("the harness is closing")
        key = server._key()
        conn = self._open.get(key)
        if conn is not None and not conn.alive and not conn.came_up:
            # It could not start: not again before its backoff (1 s, doubling to a minute) is over.
            delay = min(60.0, 2.0 ** self._failures.get(key, 0))
            if conn.ended_at is not None and asyncio.get_running_loop().time() < conn.ended_at + delay:
                raise McpUnavailable(f"MCP server {server.name!r} is unavailable: {conn.error or 'closed'}")
        if conn is None or not conn.alive:  # never opened, or failed or closed since: open it (again)
            if conn is not None:
                self._failures[key] = 0 if conn.came_up else self._failures.get(key, 0) + 1
            conn = self._open[key] = _Connection(server, self._changed)
            self._changed()
        await conn.ready()
        self._known[key] = conn.tools
        return conn

    async def tools(self, servers: Sequence[McpServer]) -> dict[str, Tool]:
        """The tools of ``servers`` as the model sees them; a server that is down gives the tools
        it had (which fail with the reason), or none if it never came up."""
        out: dict[str, Tool] = {}
        for server in servers:
            try:
                listed = (await self._connection(server)).tools
            except McpUnavailable:
                listed = self._known.get(server._key(), [])
            for t in listed:
                made = self._tool(server, t)
                out[made.name] = made
        return out

    def _tool(self, server: McpServer, spec: Any) -> Tool:
        remote = str(spec.name)
        name = f"{server.name}{SEPARATOR}{re.sub(r'[^A-Za-z0-9_-]', '_', remote)}"[:64]

        async def execute(**arguments: Any) -> Any:
            conn = await self._connection(server)
            try:
                client = await conn.ready()
                result = await client.call_tool(remote, arguments)
            except McpUnavailable:
                raise
            except Exception as exc:
                await conn.close()  # the next use opens it again
                raise McpUnavailable(f"MCP server {server.name!r} failed during {remote}: {_reason(exc)}") from None
            return _output(result)

        schema = dict(getattr(spec, "input_schema", None) or {"type": "object", "properties": {}})
        return Tool(name, str(spec.description or f"{remote} (MCP server {server.name})"), parameters=schema,
                    execute=execute)

    def state(self, servers: Sequence[McpServer]) -> dict[str, Any]:
        """The chat's ``cf_agent_mcp_servers`` state of ``servers``."""
        listed: dict[str, Any] = {}
        tools: list[dict[str, Any]] = []
        for server in servers:
            conn = self._open.get(server._key())
            state = conn.state if conn is not None else "connecting"
            listed[server.name] = {"name": server.name, "server_url": server.address, "auth_url": None,
                                   "state": "failed" if state == "closed" else state,
                                   "error": conn.error if conn is not None else None,
                                   "instructions": conn.instructions if conn is not None else None,
                                   "capabilities": None}
            for t in (conn.tools if conn is not None and conn.tools else self._known.get(server._key(), [])):
                tools.append({"name": t.name, "description": t.description or "",
                              "inputSchema": json.loads(json.dumps(t.input_schema)), "serverId": server.name})
        return {"servers": listed, "tools": tools, "prompts": [], "resources": []}

    async def close(self) -> None:
        self._closed = True
        conns, self._open = list(self._open.values()), {}
        await asyncio.gather(*(c.close() for c in conns), return_exceptions=True)
