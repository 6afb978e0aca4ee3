"""One transaction's way to the database, in as few round trips as it can take.

A round trip costs far more than the statement it carries (on loopback: about 50 µs of this
process's CPU, and a wake-up of the database's backend), and a turn's hot path is a transaction
of one statement: a group of chunks appended. So a transaction talks to the database lazily:

- a write whose answer nobody reads (``Access._defer``: appending chunks, finishing a stream,
  setting a field) is kept, not sent;
- a statement whose answer is read (a read, an insert that says whether it inserted) first takes
  a pooled connection, sends ``BEGIN`` and every kept write, in order, then itself;
- at the end, a transaction that sent nothing and kept one write runs that write alone, which
  PostgreSQL commits by itself (one round trip: atomic as any single statement is); one that
  kept several, or sent anything, sends what it kept and ``COMMIT``. One that did nothing sends
  nothing;
- a lone write of a turn's chunks (``_streams.GROUPED``) commits with those of other instances
  ready at the same moment, one round trip and one commit for them all (``_group``);
- a kept write and the statement after it that one statement can do (``_folds``: a stream's
  insert and its first chunks, say) go as that statement.

What that changes for a caller: a kept write's error (a constraint it breaks) is raised by the
next statement that is sent, or by the commit, inside the same ``async with``; nothing is
committed either way. (PostgreSQL refuses every statement of a transaction after an error
anyway: no caller can go on after one, whenever it is raised.)

The commit, whichever form it takes, runs to its end however the caller is cancelled, and the
caller learns how it went; a connection lost before it was sent is "nothing saved", one lost
while it ran "not known", each a :class:`StorageError` with the problem ``UNREACHABLE``.

The fence: a transaction of an instance this node leases (``lease`` set, see ``_leases``) runs
``fence(instance, epoch)`` before anything it writes, in the same round trip: as a second
statement of the message that sends ``BEGIN`` (both in one simple query: the two numbers are ours),
or, for a lone kept write that commits by itself, in a data-modifying CTE put before the write (which
PostgreSQL always runs, whether or not anything reads it: :func:`fenced_write`). So the hot path
stays one round trip. ``fence()`` locks the lease row ``FOR SHARE`` until the commit
(a taker waits for it) and refuses a stale epoch, which aborts the whole statement or transaction:
that comes out as :class:`LeaseLost`, and the lease is lost from then on (every later transaction
is refused here, before it talks to the database).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

import asyncpg

from .._leases import Lease
from .._problems import Problem, StorageError
from ._base import lost_in_transaction
from ._folds import Fold
from ._group import GroupCommit
from ._leases import is_fence_error, stale
from ._pool import Pool, is_connection_lost
from ._schema import SCHEMA

__all__ = ["TxLink", "fenced_write", "group_commit"]

#: Times a transaction's first message is tried again on a new connection when the one taken turned out
#: to be gone before it was sent (nothing of the transaction has run: trying again is safe).
RETRIES = 2


def never_sent(exc: BaseException) -> bool:
    """Whether asyncpg refused to send on a connection it knows is gone (then the server never saw it)."""
    return isinstance(exc, asyncpg.exceptions.InternalClientError) or (
        isinstance(exc, asyncpg.InterfaceError) and "connection is closed" in str(exc))


class TxLink:
    """The statements of the open transaction (see the module): ``conn`` once it sent ``BEGIN``."""

    def __init__(self, pool: Pool, instance: int) -> None:
        self.pool = pool
        self.instance = instance
        self.conn: asyncpg.Connection | None = None
        self.open = False
        self._kept: list[tuple[str, tuple[Any, ...]]] = []
        #: The lease the transactions are fenced by (None: not fenced; a store without leases).
        self.lease: Lease | None = None
        #: The store's committer of lone writes, and the statements it takes (``_group``): a lone kept
        #: write of one of them commits with those of other instances ready at the same moment.
        self.group: GroupCommit | None = None
        self.grouped: frozenset[str] = frozenset()
        #: Statements that make one with the write kept before them, by their SQL (``_folds``).
        self.folds: Mapping[str, Fold] = {}

    def check_lease(self) -> None:
        """Refuse a transaction of a lease known lost, before it talks to the database."""
        if self.lease is not None and self.lease.lost is not None:
            raise self.lease.error()

    def defer(self, sql: str, args: tuple[Any, ...]) -> None:
        if not self.open:
            raise RuntimeError("a statement of a transaction that has ended")
        self._kept.append(self._folded(sql, args))

    def _folded(self, sql: str, args: tuple[Any, ...]) -> tuple[str, tuple[Any, ...]]:
        """``sql`` with ``args``, or, if it makes one statement with the last write kept, that one
        (the kept write then taken back)."""
        fold = self.folds.get(sql)
        if fold is None or not self._kept:
            return sql, args
        folded = fold(*self._kept[-1], args)
        if folded is None:
            return sql, args
        self._kept.pop()
        return folded

    async def fetch(self, sql: str, *args: Any) -> list[asyncpg.Record]:
        sql, args = self._folded(sql, args)
        conn = await self._sent()
        rows: list[asyncpg.Record] = await _in_transaction(conn.fetch(sql, *args))
        return rows

    async def execute(self, sql: str, *args: Any) -> str:
        sql, args = self._folded(sql, args)
        conn = await self._sent()
        status: str = await _in_transaction(conn.execute(sql, *args))
        return status

    async def _sent(self) -> asyncpg.Connection:
        """The transaction's connection, with ``BEGIN`` and every kept write sent."""
        if not self.open:
            raise RuntimeError("a statement of a transaction that has ended")
        if self.conn is None:
            lease = self.lease
            begin = "BEGIN" if lease is None else f"BEGIN; SELECT {SCHEMA}.fence({self.instance:d}, {lease.epoch:d})"
            self.conn = await self._fenced(_first(self.pool, lambda conn: conn.execute(begin),
                                                  lost=lost_in_transaction, harmless=True))
        kept, self._kept = self._kept, []  # (one failing aborts the transaction: the rest need not go)
        for sql, args in kept:
            await _in_transaction(self.conn.execute(sql, *args))
        return self.conn

    async def commit(self) -> None:
        if self.conn is None and len(self._kept) <= 1:
            if self._kept:
                sql, args = self._kept.pop()
                grouped = self.group is not None and sql in self.grouped
                if self.lease is not None:
                    sql, args = fenced_write(sql, args, self.lease.epoch)
                if grouped and self.group is not None and await self._fenced(self.group.commit(sql, args)) is None:
                    return  # committed in its batch (else the batch was refused: this one goes alone)
                await self._fenced(_to_its_end(_first(self.pool, lambda conn: conn.execute(sql, *args),
                                                      lost=_not_known)))
            return
        conn = await self._sent()
        if conn.is_closed():  # lost before the COMMIT was sent: then it surely was not saved
            raise lost_in_transaction()
        await _to_its_end(conn.execute("COMMIT"))

    async def _fenced(self, sent: Awaitable[Any]) -> Any:
        """``sent``'s answer; ``fence()``'s refusal as :class:`LeaseLost` (the lease lost from now on)."""
        try:
            return await sent
        except asyncpg.PostgresError as exc:
            if self.lease is not None and is_fence_error(exc):
                raise stale(self.lease, exc) from exc
            raise

    async def rollback(self) -> None:
        """Undo what was sent, never hiding the error that led here (the pool closes a connection
        still in a transaction, rather than keep it)."""
        self._kept.clear()
        conn = self.conn
        if conn is not None and not conn.is_closed():
            with contextlib.suppress(Exception):
                await conn.execute("ROLLBACK")

    def end(self) -> None:
        """The transaction is over: its connection back to the pool, anything kept forgotten."""
        self.open = False
        self._kept.clear()
        conn, self.conn = self.conn, None
        if conn is not None:
            self.pool.release(conn)


