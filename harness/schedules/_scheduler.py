"""The one task that runs schedules: it sleeps until the earliest instance is due, then fires it.

Instances close when idle, so the scheduler keeps, for each instance with
schedules, when it next wakes: in memory, and in the data dir's index so that a
restart knows without opening every file. The index is lowered *before* a
schedule is written and raised only after one ran or was cancelled, so it may
wake an instance early (it finds nothing due and says when it next wakes) but
never late. An instance missing from the index (the index was lost or damaged)
is learned of when it is next opened, for whatever reason.

At start, whatever fell due while the server was down is due now: it fires once.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging

from think_server.storage import LeaseHeld, StorageError

from .._clock import Clock
from ..instances import CapacityError, Instance, InstanceRegistry
from ._firing import fire_due

__all__ = ["Scheduler"]

log = logging.getLogger("think_server.scheduler")

_Key = tuple[str, str]

#: The longest sleep: the wall clock may jump (a suspended laptop, NTP), and sleeping is monotonic.
_LONGEST_SLEEP_S = 30.0
#: An instance that could not take a run now (no room to open it, its session's queue full) tries again after:
_RETRY_MS = 1000
#: An instance whose file cannot be opened (the registry logged why) is tried again after:
_BROKEN_RETRY_MS = 60_000


class Scheduler:
    def __init__(self, registry: InstanceRegistry, clock: Clock, concurrency: int) -> None:
        self._registry = registry
        self._clock = clock
        self._concurrency = max(1, concurrency)
        #: When each instance with schedules next wakes (ms): the earliest due time of its schedules.
        self.wakes: dict[_Key, int] = {}
        self._lock = asyncio.Lock()  # one wake is read from a file and written to the index at a time
        self._changed = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._syncs: set[asyncio.Task[None]] = set()
        #: Runs submitted since start (for /readyz and tests).
        self.fired = 0

    async def start(self) -> None:
        """Read the wakes the index holds and start the task (once the registry opened the index)."""
        index = self._registry.index
        if index is not None:
            try:
                for agent, name, at in await index.wakes():
                    if agent in self._registry.agents:  # another server's agents are left to it
                        self.wakes[(agent, name)] = at
            except StorageError as exc:
                log.error("cannot read the schedules' wake times from the work index (instances' schedules "
                          "run once each instance is next opened): %s", exc)
        self._registry.on_open.append(self._opened)
        if self.wakes:
            log.info("%d instance(s) have schedules; the first wakes in %.1f s", len(self.wakes),
                     max(0, min(self.wakes.values()) - self._clock.now_ms()) / 1000)
        self._task = asyncio.create_task(self._run(), name="scheduler")

    async def close(self) -> None:
        for task in [self._task, *self._syncs]:
            if task is not None and not task.done():
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
        self._task = None

    # -- keeping the wakes ------------------------------------------------------------

    async def lower(self, key: _Key, at: int) -> None:
        """Before a schedule due at ``at`` is written: the instance wakes by then at the latest."""
        async with self._lock:
            current = self.wakes.get(key)
            if current is not None and current <= at:
                return
            self.wakes[key] = at
            self._changed.set()
            await self._write(key, at)

    async def sync(self, key: _Key, instance: Instance) -> None:
        """After schedules of the instance changed or ran: its wake is when its earliest one is due."""
        async with self._lock:
            at = None if instance.db.fresh else await instance.db.read.next_schedule_at()
            if self.wakes.get(key) == at:
                return
            if at is None:
                self.wakes.pop(key, None)
            else:
                self.wakes[key] = at
            self._changed.set()
            await self._write(key, at)

    async def _write(self, key: _Key, at: int | None) -> None:
        index = self._registry.index
        if index is None:
            return
        try:
            await index.set_wake(*key, at)
        except Exception as exc:  # this life keeps the wake in memory; a restart finds it once opened
            log.warning("could not record when %s/%s next wakes in the work index: %s", *key, exc)

    def _opened(self, instance: Instance) -> None:
        # An instance the index does not list (a lost index) is learned of now.
        task = asyncio.create_task(self._sync_opened(instance))
        self._syncs.add(task)
        task.add_done_callback(self._syncs.discard)

    async def _sync_opened(self, instance: Instance) -> None:
        try:
            await self.sync((instance.agent_name, instance.name), instance)
        except Exception as exc:  # closed meanwhile, say: the next open tries again
            log.debug("could not read the schedules of %s/%s: %s", instance.agent_name, instance.name, exc)

    # -- the loop -------------------------------------------------------------------------

    async def _run(self) -> None:
        while True:
            self._changed.clear()  # before reading the wakes: a change from now on wakes the sleep below
            now = self._clock.now_ms()
            due = [key for key, at in self.wakes.items() if at <= now]
            if due:
                await self._fire_all(due)
                continue
            earliest = min(self.wakes.values(), default=None)
            sleep = _LONGEST_SLEEP_S if earliest is None else min(_LONGEST_SLEEP_S, (earliest - now) / 1000)
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(sleep):
                    await self._changed.wait()

    async def _fire_all(self, due: list[_Key]) -> None:
        gate = asyncio.Semaphore(self._concurrency)

        async def one(key: _Key) -> None:
            async with gate:
                try:
                    await self._fire(key)
                except Exception:
                    log.exception("running the schedules of %s/%s failed; tried again shortly", *key)
                    self._retry(key, _RETRY_MS)

        await asyncio.gather(*(one(key) for key in due))

    async def _fire(self, key: _Key) -> None:
        if not await self._registry.exists(*key):
            # Its storage was deleted: opening it would create an empty one.
            log.warning("%s/%s had schedules, but its file is gone; forgetting them", *key)
            async with self._lock:
                self.wakes.pop(key, None)
                await self._write(key, None)
            return
        try:
            instance = await self._registry.get(*key)
        except CapacityError:
            self._retry(key, _RETRY_MS)  # every open instance is busy: wait for one to finish
            return
        except LeaseHeld:
            # A cluster: the node that serves it fires its schedules (the lease makes it one node). If
            # that node dies, the takeover scan finds the wake due and opens it here or elsewhere.
            self.wakes.pop(key, None)
            return
        except Exception:
            self._retry(key, _BROKEN_RETRY_MS)  # the registry said why, once
            return
        release = instance.hold()
        try:
            ran, deferred = await fire_due(instance, self._clock.now_ms())
            self.fired += ran
            await self.sync(key, instance)
        finally:
            release()
        if deferred:
            self._retry(key, _RETRY_MS)

    def _retry(self, key: _Key, after_ms: int) -> None:
        """Try the instance again later (in memory only: the index keeps it due, so a restart runs it)."""
        at = self.wakes.get(key)
        if at is not None:
            self.wakes[key] = max(at, self._clock.now_ms() + after_ms)
