"""Two servers on one database: each sees the instances, rows and work index the other wrote."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest

from think_server.storage.postgres import PostgresDatabase, PostgresStore


@pytest.fixture
async def two(postgres_url: str) -> AsyncIterator[tuple[PostgresStore, PostgresStore]]:
    a, b = PostgresStore(postgres_url), PostgresStore(postgres_url, pool_size=2)
    await asyncio.gather(a.start(), b.start())
    try:
        yield a, b
    finally:
        await a.close()
        await b.close()


async def test_what_one_server_writes_the_other_reads(two: tuple[PostgresStore, PostgresStore]) -> None:
    a, b = two
    first = await a.open("agent", "x")
    assert first.fresh and not await b.exists("agent", "y")
    async with first.transaction() as tx:
        await tx.ensure_session("s", 1)
        await tx.insert_message("s", "m", None, "user", '{"parts":[{"type":"text","text":"harbour lights"}]}', None, 1)
    assert await b.exists("agent", "x")
    second = await b.open("agent", "x")
    assert isinstance(first, PostgresDatabase) and isinstance(second, PostgresDatabase)
    assert second.instance == first.instance and not second.fresh
    assert [m.id for m in await second.read.active_path("s")] == ["m"]
    assert [h.message_id for h in await second.read.search_messages("s", "harbour", 5)] == ["m"]
    other = await b.open("agent", "y")
    assert await other.read.session("s") is None, "another instance's rows stay its own"
    for db in (first, second, other):
        await db.close()


async def test_the_work_index_is_one_for_every_server(two: tuple[PostgresStore, PostgresStore]) -> None:
    a, b = two
    index_a, index_b = await a.open_index(), await b.open_index()
    await index_a.mark("agent", "x", 1)
    await index_b.set_wake("agent", "y", 500)
    assert await index_b.marked() == [("agent", "x")]
    assert await index_a.wakes() == [("agent", "y", 500)]
    assert await a.exists("agent", "y"), "an instance the index names has its row"
    await index_b.unmark("agent", "x")
    assert await index_a.marked() == []
    await index_a.close()
    await index_b.close()


async def test_servers_opening_one_new_instance_at_once_make_one_row(two: tuple[PostgresStore, PostgresStore]) -> None:
    a, b = two
    for i in range(20):
        one, other = await asyncio.gather(a.open("agent", f"n{i}"), b.open("agent", f"n{i}"))
        assert isinstance(one, PostgresDatabase) and isinstance(other, PostgresDatabase)
        assert one.instance == other.instance
        assert one.fresh != other.fresh, "exactly one of them made it"
