"""The agent the tool-call key tests kill: a payment-style tool that records its idempotency key.

Each run of ``charge`` appends ``current_tool_call().key`` to ``$THINK_KEY_LOG``, then waits until
the file ``$THINK_KEY_GATE`` exists (the test kills the server while it waits, and lets the run
after the restart through), and answers with the key.
"""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

from think_server.harness import Agent, RecoveryPolicy, ScriptedModel, current_tool_call, tool

SCRIPT = {"rules": [{"match": "*", "steps": [
    [{"tool_call": {"id": "call-charge", "name": "charge", "input": {"cents": 500}}}],
    [{"text": ["Charged under {result}"]}],
]}]}


@tool(recovery="rerun")
async def charge(cents: int) -> str:
    """Charge a card (a stand-in for a payment API that takes an idempotency key).

    Args:
        cents: How much.
    """
    call = current_tool_call.get()
    assert call is not None
    with Path(os.environ["THINK_KEY_LOG"]).open("a") as log:
        log.write(call.key + "\n")
    gate = Path(os.environ["THINK_KEY_GATE"])
    for _ in range(3000):  # a file another process makes: no event to wait on (a minute at most)
        if gate.exists():
            return call.key
        await asyncio.sleep(0.02)
    raise TimeoutError(f"{gate} never appeared")


agents = {"payer": Agent(model=ScriptedModel(SCRIPT), tools=[charge], recovery=RecoveryPolicy(backoff_ms=50))}
