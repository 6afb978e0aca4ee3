"""Leases and the fence (``storage/postgres/_leases.py``, ``_tx.py``): two stores on one database play
two nodes. A lease is taken by compare-and-set, renewed, released, taken over once expired; a write of
the node that lost it is refused inside the database, whichever way the transaction talks to it."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator

import asyncpg
import pytest

from think_server.storage import Database, LeaseHeld, LeaseLost, Leases, Node, StorageError
from think_server.storage.postgres import PostgresDatabase, PostgresStore

# Short: the tests wait for a lease to expire.
LEASE_S = 0.6


class _Node:
    def __init__(self, url: str, name: str) -> None:
        self.node = Node(name, f"http://{name}.internal:8000", LEASE_S)
        self.store = PostgresStore(url, pool_size=3)
        self.leases: Leases = self.store.leases(self.node)  # type: ignore[assignment]

    async def open(self, name: str = "x") -> Database:
        return await self.store.open("agent", name)


@pytest.fixture
async def nodes(postgres_url: str) -> AsyncIterator[tuple[_Node, _Node]]:
    a, b = _Node(postgres_url, "node-a"), _Node(postgres_url, "node-b")
    await asyncio.gather(a.store.start(), b.store.start())
    try:
        yield a, b
    finally:
        await a.store.close()
        await b.store.close()


async def _write(db: Database, body: str) -> None:
    """A lone write: the hot path's one statement, committed by itself."""
    async with db.transaction() as tx:
        await tx.append_chunks("st", [json.dumps(body)], 2)


async def _write_in_transaction(db: Database, body: str) -> None:
    """Writes and a read: BEGIN (with the fence), the writes, COMMIT."""
    async with db.transaction() as tx:
        await tx.append_chunks("st", [json.dumps(body)], 2)
        await tx.session("")


async def _bodies(admin: asyncpg.Connection) -> list[str]:
    """Every chunk committed, whoever wrote it (each chunk's text is a JSON string here)."""
    rows = await admin.fetch("SELECT body FROM stream_chunks ORDER BY segment")
    return [b for r in rows for b in json.loads(r[0])]


async def _prepare(db: Database) -> None:
    async with db.transaction() as tx:
        await tx.ensure_session("", 1)
        await tx.insert_stream("st", "", "op", "req", "msg", False, 0, 1)


async def test_a_lease_is_one_nodes_until_it_expires_then_the_next_takes_it_with_a_higher_epoch(
        nodes: tuple[_Node, _Node], admin: asyncpg.Connection) -> None:
    a, b = nodes
    db_a, db_b = await a.open(), await b.open()
    first = await a.leases.take(db_a)
    assert first.epoch == 1 and first.held and db_a.lease is first
    with pytest.raises(LeaseHeld) as held:
        await b.leases.take(db_b)
    assert (held.value.owner, held.value.address) == ("node-a", "http://node-a.internal:8000")
    assert db_b.lease is None
    await asyncio.sleep(LEASE_S / 2)
    assert await a.leases.renew([first]) == [], "renewed: still a's"
    await asyncio.sleep(LEASE_S * 0.7)  # past the first expiry, within the renewed one
    with pytest.raises(LeaseHeld):
        await b.leases.take(db_b)
    await asyncio.sleep(LEASE_S)  # a did not renew again: expired
    second = await b.leases.take(db_b)
    assert second.epoch == 2
    lost = await a.leases.renew([first])
    assert lost == [first] and first.lost is not None and not first.held, "a's renew says it lost it"
    row = await admin.fetchrow("SELECT owner, address, epoch FROM leases")
    assert tuple(row) == ("node-b", "http://node-b.internal:8000", 2)


