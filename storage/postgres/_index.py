"""The work index in the shared database: which instances may hold unfinished work
(``active_instances``), and when each next wakes for a schedule (``wakes``), both keyed by the
instance's id (what the index promises: :class:`~think_server.storage.WorkIndex`).

An instance the index names gets its row in ``instances`` if it has none yet (the index is
told of an instance that is open, so it has one; the statement makes sure). Each write is one
statement, one round trip; writes made while another is in flight wait for it and then go
together, in order, in one transaction.
"""

from __future__ import annotations

import time
from itertools import groupby
from typing import Any

import asyncpg

from .._batched import BatchedWrites
from .._problems import Problem, StorageError, problem_of
from .._store import WorkIndex
from ._pool import Pool

__all__ = ["PostgresWorkIndex"]

# Each write is one statement. One that adds a row makes the instance's row first if it has none
# (``$4``: when), in the same statement: the row it made, else the one there (the SELECT does not see
# a row the INSERT makes; nor one another server made after the statement began: then the instance
# is NULL, the statement fails, and the batch is tried again, as every write here may be).
_ID = "(SELECT id FROM instances WHERE agent = $1 AND name = $2)"
_MADE = ("WITH made AS (INSERT INTO instances (agent, name, created_at) VALUES ($1, $2, $4) "
         "ON CONFLICT (agent, name) DO NOTHING RETURNING id) ")
_EITHER = f"coalesce((SELECT id FROM made), {_ID})"
# Each write: the statement, and whether it adds a row (then it takes ``$4``, the time).
_MARK = (f"{_MADE}INSERT INTO active_instances (instance, marked_at) SELECT {_EITHER}, $3 "
         "ON CONFLICT (instance) DO NOTHING", True)
# A delete is fenced as the writes of an instance are, by its lease: a node that lost the instance
# (stopped, then back) must not delete the mark or the wake the node that took over made, or the
# takeover scan would miss the instance if that node died in turn. ``$3``: this node's id (NULL: a
# store of no node, which no live lease of another may let delete).
_NOT_ANOTHERS = ("AND NOT EXISTS (SELECT 1 FROM leases l WHERE l.instance = t.instance AND l.expires_at >= now() "
                 "AND l.owner IS DISTINCT FROM $3)")
_UNMARK = (f"DELETE FROM active_instances t WHERE t.instance = {_ID} {_NOT_ANOTHERS}", False)
_SET_WAKE = (f"{_MADE}INSERT INTO wakes (instance, wake_at) SELECT {_EITHER}, $3 "
             "ON CONFLICT (instance) DO UPDATE SET wake_at = excluded.wake_at", True)
_CLEAR_WAKE = (f"DELETE FROM wakes t WHERE t.instance = {_ID} {_NOT_ANOTHERS}", False)

_Write = tuple[tuple[str, bool], tuple[Any, ...]]


class PostgresWorkIndex(WorkIndex):
    """The work index of every instance in the database (every server on it sees the same one)."""

    def __init__(self, pool: Pool, *, node: str | None = None) -> None:
        self._pool = pool
        #: The id of the node this server is (the owner its leases name), for the fenced deletes.
        self._node = node
        self._writes: BatchedWrites[_Write] = BatchedWrites(self._commit)

    async def mark(self, agent: str, name: str, now: int) -> None:
        await self._write(_MARK, (agent, name, now))

    async def unmark(self, agent: str, name: str) -> None:
        await self._write(_UNMARK, (agent, name, self._node))

    async def marked(self) -> list[tuple[str, str]]:
        rows = await self._read("SELECT i.agent, i.name FROM active_instances a JOIN instances i ON i.id = a.instance "
                                "ORDER BY a.marked_at, a.instance")
        return [(str(r[0]), str(r[1])) for r in rows]

    async def set_wake(self, agent: str, name: str, wake_at: int | None) -> None:
        if wake_at is None:
            await self._write(_CLEAR_WAKE, (agent, name, self._node))
        else:
            await self._write(_SET_WAKE, (agent, name, wake_at))

    async def wakes(self) -> list[tuple[str, str, int]]:
        rows = await self._read("SELECT i.agent, i.name, w.wake_at FROM wakes w JOIN instances i ON i.id = w.instance "
                                "ORDER BY w.wake_at, w.instance")
        return [(str(r[0]), str(r[1]), int(r[2])) for r in rows]

    async def close(self) -> None:
        await self._writes.drain()

    async def _read(self, sql: str) -> list[asyncpg.Record]:
        try:
            return await self._pool.fetch(sql)
        except asyncpg.PostgresError as exc:
            raise StorageError(f"cannot read the work index: {exc}", problem_of(exc) or Problem.DAMAGED) from exc

    async def _write(self, statement: tuple[str, bool], params: tuple[Any, ...]) -> None:
        """One statement, committed with whatever else was asked for meanwhile, in order."""
        await self._writes.write((statement, params))

    async def _commit(self, batch: list[_Write]) -> None:
        """The batch in order: one statement, or one pipelined run of one (``executemany``, atomic), needs
        no transaction of its own; several kinds go in one. Tried once more if an instance's row was
        made meanwhile by another server (see ``_MARK``): every write here can be run twice."""
        now = int(time.time() * 1000)
        runs = [(sql, [(*params, now) if adds else params for _, params in same])
                for (sql, adds), same in groupby(batch, key=lambda write: write[0])]
        for attempt in range(2):
            try:
                async with self._pool.connection() as conn:
                    if len(runs) == 1 and len(runs[0][1]) == 1:
                        await conn.execute(runs[0][0], *runs[0][1][0])
                    elif len(runs) == 1:
                        await conn.executemany(*runs[0])
                    else:
                        async with conn.transaction():
                            for sql, rows in runs:
                                await conn.executemany(sql, rows)
                return
            except asyncpg.NotNullViolationError:
                if attempt:
                    raise

    def __repr__(self) -> str:
        return "PostgresWorkIndex()"
