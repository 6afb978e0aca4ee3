"""Hooks (SEMANTICS.md §9): each decision, what every hook is told, and hooks that fail.

Every test runs real turns through :class:`Harness` on a real file; the models are the offline
scripted model or, for model errors, a fake at the model's edge.
"""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path
from typing import Any

import pytest

from think_server.harness import (
    Agent,
    ChunkContext,
    ErrorContext,
    Finish,
    Harness,
    HookContext,
    Instance,
    ModelError,
    RecoveryContext,
    RecoveryPolicy,
    ScriptedModel,
    StepContext,
    TextDelta,
    TextStart,
    ToolCallContext,
    TurnConfig,
    TurnContext,
    TurnEndContext,
    is_context_overflow,
    tool,
)
from think_server.protocol import ToolPart, message_text

from .._doubles import GUARD, FakeModel, Pause, script, settle, text, user
from .._instances import instance_at

RULES: list[dict[str, Any]] = [
    {"match": "show system", "steps": [[{"text": ["System: {system}"]}]]},
    {"match": "show tools", "steps": [[{"text": ["Tools: {tools}"]}]]},
    {"match": "weather", "steps": [
        [{"tool_call": {"name": "getWeather", "input": {"city": "Paris"}}}],
        [{"text": ["Result: {result}"]}],
    ]},
    {"match": "*", "steps": [[{"text": ["You said: {user}"]}]]},
]
SCRIPT = {"rules": RULES}
ran: list[dict[str, Any]] = []


@tool(name="getWeather")
def get_weather(city: str) -> dict[str, Any]:
    """The weather in a city.

    Args:
        city: Which city.
    """
    ran.append({"city": city})
    return {"city": city, "condition": "sunny"}


@tool(name="sendEmail")
def send_email(to: str) -> str:
    """Send an email.

    Args:
        to: To whom.
    """
    return f"sent to {to}"


@pytest.fixture(autouse=True)
def _no_runs() -> None:
    ran.clear()


def harness_with(tmp_path: Path, **agent: Any) -> Harness:
    agent.setdefault("tools", [get_weather, send_email])
    agent.setdefault("system", "Be brief.")
    return Harness({"assistant": Agent(**agent)}, data_dir=tmp_path, model=ScriptedModel(SCRIPT))


async def ask(h: Harness, text_: str, name: str = "hooks", session: str = "") -> Any:
    s = h.session("assistant", name, session)
    return await asyncio.wait_for(s.prompt(text_), GUARD)


# -- before_turn ------------------------------------------------------------------------------


async def test_before_turn_changes_the_prompt_and_is_told_where_it_runs(tmp_path: Path) -> None:
    seen: list[TurnContext] = []

    def before_turn(ctx: TurnContext) -> dict[str, Any]:
        seen.append(ctx)
        return {"system": f"You help {ctx.instance}, session {ctx.session or 'root'}."}

    async with harness_with(tmp_path, before_turn=before_turn) as h:
        result = await ask(h, "show system", name="alice")
        assert result.text == "System: You help alice, session root."
    (ctx,) = seen
    assert (ctx.agent, ctx.instance, ctx.session, ctx.step, ctx.continuation) == ("assistant", "alice", "", 0, False)
    assert ctx.operation == result.operation_id and ctx.system == "Be brief."
    assert ctx.tools == ["getWeather", "sendEmail"]
    assert [message_text(m) for m in ctx.messages] == ["show system"]


async def test_before_turn_runs_before_every_model_call_and_narrows_the_tools(tmp_path: Path) -> None:
    steps: list[tuple[int, bool]] = []

    async def before_turn(ctx: TurnContext) -> TurnConfig:  # async, answering a typed config
        steps.append((ctx.step, ctx.continuation))
        return TurnConfig(active_tools=["getWeather"])

    async with harness_with(tmp_path, before_turn=before_turn) as h:
        assert (await ask(h, "show tools")).text == "Tools: getWeather"
        steps.clear()
        assert (await ask(h, "weather")).text.startswith("Result: ")
    assert steps == [(0, False), (1, True)], "once per model call, the second continuing the answer"


