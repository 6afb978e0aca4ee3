"""Context blocks: named texts in a model's system prompt ("memory"). Their row, and the
statements every backend has.

A block's scope is ``"instance"`` (shared by every session of the instance) or
``"session:<id>"`` (one session's own).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

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


class BlockReads(Protocol):
    async def context_blocks(self, scopes: list[str]) -> list[BlockRow]:
        """The blocks of these scopes, by label."""
        ...


class BlockWrites(Protocol):
    async def set_context_block(self, scope: str, label: str, content: str, now: int) -> None: ...

    async def delete_context_blocks(self, scope: str) -> None: ...
