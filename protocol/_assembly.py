"""Build an assistant UIMessage from UI chunks, as the AI SDK's processUIMessageStream does.

The server needs the same message the client renders: to persist it, to send
it in transcripts, and to rebuild a partial answer after a crash. So the rules
are the client's (PROTOCOL §5), plus the first-write-wins tool rules of
SEMANTICS §1.1 so that a replayed or late chunk never regresses a settled part.
Violations the client would throw on raise `AssemblyError` instead of being
silently absorbed: a stream that breaks the client must be caught server-side.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from typing import Any, Final, Literal

from ._chunks import (
    Chunk,
    DataChunk,
    FileChunk,
    FinishChunk,
    FinishStepChunk,
    MessageMetadataChunk,
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
    ToolInputDeltaChunk,
    ToolInputErrorChunk,
    ToolInputStartChunk,
    ToolOutputAvailableChunk,
    ToolOutputDeniedChunk,
    ToolOutputErrorChunk,
)
from ._errors import AssemblyError
from ._messages import (
    TOOL_TERMINAL_STATES,
    DataPart,
    FilePart,
    Part,
    ReasoningPart,
    SourceDocumentPart,
    SourceUrlPart,
    StepStartPart,
    TextPart,
    ToolApproval,
    ToolPart,
    UIMessage,
)

__all__ = ["MessageAssembler", "assemble"]


def _grow(part: TextPart | ReasoningPart, delta: str) -> None:
    """Add ``delta`` to a streaming part's text, straight in the instance dict (``text`` is marked
    set already). Its slot is emptied first so that the string is left with a single reference and
    CPython grows it in place (``part.text += delta`` copies the whole text at every token:
    quadratic). The key keeps its place, so the part dumps in field order (type, text, state), as
    the AI SDK writes it and the hook sends its copy back: the server recognises that copy by its bytes."""
    fields = part.__dict__
    text = fields["text"]
    fields["text"] = ""
    text += delta
    fields["text"] = text


class MessageAssembler:
    """Apply chunks one by one to an assistant message.

    `parts` seeds the message, e.g. with the previous assistant message's parts
    for a continuation whose tool outputs refer to calls made there; they are
    deep-copied, so the caller's objects are never mutated.
    """

    __slots__ = ("_finish_reason", "_message", "_open_reasoning", "_open_text", "_partial", "_tools")

    def __init__(
        self,
        message_id: str,
        *,
        role: Literal["user", "assistant", "system"] = "assistant",
        parts: list[Part] | None = None,
        metadata: dict[str, Any] | None = None,
    ) -> None:
        seeded = [part.model_copy(deep=True) for part in parts] if parts else []
        self._message = UIMessage(id=message_id, role=role, parts=seeded)
        if metadata is not None:
            self._message.metadata = dict(metadata)
        self._open_text: dict[str, TextPart] = {}
        self._open_reasoning: dict[str, ReasoningPart] = {}
        self._tools: dict[str, ToolPart] = {}
        for part in seeded:
            if isinstance(part, ToolPart):
                self._tools.setdefault(part.toolCallId, part)
        # toolCallId -> raw input text streamed so far (the AI SDK's partialToolCalls).
        self._partial: dict[str, str] = {}
        self._finish_reason: str | None = None

    @property
    def message(self) -> UIMessage:
        """The message being built: the live object, updated in place by `apply`."""
        return self._message

    def tool_call(self, tool_call_id: str) -> ToolPart | None:
        """The message's part of the tool call ``tool_call_id``, as the chunks so far made it."""
        return self._tools.get(tool_call_id)

    @property
    def open_text_ids(self) -> list[str]:
        """Ids of text blocks started and not yet ended, in start order."""
        return list(self._open_text)

    @property
    def open_reasoning_ids(self) -> list[str]:
        return list(self._open_reasoning)

    @property
    def finish_reason(self) -> str | None:
        """The last `finish` chunk's `finishReason`, if any."""
        return self._finish_reason

    def apply(self, chunk: Chunk) -> None:
        """Apply one chunk; raise `AssemblyError` where the AI SDK client would throw."""
        # Hot path: one text-delta per streamed token.
        if chunk.__class__ is TextDeltaChunk:
            self.text_delta(chunk.id, chunk.delta)
            return
        handler = _HANDLERS.get(chunk.__class__)
        if handler is not None:
            handler(self, chunk)
        # error, abort and unknown chunk types leave the message as it is.

    def text_delta(self, part_id: str, delta: str) -> None:
        """Apply a plain text-delta given by its fields (no chunk made for it)."""
        part = self._open_text.get(part_id)
        if part is None:
            raise AssemblyError(f"text-delta for id {part_id!r} without an open text-start")
        _grow(part, delta)

    def settle(self) -> None:
        """Make the message persistable after an abort, error or crash.

        Open text and reasoning blocks are marked done; tool calls whose input
        never finished streaming are dropped (they cannot be executed or
        answered). Tool calls with complete input are kept as they are.
        """
        kept: list[Part] = []
        for part in self._message.parts:
            if isinstance(part, (TextPart, ReasoningPart)):
                if part.state == "streaming":
                    part.state = "done"
            elif isinstance(part, ToolPart) and part.state == "input-streaming":
                if self._tools.get(part.toolCallId) is part:
                    del self._tools[part.toolCallId]
                continue
            kept.append(part)
        self._message.parts = kept
        self._open_text.clear()
        self._open_reasoning.clear()
        self._partial.clear()

    # ── handlers ──────────────────────────────────────────────────────────────

    def _start(self, chunk: StartChunk) -> None:
        if chunk.messageId is not None:
            self._message.id = chunk.messageId
        self._merge_metadata(chunk.messageMetadata)

    def _start_step(self, chunk: StartStepChunk) -> None:
        self._message.parts.append(StepStartPart())

    def _finish_step(self, chunk: FinishStepChunk) -> None:
        # Text and reasoning ids are only meaningful within one step.
        self._open_text.clear()
        self._open_reasoning.clear()

    def _finish(self, chunk: FinishChunk) -> None:
        if chunk.finishReason is not None:
            self._finish_reason = chunk.finishReason
        self._merge_metadata(chunk.messageMetadata)

    def _message_metadata(self, chunk: MessageMetadataChunk) -> None:
        self._merge_metadata(chunk.messageMetadata)

    def _merge_metadata(self, metadata: Any) -> None:
        if not isinstance(metadata, dict):
            return
        current = self._message.metadata
        self._message.metadata = _merge(current, metadata) if current is not None else dict(metadata)

    def _text_start(self, chunk: TextStartChunk) -> None:
        part = TextPart(text="", state="streaming")
        if chunk.providerMetadata is not None:
            part.providerMetadata = chunk.providerMetadata
        self._message.parts.append(part)
        self._open_text[chunk.id] = part

    def _text_end(self, chunk: TextEndChunk) -> None:
        part = self._open_text.pop(chunk.id, None)
        if part is None:
            raise AssemblyError(f"text-end for id {chunk.id!r} without an open text-start")
        part.state = "done"
        if chunk.providerMetadata is not None:
            part.providerMetadata = chunk.providerMetadata

    def _reasoning_start(self, chunk: ReasoningStartChunk) -> None:
        part = ReasoningPart(text="", state="streaming")
        if chunk.providerMetadata is not None:
            part.providerMetadata = chunk.providerMetadata
        self._message.parts.append(part)
        self._open_reasoning[chunk.id] = part

    def _reasoning_delta(self, chunk: ReasoningDeltaChunk) -> None:
        part = self._open_reasoning.get(chunk.id)
        if part is None:
            raise AssemblyError(f"reasoning-delta for id {chunk.id!r} without an open reasoning-start")
        _grow(part, chunk.delta)

    def _reasoning_end(self, chunk: ReasoningEndChunk) -> None:
        part = self._open_reasoning.pop(chunk.id, None)
        if part is None:
            raise AssemblyError(f"reasoning-end for id {chunk.id!r} without an open reasoning-start")
        part.state = "done"
        if chunk.providerMetadata is not None:
            part.providerMetadata = chunk.providerMetadata

    def _new_tool(
        self,
        tool_call_id: str,
        tool_name: str,
        dynamic: bool | None,
        state: Literal["input-streaming", "input-available", "output-error"],
    ) -> ToolPart:
        # `toolName` on static parts too: the reference server persists it there
        # (the AI SDK client omits it; both read fine).
        kind = "dynamic-tool" if dynamic else f"tool-{tool_name}"
        part = ToolPart(type=kind, toolCallId=tool_call_id, toolName=tool_name, state=state)
        self._message.parts.append(part)
        self._tools[tool_call_id] = part
        return part

    def _tool_input_start(self, chunk: ToolInputStartChunk) -> None:
        if chunk.toolCallId in self._tools:
            # Provider replay of a call we already have (issue #1404): the part
            # stays as it is, but later deltas for it are not a violation.
            self._partial.setdefault(chunk.toolCallId, "")
            return
        part = self._new_tool(chunk.toolCallId, chunk.toolName, chunk.dynamic, "input-streaming")
        if chunk.providerExecuted is not None:
            part.providerExecuted = chunk.providerExecuted
        if chunk.title is not None:
            part.title = chunk.title
        if chunk.providerMetadata is not None:
            part.callProviderMetadata = chunk.providerMetadata
        self._partial[chunk.toolCallId] = ""

    def _tool_input_delta(self, chunk: ToolInputDeltaChunk) -> None:
        text = self._partial.get(chunk.toolCallId)
        if text is None:
            raise AssemblyError(f"tool-input-delta for toolCallId {chunk.toolCallId!r} without tool-input-start")
        part = self._tools.get(chunk.toolCallId)
        if part is None or part.state != "input-streaming":
            return
        text += chunk.inputTextDelta
        self._partial[chunk.toolCallId] = text
        ok, value = parse_partial_json(text)
        if ok:
            part.input = value

    def _tool_input_available(self, chunk: ToolInputAvailableChunk) -> None:
        part = self._tools.get(chunk.toolCallId)
        if part is None:
            part = self._new_tool(chunk.toolCallId, chunk.toolName, chunk.dynamic, "input-available")
        elif part.state == "input-streaming":
            part.state = "input-available"
        else:
            return  # first write wins: never regress a call that moved on
        part.input = normalize_tool_input(chunk.input)
        if chunk.providerExecuted is not None:
            part.providerExecuted = chunk.providerExecuted
        if chunk.title is not None:
            part.title = chunk.title
        if chunk.providerMetadata is not None:
            part.callProviderMetadata = chunk.providerMetadata

    def _tool_input_error(self, chunk: ToolInputErrorChunk) -> None:
        part = self._tools.get(chunk.toolCallId)
        if part is None:
            part = self._new_tool(chunk.toolCallId, chunk.toolName, chunk.dynamic, "output-error")
        elif part.state in TOOL_TERMINAL_STATES or part.state == "approval-responded":
            return
        else:
            part.state = "output-error"
        if "input" in chunk.model_fields_set:
            part.input = chunk.input
        part.errorText = chunk.errorText
        if chunk.providerExecuted is not None:
            part.providerExecuted = chunk.providerExecuted
        if chunk.providerMetadata is not None:
            part.resultProviderMetadata = chunk.providerMetadata

    def _known_tool(self, tool_call_id: str, chunk_type: str) -> ToolPart:
        part = self._tools.get(tool_call_id)
        if part is None:
            raise AssemblyError(
                f"{chunk_type} for toolCallId {tool_call_id!r} that has no tool part in the message being built"
            )
        return part

    def _tool_approval_request(self, chunk: ToolApprovalRequestChunk) -> None:
        part = self._known_tool(chunk.toolCallId, "tool-approval-request")
        if part.state == "approval-responded" or part.state in TOOL_TERMINAL_STATES:
            return
        part.state = "approval-requested"
        part.approval = ToolApproval(id=chunk.approvalId)

    def _tool_output_available(self, chunk: ToolOutputAvailableChunk) -> None:
        part = self._known_tool(chunk.toolCallId, "tool-output-available")
        if part.state in TOOL_TERMINAL_STATES and not _is_preliminary(part):
            return
        part.state = "output-available"
        if "output" in chunk.model_fields_set:
            part.output = chunk.output
        if chunk.preliminary is not None:
            part.preliminary = chunk.preliminary
        elif part.preliminary:
            # The final output after preliminary ones: the flag must not stick.
            part.preliminary = False
        if chunk.providerExecuted is not None:
            part.providerExecuted = chunk.providerExecuted
        if chunk.providerMetadata is not None:
            part.resultProviderMetadata = chunk.providerMetadata

    def _tool_output_error(self, chunk: ToolOutputErrorChunk) -> None:
        part = self._known_tool(chunk.toolCallId, "tool-output-error")
        if part.state in TOOL_TERMINAL_STATES and not _is_preliminary(part):
            return
        part.state = "output-error"
        part.errorText = chunk.errorText
        if chunk.providerExecuted is not None:
            part.providerExecuted = chunk.providerExecuted
        if chunk.providerMetadata is not None:
            part.resultProviderMetadata = chunk.providerMetadata

    def _tool_output_denied(self, chunk: ToolOutputDeniedChunk) -> None:
        part = self._known_tool(chunk.toolCallId, "tool-output-denied")
        if part.state == "approval-responded" or part.state in TOOL_TERMINAL_STATES:
            return
        part.state = "output-denied"

    def _data(self, chunk: DataChunk) -> None:
        if chunk.transient:
            return
        if chunk.id is not None:
            for part in self._message.parts:
                if isinstance(part, DataPart) and part.type == chunk.type and part.id == chunk.id:
                    part.data = chunk.data
                    return
        part = DataPart(type=chunk.type, data=chunk.data)
        if chunk.id is not None:
            part.id = chunk.id
        self._message.parts.append(part)

    def _file(self, chunk: FileChunk) -> None:
        part = FilePart(mediaType=chunk.mediaType, url=chunk.url)
        if chunk.providerMetadata is not None:
            part.providerMetadata = chunk.providerMetadata
        self._message.parts.append(part)

    def _source_url(self, chunk: SourceUrlChunk) -> None:
        part = SourceUrlPart(sourceId=chunk.sourceId, url=chunk.url)
        if chunk.title is not None:
            part.title = chunk.title
        if chunk.providerMetadata is not None:
            part.providerMetadata = chunk.providerMetadata
        self._message.parts.append(part)

    def _source_document(self, chunk: SourceDocumentChunk) -> None:
        part = SourceDocumentPart(sourceId=chunk.sourceId, mediaType=chunk.mediaType, title=chunk.title)
        if chunk.filename is not None:
            part.filename = chunk.filename
        if chunk.providerMetadata is not None:
            part.providerMetadata = chunk.providerMetadata
        self._message.parts.append(part)


