"""How an answer ended, kept with the answer: the ``think`` key of its message's metadata.

A page that reloads, or a second tab, reads the message as stored: what it shows of the turn
("Stopped", the error and its Retry, "Thought for N s") must be there, not in the memory of
the tab that watched it stream. The key is the server's own: a user's metadata beside it is
merged with, never replaced (the AI SDK's ``mergeObjects``, which the hook applies to a
``message-metadata`` chunk, and the assembler's merge do the same).

``{"think": {"outcome": "stopped" | "failed", "error": "<the text the user is shown>",
"reasoning_ms": [<ms of the 1st reasoning part>, <2nd>, ...]}}``; ``reasoning_ms[n]`` is null
for a part whose start this server did not see (one streamed before a crash).
"""

from __future__ import annotations

from typing import Any

from think_server.protocol import UIMessage

from .._outcomes import describe_reason

__all__ = ["THINK_KEY", "ReasoningTimes", "outcome_mark", "think_of", "without_outcome"]

#: The metadata key the server writes under.
THINK_KEY = "think"


def think_of(metadata: dict[str, Any] | None) -> dict[str, Any]:
    """The server's part of a message's metadata (empty when it has none)."""
    value = (metadata or {}).get(THINK_KEY)
    return value if isinstance(value, dict) else {}


def outcome_mark(status: str, reason: str | None) -> dict[str, Any] | None:
    """The mark of a turn that ended ``status`` (an operation status) for ``reason``; None: no mark."""
    if status == "aborted":
        return {"outcome": "stopped"}
    if status == "error":
        return {"outcome": "failed", "error": describe_reason(reason)}
    return None


def without_outcome(message: UIMessage) -> UIMessage | None:
    """A copy of ``message`` with no outcome mark (a turn goes on in it); None when it has none."""
    think = think_of(message.metadata)
    if "outcome" not in think and "error" not in think:
        return None
    kept = {k: v for k, v in think.items() if k not in ("outcome", "error")}
    metadata = {k: v for k, v in (message.metadata or {}).items() if k != THINK_KEY}
    if kept:
        metadata[THINK_KEY] = kept
    return message.model_copy(update={"metadata": metadata or None})


class ReasoningTimes:
    """When each reasoning part of a turn started, to say how long it took once it ends."""

    def __init__(self) -> None:
        self._open: dict[str, tuple[int, int]] = {}  # chunk id -> (ordinal among reasoning parts, start ms)

    def started(self, chunk_id: str, ordinal: int, now_ms: int) -> None:
        self._open[chunk_id] = (ordinal, now_ms)

    def ended(self, chunk_id: str, now_ms: int, metadata: dict[str, Any] | None) -> list[int | None] | None:
        """The message's durations with this part's added (for a ``message-metadata`` chunk); None
        when its start was not seen here."""
        opened = self._open.pop(chunk_id, None)
        if opened is None:
            return None
        ordinal, started = opened
        known = think_of(metadata).get("reasoning_ms")
        times: list[int | None] = [t if isinstance(t, int) else None for t in known] if isinstance(known, list) else []
        times += [None] * (ordinal + 1 - len(times))
        times[ordinal] = max(0, now_ms - started)
        return times