def group_commit(pool: Pool) -> GroupCommit:
    """A committer of lone writes over ``pool``: each batch sent as a lone write is (``_first``)."""
    return GroupCommit(lambda send: _first(pool, send, lost=_not_known, urgent=True))


def fenced_write(sql: str, args: tuple[Any, ...], epoch: int) -> tuple[str, tuple[Any, ...]]:
    """A write (``$1``: the instance, as in every statement of ours) as one statement that lands only
    under the lease at ``epoch``: ``fence()`` runs in a data-modifying CTE (PostgreSQL runs every one
    to completion, referenced or not; it inserts nothing), beside the write's own CTEs if it has any
    (those may not be nested), and either failing fails the whole statement."""
    fence = (f"fence_ AS (INSERT INTO {SCHEMA}.leases (instance, owner, address, epoch, expires_at) "
             f"SELECT NULL, NULL, NULL, NULL, NULL WHERE {SCHEMA}.fence($1, ${len(args) + 1}) IS NULL)")
    head = sql.lstrip()
    if head[:5].upper() == "WITH ":
        return f"WITH {fence}, {head[5:]}", (*args, epoch)
    return f"WITH {fence} {head}", (*args, epoch)


async def _in_transaction(statement: Awaitable[Any]) -> Any:
    try:
        return await statement
    except Exception as exc:
        if is_connection_lost(exc):
            raise lost_in_transaction(exc) from exc
        raise


