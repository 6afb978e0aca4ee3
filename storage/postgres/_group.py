"""Group commit across instances: the lone chunk-group appends of every instance, ready at one
moment, committed together in one round trip.

When chunks trickle (many sessions, each a few deltas at a time), every chunk group is a
transaction of its own, and each commit costs PostgreSQL far more of its own CPU (60-120 µs) than
the row it writes. A transaction that is one such append (``_tx``: a lone kept write, fenced or
not) is handed to the store's :class:`GroupCommit`: the first goes at once; those that arrive
while it is in flight wait for it, and then go together, as one ``executemany`` of their common
statement (asyncpg pipelines it, one round trip, and runs it as one transaction: all or nothing).
No timer: an idle store sends each at once, a busy one batches by itself.

Each caller learns its own batch's outcome (chunks are stored before any client sees them). A batch
the database refuses (one instance's fence found its epoch stale, one row broke a constraint, a
deadlock) saved nothing: every write of it is then run alone by its own caller, so the others
commit and the one at fault gets its own error. A lost connection is what it is for a lone write
(``_tx``): tried again on a new one if nothing was sent, else "not known" to every caller.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import asyncpg

from ._pool import is_connection_lost

__all__ = ["ALONE", "GroupCommit", "Send"]

#: Sends one message on a pooled connection and returns its answer (see ``GroupCommit.__init__``).
Send = Callable[[Callable[[asyncpg.Connection], Awaitable[Any]]], Awaitable[Any]]


class _Alone:
    """The outcome that says: the batch was refused, nothing of it saved; run this write alone."""

    def __repr__(self) -> str:
        return "ALONE"


ALONE = _Alone()


@dataclass(eq=False)
class _Write:
    sql: str
    args: tuple[Any, ...]
    done: asyncio.Future[_Alone | None] = field(default_factory=lambda: asyncio.get_running_loop().create_future())
    #: Taken into a batch: from then on it may be committed, whatever happens to its caller.
    taken: bool = False


class GroupCommit:
    """The store's committer of lone writes (see the module); one batch in flight at a time."""

    def __init__(self, send_first: Send) -> None:
        # How a lone write is sent (``_tx``: a pooled connection, tried again if it was gone before
        # anything was sent, "not known" if lost while it ran); given, as ``_tx`` is what uses this.
        self._send_first = send_first
        self._queued: list[_Write] = []
        self._sender: asyncio.Task[None] | None = None
        #: Batches sent, and writes in them (for tests and the curious).
        self.batches = 0
        self.writes = 0

    async def commit(self, sql: str, args: tuple[Any, ...]) -> _Alone | None:
        """Commit ``sql`` with ``args`` in the next batch: None once committed; :data:`ALONE` if the
        batch was refused (nothing saved: the caller runs it alone); an error if the connection was
        lost. A caller cancelled before its write was taken into a batch withdraws it (nothing saved);
        once taken, the cancel waits for the batch's answer (as a lone commit's does, ``_tx``)."""
        write = _Write(sql, args)
        self._queued.append(write)
        if self._sender is None or self._sender.done():
            self._sender = asyncio.create_task(self._send_queued())
        try:
            return await asyncio.shield(write.done)
        except asyncio.CancelledError:
            if not write.taken:
                self._queued.remove(write)
                write.done.cancel()
                raise
        # Taken: the answer comes first; the cancel lands at the caller's next await.
        outcome = await _answer(write.done)
        current = asyncio.current_task()
        if current is not None:
            current.uncancel()
            current.cancel()
        return outcome

    async def _send_queued(self) -> None:
        while self._queued:
            batch, self._queued = self._queued, []
            groups: dict[str, list[_Write]] = {}
            for write in batch:
                write.taken = True
                groups.setdefault(write.sql, []).append(write)
            await asyncio.gather(*(self._send(sql, writes) for sql, writes in groups.items()))

    async def _send(self, sql: str, writes: list[_Write]) -> None:
        self.batches += 1
        self.writes += len(writes)
        try:
            if len(writes) == 1:
                await self._send_first(lambda conn: conn.execute(sql, *writes[0].args))
            else:
                await self._send_first(lambda conn: conn.executemany(sql, [w.args for w in writes]))
        except asyncpg.PostgresError as exc:
            if len(writes) == 1 or is_connection_lost(exc):
                _fail(writes, exc)
            else:  # refused, nothing of it saved: each goes alone, and only the one at fault fails
                for write in writes:
                    if not write.done.done():
                        write.done.set_result(ALONE)
        except Exception as exc:
            _fail(writes, exc)
        except BaseException:  # the loop is going away: nobody will learn more
            for write in writes:
                write.done.cancel()
            raise
        else:
            for write in writes:
                if not write.done.done():
                    write.done.set_result(None)

    def __repr__(self) -> str:
        return f"GroupCommit(batches={self.batches}, writes={self.writes})"


def _fail(writes: list[_Write], exc: BaseException) -> None:
    for write in writes:
        if not write.done.done():
            write.done.set_exception(exc)


async def _answer(done: Awaitable[_Alone | None]) -> _Alone | None:
    """``done``'s answer, however often the caller is cancelled meanwhile."""
    while True:
        try:
            return await asyncio.shield(done)
        except asyncio.CancelledError:
            if isinstance(done, asyncio.Future) and done.cancelled():
                raise
