"""Connections on shared SQLite threads: no thread per open file, and each file's calls in order."""

from __future__ import annotations

import asyncio
import sqlite3
import threading
from pathlib import Path

import aiosqlite
import pytest

from think_server.storage.sqlite import SqliteDatabase, _db
from think_server.storage.sqlite._lanes import WORKERS, LaneConnection, lane_connect, worker_threads

from ._files import SET, settings, writes_and_reads


async def test_many_open_files_use_a_bounded_number_of_threads(tmp_path: Path) -> None:
    before = threading.active_count()
    dbs = [await SqliteDatabase.open(tmp_path / f"db{i}.sqlite3") for i in range(60)]
    try:
        async def one(i: int, db: SqliteDatabase) -> None:
            async with db.transaction() as tx:
                await tx.ensure_session(f"s{i}", i)

        await asyncio.gather(*(one(i, db) for i, db in enumerate(dbs)))
        sqlite_threads = [t for t in threading.enumerate() if t.name.startswith("think-sqlite")]
        assert 0 < len(sqlite_threads) == worker_threads() <= WORKERS
        # 60 open files: no thread of their own (a few of asyncio's for mkdir, at most).
        assert threading.active_count() - before < 20
        for i, db in enumerate(dbs):
            assert await db.read.session(f"s{i}") is not None
    finally:
        for db in dbs:
            await db.close()


async def test_a_connections_calls_run_in_the_order_they_were_made(tmp_path: Path) -> None:
    conn = await lane_connect(tmp_path / "order.sqlite3", isolation_level=None)
    try:
        await conn.execute("CREATE TABLE t (n INTEGER)")
        # Not awaited one by one: queued together, they must still run in order.
        await asyncio.gather(*(conn.execute("INSERT INTO t VALUES (?)", (n,)) for n in range(500)))
        rows = await conn.execute_fetchall("SELECT n FROM t ORDER BY rowid")
        assert [r[0] for r in rows] == list(range(500))
    finally:
        await conn.close()


async def test_a_closed_connection_refuses_calls_and_errors_reach_the_caller(tmp_path: Path) -> None:
    conn = await lane_connect(tmp_path / "closed.sqlite3", isolation_level=None)
    try:
        await conn.execute("SELECT nonsense FROM nowhere")
    except Exception as exc:
        assert "no such table" in str(exc)
    else:
        raise AssertionError("the error did not reach the caller")
    await conn.close()
    try:
        await conn.execute("SELECT 1")
    except ValueError as exc:
        assert "closed" in str(exc).lower() or "no active connection" in str(exc)
    else:
        raise AssertionError("a closed connection ran a call")


async def test_the_statements_of_a_write_transaction_run_on_the_loop_thread(tmp_path: Path) -> None:
    """Inside a transaction (the write lock held) a statement runs at once, no hop to a worker:
    checked by the thread that runs SQLite's calls, seen from a function SQLite calls back."""
    db = await SqliteDatabase.open(tmp_path / "inline.sqlite3")
    seen: list[str] = []
    conn = await db.wake()
    await conn.create_function("where_am_i", 0, lambda: seen.append(threading.current_thread().name) or 1)
    try:
        await conn.execute("SELECT where_am_i()")  # outside a transaction: on a worker
        async with db.transaction() as tx:
            await tx._execute("SELECT where_am_i()")  # inside: on the loop's thread
        assert seen[0].startswith("think-sqlite")
        assert seen[1] == threading.current_thread().name
    finally:
        await db.close()


async def test_a_message_of_a_megabyte_and_the_rest_of_its_transaction_are_written_off_the_loop(
        tmp_path: Path) -> None:
    """A value of OFF_LOOP_CHARS or more (an image as a data: URL) is written on a worker thread, and so
    are the statements after it and the COMMIT (which writes its megabyte to the WAL); a small one's
    transaction stays on the loop. Seen from SQLite's own calls back (a trigger on the table)."""
    from think_server.storage.sqlite._base import OFF_LOOP_CHARS

    db = await SqliteDatabase.open(tmp_path / "heavy.sqlite3")
    seen: list[str] = []
    conn = await db.wake()
    await conn.create_function("where_am_i", 0, lambda: seen.append(threading.current_thread().name) or 1)
    await conn.execute("CREATE TEMP TRIGGER noted AFTER INSERT ON messages BEGIN SELECT where_am_i(); END")
    loop_thread = threading.current_thread().name
    big = '{"id":"b","role":"user","parts":[{"type":"text","text":"' + "x" * OFF_LOOP_CHARS + '"}]}'
    try:
        async with db.transaction() as tx:
            await tx.ensure_session("s", 1)
            await tx.insert_message("s", "small", None, "user", '{"id":"small","role":"user","parts":[]}', None, 1)
            await tx.insert_message("s", "b", "small", "user", big, None, 2)
            await tx.insert_message("s", "after", "b", "user", '{"id":"after","role":"user","parts":[]}', None, 3)
            assert not conn.runs_here()  # the COMMIT goes to the pool as well
        assert seen[0] == loop_thread
        assert seen[1].startswith("think-sqlite") and seen[2].startswith("think-sqlite"), seen
        async with db.transaction() as tx:
            await tx.insert_message("s", "next", "after", "user", '{"id":"next","role":"user","parts":[]}', None, 4)
            assert conn.runs_here()  # the next transaction is back on the loop
        assert seen[3] == loop_thread
        row = await db.read.message("s", "b")
        assert row is not None and len(row.content) == len(big)
    finally:
        await db.close()


