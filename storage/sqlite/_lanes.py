"""aiosqlite connections that share a few worker threads instead of owning one each.

aiosqlite runs each connection's calls, in order, on a thread of its own. A server with a
thousand open instances then has a thousand threads: each with its stack and, worse, its own
cache of freed memory in malloc (a soak of 500 busy files grew by tens of MB in those caches
alone). Here each connection keeps its order in a *lane*: a queue of calls that whichever
thread of a small shared pool is free runs, one lane on one thread at a time, so a
connection's calls still run one by one and in order, as aiosqlite promises.

A write transaction's calls (``BEGIN IMMEDIATE`` to ``COMMIT``, see
:meth:`LaneConnection.writing`) made while the lane is idle run at once on the event loop's
thread instead: the statements of a state change are short (SQLite appends pages to the WAL)
and a hop to a worker thread and back cost more than the statement. Nothing there may wait:
the file's busy timeout is 0, and ``SqliteDatabase`` waits for another process's lock itself, off
the loop. 50 streams at 50 deltas/s (bench kit, same machine): 490 -> 230 us of server CPU
per chunk. Reads, opening and closing still go to the pool: they may take long.

What stays aiosqlite's: every method, the cursors, the futures. What changes is only who
runs the queue: :class:`LaneConnection` gives the connection a :class:`_Lane` where
aiosqlite keeps its queue, and never starts the thread. Python's ``sqlite3`` connection is
then used from more than one thread (never two at once): it is opened with
``check_same_thread=False``, which is what that flag is for.
"""

from __future__ import annotations

import asyncio
import os
import sqlite3
import threading
from collections import deque
from collections.abc import Callable, Generator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, TypeVar

import aiosqlite
from aiosqlite.core import set_exception, set_result

__all__ = ["WORKERS", "LaneConnection", "lane_connect", "worker_threads"]

#: Threads that run SQLite calls for every open file of the process. SQLite releases the GIL
#: while it works, so a few let reads and commits of several files overlap.
WORKERS = int(os.environ.get("THINK_SQLITE_THREADS", "8"))
#: Calls a lane runs before it lets the other lanes have the thread (fairness between files).
BATCH = 32

_pool: ThreadPoolExecutor | None = None
_pool_lock = threading.Lock()

_Item = tuple[asyncio.Future[Any] | None, Callable[[], Any]]
_T = TypeVar("_T")


def _shared_pool() -> ThreadPoolExecutor:
    global _pool
    with _pool_lock:
        if _pool is None:
            _pool = ThreadPoolExecutor(max_workers=max(1, WORKERS), thread_name_prefix="think-sqlite")
        return _pool


def worker_threads() -> int:
    """How many SQLite worker threads the process has started (at most :data:`WORKERS`)."""
    pool = _pool
    return 0 if pool is None else len(pool._threads)


class _Lane:
    """One connection's calls, in order; run by the shared pool, never by two threads at once."""

    def __init__(self) -> None:
        self._items: deque[_Item] = deque()
        self._lock = threading.Lock()
        self._scheduled = False
        #: Set while the connection is in a write transaction: idle, a call runs on the caller's thread.
        self.inline = False

    def idle(self) -> bool:
        """Whether a call put now runs at once on the caller's thread."""
        return self.inline and self.free()

    def free(self) -> bool:
        """Nothing queued or running: a call made now on the caller's thread overlaps no other."""
        with self._lock:
            return not self._scheduled and not self._items

    def put_nowait(self, item: _Item) -> None:  # aiosqlite's queue interface
        if self.idle():
            _run_here(*item)
            return
        with self._lock:
            self._items.append(item)
            if self._scheduled:
                return
            self._scheduled = True
        _shared_pool().submit(self._drain)

    def _drain(self) -> None:
        for _ in range(BATCH):
            with self._lock:
                future, function = self._items.popleft()  # a drain is scheduled only with work queued
            outcome = _call(function)
            with self._lock:
                more = bool(self._items)
                if not more:
                    # Idle before the caller hears back: its next call may then run inline.
                    self._scheduled = False
            _post(future, outcome)
            if not more:
                return
        _shared_pool().submit(self._drain)  # more to do: behind the other lanes waiting


