"""Full-text search over a session's messages: what a hit is, and the statement every backend has."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

__all__ = ["SearchHit", "SearchReads"]


@dataclass(frozen=True, slots=True)
class SearchHit:
    message_id: str
    role: str
    #: The words around the match, matched words between ``**``; ``…`` where text was left out.
    snippet: str
    created_at: int


class SearchReads(Protocol):
    async def search_messages(self, session_id: str, text: str, limit: int) -> list[SearchHit]:
        """Messages of the session (any branch) whose text parts hold every word of ``text``, in any
        order and stemmed ("run" finds "running"), newest first, at most ``limit``. Nothing a client
        types is query syntax; text with no word finds nothing."""
        ...
