"""The actor registry: activates an instance on first use, closes idle ones."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Mapping
from pathlib import Path

from harness import Agent, Model
from storage import instance_db_path

from ._actor import Actor

__all__ = ["ActorRegistry"]

log = logging.getLogger("think_server.registry")


class ActorRegistry:
    def __init__(
        self,
        data_dir: Path,
        agents: Mapping[str, Agent],
        models: Mapping[str, Model],
        *,
        idle_timeout_s: float = 300.0,
    ) -> None:
        self.data_dir = data_dir
        self.agents = agents
        self._models = models
        self._idle_timeout_s = idle_timeout_s
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

    async def _activate(self, agent: str, name: str) -> Actor:
        actor = await Actor.activate(agent, name, self.path_of(agent, name), self.agents[agent], self._models[agent])
        self._actors[(agent, name)] = actor
        self._ensure_sweeper()
        return actor

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
                await actor.close()
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
                await actor.close()
            except Exception:
                log.exception("closing %s/%s failed", actor.agent_name, actor.name)


