"""The actor registry: activates an instance on first use, closes idle ones."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable, Mapping
from pathlib import Path

from harness import Agent, Model
from storage import WorkIndex, instance_db_path

from ._actor import Actor
from ._logging import current_agent, current_instance
from .settings import Settings

__all__ = ["ActorRegistry", "CapacityError"]

log = logging.getLogger("think_server.registry")


class CapacityError(RuntimeError):
    """No room for another open agent instance."""


class ActorRegistry:
    def __init__(self, data_dir: Path, agents: Mapping[str, Agent], models: Mapping[str, Model],
                 settings: Settings) -> None:
        self.settings = settings
        self._stream_grace_ms = int(settings.stream_grace_s * 1000)
        self._index: WorkIndex | None = None
        self.data_dir = data_dir
        self.agents = agents
        self._models = models
        self._idle_timeout_s = settings.idle_timeout_s
        self.on_activate: Callable[[Actor], None] | None = None
        self._actors: dict[tuple[str, str], Actor] = {}
        self._activating: dict[tuple[str, str], asyncio.Task[Actor]] = {}
        self._sweeper: asyncio.Task[None] | None = None
        self._closed = False

    def path_of(self, agent: str, name: str) -> Path:
        return instance_db_path(self.data_dir, agent, name)

    def active(self, agent: str, name: str) -> Actor | None:
        return self._actors.get((agent, name))

    async def get(self, agent: str, name: str) -> Actor:
        """The actor of ``agent``/``name``, activated if needed (once, however many ask at once)."""
        key = (agent, name)
        actor = self._actors.get(key)
        if actor is not None:
            actor.touch()
            return actor
        if self._closed:
            raise RuntimeError("the server is shutting down")
        task = self._activating.get(key)
        if task is None:
            task = asyncio.create_task(self._activate(agent, name))
            self._activating[key] = task
            task.add_done_callback(lambda _: self._activating.pop(key, None))
        return await asyncio.shield(task)

    async def open_index(self) -> list[tuple[str, str]]:
        """Open the data dir's work index and reactivate what it lists (work a crash or a stop left open)."""
        self._index = await WorkIndex.open(self.data_dir)
        resumed = []
        for agent, name in await self._index.marked():
            if agent not in self.agents:
                log.warning("work index lists %s/%s, but this server has no agent %r", agent, name, agent)
                continue
            try:
                await self.get(agent, name)
                resumed.append((agent, name))
            except Exception:
                log.exception("reactivating %s/%s failed", agent, name)
        return resumed

    async def _make_room(self) -> None:
        """Keep under the cap: close the least recently used idle actors; refuse if none is idle."""
        while len(self._actors) >= self.settings.max_actors:
            idle = [a for a in self._actors.values() if a.idle]
            if not idle:
                raise CapacityError(
                    f"this server has {len(self._actors)} agent instances open (the limit) and all are busy; "
                    "try again later"
                )
            oldest = min(idle, key=lambda a: a.last_used)
            del self._actors[(oldest.agent_name, oldest.name)]
            await self._close_actor(oldest)

    async def _activate(self, agent: str, name: str) -> Actor:
        # This task's context is copied into the session worker it starts: its logs name the instance.
        current_agent.set(agent)
        current_instance.set(name)
        await self._make_room()
        if self._index is not None:
            # Marked before anything can run, so a crash from here on is found at the next start.
            await self._index.mark(agent, name, int(time.time() * 1000))
        actor = await Actor.activate(agent, name, self.path_of(agent, name), self.agents[agent],
                                     self._models[agent], settings=self.settings)
        if self.on_activate is not None:
            self.on_activate(actor)
        self._actors[(agent, name)] = actor
        self._ensure_sweeper()
        return actor

    async def _close_actor(self, actor: Actor) -> None:
        open_work = actor.instance.has_open_work
        await actor.close()
        if self._index is not None and not open_work:
            await self._index.unmark(actor.agent_name, actor.name)

    def _ensure_sweeper(self) -> None:
        if self._sweeper is None or self._sweeper.done():
            self._sweeper = asyncio.create_task(self._sweep_loop())

    async def _sweep_loop(self) -> None:
        interval = max(0.05, min(30.0, self._idle_timeout_s / 2))
        while self._actors and not self._closed:
            await asyncio.sleep(interval)
            await self.close_idle(time.monotonic() - self._idle_timeout_s)

    async def close_idle(self, unused_since: float) -> int:
        """Close actors idle and unused since ``unused_since`` (monotonic seconds)."""
        closed = 0
        for key, actor in list(self._actors.items()):
            if actor.idle and actor.last_used <= unused_since:
                del self._actors[key]
                await self._close_actor(actor)
                closed += 1
        return closed

    def __len__(self) -> int:
        return len(self._actors)

    async def close(self) -> None:
        self._closed = True
        if self._sweeper is not None:
            self._sweeper.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._sweeper
        for task in list(self._activating.values()):
            with contextlib.suppress(Exception):
                await task
        actors, self._actors = list(self._actors.values()), {}
        for actor in actors:
            try:
                await self._close_actor(actor)
            except Exception:
                log.exception("closing %s/%s failed", actor.agent_name, actor.name)
        if self._index is not None:
            await self._index.close()


