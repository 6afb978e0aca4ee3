"""The data dir's small index of instances that may hold unfinished work, and of when each next wakes.

An instance is marked before its first open operation is written and
unmarked once it has none left, so at startup the server reopens only the
instances a crash or a shutdown left with work, without opening every file.
A mark without work (a crash between the two) costs one reopen; work without
a mark cannot happen. (The harness also keeps an instance marked while a chat
socket is connected to it: ``Instance.listed``.)

Writes made while another is in flight wait for it and then go together, in one
transaction: fifty turns starting at once would otherwise queue fifty commits one after
the other, each a trip to an SQLite thread, and their first chunks with them.

Wakes follow the same rule for schedules: an instance's wake (the time its
earliest schedule is due) is lowered before a schedule is written and raised
only after one ran or was cancelled, so the index may wake an instance early
(it finds nothing due and says when it next wakes) but never late.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import os
import sqlite3
import time
from itertools import groupby
from pathlib import Path
from typing import Any

import aiosqlite

from .._batched import BatchedWrites
from .._problems import Problem, StorageError, problem_of
from .._store import WorkIndex
from ._lanes import LaneConnection
from ._problems import is_busy
from ._writefaults import connect

__all__ = ["INDEX_FILE", "SqliteWorkIndex"]

INDEX_FILE = "index.sqlite3"
#: How long a write waits for another process holding the index's lock (sqlite3's default, said here).
BUSY_WAIT_MS = 5000


class SqliteWorkIndex(WorkIndex):
    """The work index in its own SQLite file, ``index.sqlite3`` in the data dir."""

    def __init__(self, conn: aiosqlite.Connection) -> None:
        self._conn = conn
        self._lock = asyncio.Lock()
        self._writes: BatchedWrites[tuple[str, tuple[Any, ...]]] = BatchedWrites(self._commit)

    @classmethod
    async def open(cls, data_dir: Path) -> SqliteWorkIndex:
        await asyncio.to_thread(data_dir.mkdir, parents=True, exist_ok=True)
        path = data_dir / INDEX_FILE
        try:
            conn = await connect(path)
        except sqlite3.Error as exc:
            raise StorageError(f"cannot open {path}: {exc}", problem_of(exc) or Problem.DAMAGED) from exc
        try:
            await conn.execute_fetchall("PRAGMA journal_mode=WAL")  # read to the end: it answers a row
            await conn.execute_fetchall("PRAGMA synchronous=NORMAL")
            await conn.execute_fetchall(
                "CREATE TABLE IF NOT EXISTS active_instances (agent TEXT NOT NULL, name TEXT NOT NULL, "
                "marked_at INTEGER NOT NULL, PRIMARY KEY (agent, name))"
            )
            # Added with schedules: an index written before them gains the table the first time.
            await conn.execute_fetchall(
                "CREATE TABLE IF NOT EXISTS wakes (agent TEXT NOT NULL, name TEXT NOT NULL, "
                "wake_at INTEGER NOT NULL, PRIMARY KEY (agent, name))"
            )
            # A table of that name with other columns (another program's file) fails here, not later.
            async with conn.execute("SELECT agent, name, marked_at FROM active_instances LIMIT 1"):
                pass
            async with conn.execute("SELECT agent, name, wake_at FROM wakes LIMIT 1"):
                pass
            # From here on a write does not wait inside SQLite (it runs on the event loop): one that
            # finds another process's lock goes to the lane's thread, which waits (``_apply``).
            await conn.execute_fetchall("PRAGMA busy_timeout=0")
        except BaseException as exc:
            await conn.close()  # its thread would keep the process alive
            if isinstance(exc, sqlite3.Error):
                raise StorageError(f"cannot use the work index {path} (delete it to rebuild): {exc}",
                                   problem_of(exc) or Problem.DAMAGED) from exc
            raise
        return cls(conn)

    @staticmethod
    def set_aside(data_dir: Path) -> Path:
        """Move a damaged index (and its -wal, -shm) out of the way, for a new one; where it went."""
        path = data_dir / INDEX_FILE
        aside = path.with_name(f"{INDEX_FILE}.damaged-{int(time.time())}")
        for suffix in ("", "-wal", "-shm"):
            with contextlib.suppress(FileNotFoundError):
                os.replace(f"{path}{suffix}", f"{aside}{suffix}")
        return aside

    async def mark(self, agent: str, name: str, now: int) -> None:
        await self._write(
            "INSERT INTO active_instances (agent, name, marked_at) VALUES (?, ?, ?) "
            "ON CONFLICT (agent, name) DO NOTHING",
            (agent, name, now),
        )

    async def unmark(self, agent: str, name: str) -> None:
        await self._write("DELETE FROM active_instances WHERE agent = ? AND name = ?", (agent, name))

    async def marked(self) -> list[tuple[str, str]]:
        try:
            async with self._conn.execute("SELECT agent, name FROM active_instances ORDER BY marked_at") as cur:
                return [(str(r[0]), str(r[1])) for r in await cur.fetchall()]
        except sqlite3.Error as exc:  # a damaged page the opening checks did not read
            raise StorageError(f"cannot read the work index: {exc}", problem_of(exc) or Problem.DAMAGED) from exc

    async def set_wake(self, agent: str, name: str, wake_at: int | None) -> None:
        """When the instance next has a schedule due (ms); None: it has none."""
        if wake_at is None:
            await self._write("DELETE FROM wakes WHERE agent = ? AND name = ?", (agent, name))
        else:
            await self._write(
                "INSERT INTO wakes (agent, name, wake_at) VALUES (?, ?, ?) "
                "ON CONFLICT (agent, name) DO UPDATE SET wake_at = excluded.wake_at",
                (agent, name, wake_at),
            )

    async def wakes(self) -> list[tuple[str, str, int]]:
        """Every instance with a schedule: (agent, name, when it next wakes), the earliest first."""
        try:
            async with self._conn.execute("SELECT agent, name, wake_at FROM wakes ORDER BY wake_at") as cur:
                return [(str(r[0]), str(r[1]), int(r[2])) for r in await cur.fetchall()]
        except sqlite3.Error as exc:
            raise StorageError(f"cannot read the work index: {exc}", problem_of(exc) or Problem.DAMAGED) from exc

    async def close(self) -> None:
        await self._writes.drain()
        async with self._lock:
            await self._conn.close()

    async def _write(self, sql: str, params: tuple[Any, ...]) -> None:
        """One statement, committed with whatever else was asked for meanwhile, in order."""
        await self._writes.write((sql, params))

    async def _commit(self, batch: list[tuple[str, tuple[Any, ...]]]) -> None:
        async with self._lock:
            await self._commit_locked(batch)

    async def _commit_locked(self, batch: list[tuple[str, tuple[Any, ...]]]) -> None:
        # The batch is one call on the connection's lane (its statements, and its transaction
        # when it has more than one), made on the event loop when the lane is idle: a mark or an
        # unmark is on every turn's path, and with a few turns at once the batch's BEGIN, rows and
        # COMMIT took a trip to a worker thread each (7.5% of the event loop's samples, most of it
        # handing the GIL over, in the bench kit's actors workload). Every cursor is made and closed
        # in that call: one left to the collector is freed (and its statement reset) on whatever
        # thread drops it, while the lane may be running the next statement, and SQLite then says
        # "bad parameter or other API misuse" (seen once in a benchmark).
        conn = self._conn
        if isinstance(conn, LaneConnection):
            try:
                # Without waiting inside SQLite (the connection's busy timeout is 0): another process
                # holding the file's lock (none should) sends the batch to the thread, which waits.
                if conn.run_now(functools.partial(_apply, batch=batch, wait=False))[0]:
                    return
            except sqlite3.OperationalError as exc:
                if not is_busy(exc):
                    raise
        await conn._execute(lambda: _apply(conn._conn, batch, True))  # type: ignore[no-untyped-call]


def _run(c: sqlite3.Connection, sql: str, params: tuple[Any, ...] = ()) -> None:
    cursor = c.execute(sql, params)
    try:
        cursor.fetchall()  # to its end: a pragma answers a row
    finally:
        cursor.close()


def _apply(c: sqlite3.Connection, batch: list[tuple[str, tuple[Any, ...]]], wait: bool) -> None:
    """The batch's writes, committed together (on the lane's thread, or the loop's); ``wait`` (on the
    thread only): for another process's lock, up to ``BUSY_WAIT_MS``, else not at all (the
    connection's busy timeout, 0: no statement of its own on the loop's path). Nothing is written if
    it raises."""
    if wait:
        _run(c, f"PRAGMA busy_timeout={BUSY_WAIT_MS}")
    try:
        if len(batch) == 1:
            _run(c, *batch[0])  # autocommit
            return
        _run(c, "BEGIN IMMEDIATE")
        try:
            for sql, same in groupby(batch, key=lambda write: write[0]):
                c.executemany(sql, [params for _, params in same]).close()
            _run(c, "COMMIT")
        except BaseException:
            if c.in_transaction:
                with contextlib.suppress(sqlite3.Error):
                    _run(c, "ROLLBACK")
            raise
    finally:
        if wait:
            _run(c, "PRAGMA busy_timeout=0")
