"""The turn loop (harness/turn/_turn.py), driven through a real Instance on a real SQLite file.

One operation is one assistant message and one wire stream: ``start``, then per
model call ``start-step`` … ``finish-step`` (tool results as chunks of their
own), then one ``finish``. Server tools of one model call run in parallel; the
message is persisted after each model call; errors and aborts keep the partial.
"""

from __future__ import annotations

import asyncio
import json
import logging
from typing import Any

import pytest

from think_server.harness import (
    Agent,
    ChunksCommitted,
    Finish,
    MessagePersisted,
    ModelError,
    OperationSettled,
    ReasoningDelta,
    ReasoningEnd,
    ReasoningStart,
    RunStarted,
    StreamStarted,
    TextDelta,
    TextEnd,
    TextStart,
    Tool,
)
from think_server.harness.turn._chunklog import MAX_BUFFERED
from think_server.protocol import TextPart, ToolPart, UIMessage, assemble, parse_chunk
from think_server.storage.sqlite._schema import message_content

from .._doubles import GUARD, FakeModel, Pause, Recorder, Recording, call, script, settle, text, user
from .._instances import instance_at
from ..conftest import Peek

# ---------------------------------------------------------------- helpers

LIFECYCLE = {"RunStarted", "StreamStarted", "ChunksCommitted", "MessagePersisted", "OperationSettled", "SessionReset"}


def chunks_of(rec: Recorder) -> list[dict[str, Any]]:
    return [json.loads(b) for e in rec.of(ChunksCommitted) for b in e.bodies]


def types_of(chunks: list[dict[str, Any]]) -> list[str]:
    return [c["type"] for c in chunks]


def dump(msg: UIMessage) -> dict[str, Any]:
    return msg.model_dump(mode="json", exclude_unset=True)


def no_part_streaming(msg: dict[str, Any]) -> bool:
    return all(p.get("state") not in ("streaming", "input-streaming") for p in msg["parts"])


async def start(
    open_instance: Any, model: Any, agent: Agent | None = None, **submit: Any
) -> tuple[Any, Any, Recorder, str]:
    """Open the instance, subscribe a recorder, submit "hi"; (instance, session, recorder, operation id)."""
    inst = await open_instance(model, agent)
    s = await inst.session()
    rec = Recorder()
    s.subscribe(rec)
    receipt = await s.submit([user("u1", "hi")], **submit)
    return inst, s, rec, receipt.operation_id


WEATHER = script({
    "match": "*",
    "steps": [
        [{"tool_call": {"name": "getWeather", "input": {"city": "Paris"}}}],
        [{"text": ["It is {result.condition} ", "in {result.city}."]}],
    ],
})


def weather_tool(**kw: Any) -> Tool:
    return Tool("getWeather", "The weather of a city", execute=lambda city: {"condition": "sunny", "city": city}, **kw)


# ---------------------------------------------------------------- one model call


async def test_one_model_call_streams_the_ai_sdk_sequence_and_events_in_order(open_instance: Any) -> None:
    inst, s, rec, op = await start(open_instance, script({"match": "*", "steps": [[{"text": ["Hel", "lo", "!"]}]]}))
    assert await settle(s, op) == type(await settle(s, op))("completed", "done", "Hello!")

    # The engine's lifecycle events (observability events such as ModelCallFinished aside).
    kinds = [k for k in rec.kinds() if k in LIFECYCLE]
    assert kinds[:2] == ["RunStarted", "StreamStarted"]
    assert kinds[-2:] == ["MessagePersisted", "OperationSettled"]
    assert set(kinds[2:-2]) == {"ChunksCommitted"}
    run = rec.of(RunStarted)[0]
    assert (run.operation_id, run.continuation) == (op, False)
    assert rec.of(StreamStarted) == [StreamStarted(op)]

    batches = rec.of(ChunksCommitted)
    assert all(b.operation_id == op for b in batches)
    seqs = [b.first_seq + k for b in batches for k in range(len(b.bodies))]
    assert seqs == list(range(len(seqs)))
    assert chunks_of(rec) == [
        {"type": "start", "messageId": run.message_id},
        {"type": "start-step"},
        {"type": "text-start", "id": "t-0"},
        {"type": "text-delta", "id": "t-0", "delta": "Hel"},
        {"type": "text-delta", "id": "t-0", "delta": "lo"},
        {"type": "text-delta", "id": "t-0", "delta": "!"},
        {"type": "text-end", "id": "t-0"},
        {"type": "finish-step"},
        {"type": "finish", "finishReason": "stop"},
    ]

    persisted = rec.of(MessagePersisted)[-1].message
    assert persisted.id == run.message_id
    assert dump(persisted) == {
        "id": run.message_id, "role": "assistant",
        "parts": [{"type": "step-start"}, {"type": "text", "text": "Hello!", "state": "done"}],
    }
    assert rec.of(OperationSettled) == [OperationSettled(op, "completed", "done", None, ("u1",))]
    row = await inst.db.read.operation(op)
    # No second copy of the answer: the row holds its length, its message the text.
    assert (row.status, row.outcome, row.result_text, row.result_length, row.target_message_id) == (
        "completed", "done", None, len("Hello!"), run.message_id)


