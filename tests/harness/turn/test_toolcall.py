"""What a running server tool knows of its call (``current_tool_call``): its idempotency key is made
of the agent, the instance, the operation and the call, so that no two calls share one (the same
run again after a crash keeps it: tests/e2e/test_tool_call_key.py kills a real server for that)."""

from __future__ import annotations

import json
import uuid
from pathlib import Path

import pytest

from think_server.harness import Agent, Harness, RunningCall, ScriptedModel, current_tool_call, tool, tool_call_key

# A call id the model repeats (as some do): only the operation, instance and agent tell the calls apart.
SCRIPT = ScriptedModel({"rules": [{"match": "*", "steps": [
    [{"tool_call": {"id": "call-1", "name": "note_key", "input": {}}}], [{"text": ["{result}"]}]]}]})


@tool
async def note_key() -> dict[str, str]:
    """Tell the key of this call."""
    call = current_tool_call.get()
    assert isinstance(call, RunningCall)
    return {"key": call.key, "id": call.tool_call_id}


async def test_every_call_of_every_agent_instance_and_operation_has_its_own_key(tmp_path: Path) -> None:
    agents = {"shop": Agent(tools=[note_key]), "bank": Agent(tools=[note_key])}
    seen: dict[tuple[str, str, str], str] = {}
    async with Harness(agents, data_dir=tmp_path / "data", model=SCRIPT) as h:
        for agent in ("shop", "bank"):
            for instance in ("alice", "bob"):
                for op in ("op-1", "op-2"):  # a session each: one call id per transcript
                    await h.sessions(agent, instance).create(f"for-{op}")
                    s = h.session(agent, instance, f"for-{op}")
                    await s.submit("pay", operation_id=op)
                    result = await s.wait(op, timeout=30)
                    assert result.outcome == "done"
                    told = json.loads(result.text)
                    assert told["id"] == "call-1"
                    key = told["key"]
                    assert key == tool_call_key(agent, instance, op, "call-1")
                    seen[(agent, instance, op)] = key
    assert len(set(seen.values())) == 8, "the same call id in another operation, instance or agent: another key"
    assert all(uuid.UUID(k).version == 5 and len(k) == 36 for k in seen.values())


@pytest.mark.parametrize(("a", "b"), [
    (("a:b", "c", "op", "call"), ("a", "b:c", "op", "call")),
    (("a", "b", "op/x", "call"), ("a", "b", "op", "x/call")),
    (("a", "b", 'op", "x', "call"), ("a", "b", "op", 'x", "call')),
])
def test_names_that_would_join_the_same_give_different_keys(a: tuple[str, str, str, str],
                                                             b: tuple[str, str, str, str]) -> None:
    assert tool_call_key(*a) != tool_call_key(*b)
    assert tool_call_key(*a) == tool_call_key(*a), "a function of the four names only"


def test_outside_a_tool_there_is_no_call() -> None:
    assert current_tool_call.get() is None
