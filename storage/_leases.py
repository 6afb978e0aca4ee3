"""Ownership of instances in a shared store: a node holds an instance's lease while it serves it.

A store many servers share (PostgreSQL) gives each server (a *node*) :class:`Leases`: a node
takes an instance's lease before it reads anything that leads to a write, renews all it holds on
a timer, and releases one when it closes the instance. A lease is taken by compare-and-set that
bumps its *epoch*, and every write transaction of the instance checks that epoch inside the
transaction (the fence), so a node that lost the lease (it stopped, its renewals were late,
another node took over) can write nothing more: its write raises :class:`LeaseLost`. The
database's clock is the only clock that decides; this process's monotonic clock only tells a
node when it must no longer *assume* it holds a lease (:attr:`Lease.held`), before an effect
the database cannot fence (a model call, a tool call, a frame to a client).

A store one server holds alone (SQLite's data dir) has no leases: ``store.leases(node)`` is None.

::

    leases = store.leases(Node("n1", "http://10.0.0.5:8000", lease_s=10))
    db = await store.open("assistant", "order-1234")
    lease = await leases.take(db)      # LeaseHeld(owner, address) if a live node holds it
    lost = await leases.renew([lease])  # every third of the lease time
    await leases.release(lease)        # at close: another node may take it at once
"""

from __future__ import annotations

import os
import secrets
import socket
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from ._problems import Problem, StorageError

if TYPE_CHECKING:
    from ._store import Database

__all__ = ["DEFAULT_LEASE_S", "Lease", "LeaseHeld", "LeaseLost", "Leases", "Node", "default_node_id"]

#: How long a lease lasts unless renewed: the longest a dead node's instances wait for another node.
DEFAULT_LEASE_S = 10.0


def default_node_id() -> str:
    """Unique per process (host, pid, and randomness: a restarted process with a reused pid is another node)."""
    return f"{socket.gethostname()}-{os.getpid()}-{secrets.token_hex(3)}"


@dataclass(frozen=True, slots=True)
class Node:
    """This server as the other nodes see it: its ``id`` (the owner named in leases), the ``address``
    other nodes and clients reach it at (``http://10.0.0.5:8000``), and how long its leases last."""

    id: str
    address: str
    lease_s: float = DEFAULT_LEASE_S

    def __post_init__(self) -> None:
        if not self.id or len(self.id) > 200 or not self.id.isprintable():
            raise ValueError(f"a node id is 1 to 200 printable characters; got {self.id!r}")
        if not self.lease_s > 0:
            raise ValueError(f"a lease time is a positive number of seconds; got {self.lease_s!r}")


class LeaseLost(StorageError):
    """A write of an instance whose lease this node no longer holds (another node took it over, or
    it expired unrenewed): nothing of it was saved, and nothing more of the instance may be done here."""

    def __init__(self, message: str) -> None:
        super().__init__(message, Problem.MOVED)


class LeaseHeld(StorageError):
    """The instance's lease is held by another live node: ``owner`` (its id), reachable at ``address``."""

    def __init__(self, agent: str, name: str, owner: str, address: str) -> None:
        super().__init__(f"{agent}/{name} is served by node {owner!r} at {address}", Problem.MOVED)
        self.owner = owner
        self.address = address


class Lease:
    """This node's lease on one instance, as last taken or renewed: its ``epoch`` (what every write
    of the instance is fenced by), and until when this process may assume it holds it."""

    def __init__(self, instance: int, key: tuple[str, str], epoch: int, valid_until: float) -> None:
        #: The instance's id in the store.
        self.instance = instance
        #: (agent, instance name).
        self.key = key
        self.epoch = epoch
        #: Monotonic time until which the lease is surely ours: when the statement that took or
        #: renewed it was sent, plus the lease time (the database counts from a later moment).
        self.valid_until = valid_until
        #: Why it was lost (None: not known to be).
        self.lost: str | None = None
        #: Called once, when it is found lost (a renew said so, a fenced write was refused, it was
        #: not renewed in time). Synchronous: whoever listens stops what it does before the next await.
        self.on_lost: list[Callable[[Lease], None]] = []
        #: Renews this one lease now (set by the :class:`Leases` that took it).
        self.confirm: Callable[[Lease], Awaitable[object]] | None = None

    @property
    def held(self) -> bool:
        """Not known lost, and renewed recently enough that no other node can have taken it."""
        return self.lost is None and time.monotonic() < self.valid_until

    def lose(self, why: str) -> None:
        """Mark it lost (once) and tell the listeners; every later write of the instance is refused."""
        if self.lost is not None:
            return
        self.lost = why
        for listener in list(self.on_lost):
            listener(self)

    def error(self) -> LeaseLost:
        agent, name = self.key
        return LeaseLost(f"this node no longer holds the lease of {agent}/{name} (epoch {self.epoch}): "
                         f"{self.lost or 'not renewed in time'}")

    async def ensure(self) -> None:
        """Return if the lease is surely held; else ask the database (a renew of this lease alone),
        and raise :class:`LeaseLost` if it is not ours. Call it before an effect the database cannot
        fence (a model call, a tool call): after a pause (SIGSTOP, a stalled loop) that outlived the
        lease, another node may be serving the instance."""
        if self.lost is not None:
            raise self.error()
        if time.monotonic() < self.valid_until:
            return
        if self.confirm is not None:
            await self.confirm(self)
        if not self.held:
            self.lose("not renewed in time")
            raise self.error()


class Leases(Protocol):
    """A node's leases in a shared store (see the module)."""

    node: Node

    async def take(self, db: Database) -> Lease:
        """Take the lease of ``db``'s instance (free, expired, or this node's own: the epoch goes up
        either way) and fence ``db``'s writes by it; :class:`LeaseHeld` if a live node holds it."""
        ...

    async def renew(self, leases: Sequence[Lease]) -> list[Lease]:
        """Renew every lease given, in one statement; the ones found lost (each also :meth:`Lease.lose`)."""
        ...

    async def release(self, lease: Lease) -> None:
        """Let the lease go (if it is still ours): another node may take it at once."""
        ...

    async def holder(self, agent: str, name: str) -> tuple[str, str] | None:
        """``(owner, address)`` of the live node holding the instance's lease (this node included);
        None if nobody holds it (never opened, released, or expired)."""
        ...

    async def orphans(self, now_ms: int) -> list[tuple[str, str]]:
        """Instances with open work or a wake due by ``now_ms`` whose lease expired or that have none:
        work nobody serves, for a node to take over."""
        ...
