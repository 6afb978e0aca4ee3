"""Per-call options every HTTP provider shares: a model setting's defaults, reasoning, known model limits.

A model setting may carry defaults after a ``?`` (``openai:o4-mini?reasoning=low``,
parsed by ``_spec``); they fill only what a :class:`ModelRequest` leaves unset.
``ModelRequest.reasoning`` is an effort (:data:`EFFORTS`) or a thinking budget in
tokens; each provider turns it into its own field with the helpers here, so that
one setting means the same on every provider.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from .._model import ModelRequest

__all__ = [
    "ANTHROPIC_BUDGETS",
    "EFFORTS",
    "RequestDefaults",
    "cut_off_message",
    "effort_of",
    "is_openai_reasoning_model",
    "thinking_budget",
    "with_defaults",
]

#: Reasoning efforts, weakest first. "none" turns reasoning off where a model allows it.
EFFORTS = ("none", "minimal", "low", "medium", "high", "xhigh")

#: Anthropic's thinking budget for each effort (1024 is the smallest budget the API takes).
ANTHROPIC_BUDGETS: dict[str, int] = {"minimal": 1024, "low": 2048, "medium": 8192, "high": 16384,
                                     "xhigh": 32768}

# o1, o3, o4-mini, gpt-5 and its dated or sized variants: OpenAI's reasoning models, which refuse
# ``temperature``. gpt-5-chat and gpt-5.1-chat are the gpt-5 family's non-reasoning chat models.
_OPENAI_REASONING = re.compile(r"^(o\d+(-|$)|gpt-5(?![\w.]*-chat))")


@dataclass(frozen=True, slots=True)
class RequestDefaults:
    """What a model setting fills in where a request leaves a field unset (``None``)."""

    temperature: float | None = None
    max_output_tokens: int | None = None
    reasoning: str | int | None = None


def with_defaults(request: ModelRequest, defaults: RequestDefaults) -> ModelRequest:
    """``request`` with the fields it leaves unset taken from ``defaults``."""
    changes: dict[str, Any] = {}
    for name in ("temperature", "max_output_tokens", "reasoning"):
        if getattr(request, name) is None and getattr(defaults, name) is not None:
            changes[name] = getattr(defaults, name)
    return dataclasses.replace(request, **changes) if changes else request


def is_openai_reasoning_model(model: str) -> bool:
    """OpenAI's o-series and gpt-5 models, also behind a router prefix (``openai/o3``)."""
    return bool(_OPENAI_REASONING.match(model.rsplit("/", 1)[-1].lower()))


def effort_of(reasoning: Any) -> str | None:
    """``ModelRequest.reasoning`` as an OpenAI effort; ``None`` to send none.

    A budget in tokens maps to the effort whose Anthropic budget it reaches (below
    4096 low, below 16384 medium, else high): a setting written for one provider
    still means about as much thinking on another. A budget of 0 sends no effort.
    """
    if isinstance(reasoning, str):
        return reasoning
    if isinstance(reasoning, int) and not isinstance(reasoning, bool) and reasoning > 0:
        if reasoning < 4096:
            return "low"
        return "medium" if reasoning < 16384 else "high"
    return None


def thinking_budget(reasoning: Any) -> int | None:
    """``ModelRequest.reasoning`` as an Anthropic thinking budget; ``None`` for no thinking."""
    if isinstance(reasoning, bool):
        return None
    if isinstance(reasoning, int):
        return reasoning if reasoning > 0 else None
    if isinstance(reasoning, str):
        return ANTHROPIC_BUDGETS.get(reasoning)
    return None


def cut_off_message(tool_names: Sequence[str]) -> str:
    """For the user: the output token limit cut off the input of a tool call, which was not made."""
    named = list(dict.fromkeys(n for n in tool_names if n))
    names = f"tool {', '.join(repr(n) for n in named)}" if named else "a tool call"
    return (f"The model reached its output token limit while writing the input of {names}, so the call "
            "was not made. Raise max_output_tokens, or ask for less at once.")
