"""Streams in an SQLite file: each committed batch of chunks is one segment row; swept streams
give their pages back to the file system, and a shrunk cache its memory."""

from __future__ import annotations

import asyncio
import json
import sqlite3
import threading
import time
from pathlib import Path

import pytest

from think_server.storage.sqlite import SqliteDatabase, _db
from think_server.storage.sqlite._schema import MIGRATIONS
from think_server.storage.sqlite._template import PAGE_SIZE

from ..test_streams import _append, _chunk, _finish, _get, _insert


def _segments(path: Path, stream_id: str) -> list[tuple[int, int, int]]:
    """(segment, first_chunk, chunks in it) of each stored segment, through another connection."""
    conn = sqlite3.connect(path)
    try:
        rows = conn.execute(
            "SELECT segment, first_chunk, body FROM stream_chunks WHERE stream_id = ? ORDER BY segment",
            (stream_id,),
        ).fetchall()
    finally:
        conn.close()
    return [(segment, first, len(json.loads(body))) for segment, first, body in rows]


async def test_chunks_in_several_segments_come_back_in_order(db: SqliteDatabase, db_path: Path) -> None:
    await _insert(db, "st")
    batches = [[_chunk(0)], [_chunk(1), _chunk(2), _chunk(3)], [_chunk(4), _chunk(5)], [_chunk(6)]]
    for n, batch in enumerate(batches):
        await _append(db, "st", batch, now=200 + n)
    expected = [c for batch in batches for c in batch]
    assert await db.read.chunk_bodies("st") == expected
    assert (await _get(db, "st")).chunk_count == 7
    assert _segments(db_path, "st") == [(0, 0, 1), (1, 1, 3), (2, 4, 2), (3, 6, 1)]


async def test_several_batches_in_one_transaction(db: SqliteDatabase, db_path: Path) -> None:
    await _insert(db, "st")
    async with db.transaction() as tx:
        await tx.append_chunks("st", [_chunk(0), _chunk(1)], 200)
        await tx.append_chunks("st", [_chunk(2)], 201)
    assert await db.read.chunk_bodies("st") == [_chunk(0), _chunk(1), _chunk(2)]
    assert _segments(db_path, "st") == [(0, 0, 2), (1, 2, 1)]


async def test_empty_batch_writes_nothing(db: SqliteDatabase, db_path: Path) -> None:
    await _insert(db, "st")
    await _append(db, "st", [_chunk(0)])
    await _append(db, "st", [])
    await _append(db, "st", [_chunk(1)])
    assert _segments(db_path, "st") == [(0, 0, 1), (1, 1, 1)]
    assert (await _get(db, "st")).chunk_count == 2


async def test_appended_chunks_roll_back_with_their_transaction(db: SqliteDatabase, db_path: Path) -> None:
    await _insert(db, "st")
    await _append(db, "st", [_chunk(0)])
    with pytest.raises(RuntimeError):
        async with db.transaction() as tx:
            await tx.append_chunks("st", [_chunk(1)], 300)
            raise RuntimeError
    assert await db.read.chunk_bodies("st") == [_chunk(0)]
    assert (await _get(db, "st")).chunk_count == 1
    await _append(db, "st", [_chunk(1)])
    assert _segments(db_path, "st") == [(0, 0, 1), (1, 1, 1)]


async def test_reused_stream_id_after_delete_starts_fresh(db: SqliteDatabase, db_path: Path) -> None:
    await _insert(db, "st")
    await _append(db, "st", [_chunk(0), _chunk(1)])
    await _finish(db, "st", now=10)
    async with db.transaction() as tx:
        await tx.delete_finished_streams(completed_before=11)
    await _insert(db, "st")
    await _append(db, "st", [_chunk(9)])
    assert await db.read.chunk_bodies("st") == [_chunk(9)]
    assert (await _get(db, "st")).chunk_count == 1
    assert _segments(db_path, "st") == [(0, 0, 1)]


