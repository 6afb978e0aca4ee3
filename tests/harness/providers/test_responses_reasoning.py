"""The Responses API with reasoning models: encrypted reasoning kept and sent back between tool steps.

Called with ``store: false``, the API forgets a reasoning item once it has
answered; between the steps of a tool-using answer the model needs it back, so
the provider asks for it encrypted and returns it as a ``reasoning`` input item
before the step's function calls.
"""

from __future__ import annotations

from typing import Any

from think_server.harness import Agent, Tool
from think_server.harness._model import (
    Finish,
    ModelRequest,
    ReasoningDelta,
    ReasoningEnd,
    ReasoningStart,
    ToolCall,
    ToolInputDelta,
    ToolInputStart,
    Usage,
)
from think_server.protocol import UIMessage

from .._doubles import settle, user
from .openai_support import WEATHER_TOOL, collect, hi, sse, text_events
from .openai_wire import WireServer

ITEM = "rs_68b0a1"
SECRET = "gAAAAABosEnc-Q29udGludWUgd2l0aCB0aGUgd2VhdGhlcg=="


async def test_a_reasoning_item_streams_with_its_id_and_ends_with_its_encrypted_content(responses: Any) -> None:
    async with WireServer(sse("responses-reasoning-call")) as server:
        events, error = await collect(responses(server, "gpt-5-mini"), hi(tools=[WEATHER_TOOL]))
    assert error is None
    item = {"openai": {"itemId": ITEM}}
    done = {"openai": {"itemId": ITEM, "reasoningEncryptedContent": SECRET}}
    assert events == [
        ReasoningStart("r-0", item), ReasoningDelta("r-0", "**Planning the lookup**"), ReasoningEnd("r-0", item),
        ReasoningStart("r-1", item), ReasoningDelta("r-1", "**Calling getWeather**"), ReasoningEnd("r-1", done),
        ToolInputStart("call_r1", "getWeather"),
        ToolInputDelta("call_r1", '{"city":"Paris"}'),
        ToolCall("call_r1", "getWeather", {"city": "Paris"}),
        Finish("tool-calls", Usage(120, 64)),
    ]
    body = server.requests[0].json()
    assert (body["store"], body["include"]) == (False, ["reasoning.encrypted_content"])


async def test_reasoning_without_a_summary_is_kept_as_a_part_without_text(responses: Any) -> None:
    async with WireServer(sse("responses-reasoning-silent")) as server:
        events, error = await collect(responses(server, "o4-mini"), hi())
    assert error is None
    done = {"openai": {"itemId": "rs_68c0a1", "reasoningEncryptedContent": "gAAAAABosSilent-bm8gc3VtbWFyeQ=="}}
    assert events == [ReasoningStart("r-0", done), ReasoningEnd("r-0", done), *text_events("t-0", "42."),
                      Finish("stop", Usage(15, 210))]


def reasoning(text: str, item_id: str, encrypted: str | None = None) -> dict[str, Any]:
    meta: dict[str, Any] = {"itemId": item_id}
    if encrypted is not None:
        meta["reasoningEncryptedContent"] = encrypted
    return {"type": "reasoning", "text": text, "state": "done", "providerMetadata": {"openai": meta}}


async def test_reasoning_items_go_back_before_the_steps_function_calls(responses: Any) -> None:
    answer = UIMessage.model_validate({"id": "a1", "role": "assistant", "parts": [
        {"type": "step-start"},
        reasoning("**Planning**", "rs_1"),
        reasoning("**Calling**", "rs_1", "enc-1"),
        {"type": "reasoning", "text": "Another provider's thought.", "state": "done"},
        {"type": "tool-getWeather", "toolCallId": "call_1", "state": "output-available",
         "input": {"city": "Paris"}, "output": "sunny"},
        {"type": "step-start"},
        reasoning("", "rs_2", "enc-2"),
        {"type": "text", "text": "Sunny.", "state": "done"},
        {"type": "step-start"},
        reasoning("Not stored", "rs_3"),  # without encrypted content the stateless API cannot take it
        {"type": "text", "text": "Anything else?", "state": "done"},
        {"type": "step-start"},
        reasoning("", "rs_4", "enc-4"),  # nothing follows it yet (being continued): the API would refuse it
    ]})
    async with WireServer(sse("responses-text")) as server:
        _, error = await collect(responses(server, "gpt-5-mini"),
                                 ModelRequest(messages=[user("u1", "Weather?"), answer]))
    assert error is None
    assert server.requests[0].json()["input"][1:-1] == [
        {"type": "reasoning", "id": "rs_1", "encrypted_content": "enc-1",
         "summary": [{"type": "summary_text", "text": "**Planning**"},
                     {"type": "summary_text", "text": "**Calling**"}]},
        {"type": "function_call", "call_id": "call_1", "name": "getWeather", "arguments": '{"city":"Paris"}'},
        {"type": "function_call_output", "call_id": "call_1", "output": "sunny"},
        {"type": "reasoning", "id": "rs_2", "encrypted_content": "enc-2", "summary": []},
        {"role": "assistant", "content": [{"type": "output_text", "text": "Sunny."}]},
        {"role": "assistant", "content": [{"type": "output_text", "text": "Anything else?"}]},
    ]


async def test_an_agent_on_a_reasoning_model_sends_the_reasoning_back_between_tool_steps(
        open_instance: Any, responses: Any) -> None:
    weather = Tool("getWeather", "The weather of a city", WEATHER_TOOL.parameters,
                   execute=lambda city: {"condition": "sunny"})
    async with WireServer(sse("responses-reasoning-call"), sse("responses-text")) as server:
        inst = await open_instance(responses(server, "gpt-5-mini"), Agent(tools=[weather]))
        s = await inst.session()
        receipt = await s.submit([user("u1", "Weather in Paris?")])
        result = await settle(s, receipt.operation_id)

    assert result.outcome == "done"
    second = server.requests[1].json()
    assert second["include"] == ["reasoning.encrypted_content"]
    assert second["input"] == [
        {"role": "user", "content": [{"type": "input_text", "text": "Weather in Paris?"}]},
        {"type": "reasoning", "id": ITEM, "encrypted_content": SECRET,
         "summary": [{"type": "summary_text", "text": "**Planning the lookup**"},
                     {"type": "summary_text", "text": "**Calling getWeather**"}]},
        {"type": "function_call", "call_id": "call_r1", "name": "getWeather", "arguments": '{"city":"Paris"}'},
        {"type": "function_call_output", "call_id": "call_r1", "output": '{"condition":"sunny"}'},
    ]


async def test_a_server_giving_every_event_a_fresh_item_id_still_streams_one_part_per_run(responses: Any) -> None:
    # GitHub Copilot's Responses endpoint does this; the output index is what holds an item together.
    async with WireServer(sse("responses-fresh-item-ids")) as server:
        events, error = await collect(responses(server, "gpt-5-mini"), hi())
    assert error is None
    start = {"openai": {"itemId": "Y29waWxvdC1pdGVt002"}}
    done = {"openai": {"itemId": "Y29waWxvdC1pdGVt005", "reasoningEncryptedContent": "gAAAAABosCopilot-d2VpZ2hpbmc="}}
    assert events == [
        ReasoningStart("r-0", start), ReasoningDelta("r-0", "**Weighing"), ReasoningDelta("r-0", " the question**"),
        ReasoningEnd("r-0", done),
        *text_events("t-0", "Paris", " is", " the", " capital", "."),
        Finish("stop", Usage(31, 22)),
    ]