async def test_before_turn_can_change_the_messages_and_the_model(tmp_path: Path) -> None:
    other = ScriptedModel({"rules": [{"match": "*", "steps": [[{"text": ["Other model: {user}"]}]]}]})

    def before_turn(ctx: TurnContext) -> dict[str, Any]:
        last = ctx.messages[-1].model_dump(mode="json")
        last["parts"] = [{"type": "text", "text": message_text(ctx.messages[-1]).upper()}]
        return {"model": other, "messages": [*ctx.messages[:-1], last]}

    async with harness_with(tmp_path, before_turn=before_turn) as h:
        result = await ask(h, "quiet please")
        assert result.text == "Other model: QUIET PLEASE"
        s = h.session("assistant", "hooks")
        assert message_text((await s.messages())[0]) == "quiet please", "the stored transcript is untouched"


async def test_before_turn_may_name_a_model_by_its_setting(tmp_path: Path) -> None:
    path = tmp_path / "other.json"
    path.write_text('{"rules": [{"match": "*", "steps": [[{"text": ["From a file."]}]]}]}')
    async with harness_with(tmp_path / "data", before_turn=lambda ctx: {"model": f"scripted:{path}"}) as h:
        assert (await ask(h, "hello")).text == "From a file."
        assert (await ask(h, "again")).text == "From a file."


# -- before_tool_call / after_tool_call -------------------------------------------------------


async def test_a_blocked_call_never_runs_and_the_model_sees_the_reason(tmp_path: Path) -> None:
    after: list[ToolCallContext] = []

    def before(ctx: ToolCallContext) -> dict[str, Any]:
        return {"action": "block", "reason": f"no {ctx.tool_name} for {ctx.input['city']}"}

    async with harness_with(tmp_path, before_tool_call=before, after_tool_call=after.append) as h:
        result = await ask(h, "weather")
    assert result.text == "Result: no getWeather for Paris"
    assert ran == []
    (ctx,) = after
    assert (ctx.action, ctx.output, ctx.error, ctx.step) == ("block", "no getWeather for Paris", None, 0)


async def test_a_block_without_a_reason_says_which_hook_blocked_it(tmp_path: Path) -> None:
    async with harness_with(tmp_path, before_tool_call=lambda ctx: {"action": "block"}) as h:
        result = await ask(h, "weather")
    assert result.text == 'Result: Tool "getWeather" was blocked by before_tool_call.'


async def test_a_substituted_output_is_the_result_and_the_tool_does_not_run(tmp_path: Path) -> None:
    async with harness_with(tmp_path, before_tool_call=lambda ctx: {"action": "substitute",
                                                                    "output": {"cached": True}}) as h:
        result = await ask(h, "weather")
        s = h.session("assistant", "hooks")
        (part,) = [p for m in await s.messages() for p in m.parts if isinstance(p, ToolPart)]
    assert result.text == 'Result: {"cached":true}' and ran == []
    assert (part.state, part.output) == ("output-available", {"cached": True})


async def test_a_call_runs_with_the_input_the_hook_gives(tmp_path: Path) -> None:
    after: list[ToolCallContext] = []

    async def before(ctx: ToolCallContext) -> dict[str, Any]:
        return {"action": "run", "input": {"city": "Rome"}}

    async with harness_with(tmp_path, before_tool_call=before, after_tool_call=after.append) as h:
        result = await ask(h, "weather")
        s = h.session("assistant", "hooks")
        (part,) = [p for m in await s.messages() for p in m.parts if isinstance(p, ToolPart)]
    assert ran == [{"city": "Rome"}]
    assert result.text == 'Result: {"city":"Rome","condition":"sunny"}'
    assert part.input == {"city": "Paris"}, "the message keeps what the model asked for"
    assert after[0].input == {"city": "Paris"} and after[0].output == {"city": "Rome", "condition": "sunny"}


