"""One agent instance: its storage (a :class:`~think_server.storage.Database`) and its sessions."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any, Literal

from think_server.storage import Database, driver_errors

from .._clock import Clock
from .._input import InputPolicy
from .._model import Model
from ..agent import Agent
from ..memory import HistoryBudget
from ..session import ModelCache, OnWork, Session, StartGate, WorkNotices
from ..toolsets import Workspace

__all__ = ["Instance"]

log = logging.getLogger("think_server.instance")

ROOT_SESSION = ""
DEFAULT_STREAM_GRACE_MS = 10 * 60 * 1000


class Instance:
    """The instance ``key`` (agent, name) of ``agent``, on its open storage ``db`` (the registry opens
    it: ``Instance(await store.open(*key), agent, model, key=key)``); ``on_work(opened)`` hears when
    it gets open work and when it has none."""

    def __init__(self, db: Database, agent: Agent, model: Model, clock: Clock | None = None,
                 stream_grace_ms: int = DEFAULT_STREAM_GRACE_MS, policy: InputPolicy | None = None,
                 on_work: OnWork | None = None, budget: HistoryBudget | None = None,
                 key: tuple[str, str] = ("", ""), list_connected: bool = True) -> None:
        self.db = db
        #: (agent, instance name), as the harness addresses it.
        self.agent_name, self.name = key
        #: Models a turn names by a spec string; the registry shares one cache between instances.
        self.models = ModelCache()
        #: Shared by the sessions of every instance of a process: how much transcript memory they hold.
        self.budget = budget or HistoryBudget(0)
        #: Tells ``on_work`` when the instance gets open work and when it has none left (a client
        #: connected counts as open work: :meth:`listed`).
        self.work = WorkNotices(on_work, lambda: self.has_open_work or self._listed > 0)
        self._listed = 0
        self._list_connected = list_connected
        self._closing = False  # halted or closing: what it lists stays as it is, for the next start
        self.stream_grace_ms = stream_grace_ms
        self.policy = policy or InputPolicy()
        self.agent = agent
        self.model = model
        self.clock = clock or Clock()
        self._sessions: dict[str, Session] = {}
        self._opening: dict[str, asyncio.Future[Session]] = {}
        #: Called with each session when it is loaded, before its queue runs: a host (the chat
        #: adapter, metrics) listens from its first event on.
        self.on_session: list[Callable[[Session], None]] = []
        #: Called with a session's id once it is stopped and forgotten (deleted).
        self.on_unload: list[Callable[[str], None]] = []
        self._holds = 0
        self._watches = 0
        self.last_used = time.monotonic()
        #: Called by :meth:`touch` (the registry keeps its instances in the order of their last use).
        self.on_touch: Callable[[], None] | None = None
        #: The instance's file tree (README "Workspace"), with the agent's limits: one for the
        #: instance, so its sessions' tools and code change it one write at a time.
        self.workspace = Workspace(db, self.clock, agent.workspace.limits if agent.workspace else None)
        #: The harness that opened it (set by its registry): its sessions' tools may drive other instances.
        self.host: Any = None
        #: Sessions starting at once, counted for the turns that started (its registry shares one).
        self.starts = StartGate()

    # -- use ------------------------------------------------------------------

    def hold(self) -> Callable[[], None]:
        """Keep the instance open (a socket, a caller at work) until the returned release is called."""
        return self._count("_holds")

    def watch(self) -> Callable[[], None]:
        """Keep the instance open for a follower (an event stream) until the returned release is
        called, as :meth:`hold` does, except when the place is needed: an instance only watched
        is closed before a new one is refused for want of room (its followers end, and come back).
        So followers alone, however many, never keep other instances from opening."""
        return self._count("_watches")

    def _count(self, users: Literal["_holds", "_watches"]) -> Callable[[], None]:
        """One more of ``users``; the release (idempotent) counts it off again."""
        setattr(self, users, getattr(self, users) + 1)
        self.touch()
        released = False

        def release() -> None:
            nonlocal released
            if not released:
                released = True
                setattr(self, users, getattr(self, users) - 1)
                self.touch()

        return release

    async def listed(self) -> Callable[[], Awaitable[None]]:
        """Keep the instance in the work index while a client is connected, as if it had open work;
        the release (idempotent) is awaited once the client has gone.

        A turn the client sends then finds the instance listed: the index's write is made at
        the connect, not between the request and its first chunk (a lone turn's, bench kit:
        2.08 -> 1.82 ms median), and a turn's end writes nothing to the index either. A crash
        now leaves the instances clients were connected to listed too, which the next start
        reopens; their clients reconnect to them anyway. Once no client keeps it and it has no
        open work, the instance is taken off. A mark that fails here is logged; the client's
        first turn marks it then, or refuses to start.

        Not in a store servers share (``list_connected`` false: a cluster), where the index also
        says which instances a dead node left to take over, and only open work should be."""
        if not self._list_connected:
            return _nothing
        self._listed += 1
        try:
            await self.work.opened()
        except asyncio.CancelledError:
            self._listed -= 1
            raise
        except Exception as exc:
            log.warning("instance %s/%s: could not list it in the work index at a connect: %s",
                        self.agent_name, self.name, exc)
        released = False

        async def release() -> None:
            nonlocal released
            if released:
                return
            released = True
            self._listed -= 1
            if not self._closing:  # closed with work interrupted, it must stay listed
                await self.work.settled()  # takes it off only when nothing keeps it listed

        return release

    def touch(self) -> None:
        self.last_used = time.monotonic()
        if self.on_touch is not None:
            self.on_touch()

    @property
    def held(self) -> bool:
        return self._holds > 0

    async def recover(self) -> None:
        """Load every session with work a dead process left open: it runs again."""
        if self.db.fresh:  # storage made just now: no work in it
            return
        for session_id in await self.db.read.sessions_with_open_work():
            await self.session(session_id)

    async def session(self, session_id: str = ROOT_SESSION, *, start: bool = True) -> Session:
        """The session, loaded from storage the first time it is used.

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
                              stream_grace_ms=self.stream_grace_ms, policy=self.policy, work=self.work,
                              budget=self.budget, workspace=self.workspace)
            session.instance_key = (self.agent_name, self.name)
            session.host = self.host
            session.models = self.models
            session.starts = self.starts
            await session.load()
        except BaseException as exc:
            fut.set_exception(exc)
            fut.exception()  # mark retrieved: the waiters re-raise it
            raise
        finally:
            self._opening.pop(session_id, None)
        self._sessions[session_id] = session
        fut.set_result(session)
        for hook in list(self.on_session):
            try:
                hook(session)
            except Exception:  # a host's hook must not keep the session from running
                log.exception("on_session hook failed for session %r", session_id)
        if session.has_open_work:
            # Listed already, unless the index was lost: then it is again. Storage holds the work
            # either way, so a failure here does not keep the instance from running it.
            try:
                await self.work.opened()
            except Exception as exc:
                log.warning("could not list the instance in the work index: %s", exc)
        if start:
            session.start()
        return session

    async def has_session(self, session_id: str) -> bool:
        """Whether the session exists (the root one always does), without loading it."""
        return (session_id == ROOT_SESSION or session_id in self._sessions
                or await self.db.read.session(session_id) is not None)

    def loaded(self, session_id: str) -> Session | None:
        """The session if it is loaded now."""
        return self._sessions.get(session_id)

    async def unload(self, session_id: str) -> None:
        """Stop and forget a loaded session (its rows are the caller's business)."""
        session = self._sessions.pop(session_id, None)
        if session is not None:
            await session.close()
            for hook in list(self.on_unload):
                try:
                    hook(session_id)
                except Exception:
                    log.exception("on_unload hook failed for session %r", session_id)

    @property
    def has_open_work(self) -> bool:
        """An operation is pending, running, being written, or ended without its end written."""
        return any(s.has_open_work for s in self._sessions.values())

    async def settle_work(self) -> None:
        """Take the instance off the work index if it has no open work (once it was reopened for it, say)."""
        await self.work.settled()

    @property
    def idle(self) -> bool:
        """No operation running or queued in any loaded session, and nobody holding or watching it."""
        return not self._watches and self.reclaimable

    @property
    def reclaimable(self) -> bool:
        """No operation running or queued in any loaded session, and nobody holding it (it may be
        watched): it can be closed to make room for another."""
        return not self._holds and all(s.idle for s in self._sessions.values())

    async def hibernate(self) -> bool:
        """If idle: let go of the sessions' transcripts and put its storage to sleep (the next use
        wakes it); whether it did. What SQLite holds for an open file (its prepared statements,
        mostly) is most of what an idle instance costs, and three file descriptors."""
        if not self.idle:
            return False
        for s in self._sessions.values():
            if s.drop_history():
                self.budget.released(s)
        try:
            return await self.db.sleep()
        except driver_errors() as exc:  # SQLite: closing checkpoints the WAL; a full disk, say
            log.warning("instance %s/%s: closing its file to hibernate failed: %s", self.agent_name, self.name, exc)
            return False

    def halt(self) -> None:
        """Stop every session's work now, before the next await (the instance's lease was lost):
        running turns are cut short (their writes are refused anyway), nothing new starts; :meth:`close` follows."""
        self._closing = True
        for s in self._sessions.values():
            s.halt()

    async def close(self) -> None:
        self._closing = True
        for s in self._sessions.values():
            await s.close()
        await self.db.close()


async def _nothing() -> None:
    pass
