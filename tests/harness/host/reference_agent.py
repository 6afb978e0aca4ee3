"""The agent the harness's host tests drive: the reference script (tests/fixtures), a server tool that
needs approval (``transferFunds``) and a client tool (``getLocation``), as the conformance agent has."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from think_server.harness import Agent, Harness, ScriptedModel, client_tool, tool

SCRIPT = Path(__file__).parents[2] / "fixtures" / "reference-script.json"


@tool(name="transferFunds", needs_approval=True)
def transfer_funds(amount: float, to: str) -> str:
    """Move money.

    Args:
        amount: How much.
        to: To whom.
    """
    return f"sent {amount:g} to {to}"


get_location = client_tool("getLocation", "Where the user is.", {"type": "object", "properties": {}})


def make(tmp_path: Path, *, hooks: dict[str, Any] | None = None, **kw: Any) -> Harness:
    """A harness of the agent ``assistant`` on ``tmp_path``; ``hooks``: the agent's (``on_step_finish=``...)."""
    agents = {"Assistant": Agent(system="Be brief.", tools=[transfer_funds, get_location], **(hooks or {}))}
    return Harness(agents, data_dir=tmp_path, model=ScriptedModel(SCRIPT), **kw)
