"""A file opens with the statements of a turn's start prepared (on its thread), so a fresh
instance's first turn does not prepare them on the event loop; preparing runs nothing."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from think_server.storage.sqlite import SqliteDatabase
from think_server.storage.sqlite._messages import LEAF_FOLLOWS
from think_server.storage.sqlite._prepared import NEW_FILE_TURN, TURN_END, TURN_START, prepare_turn_start

#: The operation as the process that wrote it holds it (its settlement does not read it back).
WRITTEN = ("input", '{"messages":[{"id":"m1"}]}')


def _prepared(db: SqliteDatabase) -> set[str]:
    """The SQL of the statements the file's connection holds prepared (SQLite's ``sqlite_stmt`` table,
    built into the SQLite this project runs on), the query itself aside."""
    assert db.conn is not None
    raw = db.conn._connection
    assert raw is not None
    query = "SELECT sql FROM sqlite_stmt"
    return {r[0] for r in raw.execute(query).fetchall()} - {query}


async def test_a_new_file_opens_with_the_turn_start_prepared(tmp_path: Path) -> None:
    db = await SqliteDatabase.open(tmp_path / "new.sqlite3", ("agent", "one"))
    try:
        assert set(NEW_FILE_TURN) <= _prepared(db)
        assert set(TURN_START) - set(NEW_FILE_TURN) == {LEAF_FOLLOWS}, "no leaf chosen in a new file"
        assert set(TURN_END) <= set(NEW_FILE_TURN), "made for a turn: its end too"
    finally:
        await db.close()


async def test_a_file_found_and_a_file_woken_open_with_it_too(tmp_path: Path) -> None:
    path = tmp_path / "found.sqlite3"
    await (await SqliteDatabase.open(path)).close()
    db = await SqliteDatabase.open(path)
    try:
        assert set(TURN_START) <= _prepared(db)
        assert not set(TURN_END) & _prepared(db), "opened to be read, maybe: not the turn's end"
        assert await db.sleep()
        await db.wake()
        assert set(TURN_START) <= _prepared(db)
        assert not set(TURN_END) & _prepared(db)
    finally:
        await db.close()


async def test_preparing_runs_none_of_them(tmp_path: Path) -> None:
    path = tmp_path / "quiet.sqlite3"
    await (await SqliteDatabase.open(path)).close()
    conn = sqlite3.connect(path)
    try:
        prepare_turn_start(conn, NEW_FILE_TURN + TURN_START)
        assert conn.total_changes == 0
        assert not conn.in_transaction
        counts = [conn.execute(f"SELECT count(*) FROM {t}").fetchone()[0]
                  for t in ("sessions", "operations", "messages", "streams", "stream_chunks")]
        assert counts == [0, 0, 0, 0, 0]
    finally:
        conn.close()


async def _first_turn(db: SqliteDatabase) -> list[str]:
    """A turn's start and first chunks on ``db`` (then closed), checked to prepare no statement of its
    own; the statements it ran."""
    assert db.conn is not None and db.conn._connection is not None
    held = _prepared(db)
    ran: list[str] = []
    db.conn._connection.set_trace_callback(ran.append)
    try:
        async with db.transaction() as tx:  # an idle session's input: written as started
            await tx.ensure_session("s", 1)
            assert await tx.insert_operation("op", "s", "input", "client", "{}", "{}", 1, running_for="m2")
            assert await tx.insert_message("s", "m1", None, "user", '{"parts": []}', "op", 1)
        async with db.transaction() as tx:
            await tx.insert_stream("st", "s", "op", "op", "m2", False, 0, 2)
            await tx.append_chunks("st", ['{"type":"start"}'], 2)
        assert db.append_now("st", ['{"type":"start-step"}'], 3)  # a lone batch: its place looked up,
        assert db.append_now("st", ['{"type":"text-start","id":"t"}'], 3)  # then the one it said
        assert _prepared(db) - held == {"BEGIN IMMEDIATE", "COMMIT"}  # (which SQLite prepares in no time)
    finally:
        db.conn._connection.set_trace_callback(None)
        await db.close()
    return ran


async def test_a_turn_starts_with_no_statement_of_its_own_to_prepare(tmp_path: Path) -> None:
    """What a fresh instance's first turn runs up to its first chunk, statement by statement, is
    all in :data:`NEW_FILE_TURN`: the list is the turn's, not a guess."""
    db = await SqliteDatabase.open(tmp_path / "turn.sqlite3")
    ran = await _first_turn(db)
    written = [" ".join(s.split()) for s in ran if s.split()[0] in ("INSERT", "UPDATE")]
    assert {s.split(" (")[0].split(" SET")[0] for s in written} == {
        "INSERT INTO sessions", "INSERT INTO operations", "INSERT INTO messages",
        "INSERT INTO streams", "INSERT INTO stream_chunks"}, "no leaf chosen by hand in a new file: none ended"


async def test_a_found_file_starts_its_turn_with_no_statement_of_its_own_to_prepare(tmp_path: Path) -> None:
    """The same in a file found there (or woken): it may have a leaf chosen by hand, so a message written
    ends the choice, and that statement is prepared too."""
    path = tmp_path / "found.sqlite3"
    await (await SqliteDatabase.open(path)).close()
    db = await SqliteDatabase.open(path)
    ran = await _first_turn(db)
    assert any(" ".join(s.split()).startswith("UPDATE sessions SET active_leaf = NULL") for s in ran)