async def test_the_approval_comes_before_the_hook(tmp_path: Path) -> None:
    """A tool that needs approval only above an amount; the hook sees only approved calls."""
    calls: list[Any] = []

    @tool(name="transferFunds", needs_approval=lambda args: args["amount"] > 100)
    def transfer(amount: float, to: str) -> str:
        """Move money.

        Args:
            amount: How much.
            to: To whom.
        """
        return f"sent {amount:g} to {to}"

    model = script({"match": "small", "steps": [[{"tool_call": {"name": "transferFunds",
                                                                 "input": {"amount": 20, "to": "bo"}}}],
                                                 [{"text": ["Done: {result}"]}]]},
                   {"match": "big", "steps": [[{"tool_call": {"name": "transferFunds",
                                                               "input": {"amount": 500, "to": "bo"}}}],
                                               [{"text": ["Done: {result}"]}]]})
    agent = Agent(tools=[transfer], before_tool_call=lambda ctx: calls.append(ctx.input))
    async with Harness({"bank": agent}, data_dir=tmp_path, model=model) as h:
        s = h.session("bank", "b")
        assert (await s.prompt("small")).text == "Done: sent 20 to bo"
        waiting = await s.prompt("big")
        assert (waiting.outcome, waiting.reason) == ("unanswered", "awaiting_approval")
        assert calls == [{"amount": 20, "to": "bo"}], "not asked before the approval"
        (call,) = waiting.waiting
        result = await s.wait((await s.approve(call.call_id)).operation_id)
        assert result.text == "Done: sent 500 to bo"
    assert calls[-1] == {"amount": 500, "to": "bo"}


# -- observing --------------------------------------------------------------------------------


async def test_steps_chunks_and_the_turn_end_are_observed(tmp_path: Path) -> None:
    steps: list[StepContext] = []
    chunks: list[ChunkContext] = []
    ended: list[TurnEndContext] = []
    got_end = asyncio.Event()

    async def on_turn_end(ctx: TurnEndContext) -> None:
        ended.append(ctx)
        got_end.set()

    async with harness_with(tmp_path, on_step_finish=steps.append, on_chunk=chunks.append,
                            on_turn_end=on_turn_end) as h:
        result = await ask(h, "weather")
        await asyncio.wait_for(got_end.wait(), GUARD)
    assert [(s.step, s.finish_reason) for s in steps] == [(0, "tool-calls"), (1, "stop")]
    assert steps[0].tool_calls == [{"tool_call_id": steps[0].tool_calls[0]["tool_call_id"],
                                    "tool_name": "getWeather", "input": {"city": "Paris"}}]
    assert message_text(steps[1].message) == result.text
    deltas = "".join(c.chunk["delta"] for c in chunks if c.chunk["type"] == "text-delta")
    assert deltas == result.text
    assert {c.step for c in chunks} == {0, 1}
    # The start chunk too, though the turn's start commits and sends it before the turn is made.
    assert (chunks[0].step, chunks[0].chunk["type"]) == (0, "start")
    (end,) = ended
    assert (end.status, end.outcome, end.text, end.operation) == ("completed", "done", result.text,
                                                                  result.operation_id)


async def test_a_model_error_is_observed_and_classified_retry(tmp_path: Path) -> None:
    model = FakeModel([ModelError("429 slow down")], [*text("t", "Fine now."), Finish("stop")])
    errors: list[ErrorContext] = []

    def classify(ctx: ErrorContext) -> str:
        return "retry" if "429" in ctx.message else "fail"

    agent = Agent(on_error=errors.append, classify_error=classify, recovery=RecoveryPolicy(backoff_ms=1))
    async with Harness({"a": agent}, data_dir=tmp_path, model=model) as h:
        s = h.session("a", "x")
        result = await asyncio.wait_for(s.prompt("hi"), GUARD)
    assert (result.outcome, result.text) == ("done", "Fine now.")
    assert [e.message for e in errors] == ["429 slow down"]
    assert len(model.requests) == 2, "called again after the error"


