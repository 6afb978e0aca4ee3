"""The SQL of compaction overlays (rows and promises: ``storage/_compactions.py``)."""

from __future__ import annotations

from typing import Any

from .._compactions import CompactionRow
from ._base import Access, free_text

__all__ = ["PostgresCompactionReads", "PostgresCompactionWrites"]

_COLUMNS = "id, session_id, from_message_id, to_message_id, summary, tokens_before, created_at"


def _row(r: Any) -> CompactionRow:
    return CompactionRow(str(r[0]), str(r[1]), str(r[2]), str(r[3]), str(r[4]), int(r[5]), int(r[6]))


class PostgresCompactionReads(Access):
    async def compactions(self, session_id: str) -> list[CompactionRow]:
        rows = await self._fetch(
            f"SELECT {_COLUMNS} FROM compactions WHERE instance = $1 AND session_id = $2 ORDER BY seq", session_id)
        return [_row(r) for r in rows]


class PostgresCompactionWrites(Access):
    async def insert_compaction(self, row: CompactionRow) -> None:
        self._defer(
            f"INSERT INTO compactions (instance, {_COLUMNS}) VALUES ($1, $2, $3, $4, $5, $6, $7, $8)",
            row.id, row.session_id, row.from_message_id, row.to_message_id, free_text(row.summary), row.tokens_before,
            row.created_at)

    async def delete_session_compactions(self, session_id: str) -> None:
        self._defer("DELETE FROM compactions WHERE instance = $1 AND session_id = $2", session_id)
