"""Answers to tool calls: client tool results and approvals.

Pure functions on messages: find the call an answer refers to, check that the
answer may be given, and apply it (first write wins: a settled call never
changes again).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from think_server.protocol import ToolApproval, ToolPart, UIMessage

from ._tools import Tool

__all__ = [
    "INTERRUPTED_TOOL_ERROR",
    "MOVED_ON_ERROR",
    "WAITING_STATES",
    "Answer",
    "AnswerRefused",
    "apply_answer",
    "awaiting_calls",
    "check_answer",
    "find_call",
    "last_step_answered",
    "moved_on",
]

INTERRUPTED_TOOL_ERROR = "The tool call was interrupted before a result was recorded."
#: The error a call still waiting for its answer (an approval, a client tool's result) ends with
#: when a new turn starts: the user moved on, and the call never runs after that.
MOVED_ON_ERROR = "The user moved on without answering; this call was not run."
#: The states of a call that waits for its answer.
WAITING_STATES = ("approval-requested", "input-available")
DEFAULT_CLIENT_ERROR = "Tool execution denied by user"


class AnswerRefused(ValueError):
    """An answer that cannot apply; ``reason`` is a stable code, ``str()`` the explanation."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason


@dataclass(frozen=True, slots=True)
class Answer:
    """A client tool's result (``kind="tool-result"``) or an approval decision (``kind="approval"``)."""

    kind: Literal["tool-result", "approval"]
    tool_call_id: str
    output: Any = None
    error_text: str | None = None
    is_error: bool = False
    approved: bool = False
    reason: str | None = None  # a denial's, for the model to read

    def to_json(self) -> dict[str, Any]:
        return {"kind": self.kind, "toolCallId": self.tool_call_id, "output": self.output,
                "errorText": self.error_text, "isError": self.is_error, "approved": self.approved,
                **({"reason": self.reason} if self.reason is not None else {})}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Answer:
        return cls(data["kind"], data["toolCallId"], data.get("output"), data.get("errorText"),
                   bool(data.get("isError")), bool(data.get("approved")), data.get("reason"))


def find_call(messages: Sequence[UIMessage], tool_call_id: str) -> tuple[int, ToolPart] | None:
    """The index of the message holding the call, and its part (latest message first).

    Only assistant messages hold calls: a tool part anywhere else was not made by the model.
    """
    for i in range(len(messages) - 1, -1, -1):
        if messages[i].role != "assistant":
            continue
        for part in messages[i].parts:
            if isinstance(part, ToolPart) and part.toolCallId == tool_call_id:
                return i, part
    return None


def check_answer(messages: Sequence[UIMessage], answer: Answer, server_tools: Mapping[str, Tool]) -> int:
    """Raise :class:`AnswerRefused` unless the answer may apply; the index of the message it changes."""
    found = find_call(messages, answer.tool_call_id)
    if found is None:
        raise AnswerRefused("unknown_tool_call", f"no tool call {answer.tool_call_id!r} in this conversation")
    index, part = found
    name = part.tool_name
    what = "approved or denied" if answer.kind == "approval" else "answered"
    if part.state == "output-error" and part.errorText == MOVED_ON_ERROR:
        raise AnswerRefused("moved_on", f"tool call {answer.tool_call_id!r} can no longer be {what}: a new turn "
                                        "started before it was answered, so it ended without running")
    if index != len(messages) - 1 and part.state in WAITING_STATES:
        # Waiting in an older message (stored before a new turn settled such calls): the same.
        raise AnswerRefused("moved_on", f"tool call {answer.tool_call_id!r} can no longer be {what}: the "
                                        "conversation moved on past it")
    if answer.kind == "tool-result":
        tool = server_tools.get(name)
        if tool is not None and not tool.is_client:
            raise AnswerRefused(
                "not_client_tool",
                f"tool call {answer.tool_call_id!r} is to the server tool {name!r}; its result comes from running it",
            )
        if part.state not in ("input-available", "approval-responded"):
            raise AnswerRefused(
                "already_answered" if part.state.startswith("output") else "not_awaiting_result",
                f"tool call {answer.tool_call_id!r} is {part.state}, not waiting for a result",
            )
    elif part.state != "approval-requested":
        raise AnswerRefused(
            "not_awaiting_approval",
            f"tool call {answer.tool_call_id!r} is {part.state}, not waiting for an approval",
        )
    else:
        tool = server_tools.get(name)
        if tool is None or tool.is_client or not (callable(tool.needs_approval) or tool.needs_approval):
            raise AnswerRefused(
                "not_approval_gated",
                f"tool call {answer.tool_call_id!r} is to {name!r}, which is not a server tool that asks for approval",
            )
    return index


def apply_answer(message: UIMessage, answer: Answer) -> UIMessage:
    """A copy of ``message`` with the answer applied to its call's part."""
    msg = message.model_copy(deep=True)
    for part in msg.parts:
        if not (isinstance(part, ToolPart) and part.toolCallId == answer.tool_call_id):
            continue
        if answer.kind == "approval":
            approval_id = part.approval.id if part.approval is not None else answer.tool_call_id
            # A reason only with a denial that gave one: the part stays as the hook writes it otherwise.
            part.approval = (ToolApproval(id=approval_id, approved=answer.approved, reason=answer.reason)
                             if answer.reason is not None else ToolApproval(id=approval_id, approved=answer.approved))
            part.state = "approval-responded" if answer.approved else "output-denied"
        elif answer.is_error:
            part.state = "output-error"
            part.errorText = answer.error_text or DEFAULT_CLIENT_ERROR
        else:
            part.state = "output-available"
            part.output = answer.output
            part.preliminary = False
        break
    return msg


def last_step_answered(message: UIMessage) -> bool:
    """The message's last step ended in tool calls that all have results (nothing said after them)."""
    last_step: list[Any] = []
    for part in message.parts:
        if part.type == "step-start":
            last_step = []
        else:
            last_step.append(part)
    calls = [p for p in last_step if isinstance(p, ToolPart)]
    return bool(calls) and all(p.state.startswith("output") for p in calls) and isinstance(last_step[-1], ToolPart)


def awaiting_calls(message: UIMessage) -> list[ToolPart]:
    """Calls of the message's last step still waiting for a client result or an approval."""
    last_step: list[ToolPart] = []
    for part in message.parts:
        if part.type == "step-start":
            last_step = []
        elif isinstance(part, ToolPart):
            last_step.append(part)
    return [p for p in last_step if p.state in WAITING_STATES]


def moved_on(message: UIMessage, server_tools: Mapping[str, Tool]) -> UIMessage | None:
    """A copy of ``message`` with every call still waiting for the user ended as
    :data:`MOVED_ON_ERROR`, or None if none waits: an approval not given, a client tool's result
    not sent. (A server call left ``input-available`` is recovery's: it may run again.)

    What the reference repairs before a model call (SEMANTICS §5.6), as our own error: a new turn
    starts, and the model must not see a call without its result, nor a late answer run it.
    """
    waiting = [i for i, p in enumerate(message.parts) if isinstance(p, ToolPart) and (
        p.state == "approval-requested"
        or (p.state == "input-available" and (server_tools.get(p.tool_name) is None
                                             or server_tools[p.tool_name].is_client)))]
    if not waiting:
        return None
    msg = message.model_copy(deep=True)
    for i in waiting:
        part = msg.parts[i]
        assert isinstance(part, ToolPart)
        part.state = "output-error"
        part.errorText = MOVED_ON_ERROR
    return msg
