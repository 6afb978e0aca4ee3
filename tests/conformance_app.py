"""The agent the conformance checker talks to (../shared/conformance/README.md).

``my-agent``: the scripted model on the reference script, with the three tools
the scenarios use. Served by ``make conformance-server``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from think_server.harness import Agent, client_tool, tool

SCRIPT = Path(__file__).parent / "fixtures" / "reference-script.json"


@tool(name="getWeather")
def get_weather(city: str) -> dict[str, Any]:
    """Get the weather for a city.

    Args:
        city: The city's name.
    """
    return {"city": city, "temperature": 22, "condition": "sunny", "unit": "celsius"}


@tool(name="transferFunds", needs_approval=True)
def transfer_funds(amount: int | float, to: str) -> dict[str, Any]:
    """Transfer money to someone; needs the user's approval."""
    return {"ok": True, "amount": amount, "to": to}


get_location = client_tool("getLocation", "Ask the browser where the user is")

agents = {
    "my-agent": Agent(
        model=f"scripted:{SCRIPT}",
        system="You are the conformance agent.",
        tools=[get_weather, get_location, transfer_funds],
    )
}
