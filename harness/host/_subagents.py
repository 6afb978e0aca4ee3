"""Agents as tools (README "Sub-agents"): a tool that gives a task to another agent instance.

The child runs a turn of its own in its own instance (its own file), named after the parent's
call unless the model names one. Its operation id is derived from the parent's tool call, so
a parent that runs the call again after a crash finds the child's operation (running,
recovering, or done) instead of starting another: nothing runs twice. The child's answer, as
it streams, is the call's preliminary output; its final text is the call's output. A parent
turn that is stopped stops the child's.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
from typing import Any

from think_server.protocol import UIMessage

from .._events import ChunksCommitted, HarnessEvent
from .._logcontext import current_agent, current_instance, current_session
from .._tools import Tool
from ..session import Session
from ..turn import current_tool_call

__all__ = ["agent_tool"]

_PARAMETERS: dict[str, Any] = {
    "type": "object",
    "properties": {
        "task": {"type": "string", "description": "The task, with everything the other agent needs to know."},
        "instance": {"type": "string", "description": "Optional: a name for the other agent's conversation; "
                                                      "the same name again continues it. By default each call "
                                                      "gets a conversation of its own."},
    },
    "required": ["task"],
    "additionalProperties": False,
}


def agent_tool(agent: str, *, name: str | None = None, description: str | None = None,
               instance: str | None = None) -> Tool:
    """A tool that hands a task to ``agent`` (an agent of the same harness) and returns its answer.

    ``instance`` fixes the child instance's name (every call then continues one conversation);
    otherwise the model may name one, or each call gets its own, derived from the call.
    """
    tool_name = name or f"ask_{agent.replace('-', '_')}"
    fixed = instance

    async def execute(task: str, instance: str | None = None) -> str:
        return await _delegate(agent, fixed or instance, task)

    return Tool(tool_name, description or f"Give a task to the {agent} agent and get its answer.",
                parameters=_PARAMETERS, execute=execute, recovery="rerun")


def _derived(*parts: str | None) -> str:
    return hashlib.sha256("\x1f".join(p or "" for p in parts).encode()).hexdigest()


async def _delegate(agent: str, named: str | None, task: str) -> str:
    call = current_tool_call.get()
    if call is None or call.host is None:
        raise RuntimeError("an agent tool runs in a harness turn, on an instance the harness opened")
    parent = (current_agent.get(), current_instance.get(), current_session.get(), call.tool_call_id)
    key = _derived(*parent)
    child = named or f"sub-{key[:24]}"
    # The same call, run again after a crash: the same operation. In the server's namespace
    # (think_server.protocol.SERVER_ID_PREFIXES): no client may submit it into the child first.
    operation_id = f"sub:{key[:32]}"
    text: list[str] = []

    def progress(event: HarnessEvent) -> None:
        if isinstance(event, ChunksCommitted) and event.operation_id == operation_id:
            grew = False
            for body in event.bodies:
                if '"text-delta"' in body:
                    text.append(json.loads(body).get("delta", ""))
                    grew = True
            if grew:
                call.progress({"agent": agent, "instance": child, "status": "working", "text": "".join(text)})

    async with call.host.hold(agent, child) as inst:
        session: Session = await inst.session()
        unsubscribe = session.subscribe(progress)
        try:
            message = UIMessage.model_validate({"id": f"{operation_id}:task", "role": "user",
                                                "parts": [{"type": "text", "text": task}]})
            await session.submit([message], operation_id=operation_id)
            try:
                result = await asyncio.shield(session.wait(operation_id))
            except asyncio.CancelledError:
                if call.aborting():  # the parent was stopped: so is the child (a shutdown keeps both)
                    await asyncio.shield(session.abort(operation_id))
                raise
        finally:
            unsubscribe()
    if result.outcome != "done":
        raise RuntimeError(f"the {agent} agent gave no answer ({result.reason or 'unanswered'})")
    answer: str = result.text
    return answer
