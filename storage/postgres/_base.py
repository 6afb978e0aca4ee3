"""The shared base of the statement groups: where a statement runs (the pool for reads, the open
transaction's connection for a Tx) and the instance every statement names first."""

from __future__ import annotations

from typing import Any, Protocol

import asyncpg

from .._problems import Problem, StorageError

__all__ = ["Access", "Link", "free_text", "lost_in_transaction"]


class Link(Protocol):
    """Where statements run: ``instance``, the id every statement is keyed by."""

    instance: int

    async def fetch(self, sql: str, *args: Any) -> list[asyncpg.Record]: ...

    async def execute(self, sql: str, *args: Any) -> str: ...

    def defer(self, sql: str, args: tuple[Any, ...]) -> None:
        """Run a write whose result nobody reads by the time the transaction needs it sent (``_tx``)."""
        ...


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

    def _defer(self, sql: str, *args: Any) -> None:
        """A write whose answer nobody needs (``$1``: the instance): sent when the transaction next
        talks to the database, at the latest with its commit (``_tx``); its error is raised then."""
        self._link.defer(sql, (self._link.instance, *args))


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

    def defer(self, sql: str, args: tuple[Any, ...]) -> None:
        raise RuntimeError("a write outside a transaction: use `async with db.transaction() as tx`")
