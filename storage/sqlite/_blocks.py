"""Statements on context blocks: named texts in a model's system prompt ("memory").

A block's scope is ``"instance"`` (shared by every session of the instance) or
``"session:<id>"`` (one session's own).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ._base import Access

__all__ = ["INSTANCE_SCOPE", "BlockReads", "BlockRow", "BlockWrites", "session_scope"]

INSTANCE_SCOPE = "instance"


def session_scope(session_id: str) -> str:
    return f"session:{session_id}"


@dataclass(frozen=True, slots=True)
class BlockRow:
    scope: str
    label: str
    content: str
    updated_at: int


def _row(r: Any) -> BlockRow:
    return BlockRow(str(r[0]), str(r[1]), str(r[2]), int(r[3]))


class BlockReads(Access):
    async def context_blocks(self, scopes: list[str]) -> list[BlockRow]:
        """The blocks of these scopes, by label."""
        slots = ", ".join("?" * len(scopes))
        return [_row(r) for r in await self._fetchall(
            f"SELECT scope, label, content, updated_at FROM context_blocks WHERE scope IN ({slots}) "
            "ORDER BY label, scope", scopes)]


class BlockWrites(Access):
    async def set_context_block(self, scope: str, label: str, content: str, now: int) -> None:
        await self._execute(
            "INSERT INTO context_blocks (scope, label, content, updated_at) VALUES (?, ?, ?, ?) "
            "ON CONFLICT (scope, label) DO UPDATE SET content = excluded.content, updated_at = excluded.updated_at",
            (scope, label, content, now),
        )

    async def delete_context_blocks(self, scope: str) -> None:
        await self._execute("DELETE FROM context_blocks WHERE scope = ?", (scope,))
