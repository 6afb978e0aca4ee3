"""OpenTelemetry spans of the harness, read back with the SDK's in-memory exporter."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from think_server.harness import Agent, Harness, ScriptedModel, configure_tracing, tool
from think_server.protocol import ToolPart

from ._doubles import GUARD, settle, user
from ._instances import instance_at
from .turn.test_recovery import crash

_EXPORTER = InMemorySpanExporter()


class _WhileTesting(SimpleSpanProcessor):
    """Keeps spans only while a test here asks for them: the provider stays for the process."""

    on = False

    def on_end(self, span: ReadableSpan) -> None:
        if self.on:
            super().on_end(span)


_PROCESSOR = _WhileTesting(_EXPORTER)


@pytest.fixture
def spans() -> Iterator[InMemorySpanExporter]:
    # One provider per process (the API refuses a second): the first test that needs it sets it.
    if not isinstance(trace.get_tracer_provider(), TracerProvider):
        provider = TracerProvider()
        provider.add_span_processor(_PROCESSOR)
        trace.set_tracer_provider(provider)
    _EXPORTER.clear()
    _PROCESSOR.on = True
    try:
        yield _EXPORTER
    finally:
        _PROCESSOR.on = False
        _EXPORTER.clear()
        configure_tracing(content=False)


def named(exporter: InMemorySpanExporter, name: str) -> list[ReadableSpan]:
    return [s for s in exporter.get_finished_spans() if s.name == name]


@tool
def weather(city: str) -> dict[str, Any]:
    """Today's weather.

    Args:
        city: The city.
    """
    return {"city": city, "sky": "clear"}


@tool(needs_approval=True)
def pay(amount: int) -> str:
    """Pay someone.

    Args:
        amount: How much.
    """
    return f"paid {amount}"


MODEL = ScriptedModel({"rules": [
    {"match": "weather", "steps": [[{"tool_call": {"name": "weather", "input": {"city": "Paris"}}}],
                                   [{"text": ["It is {result.sky}."]}]]},
    {"match": "pay", "steps": [[{"tool_call": {"name": "pay", "input": {"amount": 5}}}], [{"text": ["Done."]}]]},
    {"match": "*", "steps": [[{"text": ["You said: {user}"]}]]},
]})


def harness(tmp_path: Path) -> Harness:
    return Harness({"assistant": Agent(tools=[weather, pay])}, data_dir=tmp_path, model=MODEL)


async def test_a_turn_is_a_span_with_its_model_and_tool_calls_and_no_content(
        tmp_path: Path, spans: InMemorySpanExporter) -> None:
    async with harness(tmp_path) as h:
        s = h.session("assistant", "order-7")
        result = await s.prompt("what is the weather")
    (turn,) = named(spans, "think.turn")
    assert turn.attributes is not None and turn.parent is None
    assert {k: turn.attributes.get(k) for k in ("think.agent", "think.instance", "think.session",
                                                "think.operation", "think.status", "think.outcome")} == {
        "think.agent": "assistant", "think.instance": "order-7", "think.session": "",
        "think.operation": result.operation_id, "think.status": "completed", "think.outcome": "done"}
    calls = named(spans, "think.model_call")
    assert [c.attributes.get("think.step") for c in calls if c.attributes] == [0, 1]
    assert all(c.attributes and c.attributes["gen_ai.request.model"] == "ScriptedModel" for c in calls)
    (used,) = named(spans, "think.tool_call")
    assert used.attributes is not None
    assert (used.attributes["gen_ai.tool.name"], used.attributes["think.tool.result"]) == ("weather", "succeeded")
    for child in [*calls, used]:
        assert child.parent is not None and child.parent.span_id == turn.context.span_id
        assert child.context.trace_id == turn.context.trace_id
        assert child.attributes and child.attributes["think.operation"] == result.operation_id
    everything = [v for sp in spans.get_finished_spans() for v in (sp.attributes or {}).values()]
    assert not [v for v in everything if isinstance(v, str) and ("what is" in v or "clear" in v)], \
        "no message content without the setting"
    assert not [sp for sp in spans.get_finished_spans() if sp.attributes and (
        "think.prompt" in sp.attributes or "think.answer" in sp.attributes or "think.tool.output" in sp.attributes)]


async def test_content_only_when_allowed(tmp_path: Path, spans: InMemorySpanExporter) -> None:
    configure_tracing(content=True)
    async with harness(tmp_path) as h:
        await h.session("assistant", "c").prompt("what is the weather")
    (turn,) = named(spans, "think.turn")
    assert turn.attributes and turn.attributes["think.answer"] == "It is clear."
    assert [c.attributes and c.attributes["think.prompt"] for c in named(spans, "think.model_call")] == [
        "what is the weather", "what is the weather"]
    (used,) = named(spans, "think.tool_call")
    assert used.attributes and used.attributes["think.tool.output"] == '{"city":"Paris","sky":"clear"}'


async def test_an_incoming_trace_context_is_continued(tmp_path: Path, spans: InMemorySpanExporter) -> None:
    parent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
    async with harness(tmp_path) as h:
        s = h.session("assistant", "traced")
        receipt = await s.submit("hi", trace={"traceparent": parent})
        await s.wait(receipt.operation_id, GUARD)
    (turn,) = named(spans, "think.turn")
    assert f"{turn.context.trace_id:032x}" == "4bf92f3577b34da6a3ce929d0e0e4736"
    assert turn.parent is not None and f"{turn.parent.span_id:016x}" == "00f067aa0ba902b7"


async def test_an_approval_wait_is_a_span_from_the_ask_to_the_answer(
        tmp_path: Path, spans: InMemorySpanExporter) -> None:
    async with harness(tmp_path) as h:
        s = h.session("assistant", "pay")
        asked = await s.prompt("pay bob")
        assert asked.reason == "awaiting_approval"
        await asyncio.sleep(0.05)
        call = next(p for p in (await s.messages())[-1].parts if isinstance(p, ToolPart))
        done = await s.wait((await s.approve(call.toolCallId)).operation_id)
        assert done.text == "Done."
    (wait,) = named(spans, "think.approval_wait")
    assert wait.attributes and (wait.attributes["gen_ai.tool.call.id"], wait.attributes["think.approved"]) == (
        call.toolCallId, True)
    first_turn = named(spans, "think.turn")[0]
    assert wait.start_time is not None and wait.end_time is not None and first_turn.end_time is not None
    assert wait.end_time - wait.start_time >= 40_000_000, "it spans the wait, not the answer's moment"
    assert abs(wait.start_time - first_turn.end_time) < 50_000_000


async def test_a_recovery_is_a_span(tmp_path: Path, spans: InMemorySpanExporter) -> None:
    started = asyncio.Event()

    async def hang() -> str:
        started.set()
        await asyncio.Event().wait()
        return "never"

    from think_server.harness import RecoveryPolicy, Tool

    agent = Agent(tools=[Tool("hang", execute=hang, recovery="rerun")], recovery=RecoveryPolicy(backoff_ms=1))
    model = ScriptedModel({"rules": [{"match": "*", "steps": [[{"tool_call": {"name": "hang", "input": {}}}],
                                                              [{"text": ["ok"]}]]}]})
    inst = await instance_at(tmp_path / "r.sqlite3", agent, model)
    s = await inst.session()
    op = (await s.submit([user("u1", "go")])).operation_id
    await asyncio.wait_for(started.wait(), GUARD)
    await crash(inst)
    spans.clear()
    again = await instance_at(tmp_path / "r.sqlite3", agent, model)
    try:
        s2 = await again.session()
        await asyncio.sleep(0.05)
        (recovery,) = named(spans, "think.recovery")
        assert recovery.attributes and (recovery.attributes["think.operation"], recovery.attributes[
            "think.recovery.attempt"], recovery.attributes["think.recovery.rerun"]) == (op, 1, 1)
        await s2.abort(op)
        await settle(s2, op)
    finally:
        await again.close()


def test_without_an_sdk_a_span_costs_no_context_and_exceptions_pass_through(monkeypatch: pytest.MonkeyPatch) -> None:
    """No SDK set up (the API's proxy provider): ``span`` yields the API's invalid span, attaches no
    context and builds no attributes; what is raised inside is raised on. An SDK set up later is used
    from then on (the tests above set one up after this module imported the tracer)."""
    from think_server.harness._tracing import span

    monkeypatch.setattr(trace, "get_tracer_provider", lambda: trace.ProxyTracerProvider())
    before = trace.get_current_span()
    with span("think.turn", {"think.step": 0}) as current:
        assert current is trace.INVALID_SPAN and not current.is_recording()
        assert trace.get_current_span() is before
        current.set_attribute("think.status", "completed")  # the callers' calls do nothing
    with pytest.raises(KeyError), span("think.model_call"):
        raise KeyError("the model call failed")
