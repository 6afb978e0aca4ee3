"""AI SDK `UIMessage` and its parts (PROTOCOL §6.1), as pydantic models.

Field names are the wire's camelCase names so that a model dumps to exactly
what the npm client expects. Every model keeps unknown fields (`extra="allow"`)
because newer AI SDK majors add fields we must store and send back untouched.

Serialization relies on pydantic's "fields set" bookkeeping: an optional field
that was never given is omitted (the client's `JSON.stringify` drops
`undefined`), while an explicit `null` given by a client, or nested inside
user data, survives. Pydantic marks a field as set on attribute assignment
too, so parts mutated in place dump what was assigned.
"""

from __future__ import annotations

import json
from json.encoder import encode_basestring, encode_basestring_ascii
from typing import Annotated, Any, ClassVar, Final, Literal, TypeAlias, get_args

from pydantic import (
    BaseModel,
    ConfigDict,
    Discriminator,
    Tag,
    TypeAdapter,
    ValidationError,
    field_validator,
)
from pydantic_core import PydanticSerializationError

from ._errors import ProtocolError, describe_value, from_validation_error

__all__ = [
    "TOOL_STATES",
    "TOOL_TERMINAL_STATES",
    "DataPart",
    "FilePart",
    "GenericPart",
    "Part",
    "ReasoningPart",
    "SourceDocumentPart",
    "SourceUrlPart",
    "StepStartPart",
    "TextPart",
    "ToolApproval",
    "ToolPart",
    "ToolState",
    "UIMessage",
    "dump_message",
    "dump_message_text",
    "dump_messages",
    "dump_part",
    "find_tool_part",
    "message_text",
    "parse_message",
    "parse_messages",
    "parse_part",
]

ToolState: TypeAlias = Literal[
    "input-streaming",
    "input-available",
    "approval-requested",
    "approval-responded",
    "output-available",
    "output-error",
    "output-denied",
]
TOOL_STATES: Final[frozenset[str]] = frozenset(get_args(ToolState))
TOOL_TERMINAL_STATES: Final[frozenset[str]] = frozenset({"output-available", "output-error", "output-denied"})


class WireModel(BaseModel):
    """Base of every wire model: strict types (no silent coercion of client data), unknown keys kept."""

    model_config = ConfigDict(extra="allow", strict=True)

    # Fields with a default that must be dumped even when never set: `type`
    # (so code need not spell it) plus whatever a subclass lists here.
    dump_defaults: ClassVar[tuple[str, ...]] = ()
    _always_set: ClassVar[tuple[str, ...]] = ()

    @classmethod
    def __pydantic_init_subclass__(cls, **kwargs: Any) -> None:
        super().__pydantic_init_subclass__(**kwargs)
        cls._always_set = tuple(name for name in ("type", *cls.dump_defaults) if name in cls.model_fields)

    def model_post_init(self, context: Any, /) -> None:
        if self._always_set:
            self.__pydantic_fields_set__.update(self._always_set)


class TextPart(WireModel):
    type: Literal["text"] = "text"
    text: str
    state: Literal["streaming", "done"] | None = None
    providerMetadata: dict[str, Any] | None = None


class ReasoningPart(WireModel):
    type: Literal["reasoning"] = "reasoning"
    text: str
    state: Literal["streaming", "done"] | None = None
    providerMetadata: dict[str, Any] | None = None


class StepStartPart(WireModel):
    type: Literal["step-start"] = "step-start"


class ToolApproval(WireModel):
    id: str
    approved: bool | None = None
    reason: str | None = None


class ToolPart(WireModel):
    """A `tool-<name>` or `dynamic-tool` part; `state` follows PROTOCOL §6.2."""

    type: str
    toolCallId: str
    state: ToolState
    input: Any = None
    output: Any = None
    errorText: str | None = None
    rawInput: Any = None
    providerExecuted: bool | None = None
    preliminary: bool | None = None
    approval: ToolApproval | None = None
    toolName: str | None = None
    title: str | None = None
    callProviderMetadata: dict[str, Any] | None = None
    resultProviderMetadata: dict[str, Any] | None = None

    @field_validator("type")
    @classmethod
    def _tool_type(cls, value: str) -> str:
        if not (value.startswith("tool-") or value == "dynamic-tool"):
            raise ValueError("a tool part type must be 'tool-<name>' or 'dynamic-tool'")
        return value

    @property
    def tool_name(self) -> str:
        if self.type == "dynamic-tool":
            return self.toolName or ""
        return self.type[5:]

    @property
    def is_terminal(self) -> bool:
        return self.state in TOOL_TERMINAL_STATES


class FilePart(WireModel):
    type: Literal["file"] = "file"
    mediaType: str
    url: str
    filename: str | None = None
    providerMetadata: dict[str, Any] | None = None


class SourceUrlPart(WireModel):
    type: Literal["source-url"] = "source-url"
    sourceId: str
    url: str
    title: str | None = None
    providerMetadata: dict[str, Any] | None = None


class SourceDocumentPart(WireModel):
    type: Literal["source-document"] = "source-document"
    sourceId: str
    mediaType: str
    title: str
    filename: str | None = None
    providerMetadata: dict[str, Any] | None = None


class DataPart(WireModel):
    """A `data-<name>` part; `data` is app data, stored and sent back verbatim."""

    type: str
    id: str | None = None
    data: Any = None

    @field_validator("type")
    @classmethod
    def _data_type(cls, value: str) -> str:
        if not value.startswith("data-"):
            raise ValueError("a data part type must be 'data-<name>'")
        return value