async def test_swept_streams_give_their_pages_back_to_the_file_system(db: SqliteDatabase, db_path: Path) -> None:
    def pages() -> tuple[int, int, int]:
        conn = sqlite3.connect(db_path)
        try:
            conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
            return tuple(int(conn.execute(f"PRAGMA {p}").fetchone()[0])  # type: ignore[return-value]
                         for p in ("auto_vacuum", "page_count", "freelist_count"))
        finally:
            conn.close()

    assert pages()[0] == 2, "a new file is made with auto_vacuum=INCREMENTAL"
    before = pages()[1]
    await _insert(db, "big")
    for n in range(20):
        await _append(db, "big", [_chunk(n * 100 + i) + " " * 200 for i in range(100)])
    await _finish(db, "big", now=1000)
    grown = pages()[1]
    assert grown > before + 100
    async with db.transaction() as tx:
        assert await tx.delete_finished_streams(completed_before=1001) == 1
    await db.reclaim_free_pages()
    _, after, free = pages()
    assert free == 0 and after < before + 10, (before, grown, after)


async def test_shrinking_memory_gives_the_page_cache_back(db: SqliteDatabase) -> None:
    from think_server.storage.sqlite import sqlite_memory_used

    await _insert(db, "big")
    for n in range(10):
        await _append(db, "big", [_chunk(n * 100 + i) + " " * 200 for i in range(100)])
    assert len(await db.read.chunk_bodies("big")) == 1000  # read: its pages are in the cache
    full = sqlite_memory_used()
    await db.shrink_memory()
    assert full is not None and (sqlite_memory_used() or 0) < full - 32 * 1024
    assert len(await db.read.chunk_bodies("big")) == 1000, "read again from the file"


# -- a lone batch: Database.append_now ------------------------------------------------------------


def _wal_frames(path: Path) -> int:
    """Frames in the file's WAL (each a 24-byte header and a page, after the WAL's 32-byte header)."""
    wal = path.with_name(path.name + "-wal")
    return max(0, wal.stat().st_size - 32) // (24 + PAGE_SIZE)


async def test_a_lone_chunk_writes_the_page_its_segment_lands_on_and_no_index_page(db_path: Path) -> None:
    """Segments are kept in their key's order (no rowid, so no second B-tree for the key): a lone
    chunk's commit is one WAL frame, and now and then the pages a full leaf is balanced with (68
    frames for these 40 chunks; a rowid table and its key's index wrote two every commit, 96)."""
    db = await SqliteDatabase.open(db_path)
    try:
        await _insert(db, "a-stream-id-as-long-as-a-real-one")
        await db.wake()
        before = _wal_frames(db_path)
        for i in range(40):
            assert db.append_now("a-stream-id-as-long-as-a-real-one", [_chunk(i)], 200 + i)
        frames = _wal_frames(db_path) - before
    finally:
        await db.close()
    assert 40 <= frames < 80, f"{frames} WAL frames for 40 lone chunks"


async def test_an_older_servers_segments_are_kept_in_their_keys_order(
        db_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_db, "MIGRATIONS", MIGRATIONS[:12])
    monkeypatch.setattr(_db, "SCHEMA_VERSION", 12)
    db = await SqliteDatabase.open(db_path)
    try:
        await _insert(db, "st")
        await _append(db, "st", [_chunk(0), _chunk(1)])
        await _append(db, "st", [_chunk(2)])
    finally:
        await db.close()
    monkeypatch.undo()
    db = await SqliteDatabase.open(db_path)
    try:
        assert await db.read.chunk_bodies("st") == [_chunk(0), _chunk(1), _chunk(2)]
        assert db.append_now("st", [_chunk(3)], 300)
        assert (await _get(db, "st")).chunk_count == 4
    finally:
        await db.close()
    assert _segments(db_path, "st") == [(0, 0, 2), (1, 2, 1), (2, 3, 1)]
    with sqlite3.connect(db_path) as raw:
        (sql,) = raw.execute("SELECT sql FROM sqlite_schema WHERE name = 'stream_chunks'").fetchone()
        assert sql.rstrip().endswith("WITHOUT ROWID")
        assert raw.execute("PRAGMA foreign_key_check").fetchall() == []


