"""An operation on a node that lost the instance's lease (a cluster's, on PostgreSQL) ends without a
word: another node serves the instance now and carries the operation on, so whatever made it stop
here, in its turn or before it, nothing of its end is written here or told to this node's clients.

Found by the cluster chaos run (``make chaos CLUSTER=3``): a node stopped past its lease came back,
its work failed on the database connection PostgreSQL had closed meanwhile, and it told its clients
the operation had ended with an error while the new owner was finishing it."""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path

import asyncpg
import pytest

from think_server.harness import (
    Agent,
    Answer,
    Finish,
    Harness,
    HarnessEvent,
    HookContext,
    ModelError,
    OperationSettled,
    TextDelta,
    TextStart,
    Tool,
    client_tool,
)
from think_server.storage import Node
from think_server.storage.postgres import SCHEMA, PostgresStore

from .._doubles import GUARD, FakeModel, Pause, call, settle, user


async def _take_over(url: str) -> None:
    """What another node's takeover does to the lease row: its owner, the next epoch."""
    conn = await asyncpg.connect(url)
    try:
        await conn.execute(f"UPDATE {SCHEMA}.leases SET owner = 'node-b', address = 'http://b', "
                           "epoch = epoch + 1, expires_at = now() + interval '30 seconds'")
    finally:
        await conn.close()


async def _until(check: object, what: str) -> None:
    assert callable(check)
    for _ in range(int(GUARD / 0.01)):
        if check():
            return
        await asyncio.sleep(0.01)
    raise AssertionError(f"not within {GUARD} s: {what}")


async def test_a_turn_that_fails_after_another_node_took_its_instance_over_tells_nothing(
        tmp_path: Path, postgres_url: str, caplog: pytest.LogCaptureFixture) -> None:
    pause = Pause()
    # The model fails once the lease is gone (any failure: here the provider's, in the run the
    # database connection's): its end must not be told, since the new owner runs the operation on.
    model = FakeModel([TextStart("t"), TextDelta("t", "half an answer "), pause, ModelError("the provider is down")])
    async with Harness({"agent": Agent()}, data_dir=tmp_path, model=model, store=PostgresStore(postgres_url),
                       node=Node("node-a", "http://a", lease_s=30)) as h:
        instance = await h.instance("agent", "x")
        session = await instance.session()
        events: list[HarnessEvent] = []
        session.subscribe(events.append)
        receipt = await session.submit([user("u1", "hi")])
        await asyncio.wait_for(pause.reached.wait(), GUARD)
        await _take_over(postgres_url)
        pause.go.set()
        lease = instance.db.lease
        assert lease is not None
        await _until(lambda: lease.lost is not None, "the node found its lease lost (its write was refused)")
        await _until(lambda: session.running_operation is None, "the turn ended on this node")
        settled = [e for e in events if isinstance(e, OperationSettled)]
        assert settled == [], f"told its clients the operation {receipt.operation_id} ended: {settled}"
        assert not session.has_open_work, "no end is kept to be written later: it never could be"
        # Nor does it try more of the instance's housekeeping (a sweep), which would fail the same way.
        assert [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR] == []


async def test_an_operation_that_fails_before_its_turn_after_another_node_took_over_tells_nothing(
        tmp_path: Path, postgres_url: str) -> None:
    # The answer's operation fails outside any turn (here the agent's tools function, there the
    # database connection PostgreSQL had closed while the node was stopped); its end must not be told.
    location = client_tool("getLocation", "Where the user is")
    pause = Pause()

    async def tools(ctx: HookContext) -> list[Tool]:
        if ctx.operation == "answer-op":
            pause.reached.set()
            await pause.go.wait()
            raise RuntimeError("the tools backend is down")
        return [location]

    model = FakeModel([*call("c1", "getLocation"), Finish("tool-calls")])
    async with Harness({"agent": Agent(tools=tools)}, data_dir=tmp_path, model=model,
                       store=PostgresStore(postgres_url), node=Node("node-a", "http://a", lease_s=30)) as h:
        instance = await h.instance("agent", "x")
        session = await instance.session()
        first = await session.submit([user("u1", "where am I?")])
        assert (await settle(session, first.operation_id)).reason == "awaiting_client_tool"
        events: list[HarnessEvent] = []
        session.subscribe(events.append)
        await session.answer(Answer("tool-result", "c1", output={"city": "Lyon"}), operation_id="answer-op")
        await asyncio.wait_for(pause.reached.wait(), GUARD)
        await _take_over(postgres_url)
        pause.go.set()
        lease = instance.db.lease
        assert lease is not None
        await _until(lambda: lease.lost is not None, "the node found its lease lost (its write was refused)")
        await _until(lambda: session.running_operation is None, "the operation ended on this node")
        settled = [e for e in events if isinstance(e, OperationSettled)]
        assert settled == [], f"told its clients the operation answer-op ended: {settled}"
        assert not session.has_open_work, "no end is kept to be written later: it never could be"