async def test_a_write_in_a_transaction_makes_no_call_through_aiosqlite(tmp_path: Path) -> None:
    """A write run on the loop (the transaction's, the lane idle) is one call on the sqlite3 connection:
    no future and no cursor of aiosqlite's (the statement, then its cursor's close, were two calls)."""
    db = await SqliteDatabase.open(tmp_path / "direct.sqlite3")
    conn = await db.wake()
    assert isinstance(conn, LaneConnection)
    calls = 0
    real = conn._execute

    async def counted(fn, *args, **kwargs):  # type: ignore[no-untyped-def]
        nonlocal calls
        calls += 1
        return await real(fn, *args, **kwargs)

    conn._execute = counted  # type: ignore[method-assign]
    try:
        async with db.transaction() as tx:
            before = calls
            await tx.ensure_session("s", 1)
            assert await tx.insert_operation("op", "s", "input", "client", "{}", "{}", 1)
            assert calls == before
        assert await db.read.session("s") is not None
    finally:
        await db.close()


async def test_a_write_waits_off_the_loop_for_another_process_holding_the_lock(tmp_path: Path) -> None:
    """busy_timeout is 0 (a write may run on the loop and must never wait there): a write lock held
    elsewhere is waited for by Database itself, on a worker, and the loop stays free meanwhile."""
    import sqlite3

    path = tmp_path / "held.sqlite3"
    db = await SqliteDatabase.open(path)
    holder = sqlite3.connect(path, isolation_level=None)
    holder.execute("BEGIN IMMEDIATE")
    ticks = 0

    async def ticking() -> None:
        nonlocal ticks
        while True:
            ticks += 1
            await asyncio.sleep(0.01)

    ticker = asyncio.create_task(ticking())
    try:
        writing = asyncio.create_task(_write(db, "waited"))
        await asyncio.sleep(0.3)
        assert not writing.done(), "it waits for the lock"
        assert ticks >= 10, "the loop ran meanwhile"
        holder.execute("ROLLBACK")
        await asyncio.wait_for(writing, 10)
        assert await db.read.session("waited") is not None
    finally:
        ticker.cancel()
        holder.close()
        await db.close()


async def _write(db: SqliteDatabase, session: str) -> None:
    async with db.transaction() as tx:
        await tx.ensure_session(session, 1)


async def test_reads_by_key_and_shrinking_run_on_the_loop_when_the_lane_is_idle(tmp_path: Path) -> None:
    """A submission's two reads before its start (its operation id, its new messages' ids) are a few
    pages each: on the loop's thread, no trip; a read of many ids still goes to a worker."""
    db = await SqliteDatabase.open(tmp_path / "reads.sqlite3")
    conn = await db.wake()
    seen: list[str] = []
    await conn.set_trace_callback(lambda sql: seen.append(threading.current_thread().name))
    try:
        assert await db.read.operation("op") is None
        assert await db.read.existing_message_ids("s", ["m1", "m2"]) == set()
        await db.shrink_memory()  # after each turn that empties the queue: no I/O, no trip either
        assert seen == [threading.current_thread().name] * 3
        seen.clear()
        assert await db.read.existing_message_ids("s", [f"m{i}" for i in range(100)]) == set()
        assert len(seen) == 1 and seen[0].startswith("think-sqlite")
    finally:
        await conn.set_trace_callback(None)
        await db.close()


def test_a_lane_connection_sets_every_attribute_of_aiosqlites_but_its_thread(tmp_path: Path) -> None:
    # LaneConnection sets aiosqlite's attributes itself (its __init__ makes a thread object): an
    # aiosqlite that sets another one must be followed here.
    def connector() -> sqlite3.Connection:
        return sqlite3.connect(tmp_path / "x.sqlite3")

    theirs = set(vars(aiosqlite.Connection(connector, 64)))
    ours = set(vars(LaneConnection(connector)))
    assert ours == theirs - {"_thread"}


async def test_a_new_file_is_made_on_the_pool_and_set_up_on_the_loops_thread(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Making a file is the file system's work, which may wait: on the pool. Its settings, first commit
    and prepared statements are SQLite's alone: on a worker thread each let go of the GIL and took it
    back from the loop, so they run on the loop's thread."""
    threads: list[tuple[str, str]] = []
    real_prepare, real_statements = _db._prepare, _db.prepare_turn_start

    def prepare(path: Path) -> bool:
        threads.append(("make", threading.current_thread().name))
        return real_prepare(path)

    def statements(conn: sqlite3.Connection, *sql: tuple[str, ...]) -> None:
        threads.append(("prepare", threading.current_thread().name))
        real_statements(conn, *sql)

    monkeypatch.setattr(_db, "_prepare", prepare)
    monkeypatch.setattr(_db, "prepare_turn_start", statements)
    path = tmp_path / "agents" / "a" / "x.sqlite3"
    db = await SqliteDatabase.open(path, ("a", "x"))
    try:
        await writes_and_reads(db)
    finally:
        await db.close()
    (make, pool), (statement, loop) = threads
    assert (make, statement) == ("make", "prepare")
    assert pool.startswith("think-sqlite") and loop == threading.current_thread().name


async def test_a_file_woken_reads_its_schema_on_the_pool_and_is_set_up_on_the_loops_thread(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """As a new file: what may read the disk (the schema, WAL mode) on the pool, its settings and the
    statements its turns start with on the loop's thread; the settings hold after the wake."""
    db = await SqliteDatabase.open(tmp_path / "w.sqlite3", ("a", "w"))
    try:
        assert await db.sleep() and db.asleep
        threads: list[str] = []
        real_statements = _db.prepare_turn_start

        def statements(conn: sqlite3.Connection, *sql: tuple[str, ...]) -> None:
            threads.append(threading.current_thread().name)
            real_statements(conn, *sql)

        monkeypatch.setattr(_db, "prepare_turn_start", statements)
        await db.wake()
        assert threads == [threading.current_thread().name]
        assert await settings(db) == SET
        await writes_and_reads(db)
    finally:
        await db.close()
