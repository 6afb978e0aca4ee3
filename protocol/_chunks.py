"""AI SDK UI message stream chunks (PROTOCOL §5.2): the body of every streamed frame.

One model per chunk type; anything else parses as `GenericChunk` and is kept
verbatim, because v6/v7 clients ignore unknown chunk types and newer AI SDK
majors add some. Fields are declared in the order the AI SDK writes them so
that a dumped chunk reads like the reference's.
"""

from __future__ import annotations

import json
from typing import Annotated, Any, Final, Literal, TypeAlias

from pydantic import Discriminator, Tag, TypeAdapter, ValidationError, field_validator

from ._errors import ProtocolError, describe_value, from_validation_error
from ._messages import WireModel, json_string, model_json

__all__ = [
    "AbortChunk",
    "Chunk",
    "DataChunk",
    "ErrorChunk",
    "FileChunk",
    "FinishChunk",
    "FinishStepChunk",
    "GenericChunk",
    "MessageMetadataChunk",
    "ReasoningDeltaChunk",
    "ReasoningEndChunk",
    "ReasoningStartChunk",
    "SourceDocumentChunk",
    "SourceUrlChunk",
    "StartChunk",
    "StartStepChunk",
    "TextDeltaChunk",
    "TextEndChunk",
    "TextStartChunk",
    "ToolApprovalRequestChunk",
    "ToolInputAvailableChunk",
    "ToolInputDeltaChunk",
    "ToolInputErrorChunk",
    "ToolInputStartChunk",
    "ToolOutputAvailableChunk",
    "ToolOutputDeniedChunk",
    "ToolOutputErrorChunk",
    "dump_chunk",
    "parse_chunk",
]


class StartChunk(WireModel):
    type: Literal["start"] = "start"
    messageId: str | None = None
    messageMetadata: Any = None


class StartStepChunk(WireModel):
    type: Literal["start-step"] = "start-step"


class TextStartChunk(WireModel):
    type: Literal["text-start"] = "text-start"
    id: str
    providerMetadata: dict[str, Any] | None = None


class TextDeltaChunk(WireModel):
    type: Literal["text-delta"] = "text-delta"
    id: str
    delta: str
    providerMetadata: dict[str, Any] | None = None


class TextEndChunk(WireModel):
    type: Literal["text-end"] = "text-end"
    id: str
    providerMetadata: dict[str, Any] | None = None


class ReasoningStartChunk(WireModel):
    type: Literal["reasoning-start"] = "reasoning-start"
    id: str
    providerMetadata: dict[str, Any] | None = None


class ReasoningDeltaChunk(WireModel):
    type: Literal["reasoning-delta"] = "reasoning-delta"
    id: str
    delta: str
    providerMetadata: dict[str, Any] | None = None


class ReasoningEndChunk(WireModel):
    type: Literal["reasoning-end"] = "reasoning-end"
    id: str
    providerMetadata: dict[str, Any] | None = None


class ToolInputStartChunk(WireModel):
    type: Literal["tool-input-start"] = "tool-input-start"
    toolCallId: str
    toolName: str
    providerExecuted: bool | None = None
    dynamic: bool | None = None
    title: str | None = None
    providerMetadata: dict[str, Any] | None = None


class ToolInputDeltaChunk(WireModel):
    type: Literal["tool-input-delta"] = "tool-input-delta"
    toolCallId: str
    inputTextDelta: str


class ToolInputAvailableChunk(WireModel):
    type: Literal["tool-input-available"] = "tool-input-available"
    toolCallId: str
    toolName: str
    # `undefined` input vanishes under JSON.stringify, so absence must parse.
    input: Any = None
    providerExecuted: bool | None = None
    providerMetadata: dict[str, Any] | None = None
    dynamic: bool | None = None
    title: str | None = None


class ToolInputErrorChunk(WireModel):
    type: Literal["tool-input-error"] = "tool-input-error"
    toolCallId: str
    toolName: str
    input: Any = None
    errorText: str
    providerExecuted: bool | None = None
    providerMetadata: dict[str, Any] | None = None
    dynamic: bool | None = None
    title: str | None = None


