"""What the Anthropic provider tests share: the key, fast retries, canned streams, runners."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from think_server.harness import ModelError, ModelEvent, ModelRequest
from think_server.harness.providers._anthropic import AnthropicModel
from think_server.harness.providers._http import HttpSettings
from think_server.protocol import UIMessage

from .._doubles import GUARD, user
from .anthropic_server import (
    AnthropicServer,
    Reply,
    block_delta,
    block_start,
    block_stop,
    message_delta,
    message_start,
    message_stop,
    ping,
    stream_reply,
)

__all__ = [
    "FAST",
    "HELLO",
    "KEY",
    "MODEL",
    "SIGNATURE",
    "WEATHER_SCHEMA",
    "collect_all",
    "fail",
    "json_deltas",
    "model_for",
    "run",
    "text_events",
    "text_stream",
    "ui",
]

KEY = "sk-ant-api03-TEST-never-shown-9f8e7d6c5b4a"
MODEL = "claude-sonnet-4-5"
FAST = HttpSettings(backoff_s=0.0, max_retries=2)  # retries without waiting; no test asserts a duration
SIGNATURE = "EqQBCgIYAhIM1gbcDa9GJwZA2b3hGgxBdjrkzLoky3dl1pkiMOYds4ZqxKUMnRQSV3dDpjZMBvhaRa2KuC"
HELLO = ModelRequest(messages=[user("u1", "Hi")], system="Be brief.")
WEATHER_SCHEMA = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}


def model_for(server: AnthropicServer, **kw: Any) -> AnthropicModel:
    """``kw``: the constructor's, and ``model`` (default :data:`MODEL`)."""
    return AnthropicModel(kw.pop("model", MODEL), api_key=KEY, base_url=server.base_url,
                          settings=kw.pop("settings", FAST), **kw)


async def run(*replies: Reply, request: ModelRequest = HELLO,
              **model_kw: Any) -> tuple[list[ModelEvent], AnthropicServer]:
    """Stream ``request`` against a server giving ``replies``; (the events, the server)."""
    async with AnthropicServer(*replies) as server:
        model = model_for(server, **model_kw)
        try:
            events = await asyncio.wait_for(collect_all(model, request), GUARD)
        finally:
            await model.aclose()
    return events, server


async def fail(*replies: Reply, request: ModelRequest = HELLO, settings: HttpSettings = FAST,
               **model_kw: Any) -> tuple[ModelError, list[ModelEvent], AnthropicServer]:
    """Like :func:`run` for a call that fails; (the error, the events before it, the server)."""
    events: list[ModelEvent] = []

    async def consume(model: AnthropicModel) -> None:
        async for event in model.stream(request):
            events.append(event)

    async with AnthropicServer(*replies) as server:
        model = model_for(server, settings=settings, **model_kw)
        try:
            with pytest.raises(ModelError) as info:
                await asyncio.wait_for(consume(model), GUARD)
        finally:
            await model.aclose()
    assert KEY not in str(info.value)
    return info.value, events, server


async def collect_all(model: AnthropicModel, request: ModelRequest) -> list[ModelEvent]:
    return [event async for event in model.stream(request)]


def text_events(*deltas: str, stop_reason: str = "end_turn") -> list[tuple[str, dict[str, Any]]]:
    return [
        message_start(25),
        block_start(0, {"type": "text", "text": ""}),
        ping(),
        *(block_delta(0, {"type": "text_delta", "text": d}) for d in deltas),
        block_stop(0),
        message_delta(stop_reason, 15),
        message_stop(),
    ]


def text_stream(*deltas: str, stop_reason: str = "end_turn") -> Reply:
    return stream_reply(*text_events(*deltas, stop_reason=stop_reason))


def json_deltas(index: int, *pieces: str) -> list[tuple[str, dict[str, Any]]]:
    return [block_delta(index, {"type": "input_json_delta", "partial_json": p}) for p in pieces]


def ui(data: dict[str, Any]) -> UIMessage:
    return UIMessage.model_validate(data)
