"""Recovery in the harness: stalls, the interruption budget, backoff, and restarts that find work running."""

from __future__ import annotations

import asyncio
import json
import sqlite3
from collections.abc import AsyncIterator
from typing import Any

import pytest

from think_server.harness import (
    Agent,
    Finish,
    Instance,
    MessageUpdated,
    Model,
    ModelEvent,
    ModelRequest,
    RecoveryPolicy,
    StepContext,
    TextDelta,
    TextEnd,
    TextStart,
    Tool,
)
from think_server.harness._answers import INTERRUPTED_TOOL_ERROR, Answer
from think_server.protocol import ToolPart, UIMessage

from .._doubles import FakeModel, Pause, call, script, settle, text, user
from .._instances import instance_at


def stalled(part: str, *deltas: str) -> list[Any]:
    """A model call that sends some text and then nothing, forever."""
    return [TextStart(part), *(TextDelta(part, d) for d in deltas), Pause()]


def test_backoff_doubles_from_the_base_up_to_a_minute() -> None:
    p = RecoveryPolicy(backoff_ms=1000)
    assert [p.backoff_s(n) for n in range(1, 10)] == [0, 1, 2, 4, 8, 16, 32, 60, 60]
    with pytest.raises(ValueError):
        RecoveryPolicy(max_attempts=0)


async def test_a_silent_model_is_interrupted_and_the_same_message_continued(open_instance: Any, peek: Any) -> None:
    # The first call goes silent after "Hel"; the second continues the message.
    model = FakeModel(stalled("t", "Hel"), [*text("u", "lo!"), Finish("stop")])
    agent = Agent(recovery=RecoveryPolicy(stall_timeout_ms=50, backoff_ms=1))
    inst = await open_instance(model, agent)
    s = await inst.session()
    r = await s.submit([user("u1", "hi")])
    result = await settle(s, r.operation_id)
    assert (result.outcome, result.text) == ("done", "Hello!")
    assert len(model.requests) == 2
    # The second call saw the partial answer, so it could continue instead of repeating.
    continued = model.seen[1][-1]
    assert continued["role"] == "assistant" and [p.get("text") for p in continued["parts"] if p["type"] == "text"] \
        == ["Hel"]
    (answer,) = [m for m in (await s.transcript()) if m.role == "assistant"]
    assert [p.text for p in answer.parts if p.type == "text"] == ["Hel", "lo!"]
    chunks = [c["type"] for c in peek.operation_chunks(r.operation_id)]
    assert chunks.count("start") == 1 and chunks.count("finish") == 1
    assert chunks.count("text-end") == 2, "the stalled part was closed in the stream too"
    assert peek.operation_status(r.operation_id) == "completed"


async def test_interruptions_without_progress_use_up_the_budget(open_instance: Any, peek: Any) -> None:
    model = FakeModel(stalled("t"))  # every call stalls before sending anything
    agent = Agent(recovery=RecoveryPolicy(stall_timeout_ms=20, backoff_ms=1, max_attempts=3))
    inst = await open_instance(model, agent)
    s = await inst.session()
    r = await s.submit([user("u1", "hi")])
    result = await settle(s, r.operation_id)
    assert (result.outcome, result.reason) == ("unanswered", "interrupted")
    assert len(model.requests) == 4, "the first call, then three more attempts"
    assert s.last_terminal is not None and s.last_terminal["operationId"] == r.operation_id
    assert "could not recover" in s.last_terminal["body"]


async def test_a_finished_model_call_resets_the_count(open_instance: Any) -> None:
    # Stall, stall, then a tool step finishes (progress), then stall, stall, then an answer:
    # four interruptions in all, but never three in a row, so a budget of 2 is enough.
    model = FakeModel(
        stalled("a"), stalled("b"),
        [*call("c1", "ping"), Finish("tool-calls")],
        stalled("c"), stalled("d"),
        [*text("e", "done"), Finish("stop")],
    )
    agent = Agent(tools=[Tool("ping", execute=lambda: "pong")],
                  recovery=RecoveryPolicy(stall_timeout_ms=20, backoff_ms=1, max_attempts=2))
    inst = await open_instance(model, agent)
    s = await inst.session()
    r = await s.submit([user("u1", "hi")])
    result = await settle(s, r.operation_id)
    assert (result.outcome, result.text) == ("done", "done")
    assert len(model.requests) == 6


