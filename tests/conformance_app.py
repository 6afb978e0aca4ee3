"""The agent the conformance checker talks to (../shared/conformance/README.md).

``my-agent``: the scripted model on the reference script, with the three tools
the scenarios use. Served by ``make conformance-server``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from harness import Agent, Tool

SCRIPT = Path(__file__).parent / "fixtures" / "reference-script.json"


def get_weather(city: str) -> dict[str, Any]:
    return {"city": city, "temperature": 22, "condition": "sunny", "unit": "celsius"}


def transfer_funds(amount: float, to: str) -> dict[str, Any]:
    return {"ok": True, "amount": amount, "to": to}


agents = {
    "my-agent": Agent(
        model=f"scripted:{SCRIPT}",
        system="You are the conformance agent.",
        tools=[
            Tool(
                name="getWeather",
                description="Get the weather for a city",
                parameters={"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
                execute=get_weather,
            ),
            Tool(name="getLocation", description="Ask the browser where the user is"),
            Tool(
                name="transferFunds",
                description="Transfer money; needs the user's approval",
                parameters={
                    "type": "object",
                    "properties": {"amount": {"type": "number"}, "to": {"type": "string"}},
                    "required": ["amount", "to"],
                },
                execute=transfer_funds,
                needs_approval=True,
            ),
        ],
    )
}
