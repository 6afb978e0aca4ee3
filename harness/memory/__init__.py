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