async def test_a_model_error_not_classified_fails_the_turn(tmp_path: Path) -> None:
    model = FakeModel([ModelError("boom")], [*text("t", "never"), Finish("stop")])
    async with Harness({"a": Agent()}, data_dir=tmp_path, model=model) as h:
        result = await asyncio.wait_for(h.session("a", "x").prompt("hi"), GUARD)
    assert (result.outcome, result.reason) == ("unanswered", "boom") and len(model.requests) == 1


async def test_a_context_overflow_ends_the_turn_with_a_clear_reason(tmp_path: Path) -> None:
    model = FakeModel([ModelError("This model's maximum context length is 8192 tokens")])
    agent = Agent(classify_error=lambda ctx: "context-overflow" if is_context_overflow(ctx.message) else "fail")
    async with Harness({"a": agent}, data_dir=tmp_path, model=model) as h:
        result = await asyncio.wait_for(h.session("a", "x").prompt("hi"), GUARD)
    assert result.outcome == "unanswered" and "too long for the model's context window" in (result.reason or "")


async def test_recovery_can_be_abandoned(db_path: Path) -> None:
    pause = Pause()
    first = FakeModel([TextStart("t"), TextDelta("t", "Hal"), pause])
    inst = await instance_at(db_path, Agent(), first)
    s = await inst.session()
    receipt = await s.submit([user("u1", "hi")])
    await asyncio.wait_for(pause.reached.wait(), GUARD)
    await asyncio.sleep(0.05)  # the group commit stores "Hal"
    await _crash(inst)

    asked: list[RecoveryContext] = []

    def on_recovery(ctx: RecoveryContext) -> str:
        asked.append(ctx)
        return "abandon"

    second = FakeModel([*text("u", "never"), Finish("stop")])
    again = await instance_at(db_path, Agent(on_recovery=on_recovery, recovery=RecoveryPolicy(backoff_ms=1)),
                                second)
    try:
        s2 = await again.session()
        result = await settle(s2, receipt.operation_id)
        assert (result.outcome, result.reason) == ("unanswered", "abandoned")
        assert second.requests == [], "the model was not called again"
        (ctx,) = asked
        assert (ctx.operation, ctx.attempt, ctx.text) == (receipt.operation_id, 1, "Hal")
        assert [message_text(m) for m in (await s2.transcript())] == ["hi", "Hal"], "what streamed is kept"
    finally:
        await again.close()


# -- hooks that fail --------------------------------------------------------------------------


@pytest.mark.parametrize("hook", ["before_turn", "on_step_finish", "on_chunk"])
async def test_a_hook_that_raises_ends_the_turn_with_its_name_and_the_session_goes_on(
        tmp_path: Path, hook: str, caplog: pytest.LogCaptureFixture) -> None:
    armed = [True]

    def broken(ctx: HookContext) -> None:
        if armed.pop() if armed else False:  # the first call only
            raise RuntimeError("the user's bug")

    async with harness_with(tmp_path, **{hook: broken}) as h:
        with caplog.at_level(logging.ERROR, logger="think_server.hooks"):
            failed = await ask(h, "hello")
        assert failed.outcome == "unanswered"
        assert failed.reason == f"The {hook} hook failed: RuntimeError: the user's bug"
        assert any("the user's bug" in (r.exc_text or "") or r.exc_info for r in caplog.records)
        assert (await ask(h, "hello again")).text == "You said: hello again", "the next turn runs"


async def test_a_before_tool_call_that_raises_fails_the_call_and_the_turn(tmp_path: Path) -> None:
    def before(ctx: ToolCallContext) -> None:
        raise ValueError("no tools today")

    async with harness_with(tmp_path, before_tool_call=before) as h:
        result = await ask(h, "weather")
        s = h.session("assistant", "hooks")
        (part,) = [p for m in await s.messages() for p in m.parts if isinstance(p, ToolPart)]
    assert result.reason == "The before_tool_call hook failed: ValueError: no tools today"
    assert (part.state, part.errorText) == ("output-error", result.reason) and ran == []