async def test_every_event_describes_state_already_committed(open_instance: Any, peek: Any) -> None:
    """Group commit: at the moment a listener runs, another connection already reads what it is told."""
    model = Recording(WEATHER)
    inst = await open_instance(model, Agent(tools=[weather_tool()]))
    s = await inst.session()
    problems: list[str] = []
    checked: list[str] = []

    def check(event: Any) -> None:
        if isinstance(event, ChunksCommitted):
            stored = peek.operation_chunks(event.operation_id)[event.first_seq:event.first_seq + len(event.bodies)]
            if stored != [json.loads(b) for b in event.bodies]:
                problems.append(f"chunks {event.first_seq}.. announced before commit")
        elif isinstance(event, MessagePersisted):
            stored = peek.message(s.id, event.message.id)
            if stored != dump(event.message):
                problems.append(f"message {event.message.id} announced as {dump(event.message)}, stored {stored}")
        elif isinstance(event, OperationSettled):
            if peek.operation_status(event.operation_id) != event.status:
                problems.append(f"operation {event.operation_id} announced {event.status} before commit")
        elif isinstance(event, StreamStarted):
            if not peek.operation_chunks(event.operation_id):
                problems.append("stream announced before its first chunk was committed")
        checked.append(type(event).__name__)

    s.subscribe(check)
    receipt = await s.submit([user("u1", "weather?")])
    assert (await settle(s, receipt.operation_id)).text == "It is sunny in Paris."
    assert problems == []
    assert {"StreamStarted", "ChunksCommitted", "MessagePersisted", "OperationSettled"} <= set(checked)


async def test_finish_reason_and_reasoning_parts_come_from_the_model(open_instance: Any) -> None:
    model = FakeModel([ReasoningStart("r"), ReasoningDelta("r", "think"), ReasoningEnd("r"),
                       *text("t", "cut"), Finish("length")])
    _inst, s, rec, op = await start(open_instance, model)
    assert (await settle(s, op)).text == "cut"
    chunks = chunks_of(rec)
    assert chunks[-1] == {"type": "finish", "finishReason": "length"}
    assert types_of(chunks)[2:5] == ["reasoning-start", "reasoning-delta", "reasoning-end"]
    assert [p["type"] for p in dump((await s.transcript())[-1])["parts"]] == ["step-start", "reasoning", "text"]


async def test_the_model_gets_the_system_prompt_tools_and_transcript(open_instance: Any) -> None:
    model = FakeModel(text("t", "ok"))
    agent = Agent(system="Be brief.", tools=[weather_tool(), Tool("getLocation", "Where the user is")])
    _inst, s, _rec, op = await start(open_instance, model, agent)
    await settle(s, op)
    (request,) = model.requests
    assert request.system == "Be brief."
    assert [(t.name, t.description) for t in request.tools] == [
        ("getWeather", "The weather of a city"), ("getLocation", "Where the user is")]
    assert model.seen[0] == [dump(user("u1", "hi"))]


async def test_a_fast_model_is_committed_in_few_bounded_batches(open_instance: Any, peek: Any) -> None:
    n = 3000
    model = FakeModel([TextStart("t"), *(TextDelta("t", f"{i} ") for i in range(n)), TextEnd("t")])
    _inst, s, rec, op = await start(open_instance, model)
    result = await settle(s, op)
    assert result.text == "".join(f"{i} " for i in range(n))

    batches = rec.of(ChunksCommitted)
    total = n + 6  # start, start-step, text-start, …deltas…, text-end, finish-step, finish
    seqs = [b.first_seq + k for b in batches for k in range(len(b.bodies))]
    assert seqs == list(range(total))
    assert max(len(b.bodies) for b in batches) <= MAX_BUFFERED
    # Full batches, and a few small ones where the stream starts and ends (a commit that takes no
    # time, as on the event loop, leaves nothing to gather behind it there).
    assert len(batches) <= total // MAX_BUFFERED + 4, [len(b.bodies) for b in batches]
    assert peek.operation_chunks(op) == chunks_of(rec)


