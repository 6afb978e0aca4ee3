"""The demo agent `make run` serves when no --app is given.

It runs on the offline scripted model (``demo_assistant.json`` beside this file)
unless the server is started with ``--model``, and shows every kind of part the
chat page renders: a greeting, reasoning, a server tool (``getWeather``), a
client tool the browser answers (``getBrowserTime``), a tool that needs the
user's approval (``sendMoney``), a file it writes in its workspace (``write``:
the page's Files panel shows it), a slow stream to stop or to reload in the
middle of, and an echo of anything else.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from think_server.harness import Agent, WorkspaceTools, client_tool, tool

__all__ = ["DEMO_AGENTS", "DEMO_SCRIPT", "DEMO_TOOLS"]

DEMO_SCRIPT = Path(__file__).with_name("demo_assistant.json")


@tool(name="getWeather")
def get_weather(city: str) -> dict[str, Any]:
    """Get today's weather for a city (canned demo data, no network).

    Args:
        city: The city's name, e.g. Paris.
    """
    return {"city": city, "temperature": 22, "unit": "celsius", "condition": "sunny", "source": "demo data"}


@tool(name="sendMoney", needs_approval=True)
def send_money(amount: float, to: str) -> dict[str, Any]:
    """Send money to someone (pretend: nothing is sent); the user must approve each call.

    Args:
        amount: How much, in euros.
        to: Who gets it.
    """
    whole = float(amount).is_integer()
    return {"sent": True, "amount": int(amount) if whole else amount, "to": to, "note": "demo: no money moved"}


get_browser_time = client_tool(
    "getBrowserTime",
    "Ask the user's browser for its local time and time zone.",
    {"type": "object", "properties": {}, "additionalProperties": False},
)

DEMO_TOOLS = [get_weather, get_browser_time, send_money]

DEMO_AGENTS: dict[str, Agent] = {
    "assistant": Agent(
        system=(
            "You are a helpful assistant. Use getWeather for weather questions, getBrowserTime to learn "
            "the user's local time, and sendMoney only when the user asks to send money. Keep notes "
            "in the workspace's files when the user asks you to."
        ),
        tools=DEMO_TOOLS,
        workspace=WorkspaceTools(),
    )
}
