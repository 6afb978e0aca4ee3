"""What a server tool may know of the call it runs for (the tool call's id, the harness it runs
in) and how it reports progress: each value given to :func:`report_progress` reaches the chat
as the call's preliminary output (a ``tool-output-available`` chunk with ``preliminary: true``)
until the tool returns its final one."""

from __future__ import annotations

from collections.abc import Callable
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any

__all__ = ["RunningCall", "current_tool_call", "report_progress"]


@dataclass(frozen=True, slots=True)
class RunningCall:
    tool_call_id: str
    tool_name: str
    #: The harness the turn runs in (its instances, for a tool that drives another agent); None
    #: for an instance opened without one.
    host: Any
    progress: Callable[[Any], None]
    #: Whether the turn is being aborted (a cancelled call then stops what it started); a call
    #: cancelled for a shutdown is not, and what it started resumes with it.
    aborting: Callable[[], bool] = lambda: False


#: Set by the turn around each server tool call (each runs in a task of its own).
current_tool_call: ContextVar[RunningCall | None] = ContextVar("think_tool_call", default=None)


def report_progress(output: Any) -> None:
    """From inside a server tool: show ``output`` (JSON) as the call's output so far."""
    call = current_tool_call.get()
    if call is None:
        raise RuntimeError("report_progress() is for server tools, while the harness runs them")
    call.progress(output)
