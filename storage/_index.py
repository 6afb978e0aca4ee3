"""The data dir's small index of instances that may hold unfinished work.

An instance is marked when it is activated and unmarked when it closes with
nothing open, so at startup the server reopens only the instances a crash or
a shutdown left with work, without opening every file.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import aiosqlite

__all__ = ["WorkIndex"]

INDEX_FILE = "index.sqlite3"


class WorkIndex:
    def __init__(self, conn: aiosqlite.Connection) -> None:
        self._conn = conn
        self._lock = asyncio.Lock()

    @classmethod
    async def open(cls, data_dir: Path) -> WorkIndex:
        await asyncio.to_thread(data_dir.mkdir, parents=True, exist_ok=True)
        conn = await aiosqlite.connect(data_dir / INDEX_FILE, isolation_level=None)
        await conn.execute("PRAGMA journal_mode=WAL")
        await conn.execute("PRAGMA synchronous=NORMAL")
        await conn.execute(
            "CREATE TABLE IF NOT EXISTS active_instances (agent TEXT NOT NULL, name TEXT NOT NULL, "
            "marked_at INTEGER NOT NULL, PRIMARY KEY (agent, name))"
        )
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
