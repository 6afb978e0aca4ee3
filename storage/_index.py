"""The data dir's small index of instances that may hold unfinished work.

An instance is marked when it is activated and unmarked when it closes with
nothing open, so at startup the server reopens only the instances a crash or
a shutdown left with work, without opening every file.
"""

from __future__ import annotations

import asyncio
import sqlite3
from pathlib import Path

import aiosqlite

from ._db import StorageError

__all__ = ["WorkIndex"]

INDEX_FILE = "index.sqlite3"


class WorkIndex:
    def __init__(self, conn: aiosqlite.Connection) -> None:
        self._conn = conn
        self._lock = asyncio.Lock()

    @classmethod
    async def open(cls, data_dir: Path) -> WorkIndex:
        await asyncio.to_thread(data_dir.mkdir, parents=True, exist_ok=True)
        path = data_dir / INDEX_FILE
        try:
            conn = await aiosqlite.connect(path, isolation_level=None)
        except sqlite3.Error as exc:
            raise StorageError(f"cannot open {path}: {exc}") from exc
        try:
            await conn.execute("PRAGMA journal_mode=WAL")
            await conn.execute("PRAGMA synchronous=NORMAL")
            await conn.execute(
                "CREATE TABLE IF NOT EXISTS active_instances (agent TEXT NOT NULL, name TEXT NOT NULL, "
                "marked_at INTEGER NOT NULL, PRIMARY KEY (agent, name))"
            )
        except BaseException as exc:
            await conn.close()  # its thread would keep the process alive
            if isinstance(exc, sqlite3.Error):
                raise StorageError(f"cannot use the work index {path} (delete it to rebuild): {exc}") from exc
            raise
        return cls(conn)

    async def mark(self, agent: str, name: str, now: int) -> None:
        async with self._lock:
            await self._conn.execute(
                "INSERT INTO active_instances (agent, name, marked_at) VALUES (?, ?, ?) "
                "ON CONFLICT (agent, name) DO NOTHING",
                (agent, name, now),
            )

    async def unmark(self, agent: str, name: str) -> None:
        async with self._lock:
            await self._conn.execute("DELETE FROM active_instances WHERE agent = ? AND name = ?", (agent, name))

    async def marked(self) -> list[tuple[str, str]]:
        async with self._conn.execute("SELECT agent, name FROM active_instances ORDER BY marked_at") as cur:
            return [(r[0], r[1]) for r in await cur.fetchall()]

    async def close(self) -> None:
        async with self._lock:
            await self._conn.close()
