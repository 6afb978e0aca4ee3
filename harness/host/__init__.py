from __future__ import annotations

from ._handles import InFlight, PromptResult, SessionHandle, Sessions, SessionState, WouldDeadlock
from ._harness import DataDirInUse, Harness, check_data_dir_free
from ._schedules import Schedule, ScheduleError, ScheduleExists, ScheduleRefused, Schedules
from ._subagents import agent_tool
from ._workspace_handle import WorkspaceHandle

__all__ = [
    "DataDirInUse",
    "Harness",
    "InFlight",
    "PromptResult",
    "Schedule",
    "ScheduleError",
    "ScheduleExists",
    "ScheduleRefused",
    "Schedules",
    "SessionHandle",
    "SessionState",
    "Sessions",
    "WorkspaceHandle",
    "WouldDeadlock",
    "agent_tool",
    "check_data_dir_free",
]