async def test_a_released_lease_is_taken_at_once_and_a_node_retakes_its_own(nodes: tuple[_Node, _Node]) -> None:
    a, b = nodes
    db_a, db_b = await a.open(), await b.open()
    lease = await a.leases.take(db_a)
    again = await a.leases.take(db_a)  # a restarted node with the same id need not wait out its own lease
    assert again.epoch == lease.epoch + 1
    await a.leases.release(again)
    taken = await b.leases.take(db_b)  # no wait for the lease time
    assert taken.epoch == again.epoch + 1
    await a.leases.release(lease)  # an old lease of a: not a's any more, changes nothing
    with pytest.raises(LeaseHeld):
        await a.leases.take(db_a)


async def test_the_fence_refuses_the_write_of_a_node_whose_lease_was_taken_over(
        nodes: tuple[_Node, _Node], admin: asyncpg.Connection) -> None:
    a, b = nodes
    db_a = await a.open()
    lease_a = await a.leases.take(db_a)
    await _prepare(db_a)
    await _write(db_a, "a1")
    await _write_in_transaction(db_a, "a2")
    await asyncio.sleep(LEASE_S * 1.2)  # a stopped renewing (SIGSTOP, a cut link)
    db_b = await b.open()
    lease_b = await b.leases.take(db_b)
    await _write(db_b, "b1")
    heard: list[str] = []
    lease_a.on_lost.append(lambda lease: heard.append(lease.lost or ""))
    with pytest.raises(LeaseLost):
        await _write(db_a, "stale lone write")
    assert lease_a.lost is not None and len(heard) == 1, "the refusal marks the lease lost, once"
    assert lease_b.held
    await _write(db_b, "b2")
    assert await _bodies(admin) == ["a1", "a2", "b1", "b2"]


async def test_the_fence_refuses_a_stale_transaction_of_several_statements(
        nodes: tuple[_Node, _Node], admin: asyncpg.Connection) -> None:
    a, b = nodes
    db_a = await a.open()
    await a.leases.take(db_a)
    await _prepare(db_a)
    await asyncio.sleep(LEASE_S * 1.2)
    await b.leases.take(await b.open())
    with pytest.raises(LeaseLost):
        await _write_in_transaction(db_a, "stale")
    with pytest.raises(LeaseLost):  # refused here now, without a trip to the database
        await _write(db_a, "stale too")
    assert await _bodies(admin) == []


async def test_a_takeover_waits_for_a_transaction_the_old_owner_has_open_and_nothing_after_lands(
        nodes: tuple[_Node, _Node], admin: asyncpg.Connection) -> None:
    """The row lock is what fences: a plain read of the epoch would let the write land after the takeover."""
    a, b = nodes
    db_a = await a.open()
    await a.leases.take(db_a)
    await _prepare(db_a)
    entered, go_on = asyncio.Event(), asyncio.Event()

    async def slow_write() -> None:
        async with db_a.transaction() as tx:
            await tx.session("")  # BEGIN and the fence are sent: the lease row is locked FOR SHARE
            entered.set()
            await go_on.wait()
            await tx.append_chunks("st", [json.dumps("a, before the takeover")], 2)

    writer = asyncio.create_task(slow_write())
    await entered.wait()
    await asyncio.sleep(LEASE_S * 1.2)  # expired while a's transaction is open
    db_b = await b.open()
    taker = asyncio.create_task(b.leases.take(db_b))
    await asyncio.sleep(0.3)
    assert not taker.done(), "the taker waits for the fenced transaction"
    go_on.set()
    await writer
    lease_b = await taker
    assert lease_b.epoch == 2
    with pytest.raises(LeaseLost):
        await _write(db_a, "a, after")
    assert await _bodies(admin) == ["a, before the takeover"]


async def test_a_node_with_leases_writes_nothing_of_an_instance_before_it_took_its_lease(
        nodes: tuple[_Node, _Node]) -> None:
    a, _ = nodes
    db = await a.open()
    with pytest.raises(StorageError, match="before this node took its lease"):
        await _prepare(db)


