"""The agent the chaos run kills: text, reasoning, server tools of both recovery modes, a client
tool and an approval-gated tool, all offline on the scripted model.

The first word of a user message picks the rule (``story``, ``ponder``, ``rerun``, ``report``,
``pair``, ``locate``, ``transfer``). Every word the model streams is distinct within its answer,
so a checker can find each word a client saw in the stored transcript.

Tool calls are told apart across branches and process deaths by a ``key`` the model edge adds
to each call's input: ``<operation id>/<tool call id>``. (The scripted model derives call ids
from the transcript, so a regenerated answer reuses its sibling's ids; the key does not.) Each
run of a server tool appends a JSON line ``{"ev": "start"|"end", "tool", "key", "run"}`` to
``$THINK_CHAOS_LOG``, and its output names its ``run``: a checker can tell which run a recorded
result came from, and how often each call ran.
"""

from __future__ import annotations

import asyncio
import json
import os
import uuid
import zlib
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from think_server.harness import (
    Agent,
    Model,
    ModelEvent,
    ModelRequest,
    RecoveryPolicy,
    ScriptedModel,
    ToolCall,
    ToolInputDelta,
    client_tool,
    current_operation,
    tool,
)

AGENT = "chaos"
RERUN_TOOLS = frozenset({"chaosRerun"})
REPORT_TOOLS = frozenset({"chaosReport", "chaosTransfer"})
CLIENT_TOOL = "getLocation"
APPROVAL_TOOL = "chaosTransfer"
#: The first word of a user message, and what the answer does.
RULES = ("story", "ponder", "rerun", "report", "pair", "locate", "transfer")


def _words(prefix: str, n: int) -> list[str]:
    return [f"{prefix}{i} " for i in range(n)]


SCRIPT: dict[str, Any] = {
    "rules": [
        {"match": "story", "steps": [[{"text": _words("s", 16), "interval_ms": 15}]]},
        {"match": "ponder", "steps": [[
            {"reasoning": _words("r", 6), "interval_ms": 10},
            {"text": _words("p", 8), "interval_ms": 10},
        ]]},
        {"match": "rerun", "steps": [
            [{"text": _words("before", 3), "interval_ms": 5}, {"tool_call": {"name": "chaosRerun", "input": {"n": 3}}}],
            [{"text": ["Rerun ", "gave ", "{result.value}", "."], "interval_ms": 10}],
        ]},
        {"match": "report", "steps": [
            [{"tool_call": {"name": "chaosReport", "input": {"n": 4}}}],
            [{"text": ["Report ", "saw ", "{result.value}", "."], "interval_ms": 10}],
        ]},
        {"match": "pair", "steps": [
            [{"tool_call": {"name": "chaosRerun", "input": {"n": 5}}},
             {"tool_call": {"name": "chaosReport", "input": {"n": 6}}}],
            [{"text": ["Pair ", "done: ", "{result.value}", "."], "interval_ms": 10}],
        ]},
        {"match": "locate", "steps": [
            [{"tool_call": {"name": CLIENT_TOOL, "input": {}}}],
            [{"text": ["You ", "are ", "in ", "{result.city}", "."], "interval_ms": 10}],
        ]},
        {"match": "transfer", "steps": [
            [{"tool_call": {"name": APPROVAL_TOOL, "input": {"amount": 9}}}],
            [{"text": ["Transferred ", "{result.value}", "."], "interval_ms": 10}],
        ], "denied": [[{"text": ["Transfer ", "cancelled."], "interval_ms": 10}]]},
        {"match": "*", "steps": [[{"text": ["You ", "said: ", "{user}"]}]]},
    ]
}


class KeyedModel(Model):
    """The scripted model, each tool call's input given the ``key`` of that call (see the module doc)."""

    def __init__(self, inner: Model) -> None:
        self.inner = inner

    async def stream(self, request: ModelRequest) -> AsyncIterator[ModelEvent]:
        # The turn runs under its operation's context: the key names the operation that made the call.
        operation = current_operation.get() or "?"
        async for event in self.inner.stream(request):
            if isinstance(event, ToolInputDelta):
                streamed = {**json.loads(event.delta), "key": f"{operation}/{event.tool_call_id}"}
                event = ToolInputDelta(event.tool_call_id, json.dumps(streamed, separators=(",", ":")))
            elif isinstance(event, ToolCall) and isinstance(event.input, dict):
                event = ToolCall(event.tool_call_id, event.tool_name,
                                 {**event.input, "key": f"{operation}/{event.tool_call_id}"})
            yield event


def _log(entry: dict[str, Any]) -> None:
    path = os.environ.get("THINK_CHAOS_LOG")
    if path:
        with Path(path).open("a") as f:
            f.write(json.dumps(entry) + "\n")
            f.flush()


async def _run(name: str, key: str, n: int) -> dict[str, Any]:
    run = uuid.uuid4().hex[:10]
    _log({"ev": "start", "tool": name, "key": key, "run": run})
    # 20-200 ms, the same for every call of one operation every time it runs: kills land inside
    # tool runs too, and the calls of one model call finish together (their commits race).
    await asyncio.sleep((zlib.crc32(key.split("/")[0].encode()) % 180 + 20) / 1000)
    _log({"ev": "end", "tool": name, "key": key, "run": run})
    return {"value": n * 2, "run": run}


@tool(name="chaosRerun", recovery="rerun")
async def chaos_rerun(n: int, key: str) -> dict[str, Any]:
    """Safe to repeat: run again after a crash."""
    return await _run("chaosRerun", key, n)


@tool(name="chaosReport")
async def chaos_report(n: int, key: str) -> dict[str, Any]:
    """Not safe to repeat: reported as interrupted after a crash."""
    return await _run("chaosReport", key, n)


@tool(name=APPROVAL_TOOL, needs_approval=True)
async def chaos_transfer(amount: int, key: str) -> dict[str, Any]:
    """Moves money: runs only once the user approves, never twice."""
    return await _run(APPROVAL_TOOL, key, amount)


agents = {
    AGENT: Agent(
        model=KeyedModel(ScriptedModel(SCRIPT)),
        tools=[chaos_rerun, chaos_report, chaos_transfer, client_tool(CLIENT_TOOL, "Where the user is")],
        # Short backoff: a run spends its time on kills, not on waiting out a backoff.
        recovery=RecoveryPolicy(backoff_ms=20, crash_limit=3),
    )
}