# ---------------------------------------------------------------- server tools


async def test_a_server_tool_runs_between_two_model_calls_in_one_message(open_instance: Any, peek: Any) -> None:
    model = Recording(WEATHER)
    inst, s, rec, op = await start(open_instance, model, Agent(tools=[weather_tool()]))
    result = await settle(s, op)
    assert (result.outcome, result.text) == ("done", "It is sunny in Paris.")

    u, answer = (await s.transcript())
    assert u.id == "u1"
    assert dump(answer)["parts"] == [
        {"type": "step-start"},
        {"type": "tool-getWeather", "toolCallId": "call_getWeather_1", "toolName": "getWeather",
         "state": "output-available", "input": {"city": "Paris"}, "output": {"condition": "sunny", "city": "Paris"}},
        {"type": "step-start"},
        {"type": "text", "text": "It is sunny in Paris.", "state": "done"},
    ]
    assert peek.message(s.id, answer.id) == dump(answer)
    assert len([m for m in await inst.db.read.active_path(s.id)]) == 2  # one assistant message, not two

    assert types_of(chunks_of(rec)) == [
        "start", "start-step", "tool-input-start", "tool-input-delta", "tool-input-available", "finish-step",
        "tool-output-available",
        "start-step", "text-start", "text-delta", "text-delta", "text-end", "finish-step", "finish",
    ]
    assert types_of(chunks_of(rec)).count("start") == 1

    # The second model call continues the same message and sees the tool's output.
    assert len(model.requests) == 2
    last = model.seen[1][-1]
    assert last["id"] == answer.id and last["role"] == "assistant"
    assert last["parts"][1]["state"] == "output-available"

    # One stream per model call, numbered on from one to the next, both finished.
    streams = await inst.db.read.streams_of_request(op)
    assert [(st.first_seq, st.is_continuation, st.status) for st in streams] == [
        (0, False, "completed"), (7, True, "completed")]
    assert [st.message_id for st in streams] == [answer.id, answer.id]
    stored = [json.loads(b) for st in streams for b in await inst.db.read.chunk_bodies(st.id)]
    assert stored == chunks_of(rec)


async def test_a_tool_that_raises_becomes_output_error_and_the_model_goes_on(open_instance: Any) -> None:
    def broken(city: str) -> Any:
        raise ValueError(f"no weather for {city}")

    model = Recording(script({"match": "*", "steps": [
        [{"tool_call": {"name": "getWeather", "input": {"city": "Atlantis"}}}],
        [{"text": ["Sorry: {result}"]}],
    ]}))
    inst, s, rec, op = await start(open_instance, model, Agent(tools=[Tool("getWeather", execute=broken)]))
    result = await settle(s, op)
    assert (result.outcome, result.text) == ("done", "Sorry: no weather for Atlantis")
    part = (await s.transcript())[-1].parts[1]
    assert isinstance(part, ToolPart)
    assert (part.state, part.errorText) == ("output-error", "no weather for Atlantis")
    assert {"type": "tool-output-error", "toolCallId": part.toolCallId, "errorText": "no weather for Atlantis"} \
        in chunks_of(rec)
    assert len(model.requests) == 2
    assert (await inst.db.read.operation(op)).status == "completed"


async def test_a_tool_output_that_is_not_json_becomes_output_error(open_instance: Any) -> None:
    model = FakeModel([*call("c1", "weird"), Finish("tool-calls")], text("t", "ok"))
    tool = Tool("weird", execute=lambda: {1, 2})
    _inst, s, _rec, op = await start(open_instance, model, Agent(tools=[tool]))
    assert (await settle(s, op)).text == "ok"
    part = (await s.transcript())[-1].parts[1]
    assert isinstance(part, ToolPart) and part.state == "output-error"
    assert "JSON serializable" in (part.errorText or "")


