"""What new input does while a session is busy: each ``when_busy`` strategy (think_server.harness.agent._busy)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from think_server.harness import (
    Agent,
    Finish,
    Instance,
    Model,
    ModelEvent,
    ModelRequest,
    RunStarted,
    Session,
    SessionBusy,
    SubmitRefused,
    TextDelta,
    TextEnd,
    TextStart,
    Tool,
    ToolCall,
    ToolInputStart,
)
from think_server.protocol import ToolPart, message_text

from .._doubles import GUARD, settle, user
from .._instances import instance_at
from ..turn.test_recovery import crash


class Gated(Model):
    """Answers "re: <the last user text>" (one text per user message since the last answer, for
    a merged turn); a call whose last user text is in ``hold`` waits for its gate first. Text
    "tool" makes the first call of its turn call the ``slow`` tool instead."""

    def __init__(self, *hold: str) -> None:
        self.gates = {h: asyncio.Event() for h in hold}
        self.reached = {h: asyncio.Event() for h in hold}
        self.seen: list[list[str]] = []  # per call: the texts of the transcript the model got

    async def stream(self, request: ModelRequest) -> AsyncIterator[ModelEvent]:
        texts = [f"{m.role}:{message_text(m)}" for m in request.messages]
        self.seen.append(texts)
        last = request.messages[-1]
        users = [message_text(m) for m in request.messages if m.role == "user"]
        if last.role == "assistant" or not users:  # a later step: answer what the tool said
            yield TextStart("t")
            yield TextDelta("t", "after the tool")
            yield TextEnd("t")
            yield Finish("stop")
            return
        said = users[-1]
        if said in self.gates:
            self.reached[said].set()
            await self.gates[said].wait()
        if said.startswith("tool"):
            yield ToolInputStart("c1", "slow")
            yield ToolCall("c1", "slow", {})
            yield Finish("tool-calls")
            return
        yield TextStart("t")
        yield TextDelta("t", f"re: {said}")
        yield TextEnd("t")
        yield Finish("stop")


async def open_with(tmp_path: Path, model: Model, **agent: Any) -> tuple[Instance, Session]:
    inst = await instance_at(tmp_path / "i.sqlite3", Agent(**agent), model)
    return inst, await inst.session()


async def transcript(s: Session) -> list[str]:
    return [f"{m.role}:{message_text(m)}" for m in await s.transcript()]


async def busy_with(s: Session, model: Gated, text: str) -> str:
    """Submit ``text`` (one of the model's held texts) and wait until its model call holds."""
    receipt = await s.submit([user(f"u-{text}", text)])
    await asyncio.wait_for(model.reached[text].wait(), GUARD)
    return receipt.operation_id


async def test_queue_runs_every_input_in_order(tmp_path: Path) -> None:
    model = Gated("one")
    inst, s = await open_with(tmp_path, model)
    try:
        first = await busy_with(s, model, "one")
        second = await s.submit([user("u2", "two")])
        third = await s.submit([user("u3", "three")], when_busy="queue")
        model.gates["one"].set()
        assert [(await settle(s, op)).text for op in (first, second.operation_id, third.operation_id)] == [
            "re: one", "re: two", "re: three"]
        assert await transcript(s) == ["user:one", "assistant:re: one", "user:two", "assistant:re: two",
                                       "user:three", "assistant:re: three"]
    finally:
        await inst.close()


async def test_drop_refuses_while_busy_and_writes_nothing(tmp_path: Path) -> None:
    model = Gated("one")
    inst, s = await open_with(tmp_path, model, when_busy="drop")
    try:
        first = await busy_with(s, model, "one")
        with pytest.raises(SessionBusy, match="busy"):
            await s.submit([user("u2", "two")])
        assert s.pending() == [first]
        model.gates["one"].set()
        await settle(s, first)
        assert await s.db.read.operation("u2") is None
        # Idle, the same strategy lets input in.
        ok = await s.submit([user("u3", "three")])
        assert (await settle(s, ok.operation_id)).text == "re: three"
        assert await transcript(s) == ["user:one", "assistant:re: one", "user:three", "assistant:re: three"]
    finally:
        await inst.close()


async def test_latest_withdraws_the_older_queued_inputs(tmp_path: Path) -> None:
    model = Gated("one")
    inst, s = await open_with(tmp_path, model)
    try:
        first = await busy_with(s, model, "one")
        two = await s.submit([user("u2", "two")], when_busy="latest")
        three = await s.submit([user("u3", "three")], when_busy="latest")
        superseded = await settle(s, two.operation_id)
        assert (superseded.outcome, superseded.reason) == ("unanswered", "superseded")
        assert s.pending() == [first, three.operation_id], "the running turn is never superseded"
        model.gates["one"].set()
        assert (await settle(s, three.operation_id)).text == "re: three"
        assert await transcript(s) == ["user:one", "assistant:re: one", "user:three", "assistant:re: three"]
        assert (await s.db.read.operation(two.operation_id)).status == "skipped"  # type: ignore[union-attr]
        assert not s.knows("u2"), "a superseded input's message is never written"
    finally:
        await inst.close()


async def test_merge_makes_the_queued_inputs_one_turn(tmp_path: Path) -> None:
    model = Gated("one")
    inst, s = await open_with(tmp_path, model, when_busy="merge")
    try:
        first = await busy_with(s, model, "one")
        two = await s.submit([user("u2", "two")])
        three = await s.submit([user("u3", "three")])
        model.gates["one"].set()
        merged = await settle(s, two.operation_id)
        assert (merged.outcome, merged.reason) == ("unanswered", "merged")
        assert (await settle(s, three.operation_id)).text == "re: three"
        await settle(s, first)
        assert len(model.seen) == 2, "one model call for both queued inputs"
        assert model.seen[1] == ["user:one", "assistant:re: one", "user:two", "user:three"]
        assert await transcript(s) == ["user:one", "assistant:re: one", "user:two", "user:three",
                                       "assistant:re: three"]
    finally:
        await inst.close()


async def test_debounce_waits_for_a_quiet_period_then_takes_everything(tmp_path: Path) -> None:
    model = Gated("one")
    inst, s = await open_with(tmp_path, model, when_busy="debounce", debounce_ms=600)
    try:
        first = await busy_with(s, model, "one")
        two = await s.submit([user("u2", "two")])
        model.gates["one"].set()
        await settle(s, first)
        # The running turn ended; "two" waits for the quiet period, and "three" comes within it.
        three = await s.submit([user("u3", "three")])
        assert (await settle(s, two.operation_id)).reason == "merged"
        assert (await settle(s, three.operation_id)).text == "re: three"
        assert len(model.seen) == 2 and model.seen[1][-2:] == ["user:two", "user:three"]
    finally:
        await inst.close()


async def test_interrupt_stops_the_running_turn_and_goes_first(tmp_path: Path) -> None:
    model = Gated("one")
    inst, s = await open_with(tmp_path, model)
    try:
        first = await busy_with(s, model, "one")
        queued = await s.submit([user("u2", "two")])
        now = await s.submit([user("u3", "three")], when_busy="interrupt")
        stopped = await settle(s, first)
        assert (stopped.outcome, stopped.reason) == ("unanswered", "aborted")
        assert (await settle(s, now.operation_id)).text == "re: three"
        assert (await settle(s, queued.operation_id)).text == "re: two"
        assert [t for t in await transcript(s) if t.startswith("user:")] == ["user:one", "user:three", "user:two"]
    finally:
        await inst.close()


def slow_tool(gate: asyncio.Event, started: asyncio.Event) -> Tool:
    async def slow() -> str:
        started.set()
        await gate.wait()
        return "slow done"

    return Tool("slow", execute=slow)


async def test_steer_ends_the_turn_before_its_next_model_call_and_runs_next(tmp_path: Path) -> None:
    gate, started = asyncio.Event(), asyncio.Event()
    model = Gated()
    inst, s = await open_with(tmp_path, model, tools=[slow_tool(gate, started)])
    try:
        first = (await s.submit([user("u1", "tool please")])).operation_id
        await asyncio.wait_for(started.wait(), GUARD)
        later = await s.submit([user("u2", "later")])  # queued before the steer: it runs after it
        steer = await s.submit([user("u3", "change course")], when_busy="steer")
        gate.set()
        steered = await settle(s, first)
        assert (steered.outcome, steered.reason) == ("unanswered", "steered")
        assert (await settle(s, steer.operation_id)).text == "re: change course"
        assert (await settle(s, later.operation_id)).text == "re: later"
        # The steered turn made one model call, not two; the steer's call saw all it did.
        assert len(model.seen) == 3
        assert model.seen[1] == ["user:tool please", "assistant:", "user:change course"]
        messages = await s.transcript()
        (part,) = [p for p in messages[1].parts if isinstance(p, ToolPart)]
        assert (part.state, part.output) == ("output-available", "slow done")
        assert [f"{m.role}:{message_text(m)}" for m in messages[2:]] == [
            "user:change course", "assistant:re: change course", "user:later", "assistant:re: later"]
    finally:
        await inst.close()


async def test_a_steer_cut_short_by_a_crash_is_applied_once(tmp_path: Path) -> None:
    """The process dies right after the steer's message was written, before its model call."""
    gate, started = asyncio.Event(), asyncio.Event()
    model = Gated()
    agent = {"tools": [slow_tool(gate, started)]}
    inst, s = await open_with(tmp_path, model, **agent)
    first = (await s.submit([user("u1", "tool please")])).operation_id
    await asyncio.wait_for(started.wait(), GUARD)
    steer = await s.submit([user("u3", "change course")], when_busy="steer")

    def die_once_the_steer_is_written(event: object) -> None:
        if isinstance(event, RunStarted) and event.operation_id == steer.operation_id:
            assert s._worker is not None
            s._worker.cancel()  # the worker stops at its next await: the model is never called

    s.subscribe(die_once_the_steer_is_written)
    gate.set()
    assert s._worker is not None
    await asyncio.gather(s._worker, return_exceptions=True)
    await crash(inst)
    assert len(model.seen) == 1

    again = await instance_at(tmp_path / "i.sqlite3", Agent(**agent), model)
    try:
        s2 = await again.session()
        assert (await settle(s2, steer.operation_id)).text == "re: change course"
        assert (await settle(s2, first)).reason == "steered"
        assert [t for t in await transcript(s2) if t.startswith("user:")] == ["user:tool please",
                                                                              "user:change course"]
        assert len(model.seen) == 2 and model.seen[1].count("user:change course") == 1
    finally:
        await again.close()


async def test_a_strategy_that_is_not_one_is_refused(tmp_path: Path) -> None:
    inst, s = await open_with(tmp_path, Gated())
    try:
        with pytest.raises(SubmitRefused, match="when_busy: expected one of queue, latest"):
            await s.submit([user("u1", "hi")], when_busy="sometimes")
        with pytest.raises(ValueError, match="when_busy"):
            Agent(when_busy="never")  # type: ignore[arg-type]
    finally:
        await inst.close()


async def test_queued_inputs_keep_their_strategy_across_a_restart(tmp_path: Path) -> None:
    model = Gated("one")
    inst, s = await open_with(tmp_path, model)
    await busy_with(s, model, "one")
    two = await s.submit([user("u2", "two")], when_busy="merge")
    three = await s.submit([user("u3", "three")], when_busy="merge")
    await crash(inst)

    model.gates["one"].set()
    again = await instance_at(tmp_path / "i.sqlite3", Agent(), model)
    try:
        s2 = await again.session()
        assert (await settle(s2, two.operation_id)).reason == "merged"
        assert (await settle(s2, three.operation_id)).text == "re: three"
        assert model.seen[-1][-2:] == ["user:two", "user:three"]
    finally:
        await again.close()