def _call(function: Callable[[], Any]) -> tuple[bool, Any]:
    try:
        return True, function()
    except BaseException as exc:  # it belongs to the caller, on its loop
        return False, exc


def _post(future: asyncio.Future[Any] | None, outcome: tuple[bool, Any]) -> None:
    """A call's outcome, handed to the loop that waits for it (as aiosqlite's thread does)."""
    if future is not None:
        ok, value = outcome
        future.get_loop().call_soon_threadsafe(set_result if ok else set_exception, future, value)


def _run_here(future: asyncio.Future[Any] | None, function: Callable[[], Any]) -> None:
    """One call on the event loop's thread, its outcome set on its future directly."""
    try:
        result = function()
    except BaseException as exc:
        if future is not None and not future.done():
            future.set_exception(exc)
        return
    if future is not None and not future.done():
        future.set_result(result)


class LaneConnection(aiosqlite.Connection):
    """An aiosqlite connection whose calls run on the shared pool rather than a thread of its own."""

    def __init__(self, connector: Callable[[], sqlite3.Connection], iter_chunk_size: int = 64) -> None:
        # aiosqlite's attributes (0.22), but for the thread and its queue: its __init__ makes a Thread
        # object (never started here) and a queue per connection: 2.3 KiB of every open file, and 3 us.
        self._running = True
        self._connection: sqlite3.Connection | None = None
        self._connector = connector
        self._tx = _Lane()  # type: ignore[assignment]
        self._iter_chunk_size = iter_chunk_size

    def __await__(self) -> Generator[Any, None, aiosqlite.Connection]:
        return self._connect().__await__()  # as aiosqlite's, with no thread to start

    def writing(self, on: bool) -> None:
        """Mark the write transaction open (``BEGIN IMMEDIATE`` done) or over: see the module docstring."""
        lane = self._tx
        if isinstance(lane, _Lane):
            lane.inline = on

    def run_now(self, function: Callable[[sqlite3.Connection], _T]) -> tuple[bool, _T | None]:
        """``(True, function(the sqlite3 connection))`` run at once on the caller's thread if the lane is
        idle (nothing queued, nothing running), else ``(False, None)`` and nothing run: one call with no
        future and no trip, for a short write the caller knows cannot wait (busy timeout 0)."""
        lane, raw = self._tx, self._connection
        if not isinstance(lane, _Lane) or raw is None or not lane.free():
            return False, None
        return True, function(raw)

    async def run(self, function: Callable[[sqlite3.Connection], _T]) -> _T:
        """``function(the sqlite3 connection)``, in the lane's order, as one call (one trip to the pool)."""
        result: _T = await self._execute(function, self._conn)  # type: ignore[no-untyped-call]
        return result

    async def close(self) -> None:
        """As aiosqlite's, in one trip to the pool, not two: its second call stops the connection's
        thread (there is none) and closes the connection again (closed by the first)."""
        if self._connection is None:
            return
        try:
            await self._execute(self._conn.close)  # type: ignore[no-untyped-call]
        finally:
            self._connection = None
            self._running = False

    def runs_here(self) -> bool:
        """Whether the next call runs at once on the loop (writing, nothing queued): awaiting it
        then never suspends the caller, so nothing (a cancel included) can come in between."""
        lane = self._tx
        return isinstance(lane, _Lane) and lane.idle()


def lane_connect(path: Path, *, before: Callable[[], None] | None = None,
                 then: Callable[[sqlite3.Connection], None] | None = None, **kwargs: Any) -> LaneConnection:
    """``aiosqlite.connect(path, **kwargs)``, on the shared pool. ``before`` runs on the pool's thread
    before it connects, ``then`` with the new connection (if it raises, the connection is closed):
    what an open does first and next costs no trip of its own (a hop to a worker thread and back is
    150 us on an idle machine, and more than the work on a busy one)."""
    location = str(path)

    def connector() -> sqlite3.Connection:
        if before is not None:
            before()
        connection: sqlite3.Connection = sqlite3.connect(location, check_same_thread=False, **kwargs)
        if then is not None:
            try:
                then(connection)
            except BaseException:
                connection.close()
                raise
        return connection

    return LaneConnection(connector)
