"""An actor: one agent instance, alive in this process.

It owns the instance's file (through the harness), its connections and the
ThinkChat adapter. Frames of one connection are handled in order; the harness
serializes the state changes of all of them through the file's one writer.
"""

from __future__ import annotations

import enum
import time
from pathlib import Path

from harness import Agent, HistoryBudget, Instance, Model, OnWork, Session
from protocol import Identity, McpServers, dump_frame

from ._connection import Connection
from ._thinkchat import ThinkChat
from .settings import Settings

__all__ = ["Actor", "ActorState"]


class ActorState(enum.Enum):
    ACTIVE = "active"
    CLOSING = "closing"
    CLOSED = "closed"


class Actor:
    def __init__(self, agent_name: str, name: str, instance: Instance, session: Session, settings: Settings) -> None:
        self.agent_name = agent_name
        self.name = name
        self.instance = instance
        self.chat = ThinkChat(session, now_ms=instance.clock.now_ms)
        self.state = ActorState.ACTIVE
        self.last_used = time.monotonic()

    @classmethod
    async def activate(cls, agent_name: str, name: str, path: Path, agent: Agent, model: Model, *,
                       settings: Settings, on_work: OnWork | None = None,
                       budget: HistoryBudget | None = None) -> Actor:
        instance = await Instance.open(path, agent, model, stream_grace_ms=int(settings.stream_grace_s * 1000),
                                       policy=settings.input_policy(), on_work=on_work, budget=budget)
        try:
            session = await instance.session(start=False)
        except BaseException:
            await instance.close()
            raise
        actor = cls(agent_name, name, instance, session, settings)
        session.start()  # after ThinkChat listens: recovered work reaches its sockets
        return actor

    def touch(self) -> None:
        self.last_used = time.monotonic()

    @property
    def idle(self) -> bool:
        """Nothing to lose by closing it: no sockets, no running or queued work."""
        return not self.chat.connections and self.instance.idle

    async def attach(self, conn: Connection) -> None:
        self.touch()
        if not await self.chat.connect(conn):
            return  # a newer socket of the same client is here: this one is closing
        conn.send(dump_frame(Identity(name=self.name, agent=self.agent_name)))
        conn.send(dump_frame(McpServers()))

    def detach(self, conn: Connection) -> None:
        self.touch()
        self.chat.disconnect(conn)

    async def close(self) -> None:
        if self.state is not ActorState.ACTIVE:
            return
        self.state = ActorState.CLOSING
        # A running turn is suspended first: what it streamed is committed for the next start.
        await self.instance.close()
        for conn in list(self.chat.connections.values()):
            conn.close(1012, "server restarting")  # 1012: not terminal, the client reconnects and resumes
        self.chat.close()
        self.state = ActorState.CLOSED
