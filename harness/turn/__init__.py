from __future__ import annotations

from ._recovery import Recovered, recover_operation
from ._toolcall import RunningCall, current_tool_call, report_progress
from ._turn import Turn
from ._turn_hooks import TurnHooks, is_context_overflow
from ._turn_plan import CONTINUING, Outcome, TurnPlan, TurnSuspended, Unsettled, calls_introduced

__all__ = [
    "CONTINUING",
    "Outcome",
    "Recovered",
    "RunningCall",
    "Turn",
    "TurnHooks",
    "TurnPlan",
    "TurnSuspended",
    "Unsettled",
    "calls_introduced",
    "current_tool_call",
    "is_context_overflow",
    "recover_operation",
    "report_progress",
]
