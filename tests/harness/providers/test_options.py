"""Per-call options reaching each provider's request body, and a model setting's defaults.

``max_output_tokens``, ``temperature``, ``tool_choice``, ``reasoning`` and
``provider_options`` of a :class:`ModelRequest`, with each provider's known
rules: OpenAI's reasoning models refuse ``temperature``; Anthropic needs
``max_tokens``, at most 4096 on its claude-3 models; Workers AI stops at 256
tokens unless told otherwise.
"""

from __future__ import annotations

import asyncio
import re
from typing import Any

import pytest

from think_server.harness import ModelSpecError
from think_server.harness._model import Model, ModelRequest, ToolDefinition
from think_server.harness.providers import resolve_model
from think_server.harness.providers._anthropic import AnthropicModel
from think_server.harness.providers._openai import OpenAIChatModel, OpenAIResponsesModel, workers_ai_from_spec
from think_server.harness.providers._options import RequestDefaults

from .._doubles import GUARD, user
from .anthropic_server import AnthropicServer
from .anthropic_support import KEY as ANTHROPIC_KEY
from .anthropic_support import WEATHER_SCHEMA, collect_all, run, text_stream
from .openai_support import KEY, WEATHER_TOOL, collect, hi, sse
from .openai_wire import WireServer

# ---------------------------------------------------------------- OpenAI Chat Completions


async def test_chat_per_call_options_reach_the_body(chat: Any) -> None:
    request = hi(tools=[WEATHER_TOOL], tool_choice="required", max_output_tokens=300, temperature=0.4,
                 reasoning="high", provider_options={"seed": 7, "stream_options": {"include_obfuscation": False}})
    async with WireServer(sse("chat-ok")) as server:
        _, error = await collect(chat(server), request)
    assert error is None
    body = server.requests[0].json()
    assert {k: body[k] for k in ("tool_choice", "max_completion_tokens", "temperature", "reasoning_effort",
                                 "seed", "stream_options")} == {
        "tool_choice": "required", "max_completion_tokens": 300, "temperature": 0.4, "reasoning_effort": "high",
        "seed": 7, "stream_options": {"include_usage": True, "include_obfuscation": False},  # objects merge
    }


@pytest.mark.parametrize(("model", "sent"), [
    ("o4-mini", False), ("o3", False), ("gpt-5-mini-2025-08-07", False), ("openai/gpt-5", False),
    ("gpt-5-chat-latest", True), ("gpt-4.1-mini", True), ("omni-moderation-latest", True),
])
async def test_chat_reasoning_models_get_no_temperature(chat: Any, model: str, sent: bool) -> None:
    async with WireServer(sse("chat-ok")) as server:
        _, error = await collect(chat(server, model), hi(temperature=0.2, reasoning=20000))
    assert error is None
    body = server.requests[0].json()
    assert ("temperature" in body) is sent
    assert body["reasoning_effort"] == "high"  # a thinking budget of 20000 tokens, as an effort


async def test_explicit_provider_options_win_over_the_mapped_reasoning(chat: Any) -> None:
    async with WireServer(sse("chat-ok")) as server:
        _, error = await collect(chat(server, "o4-mini"), hi(reasoning="low",
                                                             provider_options={"reasoning_effort": "medium"}))
    assert error is None and server.requests[0].json()["reasoning_effort"] == "medium"


async def test_workers_ai_gets_4096_output_tokens_unless_the_request_sets_its_own(
        chat: Any, clean_env: pytest.MonkeyPatch) -> None:
    clean_env.setenv("CLOUDFLARE_ACCOUNT_ID", "0123abcd")
    clean_env.setenv("CLOUDFLARE_API_TOKEN", KEY)
    default = workers_ai_from_spec("@cf/meta/llama-3.1-8b-instruct").default_max_output_tokens
    async with WireServer(sse("chat-ok"), sse("chat-ok")) as server:
        model = chat(server, "@cf/meta/llama-3.1-8b-instruct", provider="workers-ai", max_tokens_field="max_tokens",
                     default_max_output_tokens=default)
        await collect(model, hi())
        await collect(model, hi(max_output_tokens=100))
    assert [r.json()["max_tokens"] for r in server.requests] == [4096, 100]


