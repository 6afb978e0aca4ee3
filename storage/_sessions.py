"""Statements on sessions: per-conversation settings the harness remembers."""

from __future__ import annotations

from dataclasses import dataclass

from ._base import Access

__all__ = ["SessionReads", "SessionRow", "SessionWrites"]


@dataclass(frozen=True, slots=True)
class SessionRow:
    id: str
    client_tools_json: str | None
    last_body_json: str | None
    last_terminal_json: str | None


class SessionReads(Access):
    async def session(self, session_id: str) -> SessionRow | None:
        r = await self._fetchone(
            "SELECT id, client_tools_json, last_body_json, last_terminal_json FROM sessions WHERE id = ?",
            (session_id,),
        )
        return None if r is None else SessionRow(r[0], r[1], r[2], r[3])


class SessionWrites(Access):
    async def ensure_session(self, session_id: str, now: int) -> None:
        await self._execute(
            "INSERT INTO sessions (id, created_at, updated_at) VALUES (?, ?, ?) ON CONFLICT (id) DO NOTHING",
            (session_id, now, now),
        )

    async def set_client_tools(self, session_id: str, client_tools_json: str | None, now: int) -> None:
        await self._execute(
            "UPDATE sessions SET client_tools_json = ?, updated_at = ? WHERE id = ?",
            (client_tools_json, now, session_id),
        )

    async def set_last_body(self, session_id: str, last_body_json: str | None, now: int) -> None:
        await self._execute(
            "UPDATE sessions SET last_body_json = ?, updated_at = ? WHERE id = ?",
            (last_body_json, now, session_id),
        )

    async def set_last_terminal(self, session_id: str, last_terminal_json: str | None, now: int) -> None:
        await self._execute(
            "UPDATE sessions SET last_terminal_json = ?, updated_at = ? WHERE id = ?",
            (last_terminal_json, now, session_id),
        )

    async def reset_session(self, session_id: str, now: int) -> None:
        """Forget the session's remembered tools, body and terminal record."""
        await self._execute(
            "UPDATE sessions SET client_tools_json = NULL, last_body_json = NULL, last_terminal_json = NULL, "
            "updated_at = ? WHERE id = ?",
            (now, session_id),
        )
