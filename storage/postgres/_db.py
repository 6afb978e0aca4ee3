"""One instance's storage in the shared database: its reads, its transactions, its blobs.

The concurrency model: reads of settled rows take a pooled connection each (and are tried again
on a new one if theirs was lost). :meth:`PostgresDatabase.transaction` holds an asyncio lock per
instance from its start to its commit, on one pooled connection (taken when it first talks to the
database: see ``_tx``), so the transactions of one instance never interleave (its actor is its
one writer, as with SQLite); other instances' transactions run beside it on the pool's other
connections.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
from collections.abc import AsyncIterator

from .._faults import ACTIVE as FAULTS
from .._leases import Lease
from .._problems import Problem, StorageError
from .._statements import Reader, Tx
from .._store import Database
from ._base import ReadLink
from ._blocks import PostgresBlockReads, PostgresBlockWrites
from ._compactions import PostgresCompactionReads, PostgresCompactionWrites
from ._faultylink import FaultyLink
from ._folds import FOLDS
from ._group import GroupCommit
from ._messages import PostgresMessageReads, PostgresMessageWrites
from ._operations import PostgresOperationReads, PostgresOperationWrites
from ._pool import Pool
from ._schedules import PostgresScheduleReads, PostgresScheduleWrites
from ._search import PostgresSearchReads
from ._sessions import PostgresSessionReads, PostgresSessionWrites
from ._streams import GROUPED, PostgresStreamReads, PostgresStreamWrites
from ._tool_calls import PostgresToolCallReads, PostgresToolCallWrites
from ._tx import TxLink
from ._workspace import PostgresWorkspaceReads, PostgresWorkspaceWrites

__all__ = ["PostgresDatabase", "PostgresReader", "PostgresTx"]

class PostgresReader(PostgresBlockReads, PostgresCompactionReads, PostgresMessageReads, PostgresOperationReads,
                     PostgresScheduleReads, PostgresSearchReads, PostgresSessionReads, PostgresStreamReads,
                     PostgresToolCallReads, PostgresWorkspaceReads, Reader):
    """Every read statement, in SQL."""


class PostgresTx(PostgresReader, PostgresBlockWrites, PostgresCompactionWrites, PostgresMessageWrites,
                 PostgresOperationWrites, PostgresScheduleWrites, PostgresSessionWrites, PostgresStreamWrites,
                 PostgresToolCallWrites, PostgresWorkspaceWrites, Tx):
    """Every statement, in SQL, inside one open transaction."""


class PostgresDatabase(Database):
    """One instance's rows, ``instance`` the id every one of them is keyed by."""

    def __init__(self, pool: Pool, instance: int, agent: str, name: str, *, fresh: bool,
                 needs_lease: bool = False, group: GroupCommit | None = None) -> None:
        self.pool = pool
        #: The instance's id (its row in ``instances``): the first column of every key.
        self.instance = instance
        self.agent = agent
        self.name = name
        self.read: Reader = PostgresReader(ReadLink(self))
        self._link = TxLink(pool, instance)
        self._link.folds = FOLDS
        if group is not None:  # (the store's: a chunk group commits with other instances')
            self._link.group, self._link.grouped = group, GROUPED
        plan = FAULTS  # None unless THINK_FAULTS is set (tests only)
        self._faulty = None if plan is None else FaultyLink(self._link, plan)
        self._tx: Tx = PostgresTx(self._faulty or self._link)
        self._lock = asyncio.Lock()
        self._closed = False
        self._asleep = False
        #: Made by this open, and nothing written since: every read would find nothing.
        self.fresh = fresh
        # Opened by a node of a cluster (the store gave out leases): no transaction without the lease.
        self._needs_lease = needs_lease

    @property
    def lease(self) -> Lease | None:
        """The lease every transaction is fenced by (``_tx``), once the node took it."""
        return self._link.lease

    @lease.setter
    def lease(self, lease: Lease | None) -> None:
        self._link.lease = lease

    def check_open(self) -> None:
        """Raise if closed; else a statement is about to run: the instance is awake (see :meth:`sleep`)."""
        if self._closed:
            raise StorageError(f"{self.agent}/{self.name}'s storage is closed", Problem.DAMAGED)
        self._asleep = False

    @property
    def asleep(self) -> bool:
        return self._asleep

    async def sleep(self) -> bool:
        """Nothing to let go of (an instance holds no connection of its own: the pool is the store's), but
        the instance is noted asleep until its next statement, as on SQLite: the server counts it among
        the hibernating, and does not put it to sleep again at every sweep."""
        if self._closed or self._lock.locked():
            return False
        self._asleep = True
        return True

    async def shrink_memory(self) -> None:
        """Nothing: the caches are the database server's."""

    async def reclaim_free_pages(self) -> None:
        """Nothing: PostgreSQL's autovacuum makes the space deleted rows held usable again."""

    @contextlib.asynccontextmanager
    async def transaction(self) -> AsyncIterator[Tx]:
        """One state change, on one connection taken when it first talks to the database (``_tx``):
        everything inside commits together or not at all."""
        async with self._lock:
            self.check_open()
            link, faulty = self._link, self._faulty
            if link.lease is None and self._needs_lease:
                raise StorageError(f"a transaction of {self.agent}/{self.name} before this node took its lease",
                                   Problem.MOVED)
            link.check_lease()
            self.fresh = False
            link.open = True
            if faulty is not None:
                faulty.writes = []
                faulty.plan.point("begin", faulty.writes)
            try:
                try:
                    yield self._tx
                except BaseException:
                    await link.rollback()
                    raise
                if faulty is not None:
                    faulty.plan.point("before_commit", faulty.writes)
                await link.commit()
            finally:
                link.end()
            if faulty is not None:
                faulty.plan.point("after_commit", faulty.writes)

    def append_now(self, stream_id: str, bodies: list[str], now: int) -> bool:
        """Never: every statement is a round trip to the server (the transaction's way groups it with
        other instances' writes, ``_group``)."""
        return False

    async def put_blob(self, data: bytes) -> str:
        """Committed before it returns (its own statement, outside any transaction), named by its SHA-256."""
        self.check_open()
        name = hashlib.sha256(data).hexdigest()
        async with self.pool.connection() as conn:
            await conn.execute("INSERT INTO blobs (instance, name, data) VALUES ($1, $2, $3) "
                               "ON CONFLICT (instance, name) DO NOTHING", self.instance, name, data)
        return name

    async def read_blob(self, name: str) -> bytes:
        self.check_open()
        rows = await self.pool.fetch("SELECT data FROM blobs WHERE instance = $1 AND name = $2", self.instance, name)
        if not rows:
            raise FileNotFoundError(f"{self.agent}/{self.name} has no blob {name!r}")
        return bytes(rows[0][0])

    async def forget_blob(self, name: str) -> None:
        """Fenced like a transaction (a stale node must not delete what the owner now names); a blob
        put is not: the same bytes get the same name, whoever puts them."""
        async with self.transaction():
            self._link.defer("DELETE FROM blobs WHERE instance = $1 AND name = $2", (self.instance, name))

    async def close(self) -> None:
        async with self._lock:  # once the open transaction ended
            self._closed = True

    def __repr__(self) -> str:
        return f"PostgresDatabase({self.agent!r}, {self.name!r}, instance={self.instance})"

