"""A session's memory blocks (``think_server.harness.memory._context_blocks``): read, written, shown to the model.

A mixin of :class:`Session`, which owns what it reads (the database, the agent).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from think_server.storage import Database, SearchHit

from .._clock import Clock
from .._tools import Tool
from ..agent import Agent
from ..memory import Block, Memory, MemoryAccess, MemoryBlockError, memory_tools, render_memory, scope_of

__all__ = ["BlockState", "SessionMemory"]

_NONE = Memory()


@dataclass(frozen=True, slots=True)
class BlockState:
    """One memory block as it is now: its declaration, content and when it was last written
    (None: never; it holds its default)."""

    block: Block
    content: str
    updated_at: int | None

    def to_json(self) -> dict[str, object]:
        b = self.block
        return {"label": b.label, "description": b.description, "scope": b.scope, "limit": b.limit,
                "read_only": b.read_only, "content": self.content, "updated_at": self.updated_at}


class SessionMemory:
    # Set by Session.__init__.
    db: Database
    id: str
    clock: Clock
    agent: Agent

    if TYPE_CHECKING:  # the session's, used here
        async def search(self, query: str, limit: int = 20) -> list[SearchHit]: ...

    @property
    def memory_config(self) -> Memory:
        return self.agent.memory or _NONE

    async def memory(self) -> list[BlockState]:
        """Every memory block the agent declares, as it is now."""
        config = self.memory_config
        if not config.blocks:
            return []
        scopes = sorted({scope_of(b, self.id) for b in config.blocks})
        rows = {} if self.db.fresh else {(r.scope, r.label): r for r in await self.db.read.context_blocks(scopes)}
        out = []
        for b in config.blocks:
            row = rows.get((scope_of(b, self.id), b.label))
            out.append(BlockState(b, row.content if row else b.default, row.updated_at if row else None))
        return out

    async def set_memory(self, label: str, content: str) -> BlockState:
        """Write a block (code may write a read-only one); :class:`MemoryBlockError` if it has no such
        block or ``content`` is over its limit."""
        block = self.memory_config.block(label)
        if len(content) > block.limit:
            raise MemoryBlockError(f"memory block {label!r} holds at most {block.limit} characters; got {len(content)}")
        now = self.clock.now_ms()
        async with self.db.transaction() as tx:
            await tx.ensure_session(self.id, now)
            await tx.set_context_block(scope_of(block, self.id), label, content, now)
        return BlockState(block, content, now)

    async def system_for_model(self, system: str | None) -> str | None:
        """The system prompt a model call gets: the agent's, then the memory blocks as they are now."""
        config = self.memory_config
        if not config.blocks:
            return system
        rendered = render_memory(config, {s.block.label: s.content for s in await self.memory()})
        return f"{system}\n\n{rendered}" if system else rendered

    def _memory_tools(self) -> dict[str, Tool]:
        config = self.memory_config
        if not config.blocks or not config.tools:
            return {}

        async def read() -> dict[str, str]:
            return {s.block.label: s.content for s in await self.memory()}

        async def write(label: str, content: str) -> None:
            await self.set_memory(label, content)

        return {t.name: t for t in memory_tools(config, MemoryAccess(read, write, self.search))}
