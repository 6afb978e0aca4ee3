"""The SQL of context blocks (rows, scopes and promises: ``storage/_blocks.py``)."""

from __future__ import annotations

from typing import Any

from .._blocks import BlockRow
from ._base import Access

__all__ = ["SqliteBlockReads", "SqliteBlockWrites"]

def _row(r: Any) -> BlockRow:
    return BlockRow(str(r[0]), str(r[1]), str(r[2]), int(r[3]))


class SqliteBlockReads(Access):
    async def context_blocks(self, scopes: list[str]) -> list[BlockRow]:
        slots = ", ".join("?" * len(scopes))
        return [_row(r) for r in await self._fetchall(
            f"SELECT scope, label, content, updated_at FROM context_blocks WHERE scope IN ({slots}) "
            "ORDER BY label, scope", scopes)]


class SqliteBlockWrites(Access):
    async def set_context_block(self, scope: str, label: str, content: str, now: int) -> None:
        await self._execute(
            "INSERT INTO context_blocks (scope, label, content, updated_at) VALUES (?, ?, ?, ?) "
            "ON CONFLICT (scope, label) DO UPDATE SET content = excluded.content, updated_at = excluded.updated_at",
            (scope, label, content, now),
        )

    async def delete_context_blocks(self, scope: str) -> None:
        await self._execute("DELETE FROM context_blocks WHERE scope = ?", (scope,))
