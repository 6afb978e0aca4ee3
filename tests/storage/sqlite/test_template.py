"""New files are copies of one made once: fully migrated, never replacing a file, never half-written."""

from __future__ import annotations

import contextlib
import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from think_server.storage.sqlite import SCHEMA_VERSION, SqliteDatabase
from think_server.storage.sqlite._schema import MIGRATIONS
from think_server.storage.sqlite._template import PAGE_SIZE, create_from_template

from ._files import SET, settings, writes_and_reads


def _pragmas(path: Path) -> tuple[object, ...]:
    conn = sqlite3.connect(path)
    try:
        return tuple(conn.execute(f"PRAGMA {p}").fetchone()[0] for p in ("user_version", "journal_mode", "auto_vacuum",
                                                                    "page_size"))
    finally:
        conn.close()


def test_a_new_file_is_the_migrated_template(tmp_path: Path) -> None:
    path = tmp_path / "a.sqlite3"
    (tmp_path / "a.sqlite3.new").write_bytes(b"left by a crash while copying")
    assert create_from_template(path, MIGRATIONS)
    assert _pragmas(path) == (SCHEMA_VERSION, "wal", 2, PAGE_SIZE)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.sqlite3"], "no staging file stays"
    assert PAGE_SIZE == 1024 and path.stat().st_size < 64 * 1024, "a new file's floor: 1 KiB pages, not 4"
    conn = sqlite3.connect(path)
    try:  # packed once made: no page of the schema left half empty by the migrations that altered or dropped
        unused = [r[0] for r in conn.execute(
            "SELECT unused FROM dbstat WHERE name = 'sqlite_schema' AND pagetype = 'leaf'")]
    finally:
        conn.close()
    assert unused and sum(unused) < 2 * PAGE_SIZE, unused  # (3 KiB before; a row of it may not split)


def test_a_file_that_is_there_is_never_replaced(tmp_path: Path) -> None:
    path = tmp_path / "b.sqlite3"
    path.write_bytes(b"somebody else's")
    assert not create_from_template(path, MIGRATIONS)
    assert path.read_bytes() == b"somebody else's"


def test_a_new_files_folder_is_made_when_there_is_none(tmp_path: Path) -> None:
    path = tmp_path / "agents" / "chat" / "d.sqlite3"
    assert create_from_template(path, MIGRATIONS)
    assert _pragmas(path) == (SCHEMA_VERSION, "wal", 2, PAGE_SIZE)
    assert sorted(p.name for p in path.parent.iterdir()) == ["d.sqlite3"]


async def test_where_files_cannot_be_linked_the_file_is_made_migration_by_migration(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def no_links(src: object, dst: object) -> None:
        raise PermissionError(1, "Operation not permitted")  # as a file system without hard links says

    monkeypatch.setattr("think_server.storage.sqlite._template.os.link", no_links)
    path = tmp_path / "e.sqlite3"
    assert not create_from_template(path, MIGRATIONS)
    assert list(tmp_path.iterdir()) == [], "nothing made, no staging file left"
    db = await SqliteDatabase.open(path)
    try:
        async with db.transaction() as tx:
            await tx.ensure_session("", 1)
    finally:
        await db.close()
    assert _pragmas(path)[:2] == (SCHEMA_VERSION, "wal")


async def test_opening_a_new_file_makes_it_from_the_template_and_it_works(tmp_path: Path) -> None:
    path = tmp_path / "deep" / "c.sqlite3"
    db = await SqliteDatabase.open(path)
    try:
        await writes_and_reads(db, "")
    finally:
        await db.close()
    assert _pragmas(path) == (SCHEMA_VERSION, "wal", 2, PAGE_SIZE)


@contextlib.contextmanager
def _traced(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    """The statements every SQLite connection made meanwhile runs (SQLite's trace: each statement
    as it starts to run, those of a script one by one; a statement only prepared is not one)."""
    ran: list[str] = []
    real = sqlite3.connect

    def connect(*args: Any, **kwargs: Any) -> sqlite3.Connection:
        conn: sqlite3.Connection = real(*args, **kwargs)
        conn.set_trace_callback(ran.append)
        return conn

    with monkeypatch.context() as m:
        m.setattr(sqlite3, "connect", connect)
        yield ran


async def test_a_new_files_open_is_one_script_with_one_commit_that_syncs_nothing(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A file made from the template is in WAL mode already (no journal_mode), its meta rows are one
    INSERT (one commit, which starts its WAL: with synchronous=OFF, as nothing older is in it, so no
    fdatasync), and then the connection writes with synchronous=NORMAL like every other."""
    path = tmp_path / "d.sqlite3"
    with _traced(monkeypatch) as ran:
        db = await SqliteDatabase.open(path, ("agent", "it's one"))
    try:
        assert not any("journal_mode" in s for s in ran), ran
        writes = [s for s in ran if s.lstrip().upper().startswith(("INSERT", "UPDATE", "DELETE"))]
        assert len(writes) == 1 and len(ran) <= 9, ran
        # The schema read on the pool's thread (it makes the -wal and -shm files), then the script.
        assert ran[0].strip() == "SELECT 1 FROM meta WHERE 0;" and ran[1].strip() == "PRAGMA synchronous=OFF;"
        assert ran[-1].strip() == "PRAGMA synchronous=NORMAL;"
        assert await settings(db) == SET
        assert db.conn is not None
        meta = {str(k): str(v) for k, v in await db.conn.execute_fetchall("SELECT key, value FROM meta")}
        assert meta["agent"] == "agent" and meta["name"] == "it's one" and int(meta["created_at"]) > 0
    finally:
        await db.close()


async def test_a_new_file_where_a_wal_was_left_starts_it_with_its_sync(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A -wal file left by another file of that name: the first commit may restart a WAL that has
    frames, the case its header's sync is for, so it keeps synchronous=NORMAL."""
    path = tmp_path / "e.sqlite3"
    path.with_name(path.name + "-wal").write_bytes(b"")
    with _traced(monkeypatch) as ran:
        db = await SqliteDatabase.open(path, ("agent", "e"))
    try:
        assert "PRAGMA synchronous=OFF;" not in [s.strip() for s in ran], ran
        assert (await settings(db))["synchronous"] == 1
    finally:
        await db.close()
