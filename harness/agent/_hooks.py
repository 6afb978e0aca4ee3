"""Hooks: the calls an agent makes into its user's code during a turn, and what they may answer.

Every hook is a sync or async callable of one context object (:class:`HookContext` or one of
its subclasses, which add the hook's subject). What a hook returns is read here, strictly: a
decision the harness cannot read is the hook's error, named, not a guess. A hook that raises
ends the turn with an error that names it (:class:`HookError`); the traceback goes to the log.
Only ``on_turn_end`` runs after the turn settled: its errors can only be logged.
"""

from __future__ import annotations

import asyncio
import dataclasses
import inspect
import logging
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal, TypeAlias

from think_server.protocol import UIMessage

from .._model import Model, Usage

__all__ = [
    "Classification",
    "ErrorContext",
    "HookContext",
    "HookError",
    "HookFn",
    "RecoveryContext",
    "StepContext",
    "ToolCallContext",
    "ToolDecision",
    "TurnConfig",
    "TurnContext",
    "TurnEndContext",
    "call_hook",
    "read_classification",
    "read_recovery_choice",
]

log = logging.getLogger("think_server.hooks")

#: A hook: a function of its context, sync or async.
HookFn: TypeAlias = Callable[[Any], Any]
Classification = Literal["fail", "retry", "context-overflow"]


class HookError(Exception):
    """A hook raised, or answered something the harness cannot read; the turn ends with this message."""


@dataclass(frozen=True, slots=True, kw_only=True)
class HookContext:
    """What every hook is told: where it runs. ``step`` counts model calls of the turn from 0."""

    agent: str
    instance: str
    session: str
    operation: str = ""
    step: int = 0


@dataclass(frozen=True, slots=True, kw_only=True)
class TurnContext(HookContext):
    """``before_turn``: the model call about to be made."""

    messages: Sequence[UIMessage]  # the transcript the model is about to see
    system: str | None
    tools: Sequence[str]  # names of the tools offered
    model: Model
    continuation: bool


@dataclass(frozen=True, slots=True, kw_only=True)
class ToolCallContext(HookContext):
    """``before_tool_call`` (no ``output`` yet) and ``after_tool_call`` (``output`` or ``error``)."""

    tool_name: str
    tool_call_id: str
    input: Any  # as the model gave it
    output: Any = None
    error: str | None = None
    action: Literal["run", "block", "substitute"] = "run"  # what before_tool_call decided


@dataclass(frozen=True, slots=True, kw_only=True)
class StepContext(HookContext):
    """``on_step_finish``: one model call is over."""

    message: UIMessage  # the assistant message as it stands
    finish_reason: str
    tool_calls: Sequence[Mapping[str, Any]]  # {"tool_call_id", "tool_name", "input"} of this call
    usage: Usage | None


@dataclass(frozen=True, slots=True, kw_only=True)
class ChunkContext(HookContext):
    """``on_chunk``: one UI chunk the model streamed, as the clients get it."""

    chunk: Mapping[str, Any]


@dataclass(frozen=True, slots=True, kw_only=True)
class ErrorContext(HookContext):
    """``on_error`` and ``classify_error``: a model call failed."""

    error: BaseException
    message: str


@dataclass(frozen=True, slots=True, kw_only=True)
class TurnEndContext(HookContext):
    """``on_turn_end``: the operation settled."""

    status: str  # completed | error | aborted | skipped
    outcome: str | None  # done | unanswered
    reason: str | None
    text: str
    message_ids: Sequence[str]


@dataclass(frozen=True, slots=True, kw_only=True)
class RecoveryContext(HookContext):
    """``on_recovery``: a turn a stopped process left running is about to continue."""

    attempt: int  # interruptions so far, this one included
    message: UIMessage | None  # the partial answer kept from before
    text: str