class ToolApprovalRequestChunk(WireModel):
    type: Literal["tool-approval-request"] = "tool-approval-request"
    approvalId: str
    toolCallId: str


class ToolOutputAvailableChunk(WireModel):
    type: Literal["tool-output-available"] = "tool-output-available"
    toolCallId: str
    output: Any = None
    preliminary: bool | None = None
    providerExecuted: bool | None = None
    dynamic: bool | None = None
    providerMetadata: dict[str, Any] | None = None


class ToolOutputErrorChunk(WireModel):
    type: Literal["tool-output-error"] = "tool-output-error"
    toolCallId: str
    errorText: str
    providerExecuted: bool | None = None
    dynamic: bool | None = None
    providerMetadata: dict[str, Any] | None = None


class ToolOutputDeniedChunk(WireModel):
    type: Literal["tool-output-denied"] = "tool-output-denied"
    toolCallId: str


class SourceUrlChunk(WireModel):
    type: Literal["source-url"] = "source-url"
    sourceId: str
    url: str
    title: str | None = None
    providerMetadata: dict[str, Any] | None = None


class SourceDocumentChunk(WireModel):
    type: Literal["source-document"] = "source-document"
    sourceId: str
    mediaType: str
    title: str
    filename: str | None = None
    providerMetadata: dict[str, Any] | None = None


class FileChunk(WireModel):
    type: Literal["file"] = "file"
    url: str
    mediaType: str
    providerMetadata: dict[str, Any] | None = None


class DataChunk(WireModel):
    """`data-<name>`: stored as a part unless `transient`; same type and `id` replace in place."""

    type: str
    id: str | None = None
    data: Any = None
    transient: bool | None = None

    @field_validator("type")
    @classmethod
    def _data_type(cls, value: str) -> str:
        if not value.startswith("data-"):
            raise ValueError("a data chunk type must be 'data-<name>'")
        return value


class MessageMetadataChunk(WireModel):
    type: Literal["message-metadata"] = "message-metadata"
    messageMetadata: Any = None


class FinishChunk(WireModel):
    type: Literal["finish"] = "finish"
    finishReason: str | None = None
    messageMetadata: Any = None


class FinishStepChunk(WireModel):
    type: Literal["finish-step"] = "finish-step"


class ErrorChunk(WireModel):
    type: Literal["error"] = "error"
    errorText: str


class AbortChunk(WireModel):
    type: Literal["abort"] = "abort"
    reason: str | None = None


class GenericChunk(WireModel):
    """A chunk type this package does not model; forwarded and stored as-is, never applied."""

    type: str


_CHUNK_CLASSES: Final[tuple[type[WireModel], ...]] = (
    StartChunk,
    StartStepChunk,
    TextStartChunk,
    TextDeltaChunk,
    TextEndChunk,
    ReasoningStartChunk,
    ReasoningDeltaChunk,
    ReasoningEndChunk,
    ToolInputStartChunk,
    ToolInputDeltaChunk,
    ToolInputAvailableChunk,
    ToolInputErrorChunk,
    ToolApprovalRequestChunk,
    ToolOutputAvailableChunk,
    ToolOutputErrorChunk,
    ToolOutputDeniedChunk,
    SourceUrlChunk,
    SourceDocumentChunk,
    FileChunk,
    MessageMetadataChunk,
    FinishChunk,
    FinishStepChunk,
    ErrorChunk,
    AbortChunk,
)
_CHUNK_TAGS: Final[dict[str, str]] = {cls.model_fields["type"].default: cls.__name__ for cls in _CHUNK_CLASSES}
CHUNK_TAGS: Final[frozenset[str]] = frozenset({*_CHUNK_TAGS.values(), "DataChunk", "GenericChunk"})


def _chunk_tag(value: Any) -> str | None:
    kind = value.get("type") if isinstance(value, dict) else getattr(value, "type", None)
    if not isinstance(kind, str):
        return None
    tag = _CHUNK_TAGS.get(kind)
    if tag is not None:
        return tag
    return "DataChunk" if kind.startswith("data-") else "GenericChunk"