# ---------------------------------------------------------------- OpenAI Responses


async def test_responses_per_call_options_reach_the_body(responses: Any) -> None:
    request = hi(tools=[WEATHER_TOOL], tool_choice="getWeather", max_output_tokens=500, temperature=0.7,
                 reasoning="minimal", provider_options={"include": ["web_search_call.action.sources"]})
    async with WireServer(sse("responses-text")) as server:
        model = responses(server, "gpt-5-mini", options={"reasoning": {"summary": "auto"}})
        _, error = await collect(model, request)
    assert error is None
    body = server.requests[0].json()
    assert "temperature" not in body  # a reasoning model
    assert {k: body[k] for k in ("tool_choice", "max_output_tokens", "reasoning", "include")} == {
        "tool_choice": {"type": "function", "name": "getWeather"},
        "max_output_tokens": 500,
        "reasoning": {"effort": "minimal", "summary": "auto"},
        "include": ["web_search_call.action.sources", "reasoning.encrypted_content"],
    }


# ---------------------------------------------------------------- Anthropic

WEATHER = ToolDefinition("getWeather", "The weather of a city", WEATHER_SCHEMA)


async def test_anthropic_per_call_options_reach_the_body() -> None:
    request = ModelRequest(messages=[user("u1", "Hi")], tools=[WEATHER], tool_choice="auto", max_output_tokens=2000,
                           temperature=0.3, reasoning="medium",
                           provider_options={"anthropic": {"top_k": 5, "metadata": {"user_id": "u-42"}},
                                             "seed": 7})
    _, server = await run(text_stream("ok"), request=request)
    body = server.received[0].json
    assert body["thinking"] == {"type": "enabled", "budget_tokens": 8192}  # "medium"
    assert body["max_tokens"] == 2000 + 8192  # it counts the thinking, and must exceed its budget
    assert "temperature" not in body  # Anthropic refuses it with thinking
    assert (body["tool_choice"], body["top_k"], body["metadata"]) == ({"type": "auto"}, 5, {"user_id": "u-42"})
    assert "seed" not in body  # flat options may be meant for another provider

    request = ModelRequest(messages=[user("u1", "Hi")], temperature=0.3, reasoning=3000,
                           provider_options={"anthropic": {"thinking": {"type": "disabled"}}})
    _, server = await run(text_stream("ok"), request=request)
    body = server.received[0].json
    assert body["thinking"] == {"type": "disabled"}  # an explicit thinking option wins
    assert (body["max_tokens"], body["temperature"]) == (8192, 0.3)


@pytest.mark.parametrize(("model", "asked", "sent"), [
    ("claude-3-haiku-20240307", None, 4096),
    ("claude-3-opus-20240229", 10000, 4096),
    ("claude-3-5-haiku-20241022", None, 8192),
    ("claude-3-7-sonnet-20250219", 10000, 10000),
    ("claude-sonnet-4-5", 20000, 20000),
])
async def test_anthropic_max_tokens_defaults_and_caps_by_model(model: str, asked: int | None, sent: int) -> None:
    request = ModelRequest(messages=[user("u1", "Hi")], max_output_tokens=asked)
    _, server = await run(text_stream("ok"), request=request, model=model)
    assert server.received[0].json["max_tokens"] == sent


# ---------------------------------------------------------------- a model setting's defaults


@pytest.fixture
def keys(clean_env: pytest.MonkeyPatch) -> pytest.MonkeyPatch:
    clean_env.setenv("OPENAI_API_KEY", KEY)
    clean_env.setenv("ANTHROPIC_API_KEY", ANTHROPIC_KEY)
    clean_env.setenv("CLOUDFLARE_ACCOUNT_ID", "0123abcd")
    clean_env.setenv("CLOUDFLARE_API_TOKEN", KEY)
    return clean_env