async def test_two_nodes_racing_for_many_instances_get_one_owner_each(nodes: tuple[_Node, _Node]) -> None:
    a, b = nodes
    for i in range(200):
        dbs = await asyncio.gather(a.open(f"r{i}"), b.open(f"r{i}"))
        results = await asyncio.gather(a.leases.take(dbs[0]), b.leases.take(dbs[1]), return_exceptions=True)
        winners = [r for r in results if not isinstance(r, BaseException)]
        assert len(winners) == 1, f"round {i}: {results}"
        loser = next(r for r in results if isinstance(r, BaseException))
        assert isinstance(loser, LeaseHeld), loser


async def test_orphans_are_instances_with_work_whose_lease_expired_or_that_have_none(
        nodes: tuple[_Node, _Node]) -> None:
    a, b = nodes
    index = await a.store.open_index()
    for name in ("leased", "expired", "unleased", "idle"):
        await a.open(name)
    for name in ("leased", "expired", "unleased"):
        await index.mark("agent", name, 1)
    await index.set_wake("agent", "idle", 10_000)
    await a.leases.take(await a.open("leased"))
    expired = await b.leases.take(await b.open("expired"))
    await b.leases.release(expired)
    assert sorted(await a.leases.orphans(5_000)) == [("agent", "expired"), ("agent", "unleased")]
    assert ("agent", "idle") in await a.leases.orphans(10_000), "a wake due is work"
    await index.close()


def test_a_store_gives_one_nodes_leases() -> None:
    store = PostgresStore("postgresql://nowhere/db")
    store.leases(Node("n1", "http://n1:8000"))
    with pytest.raises(RuntimeError, match="serves node 'n1'"):
        store.leases(Node("n2", "http://n2:8000"))
    assert isinstance(PostgresDatabase, type)


async def test_the_holder_of_an_instance_is_the_live_node_that_took_it(nodes: tuple[_Node, _Node]) -> None:
    """What a node asks before it serves a request: who serves the instance now (app/_forward.py)."""
    a, b = nodes
    assert await b.leases.holder("agent", "x") is None, "never opened"
    db_a = await a.open()
    assert await b.leases.holder("agent", "x") is None, "opened, not taken"
    lease = await a.leases.take(db_a)
    assert await b.leases.holder("agent", "x") == ("node-a", "http://node-a.internal:8000")
    assert await a.leases.holder("agent", "x") == ("node-a", "http://node-a.internal:8000")
    await a.leases.release(lease)
    assert await b.leases.holder("agent", "x") is None, "released: nobody serves it"
    await b.leases.take(await b.open())
    await asyncio.sleep(LEASE_S * 1.5)
    assert await a.leases.holder("agent", "x") is None, "expired unrenewed: nobody serves it"


async def test_a_node_that_lost_an_instance_cannot_delete_the_work_index_rows_of_the_new_owner(
        nodes: tuple[_Node, _Node]) -> None:
    """A node stopped past its lease comes back and unmarks the instance it was working on: the mark
    (and the wake) the node that took over made stay, or a later takeover scan would miss it."""
    a, b = nodes
    lease = await a.leases.take(await a.open())
    index_a, index_b = await a.store.open_index(), await b.store.open_index()
    await index_a.mark("agent", "x", 1)
    await index_a.set_wake("agent", "x", 5)
    await asyncio.sleep(LEASE_S * 1.3)  # a stops renewing; b takes over and marks the work as its own
    await b.leases.take(await b.open())
    await index_b.mark("agent", "x", 2)
    await index_b.set_wake("agent", "x", 6)
    await index_a.unmark("agent", "x")  # a, back, settles what it thought was its own work
    await index_a.set_wake("agent", "x", None)
    assert await index_b.marked() == [("agent", "x")], "the new owner's mark stays"
    assert await index_b.wakes() == [("agent", "x", 6)], "and its wake"
    await index_b.unmark("agent", "x")  # the owner's own unmark deletes it
    await index_b.set_wake("agent", "x", None)
    assert await index_b.marked() == [] and await index_b.wakes() == []
    assert lease.epoch == 1
    await index_a.close()
    await index_b.close()
