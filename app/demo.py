"""The demo agent `make run` serves when no --app is given."""

from __future__ import annotations

from pathlib import Path

from harness import Agent

__all__ = ["DEMO_AGENTS", "DEMO_SCRIPT"]

DEMO_SCRIPT = Path(__file__).with_name("demo_assistant.json")

DEMO_AGENTS: dict[str, Agent] = {"assistant": Agent(system="You are a helpful assistant.")}
