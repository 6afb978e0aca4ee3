"""Takeover in a cluster: work whose node died is taken over even if no client comes back.

Every ``interval_s`` a node asks the store for instances with open work (the work index) or a
wake due (a schedule) whose lease expired or that have none, and opens the ones of its agents:
opening takes the lease (a node that loses the race hears :class:`LeaseHeld` and leaves it), and
runs the same crash recovery a restart runs: the same message continues, each tool's recovery rule
holds, a due schedule fires (the scheduler hears of every instance opened). So a dead node's work
resumes within its lease time plus one interval.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time

from think_server.storage import LeaseHeld, Leases

from ._registry import CapacityError, InstanceRegistry

__all__ = ["Takeover"]

log = logging.getLogger("think_server.takeover")


class Takeover:
    def __init__(self, registry: InstanceRegistry, leases: Leases, interval_s: float) -> None:
        self._registry = registry
        self._leases = leases
        self.interval_s = interval_s
        self._task: asyncio.Task[None] | None = None
        #: Instances this node took over (for logs and tests).
        self.taken = 0

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.create_task(self._run(), name="takeover")

    async def _run(self) -> None:
        while True:
            await asyncio.sleep(self.interval_s)
            try:
                await self.scan()
            except Exception as exc:  # the database is away, say: the next scan tries again
                log.warning("scanning for work nobody serves failed: %s", exc)

    async def scan(self) -> int:
        """Open the instances whose work nobody serves (of this node's agents); how many it took."""
        taken = 0
        for agent, name in await self._leases.orphans(int(time.time() * 1000)):
            if agent not in self._registry.agents or self._registry.active(agent, name) is not None:
                continue
            try:
                instance = await self._registry.get(agent, name)
            except (LeaseHeld, CapacityError):
                continue  # another node was first; or no room here now (the next scan, or another node)
            except Exception as exc:  # the registry said why
                log.debug("could not take over %s/%s: %s", agent, name, exc)
                continue
            log.info("took over %s/%s: its node stopped serving it", agent, name)
            taken += 1
            with contextlib.suppress(Exception):
                await instance.settle_work()  # found with nothing open (it ended as its node died)
        self.taken += taken
        return taken

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