async def test_the_stall_watchdog_can_be_turned_off(open_instance: Any) -> None:
    pause = Pause()
    model = FakeModel([TextStart("t"), TextDelta("t", "slow"), pause, TextEnd("t"), Finish("stop")])
    inst = await open_instance(model, Agent(recovery=RecoveryPolicy(stall_timeout_ms=0)))
    s = await inst.session()
    r = await s.submit([user("u1", "hi")])
    await asyncio.wait_for(pause.reached.wait(), 5)
    await asyncio.sleep(0.05)
    assert s.running_operation == r.operation_id, "still waiting: no watchdog"
    pause.go.set()
    assert (await settle(s, r.operation_id)).text == "slow"


async def test_a_restart_continues_a_running_operation_without_any_client(db_path: Any) -> None:
    """The process dies mid-call (simulated: the instance is dropped without closing, its file kept)."""
    pause = Pause()
    first = FakeModel([TextStart("t"), TextDelta("t", "Hel"), pause])
    inst = await instance_at(db_path, Agent(recovery=RecoveryPolicy(backoff_ms=1)), first)
    s = await inst.session()
    r = await s.submit([user("u1", "hi")])
    await asyncio.wait_for(pause.reached.wait(), 5)
    await asyncio.sleep(0.05)  # let the group commit store "Hel"
    # A crash: nothing more is written by this instance. Its worker is stopped without suspending.
    worker = s._worker
    assert worker is not None
    worker.cancel()
    await asyncio.gather(worker, return_exceptions=True)
    await inst.db.close()

    second = FakeModel([*text("u", "lo!"), Finish("stop")])
    again = await instance_at(db_path, Agent(recovery=RecoveryPolicy(backoff_ms=1)), second)
    try:
        s2 = await again.session()
        result = await settle(s2, r.operation_id)
        assert (result.outcome, result.text) == ("done", "Hello!")
        (answer,) = [m for m in (await s2.transcript()) if m.role == "assistant"]
        assert "".join(p.text for p in answer.parts if p.type == "text") == "Hello!"
        assert len(second.requests) == 1 and second.seen[0][-1]["role"] == "assistant"
        bodies = [json.loads(b) for row in await again.db.read.streams_of_request(r.operation_id)
                  for b in await again.db.read.chunk_bodies(row.id)]
        kinds = [b["type"] for b in bodies]
        assert kinds.count("start") == 1 and kinds.count("finish") == 1, "one wire stream for the operation"
    finally:
        await again.close()


async def test_a_crash_between_the_start_and_the_first_chunk_restarts_the_wire_stream_whole(db_path: Any) -> None:
    """A turn's start commits its first stream's row; a crash before its first chunk commits leaves
    that row empty. The restarted turn's wire stream is whole: it begins with its ``start``."""
    pause = Pause()
    first = FakeModel([TextStart("t"), pause])
    inst = await instance_at(db_path, Agent(recovery=RecoveryPolicy(backoff_ms=1)), first)
    s = await inst.session()
    r = await s.submit([user("u1", "hi")])
    await asyncio.wait_for(pause.reached.wait(), 5)
    await asyncio.sleep(0.05)
    await crash(inst)
    raw = sqlite3.connect(db_path, isolation_level=None)
    try:  # what the file holds had the crash come before the first chunk's commit
        assert raw.execute("DELETE FROM stream_chunks").rowcount > 0
        assert raw.execute("SELECT count(*) FROM streams WHERE status = 'streaming'").fetchone() == (1,)
    finally:
        raw.close()

    second = FakeModel([*text("u", "Hello!"), Finish("stop")])
    again = await instance_at(db_path, Agent(recovery=RecoveryPolicy(backoff_ms=1)), second)
    try:
        s2 = await again.session()
        result = await settle(s2, r.operation_id)
        assert (result.outcome, result.text) == ("done", "Hello!")
        kinds = [json.loads(b)["type"] for row in await again.db.read.streams_of_request(r.operation_id)
                 for b in await again.db.read.chunk_bodies(row.id)]
        assert kinds[0] == "start" and kinds.count("start") == 1 and kinds[-1] == "finish", kinds
    finally:
        await again.close()


