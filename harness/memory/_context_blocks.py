"""Memory: named text blocks that are part of the system prompt, which code and the model write.

An agent declares its blocks (``Agent(memory=Memory([Block("notes", "What you learned about the
user", limit=2000)]))``). A block belongs to one session, or (``scope="instance"``) to the
instance, shared by its sessions. Blocks are stored in the instance's file: they survive
restarts and a session's reset (the transcript is cleared, not what was learned); deleting a
session deletes its own. Each model call's system prompt ends with the blocks as they are then.

With ``tools=True`` (the default) the model gets four tools: ``memory_set``, ``memory_append``,
``memory_replace`` (in a block that is not ``read_only``) and ``memory_search`` (full-text search
of the conversation, older messages included: what a compaction summarized is still found).
A write over a block's ``limit`` (characters) is refused, and the model is told so.
"""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Literal

from think_server.storage import INSTANCE_SCOPE, SearchHit, session_scope

from .._tools import Tool, tool

__all__ = ["Block", "Memory", "MemoryBlockError", "UnknownBlock", "memory_tools", "render_memory", "scope_of"]

_LABEL = re.compile(r"[a-z][a-z0-9_-]{0,63}")


class MemoryBlockError(ValueError):
    """A write a block does not take: unknown label, over its limit, read-only, text not found."""


class UnknownBlock(MemoryBlockError):
    """The agent declares no block of that label."""


@dataclass(frozen=True)
class Block:
    label: str
    description: str = ""
    #: The most characters the block holds.
    limit: int = 2000
    scope: Literal["session", "instance"] = "session"
    #: The model reads it but its tools may not write it (code still can).
    read_only: bool = False
    #: What the block holds until something is written to it.
    default: str = ""

    def __post_init__(self) -> None:
        if not _LABEL.fullmatch(self.label):
            raise ValueError(f"a block's label must be 1-64 of a-z, 0-9, '_' and '-', starting with a letter; "
                             f"got {self.label!r}")
        if not 1 <= self.limit <= 100_000:
            raise ValueError(f"block {self.label!r}: limit must be from 1 to 100000 characters, got {self.limit}")
        if len(self.default) > self.limit:
            raise ValueError(f"block {self.label!r}: its default is over its limit")


@dataclass(frozen=True)
class Memory:
    blocks: Sequence[Block] = field(default_factory=tuple)
    #: Whether the model gets the memory tools.
    tools: bool = True

    def __post_init__(self) -> None:
        labels = [b.label for b in self.blocks]
        if len(set(labels)) != len(labels):
            raise ValueError(f"block labels must differ; got {labels}")

    def block(self, label: str) -> Block:
        for b in self.blocks:
            if b.label == label:
                return b
        known = ", ".join(b.label for b in self.blocks) or "none"
        raise UnknownBlock(f"no memory block {label!r} (the blocks: {known})")


def scope_of(block: Block, session_id: str) -> str:
    return INSTANCE_SCOPE if block.scope == "instance" else session_scope(session_id)


def render_memory(memory: Memory, contents: dict[str, str]) -> str:
    """The blocks as the system prompt's last section."""
    lines = ["# Memory", "Text blocks kept across this conversation" +
             (" that you can change with the memory_* tools." if memory.tools else ".")]
    for b in memory.blocks:
        text = contents.get(b.label, b.default)
        access = "read-only" if b.read_only or not memory.tools else "writable"
        about = f" ({b.description})" if b.description else ""
        lines.append(f"\n## {b.label}{about} [{len(text)}/{b.limit} chars, {access}]\n{text}")
    return "\n".join(lines)


class MemoryAccess:
    """What the memory tools need of a session: read and write its blocks, search it."""

    def __init__(self, read: Callable[[], Awaitable[dict[str, str]]], write: Callable[[str, str], Awaitable[None]],
                 search: Callable[[str, int], Awaitable[list[SearchHit]]]) -> None:
        self.read, self.write, self.search = read, write, search


def memory_tools(memory: Memory, access: MemoryAccess) -> list[Tool]:
    """The memory_* tools of a session (see the module's doc)."""

    def writable(label: str) -> Block:
        block = memory.block(label)
        if block.read_only:
            raise MemoryBlockError(f"memory block {label!r} is read-only")
        return block

    async def memory_set(label: str, content: str) -> str:
        """Replace what a memory block holds.

        Args:
            label: The block's label.
            content: Its new content, all of it.
        """
        writable(label)
        await access.write(label, content)
        return f"{label}: {len(content)} chars"

    async def memory_append(label: str, text: str) -> str:
        """Add text at the end of a memory block (a new line).

        Args:
            label: The block's label.
            text: What to add.
        """
        block = writable(label)
        current = (await access.read()).get(label, block.default)
        content = f"{current}\n{text}" if current else text
        await access.write(label, content)
        return f"{label}: {len(content)} chars"

    async def memory_replace(label: str, old: str, new: str) -> str:
        """Replace a piece of text in a memory block (its first occurrence).

        Args:
            label: The block's label.
            old: The exact text to replace.
            new: What replaces it (empty to delete it).
        """
        block = writable(label)
        current = (await access.read()).get(label, block.default)
        if not old or old not in current:
            raise MemoryBlockError(f"{old!r} is not in memory block {label!r}")
        content = current.replace(old, new, 1)
        await access.write(label, content)
        return f"{label}: {len(content)} chars"

    async def memory_search(query: str, limit: int = 5) -> list[dict[str, str]]:
        """Search everything said in this conversation, older messages included.

        Args:
            query: Words to find (all of them, in any form).
            limit: How many messages at most, newest first.
        """
        hits = await access.search(query, max(1, min(limit, 20)))
        return [{"role": h.role, "text": h.snippet} for h in hits]

    return [tool(memory_set), tool(memory_append), tool(memory_replace), tool(memory_search)]
