"""Long conversations: what is held of a transcript in memory, what a model is shown of it,
and what the agent keeps across it.

``_history``: a session's transcript in memory (only its end parsed; the rest as ids, lengths and
hashes) and the byte budget every transcript shares. ``_compaction``: a summary in place of older
messages in what a model reads; nothing stored changes. ``_context_blocks``: memory blocks, part
of the system prompt, and the tools a model writes them with. What a session does with them is
in ``think_server.harness.session``.

May import: the top and ``providers`` (it imports only the top).
"""

from __future__ import annotations

from ._compaction import (
    Compaction,
    CompactionError,
    ModelView,
    SummaryRequest,
    overlay_on,
    plan_compaction,
    render_for_summary,
    summarize_with,
    visible_tokens,
)
from ._context_blocks import (
    Block,
    Memory,
    MemoryAccess,
    MemoryBlockError,
    UnknownBlock,
    memory_tools,
    render_memory,
    scope_of,
)
from ._history import Context, History, HistoryBudget, parse_text

__all__ = [
    "Block",
    "Compaction",
    "CompactionError",
    "Context",
    "History",
    "HistoryBudget",
    "Memory",
    "MemoryAccess",
    "MemoryBlockError",
    "ModelView",
    "SummaryRequest",
    "UnknownBlock",
    "memory_tools",
    "overlay_on",
    "parse_text",
    "plan_compaction",
    "render_for_summary",
    "render_memory",
    "scope_of",
    "summarize_with",
    "visible_tokens",
]
