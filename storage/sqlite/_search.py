"""Full-text search over a session's messages: SQLite FTS5, the ``messages_fts`` index (what a hit
is and what a search promises: ``storage/_search.py``)."""

from __future__ import annotations

import sqlite3

from .._search import SearchHit
from ._base import Access

__all__ = ["SqliteSearchReads", "fts_query"]


def fts_query(text: str) -> str | None:
    """An FTS5 query that finds messages holding every word of ``text`` (in any order, stemmed:
    "run" finds "running"); None if it has no word. Each word is quoted, so nothing a client types
    is FTS syntax (``OR``, ``NEAR``, ``*``, a column filter)."""
    words = text.split()
    if not words:
        return None
    return " ".join('"' + w.replace('"', '""') + '"' for w in words)


class SqliteSearchReads(Access):
    async def search_messages(self, session_id: str, text: str, limit: int) -> list[SearchHit]:
        """Messages of the session (any branch) holding every word of ``text``, newest first."""
        query = fts_query(text)
        if query is None:
            return []
        try:
            rows = await self._fetchall(
                "SELECT m.id, m.role, snippet(messages_fts, 0, '**', '**', '…', 16), m.created_at "
                "FROM messages_fts JOIN messages AS m ON m.seq = messages_fts.rowid "
                "WHERE messages_fts MATCH ? AND m.session_id = ? ORDER BY m.seq DESC LIMIT ?",
                (query, session_id, limit),
            )
        except sqlite3.OperationalError as exc:
            # Words the tokenizer reduces to nothing (punctuation only) make no phrase: no match.
            if "fts5" in str(exc).lower() or "syntax" in str(exc).lower():
                return []
            raise
        return [SearchHit(str(r[0]), str(r[1]), str(r[2]), int(r[3])) for r in rows]
