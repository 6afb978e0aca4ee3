"""One agent instance: its SQLite file and its sessions."""

from __future__ import annotations

import asyncio
from pathlib import Path

from storage import Database

from ._agent import Agent
from ._clock import Clock
from ._input import InputPolicy
from ._model import Model
from ._session import Session

__all__ = ["Instance"]

ROOT_SESSION = ""
DEFAULT_STREAM_GRACE_MS = 10 * 60 * 1000


class Instance:
    def __init__(self, db: Database, agent: Agent, model: Model, clock: Clock,
                 stream_grace_ms: int = DEFAULT_STREAM_GRACE_MS, policy: InputPolicy | None = None) -> None:
        self.db = db
        self.stream_grace_ms = stream_grace_ms
        self.policy = policy or InputPolicy()
        self.agent = agent
        self.model = model
        self.clock = clock
        self._sessions: dict[str, Session] = {}
        self._opening: dict[str, asyncio.Future[Session]] = {}

    @classmethod
    async def open(cls, path: Path, agent: Agent, model: Model, clock: Clock | None = None,
                   stream_grace_ms: int = DEFAULT_STREAM_GRACE_MS, policy: InputPolicy | None = None) -> Instance:
        db = await Database.open(path)
        return cls(db, agent, model, clock or Clock(), stream_grace_ms, policy)

    async def session(self, session_id: str = ROOT_SESSION, *, start: bool = True) -> Session:
        """The session, loaded from the file the first time it is used.

        With ``start=False`` its queue (recovered work included) waits for
        :meth:`Session.start`, so a caller can subscribe before anything runs.
        """
        found = self._sessions.get(session_id)
        if found is not None:
            return found
        pending = self._opening.get(session_id)
        if pending is not None:
            return await asyncio.shield(pending)
        fut: asyncio.Future[Session] = asyncio.get_running_loop().create_future()
        self._opening[session_id] = fut
        try:
            session = Session(self.db, self.clock, session_id, self.agent, self.model,
                              stream_grace_ms=self.stream_grace_ms, policy=self.policy)
            await session.load()
        except BaseException as exc:
            fut.set_exception(exc)
            fut.exception()  # mark retrieved: the waiters re-raise it
            raise
        finally:
            self._opening.pop(session_id, None)
        self._sessions[session_id] = session
        fut.set_result(session)
        if start:
            session.start()
        return session

    @property
    def has_open_work(self) -> bool:
        return any(s.pending() for s in self._sessions.values())

    @property
    def idle(self) -> bool:
        """No operation running or queued in any loaded session."""
        return all(s.idle for s in self._sessions.values())

    async def close(self) -> None:
        for s in self._sessions.values():
            await s.close()
        await self.db.close()
