"""A transaction talks to the database lazily (``storage/postgres/_tx.py``): read from the server's own
statement log (``log_statement = 'all'``, one line per message the store sent), a group of chunks is
one statement, an empty transaction none, and a kept write's error comes out of the same ``async with``."""

from __future__ import annotations

import asyncio
import re

import asyncpg
import pytest

from tests.postgres import PostgresServer
from think_server.storage.postgres import PostgresDatabase, PostgresStore

from .conftest import terminate_store_connections

_SENT = re.compile(r"\[(\d+)\] LOG:  (?:statement|execute [^:]+): (.*)")


@pytest.fixture
async def logged(postgres: PostgresServer, postgres_url: str, admin: asyncpg.Connection,
                 db: PostgresDatabase) -> PostgresDatabase:
    """``db``, its statements logged by the server from now on (a setting new connections take)."""
    await admin.execute(f"ALTER DATABASE {postgres_url.rsplit('/', 1)[1]} SET log_statement = 'all'")
    await terminate_store_connections(admin)
    await asyncio.sleep(0.2)
    async with db.transaction() as tx:
        await tx.ensure_session("", 1)
        await tx.insert_stream("st", "", "op", "req", "msg", False, 0, 1)
    return db


async def _sent(postgres: PostgresServer, admin: asyncpg.Connection, since: int) -> list[str]:
    """The first word of each statement the store's connections sent since the log was ``since`` long
    (``WITH``: the append, one statement)."""
    await asyncio.sleep(0.2)  # the server writes its log as it goes
    ours = {str(r[0]) for r in await admin.fetch(
        "SELECT pid FROM pg_stat_activity WHERE application_name = 'think-server' AND datname = current_database()")}
    return [m[2].split(" ")[0] for line in postgres.log[since:].splitlines()
            if (m := _SENT.search(line)) and m[1] in ours]


async def test_a_group_of_chunks_is_one_statement_and_an_empty_transaction_none(
        postgres: PostgresServer, admin: asyncpg.Connection, logged: PostgresDatabase) -> None:
    since = len(postgres.log)
    async with logged.transaction() as tx:
        await tx.append_chunks("st", ['{"type":"text-delta","delta":"a"}', '{"type":"text-delta","delta":"b"}'], 2)
    async with logged.transaction():
        pass
    assert await _sent(postgres, admin, since) == ["WITH"], "no BEGIN, no COMMIT: it commits by itself"
    assert await logged.read.chunk_bodies("st") == ['{"type":"text-delta","delta":"a"}',
                                                    '{"type":"text-delta","delta":"b"}']


async def test_writes_are_kept_until_an_answer_is_needed_and_go_in_order(
        postgres: PostgresServer, admin: asyncpg.Connection, logged: PostgresDatabase) -> None:
    since = len(postgres.log)
    async with logged.transaction() as tx:
        await tx.set_last_body("", '{"k":1}', 2)
        await tx.append_chunks("st", ['{"n":1}'], 2)
        assert (await tx.session("")) is not None  # an answer: BEGIN, what was kept, then the read
        await tx.finish_stream("st", "completed", 3)
    assert await _sent(postgres, admin, since) == ["BEGIN", "UPDATE", "WITH", "SELECT", "UPDATE", "COMMIT"]
    row = await logged.read.session("")
    assert row is not None and row.last_body_json == '{"k":1}'
    stream = await logged.read.stream("st")
    assert stream is not None and (stream.status, stream.chunk_count) == ("completed", 1)


async def test_a_kept_writes_error_comes_out_of_its_transaction_and_nothing_is_saved(logged: PostgresDatabase) -> None:
    with pytest.raises(asyncpg.CheckViolationError):
        async with logged.transaction() as tx:
            await tx.append_chunks("st", ['{"n":1}'], 2)
            await tx.finish_stream("st", "not-a-status", 3)  # kept: nothing raised yet
    stream = await logged.read.stream("st")
    assert stream is not None and (stream.status, stream.chunk_count) == ("streaming", 0)
    with pytest.raises(asyncpg.CheckViolationError):
        async with logged.transaction() as tx:
            await tx.finish_stream("st", "not-a-status", 3)
            await tx.session("")  # sends it, and raises its error here
    assert await logged.read.chunk_bodies("st") == []