_HANDLERS: Final[dict[type[Any], Callable[[MessageAssembler, Any], None]]] = {
    StartChunk: MessageAssembler._start,
    StartStepChunk: MessageAssembler._start_step,
    FinishStepChunk: MessageAssembler._finish_step,
    FinishChunk: MessageAssembler._finish,
    MessageMetadataChunk: MessageAssembler._message_metadata,
    TextStartChunk: MessageAssembler._text_start,
    TextEndChunk: MessageAssembler._text_end,
    ReasoningStartChunk: MessageAssembler._reasoning_start,
    ReasoningDeltaChunk: MessageAssembler._reasoning_delta,
    ReasoningEndChunk: MessageAssembler._reasoning_end,
    ToolInputStartChunk: MessageAssembler._tool_input_start,
    ToolInputDeltaChunk: MessageAssembler._tool_input_delta,
    ToolInputAvailableChunk: MessageAssembler._tool_input_available,
    ToolInputErrorChunk: MessageAssembler._tool_input_error,
    ToolApprovalRequestChunk: MessageAssembler._tool_approval_request,
    ToolOutputAvailableChunk: MessageAssembler._tool_output_available,
    ToolOutputErrorChunk: MessageAssembler._tool_output_error,
    ToolOutputDeniedChunk: MessageAssembler._tool_output_denied,
    DataChunk: MessageAssembler._data,
    FileChunk: MessageAssembler._file,
    SourceUrlChunk: MessageAssembler._source_url,
    SourceDocumentChunk: MessageAssembler._source_document,
}


