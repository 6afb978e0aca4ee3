"""The storage layer on a full or read-only disk, and on files that are not ours or not whole.

A failed write leaves the file as it was (``PRAGMA integrity_check``), says
what went wrong (a :class:`Problem`), and the same connection writes again
once the disk does.
"""

from __future__ import annotations

import contextlib
import sqlite3
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from tests.faultydisk import KINDS, FaultyDisk, faulty_disk, integrity
from think_server.storage import Problem, StorageError, describe_problem, problem_of
from think_server.storage.sqlite import SCHEMA_VERSION, SqliteDatabase, SqliteWorkIndex
from think_server.storage.sqlite._writefaults import WriteFault, arm, set_fault


@pytest.fixture(params=KINDS)
def disk(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[FaultyDisk]:
    with faulty_disk(tmp_path, request.param) as d:
        yield d


@contextlib.asynccontextmanager
async def opened(path: Path) -> AsyncIterator[SqliteDatabase]:
    db = await SqliteDatabase.open(path)
    try:
        yield db
    finally:
        await db.close()


async def add_operation(db: SqliteDatabase, op_id: str) -> None:
    async with db.transaction() as tx:
        await tx.ensure_session("s", 1)
        await tx.insert_operation(op_id, "s", "input", "server", "{}", None, 1)


async def test_a_full_disk_fails_the_commit_keeps_the_file_whole_and_heals(disk: FaultyDisk) -> None:
    path = disk.path / "a.sqlite3"
    async with opened(path) as db:
        await add_operation(db, "before")
        disk.fill()
        with pytest.raises(sqlite3.Error) as err:
            await add_operation(db, "lost")
        assert problem_of(err.value) is Problem.DISK_FULL
        assert await db.read.operation("lost") is None, "nothing of the failed transaction is visible"
        assert integrity(path) == "ok"
        disk.free()
        await add_operation(db, "after")  # the same connection, no longer in a transaction
        assert await db.read.operation("before") is not None and await db.read.operation("after") is not None
    assert integrity(path) == "ok"


async def test_a_write_that_finds_the_disk_full_mid_transaction_is_reported_as_such(disk: FaultyDisk) -> None:
    """A transaction larger than the page cache meets the full disk at a statement, and SQLite
    rolls it back by itself: the error the caller sees is the full disk, not "cannot rollback"."""
    path = disk.path / "b.sqlite3"
    async with opened(path) as db:
        await add_operation(db, "before")
        async with db.transaction() as tx:
            await tx._execute("PRAGMA cache_size = 5")  # spill to the WAL after a few pages
        disk.fill(early=True)
        with pytest.raises(sqlite3.Error) as err:
            async with db.transaction() as tx:
                for i in range(400):
                    await tx.insert_operation(f"big-{i}", "s", "input", "server", "x" * 2000, None, 1)
        assert problem_of(err.value) is Problem.DISK_FULL, f"got {err.value!r}"
        disk.free()
        await add_operation(db, "after")
        assert await db.read.operation("big-0") is None
    assert integrity(path) == "ok"


async def test_a_read_only_connection_refuses_writes_and_works_again(tmp_path: Path) -> None:
    arm()
    try:
        async with opened(tmp_path / "ro.sqlite3") as db:
            await add_operation(db, "before")
            set_fault(WriteFault.READ_ONLY)
            with pytest.raises(sqlite3.Error) as err:
                await add_operation(db, "refused")
            assert err.value.sqlite_errorname == "SQLITE_READONLY", "SQLite's own error"
            assert problem_of(err.value) is Problem.READ_ONLY
            set_fault(None)
            await add_operation(db, "after")
            assert await db.read.operation("refused") is None
    finally:
        set_fault(None)
        arm(False)


def test_problems_have_words_a_user_can_act_on() -> None:
    assert describe_problem(Problem.DISK_FULL) == "the server's disk is full"
    assert "read-only" in describe_problem(Problem.READ_ONLY)
    assert "file descriptors" in describe_problem(Problem.CANNOT_OPEN)
    assert problem_of(OSError(28, "No space left on device")) is Problem.DISK_FULL
    assert problem_of(OSError(24, "Too many open files")) is Problem.CANNOT_OPEN
    assert problem_of(ValueError("x")) is None
    assert [p for p in Problem if p.transient] == [Problem.DISK_FULL, Problem.READ_ONLY, Problem.IO_ERROR,
                                                   Problem.CANNOT_OPEN, Problem.BUSY, Problem.UNREACHABLE,
                                                   Problem.MOVED]


# -- files that are not ours, or not whole -------------------------------------------------


def _foreign(path: Path, user_version: int = 0) -> None:
    conn = sqlite3.connect(path)
    try:
        conn.execute("CREATE TABLE contacts (id INTEGER PRIMARY KEY, email TEXT)")
        conn.execute("INSERT INTO contacts (email) VALUES ('a@example.com')")
        conn.execute(f"PRAGMA user_version = {user_version}")
        conn.commit()
    finally:
        conn.close()


@pytest.mark.parametrize("user_version", [0, 1])
async def test_another_applications_database_is_refused_and_left_untouched(tmp_path: Path,
                                                                            user_version: int) -> None:
    path = tmp_path / "contacts.sqlite3"
    _foreign(path, user_version)
    before = path.read_bytes()
    with pytest.raises(StorageError) as err:
        await SqliteDatabase.open(path)
    assert err.value.problem is Problem.FOREIGN
    assert "another application" in str(err.value) and "contacts" in str(err.value)
    assert path.read_bytes() == before, "no table of ours was written into it"


async def _real_file(path: Path) -> None:
    async with opened(path) as db:
        for i in range(50):
            await add_operation(db, f"op-{i}")
    # Closed: the WAL is checkpointed into the file and removed.
    assert not path.with_name(path.name + "-wal").exists()


@pytest.mark.parametrize("keep", [0.02, 0.5, 0.9])
async def test_a_truncated_file_is_reported_damaged(tmp_path: Path, keep: float) -> None:
    path = tmp_path / "cut.sqlite3"
    await _real_file(path)
    data = path.read_bytes()
    path.write_bytes(data[: int(len(data) * keep)])
    with pytest.raises(StorageError) as err:
        await SqliteDatabase.open(path)
    assert err.value.problem is Problem.DAMAGED and "malformed" in str(err.value)


async def test_garbage_and_newer_files_name_their_problem(tmp_path: Path) -> None:
    junk = tmp_path / "junk.sqlite3"
    junk.write_bytes(b"\x13\x37" * 3000)
    with pytest.raises(StorageError) as err:
        await SqliteDatabase.open(junk)
    assert err.value.problem is Problem.DAMAGED
    newer = tmp_path / "newer.sqlite3"
    _foreign(newer, SCHEMA_VERSION + 1)
    with pytest.raises(StorageError) as err:
        await SqliteDatabase.open(newer)
    assert err.value.problem is Problem.NEWER_SCHEMA


async def test_an_index_of_another_shape_is_refused(tmp_path: Path) -> None:
    conn = sqlite3.connect(tmp_path / "index.sqlite3")
    conn.execute("CREATE TABLE active_instances (id INTEGER PRIMARY KEY)")
    conn.commit()
    conn.close()
    with pytest.raises(StorageError) as err:
        await SqliteWorkIndex.open(tmp_path)
    assert err.value.problem is Problem.DAMAGED and "delete it to rebuild" in str(err.value)
