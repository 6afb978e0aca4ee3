"""The PostgreSQL store: every instance of every server that shares one database, each a row of
``instances`` and its rows, keyed by it, in every other table (see ``_schema``)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence

import asyncpg

from .._leases import Lease, Leases, Node
from .._names import validate_agent_name, validate_instance_name
from .._problems import StorageError
from .._store import Database, Store, WorkIndex
from ._db import PostgresDatabase
from ._group import GroupCommit
from ._index import PostgresWorkIndex
from ._leases import PostgresLeases
from ._pool import Pool, safe_url
from ._schema import migrate
from ._tx import group_commit

__all__ = ["DEFAULT_POOL_SIZE", "PostgresStore"]

#: Connections a server keeps to the database at most. Small: a statement takes one for a
#: round trip, a transaction for its few; PostgreSQL spends a process on each.
DEFAULT_POOL_SIZE = 10

# The instance's id, and whether this statement made its row. (The SELECT does not see a row the
# INSERT makes: one row comes back, unless another server made it meanwhile: then none, and it is
# asked again.)
_OPEN = """
WITH made AS (
  INSERT INTO instances (agent, name, created_at) VALUES ($1, $2, $3) ON CONFLICT (agent, name) DO NOTHING RETURNING id
)
SELECT id, true FROM made UNION ALL SELECT id, false FROM instances WHERE agent = $1 AND name = $2
"""


class PostgresStore(Store):
    """The instances in the database at ``url`` (``postgresql://user:password@host:port/database``),
    over at most ``pool_size`` connections.

    Many servers may share one database: :meth:`start` takes nothing for itself, and migrates the
    schema once, whichever server starts first. A server of a cluster asks for :meth:`leases`
    (before :meth:`start`): from then on an instance it opens takes no transaction until the node
    took its lease, and every one is fenced by it (``_leases``, ``_tx``).
    """

    def __init__(self, url: str, *, pool_size: int = DEFAULT_POOL_SIZE) -> None:
        if not url.startswith(("postgresql://", "postgres://")):
            raise ValueError(f"a PostgreSQL URL starts with postgresql://; got {safe_url(url)[:80]!r}")
        self.url = url
        self.pool_size = pool_size
        self._pool: Pool | None = None
        #: Commits the lone chunk-group appends of every instance together (``_group``).
        self.group: GroupCommit | None = None
        self._starting = asyncio.Lock()
        self._node: Node | None = None
        self._leases: PostgresLeases | None = None

    def leases(self, node: Node) -> Leases:
        """``node``'s leases of instances (once, before :meth:`start`: the connections it makes then end
        a session left idle inside a transaction for the lease time, so that a stopped node's fence
        does not keep a taker waiting)."""
        if self._node is not None and self._node != node:
            raise RuntimeError(f"this store serves node {self._node.id!r}; asked for the leases of {node.id!r}")
        if self._pool is not None and self._node is None:
            raise RuntimeError("ask for the leases before the store starts")
        self._node = node
        return _LazyLeases(self, node)

    async def start(self) -> None:
        """Connect, and bring the database's schema up to date (StorageError: newer, or not ours)."""
        async with self._starting:
            if self._pool is not None:
                return
            node = self._node
            pool = Pool(self.url, self.pool_size,
                        idle_in_transaction_s=None if node is None else max(2.0, node.lease_s))
            try:
                conn = await pool.acquire()
                try:
                    await migrate(conn, safe_url(self.url))
                finally:
                    pool.release(conn)
            except BaseException:
                await pool.close()
                raise
            self._pool = pool
            self.group = group_commit(pool)
            if node is not None:
                self._leases = PostgresLeases(pool, node)

    async def _ready(self) -> Pool:
        if self._pool is None:
            await self.start()
        assert self._pool is not None
        return self._pool

    def check_free(self) -> None:
        """Nothing to check: servers share the database (no server holds it for itself)."""

    async def open(self, agent: str, name: str) -> Database:
        validate_agent_name(agent)
        validate_instance_name(name)
        pool = await self._ready()
        for _ in range(3):
            rows = await pool.fetch(_OPEN, agent, name, int(time.time() * 1000))
            if rows:
                return PostgresDatabase(pool, int(rows[0][0]), agent, name, fresh=bool(rows[0][1]),
                                        needs_lease=self._node is not None, group=self.group)
        raise StorageError(f"the row of {agent}/{name} was made by another server, and then not found")

    async def exists(self, agent: str, name: str) -> bool:
        validate_agent_name(agent)
        validate_instance_name(name)
        pool = await self._ready()
        return bool(await pool.fetch("SELECT 1 FROM instances WHERE agent = $1 AND name = $2", agent, name))

    def stamp(self, agent: str, name: str) -> object:
        """A constant: nothing outside the server replaces one instance's rows the way a file is replaced.
        An instance found unusable for a lasting reason is tried again after the server restarts."""
        return None

    async def open_index(self) -> WorkIndex:
        return PostgresWorkIndex(await self._ready(), node=self._node.id if self._node is not None else None)

    async def set_index_aside(self) -> str:
        return "nowhere (the work index is tables of the database, kept as they are)"

    async def check_writable(self) -> str | None:
        try:
            pool = await self._ready()
            rows = await pool.fetch("SELECT pg_is_in_recovery(), current_setting('transaction_read_only') = 'on'")
        except (StorageError, asyncpg.PostgresError, asyncpg.InterfaceError, OSError) as exc:
            return f"the database cannot be reached: {exc}"
        standby, read_only = rows[0]
        if standby:
            return "the database is a standby (read-only)"
        if read_only:
            return "the database takes no writes (default_transaction_read_only is on)"
        return None

    def memory_used(self) -> int | None:
        return None  # the database server's memory, not this process's

    def trim_memory(self) -> None:
        """Nothing: an instance holds no memory of the backend's here."""

    async def close(self) -> None:
        pool, self._pool = self._pool, None
        if pool is not None:
            await pool.close()

    async def started_leases(self) -> PostgresLeases:
        await self._ready()
        assert self._leases is not None, "leases() was not asked for"
        return self._leases

    def __repr__(self) -> str:
        return f"PostgresStore({safe_url(self.url)!r}, pool_size={self.pool_size})"


class _LazyLeases:
    """The store's leases, usable once it started (its pool exists only then).

    Structurally a :class:`Leases`, not a subclass: a method missing here would inherit the
    protocol's empty body, a silent None; mypy checks it where it is returned as one.
    """

    def __init__(self, store: PostgresStore, node: Node) -> None:
        self._store = store
        self.node = node

    async def take(self, db: Database) -> Lease:
        return await (await self._store.started_leases()).take(db)

    async def renew(self, leases: Sequence[Lease]) -> list[Lease]:
        return await (await self._store.started_leases()).renew(leases)

    async def release(self, lease: Lease) -> None:
        await (await self._store.started_leases()).release(lease)

    async def holder(self, agent: str, name: str) -> tuple[str, str] | None:
        return await (await self._store.started_leases()).holder(agent, name)

    async def orphans(self, now_ms: int) -> list[tuple[str, str]]:
        return await (await self._store.started_leases()).orphans(now_ms)
