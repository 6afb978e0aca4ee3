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


class Access:
    """Statements run on the link's connection. Subclasses group them by concern."""

    def __init__(self, link: Link) -> None:
        self._link = link

    async def _fetchall(self, sql: str, params: Params = ()) -> list[aiosqlite.Row]:
        link = self._link
        conn = link.conn or await link.wake()
        link.users += 1  # counted from here: the file does not go to sleep under a statement
        try:
            async with conn.execute(sql, params) as cur:
                return list(await cur.fetchall())
        finally:
            link.users -= 1

    async def _fetchone(self, sql: str, params: Params = ()) -> aiosqlite.Row | None:
        link = self._link
        conn = link.conn or await link.wake()
        link.users += 1
        try:
            async with conn.execute(sql, params) as cur:
                return await cur.fetchone()
        finally:
            link.users -= 1

    async def _execute(self, sql: str, params: Params = ()) -> int:
        """Run one statement; the number of rows it changed."""
        link = self._link
        conn = link.conn or await link.wake()
        link.users += 1
        try:
            async with conn.execute(sql, params) as cur:
                return cur.rowcount
        finally:
            link.users -= 1

    async def _executemany(self, sql: str, rows: Iterable[Sequence[Any]]) -> None:
        link = self._link
        conn = link.conn or await link.wake()
        link.users += 1
        try:
            await conn.executemany(sql, rows)
        finally:
            link.users -= 1

