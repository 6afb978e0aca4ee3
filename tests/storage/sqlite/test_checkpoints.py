"""WAL checkpoints: on the file's thread, not inside a commit on the event loop; a file asleep or
closed meanwhile is left so; a failed one is logged."""

from __future__ import annotations

import asyncio
import logging
import sqlite3
import threading
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from think_server.storage.sqlite import SqliteDatabase
from think_server.storage.sqlite._checkpoints import WAL_CHECKPOINT_BYTES


@pytest.fixture
async def db(tmp_path: Path) -> AsyncIterator[SqliteDatabase]:
    database = await SqliteDatabase.open(tmp_path / "a.sqlite3", ("agent", "a"))
    async with database.transaction() as tx:
        await tx.insert_stream("st", "s", "op", "r", "m", False, 0, 1)
    try:
        yield database
    finally:
        await database.close()


def _wal(db: SqliteDatabase) -> Path:
    return db.path.with_name(db.path.name + "-wal")


async def _chunks(db: SqliteDatabase, commits: int) -> int:
    """``commits`` one-chunk commits, each followed by a turn of the loop (as a stream's are); the WAL's
    largest size meanwhile."""
    largest = 0
    for i in range(commits):
        async with db.transaction() as tx:
            await tx.append_chunks("st", ['{"type":"text-delta","id":"t","delta":"ab"}'], i)
        await asyncio.sleep(0)
        largest = max(largest, _wal(db).stat().st_size)
    return largest


async def test_the_wal_is_checkpointed_on_a_worker_thread_and_stays_small(db: SqliteDatabase) -> None:
    ran: list[tuple[str, bool]] = []  # each statement SQLite runs, and whether on the loop's thread
    loop_thread = threading.current_thread()
    assert db.conn is not None
    raw: sqlite3.Connection = db.conn._conn  # type: ignore[attr-defined]  # aiosqlite's sqlite3 connection
    raw.set_trace_callback(lambda sql: ran.append((sql, threading.current_thread() is loop_thread)))

    largest = await _chunks(db, 400)  # about 5 MB of WAL at 3 pages a commit, without checkpoints
    if db.checkpoints.task is not None:
        await db.checkpoints.task

    checkpoints = [on_loop for sql, on_loop in ran if "wal_checkpoint" in sql]
    assert checkpoints, "no checkpoint ran"
    assert not any(checkpoints), "a checkpoint ran on the event loop's thread"
    # The commits themselves did run on the loop (else the test shows nothing about where checkpoints go).
    assert any(on_loop for sql, on_loop in ran if sql == "COMMIT")
    # SQLite checkpoints nothing by itself, inside a COMMIT, and the WAL is emptied past its cap.
    assert await db.conn.execute_fetchall("PRAGMA wal_autocheckpoint") == [(0,)]
    assert largest < 2 * WAL_CHECKPOINT_BYTES


async def test_lone_batches_committed_at_once_keep_the_wal_small_too(db: SqliteDatabase) -> None:
    """A paced stream's chunks commit outside ``transaction()`` (``append_now``): they count too."""
    largest = 0
    for i in range(400):
        if not db.append_now("st", ['{"type":"text-delta","id":"t","delta":"ab"}'], i):
            async with db.transaction() as tx:  # a checkpoint holds the file: the transaction's way
                await tx.append_chunks("st", ['{"type":"text-delta","id":"t","delta":"ab"}'], i)
        await asyncio.sleep(0)
        largest = max(largest, _wal(db).stat().st_size)
    assert largest < 2 * WAL_CHECKPOINT_BYTES
    assert len(await db.read.chunk_bodies("st")) == 400


async def test_a_checkpoint_queued_before_sleep_leaves_the_file_asleep(db: SqliteDatabase) -> None:
    await _chunks(db, 10)
    queued = db.checkpoints.soon()  # not started: the file's lock is free
    assert await db.sleep()
    assert await queued is False
    assert db.asleep  # not opened again for a checkpoint
    assert db.checkpoints.task is None


async def test_sleep_and_close_wait_for_a_checkpoint_under_way(db: SqliteDatabase) -> None:
    await _chunks(db, 10)
    running = db.checkpoints.soon()
    await asyncio.sleep(0)  # it holds the file's lock now, its checkpoint queued on the lane
    assert not await db.sleep()
    await db.close()
    assert running.done() and running.result() is True
    assert not _wal(db).exists()  # the last close checkpointed and removed it
    assert await db.checkpoints.soon() is False  # a closed file is not opened again


async def test_a_failed_checkpoint_is_logged_and_the_file_goes_on(db: SqliteDatabase,
                                                                  caplog: pytest.LogCaptureFixture) -> None:
    await _chunks(db, 10)
    other = sqlite3.connect(db.path, isolation_level=None)  # another process's writer holds the lock
    other.execute("BEGIN IMMEDIATE")
    try:
        with caplog.at_level(logging.WARNING, "think_server.storage.sqlite._checkpoints"):
            failed = db.checkpoints.soon()
            with pytest.raises(sqlite3.OperationalError):
                await failed
            await asyncio.sleep(0)  # its done callback
        assert "checkpointing the WAL failed" in caplog.text and "a.sqlite3-wal" in caplog.text
    finally:
        other.execute("ROLLBACK")
        other.close()
    assert db.checkpoints.task is None
    await _chunks(db, 3)  # the file still takes state changes
    assert await db.checkpoints.soon() is True
