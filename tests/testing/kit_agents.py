"""The agents the kit's own tests serve (``tests.testing.kit_agents:agents``), their scripts built
with the kit's builder: a slow answer, a slow tool that is never run twice, and one that is run
again after a crash and records its effect before it is done (so a rerun repeats the effect)."""

from __future__ import annotations

import asyncio

from think_server.harness import Agent, RecoveryPolicy, tool
from think_server.testing import ScriptBuilder, record_effect

#: The words of the slow answer, and the answer whole.
WORDS = [f"w{i} " for i in range(30)]
STORY = "".join(WORDS)

SCRIPT = (ScriptBuilder()
          .when("story").say(*WORDS, interval_ms=40)
          .when("pay").call("pay", {"cents": 500}).then_say("Paid: {result}")
          .when("send").call("send", {"to": "ana"}).then_say("Sent: {result}")
          .otherwise().say("You said: {user}"))


@tool
async def pay(cents: int) -> str:
    """Pays, slowly; not safe to repeat (the default recovery: reported as interrupted after a crash).

    Args:
        cents: How much.
    """
    record_effect("charge")
    await asyncio.sleep(1.0)
    return f"{cents} paid"


@tool(recovery="rerun")
async def send(to: str) -> str:
    """Sends a message, slowly; run again after a crash, though it sends before it is done: the
    promise it breaks is the one the crash helper must catch.

    Args:
        to: Whom to.
    """
    record_effect("message")
    await asyncio.sleep(1.0)
    return f"sent to {to}"


agents = {
    "kit": Agent(model=SCRIPT.model(), tools=[pay, send], recovery=RecoveryPolicy(backoff_ms=50, crash_limit=3)),
}
