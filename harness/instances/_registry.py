"""The instance registry: opens an agent instance on first use, closes idle ones.

At most ``max_instances`` instances are open or being opened (fewer if the host
lowers the cap: the server does when the file descriptor limit allows fewer). The place of a new one
is taken in the same synchronous step that decides it is needed (in :meth:`get`,
before anything awaits), so a burst of sockets to new instances cannot overshoot
the cap; an instance closed to make room is closed before the new one opens, and an
instance still closing is opened again only once its storage is closed. Room is made from the
least recently used idle instances first, then from those only followers watch
(:meth:`Instance.watch`: event streams, which end and come back).

An instance whose storage cannot be used (damaged, another application's, newer)
is remembered with its store's stamp (SQLite: the file's size and time): until it
changes, asking for it again answers the same error without opening it or logging again.

In a cluster (a store with leases, see ``_leases``): an instance is opened only once this node
took its lease, before anything of it is read for a write (recovery included); the leases of
every instance open or opening are renewed in one statement every third of the lease time, and
one is released when its instance closes, so that another node may take it at once. An instance
whose lease is lost (a renew, a fenced write or :meth:`Lease.ensure` says so) is stopped at once:
the ``on_lost`` listeners hear it before the next await (the server closes its sockets), its
running turns are cut short without writing, and it closes. Opening an instance another live node
holds raises :class:`~think_server.storage.LeaseHeld`, naming that node.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import time
from collections.abc import Callable, Mapping
from typing import Any

from think_server.storage import (
    Lease,
    LeaseHeld,
    Leases,
    StorageError,
    Store,
    WorkIndex,
    driver_errors,
    problem_of,
)

from .._clock import Clock
from .._input import InputPolicy
from .._logcontext import current_agent, current_instance
from .._model import Model
from ..agent import Agent
from ..memory import HistoryBudget
from ..session import ModelCache, StartGate
from ._instance import Instance

__all__ = ["CapacityError", "InstanceRegistry"]

log = logging.getLogger("think_server.registry")


_Key = tuple[str, str]


class CapacityError(RuntimeError):
    """No room for another open agent instance."""


class InstanceRegistry:
    def __init__(self, store: Store, agents: Mapping[str, Agent], models: Mapping[str, Model], *,
                 max_instances: int, idle_timeout_s: float, stream_grace_ms: int, policy: InputPolicy,
                 budget: HistoryBudget, clock: Clock, hibernate_after_s: float = 0.0) -> None:
        #: The transcripts all open instances keep in memory, together.
        self.history_budget = budget
        #: Every instance's sessions starting at once: a turn that started lets them start first.
        self.starts = StartGate()
        self._stream_grace_ms = stream_grace_ms
        self._policy = policy
        self._clock = clock
        self._index: WorkIndex | None = None
        #: Where every instance's data lives.
        self.store = store
        self.agents = agents
        self._models = models
        #: Models turns choose by a spec string at run time (a hook, a model function), closed with the registry.
        self.model_cache = ModelCache()
        self._idle_timeout_s = idle_timeout_s
        self._hibernate_after_s = hibernate_after_s
        #: The harness these instances belong to (its sessions' tools may drive other instances).
        self.host: Any = None
        #: Called with each instance as it opens, before its work resumes (a host attaches here).
        self.on_open: list[Callable[[Instance], None]] = []
        #: Called with each instance once it is closed.
        self.on_closed: list[Callable[[Instance], None]] = []
        # Least recently used first: an instance's touch moves it to the end (:meth:`_used`), so
        # making room reads the front of it, not all of it (at the cap, every new instance makes room).
        self._open: dict[_Key, Instance] = {}
        # Each activation in progress holds one of the places from the moment it is asked for.
        self._activating: dict[_Key, asyncio.Task[Instance]] = {}
        # Closes in progress. One closed by the sweeper keeps its place in _actors until it is
        # closed; one closed to make room gives its place to the activation that waits for it.
        self._closing: dict[_Key, asyncio.Task[None]] = {}
        # Callers of get() still waiting for an activation: until they have their instance (and
        # hold it) it looks idle, and must not be closed under them.
        self._waiters: dict[_Key, int] = {}
        self._sweeper: asyncio.Task[None] | None = None
        self._closed = False
        #: The cap on open instances, and what sets it (lowered by :meth:`cap`).
        self.max_instances = max_instances
        self.capped_by = "max_instances"
        # Instances whose storage cannot be used, with the store's stamp of it when that was found.
        self._broken: dict[_Key, tuple[StorageError, object]] = {}
        #: This node's leases (None: a store one server holds alone); set before the first activation.
        self.leases: Leases | None = None
        # The lease of each instance open, opening or closing, renewed together.
        self._leases: dict[_Key, Lease] = {}
        self._renewer: asyncio.Task[None] | None = None
        #: Called with an instance the moment its lease is found lost, before it closes: stop every
        #: effect of it now (the server closes its sockets).
        self.on_lost: list[Callable[[Instance], None]] = []

    def cap(self, max_instances: int, why: str) -> None:
        """Open at most ``max_instances`` instances (fewer than configured): ``why`` names the limit."""
        if max_instances < self.max_instances:
            self.max_instances, self.capped_by = max_instances, why

    @property
    def index(self) -> WorkIndex | None:
        """The store's work index, once :meth:`open_index` opened it (None without one)."""
        return self._index

    async def exists(self, agent: str, name: str) -> bool:
        """Whether the instance is open or has storage: asking never creates it."""
        return self.active(agent, name) is not None or await self.store.exists(agent, name)

    def active(self, agent: str, name: str) -> Instance | None:
        key = (agent, name)
        return None if key in self._closing else self._open.get(key)

    @property
    def activating(self) -> int:
        """Activations in progress (each counts against ``max_instances`` like an open instance)."""
        return len(self._activating)

    async def get(self, agent: str, name: str) -> Instance:
        """The instance ``agent``/``name``, opened if needed (once, however many ask at once).

        Raises :class:`CapacityError` when the cap is reached and no open instance is idle.
        """
        key = (agent, name)
        while key in self._closing:
            with contextlib.suppress(Exception):
                await asyncio.shield(self._closing[key])
        instance = self._open.get(key)
        if instance is not None:
            instance.touch()
            return instance
        if self._closed:
            raise RuntimeError("the server is shutting down")
        task = self._activating.get(key)
        if task is None:
            self._check_broken(key)
            evicted = self._reserve()
            task = asyncio.create_task(self._activate(agent, name, evicted))
            self._activating[key] = task
        self._waiters[key] = self._waiters.get(key, 0) + 1
        try:
            return await asyncio.shield(task)
        finally:
            left = self._waiters[key] - 1
            if left:
                self._waiters[key] = left
            else:
                del self._waiters[key]

    async def open_index(self) -> list[tuple[str, str]]:
        """Open the store's work index: the instances it lists (work a crash or a stop left open).

        A damaged index is set aside and a new one started; one that cannot be opened at all
        (a full or read-only disk) leaves the server without it. Either way the server starts,
        and instances with unfinished work resume when they are next opened.
        """
        index = await self._open_index()
        if index is not None:
            try:
                marked = await index.marked()
            except StorageError as exc:
                await index.close()
                index = await self._replace_index(exc)
                marked = []
        else:
            marked = []
        self._index = index
        return marked

    async def _open_index(self) -> WorkIndex | None:
        try:
            return await self.store.open_index()
        except StorageError as exc:
            if exc.problem.transient:
                log.error("cannot open the work index, serving without it (instances with unfinished work resume "
                          "when they are next opened; their work is not recorded for the next start): %s", exc)
                return None
            return await self._replace_index(exc)

    async def _replace_index(self, exc: StorageError) -> WorkIndex | None:
        aside = await self.store.set_index_aside()
        log.error("the work index is damaged (%s); it was moved to %s and a new one started. Instances with "
                  "unfinished work it listed resume when they are next opened", exc, aside)
        try:
            return await self.store.open_index()
        except StorageError as again:
            log.error("cannot start a new work index, serving without it: %s", again)
            return None

    async def _on_work(self, agent: str, name: str, opened: bool) -> None:
        """The harness says an instance got open work (before writing it), or has none left."""
        index = self._index
        if index is None:
            return
        if opened:
            await index.mark(agent, name, int(time.time() * 1000))
        else:
            await index.unmark(agent, name)

    def _check_broken(self, key: _Key) -> None:
        """Raise the error of storage found unusable, unless it changed since."""
        known = self._broken.get(key)
        if known is None:
            return
        error, stamp = known
        if self.store.stamp(*key) != stamp:
            del self._broken[key]  # replaced or repaired: try it again
            return
        raise StorageError(str(error), error.problem)

    def _activation_failed(self, key: _Key, exc: BaseException) -> StorageError | None:
        """Log why an instance could not be opened, once per unusable storage; the error for its clients."""
        problem = problem_of(exc)
        if problem is None:
            log.exception("cannot open %s/%s", *key)
            return None
        error = exc if isinstance(exc, StorageError) else StorageError(f"cannot open {key[0]}/{key[1]}: {exc}",
                                                                        problem)
        if problem.transient:
            log.warning("cannot open %s/%s: %s", key[0], key[1], error)
        else:
            self._broken[key] = (error, self.store.stamp(*key))
            log.error("cannot open %s/%s, and will not try again until its file changes: %s", key[0], key[1], error)
        return error

    def _evictable(self, key: _Key, instance: Instance) -> bool:
        return instance.idle and key not in self._closing and key not in self._waiters

    def _reclaimable(self, key: _Key, instance: Instance) -> bool:
        return instance.reclaimable and key not in self._closing and key not in self._waiters

    def _reserve(self) -> list[asyncio.Task[None]]:
        """Take a place for one more instance, synchronously: close the least recently used idle
        instances if the cap is reached (their closes are returned, to be awaited before opening);
        refuse if not enough of them are idle."""
        over = len(self._open) + len(self._activating) + 1 - self.max_instances
        if over <= 0:
            return []
        # The idle ones first, then those only followers watch (they come back), each least recently
        # used first: the order of _open, whose front is idle but for a few held or watched ones.
        idle: list[Instance] = []
        for idle_pass in (True, False):  # the idle ones, then the only-watched ones
            for k, a in self._open.items():
                if len(idle) == over:
                    break
                if a.idle is idle_pass and self._reclaimable(k, a):
                    idle.append(a)
        if len(idle) < over:
            raise CapacityError(
                f"this server has {len(self._open) + len(self._activating)} agent instances open or opening, "
                f"the most {self.capped_by} allows, and all are busy; try again later"
            )
        return [self._start_close((a.agent_name, a.name), a, keep_place=False) for a in idle]

    def _used(self, key: _Key) -> None:
        """The instance ``key`` was just used: the end of ``_open`` (the most recently used)."""
        instance = self._open.pop(key, None)
        if instance is not None:
            self._open[key] = instance

    def _start_close(self, key: _Key, instance: Instance, *, keep_place: bool) -> asyncio.Task[None]:
        if not keep_place:
            del self._open[key]
        task = asyncio.create_task(self._close_then_release(key, instance))
        self._closing[key] = task
        return task

    async def _close_then_release(self, key: _Key, instance: Instance) -> None:
        try:
            await self._close_instance(instance)
        except Exception:
            log.exception("closing %s/%s failed", instance.agent_name, instance.name)
        finally:
            del self._closing[key]
            if self._open.get(key) is instance:
                del self._open[key]

    async def _activate(self, agent: str, name: str, evicted: list[asyncio.Task[None]]) -> Instance:
        key = (agent, name)
        try:
            # This task's context is copied into the session worker it starts: its logs name the instance.
            current_agent.set(agent)
            current_instance.set(name)
            if evicted:
                # Their places are ours: at no point are more instances open than the cap.
                await asyncio.gather(*(asyncio.shield(t) for t in evicted))
            try:
                db = await self.store.open(agent, name)
            except driver_errors(StorageError, OSError) as exc:
                error = self._activation_failed(key, exc)
                if error is None or error is exc:
                    raise
                raise error from exc
            lease = await self._take_lease(key, db)
            instance = Instance(db, self.agents[agent], self._models[agent], self._clock,
                                stream_grace_ms=self._stream_grace_ms, policy=self._policy,
                                on_work=functools.partial(self._on_work, agent, name), budget=self.history_budget,
                                key=key, list_connected=self.leases is None)
            instance.models = self.model_cache
            instance.host = self.host
            instance.starts = self.starts
            if lease is not None:
                lease.on_lost.append(lambda _: self._lost(key, instance))
            try:
                for hook in list(self.on_open):
                    hook(instance)
                await instance.recover()  # after the hooks: what resumes reaches the host's listeners
                if lease is not None and lease.lost is not None:
                    raise lease.error()  # lost while it recovered: never served here
            except BaseException:
                await instance.close()
                self._notify_closed(instance)
                await self._release_lease(key, lease)
                raise
            instance.on_touch = functools.partial(self._used, key)
            instance.touch()  # used now: the end of _open is where it belongs
            self._open[key] = instance
            self._ensure_sweeper()
            return instance
        finally:
            # In the same synchronous step as the insert above: the place is never counted twice.
            del self._activating[key]

    async def _close_instance(self, instance: Instance) -> None:
        # The index heard when its work ended (or it still has some: then it stays listed).
        try:
            await instance.close()
        finally:
            self._notify_closed(instance)
            await self._release_lease((instance.agent_name, instance.name), instance.db.lease)

    # -- leases ------------------------------------------------------------------

    async def _take_lease(self, key: _Key, db: Any) -> Lease | None:
        """This node's lease of the instance (None without leases); LeaseHeld if a live node holds it."""
        if self.leases is None:
            return None
        try:
            lease = await self.leases.take(db)
        except BaseException as exc:
            await db.close()
            if isinstance(exc, LeaseHeld):
                log.debug("%s/%s is served by %s (%s)", key[0], key[1], exc.owner, exc.address)
            elif isinstance(exc, Exception):
                log.warning("cannot take the lease of %s/%s: %s", key[0], key[1], exc)
            raise
        self._leases[key] = lease
        self._ensure_renewer()
        return lease

    async def _release_lease(self, key: _Key, lease: Lease | None) -> None:
        if lease is None or self.leases is None:
            return
        if self._leases.get(key) is lease:
            del self._leases[key]
        if lease.lost is None:
            try:
                await self.leases.release(lease)
            except Exception as exc:  # it expires by itself: another node waits the lease time, no longer
                log.warning("could not release the lease of %s/%s: %s", key[0], key[1], exc)

    def _lost(self, key: _Key, instance: Instance) -> None:
        """The instance's lease is lost: stop every effect of it now, and close it."""
        log.warning("%s/%s: this node lost its lease (%s); stopping it", key[0], key[1],
                    instance.db.lease.lost if instance.db.lease is not None else "")
        instance.halt()
        for hook in list(self.on_lost):
            try:
                hook(instance)
            except Exception:
                log.exception("on_lost hook failed for %s/%s", key[0], key[1])
        if self._open.get(key) is instance and key not in self._closing:
            self._start_close(key, instance, keep_place=True)

    def _ensure_renewer(self) -> None:
        if self._renewer is None or self._renewer.done():
            self._renewer = asyncio.create_task(self._renew_loop(), name="lease-renewer")

    async def _renew_loop(self) -> None:
        assert self.leases is not None
        # A third of the lease time: one renewal may fail (a dropped connection, a slow database)
        # and the next still lands with a third of the lease to spare.
        interval = self.leases.node.lease_s / 3
        while self._leases and not self._closed:
            await asyncio.sleep(interval)
            await self.renew_leases()

    async def renew_leases(self) -> list[Lease]:
        """Renew every lease this node holds, in one statement; the ones lost (their instances stop)."""
        if self.leases is None:
            return []
        held = [lease for lease in self._leases.values() if lease.lost is None]
        try:
            return await self.leases.renew(held)
        except Exception as exc:
            log.warning("could not renew this node's %d lease(s): %s", len(held), exc)
            late = [lease for lease in held if not lease.held]
            for lease in late:  # another node may have taken them by now: stop serving them
                lease.lose("not renewed in time (the database could not be reached)")
            return late

    def _notify_closed(self, instance: Instance) -> None:
        for hook in list(self.on_closed):
            try:
                hook(instance)
            except Exception:
                log.exception("on_closed hook failed for %s/%s", instance.agent_name, instance.name)

    def _ensure_sweeper(self) -> None:
        if self._sweeper is None or self._sweeper.done():
            self._sweeper = asyncio.create_task(self._sweep_loop())

    async def _sweep_loop(self) -> None:
        hibernate = self._hibernate_after_s
        interval = max(0.05, min(30.0, self._idle_timeout_s / 2, hibernate / 2 if hibernate > 0 else 30.0))
        while self._open and not self._closed:
            await asyncio.sleep(interval)
            await self.close_idle(time.monotonic() - self._idle_timeout_s)
            if hibernate > 0:
                try:
                    await self.hibernate_idle(time.monotonic() - hibernate)
                except Exception:  # housekeeping: the sweep that closes idle instances goes on
                    log.exception("hibernating idle instances failed")

    async def hibernate_idle(self, unused_since: float) -> int:
        """Let instances idle and unused since ``unused_since`` (monotonic seconds) put their storage
        to sleep and drop their transcripts; they stay open. How many did."""
        slept = 0
        for key, instance in list(self._open.items()):
            if (self._evictable(key, instance) and instance.last_used <= unused_since
                    and not instance.db.asleep and await instance.hibernate()):
                slept += 1
        if slept:
            self.store.trim_memory()
        return slept

    async def close_idle(self, unused_since: float) -> int:
        """Close instances idle and unused since ``unused_since`` (monotonic seconds)."""
        closes = [self._start_close(key, instance, keep_place=True) for key, instance in list(self._open.items())
                  if self._evictable(key, instance) and instance.last_used <= unused_since]
        if closes:
            await asyncio.gather(*(asyncio.shield(t) for t in closes))
        return len(closes)

    def __len__(self) -> int:
        return len(self._open)

    def hibernating(self) -> int:
        """Open instances whose storage sleeps until their next use."""
        return sum(1 for instance in self._open.values() if instance.db.asleep)

    async def close(self) -> None:
        self._closed = True
        for background in (self._sweeper, self._renewer):
            if background is not None:
                background.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await background
        for task in list(self._activating.values()):
            with contextlib.suppress(Exception):
                await task
        for closing in list(self._closing.values()):
            with contextlib.suppress(Exception):
                await closing
        instances, self._open = list(self._open.values()), {}
        for instance in instances:
            try:
                await self._close_instance(instance)
            except Exception:
                log.exception("closing %s/%s failed", instance.agent_name, instance.name)
        if self._index is not None:
            index, self._index = self._index, None
            await index.close()
        await self.model_cache.aclose()