@pytest.mark.parametrize(("hook", "answer", "words"), [
    ("before_turn", {"sytem": "typo"}, "unknown keys ['sytem']"),
    ("before_turn", "be brief", "must return None, a mapping or a TurnConfig"),
    ("before_turn", {"temperature": "hot"}, "temperature must be a number"),
    ("before_turn", {"model": "nonsense:x"}, "chose the model 'nonsense:x', which cannot be used"),
    ("before_tool_call", {"action": "allow"}, "expected 'run', 'block' or 'substitute'"),
    ("before_tool_call", {"action": "block", "output": 1}, "which takes only ['reason']"),
])
async def test_an_answer_a_hook_may_not_give_is_named(tmp_path: Path, hook: str, answer: Any, words: str) -> None:
    async with harness_with(tmp_path, **{hook: lambda ctx: answer}) as h:
        result = await ask(h, "weather")
    assert result.outcome == "unanswered" and words in (result.reason or ""), result.reason


async def test_a_classification_that_is_none_of_the_three_is_named(tmp_path: Path) -> None:
    agent = Agent(classify_error=lambda ctx: "maybe")
    async with Harness({"a": agent}, data_dir=tmp_path, model=FakeModel([ModelError("boom")])) as h:
        result = await asyncio.wait_for(h.session("a", "x").prompt("hi"), GUARD)
    assert "classify_error returned 'maybe'; expected 'fail', 'retry', 'context-overflow'" in (result.reason or "")


# -- model, system and tools chosen per turn --------------------------------------------------


async def test_model_system_and_tools_may_be_functions_of_the_session(tmp_path: Path) -> None:
    loud = ScriptedModel({"rules": [{"match": "*", "steps": [[{"text": ["LOUD: {system} / {tools}"]}]]}]})
    asked: list[HookContext] = []

    def system(ctx: HookContext) -> str:
        asked.append(ctx)
        return f"Prompt for {ctx.session or 'root'}"

    async def tools(ctx: HookContext) -> list[Any]:
        return [send_email] if ctx.session == "mail" else [get_weather]

    agent = Agent(model=lambda ctx: loud if ctx.session == "mail" else None, system=system, tools=tools)
    async with Harness({"a": agent}, data_dir=tmp_path, model=ScriptedModel(SCRIPT)) as h:
        await h.sessions("a", "x").create("mail")
        assert (await h.session("a", "x").prompt("show system")).text == "System: Prompt for root"
        assert (await h.session("a", "x").prompt("show tools")).text == "Tools: getWeather"
        assert (await h.session("a", "x", "mail").prompt("hi")).text == "LOUD: Prompt for mail / sendEmail"
    assert {c.session for c in asked} == {"", "mail"} and all(c.operation for c in asked)


async def _crash(inst: Instance) -> None:
    """The process dies: workers stop where they are, without suspending; nothing more is written."""
    for s in inst._sessions.values():
        if s._worker is not None:
            s._worker.cancel()
            await asyncio.gather(s._worker, return_exceptions=True)
    await inst.db.close()


async def test_a_tool_before_turn_took_away_cannot_be_called(tmp_path: Path) -> None:
    async with harness_with(tmp_path, before_turn=lambda ctx: {"active_tools": ["sendEmail"]}) as h:
        result = await ask(h, "weather")  # the script calls getWeather anyway
        s = h.session("assistant", "hooks")
        (part,) = [p for m in await s.messages() for p in m.parts if isinstance(p, ToolPart)]
    assert ran == [], "not run"
    assert (part.state, part.errorText) == ("output-error", "Tool 'getWeather' is not available.")
    assert result.outcome == "done"
