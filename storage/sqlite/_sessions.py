"""The SQL of sessions (rows and promises: ``storage/_sessions.py``)."""

from __future__ import annotations

from .._sessions import SessionInfoRow, SessionRow
from ._base import Access
from ._schema import message_updated_at

__all__ = ["ENSURE_SESSION", "SqliteSessionReads", "SqliteSessionWrites"]


class SqliteSessionReads(Access):
    async def sessions(self) -> list[SessionInfoRow]:
        rows = await self._fetchall(
            "SELECT s.id, s.created_at, s.updated_at, "
            "(SELECT count(*) FROM messages m WHERE m.session_id = s.id), s.title, "
            f"(SELECT max({message_updated_at('m')}) FROM messages m WHERE m.session_id = s.id) "
            "FROM sessions s ORDER BY s.created_at, s.id"
        )
        return [SessionInfoRow(r[0], r[1], r[2], r[3], r[4], r[5]) for r in rows]

    async def sessions_with_open_work(self) -> list[str]:
        rows = await self._fetchall(
            "SELECT DISTINCT session_id FROM operations WHERE status IN ('pending', 'running') ORDER BY session_id"
        )
        return [r[0] for r in rows]

    async def session(self, session_id: str) -> SessionRow | None:
        r = await self._fetchone(
            "SELECT id, client_tools_json, last_body_json, last_terminal_json FROM sessions WHERE id = ?",
            (session_id,),
        )
        return None if r is None else SessionRow(r[0], r[1], r[2], r[3])


ENSURE_SESSION = "INSERT INTO sessions (id, created_at, updated_at) VALUES (?, ?, ?) ON CONFLICT (id) DO NOTHING"
SET_LAST_BODY = "UPDATE sessions SET last_body_json = ?, updated_at = ? WHERE id = ?"
SET_LAST_TERMINAL = "UPDATE sessions SET last_terminal_json = ?, updated_at = ? WHERE id = ?"


class SqliteSessionWrites(Access):
    async def ensure_session(self, session_id: str, now: int) -> None:
        await self._execute(ENSURE_SESSION, (session_id, now, now))

    async def create_session(self, session_id: str, now: int) -> bool:
        changed = await self._execute(ENSURE_SESSION, (session_id, now, now))
        return changed > 0

    async def delete_session(self, session_id: str) -> bool:
        await self._execute("DELETE FROM schedules WHERE session_id = ?", (session_id,))
        await self._execute("DELETE FROM tool_calls WHERE session_id = ?", (session_id,))
        await self._execute("DELETE FROM streams WHERE session_id = ?", (session_id,))
        await self._execute("DELETE FROM operations WHERE session_id = ?", (session_id,))
        await self._execute("DELETE FROM messages WHERE session_id = ?", (session_id,))
        await self._execute("DELETE FROM compactions WHERE session_id = ?", (session_id,))
        await self._execute("DELETE FROM context_blocks WHERE scope = ?", (f"session:{session_id}",))
        return await self._execute("DELETE FROM sessions WHERE id = ?", (session_id,)) > 0

    async def set_session_title(self, session_id: str, title: str | None, now: int) -> bool:
        changed = await self._execute("UPDATE sessions SET title = ?, updated_at = ? WHERE id = ?",
                                      (title, now, session_id))
        return changed > 0

    async def set_client_tools(self, session_id: str, client_tools_json: str | None, now: int) -> None:
        await self._execute(
            "UPDATE sessions SET client_tools_json = ?, updated_at = ? WHERE id = ?",
            (client_tools_json, now, session_id),
        )

    async def set_last_body(self, session_id: str, last_body_json: str | None, now: int) -> None:
        await self._execute(SET_LAST_BODY, (last_body_json, now, session_id))

    async def set_last_terminal(self, session_id: str, last_terminal_json: str | None, now: int) -> None:
        await self._execute(SET_LAST_TERMINAL, (last_terminal_json, now, session_id))

    async def reset_session(self, session_id: str, now: int) -> None:
        await self._execute(
            "UPDATE sessions SET client_tools_json = NULL, last_body_json = NULL, last_terminal_json = NULL, "
            "updated_at = ? WHERE id = ?",
            (now, session_id),
        )
