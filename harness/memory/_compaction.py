"""Compaction: what a model is shown of a long conversation, without changing what is stored.

A compaction is an overlay: a summary that stands, in what a model reads, for the messages of
the active path from one message to another. The messages stay stored, in ``get-messages`` and
in search. The newest overlay whose both ends are on the path wins; a new one on a path that
has one starts where that one starts and passes its summary to the summariser, so one summary
grows with the conversation.

Where a summary may stand: never over the first message (it opens the conversation, and a
provider may want a user message first), never over the last user message, and never
splitting a tool call from its result (they are one part of one assistant message, and the
kept end of the path starts at a user message). What is kept verbatim at the end is at least
:attr:`Compaction.keep_messages` messages and about :attr:`Compaction.keep_tokens` tokens.

Tokens are estimated as a quarter of the JSON text's characters: no tokenizer, the same
estimate for every provider, and an overestimate for prose (the JSON has its keys).

What a model reads is also shortened where old: tool outputs of messages before the last
:data:`RECENT` are cut to :attr:`Compaction.old_tool_output_chars`, their texts to
:attr:`Compaction.old_text_chars` (read-time only, as the summary is).
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any

from think_server.protocol import TextPart, ToolPart, UIMessage, shorten_value
from think_server.storage import CompactionRow

from .._model import Model, ModelRequest, TextDelta
from ._history import MessageSequence

__all__ = [
    "Compaction",
    "CompactionError",
    "ModelView",
    "SummaryRequest",
    "estimate_tokens",
    "overlay_on",
    "plan_compaction",
    "render_for_summary",
    "summarize_with",
]

#: Messages at the end of what a model reads that are never shortened at read time.
RECENT = 4
_USER = 0

SUMMARY_SYSTEM = (
    "You summarize conversations so that they can go on without their older messages. Write a "
    "concise summary with these sections: Topic, Key points (facts, decisions, names, numbers, "
    "what the user wants), Current state, Open items. Keep what the assistant will need later; "
    "leave out greetings and repetition. If a previous summary is given, fold the new messages "
    "into it. Answer with the summary only."
)


class CompactionError(Exception):
    """A compaction could not be made (the summariser failed or gave nothing)."""


@dataclass(frozen=True, slots=True)
class SummaryRequest:
    """What a summariser is asked: the messages to fold in, and the summary they follow (if any)."""

    messages: list[UIMessage]
    previous_summary: str | None
    session: str
    #: The default prompt's text: the previous summary and the messages, rendered as plain text.
    prompt: str


SummarizeFn = Callable[[SummaryRequest], Awaitable[str] | str]


@dataclass(frozen=True)
class Compaction:
    """How an agent's conversations are compacted (``Agent(compaction=Compaction(...))``).

    ``after_tokens`` / ``after_messages``: compact when, after an operation, what the model
    would read is estimated over that many tokens / holds over that many messages (None: only
    on demand, ``compact()``, and when the model says its context is full).
    ``keep_tokens`` / ``keep_messages``: what stays verbatim at the end, at least.
    ``summarize``: ``fn(SummaryRequest) -> str`` (sync or async); None asks the agent's own model
    with :data:`SUMMARY_SYSTEM` and ``request.prompt``.
    """

    after_tokens: int | None = None
    after_messages: int | None = None
    keep_tokens: int = 4_000
    keep_messages: int = 4
    summarize: SummarizeFn | None = None
    old_tool_output_chars: int = 500
    old_text_chars: int = 10_000
    #: The most characters of conversation one summary request renders (the newest are kept).
    max_summary_input_chars: int = 200_000

    def __post_init__(self) -> None:
        for name in ("after_tokens", "after_messages"):
            value = getattr(self, name)
            if value is not None and value < 1:
                raise ValueError(f"Compaction({name}=...) must be at least 1 (or None), got {value}")
        if self.keep_messages < 2:
            raise ValueError(f"Compaction(keep_messages=...) must be at least 2, got {self.keep_messages}")
        if self.keep_tokens < 0 or self.old_tool_output_chars < 50 or self.old_text_chars < 100:
            raise ValueError("Compaction: keep_tokens >= 0, old_tool_output_chars >= 50, old_text_chars >= 100")

    def due(self, tokens: int, messages: int) -> bool:
        return ((self.after_tokens is not None and tokens > self.after_tokens)
                or (self.after_messages is not None and messages > self.after_messages))


def estimate_tokens(chars: int) -> int:
    return (chars + 3) // 4


def overlay_on(rows: Sequence[CompactionRow], ids: Sequence[str]) -> tuple[int, int, CompactionRow] | None:
    """The overlay a model reading ``ids`` sees: (first index, last index, row) of the newest
    compaction whose both ends are on the path, in order; None if there is none."""
    if not rows:
        return None
    where = {mid: i for i, mid in enumerate(ids)}
    for row in reversed(rows):
        start, end = where.get(row.from_message_id), where.get(row.to_message_id)
        if start is not None and end is not None and start <= end:
            return start, end, row
    return None


def visible_tokens(sizes: Sequence[int], overlay: tuple[int, int, CompactionRow] | None) -> int:
    """Estimated tokens of what a model reads of a path with this overlay."""
    chars = sum(sizes)
    if overlay is not None:
        start, end, row = overlay
        chars += len(row.summary) - sum(sizes[start:end + 1])
    return estimate_tokens(chars)


def plan_compaction(roles: bytes, sizes: Sequence[int], settings: Compaction,
                    current: tuple[int, int, CompactionRow] | None) -> tuple[int, int] | None:
    """(first, last) index of the messages a new summary stands for, or None if nothing may be
    summarised that is not already (see the module's doc for where a summary may stand)."""
    n = len(roles)
    last_user = roles.rfind(bytes([_USER]))
    if last_user <= 0:
        return None
    tail, chars = n, 0
    while tail > 0 and (estimate_tokens(chars) < settings.keep_tokens or n - tail < settings.keep_messages):
        tail -= 1
        chars += sizes[tail]
    tail = min(tail, last_user)
    while tail > 0 and roles[tail] != _USER:  # the kept end starts with a user message
        tail -= 1
    start = current[0] if current is not None else 1
    end = tail - 1
    if end < start or (current is not None and end <= current[1]):
        return None
    return start, end


def summary_message(row: CompactionRow) -> UIMessage:
    return UIMessage(id=f"compaction_{row.id}", role="assistant",
                     parts=[TextPart(text=f"[Summary of the earlier conversation]\n{row.summary}")])


def _shortened(msg: UIMessage, settings: Compaction) -> UIMessage:
    """``msg`` with long tool outputs and texts cut, for a model reading old messages."""
    changed = False
    parts: list[Any] = []
    for part in msg.parts:
        if isinstance(part, ToolPart) and part.state == "output-available" and part.output is not None:
            if len(json.dumps(part.output, ensure_ascii=False)) > settings.old_tool_output_chars:
                part = part.model_copy(update={"output": shorten_value(part.output, settings.old_tool_output_chars)})
                changed = True
        elif isinstance(part, TextPart) and len(part.text) > settings.old_text_chars:
            cut = len(part.text) - settings.old_text_chars
            part = part.model_copy(update={"text": part.text[:settings.old_text_chars] + f"… [{cut} chars left out]"})
            changed = True
        parts.append(part)
    return msg.model_copy(update={"parts": parts}) if changed else msg


class ModelView(MessageSequence):
    """What a model reads: the transcript with the overlay's range replaced by its summary, and
    older messages shortened; each message made as it is read (the transcript parses on read)."""

    __slots__ = ("_cut", "_inner", "_settings", "_start", "_summary")

    def __init__(self, inner: Sequence[UIMessage], overlay: tuple[int, int, CompactionRow] | None,
                 settings: Compaction) -> None:
        self._inner = inner
        self._settings = settings
        if overlay is None:
            self._start, self._cut, self._summary = len(inner), 0, None
        else:
            start, end, row = overlay
            self._start, self._cut, self._summary = start, end - start, summary_message(row)

    def __len__(self) -> int:
        return len(self._inner) - self._cut

    async def load(self, start: int = 0) -> None:
        """Read from storage what a model reading from ``start`` on needs (as ParsedOnRead does)."""
        load = getattr(self._inner, "load", None)
        if load is not None:
            await load(start if start < self._start else start + self._cut)

    def _at(self, index: int) -> UIMessage:
        if self._summary is not None and index == self._start:
            return self._summary
        msg = self._inner[index if index < self._start else index + self._cut]
        return _shortened(msg, self._settings) if index < len(self) - RECENT else msg


def render_for_summary(messages: Sequence[UIMessage], previous: str | None, limit: int) -> str:
    """The messages as plain text for a summariser (tool outputs and long texts cut), the newest
    kept within ``limit`` characters, after the previous summary."""
    lines: list[str] = []
    for m in messages:
        for part in m.parts:
            if isinstance(part, TextPart) and part.text.strip():
                text = part.text if len(part.text) <= 4000 else part.text[:4000] + " …"
                lines.append(f"{m.role}: {text}")
            elif isinstance(part, ToolPart):
                name = part.tool_name
                shown = json.dumps(shorten_value(part.output, 300), ensure_ascii=False) \
                    if part.state == "output-available" else part.state
                lines.append(f"{m.role}: [tool {name}({json.dumps(shorten_value(part.input, 200))}) -> {shown}]")
    body, used = [], 0
    for line in reversed(lines):
        if used + len(line) > limit:
            break
        body.append(line)
        used += len(line) + 1
    head = f"Previous summary:\n{previous}\n\n" if previous else ""
    return f"{head}Messages to summarize:\n" + "\n".join(reversed(body))


async def summarize_with(model: Model, request: SummaryRequest) -> str:
    """The default summariser: the agent's own model, asked once, its text is the summary."""
    text: list[str] = []
    stream = model.stream(ModelRequest(messages=[UIMessage(id="summary-request", role="user",
                                                           parts=[TextPart(text=request.prompt)])],
                                       system=SUMMARY_SYSTEM))
    try:
        async for event in stream:
            if isinstance(event, TextDelta):
                text.append(event.delta)
    finally:
        aclose = getattr(stream, "aclose", None)
        if aclose is not None:
            await aclose()
    return "".join(text).strip()