async def crash(inst: Instance) -> None:
    """The process dies: workers stop where they are, without suspending; nothing more is written."""
    for s in inst._sessions.values():
        if s._worker is not None:
            s._worker.cancel()
            await asyncio.gather(s._worker, return_exceptions=True)
    await inst.db.close()


async def test_a_regenerated_answer_that_reuses_a_call_id_recovers_its_own_call(db_path: Any) -> None:
    """Models may reuse call ids across branches (the scripted model does): the record follows the latest call."""
    runs: list[int] = []
    second_started = asyncio.Event()

    async def once() -> dict[str, int]:
        runs.append(len(runs) + 1)
        if len(runs) == 2:  # the regenerated answer's run: the process dies in it
            second_started.set()
            await asyncio.Event().wait()
        return {"n": len(runs)}

    model = script({"match": "*", "steps": [[{"tool_call": {"name": "once", "input": {}}}],
                                            [{"text": ["saw {result}"]}]]})
    agent = Agent(tools=[Tool("once", execute=once)], recovery=RecoveryPolicy(backoff_ms=1))
    inst = await instance_at(db_path, agent, model)
    s = await inst.session()
    first = await s.submit([user("u1", "go")])
    assert (await settle(s, first.operation_id)).text == 'saw {"n":1}'
    again = await s.submit([], regenerate_from="u1")  # the same transcript: the same call id
    await asyncio.wait_for(second_started.wait(), 5)
    await crash(inst)

    restarted = await instance_at(db_path, agent, model)
    try:
        s2 = await restarted.session()
        result = await settle(s2, again.operation_id)
        assert runs == [1, 2], "a report tool cut short is reported, never run again"
        assert result.text == f"saw {INTERRUPTED_TOOL_ERROR}"
        (part,) = [p for p in (await s2.transcript())[-1].parts if isinstance(p, ToolPart)]
        assert (part.state, part.errorText) == ("output-error", INTERRUPTED_TOOL_ERROR)
        branches = await restarted.db.read.children(s2.id, "u1")
        assert len(branches) == 2 and '"output":{"n":1}' in branches[0].content, "the first answer keeps its result"
    finally:
        await restarted.close()


async def test_an_approved_call_a_crash_cut_short_is_reported_outside_the_continuations_stream(db_path: Any) -> None:
    """The approved call was made in the first stream; the continuation's stream (which a client
    on AI SDK 6 builds from nothing) must not speak of it: the report is a message update."""
    started = asyncio.Event()

    async def send() -> str:
        started.set()
        await asyncio.Event().wait()  # the process dies while it runs
        return "sent"

    model = script({"match": "*", "steps": [[{"tool_call": {"name": "send", "input": {}}}],
                                            [{"text": ["saw {result}"]}]]})
    agent = Agent(tools=[Tool("send", execute=send, needs_approval=True)], recovery=RecoveryPolicy(backoff_ms=1))
    inst = await instance_at(db_path, agent, model)
    s = await inst.session()
    first = await s.submit([user("u1", "go")])
    assert (await settle(s, first.operation_id)).reason == "awaiting_approval"
    approved = await s.answer(Answer("approval", "call_send_1", approved=True))
    await asyncio.wait_for(started.wait(), 5)
    await crash(inst)

    restarted = await instance_at(db_path, agent, model)
    try:
        s2 = await restarted.session()
        told: list[Any] = []
        s2.subscribe(lambda e: told.append(e.message) if isinstance(e, MessageUpdated) else None)
        result = await settle(s2, approved.operation_id)
        assert result.text == f"saw {INTERRUPTED_TOOL_ERROR}"
        bodies = [json.loads(b) for row in await restarted.db.read.streams_of_request(approved.operation_id)
                  for b in await restarted.db.read.chunk_bodies(row.id)]
        assert [b["type"] for b in bodies if b["type"].startswith("tool-")] == []
        assert [[(p.state, p.errorText) for p in m.parts if isinstance(p, ToolPart)] for m in told] == [
            [("output-error", INTERRUPTED_TOOL_ERROR)]]
    finally:
        await restarted.close()


