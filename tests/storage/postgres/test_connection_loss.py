"""Connections the database server drops (a restart, a network cut, an administrator's
``pg_terminate_backend``): the next transaction and read get a new connection, a read that was cut
short runs again, and a transaction that lost its connection fails with an error that says so:
nothing of it is saved, never silently."""

from __future__ import annotations

import asyncio

import asyncpg
import pytest

from tests.postgres import free_port
from think_server.storage import Problem, StorageError, describe_problem, problem_of
from think_server.storage.postgres import PostgresDatabase, PostgresStore

from .conftest import terminate_store_connections


async def _add_session(db: PostgresDatabase, session: str) -> None:
    async with db.transaction() as tx:
        await tx.ensure_session(session, 1)


async def test_connections_lost_between_transactions_are_replaced(db: PostgresDatabase,
                                                                  admin: asyncpg.Connection) -> None:
    await _add_session(db, "a")
    assert await db.read.session("a") is not None
    for n in range(3):
        assert await terminate_store_connections(admin) >= 1
        await asyncio.sleep(0.2)  # asyncpg has read the server's goodbye: the pool takes a new connection
        await _add_session(db, f"after-{n}")  # one write, sent alone: it commits by itself
        assert await terminate_store_connections(admin) >= 1
        assert await db.read.session(f"after-{n}") is not None  # before the goodbye is read: tried again


async def test_a_transaction_that_finds_its_connection_gone_before_it_sent_anything_takes_another(
        db: PostgresDatabase, admin: asyncpg.Connection) -> None:
    """Killed and not noticed yet: BEGIN, the first thing such a transaction sends, goes again on a new
    connection (nothing of it ran). (A transaction of one write sends that write first: lost on its
    way, whether it ran is not known, and the error says so.)"""
    await _add_session(db, "s")
    for n in range(5):
        assert await db.read.session("s") is not None  # a pooled connection, used just now
        assert await terminate_store_connections(admin) >= 1
        async with db.transaction() as tx:
            assert await tx.insert_operation(f"op{n}", "s", "input", "server", "{}", None, 1)
        assert await db.read.operation(f"op{n}") is not None


async def test_a_read_whose_connection_is_lost_while_it_runs_is_run_again(db: PostgresDatabase,
                                                                          admin: asyncpg.Connection) -> None:
    await _add_session(db, "s")
    await admin.execute("BEGIN")
    await admin.execute("LOCK TABLE sessions IN ACCESS EXCLUSIVE MODE")  # the read waits for it
    read = asyncio.create_task(db.read.session("s"))
    waiting: list[int] = []
    for _ in range(200):
        waiting = [r[0] for r in await admin.fetch(
            "SELECT pid FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock'")]
        if waiting:
            break
        await asyncio.sleep(0.02)
    assert len(waiting) == 1, "the read waits on the lock"
    assert await admin.fetchval("SELECT pg_terminate_backend($1)", waiting[0])
    await asyncio.sleep(0.1)
    await admin.execute("COMMIT")
    row = await asyncio.wait_for(read, 10)
    assert row is not None and row.id == "s", "read again on a new connection"


async def test_a_transaction_whose_connection_is_lost_fails_saying_so_and_saves_nothing(
        db: PostgresDatabase, admin: asyncpg.Connection) -> None:
    for noticed in (True, False):
        with pytest.raises(StorageError) as lost:
            async with db.transaction() as tx:
                await tx.ensure_session("s", 1)
                assert await tx.session("s") is not None  # the transaction is on the server now
                await terminate_store_connections(admin)
                if noticed:
                    await asyncio.sleep(0.2)
                await tx.insert_operation("op", "s", "input", "server", "{}", None, 1)
        assert lost.value.problem is Problem.UNREACHABLE and problem_of(lost.value) is Problem.UNREACHABLE
        assert "lost during a transaction, so nothing of it was saved" in str(lost.value)
        assert await db.read.session("s") is None and await db.read.operation("op") is None
    await _add_session(db, "next")  # the instance goes on
    assert await db.read.session("next") is not None


async def test_a_connection_lost_just_before_commit_is_told_as_nothing_saved(db: PostgresDatabase,
                                                                             admin: asyncpg.Connection) -> None:
    with pytest.raises(StorageError, match="lost during a transaction, so nothing of it was saved"):
        async with db.transaction() as tx:
            await tx.ensure_session("s", 1)
            assert await tx.session("t") is None  # the transaction is on the server now
            await tx.ensure_session("t", 1)  # kept, to go with the COMMIT
            await terminate_store_connections(admin)
            await asyncio.sleep(0.2)  # asyncpg has read the goodbye: COMMIT is never sent
    assert await db.read.session("s") is None and await db.read.session("t") is None


async def test_lost_connections_give_their_places_in_the_pool_back(postgres_url: str,
                                                                   admin: asyncpg.Connection) -> None:
    store = PostgresStore(postgres_url, pool_size=1)
    await store.start()
    db = await store.open("agent", "x")
    assert isinstance(db, PostgresDatabase)
    try:
        for n in range(5):
            with pytest.raises(StorageError):
                async with db.transaction() as tx:
                    await tx.ensure_session(f"lost-{n}", 1)
                    await tx.sessions()  # the transaction is on the server now
                    await terminate_store_connections(admin)
                    await tx.ensure_session(f"lost-{n}-again", 1)
        await asyncio.wait_for(_add_session(db, "kept"), 10)  # one place, and it is free
        assert [s.id for s in await db.read.sessions()] == ["kept"]
    finally:
        await db.close()
        await store.close()


async def test_a_database_that_cannot_be_reached_is_a_passing_problem_named_without_its_password() -> None:
    url = f"postgresql://think:s3cret@127.0.0.1:{free_port()}/think"
    store = PostgresStore(url)
    with pytest.raises(StorageError) as refused:
        await store.start()
    assert refused.value.problem is Problem.UNREACHABLE and refused.value.problem.transient
    assert f"cannot connect to the database postgresql://think:***@127.0.0.1:{url.split(':')[3]}" in str(refused.value)
    assert "s3cret" not in str(refused.value) and "s3cret" not in repr(store)
    assert describe_problem(Problem.UNREACHABLE) == "the server lost its connection to its database"
    assert (await store.check_writable() or "").startswith("the database cannot be reached: cannot connect")