def _not_known(exc: BaseException | None = None) -> StorageError:
    cause = "" if exc is None else f" ({type(exc).__name__}: {exc})"
    return StorageError("the connection to the database was lost while a transaction committed, so whether it "
                        f"was saved is not known{cause}", Problem.UNREACHABLE)


async def _first(pool: Pool, send: Callable[[asyncpg.Connection], Awaitable[Any]],
                 lost: Callable[[BaseException | None], StorageError], *, harmless: bool = False,
                 urgent: bool = False) -> Any:
    """Take a pooled connection and ``send`` the transaction's first message on it: tried again on a new
    one if the one taken was gone before it was sent, or (``harmless``: a BEGIN) whenever it was lost.
    Returns the connection if ``send`` began a transaction on it (the caller releases it then), else
    ``send``'s answer (the connection is back in the pool)."""
    for attempt in range(RETRIES + 1):
        conn = await pool.acquire(urgent=urgent)
        try:
            answer = await send(conn)
        except BaseException as exc:
            if not isinstance(exc, asyncpg.PostgresError) or is_connection_lost(exc):
                conn.terminate()  # cut short, or gone: in a state nobody knows, never back to the pool
            pool.release(conn)  # (after the server's own refusal, a constraint say, it is idle and well)
            again = isinstance(exc, Exception) and (never_sent(exc) or (harmless and is_connection_lost(exc)))
            if again and attempt < RETRIES:
                continue
            if isinstance(exc, Exception) and is_connection_lost(exc):
                raise (lost_in_transaction(exc) if never_sent(exc) else lost(exc)) from exc
            raise
        if conn.is_in_transaction():
            return conn
        pool.release(conn)
        return answer
    raise AssertionError("unreachable")


async def _to_its_end(commit: Awaitable[Any]) -> None:
    """Await ``commit`` and tell the caller how it went, even if the caller is cancelled meanwhile.

    Once sent, a COMMIT (or a write committing by itself) runs to its end on the server whatever
    happens to the task. Raising CancelledError here would tell the caller "not committed" for a
    change that was made, so a cancel that arrives now waits for the answer, and lands at the
    caller's next await."""
    task = asyncio.ensure_future(commit)
    cancelled = False
    while True:
        try:
            await asyncio.shield(task)
            break
        except asyncio.CancelledError:
            if task.done() and task.cancelled():
                raise
            cancelled = True
            if task.done():
                break
        except Exception:
            break
    if cancelled:
        current = asyncio.current_task()
        if current is not None:
            current.uncancel()  # one pending cancel, as before, not two
            current.cancel()
    try:
        task.result()  # a failed commit raises its error
    except Exception as exc:
        if is_connection_lost(exc):
            raise (lost_in_transaction(exc) if never_sent(exc) else _not_known(exc)) from exc
        raise
