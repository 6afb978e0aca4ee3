"""Tool calls: each server call is recorded before it runs. Their row, and the statements every backend has."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

__all__ = ["ToolCallReads", "ToolCallRow", "ToolCallWrites"]


@dataclass(frozen=True, slots=True)
class ToolCallRow:
    tool_call_id: str
    operation_id: str
    message_id: str
    tool_name: str
    recovery: str
    input_json: str
    state: str
    attempt: int


class ToolCallReads(Protocol):
    async def running_tool_calls(self, session_id: str, operation_id: str) -> list[ToolCallRow]:
        """Calls that started and never recorded a result: cut short by a crash (oldest first)."""
        ...


class ToolCallWrites(Protocol):
    async def start_tool_call(self, session_id: str, tool_call_id: str, operation_id: str, message_id: str,
                              tool_name: str, recovery: str, input_json: str, now: int) -> None:
        """Record a call as running before it runs.

        A record with the same id is taken over: the same call run again (one more attempt),
        or a call on another branch that reused the id (models may: the record describes the
        latest call, so a crash during it finds it under its own operation).
        """
        ...

    async def finish_tool_call(self, session_id: str, tool_call_id: str, state: str, output_json: str | None,
                               error_text: str | None, now: int) -> None:
        """Record a running call's result; one that is not running is left as it is."""
        ...

    async def delete_session_tool_calls(self, session_id: str) -> None: ...
