"""What a server tool may know of the call it runs for (the tool call's id, its idempotency key,
the harness it runs in) and how it reports progress: each value given to :func:`report_progress`
reaches the chat as the call's preliminary output (a ``tool-output-available`` chunk with
``preliminary: true``) until the tool returns its final one."""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any

__all__ = ["RunningCall", "current_tool_call", "report_progress", "tool_call_key"]

# The namespace of every key (a fixed, random UUID): keys of think-server's calls never equal
# name-based UUIDs another program derives from the same names.
_KEY_NAMESPACE = uuid.UUID("c4854fd5-8d09-4c7a-8c24-692e6bcd0bdf")


def tool_call_key(agent: str, instance: str, operation_id: str, tool_call_id: str) -> str:
    """The idempotency key of one server tool call: a name-based UUID (version 5) of the four.

    Every run of the call has it, a run after a crash or on another node included (all four are
    stored with the call), and no other call has it: an operation id is unique within its instance
    and a tool call id within its operation. Hashed rather than joined, so that it has one length
    and alphabet whatever the names hold (36 characters fit every payment or messaging API's limit,
    and those asking for a UUID take it), and tells the API nothing of the agent, the instance
    or the conversation. The four go in as a JSON array, so no two lists of names join the same.
    """
    return str(uuid.uuid5(_KEY_NAMESPACE, json.dumps([agent, instance, operation_id, tool_call_id])))


@dataclass(frozen=True, slots=True)
class RunningCall:
    tool_call_id: str
    tool_name: str
    #: The harness the turn runs in (its instances, for a tool that drives another agent); None
    #: for an instance opened without one.
    host: Any
    progress: Callable[[Any], None]
    #: The call's idempotency key (:func:`tool_call_key`): the same in every run of this call (a
    #: run again after a crash or a takeover), different for every other call of every instance.
    #: Give it to an outside API that takes one, so that a call run twice acts once.
    key: str
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