async def test_async_tools_of_one_model_call_run_concurrently(open_instance: Any) -> None:
    a_started, b_started = asyncio.Event(), asyncio.Event()
    finished: list[str] = []

    async def tool_a() -> str:
        a_started.set()
        await b_started.wait()  # only returns if b started while a is still running
        finished.append("a")
        return "A"

    async def tool_b() -> str:
        b_started.set()
        await a_started.wait()
        finished.append("b")
        return "B"

    model = FakeModel([*call("ca", "a"), *call("cb", "b"), Finish("tool-calls")], text("t", "both"))
    agent = Agent(tools=[Tool("a", execute=tool_a), Tool("b", execute=tool_b)])
    _inst, s, _rec, op = await start(open_instance, model, agent)
    assert (await settle(s, op)).text == "both"
    assert sorted(finished) == ["a", "b"]
    parts = [p for p in (await s.transcript())[-1].parts if isinstance(p, ToolPart)]
    assert [(p.toolCallId, p.state, p.output) for p in parts] == [
        ("ca", "output-available", "A"), ("cb", "output-available", "B")]
    # The next model call started only once both had settled.
    assert len(model.requests) == 2
    assert [p["state"] for p in model.seen[1][-1]["parts"] if p["type"].startswith("tool-")] == [
        "output-available", "output-available"]


async def test_a_tool_result_commits_with_its_own_record_and_no_other(open_instance: Any, peek: Any) -> None:
    """Two tools finish together: each result's chunk, the message and that call's record form one state change."""
    both = asyncio.Event()
    done: list[str] = []

    async def finish_together(name: str) -> str:
        done.append(name)
        if len(done) == 2:
            both.set()
        await both.wait()
        return name.upper()

    model = FakeModel([*call("ca", "a"), *call("cb", "b"), Finish("tool-calls")], text("t", "both"))
    agent = Agent(tools=[Tool("a", execute=lambda: finish_together("a")),
                         Tool("b", execute=lambda: finish_together("b"))])
    inst = await open_instance(model, agent)
    s = await inst.session()
    problems: list[str] = []

    def check(event: Any) -> None:
        if not isinstance(event, ChunksCommitted):
            return
        for body in event.bodies:
            chunk = json.loads(body)
            if chunk["type"] == "tool-output-available":
                state = peek._all("SELECT state FROM tool_calls WHERE tool_call_id = ?", chunk["toolCallId"])
                if state != [("succeeded",)]:
                    problems.append(f"the result of {chunk['toolCallId']} committed while its record says {state}")
        for call_id, state in peek._all("SELECT tool_call_id, state FROM tool_calls"):
            message = peek.message(s.id, s.messages()[-1].id) or {"parts": []}
            parts = [p for p in message["parts"] if p.get("toolCallId") == call_id]
            if state == "succeeded" and (not parts or parts[0]["state"] != "output-available"):
                problems.append(f"{call_id} recorded succeeded while the stored message has {parts}")

    s.subscribe(check)
    op = (await s.submit([user("u1", "hi")])).operation_id
    assert (await settle(s, op)).text == "both"
    assert problems == []
    kinds = [c["type"] for c in peek.operation_chunks(op)]
    assert kinds.count("tool-output-available") == 2


@pytest.mark.parametrize("how", ["abort", "shutdown"])
@pytest.mark.parametrize("delay", range(10))
async def test_a_stop_as_tool_results_commit_never_parts_a_result_from_its_record(tmp_path: Any, delay: int,
                                                                                  how: str) -> None:
    """Two tools finish together; an abort, or a shutdown, lands ``delay`` turns of the loop after the first result."""
    both = asyncio.Event()
    done: list[str] = []

    async def finish_together(name: str) -> str:
        done.append(name)
        if len(done) == 2:
            both.set()
        await both.wait()
        return name.upper()

    model = FakeModel([*call("ca", "a"), *call("cb", "b"), Finish("tool-calls")], text("t", "both"))
    agent = Agent(tools=[Tool("a", execute=lambda: finish_together("a")),
                         Tool("b", execute=lambda: finish_together("b"))])
    inst = await instance_at(tmp_path / "x.sqlite3", agent, model)
    peek = Peek(tmp_path / "x.sqlite3")
    try:
        s = await inst.session()
        stops: list[asyncio.Task[Any]] = []
        stopping = asyncio.Event()

        async def stop_later() -> None:
            stopping.set()
            for _ in range(delay):
                await asyncio.sleep(0)
            await (s.abort() if how == "abort" else inst.close())

        apart: list[str] = []

        def on_result(event: Any) -> None:
            if not isinstance(event, ChunksCommitted):
                return
            for chunk in map(json.loads, event.bodies):
                if chunk["type"] == "tool-output-available":
                    # A crash right now must find the call recorded with its result: same transaction.
                    state = peek._all("SELECT state FROM tool_calls WHERE tool_call_id = ?", chunk["toolCallId"])
                    if state != [("succeeded",)]:
                        apart.append(f"{chunk['toolCallId']} committed at seq {event.first_seq}, recorded {state}")
                    if not stops:
                        stops.append(asyncio.get_running_loop().create_task(stop_later()))

        s.subscribe(on_result)
        op = (await s.submit([user("u1", "hi")])).operation_id
        if how == "abort":
            await settle(s, op)
        else:
            await asyncio.wait_for(stopping.wait(), GUARD)
        await asyncio.wait_for(asyncio.gather(*stops), GUARD)
        assert apart == []
        chunks = peek.operation_chunks(op)
        records = dict(peek._all("SELECT tool_call_id, state FROM tool_calls"))
        outputs = {c["toolCallId"] for c in chunks if c["type"] == "tool-output-available"}
        assert {k for k, v in records.items() if v == "succeeded"} == outputs, (records, outputs)
        if how == "abort":
            message = peek.message(s.id, (await s.transcript())[-1].id)
            assert dump(assemble([parse_chunk(c) for c in chunks], (await s.transcript())[-1].id)) == message
    finally:
        peek.close()
        await inst.close()


