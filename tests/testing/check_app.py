"""The agent ``think-server check`` runs against in the tests: the scripted model with a tool that needs
approval, a rule that calls check's own client tool, and answers long enough to cancel and reload."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from think_server.harness import Agent, tool

SCRIPT = Path(__file__).parent / "check-script.json"
#: The prompts the tests give check: each makes the scripted model do what the option asks for.
APPROVAL_PROMPT = "Please transfer money to bob."
CLIENT_TOOL_PROMPT = "What is the token?"
LONG_PROMPT = "Count slowly."


@tool(name="transferFunds", needs_approval=True)
def transfer_funds(amount: int, to: str) -> dict[str, Any]:
    """Transfer money to someone; needs the user's approval."""
    return {"ok": True, "amount": amount, "to": to}


agents = {"checked": Agent(model=f"scripted:{SCRIPT}", system="You are checked.", tools=[transfer_funds])}
