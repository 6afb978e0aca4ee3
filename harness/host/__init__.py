"""The :class:`Harness`, the one entry point, and the handles code drives its instances with.

``_harness``: the Harness (its agents, the instance registry, start-up recovery, the scheduler);
``_host``: ``InstanceHost``, what the handles need of the harness (a protocol, so that no handle
imports it); ``_handles``: handles on sessions; ``_workspace_handle``: on a workspace;
``_schedules``: on an instance's schedules; ``_subagents``: an agent as a tool, which drives
another instance through the harness.

May import: the top and every other room. Only ``harness/__init__`` imports it.
"""

from __future__ import annotations

from ._handles import InFlight, PromptResult, SessionHandle, Sessions, SessionState, WouldDeadlock
from ._harness import DataDirInUse, Harness, HarnessNotStarted, HarnessState, check_data_dir_free
from ._schedules import Schedule, ScheduleError, ScheduleExists, ScheduleRefused, Schedules
from ._subagents import agent_tool
from ._workspace_handle import WorkspaceHandle

__all__ = [
    "DataDirInUse",
    "Harness",
    "HarnessNotStarted",
    "HarnessState",
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