Chunk: TypeAlias = Annotated[
    Annotated[StartChunk, Tag("StartChunk")]
    | Annotated[StartStepChunk, Tag("StartStepChunk")]
    | Annotated[TextStartChunk, Tag("TextStartChunk")]
    | Annotated[TextDeltaChunk, Tag("TextDeltaChunk")]
    | Annotated[TextEndChunk, Tag("TextEndChunk")]
    | Annotated[ReasoningStartChunk, Tag("ReasoningStartChunk")]
    | Annotated[ReasoningDeltaChunk, Tag("ReasoningDeltaChunk")]
    | Annotated[ReasoningEndChunk, Tag("ReasoningEndChunk")]
    | Annotated[ToolInputStartChunk, Tag("ToolInputStartChunk")]
    | Annotated[ToolInputDeltaChunk, Tag("ToolInputDeltaChunk")]
    | Annotated[ToolInputAvailableChunk, Tag("ToolInputAvailableChunk")]
    | Annotated[ToolInputErrorChunk, Tag("ToolInputErrorChunk")]
    | Annotated[ToolApprovalRequestChunk, Tag("ToolApprovalRequestChunk")]
    | Annotated[ToolOutputAvailableChunk, Tag("ToolOutputAvailableChunk")]
    | Annotated[ToolOutputErrorChunk, Tag("ToolOutputErrorChunk")]
    | Annotated[ToolOutputDeniedChunk, Tag("ToolOutputDeniedChunk")]
    | Annotated[SourceUrlChunk, Tag("SourceUrlChunk")]
    | Annotated[SourceDocumentChunk, Tag("SourceDocumentChunk")]
    | Annotated[FileChunk, Tag("FileChunk")]
    | Annotated[DataChunk, Tag("DataChunk")]
    | Annotated[MessageMetadataChunk, Tag("MessageMetadataChunk")]
    | Annotated[FinishChunk, Tag("FinishChunk")]
    | Annotated[FinishStepChunk, Tag("FinishStepChunk")]
    | Annotated[ErrorChunk, Tag("ErrorChunk")]
    | Annotated[AbortChunk, Tag("AbortChunk")]
    | Annotated[GenericChunk, Tag("GenericChunk")],
    Discriminator(
        _chunk_tag,
        custom_error_type="invalid_chunk",
        custom_error_message="A chunk must be an object with a string 'type'",
    ),
]

_CHUNK_ADAPTER: Final[TypeAdapter[Chunk]] = TypeAdapter(Chunk)


def parse_chunk(obj: Any) -> Chunk:
    """Validate a chunk given as decoded JSON (or as JSON text, e.g. a frame `body`)."""
    if isinstance(obj, (str, bytes, bytearray)):
        try:
            obj = json.loads(obj)
        except ValueError as exc:
            raise ProtocolError(f"invalid chunk: not JSON ({exc})") from None
    if not isinstance(obj, dict):
        raise ProtocolError(f"invalid chunk: expected an object, got {describe_value(obj)}")
    kind = obj.get("type")
    if not isinstance(kind, str):
        raise ProtocolError(f"invalid chunk: field 'type': expected a string, got {describe_value(kind)}")
    try:
        return _CHUNK_ADAPTER.validate_python(obj)
    except ValidationError as exc:
        raise from_validation_error(exc, f"invalid {kind!r} chunk", skip=CHUNK_TAGS) from None


def dump_chunk(chunk: Chunk) -> str:
    """Compact JSON like the client's `JSON.stringify`: unset optionals omitted, nested nulls kept."""
    # Hot path (one call per streamed token): a plain text-delta skips pydantic.
    if (
        chunk.__class__ is TextDeltaChunk
        and not chunk.__pydantic_extra__
        and "providerMetadata" not in chunk.__pydantic_fields_set__
    ):
        return dump_text_delta(chunk.id, chunk.delta)
    return model_json(chunk)


def dump_text_delta(part_id: str, delta: str) -> str:
    """``dump_chunk`` of a plain text-delta, made without the chunk: a model's stream is mostly these."""
    return '{"type":"text-delta","id":' + json_string(part_id) + ',"delta":' + json_string(delta) + "}"
