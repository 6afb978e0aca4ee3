"""The scripted model: an offline, deterministic :class:`Model` driven by a JSON script.

The script format and its semantics are specified in ``SCRIPTED_MODEL.md``. A rule is
chosen by matching the text of the last user message, a step by counting the tool
results that follow it, and the step's events are streamed as ordinary model events.
The model reads nothing but the request: a restarted server, a retried call or a
continued partial answer all give the same output for the same transcript.
"""

from __future__ import annotations

import asyncio
import copy
import dataclasses
import functools
import json
import os
import re
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, TypeAlias

from pydantic import BaseModel, ConfigDict, Discriminator, Field, Tag, ValidationError, field_validator

from think_server.protocol import ReasoningPart, TextPart, ToolPart, UIMessage, message_text

from .._model import (
    Finish,
    Model,
    ModelError,
    ModelEvent,
    ModelRequest,
    ReasoningDelta,
    ReasoningEnd,
    ReasoningStart,
    TextDelta,
    TextEnd,
    TextStart,
    ToolCall,
    ToolInputDelta,
    ToolInputStart,
)

__all__ = [
    "ErrorEvent",
    "ReasoningEvent",
    "Rule",
    "Script",
    "ScriptError",
    "ScriptEvent",
    "ScriptedModel",
    "TextEvent",
    "ToolCallEvent",
    "ToolCallSpec",
    "WaitEvent",
    "load_script",
    "parse_script",
]

_RESULT_STATES = frozenset({"output-available", "output-error", "output-denied"})
_MISSING = "?"


class ScriptError(ValueError):
    """A script file could not be read, or is not a valid script."""


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class _DeltaEvent(_Strict):
    interval_ms: float = Field(default=0, ge=0)
    end: bool = True
    repeat: int = Field(default=1, ge=1)

    @field_validator("text", "reasoning", mode="before", check_fields=False)
    @classmethod
    def _one_string_is_one_delta(cls, value: Any) -> Any:
        return [value] if isinstance(value, str) else value

    def deltas(self) -> list[str]:
        raise NotImplementedError


class TextEvent(_DeltaEvent):
    """One text part: start, one delta per item (``repeat`` times over), end."""

    text: list[str]

    def deltas(self) -> list[str]:
        return self.text * self.repeat


class ReasoningEvent(_DeltaEvent):
    """One reasoning part, like :class:`TextEvent`."""

    reasoning: list[str]

    def deltas(self) -> list[str]:
        return self.reasoning * self.repeat


class ToolCallSpec(_Strict):
    name: str = Field(min_length=1)
    input: dict[str, Any] = Field(default_factory=dict)
    id: str | None = Field(default=None, min_length=1)


class ToolCallEvent(_Strict):
    tool_call: ToolCallSpec


class WaitEvent(_Strict):
    wait_ms: float = Field(ge=0)
    unless: str | None = Field(default=None, min_length=1)


class ErrorEvent(_Strict):
    error: str


_EVENT_KEYS = ("text", "reasoning", "tool_call", "wait_ms", "error")


def _event_kind(value: Any) -> str | None:
    if isinstance(value, BaseModel):
        value = value.__dict__
    if not isinstance(value, dict):
        return None
    kinds = [key for key in _EVENT_KEYS if key in value]
    return kinds[0] if len(kinds) == 1 else None


ScriptEvent: TypeAlias = Annotated[
    Annotated[TextEvent, Tag("text")]
    | Annotated[ReasoningEvent, Tag("reasoning")]
    | Annotated[ToolCallEvent, Tag("tool_call")]
    | Annotated[WaitEvent, Tag("wait_ms")]
    | Annotated[ErrorEvent, Tag("error")],
    Discriminator(
        _event_kind,
        custom_error_type="event_kind",
        custom_error_message="an event is an object with exactly one of the keys " + ", ".join(_EVENT_KEYS),
    ),
]
Step: TypeAlias = list[ScriptEvent]


class Rule(_Strict):
    """``match``: ``|``-separated words or phrases, or ``*``; ``steps``: one event list per model call."""

    match: str
    steps: list[Step] = Field(min_length=1)
    denied: list[Step] | None = Field(default=None, min_length=1)

    @field_validator("match")
    @classmethod
    def _check_match(cls, value: str) -> str:
        if any(not alt.strip() for alt in value.split("|")):
            raise ValueError("match must be '*' or '|'-separated non-empty words or phrases")
        return value

    def matches(self, text: str) -> bool:
        return _matcher(self.match)(text)


class Script(_Strict):
    rules: list[Rule] = Field(min_length=1)


