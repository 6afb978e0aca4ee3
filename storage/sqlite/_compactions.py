"""Statements on compaction overlays: summaries a model reads in place of older messages."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ._base import Access

__all__ = ["CompactionReads", "CompactionRow", "CompactionWrites"]

_COLUMNS = "id, session_id, from_message_id, to_message_id, summary, tokens_before, created_at"


@dataclass(frozen=True, slots=True)
class CompactionRow:
    id: str
    session_id: str
    from_message_id: str
    to_message_id: str
    summary: str
    tokens_before: int
    created_at: int


def _row(r: Any) -> CompactionRow:
    return CompactionRow(str(r[0]), str(r[1]), str(r[2]), str(r[3]), str(r[4]), int(r[5]), int(r[6]))


class CompactionReads(Access):
    async def compactions(self, session_id: str) -> list[CompactionRow]:
        """The session's overlays, oldest first (the newest on a path wins)."""
        return [_row(r) for r in await self._fetchall(
            f"SELECT {_COLUMNS} FROM compactions WHERE session_id = ? ORDER BY seq", (session_id,))]


class CompactionWrites(Access):
    async def insert_compaction(self, row: CompactionRow) -> None:
        await self._execute(
            f"INSERT INTO compactions ({_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?)",
            (row.id, row.session_id, row.from_message_id, row.to_message_id, row.summary, row.tokens_before,
             row.created_at),
        )

    async def delete_session_compactions(self, session_id: str) -> None:
        await self._execute("DELETE FROM compactions WHERE session_id = ?", (session_id,))
