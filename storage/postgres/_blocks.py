"""The SQL of context blocks (rows, scopes and promises: ``storage/_blocks.py``)."""

from __future__ import annotations

from typing import Any

from .._blocks import BlockRow
from ._base import Access, free_text

__all__ = ["PostgresBlockReads", "PostgresBlockWrites"]


def _row(r: Any) -> BlockRow:
    return BlockRow(str(r[0]), str(r[1]), str(r[2]), int(r[3]))


class PostgresBlockReads(Access):
    async def context_blocks(self, scopes: list[str]) -> list[BlockRow]:
        rows = await self._fetch(
            "SELECT scope, label, content, updated_at FROM context_blocks "
            "WHERE instance = $1 AND scope = ANY($2::text[]) ORDER BY label, scope", scopes)
        return [_row(r) for r in rows]


class PostgresBlockWrites(Access):
    async def set_context_block(self, scope: str, label: str, content: str, now: int) -> None:
        self._defer(
            "INSERT INTO context_blocks (instance, scope, label, content, updated_at) VALUES ($1, $2, $3, $4, $5) "
            "ON CONFLICT (instance, scope, label) DO UPDATE SET content = excluded.content, "
            "updated_at = excluded.updated_at", scope, label, free_text(content), now)

    async def delete_context_blocks(self, scope: str) -> None:
        self._defer("DELETE FROM context_blocks WHERE instance = $1 AND scope = $2", scope)