async def test_a_call_a_crash_stopped_before_it_started_runs_after_the_restart(db_path: Any, peek: Any) -> None:
    """The model call that made the call is stored; the process dies before the call is recorded as running."""
    runs: list[str] = []

    async def ping() -> str:
        runs.append("ping")
        return "pong"

    model = script({"match": "*", "steps": [[{"tool_call": {"name": "ping", "input": {}}}],
                                            [{"text": ["got {result}"]}]]})
    stored: list[UIMessage] = []

    async def die_as_the_step_ends(ctx: StepContext) -> None:
        # The step's message is committed by now; the worker is cancelled while it waits for this hook,
        # which it stops at: the call never gets to start. Once: the next life runs the call.
        if not stored:
            stored.append(ctx.message)
            assert s._worker is not None
            s._worker.cancel()

    agent = Agent(tools=[Tool("ping", execute=ping)], recovery=RecoveryPolicy(backoff_ms=1),
                  on_step_finish=die_as_the_step_ends)
    inst = await instance_at(db_path, agent, model)
    s = await inst.session()
    r = await s.submit([user("u1", "go")])
    assert s._worker is not None
    await asyncio.gather(s._worker, return_exceptions=True)
    await crash(inst)
    assert [p.state for m in stored for p in m.parts if isinstance(p, ToolPart)] == ["input-available"]
    assert runs == [] and peek.count("tool_calls") == 0 and peek.operation_status(r.operation_id) == "running"

    restarted = await instance_at(db_path, agent, model)
    try:
        s2 = await restarted.session()
        result = await settle(s2, r.operation_id)
        assert (result.outcome, result.text) == ("done", "got pong")
        assert runs == ["ping"], "the call runs once, after the restart"
        (part,) = [p for p in (await s2.transcript())[-1].parts if isinstance(p, ToolPart)]
        assert (part.toolCallId, part.state, part.output) == ("call_ping_1", "output-available", "pong")
    finally:
        await restarted.close()


async def test_an_operation_sealed_after_repeated_crashes_leaves_no_call_running(db_path: Any, peek: Any) -> None:
    """A rerun tool that dies with the process every time: once sealed, its call ends as an error too."""
    started = asyncio.Event()

    async def hang() -> str:
        started.set()
        await asyncio.Event().wait()
        return "never"

    model = script({"match": "*", "steps": [[{"tool_call": {"name": "hang", "input": {}}}], [{"text": ["never"]}]]})
    agent = Agent(tools=[Tool("hang", execute=hang, recovery="rerun")],
                  recovery=RecoveryPolicy(backoff_ms=1, crash_limit=2))
    inst = await instance_at(db_path, agent, model)
    s = await inst.session()
    r = await s.submit([user("u1", "go")])
    await asyncio.wait_for(started.wait(), 5)
    await crash(inst)
    started.clear()
    inst = await instance_at(db_path, agent, model)  # the first restart runs the call again; it dies again
    await inst.session()
    await asyncio.wait_for(started.wait(), 5)
    await crash(inst)

    sealed = await instance_at(db_path, agent, model)  # the second restart gives up
    try:
        s3 = await sealed.session()
        result = await settle(s3, r.operation_id)
        assert (result.outcome, result.reason) == ("unanswered", "out_of_memory")
        (part,) = [p for p in (await s3.transcript())[-1].parts if isinstance(p, ToolPart)]
        assert (part.state, part.errorText) == ("output-error", INTERRUPTED_TOOL_ERROR)
        last = (await s3.transcript())[-1]
        assert peek.message(s3.id, last.id) == last.model_dump(mode="json", exclude_unset=True)
        assert peek._all("SELECT state FROM tool_calls") == [("interrupted",)]
    finally:
        await sealed.close()