class GenericPart(WireModel):
    """Any part type this package does not model (v7 `custom`, future types); kept as-is."""

    type: str


_FIXED_PART_TAGS: Final[dict[str, str]] = {
    "text": "TextPart",
    "reasoning": "ReasoningPart",
    "step-start": "StepStartPart",
    "file": "FilePart",
    "source-url": "SourceUrlPart",
    "source-document": "SourceDocumentPart",
    "dynamic-tool": "ToolPart",
}
# Union tags show up in validation error locations; they are not field names.
PART_TAGS: Final[frozenset[str]] = frozenset({*_FIXED_PART_TAGS.values(), "DataPart", "GenericPart"})


def _part_tag(value: Any) -> str | None:
    kind = value.get("type") if isinstance(value, dict) else getattr(value, "type", None)
    if not isinstance(kind, str):
        return None
    tag = _FIXED_PART_TAGS.get(kind)
    if tag is not None:
        return tag
    if kind.startswith("tool-"):
        return "ToolPart"
    if kind.startswith("data-"):
        return "DataPart"
    return "GenericPart"


Part: TypeAlias = Annotated[
    Annotated[TextPart, Tag("TextPart")]
    | Annotated[ReasoningPart, Tag("ReasoningPart")]
    | Annotated[StepStartPart, Tag("StepStartPart")]
    | Annotated[ToolPart, Tag("ToolPart")]
    | Annotated[FilePart, Tag("FilePart")]
    | Annotated[SourceUrlPart, Tag("SourceUrlPart")]
    | Annotated[SourceDocumentPart, Tag("SourceDocumentPart")]
    | Annotated[DataPart, Tag("DataPart")]
    | Annotated[GenericPart, Tag("GenericPart")],
    Discriminator(
        _part_tag,
        custom_error_type="invalid_part",
        custom_error_message="A part must be an object with a string 'type'",
    ),
]


class UIMessage(WireModel):
    id: str
    role: Literal["user", "assistant", "system"]
    parts: list[Part]
    metadata: dict[str, Any] | None = None


_PART_ADAPTER: Final[TypeAdapter[Part]] = TypeAdapter(Part)


def parse_message(obj: Any, what: str = "invalid message") -> UIMessage:
    """Validate one decoded JSON value as a UIMessage; `ProtocolError` starts with ``what`` and says where."""
    return _parse_message(obj, what)


def parse_messages(obj: Any) -> list[UIMessage]:
    """Validate a decoded JSON array of UIMessages; the error names the index of the bad message."""
    if not isinstance(obj, list):
        raise ProtocolError(f"expected an array of messages, got {describe_value(obj)}")
    return [_parse_message(item, f"invalid message at index {i}") for i, item in enumerate(obj)]


def _parse_message(obj: Any, what: str) -> UIMessage:
    if not isinstance(obj, dict):
        raise ProtocolError(f"{what}: expected an object, got {describe_value(obj)}")
    try:
        return UIMessage.model_validate(obj)
    except ValidationError as exc:
        raise from_validation_error(exc, what, skip=PART_TAGS) from None


def parse_part(obj: Any) -> Part:
    """Validate one decoded JSON value as a message part."""
    try:
        return _PART_ADAPTER.validate_python(obj)
    except ValidationError as exc:
        raise from_validation_error(exc, "invalid part", skip=PART_TAGS) from None


def dump_message(msg: UIMessage) -> dict[str, Any]:
    """A JSON-ready dict: unset optional fields omitted, explicit and nested nulls kept."""
    return msg.model_dump(mode="json", exclude_unset=True)


def dump_messages(msgs: list[UIMessage]) -> list[dict[str, Any]]:
    return [msg.model_dump(mode="json", exclude_unset=True) for msg in msgs]


def dump_message_text(msg: UIMessage) -> str:
    """A message as compact JSON text, the way `JSON.stringify` writes it."""
    return model_json(msg)


def dump_part(part: Part) -> dict[str, Any]:
    return part.model_dump(mode="json", exclude_unset=True)


def message_text(msg: UIMessage) -> str:
    """The concatenated text of the message's text parts (reasoning excluded)."""
    return "".join(part.text for part in msg.parts if isinstance(part, TextPart))


def find_tool_part(msg: UIMessage, tool_call_id: str) -> ToolPart | None:
    """The first tool part of `msg` with that `toolCallId` (ids are unique per conversation)."""
    for part in msg.parts:
        if isinstance(part, ToolPart) and part.toolCallId == tool_call_id:
            return part
    return None


def model_json(model: BaseModel) -> str:
    """Compact JSON text of a wire model, the way `JSON.stringify` writes it (non-ASCII kept)."""
    try:
        return model.model_dump_json(exclude_unset=True)
    except PydanticSerializationError:
        # Lone surrogates (legal in JS strings, e.g. a token split inside an
        # emoji) cannot be UTF-8 encoded; ASCII escapes keep them as JS would.
        return json.dumps(model.model_dump(mode="json", exclude_unset=True), separators=(",", ":"))


def json_string(text: str) -> str:
    """A JSON string literal as `JSON.stringify` writes it: non-ASCII kept, except that lone
    surrogates (which UTF-8 cannot carry over a WebSocket) are escaped."""
    if not text.isascii():
        try:
            text.encode()
        except UnicodeEncodeError:
            return encode_basestring_ascii(text)
    return encode_basestring(text)
