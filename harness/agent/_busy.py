"""What a session does with input that arrives while it is busy (README "When the user types
while the agent works").

A session is busy while an operation runs or waits in its queue. The strategy applies to new
input only (not to regenerations, tool answers or continuations), is chosen per agent
(``Agent(when_busy=...)``) and may be overridden per submission; it is written with the
operation, so a restart keeps to it.
"""

from __future__ import annotations

from typing import Final, Literal, TypeAlias

__all__ = ["DEFAULT_DEBOUNCE_MS", "WHEN_BUSY", "WhenBusy", "check_when_busy"]

WhenBusy: TypeAlias = Literal["queue", "latest", "merge", "drop", "debounce", "interrupt", "steer"]

#: Every strategy, in the README's order.
WHEN_BUSY: Final[tuple[WhenBusy, ...]] = ("queue", "latest", "merge", "drop", "debounce", "interrupt", "steer")

#: How long a debounced input waits for the user to stop typing, from the newest one.
DEFAULT_DEBOUNCE_MS: Final = 750


def check_when_busy(value: object, what: str = "when_busy") -> WhenBusy:
    """``value`` if it names a strategy; ValueError naming the strategies otherwise."""
    if isinstance(value, str) and value in WHEN_BUSY:
        return value
    raise ValueError(f"{what}: expected one of {', '.join(WHEN_BUSY)}; got {value!r:.60}")
