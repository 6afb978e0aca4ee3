"""A turn's calls into its agent's hooks, and what the turn does with their answers.

Kept beside :mod:`think_server.harness.turn._turn` so that the loop reads as the loop: each method here is one
point where user code may look at or change the turn (SEMANTICS.md §9).
"""

from __future__ import annotations

import contextlib
import dataclasses
import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from think_server.protocol import UIMessage

from .._model import Model, ModelRequest, Usage
from .._tools import Tool
from ..agent import (
    Agent,
    ChunkContext,
    Classification,
    ErrorContext,
    HookContext,
    HookError,
    RecoveryContext,
    StepContext,
    ToolCallContext,
    ToolDecision,
    TurnConfig,
    TurnContext,
    TurnEndContext,
    call_hook,
    read_classification,
    read_recovery_choice,
)

__all__ = ["CONTEXT_OVERFLOW", "TurnHooks", "is_context_overflow"]

#: The reason a turn ends with when the model's context is full even after compacting it once.
CONTEXT_OVERFLOW = ("The conversation is too long for the model's context window, even with its older "
                    "messages summarized. Start a new conversation, or clear this one.")

# The messages providers give for a full context (SEMANTICS.md §9.8).
_OVERFLOW = re.compile(
    r"prompt is too long|context[_ ]length[_ ]exceeded|maximum context length|exceeds the maximum number of "
    r"tokens|input token count|reduce the length of|input is too long|too many (?:input )?tokens|context window",
    re.IGNORECASE)


def is_context_overflow(message: str) -> bool:
    """Whether a model error's message says the context is full (a helper for ``classify_error``)."""
    return bool(_OVERFLOW.search(message))


