"""Agent definitions: what a user writes to serve an agent."""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from ._model import Model, ToolDefinition

__all__ = ["Agent", "Tool"]

ToolFunction = Callable[..., Any] | Callable[..., Awaitable[Any]]


@dataclass(frozen=True)
class Tool:
    """A tool the model may call.

    With ``execute`` it runs on the server; without it, it is a client tool: the
    model's call settles the turn and the browser answers it.
    """

    name: str
    description: str = ""
    parameters: dict[str, Any] = field(default_factory=lambda: {"type": "object", "properties": {}})
    execute: ToolFunction | None = None
    needs_approval: bool | Callable[[Any], bool] = False
    recovery: Literal["report", "rerun"] = "report"

    @property
    def definition(self) -> ToolDefinition:
        return ToolDefinition(self.name, self.description, self.parameters)

    @property
    def is_client(self) -> bool:
        return self.execute is None

    def approval_needed(self, tool_input: Any) -> bool:
        if callable(self.needs_approval):
            return bool(self.needs_approval(tool_input))
        return self.needs_approval

    async def run(self, tool_input: Any) -> Any:
        if self.execute is None:
            raise RuntimeError(f"tool {self.name!r} has no server implementation")
        kwargs = tool_input if isinstance(tool_input, dict) else {}
        result = self.execute(**kwargs)
        if inspect.isawaitable(result):
            result = await result
        return result


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

    def tool_map(self) -> dict[str, Tool]:
        if isinstance(self.tools, Mapping):
            return dict(self.tools)
        return {t.name: t for t in self.tools}

    def __post_init__(self) -> None:
        if self.max_steps < 1:
            raise ValueError(f"max_steps must be at least 1, got {self.max_steps}")
