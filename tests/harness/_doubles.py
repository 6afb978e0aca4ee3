"""Test doubles shared by the harness engine tests: models, messages, a listener that records."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

from think_server.harness import (
    HarnessEvent,
    Model,
    ModelEvent,
    ModelRequest,
    OperationResult,
    ScriptedModel,
    Session,
    TextDelta,
    TextEnd,
    TextStart,
    ToolCall,
    ToolInputStart,
)
from think_server.protocol import UIMessage

__all__ = [
    "GUARD",
    "FakeModel",
    "Pause",
    "Recorder",
    "Recording",
    "call",
    "script",
    "settle",
    "text",
    "user",
]

# Seconds. Only a guard so that a broken engine fails a test instead of hanging
# it; no test asserts how long anything takes.
GUARD = 10.0

E = TypeVar("E")


def user(message_id: str, *texts: str, metadata: dict[str, Any] | None = None, role: str = "user") -> UIMessage:
    data: dict[str, Any] = {"id": message_id, "role": role, "parts": [{"type": "text", "text": t} for t in texts]}
    if metadata is not None:
        data["metadata"] = metadata
    return UIMessage.model_validate(data)


def script(*rules: dict[str, Any]) -> ScriptedModel:
    return ScriptedModel({"rules": list(rules)})


def text(part_id: str, *deltas: str) -> list[ModelEvent]:
    return [TextStart(part_id), *(TextDelta(part_id, d) for d in deltas), TextEnd(part_id)]


def call(call_id: str, name: str, tool_input: Any = None) -> list[ModelEvent]:
    return [ToolInputStart(call_id, name), ToolCall(call_id, name, {} if tool_input is None else tool_input)]


@dataclass
class Pause:
    """Put in a FakeModel call: the stream sets ``reached`` and waits for ``go`` there."""

    reached: asyncio.Event = field(default_factory=asyncio.Event)
    go: asyncio.Event = field(default_factory=asyncio.Event)


def _snapshot(request: ModelRequest) -> list[dict[str, Any]]:
    return [m.model_dump(mode="json", exclude_unset=True) for m in request.messages]


class FakeModel(Model):
    """Plays one list per model call (the last list again for any further call).

    A list holds model events to yield, :class:`Pause` points, and exceptions
    to raise. Every request is recorded, as the model saw it then.
    """

    def __init__(self, *calls: Sequence[ModelEvent | Pause | BaseException]) -> None:
        self._calls = [list(c) for c in calls]
        self.requests: list[ModelRequest] = []
        self.seen: list[list[dict[str, Any]]] = []
        self.cancelled = 0

    async def stream(self, request: ModelRequest) -> AsyncIterator[ModelEvent]:
        self.requests.append(request)
        self.seen.append(_snapshot(request))
        items = self._calls[min(len(self.requests), len(self._calls)) - 1]
        try:
            for item in items:
                if isinstance(item, Pause):
                    item.reached.set()
                    await item.go.wait()
                elif isinstance(item, BaseException):
                    raise item
                else:
                    yield item
        except asyncio.CancelledError:
            self.cancelled += 1
            raise


class Recording(Model):
    """Wraps a model and records every request it is given."""

    def __init__(self, inner: Model) -> None:
        self.inner = inner
        self.requests: list[ModelRequest] = []
        self.seen: list[list[dict[str, Any]]] = []

    async def stream(self, request: ModelRequest) -> AsyncIterator[ModelEvent]:
        self.requests.append(request)
        self.seen.append(_snapshot(request))
        async for event in self.inner.stream(request):
            yield event


class Recorder:
    """A listener that keeps every event."""

    def __init__(self) -> None:
        self.events: list[HarnessEvent] = []

    def __call__(self, event: HarnessEvent) -> None:
        self.events.append(event)

    def of(self, kind: type[E]) -> list[E]:
        return [e for e in self.events if isinstance(e, kind)]

    def kinds(self) -> list[str]:
        return [type(e).__name__ for e in self.events]


async def settle(session: Session, operation_id: str) -> OperationResult:
    return await asyncio.wait_for(session.wait(operation_id), GUARD)
