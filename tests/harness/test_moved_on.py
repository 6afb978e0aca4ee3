"""A call left waiting for the user when a new turn starts (issue 25).

Asked to approve a transfer, the user typed a new message instead; the card stayed live and an
approval minutes later ran the transfer, with no answer after it. Now a call still waiting for
an approval, or for a client tool's result, ends as ``output-error`` (``MOVED_ON_ERROR``) in the
transaction that starts the next turn (a new message, a regeneration, a continuation, a
schedule firing); an answer to it afterwards is refused, and the tool never runs. Real
instances on real SQLite files; the model is a double.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from think_server.harness import (
    MOVED_ON_ERROR,
    Agent,
    Answer,
    AnswerRefused,
    Finish,
    Harness,
    Instance,
    MessageUpdated,
    RecoveryPolicy,
    RunStarted,
    ScriptedModel,
    Tool,
    tool,
)
from think_server.protocol import ToolPart, UIMessage

from ._doubles import GUARD, FakeModel, Pause, Recorder, call, settle, text, user
from ._instances import instance_at
from .turn.test_recovery import crash


def bank() -> tuple[Tool, list[int]]:
    """An approval-gated ``transfer`` that records every amount it sent."""
    runs: list[int] = []

    def transfer(amount: int) -> str:
        runs.append(amount)
        return f"sent {amount}"

    return Tool("transfer", execute=transfer, needs_approval=True), runs


def asks(*calls: tuple[str, str]) -> list[Any]:
    """One model call that makes these calls (id, tool) and stops for them."""
    return [event for call_id, name in calls for event in call(call_id, name, {"amount": 100})] + [
        Finish("tool-calls")]


def part_of(message: UIMessage, call_id: str) -> ToolPart:
    (part,) = [p for p in message.parts if isinstance(p, ToolPart) and p.toolCallId == call_id]
    return part


def seen_part(seen: list[dict[str, Any]], call_id: str) -> dict[str, Any]:
    """The call as a model request carried it."""
    (part,) = [p for m in seen for p in m["parts"] if p.get("toolCallId") == call_id]
    return part


async def asked(open_instance: Any, model: FakeModel, agent: Agent) -> tuple[Instance, Any, UIMessage]:
    """A turn that ends asking for the call ``c1``: (instance, session, the message that asks)."""
    inst = await open_instance(model, agent)
    s = await inst.session()
    first = await s.submit([user("u1", "send 100 to bob")])
    assert (await settle(s, first.operation_id)).reason in ("awaiting_approval", "awaiting_client_tool")
    return inst, s, (await s.transcript())[-1]


async def refused(s: Any, answer: Answer) -> str:
    with pytest.raises(AnswerRefused) as caught:
        await s.answer(answer)
    assert caught.value.reason == "moved_on", caught.value
    return str(caught.value)


async def test_a_new_turn_ends_the_call_waiting_for_approval_in_its_own_start(open_instance: Any, peek: Any) -> None:
    transfer, runs = bank()
    model = FakeModel(asks(("c1", "transfer")), text("t", "Hello"))
    _inst, s, asking = await asked(open_instance, model, Agent(tools=[transfer]))
    approval_id = part_of(asking, "c1").approval
    rec = Recorder()
    s.subscribe(rec)
    committed: list[tuple[Any, ...]] = []

    def at_update(event: Any) -> None:
        # What another process reads when the update is told: the end and the new turn's start.
        if isinstance(event, MessageUpdated):
            stored = peek.message(s.id, asking.id)["parts"][1]
            committed.append((stored["state"], peek.operation_status("op2"), peek.message(s.id, "u2") is not None))

    s.subscribe(at_update)
    await s.submit([user("u2", "hi")], operation_id="op2")
    assert (await settle(s, "op2")).text == "Hello"

    assert committed == [("output-error", "running", True)], "ended in the transaction that started the turn"
    updates = [i for i, e in enumerate(rec.events) if isinstance(e, MessageUpdated)]
    starts = [i for i, e in enumerate(rec.events) if isinstance(e, RunStarted) and e.operation_id == "op2"]
    assert len(updates) == 1 and updates[0] < starts[0], "told before the new turn's stream"
    told = part_of(rec.of(MessageUpdated)[0].message, "c1")
    assert (told.state, told.errorText) == ("output-error", MOVED_ON_ERROR)
    stored = part_of((await s.transcript())[1], "c1")
    assert (stored.state, stored.errorText, stored.approval) == ("output-error", MOVED_ON_ERROR, approval_id)
    # The model's next call sees the call answered by that error, never a call without a result.
    assert {k: seen_part(model.seen[1], "c1")[k] for k in ("state", "errorText")} == {
        "state": "output-error", "errorText": MOVED_ON_ERROR}
    message = await refused(s, Answer("approval", "c1", approved=True))
    assert "c1" in message and "new turn" in message
    await refused(s, Answer("approval", "c1", approved=False))
    await asyncio.sleep(0.05)  # an approval wrongly taken would run its call meanwhile
    assert runs == [], "the transfer never ran"
    assert part_of((await s.transcript())[1], "c1").state == "output-error"


async def test_a_client_tools_result_after_a_new_turn_is_refused(open_instance: Any) -> None:
    model = FakeModel(asks(("c1", "getLocation")), text("t", "Hello"))
    _inst, s, _asking = await asked(open_instance, model, Agent(tools=[Tool("getLocation")]))
    second = await s.submit([user("u2", "never mind")])
    await settle(s, second.operation_id)
    assert seen_part(model.seen[1], "c1")["state"] == "output-error"
    message = await refused(s, Answer("tool-result", "c1", output={"city": "Paris"}))
    assert "can no longer be answered" in message
    part = part_of((await s.transcript())[1], "c1")
    assert (part.state, part.errorText, part.output) == ("output-error", MOVED_ON_ERROR, None)


async def test_an_answer_queued_behind_the_new_input_is_refused_when_its_turn_comes(open_instance: Any) -> None:
    """The call waits while the turn that asked it still runs a slow tool; the user sends a new message
    (queued), then approves (queued after it). The call ends when the new turn starts, not when the
    message arrives; the approval, accepted then, is refused when its turn comes."""
    transfer, runs = bank()
    started, release = asyncio.Event(), asyncio.Event()

    async def hold(amount: int) -> str:
        started.set()
        await release.wait()
        return "held"

    model = FakeModel(asks(("c1", "transfer"), ("h1", "hold")), text("t", "Hello"))
    inst = await open_instance(model, Agent(tools=[transfer, Tool("hold", execute=hold)]))
    s = await inst.session()
    first = await s.submit([user("u1", "send 100 to bob")])
    await asyncio.wait_for(started.wait(), GUARD)
    await s.submit([user("u2", "hi")], operation_id="op2")
    approval = await s.answer(Answer("approval", "c1", approved=True))
    assert approval.accepted
    assert part_of((await s.transcript())[-1], "c1").state == "approval-requested", "not ended on arrival"
    release.set()
    assert (await settle(s, first.operation_id)).reason == "awaiting_approval"
    assert (await settle(s, "op2")).text == "Hello"
    result = await settle(s, approval.operation_id)
    assert (result.outcome, result.reason) == ("unanswered", "moved_on")
    assert runs == []
    assert part_of((await s.transcript())[1], "c1").errorText == MOVED_ON_ERROR


async def test_the_end_is_durable_across_a_crash(db_path: Path) -> None:
    """The process dies in the new turn's model call: the call stays ended, the turn is recovered,
    and an approval after the restart is refused."""
    transfer, runs = bank()
    agent = Agent(tools=[transfer], recovery=RecoveryPolicy(backoff_ms=1))
    pause = Pause()
    inst = await instance_at(db_path, agent, FakeModel(asks(("c1", "transfer")), [pause]))
    s = await inst.session()
    first = await s.submit([user("u1", "send 100 to bob")])
    await settle(s, first.operation_id)
    second = await s.submit([user("u2", "hi")])
    await asyncio.wait_for(pause.reached.wait(), GUARD)
    await crash(inst)

    restarted = await instance_at(db_path, agent, FakeModel(text("t", "Hello")))
    try:
        s2 = await restarted.session()
        assert (await settle(s2, second.operation_id)).text == "Hello"
        part = part_of((await s2.transcript())[1], "c1")
        assert (part.state, part.errorText) == ("output-error", MOVED_ON_ERROR)
        await refused(s2, Answer("approval", "c1", approved=True))
        assert runs == []
    finally:
        await restarted.close()


async def test_a_regeneration_ends_the_call_on_the_branch_it_leaves(open_instance: Any) -> None:
    transfer, runs = bank()
    model = FakeModel(asks(("c1", "transfer")), text("t", "Let us not."))
    _inst, s, asking = await asked(open_instance, model, Agent(tools=[transfer]))
    rec = Recorder()
    s.subscribe(rec)
    again = await s.submit([], regenerate_from="u1")
    assert (await settle(s, again.operation_id)).text == "Let us not."
    # Stored ended, not told: the answer left behind is on no client's list any more (a client that
    # finds no message by its id looks for one holding the same call id, which models may reuse).
    assert [e.message.id for e in rec.of(MessageUpdated)] == []
    await s.switch_branch(asking.id)  # back to the answer that asked: its card is not live again
    back = await s.transcript()
    assert back[-1].id == asking.id
    assert (part_of(back[-1], "c1").state, part_of(back[-1], "c1").errorText) == ("output-error", MOVED_ON_ERROR)
    await refused(s, Answer("approval", "c1", approved=True))
    assert runs == []


async def test_a_continuation_ends_the_call_before_the_model_is_called_again(open_instance: Any) -> None:
    transfer, runs = bank()
    model = FakeModel(asks(("c1", "transfer")), text("t", "Going on."))
    _inst, s, asking = await asked(open_instance, model, Agent(tools=[transfer]))
    more = await s.submit([], continue_last=True)
    assert (await settle(s, more.operation_id)).text == "Going on."
    assert seen_part(model.seen[1], "c1")["errorText"] == MOVED_ON_ERROR
    (last,) = [m for m in await s.transcript() if m.role == "assistant"]
    assert last.id == asking.id and part_of(last, "c1").errorText == MOVED_ON_ERROR
    await refused(s, Answer("approval", "c1", approved=True))
    assert runs == []


async def test_a_schedule_that_fires_is_a_new_turn_and_over_the_python_api_the_approval_is_refused(
        tmp_path: Path) -> None:
    runs: list[dict[str, Any]] = []

    @tool(name="transferFunds", needs_approval=True)
    def transfer_funds(amount: float, to: str) -> str:
        """Move money.

        Args:
            amount: How much.
            to: To whom.
        """
        runs.append({"amount": amount, "to": to})
        return "sent"

    script = ScriptedModel({"rules": [
        {"match": "approve", "steps": [[{"tool_call": {"name": "transferFunds", "input": {"amount": 5, "to": "bob"}}}],
                                       [{"text": ["Done."]}]]},
        {"match": "*", "steps": [[{"text": ["You said: {user}"]}]]}]})
    async with Harness({"bank": Agent(tools=[transfer_funds])}, data_dir=tmp_path, model=script) as h:
        s = h.session("bank", "alice")
        assert (await s.prompt("approve a transfer")).reason == "awaiting_approval"
        (part,) = [p for p in (await s.messages())[-1].parts if isinstance(p, ToolPart)]
        assert part.approval is not None
        made = await h.schedules("bank", "alice").create("remind me", delay_s=0.05, id="soon")
        fired = f"schedule:soon:{made.next_run_at}"
        async with asyncio.timeout(GUARD):
            while True:  # submitted once due
                if await s.inspect(fired) is not None:
                    break
                await asyncio.sleep(0.02)
            await s.wait(fired)
        ended = next(p for p in (await s.messages())[1].parts if isinstance(p, ToolPart))
        assert (ended.state, ended.errorText) == ("output-error", MOVED_ON_ERROR)
        for answer in ({"type": "approval", "tool_call_id": part.toolCallId, "approved": True},
                       {"type": "approval", "approval_id": part.approval.id, "approved": True}):
            with pytest.raises(AnswerRefused) as caught:
                await s.submit(answer)
            assert caught.value.reason == "moved_on"
        assert runs == []