DEFAULTS = "temperature=0.2&max_output_tokens=800&reasoning=low"


@pytest.mark.parametrize(("spec", "kind", "sent"), [
    ("openai:gpt-4.1-mini?{q}", OpenAIChatModel,
     {"temperature": 0.9, "max_completion_tokens": 800, "reasoning_effort": "low"}),
    ("openai:responses/gpt-4.1?{q}", OpenAIResponsesModel,
     {"temperature": 0.9, "max_output_tokens": 800, "reasoning": {"effort": "low"}}),
    ("openai-compatible:{url}#Qwen/Qwen3-8B?{q}", OpenAIChatModel,
     {"temperature": 0.9, "max_tokens": 800, "reasoning_effort": "low"}),
    ("ollama:qwen3?{q}", OpenAIChatModel, {"temperature": 0.9, "max_tokens": 800, "reasoning_effort": "low"}),
])
async def test_spec_defaults_fill_what_an_openai_family_request_leaves_unset(
        keys: pytest.MonkeyPatch, models: list[Model], spec: str, kind: type, sent: dict[str, Any]) -> None:
    async with WireServer(sse("responses-text" if "responses/" in spec else "chat-ok")) as server:
        keys.setenv("OPENAI_BASE_URL", server.base_url)
        keys.setenv("OLLAMA_BASE_URL", server.base_url)
        model = resolve_model(spec.format(q=DEFAULTS, url=server.base_url))
        models.append(model)
        assert isinstance(model, kind)
        _, error = await collect(model, hi(temperature=0.9))  # the request's own temperature wins
    assert error is None
    body = server.requests[0].json()
    assert body["model"] in ("gpt-4.1-mini", "gpt-4.1", "Qwen/Qwen3-8B", "qwen3")
    assert {k: body.get(k) for k in sent} == sent


async def test_spec_defaults_fill_what_an_anthropic_request_leaves_unset(keys: pytest.MonkeyPatch) -> None:
    async with AnthropicServer(text_stream("ok")) as server:
        keys.setenv("ANTHROPIC_BASE_URL", server.base_url)
        model = resolve_model("anthropic:claude-sonnet-4-5?temperature=0.5&max_output_tokens=3000&reasoning=2048")
        assert isinstance(model, AnthropicModel)
        try:
            await asyncio.wait_for(collect_all(model, ModelRequest(messages=[user("u1", "Hi")])), GUARD)
        finally:
            await model.aclose()
    body = server.received[0].json
    assert (body["model"], body["max_tokens"], body["thinking"]) == (
        "claude-sonnet-4-5", 3000, {"type": "enabled", "budget_tokens": 2048})


def test_workers_ai_spec_defaults(keys: pytest.MonkeyPatch) -> None:
    model = resolve_model("workers-ai:@cf/moonshotai/kimi-k2.6?max_output_tokens=16000&reasoning=high")
    assert isinstance(model, OpenAIChatModel) and model.model == "@cf/moonshotai/kimi-k2.6"
    assert model.defaults == RequestDefaults(max_output_tokens=16000, reasoning="high")


@pytest.mark.parametrize(("query", "key"), [
    ("temp=0.2", "temp"),
    ("temperature=hot", "temperature"),
    ("temperature=3", "temperature"),
    ("max_output_tokens=0", "max_output_tokens"),
    ("max_output_tokens=12.5", "max_output_tokens"),
    ("reasoning=extreme", "reasoning"),
    ("reasoning=low&reasoning=high", "reasoning"),
    ("temperature", "temperature"),
])
def test_a_bad_spec_default_is_a_spec_error_naming_the_key(keys: pytest.MonkeyPatch, query: str, key: str) -> None:
    with pytest.raises(ModelSpecError, match=re.escape(repr(key))):
        resolve_model(f"openai:gpt-4.1-mini?{query}")
    with pytest.raises(ModelSpecError, match=re.escape(repr(key))):
        resolve_model(f"openai-compatible:http://127.0.0.1:8000/v1#m?{query}")
