"""The shared base of the statement groups: one aiosqlite connection, opened again when needed."""

from __future__ import annotations

import functools
import sqlite3
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Protocol

import aiosqlite

from ._lanes import LaneConnection
from ._places import Places

__all__ = ["OFF_LOOP_CHARS", "Access", "Link", "Params"]

Params = Sequence[Any] | Mapping[str, Any]

#: A value this long (characters: a message carrying an image as a data: URL) is written on a worker
#: thread, not on the loop, and so is the rest of its transaction (``Access._execute``'s ``heavy``).
OFF_LOOP_CHARS = 128 * 1024


class Link(Protocol):
    """The connection statements run on: ``conn`` while it is open (None while the file
    sleeps), ``wake()`` to open it again, ``users`` the statements under way;
    ``make_searchable()`` makes the file's search index if it has none (in a transaction of its own);
    ``leaf_chosen`` False: no session of the file has a leaf chosen by hand (``sessions.active_leaf``);
    ``places`` where each stream's next segment goes (``_places.Places``)."""

    conn: aiosqlite.Connection | None
    users: int
    leaf_chosen: bool
    places: Places

    async def wake(self) -> aiosqlite.Connection: ...

    async def make_searchable(self) -> None: ...


def _changed(conn: sqlite3.Connection, sql: str, params: Params) -> int:
    cursor = conn.execute(sql, params)
    try:
        return cursor.rowcount
    finally:
        cursor.close()


def _rows(conn: sqlite3.Connection, sql: str, params: Params) -> list[Any]:
    cursor = conn.execute(sql, params)
    try:
        return cursor.fetchall()
    finally:
        cursor.close()


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
        self._link = link
        self._in_use = _InUse(link)

    async def _fetchall_by_key(self, sql: str, params: Params = ()) -> list[Any]:
        """A read of a few rows by their key: at once on the loop when the connection is open and its
        lane idle (a few pages, microseconds, where a trip to a worker thread and back costs a hundred
        or more; a turn's submission makes two before its start), else as :meth:`_fetchall`."""
        conn = self._link.conn
        if isinstance(conn, LaneConnection):
            ran, rows = conn.run_now(functools.partial(_rows, sql=sql, params=params))
            if ran and rows is not None:
                return rows
        return await self._fetchall(sql, params)

    # One trip to the file's thread each: aiosqlite's ``execute`` then ``fetchall`` then the
    # cursor's close are three, and a read that waits behind fifty busy files pays each. (The
    # sqlite3 cursor is made and dropped inside that one call, on the lane.)
    async def _fetchall(self, sql: str, params: Params = ()) -> list[aiosqlite.Row]:
        async with self._in_use as conn:
            return list(await conn.execute_fetchall(sql, params))

    async def _fetchone(self, sql: str, params: Params = ()) -> aiosqlite.Row | None:
        """The first row of a statement that answers at most one (a key, an aggregate, LIMIT 1)."""
        async with self._in_use as conn:
            rows = await conn.execute_fetchall(sql, params)
        return next(iter(rows), None)

    async def _execute(self, sql: str, params: Params = (), *, heavy: bool = False) -> int:
        """Run one statement; the number of rows it changed. ``heavy``: it writes a value of
        ``OFF_LOOP_CHARS`` or more: it runs on a worker thread, and so does the rest of the write
        transaction, the COMMIT included (on the loop, a message of 1 MB held it 2.8 ms to be
        written and 1.5 ms more to be committed: every other socket waited)."""
        conn = self._link.conn
        if heavy and isinstance(conn, LaneConnection):
            conn.writing(False)  # (the transaction's end sets it so again)
            async with self._in_use as open_conn:
                if isinstance(open_conn, LaneConnection):
                    return await open_conn.run(functools.partial(_changed, sql=sql, params=params))
        if isinstance(conn, LaneConnection) and conn.runs_here():
            # In a write transaction begun on the loop, with the lane idle: aiosqlite would run it here
            # too, through two futures and a cursor object (the statement, then the cursor's close).
            ran, changed = conn.run_now(functools.partial(_changed, sql=sql, params=params))
            if ran and changed is not None:
                return changed
        # The cursor is closed on the connection's lane (in a write transaction, at once on the
        # loop): one left to the collector would be freed on whatever thread drops it, and reset
        # its statement there, while the lane may be running another on a worker thread.
        async with self._in_use as conn, conn.execute(sql, params) as cur:
            return cur.rowcount

    async def _executemany(self, sql: str, rows: Iterable[Sequence[Any]]) -> None:
        async with self._in_use as conn, conn.executemany(sql, rows):
            pass  # the cursor is closed on the lane
