"""Leases in the shared database: one row per instance in ``leases`` (its owner, the owner's
address, the epoch, until when), taken by compare-and-set that bumps the epoch, with the
database's clock the only clock (statements measured in spec/CLUSTER.md).

The fence itself is in ``_tx`` (every write transaction of a leased instance locks the lease row
``FOR SHARE`` at the epoch it was taken at, through ``fence()`` of ``_schema``); a taker's update
waits for such a transaction to end, and a transaction that comes after the takeover finds the
epoch changed and is refused (SQLSTATE :data:`FENCE_STATE`).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence

import asyncpg

from .._leases import Lease, LeaseHeld, LeaseLost, Node
from .._problems import StorageError
from .._store import Database
from ._pool import Pool

__all__ = ["FENCE_STATE", "PostgresLeases", "is_fence_error"]

#: The SQLSTATE ``fence()`` raises for a write whose epoch is no longer the lease's (a class of our own).
FENCE_STATE = "TL001"
#: How long a take waits for a row lock before it counts the lease as held: a node stopped inside a
#: transaction holds its fence until the database ends its session (``idle_in_transaction_session_timeout``).
TAKE_TIMEOUT_S = 5.0

# Taken: (epoch, NULL, NULL). Held by a live node: (NULL, owner, address). Neither: the row was
# taken by another node after this statement's snapshot (the SELECT does not see it): asked again.
_TAKE = """
WITH taken AS (
  INSERT INTO leases AS l (instance, owner, address, epoch, expires_at)
  VALUES ($1, $2, $3, 1, now() + make_interval(secs => $4))
  ON CONFLICT (instance) DO UPDATE SET owner = excluded.owner, address = excluded.address,
    epoch = l.epoch + 1, expires_at = excluded.expires_at
  WHERE l.expires_at < now() OR l.owner = excluded.owner
  RETURNING epoch
)
SELECT epoch, NULL::text AS owner, NULL::text AS address FROM taken
UNION ALL
SELECT NULL, owner, address FROM leases WHERE instance = $1 AND NOT EXISTS (SELECT 1 FROM taken)
"""
# Every lease of this node at once; the ones it still holds come back.
_RENEW = """
UPDATE leases AS l SET expires_at = now() + make_interval(secs => $2)
FROM unnest($3::bigint[], $4::bigint[]) AS h(instance, epoch)
WHERE l.instance = h.instance AND l.epoch = h.epoch AND l.owner = $1
RETURNING l.instance
"""
# Expired now (the row stays: the next taker bumps the epoch it holds).
_RELEASE = "UPDATE leases SET expires_at = '-infinity' WHERE instance = $1 AND epoch = $2 AND owner = $3"
_HOLDER = """
SELECT l.owner, l.address FROM instances i JOIN leases l ON l.instance = i.id
WHERE i.agent = $1 AND i.name = $2 AND l.expires_at >= now()
"""
_ORPHANS = """
SELECT i.agent, i.name FROM instances i
WHERE i.id IN (SELECT instance FROM active_instances UNION SELECT instance FROM wakes WHERE wake_at <= $1)
  AND NOT EXISTS (SELECT 1 FROM leases l WHERE l.instance = i.id AND l.expires_at >= now())
ORDER BY i.id LIMIT 1000
"""


def is_fence_error(exc: BaseException) -> bool:
    """Whether ``exc`` is ``fence()``'s refusal: the write's epoch is stale."""
    return isinstance(exc, asyncpg.PostgresError) and getattr(exc, "sqlstate", None) == FENCE_STATE


class PostgresLeases:
    """The leases of ``node`` over ``pool`` (see the module).

    Structurally a :class:`Leases`, not a subclass: a method missing here would inherit the
    protocol's empty body, a silent None; mypy checks it where it is returned as one.
    """

    def __init__(self, pool: Pool, node: Node) -> None:
        self._pool = pool
        self.node = node

    async def take(self, db: Database) -> Lease:
        instance: int = db.instance  # type: ignore[attr-defined]  # a PostgresDatabase's id
        agent, name = db.agent, db.name  # type: ignore[attr-defined]
        for _ in range(3):
            sent = time.monotonic()
            try:
                async with asyncio.timeout(TAKE_TIMEOUT_S):
                    rows = await self._pool.fetch(_TAKE, instance, self.node.id, self.node.address, self.node.lease_s)
            except TimeoutError:
                raise LeaseHeld(agent, name, "unknown (a node holds a write of it open)", "") from None
            if rows and rows[0]["epoch"] is not None:
                lease = Lease(instance, (agent, name), int(rows[0]["epoch"]), sent + self.node.lease_s)
                lease.confirm = self._confirm
                db.lease = lease
                return lease
            if rows:
                raise LeaseHeld(agent, name, str(rows[0]["owner"]), str(rows[0]["address"]))
            await asyncio.sleep(0)
        raise StorageError(f"the lease of {agent}/{name} changed hands three times while this node asked for it")

    async def renew(self, leases: Sequence[Lease]) -> list[Lease]:
        if not leases:
            return []
        sent = time.monotonic()
        rows = await self._pool.fetch(_RENEW, self.node.id, self.node.lease_s, [lease.instance for lease in leases],
                                      [lease.epoch for lease in leases])
        kept = {int(r[0]) for r in rows}
        lost = []
        for lease in leases:
            if lease.instance in kept:
                lease.valid_until = sent + self.node.lease_s
            else:
                lost.append(lease)
                lease.lose("another node took it over, or it expired and was taken")
        return lost

    async def _confirm(self, lease: Lease) -> None:
        await self.renew([lease])

    async def release(self, lease: Lease) -> None:
        if lease.lost is not None:
            return
        lease.lost = "released"  # no listener: the instance is closing by this node's own choice
        async with self._pool.connection() as conn:
            await conn.execute(_RELEASE, lease.instance, lease.epoch, self.node.id)

    async def holder(self, agent: str, name: str) -> tuple[str, str] | None:
        rows = await self._pool.fetch(_HOLDER, agent, name)
        return (str(rows[0][0]), str(rows[0][1])) if rows else None

    async def orphans(self, now_ms: int) -> list[tuple[str, str]]:
        rows = await self._pool.fetch(_ORPHANS, now_ms)
        return [(str(r[0]), str(r[1])) for r in rows]

    def __repr__(self) -> str:
        return f"PostgresLeases({self.node.id!r})"


def stale(lease: Lease, exc: BaseException) -> LeaseLost:
    """The error of a fenced statement ``fence()`` refused; the lease is lost from now on."""
    lease.lose(f"a write was refused: the lease's epoch is no longer {lease.epoch}")
    return lease.error()
