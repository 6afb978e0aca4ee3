"""The transcript as a model sees it: UI messages turned into provider-neutral turns.

Every HTTP provider starts from :func:`to_model_turns` and maps its result to
its own wire format, so the rules live in one place: a step of an assistant
message is one assistant turn (reasoning, text, tool calls) followed by one
tool turn with the results; calls without a result are left out (providers
reject them); a transcript ending in a partial assistant answer gets an
ephemeral user turn asking to continue it.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, TypeAlias

from think_server.protocol import FilePart, ReasoningPart, TextPart, ToolPart, UIMessage

__all__ = [
    "CONTINUE_PROMPT",
    "ModelContent",
    "ModelFile",
    "ModelReasoning",
    "ModelText",
    "ModelToolCall",
    "ModelToolResult",
    "ModelTurn",
    "to_model_turns",
]

CONTINUE_PROMPT = "Continue your previous response from exactly where it left off. Do not repeat any of it."
DENIED_RESULT = "The user denied this tool call."


@dataclass(frozen=True, slots=True)
class ModelText:
    text: str


@dataclass(frozen=True, slots=True)
class ModelReasoning:
    text: str
    provider_metadata: dict[str, Any] | None = None


@dataclass(frozen=True, slots=True)
class ModelFile:
    media_type: str
    url: str
    filename: str | None = None


@dataclass(frozen=True, slots=True)
class ModelToolCall:
    id: str
    name: str
    input: Any


@dataclass(frozen=True, slots=True)
class ModelToolResult:
    id: str
    name: str
    output: Any
    is_error: bool = False

    @property
    def text(self) -> str:
        """The result as text, for providers whose tool results are strings."""
        if isinstance(self.output, str):
            return self.output
        return json.dumps(self.output, separators=(",", ":"), ensure_ascii=False)


ModelContent: TypeAlias = ModelText | ModelReasoning | ModelFile | ModelToolCall | ModelToolResult


@dataclass(slots=True)
class ModelTurn:
    role: Literal["system", "user", "assistant", "tool"]
    content: list[ModelContent] = field(default_factory=list)


def _result_of(part: ToolPart) -> ModelToolResult | None:
    if part.state == "output-available":
        return ModelToolResult(part.toolCallId, part.tool_name, part.output)
    if part.state == "output-error":
        return ModelToolResult(part.toolCallId, part.tool_name, part.errorText or "error", is_error=True)
    if part.state == "output-denied":
        reason = part.approval.reason if part.approval is not None else None
        return ModelToolResult(part.toolCallId, part.tool_name,
                               f"{DENIED_RESULT} Reason: {reason}" if reason else DENIED_RESULT, is_error=True)
    return None


def _assistant_turns(message: UIMessage) -> list[ModelTurn]:
    turns: list[ModelTurn] = []
    steps: list[list[Any]] = [[]]
    for part in message.parts:
        if part.type == "step-start":
            if steps[-1]:
                steps.append([])
        else:
            steps[-1].append(part)
    for step in steps:
        said: list[ModelContent] = []
        results: list[ModelContent] = []
        for part in step:
            if isinstance(part, TextPart) and part.text:
                said.append(ModelText(part.text))
            elif isinstance(part, ReasoningPart) and (part.text or part.providerMetadata):
                # Reasoning without text still matters when it carries provider data (a redacted block).
                said.append(ModelReasoning(part.text, part.providerMetadata))
            elif isinstance(part, ToolPart):
                result = _result_of(part)
                if result is None:
                    continue  # a call without a result is left out: providers reject it
                said.append(ModelToolCall(part.toolCallId, part.tool_name, part.input or {}))
                results.append(result)
        if said:
            turns.append(ModelTurn("assistant", said))
        if results:
            turns.append(ModelTurn("tool", results))
    return turns


def to_model_turns(messages: Sequence[UIMessage], system: str | None = None, *,
                   continue_prompt: bool = True) -> list[ModelTurn]:
    """The turns to send; ``system`` (if any) first, then the transcript in order."""
    turns: list[ModelTurn] = []
    if system:
        turns.append(ModelTurn("system", [ModelText(system)]))
    for message in messages:
        if message.role == "assistant":
            turns.extend(_assistant_turns(message))
            continue
        content: list[ModelContent] = []
        for part in message.parts:
            if isinstance(part, TextPart):
                content.append(ModelText(part.text))
            elif isinstance(part, FilePart):
                content.append(ModelFile(part.mediaType, part.url, part.filename))
        if content:
            turns.append(ModelTurn("system" if message.role == "system" else "user", content))
    if continue_prompt and turns and turns[-1].role == "assistant":
        # The answer is being continued: most providers reject an assistant prefill.
        turns.append(ModelTurn("user", [ModelText(CONTINUE_PROMPT)]))
    return turns
