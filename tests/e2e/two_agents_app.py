"""Two agents for the page's header test (``--app tests.e2e.two_agents_app:agents``): the demo
assistant on the server's default model, and an ``echo`` agent on a script of its own."""

from __future__ import annotations

from think_server.app.demo import DEMO_AGENTS
from think_server.harness import Agent, ScriptedModel

agents: dict[str, Agent] = {
    "assistant": DEMO_AGENTS["assistant"],
    "echo": Agent(model=ScriptedModel({"rules": [{"match": "*", "steps": [[{"text": ["Echo: {user}"]}]]}]})),
}
