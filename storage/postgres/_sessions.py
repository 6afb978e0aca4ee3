"""The SQL of sessions (rows and promises: ``storage/_sessions.py``)."""

from __future__ import annotations

import functools

from .._blocks import session_scope
from .._sessions import SessionInfoRow, SessionRow
from ._base import Access

__all__ = ["ENSURE", "PostgresSessionReads", "PostgresSessionWrites", "set_fields"]

# One round trip for everything a session holds: its messages and compactions go with its row
# (their foreign keys cascade), the rest is named here.
_DELETE = """
WITH schedules_gone AS (DELETE FROM schedules WHERE instance = $1 AND session_id = $2),
     tool_calls_gone AS (DELETE FROM tool_calls WHERE instance = $1 AND session_id = $2),
     streams_gone AS (DELETE FROM streams WHERE instance = $1 AND session_id = $2),
     operations_gone AS (DELETE FROM operations WHERE instance = $1 AND session_id = $2),
     blocks_gone AS (DELETE FROM context_blocks WHERE instance = $1 AND scope = $3)
DELETE FROM sessions WHERE instance = $1 AND id = $2
"""


ENSURE = ("INSERT INTO sessions (instance, id, created_at, updated_at) VALUES ($1, $2, $3, $3) "
          "ON CONFLICT (instance, id) DO NOTHING")


@functools.cache
def set_fields(columns: tuple[str, ...]) -> str:
    """The update of a session's ``columns`` (``$2``...), its ``updated_at`` and then its id the last two."""
    sets = ", ".join(f"{c} = ${n}" for n, c in enumerate(columns, 2))
    return (f"UPDATE sessions SET {sets}, updated_at = ${len(columns) + 2} "
            f"WHERE instance = $1 AND id = ${len(columns) + 3}")


class PostgresSessionReads(Access):
    async def sessions(self) -> list[SessionInfoRow]:
        rows = await self._fetch(
            "SELECT s.id, s.created_at, s.updated_at, "
            "(SELECT count(*) FROM messages m WHERE m.instance = $1 AND m.session_id = s.id), s.title, "
            "(SELECT max(m.updated_at) FROM messages m WHERE m.instance = $1 AND m.session_id = s.id) "
            "FROM sessions s WHERE s.instance = $1 ORDER BY s.created_at, s.id")
        return [SessionInfoRow(r[0], r[1], r[2], r[3], r[4], r[5]) for r in rows]

    async def sessions_with_open_work(self) -> list[str]:
        rows = await self._fetch(
            "SELECT DISTINCT session_id FROM operations WHERE instance = $1 AND status IN ('pending', 'running') "
            "ORDER BY session_id")
        return [r[0] for r in rows]

    async def session(self, session_id: str) -> SessionRow | None:
        r = await self._fetchrow(
            "SELECT id, client_tools_json, last_body_json, last_terminal_json FROM sessions "
            "WHERE instance = $1 AND id = $2", session_id)
        return None if r is None else SessionRow(r[0], r[1], r[2], r[3])


class PostgresSessionWrites(Access):
    async def ensure_session(self, session_id: str, now: int) -> None:
        self._defer(ENSURE, session_id, now)

    async def create_session(self, session_id: str, now: int) -> bool:
        changed = await self._execute(
            "INSERT INTO sessions (instance, id, created_at, updated_at) VALUES ($1, $2, $3, $3) "
            "ON CONFLICT (instance, id) DO NOTHING", session_id, now)
        return changed > 0

    async def delete_session(self, session_id: str) -> bool:
        return await self._execute(_DELETE, session_id, session_scope(session_id)) > 0

    async def set_session_title(self, session_id: str, title: str | None, now: int) -> bool:
        changed = await self._execute("UPDATE sessions SET title = $2, updated_at = $3 WHERE instance = $1 AND id = $4",
                                      title, now, session_id)
        return changed > 0

    async def set_client_tools(self, session_id: str, client_tools_json: str | None, now: int) -> None:
        self._defer(set_fields(("client_tools_json",)), client_tools_json, now, session_id)

    async def set_last_body(self, session_id: str, last_body_json: str | None, now: int) -> None:
        self._defer(set_fields(("last_body_json",)), last_body_json, now, session_id)

    async def set_last_terminal(self, session_id: str, last_terminal_json: str | None, now: int) -> None:
        self._defer(set_fields(("last_terminal_json",)), last_terminal_json, now, session_id)

    async def reset_session(self, session_id: str, now: int) -> None:
        self._defer(
            "UPDATE sessions SET client_tools_json = NULL, last_body_json = NULL, last_terminal_json = NULL, "
            "updated_at = $2 WHERE instance = $1 AND id = $3", now, session_id)
