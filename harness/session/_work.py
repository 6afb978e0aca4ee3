"""Telling whoever keeps the list of instances with open work when one gets some, and when it has none.

The harness does not know about the server's work index; an :class:`Instance`
is given an ``on_work(opened)`` callable and calls it through a
:class:`WorkNotices`. ``on_work(True)`` is awaited **before** the operation
that opens work is written, so a crash at any point after it finds the
instance listed; ``on_work(False)`` once no operation is pending or running
(and nothing else keeps it listed: the instance's ``has_open_work`` says so,
a connected client counting as work, ``Instance.listed``). One lock orders the
two: an instance that drains its work while a new submission arrives ends up listed.
"""

from __future__ import annotations

import asyncio
import enum
import logging
from collections.abc import Awaitable, Callable

__all__ = ["OnWork", "WorkMark", "WorkNotices"]

log = logging.getLogger("think_server.work")

#: ``on_work(True)``: the instance has open work now; ``on_work(False)``: it has none left.
OnWork = Callable[[bool], Awaitable[None]]


class WorkMark(enum.Enum):
    UNKNOWN = "unknown"  # nothing said since the instance was opened: it may be listed or not
    MARKED = "marked"
    UNMARKED = "unmarked"


class WorkNotices:
    def __init__(self, on_work: OnWork | None, has_open_work: Callable[[], bool]) -> None:
        self._on_work = on_work
        self._has_open_work = has_open_work
        self._lock = asyncio.Lock()
        self.mark = WorkMark.UNKNOWN

    async def opened(self) -> None:
        """Before writing an operation: make sure the instance is listed. Raises if that fails:
        an operation must not be accepted that a crash would leave unlisted."""
        if self._on_work is None or self.mark is WorkMark.MARKED:
            return
        async with self._lock:
            if not self._is(WorkMark.MARKED):  # marked while this waited for the lock
                await self._on_work(True)
                self.mark = WorkMark.MARKED

    async def settled(self) -> None:
        """Once work drained: unlist the instance if nothing is open any more. Never raises: a mark
        left behind only costs a reopen at the next start."""
        if self._on_work is None or self.mark is WorkMark.UNMARKED:
            return
        async with self._lock:
            if self._is(WorkMark.UNMARKED) or self._has_open_work():
                return
            # Before the await: a submission arriving meanwhile takes the lock and marks again.
            self.mark = WorkMark.UNMARKED
            try:
                await self._on_work(False)
            except Exception as exc:
                self.mark = WorkMark.UNKNOWN
                log.warning("could not take the instance off the work index: %s", exc)

    def _is(self, mark: WorkMark) -> bool:
        # A method, not an inline test: another task may have changed the mark across an await.
        return self.mark is mark
