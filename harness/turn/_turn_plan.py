"""What a turn starts from, how it ends, and what it needs of its session.

Apart from the turn loop (:mod:`think_server.harness.turn._turn`) so that the session, recovery and the loop
share these without importing one another.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from think_server.protocol import (
    Chunk,
    FinishStepChunk,
    MessageAssembler,
    ReasoningEndChunk,
    TextEndChunk,
    ToolApprovalRequestChunk,
    ToolInputAvailableChunk,
    ToolInputErrorChunk,
    ToolInputStartChunk,
    ToolOutputAvailableChunk,
    ToolOutputDeniedChunk,
    ToolOutputErrorChunk,
    ToolPart,
    UIMessage,
)
from think_server.storage import Database, Tx

from .._clock import Clock
from .._events import HarnessEvent
from .._input import InputPolicy
from .._outcomes import WaitingCall
from .._tools import Tool
from ..agent import Agent
from ..memory import Context
from ._turn_hooks import TurnHooks

__all__ = ["CONTINUING", "CallScope", "Outcome", "TurnHost", "TurnPlan", "TurnSuspended", "Unsettled",
           "approved_calls", "calls_introduced", "closing_chunks", "is_runnable"]


@dataclass(frozen=True, slots=True)
class Outcome:
    status: str  # completed | error | aborted | skipped
    outcome: str  # done | unanswered
    reason: str | None = None
    text: str = ""
    waiting: tuple[WaitingCall, ...] = ()  # what an awaiting_* turn waits on


class TurnSuspended(Exception):
    """The turn stopped for a shutdown; its operation stays running and the next start recovers it."""


class Unsettled(Exception):
    """The turn ended, but writing its end failed (a full disk, say): the operation is still open in
    the file. ``outcome`` is the end to tell clients now and to write once writes work again."""

    def __init__(self, outcome: Outcome, message_ids: tuple[str, ...] = ()) -> None:
        super().__init__(outcome.reason or outcome.status)
        self.outcome = outcome
        self.message_ids = message_ids


def closing_chunks(assembler: MessageAssembler) -> list[Chunk]:
    """The chunks that close what an interrupted model call left open, so its stream stays well formed."""
    out: list[Chunk] = [TextEndChunk(id=i) for i in assembler.open_text_ids]
    out += [ReasoningEndChunk(id=i) for i in assembler.open_reasoning_ids]
    out.append(FinishStepChunk())
    return out


#: The operation kinds whose wire stream continues an earlier answer.
CONTINUING = frozenset({"tool_result", "approval", "continue"})

def approved_calls(message: UIMessage, tools: Mapping[str, Tool]) -> list[tuple[str, str, Any]]:
    """(call id, tool, input) of the message's approved server calls, waiting to run."""
    return [(p.toolCallId, p.tool_name, p.input) for p in message.parts
            if isinstance(p, ToolPart) and p.state == "approval-responded"
            and p.tool_name in tools and not tools[p.tool_name].is_client]


def is_runnable(message: UIMessage, tools: Mapping[str, Tool], call: tuple[str, str, Any]) -> bool:
    """Whether the server runs ``call`` (call id, tool, input) now: a known server tool whose part
    waits with its input (not for an approval)."""
    part = next((p for p in message.parts if isinstance(p, ToolPart) and p.toolCallId == call[0]), None)
    return (part is not None and part.state == "input-available" and call[1] in tools
            and not tools[call[1]].is_client)


#: The chunks that make a tool call's part, as classes and as the ``type`` their JSON names.
_MAKING = (ToolInputStartChunk, ToolInputAvailableChunk, ToolInputErrorChunk)
_INTRODUCING = frozenset(str(c.model_fields["type"].default) for c in _MAKING)


def calls_introduced(bodies: Iterable[str]) -> frozenset[str]:
    """The tool calls whose parts a wire stream (its chunk bodies) creates.

    A continuation's stream speaks only of these: the AI SDK 6 client builds a resumed stream's
    message from nothing, so a chunk about a call an earlier stream made cannot apply there
    ("No tool invocation found"). Such news goes out as a message update instead.
    """
    ids: set[str] = set()
    for body in bodies:
        if '"tool-input-' in body:  # most bodies are text deltas: no parse for them
            chunk = json.loads(body)
            if chunk.get("type") in _INTRODUCING:
                ids.add(str(chunk.get("toolCallId")))
    return frozenset(ids)


class CallScope:
    """The tool calls a continuation's stream made (see :func:`calls_introduced`), growing as it
    streams: a chunk about another call is not the stream's to carry."""

    _ABOUT = (ToolOutputAvailableChunk, ToolOutputErrorChunk, ToolOutputDeniedChunk, ToolApprovalRequestChunk)

    def __init__(self, made: frozenset[str]) -> None:
        self._made = set(made)

    def speaks_of(self, chunk: Chunk) -> bool:
        """Whether the stream may carry ``chunk``; False: it goes out as a message update."""
        if isinstance(chunk, _MAKING):
            self._made.add(chunk.toolCallId)
            return True
        return not isinstance(chunk, self._ABOUT) or chunk.toolCallId in self._made


@dataclass(frozen=True)
class TurnPlan:
    """What one run of an operation starts from."""

    operation_id: str
    message_id: str
    parent_id: str | None
    context: Context  # the transcript before the assistant message
    message_ids: tuple[str, ...] = ()  # the user messages the operation carried
    continuation: bool = False  # the wire stream continues an earlier answer
    existing: UIMessage | None = None  # the assistant message as stored (continuations, recovery)
    first_seq: int = 0  # chunks the operation's wire stream already holds
    rerun: tuple[tuple[str, str, Any], ...] = ()  # calls cut short by a crash, to run again
    introduced: frozenset[str] = frozenset()  # calls the stream's first ``first_seq`` chunks created
    #: The first model call's stream row and its ``start`` chunk (its id, the chunk's JSON), when the start's
    #: transaction wrote them and the session announced the chunk (a new input's turn): the turn goes on
    #: from them, its next chunks a batch like any other, one statement (``ChunkLog``).
    opened: tuple[str, str] | None = None


class TurnHost(Protocol):
    """What a turn (and the recovery of one) needs of the session it runs in.

    A protocol rather than the session class so that the engine's modules import one way:
    the session drives turns, turns never import the session.
    """

    id: str
    #: (agent, instance name): with the operation and call ids, what a tool call's key is made of.
    instance_key: tuple[str, str]
    db: Database
    clock: Clock
    agent: Agent
    policy: InputPolicy
    host: Any  # the harness, for tools that drive other instances (think_server.harness.turn._toolcall)

    def publish(self, event: HarnessEvent) -> None: ...

    def hooks(self, operation_id: str = "") -> TurnHooks: ...

    async def server_tools(self, operation_id: str = "") -> dict[str, Tool]: ...

    async def write_settlement(self, tx: Tx, operation_id: str, outcome: Outcome,
                               held: str | None = None) -> None: ...

    def on_message_persisted(self, msg: UIMessage, parent_id: str | None) -> UIMessage: ...

    def model_view(self, messages: Sequence[UIMessage], ids: Sequence[str]) -> Sequence[UIMessage]: ...

    async def compact_for_overflow(self) -> bool: ...

    async def system_for_model(self, system: str | None) -> str | None: ...

    def steer_waiting(self) -> bool: ...