@functools.lru_cache(maxsize=256)
def _matcher(match: str) -> Callable[[str], bool]:
    alternatives = [alt.strip() for alt in match.split("|")]
    if "*" in alternatives:
        return lambda _text: True
    words = "|".join(re.escape(alt) for alt in alternatives)
    pattern = re.compile(rf"(?<!\w)(?:{words})(?!\w)", re.IGNORECASE)
    return lambda text: pattern.search(text) is not None


def _describe(error: ValidationError, data: Any) -> str:
    lines = []
    for item in error.errors(include_url=False):
        loc, where = list(item["loc"]), ""
        if len(loc) >= 2 and loc[0] == "rules" and isinstance(loc[1], int):
            index = loc[1]
            rules = data.get("rules") if isinstance(data, dict) else None
            rule = rules[index] if isinstance(rules, list) and index < len(rules) else None
            match = rule.get("match") if isinstance(rule, dict) else None
            where = f"rule {index}" + (f" (match {match!r})" if isinstance(match, str) else "")
            loc = loc[2:]
        if len(loc) > 3 and loc[0] in ("steps", "denied") and loc[3] in _EVENT_KEYS:
            del loc[3]  # the union tag, not a field
        path = ""
        for part in loc:
            path += f"[{part}]" if isinstance(part, int) else f".{part}" if path else str(part)
        message = item["msg"].removeprefix("Value error, ")
        lines.append(": ".join(x for x in (where, path, message) if x))
    return "; ".join(lines)


def parse_script(data: Any, source: str = "script") -> Script:
    """Validate a decoded script; :class:`ScriptError` names the rule and what is wrong."""
    try:
        return Script.model_validate(data)
    except ValidationError as error:
        raise ScriptError(f"{source}: invalid script: {_describe(error, data)}") from None


def load_script(path: str | os.PathLike[str]) -> Script:
    """Read and validate a script file."""
    name = os.fspath(path)
    try:
        raw = Path(name).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as error:
        raise ScriptError(f"cannot read script file {name}: {error}") from None
    try:
        data = json.loads(raw)
    except json.JSONDecodeError as error:
        raise ScriptError(f"{name}: invalid JSON: {error}") from None
    return parse_script(data, name)


