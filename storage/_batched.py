"""Writes committed in groups: one at a time in flight, and what was asked for meanwhile goes next,
together, in order (the work index of either backend)."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Generic, TypeVar

__all__ = ["BatchedWrites"]

W = TypeVar("W")


class BatchedWrites(Generic[W]):
    """``write(w)`` returns once ``commit`` has committed a batch holding ``w`` (or raises what that
    commit raised, to every writer of the batch). No timer: an idle writer commits at once."""

    def __init__(self, commit: Callable[[list[W]], Awaitable[None]]) -> None:
        self._commit = commit
        self._queued: list[tuple[W, asyncio.Future[None]]] = []
        self._writer: asyncio.Task[None] | None = None

    async def write(self, write: W) -> None:
        done = asyncio.get_running_loop().create_future()
        self._queued.append((write, done))
        if self._writer is None or self._writer.done():
            self._writer = asyncio.create_task(self._write_queued())
        await done

    async def drain(self) -> None:
        """Until nothing is being written (for a close)."""
        while self._writer is not None and not self._writer.done():
            await asyncio.wait([self._writer])

    async def _write_queued(self) -> None:
        while self._queued:
            batch, self._queued = self._queued, []
            try:
                await self._commit([write for write, _ in batch])
            except Exception as exc:
                for _, done in batch:
                    if not done.done():
                        done.set_exception(exc)
            except BaseException:
                for _, done in batch + self._queued:
                    done.cancel()
                raise
            else:
                for _, done in batch:
                    if not done.done():
                        done.set_result(None)