# -- what hooks answer ------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class TurnConfig:
    """What ``before_turn`` may change for one model call; ``None`` leaves a field as it was."""

    model: Model | str | None = None
    system: str | None = None
    messages: Sequence[UIMessage | Mapping[str, Any]] | None = None
    active_tools: Sequence[str] | None = None
    tool_choice: Any = None
    provider_options: Mapping[str, Any] | None = None
    max_output_tokens: int | None = None
    temperature: float | None = None
    reasoning: Any = None

    @classmethod
    def read(cls, value: object) -> TurnConfig | None:
        if value is None or isinstance(value, TurnConfig):
            return value
        if not isinstance(value, Mapping):
            raise HookError(f"before_turn must return None, a mapping or a TurnConfig; got {type(value).__name__}")
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(str(k) for k in value if k not in known)
        if unknown:
            raise HookError(f"before_turn returned unknown keys {unknown}; known are {sorted(known)}")
        config = cls(**value)
        config.check()
        return config

    def check(self) -> None:
        problems = []
        if self.model is not None and not isinstance(self.model, Model | str):
            problems.append("model must be a Model or a 'provider:argument' string")
        if self.system is not None and not isinstance(self.system, str):
            problems.append("system must be a string")
        if self.active_tools is not None and (isinstance(self.active_tools, str) or not all(
                isinstance(t, str) for t in self.active_tools)):
            problems.append("active_tools must be a list of tool names")
        if self.max_output_tokens is not None and (not isinstance(self.max_output_tokens, int)
                                                   or isinstance(self.max_output_tokens, bool)
                                                   or self.max_output_tokens < 1):
            problems.append("max_output_tokens must be a positive integer")
        if self.temperature is not None and (isinstance(self.temperature, bool)
                                             or not isinstance(self.temperature, int | float)):
            problems.append("temperature must be a number")
        if self.provider_options is not None and not isinstance(self.provider_options, Mapping):
            problems.append("provider_options must be a mapping")
        if self.messages is not None and (isinstance(self.messages, str | bytes)
                                          or not isinstance(self.messages, Sequence)):
            problems.append("messages must be a list of UI messages")
        if problems:
            raise HookError("before_turn returned " + "; ".join(problems))

    def ui_messages(self) -> list[UIMessage] | None:
        if self.messages is None:
            return None
        try:
            return [m if isinstance(m, UIMessage) else UIMessage.model_validate(m) for m in self.messages]
        except ValueError as exc:
            raise HookError(f"before_turn returned messages that are not UI messages: {exc}") from None


@dataclass(frozen=True, slots=True)
class ToolDecision:
    """What ``before_tool_call`` decided: run (perhaps with other input), block, or substitute."""

    action: Literal["run", "block", "substitute"] = "run"
    input: Any = None
    has_input: bool = False
    reason: str | None = None
    output: Any = None

    @classmethod
    def read(cls, value: object) -> ToolDecision:
        if value is None:
            return cls()
        if isinstance(value, ToolDecision):
            return value
        if not isinstance(value, Mapping):
            raise HookError("before_tool_call must return None or a mapping with an 'action'; "
                            f"got {type(value).__name__}")
        action = value.get("action")
        allowed = {"run": {"input"}, "block": {"reason"}, "substitute": {"output"}}
        if action not in allowed:
            raise HookError(f"before_tool_call returned action {action!r}; expected 'run', 'block' or 'substitute'")
        extra = sorted(str(k) for k in value if k != "action" and k not in allowed[action])
        if extra:
            raise HookError(f"before_tool_call returned {extra} with action {action!r}, which takes only "
                            f"{sorted(allowed[action])}")
        if action == "block":
            reason = value.get("reason")
            if reason is not None and not isinstance(reason, str):
                raise HookError("before_tool_call: a block's reason must be a string")
            return cls("block", reason=reason)
        if action == "substitute":
            if "output" not in value:
                raise HookError("before_tool_call: 'substitute' needs an 'output'")
            return cls("substitute", output=value["output"])
        return cls("run", input=value.get("input"), has_input="input" in value)

    def blocked_output(self, tool_name: str) -> str:
        return self.reason if self.reason else f'Tool "{tool_name}" was blocked by before_tool_call.'


def read_classification(value: object) -> Classification:
    if value is None:
        return "fail"
    if value in ("fail", "retry", "context-overflow"):
        return value
    raise HookError(f"classify_error returned {value!r}; expected 'fail', 'retry', 'context-overflow' or None")


def read_recovery_choice(value: object) -> Literal["continue", "abandon"]:
    if value is None or value == "continue":
        return "continue"
    if value == "abandon":
        return "abandon"
    raise HookError(f"on_recovery returned {value!r}; expected 'continue', 'abandon' or None")


# -- calling ----------------------------------------------------------------------------------


async def call_hook(name: str, fn: HookFn, ctx: HookContext) -> Any:
    """``fn(ctx)``, awaited if it is async; a failure is logged and raised as :class:`HookError`."""
    try:
        result = fn(ctx)
        if inspect.isawaitable(result):
            result = await _awaited(result)
        return result
    except (asyncio.CancelledError, HookError):
        raise
    except Exception as exc:
        log.exception("the %s hook failed (agent %r, instance %r, session %r, operation %r)",
                      name, ctx.agent, ctx.instance, ctx.session, ctx.operation)
        raise HookError(f"The {name} hook failed: {type(exc).__name__}: {exc}") from exc


async def _awaited(result: Awaitable[Any]) -> Any:
    return await result
