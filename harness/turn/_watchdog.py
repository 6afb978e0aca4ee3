"""The stall watchdog of a model call: a model silent for the stall timeout is interrupted; one that
sends keep-alives while it reasons is not.

Progress (an event, or a byte a provider reports) moves the timer only when less than the timeout is
left on it, and then a tenth further: a model is interrupted after between one and 1.1 timeouts of
silence, and a fast stream re-arms the timer every few seconds rather than per chunk (a cancel and a
heap push each, 15 % of a 10,000-delta turn's CPU when it was).
"""

from __future__ import annotations

import asyncio
from types import TracebackType

__all__ = ["StallWatchdog"]


class StallWatchdog:
    """``async with`` it around a model call; raises :class:`TimeoutError` at the end of a stall. A
    timeout of 0 watches nothing."""

    def __init__(self, stall_s: float) -> None:
        self._stall = stall_s
        self._slack = stall_s / 10
        self._loop = asyncio.get_running_loop()
        self._armed = self._loop.time() + stall_s + self._slack
        self._timeout = asyncio.timeout_at(self._armed if stall_s else None)

    async def __aenter__(self) -> StallWatchdog:
        await self._timeout.__aenter__()
        return self

    async def __aexit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                        tb: TracebackType | None) -> None:
        await self._timeout.__aexit__(exc_type, exc, tb)  # raises TimeoutError for the stall it cut

    def when(self) -> float | None:
        """The loop time the stall is declared at, as things stand (None: no timeout)."""
        return self._timeout.when()

    def progressed(self) -> None:
        if not self._stall:
            return
        now = self._loop.time()
        if self._armed - now < self._stall:
            self._armed = now + self._stall + self._slack
            self._timeout.reschedule(self._armed)
