"""A tool input cut off by the output token limit: a ``length`` finish with a message, the call not made.

Each provider says it its own way (Chat Completions ``finish_reason: "length"``,
Responses ``response.incomplete`` for ``max_output_tokens``, Anthropic
``stop_reason: "max_tokens"``); before, the half-written input was reported as
invalid JSON and the turn failed with a misleading error.
"""

from __future__ import annotations

from typing import Any

from think_server.harness import Agent, Tool
from think_server.harness._model import Finish, ToolCall, ToolInputDelta, ToolInputStart, Usage
from think_server.harness.providers._options import cut_off_message

from .._doubles import settle, user
from .anthropic_server import block_start, block_stop, message_delta, message_start, message_stop, stream_reply
from .anthropic_support import json_deltas, run
from .openai_support import WEATHER_TOOL, collect, hi, sse
from .openai_wire import WireServer

CUT = cut_off_message(["getWeather"])


async def test_chat_length_in_a_tool_call_makes_the_whole_calls_and_drops_the_cut_one(chat: Any) -> None:
    async with WireServer(sse("chat-length-in-tool-call")) as server:
        events, error = await collect(chat(server), hi(tools=[WEATHER_TOOL], max_output_tokens=24))
    assert error is None
    assert events == [
        ToolInputStart("call_full", "getWeather"),
        ToolInputDelta("call_full", '{"city":"Paris"}'),
        ToolInputStart("call_cut", "getWeather"),
        ToolInputDelta("call_cut", '{"city":"Os'),
        ToolCall("call_full", "getWeather", {"city": "Paris"}),
        Finish("length", Usage(70, 24), CUT),
    ]


async def test_responses_a_call_cut_off_after_its_item_ended_incomplete_is_not_made(responses: Any) -> None:
    # Here the API also closes the arguments and the item (status "incomplete") before response.incomplete.
    async with WireServer(sse("responses-incomplete-call-item-done")) as server:
        events, error = await collect(responses(server), hi(tools=[WEATHER_TOOL], max_output_tokens=6))
    assert error is None
    assert events == [ToolInputStart("call_8", "getWeather"), ToolInputDelta("call_8", '{"city":"Ly'),
                      Finish("length", Usage(10, 6), CUT)]


async def test_anthropic_max_tokens_in_a_tool_use_block_is_a_length_finish_with_a_message() -> None:
    events, _ = await run(stream_reply(
        message_start(400),
        block_start(0, {"type": "tool_use", "id": "toolu_01Full", "name": "getWeather", "input": {}}),
        *json_deltas(0, "", '{"city": "Paris"}'),
        block_stop(0),
        block_start(1, {"type": "tool_use", "id": "toolu_01Cut", "name": "getWeather", "input": {}}),
        *json_deltas(1, "", '{"city": "Os'),
        block_stop(1),
        message_delta("max_tokens", 32),
        message_stop(),
    ))
    assert events == [
        ToolInputStart("toolu_01Full", "getWeather"),
        ToolInputDelta("toolu_01Full", '{"city": "Paris"}'),
        ToolCall("toolu_01Full", "getWeather", {"city": "Paris"}),
        ToolInputStart("toolu_01Cut", "getWeather"),
        ToolInputDelta("toolu_01Cut", '{"city": "Os'),
        Finish("length", Usage(400, 32), CUT),
    ]


async def test_the_turn_ends_unanswered_with_the_providers_message(open_instance: Any, chat: Any) -> None:
    ran: list[str] = []
    weather = Tool("getWeather", "The weather of a city", WEATHER_TOOL.parameters,
                   execute=lambda city: ran.append(city))
    async with WireServer(sse("chat-length-only-call")) as server:
        inst = await open_instance(chat(server), Agent(tools=[weather]))
        s = await inst.session()
        receipt = await s.submit([user("u1", "Weather in Paris?")])
        result = await settle(s, receipt.operation_id)
    assert (result.outcome, result.reason) == ("unanswered", CUT)
    assert ran == []
    assert len(server.requests) == 1
