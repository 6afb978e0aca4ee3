"""Search in an SQLite file: FTS5 (``messages_fts``), kept in step with the messages by triggers on
every write, and built for the messages of a file written before it."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Awaitable, Callable
from pathlib import Path

import pytest

from think_server.storage import Database
from think_server.storage.sqlite import SqliteDatabase
from think_server.storage.sqlite._schema import MIGRATIONS
from think_server.storage.sqlite._search import fts_query

from .. import test_search as scenarios
from ..test_search import _ids, _msg, _put


def _integrity(path: Path) -> None:
    conn = sqlite3.connect(path)
    try:  # raises if the index and the messages it indexes disagree
        conn.execute("INSERT INTO messages_fts (messages_fts) VALUES ('integrity-check')")
    finally:
        conn.close()


@pytest.mark.parametrize("scenario", [
    scenarios.test_search_finds_words_stemmed_newest_first_with_snippets,
    scenarios.test_updates_deletes_and_cleared_sessions_keep_the_index_in_step,
    scenarios.test_messages_that_are_not_json_have_no_words,
], ids=lambda f: f.__name__.removeprefix("test_"))
async def test_after_each_write_the_index_agrees_with_the_messages(
        db: SqliteDatabase, db_path: Path, scenario: Callable[[Database], Awaitable[None]]) -> None:
    await scenario(db)
    _integrity(db_path)


def test_each_word_is_quoted_so_nothing_typed_is_fts_syntax() -> None:
    assert fts_query('a "b') == '"a" """b"'
    assert fts_query("run NEAR(x)") == '"run" "NEAR(x)"'
    assert fts_query("  ") is None


async def test_a_file_from_before_search_has_its_messages_indexed(db_path: Path) -> None:
    conn = sqlite3.connect(db_path)
    try:
        for sql in MIGRATIONS[:6]:
            conn.executescript(sql)
        conn.execute("INSERT INTO sessions (id, created_at, updated_at) VALUES ('', 1, 1)")
        conn.execute("INSERT INTO messages (session_id, id, role, content, created_at, updated_at) "
                     "VALUES ('', 'old', 'user', ?, 1, 1)", (_msg("written before the index"),))
        conn.execute("PRAGMA user_version = 6")
        conn.commit()
    finally:
        conn.close()
    db = await SqliteDatabase.open(db_path)
    try:
        assert await _ids(db, "", "index") == ["old"]
    finally:
        await db.close()
    _integrity(db_path)


def _has_index(path: Path) -> bool:
    conn = sqlite3.connect(path)
    try:
        return conn.execute("SELECT count(*) FROM sqlite_master WHERE name LIKE 'messages_fts%' "
                            "OR name = 'message_words'").fetchone()[0] > 0
    finally:
        conn.close()


async def test_a_file_is_indexed_at_its_first_search_from_what_it_holds_then_kept_in_step(
        db: SqliteDatabase, db_path: Path) -> None:
    await _put(db, "", "a", _msg("written before any search"))
    assert not _has_index(db_path), "a new file has no search index: most are never searched"
    assert await _ids(db, "", "written") == ["a"]
    assert _has_index(db_path)
    await _put(db, "", "b", _msg("written after the first search"))
    assert await _ids(db, "", "written") == ["b", "a"]
    _integrity(db_path)


async def test_a_search_inside_a_transaction_indexes_the_file_in_it(db: SqliteDatabase, db_path: Path) -> None:
    await _put(db, "", "a", _msg("a word"))
    async with db.transaction() as tx:
        assert [h.message_id for h in await tx.search_messages("", "word", 5)] == ["a"]
    assert _has_index(db_path)
    _integrity(db_path)


def _old_file(db_path: Path, version: int, text: str, then: str = "") -> None:
    """A file at schema ``version`` (``then`` run after its migrations) with one message, 'old', saying ``text``."""
    conn = sqlite3.connect(db_path)
    try:
        for number, sql in enumerate(MIGRATIONS[:version]):
            conn.executescript(sql)
            conn.execute(f"PRAGMA user_version = {number + 1}")
        if then:
            conn.executescript(then)
        conn.execute("INSERT INTO sessions (id, created_at, updated_at) VALUES ('', 1, 1)")
        conn.execute("INSERT INTO messages (session_id, id, role, content, created_at, updated_at) "
                     "VALUES ('', 'old', 'user', ?, 1, 1)", (_msg(text),))
        conn.commit()
    finally:
        conn.close()


async def test_a_file_indexed_before_loses_its_index_when_migrated_and_builds_it_again(db_path: Path) -> None:
    _old_file(db_path, 10, "indexed by the old schema")  # to 10: 7 made the index, 11 drops it
    assert _has_index(db_path)
    db = await SqliteDatabase.open(db_path)
    try:
        assert not _has_index(db_path)
        assert await _ids(db, "", "schema") == ["old"]
    finally:
        await db.close()
    _integrity(db_path)


def _whole(mid: str, text: str) -> str:
    """A message's JSON as the server writes it: its id and role first, no spaces."""
    return json.dumps({"id": mid, "role": "user", "parts": [{"type": "text", "text": text}]}, separators=(",", ":"))


def _stored(path: Path, mid: str) -> str:
    conn = sqlite3.connect(path)
    try:
        return str(conn.execute("SELECT content FROM messages WHERE id = ?", (mid,)).fetchone()[0])
    finally:
        conn.close()


async def test_an_index_made_before_rows_were_kept_short_is_made_again_reading_them_whole(db_path: Path) -> None:
    """A file searched under migration 11 has triggers that read a row's text as its JSON: migration 12
    (rows keep their JSON without the id and role) drops them, and the next search indexes old and new rows."""
    # The index as a search under version 11 made it (its triggers read rows whole).
    _old_file(db_path, 11, "indexed by the old triggers", then=MIGRATIONS[6])
    assert _has_index(db_path)
    db = await SqliteDatabase.open(db_path)
    try:
        assert not _has_index(db_path)
        await _put(db, "", "new", _whole("new", "written short, indexed whole"))
        assert _stored(db_path, "new").startswith("[")
        assert await _ids(db, "", "indexed") == ["new", "old"]
        await _put(db, "", "newer", _whole("newer", "kept in step by the new triggers"))
        assert await _ids(db, "", "triggers") == ["newer", "old"]
    finally:
        await db.close()
    _integrity(db_path)