def assemble(chunks: Iterable[Chunk], message_id: str) -> UIMessage:
    """The assistant message a complete chunk sequence produces."""
    assembler = MessageAssembler(message_id)
    for chunk in chunks:
        assembler.apply(chunk)
    return assembler.message


def _is_preliminary(part: ToolPart) -> bool:
    return part.state == "output-available" and part.preliminary is True


def _merge(base: dict[str, Any], update: dict[str, Any]) -> dict[str, Any]:
    """The AI SDK's mergeObjects: nested objects merge, everything else (arrays too) is replaced."""
    merged = dict(base)
    for key, value in update.items():
        old = merged.get(key)
        merged[key] = _merge(old, value) if isinstance(old, dict) and isinstance(value, dict) else value
    return merged


def normalize_tool_input(value: Any) -> dict[str, Any]:
    """SEMANTICS §1.1 `normalizeToolInput`: an object is kept, a string holding an object is
    parsed, anything else (null, "", arrays, primitives) becomes `{}`."""
    if isinstance(value, dict):
        return value
    if isinstance(value, str):
        try:
            parsed = json.loads(value)
        except ValueError:
            return {}
        if isinstance(parsed, dict):
            return parsed
    return {}


def parse_partial_json(text: str) -> tuple[bool, Any]:
    """Best-effort parse of a JSON prefix (streamed tool input): `(True, value)` or `(False, None)`.

    First the text as is, then with open strings and containers closed, then
    cut back to one of the last few places where a complete value ended.
    """
    try:
        return True, json.loads(text)
    except ValueError:
        pass
    stack: list[str] = []
    cuts: list[tuple[int, str]] = []  # (prefix length, closers needed there)
    in_string = escaped = False
    for i, char in enumerate(text):
        if in_string:
            if escaped:
                escaped = False
            elif char == "\\":
                escaped = True
            elif char == '"':
                in_string = False
                cuts.append((i + 1, "".join(reversed(stack))))
            continue
        if char == '"':
            in_string = True
        elif char in "{[":
            stack.append("}" if char == "{" else "]")
            cuts.append((i + 1, "".join(reversed(stack))))
        elif char in "}]":
            if stack:
                stack.pop()
            cuts.append((i + 1, "".join(reversed(stack))))
        elif char == ",":
            cuts.append((i, "".join(reversed(stack))))
    closers = "".join(reversed(stack))
    if in_string:
        candidates = [(text[:-1] if escaped else text) + '"' + closers]
    else:
        candidates = [text.rstrip() + closers]
    candidates.extend(text[:end] + close for end, close in reversed(cuts[-4:]))
    for candidate in candidates:
        try:
            return True, json.loads(candidate)
        except ValueError:
            continue
    return False, None
