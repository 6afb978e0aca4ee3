"""The shared base of the statement groups: one aiosqlite connection, opened again when needed."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Protocol

import aiosqlite

__all__ = ["Access", "Link", "Params"]

Params = Sequence[Any] | Mapping[str, Any]


class Link(Protocol):
    """The connection statements run on: ``conn`` while it is open (None while the file
    sleeps), ``wake()`` to open it again, ``users`` the statements under way."""

    conn: aiosqlite.Connection | None
    users: int

    async def wake(self) -> aiosqlite.Connection: ...


class _InUse:
    """The link's connection, opened if the file sleeps, counted in ``users`` while a statement
    runs on it: the file does not go to sleep under a statement. A class, not a generator: it
    is entered for every statement."""

    __slots__ = ("_link",)

    def __init__(self, link: Link) -> None:
        self._link = link

    async def __aenter__(self) -> aiosqlite.Connection:
        link = self._link
        conn = link.conn or await link.wake()
        link.users += 1
        return conn

    async def __aexit__(self, *exc: object) -> None:
        self._link.users -= 1


class Access:
    """Statements run on the link's connection. Subclasses group them by concern."""

    def __init__(self, link: Link) -> None:
        self._in_use = _InUse(link)

    async def _fetchall(self, sql: str, params: Params = ()) -> list[aiosqlite.Row]:
        async with self._in_use as conn, conn.execute(sql, params) as cur:
            return list(await cur.fetchall())

    async def _fetchone(self, sql: str, params: Params = ()) -> aiosqlite.Row | None:
        async with self._in_use as conn, conn.execute(sql, params) as cur:
            return await cur.fetchone()

    async def _execute(self, sql: str, params: Params = ()) -> int:
        """Run one statement; the number of rows it changed."""
        async with self._in_use as conn, conn.execute(sql, params) as cur:
            return cur.rowcount

    async def _executemany(self, sql: str, rows: Iterable[Sequence[Any]]) -> None:
        async with self._in_use as conn:
            await conn.executemany(sql, rows)