async def test_a_lone_write_the_server_refuses_leaves_its_connection_in_the_pool(
        admin: asyncpg.Connection, logged: PostgresDatabase) -> None:
    async def ours() -> set[int]:
        return {r[0] for r in await admin.fetch("SELECT pid FROM pg_stat_activity WHERE "
                                                "application_name = 'think-server' AND datname = current_database()")}

    before = await ours()
    for _ in range(3):
        with pytest.raises(asyncpg.CheckViolationError):
            async with logged.transaction() as tx:
                await tx.finish_stream("st", "not-a-status", 3)
    assert await ours() == before, "no connection closed, none made"


async def test_a_submission_is_begin_two_statements_and_commit(
        postgres: PostgresServer, admin: asyncpg.Connection, logged: PostgresDatabase) -> None:
    since = len(postgres.log)
    async with logged.transaction() as tx:  # what a submission does (harness/session/_session.py)
        await tx.ensure_session("s2", 5)
        assert await tx.insert_operation("op2", "s2", "input", "client", "{}", None, 5)
        await tx.set_client_tools("s2", '["t"]', 5)
        await tx.set_last_body("s2", '{"b":1}', 6)
        await tx.set_last_terminal("s2", None, 7)
    assert await _sent(postgres, admin, since) == ["BEGIN", "WITH", "UPDATE", "COMMIT"], \
        "the session's insert goes with the operation's, the three fields in one update"
    session = await logged.read.session("s2")
    assert session is not None and (session.client_tools_json, session.last_body_json,
                                    session.last_terminal_json) == ('["t"]', '{"b":1}', None)
    updated = await admin.fetchval("SELECT updated_at FROM sessions WHERE id = 's2'")
    assert updated == 7, "the last update's time"
    async with logged.transaction() as tx:  # the same operation again: not inserted, as before
        await tx.ensure_session("s2", 8)
        assert not await tx.insert_operation("op2", "s2", "input", "client", "{}", None, 8)
    operation = await logged.read.operation("op2")
    assert operation is not None and operation.session_id == "s2"


async def test_a_streams_insert_and_its_first_chunks_are_one_statement(
        postgres: PostgresServer, admin: asyncpg.Connection, logged: PostgresDatabase) -> None:
    since = len(postgres.log)
    async with logged.transaction() as tx:
        await tx.insert_stream("st2", "", "op", "req", "msg", False, 4, 10)
        await tx.append_chunks("st2", ['{"n":1}', '{"n":2}'], 11)
    assert await _sent(postgres, admin, since) == ["WITH"]
    async with logged.transaction() as tx:
        await tx.append_chunks("st2", ['{"n":3}'], 12)
    stream = await logged.read.stream("st2")
    assert stream is not None and (stream.status, stream.chunk_count, stream.first_seq, stream.created_at) == (
        "streaming", 3, 4, 10)
    assert await logged.read.chunk_bodies("st2") == ['{"n":1}', '{"n":2}', '{"n":3}']
    with pytest.raises(asyncpg.UniqueViolationError):  # a stream's id taken: refused as before
        async with logged.transaction() as tx:
            await tx.insert_stream("st2", "", "op", "req", "msg", False, 0, 13)
            await tx.append_chunks("st2", ['{"n":4}'], 13)
    assert await logged.read.chunk_bodies("st2") == ['{"n":1}', '{"n":2}', '{"n":3}']


async def test_a_work_index_mark_and_unmark_are_one_statement_each(
        postgres: PostgresServer, admin: asyncpg.Connection, store: PostgresStore, logged: PostgresDatabase) -> None:
    index = await store.open_index()
    try:
        since = len(postgres.log)
        await index.mark("agent", "never-opened", 3)
        await index.unmark("agent", "instance")
        assert await _sent(postgres, admin, since) == ["WITH", "DELETE"]
        assert await index.marked() == [("agent", "never-opened")]
    finally:
        await index.close()
