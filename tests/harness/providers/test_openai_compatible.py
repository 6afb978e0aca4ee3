"""Chat Completions servers that are not OpenAI's, against loopback servers speaking their streams.

DeepSeek and Kimi (thinking) refuse a tool-calling assistant message that comes
back without its reasoning; Workers AI ends a streamed call with an empty piece
and takes reasoning back as ``reasoning``; Mistral streams content as parts;
Ollama cannot fetch remote images; some servers refuse an empty text next to
tool calls.
"""

from __future__ import annotations

import base64
from typing import Any

import pytest

from think_server.harness import Agent, Tool
from think_server.harness._model import (
    Finish,
    Model,
    ModelRequest,
    ReasoningDelta,
    ReasoningEnd,
    ReasoningStart,
    ToolCall,
    ToolInputDelta,
    ToolInputStart,
    Usage,
)
from think_server.harness.providers._openai import OpenAIChatModel
from think_server.protocol import UIMessage

from .._doubles import settle, user
from .openai_support import FAST, KEY, WEATHER_TOOL, collect, hi, sse, text_events
from .openai_wire import WireServer


def tool_step(reasoning: str | None) -> list[UIMessage]:
    """A question and an answer whose first step called a tool (after reasoning, if any)."""
    parts: list[dict[str, Any]] = [{"type": "step-start"}]
    if reasoning is not None:
        parts.append({"type": "reasoning", "text": reasoning, "state": "done"})
    parts += [
        {"type": "tool-getWeather", "toolCallId": "call_1", "state": "output-available",
         "input": {"city": "Paris"}, "output": {"condition": "sunny"}},
        {"type": "step-start"},
        {"type": "text", "text": "It is sunny.", "state": "done"},
    ]
    return [user("u1", "Weather in Paris?"), UIMessage.model_validate({"id": "a1", "role": "assistant",
                                                                       "parts": parts})]


CALL = [{"id": "call_1", "type": "function", "function": {"name": "getWeather", "arguments": '{"city":"Paris"}'}}]


async def test_a_deepseek_tool_turn_sends_the_steps_reasoning_back_on_its_second_call(
        open_instance: Any, models: list[Model]) -> None:
    weather = Tool("getWeather", "The weather of a city", WEATHER_TOOL.parameters,
                   execute=lambda city: {"condition": "sunny"})
    async with WireServer(sse("chat-deepseek-tool-call"), sse("chat-deepseek-answer")) as server:
        model = OpenAIChatModel("deepseek-chat", base_url=server.base_url, api_key=KEY, settings=FAST,
                                provider="openai-compatible", max_tokens_field="max_tokens")
        models.append(model)
        inst = await open_instance(model, Agent(tools=[weather]))
        s = await inst.session()
        receipt = await s.submit([user("u1", "Weather in Paris?")])
        result = await settle(s, receipt.operation_id)

    assert (result.outcome, result.text) == ("done", "It is sunny in Paris.")
    second = server.requests[1].json()
    # DeepSeek answers 400 to this message without reasoning_content: the second call of every tool turn failed.
    assert second["messages"][1] == {
        "role": "assistant", "content": None,
        "reasoning_content": "The user wants the weather in Paris. I will call getWeather.",
        "tool_calls": [{"id": "call_00_kQ9TBnN0uNIN7dZ5Wj1Ryg3W", "type": "function",
                        "function": {"name": "getWeather", "arguments": '{"city":"Paris"}'}}],
    }
    assert second["messages"][2]["role"] == "tool"


@pytest.mark.parametrize(("provider", "reasoning", "field"), [
    ("openai-compatible", "Need the weather.", {"reasoning_content": "Need the weather."}),
    ("openai-compatible", None, {"reasoning_content": ""}),  # the field must be there even when empty
    ("ollama", "Need the weather.", {"reasoning_content": "Need the weather."}),
    ("workers-ai", "Need the weather.", {"reasoning": "Need the weather."}),
    ("openai", "Need the weather.", {}),  # OpenAI refuses fields it does not know on a message
])
async def test_a_tool_calling_step_carries_its_reasoning_back_as_each_server_reads_it(
        chat: Any, provider: str, reasoning: str | None, field: dict[str, str]) -> None:
    async with WireServer(sse("chat-ok")) as server:
        _, error = await collect(chat(server, provider=provider), ModelRequest(messages=tool_step(reasoning)))
    assert error is None
    messages = server.requests[0].json()["messages"]
    assert messages[1] == {"role": "assistant", "content": None, "tool_calls": CALL, **field}
    assert messages[3] == {"role": "assistant", "content": "It is sunny."}  # no calls: no reasoning back


async def test_workers_ai_kimi_ends_a_call_with_an_empty_piece_which_is_skipped(chat: Any) -> None:
    async with WireServer(sse("chat-workers-ai-kimi-tool-call")) as server:
        model = chat(server, "@cf/moonshotai/kimi-k2.6", provider="workers-ai", max_tokens_field="max_tokens")
        events, error = await collect(model, hi(tools=[WEATHER_TOOL]))
    assert error is None  # was: "the model sent a tool call without a tool name"
    call = "functions.getWeather:0"
    assert events == [
        ReasoningStart("r-0"), ReasoningDelta("r-0", "Weather lookup needed."), ReasoningEnd("r-0"),
        ToolInputStart(call, "getWeather"),
        ToolInputDelta(call, '{"city": "Paris"}'),
        ToolCall(call, "getWeather", {"city": "Paris"}),
        Finish("tool-calls", Usage(204, 23)),
    ]


async def test_mistral_content_given_as_parts_is_read_as_text_and_thinking(chat: Any) -> None:
    async with WireServer(sse("chat-mistral-parts")) as server:
        events, error = await collect(chat(server, "magistral-medium-2509", provider="openai-compatible"), hi())
    assert error is None
    assert events == [
        ReasoningStart("r-0"), ReasoningDelta("r-0", "A greeting; answer in kind."), ReasoningEnd("r-0"),
        *text_events("t-0", "Hello", " there!"),
        Finish("stop", Usage(9, 22)),
    ]


def picture(url: str) -> ModelRequest:
    return ModelRequest(messages=[UIMessage.model_validate({"id": "u1", "role": "user", "parts": [
        {"type": "text", "text": "What is this?"},
        {"type": "file", "mediaType": "image/png", "url": url, "filename": "cat.png"},
    ]})])


async def test_ollama_refuses_a_remote_image_url_before_the_call_and_takes_a_data_url(chat: Any) -> None:
    png = "data:image/png;base64," + base64.b64encode(b"\x89PNG fake").decode()
    async with WireServer(sse("chat-ok")) as server:
        model = chat(server, "llava", provider="ollama", max_tokens_field="max_tokens")
        events, error = await collect(model, picture("https://example.com/cat.png"))
        assert server.requests == []  # never sent: Ollama would answer with an unhelpful error
        assert events == []
        assert str(error) == ("ollama: this model cannot fetch the image at https://example.com/cat.png; attach "
                              "the image file itself (it is then sent as a data: URL)")
        _, error = await collect(model, picture(png))
    assert error is None
    assert server.requests[0].json()["messages"][0]["content"][1] == {"type": "image_url", "image_url": {"url": png}}
