"""Turns that start go before turns that stream (think_server.harness.session._gate)."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from tests.harness.host.reference_agent import make
from think_server.harness import Agent, Instance, Session, StreamStarted
from think_server.harness.session import StartGate

from .._doubles import GUARD, FakeModel, settle, text, user
from .._instances import instance_at


async def test_a_gate_counts_starts_and_each_leaves_once() -> None:
    gate = StartGate()
    first, second = gate.arriving(), gate.arriving()
    assert gate.starting == 2
    first()
    first()  # a second call uncounts nothing more
    assert gate.starting == 1
    second()
    assert gate.starting == 0
    await asyncio.wait_for(gate.others_started(), GUARD)  # none starting: at once


async def test_a_wait_ends_when_the_last_start_leaves() -> None:
    gate = StartGate(max_wait_s=GUARD)
    leave = gate.arriving()
    waiting = asyncio.create_task(gate.others_started())
    await asyncio.sleep(0.01)
    assert not waiting.done()
    leave()
    await asyncio.wait_for(waiting, GUARD)


async def test_a_wait_is_bounded_by_max_wait() -> None:
    gate = StartGate(max_wait_s=0.01)
    gate.arriving()  # a start that never comes
    await asyncio.wait_for(gate.others_started(), GUARD)  # returns, after max_wait_s
    assert gate.starting == 1


async def open_two(tmp_path: Path, model: FakeModel, **agent: Any) -> tuple[Instance, Session, Session]:
    inst = await instance_at(tmp_path / "i.sqlite3", Agent(**agent), model)
    return inst, await inst.session("a"), await inst.session("b")


async def test_a_started_turn_calls_its_model_once_no_other_session_is_starting(tmp_path: Path) -> None:
    model = FakeModel(text("t", "hello"))
    inst, a, b = await open_two(tmp_path, model)
    assert a.starts is b.starts  # one gate for the instance's sessions (a registry's for all instances)
    a.starts.max_wait_s = GUARD
    started = asyncio.Event()
    a.subscribe(lambda e: started.set() if isinstance(e, StreamStarted) else None)
    try:
        other = a.starts.arriving()  # another session starting
        receipt = await a.submit([user("u1", "hi")])
        await asyncio.wait_for(started.wait(), GUARD)
        await asyncio.sleep(0.02)
        assert model.requests == []  # started and told, but its model call waits for the other start
        other()
        assert (await settle(a, receipt.operation_id)).text == "hello"
        assert len(model.requests) == 1
    finally:
        await inst.close()


async def test_a_session_is_uncounted_before_its_start_is_told_and_waits_for_no_one_alone(tmp_path: Path) -> None:
    model = FakeModel(text("t", "hello"))
    inst, a, b = await open_two(tmp_path, model)
    a.starts.max_wait_s = 100 * GUARD  # a turn that waited for its own start would outlast settle's guard
    counted: list[int] = []
    a.subscribe(lambda e: counted.append(a.starts.starting) if isinstance(e, StreamStarted) else None)
    try:
        receipt = await a.submit([user("u1", "hi")])
        assert (await settle(a, receipt.operation_id)).text == "hello"
        assert counted == [0]
        # Another session's start, once told, holds no one up either.
        receipt = await b.submit([user("u2", "hi")])
        assert (await settle(b, receipt.operation_id)).text == "hello"
        assert a.starts.starting == 0
    finally:
        await inst.close()


async def test_input_that_waits_for_a_quiet_period_is_not_counted_meanwhile(tmp_path: Path) -> None:
    model = FakeModel(text("t", "hello"))
    # A quiet period long enough that a loaded machine (CI's, 2 cores) does not end it before the check:
    # at 300 ms one run found the model called 50 ms after submit() returned.
    inst, a, _ = await open_two(tmp_path, model, when_busy="debounce", debounce_ms=1000)
    try:
        receipt = await a.submit([user("u1", "hi")])
        await asyncio.sleep(0.05)
        assert a.starts.starting == 0 and model.requests == []  # debouncing: no start comes soon
        assert (await settle(a, receipt.operation_id)).text == "hello"
    finally:
        await inst.close()


async def test_a_run_that_starts_no_stream_is_uncounted_when_it_ends(tmp_path: Path) -> None:
    model = FakeModel(text("t", "hello"))
    inst, a, _ = await open_two(tmp_path, model)
    try:
        done = await a.submit([user("u1", "hi")])
        await settle(a, done.operation_id)
        # Nothing new to answer (the message is known): settled without a turn or a stream.
        again = await a.submit([], operation_id="op-empty")
        await settle(a, again.operation_id)
        assert a.starts.starting == 0
    finally:
        await inst.close()


async def test_the_instances_of_a_harness_share_one_gate(tmp_path: Path) -> None:
    async with make(tmp_path) as h:
        one, two = await h.instance("assistant", "one"), await h.instance("assistant", "two")
        assert one.starts is two.starts is h.registry.starts
        assert (await one.session()).starts is h.registry.starts
        assert (await h.session("assistant", "two").prompt("hi")).text == "Hello!"
        assert h.registry.starts.starting == 0
