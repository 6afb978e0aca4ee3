"""Turns that start go before turns that stream: one :class:`StartGate` for the sessions of a process.

Fifty conversations whose messages arrive within a few milliseconds each need their start written (a
transaction on the event loop) and told before their client sees anything. A turn that has told its
start then makes its model call and streams; if the first turns to start stream at once, every later
start waits behind their chunks. So a session counts as *starting* from the moment its idle worker is
woken for new work (:meth:`StartGate.arriving`) until its stream has started, its run has ended, or it
waits for something else first (a debounce); and a turn that has just told its start waits, before its
model call, while any other session is starting, for at most :data:`MAX_WAIT_S`. Alone, nothing waits.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

__all__ = ["MAX_WAIT_S", "StartGate"]

#: The longest a started turn waits for the others' starts: about fifty starts' worth on a busy
#: loop, short beside any real model's time to its first token.
MAX_WAIT_S = 0.05


class StartGate:
    """How many sessions are starting, and a wait until none is."""

    def __init__(self, max_wait_s: float = MAX_WAIT_S) -> None:
        self.max_wait_s = max_wait_s
        self._starting = 0
        self._none_starting: asyncio.Event | None = None  # made by the first wait, on its loop

    @property
    def starting(self) -> int:
        """Sessions counted as starting now."""
        return self._starting

    def arriving(self) -> Callable[[], None]:
        """Count one session as starting; the call returned uncounts it (once, however often called)."""
        self._starting += 1
        counted = True

        def leave() -> None:
            nonlocal counted
            if counted:
                counted = False
                self._starting -= 1
                if not self._starting and self._none_starting is not None:
                    self._none_starting.set()

        return leave

    async def others_started(self) -> None:
        """Wait while any session is starting, for at most ``max_wait_s``; at once if none is."""
        if not self._starting:
            return
        if self._none_starting is None or self._none_starting.is_set():
            self._none_starting = asyncio.Event()
        try:
            async with asyncio.timeout(self.max_wait_s):
                await self._none_starting.wait()
        except TimeoutError:
            pass  # starts that take this long are not held up by one turn's chunks