async def test_a_call_to_an_unknown_tool_is_answered_with_an_error(open_instance: Any) -> None:
    model = FakeModel([*call("c1", "nope"), Finish("tool-calls")], text("t", "ok"))
    _inst, s, _rec, op = await start(open_instance, model)
    await settle(s, op)
    part = next(p for p in (await s.transcript())[-1].parts if isinstance(p, ToolPart))
    assert part.state == "output-error"
    assert "nope" in (part.errorText or "")


async def test_max_steps_bounds_the_model_calls_of_one_operation(open_instance: Any) -> None:
    ran: list[int] = []
    model = Recording(script({"match": "*", "steps": [[{"text": ["step "]}, {"tool_call": {"name": "again"}}]]}))
    agent = Agent(tools=[Tool("again", execute=lambda: ran.append(1) or len(ran))], max_steps=3)
    inst, s, rec, op = await start(open_instance, model, agent)
    result = await settle(s, op)
    assert len(model.requests) == 3
    assert (result.outcome, result.text) == ("done", "step step step ")
    chunks = types_of(chunks_of(rec))
    assert chunks.count("start-step") == 3 and chunks.count("finish") == 1 and chunks[-1] == "finish"
    assert len(await inst.db.read.streams_of_request(op)) == 3


# ---------------------------------------------------------------- client tools and approvals


async def test_a_client_tool_call_settles_the_operation_awaiting_the_client(open_instance: Any) -> None:
    model = FakeModel([*call("c1", "getLocation"), Finish("tool-calls")], text("t", "never"))
    inst, s, rec, op = await start(open_instance, model, Agent(tools=[Tool("getLocation")]))
    result = await settle(s, op)
    assert (result.outcome, result.reason) == ("unanswered", "awaiting_client_tool")
    assert len(model.requests) == 1
    part = (await s.transcript())[-1].parts[1]
    assert isinstance(part, ToolPart) and (part.toolCallId, part.state) == ("c1", "input-available")
    row = await inst.db.read.operation(op)
    assert (row.status, row.outcome, row.reason) == ("completed", "unanswered", "awaiting_client_tool")
    assert rec.of(OperationSettled)[-1].reason == "awaiting_client_tool"
    assert types_of(chunks_of(rec))[-2:] == ["finish-step", "finish"]


async def test_client_tools_sent_with_a_submission_are_offered_and_settle_awaiting_the_client(
    open_instance: Any,
) -> None:
    model = FakeModel([*call("c1", "getLocation"), Finish("tool-calls")])
    schema = {"type": "object", "properties": {"precise": {"type": "boolean"}}}
    _inst, s, _rec, op = await start(open_instance, model, client_tools=[
        {"name": "getLocation", "description": "Ask the browser", "parameters": schema}])
    result = await settle(s, op)
    assert (result.outcome, result.reason) == ("unanswered", "awaiting_client_tool")
    assert [(t.name, t.description, t.parameters) for t in model.requests[0].tools] == [
        ("getLocation", "Ask the browser", schema)]


async def test_a_client_tool_never_replaces_a_server_tool(open_instance: Any) -> None:
    model = Recording(WEATHER)
    _inst, s, _rec, op = await start(open_instance, model, Agent(tools=[weather_tool()]),
                                   client_tools=[{"name": "getWeather", "description": "client's own"}])
    result = await settle(s, op)
    assert (result.outcome, result.text) == ("done", "It is sunny in Paris.")
    assert [t.description for t in model.requests[0].tools] == ["The weather of a city"]


