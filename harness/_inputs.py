"""What code may submit to a session, and how each form becomes messages or an answer.

``submit`` takes a string, a message (a :class:`~think_server.protocol.UIMessage` or its JSON
object), a list of those, ``{"parts": [...]}`` (a user message of those parts),
or an answer to a tool call: ``{"type": "tool-result", "tool_call_id", "output"}``
or ``{"type": "approval", "tool_call_id" | "approval_id", "approved", "reason"?}``. The same
forms arrive as JSON over HTTP, so the keys are also accepted in the wire's
camelCase (``toolCallId``, ``approvalId``, ``errorText``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypeAlias

from think_server.protocol import ProtocolError, ToolPart, UIMessage, client_id_problem, describe_value, parse_message

from ._answers import Answer

__all__ = ["InputError", "SessionInput", "check_input_id", "parse_input", "resolve_approval"]

#: Anything :func:`parse_input` understands.
SessionInput: TypeAlias = str | UIMessage | Mapping[str, Any] | Sequence[str | UIMessage | Mapping[str, Any]]

_ANSWER_TYPES = ("tool-result", "approval")


class InputError(ValueError):
    """Input that is none of the forms a session takes; the message names what was expected and what came.

    ``field`` names the argument at fault when it is not the input itself (``operation_id``).
    """

    def __init__(self, message: str, *, field: str | None = None) -> None:
        super().__init__(message)
        self.field = field


def check_input_id(value: object, what: str, *, new: bool = False, field: str | None = None) -> None:
    """Refuse an id a client may not send (the rule of :func:`think_server.protocol.check_client_id`), naming it
    ``what``. ``new``: it names something new (an operation, a message), so the server's
    namespace is refused too."""
    problem = client_id_problem(value, new=new)
    if problem is not None:
        raise InputError(f"{what} {problem}", field=field)


def parse_input(value: object, new_id: Callable[[], str], *, client: bool = False) -> list[UIMessage] | Answer:
    """New messages to answer, or a tool answer; ``new_id`` names messages that come without an id.

    ``client``: the ids of an answer are checked as a client's (the messages' ids are checked
    with the rest of a client's messages: :func:`think_server.harness._input.check_client_messages`)."""
    if isinstance(value, Mapping) and value.get("type") in _ANSWER_TYPES:
        return _answer(value, client)
    if isinstance(value, (str, UIMessage, Mapping)):
        return [_message(value, new_id, "input")]
    if isinstance(value, Sequence) and not isinstance(value, (bytes, bytearray)):
        if not value:
            raise InputError("input: expected at least one message, got an empty list")
        return [_message(item, new_id, f"input[{i}]") for i, item in enumerate(value)]
    raise InputError(f"input: expected a string, a message, a list of messages, {{'parts': [...]}} or a tool "
                     f"answer, got {describe_value(value)}")


def _message(value: object, new_id: Callable[[], str], where: str) -> UIMessage:
    if isinstance(value, UIMessage):
        return value
    if isinstance(value, str):
        if not value:
            raise InputError(f"{where}: expected some text, got an empty string")
        return UIMessage(id=new_id(), role="user", parts=[{"type": "text", "text": value}])  # type: ignore[list-item]
    if isinstance(value, Mapping):
        if isinstance(value.get("type"), str) and value.get("type") in _ANSWER_TYPES:
            raise InputError(f"{where}: a tool answer is submitted on its own, not in a list")
        obj = dict(value)
        obj.setdefault("role", "user")
        if obj.get("id") is None:
            obj["id"] = new_id()
        try:
            return parse_message(obj, f"{where}: invalid message")
        except ProtocolError as exc:
            raise InputError(str(exc)) from None
    raise InputError(f"{where}: expected a string or a message object, got {describe_value(value)}")


def _first(obj: Mapping[str, Any], *keys: str) -> Any:
    for key in keys:
        if key in obj:
            return obj[key]
    return None


def _answer(obj: Mapping[str, Any], client: bool) -> Answer:
    kind = obj["type"]
    call = _first(obj, "tool_call_id", "toolCallId")
    approval = _first(obj, "approval_id", "approvalId")
    if (call is not None and not isinstance(call, str)) or call == "":
        raise InputError(f"{kind}: tool_call_id: expected a non-empty string, got {describe_value(call)}")
    if client:  # references to the server's calls, but stored with the answer and echoed in errors
        for name, value in (("tool_call_id", call), ("approval_id", approval)):
            if value is not None:
                check_input_id(value, f"{kind}: {name}")
    if kind == "approval":
        approved = obj.get("approved")
        if not isinstance(approved, bool):
            raise InputError(f"approval: approved: expected true or false, got {describe_value(approved)}")
        reason = obj.get("reason")
        if reason is not None and not isinstance(reason, str):
            raise InputError(f"approval: reason: expected a string, got {describe_value(reason)}")
        if call is None:
            if not isinstance(approval, str) or not approval:
                raise InputError("approval: expected tool_call_id or approval_id (a non-empty string)")
            call = "approval:" + approval  # resolved against the transcript by resolve_approval()
        return Answer("approval", call, approved=approved, reason=reason or None)
    if call is None:
        raise InputError("tool-result: expected tool_call_id (a non-empty string)")
    result = obj.get("result")
    output, error = obj.get("output"), _first(obj, "error_text", "errorText")
    if isinstance(result, Mapping):  # the harness's {ok, output | error} form
        output = result.get("output")
        if result.get("ok") is False:
            error = result.get("error") if isinstance(result.get("error"), str) else str(result.get("error"))
    if error is not None and not isinstance(error, str):
        raise InputError(f"tool-result: error_text: expected a string, got {describe_value(error)}")
    return Answer("tool-result", call, output=output, error_text=error, is_error=error is not None)


def resolve_approval(answer: Answer, messages: Sequence[UIMessage]) -> Answer:
    """An approval given by approval id, pointed at its tool call (unchanged if none matches)."""
    if answer.kind != "approval" or not answer.tool_call_id.startswith("approval:"):
        return answer
    wanted = answer.tool_call_id.removeprefix("approval:")
    for msg in reversed(messages):
        for part in msg.parts:
            if isinstance(part, ToolPart) and part.approval is not None and part.approval.id == wanted:
                return Answer("approval", part.toolCallId, approved=answer.approved, reason=answer.reason)
    return answer