class _Thinking(Model):
    """Reasons silently, reporting only that bytes arrive (a provider's keep-alives), then answers."""

    def __init__(self, pings: int, every_s: float) -> None:
        self.pings, self.every_s, self.calls = pings, every_s, 0

    async def stream(self, request: ModelRequest) -> AsyncIterator[ModelEvent]:
        self.calls += 1
        for _ in range(self.pings):
            await asyncio.sleep(self.every_s)
            assert request.progress is not None
            request.progress()
        for event in [*text("t", "Thought it through."), Finish("stop")]:
            yield event


async def test_bytes_from_the_provider_keep_the_stall_watchdog_off(open_instance: Any) -> None:
    """Ten pings 50 ms apart: 500 ms of no events against a 150 ms watchdog, and no interruption."""
    model = _Thinking(pings=10, every_s=0.05)
    inst = await open_instance(model, Agent(recovery=RecoveryPolicy(stall_timeout_ms=150, backoff_ms=1)))
    s = await inst.session()
    r = await s.submit([user("u1", "think hard")])
    assert (await settle(s, r.operation_id)).text == "Thought it through."
    assert model.calls == 1, "never interrupted"


async def test_without_bytes_the_same_silence_is_a_stall(open_instance: Any) -> None:
    model = _Thinking(pings=1, every_s=0.5)
    inst = await open_instance(model, Agent(recovery=RecoveryPolicy(stall_timeout_ms=150, backoff_ms=1,
                                                                   max_attempts=1)))
    s = await inst.session()
    r = await s.submit([user("u1", "think hard")])
    result = await settle(s, r.operation_id)
    assert (result.outcome, result.reason) == ("unanswered", "interrupted") and model.calls == 2


async def test_an_approved_rerun_call_cut_short_by_a_crash_runs_again_once(db_path: Any) -> None:
    """After the restart the call is both approved (its part) and cut short (its record): one run."""
    runs: list[int] = []
    first_run = asyncio.Event()

    async def fetch() -> str:
        runs.append(len(runs) + 1)
        if len(runs) == 1:
            first_run.set()
            await asyncio.Event().wait()  # the process dies in it
        await asyncio.sleep(0.05)  # a second run at the same time would show here
        return f"run {len(runs)}"

    model = script({"match": "*", "steps": [[{"tool_call": {"name": "fetch", "input": {}}}],
                                            [{"text": ["got {result}"]}]]})
    agent = Agent(tools=[Tool("fetch", execute=fetch, needs_approval=True, recovery="rerun")],
                  recovery=RecoveryPolicy(backoff_ms=1))
    inst = await instance_at(db_path, agent, model)
    s = await inst.session()
    asked = await s.submit([user("u1", "go")])
    assert (await settle(s, asked.operation_id)).reason == "awaiting_approval"
    approved = await s.answer(Answer("approval", "call_fetch_1", approved=True))
    await asyncio.wait_for(first_run.wait(), 5)
    await crash(inst)

    again = await instance_at(db_path, agent, model)
    try:
        s2 = await again.session()
        assert (await settle(s2, approved.operation_id)).text == "got run 2"
        assert runs == [1, 2], "run again once, not once as approved and once as cut short"
    finally:
        await again.close()