async def test_a_call_needing_approval_settles_awaiting_approval_without_running(open_instance: Any) -> None:
    ran: list[Any] = []
    tool = Tool("transfer", execute=lambda amount: ran.append(amount), needs_approval=True)
    model = FakeModel([*call("c1", "transfer", {"amount": 100}), Finish("tool-calls")], text("t", "never"))
    inst, s, rec, op = await start(open_instance, model, Agent(tools=[tool]))
    result = await settle(s, op)
    assert (result.outcome, result.reason) == ("unanswered", "awaiting_approval")
    assert ran == []
    assert len(model.requests) == 1
    request = [c for c in chunks_of(rec) if c["type"] == "tool-approval-request"]
    assert len(request) == 1 and request[0]["toolCallId"] == "c1" and request[0]["approvalId"]
    part = (await s.transcript())[-1].parts[1]
    assert isinstance(part, ToolPart) and part.state == "approval-requested"
    assert part.approval is not None and part.approval.id == request[0]["approvalId"]
    row = await inst.db.read.operation(op)
    assert (row.status, row.outcome, row.reason) == ("completed", "unanswered", "awaiting_approval")


async def test_needs_approval_may_decide_per_input(open_instance: Any) -> None:
    ran: list[int] = []
    tool = Tool("transfer", execute=lambda amount: ran.append(amount) or "sent",
                needs_approval=lambda tool_input: tool_input["amount"] > 50)
    model = FakeModel([*call("c1", "transfer", {"amount": 10}), Finish("tool-calls")], text("t", "sent it"))
    _inst, s, rec, op = await start(open_instance, model, Agent(tools=[tool]))
    assert (await settle(s, op)).text == "sent it"
    assert ran == [10]
    assert "tool-approval-request" not in types_of(chunks_of(rec))


# ---------------------------------------------------------------- model errors


async def test_a_model_error_settles_error_and_keeps_the_partial(open_instance: Any, peek: Any) -> None:
    model = FakeModel([TextStart("t"), TextDelta("t", "Partial "), TextDelta("t", "ans"),
                       ModelError("Model exploded mid-stream")])
    inst, s, rec, op = await start(open_instance, model)
    result = await settle(s, op)
    assert (result.outcome, result.reason) == ("unanswered", "Model exploded mid-stream")

    row = await inst.db.read.operation(op)
    assert (row.status, row.outcome, row.reason) == ("error", "unanswered", "Model exploded mid-stream")
    answer = (await s.transcript())[-1]
    assert answer.role == "assistant"
    stored = peek.message(s.id, answer.id)
    assert stored == dump(answer)
    assert stored["parts"] == [{"type": "step-start"}, {"type": "text", "text": "Partial ans", "state": "done"}]
    assert no_part_streaming(stored)
    (stream,) = await inst.db.read.streams_of_request(op)
    assert stream.status == "error"
    session_row = await inst.db.read.session(s.id)
    assert json.loads(session_row.last_terminal_json) == {"operationId": op, "body": "Model exploded mid-stream"}
    assert rec.of(OperationSettled)[-1].status == "error"


async def test_a_model_error_in_a_later_step_keeps_the_tool_results(open_instance: Any) -> None:
    model = FakeModel([*call("c1", "getWeather", {"city": "Oslo"}), Finish("tool-calls")],
                      [ReasoningStart("r"), ReasoningDelta("r", "hm"), ModelError("rate limited")])
    inst, s, _rec, op = await start(open_instance, model, Agent(tools=[weather_tool()]))
    result = await settle(s, op)
    assert result.reason == "rate limited"
    stored = dump((await s.transcript())[-1])
    assert [p["type"] for p in stored["parts"]] == ["step-start", "tool-getWeather", "step-start", "reasoning"]
    assert stored["parts"][1]["state"] == "output-available"
    assert no_part_streaming(stored)
    streams = await inst.db.read.streams_of_request(op)
    assert [st.status for st in streams] == ["completed", "error"]


async def test_an_unexpected_model_failure_settles_error_without_leaking_it(open_instance: Any) -> None:
    model = FakeModel([*text("t", "so far"), RuntimeError("api key sk-secret rejected")])
    inst, s, _rec, op = await start(open_instance, model)
    result = await settle(s, op)
    assert result.outcome == "unanswered"
    assert result.reason is not None and "sk-secret" not in result.reason
    row = await inst.db.read.operation(op)
    assert row.status == "error"
    assert s.idle
    # The session goes on with the next operation.
    receipt = await s.submit([user("u2", "again")])
    await settle(s, receipt.operation_id)
    assert len(model.requests) == 2


