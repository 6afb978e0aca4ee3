"""Regressions: bugs found while writing the storage tests, each pinned by a test so it stays fixed."""

from __future__ import annotations

import asyncio
import sqlite3
import threading
import unicodedata
from pathlib import Path

import pytest

from think_server.storage import InvalidNameError, StorageError, validate_instance_name
from think_server.storage.sqlite import SqliteDatabase, SqliteWorkIndex, instance_db_path


async def test_cancel_during_begin_leaves_no_transaction_open(db_path: Path) -> None:
    """_db.py: ``BEGIN IMMEDIATE`` is awaited outside the try/except that rolls back.

    A task cancelled while its ``BEGIN IMMEDIATE`` is queued on the connection gets
    CancelledError and releases the asyncio lock, but aiosqlite's thread still runs the
    BEGIN: the connection is left inside a transaction nobody owns. Every later
    ``transaction()`` then fails with "cannot start a transaction within a transaction",
    and the dangling write lock blocks any other connection to the file.
    """
    db = await SqliteDatabase.open(db_path)
    try:

        async def writer() -> None:
            async with db.transaction() as tx:
                await tx.ensure_session("cancelled", 1)

        # A long read keeps the file's lane busy, so the BEGIN cannot run at once on the loop
        # (where nothing can cancel it halfway): it is queued behind the read, and cancelled there.
        assert db.conn is not None
        slow = asyncio.ensure_future(db.conn.execute_fetchall(
            "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c WHERE x < 3000000) "
            "SELECT count(*) FROM c"))
        await asyncio.sleep(0)  # the read is queued
        task = asyncio.create_task(writer())
        await asyncio.sleep(0)  # the task runs until it awaits its BEGIN IMMEDIATE
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        await slow

        try:
            async with db.transaction() as tx:
                await tx.ensure_session("next", 2)
        except sqlite3.OperationalError as exc:
            pytest.fail(f"the next transaction after a cancelled one failed: {exc}")
        assert await db.read.session("next") is not None
        assert await db.read.session("cancelled") is None
    finally:
        await db.close()


def _join_sqlite_worker_threads() -> None:
    """aiosqlite leaves a worker thread behind a failed connect until it processes its stop."""
    for thread in threading.enumerate():
        if "_connection_worker_thread" in thread.name:
            thread.join(timeout=5)


async def test_open_of_an_unopenable_path_raises_storage_error(tmp_path: Path) -> None:
    """_db.py: ``aiosqlite.connect`` is outside the try that turns sqlite3 errors into StorageError.

    When SQLite cannot open the file at all (here: the path is a directory; in production
    also an unreadable file or an unwritable data dir when not running as root), the raw
    sqlite3.OperationalError escapes. app/_asgi.py catches only (StorageError, OSError)
    around activation, so the client gets an unhandled server error instead of the
    "cannot be opened" error frame.
    """
    path = tmp_path / "instance.sqlite3"
    path.mkdir()
    try:
        with pytest.raises(StorageError):
            await SqliteDatabase.open(path)
    finally:
        await asyncio.sleep(0.05)
        _join_sqlite_worker_threads()


def test_lone_surrogate_instance_name_raises_invalid_name_error(tmp_path: Path) -> None:
    """_paths.py (low severity): a name validate_instance_name accepts makes instance_db_path crash.

    ``"\\ud800"`` passes validate_instance_name, then ``f"{agent}\\0{name}".encode()`` in
    instance_db_path raises UnicodeEncodeError instead of InvalidNameError. URL paths
    cannot carry one (the ASGI server decodes %-escapes with errors="replace"), but an
    embedding application passing a JSON-decoded name can.
    """
    name = "a\ud800b"
    try:
        validate_instance_name(name)
        path = instance_db_path(tmp_path, "chat", name)
    except InvalidNameError:
        return
    except UnicodeError as exc:
        pytest.fail(f"instance_db_path raised {type(exc).__name__}, not InvalidNameError: {exc}")
    assert path.is_relative_to(tmp_path.resolve())


@pytest.mark.parametrize("char", ["\x80", "\x85", "\x9b", "\x9f"], ids=repr)
def test_c1_control_characters_are_refused(tmp_path: Path, char: str) -> None:
    """_paths.py (low severity, a judgment call): only C0 controls and DEL are refused.

    The error message promises "must not contain ... control characters", but the C1
    controls U+0080..U+009F (Unicode category Cc, e.g. U+0085 NEXT LINE, U+009B CSI)
    pass. They cannot reach the file name (the readable part drops them), so this is
    about names echoed into logs and close reasons, not about paths.
    """
    assert unicodedata.category(char) == "Cc"
    with pytest.raises(InvalidNameError):
        validate_instance_name(f"a{char}b")


async def test_work_index_on_a_non_database_file_raises_storage_error_and_closes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """_index.py: WorkIndex.open has no error handling around its pragmas.

    With a damaged ``index.sqlite3`` the raw sqlite3.DatabaseError escapes (the server's
    lifespan startup fails), and the aiosqlite connection opened just before is never
    closed: its non-daemon worker thread keeps the process alive, so the failed server
    hangs instead of exiting. (Reproduced outside pytest: the process never exits.)
    Expected: a StorageError, as Database.open gives, and the connection closed.
    """
    import aiosqlite

    from think_server.storage.sqlite import _writefaults
    from think_server.storage.sqlite._index import INDEX_FILE

    opened: list[aiosqlite.Connection] = []
    real_connect = _writefaults.lane_connect

    def tracking_connect(*args: object, **kwargs: object) -> aiosqlite.Connection:
        conn = real_connect(*args, **kwargs)  # type: ignore[arg-type]
        opened.append(conn)
        return conn

    monkeypatch.setattr(_writefaults, "lane_connect", tracking_connect)
    (tmp_path / INDEX_FILE).write_bytes(b"not an index " * 400)
    try:
        try:
            index = await SqliteWorkIndex.open(tmp_path)
        except Exception as exc:
            error: Exception = exc
        else:
            await index.close()
            pytest.fail("a damaged index opened")
        assert opened, "WorkIndex.open did not connect"
        leaked = [c for c in opened if c._connection is not None]
        assert leaked == [], "WorkIndex.open left its connection open"
        assert isinstance(error, StorageError), f"raised {type(error).__name__}: {error}"
    finally:
        for conn in opened:  # a leaked connection is closed, the test's finding aside
            if conn._connection is not None:
                await conn.close()
