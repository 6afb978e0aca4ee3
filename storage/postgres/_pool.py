"""The connections to the shared database: a small pool of asyncpg connections, and what a lost one looks like.

Our own pool, not asyncpg's: it hands out the connections themselves, not proxies (a proxy whose
connection died answers every later call with "released back to the pool", which hides what
happened), and it runs no reset query when one comes back (a round trip per transaction and per
read): a connection comes back either idle, or it is closed. One that died while idle in the pool
is noticed when taken (asyncpg reads the server's goodbye) and replaced by a new one.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
from collections.abc import AsyncIterator
from typing import Any
from urllib.parse import urlsplit

import asyncpg

from .._problems import Problem, StorageError
from ._schema import SCHEMA

__all__ = ["CONNECT_TIMEOUT_S", "Pool", "is_connection_lost", "safe_url"]

#: How long making a connection may take before the database counts as unreachable.
CONNECT_TIMEOUT_S = 10.0
#: Prepared statements each connection keeps (asyncpg's default, 100, is about our count of statements).
STATEMENT_CACHE = 500


def safe_url(url: str) -> str:
    """The URL without its password, for messages and logs."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    netloc = parts.netloc.replace(f":{parts.password}@", ":***@", 1)
    return parts._replace(netloc=netloc).geturl()


def is_connection_lost(exc: BaseException) -> bool:
    """Whether ``exc`` says the connection to the server is gone (a retry on a new one may work)."""
    if isinstance(exc, (asyncpg.PostgresConnectionError, asyncpg.exceptions.OperatorInterventionError)):
        return not isinstance(exc, asyncpg.QueryCanceledError)  # 08xxx, 57P01-57P03 (57014 is a statement's own)
    if isinstance(exc, asyncpg.InterfaceError):
        return "closed" in str(exc) or "lost" in str(exc)
    # The protocol stuck in a state it cannot leave: after the server's goodbye (an unsolicited FATAL)
    # and before the socket's end is read, the connection is neither usable nor closed yet.
    return isinstance(exc, (ConnectionError, asyncpg.exceptions.InternalClientError))


class Pool:
    """At most ``size`` connections to ``url``, made when first needed and kept while they live."""

    def __init__(self, url: str, size: int, *, idle_in_transaction_s: float | None = None) -> None:
        if size < 1:
            raise ValueError(f"a pool needs at least one connection; got size {size}")
        self.url = url
        self.size = size
        # With leases: a node stopped (SIGSTOP, a hung loop) inside a transaction holds its instance's
        # fence, and a taker waits for it; the database ends such a session after this long.
        self._settings = {"search_path": f"{SCHEMA}, public", "application_name": "think-server"}
        if idle_in_transaction_s is not None:
            self._settings["idle_in_transaction_session_timeout"] = str(int(idle_in_transaction_s * 1000))
        self._idle: list[asyncpg.Connection] = []
        self._free = size
        # Those waiting for a connection, in order; the urgent ones (the group commit of every
        # instance's chunks, ``_group``) before the rest.
        self._waiting: collections.deque[asyncio.Future[None]] = collections.deque()
        self._urgent: collections.deque[asyncio.Future[None]] = collections.deque()
        self._closed = False

    async def connect(self) -> asyncpg.Connection:
        """A new connection, ours on the search path; StorageError(UNREACHABLE) if it cannot be made."""
        try:
            conn: asyncpg.Connection = await asyncpg.connect(
                self.url, timeout=CONNECT_TIMEOUT_S, statement_cache_size=STATEMENT_CACHE,
                server_settings=self._settings)
        except (OSError, asyncpg.PostgresError, asyncpg.InterfaceError) as exc:
            raise StorageError(f"cannot connect to the database {safe_url(self.url)}: {exc}",
                               Problem.UNREACHABLE) from exc
        return conn

    async def acquire(self, *, urgent: bool = False) -> asyncpg.Connection:
        """A connection, once one of the ``size`` is free; ``urgent``: before those who wait without."""
        if self._closed:
            raise StorageError("the database's connections are closed", Problem.UNREACHABLE)
        await self._slot(urgent)
        try:
            while self._idle:
                conn = self._idle.pop()
                if not conn.is_closed():
                    return conn
            return await self.connect()
        except BaseException:
            self._give_back()
            raise

    async def _slot(self, urgent: bool) -> None:
        if self._free > 0 and not self._urgent and (urgent or not self._waiting):
            self._free -= 1
            return
        queue = self._urgent if urgent else self._waiting
        handed: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        queue.append(handed)
        try:
            await handed
        except asyncio.CancelledError:
            if handed.done() and not handed.cancelled():
                self._give_back()  # handed over just as the waiter was cancelled: the next one's
            else:
                queue.remove(handed)
            raise

    def _give_back(self) -> None:
        """A slot given up: handed to the first waiting (urgent first), else free."""
        for queue in (self._urgent, self._waiting):
            while queue:
                handed = queue.popleft()
                if not handed.done():
                    handed.set_result(None)
                    return
        self._free += 1

    def release(self, conn: asyncpg.Connection) -> None:
        """Take a connection back: kept if it is idle and open, else closed (never another's transaction)."""
        try:
            if self._closed or conn.is_closed() or conn.is_in_transaction():
                conn.terminate()
            else:
                self._idle.append(conn)
        finally:
            self._give_back()

    @contextlib.asynccontextmanager
    async def connection(self) -> AsyncIterator[asyncpg.Connection]:
        """A connection for one statement outside a transaction; one cut short by a cancel is closed."""
        conn = await self.acquire()
        try:
            yield conn
        except BaseException as exc:
            # A statement asyncpg is cancelling, or a connection that is gone: not for the next user.
            if isinstance(exc, asyncio.CancelledError) or is_connection_lost(exc):
                conn.terminate()
            raise
        finally:
            self.release(conn)

    async def fetch(self, sql: str, *args: Any, retries: int = 2) -> list[asyncpg.Record]:
        """Rows of a read outside any transaction, tried again on a new connection if the one it ran on
        was lost (a read changes nothing: running it twice is safe)."""
        for attempt in range(retries + 1):
            try:
                async with self.connection() as conn:
                    rows: list[asyncpg.Record] = await conn.fetch(sql, *args)
                    return rows
            except Exception as exc:
                lost = is_connection_lost(exc) or (isinstance(exc, StorageError)
                                                   and exc.problem is Problem.UNREACHABLE and not self._closed)
                if not lost or attempt == retries:
                    raise
                await asyncio.sleep(0.05 * attempt)
        raise AssertionError("unreachable")

    async def close(self) -> None:
        """Close every connection now idle; those in use close when they come back."""
        self._closed = True
        idle, self._idle = self._idle, []
        for conn in idle:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(conn.close(), 5)
            conn.terminate()
