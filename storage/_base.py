"""The shared base of the statement groups: one aiosqlite connection."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import aiosqlite

__all__ = ["Access", "Params"]

Params = Sequence[Any] | Mapping[str, Any]


class Access:
    """Statements run on ``self._conn``. Subclasses group them by concern."""

    def __init__(self, conn: aiosqlite.Connection) -> None:
        self._conn = conn

    async def _fetchall(self, sql: str, params: Params = ()) -> list[aiosqlite.Row]:
        async with self._conn.execute(sql, params) as cur:
            return list(await cur.fetchall())

    async def _fetchone(self, sql: str, params: Params = ()) -> aiosqlite.Row | None:
        async with self._conn.execute(sql, params) as cur:
            return await cur.fetchone()

    async def _execute(self, sql: str, params: Params = ()) -> int:
        """Run one statement; the number of rows it changed."""
        async with self._conn.execute(sql, params) as cur:
            return cur.rowcount

    async def _executemany(self, sql: str, rows: Iterable[Sequence[Any]]) -> None:
        await self._conn.executemany(sql, rows)

