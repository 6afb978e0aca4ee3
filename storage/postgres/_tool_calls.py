"""The SQL of tool calls (rows and promises: ``storage/_tool_calls.py``)."""

from __future__ import annotations

from typing import Any

from .._tool_calls import ToolCallRow
from ._base import Access, free_text

__all__ = ["PostgresToolCallReads", "PostgresToolCallWrites"]

_COLUMNS = "tool_call_id, operation_id, message_id, tool_name, recovery, input_json, state, attempt"


def _row(r: Any) -> ToolCallRow:
    return ToolCallRow(*r)


class PostgresToolCallReads(Access):
    async def running_tool_calls(self, session_id: str, operation_id: str) -> list[ToolCallRow]:
        rows = await self._fetch(
            f"SELECT {_COLUMNS} FROM tool_calls WHERE instance = $1 AND session_id = $2 AND operation_id = $3 "
            "AND state = 'running' ORDER BY started_at, seq", session_id, operation_id)
        return [_row(r) for r in rows]


class PostgresToolCallWrites(Access):
    async def start_tool_call(self, session_id: str, tool_call_id: str, operation_id: str, message_id: str,
                              tool_name: str, recovery: str, input_json: str, now: int) -> None:
        self._defer(
            "INSERT INTO tool_calls AS t (instance, session_id, tool_call_id, operation_id, message_id, tool_name, "
            "kind, recovery, input_json, state, attempt, started_at) "
            "VALUES ($1, $2, $3, $4, $5, $6, 'server', $7, $8, 'running', 1, $9) "
            "ON CONFLICT (instance, session_id, tool_call_id) DO UPDATE SET state = 'running', "
            "attempt = CASE WHEN t.message_id = excluded.message_id THEN t.attempt + 1 ELSE 1 END, "
            "operation_id = excluded.operation_id, message_id = excluded.message_id, tool_name = excluded.tool_name, "
            "recovery = excluded.recovery, input_json = excluded.input_json, output_json = NULL, error_text = NULL, "
            "started_at = excluded.started_at, finished_at = NULL",
            session_id, tool_call_id, operation_id, message_id, tool_name, recovery, input_json, now)

    async def finish_tool_call(self, session_id: str, tool_call_id: str, state: str, output_json: str | None,
                               error_text: str | None, now: int) -> None:
        self._defer(
            "UPDATE tool_calls SET state = $2, output_json = $3, error_text = $4, finished_at = $5 "
            "WHERE instance = $1 AND session_id = $6 AND tool_call_id = $7 AND state = 'running'",
            state, output_json, free_text(error_text), now, session_id, tool_call_id)

    async def delete_session_tool_calls(self, session_id: str) -> None:
        self._defer("DELETE FROM tool_calls WHERE instance = $1 AND session_id = $2", session_id)