async def test_a_lone_batch_is_one_call_on_the_loop_thread(db: SqliteDatabase, db_path: Path) -> None:
    """No transaction open, the lane idle: BEGIN to COMMIT run at once on the loop's thread, with no
    future of aiosqlite's, seen by SQLite's trace of the statements it runs and where it runs them."""
    await _insert(db, "st")
    conn = await db.wake()
    seen: list[tuple[str, str]] = []
    await conn.set_trace_callback(lambda sql: seen.append((threading.current_thread().name, sql.split()[0])))
    loop = asyncio.get_running_loop()
    futures = 0
    make_future = loop.create_future

    def counted() -> asyncio.Future[object]:
        nonlocal futures
        futures += 1
        return make_future()

    loop.create_future = counted  # type: ignore[method-assign]
    try:
        assert db.append_now("st", [_chunk(0), _chunk(1)], 200)
        assert db.append_now("st", [_chunk(2)], 201)
    finally:
        del loop.create_future
    assert futures == 0, "no call went through aiosqlite's futures"
    await conn.set_trace_callback(None)
    here = threading.current_thread().name
    assert [sql for thread, sql in seen if thread == here] == ["INSERT"] * 2, "one statement, its own transaction"
    assert [sql for thread, sql in seen if thread != here] == []
    assert _segments(db_path, "st") == [(0, 0, 2), (1, 2, 1)]
    assert (await _get(db, "st")).chunk_count == 3


async def test_a_lone_batch_is_not_written_inside_a_transaction_in_progress(
        db: SqliteDatabase, db_path: Path) -> None:
    await _insert(db, "st")
    async with db.transaction() as tx:
        await tx.append_chunks("st", [_chunk(0)], 200)
        assert not db.append_now("st", [_chunk(1)], 201), "the caller takes the transaction's way"
    assert _segments(db_path, "st") == [(0, 0, 1)]
    assert db.append_now("st", [_chunk(1)], 201)
    assert _segments(db_path, "st") == [(0, 0, 1), (1, 1, 1)]


async def test_a_lone_batch_does_not_wait_on_the_loop_for_another_process_holding_the_lock(
        db: SqliteDatabase, db_path: Path) -> None:
    await _insert(db, "st")
    await db.wake()
    holder = sqlite3.connect(db_path, isolation_level=None)
    holder.execute("BEGIN IMMEDIATE")
    try:
        started = time.monotonic()
        assert not db.append_now("st", [_chunk(0)], 200), "busy: nothing written, the transaction's way then"
        assert time.monotonic() - started < 1, "it did not wait out a busy timeout on the loop"
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    assert await db.read.chunk_bodies("st") == []
    assert db.append_now("st", [_chunk(0)], 200)
    assert await db.read.chunk_bodies("st") == [_chunk(0)]


async def test_a_lone_batch_that_fails_keeps_nothing_and_the_next_one_writes(db: SqliteDatabase) -> None:
    """A failing statement rolls the lone batch back, its error reaching the caller; the connection is
    not left inside a transaction, and the next batch takes the next place."""
    await _insert(db, "st")
    assert db.append_now("st", [_chunk(0)], 200)
    conn = await db.wake()
    await conn.execute("CREATE TEMP TRIGGER refuse BEFORE INSERT ON stream_chunks "
                       "BEGIN SELECT RAISE(ABORT, 'refused'); END")
    with pytest.raises(sqlite3.IntegrityError):
        db.append_now("st", [_chunk(1)], 201)
    assert not conn.in_transaction
    await conn.execute("DROP TRIGGER refuse")
    assert db.append_now("st", [_chunk(2)], 202)
    assert await db.read.chunk_bodies("st") == [_chunk(0), _chunk(2)]
    assert _segments(db.path, "st") == [(0, 0, 1), (1, 1, 1)]
    assert (await _get(db, "st")).chunk_count == 2


