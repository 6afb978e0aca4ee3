"""What a turn waits on is on its result, and `approve`/`deny` answer it by call id."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from tests.harness.host.reference_agent import make
from think_server.harness import (
    AnswerRefused,
    OperationSettled,
    StepContext,
    WaitingCall,
)
from think_server.harness.providers._transcript import ModelToolResult, to_model_turns
from think_server.protocol import ToolPart, message_text


async def test_a_turn_waiting_for_an_approval_says_which_call_on_every_result(tmp_path: Path) -> None:
    async with make(tmp_path) as h:
        s = h.session("assistant", "waits")
        result = await s.prompt("approve the transfer")
        part = next(p for p in (await s.messages())[-1].parts if isinstance(p, ToolPart))
        expected = (WaitingCall(part.toolCallId, "transferFunds", {"amount": 100, "to": "bob"}, "approval"),)
        assert (result.outcome, result.reason, result.waiting) == ("unanswered", "awaiting_approval", expected)
        assert (await s.wait(result.operation_id)).waiting == expected, "a result read back from the file too"
        info = await s.inspect(result.operation_id)
        assert info is not None and info.waiting == expected
        assert info.to_json()["waiting"] == [{"call_id": part.toolCallId, "tool": "transferFunds",
                                              "input": {"amount": 100, "to": "bob"}, "kind": "approval"}]

        receipt = await s.approve(part.toolCallId)
        done = await s.wait(receipt.operation_id)
        assert (done.outcome, done.waiting) == ("done", ())
        assert message_text((await s.messages())[-1]).endswith("Done: sent 100 to bob.")
        answered = await s.inspect(result.operation_id)
        assert answered is not None and answered.waiting == (), "once answered, nothing waits"


async def test_a_client_tool_call_waits_for_a_client_result(tmp_path: Path) -> None:
    async with make(tmp_path) as h:
        s = h.session("assistant", "client")
        result = await s.prompt("ask where I am")
        assert result.reason == "awaiting_client_tool"
        assert [(w.tool, w.kind) for w in result.waiting] == [("getLocation", "client_result")]
        with pytest.raises(AnswerRefused) as refused:  # a client tool wants a result, not an approval
            await s.approve(result.waiting[0].call_id)
        assert refused.value.reason == "not_awaiting_approval"
        r = await s.submit({"type": "tool-result", "tool_call_id": result.waiting[0].call_id, "output": "Lisbon"})
        assert (await s.wait(r.operation_id)).outcome == "done"


async def test_the_settled_event_carries_the_waiting_calls(tmp_path: Path) -> None:
    async with make(tmp_path) as h:
        s = h.session("assistant", "events")
        settled = [e async for e in s.chat("approve the transfer") if isinstance(e, OperationSettled)]
        assert [(w.tool, w.kind) for w in settled[-1].waiting] == [("transferFunds", "approval")]


async def test_deny_ends_the_call_unrun_and_the_model_reads_the_reason(tmp_path: Path) -> None:
    async with make(tmp_path) as h:
        s = h.session("assistant", "deny")
        result = await s.prompt("approve the transfer")
        call_id = result.waiting[0].call_id
        done = await s.wait((await s.deny(call_id, "not this month")).operation_id)
        assert done.outcome == "done"
        messages = await s.messages()
        assert message_text(messages[-1]).endswith("Okay, the transfer was not made.")
        part = next(p for p in messages[-1].parts if isinstance(p, ToolPart))
        assert part.state == "output-denied" and part.approval is not None
        assert (part.approval.approved, part.approval.reason) == (False, "not this month")
        told = [c.output for turn in to_model_turns(messages) for c in turn.content if isinstance(c, ModelToolResult)]
        assert told == ["The user denied this tool call. Reason: not this month"]


async def test_approve_refuses_a_call_that_waits_for_nothing(tmp_path: Path) -> None:
    async with make(tmp_path) as h:
        s = h.session("assistant", "refuse")
        with pytest.raises(AnswerRefused) as unknown:
            await s.approve("no-such-call")
        assert unknown.value.reason == "unknown_tool_call"
        result = await s.prompt("approve the transfer")
        call_id = result.waiting[0].call_id
        await s.wait((await s.approve(call_id)).operation_id)
        with pytest.raises(AnswerRefused) as twice:
            await s.deny(call_id)
        assert twice.value.reason == "not_awaiting_approval"
        assert [m.role for m in await s.messages()] == ["user", "assistant"], "a refusal writes nothing"


@pytest.mark.parametrize("answer", ["approve", "deny", "client-result"])
async def test_an_answer_sent_before_the_asking_turn_has_ended_waits_for_it(tmp_path: Path, answer: str) -> None:
    """A client may answer as soon as the request reaches it (a chunk, streamed before the turn's message
    is written: the hook's addToolApprovalResponse from the card, a client's own code): the answer
    waits for the turn that asked to end, rather than being refused as a call the conversation does
    not have."""
    asked: asyncio.Future[str] = asyncio.get_running_loop().create_future()
    go_on = asyncio.Event()

    async def step_finished(ctx: StepContext) -> None:
        # Between the request going out and the message holding it being written.
        call = next(p for p in ctx.message.parts if isinstance(p, ToolPart))
        if not asked.done():
            asked.set_result(call.toolCallId)
            await go_on.wait()

    prompt, reason, end = {
        "approve": ("approve the transfer", "awaiting_approval", "Done: sent 100 to bob."),
        "deny": ("approve the transfer", "awaiting_approval", "Okay, the transfer was not made."),
        "client-result": ("ask where I am", "awaiting_client_tool", "You are in Lisbon."),
    }[answer]
    async with make(tmp_path, hooks={"on_step_finish": step_finished}) as h:
        s = h.session("assistant", "early")
        turn = asyncio.create_task(s.prompt(prompt))
        call_id = await asyncio.wait_for(asked, 10)
        answering: asyncio.Task[Any] = asyncio.create_task(
            s.approve(call_id) if answer == "approve" else s.deny(call_id) if answer == "deny"
            else s.submit({"type": "tool-result", "tool_call_id": call_id, "output": "Lisbon"}, source="client"))
        await asyncio.sleep(0.05)
        assert not answering.done(), answering  # not refused: waiting for the turn that asked
        go_on.set()
        assert (await turn).reason == reason
        done = await s.wait((await answering).operation_id)
        assert done.outcome == "done"
        assert message_text((await s.messages())[-1]).endswith(end)


async def test_an_answer_to_a_call_no_turn_asked_is_refused_at_once_while_a_turn_runs(tmp_path: Path) -> None:
    """Only a call the running turn has asked is waited for: any other id is refused while it runs."""
    asked, go_on = asyncio.Event(), asyncio.Event()

    async def step_finished(ctx: StepContext) -> None:
        asked.set()
        await go_on.wait()

    async with make(tmp_path, hooks={"on_step_finish": step_finished}) as h:
        s = h.session("assistant", "other")
        turn = asyncio.create_task(s.prompt("approve the transfer"))
        await asyncio.wait_for(asked.wait(), 10)
        with pytest.raises(AnswerRefused) as refused:
            await asyncio.wait_for(s.approve("call_somethingElse_9"), 5)
        assert refused.value.reason == "unknown_tool_call"
        go_on.set()
        await turn
