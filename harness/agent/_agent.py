"""Agent definitions: what a user writes to serve an agent."""

from __future__ import annotations

import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import Any, TypeAlias

from .._model import Model
from .._tools import Tool
from ..memory import Compaction, Memory
from ..toolsets import McpServer, WorkspaceTools
from ._busy import DEFAULT_DEBOUNCE_MS, WhenBusy, check_when_busy
from ._hooks import HookContext, HookError, HookFn, call_hook
from ._recovery_policy import RecoveryPolicy

__all__ = ["Agent"]

Tools: TypeAlias = Sequence[Tool] | Mapping[str, Tool]


@dataclass(frozen=True)
class Agent:
    """One agent: its model, system prompt, tools and step budget, and its hooks.

    ``model`` is a :class:`Model` or a spec string such as
    ``"scripted:path/to/script.json"``; ``None`` takes the server's default.
    ``model``, ``system`` and ``tools`` may also be functions of a
    :class:`~think_server.harness.HookContext` (sync or async), asked at every turn.
    The hooks (README "Hooks") are all optional.
    """

    model: Model | str | Callable[[HookContext], Any] | None = None
    system: str | Callable[[HookContext], Any] | None = None
    tools: Tools | Callable[[HookContext], Any] = ()
    max_steps: int = 10
    recovery: RecoveryPolicy = field(default_factory=RecoveryPolicy)
    before_turn: HookFn | None = None
    before_tool_call: HookFn | None = None
    after_tool_call: HookFn | None = None
    on_step_finish: HookFn | None = None
    on_chunk: HookFn | None = None
    on_turn_end: HookFn | None = None
    on_error: HookFn | None = None
    classify_error: HookFn | None = None
    on_recovery: HookFn | None = None
    #: How long conversations are compacted (README "Long conversations and memory"); None: the
    #: defaults, and only on demand or when the model says its context is full.
    compaction: Compaction | None = None
    #: Memory blocks in the system prompt, and the tools the model writes them with (README
    #: "Long conversations and memory").
    memory: Memory | None = None
    #: The workspace's tools and limits (README "Workspace"); None: no tools (code may still use
    #: the instance's workspace, with the default limits).
    workspace: WorkspaceTools | None = None
    #: What new input does while a turn runs or waits (README "When the user types while the
    #: agent works"); a submission may choose otherwise.
    when_busy: WhenBusy = "queue"
    #: For ``when_busy="debounce"``: the quiet period after the newest input, in milliseconds.
    debounce_ms: int = DEFAULT_DEBOUNCE_MS
    #: MCP servers whose tools join the agent's (README "MCP tools").
    mcp: Sequence[McpServer] = ()

    def __post_init__(self) -> None:
        if self.max_steps < 1:
            raise ValueError(f"max_steps must be at least 1, got {self.max_steps}")
        check_when_busy(self.when_busy, "Agent(when_busy=...)")
        if isinstance(self.debounce_ms, bool) or not isinstance(self.debounce_ms, int) or self.debounce_ms < 0:
            raise ValueError(f"Agent(debounce_ms=...) must be a whole number of milliseconds >= 0; "
                             f"got {self.debounce_ms!r}")
        for name in ("before_turn", "before_tool_call", "after_tool_call", "on_step_finish", "on_chunk",
                     "on_turn_end", "on_error", "classify_error", "on_recovery"):
            hook = getattr(self, name)
            if hook is not None and not callable(hook):
                raise TypeError(f"Agent({name}=...) must be a function of one context; got {type(hook).__name__}")
        if isinstance(self.model, str):
            object.__setattr__(self, "model", _beside_caller(self.model))

    @property
    def dynamic_model(self) -> bool:
        return callable(self.model) and not isinstance(self.model, Model)

    def tool_map(self) -> dict[str, Tool]:
        """The agent's tools when they are fixed; see :meth:`tools_for` for tools chosen per turn."""
        if callable(self.tools):
            raise TypeError("this agent's tools are chosen per turn: use tools_for(context)")
        return _tool_map(self.tools)

    async def tools_for(self, ctx: HookContext) -> dict[str, Tool]:
        if not callable(self.tools):
            return _tool_map(self.tools)
        chosen = await call_hook("tools", self.tools, ctx)
        if not isinstance(chosen, Sequence | Mapping) or isinstance(chosen, str | bytes):
            raise HookError(f"tools must give a list or a mapping of tools; got {type(chosen).__name__}")
        tools = _tool_map(chosen)
        if not all(isinstance(t, Tool) for t in tools.values()):
            raise HookError("tools must give Tool objects (made with @tool or client_tool)")
        return tools

    async def system_for(self, ctx: HookContext) -> str | None:
        if not callable(self.system):
            return self.system
        chosen = await call_hook("system", self.system, ctx)
        if chosen is not None and not isinstance(chosen, str):
            raise HookError(f"system must give a string or None; got {type(chosen).__name__}")
        return chosen

    async def model_for(self, ctx: HookContext) -> Model | str | None:
        """The model a function ``model`` chose (a Model or a spec string), or None for the default."""
        if not self.dynamic_model:
            return None
        assert callable(self.model)
        chosen = await call_hook("model", self.model, ctx)
        if chosen is not None and not isinstance(chosen, Model | str):
            raise HookError(f"model must give a Model, a 'provider:argument' string or None; got "
                            f"{type(chosen).__name__}")
        return chosen


def _tool_map(tools: Tools) -> dict[str, Tool]:
    if isinstance(tools, Mapping):
        return dict(tools)
    return {t.name: t for t in tools}


def _beside_caller(spec: str) -> str:
    """A ``scripted:`` spec with a relative path, read as relative to the file that defines the agent
    (where its author keeps the script), when the script is there; else as given (relative to the
    current directory, as ``--model`` is; a missing file is refused at start, naming it)."""
    provider, sep, path = spec.partition(":")
    if provider != "scripted" or not sep or not path or Path(path).is_absolute():
        return spec
    frame: FrameType | None = sys._getframe(1)
    here = Path(__file__).resolve().parent.parent  # the harness: its frames are not the author's
    while frame is not None:
        name = frame.f_code.co_filename
        if not name.startswith("<") and not Path(name).resolve().is_relative_to(here):
            candidate = Path(name).resolve().parent / path
            return f"scripted:{candidate}" if candidate.is_file() else spec
        frame = frame.f_back
    return spec
