"""A stored message as the UI chunks that build it: the inverse of assembly, for a client that
asks for an answer whose streamed chunks are gone (swept past their replay grace).

The chunks rebuild the message's parts, in order, as the AI SDK's ``processUIMessageStream``
assembles them: ``start`` (with the message's id), each part, ``finish``.
"""

from __future__ import annotations

from typing import Any

from ._chunks import (
    DataChunk,
    FileChunk,
    FinishChunk,
    FinishStepChunk,
    ReasoningDeltaChunk,
    ReasoningEndChunk,
    ReasoningStartChunk,
    SourceDocumentChunk,
    SourceUrlChunk,
    StartChunk,
    StartStepChunk,
    TextDeltaChunk,
    TextEndChunk,
    TextStartChunk,
    ToolApprovalRequestChunk,
    ToolInputAvailableChunk,
    ToolOutputAvailableChunk,
    ToolOutputDeniedChunk,
    ToolOutputErrorChunk,
    dump_chunk,
)
from ._messages import (
    DataPart,
    FilePart,
    ReasoningPart,
    SourceDocumentPart,
    SourceUrlPart,
    StepStartPart,
    TextPart,
    ToolPart,
    UIMessage,
)

__all__ = ["message_chunks"]


def _tool_chunks(part: ToolPart) -> list[Any]:
    dynamic = True if part.type == "dynamic-tool" else None
    extra: dict[str, Any] = {k: v for k, v in (("providerExecuted", part.providerExecuted), ("dynamic", dynamic),
                                               ("title", part.title)) if v is not None}
    out: list[Any] = [ToolInputAvailableChunk(toolCallId=part.toolCallId, toolName=part.tool_name,
                                              input=part.input, **extra)]
    if part.approval is not None:
        # A decision given but not acted on yet has no chunk: the client sees the question again.
        out.append(ToolApprovalRequestChunk(approvalId=part.approval.id, toolCallId=part.toolCallId))
    if part.state == "output-available":
        out.append(ToolOutputAvailableChunk(toolCallId=part.toolCallId, output=part.output))
    elif part.state == "output-error":
        out.append(ToolOutputErrorChunk(toolCallId=part.toolCallId, errorText=part.errorText or ""))
    elif part.state == "output-denied":
        out.append(ToolOutputDeniedChunk(toolCallId=part.toolCallId))
    return out


def message_chunks(message: UIMessage, *, finish_reason: str | None = None) -> list[str]:
    """The JSON texts of the chunks that build ``message`` from nothing, ``start`` to ``finish``."""
    chunks: list[Any] = [StartChunk(messageId=message.id)]
    in_step = False
    for n, part in enumerate(message.parts):
        pid = f"p{n}"
        if isinstance(part, StepStartPart):
            if in_step:
                chunks.append(FinishStepChunk())
            chunks.append(StartStepChunk())
            in_step = True
        elif isinstance(part, TextPart):
            chunks += [TextStartChunk(id=pid), TextDeltaChunk(id=pid, delta=part.text), TextEndChunk(id=pid)]
        elif isinstance(part, ReasoningPart):
            chunks += [ReasoningStartChunk(id=pid), ReasoningDeltaChunk(id=pid, delta=part.text),
                       ReasoningEndChunk(id=pid)]
        elif isinstance(part, ToolPart):
            chunks += _tool_chunks(part)
        elif isinstance(part, FilePart):
            chunks.append(FileChunk(url=part.url, mediaType=part.mediaType))
        elif isinstance(part, SourceUrlPart):
            chunks.append(SourceUrlChunk(sourceId=part.sourceId, url=part.url, title=part.title)
                          if part.title is not None else SourceUrlChunk(sourceId=part.sourceId, url=part.url))
        elif isinstance(part, SourceDocumentPart):
            chunks.append(SourceDocumentChunk(sourceId=part.sourceId, mediaType=part.mediaType, title=part.title))
        elif isinstance(part, DataPart):
            chunks.append(DataChunk(type=part.type, id=part.id, data=part.data) if part.id is not None
                          else DataChunk(type=part.type, data=part.data))
        # Other parts (a type this package does not model) have no chunk a client would take.
    if in_step:
        chunks.append(FinishStepChunk())
    chunks.append(FinishChunk(finishReason=finish_reason) if finish_reason else FinishChunk())
    return [dump_chunk(c) for c in chunks]
