"""An agent whose answers after an approval and after a client tool stream slowly, so a test can
reload in the middle of a continuation (``--app tests.e2e.usechat_app:agents``)."""

from __future__ import annotations

from tests.conformance_app import get_location, transfer_funds
from think_server.harness import Agent, ScriptedModel

#: Thirty words, a tenth of a second apart, after the tool's result.
SLOW_TAIL = [f"t{i} " for i in range(30)]

SCRIPT = {"rules": [
    {"match": "approve", "steps": [
        [{"tool_call": {"name": "transferFunds", "input": {"amount": 5, "to": "carol"}}}],
        [{"text": ["Sent. ", *SLOW_TAIL], "interval_ms": 100}]]},
    {"match": "ask", "steps": [
        [{"tool_call": {"name": "getLocation", "input": {}}}],
        [{"text": ["You are in {result}. ", *SLOW_TAIL], "interval_ms": 100}]]},
    {"match": "*", "steps": [[{"text": ["You said: {user}"]}]]},
]}

agents = {"my-agent": Agent(model=ScriptedModel(SCRIPT), tools=[get_location, transfer_funds])}
