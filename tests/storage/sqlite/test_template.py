"""New files are copies of one made once: fully migrated, never replacing a file, never half-written."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from think_server.storage.sqlite import SCHEMA_VERSION, SqliteDatabase
from think_server.storage.sqlite._schema import MIGRATIONS
from think_server.storage.sqlite._template import PAGE_SIZE, create_from_template


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


async def test_opening_a_new_file_makes_it_from_the_template_and_it_works(tmp_path: Path) -> None:
    path = tmp_path / "deep" / "c.sqlite3"
    db = await SqliteDatabase.open(path)
    try:
        async with db.transaction() as tx:
            await tx.ensure_session("", 1)
        assert await db.read.session("") is not None
    finally:
        await db.close()
    assert _pragmas(path) == (SCHEMA_VERSION, "wal", 2, PAGE_SIZE)
