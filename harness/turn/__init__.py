"""One turn: model call, server tools in parallel, model again; and its recovery after a crash.

``_turn``: the loop; ``_turn_plan``: what a turn starts from, how it ends, and what it needs of
its session (``TurnHost``, so that no turn imports the session); ``_turn_tools``: a step's server
tool calls; ``_turn_hooks``: the turn's calls into the agent's hooks; ``_chunklog``: group commit
of the UI chunks; ``_event_chunks``: the chunk a model event becomes; ``_toolcall``: what a
running server tool may know of its call; ``_recovery``: an operation a dead process left
running, rebuilt from durable state.

May import: the top and ``agent``, ``toolsets``, ``memory``, ``providers``.
"""

from __future__ import annotations

from ._marks import THINK_KEY, without_outcome
from ._recovery import Recovered, recover_operation
from ._toolcall import RunningCall, current_tool_call, report_progress, tool_call_key
from ._turn import Turn
from ._turn_hooks import TurnHooks, is_context_overflow
from ._turn_plan import CONTINUING, Outcome, TurnPlan, TurnSuspended, Unsettled, calls_introduced

__all__ = [
    "CONTINUING",
    "THINK_KEY",
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
    "tool_call_key",
    "without_outcome",
]
