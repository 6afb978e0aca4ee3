"""What a turn's model call streams, made chunks: applied to the message, logged (committed before
any client sees them) and shown to the ``on_chunk`` hook; a tool call the model asks for, recorded
for the step. A mixin of :class:`~think_server.harness.turn._turn.Turn`, which owns the state it uses.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from think_server.protocol import (
    Chunk,
    MessageAssembler,
    MessageMetadataChunk,
    ReasoningEndChunk,
    ReasoningStartChunk,
    ToolApprovalRequestChunk,
    ToolInputAvailableChunk,
    ToolOutputErrorChunk,
    dump_chunk,
    dump_text_delta,
)

from .._model import Finish, ModelEvent, TextDelta, ToolCall, Usage
from .._tools import Tool
from ._chunklog import ChunkLog
from ._event_chunks import streamed_chunk
from ._marks import THINK_KEY, ReasoningTimes, think_of
from ._turn_plan import CallScope, TurnHost

__all__ = ["StepResult", "TurnChunks"]


@dataclass(slots=True)
class StepResult:
    finish_reason: str = "stop"
    calls: list[tuple[str, str, Any]] = field(default_factory=list)  # (toolCallId, name, input)
    usage: Usage | None = None
    note: str | None = None  # the provider's word on a call that could not end as meant


class TurnChunks:
    # Set by Turn.__init__.
    _session: TurnHost
    _tools: dict[str, Tool]
    _offered: set[str]
    _assembler: MessageAssembler
    _scope: CallScope | None
    _updated_outside: bool
    _log: ChunkLog
    _tap: list[str] | None
    _reasoning: ReasoningTimes
    _persisted: bool

    def _emit(self, chunk: Chunk, *, hold: bool = False, lazy: bool = False) -> None:
        self._assembler.apply(chunk)
        timed = self._timed(chunk)
        if self._scope is not None and not self._scope.speaks_of(chunk):
            self._updated_outside = True
            return
        text = dump_chunk(chunk)
        self._log.add(text, hold=hold, lazy=lazy)
        if self._tap is not None:
            self._tap.append(text)
        if timed is not None:
            self._mark({"reasoning_ms": timed}, hold=hold)

    def _emit_text_delta(self, part_id: str, delta: str) -> None:
        """:meth:`_emit` of a plain text-delta, without making its chunk (most of a stream is these)."""
        self._assembler.text_delta(part_id, delta)
        text = dump_text_delta(part_id, delta)
        self._log.add(text)
        if self._tap is not None:
            self._tap.append(text)

    def _timed(self, chunk: Chunk) -> list[int | None] | None:
        """The reasoning parts' durations, when ``chunk`` (applied) ends one: the message keeps them."""
        if isinstance(chunk, ReasoningStartChunk):
            ordinal = sum(p.type == "reasoning" for p in self._assembler.message.parts) - 1
            self._reasoning.started(chunk.id, ordinal, self._session.clock.now_ms())
        elif isinstance(chunk, ReasoningEndChunk):
            return self._reasoning.ended(chunk.id, self._session.clock.now_ms(), self._assembler.message.metadata)
        return None

    def _mark(self, think: dict[str, Any], *, hold: bool = False) -> None:
        """Merge ``think`` into the message's key (:mod:`._marks`), sent whole: the hook merges a watched
        stream's metadata one level deep only. An answer without a word is not stored, nor its mark."""
        if self._persisted or any(p.type != "step-start" for p in self._assembler.message.parts):
            whole = {**think_of(self._assembler.message.metadata), **think}
            self._emit(MessageMetadataChunk(messageMetadata={THINK_KEY: whole}), hold=hold)

    def _on_event(self, ev: ModelEvent, result: StepResult) -> None:
        match ev:
            case TextDelta(id=part_id, delta=delta) if self._scope is None:
                self._emit_text_delta(part_id, delta)
            case ToolCall(tool_call_id=c, tool_name=n, input=inp):
                self._on_tool_call(c, n, inp, result)
            case Finish(finish_reason=r, usage=u, message=note):
                result.finish_reason = r
                result.usage = u
                result.note = note
            case _:
                chunk = streamed_chunk(ev)
                if chunk is not None:
                    self._emit(chunk)

    def _on_tool_call(self, call_id: str, name: str, tool_input: Any, result: StepResult) -> None:
        self._emit(ToolInputAvailableChunk(toolCallId=call_id, toolName=name, input=tool_input))
        result.calls.append((call_id, name, tool_input))
        tool = self._tools.get(name) if name in self._offered else None
        if tool is None:
            self._emit(ToolOutputErrorChunk(toolCallId=call_id, errorText=f"Tool {name!r} is not available."))
        elif not tool.is_client and tool.approval_needed(tool_input):
            self._emit(ToolApprovalRequestChunk(approvalId=self._session.clock.new_id(), toolCallId=call_id))
