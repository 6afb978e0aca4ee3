"""Compaction overlays: summaries a model reads in place of older messages. Their row, and the
statements every backend has."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

__all__ = ["CompactionReads", "CompactionRow", "CompactionWrites"]


@dataclass(frozen=True, slots=True)
class CompactionRow:
    id: str
    session_id: str
    from_message_id: str
    to_message_id: str
    summary: str
    tokens_before: int
    created_at: int


class CompactionReads(Protocol):
    async def compactions(self, session_id: str) -> list[CompactionRow]:
        """The session's overlays, oldest first (the newest on a path wins)."""
        ...


class CompactionWrites(Protocol):
    async def insert_compaction(self, row: CompactionRow) -> None: ...

    async def delete_session_compactions(self, session_id: str) -> None: ...
