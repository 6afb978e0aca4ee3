"""What callers get back from a session: receipts, results, refusals, and the words for them."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

from think_server.protocol import UIMessage, message_text, parse_message
from think_server.storage import Database, OperationRow, describe_problem, problem_of

from ._answers import awaiting_calls

__all__ = ["AWAITING_REASONS", "INTERNAL_ERROR", "OperationInfo", "OperationResult", "OperationStatus", "Outcome",
           "Receipt", "SessionBusy", "SubmitRefused", "WaitingCall", "describe_reason", "result_of",
           "status_of", "storage_failure", "stored_text", "stored_waiting", "text_to_store", "waiting_in"]

#: The reason of an operation that failed for a bug: the log has the traceback.
INTERNAL_ERROR = "The assistant failed with an internal error."


class SubmitRefused(ValueError):
    """A submission that cannot be accepted; nothing was written. ``field`` names the argument at fault."""

    def __init__(self, message: str, *, field: str | None = None) -> None:
        super().__init__(message)
        self.field = field


class SessionBusy(SubmitRefused):
    """A change that waits for no turn (writing messages, switching branches) while an operation is open."""


@dataclass(frozen=True, slots=True)
class Receipt:
    operation_id: str
    session: str
    accepted: bool


#: The reasons of a turn that ended waiting for the user: its ``waiting`` calls say for what.
AWAITING_REASONS = ("awaiting_approval", "awaiting_client_tool")


@dataclass(frozen=True, slots=True)
class WaitingCall:
    """A tool call a turn ended waiting on: an approval (``session.approve``/``deny``) or a client
    tool's result (``submit({"type": "tool-result", ...})``)."""

    call_id: str
    tool: str
    input: Any
    kind: Literal["approval", "client_result"]

    def to_json(self) -> dict[str, Any]:
        return {"call_id": self.call_id, "tool": self.tool, "input": self.input, "kind": self.kind}


async def stored_waiting(db: Database, op: OperationRow, message_ids: Sequence[str]) -> tuple[WaitingCall, ...]:
    """What a settled operation that ended waiting for the user waits on now, read from ``db``:
    the calls of its answer (the last of ``message_ids``) still waiting; none once answered."""
    if op.reason not in AWAITING_REASONS or not message_ids:
        return ()
    answer = await db.read.message(op.session_id, message_ids[-1])
    if answer is None or answer.role != "assistant":
        return ()
    return waiting_in(parse_message(json.loads(answer.content)))


def text_to_store(text: str, held: str | None) -> tuple[str | None, int | None]:
    """How a settled answer's ``text`` is stored (``result_text``, ``result_length``): as its length
    when ``held``, the text of its message as written in the same transaction, starts with it (no
    second copy of every answer); in full when its message does not hold it (no message, or one cut
    to fit the row limit)."""
    if not text:
        return None, 0
    if held is not None and held.startswith(text):
        return None, len(text)
    return text, None


async def stored_text(db: Database, op: OperationRow) -> str | None:
    """A settled operation's answer text as stored (None while it is open; see :func:`text_to_store`).

    Read from its message when the row holds only its length: what the message says now, cut to
    that length. A later Continue extends the message past it and leaves this text as it was; an
    edited message gives its edited text (the answer is the message); a deleted one gives ""."""
    if op.result_text is not None or op.result_length is None:
        return op.result_text
    if not op.result_length or op.target_message_id is None:
        return ""
    message = await db.read.message(op.session_id, op.target_message_id)
    if message is None:
        return ""
    return message_text(parse_message(json.loads(message.content)))[:op.result_length]


def waiting_in(message: UIMessage | None) -> tuple[WaitingCall, ...]:
    """The calls of ``message``'s last step that wait for the user now (none once answered)."""
    if message is None:
        return ()
    return tuple(WaitingCall(p.toolCallId, p.tool_name, p.input,
                             "approval" if p.state == "approval-requested" else "client_result")
                 for p in awaiting_calls(message))


