"""Actors: the chat side of each open agent instance.

The harness owns the instances (opening, capping, closing idle ones); an actor
is what the server adds to one while it is open: a ThinkChat adapter per
session that sockets use, and their connections. A socket holds its instance
open; a closed instance closes its sockets with ``1012`` (the client reconnects).
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
from collections.abc import Callable

from think_server.harness import Harness, HarnessEvent, Instance, McpConnections, McpUnavailable, Session
from think_server.protocol import Identity, McpServers, dump_frame

from ._connection import Connection
from ._sse import SessionEvents
from ._thinkchat import ThinkChat

__all__ = ["Actor", "ActorState", "ChatHost"]


# The server list of an agent without MCP servers: the same text for every instance, made once
# (a model built and encoded per activation otherwise).
_NO_MCP_FRAME = dump_frame(McpServers())


class ActorState(enum.Enum):
    ACTIVE = "active"
    CLOSED = "closed"


class Actor:
    def __init__(self, instance: Instance) -> None:
        self.instance = instance
        self.agent_name = instance.agent_name
        self.name = instance.name
        self.chats: dict[str, ThinkChat] = {}
        self._events: dict[str, SessionEvents] = {}  # of sessions an SSE client follows (or followed)
        self.state = ActorState.ACTIVE
        # The agent's MCP servers, as the chat's server list shows them (kept in step while open).
        mcp = getattr(instance.host, "mcp", None)
        self._mcp = mcp if instance.agent.mcp and isinstance(mcp, McpConnections) else None
        self._mcp_frame = _NO_MCP_FRAME
        self._opening: asyncio.Task[None] | None = None
        if self._mcp is not None:
            self._mcp.on_change.append(self._mcp_changed)
            self._mcp_frame = self._mcp_state()

    def on_session(self, session: Session) -> None:
        # Before the session's queue runs: recovered work reaches the sockets from its first chunk.
        self.chats[session.id] = ThinkChat(session)

    def on_unload(self, session_id: str) -> None:
        events = self._events.pop(session_id, None)
        if events is not None:
            events.close()
        chat = self.chats.pop(session_id, None)
        if chat is not None:
            for conn in list(chat.connections.values()):
                conn.close(1000, "the session was deleted")
            chat.close()

    async def chat(self, session_id: str) -> ThinkChat:
        """The adapter of a session (loaded if it was not)."""
        await self.instance.session(session_id)
        return self.chats[session_id]

    async def events(self, session_id: str) -> SessionEvents:
        """The numbered events of a session, kept from the first time a client follows them."""
        chat = await self.chat(session_id)
        found = self._events.get(session_id)
        if found is None or found.closed:
            found = self._events[session_id] = SessionEvents(chat.session, chat)
        return found

    async def attach(self, conn: Connection, session_id: str) -> ThinkChat:
        chat = await self.chat(session_id)
        if await chat.connect(conn):  # else a newer socket of the same client is here: this one is closing
            conn.send(dump_frame(Identity(name=self.name, agent=self.agent_name)))
            conn.send(self._mcp_frame)
            if self._mcp is not None and self._opening is None:
                # A chat is open: connect the servers now (in the background), so the list it shows
                # fills in; a turn would open them anyway.
                self._opening = asyncio.get_running_loop().create_task(self._open_mcp())
        return chat

    def _mcp_state(self) -> str:
        assert self._mcp is not None
        return dump_frame(McpServers(mcp=self._mcp.state(self.instance.agent.mcp)))

    def _mcp_changed(self) -> None:
        frame = self._mcp_state()
        if frame != self._mcp_frame:
            self._mcp_frame = frame
            for chat in self.chats.values():
                for conn in chat.connections.values():
                    conn.send(frame)

    async def _open_mcp(self) -> None:
        assert self._mcp is not None
        with contextlib.suppress(McpUnavailable):  # its state says so
            await self._mcp.tools(self.instance.agent.mcp)

    @property
    def connections(self) -> int:
        return sum(len(c.connections) for c in self.chats.values())

    def closed(self, code: int = 1012, reason: str = "server restarting") -> None:
        """The instance closed (a running turn was suspended and committed first), or this node lost
        its lease (then at once, before anything else of it reaches a client)."""
        if self.state is ActorState.CLOSED:
            return
        self.state = ActorState.CLOSED
        if self._mcp is not None:
            with contextlib.suppress(ValueError):
                self._mcp.on_change.remove(self._mcp_changed)
        if self._opening is not None:
            self._opening.cancel()
        for events in self._events.values():
            events.close()
        for chat in self.chats.values():
            for conn in list(chat.connections.values()):
                conn.close(code, reason)  # 1012, 1013: not terminal, the client reconnects and resumes
            chat.close()


class ChatHost:
    """The actors of a harness's open instances, kept in step with it."""

    def __init__(self, harness: Harness, on_event: Callable[[HarnessEvent], None] | None = None) -> None:
        self.harness = harness
        self._actors: dict[tuple[str, str], Actor] = {}
        self._on_event = on_event
        harness.registry.on_open.append(self._opened)
        harness.registry.on_closed.append(self._closed)
        harness.registry.on_lost.append(self._lost)

    def _opened(self, instance: Instance) -> None:
        actor = Actor(instance)
        instance.on_session.append(actor.on_session)
        if self._on_event is not None:
            on_event = self._on_event

            def watch(session: Session) -> None:
                session.subscribe(on_event)

            instance.on_session.append(watch)
        instance.on_unload.append(actor.on_unload)
        self._actors[(instance.agent_name, instance.name)] = actor

    def _closed(self, instance: Instance) -> None:
        actor = self._actors.get((instance.agent_name, instance.name))
        if actor is not None and actor.instance is instance:
            del self._actors[(instance.agent_name, instance.name)]
            actor.closed()

    def _lost(self, instance: Instance) -> None:
        actor = self._actors.get((instance.agent_name, instance.name))
        if actor is not None and actor.instance is instance:
            # Its sockets close now: the client reconnects, and reaches the node that serves it now.
            actor.closed(1012, "this conversation moved to another server")

    def actor(self, instance: Instance) -> Actor:
        return self._actors[(instance.agent_name, instance.name)]

    def get(self, agent: str, name: str) -> Actor | None:
        return self._actors.get((agent, name))
