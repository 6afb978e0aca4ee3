"""Group commit (``storage/postgres/_group.py``): the lone chunk-group appends of many instances, ready
while another is in flight, commit together, in one transaction; a batch the database refuses is
run again write by write, so only the write at fault fails, with its own error.

Each test holds the first append on a row lock (another connection's ``FOR UPDATE`` of its stream's
row), so that the appends of the other instances are all ready before it ends: then they go as one
batch. Which transaction wrote a row is the row's ``xmin``.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Awaitable

import asyncpg
import pytest

from think_server.storage import Database, LeaseLost, Node
from think_server.storage.postgres import PostgresStore
from think_server.storage.postgres._pool import Pool

INSTANCES = 6


async def _prepare(db: Database) -> None:
    async with db.transaction() as tx:
        await tx.ensure_session("", 1)
        await tx.insert_stream("st", "", "op", "req", "msg", False, 0, 1)


async def _append(db: Database, body: str) -> None:
    async with db.transaction() as tx:
        await tx.append_chunks("st", [json.dumps(body)], 2)


async def _opened(store: PostgresStore, node: Node | None = None) -> list[Database]:
    leases = store.leases(node) if node is not None else None
    await store.start()
    dbs = [await store.open("agent", f"i{n}") for n in range(INSTANCES)]
    for db in dbs:
        if leases is not None:
            await leases.take(db)
        await _prepare(db)
    return dbs


@pytest.fixture
async def plain(postgres_url: str) -> AsyncIterator[tuple[PostgresStore, list[Database]]]:
    store = PostgresStore(postgres_url)
    try:
        yield store, await _opened(store)
    finally:
        await store.close()


@pytest.fixture
async def leased(postgres_url: str) -> AsyncIterator[tuple[PostgresStore, list[Database]]]:
    store = PostgresStore(postgres_url)
    try:
        yield store, await _opened(store, Node("node-a", "http://node-a.internal:8000", 30.0))
    finally:
        await store.close()


async def _while_one_waits(admin: asyncpg.Connection, dbs: list[Database],
                           then: list[Awaitable[None]]) -> list[BaseException | None]:
    """Append to ``dbs[0]`` held on a lock until every one of ``then`` is ready, then let it go; the
    outcome of each of ``then`` (None: it committed)."""
    first = dbs[0].instance  # type: ignore[attr-defined]
    async with admin.transaction():
        await admin.execute("SELECT 1 FROM streams WHERE instance = $1 FOR UPDATE", first)
        held = asyncio.create_task(_append(dbs[0], "first"))
        for _ in range(500):  # until its statement waits for the lock (in flight)
            if await admin.fetchval("SELECT count(*) FROM pg_stat_activity WHERE application_name = 'think-server' "
                                    "AND wait_event_type = 'Lock'"):
                break
            await asyncio.sleep(0.01)
        else:
            raise AssertionError("the first append never waited for the lock")
        rest = [asyncio.ensure_future(t) for t in then]
        await asyncio.sleep(0.2)  # each is in its commit (queued behind the first)
    await held
    outcomes = await asyncio.gather(*rest, return_exceptions=True)
    return [o if isinstance(o, BaseException) else None for o in outcomes]


async def _chunks(admin: asyncpg.Connection, db: Database) -> list[str]:
    rows = await admin.fetch("SELECT body FROM stream_chunks WHERE instance = $1 ORDER BY segment",
                             db.instance)  # type: ignore[attr-defined]
    return [b for r in rows for b in json.loads(r[0])]


async def _writers(admin: asyncpg.Connection, dbs: list[Database]) -> set[str]:
    """The transactions that wrote the chunks of ``dbs``."""
    rows = await admin.fetch("SELECT DISTINCT xmin::text FROM stream_chunks WHERE instance = ANY($1::bigint[])",
                             [db.instance for db in dbs])  # type: ignore[attr-defined]
    return {r[0] for r in rows}


async def test_appends_of_many_instances_ready_at_once_commit_in_one_transaction_each_once(
        admin: asyncpg.Connection, plain: tuple[PostgresStore, list[Database]]) -> None:
    store, dbs = plain
    outcomes = await _while_one_waits(admin, dbs, [_append(db, f"chunk of {n}") for n, db in enumerate(dbs[1:], 1)])
    assert outcomes == [None] * (INSTANCES - 1)
    for n, db in enumerate(dbs[1:], 1):
        assert await _chunks(admin, db) == [f"chunk of {n}"]
    assert len(await _writers(admin, dbs[1:])) == 1, "one transaction, one round trip, for them all"
    assert store.group is not None and (store.group.batches, store.group.writes) == (2, INSTANCES)
    # Then each again, alone now (the store idle): each its own transaction, as before.
    for db in dbs[1:]:
        await _append(db, "again")
    assert len(await _writers(admin, dbs[1:])) == INSTANCES


async def test_a_stale_instance_in_a_batch_fails_alone_and_the_others_commit(
        admin: asyncpg.Connection, leased: tuple[PostgresStore, list[Database]]) -> None:
    store, dbs = leased
    stale = dbs[3]
    await admin.execute("UPDATE leases SET epoch = epoch + 1 WHERE instance = $1", stale.instance)  # type: ignore[attr-defined]
    outcomes = await _while_one_waits(admin, dbs, [_append(db, f"chunk of {n}") for n, db in enumerate(dbs[1:], 1)])
    assert isinstance(outcomes[2], LeaseLost), outcomes[2]
    assert outcomes[:2] + outcomes[3:] == [None] * (INSTANCES - 2)
    assert stale.lease is not None and stale.lease.lost is not None, "lost from now on"
    assert await _chunks(admin, stale) == []
    for n, db in enumerate(dbs[1:], 1):
        if db is not stale:
            assert await _chunks(admin, db) == [f"chunk of {n}"], "committed once"
    assert store.group is not None and (store.group.batches, store.group.writes) == (2, INSTANCES)


async def test_a_write_that_breaks_a_constraint_fails_alone_and_the_others_commit(
        admin: asyncpg.Connection, plain: tuple[PostgresStore, list[Database]]) -> None:
    store, dbs = plain
    broken = dbs[2]
    # The segment its next append takes is there already.
    await admin.execute("INSERT INTO stream_chunks (instance, stream_id, segment, first_chunk, body, created_at) "
                        "VALUES ($1, 'st', 0, 0, '[\"squatter\"]', 1)", broken.instance)  # type: ignore[attr-defined]
    outcomes = await _while_one_waits(admin, dbs, [_append(db, f"chunk of {n}") for n, db in enumerate(dbs[1:], 1)])
    assert isinstance(outcomes[1], asyncpg.UniqueViolationError), outcomes[1]
    assert outcomes[:1] + outcomes[2:] == [None] * (INSTANCES - 2)
    assert await _chunks(admin, broken) == ["squatter"]
    for n, db in enumerate(dbs[1:], 1):
        if db is not broken:
            assert await _chunks(admin, db) == [f"chunk of {n}"]
    assert store.group is not None and (store.group.batches, store.group.writes) == (2, INSTANCES)


async def test_a_caller_cancelled_before_its_batch_is_sent_saves_nothing(
        admin: asyncpg.Connection, plain: tuple[PostgresStore, list[Database]]) -> None:
    store, dbs = plain

    async def cancel_it() -> None:
        withdrawn = asyncio.ensure_future(_append(dbs[1], "withdrawn"))
        await asyncio.sleep(0.1)  # queued behind the first, not sent
        withdrawn.cancel()
        with pytest.raises(asyncio.CancelledError):
            await withdrawn

    outcomes = await _while_one_waits(admin, dbs, [cancel_it(), _append(dbs[2], "kept")])
    assert outcomes == [None, None]
    assert await _chunks(admin, dbs[1]) == []
    assert await _chunks(admin, dbs[2]) == ["kept"]
    assert store.group is not None and (store.group.batches, store.group.writes) == (2, 2), "sent: the first, kept"
    await _append(dbs[1], "after")  # its transaction ended cleanly: the next one works
    assert await _chunks(admin, dbs[1]) == ["after"]


async def test_the_group_commit_takes_the_next_free_connection_before_transactions_waiting(postgres_url: str) -> None:
    pool = Pool(postgres_url, 1)
    try:
        held = await pool.acquire()
        order: list[str] = []

        async def take(name: str, *, urgent: bool = False) -> None:
            conn = await pool.acquire(urgent=urgent)
            order.append(name)
            await asyncio.sleep(0.01)
            pool.release(conn)

        waiting = [asyncio.create_task(take("transaction 1")), asyncio.create_task(take("transaction 2"))]
        await asyncio.sleep(0.05)
        withdrawn = asyncio.create_task(take("cancelled", urgent=True))
        waiting.append(asyncio.create_task(take("group commit", urgent=True)))
        await asyncio.sleep(0.05)
        withdrawn.cancel()
        pool.release(held)
        await asyncio.gather(*waiting)
        assert order == ["group commit", "transaction 1", "transaction 2"]
        async with asyncio.timeout(5):  # every slot back: the one connection is free again (not: a hang)
            pool.release(await pool.acquire())
    finally:
        await pool.close()
