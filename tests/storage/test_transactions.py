"""An instance's transactions: all or nothing, one at a time, and a commit a cancel cannot hide;
and what a store promises about an instance it opens."""

from __future__ import annotations

import asyncio
import contextlib

import pytest

from think_server.storage import Database, Store

from .backends import Backend


class Boom(Exception):
    pass


async def _add_operation(db: Database, op_id: str, session: str = "s", now: int = 1) -> None:
    async with db.transaction() as tx:
        await tx.ensure_session(session, now)
        await tx.insert_operation(op_id, session, "input", "server", "{}", None, now)


async def test_foreign_keys_are_enforced(db: Database, backend: Backend) -> None:
    with pytest.raises(backend.constraint_error):
        async with db.transaction() as tx:
            await tx.insert_message("no-such-session", "m1", None, "user", "{}", None, 1)
    assert await db.read.message("no-such-session", "m1") is None


async def test_exception_rolls_back_every_statement(db: Database) -> None:
    with pytest.raises(Boom):
        async with db.transaction() as tx:
            await tx.ensure_session("s", 1)
            await tx.insert_operation("op", "s", "input", "server", "{}", None, 1)
            await tx.insert_message("s", "m", None, "user", "{}", "op", 1)
            raise Boom
    assert await db.read.session("s") is None
    assert await db.read.operation("op") is None
    assert await db.read.message("s", "m") is None
    # The connection is out of the transaction: the next one works.
    await _add_operation(db, "after")
    assert await db.read.operation("after") is not None


async def test_failing_statement_rolls_back_earlier_statements(db: Database, backend: Backend) -> None:
    with pytest.raises(backend.constraint_error):
        async with db.transaction() as tx:
            await tx.ensure_session("s", 1)
            await tx.insert_operation("op", "s", "not-a-kind", "server", "{}", None, 1)
    assert await db.read.session("s") is None
    assert await db.read.operation("op") is None


async def test_cancelled_task_rolls_back_its_transaction(db: Database) -> None:
    inside = asyncio.Event()

    async def writer() -> None:
        async with db.transaction() as tx:
            await tx.ensure_session("s", 1)
            inside.set()
            await asyncio.Event().wait()  # never set: cancelled here

    task = asyncio.create_task(writer())
    await asyncio.wait_for(inside.wait(), 5)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert await db.read.session("s") is None
    await _add_operation(db, "after")
    assert await db.read.operation("after") is not None


async def test_a_cancel_while_commit_runs_lets_the_caller_learn_of_the_commit(db: Database, backend: Backend) -> None:
    """COMMIT runs on once issued: the caller must not be told "not committed" (an exception) for a change made."""
    body_done = asyncio.Event()
    seen: list[str] = []

    async def writer() -> None:
        async with db.transaction() as tx:
            await tx.ensure_session("s", 1)
            body_done.set()  # COMMIT is issued next; the cancel below arrives while it runs
        seen.append("committed")
        await asyncio.sleep(0)  # the cancel is delivered at the next await
        seen.append("never")

    task = asyncio.create_task(writer())
    await body_done.wait()  # woken first thing in the next turn of the loop, while COMMIT runs in its thread
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert seen == ["committed"]
    assert await backend.rows(db, "sessions", ("id",), {}) == [("s",)], "the change was made"
    await _add_operation(db, "after")  # the instance is usable
    assert await db.read.operation("after") is not None


async def test_concurrent_transactions_do_not_interleave(db: Database) -> None:
    async with db.transaction() as tx:
        await tx.ensure_session("s", 0)
    log: list[str] = []

    async def writer(tag: str) -> None:
        async with db.transaction() as tx:
            for i in range(5):
                await tx.insert_operation(f"{tag}{i}", "s", "input", "server", "{}", None, i)
                log.append(tag)
                await asyncio.sleep(0)
                await asyncio.sleep(0.001)

    await asyncio.wait_for(asyncio.gather(writer("a"), writer("b"), writer("c")), 10)
    # Each task's statements ran as one block ...
    blocks = [log[i : i + 5] for i in range(0, 15, 5)]
    assert all(len(set(block)) == 1 for block in blocks), log
    assert sorted(block[0] for block in blocks) == ["a", "b", "c"]
    # ... and the stored order is grouped the same way.
    ids = [op.id for op in await db.read.open_operations("s")]
    assert ids == [f"{block[0]}{i}" for block in blocks for i in range(5)]


async def test_failure_in_one_task_does_not_undo_another(db: Database) -> None:
    async with db.transaction() as tx:
        await tx.ensure_session("s", 0)

    async def good() -> None:
        async with db.transaction() as tx:
            for i in range(3):
                await tx.insert_operation(f"good{i}", "s", "input", "server", "{}", None, i)
                await asyncio.sleep(0.001)

    async def bad() -> None:
        async with db.transaction() as tx:
            for i in range(3):
                await tx.insert_operation(f"bad{i}", "s", "input", "server", "{}", None, i)
                await asyncio.sleep(0.001)
            raise Boom

    results = await asyncio.gather(bad(), good(), return_exceptions=True)
    assert isinstance(results[0], Boom)
    assert results[1] is None
    assert [op.id for op in await db.read.open_operations("s")] == ["good0", "good1", "good2"]


async def test_close_waits_for_the_open_transaction(store: Store) -> None:
    inside = asyncio.Event()
    release = asyncio.Event()
    db = await store.open("agent", "closing")
    try:

        async def writer() -> None:
            async with db.transaction() as tx:
                await tx.ensure_session("s", 1)
                inside.set()
                await release.wait()

        task = asyncio.create_task(writer())
        try:
            await asyncio.wait_for(inside.wait(), 5)
            closing = asyncio.create_task(db.close())
            await asyncio.sleep(0.05)
            assert not closing.done(), "close() did not wait for the open transaction"
        finally:
            release.set()
            with contextlib.suppress(Exception):
                await asyncio.wait_for(task, 5)
        await asyncio.wait_for(closing, 5)
        assert task.exception() is None
    finally:
        await db.close()
    again = await store.open("agent", "closing")
    try:
        assert await again.read.session("s") is not None
    finally:
        await again.close()


async def test_an_instance_made_by_its_open_is_fresh_until_its_first_write(store: Store) -> None:
    assert not await store.exists("agent", "new")
    db = await store.open("agent", "new")
    assert await store.exists("agent", "new") and not await store.exists("agent", "other")
    assert db.fresh, "made just now: its readers may skip reading"
    assert await db.read.active_path("s") == [] and db.fresh, "a read does not change it"
    async with db.transaction() as tx:
        await tx.ensure_session("s", 1)
    assert not db.fresh
    await db.close()
    again = await store.open("agent", "new")
    assert not again.fresh, "an instance that was there already is read"
    assert await again.read.session("s") is not None
    await again.close()


async def test_an_idle_instance_sleeps_until_its_next_statement(db: Database) -> None:
    """What the server's hibernation counts on with either backend: an idle instance's ``sleep`` takes,
    it stays ``asleep`` (counted among the hibernating, not put to sleep again) until a statement."""
    await _add_operation(db, "op1")
    assert not db.asleep
    assert await db.sleep() and db.asleep, "idle: it sleeps"
    assert (await db.read.operation("op1")) is not None, "a read wakes it"
    assert not db.asleep
    assert await db.sleep()
    await _add_operation(db, "op2")
    assert not db.asleep, "so does a transaction"
    async with db.transaction() as tx:
        await tx.ensure_session("s", 2)
        assert not await db.sleep(), "a transaction is open"
    assert not db.asleep
