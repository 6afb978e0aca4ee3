"""Exceptions raised by the protocol package, and how validation failures are worded."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from pydantic import ValidationError

__all__ = ["AssemblyError", "ProtocolError"]


class ProtocolError(ValueError):
    """Input that does not follow the wire protocol (bad JSON, wrong shape, wrong field type).

    When the bad input was a recognisable frame, `frame_type` and `frame_id`
    (its string `id`, if any) are set, so a server can still answer a
    malformed `cf_agent_use_chat_request` with an error for that request id.
    """

    def __init__(self, message: str, *, frame_type: str | None = None, frame_id: str | None = None) -> None:
        super().__init__(message)
        self.frame_type = frame_type
        self.frame_id = frame_id


class AssemblyError(ProtocolError):
    """A chunk sequence the AI SDK's stream processor would reject (e.g. a delta without a start)."""


def describe_value(value: Any) -> str:
    """A short, log-safe description of an offending value: its JSON type and a clipped repr."""
    kind = _json_type(value)
    if value is None or isinstance(value, (bool, int, float)):
        return kind if value is None else f"{kind} {value!r}"
    if isinstance(value, str):
        text = value if len(value) <= 40 else value[:37] + "..."
        return f"{kind} {text!r}"
    return kind


def _json_type(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, (int, float)):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    if isinstance(value, dict):
        return "object"
    return type(value).__name__


def format_loc(loc: Iterable[int | str], skip: frozenset[str] = frozenset()) -> str:
    """`('parts', 0, 'text')` -> `parts[0].text`; union tags in `skip` are not field names."""
    out = ""
    for item in loc:
        if isinstance(item, int):
            out += f"[{item}]"
        elif item in skip:
            continue
        else:
            out += f".{item}" if out else item
    return out


def from_validation_error(
    exc: ValidationError,
    what: str,
    *,
    skip: frozenset[str] = frozenset(),
    frame_type: str | None = None,
    frame_id: str | None = None,
) -> ProtocolError:
    """Turn pydantic's report into one readable line naming the first offending field."""
    errors = exc.errors(include_url=False)
    first = errors[0]
    where = format_loc(first["loc"], skip)
    field = f" field {where!r}:" if where else ""
    got = describe_value(first.get("input"))
    more = f" (and {len(errors) - 1} more problem(s))" if len(errors) > 1 else ""
    if first["type"] == "missing":
        text = f"{what}:{field} required field is missing{more}"
    elif first["type"] == "value_error":  # a rule of ours (think_server.protocol._ids): its words say what came
        text = f"{what}:{field} {first['msg'].removeprefix('Value error, ')}{more}"
    else:
        text = f"{what}:{field} {_lower_first(first['msg'])}, got {got}{more}"
    return ProtocolError(text, frame_type=frame_type, frame_id=frame_id)


def _lower_first(text: str) -> str:
    return text[:1].lower() + text[1:]