# ---------------------------------------------------------------- abort


async def test_abort_of_a_streaming_model_call_keeps_the_partial(open_instance: Any, peek: Any) -> None:
    pause = Pause()
    model = FakeModel([TextStart("t"), TextDelta("t", "partial"), pause, TextDelta("t", " never"), TextEnd("t")])
    inst, s, rec, op = await start(open_instance, model)
    await asyncio.wait_for(pause.reached.wait(), GUARD)
    assert s.running_operation == op
    assert await s.abort(op) is True
    result = await settle(s, op)
    assert (result.outcome, result.reason) == ("unanswered", "aborted")
    assert model.cancelled == 1  # the provider's stream was cancelled, not left running

    row = await inst.db.read.operation(op)
    assert (row.status, row.outcome, row.reason) == ("aborted", "unanswered", "aborted")
    answer = (await s.transcript())[-1]
    stored = peek.message(s.id, answer.id)
    assert stored == dump(answer)
    assert stored["parts"] == [{"type": "step-start"}, {"type": "text", "text": "partial", "state": "done"}]
    (stream,) = await inst.db.read.streams_of_request(op)
    assert stream.status == "completed"  # an abort is not an error
    # The stream closes the cut-off text too: a client assembling it ends with the stored message.
    assert dump(assemble([parse_chunk(c) for c in peek.operation_chunks(op)], answer.id)) == stored
    assert (await inst.db.read.session(s.id)).last_terminal_json is None
    assert rec.of(OperationSettled) == [OperationSettled(op, "aborted", "unanswered", "aborted", ("u1",))]
    assert s.idle


async def test_abort_with_no_id_stops_the_running_operation(open_instance: Any) -> None:
    pause = Pause()
    model = FakeModel([*text("t", "x"), pause])
    _inst, s, _rec, op = await start(open_instance, model)
    await asyncio.wait_for(pause.reached.wait(), GUARD)
    assert await s.abort() is True
    assert (await settle(s, op)).reason == "aborted"


async def test_abort_while_server_tools_run_cancels_them(open_instance: Any) -> None:
    started, cancelled = asyncio.Event(), asyncio.Event()

    async def slow() -> str:
        started.set()
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            cancelled.set()
            raise
        return "never"

    model = FakeModel([*text("t", "Let me check."), *call("c1", "slow"), Finish("tool-calls")], text("t", "never"))
    inst, s, _rec, op = await start(open_instance, model, Agent(tools=[Tool("slow", execute=slow)]))
    await asyncio.wait_for(started.wait(), GUARD)
    assert await s.abort(op) is True
    result = await settle(s, op)
    assert (result.outcome, result.reason) == ("unanswered", "aborted")
    assert cancelled.is_set()
    assert len(model.requests) == 1
    stored = dump((await s.transcript())[-1])
    assert stored["parts"][1] == {"type": "text", "text": "Let me check.", "state": "done"}
    assert (await inst.db.read.operation(op)).status == "aborted"


async def test_abort_before_a_server_call_starts_ends_that_call_too(open_instance: Any, peek: Any) -> None:
    ran: list[str] = []
    model = FakeModel([*call("c1", "ping"), Finish("tool-calls")], text("t", "never"))
    inst = await open_instance(model, Agent(tools=[Tool("ping", execute=lambda: ran.append("ping") or "pong")]))
    s = await inst.session()
    aborts: list[asyncio.Task[bool]] = []

    def abort_once_called(event: Any) -> None:
        # The model call that made the call is committed and the call has not started: abort there.
        if isinstance(event, MessagePersisted) and not aborts and any(
                isinstance(p, ToolPart) and p.state == "input-available" for p in event.message.parts):
            aborts.append(asyncio.get_running_loop().create_task(s.abort()))

    s.subscribe(abort_once_called)
    op = (await s.submit([user("u1", "hi")])).operation_id
    assert (await settle(s, op)).reason == "aborted"
    assert ran == [] and len(model.requests) == 1
    answer = (await s.transcript())[-1]
    stored = peek.message(s.id, answer.id)
    (tool_part,) = [p for p in stored["parts"] if p["type"] == "tool-ping"]
    assert (tool_part["state"], tool_part["errorText"]) == ("output-error", "The tool call was aborted.")
    assert dump(assemble([parse_chunk(c) for c in peek.operation_chunks(op)], answer.id)) == stored


