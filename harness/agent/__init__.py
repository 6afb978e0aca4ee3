"""What a user writes to define an agent: :class:`Agent`, its hooks, its recovery budget and
what new input does while it is busy.

``_agent``: the definition; ``_hooks``: the context each hook is called with and how its answer
is read; ``_recovery_policy``: the budget for recovering interrupted work; ``_busy``: the busy
strategies (``when_busy``). An agent names its compaction, memory blocks, workspace tools and MCP
servers, so this room sits above those.

May import: the top and ``toolsets``, ``memory``, ``providers``.
"""

from __future__ import annotations

from ._agent import Agent
from ._busy import WHEN_BUSY, WhenBusy, check_when_busy
from ._hooks import (
    ChunkContext,
    Classification,
    ErrorContext,
    HookContext,
    HookError,
    RecoveryContext,
    StepContext,
    ToolCallContext,
    ToolDecision,
    TurnConfig,
    TurnContext,
    TurnEndContext,
    call_hook,
    read_classification,
    read_recovery_choice,
)
from ._recovery_policy import RecoveryPolicy

__all__ = [
    "WHEN_BUSY",
    "Agent",
    "ChunkContext",
    "Classification",
    "ErrorContext",
    "HookContext",
    "HookError",
    "RecoveryContext",
    "RecoveryPolicy",
    "StepContext",
    "ToolCallContext",
    "ToolDecision",
    "TurnConfig",
    "TurnContext",
    "TurnEndContext",
    "WhenBusy",
    "call_hook",
    "check_when_busy",
    "read_classification",
    "read_recovery_choice",
]
