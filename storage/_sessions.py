"""Sessions: the per-conversation settings the harness remembers. Their rows, and the
statements every backend has for them."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

__all__ = ["SessionInfoRow", "SessionReads", "SessionRow", "SessionWrites"]


@dataclass(frozen=True, slots=True)
class SessionRow:
    id: str
    client_tools_json: str | None
    last_body_json: str | None
    last_terminal_json: str | None


@dataclass(frozen=True, slots=True)
class SessionInfoRow:
    """A session as listed: its id, times, and how many messages its tree holds."""

    id: str
    created_at: int
    updated_at: int
    message_count: int
    title: str | None = None
    last_message_at: int | None = None  # when a message of it was last written (added or updated); None: none


class SessionReads(Protocol):
    async def sessions(self) -> list[SessionInfoRow]:
        """Every session with a row, oldest first."""
        ...

    async def sessions_with_open_work(self) -> list[str]:
        """Sessions with an operation pending or running."""
        ...

    async def session(self, session_id: str) -> SessionRow | None: ...


class SessionWrites(Protocol):
    async def ensure_session(self, session_id: str, now: int) -> None: ...

    async def create_session(self, session_id: str, now: int) -> bool:
        """A new session row; False (and nothing written) if the id is taken."""
        ...

    async def delete_session(self, session_id: str) -> bool:
        """Delete a session and everything it holds (messages, streams, operations, tool calls, schedules,
        compactions, its context blocks)."""
        ...

    async def set_session_title(self, session_id: str, title: str | None, now: int) -> bool:
        """Name the session (None: no name); False if there is no such session."""
        ...

    async def set_client_tools(self, session_id: str, client_tools_json: str | None, now: int) -> None: ...

    async def set_last_body(self, session_id: str, last_body_json: str | None, now: int) -> None: ...

    async def set_last_terminal(self, session_id: str, last_terminal_json: str | None, now: int) -> None: ...

    async def reset_session(self, session_id: str, now: int) -> None:
        """Forget the session's remembered tools, body and terminal record."""
        ...