async def test_a_leaf_chosen_in_a_new_file_is_ended_by_the_next_message(tmp_path: Path) -> None:
    """A new file skips ending a choice only while none was made: once a leaf is chosen by hand, the next
    message written ends it, and the active path follows the newest message again."""
    db = await SqliteDatabase.open(tmp_path / "chosen.sqlite3")
    try:
        async with db.transaction() as tx:
            await tx.ensure_session("s", 1)
            assert await tx.insert_message("s", "a", None, "user", '{"parts": []}', None, 1)
            assert await tx.insert_message("s", "b", "a", "assistant", '{"parts": []}', None, 1)
            assert await tx.insert_message("s", "c", "a", "assistant", '{"parts": []}', None, 1)
        async with db.transaction() as tx:
            await tx.set_active_leaf("s", "b", 2)
        assert [r.id for r in await db.read.active_path("s")] == ["a", "b"]
        async with db.transaction() as tx:
            assert await tx.insert_message("s", "d", "c", "user", '{"parts": []}', None, 3)
        assert [r.id for r in await db.read.active_path("s")] == ["a", "c", "d"]
    finally:
        await db.close()


async def test_a_turns_last_transaction_has_no_statement_of_its_own_to_prepare(tmp_path: Path) -> None:
    """What a new instance's first turn runs in its last transaction (its last chunks, the stream's end,
    the answer, the settlement) was prepared when its file was made: the transaction prepares nothing
    on the event loop."""
    db = await SqliteDatabase.open(tmp_path / "end.sqlite3")
    try:
        await _start_turn(db)
        held = _prepared(db)
        await _end_turn(db, last_chunks=True)
        assert _prepared(db) - held == set()
        assert (await db.read.operation("op")) is not None
    finally:
        await db.close()


async def test_a_new_file_woken_may_have_a_leaf_chosen_again(tmp_path: Path) -> None:
    """Asleep, the file may have been written by another process (a tool): woken, it ends choices again."""
    db = await SqliteDatabase.open(tmp_path / "woken.sqlite3")
    try:
        assert not db.leaf_chosen
        assert await db.sleep()
        await db.wake()
        assert db.leaf_chosen
    finally:
        await db.close()


async def test_an_open_file_holds_its_turns_statements_and_no_other(tmp_path: Path) -> None:
    """Every statement ``sqlite3`` runs stays prepared in its connection's cache, 1-9 KB of SQLite's memory
    each, in every open file: what a file runs once (its schema read, its WAL mode) or at rest (giving its
    page cache back) runs as a script, which is not kept."""
    path = tmp_path / "held.sqlite3"
    db = await SqliteDatabase.open(path, ("agent", "one"))
    try:
        await _first_turn_and_rest(db)
        assert _prepared(db) == set(NEW_FILE_TURN) | {"BEGIN IMMEDIATE", "COMMIT"}
    finally:
        await db.close()
    db = await SqliteDatabase.open(path)  # found there
    try:
        await db.shrink_memory()
        assert not {s for s in _prepared(db) if "journal_mode" in s or "shrink_memory" in s}
        assert set(TURN_START) <= _prepared(db)
    finally:
        await db.close()


async def _first_turn_and_rest(db: SqliteDatabase) -> None:
    await _start_turn(db)
    await _end_turn(db)
    await db.shrink_memory()


async def _start_turn(db: SqliteDatabase) -> None:
    """A new input's start, as an idle session writes it: the operation (started), the user's message,
    the stream and its start chunk, in one transaction."""
    async with db.transaction() as tx:
        await tx.ensure_session("s", 1)
        assert await tx.insert_operation("op", "s", WRITTEN[0], "client", WRITTEN[1], "{}", 1, running_for="m2")
        assert await tx.insert_message("s", "m1", None, "user", '{"parts": []}', "op", 1)
        await tx.insert_stream("st", "s", "op", "op", "m2", False, 0, 2)
        await tx.append_chunks("st", ['{"type":"start"}'], 2)


async def _end_turn(db: SqliteDatabase, *, last_chunks: bool = False) -> None:
    """Its last transaction: (its last chunks,) the stream's end, the answer, the settlement."""
    async with db.transaction() as tx:
        if last_chunks:
            await tx.append_chunks("st", ['{"type":"finish"}'], 3)
        await tx.finish_stream("st", "completed", 3)
        assert await tx.insert_message("s", "m2", "m1", "assistant", '{"parts": []}', "op", 3)
        assert await tx.settle_operation("op", "completed", "done", None, None, 3, 0, written=WRITTEN)


async def test_giving_the_page_cache_back_inside_a_transaction_does_not_commit_it(tmp_path: Path) -> None:
    """A session at rest gives the file's page cache back while another session of the instance may be
    inside a transaction: a script would commit that first; the statement does not."""
    db = await SqliteDatabase.open(tmp_path / "shrink.sqlite3")
    try:
        with pytest.raises(RuntimeError, match="rolled back"):
            async with db.transaction() as tx:
                await tx.ensure_session("s", 1)
                await db.shrink_memory()
                raise RuntimeError("rolled back")
        assert await db.read.session("s") is None
        async with db.transaction() as tx:
            await tx.ensure_session("s", 2)
        assert await db.read.session("s") is not None
    finally:
        await db.close()
