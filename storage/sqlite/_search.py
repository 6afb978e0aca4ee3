"""Full-text search over a session's messages: SQLite FTS5, the ``messages_fts`` index (what a hit
is and what a search promises: ``storage/_search.py``).

A file has the index from its first search on (``SEARCH_INDEX``, built then from the messages it
holds, and kept in step by triggers after): most instances are never searched, and the index cost
every one of them memory and every message written CPU (storage/sqlite/_schema.py, migration 11).
"""

from __future__ import annotations

import sqlite3
from typing import ClassVar

from .._search import SearchHit
from ._base import Access
from ._schema import SEARCH_INDEX

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
    #: True for the statements of an open transaction (``SqliteTx``).
    in_transaction: ClassVar[bool] = False

    async def search_messages(self, session_id: str, text: str, limit: int) -> list[SearchHit]:
        """Messages of the session (any branch) holding every word of ``text``, newest first."""
        query = fts_query(text)
        if query is None:
            return []
        if not await self._indexed():
            if self.in_transaction:  # the index is one more change of the transaction
                await self.make_search_index()
            else:
                await self._link.make_searchable()
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

    async def _indexed(self) -> bool:
        rows = await self._fetchall_by_key("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'messages_fts'")
        return bool(rows)

    async def make_search_index(self) -> None:
        """Inside a transaction: the search index, built from the messages, if the file has none."""
        if await self._indexed():
            return
        for statement in SEARCH_INDEX:
            await self._execute(statement)