class TurnHooks:
    """The hooks of one turn's agent, each called with the turn's whereabouts."""

    def __init__(self, agent: Agent, *, agent_name: str, instance: str, session: str, operation: str,
                 resolve_model: Callable[[str], Model]) -> None:
        self.agent = agent
        self._where = HookContext(agent=agent_name, instance=instance, session=session, operation=operation)
        self._resolve_model = resolve_model

    @property
    def chooses(self) -> bool:
        """Whether :meth:`choose` asks the agent anything (its model, system or tools are functions)."""
        agent = self.agent
        return agent.dynamic_model or callable(agent.system) or callable(agent.tools)

    def context(self, step: int = 0) -> HookContext:
        return dataclasses.replace(self._where, step=step)

    def _fields(self, step: int) -> dict[str, Any]:
        w = self._where
        return {"agent": w.agent, "instance": w.instance, "session": w.session, "operation": w.operation,
                "step": step}

    # -- what the turn runs with ---------------------------------------------------------------

    async def choose(self, model: Model, system: str | None, tools: dict[str, Tool],
                     ) -> tuple[Model, str | None, dict[str, Tool]]:
        """The model, system prompt and tools of this turn, where the agent chooses them per turn.

        ``tools`` holds the tools fixed for the session (the agent's, when they are fixed, and those a
        browser declared); tools the agent chooses win over a browser's of the same name.
        """
        agent, ctx = self.agent, self.context()
        if agent.dynamic_model:
            chosen = await agent.model_for(ctx)
            if chosen is not None:
                model = self._model("model", chosen)
        if callable(agent.system):
            system = await agent.system_for(ctx)
        if callable(agent.tools):
            tools = {**tools, **await agent.tools_for(ctx)}
        return model, system, tools

    async def before_turn(self, step: int, request: ModelRequest, model: Model, continuation: bool,
                          ) -> tuple[ModelRequest, Model]:
        hook = self.agent.before_turn
        if hook is None:
            return request, model
        ctx = TurnContext(**self._fields(step), messages=request.messages, system=request.system,
                          tools=[t.name for t in request.tools], model=model, continuation=continuation)
        config = TurnConfig.read(await call_hook("before_turn", hook, ctx))
        if config is None:
            return request, model
        changes: dict[str, Any] = {}
        messages = config.ui_messages()
        if messages is not None:
            changes["messages"] = messages
        if config.system is not None:
            changes["system"] = config.system
        if config.active_tools is not None:
            active = set(config.active_tools)
            changes["tools"] = [t for t in request.tools if t.name in active]
        for name in ("tool_choice", "max_output_tokens", "temperature", "reasoning"):
            value = getattr(config, name)
            if value is not None:
                changes[name] = value
        if config.provider_options is not None:
            changes["provider_options"] = dict(config.provider_options)
        if config.model is not None:
            model = self._model("before_turn", config.model)
        return dataclasses.replace(request, **changes), model

    def _model(self, hook: str, chosen: Model | str) -> Model:
        if isinstance(chosen, Model):
            return chosen
        try:
            return self._resolve_model(chosen)
        except ValueError as exc:  # ModelSpecError: an unknown provider, a missing key
            raise HookError(f"{hook} chose the model {chosen!r}, which cannot be used: {exc}") from None

    # -- observing the model -------------------------------------------------------------------

    @property
    def wants_chunks(self) -> bool:
        return self.agent.on_chunk is not None

    async def chunk(self, step: int, chunk: Mapping[str, Any]) -> None:
        if self.agent.on_chunk is not None:
            await call_hook("on_chunk", self.agent.on_chunk, ChunkContext(**self._fields(step), chunk=chunk))

    async def step_finished(self, step: int, message: UIMessage, finish_reason: str,
                            calls: Sequence[tuple[str, str, Any]], usage: Usage | None) -> None:
        hook = self.agent.on_step_finish
        if hook is None:
            return
        tool_calls = [{"tool_call_id": c, "tool_name": n, "input": i} for c, n, i in calls]
        ctx = StepContext(**self._fields(step), message=message.model_copy(deep=True), finish_reason=finish_reason,
                          tool_calls=tool_calls, usage=usage)
        await call_hook("on_step_finish", hook, ctx)

    async def model_failed(self, step: int, error: BaseException) -> Classification:
        """Tell ``on_error``, then ask ``classify_error`` what to do (no classifier: context-overflow
        for the errors :func:`is_context_overflow` knows, else fail)."""
        ctx = ErrorContext(**self._fields(step), error=error, message=str(error))
        if self.agent.on_error is not None:
            await call_hook("on_error", self.agent.on_error, ctx)
        if self.agent.classify_error is None:  # the default: a full context is compacted, anything else fails
            return "context-overflow" if is_context_overflow(str(error)) else "fail"
        return read_classification(await call_hook("classify_error", self.agent.classify_error, ctx))

    # -- tools ---------------------------------------------------------------------------------

    async def before_tool_call(self, step: int, call_id: str, name: str, tool_input: Any) -> ToolDecision:
        hook = self.agent.before_tool_call
        if hook is None:
            return ToolDecision()
        ctx = ToolCallContext(**self._fields(step), tool_name=name, tool_call_id=call_id, input=tool_input)
        return ToolDecision.read(await call_hook("before_tool_call", hook, ctx))

    async def after_tool_call(self, step: int, call_id: str, name: str, tool_input: Any, decision: ToolDecision,
                              output: Any, error: str | None) -> None:
        hook = self.agent.after_tool_call
        if hook is None:
            return
        ctx = ToolCallContext(**self._fields(step), tool_name=name, tool_call_id=call_id, input=tool_input,
                              output=output, error=error, action=decision.action)
        await call_hook("after_tool_call", hook, ctx)

    # -- around the turn -----------------------------------------------------------------------

    async def recovering(self, attempt: int, message: UIMessage | None, text: str) -> bool:
        """Whether an interrupted turn continues (``on_recovery``; without it, always)."""
        hook = self.agent.on_recovery
        if hook is None:
            return True
        ctx = RecoveryContext(**self._fields(0), attempt=attempt, message=message, text=text)
        return read_recovery_choice(await call_hook("on_recovery", hook, ctx)) == "continue"

    async def turn_ended(self, status: str, outcome: str | None, reason: str | None, text: str,
                         message_ids: Sequence[str]) -> None:
        """``on_turn_end``; the turn is over, so a failure here can only be logged (call_hook did)."""
        hook = self.agent.on_turn_end
        if hook is None:
            return
        ctx = TurnEndContext(**self._fields(0), status=status, outcome=outcome, reason=reason, text=text,
                             message_ids=list(message_ids))
        with contextlib.suppress(HookError):  # logged by call_hook, traceback included; nothing is left to end
            await call_hook("on_turn_end", hook, ctx)