async def test_abort_of_an_unknown_or_settled_operation_is_a_no_op(open_instance: Any) -> None:
    inst, s, _rec, op = await start(open_instance, FakeModel(text("t", "ok")))
    await settle(s, op)
    assert await s.abort(op) is False
    assert await s.abort("no-such-op") is False
    assert (await inst.db.read.operation(op)).status == "completed"


async def test_text_of_a_done_result_is_the_text_parts_only(open_instance: Any) -> None:
    model = FakeModel([ReasoningStart("r"), ReasoningDelta("r", "secret plan"), ReasoningEnd("r"),
                       *text("a", "one "), *text("b", "two")])
    _inst, s, _rec, op = await start(open_instance, model)
    assert (await settle(s, op)).text == "one two"
    parts = [p for p in (await s.transcript())[-1].parts if isinstance(p, TextPart)]
    assert [p.text for p in parts] == ["one ", "two"]


async def test_a_call_the_provider_says_was_cut_off_ends_the_turn_with_its_words(open_instance: Any) -> None:
    """A tool call whose input the token limit cut off: the provider finishes with ``length`` and a
    message; the turn stores what came, ends unanswered with that message, and streams finishReason."""
    note = "The model reached its output token limit while writing the input of tool 'search'."
    model = FakeModel([*text("t", "Let me look"), Finish("length", message=note)])
    inst = await open_instance(model)
    s = await inst.session()
    r = await s.submit([user("u1", "go")])
    result = await settle(s, r.operation_id)
    assert (result.outcome, result.reason) == ("unanswered", note)
    row = await inst.db.read.operation(r.operation_id)
    assert row is not None and row.status == "error"
    bodies = [json.loads(b) for row in await inst.db.read.streams_of_request(r.operation_id)
              for b in await inst.db.read.chunk_bodies(row.id)]
    assert {"type": "finish", "finishReason": "length"} in bodies
    assert [m.role for m in (await s.transcript())] == ["user", "assistant"], "what came is kept"


async def test_a_failed_model_call_is_logged_and_leaves_no_empty_answer(
        open_instance: Any, caplog: pytest.LogCaptureFixture) -> None:
    model = FakeModel([ModelError("upstream said 503")])
    inst = await open_instance(model)
    s = await inst.session()
    with caplog.at_level(logging.WARNING, logger="think_server.turn"):
        r = await s.submit([user("u1", "my secret plans")])
        result = await settle(s, r.operation_id)
    assert (result.outcome, result.reason) == ("unanswered", "upstream said 503")
    (line,) = [rec.getMessage() for rec in caplog.records if "model call failed" in rec.getMessage()]
    assert r.operation_id in line and "upstream said 503" in line and "secret plans" not in line
    assert [m.role for m in (await s.transcript())] == ["user"], "no assistant message without a word in it"


async def test_a_2_mb_tool_output_is_stored_compacted_and_the_model_still_reads_it_whole(open_instance: Any) -> None:
    rows = [{"n": i, "text": "row " * 25} for i in range(20_000)]  # about 2.3 MB of JSON
    model = FakeModel(call("c1", "dump"), text("t", "Read it."))
    inst = await open_instance(model, Agent(tools=[Tool("dump", "All rows", execute=lambda: rows)]))
    s = await inst.session()
    r = await s.submit([user("u1", "dump everything")])
    assert (await settle(s, r.operation_id)).outcome == "done"
    # The step after the call saw the whole output: what a model is shown is not the stored copy.
    [part] = [p for p in model.requests[1].messages[-1].parts if isinstance(p, ToolPart)]
    assert part.output == rows
    assert inst.db.conn is not None
    [(content,)] = await inst.db.conn.execute_fetchall(
        f"SELECT {message_content()} FROM messages WHERE role = 'assistant'")
    assert len(content.encode()) < 20_000
    stored = json.loads(content)
    assert stored["metadata"] == {"compactedToolOutputs": ["c1"]}
    [tool_part] = [p for p in stored["parts"] if p["type"] == "tool-dump"]
    assert tool_part["state"] == "output-available" and tool_part["output"][-1].startswith("... [truncated")
    assert [p["text"] for p in stored["parts"] if p["type"] == "text"] == ["Read it."]
    # The transcript in memory is the stored one: what get-messages and reconnecting clients see.
    [answer] = [m for m in await s.transcript() if m.role == "assistant"]
    assert answer.metadata == {"compactedToolOutputs": ["c1"]}
