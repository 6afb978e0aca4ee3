"""The model seam: one streaming interface that every provider implements.

A provider turns a :class:`ModelRequest` (system prompt, the transcript as UI
messages, tool definitions) into an async stream of :data:`ModelEvent` values.
The harness turns those events into UI chunks, stores them and fans them out;
it never looks at which provider produced them. The offline scripted model is
one provider among the others::

    class EchoModel(Model):
        async def stream(self, request: ModelRequest) -> AsyncIterator[ModelEvent]:
            yield TextStart("t0")
            yield TextDelta("t0", "hello")
            yield TextEnd("t0")
            yield Finish("stop")

A provider signals failure by raising :class:`ModelError` from the iterator; the
message is shown to the user, so it must never contain secrets. Abort is plain
asyncio cancellation of the task iterating the stream: every wait inside a
provider must be cancellable.
"""

from __future__ import annotations

import abc
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, TypeAlias

from think_server.protocol import UIMessage

__all__ = [
    "Finish",
    "FinishReason",
    "Model",
    "ModelError",
    "ModelEvent",
    "ModelRequest",
    "ReasoningDelta",
    "ReasoningEnd",
    "ReasoningStart",
    "TextDelta",
    "TextEnd",
    "TextStart",
    "ToolCall",
    "ToolDefinition",
    "ToolInputDelta",
    "ToolInputStart",
    "Usage",
]

FinishReason: TypeAlias = Literal["stop", "length", "content-filter", "tool-calls", "error", "other"]


@dataclass(frozen=True, slots=True)
class ToolDefinition:
    """What the model is told about a tool: never its implementation."""

    name: str
    description: str = ""
    parameters: dict[str, Any] = field(default_factory=lambda: {"type": "object", "properties": {}})


@dataclass(frozen=True, slots=True)
class ModelRequest:
    """One model call.

    ``messages`` is the active transcript, oldest first. When the harness
    continues an assistant message (a later step of the same answer, or a
    recovery after a crash) the last message is that assistant message with
    the parts it already holds, and the model must continue it rather than
    repeat it.
    """

    messages: Sequence[UIMessage]
    system: str | None = None
    tools: Sequence[ToolDefinition] = ()
    tool_choice: Any = None
    max_output_tokens: int | None = None
    temperature: float | None = None
    provider_options: dict[str, Any] | None = None
    #: Reasoning effort ("low", "medium", "high": OpenAI) or a thinking budget in tokens (Anthropic).
    reasoning: Any = None
    #: Called by a provider for any bytes it receives (keep-alive comments and pings included): a
    #: model that reasons silently for minutes is working, not stalled. Set by the harness.
    progress: Callable[[], None] | None = field(default=None, compare=False, repr=False)


@dataclass(frozen=True, slots=True)
class Usage:
    input_tokens: int | None = None
    output_tokens: int | None = None


@dataclass(frozen=True, slots=True)
class TextStart:
    id: str


@dataclass(frozen=True, slots=True)
class TextDelta:
    id: str
    delta: str


@dataclass(frozen=True, slots=True)
class TextEnd:
    id: str


@dataclass(frozen=True, slots=True)
class ReasoningStart:
    id: str
    provider_metadata: dict[str, Any] | None = None


@dataclass(frozen=True, slots=True)
class ReasoningDelta:
    id: str
    delta: str


@dataclass(frozen=True, slots=True)
class ReasoningEnd:
    """``provider_metadata`` is kept with the reasoning part and sent back to the
    provider on the next call (Anthropic's thinking signature, say)."""

    id: str
    provider_metadata: dict[str, Any] | None = None


@dataclass(frozen=True, slots=True)
class ToolInputStart:
    tool_call_id: str
    tool_name: str


@dataclass(frozen=True, slots=True)
class ToolInputDelta:
    tool_call_id: str
    delta: str


@dataclass(frozen=True, slots=True)
class ToolCall:
    """The model finished a tool call's input: the call may now run."""

    tool_call_id: str
    tool_name: str
    input: Any


@dataclass(frozen=True, slots=True)
class Finish:
    finish_reason: FinishReason = "stop"
    usage: Usage | None = None
    #: Why the call could not end as the model meant it to, for the user (e.g. a tool call whose
    #: input the output token limit cut off, with ``finish_reason="length"``): the turn ends with it.
    message: str | None = None


ModelEvent: TypeAlias = (
    TextStart
    | TextDelta
    | TextEnd
    | ReasoningStart
    | ReasoningDelta
    | ReasoningEnd
    | ToolInputStart
    | ToolInputDelta
    | ToolCall
    | Finish
)


class ModelError(Exception):
    """A model call failed. ``str(error)`` is shown to the user as is."""


class Model(abc.ABC):
    """A model provider. Subclasses implement :meth:`stream`.

    A session keeps only the end of its transcript in memory; before a call the harness reads
    the rest from storage, so ``request.messages`` holds all of it. A model that reads the
    transcript back from its end only (as far as the last user message) may set
    ``reads_from_end = True``: the older messages are then not read, and reading one raises
    ``LookupError`` until ``await request.messages.load()``.
    """

    #: Whether the model reads ``request.messages`` back from the end only (see above).
    reads_from_end: bool = False

    @abc.abstractmethod
    def stream(self, request: ModelRequest) -> AsyncIterator[ModelEvent]:
        """Stream the events of one model call, ending with :class:`Finish`."""

    @property
    def label(self) -> str:
        """Which model this is, as a person is shown it (the chat page names the model that answers):
        ``provider:model`` for the providers, never a key or a URL; the class's name by default."""
        return type(self).__name__

    async def aclose(self) -> None:  # noqa: B027 - optional hook, most providers hold nothing
        """Release what the provider holds (HTTP clients). Called at shutdown."""