OperationStatus = Literal["queued", "running", "completed", "error", "aborted", "skipped"]
Outcome = Literal["done", "unanswered"]


@dataclass(frozen=True, slots=True)
class OperationResult:
    """A settled operation, as :meth:`wait` returns it. The words are those of :class:`OperationInfo`
    (README "Operation statuses"): ``status`` its lifecycle's end, ``outcome`` whether it answered."""

    status: OperationStatus
    outcome: Outcome
    text: str = ""
    reason: str | None = None
    #: What the turn ended waiting on (reason ``awaiting_approval`` / ``awaiting_client_tool``).
    waiting: tuple[WaitingCall, ...] = ()


@dataclass(frozen=True, slots=True)
class OperationInfo:
    """An operation as :meth:`inspect` reports it; ``outcome`` is set once it settled."""

    operation_id: str
    session: str
    kind: str
    status: OperationStatus
    outcome: Outcome | None
    reason: str | None
    text: str | None
    message_ids: tuple[str, ...]
    created_at: int
    started_at: int | None
    settled_at: int | None
    attempts: int
    #: What the turn ended waiting on, while it still waits (reason ``awaiting_approval`` /
    #: ``awaiting_client_tool``); empty once answered.
    waiting: tuple[WaitingCall, ...] = ()

    @property
    def settled(self) -> bool:
        return self.outcome is not None or self.status not in ("queued", "running")

    @classmethod
    def of(cls, row: OperationRow, message_ids: list[str], text: str | None,
           waiting: tuple[WaitingCall, ...] = ()) -> OperationInfo:
        """``text``: the answer's, as :func:`stored_text` reads it."""
        return cls(row.id, row.session_id, row.kind, status_of(row), row.outcome,  # type: ignore[arg-type]
                   row.reason, text, tuple(message_ids), row.created_at, row.started_at,
                   row.completed_at, row.runs, waiting)

    def to_json(self) -> dict[str, Any]:
        return {"operation_id": self.operation_id, "session": self.session, "kind": self.kind,
                "status": self.status, "outcome": self.outcome, "reason": self.reason, "text": self.text,
                "message_ids": list(self.message_ids), "created_at": self.created_at,
                "started_at": self.started_at, "settled_at": self.settled_at, "attempts": self.attempts,
                "waiting": [w.to_json() for w in self.waiting]}


def status_of(row: OperationRow) -> OperationStatus:
    """A stored operation's status in the words every report uses: a pending row is ``queued``."""
    return "queued" if row.status == "pending" else row.status  # type: ignore[return-value]


_REASON_TEXT = {
    "interrupted": "The assistant was interrupted and could not recover. Please try again.",
    "out_of_memory": "The assistant kept failing on this turn and stopped trying. Please try again.",
    "client_role": "Client input may only add user messages.",
    "abandoned": "The interrupted answer was not continued.",
    "moved_on": "That answer came after a new turn had started: the call it answered ended without running.",
}


def describe_reason(reason: str | None) -> str:
    """The text a user is shown for an operation that ended unanswered."""
    if not reason:
        return "The turn failed."
    return _REASON_TEXT.get(reason, reason)


def result_of(status: str, outcome: str | None, text: str | None, reason: str | None,
              waiting: tuple[WaitingCall, ...] = ()) -> OperationResult:
    """A settled operation's result; ``status`` as stored (one of :data:`OperationStatus`, settled)."""
    if outcome == "done":
        return OperationResult(status, "done", text or "", reason)  # type: ignore[arg-type]
    return OperationResult(status, "unanswered", "", reason, waiting)  # type: ignore[arg-type]


def storage_failure(exc: BaseException) -> str | None:
    """The reason a turn that ``exc`` stopped is given, when the disk or the file is to blame; else None."""
    problem = problem_of(exc)
    if problem is None:
        return None
    words = describe_problem(problem)
    later = " Try again later." if problem.transient else ""
    return f"{words[0].upper()}{words[1:]}, so the answer could not be saved.{later}"
