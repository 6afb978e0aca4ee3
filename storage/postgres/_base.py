"""The shared base of the statement groups: where a statement runs (the pool for reads, the open
transaction's connection for a Tx) and the instance every statement names first."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any, Protocol

import asyncpg

from .._problems import Problem, StorageError
from ._pool import is_connection_lost

__all__ = ["Access", "Link", "free_text", "lost_in_transaction"]


class Link(Protocol):
    """Where statements run: ``instance``, the id every statement is keyed by."""

    instance: int

    async def fetch(self, sql: str, *args: Any) -> list[asyncpg.Record]: ...

    async def execute(self, sql: str, *args: Any) -> str: ...

    async def executemany(self, sql: str, rows: Iterable[Sequence[Any]]) -> None: ...


def lost_in_transaction(exc: BaseException | None = None) -> StorageError:
    """The error of a transaction whose connection was lost before its COMMIT was sent."""
    cause = "" if exc is None else f" ({type(exc).__name__}: {exc})"
    return StorageError(f"the connection to the database was lost during a transaction, so nothing of it was "
                        f"saved{cause}", Problem.UNREACHABLE)


def free_text(value: str | None) -> str | None:
    """Text a model or a tool wrote (an answer, a summary, a memory block, an error), as PostgreSQL can
    hold it: its text type holds every character but U+0000, so one is kept as U+FFFD (a turn whose
    answer held one would otherwise fail to settle). Keys and ids never get here with one: the
    harness refuses control characters in them."""
    return value.replace("\x00", "\ufffd") if value is not None and "\x00" in value else value


class Access:
    """Statements on a link. Subclasses group them by concern; ``self._i`` is the instance's id."""

    def __init__(self, link: Link) -> None:
        self._link = link

    @property
    def _i(self) -> int:
        return self._link.instance

    async def _fetch(self, sql: str, *args: Any) -> list[asyncpg.Record]:
        return await self._link.fetch(sql, self._link.instance, *args)

    async def _fetchrow(self, sql: str, *args: Any) -> asyncpg.Record | None:
        """The first row of a statement that answers at most one (a key, an aggregate, LIMIT 1)."""
        rows = await self._link.fetch(sql, self._link.instance, *args)
        return rows[0] if rows else None

    async def _execute(self, sql: str, *args: Any) -> int:
        """Run one statement (``$1``: the instance); the number of rows it changed."""
        status = await self._link.execute(sql, self._link.instance, *args)
        return changed_rows(status)

    async def _executemany(self, sql: str, rows: Iterable[Sequence[Any]]) -> None:
        instance = self._link.instance
        await self._link.executemany(sql, [(instance, *row) for row in rows])


def changed_rows(status: str) -> int:
    """The row count of a command tag: ``INSERT 0 1``, ``UPDATE 3``, ``DELETE 0``."""
    count = status.rpartition(" ")[2]
    return int(count) if count.isdigit() else 0


class ReadLink:
    """Reads of settled rows, each on a pooled connection (tried again if the connection was lost)."""

    def __init__(self, db: Any) -> None:
        self._db = db
        self.instance: int = db.instance

    async def fetch(self, sql: str, *args: Any) -> list[asyncpg.Record]:
        self._db.check_open()
        rows: list[asyncpg.Record] = await self._db.pool.fetch(sql, *args)
        return rows

    async def execute(self, sql: str, *args: Any) -> str:
        raise RuntimeError("a write outside a transaction: use `async with db.transaction() as tx`")

    async def executemany(self, sql: str, rows: Iterable[Sequence[Any]]) -> None:
        raise RuntimeError("a write outside a transaction: use `async with db.transaction() as tx`")


class TxLink:
    """The open transaction's connection (``conn``: set from BEGIN to its end)."""

    def __init__(self, instance: int) -> None:
        self.instance = instance
        self.conn: asyncpg.Connection | None = None

    def _open(self) -> asyncpg.Connection:
        if self.conn is None:
            raise RuntimeError("a statement of a transaction that has ended")
        return self.conn

    async def fetch(self, sql: str, *args: Any) -> list[asyncpg.Record]:
        try:
            rows: list[asyncpg.Record] = await self._open().fetch(sql, *args)
        except Exception as exc:
            if is_connection_lost(exc):
                raise lost_in_transaction(exc) from exc
            raise
        return rows

    async def execute(self, sql: str, *args: Any) -> str:
        try:
            status: str = await self._open().execute(sql, *args)
        except Exception as exc:
            if is_connection_lost(exc):
                raise lost_in_transaction(exc) from exc
            raise
        return status

    async def executemany(self, sql: str, rows: Iterable[Sequence[Any]]) -> None:
        try:
            await self._open().executemany(sql, rows)
        except Exception as exc:
            if is_connection_lost(exc):
                raise lost_in_transaction(exc) from exc
            raise