async def test_a_batch_goes_where_the_last_write_said_and_looks_again_where_that_is_stale(
        db: SqliteDatabase, db_path: Path) -> None:
    """A stream's batches are plain inserts at the place the stream's row (0, 0) or the batch before said
    comes next, in a transaction or alone; a place taken meanwhile (another writer of the file) or the
    stream gone, and the place is looked up; a rolled-back transaction's places are not kept: segments
    stay contiguous, chunks counted, nothing lost."""
    await _insert(db, "st")
    conn = await db.wake()
    seen: list[str] = []
    await conn.set_trace_callback(lambda sql: seen.append(sql))
    assert db.append_now("st", [_chunk(0), _chunk(1)], 200)
    assert db.append_now("st", [_chunk(2)], 201)
    assert not any("SELECT" in sql for sql in seen), seen  # placed from the stream's row on
    other = sqlite3.connect(db_path, isolation_level=None)  # a writer outside the server takes the next place
    try:
        other.execute("INSERT INTO stream_chunks VALUES ('st', 2, 3, ?, 202)", ("[" + _chunk(3) + "]",))
    finally:
        other.close()
    seen.clear()
    assert db.append_now("st", [_chunk(4)], 203)
    assert db.append_now("st", [_chunk(5)], 204)
    assert ["SELECT" in sql for sql in seen] == [False, True, False], seen  # stale, looked up, placed
    with pytest.raises(RuntimeError):
        async with db.transaction() as tx:
            await tx.append_chunks("st", [_chunk(99)], 205)
            raise RuntimeError("rolled back")
    seen.clear()
    async with db.transaction() as tx:
        await tx.append_chunks("st", [_chunk(6)], 205)
    assert db.append_now("st", [_chunk(7)], 206)
    assert not any("SELECT" in sql for sql in seen), seen
    await conn.set_trace_callback(None)
    assert _segments(db_path, "st") == [(0, 0, 2), (1, 2, 1), (2, 3, 1), (3, 4, 1), (4, 5, 1), (5, 6, 1), (6, 7, 1)]
    assert await db.read.chunk_bodies("st") == [_chunk(n) for n in range(8)]
    assert (await _get(db, "st")).chunk_count == 8
    await conn.execute("DELETE FROM streams WHERE id = 'st'")  # gone (swept), its place still known
    assert db.append_now("st", [_chunk(8)], 207), "done: nothing to write to"
    async with db.transaction() as tx:
        await tx.append_chunks("st", [_chunk(9)], 208)
    assert _segments(db_path, "st") == []


async def test_a_finished_stream_and_a_deleted_sessions_streams_hold_no_place(db: SqliteDatabase) -> None:
    """A file's places are one per stream being written, not one per stream it ever wrote."""
    await _insert(db, "done")
    await _insert(db, "gone", session_id="s2")
    assert db.append_now("done", [_chunk(0)], 200) and db.append_now("gone", [_chunk(0)], 200)
    assert set(db.places.committed) == {"done", "gone"}
    await _finish(db, "done")
    assert set(db.places.committed) == {"gone"}
    async with db.transaction() as tx:
        await tx.delete_session_streams("s2")
    assert db.places.committed == {}


async def test_a_copy_of_a_streaming_stream_carries_its_counters_from_its_segments(db: SqliteDatabase) -> None:
    """The row is not written again as chunks come; a copy to PostgreSQL (``think-server migrate-data``)
    still carries where the stream is, for a turn there to append after its last segment."""
    from think_server.storage._copy import TABLES
    from think_server.storage.sqlite._export import _Dump

    await _insert(db, "st")
    assert db.append_now("st", [_chunk(0), _chunk(1)], 200)
    assert db.append_now("st", [_chunk(2)], 201)
    columns = next(t.columns for t in TABLES if t.name == "streams")
    [row] = await _Dump(db).table("streams", columns)
    copied = dict(zip(columns, row, strict=True))
    assert (copied["next_segment"], copied["chunk_count"], copied["last_chunk_at"]) == (2, 3, 201)
