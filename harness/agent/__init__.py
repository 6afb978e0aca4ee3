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
