"""Recovery at start: reopen, in the background, the instances the work index lists.

The port opens at once; a few instances at a time (``recovery_concurrency``)
are reopened, which resumes their work (the harness recovers it on load), and
:meth:`progress` (the server's ``/readyz``) reports it until every one was tried. An instance a
client asks for before its turn is simply opened then (the registry opens an
instance once, however many ask); its turn here finds it open. One that is
found with no work left (a crash after its work ended) is taken off the index.
When the open-instance cap is reached by busy instances, the rest wait for room.
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import logging
from collections import deque

from think_server.storage import LeaseHeld

from ._registry import CapacityError, InstanceRegistry

__all__ = ["RecoveryState", "StartupRecovery"]

log = logging.getLogger("think_server.recovery")

# Waits for room when every open instance is busy: from this, doubling, up to a second.
_FIRST_WAIT_S = 0.05
_LONGEST_WAIT_S = 1.0


class RecoveryState(enum.Enum):
    WAITING = "waiting"  # the work index is not read yet
    RUNNING = "running"
    DONE = "done"


class StartupRecovery:
    def __init__(self, registry: InstanceRegistry, concurrency: int) -> None:
        self._registry = registry
        self._concurrency = max(1, concurrency)
        self.state = RecoveryState.WAITING
        self.total = 0
        self.done = 0  # tried: reopened, or failed (then logged by the registry)
        self.failed = 0
        self._task: asyncio.Task[None] | None = None

    @property
    def finished(self) -> bool:
        return self.state is RecoveryState.DONE

    def progress(self) -> dict[str, int]:
        out = {"done": self.done, "total": self.total}
        if self.failed:
            out["failed"] = self.failed
        return out

    def start(self, marked: list[tuple[str, str]]) -> None:
        if self.state is not RecoveryState.WAITING:
            raise RuntimeError(f"recovery: expected state waiting, got {self.state.value}")
        keys = [k for k in marked if k[0] in self._registry.agents]
        for agent, name in marked:
            if agent not in self._registry.agents:
                log.warning("the work index lists %s/%s, but this server has no agent %r; left for a server "
                            "that has it", agent, name, agent)
        self.total = len(keys)
        self.state = RecoveryState.RUNNING
        if not keys:
            self.state = RecoveryState.DONE
            return
        log.info("recovering %d instance(s) the work index lists (unfinished work, or a client connected) in the "
                 "background, %d at a time", len(keys), self._concurrency)
        self._task = asyncio.create_task(self._run(deque(keys)), name="startup-recovery")

    async def _run(self, keys: deque[tuple[str, str]]) -> None:
        async def worker() -> None:
            while keys:
                await self._one(*keys.popleft())
                self.done += 1

        await asyncio.gather(*(worker() for _ in range(min(self._concurrency, len(keys)))))
        self.state = RecoveryState.DONE
        log.info("recovery done: %d instance(s) reopened, %d could not be", self.done - self.failed, self.failed)

    async def _one(self, agent: str, name: str) -> None:
        wait = _FIRST_WAIT_S
        while True:
            try:
                instance = await self._registry.get(agent, name)
            except CapacityError:
                await asyncio.sleep(wait)  # every open instance is busy: wait for one to finish
                wait = min(wait * 2, _LONGEST_WAIT_S)
                continue
            except LeaseHeld:
                return  # a cluster: another live node serves it (its work goes on there)
            except Exception:
                self.failed += 1  # the registry said why, once
                return
            break
        await instance.settle_work()

    async def close(self) -> None:
        if self._task is not None and not self._task.done():
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
