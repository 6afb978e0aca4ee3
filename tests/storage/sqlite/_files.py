"""What the SQLite backend's tests ask of an open file: that it writes and reads, and its connection's settings."""

from __future__ import annotations

from think_server.storage.sqlite import SqliteDatabase

#: What every open file's connection is set to (``settings`` reads these).
SET = {"journal_mode": "wal", "synchronous": 1, "foreign_keys": 1, "busy_timeout": 0, "cache_size": -64}
SETTINGS = tuple(SET)


async def writes_and_reads(db: SqliteDatabase, session_id: str = "s") -> None:
    """A transaction commits on ``db`` and a read finds what it wrote."""
    async with db.transaction() as tx:
        await tx.ensure_session(session_id, 1)
    assert await db.read.session(session_id) is not None


async def settings(db: SqliteDatabase) -> dict[str, object]:
    """The open connection's pragmas that every file's connection sets (``_db._CONNECTION``)."""
    assert db.conn is not None
    return {p: (await db.conn.execute_fetchall(f"PRAGMA {p}"))[0][0]  # type: ignore[index]
            for p in SETTINGS}