def _compact(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


def _is_denial(part: ToolPart) -> bool:
    return part.state == "output-denied" or (part.approval is not None and part.approval.approved is False)


_TEMPLATE = re.compile(r"\{(user|system|tools|result(?:\.[^{}]+)?)\}")


@dataclass(frozen=True, slots=True)
class _Turn:
    """What the model reads from the transcript."""

    user: str | None  # text of the last user message
    results: list[ToolPart]  # tool results after the last user message, in order
    present: str | None  # text + reasoning after the last tool result, if continuing
    system: str = ""  # the system prompt of this call
    tools: str = ""  # the names of the tools offered to this call, sorted, comma-separated
    tool_parts: int = 0  # tool parts in the whole transcript: counted only for a step that needs it

    @classmethod
    def read(cls, messages: Sequence[UIMessage], system: str | None = None,
             tools: Sequence[str] = ()) -> _Turn:
        # From the end: a transcript may be parsed as it is read, and a turn needs only its tail.
        last_user = next((i for i in range(len(messages) - 1, -1, -1) if messages[i].role == "user"), -1)
        user = None
        if last_user >= 0:
            user = message_text(messages[last_user])
        parts = [p for m in messages[last_user + 1 :] for p in m.parts]
        results = [p for p in parts if isinstance(p, ToolPart) and p.state in _RESULT_STATES]
        present = None
        if messages and messages[-1].role == "assistant":
            tail = messages[-1].parts
            result_ids = {id(p) for p in results}
            cut = max((i + 1 for i, p in enumerate(tail) if id(p) in result_ids), default=0)
            present = "".join(p.text for p in tail[cut:] if isinstance(p, TextPart | ReasoningPart))
        return cls(user, results, present, system or "", ",".join(sorted(tools)))

    def render(self, template: str) -> str:
        return _TEMPLATE.sub(lambda m: self._value(m.group(1)), template)

    def _value(self, name: str) -> str:
        if name == "user":
            return _MISSING if self.user is None else self.user
        if name == "system":
            return self.system
        if name == "tools":
            return self.tools
        if not self.results:
            return _MISSING
        first = self.results[0]
        if first.state == "output-available" and "output" in first.model_fields_set:
            value: Any = first.output
        elif first.state == "output-error" and first.errorText is not None:
            value = first.errorText
        else:
            return _MISSING
        for key in name.split(".")[1:]:
            if isinstance(value, dict) and key in value:
                value = value[key]
            elif isinstance(value, list) and key.isdigit() and int(key) < len(value):
                value = value[int(key)]
            else:
                return _MISSING
        return value if isinstance(value, str) else _compact(value)


def _resume_point(step: Sequence[ScriptEvent], turn: _Turn) -> tuple[int, int]:
    """(event index, delta index) to start the step at: after the deltas already present."""
    present = turn.present
    if not present:
        return 0, 0
    pos, best = 0, None
    flat = [
        (e, d, delta)
        for e, event in enumerate(step)
        if isinstance(event, TextEvent | ReasoningEvent)
        for d, delta in enumerate(event.deltas())
    ]
    for k, (_e, _d, template) in enumerate(flat, start=1):
        delta = turn.render(template)
        if not present.startswith(delta, pos):
            break
        pos += len(delta)
        if pos == len(present):
            best = k
    if best is None:
        return 0, 0
    if best < len(flat):
        e, d, _ = flat[best]
        return e, d
    return flat[-1][0] + 1, 0


class ScriptedModel(Model):
    """A model that plays a :class:`Script`: offline, deterministic, abortable."""

    #: It reads the transcript back from the end, to the last user message: the harness need
    #: not read older messages from storage for it (it reads them itself when it needs them).
    reads_from_end = True

    def __init__(self, script: Script | dict[str, Any] | str | os.PathLike[str]) -> None:
        if isinstance(script, Script):
            self.script = script
        elif isinstance(script, dict):
            self.script = parse_script(script)
        else:
            self.script = load_script(script)

    @property
    def label(self) -> str:
        return "scripted"

    def _choose(self, turn: _Turn) -> tuple[Rule, Step]:
        text = turn.user or ""
        rule = next((r for r in self.script.rules if r.matches(text)), None)
        if rule is None:
            raise ModelError(f"no rule of the script matches the message {text[:80]!r}")
        i = len(turn.results)
        steps = rule.steps
        if rule.denied is not None and i >= 1 and _is_denial(turn.results[-1]):
            steps, i = rule.denied, i - 1
        return rule, steps[min(i, len(steps) - 1)]

    async def stream(self, request: ModelRequest) -> AsyncIterator[ModelEvent]:
        turn = _Turn.read(request.messages, request.system, [t.name for t in request.tools])
        _rule, step = self._choose(turn)
        if any(isinstance(e, ToolCallEvent) and not e.tool_call.id for e in step):
            # Ids made up for calls count the tool parts of the whole transcript (unique ids).
            load = getattr(request.messages, "load", None)
            if load is not None:
                await load()
            count = sum(isinstance(p, ToolPart) for m in request.messages for p in m.parts)
            turn = dataclasses.replace(turn, tool_parts=count)
        # What the script needs is read: the transcript is not held while the answer streams
        # (a server runs hundreds of these at once).
        del request
        start_event, start_delta = _resume_point(step, turn)
        counters: dict[type[_DeltaEvent], int] = {TextEvent: 0, ReasoningEvent: 0}
        calls = made = 0
        for index, event in enumerate(step):
            if isinstance(event, ToolCallEvent):
                calls += 1
            if index < start_event:
                continue
            if isinstance(event, TextEvent | ReasoningEvent):
                text = isinstance(event, TextEvent)
                part_id = f"{'t' if text else 'r'}-{counters[type(event)]}"
                counters[type(event)] += 1
                yield TextStart(part_id) if text else ReasoningStart(part_id)
                for delta in event.deltas()[start_delta if index == start_event else 0 :]:
                    if event.interval_ms > 0:
                        await asyncio.sleep(event.interval_ms / 1000)
                    delta = turn.render(delta)
                    yield TextDelta(part_id, delta) if text else ReasoningDelta(part_id, delta)
                if event.end:
                    yield TextEnd(part_id) if text else ReasoningEnd(part_id)
            elif isinstance(event, ToolCallEvent):
                spec = event.tool_call
                call_id = spec.id or f"call_{spec.name}_{turn.tool_parts + calls}"
                yield ToolInputStart(call_id, spec.name)
                yield ToolInputDelta(call_id, _compact(spec.input))
                yield ToolCall(call_id, spec.name, copy.deepcopy(spec.input))
                made += 1
            elif isinstance(event, WaitEvent):
                if event.unless is None or not _matcher(event.unless)(turn.user or ""):
                    await asyncio.sleep(event.wait_ms / 1000)
            else:
                raise ModelError(event.error)
        yield Finish("tool-calls" if made else "stop")
