"""Agent definitions: what a user writes to serve an agent."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from ._model import Model
from ._recovery_policy import RecoveryPolicy
from ._tools import Tool

__all__ = ["Agent"]


@dataclass(frozen=True)
class Agent:
    """One agent: its model, system prompt, tools and step budget.

    ``model`` is a :class:`Model` or a spec string such as
    ``"scripted:path/to/script.json"``; ``None`` takes the server's default.
    """

    model: Model | str | None = None
    system: str | None = None
    tools: Sequence[Tool] | Mapping[str, Tool] = ()
    max_steps: int = 10
    recovery: RecoveryPolicy = field(default_factory=RecoveryPolicy)

    def tool_map(self) -> dict[str, Tool]:
        if isinstance(self.tools, Mapping):
            return dict(self.tools)
        return {t.name: t for t in self.tools}

    def __post_init__(self) -> None:
        if self.max_steps < 1:
            raise ValueError(f"max_steps must be at least 1, got {self.max_steps}")
