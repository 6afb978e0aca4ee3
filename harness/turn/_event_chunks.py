"""The UI chunk a streamed model event becomes (tool calls and the finish are the turn's to handle)."""

from __future__ import annotations

from think_server.protocol import (
    Chunk,
    ReasoningDeltaChunk,
    ReasoningEndChunk,
    ReasoningStartChunk,
    TextDeltaChunk,
    TextEndChunk,
    TextStartChunk,
    ToolInputDeltaChunk,
    ToolInputStartChunk,
)

from .._model import (
    ModelEvent,
    ReasoningDelta,
    ReasoningEnd,
    ReasoningStart,
    TextDelta,
    TextEnd,
    TextStart,
    ToolInputDelta,
    ToolInputStart,
)

__all__ = ["streamed_chunk"]


def streamed_chunk(ev: ModelEvent) -> Chunk | None:
    """The chunk for a text, reasoning or tool-input event; None for any other."""
    match ev:
        case TextDelta(id=i, delta=d):
            return TextDeltaChunk(id=i, delta=d)
        case TextStart(id=i):
            return TextStartChunk(id=i)
        case TextEnd(id=i):
            return TextEndChunk(id=i)
        case ReasoningStart(id=i, provider_metadata=None):
            return ReasoningStartChunk(id=i)
        case ReasoningStart(id=i, provider_metadata=meta):
            return ReasoningStartChunk(id=i, providerMetadata=meta)
        case ReasoningDelta(id=i, delta=d):
            return ReasoningDeltaChunk(id=i, delta=d)
        case ReasoningEnd(id=i, provider_metadata=None):
            return ReasoningEndChunk(id=i)
        case ReasoningEnd(id=i, provider_metadata=meta):
            return ReasoningEndChunk(id=i, providerMetadata=meta)
        case ToolInputStart(tool_call_id=c, tool_name=n):
            return ToolInputStartChunk(toolCallId=c, toolName=n)
        case ToolInputDelta(tool_call_id=c, delta=d):
            return ToolInputDeltaChunk(toolCallId=c, inputTextDelta=d)
    return None
