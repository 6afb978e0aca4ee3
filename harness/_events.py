"""What a session tells its listeners, always after the state it describes is committed.

Listeners are plain callables run synchronously in commit order; they must not
block (an adapter serializes a frame and puts it on its sockets' queues).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeAlias

from think_server.protocol import UIMessage

from ._outcomes import WaitingCall

__all__ = [
    "ChunksCommitted",
    "Compacted",
    "HarnessEvent",
    "Listener",
    "MessagePersisted",
    "MessageUpdated",
    "ModelCallFinished",
    "OperationQueued",
    "OperationSettled",
    "RunStarted",
    "SessionReset",
    "StreamStarted",
    "ToolCallFinished",
    "TranscriptChanged",
]


@dataclass(frozen=True, slots=True)
class OperationQueued:
    """An operation was accepted (durably) and waits its turn in the session's queue."""

    operation_id: str


@dataclass(frozen=True, slots=True)
class RunStarted:
    """An operation left the queue and its turn began (before any chunk)."""

    operation_id: str
    message_id: str
    continuation: bool
    prior: tuple[str, ...] = ()  # chunks the wire stream already holds (a recovered operation)
    recovering: bool = False  # the operation is being continued after an interruption


@dataclass(frozen=True, slots=True)
class StreamStarted:
    """The first chunk of an operation's wire stream is committed."""

    operation_id: str


@dataclass(frozen=True, slots=True)
class ChunksCommitted:
    """UI chunks (JSON texts) of an operation, numbered from ``first_seq``."""

    operation_id: str
    first_seq: int
    bodies: list[str]


@dataclass(frozen=True, slots=True)
class MessagePersisted:
    message: UIMessage


@dataclass(frozen=True, slots=True)
class MessageUpdated:
    """A stored message changed outside a turn's stream (a tool answer applied)."""

    message: UIMessage


@dataclass(frozen=True, slots=True)
class OperationSettled:
    operation_id: str
    status: str  # completed | error | aborted | skipped
    outcome: str  # done | unanswered
    reason: str | None
    message_ids: tuple[str, ...]  # the user messages the operation carried
    waiting: tuple[WaitingCall, ...] = ()  # what an awaiting_* turn waits on


@dataclass(frozen=True, slots=True)
class SessionReset:
    pass


@dataclass(frozen=True, slots=True)
class TranscriptChanged:
    """The transcript changed in a way no single message describes (messages written without
    a turn, say): re-read it."""


@dataclass(frozen=True, slots=True)
class Compacted:
    """A summary now stands, in what the model reads, for the messages ``from_message_id`` to
    ``to_message_id`` (stored and shown as they were). ``reason``: requested, threshold, overflow."""

    compaction_id: str
    from_message_id: str
    to_message_id: str
    tokens_before: int
    tokens_after: int
    reason: str


@dataclass(frozen=True, slots=True)
class ModelCallFinished:
    """A model call ended (``outcome``: completed, error, aborted, stalled) after ``seconds``."""

    operation_id: str
    seconds: float
    outcome: str


@dataclass(frozen=True, slots=True)
class ToolCallFinished:
    operation_id: str
    tool: str
    seconds: float
    ok: bool


HarnessEvent: TypeAlias = (
    OperationQueued
    | RunStarted
    | StreamStarted
    | ChunksCommitted
    | MessagePersisted
    | MessageUpdated
    | OperationSettled
    | SessionReset
    | TranscriptChanged
    | Compacted
    | ModelCallFinished
    | ToolCallFinished
)
Listener: TypeAlias = Callable[[HarnessEvent], None]
