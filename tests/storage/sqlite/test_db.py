"""An instance's SQLite file: opening and migrating it, WAL, another process beside it, a kill, sleeping."""

from __future__ import annotations

import asyncio
import contextlib
import platform
import signal
import sqlite3
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from think_server.storage import StorageError
from think_server.storage.sqlite import SCHEMA_VERSION, SqliteDatabase, _db, trim_heap
from think_server.storage.sqlite._schema import MIGRATIONS

from ..test_transactions import Boom, _add_operation

REPO = Path(__file__).resolve().parents[3]


def _pragma(path: Path, name: str) -> object:
    """Read a pragma through an independent connection (what another process would see)."""
    conn = sqlite3.connect(path)
    try:
        return conn.execute(f"PRAGMA {name}").fetchone()[0]
    finally:
        conn.close()


def _tables(path: Path) -> set[str]:
    conn = sqlite3.connect(path)
    try:
        return {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    finally:
        conn.close()


def _make_file(path: Path, user_version: int) -> None:
    conn = sqlite3.connect(path)
    try:
        conn.execute("CREATE TABLE unrelated (x)")
        conn.execute(f"PRAGMA user_version = {user_version}")
        conn.commit()
    finally:
        conn.close()


@contextlib.asynccontextmanager
async def _opened(path: Path) -> AsyncIterator[SqliteDatabase]:
    """Open and always close: a connection left open keeps its worker thread, and pytest, alive."""
    db = await SqliteDatabase.open(path)
    try:
        yield db
    finally:
        await db.close()


async def _open_error(path: Path) -> StorageError:
    """The StorageError opening ``path`` raises; fails (after closing it) if the file opens."""
    try:
        db = await SqliteDatabase.open(path)
    except StorageError as exc:
        return exc
    await db.close()
    pytest.fail(f"{path.name} opened; expected StorageError")


# -- opening -------------------------------------------------------------------------------------


async def test_open_creates_missing_parent_dirs(tmp_path: Path) -> None:
    path = tmp_path / "a" / "b" / "c" / "x.sqlite3"
    async with _opened(path) as db:
        assert path.is_file()
        assert db.path == path


async def test_open_sets_wal_journal_mode(db: SqliteDatabase, db_path: Path) -> None:
    assert _pragma(db_path, "journal_mode") == "wal"


async def test_fresh_file_is_migrated_to_the_current_schema(db: SqliteDatabase, db_path: Path) -> None:
    assert SCHEMA_VERSION == len(MIGRATIONS) >= 1
    assert _pragma(db_path, "user_version") == SCHEMA_VERSION
    assert {"meta", "sessions", "messages", "operations", "streams", "stream_chunks", "tool_calls"} <= _tables(
        db_path
    )


async def test_empty_existing_file_is_treated_as_new(tmp_path: Path) -> None:
    path = tmp_path / "empty.sqlite3"
    path.write_bytes(b"")
    async with _opened(path) as db:
        assert _pragma(path, "user_version") == SCHEMA_VERSION
        await _add_operation(db, "op")
        assert await db.read.operation("op") is not None


async def test_reopening_keeps_data_and_migrates_nothing(db_path: Path) -> None:
    async with _opened(db_path) as db:
        await _add_operation(db, "op-1")

    async with _opened(db_path) as again:  # re-running a migration would fail: its tables exist
        assert _pragma(db_path, "user_version") == SCHEMA_VERSION
        op = await again.read.operation("op-1")
        assert op is not None and op.status == "pending"


async def test_newer_schema_is_refused_with_a_clear_message(tmp_path: Path) -> None:
    path = tmp_path / "future.sqlite3"
    _make_file(path, SCHEMA_VERSION + 1)
    message = str(await _open_error(path))
    assert "future.sqlite3" in message
    assert f"schema version {SCHEMA_VERSION + 1}" in message
    assert "newer" in message
    assert "upgrade" in message
    # The file is left for the newer server: no version change, no tables of ours.
    assert _pragma(path, "user_version") == SCHEMA_VERSION + 1
    assert _tables(path) == {"unrelated"}


@pytest.mark.parametrize(
    "content",
    [b"hello", b"not a database\n" * 400, b"\x00" * 4096, b"SQLite format 3\x00" + b"\xff" * 200],
    ids=["short-text", "long-text", "zeros", "bad-header"],
)
async def test_non_database_file_is_refused_and_left_alone(tmp_path: Path, content: bytes) -> None:
    path = tmp_path / "notes.sqlite3"
    path.write_bytes(content)
    assert "notes.sqlite3" in str(await _open_error(path))
    assert path.read_bytes() == content


async def test_storage_error_chains_the_sqlite_error(tmp_path: Path) -> None:
    path = tmp_path / "junk.sqlite3"
    path.write_bytes(b"junk" * 1000)
    assert isinstance((await _open_error(path)).__cause__, sqlite3.DatabaseError)


# -- migrations ----------------------------------------------------------------------------------


async def test_older_file_gets_only_the_missing_migrations(
    db_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with _opened(db_path) as db:
        await _add_operation(db, "old")

    extra = "CREATE TABLE extra (x INTEGER); INSERT INTO extra VALUES (42);"
    monkeypatch.setattr(_db, "MIGRATIONS", (*MIGRATIONS, extra))
    monkeypatch.setattr(_db, "SCHEMA_VERSION", SCHEMA_VERSION + 1)
    async with _opened(db_path) as db:
        assert _pragma(db_path, "user_version") == SCHEMA_VERSION + 1
        assert await db.read.operation("old") is not None
    conn = sqlite3.connect(db_path)
    try:
        assert conn.execute("SELECT x FROM extra").fetchall() == [(42,)]
    finally:
        conn.close()

    # And once more: the new migration is not applied twice.
    async with _opened(db_path):
        pass
    conn = sqlite3.connect(db_path)
    try:
        assert conn.execute("SELECT count(*) FROM extra").fetchone() == (1,)
    finally:
        conn.close()


async def test_a_settled_answer_written_before_its_length_was_kept_still_has_its_text(
    db_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Files written before migration 10 hold every answer's text in its operation's row."""
    monkeypatch.setattr(_db, "MIGRATIONS", MIGRATIONS[:9])
    monkeypatch.setattr(_db, "SCHEMA_VERSION", 9)
    async with _opened(db_path) as db:
        await _add_operation(db, "v9-op")
    with sqlite3.connect(db_path) as raw:  # as a version-9 server settled it
        raw.execute("UPDATE operations SET status = 'completed', outcome = 'done', result_text = 'the answer', "
                    "completed_at = 5 WHERE id = 'v9-op'")
    monkeypatch.undo()
    async with _opened(db_path) as db:
        assert _pragma(db_path, "user_version") == SCHEMA_VERSION
        op = await db.read.operation("v9-op")
        assert op is not None and (op.status, op.result_text, op.result_length) == ("completed", "the answer", None)


async def test_file_of_the_first_schema_upgrades_to_the_current_one(
    db_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A file written by the first release opens in this one with its rows intact."""
    monkeypatch.setattr(_db, "MIGRATIONS", MIGRATIONS[:1])
    monkeypatch.setattr(_db, "SCHEMA_VERSION", 1)
    async with _opened(db_path) as db:
        async with db.transaction() as tx:
            await tx.ensure_session("s", 1)
    with sqlite3.connect(db_path) as raw:  # as the first release wrote it (today's statements know newer columns)
        raw.execute("INSERT INTO operations (id, session_id, kind, source, status, input_json, options_json, "
                    "created_at) VALUES ('v1-op', 's', 'input', 'server', 'pending', '{}', NULL, 1)")
        raw.execute("INSERT INTO messages (session_id, id, parent_id, role, content, operation_id, created_at, "
                    "updated_at) VALUES ('s', 'm1', NULL, 'user', '{\"text\":\"hi\"}', 'v1-op', 1, 1)")
    assert _pragma(db_path, "user_version") == 1

    monkeypatch.undo()
    async with _opened(db_path) as db:
        assert _pragma(db_path, "user_version") == SCHEMA_VERSION
        op = await db.read.operation("v1-op")
        assert op is not None
        assert (op.status, op.attempts, op.crash_strikes, op.next_attempt_at) == ("pending", 0, 0, None)
        assert [m.id for m in await db.read.active_path("s")] == ["m1"]
        # The new schema is usable right away.
        async with db.transaction() as tx:
            await tx.record_interruption("v1-op", 10, crashed=True)
            await tx.start_tool_call("s", "c1", "v1-op", "m1", "t", "rerun", "{}", 10)
        assert (await db.read.running_tool_calls("s", "v1-op"))[0].attempt == 1


async def test_failed_migration_leaves_the_file_at_its_old_version(
    db_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with _opened(db_path) as db:
        await _add_operation(db, "old")

    broken = "CREATE TABLE half_done (x); SELECT * FROM no_such_table;"
    monkeypatch.setattr(_db, "MIGRATIONS", (*MIGRATIONS, broken))
    monkeypatch.setattr(_db, "SCHEMA_VERSION", SCHEMA_VERSION + 1)
    assert "no_such_table" in str(await _open_error(db_path))
    assert _pragma(db_path, "user_version") == SCHEMA_VERSION
    assert "half_done" not in _tables(db_path)

    monkeypatch.undo()
    async with _opened(db_path) as db:
        assert await db.read.operation("old") is not None


# -- transactions --------------------------------------------------------------------------------


async def test_commit_is_visible_to_another_connection_only_after_commit(db: SqliteDatabase, db_path: Path) -> None:
    async with _opened(db_path) as other:
        async with db.transaction() as tx:
            await tx.ensure_session("s", 1)
            assert await db.read.session("s") is not None  # own connection sees its write
            assert await other.read.session("s") is None  # nobody else does yet
        assert await other.read.session("s") is not None
        assert await db.read.session("s") is not None


async def test_rolled_back_transaction_is_invisible_to_other_connections(db: SqliteDatabase, db_path: Path) -> None:
    with pytest.raises(Boom):
        async with db.transaction() as tx:
            await tx.ensure_session("s", 1)
            raise Boom
    async with _opened(db_path) as other:
        assert await other.read.session("s") is None


async def test_second_connection_waits_for_the_write_lock(db: SqliteDatabase, db_path: Path) -> None:
    """busy_timeout: a writer on another connection waits for the lock instead of failing at once."""
    holding = asyncio.Event()
    release = asyncio.Event()
    async with _opened(db_path) as other:

        async def hold() -> None:
            async with other.transaction() as tx:
                await tx.ensure_session("first", 1)
                holding.set()
                await release.wait()

        holder = asyncio.create_task(hold())
        waiter = None
        try:
            await asyncio.wait_for(holding.wait(), 5)
            waiter = asyncio.create_task(_add_operation(db, "second", session="second"))
            await asyncio.sleep(0.2)
            assert not waiter.done(), "the second writer gave up instead of waiting for the lock"
        finally:
            release.set()
            await asyncio.wait_for(holder, 5)
        assert waiter is not None
        await asyncio.wait_for(waiter, 5)
        assert await db.read.session("first") is not None
        assert await db.read.operation("second") is not None


# -- crash consistency ---------------------------------------------------------------------------

_CHILD = r"""
import asyncio, sys
from pathlib import Path
from think_server.storage.sqlite import SqliteDatabase

async def main():
    db = await SqliteDatabase.open(Path(sys.argv[1]))
    async with db.transaction() as tx:
        await tx.ensure_session("committed", 1)
        await tx.insert_operation("op-committed", "committed", "input", "server", '{"x":1}', None, 1)
    cm = db.transaction()
    tx = await cm.__aenter__()
    await tx.ensure_session("uncommitted", 2)
    await tx.insert_operation("op-uncommitted", "uncommitted", "input", "server", "{}", None, 2)
    print("ready", flush=True)
    await asyncio.sleep(60)

asyncio.run(main())
"""


async def test_commit_survives_sigkill_and_open_transaction_does_not(db_path: Path) -> None:
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-c", _CHILD, str(db_path),
        cwd=REPO, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )
    try:
        assert proc.stdout is not None
        line = await asyncio.wait_for(proc.stdout.readline(), 30)
        wal = Path(f"{db_path}-wal")
        wal_size = await asyncio.to_thread(lambda: wal.stat().st_size) if line else 0
        proc.send_signal(signal.SIGKILL)
    finally:
        if proc.returncode is None:
            proc.kill()
        _, err = await asyncio.wait_for(proc.communicate(), 30)
    assert line == b"ready\n", err.decode()
    # 255: asyncio's word for "reaped by someone else" (seen once under a loaded suite); the kill
    # was ours either way, and what follows checks what it left.
    assert proc.returncode in (-signal.SIGKILL, 255), proc.returncode
    # The commit was in the WAL, not yet checkpointed into the main file, when the process died.
    assert wal_size > 0

    async with _opened(db_path) as db:
        op = await db.read.operation("op-committed")
        assert op is not None and op.input_json == '{"x":1}'
        assert await db.read.session("committed") is not None
        assert await db.read.operation("op-uncommitted") is None
        assert await db.read.session("uncommitted") is None
        # The dead writer's lock is gone.
        await _add_operation(db, "after-crash")
        assert await db.read.operation("after-crash") is not None


async def test_an_idle_file_sleeps_and_the_next_statement_wakes_it(tmp_path: Path) -> None:
    path = tmp_path / "sleepy.sqlite3"
    db = await SqliteDatabase.open(path)
    async with db.transaction() as tx:
        await tx.ensure_session("s", 1)
        await tx.insert_message("s", "u1", None, "user", '{"id":"u1","role":"user","parts":[]}', None, 1)
    assert await db.sleep() and db.asleep
    assert not (tmp_path / "sleepy.sqlite3-wal").exists(), "the last connection closed: WAL checkpointed away"
    assert [r.id for r in await db.read.active_path("s")] == ["u1"], "a read wakes it"
    assert not db.asleep
    assert await db.sleep()
    async with db.transaction() as tx:  # so does a transaction
        await tx.insert_message("s", "a1", "u1", "assistant", '{"id":"a1","role":"assistant","parts":[]}', None, 2)
    assert [r.id for r in await db.read.active_path("s")] == ["u1", "a1"]
    await db.close()


async def test_a_file_does_not_sleep_under_a_statement_or_a_transaction(tmp_path: Path) -> None:
    db = await SqliteDatabase.open(tmp_path / "busy.sqlite3")
    async with db.transaction() as tx:
        await tx.ensure_session("s", 1)
        assert not await db.sleep(), "a transaction is open"
    reads = [asyncio.ensure_future(db.read.active_path("s")) for _ in range(20)]
    await asyncio.sleep(0)  # the reads are under way
    assert not await db.sleep(), "statements are under way"
    assert all(r == [] for r in await asyncio.gather(*reads))
    # Many callers waking it at once open one connection.
    assert await db.sleep()
    rows = await asyncio.gather(*(db.read.active_path("s") for _ in range(20)))
    assert rows == [[]] * 20 and not db.asleep
    await db.close()
    assert not await db.sleep()


def test_the_heap_can_be_trimmed_on_this_platform() -> None:
    # glibc (the server's Docker image, CI): what closed files freed goes back to the system.
    assert trim_heap() is (sys.platform == "linux" and "glibc" in " ".join(platform.libc_ver()))


async def test_a_file_closed_while_it_wakes_stays_closed(tmp_path: Path) -> None:
    db = await SqliteDatabase.open(tmp_path / "closing.sqlite3")
    assert await db.sleep()
    waking = asyncio.ensure_future(db.read.active_path("s"))
    await asyncio.sleep(0)  # the reopen is under way
    await db.close()
    with pytest.raises(StorageError, match="closed"):
        await waking
    assert db.asleep, "no connection left open behind the close"
    with pytest.raises(StorageError, match="closed"):
        await db.read.active_path("s")


