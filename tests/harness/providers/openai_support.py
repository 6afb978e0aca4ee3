"""What the OpenAI-family provider tests share: the key, fast retries, the recorded bodies, a collector."""

from __future__ import annotations

import asyncio
import re
from pathlib import Path
from typing import Any

from think_server.harness._model import (
    Model,
    ModelError,
    ModelEvent,
    ModelRequest,
    TextDelta,
    TextEnd,
    TextStart,
    ToolDefinition,
)
from think_server.harness.providers._http import HttpSettings

from .._doubles import GUARD, user
from .openai_wire import Reply

__all__ = ["BODIES", "FAST", "KEY", "RETRIES", "WEATHER_TOOL", "collect", "hi", "sse", "text_events"]

KEY = "sk-test-0123456789abcdefSECRET"
RETRIES = 2
FAST = HttpSettings(max_retries=RETRIES, backoff_s=0.0, max_backoff_s=0.0)


def _load_bodies() -> dict[str, str]:
    text = Path(__file__).with_name("openai_bodies.sse").read_text(encoding="utf-8")
    sections = re.split(r"^### (.+)\n", text, flags=re.MULTILINE)
    return {name.strip(): body for name, body in zip(sections[1::2], sections[2::2], strict=True)}


BODIES = _load_bodies()


def sse(name: str, **kw: Any) -> Reply:
    return Reply(body=BODIES[name], **kw)


async def collect(model: Model, request: ModelRequest) -> tuple[list[ModelEvent], ModelError | None]:
    """Every event of one call, and the ModelError that ended it (if one did)."""
    events: list[ModelEvent] = []

    async def run() -> None:
        async for event in model.stream(request):
            events.append(event)

    try:
        await asyncio.wait_for(run(), GUARD)
    except ModelError as exc:
        return events, exc
    return events, None


def hi(**kw: Any) -> ModelRequest:
    return ModelRequest(messages=[user("u1", "Hello")], **kw)


def text_events(part_id: str, *deltas: str) -> list[ModelEvent]:
    return [TextStart(part_id), *(TextDelta(part_id, d) for d in deltas), TextEnd(part_id)]


WEATHER_TOOL = ToolDefinition(
    "getWeather", "The weather of a city",
    {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
)
